#include "fuzz_wire.h"

#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"

typedef Istio__Mcp__V1alpha1__Resources PbResources;
typedef Istio__Mcp__V1alpha1__MeshConfigResponse PbMCResp;
typedef Istio__Mcp__V1alpha1__IncrementalMeshConfigResponse PbIMCResp;
typedef Istio__Mcp__V1alpha1__RequestResources PbRR;
typedef Istio__Mcp__V1alpha1__MeshConfigRequest PbMCReq;
typedef Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest PbIMCReq;

uint8_t *fz_flatten(const mcp_msg *m, size_t *len) {
  *len = mcp_msg_len(m);
  uint8_t *p = malloc(*len ? *len : 1);
  FZ_CHECK(p, "out of memory");
  mcp_msg_flatten(m, p);
  /* The fragments must add up to the length. */
  const mcp_iovec *iov;
  size_t n = mcp_msg_iov(m, &iov), total = 0;
  for (size_t i = 0; i < n; ++i) {
    FZ_CHECK(iov[i].base || !iov[i].len, "fragment %zu has no bytes", i);
    total += iov[i].len;
  }
  FZ_CHECK(total == *len, "fragments add up to %zu, mcp_msg_len says %zu",
           total, *len);
  return p;
}

mcp_iovec *fz_cut(const uint8_t *p, size_t len, size_t cut, size_t *n) {
  *n = (len + cut - 1) / cut;
  mcp_iovec *iov = malloc((*n ? *n : 1) * sizeof(*iov));
  FZ_CHECK(iov, "out of memory");
  for (size_t i = 0; i < *n; ++i) {
    size_t at = i * cut, k = len - at < cut ? len - at : cut;
    uint8_t *f = malloc(k);
    FZ_CHECK(f, "out of memory");
    memcpy(f, p + at, k);
    iov[i].base = f;
    iov[i].len = k;
  }
  return iov;
}

void fz_cut_free(mcp_iovec *iov, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    free((void *)(uintptr_t)iov[i].base);
  }
  free(iov);
}

/* ---- decoding ---- */

int fz_push_decode(mcp_service service, const uint8_t *p, size_t n,
                   fz_push *x) {
  memset(x, 0, sizeof(*x));
  switch (service) {
  case MCP_SERVICE_RESOURCE: {
    PbResources *r = istio__mcp__v1alpha1__resources__unpack(NULL, n, p);
    if (!r) {
      return -1;
    }
    x->msg = &r->base;
    x->key = r->collection;
    x->nonce = r->nonce;
    x->version = r->system_version_info;
    x->incremental = r->incremental;
    x->nres = r->n_resources;
    x->res = r->resources;
    x->nrem = r->n_removed_resources;
    x->rem = r->removed_resources;
    return 0;
  }
  case MCP_SERVICE_AGGREGATED: {
    PbMCResp *r = istio__mcp__v1alpha1__mesh_config_response__unpack(NULL, n, p);
    if (!r) {
      return -1;
    }
    x->msg = &r->base;
    x->key = r->type_url;
    x->nonce = r->nonce;
    x->version = r->version_info;
    x->nres = r->n_resources;
    x->res = r->resources;
    return 0;
  }
  case MCP_SERVICE_AGGREGATED_INCREMENTAL: {
    PbIMCResp *r =
        istio__mcp__v1alpha1__incremental_mesh_config_response__unpack(NULL, n, p);
    if (!r) {
      return -1;
    }
    x->msg = &r->base;
    const char *colon = strchr(r->nonce, ':');
    x->keybuf = strdup(colon ? colon + 1 : "");
    FZ_CHECK(x->keybuf, "out of memory");
    x->key = x->keybuf;
    x->nonce = r->nonce;
    x->version = r->system_version_info;
    x->incremental = 1;
    x->nres = r->n_resources;
    x->res = r->resources;
    x->nrem = r->n_removed_resources;
    x->rem = r->removed_resources;
    return 0;
  }
  }
  return -1;
}

void fz_push_free(fz_push *x) {
  if (x->msg) {
    protobuf_c_message_free_unpacked(x->msg, NULL);
  }
  free(x->keybuf);
  memset(x, 0, sizeof(*x));
}

#define INIT_VIEW_(x, r)                                                  \
  do {                                                                    \
    (x)->ninit = (r)->n_initial_resource_versions;                        \
    (x)->init_keys = calloc((x)->ninit + 1, sizeof(char *));              \
    (x)->init_vals = calloc((x)->ninit + 1, sizeof(char *));              \
    FZ_CHECK((x)->init_keys && (x)->init_vals, "out of memory");          \
    for (size_t k_ = 0; k_ < (x)->ninit; ++k_) {                          \
      (x)->init_keys[k_] = (r)->initial_resource_versions[k_]->key;       \
      (x)->init_vals[k_] = (r)->initial_resource_versions[k_]->value;     \
    }                                                                     \
  } while (0)

int fz_req_decode(mcp_service service, const uint8_t *p, size_t n, fz_req *x) {
  memset(x, 0, sizeof(*x));
  x->version_info = "";
  switch (service) {
  case MCP_SERVICE_RESOURCE: {
    PbRR *r = istio__mcp__v1alpha1__request_resources__unpack(NULL, n, p);
    if (!r) {
      return -1;
    }
    x->msg = &r->base;
    x->key = r->collection;
    x->nonce = r->response_nonce;
    x->error = r->error_detail;
    x->node = r->sink_node;
    x->incremental = r->incremental;
    INIT_VIEW_(x, r);
    return 0;
  }
  case MCP_SERVICE_AGGREGATED: {
    PbMCReq *r = istio__mcp__v1alpha1__mesh_config_request__unpack(NULL, n, p);
    if (!r) {
      return -1;
    }
    x->msg = &r->base;
    x->key = r->type_url;
    x->nonce = r->response_nonce;
    x->version_info = r->version_info;
    x->error = r->error_detail;
    x->node = r->sink_node;
    x->init_keys = calloc(1, sizeof(char *));
    x->init_vals = calloc(1, sizeof(char *));
    return 0;
  }
  case MCP_SERVICE_AGGREGATED_INCREMENTAL: {
    PbIMCReq *r =
        istio__mcp__v1alpha1__incremental_mesh_config_request__unpack(NULL, n, p);
    if (!r) {
      return -1;
    }
    x->msg = &r->base;
    x->key = r->type_url;
    x->nonce = r->response_nonce;
    x->error = r->error_detail;
    x->node = r->sink_node;
    x->incremental = 1;
    INIT_VIEW_(x, r);
    return 0;
  }
  }
  return -1;
}

void fz_req_free(fz_req *x) {
  if (x->msg) {
    protobuf_c_message_free_unpacked(x->msg, NULL);
  }
  free(x->init_keys);
  free(x->init_vals);
  memset(x, 0, sizeof(*x));
}

/* ---- encoding ---- */

static uint8_t *pack(const ProtobufCMessage *m, size_t *len) {
  *len = protobuf_c_message_get_packed_size(m);
  uint8_t *p = malloc(*len ? *len : 1);
  FZ_CHECK(p, "out of memory");
  protobuf_c_message_pack(m, p);
  return p;
}

#define INIT_ENTRIES_(type, init_fn, spec, pentries, pptrs, out, nout)     \
  do {                                                                     \
    pentries = calloc((spec)->ninit + 1, sizeof(type));                    \
    pptrs = calloc((spec)->ninit + 1, sizeof(type *));                     \
    FZ_CHECK(pentries && pptrs, "out of memory");                          \
    for (size_t k_ = 0; k_ < (spec)->ninit; ++k_) {                        \
      init_fn(&(pentries)[k_]);                                            \
      (pentries)[k_].key = (char *)(spec)->init[k_].key;                   \
      (pentries)[k_].value = (char *)(spec)->init[k_].value;               \
      (pptrs)[k_] = &(pentries)[k_];                                       \
    }                                                                      \
    (out) = (pptrs);                                                       \
    (nout) = (spec)->ninit;                                                \
  } while (0)

uint8_t *fz_req_encode(mcp_service service, const fz_req_spec *s, size_t *len) {
  Istio__Mcp__V1alpha1__SinkNode node = ISTIO__MCP__V1ALPHA1__SINK_NODE__INIT;
  Istio__Mcp__V1alpha1__SinkNode__AnnotationsEntry ae[4];
  Istio__Mcp__V1alpha1__SinkNode__AnnotationsEntry *aep[4];
  Google__Rpc__Status st = GOOGLE__RPC__STATUS__INIT;
  size_t na = s->nannot < 4 ? s->nannot : 4;
  for (size_t i = 0; i < na; ++i) {
    istio__mcp__v1alpha1__sink_node__annotations_entry__init(&ae[i]);
    ae[i].key = (char *)s->annot[i].key;
    ae[i].value = (char *)s->annot[i].value;
    aep[i] = &ae[i];
  }
  node.id = (char *)(s->node_id ? s->node_id : "");
  node.n_annotations = na;
  node.annotations = na ? aep : NULL;
  if (s->has_error) {
    st.code = s->code;
    st.message = (char *)(s->message ? s->message : "");
  }
  uint8_t *out = NULL;
  switch (service) {
  case MCP_SERVICE_RESOURCE: {
    PbRR r = ISTIO__MCP__V1ALPHA1__REQUEST_RESOURCES__INIT;
    Istio__Mcp__V1alpha1__RequestResources__InitialResourceVersionsEntry *e, **ep;
    INIT_ENTRIES_(Istio__Mcp__V1alpha1__RequestResources__InitialResourceVersionsEntry,
                  istio__mcp__v1alpha1__request_resources__initial_resource_versions_entry__init,
                  s, e, ep, r.initial_resource_versions,
                  r.n_initial_resource_versions);
    r.sink_node = s->has_node ? &node : NULL;
    r.collection = (char *)(s->key ? s->key : "");
    r.response_nonce = (char *)(s->nonce ? s->nonce : "");
    r.error_detail = s->has_error ? &st : NULL;
    r.incremental = s->incremental != 0;
    out = pack(&r.base, len);
    free(e);
    free(ep);
    break;
  }
  case MCP_SERVICE_AGGREGATED: {
    PbMCReq r = ISTIO__MCP__V1ALPHA1__MESH_CONFIG_REQUEST__INIT;
    r.sink_node = s->has_node ? &node : NULL;
    r.type_url = (char *)(s->key ? s->key : "");
    r.response_nonce = (char *)(s->nonce ? s->nonce : "");
    r.version_info = (char *)(s->version_info ? s->version_info : "");
    r.error_detail = s->has_error ? &st : NULL;
    out = pack(&r.base, len);
    break;
  }
  case MCP_SERVICE_AGGREGATED_INCREMENTAL: {
    PbIMCReq r = ISTIO__MCP__V1ALPHA1__INCREMENTAL_MESH_CONFIG_REQUEST__INIT;
    Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest__InitialResourceVersionsEntry *e, **ep;
    INIT_ENTRIES_(Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest__InitialResourceVersionsEntry,
                  istio__mcp__v1alpha1__incremental_mesh_config_request__initial_resource_versions_entry__init,
                  s, e, ep, r.initial_resource_versions,
                  r.n_initial_resource_versions);
    r.sink_node = s->has_node ? &node : NULL;
    r.type_url = (char *)(s->key ? s->key : "");
    r.response_nonce = (char *)(s->nonce ? s->nonce : "");
    r.error_detail = s->has_error ? &st : NULL;
    out = pack(&r.base, len);
    free(e);
    free(ep);
    break;
  }
  }
  return out;
}

/* The resources of a push, as protobuf-c structs (freed by the caller:
 * one calloc'd block per array). */
typedef struct res_arrays {
  fz_pbres *res;
  fz_pbres **ptr;
  Istio__Mcp__V1alpha1__Metadata *md;
  Google__Protobuf__Any *any;
  Google__Protobuf__Timestamp *ts;
  Istio__Mcp__V1alpha1__Metadata__LabelsEntry *lab;
  Istio__Mcp__V1alpha1__Metadata__LabelsEntry **labp;
  Istio__Mcp__V1alpha1__Metadata__AnnotationsEntry *ann;
  Istio__Mcp__V1alpha1__Metadata__AnnotationsEntry **annp;
} res_arrays;

static void res_build(const fz_push_spec *s, res_arrays *a) {
  size_t n = s->nres, nl = 0, na = 0;
  for (size_t i = 0; i < n; ++i) {
    nl += s->res[i].nlabels;
    na += s->res[i].nannots;
  }
  a->ann = calloc(na + 1, sizeof(*a->ann));
  a->annp = calloc(na + 1, sizeof(*a->annp));
  FZ_CHECK(a->ann && a->annp, "out of memory");
  size_t ai = 0;
  a->res = calloc(n + 1, sizeof(*a->res));
  a->ptr = calloc(n + 1, sizeof(*a->ptr));
  a->md = calloc(n + 1, sizeof(*a->md));
  a->any = calloc(n + 1, sizeof(*a->any));
  a->ts = calloc(n + 1, sizeof(*a->ts));
  a->lab = calloc(nl + 1, sizeof(*a->lab));
  a->labp = calloc(nl + 1, sizeof(*a->labp));
  FZ_CHECK(a->res && a->ptr && a->md && a->any && a->ts && a->lab && a->labp,
           "out of memory");
  size_t li = 0;
  for (size_t i = 0; i < n; ++i) {
    const fz_res_spec *r = &s->res[i];
    istio__mcp__v1alpha1__resource__init(&a->res[i]);
    istio__mcp__v1alpha1__metadata__init(&a->md[i]);
    google__protobuf__any__init(&a->any[i]);
    google__protobuf__timestamp__init(&a->ts[i]);
    a->md[i].name = (char *)(r->name ? r->name : "");
    a->md[i].version = (char *)(r->version ? r->version : "");
    if (r->has_ct) {
      a->ts[i].seconds = r->secs;
      a->ts[i].nanos = r->nanos;
      a->md[i].create_time = &a->ts[i];
    }
    a->md[i].labels = &a->labp[li];
    a->md[i].n_labels = r->nlabels;
    for (size_t k = 0; k < r->nlabels; ++k, ++li) {
      istio__mcp__v1alpha1__metadata__labels_entry__init(&a->lab[li]);
      a->lab[li].key = (char *)r->labels[k].key;
      a->lab[li].value = (char *)r->labels[k].value;
      a->labp[li] = &a->lab[li];
    }
    a->md[i].annotations = &a->annp[ai];
    a->md[i].n_annotations = r->nannots;
    for (size_t k = 0; k < r->nannots; ++k, ++ai) {
      istio__mcp__v1alpha1__metadata__annotations_entry__init(&a->ann[ai]);
      a->ann[ai].key = (char *)r->annots[k].key;
      a->ann[ai].value = (char *)r->annots[k].value;
      a->annp[ai] = &a->ann[ai];
    }
    a->any[i].type_url = (char *)(r->type_url ? r->type_url : "");
    a->any[i].value.data = (uint8_t *)r->body;
    a->any[i].value.len = r->body_len;
    a->res[i].metadata = r->has_meta ? &a->md[i] : NULL;
    a->res[i].body = r->has_body ? &a->any[i] : NULL;
    a->ptr[i] = &a->res[i];
  }
}

static void res_free(res_arrays *a) {
  free(a->res);
  free(a->ptr);
  free(a->md);
  free(a->any);
  free(a->ts);
  free(a->lab);
  free(a->labp);
  free(a->ann);
  free(a->annp);
}

uint8_t *fz_push_encode(mcp_service service, const fz_push_spec *s,
                        size_t *len) {
  res_arrays a;
  res_build(s, &a);
  uint8_t *out = NULL;
  int raw_field = 0;
  switch (service) {
  case MCP_SERVICE_RESOURCE: {
    PbResources r = ISTIO__MCP__V1ALPHA1__RESOURCES__INIT;
    r.collection = (char *)(s->key ? s->key : "");
    r.nonce = (char *)(s->nonce ? s->nonce : "");
    r.system_version_info = (char *)(s->version ? s->version : "");
    r.incremental = s->incremental != 0;
    r.n_resources = s->nres;
    r.resources = a.ptr;
    r.n_removed_resources = s->nrem;
    r.removed_resources = (char **)s->rem;
    out = pack(&r.base, len);
    raw_field = 3;
    break;
  }
  case MCP_SERVICE_AGGREGATED: {
    PbMCResp r = ISTIO__MCP__V1ALPHA1__MESH_CONFIG_RESPONSE__INIT;
    r.type_url = (char *)(s->key ? s->key : "");
    r.nonce = (char *)(s->nonce ? s->nonce : "");
    r.version_info = (char *)(s->version ? s->version : "");
    r.n_resources = s->nres;
    r.resources = a.ptr;
    out = pack(&r.base, len);
    raw_field = 2;
    break;
  }
  case MCP_SERVICE_AGGREGATED_INCREMENTAL: {
    PbIMCResp r = ISTIO__MCP__V1ALPHA1__INCREMENTAL_MESH_CONFIG_RESPONSE__INIT;
    r.nonce = (char *)(s->nonce ? s->nonce : "");
    r.system_version_info = (char *)(s->version ? s->version : "");
    r.n_resources = s->nres;
    r.resources = a.ptr;
    r.n_removed_resources = s->nrem;
    r.removed_resources = (char **)s->rem;
    out = pack(&r.base, len);
    raw_field = 2;
    break;
  }
  }
  res_free(&a);
  if (s->has_raw_res && out) {
    /* [tag][varint length][bytes] appended: repeated fields may come in
     * any order. */
    size_t extra = 1 + 10 + s->raw_res_len;
    uint8_t *q = realloc(out, *len + extra);
    FZ_CHECK(q, "out of memory");
    out = q;
    uint8_t *p = out + *len;
    *p++ = (uint8_t)(raw_field << 3 | 2);
    size_t v = s->raw_res_len;
    while (v >= 0x80) {
      *p++ = (uint8_t)(v | 0x80);
      v >>= 7;
    }
    *p++ = (uint8_t)v;
    if (s->raw_res_len) {
      memcpy(p, s->raw_res, s->raw_res_len);
    }
    p += s->raw_res_len;
    *len = (size_t)(p - out);
  }
  return out;
}

/* ---- UTF-8 and the envelope ---- */

int fz_utf8_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint32_t c = s[i];
    size_t k;
    uint32_t min;
    if (c == 0) {
      return 0;
    } else if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      k = 1, min = 0x80, c &= 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      k = 2, min = 0x800, c &= 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      k = 3, min = 0x10000, c &= 0x07;
    } else {
      return 0;
    }
    if (n - i < k + 1) {
      return 0;
    }
    for (size_t j = 1; j <= k; ++j) {
      if ((s[i + j] & 0xc0) != 0x80) {
        return 0;
      }
      c = c << 6 | (s[i + j] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
      return 0;
    }
    i += k + 1;
  }
  return 1;
}

static int rd_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int i = 0; i < 10; ++i) {
    if (*p == end) {
      return -1;
    }
    uint8_t b = *(*p)++;
    if (i == 9 && b > 1) {
      return -1; /* bits beyond 64: malformed, as the core and Go say */
    }
    *v |= (uint64_t)(b & 0x7f) << (7 * i);
    if (!(b & 0x80)) {
      return 0;
    }
  }
  return -1;
}

int fz_envelope(mcp_service service, const uint8_t *p, size_t n, fz_env *e) {
  /* Field numbers: version, key, resources, removed, nonce, incremental. */
  static const unsigned f[3][6] = {
      {1, 2, 3, 4, 5, 6}, /* Resources */
      {1, 3, 2, 0, 4, 0}, /* MeshConfigResponse */
      {1, 0, 2, 3, 4, 0}, /* IncrementalMeshConfigResponse */
  };
  const unsigned *fs = f[service];
  const uint8_t *end = p + n;
  memset(e, 0, sizeof(*e));
  while (p < end) {
    uint64_t key, v;
    if (rd_varint(&p, end, &key) != 0) {
      return -1;
    }
    uint64_t field = key >> 3;
    unsigned wt = (unsigned)(key & 7);
    if (field == 0 || field > 0x1fffffff) {
      return -1;
    }
    const uint8_t *data = NULL;
    size_t len = 0;
    switch (wt) {
    case 0:
      if (rd_varint(&p, end, &v) != 0) {
        return -1;
      }
      break;
    case 1:
    case 5: {
      size_t k = wt == 1 ? 8 : 4;
      if ((size_t)(end - p) < k) {
        return -1;
      }
      p += k;
      break;
    }
    case 2:
      if (rd_varint(&p, end, &v) != 0 || v > (uint64_t)(end - p)) {
        return -1;
      }
      data = p;
      len = (size_t)v;
      p += len;
      break;
    default:
      return -1;
    }
    if (fs[5] && field == fs[5]) {
      if (wt != 0) {
        return -1;
      }
      e->incremental = v != 0;
      continue;
    }
    int known = 0;
    for (int i = 0; i < 5; ++i) {
      known |= fs[i] && field == fs[i];
    }
    if (!known) {
      continue;
    }
    if (wt != 2) {
      return -1;
    }
    if (field == fs[0]) {
      e->version = data, e->version_len = len;
    } else if (field == fs[1]) {
      e->key = data, e->key_len = len;
    } else if (field == fs[4]) {
      e->nonce = data, e->nonce_len = len;
    } else if (field == fs[2]) {
      if (!e->nres++) {
        e->res0 = data, e->res0_len = len;
      }
    } else {
      e->nrem++;
    }
  }
  if (service == MCP_SERVICE_AGGREGATED_INCREMENTAL) {
    e->incremental = 1;
    const uint8_t *c = e->nonce ? memchr(e->nonce, ':', e->nonce_len) : NULL;
    if (c) {
      e->key = c + 1;
      e->key_len = e->nonce_len - (size_t)(c + 1 - e->nonce);
    }
  }
  return 0;
}
