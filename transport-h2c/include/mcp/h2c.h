/*
 * libmcp h2c transport: MCP streams over gRPC's wire format on cleartext
 * HTTP/2 (nghttp2), on an event loop the application owns (libuv). No gRPC
 * library: any gRPC client or server talks to it.
 *
 * Two objects, each in one of two modes, give the four roles (the same as
 * the gRPC transport, mcp/grpc.h):
 *
 *   mcp_h2c_source, MCP_H2C_LISTEN  ResourceSource server (sinks dial us)
 *   mcp_h2c_source, MCP_H2C_DIAL    ResourceSink client (we dial a sink)
 *   mcp_h2c_sink,   MCP_H2C_LISTEN  ResourceSink server (sources dial us)
 *   mcp_h2c_sink,   MCP_H2C_DIAL    ResourceSource client (we dial a source)
 *
 * Other protocols need no transport code (mcp/engine.h): a listening
 * object also serves the mcp_service_defs of options.services beside MCP
 * ("Services" below), and mcp_h2c_client runs an mcp_client_def ("Client"
 * below).
 *
 * The transport holds no protocol rules: each stream is one core session
 * (mcp_source_session or mcp_sink_session) or one protocol stream
 * (mcp_stream); the transport moves messages between HTTP/2 and it,
 * drives its timers, and ends the stream with mcp_error_grpc_status(err) /
 * mcp_strerror(err) when the core reports an error.
 *
 * Wire: requests are POST with content-type application/grpc[+proto|...],
 * te: trailers, and :path one of the methods below; messages are
 * gRPC's 5-byte length-prefixed frames (flag 0 only: compressed messages
 * end the stream with UNIMPLEMENTED); responses are :status 200,
 * content-type application/grpc, DATA, then trailers with grpc-status and
 * a percent-encoded grpc-message (or trailers only, for errors found
 * before the stream starts). grpc-timeout is honoured (DEADLINE_EXCEEDED).
 * A listener accepts both HTTP/2 with prior knowledge and HTTP/1.1
 * "Upgrade: h2c"; other HTTP/1.1 requests (and HTTP/2 requests that are
 * not gRPC) get a plain HTTP answer: 200 "ok" on GET /healthz, 404 for
 * anything else, or what the application's http_handler says. Dialing is
 * HTTP/2 with prior knowledge.
 *
 * TLS (options.tls, "TLS" below): the same listener and dialer over TLS
 * 1.2 or 1.3 (OpenSSL), ALPN "h2", mutual TLS with a CA, certificates
 * reloaded when their files change, the peer's SPIFFE and DNS identities,
 * and an authorization hook (mcp/auth.h: the same rules and access lists
 * as the gRPC transport). Without options.tls the connection is cleartext
 * (h2c): use that on loopback, in a sidecar, or where the mesh provides
 * mTLS. The library keeps its name (mcp_h2c, libmcp-h2c) for both.
 *
 * Threading: every object lives on the uv_loop_t given at creation and is
 * single-threaded on that loop. "The loop thread" is the thread that runs
 * uv_run() on it; create the object on that thread (it is recorded then).
 * Core calls on the object's store, sink state and sessions, and every
 * callback (the core's apply and on_event, and this library's on_stream,
 * http_handler and on_closed), happen on the loop thread.
 *
 * The application changes a source's store directly on the loop thread
 * (passing mcp_h2c_now() as the time) and then calls
 * mcp_h2c_source_notify() so that every stream pushes what it may. From
 * any other thread, mcp_h2c_source_update() / *_call() and
 * mcp_h2c_sink_call() run a function on the loop thread (through a
 * uv_async_t) and notify afterwards; they are the only functions other
 * threads may call, and only until *_del() is called.
 *
 * Callbacks must not call *_del() or *_call(); they may call *_notify(),
 * *_update(), *_streams() and *_stats().
 *
 * One shape with mcp/grpc.h (docs/api.md, "The transport API: one
 * shape", lists both side by side): the same functions, in the same
 * argument order, returning int (0, or a count, or a negative mcp_error),
 * with versioned options and stats (MCP_H2C_OPTIONS_VERSION,
 * MCP_H2C_STATS_VERSION; the *_new(), *_options_default() and *_stats()
 * names are macros over *_versioned() functions, as in mcp/mcp.h). What
 * differs, and why: this transport runs on the caller's loop, so *_new()
 * takes the loop, and every function but *_update() and *_call() is
 * loop-thread only and answers at once (*_streams() and *_stats() called
 * from another thread return INVALID_ARGUMENT); *_del() returns before
 * the last handles are closed (on_closed). The gRPC transport runs a
 * thread of its own: its functions may be called from any thread, and
 * *_streams() / *_stats() block until that thread has answered. Only
 * h2c has *_notify() (the store is the caller's, on the loop thread); only
 * gRPC has its own thread-safe access list (mcp_grpc_acl; here the core's
 * mcp_acl, changed on the loop thread).
 *
 * Memory: mcp_h2c_options.mem (NULL: the C library) is copied at
 * creation, and every allocation this library makes for its own objects
 * goes through it: the objects, connections, streams, header strings,
 * buffers (frames to write, partial messages received, the first bytes of
 * a connection, plain HTTP bodies), queued jobs, and nghttp2's sessions
 * (bridged as an nghttp2_mem). Socket reads land in one static buffer per
 * thread, allocated by nobody. The
 * sessions' allocations go through the core options' hooks
 * (mcp_source_options.mem, the sink state's). libuv's own allocations
 * (getaddrinfo results; libuv's allocator is process-global,
 * uv_replace_allocator(), which this library leaves alone) and
 * http_parser's (none) are not covered. The hook is called on the loop
 * thread, and on the calling thread in *_update() (the queued job); it
 * must be thread-safe when *_update() is used from another thread.
 *
 * Shutdown: *_del() runs the jobs still queued, frees every session at
 * once (the store and the sink state are no longer touched when it
 * returns), reports the streams CLOSED (UNAVAILABLE for a listener,
 * CANCELLED for a dialer), sends their trailers or resets and GOAWAY, and
 * returns; no callback runs after it but on_closed. The rest (flushing
 * the last frames, closing sockets and handles) happens on the loop: keep
 * running it until options.on_closed is called, or simply until uv_run()
 * returns, before uv_loop_close().
 *
 * Signals: like any libuv program, ignore SIGPIPE (libuv writes with
 * write(2)); a peer that goes away would otherwise kill the process.
 *
 * Time: mcp_h2c_now() (uv_hrtime(), nanoseconds) is the mcp_tstamp given to
 * every core call.
 *
 * Memory: a stream holds at most one message taken from the core and not
 * yet framed, and at most one partial received message (bounded by
 * max_recv_message_size); a connection holds at most two write buffers
 * of about write_buffer_size. HTTP/2 windows open only as received bytes
 * are taken. A peer that stops reading stops the pulling from the core,
 * whose own state (one push in flight per collection, coalescing) bounds
 * the rest. mcp_h2c_*_stats() shows these amounts.
 *
 * Errors are the core's negative mcp_error codes.
 */
#ifndef MCP_H2C_H
#define MCP_H2C_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include <mcp/auth.h>
#include <mcp/engine.h>
#include <mcp/mcp.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MCP's methods: the core's (mcp/engine.h), under this header's names. */
#define MCP_H2C_RESOURCE_SOURCE_METHOD MCP_RESOURCE_SOURCE_METHOD
#define MCP_H2C_RESOURCE_SINK_METHOD MCP_RESOURCE_SINK_METHOD
#define MCP_H2C_AGGREGATED_METHOD MCP_AGGREGATED_METHOD
#define MCP_H2C_AGGREGATED_INCREMENTAL_METHOD MCP_AGGREGATED_INCREMENTAL_METHOD

/* The method that carries |service| in the direction where |sink_dials|
 * (ResourceSource and the aggregated services) or not (ResourceSink);
 * NULL when there is none: mcp_service_method() of mcp/engine.h, kept for
 * existing callers. */
MCP_EXTERN const char *mcp_h2c_method(mcp_service service, int sink_dials);

/* The transport's clock: uv_hrtime(), nanoseconds, monotonic. */
MCP_EXTERN mcp_tstamp mcp_h2c_now(void);

/* ------------------------------------------------------------------ */
/* Options                                                             */
/* ------------------------------------------------------------------ */

typedef enum mcp_h2c_mode {
  MCP_H2C_LISTEN = 0, /* serve the role's method on |address| */
  MCP_H2C_DIAL = 1    /* dial |address| and reconnect forever */
} mcp_h2c_mode;

/*
 * Reconnection delays of a dialing object (as mcp_grpc_backoff_options).
 * After a stream ends, the next attempt waits the nominal delay scaled by
 * a factor drawn uniformly from [1 - jitter, 1 + jitter], capped at |max|;
 * the nominal delay then grows by |multiplier| up to |max|. It goes back
 * to |initial| (never to zero) only after a healthy stream: one that
 * received a message (not any byte: the server's SETTINGS do not count)
 * and lasted at least the nominal delay. The first attempt is immediate.
 * This is the core's policy (mcp_redial; defaults: mcp_backoff_defaults()),
 * applied to MCP's calls (the MCP side's client def) and to connections (a
 * new one after the last is gone): a call waits for both (0.9.0).
 */
typedef mcp_backoff_options mcp_h2c_backoff_options;

/* What the transport knows of one stream: the engine's one shape
 * (mcp/engine.h, mcp_stream_info), which this transport fills in full.
 * Strings are valid during the callback only. A dialed stream that is
 * not connected yet shows the address dialed as |peer|. */
typedef mcp_stream_info mcp_h2c_stream_info;

/* The engine's events (mcp/engine.h, mcp_stream_event), under this
 * header's names. REFUSED comes with options of version 3 or later only
 * (authorization: UNAUTHENTICATED or PERMISSION_DENIED). */
typedef mcp_stream_event mcp_h2c_stream_event;
#define MCP_H2C_STREAM_OPENED MCP_STREAM_OPENED
#define MCP_H2C_STREAM_CLOSED MCP_STREAM_CLOSED
#define MCP_H2C_STREAM_REFUSED MCP_STREAM_REFUSED

typedef mcp_stream_cb mcp_h2c_stream_cb;

/* What a listener tells of itself (options.on_listener). */
typedef enum mcp_h2c_listener_event {
  /* accept() failed and accepting stopped: |err| is the errno, EMFILE or
   * ENFILE when out of file descriptors (also ENOBUFS, ENOMEM). New
   * connections wait in the listen backlog. Reported once per pause. */
  MCP_H2C_LISTENER_PAUSED,
  /* Accepting again (|err| 0): tried when one of the listener's
   * connections closes, else once a second. */
  MCP_H2C_LISTENER_RESUMED
} mcp_h2c_listener_event;

typedef void (*mcp_h2c_listener_cb)(mcp_h2c_listener_event ev, int err,
                                    void *user_data);

/*
 * A plain HTTP answer being built (HTTP/1.1, or HTTP/2 requests that are
 * not gRPC calls). Owned by the transport; valid during the handler only.
 */
typedef struct mcp_h2c_http_response mcp_h2c_http_response;

/*
 * Sets the status (100..599) and content type (NULL: "text/plain";
 * copied) of the answer. Without it the answer is 200 text/plain.
 */
MCP_EXTERN void mcp_h2c_http_respond(mcp_h2c_http_response *resp, int status,
                                     const char *content_type);

/* Appends to the body (copied). Errors: NOMEM, LIMIT (over 16 MiB). */
MCP_EXTERN int mcp_h2c_http_append(mcp_h2c_http_response *resp,
                                   const void *data, size_t len);

/*
 * Serves plain HTTP requests on a listener (debug endpoints). |method| and
 * |path| (with its query string) are the request's. Return 1 when the
 * answer is in |resp|; 0 for the built-in answer (200 "ok\n" on GET or
 * HEAD /healthz, else 404). The request body is ignored. HEAD answers
 * carry no body. Runs on the loop thread.
 */
typedef int (*mcp_h2c_http_fn)(const char *method, const char *path,
                               mcp_h2c_http_response *resp, void *user_data);

/*
 * TLS from PEM files (the paths are copied). TLS is on when any of the
 * three files is set. The files are read by *_new() (errors: IO when one
 * cannot be read, INVALID_ARGUMENT when it holds no certificate or key, or
 * the key does not match) and read again when one of them changes (size,
 * modification time or inode; checked at most once a second, LISTEN on
 * each new connection, DIAL before each connection attempt); a set that
 * fails to load keeps the previous one in use (stats: tls_reload_failures).
 *
 * LISTEN: |cert_file| and |key_file| are required. With |ca_file|, every
 *   client must present a certificate that |ca_file| verifies (mutual
 *   TLS): its identities are then known. Without, the server is
 *   authenticated only and clients have no identity. ALPN: h2, else
 *   http/1.1 (plain HTTP answers, e.g. /healthz); a client offering
 *   neither fails the handshake. No session resumption: every connection
 *   verifies its certificate.
 * DIAL: the server's certificate is verified against |ca_file| (NULL: the
 *   system's roots) and must name the host dialed (an IP address: an IP
 *   SAN) or |server_name|; the server must select ALPN h2. |cert_file| and
 *   |key_file|, given together or not at all, are presented (mutual TLS).
 *   A connection that fails its handshake ends its streams with
 *   UNAVAILABLE and details starting "no TLS connection".
 *
 * TLS 1.2 is the least accepted (with ECDHE and AEAD ciphers only, as
 * HTTP/2 requires); TLS 1.3 is chosen whenever both sides have it.
 * OpenSSL's own allocations are process-global and do not go through
 * options.mem.
 */
typedef struct mcp_h2c_tls_options {
  const char *cert_file; /* PEM certificate chain, leaf first */
  const char *key_file;  /* PEM private key of |cert_file| */
  const char *ca_file;   /* PEM CA certificates that verify the peer */
  const char *server_name; /* DIAL: the name the server's certificate must
                              carry instead of the host dialed */
} mcp_h2c_tls_options;

/*
 * Checks that the files of |tls| can be read and make a TLS context, as
 * *_new() will (|listen| 1: a listener's rules, 0: a dialer's), and writes
 * what is wrong into |err| (NUL terminated, at most |errlen| bytes; may be
 * NULL), e.g. "cannot read /etc/mcp/key.pem: No such file or directory".
 * 0 when no file is set. Errors: IO, INVALID_ARGUMENT, NOMEM.
 */
MCP_EXTERN int mcp_h2c_tls_check(const mcp_h2c_tls_options *tls, int listen,
                                 char *err, size_t errlen);

typedef struct mcp_h2c_options {
  mcp_h2c_mode mode;
  /*
   * LISTEN: "HOST:PORT" to bind ("127.0.0.1:0" binds a free port, see
   * *_port(); "[::1]:15010"; "0.0.0.0:15010"), or "unix:/path".
   * DIAL: "HOST:PORT" (names are resolved at every attempt), or
   * "unix:/path", or several of them separated by commas (replicas of one
   * source): each new connection dials the next one in turn, after the
   * backoff (a call goes on the connection that stands).
   * A "dns:///" or "http://" prefix is ignored. Copied.
   */
  const char *address;
  /* DIAL: the :authority sent (NULL: the address dialed). Copied. */
  const char *authority;
  /* Largest message received / sent, in bytes; -1: unlimited (up to the
   * 4 GiB the framing allows); 0: the default, 64 MiB. A larger message
   * ends the stream with RESOURCE_EXHAUSTED. A partial received message
   * is buffered up to this size. */
  int max_recv_message_size;
  int max_send_message_size;
  /*
   * Keepalive: after |keepalive_time_ms| without receiving anything, a
   * PING is sent; no answer within |keepalive_timeout_ms| (default 20 s)
   * closes the connection (its streams end with UNAVAILABLE). Only while
   * the connection has a stream, unless |keepalive_permit_without_calls|.
   * |min_recv_ping_interval_ms| (LISTEN): a client whose PINGs come more
   * often than this, three times in a row, gets GOAWAY ENHANCE_YOUR_CALM
   * "too_many_pings". Default 0: no PINGs sent, none policed.
   */
  int keepalive_time_ms;
  int keepalive_timeout_ms;
  int keepalive_permit_without_calls;
  int min_recv_ping_interval_ms;
  /* LISTEN: a connection without an open stream for this long is closed
   * (GOAWAY first for HTTP/2). Default 300000 (5 min); 0: never. */
  int idle_timeout_ms;
  /* HTTP/2 flow control: the receive window of each stream (default
   * 1 MiB) and of each connection (default 16 MiB). */
  int stream_window_size;
  int connection_window_size;
  /* LISTEN: SETTINGS_MAX_CONCURRENT_STREAMS. Default (0): twice
   * |max_streams_per_connection| (V3), so that a client past that limit
   * sends its call and hears RESOURCE_EXHAUSTED rather than queueing it
   * unstarted, as gRPC clients do at the announced limit. (Before V3 the
   * default was 100 and also the only limit.) */
  int max_concurrent_streams;
  /* Bytes of encoded frames a connection buffers before it stops taking
   * more from nghttp2 (and so from the core) until the socket drains.
   * Default 64 KiB. */
  int write_buffer_size;
  mcp_h2c_backoff_options backoff; /* DIAL */
  /* Randomness for the backoff jitter (NULL: a generator seeded from the
   * clock). Called on the loop thread. */
  mcp_rand_fn rand;
  void *rand_user_data;
  /* After *_del(), connections still open after this long are closed
   * without waiting for their last frames. Default 5 s. */
  mcp_tstamp shutdown_grace;
  mcp_h2c_stream_cb on_stream; /* optional */
  void *user_data;             /* for on_stream, http_handler, on_closed */
  mcp_h2c_http_fn http_handler; /* LISTEN, optional */
  /* Called on the loop once a deleted object has closed its last handle
   * and freed itself (optional). */
  void (*on_closed)(void *user_data);
  /* Most *_update() calls queued and not yet run; more fail with
   * MCP_ERR_LIMIT (0: no limit). Default 65536. */
  size_t max_queued_updates;

  /*
   * Admission (LISTEN), the same policy and defaults as the gRPC
   * transport's (mcp/grpc.h; the core's mcp_admit, mcp.h): 0 means the
   * default, the largest value of the type no limit. The peer is the
   * address without the port.
   *   max_streams (100000) / max_streams_per_peer (a quarter of it):
   *     MCP streams open or waiting; beyond, RESOURCE_EXHAUSTED.
   *   stream_rate (1000/s) / stream_burst (2000): new streams; one finding
   *     no token waits while fewer than |stream_burst| wait (a quarter of
   *     them per peer; tokens go round robin across peers); beyond,
   *     UNAVAILABLE "too many new streams; retry later".
   *   max_initial_pushes (64) / max_initial_pushes_per_peer (16), sources:
   *     streams between their admission and the moment the first push of
   *     every collection they asked for is taken from the core (at most
   *     |initial_push_timeout|, 10 s). Others wait, round robin across
   *     peers, with no session; what they send is held unread (within the
   *     stream's HTTP/2 window).
   *   admission_wait_timeout (5 s): a stream still waiting then ends with
   *     UNAVAILABLE "server busy: not admitted within the wait timeout;
   *     retry later".
   */
  size_t max_streams;
  size_t max_streams_per_peer;
  uint32_t stream_rate;
  uint32_t stream_burst;
  size_t max_initial_pushes;
  size_t max_initial_pushes_per_peer;
  mcp_tstamp initial_push_timeout;
  mcp_tstamp admission_wait_timeout;

  /*
   * Services (LISTEN; see "Services" below): protocols served beside the
   * MCP methods on the same listener, each at its gRPC method path (a
   * :path matching none of them nor an MCP method is answered
   * UNIMPLEMENTED, as before). The array and the method strings are
   * copied by *_new(); each def's user_data is kept as given and must
   * stay valid until *_del() returns. *_new() fails with
   * INVALID_ARGUMENT for a method that does not start with '/', is
   * longer than 1024 bytes, appears twice, or is an MCP method the
   * object serves (while MCP is served), and for a def without open()
   * (mcp_service_defs_check()). |no_mcp| 1: the MCP methods are not served
   * (UNIMPLEMENTED): a source then needs no store (session_opts may be
   * NULL; *_update() then gives fn a NULL store), a sink no state. DIAL:
   * both must be 0/NULL (INVALID_ARGUMENT).
   */
  const mcp_service_def *services;
  size_t nservices;
  int no_mcp;

  /* --- MCP_H2C_OPTIONS_V2 --- */

  /* The allocator of this library's own objects (see "Memory" above;
   * NULL: the C library). The struct is copied at creation. */
  const mcp_mem *mem;

  /* --- MCP_H2C_OPTIONS_V3 --- */

  /* TLS (see mcp_h2c_tls_options); all NULL: cleartext. */
  mcp_h2c_tls_options tls;
  /*
   * Authorization of the peer (mcp/auth.h; NULL: everyone; for an access
   * list: mcp_acl_authorize with the mcp_acl as user data, which must
   * outlive the object and change only on the loop thread). LISTEN:
   * called for each new gRPC call with the connection's peer, before
   * admission and before a session exists; a refused call is answered
   * with the status at once (trailers only) and reported as
   * MCP_H2C_STREAM_REFUSED. DIAL: called once the handshake is done, with
   * the server's identities, before anything is sent on the connection;
   * a refused server's connection closes and its streams end with the
   * status. Runs on the loop thread; must not call into the object.
   * Cleartext connections have no identity: an access list refuses them
   * (UNAUTHENTICATED).
   */
  mcp_authorize_fn authorize;
  void *authorize_user_data;
  /*
   * TLS handshakes (LISTEN): a connection whose handshake is not done
   * |handshake_timeout_ms| after it was accepted is closed (default
   * 10000); at most |max_handshakes| (default 1024) are in progress at
   * once, |max_handshakes_per_peer| (default 32) from one address: a
   * connection beyond is closed at once (stats: refused_handshakes).
   * DIAL: the same timeout ends an attempt. 0: the default; the largest
   * int: no limit.
   */
  int handshake_timeout_ms;
  int max_handshakes;
  int max_handshakes_per_peer;
  /*
   * LISTEN: gRPC calls served at once on one connection (default 1024: a
   * Conduit proxy multiplexes one Destination Get per destination over
   * one connection, and grpc-go and Envoy set no limit; 1024 idle calls
   * hold about 1 MiB). A call beyond ends at once with RESOURCE_EXHAUSTED
   * "too many concurrent streams on this connection" (stats:
   * refused_connection_streams).
   */
  int max_streams_per_connection;
  /*
   * LISTEN, rapid reset (CVE-2023-44487): streams a client may reset on
   * one connection, a token bucket of |stream_reset_burst| (default 1000)
   * refilled at |stream_reset_rate| per second (default 33; nghttp2
   * 1.57's own). Past it the connection gets GOAWAY ENHANCE_YOUR_CALM
   * "too many streams reset" and closes once its streams are gone
   * (stats: rapid_resets). 0: the default; UINT32_MAX: no limit.
   */
  uint32_t stream_reset_rate;
  uint32_t stream_reset_burst;
  /*
   * LISTEN: new streams per peer (its verified identity, else its
   * address), a token bucket of |peer_stream_burst| (default 100)
   * refilled at |peer_stream_rate| per second (default 100), on top of
   * |stream_rate|. A call finding its peer's bucket empty waits for a
   * token, unread, while fewer than a quarter of the burst of that peer's
   * calls wait (a client that redials at once after every failure is
   * paced, as Istio 1.6's source paces it); beyond, RESOURCE_EXHAUSTED
   * "too many new streams from this peer: more than R per second after a
   * burst of B; retry with backoff" (stats: peer_rate_delayed,
   * refused_peer_rate). 0: the default; UINT32_MAX for the rate: no limit
   * (mcp.h, "Admission", rule 5).
   */
  uint32_t peer_stream_rate;
  uint32_t peer_stream_burst;

  /* --- MCP_H2C_OPTIONS_V4 --- */

  /* LISTEN, optional: the listener paused (out of file descriptors) or
   * resumed (mcp_h2c_listener_event), with options.user_data; on the loop
   * thread. Without it a pause is only counted (stats: accept_pauses). */
  mcp_h2c_listener_cb on_listener;
} mcp_h2c_options;

/*
 * Versions of mcp_h2c_options (docs/api.md, "Versioned structs"): V1 is
 * the struct up to |no_mcp| (0.2.0); V2 appends |mem|; V3 (issue 23) TLS,
 * authorization and the handshake limits; V4 (issue 25) on_listener.
 */
#define MCP_H2C_OPTIONS_V1 1
#define MCP_H2C_OPTIONS_V2 2
#define MCP_H2C_OPTIONS_V3 3
#define MCP_H2C_OPTIONS_V4 4
#define MCP_H2C_OPTIONS_VERSION MCP_H2C_OPTIONS_V4

/* Fills |opts| with the defaults: LISTEN, address NULL (must be set).
 * Writes only the fields of |version| (nothing for a version below 1; the
 * newest this library knows for a newer one). */
MCP_EXTERN void mcp_h2c_options_default_versioned(int version,
                                                  mcp_h2c_options *opts);
#define mcp_h2c_options_default(OPTS)                                        \
  mcp_h2c_options_default_versioned(MCP_H2C_OPTIONS_VERSION, (OPTS))

/* Functions run on the loop thread; |ts| is mcp_h2c_now(). */
typedef void (*mcp_h2c_store_fn)(mcp_store *store, mcp_tstamp ts,
                                 void *user_data);
typedef void (*mcp_h2c_state_fn)(mcp_sink_state *state, mcp_tstamp ts,
                                 void *user_data);
typedef void (*mcp_h2c_stream_fn)(const mcp_h2c_stream_info *info,
                                  void *user_data);
typedef void (*mcp_h2c_run_fn)(mcp_tstamp ts, void *user_data);

/*
 * Counters of one object (all connections), read on the loop thread: the
 * engine's one shape (mcp/engine.h, mcp_transport_stats), shared with
 * every transport, which this transport fills in full. Its V1 to V3 are
 * this struct's layout of 0.5.0 and before (unchanged); V4 (issue 21)
 * appends |opened|.
 */
typedef mcp_transport_stats mcp_h2c_stats;

#define MCP_H2C_STATS_V1 MCP_TRANSPORT_STATS_V1
#define MCP_H2C_STATS_V2 MCP_TRANSPORT_STATS_V2
#define MCP_H2C_STATS_V3 MCP_TRANSPORT_STATS_V3
#define MCP_H2C_STATS_V4 MCP_TRANSPORT_STATS_V4
#define MCP_H2C_STATS_VERSION MCP_TRANSPORT_STATS_VERSION

/* ------------------------------------------------------------------ */
/* Source                                                              */
/* ------------------------------------------------------------------ */

typedef struct mcp_h2c_source mcp_h2c_source;

/*
 * Creates a source on |loop| and binds (LISTEN) or starts dialing (DIAL;
 * the first attempt starts on the next loop iteration). Each stream gets
 * an mcp_source_session made from a copy of |session_opts|, whose
 * |send_trigger| is set by the mode (1 for DIAL, 0 for LISTEN) and whose
 * |service| by the method: LISTEN serves ResourceSource and both
 * AggregatedMeshConfigService methods on the same port; DIAL dials
 * ResourceSink (the only service where the source dials).
 * |session_opts->store| (and the stores select_store returns) are kept by
 * pointer and must outlive the object's use of them (until *_del()
 * returns). On failure |*psrc| is untouched and nothing is left on the
 * loop. Errors: INVALID_ARGUMENT (no loop, no address or a bad one, a
 * name that does not resolve, neither store nor select_store), IO (the
 * address cannot be bound; errno says why, e.g. EADDRINUSE, EACCES,
 * EADDRNOTAVAIL), NOMEM; INVALID_ARGUMENT also for a |version| of
 * mcp_h2c_options this library does not know (below 1 or newer than it).
 * Of an older version, only that version's fields are read; the newer
 * ones take their defaults. With options.no_mcp (LISTEN), |session_opts|
 * may be NULL: only the services are served.
 */
MCP_EXTERN int mcp_h2c_source_new_versioned(
    mcp_h2c_source **psrc, uv_loop_t *loop, int version,
    const mcp_h2c_options *opts, const mcp_source_options *session_opts);
#define mcp_h2c_source_new(PSRC, LOOP, OPTS, SESSION_OPTS)                   \
  mcp_h2c_source_new_versioned((PSRC), (LOOP), MCP_H2C_OPTIONS_VERSION,     \
                               (OPTS), (SESSION_OPTS))

/* Starts the shutdown (see the top of this file) and returns. Loop thread
 * only, not from a callback of this object. NULL is a no-op. */
MCP_EXTERN void mcp_h2c_source_del(mcp_h2c_source *src);

/* LISTEN on TCP: the bound port. Otherwise 0. */
MCP_EXTERN int mcp_h2c_source_port(const mcp_h2c_source *src);

/*
 * Loop thread: asks options.authorize again (after the policy changed,
 * e.g. an access list reloaded) about the peer of every open call
 * (LISTEN: each refused call ends with the status, e.g.
 * PERMISSION_DENIED, counted in stats.revoked) or the server of every
 * connection (DIAL: a refused server's connection closes, its streams
 * end with the status). Returns 0 (also without authorize). Errors:
 * INVALID_ARGUMENT (not on the loop thread, or after *_del()).
 */
MCP_EXTERN int mcp_h2c_source_reauthorize(mcp_h2c_source *src);

/* The store changed (on the loop thread): every stream pushes what it may,
 * on the next loop iteration. (h2c only: with the gRPC transport the
 * store is changed through *_update().) */
MCP_EXTERN void mcp_h2c_source_notify(mcp_h2c_source *src);

/*
 * Any thread: queues |fn| to run on the loop thread with the default
 * store (session_opts->store, possibly NULL), then notifies, and returns
 * at once. Updates run in the order queued. |user_data| is read when
 * |fn| runs, not now: what it points to must stay valid and unchanged
 * until then (mcp_h2c_source_call() returns after the run). Errors:
 * NOMEM, LIMIT (max_queued_updates are waiting), CLOSED (the object is
 * being deleted).
 */
MCP_EXTERN int mcp_h2c_source_update(mcp_h2c_source *src, mcp_h2c_store_fn fn,
                                     void *user_data);

/* As mcp_h2c_source_update(), but returns once |fn| has run. Not on the
 * loop thread. Errors: CLOSED, INVALID_ARGUMENT (called on the loop
 * thread). */
MCP_EXTERN int mcp_h2c_source_call(mcp_h2c_source *src, mcp_h2c_store_fn fn,
                                   void *user_data);

/* Loop thread: calls |fn| (NULL: none, to count) for each open stream.
 * Returns their number. Errors: INVALID_ARGUMENT (not on the loop
 * thread). */
MCP_EXTERN int mcp_h2c_source_streams(mcp_h2c_source *src,
                                      mcp_h2c_stream_fn fn, void *user_data);

/* Loop thread: fills the fields of |version| of |st| and returns 0.
 * Errors: INVALID_ARGUMENT (not on the loop thread, |st| NULL, a version
 * below 1; a newer one than this library knows gets the fields it
 * knows). */
MCP_EXTERN int mcp_h2c_source_stats_versioned(mcp_h2c_source *src,
                                              int version, mcp_h2c_stats *st);
#define mcp_h2c_source_stats(SRC, ST)                                        \
  mcp_h2c_source_stats_versioned((SRC), MCP_H2C_STATS_VERSION, (ST))

/* ------------------------------------------------------------------ */
/* Sink                                                                */
/* ------------------------------------------------------------------ */

typedef struct mcp_h2c_sink mcp_h2c_sink;

/*
 * Creates a sink on |state| and |loop|, binds or starts dialing. DIAL
 * calls the method of the state's service (mcp_sink_state_service());
 * LISTEN serves ResourceSink, so the state's service must be
 * MCP_SERVICE_RESOURCE (else INVALID_ARGUMENT). Each stream gets a new
 * mcp_sink_session on |state|, so a reconnecting sink resumes with the
 * versions it holds. |state| is kept by pointer. A state
 * has one session at a time: when LISTENing, a new stream replaces the
 * open one, which is ended with ABORTED. On failure |*psink| is
 * untouched. Errors: INVALID_ARGUMENT (no loop, address or state, or the
 * cases of mcp_h2c_source_new()), IO (errno says why the address cannot
 * be bound), NOMEM. With options.no_mcp (LISTEN), |state| may be NULL.
 */
MCP_EXTERN int mcp_h2c_sink_new_versioned(mcp_h2c_sink **psink,
                                          uv_loop_t *loop, int version,
                                          const mcp_h2c_options *opts,
                                          mcp_sink_state *state);
#define mcp_h2c_sink_new(PSINK, LOOP, OPTS, STATE)                           \
  mcp_h2c_sink_new_versioned((PSINK), (LOOP), MCP_H2C_OPTIONS_VERSION,      \
                             (OPTS), (STATE))

/* As mcp_h2c_source_del(). The state is not freed. */
MCP_EXTERN void mcp_h2c_sink_del(mcp_h2c_sink *sink);

/* LISTEN on TCP: the bound port. Otherwise 0. */
MCP_EXTERN int mcp_h2c_sink_port(const mcp_h2c_sink *sink);

/* Any thread but the loop thread: runs |fn| with the state on the loop
 * thread and returns once it has run. Errors: CLOSED, INVALID_ARGUMENT
 * (called on the loop thread). */
MCP_EXTERN int mcp_h2c_sink_call(mcp_h2c_sink *sink, mcp_h2c_state_fn fn,
                                 void *user_data);

/* Loop thread: ends the stream that holds the sink session as a sink that
 * is done, as mcp_grpc_sink_finish(): what is ready is sent, then DIAL:
 * END_STREAM (the half-close); the source's trailers end the stream, then
 * the connection, and no new call or connection is made. LISTEN (issue
 * 21): trailers with OK end it; new calls are still served. Errors:
 * INVALID_ARGUMENT (not on the loop thread). */
MCP_EXTERN int mcp_h2c_sink_finish(mcp_h2c_sink *sink);

/* Loop thread: calls |fn| for each open stream (at most one holds the
 * sink session). As mcp_h2c_source_streams(). */
MCP_EXTERN int mcp_h2c_sink_streams(mcp_h2c_sink *sink, mcp_h2c_stream_fn fn,
                                    void *user_data);

/* As mcp_h2c_source_reauthorize(). */
MCP_EXTERN int mcp_h2c_sink_reauthorize(mcp_h2c_sink *sink);

/* As mcp_h2c_source_stats(). */
MCP_EXTERN int mcp_h2c_sink_stats_versioned(mcp_h2c_sink *sink, int version,
                                            mcp_h2c_stats *st);
#define mcp_h2c_sink_stats(SINK, ST)                                         \
  mcp_h2c_sink_stats_versioned((SINK), MCP_H2C_STATS_VERSION, (ST))

/* ------------------------------------------------------------------ */
/* Services (listening side)                                           */
/* ------------------------------------------------------------------ */

/*
 * A source or sink created with options.services serves each
 * mcp_service_def (mcp/engine.h) at its method, on the same listener as
 * MCP. A call to one goes through exactly what an MCP call goes
 * through: the gRPC request checks, grpc-timeout, admission and its
 * limits (a service stream counts as a stream but never takes an initial
 * push slot), stats, and on_stream events (info.stream, info.api). Then
 * the transport calls def->open() with the peer ("ipv4:127.0.0.1:40000",
 * tls 0, no identities: h2c is cleartext) on the loop thread; an error
 * ends the call at once with mcp_error_grpc_status()/mcp_strerror(), and
 * 0 gives the transport the stream (it deletes it with
 * mcp_stream_del(), which calls ops->del once, whenever the call ends:
 * END, the peer's reset, a lost connection, a deadline, *_del()).
 *
 * The transport drives the stream (mcp_stream_*): each received gRPC
 * message goes to mcp_stream_recv(), the peer's END_STREAM to
 * mcp_stream_half_close(); it pumps after every event on the call, after
 * every mcp_h2c_source_notify(), _update() or _call() (so protocols
 * watching a store push after a change, as MCP sessions do), at
 * mcp_stream_get_expiry(),
 * and soon after mcp_stream_wake() (the waker only marks the stream; the
 * pump runs from the loop, never inside the wake). One message is in
 * flight at a time (can_send 0 until it is handed to HTTP/2 in full),
 * so a peer that stops reading stops the pulling. SEND is framed and
 * sent, END becomes the trailers (grpc-status, grpc-message) after the
 * last message.
 */

/* ------------------------------------------------------------------ */
/* Client (dialing side)                                               */
/* ------------------------------------------------------------------ */

typedef struct mcp_h2c_client mcp_h2c_client;

/*
 * Creates a client running |def| (mcp/engine.h) on |loop|: it dials
 * opts->address ("HOST:PORT", "unix:/path", or several separated by
 * commas, tried in turn) with HTTP/2 prior knowledge, and keeps one
 * connection, reconnecting after opts->backoff when it is lost or cannot
 * be made (the first attempt starts on the next loop iteration).
 * opts->mode is ignored (a client dials); services/no_mcp must be unset.
 *
 * Calls: while a connection exists (connecting or up, and not going
 * away), after every event (a message, a send done, a call ended, a
 * timer, a wake, *_notify()) and at def->get_expiry(), def->open(slot)
 * is asked for every slot without a call; 1 and a stream: a call of
 * def->method(slot) starts on that connection (every slot's calls share
 * it, as concurrent HTTP/2 streams; they are sent once the server's
 * SETTINGS arrived, so its stream limit holds them back rather than
 * refusing them; a def->method(slot) that is NULL or not a path ends
 * the call at once: MCP_CLIENT_BAD_METHOD_CODE / _DETAILS, mcp/engine.h).
 * What the stream's pump gives is
 * framed and sent, HALF_CLOSE sends END_STREAM, received messages go to
 * mcp_stream_recv(). When the call ends (the server's trailers: their
 * grpc-status and grpc-message; a reset; a lost or failed connection:
 * UNAVAILABLE; the stream's own END: its status), the transport deletes
 * the stream (ops->del) and then calls def->ended(slot, status, details,
 * ts); the slot is free again from then on. Whether and when a call is
 * retried is the protocol's choice, through open().
 *
 * Threads and ownership: everything runs on the loop thread, the
 * callbacks of |def| included; from other threads, only
 * mcp_h2c_client_update() and _call(). The callbacks must not call
 * mcp_h2c_client_del() or _call(); they may call _notify(), _update(),
 * _streams() and _stats(), and mcp_stream_wake(). |def| is
 * copied, its user_data and the strings method() returns (read at the
 * start of each call) are kept by pointer: they must stay valid until
 * mcp_h2c_client_del() returns. Every stream open() hands over belongs
 * to the transport from then on. On failure |*pc| is untouched and
 * nothing is left on the loop. Errors: INVALID_ARGUMENT (no loop,
 * options, address or def; a def without nslots, method, open or ended;
 * a bad address; services set; an unknown |version|), NOMEM.
 */
MCP_EXTERN int mcp_h2c_client_new_versioned(mcp_h2c_client **pc,
                                            uv_loop_t *loop, int version,
                                            const mcp_h2c_options *opts,
                                            const mcp_client_def *def);
#define mcp_h2c_client_new(PC, LOOP, OPTS, DEF)                              \
  mcp_h2c_client_new_versioned((PC), (LOOP), MCP_H2C_OPTIONS_VERSION,       \
                               (OPTS), (DEF))

/*
 * Loop thread, not from a callback of this object. Runs the jobs still
 * queued, ends every call (its stream deleted, then def->ended() with
 * CANCELLED "client shutting down", before this returns), resets the
 * calls, closes the connection, and returns: no callback of |def| runs
 * after it. The handles close on the loop as for *_del() above
 * (options.on_closed). NULL is a no-op.
 */
MCP_EXTERN void mcp_h2c_client_del(mcp_h2c_client *c);

/* Any thread: queues |fn| to run on the loop thread (to touch the
 * protocol's state), then every call is pumped and open() asked; returns
 * at once. |user_data| as for mcp_h2c_source_update(). Errors: NOMEM,
 * LIMIT (max_queued_updates), CLOSED. */
MCP_EXTERN int mcp_h2c_client_update(mcp_h2c_client *c, mcp_h2c_run_fn fn,
                                     void *user_data);

/* As mcp_h2c_client_update(), but returns once |fn| has run. Not on the
 * loop thread. Errors: CLOSED, INVALID_ARGUMENT (on the loop thread). */
MCP_EXTERN int mcp_h2c_client_call(mcp_h2c_client *c, mcp_h2c_run_fn fn,
                                   void *user_data);

/* Loop thread: something the protocol reads changed; every call is
 * pumped and open() asked again, on the next loop iteration. */
MCP_EXTERN void mcp_h2c_client_notify(mcp_h2c_client *c);

/* Loop thread: calls |fn| for each call (info.stream, info.api, and
 * info.method say which). As mcp_h2c_source_streams(). */
MCP_EXTERN int mcp_h2c_client_streams(mcp_h2c_client *c,
                                      mcp_h2c_stream_fn fn, void *user_data);

/* As mcp_h2c_source_reauthorize() (the server of the connection). */
MCP_EXTERN int mcp_h2c_client_reauthorize(mcp_h2c_client *c);

/* As mcp_h2c_source_stats() (streams: calls open; connections: 0 or 1). */
MCP_EXTERN int mcp_h2c_client_stats_versioned(mcp_h2c_client *c, int version,
                                              mcp_h2c_stats *st);
#define mcp_h2c_client_stats(C, ST)                                          \
  mcp_h2c_client_stats_versioned((C), MCP_H2C_STATS_VERSION, (ST))

#ifdef __cplusplus
}
#endif

#endif /* MCP_H2C_H */
