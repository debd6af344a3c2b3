/*
 * The one stats shape of the transports (mcp/engine.h,
 * mcp_transport_stats): its versioned copy and the admission counters,
 * written once here so that every transport fills and hands it out the
 * same way.
 */
#include <stddef.h>
#include <string.h>

#include "engine_int.h"

#include "mcp/engine.h"

/* The bytes of each version (append-only: each a prefix of the next). */
static const size_t stats_sizes[] = {
    0, offsetof(mcp_transport_stats, tls_handshakes),
    offsetof(mcp_transport_stats, accept_pauses),
    offsetof(mcp_transport_stats, opened), sizeof(mcp_transport_stats)};
#define NV (sizeof(stats_sizes) / sizeof(stats_sizes[0]))

int mcp_transport_stats_write(mcp_transport_stats *out, int version,
                              const mcp_transport_stats *full) {
  if (!out || !full || version < 1)
    return MCP_ERR_INVALID_ARGUMENT;
  memcpy(out, full, mcp_vstruct_size(version, stats_sizes, NV));
  return 0;
}

void mcp_transport_stats_admit(mcp_transport_stats *st,
                               const mcp_admit *admit) {
  if (!admit)
    return;
  mcp_admit_stats a;
  mcp_admit_get_stats(admit, &a);
  st->waiting_rate = a.waiting_rate;
  st->waiting_initial = a.waiting_initial;
  st->initial = a.initial;
  st->initial_peak = a.initial_peak;
  st->initial_sent = a.initial_sent;
  st->initial_timeouts = a.initial_timeouts;
  st->refused_max_streams = a.refused_max_streams;
  st->refused_peer_streams = a.refused_peer_streams;
  st->refused_rate = a.refused_rate;
  st->refused_wait_timeout = a.refused_wait_timeout;
  st->peer_rate_delayed = a.peer_rate_delayed;
  st->refused_peer_rate = a.refused_peer_rate;
}
