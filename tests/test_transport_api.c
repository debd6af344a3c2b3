/*
 * A transport's API shape (issue 13), written once for every transport
 * (issue 21 item 7; the transport: the adapter it is built with,
 * tests/transport_<name>.c): versioned options and stats (an older
 * version's caller gets only that version's fields read or written, an
 * unknown version is INVALID_ARGUMENT, the object pointer untouched),
 * *_streams() returning the count, and the allocator hook (options.mem):
 * it sees every allocation and every free of the transport's own objects
 * (balanced once they are deleted, through a whole sync, over mutual TLS
 * too), a failure of any one allocation in *_new() is NOMEM with nothing
 * leaked, and a failure of any one allocation during a sync costs at most
 * a stream, which the dialer's reconnection replaces. With MCP_TEST_TLS=1
 * every connection is mutual TLS.
 */
#include <check.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"
#include "mem_count.h"
#include "test_certs.h"
#include "test_exit_probe.h"
#include "transport_suite.h"

/* ---- versioned structs ---- */

typedef union obuf {
  max_align_t align;
  unsigned char b[2048];
} obuf;

START_TEST(options_default_writes_its_version_only) {
  size_t size = ta->options_size, tail = 32;
  ck_assert_uint_le(size + tail, sizeof(obuf));
  obuf w, ab;
  memset(&ab, 0xab, sizeof(ab));
  const void *nomem = NULL;

  /* Below 1: nothing written. */
  memset(&w, 0xab, sizeof(w));
  ta->options_default_versioned(0, &w);
  ck_assert_int_eq(memcmp(&w, &ab, size + tail), 0);

  /* V1: its fields, not |mem|, which it does not have. */
  memset(&w, 0xab, sizeof(w));
  ta->options_default_versioned(ta->options_v1, &w);
  ta->check_v1_defaults(&w);
  ck_assert_int_eq(
      memcmp(w.b + ta->mem_offset, ab.b, sizeof(const mcp_mem *)), 0);

  /* The current version: |mem| too, nothing past the struct. */
  memset(&w, 0xab, sizeof(w));
  ta->options_default_versioned(ta->options_version, &w);
  ta->check_v1_defaults(&w);
  ck_assert_int_eq(memcmp(w.b + ta->mem_offset, &nomem, sizeof(nomem)), 0);
  ck_assert_int_eq(memcmp(w.b + size, ab.b, tail), 0);

  /* Newer than this library: what it knows, nothing beyond. */
  memset(&w, 0xab, sizeof(w));
  ta->options_default_versioned(ta->options_version + 1, &w);
  ck_assert_int_eq(memcmp(w.b + ta->mem_offset, &nomem, sizeof(nomem)), 0);
  ck_assert_int_eq(memcmp(w.b + size, ab.b, tail), 0);
}
END_TEST

static const char *client_method(void *ud, size_t slot) {
  (void)ud;
  (void)slot;
  return "/test.Api/Call";
}

static int client_open(void *ud, size_t slot, mcp_tstamp ts,
                       mcp_stream **pst) {
  (void)ud;
  (void)slot;
  (void)ts;
  (void)pst;
  return 0; /* no call: the client only connects when one is asked */
}

static void client_ended(void *ud, size_t slot, int status,
                         const char *details, mcp_tstamp ts) {
  (void)ud;
  (void)slot;
  (void)status;
  (void)details;
  (void)ts;
}

static const mcp_client_def client_def = {
    .nslots = 2,
    .method = client_method,
    .open = client_open,
    .ended = client_ended,
};

START_TEST(unknown_option_versions_are_refused) {
  ta_world w;
  ta_world_init(&w);
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = w.store;
  const int bad[] = {0, -1, ta->options_version + 1};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
    o.version = bad[i];
    ta_obj *obj = NULL; /* the adapters check the pointer is untouched */
    ck_assert_int_eq(ta->source_new(w.env, &obj, &o, &so),
                     MCP_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ta->sink_new(w.env, &obj, &o, w.state),
                     MCP_ERR_INVALID_ARGUMENT);
    o.listen = 0;
    o.address = "127.0.0.1:1";
    ck_assert_int_eq(ta->sink_new(w.env, &obj, &o, w.state),
                     MCP_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ta->client_new(w.env, &obj, &o, &client_def),
                     MCP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(obj);
  }
  ta_world_fini(&w);
}
END_TEST

/* A V1 caller's struct ends before |mem|: the library must not read it.
 * Here the bytes after it are garbage (a bad pointer) that would crash a
 * library reading them. */
START_TEST(v1_options_do_not_read_mem) {
  ta_world w;
  ta_world_init(&w);
  const mcp_mem *garbage = (const mcp_mem *)(uintptr_t)0x10;
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", garbage);
  o.version = o.defaults_version = ta->options_v1;
  ta_start_source_with(&w, &o);
  ta_opts d = ta_opts_for(0, w.addr, garbage);
  d.version = d.defaults_version = ta->options_v1;
  ck_assert_int_eq(ta->sink_new(w.env, &w.sink, &d, w.state), 0);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  ta_world_fini(&w);
}
END_TEST

typedef union sbuf {
  max_align_t align;
  unsigned char b[1024];
} sbuf;

START_TEST(stats_write_their_version_only) {
  ta_world w;
  ta_world_init(&w);
  ta_start_source(&w, NULL);
  size_t size = sizeof(mcp_transport_stats), tail = 32;
  ck_assert_uint_le(size + tail, sizeof(sbuf));
  sbuf s, ab;
  mcp_transport_stats *st = (mcp_transport_stats *)s.b;
  memset(&ab, 0xab, sizeof(ab));
  memset(&s, 0xab, sizeof(s));
  ck_assert_int_eq(ta->stats_versioned(w.src, 0, st),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(memcmp(&s, &ab, size + tail), 0);
  ck_assert_int_eq(ta->stats_versioned(w.src, 1, NULL),
                   MCP_ERR_INVALID_ARGUMENT);
  /* V1 (h2c's first layout): nothing from the TLS counters on. */
  size_t v1 = offsetof(mcp_transport_stats, tls_handshakes);
  ck_assert_int_eq(ta->stats_versioned(w.src, MCP_TRANSPORT_STATS_V1, st), 0);
  ck_assert_uint_eq(st->streams, 0);
  ck_assert_int_eq(memcmp(s.b + v1, ab.b, size + tail - v1), 0);
  /* V3: everything but |opened| (V4). */
  size_t v3 = offsetof(mcp_transport_stats, opened);
  memset(&s, 0xab, sizeof(s));
  ck_assert_int_eq(ta->stats_versioned(w.src, MCP_TRANSPORT_STATS_V3, st), 0);
  ck_assert_int_eq(memcmp(s.b + v3, ab.b, size + tail - v3), 0);
  /* No stream: the count is 0, with or without a function. */
  memset(&s, 0xab, sizeof(s));
  ck_assert_int_eq(
      ta->stats_versioned(w.src, MCP_TRANSPORT_STATS_VERSION + 1, st), 0);
  ck_assert_uint_eq(st->streams, 0);
  ck_assert_uint_eq(st->opened, 0);
  ck_assert_int_eq(memcmp(s.b + size, ab.b, tail), 0);
  int seen = 0;
  ck_assert_int_eq(ta->streams(w.src, NULL), 0);
  ck_assert_int_eq(ta->streams(w.src, &seen), 0);
  ck_assert_int_eq(seen, 0);

  /* Synced: one stream on each side, seen by both calls. */
  ta_start_sink(&w, NULL);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  memset(&s, 0xab, sizeof(s));
  ck_assert_int_eq(
      ta->stats_versioned(w.src, MCP_TRANSPORT_STATS_VERSION + 1, st), 0);
  ck_assert_uint_eq(st->streams, 1);
  ck_assert_uint_ge(st->opened, 1);
  ck_assert_int_eq(memcmp(s.b + size, ab.b, tail), 0);
  ck_assert_int_eq(ta->streams(w.src, &seen), 1);
  ck_assert_int_eq(seen, 1);
  ck_assert_int_eq(ta->streams(w.sink, NULL), 1);
  ck_assert_int_eq(ta->stats_versioned(w.sink, MCP_TRANSPORT_STATS_VERSION, st),
                   0);
  ck_assert_uint_eq(st->streams, 1);
  ta_world_fini(&w);
}
END_TEST

/* Both sides' counters, once each has sent and received a message. */
typedef struct counted {
  ta_world *w;
  mcp_transport_stats src, sink;
} counted;

static int both_counted(void *ud) {
  counted *c = ud;
  if (ta->stats_versioned(c->w->src, MCP_TRANSPORT_STATS_VERSION, &c->src) <
          0 ||
      ta->stats_versioned(c->w->sink, MCP_TRANSPORT_STATS_VERSION, &c->sink) <
          0)
    return 0;
  return c->src.messages_received >= 1 && c->src.messages_sent >= 1 &&
         c->sink.messages_received >= 1 && c->sink.messages_sent >= 1 &&
         c->src.initial_sent >= 1;
}

/* Issue 21: every transport fills the engine's one stats shape; the
 * fields both can count (streams open and opened, messages each way,
 * admission) mean the same on each. */
START_TEST(stats_are_the_engine_shape_on_every_transport) {
  ta_world w;
  ta_world_init(&w);
  ta_start_source(&w, NULL);
  ta_start_sink(&w, NULL);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  counted c = {.w = &w};
  ck_assert(ta->run_until(w.env, both_counted, &c, TA_TIMEOUT_MS));
  ck_assert_uint_eq(c.src.streams, 1);
  ck_assert_uint_eq(c.sink.streams, 1);
  ck_assert_uint_ge(c.src.opened, 1);
  ck_assert_uint_ge(c.sink.opened, 1);
  /* The source listens: its admission gave the stream an initial slot
   * (freed once the push was taken: initial_sent, waited for above) and
   * refused nothing; the dialing sink has no admission. */
  ck_assert_uint_eq(c.src.refused_max_streams + c.src.refused_rate +
                        c.src.refused_peer_rate + c.src.refused_peer_streams,
                    0);
  ck_assert_uint_ge(c.src.initial_peak, 1);
  ck_assert_uint_eq(c.sink.initial_peak + c.sink.initial_sent, 0);
  ta_world_fini(&w);
}
END_TEST

/* ---- the allocator hook ---- */

/* Explicit mutual TLS files in |o| (a source's when |listen|). */
static void explicit_tls(ta_opts *o, int listen) {
  o->cert_file = ta_cert(listen ? "server.pem" : "client.pem");
  o->key_file = ta_cert(listen ? "server.key" : "client.key");
  o->ca_file = ta_cert("ca.pem");
  o->server_name = listen ? NULL : "localhost";
}

/* A source and a sink, each with its own counting allocator, sync a
 * store with a large resource: the objects, connections, streams,
 * buffers, strings and the message refs all go through the hooks, and
 * every block comes back once they are deleted. With |tls|, explicit
 * mutual TLS: the TLS material (paths, PEM buffers, what the credential
 * callbacks read again) goes through the hooks too. */
static void sync_through_hooks(int tls) {
  tm_mem sm, km;
  tm_init(&sm, 0);
  tm_init(&km, 0);
  ta_world w;
  ta_world_init(&w);
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", &sm.mem);
  if (tls)
    explicit_tls(&o, 1);
  ta_start_source_with(&w, &o);
  /* paths and PEMs among them with TLS */
  ck_assert_int_ge(tm_get(&sm).allocs, tls ? 7 : 1);
  ta_opts d = ta_opts_for(0, w.addr, &km.mem);
  if (tls)
    explicit_tls(&d, 0);
  ck_assert_int_eq(ta->sink_new(w.env, &w.sink, &d, w.state), 0);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  int n = 0;
  ck_assert_int_eq(ta->streams(w.src, &n), 1);
  ck_assert_int_eq(n, 1);
  /* More than the objects alone. */
  tm_counts sc = tm_get(&sm), kc = tm_get(&km);
  ck_assert_int_gt(sc.allocs, ta->min_sync_allocs);
  ck_assert_int_gt(kc.allocs, ta->min_sync_allocs);
  ck_assert_int_gt(sc.live, 0);
  ck_assert_int_gt(kc.live, 0);
  ta_world_fini(&w);
  ck_assert(ta_balanced(&sm));
  ck_assert(ta_balanced(&km));
  ck_assert_int_eq(tm_get(&sm).failed, 0);
  tm_fini(&sm);
  tm_fini(&km);
}

START_TEST(hook_sees_every_allocation_through_a_sync) { sync_through_hooks(0); }
END_TEST

static const mcp_service_def services[] = {
    {.method = "/test.Api/One", .open = ta_open_unsupported},
    {.method = "/test.Api/Two", .open = ta_open_unsupported},
};

static int never(void *ud) {
  (void)ud;
  return 0;
}

typedef enum kind { K_SOURCE_LISTEN, K_SINK_DIAL, K_CLIENT } kind;

/* Creates one object of |k| in a new env with |mem|, deletes it at once
 * on success, and runs what is left to its end. */
static int make_and_del(kind k, const mcp_mem *mem, ta_world *w) {
  ta_env *env = ta->env_new();
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", mem);
  ta_obj *obj = NULL;
  int rv;
  switch (k) {
  case K_SOURCE_LISTEN: {
    mcp_source_options so;
    mcp_source_options_default(&so);
    so.store = w->store;
    o.services = services;
    o.nservices = 2;
    rv = ta->source_new(env, &obj, &o, &so);
    break;
  }
  case K_SINK_DIAL:
    o.listen = 0;
    o.address = "127.0.0.1:1,127.0.0.1:2"; /* nobody there */
    rv = ta->sink_new(env, &obj, &o, w->state);
    /* An attempt or two (refused at once) before the del; nothing is
     * asserted on how many. */
    if (rv == 0)
      ta->run_until(env, never, NULL, 20);
    break;
  default:
    o.listen = 0;
    o.address = "127.0.0.1:1";
    rv = ta->client_new(env, &obj, &o, &client_def);
    break;
  }
  if (rv == 0)
    ta->del(obj);
  else
    ck_assert_ptr_null(obj);
  ta->env_del(env);
  return rv;
}

/* Fails the n-th allocation, for every n until the object's life needs
 * no more than n - 1: each failure inside *_new() is NOMEM, and nothing
 * is leaked either way (ASan checks the rest). */
static void fail_each_allocation(kind k) {
  ta_world w;
  ta_world_init(&w);
  int done = 0;
  for (long n = 1; n < 400 && !done; n++) {
    tm_mem m;
    tm_init(&m, n);
    int rv = make_and_del(k, &m.mem, &w);
    ck_assert_msg(rv == 0 || rv == MCP_ERR_NOMEM,
                  "allocation %ld failed: %d", n, rv);
    ck_assert_msg(ta_balanced(&m), "allocation %ld: %ld blocks leaked", n,
                  tm_get(&m).live);
    tm_counts c = tm_get(&m);
    if (rv == MCP_ERR_NOMEM)
      ck_assert_int_eq(c.failed, 1);
    done = c.failed == 0; /* it needed fewer than n */
    if (done && getenv("TM_DEBUG"))
      fprintf(stderr, "kind %d: %ld allocations\n", (int)k, c.count);
    ck_assert_msg(done || c.count >= n, "allocation %ld", n);
    tm_fini(&m);
  }
  ck_assert(done);
  ta_world_fini(&w);
}

START_TEST(failing_allocations_source) { fail_each_allocation(K_SOURCE_LISTEN); }
END_TEST

START_TEST(failing_allocations_sink) { fail_each_allocation(K_SINK_DIAL); }
END_TEST

START_TEST(failing_allocations_client) { fail_each_allocation(K_CLIENT); }
END_TEST

/* Fails the n-th allocation of one side after its creation (_i: 0 the
 * listening source, 1 the dialing sink), for every n a sync needs: a
 * failure costs at most the stream or the connection (never a crash or a
 * leak), and the sink's reconnection syncs anyway. */
START_TEST(sync_survives_each_failing_allocation) {
  int done = 0;
  for (long n = 1; n < 2000 && !done; n++) {
    tm_mem m;
    tm_init(&m, 0);
    ta_world w;
    ta_world_init(&w);
    ta_start_source(&w, _i == 0 ? &m.mem : NULL);
    if (_i == 0) {
      pthread_mutex_lock(&m.mu);
      m.fail_at = m.count + n; /* counted from here */
      pthread_mutex_unlock(&m.mu);
    }
    ta_start_sink(&w, _i == 1 ? &m.mem : NULL);
    if (_i == 1) {
      pthread_mutex_lock(&m.mu);
      m.fail_at = m.count + n; /* a dialer's thread may have begun: about here */
      pthread_mutex_unlock(&m.mu);
    }
    ck_assert_msg(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS),
                  "side %d, allocation %ld: no sync", _i, n);
    ta_world_fini(&w);
    ck_assert_msg(ta_balanced(&m), "side %d, allocation %ld: %ld leaked", _i,
                  n, tm_get(&m).live);
    done = tm_get(&m).failed == 0; /* the sync and del needed fewer */
    if (done && getenv("TM_DEBUG"))
      fprintf(stderr, "sync, side %d: %ld allocations\n", _i, n - 1);
    tm_fini(&m);
  }
  ck_assert(done);
}
END_TEST

/* ---- explicit mutual TLS ---- */

START_TEST(tls_material_goes_through_the_hook) { sync_through_hooks(1); }
END_TEST

/* Each allocation of a TLS source's creation fails in turn: NOMEM, and
 * nothing leaked. */
START_TEST(tls_failing_allocations) {
  ta_world w;
  ta_world_init(&w);
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = w.store;
  int done = 0;
  for (long n = 1; n < 400 && !done; n++) {
    tm_mem m;
    tm_init(&m, n);
    ta_env *env = ta->env_new();
    ta_opts o = ta_opts_for(1, "127.0.0.1:0", &m.mem);
    explicit_tls(&o, 1);
    ta_obj *src = NULL;
    int rv = ta->source_new(env, &src, &o, &so);
    ck_assert_msg(rv == 0 || rv == MCP_ERR_NOMEM, "allocation %ld: %d", n, rv);
    if (rv == 0)
      ta->del(src);
    ta->env_del(env);
    ck_assert_msg(ta_balanced(&m), "allocation %ld: leaked", n);
    done = tm_get(&m).failed == 0;
    if (done && getenv("TM_DEBUG"))
      fprintf(stderr, "tls source: %ld allocations\n", n - 1);
    tm_fini(&m);
  }
  ck_assert(done);
  ta_world_fini(&w);
}
END_TEST

/* A source with explicit mutual TLS made and deleted, in a child
 * (test_exit_keeps_openssl_up()'s body). */
static int tls_source_life(void *ud) {
  (void)ud;
  ta_world w;
  ta_world_init(&w);
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  explicit_tls(&o, 1);
  ta_start_source_with(&w, &o);
  ta_world_fini(&w);
  return 0;
}

/* gRPC 1.51 may end its clean-up on a detached thread after the last
 * object is deleted; OpenSSL's clean-up at exit then ran beside it (a
 * double free at exit in CI, 1 run in a few hundred). Each transport asks
 * OpenSSL to leave that to the system before its first use of OpenSSL (h2c
 * too: a process may hold both): a process that made a TLS source exits
 * with OpenSSL still up. Needs a process where OpenSSL was not up before
 * the fork: one process per test, as meson runs this suite. */
START_TEST(exit_leaves_openssl_up) {
  ck_assert_int_eq(test_exit_keeps_openssl_up(tls_source_life, NULL), 0);
}
END_TEST

/* The adapter this executable is built with (tests/meson.build:
 * -DTA_ADAPTER=ta_<transport>). */
extern const ta_transport TA_ADAPTER;

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  ta = &TA_ADAPTER;
  /* The explicit TLS tests: in the TLS run where there is one. */
  int tls = test_tls_mode() || !ta->tls_run;
  if (tls && ta_certs_make() != 0)
    return EXIT_FAILURE;
  char name[64];
  snprintf(name, sizeof(name), "%s_api%s", ta->name,
           test_tls_mode() ? "_tls" : "");
  Suite *s = suite_create(name);
  TCase *tc = tcase_create("versions");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, options_default_writes_its_version_only);
  tcase_add_test(tc, unknown_option_versions_are_refused);
  tcase_add_test(tc, v1_options_do_not_read_mem);
  tcase_add_test(tc, stats_write_their_version_only);
  tcase_add_test(tc, stats_are_the_engine_shape_on_every_transport);
  suite_add_tcase(s, tc);
  tc = tcase_create("mem");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, hook_sees_every_allocation_through_a_sync);
  tcase_add_test(tc, failing_allocations_source);
  tcase_add_test(tc, failing_allocations_sink);
  tcase_add_test(tc, failing_allocations_client);
  tcase_add_loop_test(tc, sync_survives_each_failing_allocation, 0, 2);
  if (tls) {
    tcase_add_test(tc, tls_material_goes_through_the_hook);
    tcase_add_test(tc, tls_failing_allocations);
    tcase_add_test(tc, exit_leaves_openssl_up);
  }
  suite_add_tcase(s, tc);
  if (ta->add_own_tests)
    ta->add_own_tests(s);
  int failed = ta_run(s);
  if (tls)
    ta_certs_remove();
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
