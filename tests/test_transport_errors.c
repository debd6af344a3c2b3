/*
 * Peer faults and message size limits, over every transport (issue 21
 * item 7; was test_grpc_errors.c and test_grpc_limits.c): a fault ends
 * that stream only, with a clear status; a limit exceeded ends the stream
 * RESOURCE_EXHAUSTED, and the default passes a message well above gRPC's
 * 4 MiB. Its raw peer is transport_peer.c (gRPC core), so it is built
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

static void on_stream(int kind, const mcp_stream_info *i, void *ud) {
  (void)ud;
  pthread_mutex_lock(&mu);
  if (kind == TA_STREAM_OPENED) {
    ev.opened++;
  } else if (kind == TA_STREAM_CLOSED) {
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

/* A source listening with on_stream, and its sink dialing it with
 * |recv_max| (0: the transport's default). */
static void start(ta_world *w, int recv_max) {
  reset();
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  o.on_stream = on_stream;
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
  start(&w, 0);
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

/* ---- limits ---- */

/* The world's "big" (64 KiB) over a sink taking 16 KiB: its stream ends
 * RESOURCE_EXHAUSTED, unsynced. */
START_TEST(a_recv_limit_exceeded_gives_resource_exhausted) {
  ta_world w;
  ta_world_init(&w);
  start(&w, 16 << 10);
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
  size_t n = 6u << 20;
  char *body = malloc(n + 1);
  ck_assert_ptr_nonnull(body);
  memset(body, 'y', n);
  body[n] = '\0';
  th_put(w.store, "c1", "big", "1", body, ta->now());
  free(body);
  start(&w, 0);
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
  tcase_add_test(t, a_recv_limit_exceeded_gives_resource_exhausted);
  tcase_add_test(t, the_default_limit_passes_a_6mib_message);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN); /* libuv writes with write(2) */
  ta = &TA_ADAPTER;
  if (test_tls_mode() && ta_certs_make() != 0)
    return EXIT_FAILURE;
  int failed = ta_run(suite());
  if (test_tls_mode())
    ta_certs_remove();
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
