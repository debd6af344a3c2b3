/*
 * Tests of the transport shims' shared reading of a stream
 * (tools/transport/transport.c, shim.h): every library fills the engine's
 * one shape (mcp_stream_info), and the programs' view of it is made by one
 * function, whatever the transport. Pure functions: no sockets, no clock;
 * except the last test, which runs each transport built in: its endpoint's
 * counters come through the table's one stats row in the engine's shape.
 */
#include <check.h>
#include <string.h>

#include "transport/shim.h"

static const char *const ids[] = {"spiffe://a/ns/x/sa/y", "y.x"};

static mcp_stream_info sample(void) {
  mcp_stream_info in;
  memset(&in, 0, sizeof(in));
  in.id = 42;
  in.peer = "ipv4:127.0.0.1:40000";
  in.dialed = 1;
  in.opened = 7;
  in.received = 3;
  in.sent = 5;
  in.status = 14;
  in.details = "gone";
  in.identities = ids;
  in.nidentities = 2;
  in.tls = 1;
  in.api = "destination";
  return in;
}

START_TEST(test_every_field_reaches_the_programs_view) {
  mcp_stream_info in = sample();
  char peer[TOOL_PEER_MAX];
  tool_stream_info ti = tool_shim_stream_info(&in, peer, sizeof(peer));
  ck_assert_uint_eq(ti.id, 42);
  ck_assert_str_eq(ti.peer, "127.0.0.1:40000"); /* the programs' one form */
  ck_assert_ptr_eq(ti.peer, peer);
  ck_assert_int_eq(ti.dialed, 1);
  ck_assert_uint_eq(ti.opened, 7);
  ck_assert_uint_eq(ti.received, 3);
  ck_assert_uint_eq(ti.sent, 5);
  ck_assert_int_eq(ti.status, 14);
  ck_assert_str_eq(ti.details, "gone");
  ck_assert_ptr_eq(ti.identities, ids);
  ck_assert_uint_eq(ti.nidentities, 2);
  ck_assert_int_eq(ti.tls, 1);
  ck_assert_str_eq(ti.api, "destination");
  ck_assert_ptr_null(ti.stream);
  ck_assert_ptr_null(ti.source);
  ck_assert_ptr_null(ti.sink);
}
END_TEST

START_TEST(test_missing_details_and_peer_read_as_empty) {
  mcp_stream_info in = sample();
  in.details = NULL;
  in.peer = NULL;
  in.api = NULL; /* an MCP stream */
  char peer[TOOL_PEER_MAX];
  tool_stream_info ti = tool_shim_stream_info(&in, peer, sizeof(peer));
  ck_assert_str_eq(ti.details, "");
  ck_assert_str_eq(ti.peer, "");
  ck_assert_ptr_null(ti.api);
}
END_TEST

typedef struct seen {
  int opened, closed, refused;
  uint64_t last_id;
  char last_peer[TOOL_PEER_MAX];
} seen;

static void on_stream(int opened, const tool_stream_info *info, void *ud) {
  seen *s = ud;
  if (opened)
    s->opened++;
  else
    s->closed++;
  s->last_id = info->id;
  strcpy(s->last_peer, info->peer);
}

static void on_refused(const tool_stream_info *info, void *ud) {
  seen *s = ud;
  s->refused++;
  s->last_id = info->id;
}

START_TEST(test_events_reach_the_callback_the_program_asked_for) {
  seen s;
  memset(&s, 0, sizeof(s));
  tool_shim_cb cb = {on_stream, on_refused, &s};
  mcp_stream_info in = sample();
  tool_shim_on_stream(MCP_STREAM_OPENED, &in, &cb);
  tool_shim_on_stream(MCP_STREAM_CLOSED, &in, &cb);
  ck_assert_int_eq(s.opened, 1);
  ck_assert_int_eq(s.closed, 1);
  ck_assert_int_eq(s.refused, 0);
  ck_assert_uint_eq(s.last_id, 42);
  ck_assert_str_eq(s.last_peer, "127.0.0.1:40000");
  /* A refused call never was a stream: on_refused only. */
  tool_shim_on_stream(MCP_STREAM_REFUSED, &in, &cb);
  ck_assert_int_eq(s.refused, 1);
  ck_assert_int_eq(s.opened + s.closed, 2);
  /* Only what the program asked for: refusals without on_stream, and
   * nothing at all without either. */
  tool_shim_cb only_refused = {NULL, on_refused, &s};
  tool_shim_on_stream(MCP_STREAM_OPENED, &in, &only_refused);
  tool_shim_on_stream(MCP_STREAM_REFUSED, &in, &only_refused);
  ck_assert_int_eq(s.refused, 2);
  ck_assert_int_eq(s.opened, 1);
  tool_shim_cb none = {NULL, NULL, &s};
  tool_shim_on_stream(MCP_STREAM_CLOSED, &in, &none);
  tool_shim_on_stream(MCP_STREAM_REFUSED, &in, &none);
  ck_assert_int_eq(s.opened + s.closed + s.refused, 4);
}
END_TEST

static void count_walk(const tool_stream_info *info, void *ud) {
  seen *s = ud;
  s->opened++;
  s->last_id = info->id;
  strcpy(s->last_peer, info->peer);
}

START_TEST(test_walk_hands_each_stream_in_the_programs_form) {
  seen s;
  memset(&s, 0, sizeof(s));
  tool_shim_walk w = {count_walk, &s};
  mcp_stream_info in = sample();
  tool_shim_walk_stream(&in, &w);
  in.id = 43;
  in.peer = "ipv6:%5B::1%5D:9";
  tool_shim_walk_stream(&in, &w);
  ck_assert_int_eq(s.opened, 2);
  ck_assert_uint_eq(s.last_id, 43);
  ck_assert_str_eq(s.last_peer, "[::1]:9");
}
END_TEST

START_TEST(test_sink_stats_count_only_the_stream_with_the_session) {
  tool_sink_stream_stats st;
  memset(&st, 0xff, sizeof(st));
  tool_shim_stats_clear(&st);
  ck_assert_int_eq(st.open, 0);
  mcp_stream_info in = sample(); /* no sink session: a service's call */
  in.sending = 1;
  tool_shim_stats_stream(&in, &st);
  ck_assert_int_eq(st.open, 0);
}
END_TEST

/* Issue 21: every transport's endpoint hands its counters over in the
 * engine's one shape (mcp_transport_stats) through the table's |stats|
 * row, which /metrics reads (the per-peer rate's counters): no shim macro
 * reads two libraries' fields by name. A listening sink on 127.0.0.1:0,
 * per transport built in. */
START_TEST(test_every_transport_gives_the_one_stats_shape) {
  static const char *const names[] = {"grpc", "h2c"};
  static const char *const colls[] = {"c1"};
  int ran = 0;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    const tool_transport *tp = NULL;
    if (tool_transport_find(names[i], &tp) != 0)
      continue; /* not built in */
    ck_assert(tp->stats != NULL);
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    mcp_sink_options so;
    mcp_sink_options_default(&so);
    so.node_id = "shim";
    so.collections = colls;
    so.ncollections = 1;
    mcp_sink_state *state = NULL;
    ck_assert_int_eq(mcp_sink_state_new(&state, &so), 0);
    tool_endpoint_options eo;
    memset(&eo, 0, sizeof(eo));
    eo.mode = TOOL_LISTEN;
    eo.address = "127.0.0.1:0";
    void *ep = NULL;
    ck_assert_int_eq(tp->sink_new(&ep, &loop, &eo, state), 0);
    mcp_transport_stats st;
    memset(&st, 0xab, sizeof(st));
    ck_assert_int_eq(tp->stats(ep, &st), 0);
    ck_assert_uint_eq(st.streams, 0);
    ck_assert_uint_eq(st.opened, 0);
    ck_assert_uint_eq(st.peer_rate_delayed, 0);
    ck_assert_uint_eq(st.refused_peer_rate, 0);
    tp->sink_del(ep);
    uv_run(&loop, UV_RUN_DEFAULT); /* what the endpoint left to close */
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    mcp_sink_state_del(state);
    ran++;
  }
  ck_assert_int_gt(ran, 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tools_shim");
  TCase *tc = tcase_create("shim");
  tcase_add_test(tc, test_every_field_reaches_the_programs_view);
  tcase_add_test(tc, test_missing_details_and_peer_read_as_empty);
  tcase_add_test(tc, test_events_reach_the_callback_the_program_asked_for);
  tcase_add_test(tc, test_walk_hands_each_stream_in_the_programs_form);
  tcase_add_test(tc, test_sink_stats_count_only_the_stream_with_the_session);
  tcase_add_test(tc, test_every_transport_gives_the_one_stats_shape);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
