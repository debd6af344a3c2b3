/*
 * libmcp authorization rules, shared by every transport (mcp/grpc.h,
 * mcp/h2c.h): who a peer is (its verified certificate identities, in one
 * order), how an authorization hook's answer becomes a stream's status,
 * and access lists of identities. Pure: no files, no threads, no clock.
 * The transports read certificates (gRPC's auth context, OpenSSL's X509)
 * and feed what they find to mcp_identity_add(); the rules of what counts
 * as an identity, and in which order, are here once.
 *
 * Objects are single-threaded: a transport that checks a list on another
 * thread than the one changing it locks around both (mcp_grpc_acl does).
 */
#ifndef MCP_AUTH_H
#define MCP_AUTH_H

#include <mcp/engine.h>

#ifdef __cplusplus
extern "C" {
#endif

/* gRPC status codes of a refusal (mcp_code has the others). */
#define MCP_CODE_PERMISSION_DENIED 7
#define MCP_CODE_UNAUTHENTICATED 16

/*
 * The peer of a stream, as authorization sees it. Identities come from the
 * peer's certificate, only once it was verified: the client's certificate
 * when a listener has a CA (mutual TLS), the server's certificate when
 * dialing over TLS. URI SANs first (SPIFFE IDs such as
 * "spiffe://cluster.local/ns/istio-system/sa/istiod"), then DNS SANs, then
 * the subject's common name. IP and e-mail SANs are not identities.
 * Pointers are valid during the call only. (mcp_grpc_peer is this type.)
 */
typedef struct mcp_peer {
  const char *address; /* the transport's peer, e.g. "ipv4:127.0.0.1:40000" */
  int dialed;          /* 1: the peer is the server this side dialed */
  int tls;             /* the connection is TLS */
  int authenticated;   /* a certificate was verified: nidentities > 0 */
  const char *const *identities; /* all of them, in the order above */
  size_t nidentities;
  const char *const *uris; /* the URI SANs: identities[0..nuris) */
  size_t nuris;
  const char *const *dns_names; /* the DNS SANs, after the URIs */
  size_t ndns_names;
  const char *common_name; /* the subject's CN (also the last identity),
                              NULL when none */
} mcp_peer;

/*
 * Decides whether |peer| may hold a stream: 0 allows; a gRPC status code
 * refuses (MCP_CODE_UNAUTHENTICATED when the peer has no verified
 * identity, MCP_CODE_PERMISSION_DENIED when its identity is refused; any
 * other code is sent as given, a value outside 1..16 as
 * PERMISSION_DENIED). Where and when each transport calls it is in its
 * header.
 */
typedef int (*mcp_authorize_fn)(const mcp_peer *peer, void *user_data);

/*
 * Runs |fn| (NULL: everyone is allowed) on |peer| and turns its answer
 * into the status a refused stream ends with: 0, or the code (normalized
 * as above) with |*details| set to a static string ("peer not
 * authenticated: no verified certificate identity", "permission denied:
 * peer identity not allowed", the server's when |peer->dialed|, or
 * "refused by the authorization policy").
 */
MCP_EXTERN int mcp_authorize(mcp_authorize_fn fn, void *user_data,
                             const mcp_peer *peer, const char **details);

/*
 * The admission key of |peer| (mcp_admit_stream()'s |peer_key|) into |buf|
 * (NUL-terminated, truncated to |len|): "id:" and its first verified
 * identity when it has one, else its address without the port
 * (mcp_admit_peer_key()). So a peer with a verified identity has its own
 * share of streams and slots, and anonymous streams from the same address
 * (400 idle ones, say) cannot starve it; peers presenting one identity
 * share one share, wherever they connect from. Use a |len| of at least
 * MCP_ADMIT_KEY_MAX: identities longer than that share a key with those
 * of the same prefix.
 */
#define MCP_ADMIT_KEY_MAX 512
MCP_EXTERN void mcp_peer_admit_key(const mcp_peer *peer, char *buf,
                                   size_t len);

/*
 * The rule on which TLS files make a set, for every transport with TLS:
 * a certificate needs its key and a key its certificate, and a listening
 * object (|listen| 1) needs both; a CA alone (a dialer verifying the
 * server) is a set. |cert| and |key| are 1 when given. Returns NULL, or
 * why not (a static string).
 */
MCP_EXTERN const char *mcp_tls_files_check(int cert, int key, int listen);

/* ------------------------------------------------------------------ */
/* Identities of a certificate                                         */
/* ------------------------------------------------------------------ */

/* At most this many identities of each kind, each at most this many
 * bytes. A certificate with a value past either limit, or with a NUL
 * inside one (which could match what it does not say), has no identity at
 * all (fail closed): dropping only that value could let a peer whose
 * denied identity was the one dropped pass a deny list on another.
 * Empty values are ignored. */
#define MCP_IDENTITY_MAX 64
#define MCP_IDENTITY_MAX_LEN 4096

typedef enum mcp_identity_kind {
  MCP_IDENTITY_URI = 0, /* a URI SAN */
  MCP_IDENTITY_DNS = 1, /* a DNS SAN */
  MCP_IDENTITY_CN = 2,  /* the subject's common name (the first one kept) */
  /* A SAN whose kind the certificate reader does not say (older gRPC
   * reports every SAN under one name): "scheme://..." is a URI, an IP
   * address or anything with '@' is not an identity, the rest is DNS. */
  MCP_IDENTITY_SAN = 3
} mcp_identity_kind;

/* Candidates being collected, by pointer (they must stay valid until
 * mcp_identities_build()). Initialize with memset 0. */
typedef struct mcp_identity_builder {
  const char *v[3][MCP_IDENTITY_MAX];
  size_t len[3][MCP_IDENTITY_MAX];
  size_t n[3];
  int unusable; /* a value broke the limits above: no identity at all */
} mcp_identity_builder;

/* Adds a candidate of |kind| (|len| bytes at |v|), or drops it by the
 * rules above (an unusable value marks the whole builder). */
MCP_EXTERN void mcp_identity_add(mcp_identity_builder *b,
                                 mcp_identity_kind kind, const char *v,
                                 size_t len);

/* A peer's identities: one allocation (|v|: the strings follow the
 * array), in the order of mcp_peer. */
typedef struct mcp_identities {
  char **v;
  size_t n, nuris, ndns;
  int has_cn;
} mcp_identities;

/*
 * Copies the candidates of |b| into |*out| (freed first), allocated with
 * |mem| (NULL: the C library); none when |b| saw an unusable value.
 * Errors: NOMEM, and then |*out| is empty: a peer whose identities cannot
 * be kept has none (fail closed).
 */
MCP_EXTERN int mcp_identities_build(const mcp_identity_builder *b,
                                    const mcp_mem *mem, mcp_identities *out);

/* Frees what |ids| holds (with the |mem| it was built with) and empties
 * it. */
MCP_EXTERN void mcp_identities_free(mcp_identities *ids, const mcp_mem *mem);

/* Points the identity fields of |peer| (identities, uris, dns_names,
 * common_name, authenticated) at |ids|. */
MCP_EXTERN void mcp_identities_peer(const mcp_identities *ids, mcp_peer *peer);

/* ------------------------------------------------------------------ */
/* Access lists                                                        */
/* ------------------------------------------------------------------ */

/*
 * An allow or deny list of peer identities. A rule is an action (allow or
 * deny) and a pattern: an exact identity, or a prefix ending in '*'
 * ("spiffe://cluster.local/ns/istio-system/" then '*'; "*" alone is any
 * identity). Matching is byte for byte (case-sensitive). A peer is:
 *   1. refused with UNAUTHENTICATED when it has no verified identity;
 *   2. refused with PERMISSION_DENIED when any of its identities matches
 *      a deny rule (deny wins);
 *   3. allowed when any of its identities matches an allow rule;
 *   4. otherwise allowed if the list has no allow rule at all (it is a
 *      deny list) but at least one deny rule, and refused with
 *      PERMISSION_DENIED if not (an allow list, or an empty list: fail
 *      closed).
 * The rules are those of mcp_acl_add() (kept for the list's life) and
 * those of the last mcp_acl_parse() (replaced as a whole).
 *
 * Text format: one rule per line, "allow PATTERN" or "deny PATTERN"; a
 * bare PATTERN is an allow rule. '#' starts a comment (at the start of a
 * line or after a blank). At most 1 MiB.
 */
typedef struct mcp_acl mcp_acl;

typedef enum mcp_acl_action {
  MCP_ACL_ALLOW = 0,
  MCP_ACL_DENY = 1
} mcp_acl_action;

/* Creates an empty list (it allows nobody), allocated with |mem| (NULL:
 * the C library; copied). On failure |*pacl| is untouched. Errors:
 * INVALID_ARGUMENT (|pacl| NULL), NOMEM. */
MCP_EXTERN int mcp_acl_new(mcp_acl **pacl, const mcp_mem *mem);

/* NULL is a no-op. */
MCP_EXTERN void mcp_acl_del(mcp_acl *acl);

/* Adds a lasting rule. |pattern| is copied. Errors: INVALID_ARGUMENT (a
 * bad action, an empty pattern, a blank or control byte, or a '*' that
 * does not end it), NOMEM; on failure nothing changes. */
MCP_EXTERN int mcp_acl_add(mcp_acl *acl, mcp_acl_action action,
                           const char *pattern);

/* Replaces the parsed rules with those of |text| (|len| bytes). On
 * failure the rules in use stay and |err| (may be NULL) says where
 * ("line 3: unknown keyword 'alow'"). Errors: INVALID_ARGUMENT, LIMIT
 * (over 1 MiB), NOMEM. */
MCP_EXTERN int mcp_acl_parse(mcp_acl *acl, const char *text, size_t len,
                             char *err, size_t errlen);

/* The number of rules (lasting and parsed). */
MCP_EXTERN size_t mcp_acl_count(const mcp_acl *acl);

/* The decision for |peer|: 0 (allowed), MCP_CODE_UNAUTHENTICATED or
 * MCP_CODE_PERMISSION_DENIED. */
MCP_EXTERN int mcp_acl_check(const mcp_acl *acl, const mcp_peer *peer);

/* mcp_acl_check() as an mcp_authorize_fn: |acl| is the list. */
MCP_EXTERN int mcp_acl_authorize(const mcp_peer *peer, void *acl);

#ifdef __cplusplus
}
#endif

#endif /* MCP_AUTH_H */
