/*
 * A client that half-closes its side of a ResourceSource stream still gets
 * the answers to what it sent, then status OK: the source stops reading but
 * sends what the session has, and only then ends the stream. Over every
 * transport (issue 21 item 7; was test_grpc_halfclose.c, whose two
 * finishing-sink tests are the sync suite's *_finishes_with_ok).
 *
 * The client is the suite's raw peer (gRPC core, transport_peer.c): the
 * last request and the half-close go out in one batch, as curl or h2load
 * send them (one body, END_STREAM on its last DATA frame). Built where gRPC
 * is; with MCP_TEST_TLS=1 every connection is mutual TLS.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helper.h"
#include "test_certs.h"
#include "transport_peer.h"
#include "transport_suite.h"

extern const ta_transport TA_ADAPTER;

/* The source's streams, from its thread. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int opened, closed, closed_ok;

static void on_stream(mcp_stream_event kind, const mcp_stream_info *i,
                      void *ud) {
  (void)ud;
  pthread_mutex_lock(&mu);
  if (kind == MCP_STREAM_OPENED) {
    opened++;
  } else if (kind == MCP_STREAM_CLOSED) {
    closed++;
    closed_ok += i->status == 0;
  }
  pthread_mutex_unlock(&mu);
}

/* A listening source on |store|: its env, object and port. */
typedef struct hc_world {
  ta_env *env;
  mcp_store *store;
  ta_obj *src;
  int port;
} hc_world;

static void hc_start(hc_world *w) {
  pthread_mutex_lock(&mu);
  opened = closed = closed_ok = 0;
  pthread_mutex_unlock(&mu);
  w->env = ta->env_new();
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  o.on_stream = on_stream;
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = w->store;
  ck_assert_int_eq(ta->source_new(w->env, &w->src, &o, &so), 0);
  w->port = ta->port(w->src);
  ck_assert_int_gt(w->port, 0);
}

static int all_closed(void *ud) {
  int want = *(int *)ud;
  pthread_mutex_lock(&mu);
  int done = closed >= want;
  pthread_mutex_unlock(&mu);
  return done;
}

/* The source saw each of its |streams| end, with the OK it sent. */
static void hc_stop(hc_world *w, int streams) {
  ck_assert(ta->run_until(w->env, all_closed, &streams, TA_TIMEOUT_MS));
  pthread_mutex_lock(&mu);
  ck_assert_int_eq(opened, streams);
  ck_assert_int_eq(closed, streams);
  ck_assert_int_eq(closed_ok, streams);
  pthread_mutex_unlock(&mu);
  ta->del(w->src);
  ta->env_del(w->env);
  mcp_store_del(w->store);
}

/* What one call got: per collection of the request, its answers and the
 * resources in the first; the messages, their bytes, the status. */
typedef struct hc_result {
  int status;
  char details[256];
  int messages;
  long bytes;
  int answers[8], nres[8];
} hc_result;

/* One ResourceSource call: a first request for each of |colls|, the last
 * with the half-close in the same batch; then every message until the
 * source ends the call, and its status. */
static void hc_call(hc_world *w, const char *const *colls, int ncolls,
                    hc_result *r) {
  memset(r, 0, sizeof(*r));
  tp_call *c = tp_open(w->port, MCP_RESOURCE_SOURCE_METHOD);
  for (int i = 0; i < ncolls; i++) {
    size_t len;
    uint8_t *req = th_request(&len, "halfclose-client", colls[i], "", 0,
                              NULL, 0, NULL);
    tp_send(c, req, len, i == ncolls - 1);
    free(req);
  }
  /* The status and the end of the receive: every message counted. */
  ck_assert(tp_wait_ended(w->env, c));
  r->status = tp_status(c);
  snprintf(r->details, sizeof(r->details), "%s", tp_details(c));
  r->messages = tp_nmsgs(c);
  for (int m = 0; m < r->messages; m++) {
    size_t len = tp_msg_len(c, m);
    r->bytes += (long)len;
    Istio__Mcp__V1alpha1__Resources *res =
        istio__mcp__v1alpha1__resources__unpack(
            NULL, len, (const uint8_t *)tp_msg(c, m));
    ck_assert_ptr_nonnull(res);
    for (int i = 0; i < ncolls; i++)
      if (strcmp(res->collection, colls[i]) == 0 && r->answers[i]++ == 0)
        r->nres[i] = (int)res->n_resources;
    istio__mcp__v1alpha1__resources__free_unpacked(res, NULL);
  }
  tp_close(w->env, c);
}

static const char *const one[] = {"h1"};

/* Many times: the answer used to be lost when the half-close was read
 * before the session's answer was handed to the transport. 12 bodies of
 * 64 KiB: an answer of many DATA frames. */
START_TEST(a_request_and_half_close_in_one_batch_get_the_full_state) {
  hc_world w = {.store = th_store(NULL)};
  char name[32];
  for (int i = 0; i < 12; i++) {
    snprintf(name, sizeof(name), "r%02d", i);
    th_put_big(w.store, "h1", name, "1", 64 * 1024, 'x', ta->now());
  }
  hc_start(&w);
  for (int round = 0; round < 20; round++) {
    hc_result r;
    hc_call(&w, one, 1, &r);
    ck_assert_int_eq(r.status, MCP_CODE_OK);
    ck_assert_str_eq(r.details, "");
    ck_assert_int_eq(r.messages, 1);
    ck_assert_int_eq(r.answers[0], 1);
    ck_assert_int_eq(r.nres[0], 12);
    ck_assert_int_gt(r.bytes, 12 * 64 * 1024);
  }
  hc_stop(&w, 20);
}
END_TEST

/* Six requests, the half-close with the last: an answer to each (c + 1
 * bodies of 256 KiB for the c-th), none twice. */
START_TEST(several_requests_then_half_close_get_every_answer) {
  static const char *const colls[] = {"h1", "h2", "h3", "h4", "h5", "h6"};
  const int ncolls = 6;
  hc_world w = {.store = th_store(NULL)};
  char name[32];
  for (int c = 0; c < ncolls; c++)
    for (int i = 0; i <= c; i++) {
      snprintf(name, sizeof(name), "r%d", i);
      th_put_big(w.store, colls[c], name, "1", 256 * 1024, 'y', ta->now());
    }
  hc_start(&w);
  for (int round = 0; round < 5; round++) {
    hc_result r;
    hc_call(&w, colls, ncolls, &r);
    ck_assert_int_eq(r.status, MCP_CODE_OK);
    ck_assert_int_eq(r.messages, ncolls);
    for (int c = 0; c < ncolls; c++) {
      ck_assert_int_eq(r.answers[c], 1);
      ck_assert_int_eq(r.nres[c], c + 1);
    }
  }
  hc_stop(&w, 5);
}
END_TEST

/* A store that keeps changing does not hold a half-closed stream open: the
 * answer goes out, a push waiting for an ACK that never comes is not
 * waited for, and the stream ends with OK. */
typedef struct churn {
  ta_obj *src;
  atomic_int stop;
  int n; /* the transport's thread only */
} churn;

static void bump(mcp_store *st, mcp_tstamp ts, void *ud) {
  churn *c = ud;
  char body[32];
  snprintf(body, sizeof(body), "v%d", ++c->n);
  th_put(st, "h1", "hot", body, body, ts);
}

static void *churn_main(void *ud) {
  churn *c = ud;
  while (!atomic_load(&c->stop)) {
    ck_assert_int_eq(ta->update(c->src, bump, c), 0);
    nanosleep(&(struct timespec){0, 1000000}, NULL); /* pace, not a wait */
  }
  return NULL;
}

START_TEST(a_half_closed_stream_ends_while_the_store_changes) {
  hc_world w = {.store = th_store(NULL)};
  for (int i = 0; i < 4; i++) {
    char name[16];
    snprintf(name, sizeof(name), "r%d", i);
    th_put(w.store, "h1", name, "1", "body", ta->now());
  }
  hc_start(&w);
  churn c = {.src = w.src};
  atomic_init(&c.stop, 0);
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, churn_main, &c), 0);
  for (int round = 0; round < 10; round++) {
    hc_result r;
    hc_call(&w, one, 1, &r);
    ck_assert_int_eq(r.status, MCP_CODE_OK);
    ck_assert_int_ge(r.answers[0], 1);
    ck_assert_int_ge(r.nres[0], 4);
  }
  atomic_store(&c.stop, 1);
  pthread_join(th, NULL);
  hc_stop(&w, 10);
}
END_TEST

static Suite *suite(void) {
  static char name[64]; /* check keeps the pointer */
  snprintf(name, sizeof(name), "transport_halfclose_%s%s", ta->name,
           test_tls_mode() ? "_tls" : "");
  Suite *s = suite_create(name);
  TCase *t = tcase_create("halfclose");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, a_request_and_half_close_in_one_batch_get_the_full_state);
  tcase_add_test(t, several_requests_then_half_close_get_every_answer);
  tcase_add_test(t, a_half_closed_stream_ends_while_the_store_changes);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return ta_main(&TA_ADAPTER, suite); }
