/* Dialing: one stream per connection, HTTP/2 with prior knowledge,
 * reconnecting forever with jittered exponential backoff. */
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "internal.h"

static void on_retry(uv_timer_t *t);

static void on_retry_closed(uv_handle_t *h) { mcp_h2c_ep_unref(h->data); }

void mcp_h2c_client_start(mcp_h2c_ep *ep) {
  uv_timer_init(ep->loop, &ep->retry);
  ep->retry.data = ep;
  ep->refs++;
  uv_timer_start(&ep->retry, on_retry, 0, 0); /* the first attempt: now */
}

void mcp_h2c_client_stop(mcp_h2c_ep *ep) {
  uv_timer_stop(&ep->retry);
  uv_close((uv_handle_t *)&ep->retry, on_retry_closed);
}

static void retry_later(mcp_h2c_ep *ep) {
  if (ep->stopping || ep->finished)
    return;
  mcp_tstamp d = mcp_backoff_next(&ep->backoff);
  uv_timer_start(&ep->retry, on_retry,
                 (d + MCP_MILLISECONDS - 1) / MCP_MILLISECONDS, 0);
}

void mcp_h2c_client_conn_gone(mcp_h2c_ep *ep, mcp_h2c_conn *c) {
  if (ep->dial == c)
    ep->dial = NULL;
  retry_later(ep);
}

void mcp_h2c_client_stream_gone(mcp_h2c_ep *ep, mcp_tstamp lived,
                                uint64_t received) {
  mcp_backoff_stream_ended(&ep->backoff, lived, received);
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
  if (mcp_h2c_session_new(c, 0) < 0 || !c->streams ||
      mcp_h2c_stream_submit_request(c->streams) < 0) {
    mcp_h2c_conn_close(c, MCP_CODE_RESOURCE_EXHAUSTED,
                       mcp_strerror(MCP_ERR_NOMEM));
    return;
  }
  c->last_recv = mcp_h2c_now();
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

static void attempt(mcp_h2c_ep *ep) {
  /* A list: each attempt dials the next address (after the backoff). The
   * elements were checked when the endpoint was made; only memory can
   * fail here, and then the current address is dialed again. */
  if (ep->dialed_once && ep->naddrs > 1)
    (void)mcp_h2c_ep_select_addr(ep, (ep->addr_index + 1) % ep->naddrs);
  ep->dialed_once = 1;
  mcp_h2c_conn *c = mcp_h2c_conn_new(ep, 1);
  if (!c) {
    retry_later(ep);
    return;
  }
  snprintf(c->peer, sizeof(c->peer), "%.*s", (int)sizeof(c->peer) - 1,
           ep->target);
  ep->dial = c;
  mcp_h2c_stream *s = mcp_h2c_stream_new(c, 0);
  if (!s) {
    mcp_h2c_conn_close(c, MCP_CODE_RESOURCE_EXHAUSTED,
                       mcp_strerror(MCP_ERR_NOMEM));
    return;
  }
  s->dialed = 1;
  s->service = ep->role == MCP_H2C_ROLE_SINK ? mcp_sink_state_service(ep->state)
                                             : MCP_SERVICE_RESOURCE;
  int rv = mcp_h2c_stream_open_session(s);
  if (rv < 0) {
    mcp_h2c_conn_close(c, mcp_error_grpc_status(rv), mcp_strerror(rv));
    return;
  }
  mcp_h2c_notify_stream(s, MCP_H2C_STREAM_OPENED);
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
  rv = uv_getaddrinfo(ep->loop, &c->gai, on_resolved, ep->addr.host,
                      ep->addr.port, &hints);
  if (rv < 0) {
    c->resolving = 0;
    fail(c, "resolve", rv);
    mcp_h2c_conn_unref(c);
  }
}

static void on_retry(uv_timer_t *t) {
  mcp_h2c_ep *ep = t->data;
  if (!ep->stopping && !ep->dial)
    attempt(ep);
}
