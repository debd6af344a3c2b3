/*
 * Tests of tools/ops/http.h (the debug HTTP/1.1 server: the session layer
 * fed bytes directly, and the libuv server over real sockets) and of the
 * debug router of tools/ops/ops.h without a transport.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ops/http.h"
#include "ops/ops.h"

/* ---- a handler that records what it saw ---- */

typedef struct seen {
  int calls;
  char method[16];
  char path[256];
} seen;

static void handler(const char *method, const char *path, ops_http_reply *r,
                    void *ud) {
  seen *s = ud;
  s->calls++;
  snprintf(s->method, sizeof(s->method), "%s", method);
  snprintf(s->path, sizeof(s->path), "%s", path);
  if (strcmp(path, "/missing") == 0) {
    ops_http_reply_text(r, 404, "not found\n");
    return;
  }
  r->content_type = "text/x-test";
  ops_buf_printf(&r->body, "hello %s", path);
}

static ops_http_session *session(seen *s, size_t max_header,
                                 size_t max_body) {
  ops_http_options o;
  ops_http_options_default(&o);
  if (max_header)
    o.max_header = max_header;
  if (max_body)
    o.max_body = max_body;
  memset(s, 0, sizeof(*s));
  ops_http_session *hs = ops_http_session_new(&o, handler, s);
  ck_assert_ptr_nonnull(hs);
  return hs;
}

static int feed(ops_http_session *hs, const char *data, ops_buf *out) {
  return ops_http_session_feed(hs, data, strlen(data), out);
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
    n++;
  return n;
}

/* ---- sessions ---- */

START_TEST(test_get_keep_alive) {
  seen s;
  ops_http_session *hs = session(&s, 0, 0);
  ops_buf out;
  ops_buf_init(&out);
  ck_assert_int_eq(feed(hs, "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n",
                        &out),
                   0);
  ck_assert_str_eq(ops_buf_cstr(&out),
                   "HTTP/1.1 200 OK\r\nContent-Type: text/x-test\r\n"
                   "Content-Length: 18\r\nCache-Control: no-store\r\n\r\n"
                   "hello /metrics?x=1");
  ck_assert_int_eq(s.calls, 1);
  ck_assert_str_eq(s.method, "GET");
  ops_buf_free(&out);
  ops_http_session_del(hs);
}
END_TEST

START_TEST(test_pipelined_and_split) {
  seen s;
  ops_http_session *hs = session(&s, 0, 0);
  ops_buf out;
  ops_buf_init(&out);
  const char *two = "GET /a HTTP/1.1\r\nHost: a\r\n\r\n"
                    "GET /bb HTTP/1.1\r\nHost: a\r\n\r\n";
  ck_assert_int_eq(feed(hs, two, &out), 0);
  const char *a = strstr(ops_buf_cstr(&out), "hello /a");
  const char *b = strstr(ops_buf_cstr(&out), "hello /bb");
  ck_assert(a && b && a < b);
  /* One byte at a time. */
  ops_buf_reset(&out);
  const char *req = "GET /slow HTTP/1.1\r\nHost: a\r\nX-Y: z\r\n\r\n";
  for (size_t i = 0; req[i]; i++) {
    ck_assert_int_eq(ops_http_session_busy(hs), i > 0);
    ck_assert_int_eq(ops_http_session_feed(hs, req + i, 1, &out), 0);
  }
  ck_assert_int_eq(ops_http_session_busy(hs), 0);
  ck_assert_ptr_nonnull(strstr(ops_buf_cstr(&out), "hello /slow"));
  ck_assert_int_eq(ops_http_session_requests(hs), 3);
  ops_buf_free(&out);
  ops_http_session_del(hs);
}
END_TEST

START_TEST(test_head_has_length_no_body) {
  seen s;
  ops_http_session *hs = session(&s, 0, 0);
  ops_buf out;
  ops_buf_init(&out);
  ck_assert_int_eq(feed(hs, "HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n", &out), 0);
  ck_assert_str_eq(ops_buf_cstr(&out),
                   "HTTP/1.1 200 OK\r\nContent-Type: text/x-test\r\n"
                   "Content-Length: 8\r\nCache-Control: no-store\r\n\r\n");
  ck_assert_str_eq(s.method, "HEAD");
  ops_buf_free(&out);
  ops_http_session_del(hs);
}
END_TEST

START_TEST(test_connection_close_and_http10) {
  seen s;
  ops_buf out;
  ops_buf_init(&out);
  ops_http_session *hs = session(&s, 0, 0);
  /* What follows a "Connection: close" request is not read. */
  ck_assert_int_eq(feed(hs,
                        "GET /a HTTP/1.1\r\nConnection: close\r\n\r\n"
                        "GET /b HTTP/1.1\r\n\r\n",
                        &out),
                   1);
  ck_assert_int_eq(s.calls, 1);
  ck_assert_ptr_nonnull(strstr(ops_buf_cstr(&out), "Connection: close\r\n"));
  ops_buf_reset(&out);
  ck_assert_int_eq(feed(hs, "GET /c HTTP/1.1\r\n\r\n", &out), 1);
  ck_assert_int_eq(out.len, 0);
  ops_http_session_del(hs);

  /* HTTP/1.0: closes, unless it asks for keep-alive. */
  hs = session(&s, 0, 0);
  ck_assert_int_eq(feed(hs, "GET /a HTTP/1.0\r\n\r\n", &out), 1);
  ck_assert_ptr_nonnull(strstr(ops_buf_cstr(&out), "Connection: close"));
  ops_http_session_del(hs);
  ops_buf_reset(&out);
  hs = session(&s, 0, 0);
  ck_assert_int_eq(
      feed(hs, "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &out), 0);
  ck_assert_ptr_nonnull(
      strstr(ops_buf_cstr(&out), "Connection: keep-alive\r\n"));
  ops_http_session_del(hs);
  ops_buf_free(&out);
}
END_TEST

START_TEST(test_bad_requests) {
  static const char *const bad[] = {
      "garbage\r\n\r\n",
      "GET / HTTP/9.9.9\r\n\r\n",
      "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
      "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "\x01\x02\x03",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    seen s;
    ops_buf out;
    ops_buf_init(&out);
    ops_http_session *hs = session(&s, 0, 0);
    ck_assert_int_eq(feed(hs, bad[i], &out), 1);
    ck_assert_msg(strncmp(ops_buf_cstr(&out), "HTTP/1.1 400 Bad Request\r\n",
                          26) == 0,
                  "case %zu: %s", i, ops_buf_cstr(&out));
    ck_assert_ptr_nonnull(strstr(ops_buf_cstr(&out), "Connection: close"));
    ck_assert_int_eq(s.calls, 0);
    ops_buf_free(&out);
    ops_http_session_del(hs);
  }
}
END_TEST

START_TEST(test_size_limits) {
  seen s;
  ops_buf out;
  ops_buf_init(&out);
  /* Headers over the limit: 431, the handler never runs. */
  ops_http_session *hs = session(&s, 256, 64);
  char big[1024];
  snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nX-Big: %0300d\r\n\r\n", 7);
  ck_assert_int_eq(feed(hs, big, &out), 1);
  ck_assert_int_eq(strncmp(ops_buf_cstr(&out), "HTTP/1.1 431 ", 13), 0);
  ck_assert_int_eq(s.calls, 0);
  ops_http_session_del(hs);
  /* A long URL counts too. */
  ops_buf_reset(&out);
  hs = session(&s, 256, 64);
  snprintf(big, sizeof(big), "GET /%0400d HTTP/1.1\r\n\r\n", 1);
  ck_assert_int_eq(feed(hs, big, &out), 1);
  ck_assert_int_eq(strncmp(ops_buf_cstr(&out), "HTTP/1.1 431 ", 13), 0);
  ops_http_session_del(hs);
  /* Many small headers add up. */
  ops_buf_reset(&out);
  hs = session(&s, 256, 64);
  ck_assert_int_eq(feed(hs, "GET / HTTP/1.1\r\n", &out), 0);
  int rv = 0;
  for (int i = 0; i < 100 && rv == 0; i++)
    rv = feed(hs, "A: b\r\n", &out);
  ck_assert_int_eq(rv, 1);
  ck_assert_int_eq(strncmp(ops_buf_cstr(&out), "HTTP/1.1 431 ", 13), 0);
  ops_http_session_del(hs);
  /* A body within the limit is read and ignored; over it: 413. */
  ops_buf_reset(&out);
  hs = session(&s, 256, 64);
  ck_assert_int_eq(feed(hs,
                        "POST /p HTTP/1.1\r\nContent-Length: 10\r\n\r\n"
                        "0123456789",
                        &out),
                   0);
  ck_assert_int_eq(s.calls, 1);
  ck_assert_str_eq(s.method, "POST");
  ops_buf_reset(&out);
  char body[200];
  snprintf(body, sizeof(body),
           "POST /p HTTP/1.1\r\nContent-Length: 100\r\n\r\n%0100d", 3);
  ck_assert_int_eq(feed(hs, body, &out), 1);
  ck_assert_int_eq(strncmp(ops_buf_cstr(&out), "HTTP/1.1 413 ", 13), 0);
  ck_assert_int_eq(s.calls, 1);
  ops_http_session_del(hs);
  ops_buf_free(&out);
}
END_TEST

START_TEST(test_targets_and_upgrade) {
  seen s;
  ops_buf out;
  ops_buf_init(&out);
  ops_http_session *hs = session(&s, 0, 0);
  ck_assert_int_eq(feed(hs,
                        "GET http://example.com:8080/debug/syncz?a=b "
                        "HTTP/1.1\r\n\r\n",
                        &out),
                   0);
  ck_assert_str_eq(s.path, "/debug/syncz?a=b");
  /* An Upgrade request (h2c) is answered plainly, then closed. */
  ops_buf_reset(&out);
  ck_assert_int_eq(feed(hs,
                        "GET /u HTTP/1.1\r\nConnection: Upgrade, "
                        "HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: "
                        "AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
                        &out),
                   1);
  ck_assert_str_eq(s.path, "/u");
  ck_assert_ptr_nonnull(strstr(ops_buf_cstr(&out), "HTTP/1.1 200 OK"));
  ck_assert_ptr_nonnull(strstr(ops_buf_cstr(&out), "Connection: close"));
  ops_http_session_del(hs);
  ops_buf_free(&out);
}
END_TEST

START_TEST(test_timeout_answer) {
  seen s;
  ops_buf out;
  ops_buf_init(&out);
  ops_http_session *hs = session(&s, 0, 0);
  ck_assert_int_eq(feed(hs, "GET / HT", &out), 0);
  ck_assert_int_eq(ops_http_session_busy(hs), 1);
  ops_http_session_timeout(hs, &out);
  ck_assert_int_eq(strncmp(ops_buf_cstr(&out), "HTTP/1.1 408 ", 13), 0);
  ck_assert_int_eq(feed(hs, "TP/1.1\r\n\r\n", &out), 1);
  ops_http_session_del(hs);
  ops_buf_free(&out);
}
END_TEST

/* ---- the server over sockets ---- */

typedef struct server_fixture {
  uv_loop_t loop;
  uv_async_t stop;
  ops_http_server *srv;
  pthread_t thread;
  seen seen;
  int port;
} server_fixture;

static void on_stop(uv_async_t *a) {
  server_fixture *f = a->data;
  ops_http_server_close(f->srv);
  uv_close((uv_handle_t *)&f->stop, NULL);
}

static void *loop_thread(void *p) {
  server_fixture *f = p;
  uv_run(&f->loop, UV_RUN_DEFAULT);
  return NULL;
}

static void server_start(server_fixture *f, unsigned timeout_ms,
                         size_t max_conns) {
  memset(f, 0, sizeof(*f));
  ck_assert_int_eq(uv_loop_init(&f->loop), 0);
  ops_http_options o;
  ops_http_options_default(&o);
  o.timeout_ms = timeout_ms;
  o.max_connections = max_conns;
  o.max_header = 512;
  char err[256];
  ck_assert_int_eq(ops_http_server_new(&f->srv, &f->loop, "127.0.0.1:0", &o,
                                       handler, &f->seen, err, sizeof(err)),
                   0);
  f->port = ops_http_server_port(f->srv);
  ck_assert_int_gt(f->port, 0);
  uv_async_init(&f->loop, &f->stop, on_stop);
  f->stop.data = f;
  ck_assert_int_eq(pthread_create(&f->thread, NULL, loop_thread, f), 0);
}

static void server_stop(server_fixture *f) {
  uv_async_send(&f->stop);
  pthread_join(f->thread, NULL);
  ck_assert_int_eq(uv_loop_close(&f->loop), 0);
}

static int dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  return fd;
}

static void send_all(int fd, const char *s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    ck_assert_int_gt(w, 0);
    s += w;
    n -= (size_t)w;
  }
}

/* Reads until |needle| has been seen |times| times, EOF, or |ms|. Returns
 * the bytes read (NUL-terminated, in |buf|); |*eof| when the peer closed. */
static size_t read_until(int fd, char *buf, size_t len, const char *needle,
                         int times, int ms, int *eof) {
  size_t got = 0;
  *eof = 0;
  buf[0] = '\0';
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    if (needle && count(buf, needle) >= times)
      return got;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long spent = (now.tv_sec - start.tv_sec) * 1000 +
                 (now.tv_nsec - start.tv_nsec) / 1000000;
    if (spent >= ms)
      return got;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, (int)(ms - spent)) <= 0)
      continue;
    ssize_t n = recv(fd, buf + got, len - 1 - got, 0);
    if (n <= 0) {
      *eof = 1;
      return got;
    }
    got += (size_t)n;
    buf[got] = '\0';
  }
}

START_TEST(test_server_keep_alive) {
  server_fixture f;
  server_start(&f, 5000, 8);
  int fd = dial(f.port);
  char buf[4096];
  int eof;
  send_all(fd, "GET /one HTTP/1.1\r\nHost: x\r\n\r\n");
  read_until(fd, buf, sizeof(buf), "hello /one", 1, 3000, &eof);
  ck_assert_ptr_nonnull(strstr(buf, "HTTP/1.1 200 OK"));
  ck_assert_int_eq(eof, 0);
  /* Same connection, then two pipelined. */
  send_all(fd, "GET /two HTTP/1.1\r\nHost: x\r\n\r\nGET /three HTTP/1.1\r\n"
               "Host: x\r\n\r\n");
  read_until(fd, buf, sizeof(buf), "HTTP/1.1 200", 2, 3000, &eof);
  ck_assert_ptr_nonnull(strstr(buf, "hello /two"));
  ck_assert_ptr_nonnull(strstr(buf, "hello /three"));
  ck_assert_int_eq(eof, 0);
  /* 404 from the handler, then close on request. */
  send_all(fd, "GET /missing HTTP/1.1\r\nConnection: close\r\n\r\n");
  read_until(fd, buf, sizeof(buf), NULL, 0, 3000, &eof);
  ck_assert_ptr_nonnull(strstr(buf, "HTTP/1.1 404 Not Found"));
  ck_assert_int_eq(eof, 1);
  close(fd);
  server_stop(&f);
}
END_TEST

START_TEST(test_server_idle_and_slow_timeouts) {
  server_fixture f;
  server_start(&f, 300, 8);
  char buf[4096];
  int eof;
  /* Idle: closed without an answer. */
  int idle = dial(f.port);
  /* Slow: a request begun and never finished gets 408. */
  int slow = dial(f.port);
  send_all(slow, "GET /never HTTP/1.1\r\nHost:");
  read_until(idle, buf, sizeof(buf), NULL, 0, 3000, &eof);
  ck_assert_int_eq(eof, 1);
  ck_assert_str_eq(buf, "");
  read_until(slow, buf, sizeof(buf), NULL, 0, 5000, &eof);
  ck_assert_int_eq(eof, 1);
  ck_assert_ptr_nonnull(strstr(buf, "HTTP/1.1 408 Request Timeout"));
  close(idle);
  close(slow);
  /* A keep-alive connection is closed once idle after its answer. */
  int ka = dial(f.port);
  send_all(ka, "GET /k HTTP/1.1\r\n\r\n");
  read_until(ka, buf, sizeof(buf), "hello /k", 1, 3000, &eof);
  ck_assert_int_eq(eof, 0);
  read_until(ka, buf, sizeof(buf), NULL, 0, 3000, &eof);
  ck_assert_int_eq(eof, 1);
  close(ka);
  server_stop(&f);
}
END_TEST

START_TEST(test_server_limits) {
  server_fixture f;
  server_start(&f, 5000, 2);
  char buf[8192];
  int eof;
  int a = dial(f.port), b = dial(f.port);
  /* Let the server accept both before the third. */
  send_all(a, "GET /a HTTP/1.1\r\n\r\n");
  read_until(a, buf, sizeof(buf), "hello /a", 1, 3000, &eof);
  send_all(b, "GET /b HTTP/1.1\r\n\r\n");
  read_until(b, buf, sizeof(buf), "hello /b", 1, 3000, &eof);
  int c = dial(f.port); /* over max_connections: closed at once */
  read_until(c, buf, sizeof(buf), NULL, 0, 3000, &eof);
  ck_assert_int_eq(eof, 1);
  ck_assert_str_eq(buf, "");
  close(c);
  /* An oversized request: 431, then the connection closes. */
  char big[2048];
  snprintf(big, sizeof(big), "GET /big HTTP/1.1\r\nX: %01000d\r\n\r\n", 1);
  send_all(a, big);
  read_until(a, buf, sizeof(buf), NULL, 0, 5000, &eof);
  ck_assert_ptr_nonnull(strstr(buf, "HTTP/1.1 431 "));
  ck_assert_int_eq(eof, 1);
  close(a);
  /* Garbage: 400, closed. */
  send_all(b, "BLAH\r\n\r\n");
  read_until(b, buf, sizeof(buf), NULL, 0, 5000, &eof);
  ck_assert_ptr_nonnull(strstr(buf, "HTTP/1.1 400 "));
  ck_assert_int_eq(eof, 1);
  close(b);
  server_stop(&f);
}
END_TEST

START_TEST(test_server_bad_address) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  ops_http_server *s = NULL;
  char err[256];
  ck_assert_int_lt(ops_http_server_new(&s, &loop, "nocolon", NULL, handler,
                                       NULL, err, sizeof(err)),
                   0);
  ck_assert_ptr_nonnull(strstr(err, "HOST:PORT"));
  /* A port in use. */
  ck_assert_int_eq(ops_http_server_new(&s, &loop, "127.0.0.1:0", NULL,
                                       handler, NULL, err, sizeof(err)),
                   0);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", ops_http_server_port(s));
  ops_http_server *s2 = NULL;
  ck_assert_int_lt(ops_http_server_new(&s2, &loop, addr, NULL, handler, NULL,
                                       err, sizeof(err)),
                   0);
  ck_assert_ptr_nonnull(strstr(err, "cannot listen"));
  ops_http_server_close(s);
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* ---- the router, without a transport ---- */

static ops_http_reply route(tool_ops *ops, const char *method,
                            const char *path) {
  ops_http_reply r;
  ops_http_reply_init(&r);
  tool_ops_http(method, path, &r, ops);
  return r;
}

START_TEST(test_router) {
  tool_ops_options o = {.role = TOOL_OPS_SOURCE, .component = "mcp-source"};
  tool_ops *ops = NULL;
  ck_assert_int_eq(tool_ops_new(&ops, &o), 0);
  ops_http_reply r = route(ops, "GET", "/healthz");
  ck_assert_int_eq(r.status, 200);
  ck_assert_str_eq(ops_buf_cstr(&r.body), "ok\n");
  ops_http_reply_free(&r);
  r = route(ops, "GET", "/readyz");
  ck_assert_int_eq(r.status, 503);
  ops_http_reply_free(&r);
  tool_ops_set_ready(ops, 1);
  r = route(ops, "GET", "/readyz?verbose");
  ck_assert_int_eq(r.status, 200);
  ops_http_reply_free(&r);
  r = route(ops, "GET", "/metrics");
  ck_assert_int_eq(r.status, 200);
  ck_assert_str_eq(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
  ck_assert_ptr_nonnull(strstr(ops_buf_cstr(&r.body),
                               "# TYPE istio_mcp_clients_total gauge\n"));
  ck_assert_ptr_nonnull(strstr(
      ops_buf_cstr(&r.body),
      "istio_mcp_clients_total{component=\"mcp-source\"} 0\n"));
  ops_http_reply_free(&r);
  r = route(ops, "POST", "/metrics");
  ck_assert_int_eq(r.status, 405);
  ck_assert_str_eq(r.allow, "GET, HEAD");
  ops_http_reply_free(&r);
  r = route(ops, "GET", "/nope");
  ck_assert_int_eq(r.status, 404);
  ops_http_reply_free(&r);
  r = route(ops, "GET", "/metricsX");
  ck_assert_int_eq(r.status, 404);
  ops_http_reply_free(&r);
  /* No endpoint attached: the pages that read it are unavailable. */
  r = route(ops, "GET", "/debug/syncz");
  ck_assert_int_eq(r.status, 503);
  ops_http_reply_free(&r);
  /* The journal is a sink's. */
  r = route(ops, "GET", "/debug/journal");
  ck_assert_int_eq(r.status, 404);
  ops_http_reply_free(&r);
  tool_ops_del(ops);

  o.role = TOOL_OPS_SINK;
  ck_assert_int_eq(tool_ops_new(&ops, &o), 0);
  r = route(ops, "GET", "/debug/journal");
  ck_assert_int_eq(r.status, 503);
  ops_http_reply_free(&r);
  r = route(ops, "HEAD", "/readyz");
  ck_assert_int_eq(r.status, 503);
  ops_http_reply_free(&r);
  tool_ops_del(ops);
}
END_TEST


/* ---- bounded debug pages (issue 12, point 3) ---- */

/* Real core sessions behind the transport's introspection table: a test
 * transport that only lists them, as the gRPC and h2c ones do. */
#define PAGE_NSTREAMS 300
static struct {
  mcp_store *store;
  mcp_source_session *src[PAGE_NSTREAMS];
  tool_stream_info info[PAGE_NSTREAMS];
  mcp_sink_state *sink;
} pg;

static mcp_tstamp pg_now(void) { return 5 * MCP_SECONDS; }

static int pg_source_streams(void *ep, tool_stream_fn fn, void *ud) {
  (void)ep;
  for (size_t i = 0; i < PAGE_NSTREAMS; i++)
    fn(&pg.info[i], ud);
  return 0;
}

static int pg_sink_call(void *ep, tool_state_fn fn, void *ud) {
  (void)ep;
  fn(pg.sink, pg_now(), ud);
  return 0;
}

static int pg_sink_streams(void *ep, tool_stream_fn fn, void *ud) {
  (void)ep;
  (void)fn;
  (void)ud;
  return 0;
}

/* A RequestResources for collection "c" from a node with the largest id and
 * annotations a default source takes (1 KiB id, 7 values of 4 KiB). */
static uint8_t *big_node_request(size_t *len) {
  static char id[MCP_DEFAULT_MAX_NODE_ID_LEN + 1];
  static char value[MCP_DEFAULT_MAX_NODE_VALUE_LEN + 1];
  memset(id, 'n', MCP_DEFAULT_MAX_NODE_ID_LEN);
  memset(value, 'v', MCP_DEFAULT_MAX_NODE_VALUE_LEN);
  /* SinkNode: id (field 1), annotations (field 2: key 1, value 2). */
  size_t cap = 64 * 1024, n = 0;
  uint8_t *node = malloc(cap), *out = malloc(cap);
#define PUT_LEN_(buf, f, p, l)                                   \
  do {                                                           \
    size_t l_ = (l);                                             \
    buf[n++] = (uint8_t)((f) << 3 | 2);                          \
    for (size_t v_ = l_; ; v_ >>= 7) {                           \
      buf[n++] = (uint8_t)((v_ & 0x7f) | (v_ > 0x7f ? 0x80 : 0)); \
      if (v_ <= 0x7f)                                            \
        break;                                                   \
    }                                                            \
    memcpy(buf + n, p, l_);                                      \
    n += l_;                                                     \
  } while (0)
  PUT_LEN_(node, 1, id, strlen(id));
  for (int i = 0; i < 7; i++) {
    uint8_t entry[MCP_DEFAULT_MAX_NODE_VALUE_LEN + 32];
    size_t save = n;
    n = 0;
    char key[8];
    snprintf(key, sizeof(key), "k%d", i);
    PUT_LEN_(entry, 1, key, strlen(key));
    PUT_LEN_(entry, 2, value, strlen(value));
    size_t el = n;
    n = save;
    PUT_LEN_(node, 2, entry, el);
  }
  size_t nl = n;
  n = 0;
  PUT_LEN_(out, 1, node, nl);
  PUT_LEN_(out, 2, "c", 1);
#undef PUT_LEN_
  free(node);
  *len = n;
  return out;
}

static json_t *page_json(tool_ops *ops, const char *path, size_t *len) {
  ops_http_reply r = route(ops, "GET", path);
  ck_assert_int_eq(r.status, 200);
  *len = strlen(ops_buf_cstr(&r.body));
  json_error_t err;
  json_t *j = json_loads(ops_buf_cstr(&r.body), 0, &err);
  ops_http_reply_free(&r);
  ck_assert_msg(j != NULL, "not JSON: %s", err.text);
  return j;
}

/* Every string of |j| is at most |max| bytes plus the cut marker. */
static void strings_bounded(json_t *j, size_t max) {
  const char *k;
  json_t *v;
  size_t i;
  switch (json_typeof(j)) {
  case JSON_STRING:
    ck_assert_uint_le(json_string_length(j), max + strlen("...[+99999 bytes]"));
    break;
  case JSON_OBJECT:
    json_object_foreach(j, k, v) {
      ck_assert_uint_le(strlen(k), max + strlen("...[+99999 bytes]"));
      strings_bounded(v, max);
    }
    break;
  case JSON_ARRAY:
    json_array_foreach(j, i, v) strings_bounded(v, max);
    break;
  default:
    break;
  }
}

/* 300 streams of sinks with the largest nodes a source takes: 300 x 33 KiB
 * of node alone. The page lists what fits in its bounds, cuts every long
 * string with a marker and says what it left out. */
START_TEST(test_syncz_is_bounded_with_many_large_streams) {
  memset(&pg, 0, sizeof(pg));
  mcp_store_options so;
  mcp_store_options_default(&so);
  so.epoch = 1;
  ck_assert_int_eq(mcp_store_new(&pg.store, &so), 0);
  ck_assert_int_eq(mcp_store_add_collection(pg.store, "c"), 0);
  size_t len;
  uint8_t *req = big_node_request(&len);
  for (size_t i = 0; i < PAGE_NSTREAMS; i++) {
    mcp_source_options o;
    mcp_source_options_default(&o);
    o.store = pg.store;
    ck_assert_int_eq(mcp_source_session_new(&pg.src[i], &o, 1), 0);
    ck_assert_int_eq(mcp_source_session_recv(pg.src[i], req, len, 2), 0);
    pg.info[i].id = i + 1;
    pg.info[i].peer = "127.0.0.1:1";
    pg.info[i].source = pg.src[i];
  }
  free(req);
  tool_transport tp;
  memset(&tp, 0, sizeof(tp));
  tp.now = pg_now;
  tp.source_streams = pg_source_streams;
  tool_ops_options o = {.role = TOOL_OPS_SOURCE, .component = "mcp-source"};
  tool_ops *ops = NULL;
  ck_assert_int_eq(tool_ops_new(&ops, &o), 0);
  tool_ops_attach(ops, &tp, &tp);
  size_t bytes;
  json_t *j = page_json(ops, "/debug/syncz", &bytes);
  json_t *streams = json_object_get(j, "streams");
  size_t listed = json_array_size(streams);
  json_int_t omitted = json_integer_value(json_object_get(j, "streams_omitted"));
  ck_assert_uint_gt(listed, 0);
  ck_assert_uint_le(listed, 100);
  ck_assert_int_eq((json_int_t)listed + omitted, PAGE_NSTREAMS);
  ck_assert(json_is_true(json_object_get(j, "truncated")));
  ck_assert_uint_le(bytes, (1u << 20) + (64u << 10));
  strings_bounded(j, 256);
  /* The id, cut with its marker; the collection as it is. */
  json_t *s0 = json_array_get(streams, 0);
  const char *id = json_string_value(json_object_get(json_object_get(s0, "node"), "id"));
  ck_assert_uint_eq(strlen(id), 256 + strlen("...[+768 bytes]"));
  ck_assert_str_eq(id + 256, "...[+768 bytes]");
  json_t *c0 = json_array_get(json_object_get(s0, "collections"), 0);
  ck_assert_str_eq(json_string_value(json_object_get(c0, "collection")), "c");
  json_decref(j);

  /* Tighter bounds, as options: 10 streams listed. */
  tool_ops_del(ops);
  o.page_streams_max = 10;
  o.page_field_max = 16;
  ck_assert_int_eq(tool_ops_new(&ops, &o), 0);
  tool_ops_attach(ops, &tp, &tp);
  j = page_json(ops, "/debug/syncz", &bytes);
  ck_assert_uint_eq(json_array_size(json_object_get(j, "streams")), 10);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "streams_omitted")),
                   PAGE_NSTREAMS - 10);
  strings_bounded(j, 16);
  ck_assert_uint_lt(bytes, 64u << 10);
  json_decref(j);
  tool_ops_del(ops);
  for (size_t i = 0; i < PAGE_NSTREAMS; i++)
    mcp_source_session_del(pg.src[i]);
  mcp_store_del(pg.store);
}
END_TEST

/* pg.sink: a sink state of collection "c" (|journal_size| 0: the default)
 * and its session, whose first requests are taken (journaled at 0). */
static mcp_sink_session *pg_sink_new(size_t journal_size) {
  memset(&pg, 0, sizeof(pg));
  static const char *colls[] = {"c"};
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.collections = colls;
  so.ncollections = 1;
  if (journal_size)
    so.journal_size = journal_size;
  ck_assert_int_eq(mcp_sink_state_new(&pg.sink, &so), 0);
  mcp_sink_session *ss;
  ck_assert_int_eq(mcp_sink_session_new(&ss, pg.sink, 0), 0);
  mcp_msg *m;
  while (mcp_sink_session_next(ss, &m) == 1)
    mcp_msg_free(m);
  return ss;
}

/* Issue 24 item 13: the debug pages' ages are seconds to the millisecond
 * in the shortest form that reads back the same: 1.99 for 1.990079501 s,
 * not jansson's 1.9900795010000001. */
static mcp_tstamp ages_now(void) { return 1990079501; }

static int ages_sink_call(void *ep, tool_state_fn fn, void *ud) {
  (void)ep;
  fn(pg.sink, ages_now(), ud);
  return 0;
}

START_TEST(test_debug_ages_are_milliseconds_written_shortest) {
  mcp_sink_session *ss = pg_sink_new(0);
  tool_transport tp;
  memset(&tp, 0, sizeof(tp));
  tp.now = ages_now;
  tp.sink_call = ages_sink_call;
  tp.sink_streams = pg_sink_streams;
  tool_ops_options o = {.role = TOOL_OPS_SINK, .component = "mcp-sink"};
  tool_ops *ops = NULL;
  ck_assert_int_eq(tool_ops_new(&ops, &o), 0);
  tool_ops_attach(ops, &tp, &tp);
  ops_http_reply r = route(ops, "GET", "/debug/journal");
  ck_assert_int_eq(r.status, 200);
  const char *body = ops_buf_cstr(&r.body);
  ck_assert_msg(strstr(body, "\"age_seconds\": 1.99,") != NULL, "%s", body);
  ck_assert_msg(strstr(body, "1.99000") == NULL &&
                    strstr(body, "1.98999") == NULL &&
                    strstr(body, "1.990079") == NULL,
                "%s", body);
  json_error_t err;
  json_t *j = json_loads(body, 0, &err);
  ck_assert_ptr_nonnull(j);
  json_t *e0 = json_array_get(json_object_get(j, "journal"), 0);
  ck_assert(json_real_value(json_object_get(e0, "age_seconds")) == 1.99);
  json_decref(j);
  ops_http_reply_free(&r);
  tool_ops_del(ops);
  mcp_sink_session_del(ss);
  mcp_sink_state_del(pg.sink);
}
END_TEST

/* A sink whose journal holds many long nonces: the page keeps the newest
 * entries that fit, each nonce cut with a marker. */
START_TEST(test_journal_is_bounded_and_keeps_the_newest) {
  mcp_sink_session *ss = pg_sink_new(4096);
  mcp_msg *m;
  char nonce[MCP_DEFAULT_MAX_NONCE_LEN + 1];
  for (int i = 0; i < 4000; i++) {
    /* A Resources for "c" with only a nonce: an empty full state. */
    memset(nonce, 'x', MCP_DEFAULT_MAX_NONCE_LEN);
    nonce[MCP_DEFAULT_MAX_NONCE_LEN] = '\0';
    int hl = snprintf(nonce, sizeof(nonce), "%04d", i);
    nonce[hl] = 'x';
    uint8_t buf[MCP_DEFAULT_MAX_NONCE_LEN + 16];
    size_t n = 0;
    buf[n++] = 2 << 3 | 2;
    buf[n++] = 1;
    buf[n++] = 'c';
    buf[n++] = 5 << 3 | 2;
    buf[n++] = (uint8_t)(0x80 | (MCP_DEFAULT_MAX_NONCE_LEN & 0x7f));
    buf[n++] = (uint8_t)(MCP_DEFAULT_MAX_NONCE_LEN >> 7);
    memcpy(buf + n, nonce, MCP_DEFAULT_MAX_NONCE_LEN);
    n += MCP_DEFAULT_MAX_NONCE_LEN;
    ck_assert_int_eq(mcp_sink_session_recv(ss, buf, n, (mcp_tstamp)i + 1), 0);
    ck_assert_int_eq(mcp_sink_session_next(ss, &m), 1);
    mcp_msg_free(m);
  }
  tool_transport tp;
  memset(&tp, 0, sizeof(tp));
  tp.now = pg_now;
  tp.sink_call = pg_sink_call;
  tp.sink_streams = pg_sink_streams;
  tool_ops_options o = {.role = TOOL_OPS_SINK, .component = "mcp-sink",
                        .page_bytes_max = 256u << 10};
  tool_ops *ops = NULL;
  ck_assert_int_eq(tool_ops_new(&ops, &o), 0);
  tool_ops_attach(ops, &tp, &tp);
  size_t bytes;
  json_t *j = page_json(ops, "/debug/journal", &bytes);
  json_t *jr = json_object_get(j, "journal");
  size_t listed = json_array_size(jr);
  ck_assert_uint_gt(listed, 10);
  ck_assert_int_eq((json_int_t)listed +
                       json_integer_value(json_object_get(j, "journal_omitted")),
                   mcp_sink_state_journal_count(pg.sink));
  ck_assert(json_is_true(json_object_get(j, "truncated")));
  ck_assert_uint_le(bytes, (256u << 10) + (16u << 10));
  strings_bounded(j, 256);
  /* The newest last, its nonce cut with the marker. */
  const char *last = json_string_value(
      json_object_get(json_array_get(jr, listed - 1), "nonce"));
  ck_assert_int_eq(strncmp(last, "3999x", 5), 0);
  ck_assert_str_eq(last + 256, "...[+768 bytes]");
  json_decref(j);
  /* syncz of the sink is bounded the same way. */
  j = page_json(ops, "/debug/syncz", &bytes);
  strings_bounded(j, 256);
  json_decref(j);
  tool_ops_del(ops);
  mcp_sink_session_del(ss);
  mcp_sink_state_del(pg.sink);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ops_http");
  TCase *t = tcase_create("session");
  tcase_add_test(t, test_get_keep_alive);
  tcase_add_test(t, test_pipelined_and_split);
  tcase_add_test(t, test_head_has_length_no_body);
  tcase_add_test(t, test_connection_close_and_http10);
  tcase_add_test(t, test_bad_requests);
  tcase_add_test(t, test_size_limits);
  tcase_add_test(t, test_targets_and_upgrade);
  tcase_add_test(t, test_timeout_answer);
  suite_add_tcase(s, t);
  TCase *sv = tcase_create("server");
  tcase_set_timeout(sv, 30);
  tcase_add_test(sv, test_server_keep_alive);
  tcase_add_test(sv, test_server_idle_and_slow_timeouts);
  tcase_add_test(sv, test_server_limits);
  tcase_add_test(sv, test_server_bad_address);
  suite_add_tcase(s, sv);
  TCase *rt = tcase_create("router");
  tcase_add_test(rt, test_router);
  tcase_add_test(rt, test_syncz_is_bounded_with_many_large_streams);
  tcase_add_test(rt, test_debug_ages_are_milliseconds_written_shortest);
  tcase_add_test(rt, test_journal_is_bounded_and_keeps_the_newest);
  suite_add_tcase(s, rt);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
