/* Dialing MCP: the MCP side's client def (the core's) says when a call is
 * due and hears how each ended (its mcp_redial is MCP's one reconnection
 * policy); each call goes on a fresh channel to the next address, with
 * the TLS files as they are now. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "internal.h"

/* The method of the MCP side's client def (its one slot). */
static const char *dialed_method(const mcp_grpc_ep *ep) {
  const mcp_client_def *d = mcp_side_client(ep->side);
  return d->method(d->user_data, 0);
}

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

static void connect_now(mcp_grpc_ep *ep, mcp_stream *st) {
  /* A new channel per attempt: the attempt's timing is the side's alone,
   * not that of a channel's hidden reconnection state. */
  ep->channel = mcp_grpc_channel_new(ep);
  if (!ep->channel) {
    mcp_stream_del(st);
    mcp_grpc_client_stream_gone(ep, mcp_error_grpc_status(MCP_ERR_NOMEM),
                                mcp_strerror(MCP_ERR_NOMEM));
    return;
  }
  /* Not wait-for-ready: a peer that is down fails the call at once with
   * UNAVAILABLE, and the backoff decides when to try again. */
  grpc_call *call = grpc_channel_create_call(
      ep->channel, NULL, GRPC_PROPAGATE_DEFAULTS, ep->cq,
      grpc_slice_from_static_string(dialed_method(ep)), NULL,
      gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  mcp_grpc_stream_dial(ep, call, st);
}

void mcp_grpc_client_tick(mcp_grpc_ep *ep, mcp_tstamp *deadline) {
  if (ep->stopping || ep->finished || ep->channel) /* an attempt is under way */
    return;
  const mcp_client_def *d = mcp_side_client(ep->side);
  mcp_stream *st = NULL;
  if (d->open(d->user_data, 0, ep->now, &st) == 1 && st) {
    connect_now(ep, st);
    return;
  }
  mcp_stream_del(st); /* "not now" with a stream: not ours to run */
  mcp_tstamp t = d->get_expiry(d->user_data);
  if (t < *deadline)
    *deadline = t;
}

void mcp_grpc_client_stream_gone(mcp_grpc_ep *ep, int status,
                                 const char *details) {
  if (ep->channel)
    grpc_channel_destroy(ep->channel);
  ep->channel = NULL;
  const mcp_client_def *d = mcp_side_client(ep->side);
  d->ended(d->user_data, 0, status, details, ep->now);
}

void mcp_grpc_client_shutdown(mcp_grpc_ep *ep) {
  for (mcp_grpc_stream *s = ep->streams; s; s = s->next)
    mcp_grpc_stream_finish(s, GRPC_STATUS_CANCELLED, "client shutting down");
}
