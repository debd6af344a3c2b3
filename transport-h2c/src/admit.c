/* Admission on a listener: the core's policy (mcp_admit, mcp.h) applied to
 * gRPC requests, as in the gRPC transport. A waiting stream has no session
 * and no response; what it sends is held unconsumed, so its HTTP/2 window
 * bounds it. Decisions are applied from the idle handle or the admission
 * timer, never from inside another connection's nghttp2 callbacks. */
#include <string.h>

#include "admitopts.h"
#include "internal.h"

static void on_admit_timer(uv_timer_t *t) { mcp_h2c_admit_run(t->data); }

static void on_timer_closed(uv_handle_t *h) { mcp_h2c_ep_unref(h->data); }

int mcp_h2c_admit_init(mcp_h2c_ep *ep) {
  mcp_admit_options ao = MCP_ADMIT_OPTIONS_OF(&ep->opts);
  int rv = mcp_admit_new(&ep->admit, &ao, &ep->mem, mcp_h2c_now());
  if (rv < 0)
    return rv;
  uv_timer_init(ep->loop, &ep->admit_timer);
  ep->admit_timer.data = ep;
  uv_unref((uv_handle_t *)&ep->admit_timer); /* keeps no loop alive alone */
  ep->refs++;
  return 0;
}

void mcp_h2c_admit_close(mcp_h2c_ep *ep) {
  if (!ep->admit)
    return;
  uv_timer_stop(&ep->admit_timer);
  uv_close((uv_handle_t *)&ep->admit_timer, on_timer_closed);
}

void mcp_h2c_admit_free(mcp_h2c_ep *ep) {
  mcp_admit_del(ep->admit);
  ep->admit = NULL;
}

/* Runs the policy on the next idle turn. */
static void later(mcp_h2c_ep *ep) {
  ep->admit_dirty = 1;
  mcp_h2c_ep_schedule(ep);
}

static void apply(mcp_h2c_stream *s, const mcp_admit_result *r) {
  if (r->verdict == MCP_ADMIT_WAIT) {
    s->waiting = 1;
    s->kind = MCP_H2C_SK_GRPC; /* a status answers it, if it must end */
    return;
  }
  s->waiting = 0;
  if (r->verdict == MCP_ADMIT_RUN)
    mcp_h2c_stream_start(s);
  else
    mcp_h2c_stream_reject(s, r->status, r->details);
  mcp_h2c_conn_mark(s->c);
}

void mcp_h2c_admit(mcp_h2c_stream *s) {
  mcp_h2c_ep *ep = s->c->ep;
  /* Verified identity first, then address (issue 23). */
  char key[MCP_ADMIT_KEY_MAX];
  mcp_peer peer;
  mcp_h2c_conn_peer(s->c, &peer);
  mcp_peer_admit_key(&peer, key, sizeof(key));
  mcp_admit_result r;
  /* A slot for the services that push a whole state first (their def
   * says so); the others are counted and rate-limited, never held. */
  int initial = s->svc && (s->svc->flags & MCP_DEF_INITIAL_SYNC);
  int rv = mcp_admit_stream(ep->admit, key, initial, s, mcp_h2c_now(),
                            &s->ticket, &r);
  if (rv < 0) {
    mcp_h2c_stream_reject(s, MCP_CODE_RESOURCE_EXHAUSTED, mcp_strerror(rv));
    return;
  }
  apply(s, &r);
  if (r.verdict == MCP_ADMIT_WAIT)
    later(ep); /* it may run at once (only peers at their share wait) */
}

void mcp_h2c_admit_run(mcp_h2c_ep *ep) {
  ep->admit_dirty = 0;
  if (!ep->admit || ep->stopping)
    return;
  mcp_tstamp now = mcp_h2c_now();
  mcp_admit_result r;
  while (mcp_admit_next(ep->admit, now, &r)) {
    mcp_h2c_stream *s = r.user;
    if (r.verdict == MCP_ADMIT_REFUSE)
      s->ticket = NULL; /* freed by the policy */
    apply(s, &r);
  }
  mcp_tstamp at = mcp_admit_get_expiry(ep->admit);
  if (at == MCP_TSTAMP_MAX) {
    uv_timer_stop(&ep->admit_timer);
    return;
  }
  uint64_t ms = at > now ? (at - now + MCP_MILLISECONDS - 1) / MCP_MILLISECONDS
                         : 0;
  uv_timer_start(&ep->admit_timer, on_admit_timer, ms, 0);
}

void mcp_h2c_admit_check_initial(mcp_h2c_stream *s, mcp_tstamp now) {
  mcp_h2c_ep *ep = s->c->ep;
  if (!s->eng || !mcp_admit_ticket_initial(s->ticket))
    return;
  if (mcp_stream_initial_sent(s->eng, now)) {
    mcp_admit_initial_done(ep->admit, s->ticket);
    later(ep);
  }
}

int mcp_h2c_admit_hold(mcp_h2c_stream *s, const uint8_t *p, size_t n) {
  if (mcp_buf_append(&s->held, p, n) < 0)
    return MCP_ERR_NOMEM;
  s->c->ep->read_buffered += n;
  return 0;
}

void mcp_h2c_admit_leave(mcp_h2c_stream *s) {
  mcp_h2c_conn *c = s->c;
  mcp_h2c_ep *ep = c->ep;
  if (s->held.len) {
    /* Never delivered: give the connection's window back. */
    ep->read_buffered -= s->held.len;
    if (c->h2)
      nghttp2_session_consume_connection(c->h2, s->held.len);
    mcp_buf_free(&s->held);
  }
  s->waiting = 0;
  if (s->ticket) {
    mcp_admit_release(ep->admit, s->ticket);
    s->ticket = NULL;
    later(ep); /* what it held may go to a waiting stream */
  }
}
