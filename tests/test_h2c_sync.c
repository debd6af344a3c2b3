/*
 * h2c transport end to end: our sink client against our source server
 * (ResourceSource) and our source client against our sink server
 * (ResourceSink), all on one libuv loop run by the test: initial sync, a
 * store update pushed and ACKed, reconnection and resumption after a server
 * restart, routing errors seen by a client, unix sockets, updates from
 * other threads, and the reconnection backoff against a closed port.
 * With MCP_TEST_TLS=1 (test h2c_sync_tls) every connection of these tests
 * is mutual TLS instead (tests/gen_certs.sh's certificates).
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "h2c_harness.h"
#include "helper.h"
#include "mcp/h2c.h"
#include "test_certs.h"

/* A failure deadline for the waits on a condition, generous for a busy
 * 2-core machine (under the tests' 30 s); never the expected time. */
#define WAIT_MS 20000

typedef struct env {
  uv_loop_t loop;
  mcp_store *store;
  mcp_sink_state *state;
  mcp_h2c_source *src;
  mcp_h2c_sink *sink;
  uint64_t seed;
  /* stream events */
  int opened, closed;
  mcp_tstamp opened_at[8]; /* of the first streams */
  int last_status;
  char last_details[256];
  uint64_t last_id;
  int triggers_ignored;
  int source_acks, source_statuses; /* ACKs seen; closed with OK */
} env;

static const char *const colls[] = {"c1", "c2"};

static void on_stream(mcp_h2c_stream_event ev, const mcp_h2c_stream_info *i,
                      void *ud) {
  env *e = ud;
  if (ev == MCP_H2C_STREAM_OPENED) {
    if (e->opened < 8)
      e->opened_at[e->opened] = mcp_h2c_now();
    e->opened++;
    e->last_id = i->id;
    ck_assert(i->source || i->sink);
  } else {
    e->closed++;
    if (getenv("H2C_DEBUG"))
      fprintf(stderr, "closed %d: %s\n", i->status, i->details);
    e->last_status = i->status;
    e->source_statuses += i->status == 0;
    snprintf(e->last_details, sizeof(e->last_details), "%s", i->details);
    ck_assert(!i->source && !i->sink);
  }
}

static void on_event(const mcp_event *ev, void *ud) {
  env *e = ud;
  if (ev->type == MCP_EVENT_TRIGGER_IGNORED)
    e->triggers_ignored++;
  if (ev->type == MCP_EVENT_ACK)
    e->source_acks++;
}

static void env_init(env *e, int incremental) {
  memset(e, 0, sizeof(*e));
  e->seed = 7;
  ck_assert_int_eq(uv_loop_init(&e->loop), 0);
  e->store = th_store(NULL);
  ck_assert_ptr_nonnull(e->store);
  th_put(e->store, "c1", "a", "1", "A", mcp_h2c_now());
  th_put(e->store, "c1", "b", "1", "B", mcp_h2c_now());
  ck_assert_int_eq(mcp_store_add_collection(e->store, "c2"), 0);
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.node_id = "sink-1";
  so.collections = colls;
  so.ncollections = 2;
  so.incremental = incremental;
  ck_assert_int_eq(mcp_sink_state_new(&e->state, &so), 0);
}

static void env_fini(env *e) {
  if (e->src)
    mcp_h2c_source_del(e->src);
  if (e->sink)
    mcp_h2c_sink_del(e->sink);
  h2t_loop_finish(&e->loop);
  mcp_sink_state_del(e->state);
  mcp_store_del(e->store);
}

static mcp_h2c_options options(env *e, mcp_h2c_mode mode, const char *addr) {
  mcp_h2c_options o;
  mcp_h2c_options_default(&o);
  o.mode = mode;
  o.address = addr;
  o.backoff.initial = 50 * MCP_MILLISECONDS;
  o.backoff.max = 400 * MCP_MILLISECONDS;
  o.rand = th_rand;
  o.rand_user_data = &e->seed;
  o.shutdown_grace = MCP_SECONDS;
  o.on_stream = on_stream;
  o.user_data = e;
  if (test_tls_mode()) {
    int listen = mode == MCP_H2C_LISTEN;
    o.tls.cert_file = test_cert(listen ? "server.pem" : "client.pem");
    o.tls.key_file = test_cert(listen ? "server.key" : "client.key");
    o.tls.ca_file = test_cert("ca.pem");
    /* A unix socket has no host to verify: the server's DNS name. */
    if (!listen && strncmp(addr, "unix:", 5) == 0)
      o.tls.server_name = "localhost";
  }
  return o;
}

static void start_source(env *e, mcp_h2c_mode mode, const char *addr) {
  mcp_h2c_options o = options(e, mode, addr);
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = e->store;
  so.on_event = on_event;
  so.user_data = e;
  /* A fixed port can be briefly taken: with nobody listening, a dialing
   * sink's attempts may self-connect on loopback (a source port equal to
   * the target port), or a parallel test may bind it. */
  int rv = -1;
  for (int tries = 0; tries < 100; ++tries) {
    if ((rv = mcp_h2c_source_new(&e->src, &e->loop, &o, &so)) == 0)
      break;
    h2t_run_for(&e->loop, 20);
  }
  ck_assert_int_eq(rv, 0);
}

static void start_sink(env *e, mcp_h2c_mode mode, const char *addr) {
  mcp_h2c_options o = options(e, mode, addr);
  ck_assert_int_eq(mcp_h2c_sink_new(&e->sink, &e->loop, &o, e->state), 0);
}

static int synced(void *ud) {
  env *e = ud;
  return mcp_sink_state_synced(e->state);
}

/* ACKs the source has seen for c1, over its open streams. */
static void count_acks(const mcp_h2c_stream_info *i, void *ud) {
  mcp_collection_status st;
  for (size_t k = 0;
       i->source && k < mcp_source_session_collection_count(i->source); ++k) {
    ck_assert_int_eq(
        mcp_source_session_collection_status(i->source, k, mcp_h2c_now(), &st),
        0);
    if (strcmp(st.collection, "c1") == 0)
      *(uint64_t *)ud += st.acks;
  }
}

static int acked2(void *ud) {
  env *e = ud;
  uint64_t acks = 0;
  mcp_h2c_source_streams(e->src, count_acks, &acks);
  return acks >= 2 && mcp_sink_state_count(e->state, "c1") == 3;
}

static char addr_buf[64];
static const char *loopback(int port) {
  snprintf(addr_buf, sizeof(addr_buf), "127.0.0.1:%d", port);
  return addr_buf;
}

static int closed1(void *ud) { return ((env *)ud)->closed >= 1; }

static int resumed(void *ud) {
  env *e = ud;
  return mcp_sink_state_count(e->state, "c1") == 3 &&
         !mcp_sink_state_version(e->state, "c1", "a") &&
         mcp_sink_state_version(e->state, "c1", "d") && e->opened >= 2;
}

START_TEST(sink_dials_source) {
  env e;
  env_init(&e, 1);
  start_source(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  int port = mcp_h2c_source_port(e.src);
  ck_assert_int_gt(port, 0);
  start_sink(&e, MCP_H2C_DIAL, loopback(port));
  ck_assert(h2t_run_until(&e.loop, synced, &e, WAIT_MS));
  ck_assert_uint_eq(mcp_sink_state_count(e.state, "c1"), 2);
  ck_assert_uint_eq(mcp_sink_state_count(e.state, "c2"), 0);

  /* A store update on the loop thread, then notify: pushed and ACKed. */
  th_put(e.store, "c1", "c", "1", "C", mcp_h2c_now());
  mcp_h2c_source_notify(e.src);
  ck_assert(h2t_run_until(&e.loop, acked2, &e, WAIT_MS));
  mcp_h2c_stats st;
  mcp_h2c_source_stats(e.src, &st);
  ck_assert_uint_eq(st.connections, 1);
  ck_assert_uint_eq(st.streams, 1);
  ck_assert_uint_ge(st.messages_sent, 3); /* c1, c2, the update */
  ck_assert_uint_ge(st.messages_received, 4);
  /* The mode is what it says: TLS handshakes, or none. */
  if (test_tls_mode())
    ck_assert_uint_eq(st.tls_handshakes, 1);
  else
    ck_assert_uint_eq(st.tls_handshakes, 0);

  /* The source restarts; meanwhile "a" is deleted and "d" added. */
  mcp_h2c_source_del(e.src);
  e.src = NULL;
  ck_assert(h2t_run_until(&e.loop, closed1, &e, WAIT_MS));
  ck_assert_int_eq(e.last_status, MCP_CODE_UNAVAILABLE);
  ck_assert_int_eq(mcp_store_delete(e.store, "c1", "a", mcp_h2c_now()), 1);
  th_put(e.store, "c1", "d", "1", "D", mcp_h2c_now());
  start_source(&e, MCP_H2C_LISTEN, loopback(port));
  ck_assert(h2t_run_until(&e.loop, resumed, &e, WAIT_MS));
  /* The resumed stream asked with what the sink held (a, b, c). */
  size_t nj = mcp_sink_state_journal_count(e.state);
  int found = 0;
  for (size_t i = 0; i < nj; ++i) {
    mcp_journal_entry je;
    ck_assert_int_eq(mcp_sink_state_journal_entry(e.state, i, &je), 0);
    if (je.kind == MCP_EVENT_REQUEST && strcmp(je.collection, "c1") == 0 &&
        je.ninitial == 3)
      found = 1;
  }
  ck_assert(found);
  env_fini(&e);
}
END_TEST

static int source_acked_both(void *ud) {
  return ((env *)ud)->source_acks >= 2;
}

static int closed2(void *ud) { return ((env *)ud)->closed >= 2; }

/* mcp_h2c_sink_finish(): the sink's ACKs reach the source, which ends the
 * stream with OK (both ends report OK), and no new connection is made. */
START_TEST(sink_finish_half_closes_and_the_source_ends_ok) {
  env e;
  env_init(&e, 0);
  start_source(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  start_sink(&e, MCP_H2C_DIAL, loopback(mcp_h2c_source_port(e.src)));
  ck_assert(h2t_run_until(&e.loop, source_acked_both, &e, WAIT_MS));
  ck_assert_int_eq(e.opened, 2); /* the source's stream and the sink's */
  ck_assert_int_eq(mcp_h2c_sink_finish(e.sink), 0);
  ck_assert(h2t_run_until(&e.loop, closed2, &e, WAIT_MS));
  ck_assert_int_eq(e.source_statuses, 2);
  ck_assert_int_eq(e.source_acks, 2);
  h2t_run_for(&e.loop, 10 * 50); /* ten backoff delays: no new stream */
  ck_assert_int_eq(e.opened, 2);
  env_fini(&e);
}
END_TEST

/* Issue 21: a listening sink that is done (mcp-sink --exit-after-sync)
 * ends its stream with OK (trailers) once its answers are out: the source
 * has read both ACKs before the end, and the end is an event (CLOSED),
 * not a poll of what was sent. */
START_TEST(listening_sink_finish_ends_ok_after_its_answers) {
  env e;
  env_init(&e, 0);
  start_sink(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  start_source(&e, MCP_H2C_DIAL, loopback(mcp_h2c_sink_port(e.sink)));
  ck_assert(h2t_run_until(&e.loop, source_acked_both, &e, WAIT_MS));
  ck_assert_int_eq(e.opened, 2); /* the source's stream and the sink's */
  ck_assert_int_eq(mcp_h2c_sink_finish(e.sink), 0);
  ck_assert(h2t_run_until(&e.loop, closed2, &e, WAIT_MS));
  ck_assert_int_eq(e.source_statuses, 2); /* both ends: OK */
  ck_assert_int_eq(e.source_acks, 2);
  env_fini(&e);
}
END_TEST

static int both_synced_and_acked(void *ud) {
  env *e = ud;
  uint64_t acks = 0;
  mcp_h2c_source_streams(e->src, count_acks, &acks);
  return mcp_sink_state_synced(e->state) && acks >= 1;
}

START_TEST(source_dials_sink) {
  env e;
  env_init(&e, 0);
  start_sink(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  int port = mcp_h2c_sink_port(e.sink);
  start_source(&e, MCP_H2C_DIAL, loopback(port));
  ck_assert(h2t_run_until(&e.loop, both_synced_and_acked, &e, WAIT_MS));
  /* The dialing source sent the trigger; our sink NACKed it; our source
   * ignored the NACK. */
  ck_assert_int_eq(e.triggers_ignored, 1);
  th_put(e.store, "c1", "c", "1", "C", mcp_h2c_now());
  mcp_h2c_source_notify(e.src);
  ck_assert(h2t_run_until(&e.loop, acked2, &e, WAIT_MS));
  mcp_h2c_stats st;
  mcp_h2c_sink_stats(e.sink, &st);
  ck_assert_uint_eq(st.streams, 1);
  ck_assert_uint_eq(mcp_h2c_sink_streams(e.sink, NULL, NULL), 1);
  env_fini(&e);
}
END_TEST

/* A source dialing a source: the ResourceSink method is not served. */
START_TEST(unknown_method_seen_by_client) {
  env e;
  env_init(&e, 0);
  start_sink(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  int port = mcp_h2c_sink_port(e.sink);
  mcp_h2c_options o = options(&e, MCP_H2C_DIAL, loopback(port));
  mcp_sink_state *other;
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.collections = colls;
  so.ncollections = 2;
  ck_assert_int_eq(mcp_sink_state_new(&other, &so), 0);
  mcp_h2c_sink *dialer;
  ck_assert_int_eq(mcp_h2c_sink_new(&dialer, &e.loop, &o, other), 0);
  ck_assert(h2t_run_until(&e.loop, closed1, &e, WAIT_MS));
  ck_assert_int_eq(e.last_status, MCP_CODE_UNIMPLEMENTED);
  ck_assert_msg(strstr(e.last_details, "not served") != NULL, "%s",
                e.last_details);
  mcp_h2c_sink_del(dialer);
  env_fini(&e);
  mcp_sink_state_del(other);
}
END_TEST

START_TEST(unix_socket) {
  env e;
  env_init(&e, 1);
  char path[64], addr[80];
  snprintf(path, sizeof(path), "/tmp/mcp-h2c-test-%d.sock", (int)getpid());
  snprintf(addr, sizeof(addr), "unix:%s", path);
  start_source(&e, MCP_H2C_LISTEN, addr);
  ck_assert_int_eq(mcp_h2c_source_port(e.src), 0);
  start_sink(&e, MCP_H2C_DIAL, addr);
  ck_assert(h2t_run_until(&e.loop, synced, &e, WAIT_MS));
  env_fini(&e);
  ck_assert_int_ne(access(path, F_OK), 0); /* removed on shutdown */
}
END_TEST

START_TEST(dial_by_name) {
  env e;
  env_init(&e, 0);
  start_source(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  char addr[64];
  snprintf(addr, sizeof(addr), "localhost:%d", mcp_h2c_source_port(e.src));
  start_sink(&e, MCP_H2C_DIAL, addr);
  ck_assert(h2t_run_until(&e.loop, synced, &e, WAIT_MS));
  env_fini(&e);
}
END_TEST

/* Other threads: update (asynchronous) and call (waits for the loop). */
typedef struct th_ctx {
  env *e;
  atomic_int done;
  size_t seen;
} th_ctx;

static void add_x(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)ud;
  th_put(st, "c1", "x", "1", "X", ts);
}

static void add_y(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)ud;
  th_put(st, "c1", "y", "1", "Y", ts);
}

static void read_state(mcp_sink_state *s, mcp_tstamp ts, void *ud) {
  (void)ts;
  *(size_t *)ud = mcp_sink_state_count(s, "c1");
}

static void worker(void *arg) {
  th_ctx *t = arg;
  ck_assert_int_eq(mcp_h2c_source_update(t->e->src, add_x, NULL), 0);
  ck_assert_int_eq(mcp_h2c_source_call(t->e->src, add_y, NULL), 0);
  /* Polls for 20 s or more: a failure deadline (under the test's 30 s),
   * not the expected time. */
  for (int i = 0; i < 2000; ++i) {
    size_t n = 0;
    ck_assert_int_eq(mcp_h2c_sink_call(t->e->sink, read_state, &n), 0);
    if (n == 4) {
      t->seen = n;
      break;
    }
    h2t_sleep_ms(10);
  }
  atomic_store(&t->done, 1);
}

static int worker_done(void *ud) { return atomic_load(&((th_ctx *)ud)->done); }

static void noop_store(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)st;
  (void)ts;
  (void)ud;
}

START_TEST(updates_from_other_threads) {
  env e;
  env_init(&e, 0);
  start_source(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  start_sink(&e, MCP_H2C_DIAL, loopback(mcp_h2c_source_port(e.src)));
  ck_assert(h2t_run_until(&e.loop, synced, &e, WAIT_MS));
  /* On the loop thread, call would wait for itself. */
  ck_assert_int_eq(mcp_h2c_source_call(e.src, noop_store, NULL),
                   MCP_ERR_INVALID_ARGUMENT);
  th_ctx t = {.e = &e};
  uv_thread_t th;
  ck_assert_int_eq(uv_thread_create(&th, worker, &t), 0);
  int ok = h2t_run_until(&e.loop, worker_done, &t, 25000);
  uv_thread_join(&th);
  ck_assert(ok);
  ck_assert_uint_eq(t.seen, 4);
  env_fini(&e);
}
END_TEST

static int closed_five(void *ud) { return ((env *)ud)->closed >= 5; }

/* Nobody listens: attempts follow the backoff (50 ms, x1.6, 400 ms cap),
 * each one reported as a stream that closes UNAVAILABLE. Counted by
 * events, not in a time window: each gap is at least its delay's lower
 * bound (-20 % jitter), however slow the machine (it can only be late). */
START_TEST(backoff_against_closed_port) {
  env e;
  env_init(&e, 0);
  /* A port that was free a moment ago. */
  start_source(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  int port = mcp_h2c_source_port(e.src);
  mcp_h2c_source_del(e.src);
  e.src = NULL;
  h2t_run_for(&e.loop, 20);
  start_sink(&e, MCP_H2C_DIAL, loopback(port));
  ck_assert(h2t_run_until(&e.loop, closed_five, &e, 30000));
  double nominal = 50.0 * (double)MCP_MILLISECONDS;
  for (int k = 0; k + 1 < 5; ++k) {
    mcp_tstamp gap = e.opened_at[k + 1] - e.opened_at[k];
    ck_assert_msg((double)gap >= 0.8 * nominal - 2.0 * MCP_MILLISECONDS,
                  "attempt %d after %llu ns (nominal %.0f)", k + 1,
                  (unsigned long long)gap, nominal);
    nominal = nominal * 1.6 > 400.0 * MCP_MILLISECONDS
                  ? 400.0 * MCP_MILLISECONDS
                  : nominal * 1.6;
  }
  ck_assert_int_ge(e.opened, e.closed);
  ck_assert_int_eq(e.last_status, MCP_CODE_UNAVAILABLE);
  ck_assert_msg(strstr(e.last_details, "connect") != NULL, "%s",
                e.last_details);
  env_fini(&e);
}
END_TEST

/* Deleting a dialer in the middle of everything leaves nothing behind. */
START_TEST(delete_while_streaming) {
  env e;
  env_init(&e, 1);
  start_source(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  start_sink(&e, MCP_H2C_DIAL, loopback(mcp_h2c_source_port(e.src)));
  ck_assert(h2t_run_until(&e.loop, synced, &e, WAIT_MS));
  for (int i = 0; i < 20; ++i) {
    char n[16];
    snprintf(n, sizeof(n), "r%d", i);
    th_put(e.store, "c1", n, "1", "body", mcp_h2c_now());
  }
  mcp_h2c_source_notify(e.src);
  h2t_run_for(&e.loop, 1);
  mcp_h2c_sink_del(e.sink);
  e.sink = NULL;
  h2t_run_for(&e.loop, 50);
  mcp_h2c_stats st;
  mcp_h2c_source_stats(e.src, &st);
  ck_assert_uint_eq(st.streams, 0);
  ck_assert_uint_eq(st.msg_buffered, 0);
  env_fini(&e);
}
END_TEST

/* The aggregated services, on the same listener as ResourceSource. */
#define VS_TYPE "type.googleapis.com/istio.networking.v1alpha3.VirtualService"
#define VS_COLL "istio/networking/v1alpha3/virtualservices"

typedef struct agg {
  env *e;
  mcp_sink_state *state;
  size_t same;
} agg;

static void same_version(const char *name, const char *version, void *ud) {
  agg *a = ud;
  const char *v = mcp_store_version(a->e->store, VS_COLL, name);
  if (v && strcmp(v, version) == 0)
    a->same++;
}

static int agg_converged(void *ud) {
  agg *a = ud;
  a->same = 0;
  mcp_sink_state_foreach(a->state, VS_TYPE, same_version, a);
  return mcp_sink_state_synced(a->state) &&
         a->same == mcp_store_count(a->e->store, VS_COLL) &&
         mcp_sink_state_count(a->state, VS_TYPE) == a->same;
}

static void run_aggregated(mcp_service service) {
  env e;
  env_init(&e, 0);
  th_put(e.store, VS_COLL, "default/a", "1", "A", mcp_h2c_now());
  th_put(e.store, VS_COLL, "default/b", "1", "B", mcp_h2c_now());
  start_source(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  static const char *types[] = {VS_TYPE};
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.node_id = "agg";
  so.collections = types;
  so.ncollections = 1;
  so.service = service;
  agg a = {.e = &e};
  ck_assert_int_eq(mcp_sink_state_new(&a.state, &so), 0);
  mcp_h2c_options o =
      options(&e, MCP_H2C_DIAL, loopback(mcp_h2c_source_port(e.src)));
  mcp_h2c_sink *sink;
  ck_assert_int_eq(mcp_h2c_sink_new(&sink, &e.loop, &o, a.state), 0);
  ck_assert(h2t_run_until(&e.loop, agg_converged, &a, WAIT_MS));
  th_put(e.store, VS_COLL, "default/a", "2", "A2", mcp_h2c_now());
  ck_assert_int_eq(
      mcp_store_delete(e.store, VS_COLL, "default/b", mcp_h2c_now()), 1);
  mcp_h2c_source_notify(e.src);
  ck_assert(h2t_run_until(&e.loop, agg_converged, &a, WAIT_MS));
  ck_assert_uint_eq(mcp_sink_state_count(a.state, VS_TYPE), 1);
  ck_assert_int_eq(e.closed, 0);
  mcp_h2c_sink_del(sink);
  env_fini(&e);
  mcp_sink_state_del(a.state);
}

START_TEST(aggregated) { run_aggregated(MCP_SERVICE_AGGREGATED); }
END_TEST

START_TEST(aggregated_incremental) {
  run_aggregated(MCP_SERVICE_AGGREGATED_INCREMENTAL);
}
END_TEST

START_TEST(sink_listener_refuses_aggregated_state) {
  static const char *types[] = {VS_TYPE};
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.collections = types;
  so.ncollections = 1;
  so.service = MCP_SERVICE_AGGREGATED;
  mcp_sink_state *state;
  ck_assert_int_eq(mcp_sink_state_new(&state, &so), 0);
  uv_loop_t loop;
  uv_loop_init(&loop);
  mcp_h2c_options o;
  mcp_h2c_options_default(&o);
  o.address = "127.0.0.1:0";
  mcp_h2c_sink *sink = NULL;
  ck_assert_int_eq(mcp_h2c_sink_new(&sink, &loop, &o, state),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(sink);
  h2t_loop_finish(&loop);
  mcp_sink_state_del(state);
  ck_assert_str_eq(mcp_h2c_method(MCP_SERVICE_RESOURCE, 1),
                   MCP_H2C_RESOURCE_SOURCE_METHOD);
  ck_assert_str_eq(mcp_h2c_method(MCP_SERVICE_RESOURCE, 0),
                   MCP_H2C_RESOURCE_SINK_METHOD);
  ck_assert_str_eq(mcp_h2c_method(MCP_SERVICE_AGGREGATED_INCREMENTAL, 1),
                   "/istio.mcp.v1alpha1.AggregatedMeshConfigService/"
                   "IncrementalAggregatedResources");
  ck_assert_ptr_null(mcp_h2c_method(MCP_SERVICE_AGGREGATED, 0));
}
END_TEST

/* Debounce: the source session's timer (get_expiry / handle_expiry) runs
 * on the connection's uv_timer. */
typedef struct deb {
  env *e;
  uint64_t pushed_at;
} deb;

static int has_c(void *ud) {
  deb *d = ud;
  return mcp_sink_state_version(d->e->state, "c1", "c") != NULL;
}

START_TEST(debounce_timer) {
  env e;
  env_init(&e, 1);
  mcp_h2c_options o = options(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = e.store;
  so.debounce = 150 * MCP_MILLISECONDS;
  ck_assert_int_eq(mcp_h2c_source_new(&e.src, &e.loop, &o, &so), 0);
  start_sink(&e, MCP_H2C_DIAL, loopback(mcp_h2c_source_port(e.src)));
  ck_assert(h2t_run_until(&e.loop, synced, &e, WAIT_MS));
  deb d = {&e, 0};
  uint64_t t0 = uv_hrtime();
  th_put(e.store, "c1", "c", "1", "C", mcp_h2c_now());
  mcp_h2c_source_notify(e.src);
  ck_assert(h2t_run_until(&e.loop, has_c, &d, WAIT_MS));
  uint64_t took = uv_hrtime() - t0;
  ck_assert_uint_ge(took, 140 * MCP_MILLISECONDS);
  ck_assert_uint_lt(took, 2 * MCP_SECONDS);
  env_fini(&e);
}
END_TEST

START_TEST(bad_addresses) {
  env e;
  env_init(&e, 0);
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = e.store;
  mcp_h2c_source *src = NULL;
  mcp_h2c_options o = options(&e, MCP_H2C_LISTEN, "no-port");
  ck_assert_int_eq(mcp_h2c_source_new(&src, &e.loop, &o, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  o.address = "256.1.1.1:0";
  ck_assert_int_eq(mcp_h2c_source_new(&src, &e.loop, &o, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  start_source(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  o.address = loopback(mcp_h2c_source_port(e.src)); /* in use */
  errno = 0;
  ck_assert_int_eq(mcp_h2c_source_new(&src, &e.loop, &o, &so), MCP_ERR_IO);
  ck_assert_int_eq(errno, EADDRINUSE);
  ck_assert_ptr_null(src);
  so.store = NULL;
  o.address = "127.0.0.1:0";
  ck_assert_int_eq(mcp_h2c_source_new(&src, &e.loop, &o, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  env_fini(&e);
}
END_TEST

/* A port held by a plain socket, and an address of no local interface
 * (TEST-NET-1): IO with the errno, for both roles, not INVALID_ARGUMENT. */
START_TEST(port_in_use_reports_errno) {
  env e;
  env_init(&e, 0);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  ck_assert_int_eq(listen(fd, 1), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = e.store;
  mcp_h2c_options o = options(&e, MCP_H2C_LISTEN,
                              loopback(ntohs(sa.sin_port)));
  mcp_h2c_source *src = NULL;
  mcp_h2c_sink *sink = NULL;
  errno = 0;
  ck_assert_int_eq(mcp_h2c_source_new(&src, &e.loop, &o, &so), MCP_ERR_IO);
  ck_assert_int_eq(errno, EADDRINUSE);
  errno = 0;
  ck_assert_int_eq(mcp_h2c_sink_new(&sink, &e.loop, &o, e.state), MCP_ERR_IO);
  ck_assert_int_eq(errno, EADDRINUSE);
  o.address = "192.0.2.1:15010";
  errno = 0;
  ck_assert_int_eq(mcp_h2c_sink_new(&sink, &e.loop, &o, e.state), MCP_ERR_IO);
  ck_assert_int_eq(errno, EADDRNOTAVAIL);
  o.address = "unix:/nonexistent-mcp-dir/s.sock";
  errno = 0;
  ck_assert_int_eq(mcp_h2c_sink_new(&sink, &e.loop, &o, e.state), MCP_ERR_IO);
  ck_assert_int_eq(errno, ENOENT);
  ck_assert_ptr_null(src);
  ck_assert_ptr_null(sink);
  close(fd);
  env_fini(&e);
}
END_TEST

static void closed_cb(void *ud) { (*(int *)ud)++; }

static void count_update(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)st;
  (void)ts;
  (*(int *)ud)++;
}

static int one_closed(void *ud) { return *(int *)ud == 1; }

START_TEST(queue_limit_and_on_closed) {
  env e;
  env_init(&e, 0);
  int closed = 0, ran = 0;
  mcp_h2c_options o = options(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  o.max_queued_updates = 2;
  o.on_closed = closed_cb;
  o.user_data = &closed;
  o.on_stream = NULL;
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = e.store;
  ck_assert_int_eq(mcp_h2c_source_new(&e.src, &e.loop, &o, &so), 0);
  ck_assert_int_eq(mcp_h2c_source_update(e.src, count_update, &ran), 0);
  ck_assert_int_eq(mcp_h2c_source_update(e.src, count_update, &ran), 0);
  ck_assert_int_eq(mcp_h2c_source_update(e.src, count_update, &ran),
                   MCP_ERR_LIMIT);
  h2t_run_for(&e.loop, 10);
  ck_assert_int_eq(ran, 2);
  ck_assert_int_eq(mcp_h2c_source_update(e.src, count_update, &ran), 0);
  /* del() runs what is queued, then the object closes on the loop. */
  mcp_h2c_source_del(e.src);
  e.src = NULL;
  ck_assert_int_eq(ran, 3);
  ck_assert_int_eq(closed, 0);
  ck_assert(h2t_run_until(&e.loop, one_closed, &closed, 2000));
  env_fini(&e);
}
END_TEST

Suite *suite(void) {
  Suite *s = suite_create(test_tls_mode() ? "h2c_sync_tls" : "h2c_sync");
  TCase *t = tcase_create("all");
  tcase_set_timeout(t, 30);
  tcase_add_test(t, sink_dials_source);
  tcase_add_test(t, source_dials_sink);
  tcase_add_test(t, sink_finish_half_closes_and_the_source_ends_ok);
  tcase_add_test(t, listening_sink_finish_ends_ok_after_its_answers);
  tcase_add_test(t, unknown_method_seen_by_client);
  tcase_add_test(t, unix_socket);
  tcase_add_test(t, dial_by_name);
  tcase_add_test(t, updates_from_other_threads);
  tcase_add_test(t, backoff_against_closed_port);
  tcase_add_test(t, delete_while_streaming);
  tcase_add_test(t, aggregated);
  tcase_add_test(t, aggregated_incremental);
  tcase_add_test(t, sink_listener_refuses_aggregated_state);
  tcase_add_test(t, debounce_timer);
  tcase_add_test(t, bad_addresses);
  tcase_add_test(t, port_in_use_reports_errno);
  tcase_add_test(t, queue_limit_and_on_closed);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN); /* libuv writes with write(2) */
  if (test_tls_mode() && test_certs_make() != 0)
    return EXIT_FAILURE;
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  if (test_tls_mode())
    test_certs_remove();
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
