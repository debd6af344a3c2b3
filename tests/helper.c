#include "helper.h"

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void th_rand(uint8_t *dest, size_t len, void *user_data) {
  uint64_t *seed = user_data;
  for (size_t i = 0; i < len; ++i) {
    *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
    dest[i] = (uint8_t)(*seed >> 56);
  }
}

static int th_should_fail(th_mem *m) {
  m->count++;
  if (m->fail_at && (m->count == m->fail_at || (m->sticky && m->count > m->fail_at))) {
    m->failed = 1;
    return 1;
  }
  return 0;
}

static void *th_malloc(size_t n, void *ud) {
  th_mem *m = ud;
  if (th_should_fail(m)) {
    return NULL;
  }
  void *p = malloc(n);
  if (p) {
    m->live++;
  }
  return p;
}

static void th_free(void *p, void *ud) {
  th_mem *m = ud;
  if (p) {
    m->live--;
    free(p);
  }
}

static void *th_calloc(size_t a, size_t b, void *ud) {
  th_mem *m = ud;
  if (th_should_fail(m)) {
    return NULL;
  }
  void *p = calloc(a, b);
  if (p) {
    m->live++;
  }
  return p;
}

static void *th_realloc(void *p, size_t n, void *ud) {
  th_mem *m = ud;
  if (th_should_fail(m)) {
    return NULL;
  }
  void *q = realloc(p, n);
  if (q && !p) {
    m->live++;
  }
  return q;
}

void th_mem_init(th_mem *m, long fail_at) {
  memset(m, 0, sizeof(*m));
  m->mem.user_data = m;
  m->mem.malloc = th_malloc;
  m->mem.free = th_free;
  m->mem.calloc = th_calloc;
  m->mem.realloc = th_realloc;
  m->fail_at = fail_at;
}

mcp_store *th_store(const mcp_mem *mem) {
  mcp_store_options o;
  mcp_store_options_default(&o);
  o.mem = mem;
  o.epoch = 0x1234;
  mcp_store *st = NULL;
  int rv = mcp_store_new(&st, &o);
  if (rv != 0) {
    return NULL;
  }
  return st;
}

mcp_resource th_res(const char *name, const char *version, const char *body) {
  mcp_resource r;
  memset(&r, 0, sizeof(r));
  r.name = name;
  r.version = version;
  r.type_url = "type.googleapis.com/test.Body";
  r.body = (const uint8_t *)body;
  r.body_len = body ? strlen(body) : 0;
  return r;
}

void th_put(mcp_store *st, const char *coll, const char *name,
            const char *version, const char *body, mcp_tstamp ts) {
  mcp_resource r = th_res(name, version, body);
  int rv = mcp_store_upsert(st, coll, &r, ts);
  ck_assert_int_ge(rv, 0);
}

void th_put_big(mcp_store *st, const char *coll, const char *name,
                const char *version, size_t size, char fill, mcp_tstamp ts) {
  char *body = malloc(size + 1);
  ck_assert_ptr_nonnull(body);
  memset(body, fill, size);
  body[size] = '\0';
  th_put(st, coll, name, version, body, ts);
  free(body);
}

static size_t count_list(const char *const *l) {
  size_t n = 0;
  while (l && l[n]) {
    ++n;
  }
  return n;
}

uint8_t *th_request(size_t *len, const char *node_id, const char *collection,
                    const char *nonce, int incremental,
                    const char *const *initial, int code, const char *msg) {
  Istio__Mcp__V1alpha1__RequestResources r = ISTIO__MCP__V1ALPHA1__REQUEST_RESOURCES__INIT;
  Istio__Mcp__V1alpha1__SinkNode node = ISTIO__MCP__V1ALPHA1__SINK_NODE__INIT;
  Google__Rpc__Status status = GOOGLE__RPC__STATUS__INIT;
  size_t ni = count_list(initial) / 2;
  Istio__Mcp__V1alpha1__RequestResources__InitialResourceVersionsEntry *e =
      calloc(ni ? ni : 1, sizeof(*e));
  Istio__Mcp__V1alpha1__RequestResources__InitialResourceVersionsEntry **ep =
      calloc(ni ? ni : 1, sizeof(*ep));
  for (size_t i = 0; i < ni; ++i) {
    istio__mcp__v1alpha1__request_resources__initial_resource_versions_entry__init(&e[i]);
    e[i].key = (char *)initial[2 * i];
    e[i].value = (char *)initial[2 * i + 1];
    ep[i] = &e[i];
  }
  node.id = (char *)(node_id ? node_id : "");
  r.sink_node = &node;
  r.collection = (char *)collection;
  r.response_nonce = (char *)(nonce ? nonce : "");
  r.incremental = incremental;
  r.n_initial_resource_versions = ni;
  r.initial_resource_versions = ep;
  if (code) {
    status.code = code;
    status.message = (char *)(msg ? msg : "");
    r.error_detail = &status;
  }
  *len = istio__mcp__v1alpha1__request_resources__get_packed_size(&r);
  uint8_t *buf = malloc(*len ? *len : 1);
  istio__mcp__v1alpha1__request_resources__pack(&r, buf);
  free(e);
  free(ep);
  return buf;
}

uint8_t *th_resources(size_t *len, const char *collection, const char *nonce,
                      int incremental, const char *const *names,
                      const char *const *versions, const char *const *removed) {
  size_t n = count_list(names);
  Istio__Mcp__V1alpha1__Resources m = ISTIO__MCP__V1ALPHA1__RESOURCES__INIT;
  Istio__Mcp__V1alpha1__Resource *res = calloc(n ? n : 1, sizeof(*res));
  Istio__Mcp__V1alpha1__Resource **rp = calloc(n ? n : 1, sizeof(*rp));
  Istio__Mcp__V1alpha1__Metadata *md = calloc(n ? n : 1, sizeof(*md));
  Google__Protobuf__Any *any = calloc(n ? n : 1, sizeof(*any));
  for (size_t i = 0; i < n; ++i) {
    istio__mcp__v1alpha1__resource__init(&res[i]);
    istio__mcp__v1alpha1__metadata__init(&md[i]);
    google__protobuf__any__init(&any[i]);
    md[i].name = (char *)names[i];
    md[i].version = (char *)(versions && versions[i] ? versions[i] : "v1");
    any[i].type_url = "type.googleapis.com/test.Body";
    any[i].value.data = (uint8_t *)names[i];
    any[i].value.len = strlen(names[i]);
    res[i].metadata = &md[i];
    res[i].body = &any[i];
    rp[i] = &res[i];
  }
  m.collection = (char *)collection;
  m.nonce = (char *)(nonce ? nonce : "");
  m.system_version_info = "sv";
  m.incremental = incremental;
  m.n_resources = n;
  m.resources = rp;
  m.n_removed_resources = count_list(removed);
  m.removed_resources = (char **)removed;
  *len = istio__mcp__v1alpha1__resources__get_packed_size(&m);
  uint8_t *buf = malloc(*len ? *len : 1);
  istio__mcp__v1alpha1__resources__pack(&m, buf);
  free(res);
  free(rp);
  free(md);
  free(any);
  return buf;
}

Istio__Mcp__V1alpha1__Resources *th_decode_resources(const mcp_msg *msg) {
  size_t n = mcp_msg_len(msg);
  uint8_t *buf = malloc(n ? n : 1);
  mcp_msg_flatten(msg, buf);
  Istio__Mcp__V1alpha1__Resources *r =
      istio__mcp__v1alpha1__resources__unpack(NULL, n, buf);
  free(buf);
  ck_assert_msg(r != NULL, "the core produced a Resources that does not decode");
  return r;
}

Istio__Mcp__V1alpha1__RequestResources *th_decode_request(const mcp_msg *msg) {
  size_t n = mcp_msg_len(msg);
  uint8_t *buf = malloc(n ? n : 1);
  mcp_msg_flatten(msg, buf);
  Istio__Mcp__V1alpha1__RequestResources *r =
      istio__mcp__v1alpha1__request_resources__unpack(NULL, n, buf);
  free(buf);
  ck_assert_msg(r != NULL, "the core produced a request that does not decode");
  return r;
}

Istio__Mcp__V1alpha1__Resources *th_source_next(mcp_source_session *s,
                                                mcp_tstamp ts) {
  mcp_msg *msg = NULL;
  int rv = mcp_source_session_next(s, ts, &msg);
  ck_assert_int_ge(rv, 0);
  if (rv == 0) {
    return NULL;
  }
  Istio__Mcp__V1alpha1__Resources *r = th_decode_resources(msg);
  mcp_msg_free(msg);
  return r;
}

void th_source_recv(mcp_source_session *s, uint8_t *bytes, size_t len,
                    mcp_tstamp ts, int expect) {
  int rv = mcp_source_session_recv(s, bytes, len, ts);
  free(bytes);
  ck_assert_int_eq(rv, expect);
}

int th_find(const Istio__Mcp__V1alpha1__Resources *r, const char *name) {
  for (size_t i = 0; i < r->n_resources; ++i) {
    if (r->resources[i]->metadata &&
        strcmp(r->resources[i]->metadata->name, name) == 0) {
      return (int)i;
    }
  }
  return -1;
}

int th_find_removed(const Istio__Mcp__V1alpha1__Resources *r, const char *name) {
  for (size_t i = 0; i < r->n_removed_resources; ++i) {
    if (strcmp(r->removed_resources[i], name) == 0) {
      return (int)i;
    }
  }
  return -1;
}

/* ---- added for the store and source suites ---- */

void th_resources_free(Istio__Mcp__V1alpha1__Resources *r) {
  if (r) {
    istio__mcp__v1alpha1__resources__free_unpacked(r, NULL);
  }
}

int th_body_is(const Istio__Mcp__V1alpha1__Resources *r, int i,
               const char *body) {
  if (i < 0 || (size_t)i >= r->n_resources || !r->resources[i]->body) {
    return 0;
  }
  const ProtobufCBinaryData *v = &r->resources[i]->body->value;
  size_t n = strlen(body);
  return v->len == n && (n == 0 || memcmp(v->data, body, n) == 0);
}

char *th_version(char *buf, size_t n, uint64_t epoch, uint64_t gen) {
  snprintf(buf, n, "%016" PRIx64 "-%" PRIu64, epoch, gen);
  return buf;
}

static void th_copy(char *dst, size_t n, const char *src) {
  snprintf(dst, n, "%s", src ? src : "(null)");
}

void th_evlog_cb(const mcp_event *ev, void *user_data) {
  th_evlog *log = user_data;
  if (log->n == TH_EVLOG_MAX) {
    log->dropped++;
    return;
  }
  th_event *e = &log->ev[log->n++];
  e->type = ev->type;
  th_copy(e->collection, sizeof(e->collection), ev->collection);
  th_copy(e->nonce, sizeof(e->nonce), ev->nonce);
  th_copy(e->version, sizeof(e->version), ev->version);
  th_copy(e->message, sizeof(e->message), ev->message);
  e->code = ev->code;
  e->nresources = ev->nresources;
  e->nremoved = ev->nremoved;
  e->incremental = ev->incremental;
  e->latency = ev->latency;
}

size_t th_evlog_count(const th_evlog *log, mcp_event_type type) {
  size_t n = 0;
  for (size_t i = 0; i < log->n; ++i) {
    n += log->ev[i].type == type;
  }
  return n;
}

const th_event *th_evlog_last(const th_evlog *log, mcp_event_type type) {
  for (size_t i = log->n; i > 0; --i) {
    if (log->ev[i - 1].type == type) {
      return &log->ev[i - 1];
    }
  }
  return NULL;
}
