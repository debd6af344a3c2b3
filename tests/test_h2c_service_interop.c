/*
 * h2c services and client against gRPC's C core, an independent HTTP/2
 * and gRPC implementation: a gRPC client calls a protocol served by an
 * h2c listener (unary, and server streaming with a status of the
 * protocol's), and an mcp_h2c_client calls a gRPC server. Our objects run
 * on the test's libuv loop; gRPC's run on a thread of their own, through
 * completion queues.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "h2c_harness.h"
#include "mcp/engine.h"
#include "mcp/h2c.h"

#define COUNTER_PATH "/test.Counter/Watch"
#define ECHO_PATH "/test.Echo/Call"

/* ------------------------------------------------------------------ */
/* A small protocol (as in test_h2c_service.c)                         */
/* ------------------------------------------------------------------ */

static atomic_int ticks;
static atomic_int end_status = -1;
static int dels;

static int make_msg(const void *p, size_t n, mcp_msg **pmsg) {
  mcp_msg_builder *b;
  int rv = mcp_msg_builder_new(&b, NULL);
  if (rv < 0)
    return rv;
  mcp_msg_builder_bytes(b, p, n);
  rv = mcp_msg_builder_finish(b, NULL, pmsg);
  mcp_msg_builder_del(b);
  return rv < 0 ? rv : 1;
}

typedef struct sess {
  int counter;
  int got;
  int next;
  char buf[64];
  size_t len;
} sess;

static mcp_stream *counter_st;

static int s_recv(void *p, const uint8_t *in, size_t len, mcp_tstamp ts) {
  (void)ts;
  sess *s = p;
  if (len > sizeof(s->buf))
    return MCP_ERR_MALFORMED;
  memcpy(s->buf, in, len);
  s->len = len;
  s->got = 1;
  return 0;
}

static int s_next(void *p, mcp_tstamp ts, mcp_msg **pmsg) {
  (void)ts;
  sess *s = p;
  if (!s->got)
    return 0;
  if (!s->counter) {
    s->got = 0;
    return make_msg(s->buf, s->len, pmsg);
  }
  if (s->next > atomic_load(&ticks))
    return 0;
  char b[16];
  int n = snprintf(b, sizeof(b), "%d", s->next++);
  return make_msg(b, (size_t)n, pmsg);
}

static int s_end(const void *p, int *status, const char **details) {
  const sess *s = p;
  if (!s->counter || atomic_load(&end_status) < 0)
    return 0;
  *status = atomic_load(&end_status);
  *details = "counter done";
  return 1;
}

static void s_del(void *p) {
  sess *s = p;
  if (s->counter)
    counter_st = NULL;
  dels++;
  free(s);
}

static const mcp_stream_ops echo_ops = {
    .name = "echo", .recv = s_recv, .next = s_next, .del = s_del};
static const mcp_stream_ops counter_ops = {
    .name = "counter",
    .flags = MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE,
    .recv = s_recv,
    .next = s_next,
    .end = s_end,
    .del = s_del};

static int open_sess(void *ud, const mcp_peer_info *peer, mcp_tstamp ts,
                     mcp_stream **pst) {
  (void)peer;
  sess *s = calloc(1, sizeof(*s));
  ck_assert_ptr_nonnull(s);
  s->counter = ud != NULL;
  int rv = mcp_stream_new(pst, s->counter ? &counter_ops : &echo_ops, s,
                          NULL, ts);
  if (rv == 0 && s->counter)
    counter_st = *pst;
  return rv;
}

/* ------------------------------------------------------------------ */
/* A gRPC client on a thread                                           */
/* ------------------------------------------------------------------ */

typedef struct gcall {
  char target[64];
  const char *method;
  const char *request;
  atomic_int nmsgs;
  char msgs[8][64];
  int status;
  char details[128];
  atomic_int done;
} gcall;

static void *tag(intptr_t t) { return (void *)t; }

static void pluck(grpc_completion_queue *cq, intptr_t t) {
  grpc_event ev = grpc_completion_queue_pluck(
      cq, tag(t), gpr_time_from_seconds(20, GPR_TIMESPAN), NULL);
  ck_assert_int_eq(ev.type, GRPC_OP_COMPLETE);
}

static void read_bb(grpc_byte_buffer *bb, char *out, size_t cap) {
  grpc_byte_buffer_reader r;
  ck_assert(grpc_byte_buffer_reader_init(&r, bb));
  grpc_slice s = grpc_byte_buffer_reader_readall(&r);
  size_t n = GRPC_SLICE_LENGTH(s);
  if (n >= cap)
    n = cap - 1;
  memcpy(out, GRPC_SLICE_START_PTR(s), n);
  out[n] = '\0';
  grpc_slice_unref(s);
  grpc_byte_buffer_reader_destroy(&r);
}

static void *client_thread(void *arg) {
  gcall *g = arg;
  grpc_channel_credentials *cr = grpc_insecure_credentials_create();
  grpc_channel *ch = grpc_channel_create(g->target, cr, NULL);
  grpc_channel_credentials_release(cr);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_slice method = grpc_slice_from_static_string(g->method);
  gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                       gpr_time_from_seconds(20, GPR_TIMESPAN));
  grpc_call *call = grpc_channel_create_call(
      ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method, NULL, deadline, NULL);
  grpc_metadata_array md, trailing;
  grpc_metadata_array_init(&md);
  grpc_metadata_array_init(&trailing);
  grpc_slice req = grpc_slice_from_copied_string(g->request);
  grpc_byte_buffer *rbb = grpc_raw_byte_buffer_create(&req, 1);
  grpc_op ops[4];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = rbb;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &md;
  ck_assert_int_eq(grpc_call_start_batch(call, ops, 4, tag(1), NULL),
                   GRPC_CALL_OK);
  pluck(cq, 1);
  for (;;) {
    grpc_byte_buffer *bb = NULL;
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_RECV_MESSAGE;
    ops[0].data.recv_message.recv_message = &bb;
    ck_assert_int_eq(grpc_call_start_batch(call, ops, 1, tag(2), NULL),
                     GRPC_CALL_OK);
    pluck(cq, 2);
    if (!bb)
      break;
    int i = atomic_load(&g->nmsgs);
    if (i < 8)
      read_bb(bb, g->msgs[i], sizeof(g->msgs[i]));
    grpc_byte_buffer_destroy(bb);
    atomic_store(&g->nmsgs, i + 1);
  }
  grpc_status_code status;
  grpc_slice details;
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[0].data.recv_status_on_client.trailing_metadata = &trailing;
  ops[0].data.recv_status_on_client.status = &status;
  ops[0].data.recv_status_on_client.status_details = &details;
  ck_assert_int_eq(grpc_call_start_batch(call, ops, 1, tag(3), NULL),
                   GRPC_CALL_OK);
  pluck(cq, 3);
  g->status = (int)status;
  snprintf(g->details, sizeof(g->details), "%.*s",
           (int)GRPC_SLICE_LENGTH(details),
           (const char *)GRPC_SLICE_START_PTR(details));
  grpc_slice_unref(details);
  grpc_byte_buffer_destroy(rbb);
  grpc_slice_unref(req);
  grpc_metadata_array_destroy(&md);
  grpc_metadata_array_destroy(&trailing);
  grpc_call_unref(call);
  grpc_channel_destroy(ch);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_pluck(cq, NULL,
                                     gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
             .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(cq);
  atomic_store(&g->done, 1);
  return NULL;
}

static int call_done(void *ud) { return atomic_load(&((gcall *)ud)->done); }

typedef struct nwait {
  gcall *g;
  int n;
} nwait;

static int has_n(void *ud) {
  nwait *w = ud;
  return atomic_load(&w->g->nmsgs) >= w->n;
}

START_TEST(grpc_client_calls_service) {
  uv_loop_t loop;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  mcp_service_def defs[2] = {{ECHO_PATH, open_sess, NULL, 0},
                             {COUNTER_PATH, open_sess, &loop, 0}};
  mcp_h2c_options o;
  mcp_h2c_options_default(&o);
  o.address = "127.0.0.1:0";
  o.services = defs;
  o.nservices = 2;
  o.no_mcp = 1;
  o.shutdown_grace = MCP_SECONDS;
  mcp_h2c_source *src;
  ck_assert_int_eq(mcp_h2c_source_new(&src, &loop, &o, NULL), 0);
  dels = 0;

  gcall *g = calloc(1, sizeof(*g));
  snprintf(g->target, sizeof(g->target), "127.0.0.1:%d",
           mcp_h2c_source_port(src));
  g->method = ECHO_PATH;
  g->request = "hello grpc";
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, client_thread, g), 0);
  ck_assert(h2t_run_until(&loop, call_done, g, 20000));
  pthread_join(t, NULL);
  ck_assert_int_eq(g->status, 0);
  ck_assert_int_eq(atomic_load(&g->nmsgs), 1);
  ck_assert_str_eq(g->msgs[0], "hello grpc");
  ck_assert_int_eq(dels, 1);

  /* Server streaming, kept open after gRPC's half-close; the protocol's
   * own status ends it. */
  memset(g, 0, sizeof(*g));
  snprintf(g->target, sizeof(g->target), "127.0.0.1:%d",
           mcp_h2c_source_port(src));
  g->method = COUNTER_PATH;
  g->request = "go";
  atomic_store(&ticks, 0);
  atomic_store(&end_status, -1);
  ck_assert_int_eq(pthread_create(&t, NULL, client_thread, g), 0);
  nwait w = {g, 1};
  ck_assert(h2t_run_until(&loop, has_n, &w, 20000));
  h2t_run_for(&loop, 50);
  ck_assert_int_eq(atomic_load(&g->nmsgs), 1);
  atomic_store(&ticks, 2);
  ck_assert_ptr_nonnull(counter_st);
  mcp_stream_wake(counter_st);
  w.n = 3;
  ck_assert(h2t_run_until(&loop, has_n, &w, 20000));
  atomic_store(&end_status, 9);
  mcp_stream_wake(counter_st);
  ck_assert(h2t_run_until(&loop, call_done, g, 20000));
  pthread_join(t, NULL);
  ck_assert_int_eq(g->status, 9);
  ck_assert_str_eq(g->details, "counter done");
  ck_assert_int_eq(atomic_load(&g->nmsgs), 3);
  ck_assert_str_eq(g->msgs[2], "2");
  ck_assert_int_eq(dels, 2);
  free(g);
  mcp_h2c_source_del(src);
  h2t_loop_finish(&loop);
}
END_TEST

/* ------------------------------------------------------------------ */
/* An mcp_h2c_client against a gRPC server                             */
/* ------------------------------------------------------------------ */

typedef struct gserver {
  grpc_server *server;
  grpc_completion_queue *cq;
  int port;
  atomic_int served;
} gserver;

/* Serves |n| calls: each answers its one message twice, then a status
 * whose code is the message's first byte minus '0', details "done". */
static void *server_thread(void *arg) {
  gserver *gs = arg;
  for (;;) {
    grpc_call *call = NULL;
    grpc_call_details cd;
    grpc_metadata_array md;
    grpc_call_details_init(&cd);
    grpc_metadata_array_init(&md);
    if (grpc_server_request_call(gs->server, &call, &cd, &md, gs->cq, gs->cq,
                                 tag(100)) != GRPC_CALL_OK)
      break;
    grpc_event ev;
    do /* the shutdown's notification may come first */
      ev = grpc_completion_queue_next(gs->cq,
                                      gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    while (ev.type == GRPC_OP_COMPLETE && ev.tag != tag(100));
    if (ev.type != GRPC_OP_COMPLETE || !ev.success) {
      grpc_call_details_destroy(&cd);
      grpc_metadata_array_destroy(&md);
      break; /* shutting down */
    }
    grpc_byte_buffer *in = NULL;
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_RECV_MESSAGE;
    ops[1].data.recv_message.recv_message = &in;
    grpc_call_start_batch(call, ops, 2, tag(101), NULL);
    grpc_completion_queue_next(gs->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                               NULL);
    char buf[64] = "";
    if (in) {
      read_bb(in, buf, sizeof(buf));
      grpc_byte_buffer_destroy(in);
    }
    grpc_slice s = grpc_slice_from_copied_string(buf);
    grpc_byte_buffer *out = grpc_raw_byte_buffer_create(&s, 1);
    int cancelled = 0;
    grpc_slice details = grpc_slice_from_static_string("done");
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_MESSAGE;
    ops[0].data.send_message.send_message = out;
    grpc_call_start_batch(call, ops, 1, tag(102), NULL);
    grpc_completion_queue_next(gs->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                               NULL);
    /* A byte buffer is consumed by its send: a new one for the second. */
    grpc_byte_buffer *out2 = grpc_raw_byte_buffer_create(&s, 1);
    ops[0].data.send_message.send_message = out2;
    grpc_call_start_batch(call, ops, 1, tag(103), NULL);
    grpc_completion_queue_next(gs->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                               NULL);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[0].data.recv_close_on_server.cancelled = &cancelled;
    ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[1].data.send_status_from_server.status =
        (grpc_status_code)(buf[0] >= '0' && buf[0] <= '9' ? buf[0] - '0' : 2);
    ops[1].data.send_status_from_server.status_details = &details;
    grpc_call_start_batch(call, ops, 2, tag(104), NULL);
    grpc_completion_queue_next(gs->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                               NULL);
    grpc_byte_buffer_destroy(out);
    grpc_byte_buffer_destroy(out2);
    grpc_slice_unref(s);
    grpc_call_unref(call);
    grpc_call_details_destroy(&cd);
    grpc_metadata_array_destroy(&md);
    atomic_fetch_add(&gs->served, 1);
  }
  return NULL;
}

typedef struct cenv {
  int want;
  int opens, recv, ended, status;
  char details[64], last[64];
  const char *request;
} cenv;

typedef struct csess {
  cenv *e;
  int sent;
} csess;

static int c_recv(void *p, const uint8_t *in, size_t len, mcp_tstamp ts) {
  (void)ts;
  csess *s = p;
  s->e->recv++;
  snprintf(s->e->last, sizeof(s->e->last), "%.*s", (int)len,
           (const char *)in);
  return 0;
}

static int c_next(void *p, mcp_tstamp ts, mcp_msg **pmsg) {
  (void)ts;
  csess *s = p;
  if (s->sent)
    return 0;
  s->sent = 1;
  return make_msg(s->e->request, strlen(s->e->request), pmsg);
}

static void c_del(void *p) { free(p); }

static const mcp_stream_ops c_ops = {
    .name = "grpc-peer",
    .flags = MCP_STREAM_CLIENT_HALF_CLOSE_AFTER_FIRST,
    .recv = c_recv,
    .next = c_next,
    .del = c_del};

static const char *c_method(void *ud, size_t slot) {
  (void)ud;
  (void)slot;
  return ECHO_PATH;
}

static int c_open(void *ud, size_t slot, mcp_tstamp ts, mcp_stream **pst) {
  (void)slot;
  cenv *e = ud;
  if (e->want <= 0)
    return 0;
  e->want--;
  csess *s = calloc(1, sizeof(*s));
  s->e = e;
  e->opens++;
  ck_assert_int_eq(mcp_stream_new(pst, &c_ops, s, NULL, ts), 0);
  return 1;
}

static void c_ended(void *ud, size_t slot, int status, const char *details,
                    mcp_tstamp ts) {
  (void)slot;
  (void)ts;
  cenv *e = ud;
  e->ended++;
  e->status = status;
  snprintf(e->details, sizeof(e->details), "%s", details);
}

static int c_done(void *ud) { return ((cenv *)ud)->ended >= 1; }

START_TEST(client_calls_grpc_server) {
  gserver gs;
  memset(&gs, 0, sizeof(gs));
  gs.cq = grpc_completion_queue_create_for_next(NULL);
  gs.server = grpc_server_create(NULL, NULL);
  grpc_server_register_completion_queue(gs.server, gs.cq, NULL);
  grpc_server_credentials *sc = grpc_insecure_server_credentials_create();
  gs.port = grpc_server_add_http2_port(gs.server, "127.0.0.1:0", sc);
  grpc_server_credentials_release(sc);
  ck_assert_int_gt(gs.port, 0);
  grpc_server_start(gs.server);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, server_thread, &gs), 0);

  uv_loop_t loop;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  cenv e;
  memset(&e, 0, sizeof(e));
  e.want = 1;
  e.request = "0 hello";
  mcp_client_def def = {.nslots = 1,
                        .method = c_method,
                        .open = c_open,
                        .ended = c_ended,
                        .user_data = &e};
  mcp_h2c_options o;
  mcp_h2c_options_default(&o);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", gs.port);
  o.address = addr;
  o.shutdown_grace = MCP_SECONDS;
  mcp_h2c_client *cli;
  ck_assert_int_eq(mcp_h2c_client_new(&cli, &loop, &o, &def), 0);
  ck_assert(h2t_run_until(&loop, c_done, &e, 20000));
  ck_assert_int_eq(e.status, 0);
  ck_assert_str_eq(e.details, "done");
  ck_assert_int_eq(e.recv, 2);
  ck_assert_str_eq(e.last, "0 hello");

  /* A status of the server's own. */
  e.ended = 0;
  e.want = 1;
  e.request = "7 denied";
  mcp_h2c_client_notify(cli);
  ck_assert(h2t_run_until(&loop, c_done, &e, 20000));
  ck_assert_int_eq(e.status, 7);
  ck_assert_str_eq(e.details, "done");

  mcp_h2c_client_del(cli);
  h2t_loop_finish(&loop);
  grpc_server_shutdown_and_notify(gs.server, gs.cq, tag(999));
  grpc_server_cancel_all_calls(gs.server);
  pthread_join(t, NULL);
  /* Drain what is left, shutdown notification included. */
  grpc_completion_queue_shutdown(gs.cq);
  while (grpc_completion_queue_next(gs.cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL)
             .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_server_destroy(gs.server);
  grpc_completion_queue_destroy(gs.cq);
}
END_TEST

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  grpc_init();
  Suite *s = suite_create("h2c_service_interop");
  TCase *tc = tcase_create("grpc");
  tcase_set_timeout(tc, 90);
  tcase_add_test(tc, grpc_client_calls_service);
  tcase_add_test(tc, client_calls_grpc_server);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  /* gRPC's threads do not survive a fork: run in this process. */
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  grpc_shutdown();
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
