/*
 * libmcp engine: the protocol-agnostic, sans-I/O core every protocol
 * module is built on (MCP in mcp/mcp_v1alpha1.h, Conduit's Destination in
 * mcp/destination.h, swarmkit's Dispatcher in mcp/dispatcher.h, MCP over
 * xDS in mcp/xds.h, and any third-party one). Library: libmcp-engine
 * (or libmcp, which holds every module).
 *
 * The engine reads no clock, opens no socket or file, starts no thread and
 * keeps no global state. Time comes in as an argument (mcp_tstamp,
 * nanoseconds on any monotonic clock the caller likes); allocation and
 * randomness go through hooks given at creation.
 *
 * Objects:
 *   mcp_store        collections of resources, each resource version
 *                    encoded once into shared bytes; a generation
 *                    counter and change log per collection.
 *   mcp_msg          one encoded message to send, as fragments.
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
 *   mcp_admit        admission of new streams (rates, shares, initial
 *                    slots), for the listening transports.
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
 *
 * A protocol module is a file of its own over these (docs/architecture.md,
 * "Adding a protocol"): it decodes its requests, chooses the collections
 * it watches, frames a full state and a difference from mcp_watch_take(),
 * and fills an mcp_stream_ops. Nothing in the engine or the transports
 * changes for it.
 */
#ifndef MCP_ENGINE_H
#define MCP_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* The bytes of |n| fragments (0.10.0). */
MCP_EXTERN size_t mcp_iov_len(const mcp_iovec *iov, size_t n);
/* Copies |n| fragments, in order, into |dest| (room for mcp_iov_len()
 * bytes; NULL when that is 0). An empty fragment's base may be NULL. */
MCP_EXTERN void mcp_iov_flatten(const mcp_iovec *iov, size_t n, uint8_t *dest);

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

/* Writes the version string a store generation |gen| of epoch |epoch| is
 * sent as, "<epoch, 16 hex digits>-<gen>" (what mcp_store_version() and
 * generated resource versions say), NUL-terminated, truncated to |n|
 * bytes (40 always suffice). */
MCP_EXTERN void mcp_format_version(char *buf, size_t n, uint64_t epoch,
                                   uint64_t gen);

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

/* ------------------------------------------------------------------ */
/* Store: what protocol modules need beyond the above                 */
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

/*
 * A snapshot: message bytes built once and shared by many messages (the
 * same full state sent to every stream alike), as fragments: own bytes and
 * stored bodies by reference. Immutable and atomically reference-counted,
 * like the stored bytes it points into: it may outlive the store and be
 * dropped on any thread.
 *
 * mcp_msg_builder_freeze(): makes a snapshot of what |b| holds instead of a
 * message (one reference, the caller's) and resets |b|. Errors: NOMEM (any
 * append since the last finish failed, or this allocation; nothing is
 * produced), INVALID_ARGUMENT (|b| holds a snapshot: snapshots do not
 * nest). |b| is reset either way.
 * mcp_msg_builder_snap(): appends |sn|'s bytes by reference (the message
 * takes a reference; at most one snapshot per message).
 * mcp_snap_len(): its bytes. mcp_snap_unref(): drops one reference (NULL
 * is a no-op); the last frees it.
 */
typedef struct mcp_snap mcp_snap;
MCP_EXTERN int mcp_msg_builder_freeze(mcp_msg_builder *b, mcp_snap **psn);
MCP_EXTERN void mcp_msg_builder_snap(mcp_msg_builder *b, mcp_snap *sn);
MCP_EXTERN size_t mcp_snap_len(const mcp_snap *sn);
MCP_EXTERN void mcp_snap_unref(mcp_snap *sn);
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
  /* Streams of a service with MCP_DEF_INITIAL_SYNC: 1 once the
   * session's initial state has been handed to the transport (it then
   * gives its admission slot back), 0 while it is still to go. Asked
   * after each pump. May be NULL: no initial state to wait for. */
  int (*initial_sent)(const void *sess, mcp_tstamp ts);
  /* recv() of one message in |niov| fragments, its bytes in order (as a
   * transport read them), read during the call only; recv() still takes
   * a message of one fragment. May be NULL: the driver then joins the
   * fragments and calls recv(). */
  int (*recv_iov)(void *sess, const mcp_iovec *iov, size_t niov,
                  mcp_tstamp ts);
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

/* ops->initial_sent() of the stream's session; 1 without one. Read-only:
 * what a listening transport asks, after a pump, of a stream that holds
 * an initial-sync admission slot (mcp_admit_initial_done()). */
MCP_EXTERN int mcp_stream_initial_sent(const mcp_stream *st, mcp_tstamp ts);

/* A message arrived. Errors are kept: the next pump ends the stream. */
MCP_EXTERN void mcp_stream_recv(mcp_stream *st, const uint8_t *in, size_t len,
                                mcp_tstamp ts);
/* mcp_stream_recv() of a message in |niov| fragments (read during the
 * call only): given to ops->recv_iov() as they are, or joined for recv()
 * (a NOMEM then ends the stream). */
MCP_EXTERN void mcp_stream_recv_iov(mcp_stream *st, const mcp_iovec *iov,
                                    size_t niov, mcp_tstamp ts);
/* 1 when the stream's session reads fragments itself (ops->recv_iov()):
 * a transport whose message arrives in pieces need not join them. */
MCP_EXTERN int mcp_stream_takes_iov(const mcp_stream *st);
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

/* The application is done sending. Once next() has nothing more to send
 * now (and no send is in flight), the pump says HALF_CLOSE (once). Client
 * side: the peer's status then ends the call. Server side, where a
 * half-close is the status: the transport ends the call with OK (a
 * listening sink's mcp_grpc_sink_finish()/mcp_h2c_sink_finish()). */
MCP_EXTERN void mcp_stream_finish(mcp_stream *st);

/* Messages received and sent (pumped as SEND) so far. */
MCP_EXTERN uint64_t mcp_stream_received(const mcp_stream *st);
MCP_EXTERN uint64_t mcp_stream_sent(const mcp_stream *st);

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
  unsigned flags; /* MCP_DEF_* below (0.9.0) */
} mcp_service_def;

enum {
  /* Each call first pushes a whole state that costs the server (MCP's
   * sources): a listening transport with admission admits it against the
   * initial-sync slots (mcp_admit_options, rule 3) and gives its slot back
   * once mcp_stream_initial_sent() says so. */
  MCP_DEF_INITIAL_SYNC = 1u << 0
};

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

/*
 * How every dialing transport ends a call whose method(slot) is NULL or
 * does not start with '/': at once, nothing sent, with this status and
 * details. UNIMPLEMENTED, what a gRPC server answers a method it does not
 * know (ours and grpc-go's "malformed method name"), so a caller sees the
 * same code whether the client or the server refused it
 * (docs/protocol.md, "Services and clients").
 */
#define MCP_CLIENT_BAD_METHOD_CODE MCP_CODE_UNIMPLEMENTED
#define MCP_CLIENT_BAD_METHOD_DETAILS                                         \
  "invalid method: a gRPC method is \"/package.Service/Method\""

/* ------------------------------------------------------------------ */
/* For protocol modules: memory, formatting, buffers, wire, maps        */
/* ------------------------------------------------------------------ */

/*
 * The small pieces every module is written with, exported so that a module
 * (ours or a vendor's, in its own library) uses only this header. The
 * protobuf-c allocator bridge is in mcp/pballoc.h (it needs protobuf-c's
 * header).
 */

#define MCP_UNUSED(x) ((void)(x))

/* Fills |dst| from |src|, or with the C library when |src| is NULL. */
MCP_EXTERN void mcp_mem_init(mcp_mem *dst, const mcp_mem *src);
/* The hook's functions; NULL on failure. mcp_mem_free(m, NULL) is a no-op.
 * The strdup pair copies into |m|'s memory (strndup: at most |n| bytes,
 * NUL-terminated). */
MCP_EXTERN void *mcp_mem_malloc(const mcp_mem *m, size_t n);
MCP_EXTERN void *mcp_mem_calloc(const mcp_mem *m, size_t nmemb, size_t size);
MCP_EXTERN void *mcp_mem_realloc(const mcp_mem *m, void *p, size_t n);
MCP_EXTERN void mcp_mem_free(const mcp_mem *m, void *p);
MCP_EXTERN char *mcp_mem_strdup(const mcp_mem *m, const char *s);
MCP_EXTERN char *mcp_mem_strndup(const mcp_mem *m, const char *s, size_t n);

/* A small snprintf for messages (the engine includes no stdio): %s, %zu,
 * %d and %%. Always NUL-terminates; truncates silently. */
MCP_EXTERN void mcp_fmt(char *buf, size_t n, const char *fmt, ...);

/*
 * A growable byte buffer, the one every library of the project uses.
 * Zero-initialise it, or set |mem| (the allocator for |p|; NULL:
 * mcp_mem_default(), the C library) while it is empty; the |mem| it points
 * to must outlive the buffer. |p| holds |len| bytes of |cap|; |p| is owned
 * by the buffer (realloc'd by it, freed by mcp_buf_free()). Growth
 * doubles, starting at 64 bytes.
 */
typedef struct mcp_buf {
  uint8_t *p;
  size_t len, cap;
  const mcp_mem *mem;
} mcp_buf;

/* Room for |extra| more bytes (cap - len >= extra). 0, or MCP_ERR_NOMEM
 * (the buffer is unchanged). */
MCP_EXTERN int mcp_buf_reserve(mcp_buf *b, size_t extra);
/* Appends |n| bytes from |p| (|p| may be NULL when |n| is 0). 0, or
 * MCP_ERR_NOMEM (the buffer is unchanged). */
MCP_EXTERN int mcp_buf_append(mcp_buf *b, const void *p, size_t n);
/* Frees |p| and empties the buffer (len = cap = 0; |mem| is kept, so the
 * buffer can be used again). */
MCP_EXTERN void mcp_buf_free(mcp_buf *b);

/* Protobuf wire types. */
enum { MCP_WT_VARINT = 0, MCP_WT_I64 = 1, MCP_WT_LEN = 2, MCP_WT_I32 = 5 };

/* The bytes the varint of |v| takes (1 to 10). */
static inline size_t mcp_wire_varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}
/* Writes the varint of |v| at |p| (room for mcp_wire_varint_len(v) bytes);
 * returns the byte after it. */
static inline uint8_t *mcp_wire_put_varint(uint8_t *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}
/* Size of a length-delimited field with a one-byte tag (fields 1-15). */
static inline size_t mcp_wire_len_field_size(size_t len) {
  return 1 + mcp_wire_varint_len(len) + len;
}
/* Writes that field (|field| 1 to 15); returns the byte after it. */
static inline uint8_t *mcp_wire_put_len_field(uint8_t *p, uint32_t field,
                                              const void *data, size_t len) {
  *p++ = (uint8_t)(field << 3 | MCP_WT_LEN);
  p = mcp_wire_put_varint(p, len);
  if (len) {
    memcpy(p, data, len);
  }
  return p + len;
}

/* The longest tag or length mcp_wire_next() takes: a uint32's varint. */
#define MCP_WIRE_VARINT32_MAX 5

/* A read cursor over a protobuf message: the bytes [p, end). */
typedef struct mcp_wire {
  const uint8_t *p, *end;
} mcp_wire;

/*
 * Reads the next field: its number, wire type and, for LEN fields, the
 * payload in |*data|/|*len|; for VARINT the value in |*v|; other types are
 * skipped. Returns 1 for a field, 0 at the end, MCP_ERR_MALFORMED on bad
 * bytes (a varint as mcp_wire_varint() refuses, a tag or a length longer
 * than MCP_WIRE_VARINT32_MAX bytes, a length past the end, groups, field
 * number 0). Loops read with mcp_wire_field_next() below,
 * which is this with its common case inline.
 */
MCP_EXTERN int mcp_wire_next(mcp_wire *w, uint32_t *field, int *wt,
                             uint64_t *v, const uint8_t **data, size_t *len);

/*
 * One field as mcp_wire_field_next() reads it. |data| points into the
 * bytes |w| reads (the caller's buffer: nothing is copied), valid while
 * they are. The struct is the caller's and no exported function takes it
 * (the reader is inline over mcp_wire_next()); fields are only ever added
 * at its end.
 */
typedef struct mcp_wire_field {
  uint32_t num;        /* the field number, 1 to 2^29 - 1 */
  int wt;              /* its wire type, MCP_WT_* */
  uint64_t v;          /* VARINT: the value; other types: 0 */
  const uint8_t *data; /* LEN: the payload; other types: NULL */
  size_t len;          /* LEN: its length; other types: 0 */
} mcp_wire_field;

/*
 * Reads the next field of |w| into |*f| and moves |w| past it: the
 * reader every module loops with,
 *   mcp_wire_field f;
 *   while ((rv = mcp_wire_field_next(&w, &f)) == 1) { switch (f.num) ... }
 * Returns 1 for a field, 0 at the end (|*f| untouched), or
 * MCP_ERR_MALFORMED for bad bytes: a truncated tag, varint or I64/I32
 * value, a varint longer than 10 bytes or with bits beyond 64, a tag or a
 * length longer than MCP_WIRE_VARINT32_MAX bytes (protobuf-c refuses them;
 * no encoder writes them), a length past the end, a group (wire types 3
 * and 4) or 6 and 7, field number 0 or past 2^29 - 1. After an error |*f|
 * and |w| say nothing useful: stop.
 * I64 and I32 fields are skipped over (only |num| and |wt| are set).
 * The common case (a one-byte tag, fields 1 to 15, of a varint or a LEN
 * whose length takes at most five bytes) is read here, inline: a push
 * holds thousands of fields; every other case goes to mcp_wire_next(),
 * so both answer alike for the same bytes.
 */
static inline int mcp_wire_field_next(mcp_wire *w, mcp_wire_field *f) {
  const uint8_t *p = w->p;
  if (p == w->end) {
    return 0;
  }
  uint8_t tag = p[0];
  if (tag >= 8 && tag < 0x80 &&
      ((tag & 7) == MCP_WT_VARINT || (tag & 7) == MCP_WT_LEN)) {
    const uint8_t *q = p + 1;
    uint64_t x = 0;
    for (unsigned sh = 0; sh < 63 && q != w->end; sh += 7) {
      uint8_t b = *q++;
      x |= (uint64_t)(b & 0x7f) << sh;
      if (b & 0x80) {
        continue;
      }
      if ((tag & 7) == MCP_WT_VARINT) {
        f->num = (uint32_t)(tag >> 3);
        f->wt = MCP_WT_VARINT;
        f->v = x;
        f->data = NULL;
        f->len = 0;
        w->p = q;
        return 1;
      }
      if (x > (uint64_t)(w->end - q) || sh >= 7 * MCP_WIRE_VARINT32_MAX) {
        break; /* past the end, or too long: mcp_wire_next() says so */
      }
      f->num = (uint32_t)(tag >> 3);
      f->wt = MCP_WT_LEN;
      f->v = 0;
      f->data = q;
      f->len = (size_t)x;
      w->p = q + x;
      return 1;
    }
  }
  return mcp_wire_next(w, &f->num, &f->wt, &f->v, &f->data, &f->len);
}

/* Versioned structs (the conventions above), for a module's own: the bytes
 * of version |version| of a struct whose versions' sizes are
 * |sizes[1..n)| (each a prefix of the next). A version newer than the
 * module knows gets the newest prefix it knows; 0 or less gets 0. */
static inline size_t mcp_vstruct_size(int version, const size_t *sizes,
                                      size_t n) {
  if (version < 1) {
    return 0;
  }
  return (size_t)version < n ? sizes[version] : sizes[n - 1];
}
/* 1 when |version| is one the module knows (an input struct of another
 * version is refused: its fields cannot be read safely). */
static inline int mcp_vstruct_known(int version, size_t n) {
  return version >= 1 && (size_t)version < n;
}
/* The size table of a struct with one version, and its |n|. */
#define MCP_VSTRUCT_SIZES(T) ((const size_t[]){0, sizeof(T)})
#define MCP_VSTRUCT_N 2

/* |v| or, when 0, |def|: limits of 0 take their defaults. */
static inline size_t mcp_limit_or(size_t v, size_t def) { return v ? v : def; }

/*
 * A string-keyed hash map (open addressing, linear probing,
 * backward-shift deletion). Keys are borrowed from the values' owners.
 * Zero it to start; mcp_map_free() frees the table (not the values).
 */
typedef struct mcp_map_slot {
  const char *key; /* NULL: empty */
  uint64_t hash;
  void *val;
} mcp_map_slot;

typedef struct mcp_map {
  mcp_map_slot *slots;
  size_t cap; /* a power of two, or 0 */
  size_t n;
} mcp_map;

/* The map's hash of |s[0..n)|. */
MCP_EXTERN uint64_t mcp_hash(const char *s, size_t n);
/* The value of |key| (NUL-terminated, or its first |n| bytes), or NULL. */
MCP_EXTERN void *mcp_map_get(const mcp_map *m, const char *key);
MCP_EXTERN void *mcp_map_get_n(const mcp_map *m, const char *key, size_t n);
/* Makes room for |extra| more keys so that the next |extra| puts of new
 * keys cannot fail. 0 or NOMEM. */
MCP_EXTERN int mcp_map_reserve(mcp_map *m, const mcp_mem *mem, size_t extra);
/* Inserts or replaces; returns the previous value (or NULL). Fails only
 * when no room was reserved and growing fails: then |*err| = NOMEM. */
MCP_EXTERN void *mcp_map_put(mcp_map *m, const mcp_mem *mem, const char *key,
                             void *val, int *err);
/* Removes and returns the value (or NULL). */
MCP_EXTERN void *mcp_map_del(mcp_map *m, const char *key);
MCP_EXTERN void mcp_map_free(mcp_map *m, const mcp_mem *mem);
/* Iteration: for (size_t i = 0; mcp_map_iter(m, &i, &val);) */
MCP_EXTERN int mcp_map_iter(const mcp_map *m, size_t *i, void **val);

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

/* The value of a hexadecimal digit (either case), or -1. */
static inline int mcp_hex_value(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

/*
 * Decodes base64 in either alphabet (RFC 4648's standard "+/" or URL-safe
 * "-_", mixed too) into |out|, which holds at least len * 3 / 4 bytes.
 * Returns the bytes written, or -1 for a character outside both alphabets
 * or a length no encoding has. |strict| (protobuf JSON's bytes) also
 * refuses padding the last group does not need and bits left over that
 * are not zero; without it (HTTP2-Settings, base64url) any trailing '='
 * is dropped and leftover bits are ignored.
 */
MCP_EXTERN long mcp_base64_decode(const char *in, size_t len, uint8_t *out,
                                  int strict);

/* 1 when |s| is a string of valid UTF-8 (mcp_utf8_valid() without NUL);
 * 0 for NULL. */
static inline int mcp_str_valid(const char *s) {
  return s && mcp_utf8_valid((const uint8_t *)s, strlen(s), 0);
}
/* 1 when every key and value of |kv[0..n)| is such a string (|kv| may be
 * NULL when |n| is 0). */
MCP_EXTERN int mcp_kvs_valid(const mcp_kv *kv, size_t n);

/* ------------------------------------------------------------------ */
/* For protocol modules: a store's collections, read directly          */
/* ------------------------------------------------------------------ */

/*
 * What an mcp_watch is made of, for a module that keeps many positions
 * in little memory (MCP's source keeps one 40-byte subscription per
 * collection of a stream, where a watch is an object of its own): the
 * collections, their generations and change lists, the one pacing rule
 * and the shared full state. mcp_watch is written over these, so a module
 * that uses them follows the same rules. Everything here is read-only
 * and on the store's thread, except the scratch builder and the shared
 * blobs.
 */
typedef struct mcp_coll mcp_coll;

/*
 * The first fields of a collection and of a store, public only so that
 * the readers below are inline (a push reads them per subscription, and a
 * call each costs the push measurably). Read them through the functions;
 * the engine alone writes them. They only ever gain fields at their end.
 */
typedef struct mcp_coll_head_ {
  char *name;
  size_t index;
  uint64_t gen, compact_gen;
  size_t nlive;
  int absent;
} mcp_coll_head_;
typedef struct mcp_store_head_ {
  uint64_t epoch;
  mcp_coll **colls;
  size_t ncolls;
} mcp_store_head_;

/* The collection |name| of |s|, or NULL when it never existed. A store
 * frees its collections only with itself: the pointer stays valid, and
 * names the same collection (removed and back again alike), while |s|
 * lives. */
MCP_EXTERN const mcp_coll *mcp_store_coll(const mcp_store *s,
                                          const char *name);
/* How many collections |s| has had (it only grows) and the one at
 * |index| (below that count): a module binds subscriptions to
 * collections that appear late when the count moves. */
static inline size_t mcp_store_coll_count(const mcp_store *s) {
  return ((const mcp_store_head_ *)(const void *)s)->ncolls;
}
static inline const mcp_coll *mcp_store_coll_at(const mcp_store *s,
                                                size_t index) {
  return ((const mcp_store_head_ *)(const void *)s)->colls[index];
}

#define MCP_COLL_HEAD_(c) ((const mcp_coll_head_ *)(const void *)(c))
static inline const char *mcp_coll_name(const mcp_coll *c) {
  return MCP_COLL_HEAD_(c)->name;
}
/* Its place in mcp_store_coll_at(). */
static inline size_t mcp_coll_index(const mcp_coll *c) {
  return MCP_COLL_HEAD_(c)->index;
}
/* 1 unless removed (mcp_store_remove_collection) and not brought back. */
static inline int mcp_coll_exists(const mcp_coll *c) {
  return !MCP_COLL_HEAD_(c)->absent;
}
/* Its generation: the store's generation at its last change. */
static inline uint64_t mcp_coll_generation(const mcp_coll *c) {
  return MCP_COLL_HEAD_(c)->gen;
}
/* The oldest generation its change list still reaches: a subscriber that
 * holds an older one must be given the whole state. */
static inline uint64_t mcp_coll_compacted(const mcp_coll *c) {
  return MCP_COLL_HEAD_(c)->compact_gen;
}
/* Live resources. */
static inline size_t mcp_coll_size(const mcp_coll *c) {
  return MCP_COLL_HEAD_(c)->nlive;
}

/*
 * Items, as mcp_watch_take() reports them. |type_urls|: where each live
 * item's type URL is copied to make it a string (the buffer is reused
 * from item to item); NULL leaves mcp_item.type_url NULL, for a caller
 * that frames stored bytes only.
 * mcp_coll_foreach(): each live item, oldest change first.
 * mcp_coll_changes(): each item changed after generation |since| (which
 * must be at least mcp_coll_compacted()), oldest change first, live or
 * removed; a removed item created after |since| (the subscriber never
 * had it) only with MCP_COLL_UNSEEN.
 * Both stop at the first negative return of |fn| (mcp_watch_fn) and
 * return it; else the number of items (or NOMEM when a type URL could not
 * be copied).
 * mcp_coll_get(): the live item |name|; 1 and |*item| filled, or 0.
 */
#define MCP_COLL_UNSEEN 1u
MCP_EXTERN int mcp_coll_foreach(const mcp_coll *c, mcp_buf *type_urls,
                                mcp_watch_fn fn, void *user_data);
MCP_EXTERN int mcp_coll_changes(const mcp_coll *c, uint64_t since,
                                unsigned flags, mcp_buf *type_urls,
                                mcp_watch_fn fn, void *user_data);
MCP_EXTERN int mcp_coll_get(const mcp_coll *c, const char *name,
                            mcp_buf *type_url, mcp_item *item);

/* The whole state of |c| now, each live resource as the stored
 * [field 3][length][istio.mcp.v1alpha1.Resource] (MCP's Resources), built
 * once per generation and shared: borrowed from |c| (append it with
 * mcp_msg_builder_snap(), which takes its own reference). NULL: NOMEM. */
MCP_EXTERN mcp_snap *mcp_coll_snapshot(const mcp_store *s, const mcp_coll *c);

/*
 * The pacing rule of every subscriber (docs/protocol.md "Debounce"; what
 * mcp_watch_ready() and mcp_watch_get_expiry() apply): |sent| is when the
 * subscriber last sent (took) |c|, |seen| when it first saw the change
 * that waits (|ts| when not noted yet).
 * mcp_pace_ready(): the change may go at |ts|.
 * mcp_pace_due(): the earliest time it may go (|noted|: |seen| was noted,
 * so max_delay counts); 0 when at once.
 */
MCP_EXTERN int mcp_pace_ready(const mcp_coll *c, mcp_tstamp debounce,
                              mcp_tstamp max_delay, mcp_tstamp sent,
                              mcp_tstamp seen, mcp_tstamp ts);
MCP_EXTERN mcp_tstamp mcp_pace_due(const mcp_coll *c, mcp_tstamp debounce,
                                   mcp_tstamp max_delay, mcp_tstamp sent,
                                   int noted, mcp_tstamp seen);

/*
 * Immutable blobs shared by the objects that use a store (a module's
 * options, kept once for a thousand streams made alike): returns the one
 * copy equal to |blob[0..len)| (8-byte aligned, refcounted), or NULL for
 * NOMEM. Every share is paired with an unshare before mcp_store_del().
 */
MCP_EXTERN const void *mcp_store_share(mcp_store *s, const void *blob,
                                       size_t len);
MCP_EXTERN void mcp_store_unshare(mcp_store *s, const void *p);

/* A message builder that |s| lends to the modules pushing its
 * collections, so that a push allocates no builder of its own: one
 * message at a time, on the store's thread, ended by
 * mcp_msg_builder_finish() before anything else uses it. Owned by |s|
 * (never NULL); messages made with it use |s|'s allocator. */
MCP_EXTERN mcp_msg_builder *mcp_store_builder(mcp_store *s);

/* Appends |n| bytes of the message's own and returns where to write them
 * (valid until the next append), or NULL after a failure (the builder
 * then fails at finish): for fields written in place. */
MCP_EXTERN uint8_t *mcp_msg_builder_reserve(mcp_msg_builder *b, size_t n);
/* Makes the message being built fail at finish with NOMEM, as a failed
 * append does: for a module whose own part of it could not be made. */
MCP_EXTERN void mcp_msg_builder_fail(mcp_msg_builder *b);

/* Appends the stored Resource of the live |item| as field |field| of the
 * message ([key][length][Resource]), sharing the stored bytes (field 3
 * shares the stored framing too: no own bytes). */
MCP_EXTERN void mcp_msg_builder_resource(mcp_msg_builder *b, uint32_t field,
                                         const mcp_item *item);

/*
 * The fast path of a push that frames stored Resources as they are (MCP's
 * three services): appends what mcp_coll_changes() (with |flags|) or, when
 * |all|, mcp_coll_foreach() would report, each live item as field
 * |res_field| (mcp_msg_builder_resource()) and each removed one's name as
 * the string field |removed_field| (at most 15), and adds their numbers to
 * |*nres| and |*nrem|. Same result as the callbacks, without one call and
 * one item per resource.
 */
MCP_EXTERN void mcp_msg_builder_coll(mcp_msg_builder *b, const mcp_coll *c,
                                     int all, uint64_t since, unsigned flags,
                                     uint32_t res_field,
                                     uint32_t removed_field, size_t *nres,
                                     size_t *nrem);

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
  /* Listening: holds an initial-sync admission slot
   * (MCP_DEF_INITIAL_SYNC). */
  int initial;
  /* The protocol's engine stream (read-only: mcp_stream_get_ops(),
   * counters; a protocol's own accessors, such as MCP's
   * mcp_stream_source_session()), NULL before the protocol opened it,
   * for a refused call and once the stream is ending. */
  const mcp_stream *stream;
  /* The protocol's name (mcp_stream_ops.name: "mcp" for MCP's streams,
   * "" when unknown), also when closed, so that metrics count per API;
   * NULL for a call no protocol took (an unknown method). */
  const char *api;
  /* 1 while a message taken from the session is not yet handed to the
   * transport in full (with mcp_sink_session_want_write(): an answer is on
   * its way). */
  int sending;
  /* The gRPC method (":path") of the call; "" when the transport does not
   * tell. */
  const char *method;
} mcp_stream_info;

/*
 * What a transport's stream callback is told (mcp_grpc_stream_event and
 * mcp_h2c_stream_event are this enum, their MCP_GRPC_STREAM_* and
 * MCP_H2C_STREAM_* names these values, so one callback serves every
 * transport).
 */
typedef enum mcp_stream_event {
  /* A stream started: accepted (authorized and admitted: it has a
   * session and is read from), or (dialing) its call was started; a
   * dialed call that cannot connect then closes with UNAVAILABLE, one
   * whose server is refused with the authorization's status. */
  MCP_STREAM_OPENED,
  MCP_STREAM_CLOSED, /* it ended; its session is already freed */
  /* LISTEN: a call refused before it became a stream (authorization or
   * admission); |status| and |details| say why, the identities who. No
   * OPENED or CLOSED event is reported for it. */
  MCP_STREAM_REFUSED
} mcp_stream_event;

/* A transport's stream callback (its options' on_stream), on the
 * transport's thread, with |info| lent for the call. What it may call of
 * the transport, the transport's header says. */
typedef void (*mcp_stream_cb)(mcp_stream_event ev, const mcp_stream_info *info,
                              void *user_data);

/* ------------------------------------------------------------------ */
/* What a transport counts                                             */
/* ------------------------------------------------------------------ */

/*
 * The counters of one transport object (all its connections and
 * streams), the one shape every transport fills: mcp_grpc_stats and
 * mcp_h2c_stats are this struct, so one reader (a program's metrics)
 * serves every transport. Counters count from the object's creation. A
 * field a transport cannot count stays 0; which ones docs/api.md says
 * (gRPC core keeps its connections, bytes and buffers to itself, and its
 * TLS and HTTP/2 limits are its own). The caller allocates it: fields are
 * only appended, each group a version (MCP_TRANSPORT_STATS_V*), and a
 * transport writes only the fields of the version it is given
 * (mcp_transport_stats_write()).
 */
typedef struct mcp_transport_stats {
  size_t connections;      /* open connections (any protocol) */
  size_t streams;          /* open MCP, service and client streams */
  uint64_t bytes_read;     /* from sockets */
  uint64_t bytes_written;  /* to sockets (writes completed) */
  uint64_t messages_received;
  uint64_t messages_sent;  /* handed to HTTP/2 in full */
  /* Memory held for I/O right now: */
  size_t write_buffered;   /* encoded frames waiting for the socket */
  size_t msg_buffered;     /* bytes of messages taken from the core and not
                              yet handed to HTTP/2 (at most one message per
                              stream) */
  size_t read_buffered;    /* partial received messages (at most
                              max_recv_message_size per stream), and the
                              first bytes of connections being probed */
  /* Admission (LISTEN; mcp_admit_stats, filled by
   * mcp_transport_stats_admit()): */
  size_t waiting_rate;     /* streams waiting for a new-stream token */
  size_t waiting_initial;  /* source: waiting for an initial slot */
  size_t initial;          /* source: holding an initial slot */
  size_t initial_peak;     /* the most |initial| has been */
  uint64_t initial_sent;   /* slots freed: the initial pushes taken */
  uint64_t initial_timeouts; /* slots freed by initial_push_timeout */
  uint64_t refused_max_streams, refused_peer_streams, refused_rate,
      refused_wait_timeout;

  /* --- MCP_TRANSPORT_STATS_V2 --- */
  /* TLS: handshakes completed, failed (a bad certificate, no common
   * protocol, a peer that is not TLS), timed out, and connections closed
   * at accept because too many handshakes were in progress (in all or
   * from that address); handshakes in progress now; certificate sets
   * reloaded and reloads that failed (the previous set stayed). */
  uint64_t tls_handshakes, tls_handshake_failures, tls_handshake_timeouts,
      refused_handshakes;
  size_t handshaking;
  uint64_t tls_reloads, tls_reload_failures;
  /* Authorization (LISTEN: calls refused; DIAL: servers refused), and
   * streams ended by *_reauthorize(). */
  uint64_t refused_unauthenticated, refused_denied, revoked;
  /* Calls refused past max_streams_per_connection; connections told
   * ENHANCE_YOUR_CALM for resetting too many streams. */
  uint64_t refused_connection_streams, rapid_resets;
  /* Calls that waited for their peer's new-stream token, and calls
   * refused past it (RESOURCE_EXHAUSTED). */
  uint64_t peer_rate_delayed, refused_peer_rate;

  /* --- MCP_TRANSPORT_STATS_V3 --- */
  /* LISTEN: times accepting paused (out of file descriptors or memory);
   * whether it is paused now. */
  uint64_t accept_pauses;
  int accept_paused;

  /* --- MCP_TRANSPORT_STATS_V4 (issue 21) --- */
  uint64_t opened; /* streams opened (the OPENED events) */
} mcp_transport_stats;

/* Versions of mcp_transport_stats. V1 to V3 are h2c's mcp_h2c_stats of
 * 0.5.0 and before (same layout); V4 (issue 21) appends |opened|, which
 * gRPC counted. */
#define MCP_TRANSPORT_STATS_V1 1
#define MCP_TRANSPORT_STATS_V2 2
#define MCP_TRANSPORT_STATS_V3 3
#define MCP_TRANSPORT_STATS_V4 4
#define MCP_TRANSPORT_STATS_VERSION MCP_TRANSPORT_STATS_V4

/*
 * The end of every transport's *_stats_versioned(): copies the fields of
 * |version| (a newer one than this library knows: all it knows) from
 * |full| into |out|, and writes nothing else of |out|. Returns 0, or
 * MCP_ERR_INVALID_ARGUMENT (|out| or |full| NULL, |version| below 1;
 * nothing written).
 */
MCP_EXTERN int mcp_transport_stats_write(mcp_transport_stats *out,
                                         int version,
                                         const mcp_transport_stats *full);

/* Sets the admission fields of |st| (waiting_rate to refused_wait_timeout,
 * peer_rate_delayed, refused_peer_rate) from |admit| (mcp.h); the other
 * fields are untouched. |admit| NULL (no admission: a dialing object):
 * nothing changes. */
MCP_EXTERN void mcp_transport_stats_admit(mcp_transport_stats *st,
                                          const mcp_admit *admit);

#ifdef __cplusplus
}
#endif

#endif /* MCP_ENGINE_H */
