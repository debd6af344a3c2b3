/*
 * What the transport shims (grpc.c, h2c.c) share, so that a shim holds only
 * what differs between its library and the table of transport.h: the
 * programs' policy for every transport, the callbacks an endpoint reports
 * to, the reading of the stream info every library fills (mcp/engine.h's
 * mcp_stream_info), and the table rows that
 * every shim fills the same way. For the shims only; the programs use
 * transport.h.
 */
#ifndef TOOLS_TRANSPORT_SHIM_H
#define TOOLS_TRANSPORT_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"

/* Reconnection: the library's defaults except a shorter ceiling, so that
 * a program left waiting for its peer notices it within half a minute. */
#define TOOL_BACKOFF_MAX (30 * MCP_SECONDS)
/* On stop, streams get this long to finish their send in flight. */
#define TOOL_SHUTDOWN_GRACE (1 * MCP_SECONDS)

/*
 * The options every library's options struct (mcp_grpc_options,
 * mcp_h2c_options) has under the same names, set from |o| as the programs
 * want them on every transport: the mode (|dial| or |listen|, the
 * library's values), the address, the jitter, the policy above, and for a
 * listener the services beside MCP. A shim sets the rest (its defaults
 * first, its callbacks, what only its library has).
 */
#define TOOL_SHIM_OPTIONS(opt, o, dial, listen)                               \
  do {                                                                        \
    (opt)->mode = (o)->mode == TOOL_DIAL ? (dial) : (listen);                 \
    (opt)->address = (o)->address;                                           \
    (opt)->rand = (o)->rand;                                                 \
    (opt)->backoff.max = TOOL_BACKOFF_MAX;                                   \
    (opt)->shutdown_grace = TOOL_SHUTDOWN_GRACE;                             \
    if ((o)->mode == TOOL_LISTEN) {                                          \
      (opt)->services = (o)->services;                                       \
      (opt)->nservices = (o)->nservices;                                     \
      (opt)->no_mcp = (o)->no_mcp;                                           \
    }                                                                        \
  } while (0)

/* The program's callbacks (tool_endpoint_options): the first member of
 * every shim's endpoint and client, whose address is the library's
 * user_data. */
typedef struct tool_shim_cb {
  tool_stream_cb on_stream;
  tool_refused_cb on_refused;
  void *user_data;
} tool_shim_cb;

/* |size| zeroed bytes (an endpoint or client whose first member is a
 * tool_shim_cb) with the callbacks of |o| copied in; NULL when memory runs
 * out. Freed with free(). */
void *tool_shim_alloc(size_t size, const tool_endpoint_options *o);

/* The end of every *_new(): |rv| is the library's answer for the object
 * being made into |obj| (from tool_shim_alloc()). Success: sets |*pobj|,
 * returns 0. Failure: frees |obj|, leaves |*pobj| untouched, returns |rv|. */
int tool_shim_created(void **pobj, void *obj, int rv);

/*
 * The programs' view of a stream from the one shape every library fills
 * (mcp/engine.h's mcp_stream_info; mcp_grpc_stream_info and
 * mcp_h2c_stream_info are it): |peer| (|len| bytes, TOOL_PEER_MAX)
 * receives the peer in the programs' one form (tool_peer_format). The
 * result points into |info| and |peer|: valid while both are.
 */
tool_stream_info tool_shim_stream_info(const mcp_stream_info *info,
                                       char *peer, size_t len);

/* Every library's stream callback (on_stream, user_data: the tool_shim_cb):
 * hands |ev| on |info| to the program's callbacks (on_stream for OPENED and
 * CLOSED, on_refused for REFUSED: a refused call never was a stream), each
 * when the program asked for it. */
void tool_shim_on_stream(mcp_stream_event ev, const mcp_stream_info *info,
                         void *ud);

/* source_streams(), sink_streams(): the program's function, the user_data
 * of the library's walk. */
typedef struct tool_shim_walk {
  tool_stream_fn fn;
  void *ud;
} tool_shim_walk;

/* The per-stream function of every library's *_streams() walk (its
 * mcp_grpc_stream_fn, mcp_h2c_stream_fn) for source_streams() and
 * sink_streams(): hands |w->fn| each stream as tool_shim_stream_info()
 * makes it. |ud|: a tool_shim_walk. */
void tool_shim_walk_stream(const mcp_stream_info *info, void *ud);

/* The per-stream function of sink_stats()'s walk over the sink's streams
 * (|ud|: the tool_sink_stream_stats, cleared first by
 * tool_shim_stats_clear(): no stream open): the stream that holds the sink
 * session (|sink| set) is open. */
void tool_shim_stats_clear(tool_sink_stream_stats *st);
void tool_shim_stats_stream(const mcp_stream_info *info, void *ud);

/* The rows of the table (tool_transport) that every shim fills with its
 * static functions of the same names. */
#define TOOL_SHIM_ENDPOINT_ROWS                                               \
  .source_new = source_new, .source_port = source_port,                       \
  .source_apply = source_apply, .source_del = source_del,                     \
  .sink_new = sink_new, .sink_port = sink_port, .sink_stats = sink_stats,     \
  .sink_finish = sink_finish, .sink_del = sink_del,                           \
  .source_streams = source_streams, .sink_streams = sink_streams,             \
  .sink_call = sink_call, .stats = stats
/* The security rows of a transport with TLS (static functions of these
 * names in the shim). */
#define TOOL_SHIM_SECURITY_ROWS                                               \
  .tls_check = tls_check, .acl_new = acl_new, .acl_add = acl_add,             \
  .acl_load = acl_load, .acl_reload = acl_reload, .acl_count = acl_count,     \
  .acl_del = acl_del, .source_reauthorize = source_reauthorize,               \
  .sink_reauthorize = sink_reauthorize
#define TOOL_SHIM_CLIENT_ROWS                                                 \
  .client_new = client_new, .client_run = client_run, .client_del = client_del

#endif /* TOOLS_TRANSPORT_SHIM_H */
