/* The peer's identities, read from gRPC's auth context (the rules of what
 * is an identity are the core's, mcp/auth.h), and the call to the
 * application's authorization callback. */
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>

#include "internal.h"

static int prop_is(const grpc_auth_property *p, const char *s) {
  size_t n = strlen(s);
  return p->value_length == n && memcmp(p->value, s, n) == 0;
}

void mcp_grpc_stream_identity_free(mcp_grpc_stream *s) {
  mcp_identities_free(&s->ids, &s->ep->mem);
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

  mcp_identity_builder b;
  memset(&b, 0, sizeof(b));
  int typed = 0; /* gRPC reports URI and DNS SANs apart (1.42 and later) */
  it = grpc_auth_context_property_iterator(ctx);
  while ((p = grpc_auth_property_iterator_next(&it))) {
    if (strcmp(p->name, GRPC_PEER_URI_PROPERTY_NAME) == 0) {
      mcp_identity_add(&b, MCP_IDENTITY_URI, p->value, p->value_length);
      typed = 1;
    } else if (strcmp(p->name, GRPC_PEER_DNS_PROPERTY_NAME) == 0) {
      mcp_identity_add(&b, MCP_IDENTITY_DNS, p->value, p->value_length);
      typed = 1;
    } else if (strcmp(p->name, GRPC_X509_CN_PROPERTY_NAME) == 0) {
      mcp_identity_add(&b, MCP_IDENTITY_CN, p->value, p->value_length);
    } else if (strcmp(p->name, GRPC_PEER_IP_PROPERTY_NAME) == 0 ||
               strcmp(p->name, GRPC_PEER_EMAIL_PROPERTY_NAME) == 0) {
      typed = 1;
    }
  }
  if (!typed) {
    /* Older gRPC: every SAN under one name; the core tells them apart. */
    it = grpc_auth_context_find_properties_by_name(ctx,
                                                   GRPC_X509_SAN_PROPERTY_NAME);
    while ((p = grpc_auth_property_iterator_next(&it)))
      mcp_identity_add(&b, MCP_IDENTITY_SAN, p->value, p->value_length);
  }
  /* Without memory, the peer has no identity: fail closed. */
  (void)mcp_identities_build(&b, &s->ep->mem, &s->ids);
  grpc_auth_context_release(ctx);
}

int mcp_grpc_stream_authorize(mcp_grpc_stream *s, const char **details) {
  mcp_grpc_ep *ep = s->ep;
  mcp_peer peer;
  memset(&peer, 0, sizeof(peer));
  peer.address = s->peer ? s->peer : "";
  peer.dialed = s->rec.dialed;
  peer.tls = s->tls;
  mcp_identities_peer(&s->ids, &peer);
  return mcp_authorize(ep->opts.authorize, ep->opts.authorize_user_data, &peer,
                       details);
}
