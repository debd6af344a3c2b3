/*
 * libmcp: a sans-I/O engine for Istio's Mesh Configuration Protocol
 * (istio.mcp.v1alpha1).
 *
 * The core reads no clock, opens no socket or file, starts no thread and
 * keeps no global state. Bytes go in through *_recv(), messages come out
 * through *_next(); time comes in as an argument (mcp_tstamp, nanoseconds
 * on any monotonic clock the caller likes); allocation and randomness go
 * through hooks given at creation.
 *
 * Objects:
 *   mcp_store           collections of resources, each resource version
 *                       encoded once into shared bytes; a generation
 *                       counter and change log per collection.
 *   mcp_source_session  one stream on the source side (ResourceSource
 *                       server or ResourceSink client: same logic).
 *   mcp_sink_state      what a sink holds; survives reconnects.
 *   mcp_sink_session    one stream on the sink side (ResourceSource client
 *                       or ResourceSink server).
 *   mcp_msg             one encoded message to send, as fragments.
 *
 * Conventions:
 *   - Functions returning int return 0 (or a count) on success and a
 *     negative mcp_error on failure. Unless a function says otherwise, on
 *     failure it changes nothing (failure atomicity).
 *   - Strings are NUL-terminated UTF-8. Pointers passed in are only
 *     borrowed for the duration of the call unless the comment says the
 *     object keeps them.
 *   - Objects are not thread-safe. One thread at a time per store and its
 *     sessions.
 *   - Callbacks must not call back into the object that invoked them
 *     (they may read other objects, and record work to do afterwards).
 *   - Misuse (NULL where an object is required, time going backwards)
 *     trips assert(); peer faults are error codes.
 *   - Versioned structs, the ngtcp2 way (docs/api.md): each options struct
 *     the caller fills and each status struct the library fills has a
 *     version (MCP_<STRUCT>_VERSION). The functions that take or fill one
 *     are macros over *_versioned() functions that also take the version
 *     the caller was compiled with, so that a struct that grows in a later
 *     release (fields are only ever appended) never breaks a program built
 *     against an older header: the library reads or writes only that
 *     version's fields, and gives the newer ones their defaults. Structs
 *     without a version (mcp_resource, mcp_kv, mcp_event, mcp_change,
 *     mcp_item, the vtables and service definitions of engine.h) are
 *     frozen when the caller allocates or fills them: they never grow; a
 *     need for more comes as a new struct. The ones only the library fills
 *     and lends to a callback (mcp_change, mcp_event, mcp_item) may gain
 *     fields at their end, since no caller allocates them.
 *   - The allocator hook (mcp_mem) must be thread-safe when messages are
 *     freed on another thread than the one using the store: mcp_msg_free()
 *     of the last reference to a resource's bytes frees them with the
 *     store's hook. Everything else calls the hook on the object's thread.
 */
#ifndef MCP_MCP_H
#define MCP_MCP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define MCP_EXTERN __attribute__((visibility("default")))
#else
#define MCP_EXTERN
#endif

/* ------------------------------------------------------------------ */
/* Version                                                             */
/* ------------------------------------------------------------------ */

/* The version of the library running (not of the header compiled
 * against): "MAJOR.MINOR.PATCH", the meson project version, e.g. "0.2.0".
 * Static string. */
MCP_EXTERN const char *mcp_version(void);

/* The same as a number, MAJOR << 16 | MINOR << 8 | PATCH (0x000200 for
 * 0.2.0), for comparisons. */
MCP_EXTERN uint32_t mcp_version_num(void);

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

/*
 * X(name, value, gRPC status code, description). The gRPC code is the one
 * a transport uses when the error ends a stream.
 *
 * The values sit far from -1 (a stray "return -1" is never taken for one
 * of them), in two ranges as nghttp2's NGHTTP2_ERR_FATAL: from -501 the
 * errors after which the object that returned them is unchanged and usable
 * (retry, or fix the argument); at or below MCP_ERR_FATAL (-900) the ones
 * after which the stream cannot go on: the transport ends it with
 * mcp_error_grpc_status() (the object itself is still unchanged, and only
 * to be freed). The values are part of the ABI: new codes get new values.
 */
#define MCP_ERRNO_MAP(X)                                                     \
  X(NOMEM, -501, 8, "out of memory")                                         \
  X(INVALID_ARGUMENT, -502, 3, "invalid argument")                           \
  X(NOT_FOUND, -503, 5, "not found")                                         \
  X(UNSUPPORTED, -504, 12, "unsupported")                                    \
  X(MALFORMED, -901, 3, "malformed message")                                 \
  X(PROTOCOL, -902, 3, "protocol violation by the peer")                     \
  X(LIMIT, -903, 8, "limit exceeded")                                        \
  X(CLOSED, -904, 1, "session closed")                                       \
  X(CALLBACK, -905, 13, "callback failed")                                   \
  X(RESYNC, -906, 10, "the stream fell behind the change log; reconnect to resume") \
  X(IO, -907, 14, "I/O or transport failure")

/* Errors at or below this end the stream (mcp_err_is_fatal()). */
#define MCP_ERR_FATAL (-900)

typedef enum mcp_error {
#define MCP_ERR_ENUM_(n, v, g, s) MCP_ERR_##n = (v),
  MCP_ERRNO_MAP(MCP_ERR_ENUM_)
#undef MCP_ERR_ENUM_
} mcp_error;

/* 1 when |err| is one of ours at or below MCP_ERR_FATAL: the stream (or
 * the peer) is broken and retrying the same call cannot succeed; 0 for
 * success, the other errors and unknown values. */
MCP_EXTERN int mcp_err_is_fatal(int err);

/* A static description of |err| ("unknown error" for an unknown code). */
MCP_EXTERN const char *mcp_strerror(int err);

/* The gRPC status code a transport should end a stream with when a call
 * failed with |err| (2, UNKNOWN, for an unknown code). */
MCP_EXTERN int mcp_error_grpc_status(int err);

/* gRPC status codes used in NACKs (google.rpc.Code). */
enum {
  MCP_CODE_OK = 0,
  MCP_CODE_CANCELLED = 1,
  MCP_CODE_UNKNOWN = 2,
  MCP_CODE_INVALID_ARGUMENT = 3,
  MCP_CODE_NOT_FOUND = 5,
  MCP_CODE_PERMISSION_DENIED = 7,
  MCP_CODE_RESOURCE_EXHAUSTED = 8,
  MCP_CODE_FAILED_PRECONDITION = 9,
  MCP_CODE_ABORTED = 10,
  MCP_CODE_UNIMPLEMENTED = 12,
  MCP_CODE_INTERNAL = 13,
  MCP_CODE_UNAVAILABLE = 14
};

/* ------------------------------------------------------------------ */
/* Hooks                                                               */
/* ------------------------------------------------------------------ */

/* Nanoseconds on a monotonic clock chosen by the caller. */
typedef uint64_t mcp_tstamp;
#define MCP_TSTAMP_MAX UINT64_MAX
#define MCP_MILLISECONDS ((mcp_tstamp)1000000)
#define MCP_SECONDS ((mcp_tstamp)1000000000)

/*
 * Allocator hook, as nghttp2_mem. NULL wherever an mcp_mem pointer is
 * accepted means the C library. The hook is also bridged into protobuf-c.
 * The struct is copied at object creation.
 */
typedef struct mcp_mem {
  void *user_data;
  void *(*malloc)(size_t size, void *user_data);
  void (*free)(void *ptr, void *user_data);
  void *(*calloc)(size_t nmemb, size_t size, void *user_data);
  void *(*realloc)(void *ptr, size_t size, void *user_data);
} mcp_mem;

/* The C library's malloc, free, calloc and realloc as an mcp_mem (what
 * NULL means): for a library built on this one that keeps its own copy of
 * a caller's hook. Static, never NULL. */
MCP_EXTERN const mcp_mem *mcp_mem_default(void);

/* Fills |dest| with |len| random bytes. Used once per store, for its
 * epoch. Tests and fuzzers pass a deterministic one. */
typedef void (*mcp_rand_fn)(uint8_t *dest, size_t len, void *user_data);

/* A fast deterministic generator (splitmix64) for mcp_rand_fn:
 * |user_data| points to its uint64_t state, which the caller seeds. Not
 * for secrets. */
MCP_EXTERN void mcp_rand_splitmix64(uint8_t *dest, size_t len, void *user_data);

/* ------------------------------------------------------------------ */
/* Reconnection backoff                                                */
/* ------------------------------------------------------------------ */

/*
 * How long a dialing side waits before its next attempt (every client uses
 * it through mcp_redial below). After a stream ends, the next attempt waits
 * the nominal delay scaled by a factor drawn uniformly from
 * [1 - jitter, 1 + jitter], capped at |max|; the nominal delay then grows
 * by |multiplier| up to |max|. It goes back to |initial| (never to zero)
 * only after a healthy stream: one on which a message was received (a
 * whole message, not any byte: a server's SETTINGS do not count) and that
 * lasted at least the nominal delay, so a peer that fails every stream at
 * once is not hammered.
 */
typedef struct mcp_backoff_options {
  mcp_tstamp initial; /* default 1 s */
  double multiplier;  /* default 1.6 */
  double jitter;      /* default 0.2 */
  mcp_tstamp max;     /* default 120 s */
} mcp_backoff_options;

/* The one table of defaults above (every transport's options and every
 * client read it; a zero or out-of-range field given to mcp_backoff_init()
 * takes its value from here). */
MCP_EXTERN mcp_backoff_options mcp_backoff_defaults(void);

/* Opaque, but a value type so that it can be embedded without an
 * allocation: its bytes are private and may change meaning in any release
 * (use the functions below). */
typedef struct mcp_backoff {
  uint64_t opaque_[8];
} mcp_backoff;

/* |o| is copied; NULL or zero fields take the defaults. |rand| NULL: a
 * splitmix64 seeded from the object's address (tests pass their own). */
MCP_EXTERN void mcp_backoff_init(mcp_backoff *b, const mcp_backoff_options *o,
                                 mcp_rand_fn rand, void *rand_user_data);

/* The delay before the next attempt; grows the one after. */
MCP_EXTERN mcp_tstamp mcp_backoff_next(mcp_backoff *b);

/* A stream that lasted |lived| and received |received| messages ended. */
MCP_EXTERN void mcp_backoff_stream_ended(mcp_backoff *b, mcp_tstamp lived,
                                         uint64_t received);

/* The nominal delay now (before jitter), for logs and tests. */
MCP_EXTERN mcp_tstamp mcp_backoff_nominal(const mcp_backoff *b);

/*
 * One client's reconnection: when its next call (or connection) may start,
 * and what the backoff learns when one ends. Every dialer uses it: both
 * transports' MCP dialers and client connections, the Destination client
 * (mcp_dest_agent), the Dispatcher agent. Sans-I/O: time is an argument.
 *
 *   init      the first attempt is due at |now|.
 *   opened    an attempt started at |now| (a call, or a connection whose
 *             calls count together); its received count starts at 0.
 *   received  |n| messages arrived on the attempt open.
 *   ended     the attempt ended at |now|: the backoff's healthy rule
 *             (mcp_backoff_stream_ended()) is applied, and the next attempt
 *             is due after mcp_backoff_next(); returns that delay. Also for
 *             an attempt that could not start (nothing opened: no reset).
 *   due       no attempt open and |now| at or past the due time.
 *   at        the due time (MCP_TSTAMP_MAX while an attempt is open).
 * Opaque, a value type like mcp_backoff (no allocation).
 */
typedef struct mcp_redial {
  uint64_t opaque_[12];
} mcp_redial;

/* |o| is copied (NULL or zero fields: mcp_backoff_defaults()); |rand| as
 * for mcp_backoff_init(). */
MCP_EXTERN void mcp_redial_init(mcp_redial *r, const mcp_backoff_options *o,
                                mcp_rand_fn rand, void *rand_user_data,
                                mcp_tstamp now);
MCP_EXTERN void mcp_redial_opened(mcp_redial *r, mcp_tstamp now);
MCP_EXTERN void mcp_redial_received(mcp_redial *r, uint64_t n);
MCP_EXTERN mcp_tstamp mcp_redial_ended(mcp_redial *r, mcp_tstamp now);
MCP_EXTERN int mcp_redial_due(const mcp_redial *r, mcp_tstamp now);
MCP_EXTERN mcp_tstamp mcp_redial_at(const mcp_redial *r);
/* Whether an attempt is open, and the messages it received so far. */
MCP_EXTERN int mcp_redial_is_open(const mcp_redial *r);
MCP_EXTERN uint64_t mcp_redial_count(const mcp_redial *r);
/* The backoff inside (for mcp_backoff_nominal() in logs and tests). */
MCP_EXTERN const mcp_backoff *mcp_redial_backoff(const mcp_redial *r);

/* ------------------------------------------------------------------ */
/* Resources                                                           */
/* ------------------------------------------------------------------ */

typedef struct mcp_kv {
  const char *key;
  const char *value;
} mcp_kv;

/*
 * A resource, as the application describes it to the store and as the
 * sink hands it to the application. All pointers are borrowed.
 */
typedef struct mcp_resource {
  const char *name;    /* required, non-empty */
  const char *version; /* "" or NULL: the store generates one */
  const mcp_kv *labels;
  size_t nlabels;
  const mcp_kv *annotations;
  size_t nannotations;
  int has_create_time;
  int64_t create_time_seconds;
  int32_t create_time_nanos;
  const char *type_url; /* google.protobuf.Any.type_url of the body;
                           required (sinks reject a body without type) */
  const uint8_t *body;  /* google.protobuf.Any.value */
  size_t body_len;
} mcp_resource;

/* ------------------------------------------------------------------ */
/* Names                                                               */
/* ------------------------------------------------------------------ */

/*
 * The plural of a Kubernetes kind as collection names use it: lower-cased;
 * a kind plural already (Endpoints) unchanged; consonant + "y" -> "ies";
 * ending in s, x, z, ch or sh -> + "es"; else + "s". Writes at most |len| bytes including the NUL (truncating) and
 * returns the length of the whole result, as snprintf does.
 */
MCP_EXTERN size_t mcp_kind_plural(const char *kind, char *buf, size_t len);

/*
 * The collection a type URL maps to by default (the aggregated services):
 * everything up to the last '/' is dropped; the package's dots become
 * slashes and the kind its plural; a "k8s.io.api." package becomes "k8s/":
 *   type.googleapis.com/istio.networking.v1alpha3.VirtualService
 *     -> istio/networking/v1alpha3/virtualservices
 *   type.googleapis.com/k8s.io.api.core.v1.ConfigMap -> k8s/core/v1/configmaps
 * Writes and returns as mcp_kind_plural().
 */
MCP_EXTERN size_t mcp_collection_for_type_url(const char *type_url, char *buf,
                                              size_t len);

/*
 * The collection of a document's apiVersion and kind, the one naming rule
 * (the loader's and xDS's):
 *   GROUP.istio.io/V Kind -> istio/GROUP/V/plural  (GROUP: the first label)
 *   GROUP/V Kind          -> k8s/GROUP/V/plural
 *   V Kind (no group)     -> k8s/core/V/plural
 * Newer Istio versions of Istio's own types are the same types (docs/
 * schema.md): networking.istio.io/v1beta1 and /v1 of a kind that
 * networking.istio.io/v1alpha3 has land in istio/networking/v1alpha3;
 * security.istio.io/v1 of a security.istio.io/v1beta1 kind in
 * istio/security/v1beta1 (mcp_kind_canonical_api_version()). Group,
 * version and kind must be non-empty and of [A-Za-z0-9._-]; at most one
 * '/' in |api_version|. Writes as mcp_kind_plural() and returns the length
 * of the whole result, or MCP_ERR_INVALID_ARGUMENT (|buf| untouched).
 */
MCP_EXTERN int mcp_collection_for_kind(const char *api_version,
                                       const char *kind, char *buf,
                                       size_t len);

/*
 * The apiVersion whose collection |api_version| + |kind| lands in: the
 * canonical version of an alias above ("networking.istio.io/v1alpha3" for
 * "networking.istio.io/v1" VirtualService), else |api_version| itself.
 * Static storage or |api_version|.
 */
MCP_EXTERN const char *mcp_kind_canonical_api_version(const char *api_version,
                                                      const char *kind);

/*
 * The collection of an xDS type URL in Istio's GROUP/VERSION/KIND form
 * ("networking.istio.io/v1/VirtualService", "core/v1/ConfigMap": group
 * "core" or "" is Kubernetes' core group): mcp_collection_for_kind() of
 * GROUP/VERSION and KIND, aliases included. Exactly three parts. Writes
 * and returns as mcp_collection_for_kind(); MCP_ERR_INVALID_ARGUMENT for
 * anything else (an Envoy type URL such as
 * "type.googleapis.com/envoy.config.cluster.v3.Cluster").
 */
MCP_EXTERN int mcp_collection_for_gvk(const char *type_url, char *buf,
                                      size_t len);

/*
 * 1 when |name| follows the resource naming rules: segments separated by
 * "/" (one leading "/" allowed). |strict|: every segment is an RFC 1123 DNS
 * label (1-63 of [a-z0-9-], alphanumeric at both ends), as the MCP
 * reference says. Lenient: segments of printable ASCII without spaces,
 * other than "." and "..", so Kubernetes names such as "a.b.svc" pass.
 * Same as mcp_name_valid2(name, strict ? MCP_NAMES_STRICT :
 * MCP_NAMES_LENIENT).
 */
MCP_EXTERN int mcp_name_valid(const char *name, int strict);

/* Which names the store accepts and the sink takes (resource names only;
 * collection names are compared, never interpreted). Every rule but ANY
 * splits the name at "/" (one leading "/" allowed) and checks each
 * segment. The stores and sinks default to LENIENT, which takes what
 * Istio's sources send (Kubernetes names of every kind, including the
 * "system:..." ones of RBAC); a source that wants to serve only what
 * Kubernetes itself would accept uses KUBERNETES (mcp-source does). */
typedef enum mcp_name_rules {
  MCP_NAMES_LENIENT = 0, /* the default: printable ASCII segments, not
                            empty, "." or ".." */
  MCP_NAMES_STRICT = 1,  /* segments are DNS-1123 labels (the reference) */
  MCP_NAMES_ANY = 2,     /* any non-empty UTF-8 */
  MCP_NAMES_KUBERNETES = 3 /* segments are lowercase DNS-1123 subdomains,
                              as Kubernetes' IsDNS1123Subdomain: at most
                              253 bytes, labels [a-z0-9]([-a-z0-9]*[a-z0-9])?
                              joined by "." */
} mcp_name_rules;

/* 1 when |name| follows |rules| (no length limit: see
 * mcp_resource_check()); 0 otherwise, also for NULL. */
MCP_EXTERN int mcp_name_valid2(const char *name, mcp_name_rules rules);

/* A static one-line description of |rules|, for messages. */
MCP_EXTERN const char *mcp_name_rules_str(mcp_name_rules rules);

/* Default limits (docs/security.md explains each). In every options struct
 * below a limit of 0 means its default. */
#define MCP_DEFAULT_MAX_NAME_LEN 512
#define MCP_DEFAULT_MAX_VERSION_LEN 256
#define MCP_DEFAULT_MAX_RESOURCES (1u << 20)
#define MCP_DEFAULT_MAX_COLLECTIONS 512
#define MCP_DEFAULT_MAX_INITIAL_VERSIONS (1u << 20)
#define MCP_DEFAULT_MAX_NODE_ANNOTATIONS 64
#define MCP_DEFAULT_MAX_METADATA 256
#define MCP_DEFAULT_REQUEST_RATE 100
#define MCP_DEFAULT_REQUEST_BURST 1000
/* The SinkNode a sink sends on every request: its id, the key and the
 * value of one annotation, and all of it as encoded (id, keys, values and
 * a few bytes of framing each). A source refuses a request that breaks one;
 * a sink refuses to be created with a node that breaks one. */
#define MCP_DEFAULT_MAX_NODE_ID_LEN 1024
#define MCP_DEFAULT_MAX_NODE_KEY_LEN 317
#define MCP_DEFAULT_MAX_NODE_VALUE_LEN 4096
#define MCP_DEFAULT_MAX_NODE_BYTES (32u << 10)
/* The nonce of a push a sink receives (it echoes it, and keeps it in its
 * journal). */
#define MCP_DEFAULT_MAX_NONCE_LEN 1024

/*
 * What one resource may be: the sink session NACKs a push holding a
 * resource that fails mcp_resource_check() with its options' limits, and a
 * source that must not serve what the sink rejects (mcp-source's loader)
 * checks each resource with the same function and the sink's defaults.
 * Append-only: initialise with mcp_resource_limits_default(); a limit of
 * 0 means its default.
 */
typedef struct mcp_resource_limits {
  mcp_name_rules name_rules; /* default LENIENT, as mcp_sink_options */
  size_t max_name_len;       /* bytes; MCP_DEFAULT_MAX_NAME_LEN */
  size_t max_version_len;    /* bytes; MCP_DEFAULT_MAX_VERSION_LEN */
  size_t max_metadata;       /* labels + annotations; MCP_DEFAULT_MAX_METADATA */
} mcp_resource_limits;

/* Fills |lim| with what mcp_sink_options_default() applies. */
#define MCP_RESOURCE_LIMITS_V1 1
#define MCP_RESOURCE_LIMITS_VERSION MCP_RESOURCE_LIMITS_V1
MCP_EXTERN void mcp_resource_limits_default_versioned(int version,
                                                      mcp_resource_limits *lim);
#define mcp_resource_limits_default(LIM)                                     \
  mcp_resource_limits_default_versioned(MCP_RESOURCE_LIMITS_VERSION, (LIM))

/*
 * Checks |res| against |lim|: a name that is present, UTF-8, at most
 * max_name_len bytes and follows name_rules; a version (NULL or "" allowed)
 * UTF-8 and at most max_version_len bytes; at most max_metadata labels plus
 * annotations, all UTF-8; a body type; a create time with nanoseconds in
 * [0, 1e9). Returns 0, or MCP_ERR_INVALID_ARGUMENT with a one-line reason
 * (naming the resource, truncated to |msglen| bytes with its NUL) in
 * |msg| (NULL when |msglen| is 0: no reason written). Reads |res| only.
 */
MCP_EXTERN int mcp_resource_check_versioned(const mcp_resource *res,
                                            int version,
                                            const mcp_resource_limits *lim,
                                            char *msg, size_t msglen);
#define mcp_resource_check(RES, LIM, MSG, MSGLEN)                             \
  mcp_resource_check_versioned((RES), MCP_RESOURCE_LIMITS_VERSION, (LIM),     \
                               (MSG), (MSGLEN))

/* ------------------------------------------------------------------ */
/* Messages                                                            */
/* ------------------------------------------------------------------ */

typedef struct mcp_iovec {
  const uint8_t *base;
  size_t len;
} mcp_iovec;

/*
 * One encoded protobuf message, ready to be framed and sent: the
 * concatenation of its fragments. Fragments of resources are shared with
 * the store and with every other message carrying the same resource
 * version; the message keeps them alive until mcp_msg_free(), so a
 * transport may send them without copying, on any thread, after the store
 * has moved on.
 */
typedef struct mcp_msg mcp_msg;

/* Total encoded length in bytes. */
MCP_EXTERN size_t mcp_msg_len(const mcp_msg *msg);

/* Sets |*iov| to the fragments (valid until mcp_msg_free()) and returns
 * their number. */
MCP_EXTERN size_t mcp_msg_iov(const mcp_msg *msg, const mcp_iovec **iov);

/* Copies the whole message into |dest|, which has room for mcp_msg_len()
 * bytes. */
MCP_EXTERN void mcp_msg_flatten(const mcp_msg *msg, uint8_t *dest);

/* The collection this message is about ("" when it has none). Valid until
 * mcp_msg_free(). */
MCP_EXTERN const char *mcp_msg_collection(const mcp_msg *msg);

/* Releases the message and its references to shared fragments. Thread-safe
 * with respect to the store (the shared bytes are reference counted
 * atomically). NULL is a no-op. */
MCP_EXTERN void mcp_msg_free(mcp_msg *msg);

/* ------------------------------------------------------------------ */
/* Store                                                               */
/* ------------------------------------------------------------------ */

typedef struct mcp_store mcp_store;

typedef struct mcp_store_options {
  const mcp_mem *mem; /* NULL: libc */
  /*
   * Epoch: a number that differs between runs, so that versions the store
   * generates ("<epoch>-<generation>", in hexadecimal and decimal) never
   * repeat across restarts. 0: draw it from |rand|. When both are 0/NULL,
   * mcp_store_new() fails with MCP_ERR_INVALID_ARGUMENT.
   */
  uint64_t epoch;
  mcp_rand_fn rand;
  void *rand_user_data;
  /* Limits on what the application stores (INVALID_ARGUMENT, or LIMIT for
   * max_resources). 0: the default. */
  mcp_name_rules name_rules;
  size_t max_name_len;     /* bytes of a resource name */
  size_t max_version_len;  /* bytes of a version */
  size_t max_resources;    /* live resources per collection */
} mcp_store_options;

#define MCP_STORE_OPTIONS_V1 1
#define MCP_STORE_OPTIONS_VERSION MCP_STORE_OPTIONS_V1
MCP_EXTERN void mcp_store_options_default_versioned(int version,
                                                    mcp_store_options *opts);
#define mcp_store_options_default(OPTS)                                      \
  mcp_store_options_default_versioned(MCP_STORE_OPTIONS_VERSION, (OPTS))

/* Creates an empty store. On failure |*pstore| is untouched.
 * Errors: NOMEM, INVALID_ARGUMENT (also an unknown version). */
MCP_EXTERN int mcp_store_new_versioned(mcp_store **pstore, int version,
                                       const mcp_store_options *opts);
#define mcp_store_new(PSTORE, OPTS)                                          \
  mcp_store_new_versioned((PSTORE), MCP_STORE_OPTIONS_VERSION, (OPTS))

/* Frees the store. Every session using it must have been freed first;
 * messages (mcp_msg) may outlive it. NULL is a no-op. */
MCP_EXTERN void mcp_store_del(mcp_store *store);

/* The store's epoch. */
MCP_EXTERN uint64_t mcp_store_epoch(const mcp_store *store);

/*
 * Declares a collection, so that it is served (empty) before it has any
 * resource. Adding an existing collection is a no-op returning 0.
 * Errors: NOMEM, INVALID_ARGUMENT (empty name or not UTF-8).
 */
MCP_EXTERN int mcp_store_add_collection(mcp_store *store, const char *collection);

/*
 * Adds or replaces one resource, creating the collection if needed. When
 * the resource's version equals the version held and its content is
 * byte-identical, nothing changes and 0 is returned; otherwise the
 * collection's generation advances. |ts| stamps the change for debouncing.
 * Returns 1 when the collection changed, 0 when not.
 * Errors: NOMEM, INVALID_ARGUMENT (a name that breaks the name rules, a
 * name or version too long or not UTF-8), LIMIT (max_resources).
 */
MCP_EXTERN int mcp_store_upsert(mcp_store *store, const char *collection,
                                const mcp_resource *res, mcp_tstamp ts);

/*
 * Deletes one resource. Returns 1 when it existed, 0 when not.
 * Errors: NOMEM (a tombstone is recorded).
 */
MCP_EXTERN int mcp_store_delete(mcp_store *store, const char *collection,
                                const char *name, mcp_tstamp ts);

/*
 * Replaces the whole content of a collection with |res[0..n)|: upserts
 * every resource given and deletes every other one, as one change (one
 * generation). Resources equal to those held are left as they are, so the
 * change log only lists real changes. Returns 1 when the collection
 * changed, 0 when not. On failure nothing changed.
 * Errors: NOMEM, INVALID_ARGUMENT (a bad resource, or a name given twice),
 * LIMIT (more than max_resources).
 */
MCP_EXTERN int mcp_store_replace(mcp_store *store, const char *collection,
                                 const mcp_resource *res, size_t n,
                                 mcp_tstamp ts);

/* Current generation of a collection: 0 when unknown or never changed. */
MCP_EXTERN uint64_t mcp_store_generation(const mcp_store *store,
                                         const char *collection);

/* 1 when the collection exists (was added or received a resource). */
MCP_EXTERN int mcp_store_has_collection(const mcp_store *store,
                                        const char *collection);

/* Number of live resources in a collection (0 when unknown). */
MCP_EXTERN size_t mcp_store_count(const mcp_store *store, const char *collection);

/* Version of one resource, or NULL. Valid until the next change of that
 * collection. */
MCP_EXTERN const char *mcp_store_version(const mcp_store *store,
                                         const char *collection,
                                         const char *name);

/* Calls |fn| for each live resource of |collection|, oldest change first.
 * |fn| must not change the store. */
MCP_EXTERN void mcp_store_foreach(const mcp_store *store, const char *collection,
                                  void (*fn)(const char *name,
                                             const char *version,
                                             void *user_data),
                                  void *user_data);

/* Number of collections, and the name of the i-th (in creation order;
 * valid as long as the store). */
MCP_EXTERN size_t mcp_store_collection_count(const mcp_store *store);
MCP_EXTERN const char *mcp_store_collection_name(const mcp_store *store,
                                                 size_t i);

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
 * seen yet. After it, check want_write(). */
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

MCP_EXTERN int mcp_sink_session_want_write(const mcp_sink_session *s);

/* Produces the next RequestResources to send. Returns 1 and sets |*pmsg|
 * (owned by the caller), or 0 when nothing is queued. Errors: NOMEM. */
MCP_EXTERN int mcp_sink_session_next(mcp_sink_session *s, mcp_msg **pmsg);

/* ------------------------------------------------------------------ */
/* Introspection                                                       */
/* ------------------------------------------------------------------ */

/*
 * The state of one collection on one stream. Every string is whole (never
 * truncated), NUL-terminated and owned by the library:
 *   - from mcp_source_session_collection_status(): valid until the next
 *     call on that session, another collection_status included (the
 *     versions and the nonce are written into one buffer of the session,
 *     as nghttp2's mem_send output: copy what you keep);
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
 * (sink), and the state of the i-th. Never allocates. Errors: NOT_FOUND
 * (i out of range). */
MCP_EXTERN size_t mcp_source_session_collection_count(const mcp_source_session *s);
#define MCP_COLLECTION_STATUS_V1 1
#define MCP_COLLECTION_STATUS_VERSION MCP_COLLECTION_STATUS_V1
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
/* Admission                                                           */
/* ------------------------------------------------------------------ */

/*
 * Which new streams a listening transport runs now, which wait (unread,
 * with no session) and which it refuses: the policy both transports share.
 * Sans-I/O like the rest: time is an argument, no callback; the transport
 * admits each new stream with a peer key, pulls the decisions for waiting
 * streams with mcp_admit_next(), and tells when a stream's initial push
 * was handed to it and when the stream is gone.
 *
 *  1. Streams (running or waiting): at most |max_streams| in all and
 *     |max_streams_per_peer| per peer; beyond, RESOURCE_EXHAUSTED.
 *  2. New-stream rate: a token bucket (|stream_rate| per second, holding
 *     |stream_burst|). A stream finding no token waits for one while
 *     fewer than |stream_burst| wait, and fewer than a quarter of them
 *     from its peer; beyond, UNAVAILABLE. Tokens go round robin across
 *     the waiting peers (in arrival order within a peer).
 *  3. Initial slots (streams admitted with |initial|, i.e. sources): a
 *     slot pays for the cost of the initial push, so it is held from the
 *     admission until every collection the stream asked for (that its
 *     store knows) has had its first push handed to the transport
 *     (mcp_admit_initial_sent()), or for |initial_timeout| at most (a
 *     stream that asks for nothing). At most |max_initial| slots in all
 *     and |max_initial_per_peer| per peer: a peer whose streams never ask
 *     cannot hold every slot. Streams waiting for a slot are served round
 *     robin across peers (in arrival order within a peer).
 *  4. A stream that waited |wait_timeout| (for a token or a slot) is
 *     refused with UNAVAILABLE, which gRPC clients retry: a storm gets a
 *     clean answer in bounded time rather than a queue of minutes.
 *  5. New-stream rate per peer (issue 23): a token bucket per peer key
 *     (|peer_stream_rate| per second, holding |peer_stream_burst|), on top
 *     of rule 2; a stream needs a token of both. One finding no token of
 *     its peer's waits for one (as Istio's source waits for its limiter's
 *     token), in arrival order, while fewer than a quarter of
 *     |peer_stream_burst| of its peer's streams wait; beyond,
 *     RESOURCE_EXHAUSTED (MCP_ADMIT_PEER_RATE). So a client that redials
 *     at once after every failure is paced at the peer rate, and one that
 *     opens streams in a flood is refused at once. A peer's bucket
 *     outlives its streams until it is full again (that is what stops a
 *     redialing client); at most |max_rate_peers| such peers without a
 *     stream are remembered, the oldest forgotten first, so many
 *     addresses cannot grow memory without bound (a forgotten peer starts
 *     again with a full bucket; rule 2 still bounds the whole).
 *
 * The peer key is what the transport says identifies a client (both
 * transports use the address without the port); compared as bytes.
 */
typedef struct mcp_admit mcp_admit;
/* One admitted stream, running or waiting. Owned by the mcp_admit. */
typedef struct mcp_admit_ticket mcp_admit_ticket;

/* 0 means the default; the largest value of the type (SIZE_MAX,
 * UINT32_MAX, MCP_TSTAMP_MAX) means no limit. */
typedef struct mcp_admit_options {
  size_t max_streams;          /* default 100000 */
  size_t max_streams_per_peer; /* default max_streams / 4 */
  uint32_t stream_rate;        /* per second; default 1000 */
  uint32_t stream_burst;       /* default 2000 */
  size_t max_initial;          /* slots; default 64 */
  size_t max_initial_per_peer; /* default max_initial / 4 (at least 1) */
  mcp_tstamp initial_timeout;  /* longest a slot is held; default 10 s */
  mcp_tstamp wait_timeout;     /* longest a stream waits; default 5 s */
  /* --- MCP_ADMIT_OPTIONS_V2 (issue 23): rule 5 --- */
  uint32_t peer_stream_rate;   /* per second and peer; default 100 */
  uint32_t peer_stream_burst;  /* default 100 */
  size_t max_rate_peers;       /* peers without a stream remembered for
                                  their bucket; default 4096 */
} mcp_admit_options;

#define MCP_ADMIT_DEFAULT_MAX_STREAMS 100000
#define MCP_ADMIT_DEFAULT_STREAM_RATE 1000
#define MCP_ADMIT_DEFAULT_STREAM_BURST 2000
#define MCP_ADMIT_DEFAULT_MAX_INITIAL 64
#define MCP_ADMIT_DEFAULT_INITIAL_TIMEOUT (10 * MCP_SECONDS)
#define MCP_ADMIT_DEFAULT_WAIT_TIMEOUT (5 * MCP_SECONDS)
#define MCP_ADMIT_DEFAULT_PEER_STREAM_RATE 100
#define MCP_ADMIT_DEFAULT_PEER_STREAM_BURST 100
#define MCP_ADMIT_DEFAULT_MAX_RATE_PEERS 4096

/* Fills |opts| with the defaults (the derived per-peer ones included).
 * V1 is the struct up to |wait_timeout|; a V1 caller gets rule 5 at its
 * defaults. */
#define MCP_ADMIT_OPTIONS_V1 1
#define MCP_ADMIT_OPTIONS_V2 2
#define MCP_ADMIT_OPTIONS_VERSION MCP_ADMIT_OPTIONS_V2
MCP_EXTERN void mcp_admit_options_default_versioned(int version,
                                                    mcp_admit_options *opts);
#define mcp_admit_options_default(OPTS)                                      \
  mcp_admit_options_default_versioned(MCP_ADMIT_OPTIONS_VERSION, (OPTS))

/* Replaces the zeros of |opts| with the defaults, in place. */
MCP_EXTERN void mcp_admit_options_normalize_versioned(int version,
                                                      mcp_admit_options *opts);
#define mcp_admit_options_normalize(OPTS)                                    \
  mcp_admit_options_normalize_versioned(MCP_ADMIT_OPTIONS_VERSION, (OPTS))

typedef enum mcp_admit_verdict {
  MCP_ADMIT_RUN = 0,   /* the stream runs now */
  MCP_ADMIT_WAIT = 1,  /* it waits: a later mcp_admit_next() decides */
  MCP_ADMIT_REFUSE = 2 /* end it with |status| and |details| */
} mcp_admit_verdict;

typedef enum mcp_admit_reason {
  MCP_ADMIT_OK = 0,
  MCP_ADMIT_MAX_STREAMS,  /* RESOURCE_EXHAUSTED "too many streams" */
  MCP_ADMIT_PEER_STREAMS, /* RESOURCE_EXHAUSTED, this peer's share */
  MCP_ADMIT_RATE,         /* UNAVAILABLE, the rate's queue is full */
  MCP_ADMIT_WAIT_TIMEOUT, /* UNAVAILABLE, waited |wait_timeout| */
  MCP_ADMIT_PEER_RATE     /* RESOURCE_EXHAUSTED, the peer's rate (rule 5) */
} mcp_admit_reason;

typedef struct mcp_admit_result {
  mcp_admit_verdict verdict;
  mcp_admit_reason reason; /* REFUSE: why */
  void *user;              /* the stream's |user| from mcp_admit_stream() */
  int status;              /* REFUSE: MCP_CODE_RESOURCE_EXHAUSTED or
                              MCP_CODE_UNAVAILABLE */
  const char *details;     /* REFUSE: valid while the mcp_admit lives
                              ("too many new streams from this peer: more
                              than 100 per second after a burst of 100;
                              retry with backoff") */
} mcp_admit_result;

typedef struct mcp_admit_stats {
  size_t streams;         /* running or waiting */
  size_t waiting_rate;    /* waiting for a token */
  size_t waiting_initial; /* waiting for a slot */
  size_t initial;         /* holding a slot */
  size_t initial_peak;    /* the most |initial| has been */
  size_t peers;           /* peers with a stream */
  uint64_t initial_sent;     /* slots freed by mcp_admit_initial_done() */
  uint64_t initial_timeouts; /* slots freed by |initial_timeout| */
  uint64_t refused_max_streams, refused_peer_streams, refused_rate,
      refused_wait_timeout;
  /* --- MCP_ADMIT_STATS_V2 (issue 23): rule 5 --- */
  uint64_t peer_rate_delayed;  /* streams that waited for their peer's token */
  uint64_t refused_peer_rate;  /* refused: MCP_ADMIT_PEER_RATE */
  size_t rate_peers;           /* peers without a stream still remembered */
  uint64_t rate_peers_forgotten; /* dropped past |max_rate_peers| */
} mcp_admit_stats;

/* Errors: NOMEM; INVALID_ARGUMENT (NULL). |opts| NULL: the defaults; it is
 * copied and normalized. On failure |*padmit| is untouched. */
MCP_EXTERN int mcp_admit_new_versioned(mcp_admit **padmit, int version,
                                       const mcp_admit_options *opts,
                                       const mcp_mem *mem, mcp_tstamp ts);
#define mcp_admit_new(PADMIT, OPTS, MEM, TS)                                 \
  mcp_admit_new_versioned((PADMIT), MCP_ADMIT_OPTIONS_VERSION, (OPTS), (MEM), \
                          (TS))

/* Frees the object and every ticket (the transport drops its pointers).
 * NULL is a no-op. */
MCP_EXTERN void mcp_admit_del(mcp_admit *admit);

/* The options in force (normalized). */
MCP_EXTERN const mcp_admit_options *mcp_admit_get_options(const mcp_admit *admit);

/*
 * A new stream from |peer| (copied), with |initial| 1 when it needs an
 * initial slot. Fills |*res| (res->user = |user|): RUN or WAIT, with a
 * ticket in |*pticket| that the transport gives back to
 * mcp_admit_release() when the stream ends; or REFUSE, with no ticket
 * (*pticket = NULL). Errors: NOMEM (nothing changed; refuse the stream
 * with RESOURCE_EXHAUSTED).
 */
MCP_EXTERN int mcp_admit_stream(mcp_admit *admit, const char *peer, int initial,
                                void *user, mcp_tstamp ts,
                                mcp_admit_ticket **pticket,
                                mcp_admit_result *res);

/*
 * The next decision about a waiting stream, as time |ts| allows: 1 and
 * |*res| filled (RUN: the ticket stays; REFUSE: the ticket is freed, do
 * not release it), or 0 when there is none now. Call it until it returns
 * 0 after mcp_admit_stream() answered WAIT, after mcp_admit_initial_done()
 * and mcp_admit_release(), and at mcp_admit_get_expiry().
 */
MCP_EXTERN int mcp_admit_next(mcp_admit *admit, mcp_tstamp ts,
                              mcp_admit_result *res);

/* When mcp_admit_next() must be called again at the latest (a token, a
 * slot timeout, a waiting deadline); MCP_TSTAMP_MAX for never. */
MCP_EXTERN mcp_tstamp mcp_admit_get_expiry(const mcp_admit *admit);

/* 1 while |ticket|'s stream holds an initial slot. */
MCP_EXTERN int mcp_admit_ticket_initial(const mcp_admit_ticket *ticket);

/* The stream's initial push was handed to the transport: its slot, if it
 * holds one, goes back (to a waiting stream, at mcp_admit_next()). */
MCP_EXTERN void mcp_admit_initial_done(mcp_admit *admit,
                                       mcp_admit_ticket *ticket);

/* The stream ended (running or waiting): frees |ticket| and what it held.
 * NULL is a no-op. */
MCP_EXTERN void mcp_admit_release(mcp_admit *admit, mcp_admit_ticket *ticket);

#define MCP_ADMIT_STATS_V1 1
#define MCP_ADMIT_STATS_V2 2
#define MCP_ADMIT_STATS_VERSION MCP_ADMIT_STATS_V2
MCP_EXTERN void mcp_admit_get_stats_versioned(const mcp_admit *admit,
                                              int version,
                                              mcp_admit_stats *st);
#define mcp_admit_get_stats(ADMIT, ST)                                       \
  mcp_admit_get_stats_versioned((ADMIT), MCP_ADMIT_STATS_VERSION, (ST))

/* The peer key of a gRPC-style peer name, into |buf| (NUL-terminated,
 * truncated to |len|): "ipv4:10.0.0.1:40000" and "ipv6:[::1]:40000" lose
 * their port, so one client's connections share one share; any other
 * name ("unix:/p") is kept whole. */
MCP_EXTERN void mcp_admit_peer_key(const char *peer, char *buf, size_t len);

/* 1 when |s| asked for at least one collection and every one its store
 * knows has had its first push pulled by mcp_source_session_next(): the
 * signal for mcp_admit_initial_done(). */
MCP_EXTERN int mcp_admit_initial_sent(const mcp_source_session *s,
                                      mcp_tstamp ts);

#ifdef __cplusplus
}
#endif

#endif /* MCP_MCP_H */
