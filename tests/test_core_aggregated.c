/*
 * The aggregated services on the same engine: StreamAggregatedResources
 * (MeshConfigRequest/Response, full state per type_url) and
 * IncrementalAggregatedResources (differences, resumption).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"
#include "engine_int.h"

#define VS_TYPE "type.googleapis.com/istio.networking.v1alpha3.VirtualService"
#define VS_COLL "istio/networking/v1alpha3/virtualservices"
#define DR_TYPE "type.googleapis.com/istio.networking.v1alpha3.DestinationRule"
#define DR_COLL "istio/networking/v1alpha3/destinationrules"

typedef Istio__Mcp__V1alpha1__MeshConfigResponse MCResp;
typedef Istio__Mcp__V1alpha1__IncrementalMeshConfigResponse IMCResp;

typedef struct fx {
  mcp_store *store;
  mcp_source_session *s;
  mcp_tstamp ts;
  th_evlog ev;
} fx;

static fx *fx_open(mcp_service service) {
  fx *f = calloc(1, sizeof(*f));
  f->store = th_store(NULL);
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.store = f->store;
  o.service = service;
  o.on_event = th_evlog_cb;
  o.user_data = &f->ev;
  ck_assert_int_eq(mcp_source_session_new(&f->s, &o, 0), 0);
  return f;
}

static void fx_free(fx *f) {
  mcp_source_session_del(f->s);
  mcp_store_del(f->store);
  free(f);
}

static void put(fx *f, const char *coll, const char *name, const char *ver) {
  th_put(f->store, coll, name, ver, name, ++f->ts);
}

/* Sends a MeshConfigRequest. */
static int send_mc(fx *f, const char *type_url, const char *version,
                   const char *nonce, int code) {
  Istio__Mcp__V1alpha1__MeshConfigRequest r = ISTIO__MCP__V1ALPHA1__MESH_CONFIG_REQUEST__INIT;
  Istio__Mcp__V1alpha1__SinkNode node = ISTIO__MCP__V1ALPHA1__SINK_NODE__INIT;
  Google__Rpc__Status st = GOOGLE__RPC__STATUS__INIT;
  node.id = "agg-sink";
  r.sink_node = &node;
  r.type_url = (char *)type_url;
  r.version_info = (char *)version;
  r.response_nonce = (char *)nonce;
  if (code) {
    st.code = code;
    st.message = "rejected";
    r.error_detail = &st;
  }
  uint8_t buf[1024];
  size_t n = istio__mcp__v1alpha1__mesh_config_request__pack(&r, buf);
  return mcp_source_session_recv(f->s, buf, n, ++f->ts);
}

/* Sends an IncrementalMeshConfigRequest; |initial| as in th_request. */
static int send_imc(fx *f, const char *type_url, const char *nonce,
                    const char *const *initial, int code) {
  Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest r =
      ISTIO__MCP__V1ALPHA1__INCREMENTAL_MESH_CONFIG_REQUEST__INIT;
  Google__Rpc__Status st = GOOGLE__RPC__STATUS__INIT;
  Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest__InitialResourceVersionsEntry e[8];
  Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest__InitialResourceVersionsEntry *ep[8];
  size_t ni = 0;
  while (initial && initial[2 * ni]) {
    istio__mcp__v1alpha1__incremental_mesh_config_request__initial_resource_versions_entry__init(&e[ni]);
    e[ni].key = (char *)initial[2 * ni];
    e[ni].value = (char *)initial[2 * ni + 1];
    ep[ni] = &e[ni];
    ni++;
  }
  r.type_url = (char *)type_url;
  r.response_nonce = (char *)nonce;
  r.n_initial_resource_versions = ni;
  r.initial_resource_versions = ep;
  if (code) {
    st.code = code;
    st.message = "rejected";
    r.error_detail = &st;
  }
  uint8_t buf[4096];
  size_t n = istio__mcp__v1alpha1__incremental_mesh_config_request__pack(&r, buf);
  return mcp_source_session_recv(f->s, buf, n, ++f->ts);
}

static uint8_t *flat(mcp_msg *m, size_t *n) {
  *n = mcp_msg_len(m);
  uint8_t *b = malloc(*n ? *n : 1);
  mcp_msg_flatten(m, b);
  mcp_msg_free(m);
  return b;
}

static MCResp *next_mc(fx *f) {
  mcp_msg *m = NULL;
  int rv = mcp_source_session_next(f->s, ++f->ts, &m);
  ck_assert_int_ge(rv, 0);
  if (!rv) {
    return NULL;
  }
  size_t n;
  uint8_t *b = flat(m, &n);
  MCResp *r = istio__mcp__v1alpha1__mesh_config_response__unpack(NULL, n, b);
  free(b);
  ck_assert_ptr_nonnull(r);
  return r;
}

static IMCResp *next_imc(fx *f) {
  mcp_msg *m = NULL;
  int rv = mcp_source_session_next(f->s, ++f->ts, &m);
  ck_assert_int_ge(rv, 0);
  if (!rv) {
    return NULL;
  }
  size_t n;
  uint8_t *b = flat(m, &n);
  IMCResp *r = istio__mcp__v1alpha1__incremental_mesh_config_response__unpack(NULL, n, b);
  free(b);
  ck_assert_ptr_nonnull(r);
  return r;
}

static int has(Istio__Mcp__V1alpha1__Resource **res, size_t n, const char *name) {
  for (size_t i = 0; i < n; ++i) {
    if (strcmp(res[i]->metadata->name, name) == 0) {
      return 1;
    }
  }
  return 0;
}

/* ---- StreamAggregatedResources ---- */

START_TEST(test_sar_answers_full_state_keyed_by_type_url) {
  fx *f = fx_open(MCP_SERVICE_AGGREGATED);
  put(f, VS_COLL, "default/a", "1");
  put(f, VS_COLL, "default/b", "1");
  ck_assert_int_eq(send_mc(f, VS_TYPE, "", "", 0), 0);
  MCResp *r = next_mc(f);
  ck_assert_ptr_nonnull(r);
  ck_assert_str_eq(r->type_url, VS_TYPE);
  ck_assert_str_eq(r->nonce, "1");
  ck_assert_uint_eq(r->n_resources, 2);
  ck_assert(has(r->resources, r->n_resources, "default/a"));
  ck_assert(has(r->resources, r->n_resources, "default/b"));
  ck_assert_str_eq(r->resources[0]->body->type_url, "type.googleapis.com/test.Body");
  char want[48];
  mcp_format_version(want, sizeof(want), 0x1234, mcp_store_generation(f->store, VS_COLL));
  ck_assert_str_eq(r->version_info, want);
  istio__mcp__v1alpha1__mesh_config_response__free_unpacked(r, NULL);
  fx_free(f);
}
END_TEST

START_TEST(test_sar_empty_type_is_answered) {
  fx *f = fx_open(MCP_SERVICE_AGGREGATED);
  mcp_store_add_collection(f->store, DR_COLL);
  ck_assert_int_eq(send_mc(f, DR_TYPE, "", "", 0), 0);
  MCResp *r = next_mc(f);
  ck_assert_ptr_nonnull(r);
  ck_assert_uint_eq(r->n_resources, 0);
  ck_assert_str_eq(r->type_url, DR_TYPE);
  istio__mcp__v1alpha1__mesh_config_response__free_unpacked(r, NULL);
  fx_free(f);
}
END_TEST

START_TEST(test_sar_pushes_are_always_full_state) {
  fx *f = fx_open(MCP_SERVICE_AGGREGATED);
  put(f, VS_COLL, "a", "1");
  put(f, VS_COLL, "b", "1");
  send_mc(f, VS_TYPE, "", "", 0);
  MCResp *r = next_mc(f);
  ck_assert_int_eq(send_mc(f, VS_TYPE, r->version_info, r->nonce, 0), 0);
  istio__mcp__v1alpha1__mesh_config_response__free_unpacked(r, NULL);
  mcp_store_delete(f->store, VS_COLL, "b", ++f->ts);
  put(f, VS_COLL, "c", "1");
  r = next_mc(f);
  ck_assert_ptr_nonnull(r);
  ck_assert_uint_eq(r->n_resources, 2); /* a and c: the whole state */
  ck_assert(has(r->resources, r->n_resources, "a"));
  ck_assert(has(r->resources, r->n_resources, "c"));
  istio__mcp__v1alpha1__mesh_config_response__free_unpacked(r, NULL);
  fx_free(f);
}
END_TEST

START_TEST(test_sar_one_push_in_flight_per_type) {
  fx *f = fx_open(MCP_SERVICE_AGGREGATED);
  put(f, VS_COLL, "a", "1");
  put(f, DR_COLL, "d", "1");
  send_mc(f, VS_TYPE, "", "", 0);
  send_mc(f, DR_TYPE, "", "", 0);
  MCResp *r1 = next_mc(f), *r2 = next_mc(f);
  ck_assert_ptr_nonnull(r1);
  ck_assert_ptr_nonnull(r2);
  ck_assert_str_ne(r1->type_url, r2->type_url);
  put(f, VS_COLL, "a", "2");
  put(f, DR_COLL, "d", "2");
  ck_assert_ptr_null(next_mc(f)); /* both in flight */
  MCResp *vs = strcmp(r1->type_url, VS_TYPE) == 0 ? r1 : r2;
  send_mc(f, VS_TYPE, vs->version_info, vs->nonce, 0);
  MCResp *r3 = next_mc(f);
  ck_assert_ptr_nonnull(r3);
  ck_assert_str_eq(r3->type_url, VS_TYPE); /* DR still waits for its ACK */
  ck_assert_ptr_null(next_mc(f));
  istio__mcp__v1alpha1__mesh_config_response__free_unpacked(r1, NULL);
  istio__mcp__v1alpha1__mesh_config_response__free_unpacked(r2, NULL);
  istio__mcp__v1alpha1__mesh_config_response__free_unpacked(r3, NULL);
  fx_free(f);
}
END_TEST

/* istio/istio#12023: Istio 1.1 answered a NACK by pushing the rejected
 * version again at once, and sink and source looped. */
START_TEST(test_sar_nack_is_not_answered_with_the_same_push) {
  fx *f = fx_open(MCP_SERVICE_AGGREGATED);
  put(f, VS_COLL, "a", "1");
  send_mc(f, VS_TYPE, "", "", 0);
  MCResp *r = next_mc(f);
  /* The sink rejects it, reporting the version it still runs ("" here). */
  ck_assert_int_eq(send_mc(f, VS_TYPE, "", r->nonce, MCP_CODE_INVALID_ARGUMENT), 0);
  for (int i = 0; i < 5; ++i) {
    ck_assert_int_eq(mcp_source_session_want_write(f->s, ++f->ts), 0);
    ck_assert_ptr_null(next_mc(f));
  }
  mcp_collection_status st;
  mcp_source_session_collection_status(f->s, 0, f->ts, &st);
  ck_assert_int_eq(st.nacks, 1);
  ck_assert_uint_eq(st.pushes, 1);
  ck_assert_str_eq(st.type_url, VS_TYPE);
  ck_assert_str_eq(st.collection, VS_COLL);
  /* A new version is pushed. */
  put(f, VS_COLL, "a", "2");
  MCResp *r2 = next_mc(f);
  ck_assert_ptr_nonnull(r2);
  ck_assert_str_ne(r2->version_info, r->version_info);
  istio__mcp__v1alpha1__mesh_config_response__free_unpacked(r, NULL);
  istio__mcp__v1alpha1__mesh_config_response__free_unpacked(r2, NULL);
  fx_free(f);
}
END_TEST

START_TEST(test_sar_stale_nonce_is_ignored) {
  fx *f = fx_open(MCP_SERVICE_AGGREGATED);
  put(f, VS_COLL, "a", "1");
  send_mc(f, VS_TYPE, "", "", 0);
  MCResp *r = next_mc(f);
  ck_assert_int_eq(send_mc(f, VS_TYPE, "", "99", 0), 0);
  ck_assert_int_eq(th_evlog_count(&f->ev, MCP_EVENT_STALE), 1);
  mcp_collection_status st;
  mcp_source_session_collection_status(f->s, 0, f->ts, &st);
  ck_assert_str_eq(st.pending_nonce, r->nonce); /* still pending */
  istio__mcp__v1alpha1__mesh_config_response__free_unpacked(r, NULL);
  fx_free(f);
}
END_TEST

static size_t upper_map(const char *type_url, char *buf, size_t len, void *ud) {
  (void)ud;
  (void)type_url;
  const char *c = "custom";
  if (len) {
    strncpy(buf, c, len - 1);
    buf[len - 1] = '\0';
  }
  return strlen(c);
}

START_TEST(test_sar_type_mapping_is_configurable) {
  mcp_store *st = th_store(NULL);
  th_put(st, "custom", "x", "1", "X", 1);
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.store = st;
  o.service = MCP_SERVICE_AGGREGATED;
  o.collection_for_type = upper_map;
  mcp_source_session *s;
  ck_assert_int_eq(mcp_source_session_new(&s, &o, 0), 0);
  fx f = {.store = st, .s = s, .ts = 1};
  send_mc(&f, "type.googleapis.com/any.Thing", "", "", 0);
  MCResp *r = next_mc(&f);
  ck_assert_ptr_nonnull(r);
  ck_assert_uint_eq(r->n_resources, 1);
  ck_assert_str_eq(r->type_url, "type.googleapis.com/any.Thing");
  istio__mcp__v1alpha1__mesh_config_response__free_unpacked(r, NULL);
  mcp_source_session_del(s);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_sar_unknown_type_keeps_stream) {
  fx *f = fx_open(MCP_SERVICE_AGGREGATED);
  put(f, VS_COLL, "a", "1");
  ck_assert_int_eq(send_mc(f, "type.googleapis.com/no.Such", "", "", 0), 0);
  ck_assert_int_eq(send_mc(f, VS_TYPE, "", "", 0), 0);
  MCResp *r = next_mc(f);
  ck_assert_ptr_nonnull(r);
  ck_assert_str_eq(r->type_url, VS_TYPE);
  ck_assert_ptr_null(next_mc(f));
  ck_assert_int_eq(th_evlog_count(&f->ev, MCP_EVENT_UNKNOWN_COLLECTION), 1);
  istio__mcp__v1alpha1__mesh_config_response__free_unpacked(r, NULL);
  fx_free(f);
}
END_TEST

START_TEST(test_sar_malformed_request_is_an_error) {
  fx *f = fx_open(MCP_SERVICE_AGGREGATED);
  const uint8_t junk[] = {0x0a, 0x05, 'a'};
  ck_assert_int_eq(mcp_source_session_recv(f->s, junk, sizeof(junk), 1), MCP_ERR_MALFORMED);
  ck_assert_int_eq(send_mc(f, "", "", "", 0), MCP_ERR_PROTOCOL);
  fx_free(f);
}
END_TEST

/* ---- IncrementalAggregatedResources ---- */

START_TEST(test_iar_first_request_without_versions_gets_everything) {
  fx *f = fx_open(MCP_SERVICE_AGGREGATED_INCREMENTAL);
  put(f, VS_COLL, "a", "1");
  put(f, VS_COLL, "b", "1");
  ck_assert_int_eq(send_imc(f, VS_TYPE, "", NULL, 0), 0);
  IMCResp *r = next_imc(f);
  ck_assert_ptr_nonnull(r);
  ck_assert_uint_eq(r->n_resources, 2);
  ck_assert_uint_eq(r->n_removed_resources, 0);
  ck_assert_str_eq(r->nonce, "1:" VS_TYPE); /* the type rides in the nonce */
  istio__mcp__v1alpha1__incremental_mesh_config_response__free_unpacked(r, NULL);
  fx_free(f);
}
END_TEST

START_TEST(test_iar_resumes_from_initial_versions) {
  fx *f = fx_open(MCP_SERVICE_AGGREGATED_INCREMENTAL);
  put(f, VS_COLL, "same", "1");
  put(f, VS_COLL, "changed", "2");
  put(f, VS_COLL, "new", "1");
  const char *held[] = {"same", "1", "changed", "1", "gone", "1", NULL};
  ck_assert_int_eq(send_imc(f, VS_TYPE, "", held, 0), 0);
  IMCResp *r = next_imc(f);
  ck_assert_ptr_nonnull(r);
  ck_assert_uint_eq(r->n_resources, 2);
  ck_assert(has(r->resources, r->n_resources, "changed"));
  ck_assert(has(r->resources, r->n_resources, "new"));
  ck_assert_uint_eq(r->n_removed_resources, 1);
  ck_assert_str_eq(r->removed_resources[0], "gone");
  istio__mcp__v1alpha1__incremental_mesh_config_response__free_unpacked(r, NULL);
  fx_free(f);
}
END_TEST

START_TEST(test_iar_ack_then_only_changes) {
  fx *f = fx_open(MCP_SERVICE_AGGREGATED_INCREMENTAL);
  put(f, VS_COLL, "a", "1");
  put(f, VS_COLL, "b", "1");
  send_imc(f, VS_TYPE, "", NULL, 0);
  IMCResp *r = next_imc(f);
  ck_assert_int_eq(send_imc(f, VS_TYPE, r->nonce, NULL, 0), 0);
  ck_assert_int_eq(th_evlog_count(&f->ev, MCP_EVENT_ACK), 1);
  istio__mcp__v1alpha1__incremental_mesh_config_response__free_unpacked(r, NULL);
  put(f, VS_COLL, "a", "2");
  mcp_store_delete(f->store, VS_COLL, "b", ++f->ts);
  r = next_imc(f);
  ck_assert_ptr_nonnull(r);
  ck_assert_uint_eq(r->n_resources, 1);
  ck_assert_str_eq(r->resources[0]->metadata->name, "a");
  ck_assert_uint_eq(r->n_removed_resources, 1);
  ck_assert_str_eq(r->removed_resources[0], "b");
  istio__mcp__v1alpha1__incremental_mesh_config_response__free_unpacked(r, NULL);
  fx_free(f);
}
END_TEST

START_TEST(test_iar_nonce_of_another_type_is_stale) {
  fx *f = fx_open(MCP_SERVICE_AGGREGATED_INCREMENTAL);
  put(f, VS_COLL, "a", "1");
  send_imc(f, VS_TYPE, "", NULL, 0);
  IMCResp *r = next_imc(f);
  ck_assert_int_eq(send_imc(f, VS_TYPE, "1:" DR_TYPE, NULL, 0), 0);
  ck_assert_int_eq(send_imc(f, VS_TYPE, "1", NULL, 0), 0);
  ck_assert_int_eq(th_evlog_count(&f->ev, MCP_EVENT_STALE), 2);
  ck_assert_int_eq(th_evlog_count(&f->ev, MCP_EVENT_ACK), 0);
  istio__mcp__v1alpha1__incremental_mesh_config_response__free_unpacked(r, NULL);
  fx_free(f);
}
END_TEST


/* Issue 12, point 12: the status showed "<number>" where the push and its
 * events said "<number>:<type_url>", and cut it at 23 bytes. One form,
 * whole, everywhere. */
static char push_nonce[1024];
static void push_nonce_cb(const mcp_event *ev, void *ud) {
  (void)ud;
  if (ev->type == MCP_EVENT_PUSH) {
    snprintf(push_nonce, sizeof(push_nonce), "%s", ev->nonce);
  }
}

START_TEST(test_iar_status_nonce_is_the_wire_nonce_whole) {
  /* A type URL of 300 bytes: within max_name_len, far past 23. */
  char type_url[320] = "type.googleapis.com/";
  size_t l = strlen(type_url);
  while (l < 300) {
    type_url[l++] = 'a';
  }
  type_url[l] = '\0';
  char coll[512];
  mcp_collection_for_type_url(type_url, coll, sizeof(coll));
  mcp_store *store = th_store(NULL);
  th_put(store, coll, "a", "1", "A", 1);
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.store = store;
  o.service = MCP_SERVICE_AGGREGATED_INCREMENTAL;
  o.on_event = push_nonce_cb;
  fx f = {.store = store, .ts = 1};
  ck_assert_int_eq(mcp_source_session_new(&f.s, &o, 1), 0);
  ck_assert_int_eq(send_imc(&f, type_url, "", NULL, 0), 0);
  IMCResp *r = next_imc(&f);
  ck_assert_ptr_nonnull(r);
  ck_assert_uint_gt(strlen(r->nonce), 300);
  ck_assert_str_eq(push_nonce, r->nonce);
  mcp_collection_status st;
  ck_assert_int_eq(mcp_source_session_collection_status(f.s, 0, f.ts, &st), 0);
  ck_assert_str_eq(st.pending_nonce, r->nonce);
  ck_assert_str_eq(st.type_url, type_url);
  /* The sink answers with that form: an ACK. */
  ck_assert_int_eq(send_imc(&f, type_url, st.pending_nonce, NULL, 0), 0);
  ck_assert_int_eq(mcp_source_session_collection_status(f.s, 0, f.ts, &st), 0);
  ck_assert_uint_eq(st.acks, 1);
  ck_assert_str_eq(st.pending_nonce, "");
  istio__mcp__v1alpha1__incremental_mesh_config_response__free_unpacked(r, NULL);
  mcp_source_session_del(f.s);
  mcp_store_del(store);
}
END_TEST

START_TEST(test_iar_nack_does_not_resend) {
  fx *f = fx_open(MCP_SERVICE_AGGREGATED_INCREMENTAL);
  put(f, VS_COLL, "a", "1");
  send_imc(f, VS_TYPE, "", NULL, 0);
  IMCResp *r = next_imc(f);
  ck_assert_int_eq(send_imc(f, VS_TYPE, r->nonce, NULL, MCP_CODE_INVALID_ARGUMENT), 0);
  ck_assert_ptr_null(next_imc(f));
  istio__mcp__v1alpha1__incremental_mesh_config_response__free_unpacked(r, NULL);
  put(f, VS_COLL, "b", "1");
  r = next_imc(f);
  ck_assert_ptr_nonnull(r);
  /* The sink still holds nothing: both are sent. */
  ck_assert_uint_eq(r->n_resources, 2);
  istio__mcp__v1alpha1__incremental_mesh_config_response__free_unpacked(r, NULL);
  fx_free(f);
}
END_TEST

START_TEST(test_iar_behind_compaction_asks_to_resync) {
  fx *f = fx_open(MCP_SERVICE_AGGREGATED_INCREMENTAL);
  put(f, VS_COLL, "keep", "1");
  send_imc(f, VS_TYPE, "", NULL, 0);
  IMCResp *r = next_imc(f);
  send_imc(f, VS_TYPE, r->nonce, NULL, 0);
  istio__mcp__v1alpha1__incremental_mesh_config_response__free_unpacked(r, NULL);
  /* Many creations and deletions: tombstones outnumber live resources and
   * are dropped. */
  char name[32];
  for (int i = 0; i < 300; ++i) {
    snprintf(name, sizeof(name), "tmp-%d", i);
    put(f, VS_COLL, name, "1");
  }
  for (int i = 0; i < 300; ++i) {
    snprintf(name, sizeof(name), "tmp-%d", i);
    mcp_store_delete(f->store, VS_COLL, name, ++f->ts);
  }
  mcp_msg *m = NULL;
  ck_assert_int_eq(mcp_source_session_next(f->s, ++f->ts, &m), MCP_ERR_RESYNC);
  ck_assert_ptr_null(m);
  ck_assert_int_eq(mcp_error_grpc_status(MCP_ERR_RESYNC), 10);
  fx_free(f);
}
END_TEST

/* ---- sink side, and both ends together ---- */

typedef struct pair {
  mcp_store *store;
  mcp_source_session *src;
  mcp_sink_state *state;
  mcp_sink_session *snk;
  mcp_tstamp ts;
  int reject; /* the sink rejects the next change */
} pair;

static int apply_cb(const mcp_change *ch, char *msg, size_t len, void *ud) {
  pair *p = ud;
  (void)ch;
  if (p->reject) {
    p->reject = 0;
    strncpy(msg, "not today", len);
    return MCP_CODE_INVALID_ARGUMENT;
  }
  return 0;
}

static void pair_open(pair *p, mcp_service service) {
  memset(p, 0, sizeof(*p));
  p->store = th_store(NULL);
  static const char *types[] = {VS_TYPE, DR_TYPE};
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.service = service;
  so.collections = types;
  so.ncollections = 2;
  so.node_id = "pair";
  so.apply = apply_cb;
  so.user_data = p;
  ck_assert_int_eq(mcp_sink_state_new(&p->state, &so), 0);
}

static void pair_connect(pair *p, mcp_service service) {
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.store = p->store;
  o.service = service;
  ck_assert_int_eq(mcp_source_session_new(&p->src, &o, p->ts), 0);
  ck_assert_int_eq(mcp_sink_session_new(&p->snk, p->state, p->ts), 0);
}

static void pair_disconnect(pair *p) {
  mcp_source_session_del(p->src);
  mcp_sink_session_del(p->snk);
  p->src = NULL;
  p->snk = NULL;
}

/* Delivers messages both ways until nothing moves. */
static void pair_settle(pair *p) {
  for (int moved = 1; moved;) {
    moved = 0;
    mcp_msg *m;
    while (mcp_sink_session_next(p->snk, &m) == 1) {
      size_t n;
      uint8_t *b = flat(m, &n);
      ck_assert_int_eq(mcp_source_session_recv(p->src, b, n, ++p->ts), 0);
      free(b);
      moved = 1;
    }
    while (mcp_source_session_want_write(p->src, ++p->ts) &&
           mcp_source_session_next(p->src, p->ts, &m) == 1) {
      size_t n;
      uint8_t *b = flat(m, &n);
      ck_assert_int_eq(mcp_sink_session_recv(p->snk, b, n, ++p->ts), 0);
      free(b);
      moved = 1;
    }
  }
}

typedef struct cmp {
  const mcp_sink_state *state;
  const char *type;
  size_t n;
} cmp;

static void same_cb(const char *name, const char *version, void *ud) {
  cmp *c = ud;
  const char *held = mcp_sink_state_version(c->state, c->type, name);
  ck_assert_msg(held && strcmp(held, version) == 0, "%s: %s held %s", name,
                version, held ? held : "nothing");
  c->n++;
}

static void assert_converged(pair *p) {
  const char *types[] = {VS_TYPE, DR_TYPE}, *colls[] = {VS_COLL, DR_COLL};
  for (int i = 0; i < 2; ++i) {
    cmp c = {p->state, types[i], 0};
    mcp_store_foreach(p->store, colls[i], same_cb, &c);
    ck_assert_uint_eq(c.n, mcp_sink_state_count(p->state, types[i]));
  }
}

static void pair_close(pair *p) {
  pair_disconnect(p);
  mcp_sink_state_del(p->state);
  mcp_store_del(p->store);
}

START_TEST(test_aggregated_sink_and_source_converge) {
  mcp_service service = _i ? MCP_SERVICE_AGGREGATED_INCREMENTAL : MCP_SERVICE_AGGREGATED;
  pair p;
  pair_open(&p, service);
  mcp_store_add_collection(p.store, VS_COLL);
  mcp_store_add_collection(p.store, DR_COLL);
  pair_connect(&p, service);
  uint64_t seed = 42;
  char name[16], ver[16];
  for (int round = 0; round < 60; ++round) {
    uint8_t r[4];
    th_rand(r, sizeof(r), &seed);
    const char *coll = r[0] & 1 ? VS_COLL : DR_COLL;
    snprintf(name, sizeof(name), "r%d", r[1] % 12);
    snprintf(ver, sizeof(ver), "v%d", round);
    if (r[2] % 4 == 0) {
      mcp_store_delete(p.store, coll, name, ++p.ts);
    } else {
      th_put(p.store, coll, name, ver, ver, ++p.ts);
    }
    if (r[3] % 9 == 0) {
      p.reject = 1;
    }
    if (r[3] % 13 == 0) { /* reconnect: the sink resumes */
      pair_disconnect(&p);
      pair_connect(&p, service);
    }
    pair_settle(&p);
  }
  p.reject = 0;
  th_put(p.store, VS_COLL, "final", "vf", "F", ++p.ts); /* after any NACK */
  th_put(p.store, DR_COLL, "final", "vf", "F", ++p.ts);
  pair_settle(&p);
  assert_converged(&p);
  ck_assert(mcp_sink_state_synced(p.state));
  pair_close(&p);
}
END_TEST

START_TEST(test_sar_sink_reports_last_good_version_on_nack) {
  pair p;
  pair_open(&p, MCP_SERVICE_AGGREGATED);
  th_put(p.store, VS_COLL, "a", "1", "A", ++p.ts);
  mcp_store_add_collection(p.store, DR_COLL);
  pair_connect(&p, MCP_SERVICE_AGGREGATED);
  pair_settle(&p);
  mcp_collection_status st;
  mcp_sink_state_collection_status(p.state, 0, p.ts, &st);
  char good[48];
  strcpy(good, st.acked_version);
  ck_assert_str_ne(good, "");
  /* Reject the next version: the NACK carries the previous good one. */
  p.reject = 1;
  th_put(p.store, VS_COLL, "a", "2", "A2", ++p.ts);
  mcp_msg *m;
  ck_assert_int_eq(mcp_source_session_next(p.src, ++p.ts, &m), 1);
  size_t n;
  uint8_t *b = flat(m, &n);
  ck_assert_int_eq(mcp_sink_session_recv(p.snk, b, n, ++p.ts), 0);
  free(b);
  ck_assert_int_eq(mcp_sink_session_next(p.snk, &m), 1);
  b = flat(m, &n);
  Istio__Mcp__V1alpha1__MeshConfigRequest *q =
      istio__mcp__v1alpha1__mesh_config_request__unpack(NULL, n, b);
  free(b);
  ck_assert_ptr_nonnull(q);
  ck_assert_ptr_nonnull(q->error_detail);
  ck_assert_str_eq(q->version_info, good);
  ck_assert_str_eq(q->type_url, VS_TYPE);
  ck_assert_str_eq(q->sink_node->id, "pair");
  istio__mcp__v1alpha1__mesh_config_request__free_unpacked(q, NULL);
  pair_close(&p);
}
END_TEST

START_TEST(test_iar_sink_sends_held_versions_on_reconnect) {
  pair p;
  pair_open(&p, MCP_SERVICE_AGGREGATED_INCREMENTAL);
  th_put(p.store, VS_COLL, "a", "1", "A", ++p.ts);
  th_put(p.store, VS_COLL, "b", "1", "B", ++p.ts);
  mcp_store_add_collection(p.store, DR_COLL);
  pair_connect(&p, MCP_SERVICE_AGGREGATED_INCREMENTAL);
  pair_settle(&p);
  pair_disconnect(&p);
  mcp_store_delete(p.store, VS_COLL, "b", ++p.ts); /* while away */
  pair_connect(&p, MCP_SERVICE_AGGREGATED_INCREMENTAL);
  mcp_msg *m;
  ck_assert_int_eq(mcp_sink_session_next(p.snk, &m), 1);
  size_t n;
  uint8_t *b = flat(m, &n);
  Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest *q =
      istio__mcp__v1alpha1__incremental_mesh_config_request__unpack(NULL, n, b);
  ck_assert_ptr_nonnull(q);
  ck_assert_str_eq(q->type_url, VS_TYPE);
  ck_assert_uint_eq(q->n_initial_resource_versions, 2);
  istio__mcp__v1alpha1__incremental_mesh_config_request__free_unpacked(q, NULL);
  ck_assert_int_eq(mcp_source_session_recv(p.src, b, n, ++p.ts), 0);
  free(b);
  pair_settle(&p);
  ck_assert_ptr_null(mcp_sink_state_version(p.state, VS_TYPE, "b"));
  assert_converged(&p);
  pair_close(&p);
}
END_TEST

/* A sink alone on IncrementalAggregatedResources, asking for the first
 * |ntypes| of VS_TYPE, DR_TYPE; its initial requests discarded. */
static void iar_sink_alone(pair *p, size_t ntypes) {
  memset(p, 0, sizeof(*p));
  static const char *types[] = {VS_TYPE, DR_TYPE};
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.service = MCP_SERVICE_AGGREGATED_INCREMENTAL;
  so.collections = types;
  so.ncollections = ntypes;
  so.apply = apply_cb;
  so.user_data = p;
  ck_assert_int_eq(mcp_sink_state_new(&p->state, &so), 0);
  ck_assert_int_eq(mcp_sink_session_new(&p->snk, p->state, p->ts), 0);
  mcp_msg *m;
  while (mcp_sink_session_next(p->snk, &m) == 1) {
    mcp_msg_free(m);
  }
}

/* Feeds a response with |nonce| and, when |type|, one resource |name| of
 * that body type; returns the sink's answer (decoded). */
static Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest *
iar_feed(pair *p, const char *nonce, const char *type, const char *name) {
  IMCResp r = ISTIO__MCP__V1ALPHA1__INCREMENTAL_MESH_CONFIG_RESPONSE__INIT;
  Istio__Mcp__V1alpha1__Resource res = ISTIO__MCP__V1ALPHA1__RESOURCE__INIT;
  Istio__Mcp__V1alpha1__Metadata md = ISTIO__MCP__V1ALPHA1__METADATA__INIT;
  Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
  Istio__Mcp__V1alpha1__Resource *rp = &res;
  r.nonce = (char *)nonce;
  r.system_version_info = "sv";
  if (type) {
    md.name = (char *)name;
    md.version = "1";
    any.type_url = (char *)type;
    any.value.data = (uint8_t *)"x";
    any.value.len = 1;
    res.metadata = &md;
    res.body = &any;
    r.n_resources = 1;
    r.resources = &rp;
  }
  uint8_t buf[512];
  size_t n = istio__mcp__v1alpha1__incremental_mesh_config_response__get_packed_size(&r);
  ck_assert_uint_le(n, sizeof(buf));
  istio__mcp__v1alpha1__incremental_mesh_config_response__pack(&r, buf);
  ck_assert_int_eq(mcp_sink_session_recv(p->snk, buf, n, ++p->ts), 0);
  mcp_msg *m;
  ck_assert_int_eq(mcp_sink_session_next(p->snk, &m), 1);
  uint8_t *b = flat(m, &n);
  Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest *q =
      istio__mcp__v1alpha1__incremental_mesh_config_request__unpack(NULL, n, b);
  free(b);
  ck_assert_ptr_nonnull(q);
  ck_assert_str_eq(q->response_nonce, nonce);
  return q;
}

static void iar_free(Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest *q) {
  istio__mcp__v1alpha1__incremental_mesh_config_request__free_unpacked(q, NULL);
}

static void iar_sink_close(pair *p) {
  mcp_sink_session_del(p->snk);
  mcp_sink_state_del(p->state);
}

/* Another source's nonces are its own: a response is never NACKed for the
 * nonce's format. One type on the stream: it is that type's. */
START_TEST(test_iar_sink_acks_foreign_nonce_on_the_streams_type) {
  pair p;
  iar_sink_alone(&p, 1);
  Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest *q =
      iar_feed(&p, "7", VS_TYPE, "a");
  ck_assert_ptr_null(q->error_detail);
  ck_assert_str_eq(q->type_url, VS_TYPE);
  iar_free(q);
  ck_assert_str_eq(mcp_sink_state_version(p.state, VS_TYPE, "a"), "1");
  /* A nonce with a colon that is not ours (a timestamp) too. */
  q = iar_feed(&p, "2024-01-02T03:04:05Z", NULL, NULL);
  ck_assert_ptr_null(q->error_detail);
  ck_assert_str_eq(q->type_url, VS_TYPE);
  iar_free(q);
  ck_assert_int_eq(mcp_sink_state_synced(p.state), 1);
  iar_sink_close(&p);
}
END_TEST

/* Several types: by the body type of the resources, else (no resource)
 * the first type not answered yet on the stream. */
START_TEST(test_iar_sink_attributes_foreign_nonce_by_body_type) {
  pair p;
  iar_sink_alone(&p, 2);
  Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest *q =
      iar_feed(&p, "n-1", DR_TYPE, "d");
  ck_assert_ptr_null(q->error_detail);
  ck_assert_str_eq(q->type_url, DR_TYPE);
  iar_free(q);
  ck_assert_str_eq(mcp_sink_state_version(p.state, DR_TYPE, "d"), "1");
  ck_assert_uint_eq(mcp_sink_state_count(p.state, VS_TYPE), 0);
  q = iar_feed(&p, "n-2", NULL, NULL); /* empty: VS_TYPE is unanswered */
  ck_assert_ptr_null(q->error_detail);
  ck_assert_str_eq(q->type_url, VS_TYPE);
  iar_free(q);
  ck_assert_int_eq(mcp_sink_state_synced(p.state), 1);
  /* A body type not asked for is an unrequested type. */
  q = iar_feed(&p, "n-3", "type.googleapis.com/other.Kind", "o");
  ck_assert_ptr_nonnull(q->error_detail);
  ck_assert_int_eq(q->error_detail->code, MCP_CODE_UNIMPLEMENTED);
  ck_assert_str_eq(q->type_url, "type.googleapis.com/other.Kind");
  iar_free(q);
  iar_sink_close(&p);
}
END_TEST

/* A body type that is not UTF-8 names no type: the response goes to the
 * first type without answer, and is NACKed for its resource (the stream
 * goes on); a response without nonce stays unattributed. */
START_TEST(test_iar_sink_nacks_a_body_type_not_utf8_and_goes_on) {
  pair p;
  iar_sink_alone(&p, 2);
  Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest *q =
      iar_feed(&p, "n-1", "type.googleapis.com/\xff", "a");
  ck_assert_ptr_nonnull(q->error_detail);
  ck_assert_int_eq(q->error_detail->code, MCP_CODE_INVALID_ARGUMENT);
  ck_assert_str_eq(q->type_url, VS_TYPE);
  iar_free(q);
  q = iar_feed(&p, "", NULL, NULL);
  ck_assert_ptr_nonnull(q->error_detail);
  ck_assert_int_eq(q->error_detail->code, MCP_CODE_UNIMPLEMENTED);
  ck_assert_str_eq(q->type_url, "");
  iar_free(q);
  q = iar_feed(&p, "n-2", VS_TYPE, "a"); /* and the stream goes on */
  ck_assert_ptr_null(q->error_detail);
  iar_free(q);
  iar_sink_close(&p);
}
END_TEST

/* Our form names the type, even on a one-type stream: a type not asked
 * for is NACKed as an unsupported collection. */
START_TEST(test_iar_sink_nacks_our_nonce_form_of_an_unrequested_type) {
  pair p;
  iar_sink_alone(&p, 1);
  Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest *q =
      iar_feed(&p, "3:" DR_TYPE, NULL, NULL);
  ck_assert_ptr_nonnull(q->error_detail);
  ck_assert_int_eq(q->error_detail->code, MCP_CODE_UNIMPLEMENTED);
  ck_assert_str_eq(q->type_url, DR_TYPE);
  iar_free(q);
  q = iar_feed(&p, "4:" VS_TYPE, NULL, NULL);
  ck_assert_ptr_null(q->error_detail);
  ck_assert_str_eq(q->type_url, VS_TYPE);
  iar_free(q);
  iar_sink_close(&p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("core_aggregated");
  TCase *sar = tcase_create("stream_aggregated");
  tcase_add_test(sar, test_sar_answers_full_state_keyed_by_type_url);
  tcase_add_test(sar, test_sar_empty_type_is_answered);
  tcase_add_test(sar, test_sar_pushes_are_always_full_state);
  tcase_add_test(sar, test_sar_one_push_in_flight_per_type);
  tcase_add_test(sar, test_sar_nack_is_not_answered_with_the_same_push);
  tcase_add_test(sar, test_sar_stale_nonce_is_ignored);
  tcase_add_test(sar, test_sar_type_mapping_is_configurable);
  tcase_add_test(sar, test_sar_unknown_type_keeps_stream);
  tcase_add_test(sar, test_sar_malformed_request_is_an_error);
  tcase_add_test(sar, test_sar_sink_reports_last_good_version_on_nack);
  suite_add_tcase(s, sar);
  TCase *iar = tcase_create("incremental_aggregated");
  tcase_add_test(iar, test_iar_first_request_without_versions_gets_everything);
  tcase_add_test(iar, test_iar_resumes_from_initial_versions);
  tcase_add_test(iar, test_iar_ack_then_only_changes);
  tcase_add_test(iar, test_iar_nonce_of_another_type_is_stale);
  tcase_add_test(iar, test_iar_status_nonce_is_the_wire_nonce_whole);
  tcase_add_test(iar, test_iar_nack_does_not_resend);
  tcase_add_test(iar, test_iar_behind_compaction_asks_to_resync);
  tcase_add_test(iar, test_iar_sink_sends_held_versions_on_reconnect);
  tcase_add_test(iar, test_iar_sink_acks_foreign_nonce_on_the_streams_type);
  tcase_add_test(iar, test_iar_sink_attributes_foreign_nonce_by_body_type);
  tcase_add_test(iar, test_iar_sink_nacks_our_nonce_form_of_an_unrequested_type);
  tcase_add_test(iar, test_iar_sink_nacks_a_body_type_not_utf8_and_goes_on);
  suite_add_tcase(s, iar);
  TCase *both = tcase_create("converge");
  tcase_add_loop_test(both, test_aggregated_sink_and_source_converge, 0, 2);
  suite_add_tcase(s, both);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
