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
 * The transport holds no protocol rules: each stream is one core session
 * (mcp_source_session or mcp_sink_session) and the transport only moves
 * messages between gRPC and that session, drives its timers, and ends the
 * stream with mcp_error_grpc_status(err) / mcp_strerror(err) when the core
 * reports an error.
 *
 * Threading: each object owns one thread and one gRPC completion queue (the
 * "transport thread"). Every core call on the object's store, sink state and
 * sessions happens on that thread, and so does every callback: the core's
 * apply and event callbacks and this library's stream callback. The
 * application reaches the store or the sink state only through
 * mcp_grpc_source_update() / *_call(), which run a function on the
 * transport thread. All functions below may be called from any thread,
 * except that *_del() must not race with other calls on the same object
 * and the *_call() / *_streams() functions must not be called from the
 * transport thread (from a callback); *_update() may be.
 *
 * Time: mcp_grpc_now(), CLOCK_MONOTONIC in nanoseconds, is the mcp_tstamp
 * given to every core call.
 *
 * Errors are the core's negative mcp_error codes.
 *
 * gRPC: every object calls grpc_init() when created and grpc_shutdown()
 * when deleted.
 */
#ifndef MCP_GRPC_H
#define MCP_GRPC_H

#include <grpc/grpc.h>

#include <mcp/mcp.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MCP_GRPC_RESOURCE_SOURCE_METHOD                                      \
  "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream"
#define MCP_GRPC_RESOURCE_SINK_METHOD                                        \
  "/istio.mcp.v1alpha1.ResourceSink/EstablishResourceStream"
#define MCP_GRPC_AGGREGATED_METHOD                                           \
  "/istio.mcp.v1alpha1.AggregatedMeshConfigService/StreamAggregatedResources"
#define MCP_GRPC_AGGREGATED_INCREMENTAL_METHOD                               \
  "/istio.mcp.v1alpha1.AggregatedMeshConfigService/IncrementalAggregatedResources"

/* The method that carries |service| in the direction where |sink_dials|
 * (ResourceSource and the aggregated services) or not (ResourceSink). */
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
 * least the nominal delay. The first attempt is immediate.
 */
typedef struct mcp_grpc_backoff_options {
  mcp_tstamp initial; /* default 1 s */
  double multiplier;  /* default 1.6 */
  double jitter;      /* default 0.2 */
  mcp_tstamp max;     /* default 120 s */
} mcp_grpc_backoff_options;

/* What the transport knows of one stream. Strings are valid during the
 * callback only. */
typedef struct mcp_grpc_stream_info {
  uint64_t id;        /* per object, from 1, in order of creation */
  const char *peer;   /* gRPC's peer string, e.g. "ipv4:127.0.0.1:40000" */
  int dialed;         /* 1 when this side started the call */
  /* The stream's core session, NULL once the stream is ending. Usable
   * (read-only introspection) during the callback, on the transport
   * thread. */
  mcp_source_session *source;
  mcp_sink_session *sink;
  mcp_tstamp opened;  /* mcp_grpc_now() when the stream was created */
  uint64_t received;  /* messages received */
  uint64_t sent;      /* messages sent */
  /* MCP_GRPC_STREAM_CLOSED only: the status the stream ended with, as
   * this side saw it (the one sent, the one received, or CANCELLED). */
  int status;
  const char *details;
} mcp_grpc_stream_info;

typedef enum mcp_grpc_stream_event {
  /* A stream started: accepted, or (dialing) its call was started; a
   * dialed call that cannot connect then closes with UNAVAILABLE. */
  MCP_GRPC_STREAM_OPENED,
  MCP_GRPC_STREAM_CLOSED /* it ended; its session is already freed */
} mcp_grpc_stream_event;

/* Runs on the transport thread. May call *_update(), nothing else of this
 * library. */
typedef void (*mcp_grpc_stream_cb)(mcp_grpc_stream_event ev,
                                   const mcp_grpc_stream_info *info,
                                   void *user_data);

typedef struct mcp_grpc_options {
  mcp_grpc_mode mode;
  /* LISTEN: gRPC listen address ("127.0.0.1:0" binds a free port, see
   * *_port()). DIAL: gRPC target ("127.0.0.1:15010", "dns:///host:port",
   * "unix:/path"). Copied. */
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
   * sets (NULL: none). LISTEN reads them during *_new() only; DIAL at
   * every attempt: they must outlive the object. */
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
} mcp_grpc_options;

/* Fills |opts| with the defaults: LISTEN, address NULL (must be set). */
MCP_EXTERN void mcp_grpc_options_default(mcp_grpc_options *opts);

/* Callbacks run on the transport thread; |ts| is mcp_grpc_now(). */
typedef void (*mcp_grpc_store_fn)(mcp_store *store, mcp_tstamp ts,
                                  void *user_data);
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
 * or the address cannot be bound), NOMEM.
 */
MCP_EXTERN int mcp_grpc_source_new(mcp_grpc_source **psrc,
                                   const mcp_grpc_options *opts,
                                   const mcp_source_options *session_opts);

/*
 * Shuts the source down and frees it; blocks until done. LISTEN: stops
 * accepting, ends each stream with UNAVAILABLE ("server shutting down")
 * after its send in flight, and cancels what is left after
 * |shutdown_grace|. DIAL: cancels the stream (CANCELLED). Updates queued
 * and not yet run are run first. The store is not freed. NULL is a no-op.
 */
MCP_EXTERN void mcp_grpc_source_del(mcp_grpc_source *src);

/* LISTEN: the bound port. DIAL: 0. */
MCP_EXTERN int mcp_grpc_source_port(const mcp_grpc_source *src);

/*
 * Queues |fn| to run on the transport thread with the default store
 * (session_opts->store, possibly NULL) and returns at once. After |fn|,
 * every stream pushes what it may. Updates run in the order queued.
 * Errors: NOMEM, LIMIT (max_queued_updates are waiting), CLOSED (the
 * object is being deleted).
 */
MCP_EXTERN int mcp_grpc_source_update(mcp_grpc_source *src,
                                      mcp_grpc_store_fn fn, void *user_data);

/* As mcp_grpc_source_update(), but returns once |fn| has run. Errors:
 * CLOSED, INVALID_ARGUMENT (called on the transport thread). */
MCP_EXTERN int mcp_grpc_source_call(mcp_grpc_source *src,
                                    mcp_grpc_store_fn fn, void *user_data);

/* Calls |fn| on the transport thread for each open stream, and returns
 * when done. Errors: as mcp_grpc_source_call(). */
MCP_EXTERN int mcp_grpc_source_streams(mcp_grpc_source *src,
                                       mcp_grpc_stream_fn fn,
                                       void *user_data);

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
 * with ABORTED. On failure |*psink| is untouched.
 * Errors: INVALID_ARGUMENT (no address or state, or the address cannot be
 * bound), NOMEM.
 */
MCP_EXTERN int mcp_grpc_sink_new(mcp_grpc_sink **psink,
                                 const mcp_grpc_options *opts,
                                 mcp_sink_state *state);

/* Shuts down and frees, as mcp_grpc_source_del(). The state is not freed.
 * NULL is a no-op. */
MCP_EXTERN void mcp_grpc_sink_del(mcp_grpc_sink *sink);

/* LISTEN: the bound port. DIAL: 0. */
MCP_EXTERN int mcp_grpc_sink_port(const mcp_grpc_sink *sink);

/* Runs |fn| with the state on the transport thread and returns once it
 * has run (to read the state safely). After |fn|, the stream sends what it
 * may. Errors: CLOSED, INVALID_ARGUMENT (called on the transport thread). */
MCP_EXTERN int mcp_grpc_sink_call(mcp_grpc_sink *sink, mcp_grpc_state_fn fn,
                                  void *user_data);

/* Calls |fn| on the transport thread for each open stream, and returns
 * when done. Errors: as mcp_grpc_sink_call(). */
MCP_EXTERN int mcp_grpc_sink_streams(mcp_grpc_sink *sink,
                                     mcp_grpc_stream_fn fn, void *user_data);

#ifdef __cplusplus
}
#endif

#endif /* MCP_GRPC_H */
