/*
 * The h2c transport's API shape (issue 13): versioned options and stats
 * (an older version's caller gets only that version's fields read or
 * written, an unknown version is INVALID_ARGUMENT), *_streams() and
 * *_stats() returning int and refusing other threads, and the allocator
 * hook (options.mem, bridged into nghttp2): it sees every allocation and
 * every free of the transport's own objects (balanced once the loop is
 * done, through a sync with HTTP/2 and HTTP/1.1 traffic), a failure of any
 * one allocation in *_new() is NOMEM with nothing leaked, and a failure of
 * any one allocation during a sync costs at most a stream, which the
 * dialer's reconnection replaces. With MCP_TEST_TLS=1 (test h2c_api_tls)
 * the same over mutual TLS: the TLS code's own allocations go through the
 * hook too (OpenSSL's do not: they are process-global).
 */
#define _GNU_SOURCE /* dladdr */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "h2c_harness.h"
#include "helper.h"
#include "test_certs.h"
#include "mcp/h2c.h"
#include "mem_count.h"

static const char *const colls[] = {"c1"};

typedef struct env {
  uv_loop_t loop;
  mcp_store *store;
  mcp_sink_state *state;
  mcp_h2c_source *src;
  mcp_h2c_sink *sink;
  uint64_t seed;
  char addr[64];
} env;

static void env_init(env *e) {
  memset(e, 0, sizeof(*e));
  e->seed = 7;
  ck_assert_int_eq(uv_loop_init(&e->loop), 0);
  e->store = th_store(NULL);
  ck_assert_ptr_nonnull(e->store);
  mcp_tstamp now = mcp_h2c_now();
  th_put(e->store, "c1", "a", "1", "A", now);
  /* Larger than an HTTP/2 DATA frame: gathered by the deframer. */
  size_t big = 64 << 10;
  char *body = malloc(big + 1);
  ck_assert_ptr_nonnull(body);
  memset(body, 'x', big);
  body[big] = '\0';
  th_put(e->store, "c1", "big", "1", body, now);
  free(body);
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.node_id = "sink-1";
  so.collections = colls;
  so.ncollections = 1;
  ck_assert_int_eq(mcp_sink_state_new(&e->state, &so), 0);
}

static void env_fini(env *e) {
  if (e->src)
    mcp_h2c_source_del(e->src);
  if (e->sink)
    mcp_h2c_sink_del(e->sink);
  h2t_loop_finish(&e->loop);
  mcp_sink_state_del(e->state);
  mcp_store_del(e->store);
}

static void env_options(env *e, mcp_h2c_options *o, mcp_h2c_mode mode,
                        const char *addr, const mcp_mem *mem) {
  mcp_h2c_options_default(o);
  o->mode = mode;
  o->address = addr;
  o->backoff.initial = 10 * MCP_MILLISECONDS;
  o->backoff.max = 50 * MCP_MILLISECONDS;
  o->rand = th_rand;
  o->rand_user_data = &e->seed;
  o->shutdown_grace = MCP_SECONDS;
  o->mem = mem;
  if (test_tls_mode()) {
    int listen = mode == MCP_H2C_LISTEN;
    o->tls.cert_file = test_cert(listen ? "server.pem" : "client.pem");
    o->tls.key_file = test_cert(listen ? "server.key" : "client.key");
    o->tls.ca_file = test_cert("ca.pem");
  }
}

static void start_source(env *e, const mcp_mem *mem) {
  mcp_h2c_options o;
  env_options(e, &o, MCP_H2C_LISTEN, "127.0.0.1:0", mem);
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = e->store;
  ck_assert_int_eq(mcp_h2c_source_new(&e->src, &e->loop, &o, &so), 0);
  ck_assert_int_gt(mcp_h2c_source_port(e->src), 0);
}

static void start_sink(env *e, const mcp_mem *mem) {
  mcp_h2c_options o;
  snprintf(e->addr, sizeof(e->addr), "127.0.0.1:%d",
           mcp_h2c_source_port(e->src));
  env_options(e, &o, MCP_H2C_DIAL, e->addr, mem);
  ck_assert_int_eq(mcp_h2c_sink_new(&e->sink, &e->loop, &o, e->state), 0);
}

static int synced(void *ud) {
  env *e = ud;
  return mcp_sink_state_synced(e->state) &&
         mcp_sink_state_count(e->state, "c1") == 2;
}

/* ---- versioned structs ---- */

START_TEST(options_default_writes_its_version_only) {
  struct {
    mcp_h2c_options o;
    unsigned char tail[32];
  } w;
  unsigned char ab[sizeof(w)];
  memset(ab, 0xab, sizeof(ab));

  memset(&w, 0xab, sizeof(w));
  mcp_h2c_options_default_versioned(0, &w.o);
  ck_assert_int_eq(memcmp(&w, ab, sizeof(w)), 0);

  memset(&w, 0xab, sizeof(w));
  mcp_h2c_options_default_versioned(MCP_H2C_OPTIONS_V1, &w.o);
  ck_assert_int_eq(w.o.mode, MCP_H2C_LISTEN);
  ck_assert_int_eq(w.o.stream_window_size, 1 << 20);
  ck_assert_ptr_null(w.o.address);
  ck_assert_int_eq(w.o.no_mcp, 0);
  ck_assert_int_eq(memcmp(&w.o.mem, ab, sizeof(w.o.mem)), 0);

  memset(&w, 0xab, sizeof(w));
  mcp_h2c_options_default(&w.o);
  ck_assert_ptr_null(w.o.mem);
  ck_assert_int_eq(memcmp(w.tail, ab, sizeof(w.tail)), 0);

  memset(&w, 0xab, sizeof(w));
  mcp_h2c_options_default_versioned(MCP_H2C_OPTIONS_VERSION + 1, &w.o);
  ck_assert_ptr_null(w.o.mem);
  ck_assert_int_eq(memcmp(w.tail, ab, sizeof(w.tail)), 0);
}
END_TEST

static const char *client_method(void *ud, size_t slot) {
  (void)ud;
  (void)slot;
  return "/test.Api/Call";
}

static int client_open(void *ud, size_t slot, mcp_tstamp ts,
                       mcp_stream **pst) {
  (void)ud;
  (void)slot;
  (void)ts;
  (void)pst;
  return 0;
}

static void client_ended(void *ud, size_t slot, int status,
                         const char *details, mcp_tstamp ts) {
  (void)ud;
  (void)slot;
  (void)status;
  (void)details;
  (void)ts;
}

static const mcp_client_def client_def = {
    .nslots = 2,
    .method = client_method,
    .open = client_open,
    .ended = client_ended,
};

START_TEST(unknown_option_versions_are_refused) {
  env e;
  env_init(&e);
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = e.store;
  mcp_h2c_options o;
  env_options(&e, &o, MCP_H2C_LISTEN, "127.0.0.1:0", NULL);
  const int bad[] = {0, -1, MCP_H2C_OPTIONS_VERSION + 1};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    mcp_h2c_source *src = (mcp_h2c_source *)&o; /* untouched on failure */
    ck_assert_int_eq(
        mcp_h2c_source_new_versioned(&src, &e.loop, bad[i], &o, &so),
        MCP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_eq(src, (mcp_h2c_source *)&o);
    mcp_h2c_sink *sink = NULL;
    ck_assert_int_eq(
        mcp_h2c_sink_new_versioned(&sink, &e.loop, bad[i], &o, e.state),
        MCP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(sink);
    mcp_h2c_client *c = NULL;
    mcp_h2c_options d = o;
    d.address = "127.0.0.1:1";
    ck_assert_int_eq(
        mcp_h2c_client_new_versioned(&c, &e.loop, bad[i], &d, &client_def),
        MCP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(c);
  }
  env_fini(&e);
}
END_TEST

/* A V1 caller's struct ends before |mem|: garbage there must not be
 * read. */
START_TEST(v1_options_do_not_read_mem) {
  env e;
  env_init(&e);
  const mcp_mem *garbage = (const mcp_mem *)(uintptr_t)0x10;
  mcp_h2c_options o;
  memset(&o, 0, sizeof(o));
  mcp_h2c_options_default_versioned(MCP_H2C_OPTIONS_V1, &o);
  o.address = "127.0.0.1:0";
  o.mem = garbage;
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = e.store;
  ck_assert_int_eq(mcp_h2c_source_new_versioned(&e.src, &e.loop,
                                                MCP_H2C_OPTIONS_V1, &o, &so),
                   0);
  snprintf(e.addr, sizeof(e.addr), "127.0.0.1:%d",
           mcp_h2c_source_port(e.src));
  o.mode = MCP_H2C_DIAL;
  o.address = e.addr;
  ck_assert_int_eq(mcp_h2c_sink_new_versioned(&e.sink, &e.loop,
                                              MCP_H2C_OPTIONS_V1, &o, e.state),
                   0);
  ck_assert(h2t_run_until(&e.loop, synced, &e, 5000));
  env_fini(&e);
}
END_TEST

typedef struct off_thread {
  env *e;
  int streams, stats, sink_streams, sink_stats, finish;
} off_thread;

static void *call_from_other_thread(void *ud) {
  off_thread *t = ud;
  mcp_h2c_stats st;
  t->streams = mcp_h2c_source_streams(t->e->src, NULL, NULL);
  t->stats = mcp_h2c_source_stats(t->e->src, &st);
  t->sink_streams = mcp_h2c_sink_streams(t->e->sink, NULL, NULL);
  t->sink_stats = mcp_h2c_sink_stats(t->e->sink, &st);
  t->finish = mcp_h2c_sink_finish(t->e->sink);
  return NULL;
}

START_TEST(stats_and_streams_shape) {
  env e;
  env_init(&e);
  start_source(&e, NULL);
  start_sink(&e, NULL);
  ck_assert(h2t_run_until(&e.loop, synced, &e, 5000));

  struct {
    mcp_h2c_stats st;
    unsigned char tail[32];
  } w;
  unsigned char ab[sizeof(w)];
  memset(ab, 0xab, sizeof(ab));
  memset(&w, 0xab, sizeof(w));
  ck_assert_int_eq(mcp_h2c_source_stats_versioned(e.src, 0, &w.st),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(memcmp(&w, ab, sizeof(w)), 0);
  ck_assert_int_eq(mcp_h2c_source_stats_versioned(e.src, 1, NULL),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(
      mcp_h2c_source_stats_versioned(e.src, MCP_H2C_STATS_VERSION + 1, &w.st),
      0);
  ck_assert_uint_eq(w.st.streams, 1);
  ck_assert_uint_eq(w.st.connections, 1);
  ck_assert_int_eq(memcmp(w.tail, ab, sizeof(w.tail)), 0);

  ck_assert_int_eq(mcp_h2c_source_streams(e.src, NULL, NULL), 1);
  ck_assert_int_eq(mcp_h2c_sink_streams(e.sink, NULL, NULL), 1);
  mcp_h2c_stats st;
  ck_assert_int_eq(mcp_h2c_sink_stats(e.sink, &st), 0);
  ck_assert_uint_eq(st.streams, 1);

  /* Loop thread only: another thread is told so, and nothing races. */
  off_thread t = {.e = &e};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, call_from_other_thread, &t), 0);
  ck_assert_int_eq(pthread_join(th, NULL), 0);
  ck_assert_int_eq(t.streams, MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(t.stats, MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(t.sink_streams, MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(t.sink_stats, MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(t.finish, MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_h2c_sink_streams(e.sink, NULL, NULL), 1); /* still */
  env_fini(&e);
}
END_TEST

/* ---- the allocator hook ---- */

/* A plain HTTP/1.1 request on its own connection, answered by the
 * built-in /healthz. */
typedef struct http1_probe {
  int fd;
  char got[512];
  size_t len;
} http1_probe;

static int http1_answered(void *ud) {
  http1_probe *p = ud;
  ssize_t r = recv(p->fd, p->got + p->len, sizeof(p->got) - 1 - p->len, 0);
  if (r > 0)
    p->len += (size_t)r;
  p->got[p->len] = '\0';
  return strstr(p->got, "\r\n\r\nok\n") != NULL;
}

static void http1_get(env *e, int port) {
  http1_probe p;
  memset(&p, 0, sizeof(p));
  p.fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(p.fd, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(connect(p.fd, (struct sockaddr *)&a, sizeof(a)), 0);
  static const char req[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
  ck_assert_int_eq(send(p.fd, req, sizeof(req) - 1, 0), (ssize_t)sizeof(req) - 1);
  ck_assert_int_eq(fcntl(p.fd, F_SETFL, O_NONBLOCK), 0);
  ck_assert(h2t_run_until(&e->loop, http1_answered, &p, 5000));
  close(p.fd);
}

static int tm_balanced(void *ud) { return tm_get(ud).live == 0; }

/* A source and a sink on one loop, each with its own counting allocator:
 * the objects, connections, streams, buffers, header strings and
 * nghttp2's sessions all go through the hooks, and every block comes back
 * once the loop is done. */
START_TEST(hook_sees_every_allocation_through_a_sync) {
  tm_mem sm, km;
  tm_init(&sm, 0);
  tm_init(&km, 0);
  env e;
  env_init(&e);
  start_source(&e, &sm.mem);
  start_sink(&e, &km.mem);
  ck_assert(h2t_run_until(&e.loop, synced, &e, 5000));
  mcp_h2c_stats st;
  memset(&st, 0, sizeof(st));
  ck_assert_int_eq(mcp_h2c_source_stats(e.src, &st), 0);
  ck_assert_uint_eq(st.tls_handshakes, test_tls_mode() ? 1 : 0);
  /* Cleartext HTTP/1.1 on the same port (over TLS, ALPN http/1.1 is
   * test_h2c_tls's). */
  if (!test_tls_mode())
    http1_get(&e, mcp_h2c_source_port(e.src));
  tm_counts sc = tm_get(&sm), kc = tm_get(&km);
  /* Beyond the objects: connections, streams, nghttp2's session. */
  ck_assert_int_gt(sc.allocs, 10);
  ck_assert_int_gt(kc.allocs, 10);
  ck_assert_int_gt(sc.live, 0);
  ck_assert_int_gt(kc.live, 0);
  env_fini(&e);
  ck_assert(tm_balanced(&sm));
  ck_assert(tm_balanced(&km));
  ck_assert_int_eq(tm_get(&sm).failed, 0);
  tm_fini(&sm);
  tm_fini(&km);
}
END_TEST

/* nghttp2 allocates through the hook (nghttp2_session_*_new3): calls
 * made from inside libnghttp2 are seen on the source's hook. */
static int nghttp2_calls;

static void note_caller(void *ret) {
  Dl_info info;
  if (dladdr(ret, &info) && info.dli_fname &&
      strstr(info.dli_fname, "nghttp2"))
    __atomic_add_fetch(&nghttp2_calls, 1, __ATOMIC_RELAXED);
}

static void *caller_malloc(size_t n, void *ud) {
  note_caller(__builtin_return_address(0));
  return tm_malloc(n, ud);
}

static void *caller_calloc(size_t nmemb, size_t size, void *ud) {
  note_caller(__builtin_return_address(0));
  return tm_calloc(nmemb, size, ud);
}

START_TEST(nghttp2_sessions_use_the_hook) {
  tm_mem sm;
  tm_init(&sm, 0);
  sm.mem.malloc = caller_malloc;
  sm.mem.calloc = caller_calloc;
  nghttp2_calls = 0;
  env e;
  env_init(&e);
  start_source(&e, &sm.mem);
  ck_assert_int_eq(nghttp2_calls, 0); /* no connection, no session */
  start_sink(&e, NULL);
  ck_assert(h2t_run_until(&e.loop, synced, &e, 5000));
  ck_assert_int_gt(nghttp2_calls, 0);
  env_fini(&e);
  ck_assert(tm_balanced(&sm));
  tm_fini(&sm);
}
END_TEST

static int dummy_open(void *ud, const mcp_peer_info *peer, mcp_tstamp ts,
                      mcp_stream **pst) {
  (void)ud;
  (void)peer;
  (void)ts;
  (void)pst;
  return MCP_ERR_UNSUPPORTED;
}

static const mcp_service_def services[] = {
    {.method = "/test.Api/One", .open = dummy_open},
    {.method = "/test.Api/Two", .open = dummy_open},
};

typedef enum kind { K_SOURCE_LISTEN, K_SINK_DIAL, K_CLIENT } kind;

/* Creates one object of |k| on a new loop with |mem|, deletes it at once
 * on success, and runs the loop to its end. */
static int make_and_del(kind k, const mcp_mem *mem, env *e) {
  uv_loop_t loop;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  mcp_h2c_options o;
  env_options(e, &o, MCP_H2C_LISTEN, "127.0.0.1:0", mem);
  int rv;
  switch (k) {
  case K_SOURCE_LISTEN: {
    mcp_source_options so;
    mcp_source_options_default(&so);
    so.store = e->store;
    o.services = services;
    o.nservices = 2;
    mcp_h2c_source *src = NULL;
    rv = mcp_h2c_source_new(&src, &loop, &o, &so);
    if (rv == 0)
      mcp_h2c_source_del(src);
    else
      ck_assert_ptr_null(src);
    break;
  }
  case K_SINK_DIAL: {
    o.mode = MCP_H2C_DIAL;
    o.address = "127.0.0.1:1,127.0.0.1:2"; /* nobody there */
    mcp_h2c_sink *sink = NULL;
    rv = mcp_h2c_sink_new(&sink, &loop, &o, e->state);
    if (rv == 0) {
      h2t_run_for(&loop, 20); /* an attempt or two */
      mcp_h2c_sink_del(sink);
    } else {
      ck_assert_ptr_null(sink);
    }
    break;
  }
  default: {
    o.mode = MCP_H2C_DIAL;
    o.address = "127.0.0.1:1";
    mcp_h2c_client *c = NULL;
    rv = mcp_h2c_client_new(&c, &loop, &o, &client_def);
    if (rv == 0)
      mcp_h2c_client_del(c);
    else
      ck_assert_ptr_null(c);
    break;
  }
  }
  h2t_loop_finish(&loop);
  return rv;
}

/* Fails the n-th allocation, for every n until the object's life needs
 * no more than n - 1: each failure inside *_new() is NOMEM, and nothing
 * is leaked either way (ASan checks the rest). */
static void fail_each_allocation(kind k) {
  env e;
  env_init(&e);
  int done = 0;
  for (long n = 1; n < 400 && !done; n++) {
    tm_mem m;
    tm_init(&m, n);
    int rv = make_and_del(k, &m.mem, &e);
    ck_assert_msg(rv == 0 || rv == MCP_ERR_NOMEM,
                  "allocation %ld failed: %d", n, rv);
    tm_counts c = tm_get(&m);
    ck_assert_msg(c.live == 0, "allocation %ld: %ld blocks leaked", n, c.live);
    if (rv == MCP_ERR_NOMEM)
      ck_assert_int_eq(c.failed, 1);
    done = c.failed == 0;
    if (done && getenv("TM_DEBUG"))
      fprintf(stderr, "kind %d: %ld allocations\n", (int)k, c.count);
    tm_fini(&m);
  }
  ck_assert(done);
  h2t_loop_finish(&e.loop);
  mcp_sink_state_del(e.state);
  mcp_store_del(e.store);
}

START_TEST(failing_allocations_source) { fail_each_allocation(K_SOURCE_LISTEN); }
END_TEST

START_TEST(failing_allocations_sink) { fail_each_allocation(K_SINK_DIAL); }
END_TEST

START_TEST(failing_allocations_client) { fail_each_allocation(K_CLIENT); }
END_TEST

/* Fails the n-th allocation of one side after its creation (_i: 0 the
 * listening source, 1 the dialing sink), for every n a sync needs: a
 * failure costs at most the stream or the connection (never a crash or a
 * leak), and the sink's reconnection syncs anyway. */
START_TEST(sync_survives_each_failing_allocation) {
  int done = 0;
  for (long n = 1; n < 2000 && !done; n++) {
    tm_mem m;
    tm_init(&m, 0);
    env e;
    env_init(&e);
    start_source(&e, _i == 0 ? &m.mem : NULL);
    if (_i == 0) {
      pthread_mutex_lock(&m.mu);
      m.fail_at = m.count + n; /* counted from here */
      pthread_mutex_unlock(&m.mu);
    }
    start_sink(&e, _i == 1 ? &m.mem : NULL);
    if (_i == 1) {
      pthread_mutex_lock(&m.mu);
      m.fail_at = m.count + n; /* the first attempt is on the loop */
      pthread_mutex_unlock(&m.mu);
    }
    ck_assert_msg(h2t_run_until(&e.loop, synced, &e, 5000),
                  "side %d, allocation %ld: no sync", _i, n);
    env_fini(&e);
    done = tm_get(&m).failed == 0; /* the sync and del needed fewer */
    if (done && getenv("TM_DEBUG"))
      fprintf(stderr, "sync, side %d: %ld allocations\n", _i, n - 1);
    ck_assert_msg(tm_get(&m).live == 0,
                  "side %d, allocation %ld: %ld blocks leaked", _i, n,
                  tm_get(&m).live);
    tm_fini(&m);
  }
  ck_assert(done);
}
END_TEST

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (test_tls_mode() && test_certs_make() != 0)
    return EXIT_FAILURE;
  Suite *s = suite_create(test_tls_mode() ? "h2c_api_tls" : "h2c_api");
  TCase *tc = tcase_create("versions");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, options_default_writes_its_version_only);
  tcase_add_test(tc, unknown_option_versions_are_refused);
  tcase_add_test(tc, v1_options_do_not_read_mem);
  tcase_add_test(tc, stats_and_streams_shape);
  suite_add_tcase(s, tc);
  tc = tcase_create("mem");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, hook_sees_every_allocation_through_a_sync);
  tcase_add_test(tc, nghttp2_sessions_use_the_hook);
  tcase_add_test(tc, failing_allocations_source);
  tcase_add_test(tc, failing_allocations_sink);
  tcase_add_test(tc, failing_allocations_client);
  tcase_add_loop_test(tc, sync_survives_each_failing_allocation, 0, 2);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  if (test_tls_mode())
    test_certs_remove();
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
