/*
 * The transports the programs can run on, behind one small table of
 * functions, so that a second transport (h2c) plugs in without touching the
 * programs. Each implementation wraps one adapter library.
 *
 * Threads: every function of the table is called from the program's main
 * thread, which runs the libuv loop given to *_new(). A transport either
 * owns a thread of its own (gRPC: the store and the sink state belong to
 * that thread while the endpoint lives, and the core's callbacks and
 * on_stream run there) or runs on that loop (then everything runs on the
 * main thread). The programs are written for both: callbacks only log,
 * write files and stdout under locks, and wake the loop with uv_async_t.
 */
#ifndef TOOLS_TRANSPORT_H
#define TOOLS_TRANSPORT_H

#include <stdint.h>

#include <mcp/mcp.h>
#include <uv.h>

#include "ops/http.h" /* ops_http_fn: plain HTTP on the transport's port */

typedef enum tool_mode {
  TOOL_LISTEN = 0, /* serve the role's service on an address */
  TOOL_DIAL = 1    /* dial the peer and reconnect forever */
} tool_mode;

/* One stream, as the programs log it. Strings valid during the call. */
typedef struct tool_stream_info {
  uint64_t id;
  const char *peer;
  int dialed;
  uint64_t received, sent;
  int status;          /* closed only: the gRPC status code */
  const char *details; /* closed only */
  /* Introspection (tools/ops): the stream's session, NULL once it is
   * ending; when it opened (the transport's clock, 0: unknown); the peer's
   * verified identities (TLS) and whether the connection is TLS. */
  mcp_source_session *source;
  mcp_sink_session *sink;
  mcp_tstamp opened;
  const char *const *identities;
  size_t nidentities;
  int tls;
} tool_stream_info;

/* Runs on the transport's thread. |opened| 1: a stream started (a dialed one
 * may still fail to connect: received == 0 when it closes). 0: it ended. */
typedef void (*tool_stream_cb)(int opened, const tool_stream_info *info,
                               void *user_data);

typedef struct tool_endpoint_options {
  tool_mode mode;
  const char *address; /* HOST:PORT */
  mcp_rand_fn rand;    /* reconnection jitter */
  tool_stream_cb on_stream;
  void *user_data;
  /* LISTEN, transports that answer plain HTTP/1.1 on their own port (h2c):
   * the handler of those requests (the debug endpoints, tools/ops/ops.h),
   * run on the main thread. NULL: the transport's built-in answers. */
  ops_http_fn http;
  void *http_user_data;
} tool_endpoint_options;

typedef void (*tool_store_fn)(mcp_store *store, mcp_tstamp ts, void *ud);

/* Introspection (tools/ops): run where the streams and the sink state
 * live, while the caller waits. */
typedef void (*tool_stream_fn)(const tool_stream_info *info, void *ud);
typedef void (*tool_state_fn)(mcp_sink_state *state, mcp_tstamp ts, void *ud);

/* What the open sink stream has sent, for a clean exit. */
typedef struct tool_sink_stream_stats {
  int open;       /* a stream holds the sink session */
  int want_write; /* the session has an answer not yet handed over */
  uint64_t sent;  /* messages whose send completed */
} tool_sink_stream_stats;

typedef struct tool_transport {
  const char *name;
  /* The clock the transport gives the core (nanoseconds, monotonic). */
  mcp_tstamp (*now)(void);

  /* Source: serves or dials with one session per stream made from |so|,
   * on |loop| or on a thread of its own. The store must outlive the
   * endpoint. Errors: the core's. */
  int (*source_new)(void **pep, uv_loop_t *loop,
                    const tool_endpoint_options *o,
                    const mcp_source_options *so);
  /* LISTEN: the bound port; DIAL: 0. */
  int (*source_port)(void *ep);
  /* Runs |fn| with the store where the store lives and returns once it
   * ran; the streams then push what they may. */
  int (*source_apply)(void *ep, tool_store_fn fn, void *ud);
  /* Stops the endpoint and frees it: when this returns the store is no
   * longer touched and no callback runs any more. What is left (closing
   * sockets) may need the loop to run on until it returns. */
  void (*source_del)(void *ep);

  /* Sink: one session per stream on |state|, which must outlive it. */
  int (*sink_new)(void **pep, uv_loop_t *loop, const tool_endpoint_options *o,
                  mcp_sink_state *state);
  int (*sink_port)(void *ep);
  /* Fills |st| with what the open stream has sent. */
  int (*sink_stats)(void *ep, tool_sink_stream_stats *st);
  /* As source_del(): the state is no longer touched when it returns. */
  void (*sink_del)(void *ep);

  /* Introspection for the debug endpoints (tools/ops; NULL: none). From
   * the main thread, also inside ops_http_fn: call |fn| once per open
   * stream (with its session set) / once with the sink state, where they
   * live, and return once done. Negative on failure (the endpoint is
   * stopping). */
  int (*source_streams)(void *ep, tool_stream_fn fn, void *ud);
  int (*sink_streams)(void *ep, tool_stream_fn fn, void *ud);
  int (*sink_call)(void *ep, tool_state_fn fn, void *ud);
} tool_transport;

/*
 * Looks a transport up by name. Returns 0 and sets |*pt|; -1 for a name
 * that is no transport; -2 for a transport known but not built into this
 * program (|*pt| untouched).
 */
int tool_transport_find(const char *name, const tool_transport **pt);

/* The name of the default transport: "grpc" when it is built in, else the
 * first one built in. */
const char *tool_transport_default(void);

/* The transports linked in (TOOLS_HAVE_GRPC, TOOLS_HAVE_H2C). */
extern const tool_transport tool_transport_grpc;
extern const tool_transport tool_transport_h2c;

#endif /* TOOLS_TRANSPORT_H */
