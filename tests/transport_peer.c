/*
 * The transport suite's raw peer: one gRPC-core client call, driven
 * without blocking (tests/transport_peer.h).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "test_certs.h" /* test_tls_mode() */
#include "transport_peer.h"

#define T_STATUS ((void *)1)
#define T_RECV ((void *)2)
#define T_SEND ((void *)3)

#define TP_MAX_MSGS 256
#define TP_MAX_SENDS 16

typedef struct tp_send_q {
  grpc_byte_buffer *bb; /* NULL: the half-close alone */
  int close;
} tp_send_q;

struct tp_call {
  grpc_channel *ch;
  grpc_completion_queue *cq;
  grpc_call *call;
  grpc_metadata_array im, tm;
  grpc_status_code status;
  grpc_slice det;
  grpc_byte_buffer *rbb, *sbb;
  int status_done, recv_busy, send_busy, got_im, ended;
  char details[256];
  char *msgs[TP_MAX_MSGS];
  size_t lens[TP_MAX_MSGS];
  int nmsgs;
  tp_send_q q[TP_MAX_SENDS];
  int qhead, qlen;
};

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot read %s", path);
  static char buf[16384];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  char *s = malloc(n + 1);
  ck_assert_ptr_nonnull(s);
  memcpy(s, buf, n);
  s[n] = '\0';
  return s;
}

/* Mutual TLS as the suite's other clients (tests/transport_suite.c:
 * client.pem, verified against ca.pem; the server's SAN has 127.0.0.1). */
static grpc_channel_credentials *tls_credentials_of(const char *pem,
                                                    const char *keyfile) {
  char *ca = slurp(ta_cert("ca.pem"));
  char *cert = slurp(ta_cert(pem));
  char *key = slurp(ta_cert(keyfile));
  grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
  grpc_channel_credentials *cr = grpc_ssl_credentials_create(ca, &pair, NULL,
                                                             NULL);
  free(ca);
  free(cert);
  free(key);
  return cr;
}

static grpc_channel_credentials *tls_credentials(void) {
  return tls_credentials_of("client.pem", "client.key");
}

static void start_recv(tp_call *c) {
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  size_t n = 0;
  if (!c->got_im) {
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n++].data.recv_initial_metadata.recv_initial_metadata = &c->im;
    c->got_im = 1;
  }
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n++].data.recv_message.recv_message = &c->rbb;
  ck_assert_int_eq(grpc_call_start_batch(c->call, ops, n, T_RECV, NULL),
                   GRPC_CALL_OK);
  c->recv_busy = 1;
}

/* The next queued send, when none is in flight. */
static void start_send(tp_call *c) {
  if (c->send_busy || c->qlen == 0 || c->status_done)
    return;
  tp_send_q q = c->q[c->qhead];
  c->qhead = (c->qhead + 1) % TP_MAX_SENDS;
  c->qlen--;
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  size_t n = 0;
  if (q.bb) {
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = q.bb;
  }
  if (q.close)
    ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ck_assert_int_eq(grpc_call_start_batch(c->call, ops, n, T_SEND, NULL),
                   GRPC_CALL_OK);
  c->sbb = q.bb;
  c->send_busy = 1;
}

tp_call *tp_open(int port, const char *method) {
  tp_call *c = calloc(1, sizeof(*c));
  ck_assert_ptr_nonnull(c);
  grpc_init();
  char target[64];
  snprintf(target, sizeof(target), "127.0.0.1:%d", port);
  grpc_channel_credentials *cr = test_tls_mode()
                                     ? tls_credentials()
                                     : grpc_insecure_credentials_create();
  c->ch = grpc_channel_create(target, cr, NULL);
  grpc_channel_credentials_release(cr);
  c->cq = grpc_completion_queue_create_for_next(NULL);
  /* The call takes its own reference to the method. */
  grpc_slice m = grpc_slice_from_copied_string(method);
  c->call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS,
                                     c->cq, m, NULL,
                                     gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  grpc_slice_unref(m);
  ck_assert_ptr_nonnull(c->call);
  grpc_metadata_array_init(&c->im);
  grpc_metadata_array_init(&c->tm);
  c->det = grpc_empty_slice();
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  op.data.recv_status_on_client.trailing_metadata = &c->tm;
  op.data.recv_status_on_client.status = &c->status;
  op.data.recv_status_on_client.status_details = &c->det;
  ck_assert_int_eq(grpc_call_start_batch(c->call, &op, 1, T_STATUS, NULL),
                   GRPC_CALL_OK);
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_INITIAL_METADATA;
  ck_assert_int_eq(grpc_call_start_batch(c->call, &op, 1, T_SEND, NULL),
                   GRPC_CALL_OK);
  c->send_busy = 1;
  start_recv(c);
  return c;
}

static void enqueue(tp_call *c, grpc_byte_buffer *bb, int close) {
  ck_assert_int_lt(c->qlen, TP_MAX_SENDS);
  c->q[(c->qhead + c->qlen) % TP_MAX_SENDS] = (tp_send_q){bb, close};
  c->qlen++;
  tp_pump(c);
}

void tp_send(tp_call *c, const void *p, size_t len, int close) {
  grpc_slice s = grpc_slice_from_copied_buffer(p, len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  enqueue(c, bb, close);
}

void tp_send_str(tp_call *c, const char *s) { tp_send(c, s, strlen(s), 0); }

void tp_half_close(tp_call *c) { enqueue(c, NULL, 1); }

static void take_message(tp_call *c) {
  grpc_byte_buffer_reader rd;
  ck_assert(grpc_byte_buffer_reader_init(&rd, c->rbb));
  grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
  grpc_byte_buffer_reader_destroy(&rd);
  size_t len = GRPC_SLICE_LENGTH(s);
  if (c->nmsgs < TP_MAX_MSGS) { /* the first ones kept, the rest counted */
    char *m = malloc(len + 1);
    ck_assert_ptr_nonnull(m);
    memcpy(m, GRPC_SLICE_START_PTR(s), len);
    m[len] = '\0';
    c->msgs[c->nmsgs] = m;
    c->lens[c->nmsgs] = len;
  }
  c->nmsgs++;
  grpc_slice_unref(s);
  grpc_byte_buffer_destroy(c->rbb);
  c->rbb = NULL;
}

void tp_pump(tp_call *c) {
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(
        c->cq, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL);
    if (ev.type != GRPC_OP_COMPLETE)
      break;
    if (ev.tag == T_STATUS) {
      c->status_done = 1;
      char *d = grpc_slice_to_c_string(c->det);
      snprintf(c->details, sizeof(c->details), "%s", d);
      gpr_free(d);
    } else if (ev.tag == T_RECV) {
      c->recv_busy = 0;
      if (c->rbb) {
        take_message(c);
        start_recv(c);
      } else {
        c->ended = 1; /* no more messages */
      }
    } else if (ev.tag == T_SEND) {
      c->send_busy = 0;
      if (c->sbb)
        grpc_byte_buffer_destroy(c->sbb);
      c->sbb = NULL;
    }
  }
  start_send(c);
}

int tp_nmsgs(const tp_call *c) { return c->nmsgs; }

const char *tp_msg(const tp_call *c, int i) {
  ck_assert_int_lt(i, c->nmsgs);
  ck_assert_int_lt(i, TP_MAX_MSGS);
  return c->msgs[i];
}

size_t tp_msg_len(const tp_call *c, int i) {
  ck_assert_int_lt(i, c->nmsgs);
  ck_assert_int_lt(i, TP_MAX_MSGS);
  return c->lens[i];
}

int tp_status(const tp_call *c) {
  return c->status_done ? (int)c->status : -1;
}

const char *tp_details(const tp_call *c) { return c->details; }

typedef struct tp_want {
  tp_call *c;
  int n;
} tp_want;

static int has_msgs(void *ud) {
  tp_want *w = ud;
  tp_pump(w->c);
  return w->c->nmsgs >= w->n;
}

static int has_status(void *ud) {
  tp_call *c = ud;
  tp_pump(c);
  return c->status_done;
}

static int has_ended(void *ud) {
  tp_call *c = ud;
  tp_pump(c);
  return c->status_done && c->ended;
}

/* Every batch completed: the call may be freed. */
static int quiet(void *ud) {
  tp_call *c = ud;
  tp_pump(c);
  return c->status_done && !c->recv_busy && !c->send_busy;
}

int tp_wait_msgs(ta_env *env, tp_call *c, int n) {
  tp_want w = {c, n};
  return ta->run_until(env, has_msgs, &w, TA_TIMEOUT_MS);
}

int tp_wait_status(ta_env *env, tp_call *c) {
  return ta->run_until(env, has_status, c, TA_TIMEOUT_MS);
}

int tp_wait_ended(ta_env *env, tp_call *c) {
  return ta->run_until(env, has_ended, c, TA_TIMEOUT_MS);
}

void tp_close(ta_env *env, tp_call *c) {
  if (!c->status_done)
    grpc_call_cancel(c->call, NULL);
  /* Sends still queued are dropped: the call is over. */
  while (c->qlen) {
    if (c->q[c->qhead].bb)
      grpc_byte_buffer_destroy(c->q[c->qhead].bb);
    c->qhead = (c->qhead + 1) % TP_MAX_SENDS;
    c->qlen--;
  }
  ck_assert(ta->run_until(env, quiet, c, TA_TIMEOUT_MS));
  for (int i = 0; i < c->nmsgs && i < TP_MAX_MSGS; i++)
    free(c->msgs[i]);
  grpc_metadata_array_destroy(&c->im);
  grpc_metadata_array_destroy(&c->tm);
  grpc_slice_unref(c->det);
  grpc_call_unref(c->call);
  grpc_channel_destroy(c->ch);
  grpc_completion_queue_shutdown(c->cq);
  while (grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL)
             .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(c->cq);
  grpc_shutdown();
  free(c);
}

/* ---- admission (test_transport_admission.c) ---- */

grpc_channel *tp_channel(int port, int peer) {
  char target[64];
  int tls = test_tls_mode();
  snprintf(target, sizeof(target), "%s:%d",
           peer && !tls ? "[::1]" : "127.0.0.1", port);
  grpc_channel_credentials *cr =
      !tls   ? grpc_insecure_credentials_create()
      : peer ? tls_credentials_of("denied.pem", "denied.key")
             : tls_credentials();
  /* Its own connection: channels would otherwise share one. */
  grpc_arg a = {GRPC_ARG_INTEGER, (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL,
                {.integer = 1}};
  grpc_channel_args args = {1, &a};
  grpc_channel *ch = grpc_channel_create(target, cr, &args);
  grpc_channel_credentials_release(cr);
  return ch;
}
