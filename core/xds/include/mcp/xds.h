/*
 * MCP over xDS (issue 22): Envoy's Aggregated Discovery Service
 * (envoy.service.discovery.v3, both methods) serving the collections of an
 * mcp_store, as istiod's `meshConfig.configSources: xds://` consumes them.
 * A protocol module on the engine of mcp/engine.h, server side, sans-I/O.
 *
 * Types and resources (docs/protocol.md, "xDS"):
 *   - A type_url is Istio's GROUP/VERSION/KIND
 *     ("networking.istio.io/v1alpha3/VirtualService"); its collection is
 *     mcp_collection_for_gvk() (aliases included: ".../v1/VirtualService"
 *     is the same collection). Anything else is an unknown type: answered
 *     with an empty response, never an error.
 *   - Each resource is an Any{type_url: MCP_XDS_RESOURCE_TYPE_URL, value:
 *     the stored istio.mcp.v1alpha1.Resource}: the store's bytes, shared,
 *     never re-encoded. A store name without '/' is sent as "/name"
 *     (istiod's encoding of the empty namespace); only that name field is
 *     written per message, the rest of the Resource stays shared.
 *   - Delta: discovery.v3.Resource{name, version, resource: the Any above}.
 *   - MCP_XDS_MESH_TYPE: the Any is the body itself (see there).
 *
 * One session per call; the rules are in mcp_xds_server_open().
 *
 * The conventions of mcp.h hold: errors are negative mcp_error codes, time
 * is an argument, allocation goes through mcp_mem, one thread at a time per
 * object (the transport's), callbacks never re-enter their caller.
 */
#ifndef MCP_XDS_H
#define MCP_XDS_H

#include <mcp/engine.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MCP_XDS_SERVICE "envoy.service.discovery.v3.AggregatedDiscoveryService"
#define MCP_XDS_METHOD_SOTW                                                  \
  "/envoy.service.discovery.v3.AggregatedDiscoveryService/"                  \
  "StreamAggregatedResources"
#define MCP_XDS_METHOD_DELTA                                                 \
  "/envoy.service.discovery.v3.AggregatedDiscoveryService/"                  \
  "DeltaAggregatedResources"
/* For logs and metrics (mcp_stream_ops.name). */
#define MCP_XDS_API_NAME "xds"
/* The type URL of every resource's Any (istiod's apigen, adsc). */
#define MCP_XDS_RESOURCE_TYPE_URL                                            \
  "type.googleapis.com/istio.mcp.v1alpha1.Resource"
/* istiod's MeshConfig type: its resources are sent as their bodies' own
 * Any (type.googleapis.com/istio.mesh.v1alpha1.MeshConfig when typed), not
 * wrapped in a Resource: istiod's apigen does so and adsc reads it so
 * (Resources[0]). A SotW wildcard response carries one: the MeshConfig
 * whose name sorts first (the Any has no name to tell several apart). */
#define MCP_XDS_MESH_TYPE "mesh.istio.io/v1alpha1/MeshConfig"
/* Limits on one stream: types subscribed, names in one request. Beyond
 * them the stream ends with RESOURCE_EXHAUSTED (MCP_ERR_LIMIT). */
#define MCP_XDS_MAX_TYPES 512
#define MCP_XDS_MAX_NAMES 100000
/* Bytes of a type URL, a resource name, a nonce beyond which a request is
 * refused (INVALID_ARGUMENT). */
#define MCP_XDS_MAX_STRING 1024

/* Something a session wants the program to log or count. Valid during the
 * callback only. */
typedef enum mcp_xds_event_kind {
  MCP_XDS_EVENT_NACK = 1,         /* the client rejected a response */
  MCP_XDS_EVENT_UNKNOWN_TYPE = 2, /* a type_url that names no collection */
  MCP_XDS_EVENT_REFUSED = 3,      /* --require-identity: no such identity */
  MCP_XDS_EVENT_STALE = 4         /* a nonce not pending: ignored */
} mcp_xds_event_kind;

typedef struct mcp_xds_event {
  mcp_xds_event_kind kind;
  int delta;              /* the stream is DeltaAggregatedResources */
  const char *node_id;    /* "" before the client said */
  const char *type_url;   /* NULL for REFUSED */
  const char *version;    /* NACK: the version rejected */
  const char *nonce;      /* NACK, STALE: the nonce answered */
  int code;               /* NACK: error_detail.code */
  const char *message;    /* NACK: error_detail.message; REFUSED: why */
} mcp_xds_event;

typedef void (*mcp_xds_event_fn)(const mcp_xds_event *ev, void *user_data);

typedef struct mcp_xds_server_options {
  /* The store served (required). Kept by pointer: it must outlive the
   * server and its streams. */
  const mcp_store *store;
  /* The watches' debounce (mcp_watch_options): default 0/0, at once. A
   * debounce with max_delay 0 is bounded by
   * mcp_watch_default_max_delay(debounce) (10 x, at least 1 s). */
  mcp_tstamp debounce;
  mcp_tstamp max_delay;
  /* When not NULL: a call is served only when the peer has a verified
   * identity matching this pattern ('*' matches any run of characters,
   * e.g. "spiffe://cluster.local/ns/istio-system/sa/" followed by "*"), as istiod's
   * apigen refuses callers without a control-plane identity; otherwise it
   * ends with PERMISSION_DENIED. Copied. */
  const char *require_identity;
  mcp_xds_event_fn on_event; /* may be NULL */
  void *user_data;
  const mcp_mem *mem; /* NULL: libc */
} mcp_xds_server_options;

#define MCP_XDS_SERVER_OPTIONS_V1 1
#define MCP_XDS_SERVER_OPTIONS_VERSION MCP_XDS_SERVER_OPTIONS_V1
MCP_EXTERN void
mcp_xds_server_options_default_versioned(int version,
                                         mcp_xds_server_options *opts);
#define mcp_xds_server_options_default(OPTS)                                 \
  mcp_xds_server_options_default_versioned(MCP_XDS_SERVER_OPTIONS_VERSION,    \
                                           (OPTS))

typedef struct mcp_xds_server mcp_xds_server;

/* Creates a server. On failure |*psrv| is untouched. Errors: NOMEM,
 * INVALID_ARGUMENT (no store, an empty pattern, an unknown version). */
MCP_EXTERN int mcp_xds_server_new_versioned(mcp_xds_server **psrv,
                                            int version,
                                            const mcp_xds_server_options *o);
#define mcp_xds_server_new(PSRV, OPTS)                                       \
  mcp_xds_server_new_versioned((PSRV), MCP_XDS_SERVER_OPTIONS_VERSION, (OPTS))

/* Frees the server. Every stream it opened must have been deleted first.
 * NULL is a no-op. */
MCP_EXTERN void mcp_xds_server_del(mcp_xds_server *srv);

/* The two services to give a listening transport: [0] MCP_XDS_METHOD_SOTW,
 * [1] MCP_XDS_METHOD_DELTA, open() = mcp_xds_server_open(), both with
 * MCP_DEF_INITIAL_SYNC (0.9.0): a call holds an initial-sync admission slot
 * until it asked for a type and every type it asked for had its first
 * answer taken (mcp_stream_initial_sent()), as an MCP source stream does.
 * Sets |*defs| (valid as long as the server) and returns 2. */
MCP_EXTERN size_t mcp_xds_server_services(const mcp_xds_server *srv,
                                          const mcp_service_def **defs);

/*
 * Opens the session of one new call (|delta|: DeltaAggregatedResources),
 * wrapped in a stream (flags MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE, ops name
 * MCP_XDS_API_NAME) owned by the caller. |peer| may be NULL (no identity).
 * With require_identity and no matching identity the stream says nothing
 * and ends with PERMISSION_DENIED (an event REFUSED). On failure |*pst| is
 * untouched. Errors: NOMEM.
 *
 * Both methods:
 *   - node.id and node.metadata are kept from the first request that has a
 *     node (mcp_xds_stream_info()).
 *   - A request that does not decode, lacks a type_url, or carries a string
 *     that is not UTF-8 or longer than MCP_XDS_MAX_STRING ends the stream
 *     with INVALID_ARGUMENT.
 *   - The first request of a type is always answered, whatever its nonce
 *     says (adsc puts a timestamp there), even when the type is unknown or
 *     its collection empty or absent (an empty response).
 *   - After that, a request whose response_nonce is the type's pending
 *     nonce is an ACK, or with error_detail a NACK (counted, reported as an
 *     event; the version rejected is never sent again: the next response
 *     goes out when the collection changes). Any other nonce is stale:
 *     ignored and counted.
 *   - At most one response per type is in flight: changes made meanwhile
 *     wait for the ACK or NACK and coalesce. Changes are sent once the
 *     watch's debounce allows.
 *   - Versions are "<store epoch hex>-<collection generation>".
 * State of the world (StreamAggregatedResources):
 *   - Every response carries the type's complete set (after the client's
 *     resource_names filter: empty is a wildcard); version_info and a new
 *     nonce each time; type_url as requested.
 *   - A request with an empty response_nonce for a type already known
 *     (a re-subscription) is answered with full state at once; it
 *     supersedes the response in flight, if any (its answer is then
 *     stale). A changed resource_names list in an ACK is answered with
 *     full state too.
 * Delta (DeltaAggregatedResources):
 *   - The first request of a type subscribes to resource_names_subscribe;
 *     none, or "*", is the wildcard; later requests add and remove names
 *     ("*" included). A name newly subscribed is sent when it exists.
 *     Subscription changes hold whatever the request's nonce (a stale one
 *     included): they are not answers.
 *   - initial_resource_versions (first request of a type): what the client
 *     holds; the first response then sends only resources whose version
 *     differs or that the client lacks, and removes those it holds that no
 *     longer exist.
 *   - Later responses carry exactly what changed since (O(changed), the
 *     watch), removed_resources for deletions, system_version_info.
 *   - When the store's change log no longer reaches what the stream sent
 *     (tombstones compacted before it took them), the stream ends with
 *     RESYNC (ABORTED): the client reconnects with initial_resource_versions.
 */
MCP_EXTERN int mcp_xds_server_open(mcp_xds_server *srv, int delta,
                                   const mcp_peer_info *peer, mcp_tstamp ts,
                                   mcp_stream **pst);

/* 1 when |st| is a stream of an xDS server session. */
MCP_EXTERN int mcp_xds_stream_is(const mcp_stream *st);

/* What one stream serves, for /debug/syncz. Pointers valid until the next
 * call on the stream. Frozen. */
typedef struct mcp_xds_stream_info {
  int delta;
  const char *node_id;         /* "" before a request with a node */
  const mcp_kv *node_metadata; /* node.metadata's string, number and bool
                                  values, in the message's order */
  size_t nnode_metadata;
  size_t ntypes;               /* types subscribed */
  uint64_t responses, acks, nacks, stale;
} mcp_xds_stream_info;

/* One type of a stream. Frozen. */
typedef struct mcp_xds_type_info {
  const char *type_url;      /* as requested */
  const char *collection;    /* NULL: an unknown type */
  const char *version_sent;  /* of the last response ("" before) */
  const char *version_acked; /* "" before the first ACK */
  const char *pending_nonce; /* "" when nothing is in flight */
  uint64_t nacks;
  const char *last_nack;     /* "" when none */
  int wildcard;              /* SotW: empty resource_names; delta: "*" */
  size_t nnames;             /* names subscribed (beside the wildcard) */
} mcp_xds_type_info;

/* |st| must be an xDS stream (mcp_xds_stream_is()). Returns 0, or
 * NOT_FOUND for |i| >= ntypes. */
MCP_EXTERN void mcp_xds_stream_info_get(const mcp_stream *st,
                                        mcp_xds_stream_info *info);
MCP_EXTERN int mcp_xds_stream_type_get(const mcp_stream *st, size_t i,
                                       mcp_xds_type_info *info);

/* Counters of a server, for metrics. */
typedef struct mcp_xds_server_stats {
  uint64_t streams;       /* opened */
  uint64_t active;        /* open now */
  uint64_t responses;     /* DiscoveryResponse and DeltaDiscoveryResponse */
  uint64_t resources;     /* resources carried by them */
  uint64_t acks, nacks, stale;
  uint64_t unknown_types; /* first requests of a type naming no collection */
  uint64_t refused;       /* calls refused by require_identity */
  uint64_t invalid;       /* streams ended with INVALID_ARGUMENT */
  uint64_t resyncs;       /* delta streams ended with RESYNC */
} mcp_xds_server_stats;

#define MCP_XDS_SERVER_STATS_V1 1
#define MCP_XDS_SERVER_STATS_VERSION MCP_XDS_SERVER_STATS_V1
MCP_EXTERN void mcp_xds_server_get_stats_versioned(const mcp_xds_server *srv,
                                                   int version,
                                                   mcp_xds_server_stats *st);
#define mcp_xds_server_get_stats(SRV, ST)                                    \
  mcp_xds_server_get_stats_versioned((SRV), MCP_XDS_SERVER_STATS_VERSION,     \
                                     (ST))

/* ------------------------------------------------------------------ */
/* Client (an istiod-like ADS client: mcp-sink --api xds)              */
/* ------------------------------------------------------------------ */

/* What a client holds, per type URL: name -> version, across the streams
 * (reconnections) that feed it. */
typedef struct mcp_xds_held mcp_xds_held;
/* Errors: NOMEM. */
MCP_EXTERN int mcp_xds_held_new(mcp_xds_held **ph, const mcp_mem *mem);
/* NULL is a no-op. No stream may use it any more. */
MCP_EXTERN void mcp_xds_held_del(mcp_xds_held *h);
/* Resources held of |type_url|. */
MCP_EXTERN size_t mcp_xds_held_count(const mcp_xds_held *h,
                                     const char *type_url);
/* The version held of |name|, or NULL. Valid until the next change. */
MCP_EXTERN const char *mcp_xds_held_version(const mcp_xds_held *h,
                                            const char *type_url,
                                            const char *name);

/* One response as received. Valid during the callback only. Frozen. */
typedef struct mcp_xds_response {
  int delta;
  const char *type_url, *version, *nonce; /* version: (system_)version_info */
  const char *collection; /* mcp_collection_for_gvk(type_url), or NULL */
  /* The resources, each the decoded istio.mcp.v1alpha1.Resource (name,
   * version, labels, annotations, create time, body type and bytes); for
   * MCP_XDS_MESH_TYPE the Any itself (named by delta, else "mesh"). None
   * when the client rejects the response itself. */
  const mcp_resource *resources;
  size_t nresources;
  const char *const *removed; /* delta's removed_resources */
  size_t nremoved;
  /* 1 when, once applied, the type holds exactly |resources| (SotW; a
   * delta stream's first response of a type nothing was held of). */
  int complete;
} mcp_xds_response;

/*
 * Called for each response. |rejected|: the client NACKs it (a string
 * that is not UTF-8, an Any that is no istio.mcp.v1alpha1.Resource, a
 * Resource that does not decode or breaks mcp_resource_check(), a name
 * twice) and says why; the return value is then ignored. Else return 0 to
 * accept (what is held changes, an ACK goes out) or a google.rpc code > 0
 * to NACK with the message written into |msg| (at most |msglen| bytes,
 * NUL-terminated); nothing held changes. Must not call into the stream.
 */
typedef int (*mcp_xds_response_fn)(const mcp_xds_response *r,
                                   const char *rejected, char *msg,
                                   size_t msglen, void *user_data);

typedef struct mcp_xds_client_options {
  mcp_xds_held *held; /* required; kept by pointer */
  int delta;          /* DeltaAggregatedResources */
  /* The types to subscribe to (wildcard), in this order; copied. */
  const char *const *type_urls;
  size_t ntypes;
  /* The node sent on the first request; copied. */
  const char *node_id;
  const mcp_kv *node_metadata; /* string values of node.metadata */
  size_t nnode_metadata;
  /* SotW: the response_nonce of the initial requests (adsc puts a
   * timestamp there; the core reads no clock). NULL: none. */
  const char *initial_nonce;
  mcp_xds_response_fn on_response;
  void *user_data;
  const mcp_mem *mem; /* NULL: libc */
} mcp_xds_client_options;

#define MCP_XDS_CLIENT_OPTIONS_V1 1
#define MCP_XDS_CLIENT_OPTIONS_VERSION MCP_XDS_CLIENT_OPTIONS_V1

/*
 * Opens the client side of one ADS call (method MCP_XDS_METHOD_DELTA with
 * |delta|, else MCP_XDS_METHOD_SOTW), for mcp_client_def.open(): a stream
 * (ops name MCP_XDS_API_NAME) owned by the caller. It sends one request
 * per type (delta: with initial_resource_versions = what |held| holds of
 * it), then answers every response, in order: ACK (version and nonce
 * echoed) or NACK (error_detail: code and message). A response whose
 * envelope does not decode (or has no type_url) ends the stream with
 * MALFORMED: it cannot be answered. On failure |*pst| is untouched.
 * Errors: NOMEM, INVALID_ARGUMENT (no held, no type, a type not UTF-8).
 */
MCP_EXTERN int
mcp_xds_client_open_versioned(mcp_stream **pst, int version,
                              const mcp_xds_client_options *opts,
                              mcp_tstamp ts);
#define mcp_xds_client_open(PST, OPTS, TS)                                   \
  mcp_xds_client_open_versioned((PST), MCP_XDS_CLIENT_OPTIONS_VERSION, (OPTS), \
                                (TS))

/* 1 when |st| is an xDS client stream. */
MCP_EXTERN int mcp_xds_client_stream_is(const mcp_stream *st);

/* 1 when |identity| matches |pattern| ('*': any run of characters, also
 * empty; everything else literal). */
MCP_EXTERN int mcp_xds_identity_match(const char *pattern,
                                      const char *identity);

#ifdef __cplusplus
}
#endif

#endif /* MCP_XDS_H */
