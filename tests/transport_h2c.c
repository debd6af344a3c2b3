/*
 * The transport suite's adapter for the h2c transport
 * (tests/transport_suite.h), and the checks only it can pass.
 */
#define _GNU_SOURCE /* dladdr */
#include <arpa/inet.h>
#include <check.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "h2c_harness.h"
#include "helper.h"
#include "mcp/h2c.h"
#include "mem_count.h"
#include "test_certs.h" /* test_tls_mode() */
#include "transport_suite.h"

struct ta_env {
  uv_loop_t loop;
  uint64_t seed;
};

typedef enum { O_SOURCE, O_SINK, O_CLIENT } okind;

struct ta_obj {
  okind kind;
  void *p;
  mcp_sink_state *state; /* a sink's */
};

static void h_options_default_versioned(int version, void *o) {
  mcp_h2c_options_default_versioned(version, o);
}

static void h_check_v1_defaults(const void *opts) {
  const mcp_h2c_options *o = opts;
  ck_assert_int_eq(o->mode, MCP_H2C_LISTEN);
  ck_assert_int_eq(o->stream_window_size, 1 << 20);
  ck_assert_ptr_null(o->address);
  ck_assert_int_eq(o->no_mcp, 0);
}

static ta_env *h_env_new(void) {
  ta_env *e = calloc(1, sizeof(*e));
  ck_assert_ptr_nonnull(e);
  e->seed = 7;
  ck_assert_int_eq(uv_loop_init(&e->loop), 0);
  return e;
}

static void h_env_del(ta_env *e) {
  h2t_loop_finish(&e->loop);
  free(e);
}

static int h_run_until(ta_env *e, int (*cond)(void *), void *ud, long ms) {
  return h2t_run_until(&e->loop, cond, ud, (int)ms);
}

static int h_settled(int (*cond)(void *), void *ud) { return cond(ud); }

static void h_options(ta_env *e, mcp_h2c_options *o, const ta_opts *t) {
  memset(o, 0, sizeof(*o));
  mcp_h2c_options_default_versioned(
      t->defaults_version ? t->defaults_version : MCP_H2C_OPTIONS_VERSION, o);
  o->mode = t->listen ? MCP_H2C_LISTEN : MCP_H2C_DIAL;
  o->address = t->address;
  o->backoff.initial = 10 * MCP_MILLISECONDS;
  o->backoff.max = 50 * MCP_MILLISECONDS;
  o->rand = th_rand;
  o->rand_user_data = &e->seed;
  o->shutdown_grace = MCP_SECONDS;
  o->mem = t->mem;
  o->services = t->services;
  o->nservices = t->nservices;
  o->no_mcp = t->no_mcp;
  if (t->max_recv_message_size)
    o->max_recv_message_size = t->max_recv_message_size;
  if (t->max_send_message_size)
    o->max_send_message_size = t->max_send_message_size;
  if (t->max_concurrent_streams)
    o->max_concurrent_streams = t->max_concurrent_streams;
  if (t->max_streams)
    o->max_streams = t->max_streams;
  o->tls.cert_file = t->cert_file;
  o->tls.key_file = t->key_file;
  o->tls.ca_file = t->ca_file;
  o->tls.server_name = t->server_name;
  o->authorize = t->authorize;
  o->authorize_user_data = t->authorize_ud;
  TA_SYNC_OPTIONS(o, t); /* ---- sync ---- */
  TA_ADMISSION_OPTIONS(o, t);
  if (t->max_streams_per_connection)
    o->max_streams_per_connection = t->max_streams_per_connection;
}

/* The object's wrapper, made before the object (freed by the caller on
 * failure); the stream callback goes to the transport as it is. */
static ta_obj *h_wrap(okind k, const ta_opts *t, mcp_h2c_options *o) {
  ta_obj *obj = calloc(1, sizeof(*obj));
  ck_assert_ptr_nonnull(obj);
  obj->kind = k;
  o->on_stream = t->on_stream;
  o->user_data = t->on_stream_ud;
  return obj;
}

static int h_source_new(ta_env *e, ta_obj **pobj, const ta_opts *t,
                        const mcp_source_options *so) {
  mcp_h2c_options o;
  h_options(e, &o, t);
  ta_obj *obj = h_wrap(O_SOURCE, t, &o);
  mcp_h2c_source *src = (mcp_h2c_source *)&o; /* untouched on failure */
  int rv = mcp_h2c_source_new_versioned(&src, &e->loop, t->version, &o, so);
  if (rv < 0) {
    ck_assert_ptr_eq(src, (mcp_h2c_source *)&o);
    free(obj);
    return rv;
  }
  obj->p = src;
  *pobj = obj;
  return 0;
}

static int h_sink_new(ta_env *e, ta_obj **pobj, const ta_opts *t,
                      mcp_sink_state *state) {
  mcp_h2c_options o;
  h_options(e, &o, t);
  ta_obj *obj = h_wrap(O_SINK, t, &o);
  mcp_h2c_sink *sink = NULL;
  int rv = mcp_h2c_sink_new_versioned(&sink, &e->loop, t->version, &o, state);
  if (rv < 0) {
    ck_assert_ptr_null(sink);
    free(obj);
    return rv;
  }
  obj->p = sink;
  obj->state = state;
  *pobj = obj;
  return 0;
}

static int h_client_new(ta_env *e, ta_obj **pobj, const ta_opts *t,
                        const mcp_client_def *def) {
  mcp_h2c_options o;
  h_options(e, &o, t);
  ta_obj *obj = h_wrap(O_CLIENT, t, &o);
  mcp_h2c_client *c = NULL;
  int rv = mcp_h2c_client_new_versioned(&c, &e->loop, t->version, &o, def);
  if (rv < 0) {
    ck_assert_ptr_null(c);
    free(obj);
    return rv;
  }
  obj->p = c;
  *pobj = obj;
  return 0;
}

static void h_del(ta_obj *obj) {
  switch (obj->kind) {
  case O_SOURCE:
    mcp_h2c_source_del(obj->p);
    break;
  case O_SINK:
    mcp_h2c_sink_del(obj->p);
    break;
  default:
    mcp_h2c_client_del(obj->p);
    break;
  }
  free(obj);
}

static int h_port(ta_obj *obj) {
  return obj->kind == O_SINK ? mcp_h2c_sink_port(obj->p)
                             : mcp_h2c_source_port(obj->p);
}

static int h_reauthorize(ta_obj *obj) {
  return obj->kind == O_SINK ? mcp_h2c_sink_reauthorize(obj->p)
                             : mcp_h2c_source_reauthorize(obj->p);
}

static void h_count(const mcp_h2c_stream_info *info, void *ud) {
  (void)info;
  ++*(int *)ud;
}

static int h_streams(ta_obj *obj, int *seen) {
  mcp_h2c_stream_fn fn = seen ? h_count : NULL;
  switch (obj->kind) {
  case O_SOURCE:
    return mcp_h2c_source_streams(obj->p, fn, seen);
  case O_SINK:
    return mcp_h2c_sink_streams(obj->p, fn, seen);
  default:
    return mcp_h2c_client_streams(obj->p, fn, seen);
  }
}

static int h_list(ta_obj *obj, void (*fn)(const mcp_stream_info *, void *),
                  void *ud) {
  switch (obj->kind) {
  case O_SOURCE:
    return mcp_h2c_source_streams(obj->p, fn, ud);
  case O_SINK:
    return mcp_h2c_sink_streams(obj->p, fn, ud);
  default:
    return mcp_h2c_client_streams(obj->p, fn, ud);
  }
}

static int h_update(ta_obj *obj,
                    void (*fn)(mcp_store *, mcp_tstamp, void *), void *ud) {
  return mcp_h2c_source_update(obj->p, fn, ud);
}

static int h_call(ta_obj *obj, void (*fn)(mcp_tstamp, void *), void *ud) {
  return mcp_h2c_client_call(obj->p, fn, ud);
}

static int h_stats_versioned(ta_obj *obj, int version,
                             mcp_transport_stats *st) {
  switch (obj->kind) {
  case O_SOURCE:
    return mcp_h2c_source_stats_versioned(obj->p, version, st);
  case O_SINK:
    return mcp_h2c_sink_stats_versioned(obj->p, version, st);
  default:
    return mcp_h2c_client_stats_versioned(obj->p, version, st);
  }
}

static int h_sink_call(ta_obj *obj,
                       void (*fn)(mcp_sink_state *, mcp_tstamp, void *),
                       void *ud) {
  /* The loop runs on the test's thread, where mcp_h2c_sink_call() is
   * refused: the state is read directly. */
  fn(obj->state, mcp_h2c_now(), ud);
  return 0;
}

static int h_turn(ta_env *e, ta_obj *obj, void (*fn)(void *), void *ud) {
  (void)obj;
  uv_run(&e->loop, UV_RUN_NOWAIT);
  fn(ud);
  return 0;
}

/* ---- h2c alone ---- */

/* *_streams(), *_stats() and *_finish() are loop-thread only: another
 * thread is told so (gRPC's run on its own threads and take calls from
 * any thread, so this is h2c's alone). */
typedef struct off_thread {
  ta_world *w;
  int streams, stats, sink_streams, sink_stats, finish;
} off_thread;

static void *call_from_other_thread(void *ud) {
  off_thread *t = ud;
  mcp_h2c_stats st;
  mcp_h2c_source *src = t->w->src->p;
  mcp_h2c_sink *sink = t->w->sink->p;
  t->streams = mcp_h2c_source_streams(src, NULL, NULL);
  t->stats = mcp_h2c_source_stats(src, &st);
  t->sink_streams = mcp_h2c_sink_streams(sink, NULL, NULL);
  t->sink_stats = mcp_h2c_sink_stats(sink, &st);
  t->finish = mcp_h2c_sink_finish(sink);
  return NULL;
}

START_TEST(loop_thread_only_and_connections) {
  ta_world w;
  ta_world_init(&w);
  ta_start_source(&w, NULL);
  ta_start_sink(&w, NULL);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  mcp_h2c_stats st;
  memset(&st, 0, sizeof(st));
  ck_assert_int_eq(mcp_h2c_source_stats((mcp_h2c_source *)w.src->p, &st), 0);
  ck_assert_uint_eq(st.connections, 1);
  ck_assert_uint_eq(st.tls_handshakes, test_tls_mode() ? 1 : 0);

  off_thread t = {.w = &w};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, call_from_other_thread, &t), 0);
  ck_assert_int_eq(pthread_join(th, NULL), 0);
  ck_assert_int_eq(t.streams, MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(t.stats, MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(t.sink_streams, MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(t.sink_stats, MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(t.finish, MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(ta->streams(w.sink, NULL), 1); /* still */
  ta_world_fini(&w);
}
END_TEST

/* A plain HTTP/1.1 request on its own connection, answered by the
 * built-in /healthz (h2c serves HTTP/1.1 on its port; gRPC's C core does
 * not). */
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

static void http1_get(ta_env *e, int port) {
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
  ck_assert_int_eq(send(p.fd, req, sizeof(req) - 1, 0),
                   (ssize_t)sizeof(req) - 1);
  ck_assert_int_eq(fcntl(p.fd, F_SETFL, O_NONBLOCK), 0);
  ck_assert(h2t_run_until(&e->loop, http1_answered, &p, TA_TIMEOUT_MS));
  close(p.fd);
}

/* HTTP/1.1 traffic beside a sync goes through the source's hook too, and
 * every block comes back once the loop is done. */
START_TEST(http1_allocations_go_through_the_hook) {
  if (test_tls_mode())
    return; /* over TLS, ALPN http/1.1 is test_h2c_tls's */
  tm_mem sm;
  tm_init(&sm, 0);
  ta_world w;
  ta_world_init(&w);
  ta_start_source(&w, &sm.mem);
  ta_start_sink(&w, NULL);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  long before = tm_get(&sm).allocs;
  http1_get(w.env, ta->port(w.src));
  ck_assert_int_gt(tm_get(&sm).allocs, before);
  ta_world_fini(&w);
  ck_assert(ta_balanced(&sm));
  tm_fini(&sm);
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
  ta_world w;
  ta_world_init(&w);
  ta_start_source(&w, &sm.mem);
  ck_assert_int_eq(nghttp2_calls, 0); /* no connection, no session */
  ta_start_sink(&w, NULL);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  ck_assert_int_gt(nghttp2_calls, 0);
  ta_world_fini(&w);
  ck_assert(ta_balanced(&sm));
  tm_fini(&sm);
}
END_TEST

static void h_add_own_tests(Suite *s) {
  TCase *tc = tcase_create("h2c");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, loop_thread_only_and_connections);
  tcase_add_test(tc, http1_allocations_go_through_the_hook);
  tcase_add_test(tc, nghttp2_sessions_use_the_hook);
  suite_add_tcase(s, tc);
}

/* ---- sync (tests/test_transport_sync.c) ---- */

/* The loop runs on the test's thread, where mcp_h2c_source_call() is
 * refused: the store is read directly. */
static int h_store_call(ta_obj *obj, mcp_store *store,
                        void (*fn)(mcp_store *, mcp_tstamp, void *),
                        void *ud) {
  (void)obj;
  fn(store, mcp_h2c_now(), ud);
  return 0;
}

static int h_source_call(ta_obj *obj,
                         void (*fn)(mcp_store *, mcp_tstamp, void *),
                         void *ud) {
  return mcp_h2c_source_call(obj->p, fn, ud);
}

static int h_sink_call_from(ta_obj *obj,
                            void (*fn)(mcp_sink_state *, mcp_tstamp, void *),
                            void *ud) {
  return mcp_h2c_sink_call(obj->p, fn, ud);
}

/* h2c alone: mcp_h2c_options.on_closed (gRPC's *_del() returns once all
 * is closed, so it has no such callback). */
static void h_closed_cb(void *ud) { (*(int *)ud)++; }

static void h_count_update(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)st;
  (void)ts;
  (*(int *)ud)++;
}

static int h_one_closed(void *ud) { return *(int *)ud == 1; }

START_TEST(on_closed_runs_once_the_source_is_closed) {
  ta_world w;
  ta_world_init(&w);
  int closed = 0, ran = 0;
  mcp_h2c_options o;
  mcp_h2c_options_default(&o);
  o.address = "127.0.0.1:0";
  o.on_closed = h_closed_cb;
  o.user_data = &closed;
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = w.store;
  mcp_h2c_source *src = NULL;
  ck_assert_int_eq(mcp_h2c_source_new(&src, &w.env->loop, &o, &so), 0);
  ck_assert_int_eq(mcp_h2c_source_update(src, h_count_update, &ran), 0);
  /* del() runs what is queued, then the object closes on the loop. */
  mcp_h2c_source_del(src);
  ck_assert_int_eq(ran, 1);
  ck_assert_int_eq(closed, 0);
  ck_assert(h2t_run_until(&w.env->loop, h_one_closed, &closed, 10000));
  ta_world_fini(&w);
}
END_TEST

static void h_add_sync_tests(Suite *s) {
  TCase *tc = tcase_create("h2c");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, on_closed_runs_once_the_source_is_closed);
  suite_add_tcase(s, tc);
}

static int h_sink_finish(ta_obj *obj) { return mcp_h2c_sink_finish(obj->p); }

const ta_transport ta_h2c = {
    .name = "h2c",
    .options_size = sizeof(mcp_h2c_options),
    .mem_offset = offsetof(mcp_h2c_options, mem),
    .options_v1 = MCP_H2C_OPTIONS_V1,
    .options_version = MCP_H2C_OPTIONS_VERSION,
    .options_default_versioned = h_options_default_versioned,
    .check_v1_defaults = h_check_v1_defaults,
    .env_new = h_env_new,
    .env_del = h_env_del,
    .run_until = h_run_until,
    .settled = h_settled,
    .source_new = h_source_new,
    .sink_new = h_sink_new,
    .client_new = h_client_new,
    .del = h_del,
    .port = h_port,
    .reauthorize = h_reauthorize,
    .streams = h_streams,
    .list = h_list,
    .update = h_update,
    .call = h_call,
    .stats_versioned = h_stats_versioned,
    .sink_call = h_sink_call,
    .now = mcp_h2c_now,
    .turn = h_turn,
    .asks_per_turn = 0,
    .min_redial = 8 * MCP_MILLISECONDS, /* 10 ms, jitter 0.2 */
    .min_sync_allocs = 10, /* connections, streams, nghttp2 sessions */
    .counts_bytes = 1,
    .tells_method = 1,
    .tls_run = 1,
    .add_own_tests = h_add_own_tests,
    /* ---- sync ---- */
    .store_call = h_store_call,
    .source_call = h_source_call,
    .sink_call_from = h_sink_call_from,
    .sink_finish = h_sink_finish,
    .method = mcp_h2c_method,
    .not_served = "is not served here",
    .runs_by_itself = 0,
    .add_sync_tests = h_add_sync_tests,
    .counts_tls = 1,
    .ends_streams_at_del = 1,
};
