/*
 * Operations for mcp-source and mcp-sink: metrics fed by the core's events
 * and the transport's stream callbacks, and the debug HTTP endpoints.
 *
 *   GET /metrics        Prometheus text format 0.0.4 (docs/operations.md
 *                       lists the metrics)
 *   GET /debug/syncz    JSON: every stream and the state of each of its
 *                       collections (a source: per stream, from
 *                       mcp_source_session_collection_status(); a sink: its
 *                       collections, from mcp_sink_state_collection_status())
 *   GET /debug/journal  sink only, JSON: the recent requests it sent
 *                       (both pages bounded: tool_ops_options.page_*)
 *   GET /healthz        200 "ok" while running
 *   GET /readyz         200 once ready (a source: its first load applied; a
 *                       sink: every collection received and ACKed once),
 *                       else 503
 * Other paths: 404; other methods than GET and HEAD on these: 405.
 *
 * The same handler serves the separate listener (--debug-listen, on the
 * program's loop) and plain HTTP/1.1 requests on the h2c transport's own
 * port (tool_endpoint_options.http).
 *
 * Threads: tool_ops_event() and tool_ops_stream() run where the transport
 * calls back (the transport's thread); everything else on the main thread,
 * which runs the loop. The HTTP handler reads the streams and the sink
 * state through the transport table (source_streams, sink_streams,
 * sink_call), which run a function where they live and return.
 */
#ifndef TOOLS_OPS_OPS_H
#define TOOLS_OPS_OPS_H

#include <stddef.h>

#include <jansson.h>
#include <mcp/mcp.h>
#include <uv.h>

#include "util/log.h"
#include "transport/transport.h"
#include "ops/http.h"
#include "ops/metrics.h"

/* The command-line flags both programs take for operations. */
typedef struct tool_ops_args {
  const char *debug_listen;   /* --debug-listen HOST:PORT; NULL: none */
  tool_log_format log_format; /* --log-format text|json */
} tool_ops_args;

/*
 * If argv[*i] is one of those flags ("--name VALUE" or "--name=VALUE"):
 * parses it into |a|, advances |*i| past it and returns 1. Returns 0 for
 * another argument, -1 for a usage error (reported on stderr as
 * "PROG: ..."; the caller prints its usage and exits 2).
 */
int tool_ops_parse_arg(int argc, char **argv, int *i, tool_ops_args *a);

typedef enum tool_ops_role {
  TOOL_OPS_SOURCE = 0,
  TOOL_OPS_SINK = 1
} tool_ops_role;

typedef struct tool_ops_options {
  tool_ops_role role;
  /* The value of the "component" label on every metric ("mcp-source"). */
  const char *component;
  /* Sink: its SinkNode, shown by /debug/syncz (copied). */
  const char *node_id;
  const mcp_kv *node_annotations;
  size_t nnode_annotations;
  /*
   * Bounds of /debug/syncz and /debug/journal (0: the default), so that a
   * request cannot build hundreds of MB on the thread that serves every
   * stream: a string longer than |page_field_max| bytes is cut and ends
   * with "...[+N bytes]" (default 256); at most |page_streams_max| streams
   * are listed (default 100), the others are counted in
   * "streams_omitted"; once the page holds about |page_bytes_max| bytes
   * (default 1 MiB) nothing more is added (streams, collections,
   * annotations, journal entries) and "truncated" is true.
   */
  size_t page_field_max;
  size_t page_streams_max;
  size_t page_bytes_max;
} tool_ops_options;

typedef struct tool_ops tool_ops;

/* Creates the metrics. Returns 0, or -1 when out of memory. */
int tool_ops_new(tool_ops **pops, const tool_ops_options *o);

/* Frees everything; the listener must have been closed (tool_ops_close)
 * and the loop run. NULL is a no-op. */
void tool_ops_del(tool_ops *ops);

/* The core's event (call it first thing in the program's on_event). */
void tool_ops_event(tool_ops *ops, const mcp_event *ev);

/* The transport's stream callback (first thing in the program's). */
void tool_ops_stream(tool_ops *ops, int opened, const tool_stream_info *info);

/* A call refused before it became a stream (the transport's on_refused):
 * counted in mcp_streams_refused_total{code}. */
void tool_ops_refused(tool_ops *ops, const tool_stream_info *info);

/* The endpoint whose streams and state the debug pages show (main
 * thread). tool_ops_detach() before the endpoint is deleted. */
void tool_ops_attach(tool_ops *ops, const tool_transport *tp, void *ep);
void tool_ops_detach(tool_ops *ops);

/* Source: ready once the first load is applied. (A sink is ready once its
 * state says synced; this forces it as well.) Any thread. */
void tool_ops_set_ready(tool_ops *ops, int ready);

/*
 * Serves the debug endpoints on "HOST:PORT" on |loop|. Returns 0, or -1
 * with the reason in |err|. tool_ops_port() is the bound port.
 */
int tool_ops_listen(tool_ops *ops, uv_loop_t *loop, const char *hostport,
                    const ops_http_options *ho, char *err, size_t errlen);
int tool_ops_port(const tool_ops *ops);

/* Detaches and closes the listener (its handles close as the loop runs). */
void tool_ops_close(tool_ops *ops);

/* A page of the program's own beside the others ("/debug/tasks"): GET and
 * HEAD of |path| (kept by pointer) call |fn| with |user_data|, on the main
 * thread. One page; a later call replaces it. */
void tool_ops_set_page(tool_ops *ops, const char *path, ops_http_fn fn,
                       void *user_data);

/* |t| in seconds, to the millisecond, as the debug pages give ages: 1.99
 * for 1.990079501 s (tool_ops_reply_json() writes it so). */
double tool_ops_seconds(mcp_tstamp t);

/* A JSON page's answer: 200, application/json, the body |j| (consumed;
 * NULL when it could not be built) as jansson's json_dumps(|flags|) writes
 * it, and a newline; 500 "out of memory" when it cannot be written. For
 * the pages of this router and of tool_ops_set_page(). Reals are written
 * with 15 significant digits unless |flags| set JSON_REAL_PRECISION: the
 * shortest form for numbers of up to 15 digits (1.99), which every real of
 * a page must be (the ages are to the millisecond). */
void tool_ops_reply_json(ops_http_reply *r, json_t *j, size_t flags);

/* The HTTP handler (an ops_http_fn; |user_data| is the tool_ops): for
 * tool_endpoint_options.http and tests. Main thread. */
void tool_ops_http(const char *method, const char *path,
                   ops_http_reply *reply, void *user_data);

/* The registry (for tests). */
ops_metrics *tool_ops_metrics(tool_ops *ops);

/* The name Go's gRPC gives a status code ("InvalidArgument"; "Code(N)"
 * beyond 16), as Istio's istio_mcp_request_nacks_total{code} uses it.
 * Writes at most |len| bytes. */
const char *tool_ops_code_name(int code, char *buf, size_t len);

/* Logs a call refused before it became a stream (a tool_refused_cb's
 * |info|), in the stream's log context: a warning for PERMISSION_DENIED
 * and UNAUTHENTICATED, else info (admission). */
void tool_ops_log_refused(const tool_stream_info *info);

/* Logs a dialed stream that ended before any answer, to |peer_role| ("the
 * source", "the sink"): a warning the first time for each kind of failure
 * (refused: PERMISSION_DENIED or UNAUTHENTICATED; or any other status:
 * unreachable), then at debug level while the same kind repeats.
 * |*failing| holds the kind last logged (0: none); callers reset it to 0
 * once a stream got through. */
void tool_ops_log_dial_failure(const tool_stream_info *info,
                               const char *peer_role, int *failing);

#endif /* TOOLS_OPS_OPS_H */
