/*
 * h2c transport against gRPC's C core (the gRPC transport): each of our
 * four roles with the gRPC transport's opposite role, and mutual TLS with
 * access lists both ways (certificates from tests/gen_certs.sh). Our
 * objects run on the test's libuv loop; the gRPC objects on their own
 * threads, read through their synchronous calls.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h2c_harness.h"
#include "test_certs.h"
#include "helper.h"
#include "mcp/grpc.h"
#include "mcp/h2c.h"
#include "mcp/v1alpha1/mcp.pb-c.h"

static const char *const colls[] = {"c1", "c2"};

typedef struct ienv {
  uv_loop_t loop;
  mcp_store *store;
  mcp_sink_state *state;
  uint64_t seed;
  char addr[64];
} ienv;

static void setup(ienv *e, int incremental) {
  memset(e, 0, sizeof(*e));
  e->seed = 3;
  ck_assert_int_eq(uv_loop_init(&e->loop), 0);
  e->store = th_store(NULL);
  th_put(e->store, "c1", "a", "1", "A", mcp_h2c_now());
  th_put(e->store, "c1", "b", "1", "B", mcp_h2c_now());
  ck_assert_int_eq(mcp_store_add_collection(e->store, "c2"), 0);
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.node_id = "interop";
  so.collections = colls;
  so.ncollections = 2;
  so.incremental = incremental;
  ck_assert_int_eq(mcp_sink_state_new(&e->state, &so), 0);
}

static void teardown(ienv *e) {
  h2t_loop_finish(&e->loop);
  mcp_sink_state_del(e->state);
  mcp_store_del(e->store);
}

static mcp_h2c_options h2c_opts(ienv *e, mcp_h2c_mode mode, const char *addr) {
  mcp_h2c_options o;
  mcp_h2c_options_default(&o);
  o.mode = mode;
  o.address = addr;
  o.backoff.initial = 50 * MCP_MILLISECONDS;
  o.rand = th_rand;
  o.rand_user_data = &e->seed;
  o.shutdown_grace = MCP_SECONDS;
  return o;
}

static mcp_grpc_options grpc_opts(ienv *e, mcp_grpc_mode mode,
                                  const char *addr) {
  mcp_grpc_options o;
  mcp_grpc_options_default(&o);
  o.mode = mode;
  o.address = addr;
  o.backoff.initial = 50 * MCP_MILLISECONDS;
  o.rand = th_rand;
  o.rand_user_data = &e->seed;
  o.shutdown_grace = MCP_SECONDS;
  return o;
}

static mcp_source_options source_opts(ienv *e) {
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = e->store;
  return so;
}

/* What a sink state holds, read on whichever thread owns it. */
typedef struct held {
  size_t c1;
  int synced;
  int has_c;
} held;

static void read_held(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  (void)ts;
  held *h = ud;
  h->c1 = mcp_sink_state_count(st, "c1");
  h->synced = mcp_sink_state_synced(st);
  h->has_c = mcp_sink_state_version(st, "c1", "c") != NULL;
}

typedef struct gsink_want {
  mcp_grpc_sink *sink;
  int want_c;
} gsink_want;

static int grpc_sink_has(void *ud) {
  gsink_want *w = ud;
  held h = {0};
  ck_assert_int_eq(mcp_grpc_sink_call(w->sink, read_held, &h), 0);
  return h.synced && h.c1 == (size_t)(2 + w->want_c) && h.has_c == w->want_c;
}

typedef struct hsink_want {
  ienv *e;
  int want_c;
} hsink_want;

static int h2c_sink_has(void *ud) {
  hsink_want *w = ud;
  held h = {0};
  read_held(w->e->state, 0, &h);
  return h.synced && h.c1 == (size_t)(2 + w->want_c) && h.has_c == w->want_c;
}

static void add_c(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)ud;
  th_put(st, "c1", "c", "1", "C", ts);
}

/* Our ResourceSource server, gRPC's sink client. */
START_TEST(grpc_sink_dials_h2c_source) {
  ienv e;
  setup(&e, 1);
  mcp_h2c_options o = h2c_opts(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  mcp_source_options so = source_opts(&e);
  mcp_h2c_source *src;
  ck_assert_int_eq(mcp_h2c_source_new(&src, &e.loop, &o, &so), 0);
  snprintf(e.addr, sizeof(e.addr), "127.0.0.1:%d", mcp_h2c_source_port(src));
  mcp_grpc_options go = grpc_opts(&e, MCP_GRPC_DIAL, e.addr);
  mcp_grpc_sink *sink;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &go, e.state), 0);
  gsink_want w = {sink, 0};
  ck_assert(h2t_run_until(&e.loop, grpc_sink_has, &w, 10000));
  add_c(e.store, mcp_h2c_now(), NULL);
  mcp_h2c_source_notify(src);
  w.want_c = 1;
  ck_assert(h2t_run_until(&e.loop, grpc_sink_has, &w, 10000));
  mcp_grpc_sink_del(sink); /* blocks while our loop is idle: gRPC's
                              cancellation needs nothing from us */
  mcp_h2c_source_del(src);
  teardown(&e);
}
END_TEST

/* gRPC's ResourceSource server, our sink client. */
START_TEST(h2c_sink_dials_grpc_source) {
  ienv e;
  setup(&e, 1);
  mcp_grpc_options go = grpc_opts(&e, MCP_GRPC_LISTEN, "127.0.0.1:0");
  mcp_source_options so = source_opts(&e);
  mcp_grpc_source *src;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &go, &so), 0);
  snprintf(e.addr, sizeof(e.addr), "127.0.0.1:%d", mcp_grpc_source_port(src));
  mcp_h2c_options o = h2c_opts(&e, MCP_H2C_DIAL, e.addr);
  mcp_h2c_sink *sink;
  ck_assert_int_eq(mcp_h2c_sink_new(&sink, &e.loop, &o, e.state), 0);
  hsink_want w = {&e, 0};
  ck_assert(h2t_run_until(&e.loop, h2c_sink_has, &w, 10000));
  ck_assert_int_eq(mcp_grpc_source_update(src, add_c, NULL), 0);
  w.want_c = 1;
  ck_assert(h2t_run_until(&e.loop, h2c_sink_has, &w, 10000));
  /* gRPC's server ends our stream on shutdown: UNAVAILABLE, and we
   * reconnect (to nothing) until deleted. */
  mcp_grpc_source_del(src);
  h2t_run_for(&e.loop, 100);
  mcp_h2c_sink_del(sink);
  teardown(&e);
}
END_TEST

/* A raw HTTP/2 client on the gRPC transport's listener: what flow
 * control costs a peer per message. */
static void raw_request(rc *c, rc_stream *s, const char *nonce) {
  size_t n;
  uint8_t *p = th_request(&n, "raw", "c1", nonce, 0, NULL, 0, NULL);
  rc_send_msg(c, s, 0, p, n);
  free(p);
}

typedef struct raw_src_want {
  rc *c;
  mcp_grpc_source *src;
} raw_src_want;

static int raw_src_read_all(void *ud) {
  raw_src_want *w = ud;
  rc_io(w->c);
  mcp_grpc_stats st;
  mcp_grpc_source_stats(w->src, &st);
  return st.messages_received >= 5;
}

static void put_n(mcp_store *st, mcp_tstamp ts, void *ud) {
  char name[16];
  snprintf(name, sizeof(name), "n%d", *(int *)ud);
  th_put(st, "c1", name, "1", "N", ts);
}

/* A listening gRPC source with |ca| as its channel_args, and the raw
 * client connected to it. */
static mcp_grpc_source *raw_grpc_source(ienv *e, const grpc_channel_args *ca,
                                        rc *c) {
  mcp_grpc_options go = grpc_opts(e, MCP_GRPC_LISTEN, "127.0.0.1:0");
  go.channel_args = ca;
  mcp_source_options so = source_opts(e);
  mcp_grpc_source *src;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &go, &so), 0);
  memset(c, 0, sizeof(*c));
  rc_connect(c, mcp_grpc_source_port(src), 1 << 20);
  return src;
}

/* gRPC's bandwidth-delay probe answers data it reads with PINGs: each
 * ACK a sink sent could cost it a PING to answer (issue 25,
 * docs/benchmarks.md "gRPC's BDP probes"). The transport turns it off and
 * announces the fixed stream window the nghttp2 transport has. Each
 * round: a request (the first, then ACKs) read by the server, and a push
 * after it. */
START_TEST(grpc_source_sends_no_ping_per_message) {
  ienv e;
  setup(&e, 0);
  rc c;
  mcp_grpc_source *src = raw_grpc_source(&e, NULL, &c);
  rc_stream *s = rc_open(&c, "POST", MCP_GRPC_RESOURCE_SOURCE_METHOD,
                         "application/grpc", 1, NULL, NULL);
  raw_request(&c, s, "");
  for (int round = 1; round <= 4; round++) {
    ck_assert(rc_run_until_msgs(&e.loop, &c, s, round, 10000));
    const uint8_t *p;
    size_t n;
    ck_assert(rc_msg(s, round - 1, &p, &n));
    Istio__Mcp__V1alpha1__Resources *r =
        istio__mcp__v1alpha1__resources__unpack(NULL, n, p);
    ck_assert_ptr_nonnull(r);
    raw_request(&c, s, r->nonce); /* the ACK */
    istio__mcp__v1alpha1__resources__free_unpacked(r, NULL);
    /* Synchronous: put_n reads |round|, which an update queued to run
     * later could read after the loop moved on (two rounds putting one
     * name, the second no change and no push). */
    if (round < 4)
      ck_assert_int_eq(mcp_grpc_source_call(src, put_n, &round), 0);
  }
  /* The server has read all five requests. With the probe on, its first
   * PING follows the first request read and comes before that push (this
   * test counts one then); none is allowed now. */
  raw_src_want rw = {&c, src};
  ck_assert(h2t_run_until(&e.loop, raw_src_read_all, &rw, 10000));
  rc_io(&c);
  ck_assert_int_eq(c.pings, 0);
  ck_assert_uint_eq(nghttp2_session_get_remote_settings(
                        c.h2, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE),
                    MCP_GRPC_STREAM_WINDOW);
  rc_close(&c);
  mcp_grpc_source_del(src);
  teardown(&e);
}
END_TEST

static int raw_has_settings(void *ud) {
  rc *c = ud;
  rc_io(c);
  return nghttp2_session_get_remote_settings(
             c->h2, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE) != 65535;
}

static int raw_has_ping(void *ud) {
  rc *c = ud;
  rc_io(c);
  return c->pings > 0;
}

/* channel_args of one integer argument, kept in |a|. */
static grpc_channel_args one_int_arg(grpc_arg *a, const char *key, int v) {
  memset(a, 0, sizeof(*a));
  a->type = GRPC_ARG_INTEGER;
  a->key = (char *)key;
  a->value.integer = v;
  grpc_channel_args args = {1, a};
  return args;
}

/* The header's promise: the window or the probe in channel_args replaces
 * the transport's (gRPC would take the first of two), so an application
 * can have either back. */
START_TEST(grpc_channel_args_override_the_window) {
  ienv e;
  setup(&e, 0);
  grpc_arg arg;
  grpc_channel_args args =
      one_int_arg(&arg, GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 4 << 20);
  rc c;
  mcp_grpc_source *src = raw_grpc_source(&e, &args, &c);
  ck_assert(h2t_run_until(&e.loop, raw_has_settings, &c, 10000));
  ck_assert_uint_eq(nghttp2_session_get_remote_settings(
                        c.h2, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE),
                    4 << 20);
  rc_close(&c);
  mcp_grpc_source_del(src);
  teardown(&e);
}
END_TEST

START_TEST(grpc_channel_args_turn_the_probe_back_on) {
  ienv e;
  setup(&e, 0);
  grpc_arg arg;
  grpc_channel_args args = one_int_arg(&arg, GRPC_ARG_HTTP2_BDP_PROBE, 1);
  rc c;
  mcp_grpc_source *src = raw_grpc_source(&e, &args, &c);
  rc_stream *s = rc_open(&c, "POST", MCP_GRPC_RESOURCE_SOURCE_METHOD,
                         "application/grpc", 1, NULL, NULL);
  raw_request(&c, s, "");
  /* The probe's PING follows the first request the server reads. */
  ck_assert(h2t_run_until(&e.loop, raw_has_ping, &c, 10000));
  rc_close(&c);
  mcp_grpc_source_del(src);
  teardown(&e);
}
END_TEST

/* Our ResourceSink server, gRPC's source client (it sends the trigger). */
START_TEST(grpc_source_dials_h2c_sink) {
  ienv e;
  setup(&e, 0);
  mcp_h2c_options o = h2c_opts(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  mcp_h2c_sink *sink;
  ck_assert_int_eq(mcp_h2c_sink_new(&sink, &e.loop, &o, e.state), 0);
  snprintf(e.addr, sizeof(e.addr), "127.0.0.1:%d", mcp_h2c_sink_port(sink));
  mcp_grpc_options go = grpc_opts(&e, MCP_GRPC_DIAL, e.addr);
  mcp_source_options so = source_opts(&e);
  mcp_grpc_source *src;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &go, &so), 0);
  hsink_want w = {&e, 0};
  ck_assert(h2t_run_until(&e.loop, h2c_sink_has, &w, 10000));
  ck_assert_int_eq(mcp_grpc_source_update(src, add_c, NULL), 0);
  w.want_c = 1;
  ck_assert(h2t_run_until(&e.loop, h2c_sink_has, &w, 10000));
  mcp_grpc_source_del(src);
  mcp_h2c_sink_del(sink);
  teardown(&e);
}
END_TEST

/* gRPC's ResourceSink server, our source client. */
START_TEST(h2c_source_dials_grpc_sink) {
  ienv e;
  setup(&e, 0);
  mcp_grpc_options go = grpc_opts(&e, MCP_GRPC_LISTEN, "127.0.0.1:0");
  mcp_grpc_sink *sink;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &go, e.state), 0);
  snprintf(e.addr, sizeof(e.addr), "127.0.0.1:%d", mcp_grpc_sink_port(sink));
  mcp_h2c_options o = h2c_opts(&e, MCP_H2C_DIAL, e.addr);
  mcp_source_options so = source_opts(&e);
  mcp_h2c_source *src;
  ck_assert_int_eq(mcp_h2c_source_new(&src, &e.loop, &o, &so), 0);
  gsink_want w = {sink, 0};
  ck_assert(h2t_run_until(&e.loop, grpc_sink_has, &w, 10000));
  add_c(e.store, mcp_h2c_now(), NULL);
  mcp_h2c_source_notify(src);
  w.want_c = 1;
  ck_assert(h2t_run_until(&e.loop, grpc_sink_has, &w, 10000));
  mcp_h2c_source_del(src);
  h2t_run_for(&e.loop, 50);
  mcp_grpc_sink_del(sink);
  teardown(&e);
}
END_TEST

/* ---- mutual TLS with gRPC core ---- */

#define SINK_A "spiffe://cluster.local/ns/default/sa/sink-a"
#define ISTIOD "spiffe://cluster.local/ns/istio-system/sa/istiod"

static const char *paths[5];

/* "<dir>/<name>", kept in slot |i| (main() made the certificates). */
static const char *cert(int i, const char *name) {
  return paths[i] = test_cert(name);
}

static mcp_acl *acl_of(const char *rule) {
  mcp_acl *acl = NULL;
  ck_assert_int_eq(mcp_acl_new(&acl, NULL), 0);
  ck_assert_int_eq(mcp_acl_add(acl, MCP_ACL_ALLOW, rule), 0);
  return acl;
}

/* gRPC core dials our TLS listener, each presenting a certificate the
 * other's CA verifies, each checking the other's SPIFFE identity. */
START_TEST(grpc_sink_dials_h2c_source_mtls) {
  ienv e;
  setup(&e, 1);
  mcp_h2c_options o = h2c_opts(&e, MCP_H2C_LISTEN, "127.0.0.1:0");
  o.tls.cert_file = cert(0, "server.pem");
  o.tls.key_file = cert(1, "server.key");
  o.tls.ca_file = cert(2, "ca.pem");
  mcp_acl *acl = acl_of(SINK_A);
  o.authorize = mcp_acl_authorize;
  o.authorize_user_data = acl;
  mcp_source_options so = source_opts(&e);
  mcp_h2c_source *src;
  ck_assert_int_eq(mcp_h2c_source_new(&src, &e.loop, &o, &so), 0);
  snprintf(e.addr, sizeof(e.addr), "127.0.0.1:%d", mcp_h2c_source_port(src));
  mcp_grpc_options go = grpc_opts(&e, MCP_GRPC_DIAL, e.addr);
  go.tls.cert_file = cert(3, "client.pem");
  go.tls.key_file = cert(4, "client.key");
  go.tls.ca_file = paths[2];
  mcp_grpc_acl *gacl;
  ck_assert_int_eq(mcp_grpc_acl_new(&gacl), 0);
  ck_assert_int_eq(mcp_grpc_acl_add(gacl, MCP_GRPC_ACL_ALLOW, ISTIOD), 0);
  go.authorize = mcp_grpc_acl_authorize;
  go.authorize_user_data = gacl;
  mcp_grpc_sink *sink;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &go, e.state), 0);
  gsink_want w = {sink, 0};
  ck_assert(h2t_run_until(&e.loop, grpc_sink_has, &w, 10000));
  mcp_h2c_stats st;
  ck_assert_int_eq(mcp_h2c_source_stats(src, &st), 0);
  ck_assert_uint_ge(st.tls_handshakes, 1);
  mcp_grpc_sink_del(sink);
  mcp_h2c_source_del(src);
  teardown(&e);
  mcp_acl_del(acl);
  mcp_grpc_acl_del(gacl);
}
END_TEST

/* Our TLS dialer against gRPC core's TLS listener (mutual TLS). */
START_TEST(h2c_sink_dials_grpc_source_mtls) {
  ienv e;
  setup(&e, 1);
  mcp_grpc_options go = grpc_opts(&e, MCP_GRPC_LISTEN, "127.0.0.1:0");
  go.tls.cert_file = cert(0, "server.pem");
  go.tls.key_file = cert(1, "server.key");
  go.tls.ca_file = cert(2, "ca.pem");
  mcp_grpc_acl *gacl;
  ck_assert_int_eq(mcp_grpc_acl_new(&gacl), 0);
  ck_assert_int_eq(mcp_grpc_acl_add(gacl, MCP_GRPC_ACL_ALLOW, SINK_A), 0);
  go.authorize = mcp_grpc_acl_authorize;
  go.authorize_user_data = gacl;
  mcp_source_options so = source_opts(&e);
  mcp_grpc_source *src;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &go, &so), 0);
  snprintf(e.addr, sizeof(e.addr), "127.0.0.1:%d", mcp_grpc_source_port(src));
  mcp_h2c_options o = h2c_opts(&e, MCP_H2C_DIAL, e.addr);
  o.tls.cert_file = cert(3, "client.pem");
  o.tls.key_file = cert(4, "client.key");
  o.tls.ca_file = paths[2];
  mcp_acl *acl = acl_of(ISTIOD);
  o.authorize = mcp_acl_authorize;
  o.authorize_user_data = acl;
  mcp_h2c_sink *sink;
  ck_assert_int_eq(mcp_h2c_sink_new(&sink, &e.loop, &o, e.state), 0);
  hsink_want w = {&e, 0};
  ck_assert(h2t_run_until(&e.loop, h2c_sink_has, &w, 10000));
  mcp_grpc_source_del(src);
  h2t_run_for(&e.loop, 100);
  mcp_h2c_sink_del(sink);
  teardown(&e);
  mcp_acl_del(acl);
  mcp_grpc_acl_del(gacl);
}
END_TEST

Suite *suite(void) {
  Suite *s = suite_create("h2c_interop");
  TCase *t = tcase_create("all");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, grpc_sink_dials_h2c_source);
  tcase_add_test(t, h2c_sink_dials_grpc_source);
  tcase_add_test(t, grpc_source_dials_h2c_sink);
  tcase_add_test(t, h2c_source_dials_grpc_sink);
  tcase_add_test(t, grpc_source_sends_no_ping_per_message);
  tcase_add_test(t, grpc_channel_args_override_the_window);
  tcase_add_test(t, grpc_channel_args_turn_the_probe_back_on);
  tcase_add_test(t, grpc_sink_dials_h2c_source_mtls);
  tcase_add_test(t, h2c_sink_dials_grpc_source_mtls);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN); /* libuv writes with write(2) */
  if (test_certs_make() != 0)
    return EXIT_FAILURE;
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  test_certs_remove();
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
