/* The default bound of a debounce (mcp_watch_default_max_delay()), the one
 * rule every module that debounces uses when its options give none. */
#include "mcp_int.h"
#include "mcp/engine.h"

mcp_tstamp mcp_watch_default_max_delay(mcp_tstamp debounce) {
  if (debounce == 0)
    return 0;
  /* Saturates instead of wrapping for a debounce beyond 1/10 of the range. */
  mcp_tstamp ten = debounce > MCP_TSTAMP_MAX / 10 ? MCP_TSTAMP_MAX
                                                  : debounce * 10;
  return ten < MCP_SECONDS ? MCP_SECONDS : ten;
}
