/* A stuck stream is cancelled after the grace period (run under ASan).
 * The rest of this file (a drained shutdown, queued updates, bind errors)
 * is tests/test_transport_shutdown.c, run over every transport; this
 * test is still gRPC's: its peer is a gRPC-core call that never reads. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_grpc_util.h"

static const char *const colls[] = {"c1"};

/* The first request a sink sends, as bytes (made by the core). */
static grpc_byte_buffer *first_request(void) {
  mcp_sink_state *st = tg_sink_state(colls, 1, 0);
  mcp_sink_session *ss = NULL;
  ck_assert_int_eq(mcp_sink_session_new(&ss, st, mcp_grpc_now()), 0);
  mcp_msg *msg = NULL;
  ck_assert_int_eq(mcp_sink_session_next(ss, &msg), 1);
  grpc_slice s = grpc_slice_malloc(mcp_msg_len(msg));
  mcp_msg_flatten(msg, GRPC_SLICE_START_PTR(s));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  mcp_msg_free(msg);
  mcp_sink_session_del(ss);
  mcp_sink_state_del(st);
  return bb;
}

static int opened_once(void *ud) { return tg_streams_get(ud).opened >= 1; }

static void any_sending(const mcp_grpc_stream_info *info, void *ud) {
  if (info->sending)
    *(int *)ud = 1;
}

/* A stream of |ud| (a source) holds a message gRPC has not sent in full. */
static int push_stuck(void *ud) {
  int sending = 0;
  ck_assert_int_ge(mcp_grpc_source_streams(ud, any_sending, &sending), 0);
  return sending;
}

START_TEST(test_stuck_stream_cancelled_after_grace) {
  /* A client that subscribes and then never reads: the push (larger than
   * any flow-control window) cannot complete, so the status cannot follow
   * it; the server cancels the call after the grace period. */
  mcp_store *store = tg_store();
  tg_put_big(store, "c1", "big", 16 << 20, mcp_grpc_now());
  tg_streams so;
  tg_streams_init(&so);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &so);
  o.shutdown_grace = 300 * MCP_MILLISECONDS;
  tg_source_opts(&sopts, store);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);

  grpc_init();
  char target[64];
  snprintf(target, sizeof(target), "127.0.0.1:%d", mcp_grpc_source_port(src));
  grpc_channel_credentials *cr = grpc_insecure_credentials_create();
  grpc_channel *ch = grpc_channel_create(target, cr, NULL);
  grpc_channel_credentials_release(cr);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  grpc_call *call = grpc_channel_create_call(
      ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
      grpc_slice_from_static_string(MCP_GRPC_RESOURCE_SOURCE_METHOD), NULL,
      gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  grpc_byte_buffer *req = first_request();
  grpc_metadata_array tm;
  grpc_metadata_array_init(&tm);
  grpc_status_code status = GRPC_STATUS_OK;
  grpc_slice det;
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = req;
  ck_assert_int_eq(grpc_call_start_batch(call, ops, 2, (void *)1, NULL),
                   GRPC_CALL_OK);
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[0].data.recv_status_on_client.trailing_metadata = &tm;
  ops[0].data.recv_status_on_client.status = &status;
  ops[0].data.recv_status_on_client.status_details = &det;
  ck_assert_int_eq(grpc_call_start_batch(call, ops, 1, (void *)2, NULL),
                   GRPC_CALL_OK);
  /* Wait until the server has the stream and its push is stuck in gRPC
   * (the stream reports a message handed over and not yet sent in full).
   * This client's own send batch only completes once the call is over. */
  ck_assert(tg_wait(opened_once, &so, TG_TIMEOUT_MS));
  ck_assert(tg_wait(push_stuck, src, TG_TIMEOUT_MS));

  mcp_tstamp t0 = mcp_grpc_now();
  mcp_grpc_source_del(src);
  mcp_tstamp took = mcp_grpc_now() - t0;
  /* At least the grace (less the clocks' slack), and the configured one:
   * well below the default grace, which a slow machine cannot reach. */
  ck_assert_uint_ge(took, 250 * MCP_MILLISECONDS);
  mcp_grpc_options d;
  mcp_grpc_options_default(&d);
  ck_assert_uint_gt(d.shutdown_grace, 10 * o.shutdown_grace);
  ck_assert_uint_lt(took, d.shutdown_grace);
  tg_streams s = tg_streams_get(&so);
  ck_assert_int_eq(s.closed, 1);
  ck_assert_int_eq(s.last_status, GRPC_STATUS_CANCELLED);

  /* This client, which reads nothing, may not notice the reset behind the
   * data it does not read: end its call from here. */
  grpc_call_cancel(call, NULL);
  gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                 gpr_time_from_millis(5000, GPR_TIMESPAN));
  for (int i = 0; i < 2; i++) {
    grpc_event ev = grpc_completion_queue_next(cq, dl, NULL);
    ck_assert_int_eq(ev.type, GRPC_OP_COMPLETE);
  }
  ck_assert_int_ne(status, GRPC_STATUS_OK);
  grpc_slice_unref(det);
  grpc_metadata_array_destroy(&tm);
  grpc_byte_buffer_destroy(req);
  grpc_call_unref(call);
  grpc_channel_destroy(ch);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL)
             .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(cq);
  grpc_shutdown();
  mcp_store_del(store);
}
END_TEST

int main(void) {
  Suite *s = suite_create("grpc_shutdown");
  TCase *tc = tcase_create("shutdown");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, tg_reset, NULL);
  tcase_add_test(tc, test_stuck_stream_cancelled_after_grace);
  suite_add_tcase(s, tc);
  return tg_run(s);
}
