/* The debug HTTP/1.1 server: sessions (http-parser) and libuv glue. */
#include "ops/http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <http_parser.h>

/* A connection stops reading while this much of its answers is unsent. */
#define WRITE_HIGH_WATER (4u << 20)
/* After the last answer of a closing connection, what the client still
 * sends is read and dropped for at most this long, so that closing does
 * not reset the connection before the client read the answer. */
#define LINGER_MS 2000
#define READ_BUFFER 8192

/* ---- replies ---- */

void ops_http_reply_text(ops_http_reply *r, int status, const char *text) {
  r->status = status;
  r->content_type = "text/plain; charset=utf-8";
  ops_buf_reset(&r->body);
  ops_buf_str(&r->body, text);
}

const char *ops_http_reason(int status) {
  switch (status) {
  case 200: return "OK";
  case 204: return "No Content";
  case 400: return "Bad Request";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 413: return "Content Too Large";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 503: return "Service Unavailable";
  default: return "Unknown";
  }
}

void ops_http_options_default(ops_http_options *o) {
  o->max_header = OPS_HTTP_DEFAULT_MAX_HEADER;
  o->max_body = OPS_HTTP_DEFAULT_MAX_BODY;
  o->timeout_ms = OPS_HTTP_DEFAULT_TIMEOUT_MS;
  o->max_connections = OPS_HTTP_DEFAULT_MAX_CONNECTIONS;
}

static void options_fill(ops_http_options *dst, const ops_http_options *o) {
  ops_http_options_default(dst);
  if (!o)
    return;
  if (o->max_header)
    dst->max_header = o->max_header;
  if (o->max_body)
    dst->max_body = o->max_body;
  if (o->timeout_ms)
    dst->timeout_ms = o->timeout_ms;
  if (o->max_connections)
    dst->max_connections = o->max_connections;
}

/* ---- sessions ---- */

struct ops_http_session {
  http_parser parser;
  ops_http_options o;
  ops_http_fn fn;
  void *ud;
  ops_buf url;
  size_t head, body;
  int busy;    /* a message began */
  int limit;   /* 431 or 413: a limit was broken */
  int stop;    /* the answer given closes the connection */
  int closing; /* feed returned 1 */
  unsigned long requests;
  ops_buf *out;
};

static void put_reply(ops_buf *out, const ops_http_reply *r, int head_only,
                      int close, int keep_alive_10) {
  const char *ct = r->content_type ? r->content_type
                                   : "text/plain; charset=utf-8";
  size_t len = r->body.failed ? 0 : r->body.len;
  int status = r->body.failed ? 500 : r->status;
  if (status < 100 || status > 599)
    status = 500;
  ops_buf_printf(out,
                 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: "
                 "%zu\r\nCache-Control: no-store\r\n",
                 status, ops_http_reason(status), ct, len);
  if (status == 405 && r->allow)
    ops_buf_printf(out, "Allow: %s\r\n", r->allow);
  if (close)
    ops_buf_str(out, "Connection: close\r\n");
  else if (keep_alive_10)
    ops_buf_str(out, "Connection: keep-alive\r\n");
  ops_buf_str(out, "\r\n");
  if (!head_only && len)
    ops_buf_add(out, r->body.p, len);
}

static void put_error(ops_buf *out, int status) {
  ops_http_reply r;
  ops_http_reply_init(&r);
  char text[64];
  snprintf(text, sizeof(text), "%s\n", ops_http_reason(status));
  ops_http_reply_text(&r, status, text);
  put_reply(out, &r, 0, 1, 0);
  ops_http_reply_free(&r);
}

static ops_http_session *session_of(http_parser *p) { return p->data; }

static int on_message_begin(http_parser *p) {
  ops_http_session *s = session_of(p);
  s->busy = 1;
  s->head = s->body = 0;
  ops_buf_reset(&s->url);
  return 0;
}

static int count_head(ops_http_session *s, size_t len, size_t overhead) {
  s->head += len + overhead;
  if (s->head > s->o.max_header) {
    s->limit = 431;
    return 1;
  }
  return 0;
}

static int on_url(http_parser *p, const char *at, size_t len) {
  ops_http_session *s = session_of(p);
  if (count_head(s, len, 0))
    return 1;
  return ops_buf_add(&s->url, at, len) == 0 ? 0 : 1;
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
  (void)at;
  return count_head(session_of(p), len, 2);
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
  (void)at;
  return count_head(session_of(p), len, 2);
}

static int on_body(http_parser *p, const char *at, size_t len) {
  (void)at;
  ops_http_session *s = session_of(p);
  s->body += len;
  if (s->body > s->o.max_body) {
    s->limit = 413;
    return 1;
  }
  return 0;
}

/* The path and query of |url| (origin form kept as is). */
static void target_of(const char *url, char *buf, size_t len) {
  struct http_parser_url u;
  if (url[0] == '/' || strcmp(url, "*") == 0) {
    snprintf(buf, len, "%s", url);
    return;
  }
  http_parser_url_init(&u);
  if (http_parser_parse_url(url, strlen(url), 0, &u) != 0 ||
      !(u.field_set & (1 << UF_PATH))) {
    snprintf(buf, len, "/");
    return;
  }
  size_t off = u.field_data[UF_PATH].off;
  size_t n = strlen(url + off);
  if (u.field_set & (1 << UF_FRAGMENT)) /* not sent by clients; dropped */
    n = u.field_data[UF_FRAGMENT].off - 1 - off;
  snprintf(buf, len, "%.*s", (int)n, url + off);
}

static int on_message_complete(http_parser *p) {
  ops_http_session *s = session_of(p);
  const char *method = http_method_str((enum http_method)p->method);
  size_t tlen = s->url.len + 2;
  char *target = malloc(tlen);
  ops_http_reply r;
  ops_http_reply_init(&r);
  if (!target) {
    r.body.failed = 1; /* answered 500 */
  } else {
    target_of(ops_buf_cstr(&s->url), target, tlen);
    s->fn(method, target, &r, s->ud);
  }
  int keep = http_should_keep_alive(p) && !p->upgrade;
  put_reply(s->out, &r, p->method == HTTP_HEAD, !keep,
            keep && p->http_major == 1 && p->http_minor == 0);
  ops_http_reply_free(&r);
  free(target);
  s->requests++;
  s->busy = 0;
  if (!keep) {
    s->stop = 1;
    return 1; /* stops the parser: what follows is not read */
  }
  return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

ops_http_session *ops_http_session_new(const ops_http_options *o,
                                       ops_http_fn fn, void *user_data) {
  ops_http_session *s = calloc(1, sizeof(*s));
  if (!s)
    return NULL;
  options_fill(&s->o, o);
  s->fn = fn;
  s->ud = user_data;
  ops_buf_init(&s->url);
  http_parser_init(&s->parser, HTTP_REQUEST);
  s->parser.data = s;
  return s;
}

void ops_http_session_del(ops_http_session *s) {
  if (!s)
    return;
  ops_buf_free(&s->url);
  free(s);
}

int ops_http_session_feed(ops_http_session *s, const char *data, size_t len,
                          ops_buf *out) {
  if (s->closing)
    return 1;
  if (len == 0)
    return 0; /* EOF is the caller's */
  s->out = out;
  http_parser_execute(&s->parser, &settings, data, len);
  s->out = NULL;
  enum http_errno e = HTTP_PARSER_ERRNO(&s->parser);
  if (s->stop) {
    s->closing = 1;
  } else if (e != HPE_OK) {
    put_error(out, s->limit              ? s->limit
                   : e == HPE_HEADER_OVERFLOW ? 431
                                              : 400);
    s->closing = 1;
  } else if (s->parser.upgrade) {
    s->closing = 1; /* no protocol switch here; answered already */
  }
  return s->closing;
}

int ops_http_session_busy(const ops_http_session *s) { return s->busy; }

unsigned long ops_http_session_requests(const ops_http_session *s) {
  return s->requests;
}

void ops_http_session_timeout(ops_http_session *s, ops_buf *out) {
  put_error(out, 408);
  s->closing = 1;
}

/* ---- the server ---- */

typedef struct conn conn;

struct ops_http_server {
  uv_loop_t *loop;
  uv_tcp_t listener;
  ops_http_options o;
  ops_http_fn fn;
  void *ud;
  int port;
  int closing;
  int listener_open;
  size_t nconns;
  conn *conns;
};

struct conn {
  ops_http_server *srv;
  conn *prev, *next;
  uv_tcp_t tcp;
  uv_timer_t timer;
  ops_http_session *session;
  ops_buf out;
  size_t pending;   /* bytes being written */
  int handles;      /* open handles */
  int closed;       /* uv_close() called */
  int draining;     /* the last answer is out or going: drop input */
  int shut;         /* uv_shutdown() requested */
  int paused;       /* reading stopped: too much unsent */
  unsigned long requests;
  uv_shutdown_t shutdown;
  char rbuf[READ_BUFFER];
};

typedef struct wreq {
  uv_write_t req;
  conn *c;
  size_t len;
  char data[];
} wreq;

static void server_maybe_free(ops_http_server *s) {
  if (s->closing && !s->listener_open && s->nconns == 0)
    free(s);
}

static void on_conn_handle_closed(uv_handle_t *h) {
  conn *c = h->data;
  if (--c->handles > 0)
    return;
  ops_http_server *s = c->srv;
  if (c->prev)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  s->nconns--;
  ops_http_session_del(c->session);
  ops_buf_free(&c->out);
  free(c);
  server_maybe_free(s);
}

static void conn_close(conn *c) {
  if (c->closed)
    return;
  c->closed = 1;
  uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
  uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  (void)hint;
  conn *c = h->data;
  *buf = uv_buf_init(c->rbuf, sizeof(c->rbuf));
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void on_linger(uv_timer_t *t) { conn_close(t->data); }

static void on_shutdown(uv_shutdown_t *req, int status) {
  conn *c = req->data;
  if (status < 0 || c->closed) {
    conn_close(c);
    return;
  }
  /* Read (and drop) until the client closes, LINGER_MS at most. */
  uv_timer_start(&c->timer, on_linger, LINGER_MS, 0);
  if (c->paused) {
    c->paused = 0;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  }
}

static void maybe_shutdown(conn *c) {
  if (!c->draining || c->shut || c->pending || c->closed)
    return;
  c->shut = 1;
  c->shutdown.data = c;
  if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) != 0)
    conn_close(c);
}

static void on_write(uv_write_t *req, int status) {
  wreq *w = (wreq *)req;
  conn *c = w->c;
  c->pending -= w->len;
  free(w);
  if (c->closed)
    return;
  if (status < 0) {
    conn_close(c);
    return;
  }
  if (c->paused && !c->draining && c->pending < WRITE_HIGH_WATER / 2) {
    c->paused = 0;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  }
  maybe_shutdown(c);
}

/* Sends what the session wrote into c->out. */
static void flush_out(conn *c) {
  if (c->out.failed) { /* out of memory: give up the connection */
    conn_close(c);
    return;
  }
  if (c->out.len == 0)
    return;
  wreq *w = malloc(sizeof(*w) + c->out.len);
  if (!w) {
    conn_close(c);
    return;
  }
  w->c = c;
  w->len = c->out.len;
  memcpy(w->data, c->out.p, c->out.len);
  ops_buf_reset(&c->out);
  uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write) != 0) {
    free(w);
    conn_close(c);
    return;
  }
  c->pending += w->len;
  if (c->pending >= WRITE_HIGH_WATER && !c->draining && !c->paused) {
    c->paused = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
  }
}

static void on_timeout(uv_timer_t *t) {
  conn *c = t->data;
  if (c->draining) {
    conn_close(c);
    return;
  }
  if (!ops_http_session_busy(c->session)) {
    conn_close(c); /* idle */
    return;
  }
  ops_http_session_timeout(c->session, &c->out);
  c->draining = 1;
  flush_out(c);
  if (!c->closed) {
    uv_timer_start(&c->timer, on_linger, LINGER_MS, 0);
    maybe_shutdown(c);
  }
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  conn *c = st->data;
  if (c->closed)
    return;
  if (nread < 0) { /* EOF or error */
    conn_close(c);
    return;
  }
  if (nread == 0 || c->draining)
    return;
  int close = ops_http_session_feed(c->session, buf->base, (size_t)nread,
                                    &c->out);
  unsigned long n = ops_http_session_requests(c->session);
  if (n != c->requests) { /* a request completed: the timeout restarts */
    c->requests = n;
    uv_timer_start(&c->timer, on_timeout, c->srv->o.timeout_ms, 0);
  }
  if (close) {
    c->draining = 1;
    uv_timer_start(&c->timer, on_linger, LINGER_MS, 0);
  }
  flush_out(c);
  maybe_shutdown(c);
}

static void close_free(uv_handle_t *h) { free(h); }

static void on_connection(uv_stream_t *ls, int status) {
  ops_http_server *s = ls->data;
  if (status < 0 || s->closing)
    return;
  conn *c = calloc(1, sizeof(*c));
  if (!c) {
    /* Take it off the backlog and drop it. */
    uv_tcp_t *t = malloc(sizeof(*t));
    if (t && uv_tcp_init(s->loop, t) == 0) {
      (void)uv_accept(ls, (uv_stream_t *)t);
      uv_close((uv_handle_t *)t, close_free);
    } else {
      free(t);
    }
    return;
  }
  c->srv = s;
  ops_buf_init(&c->out);
  uv_tcp_init(s->loop, &c->tcp);
  uv_timer_init(s->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->handles = 2;
  c->next = s->conns;
  if (s->conns)
    s->conns->prev = c;
  s->conns = c;
  s->nconns++;
  c->session = ops_http_session_new(&s->o, s->fn, s->ud);
  if (uv_accept(ls, (uv_stream_t *)&c->tcp) != 0 || !c->session ||
      s->nconns > s->o.max_connections) {
    conn_close(c);
    return;
  }
  uv_timer_start(&c->timer, on_timeout, s->o.timeout_ms, 0);
  uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void on_listener_closed(uv_handle_t *h) {
  ops_http_server *s = h->data;
  s->listener_open = 0;
  server_maybe_free(s);
}

/* "HOST:PORT" -> host and port strings. */
static int split_hostport(const char *hp, char *host, size_t hlen,
                          char *port, size_t plen) {
  const char *colon;
  const char *h = hp;
  size_t n;
  if (hp[0] == '[') {
    const char *close = strchr(hp, ']');
    if (!close || close[1] != ':')
      return -1;
    h = hp + 1;
    n = (size_t)(close - h);
    colon = close + 1;
  } else {
    colon = strrchr(hp, ':');
    if (!colon)
      return -1;
    n = (size_t)(colon - hp);
  }
  if (n == 0 || n >= hlen || strlen(colon + 1) >= plen || !colon[1])
    return -1;
  memcpy(host, h, n);
  host[n] = '\0';
  strcpy(port, colon + 1);
  return 0;
}

int ops_http_server_new(ops_http_server **ps, uv_loop_t *loop,
                        const char *hostport, const ops_http_options *o,
                        ops_http_fn fn, void *user_data, char *err,
                        size_t errlen) {
  char host[256], port[16];
  if (split_hostport(hostport, host, sizeof(host), port, sizeof(port)) != 0) {
    snprintf(err, errlen, "%s: expected HOST:PORT", hostport);
    return UV_EINVAL;
  }
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int rv = getaddrinfo(host, port, &hints, &res);
  if (rv != 0) {
    snprintf(err, errlen, "%s: %s", hostport, gai_strerror(rv));
    return UV_EINVAL;
  }
  ops_http_server *s = calloc(1, sizeof(*s));
  if (!s) {
    freeaddrinfo(res);
    snprintf(err, errlen, "out of memory");
    return UV_ENOMEM;
  }
  s->loop = loop;
  options_fill(&s->o, o);
  s->fn = fn;
  s->ud = user_data;
  uv_tcp_init(loop, &s->listener);
  s->listener.data = s;
  s->listener_open = 1;
  rv = uv_tcp_bind(&s->listener, res->ai_addr, 0);
  if (rv == 0)
    rv = uv_listen((uv_stream_t *)&s->listener, 64, on_connection);
  freeaddrinfo(res);
  if (rv == 0) {
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    rv = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
    if (rv == 0)
      s->port = ntohs(ss.ss_family == AF_INET6
                          ? ((struct sockaddr_in6 *)&ss)->sin6_port
                          : ((struct sockaddr_in *)&ss)->sin_port);
  }
  if (rv != 0) {
    snprintf(err, errlen, "cannot listen on %s: %s", hostport,
             uv_strerror(rv));
    s->closing = 1;
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
    return rv;
  }
  *ps = s;
  return 0;
}

int ops_http_server_port(const ops_http_server *s) { return s->port; }

size_t ops_http_server_connections(const ops_http_server *s) {
  return s->nconns;
}

void ops_http_server_close(ops_http_server *s) {
  if (!s || s->closing)
    return;
  s->closing = 1;
  for (conn *c = s->conns; c; c = c->next)
    conn_close(c);
  uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}
