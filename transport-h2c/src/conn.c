/* One connection: the socket, its read and write buffers, the protocol
 * it speaks (found from the first bytes on a listener), its timer, and the
 * "kick" that moves messages between the streams and the socket. */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "internal.h"

/* HTTP/2's client connection preface. */
static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define PREFACE_LEN (sizeof(preface) - 1)

static void on_timer(uv_timer_t *t);
static void on_closed(uv_handle_t *h);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void tls_recv(mcp_h2c_conn *c, const uint8_t *p, size_t n);

mcp_h2c_conn *mcp_h2c_conn_new(mcp_h2c_ep *ep, int dialed) {
  mcp_h2c_conn *c = mcp_h2c_calloc(&ep->mem, 1, sizeof(*c));
  if (!c)
    return NULL;
  c->probe.mem = c->wfill.mem = c->wflight.mem = c->wtls.mem = &ep->mem;
  c->ep = ep;
  c->dialed = dialed;
  c->proto = dialed ? MCP_H2C_PROTO_DIALING : MCP_H2C_PROTO_PROBE;
  if (ep->addr.is_unix) {
    uv_pipe_init(ep->loop, &c->h.pipe, 0);
    c->h.pipe.data = c;
    c->sock = (uv_stream_t *)&c->h.pipe;
  } else {
    uv_tcp_init(ep->loop, &c->h.tcp);
    c->h.tcp.data = c;
    c->sock = (uv_stream_t *)&c->h.tcp;
  }
  uv_timer_init(ep->loop, &c->timer);
  c->timer.data = c;
  c->refs = 2;
  mcp_tstamp now = mcp_h2c_now();
  c->last_recv = c->idle_since = now;
  c->next = ep->conns;
  if (ep->conns)
    ep->conns->prev = c;
  ep->conns = c;
  ep->nconns++;
  ep->refs++;
  return c;
}

void mcp_h2c_conn_name_peer(mcp_h2c_conn *c) {
  if (c->ep->addr.is_unix) {
    snprintf(c->peer, sizeof(c->peer), "unix:%s", c->ep->addr.path);
    return;
  }
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  char ip[64] = "?";
  if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&ss, &len) != 0) {
    snprintf(c->peer, sizeof(c->peer), "unknown");
    return;
  }
  if (ss.ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
    uv_ip6_name(a, ip, sizeof(ip));
    snprintf(c->peer, sizeof(c->peer), "ipv6:[%s]:%u", ip,
             (unsigned)ntohs(a->sin6_port));
  } else {
    const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
    uv_ip4_name(a, ip, sizeof(ip));
    snprintf(c->peer, sizeof(c->peer), "ipv4:%s:%u", ip,
             (unsigned)ntohs(a->sin_port));
  }
}

void mcp_h2c_conn_unref(mcp_h2c_conn *c) {
  if (--c->refs > 0)
    return;
  mcp_h2c_ep *ep = c->ep;
  ep->write_buffered -= c->wfill.len + c->wflight.len + c->wtls.len;
  mcp_buf_free(&c->wfill);
  mcp_buf_free(&c->wflight);
  mcp_buf_free(&c->wtls);
  mcp_h2c_free(&ep->mem, c);
  mcp_h2c_ep_unref(ep);
}

static void on_closed(uv_handle_t *h) { mcp_h2c_conn_unref(h->data); }

/* ------------------------------------------------------------------ */
/* Lingering close                                                     */
/* ------------------------------------------------------------------ */

/* A listener that closes while its peer still sends (a client told by
 * GOAWAY, or refused, keeps writing what it had queued) would have the
 * kernel answer those bytes with a reset, and a reset can destroy the
 * GOAWAY and the last answers before the peer reads them. So the socket
 * lingers: FIN after the last byte written, then what arrives is read
 * and dropped until the peer ends, goes quiet for LINGER_QUIET_MS, or
 * LINGER_MAX_MS have passed; at most LINGER_CONNS sockets linger at once
 * (past that a socket closes at once, as before). Nothing of the
 * connection is left but its struct, its socket and a write in flight. */
#define LINGER_QUIET_MS 1000
#define LINGER_MAX_MS 5000
#define LINGER_CONNS 256

static void linger_end(mcp_h2c_conn *c) {
  mcp_h2c_ep *ep = c->ep;
  if (!c->lingering)
    return;
  c->lingering = 0;
  if (c->prev)
    c->prev->next = c->next;
  else
    ep->lingering = c->next;
  if (c->next)
    c->next->prev = c->prev;
  ep->nlingering--;
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, on_closed);
  uv_close((uv_handle_t *)c->sock, on_closed);
}

static void linger_timer(uv_timer_t *t) { linger_end(t->data); }

static void linger_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  mcp_h2c_conn *c = st->data;
  if (nread < 0) { /* the peer ended (or broke): nothing left to spare */
    linger_end(c);
    return;
  }
  mcp_tstamp now = mcp_h2c_now(); /* (nanoseconds) */
  if (nread > 0 && now < c->linger_until) {
    uint64_t left = (c->linger_until - now) / 1000000 + 1;
    uv_timer_start(&c->timer, linger_timer,
                   left < LINGER_QUIET_MS ? left : LINGER_QUIET_MS, 0);
  }
}

static void linger_shut(uv_shutdown_t *req, int status) {
  (void)status; /* a failed FIN: the timer or the peer's end closes */
  mcp_h2c_conn_unref(req->data);
}

/* Whether |c|'s socket lingers rather than closing now: a listener's
 * connection whose peer has not ended, while the endpoint runs (a
 * stopping one closes everything at once). */
static int linger(mcp_h2c_conn *c) {
  mcp_h2c_ep *ep = c->ep;
  if (c->dialed || c->eof || ep->stopping || ep->nlingering >= LINGER_CONNS)
    return 0;
  uv_read_stop(c->sock);
  c->reading = 0;
  c->shut.data = c;
  if (uv_shutdown(&c->shut, c->sock, linger_shut) < 0)
    return 0;
  c->refs++; /* the shutdown request's */
  if (uv_read_start(c->sock, on_alloc, linger_read) < 0) {
    uv_close((uv_handle_t *)c->sock, on_closed); /* ends the shutdown */
    uv_close((uv_handle_t *)&c->timer, on_closed);
    return 1;
  }
  /* What was not handed to the socket never will be: only a write in
   * flight (wflight) stays, until the FIN after it, or the close. */
  ep->write_buffered -= c->wfill.len + c->wtls.len;
  mcp_buf_free(&c->wfill);
  mcp_buf_free(&c->wtls);
  c->lingering = 1;
  c->linger_until = mcp_h2c_now() + (mcp_tstamp)LINGER_MAX_MS * 1000000;
  c->prev = NULL;
  c->next = ep->lingering;
  if (ep->lingering)
    ep->lingering->prev = c;
  ep->lingering = c;
  ep->nlingering++;
  uv_timer_start(&c->timer, linger_timer, LINGER_QUIET_MS, 0);
  return 1;
}

void mcp_h2c_conn_linger_stop(mcp_h2c_ep *ep) {
  while (ep->lingering)
    linger_end(ep->lingering);
}

void mcp_h2c_conn_close(mcp_h2c_conn *c, int status, const char *details) {
  if (c->closing)
    return;
  c->closing = 1;
  mcp_h2c_ep *ep = c->ep;
  mcp_h2c_streams_gone(c, status, details);
  if (c->h2) {
    /* nghttp2_session_del() calls no stream-close callback: the streams
     * were freed just above. */
    nghttp2_session_del(c->h2);
    c->h2 = NULL;
  }
  mcp_h2c_http1_free(c);
  mcp_h2c_conn_handshake_over(c);
  mcp_h2c_tls_conn_free(c);
  ep->read_buffered -= c->probe.cap;
  mcp_buf_free(&c->probe);
  if (c->prev)
    c->prev->next = c->next;
  else
    ep->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  ep->nconns--;
  if (c->resolving) /* its callback comes, with UV_ECANCELED if in time */
    uv_cancel((uv_req_t *)&c->gai);
  uv_timer_stop(&c->timer);
  if (!linger(c)) {
    uv_close((uv_handle_t *)&c->timer, on_closed);
    uv_close((uv_handle_t *)c->sock, on_closed); /* cancels a pending write */
  }
  if (c->dialed)
    mcp_h2c_client_conn_gone(ep, c);
  else
    mcp_h2c_server_conn_gone(ep);
}

void mcp_h2c_conn_mark(mcp_h2c_conn *c) {
  c->dirty = 1;
  if (!c->in_kick)
    mcp_h2c_ep_schedule(c->ep);
}

/* ------------------------------------------------------------------ */
/* Writing                                                             */
/* ------------------------------------------------------------------ */

int mcp_h2c_conn_write(mcp_h2c_conn *c, const void *p, size_t n) {
  if (mcp_buf_append(&c->wfill, p, n) < 0)
    return MCP_ERR_NOMEM;
  c->ep->write_buffered += n;
  return 0;
}

static void on_write(uv_write_t *req, int status);
static int wrote(mcp_h2c_conn *c, int status);

static size_t write_limit(const mcp_h2c_conn *c) {
  return (size_t)c->ep->opts.write_buffer_size;
}

static void start_write(mcp_h2c_conn *c) {
  if (c->writing || c->closing)
    return;
  /* What goes next becomes the flight buffer, the empty one the next to
   * fill: the frames themselves, or with TLS their records (encrypted
   * after the handshake; until then only the handshake's own go). */
  mcp_buf *next = &c->wfill;
  if (c->ssl) {
    if (mcp_h2c_tls_output(c, &c->wfill) < 0) {
      mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, "TLS write failed");
      return;
    }
    next = &c->wtls;
  }
  if (next->len == 0)
    return;
  mcp_buf t = c->wflight;
  c->wflight = *next;
  *next = t;
  next->len = 0;
  uv_buf_t b = uv_buf_init((char *)c->wflight.p, (unsigned)c->wflight.len);
  /* Written now when the socket takes it all, as a push to a sink that
   * keeps up does: uv_write() would call back on the next turn of the loop
   * and re-arm the socket's watcher, an epoll_ctl() per write (one per
   * sink and change on a source). */
  int rv = uv_try_write(c->sock, &b, 1);
  if (rv >= 0 && (size_t)rv == c->wflight.len) {
    size_t len = c->wflight.len;
    c->writing = 1;
    if (wrote(c, 0) == 0 &&
        (len >= write_limit(c) || /* streams held back by a full buffer */
         (c->h2 && nghttp2_session_want_write(c->h2))))
      c->dirty = 1; /* the kick goes round again, as on_write()'s would */
    return;
  }
  if (rv < 0 && rv != UV_EAGAIN) {
    mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, uv_strerror(rv));
    return;
  }
  if (rv > 0) /* the rest when the socket has room */
    b = uv_buf_init(b.base + rv, b.len - (unsigned)rv);
  rv = uv_write(&c->wreq, c->sock, &b, 1, on_write);
  if (rv < 0) {
    mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, uv_strerror(rv));
    return;
  }
  c->writing = 1;
}

/* The flight buffer is written (|status| 0) or failed: the accounts, and
 * reading again when it waited for the writes. Returns 0 when the
 * connection goes on. */
static int wrote(mcp_h2c_conn *c, int status) {
  mcp_h2c_ep *ep = c->ep;
  c->writing = 0;
  ep->write_buffered -= c->wflight.len;
  if (status == 0)
    ep->bytes_written += c->wflight.len;
  c->wflight.len = 0;
  if (c->closing)
    return -1;
  if (status < 0) {
    mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, uv_strerror(status));
    return -1;
  }
  if (c->read_paused && c->wfill.len < write_limit(c)) {
    c->read_paused = 0;
    mcp_h2c_conn_start(c);
    if (c->ssl && c->tls_done)
      tls_recv(c, NULL, 0); /* what was decrypted but not read */
  }
  c->last_write = mcp_h2c_now(); /* (the idle buffers' deadline) */
  return c->closing ? -1 : 0;
}

static void on_write(uv_write_t *req, int status) {
  mcp_h2c_conn *c = MCP_H2C_CONTAINER(req, mcp_h2c_conn, wreq);
  if (wrote(c, status) == 0)
    mcp_h2c_conn_kick(c);
}

/* The write buffers, once nothing was written for WBUF_IDLE_MS, are
 * freed: a sync grows them to about twice write_buffer_size each, and ten
 * thousand idle sinks would keep 2.5 GB. Not at once: during a sync a
 * connection often has nothing to write for a moment, and allocating
 * them again each time costs more than the copy they serve. */
#define WBUF_IDLE_MS 1000

static int wbuf_idle(const mcp_h2c_conn *c) {
  return !c->writing && c->wfill.len == 0 && c->wtls.len == 0 &&
         (c->wfill.cap || c->wflight.cap || c->wtls.cap);
}

/* Moves frames from nghttp2 into the write buffer (up to its limit) and
 * starts a write. */
static void flush(mcp_h2c_conn *c) {
  if (c->h2 && c->proto == MCP_H2C_PROTO_H2) {
    int rv = nghttp2_session_send(c->h2);
    if (rv < 0) {
      mcp_h2c_conn_close(c, MCP_CODE_INTERNAL, nghttp2_strerror(rv));
      return;
    }
  }
  start_write(c);
}

/* ------------------------------------------------------------------ */
/* Reading                                                             */
/* ------------------------------------------------------------------ */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  /* Each read is processed completely before the loop reads again, so one
   * buffer per thread serves every connection: nothing is held between
   * reads but what the streams keep (partial messages). */
  static _Thread_local char rbuf[64 << 10];
  *buf = uv_buf_init(rbuf, sizeof(rbuf));
}

static void feed_h2(mcp_h2c_conn *c, const uint8_t *p, size_t n) {
  ssize_t rv = nghttp2_session_mem_recv(c->h2, p, n);
  if (rv < 0)
    mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, nghttp2_strerror((int)rv));
}

/* Listener: HTTP/2 with prior knowledge starts with the preface; anything
 * else is HTTP/1.1. */
static void probe(mcp_h2c_conn *c, const uint8_t *p, size_t n) {
  mcp_h2c_ep *ep = c->ep;
  size_t had = c->probe.cap;
  if (mcp_buf_append(&c->probe, p, n) < 0) {
    mcp_h2c_conn_close(c, MCP_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  ep->read_buffered += c->probe.cap - had;
  size_t m = c->probe.len < PREFACE_LEN ? c->probe.len : PREFACE_LEN;
  mcp_buf b = c->probe;
  if (memcmp(b.p, preface, m) == 0) {
    if (b.len < PREFACE_LEN)
      return; /* not decided yet */
    c->probe = (mcp_buf){0};
    ep->read_buffered -= b.cap;
    if (mcp_h2c_session_new(c, 1) < 0)
      mcp_h2c_conn_close(c, MCP_CODE_RESOURCE_EXHAUSTED, "out of memory");
    else
      feed_h2(c, b.p, b.len);
  } else {
    c->probe = (mcp_buf){0};
    ep->read_buffered -= b.cap;
    if (mcp_h2c_http1_start(c) < 0)
      mcp_h2c_conn_close(c, MCP_CODE_RESOURCE_EXHAUSTED, "out of memory");
    else if (mcp_h2c_http1_feed(c, b.p, b.len) < 0)
      c->draining = 1;
  }
  mcp_h2c_free(b.mem, b.p);
}

/* Plaintext from the peer, to the protocol the connection speaks. */
static void deliver(mcp_h2c_conn *c, const uint8_t *p, size_t n) {
  switch (c->proto) {
  case MCP_H2C_PROTO_PROBE:
    probe(c, p, n);
    break;
  case MCP_H2C_PROTO_HTTP1:
    if (!c->draining && mcp_h2c_http1_feed(c, p, n) < 0)
      c->draining = 1;
    break;
  case MCP_H2C_PROTO_H2:
    feed_h2(c, p, n);
    break;
  case MCP_H2C_PROTO_DIALING:
    break;
  }
}

void mcp_h2c_conn_handshake_over(mcp_h2c_conn *c) {
  if (c->hs_counted) {
    c->hs_counted = 0;
    c->ep->handshaking--;
  }
}

/* The handshake is done: a dialed connection authorizes the server
 * before anything of its own is encrypted. */
static int handshake_done(mcp_h2c_conn *c) {
  mcp_h2c_ep *ep = c->ep;
  mcp_h2c_conn_handshake_over(c);
  ep->tls_handshakes++;
  if (!c->dialed)
    return 0;
  const char *details = NULL;
  int code = mcp_h2c_conn_authorize(c, &details);
  if (code == 0)
    return 0;
  mcp_h2c_conn_close(c, code, details);
  return -1;
}

static void tls_recv_lent(mcp_h2c_conn *c);

/* Ciphertext in (lent to the SSL object for this call): the handshake,
 * then the plaintext to the protocol; what was not read is kept. */
static void tls_recv(mcp_h2c_conn *c, const uint8_t *p, size_t n) {
  mcp_h2c_tls_input(c, p, n);
  tls_recv_lent(c);
  if (c->closing || c->eof) { /* nothing more will be read */
    mcp_h2c_tls_input(c, NULL, 0);
    return;
  }
  if (mcp_h2c_tls_input_end(c) < 0)
    mcp_h2c_conn_close(c, MCP_CODE_RESOURCE_EXHAUSTED, "out of memory");
}

static void tls_recv_lent(mcp_h2c_conn *c) {
  if (!c->tls_done) {
    char why[256];
    int rv = mcp_h2c_tls_handshake(c, why, sizeof(why));
    if (rv == 0)
      return;
    if (rv < 0) {
      c->ep->tls_handshake_failures++;
      if (c->dialed) {
        mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, why);
        return;
      }
      /* The client hears why (the alert is written), then the
       * connection closes (draining: nothing more is read). */
      mcp_h2c_conn_handshake_over(c);
      uv_read_stop(c->sock);
      c->reading = 0;
      c->eof = 1;
      c->draining = 1;
      return;
    }
    if (handshake_done(c) < 0)
      return;
    c->tls_done = 1;
  }
  /* Records are at most 16 KiB: one buffer per thread, as for reads. */
  static _Thread_local uint8_t plain[16 << 10];
  char why[256];
  while (!c->closing && !c->read_paused) {
    ssize_t k = mcp_h2c_tls_read(c, plain, sizeof(plain), why, sizeof(why));
    if (k == 0)
      break;
    if (k < 0) {
      if (k == MCP_ERR_CLOSED && c->proto == MCP_H2C_PROTO_HTTP1) {
        c->draining = 1; /* answer what was asked, then close */
        break;
      }
      mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, why);
      return;
    }
    c->tls_data = 1;
    deliver(c, plain, (size_t)k);
  }
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  mcp_h2c_conn *c = st->data;
  if (c->closing || nread == 0)
    return;
  if (nread < 0) {
    c->eof = 1;
    uv_read_stop(st);
    c->reading = 0;
    if (c->proto == MCP_H2C_PROTO_HTTP1 && nread == UV_EOF) {
      c->draining = 1; /* answer what was asked, then close */
      mcp_h2c_conn_kick(c);
      return;
    }
    /* Mid-handshake it is a handshake that failed (h2c.h: "no TLS
     * connection"), not a connection that ended. */
    char why[128];
    snprintf(why, sizeof(why), "%s%s",
             c->ssl && !c->tls_done ? "no TLS connection: " : "",
             nread == UV_EOF ? "connection closed by the peer"
                             : uv_strerror((int)nread));
    mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, why);
    return;
  }
  mcp_h2c_ep *ep = c->ep;
  ep->bytes_read += (uint64_t)nread;
  c->last_recv = mcp_h2c_now();
  c->ping_outstanding = 0; /* the peer is alive */
  const uint8_t *p = (const uint8_t *)buf->base;
  size_t n = (size_t)nread;
  if (c->ssl)
    tls_recv(c, p, n);
  else
    deliver(c, p, n);
  mcp_h2c_conn_kick(c);
}

void mcp_h2c_conn_start(mcp_h2c_conn *c) {
  if (c->reading || c->eof || c->closing)
    return;
  int rv = uv_read_start(c->sock, on_alloc, on_read);
  if (rv < 0) {
    mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, uv_strerror(rv));
    return;
  }
  c->reading = 1;
}

/* ------------------------------------------------------------------ */
/* The kick: pump the streams, flush, decide to close, arm the timer     */
/* ------------------------------------------------------------------ */

static int blocked(const mcp_h2c_conn *c) {
  return c->wfill.len >= write_limit(c);
}

void mcp_h2c_conn_kick(mcp_h2c_conn *c) {
  if (c->closing)
    return;
  if (c->in_kick) {
    c->dirty = 1;
    return;
  }
  c->in_kick = 1;
  for (int round = 0; round < 64; ++round) {
    c->dirty = 0;
    if (mcp_h2c_runs_client(c->ep)) {
      mcp_h2c_client_fill(c->ep, c); /* free slots: calls to open */
      if (mcp_h2c_client_connected(c->ep, c) < 0) { /* and to send */
        mcp_h2c_conn_close(c, MCP_CODE_RESOURCE_EXHAUSTED,
                           mcp_strerror(MCP_ERR_NOMEM));
        break;
      }
    }
    if (c->proto == MCP_H2C_PROTO_H2) {
      mcp_h2c_stream *s, *next;
      for (s = c->streams; s; s = next) {
        next = s->next; /* pumping never frees a stream */
        if (s->dirty) {
          s->dirty = 0;
          mcp_h2c_stream_pump(s, mcp_h2c_now());
        }
      }
    }
    flush(c);
    if (c->closing || !c->dirty || blocked(c))
      break;
  }
  c->in_kick = 0;
  if (c->closing)
    return;
  if (c->read_paused == 0 && c->proto == MCP_H2C_PROTO_HTTP1 && blocked(c) &&
      c->reading) {
    /* HTTP/1.1 answers pile up: read no more requests until they go. */
    uv_read_stop(c->sock);
    c->reading = 0;
    c->read_paused = 1;
  }
  int idle_out = !c->writing && c->wfill.len == 0 && c->wtls.len == 0;
  if (c->proto == MCP_H2C_PROTO_H2 && c->h2) {
    int wr = nghttp2_session_want_read(c->h2);
    int ww = nghttp2_session_want_write(c->h2);
    /* Done: nghttp2 wants nothing more (GOAWAY exchanged, or the session
     * terminated), or we are draining and our last stream is gone. */
    if (idle_out && !ww && (!wr || (c->draining && c->nstreams == 0))) {
      mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, "connection closed");
      return;
    }
  } else if (c->draining && idle_out) {
    mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, "connection closed");
    return;
  }
  if (c->dirty && !blocked(c))  /* (when blocked, the write's end kicks) */
    mcp_h2c_ep_schedule(c->ep); /* more to do than one kick does */
  mcp_h2c_conn_arm(c);
}

/* ------------------------------------------------------------------ */
/* Timers: stream deadlines and session expiries, keepalive, idleness,  */
/* the shutdown grace period                                            */
/* ------------------------------------------------------------------ */

static mcp_tstamp ms(int v) { return (mcp_tstamp)v * MCP_MILLISECONDS; }

static int keepalive_on(const mcp_h2c_conn *c) {
  const mcp_h2c_options *o = &c->ep->opts;
  return o->keepalive_time_ms > 0 && c->proto == MCP_H2C_PROTO_H2 &&
         (c->nmcp > 0 || o->keepalive_permit_without_calls);
}

static int idle_on(const mcp_h2c_conn *c) {
  return !c->dialed && c->ep->opts.idle_timeout_ms > 0 && c->nstreams == 0;
}

static mcp_tstamp next_deadline(const mcp_h2c_conn *c) {
  const mcp_h2c_ep *ep = c->ep;
  const mcp_h2c_options *o = &ep->opts;
  mcp_tstamp t = MCP_TSTAMP_MAX;
  for (const mcp_h2c_stream *s = c->streams; s; s = s->next) {
    if (s->eng && s->expiry < t)
      t = s->expiry;
    if (!s->finishing && s->deadline < t)
      t = s->deadline;
  }
  if (keepalive_on(c)) {
    mcp_tstamp k = c->ping_outstanding
                       ? c->ping_sent_at + ms(o->keepalive_timeout_ms)
                       : c->last_recv + ms(o->keepalive_time_ms);
    if (k < t)
      t = k;
  }
  if (idle_on(c) && c->idle_since + ms(o->idle_timeout_ms) < t)
    t = c->idle_since + ms(o->idle_timeout_ms);
  if (c->ssl && !c->tls_done && c->hs_started + ms(o->handshake_timeout_ms) < t)
    t = c->hs_started + ms(o->handshake_timeout_ms);
  if (ep->stopping && ep->grace_at < t)
    t = ep->grace_at;
  if (wbuf_idle(c) && c->last_write + ms(WBUF_IDLE_MS) < t)
    t = c->last_write + ms(WBUF_IDLE_MS);
  return t;
}

void mcp_h2c_conn_arm(mcp_h2c_conn *c) {
  if (c->closing)
    return;
  mcp_tstamp t = next_deadline(c);
  if (t == MCP_TSTAMP_MAX) {
    uv_timer_stop(&c->timer);
    return;
  }
  mcp_tstamp now = mcp_h2c_now();
  /* Rounded up: the loop's millisecond clock may fire a little early. */
  uint64_t delay =
      t <= now ? 0 : (t - now + MCP_MILLISECONDS - 1) / MCP_MILLISECONDS;
  uv_timer_start(&c->timer, on_timer, delay, 0);
}

static void on_timer(uv_timer_t *t) {
  mcp_h2c_conn *c = t->data;
  mcp_h2c_ep *ep = c->ep;
  const mcp_h2c_options *o = &ep->opts;
  mcp_tstamp now = mcp_h2c_now();
  if (ep->stopping && now >= ep->grace_at) {
    mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, "shutdown grace expired");
    return;
  }
  if (c->ssl && !c->tls_done &&
      now >= c->hs_started + ms(o->handshake_timeout_ms)) {
    ep->tls_handshake_timeouts++;
    mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE,
                       "no TLS connection: handshake timed out");
    return;
  }
  for (mcp_h2c_stream *s = c->streams; s; s = s->next) {
    if (!s->finishing && s->deadline <= now)
      mcp_h2c_stream_finish(s, 4, "deadline exceeded"); /* DEADLINE_EXCEEDED */
    else if (s->eng && s->expiry <= now)
      s->dirty = 1;
  }
  if (keepalive_on(c)) {
    if (c->ping_outstanding &&
        now >= c->ping_sent_at + ms(o->keepalive_timeout_ms)) {
      mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, "keepalive timeout");
      return;
    }
    if (!c->ping_outstanding &&
        now >= c->last_recv + ms(o->keepalive_time_ms)) {
      if (nghttp2_submit_ping(c->h2, NGHTTP2_FLAG_NONE, NULL) == 0) {
        c->ping_outstanding = 1;
        c->ping_sent_at = now;
      }
    }
  }
  if (wbuf_idle(c) && now >= c->last_write + ms(WBUF_IDLE_MS)) {
    mcp_buf_free(&c->wfill);
    mcp_buf_free(&c->wflight);
    mcp_buf_free(&c->wtls);
  }
  if (idle_on(c) && now >= c->idle_since + ms(o->idle_timeout_ms)) {
    if (c->proto == MCP_H2C_PROTO_H2 && c->h2 && !c->goaway) {
      nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE,
                            nghttp2_session_get_last_proc_stream_id(c->h2),
                            NGHTTP2_NO_ERROR, (const uint8_t *)"idle", 4);
      c->goaway = 1;
      c->draining = 1;
    } else {
      mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, "idle");
      return;
    }
  }
  mcp_h2c_conn_kick(c);
}
