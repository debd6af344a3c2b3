/* A dialing sink outlives its source: it reconnects with backoff and
 * resumes from the versions it holds. */
#include "test_grpc_util.h"

static const char *const colls[] = {"c1"};

static int closed_once(void *ud) {
  return tg_streams_get(ud).closed >= 1;
}

static int closed_thrice(void *ud) {
  return tg_streams_get(ud).closed >= 3;
}

/* The newest request the sink sent for c1 on a new stream: how many
 * initial_resource_versions it carried (-1: none found). */
typedef struct last_req {
  int count;     /* new-stream requests seen */
  long ninitial; /* of the newest */
} last_req;

static void read_journal(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  (void)ts;
  last_req *r = ud;
  r->count = 0;
  r->ninitial = -1;
  for (size_t i = 0; i < mcp_sink_state_journal_count(st); i++) {
    mcp_journal_entry e;
    ck_assert_int_eq(mcp_sink_state_journal_entry(st, i, &e), 0);
    if (e.kind == MCP_EVENT_REQUEST && strcmp(e.collection, "c1") == 0) {
      r->count++;
      r->ninitial = (long)e.ninitial;
    }
  }
}

START_TEST(test_sink_resumes_after_source_restart_on_same_port) {
  mcp_store *store = tg_store();
  mcp_tstamp ts = mcp_grpc_now();
  tg_put(store, "c1", "a", "alpha", ts);
  tg_put(store, "c1", "b", "beta", ts);
  tg_put(store, "c1", "c", "gamma", ts);

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

  mcp_sink_state *state = tg_sink_state(colls, 1, 1);
  char addr[64];
  mcp_grpc_options ko_opts;
  tg_dial_opts(&ko_opts, addr, sizeof(addr), port, &ko);
  mcp_grpc_sink *sink = NULL;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &ko_opts, state), 0);
  tg_pair p = {src, NULL, sink, "c1"};
  ck_assert(tg_wait(tg_equal, &p, TG_TIMEOUT_MS));

  /* The source goes away; the sink's stream ends with UNAVAILABLE. */
  mcp_grpc_source_del(src);
  ck_assert(tg_wait(closed_once, &ko, TG_TIMEOUT_MS));
  ck_assert_int_eq(tg_streams_get(&ko).last_status, GRPC_STATUS_UNAVAILABLE);

  /* Meanwhile the content changes; nobody serves the store now. */
  ts = mcp_grpc_now();
  ck_assert_int_eq(mcp_store_delete(store, "c1", "b", ts), 1);
  tg_put(store, "c1", "c", "gamma-2", ts);
  tg_put(store, "c1", "d", "delta", ts);
  /* Two failed attempts (connection refused), waited for as they end. */
  ck_assert(tg_wait(closed_thrice, &ko, TG_TIMEOUT_MS));
  ck_assert_int_eq(tg_streams_get(&ko).last_status, GRPC_STATUS_UNAVAILABLE);
  int before = tg_events_get().pushes;

  /* Back on the same port. */
  char again[64];
  snprintf(again, sizeof(again), "127.0.0.1:%d", port);
  tg_listen_opts(&o, again, &so);
  /* The port can be briefly taken: with nobody listening, the sink's own
   * reconnection attempts may self-connect on loopback (a source port
   * equal to the target port), or a parallel test may bind it. */
  int rv = -1;
  for (int tries = 0; tries < 100 && rv != 0; ++tries) {
    if ((rv = mcp_grpc_source_new(&src, &o, &sopts)) != 0) {
      tg_sleep_ms(20);
    }
  }
  ck_assert_int_eq(rv, 0);
  ck_assert_int_eq(mcp_grpc_source_port(src), port);
  p.src = src;
  ck_assert(tg_wait(tg_equal, &p, TG_TIMEOUT_MS));
  ck_assert(!tg_sink_has(sink, "c1", "b")); /* deleted while away: gone */
  ck_assert(tg_sink_has(sink, "c1", "d"));

  /* It resumed: the new stream's request carried the 3 versions held, and
   * the answer was incremental, removing b. */
  last_req r;
  ck_assert_int_eq(mcp_grpc_sink_call(sink, read_journal, &r), 0);
  ck_assert_int_ge(r.count, 2);
  ck_assert_int_eq(r.ninitial, 3);
  tg_events e = tg_events_get();
  ck_assert_int_gt(e.pushes, before);
  ck_assert_int_ge(e.incremental_pushes, 1);
  ck_assert_int_ge(e.removed, 1);

  mcp_grpc_sink_del(sink);
  mcp_grpc_source_del(src);
  mcp_sink_state_del(state);
  mcp_store_del(store);
}
END_TEST


START_TEST(test_dialing_nothing_retries_with_growing_delays) {
  /* A port nothing listens on: bind one, note it, free it. */
  tg_streams so;
  tg_streams_init(&so);
  mcp_store *store = tg_store();
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &so);
  tg_source_opts(&sopts, store);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  int port = mcp_grpc_source_port(src);
  mcp_grpc_source_del(src);

  tg_streams ko;
  tg_streams_init(&ko);
  mcp_sink_state *state = tg_sink_state(colls, 1, 1);
  char addr[64];
  tg_dial_opts(&o, addr, sizeof(addr), port, &ko);
  o.backoff.initial = 100 * MCP_MILLISECONDS;
  o.backoff.max = MCP_SECONDS;
  mcp_grpc_sink *sink = NULL;
  mcp_tstamp t0 = mcp_grpc_now();
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), 0);
  ck_assert(tg_wait(closed_thrice, &ko, TG_TIMEOUT_MS));
  /* Three attempts: immediate, then >= 80 ms, then >= 128 ms. */
  ck_assert_uint_ge(mcp_grpc_now() - t0, 200 * MCP_MILLISECONDS);
  ck_assert_int_eq(tg_streams_get(&ko).last_status, GRPC_STATUS_UNAVAILABLE);
  mcp_grpc_sink_del(sink);
  mcp_sink_state_del(state);
  mcp_store_del(store);
}
END_TEST

int main(void) {
  Suite *s = suite_create("grpc_reconnect");
  TCase *tc = tcase_create("reconnect");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, tg_reset, NULL);
  tcase_add_test(tc, test_sink_resumes_after_source_restart_on_same_port);
  tcase_add_test(tc, test_dialing_nothing_retries_with_growing_delays);
  suite_add_tcase(s, tc);
  return tg_run(s);
}
