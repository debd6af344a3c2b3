/*
 * Conduit's Destination API (core/destination/destination*.c, mcp/destination.h):
 * one test per rule of issue 14 and of the proto's comments, each named
 * after what it proves. What the server sends is decoded with the
 * protobuf-c code generated from proto/conduit (an implementation
 * independent of the hand-written framing); what the client receives is
 * encoded with it.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.pb-c.h"
#include "helper.h"
#include "mcp/destination.h"
#include "proxy/destination/destination.pb-c.h"

typedef Conduit__Proxy__Destination__Update Update;
#define UPD_ADD CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_ADD
#define UPD_REMOVE CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_REMOVE
#define UPD_NOEP CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_NO_ENDPOINTS

#define MS MCP_MILLISECONDS
#define SVC "web.default.svc.cluster.local"
#define COLL "default/web:80"

/* ---- helpers ---- */

/* Upserts the view resource of |ip|:|port| (pod may be NULL) into |coll|
 * as an adapter does: name, type URL, WeightedAddr body, empty version. */
static void put_addr(mcp_store *view, const char *coll, const char *ip,
                     uint16_t port, const char *pod, mcp_tstamp ts) {
  mcp_dest_addr a;
  ck_assert_int_eq(mcp_dest_ip_parse(&a, ip, port), 0);
  char name[MCP_DEST_ADDR_NAME_MAX];
  mcp_dest_addr_name(&a, name, sizeof(name));
  uint8_t body[512];
  size_t n = mcp_dest_weighted_addr_encode(&a, pod, body, sizeof(body));
  ck_assert_uint_le(n, sizeof(body));
  mcp_resource r;
  memset(&r, 0, sizeof(r));
  r.name = name;
  r.type_url = MCP_DEST_WEIGHTED_ADDR_TYPE_URL;
  r.body = body;
  r.body_len = n;
  ck_assert_int_ge(mcp_store_upsert(view, coll, &r, ts), 0);
}

static void del_addr(mcp_store *view, const char *coll, const char *name,
                     mcp_tstamp ts) {
  ck_assert_int_eq(mcp_store_delete(view, coll, name, ts), 1);
}

static mcp_dest_server *server(mcp_store *view, mcp_tstamp heartbeat,
                               mcp_tstamp debounce) {
  mcp_dest_server_options o;
  mcp_dest_server_options_default(&o);
  o.view = view;
  o.heartbeat = heartbeat;
  o.debounce = debounce;
  mcp_dest_server *srv = NULL;
  ck_assert_int_eq(mcp_dest_server_new(&srv, &o), 0);
  return srv;
}

static uint8_t *encode_request(const char *scheme, const char *path,
                               size_t *len) {
  Conduit__Common__Destination d = CONDUIT__COMMON__DESTINATION__INIT;
  d.scheme = (char *)scheme;
  d.path = (char *)path;
  *len = conduit__common__destination__get_packed_size(&d);
  uint8_t *b = malloc(*len ? *len : 1);
  conduit__common__destination__pack(&d, b);
  return b;
}

static mcp_stream *open_req(mcp_dest_server *srv, const char *scheme,
                            const char *path, mcp_tstamp ts) {
  mcp_stream *st = NULL;
  ck_assert_int_eq(mcp_dest_server_open(srv, ts, &st), 0);
  size_t len;
  uint8_t *b = encode_request(scheme, path, &len);
  mcp_stream_recv(st, b, len, ts);
  free(b);
  mcp_stream_half_close(st, ts); /* as a client does after its request */
  return st;
}

/* One pump with the sending side free. Returns the decoded Update sent,
 * or NULL (then *action says why; END fills *status). */
static Update *pump_ex(mcp_stream *st, mcp_tstamp ts, int *action,
                       int *status) {
  mcp_msg *msg = NULL;
  int stt = -1;
  const char *details = NULL;
  mcp_stream_action a = mcp_stream_pump(st, ts, 1, &msg, &stt, &details);
  if (action) {
    *action = (int)a;
  }
  if (status) {
    *status = stt;
  }
  if (a != MCP_STREAM_SEND) {
    return NULL;
  }
  size_t len = mcp_msg_len(msg);
  uint8_t *flat = malloc(len ? len : 1);
  mcp_msg_flatten(msg, flat);
  mcp_msg_free(msg);
  Update *u = conduit__proxy__destination__update__unpack(NULL, len, flat);
  free(flat);
  ck_assert_msg(u != NULL, "the server sent an undecodable Update");
  return u;
}

static Update *pump(mcp_stream *st, mcp_tstamp ts) {
  return pump_ex(st, ts, NULL, NULL);
}

/* Pumps and checks that nothing is sent and the stream goes on. */
static void pump_idle(mcp_stream *st, mcp_tstamp ts) {
  int a;
  Update *u = pump_ex(st, ts, &a, NULL);
  ck_assert_msg(u == NULL, "unexpected Update (case %d)",
                u ? (int)u->update_case : 0);
  ck_assert_int_eq(a, MCP_STREAM_IDLE);
}

/* Pumps and checks that the stream ends with |status|. */
static void pump_end(mcp_stream *st, mcp_tstamp ts, int status) {
  int a, s;
  Update *u = pump_ex(st, ts, &a, &s);
  ck_assert_msg(u == NULL, "unexpected Update");
  ck_assert_int_eq(a, MCP_STREAM_END);
  ck_assert_int_eq(s, status);
}

static void ufree(Update *u) {
  conduit__proxy__destination__update__free_unpacked(u, NULL);
}

static void tcp_str(const Conduit__Common__TcpAddress *t, char *buf) {
  ck_assert_ptr_nonnull(t);
  ck_assert_ptr_nonnull(t->ip);
  mcp_dest_addr a;
  memset(&a, 0, sizeof(a));
  if (t->ip->ip_case == CONDUIT__COMMON__IPADDRESS__IP_IPV4) {
    a.family = 4;
    for (int i = 0; i < 4; i++)
      a.ip[i] = (uint8_t)(t->ip->ipv4 >> (24 - 8 * i));
  } else {
    ck_assert_int_eq(t->ip->ip_case, CONDUIT__COMMON__IPADDRESS__IP_IPV6);
    a.family = 6;
    for (int i = 0; i < 8; i++) {
      a.ip[i] = (uint8_t)(t->ip->ipv6->first >> (56 - 8 * i));
      a.ip[8 + i] = (uint8_t)(t->ip->ipv6->last >> (56 - 8 * i));
    }
  }
  a.port = (uint16_t)t->port;
  mcp_dest_addr_name(&a, buf, MCP_DEST_ADDR_NAME_MAX);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The addresses of an add or a remove, sorted, joined by ","; checks
 * weight 1 on adds. */
static void addrs_of(const Update *u, char *out, size_t outlen) {
  char buf[64][MCP_DEST_ADDR_NAME_MAX];
  char *p[64];
  size_t n = 0;
  if (u->update_case == UPD_ADD) {
    for (size_t i = 0; i < u->add->n_addrs && n < 64; i++, n++) {
      ck_assert_uint_eq(u->add->addrs[i]->weight, 1);
      tcp_str(u->add->addrs[i]->addr, buf[n]);
    }
  } else {
    ck_assert_int_eq(u->update_case, UPD_REMOVE);
    for (size_t i = 0; i < u->remove->n_addrs && n < 64; i++, n++)
      tcp_str(u->remove->addrs[i], buf[n]);
  }
  for (size_t i = 0; i < n; i++)
    p[i] = buf[i];
  qsort(p, n, sizeof(*p), cmp_str);
  out[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    if (i)
      strncat(out, ",", outlen - strlen(out) - 1);
    strncat(out, p[i], outlen - strlen(out) - 1);
  }
}

/* Checks that |u| is an add of exactly |want| (sorted, comma-joined). */
static void expect_add(Update *u, const char *want) {
  ck_assert_ptr_nonnull(u);
  ck_assert_int_eq(u->update_case, UPD_ADD);
  char got[4096];
  addrs_of(u, got, sizeof(got));
  ck_assert_str_eq(got, want);
  ufree(u);
}

static void expect_remove(Update *u, const char *want) {
  ck_assert_ptr_nonnull(u);
  ck_assert_int_eq(u->update_case, UPD_REMOVE);
  char got[4096];
  addrs_of(u, got, sizeof(got));
  ck_assert_str_eq(got, want);
  ufree(u);
}

static void expect_no_endpoints(Update *u, int exists) {
  ck_assert_ptr_nonnull(u);
  ck_assert_int_eq(u->update_case, UPD_NOEP);
  ck_assert_int_eq(u->no_endpoints->exists, exists);
  ufree(u);
}

static const char *label(size_t n,
                         Conduit__Proxy__Destination__WeightedAddrSet__MetricLabelsEntry **e,
                         const char *key) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(e[i]->key, key) == 0)
      return e[i]->value;
  return NULL;
}

/* A view with default/web:80 holding 10.0.0.1 and 10.0.0.2, a server and
 * a stream that took its first add. */
typedef struct fixture {
  mcp_store *view;
  mcp_dest_server *srv;
  mcp_stream *st;
} fixture;

static fixture fx_open(mcp_tstamp heartbeat, mcp_tstamp debounce) {
  fixture f;
  f.view = th_store(NULL);
  put_addr(f.view, COLL, "10.0.0.1", 8080, "web-1", 0);
  put_addr(f.view, COLL, "10.0.0.2", 8080, "web-2", 0);
  f.srv = server(f.view, heartbeat, debounce);
  f.st = open_req(f.srv, "k8s", SVC, 0);
  expect_add(pump(f.st, 0), "10.0.0.1:8080,10.0.0.2:8080");
  pump_idle(f.st, 0);
  return f;
}

static void fx_close(fixture *f) {
  mcp_stream_del(f->st);
  mcp_dest_server_del(f->srv);
  mcp_store_del(f->view);
}

/* ---- view helpers ---- */

START_TEST(test_view_collection_is_ns_slash_svc_colon_port) {
  char buf[64];
  ck_assert_uint_eq(mcp_dest_view_collection(buf, sizeof(buf), "default",
                                             "web", 80),
                    14);
  ck_assert_str_eq(buf, "default/web:80");
  char small[5];
  ck_assert_uint_eq(mcp_dest_view_collection(small, sizeof(small), "ns",
                                             "svc", 65535),
                    12);
  ck_assert_str_eq(small, "ns/s");
}
END_TEST

START_TEST(test_addr_names_ipv4_and_rfc5952_ipv6_round_trip) {
  static const struct {
    const char *ip, *name;
  } cases[] = {
      {"10.0.0.1", "10.0.0.1:80"},
      {"0.0.0.0", "0.0.0.0:80"},
      {"255.255.255.255", "255.255.255.255:80"},
      {"2001:DB8:0:0:0:0:2:1", "[2001:db8::2:1]:80"},
      {"2001:db8:0:1:1:1:1:1", "[2001:db8:0:1:1:1:1:1]:80"},
      {"2001:0:0:1:0:0:0:1", "[2001:0:0:1::1]:80"},
      {"2001:db8:0:0:1:0:0:1", "[2001:db8::1:0:0:1]:80"},
      {"::", "[::]:80"},
      {"::1", "[::1]:80"},
      {"1::", "[1::]:80"},
      {"fe80::1:2", "[fe80::1:2]:80"},
      {"::ffff:10.1.2.3", "[::ffff:10.1.2.3]:80"},
      {"64:ff9b::192.0.2.33", "[64:ff9b::c000:221]:80"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    mcp_dest_addr a, b;
    ck_assert_msg(mcp_dest_ip_parse(&a, cases[i].ip, 80) == 0, "%s",
                  cases[i].ip);
    char name[MCP_DEST_ADDR_NAME_MAX];
    mcp_dest_addr_name(&a, name, sizeof(name));
    ck_assert_str_eq(name, cases[i].name);
    ck_assert_int_eq(mcp_dest_addr_parse(&b, name), 0);
    ck_assert_int_eq(memcmp(&a.ip, &b.ip, 16), 0);
    ck_assert_int_eq(a.family, b.family);
    ck_assert_int_eq(b.port, 80);
  }
}
END_TEST

START_TEST(test_addr_parse_refuses_malformed) {
  static const char *const bad_ips[] = {
      "", "1.2.3", "1.2.3.4.5", "256.1.1.1", "01.2.3.4", "1.2.3.4 ", "a.b.c.d",
      ":::", "1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", ":1::", "1:", "[::1]",
      "fe80::1%eth0", "::1.2.3", "1:2:3:4:5:6:7:1.2.3.4", "g::"};
  mcp_dest_addr a;
  memset(&a, 0x5a, sizeof(a));
  for (size_t i = 0; i < sizeof(bad_ips) / sizeof(bad_ips[0]); i++)
    ck_assert_msg(mcp_dest_ip_parse(&a, bad_ips[i], 1) ==
                      MCP_ERR_INVALID_ARGUMENT,
                  "accepted %s", bad_ips[i]);
  static const char *const bad_names[] = {
      "10.0.0.1", "10.0.0.1:", "10.0.0.1:65536", "10.0.0.1:080",
      "10.0.0.1:8a", "::1:80", "[::1]", "[::1]80", "[::1:80", "x:80",
      "10.0.0.1:80:80", ""};
  for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++)
    ck_assert_msg(mcp_dest_addr_parse(&a, bad_names[i]) ==
                      MCP_ERR_INVALID_ARGUMENT,
                  "accepted %s", bad_names[i]);
  ck_assert_uint_eq(a.family, 0x5a); /* untouched */
}
END_TEST

START_TEST(test_weighted_addr_body_decodes_with_weight_1_and_pod_label) {
  mcp_dest_addr a;
  ck_assert_int_eq(mcp_dest_ip_parse(&a, "10.0.0.1", 8080), 0);
  uint8_t buf[256];
  size_t n = mcp_dest_weighted_addr_encode(&a, "web-1", buf, sizeof(buf));
  /* too small: nothing written */
  uint8_t small[4] = {0xee, 0xee, 0xee, 0xee};
  ck_assert_uint_eq(mcp_dest_weighted_addr_encode(&a, "web-1", small, 4), n);
  ck_assert_uint_eq(small[0], 0xee);
  Conduit__Proxy__Destination__WeightedAddr *w =
      conduit__proxy__destination__weighted_addr__unpack(NULL, n, buf);
  ck_assert_ptr_nonnull(w);
  ck_assert_uint_eq(w->weight, 1);
  ck_assert_int_eq(w->addr->ip->ip_case, CONDUIT__COMMON__IPADDRESS__IP_IPV4);
  ck_assert_uint_eq(w->addr->ip->ipv4, 0x0A000001u);
  ck_assert_uint_eq(w->addr->port, 8080);
  ck_assert_uint_eq(w->n_metric_labels, 1);
  ck_assert_str_eq(w->metric_labels[0]->key, "k8s_pod");
  ck_assert_str_eq(w->metric_labels[0]->value, "web-1");
  /* protobuf-c writes the same bytes from the decoded message */
  uint8_t again[256];
  ck_assert_uint_eq(conduit__proxy__destination__weighted_addr__pack(w, again),
                    n);
  ck_assert_int_eq(memcmp(again, buf, n), 0);
  conduit__proxy__destination__weighted_addr__free_unpacked(w, NULL);

  ck_assert_int_eq(mcp_dest_ip_parse(&a, "2001:db8::1", 443), 0);
  n = mcp_dest_weighted_addr_encode(&a, NULL, buf, sizeof(buf));
  w = conduit__proxy__destination__weighted_addr__unpack(NULL, n, buf);
  ck_assert_ptr_nonnull(w);
  ck_assert_int_eq(w->addr->ip->ip_case, CONDUIT__COMMON__IPADDRESS__IP_IPV6);
  ck_assert_uint_eq(w->addr->ip->ipv6->first, 0x20010db800000000ull);
  ck_assert_uint_eq(w->addr->ip->ipv6->last, 1);
  ck_assert_uint_eq(w->addr->port, 443);
  ck_assert_uint_eq(w->n_metric_labels, 0);
  conduit__proxy__destination__weighted_addr__free_unpacked(w, NULL);
}
END_TEST

/* ---- server: the request ---- */

START_TEST(test_server_scheme_must_be_k8s) {
  mcp_store *view = th_store(NULL);
  mcp_dest_server *srv = server(view, 0, 0);
  static const char *const schemes[] = {"", "K8S", "dns", "k8s "};
  for (size_t i = 0; i < 4; i++) {
    mcp_stream *st = open_req(srv, schemes[i], SVC, 0);
    pump_end(st, 0, 3);
    mcp_stream_del(st);
  }
  mcp_dest_server_stats s;
  mcp_dest_server_get_stats(srv, &s);
  ck_assert_uint_eq(s.invalid, 4);
  ck_assert_uint_eq(s.updates, 0);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_server_malformed_path_ends_invalid_argument) {
  static const char *const paths[] = {
      "",           ":80",         "web:",          "web:abc",
      "web:0",      "web:65536",   "web:080",       "a:1:2",
      "we b:80",    "web/x:80",    "[::1",          "[zz]:80",
      "[::1]x",     "[]:80",       "web:-1",        "10.0.0.1:99999"};
  mcp_store *view = th_store(NULL);
  mcp_dest_server *srv = server(view, 0, 0);
  for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
    mcp_stream *st = open_req(srv, "k8s", paths[i], 0);
    int a, s;
    Update *u = pump_ex(st, 0, &a, &s);
    ck_assert_msg(!u && a == MCP_STREAM_END && s == 3, "path \"%s\"",
                  paths[i]);
    mcp_stream_del(st);
  }
  /* too long, and undecodable bytes */
  char longp[MCP_DEST_MAX_PATH_LEN + 2];
  memset(longp, 'a', sizeof(longp) - 1);
  longp[sizeof(longp) - 1] = '\0';
  mcp_stream *st = open_req(srv, "k8s", longp, 0);
  pump_end(st, 0, 3);
  mcp_stream_del(st);
  static const uint8_t junk[] = {0x0a, 0x05, 'k'};
  ck_assert_int_eq(mcp_dest_server_open(srv, 0, &st), 0);
  mcp_stream_recv(st, junk, sizeof(junk), 0);
  pump_end(st, 0, 3);
  mcp_stream_del(st);
  static const uint8_t wrong_type[] = {0x08, 0x01};
  ck_assert_int_eq(mcp_dest_server_open(srv, 0, &st), 0);
  mcp_stream_recv(st, wrong_type, sizeof(wrong_type), 0);
  pump_end(st, 0, 3);
  mcp_stream_del(st);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_server_port_defaults_to_80) {
  mcp_store *view = th_store(NULL);
  put_addr(view, "default/web:80", "10.0.0.1", 8080, NULL, 0);
  put_addr(view, "default/web:81", "10.0.0.9", 9090, NULL, 0);
  mcp_dest_server *srv = server(view, 0, 0);
  mcp_stream *st = open_req(srv, "k8s", SVC, 0);
  expect_add(pump(st, 0), "10.0.0.1:8080");
  ck_assert_str_eq(mcp_dest_server_stream_collection(st), "default/web:80");
  ck_assert_str_eq(mcp_dest_server_stream_path(st), SVC);
  mcp_stream_del(st);
  st = open_req(srv, "k8s", SVC ":81", 0);
  expect_add(pump(st, 0), "10.0.0.9:9090");
  mcp_stream_del(st);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_server_ipv4_literal_one_add_then_nothing) {
  mcp_store *view = th_store(NULL);
  mcp_dest_server *srv = server(view, 10 * MS, 0);
  mcp_stream *st = open_req(srv, "k8s", "10.1.2.3:8080", 0);
  Update *u = pump(st, 0);
  ck_assert_ptr_nonnull(u);
  ck_assert_int_eq(u->update_case, UPD_ADD);
  ck_assert_uint_eq(u->add->n_addrs, 1);
  ck_assert_uint_eq(u->add->addrs[0]->addr->ip->ipv4, 0x0A010203u);
  ck_assert_uint_eq(u->add->addrs[0]->addr->port, 8080);
  ck_assert_uint_eq(u->add->addrs[0]->weight, 1);
  ufree(u);
  /* nothing more: no heartbeat, whatever the view does */
  ck_assert_uint_eq(mcp_stream_get_expiry(st), MCP_TSTAMP_MAX);
  put_addr(view, COLL, "10.0.0.1", 1, NULL, 1);
  pump_idle(st, 60 * MCP_SECONDS);
  mcp_stream_del(st);
  st = open_req(srv, "k8s", "10.1.2.3", 0);
  expect_add(pump(st, 0), "10.1.2.3:80");
  mcp_stream_del(st);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_server_other_host_no_endpoints_false_then_nothing) {
  static const char *const hosts[] = {
      "example.com:80", "[::1]:80", "web.default.svc.other.zone",
      "a.web.default.svc.cluster.local", "web.svc.cluster.local",
      "web..svc.cluster.local", "-web.default.svc.cluster.local",
      "localhost", "010.0.0.1", "web.default.svc.cluster.local.."};
  mcp_store *view = th_store(NULL);
  put_addr(view, COLL, "10.0.0.1", 8080, NULL, 0);
  mcp_dest_server *srv = server(view, 10 * MS, 0);
  for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
    mcp_stream *st = open_req(srv, "k8s", hosts[i], 0);
    Update *u = pump(st, 0);
    ck_assert_msg(u && u->update_case == UPD_NOEP && !u->no_endpoints->exists,
                  "host %s", hosts[i]);
    ufree(u);
    ck_assert_ptr_null(mcp_dest_server_stream_collection(st));
    pump_idle(st, 60 * MCP_SECONDS);
    mcp_stream_del(st);
  }
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_server_service_host_any_case_and_trailing_dot) {
  mcp_store *view = th_store(NULL);
  put_addr(view, COLL, "10.0.0.1", 8080, NULL, 0);
  mcp_dest_server *srv = server(view, 0, 0);
  mcp_stream *st = open_req(srv, "k8s", "Web.Default.SVC.Cluster.Local.:80", 0);
  expect_add(pump(st, 0), "10.0.0.1:8080");
  ck_assert_str_eq(mcp_dest_server_stream_collection(st), COLL);
  mcp_stream_del(st);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_server_dns_zone_option) {
  mcp_store *view = th_store(NULL);
  put_addr(view, "prod/api:8080", "10.9.0.1", 80, NULL, 0);
  mcp_dest_server_options o;
  mcp_dest_server_options_default(&o);
  o.view = view;
  o.dns_zone = "Corp.Example.";
  mcp_dest_server *srv = NULL;
  ck_assert_int_eq(mcp_dest_server_new(&srv, &o), 0);
  mcp_stream *st = open_req(srv, "k8s", "api.prod.svc.corp.example:8080", 0);
  expect_add(pump(st, 0), "10.9.0.1:80");
  mcp_stream_del(st);
  st = open_req(srv, "k8s", "api.prod.svc.cluster.local:8080", 0);
  expect_no_endpoints(pump(st, 0), 0);
  mcp_stream_del(st);
  mcp_dest_server_del(srv);
  /* bad zones */
  static const char *const zones[] = {"", ".", "a..b", "a b", "a/b"};
  for (size_t i = 0; i < 5; i++) {
    o.dns_zone = zones[i];
    ck_assert_int_eq(mcp_dest_server_new(&srv, &o), MCP_ERR_INVALID_ARGUMENT);
  }
  o.dns_zone = NULL;
  /* a version this library does not know is refused */
  ck_assert_int_eq(mcp_dest_server_new_versioned(&srv, 99, &o),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_dest_server_new_versioned(&srv, 0, &o),
                   MCP_ERR_INVALID_ARGUMENT);
  o.view = NULL;
  ck_assert_int_eq(mcp_dest_server_new(&srv, &o), MCP_ERR_INVALID_ARGUMENT);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_server_second_request_ends_invalid_argument) {
  fixture f = fx_open(0, 0);
  size_t len;
  uint8_t *b = encode_request("k8s", SVC, &len);
  mcp_stream_recv(f.st, b, len, 1);
  pump_end(f.st, 1, 3);
  /* more after the refusal: still ended, refused once */
  mcp_stream_recv(f.st, b, len, 2);
  free(b);
  pump_end(f.st, 2, 3);
  mcp_dest_server_stats s;
  mcp_dest_server_get_stats(f.srv, &s);
  ck_assert_uint_eq(s.invalid, 1);
  fx_close(&f);
}
END_TEST

START_TEST(test_server_half_close_keeps_stream_open) {
  fixture f = fx_open(0, 0);
  /* open_req half-closed already: the stream still serves changes */
  put_addr(f.view, COLL, "10.0.0.3", 8080, NULL, 1);
  expect_add(pump(f.st, 1), "10.0.0.3:8080");
  pump_idle(f.st, 2);
  fx_close(&f);
}
END_TEST

START_TEST(test_server_nothing_before_the_request) {
  mcp_store *view = th_store(NULL);
  mcp_dest_server *srv = server(view, 10 * MS, 0);
  mcp_stream *st = NULL;
  ck_assert_int_eq(mcp_dest_server_open(srv, 0, &st), 0);
  ck_assert_str_eq(mcp_dest_server_stream_path(st), "");
  pump_idle(st, 0);
  pump_idle(st, 60 * MCP_SECONDS);
  mcp_stream_del(st);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

/* Appends a LEN field |f| of |s[0..n)| to |b| (short fields only). */
static size_t raw_field(uint8_t *b, size_t k, uint8_t f, const char *s,
                        size_t n) {
  b[k++] = (uint8_t)(f << 3 | 2);
  b[k++] = (uint8_t)n;
  memcpy(b + k, s, n);
  return k + n;
}

/* The request is read as protobuf: a string that is not UTF-8 (or holds
 * a NUL) or a group does not decode; unknown fields are skipped and the
 * last of a repeated scalar wins. */
START_TEST(test_server_request_read_as_protobuf) {
  mcp_store *view = th_store(NULL);
  put_addr(view, COLL, "10.0.0.1", 8080, NULL, 0);
  mcp_dest_server *srv = server(view, 0, 0);
  uint8_t b[128];
  for (int k = 0; k < 5; k++) {
    size_t n = 0;
    switch (k) {
    case 0: /* path not UTF-8 */
      n = raw_field(b, n, 1, "k8s", 3);
      n = raw_field(b, n, 2, "web\xff", 4);
      break;
    case 1: /* a NUL in the path */
      n = raw_field(b, n, 1, "k8s", 3);
      n = raw_field(b, n, 2, SVC "\0x", strlen(SVC) + 2);
      break;
    case 2: /* scheme not UTF-8 */
      n = raw_field(b, n, 1, "k8\xc3", 3);
      n = raw_field(b, n, 2, SVC, strlen(SVC));
      break;
    case 3: /* a group (wire type 3) */
      n = raw_field(b, n, 1, "k8s", 3);
      b[n++] = 3 << 3 | 3;
      n = raw_field(b, n, 2, SVC, strlen(SVC));
      break;
    case 4: /* a length past the end */
      n = raw_field(b, n, 1, "k8s", 3);
      n = raw_field(b, n, 2, SVC, strlen(SVC));
      b[n - strlen(SVC) - 1] = 100;
      break;
    }
    mcp_stream *st = NULL;
    ck_assert_int_eq(mcp_dest_server_open(srv, 0, &st), 0);
    mcp_stream_recv(st, b, n, 0);
    int a, status;
    Update *u = pump_ex(st, 0, &a, &status);
    ck_assert_msg(!u && a == MCP_STREAM_END && status == 3, "case %d", k);
    ck_assert_ptr_null(mcp_dest_server_stream_collection(st));
    mcp_stream_del(st);
  }
  /* unknown fields of any type skipped; scheme and path: the last wins */
  size_t n = 0;
  b[n++] = 3 << 3 | 0; /* field 3, varint */
  b[n++] = 0x96;
  b[n++] = 0x01;
  n = raw_field(b, n, 1, "dns", 3);
  n = raw_field(b, n, 2, "example.com", 11);
  n = raw_field(b, n, 7, "x", 1);
  b[n++] = 4 << 3 | 5; /* field 4, fixed32 */
  memset(b + n, 0, 4);
  n += 4;
  n = raw_field(b, n, 1, "k8s", 3);
  n = raw_field(b, n, 2, SVC, strlen(SVC));
  mcp_stream *st = NULL;
  ck_assert_int_eq(mcp_dest_server_open(srv, 0, &st), 0);
  mcp_stream_recv(st, b, n, 0);
  expect_add(pump(st, 0), "10.0.0.1:8080");
  ck_assert_str_eq(mcp_dest_server_stream_path(st), SVC);
  mcp_stream_del(st);
  mcp_dest_server_stats s;
  mcp_dest_server_get_stats(srv, &s);
  ck_assert_uint_eq(s.invalid, 5);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

/* ---- server: the first message ---- */

START_TEST(test_server_absent_service_gets_no_endpoints_false_at_once) {
  mcp_store *view = th_store(NULL);
  mcp_dest_server *srv = server(view, 0, 500 * MS);
  mcp_stream *st = open_req(srv, "k8s", SVC, 0);
  expect_no_endpoints(pump(st, 0), 0);
  pump_idle(st, 1);
  mcp_stream_del(st);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_server_existing_empty_service_gets_no_endpoints_true) {
  mcp_store *view = th_store(NULL);
  ck_assert_int_eq(mcp_store_add_collection(view, COLL), 0);
  mcp_dest_server *srv = server(view, 0, 500 * MS);
  mcp_stream *st = open_req(srv, "k8s", SVC, 0);
  expect_no_endpoints(pump(st, 0), 1);
  pump_idle(st, 1);
  mcp_stream_del(st);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_server_first_add_lists_every_address_with_metric_labels) {
  mcp_store *view = th_store(NULL);
  put_addr(view, COLL, "10.0.0.1", 8080, "web-1", 0);
  put_addr(view, COLL, "fd00::5", 8080, NULL, 0);
  put_addr(view, COLL, "10.0.0.2", 8080, "web-2", 0);
  mcp_dest_server *srv = server(view, 0, 500 * MS); /* not debounced */
  mcp_stream *st = open_req(srv, "k8s", SVC, 0);
  Update *u = pump(st, 0);
  ck_assert_ptr_nonnull(u);
  ck_assert_int_eq(u->update_case, UPD_ADD);
  ck_assert_str_eq(label(u->add->n_metric_labels, u->add->metric_labels,
                         "k8s_namespace"),
                   "default");
  ck_assert_str_eq(
      label(u->add->n_metric_labels, u->add->metric_labels, "k8s_service"),
      "web");
  ck_assert_uint_eq(u->add->n_metric_labels, 2);
  int pods = 0;
  for (size_t i = 0; i < u->add->n_addrs; i++) {
    Conduit__Proxy__Destination__WeightedAddr *w = u->add->addrs[i];
    if (w->n_metric_labels) {
      ck_assert_str_eq(w->metric_labels[0]->key, "k8s_pod");
      pods++;
    }
  }
  ck_assert_int_eq(pods, 2);
  expect_add(u, "10.0.0.1:8080,10.0.0.2:8080,[fd00::5]:8080");
  mcp_stream_del(st);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

/* ---- server: after the first message ---- */

START_TEST(test_server_new_endpoints_add_exactly_the_new) {
  fixture f = fx_open(0, 0);
  put_addr(f.view, COLL, "10.0.0.3", 8080, NULL, 1);
  put_addr(f.view, COLL, "10.0.0.4", 8080, NULL, 1);
  expect_add(pump(f.st, 1), "10.0.0.3:8080,10.0.0.4:8080");
  pump_idle(f.st, 1);
  fx_close(&f);
}
END_TEST

START_TEST(test_server_vanished_endpoints_remove_exactly_those) {
  fixture f = fx_open(0, 0);
  put_addr(f.view, COLL, "10.0.0.3", 8080, NULL, 1);
  expect_add(pump(f.st, 1), "10.0.0.3:8080");
  del_addr(f.view, COLL, "10.0.0.1:8080", 2);
  del_addr(f.view, COLL, "10.0.0.3:8080", 2);
  expect_remove(pump(f.st, 2), "10.0.0.1:8080,10.0.0.3:8080");
  pump_idle(f.st, 2);
  fx_close(&f);
}
END_TEST

START_TEST(test_server_ipv6_endpoints_use_first_last_and_remove_by_name) {
  fixture f = fx_open(0, 0);
  put_addr(f.view, COLL, "fd00::a:1", 8080, NULL, 1);
  Update *u = pump(f.st, 1);
  ck_assert_ptr_nonnull(u);
  ck_assert_int_eq(u->add->addrs[0]->addr->ip->ip_case,
                   CONDUIT__COMMON__IPADDRESS__IP_IPV6);
  ck_assert_uint_eq(u->add->addrs[0]->addr->ip->ipv6->first,
                    0xfd00000000000000ull);
  ck_assert_uint_eq(u->add->addrs[0]->addr->ip->ipv6->last, 0xa0001ull);
  expect_add(u, "[fd00::a:1]:8080");
  del_addr(f.view, COLL, "[fd00::a:1]:8080", 2);
  expect_remove(pump(f.st, 2), "[fd00::a:1]:8080");
  fx_close(&f);
}
END_TEST

START_TEST(test_server_view_items_breaking_the_contract_are_skipped) {
  fixture f = fx_open(0, 0);
  mcp_resource r;
  memset(&r, 0, sizeof(r));
  r.name = "not-an-address"; /* and no body */
  r.type_url = MCP_DEST_WEIGHTED_ADDR_TYPE_URL;
  ck_assert_int_eq(mcp_store_upsert(f.view, COLL, &r, 1), 1);
  r.name = "10.0.0.8:80";
  r.type_url = "type.googleapis.com/other.Type";
  r.body = (const uint8_t *)"\x0a\x00";
  r.body_len = 2;
  ck_assert_int_eq(mcp_store_upsert(f.view, COLL, &r, 1), 1);
  put_addr(f.view, COLL, "10.0.0.3", 8080, NULL, 1);
  expect_add(pump(f.st, 1), "10.0.0.3:8080");
  del_addr(f.view, COLL, "not-an-address", 2);
  del_addr(f.view, COLL, "10.0.0.1:8080", 2);
  expect_remove(pump(f.st, 2), "10.0.0.1:8080");
  /* a change of a bad item alone changes nothing the client holds: no
   * message (not an empty add) */
  r.name = "10.0.0.9:80";
  ck_assert_int_eq(mcp_store_upsert(f.view, COLL, &r, 3), 1);
  pump_idle(f.st, 3);
  mcp_dest_server_stats s;
  mcp_dest_server_get_stats(f.srv, &s);
  ck_assert_uint_eq(s.bad_items, 4);
  fx_close(&f);
}
END_TEST

START_TEST(test_server_changed_body_is_sent_again_in_an_add) {
  fixture f = fx_open(0, 0);
  put_addr(f.view, COLL, "10.0.0.2", 8080, "web-2b", 1); /* new pod */
  Update *u = pump(f.st, 1);
  ck_assert_ptr_nonnull(u);
  ck_assert_int_eq(u->update_case, UPD_ADD);
  ck_assert_str_eq(u->add->addrs[0]->metric_labels[0]->value, "web-2b");
  expect_add(u, "10.0.0.2:8080");
  fx_close(&f);
}
END_TEST

START_TEST(test_server_change_leaving_the_set_as_it_was_sends_nothing) {
  fixture f = fx_open(0, 0);
  /* the same bodies again, as an adapter re-applying Endpoints does */
  put_addr(f.view, COLL, "10.0.0.1", 8080, "web-1", 1);
  put_addr(f.view, COLL, "10.0.0.2", 8080, "web-2", 1);
  pump_idle(f.st, 1);
  /* another service port changes: not this stream's business */
  put_addr(f.view, "default/web:81", "10.0.0.1", 9, NULL, 2);
  pump_idle(f.st, 2);
  fx_close(&f);
}
END_TEST

START_TEST(test_server_empty_or_absent_and_back_within_window_sends_nothing) {
  mcp_store *view = th_store(NULL);
  ck_assert_int_eq(mcp_store_add_collection(view, COLL), 0);
  mcp_dest_server *srv = server(view, 0, 100 * MS);
  mcp_stream *st = open_req(srv, "k8s", SVC, 0);
  expect_no_endpoints(pump(st, 0), 1);
  /* an address comes and goes within one window: still exists, empty */
  put_addr(view, COLL, "10.0.0.1", 80, NULL, 10 * MS);
  del_addr(view, COLL, "10.0.0.1:80", 20 * MS);
  pump_idle(st, 200 * MS);
  /* removed, then the same within one window again */
  ck_assert_int_eq(mcp_store_remove_collection(view, COLL, 300 * MS), 1);
  expect_no_endpoints(pump(st, 400 * MS), 0);
  put_addr(view, COLL, "10.0.0.1", 80, NULL, 410 * MS);
  ck_assert_int_eq(mcp_store_remove_collection(view, COLL, 420 * MS), 1);
  pump_idle(st, 600 * MS);
  mcp_stream_del(st);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_server_add_then_remove_never_empty_in_between) {
  /* every address is replaced in one window: the client must never hold
   * an empty set, so no no_endpoints and the add goes first */
  fixture f = fx_open(0, 100 * MS);
  del_addr(f.view, COLL, "10.0.0.1:8080", 1);
  del_addr(f.view, COLL, "10.0.0.2:8080", 1);
  put_addr(f.view, COLL, "10.0.0.7", 8080, NULL, 1);
  pump_idle(f.st, 50 * MS);
  expect_add(pump(f.st, 101 * MS), "10.0.0.7:8080");
  expect_remove(pump(f.st, 101 * MS), "10.0.0.1:8080,10.0.0.2:8080");
  pump_idle(f.st, 101 * MS);
  fx_close(&f);
}
END_TEST

START_TEST(test_server_last_vanishing_gives_no_endpoints_true) {
  fixture f = fx_open(0, 0);
  del_addr(f.view, COLL, "10.0.0.1:8080", 1);
  expect_remove(pump(f.st, 1), "10.0.0.1:8080");
  del_addr(f.view, COLL, "10.0.0.2:8080", 2);
  expect_no_endpoints(pump(f.st, 2), 1);
  pump_idle(f.st, 2);
  /* and an address coming back is an add */
  put_addr(f.view, COLL, "10.0.0.2", 8080, NULL, 3);
  expect_add(pump(f.st, 3), "10.0.0.2:8080");
  fx_close(&f);
}
END_TEST

START_TEST(test_server_service_deleted_gives_no_endpoints_false) {
  fixture f = fx_open(0, 0);
  ck_assert_int_eq(mcp_store_remove_collection(f.view, COLL, 1), 1);
  expect_no_endpoints(pump(f.st, 1), 0);
  pump_idle(f.st, 1);
  fx_close(&f);
}
END_TEST

START_TEST(test_server_service_back_after_deletion_gets_add_of_all) {
  fixture f = fx_open(0, 0);
  ck_assert_int_eq(mcp_store_remove_collection(f.view, COLL, 1), 1);
  expect_no_endpoints(pump(f.st, 1), 0);
  put_addr(f.view, COLL, "10.0.0.5", 8080, NULL, 2);
  put_addr(f.view, COLL, "10.0.0.6", 8080, NULL, 2);
  expect_add(pump(f.st, 2), "10.0.0.5:8080,10.0.0.6:8080");
  /* deleted again, and back empty: exists, no endpoints */
  ck_assert_int_eq(mcp_store_remove_collection(f.view, COLL, 3), 1);
  expect_no_endpoints(pump(f.st, 3), 0);
  ck_assert_int_eq(mcp_store_add_collection(f.view, COLL), 0);
  expect_no_endpoints(pump(f.st, 4), 1);
  fx_close(&f);
}
END_TEST

START_TEST(test_server_deleted_and_back_within_window_sends_the_difference) {
  fixture f = fx_open(0, 100 * MS);
  ck_assert_int_eq(mcp_store_remove_collection(f.view, COLL, 1), 1);
  put_addr(f.view, COLL, "10.0.0.1", 8080, "web-1", 2);
  put_addr(f.view, COLL, "10.0.0.3", 8080, NULL, 2);
  Update *u = pump(f.st, 200 * MS);
  /* never a no_endpoints: the service was there at both takes */
  ck_assert_ptr_nonnull(u);
  ck_assert_int_ne(u->update_case, UPD_NOEP);
  expect_add(u, "10.0.0.1:8080,10.0.0.3:8080");
  expect_remove(pump(f.st, 200 * MS), "10.0.0.2:8080");
  fx_close(&f);
}
END_TEST

START_TEST(test_server_debounce_coalesces_changes) {
  fixture f = fx_open(0, 100 * MS);
  put_addr(f.view, COLL, "10.0.0.3", 8080, NULL, 10 * MS);
  ck_assert_ptr_null(pump(f.st, 10 * MS));
  ck_assert_uint_eq(mcp_stream_get_expiry(f.st), 110 * MS);
  put_addr(f.view, COLL, "10.0.0.4", 8080, NULL, 50 * MS);
  del_addr(f.view, COLL, "10.0.0.1:8080", 60 * MS);
  pump_idle(f.st, 100 * MS);
  ck_assert_uint_eq(mcp_stream_get_expiry(f.st), 160 * MS);
  expect_add(pump(f.st, 160 * MS), "10.0.0.3:8080,10.0.0.4:8080");
  expect_remove(pump(f.st, 160 * MS), "10.0.0.1:8080");
  pump_idle(f.st, 160 * MS);
  fx_close(&f);
}
END_TEST

/* A debounce without max_delay is bounded by the module's default
 * (mcp_watch_default_max_delay(): 10 x 100 ms, at least 1 s): a service
 * that changes every 50 ms, never quiet for the debounce, still gets an
 * update within 1 s of the first change. */
START_TEST(test_server_debounce_without_max_delay_is_bounded_by_default) {
  fixture f = fx_open(0, 100 * MS);
  mcp_tstamp first = 10 * MS, got = 0;
  for (int i = 0; i < 30 && !got; i++) {
    mcp_tstamp ts = first + (mcp_tstamp)i * 50 * MS;
    char ip[32];
    snprintf(ip, sizeof ip, "10.0.1.%d", i + 1);
    put_addr(f.view, COLL, ip, 8080, NULL, ts);
    Update *u = pump(f.st, ts);
    if (u) {
      got = ts;
      conduit__proxy__destination__update__free_unpacked(u, NULL);
    }
  }
  ck_assert_uint_ne(got, 0);
  ck_assert_uint_le(got, first + mcp_watch_default_max_delay(100 * MS));
  ck_assert_uint_eq(mcp_watch_default_max_delay(100 * MS), MCP_SECONDS);
  ck_assert_uint_eq(mcp_watch_default_max_delay(200 * MS), 2 * MCP_SECONDS);
  ck_assert_uint_eq(mcp_watch_default_max_delay(0), 0);
  fx_close(&f);
}
END_TEST

START_TEST(test_server_heartbeat_is_empty_add_after_quiet_period) {
  fixture f = fx_open(100 * MS, 0);
  ck_assert_uint_eq(mcp_stream_get_expiry(f.st), 100 * MS);
  pump_idle(f.st, 99 * MS);
  Update *u = pump(f.st, 100 * MS);
  ck_assert_ptr_nonnull(u);
  ck_assert_int_eq(u->update_case, UPD_ADD);
  ck_assert_uint_eq(u->add->n_addrs, 0);
  ck_assert_uint_eq(u->add->n_metric_labels, 2);
  ufree(u);
  pump_idle(f.st, 100 * MS);
  /* an update restarts the period */
  put_addr(f.view, COLL, "10.0.0.3", 8080, NULL, 150 * MS);
  expect_add(pump(f.st, 150 * MS), "10.0.0.3:8080");
  ck_assert_uint_eq(mcp_stream_get_expiry(f.st), 250 * MS);
  pump_idle(f.st, 249 * MS);
  expect_add(pump(f.st, 250 * MS), "");
  mcp_dest_server_stats s;
  mcp_dest_server_get_stats(f.srv, &s);
  ck_assert_uint_eq(s.heartbeats, 2);
  fx_close(&f);
}
END_TEST

START_TEST(test_server_heartbeat_of_absent_service_repeats_no_endpoints_false) {
  mcp_store *view = th_store(NULL);
  mcp_dest_server *srv = server(view, 100 * MS, 0);
  mcp_stream *st = open_req(srv, "k8s", SVC, 0);
  expect_no_endpoints(pump(st, 0), 0);
  /* an add, even empty, would say the service exists */
  expect_no_endpoints(pump(st, 100 * MS), 0);
  mcp_stream_del(st);
  /* an existing empty service gets the empty add */
  ck_assert_int_eq(mcp_store_add_collection(view, COLL), 0);
  st = open_req(srv, "k8s", SVC, 0);
  expect_no_endpoints(pump(st, 0), 1);
  expect_add(pump(st, 100 * MS), "");
  mcp_stream_del(st);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_server_heartbeat_zero_is_off) {
  fixture f = fx_open(0, 0);
  ck_assert_uint_eq(mcp_stream_get_expiry(f.st), MCP_TSTAMP_MAX);
  pump_idle(f.st, 3600 * MCP_SECONDS);
  fx_close(&f);
}
END_TEST

START_TEST(test_server_heartbeat_default_is_10s) {
  mcp_dest_server_options o;
  mcp_dest_server_options_default(&o);
  ck_assert_uint_eq(o.heartbeat, 10 * MCP_SECONDS);
  ck_assert_ptr_null(o.dns_zone);
}
END_TEST

START_TEST(test_server_resync_when_change_log_no_longer_reaches) {
  mcp_store *view = th_store(NULL);
  char ip[32];
  for (int i = 0; i < 100; i++) {
    snprintf(ip, sizeof(ip), "10.0.%d.%d", i / 250, i % 250 + 1);
    put_addr(view, COLL, ip, 80, NULL, 0);
  }
  mcp_dest_server *srv = server(view, 0, 0);
  mcp_stream *st = open_req(srv, "k8s", SVC, 0);
  Update *u = pump(st, 0);
  ck_assert_uint_eq(u->add->n_addrs, 100);
  ufree(u);
  /* 90 deletions: the store drops tombstones the stream has not taken */
  for (int i = 0; i < 90; i++) {
    char name[40];
    snprintf(name, sizeof(name), "10.0.%d.%d:80", i / 250, i % 250 + 1);
    del_addr(view, COLL, name, 1);
  }
  pump_end(st, 1, mcp_error_grpc_status(MCP_ERR_RESYNC));
  mcp_stream_del(st);
  mcp_dest_server_stats s;
  mcp_dest_server_get_stats(srv, &s);
  ck_assert_uint_eq(s.resyncs, 1);
  /* a new stream gets the state */
  st = open_req(srv, "k8s", SVC, 2);
  u = pump(st, 2);
  ck_assert_uint_eq(u->add->n_addrs, 10);
  ufree(u);
  mcp_stream_del(st);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

START_TEST(test_server_stats_and_service_def) {
  mcp_store *view = th_store(NULL);
  mcp_dest_server *srv = server(view, 0, 0);
  const mcp_service_def *def = mcp_dest_server_service(srv);
  ck_assert_str_eq(def->method, "/conduit.proxy.destination.Destination/Get");
  mcp_peer_info peer = {"127.0.0.1:1", 0, NULL, NULL, 0};
  mcp_stream *st = NULL;
  ck_assert_int_eq(def->open(def->user_data, &peer, 0, &st), 0);
  ck_assert(mcp_dest_server_stream_is(st));
  ck_assert_str_eq(mcp_stream_get_ops(st)->name, "destination");
  ck_assert_uint_eq(mcp_stream_get_ops(st)->flags,
                    MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE);
  size_t len;
  uint8_t *b = encode_request("k8s", SVC, &len);
  mcp_stream_recv(st, b, len, 0);
  free(b);
  expect_no_endpoints(pump(st, 0), 0);
  put_addr(view, COLL, "10.0.0.1", 80, NULL, 1);
  expect_add(pump(st, 1), "10.0.0.1:80");
  del_addr(view, COLL, "10.0.0.1:80", 2);
  expect_no_endpoints(pump(st, 2), 1);
  mcp_dest_server_stats s;
  mcp_dest_server_get_stats(srv, &s);
  ck_assert_uint_eq(s.streams, 1);
  ck_assert_uint_eq(s.active, 1);
  ck_assert_uint_eq(s.updates, 3);
  ck_assert_uint_eq(s.adds, 1);
  ck_assert_uint_eq(s.no_endpoints, 2);
  ck_assert_uint_eq(mcp_stream_sent(st), 3);
  mcp_stream_del(st);
  mcp_dest_server_get_stats(srv, &s);
  ck_assert_uint_eq(s.active, 0);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

/* Every allocation of a stream's life failing in turn: an error code,
 * never a crash or a leak. */
START_TEST(test_server_allocation_failures_are_errors_not_leaks) {
  for (long fail = 1; fail < 200; fail++) {
    th_mem tm;
    th_mem_init(&tm, fail);
    mcp_store *view = th_store(NULL);
    put_addr(view, COLL, "10.0.0.1", 80, NULL, 0);
    mcp_dest_server_options o;
    mcp_dest_server_options_default(&o);
    o.view = view;
    o.mem = &tm.mem;
    mcp_dest_server *srv = NULL;
    int rv = mcp_dest_server_new(&srv, &o);
    if (rv == 0) {
      mcp_stream *st = NULL;
      rv = mcp_dest_server_open(srv, 0, &st);
      if (rv == 0) {
        size_t len;
        uint8_t *b = encode_request("k8s", SVC, &len);
        mcp_stream_recv(st, b, len, 0);
        free(b);
        for (int step = 0; step < 3; step++) {
          mcp_msg *msg = NULL;
          int status;
          const char *details;
          mcp_stream_action a = mcp_stream_pump(st, (mcp_tstamp)step, 1,
                                                &msg, &status, &details);
          mcp_msg_free(msg);
          if (a == MCP_STREAM_END) {
            ck_assert_int_eq(status, mcp_error_grpc_status(MCP_ERR_NOMEM));
            break;
          }
          put_addr(view, COLL, "10.0.0.2", 80, NULL, (mcp_tstamp)step + 1);
          del_addr(view, COLL, "10.0.0.1:80", (mcp_tstamp)step + 1);
          put_addr(view, COLL, "10.0.0.1", 80, NULL, (mcp_tstamp)step + 1);
        }
        mcp_stream_del(st);
      } else {
        ck_assert_int_eq(rv, MCP_ERR_NOMEM);
      }
      mcp_dest_server_del(srv);
    } else {
      ck_assert_int_eq(rv, MCP_ERR_NOMEM);
    }
    mcp_store_del(view);
    ck_assert_int_eq(tm.live, 0);
    if (!tm.failed) {
      break; /* the whole life ran without reaching |fail| */
    }
  }
}
END_TEST

/* ---- client ---- */

typedef struct rec {
  int n;
  mcp_dest_update_kind kind[32];
  char addrs[32][256];
  int exists[32];
  size_t total[32];
  int first[32];
} rec;

static void on_update(const mcp_dest_update *u, void *ud) {
  rec *r = ud;
  if (r->n >= 32)
    return;
  r->kind[r->n] = u->kind;
  r->addrs[r->n][0] = '\0';
  for (size_t i = 0; i < u->naddrs; i++) {
    if (i)
      strcat(r->addrs[r->n], ",");
    strcat(r->addrs[r->n], u->addrs[i]);
  }
  r->exists[r->n] = u->exists;
  r->total[r->n] = u->total;
  r->first[r->n] = u->first;
  r->n++;
}

static mcp_stream *client(mcp_dest_set *set, rec *r, const char *authority) {
  mcp_dest_client_options o;
  memset(&o, 0, sizeof(o));
  o.set = set;
  o.authority = authority;
  o.on_update = on_update;
  o.user_data = r;
  mcp_stream *st = NULL;
  ck_assert_int_eq(mcp_dest_client_open(&st, &o, 0), 0);
  return st;
}

/* Encodes an Update: kind 1 add, 2 remove, 3 no_endpoints; |ips| a
 * NULL-terminated list of "a.b.c.d" or IPv6 text, all with |port|. */
static uint8_t *enc_update(int kind, const char *const *ips, uint32_t port,
                           int exists, size_t *len) {
  Conduit__Proxy__Destination__Update u = CONDUIT__PROXY__DESTINATION__UPDATE__INIT;
  Conduit__Proxy__Destination__WeightedAddrSet was =
      CONDUIT__PROXY__DESTINATION__WEIGHTED_ADDR_SET__INIT;
  Conduit__Proxy__Destination__AddrSet as =
      CONDUIT__PROXY__DESTINATION__ADDR_SET__INIT;
  Conduit__Proxy__Destination__NoEndpoints ne =
      CONDUIT__PROXY__DESTINATION__NO_ENDPOINTS__INIT;
  Conduit__Proxy__Destination__WeightedAddr wa[16], *pwa[16];
  Conduit__Common__TcpAddress tcp[16], *ptcp[16];
  Conduit__Common__IPAddress ip[16];
  Conduit__Common__IPv6 v6[16];
  size_t n = 0;
  for (; ips && ips[n]; n++) {
    mcp_dest_addr a;
    ck_assert_int_eq(mcp_dest_ip_parse(&a, ips[n], 1), 0);
    conduit__common__ipaddress__init(&ip[n]);
    if (a.family == 4) {
      ip[n].ip_case = CONDUIT__COMMON__IPADDRESS__IP_IPV4;
      ip[n].ipv4 = (uint32_t)a.ip[0] << 24 | (uint32_t)a.ip[1] << 16 |
                   (uint32_t)a.ip[2] << 8 | a.ip[3];
    } else {
      conduit__common__ipv6__init(&v6[n]);
      for (int i = 0; i < 8; i++) {
        v6[n].first = v6[n].first << 8 | a.ip[i];
        v6[n].last = v6[n].last << 8 | a.ip[8 + i];
      }
      ip[n].ip_case = CONDUIT__COMMON__IPADDRESS__IP_IPV6;
      ip[n].ipv6 = &v6[n];
    }
    conduit__common__tcp_address__init(&tcp[n]);
    tcp[n].ip = &ip[n];
    tcp[n].port = port;
    ptcp[n] = &tcp[n];
    conduit__proxy__destination__weighted_addr__init(&wa[n]);
    wa[n].addr = &tcp[n];
    wa[n].weight = 1;
    pwa[n] = &wa[n];
  }
  if (kind == 1) {
    was.n_addrs = n;
    was.addrs = pwa;
    u.update_case = UPD_ADD;
    u.add = &was;
  } else if (kind == 2) {
    as.n_addrs = n;
    as.addrs = ptcp;
    u.update_case = UPD_REMOVE;
    u.remove = &as;
  } else if (kind == 3) {
    ne.exists = exists;
    u.update_case = UPD_NOEP;
    u.no_endpoints = &ne;
  }
  *len = conduit__proxy__destination__update__get_packed_size(&u);
  uint8_t *b = malloc(*len ? *len : 1);
  conduit__proxy__destination__update__pack(&u, b);
  return b;
}

static void feed(mcp_stream *st, int kind, const char *const *ips,
                 uint32_t port, int exists) {
  size_t len;
  uint8_t *b = enc_update(kind, ips, port, exists, &len);
  mcp_stream_recv(st, b, len, 0);
  free(b);
}

static void set_is(const mcp_dest_set *s, const char *want) {
  char got[1024] = "";
  for (size_t i = 0; i < mcp_dest_set_count(s); i++) {
    if (i)
      strcat(got, ",");
    strcat(got, mcp_dest_set_addr(s, i));
  }
  ck_assert_str_eq(got, want);
}

START_TEST(test_client_sends_destination_then_half_closes) {
  mcp_dest_set *set;
  ck_assert_int_eq(mcp_dest_set_new(&set, NULL), 0);
  rec r = {0};
  mcp_stream *st = client(set, &r, SVC ":8080");
  ck_assert_uint_eq(mcp_stream_get_ops(st)->flags,
                    MCP_STREAM_CLIENT_HALF_CLOSE_AFTER_FIRST |
                        MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE);
  mcp_msg *msg;
  int status;
  const char *details;
  ck_assert_int_eq(mcp_stream_pump(st, 0, 1, &msg, &status, &details),
                   MCP_STREAM_SEND);
  size_t len = mcp_msg_len(msg);
  uint8_t flat[256];
  mcp_msg_flatten(msg, flat);
  mcp_msg_free(msg);
  Conduit__Common__Destination *d =
      conduit__common__destination__unpack(NULL, len, flat);
  ck_assert_ptr_nonnull(d);
  ck_assert_str_eq(d->scheme, "k8s");
  ck_assert_str_eq(d->path, SVC ":8080");
  conduit__common__destination__free_unpacked(d, NULL);
  ck_assert_int_eq(mcp_stream_pump(st, 0, 1, &msg, &status, &details),
                   MCP_STREAM_HALF_CLOSE);
  ck_assert_int_eq(mcp_stream_pump(st, 0, 1, &msg, &status, &details),
                   MCP_STREAM_IDLE);
  ck_assert(mcp_dest_set_stale(set));
  ck_assert(!mcp_dest_set_synced(set));
  mcp_stream_del(st);
  mcp_dest_set_del(set);
}
END_TEST

START_TEST(test_client_applies_add_remove_no_endpoints_in_any_order) {
  mcp_dest_set *set;
  ck_assert_int_eq(mcp_dest_set_new(&set, NULL), 0);
  rec r = {0};
  mcp_stream *st = client(set, &r, SVC);
  /* a remove first (of nothing held) is harmless */
  feed(st, 2, (const char *[]){"10.0.0.9", NULL}, 80, 0);
  ck_assert(mcp_dest_set_synced(set));
  ck_assert_uint_eq(mcp_dest_set_count(set), 0);
  feed(st, 1, (const char *[]){"10.0.0.2", "10.0.0.1", "fd00::1", "10.0.0.2", NULL},
       80, 0);
  set_is(set, "10.0.0.1:80,10.0.0.2:80,[fd00::1]:80");
  ck_assert(mcp_dest_set_exists(set));
  /* redundant add, remove of unknown: harmless */
  feed(st, 1, (const char *[]){"10.0.0.1", NULL}, 80, 0);
  feed(st, 2, (const char *[]){"10.0.0.1", "10.0.0.77", NULL}, 80, 0);
  set_is(set, "10.0.0.2:80,[fd00::1]:80");
  feed(st, 3, NULL, 0, 1);
  ck_assert_uint_eq(mcp_dest_set_count(set), 0);
  ck_assert(mcp_dest_set_exists(set));
  feed(st, 3, NULL, 0, 0);
  ck_assert(!mcp_dest_set_exists(set));
  feed(st, 1, NULL, 0, 0); /* an empty add (heartbeat): exists */
  ck_assert(mcp_dest_set_exists(set));
  ck_assert_int_eq(r.n, 7);
  ck_assert_int_eq(r.kind[0], MCP_DEST_UPDATE_REMOVE);
  ck_assert_int_eq(r.first[0], 1);
  ck_assert_int_eq(r.first[1], 0);
  ck_assert_str_eq(r.addrs[1], "10.0.0.2:80,10.0.0.1:80,[fd00::1]:80,10.0.0.2:80");
  ck_assert_uint_eq(r.total[1], 3);
  ck_assert_int_eq(r.kind[4], MCP_DEST_UPDATE_NO_ENDPOINTS);
  ck_assert_int_eq(r.exists[4], 1);
  ck_assert_int_eq(r.exists[5], 0);
  ck_assert_uint_eq(r.total[4], 0);
  ck_assert_uint_eq(mcp_dest_set_updates(set), 7);
  int status;
  const char *details;
  mcp_msg *msg;
  ck_assert_int_eq(mcp_stream_pump(st, 0, 1, &msg, &status, &details),
                   MCP_STREAM_SEND);
  mcp_msg_free(msg);
  mcp_stream_del(st);
  mcp_dest_set_del(set);
}
END_TEST

START_TEST(test_client_keeps_stale_set_until_first_message_of_new_stream) {
  mcp_dest_set *set;
  ck_assert_int_eq(mcp_dest_set_new(&set, NULL), 0);
  rec r = {0};
  mcp_stream *st = client(set, &r, SVC);
  feed(st, 1, (const char *[]){"10.0.0.1", "10.0.0.2", NULL}, 80, 0);
  mcp_stream_del(st); /* the connection is lost */
  st = client(set, &r, SVC);
  ck_assert(mcp_dest_set_stale(set));
  ck_assert(!mcp_dest_set_synced(set));
  set_is(set, "10.0.0.1:80,10.0.0.2:80"); /* still usable */
  feed(st, 1, (const char *[]){"10.0.0.2", "10.0.0.3", NULL}, 80, 0);
  set_is(set, "10.0.0.2:80,10.0.0.3:80"); /* replaced, not merged */
  ck_assert(!mcp_dest_set_stale(set));
  ck_assert(mcp_dest_set_synced(set));
  ck_assert_int_eq(r.first[1], 1);
  mcp_stream_del(st);
  /* a no_endpoints as the first message clears the stale set too */
  st = client(set, &r, SVC);
  feed(st, 3, NULL, 0, 0);
  ck_assert_uint_eq(mcp_dest_set_count(set), 0);
  mcp_stream_del(st);
  mcp_dest_set_del(set);
}
END_TEST

START_TEST(test_client_malformed_update_ends_stream_and_keeps_set) {
  static const uint8_t junk[][6] = {
      {0x0a, 0x05, 0x0a},             /* truncated */
      {0x0a, 0x02, 0x0a, 0x00},       /* add of a WeightedAddr without addr */
      {0x12, 0x02, 0x0a, 0x00},       /* remove of a TcpAddress without ip */
      {0x12, 0x04, 0x0a, 0x02, 0x0a, 0x00}, /* ip without a member */
  };
  static const size_t lens[] = {3, 4, 4, 6};
  for (size_t k = 0; k < 5; k++) {
    mcp_dest_set *set;
    ck_assert_int_eq(mcp_dest_set_new(&set, NULL), 0);
    rec r = {0};
    mcp_stream *st = client(set, &r, SVC);
    feed(st, 1, (const char *[]){"10.0.0.1", NULL}, 80, 0);
    mcp_stream_del(st);
    st = client(set, &r, SVC);
    if (k < 4) {
      mcp_stream_recv(st, junk[k], lens[k], 0);
    } else {
      feed(st, 1, (const char *[]){"10.0.0.2", NULL}, 70000, 0); /* port */
    }
    int status;
    const char *details;
    mcp_msg *msg;
    ck_assert_int_eq(mcp_stream_pump(st, 0, 1, &msg, &status, &details),
                     MCP_STREAM_END);
    ck_assert_int_eq(status, mcp_error_grpc_status(MCP_ERR_MALFORMED));
    set_is(set, "10.0.0.1:80");
    ck_assert(mcp_dest_set_stale(set));
    ck_assert_int_eq(r.n, 1);
    mcp_stream_del(st);
    mcp_dest_set_del(set);
  }
}
END_TEST

/* A bad address anywhere in an Update of a synced stream (not only the
 * first, on a stale set): the whole message is refused, none of its good
 * addresses is applied, the set stays synced with what it held. */
START_TEST(test_client_bad_address_mid_stream_changes_nothing) {
  Conduit__Common__IPAddress good_ip = CONDUIT__COMMON__IPADDRESS__INIT;
  good_ip.ip_case = CONDUIT__COMMON__IPADDRESS__IP_IPV4;
  good_ip.ipv4 = 0x0A000002u; /* 10.0.0.2 */
  Conduit__Common__IPAddress no_member = CONDUIT__COMMON__IPADDRESS__INIT;
  Conduit__Common__TcpAddress good = CONDUIT__COMMON__TCP_ADDRESS__INIT;
  good.ip = &good_ip;
  good.port = 80;
  Conduit__Common__TcpAddress held = good; /* 10.0.0.1:80, held */
  Conduit__Common__IPAddress held_ip = good_ip;
  held_ip.ipv4 = 0x0A000001u;
  held.ip = &held_ip;
  Conduit__Common__TcpAddress bad[3];
  for (int i = 0; i < 3; i++) {
    bad[i] = good;
  }
  bad[0].ip = NULL;       /* no ip */
  bad[1].ip = &no_member; /* ip without a member */
  bad[2].port = 70000;    /* port over 65535 */
  for (int k = 0; k < 7; k++) {
    mcp_dest_set *set;
    ck_assert_int_eq(mcp_dest_set_new(&set, NULL), 0);
    rec r = {0};
    mcp_stream *st = client(set, &r, SVC);
    feed(st, 1, (const char *[]){"10.0.0.1", NULL}, 80, 0);
    ck_assert_int_eq(r.n, 1);

    Update u = CONDUIT__PROXY__DESTINATION__UPDATE__INIT;
    Conduit__Proxy__Destination__WeightedAddr wa[2];
    Conduit__Proxy__Destination__WeightedAddr *pwa[2] = {&wa[0], &wa[1]};
    Conduit__Proxy__Destination__WeightedAddrSet was =
        CONDUIT__PROXY__DESTINATION__WEIGHTED_ADDR_SET__INIT;
    Conduit__Common__TcpAddress *ptcp[2];
    Conduit__Proxy__Destination__AddrSet as =
        CONDUIT__PROXY__DESTINATION__ADDR_SET__INIT;
    if (k < 4) { /* add: a new good address, then a bad one */
      conduit__proxy__destination__weighted_addr__init(&wa[0]);
      conduit__proxy__destination__weighted_addr__init(&wa[1]);
      wa[0].addr = &good;
      wa[0].weight = wa[1].weight = 1;
      wa[1].addr = k == 3 ? NULL : &bad[k]; /* k == 3: no addr at all */
      was.n_addrs = 2;
      was.addrs = pwa;
      u.update_case = UPD_ADD;
      u.add = &was;
    } else { /* remove: the held address, then a bad one */
      ptcp[0] = &held;
      ptcp[1] = &bad[k - 4];
      as.n_addrs = 2;
      as.addrs = ptcp;
      u.update_case = UPD_REMOVE;
      u.remove = &as;
    }
    size_t len = conduit__proxy__destination__update__get_packed_size(&u);
    uint8_t *b = malloc(len);
    conduit__proxy__destination__update__pack(&u, b);
    mcp_stream_recv(st, b, len, 0);
    free(b);

    int status;
    const char *details;
    mcp_msg *msg;
    ck_assert_int_eq(mcp_stream_pump(st, 0, 1, &msg, &status, &details),
                     MCP_STREAM_END);
    ck_assert_int_eq(status, mcp_error_grpc_status(MCP_ERR_MALFORMED));
    set_is(set, "10.0.0.1:80");
    ck_assert(mcp_dest_set_synced(set));
    ck_assert(!mcp_dest_set_stale(set));
    ck_assert(mcp_dest_set_exists(set));
    ck_assert_uint_eq(mcp_dest_set_updates(set), 1);
    ck_assert_int_eq(r.n, 1);
    mcp_stream_del(st);
    mcp_dest_set_del(set);
  }
}
END_TEST

START_TEST(test_client_update_without_member_is_ignored) {
  mcp_dest_set *set;
  ck_assert_int_eq(mcp_dest_set_new(&set, NULL), 0);
  rec r = {0};
  mcp_stream *st = client(set, &r, SVC);
  static const uint8_t future[] = {0x22, 0x00}; /* field 4: unknown */
  mcp_stream_recv(st, future, sizeof(future), 0);
  mcp_stream_recv(st, future, 0, 0);
  ck_assert_int_eq(r.n, 0);
  ck_assert(mcp_dest_set_stale(set));
  mcp_msg *msg;
  int status;
  const char *details;
  ck_assert_int_eq(mcp_stream_pump(st, 0, 1, &msg, &status, &details),
                   MCP_STREAM_SEND);
  mcp_msg_free(msg);
  mcp_stream_del(st);
  mcp_dest_set_del(set);
}
END_TEST

START_TEST(test_client_refuses_bad_options) {
  mcp_dest_set *set;
  ck_assert_int_eq(mcp_dest_set_new(&set, NULL), 0);
  mcp_dest_client_options o;
  memset(&o, 0, sizeof(o));
  mcp_stream *st = NULL;
  o.authority = SVC;
  ck_assert_int_eq(mcp_dest_client_open(&st, &o, 0), MCP_ERR_INVALID_ARGUMENT);
  o.set = set;
  o.authority = "";
  ck_assert_int_eq(mcp_dest_client_open(&st, &o, 0), MCP_ERR_INVALID_ARGUMENT);
  o.authority = "\xff\xfe:80"; /* not UTF-8 */
  ck_assert_int_eq(mcp_dest_client_open(&st, &o, 0), MCP_ERR_INVALID_ARGUMENT);
  o.authority = SVC;
  ck_assert_int_eq(mcp_dest_client_open_versioned(&st, 99, &o, 0),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(st);
  ck_assert(!mcp_dest_set_stale(set));
  mcp_dest_set_del(set);
}
END_TEST

START_TEST(test_client_allocation_failures_change_nothing) {
  for (long fail = 1; fail < 100; fail++) {
    th_mem tm;
    th_mem_init(&tm, fail);
    mcp_dest_set *set = NULL;
    if (mcp_dest_set_new(&set, &tm.mem) != 0)
      continue;
    mcp_dest_client_options o;
    memset(&o, 0, sizeof(o));
    o.set = set;
    o.authority = SVC;
    o.mem = &tm.mem;
    mcp_stream *st = NULL;
    if (mcp_dest_client_open(&st, &o, 0) == 0) {
      const char *const step1[] = {"10.0.0.1", "10.0.0.2", NULL};
      size_t len;
      uint8_t *b = enc_update(1, step1, 80, 0, &len);
      mcp_stream_recv(st, b, len, 0);
      free(b);
      size_t n = mcp_dest_set_count(set);
      ck_assert(n == 0 || n == 2); /* all or nothing */
      mcp_stream_del(st);
    }
    mcp_dest_set_del(set);
    ck_assert_int_eq(tm.live, 0);
    if (!tm.failed)
      break;
  }
}
END_TEST

/* ---- both sides ---- */

/* A client fed by a server through random view changes ends up holding
 * exactly the view, and never sees an empty set while the view had
 * addresses at both ends of a change. */
START_TEST(test_client_and_server_converge_on_the_view) {
  mcp_store *view = th_store(NULL);
  mcp_dest_server *srv = server(view, 50 * MS, 20 * MS);
  mcp_dest_set *set;
  ck_assert_int_eq(mcp_dest_set_new(&set, NULL), 0);
  rec r = {0};
  uint64_t seed = 42;
  mcp_tstamp ts = 0;
  for (int round = 0; round < 5; round++) {
    mcp_stream *ss = open_req(srv, "k8s", SVC, ts);
    mcp_stream *cs = client(set, &r, SVC);
    for (int step = 0; step < 400; step++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      unsigned x = (unsigned)(seed >> 33);
      ts += (x % 7) * MS;
      char ip[32], name[40];
      snprintf(ip, sizeof(ip), "10.0.0.%u", x / 7 % 12 + 1);
      snprintf(name, sizeof(name), "%s:80", ip);
      switch (x / 100 % 8) {
      case 0: case 1: case 2:
        put_addr(view, COLL, ip, 80, (x & 1) ? "p" : NULL, ts);
        break;
      case 3: case 4:
        mcp_store_delete(view, COLL, name, ts);
        break;
      case 5:
        if (x % 5 == 0)
          mcp_store_remove_collection(view, COLL, ts);
        break;
      default:
        break;
      }
      for (;;) {
        mcp_msg *msg;
        int status;
        const char *details;
        mcp_stream_action a =
            mcp_stream_pump(ss, ts, 1, &msg, &status, &details);
        ck_assert_int_ne(a, MCP_STREAM_END);
        if (a != MCP_STREAM_SEND)
          break;
        size_t len = mcp_msg_len(msg);
        uint8_t *flat = malloc(len ? len : 1);
        mcp_msg_flatten(msg, flat);
        mcp_msg_free(msg);
        mcp_stream_recv(cs, flat, len, ts);
        free(flat);
      }
    }
    /* quiet: after the debounce everything is delivered */
    ts += 100 * MS;
    for (;;) {
      mcp_msg *msg;
      int status;
      const char *details;
      mcp_stream_action a = mcp_stream_pump(ss, ts, 1, &msg, &status, &details);
      if (a != MCP_STREAM_SEND)
        break;
      size_t len = mcp_msg_len(msg);
      uint8_t *flat = malloc(len ? len : 1);
      mcp_msg_flatten(msg, flat);
      mcp_msg_free(msg);
      mcp_stream_recv(cs, flat, len, ts);
      free(flat);
    }
    ck_assert(mcp_dest_set_synced(set));
    ck_assert_int_eq(mcp_dest_set_exists(set),
                     mcp_store_has_collection(view, COLL));
    ck_assert_uint_eq(mcp_dest_set_count(set), mcp_store_count(view, COLL));
    for (size_t i = 0; i < mcp_dest_set_count(set); i++)
      ck_assert_ptr_nonnull(
          mcp_store_version(view, COLL, mcp_dest_set_addr(set, i)));
    mcp_stream_del(cs);
    mcp_stream_del(ss);
  }
  mcp_dest_set_del(set);
  mcp_dest_server_del(srv);
  mcp_store_del(view);
}
END_TEST

/* Kubernetes' pairing of a Service port with an Endpoints subset's port. */
START_TEST(test_view_endpoints_port_by_name_only_or_unnamed) {
  const mcp_dest_port named = {"http", 80}, unnamed = {"", 80};
  const mcp_dest_port two[] = {{"metrics", 9090}, {"http", 8080}};
  const mcp_dest_port one[] = {{"whatever", 8080}};
  const mcp_dest_port mixed[] = {{"metrics", 9090}, {"", 8080}};
  ck_assert_ptr_eq(mcp_dest_endpoints_port(&named, two, 2), &two[1]);
  /* A named service port is served only by the port of its name. */
  ck_assert_ptr_null(mcp_dest_endpoints_port(&named, one, 1));
  ck_assert_ptr_null(mcp_dest_endpoints_port(&named, two, 0));
  /* An unnamed one: the only port, else the unnamed one. */
  ck_assert_ptr_eq(mcp_dest_endpoints_port(&unnamed, one, 1), &one[0]);
  ck_assert_ptr_eq(mcp_dest_endpoints_port(&unnamed, mixed, 2), &mixed[1]);
  ck_assert_ptr_null(mcp_dest_endpoints_port(&unnamed, two, 2));
}
END_TEST

/* ---- agent: every authority's calls, reconnecting (fake time) ---- */

typedef struct arec {
  int updates[2];
  int ends;
  mcp_dest_call_end last;
} arec;

static void agent_on_update(size_t slot, const mcp_dest_update *u, void *ud) {
  arec *r = ud;
  (void)u;
  r->updates[slot]++;
}

static void agent_on_end(const mcp_dest_call_end *e, void *ud) {
  arec *r = ud;
  r->ends++;
  r->last = *e;
  r->last.details = NULL; /* valid during the callback only */
}

/* No jitter: the random draw is the middle of the range. */
static void mid_rand(uint8_t *dest, size_t len, void *ud) {
  (void)ud;
  for (size_t i = 0; i < len; i++)
    dest[i] = i % 4 == 0 ? 0x80 : 0;
}

#define AT0 ((mcp_tstamp)100 * MCP_SECONDS)

START_TEST(test_dest_agent_reconnects_each_authority_by_the_core_policy) {
  mcp_dest_set *sets[2];
  ck_assert_int_eq(mcp_dest_set_new(&sets[0], NULL), 0);
  ck_assert_int_eq(mcp_dest_set_new(&sets[1], NULL), 0);
  const char *auths[] = {SVC, "other.ns.svc.cluster.local:80"};
  arec r = {0};
  mcp_dest_agent_options o;
  memset(&o, 0, sizeof(o));
  o.authorities = auths;
  o.sets = sets;
  o.nauthorities = 2;
  o.on_update = agent_on_update;
  o.on_end = agent_on_end;
  o.user_data = &r;
  o.rand = mid_rand;
  mcp_dest_agent *a = NULL;
  ck_assert_int_eq(mcp_dest_agent_new(&a, &o, AT0), 0);
  const mcp_client_def *d = mcp_dest_agent_client_def(a);
  ck_assert_uint_eq(d->nslots, 2);
  ck_assert_str_eq(d->method(d->user_data, 1), MCP_DEST_METHOD);
  ck_assert_uint_eq(d->get_expiry(d->user_data), AT0); /* both due now */
  mcp_stream *st[2] = {NULL, NULL};
  ck_assert_int_eq(d->open(d->user_data, 0, AT0, &st[0]), 1);
  ck_assert_int_eq(d->open(d->user_data, 1, AT0, &st[1]), 1);
  ck_assert_int_eq(d->open(d->user_data, 0, AT0, &st[0]), 0); /* one each */
  ck_assert_uint_eq(d->get_expiry(d->user_data), MCP_TSTAMP_MAX);

  /* Slot 0 fails at once: the next call after the initial 1 s. */
  mcp_stream_del(st[0]);
  d->ended(d->user_data, 0, MCP_CODE_UNAVAILABLE, "connect: refused", AT0);
  ck_assert_int_eq(r.ends, 1);
  ck_assert_uint_eq(r.last.slot, 0);
  ck_assert_int_eq(r.last.status, MCP_CODE_UNAVAILABLE);
  ck_assert_uint_eq(r.last.received, 0);
  ck_assert_uint_eq(r.last.delay, MCP_SECONDS);
  ck_assert_uint_eq(d->get_expiry(d->user_data), AT0 + MCP_SECONDS);
  ck_assert_int_eq(d->open(d->user_data, 0, AT0 + MCP_SECONDS - 1, &st[0]), 0);
  ck_assert_int_eq(d->open(d->user_data, 0, AT0 + MCP_SECONDS, &st[0]), 1);
  /* Again at once: 1.6 s (it grows). */
  mcp_stream_del(st[0]);
  d->ended(d->user_data, 0, MCP_CODE_UNAVAILABLE, "", AT0 + MCP_SECONDS);
  ck_assert_uint_eq(r.last.delay, 1600 * MCP_MILLISECONDS);

  /* Each authority has its own backoff: slot 1, after an Update, waits
   * 1 s whatever slot 0's failures; its updates reach the callback with
   * its slot, and the end counts them. */
  feed(st[1], 1, (const char *[]){"10.0.0.1", NULL}, 80, 0);
  ck_assert_int_eq(r.updates[1], 1);
  ck_assert_int_eq(r.updates[0], 0);
  mcp_stream_del(st[1]);
  d->ended(d->user_data, 1, MCP_CODE_UNAVAILABLE, "", AT0 + 60 * MCP_SECONDS);
  ck_assert_uint_eq(r.last.slot, 1);
  ck_assert_uint_eq(r.last.received, 1);
  ck_assert_uint_eq(r.last.delay, MCP_SECONDS);
  /* The set keeps what it holds across the reconnection. */
  ck_assert_uint_eq(mcp_dest_set_count(sets[1]), 1);
  mcp_dest_agent_del(a);
  mcp_dest_set_del(sets[0]);
  mcp_dest_set_del(sets[1]);
}
END_TEST

START_TEST(test_dest_agent_refuses_bad_options) {
  mcp_dest_set *set;
  ck_assert_int_eq(mcp_dest_set_new(&set, NULL), 0);
  mcp_dest_set *sets[] = {set, NULL};
  const char *auths[] = {SVC, ""};
  mcp_dest_agent_options o;
  memset(&o, 0, sizeof(o));
  mcp_dest_agent *a = NULL;
  ck_assert_int_eq(mcp_dest_agent_new(&a, &o, 0), MCP_ERR_INVALID_ARGUMENT);
  o.authorities = auths;
  o.sets = sets;
  o.nauthorities = 2; /* an empty authority, a missing set */
  ck_assert_int_eq(mcp_dest_agent_new(&a, &o, 0), MCP_ERR_INVALID_ARGUMENT);
  o.nauthorities = 1;
  ck_assert_int_eq(mcp_dest_agent_new_versioned(&a, 99, &o, 0),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(a);
  ck_assert_int_eq(mcp_dest_agent_new(&a, &o, 0), 0);
  mcp_dest_agent_del(a);
  mcp_dest_set_del(set);
}
END_TEST

int main(void) {
  Suite *s = suite_create("core_destination");
  TCase *tc = tcase_create("view");
  tcase_add_test(tc, test_view_endpoints_port_by_name_only_or_unnamed);
  tcase_add_test(tc, test_view_collection_is_ns_slash_svc_colon_port);
  tcase_add_test(tc, test_addr_names_ipv4_and_rfc5952_ipv6_round_trip);
  tcase_add_test(tc, test_addr_parse_refuses_malformed);
  tcase_add_test(tc, test_weighted_addr_body_decodes_with_weight_1_and_pod_label);
  suite_add_tcase(s, tc);
  tc = tcase_create("server_request");
  tcase_add_test(tc, test_server_scheme_must_be_k8s);
  tcase_add_test(tc, test_server_malformed_path_ends_invalid_argument);
  tcase_add_test(tc, test_server_port_defaults_to_80);
  tcase_add_test(tc, test_server_ipv4_literal_one_add_then_nothing);
  tcase_add_test(tc, test_server_other_host_no_endpoints_false_then_nothing);
  tcase_add_test(tc, test_server_service_host_any_case_and_trailing_dot);
  tcase_add_test(tc, test_server_dns_zone_option);
  tcase_add_test(tc, test_server_request_read_as_protobuf);
  tcase_add_test(tc, test_server_second_request_ends_invalid_argument);
  tcase_add_test(tc, test_server_half_close_keeps_stream_open);
  tcase_add_test(tc, test_server_nothing_before_the_request);
  suite_add_tcase(s, tc);
  tc = tcase_create("server_updates");
  tcase_add_test(tc, test_server_absent_service_gets_no_endpoints_false_at_once);
  tcase_add_test(tc, test_server_existing_empty_service_gets_no_endpoints_true);
  tcase_add_test(tc, test_server_first_add_lists_every_address_with_metric_labels);
  tcase_add_test(tc, test_server_new_endpoints_add_exactly_the_new);
  tcase_add_test(tc, test_server_vanished_endpoints_remove_exactly_those);
  tcase_add_test(tc, test_server_ipv6_endpoints_use_first_last_and_remove_by_name);
  tcase_add_test(tc, test_server_view_items_breaking_the_contract_are_skipped);
  tcase_add_test(tc, test_server_changed_body_is_sent_again_in_an_add);
  tcase_add_test(tc, test_server_change_leaving_the_set_as_it_was_sends_nothing);
  tcase_add_test(tc, test_server_empty_or_absent_and_back_within_window_sends_nothing);
  tcase_add_test(tc, test_server_add_then_remove_never_empty_in_between);
  tcase_add_test(tc, test_server_last_vanishing_gives_no_endpoints_true);
  tcase_add_test(tc, test_server_service_deleted_gives_no_endpoints_false);
  tcase_add_test(tc, test_server_service_back_after_deletion_gets_add_of_all);
  tcase_add_test(tc, test_server_deleted_and_back_within_window_sends_the_difference);
  tcase_add_test(tc, test_server_debounce_coalesces_changes);
  tcase_add_test(tc, test_server_debounce_without_max_delay_is_bounded_by_default);
  tcase_add_test(tc, test_server_heartbeat_is_empty_add_after_quiet_period);
  tcase_add_test(tc, test_server_heartbeat_of_absent_service_repeats_no_endpoints_false);
  tcase_add_test(tc, test_server_heartbeat_zero_is_off);
  tcase_add_test(tc, test_server_heartbeat_default_is_10s);
  tcase_add_test(tc, test_server_resync_when_change_log_no_longer_reaches);
  tcase_add_test(tc, test_server_stats_and_service_def);
  tcase_add_test(tc, test_server_allocation_failures_are_errors_not_leaks);
  suite_add_tcase(s, tc);
  tc = tcase_create("client");
  tcase_add_test(tc, test_client_sends_destination_then_half_closes);
  tcase_add_test(tc, test_client_applies_add_remove_no_endpoints_in_any_order);
  tcase_add_test(tc, test_client_keeps_stale_set_until_first_message_of_new_stream);
  tcase_add_test(tc, test_client_malformed_update_ends_stream_and_keeps_set);
  tcase_add_test(tc, test_client_bad_address_mid_stream_changes_nothing);
  tcase_add_test(tc, test_client_update_without_member_is_ignored);
  tcase_add_test(tc, test_client_refuses_bad_options);
  tcase_add_test(tc, test_client_allocation_failures_change_nothing);
  tcase_add_test(tc, test_client_and_server_converge_on_the_view);
  tcase_add_test(tc, test_dest_agent_reconnects_each_authority_by_the_core_policy);
  tcase_add_test(tc, test_dest_agent_refuses_bad_options);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
