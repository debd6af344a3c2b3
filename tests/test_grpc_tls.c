/* TLS, mutual TLS and authorization by identity, over real gRPC on
 * 127.0.0.1, with certificates made at run time by tests/gen_certs.sh:
 * handshakes that work and the ones that must fail, identities read from
 * SANs and the CN, refused peers that get nothing, access lists replaced
 * while running, the dialing side checking the server, and certificate
 * files rotated under a listening source. */
#include <sys/stat.h>
#include <unistd.h>

#include "test_grpc_util.h"

#include "test_certs.h"

#define ISTIOD "spiffe://cluster.local/ns/istio-system/sa/istiod"
#define SINK_A "spiffe://cluster.local/ns/default/sa/sink-a"
#define SINK_B "spiffe://cluster.local/ns/evil/sa/sink-b"

static const char *const colls[] = {"c1"};
#define cp test_cert

/* Certificate |leaf| ("server", "client", ...; NULL: none) and CA |ca|
 * ("ca", "other-ca"; NULL: none). */
static void set_tls(mcp_grpc_options *o, const char *leaf, const char *ca) {
  char name[64];
  memset(&o->tls, 0, sizeof(o->tls));
  if (leaf) {
    snprintf(name, sizeof(name), "%s.pem", leaf);
    o->tls.cert_file = cp(name);
    snprintf(name, sizeof(name), "%s.key", leaf);
    o->tls.key_file = cp(name);
  }
  if (ca) {
    snprintf(name, sizeof(name), "%s.pem", ca);
    o->tls.ca_file = cp(name);
  }
}

static void set_acl(mcp_grpc_options *o, mcp_grpc_acl *acl) {
  o->authorize = acl ? mcp_grpc_acl_authorize : NULL;
  o->authorize_user_data = acl;
}

static mcp_grpc_acl *acl_of(const char *text) {
  mcp_grpc_acl *acl = NULL;
  ck_assert_int_eq(mcp_grpc_acl_new(&acl), 0);
  char err[128];
  ck_assert_int_eq(mcp_grpc_acl_parse(acl, text, strlen(text), err,
                                      sizeof(err)),
                   0);
  return acl;
}

/* A source listening on 127.0.0.1 and a sink dialing it. */
typedef struct rig {
  mcp_store *store;
  mcp_grpc_source *src;
  mcp_sink_state *state;
  mcp_grpc_sink *sink;
  tg_streams so, ko;
  char addr[64];
} rig;

static void rig_source(rig *r, const char *leaf, const char *ca,
                       mcp_grpc_acl *acl) {
  memset(r, 0, sizeof(*r));
  tg_streams_init(&r->so);
  tg_streams_init(&r->ko);
  r->store = tg_store();
  mcp_tstamp ts = mcp_grpc_now();
  tg_put(r->store, "c1", "a", "alpha", ts);
  tg_put(r->store, "c1", "b", "beta", ts);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &r->so);
  set_tls(&o, leaf, ca);
  set_acl(&o, acl);
  tg_source_opts(&sopts, r->store);
  ck_assert_int_eq(mcp_grpc_source_new(&r->src, &o, &sopts), 0);
}

static void rig_sink(rig *r, const char *leaf, const char *ca,
                     const char *server_name, mcp_grpc_acl *acl) {
  r->state = tg_sink_state(colls, 1, 1);
  mcp_grpc_options o;
  tg_dial_opts(&o, r->addr, sizeof(r->addr), mcp_grpc_source_port(r->src),
               &r->ko);
  set_tls(&o, leaf, ca);
  o.tls.server_name = server_name;
  set_acl(&o, acl);
  ck_assert_int_eq(mcp_grpc_sink_new(&r->sink, &o, r->state), 0);
}

static void rig_free(rig *r) {
  mcp_grpc_sink_del(r->sink);
  mcp_grpc_source_del(r->src);
  mcp_sink_state_del(r->state);
  mcp_store_del(r->store);
}

static int synced(rig *r) {
  tg_pair p = {r->src, NULL, r->sink, "c1"};
  return tg_wait(tg_equal, &p, TG_TIMEOUT_MS);
}

static int closed_once(void *ud) { return tg_streams_get(ud).closed >= 1; }
static int refused_once(void *ud) { return tg_streams_get(ud).refused >= 1; }

/* The identities of the one open stream of an object. */
typedef struct ids {
  int n, tls, streams;
  char id[8][160];
} ids;

static void grab_ids(const mcp_grpc_stream_info *info, void *ud) {
  ids *x = ud;
  x->streams++;
  x->n = (int)info->nidentities;
  x->tls = info->tls;
  for (size_t i = 0; i < info->nidentities && i < 8; i++)
    snprintf(x->id[i], sizeof(x->id[0]), "%s", info->identities[i]);
}

static ids source_ids(rig *r) {
  ids x;
  memset(&x, 0, sizeof(x));
  ck_assert_int_eq(mcp_grpc_source_streams(r->src, grab_ids, &x), 1);
  ck_assert_int_eq(x.streams, 1);
  return x;
}

static ids sink_ids(rig *r) {
  ids x;
  memset(&x, 0, sizeof(x));
  ck_assert_int_eq(mcp_grpc_sink_streams(r->sink, grab_ids, &x), 1);
  ck_assert_int_eq(x.streams, 1);
  return x;
}

static void check_tls_failure(tg_streams *ko, const char *also) {
  ck_assert(tg_wait(closed_once, ko, TG_TIMEOUT_MS));
  tg_streams k = tg_streams_get(ko);
  ck_assert_int_eq(k.last_status, GRPC_STATUS_UNAVAILABLE);
  ck_assert_msg(strncmp(k.last_details, "no TLS connection", 17) == 0,
                "details: %s", k.last_details);
  if (also)
    ck_assert_msg(strstr(k.last_details, also), "details: %s",
                  k.last_details);
}

/* ---- handshakes that work ---- */

START_TEST(test_mtls_sink_dials_source) {
  mcp_grpc_acl *sa = acl_of("allow " SINK_A "\n");
  mcp_grpc_acl *ka = acl_of("allow " ISTIOD "\n");
  rig r;
  rig_source(&r, "server", "ca", sa);
  rig_sink(&r, "client", "ca", NULL, ka);
  ck_assert(synced(&r));
  /* The source knows the sink by its SPIFFE ID, then its CN. */
  ids x = source_ids(&r);
  ck_assert_int_eq(x.tls, 1);
  ck_assert_int_eq(x.n, 2);
  ck_assert_str_eq(x.id[0], SINK_A);
  ck_assert_str_eq(x.id[1], "sink-a");
  /* The sink knows the source: URI SAN, DNS SAN, CN (not the IP SAN). */
  x = sink_ids(&r);
  ck_assert_int_eq(x.tls, 1);
  ck_assert_int_eq(x.n, 3);
  ck_assert_str_eq(x.id[0], ISTIOD);
  ck_assert_str_eq(x.id[1], "localhost");
  ck_assert_str_eq(x.id[2], "localhost");
  ck_assert_int_eq(tg_streams_get(&r.so).refused, 0);
  rig_free(&r);
  mcp_grpc_acl_del(sa);
  mcp_grpc_acl_del(ka);
}
END_TEST

START_TEST(test_mtls_source_dials_sink) {
  /* The other direction: a sink server requiring certificates, which
   * allows only istiod, and a source presenting istiod's. */
  mcp_grpc_acl *acl = acl_of("allow " ISTIOD "\n");
  mcp_store *store = tg_store();
  tg_put(store, "c1", "a", "alpha", mcp_grpc_now());
  tg_streams so, ko;
  tg_streams_init(&so);
  tg_streams_init(&ko);
  mcp_sink_state *state = tg_sink_state(colls, 1, 0);
  mcp_grpc_options o;
  tg_listen_opts(&o, "127.0.0.1:0", &ko);
  set_tls(&o, "server", "ca");
  set_acl(&o, acl);
  mcp_grpc_sink *sink = NULL;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), 0);
  char addr[64];
  mcp_source_options sopts;
  tg_source_opts(&sopts, store);
  tg_dial_opts(&o, addr, sizeof(addr), mcp_grpc_sink_port(sink), &so);
  set_tls(&o, "server", "ca");
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  tg_pair p = {src, NULL, sink, "c1"};
  ck_assert(tg_wait(tg_equal, &p, TG_TIMEOUT_MS));
  ck_assert_int_eq(tg_streams_get(&ko).refused, 0);
  mcp_grpc_source_del(src);
  mcp_grpc_sink_del(sink);
  mcp_sink_state_del(state);
  mcp_store_del(store);
  mcp_grpc_acl_del(acl);
}
END_TEST

START_TEST(test_server_only_tls_gives_no_client_identity) {
  rig r;
  rig_source(&r, "server", NULL, NULL); /* no CA: no client certificate */
  rig_sink(&r, NULL, "ca", NULL, NULL);
  ck_assert(synced(&r));
  ids x = source_ids(&r);
  ck_assert_int_eq(x.tls, 1);
  ck_assert_int_eq(x.n, 0);
  rig_free(&r);
}
END_TEST

START_TEST(test_common_name_is_an_identity) {
  mcp_grpc_acl *acl = acl_of("legacy-client\n");
  rig r;
  rig_source(&r, "server", "ca", acl);
  rig_sink(&r, "cn", "ca", NULL, NULL);
  ck_assert(synced(&r));
  ids x = source_ids(&r);
  ck_assert_int_eq(x.n, 1);
  ck_assert_str_eq(x.id[0], "legacy-client");
  rig_free(&r);
  mcp_grpc_acl_del(acl);
}
END_TEST

/* ---- handshakes that must fail ---- */

START_TEST(test_client_without_certificate_fails) {
  rig r;
  rig_source(&r, "server", "ca", NULL);
  rig_sink(&r, NULL, "ca", NULL, NULL);
  check_tls_failure(&r.ko, NULL);
  tg_streams s = tg_streams_get(&r.so);
  ck_assert_int_eq(s.opened, 0); /* never became a call */
  ck_assert_int_eq(s.refused, 0);
  rig_free(&r);
}
END_TEST

START_TEST(test_client_certificate_from_unknown_ca_fails) {
  rig r;
  rig_source(&r, "server", "ca", NULL);
  rig_sink(&r, "stranger", "ca", NULL, NULL); /* sink-a's URI, other CA */
  check_tls_failure(&r.ko, NULL);
  ck_assert_int_eq(tg_streams_get(&r.so).opened, 0);
  rig_free(&r);
}
END_TEST

START_TEST(test_server_certificate_from_unknown_ca_fails) {
  /* The sink's access list would refuse the server, but the handshake
   * fails first: UNAVAILABLE, not an authorization status. */
  mcp_grpc_acl *acl = acl_of("allow nobody\n");
  rig r;
  rig_source(&r, "server", NULL, NULL);
  rig_sink(&r, NULL, "other-ca", NULL, acl);
  check_tls_failure(&r.ko, "certificate verify failed");
  ck_assert_int_eq(tg_streams_get(&r.so).opened, 0);
  rig_free(&r);
  mcp_grpc_acl_del(acl);
}
END_TEST

START_TEST(test_server_name_mismatch_fails_and_override_works) {
  rig r;
  rig_source(&r, "wrongname", NULL, NULL); /* DNS:other.example only */
  rig_sink(&r, NULL, "ca", NULL, NULL);    /* dials 127.0.0.1 */
  check_tls_failure(&r.ko, "not in peer certificate");
  ck_assert_int_eq(tg_streams_get(&r.so).opened, 0);
  mcp_grpc_sink_del(r.sink);
  mcp_sink_state_del(r.state);
  tg_streams_init(&r.ko);
  rig_sink(&r, NULL, "ca", "other.example", NULL);
  ck_assert(synced(&r));
  rig_free(&r);
}
END_TEST

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f)
    return -1;
  fputs(text, f);
  return fclose(f);
}

START_TEST(test_bad_files_are_clear_errors) {
  mcp_store *store = tg_store();
  mcp_source_options sopts;
  tg_source_opts(&sopts, store);
  mcp_grpc_options o;
  mcp_grpc_source *src = NULL;
  char err[256];

  tg_listen_opts(&o, "127.0.0.1:0", NULL);
  o.on_stream = NULL;
  set_tls(&o, "server", "ca");
  o.tls.cert_file = cp("missing.pem");
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), MCP_ERR_IO);
  ck_assert_int_eq(mcp_grpc_tls_check(&o.tls, err, sizeof(err)), MCP_ERR_IO);
  ck_assert_msg(strstr(err, "missing.pem: No such file or directory"), "%s",
                err);

  set_tls(&o, "server", "ca");
  o.tls.key_file = NULL; /* a certificate without its key */
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_grpc_tls_check(&o.tls, err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);

  set_tls(&o, NULL, "ca"); /* listening needs a certificate */
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts),
                   MCP_ERR_INVALID_ARGUMENT);

  ck_assert_int_eq(write_text(cp("junk.pem"), "not a certificate\n"), 0);
  set_tls(&o, "server", "ca");
  o.tls.ca_file = cp("junk.pem");
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_grpc_tls_check(&o.tls, err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err, "no PEM data in"), "%s", err);

  set_tls(&o, "server", "ca");
  o.tls.key_file = cp("client.key"); /* not the certificate's key */
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts),
                   MCP_ERR_INVALID_ARGUMENT);

  /* Files and the application's credentials: one or the other. */
  set_tls(&o, "server", "ca");
  o.server_credentials = grpc_insecure_server_credentials_create();
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts),
                   MCP_ERR_INVALID_ARGUMENT);
  grpc_server_credentials_release(o.server_credentials);
  o.server_credentials = NULL;

  set_tls(&o, "server", "ca");
  ck_assert_int_eq(mcp_grpc_tls_check(&o.tls, err, sizeof(err)), 0);
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  mcp_grpc_source_del(src);
  mcp_store_del(store);
}
END_TEST

/* ---- authorization ---- */

START_TEST(test_denied_identity_gets_nothing) {
  mcp_grpc_acl *acl = acl_of("allow " SINK_A "\n");
  rig r;
  rig_source(&r, "server", "ca", acl);
  rig_sink(&r, "denied", "ca", NULL, NULL);
  ck_assert(tg_wait(closed_once, &r.ko, TG_TIMEOUT_MS));
  tg_streams k = tg_streams_get(&r.ko);
  ck_assert_int_eq(k.last_status, GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_str_eq(k.last_details,
                   "permission denied: peer identity not allowed");
  ck_assert(tg_wait(refused_once, &r.so, TG_TIMEOUT_MS));
  tg_streams s = tg_streams_get(&r.so);
  ck_assert_int_eq(s.opened, 0);
  ck_assert_int_eq(s.last_refused_status, GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_str_eq(s.last_refused_identity, SINK_B);
  /* No session read its requests, nothing was pushed or received. */
  tg_events e = tg_events_get();
  ck_assert_int_eq(e.requests, 0);
  ck_assert_int_eq(e.pushes, 0);
  ck_assert_int_eq(e.sink_acks + e.sink_nacks, 0);
  mcp_grpc_stats st;
  ck_assert_int_eq(mcp_grpc_source_stats(r.src, &st), 0);
  ck_assert_uint_ge(st.refused_denied, 1);
  ck_assert_uint_eq(st.opened, 0);
  rig_free(&r);
  mcp_grpc_acl_del(acl);
}
END_TEST

START_TEST(test_no_identity_is_unauthenticated) {
  mcp_grpc_acl *acl = acl_of("allow *\n");
  /* TLS, but the server asks for no client certificate. */
  rig r;
  rig_source(&r, "server", NULL, acl);
  rig_sink(&r, NULL, "ca", NULL, NULL);
  ck_assert(tg_wait(closed_once, &r.ko, TG_TIMEOUT_MS));
  tg_streams k = tg_streams_get(&r.ko);
  ck_assert_int_eq(k.last_status, GRPC_STATUS_UNAUTHENTICATED);
  ck_assert_str_eq(k.last_details,
                   "peer not authenticated: no verified certificate identity");
  ck_assert_int_eq(tg_events_get().requests, 0);
  rig_free(&r);
  /* No TLS at all. */
  rig_source(&r, NULL, NULL, acl);
  rig_sink(&r, NULL, NULL, NULL, NULL);
  ck_assert(tg_wait(closed_once, &r.ko, TG_TIMEOUT_MS));
  ck_assert_int_eq(tg_streams_get(&r.ko).last_status,
                   GRPC_STATUS_UNAUTHENTICATED);
  mcp_grpc_stats st;
  ck_assert_int_eq(mcp_grpc_source_stats(r.src, &st), 0);
  ck_assert_uint_ge(st.refused_unauthenticated, 1);
  ck_assert_int_eq(tg_events_get().requests, 0);
  rig_free(&r);
  mcp_grpc_acl_del(acl);
}
END_TEST

static int refused_twice(void *ud) { return tg_streams_get(ud).refused >= 2; }
static int opened_twice(void *ud) { return tg_streams_get(ud).opened >= 2; }

static void replace_file(const char *path, const char *text) {
  char tmp[200];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  ck_assert_int_eq(write_text(tmp, text), 0);
  ck_assert_int_eq(rename(tmp, path), 0);
}

static void add_c(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)ud;
  tg_put(st, "c1", "c", "gamma", ts);
}

START_TEST(test_access_list_reloaded_while_running) {
  const char *path = cp("access.list");
  replace_file(path, "# who may sync\nallow " SINK_A "\n");
  mcp_grpc_acl *acl = NULL;
  ck_assert_int_eq(mcp_grpc_acl_new(&acl), 0);
  char err[128];
  ck_assert_int_eq(mcp_grpc_acl_load_file(acl, path, err, sizeof(err)), 0);
  rig r;
  rig_source(&r, "server", "ca", acl);
  rig_sink(&r, "client", "ca", NULL, NULL);
  ck_assert(synced(&r));

  /* sink-a is no longer allowed: its stream ends, and each reconnection
   * is refused. */
  replace_file(path, "allow " ISTIOD "\ndeny " SINK_A "\n");
  ck_assert_int_eq(mcp_grpc_acl_reload(acl, err, sizeof(err)), 1);
  ck_assert_int_eq(mcp_grpc_source_reauthorize(r.src), 0);
  ck_assert(tg_wait(closed_once, &r.ko, TG_TIMEOUT_MS));
  ck_assert_int_eq(tg_streams_get(&r.ko).last_status,
                   GRPC_STATUS_PERMISSION_DENIED);
  ck_assert(tg_wait(refused_twice, &r.so, TG_TIMEOUT_MS));
  ck_assert_int_eq(tg_streams_get(&r.so).opened, 1);

  /* Allowed again: the reconnecting sink gets in and follows changes. */
  replace_file(path, SINK_A "\n");
  ck_assert_int_eq(mcp_grpc_acl_reload(acl, err, sizeof(err)), 1);
  ck_assert(tg_wait(opened_twice, &r.so, TG_TIMEOUT_MS));
  ck_assert_int_eq(mcp_grpc_source_update(r.src, add_c, NULL), 0);
  ck_assert(synced(&r));
  ck_assert(tg_sink_has(r.sink, "c1", "c"));
  mcp_grpc_stats st;
  ck_assert_int_eq(mcp_grpc_source_stats(r.src, &st), 0);
  ck_assert_uint_eq(st.revoked, 1);
  ck_assert_uint_ge(st.refused_denied, 2);
  ck_assert_uint_eq(st.opened, 2);
  rig_free(&r);
  mcp_grpc_acl_del(acl);
}
END_TEST

START_TEST(test_dialing_side_refuses_server_identity) {
  mcp_grpc_acl *acl =
      acl_of("allow spiffe://cluster.local/ns/istio-system/sa/other\n");
  rig r;
  rig_source(&r, "server", "ca", NULL);
  rig_sink(&r, "client", "ca", NULL, acl);
  ck_assert(tg_wait(closed_once, &r.ko, TG_TIMEOUT_MS));
  tg_streams k = tg_streams_get(&r.ko);
  ck_assert_int_eq(k.last_status, GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_str_eq(k.last_details,
                   "permission denied: server identity not allowed");
  /* The sink sent nothing: the source read no request. */
  ck_assert(tg_wait(closed_once, &r.so, TG_TIMEOUT_MS));
  ck_assert_int_eq(tg_events_get().requests, 0);
  mcp_grpc_stats st;
  ck_assert_int_eq(mcp_grpc_sink_stats(r.sink, &st), 0);
  ck_assert_uint_ge(st.refused_denied, 1);
  rig_free(&r);
  mcp_grpc_acl_del(acl);
}
END_TEST

/* ---- certificate files rotated under a listening source ---- */

static void copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb");
  ck_assert_ptr_nonnull(in);
  char buf[8192];
  size_t n = fread(buf, 1, sizeof(buf) - 1, in);
  fclose(in);
  buf[n] = '\0';
  replace_file(to, buf);
}

static int synced_or_failed(void *ud) {
  rig *r = ud;
  tg_pair p = {r->src, NULL, r->sink, "c1"};
  return tg_streams_get(&r->ko).closed >= 1 || tg_equal(&p);
}

START_TEST(test_rotated_server_certificate_is_picked_up) {
  copy_file(cp("server.pem"), cp("rot.pem"));
  copy_file(cp("server.key"), cp("rot.key"));
  rig r;
  rig_source(&r, "rot", NULL, NULL);
  rig_sink(&r, NULL, "ca", NULL, NULL);
  ck_assert(synced(&r));
  mcp_grpc_sink_del(r.sink);
  mcp_sink_state_del(r.state);

  /* New files; looked at (at most once a second) at the next connection:
   * sinks dial one after the other until one is shown them, each either
   * synced (the old files still) or failed. The event is awaited, not a
   * second of the clock (the guard: 20 s, within the test's 30). */
  copy_file(cp("wrongname.pem"), cp("rot.pem"));
  copy_file(cp("wrongname.key"), cp("rot.key"));
  mcp_tstamp guard = mcp_grpc_now() + 20 * MCP_SECONDS;
  for (;;) {
    tg_streams_init(&r.ko);
    rig_sink(&r, NULL, "ca", NULL, NULL);
    ck_assert(tg_wait(synced_or_failed, &r, TG_TIMEOUT_MS));
    if (tg_streams_get(&r.ko).closed >= 1)
      break;
    ck_assert_msg(mcp_grpc_now() < guard, "the new files are never read");
    mcp_grpc_sink_del(r.sink);
    mcp_sink_state_del(r.state);
  }
  check_tls_failure(&r.ko, "not in peer certificate");
  mcp_grpc_sink_del(r.sink);
  mcp_sink_state_del(r.state);
  tg_streams_init(&r.ko);
  rig_sink(&r, NULL, "ca", "other.example", NULL);
  ck_assert(synced(&r));
  rig_free(&r);
}
END_TEST

int main(void) {
  if (test_certs_make() != 0)
    return EXIT_FAILURE;
  Suite *s = suite_create("grpc_tls");
  TCase *tc = tcase_create("tls");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, tg_reset, NULL);
  tcase_add_test(tc, test_mtls_sink_dials_source);
  tcase_add_test(tc, test_mtls_source_dials_sink);
  tcase_add_test(tc, test_server_only_tls_gives_no_client_identity);
  tcase_add_test(tc, test_common_name_is_an_identity);
  tcase_add_test(tc, test_client_without_certificate_fails);
  tcase_add_test(tc, test_client_certificate_from_unknown_ca_fails);
  tcase_add_test(tc, test_server_certificate_from_unknown_ca_fails);
  tcase_add_test(tc, test_server_name_mismatch_fails_and_override_works);
  tcase_add_test(tc, test_bad_files_are_clear_errors);
  tcase_add_test(tc, test_denied_identity_gets_nothing);
  tcase_add_test(tc, test_no_identity_is_unauthenticated);
  tcase_add_test(tc, test_access_list_reloaded_while_running);
  tcase_add_test(tc, test_dialing_side_refuses_server_identity);
  tcase_add_test(tc, test_rotated_server_certificate_is_picked_up);
  suite_add_tcase(s, tc);
  int rv = tg_run(s);
  test_certs_remove();
  return rv;
}
