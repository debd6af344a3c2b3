/*
 * h2c transport, gRPC framing and HTTP/2 edge cases, against a source
 * listener, with a raw nghttp2 client that sends exactly the frames each
 * test wants: messages split across DATA frames and packed into one,
 * sizes at and over the limit, compressed messages, wrong content types,
 * unknown paths, deadlines, resets mid-push, a peer that never reads,
 * abrupt disconnects, GOAWAY both ways, keepalive, idleness, ping floods.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h2c_harness.h"
#include "helper.h"
#include "mcp/h2c.h"
#include "mcp/v1alpha1/mcp.pb-c.h"

#define SRC_PATH MCP_H2C_RESOURCE_SOURCE_METHOD
#define GRPC "application/grpc"

typedef struct fenv {
  uv_loop_t loop;
  mcp_store *store;
  mcp_h2c_source *src;
  mcp_h2c_options o;
  int port;
  rc c;
  int closed;
  int last_status;
  char last_details[256];
} fenv;

static void on_stream(mcp_h2c_stream_event ev, const mcp_h2c_stream_info *i,
                      void *ud) {
  fenv *e = ud;
  if (ev == MCP_H2C_STREAM_CLOSED) {
    e->closed++;
    e->last_status = i->status;
    snprintf(e->last_details, sizeof(e->last_details), "%s", i->details);
  }
}

static void setup(fenv *e) {
  memset(e, 0, sizeof(*e));
  ck_assert_int_eq(uv_loop_init(&e->loop), 0);
  e->store = th_store(NULL);
  th_put(e->store, "c1", "a", "1", "A", mcp_h2c_now());
  th_put(e->store, "c1", "b", "1", "B", mcp_h2c_now());
  ck_assert_int_eq(mcp_store_add_collection(e->store, "c2"), 0);
  mcp_h2c_options_default(&e->o);
  e->o.address = "127.0.0.1:0";
  e->o.max_recv_message_size = 1 << 20;
  e->o.on_stream = on_stream;
  e->o.user_data = e;
  e->o.shutdown_grace = MCP_SECONDS;
  e->c.fd = -1;
}

static void start(fenv *e) {
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = e->store;
  ck_assert_int_eq(mcp_h2c_source_new(&e->src, &e->loop, &e->o, &so), 0);
  e->port = mcp_h2c_source_port(e->src);
}

static void finish(fenv *e) {
  rc_close(&e->c);
  if (e->src)
    mcp_h2c_source_del(e->src);
  h2t_loop_finish(&e->loop);
  mcp_store_del(e->store);
}

static void stats(fenv *e, mcp_h2c_stats *st) {
  mcp_h2c_source_stats(e->src, st);
}

/* Encodes a new request for |coll| and frames it into |b|. */
static void add_request(h2t_buf *b, const char *coll) {
  size_t n;
  uint8_t *p = th_request(&n, "raw", coll, "", 0, NULL, 0, NULL);
  uint8_t hdr[5] = {0, (uint8_t)(n >> 24), (uint8_t)(n >> 16),
                    (uint8_t)(n >> 8), (uint8_t)n};
  h2t_buf_add(b, hdr, 5);
  h2t_buf_add(b, p, n);
  free(p);
}

static void send_request(fenv *e, rc_stream *s, const char *coll) {
  h2t_buf b = {0};
  add_request(&b, coll);
  rc_send(&e->c, s, b.p, b.len);
  h2t_buf_free(&b);
}

static rc_stream *open_grpc(fenv *e) {
  return rc_open(&e->c, "POST", SRC_PATH, GRPC, 1, NULL, NULL);
}

/* Conditions: each moves the raw client's bytes first. */
typedef struct want {
  fenv *e;
  rc_stream *s;
  int n;
} want;

static void wait_msgs(fenv *e, rc_stream *s, int n) {
  ck_assert_msg(rc_run_until_msgs(&e->loop, &e->c, s, n, 10000),
                "waited for %d messages, have %d (status %d %s)", n,
                rc_nmsgs(s), s->grpc_status, s->grpc_message);
}

static void wait_status(fenv *e, rc_stream *s) {
  ck_assert(rc_run_until_status(&e->loop, &e->c, s, 10000));
}

static Istio__Mcp__V1alpha1__Resources *decode(rc_stream *s, int i) {
  const uint8_t *p;
  size_t n;
  ck_assert(rc_msg(s, i, &p, &n));
  Istio__Mcp__V1alpha1__Resources *r =
      istio__mcp__v1alpha1__resources__unpack(NULL, n, p);
  ck_assert_ptr_nonnull(r);
  return r;
}

typedef struct server_stats_want {
  fenv *e;
  size_t conns, streams;
} server_stats_want;

static int server_is(void *ud) {
  server_stats_want *w = ud;
  rc_io(&w->e->c);
  mcp_h2c_stats st;
  stats(w->e, &st);
  return st.connections == w->conns && st.streams == w->streams;
}

static void wait_server(fenv *e, size_t conns, size_t streams) {
  server_stats_want w = {e, conns, streams};
  ck_assert(h2t_run_until(&e->loop, server_is, &w, 10000));
}

/* ------------------------------------------------------------------ */

START_TEST(message_split_across_frames) {
  fenv e;
  setup(&e);
  start(&e);
  rc_connect(&e.c, e.port, 0);
  rc_stream *s = open_grpc(&e);
  s->chunk = 1; /* one byte per DATA frame */
  send_request(&e, s, "c1");
  wait_msgs(&e, s, 1);
  ck_assert_int_eq(s->http_status, 200);
  ck_assert_str_eq(s->content_type, "application/grpc");
  Istio__Mcp__V1alpha1__Resources *r = decode(s, 0);
  ck_assert_str_eq(r->collection, "c1");
  ck_assert_uint_eq(r->n_resources, 2);
  istio__mcp__v1alpha1__resources__free_unpacked(r, NULL);
  mcp_h2c_stats st;
  stats(&e, &st);
  ck_assert_uint_eq(st.messages_received, 1);
  ck_assert_uint_eq(st.read_buffered, 0);
  finish(&e);
}
END_TEST

START_TEST(many_messages_in_one_frame) {
  fenv e;
  setup(&e);
  start(&e);
  rc_connect(&e.c, e.port, 0);
  rc_stream *s = open_grpc(&e);
  h2t_buf b = {0};
  add_request(&b, "c1");
  add_request(&b, "c2");
  add_request(&b, "c3"); /* unknown: not answered, not an error */
  rc_send(&e.c, s, b.p, b.len);
  h2t_buf_free(&b);
  wait_msgs(&e, s, 2);
  int seen = 0;
  for (int i = 0; i < 2; ++i) {
    Istio__Mcp__V1alpha1__Resources *r = decode(s, i);
    seen |= strcmp(r->collection, "c1") == 0 ? 1 : 2;
    istio__mcp__v1alpha1__resources__free_unpacked(r, NULL);
  }
  ck_assert_int_eq(seen, 3);
  mcp_h2c_stats st;
  stats(&e, &st);
  ck_assert_uint_eq(st.messages_received, 3);
  finish(&e);
}
END_TEST

START_TEST(large_message_out_in_many_frames) {
  fenv e;
  setup(&e);
  size_t big = 300 << 10;
  char *body = malloc(big + 1);
  memset(body, 'x', big);
  body[big] = '\0';
  th_put(e.store, "big", "r", "1", body, mcp_h2c_now());
  free(body);
  start(&e);
  rc_connect(&e.c, e.port, 0); /* 64 KiB windows: WINDOW_UPDATEs needed */
  rc_stream *s = open_grpc(&e);
  send_request(&e, s, "big");
  wait_msgs(&e, s, 1);
  Istio__Mcp__V1alpha1__Resources *r = decode(s, 0);
  ck_assert_uint_eq(r->n_resources, 1);
  ck_assert_uint_eq(r->resources[0]->body->value.len, big);
  istio__mcp__v1alpha1__resources__free_unpacked(r, NULL);
  finish(&e);
}
END_TEST

/* A request of exactly |total| bytes: padded with an unknown field. */
static uint8_t *request_of_size(size_t total) {
  size_t n;
  uint8_t *base = th_request(&n, "raw", "c1", "", 0, NULL, 0, NULL);
  ck_assert_uint_lt(n + 8, total);
  uint8_t *p = malloc(total);
  memcpy(p, base, n);
  free(base);
  for (size_t l = total - n - 6;; ++l) {
    size_t v = 1, x = l;
    while (x >= 0x80) {
      x >>= 7;
      v++;
    }
    if (n + 1 + v + l == total) {
      uint8_t *w = p + n;
      *w++ = 0x7a; /* field 15, length-delimited: unknown to MCP */
      x = l;
      while (x >= 0x80) {
        *w++ = (uint8_t)(x | 0x80);
        x >>= 7;
      }
      *w++ = (uint8_t)x;
      memset(w, 'p', l);
      return p;
    }
    ck_assert_uint_lt(n + 1 + v + l, total);
  }
}

START_TEST(max_message_size) {
  fenv e;
  setup(&e);
  start(&e);
  size_t max = 1 << 20;
  rc_connect(&e.c, e.port, 0);
  rc_stream *ok = open_grpc(&e);
  uint8_t *p = request_of_size(max);
  rc_send_msg(&e.c, ok, 0, p, max);
  free(p);
  wait_msgs(&e, ok, 1);
  ck_assert_int_eq(ok->grpc_status, -1);

  rc_stream *over = open_grpc(&e);
  p = request_of_size(max + 1);
  rc_send_msg(&e.c, over, 0, p, max + 1);
  free(p);
  wait_status(&e, over);
  ck_assert_int_eq(over->grpc_status, 8); /* RESOURCE_EXHAUSTED */
  ck_assert_msg(strstr(over->grpc_message, "larger than max") != NULL, "%s",
                over->grpc_message);
  ck_assert_int_eq(rc_nmsgs(over), 0);
  /* The first stream lives on. */
  ck_assert(!ok->closed);
  wait_server(&e, 1, 1);
  mcp_h2c_stats st;
  stats(&e, &st);
  ck_assert_uint_eq(st.read_buffered, 0);
  finish(&e);
}
END_TEST

START_TEST(compressed_message_refused) {
  fenv e;
  setup(&e);
  start(&e);
  rc_connect(&e.c, e.port, 0);
  rc_stream *s =
      rc_open(&e.c, "POST", SRC_PATH, GRPC, 1, "grpc-encoding", "gzip");
  size_t n;
  uint8_t *p = th_request(&n, "raw", "c1", "", 0, NULL, 0, NULL);
  rc_send_msg(&e.c, s, 1, p, n);
  free(p);
  wait_status(&e, s);
  ck_assert_int_eq(s->grpc_status, 12); /* UNIMPLEMENTED */
  ck_assert_msg(strstr(s->grpc_message, "compressed") != NULL, "%s",
                s->grpc_message);
  finish(&e);
}
END_TEST

START_TEST(wrong_content_type) {
  fenv e;
  setup(&e);
  start(&e);
  rc_connect(&e.c, e.port, 0);
  rc_stream *s =
      rc_open(&e.c, "POST", SRC_PATH, "application/json", 1, NULL, NULL);
  rc_end(&e.c, s);
  wait_status(&e, s);
  ck_assert_int_eq(s->http_status, 415);
  ck_assert_int_eq(s->grpc_status, 3);
  ck_assert(s->end_headers_only);
  ck_assert_msg(strstr(s->grpc_message, "content-type") != NULL, "%s",
                s->grpc_message);
  finish(&e);
}
END_TEST

START_TEST(unknown_path) {
  fenv e;
  setup(&e);
  start(&e);
  rc_connect(&e.c, e.port, 0);
  rc_stream *s = rc_open(&e.c, "POST", "/foo.Bar/Baz", "application/grpc+proto",
                         1, NULL, NULL);
  wait_status(&e, s);
  ck_assert_int_eq(s->http_status, 200);
  ck_assert_int_eq(s->grpc_status, 12);
  ck_assert(s->end_headers_only); /* trailers-only */
  ck_assert_str_eq(s->grpc_message, "unknown method /foo.Bar/Baz");
  ck_assert(rc_run_until_closed(&e.loop, &e.c, s, 10000));
  /* The other service of this port: a source serves no ResourceSink. */
  rc_stream *t =
      rc_open(&e.c, "POST", MCP_H2C_RESOURCE_SINK_METHOD, GRPC, 1, NULL, NULL);
  wait_status(&e, t);
  ck_assert_int_eq(t->grpc_status, 12);
  finish(&e);
}
END_TEST

START_TEST(missing_te) {
  fenv e;
  setup(&e);
  start(&e);
  rc_connect(&e.c, e.port, 0);
  rc_stream *s = rc_open(&e.c, "POST", SRC_PATH, GRPC, 0, NULL, NULL);
  wait_status(&e, s);
  ck_assert_int_eq(s->http_status, 400);
  ck_assert_int_eq(s->grpc_status, 13);
  finish(&e);
}
END_TEST

START_TEST(deadline_exceeded) {
  fenv e;
  setup(&e);
  start(&e);
  rc_connect(&e.c, e.port, 0);
  uint64_t t0 = uv_hrtime();
  rc_stream *s =
      rc_open(&e.c, "POST", SRC_PATH, GRPC, 1, "grpc-timeout", "150m");
  send_request(&e, s, "c1");
  wait_status(&e, s);
  uint64_t took = uv_hrtime() - t0;
  ck_assert_int_eq(s->grpc_status, 4); /* DEADLINE_EXCEEDED */
  ck_assert_int_eq(rc_nmsgs(s), 1);    /* answered meanwhile */
  ck_assert_uint_ge(took, 140 * MCP_MILLISECONDS);
  ck_assert_uint_lt(took, 3 * MCP_SECONDS);
  wait_server(&e, 1, 0);

  rc_stream *bad =
      rc_open(&e.c, "POST", SRC_PATH, GRPC, 1, "grpc-timeout", "soon");
  wait_status(&e, bad);
  ck_assert_int_eq(bad->grpc_status, 13);
  finish(&e);
}
END_TEST

static int some_data(void *ud) {
  want *w = ud;
  rc_io(&w->e->c);
  return w->s->data.len > 0;
}

START_TEST(reset_mid_push) {
  fenv e;
  setup(&e);
  size_t big = 4 << 20;
  char *body = malloc(big + 1);
  memset(body, 'y', big);
  body[big] = '\0';
  th_put(e.store, "big", "r", "1", body, mcp_h2c_now());
  free(body);
  start(&e);
  rc_connect(&e.c, e.port, 0);
  rc_stream *s = open_grpc(&e);
  send_request(&e, s, "big");
  want w = {&e, s, 0};
  ck_assert(h2t_run_until(&e.loop, some_data, &w, 10000));
  ck_assert_uint_lt(s->data.len, big);
  mcp_h2c_stats st;
  stats(&e, &st);
  ck_assert_uint_gt(st.msg_buffered, 0); /* the push is under way */
  rc_rst(&e.c, s, NGHTTP2_CANCEL);
  wait_server(&e, 1, 0);
  ck_assert_int_eq(e.closed, 1);
  ck_assert_int_eq(e.last_status, 1); /* CANCELLED */
  stats(&e, &st);
  ck_assert_uint_eq(st.msg_buffered, 0);
  /* The connection serves a new stream. */
  rc_stream *t = open_grpc(&e);
  send_request(&e, t, "c1");
  wait_msgs(&e, t, 1);
  finish(&e);
}
END_TEST

static int never_read_settled(void *ud) {
  fenv *e = ud;
  rc_io(&e->c);
  return 0;
}

START_TEST(peer_never_reads) {
  fenv e;
  setup(&e);
  enum { N = 16 };
  size_t big = 2 << 20;
  char *body = malloc(big + 1);
  memset(body, 'z', big);
  body[big] = '\0';
  for (int i = 0; i < N; ++i) {
    char coll[16];
    snprintf(coll, sizeof(coll), "big%d", i);
    th_put(e.store, coll, "r", "1", body, mcp_h2c_now());
  }
  free(body);
  start(&e);
  /* Windows wide open: only the socket holds the server back. */
  rc_connect(&e.c, e.port, 0x7fffffff);
  rc_stream *s = open_grpc(&e);
  h2t_buf b = {0};
  for (int i = 0; i < N; ++i) {
    char coll[16];
    snprintf(coll, sizeof(coll), "big%d", i);
    add_request(&b, coll);
  }
  rc_send(&e.c, s, b.p, b.len);
  h2t_buf_free(&b);
  h2t_run_for(&e.loop, 50);
  e.c.no_read = 1;
  h2t_run_until(&e.loop, never_read_settled, &e, 1500);
  mcp_h2c_stats st;
  stats(&e, &st);
  if (getenv("H2C_DEBUG"))
    fprintf(stderr,
            "never reads: sent %llu of %d messages, %llu bytes written, "
            "msg_buffered %zu, write_buffered %zu\n",
            (unsigned long long)st.messages_sent, N,
            (unsigned long long)st.bytes_written, st.msg_buffered,
            st.write_buffered);
  /* At most one message taken from the core and not yet framed, and the
   * write buffers (two of 64 KiB plus a frame each). */
  ck_assert_uint_le(st.msg_buffered, big + 1024);
  ck_assert_uint_le(st.write_buffered, 2 * ((64 << 10) + (16 << 10) + 64));
  ck_assert_uint_lt(st.messages_sent, N - 1);
  ck_assert_uint_le(st.bytes_written, (uint64_t)(N - 2) * big);
  /* An abrupt disconnect frees everything. */
  rc_close(&e.c);
  wait_server(&e, 0, 0);
  stats(&e, &st);
  ck_assert_uint_eq(st.msg_buffered, 0);
  ck_assert_uint_eq(st.write_buffered, 0);
  ck_assert_uint_eq(st.read_buffered, 0);
  finish(&e);
}
END_TEST

static int partial_held(void *ud) {
  fenv *e = ud;
  mcp_h2c_stats st;
  rc_io(&e->c);
  stats(e, &st);
  return st.read_buffered > 0;
}

START_TEST(abrupt_disconnect_mid_message) {
  fenv e;
  setup(&e);
  start(&e);
  rc_connect(&e.c, e.port, 0);
  rc_stream *s = open_grpc(&e);
  size_t n;
  uint8_t *p = th_request(&n, "raw", "c1", "", 0, NULL, 0, NULL);
  uint8_t hdr[5] = {0, 0, 0, 0, (uint8_t)(n + 100)}; /* announces more */
  rc_send(&e.c, s, hdr, 5);
  rc_send(&e.c, s, p, n);
  free(p);
  wait_server(&e, 1, 1);
  /* A partial message held: waited for, not given a window. */
  ck_assert(h2t_run_until(&e.loop, partial_held, &e, 10000));
  mcp_h2c_stats st;
  rc_close(&e.c);
  wait_server(&e, 0, 0);
  stats(&e, &st);
  ck_assert_uint_eq(st.read_buffered, 0);
  ck_assert_int_eq(e.last_status, MCP_CODE_UNAVAILABLE);
  finish(&e);
}
END_TEST

START_TEST(half_close_gets_answers) {
  fenv e;
  setup(&e);
  start(&e);
  rc_connect(&e.c, e.port, 0);
  rc_stream *s = open_grpc(&e);
  h2t_buf b = {0};
  add_request(&b, "c1");
  add_request(&b, "c2");
  rc_send(&e.c, s, b.p, b.len);
  h2t_buf_free(&b);
  rc_end(&e.c, s);
  wait_status(&e, s);
  ck_assert_int_eq(s->grpc_status, 0);
  ck_assert_int_eq(rc_nmsgs(s), 2);
  ck_assert(rc_run_until_closed(&e.loop, &e.c, s, 10000));
  ck_assert_uint_eq(s->close_code, 0);
  finish(&e);
}
END_TEST

static int got_goaway(void *ud) {
  want *w = ud;
  rc_io(&w->e->c);
  return w->e->c.goaway && w->s->grpc_status >= 0 && w->e->c.eof;
}

START_TEST(server_shutdown_goaway) {
  fenv e;
  setup(&e);
  start(&e);
  rc_connect(&e.c, e.port, 0);
  rc_stream *s = open_grpc(&e);
  send_request(&e, s, "c1");
  wait_msgs(&e, s, 1);
  mcp_h2c_source_del(e.src);
  e.src = NULL;
  want w = {&e, s, 0};
  ck_assert(h2t_run_until(&e.loop, got_goaway, &w, 10000));
  ck_assert_int_eq(s->grpc_status, 14); /* UNAVAILABLE */
  ck_assert_str_eq(s->grpc_message, "server shutting down");
  ck_assert_uint_eq(e.c.goaway_code, 0);
  finish(&e);
}
END_TEST

START_TEST(client_goaway) {
  fenv e;
  setup(&e);
  start(&e);
  rc_connect(&e.c, e.port, 0);
  rc_stream *s = open_grpc(&e);
  send_request(&e, s, "c1");
  wait_msgs(&e, s, 1);
  nghttp2_submit_goaway(e.c.h2, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, NULL,
                        0);
  rc_rst(&e.c, s, NGHTTP2_CANCEL);
  wait_server(&e, 0, 0); /* no stream, GOAWAY received: closed */
  finish(&e);
}
END_TEST

static int closed_status(void *ud) {
  fenv *e = ud;
  rc_io(&e->c);
  return e->closed > 0;
}

static int five_pings(void *ud) {
  fenv *e = ud;
  rc_io(&e->c);
  return e->c.pings >= 5;
}

START_TEST(keepalive) {
  fenv e;
  setup(&e);
  e.o.keepalive_time_ms = 50;
  e.o.keepalive_timeout_ms = 150;
  start(&e);
  rc_connect(&e.c, e.port, 0);
  rc_stream *s = open_grpc(&e);
  send_request(&e, s, "c1");
  wait_msgs(&e, s, 1);
  /* A client that answers PINGs stays: five PINGs answered (more than
   * the timeout's worth of them), waited for as they come, and the
   * connection is still there. */
  ck_assert(h2t_run_until(&e.loop, five_pings, &e, 30000));
  ck_assert_int_eq(e.closed, 0);
  mcp_h2c_stats st;
  stats(&e, &st);
  ck_assert_uint_eq(st.connections, 1);
  /* One that does not is dropped. */
  e.c.no_read = 1;
  ck_assert(h2t_run_until(&e.loop, closed_status, &e, 10000));
  ck_assert_int_eq(e.last_status, MCP_CODE_UNAVAILABLE);
  ck_assert_str_eq(e.last_details, "keepalive timeout");
  wait_server(&e, 0, 0);
  finish(&e);
}
END_TEST

static int eof(void *ud) {
  fenv *e = ud;
  rc_io(&e->c);
  return e->c.eof;
}

START_TEST(idle_timeout) {
  fenv e;
  setup(&e);
  e.o.idle_timeout_ms = 100;
  start(&e);
  rc_connect(&e.c, e.port, 0);
  uint64_t t0 = uv_hrtime();
  ck_assert(h2t_run_until(&e.loop, eof, &e, 10000));
  ck_assert_uint_ge(uv_hrtime() - t0, 90 * MCP_MILLISECONDS);
  ck_assert(e.c.goaway);
  wait_server(&e, 0, 0);
  finish(&e);
}
END_TEST

START_TEST(too_many_pings) {
  fenv e;
  setup(&e);
  e.o.min_recv_ping_interval_ms = 1000;
  start(&e);
  rc_connect(&e.c, e.port, 0);
  for (int i = 0; i < 5; ++i)
    nghttp2_submit_ping(e.c.h2, NGHTTP2_FLAG_NONE, NULL);
  rc_io(&e.c);
  ck_assert(h2t_run_until(&e.loop, eof, &e, 10000));
  ck_assert(e.c.goaway);
  ck_assert_uint_eq(e.c.goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
  finish(&e);
}
END_TEST

START_TEST(garbage_after_preface) {
  fenv e;
  setup(&e);
  start(&e);
  rc_connect(&e.c, e.port, 0);
  /* A frame header announcing a huge frame of an unknown kind, then junk
   * that is not HTTP/2 at all: the server closes, nothing leaks. */
  static const uint8_t junk[] = {0xff, 0xff, 0xff, 0x01, 0x00, 0,  0,
                                 0,    1,    'j',  'u',  'n',  'k'};
  h2t_buf_add(&e.c.pending, junk, sizeof(junk));
  ck_assert(h2t_run_until(&e.loop, eof, &e, 10000));
  wait_server(&e, 0, 0);
  finish(&e);
}
END_TEST

/* A sink listener holds one session: a newer stream replaces the open
 * one, which ends with ABORTED. */
START_TEST(sink_stream_replaced) {
  fenv e;
  setup(&e);
  mcp_sink_state *state;
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  static const char *const colls[] = {"c1"};
  so.collections = colls;
  so.ncollections = 1;
  ck_assert_int_eq(mcp_sink_state_new(&state, &so), 0);
  mcp_h2c_sink *sink;
  ck_assert_int_eq(mcp_h2c_sink_new(&sink, &e.loop, &e.o, state), 0);
  rc_connect(&e.c, mcp_h2c_sink_port(sink), 0);
  rc_stream *a =
      rc_open(&e.c, "POST", MCP_H2C_RESOURCE_SINK_METHOD, GRPC, 1, NULL, NULL);
  wait_msgs(&e, a, 1); /* the sink's first request */
  rc_stream *b =
      rc_open(&e.c, "POST", MCP_H2C_RESOURCE_SINK_METHOD, GRPC, 1, NULL, NULL);
  wait_msgs(&e, b, 1);
  wait_status(&e, a);
  ck_assert_int_eq(a->grpc_status, 10); /* ABORTED */
  ck_assert_int_eq(b->grpc_status, -1);
  /* The source side answers on b: the sink ACKs. */
  size_t n;
  static const char *const names[] = {"x", NULL};
  uint8_t *p = th_resources(&n, "c1", "1", 0, names, NULL, NULL);
  rc_send_msg(&e.c, b, 0, p, n);
  free(p);
  wait_msgs(&e, b, 2);
  mcp_h2c_sink_del(sink);
  finish(&e);
  ck_assert_uint_eq(mcp_sink_state_count(state, "c1"), 1);
  mcp_sink_state_del(state);
}
END_TEST

Suite *suite(void) {
  Suite *s = suite_create("h2c_framing");
  TCase *t = tcase_create("all");
  tcase_set_timeout(t, 30);
  tcase_add_test(t, message_split_across_frames);
  tcase_add_test(t, many_messages_in_one_frame);
  tcase_add_test(t, large_message_out_in_many_frames);
  tcase_add_test(t, max_message_size);
  tcase_add_test(t, compressed_message_refused);
  tcase_add_test(t, wrong_content_type);
  tcase_add_test(t, unknown_path);
  tcase_add_test(t, missing_te);
  tcase_add_test(t, deadline_exceeded);
  tcase_add_test(t, reset_mid_push);
  tcase_add_test(t, peer_never_reads);
  tcase_add_test(t, abrupt_disconnect_mid_message);
  tcase_add_test(t, half_close_gets_answers);
  tcase_add_test(t, server_shutdown_goaway);
  tcase_add_test(t, client_goaway);
  tcase_add_test(t, keepalive);
  tcase_add_test(t, idle_timeout);
  tcase_add_test(t, too_many_pings);
  tcase_add_test(t, garbage_after_preface);
  tcase_add_test(t, sink_stream_replaced);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN); /* libuv writes with write(2) */
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
