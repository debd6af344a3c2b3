/*
 * h2c transport, admission on a source listener (issue 12): the core's
 * policy as the gRPC transport applies it. Raw nghttp2 clients from two
 * loopback addresses (two peers): streams that ask and never ACK free their
 * initial slot once their push is taken; silent streams from one peer hold
 * its share of the slots only, and its waiting streams end UNAVAILABLE at
 * the wait deadline; what a waiting stream sent is delivered once it runs;
 * the stream limit answers RESOURCE_EXHAUSTED.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h2c_harness.h"
#include "helper.h"
#include "mcp/h2c.h"

#define SRC_PATH MCP_H2C_RESOURCE_SOURCE_METHOD
#define GRPC "application/grpc"
#define NC 8 /* raw connections, 16 streams each at most */

typedef struct aenv {
  uv_loop_t loop;
  mcp_store *store;
  mcp_h2c_source *src;
  mcp_h2c_options o;
  int port;
  rc c[NC];
  int nc;
} aenv;

static void setup(aenv *e) {
  memset(e, 0, sizeof(*e));
  ck_assert_int_eq(uv_loop_init(&e->loop), 0);
  e->store = th_store(NULL);
  th_put(e->store, "c1", "a", "1", "A", mcp_h2c_now());
  mcp_h2c_options_default(&e->o);
  e->o.address = "127.0.0.1:0";
  e->o.shutdown_grace = MCP_SECONDS;
  for (int i = 0; i < NC; i++)
    e->c[i].fd = -1;
}

static void start(aenv *e) {
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = e->store;
  ck_assert_int_eq(mcp_h2c_source_new(&e->src, &e->loop, &e->o, &so), 0);
  e->port = mcp_h2c_source_port(e->src);
}

static void finish(aenv *e) {
  for (int i = 0; i < NC; i++)
    rc_close(&e->c[i]);
  mcp_h2c_source_del(e->src);
  h2t_loop_finish(&e->loop);
  mcp_store_del(e->store);
}

static mcp_h2c_stats stats(aenv *e) {
  mcp_h2c_stats st;
  mcp_h2c_source_stats(e->src, &st);
  return st;
}

/* Opens |n| streams on connection |ci| (from |from|); |ask|: each sends a
 * request for c1 (and never anything else). */
static void open_streams(aenv *e, int ci, const char *from, int n, int ask) {
  rc *c = &e->c[ci];
  if (c->fd < 0)
    rc_connect_from(c, e->port, 1 << 20, from);
  for (int i = 0; i < n; i++) {
    rc_stream *s = rc_open(c, "POST", SRC_PATH, GRPC, 1, NULL, NULL);
    if (ask) {
      size_t len;
      uint8_t *p = th_request(&len, "raw", "c1", "", 0, NULL, 0, NULL);
      rc_send_msg(c, s, 0, p, len);
      free(p);
    }
  }
  rc_io(c);
}

/* Streams of connections [from, to) that got a message / a status. */
static int count(aenv *e, int from, int to, int want_status) {
  int n = 0;
  for (int i = from; i < to; i++) {
    rc *c = &e->c[i];
    if (c->fd >= 0)
      rc_io(c);
    for (int k = 0; k < c->nstreams; k++)
      n += want_status < -1   ? rc_nmsgs(&c->streams[k]) > 0
           : want_status >= 0 ? c->streams[k].grpc_status == want_status
                              : 0;
  }
  return n;
}

typedef struct cnt {
  aenv *e;
  int from, to, status, want;
} cnt;

static int reached(void *ud) {
  cnt *k = ud;
  return count(k->e, k->from, k->to, k->status) >= k->want;
}

#define PUSHED (-2)

START_TEST(test_h2c_mute_streams_free_their_slots_at_push) {
  aenv e;
  setup(&e);
  e.o.max_initial_pushes = 2;
  e.o.max_initial_pushes_per_peer = 2;
  e.o.initial_push_timeout = 60 * MCP_SECONDS;
  e.o.admission_wait_timeout = 60 * MCP_SECONDS;
  start(&e);
  for (int i = 0; i < 4; i++)
    open_streams(&e, i, NULL, 10, 1);
  /* Before: each slot until its ACK or the 60 s timeout. */
  cnt k = {&e, 0, 4, PUSHED, 40};
  ck_assert_msg(h2t_run_until(&e.loop, reached, &k, 20000), "pushed %d",
                count(&e, 0, 4, PUSHED));
  mcp_h2c_stats st = stats(&e);
  ck_assert_uint_eq(st.initial_sent, 40);
  ck_assert_uint_eq(st.initial_timeouts, 0);
  ck_assert_uint_le(st.initial_peak, 2);
  ck_assert_uint_eq(st.initial, 0);
  ck_assert_uint_eq(st.streams, 40);
  finish(&e);
}
END_TEST

static int share_held(void *ud) {
  aenv *e = ud;
  for (int i = 0; i < NC; i++)
    if (e->c[i].fd >= 0)
      rc_io(&e->c[i]);
  mcp_h2c_stats st = stats(e);
  return st.initial == 2 && st.waiting_initial == 18;
}

/* The streams whose info says they hold an initial slot (the engine's
 * mcp_stream_info.initial, as gRPC reports it). */
static void count_initial(const mcp_h2c_stream_info *info, void *ud) {
  *(int *)ud += info->initial != 0;
}

START_TEST(test_h2c_silent_peer_holds_only_its_share) {
  aenv e;
  setup(&e);
  e.o.address = "0.0.0.0:0"; /* reached from 127.0.0.1 and 127.0.0.2 */
  e.o.max_initial_pushes = 8;
  e.o.max_initial_pushes_per_peer = 2;
  e.o.initial_push_timeout = 60 * MCP_SECONDS;
  e.o.admission_wait_timeout = 4 * MCP_SECONDS;
  start(&e);
  open_streams(&e, 0, "127.0.0.2", 10, 0);
  open_streams(&e, 1, "127.0.0.2", 10, 0);
  ck_assert(h2t_run_until(&e.loop, share_held, &e, 10000));
  int holding = 0;
  ck_assert_int_eq(mcp_h2c_source_streams(e.src, count_initial, &holding), 2);
  ck_assert_int_eq(holding, 2);
  uint64_t t0 = uv_hrtime();
  open_streams(&e, 2, "127.0.0.1", 3, 1);
  cnt k = {&e, 2, 3, PUSHED, 3};
  ck_assert(h2t_run_until(&e.loop, reached, &k, 10000));
  /* Served before the silent ones' wait deadline (4 s), let alone their
   * slots' timeout (60 s). */
  ck_assert_uint_lt(uv_hrtime() - t0, 4 * MCP_SECONDS);
  /* The silent peer's waiting streams end cleanly at their deadline. */
  cnt u = {&e, 0, 2, MCP_CODE_UNAVAILABLE, 18};
  ck_assert(h2t_run_until(&e.loop, reached, &u, 10000));
  int msg_ok = 0;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < e.c[i].nstreams; j++)
      msg_ok += strcmp(e.c[i].streams[j].grpc_message,
                       "server busy: not admitted within the wait timeout; "
                       "retry later") == 0;
  ck_assert_int_eq(msg_ok, 18);
  mcp_h2c_stats st = stats(&e);
  ck_assert_uint_eq(st.refused_wait_timeout, 18);
  ck_assert_uint_eq(st.initial, 2);
  finish(&e);
}
END_TEST

static int one_waiting(void *ud) {
  aenv *e = ud;
  for (int i = 0; i < NC; i++)
    if (e->c[i].fd >= 0)
      rc_io(&e->c[i]);
  mcp_h2c_stats st = stats(e);
  return st.initial == 1 && st.waiting_initial == 1 && st.read_buffered > 0;
}

START_TEST(test_h2c_waiting_stream_gets_what_it_sent_once_it_runs) {
  aenv e;
  setup(&e);
  e.o.max_initial_pushes = 1;
  e.o.initial_push_timeout = 60 * MCP_SECONDS;
  e.o.admission_wait_timeout = 60 * MCP_SECONDS;
  start(&e);
  open_streams(&e, 0, NULL, 1, 0); /* silent: holds the only slot */
  open_streams(&e, 1, NULL, 1, 1); /* asks: waits, its request held */
  ck_assert(h2t_run_until(&e.loop, one_waiting, &e, 10000));
  ck_assert_int_eq(count(&e, 1, 2, PUSHED), 0);
  rc_rst(&e.c[0], &e.c[0].streams[0], NGHTTP2_CANCEL); /* frees the slot */
  cnt k = {&e, 1, 2, PUSHED, 1};
  ck_assert(h2t_run_until(&e.loop, reached, &k, 10000));
  mcp_h2c_stats st = stats(&e);
  ck_assert_uint_eq(st.read_buffered, 0);
  ck_assert_uint_eq(st.waiting_initial, 0);
  ck_assert_uint_eq(st.initial_sent, 1);
  finish(&e);
}
END_TEST

static int held_n(void *ud) {
  aenv *e = ud;
  for (int i = 0; i < NC; i++)
    if (e->c[i].fd >= 0)
      rc_io(&e->c[i]);
  mcp_h2c_stats st = stats(e);
  return st.waiting_initial == 3 && st.read_buffered == 65535;
}

static int none_held(void *ud) {
  aenv *e = ud;
  for (int i = 0; i < NC; i++)
    if (e->c[i].fd >= 0)
      rc_io(&e->c[i]);
  mcp_h2c_stats st = stats(e);
  return st.waiting_initial == 0 && st.read_buffered == 0;
}

/* Waiting streams that the client resets leave nothing: not their bytes,
 * not their share of the connection's window (the whole window here: a
 * request after them still gets through). */
START_TEST(test_h2c_waiting_streams_reset_give_the_window_back) {
  aenv e;
  setup(&e);
  e.o.max_initial_pushes = 1;
  e.o.initial_push_timeout = 60 * MCP_SECONDS;
  e.o.admission_wait_timeout = 60 * MCP_SECONDS;
  e.o.stream_window_size = 65535;
  e.o.connection_window_size = 65535;
  start(&e);
  open_streams(&e, 0, NULL, 1, 0); /* holds the only slot */
  rc *c = &e.c[1];
  rc_connect(c, e.port, 0);
  static uint8_t junk[21845]; /* 3 x 21845 = the connection's window */
  for (int i = 0; i < 3; i++) {
    rc_stream *s = rc_open(c, "POST", SRC_PATH, GRPC, 1, NULL, NULL);
    rc_send(c, s, junk, sizeof(junk));
  }
  ck_assert(h2t_run_until(&e.loop, held_n, &e, 10000));
  for (int i = 0; i < 3; i++)
    rc_rst(c, &c->streams[i], NGHTTP2_CANCEL);
  ck_assert(h2t_run_until(&e.loop, none_held, &e, 10000));
  open_streams(&e, 1, NULL, 1, 1); /* a request on the same connection */
  rc_rst(&e.c[0], &e.c[0].streams[0], NGHTTP2_CANCEL); /* frees the slot */
  cnt k = {&e, 1, 2, PUSHED, 1};
  ck_assert(h2t_run_until(&e.loop, reached, &k, 10000));
  ck_assert_uint_eq(stats(&e).streams, 1);
  finish(&e);
}
END_TEST

START_TEST(test_h2c_max_streams_refused_resource_exhausted) {
  aenv e;
  setup(&e);
  e.o.max_streams = 3;
  e.o.max_streams_per_peer = SIZE_MAX;
  start(&e);
  open_streams(&e, 0, NULL, 4, 1);
  cnt k = {&e, 0, 1, MCP_CODE_RESOURCE_EXHAUSTED, 1};
  ck_assert(h2t_run_until(&e.loop, reached, &k, 10000));
  cnt p = {&e, 0, 1, PUSHED, 3};
  ck_assert(h2t_run_until(&e.loop, reached, &p, 10000));
  ck_assert_str_eq(e.c[0].streams[3].grpc_message, "too many streams");
  ck_assert_uint_eq(stats(&e).refused_max_streams, 1);
  finish(&e);
}
END_TEST

/* Issue 23, item 7: past max_streams_per_connection a call is refused
 * with RESOURCE_EXHAUSTED (the announced SETTINGS limit is twice as high,
 * so the client sends it rather than queueing it unstarted); a call on
 * another connection still runs, and so does one once a stream ends. */
static int streams_down_to_3(void *ud) {
  aenv *e = ud;
  for (int i = 0; i < 2; i++)
    rc_io(&e->c[i]);
  return stats(e).streams == 3;
}

START_TEST(test_h2c_streams_per_connection_refused_not_queued) {
  aenv e;
  setup(&e);
  e.o.max_streams_per_connection = 3;
  start(&e);
  open_streams(&e, 0, NULL, 4, 1);
  cnt k = {&e, 0, 1, MCP_CODE_RESOURCE_EXHAUSTED, 1};
  ck_assert(h2t_run_until(&e.loop, reached, &k, 10000));
  cnt p = {&e, 0, 1, PUSHED, 3};
  ck_assert(h2t_run_until(&e.loop, reached, &p, 10000));
  ck_assert_str_eq(e.c[0].streams[3].grpc_message,
                   "too many concurrent streams on this connection (limit 3)");
  ck_assert_uint_eq(stats(&e).refused_connection_streams, 1);
  open_streams(&e, 1, NULL, 1, 1); /* another connection */
  cnt q = {&e, 1, 2, PUSHED, 1};
  ck_assert(h2t_run_until(&e.loop, reached, &q, 10000));
  rc_rst(&e.c[0], &e.c[0].streams[0], NGHTTP2_CANCEL);
  rc_io(&e.c[0]);
  ck_assert(h2t_run_until(&e.loop, streams_down_to_3, &e, 10000));
  open_streams(&e, 0, NULL, 1, 1); /* room again on the first */
  cnt r = {&e, 0, 1, PUSHED, 4};
  ck_assert(h2t_run_until(&e.loop, reached, &r, 10000));
  ck_assert_uint_eq(stats(&e).refused_connection_streams, 1);
  finish(&e);
}
END_TEST

static int goaway_seen(void *ud) {
  rc *c = ud;
  rc_io(c);
  return c->goaway || c->eof;
}

/* Issue 23, item 5: a client resetting streams faster than the bucket
 * allows gets GOAWAY ENHANCE_YOUR_CALM (as nghttp2's own servers answer);
 * another connection is not affected. */
START_TEST(test_h2c_rapid_reset_gets_enhance_your_calm) {
  aenv e;
  setup(&e);
  e.o.stream_reset_burst = 20;
  e.o.stream_reset_rate = 1;
  start(&e);
  rc *c = &e.c[0];
  rc_connect_from(c, e.port, 1 << 20, NULL);
  for (int round = 0; round < 4 && !c->goaway; round++) {
    c->nstreams = 0; /* the harness keeps 16: reuse the slots */
    for (int i = 0; i < 10; i++) {
      rc_stream *st = rc_open(c, "POST", SRC_PATH, GRPC, 1, NULL, NULL);
      rc_rst(c, st, NGHTTP2_CANCEL);
    }
    rc_io(c);
    h2t_run_for(&e.loop, 20);
  }
  ck_assert(h2t_run_until(&e.loop, goaway_seen, c, 10000));
  ck_assert(c->goaway);
  ck_assert_uint_eq(c->goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
  ck_assert_uint_eq(stats(&e).rapid_resets, 1);
  open_streams(&e, 1, NULL, 1, 1);
  cnt q = {&e, 1, 2, PUSHED, 1};
  ck_assert(h2t_run_until(&e.loop, reached, &q, 10000));
  finish(&e);
}
END_TEST

/* Issue 23, item 6: new streams per peer. A peer opening streams fast gets
 * its burst, one more waits for the refill (a quarter of the burst may
 * wait), the rest are refused RESOURCE_EXHAUSTED saying why; a peer from
 * another address is served at once meanwhile, and the waiting stream
 * runs once its peer's bucket has a token again. */
START_TEST(test_h2c_peer_stream_rate_refuses_past_burst_healthy_peer_runs) {
  aenv e;
  setup(&e);
  e.o.peer_stream_rate = 1;
  e.o.peer_stream_burst = 4;
  start(&e);
  open_streams(&e, 0, "127.0.0.2", 8, 1);
  cnt k = {&e, 0, 1, MCP_CODE_RESOURCE_EXHAUSTED, 3};
  ck_assert(h2t_run_until(&e.loop, reached, &k, 10000));
  ck_assert_int_ge(count(&e, 0, 1, PUSHED), 4);
  open_streams(&e, 1, "127.0.0.1", 2, 1); /* the healthy peer */
  cnt q = {&e, 1, 2, PUSHED, 2};
  ck_assert(h2t_run_until(&e.loop, reached, &q, 10000));
  cnt w = {&e, 0, 1, PUSHED, 5}; /* the waiting one, once refilled */
  ck_assert(h2t_run_until(&e.loop, reached, &w, 10000));
  ck_assert_int_eq(count(&e, 0, 1, MCP_CODE_RESOURCE_EXHAUSTED), 3);
  ck_assert_str_eq(e.c[0].streams[7].grpc_message,
                   "too many new streams from this peer: more than 1 per "
                   "second after a burst of 4; retry with backoff");
  mcp_h2c_stats st = stats(&e);
  ck_assert_uint_eq(st.refused_peer_rate, 3);
  ck_assert_uint_eq(st.peer_rate_delayed, 1);
  finish(&e);
}
END_TEST

int main(void) {
  Suite *s = suite_create("h2c_admission");
  TCase *tc = tcase_create("admission");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_h2c_mute_streams_free_their_slots_at_push);
  tcase_add_test(tc, test_h2c_silent_peer_holds_only_its_share);
  tcase_add_test(tc, test_h2c_waiting_stream_gets_what_it_sent_once_it_runs);
  tcase_add_test(tc, test_h2c_max_streams_refused_resource_exhausted);
  tcase_add_test(tc, test_h2c_streams_per_connection_refused_not_queued);
  tcase_add_test(tc, test_h2c_rapid_reset_gets_enhance_your_calm);
  tcase_add_test(tc, test_h2c_waiting_streams_reset_give_the_window_back);
  tcase_add_test(tc,
                 test_h2c_peer_stream_rate_refuses_past_burst_healthy_peer_runs);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
