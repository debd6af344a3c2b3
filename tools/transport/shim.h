/*
 * What the transport shims (grpc.c, h2c.c) share, so that a shim holds only
 * what differs between its library and the table of transport.h: the
 * programs' policy for every transport, the callbacks an endpoint reports
 * to, the fields every library's stream info has, and the table rows that
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

/* Reports a stream that opened (|opened| 1) or ended (0) to the program,
 * when it asked (on_stream set). */
void tool_shim_report(const tool_shim_cb *cb, int opened,
                      const tool_stream_info *ti);

/*
 * The designated initialisers of a tool_stream_info for the fields every
 * library's stream info (mcp_grpc_stream_info, mcp_h2c_stream_info) has
 * under the same name: |peer| (|len| bytes) receives the peer in the
 * programs' one form (tool_peer_format). A shim adds what only its library
 * has (the protocol's name, TLS identities).
 */
#define TOOL_SHIM_STREAM_INFO(info, peer, len)                               \
  .id = (info)->id, .peer = tool_peer_format((info)->peer, (peer), (len)),    \
  .dialed = (info)->dialed, .received = (info)->received,                     \
  .sent = (info)->sent, .status = (info)->status,                             \
  .details = (info)->details ? (info)->details : "",                          \
  .source = (info)->source, .sink = (info)->sink, .opened = (info)->opened,  \
  .stream = (info)->stream

/* source_streams(), sink_streams(): the program's function, the user_data
 * of the library's walk. */
typedef struct tool_shim_walk {
  tool_stream_fn fn;
  void *ud;
} tool_shim_walk;

/* Defines |name|, the library's per-stream callback of source_streams()
 * and sink_streams() (user_data: a tool_shim_walk), which hands the
 * program each stream (of the library's |info_type|) as |convert| (the
 * shim's stream_info()) makes it a tool_stream_info. */
#define TOOL_SHIM_DEFINE_WALK(name, info_type, convert)                       \
  static void name(const info_type *info, void *ud) {                         \
    tool_shim_walk *w = ud;                                                   \
    char peer[TOOL_PEER_MAX];                                                 \
    tool_stream_info ti = convert(info, peer, sizeof(peer));                  \
    w->fn(&ti, w->ud);                                                        \
  }

/* rate_limited() of a shim whose endpoint type |ep_type| holds |src| or
 * |sink|, read with the library's stats functions. */
#define TOOL_SHIM_DEFINE_RATE_LIMITED(ep_type, stats_type, src_stats,         \
                                      sink_stats_fn)                          \
  static int rate_limited(void *p, uint64_t *delayed, uint64_t *refused) {    \
    ep_type *ep = p;                                                          \
    stats_type st;                                                            \
    int rv = ep->src ? src_stats(ep->src, &st) : sink_stats_fn(ep->sink, &st); \
    if (rv < 0)                                                               \
      return rv;                                                              \
    *delayed = st.peer_rate_delayed;                                          \
    *refused = st.refused_peer_rate;                                          \
    return 0;                                                                 \
  }

/* sink_stats(): |st| says no stream is open, then the walk over the sink's
 * streams adds the one that holds the sink session (|sink| set): what it
 * has sent and whether an answer is still to go (the session wants to
 * write, or the library is |sending| one). */
void tool_shim_stats_clear(tool_sink_stream_stats *st);
void tool_shim_stats_add(tool_sink_stream_stats *st, mcp_sink_session *sink,
                         uint64_t sent, int sending);

/* The rows of the table (tool_transport) that every shim fills with its
 * static functions of the same names. */
#define TOOL_SHIM_ENDPOINT_ROWS                                               \
  .source_new = source_new, .source_port = source_port,                       \
  .source_apply = source_apply, .source_del = source_del,                     \
  .sink_new = sink_new, .sink_port = sink_port, .sink_stats = sink_stats,     \
  .sink_finish = sink_finish, .sink_del = sink_del,                           \
  .source_streams = source_streams, .sink_streams = sink_streams,             \
  .sink_call = sink_call, .rate_limited = rate_limited
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
