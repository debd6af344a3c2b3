/*
 * MCP over xDS (core/xds/xds_*.c, mcp/xds.h): one test per rule of issue
 * 22, on the engine's fake time. Requests are built by a test-side encoder
 * from structs; responses are read field by field here and each resource's
 * Any value is decoded with protobuf-c's istio.mcp.v1alpha1.Resource (an
 * implementation independent of the core's framing).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"
#include "mcp/xds.h"

#define MS MCP_MILLISECONDS
#define VS "networking.istio.io/v1alpha3/VirtualService"
#define VS_V1 "networking.istio.io/v1/VirtualService"
#define VS_COLL "istio/networking/v1alpha3/virtualservices"
#define AP "security.istio.io/v1beta1/AuthorizationPolicy"
#define AP_COLL "istio/security/v1beta1/authorizationpolicies"
#define MESH "mesh.istio.io/v1alpha1/MeshConfig"

/* ---- a test-side protobuf writer ---- */

typedef struct wbuf {
  uint8_t *p;
  size_t len, cap;
} wbuf;

static void w_bytes(wbuf *b, const void *p, size_t n) {
  if (b->len + n > b->cap) {
    b->cap = (b->len + n) * 2 + 16;
    b->p = realloc(b->p, b->cap);
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
}
static void w_varint(wbuf *b, uint64_t v) {
  uint8_t t[10];
  size_t n = 0;
  while (v >= 0x80) {
    t[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  t[n++] = (uint8_t)v;
  w_bytes(b, t, n);
}
static void w_len(wbuf *b, uint32_t f, const void *p, size_t n) {
  w_varint(b, (uint64_t)f << 3 | 2);
  w_varint(b, n);
  w_bytes(b, p, n);
}
static void w_str(wbuf *b, uint32_t f, const char *s) {
  if (s) {
    w_len(b, f, s, strlen(s));
  }
}
static void w_sub(wbuf *b, uint32_t f, wbuf *sub) {
  w_len(b, f, sub->p, sub->len);
  free(sub->p);
  memset(sub, 0, sizeof(*sub));
}

/* A request as a struct. */
typedef struct req {
  const char *type_url, *nonce, *version;
  const char *node_id;
  const char *const *names; /* SotW resource_names; delta subscribe */
  size_t nnames;
  const char *const *unsub;
  size_t nunsub;
  const char *const *iv; /* name, version pairs */
  size_t niv;
  int nack;
  const char *nack_msg;
} req;

static void encode_node(wbuf *b, uint32_t f, const char *id) {
  wbuf n = {0}, md = {0}, e = {0}, v = {0};
  w_str(&n, 1, id);
  /* metadata {GENERATOR: "api", ISTIO_VERSION: "1.22.0", N: 3} */
  const char *keys[] = {"GENERATOR", "ISTIO_VERSION"};
  const char *vals[] = {"api", "1.22.0"};
  for (int i = 0; i < 2; i++) {
    w_str(&v, 3, vals[i]);
    w_str(&e, 1, keys[i]);
    w_sub(&e, 2, &v);
    w_sub(&md, 1, &e);
  }
  double three = 3;
  uint8_t d[9] = {2 << 3 | 1};
  memcpy(d + 1, &three, 8);
  w_bytes(&v, d, 9);
  w_str(&e, 1, "N");
  w_sub(&e, 2, &v);
  w_sub(&md, 1, &e);
  w_sub(&n, 3, &md);
  w_sub(b, f, &n);
}

static void send_req(mcp_stream *st, int delta, const req *r, mcp_tstamp ts) {
  wbuf b = {0};
  if (r->node_id) {
    encode_node(&b, delta ? 1 : 2, r->node_id);
  }
  w_str(&b, delta ? 2 : 4, r->type_url);
  w_str(&b, delta ? 6 : 5, r->nonce);
  if (!delta) {
    w_str(&b, 1, r->version);
  }
  for (size_t i = 0; i < r->nnames; i++) {
    w_str(&b, 3, r->names[i]);
  }
  for (size_t i = 0; i < r->nunsub; i++) {
    w_str(&b, 4, r->unsub[i]);
  }
  for (size_t i = 0; i < r->niv; i++) {
    wbuf e = {0};
    w_str(&e, 1, r->iv[2 * i]);
    w_str(&e, 2, r->iv[2 * i + 1]);
    w_sub(&b, 5, &e);
  }
  if (r->nack) {
    wbuf s = {0};
    w_varint(&s, 1 << 3);
    w_varint(&s, 3);
    w_str(&s, 2, r->nack_msg ? r->nack_msg : "bad");
    w_sub(&b, delta ? 7 : 6, &s);
  }
  mcp_stream_recv(st, b.p ? b.p : (uint8_t *)"", b.len, ts);
  free(b.p);
}

/* ---- reading responses ---- */

typedef struct res {
  char *name;     /* metadata.name (SotW) or Resource.name (delta) */
  char *version;  /* metadata.version */
  char *body_type;
  char *md_name;  /* metadata.name of the Any's Resource (raw: the body) */
  int raw;        /* the Any is no Resource */
} res;

typedef struct resp {
  char *version, *type_url, *nonce;
  res r[64];
  size_t n;
  char *removed[64];
  size_t nremoved;
} resp;

static char *dupn(const uint8_t *p, size_t n) {
  char *s = malloc(n + 1);
  memcpy(s, p, n);
  s[n] = '\0';
  return s;
}

static uint64_t r_varint(const uint8_t **p, const uint8_t *end) {
  uint64_t v = 0;
  for (unsigned sh = 0; *p < end; sh += 7) {
    uint8_t c = *(*p)++;
    v |= (uint64_t)(c & 0x7f) << sh;
    if (!(c & 0x80)) {
      return v;
    }
  }
  ck_abort_msg("truncated varint");
  return 0;
}

/* Calls |fn| for each LEN field; other wire types are skipped. */
static void each_len(const uint8_t *p, size_t n,
                     void (*fn)(uint32_t f, const uint8_t *d, size_t n,
                                void *ud),
                     void *ud) {
  const uint8_t *end = p + n;
  while (p < end) {
    uint64_t key = r_varint(&p, end);
    switch (key & 7) {
    case 0:
      r_varint(&p, end);
      break;
    case 1:
      p += 8;
      break;
    case 5:
      p += 4;
      break;
    case 2: {
      uint64_t l = r_varint(&p, end);
      ck_assert_uint_le(l, (size_t)(end - p));
      fn((uint32_t)(key >> 3), p, (size_t)l, ud);
      p += l;
      break;
    }
    default:
      ck_abort_msg("bad wire type");
    }
  }
}

static void any_fn(uint32_t f, const uint8_t *d, size_t n, void *ud) {
  res *r = ud;
  if (f == 1) {
    char *t = dupn(d, n);
    r->raw = strcmp(t, MCP_XDS_RESOURCE_TYPE_URL) != 0;
    if (r->raw) {
      r->body_type = t; /* a body sent as itself (MeshConfig) */
    } else {
      free(t);
    }
  } else if (f == 2 && r->raw) {
    r->md_name = dupn(d, n); /* the body's bytes */
  } else if (f == 2) {
    Istio__Mcp__V1alpha1__Resource *m =
        istio__mcp__v1alpha1__resource__unpack(NULL, n, d);
    ck_assert_msg(m != NULL, "the Any's value is no Resource");
    ck_assert_ptr_nonnull(m->metadata);
    r->md_name = strdup(m->metadata->name);
    if (!r->version) {
      r->version = strdup(m->metadata->version);
    }
    r->body_type = strdup(m->body ? m->body->type_url : "");
    istio__mcp__v1alpha1__resource__free_unpacked(m, NULL);
  }
}

static void dres_fn(uint32_t f, const uint8_t *d, size_t n, void *ud) {
  res *r = ud;
  if (f == 3) {
    r->name = dupn(d, n);
  } else if (f == 1) {
    r->version = dupn(d, n);
  } else if (f == 2) {
    each_len(d, n, any_fn, r);
  }
}

typedef struct rctx {
  resp *r;
  int delta;
} rctx;

static void resp_fn(uint32_t f, const uint8_t *d, size_t n, void *ud) {
  rctx *c = ud;
  resp *r = c->r;
  if (f == 1) {
    r->version = dupn(d, n);
  } else if (f == 4) {
    r->type_url = dupn(d, n);
  } else if (f == 5) {
    r->nonce = dupn(d, n);
  } else if (f == 6 && c->delta) {
    ck_assert_uint_lt(r->nremoved, 64);
    r->removed[r->nremoved++] = dupn(d, n);
  } else if (f == 2) {
    ck_assert_uint_lt(r->n, 64);
    res *x = &r->r[r->n++];
    if (c->delta) {
      each_len(d, n, dres_fn, x);
    } else {
      each_len(d, n, any_fn, x);
      x->name = strdup(x->raw ? "" : x->md_name);
    }
    if (!x->raw) {
      ck_assert_str_eq(x->name, x->md_name);
    }
  }
}

static void resp_free(resp *r) {
  if (!r) {
    return;
  }
  free(r->version);
  free(r->type_url);
  free(r->nonce);
  for (size_t i = 0; i < r->n; i++) {
    free(r->r[i].name);
    free(r->r[i].version);
    free(r->r[i].body_type);
    free(r->r[i].md_name);
  }
  for (size_t i = 0; i < r->nremoved; i++) {
    free(r->removed[i]);
  }
  free(r);
}

/* One pump; the response sent, or NULL (then *action, *status). */
static resp *pump_ex(mcp_stream *st, int delta, mcp_tstamp ts, int *action,
                     int *status, const char **details) {
  mcp_msg *msg = NULL;
  int stt = -1;
  const char *d = NULL;
  mcp_stream_action a = mcp_stream_pump(st, ts, 1, &msg, &stt, &d);
  if (action) {
    *action = (int)a;
  }
  if (status) {
    *status = stt;
  }
  if (details) {
    *details = d;
  }
  if (a != MCP_STREAM_SEND) {
    return NULL;
  }
  size_t len = mcp_msg_len(msg);
  uint8_t *flat = malloc(len ? len : 1);
  mcp_msg_flatten(msg, flat);
  mcp_msg_free(msg);
  resp *r = calloc(1, sizeof(*r));
  rctx c = {r, delta};
  each_len(flat, len, resp_fn, &c);
  free(flat);
  ck_assert_ptr_nonnull(r->nonce);
  ck_assert_ptr_nonnull(r->type_url);
  return r;
}

static resp *pump(mcp_stream *st, int delta, mcp_tstamp ts) {
  int a;
  resp *r = pump_ex(st, delta, ts, &a, NULL, NULL);
  ck_assert_msg(r != NULL, "no response (action %d)", a);
  return r;
}

/* Sends |r| at time 0 and returns the response it gets. */
static resp *ask(mcp_stream *st, int delta, const req *r) {
  send_req(st, delta, r, 0);
  return pump(st, delta, 0);
}

static void pump_idle(mcp_stream *st, int delta, mcp_tstamp ts) {
  int a;
  resp *r = pump_ex(st, delta, ts, &a, NULL, NULL);
  ck_assert_msg(r == NULL, "unexpected response for %s",
                r ? r->type_url : "");
  ck_assert_int_eq(a, MCP_STREAM_IDLE);
}

static void pump_end(mcp_stream *st, int delta, mcp_tstamp ts, int status) {
  int a, s;
  resp *r = pump_ex(st, delta, ts, &a, &s, NULL);
  ck_assert_msg(r == NULL, "unexpected response");
  ck_assert_int_eq(a, MCP_STREAM_END);
  ck_assert_int_eq(s, status);
}

static const res *find(const resp *r, const char *name) {
  for (size_t i = 0; i < r->n; i++) {
    if (!strcmp(r->r[i].name, name)) {
      return &r->r[i];
    }
  }
  return NULL;
}

static int removed(const resp *r, const char *name) {
  for (size_t i = 0; i < r->nremoved; i++) {
    if (!strcmp(r->removed[i], name)) {
      return 1;
    }
  }
  return 0;
}

/* ---- fixtures ---- */

static void put_vs(mcp_store *s, const char *name, const char *body,
                   mcp_tstamp ts) {
  mcp_resource r = th_res(name, NULL, body);
  r.type_url = "type.googleapis.com/istio.networking.v1alpha3.VirtualService";
  ck_assert_int_ge(mcp_store_upsert(s, VS_COLL, &r, ts), 0);
}

typedef struct events {
  int nacks, unknown, refused, stale;
  char last_nack[128];
  char node[64];
} events;

static void on_event(const mcp_xds_event *ev, void *ud) {
  events *e = ud;
  snprintf(e->node, sizeof(e->node), "%s", ev->node_id);
  switch (ev->kind) {
  case MCP_XDS_EVENT_NACK:
    e->nacks++;
    snprintf(e->last_nack, sizeof(e->last_nack), "%s %s", ev->version,
             ev->message);
    break;
  case MCP_XDS_EVENT_UNKNOWN_TYPE:
    e->unknown++;
    break;
  case MCP_XDS_EVENT_REFUSED:
    e->refused++;
    break;
  case MCP_XDS_EVENT_STALE:
    e->stale++;
    break;
  }
}

static events ev;

static mcp_xds_server *server(mcp_store *s, mcp_tstamp debounce,
                              const char *require) {
  memset(&ev, 0, sizeof(ev));
  mcp_xds_server_options o;
  mcp_xds_server_options_default(&o);
  o.store = s;
  o.debounce = debounce;
  o.max_delay = debounce ? 10 * debounce : 0;
  o.require_identity = require;
  o.on_event = on_event;
  o.user_data = &ev;
  mcp_xds_server *srv = NULL;
  ck_assert_int_eq(mcp_xds_server_new(&srv, &o), 0);
  return srv;
}

static mcp_stream *open_st(mcp_xds_server *srv, int delta, mcp_tstamp ts) {
  mcp_stream *st = NULL;
  ck_assert_int_eq(mcp_xds_server_open(srv, delta, NULL, ts, &st), 0);
  return st;
}

/* A store with two VirtualServices: ns/a and the bare b. */
static mcp_store *store2(void) {
  mcp_store *s = th_store(NULL);
  put_vs(s, "ns/a", "A1", 0);
  put_vs(s, "b", "B1", 0);
  return s;
}

/* The fixture of most tests: store2(), a server without debounce, one
 * stream; and its teardown. */
#define FX(DELTA)                                                            \
  mcp_store *s = store2();                                                   \
  mcp_xds_server *srv = server(s, 0, NULL);                                  \
  mcp_stream *st = open_st(srv, (DELTA), 0)
#define FX_END()                                                             \
  do {                                                                       \
    mcp_stream_del(st);                                                      \
    mcp_xds_server_del(srv);                                                 \
    mcp_store_del(s);                                                        \
  } while (0)


/* ---- names ---- */

START_TEST(test_gvk_maps_to_the_loaders_collection_with_version_aliases) {
  char buf[128];
  ck_assert_int_gt(mcp_collection_for_gvk(VS, buf, sizeof buf), 0);
  ck_assert_str_eq(buf, VS_COLL);
  ck_assert_int_gt(mcp_collection_for_gvk(VS_V1, buf, sizeof buf), 0);
  ck_assert_str_eq(buf, VS_COLL);
  ck_assert_int_gt(mcp_collection_for_gvk(
                       "networking.istio.io/v1beta1/DestinationRule", buf,
                       sizeof buf),
                   0);
  ck_assert_str_eq(buf, "istio/networking/v1alpha3/destinationrules");
  ck_assert_int_gt(mcp_collection_for_gvk(
                       "security.istio.io/v1/AuthorizationPolicy", buf,
                       sizeof buf),
                   0);
  ck_assert_str_eq(buf, AP_COLL);
  /* ProxyConfig exists only in v1beta1: no alias. */
  ck_assert_int_gt(mcp_collection_for_gvk(
                       "networking.istio.io/v1beta1/ProxyConfig", buf,
                       sizeof buf),
                   0);
  ck_assert_str_eq(buf, "istio/networking/v1beta1/proxyconfigs");
  ck_assert_int_gt(mcp_collection_for_gvk(MESH, buf, sizeof buf), 0);
  ck_assert_str_eq(buf, "istio/mesh/v1alpha1/meshconfigs");
  ck_assert_int_gt(mcp_collection_for_gvk("core/v1/ConfigMap", buf,
                                          sizeof buf),
                   0);
  ck_assert_str_eq(buf, "k8s/core/v1/configmaps");
  ck_assert_int_gt(mcp_collection_for_gvk("apps/v1/Deployment", buf,
                                          sizeof buf),
                   0);
  ck_assert_str_eq(buf, "k8s/apps/v1/deployments");
  /* The length is returned also when it does not fit. */
  ck_assert_int_eq(mcp_collection_for_gvk(VS, NULL, 0),
                   (int)strlen(VS_COLL));
  ck_assert_int_eq(mcp_collection_for_gvk(
                       "type.googleapis.com/envoy.config.cluster.v3.Cluster",
                       buf, sizeof buf),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_collection_for_gvk("a/b/c/d", buf, sizeof buf),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_collection_for_gvk("a/b c/K", buf, sizeof buf),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_collection_for_gvk("a/v1/", buf, sizeof buf),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(mcp_kind_canonical_api_version("networking.istio.io/v1",
                                                  "Gateway"),
                   "networking.istio.io/v1alpha3");
  ck_assert_str_eq(mcp_kind_canonical_api_version("apps/v1", "Deployment"),
                   "apps/v1");
}
END_TEST

START_TEST(test_identity_pattern_globs) {
  ck_assert(mcp_xds_identity_match(
      "spiffe://cluster.local/ns/istio-system/sa/*",
      "spiffe://cluster.local/ns/istio-system/sa/istiod"));
  ck_assert(!mcp_xds_identity_match(
      "spiffe://cluster.local/ns/istio-system/sa/*",
      "spiffe://cluster.local/ns/default/sa/istiod"));
  ck_assert(mcp_xds_identity_match("*", "anything"));
  ck_assert(mcp_xds_identity_match("a*b*c", "axxbyyc"));
  ck_assert(!mcp_xds_identity_match("a*b*c", "axxbyy"));
  ck_assert(mcp_xds_identity_match("exact", "exact"));
  ck_assert(!mcp_xds_identity_match("exact", "exactly"));
}
END_TEST

/* ---- state of the world ---- */

START_TEST(test_sotw_first_request_answered_whatever_its_nonce) {
  FX(0);
  pump_idle(st, 0, 0);
  /* adsc's initial requests carry a timestamp the server never issued. */
  req r = {.type_url = VS, .nonce = "2026-11-27 16:00:00.123", .node_id =
                                                                  "istiod-1"};
  send_req(st, 0, &r, 0);
  resp *p = pump(st, 0, 0);
  ck_assert_str_eq(p->type_url, VS);
  ck_assert_uint_eq(p->n, 2);
  ck_assert_ptr_nonnull(find(p, "ns/a"));
  /* A bare store name goes out as "/name", in the Resource too. */
  const res *b = find(p, "/b");
  ck_assert_ptr_nonnull(b);
  ck_assert_str_eq(b->body_type,
                   "type.googleapis.com/istio.networking.v1alpha3."
                   "VirtualService");
  ck_assert_str_eq(ev.node, "");
  mcp_xds_stream_info info;
  mcp_xds_stream_info_get(st, &info);
  ck_assert_str_eq(info.node_id, "istiod-1");
  ck_assert_uint_eq(info.nnode_metadata, 3);
  ck_assert_str_eq(info.node_metadata[0].key, "GENERATOR");
  ck_assert_str_eq(info.node_metadata[0].value, "api");
  ck_assert_str_eq(info.node_metadata[2].value, "3");
  resp_free(p);
  pump_idle(st, 0, 0);
  FX_END();
}
END_TEST

START_TEST(test_sotw_every_type_answered_even_unknown_or_empty) {
  FX(0);
  const char *types[] = {VS, AP, MESH,
                         "type.googleapis.com/envoy.config.cluster.v3.Cluster"};
  for (int i = 0; i < 4; i++) {
    req r = {.type_url = types[i]};
    send_req(st, 0, &r, 0);
  }
  int seen[4] = {0};
  for (int i = 0; i < 4; i++) {
    resp *p = pump(st, 0, 0);
    for (int k = 0; k < 4; k++) {
      if (!strcmp(p->type_url, types[k])) {
        seen[k]++;
        ck_assert_uint_eq(p->n, k == 0 ? 2 : 0);
      }
    }
    resp_free(p);
  }
  ck_assert(seen[0] == 1 && seen[1] == 1 && seen[2] == 1 && seen[3] == 1);
  ck_assert_int_eq(ev.unknown, 1);
  pump_idle(st, 0, 0);
  FX_END();
}
END_TEST

/* Admission's initial-sync slot (engine.h, MCP_DEF_INITIAL_SYNC): both
 * ADS methods ask for one, and a stream gives it back once every type it
 * asked for (an unknown one too) had its first answer taken, in either
 * mode; a stream that asked nothing keeps it. */
START_TEST(test_initial_sync_ends_with_the_first_answer_of_every_type) {
  for (int delta = 0; delta < 2; delta++) {
    FX(delta);
    const mcp_service_def *defs;
    ck_assert_uint_eq(mcp_xds_server_services(srv, &defs), 2);
    ck_assert_uint_eq(defs[delta].flags, MCP_DEF_INITIAL_SYNC);
    pump_idle(st, delta, 0);
    ck_assert_int_eq(mcp_stream_initial_sent(st, 0), 0); /* asked nothing */
    const char *types[] = {VS,
                           "type.googleapis.com/envoy.config.cluster.v3."
                           "Cluster"};
    for (int i = 0; i < 2; i++) {
      req r = {.type_url = types[i]};
      send_req(st, delta, &r, 0);
    }
    ck_assert_int_eq(mcp_stream_initial_sent(st, 0), 0); /* none taken */
    resp_free(pump(st, delta, 0));
    ck_assert_int_eq(mcp_stream_initial_sent(st, 0), 0); /* one of two */
    resp_free(pump(st, delta, 0));
    ck_assert_int_eq(mcp_stream_initial_sent(st, 0), 1);
    /* A type asked for later is a sync of its own until answered. */
    req r = {.type_url = AP};
    send_req(st, delta, &r, 0);
    ck_assert_int_eq(mcp_stream_initial_sent(st, 0), 0);
    resp_free(pump(st, delta, 0));
    ck_assert_int_eq(mcp_stream_initial_sent(st, 0), 1);
    FX_END();
  }
}
END_TEST

/* istiod's apigen sends the MeshConfig as its own Any, and adsc reads
 * Resources[0].Value as a MeshConfig: no Resource around it. */
START_TEST(test_meshconfig_is_sent_as_its_body) {
  mcp_store *s = th_store(NULL);
  mcp_resource r = th_res("istio-system/mesh", NULL, "MESH");
  r.type_url = "type.googleapis.com/istio.mesh.v1alpha1.MeshConfig";
  ck_assert_int_ge(
      mcp_store_upsert(s, "istio/mesh/v1alpha1/meshconfigs", &r, 0), 0);
  mcp_xds_server *srv = server(s, 0, NULL);
  for (int delta = 0; delta < 2; delta++) {
    mcp_stream *st = open_st(srv, delta, 0);
    req q = {.type_url = MESH};
    send_req(st, delta, &q, 0);
    resp *p = pump(st, delta, 0);
    ck_assert_uint_eq(p->n, 1);
    ck_assert_int_eq(p->r[0].raw, 1);
    ck_assert_str_eq(p->r[0].body_type, r.type_url);
    ck_assert_str_eq(p->r[0].md_name, "MESH");
    if (delta) {
      ck_assert_str_eq(p->r[0].name, "istio-system/mesh");
    }
    resp_free(p);
    mcp_stream_del(st);
  }
  mcp_xds_server_del(srv);
  mcp_store_del(s);
}
END_TEST

START_TEST(test_sotw_both_version_spellings_see_the_same_resources) {
  FX(0);
  req r1 = {.type_url = VS}, r2 = {.type_url = VS_V1};
  send_req(st, 0, &r1, 0);
  send_req(st, 0, &r2, 0);
  resp *a = pump(st, 0, 0), *b = pump(st, 0, 0);
  ck_assert_str_eq(a->type_url, VS);
  ck_assert_str_eq(b->type_url, VS_V1); /* the one requested */
  ck_assert_uint_eq(a->n, 2);
  ck_assert_uint_eq(b->n, 2);
  /* The body stays the type the document was parsed as. */
  ck_assert_str_eq(find(b, "ns/a")->body_type,
                   "type.googleapis.com/istio.networking.v1alpha3."
                   "VirtualService");
  resp_free(a);
  resp_free(b);
  FX_END();
}
END_TEST

START_TEST(test_sotw_ack_then_change_pushes_full_state_once) {
  FX(0);
  req r = {.type_url = VS};
  resp *p = ask(st, 0, &r);
  /* One response in flight: a change waits for the ACK. */
  put_vs(s, "ns/c", "C1", 1 * MS);
  pump_idle(st, 0, 1 * MS);
  req ack = {.type_url = VS, .nonce = p->nonce, .version = p->version};
  send_req(st, 0, &ack, 2 * MS);
  resp *q = pump(st, 0, 2 * MS);
  ck_assert_uint_eq(q->n, 3); /* the complete set */
  ck_assert_str_ne(q->version, p->version);
  ck_assert_str_ne(q->nonce, p->nonce);
  /* The same content again is no change. */
  req ack2 = {.type_url = VS, .nonce = q->nonce, .version = q->version};
  send_req(st, 0, &ack2, 3 * MS);
  put_vs(s, "ns/c", "C1", 3 * MS);
  pump_idle(st, 0, 3 * MS);
  mcp_xds_type_info ti;
  ck_assert_int_eq(mcp_xds_stream_type_get(st, 0, &ti), 0);
  ck_assert_str_eq(ti.version_acked, q->version);
  ck_assert_str_eq(ti.collection, VS_COLL);
  ck_assert_str_eq(ti.pending_nonce, "");
  ck_assert_int_eq(mcp_xds_stream_type_get(st, 1, &ti), MCP_ERR_NOT_FOUND);
  mcp_xds_server_stats ss;
  mcp_xds_server_get_stats(srv, &ss);
  ck_assert_uint_eq(ss.acks, 2);
  ck_assert_uint_eq(ss.responses, 2);
  resp_free(p);
  resp_free(q);
  FX_END();
}
END_TEST

START_TEST(test_sotw_nack_never_resends_the_same_version) {
  FX(0);
  req r = {.type_url = VS};
  resp *p = ask(st, 0, &r);
  req nack = {.type_url = VS, .nonce = p->nonce, .nack = 1,
              .nack_msg = "cannot decode"};
  send_req(st, 0, &nack, 1 * MS);
  pump_idle(st, 0, 1 * MS);
  pump_idle(st, 0, 1000 * MS);
  ck_assert_int_eq(ev.nacks, 1);
  char want[128];
  snprintf(want, sizeof want, "%s cannot decode", p->version);
  ck_assert_str_eq(ev.last_nack, want);
  mcp_xds_type_info ti;
  mcp_xds_stream_type_get(st, 0, &ti);
  ck_assert_uint_eq(ti.nacks, 1);
  ck_assert_str_eq(ti.last_nack, "cannot decode");
  ck_assert_str_eq(ti.version_acked, "");
  /* A change is pushed again: the stream keeps serving. */
  put_vs(s, "ns/a", "A2", 1001 * MS);
  resp *q = pump(st, 0, 1001 * MS);
  ck_assert_uint_eq(q->n, 2);
  ck_assert_str_ne(q->version, p->version);
  resp_free(p);
  resp_free(q);
  FX_END();
}
END_TEST

START_TEST(test_sotw_stale_nonce_ignored_and_counted) {
  FX(0);
  req r = {.type_url = VS};
  resp *p = ask(st, 0, &r);
  put_vs(s, "ns/c", "C1", 1 * MS);
  req stale = {.type_url = VS, .nonce = "999"};
  send_req(st, 0, &stale, 1 * MS);
  pump_idle(st, 0, 1 * MS); /* still waiting for p's answer */
  req stale_nack = {.type_url = VS, .nonce = "998", .nack = 1};
  send_req(st, 0, &stale_nack, 1 * MS);
  pump_idle(st, 0, 1 * MS);
  ck_assert_int_eq(ev.stale, 2);
  ck_assert_int_eq(ev.nacks, 0);
  req ack = {.type_url = VS, .nonce = p->nonce};
  send_req(st, 0, &ack, 2 * MS);
  resp *q = pump(st, 0, 2 * MS);
  ck_assert_uint_eq(q->n, 3);
  resp_free(p);
  resp_free(q);
  FX_END();
}
END_TEST

START_TEST(test_sotw_resource_names_filter_and_wildcard) {
  FX(0);
  /* The bare store name "b" is "/b" in xDS: "b" names nothing. */
  const char *names[] = {"/b", "ns/missing", "b"};
  req r = {.type_url = VS, .names = names, .nnames = 3};
  send_req(st, 0, &r, 0);
  resp *p = pump(st, 0, 0);
  ck_assert_uint_eq(p->n, 1);
  ck_assert_ptr_nonnull(find(p, "/b"));
  /* An ACK that widens to the wildcard gets the whole set. */
  req ack = {.type_url = VS, .nonce = p->nonce};
  send_req(st, 0, &ack, 1 * MS);
  resp *q = pump(st, 0, 1 * MS);
  ck_assert_uint_eq(q->n, 2);
  resp_free(p);
  resp_free(q);
  FX_END();
}
END_TEST

START_TEST(test_sotw_shared_state_let_go_when_its_last_stream_leaves) {
  mcp_store *s = store2();
  th_mem tm;
  th_mem_init(&tm, 0);
  mcp_xds_server_options o;
  mcp_xds_server_options_default(&o);
  o.store = s;
  o.mem = &tm.mem;
  mcp_xds_server *srv = NULL;
  ck_assert_int_eq(mcp_xds_server_new(&srv, &o), 0);
  long base = tm.live;
  mcp_stream *a = open_st(srv, 0, 0), *b = open_st(srv, 0, 0);
  req r = {.type_url = VS};
  resp *p = ask(a, 0, &r), *q = ask(b, 0, &r);
  ck_assert_uint_eq(p->n, 2);
  ck_assert_uint_eq(q->n, 2);
  mcp_stream_del(a);
  long one_left = tm.live;
  mcp_stream_del(b);
  /* The framed state (and the Resources it holds) went with the last
   * stream; the cache keeps only its entry: the array and the name. */
  ck_assert_int_eq(tm.live, base + 2);
  ck_assert_int_lt(tm.live, one_left);
  /* A new stream frames it again, from the store as it is now. */
  put_vs(s, "ns/a", "A2", 1 * MS);
  mcp_stream *c = open_st(srv, 0, 1 * MS);
  send_req(c, 0, &r, 1 * MS);
  resp *x = pump(c, 0, 1 * MS);
  ck_assert_uint_eq(x->n, 2);
  ck_assert_str_ne(x->version, p->version);
  mcp_stream_del(c);
  ck_assert_int_eq(tm.live, base + 2);
  resp_free(p);
  resp_free(q);
  resp_free(x);
  mcp_xds_server_del(srv);
  ck_assert_int_eq(tm.live, 0);
  mcp_store_del(s);
}
END_TEST

START_TEST(test_sotw_changes_coalesce_within_debounce) {
  mcp_store *s = store2();
  mcp_xds_server *srv = server(s, 100 * MS, NULL);
  mcp_stream *st = open_st(srv, 0, 0);
  req r = {.type_url = VS};
  send_req(st, 0, &r, 0);
  resp *p = pump(st, 0, 0); /* the first answer is never delayed */
  req ack = {.type_url = VS, .nonce = p->nonce};
  send_req(st, 0, &ack, 0);
  put_vs(s, "ns/c", "C1", 10 * MS);
  pump_idle(st, 0, 10 * MS);
  put_vs(s, "ns/d", "D1", 50 * MS);
  pump_idle(st, 0, 50 * MS);
  ck_assert_uint_eq(mcp_stream_get_expiry(st), 150 * MS);
  resp *q = pump(st, 0, 150 * MS);
  ck_assert_uint_eq(q->n, 4);
  resp_free(p);
  resp_free(q);
  FX_END();
}
END_TEST

START_TEST(test_sotw_resubscribe_with_empty_nonce_gets_full_state) {
  FX(0);
  req r = {.type_url = VS};
  resp *p = ask(st, 0, &r);
  send_req(st, 0, &r, 1 * MS);
  resp *q = pump(st, 0, 1 * MS);
  ck_assert_uint_eq(q->n, 2);
  resp_free(p);
  resp_free(q);
  FX_END();
}
END_TEST

START_TEST(test_bad_requests_end_the_stream_invalid_argument) {
  mcp_store *s = store2();
  mcp_xds_server *srv = server(s, 0, NULL);
  for (int delta = 0; delta < 2; delta++) {
    /* No type_url. */
    mcp_stream *st = open_st(srv, delta, 0);
    req r = {.nonce = "1"};
    send_req(st, delta, &r, 0);
    pump_end(st, delta, 0, 3);
    mcp_stream_del(st);
    /* A name that is not UTF-8. */
    st = open_st(srv, delta, 0);
    const char *bad[] = {"ns/\xff\xfe"};
    req r2 = {.type_url = VS, .names = bad, .nnames = 1};
    send_req(st, delta, &r2, 0);
    pump_end(st, delta, 0, 3);
    mcp_stream_del(st);
    /* Bytes that are no protobuf. */
    st = open_st(srv, delta, 0);
    mcp_stream_recv(st, (const uint8_t *)"\xff\xff\xff", 3, 0);
    pump_end(st, delta, 0, 3);
    mcp_stream_del(st);
    /* A type URL that is not UTF-8. */
    st = open_st(srv, delta, 0);
    req r3 = {.type_url = "networking.istio.io/v1/\xc0\xaf"};
    send_req(st, delta, &r3, 0);
    pump_end(st, delta, 0, 3);
    mcp_stream_del(st);
  }
  mcp_xds_server_stats ss;
  mcp_xds_server_get_stats(srv, &ss);
  ck_assert_uint_eq(ss.invalid, 8);
  ck_assert_uint_eq(ss.active, 0);
  mcp_xds_server_del(srv);
  mcp_store_del(s);
}
END_TEST

/* |b| (taken) as the one request of a new stream, which ends with
 * |status| and sends nothing. */
static void ends_with(mcp_xds_server *srv, int delta, wbuf *b, int status) {
  mcp_stream *st = open_st(srv, delta, 0);
  mcp_stream_recv(st, b->p ? b->p : (uint8_t *)"", b->len, 0);
  free(b->p);
  memset(b, 0, sizeof(*b));
  pump_end(st, delta, 0, status);
  mcp_stream_del(st);
}

START_TEST(test_each_bad_field_and_each_limit_ends_the_stream) {
  mcp_store *s = store2();
  mcp_xds_server *srv = server(s, 0, NULL);
  char big[MCP_XDS_MAX_STRING + 2];
  memset(big, 'n', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  uint64_t invalid = 0;
  for (int delta = 0; delta < 2; delta++) {
    const uint32_t f_node = delta ? 1 : 2, f_type = delta ? 2 : 4,
                   f_nonce = delta ? 6 : 5, f_err = delta ? 7 : 6;
    wbuf b = {0}, sub = {0};
    /* response_nonce not UTF-8. */
    w_str(&b, f_type, VS);
    w_str(&b, f_nonce, "1\xff");
    ends_with(srv, delta, &b, 3);
    /* A resource name one byte too long. */
    w_str(&b, f_type, VS);
    w_str(&b, 3, big);
    ends_with(srv, delta, &b, 3);
    /* A type URL one byte too long. */
    w_str(&b, f_type, big);
    ends_with(srv, delta, &b, 3);
    /* error_detail.message not UTF-8. */
    w_str(&sub, 2, "bad \xc3");
    w_str(&b, f_type, VS);
    w_sub(&b, f_err, &sub);
    ends_with(srv, delta, &b, 3);
    /* A node whose id is not UTF-8. */
    w_str(&sub, 1, "istiod\xff");
    w_str(&b, f_type, VS);
    w_sub(&b, f_node, &sub);
    ends_with(srv, delta, &b, 3);
    /* A node that does not decode (a truncated field inside). */
    w_bytes(&sub, "\x0a\x05id", 4); /* id: 5 bytes said, 2 there */
    w_str(&b, f_type, VS);
    w_sub(&b, f_node, &sub);
    ends_with(srv, delta, &b, 3);
    invalid += 6;
    if (!delta) {
      /* version_info not UTF-8. */
      w_str(&b, 4, VS);
      w_str(&b, 1, "v\xff");
      ends_with(srv, delta, &b, 3);
      invalid++;
    } else {
      /* resource_names_unsubscribe, an initial version's name, its
       * version: not UTF-8. */
      w_str(&b, 2, VS);
      w_str(&b, 4, "ns/\xfe");
      ends_with(srv, delta, &b, 3);
      for (int k = 0; k < 2; k++) {
        w_str(&sub, 1, k ? "ns/a" : "ns/\xfe");
        w_str(&sub, 2, k ? "v\xfe" : "v");
        w_str(&b, 2, VS);
        w_sub(&b, 5, &sub);
        ends_with(srv, delta, &b, 3);
      }
      invalid += 3;
    }
    /* One name more than MCP_XDS_MAX_NAMES: RESOURCE_EXHAUSTED. */
    w_str(&b, f_type, VS);
    for (size_t i = 0; i <= MCP_XDS_MAX_NAMES; i++) {
      w_str(&b, 3, "x");
    }
    ends_with(srv, delta, &b, 8);
    /* One type more than MCP_XDS_MAX_TYPES on one stream: each new type
     * is answered until the one beyond the limit ends the stream. */
    mcp_stream *st = open_st(srv, delta, 0);
    for (int i = 0; i <= MCP_XDS_MAX_TYPES; i++) {
      char url[64];
      snprintf(url, sizeof(url), "x.io/v1/Kind%d", i);
      req r = {.type_url = url};
      send_req(st, delta, &r, 0);
      if (i < MCP_XDS_MAX_TYPES) {
        resp *q = pump(st, delta, 0);
        ck_assert_str_eq(q->type_url, url);
        ck_assert_uint_eq(q->n, 0);
        resp_free(q);
      }
    }
    pump_end(st, delta, 0, 8);
    mcp_stream_del(st);
  }
  mcp_xds_server_stats ss;
  mcp_xds_server_get_stats(srv, &ss);
  ck_assert_uint_eq(ss.invalid, invalid);
  ck_assert_uint_eq(ss.active, 0);
  mcp_xds_server_del(srv);
  mcp_store_del(s);
}
END_TEST

START_TEST(test_require_identity_refuses_other_callers) {
  mcp_store *s = store2();
  mcp_xds_server *srv =
      server(s, 0, "spiffe://cluster.local/ns/istio-system/sa/*");
  mcp_stream *st = NULL;
  const char *ids[] = {"spiffe://cluster.local/ns/default/sa/app"};
  mcp_peer_info peer = {.address = "127.0.0.1:1", .tls = 1,
                        .identities = ids, .nidentities = 1};
  ck_assert_int_eq(mcp_xds_server_open(srv, 0, &peer, 0, &st), 0);
  req r = {.type_url = VS};
  send_req(st, 0, &r, 0);
  pump_end(st, 0, 0, 7); /* PERMISSION_DENIED, nothing sent */
  mcp_stream_del(st);
  ck_assert_int_eq(mcp_xds_server_open(srv, 1, NULL, 0, &st), 0);
  pump_end(st, 1, 0, 7);
  mcp_stream_del(st);
  ck_assert_int_eq(ev.refused, 2);
  const char *ok[] = {"spiffe://cluster.local/ns/istio-system/sa/istiod"};
  peer.identities = ok;
  ck_assert_int_eq(mcp_xds_server_open(srv, 0, &peer, 0, &st), 0);
  send_req(st, 0, &r, 0);
  resp *p = pump(st, 0, 0);
  ck_assert_uint_eq(p->n, 2);
  resp_free(p);
  FX_END();
}
END_TEST

START_TEST(test_services_are_both_ads_methods) {
  mcp_store *s = th_store(NULL);
  mcp_xds_server *srv = server(s, 0, NULL);
  const mcp_service_def *defs;
  ck_assert_uint_eq(mcp_xds_server_services(srv, &defs), 2);
  ck_assert_str_eq(defs[0].method, MCP_XDS_METHOD_SOTW);
  ck_assert_str_eq(defs[1].method, MCP_XDS_METHOD_DELTA);
  ck_assert_int_eq(mcp_service_defs_check(defs, 2, NULL, 0), 0);
  mcp_stream *st = NULL;
  ck_assert_int_eq(defs[1].open(defs[1].user_data, NULL, 0, &st), 0);
  ck_assert(mcp_xds_stream_is(st));
  mcp_xds_stream_info info;
  mcp_xds_stream_info_get(st, &info);
  ck_assert_int_eq(info.delta, 1);
  ck_assert_str_eq(mcp_stream_get_ops(st)->name, MCP_XDS_API_NAME);
  FX_END();
}
END_TEST

/* ---- delta ---- */

START_TEST(test_delta_wildcard_first_then_only_changes_and_removals) {
  FX(1);
  req r = {.type_url = VS, .node_id = "istiod"};
  send_req(st, 1, &r, 0);
  resp *p = pump(st, 1, 0);
  ck_assert_uint_eq(p->n, 2);
  ck_assert_ptr_nonnull(find(p, "/b"));
  ck_assert_ptr_nonnull(find(p, "ns/a")->version);
  req ack = {.type_url = VS, .nonce = p->nonce};
  send_req(st, 1, &ack, 1 * MS);
  pump_idle(st, 1, 1 * MS);
  put_vs(s, "ns/a", "A2", 2 * MS);
  ck_assert_int_eq(mcp_store_delete(s, VS_COLL, "b", 2 * MS), 1);
  resp *q = pump(st, 1, 2 * MS);
  ck_assert_uint_eq(q->n, 1);
  ck_assert_ptr_nonnull(find(q, "ns/a"));
  ck_assert_uint_eq(q->nremoved, 1);
  ck_assert(removed(q, "/b"));
  ck_assert_str_ne(q->version, p->version); /* system_version_info */
  resp_free(p);
  resp_free(q);
  FX_END();
}
END_TEST

START_TEST(test_delta_initial_versions_send_only_the_difference) {
  mcp_store *s = store2();
  put_vs(s, "ns/c", "C1", 0);
  mcp_xds_server *srv = server(s, 0, NULL);
  /* What a first stream sent, held by the client. */
  mcp_stream *st = open_st(srv, 1, 0);
  req r = {.type_url = VS};
  resp *p = ask(st, 1, &r);
  ck_assert_uint_eq(p->n, 3);
  const char *va = find(p, "ns/a")->version, *vb = find(p, "/b")->version;
  char iv_a[64], iv_b[64];
  snprintf(iv_a, sizeof iv_a, "%s", va);
  snprintf(iv_b, sizeof iv_b, "%s", vb);
  mcp_stream_del(st);
  /* While away: a changes, c goes. The client also claims "ns/gone". */
  put_vs(s, "ns/a", "A2", 1 * MS);
  ck_assert_int_eq(mcp_store_delete(s, VS_COLL, "ns/c", 1 * MS), 1);
  st = open_st(srv, 1, 2 * MS);
  const char *iv[] = {"ns/a", iv_a, "/b", iv_b, "ns/c",
                      find(p, "ns/c")->version};
  req r2 = {.type_url = VS, .iv = iv, .niv = 3};
  send_req(st, 1, &r2, 2 * MS);
  resp *q = pump(st, 1, 2 * MS);
  ck_assert_uint_eq(q->n, 1); /* b held in its version: not sent */
  ck_assert_ptr_nonnull(find(q, "ns/a"));
  ck_assert_str_ne(find(q, "ns/a")->version, iv_a);
  ck_assert_uint_eq(q->nremoved, 1);
  ck_assert(removed(q, "ns/c"));
  resp_free(p);
  resp_free(q);
  FX_END();
}
END_TEST

START_TEST(test_delta_named_subscribe_and_unsubscribe) {
  FX(1);
  const char *sub[] = {"ns/a"};
  req r = {.type_url = VS, .names = sub, .nnames = 1};
  send_req(st, 1, &r, 0);
  resp *p = pump(st, 1, 0);
  ck_assert_uint_eq(p->n, 1);
  ck_assert_ptr_nonnull(find(p, "ns/a"));
  /* A change to a name not subscribed sends nothing. */
  req ack = {.type_url = VS, .nonce = p->nonce};
  send_req(st, 1, &ack, 1 * MS);
  put_vs(s, "b", "B2", 2 * MS);
  pump_idle(st, 1, 2 * MS);
  /* Subscribing to /b sends it now, once: "b" names nothing. */
  const char *sub2[] = {"/b", "b"};
  req r2 = {.type_url = VS, .names = sub2, .nnames = 2, .nonce = p->nonce};
  send_req(st, 1, &r2, 3 * MS);
  resp *q = pump(st, 1, 3 * MS);
  ck_assert_uint_eq(q->n, 1);
  ck_assert_ptr_nonnull(find(q, "/b"));
  req ack2 = {.type_url = VS, .nonce = q->nonce};
  send_req(st, 1, &ack2, 4 * MS);
  /* Unsubscribed: its changes are not sent any more. */
  const char *uns[] = {"ns/a"};
  req r3 = {.type_url = VS, .unsub = uns, .nunsub = 1, .nonce = q->nonce};
  send_req(st, 1, &r3, 5 * MS);
  put_vs(s, "ns/a", "A9", 6 * MS);
  pump_idle(st, 1, 6 * MS);
  /* "*" subscribes to everything. */
  const char *star[] = {"*"};
  req r4 = {.type_url = VS, .names = star, .nnames = 1, .nonce = q->nonce};
  send_req(st, 1, &r4, 7 * MS);
  put_vs(s, "ns/z", "Z1", 7 * MS);
  resp *x = pump(st, 1, 7 * MS);
  ck_assert_ptr_nonnull(find(x, "ns/z"));
  resp_free(p);
  resp_free(q);
  resp_free(x);
  FX_END();
}
END_TEST

START_TEST(test_delta_nack_counted_and_not_resent) {
  FX(1);
  req r = {.type_url = AP};
  resp *p = ask(st, 1, &r);
  ck_assert_uint_eq(p->n, 0); /* empty, yet answered */
  req ack = {.type_url = AP, .nonce = p->nonce};
  send_req(st, 1, &ack, 0);
  req r2 = {.type_url = VS};
  send_req(st, 1, &r2, 0);
  resp *q = pump(st, 1, 0);
  req nack = {.type_url = VS, .nonce = q->nonce, .nack = 1};
  send_req(st, 1, &nack, 1 * MS);
  pump_idle(st, 1, 1 * MS);
  ck_assert_int_eq(ev.nacks, 1);
  mcp_xds_stream_info info;
  mcp_xds_stream_info_get(st, &info);
  ck_assert_uint_eq(info.nacks, 1);
  ck_assert_uint_eq(info.acks, 1);
  ck_assert_uint_eq(info.ntypes, 2);
  resp_free(p);
  resp_free(q);
  FX_END();
}
END_TEST

START_TEST(test_delta_compacted_log_ends_with_resync) {
  FX(1);
  req r = {.type_url = VS};
  resp *p = ask(st, 1, &r);
  /* Many creations and deletions while the response is in flight: the
   * store compacts the tombstones the stream would need. */
  char name[32];
  for (int i = 0; i < 300; i++) {
    snprintf(name, sizeof name, "ns/t%d", i);
    put_vs(s, name, "T", 1 * MS);
  }
  ck_assert_int_eq(mcp_store_delete(s, VS_COLL, "ns/a", 1 * MS), 1);
  for (int i = 0; i < 300; i++) {
    snprintf(name, sizeof name, "ns/t%d", i);
    ck_assert_int_eq(mcp_store_delete(s, VS_COLL, name, 1 * MS), 1);
  }
  req ack = {.type_url = VS, .nonce = p->nonce};
  send_req(st, 1, &ack, 2 * MS);
  pump_end(st, 1, 2 * MS, 10); /* ABORTED: reconnect and resume */
  mcp_xds_server_stats ss;
  mcp_xds_server_get_stats(srv, &ss);
  ck_assert_uint_eq(ss.resyncs, 1);
  resp_free(p);
  FX_END();
}
END_TEST

/* ---- the client against the server, in memory ---- */

/* Moves every message between the two streams until both are idle.
 * Returns the messages moved. */
static int shuttle(mcp_stream *srv, mcp_stream *cli, mcp_tstamp ts) {
  int moved = 0;
  for (int round = 0; round < 1000; round++) {
    int any = 0;
    mcp_stream *from[2] = {srv, cli}, *to[2] = {cli, srv};
    for (int k = 0; k < 2; k++) {
      mcp_msg *msg = NULL;
      int status;
      const char *d;
      mcp_stream_action a = mcp_stream_pump(from[k], ts, 1, &msg, &status, &d);
      ck_assert_int_ne(a, MCP_STREAM_END);
      if (a == MCP_STREAM_SEND) {
        size_t len = mcp_msg_len(msg);
        uint8_t *flat = malloc(len ? len : 1);
        mcp_msg_flatten(msg, flat);
        mcp_msg_free(msg);
        mcp_stream_recv(to[k], flat, len, ts);
        free(flat);
        any = 1;
        moved++;
      }
    }
    if (!any) {
      return moved;
    }
  }
  ck_abort_msg("the streams never went idle");
  return moved;
}

typedef struct seen {
  int responses, nacks, complete;
  char last_type[128];
  size_t last_n, last_removed;
  char names[8][64];
  int reject; /* NACK the next response */
} seen;

static int on_resp(const mcp_xds_response *r, const char *rejected, char *msg,
                   size_t msglen, void *ud) {
  seen *s = ud;
  s->responses++;
  snprintf(s->last_type, sizeof s->last_type, "%s", r->type_url);
  s->last_n = r->nresources;
  s->last_removed = r->nremoved;
  s->complete = r->complete;
  for (size_t i = 0; i < r->nresources && i < 8; i++) {
    snprintf(s->names[i], sizeof s->names[i], "%s", r->resources[i].name);
  }
  if (rejected || s->reject) {
    s->nacks++;
    s->reject = 0;
    snprintf(msg, msglen, "rejected by the test");
    return 3;
  }
  return 0;
}

START_TEST(test_client_syncs_acks_and_resumes_delta_with_held_versions) {
  mcp_store *s = store2();
  mcp_xds_server *srv = server(s, 0, NULL);
  mcp_xds_held *held = NULL;
  ck_assert_int_eq(mcp_xds_held_new(&held, NULL), 0);
  for (int delta = 0; delta < 2; delta++) {
    seen sn = {0};
    const char *types[] = {VS, AP};
    mcp_kv md[] = {{"GENERATOR", "api"}};
    mcp_xds_client_options o = {.held = held, .delta = delta,
                                .type_urls = types, .ntypes = 2,
                                .node_id = "istiod~1", .node_metadata = md,
                                .nnode_metadata = 1,
                                .initial_nonce = "2026-11-27 16:00:00",
                                .on_response = on_resp, .user_data = &sn};
    mcp_stream *cli = NULL, *st = open_st(srv, delta, 0);
    ck_assert_int_eq(mcp_xds_client_open(&cli, &o, 0), 0);
    ck_assert(mcp_xds_client_stream_is(cli));
    shuttle(st, cli, 0);
    ck_assert_int_eq(sn.responses, 2);
    ck_assert_uint_eq(mcp_xds_held_count(held, VS), 2);
    ck_assert_ptr_nonnull(mcp_xds_held_version(held, VS, "/b"));
    mcp_xds_stream_info info;
    mcp_xds_stream_info_get(st, &info);
    ck_assert_str_eq(info.node_id, "istiod~1");
    ck_assert_uint_eq(info.acks, 2);
    /* An edit arrives and is ACKed; a NACKed one changes nothing held. */
    put_vs(s, "ns/a", delta ? "A3" : "A2", 1 * MS);
    shuttle(st, cli, 1 * MS);
    ck_assert_int_eq(sn.responses, 3);
    ck_assert_str_eq(sn.last_type, VS);
    ck_assert_uint_eq(sn.last_n, delta ? 1 : 2);
    char v[64];
    snprintf(v, sizeof v, "%s", mcp_xds_held_version(held, VS, "ns/a"));
    sn.reject = 1;
    put_vs(s, "ns/a", delta ? "A4" : "A5", 2 * MS);
    shuttle(st, cli, 2 * MS);
    ck_assert_int_eq(sn.nacks, 1);
    ck_assert_str_eq(mcp_xds_held_version(held, VS, "ns/a"), v);
    mcp_xds_stream_info_get(st, &info);
    ck_assert_uint_eq(info.nacks, 1);
    mcp_stream_del(cli);
    mcp_stream_del(st);
  }
  /* Delta again, after b went: the resumed stream removes it and sends
   * nothing held in its version. */
  ck_assert_int_eq(mcp_store_delete(s, VS_COLL, "b", 3 * MS), 1);
  seen sn = {0};
  const char *types[] = {VS};
  mcp_xds_client_options o = {.held = held, .delta = 1, .type_urls = types,
                              .ntypes = 1, .on_response = on_resp,
                              .user_data = &sn};
  mcp_stream *cli = NULL, *st = open_st(srv, 1, 3 * MS);
  ck_assert_int_eq(mcp_xds_client_open(&cli, &o, 3 * MS), 0);
  shuttle(st, cli, 3 * MS);
  ck_assert_int_eq(sn.responses, 1);
  ck_assert_uint_eq(sn.last_removed, 1);
  /* ns/a was held in an older version (the NACK kept it): sent again. */
  ck_assert_uint_eq(sn.last_n, 1);
  ck_assert_str_eq(sn.names[0], "ns/a");
  ck_assert_int_eq(sn.complete, 0);
  ck_assert_uint_eq(mcp_xds_held_count(held, VS), 1);
  mcp_stream_del(cli);
  mcp_stream_del(st);
  mcp_xds_held_del(held);
  mcp_xds_server_del(srv);
  mcp_store_del(s);
}
END_TEST

/* A stored-shape Resource{metadata{name}, body Any{type_url}} packed. */
static void w_mcp_resource(wbuf *b, uint32_t f, const char *name,
                           const char *body_type) {
  Istio__Mcp__V1alpha1__Metadata md = ISTIO__MCP__V1ALPHA1__METADATA__INIT;
  md.name = (char *)name;
  Istio__Mcp__V1alpha1__Resource r = ISTIO__MCP__V1ALPHA1__RESOURCE__INIT;
  r.metadata = &md;
  Google__Protobuf__Any body = GOOGLE__PROTOBUF__ANY__INIT;
  body.type_url = (char *)body_type;
  r.body = &body;
  uint8_t buf[256];
  size_t n = istio__mcp__v1alpha1__resource__pack(&r, buf);
  w_len(b, f, buf, n);
}

static void nack_fn(uint32_t f, const uint8_t *d, size_t n, void *ud) {
  char **msg = ud;
  if (f == 2) {
    free(*msg);
    *msg = dupn(d, n);
  }
}

static void answer_fn(uint32_t f, const uint8_t *d, size_t n, void *ud) {
  if (f == 7) { /* delta error_detail */
    each_len(d, n, nack_fn, ud);
  }
}

/* A client stream opened with |o|, its initial request sent. */
static mcp_stream *cli_open(const mcp_xds_client_options *o) {
  mcp_stream *cli = NULL;
  ck_assert_int_eq(mcp_xds_client_open(&cli, o, 0), 0);
  mcp_msg *msg = NULL;
  int status;
  const char *d;
  ck_assert_int_eq(mcp_stream_pump(cli, 0, 1, &msg, &status, &d),
                   MCP_STREAM_SEND);
  mcp_msg_free(msg);
  return cli;
}

START_TEST(test_client_nacks_what_it_cannot_accept) {
  mcp_xds_held *held = NULL;
  ck_assert_int_eq(mcp_xds_held_new(&held, NULL), 0);
  seen sn = {0};
  const char *types[] = {VS};
  mcp_xds_client_options o = {.held = held, .type_urls = types, .ntypes = 1,
                              .on_response = on_resp, .user_data = &sn};
  mcp_stream *cli = cli_open(&o);
  mcp_msg *msg = NULL;
  int status;
  const char *d;
  /* A response whose Any is something else, and one with a name twice. */
  for (int k = 0; k < 2; k++) {
    wbuf b = {0}, any = {0};
    w_str(&b, 4, VS);
    w_str(&b, 5, k ? "n2" : "n1");
    if (!k) {
      w_str(&any, 1, "type.googleapis.com/envoy.config.cluster.v3.Cluster");
      w_sub(&b, 2, &any);
    } else {
      for (int j = 0; j < 2; j++) {
        w_str(&any, 1, MCP_XDS_RESOURCE_TYPE_URL);
        w_mcp_resource(&any, 2, "ns/x", "type.googleapis.com/x.Y");
        w_sub(&b, 2, &any);
      }
    }
    mcp_stream_recv(cli, b.p, b.len, 0);
    free(b.p);
    ck_assert_int_eq(mcp_stream_pump(cli, 0, 1, &msg, &status, &d),
                     MCP_STREAM_SEND);
    mcp_msg_free(msg);
  }
  ck_assert_int_eq(sn.nacks, 2);
  ck_assert_uint_eq(mcp_xds_held_count(held, VS), 0);
  /* An envelope that does not decode ends the stream. */
  mcp_stream_recv(cli, (const uint8_t *)"\x22\xff", 2, 0);
  ck_assert_int_eq(mcp_stream_pump(cli, 0, 1, &msg, &status, &d),
                   MCP_STREAM_END);
  mcp_stream_del(cli);
  mcp_xds_held_del(held);
}
END_TEST

START_TEST(test_client_nacks_each_bad_resource_and_ends_on_a_bad_envelope) {
  mcp_xds_held *held = NULL;
  ck_assert_int_eq(mcp_xds_held_new(&held, NULL), 0);
  seen sn = {0};
  const char *types[] = {VS};
  mcp_xds_client_options o = {.held = held, .delta = 1, .type_urls = types,
                              .ntypes = 1, .on_response = on_resp,
                              .user_data = &sn};
  mcp_stream *cli = cli_open(&o);
  mcp_msg *msg = NULL;
  int status;
  const char *d;
  static const char *const why[] = {
      "a removed name is not UTF-8",
      "resource 0: a string is not UTF-8", /* the Any's type_url */
      "resource 0: a string is not UTF-8", /* the envelope's name */
      "resource 0 does not decode",
      "resource 0: its name is not its metadata.name ns/x",
      "resource 0: a string is not UTF-8", /* metadata.name */
      "resource has no name",
  };
  for (size_t k = 0; k < sizeof(why) / sizeof(why[0]); k++) {
    wbuf b = {0}, res = {0}, any = {0};
    w_str(&b, 4, VS);
    w_str(&b, 5, "n");
    if (k == 0) {
      w_str(&b, 6, "ns/\xff");
    } else {
      w_str(&any, 1, k == 1 ? "type.googleapis.com/\xff"
                            : MCP_XDS_RESOURCE_TYPE_URL);
      if (k == 3) {
        w_str(&any, 2, "\xff\xff");
      } else {
        w_mcp_resource(&any, 2, k == 5 ? "ns/\xfe" : k == 6 ? "" : "ns/x",
                       "type.googleapis.com/x.Y");
      }
      w_str(&res, 3, k == 2 ? "ns/\xff" : k == 4 ? "ns/y" : k == 6 ? "" : NULL);
      w_sub(&res, 2, &any);
      w_sub(&b, 2, &res);
    }
    mcp_stream_recv(cli, b.p, b.len, 0);
    free(b.p);
    ck_assert_int_eq(mcp_stream_pump(cli, 0, 1, &msg, &status, &d),
                     MCP_STREAM_SEND);
    size_t len = mcp_msg_len(msg);
    uint8_t *flat = malloc(len);
    mcp_msg_flatten(msg, flat);
    mcp_msg_free(msg);
    char *nack = NULL;
    each_len(flat, len, answer_fn, &nack);
    free(flat);
    ck_assert_ptr_nonnull(nack);
    ck_assert_str_eq(nack, why[k]);
    free(nack);
    ck_assert_int_eq(sn.nacks, (int)k + 1);
  }
  ck_assert_uint_eq(mcp_xds_held_count(held, VS), 0);
  mcp_stream_del(cli);
  /* An envelope with nothing to NACK it by ends the stream: no type_url,
   * or a type_url, nonce or version that is not UTF-8. */
  for (int k = 0; k < 4; k++) {
    o.delta = 0;
    cli = cli_open(&o);
    wbuf b = {0};
    w_str(&b, 4, k == 0 ? NULL : k == 1 ? "x.io/v1/\xff" : VS);
    w_str(&b, 5, k == 2 ? "n\xff" : "n");
    w_str(&b, 1, k == 3 ? "v\xff" : "v");
    mcp_stream_recv(cli, b.p, b.len, 0);
    free(b.p);
    ck_assert_int_eq(mcp_stream_pump(cli, 0, 1, &msg, &status, &d),
                     MCP_STREAM_END);
    mcp_stream_del(cli);
  }
  ck_assert_int_eq(sn.nacks, 7);
  mcp_xds_held_del(held);
}
END_TEST

/* Every allocation failing in turn: the server and its streams fail
 * cleanly (no leak, no crash); ASan and th_mem count. */
START_TEST(test_allocation_failures_leave_nothing_behind) {
  for (long fail = 1; fail < 400; fail++) {
    th_mem tm;
    th_mem_init(&tm, fail);
    mcp_store *s = th_store(NULL);
    put_vs(s, "ns/a", "A1", 0);
    put_vs(s, "b", "B1", 0);
    mcp_xds_server_options o;
    mcp_xds_server_options_default(&o);
    o.store = s;
    o.mem = &tm.mem;
    mcp_xds_server *srv = NULL;
    if (mcp_xds_server_new(&srv, &o) != 0) {
      ck_assert_int_eq(tm.live, 0);
      mcp_store_del(s);
      continue;
    }
    for (int delta = 0; delta < 2; delta++) {
      mcp_stream *st = NULL;
      if (mcp_xds_server_open(srv, delta, NULL, 0, &st) != 0) {
        continue;
      }
      const char *iv[] = {"ns/a", "x", "ns/q", "y"};
      req r = {.type_url = VS, .node_id = "n", .iv = iv, .niv = delta ? 2 : 0};
      send_req(st, delta, &r, 0);
      mcp_msg *msg = NULL;
      int status;
      const char *d;
      for (int i = 0; i < 3; i++) {
        mcp_stream_action a = mcp_stream_pump(st, 0, 1, &msg, &status, &d);
        mcp_msg_free(msg);
        msg = NULL;
        if (a == MCP_STREAM_END) {
          break;
        }
      }
      mcp_stream_del(st);
    }
    mcp_xds_server_del(srv);
    ck_assert_int_eq(tm.live, 0);
    mcp_store_del(s);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("core_xds");
  TCase *tc = tcase_create("rules");
  tcase_add_test(tc, test_gvk_maps_to_the_loaders_collection_with_version_aliases);
  tcase_add_test(tc, test_identity_pattern_globs);
  tcase_add_test(tc, test_sotw_first_request_answered_whatever_its_nonce);
  tcase_add_test(tc, test_sotw_every_type_answered_even_unknown_or_empty);
  tcase_add_test(tc, test_sotw_both_version_spellings_see_the_same_resources);
  tcase_add_test(tc, test_meshconfig_is_sent_as_its_body);
  tcase_add_test(tc, test_sotw_ack_then_change_pushes_full_state_once);
  tcase_add_test(tc, test_sotw_nack_never_resends_the_same_version);
  tcase_add_test(tc, test_sotw_stale_nonce_ignored_and_counted);
  tcase_add_test(tc, test_sotw_resource_names_filter_and_wildcard);
  tcase_add_test(tc, test_sotw_shared_state_let_go_when_its_last_stream_leaves);
  tcase_add_test(tc, test_sotw_changes_coalesce_within_debounce);
  tcase_add_test(tc, test_sotw_resubscribe_with_empty_nonce_gets_full_state);
  tcase_add_test(tc, test_bad_requests_end_the_stream_invalid_argument);
  tcase_add_test(tc, test_each_bad_field_and_each_limit_ends_the_stream);
  tcase_add_test(tc, test_require_identity_refuses_other_callers);
  tcase_add_test(tc, test_services_are_both_ads_methods);
  tcase_add_test(tc, test_initial_sync_ends_with_the_first_answer_of_every_type);
  tcase_add_test(tc, test_delta_wildcard_first_then_only_changes_and_removals);
  tcase_add_test(tc, test_delta_initial_versions_send_only_the_difference);
  tcase_add_test(tc, test_delta_named_subscribe_and_unsubscribe);
  tcase_add_test(tc, test_delta_nack_counted_and_not_resent);
  tcase_add_test(tc, test_delta_compacted_log_ends_with_resync);
  tcase_add_test(tc, test_client_syncs_acks_and_resumes_delta_with_held_versions);
  tcase_add_test(tc, test_client_nacks_what_it_cannot_accept);
  tcase_add_test(tc, test_client_nacks_each_bad_resource_and_ends_on_a_bad_envelope);
  tcase_add_test(tc, test_allocation_failures_leave_nothing_behind);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
