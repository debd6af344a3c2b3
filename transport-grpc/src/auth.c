/* The peer's identities, read from gRPC's auth context, and the call to
 * the application's authorization callback. */
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>

#include "internal.h"

#define MAX_IDS 64       /* identities kept per peer */
#define MAX_ID_LEN 4096  /* bytes of one identity */

typedef struct id_list {
  const char *v[MAX_IDS];
  size_t len[MAX_IDS];
  size_t n, bytes;
} id_list;

static void add(id_list *l, const char *v, size_t len) {
  /* A value with a NUL inside could match what it does not say. */
  if (len == 0 || len > MAX_ID_LEN || memchr(v, '\0', len) || l->n == MAX_IDS)
    return;
  l->v[l->n] = v;
  l->len[l->n] = len;
  l->n++;
  l->bytes += len + 1;
}

static int prop_is(const grpc_auth_property *p, const char *s) {
  size_t n = strlen(s);
  return p->value_length == n && memcmp(p->value, s, n) == 0;
}

/* An IP SAN as the combined SAN property shows it: digits and dots, or
 * an IPv6 address (':' and hex digits). */
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

void mcp_grpc_stream_identity_free(mcp_grpc_stream *s) {
  mcp_grpc_free(&s->ep->mem, s->ids);
  s->ids = NULL;
  s->nids = s->nuris = s->ndns = 0;
  s->has_cn = 0;
}

void mcp_grpc_stream_identify(mcp_grpc_stream *s) {
  mcp_grpc_stream_identity_free(s);
  s->tls = 0;
  grpc_auth_context *ctx = grpc_call_auth_context(s->call);
  if (!ctx)
    return;
  grpc_auth_property_iterator it = grpc_auth_context_find_properties_by_name(
      ctx, GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME);
  const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
  s->tls = p && (prop_is(p, GRPC_SSL_TRANSPORT_SECURITY_TYPE) ||
                 prop_is(p, GRPC_TLS_TRANSPORT_SECURITY_TYPE));
  /* gRPC marks the peer authenticated when its verified certificate gave
   * it an identity (a SAN or a CN). */
  if (!s->tls || !grpc_auth_context_peer_is_authenticated(ctx)) {
    grpc_auth_context_release(ctx);
    return;
  }

  id_list uris, dns, cn;
  memset(&uris, 0, sizeof(uris));
  memset(&dns, 0, sizeof(dns));
  memset(&cn, 0, sizeof(cn));
  int typed = 0; /* gRPC reports URI and DNS SANs apart (1.42 and later) */
  it = grpc_auth_context_property_iterator(ctx);
  while ((p = grpc_auth_property_iterator_next(&it))) {
    if (strcmp(p->name, GRPC_PEER_URI_PROPERTY_NAME) == 0) {
      add(&uris, p->value, p->value_length);
      typed = 1;
    } else if (strcmp(p->name, GRPC_PEER_DNS_PROPERTY_NAME) == 0) {
      add(&dns, p->value, p->value_length);
      typed = 1;
    } else if (strcmp(p->name, GRPC_X509_CN_PROPERTY_NAME) == 0 && !cn.n) {
      add(&cn, p->value, p->value_length);
    } else if (strcmp(p->name, GRPC_PEER_IP_PROPERTY_NAME) == 0 ||
               strcmp(p->name, GRPC_PEER_EMAIL_PROPERTY_NAME) == 0) {
      typed = 1;
    }
  }
  if (!typed) {
    /* Older gRPC: every SAN under one name; tell them apart by form. */
    it = grpc_auth_context_find_properties_by_name(ctx,
                                                   GRPC_X509_SAN_PROPERTY_NAME);
    while ((p = grpc_auth_property_iterator_next(&it))) {
      if (has_scheme(p->value, p->value_length))
        add(&uris, p->value, p->value_length);
      else if (!memchr(p->value, '@', p->value_length) &&
               !looks_like_ip(p->value, p->value_length))
        add(&dns, p->value, p->value_length);
    }
  }

  size_t n = uris.n + dns.n + cn.n;
  if (n > 0) {
    size_t bytes = n * sizeof(char *) + uris.bytes + dns.bytes + cn.bytes;
    char **ids = mcp_grpc_malloc(&s->ep->mem, bytes);
    if (ids) { /* without memory, the peer has no identity: fail closed */
      char *q = (char *)(ids + n);
      size_t k = 0;
      const id_list *lists[3] = {&uris, &dns, &cn};
      for (int l = 0; l < 3; l++) {
        for (size_t i = 0; i < lists[l]->n; i++) {
          memcpy(q, lists[l]->v[i], lists[l]->len[i]);
          q[lists[l]->len[i]] = '\0';
          ids[k++] = q;
          q += lists[l]->len[i] + 1;
        }
      }
      s->ids = ids;
      s->nids = n;
      s->nuris = uris.n;
      s->ndns = dns.n;
      s->has_cn = cn.n > 0;
    }
  }
  grpc_auth_context_release(ctx);
}

int mcp_grpc_stream_authorize(mcp_grpc_stream *s, const char **details) {
  mcp_grpc_ep *ep = s->ep;
  if (!ep->opts.authorize)
    return 0;
  mcp_grpc_peer peer;
  memset(&peer, 0, sizeof(peer));
  peer.address = s->peer ? s->peer : "";
  peer.dialed = s->dialed;
  peer.tls = s->tls;
  peer.authenticated = s->nids > 0;
  peer.identities = (const char *const *)s->ids;
  peer.nidentities = s->nids;
  peer.uris = peer.identities;
  peer.nuris = s->nuris;
  peer.dns_names = s->ids ? peer.identities + s->nuris : NULL;
  peer.ndns_names = s->ndns;
  peer.common_name = s->has_cn ? s->ids[s->nids - 1] : NULL;
  int code = ep->opts.authorize(&peer, ep->opts.authorize_user_data);
  if (code == 0)
    return 0;
  if (code < 1 || code > GRPC_STATUS_UNAUTHENTICATED)
    code = GRPC_STATUS_PERMISSION_DENIED;
  if (code == GRPC_STATUS_UNAUTHENTICATED)
    *details = s->dialed
                   ? "server not authenticated: no verified certificate identity"
                   : "peer not authenticated: no verified certificate identity";
  else if (code == GRPC_STATUS_PERMISSION_DENIED)
    *details = s->dialed ? "permission denied: server identity not allowed"
                         : "permission denied: peer identity not allowed";
  else
    *details = "refused by the authorization policy";
  return code;
}
