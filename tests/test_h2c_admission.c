/*
 * h2c transport, admission on a source listener: the checks gRPC core's
 * client cannot drive, each with its reason (the rest of admission is
 * tests/test_transport_admission.c, run over every transport):
 *   - waiting streams reset give the window back: raw DATA filling h2c's
 *     own connection window (stream_window_size, connection_window_size)
 *     and its read_buffered count; gRPC core holds its windows itself;
 *   - streams per connection refused, not queued: h2c's
 *     max_streams_per_connection and the SETTINGS it announces (gRPC's
 *     only per-connection bound is the SETTINGS limit, where gRPC core
 *     queues the call);
 *   - rapid reset gets ENHANCE_YOUR_CALM: streams opened and reset in one
 *     write, faster than any gRPC-core call ends; h2c's stream_reset_*
 *     bucket (gRPC core's server has its own).
 * Raw nghttp2 clients (tests/h2c_harness.h).
 */
#include <check.h>
#include <errno.h>
#include <sys/socket.h>
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

/* Writes |n| bytes of junk on |c| after its GOAWAY, then its FIN, running
 * the server meanwhile, and reads until the server ends: 0 for a FIN, the
 * errno of a reset. */
typedef struct linger_st {
  rc *c;
  size_t left;
  int done, err;
} linger_st;

static int linger_step(void *ud) {
  linger_st *l = ud;
  static const uint8_t junk[16384];
  while (l->left) {
    size_t k = l->left < sizeof(junk) ? l->left : sizeof(junk);
    ssize_t w = send(l->c->fd, junk, k, MSG_NOSIGNAL);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    if (w < 0) {
      l->err = errno;
      return 1;
    }
    l->left -= (size_t)w;
    if (!l->left)
      shutdown(l->c->fd, SHUT_WR);
  }
  uint8_t buf[16384];
  for (;;) {
    ssize_t r = recv(l->c->fd, buf, sizeof(buf), 0);
    if (r == 0) {
      l->done = 1;
      return 1;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    if (r < 0) {
      l->err = errno;
      return 1;
    }
  }
}

static int linger_end(aenv *e, rc *c, size_t n) {
  linger_st l = {c, n, 0, 0};
  ck_assert(h2t_run_until(&e->loop, linger_step, &l, 20000));
  ck_assert_msg(l.done || l.err, "the server neither ended nor reset");
  return l.done ? 0 : l.err;
}

static int goaway_seen(void *ud) {
  rc *c = ud;
  rc_io(c);
  return c->goaway || c->eof;
}

/* Issue 23, item 5: a client resetting streams faster than the bucket
 * allows gets GOAWAY ENHANCE_YOUR_CALM (as nghttp2's own servers answer);
 * another connection is not affected. */
/* Opens and resets streams on |c| until the source answers GOAWAY
 * ENHANCE_YOUR_CALM (its bucket: a burst of 20, 1 a second). */
static void rapid_reset(aenv *e, rc *c) {
  rc_connect_from(c, e->port, 1 << 20, NULL);
  for (int round = 0; round < 4 && !c->goaway; round++) {
    c->nstreams = 0; /* the harness keeps 16: reuse the slots */
    for (int i = 0; i < 10; i++) {
      rc_stream *st = rc_open(c, "POST", SRC_PATH, GRPC, 1, NULL, NULL);
      rc_rst(c, st, NGHTTP2_CANCEL);
    }
    rc_io(c);
    h2t_run_for(&e->loop, 20);
  }
  ck_assert(h2t_run_until(&e->loop, goaway_seen, c, 10000));
  ck_assert(c->goaway);
  ck_assert_uint_eq(c->goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
}

START_TEST(test_h2c_rapid_reset_gets_enhance_your_calm) {
  aenv e;
  setup(&e);
  e.o.stream_reset_burst = 20;
  e.o.stream_reset_rate = 1;
  start(&e);
  rc *c = &e.c[0];
  rapid_reset(&e, c);
  ck_assert_uint_eq(stats(&e).rapid_resets, 1);
  /* The client goes on writing after the GOAWAY, as one that queued a
   * burst does: the server lingers, so it sees FIN, not a reset that
   * could have destroyed the GOAWAY before it was read. */
  ck_assert_int_eq(linger_end(&e, c, 1 << 20), 0);
  open_streams(&e, 1, NULL, 1, 1);
  cnt q = {&e, 1, 2, PUSHED, 1};
  ck_assert(h2t_run_until(&e.loop, reached, &q, 10000));
  finish(&e);
}
END_TEST

/* Writes a byte on |c| each turn until the server's socket is gone
 * (the write is refused: EPIPE or ECONNRESET). */
static int trickle_refused(void *ud) {
  rc *c = ud;
  ssize_t w = send(c->fd, "x", 1, MSG_NOSIGNAL);
  return w < 0 && errno != EAGAIN && errno != EWOULDBLOCK;
}

static int no_connections(void *ud) { return stats(ud).connections == 0; }

/* A lingering socket is bounded: a peer that trickles bytes and never
 * ends it is cut off (at 5 s), and sockets still lingering when the
 * source is deleted close with it (under ASan: nothing left, nothing
 * used after it is freed). */
START_TEST(test_h2c_lingering_socket_is_bounded_and_ends_with_the_source) {
  aenv e;
  setup(&e);
  e.o.stream_reset_burst = 20;
  e.o.stream_reset_rate = 1;
  start(&e);
  rc *c = &e.c[0];
  rapid_reset(&e, c);
  ck_assert(h2t_run_until(&e.loop, trickle_refused, c, 20000));
  rc *d = &e.c[1];
  rapid_reset(&e, d);
  ck_assert(h2t_run_until(&e.loop, no_connections, &e, 10000));
  finish(&e); /* d's socket lingers: the source's del closes it */
}
END_TEST

int main(void) {
  Suite *s = suite_create("h2c_admission");
  TCase *tc = tcase_create("admission");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_h2c_streams_per_connection_refused_not_queued);
  tcase_add_test(tc, test_h2c_rapid_reset_gets_enhance_your_calm);
  tcase_add_test(tc, test_h2c_lingering_socket_is_bounded_and_ends_with_the_source);
  tcase_add_test(tc, test_h2c_waiting_streams_reset_give_the_window_back);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
