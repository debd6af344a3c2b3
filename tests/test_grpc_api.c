/*
 * The gRPC transport's API shape (issue 13): versioned options and stats
 * (an older version's caller gets only that version's fields read or
 * written, an unknown version is INVALID_ARGUMENT), *_streams() returning
 * the count, and the allocator hook (options.mem): it sees every
 * allocation and every free of the transport's own objects (balanced after
 * *_del(), through a whole sync), and a failure of any one allocation in
 * *_new() is NOMEM with nothing leaked.
 */
#include <stdint.h>
#include <unistd.h>

#include "mem_count.h"
#include "test_grpc_util.h"

static const char *const colls[] = {"c1"};

/* After *_del(), gRPC may still drop the last slice of a message on one
 * of its threads: wait for the count to settle. */
static int tm_balanced(void *ud) { return tm_get(ud).live == 0; }

static void assert_balanced(tm_mem *m) {
  ck_assert(tg_wait(tm_balanced, m, TG_TIMEOUT_MS));
  tm_counts c = tm_get(m);
  ck_assert_int_eq(c.allocs, c.frees);
}

/* ---- versioned structs ---- */

START_TEST(test_options_default_writes_its_version_only) {
  struct {
    mcp_grpc_options o;
    unsigned char tail[32];
  } w;
  unsigned char ab[sizeof(w)];
  memset(ab, 0xab, sizeof(ab));

  /* Below 1: nothing written. */
  memset(&w, 0xab, sizeof(w));
  mcp_grpc_options_default_versioned(0, &w.o);
  ck_assert_int_eq(memcmp(&w, ab, sizeof(w)), 0);

  /* V1 (0.2.0): its fields, not |mem|, which it does not have. */
  memset(&w, 0xab, sizeof(w));
  mcp_grpc_options_default_versioned(MCP_GRPC_OPTIONS_V1, &w.o);
  ck_assert_int_eq(w.o.mode, MCP_GRPC_LISTEN);
  ck_assert_int_eq(w.o.max_recv_message_size, 64 << 20);
  ck_assert_ptr_null(w.o.address);
  ck_assert_int_eq(w.o.no_mcp, 0);
  ck_assert_int_eq(memcmp(&w.o.mem, ab, sizeof(w.o.mem)), 0);

  /* The current version, through the macro: |mem| too. */
  memset(&w, 0xab, sizeof(w));
  mcp_grpc_options_default(&w.o);
  ck_assert_ptr_null(w.o.mem);
  ck_assert_int_eq(w.o.max_send_message_size, 64 << 20);
  ck_assert_int_eq(memcmp(w.tail, ab, sizeof(w.tail)), 0);

  /* Newer than this library: what it knows, nothing beyond. */
  memset(&w, 0xab, sizeof(w));
  mcp_grpc_options_default_versioned(MCP_GRPC_OPTIONS_VERSION + 1, &w.o);
  ck_assert_ptr_null(w.o.mem);
  ck_assert_int_eq(memcmp(w.tail, ab, sizeof(w.tail)), 0);
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

START_TEST(test_unknown_option_versions_are_refused) {
  mcp_store *store = tg_store();
  mcp_source_options so;
  tg_source_opts(&so, store);
  mcp_sink_state *state = tg_sink_state(colls, 1, 0);
  mcp_grpc_options o;
  mcp_grpc_options_default(&o);
  o.address = "127.0.0.1:0";
  const int bad[] = {0, -1, MCP_GRPC_OPTIONS_VERSION + 1};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    mcp_grpc_source *src = (mcp_grpc_source *)&o; /* untouched on failure */
    ck_assert_int_eq(mcp_grpc_source_new_versioned(&src, bad[i], &o, &so),
                     MCP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_eq(src, (mcp_grpc_source *)&o);
    mcp_grpc_sink *sink = NULL;
    ck_assert_int_eq(mcp_grpc_sink_new_versioned(&sink, bad[i], &o, state),
                     MCP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(sink);
    mcp_grpc_options d = o;
    d.mode = MCP_GRPC_DIAL;
    d.address = "127.0.0.1:1";
    mcp_grpc_client *c = NULL;
    ck_assert_int_eq(
        mcp_grpc_client_new_versioned(&c, bad[i], &d, &client_def),
        MCP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(c);
  }
  mcp_sink_state_del(state);
  mcp_store_del(store);
}
END_TEST

/* A V1 caller's struct ends before |mem|: the library must not read it.
 * Here the bytes after it are garbage (a bad pointer) that would crash a
 * library reading them. */
START_TEST(test_v1_options_do_not_read_mem) {
  mcp_store *store = tg_store();
  tg_put(store, "c1", "a", "alpha", mcp_grpc_now());
  mcp_source_options so;
  tg_source_opts(&so, store);
  mcp_grpc_options o;
  memset(&o, 0, sizeof(o));
  mcp_grpc_options_default_versioned(MCP_GRPC_OPTIONS_V1, &o);
  o.address = "127.0.0.1:0";
  o.shutdown_grace = MCP_SECONDS;
  o.mem = (const mcp_mem *)(uintptr_t)0x10; /* not part of V1 */
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(
      mcp_grpc_source_new_versioned(&src, MCP_GRPC_OPTIONS_V1, &o, &so), 0);
  ck_assert_int_gt(mcp_grpc_source_port(src), 0);

  mcp_sink_state *state = tg_sink_state(colls, 1, 0);
  char addr[64];
  tg_streams ko;
  tg_streams_init(&ko);
  mcp_grpc_options d;
  tg_dial_opts(&d, addr, sizeof(addr), mcp_grpc_source_port(src), &ko);
  d.mem = (const mcp_mem *)(uintptr_t)0x10;
  mcp_grpc_sink *sink = NULL;
  ck_assert_int_eq(
      mcp_grpc_sink_new_versioned(&sink, MCP_GRPC_OPTIONS_V1, &d, state), 0);
  tg_pair p = {src, NULL, sink, "c1"};
  ck_assert(tg_wait(tg_equal, &p, TG_TIMEOUT_MS));
  mcp_grpc_sink_del(sink);
  mcp_grpc_source_del(src);
  mcp_sink_state_del(state);
  mcp_store_del(store);
}
END_TEST

START_TEST(test_stats_write_their_version_only) {
  mcp_store *store = tg_store();
  mcp_source_options so;
  tg_source_opts(&so, store);
  tg_streams obs;
  tg_streams_init(&obs);
  mcp_grpc_options o;
  tg_listen_opts(&o, "127.0.0.1:0", &obs);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &so), 0);

  struct {
    mcp_grpc_stats st;
    unsigned char tail[32];
  } w;
  unsigned char ab[sizeof(w)];
  memset(ab, 0xab, sizeof(ab));
  memset(&w, 0xab, sizeof(w));
  ck_assert_int_eq(mcp_grpc_source_stats_versioned(src, 0, &w.st),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(memcmp(&w, ab, sizeof(w)), 0);
  ck_assert_int_eq(mcp_grpc_source_stats_versioned(src, 1, NULL),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(
      mcp_grpc_source_stats_versioned(src, MCP_GRPC_STATS_VERSION + 1, &w.st),
      0);
  ck_assert_uint_eq(w.st.streams, 0);
  ck_assert_uint_eq(w.st.opened, 0);
  ck_assert_int_eq(memcmp(w.tail, ab, sizeof(w.tail)), 0);
  ck_assert_int_eq(mcp_grpc_source_stats(src, &w.st), 0);
  /* No stream: the count is 0, with or without a function. */
  ck_assert_int_eq(mcp_grpc_source_streams(src, NULL, NULL), 0);
  mcp_grpc_source_del(src);
  mcp_store_del(store);
}
END_TEST

/* ---- the allocator hook ---- */

static void count_info(const mcp_grpc_stream_info *info, void *ud) {
  (void)info;
  ++*(int *)ud;
}

/* A source and a sink, each with its own counting allocator, sync a
 * store with a large resource (sent by reference: the message is kept
 * alive by a ref allocated with the hook and freed wherever gRPC drops
 * the last slice); every block of both is given back after *_del(). */
START_TEST(test_hook_sees_every_allocation_through_a_sync) {
  tm_mem sm, km;
  tm_init(&sm, 0);
  tm_init(&km, 0);
  mcp_store *store = tg_store();
  mcp_tstamp now = mcp_grpc_now();
  tg_put(store, "c1", "a", "alpha", now);
  tg_put_big(store, "c1", "big", 64 << 10, now);
  mcp_source_options so;
  tg_source_opts(&so, store);
  tg_streams obs, kobs;
  tg_streams_init(&obs);
  tg_streams_init(&kobs);
  mcp_grpc_options o;
  tg_listen_opts(&o, "127.0.0.1:0", &obs);
  o.mem = &sm.mem;
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &so), 0);
  ck_assert_int_gt(tm_get(&sm).allocs, 0);

  mcp_sink_state *state = tg_sink_state(colls, 1, 0);
  char addr[64];
  tg_dial_opts(&o, addr, sizeof(addr), mcp_grpc_source_port(src), &kobs);
  o.mem = &km.mem;
  mcp_grpc_sink *sink = NULL;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), 0);
  tg_pair p = {src, NULL, sink, "c1"};
  ck_assert(tg_wait(tg_equal, &p, TG_TIMEOUT_MS));

  int n = 0;
  ck_assert_int_eq(mcp_grpc_source_streams(src, count_info, &n), 1);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(mcp_grpc_sink_streams(sink, NULL, NULL), 1);
  mcp_grpc_stats st;
  ck_assert_int_eq(mcp_grpc_source_stats(src, &st), 0);
  ck_assert_uint_eq(st.streams, 1);
  /* The streams, their strings and the message refs went through the
   * hooks: more than the objects alone. */
  tm_counts sc = tm_get(&sm), kc = tm_get(&km);
  ck_assert_int_gt(sc.allocs, 3);
  ck_assert_int_gt(kc.allocs, 3);
  ck_assert_int_gt(sc.live, 0);

  mcp_grpc_sink_del(sink);
  mcp_grpc_source_del(src);
  assert_balanced(&sm);
  assert_balanced(&km);
  ck_assert_int_eq(tm_get(&sm).failed, 0);
  mcp_sink_state_del(state);
  mcp_store_del(store);
  tm_fini(&sm);
  tm_fini(&km);
}
END_TEST

static int dummy_open(void *ud, const mcp_peer_info *peer, mcp_tstamp ts,
                      mcp_stream **pst) {
  (void)ud;
  (void)peer;
  (void)ts;
  (void)pst;
  return MCP_ERR_UNSUPPORTED;
}

static const mcp_service_def services[] = {
    {.method = "/test.Api/One", .open = dummy_open},
    {.method = "/test.Api/Two", .open = dummy_open},
};

typedef enum kind { K_SOURCE_LISTEN, K_SINK_DIAL, K_CLIENT } kind;

/* Creates one object of |k| with |mem|; deletes it at once on success. */
static int make_and_del(kind k, const mcp_mem *mem, mcp_store *store,
                        mcp_sink_state *state) {
  mcp_grpc_options o;
  mcp_grpc_options_default(&o);
  o.mem = mem;
  o.shutdown_grace = 100 * MCP_MILLISECONDS;
  int rv;
  switch (k) {
  case K_SOURCE_LISTEN: {
    mcp_source_options so;
    tg_source_opts(&so, store);
    o.address = "127.0.0.1:0";
    o.services = services;
    o.nservices = 2;
    mcp_grpc_source *src = NULL;
    rv = mcp_grpc_source_new(&src, &o, &so);
    if (rv == 0)
      mcp_grpc_source_del(src);
    else
      ck_assert_ptr_null(src);
    break;
  }
  case K_SINK_DIAL: {
    o.mode = MCP_GRPC_DIAL;
    o.address = "127.0.0.1:1,127.0.0.1:2"; /* nobody there */
    o.backoff.initial = 10 * MCP_MILLISECONDS;
    mcp_grpc_sink *sink = NULL;
    rv = mcp_grpc_sink_new(&sink, &o, state);
    if (rv == 0)
      mcp_grpc_sink_del(sink);
    else
      ck_assert_ptr_null(sink);
    break;
  }
  default: {
    o.mode = MCP_GRPC_DIAL;
    o.address = "127.0.0.1:1";
    mcp_grpc_client *c = NULL;
    rv = mcp_grpc_client_new(&c, &o, &client_def);
    if (rv == 0)
      mcp_grpc_client_del(c);
    else
      ck_assert_ptr_null(c);
    break;
  }
  }
  return rv;
}

/* Fails the n-th allocation, for every n until creating (and deleting)
 * the object needs no more than n - 1: each failure inside *_new() is
 * NOMEM, and nothing is leaked either way (ASan checks the rest). */
static void fail_each_allocation(kind k) {
  mcp_store *store = tg_store();
  mcp_sink_state *state = tg_sink_state(colls, 1, 0);
  int done = 0;
  for (long n = 1; n < 400 && !done; n++) {
    tm_mem m;
    tm_init(&m, n);
    int rv = make_and_del(k, &m.mem, store, state);
    ck_assert_msg(rv == 0 || rv == MCP_ERR_NOMEM,
                  "allocation %ld failed: %d", n, rv);
    assert_balanced(&m);
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
  mcp_sink_state_del(state);
  mcp_store_del(store);
}

START_TEST(test_failing_allocations_source) {
  fail_each_allocation(K_SOURCE_LISTEN);
}
END_TEST

START_TEST(test_failing_allocations_sink) { fail_each_allocation(K_SINK_DIAL); }
END_TEST

START_TEST(test_failing_allocations_client) { fail_each_allocation(K_CLIENT); }
END_TEST

/* Fails the n-th allocation of one side after its creation (_i: 0 the
 * listening source, 1 the dialing sink), for every n a sync needs: a
 * failure costs at most the stream (never a crash or a leak), and the
 * sink's reconnection syncs anyway. */
START_TEST(test_sync_survives_each_failing_allocation) {
  int done = 0;
  for (long n = 1; n < 1000 && !done; n++) {
    tm_mem m;
    tm_init(&m, 0);
    mcp_store *store = tg_store();
    mcp_tstamp now = mcp_grpc_now();
    tg_put(store, "c1", "a", "alpha", now);
    tg_put_big(store, "c1", "big", 4096, now);
    mcp_source_options so;
    tg_source_opts(&so, store);
    tg_streams obs, kobs;
    tg_streams_init(&obs);
    tg_streams_init(&kobs);
    mcp_grpc_options o;
    tg_listen_opts(&o, "127.0.0.1:0", &obs);
    o.mem = _i == 0 ? &m.mem : NULL;
    mcp_grpc_source *src = NULL;
    ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &so), 0);
    if (_i == 0) {
      pthread_mutex_lock(&m.mu);
      m.fail_at = m.count + n; /* counted from here */
      pthread_mutex_unlock(&m.mu);
    }
    mcp_sink_state *state = tg_sink_state(colls, 1, 0);
    char addr[64];
    tg_dial_opts(&o, addr, sizeof(addr), mcp_grpc_source_port(src), &kobs);
    o.mem = _i == 1 ? &m.mem : NULL;
    mcp_grpc_sink *sink = NULL;
    ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), 0);
    if (_i == 1) {
      pthread_mutex_lock(&m.mu);
      m.fail_at = m.count + n; /* its thread may have begun: about here */
      pthread_mutex_unlock(&m.mu);
    }
    tg_pair p = {src, NULL, sink, "c1"};
    ck_assert_msg(tg_wait(tg_equal, &p, TG_TIMEOUT_MS),
                  "side %d, allocation %ld", _i, n);
    mcp_grpc_sink_del(sink);
    mcp_grpc_source_del(src);
    assert_balanced(&m);
    done = tm_get(&m).failed == 0; /* the sync and del needed fewer */
    if (done && getenv("TM_DEBUG"))
      fprintf(stderr, "sync, side %d: %ld allocations\n", _i, n - 1);
    mcp_sink_state_del(state);
    mcp_store_del(store);
    tm_fini(&m);
  }
  ck_assert(done);
}
END_TEST

/* ---- TLS from files ---- */

#ifndef MCP_GEN_CERTS
#define MCP_GEN_CERTS "tests/gen_certs.sh"
#endif

static char certdir[64]; /* made by main() with tests/gen_certs.sh */
static char certpath[6][128];

static const char *cert(int i, const char *name) {
  snprintf(certpath[i], sizeof(certpath[i]), "%s/%s", certdir, name);
  return certpath[i];
}

/* Mutual TLS, both sides with a counting allocator: the TLS material
 * (paths, PEM buffers, read again by gRPC's credential callbacks on its
 * threads) goes through the hooks, and every block comes back. */
START_TEST(test_tls_material_goes_through_the_hook) {
  tm_mem sm, km;
  tm_init(&sm, 0);
  tm_init(&km, 0);
  mcp_store *store = tg_store();
  tg_put(store, "c1", "a", "alpha", mcp_grpc_now());
  mcp_source_options so;
  tg_source_opts(&so, store);
  tg_streams obs, kobs;
  tg_streams_init(&obs);
  tg_streams_init(&kobs);
  mcp_grpc_options o;
  tg_listen_opts(&o, "127.0.0.1:0", &obs);
  o.tls.cert_file = cert(0, "server.pem");
  o.tls.key_file = cert(1, "server.key");
  o.tls.ca_file = cert(2, "ca.pem");
  o.mem = &sm.mem;
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &so), 0);
  tm_counts c = tm_get(&sm);
  ck_assert_int_ge(c.allocs, 7); /* paths and PEMs among them */

  mcp_sink_state *state = tg_sink_state(colls, 1, 0);
  char addr[64];
  tg_dial_opts(&o, addr, sizeof(addr), mcp_grpc_source_port(src), &kobs);
  o.tls.cert_file = cert(3, "client.pem");
  o.tls.key_file = cert(4, "client.key");
  o.tls.ca_file = cert(5, "ca.pem");
  o.tls.server_name = "localhost";
  o.mem = &km.mem;
  mcp_grpc_sink *sink = NULL;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), 0);
  tg_pair p = {src, NULL, sink, "c1"};
  ck_assert(tg_wait(tg_equal, &p, TG_TIMEOUT_MS));
  mcp_grpc_sink_del(sink);
  mcp_grpc_source_del(src);
  assert_balanced(&sm);
  assert_balanced(&km);
  mcp_sink_state_del(state);
  mcp_store_del(store);
  tm_fini(&sm);
  tm_fini(&km);
}
END_TEST

/* Each allocation of a TLS source's creation fails in turn: NOMEM, and
 * nothing leaked. */
START_TEST(test_tls_failing_allocations) {
  mcp_store *store = tg_store();
  mcp_source_options so;
  tg_source_opts(&so, store);
  int done = 0;
  for (long n = 1; n < 400 && !done; n++) {
    tm_mem m;
    tm_init(&m, n);
    mcp_grpc_options o;
    mcp_grpc_options_default(&o);
    o.address = "127.0.0.1:0";
    o.tls.cert_file = cert(0, "server.pem");
    o.tls.key_file = cert(1, "server.key");
    o.tls.ca_file = cert(2, "ca.pem");
    o.mem = &m.mem;
    mcp_grpc_source *src = NULL;
    int rv = mcp_grpc_source_new(&src, &o, &so);
    ck_assert_msg(rv == 0 || rv == MCP_ERR_NOMEM, "allocation %ld: %d", n, rv);
    if (rv == 0)
      mcp_grpc_source_del(src);
    assert_balanced(&m);
    done = tm_get(&m).failed == 0;
    if (done && getenv("TM_DEBUG"))
      fprintf(stderr, "tls source: %ld allocations\n", n - 1);
    tm_fini(&m);
  }
  ck_assert(done);
  mcp_store_del(store);
}
END_TEST

/* ---- access lists ---- */

static const char acl_text[] =
    "allow spiffe://cluster.local/ns/istio-system/*\n"
    "deny spiffe://cluster.local/ns/istio-system/sa/bad\n";

/* The list's life through each of its allocating calls; stops at the
 * first error, which must be NOMEM. */
static int acl_life(const mcp_mem *mem, const char *path) {
  mcp_grpc_acl *acl = NULL;
  int rv = mcp_grpc_acl_new2(&acl, mem);
  if (rv < 0) {
    ck_assert_ptr_null(acl);
    return rv;
  }
  rv = mcp_grpc_acl_add(acl, MCP_GRPC_ACL_ALLOW, "istiod.istio-system.svc");
  if (rv == 0)
    rv = mcp_grpc_acl_parse(acl, acl_text, sizeof(acl_text) - 1, NULL, 0);
  if (rv == 0)
    rv = mcp_grpc_acl_load_file(acl, path, NULL, 0);
  if (rv == 0) {
    FILE *f = fopen(path, "a");
    ck_assert_ptr_nonnull(f);
    fputs("allow spiffe://other/*\n", f);
    fclose(f);
    rv = mcp_grpc_acl_reload(acl, NULL, 0);
    if (rv == 1) {
      ck_assert_uint_eq(mcp_grpc_acl_count(acl), 4);
      rv = 0;
    }
  }
  const char *ids[] = {"spiffe://cluster.local/ns/istio-system/sa/bad"};
  mcp_grpc_peer peer = {.identities = ids, .nidentities = 1,
                        .authenticated = 1};
  int verdict = mcp_grpc_acl_check(acl, &peer);
  ck_assert(verdict == 0 || verdict == GRPC_STATUS_PERMISSION_DENIED);
  mcp_grpc_acl_del(acl);
  return rv;
}

START_TEST(test_acl_allocations_go_through_its_hook) {
  char path[] = "/tmp/mcp-acl-XXXXXX";
  int done = 0;
  for (long n = 0; n < 200 && !done; n++) {
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, acl_text, sizeof(acl_text) - 1),
                     (ssize_t)sizeof(acl_text) - 1);
    close(fd);
    tm_mem m;
    tm_init(&m, n); /* n == 0: no failure, the counts alone */
    int rv = acl_life(&m.mem, path);
    tm_counts c = tm_get(&m);
    ck_assert_msg(rv == 0 || rv == MCP_ERR_NOMEM, "allocation %ld: %d", n,
                  rv);
    ck_assert_msg(c.live == 0, "allocation %ld: %ld leaked", n, c.live);
    if (n == 0)
      ck_assert_int_gt(c.allocs, 4);
    done = n > 0 && c.failed == 0;
    tm_fini(&m);
    unlink(path);
    memcpy(path + sizeof(path) - 7, "XXXXXX", 6);
  }
  ck_assert(done);
}
END_TEST

int main(void) {
  char cmd[256];
  snprintf(certdir, sizeof(certdir), "/tmp/mcp-api-XXXXXX");
  if (!mkdtemp(certdir)) {
    perror("mkdtemp");
    return EXIT_FAILURE;
  }
  snprintf(cmd, sizeof(cmd), "sh '%s' '%s'", MCP_GEN_CERTS, certdir);
  if (system(cmd) != 0) {
    fprintf(stderr, "%s failed\n", cmd);
    return EXIT_FAILURE;
  }
  Suite *s = suite_create("grpc_api");
  TCase *tc = tcase_create("versions");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, tg_reset, NULL);
  tcase_add_test(tc, test_options_default_writes_its_version_only);
  tcase_add_test(tc, test_unknown_option_versions_are_refused);
  tcase_add_test(tc, test_v1_options_do_not_read_mem);
  tcase_add_test(tc, test_stats_write_their_version_only);
  suite_add_tcase(s, tc);
  tc = tcase_create("mem");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, tg_reset, NULL);
  tcase_add_test(tc, test_hook_sees_every_allocation_through_a_sync);
  tcase_add_test(tc, test_failing_allocations_source);
  tcase_add_test(tc, test_failing_allocations_sink);
  tcase_add_test(tc, test_failing_allocations_client);
  tcase_add_loop_test(tc, test_sync_survives_each_failing_allocation, 0, 2);
  tcase_add_test(tc, test_acl_allocations_go_through_its_hook);
  tcase_add_test(tc, test_tls_material_goes_through_the_hook);
  tcase_add_test(tc, test_tls_failing_allocations);
  suite_add_tcase(s, tc);
  int rv = tg_run(s);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", certdir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", certdir);
  return rv;
}
