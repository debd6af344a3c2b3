/*
 * Admission on a listening source (the core's mcp_admit, as each
 * transport applies it), written once for every transport (issue 21 item
 * 7; the transport: the adapter it is built with, tests/transport_<name>.c).
 *
 * The clients are raw gRPC C-core calls, the same for every transport
 * (tp_channel(), tests/transport_peer.h), each driven by its own core sink
 * session; all of a storm's calls share one completion queue, moved
 * without blocking inside the adapter's run_until() (so a loop-driven
 * transport runs meanwhile). Two peers: two addresses in cleartext, two
 * identities over TLS.
 *
 * Checks the max-streams limit (RESOURCE_EXHAUSTED beyond it), the
 * new-stream rate (UNAVAILABLE "retry later" beyond its queue), the bound
 * on concurrent initial pushes (never more at once, also as seen by the
 * core's events), the slot timeout, waiting calls that give up, mute and
 * silent streams, and the per-peer new-stream rate. tests/test_h2c_admission.c
 * keeps what gRPC core cannot send (raw frames).
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "helper.h"
#include "test_certs.h"
#include "transport_peer.h"
#include "transport_suite.h"

static const char *const colls[] = {"c1"};

#define SOURCE_METHOD MCP_RESOURCE_SOURCE_METHOD

/* ---- the source's events: how many streams are between their first
 * request and their first push (each stream asks for one collection and
 * nothing changes, so that is requests - pushes) ---- */

typedef struct initial_watch {
  pthread_mutex_t mu;
  int requests, pushes, peak;
} initial_watch;

static initial_watch iw = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void watch_event(const mcp_event *ev, void *ud) {
  (void)ud;
  pthread_mutex_lock(&iw.mu);
  if (ev->type == MCP_EVENT_REQUEST)
    iw.requests++;
  else if (ev->type == MCP_EVENT_PUSH)
    iw.pushes++;
  if (iw.requests - iw.pushes > iw.peak)
    iw.peak = iw.requests - iw.pushes;
  pthread_mutex_unlock(&iw.mu);
}

static int iw_peak(void) {
  pthread_mutex_lock(&iw.mu);
  int p = iw.peak;
  pthread_mutex_unlock(&iw.mu);
  return p;
}

/* ---- the storm client ---- */

typedef struct rcall rcall;
typedef struct rtag {
  rcall *c;
  int kind; /* 0 send, 1 recv, 2 status */
} rtag;

struct rcall {
  grpc_call *call;
  mcp_sink_state *state;
  mcp_sink_session *sess;
  rtag send_tag, recv_tag, status_tag;
  grpc_byte_buffer *send_bb, *recv_bb;
  grpc_metadata_array im, tm;
  grpc_status_code status;
  grpc_slice details;
  int send_busy, recv_busy, done, synced, ended, pushed;
};

typedef struct storm {
  int n, nch;
  grpc_channel **ch;
  grpc_completion_queue *cq;
  rcall *calls;
  int mute; /* the calls ask, then never answer (no ACK) */
  int ending; /* storm_end(): nothing more is sent */
  int done, synced, pushed;
  int by_status[17];
  char details[17][128];
} storm;

/* The storms alive: every wait moves all of their completions. */
#define MAX_STORMS 4
static storm *live[MAX_STORMS];

static grpc_byte_buffer *bb_of(mcp_msg *msg) {
  grpc_slice s = grpc_slice_malloc(mcp_msg_len(msg));
  mcp_msg_flatten(msg, GRPC_SLICE_START_PTR(s));
  mcp_msg_free(msg);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

/* Sends the session's next message if nothing is in flight. */
static void pump(rcall *c, int first) {
  if (c->send_busy || c->ended)
    return;
  mcp_msg *msg = NULL;
  int rv = c->sess ? mcp_sink_session_next(c->sess, &msg) : 0;
  ck_assert_int_ge(rv, 0);
  if (rv == 0 && !first)
    return;
  grpc_op ops[2];
  size_t n = 0;
  memset(ops, 0, sizeof(ops));
  if (first)
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (rv > 0) {
    c->send_bb = bb_of(msg);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = c->send_bb;
  }
  ck_assert_int_eq(grpc_call_start_batch(c->call, ops, n, &c->send_tag, NULL),
                   GRPC_CALL_OK);
  c->send_busy = 1;
}

static void recv_next(rcall *c, int first) {
  grpc_op ops[2];
  size_t n = 0;
  memset(ops, 0, sizeof(ops));
  if (first) {
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n++].data.recv_initial_metadata.recv_initial_metadata = &c->im;
  }
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n++].data.recv_message.recv_message = &c->recv_bb;
  ck_assert_int_eq(grpc_call_start_batch(c->call, ops, n, &c->recv_tag, NULL),
                   GRPC_CALL_OK);
  c->recv_busy = 1;
}

static mcp_sink_state *sink_state(void) {
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.node_id = "storm-sink";
  o.collections = colls;
  o.ncollections = 1;
  mcp_sink_state *st = NULL;
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), 0);
  return st;
}

enum { TALK, SILENT, MUTE };

/* |n| calls on |nch| connections of peer |peer| (tp_channel()). SILENT:
 * the calls send their initial metadata and nothing else; MUTE: they
 * ask, and never ACK. */
static void storm_start(storm *st, int port, int n, int nch, int peer,
                        int how) {
  memset(st, 0, sizeof(*st));
  st->mute = how == MUTE;
  grpc_init();
  st->n = n;
  st->nch = nch;
  st->cq = grpc_completion_queue_create_for_next(NULL);
  st->ch = calloc((size_t)nch, sizeof(*st->ch));
  st->calls = calloc((size_t)n, sizeof(*st->calls));
  ck_assert_ptr_nonnull(st->ch);
  ck_assert_ptr_nonnull(st->calls);
  for (int i = 0; i < nch; i++)
    st->ch[i] = tp_channel(port, peer);
  for (int i = 0; i < n; i++) {
    rcall *c = &st->calls[i];
    c->state = sink_state();
    if (how != SILENT)
      ck_assert_int_eq(mcp_sink_session_new(&c->sess, c->state, ta->now()),
                       0);
    c->send_tag = (rtag){c, 0};
    c->recv_tag = (rtag){c, 1};
    c->status_tag = (rtag){c, 2};
    grpc_metadata_array_init(&c->im);
    grpc_metadata_array_init(&c->tm);
    c->details = grpc_empty_slice();
    c->call = grpc_channel_create_call(
        st->ch[i % nch], NULL, GRPC_PROPAGATE_DEFAULTS, st->cq,
        grpc_slice_from_static_string(SOURCE_METHOD), NULL,
        gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &c->tm;
    op.data.recv_status_on_client.status = &c->status;
    op.data.recv_status_on_client.status_details = &c->details;
    ck_assert_int_eq(
        grpc_call_start_batch(c->call, &op, 1, &c->status_tag, NULL),
        GRPC_CALL_OK);
    pump(c, 1);
    recv_next(c, 1);
  }
  int k = 0;
  while (k < MAX_STORMS && live[k])
    k++;
  ck_assert_int_lt(k, MAX_STORMS);
  live[k] = st;
}

static void on_recv(storm *st, rcall *c, int ok) {
  c->recv_busy = 0;
  if (!ok || !c->recv_bb) {
    c->ended = 1;
    return;
  }
  if (st->ending || !c->sess) { /* silent, or over: read on, ignore */
    grpc_byte_buffer_destroy(c->recv_bb);
    c->recv_bb = NULL;
    if (!st->ending)
      recv_next(c, 0);
    return;
  }
  grpc_byte_buffer_reader rd;
  ck_assert(grpc_byte_buffer_reader_init(&rd, c->recv_bb));
  grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
  grpc_byte_buffer_reader_destroy(&rd);
  ck_assert_int_eq(mcp_sink_session_recv(c->sess, GRPC_SLICE_START_PTR(s),
                                         GRPC_SLICE_LENGTH(s), ta->now()),
                   0);
  grpc_slice_unref(s);
  grpc_byte_buffer_destroy(c->recv_bb);
  c->recv_bb = NULL;
  if (!c->pushed) {
    c->pushed = 1;
    st->pushed++;
  }
  if (st->mute) { /* read on, answer nothing */
    recv_next(c, 0);
    return;
  }
  if (!c->synced && mcp_sink_state_synced(c->state)) {
    c->synced = 1;
    st->synced++;
  }
  pump(c, 0);
  recv_next(c, 0);
}

static void on_event(storm *st, rtag *t, int ok) {
  rcall *c = t->c;
  switch (t->kind) {
  case 0:
    c->send_busy = 0;
    if (c->send_bb)
      grpc_byte_buffer_destroy(c->send_bb);
    c->send_bb = NULL;
    if (ok && !st->ending)
      pump(c, 0);
    break;
  case 1:
    on_recv(st, c, ok);
    break;
  default: {
    c->done = 1;
    c->ended = 1;
    st->done++;
    int code = (int)c->status;
    ck_assert(code >= 0 && code <= 16);
    st->by_status[code]++;
    char *d = grpc_slice_to_c_string(c->details);
    snprintf(st->details[code], sizeof(st->details[0]), "%s", d);
    gpr_free(d);
    break;
  }
  }
}

/* Moves every live storm's completions, without blocking. */
static void pump_all(void) {
  for (int k = 0; k < MAX_STORMS; k++) {
    if (!live[k])
      continue;
    for (;;) {
      grpc_event ev = grpc_completion_queue_next(
          live[k]->cq, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL);
      if (ev.type != GRPC_OP_COMPLETE)
        break;
      on_event(live[k], ev.tag, ev.success);
    }
  }
}

/* ---- the source under test ---- */

typedef struct adm {
  ta_env *env;
  mcp_store *store;
  ta_obj *src;
  int port;
} adm;

/* A listener's options for the storms: they multiplex up to 250 streams
 * on a connection (the defaults allow 100 or so), from one peer, and test
 * the other rules (the per-peer rate has its own test). */
static ta_opts adm_opts(const char *address) {
  ta_opts o = ta_opts_for(1, address, NULL);
  o.max_concurrent_streams = 1000;
  o.max_streams_per_connection = 1000;
  o.peer_stream_rate = UINT32_MAX;
  return o;
}

/* A source with one small collection, its events watched. */
static void adm_start(adm *a, const ta_opts *o) {
  memset(a, 0, sizeof(*a));
  pthread_mutex_lock(&iw.mu);
  iw.requests = iw.pushes = iw.peak = 0;
  pthread_mutex_unlock(&iw.mu);
  a->env = ta->env_new();
  a->store = th_store(NULL);
  mcp_tstamp ts = ta->now();
  th_put(a->store, "c1", "a", "1", "alpha", ts);
  th_put(a->store, "c1", "b", "1", "beta", ts);
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = a->store;
  so.on_event = watch_event;
  ck_assert_int_eq(ta->source_new(a->env, &a->src, o, &so), 0);
  a->port = ta->port(a->src);
  ck_assert_int_gt(a->port, 0);
}

static void adm_end(adm *a) {
  ta->del(a->src);
  ta->env_del(a->env);
  mcp_store_del(a->store);
}

static mcp_transport_stats stats(const adm *a) {
  mcp_transport_stats st;
  ck_assert_int_eq(
      ta->stats_versioned(a->src, MCP_TRANSPORT_STATS_VERSION, &st), 0);
  return st;
}

/* A condition on the source's stats, the storms and |calls| (NULL, or
 * NULL-terminated) moved first: a call's gRPC core connects only as its
 * queue is polled. */
typedef struct sw {
  adm *a;
  int (*pred)(const mcp_transport_stats *);
  tp_call **calls;
} sw;

static int sw_cond(void *ud) {
  sw *w = ud;
  pump_all();
  for (tp_call **c = w->calls; c && *c; c++)
    tp_pump(*c);
  mcp_transport_stats st = stats(w->a);
  return w->pred(&st);
}

static int wait_stats(adm *a, int (*pred)(const mcp_transport_stats *)) {
  sw w = {a, pred, NULL};
  return ta->run_until(a->env, sw_cond, &w, TA_TIMEOUT_MS);
}

static int wait_calls(adm *a, tp_call **calls,
                      int (*pred)(const mcp_transport_stats *)) {
  sw w = {a, pred, calls};
  return ta->run_until(a->env, sw_cond, &w, TA_TIMEOUT_MS);
}

/* A condition on a storm. */
typedef struct stw {
  storm *st;
  int (*pred)(storm *, int);
  int want;
} stw;

static int stw_cond(void *ud) {
  stw *w = ud;
  pump_all();
  return w->pred(w->st, w->want);
}

static int storm_wait(adm *a, storm *st, int (*pred)(storm *, int), int want) {
  stw w = {st, pred, want};
  return ta->run_until(a->env, stw_cond, &w, TA_TIMEOUT_MS);
}

static int drained(rcall *c) {
  return c->done && !c->send_busy && !c->recv_busy;
}

static int all_drained(storm *st, int want) {
  (void)want;
  for (int i = 0; i < st->n; i++)
    if (!drained(&st->calls[i]))
      return 0;
  return 1;
}

/* Cancels every call, waits for their completions, frees the storm. */
static void storm_end(adm *a, storm *st) {
  st->ending = 1;
  for (int i = 0; i < st->n; i++)
    grpc_call_cancel(st->calls[i].call, NULL);
  ck_assert(storm_wait(a, st, all_drained, 0));
  for (int k = 0; k < MAX_STORMS; k++)
    if (live[k] == st)
      live[k] = NULL;
  for (int i = 0; i < st->n; i++) {
    rcall *c = &st->calls[i];
    grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->im);
    grpc_metadata_array_destroy(&c->tm);
    grpc_slice_unref(c->details);
    mcp_sink_session_del(c->sess);
    mcp_sink_state_del(c->state);
  }
  for (int i = 0; i < st->nch; i++)
    grpc_channel_destroy(st->ch[i]);
  grpc_completion_queue_shutdown(st->cq);
  while (grpc_completion_queue_next(st->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL)
             .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(st->cq);
  free(st->ch);
  free(st->calls);
  grpc_shutdown();
}

static int synced_n(storm *st, int want) { return st->synced >= want; }
static int pushed_n(storm *st, int want) { return st->pushed >= want; }
static int ended_n(storm *st, int want) { return st->done >= want; }

/* |want| synced, and every call synced or ended. */
static int settled(storm *st, int want) {
  return st->synced >= want && st->synced + st->done >= st->n;
}

static int none_initial(const mcp_transport_stats *s) {
  return s->initial == 0 && s->waiting_initial == 0;
}

/* Calls in a storm: each limit passed many times over (a storm of 1000
 * costs about 2 s under ASan). */
#define STORM 1000

START_TEST(storm_max_streams_and_initial_bound) {
  ta_opts o = adm_opts("127.0.0.1:0");
  o.max_streams = 750;
  o.stream_rate = UINT32_MAX; /* only the two other limits here */
  o.max_initial_pushes = 16;
  o.max_initial_pushes_per_peer = 16; /* one peer */
  o.max_streams_per_peer = SIZE_MAX;
  adm a;
  adm_start(&a, &o);
  storm st;
  storm_start(&st, a.port, STORM, 4, 0, TALK);
  ck_assert_msg(storm_wait(&a, &st, settled, 750), "synced %d, ended %d",
                st.synced, st.done);
  /* Exactly the streams beyond the limit were refused, at once. */
  ck_assert_int_eq(st.synced, 750);
  ck_assert_int_eq(st.done, 250);
  ck_assert_int_eq(st.by_status[GRPC_STATUS_RESOURCE_EXHAUSTED], 250);
  ck_assert_str_eq(st.details[GRPC_STATUS_RESOURCE_EXHAUSTED],
                   "too many streams");
  /* The last ACKs may still be on their way. */
  ck_assert(wait_stats(&a, none_initial));
  mcp_transport_stats s = stats(&a);
  ck_assert_uint_eq(s.opened, 750);
  ck_assert_uint_eq(s.streams, 750);
  ck_assert_uint_eq(s.refused_max_streams, 250);
  ck_assert_uint_eq(s.refused_rate, 0);
  /* Never more than 16 in their initial sync: as the transport counts
   * them, and as the core's events show (a waiting stream is not read).
   * Slots free as soon as the push is handed over, so fewer may do. */
  ck_assert_uint_le(s.initial_peak, 16);
  ck_assert_uint_ge(s.initial_peak, 1);
  ck_assert_uint_eq(s.initial_sent, 750);
  ck_assert_int_le(iw_peak(), 16);
  ck_assert_int_ge(iw_peak(), 1);
  ck_assert_uint_eq(s.initial_timeouts, 0);
  /* The TLS run is TLS: no silent fall back to cleartext (where the
   * transport counts handshakes; gRPC core's are its own). */
  if (test_tls_mode() && ta->counts_tls)
    ck_assert_uint_ge(s.tls_handshakes, 4);
  storm_end(&a, &st);
  adm_end(&a);
}
END_TEST

START_TEST(storm_new_stream_rate) {
  ta_opts o = adm_opts("127.0.0.1:0");
  /* A rate no storm can be slower than within the wait: to admit all
   * STORM streams would take (1000 - 50) / 25 = 38 s, past the wait's
   * guard (TA_TIMEOUT_MS), so some are refused however busy the machine
   * is. */
  o.stream_rate = 25;
  o.stream_burst = 40; /* 40 at once; 40 more may wait, 10 per peer */
  adm a;
  adm_start(&a, &o);
  mcp_tstamp t0 = ta->now();
  storm st;
  storm_start(&st, a.port, STORM, 4, 0, TALK);
  ck_assert_msg(storm_wait(&a, &st, settled, 50), "synced %d, ended %d",
                st.synced, st.done);
  double secs = (double)(ta->now() - t0) / 1e9;
  mcp_transport_stats s = stats(&a);
  ck_assert_msg(st.done > 0, "none refused in %.2f s", secs);
  ck_assert_int_eq(st.by_status[GRPC_STATUS_UNAVAILABLE], st.done);
  ck_assert_str_eq(st.details[GRPC_STATUS_UNAVAILABLE],
                   "too many new streams; retry later");
  ck_assert_uint_eq(s.refused_rate, (uint64_t)st.done);
  ck_assert_int_eq(st.synced, (int)s.opened);
  ck_assert_uint_eq(s.opened + s.refused_rate, STORM);
  /* The bucket and this peer's share of its queue, plus what the rate
   * gave meanwhile. */
  ck_assert_uint_ge(s.opened, 50);
  ck_assert_msg((double)s.opened <= 50.0 + 25.0 * secs + 5.0,
                "opened %llu in %.2f s", (unsigned long long)s.opened, secs);
  ck_assert_uint_eq(s.waiting_rate, 0);
  storm_end(&a, &st);
  adm_end(&a);
}
END_TEST

/* ---- one stream that never asks holds its slot until the timeout ---- */

static int holding_slot(const mcp_transport_stats *s) {
  return s->initial == 1 && s->streams == 1;
}

START_TEST(initial_slot_times_out) {
  ta_opts o = adm_opts("127.0.0.1:0");
  o.max_initial_pushes = 1;
  o.initial_push_timeout = 300 * MCP_MILLISECONDS;
  adm a;
  adm_start(&a, &o);
  /* A call that asks for nothing: admitted, it holds the only slot. */
  storm idle;
  storm_start(&idle, a.port, 1, 1, 0, SILENT);
  ck_assert(wait_stats(&a, holding_slot));
  mcp_tstamp t0 = ta->now();
  storm st;
  storm_start(&st, a.port, 3, 1, 0, TALK);
  ck_assert(storm_wait(&a, &st, synced_n, 3));
  mcp_tstamp took = ta->now() - t0;
  mcp_transport_stats s = stats(&a);
  ck_assert_uint_ge(took, 250 * MCP_MILLISECONDS);
  ck_assert_uint_eq(s.initial_timeouts, 1);
  ck_assert_uint_eq(s.initial_peak, 1);
  ck_assert_uint_eq(s.opened, 4);
  storm_end(&a, &st);
  storm_end(&a, &idle);
  adm_end(&a);
}
END_TEST

/* ---- calls that give up while waiting leave no trace ---- */

static int waiting_5(const mcp_transport_stats *s) {
  return s->waiting_initial == 5;
}

static int waiting_none(const mcp_transport_stats *s) {
  return s->waiting_initial == 0 && s->streams == 1;
}

START_TEST(waiting_calls_cancelled) {
  ta_opts o = adm_opts("127.0.0.1:0");
  o.max_initial_pushes = 1;
  o.initial_push_timeout = 60 * MCP_SECONDS;
  o.max_streams = 6;
  o.max_streams_per_peer = SIZE_MAX; /* one peer */
  adm a;
  adm_start(&a, &o);
  storm idle; /* holds the slot, never asks */
  storm_start(&idle, a.port, 1, 1, 0, SILENT);
  ck_assert(wait_stats(&a, holding_slot));
  storm waiters;
  storm_start(&waiters, a.port, 5, 1, 0, TALK);
  ck_assert(wait_stats(&a, waiting_5));
  /* The limit counts waiting calls. */
  tp_call *c = tp_open(a.port, SOURCE_METHOD);
  ck_assert(tp_wait_status(a.env, c));
  ck_assert_int_eq(tp_status(c), GRPC_STATUS_RESOURCE_EXHAUSTED);
  ck_assert_str_eq(tp_details(c), "too many streams");
  tp_close(a.env, c);
  storm_end(&a, &waiters);
  ck_assert(wait_stats(&a, waiting_none));
  mcp_transport_stats s = stats(&a);
  ck_assert_uint_eq(s.opened, 1);
  ck_assert_uint_eq(s.refused_max_streams, 1);
  storm_end(&a, &idle);
  adm_end(&a);
}
END_TEST

/* ---- issue 12: streams that ask and never ACK hold a slot only until
 * their push is handed over (before: until the timeout, so 200 of them
 * behind 4 slots took 50 timeouts) ---- */

START_TEST(mute_streams_free_their_slots_at_push) {
  ta_opts o = adm_opts("127.0.0.1:0");
  o.max_initial_pushes = 4;
  o.max_initial_pushes_per_peer = 4;
  o.initial_push_timeout = 60 * MCP_SECONDS;
  o.admission_wait_timeout = 60 * MCP_SECONDS;
  adm a;
  adm_start(&a, &o);
  storm st;
  storm_start(&st, a.port, 200, 2, 0, MUTE);
  /* One slot timeout would be 60 s, past the wait's guard. */
  ck_assert_msg(storm_wait(&a, &st, pushed_n, 200), "pushed %d", st.pushed);
  ck_assert(wait_stats(&a, none_initial));
  mcp_transport_stats s = stats(&a);
  ck_assert_int_eq(st.done, 0);
  ck_assert_uint_eq(s.streams, 200);
  ck_assert_uint_eq(s.initial_sent, 200);
  ck_assert_uint_eq(s.initial_timeouts, 0);
  ck_assert_uint_le(s.initial_peak, 4);
  ck_assert_int_le(iw_peak(), 4);
  storm_end(&a, &st);
  adm_end(&a);
}
END_TEST

/* ---- silent streams from one peer hold its share of the slots only:
 * another peer is served at once, and the silent peer's waiting streams
 * end UNAVAILABLE at the wait deadline ---- */

static int share_held(const mcp_transport_stats *s) {
  return s->initial == 2 && s->waiting_initial == 18;
}

/* The streams whose info says they hold an initial slot. */
static void count_initial(const mcp_stream_info *info, void *ud) {
  *(int *)ud += info->initial != 0;
}

START_TEST(silent_peer_holds_only_its_share) {
  ta_opts o = adm_opts("[::]:0"); /* reached from both peers */
  o.max_initial_pushes = 8;
  o.max_initial_pushes_per_peer = 2;
  o.initial_push_timeout = 60 * MCP_SECONDS;
  o.admission_wait_timeout = 2 * MCP_SECONDS;
  adm a;
  adm_start(&a, &o);
  storm silent;
  storm_start(&silent, a.port, 20, 2, 1, SILENT);
  ck_assert(wait_stats(&a, share_held));
  int holding = 0;
  ck_assert_int_ge(ta->list(a.src, count_initial, &holding), 2);
  ck_assert_int_eq(holding, 2);
  storm good;
  storm_start(&good, a.port, 3, 1, 0, TALK);
  ck_assert(storm_wait(&a, &good, synced_n, 3));
  /* Served while the silent ones still wait (their deadline, 2 s, had
   * not come: none of them ended), let alone before their slots' timeout
   * (60 s): an order of events, each storm moved at every look. */
  ck_assert_int_eq(silent.done, 0);
  /* The silent peer's waiting streams end cleanly at their deadline. */
  ck_assert(storm_wait(&a, &silent, ended_n, 18));
  ck_assert_int_eq(silent.by_status[GRPC_STATUS_UNAVAILABLE], 18);
  ck_assert_str_eq(silent.details[GRPC_STATUS_UNAVAILABLE],
                   "server busy: not admitted within the wait timeout; "
                   "retry later");
  mcp_transport_stats s = stats(&a);
  ck_assert_uint_eq(s.refused_wait_timeout, 18);
  ck_assert_uint_eq(s.initial, 2); /* the two silent ones still hold */
  storm_end(&a, &good);
  storm_end(&a, &silent);
  adm_end(&a);
}
END_TEST

/* ---- what a waiting stream sent is held (not lost, not read into a
 * session) until it runs, then delivered ---- */

/* The asking stream waits with its request held: h2c holds its bytes
 * (read_buffered); gRPC core holds them for the gRPC transport, which
 * does not expose them (as with the socket bytes: ta->counts_bytes). */
static int one_waiting(const mcp_transport_stats *s) {
  return s->initial == 1 && s->waiting_initial == 1 &&
         (s->read_buffered > 0 || !ta->counts_bytes);
}

START_TEST(waiting_stream_gets_what_it_sent_once_it_runs) {
  ta_opts o = adm_opts("127.0.0.1:0");
  o.max_initial_pushes = 1;
  o.initial_push_timeout = 60 * MCP_SECONDS;
  o.admission_wait_timeout = 60 * MCP_SECONDS;
  adm a;
  adm_start(&a, &o);
  storm idle; /* silent: holds the only slot */
  storm_start(&idle, a.port, 1, 1, 0, SILENT);
  ck_assert(wait_stats(&a, holding_slot));
  storm asker; /* asks: waits, its request held */
  storm_start(&asker, a.port, 1, 1, 0, TALK);
  ck_assert(wait_stats(&a, one_waiting));
  ck_assert_int_eq(asker.pushed, 0);
  grpc_call_cancel(idle.calls[0].call, NULL); /* frees the slot */
  ck_assert(storm_wait(&a, &asker, synced_n, 1));
  mcp_transport_stats s = stats(&a);
  ck_assert_uint_eq(s.read_buffered, 0);
  ck_assert_uint_eq(s.waiting_initial, 0);
  ck_assert_uint_eq(s.initial_sent, 1);
  storm_end(&a, &asker);
  storm_end(&a, &idle);
  adm_end(&a);
}
END_TEST

/* ---- issue 23, item 6: new streams per peer. A peer opening 20 streams
 * at once gets its burst (4), one more waits for its bucket's refill (a
 * quarter of the burst may wait), the other 15 are refused
 * RESOURCE_EXHAUSTED saying why; another peer is served at once
 * meanwhile; the waiting one then runs. ---- */

START_TEST(peer_stream_rate_refuses_past_burst_healthy_peer_runs) {
  ta_opts o = adm_opts("[::]:0"); /* reached from both peers */
  o.peer_stream_rate = 1;
  o.peer_stream_burst = 4;
  adm a;
  adm_start(&a, &o);
  storm fast;
  storm_start(&fast, a.port, 20, 1, 0, TALK);
  ck_assert_msg(storm_wait(&a, &fast, ended_n, 15), "ended %d", fast.done);
  ck_assert_int_eq(fast.by_status[GRPC_STATUS_RESOURCE_EXHAUSTED], 15);
  ck_assert_str_eq(fast.details[GRPC_STATUS_RESOURCE_EXHAUSTED],
                   "too many new streams from this peer: more than 1 per "
                   "second after a burst of 4; retry with backoff");
  storm healthy;
  storm_start(&healthy, a.port, 2, 1, 1, TALK);
  ck_assert(storm_wait(&a, &healthy, synced_n, 2));
  /* the burst, then the one that waited for a token */
  ck_assert_msg(storm_wait(&a, &fast, synced_n, 5), "synced %d",
                fast.synced);
  mcp_transport_stats s = stats(&a);
  ck_assert_uint_eq(s.refused_peer_rate, 15);
  ck_assert_uint_eq(s.peer_rate_delayed, 1);
  ck_assert_uint_eq(s.opened, 7);
  storm_end(&a, &healthy);
  storm_end(&a, &fast);
  adm_end(&a);
}
END_TEST

/* ---- issue 21: the initial-sync slot is the service's to ask for
 * (MCP_DEF_INITIAL_SYNC) and its stream's to give back
 * (mcp_stream_ops.initial_sent): no transport knows which protocol
 * pushes a whole state first ---- */

#define SNAP_METHOD "/test.Snap/Get"
#define PLAIN_METHOD "/test.Plain/Get"

/* A session that answers its first request with its "whole state" (one
 * message) and then has nothing more: the slot is held until it went. */
typedef struct snap_sess {
  mcp_msg_builder *b;
  int asked, sent;
} snap_sess;

static int snap_recv(void *sess, const uint8_t *in, size_t len,
                     mcp_tstamp ts) {
  (void)in, (void)len, (void)ts;
  ((snap_sess *)sess)->asked = 1;
  return 0;
}

static int snap_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  (void)ts;
  snap_sess *p = sess;
  if (!p->asked || p->sent)
    return 0;
  p->sent = 1;
  mcp_msg_builder_bytes(p->b, "state", 5);
  int rv = mcp_msg_builder_finish(p->b, NULL, pmsg);
  return rv < 0 ? rv : 1;
}

static int snap_initial_sent(const void *sess, mcp_tstamp ts) {
  (void)ts;
  return ((const snap_sess *)sess)->sent;
}

static void snap_del(void *sess) {
  snap_sess *p = sess;
  mcp_msg_builder_del(p->b);
  free(p);
}

static const mcp_stream_ops snap_ops = {
    .name = "snap",
    .flags = MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE,
    .recv = snap_recv,
    .next = snap_next,
    .del = snap_del,
    .initial_sent = snap_initial_sent,
};

static int snap_open(void *ud, const mcp_peer_info *peer, mcp_tstamp ts,
                     mcp_stream **pst) {
  (void)ud, (void)peer;
  snap_sess *p = calloc(1, sizeof(*p));
  ck_assert_ptr_nonnull(p);
  ck_assert_int_eq(mcp_msg_builder_new(&p->b, NULL), 0);
  return mcp_stream_new(pst, &snap_ops, p, NULL, ts);
}

/* Initial slots held and waited for. */
static int one_held(const mcp_transport_stats *s) {
  return s->initial == 1 && s->streams == 1;
}
static int held_and_waiting(const mcp_transport_stats *s) {
  return s->initial == 1 && s->waiting_initial == 1;
}
static int plain_runs_beside(const mcp_transport_stats *s) {
  return s->initial == 1 && s->waiting_initial == 1 && s->streams == 2;
}
static int handed_on(const mcp_transport_stats *s) {
  return s->initial == 1 && s->waiting_initial == 0 && s->initial_sent == 1;
}

START_TEST(service_asks_for_an_initial_slot) {
  const mcp_service_def defs[2] = {
      {SNAP_METHOD, snap_open, NULL, MCP_DEF_INITIAL_SYNC},
      {PLAIN_METHOD, snap_open, NULL, 0}};
  ta_opts o = adm_opts("127.0.0.1:0");
  o.services = defs;
  o.nservices = 2;
  o.max_initial_pushes = 1;
  o.max_initial_pushes_per_peer = 1;
  o.initial_push_timeout = 60 * MCP_SECONDS;
  o.admission_wait_timeout = 60 * MCP_SECONDS;
  adm a;
  adm_start(&a, &o);
  /* The first call takes the one slot and holds it: it asked nothing. */
  tp_call *calls[4] = {tp_open(a.port, SNAP_METHOD), NULL, NULL, NULL};
  ck_assert(wait_calls(&a, calls, one_held));
  int holding = 0;
  ck_assert_int_eq(ta->list(a.src, count_initial, &holding), 1);
  ck_assert_int_eq(holding, 1);
  /* A second one waits for it; a call of a service without the flag
   * runs at once beside them. */
  calls[1] = tp_open(a.port, SNAP_METHOD);
  ck_assert(wait_calls(&a, calls, held_and_waiting));
  calls[2] = tp_open(a.port, PLAIN_METHOD);
  ck_assert(wait_calls(&a, calls, plain_runs_beside));
  /* The first asks and gets its state: its stream says the state went,
   * and the slot goes to the second (which then holds it, asking
   * nothing). */
  tp_call *first = calls[0], *second = calls[1], *plain = calls[2];
  tp_send_str(first, "get");
  ck_assert(tp_wait_msgs(a.env, first, 1));
  ck_assert_str_eq(tp_msg(first, 0), "state");
  ck_assert(wait_calls(&a, calls, handed_on));
  mcp_transport_stats s = stats(&a);
  ck_assert_uint_eq(s.streams, 3);
  ck_assert_uint_eq(s.initial_timeouts, 0);
  ck_assert_uint_eq(s.initial_peak, 1);
  tp_close(a.env, plain);
  tp_close(a.env, second);
  tp_close(a.env, first);
  adm_end(&a);
}
END_TEST

/* The transport under test (its adapter's table, chosen at build time:
 * -DTA_ADAPTER=ta_<transport>). */
extern const ta_transport TA_ADAPTER;

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  ta = &TA_ADAPTER;
  if (test_tls_mode() && ta_certs_make() != 0)
    return EXIT_FAILURE;
  char name[64];
  snprintf(name, sizeof(name), "%s_admission%s", ta->name,
           test_tls_mode() ? "_tls" : "");
  Suite *s = suite_create(name);
  TCase *tc = tcase_create("admission");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, storm_max_streams_and_initial_bound);
  tcase_add_test(tc, storm_new_stream_rate);
  tcase_add_test(tc, initial_slot_times_out);
  tcase_add_test(tc, waiting_calls_cancelled);
  tcase_add_test(tc, mute_streams_free_their_slots_at_push);
  tcase_add_test(tc, silent_peer_holds_only_its_share);
  tcase_add_test(tc, peer_stream_rate_refuses_past_burst_healthy_peer_runs);
  tcase_add_test(tc, waiting_stream_gets_what_it_sent_once_it_runs);
  tcase_add_test(tc, service_asks_for_an_initial_slot);
  suite_add_tcase(s, tc);
  int failed = ta_run(s);
  if (test_tls_mode())
    ta_certs_remove();
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
