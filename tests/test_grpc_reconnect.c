/* A dialing sink's redials follow its backoff. (Its resume after the
 * source restarts is test_transport_sync.c's, over every transport.) */
#include "test_grpc_util.h"

static const char *const colls[] = {"c1"};

static int closed_thrice(void *ud) {
  return tg_streams_get(ud).closed >= 3;
}

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
  tcase_add_test(tc, test_dialing_nothing_retries_with_growing_delays);
  suite_add_tcase(s, tc);
  return tg_run(s);
}
