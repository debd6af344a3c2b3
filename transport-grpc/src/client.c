/* Dialing: the channel of each connection attempt, to the next address,
 * with the TLS files as they are now (client_svc.c runs the calls). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "internal.h"

const char *mcp_grpc_method(mcp_service service, int sink_dials) {
  return mcp_service_method(service, sink_dials);
}

/* The address of this attempt: |address| is a comma-separated list, and
 * each attempt dials the next element (after the backoff). */
static const char *next_target(mcp_grpc_ep *ep) {
  size_t n = 1;
  for (const char *p = ep->address; (p = strchr(p, ',')) != NULL; ++p)
    ++n;
  if (ep->dialed_once)
    ep->dial_index = (ep->dial_index + 1) % n;
  ep->dialed_once = 1;
  const char *s = ep->address;
  for (size_t k = 0; k < ep->dial_index; ++k)
    s = strchr(s, ',') + 1;
  snprintf(ep->target, sizeof(ep->target), "%.*s",
           (int)strcspn(s, ","), s);
  return ep->target;
}

grpc_channel *mcp_grpc_channel_new(mcp_grpc_ep *ep) {
  size_t n;
  grpc_arg *a = mcp_grpc_args(ep, 0, &n);
  if (!a)
    return NULL;
  grpc_channel_args args = {n, a};
  grpc_channel_credentials *creds = ep->opts.channel_credentials;
  grpc_channel_credentials *own = NULL;
  if (ep->tls) /* the files as they are now: rotated ones are picked up */
    creds = own = mcp_grpc_tls_channel_credentials(ep->tls);
  else if (!creds)
    creds = own = grpc_insecure_credentials_create();
  if (!creds) {
    mcp_grpc_free(&ep->mem, a);
    return NULL;
  }
  grpc_channel *ch = grpc_channel_create(next_target(ep), creds, &args);
  mcp_grpc_free(&ep->mem, a);
  if (own)
    grpc_channel_credentials_release(own);
  return ch;
}
