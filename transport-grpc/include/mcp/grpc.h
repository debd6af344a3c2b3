/*
 * libmcp gRPC transport: serves and dials MCP streams over gRPC's C core.
 *
 * Two objects, each in one of two modes, give the four roles:
 *
 *   mcp_grpc_source, MCP_GRPC_LISTEN  ResourceSource server (sinks dial us)
 *   mcp_grpc_source, MCP_GRPC_DIAL    ResourceSink client (we dial a sink)
 *   mcp_grpc_sink,   MCP_GRPC_LISTEN  ResourceSink server (sources dial us)
 *   mcp_grpc_sink,   MCP_GRPC_DIAL    ResourceSource client (we dial a source)
 *
 * Any other protocol (mcp/engine.h) runs on the same transport without
 * transport code of its own:
 *
 *   mcp_grpc_options.services  a listening source or sink also serves
 *                              these methods (mcp_service_def) on its
 *                              port; no_mcp = 1 serves only them
 *   mcp_grpc_client            dials and runs an mcp_client_def: its call
 *                              slots, on one connection
 *
 * Each call of such a protocol is an mcp_stream (the engine's driver); the
 * transport moves its messages (protobuf bytes; the gRPC framing is
 * gRPC's), pumps it after every event, every update and at its expiry,
 * and ends the call with the status the stream gives. See "Services" and
 * "Client" below.
 *
 * The transport holds no protocol rules: each stream is one core session
 * (mcp_source_session or mcp_sink_session) and the transport only moves
 * messages between gRPC and that session, drives its timers, and ends the
 * stream with mcp_error_grpc_status(err) / mcp_strerror(err) when the core
 * reports an error.
 *
 * Threading: each object (source, sink, client) owns one thread and one
 * gRPC completion queue (the "transport thread"). Every core call on the
 * object's store, sink state and sessions happens on that thread, and so
 * does every callback: the core's apply and event callbacks, this
 * library's stream callback, and every engine call (mcp_service_def's
 * open(), mcp_client_def's callbacks, every mcp_stream_ops operation, the
 * protocol modules' view-store watches). The application reaches the store,
 * the sink state or a protocol's state only through *_update() / *_call(),
 * which run a function on the transport thread. All functions below may
 * be called from any thread, except that *_del() must not race with other
 * calls on the same object and the *_call() / *_streams() / *_stats()
 * functions must not be called from the transport thread (from a
 * callback: they return INVALID_ARGUMENT); *_update() may be.
 *
 * Half-close (LISTEN): when a client half-closes its side of a stream
 * (it will send nothing more), the server stops reading but still sends
 * what the session has ready at that moment: the answers to the requests
 * it received, one message at a time. Once the session has nothing more to
 * send now, the stream ends with status OK (the CLOSED event reports OK).
 * What the session would send only later (a push waiting for an ACK that
 * will not come, a debounce window, a later store change) is not waited
 * for, so a store that keeps changing does not hold the stream open. Both
 * transports behave so (mcp/h2c.h): a request sent in one body with the
 * half-close (curl, h2load) gets its whole answer, then OK.
 *
 * One shape with mcp/h2c.h (docs/api.md, "The transport API: one
 * shape", lists both side by side): the same functions, in the same
 * argument order, returning int (0, or a count, or a negative mcp_error),
 * with versioned options and stats (MCP_GRPC_OPTIONS_VERSION,
 * MCP_GRPC_STATS_VERSION; the *_new(), *_options_default() and *_stats()
 * names are macros over *_versioned() functions, as in mcp/mcp.h). What
 * differs, and why: this transport runs its own thread, so every function
 * may be called from any thread (with the exceptions above) and a
 * function that reads the object's state (*_streams(), *_stats())
 * blocks until the transport thread has answered; h2c runs on the
 * caller's loop, so its functions are loop-thread only, answer at once,
 * and it has *_notify() where this one has only *_update().
 *
 * Memory: mcp_grpc_options.mem (NULL: the C library) is copied at
 * creation, and every allocation this library makes for its own objects
 * (the objects, their streams, strings, queued jobs, channel argument
 * arrays, TLS material, the references that keep a message alive while
 * gRPC sends it) goes through it. gRPC's own allocations (its calls,
 * channels, slices, completion queue, threads) do not: gRPC has no
 * per-object allocator. The sessions' allocations go through the core
 * options' hooks (mcp_source_options.mem, the sink state's). Access lists
 * take theirs at creation (mcp_grpc_acl_new2()). The hook must be
 * thread-safe: it is called from the caller's thread (in *_new(), *_del()
 * and when queuing an update), from the transport thread, and from
 * gRPC's own threads (a message's last slice, freed wherever gRPC drops
 * it; certificate files re-read by gRPC's credential watchers).
 *
 * Time: mcp_grpc_now(), CLOCK_MONOTONIC in nanoseconds, is the mcp_tstamp
 * given to every core call.
 *
 * Errors are the core's negative mcp_error codes.
 *
 * gRPC: every object calls grpc_init() when created and grpc_shutdown()
 * when deleted. Before its first grpc_init(), the object asks OpenSSL not
 * to clean up at exit (OPENSSL_INIT_NO_ATEXIT): gRPC may still be ending
 * its own clean-up on one of its threads then (docs/api.md, "OpenSSL at
 * exit").
 *
 * Security (docs/security.md): TLS and mutual TLS from PEM files
 * (mcp_grpc_tls_options), authorization of the peer's certificate
 * identities (mcp_grpc_options.authorize, and the ready-made access list
 * mcp_grpc_acl), and admission limits on listening objects (how many
 * streams, how fast they open, how many are in their initial sync).
 */
#ifndef MCP_GRPC_H
#define MCP_GRPC_H

#include <grpc/grpc.h>

#include <mcp/auth.h>
#include <mcp/engine.h>
#include <mcp/mcp.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MCP's methods: the core's (mcp/engine.h), under this header's names. */
#define MCP_GRPC_RESOURCE_SOURCE_METHOD MCP_RESOURCE_SOURCE_METHOD
#define MCP_GRPC_RESOURCE_SINK_METHOD MCP_RESOURCE_SINK_METHOD
#define MCP_GRPC_AGGREGATED_METHOD MCP_AGGREGATED_METHOD
#define MCP_GRPC_AGGREGATED_INCREMENTAL_METHOD MCP_AGGREGATED_INCREMENTAL_METHOD

/* The method that carries |service| in the direction where |sink_dials|
 * (ResourceSource and the aggregated services) or not (ResourceSink):
 * mcp_service_method() of mcp/engine.h, kept for existing callers. */
MCP_EXTERN const char *mcp_grpc_method(mcp_service service, int sink_dials);

/* The transport's clock: CLOCK_MONOTONIC in nanoseconds. */
MCP_EXTERN mcp_tstamp mcp_grpc_now(void);

/* ------------------------------------------------------------------ */
/* Options                                                             */
/* ------------------------------------------------------------------ */

typedef enum mcp_grpc_mode {
  MCP_GRPC_LISTEN = 0, /* serve the method of the role on |address| */
  MCP_GRPC_DIAL = 1    /* dial |address| and reconnect forever */
} mcp_grpc_mode;

/*
 * Reconnection delays of a dialing object. After a stream ends, the next
 * attempt waits the nominal delay scaled by a factor drawn uniformly from
 * [1 - jitter, 1 + jitter], capped at |max|; the nominal delay then grows
 * by |multiplier| up to |max|. It goes back to |initial| (never to zero)
 * only after a healthy stream: one that received a message and lasted at
 * least the nominal delay. The first attempt is immediate. This is the
 * core's policy (mcp_redial; defaults: mcp_backoff_defaults()), applied
 * to MCP's calls (the MCP side's client def) and to connections (a new
 * one after the last is gone): a call waits for both (0.9.0).
 */
typedef mcp_backoff_options mcp_grpc_backoff_options;

/*
 * TLS from PEM files, an alternative to the raw credentials fields of
 * mcp_grpc_options (setting both is INVALID_ARGUMENT). TLS is on when any
 * of the three files is set. The paths are copied; the files are read by
 * *_new() (errors: IO when one cannot be read, INVALID_ARGUMENT when it
 * holds no PEM block) and read again whenever one of them changes (size,
 * modification time or inode; checked at most once a second, LISTEN on
 * each new connection, DIAL before each connection attempt), so that
 * rotated certificates are picked up without a restart; a set that fails
 * to load keeps the previous one in use.
 *
 * LISTEN: |cert_file| and |key_file| are required. With |ca_file|, every
 *   client must present a certificate that |ca_file| verifies (mutual TLS,
 *   GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY): its
 *   identities are then known (mcp_grpc_peer). Without, the server is
 *   authenticated only and clients have no identity.
 * DIAL: the server's certificate is verified against |ca_file| (NULL:
 *   gRPC's default roots) and must name the target's host (or
 *   |server_name|); |cert_file| and |key_file|, given together or not at
 *   all, are presented to the server (mutual TLS).
 *
 * A connection that fails its handshake never becomes a call: a listening
 * object does not see it (gRPC logs it); a dialing object's stream closes
 * with UNAVAILABLE and details starting "no TLS connection".
 */
typedef struct mcp_grpc_tls_options {
  const char *cert_file; /* PEM certificate chain, leaf first */
  const char *key_file;  /* PEM private key of |cert_file| */
  const char *ca_file;   /* PEM CA certificates that verify the peer */
  /* DIAL: the name the server's certificate must carry instead of the
   * target's host (GRPC_SSL_TARGET_NAME_OVERRIDE_ARG; for tests and for
   * addressing by IP). Also applies with |channel_credentials|. */
  const char *server_name;
} mcp_grpc_tls_options;

/*
 * Checks that the files of |tls| can be read and hold PEM data, as *_new()
 * will, and writes what is wrong into |err| (NUL terminated, at most
 * |errlen| bytes; may be NULL), e.g. "cannot read /etc/mcp/key.pem: No
 * such file or directory". For programs that want a clear message.
 * Errors: IO, INVALID_ARGUMENT (no PEM block; a cert without key or the
 * reverse), NOMEM.
 */
MCP_EXTERN int mcp_grpc_tls_check(const mcp_grpc_tls_options *tls,
                                  char *err, size_t errlen);

/*
 * The peer of a stream, as authorization sees it: mcp_peer (mcp/auth.h),
 * whose identity rules every transport shares. Identities come from the
 * peer's certificate, only once it was verified: the client's certificate
 * when a listening object has a CA (mutual TLS), the server's certificate
 * when dialing over TLS. |address| is gRPC's peer string.
 */
typedef mcp_peer mcp_grpc_peer;

/*
 * Decides whether |peer| may hold a stream (mcp_authorize_fn: 0 allows; a
 * gRPC status code refuses, and the stream ends with it before any
 * message is read or sent). LISTEN: called for each new call, before
 * admission and before a session exists; a refused call is reported as
 * MCP_GRPC_STREAM_REFUSED. DIAL: called once the connection is up, with
 * the server's identities, before the session's first message is sent; a
 * refused server's stream closes with the status. Runs on the transport
 * thread; must not call into the object (it may use an mcp_grpc_acl or
 * any thread-safe state of its own).
 */
typedef mcp_authorize_fn mcp_grpc_authorize_fn;

/* What the transport knows of one stream: the engine's one shape
 * (mcp/engine.h, mcp_stream_info), same layout as before it moved there
 * plus fields appended. This transport fills every field but |method|
 * (""). Strings are valid during the callback only. |status|: CLOSED and
 * REFUSED (the status sent, the one received, or CANCELLED). |sent|:
 * messages whose send gRPC completed; |sending|: a send is in flight. */
typedef mcp_stream_info mcp_grpc_stream_info;

/* The engine's events (mcp/engine.h, mcp_stream_event), under this
 * header's names. REFUSED: authorization or admission refused a call. */
typedef mcp_stream_event mcp_grpc_stream_event;
#define MCP_GRPC_STREAM_OPENED MCP_STREAM_OPENED
#define MCP_GRPC_STREAM_CLOSED MCP_STREAM_CLOSED
#define MCP_GRPC_STREAM_REFUSED MCP_STREAM_REFUSED

/* Runs on the transport thread. May call *_update(), nothing else of this
 * library. */
typedef mcp_stream_cb mcp_grpc_stream_cb;

typedef struct mcp_grpc_options {
  mcp_grpc_mode mode;
  /* LISTEN: gRPC listen address ("127.0.0.1:0" binds a free port, see
   * *_port()). DIAL: gRPC target ("127.0.0.1:15010", "dns:///host:port",
   * "unix:/path"), or several separated by commas (replicas of one source):
   * each new connection dials the next one in turn, after the backoff (a
   * call goes on the connection that stands). Copied;
   * at most 4095 bytes, each target at most 511. */
  const char *address;
  /* NULL: insecure. LISTEN uses |server_credentials| during *_new() only.
   * DIAL uses |channel_credentials| for every connection attempt: they
   * must outlive the object. Never released by this library. */
  grpc_server_credentials *server_credentials;
  grpc_channel_credentials *channel_credentials;
  /* Largest message received / sent, in bytes; -1: unlimited; 0: the
   * default, 64 MiB (gRPC's own receive default is 4 MiB). A larger
   * message ends the stream with RESOURCE_EXHAUSTED. */
  int max_recv_message_size;
  int max_send_message_size;
  /* HTTP/2 keepalive (GRPC_ARG_KEEPALIVE_*); 0 leaves gRPC's default.
   * DIAL with |keepalive_time_ms| keeps pinging while no data flows
   * (idle streams are the norm), so the server must accept that:
   * |min_recv_ping_interval_ms| (LISTEN) is the shortest ping interval it
   * tolerates from clients that send no data (gRPC's default: 5 minutes;
   * faster pings get the connection closed). Default all 0. */
  int keepalive_time_ms;
  int keepalive_timeout_ms;
  int keepalive_permit_without_calls;
  int min_recv_ping_interval_ms;
  /* More channel arguments for gRPC, appended after the ones this library
   * sets (NULL: none). gRPC uses the first of two with one key, so ours
   * stay, except the two of MCP_GRPC_STREAM_WINDOW, which these replace.
   * LISTEN reads them during *_new() only; DIAL at every attempt: they
   * must outlive the object. */
  const grpc_channel_args *channel_args;
  mcp_grpc_backoff_options backoff; /* DIAL */
  /* Randomness for the backoff jitter (NULL: a generator seeded from the
   * clock). Called on the transport thread. */
  mcp_rand_fn rand;
  void *rand_user_data;
  /* LISTEN: on *_del(), streams are ended with UNAVAILABLE once their send
   * in flight completes; calls still open after |shutdown_grace| are
   * cancelled. Default 5 s. */
  mcp_tstamp shutdown_grace;
  mcp_grpc_stream_cb on_stream; /* optional */
  void *user_data;
  /* Most *_update() calls queued and not yet run; more fail with
   * MCP_ERR_LIMIT (0: no limit). Default 65536. */
  size_t max_queued_updates;

  /* TLS and mutual TLS from PEM files (see mcp_grpc_tls_options). */
  mcp_grpc_tls_options tls;
  /* Authorization of the peer by identity (NULL: everyone). For an access
   * list: authorize = mcp_grpc_acl_authorize, authorize_user_data = the
   * mcp_grpc_acl. With |server_credentials| given by the application,
   * identities are what gRPC reports: use a client certificate request
   * type that verifies. */
  mcp_grpc_authorize_fn authorize;
  void *authorize_user_data;

  /*
   * Admission (LISTEN), after authorization: the core's policy (mcp.h,
   * "Admission"; the peer is the address without the port). 0 means the
   * default; the largest value of the type (SIZE_MAX, UINT32_MAX,
   * MCP_TSTAMP_MAX) means no limit.
   *   max_streams: streams open or waiting for admission; a call beyond
   *     it is refused with RESOURCE_EXHAUSTED "too many streams". Default
   *     100000. max_streams_per_peer: the same for one peer (RESOURCE_
   *     EXHAUSTED "too many streams from this peer"); default a quarter
   *     of max_streams.
   *   stream_rate / stream_burst: a token bucket for new streams (per
   *     second; the bucket holds |stream_burst|). A call finding no token
   *     waits for one while fewer than |stream_burst| calls wait (a
   *     quarter of them per peer), without being read from; beyond that it
   *     is refused with UNAVAILABLE "too many new streams; retry later".
   *     Tokens go round robin across peers. Default 1000/s, burst 2000.
   *   max_initial_pushes (sources): streams in their initial sync at once.
   *     A stream is initial from its admission until the first push of
   *     every collection it asked for (that the store knows) has been
   *     handed to gRPC, or for |initial_push_timeout| at most (a stream
   *     that asks for nothing). Streams beyond wait unread, their session
   *     not yet created, until a slot frees: a connect storm is served
   *     steadily instead of all at once. Default 64 streams, timeout 10 s.
   *     max_initial_pushes_per_peer: the slots one peer may hold, so that
   *     silent streams from one peer cannot hold them all; waiting
   *     streams are served round robin across peers. Default a quarter of
   *     max_initial_pushes (16).
   *   admission_wait_timeout: a call still waiting (for a token or a
   *     slot) after this long is refused with UNAVAILABLE "server busy:
   *     not admitted within the wait timeout; retry later". Default 5 s.
   * New streams per peer: |peer_stream_rate| / |peer_stream_burst| (V3,
   *   below).
   * Waiting calls count in |max_streams|; each costs gRPC's call (a few
   * KiB plus what the client sent before it was read, within HTTP/2 flow
   * control) and no session.
   */
  size_t max_streams;
  uint32_t stream_rate;
  uint32_t stream_burst;
  size_t max_initial_pushes;
  mcp_tstamp initial_push_timeout;
  size_t max_streams_per_peer;
  size_t max_initial_pushes_per_peer;
  mcp_tstamp admission_wait_timeout;

  /*
   * HTTP/2 limits of a listening object, given to gRPC as channel
   * arguments (docs/security.md, "gRPC 1.51 under attack", has what each
   * one holds off and what gRPC 1.51 cannot). 0 means the default; -1
   * leaves gRPC's own behaviour (no argument set).
   *   max_concurrent_streams: streams open at once on one connection
   *     (GRPC_ARG_MAX_CONCURRENT_STREAMS; gRPC's own: unlimited). Default
   *     1024 (issue 23: a Conduit proxy holds one Get per destination on
   *     one connection). gRPC clients queue calls past it, unstarted:
   *     gRPC core gives no way to refuse them (the h2c transport does,
   *     with RESOURCE_EXHAUSTED).
   *   max_metadata_size: bytes of a request's headers
   *     (GRPC_ARG_MAX_METADATA_SIZE); beyond, the call is refused.
   *     Default 8 KiB (gRPC's own).
   *   memory_limit: bytes gRPC may hold for this object's connections
   *     and calls (a grpc_resource_quota); under pressure gRPC cancels
   *     streams (RESOURCE_EXHAUSTED) and closes idle connections. Default
   *     256 MiB (four messages of the largest default size).
   *   max_ping_strikes: pings faster than |min_recv_ping_interval_ms|
   *     without data tolerated before the connection is closed
   *     (GRPC_ARG_HTTP2_MAX_PING_STRIKES). Default 2 (gRPC's own).
   *   max_connection_idle_ms: a connection without a stream this long is
   *     closed with GOAWAY (GRPC_ARG_MAX_CONNECTION_IDLE_MS). Default -1
   *     (never: gRPC's own).
   */
  int max_concurrent_streams;
  int max_metadata_size;
  int64_t memory_limit;
  int max_ping_strikes;
  int max_connection_idle_ms;

  /*
   * Services (LISTEN; see "Services" below): protocols served beside the
   * MCP methods on the same port, each at its method path
   * ("/conduit.proxy.destination.Destination/Get"). The array and the
   * method strings are copied by *_new(); each def's |user_data| is kept
   * as given and open() runs on the transport thread. *_new() fails with
   * INVALID_ARGUMENT for a method that does not start with '/', is
   * longer than 1024 bytes, appears twice, or is an MCP method the
   * object serves; for services on a DIAL object; and for a def without
   * open().
   * no_mcp (LISTEN only): 1 serves the services alone; the MCP methods
   * get UNIMPLEMENTED, as unknown ones; a source needs no store
   * (|session_opts| may be NULL; *_update() then gives fn a NULL store),
   * a sink no state (NULL; *_call() then gives fn a NULL state).
   */
  const mcp_service_def *services;
  size_t nservices;
  int no_mcp;

  /* --- MCP_GRPC_OPTIONS_V2 --- */

  /* The allocator of this library's own objects (see "Memory" above;
   * NULL: the C library). The struct is copied at creation. Must be
   * thread-safe. */
  const mcp_mem *mem;

  /* --- MCP_GRPC_OPTIONS_V3 --- */

  /*
   * LISTEN (issue 23): new streams per peer (its verified identity, else
   * its address without the port), a token bucket of |peer_stream_burst|
   * (default 100) refilled at |peer_stream_rate| per second (default
   * 100), on top of |stream_rate|. A call finding its peer's bucket empty
   * waits for a token, unread, while fewer than a quarter of the burst of
   * that peer's calls wait (so a client that redials at once after every
   * failure is paced, as Istio 1.6's source paces it); beyond, it is
   * refused with RESOURCE_EXHAUSTED "too many new streams from this peer:
   * more than R per second after a burst of B; retry with backoff". Stats:
   * peer_rate_delayed, refused_peer_rate. 0: the default; UINT32_MAX for
   * the rate: no limit (mcp.h, "Admission", rule 5).
   */
  uint32_t peer_stream_rate;
  uint32_t peer_stream_burst;
} mcp_grpc_options;

/*
 * Versions of mcp_grpc_options (docs/api.md, "Versioned structs"): V1 is
 * the struct up to |no_mcp| (0.2.0); V2 appends |mem|; V3 (issue 23) the
 * per-peer stream rate.
 */
#define MCP_GRPC_OPTIONS_V1 1
#define MCP_GRPC_OPTIONS_V2 2
#define MCP_GRPC_OPTIONS_V3 3
#define MCP_GRPC_OPTIONS_VERSION MCP_GRPC_OPTIONS_V3

/* The admission defaults are the core's (mcp_admit, engine.h): these names
 * stay for source compatibility. */
#define MCP_GRPC_DEFAULT_MAX_STREAMS MCP_ADMIT_DEFAULT_MAX_STREAMS
#define MCP_GRPC_DEFAULT_STREAM_RATE MCP_ADMIT_DEFAULT_STREAM_RATE
#define MCP_GRPC_DEFAULT_STREAM_BURST MCP_ADMIT_DEFAULT_STREAM_BURST
#define MCP_GRPC_DEFAULT_MAX_INITIAL_PUSHES MCP_ADMIT_DEFAULT_MAX_INITIAL
#define MCP_GRPC_DEFAULT_INITIAL_PUSH_TIMEOUT MCP_ADMIT_DEFAULT_INITIAL_TIMEOUT
#define MCP_GRPC_DEFAULT_MAX_CONCURRENT_STREAMS 1024
#define MCP_GRPC_DEFAULT_MAX_METADATA_SIZE (8 << 10)
#define MCP_GRPC_DEFAULT_MEMORY_LIMIT ((int64_t)256 << 20)
#define MCP_GRPC_DEFAULT_MAX_PING_STRIKES 2
/* Each stream's HTTP/2 receive window, fixed (gRPC's bandwidth-delay
 * probe, which answers data read with PINGs, is off), as the nghttp2
 * transport's default: 1 MiB in flight per stream is 20 MB/s at a 50 ms round trip.
 * Where |channel_args| sets GRPC_ARG_HTTP2_BDP_PROBE or
 * GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, its value is used instead. */
#define MCP_GRPC_STREAM_WINDOW (1 << 20)

/* Fills |opts| with the defaults: LISTEN, address NULL (must be set).
 * Writes only the fields of |version| (nothing for a version below 1; the
 * newest this library knows for a newer one). */
MCP_EXTERN void mcp_grpc_options_default_versioned(int version,
                                                   mcp_grpc_options *opts);
#define mcp_grpc_options_default(OPTS)                                       \
  mcp_grpc_options_default_versioned(MCP_GRPC_OPTIONS_VERSION, (OPTS))

/*
 * What a transport object has done and holds, for metrics and tests: the
 * engine's one shape (mcp/engine.h, mcp_transport_stats), shared with
 * every transport. This transport fills the streams (open and opened),
 * the messages, admission, authorization and revocation; gRPC core keeps
 * the connections, bytes, buffers, TLS handshakes and HTTP/2 limits to
 * itself, so those stay 0. After 0.5.0 (issue 21) the struct took that shape,
 * so its layout changed (gRPC's own V1/V2 are gone: versions are the
 * engine's MCP_TRANSPORT_STATS_V*).
 */
typedef mcp_transport_stats mcp_grpc_stats;

#define MCP_GRPC_STATS_VERSION MCP_TRANSPORT_STATS_VERSION

/* Callbacks run on the transport thread; |ts| is mcp_grpc_now(). */
typedef void (*mcp_grpc_store_fn)(mcp_store *store, mcp_tstamp ts,
                                  void *user_data);
typedef void (*mcp_grpc_run_fn)(mcp_tstamp ts, void *user_data);
typedef void (*mcp_grpc_state_fn)(mcp_sink_state *state, mcp_tstamp ts,
                                  void *user_data);
typedef void (*mcp_grpc_stream_fn)(const mcp_grpc_stream_info *info,
                                   void *user_data);

/* ------------------------------------------------------------------ */
/* Source                                                              */
/* ------------------------------------------------------------------ */

typedef struct mcp_grpc_source mcp_grpc_source;

/*
 * Creates a source, binds or starts dialing, and starts its thread. Each
 * stream gets a mcp_source_session made from a copy of |session_opts|,
 * whose |send_trigger| is set by the mode (1 for DIAL, 0 for LISTEN) and
 * whose |service| by the method: LISTEN serves ResourceSource and both
 * AggregatedMeshConfigService methods on the same port; DIAL dials
 * ResourceSink (the only service where the source dials).
 * |session_opts->store| (and the stores select_store returns) are kept by
 * pointer: they must outlive the object, and while it lives only the
 * transport thread may touch them (use mcp_grpc_source_update()). The
 * core's on_event passes through unchanged and runs on the transport
 * thread. On failure |*psrc| is untouched and nothing is left running.
 * Errors: INVALID_ARGUMENT (no address, neither store nor select_store,
 * an address gRPC cannot bind for a reason it does not tell, TLS files
 * that are not PEM, a certificate without key or the reverse, TLS files
 * and credentials both given, or (LISTEN) a key that does not match the
 * certificate), IO (a TLS file cannot be read: mcp_grpc_tls_check() says
 * which and why; or the address cannot be bound: errno says why, e.g.
 * EADDRINUSE, EACCES, EADDRNOTAVAIL), NOMEM; INVALID_ARGUMENT also for
 * a |version| of mcp_grpc_options this library does not know (below 1 or
 * newer than it). Of an older version, only that version's fields are
 * read; the newer ones take their defaults.
 */
MCP_EXTERN int mcp_grpc_source_new_versioned(
    mcp_grpc_source **psrc, int version, const mcp_grpc_options *opts,
    const mcp_source_options *session_opts);
#define mcp_grpc_source_new(PSRC, OPTS, SESSION_OPTS)                        \
  mcp_grpc_source_new_versioned((PSRC), MCP_GRPC_OPTIONS_VERSION, (OPTS),   \
                                (SESSION_OPTS))

/*
 * Shuts the source down and frees it; blocks until done. LISTEN: stops
 * accepting, ends each stream with UNAVAILABLE ("server shutting down")
 * after its send in flight, and cancels what is left after
 * |shutdown_grace|. DIAL: cancels the stream (CANCELLED). Updates queued
 * and not yet run are run first. The store is not freed. NULL is a no-op.
 */
MCP_EXTERN void mcp_grpc_source_del(mcp_grpc_source *src);

/* LISTEN on TCP: the bound port. Otherwise (DIAL, a unix socket) 0. */
MCP_EXTERN int mcp_grpc_source_port(const mcp_grpc_source *src);

/*
 * Queues |fn| to run on the transport thread with the default store
 * (session_opts->store, possibly NULL) and returns at once. After |fn|,
 * every stream pushes what it may. Updates run in the order queued.
 * |user_data| is read when |fn| runs, not now: what it points to must
 * stay valid and unchanged until then (mcp_grpc_source_call() returns
 * after the run). Errors: NOMEM, LIMIT (max_queued_updates are waiting),
 * CLOSED (the object is being deleted).
 */
MCP_EXTERN int mcp_grpc_source_update(mcp_grpc_source *src,
                                      mcp_grpc_store_fn fn, void *user_data);

/* As mcp_grpc_source_update(), but returns once |fn| has run. Errors:
 * CLOSED, INVALID_ARGUMENT (called on the transport thread). */
MCP_EXTERN int mcp_grpc_source_call(mcp_grpc_source *src,
                                    mcp_grpc_store_fn fn, void *user_data);

/* Calls |fn| (NULL: none, to count) on the transport thread for each
 * open stream, and returns their number when done. Errors: as
 * mcp_grpc_source_call(). */
MCP_EXTERN int mcp_grpc_source_streams(mcp_grpc_source *src,
                                       mcp_grpc_stream_fn fn,
                                       void *user_data);

/* Fills the fields of |version| of |st| (on the transport thread) and
 * returns 0 when done. Errors: as mcp_grpc_source_call(), and
 * INVALID_ARGUMENT for a version below 1 (a newer one than this library
 * knows gets the fields it knows). */
MCP_EXTERN int mcp_grpc_source_stats_versioned(mcp_grpc_source *src,
                                               int version,
                                               mcp_grpc_stats *st);
#define mcp_grpc_source_stats(SRC, ST)                                       \
  mcp_grpc_source_stats_versioned((SRC), MCP_GRPC_STATS_VERSION, (ST))

/*
 * Queues a new authorization of every stream (call it after the policy
 * changed, e.g. an access list was reloaded): each stream, open or
 * waiting for admission, whose peer |authorize| now refuses is ended with
 * the status it returns. Returns at once. Errors: as
 * mcp_grpc_source_update().
 */
MCP_EXTERN int mcp_grpc_source_reauthorize(mcp_grpc_source *src);

/* ------------------------------------------------------------------ */
/* Sink                                                                */
/* ------------------------------------------------------------------ */

typedef struct mcp_grpc_sink mcp_grpc_sink;

/*
 * Creates a sink on |state|, binds or starts dialing, and starts its
 * thread. DIAL calls the method of the state's service
 * (mcp_sink_state_service()); LISTEN serves ResourceSink, so the state's
 * service must be MCP_SERVICE_RESOURCE (else INVALID_ARGUMENT). Each stream gets a new mcp_sink_session on |state|, so a
 * reconnecting sink resumes with the versions it holds. The state's apply
 * and on_event callbacks run on the transport thread. |state| is kept by
 * pointer: it must outlive the object and, while the object lives, be
 * touched only through mcp_grpc_sink_call(). A state has one session at a
 * time: when LISTENing, a new stream replaces the open one, which is ended
 * with ABORTED. With options.no_mcp (LISTEN) it serves its services
 * alone and |state| may be NULL. On failure |*psink| is untouched.
 * Errors: INVALID_ARGUMENT (no address, no state without no_mcp, or the
 * cases of mcp_grpc_source_new(), an unknown |version|), IO (as
 * mcp_grpc_source_new(): errno says why the address cannot be bound),
 * NOMEM.
 */
MCP_EXTERN int mcp_grpc_sink_new_versioned(mcp_grpc_sink **psink,
                                           int version,
                                           const mcp_grpc_options *opts,
                                           mcp_sink_state *state);
#define mcp_grpc_sink_new(PSINK, OPTS, STATE)                                \
  mcp_grpc_sink_new_versioned((PSINK), MCP_GRPC_OPTIONS_VERSION, (OPTS),    \
                              (STATE))

/* Shuts down and frees, as mcp_grpc_source_del(). The state is not freed.
 * NULL is a no-op. */
MCP_EXTERN void mcp_grpc_sink_del(mcp_grpc_sink *sink);

/* LISTEN on TCP: the bound port. Otherwise (DIAL, a unix socket) 0. */
MCP_EXTERN int mcp_grpc_sink_port(const mcp_grpc_sink *sink);

/* Runs |fn| with the state on the transport thread and returns once it
 * has run (to read the state safely). After |fn|, the stream sends what it
 * may. Errors: CLOSED, INVALID_ARGUMENT (called on the transport thread). */
MCP_EXTERN int mcp_grpc_sink_call(mcp_grpc_sink *sink, mcp_grpc_state_fn fn,
                                  void *user_data);

/* As mcp_grpc_source_streams(): returns the number of open streams.
 * Errors: as mcp_grpc_sink_call(). */
MCP_EXTERN int mcp_grpc_sink_streams(mcp_grpc_sink *sink,
                                     mcp_grpc_stream_fn fn, void *user_data);

/*
 * Ends the stream that holds the sink session as a sink that is done
 * (e.g. exiting after the sync): what the session has ready is sent
 * first. DIAL: the stream is then half-closed, so the source reads every
 * answer and ends the stream itself (with OK, when it follows the
 * half-close rule above); no new stream is dialed afterwards, and the
 * connection goes once the stream has ended (0.9.0). A source
 * that never ends the stream is cancelled by del(). LISTEN (issue 21):
 * the stream is then ended with OK (a server's half-close is its status);
 * new calls are still served. Returns at once; the CLOSED event reports
 * the end. Errors: NOMEM, LIMIT, CLOSED.
 */
MCP_EXTERN int mcp_grpc_sink_finish(mcp_grpc_sink *sink);

/* As mcp_grpc_source_stats() and mcp_grpc_source_reauthorize(). */
MCP_EXTERN int mcp_grpc_sink_stats_versioned(mcp_grpc_sink *sink,
                                             int version,
                                             mcp_grpc_stats *st);
#define mcp_grpc_sink_stats(SINK, ST)                                        \
  mcp_grpc_sink_stats_versioned((SINK), MCP_GRPC_STATS_VERSION, (ST))
MCP_EXTERN int mcp_grpc_sink_reauthorize(mcp_grpc_sink *sink);

/* ------------------------------------------------------------------ */
/* Services (listening)                                                */
/* ------------------------------------------------------------------ */

/*
 * A call to a method of mcp_grpc_options.services goes the way of an MCP
 * stream on the same object: authorization (|authorize|, with the same
 * statuses: a refused call is a REFUSED event and never reaches open()),
 * admission (|max_streams|, per peer, the rate; a service stream never
 * takes an initial-push slot), the message size limits, TLS, the HTTP/2
 * limits, *_stats(), *_streams(), *_reauthorize() and the on_stream
 * events (whose info has |stream| set). Once admitted, the service's
 * open() gets an mcp_peer_info (gRPC's peer string, TLS, the verified
 * identities and the certificate's CN; valid during open() only) and
 * gives an mcp_stream, which the transport then owns: it deletes it when
 * the call ends, whatever the reason. A negative return from open() ends
 * the call with mcp_error_grpc_status() and mcp_strerror() of it (no
 * OPENED event); 0 without a stream, with INTERNAL "callback failed".
 *
 * The transport then runs the stream:
 *   - each message received goes to mcp_stream_recv(), the client's
 *     half-close to mcp_stream_half_close() (whether it ends the call is
 *     the protocol's flag MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE, not the
 *     MCP rule of "Half-close" above);
 *   - mcp_stream_pump() runs after every event of the call (a message in,
 *     a send done), after every *_update() / *_call() (all streams of
 *     the object, MCP and service), when the stream is woken
 *     (mcp_stream_wake(), from any callback on this object's transport
 *     thread, never from another thread: the stream is pumped after that
 *     callback returns, before the thread sleeps) and at
 *     mcp_stream_get_expiry();
 *   - SEND sends the message (one in flight at a time), END sends the
 *     status and its details (after the send in flight) and deletes the
 *     stream; a message larger than |max_send_message_size| ends the call
 *     with RESOURCE_EXHAUSTED (gRPC's check).
 * On *_del(), service calls end as MCP ones: UNAVAILABLE "server shutting
 * down" after the send in flight, cancelled after |shutdown_grace|.
 * Protocol modules keep their registries on the transport thread: a
 * program changes their view stores with *_update().
 */

/* ------------------------------------------------------------------ */
/* Client (dialing a protocol)                                         */
/* ------------------------------------------------------------------ */

/*
 * An mcp_grpc_client runs an mcp_client_def (mcp/engine.h) against a
 * server: |nslots| call slots, each with at most one call at a time, on
 * one connection to |opts->address|.
 *
 * Options (mcp_grpc_options, |mode| must be MCP_GRPC_DIAL): |address| (a
 * list separated by commas: each new connection goes to the next one),
 * |channel_credentials| or |tls| (the server's certificate is verified;
 * mutual TLS with cert_file/key_file), |authorize| (called with the
 * server's identities once each call's connection is up, before anything
 * is sent on it; a refusal ends that call with its status), keepalive,
 * message size limits, |channel_args|, |on_stream| (OPENED and CLOSED per
 * call, info.stream set while open). |backoff| paces the CONNECTION: when
 * a call ends with UNAVAILABLE (the connection could not be made, was
 * lost, or the server is shutting down), the connection is dropped and
 * the next one is made only after the backoff delay (it goes back to its
 * start after a connection that lasted and received a message). Calls
 * still running on a dropped connection go on until they end.
 * |services|, |no_mcp| and the listening options must be unset / are
 * ignored.
 *
 * The protocol, on the transport thread:
 *   - open(slot) is asked for every slot without a call after every
 *     event (a message, a send done, a call ended, an update, a timer)
 *     and at def->get_expiry(), while a connection may be used (not
 *     during the backoff). 1 and a stream: a call of method(slot) starts
 *     with that stream (taken over); 0: not now (a stream given anyway is
 *     deleted). A method(slot) that is NULL or not a path ends the call
 *     at once: MCP_CLIENT_BAD_METHOD_CODE / _DETAILS (mcp/engine.h).
 *   - The call sends what mcp_stream_pump() gives (SEND, one at a time;
 *     nothing before the connection is up and the server authorized),
 *     half-closes on HALF_CLOSE, and delivers every message received to
 *     mcp_stream_recv(). The server's half-close is its status.
 *   - When the call ends (the server's status, END from the stream: the
 *     call is cancelled with that status, the connection lost:
 *     UNAVAILABLE, *_del(): CANCELLED), the stream is deleted first, then
 *     ended(slot, status, details, ts) is called; |details| is valid
 *     during the call. Retrying is the protocol's choice: it answers 1 to
 *     a later open().
 * Callbacks must not call the client's functions except
 * mcp_grpc_client_update() (they may touch the protocol's own state; the
 * transport asks open() again after them).
 *
 * Ownership: |def| is copied; def->user_data and the strings method()
 * returns (copied at each call start) stay the caller's.
 */
typedef struct mcp_grpc_client mcp_grpc_client;

#define MCP_GRPC_CLIENT_MAX_SLOTS 65536

/*
 * Creates the client and starts its thread; the first connection is made
 * for the first call open() gives. On failure |*pc| is untouched.
 * Errors: INVALID_ARGUMENT (|mode| not DIAL, no address, services or
 * no_mcp set, |def| NULL, no slot or more than MCP_GRPC_CLIENT_MAX_SLOTS,
 * method/open/ended NULL, TLS files and credentials both given, an
 * unknown |version|), IO (a TLS file cannot be read), NOMEM.
 */
MCP_EXTERN int mcp_grpc_client_new_versioned(mcp_grpc_client **pc,
                                             int version,
                                             const mcp_grpc_options *opts,
                                             const mcp_client_def *def);
#define mcp_grpc_client_new(PC, OPTS, DEF)                                   \
  mcp_grpc_client_new_versioned((PC), MCP_GRPC_OPTIONS_VERSION, (OPTS), (DEF))

/* Cancels every call (ended() gets CANCELLED "client shutting down", on
 * the transport thread, before this returns), stops the thread and frees
 * the client. Updates queued and not yet run are run first. NULL is a
 * no-op. Not from the transport thread. */
MCP_EXTERN void mcp_grpc_client_del(mcp_grpc_client *c);

/* Queues |fn| to run on the transport thread (to touch the protocol's
 * state) and returns at once; after it, every call is pumped and open()
 * asked. |user_data| as for mcp_grpc_source_update(). Errors: as
 * mcp_grpc_source_update(). */
MCP_EXTERN int mcp_grpc_client_update(mcp_grpc_client *c, mcp_grpc_run_fn fn,
                                      void *user_data);

/* As mcp_grpc_client_update(), but returns once |fn| has run. Errors:
 * CLOSED, INVALID_ARGUMENT (called on the transport thread). */
MCP_EXTERN int mcp_grpc_client_call(mcp_grpc_client *c, mcp_grpc_run_fn fn,
                                    void *user_data);

/* As mcp_grpc_source_streams(), mcp_grpc_source_stats() (|streams| counts
 * the calls open; |opened| those started) and
 * mcp_grpc_source_reauthorize() (the server of each open call is
 * authorized again). */
MCP_EXTERN int mcp_grpc_client_streams(mcp_grpc_client *c,
                                       mcp_grpc_stream_fn fn,
                                       void *user_data);
MCP_EXTERN int mcp_grpc_client_stats_versioned(mcp_grpc_client *c,
                                               int version,
                                               mcp_grpc_stats *st);
#define mcp_grpc_client_stats(C, ST)                                         \
  mcp_grpc_client_stats_versioned((C), MCP_GRPC_STATS_VERSION, (ST))
MCP_EXTERN int mcp_grpc_client_reauthorize(mcp_grpc_client *c);

/* ------------------------------------------------------------------ */
/* Access lists                                                        */
/* ------------------------------------------------------------------ */

/*
 * An allow or deny list of peer identities, usable by any number of
 * objects and threads at once, whose rules can be replaced while it is in
 * use (e.g. reloaded from a file).
 *
 * The rules, their matching and the decision are mcp_acl's (mcp/auth.h),
 * shared by every transport; this object adds a lock (so that any thread
 * may check while another replaces the rules) and a file it can reload.
 *
 * Rules come from two places, evaluated together: those added with
 * mcp_grpc_acl_add() (e.g. from command-line flags), kept for the list's
 * life, and those of the last mcp_grpc_acl_parse() / _load_file() /
 * _reload(), which replace the previous ones as a whole.
 *
 * File format: mcp_acl's text format; docs/security.md has an example.
 */
typedef struct mcp_grpc_acl mcp_grpc_acl;

typedef enum mcp_grpc_acl_action {
  MCP_GRPC_ACL_ALLOW = 0,
  MCP_GRPC_ACL_DENY = 1
} mcp_grpc_acl_action;

/* Creates an empty list (it allows nobody). Errors: NOMEM. */
MCP_EXTERN int mcp_grpc_acl_new(mcp_grpc_acl **pacl);

/* As mcp_grpc_acl_new(), allocating the list and its rules with |mem|
 * (NULL: the C library; copied). The hook is called by whichever thread
 * changes the rules (add, parse, load, reload) and by *_del(): it must be
 * thread-safe when they run on different threads. */
MCP_EXTERN int mcp_grpc_acl_new2(mcp_grpc_acl **pacl, const mcp_mem *mem);

/* Frees the list. No object may still use it. NULL is a no-op. */
MCP_EXTERN void mcp_grpc_acl_del(mcp_grpc_acl *acl);

/* Adds one lasting rule. Errors: INVALID_ARGUMENT (an empty pattern, one
 * with blanks or control characters, a '*' before the end, longer than
 * 4096 bytes), NOMEM. */
MCP_EXTERN int mcp_grpc_acl_add(mcp_grpc_acl *acl, mcp_grpc_acl_action action,
                                const char *pattern);

/*
 * Replaces the rules of the previous parse or load with those of |text|
 * (|len| bytes, the file format above). On failure nothing changes and
 * |err| (may be NULL) says why, e.g. "line 3: unknown keyword 'alow'".
 * Errors: INVALID_ARGUMENT, LIMIT (over 1 MiB), NOMEM.
 */
MCP_EXTERN int mcp_grpc_acl_parse(mcp_grpc_acl *acl, const char *text,
                                  size_t len, char *err, size_t errlen);

/* As mcp_grpc_acl_parse() with the content of the file at |path|, which
 * the list remembers for mcp_grpc_acl_reload(). Errors: as parse, and IO
 * (the file cannot be read). */
MCP_EXTERN int mcp_grpc_acl_load_file(mcp_grpc_acl *acl, const char *path,
                                      char *err, size_t errlen);

/*
 * Loads the remembered file again if it changed (size, modification time
 * or inode) since it was last read: returns 1 when it was reloaded, 0 when
 * unchanged. Call it periodically (e.g. every second) or on SIGHUP, then
 * mcp_grpc_*_reauthorize() to apply the new rules to open streams. On
 * failure the rules in use are kept and |err| says why (it is tried again
 * at the next call). Errors: as mcp_grpc_acl_load_file(), and NOT_FOUND
 * when no file was loaded.
 */
MCP_EXTERN int mcp_grpc_acl_reload(mcp_grpc_acl *acl, char *err,
                                   size_t errlen);

/* Number of rules in use (lasting plus loaded). */
MCP_EXTERN size_t mcp_grpc_acl_count(const mcp_grpc_acl *acl);

/* The decision for |peer|: 0 (allowed), GRPC_STATUS_UNAUTHENTICATED or
 * GRPC_STATUS_PERMISSION_DENIED. Thread-safe. */
MCP_EXTERN int mcp_grpc_acl_check(const mcp_grpc_acl *acl,
                                  const mcp_grpc_peer *peer);

/* mcp_grpc_acl_check() as an mcp_grpc_authorize_fn: |acl| is the list. */
MCP_EXTERN int mcp_grpc_acl_authorize(const mcp_grpc_peer *peer, void *acl);

#ifdef __cplusplus
}
#endif

#endif /* MCP_GRPC_H */
