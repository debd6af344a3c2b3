/* HTTP/2 (nghttp2) and gRPC framing: one stream carries one core session;
 * messages are 5-byte length-prefixed; the outgoing one is read straight
 * from the core's fragments into the write buffer (NO_COPY data source). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_HEADER_BYTES (64 << 10)
#define USER_AGENT "libmcp-h2c/0.1"

#define NV(n, v)                                                               \
  {                                                                            \
    (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v),                  \
        NGHTTP2_NV_FLAG_NONE                                                   \
  }

static mcp_h2c_stream *stream_of(nghttp2_session *h2, int32_t id) {
  return nghttp2_session_get_stream_user_data(h2, id);
}

static size_t max_recv(const mcp_h2c_ep *ep) {
  int v = ep->opts.max_recv_message_size;
  return v < 0 ? (size_t)UINT32_MAX : (size_t)v;
}

static size_t max_send(const mcp_h2c_ep *ep) {
  int v = ep->opts.max_send_message_size;
  return v < 0 ? (size_t)UINT32_MAX : (size_t)v;
}

/* ------------------------------------------------------------------ */
/* Stream objects                                                      */
/* ------------------------------------------------------------------ */

mcp_h2c_stream *mcp_h2c_stream_new(mcp_h2c_conn *c, int32_t id) {
  mcp_h2c_stream *s = mcp_h2c_calloc(&c->ep->mem, 1, sizeof(*s));
  if (!s)
    return NULL;
  s->body.mem = s->held.mem = &c->ep->mem;
  s->c = c;
  s->id = id;
  s->kind = MCP_H2C_SK_NEW;
  s->hd.grpc_status = -1;
  s->deadline = MCP_TSTAMP_MAX;
  s->expiry = MCP_TSTAMP_MAX;
  mcp_h2c_deframer_init_mem(&s->in, max_recv(c->ep), &c->ep->mem);
  s->next = c->streams;
  if (c->streams)
    c->streams->prev = s;
  c->streams = s;
  c->nstreams++;
  return s;
}

void mcp_h2c_stream_set_details(mcp_h2c_stream *s, const char *details) {
  /* Copied before the old one is freed: |details| may be it. */
  char *d = mcp_h2c_strdup(&s->c->ep->mem, details ? details : "");
  mcp_h2c_free(&s->c->ep->mem, s->rec.details);
  s->rec.details = d;
}

static void drop_session(mcp_h2c_stream *s) {
  mcp_h2c_conn *c = s->c;
  if (s->eng) {
    mcp_stream *st = s->eng;
    s->eng = NULL; /* ops->del may wake other streams, never this one */
    mcp_stream_del(st);
    c->nmcp--;
  }
  if (c->ep->sink_stream == s)
    c->ep->sink_stream = NULL;
  s->expiry = MCP_TSTAMP_MAX;
  mcp_h2c_admit_leave(s);
}

static void drop_out(mcp_h2c_stream *s) {
  if (s->out) {
    s->c->ep->msg_buffered -= s->out_len - s->out_sent;
    mcp_msg_free(s->out);
    s->out = NULL;
  }
}

static void drop_in(mcp_h2c_stream *s) {
  s->c->ep->read_buffered -= mcp_h2c_deframer_held(&s->in);
  mcp_h2c_deframer_free(&s->in);
}

static void headers_free(const mcp_mem *m, mcp_h2c_headers *h) {
  mcp_h2c_free(m, h->method);
  mcp_h2c_free(m, h->path);
  mcp_h2c_free(m, h->content_type);
  mcp_h2c_free(m, h->te);
  mcp_h2c_free(m, h->timeout);
  mcp_h2c_free(m, h->encoding);
  mcp_h2c_free(m, h->grpc_message);
}

void mcp_h2c_stream_free(mcp_h2c_stream *s) {
  mcp_h2c_conn *c = s->c;
  mcp_h2c_ep *ep = c->ep;
  mcp_tstamp now = mcp_h2c_now();
  drop_session(s);
  if (s->in_slot) /* the protocol hears of it once its stream is gone */
    mcp_h2c_client_call_gone(s);
  if (s->rec.dialed && s->seq > 0) /* its messages count for the connection */
    mcp_h2c_client_stream_gone(ep, c, s->rec.received);
  if (s->prev)
    s->prev->next = s->next;
  else
    c->streams = s->next;
  if (s->next)
    s->next->prev = s->prev;
  if (--c->nstreams == 0)
    c->idle_since = now;
  if (s->counted)
    c->ncalls--;
  if (c->h2 && s->id > 0)
    nghttp2_session_set_stream_user_data(c->h2, s->id, NULL);
  drop_out(s);
  drop_in(s);
  mcp_buf_free(&s->body);
  headers_free(&ep->mem, &s->hd);
  mcp_h2c_free(&ep->mem, s->rec.details);
  mcp_h2c_free(&ep->mem, s->api);
  mcp_h2c_free(&ep->mem, s);
}

void mcp_h2c_streams_gone(mcp_h2c_conn *c, int status, const char *details) {
  while (c->streams) {
    mcp_h2c_stream *s = c->streams;
    if (!s->finishing) {
      s->finishing = 1;
      s->rec.status = status;
      mcp_h2c_stream_set_details(s, details);
    }
    drop_session(s);
    mcp_h2c_notify_stream(s, MCP_H2C_STREAM_CLOSED);
    mcp_h2c_stream_free(s);
  }
}

/* The driver's waker: the stream is pumped from the loop soon after,
 * never from inside mcp_stream_wake(). */
static void on_wake(mcp_stream *st, void *user_data) {
  (void)st;
  mcp_h2c_stream *s = user_data;
  s->dirty = 1;
  mcp_h2c_conn_mark(s->c);
}

void mcp_h2c_stream_attach(mcp_h2c_stream *s, mcp_stream *st,
                           mcp_tstamp now) {
  mcp_h2c_conn *c = s->c;
  const mcp_stream_ops *ops = mcp_stream_get_ops(st);
  s->eng = st;
  mcp_h2c_free(&c->ep->mem, s->api);
  /* NULL (no memory): reported as "" */
  s->api = mcp_h2c_strdup(&c->ep->mem, ops && ops->name ? ops->name : "");
  mcp_stream_set_waker(st, on_wake, s);
  s->expiry = mcp_stream_get_expiry(st);
  c->nmcp++;
  s->kind = MCP_H2C_SK_GRPC;
  s->seq = ++c->ep->next_stream_id;
  s->rec.opened = now;
  s->dirty = 1;
}

void mcp_h2c_conn_peer(const mcp_h2c_conn *c, mcp_peer *peer) {
  memset(peer, 0, sizeof(*peer));
  peer->address = c->peer;
  peer->dialed = c->dialed;
  peer->tls = c->ssl != NULL;
  mcp_identities_peer(&c->ids, peer);
}

int mcp_h2c_conn_authorize(mcp_h2c_conn *c, const char **details) {
  mcp_h2c_ep *ep = c->ep;
  mcp_peer peer;
  mcp_h2c_conn_peer(c, &peer);
  int code = mcp_authorize(ep->opts.authorize, ep->opts.authorize_user_data,
                           &peer, details);
  if (code == MCP_CODE_UNAUTHENTICATED)
    ep->refused_unauthenticated++;
  else if (code != 0)
    ep->refused_denied++;
  return code;
}

int mcp_h2c_stream_open_session(mcp_h2c_stream *s) {
  mcp_h2c_conn *c = s->c;
  mcp_h2c_ep *ep = c->ep;
  mcp_tstamp now = mcp_h2c_now();
  int rv;
  if (s->svc) { /* a service's or (|side|) the MCP side's */
    mcp_peer who;
    mcp_h2c_conn_peer(c, &who);
    mcp_peer_info peer;
    memset(&peer, 0, sizeof(peer));
    peer.address = c->peer;
    peer.tls = who.tls;
    peer.common_name = who.common_name;
    peer.identities = who.identities;
    peer.nidentities = who.nidentities;
    mcp_stream *st = NULL;
    rv = s->svc->open(s->svc->user_data, &peer, now, &st);
    if (rv < 0) {
      mcp_stream_del(st); /* NULL unless the service misbehaved */
      return rv;
    }
    if (!st)
      return MCP_ERR_CALLBACK; /* open() gave no stream */
    mcp_h2c_stream_attach(s, st, now);
    if (s->side && ep->role == MCP_H2C_ROLE_SINK)
      ep->sink_stream = s;
    return 0;
  }
  /* A dialed MCP stream comes with its stream (client.c). */
  return MCP_ERR_CALLBACK;
}

/* ------------------------------------------------------------------ */
/* Answers                                                             */
/* ------------------------------------------------------------------ */

/* Appends the grpc-status and grpc-message fields of |s| to |nva|. */
static size_t status_fields(mcp_h2c_stream *s, nghttp2_nv *nva, char *code,
                            mcp_buf *msg) {
  size_t n = 0;
  snprintf(code, 12, "%d", s->rec.status);
  nva[n++] = (nghttp2_nv)NV("grpc-status", code);
  if (s->rec.details && s->rec.details[0] &&
      mcp_h2c_percent_encode(s->rec.details, msg) == 0 &&
      mcp_buf_append(msg, "", 1) == 0)
    nva[n++] = (nghttp2_nv)NV("grpc-message", (char *)msg->p);
  return n;
}

/* A response that is only headers with END_STREAM: gRPC's trailers-only
 * answer, with HTTP status |http|. */
static void reject(mcp_h2c_stream *s, int http, int status,
                   const char *details) {
  mcp_h2c_conn *c = s->c;
  drop_session(s);
  s->kind = MCP_H2C_SK_REJECTED;
  s->finishing = 1;
  s->rec.status = status;
  mcp_h2c_stream_set_details(s, details);
  char hs[12], code[12];
  mcp_buf msg = {.mem = &c->ep->mem};
  snprintf(hs, sizeof(hs), "%d", http);
  nghttp2_nv nva[4] = {NV(":status", hs),
                       NV("content-type", "application/grpc")};
  size_t n = 2 + status_fields(s, nva + 2, code, &msg);
  nghttp2_submit_response(c->h2, s->id, nva, n, NULL);
  mcp_buf_free(&msg);
  s->response_submitted = 1;
  s->trailers_submitted = 1;
  c->dirty = 1;
}

static ssize_t data_read(nghttp2_session *h2, int32_t id, uint8_t *buf,
                         size_t length, uint32_t *flags,
                         nghttp2_data_source *source, void *user_data);

void mcp_h2c_stream_http_answer(mcp_h2c_stream *s) {
  mcp_h2c_conn *c = s->c;
  const char *method = s->hd.method ? s->hd.method : "GET";
  const char *path = s->hd.path ? s->hd.path : "/";
  int status;
  char *ctype = NULL;
  mcp_h2c_http_answer(c->ep, method, path, &status, &ctype, &s->body);
  int head = strcmp(method, "HEAD") == 0;
  char hs[12], len[24];
  snprintf(hs, sizeof(hs), "%d", status);
  snprintf(len, sizeof(len), "%zu", s->body.len);
  nghttp2_nv nva[3] = {NV(":status", hs),
                       NV("content-type", ctype ? ctype : "text/plain"),
                       NV("content-length", len)};
  nghttp2_data_provider prd = {.source.ptr = s, .read_callback = data_read};
  int body = !head && s->body.len > 0;
  nghttp2_submit_response(c->h2, s->id, nva, 3, body ? &prd : NULL);
  mcp_h2c_free(&c->ep->mem, ctype);
  s->response_submitted = 1;
  c->dirty = 1;
}

void mcp_h2c_stream_finish(mcp_h2c_stream *s, int status, const char *details) {
  if (s->finishing)
    return;
  mcp_h2c_conn *c = s->c;
  s->finishing = 1;
  s->rec.status = status;
  mcp_h2c_stream_set_details(s, details);
  drop_session(s);
  drop_in(s);
  if (c->h2 && s->id > 0 && c->proto == MCP_H2C_PROTO_H2) {
    if (s->rec.dialed) {
      int done = nghttp2_session_get_stream_remote_close(c->h2, s->id) > 0;
      nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, s->id,
                                done ? NGHTTP2_NO_ERROR : NGHTTP2_CANCEL);
    } else if (s->kind == MCP_H2C_SK_GRPC && s->response_submitted) {
      /* The trailers follow the message being sent, if any. */
      if (s->deferred) {
        s->deferred = 0;
        nghttp2_session_resume_data(c->h2, s->id);
      }
    } else if (s->kind == MCP_H2C_SK_GRPC) {
      s->finishing = 0;
      reject(s, 200, status, details);
    } else if (!s->response_submitted) {
      nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, s->id,
                                NGHTTP2_REFUSED_STREAM);
    }
  }
  s->dirty = 1;
  mcp_h2c_conn_mark(c);
}

/* ------------------------------------------------------------------ */
/* Requests (server)                                                   */
/* ------------------------------------------------------------------ */

/* LISTEN: asks the authorization hook about the call's peer; a refusal
 * answers the call at once and is reported (REFUSED). 1 when refused. */
static int refuse_unauthorized(mcp_h2c_stream *s) {
  const char *details = NULL;
  int code = mcp_h2c_conn_authorize(s->c, &details);
  if (code == 0)
    return 0;
  reject(s, 200, code, details);
  mcp_h2c_notify_stream(s, MCP_H2C_STREAM_REFUSED);
  return 1;
}

/* The def of |defs[0..n)| at |path|, or NULL. */
static const mcp_service_def *find_def(const mcp_service_def *defs, size_t n,
                                       const char *path) {
  for (size_t i = 0; i < n; ++i)
    if (strcmp(path, defs[i].method) == 0)
      return &defs[i];
  return NULL;
}

void mcp_h2c_stream_request(mcp_h2c_stream *s) {
  mcp_h2c_conn *c = s->c;
  mcp_h2c_ep *ep = c->ep;
  mcp_h2c_headers *hd = &s->hd;
  const char *method = hd->method ? hd->method : "";
  const char *path = hd->path ? hd->path : "";
  /* Which def serves |path| here: the application's services, then the
   * MCP side's (the core's: a source serves what sinks call, a sink what
   * sources call). |known|: a method of some service here or of MCP, so
   * that an MCP method this side does not serve is told apart from an
   * unknown one. */
  const mcp_service_def *svc = find_def(ep->services, ep->nservices, path);
  int side = 0;
  if (!svc && ep->side && !ep->no_mcp) {
    size_t n;
    const mcp_service_def *defs = mcp_side_services(ep->side, &n);
    svc = find_def(defs, n, path);
    side = svc != NULL;
  }
  int served = svc != NULL, known = served;
  if (!known) {
    const char *all[4];
    size_t n = mcp_service_methods(MCP_METHODS_OF_SOURCE | MCP_METHODS_OF_SINK,
                                   all);
    for (size_t i = 0; i < n; ++i)
      known |= strcmp(path, all[i]) == 0;
  }
  char msg[200];
  if (!mcp_h2c_is_grpc_content_type(hd->content_type)) {
    if (strcmp(method, "POST") == 0 && known >= 0) {
      snprintf(msg, sizeof(msg), "invalid gRPC request content-type \"%.64s\"",
               hd->content_type ? hd->content_type : "");
      reject(s, 415, MCP_CODE_INVALID_ARGUMENT, msg);
      return;
    }
    s->kind = MCP_H2C_SK_HTTP; /* answered once the request is complete */
    return;
  }
  if (strcmp(method, "POST") != 0) {
    reject(s, 405, MCP_CODE_INTERNAL, "gRPC requires POST");
    return;
  }
  if (!hd->te || strcmp(hd->te, "trailers") != 0) {
    reject(s, 400, MCP_CODE_INTERNAL, "gRPC requires \"te: trailers\"");
    return;
  }
  if (!known) {
    snprintf(msg, sizeof(msg), "unknown method %.128s", path);
    reject(s, 200, MCP_CODE_UNIMPLEMENTED, msg);
    return;
  }
  if (!served) {
    snprintf(msg, sizeof(msg), "method %.128s is not served here", path);
    reject(s, 200, MCP_CODE_UNIMPLEMENTED, msg);
    return;
  }
  if (hd->timeout) {
    mcp_tstamp d;
    if (mcp_h2c_parse_timeout(hd->timeout, &d) < 0) {
      reject(s, 200, MCP_CODE_INTERNAL, "malformed grpc-timeout");
      return;
    }
    mcp_tstamp now = mcp_h2c_now();
    s->deadline = d > MCP_TSTAMP_MAX - now ? MCP_TSTAMP_MAX : now + d;
  }
  if (ep->stopping) {
    reject(s, 200, MCP_CODE_UNAVAILABLE, "server shutting down");
    return;
  }
  if (ep->opts.authorize && refuse_unauthorized(s))
    return;
  /* Refused, not queued: a client past the announced limit would leave
   * its call unstarted; past ours it hears why (the announced one is
   * higher). */
  if (c->ncalls >= (size_t)ep->opts.max_streams_per_connection) {
    ep->refused_connection_streams++;
    snprintf(msg, sizeof(msg),
             "too many concurrent streams on this connection (limit %d)",
             ep->opts.max_streams_per_connection);
    reject(s, 200, MCP_CODE_RESOURCE_EXHAUSTED, msg);
    return;
  }
  s->counted = 1;
  c->ncalls++;
  s->svc = svc;
  s->side = side;
  if (ep->admit)
    mcp_h2c_admit(s);
  else
    mcp_h2c_stream_start(s);
}

void mcp_h2c_stream_reject(mcp_h2c_stream *s, int status,
                           const char *details) {
  reject(s, 200, status, details);
}

void mcp_h2c_stream_start(mcp_h2c_stream *s) {
  mcp_h2c_conn *c = s->c;
  mcp_h2c_ep *ep = c->ep;
  int rv = mcp_h2c_stream_open_session(s);
  if (rv < 0) {
    reject(s, 200, mcp_error_grpc_status(rv), mcp_strerror(rv));
    return;
  }
  nghttp2_nv nva[3] = {NV(":status", "200"),
                       NV("content-type", "application/grpc"),
                       NV("grpc-accept-encoding", "identity")};
  nghttp2_data_provider prd = {.source.ptr = s, .read_callback = data_read};
  if (nghttp2_submit_response(c->h2, s->id, nva, 3, &prd) != 0) {
    reject(s, 200, MCP_CODE_RESOURCE_EXHAUSTED, mcp_strerror(MCP_ERR_NOMEM));
    return;
  }
  s->response_submitted = 1;
  c->dirty = 1;
  mcp_h2c_notify_stream(s, MCP_H2C_STREAM_OPENED);
  if (s->held.len) { /* what it sent while it waited */
    mcp_buf held = s->held;
    memset(&s->held, 0, sizeof(s->held));
    ep->read_buffered -= held.len;
    mcp_h2c_stream_input(s, held.p, held.len);
    nghttp2_session_consume(c->h2, s->id, held.len);
    mcp_buf_free(&held);
  }
  mcp_h2c_stream_tell_half_close(s);
}

void mcp_h2c_stream_tell_half_close(mcp_h2c_stream *s) {
  if (!s->eng || !s->remote_closed || s->eng_half_closed || s->finishing)
    return;
  s->eng_half_closed = 1;
  mcp_stream_half_close(s->eng, mcp_h2c_now());
  s->dirty = 1;
  mcp_h2c_conn_mark(s->c);
}

int mcp_h2c_stream_submit_request(mcp_h2c_stream *s) {
  mcp_h2c_conn *c = s->c;
  mcp_h2c_ep *ep = c->ep;
  const char *path = s->hd.path; /* the def's method (client.c) */
  if (!path)
    return MCP_ERR_INVALID_ARGUMENT;
  nghttp2_nv nva[] = {NV(":method", "POST"),
                      NV(":scheme", "http"),
                      NV(":path", path),
                      NV(":authority", ep->authority),
                      NV("content-type", "application/grpc"),
                      NV("te", "trailers"),
                      NV("grpc-accept-encoding", "identity"),
                      NV("user-agent", USER_AGENT)};
  nghttp2_data_provider prd = {.source.ptr = s, .read_callback = data_read};
  int32_t id = nghttp2_submit_request(c->h2, NULL, nva,
                                      sizeof(nva) / sizeof(nva[0]), &prd, s);
  if (id < 0)
    return MCP_ERR_NOMEM;
  s->id = id;
  s->dirty = 1;
  c->dirty = 1;
  return 0;
}

/* ------------------------------------------------------------------ */
/* Moving messages                                                     */
/* ------------------------------------------------------------------ */

static void deliver(mcp_h2c_stream *s, const uint8_t *p, size_t n) {
  mcp_h2c_ep *ep = s->c->ep;
  mcp_tstamp now = mcp_h2c_now();
  s->rec.received++;
  ep->msgs_in++;
  /* An error is kept by the driver: the next pump ends the stream. */
  mcp_stream_recv(s->eng, p, n, now);
  s->dirty = 1;
  s->c->dirty = 1;
}

/* Reassembles gRPC messages from DATA payload (deframe.h): a message
 * that lies whole in |p| is delivered from there, the others from the
 * stream's buffer, which is freed once its message is delivered. */
void mcp_h2c_stream_input(mcp_h2c_stream *s, const uint8_t *p, size_t n) {
  mcp_h2c_ep *ep = s->c->ep;
  char msg[128];
  while (n > 0 && !s->finishing) {
    const uint8_t *m;
    size_t len, had = mcp_h2c_deframer_held(&s->in);
    int rv = mcp_h2c_deframe(&s->in, &p, &n, &m, &len);
    ep->read_buffered += mcp_h2c_deframer_held(&s->in);
    ep->read_buffered -= had;
    if (rv == 0)
      break;
    switch (rv) {
    case 1:
      deliver(s, m, len);
      continue;
    case MCP_H2C_DEFRAME_COMPRESSED:
      mcp_h2c_stream_finish(s, MCP_CODE_UNIMPLEMENTED,
                            "compressed messages are not supported "
                            "(grpc-encoding identity only)");
      return;
    case MCP_H2C_DEFRAME_FLAGS:
      mcp_h2c_stream_finish(s, MCP_CODE_INTERNAL,
                            "malformed message prefix (reserved flags set)");
      return;
    case MCP_H2C_DEFRAME_TOO_LARGE:
      snprintf(msg, sizeof(msg),
               "received message larger than max (%lu vs. %lu)",
               (unsigned long)s->in.msg_len, (unsigned long)max_recv(ep));
      mcp_h2c_stream_finish(s, MCP_CODE_RESOURCE_EXHAUSTED, msg);
      return;
    default:
      mcp_h2c_stream_finish(s, MCP_CODE_RESOURCE_EXHAUSTED,
                            mcp_strerror(MCP_ERR_NOMEM));
      return;
    }
  }
  ep->read_buffered -= mcp_h2c_deframer_held(&s->in);
  mcp_h2c_deframer_release(&s->in);
  ep->read_buffered += mcp_h2c_deframer_held(&s->in);
}

static void queue(mcp_h2c_stream *s, mcp_msg *msg) {
  mcp_h2c_ep *ep = s->c->ep;
  size_t len = mcp_msg_len(msg);
  if (len > max_send(ep)) {
    char d[128];
    snprintf(d, sizeof(d), "message to send larger than max (%zu vs. %zu)", len,
             max_send(ep));
    mcp_msg_free(msg);
    mcp_h2c_stream_finish(s, MCP_CODE_RESOURCE_EXHAUSTED, d);
    return;
  }
  s->out = msg;
  s->out_hdr[0] = 0;
  s->out_hdr[1] = (uint8_t)(len >> 24);
  s->out_hdr[2] = (uint8_t)(len >> 16);
  s->out_hdr[3] = (uint8_t)(len >> 8);
  s->out_hdr[4] = (uint8_t)len;
  s->out_len = 5 + len;
  s->out_read = s->out_sent = 0;
  s->out_iov = s->out_iov_off = 0;
  ep->msg_buffered += s->out_len;
  if (s->deferred) {
    s->deferred = 0;
    nghttp2_session_resume_data(s->c->h2, s->id);
  }
}

/* What the driver says, until it has nothing more now. One message at a
 * time: can_send is 0 while one is queued or the socket is full, and the
 * end of that send pumps again. */
void mcp_h2c_stream_pump(mcp_h2c_stream *s, mcp_tstamp now) {
  mcp_h2c_conn *c = s->c;
  int blocked = 0;
  if (s->kind != MCP_H2C_SK_GRPC || s->finishing || !s->eng)
    return;
  if (s->id == 0) /* dialed, not connected yet */
    return;
  for (int round = 0; round < 16 && s->eng && !s->finishing; ++round) {
    blocked = c->wfill.len >= (size_t)c->ep->opts.write_buffer_size;
    /* After our half-close nothing is in flight either: the driver still
     * decides the ending then (end(), the half-close rule). */
    int can_send = !s->out && !blocked;
    mcp_msg *msg = NULL;
    int status = MCP_CODE_OK;
    const char *details = NULL;
    mcp_stream_action a =
        mcp_stream_pump(s->eng, now, can_send, &msg, &status, &details);
    if (a == MCP_STREAM_SEND && msg) {
      if (s->local_closed) { /* the session broke its own half-close */
        mcp_msg_free(msg);
        mcp_h2c_stream_finish(s, MCP_CODE_INTERNAL,
                              "a message to send after the half-close");
        return;
      }
      queue(s, msg);
      continue;
    }
    if (a == MCP_STREAM_END) {
      mcp_h2c_stream_finish(s, status, details ? details : "");
      return;
    }
    if (a == MCP_STREAM_HALF_CLOSE && !s->rec.dialed) {
      /* A server's half-close is its status, OK; only
       * mcp_h2c_sink_finish() asks a server stream for it, and the pump
       * says so once the session has nothing ready and nothing is in
       * flight. */
      mcp_h2c_stream_finish(s, MCP_CODE_OK, "");
      return;
    }
    if (a == MCP_STREAM_HALF_CLOSE && s->rec.dialed && !s->local_closed) {
      /* The data source ends our side (END_STREAM) once nothing is
       * queued. */
      s->local_closed = 1;
      if (s->deferred) {
        s->deferred = 0;
        nghttp2_session_resume_data(c->h2, s->id);
      }
      c->dirty = 1;
      continue;
    }
    break; /* IDLE (or nothing to do with what was said) */
  }
  if (!s->eng || s->finishing)
    return;
  if (s->ticket)
    mcp_h2c_admit_check_initial(s, now);
  s->expiry = mcp_stream_get_expiry(s->eng);
  /* A due timer that cannot act until the send in flight ends waits for
   * that end (which marks the stream dirty): a timer for a time already
   * past would fire at once, forever, and starve the loop's I/O. */
  if (s->expiry <= now && (s->out || blocked))
    s->expiry = MCP_TSTAMP_MAX;
  if (blocked && !s->out)
    s->dirty = 1; /* pull once the socket drains (the next kick) */
}

/* Copies |n| bytes of the outgoing message from |out_sent| on. */
static void copy_out(mcp_h2c_stream *s, uint8_t *dst, size_t n) {
  const mcp_iovec *iov;
  size_t niov = mcp_msg_iov(s->out, &iov);
  while (n > 0) {
    size_t k;
    if (s->out_sent < 5) {
      k = 5 - s->out_sent < n ? 5 - s->out_sent : n;
      memcpy(dst, s->out_hdr + s->out_sent, k);
    } else {
      while (s->out_iov < niov && s->out_iov_off == iov[s->out_iov].len) {
        s->out_iov++;
        s->out_iov_off = 0;
      }
      const mcp_iovec *v = &iov[s->out_iov];
      k = v->len - s->out_iov_off < n ? v->len - s->out_iov_off : n;
      memcpy(dst, v->base + s->out_iov_off, k);
      s->out_iov_off += k;
    }
    s->out_sent += k;
    dst += k;
    n -= k;
  }
}

static ssize_t data_read(nghttp2_session *h2, int32_t id, uint8_t *buf,
                         size_t length, uint32_t *flags,
                         nghttp2_data_source *source, void *user_data) {
  (void)source;
  (void)user_data;
  mcp_h2c_stream *s = stream_of(h2, id);
  if (!s) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return 0;
  }
  if (s->kind == MCP_H2C_SK_HTTP) {
    size_t n = s->body.len - s->body_off;
    if (n > length)
      n = length;
    if (n) /* an empty body has no buffer */
      memcpy(buf, s->body.p + s->body_off, n);
    s->body_off += n;
    if (s->body_off == s->body.len)
      *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
  }
  if (s->out && s->out_read < s->out_len) {
    size_t n = s->out_len - s->out_read;
    if (n > length)
      n = length;
    s->out_read += n;
    *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    return (ssize_t)n;
  }
  if (s->finishing && !s->out) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (!s->rec.dialed) {
      *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      char code[12];
      mcp_buf msg = {.mem = &s->c->ep->mem};
      nghttp2_nv nva[2];
      size_t n = status_fields(s, nva, code, &msg);
      int rv = nghttp2_submit_trailer(h2, id, nva, n);
      mcp_buf_free(&msg);
      if (rv != 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
      s->trailers_submitted = 1;
    }
    return 0;
  }
  if (s->local_closed && !s->out) {
    *flags |= NGHTTP2_DATA_FLAG_EOF; /* the half-close */
    return 0;
  }
  s->deferred = 1;
  return NGHTTP2_ERR_DEFERRED;
}

/* ------------------------------------------------------------------ */
/* nghttp2 callbacks                                                   */
/* ------------------------------------------------------------------ */

static ssize_t on_send(nghttp2_session *h2, const uint8_t *data, size_t length,
                       int flags, void *user_data) {
  (void)h2;
  (void)flags;
  mcp_h2c_conn *c = user_data;
  if (c->wfill.len >= (size_t)c->ep->opts.write_buffer_size)
    return NGHTTP2_ERR_WOULDBLOCK;
  if (mcp_h2c_conn_write(c, data, length) < 0)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  return (ssize_t)length;
}

static int on_send_data(nghttp2_session *h2, nghttp2_frame *frame,
                        const uint8_t *framehd, size_t length,
                        nghttp2_data_source *source, void *user_data) {
  (void)source;
  mcp_h2c_conn *c = user_data;
  mcp_h2c_ep *ep = c->ep;
  if (c->wfill.len >= (size_t)ep->opts.write_buffer_size)
    return NGHTTP2_ERR_WOULDBLOCK;
  mcp_h2c_stream *s = stream_of(h2, frame->hd.stream_id);
  if (!s || !s->out || s->out_len - s->out_sent < length)
    return NGHTTP2_ERR_CALLBACK_FAILURE; /* cannot happen */
  size_t pad = frame->data.padlen;
  size_t total = 9 + length + pad;
  if (mcp_buf_reserve(&c->wfill, total) < 0)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  uint8_t *w = c->wfill.p + c->wfill.len;
  memcpy(w, framehd, 9);
  w += 9;
  if (pad > 0)
    *w++ = (uint8_t)(pad - 1);
  copy_out(s, w, length);
  w += length;
  if (pad > 1)
    memset(w, 0, pad - 1);
  c->wfill.len += total;
  ep->write_buffered += total;
  ep->msg_buffered -= length;
  if (s->out_sent == s->out_len) {
    mcp_msg_free(s->out);
    s->out = NULL;
    s->rec.sent++;
    ep->msgs_out++;
    s->dirty = 1; /* pull the next one */
    c->dirty = 1;
  }
  return 0;
}

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *frame,
                            void *user_data) {
  mcp_h2c_conn *c = user_data;
  if (frame->hd.type != NGHTTP2_HEADERS || c->dialed ||
      frame->headers.cat != NGHTTP2_HCAT_REQUEST)
    return 0;
  if (c->ep->stopping) {
    nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                              NGHTTP2_REFUSED_STREAM);
    return 0;
  }
  mcp_h2c_stream *s = mcp_h2c_stream_new(c, frame->hd.stream_id);
  if (!s)
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  nghttp2_session_set_stream_user_data(h2, frame->hd.stream_id, s);
  return 0;
}

static int set_field(const mcp_mem *m, char **field, const uint8_t *v,
                     size_t n) {
  char *d = mcp_h2c_malloc(m, n + 1);
  if (!d)
    return -1;
  memcpy(d, v, n);
  d[n] = '\0';
  mcp_h2c_free(m, *field);
  *field = d;
  return 0;
}

#define IS(lit) (namelen == sizeof(lit) - 1 && memcmp(name, lit, namelen) == 0)

static int on_header(nghttp2_session *h2, const nghttp2_frame *frame,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *user_data) {
  (void)flags;
  (void)user_data;
  mcp_h2c_stream *s = stream_of(h2, frame->hd.stream_id);
  if (!s)
    return 0;
  mcp_h2c_headers *hd = &s->hd;
  hd->bytes += namelen + valuelen + 32;
  if (hd->bytes > MAX_HEADER_BYTES)
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  char **field = NULL;
  if (!s->rec.dialed) {
    if (IS(":method"))
      field = &hd->method;
    else if (IS(":path"))
      field = &hd->path;
    else if (IS("content-type"))
      field = &hd->content_type;
    else if (IS("te"))
      field = &hd->te;
    else if (IS("grpc-timeout"))
      field = &hd->timeout;
    else if (IS("grpc-encoding"))
      field = &hd->encoding;
  } else if (IS(":status")) {
    int v = 0;
    for (size_t i = 0; i < valuelen && i < 3; ++i)
      v = v * 10 + (value[i] - '0');
    hd->http_status = v;
  } else if (IS("content-type")) {
    field = &hd->content_type;
  } else if (IS("grpc-status")) {
    int v = 0;
    for (size_t i = 0; i < valuelen && v < 1000; ++i)
      v = (value[i] >= '0' && value[i] <= '9') ? v * 10 + (value[i] - '0')
                                               : 1000;
    hd->grpc_status = valuelen > 0 && v < 1000 ? v : MCP_CODE_UNKNOWN;
  } else if (IS("grpc-message")) {
    if (set_field(&s->c->ep->mem, &hd->grpc_message, value, valuelen) < 0)
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    mcp_h2c_percent_decode(hd->grpc_message);
  }
  if (field && set_field(&s->c->ep->mem, field, value, valuelen) < 0)
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  return 0;
}

/* Client: response headers or trailers. */
static void client_headers(mcp_h2c_stream *s, nghttp2_headers_category cat,
                           int end) {
  mcp_h2c_headers *hd = &s->hd;
  char d[64];
  if (s->finishing)
    return;
  if (cat == NGHTTP2_HCAT_RESPONSE) {
    if (hd->http_status != 200) {
      snprintf(d, sizeof(d), "HTTP status %d", hd->http_status);
      mcp_h2c_stream_finish(s,
                            hd->grpc_status >= 0
                                ? hd->grpc_status
                                : mcp_h2c_status_from_http(hd->http_status),
                            hd->grpc_message ? hd->grpc_message : d);
      return;
    }
    if (!mcp_h2c_is_grpc_content_type(hd->content_type)) {
      mcp_h2c_stream_finish(s, MCP_CODE_UNKNOWN,
                            "response content-type is not application/grpc");
      return;
    }
  }
  if (end) {
    if (hd->grpc_status < 0)
      mcp_h2c_stream_finish(s, MCP_CODE_UNKNOWN, "no grpc-status in trailers");
    else
      mcp_h2c_stream_finish(s, hd->grpc_status,
                            hd->grpc_message ? hd->grpc_message : "");
  }
}

/* GOAWAY ENHANCE_YOUR_CALM with |why| (a literal); the connection drains. */
static void calm_down(mcp_h2c_conn *c, const char *why, size_t len) {
  nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(c->h2),
                        NGHTTP2_ENHANCE_YOUR_CALM, (const uint8_t *)why, len);
  c->goaway = 1;
  c->draining = 1;
}

static void police_ping(mcp_h2c_conn *c) {
  int min = c->ep->opts.min_recv_ping_interval_ms;
  if (c->dialed || min <= 0)
    return;
  mcp_tstamp now = mcp_h2c_now();
  if (c->last_ping_recv &&
      now - c->last_ping_recv < (mcp_tstamp)min * MCP_MILLISECONDS &&
      ++c->ping_strikes > 2 && !c->goaway) {
    static const char why[] = "too_many_pings";
    calm_down(c, why, sizeof(why) - 1);
  }
  c->last_ping_recv = now;
}

/* Rapid reset (CVE-2023-44487): a token bucket of streams the client may
 * reset; past it, GOAWAY ENHANCE_YOUR_CALM and the connection drains, as
 * nghttp2's own servers answer (nghttp2 1.57's defaults: 1000, 33/s). */
static void police_reset(mcp_h2c_conn *c) {
  const mcp_h2c_options *o = &c->ep->opts;
  if (c->dialed || c->goaway)
    return;
  mcp_tstamp now = mcp_h2c_now();
  if (c->resets == 0)
    c->reset_tokens = (double)o->stream_reset_burst;
  else
    c->reset_tokens += (double)(now - c->reset_at) *
                       (double)o->stream_reset_rate / 1e9;
  if (c->reset_tokens > (double)o->stream_reset_burst)
    c->reset_tokens = (double)o->stream_reset_burst;
  c->reset_at = now;
  c->resets++;
  if (c->reset_tokens >= 1.0) {
    c->reset_tokens -= 1.0;
    return;
  }
  static const char why[] = "too many streams reset";
  calm_down(c, why, sizeof(why) - 1);
  c->ep->rapid_resets++;
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *frame,
                         void *user_data) {
  mcp_h2c_conn *c = user_data;
  switch (frame->hd.type) {
  case NGHTTP2_RST_STREAM:
    police_reset(c);
    return 0;
  case NGHTTP2_PING:
    if (frame->hd.flags & NGHTTP2_FLAG_ACK)
      c->ping_outstanding = 0;
    else
      police_ping(c);
    return 0;
  case NGHTTP2_GOAWAY:
    c->goaway_recv = 1;
    return 0;
  case NGHTTP2_SETTINGS:
    if (!(frame->hd.flags & NGHTTP2_FLAG_ACK) && !c->peer_settings) {
      c->peer_settings = 1;
      c->dirty = 1; /* mcp_h2c_client: the calls waiting go now */
    }
    return 0;
  case NGHTTP2_HEADERS:
  case NGHTTP2_DATA:
    break;
  default:
    return 0;
  }
  mcp_h2c_stream *s = stream_of(h2, frame->hd.stream_id);
  if (!s)
    return 0;
  int end = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
  if (s->rec.dialed) {
    if (frame->hd.type == NGHTTP2_HEADERS)
      client_headers(s, frame->headers.cat, end);
    else if (end && !s->finishing)
      mcp_h2c_stream_finish(s, MCP_CODE_INTERNAL,
                            "the server ended the stream without a status");
    return 0;
  }
  if (end)
    s->remote_closed = 1;
  if (frame->hd.type == NGHTTP2_HEADERS &&
      frame->headers.cat == NGHTTP2_HCAT_REQUEST)
    mcp_h2c_stream_request(s);
  if (end)
    mcp_h2c_stream_tell_half_close(s); /* after every DATA it sent */
  if (s->kind == MCP_H2C_SK_HTTP && s->remote_closed && !s->response_submitted)
    mcp_h2c_stream_http_answer(s);
  if (end) {
    s->dirty = 1;
    c->dirty = 1;
  }
  return 0;
}

static int on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t id,
                         const uint8_t *data, size_t len, void *user_data) {
  (void)flags;
  (void)user_data;
  mcp_h2c_stream *s = stream_of(h2, id);
  if (s && s->waiting && !s->finishing) {
    if (mcp_h2c_admit_hold(s, data, len) == 0)
      return 0; /* consumed once the stream runs */
    mcp_h2c_stream_finish(s, MCP_CODE_RESOURCE_EXHAUSTED,
                          mcp_strerror(MCP_ERR_NOMEM));
  } else if (s && s->kind == MCP_H2C_SK_GRPC && !s->finishing) {
    mcp_h2c_stream_input(s, data, len);
  }
  /* Taken: delivered to the core, or held in the stream's buffer (bounded
   * by the maximum message size), or dropped. */
  nghttp2_session_consume(h2, id, len);
  return 0;
}

static int on_stream_close(nghttp2_session *h2, int32_t id, uint32_t code,
                           void *user_data) {
  mcp_h2c_conn *c = user_data;
  mcp_h2c_stream *s = stream_of(h2, id);
  if (!s)
    return 0;
  if (!s->finishing) {
    s->finishing = 1;
    char d[96];
    if (s->rec.dialed) {
      s->rec.status = code == NGHTTP2_NO_ERROR
                          ? MCP_CODE_INTERNAL
                          : mcp_h2c_status_from_h2_error(code);
      snprintf(d, sizeof(d), "stream reset by the server (%s)",
               nghttp2_http2_strerror(code));
    } else {
      s->rec.status = MCP_CODE_CANCELLED;
      snprintf(d, sizeof(d), "stream reset by the client (%s)",
               nghttp2_http2_strerror(code));
    }
    mcp_h2c_stream_set_details(s, d);
  }
  drop_session(s);
  mcp_h2c_notify_stream(s, MCP_H2C_STREAM_CLOSED);
  mcp_h2c_stream_free(s);
  if (c->dialed && c->ep->finished && !c->streams) /* a sink that is done */
    nghttp2_session_terminate_session(h2, NGHTTP2_NO_ERROR);
  c->dirty = 1;
  return 0;
}

static int on_frame_send(nghttp2_session *h2, const nghttp2_frame *frame,
                         void *user_data) {
  mcp_h2c_conn *c = user_data;
  switch (frame->hd.type) {
  case NGHTTP2_GOAWAY:
    c->goaway = 1;
    return 0;
  case NGHTTP2_HEADERS:
  case NGHTTP2_DATA:
    c->ping_strikes = 0;
    break;
  default:
    return 0;
  }
  /* Server: the answer is complete; a client still sending is told to
   * stop, without error (RFC 9113 8.1), so the stream closes. */
  if (!c->dialed && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
      nghttp2_session_get_stream_remote_close(h2, frame->hd.stream_id) == 0)
    nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                              NGHTTP2_NO_ERROR);
  return 0;
}

int mcp_h2c_session_new(mcp_h2c_conn *c, int server) {
  const mcp_h2c_options *o = &c->ep->opts;
  nghttp2_session_callbacks *cb;
  nghttp2_option *opt;
  if (nghttp2_session_callbacks_new(&cb) != 0)
    return MCP_ERR_NOMEM;
  if (nghttp2_option_new(&opt) != 0) {
    nghttp2_session_callbacks_del(cb);
    return MCP_ERR_NOMEM;
  }
  nghttp2_session_callbacks_set_send_callback(cb, on_send);
  nghttp2_session_callbacks_set_send_data_callback(cb, on_send_data);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
  /* Memory stays bounded: the peer's window opens only as we take data. */
  nghttp2_option_set_no_auto_window_update(opt, 1);
  int rv = server ? nghttp2_session_server_new3(&c->h2, cb, c, opt,
                                                &c->ep->ngmem)
                  : nghttp2_session_client_new3(&c->h2, cb, c, opt,
                                                &c->ep->ngmem);
  nghttp2_session_callbacks_del(cb);
  nghttp2_option_del(opt);
  if (rv != 0)
    return MCP_ERR_NOMEM;
  nghttp2_settings_entry iv[3];
  size_t n = 0;
  if (server) {
    iv[n].settings_id = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS;
    iv[n++].value = (uint32_t)o->max_concurrent_streams;
  } else {
    iv[n].settings_id = NGHTTP2_SETTINGS_ENABLE_PUSH;
    iv[n++].value = 0;
  }
  iv[n].settings_id = NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE;
  iv[n++].value = (uint32_t)o->stream_window_size;
  iv[n].settings_id = NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE;
  iv[n++].value = MAX_HEADER_BYTES;
  if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, n) != 0 ||
      nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0,
                                            o->connection_window_size) != 0) {
    nghttp2_session_del(c->h2);
    c->h2 = NULL;
    return MCP_ERR_NOMEM;
  }
  c->proto = MCP_H2C_PROTO_H2;
  return 0;
}
