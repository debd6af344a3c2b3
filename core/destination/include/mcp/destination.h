/*
 * Conduit's Destination API (conduit.proxy.destination.Destination/Get,
 * proto/conduit/proxy/destination/destination.proto, whose comments are
 * normative) on the engine of mcp/engine.h: a protocol module, both sides,
 * sans-I/O.
 *
 *   view helpers   names and bodies of the Destination view store, the
 *                  data contract between the program's adapter (which fills
 *                  the store from Service and Endpoints documents) and the
 *                  server sessions (which watch it). Both sides use these,
 *                  so they agree.
 *   mcp_dest_server   serves Get: one session per call, watching one
 *                  collection of the view; an mcp_service_def for the
 *                  listening transports.
 *   mcp_dest_set   what a client holds for one authority; survives
 *                  reconnects.
 *   client stream  one Get call on the dialing side: sends the request,
 *                  applies each Update to an mcp_dest_set by the proto's
 *                  rules and reports it.
 *
 * The conventions of mcp.h hold: errors are negative mcp_error codes, time
 * is an argument, allocation goes through mcp_mem, one thread at a time per
 * object (the transport's), callbacks never re-enter the object that
 * called them.
 *
 * The view store (one mcp_store):
 *   collection  "<ns>/<svc>:<port>" (mcp_dest_view_collection()): EXISTS
 *               iff the Service <ns>/<svc> exists and has a port with
 *               port == <port>. When the Service or that port goes, the
 *               adapter calls mcp_store_remove_collection(); a Service with
 *               the port and no ready endpoint is an existing, empty
 *               collection (mcp_store_add_collection()).
 *   resource    one ready endpoint address: name "IP:PORT" or "[v6]:PORT"
 *               (mcp_dest_addr_name()), type_url
 *               MCP_DEST_WEIGHTED_ADDR_TYPE_URL, body the encoded
 *               WeightedAddr (mcp_dest_weighted_addr_encode()). Upsert with
 *               an EMPTY version: the store then generates one that changes
 *               only when the body does, so that re-applying an Endpoints
 *               document that leaves an address as it was is no change,
 *               and a stream sends nothing for it. Removals are parsed back
 *               from the name (removed items have no body).
 */
#ifndef MCP_DESTINATION_H
#define MCP_DESTINATION_H

#include <mcp/engine.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The gRPC method served and called. */
#define MCP_DEST_METHOD "/conduit.proxy.destination.Destination/Get"
/* For logs and metrics (mcp_stream_ops.name of both sides). */
#define MCP_DEST_API_NAME "destination"
/* The type URL of the view's resources. */
#define MCP_DEST_WEIGHTED_ADDR_TYPE_URL                                      \
  "type.googleapis.com/conduit.proxy.destination.WeightedAddr"
#define MCP_DEST_DEFAULT_DNS_ZONE "cluster.local"
#define MCP_DEST_DEFAULT_HEARTBEAT (10 * MCP_SECONDS)
/* The port of a request path without one. */
#define MCP_DEST_DEFAULT_PORT 80
/* The scheme served (and sent by the client by default). */
#define MCP_DEST_SCHEME "k8s"
/* Bytes of the longest address name with its NUL:
 * "[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535". */
#define MCP_DEST_ADDR_NAME_MAX 54
/* Bytes of a request's path beyond which the server refuses it
 * (INVALID_ARGUMENT): a DNS name (253) and a port, with room to spare. */
#define MCP_DEST_MAX_PATH_LEN 1024

/* ------------------------------------------------------------------ */
/* View helpers                                                        */
/* ------------------------------------------------------------------ */

/* One TCP address. Frozen (never grows). */
typedef struct mcp_dest_addr {
  uint8_t family;  /* 4 or 6 */
  uint8_t ip[16];  /* network byte order; IPv4 in ip[0..4) */
  uint16_t port;
} mcp_dest_addr;

/*
 * The view collection of Service <ns>/<svc>, port <port>:
 * "<ns>/<svc>:<port>". Writes at most |len| bytes including the NUL
 * (truncating) and returns the length of the whole result, as snprintf
 * does.
 */
MCP_EXTERN size_t mcp_dest_view_collection(char *buf, size_t len,
                                           const char *ns, const char *svc,
                                           uint32_t port);

/*
 * Parses an IP address in text (what an Endpoints address holds): IPv4
 * dotted decimal (four parts 0-255, no leading zeros) or IPv6 (RFC 4291
 * text, "::" and a trailing dotted IPv4 allowed; no zone, no brackets),
 * and sets |*a| to it with |port|. Returns 0, or INVALID_ARGUMENT (|*a|
 * untouched).
 */
MCP_EXTERN int mcp_dest_ip_parse(mcp_dest_addr *a, const char *ip,
                                 uint16_t port);

/*
 * Parses an address name, "IP:PORT" (IPv4 as above) or "[IPv6]:PORT",
 * PORT decimal 0-65535 without leading zeros. The inverse of
 * mcp_dest_addr_name() (which it also accepts in non-canonical IPv6 text).
 * Returns 0, or INVALID_ARGUMENT (|*a| untouched).
 */
MCP_EXTERN int mcp_dest_addr_parse(mcp_dest_addr *a, const char *name);

/*
 * The name of |a|: "a.b.c.d:PORT", or "[v6]:PORT" with the IPv6 address
 * in RFC 5952 text (lower case, longest run of two or more zero groups as
 * "::", the first of equal runs; an IPv4-mapped address as
 * "::ffff:a.b.c.d"). Writes and returns as mcp_dest_view_collection();
 * MCP_DEST_ADDR_NAME_MAX bytes always suffice. This is also how the client
 * reports addresses.
 */
MCP_EXTERN size_t mcp_dest_addr_name(const mcp_dest_addr *a, char *buf,
                                     size_t len);

/*
 * Encodes a conduit.proxy.destination.WeightedAddr: addr = |a| (IPv4 as
 * IPAddress.ipv4, the address as a big-endian integer: 10.0.0.1 is
 * 0x0A000001; IPv6 as IPv6{first: hextets 1-4, last: hextets 5-8}), weight
 * 1, and metric_labels {"k8s_pod": |pod|} when |pod| is neither NULL nor
 * "" (the Endpoints address has a targetRef of kind Pod). Writes the bytes
 * into |buf| only when they fit in |len| (then all of them); returns the
 * number of bytes of the encoding either way, so a caller may ask with
 * len 0 first. The bytes are the view resource's body.
 */
MCP_EXTERN size_t mcp_dest_weighted_addr_encode(const mcp_dest_addr *a,
                                                const char *pod, uint8_t *buf,
                                                size_t len);

/* A port of a Kubernetes Service or Endpoints subset. Frozen. */
typedef struct mcp_dest_port {
  const char *name; /* "" when unnamed */
  uint32_t port;
} mcp_dest_port;

/*
 * Which port of an Endpoints subset serves Service port |service_port|
 * (issue 14, as Kubernetes' endpoints controller pairs them): the one
 * whose name equals the service port's name; for an unnamed service port,
 * the subset's only port, else its unnamed one. Returns it (a pointer into
 * |ports|), or NULL when the subset has none: its addresses do not serve
 * that port.
 */
MCP_EXTERN const mcp_dest_port *
mcp_dest_endpoints_port(const mcp_dest_port *service_port,
                        const mcp_dest_port *ports, size_t nports);

/* ------------------------------------------------------------------ */
/* Server                                                              */
/* ------------------------------------------------------------------ */

/*
 * What one Get stream does (issue 14, and the proto's comments):
 *
 * The first message of the call is a conduit.common.Destination. Its
 * scheme must be exactly "k8s"; its path is "host[:port]" (port 1-65535,
 * 80 when absent). The stream ends with INVALID_ARGUMENT (and a one-line
 * reason) for another scheme, an undecodable request, or a malformed path:
 * empty, longer than MCP_DEST_MAX_PATH_LEN, an empty host, a host with
 * characters other than letters, digits, '.', '-' and '_' (or a bracketed
 * IPv6 literal that does not parse), a port that is empty, not decimal, 0
 * or over 65535, or a second ':'. A second request message on the stream
 * ends it with INVALID_ARGUMENT too ("one request per call": Get is a
 * server-streaming call), whatever was sent before. The client's
 * half-close does not end the stream.
 *
 *   - host an IPv4 literal: one add with that address and port (weight 1),
 *     then nothing more (no heartbeat: there is nothing to watch);
 *   - host "<svc>.<ns>.svc.<zone>" (one trailing dot accepted; the
 *     comparison ignores case, names are taken in lower case; svc and ns
 *     DNS labels): the view collection "<ns>/<svc>:<port>" is watched;
 *   - any other host (an IPv6 literal included): no_endpoints{exists:
 *     false}, then nothing more.
 *
 * A watched collection: the first message goes out at once (the first take
 * of a watch is never debounced): no_endpoints{exists:false} when the
 * collection does not exist, no_endpoints{exists:true} when it exists
 * empty, else add with every address. Every add carries
 * WeightedAddrSet.metric_labels {k8s_namespace, k8s_service}. After that,
 * at each change of the collection, once the watch's debounce allows:
 *   - the collection removed: no_endpoints{exists:false} (unless the
 *     client was told so already);
 *   - it exists and is empty now: no_endpoints{exists:true} (unless the
 *     client was told so already) - also when the last address vanishes:
 *     "a remove that removes the last endpoint is equivalent", and a
 *     client must not fall back to DNS;
 *   - it has addresses and the client holds none (it was told
 *     no_endpoints): add with all of them;
 *   - else add with exactly the addresses new or whose body changed, then
 *     remove with exactly those that vanished (the add first, so that the
 *     client never holds an empty set in between); nothing when neither.
 * no_endpoints is never sent where an add describing the same state would
 * follow: a stream sends one message per change, or an add then a remove.
 * Changes within the debounce window coalesce (an address added and gone
 * again within one window may be listed in a remove: harmless, the proto
 * says, as is an add of an address re-added within one).
 *
 * When the view's change log no longer reaches what the client holds (the
 * store compacted the tombstones of many deletions before the stream took
 * them) and the client holds addresses, the remove cannot be computed
 * without a copy of those per stream: the stream ends with RESYNC
 * (ABORTED). The client reconnects, keeps its set until the first message
 * of the new stream, which replaces it. Counted in stats.resyncs.
 *
 * Heartbeat: after |heartbeat| without any message sent, an empty add
 * (with the metric labels) while the service exists; while it does not,
 * no_endpoints{exists:false} again - an add, even empty, would tell the
 * client that the service exists and stop its DNS fallback. Off with 0.
 */
typedef struct mcp_dest_server_options {
  /* The view store (required). Kept by pointer: it must outlive the
   * server and its streams. */
  const mcp_store *view;
  /* The cluster's DNS zone; NULL: MCP_DEST_DEFAULT_DNS_ZONE. A trailing
   * dot is ignored. Copied. */
  const char *dns_zone;
  /* Default MCP_DEST_DEFAULT_HEARTBEAT; 0: no heartbeat. */
  mcp_tstamp heartbeat;
  /* The watch's debounce (mcp_watch_options): default 0/0, at once. A
   * debounce with max_delay 0 is bounded by
   * mcp_watch_default_max_delay(debounce) (10 x, at least 1 s). */
  mcp_tstamp debounce;
  mcp_tstamp max_delay;
  const mcp_mem *mem; /* NULL: libc */
} mcp_dest_server_options;

#define MCP_DEST_SERVER_OPTIONS_V1 1
#define MCP_DEST_SERVER_OPTIONS_VERSION MCP_DEST_SERVER_OPTIONS_V1
MCP_EXTERN void
mcp_dest_server_options_default_versioned(int version,
                                          mcp_dest_server_options *opts);
#define mcp_dest_server_options_default(OPTS)                                \
  mcp_dest_server_options_default_versioned(MCP_DEST_SERVER_OPTIONS_VERSION, \
                                            (OPTS))

typedef struct mcp_dest_server mcp_dest_server;

/* Creates a server. On failure |*psrv| is untouched. Errors: NOMEM,
 * INVALID_ARGUMENT (no view, a zone that is empty or not a DNS name, an
 * unknown version). */
MCP_EXTERN int
mcp_dest_server_new_versioned(mcp_dest_server **psrv, int version,
                              const mcp_dest_server_options *opts);
#define mcp_dest_server_new(PSRV, OPTS)                                      \
  mcp_dest_server_new_versioned((PSRV), MCP_DEST_SERVER_OPTIONS_VERSION, (OPTS))

/* Frees the server. Every stream it opened must have been deleted first
 * (the streams count into it). NULL is a no-op. */
MCP_EXTERN void mcp_dest_server_del(mcp_dest_server *srv);

/* The service to give a listening transport: method MCP_DEST_METHOD, open()
 * = mcp_dest_server_open() (the peer is not looked at). Valid as long as
 * the server. */
MCP_EXTERN const mcp_service_def *
mcp_dest_server_service(const mcp_dest_server *srv);

/* Opens the session of one new call, wrapped in a stream (flags
 * MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE, ops name MCP_DEST_API_NAME) owned by
 * the caller (mcp_stream_del()). On failure |*pst| is untouched. Errors:
 * NOMEM. */
MCP_EXTERN int mcp_dest_server_open(mcp_dest_server *srv, mcp_tstamp ts,
                                    mcp_stream **pst);

/* 1 when |st| is a stream of a Destination server session. */
MCP_EXTERN int mcp_dest_server_stream_is(const mcp_stream *st);

/* What a server stream serves, for /debug: the request's path ("" before
 * the request) and the view collection watched (NULL when none: no request
 * yet, a static answer or a refused request). Valid until the stream is
 * deleted. |st| must be a server stream (mcp_dest_server_stream_is()). */
MCP_EXTERN const char *mcp_dest_server_stream_path(const mcp_stream *st);
MCP_EXTERN const char *
mcp_dest_server_stream_collection(const mcp_stream *st);

/* Counters of a server, for metrics. */
typedef struct mcp_dest_server_stats {
  uint64_t streams;       /* opened */
  uint64_t active;        /* open now */
  uint64_t updates;       /* Update messages produced (all kinds) */
  uint64_t adds;          /* of which add (heartbeats included) */
  uint64_t removes;       /* remove */
  uint64_t no_endpoints;  /* no_endpoints (heartbeats included) */
  uint64_t heartbeats;    /* messages sent as heartbeats */
  uint64_t invalid;       /* streams ended with INVALID_ARGUMENT */
  uint64_t resyncs;       /* streams ended with RESYNC */
  uint64_t bad_items;     /* view items skipped because the adapter broke
                             the contract: a removed name that is no
                             address, a live item whose type is not
                             WeightedAddr or whose body is empty (counted
                             at each message that would carry it) */
} mcp_dest_server_stats;

#define MCP_DEST_SERVER_STATS_V1 1
#define MCP_DEST_SERVER_STATS_VERSION MCP_DEST_SERVER_STATS_V1
MCP_EXTERN void mcp_dest_server_get_stats_versioned(const mcp_dest_server *srv,
                                                    int version,
                                                    mcp_dest_server_stats *st);
#define mcp_dest_server_get_stats(SRV, ST)                                   \
  mcp_dest_server_get_stats_versioned((SRV), MCP_DEST_SERVER_STATS_VERSION,   \
                                      (ST))

/* ------------------------------------------------------------------ */
/* Client: the address set                                             */
/* ------------------------------------------------------------------ */

/*
 * The addresses a client holds for one authority, across the streams (the
 * reconnections) that feed it. A new stream makes it stale: its content is
 * that of the previous stream, kept - as the proto allows - until, and
 * only until, the first message of the new stream, which starts it over.
 */
typedef struct mcp_dest_set mcp_dest_set;

/* Errors: NOMEM. */
MCP_EXTERN int mcp_dest_set_new(mcp_dest_set **pset, const mcp_mem *mem);
/* NULL is a no-op. No stream may use the set any more. */
MCP_EXTERN void mcp_dest_set_del(mcp_dest_set *set);

/* Number of addresses held. */
MCP_EXTERN size_t mcp_dest_set_count(const mcp_dest_set *set);
/* The i-th address (i < count), as mcp_dest_addr_name() writes it, in
 * ascending strcmp() order. Valid until the set changes. */
MCP_EXTERN const char *mcp_dest_set_addr(const mcp_dest_set *set, size_t i);
/* 1 when the service exists as last told: after an add, or a
 * no_endpoints{exists:true}; 0 before any message and after
 * no_endpoints{exists:false}. */
MCP_EXTERN int mcp_dest_set_exists(const mcp_dest_set *set);
/* 1 between the start of a stream and its first message. */
MCP_EXTERN int mcp_dest_set_stale(const mcp_dest_set *set);
/* 1 once the current stream delivered its first message (the set is what
 * the server says now, not stale). */
MCP_EXTERN int mcp_dest_set_synced(const mcp_dest_set *set);
/* Updates applied so far, over all streams. */
MCP_EXTERN uint64_t mcp_dest_set_updates(const mcp_dest_set *set);

/* ------------------------------------------------------------------ */
/* Client: the stream                                                  */
/* ------------------------------------------------------------------ */

typedef enum mcp_dest_update_kind {
  MCP_DEST_UPDATE_ADD = 1,
  MCP_DEST_UPDATE_REMOVE = 2,
  MCP_DEST_UPDATE_NO_ENDPOINTS = 3
} mcp_dest_update_kind;

/* One Update as applied. Valid during the callback only. Frozen. */
typedef struct mcp_dest_update {
  mcp_dest_update_kind kind;
  const char *const *addrs; /* the message's addresses, in its order, as
                               mcp_dest_addr_name() writes them (add,
                               remove; none for no_endpoints) */
  size_t naddrs;
  int exists;   /* no_endpoints: its flag; else mcp_dest_set_exists() after */
  size_t total; /* addresses held after it */
  int first;    /* the first message of this stream (the stale content was
                   dropped before it was applied) */
} mcp_dest_update;

/* Called after each Update is applied. It must not call into the stream
 * (it may read the set). */
typedef void (*mcp_dest_update_fn)(const mcp_dest_update *u, void *user_data);

typedef struct mcp_dest_client_options {
  /* The set to feed (required). Kept by pointer: it must outlive the
   * stream. At most one stream per set at a time. */
  mcp_dest_set *set;
  /* The request's path: "host[:port]" (required, non-empty). Copied. */
  const char *authority;
  /* NULL: MCP_DEST_SCHEME. Copied. */
  const char *scheme;
  mcp_dest_update_fn on_update; /* may be NULL */
  void *user_data;
  const mcp_mem *mem; /* NULL: libc */
} mcp_dest_client_options;

#define MCP_DEST_CLIENT_OPTIONS_V1 1
#define MCP_DEST_CLIENT_OPTIONS_VERSION MCP_DEST_CLIENT_OPTIONS_V1

/*
 * Opens the client side of one Get call on |opts->set| (which becomes
 * stale): a stream (flags MCP_STREAM_CLIENT_HALF_CLOSE_AFTER_FIRST |
 * MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE, ops name MCP_DEST_API_NAME) owned by
 * the caller, for mcp_client_def.open(). Its first pump sends
 * Destination{scheme, path: authority} and half-closes; then every Update
 * received is applied to the set and reported:
 *   add           the addresses join the set (duplicates once); exists = 1;
 *   remove        they leave it (an address not held is no error);
 *   no_endpoints  the set is emptied; exists = the message's flag;
 *   no oneof set  ignored (a newer server's kind of update).
 * An Update that does not decode, or lists an address without IP or with
 * a port over 65535, ends the stream with MALFORMED; the set keeps its
 * content (and stays stale when it was). NOMEM likewise changes nothing.
 * On failure |*pst| is untouched. Errors: NOMEM, INVALID_ARGUMENT.
 */
MCP_EXTERN int
mcp_dest_client_open_versioned(mcp_stream **pst, int version,
                               const mcp_dest_client_options *opts,
                               mcp_tstamp ts);
#define mcp_dest_client_open(PST, OPTS, TS)                                  \
  mcp_dest_client_open_versioned((PST), MCP_DEST_CLIENT_OPTIONS_VERSION,      \
                                 (OPTS), (TS))

/* ------------------------------------------------------------------ */
/* Client: the authorities, reconnecting                               */
/* ------------------------------------------------------------------ */

/*
 * A Destination client for several authorities, as a client def for a
 * dialing transport: one call slot per authority, each running one Get
 * call at a time (mcp_dest_client_open() on the authority's set) and,
 * when it ends, the next after the core's reconnection policy (mcp_redial:
 * mcp_backoff_defaults() unless |backoff| says otherwise; back to the
 * initial delay after a call that received an Update and lasted the
 * nominal delay). A call that cannot be opened (NOMEM) is tried again after
 * the backoff as well.
 */
typedef struct mcp_dest_agent mcp_dest_agent;

/* How one authority's call ended. Valid during the callback only. */
typedef struct mcp_dest_call_end {
  size_t slot;         /* the authority's index in the options */
  int error;           /* < 0: the call could not be opened (an mcp_error;
                          status is 0, details "", received 0) */
  int status;          /* the call's status (MCP_CODE_*) */
  const char *details; /* "" when none */
  uint64_t received;   /* Updates the call applied */
  mcp_tstamp delay;    /* until this authority's next call */
} mcp_dest_call_end;

/* Called after each Update applied to the set of authority |slot|; must not
 * call into the agent (it may read the set). */
typedef void (*mcp_dest_agent_update_fn)(size_t slot, const mcp_dest_update *u,
                                         void *user_data);
/* Called when a call ends or could not be opened; must not call into the
 * agent. */
typedef void (*mcp_dest_agent_end_fn)(const mcp_dest_call_end *e,
                                      void *user_data);

typedef struct mcp_dest_agent_options {
  const mcp_mem *mem; /* NULL: libc */
  /* The authorities ("host[:port]", each non-empty; copied) and one set per
   * authority (required; kept by pointer: they must outlive the agent and
   * feed no other stream meanwhile). 1 to 65536 of them. */
  const char *const *authorities;
  mcp_dest_set *const *sets;
  size_t nauthorities;
  const char *scheme;              /* NULL: MCP_DEST_SCHEME. Copied. */
  mcp_dest_agent_update_fn on_update; /* may be NULL */
  mcp_dest_agent_end_fn on_end;       /* may be NULL */
  void *user_data;
  /* Delays between one authority's calls; zero fields: the core's table. */
  mcp_backoff_options backoff;
  mcp_rand_fn rand; /* backoff jitter; NULL: mcp_backoff's own */
  void *rand_user_data;
} mcp_dest_agent_options;

#define MCP_DEST_AGENT_OPTIONS_V1 1
#define MCP_DEST_AGENT_OPTIONS_VERSION MCP_DEST_AGENT_OPTIONS_V1

/* Creates an agent whose first calls are due at |ts|. On failure |*pa| is
 * untouched. Errors: NOMEM, INVALID_ARGUMENT (no authority, an empty or
 * invalid one, a set missing, more than 65536, an unknown version). */
MCP_EXTERN int mcp_dest_agent_new_versioned(mcp_dest_agent **pa, int version,
                                            const mcp_dest_agent_options *opts,
                                            mcp_tstamp ts);
#define mcp_dest_agent_new(PA, OPTS, TS)                                     \
  mcp_dest_agent_new_versioned((PA), MCP_DEST_AGENT_OPTIONS_VERSION, (OPTS), \
                               (TS))

/* Frees the agent: every stream it opened must have been deleted first
 * (the transport running its client def stopped). NULL is a no-op. */
MCP_EXTERN void mcp_dest_agent_del(mcp_dest_agent *a);

/* The client def to give a dialing transport (points into |a|, valid until
 * mcp_dest_agent_del()): method MCP_DEST_METHOD on every slot. */
MCP_EXTERN const mcp_client_def *mcp_dest_agent_client_def(mcp_dest_agent *a);

#ifdef __cplusplus
}
#endif

#endif /* MCP_DESTINATION_H */
