/* Who a peer is (the identities of its verified certificate, in one
 * order, by one set of rules) and how an authorization hook's answer
 * becomes a stream's status: the same for every transport (mcp/auth.h). */
#include <mcp/auth.h>

#include "engine_int.h"

int mcp_authorize(mcp_authorize_fn fn, void *user_data, const mcp_peer *peer,
                  const char **details) {
  if (!fn)
    return 0;
  int code = fn(peer, user_data);
  if (code == 0)
    return 0;
  if (code < 1 || code > MCP_CODE_UNAUTHENTICATED)
    code = MCP_CODE_PERMISSION_DENIED;
  if (code == MCP_CODE_UNAUTHENTICATED)
    *details = peer->dialed
                   ? "server not authenticated: no verified certificate identity"
                   : "peer not authenticated: no verified certificate identity";
  else if (code == MCP_CODE_PERMISSION_DENIED)
    *details = peer->dialed ? "permission denied: server identity not allowed"
                            : "permission denied: peer identity not allowed";
  else
    *details = "refused by the authorization policy";
  return code;
}

const char *mcp_tls_files_check(int cert, int key, int listen) {
  if (!cert != !key) {
    return "a certificate needs its key, and a key its certificate";
  }
  if (listen && !cert) {
    return "a listening object needs a certificate and its key";
  }
  return NULL;
}

void mcp_peer_admit_key(const mcp_peer *peer, char *buf, size_t len) {
  if (!len)
    return;
  if (peer->nidentities == 0) {
    mcp_admit_peer_key(peer->address, buf, len);
    return;
  }
  /* "id:" can begin no address form ("ipv4:", "ipv6:", "unix:"). */
  mcp_fmt(buf, len, "id:%s", peer->identities[0]);
}

/* An IP SAN as an untyped SAN shows it: digits and dots, or an IPv6
 * address (':' and hex digits). */
static int looks_like_ip(const char *v, size_t len) {
  int colon = memchr(v, ':', len) != NULL;
  for (size_t i = 0; i < len; i++) {
    char c = v[i];
    int ok = (c >= '0' && c <= '9') || c == '.' ||
             (colon && (c == ':' || (c >= 'a' && c <= 'f') ||
                        (c >= 'A' && c <= 'F')));
    if (!ok)
      return 0;
  }
  return 1;
}

/* "scheme://..." */
static int has_scheme(const char *v, size_t len) {
  for (size_t i = 0; i + 3 <= len; i++)
    if (v[i] == ':' && v[i + 1] == '/' && v[i + 2] == '/')
      return i > 0;
  return 0;
}

void mcp_identity_add(mcp_identity_builder *b, mcp_identity_kind kind,
                      const char *v, size_t len) {
  if (!v || len == 0)
    return;
  /* A value with a NUL inside could match what it does not say. */
  if (len > MCP_IDENTITY_MAX_LEN || memchr(v, '\0', len)) {
    b->unusable = 1;
    return;
  }
  if (kind == MCP_IDENTITY_SAN) {
    if (has_scheme(v, len))
      kind = MCP_IDENTITY_URI;
    else if (!memchr(v, '@', len) && !looks_like_ip(v, len))
      kind = MCP_IDENTITY_DNS;
    else
      return; /* e-mail and IP SANs are not identities */
  }
  if ((unsigned)kind > MCP_IDENTITY_CN)
    return;
  size_t k = (size_t)kind;
  if (kind == MCP_IDENTITY_CN && b->n[k])
    return; /* the first CN only */
  if (b->n[k] == MCP_IDENTITY_MAX) {
    b->unusable = 1;
    return;
  }
  b->v[k][b->n[k]] = v;
  b->len[k][b->n[k]] = len;
  b->n[k]++;
}

void mcp_identities_free(mcp_identities *ids, const mcp_mem *mem) {
  mcp_mem m;
  mcp_mem_init(&m, mem);
  mcp_mem_free(&m, ids->v);
  memset(ids, 0, sizeof(*ids));
}

int mcp_identities_build(const mcp_identity_builder *b, const mcp_mem *mem,
                         mcp_identities *out) {
  mcp_identities_free(out, mem);
  size_t n = b->n[0] + b->n[1] + b->n[2];
  if (n == 0 || b->unusable)
    return 0;
  size_t bytes = n * sizeof(char *);
  for (int k = 0; k < 3; k++)
    for (size_t i = 0; i < b->n[k]; i++)
      bytes += b->len[k][i] + 1;
  mcp_mem m;
  mcp_mem_init(&m, mem);
  char **v = mcp_mem_malloc(&m, bytes);
  if (!v)
    return MCP_ERR_NOMEM;
  char *q = (char *)(v + n);
  size_t j = 0;
  for (int k = 0; k < 3; k++) {
    for (size_t i = 0; i < b->n[k]; i++) {
      memcpy(q, b->v[k][i], b->len[k][i]);
      q[b->len[k][i]] = '\0';
      v[j++] = q;
      q += b->len[k][i] + 1;
    }
  }
  out->v = v;
  out->n = n;
  out->nuris = b->n[MCP_IDENTITY_URI];
  out->ndns = b->n[MCP_IDENTITY_DNS];
  out->has_cn = b->n[MCP_IDENTITY_CN] > 0;
  return 0;
}

void mcp_identities_peer(const mcp_identities *ids, mcp_peer *peer) {
  peer->authenticated = ids->n > 0;
  peer->identities = (const char *const *)ids->v;
  peer->nidentities = ids->n;
  peer->uris = peer->identities;
  peer->nuris = ids->nuris;
  peer->dns_names = ids->v ? peer->identities + ids->nuris : NULL;
  peer->ndns_names = ids->ndns;
  peer->common_name = ids->has_cn ? ids->v[ids->n - 1] : NULL;
}
