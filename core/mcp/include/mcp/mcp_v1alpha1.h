/*
 * Istio's Mesh Configuration Protocol (istio.mcp.v1alpha1) on the engine
 * (mcp/engine.h). Library: libmcp-mcp (or libmcp, which holds every
 * module).
 *
 * Objects:
 *   mcp_source_session  one stream on the source side (ResourceSource
 *                       server or ResourceSink client: same logic).
 *   mcp_sink_state      what a sink holds; survives reconnects.
 *   mcp_sink_session    one stream on the sink side (ResourceSource client
 *                       or ResourceSink server).
 *
 * The conventions of mcp/engine.h hold.
 */
#ifndef MCP_MCP_V1ALPHA1_H
#define MCP_MCP_V1ALPHA1_H

#include <mcp/engine.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Events (for logs and metrics)                                       */
/* ------------------------------------------------------------------ */

typedef enum mcp_event_type {
  MCP_EVENT_REQUEST,            /* source: new or re-request (empty nonce) */
  MCP_EVENT_PUSH,               /* source: a push was produced */
  MCP_EVENT_ACK,                /* source: a push was ACKed; sink: we ACKed */
  MCP_EVENT_NACK,               /* source: a push was NACKed; sink: we NACKed */
  MCP_EVENT_STALE,              /* source: a request with a stale nonce */
  MCP_EVENT_UNKNOWN_COLLECTION, /* source: a request for no known collection */
  MCP_EVENT_TRIGGER_IGNORED     /* source: the $triggerCollection NACK;
                                   sink: Istio's $triggerCollection push,
                                   answered with the NACK Istio expects */
} mcp_event_type;

typedef struct mcp_event {
  mcp_event_type type;
  const char *collection;
  const char *nonce;   /* "" when none */
  const char *version; /* system_version_info of the push, "" when none */
  int code;            /* NACK: the google.rpc code; else 0 */
  const char *message; /* NACK: the message; else "" */
  size_t nresources;   /* PUSH: resources and removals carried */
  size_t nremoved;
  int incremental;     /* PUSH: 1 for an incremental push */
  mcp_tstamp latency;  /* source ACK/NACK: time since the push was produced */
  size_t held;         /* sink ACK/NACK: resources held in the collection
                          after this message */
  const struct mcp_sink_node *node; /* source: the stream's sink node (id ""
                                       before the first request) */
  size_t bytes;        /* source PUSH: the message's encoded size; sink
                          ACK/NACK: the size of the message answered */
  /* Sink ACK, NACK and TRIGGER_IGNORED: the message answered, as it
   * carried them. |resources|: |nlisted| of its |nresources|, in order:
   * every one, duplicates and resources that fail a check included, except
   * (in a NACK) a resource that does not decode or holds a string that is
   * not UTF-8; |removed|: its removed_resources that are UTF-8,
   * |nremoved_listed| of |nremoved|, in order. */
  const mcp_resource *resources;
  size_t nlisted;
  const char *const *removed;
  size_t nremoved_listed;
  /* Sink ACK of a full-state push: the names held before that it does not
   * list (computed by the sink, in no given order); else none. */
  const char *const *dropped;
  size_t ndropped;
  /* Sink events: 1 when the state is synced after this event
   * (mcp_sink_state_synced()), which a callback may not ask the state. */
  int synced;
} mcp_event;

/* Called synchronously from inside the session call that caused the
 * event. Every pointer is valid only during the call. Must not call into
 * the session. */
typedef void (*mcp_event_cb)(const mcp_event *ev, void *user_data);

/* ------------------------------------------------------------------ */
/* Sink node                                                           */
/* ------------------------------------------------------------------ */

/* A SinkNode as received by the source. Valid during the call only. */
typedef struct mcp_sink_node {
  const char *id;
  const mcp_kv *annotations;
  size_t nannotations;
} mcp_sink_node;

/* The collection name Istio's dialing source sends first to wake a sink.
 */
#define MCP_TRIGGER_COLLECTION "$triggerCollection"

/* ------------------------------------------------------------------ */
/* Services                                                            */
/* ------------------------------------------------------------------ */

/*
 * Which MCP service a stream speaks. The engine is the same; only the
 * messages differ (docs/protocol.md compares them).
 *   RESOURCE: ResourceSource and ResourceSink (RequestResources/Resources),
 *     keyed by collection.
 *   AGGREGATED: AggregatedMeshConfigService/StreamAggregatedResources
 *     (MeshConfigRequest/MeshConfigResponse), keyed by type_url, full state.
 *   AGGREGATED_INCREMENTAL: .../IncrementalAggregatedResources
 *     (IncrementalMeshConfigRequest/Response), keyed by type_url,
 *     differences only; our nonces are "<number>:<type_url>".
 */
typedef enum mcp_service {
  MCP_SERVICE_RESOURCE = 0,
  MCP_SERVICE_AGGREGATED = 1,
  MCP_SERVICE_AGGREGATED_INCREMENTAL = 2
} mcp_service;

/* Maps a type URL to a collection of the store, writing and returning as
 * mcp_collection_for_type_url() (which is the default). Called with
 * |buf| NULL and |len| 0 to learn the length first. */
typedef size_t (*mcp_type_url_cb)(const char *type_url, char *buf, size_t len,
                                  void *user_data);

/* ------------------------------------------------------------------ */
/* Source session                                                      */
/* ------------------------------------------------------------------ */

typedef struct mcp_source_session mcp_source_session;

/*
 * Maps the sink node of a stream to the store that serves it (per-sink
 * views). Called once, on the first request that carries a sink node
 * (or the first request at all). Return NULL to use the session's default
 * store; the returned store must outlive the session.
 */
typedef mcp_store *(*mcp_select_store_cb)(const mcp_sink_node *node,
                                          void *user_data);

typedef struct mcp_source_options {
  const mcp_mem *mem; /* NULL: libc */
  /* Default store; may be NULL only when select_store is given. */
  mcp_store *store;
  mcp_select_store_cb select_store;
  void *select_store_user_data;
  /*
   * Debounce (docs/protocol.md "Debounce"): a change after a quiet
   * period (no change and no push of its collection within |debounce|
   * before it) is pushed at once; changes within the window are pushed
   * once the collection has been quiet for |debounce|, or at the latest
   * |max_delay| after the stream first saw them. 0/0 pushes at once. The
   * answer to a new request is never delayed. Default 0 and 0; a
   * debounce with max_delay 0 is bounded by
   * mcp_watch_default_max_delay(debounce) (10 x, at least 1 s), as in
   * every module that debounces (issue 21; before, it was unbounded).
   */
  mcp_tstamp debounce;
  mcp_tstamp max_delay;
  /*
   * NACK retry: 0 (default) never pushes NACKed content again; the next
   * change is pushed. When non-zero, content NACKed with one of the codes
   * in |nack_retry_codes| (UNAVAILABLE by default) is pushed again after
   * |nack_retry_initial|, doubling up to |nack_retry_max|.
   */
  mcp_tstamp nack_retry_initial;
  mcp_tstamp nack_retry_max;
  const int *nack_retry_codes; /* NULL: { MCP_CODE_UNAVAILABLE } */
  size_t nnack_retry_codes;
  /* Dialing side (ResourceSink client): make the first message the
   * $triggerCollection Resources Istio's sinks expect. */
  int send_trigger;
  /* Events for logs and metrics (optional). */
  mcp_event_cb on_event;
  void *user_data;
  /* The service the stream speaks (default RESOURCE), and for the
   * aggregated ones the type URL to collection mapping (NULL: the default,
   * mcp_collection_for_type_url()). */
  mcp_service service;
  mcp_type_url_cb collection_for_type;
  void *collection_for_type_user_data;
  /*
   * Limits on what one stream's sink may ask (0: the default). Breaking
   * one fails mcp_source_session_recv() and the transport ends that
   * stream only: LIMIT (RESOURCE_EXHAUSTED) for counts and the rate,
   * PROTOCOL (INVALID_ARGUMENT) for lengths.
   *   max_collections: collections (or types) on the stream;
   *   max_initial_versions: entries of initial_resource_versions;
   *   max_node_annotations: SinkNode annotations;
   *   max_node_id_len / max_node_key_len / max_node_value_len /
   *     max_node_bytes: bytes of the SinkNode's id, of one annotation's
   *     key / value, of the whole SinkNode as encoded (lengths: PROTOCOL).
   *     Checked on every request, before anything of it is copied;
   *   max_name_len / max_version_len: bytes of a collection, type URL or
   *     resource name / of a version;
   *   request_rate / request_burst: a token bucket for the requests that
   *     answer no push (new requests and stale ones), per second. ACKs and
   *     NACKs of the pending push are free, so a well-behaved sink, which
   *     sends one new request per collection and then only answers, is
   *     never throttled.
   */
  size_t max_collections;
  size_t max_initial_versions;
  size_t max_node_annotations;
  size_t max_name_len;
  size_t max_version_len;
  uint32_t request_rate;
  uint32_t request_burst;
  size_t max_node_id_len;
  size_t max_node_key_len;
  size_t max_node_value_len;
  size_t max_node_bytes;
  /*
   * Replicas (optional): whether this source has reached |version|, which a
   * resuming sink reports holding in |collection| (an entry of
   * initial_resource_versions). A replica whose data lags the one the sink
   * came from would otherwise answer with an older state and take the sink
   * back in time. While some reported version is not reached, the answer to
   * that request waits: it is checked again at every change of the
   * collection, and |catchup_timeout| after the request (default 30 s) the
   * source answers with what it has. Return 1 when reached (or when the
   * version is not comparable), 0 when not yet. Called by want_write() and
   * next(); it must not call into the session. NULL: versions are opaque,
   * nothing waits.
   */
  int (*version_reached)(const char *collection, const char *version,
                         void *user_data);
  void *version_reached_user_data;
  mcp_tstamp catchup_timeout;
} mcp_source_options;

#define MCP_SOURCE_OPTIONS_V1 1
#define MCP_SOURCE_OPTIONS_VERSION MCP_SOURCE_OPTIONS_V1
MCP_EXTERN void mcp_source_options_default_versioned(int version,
                                                     mcp_source_options *opts);
#define mcp_source_options_default(OPTS)                                     \
  mcp_source_options_default_versioned(MCP_SOURCE_OPTIONS_VERSION, (OPTS))

/* Creates a session for one new stream. Keeps |opts->store| (and stores
 * select_store returns) by pointer: they must outlive the session. The
 * options are copied once per distinct content into |opts->store| (with
 * the store's hook) and shared by the sessions made alike; without a
 * store, each session has its own copy. On failure |*ps| is untouched.
 * Errors: NOMEM, INVALID_ARGUMENT. */
MCP_EXTERN int mcp_source_session_new_versioned(mcp_source_session **ps,
                                                int version,
                                                const mcp_source_options *opts,
                                                mcp_tstamp ts);
#define mcp_source_session_new(PS, OPTS, TS)                                 \
  mcp_source_session_new_versioned((PS), MCP_SOURCE_OPTIONS_VERSION, (OPTS), \
                                   (TS))

/* Frees the session (pending pushes are forgotten; messages already taken
 * stay valid). NULL is a no-op. */
MCP_EXTERN void mcp_source_session_del(mcp_source_session *s);

/*
 * Feeds one received RequestResources message (or the service's request:
 * the protobuf bytes, without gRPC framing). A request for an unknown collection, a stale nonce or the
 * NACK of the trigger are not errors: they are counted and reported as
 * events, and the stream goes on.
 * Errors: MALFORMED (undecodable, or strings not UTF-8), PROTOCOL (no
 * collection; a name, version or SinkNode field over its limit), LIMIT
 * (a count or the request rate over its limit), NOMEM. After an error
 * the session is unchanged and the transport should end the stream with
 * mcp_error_grpc_status().
 */
MCP_EXTERN int mcp_source_session_recv(mcp_source_session *s,
                                       const uint8_t *in, size_t len,
                                       mcp_tstamp ts);

/* 1 when mcp_source_session_next() would produce a message at |ts|.
 * Changes nothing observable: the time-dependent work (the max_delay clock
 * of a change starts when next() or handle_expiry() first sees it) is
 * theirs. */
MCP_EXTERN int mcp_source_session_want_write(mcp_source_session *s,
                                             mcp_tstamp ts);

/*
 * Produces the next Resources message (or the service's response) to send
 * at |ts|: at most one push in flight per collection; the next push of a
 * collection carries its latest state. Returns 1 and sets |*pmsg| (owned
 * by the caller, free it with mcp_msg_free()) or returns 0 when nothing is
 * to be sent now.
 * Errors: NOMEM (nothing was consumed; try again later); RESYNC
 * (IncrementalAggregatedResources only: the sink's state is older than the
 * change log reaches and that service cannot send full state; end the
 * stream, the sink resumes on the next one).
 */
MCP_EXTERN int mcp_source_session_next(mcp_source_session *s, mcp_tstamp ts,
                                       mcp_msg **pmsg);

/* The earliest time at which the session wants handle_expiry() (a debounce
 * window or a NACK retry ends), or MCP_TSTAMP_MAX. Pushes that may go out
 * now are reported by want_write(), not here: a debounce window that ended
 * at or before the latest |ts| given to the session is not returned (a
 * transport that cannot take the push yet waits for its own send to end,
 * not for a timer). A NACK retry's time stays until handle_expiry() has
 * acted on it. */
MCP_EXTERN mcp_tstamp mcp_source_session_get_expiry(const mcp_source_session *s);

/* Acts on expired timers, and starts the max_delay clock of changes not
 * seen yet. After it, check want_write(). Returns 0, or MCP_ERR_NOMEM when
 * a debounced change's record could not be made: what was done stays done,
 * nothing is lost, and a later call (get_expiry() still says when) goes
 * on; the stream driver ends the stream instead. */
MCP_EXTERN int mcp_source_session_handle_expiry(mcp_source_session *s,
                                                mcp_tstamp ts);

/* Sink node of the stream (id "" until the first request). */
MCP_EXTERN const char *mcp_source_session_node_id(const mcp_source_session *s);

/* The whole sink node (id and annotations), valid as long as the session. */
MCP_EXTERN const mcp_sink_node *mcp_source_session_node(const mcp_source_session *s);

/* Stale requests for collections this stream never asked for (they have no
 * per-collection status to be counted in). */
MCP_EXTERN uint64_t mcp_source_session_stale_unknown(const mcp_source_session *s);

/* ------------------------------------------------------------------ */
/* Sink state and session                                              */
/* ------------------------------------------------------------------ */

typedef struct mcp_sink_state mcp_sink_state;
typedef struct mcp_sink_session mcp_sink_session;

/*
 * A change the sink is about to apply, as received and validated. For a
 * full-state push (incremental == 0), |resources| is the whole new content
 * and |removed| lists the names held before that the new content drops
 * (computed by the sink). All pointers are valid during the callback only.
 */
typedef struct mcp_change {
  const char *collection;
  const char *system_version_info;
  const char *nonce;
  int incremental;
  const mcp_resource *resources;
  size_t nresources;
  const char *const *removed;
  size_t nremoved;
  /* 1 when, once applied, the collection holds exactly |resources| and
   * nothing else: a full-state push, or an incremental one while nothing
   * was held (a new state's first push on IncrementalAggregatedResources,
   * which has no full state: the source was told that nothing is held, so
   * it sent everything). An application may then drop whatever it kept of
   * the collection that is not listed (files an earlier run left). */
  int complete;
} mcp_change;

/*
 * The application applies |change|. Return 0 to accept (the sink then
 * updates what it holds and ACKs), or a google.rpc code > 0 to reject: the
 * sink NACKs with that code and the message written into |msg| (NUL
 * terminated, at most |msglen| bytes), and holds what it held before.
 */
typedef int (*mcp_apply_cb)(const mcp_change *change, char *msg,
                            size_t msglen, void *user_data);

typedef struct mcp_sink_options {
  const mcp_mem *mem; /* NULL: libc */
  const char *node_id;
  const mcp_kv *node_annotations;
  size_t nnode_annotations;
  const char *const *collections; /* requested collections, in order */
  size_t ncollections;
  int incremental;          /* ask for incremental pushes */
  mcp_apply_cb apply;       /* may be NULL: accept everything */
  mcp_event_cb on_event;    /* optional */
  void *user_data;          /* for apply and on_event */
  size_t journal_size;      /* recent requests kept; default 64 */
  /* The service the stream speaks (default RESOURCE). For the aggregated
   * ones, |collections| are type URLs; AGGREGATED never asks for
   * incremental pushes and AGGREGATED_INCREMENTAL always does. */
  mcp_service service;
  /* Limits on what a source may send (0: the default). A push that breaks
   * one is NACKed and changes nothing: RESOURCE_EXHAUSTED for
   * max_resources (resources held in a collection after the push),
   * INVALID_ARGUMENT for the others (max_metadata counts labels plus
   * annotations of one resource). */
  mcp_name_rules name_rules;
  size_t max_name_len;
  size_t max_version_len;
  size_t max_resources;
  size_t max_metadata;
  /* Bytes of a push's nonce: a longer one cannot be answered without
   * echoing it, so mcp_sink_session_recv() fails with PROTOCOL and the
   * stream ends (INVALID_ARGUMENT). Default MCP_DEFAULT_MAX_NONCE_LEN. */
  size_t max_nonce_len;
} mcp_sink_options;

#define MCP_SINK_OPTIONS_V1 1
#define MCP_SINK_OPTIONS_VERSION MCP_SINK_OPTIONS_V1
MCP_EXTERN void mcp_sink_options_default_versioned(int version,
                                                   mcp_sink_options *opts);
#define mcp_sink_options_default(OPTS)                                       \
  mcp_sink_options_default_versioned(MCP_SINK_OPTIONS_VERSION, (OPTS))

/* Creates the state of a sink. Copies everything in |opts|. On failure
 * |*pstate| is untouched. Errors: NOMEM, INVALID_ARGUMENT (no collection,
 * an empty one, or one twice; a node id or annotation that is not UTF-8,
 * or a node over a source's default limits, MCP_DEFAULT_MAX_NODE_*: such
 * a node would end every stream). */
MCP_EXTERN int mcp_sink_state_new_versioned(mcp_sink_state **pstate,
                                            int version,
                                            const mcp_sink_options *opts);
#define mcp_sink_state_new(PSTATE, OPTS)                                     \
  mcp_sink_state_new_versioned((PSTATE), MCP_SINK_OPTIONS_VERSION, (OPTS))

/* Frees the state. Its sessions must have been freed first. */
MCP_EXTERN void mcp_sink_state_del(mcp_sink_state *state);

/* Resources held in |collection| (0 when not requested). */
MCP_EXTERN size_t mcp_sink_state_count(const mcp_sink_state *state,
                                       const char *collection);

/* Version held for one resource, or NULL. Valid until the next change. */
MCP_EXTERN const char *mcp_sink_state_version(const mcp_sink_state *state,
                                              const char *collection,
                                              const char *name);

/* Calls |fn| for each resource held in |collection| (in no given order). */
MCP_EXTERN void mcp_sink_state_foreach(const mcp_sink_state *state,
                                       const char *collection,
                                       void (*fn)(const char *name,
                                                  const char *version,
                                                  void *user_data),
                                       void *user_data);

/* The service the state's sessions speak. */
MCP_EXTERN mcp_service mcp_sink_state_service(const mcp_sink_state *state);

/* 1 once every requested collection was received and ACKed at least once
 * (on any stream). */
MCP_EXTERN int mcp_sink_state_synced(const mcp_sink_state *state);

/*
 * Creates a session for one new stream of |state|. Only one session per
 * state may exist at a time (a stream replaces the previous one). Its
 * first messages are one request per collection, with empty nonce and,
 * when incremental, the versions held. Errors: NOMEM, INVALID_ARGUMENT
 * (the state already has a session).
 */
MCP_EXTERN int mcp_sink_session_new(mcp_sink_session **ps,
                                    mcp_sink_state *state, mcp_tstamp ts);

MCP_EXTERN void mcp_sink_session_del(mcp_sink_session *s);

/*
 * Feeds one received Resources message (or the service's response).
 * Validates it (nonce present; a requested collection; incremental only
 * when asked; no name twice; no name both updated and removed; names
 * present; names, versions, labels and annotations UTF-8 (an empty version
 * is accepted); every resource decodes with a body type), hands it to the
 * apply callback, updates what is held on acceptance, and queues the ACK or
 * NACK. A rejected message changes nothing held and is not an error: 0 is
 * returned.
 * Errors: MALFORMED (the envelope does not decode: no nonce to NACK; the
 * transport should end the stream), PROTOCOL (a requested collection
 * without nonce, or a nonce longer than max_nonce_len: it cannot be
 * answered), LIMIT (64 NACKs of unrequested collections are queued and not
 * sent: the peer ignores them), NOMEM (nothing changed, nothing queued).
 */
MCP_EXTERN int mcp_sink_session_recv(mcp_sink_session *s, const uint8_t *in,
                                     size_t len, mcp_tstamp ts);
/*
 * mcp_sink_session_recv() of one message in |niov| fragments, its bytes
 * in order (a gRPC message as the transport read it): the same answers
 * for the same bytes, however they are cut. Only a field that crosses
 * from one fragment into the next is copied, so a message of megabytes is
 * not joined first. The fragments are read during the call only (the
 * apply callback's bodies point into them or into such a copy).
 */
MCP_EXTERN int mcp_sink_session_recv_iov(mcp_sink_session *s,
                                         const mcp_iovec *iov, size_t niov,
                                         mcp_tstamp ts);

MCP_EXTERN int mcp_sink_session_want_write(const mcp_sink_session *s);

/* Produces the next RequestResources to send. Returns 1 and sets |*pmsg|
 * (owned by the caller), or 0 when nothing is queued. Errors: NOMEM. */
MCP_EXTERN int mcp_sink_session_next(mcp_sink_session *s, mcp_msg **pmsg);

/* ------------------------------------------------------------------ */
/* Introspection                                                       */
/* ------------------------------------------------------------------ */

/*
 * The state of one collection on one stream. Every string is whole (never
 * truncated), NUL-terminated and owned by the library (copy what you keep):
 *   - from mcp_source_session_collection_status() (V2): valid until the
 *     next collection_status call on this thread, of any source session
 *     (the versions and the nonce are written into one buffer per thread,
 *     so that a session keeps none: issue 25's bytes per stream; the
 *     library never makes that call itself), or the next call on that
 *     session if it comes first. A caller built against V1 keeps the old
 *     rule, "until the next call on that session": its buffer is the
 *     session's, made at its first V1 call (NOMEM then);
 *   - from mcp_sink_state_collection_status(): valid until the next call
 *     that changes the state (a sink session's recv, next, new or del).
 * A nonce is shown as it is on the wire, as in events and the journal (on
 * IncrementalAggregatedResources: "<number>:<type_url>").
 */
typedef struct mcp_collection_status {
  const char *collection;
  const char *type_url;    /* source, aggregated services: as requested */
  int known;               /* source: the store has this collection */
  int incremental;         /* the stream asked for incremental pushes */
  const char *acked_version;   /* system_version_info last ACKed, "" if none */
  const char *pending_version; /* of the push in flight, "" if none */
  const char *pending_nonce;   /* of the push in flight, "" if none */
  mcp_tstamp pending_age;  /* ts - time the push was produced; 0 if none */
  int last_nack_code;      /* 0 if never NACKed */
  const char *last_nack_message; /* "" if never NACKed */
  uint64_t pushes, acks, nacks, stale;
  size_t held;             /* sink: resources held */
  const char *last_nonce;  /* sink: of the last push it answered (ACK or
                              NACK), "" if none; source: "" */
} mcp_collection_status;

/* Number of collections the stream has asked for (source) or asks for
 * (sink), and the state of the i-th. Never allocates (but a source
 * session's first V1 call, above). Errors: NOT_FOUND (i out of range),
 * NOMEM (that V1 call only). */
MCP_EXTERN size_t mcp_source_session_collection_count(const mcp_source_session *s);
#define MCP_COLLECTION_STATUS_V1 1
#define MCP_COLLECTION_STATUS_V2 2 /* the same fields; the source's strings
                                      in a buffer per thread (above) */
#define MCP_COLLECTION_STATUS_VERSION MCP_COLLECTION_STATUS_V2
MCP_EXTERN int mcp_source_session_collection_status_versioned(
    const mcp_source_session *s, size_t i, mcp_tstamp ts, int version,
    mcp_collection_status *st);
#define mcp_source_session_collection_status(S, I, TS, ST)                   \
  mcp_source_session_collection_status_versioned(                           \
      (S), (I), (TS), MCP_COLLECTION_STATUS_VERSION, (ST))
MCP_EXTERN size_t mcp_sink_state_collection_count(const mcp_sink_state *state);
MCP_EXTERN int mcp_sink_state_collection_status_versioned(
    const mcp_sink_state *state, size_t i, mcp_tstamp ts, int version,
    mcp_collection_status *st);
#define mcp_sink_state_collection_status(STATE, I, TS, ST)                   \
  mcp_sink_state_collection_status_versioned(                               \
      (STATE), (I), (TS), MCP_COLLECTION_STATUS_VERSION, (ST))

/* One request the sink sent, newest last. */
typedef struct mcp_journal_entry {
  mcp_tstamp ts;
  const char *collection;
  const char *nonce;  /* as sent, whole; "" for a new request */
  int kind;           /* MCP_EVENT_REQUEST, MCP_EVENT_ACK or MCP_EVENT_NACK */
  int code;           /* NACK code */
  const char *message;/* NACK message, "" otherwise */
  size_t ninitial;    /* entries of initial_resource_versions sent */
} mcp_journal_entry;

/* Number of journal entries kept (at most journal_size), and the i-th,
 * oldest first. Its strings are owned by the state, valid until the next
 * call that changes the state. */
MCP_EXTERN size_t mcp_sink_state_journal_count(const mcp_sink_state *state);
#define MCP_JOURNAL_ENTRY_V1 1
#define MCP_JOURNAL_ENTRY_VERSION MCP_JOURNAL_ENTRY_V1
MCP_EXTERN int mcp_sink_state_journal_entry_versioned(
    const mcp_sink_state *state, size_t i, int version, mcp_journal_entry *e);
#define mcp_sink_state_journal_entry(STATE, I, E)                            \
  mcp_sink_state_journal_entry_versioned((STATE), (I),                       \
                                         MCP_JOURNAL_ENTRY_VERSION, (E))

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
 * service), holding MCP's reconnection (an mcp_redial; the call is the
 * attempt): open() makes a stream (a dialed source sends the trigger
 * first) only once the backoff is over, else answers 0; ended(), with any
 * status, starts the next backoff, which goes back to its start only
 * after a call that received a whole message and lasted the nominal delay
 * (the engine's healthy rule); get_expiry() says when the next attempt is
 * due (MCP_TSTAMP_MAX while a call is open). A stream that cannot be made
 * (no memory) counts as a failed attempt and open() answers 0. A dialed
 * stream tells the side of each whole message it took (the healthy rule's
 * count): |side| must outlive the streams open() made. Borrowed: valid as
 * long as |side|. */
MCP_EXTERN const mcp_client_def *mcp_side_client(const mcp_side *side);

/* The backoff of the side's client (a new side: mcp_backoff_defaults(),
 * the first attempt due at once). Resets it: |o| copied (NULL or zero
 * fields: the defaults), |rand| as for mcp_redial_init() (NULL: a
 * splitmix64 seeded from the side's address), |rand_user_data| borrowed
 * as long as the side runs, the first attempt due at |now|. Call it before
 * the client runs, from the thread that runs it. */
MCP_EXTERN void mcp_side_set_backoff(mcp_side *side,
                                     const mcp_backoff_options *o,
                                     mcp_rand_fn rand, void *rand_user_data,
                                     mcp_tstamp now);
/* The side's reconnection state (for logs and tests: mcp_redial_at(),
 * mcp_redial_count(), mcp_redial_backoff()). Borrowed, read-only: valid
 * as long as |side|. */
MCP_EXTERN const mcp_redial *mcp_side_redial(const mcp_side *side);

/* ------------------------------------------------------------------ */
/* Reading one Resource                                                */
/* ------------------------------------------------------------------ */

/*
 * Reads one encoded istio.mcp.v1alpha1.Resource (|in[0..len)|) as a sink
 * reads the resources of a push (docs/protocol.md: the last value of a
 * scalar wins, repeated messages merge, unknown fields are skipped), for
 * a module whose messages carry MCP Resources (MCP over xDS). On success
 * |*res|'s body points into |in|; its strings (NUL-terminated, "" when
 * absent), labels and annotations are in one block allocated with |mem|,
 * returned in |*block|: free it with mcp_mem_free(mem, *block). |extra|
 * more bytes at the block's end are the caller's, at |*extra_p| (NULL when
 * |extra| is 0 or |extra_p| is NULL), for strings of its own that live
 * with the resource. Nothing else is checked (mcp_resource_check() does).
 * |mem| is required (mcp_mem_default() for the C library). Errors:
 * MALFORMED (it does not decode), PROTOCOL (a string, label or annotation
 * is not UTF-8 or holds a NUL), NOMEM; on failure nothing is allocated and
 * |*block| is NULL.
 */
MCP_EXTERN int mcp_resource_decode(const uint8_t *in, size_t len,
                                   const mcp_mem *mem, size_t extra,
                                   mcp_resource *res, void **block,
                                   char **extra_p);

/* ------------------------------------------------------------------ */
/* Admission of MCP source streams                                     */
/* ------------------------------------------------------------------ */

/* 1 when |s| asked for at least one collection and every one its store
 * knows has had its first push pulled by mcp_source_session_next(): the
 * signal for mcp_admit_initial_done(). */
MCP_EXTERN int mcp_admit_initial_sent(const mcp_source_session *s,
                                      mcp_tstamp ts);

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

/* mcp_stream_ops.name of MCP's streams, both sides: the stream info's
 * |api| of every MCP stream. */
#define MCP_API_NAME "mcp"

/* The MCP session behind |st|: NULL when |st| is NULL or runs another
 * protocol, or (sink) once a newer stream replaced it. Borrowed, valid
 * until the next call on |st|: for reading (a transport's stream info:
 * mcp_stream_source_session(info->stream); metrics). */
MCP_EXTERN mcp_source_session *mcp_stream_source_session(const mcp_stream *st);
MCP_EXTERN mcp_sink_session *mcp_stream_sink_session(const mcp_stream *st);

#ifdef __cplusplus
}
#endif

#endif /* MCP_MCP_V1ALPHA1_H */
