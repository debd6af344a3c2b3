/* Dialing: the calls of an mcp_client_def (the client object's, or a
 * dialing source's or sink's MCP side's: the same path) sharing one
 * connection; HTTP/2 with prior knowledge. When a call is tried again is
 * the protocol's (open() says when, ended() hears each call: MCP's
 * reconnection is its side's, the core's); the connection is reconnected
 * through the core's mcp_redial (each connection is an attempt; its
 * calls' messages count for it). */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "internal.h"

static void on_retry(uv_timer_t *t);

static void on_retry_closed(uv_handle_t *h) { mcp_h2c_ep_unref(h->data); }

static void on_cexp(uv_timer_t *t);

void mcp_h2c_client_start(mcp_h2c_ep *ep) {
  uv_timer_init(ep->loop, &ep->retry);
  ep->retry.data = ep;
  ep->refs++;
  uv_timer_start(&ep->retry, on_retry, 0, 0); /* the first attempt: now */
  if (mcp_h2c_runs_client(ep)) {
    uv_timer_init(ep->loop, &ep->cexp);
    ep->cexp.data = ep;
    ep->refs++;
  }
}

void mcp_h2c_client_stop(mcp_h2c_ep *ep) {
  uv_timer_stop(&ep->retry);
  uv_close((uv_handle_t *)&ep->retry, on_retry_closed);
  if (mcp_h2c_runs_client(ep)) {
    uv_timer_stop(&ep->cexp);
    uv_close((uv_handle_t *)&ep->cexp, on_retry_closed);
  }
}

/* ------------------------------------------------------------------ */
/* mcp_h2c_client: the calls of an mcp_client_def                      */
/* ------------------------------------------------------------------ */

mcp_h2c_conn *mcp_h2c_client_conn(mcp_h2c_ep *ep) {
  mcp_h2c_conn *c = ep->dial;
  if (!c || c->closing || c->goaway_recv || c->draining || ep->stopping)
    return NULL;
  return c;
}

/* A call that could not start: as if it ended at once. */
static void call_fail(mcp_h2c_stream *s, int status, const char *details) {
  s->finishing = 1;
  s->rec.status = status;
  mcp_h2c_stream_set_details(s, details);
  mcp_h2c_notify_stream(s, MCP_H2C_STREAM_CLOSED);
  mcp_h2c_stream_free(s); /* deletes the driver, then ended() */
}

static void start_call(mcp_h2c_ep *ep, mcp_h2c_conn *c, size_t slot,
                       mcp_stream *st, mcp_tstamp now) {
  const mcp_client_def *d = &ep->cdef;
  mcp_h2c_stream *s = mcp_h2c_stream_new(c, 0);
  if (!s) {
    mcp_stream_del(st);
    d->ended(d->user_data, slot, MCP_CODE_RESOURCE_EXHAUSTED,
             mcp_strerror(MCP_ERR_NOMEM), now);
    return;
  }
  s->rec.dialed = 1;
  s->slot = slot;
  s->in_slot = 1;
  ep->slots[slot] = s;
  mcp_h2c_stream_attach(s, st, now);
  if (ep->side && ep->role == MCP_H2C_ROLE_SINK) /* sink_finish() ends it */
    ep->sink_stream = s;
  const char *m = d->method(d->user_data, slot);
  size_t n = strlen(m ? m : "");
  s->hd.path = mcp_h2c_malloc(&ep->mem, n + 1);
  if (!s->hd.path) {
    call_fail(s, MCP_CODE_RESOURCE_EXHAUSTED, mcp_strerror(MCP_ERR_NOMEM));
    return;
  }
  memcpy(s->hd.path, m ? m : "", n + 1);
  if (n == 0 || s->hd.path[0] != '/') {
    call_fail(s, MCP_CLIENT_BAD_METHOD_CODE, MCP_CLIENT_BAD_METHOD_DETAILS);
    return;
  }
  mcp_h2c_notify_stream(s, MCP_H2C_STREAM_OPENED);
  /* Ready: the request goes now; otherwise once ready. */
  if (c->proto == MCP_H2C_PROTO_H2 && c->h2 && c->peer_settings &&
      mcp_h2c_stream_submit_request(s) < 0)
    call_fail(s, MCP_CODE_RESOURCE_EXHAUSTED, mcp_strerror(MCP_ERR_NOMEM));
}

static void arm_cexp(mcp_h2c_ep *ep, mcp_tstamp now) {
  mcp_tstamp t = ep->cdef.get_expiry ? ep->cdef.get_expiry(ep->cdef.user_data)
                                     : MCP_TSTAMP_MAX;
  if (t == MCP_TSTAMP_MAX) {
    uv_timer_stop(&ep->cexp);
    return;
  }
  /* At least 1 ms: an expiry in the past must not spin the loop. */
  uint64_t delay =
      t <= now ? 1 : (t - now + MCP_MILLISECONDS - 1) / MCP_MILLISECONDS;
  uv_timer_start(&ep->cexp, on_cexp, delay, 0);
}

void mcp_h2c_client_fill(mcp_h2c_ep *ep, mcp_h2c_conn *c) {
  if (!mcp_h2c_runs_client(ep) || ep->stopping || ep->finished ||
      ep->in_fill)
    return;
  if (!c || c != mcp_h2c_client_conn(ep)) {
    uv_timer_stop(&ep->cexp); /* asked again once a connection exists */
    return;
  }
  ep->in_fill = 1;
  const mcp_client_def *d = &ep->cdef;
  mcp_tstamp now = mcp_h2c_now();
  for (size_t i = 0; i < d->nslots && !c->closing; ++i) {
    if (ep->slots[i])
      continue;
    mcp_stream *st = NULL;
    int rv = d->open(d->user_data, i, now, &st);
    if (rv > 0 && st)
      start_call(ep, c, i, st, now);
    else if (st) /* a stream with "not now": ours to free */
      mcp_stream_del(st);
  }
  arm_cexp(ep, now);
  ep->in_fill = 0;
}

static void on_cexp(uv_timer_t *t) {
  mcp_h2c_ep *ep = t->data;
  mcp_h2c_conn *c = mcp_h2c_client_conn(ep);
  if (c)
    mcp_h2c_conn_kick(c); /* fills the slots */
}

void mcp_h2c_client_call_gone(mcp_h2c_stream *s) {
  mcp_h2c_ep *ep = s->c->ep;
  s->in_slot = 0;
  if (ep->slots[s->slot] == s)
    ep->slots[s->slot] = NULL;
  if (ep->stopping)
    return; /* mcp_h2c_client_del(): no callback */
  const mcp_client_def *d = &ep->cdef;
  d->ended(d->user_data, s->slot,
           s->finishing ? s->rec.status : MCP_CODE_UNKNOWN,
           s->rec.details ? s->rec.details : "", mcp_h2c_now());
  /* open() is asked again; not for a call that never went out (a method
   * that is not a path, no memory: call_fail()), which waits for the
   * next event as on the gRPC transport: a protocol answering 1 at once
   * would otherwise spin the loop. */
  mcp_h2c_conn *c = mcp_h2c_client_conn(ep);
  if (c && s->id != 0)
    mcp_h2c_conn_mark(c);
}

void mcp_h2c_client_end_all(mcp_h2c_ep *ep) {
  const mcp_client_def *d = &ep->cdef;
  mcp_tstamp now = mcp_h2c_now();
  for (size_t i = 0; i < d->nslots; ++i) {
    mcp_h2c_stream *s = ep->slots[i];
    if (!s)
      continue;
    /* Its stream was deleted by the finish that ended it. */
    ep->slots[i] = NULL;
    s->in_slot = 0;
    d->ended(d->user_data, i, s->finishing ? s->rec.status : MCP_CODE_CANCELLED,
             s->rec.details ? s->rec.details : "", now);
  }
}

int mcp_h2c_client_connected(mcp_h2c_ep *ep, mcp_h2c_conn *c) {
  (void)ep;
  if (c->proto != MCP_H2C_PROTO_H2 || !c->h2 || !c->peer_settings)
    return 0;
  for (mcp_h2c_stream *s = c->streams; s; s = s->next)
    if (s->id == 0 && !s->finishing && mcp_h2c_stream_submit_request(s) < 0)
      return MCP_ERR_NOMEM;
  return 0;
}

static void retry_later(mcp_h2c_ep *ep) {
  if (ep->stopping || ep->finished)
    return;
  mcp_tstamp d = mcp_redial_ended(&ep->redial, mcp_h2c_now());
  uv_timer_start(&ep->retry, on_retry,
                 (d + MCP_MILLISECONDS - 1) / MCP_MILLISECONDS, 0);
}

void mcp_h2c_client_conn_gone(mcp_h2c_ep *ep, mcp_h2c_conn *c) {
  if (ep->dial == c)
    ep->dial = NULL;
  /* The attempt ends with its connection; the core's healthy rule counts
   * the messages its calls received (bytes such as the server's SETTINGS
   * do not count). */
  retry_later(ep);
}

void mcp_h2c_client_stream_gone(mcp_h2c_ep *ep, mcp_h2c_conn *c,
                                uint64_t received) {
  if (c == ep->dial) /* not one of a connection replaced */
    mcp_redial_received(&ep->redial, received);
}

static void fail(mcp_h2c_conn *c, const char *what, int err) {
  char d[256];
  snprintf(d, sizeof(d), "%s %s: %s", what, c->peer, uv_strerror(err));
  mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, d);
}

static void on_connect(uv_connect_t *req, int status) {
  mcp_h2c_conn *c = MCP_H2C_CONTAINER(req, mcp_h2c_conn, connect_req);
  if (c->closing) /* UV_ECANCELED: the handle is closing */
    return;
  if (status < 0) {
    fail(c, "connect", status);
    return;
  }
  if (!c->ep->addr.is_unix)
    uv_tcp_nodelay(&c->h.tcp, 1);
  mcp_h2c_conn_name_peer(c);
  mcp_h2c_ep *ep = c->ep;
  /* TLS: the frames below wait in the write buffer until the handshake
   * is done and the server authorized (conn.c); the ClientHello goes
   * first. */
  if (ep->tls) {
    char why[256];
    if (mcp_h2c_tls_conn_start(c) < 0) {
      mcp_h2c_conn_close(c, MCP_CODE_RESOURCE_EXHAUSTED,
                         mcp_strerror(MCP_ERR_NOMEM));
      return;
    }
    if (mcp_h2c_tls_handshake(c, why, sizeof(why)) < 0) {
      ep->tls_handshake_failures++;
      mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, why);
      return;
    }
  }
  /* The calls are sent once the server's SETTINGS came (its stream limit
   * known, as gRPC's READY): the kick does it. */
  if (mcp_h2c_session_new(c, 0) < 0) {
    mcp_h2c_conn_close(c, MCP_CODE_RESOURCE_EXHAUSTED,
                       mcp_strerror(MCP_ERR_NOMEM));
    return;
  }
  c->last_recv = c->connected_at = mcp_h2c_now();
  mcp_h2c_conn_start(c);
  mcp_h2c_conn_kick(c);
}

static void on_resolved(uv_getaddrinfo_t *req, int status,
                        struct addrinfo *res) {
  mcp_h2c_conn *c = MCP_H2C_CONTAINER(req, mcp_h2c_conn, gai);
  c->resolving = 0;
  if (!c->closing) {
    if (status < 0 || !res) {
      fail(c, "resolve", status < 0 ? status : UV_EAI_NONAME);
    } else {
      const struct addrinfo *ai = res;
      for (const struct addrinfo *i = res; i; i = i->ai_next)
        if (i->ai_family == AF_INET) { /* IPv4 first ("localhost") */
          ai = i;
          break;
        }
      int rv =
          uv_tcp_connect(&c->connect_req, &c->h.tcp, ai->ai_addr, on_connect);
      if (rv < 0)
        fail(c, "connect", rv);
    }
  }
  if (res)
    uv_freeaddrinfo(res);
  mcp_h2c_conn_unref(c); /* the resolution's reference */
}

/* Resolves (TCP) and connects |c| to the address selected. */
static void dial(mcp_h2c_ep *ep, mcp_h2c_conn *c) {
  if (ep->addr.is_unix) {
    uv_pipe_connect(&c->connect_req, &c->h.pipe, ep->addr.path, on_connect);
    return;
  }
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  c->refs++;
  c->resolving = 1;
  int rv = uv_getaddrinfo(ep->loop, &c->gai, on_resolved, ep->addr.host,
                          ep->addr.port, &hints);
  if (rv < 0) {
    c->resolving = 0;
    fail(c, "resolve", rv);
    mcp_h2c_conn_unref(c);
  }
}

/* The next address of a list (after the backoff). The elements were
 * checked when the endpoint was made; only memory can fail here, and then
 * the current address is dialed again. */
static void next_addr(mcp_h2c_ep *ep) {
  if (ep->dialed_once && ep->naddrs > 1)
    (void)mcp_h2c_ep_select_addr(ep, (ep->addr_index + 1) % ep->naddrs);
  ep->dialed_once = 1;
}

static mcp_h2c_conn *new_dial(mcp_h2c_ep *ep) {
  mcp_h2c_conn *c = mcp_h2c_conn_new(ep, 1);
  if (!c)
    return NULL;
  snprintf(c->peer, sizeof(c->peer), "%.*s", (int)sizeof(c->peer) - 1,
           ep->target);
  ep->dial = c;
  return c;
}

static void attempt(mcp_h2c_ep *ep) {
  next_addr(ep);
  mcp_redial_opened(&ep->redial, mcp_h2c_now());
  mcp_h2c_conn *c = new_dial(ep);
  if (!c) {
    retry_later(ep);
    return;
  }
  /* Calls open on the connection being made; they are sent once it is
   * up, and end with UNAVAILABLE if it cannot be made. */
  mcp_h2c_client_fill(ep, c);
  if (!c->closing)
    dial(ep, c);
}

static void on_retry(uv_timer_t *t) {
  mcp_h2c_ep *ep = t->data;
  if (!ep->stopping && !ep->dial)
    attempt(ep);
}
