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

#include <stddef.h>
#include <stdint.h>

#include <mcp/engine.h>
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
  /* The protocol's name (mcp_stream_ops.name: MCP_API_NAME, or of a
   * protocol served beside MCP (tool_endpoint_options.services) or of a
   * client (client_new): "destination", "session", "assignments"...);
   * "" or NULL where the transport cannot tell. */
  const char *api;
  /* The stream's engine stream (read-only, during the call; NULL once it
   * is ending): /debug/syncz reads a protocol's own introspection from it
   * (mcp_xds_stream_info_get()). */
  const mcp_stream *stream;
} tool_stream_info;

/* Runs on the transport's thread. |opened| 1: a stream started (a dialed one
 * may still fail to connect: received == 0 when it closes). 0: it ended. */
typedef void (*tool_stream_cb)(int opened, const tool_stream_info *info,
                               void *user_data);

/* LISTEN: a call refused before it became a stream (authorization:
 * UNAUTHENTICATED or PERMISSION_DENIED; admission: RESOURCE_EXHAUSTED or
 * UNAVAILABLE), with |status|, |details| and the peer's identities set. No
 * on_stream() call comes before or after it. Runs where on_stream runs. */
typedef void (*tool_refused_cb)(const tool_stream_info *info,
                                void *user_data);

/*
 * TLS from PEM files (transports with TLS: tool_transport.tls_check set),
 * as the command line gives it (--tls-cert, --tls-key, --tls-ca,
 * --tls-server-name). All NULL: cleartext. LISTEN: |cert_file| and
 * |key_file| are required, |ca_file| requires and verifies client
 * certificates (mutual TLS). DIAL: the server is verified against
 * |ca_file| and must carry the host dialed (or |server_name|); |cert_file|
 * and |key_file| are presented. The programs check the combinations.
 */
typedef struct tool_tls_options {
  const char *cert_file;
  const char *key_file;
  const char *ca_file;
  const char *server_name; /* DIAL */
} tool_tls_options;

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
  /* Security (transports with TLS only; h2c ignores them and the programs
   * refuse them with it). */
  tool_tls_options tls;
  /* An access list made by the table's acl_new() (NULL: every peer is
   * allowed): each peer's verified identities are checked against it (a
   * listening endpoint: each new call; a dialing one: the server, once
   * connected). It must outlive the endpoint. */
  void *acl;
  tool_refused_cb on_refused; /* optional; user_data as on_stream */
  /* LISTEN (transports with services: tool_transport.services set): the
   * protocols served beside MCP on the same port (mcp/engine.h; copied by
   * the transport, each def's user_data kept), and |no_mcp| 1 to serve
   * them alone (the MCP methods then answer UNIMPLEMENTED). */
  const mcp_service_def *services;
  size_t nservices;
  int no_mcp;
  /* LISTEN: concurrent calls on one connection (0: the default, 1024).
   * h2 refuses a call beyond with RESOURCE_EXHAUSTED; gRPC core announces
   * it as SETTINGS_MAX_CONCURRENT_STREAMS, past which clients queue. */
  int max_streams_per_connection;
  /* LISTEN: new streams per peer (the transports' peer_stream_rate /
   * peer_stream_burst; 0: the default, 100/s after a burst of 100;
   * UINT32_MAX rate: no limit). */
  uint32_t peer_stream_rate, peer_stream_burst;
  /* LISTEN over TLS (h2): handshakes in progress from one address (0: the
   * default, 32); a connection beyond is closed at once. */
  int max_handshakes_per_peer;
} tool_endpoint_options;

/* A function run where a client's protocol lives (client_run). */
typedef void (*tool_run_fn)(mcp_tstamp ts, void *ud);

typedef void (*tool_store_fn)(mcp_store *store, mcp_tstamp ts, void *ud);

/* Introspection (tools/ops): run where the streams and the sink state
 * live, while the caller waits. */
typedef void (*tool_stream_fn)(const tool_stream_info *info, void *ud);
typedef void (*tool_state_fn)(mcp_sink_state *state, mcp_tstamp ts, void *ud);

/* Whether a sink stream is open, for a clean exit (sink_finish()). */
typedef struct tool_sink_stream_stats {
  int open; /* a stream holds the sink session */
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
  /* Fills |st|: whether a stream holds the sink session. */
  int (*sink_stats)(void *ep, tool_sink_stream_stats *st);
  /* Ends the stream that holds the sink session as a sink that is done:
   * what is ready is sent first. DIAL: then the half-close; the source
   * ends the stream and no new one is dialed. LISTEN: the transport ends
   * it with OK. Either way on_stream reports the end. Returns at once; 0
   * or the core's error. */
  int (*sink_finish)(void *ep);
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
  /* From the main thread: the endpoint's counters (a source's or a
   * sink's) in the engine's one shape (mcp/engine.h, mcp_transport_stats;
   * every transport fills it: /metrics reads the per-peer rate's
   * peer_rate_delayed and refused_peer_rate). Negative on failure. */
  int (*stats)(void *ep, mcp_transport_stats *st);

  /*
   * Security (NULL in a transport without TLS; both have it now). From
   * the main thread.
   *   tls_check: reads the files of |tls| as *_new() will and writes what
   *     is wrong into |err| ("cannot read /etc/mcp/key.pem: No such file or
   *     directory"). 0, or the core's error.
   *   acl_*: an access list of peer identities (rules "allow"/"deny" of
   *     exact identities or prefixes ending in '*'; the file format of
   *     mcp_acl, mcp/auth.h). acl_add: a lasting rule (|deny| 0: allow). acl_load:
   *     (re)reads |path| now, replacing the rules of the previous file
   *     (on failure nothing changes). acl_reload: reads the file again if
   *     it changed: 1 reloaded, 0 unchanged, negative (|err| set) when the
   *     new version is broken (reported once; the rules in use stay).
   *     Thread-safe: the endpoint checks it on its own thread meanwhile.
   *     acl_del: once no endpoint uses it.
   *   *_reauthorize: checks every open stream's peer again (after the list
   *     changed) and ends those now refused with the status the list
   *     gives. Returns at once.
   */
  int (*tls_check)(const tool_tls_options *tls, char *err, size_t errlen);
  int (*acl_new)(void **pacl);
  int (*acl_add)(void *acl, int deny, const char *pattern);
  int (*acl_load)(void *acl, const char *path, char *err, size_t errlen);
  int (*acl_reload)(void *acl, char *err, size_t errlen);
  size_t (*acl_count)(void *acl);
  void (*acl_del)(void *acl);
  int (*source_reauthorize)(void *ep);
  int (*sink_reauthorize)(void *ep);

  /* 1 when source_new() takes tool_endpoint_options.services. */
  int services;
  /* 1: without TLS, a listener stays on loopback unless the program says
   * --allow-cleartext (the nghttp2 transport: cleartext is h2c). */
  int cleartext_listen_loopback;
  /*
   * Clients (NULL in a transport without them): client_new() dials
   * |o->address| (a comma-separated list) and runs |def| (mcp/engine.h)
   * with the TLS, access list, rand and on_stream of |o| (its services
   * and http are ignored); |def| is copied, its user_data kept (it must
   * outlive the client). The protocol's callbacks run on the transport's
   * thread (gRPC: its own; h2c: |loop|'s). client_run() runs |fn| there,
   * returns once it ran, and then the client's calls are pumped and open()
   * asked again. client_del(): no callback of |def| runs once it returns
   * (h2c: the loop must run on to close the sockets).
   */
  int (*client_new)(void **pc, uv_loop_t *loop, const tool_endpoint_options *o,
                    const mcp_client_def *def);
  int (*client_run)(void *c, tool_run_fn fn, void *ud);
  void (*client_del)(void *c);
} tool_transport;

/*
 * Looks a transport up by name. Returns 0 and sets |*pt|; -1 for a name
 * that is no transport; -2 for a transport known but not built into this
 * program (|*pt| untouched).
 */
int tool_transport_find(const char *name, const tool_transport **pt);

/* What |tp| offers for tool_sec_check(): TOOL_SEC_NO_TLS, TOOL_SEC_TLS or
 * TOOL_SEC_TLS_GUARDED (cli/args.h). */
int tool_transport_sec(const tool_transport *tp);

/* The name of the default transport: "grpc" when it is built in, else the
 * first one built in. */
const char *tool_transport_default(void);

/*
 * The one form of a peer address in the programs' logs, --json events and
 * debug pages, whatever the transport: HOST:PORT, an IPv6 address in
 * brackets ("127.0.0.1:5000", "[::1]:5000", a dialed "localhost:9901"), or
 * "unix:PATH". gRPC's "ipv4:" and "ipv6:" prefixes are dropped and its
 * %-escapes decoded. Writes |buf| (|len| bytes, truncating) and returns it;
 * NULL gives "".
 */
#define TOOL_PEER_MAX 320
const char *tool_peer_format(const char *peer, char *buf, size_t len);

/* Why source_new() or sink_new() failed with |rv|, for a log line: for
 * MCP_ERR_IO with |err| (errno right after the call; the programs zero it
 * before) the system's reason in libuv's words ("address already in use",
 * as the debug listener says it), else mcp_strerror(rv). Static string. */
const char *tool_endpoint_strerror(int rv, int err);

/*
 * The access list of a program (--allow, --deny, --access-list), kept up to
 * date: with a file, it is read again every second when it changed and on
 * SIGHUP (always), and after each successful read the endpoint's streams
 * are reauthorized (their peers checked again: those now refused are
 * ended). Main thread.
 */
typedef struct tool_access tool_access;

/* Creates the list on |tp| (which must have acl_new) with the lasting rules
 * |allow| and |deny| and, when |file| is set, the file's rules. Returns 0;
 * 2 for a bad pattern (a usage error), 1 when the file cannot be read or
 * parsed or memory runs out; |err| says why. */
int tool_access_new(tool_access **pa, const tool_transport *tp,
                    const char *const *allow, size_t nallow,
                    const char *const *deny, size_t ndeny, const char *file,
                    char *err, size_t errlen);

/* The list, for tool_endpoint_options.acl. */
void *tool_access_acl(const tool_access *a);

/* With a file: starts the reload timer and the SIGHUP handler on |loop|,
 * reauthorizing |ep| (a source endpoint, or a sink one when |sink|). */
void tool_access_watch(tool_access *a, uv_loop_t *loop, void *ep, int sink);

/* Stops watching (closes the handles; the loop must run to close them).
 * Call before the endpoint is deleted. NULL is a no-op. */
void tool_access_close(tool_access *a);

/* Frees the list: after the endpoint is deleted and the loop has closed
 * the handles. NULL is a no-op. */
void tool_access_del(tool_access *a);

/*
 * The TLS files of a program, watched so that a broken replacement is said
 * and not silent: both transports read the files again when they change
 * and keep the set in use when the new one fails, but only the program can
 * tell a person. Every second, when a file's size, modification time or
 * inode changed, the files are read as the transport will (tls_check) and
 * a broken version is logged once as an error ("TLS files changed and
 * cannot be used: ...; the certificate in use stays"), a good one after a
 * change at info. Main thread.
 */
typedef struct tool_tls_watch tool_tls_watch;

/* Starts watching the files of |tls| (the strings must outlive the watch)
 * on |loop| with |tp|'s tls_check. Returns 0, or 1 when memory runs out
 * (nothing is watched). A transport without tls_check: 0, and |*pw| NULL. */
int tool_tls_watch_start(tool_tls_watch **pw, const tool_transport *tp,
                         const tool_tls_options *tls, uv_loop_t *loop);

/* Stops watching: the handle closes when the loop runs, then the watch is
 * freed. NULL is a no-op. */
void tool_tls_watch_close(tool_tls_watch *w);

/* The transports linked in (TOOLS_HAVE_GRPC, TOOLS_HAVE_H2C). */
extern const tool_transport tool_transport_grpc;
extern const tool_transport tool_transport_h2c;

#endif /* TOOLS_TRANSPORT_H */
