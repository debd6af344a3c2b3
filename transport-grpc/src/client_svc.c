/* Dialing (mcp_grpc_client, and a dialing source's or sink's MCP side): a
 * protocol's call slots (an mcp_client_def), each holding at most one
 * call, on one connection. The
 * connection is replaced, after the backoff, when a call on it ends with
 * UNAVAILABLE (it could not be made, or it was lost); whether and when a
 * call is tried again is the protocol's choice (open()). */
#include <stdlib.h>
#include <string.h>

#include <grpc/support/time.h>

#include "internal.h"

/* Destroys a replaced connection once its last call is gone. */
static void chan_release(mcp_grpc_ep *ep, mcp_grpc_chan *c) {
  if (!c->retired || c->calls > 0)
    return;
  grpc_channel_destroy(c->ch);
  mcp_grpc_free(&ep->mem, c);
  ep->nchans--;
}

/* No new call goes on the current connection any more. */
static void chan_retire(mcp_grpc_ep *ep) {
  mcp_grpc_chan *c = ep->chan;
  if (!c)
    return;
  ep->chan = NULL;
  c->retired = 1;
  chan_release(ep, c);
}

/* The current connection, or a new one to the next target of the
 * address list (NULL: NOMEM). gRPC connects it at its first call. */
static mcp_grpc_chan *chan_get(mcp_grpc_ep *ep) {
  if (ep->chan)
    return ep->chan;
  mcp_grpc_chan *c = mcp_grpc_calloc(&ep->mem, 1, sizeof(*c));
  if (!c)
    return NULL;
  c->ch = mcp_grpc_channel_new(ep);
  if (!c->ch) {
    mcp_grpc_free(&ep->mem, c);
    return NULL;
  }
  mcp_redial_opened(&ep->redial, ep->now); /* the connection is the attempt */
  ep->chan = c;
  ep->nchans++;
  return c;
}

/* A call that could not start: the protocol hears it as ended, and the
 * next attempt waits for the backoff (a failure to allocate must not
 * spin). */
static void not_started(mcp_grpc_ep *ep, size_t slot, int status,
                        const char *details) {
  (void)mcp_redial_ended(&ep->redial, ep->now);
  chan_retire(ep);
  const mcp_client_def *d = &ep->client_def;
  d->ended(d->user_data, slot, status, details, ep->now);
}

static void start_call(mcp_grpc_ep *ep, size_t slot, mcp_stream *st) {
  const mcp_client_def *d = &ep->client_def;
  const char *method = d->method(d->user_data, slot);
  if (!method || method[0] != '/') {
    mcp_stream_del(st);
    d->ended(d->user_data, slot, MCP_CLIENT_BAD_METHOD_CODE,
             MCP_CLIENT_BAD_METHOD_DETAILS, ep->now);
    return;
  }
  mcp_grpc_chan *c = chan_get(ep);
  if (!c) {
    mcp_stream_del(st);
    not_started(ep, slot, mcp_error_grpc_status(MCP_ERR_NOMEM),
                mcp_strerror(MCP_ERR_NOMEM));
    return;
  }
  /* Not wait-for-ready: a server that is down fails the call at once
   * with UNAVAILABLE, and the backoff decides when to connect again. */
  grpc_slice m = grpc_slice_from_copied_string(method);
  grpc_call *call = grpc_channel_create_call(
      c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, ep->cq, m, NULL,
      gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  grpc_slice_unref(m); /* the call holds its own reference */
  c->calls++;
  if (mcp_grpc_stream_dial_service(ep, call, slot, c, st) < 0) {
    c->calls--;
    not_started(ep, slot, mcp_error_grpc_status(MCP_ERR_NOMEM),
                mcp_strerror(MCP_ERR_NOMEM));
    return;
  }
  if (ep->side && ep->role == MCP_GRPC_ROLE_SINK) /* sink_finish() ends it */
    ep->sink_stream = ep->slots[slot];
}

void mcp_grpc_svc_client_tick(mcp_grpc_ep *ep, mcp_tstamp *deadline) {
  if (ep->stopping || ep->finished) /* finished: a sink that is done */
    return;
  const mcp_client_def *d = &ep->client_def;
  for (size_t i = 0; i < d->nslots; i++) {
    if (ep->slots[i])
      continue;
    if (!ep->chan && !mcp_redial_due(&ep->redial, ep->now)) {
      /* No connection to start a call on before the backoff ends: the
       * free slots are asked then. */
      if (mcp_redial_at(&ep->redial) < *deadline)
        *deadline = mcp_redial_at(&ep->redial);
      break;
    }
    mcp_stream *st = NULL;
    int r = d->open(d->user_data, i, ep->now, &st);
    if (r == 1 && st)
      start_call(ep, i, st);
    else
      mcp_stream_del(st); /* "not now" with a stream: not ours to run */
  }
  if (d->get_expiry) {
    mcp_tstamp t = d->get_expiry(d->user_data);
    if (t < *deadline)
      *deadline = t;
  }
}

void mcp_grpc_svc_client_call_gone(mcp_grpc_ep *ep, size_t slot,
                                   mcp_grpc_chan *c, uint64_t received,
                                   int status, const char *details) {
  ep->slots[slot] = NULL;
  c->calls--;
  if (c == ep->chan) /* the attempt's messages: its calls' together */
    mcp_redial_received(&ep->redial, received);
  if (status == GRPC_STATUS_UNAVAILABLE && c == ep->chan && !ep->stopping) {
    /* The connection could not be made or was lost (or the server is
     * going away): the next one after the backoff, which goes back to
     * its start only after a connection that lasted and carried a
     * message (the core's rule). */
    (void)mcp_redial_ended(&ep->redial, ep->now);
    chan_retire(ep);
  } else if (ep->finished) {
    chan_retire(ep); /* a sink that is done calls no more: let it go */
  } else {
    chan_release(ep, c);
  }
  const mcp_client_def *d = &ep->client_def;
  d->ended(d->user_data, slot, status, details, ep->now);
}

void mcp_grpc_svc_client_shutdown(mcp_grpc_ep *ep) {
  for (mcp_grpc_stream *s = ep->streams; s; s = s->next)
    mcp_grpc_stream_finish(s, GRPC_STATUS_CANCELLED, "client shutting down");
  chan_retire(ep); /* destroyed once its calls are gone */
}
