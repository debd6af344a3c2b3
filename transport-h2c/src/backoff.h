/* Reconnection backoff: pure arithmetic, randomness injected. */
#ifndef MCP_H2C_BACKOFF_H
#define MCP_H2C_BACKOFF_H

#include "mcp/h2c.h"

typedef struct mcp_h2c_backoff {
  mcp_h2c_backoff_options o;
  mcp_tstamp nominal; /* delay before jitter of the next attempt */
  mcp_rand_fn rand;
  void *rand_user_data;
} mcp_h2c_backoff;

/* |o| is copied; NULL members or zero fields take the defaults. */
void mcp_h2c_backoff_init(mcp_h2c_backoff *b,
                          const mcp_h2c_backoff_options *o,
                          mcp_rand_fn rand, void *rand_user_data);

/* The delay before the next attempt (jittered, at most o.max); grows the
 * nominal delay for the one after. */
mcp_tstamp mcp_h2c_backoff_next(mcp_h2c_backoff *b);

/* A stream that lasted |lived| and received |received| messages ended:
 * back to the initial delay if it was healthy (received something and
 * lasted at least the nominal delay), else keep growing. */
void mcp_h2c_backoff_stream_ended(mcp_h2c_backoff *b, mcp_tstamp lived,
                                  uint64_t received);

/* Default generator (splitmix64); |user_data| points to a uint64_t state. */
void mcp_h2c_default_rand(uint8_t *dest, size_t len, void *user_data);

#endif
