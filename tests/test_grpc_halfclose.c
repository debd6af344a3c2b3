/*
 * A client that half-closes its side of a stream still gets the answers to
 * what it sent, then status OK (as with h2c): the server stops reading but
 * sends what the session has, and only then ends the stream.
 *
 * The client is gRPC's C core driven by hand, so that the request and the
 * half-close go out in the same batch (as curl or h2load send them: one
 * body, END_STREAM on its last DATA frame).
 */
#include "test_grpc_util.h"

#include <grpc/byte_buffer_reader.h>

/* ---- protobuf by hand (independent of the core's encoder) ---- */

typedef struct hc_buf {
  uint8_t p[512];
  size_t len;
} hc_buf;

static void hc_varint(hc_buf *b, uint64_t v) {
  do {
    ck_assert_uint_lt(b->len, sizeof(b->p));
    uint8_t c = v & 0x7f;
    v >>= 7;
    b->p[b->len++] = c | (v ? 0x80 : 0);
  } while (v);
}

static void hc_bytes(hc_buf *b, unsigned field, const void *p, size_t n) {
  hc_varint(b, (uint64_t)field << 3 | 2);
  hc_varint(b, n);
  ck_assert_uint_le(b->len + n, sizeof(b->p));
  memcpy(b->p + b->len, p, n);
  b->len += n;
}

/* RequestResources{sink_node{id}, collection}: a first request. */
static void hc_request(hc_buf *b, const char *coll) {
  hc_buf node = {.len = 0};
  hc_bytes(&node, 1, "halfclose-client", strlen("halfclose-client"));
  b->len = 0;
  hc_bytes(b, 1, node.p, node.len);
  hc_bytes(b, 2, coll, strlen(coll));
}

static int hc_read_varint(const uint8_t **p, const uint8_t *end,
                          uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t c = *(*p)++;
    *v |= (uint64_t)(c & 0x7f) << shift;
    if (!(c & 0x80))
      return 0;
  }
  return -1;
}

/* The top level of a Resources message: its collection and how many
 * resources it carries. 0, or -1 when it does not parse. */
static int hc_parse_resources(const uint8_t *p, size_t len, char *coll,
                              size_t clen, int *nres) {
  const uint8_t *end = p + len;
  *nres = 0;
  coll[0] = 0;
  while (p < end) {
    uint64_t key, v;
    if (hc_read_varint(&p, end, &key) < 0)
      return -1;
    switch (key & 7) {
    case 0:
      if (hc_read_varint(&p, end, &v) < 0)
        return -1;
      break;
    case 1:
      if (end - p < 8)
        return -1;
      p += 8;
      break;
    case 5:
      if (end - p < 4)
        return -1;
      p += 4;
      break;
    case 2:
      if (hc_read_varint(&p, end, &v) < 0 || v > (uint64_t)(end - p))
        return -1;
      if (key >> 3 == 2)
        snprintf(coll, clen, "%.*s", (int)v, (const char *)p);
      else if (key >> 3 == 3)
        (*nres)++;
      p += v;
      break;
    default:
      return -1;
    }
  }
  return 0;
}

/* ---- the raw client ---- */

#define HC_MAXC 8

typedef struct hc_result {
  int status; /* -1: no status within the time */
  char details[160];
  int messages;            /* Resources received */
  long bytes;              /* their total size */
  int nres[HC_MAXC];       /* resources in the first answer per collection */
  int answers[HC_MAXC];    /* answers per collection */
} hc_result;

static grpc_event hc_next(grpc_completion_queue *cq, gpr_timespec dl) {
  return grpc_completion_queue_next(cq, dl, NULL);
}

/* Waits for the completion of |tag|; other tags must not complete. */
static void hc_wait_tag(grpc_completion_queue *cq, gpr_timespec dl,
                        void *tag, int *ok) {
  grpc_event ev = hc_next(cq, dl);
  ck_assert_int_eq(ev.type, GRPC_OP_COMPLETE);
  ck_assert_ptr_eq(ev.tag, tag);
  *ok = ev.success;
}

/*
 * Opens a ResourceSource stream on 127.0.0.1:|port|, sends one first
 * request per collection of |colls| (the last one together with the
 * half-close, in one batch), then reads every message until the server
 * ends the call, and its status.
 */
static void hc_call(int port, const char *const *colls, int ncolls,
                    hc_result *r) {
  memset(r, 0, sizeof(*r));
  r->status = -1;
  grpc_init();
  char target[64];
  snprintf(target, sizeof(target), "127.0.0.1:%d", port);
  grpc_channel_credentials *cr = grpc_insecure_credentials_create();
  grpc_arg arg;
  arg.type = GRPC_ARG_INTEGER;
  arg.key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  arg.value.integer = -1;
  grpc_channel_args args = {1, &arg};
  grpc_channel *ch = grpc_channel_create(target, cr, &args);
  grpc_channel_credentials_release(cr);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  gpr_timespec dl = gpr_time_add(
      gpr_now(GPR_CLOCK_MONOTONIC),
      gpr_time_from_millis(2 * TG_TIMEOUT_MS, GPR_TIMESPAN));
  grpc_call *call = grpc_channel_create_call(
      ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
      grpc_slice_from_static_string(MCP_GRPC_RESOURCE_SOURCE_METHOD), NULL,
      dl, NULL);
  grpc_metadata_array im, tm;
  grpc_metadata_array_init(&im);
  grpc_metadata_array_init(&tm);
  grpc_status_code status = GRPC_STATUS_OK;
  grpc_slice det = grpc_empty_slice();
  grpc_op ops[4];
  int ok;

  for (int i = 0; i < ncolls; i++) {
    hc_buf req;
    hc_request(&req, colls[i]);
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)req.p,
                                                 req.len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    if (i == 0)
      ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = bb;
    if (i == ncolls - 1)
      ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT; /* same batch */
    ck_assert_int_eq(grpc_call_start_batch(call, ops, n, (void *)1, NULL),
                     GRPC_CALL_OK);
    hc_wait_tag(cq, dl, (void *)1, &ok);
    ck_assert(ok);
    grpc_byte_buffer_destroy(bb);
  }

  /* Read everything; then the status (the call is over by then). */
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[0].data.recv_initial_metadata.recv_initial_metadata = &im;
  ck_assert_int_eq(grpc_call_start_batch(call, ops, 1, (void *)2, NULL),
                   GRPC_CALL_OK);
  hc_wait_tag(cq, dl, (void *)2, &ok);
  for (;;) {
    grpc_byte_buffer *in = NULL;
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_RECV_MESSAGE;
    ops[0].data.recv_message.recv_message = &in;
    ck_assert_int_eq(grpc_call_start_batch(call, ops, 1, (void *)3, NULL),
                     GRPC_CALL_OK);
    hc_wait_tag(cq, dl, (void *)3, &ok);
    if (!ok || !in)
      break;
    grpc_byte_buffer_reader rd;
    ck_assert(grpc_byte_buffer_reader_init(&rd, in));
    grpc_slice flat = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    char coll[64];
    int nres;
    ck_assert_int_eq(hc_parse_resources(GRPC_SLICE_START_PTR(flat),
                                        GRPC_SLICE_LENGTH(flat), coll,
                                        sizeof(coll), &nres),
                     0);
    r->messages++;
    r->bytes += (long)GRPC_SLICE_LENGTH(flat);
    for (int i = 0; i < ncolls; i++)
      if (strcmp(coll, colls[i]) == 0) {
        if (r->answers[i]++ == 0)
          r->nres[i] = nres;
      }
    grpc_slice_unref(flat);
    grpc_byte_buffer_destroy(in);
  }
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[0].data.recv_status_on_client.trailing_metadata = &tm;
  ops[0].data.recv_status_on_client.status = &status;
  ops[0].data.recv_status_on_client.status_details = &det;
  ck_assert_int_eq(grpc_call_start_batch(call, ops, 1, (void *)4, NULL),
                   GRPC_CALL_OK);
  grpc_event ev = hc_next(cq, gpr_time_add(dl, gpr_time_from_millis(
                                                   1000, GPR_TIMESPAN)));
  if (ev.type == GRPC_OP_COMPLETE) {
    ck_assert_ptr_eq(ev.tag, (void *)4);
    r->status = (int)status;
  }
  char *d = grpc_slice_to_c_string(det);
  snprintf(r->details, sizeof(r->details), "%s", d);
  gpr_free(d);
  grpc_slice_unref(det);
  grpc_metadata_array_destroy(&im);
  grpc_metadata_array_destroy(&tm);
  if (r->status < 0)
    grpc_call_cancel(call, NULL);
  grpc_call_unref(call);
  grpc_channel_destroy(ch);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL)
             .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(cq);
  grpc_shutdown();
}

/* ---- the server under test ---- */

typedef struct hc_server {
  mcp_store *store;
  tg_streams obs;
  mcp_grpc_source *src;
  int port;
} hc_server;

static void hc_server_start(hc_server *h) {
  tg_streams_init(&h->obs);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &h->obs);
  tg_source_opts(&sopts, h->store);
  ck_assert_int_eq(mcp_grpc_source_new(&h->src, &o, &sopts), 0);
  h->port = mcp_grpc_source_port(h->src);
}

static int hc_all_closed(void *ud) {
  tg_streams s = tg_streams_get(ud);
  return s.opened > 0 && s.closed == s.opened;
}

static void hc_server_stop(hc_server *h, int streams) {
  /* The server saw each stream end with the OK it sent. */
  ck_assert(tg_wait(hc_all_closed, &h->obs, TG_TIMEOUT_MS));
  tg_streams s = tg_streams_get(&h->obs);
  ck_assert_int_eq(s.opened, streams);
  ck_assert_int_eq(s.last_status, GRPC_STATUS_OK);
  mcp_grpc_source_del(h->src);
  mcp_store_del(h->store);
}

static const char *const one[] = {"c1"};

START_TEST(test_one_request_and_halfclose_get_full_state) {
  hc_server h;
  h.store = tg_store();
  mcp_tstamp ts = mcp_grpc_now();
  char name[32];
  for (int i = 0; i < 12; i++) {
    snprintf(name, sizeof(name), "r%02d", i);
    tg_put_big(h.store, "c1", name, 64 * 1024, ts);
  }
  hc_server_start(&h);
  /* Many times: the answer used to be lost when the half-close was read
   * before the session's answer was handed to gRPC. */
  for (int round = 0; round < 20; round++) {
    hc_result r;
    hc_call(h.port, one, 1, &r);
    ck_assert_int_eq(r.status, GRPC_STATUS_OK);
    ck_assert_str_eq(r.details, "");
    ck_assert_int_eq(r.messages, 1);
    ck_assert_int_eq(r.answers[0], 1);
    ck_assert_int_eq(r.nres[0], 12);
    ck_assert_int_gt(r.bytes, 12 * 64 * 1024);
  }
  hc_server_stop(&h, 20);
}
END_TEST

START_TEST(test_several_requests_and_halfclose_get_every_answer) {
  static const char *const colls[] = {"c1", "c2", "c3", "c4", "c5", "c6"};
  const int ncolls = 6;
  hc_server h;
  h.store = tg_store();
  mcp_tstamp ts = mcp_grpc_now();
  char name[32];
  for (int c = 0; c < ncolls; c++)
    for (int i = 0; i <= c; i++) {
      snprintf(name, sizeof(name), "r%d", i);
      tg_put_big(h.store, colls[c], name, 256 * 1024, ts);
    }
  hc_server_start(&h);
  for (int round = 0; round < 5; round++) {
    hc_result r;
    hc_call(h.port, colls, ncolls, &r);
    ck_assert_int_eq(r.status, GRPC_STATUS_OK);
    ck_assert_int_eq(r.messages, ncolls);
    for (int c = 0; c < ncolls; c++) {
      ck_assert_int_eq(r.answers[c], 1);
      ck_assert_int_eq(r.nres[c], c + 1);
    }
  }
  hc_server_stop(&h, 5);
}
END_TEST

/* A store that keeps changing does not hold a half-closed stream open: the
 * answers go out, a push waiting for an ACK that never comes is not
 * waited for, and the stream ends with OK. */
typedef struct hc_churn {
  mcp_grpc_source *src;
  _Atomic int stop;
  int n; /* transport thread only */
} hc_churn;

static void hc_bump(mcp_store *st, mcp_tstamp ts, void *ud) {
  hc_churn *c = ud;
  char body[32];
  snprintf(body, sizeof(body), "v%d", ++c->n);
  tg_put(st, "c1", "hot", body, ts);
}

static void *hc_churn_main(void *ud) {
  hc_churn *c = ud;
  while (!c->stop) {
    mcp_grpc_source_update(c->src, hc_bump, c);
    tg_sleep_ms(1);
  }
  return NULL;
}

START_TEST(test_halfclosed_stream_ends_while_store_changes) {
  hc_server h;
  h.store = tg_store();
  mcp_tstamp ts = mcp_grpc_now();
  for (int i = 0; i < 4; i++) {
    char name[16];
    snprintf(name, sizeof(name), "r%d", i);
    tg_put(h.store, "c1", name, "body", ts);
  }
  hc_server_start(&h);
  hc_churn c = {h.src, 0, 0};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, hc_churn_main, &c), 0);
  for (int round = 0; round < 10; round++) {
    hc_result r;
    hc_call(h.port, one, 1, &r);
    ck_assert_int_eq(r.status, GRPC_STATUS_OK);
    ck_assert_int_ge(r.answers[0], 1);
    ck_assert_int_ge(r.nres[0], 4);
  }
  c.stop = 1;
  pthread_join(th, NULL);
  hc_server_stop(&h, 10);
}
END_TEST

/* ---- the dialing sink half-closes: mcp_grpc_sink_finish() ---- */

static const char *const two[] = {"c1", "c2"};

static int source_acked_both(void *ud) {
  (void)ud;
  return tg_events_get().acks >= 2;
}

static int both_closed(void *ud) {
  tg_streams *s = ud;
  tg_streams a = tg_streams_get(&s[0]), b = tg_streams_get(&s[1]);
  return a.closed == 1 && b.closed == 1;
}

/* mcp_grpc_sink_finish() after the sync: both ends close (|closed| says
 * when), each with OK, after the source read both ACKs and no NACK. */
static void finish_ends_both_ok(mcp_grpc_sink *sink, tg_streams *obs,
                                int (*closed)(void *)) {
  ck_assert_int_eq(mcp_grpc_sink_finish(sink), 0);
  ck_assert(tg_wait(closed, obs, TG_TIMEOUT_MS));
  tg_streams a = tg_streams_get(&obs[0]), b = tg_streams_get(&obs[1]);
  ck_assert_int_eq(a.last_status, GRPC_STATUS_OK);
  ck_assert_int_eq(b.last_status, GRPC_STATUS_OK);
  tg_events e = tg_events_get();
  ck_assert_int_eq(e.acks, 2);
  ck_assert_int_eq(e.nacks, 0);
}

static void read_now(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  (void)st;
  *(mcp_tstamp *)ud = ts;
}

/* Returns once the transport thread of |sink| has run a turn of its loop
 * (its timers: a redial would start there) with its clock at |t| or
 * later. Its jobs run with the clock of their turn, before the next
 * turn's timers: so a job that sees |t|, then one more. */
static void sink_ran_past(mcp_grpc_sink *sink, mcp_tstamp t) {
  mcp_tstamp now = 0, end = mcp_grpc_now() + 30 * MCP_SECONDS;
  for (;;) {
    ck_assert_int_eq(mcp_grpc_sink_call(sink, read_now, &now), 0);
    if (now >= t)
      break;
    ck_assert_msg(mcp_grpc_now() < end, "transport clock stuck");
    tg_sleep_ms(5);
  }
  ck_assert_int_eq(mcp_grpc_sink_call(sink, read_now, &now), 0);
}

/* The finish tests' store ("c1" with "a", "c2" empty) and observers. */
static mcp_store *finish_world(tg_streams obs[2]) {
  mcp_store *store = tg_store();
  tg_put(store, "c1", "a", "alpha", mcp_grpc_now());
  ck_assert_int_eq(mcp_store_add_collection(store, "c2"), 0);
  tg_streams_init(&obs[0]);
  tg_streams_init(&obs[1]);
  return store;
}

/* The sink says it is done after the sync: its ACKs reach the source,
 * which ends the stream with OK on both sides, and no new stream is
 * dialed (a cancel would have ended it CANCELLED, perhaps before the last
 * ACK was read). */
START_TEST(test_sink_finish_half_closes_and_the_source_ends_ok) {
  tg_streams obs[2]; /* the source's, the sink's */
  mcp_store *store = finish_world(obs);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &obs[0]);
  tg_source_opts(&sopts, store);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  mcp_sink_state *state = tg_sink_state(two, 2, 0);
  char addr[64];
  tg_dial_opts(&o, addr, sizeof(addr), mcp_grpc_source_port(src), &obs[1]);
  mcp_grpc_sink *sink = NULL;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), 0);
  ck_assert(tg_wait(source_acked_both, NULL, TG_TIMEOUT_MS));

  finish_ends_both_ok(sink, obs, both_closed);
  ck_assert_int_eq(tg_events_get().sink_acks, 2);
  /* Ten backoff delays later by the transport's own clock (which a busy
   * machine cannot shorten), and with its timers run since: still one
   * stream. */
  sink_ran_past(sink, mcp_grpc_now() + 10 * 20 * MCP_MILLISECONDS);
  mcp_grpc_stats st;
  ck_assert_int_eq(mcp_grpc_sink_stats(sink, &st), 0);
  ck_assert_uint_eq(st.opened, 1);
  ck_assert_int_eq(tg_streams_get(&obs[1]).opened, 1);
  ck_assert_int_eq(tg_streams_get(&obs[0]).opened, 1);
  mcp_grpc_sink_del(sink);
  mcp_grpc_source_del(src);
  mcp_sink_state_del(state);
  mcp_store_del(store);
}
END_TEST

static int both_closed_once(void *ud) {
  tg_streams *s = ud;
  return tg_streams_get(&s[0]).closed >= 1 && tg_streams_get(&s[1]).closed >= 1;
}

/* Issue 21: a listening sink that is done (mcp-sink --exit-after-sync)
 * ends its stream with OK once its answers are out: the source has read
 * both ACKs before the end, and the end is an event (CLOSED), not a poll
 * of what was sent. */
START_TEST(test_listening_sink_finish_ends_ok_after_its_answers) {
  tg_streams obs[2]; /* the source's, the sink's */
  mcp_store *store = finish_world(obs);
  mcp_grpc_options o;
  tg_listen_opts(&o, "127.0.0.1:0", &obs[1]);
  mcp_sink_state *state = tg_sink_state(two, 2, 0);
  mcp_grpc_sink *sink = NULL;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), 0);
  mcp_source_options sopts;
  tg_source_opts(&sopts, store);
  char addr[64];
  tg_dial_opts(&o, addr, sizeof(addr), mcp_grpc_sink_port(sink), &obs[0]);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  ck_assert(tg_wait(source_acked_both, NULL, TG_TIMEOUT_MS));

  finish_ends_both_ok(sink, obs, both_closed_once);
  mcp_grpc_source_del(src);
  mcp_grpc_sink_del(sink);
  mcp_sink_state_del(state);
  mcp_store_del(store);
}
END_TEST

int main(void) {
  Suite *s = suite_create("grpc_halfclose");
  TCase *tc = tcase_create("halfclose");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, tg_reset, NULL);
  tcase_add_test(tc, test_one_request_and_halfclose_get_full_state);
  tcase_add_test(tc, test_several_requests_and_halfclose_get_every_answer);
  tcase_add_test(tc, test_halfclosed_stream_ends_while_store_changes);
  tcase_add_test(tc, test_sink_finish_half_closes_and_the_source_ends_ok);
  tcase_add_test(tc, test_listening_sink_finish_ends_ok_after_its_answers);
  suite_add_tcase(s, tc);
  return tg_run(s);
}
