/*
 * libmcp engine: what every protocol module shares (MCP, Conduit's
 * Destination, swarmkit's Dispatcher, and any third-party one).
 *
 *   mcp_watch        one subscriber's position in one collection of a
 *                    store: the generation it has seen, its debounce
 *                    clock, and the changes since (O(changed)), or the
 *                    whole state when the change log no longer reaches.
 *   mcp_msg_builder  builds an mcp_msg from bytes of its own and the
 *                    stored (encode-once, shared) bodies of items.
 *   mcp_stream       the transport-neutral stream driver: a protocol
 *                    session behind a small vtable, plus the policy every
 *                    transport used to repeat (timers, one message at a
 *                    time, how a half-close ends a stream, when a stream
 *                    ends with which status).
 *   mcp_service_def  a server-side protocol a listening transport serves
 *                    at one gRPC method path: it opens one mcp_stream per
 *                    call.
 *   mcp_client_def   a client-side protocol a dialing transport runs: a
 *                    fixed number of call slots, each holding at most one
 *                    call; the protocol says when to open one and hears
 *                    how each ended. Reconnection policy is the
 *                    protocol's (use mcp_redial), never the transport's.
 *
 * The conventions of mcp.h hold: sans-I/O, time as an argument, errors as
 * negative mcp_error codes, one thread at a time per object, callbacks
 * never re-enter the object that called them.
 *
 * A protocol module is a file of its own over these (docs/architecture.md,
 * "Adding a protocol"): it decodes its requests, chooses the collections
 * it watches, frames a full state and a difference from mcp_watch_take(),
 * and fills an mcp_stream_ops. Nothing in the engine or the transports
 * changes for it.
 */
#ifndef MCP_ENGINE_H
#define MCP_ENGINE_H

#include <mcp/mcp.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Store: what protocol modules need beyond mcp.h                      */
/* ------------------------------------------------------------------ */

/*
 * Removes a collection: deletes every resource (as one change, one
 * generation) and marks it absent, so that mcp_store_has_collection()
 * answers 0 and watches see it gone. A later upsert, replace or
 * add_collection brings it back, with a higher generation. Returns 1 when
 * it existed, 0 when not. The collection keeps its index and name (names
 * and indexes stay valid as long as the store). Errors: NOMEM (nothing
 * changed).
 */
MCP_EXTERN int mcp_store_remove_collection(mcp_store *store,
                                           const char *collection,
                                           mcp_tstamp ts);

/* ------------------------------------------------------------------ */
/* Watch                                                               */
/* ------------------------------------------------------------------ */

typedef struct mcp_watch mcp_watch;

/* One resource as a watch reports it. All pointers are valid during the
 * callback only, except through mcp_msg_builder_body() which keeps the
 * body's bytes alive in the message. */
typedef struct mcp_item {
  const char *name;
  const char *version;  /* NULL when removed */
  const char *type_url; /* "" when removed */
  const uint8_t *body;  /* google.protobuf.Any.value as stored; NULL when
                           removed or empty */
  size_t body_len;
  int removed;          /* 1: deleted since the last take */
  const void *ref;      /* opaque, for mcp_msg_builder_body() */
} mcp_item;

typedef struct mcp_watch_options {
  /* As mcp_source_options (the rule: docs/protocol.md "Debounce"): a
   * change after a quiet period (no change and no take within |debounce|
   * before it) is ready at once; one that follows within the window is
   * ready once the collection has been quiet for |debounce|, or
   * |max_delay| after mcp_watch_note() first saw it (0/0: at once). The
   * first take is never delayed. */
  mcp_tstamp debounce;
  mcp_tstamp max_delay;
} mcp_watch_options;

/* The bound of a debounce that a module uses when its options give a
 * |debounce| and no max_delay (0): ten times the debounce, at least one
 * second, so that a collection that never stays quiet still goes out.
 * 0 for a |debounce| of 0 (at once). Pure. */
MCP_EXTERN mcp_tstamp mcp_watch_default_max_delay(mcp_tstamp debounce);

/*
 * Creates a watch on |collection| of |store| (which need not exist yet:
 * a watch sees it appear, change and be removed). Nothing is taken yet:
 * the first mcp_watch_take() reports the whole state. |opts| NULL: no
 * debounce. Keeps |store| by pointer (it must outlive the watch) and
 * copies |collection|. Errors: NOMEM, INVALID_ARGUMENT.
 */
MCP_EXTERN int mcp_watch_new(mcp_watch **pw, const mcp_store *store,
                             const char *collection,
                             const mcp_watch_options *opts,
                             const mcp_mem *mem);
MCP_EXTERN void mcp_watch_del(mcp_watch *w); /* NULL is a no-op */

/* The collection watched (as given). */
MCP_EXTERN const char *mcp_watch_collection(const mcp_watch *w);

/* 1 when the collection exists in the store now. */
MCP_EXTERN int mcp_watch_exists(const mcp_watch *w);

/* 1 when the collection differs from what was last taken (never taken,
 * changed, appeared or removed). Reads only; time-free. */
MCP_EXTERN int mcp_watch_changed(const mcp_watch *w);

/*
 * 1 when a take at |ts| is due: changed, and the debounce window allows
 * it (always for the first take). Reads only: a change that
 * mcp_watch_note() has not seen counts as first seen at |ts|.
 */
MCP_EXTERN int mcp_watch_ready(const mcp_watch *w, mcp_tstamp ts);

/*
 * Notes, the first time it is called for a change, that the watch saw it
 * at |ts|: the change's max_delay counts from then. Call it where the
 * caller acts on time (its next() and handle_expiry()), before
 * mcp_watch_ready(). The watch's only time-dependent state besides a take.
 */
MCP_EXTERN void mcp_watch_note(mcp_watch *w, mcp_tstamp ts);

/* When a pending change becomes ready, or MCP_TSTAMP_MAX (nothing pending
 * or ready already). Never in the past of the last |ts| seen. */
MCP_EXTERN mcp_tstamp mcp_watch_get_expiry(const mcp_watch *w);

/* Called for each item of a take; return 0 to go on, a negative mcp_error
 * to stop (mcp_watch_take() then returns it and the watch does not move).
 */
typedef int (*mcp_watch_fn)(const mcp_item *item, void *user_data);

/*
 * Reports what changed since the last take and moves the watch to the
 * collection's current state. |*full| = 1 when this is a whole state
 * (the first take, or the change log no longer reaches the generation
 * last taken): |fn| gets every live item and none removed, and the caller
 * drops what it held and is not listed. |*full| = 0: |fn| gets each item
 * changed or removed since, once, oldest change first (O(changed)); an
 * item created and removed again since is not reported (the caller never
 * had it), while one that existed before, was removed, came back and was
 * removed again may be (a redundant removal). A collection that does not
 * exist reports nothing, with |*full| = 1.
 * Returns the number of items reported. Errors: what |fn| returned.
 */
MCP_EXTERN int mcp_watch_take(mcp_watch *w, mcp_tstamp ts, mcp_watch_fn fn,
                              void *user_data, int *full);

/* Moves the watch to the collection's current state as a take would, but
 * reports nothing, in O(1): for a caller that learns the state another way
 * (mcp_watch_get() of the one item it cares about) and wants only what
 * changes from now on. */
MCP_EXTERN void mcp_watch_skip(mcp_watch *w, mcp_tstamp ts);

/* The store generation last taken (0 before the first take). */
MCP_EXTERN uint64_t mcp_watch_generation(const mcp_watch *w);

/* Looks one live item up by name now (not a take; the watch does not
 * move). Returns 1 and fills |*item|, or 0. Valid until the next change of
 * the store or the next call on this watch (type_url is the watch's). */
MCP_EXTERN int mcp_watch_get(const mcp_watch *w, const char *name,
                             mcp_item *item);

/* Calls |fn| for each live item now (not a take). Stops at the first
 * non-zero return and returns it. */
MCP_EXTERN int mcp_watch_foreach(const mcp_watch *w, mcp_watch_fn fn,
                                 void *user_data);

/* ------------------------------------------------------------------ */
/* Message builder                                                     */
/* ------------------------------------------------------------------ */

typedef struct mcp_msg_builder mcp_msg_builder;

/* Errors: NOMEM. */
MCP_EXTERN int mcp_msg_builder_new(mcp_msg_builder **pb, const mcp_mem *mem);
MCP_EXTERN void mcp_msg_builder_del(mcp_msg_builder *b); /* NULL: no-op */

/* Appends |len| bytes of the message's own (copied). */
MCP_EXTERN void mcp_msg_builder_bytes(mcp_msg_builder *b, const void *p,
                                      size_t len);
/* Appends a protobuf varint / a field key (number << 3 | wire type) / a
 * length-delimited field whose payload is |p[0..len)|. */
MCP_EXTERN void mcp_msg_builder_varint(mcp_msg_builder *b, uint64_t v);
MCP_EXTERN void mcp_msg_builder_key(mcp_msg_builder *b, uint32_t field,
                                    int wire_type);
MCP_EXTERN void mcp_msg_builder_len_field(mcp_msg_builder *b, uint32_t field,
                                          const void *p, size_t len);
/* Appends the stored body bytes of |item| without copying them: the
 * message holds a reference to the store's shared bytes. */
MCP_EXTERN void mcp_msg_builder_body(mcp_msg_builder *b, const mcp_item *item);
/* The whole stored istio.mcp.v1alpha1.Resource of a live |item|
 * (metadata and body, the bytes the store encoded once): sets |*p| and
 * |*len|, valid as |item| is. Returns 0, or INVALID_ARGUMENT for a removed
 * item or one not from a store. */
MCP_EXTERN int mcp_item_resource(const mcp_item *item, const uint8_t **p,
                                 size_t *len);
/* Appends |p[0..len)|, a range of the stored bytes of |item| (within what
 * mcp_item_resource() gives), without copying them: the message holds a
 * reference to the store's shared bytes. A protocol that wraps whole
 * stored Resources (xDS's Any) frames them with this. */
MCP_EXTERN void mcp_msg_builder_item_bytes(mcp_msg_builder *b,
                                           const mcp_item *item,
                                           const uint8_t *p, size_t len);
/* Bytes appended so far. */
MCP_EXTERN size_t mcp_msg_builder_len(const mcp_msg_builder *b);
/* Produces the message (owned by the caller) and resets the builder for
 * the next one. |label| is what mcp_msg_collection() answers (NULL: "").
 * Errors: NOMEM (any append since the last finish failed; nothing is
 * produced and the builder is reset). */
MCP_EXTERN int mcp_msg_builder_finish(mcp_msg_builder *b, const char *label,
                                      mcp_msg **pmsg);

/* ------------------------------------------------------------------ */
/* Stream driver                                                       */
/* ------------------------------------------------------------------ */

/* The operations of one protocol session. |sess| is the protocol's
 * object; the driver owns it from mcp_stream_new() on. */
typedef struct mcp_stream_ops {
  const char *name; /* for logs and metrics: "destination", "assignments" */
  /* MCP_STREAM_* flags below. */
  unsigned flags;
  /* One received message (the protobuf bytes, without gRPC framing).
   * Negative: end the stream with that error. */
  int (*recv)(void *sess, const uint8_t *in, size_t len, mcp_tstamp ts);
  /* The next message to send at |ts|: 1 and *pmsg, 0 for none now, or a
   * negative error. Called only when the transport can take a message. */
  int (*next)(void *sess, mcp_tstamp ts, mcp_msg **pmsg);
  /* When handle_expiry() is due next, or MCP_TSTAMP_MAX. May be NULL. */
  mcp_tstamp (*get_expiry)(const void *sess);
  /* Timers; may be NULL. Negative: end the stream with that error. */
  int (*handle_expiry)(void *sess, mcp_tstamp ts);
  /* 1 when the session ends the stream now, once next() has nothing more:
   * |*status| is the gRPC status, |*details| a string valid until del().
   * 0 while it goes on. May be NULL (never). */
  int (*end)(const void *sess, int *status, const char **details);
  /* The peer half-closed (it sends nothing more). May be NULL. */
  void (*half_close)(void *sess, mcp_tstamp ts);
  void (*del)(void *sess);
} mcp_stream_ops;

enum {
  /* The peer's half-close does not end the stream (server streaming:
   * Destination/Get, Session, Assignments). Without it, a half-closed
   * stream ends with OK once next() has nothing to send now (unary calls,
   * and the MCP rule of mcp/grpc.h "Half-close"). */
  MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE = 1u << 0,
  /* Client side: half-close our sending side once next() has given its
   * first message and has nothing more (unary and server-streaming calls). */
  MCP_STREAM_CLIENT_HALF_CLOSE_AFTER_FIRST = 1u << 1
};

typedef struct mcp_stream mcp_stream;

/* Wraps |sess| (taken over: freed with ops->del() by mcp_stream_del(),
 * also when this fails). |ops| must outlive the stream. Errors: NOMEM. */
MCP_EXTERN int mcp_stream_new(mcp_stream **pst, const mcp_stream_ops *ops,
                              void *sess, const mcp_mem *mem, mcp_tstamp ts);
MCP_EXTERN void mcp_stream_del(mcp_stream *st); /* NULL is a no-op */

MCP_EXTERN const mcp_stream_ops *mcp_stream_get_ops(const mcp_stream *st);
MCP_EXTERN void *mcp_stream_session(const mcp_stream *st);

/* A message arrived. Errors are kept: the next pump ends the stream. */
MCP_EXTERN void mcp_stream_recv(mcp_stream *st, const uint8_t *in, size_t len,
                                mcp_tstamp ts);
/* The peer half-closed. */
MCP_EXTERN void mcp_stream_half_close(mcp_stream *st, mcp_tstamp ts);

typedef enum mcp_stream_action {
  MCP_STREAM_IDLE = 0, /* nothing now: wait for I/O or mcp_stream_get_expiry() */
  MCP_STREAM_SEND = 1, /* send *pmsg (owned by the caller), pump again after */
  MCP_STREAM_END = 2,  /* end the stream with *status / *details (valid
                          until mcp_stream_del()); then delete it */
  MCP_STREAM_HALF_CLOSE = 3 /* client: half-close our side, pump again */
} mcp_stream_action;

/*
 * What the transport does next at |ts|. |can_send| 0 while a send is in
 * flight (one message at a time): then only timers and errors are looked
 * at. Runs due timers first. A session error (from recv, next or
 * handle_expiry) becomes END at once, also with a send in flight (the
 * transport then ends the call with the status, as a cancel would), with
 * mcp_error_grpc_status(err) and mcp_strerror(err). A session that wants
 * its own status and text (INVALID_ARGUMENT "scheme must be k8s") says so
 * through end(), which, like the half-close rule and the client's
 * half-close, is asked only with the sending side free and nothing more
 * to send. A stream whose timers keep firing without producing anything
 * is not spun: get_expiry() is never earlier than |ts| + 1 ms after an
 * expiry that did nothing.
 */
MCP_EXTERN mcp_stream_action mcp_stream_pump(mcp_stream *st, mcp_tstamp ts,
                                             int can_send, mcp_msg **pmsg,
                                             int *status,
                                             const char **details);

/* When the transport must pump next at the latest (MCP_TSTAMP_MAX: on
 * I/O only). */
MCP_EXTERN mcp_tstamp mcp_stream_get_expiry(const mcp_stream *st);

/*
 * Waking. A protocol module whose stream must be pumped because of
 * something outside the stream (another call replaced or expired its
 * session, a registry it reads changed) calls mcp_stream_wake(). The
 * transport running the stream sets a waker when it takes the stream;
 * the waker only notes the stream and the transport pumps it soon after,
 * never from inside mcp_stream_wake() (callbacks do not re-enter). No
 * waker set: a no-op. Same thread as every other stream call.
 */
typedef void (*mcp_stream_waker)(mcp_stream *st, void *user_data);
MCP_EXTERN void mcp_stream_set_waker(mcp_stream *st, mcp_stream_waker fn,
                                     void *user_data);
MCP_EXTERN void mcp_stream_wake(mcp_stream *st);

/* Client side: the application is done sending. Once next() has nothing
 * more to send now, the pump says HALF_CLOSE (once); the peer's status then
 * ends the call. Ignored by a server-side transport. */
MCP_EXTERN void mcp_stream_finish(mcp_stream *st);

/* Messages received and sent (pumped as SEND) so far. */
MCP_EXTERN uint64_t mcp_stream_received(const mcp_stream *st);
MCP_EXTERN uint64_t mcp_stream_sent(const mcp_stream *st);

/* ------------------------------------------------------------------ */
/* MCP's own sessions on the driver                                    */
/* ------------------------------------------------------------------ */

/*
 * How both transports run MCP: the same driver as any other protocol, and
 * the MCP rules a transport would otherwise repeat.
 *
 * mcp_source_stream_new(): a stream over a new mcp_source_session made
 * from a copy of |opts| (versioned as mcp_source_session_new()), speaking
 * |service|. |dialed|: this side opened the call (a source dialing
 * ResourceSink); the session then sends Istio's trigger first, since
 * Istio's sinks wait for a first push (|opts->send_trigger| and
 * |opts->service| are overridden). The peer's half-close ends the stream
 * with OK once what is ready now has gone out. Errors: as
 * mcp_source_session_new().
 */
MCP_EXTERN int mcp_source_stream_new_versioned(mcp_stream **pst, int version,
                                               const mcp_source_options *opts,
                                               mcp_service service,
                                               int dialed, mcp_tstamp ts);
#define mcp_source_stream_new(PST, OPTS, SERVICE, DIALED, TS)                \
  mcp_source_stream_new_versioned((PST), MCP_SOURCE_OPTIONS_VERSION, (OPTS), \
                                  (SERVICE), (DIALED), (TS))

/*
 * A stream over a new mcp_sink_session of |state| (kept by pointer: it
 * must outlive the stream). A state takes one session at a time and the
 * newest stream wins: when another stream made here runs the state's
 * session, that session is deleted now (what the state holds stays) and
 * that stream is woken; its next pump ends it with ABORTED "replaced by a
 * newer stream". Errors: NOMEM (an older stream is replaced all the same),
 * INVALID_ARGUMENT (the state's session was made with
 * mcp_sink_session_new(), not here).
 */
MCP_EXTERN int mcp_sink_stream_new(mcp_stream **pst, mcp_sink_state *state,
                                   mcp_tstamp ts);

/* The MCP session behind |st|: NULL when |st| runs another protocol, or
 * (sink) once a newer stream replaced it. Borrowed, valid until the next
 * call on |st|: for reading (stream info, admission, metrics). */
MCP_EXTERN mcp_source_session *mcp_stream_source_session(const mcp_stream *st);
MCP_EXTERN mcp_sink_session *mcp_stream_sink_session(const mcp_stream *st);

/* ------------------------------------------------------------------ */
/* Services (listening side) and clients (dialing side)                */
/* ------------------------------------------------------------------ */

/* Who is on the other end of a new call. Valid during the call only. */
typedef struct mcp_peer_info {
  const char *address;     /* the transport's peer string */
  int tls;                 /* the connection is TLS */
  const char *common_name; /* verified client certificate's CN, or NULL */
  const char *const *identities; /* verified identities (mcp/grpc.h) */
  size_t nidentities;
} mcp_peer_info;

/*
 * A protocol served at one method. For each new call (authorized and
 * admitted as every other), the transport calls open(); 0 and *pst: the
 * call runs with that stream; a negative error: the call ends with
 * mcp_error_grpc_status(). open() runs on the transport's thread, as do
 * every stream operation and the protocol's own callbacks.
 */
typedef struct mcp_service_def {
  const char *method; /* "/conduit.proxy.destination.Destination/Get" */
  int (*open)(void *user_data, const mcp_peer_info *peer, mcp_tstamp ts,
              mcp_stream **pst);
  void *user_data;
} mcp_service_def;

/* The longest method path a service may have, in bytes. */
#define MCP_SERVICE_METHOD_MAX 1024

/*
 * Checks the services given to a listening transport, the same way for
 * every transport: each def has open() and a method that starts with '/',
 * is at most MCP_SERVICE_METHOD_MAX bytes, appears once, and is none of
 * |reserved[0..nreserved)| (the methods the transport serves itself, e.g.
 * MCP's). Reads only. Returns 0, or INVALID_ARGUMENT (also |defs| NULL
 * with |n| > 0).
 */
MCP_EXTERN int mcp_service_defs_check(const mcp_service_def *defs, size_t n,
                                      const char *const *reserved,
                                      size_t nreserved);

/*
 * A protocol run by a dialing transport: |nslots| call slots, each with
 * at most one call open. After every event (a message, a send done, a
 * call ended, a timer) and at get_expiry(), the transport calls open() for
 * each slot without a call: 1 and *pst: start a call of method(slot) with
 * that stream; 0: not now. When a call ends (its stream said END, or the
 * peer or the connection ended it) the transport deletes the stream and
 * calls ended() with the status seen. The transport dials its address
 * (list) and reconnects the connection as it likes; whether and when a
 * call is retried is the protocol's choice, through open().
 */
typedef struct mcp_client_def {
  size_t nslots;
  const char *(*method)(void *user_data, size_t slot);
  int (*open)(void *user_data, size_t slot, mcp_tstamp ts, mcp_stream **pst);
  void (*ended)(void *user_data, size_t slot, int status, const char *details,
                mcp_tstamp ts);
  /* When open() should be asked again at the latest (MCP_TSTAMP_MAX: only
   * after events). May be NULL. */
  mcp_tstamp (*get_expiry)(void *user_data);
  void *user_data;
} mcp_client_def;

/* ------------------------------------------------------------------ */
/* MCP as service and client definitions                               */
/* ------------------------------------------------------------------ */

/* MCP's gRPC methods (Istio's mcp.proto). */
#define MCP_RESOURCE_SOURCE_METHOD                                           \
  "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream"
#define MCP_RESOURCE_SINK_METHOD                                             \
  "/istio.mcp.v1alpha1.ResourceSink/EstablishResourceStream"
#define MCP_AGGREGATED_METHOD                                                \
  "/istio.mcp.v1alpha1.AggregatedMeshConfigService/StreamAggregatedResources"
#define MCP_AGGREGATED_INCREMENTAL_METHOD                                    \
  "/istio.mcp.v1alpha1.AggregatedMeshConfigService/"                         \
  "IncrementalAggregatedResources"

/* The method that carries |service| in the direction where |sink_dials|
 * (a sink calls a source: ResourceSource and the aggregated services) or
 * not (a source calls a sink: ResourceSink, RESOURCE only); NULL when
 * there is none. Pure. */
MCP_EXTERN const char *mcp_service_method(mcp_service service, int sink_dials);

/* Which MCP methods mcp_service_methods() lists. */
enum {
  MCP_METHODS_OF_SOURCE = 1u << 0, /* served by a source (a sink dials) */
  MCP_METHODS_OF_SINK = 1u << 1    /* served by a sink (a source dials) */
};

/* Stores the MCP methods of |which| (MCP_METHODS_* flags) in |out| (room
 * for 4) and returns how many: what a listening transport reserves for
 * MCP beside other services (mcp_service_defs_check()). Pure. */
MCP_EXTERN size_t mcp_service_methods(unsigned which, const char *out[4]);

/*
 * One side of MCP as core definitions: a source (streams from |opts|) or
 * a sink (streams of |state|). A transport serves it as every other
 * protocol: listening, the mcp_service_def values of
 * mcp_side_services(); dialing, the one-slot mcp_client_def of
 * mcp_side_client(). Their open() make the streams of
 * mcp_source_stream_new() / mcp_sink_stream_new(), so MCP's rules (the
 * dialing source's trigger, the newest sink stream wins, the half-close
 * ending) hold whichever transport runs them. Each def's user_data is
 * the side's; the defs are valid as long as the side.
 *
 * mcp_side_source_new(): keeps |opts| by pointer (it must outlive the
 * side; each stream copies it). mcp_side_sink_new(): keeps |state| by
 * pointer (it must outlive the side). |mem| NULL: malloc. Errors: NOMEM,
 * INVALID_ARGUMENT (NULL |opts| or |state|; |dialing| 0 with a sink state
 * whose service is not RESOURCE: a listening sink serves ResourceSink
 * only, and sources call it on behalf of RESOURCE).
 */
typedef struct mcp_side mcp_side;
MCP_EXTERN int mcp_side_source_new(mcp_side **pside,
                                   const mcp_source_options *opts,
                                   const mcp_mem *mem);
MCP_EXTERN int mcp_side_sink_new(mcp_side **pside, mcp_sink_state *state,
                                 int dialing, const mcp_mem *mem);
MCP_EXTERN void mcp_side_del(mcp_side *side); /* NULL is a no-op */

/* 1 for a source side, 0 for a sink. */
MCP_EXTERN int mcp_side_is_source(const mcp_side *side);

/* The services a listening side serves (*n of them: a source serves
 * ResourceSource and both aggregated services, each session speaking the
 * service of its method; a sink serves ResourceSink). open() ignores the
 * peer. Borrowed: valid as long as |side|. */
MCP_EXTERN const mcp_service_def *mcp_side_services(const mcp_side *side,
                                                    size_t *n);

/* The service a def of mcp_side_services() speaks. */
MCP_EXTERN mcp_service mcp_side_service_of(const mcp_service_def *def);

/* The client a dialing side runs: one slot calling the method the peer
 * serves (a source calls ResourceSink; a sink the method of its state's
 * service). open() makes a stream whenever asked (a dialed source sends
 * the trigger first); ended() keeps nothing. When to ask again is the
 * dialing transport's connection policy (mcp_redial, one attempt per
 * connection). Borrowed: valid as long as |side|. */
MCP_EXTERN const mcp_client_def *mcp_side_client(const mcp_side *side);

/* ------------------------------------------------------------------ */
/* Wire format and UTF-8: the one reader of the tree                  */
/* ------------------------------------------------------------------ */

/*
 * Reads the protobuf varint at |*p| (bytes up to |end|) into |*v| and moves
 * |*p| past it. Returns 0, or MCP_ERR_MALFORMED when it is truncated, longer
 * than 10 bytes or has bits beyond 64 (|*v| untouched, |*p| somewhere
 * inside). The schema library and the tools read varints with it.
 */
MCP_EXTERN int mcp_wire_varint(const uint8_t **p, const uint8_t *end,
                               uint64_t *v);

/*
 * 1 when the |n| bytes at |s| are valid UTF-8 (no overlong forms,
 * surrogates or values past U+10FFFF), else 0. |allow_nul| 0 refuses a NUL
 * byte too (text that becomes a C string); proto3 strings may hold one.
 * |s| may be NULL when |n| is 0.
 */
MCP_EXTERN int mcp_utf8_valid(const uint8_t *s, size_t n, int allow_nul);

/* The length (1 to 4) of the UTF-8 character at |s|, at most |n| bytes,
 * by mcp_utf8_valid()'s rules (a NUL is 1); 0 when it is not one or n is 0. */
MCP_EXTERN size_t mcp_utf8_len(const uint8_t *s, size_t n);

/* ------------------------------------------------------------------ */
/* What a transport tells of a stream                                  */
/* ------------------------------------------------------------------ */

/*
 * One stream of a transport (MCP, a service's or a client's call), as
 * every transport reports it: to its stream callback (opened, closed,
 * refused) and to its *_streams() walk. The transport fills it and lends
 * it for the duration of the callback; every pointer in it (strings,
 * sessions, the engine stream) is the transport's and valid during the
 * callback only, on the transport's thread; copy what must outlive it.
 * mcp_grpc_stream_info and mcp_h2c_stream_info are this struct, so one
 * reader (a program's metrics, its debug pages) serves every transport.
 * Never allocated by the caller: fields are only appended (no version).
 */
typedef struct mcp_stream_info {
  uint64_t id;      /* per transport object, from 1, in order of creation */
  /* The peer as the transport names it: "ipv4:127.0.0.1:40000",
   * "ipv6:[::1]:1", "unix:/p"; a dialed stream not yet connected may
   * show the address dialed. */
  const char *peer;
  int dialed;       /* 1 when this side started the stream */
  /* MCP streams: the stream's core session, NULL once the stream is
   * ending (and for a refused call); read-only introspection. */
  mcp_source_session *source;
  mcp_sink_session *sink;
  mcp_tstamp opened; /* the transport's clock when the stream was made */
  uint64_t received; /* messages received */
  uint64_t sent;     /* messages handed to the transport's HTTP/2 in full */
  /* Closed and refused only: the gRPC status the stream ended with, as
   * this side saw it (the one sent, the one received, or the one a reset,
   * a cancel or a lost connection means), and its message ("" for none). */
  int status;
  const char *details;
  /* The peer's verified identities (mcp/auth.h's order; none without a
   * verified certificate; a dialed stream knows them once connected). */
  const char *const *identities;
  size_t nidentities;
  int tls;     /* the connection is TLS (known once connected) */
  int initial; /* LISTEN source: holds an initial-sync admission slot */
  /* Service and client calls: the protocol's engine stream (read-only:
   * mcp_stream_get_ops(), counters), NULL for MCP streams and once the
   * stream is ending. */
  const mcp_stream *stream;
  /* Service and client calls: the protocol's name (mcp_stream_ops.name,
   * "" when unknown), also when closed, so that metrics count per API;
   * NULL for MCP streams. */
  const char *api;
  /* 1 while a message taken from the session is not yet handed to the
   * transport in full (with mcp_sink_session_want_write(): an answer is on
   * its way). */
  int sending;
  /* The gRPC method (":path") of the call; "" when the transport does not
   * tell. */
  const char *method;
} mcp_stream_info;

#ifdef __cplusplus
}
#endif

#endif /* MCP_ENGINE_H */
