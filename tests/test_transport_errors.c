/*
 * Peer faults and message size limits, over every transport (issue 21
 * item 7; was test_grpc_errors.c, and test_grpc_limits.c but its send
 * limit): a fault ends that stream only, with a clear status; a limit
 * exceeded ends the stream RESOURCE_EXHAUSTED, and the default passes a
 * message well above gRPC's 4 MiB. Its raw peer is transport_peer.c (gRPC core), so it is built
 * where gRPC is.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"
#include "test_certs.h"
#include "transport_peer.h"
#include "transport_suite.h"

extern const ta_transport TA_ADAPTER;

/* The streams' OPENED / CLOSED at both ends, from any thread. */
typedef struct seen {
  int opened, closed, last_status;
  char last_details[256];
  int dialed_closed, dialed_status; /* at the dialing end (the sink) */
} seen;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static seen ev;

static void on_stream(mcp_stream_event kind, const mcp_stream_info *i,
                      void *ud) {
  (void)ud;
  pthread_mutex_lock(&mu);
  if (kind == MCP_STREAM_OPENED) {
    ev.opened++;
  } else if (kind == MCP_STREAM_CLOSED) {
    ev.closed++;
    ev.last_status = i->status;
    snprintf(ev.last_details, sizeof(ev.last_details), "%s", i->details);
    if (i->dialed) {
      ev.dialed_closed++;
      ev.dialed_status = i->status;
    }
  }
  pthread_mutex_unlock(&mu);
}

static seen got(void) {
  pthread_mutex_lock(&mu);
  seen s = ev;
  pthread_mutex_unlock(&mu);
  return s;
}

static void reset(void) {
  pthread_mutex_lock(&mu);
  memset(&ev, 0, sizeof(ev));
  pthread_mutex_unlock(&mu);
}

static int dialer_closed(void *ud) {
  (void)ud;
  return got().dialed_closed >= 1;
}

/* A source listening with on_stream and sending at most |send_max|, and
 * its sink dialing it taking at most |recv_max| (0: the transport's
 * defaults). */
static void start(ta_world *w, int recv_max, int send_max) {
  reset();
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  o.on_stream = on_stream;
  o.max_send_message_size = send_max;
  ta_start_source_with(w, &o);
  o = ta_opts_for(0, w->addr, NULL);
  o.on_stream = on_stream;
  o.max_recv_message_size = recv_max;
  ck_assert_int_eq(ta->sink_new(w->env, &w->sink, &o, w->state), 0);
}

/* ---- peer faults ---- */

static void put_e(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)ud;
  th_put(st, "c1", "e", "1", "epsilon", ts);
}

typedef struct has_e {
  ta_world *w;
  int found;
} has_e;

static void find_e(const char *name, const char *version, void *ud) {
  (void)version;
  if (strcmp(name, "e") == 0)
    ((has_e *)ud)->found = 1;
}

static void look_e(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  (void)ts;
  mcp_sink_state_foreach(st, "c1", find_e, ud);
}

static int sink_has_e(void *ud) {
  has_e *h = ud;
  h->found = 0;
  ck_assert_int_eq(ta->sink_call(h->w->sink, look_e, h), 0);
  return h->found;
}

START_TEST(a_malformed_request_ends_its_stream_invalid_argument) {
  ta_world w;
  ta_world_init(&w);
  start(&w, 0, 0);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));

  /* Garbage: a field tag of wire type 7, which does not exist. */
  static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x07};
  tp_call *c = tp_open(ta->port(w.src), ta->method(MCP_SERVICE_RESOURCE, 1));
  tp_send(c, garbage, sizeof(garbage), 0);
  ck_assert(tp_wait_status(w.env, c));
  ck_assert_int_eq(tp_status(c), MCP_CODE_INVALID_ARGUMENT);
  ck_assert_str_eq(tp_details(c), mcp_strerror(MCP_ERR_MALFORMED));
  tp_close(w.env, c);

  /* The other stream goes on: it gets the next change. */
  ck_assert_int_eq(ta->update(w.src, put_e, NULL), 0);
  has_e h = {&w, 0};
  ck_assert(ta->run_until(w.env, sink_has_e, &h, TA_TIMEOUT_MS));
  seen s = got();
  ck_assert_int_eq(s.opened, 3); /* the sync's two ends and the raw call */
  ck_assert_int_eq(s.closed, 1);
  ck_assert_int_eq(s.last_status, MCP_CODE_INVALID_ARGUMENT);
  ta_world_fini(&w);
}
END_TEST

START_TEST(an_unknown_method_gets_unimplemented) {
  ta_world w;
  ta_world_init(&w);
  reset();
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  o.on_stream = on_stream;
  ta_start_source_with(&w, &o);
  /* The other direction's method: this object is a source. */
  const char *methods[] = {ta->method(MCP_SERVICE_RESOURCE, 0),
                           "/no.Such/Method"};
  for (int i = 0; i < 2; i++) {
    tp_call *c = tp_open(ta->port(w.src), methods[i]);
    ck_assert(tp_wait_status(w.env, c));
    ck_assert_int_eq(tp_status(c), MCP_CODE_UNIMPLEMENTED);
    tp_close(w.env, c);
  }
  ck_assert_int_eq(got().opened, 0); /* not MCP streams */
  ta_world_fini(&w);
}
END_TEST

/* ---- a sink server replaces a stream with a newer one ---- */

/* One dialing source's streams, from any thread. */
typedef struct dialer {
  pthread_mutex_t mu;
  int opened, closed, last_status;
  char last_details[256];
} dialer;

static void on_dialer(mcp_stream_event kind, const mcp_stream_info *i,
                      void *ud) {
  dialer *d = ud;
  pthread_mutex_lock(&d->mu);
  if (kind == MCP_STREAM_OPENED) {
    d->opened++;
  } else if (kind == MCP_STREAM_CLOSED) {
    d->closed++;
    d->last_status = i->status;
    snprintf(d->last_details, sizeof(d->last_details), "%s", i->details);
  }
  pthread_mutex_unlock(&d->mu);
}

static dialer dialer_get(dialer *d) {
  pthread_mutex_lock(&d->mu);
  dialer c = *d;
  pthread_mutex_unlock(&d->mu);
  return c;
}

static int dialer_closed1(void *ud) { return dialer_get(ud).closed >= 1; }

typedef struct holds {
  ta_world *w;
  const char *want, *not;
  int has_want, has_not;
} holds;

static void holds_item(const char *name, const char *version, void *ud) {
  (void)version;
  holds *h = ud;
  h->has_want |= strcmp(name, h->want) == 0;
  h->has_not |= strcmp(name, h->not) == 0;
}

static void holds_state(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  (void)ts;
  mcp_sink_state_foreach(st, "c1", holds_item, ud);
}

/* The sink holds |want| and not |not|. */
static int holds_only(void *ud) {
  holds *h = ud;
  h->has_want = h->has_not = 0;
  ck_assert_int_eq(ta->sink_call(h->w->sink, holds_state, h), 0);
  return h->has_want && !h->has_not;
}

/* A sink state takes one session at a time: a second source dialing the
 * sink server takes over, and the first stream ends ABORTED. Each source
 * has its own store (a store belongs to one transport thread). The first
 * source is deleted once replaced (ta_opts has no backoff to keep it
 * away, as test_grpc_errors.c did with 20 s); where it redialed before
 * that (a threaded transport may), the second stream may have been
 * replaced once in turn, so its "never closed" is checked only where the
 * first did not redial. */
START_TEST(a_sink_server_replaces_a_stream_with_a_newer_one) {
  ta_world w;
  ta_world_init(&w);
  mcp_store *sa = th_store(NULL), *sb = th_store(NULL);
  th_put(sa, "c1", "a", "1", "alpha", ta->now());
  th_put(sb, "c1", "b", "1", "beta", ta->now());
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  ck_assert_int_eq(ta->sink_new(w.env, &w.sink, &o, w.state), 0);
  snprintf(w.addr, sizeof(w.addr), "127.0.0.1:%d", ta->port(w.sink));

  static dialer d1 = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, ""};
  static dialer d2 = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, ""};
  d1.opened = d1.closed = d2.opened = d2.closed = 0;
  mcp_source_options so;
  mcp_source_options_default(&so);
  o = ta_opts_for(0, w.addr, NULL);
  o.on_stream = on_dialer;
  o.on_stream_ud = &d1;
  so.store = sa;
  ta_obj *a = NULL, *b = NULL;
  ck_assert_int_eq(ta->source_new(w.env, &a, &o, &so), 0);
  holds h = {&w, "a", "b", 0, 0};
  ck_assert(ta->run_until(w.env, holds_only, &h, TA_TIMEOUT_MS));

  o.on_stream_ud = &d2;
  so.store = sb;
  ck_assert_int_eq(ta->source_new(w.env, &b, &o, &so), 0);
  ck_assert(ta->run_until(w.env, dialer_closed1, &d1, TA_TIMEOUT_MS));
  ta->del(a);
  dialer k = dialer_get(&d1);
  ck_assert_int_eq(k.last_status, MCP_CODE_ABORTED);
  ck_assert_str_eq(k.last_details, "replaced by a newer stream");
  h = (holds){&w, "b", "a", 0, 0};
  ck_assert(ta->run_until(w.env, holds_only, &h, TA_TIMEOUT_MS));
  if (k.opened == 1)
    ck_assert_int_eq(dialer_get(&d2).closed, 0);

  ta->del(b);
  ta_world_fini(&w);
  mcp_store_del(sa);
  mcp_store_del(sb);
}
END_TEST

/* ---- limits ---- */

/* The world's "big" (64 KiB) over a sink taking 16 KiB: its stream ends
 * RESOURCE_EXHAUSTED, unsynced. */
START_TEST(a_recv_limit_exceeded_gives_resource_exhausted) {
  ta_world w;
  ta_world_init(&w);
  start(&w, 16 << 10, 0);
  ck_assert(ta->run_until(w.env, dialer_closed, NULL, TA_TIMEOUT_MS));
  ck_assert_int_eq(got().dialed_status, MCP_CODE_RESOURCE_EXHAUSTED);
  ck_assert(!ta_synced(&w));
  ta_world_fini(&w);
}
END_TEST

/* The same 64 KiB from a source that sends at most 16 KiB: the sink's
 * stream ends RESOURCE_EXHAUSTED, unsynced (the source refuses to send
 * what its limit forbids, rather than the sink refusing to read it). */
START_TEST(a_send_limit_exceeded_gives_resource_exhausted) {
  ta_world w;
  ta_world_init(&w);
  start(&w, 0, 16 << 10);
  ck_assert(ta->run_until(w.env, dialer_closed, NULL, TA_TIMEOUT_MS));
  ck_assert_int_eq(got().dialed_status, MCP_CODE_RESOURCE_EXHAUSTED);
  ck_assert(!ta_synced(&w));
  ta_world_fini(&w);
}
END_TEST

/* "big" made 6 MiB (same name and version): the default limits pass it. */
START_TEST(the_default_limit_passes_a_6mib_message) {
  ta_world w;
  ta_world_init(&w);
  th_put_big(w.store, "c1", "big", "1", 6u << 20, 'y', ta->now());
  start(&w, 0, 0);
  ck_assert(ta->run_until(w.env, ta_synced, &w, 4 * TA_TIMEOUT_MS));
  ck_assert_int_eq(got().closed, 0);
  ta_world_fini(&w);
}
END_TEST

static Suite *suite(void) {
  static char name[64]; /* check keeps the pointer */
  snprintf(name, sizeof(name), "transport_errors_%s%s", ta->name,
           test_tls_mode() ? "_tls" : "");
  Suite *s = suite_create(name);
  TCase *t = tcase_create("errors");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, a_malformed_request_ends_its_stream_invalid_argument);
  tcase_add_test(t, an_unknown_method_gets_unimplemented);
  tcase_add_test(t, a_sink_server_replaces_a_stream_with_a_newer_one);
  tcase_add_test(t, a_recv_limit_exceeded_gives_resource_exhausted);
  tcase_add_test(t, a_send_limit_exceeded_gives_resource_exhausted);
  tcase_add_test(t, the_default_limit_passes_a_6mib_message);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return ta_main(&TA_ADAPTER, suite); }
