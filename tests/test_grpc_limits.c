/* The send limit: exceeded, RESOURCE_EXHAUSTED. The recv limit and the
 * 6 MiB default run over both transports in tests/test_transport_errors.c;
 * this one stays here for now: ta_opts has no max_send_message_size yet
 * (h2c has the option; issue 21 item 7, not moved in session 14). */
#include "test_grpc_util.h"

static const char *const colls[] = {"c1"};

static int closed_once(void *ud) { return tg_streams_get(ud).closed >= 1; }

/* A source serving one resource of |size| bytes, and a sink dialing it;
 * |recv_max| / |send_max| (0: default) limit the sink / the source.
 * Returns the status the sink's first stream ended with, or -1 if it
 * synced instead. */
static int serve_one(size_t size, int recv_max, int send_max) {
  mcp_store *store = tg_store();
  tg_put_big(store, "c1", "big", size, mcp_grpc_now());
  tg_streams so, ko;
  tg_streams_init(&so);
  tg_streams_init(&ko);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &so);
  if (send_max)
    o.max_send_message_size = send_max;
  tg_source_opts(&sopts, store);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);

  mcp_sink_state *state = tg_sink_state(colls, 1, 0);
  char addr[64];
  tg_dial_opts(&o, addr, sizeof(addr), mcp_grpc_source_port(src), &ko);
  if (recv_max)
    o.max_recv_message_size = recv_max;
  mcp_grpc_sink *sink = NULL;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), 0);

  int status;
  tg_pair p = {src, NULL, sink, "c1"};
  if (recv_max || send_max) {
    ck_assert(tg_wait(closed_once, &ko, TG_TIMEOUT_MS));
    status = tg_streams_get(&ko).last_status;
    ck_assert(!tg_equal(&p));
  } else {
    ck_assert(tg_wait(tg_equal, &p, 4 * TG_TIMEOUT_MS));
    status = -1;
  }
  mcp_grpc_sink_del(sink);
  mcp_grpc_source_del(src);
  mcp_sink_state_del(state);
  mcp_store_del(store);
  return status;
}

START_TEST(test_send_limit_exceeded_gives_resource_exhausted) {
  ck_assert_int_eq(serve_one(64 << 10, 0, 16 << 10),
                   GRPC_STATUS_RESOURCE_EXHAUSTED);
}
END_TEST

int main(void) {
  Suite *s = suite_create("grpc_limits");
  TCase *tc = tcase_create("limits");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, tg_reset, NULL);
  tcase_add_test(tc, test_send_limit_exceeded_gives_resource_exhausted);
  suite_add_tcase(s, tc);
  return tg_run(s);
}
