/*
 * TLS, mutual TLS and authorization by identity, written once for every
 * transport with TLS (issue 21 item 7; the transport: the adapter it is
 * built with, tests/transport_<name>.c), over real sockets on 127.0.0.1
 * with certificates made at run time by tests/gen_certs.sh: mutual TLS
 * both ways (the sink dials, the source dials), identities read from SANs
 * and the CN, the handshakes that must fail (no client certificate, an
 * unknown CA either way, the wrong server name) and the server-name
 * override, authorization by access list on both sides (the rules live
 * once, in mcp/auth.h), lists replaced while running, admission keyed
 * by identity, clear errors for
 * bad files, and a rotated server certificate picked up without a
 * restart. What only one transport can do stays its own, each saying
 * why (ta_transport.add_tls_tests; tests/test_h2c_tls.c: h2c's listener
 * handshakes).
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"
#include "test_certs.h"
#include "transport_suite.h"

#define ISTIOD "spiffe://cluster.local/ns/istio-system/sa/istiod"
#define SINK_A "spiffe://cluster.local/ns/default/sa/sink-a"
#define SINK_B "spiffe://cluster.local/ns/evil/sa/sink-b"

/* ---- what each side saw ---- */

/* The listener's (0) and the dialer's (1) stream events; gRPC reports
 * them on its own threads, so they are read under |mu|. */
typedef struct seen {
  pthread_mutex_t mu;
  int opened, closed, refused;
  int last_status;
  char last_details[256];
  char ids[512]; /* the last OPENED's or REFUSED's identities, ' '-joined */
  int tls;
} seen;

static seen sides[2];

static void on_stream(mcp_stream_event ev, const mcp_stream_info *in,
                      void *ud) {
  seen *s = ud;
  pthread_mutex_lock(&s->mu);
  if (ev == MCP_STREAM_OPENED) {
    s->opened++;
  } else {
    if (ev == MCP_STREAM_REFUSED)
      s->refused++;
    else
      s->closed++;
    s->last_status = in->status;
    snprintf(s->last_details, sizeof(s->last_details), "%s",
             in->details ? in->details : "");
  }
  if (ev != MCP_STREAM_CLOSED) {
    s->ids[0] = '\0';
    for (size_t j = 0; j < in->nidentities; j++) {
      size_t l = strlen(s->ids);
      snprintf(s->ids + l, sizeof(s->ids) - l, "%s%s", j ? " " : "",
               in->identities[j]);
    }
    s->tls = in->tls;
  }
  pthread_mutex_unlock(&s->mu);
}

static seen seen_get(int k) {
  seen c;
  pthread_mutex_lock(&sides[k].mu);
  c = sides[k];
  pthread_mutex_unlock(&sides[k].mu);
  return c;
}

static void seen_reset(int k) {
  pthread_mutex_lock(&sides[k].mu);
  sides[k].opened = sides[k].closed = sides[k].refused = 0;
  sides[k].last_status = 0;
  sides[k].last_details[0] = sides[k].ids[0] = '\0';
  sides[k].tls = 0;
  pthread_mutex_unlock(&sides[k].mu);
}

static void reset_sides(void) {
  seen_reset(0);
  seen_reset(1);
}

/* What a wait is for: |n| events |ev| on side |side|. */
typedef struct want {
  int side, ev, n;
} want;

static int reached(void *ud) {
  const want *w = ud;
  seen s = seen_get(w->side);
  int got = w->ev == MCP_STREAM_OPENED    ? s.opened
            : w->ev == MCP_STREAM_REFUSED ? s.refused
                                          : s.closed;
  return got >= w->n;
}

static want dial_closed = {1, MCP_STREAM_CLOSED, 1};
static want listen_refused = {0, MCP_STREAM_REFUSED, 1};
static want listen_refused_twice = {0, MCP_STREAM_REFUSED, 2};
static want listen_opened_twice = {0, MCP_STREAM_OPENED, 2};

/* ---- options ---- */

/* Options of side |listen| at |address| with certificate |leaf|
 * ("server", "client", ...; NULL: none), CA |ca| ("ca", "other-ca";
 * NULL: none) and |auth| (NULL: everyone); its events go to sides[]. */
static ta_opts tls_opts(int listen, const char *address, const char *leaf,
                        const char *ca, mcp_authorize_fn fn, void *ud) {
  ta_opts o;
  memset(&o, 0, sizeof(o));
  o.version = ta->options_version;
  o.listen = listen;
  o.address = address;
  char name[64];
  if (leaf) {
    snprintf(name, sizeof(name), "%s.pem", leaf);
    o.cert_file = ta_cert(name);
    snprintf(name, sizeof(name), "%s.key", leaf);
    o.key_file = ta_cert(name);
  }
  if (ca) {
    snprintf(name, sizeof(name), "%s.pem", ca);
    o.ca_file = ta_cert(name);
  }
  o.authorize = fn;
  o.authorize_ud = ud;
  o.on_stream = on_stream;
  o.on_stream_ud = &sides[listen ? 0 : 1];
  return o;
}

/* An access list the test may replace while the transport's threads read
 * it (mcp_acl_parse() is not made for that by itself). */
typedef struct acl_ref {
  pthread_mutex_t mu;
  mcp_acl *acl;
} acl_ref;

static int locked_authorize(const mcp_peer *peer, void *ud) {
  acl_ref *r = ud;
  pthread_mutex_lock(&r->mu);
  int rv = mcp_acl_check(r->acl, peer);
  pthread_mutex_unlock(&r->mu);
  return rv;
}

static void acl_set(acl_ref *r, const char *text) {
  char err[128];
  pthread_mutex_lock(&r->mu);
  int rv = mcp_acl_parse(r->acl, text, strlen(text), err, sizeof(err));
  pthread_mutex_unlock(&r->mu);
  ck_assert_msg(rv == 0, "%s", err);
}

static void acl_init(acl_ref *r, const char *text) {
  pthread_mutex_init(&r->mu, NULL);
  ck_assert_int_eq(mcp_acl_new(&r->acl, NULL), 0);
  acl_set(r, text);
}

static void acl_fini(acl_ref *r) {
  mcp_acl_del(r->acl);
  pthread_mutex_destroy(&r->mu);
}

/* ---- a listening source and a dialing sink ---- */

static void listen_source(ta_world *w, const char *leaf, const char *ca,
                          acl_ref *acl) {
  ta_opts o =
      tls_opts(1, "127.0.0.1:0", leaf, ca, acl ? locked_authorize : NULL, acl);
  ta_start_source_with(w, &o);
}

static void dial_sink(ta_world *w, const char *leaf, const char *ca,
                      const char *server_name, acl_ref *acl) {
  ta_opts o =
      tls_opts(0, w->addr, leaf, ca, acl ? locked_authorize : NULL, acl);
  o.server_name = server_name;
  ck_assert_int_eq(ta->sink_new(w->env, &w->sink, &o, w->state), 0);
}

/* The sink and its state go; a new empty state takes its place. */
static void drop_sink(ta_world *w) {
  ta->del(w->sink);
  w->sink = NULL;
  mcp_sink_state_del(w->state);
  w->state = ta_sink_state("sink-1");
}

static mcp_transport_stats stats_of(ta_obj *obj) {
  mcp_transport_stats st;
  memset(&st, 0, sizeof(st));
  ck_assert_int_eq(ta->stats_versioned(obj, MCP_TRANSPORT_STATS_VERSION, &st),
                   0);
  return st;
}

/* The one open stream's identities, ' '-joined, and whether it is TLS. */
typedef struct ids {
  int streams, tls;
  char s[512];
} ids;

static void grab_ids(const mcp_stream_info *in, void *ud) {
  ids *x = ud;
  x->streams++;
  x->tls = in->tls;
  x->s[0] = '\0';
  for (size_t j = 0; j < in->nidentities; j++) {
    size_t l = strlen(x->s);
    snprintf(x->s + l, sizeof(x->s) - l, "%s%s", j ? " " : "",
             in->identities[j]);
  }
}

static ids ids_of(ta_obj *obj) {
  ids x;
  memset(&x, 0, sizeof(x));
  ck_assert_int_eq(ta->list(obj, grab_ids, &x), 1);
  ck_assert_int_eq(x.streams, 1);
  return x;
}

static int sink_has_nothing(ta_world *w);

/* ---- handshakes that work ---- */

START_TEST(mtls_sink_dials_source) {
  acl_ref sa, ka;
  acl_init(&sa, "allow " SINK_A "\n");
  acl_init(&ka, "allow " ISTIOD "\n");
  ta_world w;
  ta_world_init(&w);
  listen_source(&w, "server", "ca", &sa);
  dial_sink(&w, "client", "ca", NULL, &ka); /* checks the source in turn */
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  /* The source knows the sink by its URI SAN, then its CN. */
  ids x = ids_of(w.src);
  ck_assert_int_eq(x.tls, 1);
  ck_assert_str_eq(x.s, SINK_A " sink-a");
  seen l = seen_get(0);
  ck_assert_int_eq(l.tls, 1);
  ck_assert_str_eq(l.ids, SINK_A " sink-a");
  ck_assert_int_eq(l.refused, 0);
  /* The sink knows the source: URI SAN, DNS SAN, CN (not the IP SAN). */
  x = ids_of(w.sink);
  ck_assert_int_eq(x.tls, 1);
  ck_assert_str_eq(x.s, ISTIOD " localhost localhost");
  if (ta->counts_tls) {
    ck_assert_uint_eq(stats_of(w.src).tls_handshakes, 1);
    ck_assert_uint_eq(stats_of(w.src).handshaking, 0);
    ck_assert_uint_eq(stats_of(w.sink).tls_handshakes, 1);
  }
  ta_world_fini(&w);
  acl_fini(&sa);
  acl_fini(&ka);
}
END_TEST

/* The other direction: a listening sink requiring certificates, which
 * allows only istiod, and a source presenting istiod's certificate. */
START_TEST(mtls_source_dials_sink) {
  acl_ref acl;
  acl_init(&acl, "allow " ISTIOD "\n");
  ta_world w;
  ta_world_init(&w);
  ta_opts o =
      tls_opts(1, "127.0.0.1:0", "server", "ca", locked_authorize, &acl);
  ck_assert_int_eq(ta->sink_new(w.env, &w.sink, &o, w.state), 0);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", ta->port(w.sink));
  ta_opts d = tls_opts(0, addr, "server", "ca", NULL, NULL);
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = w.store;
  ck_assert_int_eq(ta->source_new(w.env, &w.src, &d, &so), 0);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  ck_assert_str_eq(ids_of(w.sink).s, ISTIOD " localhost localhost");
  ck_assert_int_eq(seen_get(0).refused, 0);
  ta_world_fini(&w);
  acl_fini(&acl);
}
END_TEST

/* Server-only TLS (no CA on the listener): TLS, but no client identity. */
START_TEST(server_only_tls_gives_no_client_identity) {
  ta_world w;
  ta_world_init(&w);
  listen_source(&w, "server", NULL, NULL);
  dial_sink(&w, NULL, "ca", NULL, NULL);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  ids x = ids_of(w.src);
  ck_assert_int_eq(x.tls, 1);
  ck_assert_str_eq(x.s, "");
  ta_world_fini(&w);
}
END_TEST

/* A certificate without SANs: its CN is its identity, and a list may
 * name it. */
START_TEST(common_name_is_an_identity) {
  acl_ref acl;
  acl_init(&acl, "legacy-client\n");
  ta_world w;
  ta_world_init(&w);
  listen_source(&w, "server", "ca", &acl);
  dial_sink(&w, "cn", "ca", NULL, NULL);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  ck_assert_str_eq(ids_of(w.src).s, "legacy-client");
  ta_world_fini(&w);
  acl_fini(&acl);
}
END_TEST

/* The server-name override: a certificate for other.example only fails
 * for a dialer of 127.0.0.1, and works when it names other.example. */
START_TEST(server_name_mismatch_fails_and_override_works) {
  ta_world w;
  ta_world_init(&w);
  listen_source(&w, "wrongname", NULL, NULL); /* DNS:other.example only */
  dial_sink(&w, NULL, "ca", NULL, NULL);
  ck_assert(ta->run_until(w.env, reached, &dial_closed, TA_TIMEOUT_MS));
  seen k = seen_get(1);
  ck_assert_int_eq(k.last_status, MCP_CODE_UNAVAILABLE);
  ck_assert_msg(strncmp(k.last_details, "no TLS connection", 17) == 0,
                "details: %s", k.last_details);
  ck_assert_int_eq(seen_get(0).opened, 0);
  drop_sink(&w);
  dial_sink(&w, NULL, "ca", "other.example", NULL);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  ta_world_fini(&w);
}
END_TEST

/* ---- handshakes that must fail ---- */

/* Each fails with "no TLS connection" on the dialer (UNAVAILABLE), never
 * becomes a call on the listener, and the sink gets nothing. With
 * |also|, the dialer has a list that would refuse the server, and the
 * failed handshake still comes first (not an authorization status). */
static void expect_no_tls(const char *srv_leaf, const char *srv_ca,
                          const char *cli_leaf, const char *cli_ca,
                          const char *also) {
  reset_sides();
  acl_ref nobody;
  acl_init(&nobody, "allow nobody\n");
  ta_world w;
  ta_world_init(&w);
  listen_source(&w, srv_leaf, srv_ca, NULL);
  dial_sink(&w, cli_leaf, cli_ca, NULL, also ? &nobody : NULL);
  ck_assert(ta->run_until(w.env, reached, &dial_closed, TA_TIMEOUT_MS));
  seen k = seen_get(1);
  ck_assert_int_eq(k.last_status, MCP_CODE_UNAVAILABLE);
  ck_assert_msg(strncmp(k.last_details, "no TLS connection", 17) == 0,
                "details: %s", k.last_details);
  if (also)
    ck_assert_msg(strstr(k.last_details, also), "details: %s", k.last_details);
  seen l = seen_get(0);
  ck_assert_int_eq(l.opened, 0);
  ck_assert_int_eq(l.refused, 0);
  ck_assert_uint_eq(stats_of(w.src).opened, 0);
  ck_assert_uint_eq(stats_of(w.sink).refused_denied, 0);
  ck_assert(sink_has_nothing(&w));
  if (ta->counts_tls)
    ck_assert_uint_eq(stats_of(w.src).tls_handshakes, 0);
  ta_world_fini(&w);
  acl_fini(&nobody);
}

START_TEST(client_without_certificate_fails) {
  expect_no_tls("server", "ca", NULL, "ca", NULL);
}
END_TEST

START_TEST(client_certificate_from_unknown_ca_fails) {
  expect_no_tls("server", "ca", "stranger", "ca", NULL); /* sink-a's URI */
}
END_TEST

START_TEST(server_certificate_from_unknown_ca_fails) {
  expect_no_tls("server", "ca", "client", "other-ca",
                "certificate verify failed");
  expect_no_tls("server", NULL, NULL, "other-ca", "certificate verify failed");
}
END_TEST

/* ---- authorization ---- */

typedef struct count_snap {
  int n, synced;
} count_snap;

static void count_state(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  (void)ts;
  count_snap *c = ud;
  c->n = (int)mcp_sink_state_count(st, "c1");
  c->synced = mcp_sink_state_synced(st);
}

static int sink_has_nothing(ta_world *w) {
  count_snap c = {0, 0};
  ck_assert_int_eq(ta->sink_call(w->sink, count_state, &c), 0);
  return c.n == 0 && !c.synced;
}

/* A peer its identity denies gets nothing: its call is refused with
 * PERMISSION_DENIED (REFUSED on the listener, with the identity), no
 * stream opens, the sink holds nothing. */
START_TEST(denied_identity_gets_nothing) {
  acl_ref acl;
  acl_init(&acl, "allow " SINK_A "\ndeny spiffe://cluster.local/ns/evil/*\n");
  ta_world w;
  ta_world_init(&w);
  listen_source(&w, "server", "ca", &acl);
  dial_sink(&w, "denied", "ca", NULL, NULL);
  ck_assert(ta->run_until(w.env, reached, &dial_closed, TA_TIMEOUT_MS));
  seen k = seen_get(1);
  ck_assert_int_eq(k.last_status, MCP_CODE_PERMISSION_DENIED);
  ck_assert_str_eq(k.last_details,
                   "permission denied: peer identity not allowed");
  ck_assert(ta->run_until(w.env, reached, &listen_refused, TA_TIMEOUT_MS));
  seen l = seen_get(0);
  ck_assert_int_eq(l.opened, 0);
  ck_assert_int_eq(l.last_status, MCP_CODE_PERMISSION_DENIED);
  ck_assert_str_eq(l.ids, SINK_B " sink-b");
  mcp_transport_stats st = stats_of(w.src);
  ck_assert_uint_ge(st.refused_denied, 1);
  ck_assert_uint_eq(st.opened, 0);
  ck_assert_uint_eq(st.messages_received, 0);
  ck_assert(sink_has_nothing(&w));
  ta_world_fini(&w);
  acl_fini(&acl);
}
END_TEST

/* A list needs an identity: a peer with none is UNAUTHENTICATED, over
 * server-only TLS and over cleartext alike. */
static void expect_unauthenticated(const char *srv_leaf, const char *cli_ca) {
  reset_sides();
  acl_ref acl;
  acl_init(&acl, "allow *\n");
  ta_world w;
  ta_world_init(&w);
  listen_source(&w, srv_leaf, NULL, &acl);
  dial_sink(&w, NULL, cli_ca, NULL, NULL);
  ck_assert(ta->run_until(w.env, reached, &listen_refused, TA_TIMEOUT_MS));
  seen l = seen_get(0);
  ck_assert_int_eq(l.last_status, MCP_CODE_UNAUTHENTICATED);
  ck_assert_int_eq(l.tls, srv_leaf != NULL);
  ck_assert(ta->run_until(w.env, reached, &dial_closed, TA_TIMEOUT_MS));
  seen k = seen_get(1);
  ck_assert_int_eq(k.last_status, MCP_CODE_UNAUTHENTICATED);
  if (srv_leaf)
    ck_assert_str_eq(
        k.last_details,
        "peer not authenticated: no verified certificate identity");
  mcp_transport_stats st = stats_of(w.src);
  ck_assert_uint_ge(st.refused_unauthenticated, 1);
  ck_assert_uint_eq(st.opened, 0);
  ck_assert_uint_eq(st.streams, 0);
  ck_assert_uint_eq(st.messages_received, 0);
  ck_assert(sink_has_nothing(&w));
  ta_world_fini(&w);
  acl_fini(&acl);
}

START_TEST(no_identity_is_unauthenticated) {
  expect_unauthenticated("server", "ca");
  expect_unauthenticated(NULL, NULL);
}
END_TEST

static void add_c(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)ud;
  th_put(st, "c1", "c", "1", "gamma", ts);
}

/* The list changes while a sink is synced: *_reauthorize() ends its
 * stream with PERMISSION_DENIED and each reconnection is refused; allowed
 * again, the reconnecting sink gets in and follows changes. */
START_TEST(access_list_replaced_while_running) {
  acl_ref acl;
  acl_init(&acl, "# who may sync\nallow " SINK_A "\n");
  ta_world w;
  ta_world_init(&w);
  listen_source(&w, "server", "ca", &acl);
  dial_sink(&w, "client", "ca", NULL, NULL);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));

  acl_set(&acl, "allow " ISTIOD "\ndeny " SINK_A "\n");
  ck_assert_int_eq(ta->reauthorize(w.src), 0);
  ck_assert(ta->run_until(w.env, reached, &dial_closed, TA_TIMEOUT_MS));
  ck_assert_int_eq(seen_get(1).last_status, MCP_CODE_PERMISSION_DENIED);
  ck_assert(
      ta->run_until(w.env, reached, &listen_refused_twice, TA_TIMEOUT_MS));
  ck_assert_int_eq(seen_get(0).opened, 1);

  acl_set(&acl, SINK_A "\n");
  ck_assert(ta->run_until(w.env, reached, &listen_opened_twice, TA_TIMEOUT_MS));
  ck_assert_int_eq(ta->update(w.src, add_c, NULL), 0);
  snprintf(w.name[w.n], sizeof(w.name[0]), "c");
  snprintf(w.version[w.n], sizeof(w.version[0]), "1");
  w.n++;
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  mcp_transport_stats st = stats_of(w.src);
  ck_assert_uint_eq(st.revoked, 1);
  ck_assert_uint_ge(st.refused_denied, 2);
  ck_assert_uint_eq(st.opened, 2);
  ta_world_fini(&w);
  acl_fini(&acl);
}
END_TEST

/* The dialer refuses a server whose identity its list does not allow:
 * PERMISSION_DENIED on its side, counted, and nothing of its own is sent
 * (the source reads no request). */
START_TEST(dialing_side_refuses_server_identity) {
  acl_ref acl;
  acl_init(&acl, "allow spiffe://cluster.local/ns/istio-system/sa/other\n");
  ta_world w;
  ta_world_init(&w);
  listen_source(&w, "server", "ca", NULL);
  dial_sink(&w, "client", "ca", NULL, &acl);
  ck_assert(ta->run_until(w.env, reached, &dial_closed, TA_TIMEOUT_MS));
  seen k = seen_get(1);
  ck_assert_int_eq(k.last_status, MCP_CODE_PERMISSION_DENIED);
  ck_assert_str_eq(k.last_details,
                   "permission denied: server identity not allowed");
  ck_assert_uint_ge(stats_of(w.sink).refused_denied, 1);
  ck_assert_uint_eq(stats_of(w.src).messages_received, 0);
  ck_assert(sink_has_nothing(&w));
  ta_world_fini(&w);
  acl_fini(&acl);
}
END_TEST

/* A sink of its own (its own state and events) dialing |w|'s source
 * with certificate |leaf|. */
typedef struct extra_sink {
  mcp_sink_state *state;
  ta_obj *sink;
  seen ev;
} extra_sink;

static void extra_start(ta_world *w, extra_sink *x, const char *leaf) {
  memset(x, 0, sizeof(*x));
  pthread_mutex_init(&x->ev.mu, NULL);
  x->state = ta_sink_state(leaf);
  ta_opts o = tls_opts(0, w->addr, leaf, "ca", NULL, NULL);
  o.on_stream_ud = &x->ev;
  ck_assert_int_eq(ta->sink_new(w->env, &x->sink, &o, x->state), 0);
}

static void extra_synced_snap(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  (void)ts;
  *(int *)ud = mcp_sink_state_synced(st);
}

static int extra_synced(void *ud) {
  extra_sink *x = ud;
  int synced = 0;
  ck_assert_int_eq(ta->sink_call(x->sink, extra_synced_snap, &synced), 0);
  return synced;
}

static int extra_closed(void *ud) {
  extra_sink *x = ud;
  pthread_mutex_lock(&x->ev.mu);
  int closed = x->ev.closed;
  pthread_mutex_unlock(&x->ev.mu);
  return closed >= 1;
}

/* Admission is keyed by verified identity first, then address: with one
 * stream per peer, two identities from 127.0.0.1 both run; a second
 * stream of one identity is refused as its peer's. */
START_TEST(admission_keyed_by_identity) {
  ta_world w;
  ta_world_init(&w);
  ta_opts o = tls_opts(1, "127.0.0.1:0", "server", "ca", NULL, NULL);
  o.max_streams_per_peer = 1;
  ta_start_source_with(&w, &o);
  extra_sink a, b, a2;
  extra_start(&w, &a, "client");
  ck_assert(ta->run_until(w.env, extra_synced, &a, TA_TIMEOUT_MS));
  extra_start(&w, &b, "denied"); /* another identity, same address */
  ck_assert(ta->run_until(w.env, extra_synced, &b, TA_TIMEOUT_MS));
  extra_start(&w, &a2, "client"); /* the first identity again */
  ck_assert(ta->run_until(w.env, extra_closed, &a2, TA_TIMEOUT_MS));
  pthread_mutex_lock(&a2.ev.mu);
  int status = a2.ev.last_status;
  pthread_mutex_unlock(&a2.ev.mu);
  ck_assert_int_eq(status, MCP_CODE_RESOURCE_EXHAUSTED);
  mcp_transport_stats st = stats_of(w.src);
  ck_assert_uint_eq(st.streams, 2);
  ck_assert_uint_ge(st.refused_peer_streams, 1);
  extra_sink *xs[3] = {&a, &b, &a2};
  for (int i = 0; i < 3; i++)
    ta->del(xs[i]->sink);
  ta_world_fini(&w);
  for (int i = 0; i < 3; i++) {
    mcp_sink_state_del(xs[i]->state);
    pthread_mutex_destroy(&xs[i]->ev.mu);
  }
}
END_TEST

/* ---- bad files ---- */

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  ck_assert_int_eq(fclose(f), 0);
}

/* *_new() refuses a set of files that cannot work, and leaves the object
 * pointer untouched (the adapters check it). */
START_TEST(bad_files_are_clear_errors) {
  ta_world w;
  ta_world_init(&w);
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = w.store;
  ta_obj *src = NULL;
  ta_opts o = tls_opts(1, "127.0.0.1:0", "server", "ca", NULL, NULL);
  o.cert_file = ta_cert("missing.pem");
  ck_assert_int_eq(ta->source_new(w.env, &src, &o, &so), MCP_ERR_IO);
  o = tls_opts(1, "127.0.0.1:0", "server", "ca", NULL, NULL);
  o.key_file = NULL; /* a certificate without its key */
  ck_assert_int_eq(ta->source_new(w.env, &src, &o, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  o = tls_opts(1, "127.0.0.1:0", NULL, "ca", NULL, NULL);
  ck_assert_int_eq(ta->source_new(w.env, &src, &o, &so),
                   MCP_ERR_INVALID_ARGUMENT); /* a listener needs one */
  write_text(ta_cert("junk.pem"), "not a certificate\n");
  o = tls_opts(1, "127.0.0.1:0", "server", "ca", NULL, NULL);
  o.ca_file = ta_cert("junk.pem");
  ck_assert_int_eq(ta->source_new(w.env, &src, &o, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  o = tls_opts(1, "127.0.0.1:0", "server", "ca", NULL, NULL);
  o.cert_file = ta_cert("junk.pem");
  ck_assert_int_eq(ta->source_new(w.env, &src, &o, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  o = tls_opts(1, "127.0.0.1:0", "server", "ca", NULL, NULL);
  o.key_file = ta_cert("client.key"); /* not the certificate's key */
  ck_assert_int_eq(ta->source_new(w.env, &src, &o, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(src);
  o = tls_opts(1, "127.0.0.1:0", "server", "ca", NULL, NULL);
  ck_assert_int_eq(ta->source_new(w.env, &src, &o, &so), 0);
  ta->del(src);
  ta_world_fini(&w);
}
END_TEST

/* ---- certificate files rotated under a listener ---- */

static void copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb");
  ck_assert_ptr_nonnull(in);
  char buf[8192];
  size_t n = fread(buf, 1, sizeof(buf) - 1, in);
  fclose(in);
  buf[n] = '\0';
  char tmp[512];
  snprintf(tmp, sizeof(tmp), "%s.tmp", to);
  write_text(tmp, buf);
  ck_assert_int_eq(rename(tmp, to), 0);
}

/* The listener's certificate files are replaced (the wrong name first,
 * then the right one): the dialer keeps retrying, and one of its new
 * connections (the files are looked at, at most once a second, when a
 * connection comes) gets the new certificate, without a restart. */
START_TEST(rotated_server_certificate_is_picked_up) {
  copy_file(ta_cert("wrongname.pem"), ta_cert("rot.pem"));
  copy_file(ta_cert("wrongname.key"), ta_cert("rot.key"));
  ta_world w;
  ta_world_init(&w);
  listen_source(&w, "rot", NULL, NULL);
  dial_sink(&w, NULL, "ca", NULL, NULL);
  ck_assert(ta->run_until(w.env, reached, &dial_closed, TA_TIMEOUT_MS));
  ck_assert_msg(strncmp(seen_get(1).last_details, "no TLS connection", 17) == 0,
                "%s", seen_get(1).last_details);
  copy_file(ta_cert("server.pem"), ta_cert("rot.pem"));
  copy_file(ta_cert("server.key"), ta_cert("rot.key"));
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  if (ta->counts_tls)
    ck_assert_uint_ge(stats_of(w.src).tls_reloads, 1);
  ta_world_fini(&w);
}
END_TEST

static void extra_del(extra_sink *x) {
  ta->del(x->sink);
  mcp_sink_state_del(x->state);
  pthread_mutex_destroy(&x->ev.mu);
}

/* The listener's certificate file is replaced by one that holds no
 * certificate: the set in use stays, the streams open keep going, and new
 * clients still get through with it. New sinks sync one after the other
 * until the files have been looked at since the change: h2c counts the
 * failed reload (tls_reload_failures, the event); gRPC counts nothing, so
 * the sink is one started at least a second after the change (the files
 * are looked at no more than once a second, at each new connection: a
 * lower bound, later on a slow machine, never a window). */
START_TEST(broken_certificate_reload_keeps_the_previous_set) {
  copy_file(ta_cert("server.pem"), ta_cert("keep.pem"));
  copy_file(ta_cert("server.key"), ta_cert("keep.key"));
  ta_world w;
  ta_world_init(&w);
  listen_source(&w, "keep", "ca", NULL);
  dial_sink(&w, "client", "ca", NULL, NULL);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  write_text(ta_cert("keep-junk.pem"), "-----BEGIN CERTIFICATE-----\nbroken\n");
  copy_file(ta_cert("keep-junk.pem"), ta_cert("keep.pem"));
  mcp_tstamp changed = ta->now();
  int looked = 0;
  while (!looked) {
    mcp_tstamp started = ta->now();
    extra_sink b;
    extra_start(&w, &b, "client");
    ck_assert(ta->run_until(w.env, extra_synced, &b, TA_TIMEOUT_MS));
    extra_del(&b);
    looked = ta->counts_tls ? stats_of(w.src).tls_reload_failures >= 1
                            : started >= changed + MCP_SECONDS;
  }
  if (ta->counts_tls)
    ck_assert_uint_eq(stats_of(w.src).tls_reloads, 0);
  ck_assert(ta_synced(&w)); /* its connection stayed */
  ta_world_fini(&w);
}
END_TEST

/* The adapter this executable is built with (tests/meson.build:
 * -DTA_ADAPTER=ta_<transport>). */
extern const ta_transport TA_ADAPTER;

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  ta = &TA_ADAPTER;
  for (int i = 0; i < 2; i++)
    pthread_mutex_init(&sides[i].mu, NULL);
  if (ta_certs_make() != 0)
    return EXIT_FAILURE;
  char name[64];
  snprintf(name, sizeof(name), "%s_transport_tls", ta->name);
  Suite *s = suite_create(name);
  TCase *tc = tcase_create("tls");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, reset_sides, NULL);
  tcase_add_test(tc, mtls_sink_dials_source);
  tcase_add_test(tc, mtls_source_dials_sink);
  tcase_add_test(tc, server_only_tls_gives_no_client_identity);
  tcase_add_test(tc, common_name_is_an_identity);
  tcase_add_test(tc, server_name_mismatch_fails_and_override_works);
  tcase_add_test(tc, client_without_certificate_fails);
  tcase_add_test(tc, client_certificate_from_unknown_ca_fails);
  tcase_add_test(tc, server_certificate_from_unknown_ca_fails);
  tcase_add_test(tc, denied_identity_gets_nothing);
  tcase_add_test(tc, no_identity_is_unauthenticated);
  tcase_add_test(tc, access_list_replaced_while_running);
  tcase_add_test(tc, dialing_side_refuses_server_identity);
  tcase_add_test(tc, admission_keyed_by_identity);
  tcase_add_test(tc, bad_files_are_clear_errors);
  tcase_add_test(tc, rotated_server_certificate_is_picked_up);
  tcase_add_test(tc, broken_certificate_reload_keeps_the_previous_set);
  suite_add_tcase(s, tc);
  if (ta->add_tls_tests)
    ta->add_tls_tests(s);
  int failed = ta_run(s);
  ta_certs_remove();
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
