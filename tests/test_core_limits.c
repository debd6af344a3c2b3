/*
 * Every limit is enforced with a clear error, changes nothing, and for a
 * session concerns that stream only.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"

static mcp_store *store_with(mcp_name_rules rules, size_t max_name,
                             size_t max_version, size_t max_resources) {
  mcp_store_options o;
  mcp_store_options_default(&o);
  o.epoch = 7;
  o.name_rules = rules;
  o.max_name_len = max_name;
  o.max_version_len = max_version;
  o.max_resources = max_resources;
  mcp_store *st = NULL;
  ck_assert_int_eq(mcp_store_new(&st, &o), 0);
  return st;
}

static int upsert(mcp_store *st, const char *name, const char *version) {
  mcp_resource r = th_res(name, version, "x");
  return mcp_store_upsert(st, "c", &r, 1);
}

/* ---- store ---- */

START_TEST(test_store_lenient_names_by_default) {
  mcp_store *st = th_store(NULL);
  ck_assert_int_eq(upsert(st, "ns/reviews.default.svc", "1"), 1);
  ck_assert_int_eq(upsert(st, "with space", "1"), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(upsert(st, "a//b", "1"), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(upsert(st, "../escape", "1"), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(mcp_store_count(st, "c"), 1);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_strict_names_are_dns_labels) {
  mcp_store *st = store_with(MCP_NAMES_STRICT, 0, 0, 0);
  ck_assert_int_eq(upsert(st, "ns/reviews-v1", "1"), 1);
  ck_assert_int_eq(upsert(st, "ns/reviews.default.svc", "1"), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(upsert(st, "NS/x", "1"), MCP_ERR_INVALID_ARGUMENT);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_any_names_accepts_utf8) {
  mcp_store *st = store_with(MCP_NAMES_ANY, 0, 0, 0);
  ck_assert_int_eq(upsert(st, "caf\xc3\xa9 au lait", "1"), 1);
  ck_assert_int_eq(upsert(st, "bad\xff", "1"), MCP_ERR_INVALID_ARGUMENT);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_name_and_version_lengths) {
  mcp_store *st = store_with(MCP_NAMES_LENIENT, 8, 4, 0);
  ck_assert_int_eq(upsert(st, "12345678", "1234"), 1);
  ck_assert_int_eq(upsert(st, "123456789", "1"), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(upsert(st, "a", "12345"), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(mcp_store_count(st, "c"), 1);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_max_resources_is_limit_and_changes_nothing) {
  mcp_store *st = store_with(MCP_NAMES_LENIENT, 0, 0, 2);
  ck_assert_int_eq(upsert(st, "a", "1"), 1);
  ck_assert_int_eq(upsert(st, "b", "1"), 1);
  uint64_t gen = mcp_store_generation(st, "c");
  ck_assert_int_eq(upsert(st, "c", "1"), MCP_ERR_LIMIT);
  ck_assert_int_eq(upsert(st, "a", "2"), 1); /* replacing is fine */
  ck_assert_uint_eq(mcp_store_generation(st, "c"), gen + 1);
  mcp_resource three[] = {th_res("x", "1", "x"), th_res("y", "1", "y"),
                          th_res("z", "1", "z")};
  ck_assert_int_eq(mcp_store_replace(st, "c", three, 3, 2), MCP_ERR_LIMIT);
  ck_assert_uint_eq(mcp_store_count(st, "c"), 2);
  ck_assert_str_eq(mcp_store_version(st, "c", "a"), "2");
  /* Deleting makes room, also within one replace. */
  ck_assert_int_eq(mcp_store_replace(st, "c", three, 2, 3), 1);
  ck_assert_uint_eq(mcp_store_count(st, "c"), 2);
  mcp_store_del(st);
}
END_TEST

/* ---- source ---- */

typedef struct src {
  mcp_store *store;
  mcp_source_session *s;
  mcp_tstamp ts;
} src;

static void src_open(src *f, const mcp_source_options *extra) {
  f->store = th_store(NULL);
  mcp_store_add_collection(f->store, "c");
  mcp_source_options o;
  if (extra) {
    o = *extra;
  } else {
    mcp_source_options_default(&o);
  }
  o.store = f->store;
  f->ts = 1;
  ck_assert_int_eq(mcp_source_session_new(&f->s, &o, f->ts), 0);
}

static void src_close(src *f) {
  mcp_source_session_del(f->s);
  mcp_store_del(f->store);
}

static int req(src *f, const char *coll, const char *nonce,
               const char *const *initial) {
  size_t n;
  uint8_t *b = th_request(&n, "node", coll, nonce, initial != NULL, initial, 0, NULL);
  int rv = mcp_source_session_recv(f->s, b, n, ++f->ts);
  free(b);
  return rv;
}

START_TEST(test_source_max_collections_is_limit) {
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.max_collections = 3;
  src f;
  src_open(&f, &o);
  ck_assert_int_eq(req(&f, "c", "", NULL), 0);
  ck_assert_int_eq(req(&f, "d", "", NULL), 0);
  ck_assert_int_eq(req(&f, "e", "", NULL), 0);
  ck_assert_int_eq(req(&f, "f", "", NULL), MCP_ERR_LIMIT);
  ck_assert_uint_eq(mcp_source_session_collection_count(f.s), 3);
  ck_assert_int_eq(req(&f, "c", "", NULL), 0); /* a re-request is no new one */
  ck_assert_int_eq(mcp_error_grpc_status(MCP_ERR_LIMIT), MCP_CODE_RESOURCE_EXHAUSTED);
  src_close(&f);
}
END_TEST

START_TEST(test_source_max_initial_versions_is_limit) {
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.max_initial_versions = 2;
  src f;
  src_open(&f, &o);
  const char *three[] = {"a", "1", "b", "1", "c", "1", NULL};
  const char *two[] = {"a", "1", "b", "1", NULL};
  ck_assert_int_eq(req(&f, "c", "", three), MCP_ERR_LIMIT);
  ck_assert_uint_eq(mcp_source_session_collection_count(f.s), 0);
  ck_assert_int_eq(req(&f, "c", "", two), 0);
  src_close(&f);
}
END_TEST

START_TEST(test_source_long_names_are_protocol_errors) {
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.max_name_len = 8;
  o.max_version_len = 3;
  src f;
  src_open(&f, &o);
  ck_assert_int_eq(req(&f, "collection-too-long", "", NULL), MCP_ERR_PROTOCOL);
  const char *long_name[] = {"name-too-long", "1", NULL};
  const char *long_version[] = {"a", "1234", NULL};
  ck_assert_int_eq(req(&f, "c", "", long_name), MCP_ERR_PROTOCOL);
  ck_assert_int_eq(req(&f, "c", "", long_version), MCP_ERR_PROTOCOL);
  ck_assert_int_eq(mcp_error_grpc_status(MCP_ERR_PROTOCOL), MCP_CODE_INVALID_ARGUMENT);
  ck_assert_uint_eq(mcp_source_session_collection_count(f.s), 0);
  src_close(&f);
}
END_TEST

START_TEST(test_source_node_annotations_are_limited) {
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.max_node_annotations = 1;
  src f;
  src_open(&f, &o);
  Istio__Mcp__V1alpha1__RequestResources r = ISTIO__MCP__V1ALPHA1__REQUEST_RESOURCES__INIT;
  Istio__Mcp__V1alpha1__SinkNode node = ISTIO__MCP__V1ALPHA1__SINK_NODE__INIT;
  Istio__Mcp__V1alpha1__SinkNode__AnnotationsEntry e[2], *ep[2] = {&e[0], &e[1]};
  for (int i = 0; i < 2; ++i) {
    istio__mcp__v1alpha1__sink_node__annotations_entry__init(&e[i]);
    e[i].key = i ? "k2" : "k1";
    e[i].value = "v";
  }
  node.id = "n";
  node.n_annotations = 2;
  node.annotations = ep;
  r.sink_node = &node;
  r.collection = "c";
  uint8_t buf[256];
  size_t n = istio__mcp__v1alpha1__request_resources__pack(&r, buf);
  ck_assert_int_eq(mcp_source_session_recv(f.s, buf, n, ++f.ts), MCP_ERR_LIMIT);
  node.n_annotations = 1;
  n = istio__mcp__v1alpha1__request_resources__pack(&r, buf);
  ck_assert_int_eq(mcp_source_session_recv(f.s, buf, n, ++f.ts), 0);
  src_close(&f);
}
END_TEST

START_TEST(test_source_request_rate_limits_new_and_stale_requests) {
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.request_rate = 2;
  o.request_burst = 3;
  src f;
  src_open(&f, &o);
  ck_assert_int_eq(req(&f, "c", "", NULL), 0);
  ck_assert_int_eq(req(&f, "c", "", NULL), 0);
  ck_assert_int_eq(req(&f, "c", "99", NULL), 0); /* stale: costs a token too */
  ck_assert_int_eq(req(&f, "c", "", NULL), MCP_ERR_LIMIT);
  f.ts += MCP_SECONDS; /* two tokens back */
  ck_assert_int_eq(req(&f, "c", "", NULL), 0);
  ck_assert_int_eq(req(&f, "c", "", NULL), 0);
  ck_assert_int_eq(req(&f, "c", "", NULL), MCP_ERR_LIMIT);
  src_close(&f);
}
END_TEST

START_TEST(test_source_acks_never_consume_tokens) {
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.request_rate = 1;
  o.request_burst = 1;
  src f;
  src_open(&f, &o);
  ck_assert_int_eq(req(&f, "c", "", NULL), 0);
  char name[16];
  for (int i = 0; i < 50; ++i) { /* a busy collection and a fast sink */
    Istio__Mcp__V1alpha1__Resources *r = th_source_next(f.s, ++f.ts);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(req(&f, "c", r->nonce, NULL), 0);
    th_resources_free(r);
    snprintf(name, sizeof(name), "r%d", i);
    th_put(f.store, "c", name, "1", "x", ++f.ts);
  }
  src_close(&f);
}
END_TEST

/* ---- sink ---- */

typedef struct snk {
  mcp_sink_state *st;
  mcp_sink_session *s;
  mcp_tstamp ts;
} snk;

static void snk_open(snk *f, mcp_sink_options *o) {
  static const char *colls[] = {"c"};
  o->collections = colls;
  o->ncollections = 1;
  ck_assert_int_eq(mcp_sink_state_new(&f->st, o), 0);
  ck_assert_int_eq(mcp_sink_session_new(&f->s, f->st, 0), 0);
  mcp_msg *m;
  while (mcp_sink_session_next(f->s, &m) == 1) {
    mcp_msg_free(m);
  }
  f->ts = 1;
}

static void snk_close(snk *f) {
  mcp_sink_session_del(f->s);
  mcp_sink_state_del(f->st);
}

/* Feeds a push; returns the answer's code (0: ACK). */
static int push(snk *f, const char *nonce, int incremental,
                const char *const *names, const char *const *versions,
                const char *const *removed) {
  size_t n;
  uint8_t *b = th_resources(&n, "c", nonce, incremental, names, versions, removed);
  ck_assert_int_eq(mcp_sink_session_recv(f->s, b, n, ++f->ts), 0);
  free(b);
  mcp_msg *m;
  ck_assert_int_eq(mcp_sink_session_next(f->s, &m), 1);
  Istio__Mcp__V1alpha1__RequestResources *r = th_decode_request(m);
  mcp_msg_free(m);
  int code = r->error_detail ? r->error_detail->code : 0;
  istio__mcp__v1alpha1__request_resources__free_unpacked(r, NULL);
  return code;
}

START_TEST(test_sink_max_resources_full_state_nacks) {
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.max_resources = 2;
  snk f;
  snk_open(&f, &o);
  const char *three[] = {"a", "b", "c", NULL}, *two[] = {"a", "b", NULL};
  ck_assert_int_eq(push(&f, "1", 0, three, NULL, NULL), MCP_CODE_RESOURCE_EXHAUSTED);
  ck_assert_uint_eq(mcp_sink_state_count(f.st, "c"), 0);
  ck_assert_int_eq(push(&f, "2", 0, two, NULL, NULL), 0);
  ck_assert_uint_eq(mcp_sink_state_count(f.st, "c"), 2);
  snk_close(&f);
}
END_TEST

START_TEST(test_sink_max_resources_counts_what_incremental_leaves) {
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.max_resources = 2;
  o.incremental = 1;
  snk f;
  snk_open(&f, &o);
  const char *ab[] = {"a", "b", NULL}, *c[] = {"c", NULL};
  const char *rm_a[] = {"a", "a", NULL}; /* repeated: counts once */
  ck_assert_int_eq(push(&f, "1", 1, ab, NULL, NULL), 0);
  ck_assert_int_eq(push(&f, "2", 1, c, NULL, NULL), MCP_CODE_RESOURCE_EXHAUSTED);
  ck_assert_uint_eq(mcp_sink_state_count(f.st, "c"), 2);
  ck_assert_int_eq(push(&f, "3", 1, c, NULL, rm_a), 0);
  ck_assert_uint_eq(mcp_sink_state_count(f.st, "c"), 2);
  ck_assert_ptr_null(mcp_sink_state_version(f.st, "c", "a"));
  snk_close(&f);
}
END_TEST

START_TEST(test_sink_names_versions_and_metadata_are_checked) {
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.name_rules = MCP_NAMES_STRICT;
  o.max_version_len = 3;
  snk f;
  snk_open(&f, &o);
  const char *dotted[] = {"ns/a.b", NULL}, *ok[] = {"ns/a-b", NULL};
  const char *long_v[] = {"1234", NULL};
  ck_assert_int_eq(push(&f, "1", 0, dotted, NULL, NULL), MCP_CODE_INVALID_ARGUMENT);
  ck_assert_int_eq(push(&f, "2", 0, ok, long_v, NULL), MCP_CODE_INVALID_ARGUMENT);
  ck_assert_uint_eq(mcp_sink_state_count(f.st, "c"), 0);
  ck_assert_int_eq(push(&f, "3", 0, ok, NULL, NULL), 0);
  mcp_collection_status cs;
  mcp_sink_state_collection_status(f.st, 0, f.ts, &cs);
  ck_assert_uint_eq(cs.nacks, 2);
  snk_close(&f);
}
END_TEST

START_TEST(test_sink_lenient_names_reject_spaces) {
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  snk f;
  snk_open(&f, &o);
  const char *spaced[] = {"a b", NULL};
  ck_assert_int_eq(push(&f, "1", 0, spaced, NULL, NULL), MCP_CODE_INVALID_ARGUMENT);
  snk_close(&f);
}
END_TEST

START_TEST(test_sink_max_metadata_nacks) {
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.max_metadata = 1;
  snk f;
  snk_open(&f, &o);
  /* One resource with two labels, built by hand. */
  Istio__Mcp__V1alpha1__Resources m = ISTIO__MCP__V1ALPHA1__RESOURCES__INIT;
  Istio__Mcp__V1alpha1__Resource res = ISTIO__MCP__V1ALPHA1__RESOURCE__INIT, *rp = &res;
  Istio__Mcp__V1alpha1__Metadata md = ISTIO__MCP__V1ALPHA1__METADATA__INIT;
  Istio__Mcp__V1alpha1__Metadata__LabelsEntry l[2], *lp[2] = {&l[0], &l[1]};
  Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
  for (int i = 0; i < 2; ++i) {
    istio__mcp__v1alpha1__metadata__labels_entry__init(&l[i]);
    l[i].key = i ? "k2" : "k1";
    l[i].value = "v";
  }
  md.name = "a";
  md.version = "1";
  md.n_labels = 2;
  md.labels = lp;
  any.type_url = "type.googleapis.com/test.Body";
  res.metadata = &md;
  res.body = &any;
  m.collection = "c";
  m.nonce = "1";
  m.n_resources = 1;
  m.resources = &rp;
  uint8_t buf[512];
  size_t n = istio__mcp__v1alpha1__resources__pack(&m, buf);
  ck_assert_int_eq(mcp_sink_session_recv(f.s, buf, n, ++f.ts), 0);
  mcp_msg *out;
  ck_assert_int_eq(mcp_sink_session_next(f.s, &out), 1);
  Istio__Mcp__V1alpha1__RequestResources *r = th_decode_request(out);
  mcp_msg_free(out);
  ck_assert_ptr_nonnull(r->error_detail);
  ck_assert_int_eq(r->error_detail->code, MCP_CODE_INVALID_ARGUMENT);
  istio__mcp__v1alpha1__request_resources__free_unpacked(r, NULL);
  snk_close(&f);
}
END_TEST


/* ---- SinkNode (issue 12, point 3) ---- */

/* A request of |service| for "c" (type URL "t/c") with a sink node. */
static size_t node_request(mcp_service service, const char *id, const char *key,
                           const char *value, size_t nann, const char *nonce,
                           uint8_t **out) {
  Istio__Mcp__V1alpha1__SinkNode node = ISTIO__MCP__V1ALPHA1__SINK_NODE__INIT;
  Istio__Mcp__V1alpha1__SinkNode__AnnotationsEntry e[80], *ep[80];
  char keys[80][16];
  ck_assert_uint_le(nann, 80);
  for (size_t i = 0; i < nann; ++i) {
    istio__mcp__v1alpha1__sink_node__annotations_entry__init(&e[i]);
    snprintf(keys[i], sizeof(keys[i]), "k%zu", i);
    e[i].key = i == 0 && key ? (char *)key : keys[i];
    e[i].value = (char *)value;
    ep[i] = &e[i];
  }
  node.id = (char *)id;
  node.n_annotations = nann;
  node.annotations = ep;
  size_t n;
  switch (service) {
  case MCP_SERVICE_RESOURCE: {
    Istio__Mcp__V1alpha1__RequestResources r = ISTIO__MCP__V1ALPHA1__REQUEST_RESOURCES__INIT;
    r.sink_node = &node;
    r.collection = "c";
    r.response_nonce = (char *)nonce;
    *out = malloc(istio__mcp__v1alpha1__request_resources__get_packed_size(&r));
    n = istio__mcp__v1alpha1__request_resources__pack(&r, *out);
    break;
  }
  case MCP_SERVICE_AGGREGATED: {
    Istio__Mcp__V1alpha1__MeshConfigRequest r = ISTIO__MCP__V1ALPHA1__MESH_CONFIG_REQUEST__INIT;
    r.sink_node = &node;
    r.type_url = "t/c";
    r.response_nonce = (char *)nonce;
    *out = malloc(istio__mcp__v1alpha1__mesh_config_request__get_packed_size(&r));
    n = istio__mcp__v1alpha1__mesh_config_request__pack(&r, *out);
    break;
  }
  default: {
    Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest r =
        ISTIO__MCP__V1ALPHA1__INCREMENTAL_MESH_CONFIG_REQUEST__INIT;
    r.sink_node = &node;
    r.type_url = "t/c";
    r.response_nonce = (char *)nonce;
    *out = malloc(istio__mcp__v1alpha1__incremental_mesh_config_request__get_packed_size(&r));
    n = istio__mcp__v1alpha1__incremental_mesh_config_request__pack(&r, *out);
    break;
  }
  }
  return n;
}

static int node_recv(src *f, mcp_service service, const char *id, const char *key,
                     const char *value, size_t nann, const char *nonce) {
  uint8_t *b;
  size_t n = node_request(service, id, key, value, nann, nonce, &b);
  int rv = mcp_source_session_recv(f->s, b, n, ++f->ts);
  free(b);
  return rv;
}

static char *repeat(char c, size_t n) {
  char *s = malloc(n + 1);
  memset(s, c, n);
  s[n] = '\0';
  return s;
}

/* Every service: the id, an annotation's key and value and the whole node
 * are limited; breaking one is INVALID_ARGUMENT and keeps nothing. */
START_TEST(test_source_node_lengths_are_limited_on_every_service) {
  mcp_service service = (mcp_service)_i;
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.service = service;
  o.max_node_id_len = 8;
  o.max_node_key_len = 4;
  o.max_node_value_len = 6;
  o.max_node_bytes = 64;
  src f;
  src_open(&f, &o);
  ck_assert_int_eq(node_recv(&f, service, "123456789", NULL, "v", 0, ""), MCP_ERR_PROTOCOL);
  ck_assert_int_eq(node_recv(&f, service, "id", "12345", "v", 1, ""), MCP_ERR_PROTOCOL);
  ck_assert_int_eq(node_recv(&f, service, "id", "k", "1234567", 1, ""), MCP_ERR_PROTOCOL);
  /* 8 annotations of 2 + 1 + 2 + 6 + 2 bytes: 104 > 64 bytes in all. */
  ck_assert_int_eq(node_recv(&f, service, "id", NULL, "123456", 8, ""), MCP_ERR_PROTOCOL);
  ck_assert_int_eq(mcp_error_grpc_status(MCP_ERR_PROTOCOL), MCP_CODE_INVALID_ARGUMENT);
  ck_assert_str_eq(mcp_source_session_node_id(f.s), "");
  ck_assert_uint_eq(mcp_source_session_collection_count(f.s), 0);
  /* At the limits. */
  ck_assert_int_eq(node_recv(&f, service, "12345678", "1234", "123456", 3, ""), 0);
  ck_assert_str_eq(mcp_source_session_node_id(f.s), "12345678");
  ck_assert_uint_eq(mcp_source_session_node(f.s)->nannotations, 3);
  ck_assert_uint_eq(mcp_source_session_collection_count(f.s), 1);
  /* Every request is checked, not only the one whose node is kept. */
  ck_assert_int_eq(node_recv(&f, service, "123456789", NULL, "v", 0, "7"), MCP_ERR_PROTOCOL);
  src_close(&f);
}
END_TEST

/* The defaults: an Istio-like id of 1 KiB passes, one byte more does not;
 * a 4 MiB id is refused without being copied into the session. */
START_TEST(test_source_node_default_limits) {
  src f;
  src_open(&f, NULL);
  char *id = repeat('n', MCP_DEFAULT_MAX_NODE_ID_LEN + 1);
  ck_assert_int_eq(node_recv(&f, MCP_SERVICE_RESOURCE, id, NULL, "", 0, ""), MCP_ERR_PROTOCOL);
  free(id);
  char *key = repeat('k', MCP_DEFAULT_MAX_NODE_KEY_LEN + 1);
  ck_assert_int_eq(node_recv(&f, MCP_SERVICE_RESOURCE, "id", key, "", 1, ""), MCP_ERR_PROTOCOL);
  free(key);
  char *value = repeat('v', MCP_DEFAULT_MAX_NODE_VALUE_LEN + 1);
  ck_assert_int_eq(node_recv(&f, MCP_SERVICE_RESOURCE, "id", NULL, value, 1, ""), MCP_ERR_PROTOCOL);
  free(value);
  /* 9 values of 4 KiB: each fits, together they break the 32 KiB. */
  value = repeat('v', MCP_DEFAULT_MAX_NODE_VALUE_LEN);
  ck_assert_int_eq(node_recv(&f, MCP_SERVICE_RESOURCE, "id", NULL, value, 9, ""), MCP_ERR_PROTOCOL);
  free(value);
  id = repeat('n', 4u << 20);
  ck_assert_int_eq(node_recv(&f, MCP_SERVICE_RESOURCE, id, NULL, "", 0, ""), MCP_ERR_PROTOCOL);
  free(id);
  ck_assert_str_eq(mcp_source_session_node_id(f.s), "");
  id = repeat('n', MCP_DEFAULT_MAX_NODE_ID_LEN);
  value = repeat('v', MCP_DEFAULT_MAX_NODE_VALUE_LEN);
  ck_assert_int_eq(node_recv(&f, MCP_SERVICE_RESOURCE, id, NULL, value, 7, ""), 0);
  ck_assert_str_eq(mcp_source_session_node_id(f.s), id);
  free(id);
  free(value);
  src_close(&f);
}
END_TEST

/* A sink is not created with a node that a source with the default limits
 * refuses: every stream would end. */
START_TEST(test_sink_refuses_node_over_the_default_limits) {
  static const char *colls[] = {"c"};
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.collections = colls;
  o.ncollections = 1;
  mcp_sink_state *st = NULL;
  char *id = repeat('n', MCP_DEFAULT_MAX_NODE_ID_LEN + 1);
  o.node_id = id;
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), MCP_ERR_INVALID_ARGUMENT);
  id[MCP_DEFAULT_MAX_NODE_ID_LEN] = '\0';
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), 0);
  mcp_sink_state_del(st);
  st = NULL;
  char *key = repeat('k', MCP_DEFAULT_MAX_NODE_KEY_LEN + 1);
  char *value = repeat('v', MCP_DEFAULT_MAX_NODE_VALUE_LEN + 1);
  mcp_kv kv[MCP_DEFAULT_MAX_NODE_ANNOTATIONS + 1];
  char keys[MCP_DEFAULT_MAX_NODE_ANNOTATIONS + 1][8];
  for (size_t i = 0; i <= MCP_DEFAULT_MAX_NODE_ANNOTATIONS; ++i) {
    snprintf(keys[i], sizeof(keys[i]), "k%zu", i);
    kv[i].key = keys[i];
    kv[i].value = "v";
  }
  o.node_annotations = kv;
  o.nnode_annotations = MCP_DEFAULT_MAX_NODE_ANNOTATIONS + 1;
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), MCP_ERR_INVALID_ARGUMENT);
  o.nnode_annotations = 1;
  kv[0].key = key;
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), MCP_ERR_INVALID_ARGUMENT);
  kv[0].key = "k";
  kv[0].value = value;
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), MCP_ERR_INVALID_ARGUMENT);
  /* 8 values of 4 KiB: each fits, not all of them. */
  value[MCP_DEFAULT_MAX_NODE_VALUE_LEN] = '\0';
  for (size_t i = 0; i < 8; ++i) {
    kv[i].key = keys[i];
    kv[i].value = value;
  }
  o.nnode_annotations = 8;
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(st);
  o.nnode_annotations = 7;
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), 0);
  mcp_sink_state_del(st);
  free(id);
  free(key);
  free(value);
}
END_TEST

/* What the sink's node may be, a source with the default limits takes:
 * the largest node a sink can be created with passes a source. */
START_TEST(test_largest_sink_node_passes_a_default_source) {
  static const char *colls[] = {"c"};
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.collections = colls;
  o.ncollections = 1;
  char *id = repeat('n', MCP_DEFAULT_MAX_NODE_ID_LEN);
  char *value = repeat('v', MCP_DEFAULT_MAX_NODE_VALUE_LEN);
  char *last = repeat('w', 1800);
  mcp_kv kv[8];
  char keys[8][8];
  for (size_t i = 0; i < 8; ++i) {
    snprintf(keys[i], sizeof(keys[i]), "k%zu", i);
    kv[i].key = keys[i];
    kv[i].value = i < 7 ? value : last;
  }
  o.node_id = id;
  o.node_annotations = kv;
  o.nnode_annotations = 8;
  mcp_sink_state *st;
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), 0);
  mcp_sink_session *ss;
  ck_assert_int_eq(mcp_sink_session_new(&ss, st, 0), 0);
  mcp_msg *m;
  ck_assert_int_eq(mcp_sink_session_next(ss, &m), 1);
  src f;
  src_open(&f, NULL);
  size_t n = mcp_msg_len(m);
  uint8_t *b = malloc(n);
  mcp_msg_flatten(m, b);
  mcp_msg_free(m);
  ck_assert_int_eq(mcp_source_session_recv(f.s, b, n, ++f.ts), 0);
  ck_assert_str_eq(mcp_source_session_node_id(f.s), id);
  free(b);
  src_close(&f);
  mcp_sink_session_del(ss);
  mcp_sink_state_del(st);
  free(id);
  free(value);
  free(last);
}
END_TEST

/* ---- nonces (issue 12, point 12): one form, whole ---- */

typedef struct nonces {
  char *ack; /* the nonce of the last ACK event, whole */
} nonces;

static void nonce_ev(const mcp_event *ev, void *ud) {
  nonces *n = ud;
  if (ev->type == MCP_EVENT_ACK) {
    free(n->ack);
    n->ack = strdup(ev->nonce);
  }
}

/* A foreign source's nonce is kept whole in the event, the answer and the
 * journal, up to max_nonce_len; a longer one ends the stream. */
START_TEST(test_sink_long_nonce_is_whole_in_events_answer_and_journal) {
  nonces ev = {0};
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.on_event = nonce_ev;
  o.user_data = &ev;
  snk f;
  snk_open(&f, &o);
  char *nonce = repeat('x', MCP_DEFAULT_MAX_NONCE_LEN);
  memcpy(nonce, "uuid-", 5);
  const char *names[] = {"a", NULL}, *versions[] = {"1", NULL};
  ck_assert_int_eq(push(&f, nonce, 0, names, versions, NULL), 0);
  ck_assert_str_eq(ev.ack, nonce);
  mcp_journal_entry e;
  ck_assert_int_eq(mcp_sink_state_journal_entry(
                       f.st, mcp_sink_state_journal_count(f.st) - 1, &e), 0);
  ck_assert_int_eq(e.kind, MCP_EVENT_ACK);
  ck_assert_str_eq(e.nonce, nonce);
  mcp_collection_status st;
  ck_assert_int_eq(mcp_sink_state_collection_status(f.st, 0, f.ts, &st), 0);
  ck_assert_str_eq(st.last_nonce, nonce);
  /* One byte more: it cannot be answered whole; nothing changes. */
  char *longer = repeat('y', MCP_DEFAULT_MAX_NONCE_LEN + 1);
  size_t n;
  uint8_t *b = th_resources(&n, "c", longer, 0, names, versions, NULL);
  size_t nj = mcp_sink_state_journal_count(f.st);
  ck_assert_int_eq(mcp_sink_session_recv(f.s, b, n, ++f.ts), MCP_ERR_PROTOCOL);
  ck_assert_int_eq(mcp_error_grpc_status(MCP_ERR_PROTOCOL), MCP_CODE_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_sink_session_want_write(f.s), 0);
  ck_assert_uint_eq(mcp_sink_state_journal_count(f.st), nj);
  ck_assert_int_eq(mcp_sink_state_collection_status(f.st, 0, f.ts, &st), 0);
  ck_assert_str_eq(st.last_nonce, nonce);
  free(b);
  /* Also for a collection it did not ask for (it would queue a NACK). */
  b = th_resources(&n, "other", longer, 0, names, versions, NULL);
  ck_assert_int_eq(mcp_sink_session_recv(f.s, b, n, ++f.ts), MCP_ERR_PROTOCOL);
  ck_assert_int_eq(mcp_sink_session_want_write(f.s), 0);
  free(b);
  free(longer);
  free(nonce);
  free(ev.ack);
  snk_close(&f);
}
END_TEST

START_TEST(test_sink_max_nonce_len_is_an_option) {
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.max_nonce_len = 4;
  snk f;
  snk_open(&f, &o);
  const char *names[] = {"a", NULL}, *versions[] = {"1", NULL};
  ck_assert_int_eq(push(&f, "1234", 0, names, versions, NULL), 0);
  /* A NACK's nonce is the last one too. */
  const char *twice[] = {"a", "a", NULL}, *v2[] = {"1", "2", NULL};
  ck_assert_int_eq(push(&f, "5678", 0, twice, v2, NULL), MCP_CODE_INVALID_ARGUMENT);
  mcp_collection_status st;
  ck_assert_int_eq(mcp_sink_state_collection_status(f.st, 0, f.ts, &st), 0);
  ck_assert_str_eq(st.last_nonce, "5678");
  size_t n;
  uint8_t *b = th_resources(&n, "c", "12345", 0, names, versions, NULL);
  ck_assert_int_eq(mcp_sink_session_recv(f.s, b, n, ++f.ts), MCP_ERR_PROTOCOL);
  free(b);
  snk_close(&f);
}
END_TEST

/* A stray -1 is no error of ours; the fatal ones end a stream and the
 * others leave the object usable (issue 13). */
START_TEST(test_error_codes_are_far_from_minus_one_and_fatal_split) {
  ck_assert_str_eq(mcp_strerror(-1), "unknown error");
  ck_assert_int_eq(mcp_err_is_fatal(-1), 0);
  ck_assert_int_eq(mcp_err_is_fatal(0), 0);
  const int usable[] = {MCP_ERR_NOMEM, MCP_ERR_INVALID_ARGUMENT,
                        MCP_ERR_NOT_FOUND, MCP_ERR_UNSUPPORTED};
  const int fatal[] = {MCP_ERR_MALFORMED, MCP_ERR_PROTOCOL, MCP_ERR_LIMIT,
                       MCP_ERR_CLOSED,    MCP_ERR_CALLBACK, MCP_ERR_RESYNC,
                       MCP_ERR_IO};
  for (size_t i = 0; i < sizeof(usable) / sizeof(usable[0]); ++i) {
    ck_assert_int_le(usable[i], -500);
    ck_assert_int_gt(usable[i], MCP_ERR_FATAL);
    ck_assert_int_eq(mcp_err_is_fatal(usable[i]), 0);
    ck_assert_str_ne(mcp_strerror(usable[i]), "unknown error");
  }
  for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); ++i) {
    ck_assert_int_le(fatal[i], MCP_ERR_FATAL);
    ck_assert_int_eq(mcp_err_is_fatal(fatal[i]), 1);
    ck_assert_str_ne(mcp_strerror(fatal[i]), "unknown error");
  }
  ck_assert_int_eq(mcp_err_is_fatal(MCP_ERR_FATAL - 99), 0); /* not ours */
}
END_TEST

/* Versioned structs (issue 13): a version the library does not know is
 * refused for what it must read, and what it writes stays within the
 * prefix it knows. */
START_TEST(test_versioned_structs_refuse_unknown_versions_and_write_known_prefix) {
  mcp_store_options so;
  mcp_store_options_default(&so);
  so.epoch = 1;
  mcp_store *st = NULL;
  ck_assert_int_eq(mcp_store_new_versioned(&st, 0, &so), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_store_new_versioned(&st, MCP_STORE_OPTIONS_VERSION + 1, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(st);
  ck_assert_int_eq(mcp_store_new_versioned(&st, MCP_STORE_OPTIONS_V1, &so), 0);
  mcp_store_del(st);

  mcp_source_options o;
  mcp_source_options_default(&o);
  mcp_source_session *ss = NULL;
  ck_assert_int_eq(mcp_source_session_new_versioned(&ss, 7, &o, 0),
                   MCP_ERR_INVALID_ARGUMENT);
  mcp_sink_state *sk = NULL;
  mcp_sink_options ko;
  mcp_sink_options_default(&ko);
  ck_assert_int_eq(mcp_sink_state_new_versioned(&sk, -1, &ko),
                   MCP_ERR_INVALID_ARGUMENT);

  /* A caller built against a newer header: the library fills what it
   * knows and leaves the rest of the caller's struct alone. */
  struct {
    mcp_admit_stats known;
    unsigned char newer[32];
  } big;
  memset(&big, 0xab, sizeof(big));
  mcp_admit *a = NULL;
  ck_assert_int_eq(mcp_admit_new(&a, NULL, NULL, 0), 0);
  mcp_admit_get_stats_versioned(a, MCP_ADMIT_STATS_VERSION + 5, &big.known);
  ck_assert_uint_eq(big.known.streams, 0);
  for (size_t i = 0; i < sizeof(big.newer); ++i) {
    ck_assert_uint_eq(big.newer[i], 0xab);
  }
  mcp_admit_del(a);

  mcp_resource_limits lim;
  memset(&lim, 0, sizeof(lim));
  mcp_resource_limits_default_versioned(0, &lim); /* writes nothing */
  ck_assert_uint_eq(lim.max_name_len, 0);
  mcp_resource_limits_default(&lim);
  ck_assert_uint_eq(lim.max_name_len, MCP_DEFAULT_MAX_NAME_LEN);
}
END_TEST

int main(void) {
  Suite *s = suite_create("core_limits");
  TCase *t = tcase_create("limits");
  tcase_add_test(t, test_error_codes_are_far_from_minus_one_and_fatal_split);
  tcase_add_test(t, test_versioned_structs_refuse_unknown_versions_and_write_known_prefix);
  tcase_add_test(t, test_store_lenient_names_by_default);
  tcase_add_test(t, test_store_strict_names_are_dns_labels);
  tcase_add_test(t, test_store_any_names_accepts_utf8);
  tcase_add_test(t, test_store_name_and_version_lengths);
  tcase_add_test(t, test_store_max_resources_is_limit_and_changes_nothing);
  tcase_add_test(t, test_source_max_collections_is_limit);
  tcase_add_test(t, test_source_max_initial_versions_is_limit);
  tcase_add_test(t, test_source_long_names_are_protocol_errors);
  tcase_add_test(t, test_source_node_annotations_are_limited);
  tcase_add_test(t, test_source_request_rate_limits_new_and_stale_requests);
  tcase_add_test(t, test_source_acks_never_consume_tokens);
  tcase_add_test(t, test_sink_max_resources_full_state_nacks);
  tcase_add_test(t, test_sink_max_resources_counts_what_incremental_leaves);
  tcase_add_test(t, test_sink_names_versions_and_metadata_are_checked);
  tcase_add_test(t, test_sink_lenient_names_reject_spaces);
  tcase_add_test(t, test_sink_max_metadata_nacks);
  tcase_add_loop_test(t, test_source_node_lengths_are_limited_on_every_service,
                      MCP_SERVICE_RESOURCE, MCP_SERVICE_AGGREGATED_INCREMENTAL + 1);
  tcase_add_test(t, test_source_node_default_limits);
  tcase_add_test(t, test_sink_refuses_node_over_the_default_limits);
  tcase_add_test(t, test_largest_sink_node_passes_a_default_source);
  tcase_add_test(t, test_sink_long_nonce_is_whole_in_events_answer_and_journal);
  tcase_add_test(t, test_sink_max_nonce_len_is_an_option);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
