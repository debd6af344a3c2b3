/*
 * Helpers of the gRPC transport tests: real gRPC over 127.0.0.1, observed
 * through the transport's own callbacks and synchronous calls. Everything
 * waits by polling with short sleeps, bounded by a timeout.
 */
#ifndef TEST_GRPC_UTIL_H
#define TEST_GRPC_UTIL_H

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "mcp/grpc.h"
#include "mcp/mcp.h"
#include "test_certs.h"

#define TG_TYPE_URL "type.googleapis.com/test.Body"
/* A failure guard, never a window: every wait returns at its event, and
 * nothing waits for this to expire; generous for a busy 2-core machine. */
#define TG_TIMEOUT_MS 20000

static inline void tg_sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* MCP_TEST_TIME_SCALE (default 1) multiplies how long the waits for a
 * condition may take: tests/valgrind/run.sh sets it, valgrind being 20 to
 * 50 times slower. Bounds the tests assert on are not scaled. */
static inline long tg_scale(long ms) {
  const char *v = getenv("MCP_TEST_TIME_SCALE");
  long k = v ? strtol(v, NULL, 10) : 1;
  return k > 1 ? ms * k : ms;
}

/* Polls |pred| every 5 ms for up to |ms| (scaled); returns its last
 * value. */
static inline int tg_wait(int (*pred)(void *), void *ud, long ms) {
  ms = tg_scale(ms);
  mcp_tstamp end = mcp_grpc_now() + (mcp_tstamp)ms * MCP_MILLISECONDS;
  for (;;) {
    if (pred(ud))
      return 1;
    if (mcp_grpc_now() >= end)
      return pred(ud);
    tg_sleep_ms(5);
  }
}

/* ---- stores and states ---- */

static inline mcp_store *tg_store(void) {
  mcp_store_options o;
  mcp_store_options_default(&o);
  o.epoch = 0x1234;
  mcp_store *st = NULL;
  ck_assert_int_eq(mcp_store_new(&st, &o), 0);
  return st;
}

static inline void tg_put_bytes(mcp_store *st, const char *coll,
                                const char *name, const uint8_t *body,
                                size_t len, mcp_tstamp ts) {
  mcp_resource r;
  memset(&r, 0, sizeof(r));
  r.name = name;
  r.type_url = TG_TYPE_URL;
  r.body = body;
  r.body_len = len;
  ck_assert_int_ge(mcp_store_upsert(st, coll, &r, ts), 0);
}

static inline void tg_put(mcp_store *st, const char *coll, const char *name,
                          const char *body, mcp_tstamp ts) {
  tg_put_bytes(st, coll, name, (const uint8_t *)body, strlen(body), ts);
}

static inline void tg_put_big(mcp_store *st, const char *coll,
                              const char *name, size_t len, mcp_tstamp ts) {
  uint8_t *b = malloc(len);
  ck_assert_ptr_nonnull(b);
  for (size_t i = 0; i < len; i++)
    b[i] = (uint8_t)(i * 7);
  tg_put_bytes(st, coll, name, b, len, ts);
  free(b);
}

/* ---- what the core reports (events), thread-safe ---- */

typedef struct tg_events {
  pthread_mutex_t mu;
  int requests, pushes, acks, nacks;     /* source side */
  int incremental_pushes, removed;       /* source PUSH details */
  int sink_acks, sink_nacks;             /* sink side */
  int sink_triggers;                     /* sink: Istio's trigger answered */
} tg_events;

static tg_events tg_ev = {.mu = PTHREAD_MUTEX_INITIALIZER};

static inline void tg_source_event(const mcp_event *ev, void *ud) {
  tg_events *e = ud;
  pthread_mutex_lock(&e->mu);
  switch (ev->type) {
  case MCP_EVENT_REQUEST: e->requests++; break;
  case MCP_EVENT_PUSH:
    e->pushes++;
    e->incremental_pushes += ev->incremental != 0;
    e->removed += (int)ev->nremoved;
    break;
  case MCP_EVENT_ACK: e->acks++; break;
  case MCP_EVENT_NACK: e->nacks++; break;
  default: break;
  }
  pthread_mutex_unlock(&e->mu);
}

static inline void tg_sink_event(const mcp_event *ev, void *ud) {
  tg_events *e = ud;
  pthread_mutex_lock(&e->mu);
  if (ev->type == MCP_EVENT_ACK)
    e->sink_acks++;
  if (ev->type == MCP_EVENT_NACK)
    e->sink_nacks++;
  if (ev->type == MCP_EVENT_TRIGGER_IGNORED)
    e->sink_triggers++;
  pthread_mutex_unlock(&e->mu);
}

/* Checked fixture: each test starts from zero (also with CK_FORK=no). */
static inline void tg_reset(void) {
  pthread_mutex_lock(&tg_ev.mu);
  tg_ev.requests = tg_ev.pushes = tg_ev.acks = tg_ev.nacks = 0;
  tg_ev.incremental_pushes = tg_ev.removed = 0;
  tg_ev.sink_acks = tg_ev.sink_nacks = tg_ev.sink_triggers = 0;
  pthread_mutex_unlock(&tg_ev.mu);
}

static inline tg_events tg_events_get(void) {
  pthread_mutex_lock(&tg_ev.mu);
  tg_events copy = tg_ev;
  pthread_mutex_unlock(&tg_ev.mu);
  return copy;
}

/* ---- what the transport reports (streams), one per object ---- */

typedef struct tg_streams {
  pthread_mutex_t mu;
  int opened, closed, open_now;
  int last_status;
  char last_details[320];
  char last_peer[96];
  /* REFUSED events (authorization, admission) */
  int refused, last_refused_status;
  char last_refused_details[160];
  char last_refused_identity[160]; /* its first identity, "" if none */
} tg_streams;

static inline void tg_streams_init(tg_streams *s) {
  memset(s, 0, sizeof(*s));
  pthread_mutex_init(&s->mu, NULL);
  s->last_status = -1;
}

static inline void tg_on_stream(mcp_grpc_stream_event ev,
                                const mcp_grpc_stream_info *info, void *ud) {
  tg_streams *s = ud;
  pthread_mutex_lock(&s->mu);
  if (ev == MCP_GRPC_STREAM_OPENED) {
    s->opened++;
    s->open_now++;
    ck_assert(mcp_stream_source_session(info->stream) || mcp_stream_sink_session(info->stream));
  } else if (ev == MCP_GRPC_STREAM_REFUSED) {
    s->refused++;
    s->last_refused_status = info->status;
    snprintf(s->last_refused_details, sizeof(s->last_refused_details), "%s",
             info->details);
    snprintf(s->last_refused_identity, sizeof(s->last_refused_identity),
             "%s", info->nidentities ? info->identities[0] : "");
    ck_assert(!info->stream);
  } else {
    s->closed++;
    s->open_now--;
    s->last_status = info->status;
    snprintf(s->last_details, sizeof(s->last_details), "%s", info->details);
    ck_assert(!info->stream);
  }
  snprintf(s->last_peer, sizeof(s->last_peer), "%s", info->peer);
  pthread_mutex_unlock(&s->mu);
}

static inline tg_streams tg_streams_get(tg_streams *s) {
  pthread_mutex_lock(&s->mu);
  tg_streams copy = *s;
  pthread_mutex_unlock(&s->mu);
  return copy;
}

/* ---- options ---- */

static inline void tg_source_opts(mcp_source_options *o, mcp_store *st) {
  mcp_source_options_default(o);
  o->store = st;
  o->on_event = tg_source_event;
  o->user_data = &tg_ev;
}

static inline mcp_sink_state *tg_sink_state(const char *const *colls,
                                            size_t n, int incremental) {
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.node_id = "test-sink";
  o.collections = colls;
  o.ncollections = n;
  o.incremental = incremental;
  o.on_event = tg_sink_event;
  o.user_data = &tg_ev;
  mcp_sink_state *st = NULL;
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), 0);
  return st;
}

static inline void tg_listen_opts(mcp_grpc_options *o, const char *addr,
                                  tg_streams *obs) {
  mcp_grpc_options_default(o);
  o->mode = MCP_GRPC_LISTEN;
  o->address = addr;
  o->on_stream = tg_on_stream;
  o->user_data = obs;
  o->shutdown_grace = MCP_SECONDS;
  if (test_tls_mode()) { /* the *_tls variant: mutual TLS */
    o->tls.cert_file = test_cert("server.pem");
    o->tls.key_file = test_cert("server.key");
    o->tls.ca_file = test_cert("ca.pem");
  }
}

/* Dialing with short delays, so that a reconnection takes milliseconds. */
static inline void tg_dial_opts(mcp_grpc_options *o, char *buf, size_t len,
                                int port, tg_streams *obs) {
  mcp_grpc_options_default(o);
  snprintf(buf, len, "127.0.0.1:%d", port);
  o->mode = MCP_GRPC_DIAL;
  o->address = buf;
  o->backoff.initial = 20 * MCP_MILLISECONDS;
  o->backoff.max = 200 * MCP_MILLISECONDS;
  o->on_stream = tg_on_stream;
  o->user_data = obs;
  if (test_tls_mode()) {
    o->tls.cert_file = test_cert("client.pem");
    o->tls.key_file = test_cert("client.key");
    o->tls.ca_file = test_cert("ca.pem");
  }
}

/* ---- comparing what the sink holds with what the store has ---- */

#define TG_MAX 64
typedef struct tg_snap {
  const char *coll;
  int n, synced, equal;
  char name[TG_MAX][48];
  char version[TG_MAX][64];
} tg_snap;

static inline void tg_snap_one(const char *name, const char *version,
                               void *ud) {
  tg_snap *s = ud;
  ck_assert_int_lt(s->n, TG_MAX);
  snprintf(s->name[s->n], sizeof(s->name[0]), "%s", name);
  snprintf(s->version[s->n], sizeof(s->version[0]), "%s", version);
  s->n++;
}

static inline void tg_snap_state(mcp_sink_state *st, mcp_tstamp ts,
                                 void *ud) {
  (void)ts;
  tg_snap *s = ud;
  s->n = 0;
  mcp_sink_state_foreach(st, s->coll, tg_snap_one, s);
  s->synced = mcp_sink_state_synced(st);
}

static inline void tg_compare_store(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)ts;
  tg_snap *s = ud;
  s->equal = mcp_store_count(st, s->coll) == (size_t)s->n;
  for (int i = 0; s->equal && i < s->n; i++) {
    const char *v = mcp_store_version(st, s->coll, s->name[i]);
    s->equal = v && strcmp(v, s->version[i]) == 0;
  }
}

/* The store, through |src| when it serves it, else directly. */
typedef struct tg_pair {
  mcp_grpc_source *src;
  mcp_store *store;
  mcp_grpc_sink *sink;
  const char *coll;
} tg_pair;

/* 1 when the sink is synced and holds exactly the store's content of the
 * collection: the same names with the same versions. */
static inline int tg_equal(void *ud) {
  tg_pair *p = ud;
  tg_snap s;
  memset(&s, 0, sizeof(s));
  s.coll = p->coll;
  ck_assert_int_eq(mcp_grpc_sink_call(p->sink, tg_snap_state, &s), 0);
  if (!s.synced)
    return 0;
  if (p->src)
    ck_assert_int_eq(mcp_grpc_source_call(p->src, tg_compare_store, &s), 0);
  else
    tg_compare_store(p->store, mcp_grpc_now(), &s);
  return s.equal;
}

static inline int tg_sink_has(mcp_grpc_sink *sink, const char *coll,
                              const char *name) {
  tg_snap s;
  memset(&s, 0, sizeof(s));
  s.coll = coll;
  ck_assert_int_eq(mcp_grpc_sink_call(sink, tg_snap_state, &s), 0);
  for (int i = 0; i < s.n; i++)
    if (strcmp(s.name[i], name) == 0)
      return 1;
  return 0;
}

/* ---- a raw gRPC client, for what our own objects never send ---- */

/* Starts a call on |method| at 127.0.0.1:|port|, sends |len| bytes as one
 * message (none when |msg| is NULL) and waits up to |ms| for its status.
 * Returns the status code (-1 on timeout); copies the details. */
static inline int tg_raw_call(int port, const char *method,
                              const uint8_t *msg, size_t len, char *details,
                              size_t dlen, long ms) {
  grpc_init();
  char target[64];
  snprintf(target, sizeof(target), "127.0.0.1:%d", port);
  grpc_channel_credentials *cr = grpc_insecure_credentials_create();
  grpc_channel *ch = grpc_channel_create(target, cr, NULL);
  grpc_channel_credentials_release(cr);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                 gpr_time_from_millis(ms, GPR_TIMESPAN));
  grpc_call *call =
      grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                               grpc_slice_from_static_string(method), NULL,
                               dl, NULL);
  grpc_slice s = grpc_slice_from_copied_buffer((const char *)msg, len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  grpc_metadata_array im, tm;
  grpc_metadata_array_init(&im);
  grpc_metadata_array_init(&tm);
  grpc_status_code status = GRPC_STATUS_OK;
  grpc_slice det = grpc_empty_slice();
  grpc_op ops[4];
  memset(ops, 0, sizeof(ops));
  size_t n = 0;
  ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (msg) {
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = bb;
  }
  ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[n++].data.recv_initial_metadata.recv_initial_metadata = &im;
  ops[n].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[n].data.recv_status_on_client.trailing_metadata = &tm;
  ops[n].data.recv_status_on_client.status = &status;
  ops[n++].data.recv_status_on_client.status_details = &det;
  ck_assert_int_eq(grpc_call_start_batch(call, ops, n, (void *)1, NULL),
                   GRPC_CALL_OK);
  grpc_event ev = grpc_completion_queue_next(
      cq, gpr_time_add(dl, gpr_time_from_millis(1000, GPR_TIMESPAN)), NULL);
  int rv = ev.type == GRPC_OP_COMPLETE ? (int)status : -1;
  char *d = grpc_slice_to_c_string(det);
  snprintf(details, dlen, "%s", d);
  gpr_free(d);
  grpc_slice_unref(det);
  grpc_metadata_array_destroy(&im);
  grpc_metadata_array_destroy(&tm);
  grpc_byte_buffer_destroy(bb);
  grpc_call_unref(call);
  grpc_channel_destroy(ch);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL)
             .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(cq);
  grpc_shutdown();
  return rv;
}

/* Runs |s|; with MCP_TEST_TLS=1 (the *_tls tests of meson.build), makes
 * the certificates that tg_listen_opts()/tg_dial_opts() then use first,
 * and removes them after. */
static inline int tg_run(Suite *s) {
  int certs = test_tls_mode();
  if (certs && test_certs_make() != 0)
    return EXIT_FAILURE;
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  if (certs)
    test_certs_remove();
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
