/*
 * The transport suite's adapter for the gRPC transport
 * (tests/transport_suite.h), and the checks only it can pass.
 */
#include <stdint.h>
#include <unistd.h>

#include "mem_count.h"
#include "test_grpc_util.h"
#include "transport_suite.h"

struct ta_env {
  int unused; /* gRPC runs on its own threads: nothing to hold */
};

typedef enum { O_SOURCE, O_SINK, O_CLIENT } okind;

struct ta_obj {
  okind kind;
  void *p;
};

static void g_options_default_versioned(int version, void *o) {
  mcp_grpc_options_default_versioned(version, o);
}

static void g_check_v1_defaults(const void *opts) {
  const mcp_grpc_options *o = opts;
  ck_assert_int_eq(o->mode, MCP_GRPC_LISTEN);
  ck_assert_int_eq(o->max_recv_message_size, 64 << 20);
  ck_assert_int_eq(o->max_send_message_size, 64 << 20);
  ck_assert_ptr_null(o->address);
  ck_assert_int_eq(o->no_mcp, 0);
}

static ta_env *g_env_new(void) {
  ta_env *e = calloc(1, sizeof(*e));
  ck_assert_ptr_nonnull(e);
  return e;
}

static void g_env_del(ta_env *e) { free(e); }

static int g_run_until(ta_env *e, int (*cond)(void *), void *ud, long ms) {
  (void)e;
  return tg_wait(cond, ud, ms);
}

static int g_settled(int (*cond)(void *), void *ud) {
  return tg_wait(cond, ud, TG_TIMEOUT_MS);
}

static void g_options(mcp_grpc_options *o, const ta_opts *t) {
  memset(o, 0, sizeof(*o));
  mcp_grpc_options_default_versioned(
      t->defaults_version ? t->defaults_version : MCP_GRPC_OPTIONS_VERSION, o);
  o->mode = t->listen ? MCP_GRPC_LISTEN : MCP_GRPC_DIAL;
  o->address = t->address;
  o->shutdown_grace = t->listen ? MCP_SECONDS : 100 * MCP_MILLISECONDS;
  /* Short delays, so that a reconnection takes milliseconds. */
  o->backoff.initial = 20 * MCP_MILLISECONDS;
  o->backoff.max = 200 * MCP_MILLISECONDS;
  o->mem = t->mem;
  o->services = t->services;
  o->nservices = t->nservices;
  o->no_mcp = t->no_mcp;
  if (t->max_recv_message_size)
    o->max_recv_message_size = t->max_recv_message_size;
  if (t->max_send_message_size)
    o->max_send_message_size = t->max_send_message_size;
  if (t->max_concurrent_streams)
    o->max_concurrent_streams = t->max_concurrent_streams;
  if (t->max_streams)
    o->max_streams = t->max_streams;
  o->tls.cert_file = t->cert_file;
  o->tls.key_file = t->key_file;
  o->tls.ca_file = t->ca_file;
  o->tls.server_name = t->server_name;
  o->authorize = t->authorize;
  o->authorize_user_data = t->authorize_ud;
  TA_SYNC_OPTIONS(o, t); /* ---- sync ---- */
  TA_ADMISSION_OPTIONS(o, t);
}

/* The object's wrapper, made before the object (freed by the caller on
 * failure); the stream callback goes to the transport as it is. */
static ta_obj *g_wrap(okind k, const ta_opts *t, mcp_grpc_options *o) {
  ta_obj *obj = calloc(1, sizeof(*obj));
  ck_assert_ptr_nonnull(obj);
  obj->kind = k;
  o->on_stream = t->on_stream;
  o->user_data = t->on_stream_ud;
  return obj;
}

static int g_source_new(ta_env *e, ta_obj **pobj, const ta_opts *t,
                        const mcp_source_options *so) {
  (void)e;
  mcp_grpc_options o;
  g_options(&o, t);
  ta_obj *obj = g_wrap(O_SOURCE, t, &o);
  mcp_grpc_source *src = (mcp_grpc_source *)&o; /* untouched on failure */
  int rv = mcp_grpc_source_new_versioned(&src, t->version, &o, so);
  if (rv < 0) {
    ck_assert_ptr_eq(src, (mcp_grpc_source *)&o);
    free(obj);
    return rv;
  }
  obj->p = src;
  *pobj = obj;
  return 0;
}

static int g_sink_new(ta_env *e, ta_obj **pobj, const ta_opts *t,
                      mcp_sink_state *state) {
  (void)e;
  mcp_grpc_options o;
  g_options(&o, t);
  ta_obj *obj = g_wrap(O_SINK, t, &o);
  mcp_grpc_sink *sink = NULL;
  int rv = mcp_grpc_sink_new_versioned(&sink, t->version, &o, state);
  if (rv < 0) {
    ck_assert_ptr_null(sink);
    free(obj);
    return rv;
  }
  obj->p = sink;
  *pobj = obj;
  return 0;
}

static int g_client_new(ta_env *e, ta_obj **pobj, const ta_opts *t,
                        const mcp_client_def *def) {
  (void)e;
  mcp_grpc_options o;
  g_options(&o, t);
  ta_obj *obj = g_wrap(O_CLIENT, t, &o);
  mcp_grpc_client *c = NULL;
  int rv = mcp_grpc_client_new_versioned(&c, t->version, &o, def);
  if (rv < 0) {
    ck_assert_ptr_null(c);
    free(obj);
    return rv;
  }
  obj->p = c;
  *pobj = obj;
  return 0;
}

static void g_del(ta_obj *obj) {
  switch (obj->kind) {
  case O_SOURCE:
    mcp_grpc_source_del(obj->p);
    break;
  case O_SINK:
    mcp_grpc_sink_del(obj->p);
    break;
  default:
    mcp_grpc_client_del(obj->p);
    break;
  }
  free(obj);
}

static int g_port(ta_obj *obj) {
  return obj->kind == O_SINK ? mcp_grpc_sink_port(obj->p)
                             : mcp_grpc_source_port(obj->p);
}

static int g_reauthorize(ta_obj *obj) {
  return obj->kind == O_SINK ? mcp_grpc_sink_reauthorize(obj->p)
                             : mcp_grpc_source_reauthorize(obj->p);
}

static void g_count(const mcp_grpc_stream_info *info, void *ud) {
  (void)info;
  ++*(int *)ud;
}

static int g_streams(ta_obj *obj, int *seen) {
  mcp_grpc_stream_fn fn = seen ? g_count : NULL;
  switch (obj->kind) {
  case O_SOURCE:
    return mcp_grpc_source_streams(obj->p, fn, seen);
  case O_SINK:
    return mcp_grpc_sink_streams(obj->p, fn, seen);
  default:
    return mcp_grpc_client_streams(obj->p, fn, seen);
  }
}

static int g_list(ta_obj *obj, void (*fn)(const mcp_stream_info *, void *),
                  void *ud) {
  switch (obj->kind) {
  case O_SOURCE:
    return mcp_grpc_source_streams(obj->p, fn, ud);
  case O_SINK:
    return mcp_grpc_sink_streams(obj->p, fn, ud);
  default:
    return mcp_grpc_client_streams(obj->p, fn, ud);
  }
}

static int g_update(ta_obj *obj,
                    void (*fn)(mcp_store *, mcp_tstamp, void *), void *ud) {
  return mcp_grpc_source_update(obj->p, fn, ud);
}

static int g_call(ta_obj *obj, void (*fn)(mcp_tstamp, void *), void *ud) {
  return mcp_grpc_client_call(obj->p, fn, ud);
}

static int g_stats_versioned(ta_obj *obj, int version,
                             mcp_transport_stats *st) {
  switch (obj->kind) {
  case O_SOURCE:
    return mcp_grpc_source_stats_versioned(obj->p, version, st);
  case O_SINK:
    return mcp_grpc_sink_stats_versioned(obj->p, version, st);
  default:
    return mcp_grpc_client_stats_versioned(obj->p, version, st);
  }
}

static int g_sink_call(ta_obj *obj,
                       void (*fn)(mcp_sink_state *, mcp_tstamp, void *),
                       void *ud) {
  return mcp_grpc_sink_call(obj->p, fn, ud);
}

typedef struct g_turn_fn {
  void (*fn)(void *);
  void *ud;
} g_turn_fn;

static void g_turn_run(mcp_tstamp ts, void *ud) {
  (void)ts;
  g_turn_fn *t = ud;
  t->fn(t->ud);
}

static int g_turn(ta_env *e, ta_obj *obj, void (*fn)(void *), void *ud) {
  (void)e;
  g_turn_fn t = {fn, ud};
  return mcp_grpc_client_call(obj->p, g_turn_run, &t);
}

/* ---- gRPC alone ---- */

/* The access list is the gRPC transport's own API (h2c's authorization
 * takes a function): its allocations go through its hook, and a failure
 * of any one is NOMEM with nothing leaked. */
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

START_TEST(acl_allocations_go_through_its_hook) {
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

/* A gRPC client given MCP_GRPC_LISTEN is refused (h2c's client has no
 * such choice: mcp_h2c_client_new() always dials). */
static const char *no_method(void *ud, size_t slot) {
  (void)ud;
  (void)slot;
  return "/test.Counter/Count";
}

static int no_open(void *ud, size_t slot, mcp_tstamp ts, mcp_stream **pst) {
  (void)ud;
  (void)slot;
  (void)ts;
  (void)pst;
  return 0;
}

static void no_ended(void *ud, size_t slot, int status, const char *details,
                     mcp_tstamp ts) {
  (void)ud;
  (void)slot;
  (void)status;
  (void)details;
  (void)ts;
}

START_TEST(client_in_listen_mode_is_refused) {
  mcp_grpc_options o;
  mcp_grpc_options_default(&o);
  o.address = "127.0.0.1:1";
  mcp_client_def d = {
      .nslots = 1, .method = no_method, .open = no_open, .ended = no_ended};
  mcp_grpc_client *c = NULL;
  ck_assert_int_eq(mcp_grpc_client_new(&c, &o, &d), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(c);
}
END_TEST

static void g_add_own_tests(Suite *s) {
  TCase *tc = tcase_create("grpc");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, acl_allocations_go_through_its_hook);
  tcase_add_test(tc, client_in_listen_mode_is_refused);
  suite_add_tcase(s, tc);
}

/* ---- sync (tests/test_transport_sync.c) ---- */

static int g_store_call(ta_obj *obj, mcp_store *store,
                        void (*fn)(mcp_store *, mcp_tstamp, void *),
                        void *ud) {
  (void)store; /* the transport's thread's */
  return mcp_grpc_source_call(obj->p, fn, ud);
}

static int g_source_call(ta_obj *obj,
                         void (*fn)(mcp_store *, mcp_tstamp, void *),
                         void *ud) {
  return mcp_grpc_source_call(obj->p, fn, ud);
}

static int g_sink_finish(ta_obj *obj) { return mcp_grpc_sink_finish(obj->p); }
static void g_add_tls_tests(Suite *s); /* test_transport_tls, below */

const ta_transport ta_grpc = {
    .name = "grpc",
    .options_size = sizeof(mcp_grpc_options),
    .mem_offset = offsetof(mcp_grpc_options, mem),
    .options_v1 = MCP_GRPC_OPTIONS_V1,
    .options_version = MCP_GRPC_OPTIONS_VERSION,
    .options_default_versioned = g_options_default_versioned,
    .check_v1_defaults = g_check_v1_defaults,
    .env_new = g_env_new,
    .env_del = g_env_del,
    .run_until = g_run_until,
    .settled = g_settled,
    .source_new = g_source_new,
    .sink_new = g_sink_new,
    .client_new = g_client_new,
    .del = g_del,
    .port = g_port,
    .reauthorize = g_reauthorize,
    .streams = g_streams,
    .list = g_list,
    .update = g_update,
    .call = g_call,
    .stats_versioned = g_stats_versioned,
    .sink_call = g_sink_call,
    .now = mcp_grpc_now,
    .turn = g_turn,
    .asks_per_turn = 1,
    .min_redial = 16 * MCP_MILLISECONDS, /* 20 ms, jitter 0.2 */
    .min_sync_allocs = 3, /* refs and strings; the rest is gRPC's own */
    .add_own_tests = g_add_own_tests,
    /* ---- sync ---- */
    .store_call = g_store_call,
    .source_call = g_source_call,
    .sink_call_from = g_sink_call,
    .sink_finish = g_sink_finish,
    .method = mcp_grpc_method,
    .not_served = "unknown method",
    .runs_by_itself = 1,
    .tls_run = 1, /* its TLS options take the suite's files */
    .add_tls_tests = g_add_tls_tests,
};

/* ---- test_transport_tls ---- */

/* What of TLS only gRPC has: mcp_grpc_tls_check()'s messages (h2c's
 * mcp_h2c_tls_check() takes a listen flag and words its own:
 * tests/test_h2c_tls.c), and the application's own gRPC credentials,
 * which exclude the files. */
static void g_tls_files(mcp_grpc_options *o) {
  memset(&o->tls, 0, sizeof(o->tls));
  o->tls.cert_file = ta_cert("server.pem");
  o->tls.key_file = ta_cert("server.key");
  o->tls.ca_file = ta_cert("ca.pem");
}

START_TEST(tls_check_messages_and_credentials_exclude_files) {
  mcp_store *store = tg_store();
  mcp_source_options sopts;
  tg_source_opts(&sopts, store);
  mcp_grpc_options o;
  mcp_grpc_source *src = NULL;
  char err[256];

  tg_listen_opts(&o, "127.0.0.1:0", NULL);
  o.on_stream = NULL;
  g_tls_files(&o);
  o.tls.cert_file = ta_cert("missing.pem");
  ck_assert_int_eq(mcp_grpc_tls_check(&o.tls, err, sizeof(err)), MCP_ERR_IO);
  ck_assert_msg(strstr(err, "missing.pem: No such file or directory"), "%s",
                err);

  g_tls_files(&o);
  o.tls.key_file = NULL; /* a certificate without its key */
  ck_assert_int_eq(mcp_grpc_tls_check(&o.tls, err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);

  FILE *f = fopen(ta_cert("junk.pem"), "w");
  ck_assert_ptr_nonnull(f);
  fputs("not a certificate\n", f);
  ck_assert_int_eq(fclose(f), 0);
  g_tls_files(&o);
  o.tls.ca_file = ta_cert("junk.pem");
  ck_assert_int_eq(mcp_grpc_tls_check(&o.tls, err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err, "no PEM data in"), "%s", err);

  /* Files and the application's credentials: one or the other. */
  g_tls_files(&o);
  o.server_credentials = grpc_insecure_server_credentials_create();
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts),
                   MCP_ERR_INVALID_ARGUMENT);
  grpc_server_credentials_release(o.server_credentials);
  o.server_credentials = NULL;

  g_tls_files(&o);
  ck_assert_int_eq(mcp_grpc_tls_check(&o.tls, err, sizeof(err)), 0);
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  mcp_grpc_source_del(src);
  mcp_store_del(store);
}
END_TEST

static void g_add_tls_tests(Suite *s) {
  TCase *tc = tcase_create("grpc_tls");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, tls_check_messages_and_credentials_exclude_files);
  suite_add_tcase(s, tc);
}
