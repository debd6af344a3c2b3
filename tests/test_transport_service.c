/*
 * Protocols on a transport without transport code of their own
 * (mcp/engine.h), written once for every transport (issue 21 item 7; the
 * transport: the adapter it is built with, tests/transport_<name>.c).
 * The per-transport files (test_grpc_service.c, test_h2c_service.c) hold
 * the tests not moved here yet; each test moved here is deleted there,
 * with the union of their checks.
 *
 * The client protocol here: slot 0 never asks (it must stay untouched),
 * slot 1 asks again and again at |method|.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport_suite.h"

typedef struct cstate {
  pthread_mutex_t mu; /* gRPC calls the protocol from its own thread */
  const char *method;
  int opens[2], ended[2], dels[2];
  int status;
  char details[160];
} cstate;

typedef struct csess {
  cstate *c;
  size_t slot;
} csess;

static int c_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  (void)sess;
  (void)ts;
  (void)pmsg;
  return 0;
}

static void c_del(void *sess) {
  csess *s = sess;
  pthread_mutex_lock(&s->c->mu);
  s->c->dels[s->slot]++;
  pthread_mutex_unlock(&s->c->mu);
  free(s);
}

static const mcp_stream_ops c_ops = {
    .name = "test-client",
    .next = c_next,
    .del = c_del,
};

static const char *c_method(void *ud, size_t slot) {
  (void)slot;
  return ((cstate *)ud)->method;
}

static int c_open(void *ud, size_t slot, mcp_tstamp ts, mcp_stream **pst) {
  cstate *c = ud;
  if (slot != 1)
    return 0;
  csess *s = calloc(1, sizeof(*s));
  ck_assert_ptr_nonnull(s);
  s->c = c;
  s->slot = slot;
  ck_assert_int_eq(mcp_stream_new(pst, &c_ops, s, NULL, ts), 0);
  pthread_mutex_lock(&c->mu);
  c->opens[slot]++;
  pthread_mutex_unlock(&c->mu);
  return 1;
}

static void c_ended(void *ud, size_t slot, int status, const char *details,
                    mcp_tstamp ts) {
  (void)ts;
  cstate *c = ud;
  pthread_mutex_lock(&c->mu);
  c->ended[slot]++;
  c->status = status;
  snprintf(c->details, sizeof(c->details), "%s", details);
  pthread_mutex_unlock(&c->mu);
}

/* A copy of the counts (the mutex left out). */
typedef struct ccounts {
  int opens[2], ended[2], dels[2];
  int status;
  char details[160];
} ccounts;

static void c_read(cstate *c, ccounts *k) {
  pthread_mutex_lock(&c->mu);
  memcpy(k->opens, c->opens, sizeof(k->opens));
  memcpy(k->ended, c->ended, sizeof(k->ended));
  memcpy(k->dels, c->dels, sizeof(k->dels));
  k->status = c->status;
  memcpy(k->details, c->details, sizeof(k->details));
  pthread_mutex_unlock(&c->mu);
}

typedef struct creader {
  cstate *c;
  ccounts k;
} creader;

static void c_read_turn(void *ud) {
  creader *r = ud;
  c_read(r->c, &r->k);
}

static int slot1_ended(void *ud) {
  ccounts k;
  c_read(ud, &k);
  return k.ended[1] >= 1;
}

/* A method that is not a path: the call ends at once with the
 * transport's error, nothing is dialed, and a protocol that asks again at
 * once is asked at the next event of the loop, not in a loop of its own.
 * Counted in turns of the transport's loop (ta->turn), never in a window
 * of time: a spin would ask thousands of times meanwhile. */
START_TEST(client_bad_method_ends_the_call_without_a_spin) {
  ta_env *env = ta->env_new();
  cstate c;
  memset(&c, 0, sizeof(c));
  pthread_mutex_init(&c.mu, NULL);
  c.method = "test.Echo/Echo";
  mcp_client_def def = {.nslots = 2,
                        .method = c_method,
                        .open = c_open,
                        .ended = c_ended,
                        .user_data = &c};
  ta_opts o = ta_opts_for(0, "127.0.0.1:1", NULL); /* never dialed */
  ta_obj *cli = NULL;
  ck_assert_int_eq(ta->client_new(env, &cli, &o, &def), 0);
  ck_assert(ta->run_until(env, slot1_ended, &c, 30000));

  creader r = {.c = &c};
  c_read(&c, &r.k);
  int before = r.k.opens[1];
  enum { TURNS = 100 };
  for (int i = 0; i < TURNS; i++)
    ck_assert_int_eq(ta->turn(env, cli, c_read_turn, &r), 0);
  ccounts k = r.k;
  /* |k| was read between two turns, where every call asked has ended
   * (and its stream was deleted first). */
  ck_assert_int_eq(k.status, ta->bad_method_status);
  ck_assert_str_eq(k.details, ta->bad_method_details);
  ck_assert_int_le(k.opens[1], before + TURNS * ta->asks_per_turn + 20);
  ck_assert_int_eq(k.ended[1], k.opens[1]);
  ck_assert_int_eq(k.dels[1], k.opens[1]);
  ck_assert_int_eq(k.opens[0], 0);
  ck_assert_int_eq(k.ended[0], 0);

  /* Nothing dialed: no stream, none ever opened. */
  union {
    max_align_t align;
    unsigned char b[1024];
  } st;
  ck_assert_uint_le(ta->stats_size, sizeof(st));
  ck_assert_int_eq(ta->stats_versioned(cli, ta->stats_version, &st), 0);
  ck_assert_uint_eq(ta->stats_streams(&st), 0);
  if (ta->stats_opened)
    ck_assert_uint_eq(ta->stats_opened(&st), 0);
  ta->del(cli);
  ta->env_del(env);
  pthread_mutex_destroy(&c.mu);
}
END_TEST

/* The adapter this executable is built with (tests/meson.build:
 * -DTA_ADAPTER=ta_<transport>). */
extern const ta_transport TA_ADAPTER;

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  ta = &TA_ADAPTER;
  char name[64];
  snprintf(name, sizeof(name), "%s_service", ta->name);
  Suite *s = suite_create(name);
  TCase *tc = tcase_create("client");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, client_bad_method_ends_the_call_without_a_spin);
  suite_add_tcase(s, tc);
  return ta_run(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
