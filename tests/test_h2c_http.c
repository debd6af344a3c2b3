/*
 * h2c transport, plain HTTP on the listener: HTTP/1.1 requests answered
 * properly (keep-alive, pipelining, HEAD, errors), "Upgrade: h2c" (curl
 * --http2 on an http:// URL), prior knowledge (curl
 * --http2-prior-knowledge, also for a gRPC call with a half-closed
 * request), and the application's handler for debug endpoints.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "h2c_harness.h"
#include "helper.h"
#include "mcp/h2c.h"
#include "mcp/v1alpha1/mcp.pb-c.h"

typedef struct henv {
  uv_loop_t loop;
  mcp_store *store;
  mcp_h2c_source *src;
  int port;
  char dir[64];
  int handled;
  int paused, resumed, pause_err; /* on_listener */
} henv;

static void on_listener(mcp_h2c_listener_event ev, int err, void *ud) {
  henv *e = ud;
  if (ev == MCP_H2C_LISTENER_PAUSED) {
    e->paused++;
    e->pause_err = err;
  } else {
    e->resumed++;
  }
}

/* Serves /debug/streams with the number of open streams. */
static int handler(const char *method, const char *path,
                   mcp_h2c_http_response *resp, void *ud) {
  henv *e = ud;
  if (strcmp(path, "/debug/streams") != 0)
    return 0;
  e->handled++;
  char body[64];
  int n = snprintf(body, sizeof(body), "{\"streams\":%d,\"method\":\"%s\"}\n",
                   mcp_h2c_source_streams(e->src, NULL, NULL), method);
  mcp_h2c_http_respond(resp, 200, "application/json");
  ck_assert_int_eq(mcp_h2c_http_append(resp, body, (size_t)n), 0);
  return 1;
}

static void setup(henv *e) {
  memset(e, 0, sizeof(*e));
  ck_assert_int_eq(uv_loop_init(&e->loop), 0);
  e->store = th_store(NULL);
  th_put(e->store, "c1", "a", "1", "A", mcp_h2c_now());
  mcp_h2c_options o;
  mcp_h2c_options_default(&o);
  o.address = "127.0.0.1:0";
  o.http_handler = handler;
  o.on_listener = on_listener;
  o.user_data = e;
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = e->store;
  ck_assert_int_eq(mcp_h2c_source_new(&e->src, &e->loop, &o, &so), 0);
  e->port = mcp_h2c_source_port(e->src);
  snprintf(e->dir, sizeof(e->dir), "/tmp/mcp-h2c-http-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(e->dir));
}

static void teardown(henv *e) {
  mcp_h2c_source_del(e->src);
  h2t_loop_finish(&e->loop);
  mcp_store_del(e->store);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", e->dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* ------------------------------------------------------------------ */
/* Raw HTTP/1.1                                                        */
/* ------------------------------------------------------------------ */

typedef struct raw {
  int fd;
  h2t_buf in;
  int eof;
} raw;

static int raw_read(void *ud) {
  raw *r = ud;
  char buf[4096];
  for (;;) {
    ssize_t n = read(r->fd, buf, sizeof(buf));
    if (n > 0) {
      h2t_buf_add(&r->in, buf, (size_t)n);
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
      r->eof = 1;
    break;
  }
  return r->eof;
}

/* Sends |req| and reads until the server closes. Returns the answer
 * (NUL-terminated, malloc'd). */
static char *raw_exchange(henv *e, const char *req, size_t len) {
  raw r = {0};
  r.fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)e->port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(connect(r.fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ck_assert_int_eq(send(r.fd, req, len, MSG_NOSIGNAL), (ssize_t)len);
  fcntl(r.fd, F_SETFL, fcntl(r.fd, F_GETFL) | O_NONBLOCK);
  ck_assert(h2t_run_until(&e->loop, raw_read, &r, 10000));
  close(r.fd);
  h2t_buf_add(&r.in, "", 1);
  return (char *)r.in.p;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

START_TEST(http1_keepalive_pipelined) {
  henv e;
  setup(&e);
  static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                            "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
                            "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                            "GET /debug/streams HTTP/1.1\r\nHost: x\r\n"
                            "Connection: close\r\n\r\n";
  char *ans = raw_exchange(&e, req, sizeof(req) - 1);
  ck_assert_int_eq(count(ans, "HTTP/1.1 "), 4);
  const char *p = strstr(ans, "HTTP/1.1 200 OK\r\n");
  ck_assert_ptr_eq(p, ans);
  ck_assert_ptr_nonnull(strstr(ans, "Content-Length: 3\r\n\r\nok\n"));
  p = strstr(ans, "HTTP/1.1 404 Not Found\r\n");
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_nonnull(strstr(p, "Content-Length: 10\r\n\r\nnot found\n"));
  /* HEAD: the length of the GET answer, no body. */
  p = strstr(p + 1, "HTTP/1.1 200 OK\r\n");
  ck_assert_ptr_nonnull(p);
  const char *q = strstr(p, "\r\n\r\n");
  ck_assert_ptr_nonnull(q);
  ck_assert(strncmp(q + 4, "HTTP/1.1 200 OK\r\n", 17) == 0);
  /* The handler's answer, and the connection closed as asked. */
  ck_assert_ptr_nonnull(strstr(ans, "Content-Type: application/json\r\n"));
  ck_assert_ptr_nonnull(strstr(ans, "Connection: close\r\n"));
  ck_assert_ptr_nonnull(strstr(ans, "{\"streams\":0,\"method\":\"GET\"}\n"));
  ck_assert_int_eq(e.handled, 1);
  free(ans);
  teardown(&e);
}
END_TEST

START_TEST(http1_errors) {
  henv e;
  setup(&e);
  static const char bad[] = "THIS IS NOT HTTP\r\n\r\n";
  char *ans = raw_exchange(&e, bad, sizeof(bad) - 1);
  ck_assert_msg(strncmp(ans, "HTTP/1.1 400 Bad Request\r\n", 26) == 0, "%s",
                ans);
  ck_assert_ptr_nonnull(strstr(ans, "Connection: close\r\n"));
  free(ans);

  size_t n = 10000;
  char *req = malloc(n + 64);
  int k = snprintf(req, n + 64, "GET /");
  memset(req + k, 'u', n);
  snprintf(req + k + n, 64, " HTTP/1.1\r\nHost: x\r\n\r\n");
  ans = raw_exchange(&e, req, strlen(req));
  ck_assert_msg(strncmp(ans, "HTTP/1.1 414 ", 13) == 0, "%.40s", ans);
  free(ans);
  free(req);

  /* An upgrade with a body is declined: answered in HTTP/1.1. */
  static const char up[] =
      "POST /x HTTP/1.1\r\nHost: x\r\n"
      "Connection: Upgrade, HTTP2-Settings\r\n"
      "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
      "Content-Length: 5\r\n\r\nhello"
      "GET /healthz HTTP/1.1\r\nHost: x\r\n"
      "Connection: close\r\n\r\n";
  ans = raw_exchange(&e, up, sizeof(up) - 1);
  ck_assert_msg(strncmp(ans, "HTTP/1.1 404 ", 13) == 0, "%.60s", ans);
  ck_assert_ptr_nonnull(strstr(ans, "HTTP/1.1 200 OK"));
  ck_assert_ptr_null(strstr(ans, "101"));
  free(ans);

  /* Empty header values before any other, among them the Upgrade fields
   * (fuzz/regressions/fuzz_h2c_conn/http1-empty-header-value-memcpy-null:
   * a copy from the value buffer not yet allocated): no upgrade, a plain
   * answer. */
  static const char empty[] = "GET /healthz HTTP/1.1\r\nUpgrade:\r\n"
                              "HTTP2-Settings:\r\nTE:\r\nHost: x\r\n"
                              "Connection: close\r\n\r\n";
  ans = raw_exchange(&e, empty, sizeof(empty) - 1);
  ck_assert_msg(strncmp(ans, "HTTP/1.1 200 OK\r\n", 17) == 0, "%.60s", ans);
  free(ans);
  teardown(&e);
}
END_TEST

/* ------------------------------------------------------------------ */
/* curl                                                                */
/* ------------------------------------------------------------------ */

/* Runs curl with |mode| on |path|; returns "<code> <version>" and puts
 * the body in |*body| (malloc'd). */
static char *curl(henv *e, const char *mode, const char *path, char **body,
                  const char *const *extra) {
  char url[128], out[128], wfile[128];
  snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", e->port, path);
  snprintf(out, sizeof(out), "%s/body", e->dir);
  snprintf(wfile, sizeof(wfile), "%s/w", e->dir);
  const char *argv[32] = {"curl", "-sS", "--max-time",
                          "10",   mode,  "-o",
                          out,    "-w",  "%{http_code} %{http_version}"};
  int n = 9;
  while (extra && *extra)
    argv[n++] = *extra++;
  argv[n++] = url;
  argv[n] = NULL;
  int rc = h2t_spawn(&e->loop, (char *const *)argv, wfile, 15000);
  ck_assert_int_eq(rc, 0);
  *body = h2t_slurp(out);
  return h2t_slurp(wfile);
}

START_TEST(curl_http1) {
  henv e;
  setup(&e);
  char *body, *w = curl(&e, "--http1.1", "/healthz", &body, NULL);
  ck_assert_str_eq(w, "200 1.1");
  ck_assert_str_eq(body, "ok\n");
  free(w);
  free(body);
  teardown(&e);
}
END_TEST

START_TEST(curl_upgrade) {
  henv e;
  setup(&e);
  char *body, *w = curl(&e, "--http2", "/healthz", &body, NULL);
  ck_assert_str_eq(w, "200 2"); /* switched: the answer came over HTTP/2 */
  ck_assert_str_eq(body, "ok\n");
  free(w);
  free(body);
  w = curl(&e, "--http2", "/debug/streams", &body, NULL);
  ck_assert_str_eq(w, "200 2");
  ck_assert_str_eq(body, "{\"streams\":0,\"method\":\"GET\"}\n");
  free(w);
  free(body);
  w = curl(&e, "--http2", "/nope", &body, NULL);
  ck_assert_str_eq(w, "404 2");
  free(w);
  free(body);
  teardown(&e);
}
END_TEST

START_TEST(curl_prior_knowledge) {
  henv e;
  setup(&e);
  char *body, *w = curl(&e, "--http2-prior-knowledge", "/healthz", &body, NULL);
  ck_assert_str_eq(w, "200 2");
  ck_assert_str_eq(body, "ok\n");
  free(w);
  free(body);
  teardown(&e);
}
END_TEST

/* A whole gRPC call from curl: one framed RequestResources as the
 * request body (then END_STREAM); the answer is one framed Resources. */
START_TEST(curl_grpc_call) {
  henv e;
  setup(&e);
  size_t n;
  uint8_t *req = th_request(&n, "curl", "c1", "", 0, NULL, 0, NULL);
  char in[128];
  snprintf(in, sizeof(in), "%s/req", e.dir);
  FILE *f = fopen(in, "wb");
  uint8_t hdr[5] = {0, 0, 0, (uint8_t)(n >> 8), (uint8_t)n};
  fwrite(hdr, 1, 5, f);
  fwrite(req, 1, n, f);
  fclose(f);
  free(req);
  char data[140];
  snprintf(data, sizeof(data), "@%s", in);
  const char *extra[] = {"-H",
                         "content-type: application/grpc",
                         "-H",
                         "te: trailers",
                         "--data-binary",
                         data,
                         NULL};
  char *body, *w = curl(&e, "--http2-prior-knowledge",
                        MCP_H2C_RESOURCE_SOURCE_METHOD, &body, extra);
  ck_assert_str_eq(w, "200 2");
  size_t len = (size_t)(uint8_t)body[3] << 8 | (uint8_t)body[4];
  ck_assert_int_eq(body[0], 0);
  Istio__Mcp__V1alpha1__Resources *r = istio__mcp__v1alpha1__resources__unpack(
      NULL, len, (const uint8_t *)body + 5);
  ck_assert_ptr_nonnull(r);
  ck_assert_str_eq(r->collection, "c1");
  ck_assert_uint_eq(r->n_resources, 1);
  istio__mcp__v1alpha1__resources__free_unpacked(r, NULL);
  free(w);
  free(body);
  teardown(&e);
}
END_TEST

/* nghttp (nghttp2's client) with prior knowledge, for good measure. */
START_TEST(nghttp_client) {
  henv e;
  setup(&e);
  char url[64], out[128];
  snprintf(url, sizeof(url), "http://127.0.0.1:%d/healthz", e.port);
  snprintf(out, sizeof(out), "%s/nghttp", e.dir);
  const char *argv[] = {"nghttp", "-n", "-s", url, NULL};
  int rc = h2t_spawn(&e.loop, (char *const *)argv, out, 15000);
  ck_assert_int_eq(rc, 0);
  char *s = h2t_slurp(out);
  ck_assert_ptr_nonnull(strstr(s, "200")); /* the statistics line */
  free(s);
  teardown(&e);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Out of descriptors                                                  */
/* ------------------------------------------------------------------ */

/* A listener out of file descriptors: accepting pauses (reported once,
 * EMFILE, counted), the connection waits in the backlog with its request
 * unread, nothing spins, and once descriptors are free the listener
 * resumes (reported) and answers it. */
static int is_paused(void *ud) { return ((henv *)ud)->paused > 0; }

START_TEST(out_of_descriptors_waits_then_serves) {
  henv e;
  setup(&e);
  raw r = {0};
  r.fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)e.port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  /* Every descriptor below the lowest free one is in use: none is left
   * once the limit is that. The kernel completes the connection into the
   * backlog and keeps the request. */
  int lowest = dup(0);
  ck_assert_int_ge(lowest, 0);
  close(lowest);
  struct rlimit was, low;
  ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &was), 0);
  low = was;
  low.rlim_cur = (rlim_t)lowest;
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
  ck_assert_int_eq(connect(r.fd, (struct sockaddr *)&a, sizeof(a)), 0);
  static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n"
                            "Connection: close\r\n\r\n";
  ck_assert_int_eq(send(r.fd, req, sizeof(req) - 1, MSG_NOSIGNAL),
                   (ssize_t)sizeof(req) - 1);
  fcntl(r.fd, F_SETFL, fcntl(r.fd, F_GETFL) | O_NONBLOCK);
  int paused = h2t_run_until(&e.loop, is_paused, &e, 10000);
  mcp_h2c_stats st;
  mcp_h2c_source_stats(e.src, &st);
  int got = raw_read(&r); /* nothing: not accepted, not closed */
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &was), 0);
  ck_assert(paused);
  ck_assert_int_eq(e.pause_err, EMFILE);
  ck_assert_int_eq(e.resumed, 0);
  ck_assert_int_eq(got, 0);
  ck_assert_uint_eq(r.in.len, 0);
  ck_assert_uint_eq(st.connections, 0);
  ck_assert_uint_eq(st.accept_pauses, 1);
  ck_assert_int_eq(st.accept_paused, 1);
  /* Descriptors are back: the waiting connection is served (the retry
   * timer: no connection of ours closed to wake it earlier). */
  ck_assert(h2t_run_until(&e.loop, raw_read, &r, 10000));
  h2t_buf_add(&r.in, "", 1);
  ck_assert_msg(strncmp((char *)r.in.p, "HTTP/1.1 200 OK\r\n", 17) == 0,
                "%.60s", (char *)r.in.p);
  close(r.fd);
  h2t_buf_free(&r.in);
  ck_assert_int_eq(e.paused, 1);
  ck_assert_int_eq(e.resumed, 1);
  mcp_h2c_source_stats(e.src, &st);
  ck_assert_uint_eq(st.accept_pauses, 1);
  ck_assert_int_eq(st.accept_paused, 0);
  teardown(&e);
}
END_TEST

Suite *suite(void) {
  Suite *s = suite_create("h2c_http");
  TCase *t = tcase_create("all");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, http1_keepalive_pipelined);
  tcase_add_test(t, http1_errors);
  tcase_add_test(t, curl_http1);
  tcase_add_test(t, curl_upgrade);
  tcase_add_test(t, curl_prior_knowledge);
  tcase_add_test(t, curl_grpc_call);
  tcase_add_test(t, nghttp_client);
  tcase_add_test(t, out_of_descriptors_waits_then_serves);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN); /* libuv writes with write(2) */
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
