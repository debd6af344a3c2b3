/* HTTP/1.1 on a listener (http-parser): "Upgrade: h2c" switches the
 * connection to HTTP/2; any other request gets a plain answer (the
 * application's http_handler, or the built-in /healthz and 404). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

#define MAX_URL (8 << 10)
#define MAX_HEADERS (32 << 10)
#define MAX_BODY (16 << 20)

/* ------------------------------------------------------------------ */
/* Plain answers                                                       */
/* ------------------------------------------------------------------ */

struct mcp_h2c_http_response {
  int status;
  char *content_type;
  mcp_buf body;
  const mcp_mem *mem; /* the object's */
};

void mcp_h2c_http_respond(mcp_h2c_http_response *resp, int status,
                          const char *content_type) {
  resp->status = status >= 100 && status <= 599 ? status : 500;
  mcp_h2c_free(resp->mem, resp->content_type);
  resp->content_type = NULL;
  if (content_type)
    resp->content_type = mcp_h2c_strdup(resp->mem, content_type);
}

int mcp_h2c_http_append(mcp_h2c_http_response *resp, const void *data,
                        size_t len) {
  if (len > MAX_BODY - resp->body.len)
    return MCP_ERR_LIMIT;
  return mcp_buf_append(&resp->body, data, len);
}

static int path_is(const char *path, const char *want) {
  size_t n = strlen(want);
  return strncmp(path, want, n) == 0 && (path[n] == '\0' || path[n] == '?');
}

void mcp_h2c_http_answer(mcp_h2c_ep *ep, const char *method, const char *path,
                         int *status, char **content_type, mcp_buf *body) {
  mcp_h2c_http_response r = {
      .status = 200, .body = {.mem = &ep->mem}, .mem = &ep->mem};
  int handled = 0;
  if (ep->opts.http_handler && !ep->stopping)
    handled = ep->opts.http_handler(method, path, &r, ep->opts.user_data);
  if (!handled) {
    mcp_h2c_free(&ep->mem, r.content_type);
    mcp_buf_free(&r.body);
    r.content_type = NULL;
    r.status = 200;
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    if (get && path_is(path, "/healthz")) {
      mcp_h2c_buf_puts(&r.body, "ok\n");
    } else {
      r.status = 404;
      mcp_h2c_buf_puts(&r.body, "not found\n");
    }
  }
  *status = r.status;
  *content_type = r.content_type; /* NULL: text/plain */
  *body = r.body;
}

/* ------------------------------------------------------------------ */
/* Parsing                                                             */
/* ------------------------------------------------------------------ */

static mcp_h2c_http1 *h1_of(http_parser *p) {
  return MCP_H2C_CONTAINER(p, mcp_h2c_http1, parser);
}

static void request_reset(mcp_h2c_http1 *h) {
  h->url.len = 0;
  h->field.len = 0;
  h->value.len = 0;
  h->in_value = 0;
  mcp_h2c_free(h->mem, h->upgrade);
  mcp_h2c_free(h->mem, h->connection);
  mcp_h2c_free(h->mem, h->settings);
  mcp_h2c_free(h->mem, h->content_type);
  mcp_h2c_free(h->mem, h->te);
  h->upgrade = h->connection = h->settings = h->content_type = h->te = NULL;
  h->header_bytes = 0;
  h->has_body = 0;
  h->bad = 0;
  h->complete = 0;
}

static int on_message_begin(http_parser *p) {
  request_reset(h1_of(p));
  return 0;
}

static int on_url(http_parser *p, const char *at, size_t n) {
  mcp_h2c_http1 *h = h1_of(p);
  if (h->url.len + n > MAX_URL) {
    h->bad = 414;
    return 0;
  }
  if (mcp_buf_append(&h->url, at, n) < 0)
    h->bad = 503;
  return 0;
}

static char *take_value(mcp_h2c_http1 *h) {
  char *v = mcp_h2c_malloc(h->mem, h->value.len + 1);
  if (v) {
    if (h->value.len) /* an empty value has no buffer yet */
      memcpy(v, h->value.p, h->value.len);
    v[h->value.len] = '\0';
  }
  return v;
}

/* A header line is complete: keep the fields we need. */
static void header_done(mcp_h2c_http1 *h) {
  if (!h->in_value)
    return;
  h->in_value = 0;
  static const char *const names[] = {"upgrade", "connection", "http2-settings",
                                      "content-type", "te"};
  char **slots[] = {&h->upgrade, &h->connection, &h->settings, &h->content_type,
                    &h->te};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
    if (h->field.len == strlen(names[i]) &&
        strncasecmp((const char *)h->field.p, names[i], h->field.len) == 0) {
      mcp_h2c_free(h->mem, *slots[i]);
      *slots[i] = take_value(h);
      if (!*slots[i])
        h->bad = 503;
    }
  }
  h->field.len = 0;
  h->value.len = 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n) {
  mcp_h2c_http1 *h = h1_of(p);
  header_done(h);
  h->header_bytes += n;
  if (h->header_bytes > MAX_HEADERS) {
    h->bad = 431;
    return 0;
  }
  if (mcp_buf_append(&h->field, at, n) < 0)
    h->bad = 503;
  return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n) {
  mcp_h2c_http1 *h = h1_of(p);
  h->in_value = 1;
  h->header_bytes += n;
  if (h->header_bytes > MAX_HEADERS) {
    h->bad = 431;
    return 0;
  }
  if (mcp_buf_append(&h->value, at, n) < 0)
    h->bad = 503;
  return 0;
}

static int on_headers_complete(http_parser *p) {
  mcp_h2c_http1 *h = h1_of(p);
  header_done(h);
  h->has_body = (p->flags & F_CHUNKED) ||
                (p->content_length > 0 && p->content_length != UINT64_MAX);
  return 0;
}

static int on_message_complete(http_parser *p) {
  mcp_h2c_http1 *h = h1_of(p);
  h->complete = 1;
  http_parser_pause(p, 1); /* answered outside the parser */
  return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_message_complete = on_message_complete,
};

int mcp_h2c_http1_start(mcp_h2c_conn *c) {
  mcp_h2c_http1 *h = mcp_h2c_calloc(&c->ep->mem, 1, sizeof(*h));
  if (!h)
    return MCP_ERR_NOMEM;
  h->mem = h->url.mem = h->field.mem = h->value.mem = &c->ep->mem;
  http_parser_init(&h->parser, HTTP_REQUEST);
  c->h1 = h;
  c->proto = MCP_H2C_PROTO_HTTP1;
  return 0;
}

void mcp_h2c_http1_free(mcp_h2c_conn *c) {
  mcp_h2c_http1 *h = c->h1;
  if (!h)
    return;
  request_reset(h);
  mcp_buf_free(&h->url);
  mcp_buf_free(&h->field);
  mcp_buf_free(&h->value);
  mcp_h2c_free(h->mem, h);
  c->h1 = NULL;
}

/* ------------------------------------------------------------------ */
/* Answering                                                           */
/* ------------------------------------------------------------------ */

static int write_answer(mcp_h2c_conn *c, int status, const char *ctype,
                        const mcp_buf *body, int send_body, int close) {
  char head[512];
  int n = snprintf(head, sizeof(head),
                   "HTTP/1.1 %d %s\r\n"
                   "Content-Type: %.200s\r\n"
                   "Content-Length: %zu\r\n"
                   "%s"
                   "\r\n",
                   status, mcp_h2c_reason(status), ctype ? ctype : "text/plain",
                   body ? body->len : 0, close ? "Connection: close\r\n" : "");
  if (mcp_h2c_conn_write(c, head, (size_t)n) < 0)
    return MCP_ERR_NOMEM;
  if (send_body && body && body->len &&
      mcp_h2c_conn_write(c, body->p, body->len) < 0)
    return MCP_ERR_NOMEM;
  return 0;
}

static int simple_answer(mcp_h2c_conn *c, int status, int close) {
  mcp_buf b = {.mem = &c->ep->mem};
  mcp_h2c_buf_puts(&b, mcp_h2c_reason(status));
  mcp_h2c_buf_puts(&b, "\n");
  int rv = write_answer(c, status, NULL, &b, 1, close);
  mcp_buf_free(&b);
  return rv;
}

/* "Upgrade: h2c": answer 101, start HTTP/2 as the server of stream 1
 * (the request just read, half-closed), then read the client's preface
 * from |rest|. Returns 0, or <0 to close. */
static int upgrade(mcp_h2c_conn *c, const uint8_t *rest, size_t nrest) {
  mcp_h2c_http1 *h = c->h1;
  size_t slen = strlen(h->settings);
  uint8_t *payload = mcp_h2c_malloc(&c->ep->mem, slen * 3 / 4 + 4);
  if (!payload)
    return MCP_ERR_NOMEM;
  long plen = mcp_h2c_base64url_decode(h->settings, slen, payload);
  if (plen < 0 || plen % 6 != 0) {
    mcp_h2c_free(&c->ep->mem, payload);
    simple_answer(c, 400, 1);
    return -1;
  }
  static const char switching[] = "HTTP/1.1 101 Switching Protocols\r\n"
                                  "Connection: Upgrade\r\n"
                                  "Upgrade: h2c\r\n\r\n";
  int head = h->parser.method == HTTP_HEAD;
  const char *method = http_method_str((enum http_method)h->parser.method);
  mcp_h2c_stream *s = NULL;
  int rv = mcp_h2c_conn_write(c, switching, sizeof(switching) - 1);
  if (rv == 0)
    rv = mcp_h2c_session_new(c, 1);
  if (rv == 0 && !(s = mcp_h2c_stream_new(c, 1)))
    rv = MCP_ERR_NOMEM;
  if (rv == 0 &&
      nghttp2_session_upgrade2(c->h2, payload, (size_t)plen, head, s) != 0)
    rv = -1;
  mcp_h2c_free(&c->ep->mem, payload);
  if (rv < 0) {
    if (c->proto == MCP_H2C_PROTO_H2) /* half switched: give up */
      mcp_h2c_conn_close(c, MCP_CODE_INTERNAL, "HTTP/2 upgrade failed");
    return -1;
  }
  /* The server side ignores the user data given to upgrade2. */
  nghttp2_session_set_stream_user_data(c->h2, 1, s);
  s->hd.method = mcp_h2c_strdup(&c->ep->mem, method);
  if (mcp_buf_append(&h->url, "", 1) < 0) {
    mcp_h2c_conn_close(c, MCP_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  s->hd.path = (char *)h->url.p;
  h->url = (mcp_buf){.mem = h->mem};
  s->hd.content_type = h->content_type;
  s->hd.te = h->te;
  h->content_type = h->te = NULL;
  mcp_h2c_http1_free(c);
  s->remote_closed = 1;
  mcp_h2c_stream_request(s);
  if (s->kind == MCP_H2C_SK_HTTP && !s->response_submitted)
    mcp_h2c_stream_http_answer(s); /* the request is complete */
  if (nrest > 0) {
    ssize_t r = nghttp2_session_mem_recv(c->h2, rest, nrest);
    if (r < 0) {
      mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, nghttp2_strerror((int)r));
      return -1;
    }
  }
  return 1;
}

/* The request is complete: answer it. Returns 1 when the connection now
 * speaks HTTP/2, 0 to go on, <0 to close after the answer. */
static int handle(mcp_h2c_conn *c, const uint8_t *rest, size_t nrest) {
  mcp_h2c_http1 *h = c->h1;
  mcp_h2c_ep *ep = c->ep;
  c->idle_since = mcp_h2c_now();
  if (h->bad) {
    simple_answer(c, h->bad, 1);
    return -1;
  }
  if (h->parser.upgrade && h->upgrade && h->settings && !h->has_body &&
      mcp_h2c_has_token(h->upgrade, "h2c") && !ep->stopping)
    return upgrade(c, rest, nrest);
  int keep = http_should_keep_alive(&h->parser) && !ep->stopping;
  const char *method = http_method_str((enum http_method)h->parser.method);
  if (mcp_buf_append(&h->url, "", 1) < 0) {
    simple_answer(c, 503, 1);
    return -1;
  }
  int status;
  char *ctype;
  mcp_buf body;
  mcp_h2c_http_answer(ep, method, (const char *)h->url.p, &status, &ctype,
                      &body);
  int rv = write_answer(c, status, ctype, &body, h->parser.method != HTTP_HEAD,
                        !keep);
  mcp_h2c_free(&ep->mem, ctype);
  mcp_buf_free(&body);
  if (rv < 0 || !keep)
    return -1;
  return 0;
}

int mcp_h2c_http1_feed(mcp_h2c_conn *c, const uint8_t *p, size_t n) {
  while (n > 0 && c->h1) {
    mcp_h2c_http1 *h = c->h1;
    size_t used =
        http_parser_execute(&h->parser, &settings, (const char *)p, n);
    enum http_errno err = HTTP_PARSER_ERRNO(&h->parser);
    if (used > n)
      used = n;
    p += used;
    n -= used;
    if (h->complete) {
      h->complete = 0;
      int rv = handle(c, p, n);
      if (rv != 0)
        return rv > 0 ? 0 : -1;
      if (err == HPE_PAUSED)
        http_parser_pause(&h->parser, 0);
      if (h->parser.upgrade) /* an upgrade we declined: parse on */
        http_parser_init(&h->parser, HTTP_REQUEST);
      continue;
    }
    if (err != HPE_OK) {
      simple_answer(c, 400, 1);
      return -1;
    }
    if (used == 0)
      break;
  }
  return 0;
}
