/*
 * MCP's own sessions on the stream driver (mcp/engine.h, "MCP's own
 * sessions on the driver"): the rules both transports used to carry each
 * on their own, now in the core: a dialing source speaks first with
 * Istio's trigger, a half-closed stream ends with OK once its answers went
 * out, the newest sink stream of a state wins and the older one ends
 * ABORTED, and a client's finish half-closes after what is ready.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"
#include "mcp/engine.h"

#define COLL "istio/networking/v1alpha3/gateways"

static mcp_msg *msg;
static int status;
static const char *details;

#define PUMP(st, ts, can_send)                                               \
  mcp_stream_pump((st), (ts), (can_send), &msg, &status, &details)

static mcp_store *store_with_one(void) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "body-a", 1);
  return st;
}

static mcp_stream *source_stream(mcp_store *store, int dialed,
                                 const mcp_mem *mem, int *rv) {
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.store = store;
  o.mem = mem;
  o.send_trigger = !dialed; /* overridden by the rule */
  mcp_stream *st = NULL;
  *rv = mcp_source_stream_new(&st, &o, MCP_SERVICE_RESOURCE, dialed, 1);
  return st;
}

START_TEST(test_source_stream_that_dialed_speaks_first_with_the_trigger) {
  mcp_store *store = store_with_one();
  int rv;
  mcp_stream *st = source_stream(store, 1, NULL, &rv);
  ck_assert_int_eq(rv, 0);
  ck_assert_ptr_nonnull(mcp_stream_source_session(st));
  ck_assert_ptr_null(mcp_stream_sink_session(st));
  ck_assert_int_eq(PUMP(st, 2, 1), MCP_STREAM_SEND);
  Istio__Mcp__V1alpha1__Resources *r = th_decode_resources(msg);
  ck_assert_str_eq(r->collection, MCP_TRIGGER_COLLECTION);
  ck_assert_str_eq(r->nonce, "");
  th_resources_free(r);
  mcp_msg_free(msg);
  ck_assert_int_eq(PUMP(st, 2, 1), MCP_STREAM_IDLE);
  mcp_stream_del(st);

  /* A listening source waits for the sink's request. */
  st = source_stream(store, 0, NULL, &rv);
  ck_assert_int_eq(rv, 0);
  ck_assert_int_eq(PUMP(st, 2, 1), MCP_STREAM_IDLE);
  mcp_stream_del(st);
  mcp_store_del(store);
}
END_TEST

START_TEST(test_source_stream_answers_then_ends_ok_on_half_close) {
  mcp_store *store = store_with_one();
  int rv;
  mcp_stream *st = source_stream(store, 0, NULL, &rv);
  ck_assert_int_eq(rv, 0);
  size_t len;
  uint8_t *req = th_request(&len, "node", COLL, "", 0, NULL, 0, NULL);
  mcp_stream_recv(st, req, len, 2);
  free(req);
  mcp_stream_half_close(st, 2);
  /* The answer to what it asked still goes out, one at a time... */
  ck_assert_int_eq(PUMP(st, 3, 0), MCP_STREAM_IDLE);
  ck_assert_int_eq(PUMP(st, 3, 1), MCP_STREAM_SEND);
  Istio__Mcp__V1alpha1__Resources *r = th_decode_resources(msg);
  ck_assert_str_eq(r->collection, COLL);
  ck_assert_int_ge(th_find(r, "a"), 0);
  th_resources_free(r);
  mcp_msg_free(msg);
  /* ...then the stream ends with OK. */
  ck_assert_int_eq(PUMP(st, 3, 1), MCP_STREAM_END);
  ck_assert_int_eq(status, MCP_CODE_OK);
  mcp_stream_del(st);
  mcp_store_del(store);
}
END_TEST

START_TEST(test_source_stream_malformed_request_ends_the_stream) {
  mcp_store *store = store_with_one();
  int rv;
  mcp_stream *st = source_stream(store, 0, NULL, &rv);
  ck_assert_int_eq(rv, 0);
  static const uint8_t junk[] = {0x0a, 0x7f, 0x01}; /* a length past the end */
  mcp_stream_recv(st, junk, sizeof(junk), 2);
  ck_assert_int_eq(PUMP(st, 2, 0), MCP_STREAM_END);
  ck_assert_int_eq(status, mcp_error_grpc_status(MCP_ERR_MALFORMED));
  ck_assert_str_eq(details, mcp_strerror(MCP_ERR_MALFORMED));
  mcp_stream_del(st);
  mcp_store_del(store);
}
END_TEST

static const char *const COLLS[] = {COLL};

static mcp_sink_state *sink_state_of(const mcp_mem *mem, mcp_service service) {
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.mem = mem;
  o.service = service;
  o.node_id = "sink";
  o.collections = COLLS;
  o.ncollections = 1;
  mcp_sink_state *state = NULL;
  ck_assert_int_eq(mcp_sink_state_new(&state, &o), 0);
  return state;
}

static mcp_sink_state *sink_state(const mcp_mem *mem) {
  return sink_state_of(mem, MCP_SERVICE_RESOURCE);
}

static void count_wake(mcp_stream *st, void *ud) {
  (void)st;
  ++*(int *)ud;
}

START_TEST(test_sink_stream_newest_wins_and_the_older_ends_aborted) {
  mcp_sink_state *state = sink_state(NULL);
  mcp_stream *older = NULL, *newer = NULL;
  int woken = 0;
  ck_assert_int_eq(mcp_sink_stream_new(&older, state, 1), 0);
  mcp_stream_set_waker(older, count_wake, &woken);
  ck_assert_ptr_nonnull(mcp_stream_sink_session(older));
  ck_assert_ptr_null(mcp_stream_source_session(older));
  ck_assert_int_eq(PUMP(older, 1, 1), MCP_STREAM_SEND); /* its request */
  mcp_msg_free(msg);

  ck_assert_int_eq(mcp_sink_stream_new(&newer, state, 2), 0);
  ck_assert_int_eq(woken, 1);
  ck_assert_ptr_null(mcp_stream_sink_session(older));
  ck_assert_ptr_nonnull(mcp_stream_sink_session(newer));
  /* What still arrives on the older stream is not read. */
  size_t len;
  uint8_t *push = th_resources(&len, COLL, "n1", 0, NULL, NULL, NULL);
  mcp_stream_recv(older, push, len, 3);
  ck_assert_int_eq(mcp_sink_state_synced(state), 0);
  /* It ends once its sending side is free. */
  ck_assert_int_eq(PUMP(older, 3, 0), MCP_STREAM_IDLE);
  ck_assert_int_eq(PUMP(older, 3, 1), MCP_STREAM_END);
  ck_assert_int_eq(status, MCP_CODE_ABORTED);
  ck_assert_str_eq(details, "replaced by a newer stream");
  mcp_stream_del(older);

  /* The newer one runs the state: its request, then it applies a push. */
  ck_assert_int_eq(PUMP(newer, 3, 1), MCP_STREAM_SEND);
  Istio__Mcp__V1alpha1__RequestResources *q = th_decode_request(msg);
  ck_assert_str_eq(q->collection, COLL);
  istio__mcp__v1alpha1__request_resources__free_unpacked(q, NULL);
  mcp_msg_free(msg);
  mcp_stream_recv(newer, push, len, 4);
  free(push);
  ck_assert_int_eq(mcp_sink_state_synced(state), 1);
  ck_assert_int_eq(PUMP(newer, 4, 1), MCP_STREAM_SEND); /* the ACK */
  mcp_msg_free(msg);
  mcp_stream_del(newer);
  mcp_sink_state_del(state); /* no session left behind */
}
END_TEST

START_TEST(test_sink_stream_refuses_a_state_whose_session_is_not_a_stream) {
  mcp_sink_state *state = sink_state(NULL);
  mcp_sink_session *s = NULL;
  ck_assert_int_eq(mcp_sink_session_new(&s, state, 1), 0);
  mcp_stream *st = NULL;
  ck_assert_int_eq(mcp_sink_stream_new(&st, state, 1),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(st);
  mcp_sink_session_del(s);
  mcp_sink_state_del(state);
}
END_TEST

START_TEST(test_stream_finish_half_closes_after_what_is_ready) {
  mcp_sink_state *state = sink_state(NULL);
  mcp_stream *st = NULL;
  ck_assert_int_eq(mcp_sink_stream_new(&st, state, 1), 0);
  mcp_stream_finish(st);
  ck_assert_int_eq(PUMP(st, 1, 0), MCP_STREAM_IDLE); /* a send in flight */
  ck_assert_int_eq(PUMP(st, 1, 1), MCP_STREAM_SEND); /* what was ready */
  mcp_msg_free(msg);
  ck_assert_int_eq(PUMP(st, 1, 1), MCP_STREAM_HALF_CLOSE);
  ck_assert_int_eq(PUMP(st, 1, 1), MCP_STREAM_IDLE); /* once */
  mcp_stream_del(st);
  mcp_sink_state_del(state);
}
END_TEST

START_TEST(test_mcp_streams_out_of_memory_leave_nothing) {
  for (long at = 1; at < 64; ++at) {
    th_mem m;
    th_mem_init(&m, at);
    mcp_store *store = store_with_one();
    int rv;
    mcp_stream *st = source_stream(store, 1, &m.mem, &rv);
    if (rv == 0) {
      mcp_stream_del(st);
    } else {
      ck_assert_int_eq(rv, MCP_ERR_NOMEM);
      ck_assert_ptr_null(st);
    }
    ck_assert_int_eq(m.live, 0);
    mcp_store_del(store);

    th_mem_init(&m, 0);
    mcp_sink_state *state = sink_state(&m.mem);
    mcp_stream *older = NULL;
    ck_assert_int_eq(mcp_sink_stream_new(&older, state, 1), 0);
    long base = m.live;
    m.fail_at = m.count + at;
    st = NULL;
    rv = mcp_sink_stream_new(&st, state, 2);
    if (rv == 0) {
      mcp_stream_del(st);
    } else {
      ck_assert_int_eq(rv, MCP_ERR_NOMEM);
      ck_assert_ptr_null(st);
    }
    mcp_stream_del(older);
    ck_assert_int_le(m.live, base);
    mcp_sink_state_del(state);
    ck_assert_int_eq(m.live, 0);
  }
}
END_TEST

START_TEST(test_mcp_method_table_names_each_direction) {
  ck_assert_str_eq(mcp_service_method(MCP_SERVICE_RESOURCE, 1),
                   "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream");
  ck_assert_str_eq(mcp_service_method(MCP_SERVICE_RESOURCE, 0),
                   "/istio.mcp.v1alpha1.ResourceSink/EstablishResourceStream");
  ck_assert_str_eq(mcp_service_method(MCP_SERVICE_AGGREGATED, 1),
                   MCP_AGGREGATED_METHOD);
  ck_assert_str_eq(mcp_service_method(MCP_SERVICE_AGGREGATED_INCREMENTAL, 1),
                   MCP_AGGREGATED_INCREMENTAL_METHOD);
  /* Sources call sinks for RESOURCE only. */
  ck_assert_ptr_null(mcp_service_method(MCP_SERVICE_AGGREGATED, 0));
  ck_assert_ptr_null(mcp_service_method((mcp_service)7, 1));
  const char *m[4];
  ck_assert_uint_eq(mcp_service_methods(MCP_METHODS_OF_SOURCE, m), 3);
  ck_assert_str_eq(m[0], MCP_RESOURCE_SOURCE_METHOD);
  ck_assert_uint_eq(mcp_service_methods(MCP_METHODS_OF_SINK, m), 1);
  ck_assert_str_eq(m[0], MCP_RESOURCE_SINK_METHOD);
  ck_assert_uint_eq(
      mcp_service_methods(MCP_METHODS_OF_SOURCE | MCP_METHODS_OF_SINK, m), 4);
  ck_assert_uint_eq(mcp_service_methods(0, m), 0);
}
END_TEST

START_TEST(test_source_side_serves_each_service_and_dials_resource_sink) {
  mcp_store *store = store_with_one();
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.store = store;
  mcp_side *side = NULL;
  ck_assert_int_eq(mcp_side_source_new(&side, &o, NULL), 0);
  ck_assert_int_eq(mcp_side_is_source(side), 1);
  size_t n = 0;
  const mcp_service_def *defs = mcp_side_services(side, &n);
  ck_assert_uint_eq(n, 3);
  ck_assert_int_eq(mcp_service_defs_check(defs, n, NULL, 0), 0);
  for (size_t i = 0; i < n; ++i) {
    mcp_service sv = mcp_side_service_of(&defs[i]);
    ck_assert_str_eq(defs[i].method, mcp_service_method(sv, 1));
    mcp_stream *st = NULL;
    ck_assert_int_eq(defs[i].open(defs[i].user_data, NULL, 1, &st), 0);
    ck_assert_ptr_nonnull(mcp_stream_source_session(st));
    /* Listening: the sink speaks first. */
    ck_assert_int_eq(PUMP(st, 2, 1), MCP_STREAM_IDLE);
    mcp_stream_del(st);
  }
  const mcp_client_def *c = mcp_side_client(side);
  ck_assert_uint_eq(c->nslots, 1);
  ck_assert_str_eq(c->method(c->user_data, 0), MCP_RESOURCE_SINK_METHOD);
  mcp_stream *st = NULL;
  ck_assert_int_eq(c->open(c->user_data, 0, 1, &st), 1);
  /* Dialing: the trigger goes first (Istio's sinks wait for a push). */
  ck_assert_int_eq(PUMP(st, 2, 1), MCP_STREAM_SEND);
  Istio__Mcp__V1alpha1__Resources *r = th_decode_resources(msg);
  ck_assert_str_eq(r->collection, MCP_TRIGGER_COLLECTION);
  th_resources_free(r);
  mcp_msg_free(msg);
  mcp_stream_del(st);
  c->ended(c->user_data, 0, MCP_CODE_UNAVAILABLE, "gone", 3);
  mcp_side_del(side);
  mcp_store_del(store);
}
END_TEST

START_TEST(test_sink_side_serves_resource_sink_and_dials_its_service) {
  mcp_sink_state *state = sink_state(NULL);
  mcp_side *side = NULL;
  ck_assert_int_eq(mcp_side_sink_new(&side, state, 0, NULL), 0);
  ck_assert_int_eq(mcp_side_is_source(side), 0);
  size_t n = 0;
  const mcp_service_def *defs = mcp_side_services(side, &n);
  ck_assert_uint_eq(n, 1);
  ck_assert_str_eq(defs[0].method, MCP_RESOURCE_SINK_METHOD);
  /* The newest stream wins through the defs too. */
  mcp_stream *older = NULL, *newer = NULL;
  ck_assert_int_eq(defs[0].open(defs[0].user_data, NULL, 1, &older), 0);
  ck_assert_int_eq(defs[0].open(defs[0].user_data, NULL, 2, &newer), 0);
  ck_assert_ptr_null(mcp_stream_sink_session(older));
  ck_assert_ptr_nonnull(mcp_stream_sink_session(newer));
  ck_assert_int_eq(PUMP(older, 3, 1), MCP_STREAM_END);
  ck_assert_int_eq(status, MCP_CODE_ABORTED);
  mcp_stream_del(older);
  mcp_stream_del(newer);
  const mcp_client_def *c = mcp_side_client(side);
  ck_assert_str_eq(c->method(c->user_data, 0), MCP_RESOURCE_SOURCE_METHOD);
  mcp_side_del(side);
  mcp_sink_state_del(state);

  /* An aggregated state: dialed at its method; never listened for. */
  state = sink_state_of(NULL, MCP_SERVICE_AGGREGATED);
  side = NULL;
  ck_assert_int_eq(mcp_side_sink_new(&side, state, 0, NULL),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(side);
  ck_assert_int_eq(mcp_side_sink_new(&side, state, 1, NULL), 0);
  c = mcp_side_client(side);
  ck_assert_str_eq(c->method(c->user_data, 0), MCP_AGGREGATED_METHOD);
  mcp_side_del(side);
  mcp_sink_state_del(state);
  ck_assert_int_eq(mcp_side_sink_new(&side, NULL, 1, NULL),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_side_source_new(&side, NULL, NULL),
                   MCP_ERR_INVALID_ARGUMENT);
  mcp_side_del(NULL);
}
END_TEST

START_TEST(test_side_out_of_memory_leaves_nothing) {
  th_mem m;
  th_mem_init(&m, 1);
  mcp_store *store = store_with_one();
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.store = store;
  mcp_side *side = NULL;
  ck_assert_int_eq(mcp_side_source_new(&side, &o, &m.mem), MCP_ERR_NOMEM);
  ck_assert_ptr_null(side);
  ck_assert_int_eq(m.live, 0);
  th_mem_init(&m, 0);
  ck_assert_int_eq(mcp_side_source_new(&side, &o, &m.mem), 0);
  ck_assert_int_eq(m.live, 1);
  mcp_side_del(side);
  ck_assert_int_eq(m.live, 0);
  mcp_store_del(store);
}
END_TEST

/* A dialing side's backoff without jitter: 1 s, doubling, 10 s at most. */
static void fixed_backoff(mcp_side *side, mcp_tstamp now) {
  mcp_backoff_options b = mcp_backoff_defaults();
  b.initial = MCP_SECONDS;
  b.multiplier = 2.0;
  b.jitter = 0.0;
  b.max = 10 * MCP_SECONDS;
  mcp_side_set_backoff(side, &b, NULL, NULL, now);
}

START_TEST(test_mcp_dial_waits_for_backoff_after_refused_call) {
  mcp_store *store = store_with_one();
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.store = store;
  mcp_side *side = NULL;
  ck_assert_int_eq(mcp_side_source_new(&side, &o, NULL), 0);
  const mcp_tstamp t0 = 100 * MCP_SECONDS;
  fixed_backoff(side, t0);
  const mcp_client_def *c = mcp_side_client(side);
  ck_assert(c->get_expiry != NULL);
  ck_assert_uint_eq(c->get_expiry(c->user_data), t0); /* at once */
  mcp_stream *st = NULL;
  ck_assert_int_eq(c->open(c->user_data, 0, t0 - 1, &st), 0);
  ck_assert_ptr_null(st);
  ck_assert_int_eq(c->open(c->user_data, 0, t0, &st), 1);
  ck_assert_ptr_nonnull(st);
  /* While the call is open nothing else is due. */
  ck_assert_uint_eq(c->get_expiry(c->user_data), MCP_TSTAMP_MAX);
  ck_assert_int_eq(mcp_redial_is_open(mcp_side_redial(side)), 1);
  mcp_stream *again = NULL;
  ck_assert_int_eq(c->open(c->user_data, 0, t0 + 5 * MCP_SECONDS, &again), 0);
  ck_assert_ptr_null(again);

  /* Refused before anything arrived: the next call waits the backoff. */
  mcp_stream_del(st);
  const mcp_tstamp t1 = t0 + MCP_SECONDS / 100;
  c->ended(c->user_data, 0, MCP_CODE_UNAVAILABLE, "connection refused", t1);
  mcp_tstamp due = c->get_expiry(c->user_data);
  ck_assert_uint_eq(due - t1, MCP_SECONDS);
  st = NULL;
  ck_assert_int_eq(c->open(c->user_data, 0, due - 1, &st), 0);
  ck_assert_ptr_null(st);
  ck_assert_int_eq(c->open(c->user_data, 0, due, &st), 1);
  mcp_stream_del(st);
  /* Refused again: the wait grows (never a spin), up to the cap. */
  c->ended(c->user_data, 0, MCP_CODE_UNAVAILABLE, "connection refused", due);
  mcp_tstamp next = c->get_expiry(c->user_data);
  ck_assert_uint_eq(next - due, 2 * MCP_SECONDS);
  for (int i = 0; i < 6; ++i) {
    due = next;
    ck_assert_int_eq(c->open(c->user_data, 0, due, &st), 1);
    mcp_stream_del(st);
    c->ended(c->user_data, 0, MCP_CODE_UNAVAILABLE, "refused", due);
    next = c->get_expiry(c->user_data);
  }
  ck_assert_uint_eq(next - due, 10 * MCP_SECONDS);
  /* An end with no call open (a second report) changes nothing. */
  c->ended(c->user_data, 0, MCP_CODE_UNAVAILABLE, "again", due + 1);
  ck_assert_uint_eq(c->get_expiry(c->user_data), next);
  mcp_side_del(side);
  mcp_store_del(store);
}
END_TEST

START_TEST(test_mcp_dial_backoff_resets_after_first_message) {
  mcp_sink_state *state = sink_state(NULL);
  mcp_side *side = NULL;
  ck_assert_int_eq(mcp_side_sink_new(&side, state, 0, NULL), 0);
  mcp_tstamp t = 100 * MCP_SECONDS;
  fixed_backoff(side, t);
  const mcp_client_def *c = mcp_side_client(side);
  const mcp_redial *rd = mcp_side_redial(side);
  mcp_stream *st = NULL;
  /* Two refused calls: the nominal wait is 4 s. */
  for (int i = 0; i < 2; ++i) {
    ck_assert_int_eq(c->open(c->user_data, 0, t, &st), 1);
    mcp_stream_del(st);
    c->ended(c->user_data, 0, MCP_CODE_UNAVAILABLE, "refused", t);
    t = c->get_expiry(c->user_data);
  }
  ck_assert_uint_eq(mcp_backoff_nominal(mcp_redial_backoff(rd)),
                    4 * MCP_SECONDS);

  /* A call that lasts but receives nothing is no better. */
  ck_assert_int_eq(c->open(c->user_data, 0, t, &st), 1);
  ck_assert_int_eq(PUMP(st, t, 1), MCP_STREAM_SEND); /* the sink asks */
  mcp_msg_free(msg);
  t += 60 * MCP_SECONDS;
  mcp_stream_del(st);
  c->ended(c->user_data, 0, MCP_CODE_UNAVAILABLE, "idle", t);
  ck_assert_uint_eq(mcp_backoff_nominal(mcp_redial_backoff(rd)),
                    8 * MCP_SECONDS);
  t = c->get_expiry(c->user_data);

  /* A whole message received (the source's push) on a call that lasted the
   * nominal wait: the next wait goes back to the start. */
  ck_assert_int_eq(c->open(c->user_data, 0, t, &st), 1);
  ck_assert_int_eq(PUMP(st, t, 1), MCP_STREAM_SEND);
  mcp_msg_free(msg);
  ck_assert_uint_eq(mcp_redial_count(rd), 0);
  size_t len;
  uint8_t *push = th_resources(&len, COLL, "n1", 0, NULL, NULL, NULL);
  mcp_stream_recv(st, push, len, t + 1);
  free(push);
  ck_assert_int_eq(mcp_sink_state_synced(state), 1);
  ck_assert_uint_eq(mcp_redial_count(rd), 1);
  t += 9 * MCP_SECONDS;
  mcp_stream_del(st);
  c->ended(c->user_data, 0, MCP_CODE_UNAVAILABLE, "server went away", t);
  ck_assert_uint_eq(c->get_expiry(c->user_data) - t, MCP_SECONDS);

  /* A message but a call that died at once: no reset, it grows. */
  t = c->get_expiry(c->user_data);
  ck_assert_int_eq(c->open(c->user_data, 0, t, &st), 1);
  push = th_resources(&len, COLL, "n2", 0, NULL, NULL, NULL);
  mcp_stream_recv(st, push, len, t);
  free(push);
  ck_assert_uint_eq(mcp_redial_count(rd), 1);
  mcp_stream_del(st);
  c->ended(c->user_data, 0, MCP_CODE_UNAVAILABLE, "reset", t);
  ck_assert_uint_eq(c->get_expiry(c->user_data) - t, 2 * MCP_SECONDS);
  mcp_side_del(side);
  mcp_sink_state_del(state);
}
END_TEST

static Suite *mcp_stream_suite(void) {
  Suite *s = suite_create("core_mcp_stream");
  TCase *tc = tcase_create("source");
  tcase_add_test(tc, test_source_stream_that_dialed_speaks_first_with_the_trigger);
  tcase_add_test(tc, test_source_stream_answers_then_ends_ok_on_half_close);
  tcase_add_test(tc, test_source_stream_malformed_request_ends_the_stream);
  suite_add_tcase(s, tc);
  tc = tcase_create("sink");
  tcase_add_test(tc, test_sink_stream_newest_wins_and_the_older_ends_aborted);
  tcase_add_test(tc, test_sink_stream_refuses_a_state_whose_session_is_not_a_stream);
  tcase_add_test(tc, test_stream_finish_half_closes_after_what_is_ready);
  tcase_add_test(tc, test_mcp_streams_out_of_memory_leave_nothing);
  suite_add_tcase(s, tc);
  tc = tcase_create("side");
  tcase_add_test(tc, test_mcp_method_table_names_each_direction);
  tcase_add_test(tc, test_source_side_serves_each_service_and_dials_resource_sink);
  tcase_add_test(tc, test_sink_side_serves_resource_sink_and_dials_its_service);
  tcase_add_test(tc, test_side_out_of_memory_leaves_nothing);
  tcase_add_test(tc, test_mcp_dial_waits_for_backoff_after_refused_call);
  tcase_add_test(tc, test_mcp_dial_backoff_resets_after_first_message);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(mcp_stream_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
