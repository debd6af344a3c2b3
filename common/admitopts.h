/*
 * The admission options of a listening transport, as the engine's
 * mcp_admit_options. mcp_grpc_options and mcp_h2c_options carry the same
 * admission fields under the same names, each in its own library's layout
 * (each struct is its library's ABI), so the mapping is a macro over
 * either: written once, and a field renamed in one library fails to
 * compile here instead of drifting. Header-only and private.
 */
#ifndef MCP_COMMON_ADMITOPTS_H
#define MCP_COMMON_ADMITOPTS_H

#include <mcp/engine.h>

/* An mcp_admit_options value from the transport options |o| (a pointer);
 * the fields it does not name are zero (the core's defaults). */
#define MCP_ADMIT_OPTIONS_OF(o)                                               \
  ((mcp_admit_options){                                                      \
      .max_streams = (o)->max_streams,                                       \
      .max_streams_per_peer = (o)->max_streams_per_peer,                     \
      .stream_rate = (o)->stream_rate,                                       \
      .stream_burst = (o)->stream_burst,                                     \
      .max_initial = (o)->max_initial_pushes,                                \
      .max_initial_per_peer = (o)->max_initial_pushes_per_peer,              \
      .initial_timeout = (o)->initial_push_timeout,                          \
      .wait_timeout = (o)->admission_wait_timeout,                           \
      .peer_stream_rate = (o)->peer_stream_rate,                             \
      .peer_stream_burst = (o)->peer_stream_burst,                           \
  })

#endif /* MCP_COMMON_ADMITOPTS_H */
