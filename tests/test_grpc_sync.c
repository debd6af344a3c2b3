/* Both directions over real gRPC: initial sync, pushed updates and their
 * ACKs, and the sink ending with exactly the store's state. With
 * MCP_TEST_TLS=1 (test grpc_sync_tls), over mutual TLS. */
#include "test_grpc_util.h"

static const char *const colls[] = {"c1", "c2"};

static void fill(mcp_store *st) {
  mcp_tstamp ts = mcp_grpc_now();
  tg_put(st, "c1", "a", "alpha", ts);
  tg_put(st, "c1", "b", "beta", ts);
  tg_put(st, "c1", "c", "gamma", ts);
  ck_assert_int_eq(mcp_store_add_collection(st, "c2"), 0); /* empty */
}

static void change(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)ud;
  tg_put(st, "c1", "b", "beta-2", ts);
  tg_put(st, "c1", "d", "delta", ts);
  ck_assert_int_eq(mcp_store_delete(st, "c1", "a", ts), 1);
  tg_put(st, "c2", "z", "zeta", ts);
}

static int source_acks_at_least_4(void *ud) {
  (void)ud;
  return tg_events_get().acks >= 4;
}

/* Initial sync, then one update: checks state and ACKs on both sides. */
/* |trigger|: the source dials, and its first push is the $triggerCollection
 * Istio's sinks expect, which ours answer with the NACK Istio's sources
 * expect, reported as the trigger (not a rejection); the source ignores
 * that NACK. */
static void sync_then_update(mcp_grpc_source *src, mcp_grpc_sink *sink,
                             int trigger) {
  tg_pair p1 = {src, NULL, sink, "c1"}, p2 = {src, NULL, sink, "c2"};
  ck_assert(tg_wait(tg_equal, &p1, TG_TIMEOUT_MS));
  ck_assert(tg_wait(tg_equal, &p2, TG_TIMEOUT_MS));
  tg_events e = tg_events_get();
  ck_assert_int_ge(e.pushes, 2);   /* one per collection, c2 while empty */
  ck_assert_int_eq(e.sink_nacks, 0);
  ck_assert_int_eq(e.sink_triggers, trigger);
  ck_assert_int_eq(e.nacks, 0);

  ck_assert_int_eq(mcp_grpc_source_update(src, change, NULL), 0);
  ck_assert(tg_wait(source_acks_at_least_4, NULL, TG_TIMEOUT_MS));
  ck_assert(tg_wait(tg_equal, &p1, TG_TIMEOUT_MS));
  ck_assert(tg_wait(tg_equal, &p2, TG_TIMEOUT_MS));
  ck_assert(!tg_sink_has(sink, "c1", "a"));
  ck_assert(tg_sink_has(sink, "c2", "z"));
  e = tg_events_get();
  ck_assert_int_ge(e.sink_acks, 4);
  ck_assert_int_eq(e.sink_nacks, 0);
  ck_assert_int_eq(e.sink_triggers, trigger);
  ck_assert_int_eq(e.nacks, 0);
}

START_TEST(test_sink_client_syncs_from_source_server) {
  mcp_store *store = tg_store();
  fill(store);
  tg_streams so, ko;
  tg_streams_init(&so);
  tg_streams_init(&ko);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &so);
  tg_source_opts(&sopts, store);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  int port = mcp_grpc_source_port(src);
  ck_assert_int_gt(port, 0);

  mcp_sink_state *state = tg_sink_state(colls, 2, 1);
  char addr[64];
  tg_dial_opts(&o, addr, sizeof(addr), port, &ko);
  mcp_grpc_sink *sink = NULL;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), 0);
  ck_assert_int_eq(mcp_grpc_sink_port(sink), 0);

  sync_then_update(src, sink, 0);
  tg_streams s = tg_streams_get(&so);
  ck_assert_int_eq(s.opened, 1);
  ck_assert_int_eq(s.closed, 0);
  ck_assert_int_eq(strncmp(s.last_peer, "ipv4:127.0.0.1:", 15), 0);
  mcp_grpc_sink_del(sink);
  mcp_grpc_source_del(src);
  mcp_sink_state_del(state);
  mcp_store_del(store);
}
END_TEST

START_TEST(test_source_client_syncs_sink_server) {
  mcp_store *store = tg_store();
  fill(store);
  tg_streams so, ko;
  tg_streams_init(&so);
  tg_streams_init(&ko);
  mcp_grpc_options o;
  mcp_sink_state *state = tg_sink_state(colls, 2, 0);
  tg_listen_opts(&o, "127.0.0.1:0", &ko);
  mcp_grpc_sink *sink = NULL;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), 0);
  int port = mcp_grpc_sink_port(sink);
  ck_assert_int_gt(port, 0);

  char addr[64];
  mcp_source_options sopts;
  tg_source_opts(&sopts, store);
  tg_dial_opts(&o, addr, sizeof(addr), port, &so);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);

  sync_then_update(src, sink, 1);
  tg_streams s = tg_streams_get(&ko);
  ck_assert_int_eq(s.opened, 1);
  ck_assert_int_eq(s.closed, 0);
  mcp_grpc_source_del(src);
  mcp_grpc_sink_del(sink);
  mcp_sink_state_del(state);
  mcp_store_del(store);
}
END_TEST

/* ---- updates from many threads at once ---- */

typedef struct writer {
  mcp_grpc_source *src;
  int id;
} writer;

static void put_job(mcp_store *st, mcp_tstamp ts, void *ud) {
  intptr_t v = (intptr_t)ud;
  char name[16], body[32];
  snprintf(name, sizeof(name), "w%d", (int)(v % 100));
  snprintf(body, sizeof(body), "v%d", (int)v);
  tg_put(st, "c1", name, body, ts);
}

static void *writer_main(void *arg) {
  writer *w = arg;
  for (int i = 0; i < 200; i++) {
    intptr_t v = (intptr_t)(w->id * 10 + i % 10) + 100 * i;
    ck_assert_int_eq(mcp_grpc_source_update(w->src, put_job, (void *)v), 0);
  }
  return NULL;
}

START_TEST(test_updates_from_many_threads_converge) {
  mcp_store *store = tg_store();
  fill(store);
  tg_streams so, ko;
  tg_streams_init(&so);
  tg_streams_init(&ko);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &so);
  tg_source_opts(&sopts, store);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  mcp_sink_state *state = tg_sink_state(colls, 2, 1);
  char addr[64];
  tg_dial_opts(&o, addr, sizeof(addr), mcp_grpc_source_port(src), &ko);
  mcp_grpc_sink *sink = NULL;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), 0);

  writer w[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    w[i].src = src;
    w[i].id = i;
    ck_assert_int_eq(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
  }
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  tg_pair p = {src, NULL, sink, "c1"};
  ck_assert(tg_wait(tg_equal, &p, TG_TIMEOUT_MS));
  mcp_grpc_sink_del(sink);
  mcp_grpc_source_del(src);
  mcp_sink_state_del(state);
  mcp_store_del(store);
}
END_TEST

/* ---- introspection ---- */

/* Counts the streams whose session has been asked for collections. */
static void count_stream(const mcp_grpc_stream_info *info, void *ud) {
  int *n = ud;
  ck_assert_ptr_nonnull(info->source);
  ck_assert_ptr_null(info->sink);
  ck_assert_int_eq(strncmp(info->peer, "ipv4:127.0.0.1:", 15), 0);
  ck_assert_int_eq(info->tls, test_tls_mode()); /* the mode holds */
  if (mcp_source_session_collection_count(info->source) > 0)
    (*n)++;
}

static int two_streams(void *ud) {
  int n = 0;
  ck_assert_int_ge(mcp_grpc_source_streams(ud, count_stream, &n), n);
  return n == 2;
}

START_TEST(test_streams_expose_peer_and_session) {
  mcp_store *store = tg_store();
  fill(store);
  tg_streams so, k1, k2;
  tg_streams_init(&so);
  tg_streams_init(&k1);
  tg_streams_init(&k2);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &so);
  tg_source_opts(&sopts, store);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  mcp_sink_state *s1 = tg_sink_state(colls, 2, 0);
  mcp_sink_state *s2 = tg_sink_state(colls, 1, 1);
  char addr[64];
  mcp_grpc_sink *a = NULL, *b = NULL;
  tg_dial_opts(&o, addr, sizeof(addr), mcp_grpc_source_port(src), &k1);
  ck_assert_int_eq(mcp_grpc_sink_new(&a, &o, s1), 0);
  o.user_data = &k2;
  ck_assert_int_eq(mcp_grpc_sink_new(&b, &o, s2), 0);
  ck_assert(tg_wait(two_streams, src, TG_TIMEOUT_MS));
  mcp_grpc_sink_del(a);
  mcp_grpc_sink_del(b);
  mcp_grpc_source_del(src);
  mcp_sink_state_del(s1);
  mcp_sink_state_del(s2);
  mcp_store_del(store);
}
END_TEST

/* ---- timers: a debounced push goes out when the session's expiry passes */

static void put_late(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)ud;
  tg_put(st, "c1", "late", "lambda", ts);
}

START_TEST(test_debounced_push_fires_on_timer) {
  mcp_store *store = tg_store();
  fill(store);
  tg_streams so, ko;
  tg_streams_init(&so);
  tg_streams_init(&ko);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &so);
  tg_source_opts(&sopts, store);
  sopts.debounce = 150 * MCP_MILLISECONDS;
  sopts.max_delay = 150 * MCP_MILLISECONDS;
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  mcp_sink_state *state = tg_sink_state(colls, 2, 1);
  char addr[64];
  tg_dial_opts(&o, addr, sizeof(addr), mcp_grpc_source_port(src), &ko);
  mcp_grpc_sink *sink = NULL;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), 0);
  tg_pair p = {src, NULL, sink, "c1"};
  ck_assert(tg_wait(tg_equal, &p, TG_TIMEOUT_MS));

  /* Nothing else happens on the stream: only the timer can push it. */
  mcp_tstamp t0 = mcp_grpc_now();
  ck_assert_int_eq(mcp_grpc_source_call(src, put_late, NULL), 0);
  while (!tg_sink_has(sink, "c1", "late") &&
         mcp_grpc_now() - t0 < 3 * MCP_SECONDS)
    tg_sleep_ms(5);
  mcp_tstamp took = mcp_grpc_now() - t0;
  ck_assert(tg_sink_has(sink, "c1", "late"));
  ck_assert_uint_ge(took, 140 * MCP_MILLISECONDS);
  ck_assert_uint_lt(took, 2 * MCP_SECONDS);
  mcp_grpc_sink_del(sink);
  mcp_grpc_source_del(src);
  mcp_sink_state_del(state);
  mcp_store_del(store);
}
END_TEST

/* ---- the update queue is bounded ---- */

typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started, open;
} gate;

static void hold(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)st;
  (void)ts;
  gate *g = ud;
  pthread_mutex_lock(&g->mu);
  g->started = 1;
  pthread_cond_broadcast(&g->cv);
  while (!g->open)
    pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static int started(void *ud) {
  gate *g = ud;
  pthread_mutex_lock(&g->mu);
  int s = g->started;
  pthread_mutex_unlock(&g->mu);
  return s;
}

START_TEST(test_update_queue_is_bounded) {
  mcp_store *store = tg_store();
  tg_streams so;
  tg_streams_init(&so);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &so);
  o.max_queued_updates = 10;
  tg_source_opts(&sopts, store);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);

  gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
  ck_assert_int_eq(mcp_grpc_source_update(src, hold, &g), 0);
  ck_assert(tg_wait(started, &g, TG_TIMEOUT_MS)); /* the loop is busy */
  for (intptr_t i = 0; i < 10; i++)
    ck_assert_int_eq(mcp_grpc_source_update(src, put_job, (void *)i), 0);
  ck_assert_int_eq(mcp_grpc_source_update(src, put_job, NULL),
                   MCP_ERR_LIMIT);
  pthread_mutex_lock(&g.mu);
  g.open = 1;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  mcp_grpc_source_del(src);
  ck_assert_uint_eq(mcp_store_count(store, "c1"), 10);
  mcp_store_del(store);
}
END_TEST

/* ---- keepalive: an idle stream with client pings every 100 ms (and a
 * server that allows them) stays open and keeps working ---- */

static int streams_open_now(void *ud) {
  return tg_streams_get(ud).open_now == 1;
}

START_TEST(test_keepalive_pings_keep_stream_open) {
  mcp_store *store = tg_store();
  fill(store);
  tg_streams so, ko;
  tg_streams_init(&so);
  tg_streams_init(&ko);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &so);
  o.min_recv_ping_interval_ms = 50;
  tg_source_opts(&sopts, store);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  mcp_sink_state *state = tg_sink_state(colls, 2, 1);
  char addr[64];
  tg_dial_opts(&o, addr, sizeof(addr), mcp_grpc_source_port(src), &ko);
  o.keepalive_time_ms = 100;
  /* What is tested is that the pings do not end the stream (the server
   * allows them); an ack slowed by a busy machine must not either. */
  o.keepalive_timeout_ms = 20000;
  o.keepalive_permit_without_calls = 1;
  mcp_grpc_sink *sink = NULL;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), 0);
  tg_pair p = {src, NULL, sink, "c1"};
  ck_assert(tg_wait(tg_equal, &p, TG_TIMEOUT_MS));
  ck_assert(tg_wait(streams_open_now, &so, TG_TIMEOUT_MS));
  /* The stimulus, not a window for an expected event: six ping intervals
   * with no data. A slow machine can only send fewer pings in it (gRPC
   * tells nobody of its pings), never make the asserts below fail. */
  tg_sleep_ms(600);
  ck_assert_int_eq(tg_streams_get(&so).closed, 0);
  ck_assert_int_eq(tg_streams_get(&ko).closed, 0);
  ck_assert_int_eq(mcp_grpc_source_update(src, put_late, NULL), 0);
  ck_assert(tg_wait(tg_equal, &p, TG_TIMEOUT_MS));
  mcp_grpc_sink_del(sink);
  mcp_grpc_source_del(src);
  mcp_sink_state_del(state);
  mcp_store_del(store);
}
END_TEST

int main(void) {
  Suite *s = suite_create(test_tls_mode() ? "grpc_sync_tls" : "grpc_sync");
  TCase *tc = tcase_create("sync");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, tg_reset, NULL);
  tcase_add_test(tc, test_sink_client_syncs_from_source_server);
  tcase_add_test(tc, test_source_client_syncs_sink_server);
  tcase_add_test(tc, test_updates_from_many_threads_converge);
  tcase_add_test(tc, test_streams_expose_peer_and_session);
  tcase_add_test(tc, test_debounced_push_fires_on_timer);
  tcase_add_test(tc, test_update_queue_is_bounded);
  tcase_add_test(tc, test_keepalive_pings_keep_stream_open);
  suite_add_tcase(s, tc);
  return tg_run(s);
}
