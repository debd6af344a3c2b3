/*
 * MCP sync over a transport, written once for every transport (issue 21
 * item 7; the transport: the adapter it is built with,
 * tests/transport_<name>.c): a sink dialing a listening source and a
 * source dialing a listening sink sync, follow updates and ACK them; a
 * dialing sink resumes with what it holds after the source restarts;
 * updates from other threads converge; the streams show their peer and
 * session and count their messages each way; a debounced push goes out on its
 * timer; the update queue is bounded; a finishing sink ends with OK; unix
 * sockets, names, the aggregated services, and bad or busy addresses. With
 * MCP_TEST_TLS=1 every connection is mutual TLS.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helper.h"
#include "test_certs.h"
#include "transport_suite.h"

extern const ta_transport TA_ADAPTER;

static const char *const colls[] = {"c1", "c2"};

/* ---- what the transports and the cores report, from any thread ---- */

typedef struct seen {
  pthread_mutex_t mu;
  int opened, closed, ok_closed, last_status;
  char last_details[256], peer[96];
  int tls;
  mcp_tstamp opened_at[8];
  int pushes, acks, nacks, triggers;   /* the source's core */
  int sink_acks, sink_nacks, sink_triggers; /* the sink's core */
  int dialed_closed, dialed_status; /* closes at the dialing end */
  mcp_tstamp dialed_closed_at[8];
  char accepted_peer[4][96]; /* the first accepted streams' peers */
  int accepted;
} seen;

static seen ev;

static void reset(void) {
  pthread_mutex_lock(&ev.mu);
  pthread_mutex_t mu = ev.mu;
  memset(&ev, 0, sizeof(ev));
  ev.mu = mu;
  pthread_mutex_unlock(&ev.mu);
}

static seen got(void) {
  pthread_mutex_lock(&ev.mu);
  seen s = ev;
  pthread_mutex_unlock(&ev.mu);
  return s;
}

static void on_stream(mcp_stream_event kind, const mcp_stream_info *i,
                      void *ud) {
  (void)ud;
  pthread_mutex_lock(&ev.mu);
  if (kind == MCP_STREAM_OPENED) {
    if (ev.opened < 8)
      ev.opened_at[ev.opened] = ta->now();
    ev.opened++;
    if (!i->dialed && ev.accepted < 4)
      snprintf(ev.accepted_peer[ev.accepted++], sizeof(ev.accepted_peer[0]),
               "%s", i->peer);
    ck_assert(mcp_stream_source_session(i->stream) || mcp_stream_sink_session(i->stream));
  } else {
    ev.closed++;
    ev.ok_closed += i->status == 0;
    ev.last_status = i->status;
    snprintf(ev.last_details, sizeof(ev.last_details), "%s", i->details);
    if (i->dialed) {
      if (ev.dialed_closed < 8)
        ev.dialed_closed_at[ev.dialed_closed] = ta->now();
      ev.dialed_closed++;
      ev.dialed_status = i->status;
    }
    ck_assert(!i->stream);
  }
  if (!i->dialed) /* a dialer's may be the address dialed */
    snprintf(ev.peer, sizeof(ev.peer), "%s", i->peer);
  pthread_mutex_unlock(&ev.mu);
}

static void source_event(const mcp_event *e, void *ud) {
  (void)ud;
  pthread_mutex_lock(&ev.mu);
  ev.pushes += e->type == MCP_EVENT_PUSH;
  ev.acks += e->type == MCP_EVENT_ACK;
  ev.nacks += e->type == MCP_EVENT_NACK;
  ev.triggers += e->type == MCP_EVENT_TRIGGER_IGNORED;
  pthread_mutex_unlock(&ev.mu);
}

static void sink_event(const mcp_event *e, void *ud) {
  (void)ud;
  pthread_mutex_lock(&ev.mu);
  ev.sink_acks += e->type == MCP_EVENT_ACK;
  ev.sink_nacks += e->type == MCP_EVENT_NACK;
  ev.sink_triggers += e->type == MCP_EVENT_TRIGGER_IGNORED;
  pthread_mutex_unlock(&ev.mu);
}

/* ---- a test's world: c1 {a, b}, c2 empty, a sink state for both ---- */

typedef struct env {
  ta_env *env;
  mcp_store *store;
  mcp_sink_state *state;
  ta_obj *src, *sink;
  char addr[128];
} env;

static void env_init(env *e, int incremental) {
  memset(e, 0, sizeof(*e));
  reset();
  e->env = ta->env_new();
  e->store = th_store(NULL);
  ck_assert_ptr_nonnull(e->store);
  th_put(e->store, "c1", "a", "1", "A", ta->now());
  th_put(e->store, "c1", "b", "1", "B", ta->now());
  ck_assert_int_eq(mcp_store_add_collection(e->store, "c2"), 0);
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.node_id = "sink-1";
  so.collections = colls;
  so.ncollections = 2;
  so.incremental = incremental;
  so.on_event = sink_event;
  ck_assert_int_eq(mcp_sink_state_new(&e->state, &so), 0);
}

static void env_fini(env *e) {
  if (e->sink)
    ta->del(e->sink);
  if (e->src)
    ta->del(e->src);
  ta->env_del(e->env);
  mcp_sink_state_del(e->state);
  mcp_store_del(e->store);
}

static ta_opts opts(int listen, const char *addr) {
  ta_opts o = ta_opts_for(listen, addr, NULL);
  o.on_stream = on_stream;
  /* A unix socket has no host to verify: the server's DNS name. */
  if (!listen && o.ca_file && strncmp(addr, "unix:", 5) == 0)
    o.server_name = "localhost";
  return o;
}

static void source_opts(env *e, mcp_source_options *so) {
  mcp_source_options_default(so);
  so->store = e->store;
  so->on_event = source_event;
}

static int start_source_with(env *e, const ta_opts *o,
                             const mcp_source_options *so) {
  int rv = ta->source_new(e->env, &e->src, o, so);
  if (rv == 0 && o->listen && ta->port(e->src) > 0)
    snprintf(e->addr, sizeof(e->addr), "127.0.0.1:%d", ta->port(e->src));
  return rv;
}

static void start_source(env *e, int listen, const char *addr) {
  ta_opts o = opts(listen, addr);
  mcp_source_options so;
  source_opts(e, &so);
  ck_assert_int_eq(start_source_with(e, &o, &so), 0);
}

static void start_sink(env *e, int listen, const char *addr) {
  ta_opts o = opts(listen, addr);
  ck_assert_int_eq(ta->sink_new(e->env, &e->sink, &o, e->state), 0);
  if (listen)
    snprintf(e->addr, sizeof(e->addr), "127.0.0.1:%d", ta->port(e->sink));
}

/* ---- the sink holds what the store holds ---- */

#define SNAP_MAX 128

typedef struct snap {
  const char *coll;
  int n, synced, overflow;
  char name[SNAP_MAX][16], version[SNAP_MAX][64];
} snap;

static void snap_item(const char *name, const char *version, void *ud) {
  snap *s = ud;
  if (s->n == SNAP_MAX) {
    s->overflow = 1;
    return;
  }
  snprintf(s->name[s->n], sizeof(s->name[0]), "%s", name);
  snprintf(s->version[s->n], sizeof(s->version[0]), "%s", version);
  s->n++;
}

static void snap_state(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  (void)ts;
  snap *s = ud;
  s->synced = mcp_sink_state_synced(st);
  mcp_sink_state_foreach(st, s->coll, snap_item, s);
}

static void snap_store(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)ts;
  snap *s = ud;
  mcp_store_foreach(st, s->coll, snap_item, s);
}

static int holds(const snap *s, const char *name, const char *version) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->name[i], name) == 0 &&
        (!version || strcmp(s->version[i], version) == 0))
      return 1;
  return 0;
}

static int sink_has(env *e, const char *coll, const char *name) {
  snap *s = calloc(1, sizeof(*s));
  ck_assert_ptr_nonnull(s);
  s->coll = coll;
  ck_assert_int_eq(ta->sink_call(e->sink, snap_state, s), 0);
  int r = holds(s, name, NULL);
  free(s);
  return r;
}

/* |sink| is synced, and its |sink_coll| holds the names and versions of
 * the store's |store_coll|: |want| of them (-1: any number). */
static int matches(env *e, ta_obj *sink, const char *sink_coll,
                   const char *store_coll, int want) {
  snap *a = calloc(2, sizeof(*a)), *b = a + 1;
  ck_assert_ptr_nonnull(a);
  a->coll = sink_coll;
  b->coll = store_coll;
  ck_assert_int_eq(ta->sink_call(sink, snap_state, a), 0);
  ck_assert_int_eq(ta->store_call(e->src, e->store, snap_store, b), 0);
  ck_assert(!a->overflow && !b->overflow);
  int eq = a->synced && a->n == b->n && (want < 0 || b->n == want);
  for (int i = 0; eq && i < b->n; i++)
    eq = holds(a, b->name[i], b->version[i]);
  free(a);
  return eq;
}

/* The sink is synced and holds every collection's names and versions. */
static int equal(void *ud) {
  env *e = ud;
  return matches(e, e->sink, colls[0], colls[0], -1) &&
         matches(e, e->sink, colls[1], colls[1], -1);
}

/* ---- both directions: sync, an update pushed and ACKed ---- */

static void change(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)ud;
  th_put(st, "c1", "b", "2", "B2", ts);
  th_put(st, "c1", "d", "1", "D", ts);
  ck_assert_int_eq(mcp_store_delete(st, "c1", "a", ts), 1);
  th_put(st, "c2", "z", "1", "Z", ts);
}

static int acks4(void *ud) {
  (void)ud;
  seen s = got();
  return s.acks >= 4 && s.sink_acks >= 4;
}

/* |trigger|: the source dials, and its first push is the
 * $triggerCollection Istio's sinks expect, which ours answer with the NACK
 * Istio's sources expect: both cores report it as the trigger (not a
 * rejection), and the source ignores that NACK. */
static void sync_then_update(env *e, int trigger) {
  ck_assert(ta->run_until(e->env, equal, e, TA_TIMEOUT_MS));
  ck_assert_int_ge(got().pushes, 2); /* c2 too, while empty */
  ck_assert_int_eq(ta->update(e->src, change, NULL), 0);
  ck_assert(ta->run_until(e->env, acks4, NULL, TA_TIMEOUT_MS));
  ck_assert(ta->run_until(e->env, equal, e, TA_TIMEOUT_MS));
  ck_assert(!sink_has(e, "c1", "a"));
  ck_assert(sink_has(e, "c2", "z"));
  seen s = got();
  ck_assert_int_eq(s.nacks, 0);
  ck_assert_int_eq(s.sink_nacks, 0);
  ck_assert_int_eq(s.triggers, trigger);
  ck_assert_int_eq(s.sink_triggers, trigger);
  ck_assert_int_eq(s.opened, 2); /* one stream, seen at both ends */
  ck_assert_int_eq(s.closed, 0);
  ck_assert_int_eq(strncmp(s.peer, "ipv4:127.0.0.1:", 15), 0);
}

/* The listener's stats: one stream, its messages (each way: c1, c2 and
 * the update's two, or their requests and ACKs), one connection and its
 * handshake where the transport counts them. */
static void check_listener_stats(ta_obj *listener) {
  mcp_transport_stats st;
  ck_assert_int_eq(
      ta->stats_versioned(listener, MCP_TRANSPORT_STATS_VERSION, &st), 0);
  ck_assert_uint_eq(st.streams, 1);
  ck_assert_uint_eq(ta->streams(listener, NULL), 1);
  ck_assert_uint_ge(st.messages_sent, 4);
  ck_assert_uint_ge(st.messages_received, 4);
  if (ta->counts_bytes) {
    ck_assert_uint_eq(st.connections, 1);
    ck_assert_uint_eq(st.tls_handshakes, test_tls_mode() ? 1 : 0);
  }
}

START_TEST(a_sink_dialing_a_source_syncs_and_acks_updates) {
  env e;
  env_init(&e, 1);
  start_source(&e, 1, "127.0.0.1:0");
  ck_assert_int_gt(ta->port(e.src), 0);
  start_sink(&e, 0, e.addr);
  ck_assert_int_eq(ta->port(e.sink), 0);
  sync_then_update(&e, 0);
  check_listener_stats(e.src);
  env_fini(&e);
}
END_TEST

START_TEST(a_source_dialing_a_sink_syncs_and_acks_updates) {
  env e;
  env_init(&e, 0);
  start_sink(&e, 1, "127.0.0.1:0");
  ck_assert_int_gt(ta->port(e.sink), 0);
  start_source(&e, 0, e.addr);
  sync_then_update(&e, 1);
  check_listener_stats(e.sink);
  env_fini(&e);
}
END_TEST

/* ---- updates from other threads converge ---- */

typedef struct writer {
  env *e;
  int id;
  int call_rv, sink_call_rv;
  size_t sink_count;
} writer;

static void put_job(mcp_store *st, mcp_tstamp ts, void *ud) {
  intptr_t v = (intptr_t)ud;
  char name[16], body[32];
  snprintf(name, sizeof(name), "w%d", (int)(v % 100));
  snprintf(body, sizeof(body), "v%d", (int)v);
  th_put(st, "c1", name, body, body, ts);
}

static void put_y(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)ud;
  th_put(st, "c1", "y", "1", "Y", ts);
}

static void count_c1(mcp_sink_state *s, mcp_tstamp ts, void *ud) {
  (void)ts;
  *(size_t *)ud = mcp_sink_state_count(s, "c1");
}

/* Updates (asynchronous), then a call (waits for the transport's thread)
 * and a read of the sink's state (the same), from a thread of its own. */
static void *writer_main(void *arg) {
  writer *w = arg;
  for (int i = 0; i < 200; i++) {
    intptr_t v = (intptr_t)(w->id * 10 + i % 10) + 100 * i;
    ck_assert_int_eq(ta->update(w->e->src, put_job, (void *)v), 0);
  }
  w->call_rv = ta->source_call(w->e->src, put_y, NULL);
  w->sink_count = SIZE_MAX;
  w->sink_call_rv = ta->sink_call_from(w->e->sink, count_c1, &w->sink_count);
  return NULL;
}

typedef struct writers {
  pthread_t th[4];
  writer w[4];
  pthread_mutex_t mu;
  int done;
} writers;

static void *join_all(void *arg) {
  writers *ws = arg;
  for (int i = 0; i < 4; i++)
    pthread_join(ws->th[i], NULL);
  pthread_mutex_lock(&ws->mu);
  ws->done = 1;
  pthread_mutex_unlock(&ws->mu);
  return NULL;
}

static int all_done(void *arg) {
  writers *ws = arg;
  pthread_mutex_lock(&ws->mu);
  int d = ws->done;
  pthread_mutex_unlock(&ws->mu);
  return d;
}

static void noop_store(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)st;
  (void)ts;
  (void)ud;
}

static void call_on_its_thread(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)st;
  (void)ts;
  env *e = ud;
  /* On the transport's thread, a call would wait for itself. */
  ck_assert_int_eq(ta->source_call(e->src, noop_store, NULL),
                   MCP_ERR_INVALID_ARGUMENT);
}

START_TEST(updates_from_other_threads_converge) {
  env e;
  env_init(&e, 1);
  start_source(&e, 1, "127.0.0.1:0");
  start_sink(&e, 0, e.addr);
  ck_assert(ta->run_until(e.env, equal, &e, TA_TIMEOUT_MS));
  ck_assert_int_eq(ta->store_call(e.src, e.store, call_on_its_thread, &e), 0);

  writers ws;
  memset(&ws, 0, sizeof(ws));
  pthread_mutex_init(&ws.mu, NULL);
  for (int i = 0; i < 4; i++) {
    ws.w[i].e = &e;
    ws.w[i].id = i;
    ck_assert_int_eq(pthread_create(&ws.th[i], NULL, writer_main, &ws.w[i]),
                     0);
  }
  /* The joins on a thread of their own: a loop-driven transport runs
   * while the writers wait for it. */
  pthread_t joiner;
  ck_assert_int_eq(pthread_create(&joiner, NULL, join_all, &ws), 0);
  int ok = ta->run_until(e.env, all_done, &ws, TA_TIMEOUT_MS);
  pthread_join(joiner, NULL);
  ck_assert(ok);
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(ws.w[i].call_rv, 0);
    ck_assert_int_eq(ws.w[i].sink_call_rv, 0);
    ck_assert_uint_ne(ws.w[i].sink_count, SIZE_MAX); /* it ran */
  }
  ck_assert(ta->run_until(e.env, equal, &e, TA_TIMEOUT_MS));
  ck_assert(sink_has(&e, "c1", "y"));
  pthread_mutex_destroy(&ws.mu);
  env_fini(&e);
}
END_TEST

/* ---- introspection: two sinks, two streams with peer and session ---- */

static void count_stream(const mcp_stream_info *info, void *ud) {
  int *n = ud;
  const mcp_source_session *src = mcp_stream_source_session(info->stream);
  ck_assert_ptr_nonnull(src);
  ck_assert_ptr_null(mcp_stream_sink_session(info->stream));
  ck_assert_str_eq(info->api, "mcp");
  ck_assert_int_eq(strncmp(info->peer, "ipv4:127.0.0.1:", 15), 0);
  ck_assert_int_eq(info->tls, test_tls_mode()); /* the mode holds */
  ck_assert_int_eq(info->dialed, 0);
  if (mcp_source_session_collection_count(src) > 0)
    (*n)++;
}

static int two_asked(void *ud) {
  env *e = ud;
  int n = 0;
  ck_assert_int_ge(ta->list(e->src, count_stream, &n), n);
  return n == 2;
}

START_TEST(streams_expose_peer_and_session) {
  env e;
  env_init(&e, 0);
  start_source(&e, 1, "127.0.0.1:0");
  start_sink(&e, 0, e.addr);
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.collections = colls;
  so.ncollections = 1;
  mcp_sink_state *s2;
  ck_assert_int_eq(mcp_sink_state_new(&s2, &so), 0);
  ta_opts o = opts(0, e.addr);
  ta_obj *b = NULL;
  ck_assert_int_eq(ta->sink_new(e.env, &b, &o, s2), 0);
  ck_assert(ta->run_until(e.env, two_asked, &e, TA_TIMEOUT_MS));
  ta->del(b);
  env_fini(&e);
  mcp_sink_state_del(s2);
}
END_TEST

/* ---- each stream counts the messages it received and sent ---- */

typedef struct counts {
  int n, dialed;
  uint64_t received, sent;
  mcp_tstamp opened;
} counts;

static void count_messages(const mcp_stream_info *info, void *ud) {
  counts *c = ud;
  c->n++;
  c->dialed = info->dialed;
  c->received = info->received;
  c->sent = info->sent;
  c->opened = info->opened;
}

/* The source's end got the two requests and their two ACKs and sent the
 * two pushes; the sink's end the reverse. */
static int counted_both_ways(void *ud) {
  env *e = ud;
  counts a, b;
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  ck_assert_int_ge(ta->list(e->src, count_messages, &a), 0);
  ck_assert_int_ge(ta->list(e->sink, count_messages, &b), 0);
  return a.n == 1 && !a.dialed && a.received == 4 && a.sent == 2 &&
         b.n == 1 && b.dialed && b.received == 2 && b.sent == 4;
}

static void first_opened(const mcp_stream_info *info, void *ud) {
  mcp_tstamp *t = ud;
  *t = info->opened;
}

START_TEST(stream_info_counts_messages_each_way) {
  env e;
  env_init(&e, 0);
  mcp_tstamp t0 = ta->now();
  start_source(&e, 1, "127.0.0.1:0");
  start_sink(&e, 0, e.addr);
  ck_assert(ta->run_until(e.env, counted_both_ways, &e, TA_TIMEOUT_MS));
  /* Made on the transport's clock after the test began, not later than
   * now. */
  mcp_tstamp opened = 0;
  ck_assert_int_eq(ta->list(e.src, first_opened, &opened), 1);
  ck_assert(opened >= t0 && opened <= ta->now());
  env_fini(&e);
}
END_TEST

/* ---- a debounced push goes out when the session's timer fires ---- */

static void put_late(mcp_store *st, mcp_tstamp ts, void *ud) {
  mcp_tstamp *t0 = ud;
  *t0 = ts;
  th_put(st, "c1", "late", "1", "L", ts);
}

typedef struct late {
  env *e;
  mcp_tstamp at;
} late;

static void late_seen(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  late *l = ud;
  if (!l->at && mcp_sink_state_version(st, "c1", "late"))
    l->at = ts;
}

static int has_late(void *ud) {
  late *l = ud;
  ck_assert_int_eq(ta->sink_call(l->e->sink, late_seen, l), 0);
  return l->at != 0;
}

START_TEST(a_debounced_push_waits_for_its_timer) {
  env e;
  env_init(&e, 1);
  ta_opts o = opts(1, "127.0.0.1:0");
  mcp_source_options so;
  source_opts(&e, &so);
  so.debounce = 150 * MCP_MILLISECONDS;
  so.max_delay = 150 * MCP_MILLISECONDS;
  ck_assert_int_eq(start_source_with(&e, &o, &so), 0);
  start_sink(&e, 0, e.addr);
  ck_assert(ta->run_until(e.env, equal, &e, TA_TIMEOUT_MS));
  /* Nothing else happens on the stream: only the timer can push it, and
   * not before the debounce (a slow machine can only make it later). */
  mcp_tstamp t0 = 0;
  ck_assert_int_eq(ta->update(e.src, put_late, &t0), 0);
  late l = {&e, 0};
  ck_assert(ta->run_until(e.env, has_late, &l, TA_TIMEOUT_MS));
  ck_assert_uint_gt(t0, 0);
  ck_assert_uint_ge(l.at - t0, 150 * MCP_MILLISECONDS);
  env_fini(&e);
}
END_TEST

/* ---- the update queue is bounded; del() runs what is queued ---- */

typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started, open, ran;
} gate;

static void hold(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)st;
  (void)ts;
  gate *g = ud;
  pthread_mutex_lock(&g->mu);
  g->started = 1;
  pthread_cond_broadcast(&g->cv);
  while (!g->open)
    pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static int gate_started(void *ud) {
  gate *g = ud;
  pthread_mutex_lock(&g->mu);
  int s = g->started;
  pthread_mutex_unlock(&g->mu);
  return s;
}

static gate *the_gate;

static void count_job(mcp_store *st, mcp_tstamp ts, void *ud) {
  put_job(st, ts, ud);
  pthread_mutex_lock(&the_gate->mu);
  the_gate->ran++;
  pthread_mutex_unlock(&the_gate->mu);
}

static int ran_n(void *ud) {
  pthread_mutex_lock(&the_gate->mu);
  int r = the_gate->ran;
  pthread_mutex_unlock(&the_gate->mu);
  return r == *(int *)ud;
}

START_TEST(the_update_queue_is_bounded_and_del_runs_it) {
  env e;
  env_init(&e, 0);
  gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};
  the_gate = &g;
  ta_opts o = opts(1, "127.0.0.1:0");
  o.max_queued_updates = 4;
  mcp_source_options so;
  source_opts(&e, &so);
  ck_assert_int_eq(start_source_with(&e, &o, &so), 0);
  /* A transport on its own thread is kept busy; a loop-driven one runs
   * nothing until the test turns its loop. */
  if (ta->runs_by_itself) {
    ck_assert_int_eq(ta->update(e.src, hold, &g), 0);
    ck_assert(ta->run_until(e.env, gate_started, &g, TA_TIMEOUT_MS));
  }
  for (intptr_t i = 0; i < 4; i++)
    ck_assert_int_eq(ta->update(e.src, count_job, (void *)i), 0);
  ck_assert_int_eq(ta->update(e.src, count_job, (void *)4), MCP_ERR_LIMIT);
  pthread_mutex_lock(&g.mu);
  g.open = 1;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  int four = 4;
  ck_assert(ta->run_until(e.env, ran_n, &four, TA_TIMEOUT_MS));
  /* Room again; what is queued when the source is deleted still runs. */
  ck_assert_int_eq(ta->update(e.src, count_job, (void *)5), 0);
  ta->del(e.src);
  e.src = NULL;
  ck_assert_int_eq(g.ran, 5);
  ck_assert_uint_eq(mcp_store_count(e.store, "c1"), 2 + 5);
  env_fini(&e);
}
END_TEST

/* ---- a finishing sink: both ends report OK, nothing more is dialed ---- */

static int acked_both(void *ud) {
  (void)ud;
  return got().acks >= 2;
}

static int closed2(void *ud) {
  (void)ud;
  return got().closed >= 2;
}

static void finish_then_check(env *e) {
  ck_assert(ta->run_until(e->env, acked_both, NULL, TA_TIMEOUT_MS));
  ck_assert_int_eq(got().opened, 2); /* the source's stream and the sink's */
  ck_assert_int_eq(ta->sink_finish(e->sink), 0);
  ck_assert(ta->run_until(e->env, closed2, NULL, TA_TIMEOUT_MS));
  seen s = got();
  ck_assert_int_eq(s.ok_closed, 2); /* both ends: OK */
  ck_assert_int_eq(s.acks, 2);      /* the answers came before the end */
}

static void read_clock(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  (void)st;
  *(mcp_tstamp *)ud = ts;
}

/* The sink's transport has run a turn with its own clock at |t| or later,
 * and one more since (its timers, where a redial would start, run in a
 * turn before its jobs). */
typedef struct clock_past {
  ta_obj *sink;
  mcp_tstamp t;
  int turns;
} clock_past;

static int clock_passed(void *ud) {
  clock_past *c = ud;
  mcp_tstamp now = 0;
  ck_assert_int_eq(ta->sink_call(c->sink, read_clock, &now), 0);
  c->turns += now >= c->t;
  return c->turns >= 2;
}

/* No connection left at either end (counted where the transport counts
 * them: h2c; gRPC core keeps its connections to itself). */
static int no_connection(void *ud) {
  env *e = ud;
  mcp_transport_stats a, b;
  ck_assert_int_eq(
      ta->stats_versioned(e->sink, MCP_TRANSPORT_STATS_VERSION, &a), 0);
  ck_assert_int_eq(
      ta->stats_versioned(e->src, MCP_TRANSPORT_STATS_VERSION, &b), 0);
  return a.connections == 0 && b.connections == 0;
}

/* mcp_*_sink_finish(): the sink's ACKs reach the source, which ends the
 * stream with OK, and the dialer holds no stream after it nor dials
 * another, nor keeps its connection (it calls no more on it): twenty
 * first-backoff delays later by the transport's own clock
 * (which a busy machine cannot shorten), its one stream is all it opened
 * (a cancel would have ended it CANCELLED, perhaps before the last ACK was
 * read, and redialed). */
START_TEST(a_dialing_sink_finishes_with_ok) {
  env e;
  env_init(&e, 0);
  start_source(&e, 1, "127.0.0.1:0");
  start_sink(&e, 0, e.addr);
  finish_then_check(&e);
  ck_assert_int_eq(ta->streams(e.sink, NULL), 0);
  ck_assert(ta->run_until(e.env, no_connection, &e, TA_TIMEOUT_MS));
  clock_past cp = {e.sink, ta->now() + 20 * ta->min_redial, 0};
  ck_assert(ta->run_until(e.env, clock_passed, &cp, TA_TIMEOUT_MS));
  mcp_transport_stats st;
  ck_assert_int_eq(
      ta->stats_versioned(e.sink, MCP_TRANSPORT_STATS_VERSION, &st), 0);
  ck_assert_uint_eq(st.opened, 1);
  ck_assert_int_eq(got().opened, 2); /* the source's and the sink's */
  ck_assert_int_eq(got().sink_acks, 2);
  env_fini(&e);
}
END_TEST

/* Issue 21: a listening sink that is done (mcp-sink --exit-after-sync)
 * ends its stream with OK once its answers are out: the source has read
 * both ACKs before the end, and the end is an event (CLOSED). */
START_TEST(a_listening_sink_finishes_with_ok_after_its_answers) {
  env e;
  env_init(&e, 0);
  start_sink(&e, 1, "127.0.0.1:0");
  start_source(&e, 0, e.addr);
  finish_then_check(&e);
  env_fini(&e);
}
END_TEST

/* ---- a sink dialing a sink: ResourceSource is not served there ---- */

static int closed1(void *ud) {
  (void)ud;
  return got().closed >= 1;
}

START_TEST(a_method_not_served_is_unimplemented_at_the_client) {
  env e;
  env_init(&e, 0);
  start_sink(&e, 1, "127.0.0.1:0");
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.collections = colls;
  so.ncollections = 2;
  mcp_sink_state *other;
  ck_assert_int_eq(mcp_sink_state_new(&other, &so), 0);
  ta_opts o = opts(0, e.addr);
  ta_obj *dialer = NULL;
  ck_assert_int_eq(ta->sink_new(e.env, &dialer, &o, other), 0);
  ck_assert(ta->run_until(e.env, closed1, NULL, TA_TIMEOUT_MS));
  seen s = got();
  ck_assert_int_eq(s.last_status, MCP_CODE_UNIMPLEMENTED);
  ck_assert_msg(strstr(s.last_details, ta->not_served) != NULL, "%s",
                s.last_details);
  ta->del(dialer);
  env_fini(&e);
  mcp_sink_state_del(other);
}
END_TEST

/* ---- deleting a dialer in the middle of a push leaves nothing ---- */

static void put_twenty(mcp_store *st, mcp_tstamp ts, void *ud) {
  __atomic_store_n((int *)ud, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < 20; ++i) {
    char n[16];
    snprintf(n, sizeof(n), "r%d", i);
    th_put(st, "c1", n, "1", "body", ts);
  }
}

static int flag_set(void *ud) {
  return __atomic_load_n((int *)ud, __ATOMIC_ACQUIRE);
}

static int source_idle(void *ud) {
  env *e = ud;
  mcp_transport_stats st;
  ck_assert_int_eq(
      ta->stats_versioned(e->src, MCP_TRANSPORT_STATS_VERSION, &st), 0);
  return st.streams == 0 && st.msg_buffered == 0 && got().closed >= 2;
}

START_TEST(deleting_a_dialer_while_streaming_leaves_nothing) {
  env e;
  env_init(&e, 1);
  start_source(&e, 1, "127.0.0.1:0");
  start_sink(&e, 0, e.addr);
  ck_assert(ta->run_until(e.env, equal, &e, TA_TIMEOUT_MS));
  int ran = 0;
  ck_assert_int_eq(ta->update(e.src, put_twenty, &ran), 0);
  /* Deleted once the update ran: its pushes are on their way. */
  ck_assert(ta->run_until(e.env, flag_set, &ran, TA_TIMEOUT_MS));
  ta->del(e.sink);
  e.sink = NULL;
  /* The source sees the stream end (an event) and holds nothing of it. */
  ck_assert(ta->run_until(e.env, source_idle, &e, TA_TIMEOUT_MS));
  env_fini(&e);
}
END_TEST

/* ---- keepalive: an idle stream with client pings every 50 ms (and a
 * server that allows them) stays open and keeps working ---- */

static int never(void *ud) {
  (void)ud;
  return 0;
}

static int opened2(void *ud) {
  (void)ud;
  return got().opened == 2;
}

START_TEST(keepalive_pings_keep_an_idle_stream_open) {
  env e;
  env_init(&e, 1);
  ta_opts o = opts(1, "127.0.0.1:0");
  o.min_recv_ping_interval_ms = 25;
  mcp_source_options so;
  source_opts(&e, &so);
  ck_assert_int_eq(start_source_with(&e, &o, &so), 0);
  o = opts(0, e.addr);
  o.keepalive_time_ms = 50;
  /* What is tested is that the pings do not end the stream (the server
   * allows them); an ack slowed by a busy machine must not either. */
  o.keepalive_timeout_ms = 20000;
  o.keepalive_permit_without_calls = 1;
  ck_assert_int_eq(ta->sink_new(e.env, &e.sink, &o, e.state), 0);
  ck_assert(ta->run_until(e.env, equal, &e, TA_TIMEOUT_MS));
  ck_assert(ta->run_until(e.env, opened2, NULL, TA_TIMEOUT_MS));
  /* The stimulus, not a window for an expected event: six ping intervals
   * with no data. A slow machine can only send fewer pings in it (no
   * transport tells of its pings), never make the asserts below fail. */
  ck_assert(!ta->run_until(e.env, never, NULL, 300));
  ck_assert_int_eq(got().closed, 0);
  mcp_tstamp t0 = 0;
  ck_assert_int_eq(ta->update(e.src, put_late, &t0), 0);
  late l = {&e, 0};
  ck_assert(ta->run_until(e.env, has_late, &l, TA_TIMEOUT_MS));
  ck_assert_int_eq(got().opened, 2); /* the same stream */
  env_fini(&e);
}
END_TEST

/* ---- addresses ---- */

START_TEST(a_unix_socket_serves_and_goes_on_shutdown) {
  env e;
  env_init(&e, 1);
  char path[64], addr[80];
  snprintf(path, sizeof(path), "/tmp/mcp-sync-%s-%d.sock", ta->name,
           (int)getpid());
  snprintf(addr, sizeof(addr), "unix:%s", path);
  start_source(&e, 1, addr);
  ck_assert_int_eq(ta->port(e.src), 0);
  start_sink(&e, 0, addr);
  ck_assert(ta->run_until(e.env, equal, &e, TA_TIMEOUT_MS));
  ck_assert_int_eq(strncmp(got().peer, "unix:", 5), 0);
  env_fini(&e);
  ck_assert_int_ne(access(path, F_OK), 0); /* removed on shutdown */
}
END_TEST

START_TEST(a_sink_dials_a_name) {
  env e;
  env_init(&e, 0);
  start_source(&e, 1, "127.0.0.1:0");
  char addr[64];
  snprintf(addr, sizeof(addr), "localhost:%d", ta->port(e.src));
  start_sink(&e, 0, addr);
  ck_assert(ta->run_until(e.env, equal, &e, TA_TIMEOUT_MS));
  env_fini(&e);
}
END_TEST

/* Bad addresses are INVALID_ARGUMENT; a port in use is IO with errno
 * EADDRINUSE; *pobj untouched (the adapter checks it). */
START_TEST(bad_addresses_are_refused) {
  env e;
  env_init(&e, 0);
  mcp_source_options so;
  source_opts(&e, &so);
  ta_obj *x = NULL;
  ta_opts o = opts(1, "no-port");
  ck_assert_int_eq(ta->source_new(e.env, &x, &o, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  o.address = "256.1.1.1:0";
  ck_assert_int_eq(ta->source_new(e.env, &x, &o, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  start_source(&e, 1, "127.0.0.1:0");
  o.address = e.addr; /* in use */
  errno = 0;
  ck_assert_int_eq(ta->source_new(e.env, &x, &o, &so), MCP_ERR_IO);
  ck_assert_int_eq(errno, EADDRINUSE);
  so.store = NULL;
  o.address = "127.0.0.1:0";
  ck_assert_int_eq(ta->source_new(e.env, &x, &o, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(x);
  env_fini(&e);
}
END_TEST

/* A port held by a plain socket, and an address of no local interface
 * (TEST-NET-1): IO with the errno, for both roles, not INVALID_ARGUMENT. */
START_TEST(a_port_in_use_reports_errno) {
  env e;
  env_init(&e, 0);
  int port;
  int fd = ta_hold_port(&port);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  mcp_source_options so;
  source_opts(&e, &so);
  ta_opts o = opts(1, addr);
  ta_obj *x = NULL;
  errno = 0;
  ck_assert_int_eq(ta->source_new(e.env, &x, &o, &so), MCP_ERR_IO);
  ck_assert_int_eq(errno, EADDRINUSE);
  errno = 0;
  ck_assert_int_eq(ta->sink_new(e.env, &x, &o, e.state), MCP_ERR_IO);
  ck_assert_int_eq(errno, EADDRINUSE);
  o.address = "192.0.2.1:15010";
  errno = 0;
  ck_assert_int_eq(ta->sink_new(e.env, &x, &o, e.state), MCP_ERR_IO);
  ck_assert_int_eq(errno, EADDRNOTAVAIL);
  o.address = "unix:/nonexistent-mcp-dir/s.sock";
  errno = 0;
  ck_assert_int_eq(ta->sink_new(e.env, &x, &o, e.state), MCP_ERR_IO);
  ck_assert_int_eq(errno, ENOENT);
  ck_assert_ptr_null(x);
  close(fd);
  env_fini(&e);
}
END_TEST

/* ---- the aggregated services, on the same listener ---- */

#define VS_TYPE "type.googleapis.com/istio.networking.v1alpha3.VirtualService"
#define VS_COLL "istio/networking/v1alpha3/virtualservices"

typedef struct agg {
  env *e;
  mcp_sink_state *state;
  ta_obj *sink;
  int want; /* names in the store once the update ran */
} agg;

static int agg_converged(void *ud) {
  agg *a = ud;
  return matches(a->e, a->sink, VS_TYPE, VS_COLL, a->want);
}

static void count_vs(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  (void)ts;
  *(size_t *)ud = mcp_sink_state_count(st, VS_TYPE);
}

static void agg_change(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)ud;
  th_put(st, VS_COLL, "default/a", "2", "A2", ts);
  ck_assert_int_eq(mcp_store_delete(st, VS_COLL, "default/b", ts), 1);
}

static void run_aggregated(mcp_service service) {
  env e;
  env_init(&e, 0);
  th_put(e.store, VS_COLL, "default/a", "1", "A", ta->now());
  th_put(e.store, VS_COLL, "default/b", "1", "B", ta->now());
  start_source(&e, 1, "127.0.0.1:0");
  static const char *types[] = {VS_TYPE};
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.node_id = "agg";
  so.collections = types;
  so.ncollections = 1;
  so.service = service;
  agg a = {.e = &e, .want = 2};
  ck_assert_int_eq(mcp_sink_state_new(&a.state, &so), 0);
  ta_opts o = opts(0, e.addr);
  ck_assert_int_eq(ta->sink_new(e.env, &a.sink, &o, a.state), 0);
  ck_assert(ta->run_until(e.env, agg_converged, &a, TA_TIMEOUT_MS));
  ck_assert_int_eq(ta->update(e.src, agg_change, NULL), 0);
  a.want = 1;
  ck_assert(ta->run_until(e.env, agg_converged, &a, TA_TIMEOUT_MS));
  size_t n = 0;
  ck_assert_int_eq(ta->sink_call(a.sink, count_vs, &n), 0);
  ck_assert_uint_eq(n, 1);
  ck_assert_int_eq(got().opened, 2); /* one stream, seen at both ends */
  ck_assert_int_eq(got().closed, 0);
  ta->del(a.sink);
  env_fini(&e);
  mcp_sink_state_del(a.state);
}

START_TEST(aggregated_resources_sync_on_the_mcp_listener) {
  run_aggregated(MCP_SERVICE_AGGREGATED);
}
END_TEST

START_TEST(incremental_aggregated_resources_sync_on_the_mcp_listener) {
  run_aggregated(MCP_SERVICE_AGGREGATED_INCREMENTAL);
}
END_TEST

/* A listening sink serves ResourceSink alone: an aggregated state is
 * refused; and the methods each service is called on. */
START_TEST(a_listening_sink_refuses_an_aggregated_state) {
  static const char *types[] = {VS_TYPE};
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.collections = types;
  so.ncollections = 1;
  so.service = MCP_SERVICE_AGGREGATED;
  mcp_sink_state *state;
  ck_assert_int_eq(mcp_sink_state_new(&state, &so), 0);
  ta_env *env = ta->env_new();
  ta_opts o = opts(1, "127.0.0.1:0");
  ta_obj *sink = NULL;
  ck_assert_int_eq(ta->sink_new(env, &sink, &o, state),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(sink);
  ta->env_del(env);
  mcp_sink_state_del(state);
  ck_assert_str_eq(ta->method(MCP_SERVICE_RESOURCE, 1),
                   "/istio.mcp.v1alpha1.ResourceSource/"
                   "EstablishResourceStream");
  ck_assert_str_eq(ta->method(MCP_SERVICE_RESOURCE, 0),
                   "/istio.mcp.v1alpha1.ResourceSink/"
                   "EstablishResourceStream");
  ck_assert_str_eq(ta->method(MCP_SERVICE_AGGREGATED, 1),
                   "/istio.mcp.v1alpha1.AggregatedMeshConfigService/"
                   "StreamAggregatedResources");
  ck_assert_str_eq(ta->method(MCP_SERVICE_AGGREGATED_INCREMENTAL, 1),
                   "/istio.mcp.v1alpha1.AggregatedMeshConfigService/"
                   "IncrementalAggregatedResources");
  ck_assert_ptr_null(ta->method(MCP_SERVICE_AGGREGATED, 0));
}
END_TEST

/* ---- rest ---- */

static int dialer_closed(void *ud) {
  (void)ud;
  return got().dialed_closed >= 1;
}

/* Synced again on a second stream (both ends opened it). */
static int resumed(void *ud) {
  env *e = ud;
  return got().opened >= 4 && matches(e, e->sink, "c1", "c1", -1);
}

/* c1's newest request on a new stream: how many versions it carried. */
static void newest_initial(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  (void)ts;
  long *n = ud;
  for (size_t i = 0; i < mcp_sink_state_journal_count(st); i++) {
    mcp_journal_entry je;
    ck_assert_int_eq(mcp_sink_state_journal_entry(st, i, &je), 0);
    if (je.kind == MCP_EVENT_REQUEST && strcmp(je.collection, "c1") == 0)
      *n = (long)je.ninitial;
  }
}

/* A dialing sink outlives its source: the stream ends UNAVAILABLE, the
 * sink redials, and when the source is back on the same port (with "a"
 * deleted, "b" changed and "d" added meanwhile) it resumes with the
 * versions it held and ends up with the store's content. */
START_TEST(a_dialing_sink_resumes_with_what_it_holds) {
  env e;
  env_init(&e, 1); /* incremental: its requests carry what it holds */
  start_source(&e, 1, "127.0.0.1:0");
  start_sink(&e, 0, e.addr);
  ck_assert(ta->run_until(e.env, equal, &e, TA_TIMEOUT_MS));
  ta->del(e.src);
  e.src = NULL;
  ck_assert(ta->run_until(e.env, dialer_closed, NULL, TA_TIMEOUT_MS));
  ck_assert_int_eq(got().dialed_status, MCP_CODE_UNAVAILABLE);
  /* Nobody serves the store now: changed directly. */
  mcp_tstamp ts = ta->now();
  ck_assert_int_eq(mcp_store_delete(e.store, "c1", "a", ts), 1);
  th_put(e.store, "c1", "b", "2", "B2", ts);
  th_put(e.store, "c1", "d", "1", "D", ts);
  /* The port can be briefly taken: with nobody listening, the sink's
   * attempts may self-connect on loopback (a source port equal to the
   * target port), or a parallel test may bind it. */
  ta_opts o = opts(1, e.addr);
  mcp_source_options so;
  source_opts(&e, &so);
  int rv = -1;
  for (int tries = 0; tries < 100 && rv != 0; ++tries)
    if ((rv = ta->source_new(e.env, &e.src, &o, &so)) != 0)
      ta->run_until(e.env, never, NULL, 20);
  ck_assert_int_eq(rv, 0);
  ck_assert(ta->run_until(e.env, resumed, &e, TA_TIMEOUT_MS));
  ck_assert(!sink_has(&e, "c1", "a")); /* deleted while away: gone */
  ck_assert(sink_has(&e, "c1", "d"));
  long n = -1;
  ck_assert_int_eq(ta->sink_call(e.sink, newest_initial, &n), 0);
  ck_assert_int_eq(n, 2); /* a and b, as held */
  ck_assert_int_ge(got().dialed_closed, 1);
  env_fini(&e);
}
END_TEST

static int five_attempts_ended(void *ud) {
  (void)ud;
  return got().dialed_closed >= 5;
}

/* Issue 21: MCP's dialers run their side's client def on the transports'
 * one client path, so a call that ends while its connection stands is
 * made again on that connection (before 0.9.0 each MCP call had a
 * connection of its own). The source refuses the first call (no store for
 * its node yet: the session's PROTOCOL error, not a lost connection);
 * the sink calls again after its backoff and syncs, from the same
 * address and port. */
static int refusals;

static mcp_store *store_after_one_refusal(const mcp_sink_node *node,
                                          void *ud) {
  (void)node;
  return __atomic_fetch_add(&refusals, 1, __ATOMIC_SEQ_CST) == 0 ? NULL : ud;
}

/* Accepted twice, and the sink synced with c1's two resources (read
 * from the sink alone: the source's store is the callback's, which a
 * transport's store call does not reach). */
static int accepted2_and_synced(void *ud) {
  env *e = ud;
  if (got().accepted < 2)
    return 0;
  snap *s = calloc(1, sizeof(*s));
  ck_assert_ptr_nonnull(s);
  s->coll = "c1";
  ck_assert_int_eq(ta->sink_call(e->sink, snap_state, s), 0);
  int ok = s->synced && s->n == 2 && holds(s, "a", "1") && holds(s, "b", "1");
  free(s);
  return ok;
}

START_TEST(a_dialing_sink_calls_again_on_its_connection) {
  env e;
  env_init(&e, 0);
  refusals = 0;
  ta_opts o = opts(1, "127.0.0.1:0");
  mcp_source_options so;
  source_opts(&e, &so);
  so.store = NULL; /* every node's store is the callback's */
  so.select_store = store_after_one_refusal;
  so.select_store_user_data = e.store;
  ck_assert_int_eq(start_source_with(&e, &o, &so), 0);
  start_sink(&e, 0, e.addr);
  ck_assert(ta->run_until(e.env, accepted2_and_synced, &e, TA_TIMEOUT_MS));
  seen s = got();
  ck_assert_int_ge(s.dialed_closed, 1); /* the refused call, at the sink */
  ck_assert_int_ne(s.dialed_status, MCP_CODE_UNAVAILABLE);
  ck_assert_int_eq(strncmp(s.accepted_peer[0], "ipv4:127.0.0.1:", 15), 0);
  ck_assert_str_eq(s.accepted_peer[1], s.accepted_peer[0]);
  env_fini(&e);
}
END_TEST

/* Nobody listens: each attempt is reported as a stream closing
 * UNAVAILABLE, and the delays between them grow by the backoff's 1.6
 * (both transports', docs/protocol.md; the adapters' caps are above these
 * four). Counted by events, not in a time window: each gap is at least
 * its delay's lower bound (less 2 ms of clock slack), however slow the
 * machine (it can only be late). */
START_TEST(redials_follow_the_backoff_against_a_closed_port) {
  env e;
  env_init(&e, 0);
  start_source(&e, 1, "127.0.0.1:0"); /* a port that was free a moment ago */
  ta->del(e.src);
  e.src = NULL;
  start_sink(&e, 0, e.addr);
  ck_assert(ta->run_until(e.env, five_attempts_ended, NULL, TA_TIMEOUT_MS));
  seen s = got();
  double bound = (double)ta->min_redial;
  for (int k = 0; k + 1 < 5; ++k) {
    mcp_tstamp gap = s.dialed_closed_at[k + 1] - s.dialed_closed_at[k];
    ck_assert_msg((double)gap >= bound - 2.0 * MCP_MILLISECONDS,
                  "attempt %d after %llu ns (bound %.0f)", k + 1,
                  (unsigned long long)gap, bound);
    bound *= 1.6;
  }
  ck_assert_int_eq(s.dialed_status, MCP_CODE_UNAVAILABLE);
  ck_assert_msg(strstr(s.last_details, "onnect") != NULL, "%s",
                s.last_details);
  env_fini(&e);
}
END_TEST

static Suite *suite(void) {
  static char name[64]; /* check keeps the pointer */
  snprintf(name, sizeof(name), "transport_sync_%s%s", ta->name,
           test_tls_mode() ? "_tls" : "");
  Suite *s = suite_create(name);
  TCase *t = tcase_create("sync");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, a_sink_dialing_a_source_syncs_and_acks_updates);
  tcase_add_test(t, a_source_dialing_a_sink_syncs_and_acks_updates);
  tcase_add_test(t, updates_from_other_threads_converge);
  tcase_add_test(t, streams_expose_peer_and_session);
  tcase_add_test(t, stream_info_counts_messages_each_way);
  tcase_add_test(t, a_debounced_push_waits_for_its_timer);
  tcase_add_test(t, the_update_queue_is_bounded_and_del_runs_it);
  tcase_add_test(t, a_dialing_sink_finishes_with_ok);
  tcase_add_test(t, a_listening_sink_finishes_with_ok_after_its_answers);
  tcase_add_test(t, keepalive_pings_keep_an_idle_stream_open);
  tcase_add_test(t, a_method_not_served_is_unimplemented_at_the_client);
  tcase_add_test(t, deleting_a_dialer_while_streaming_leaves_nothing);
  tcase_add_test(t, a_unix_socket_serves_and_goes_on_shutdown);
  tcase_add_test(t, a_sink_dials_a_name);
  tcase_add_test(t, bad_addresses_are_refused);
  tcase_add_test(t, a_port_in_use_reports_errno);
  tcase_add_test(t, aggregated_resources_sync_on_the_mcp_listener);
  tcase_add_test(t, incremental_aggregated_resources_sync_on_the_mcp_listener);
  tcase_add_test(t, a_listening_sink_refuses_an_aggregated_state);
  tcase_add_test(t, a_dialing_sink_resumes_with_what_it_holds); /* rest */
  tcase_add_test(t, redials_follow_the_backoff_against_a_closed_port);
  tcase_add_test(t, a_dialing_sink_calls_again_on_its_connection);
  suite_add_tcase(s, t);
  if (ta->add_sync_tests)
    ta->add_sync_tests(s);
  return s;
}

int main(void) { return ta_main(&TA_ADAPTER, suite); }
