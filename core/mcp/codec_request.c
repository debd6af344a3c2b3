/*
 * The requests of the three MCP services (RequestResources,
 * MeshConfigRequest, IncrementalMeshConfigRequest), read for the source
 * side: apart from the state machine (source.c) so that it can be read,
 * audited and fuzzed alone. The common shapes of RequestResources are read
 * by hand without an allocation per field; the rare ones and the other
 * services go through protobuf-c. Every string is checked as UTF-8 and
 * every limit before anything of the request is kept.
 *
 * And the same requests written for the sink side: the SinkNode encoded
 * once, each request around it.
 */
#include "codec.h"

typedef Istio__Mcp__V1alpha1__RequestResources ReqRR;
typedef Istio__Mcp__V1alpha1__MeshConfigRequest ReqMC;
typedef Istio__Mcp__V1alpha1__IncrementalMeshConfigRequest ReqIMC;

/* initial_resource_versions as an mcp_kv array: the two generated entry
 * types differ only in name. */
#define INITIAL_(r, out, nout, m, rv)                                         \
  do {                                                                        \
    (nout) = (r)->n_initial_resource_versions;                                \
    if ((nout) && !((out) = mcp_mem_malloc((m), (nout) * sizeof(mcp_kv)))) {     \
      (rv) = MCP_ERR_NOMEM;                                                   \
      break;                                                                  \
    }                                                                         \
    for (size_t k_ = 0; k_ < (nout); ++k_) {                                  \
      (out)[k_].key = (r)->initial_resource_versions[k_]->key;                \
      (out)[k_].value = (r)->initial_resource_versions[k_]->value;            \
      if (!mcp_str_valid((out)[k_].key) || !mcp_str_valid((out)[k_].value)) \
        (rv) = MCP_ERR_MALFORMED;                                             \
    }                                                                         \
  } while (0)

static int node_valid(const Istio__Mcp__V1alpha1__SinkNode *n) {
  if (!n) {
    return 1;
  }
  if (!mcp_str_valid(n->id)) {
    return 0;
  }
  for (size_t i = 0; i < n->n_annotations; ++i) {
    if (!mcp_str_valid(n->annotations[i]->key) ||
        !mcp_str_valid(n->annotations[i]->value)) {
      return 0;
    }
  }
  return 1;
}


void mcp__request_buf_free(mcp_request_buf *d, const mcp_mem *m) {
  if (d->msg) {
    protobuf_c_message_free_unpacked(d->msg, &d->pa.a);
  }
  if (d->arena != d->stack) {
    mcp_mem_free(m, d->arena);
  }
  if (!d->arena) {
    mcp_mem_free(m, d->initial);
  }
  mcp_mem_free(m, d->collection);
}

/* ---- RequestResources without protobuf-c: no allocation per field ---- */

typedef struct span_ {
  const uint8_t *p;
  size_t n;
} span_;

/* Checks the wire structure of a nested message whose LEN fields listed
 * in |strs| (bit per field number) must be UTF-8 strings, and counts
 * fields |count|. */
static int walk(const uint8_t *p, size_t n, uint32_t strs, uint32_t count,
                uint32_t varints, size_t *ncount, size_t *nbytes) {
  mcp_wire w = {p, p + n};
  mcp_wire_field fd;
  int rv;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    uint32_t bit = fd.num < 32 ? 1u << fd.num : 0;
    if (strs & bit) {
      if (fd.wt != MCP_WT_LEN || !mcp_utf8_valid(fd.data, fd.len, 0)) {
        return MCP_ERR_MALFORMED;
      }
      *nbytes += fd.len + 1;
    } else if (count & bit) {
      if (fd.wt != MCP_WT_LEN) {
        return MCP_ERR_MALFORMED;
      }
      (*ncount)++;
    } else if ((varints & bit) && fd.wt != MCP_WT_VARINT) {
      return MCP_ERR_MALFORMED;
    }
  }
  return rv;
}

static char *put_cstr(char **a, const uint8_t *p, size_t n) {
  char *s = *a;
  memcpy(s, p, n);
  s[n] = '\0';
  *a += n + 1;
  return s;
}

/* Last string field |field| of a message, into the arena ("" if none). */
static char *get_str(char **a, const uint8_t *p, size_t n, uint32_t field) {
  mcp_wire w = {p, p + n};
  mcp_wire_field fd;
  const uint8_t *best = NULL;
  size_t bl = 0;
  while (mcp_wire_field_next(&w, &fd) == 1) {
    if (fd.num == field && fd.wt == MCP_WT_LEN) {
      best = fd.data;
      bl = fd.len;
    }
  }
  return put_cstr(a, best ? best : (const uint8_t *)"", bl);
}

/* decode_rr() reads the common shapes of RequestResources by hand; for
 * the rare ones (a nested message repeated, which protobuf merges, or
 * error details) it returns this and protobuf-c decodes the request. */
#define DECODE_GENERIC 1

static int decode_rr(const mcp_mem *m, const uint8_t *in, size_t len,
                     mcp_request_buf *d, mcp_request *r) {
  span_ node = {0}, status = {0};
  int has_node = 0, has_status = 0;
  size_t ninit = 0, nann = 0, bytes = 16;
  const uint8_t *coll = NULL, *nonce = NULL;
  size_t coll_n = 0, nonce_n = 0;
  uint64_t incremental = 0;
  mcp_wire w = {in, in + len};
  mcp_wire_field fd;
  int rv;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num >= 1 && fd.num <= 5 && fd.wt != MCP_WT_LEN) {
      return MCP_ERR_MALFORMED;
    }
    switch (fd.num) {
    case 1: /* sink_node: id, annotations (key, value) */
      if (has_node) {
        return DECODE_GENERIC; /* occurrences merge: protobuf-c does it */
      }
      node.p = fd.data;
      node.n = fd.len;
      has_node = 1;
      break;
    case 2:
      coll = fd.data;
      coll_n = fd.len;
      break;
    case 3: { /* initial_resource_versions entry: key, value */
      size_t z = 0;
      if ((rv = walk(fd.data, fd.len, 1u << 1 | 1u << 2, 0, 0, &z, &bytes)) <
          0) {
        return MCP_ERR_MALFORMED;
      }
      bytes += 2; /* an absent key or value is "" */
      ninit++;
      break;
    }
    case 4:
      nonce = fd.data;
      nonce_n = fd.len;
      break;
    case 5:
      if (has_status) {
        return DECODE_GENERIC;
      }
      status.p = fd.data;
      status.n = fd.len;
      has_status = 1;
      break;
    case 6:
      if (fd.wt != MCP_WT_VARINT) {
        return MCP_ERR_MALFORMED;
      }
      incremental = fd.v;
      break;
    default:
      break;
    }
  }
  if (rv < 0 || !mcp_utf8_valid(coll, coll_n, 0) || !mcp_utf8_valid(nonce, nonce_n, 0)) {
    return MCP_ERR_MALFORMED;
  }
  bytes += coll_n + nonce_n + 2;
  if (has_node) {
    if (walk(node.p, node.n, 1u << 1, 1u << 2, 0, &nann, &bytes) < 0) {
      return MCP_ERR_MALFORMED;
    }
    mcp_wire nw = {node.p, node.p + node.n};
    while (mcp_wire_field_next(&nw, &fd) == 1) {
      size_t z = 0;
      if (fd.num == 2 &&
          walk(fd.data, fd.len, 1u << 1 | 1u << 2, 0, 0, &z, &bytes) < 0) {
        return MCP_ERR_MALFORMED;
      }
    }
    bytes += 2 * nann + 1;
  }
  if (has_status) {
    size_t nd = 0;
    if (walk(status.p, status.n, 1u << 2, 1u << 3, 1u << 1, &nd, &bytes) < 0) {
      return MCP_ERR_MALFORMED;
    }
    if (nd) {
      return DECODE_GENERIC; /* details (Any) are checked by protobuf-c */
    }
    bytes += 1;
  }
  size_t need = bytes + ninit * sizeof(mcp_kv) +
                nann * (sizeof(void *) +
                        sizeof(Istio__Mcp__V1alpha1__SinkNode__AnnotationsEntry)) + 16;
  d->arena = need <= sizeof(d->stack) ? d->stack : mcp_mem_malloc(m, need);
  if (!d->arena) {
    return MCP_ERR_NOMEM;
  }
  /* Arrays first (aligned), strings after. */
  char *a = d->arena;
  mcp_kv *kv = (mcp_kv *)(void *)a;
  a += ninit * sizeof(mcp_kv);
  Istio__Mcp__V1alpha1__SinkNode__AnnotationsEntry *ents =
      (Istio__Mcp__V1alpha1__SinkNode__AnnotationsEntry *)(void *)a;
  a += nann * sizeof(*ents);
  Istio__Mcp__V1alpha1__SinkNode__AnnotationsEntry **pents =
      (Istio__Mcp__V1alpha1__SinkNode__AnnotationsEntry **)(void *)a;
  a += nann * sizeof(*pents);
  size_t k = 0;
  w.p = in;
  while (mcp_wire_field_next(&w, &fd) == 1) {
    if (fd.num == 3) {
      kv[k].key = get_str(&a, fd.data, fd.len, 1);
      kv[k].value = get_str(&a, fd.data, fd.len, 2);
      ++k;
    }
  }
  r->key = r->collection = put_cstr(&a, coll ? coll : (const uint8_t *)"", coll_n);
  r->nonce = put_cstr(&a, nonce ? nonce : (const uint8_t *)"", nonce_n);
  r->initial = kv;
  r->ninitial = ninit;
  r->incremental = incremental != 0;
  r->resume = r->incremental && ninit > 0;
  if (has_node) {
    Istio__Mcp__V1alpha1__SinkNode ni = ISTIO__MCP__V1ALPHA1__SINK_NODE__INIT;
    d->node = ni;
    d->node.id = get_str(&a, node.p, node.n, 1);
    mcp_wire nw = {node.p, node.p + node.n};
    k = 0;
    while (mcp_wire_field_next(&nw, &fd) == 1) {
      if (fd.num == 2) {
        Istio__Mcp__V1alpha1__SinkNode__AnnotationsEntry ei =
            ISTIO__MCP__V1ALPHA1__SINK_NODE__ANNOTATIONS_ENTRY__INIT;
        ents[k] = ei;
        ents[k].key = get_str(&a, fd.data, fd.len, 1);
        ents[k].value = get_str(&a, fd.data, fd.len, 2);
        pents[k] = &ents[k];
        ++k;
      }
    }
    d->node.n_annotations = nann;
    d->node.annotations = pents;
    r->node = &d->node;
  }
  if (has_status) {
    Google__Rpc__Status si = GOOGLE__RPC__STATUS__INIT;
    d->status = si;
    mcp_wire sw = {status.p, status.p + status.n};
    while (mcp_wire_field_next(&sw, &fd) == 1) {
      if (fd.num == 1 && fd.wt == MCP_WT_VARINT) {
        d->status.code = (int32_t)fd.v;
      }
    }
    d->status.message = get_str(&a, status.p, status.n, 2);
    r->error = &d->status;
  }
  d->initial = kv;
  return 0;
}

/* The key (1) and value (2) of one SinkNode annotation entry. */
static int check_annotation(const mcp_request_limits *s, const uint8_t *p,
                            size_t n) {
  mcp_wire w = {p, p + n};
  mcp_wire_field fd;
  int rv;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.wt == MCP_WT_LEN && ((fd.num == 1 && fd.len > s->max_node_key) ||
                                (fd.num == 2 && fd.len > s->max_node_value))) {
      return MCP_ERR_PROTOCOL;
    }
  }
  return rv < 0 ? MCP_ERR_MALFORMED : 0;
}

/*
 * The SinkNode limits, on the request's bytes before anything of it is
 * copied: protobuf-c, and the node kept by the session, would copy a
 * 50 MiB id first. The occurrences of sink_node merge, so the annotations
 * and the bytes of all of them add up. Wire types that do not fit are
 * left to the decoder (MALFORMED).
 */
static int check_node(const mcp_request_limits *s, const uint8_t *in,
                      size_t len) {
  static const uint32_t node_field[3] = {
      [MCP_SERVICE_RESOURCE] = 1, /* RequestResources.sink_node */
      [MCP_SERVICE_AGGREGATED] = 2, /* MeshConfigRequest.sink_node */
      [MCP_SERVICE_AGGREGATED_INCREMENTAL] = 1};
  mcp_wire w = {in, in + len};
  mcp_wire_field fd, nf;
  int rv;
  size_t nann = 0, bytes = 0;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num != node_field[s->service] || fd.wt != MCP_WT_LEN) {
      continue;
    }
    if (fd.len > s->max_node_bytes - bytes) {
      return MCP_ERR_PROTOCOL;
    }
    bytes += fd.len;
    mcp_wire nw = {fd.data, fd.data + fd.len};
    while ((rv = mcp_wire_field_next(&nw, &nf)) == 1) {
      if (nf.wt != MCP_WT_LEN) {
        continue;
      }
      if (nf.num == 1 && nf.len > s->max_node_id) {
        return MCP_ERR_PROTOCOL;
      }
      if (nf.num == 2) {
        if (++nann > s->max_node_ann) {
          return MCP_ERR_LIMIT;
        }
        if ((rv = check_annotation(s, nf.data, nf.len)) != 0) {
          return rv;
        }
      }
    }
    if (rv < 0) {
      return MCP_ERR_MALFORMED;
    }
  }
  return rv < 0 ? MCP_ERR_MALFORMED : 0;
}

int mcp__request_decode(const mcp_request_limits *s, const mcp_mem *m,
                        const uint8_t *in, size_t len, mcp_request_buf *d,
                        mcp_request *r) {
  int rv = check_node(s, in, len);
  memset(r, 0, sizeof(*r));
  if (rv != 0) {
    return rv;
  }
  switch (s->service) {
  case MCP_SERVICE_RESOURCE: {
    if ((rv = decode_rr(m, in, len, d, r)) != DECODE_GENERIC) {
      if (rv != 0) {
        return rv;
      }
      goto limits; /* strings were checked while read */
    }
    rv = 0;
    if (d->arena && d->arena != d->stack) {
      mcp_mem_free(m, d->arena);
    }
    d->arena = NULL;
    memset(r, 0, sizeof(*r));
    ReqRR *q = istio__mcp__v1alpha1__request_resources__unpack(&d->pa.a, len, in);
    if (!(d->msg = (ProtobufCMessage *)q)) {
      return d->pa.failed ? MCP_ERR_NOMEM : MCP_ERR_MALFORMED;
    }
    INITIAL_(q, d->initial, r->ninitial, m, rv);
    r->key = r->collection = q->collection;
    r->nonce = q->response_nonce;
    r->error = q->error_detail;
    r->node = q->sink_node;
    r->incremental = q->incremental;
    r->resume = q->incremental && r->ninitial > 0;
    break;
  }
  case MCP_SERVICE_AGGREGATED: {
    ReqMC *q = istio__mcp__v1alpha1__mesh_config_request__unpack(&d->pa.a, len, in);
    if (!(d->msg = (ProtobufCMessage *)q)) {
      return d->pa.failed ? MCP_ERR_NOMEM : MCP_ERR_MALFORMED;
    }
    /* version_info only says what the sink applied: the nonce decides. */
    if (!mcp_str_valid(q->version_info)) {
      return MCP_ERR_MALFORMED;
    }
    r->key = q->type_url;
    r->nonce = q->response_nonce;
    r->error = q->error_detail;
    r->node = q->sink_node;
    break;
  }
  case MCP_SERVICE_AGGREGATED_INCREMENTAL: {
    ReqIMC *q = istio__mcp__v1alpha1__incremental_mesh_config_request__unpack(
        &d->pa.a, len, in);
    if (!(d->msg = (ProtobufCMessage *)q)) {
      return d->pa.failed ? MCP_ERR_NOMEM : MCP_ERR_MALFORMED;
    }
    INITIAL_(q, d->initial, r->ninitial, m, rv);
    r->key = q->type_url;
    r->nonce = q->response_nonce;
    r->error = q->error_detail;
    r->node = q->sink_node;
    r->incremental = 1;
    /* The first request of a stream always lists what the sink holds,
     * possibly nothing: every answer is a difference. */
    r->resume = 1;
    break;
  }
  }
  if (rv != 0) {
    return rv;
  }
  r->initial = d->initial;
  if (!mcp_str_valid(r->key) || !mcp_str_valid(r->nonce) ||
      !node_valid(r->node) ||
      (r->error && !mcp_str_valid(r->error->message))) {
    return MCP_ERR_MALFORMED;
  }
limits:
  if (r->ninitial > s->max_initial ||
      (r->node && r->node->n_annotations > s->max_node_ann)) {
    return MCP_ERR_LIMIT;
  }
  if (strlen(r->key) > s->max_name) {
    return MCP_ERR_PROTOCOL;
  }
  for (size_t k = 0; k < r->ninitial; ++k) {
    if (strlen(r->initial[k].key) > s->max_name ||
        strlen(r->initial[k].value) > s->max_version) {
      return MCP_ERR_PROTOCOL;
    }
  }
  return 0;
}

/* ---- writing requests (the sink) ---- */

static size_t str_size(const char *s) {
  size_t n = strlen(s);
  return n ? mcp_wire_len_field_size(n) : 0;
}

static uint8_t *put_str(uint8_t *p, uint32_t f, const char *s) {
  size_t n = strlen(s);
  return n ? mcp_wire_put_len_field(p, f, s, n) : p;
}

/* The SinkNode's encoded size, or 0 when it breaks a default limit of a
 * source (MCP_DEFAULT_MAX_NODE_*): a node no source takes by default would
 * end every stream. */
size_t mcp__node_size(const mcp_sink_options *o) {
  const char *id = o->node_id ? o->node_id : "";
  size_t body = str_size(id);
  if (strlen(id) > MCP_DEFAULT_MAX_NODE_ID_LEN ||
      o->nnode_annotations > MCP_DEFAULT_MAX_NODE_ANNOTATIONS) {
    return 0;
  }
  for (size_t i = 0; i < o->nnode_annotations; ++i) {
    const mcp_kv *kv = &o->node_annotations[i];
    if (strlen(kv->key) > MCP_DEFAULT_MAX_NODE_KEY_LEN ||
        strlen(kv->value) > MCP_DEFAULT_MAX_NODE_VALUE_LEN) {
      return 0;
    }
    body += mcp_wire_len_field_size(str_size(kv->key) + str_size(kv->value));
  }
  return body <= MCP_DEFAULT_MAX_NODE_BYTES ? body + 1 : 0;
}

/* Encodes the SinkNode once; each request embeds it. */
int mcp__node_encode(const mcp_mem *m, const mcp_sink_options *o,
                     uint8_t **penc, size_t *plen) {
  const char *id = o->node_id ? o->node_id : "";
  size_t body = mcp__node_size(o) - 1;
  uint8_t *p = mcp_mem_malloc(m, body);
  if (!p) {
    return MCP_ERR_NOMEM;
  }
  *penc = p;
  *plen = body;
  p = put_str(p, 1, id);
  for (size_t i = 0; i < o->nnode_annotations; ++i) {
    const mcp_kv *kv = &o->node_annotations[i];
    *p++ = 2 << 3 | MCP_WT_LEN;
    p = mcp_wire_put_varint(p, str_size(kv->key) + str_size(kv->value));
    p = put_str(p, 1, kv->key);
    p = put_str(p, 2, kv->value);
  }
  return 0;
}

static size_t status_size(int code, const char *msg) {
  size_t n = strlen(msg);
  return (code ? 1 + mcp_wire_varint_len((uint64_t)(int64_t)code) : 0) +
         (n ? mcp_wire_len_field_size(n) : 0);
}

/* Field numbers of each service's request (RequestResources,
 * MeshConfigRequest, IncrementalMeshConfigRequest); 0: no such field. */
typedef struct qcodec {
  uint8_t node, key, initial, nonce, error, incremental, version;
} qcodec;

static const qcodec qcodecs[] = {
    [MCP_SERVICE_RESOURCE] = {1, 2, 3, 4, 5, 6, 0},
    [MCP_SERVICE_AGGREGATED] = {2, 3, 0, 4, 5, 0, 1},
    [MCP_SERVICE_AGGREGATED_INCREMENTAL] = {1, 2, 3, 4, 5, 0, 0},
};

int mcp__request_has_initial(mcp_service service) {
  return qcodecs[service].initial != 0;
}

/* Encodes one request. |initial| is the held map (name -> held) or NULL; |version| the
 * version last applied (MeshConfigRequest.version_info: on a NACK, the
 * previous good one). */
int mcp__request_encode(const mcp_request_out *o, const char *coll,
                        const char *nonce, int code, const char *msg,
                        const mcp_map *initial, const char *version,
                        mcp_msg **pmsg) {
  const qcodec *q = &qcodecs[o->service];
  int incr = q->incremental && o->incremental;
  size_t n = mcp_wire_len_field_size(o->node_enc_len) + mcp_wire_len_field_size(strlen(coll)) +
             str_size(nonce) + (incr ? 2 : 0) +
             (q->version ? str_size(version) : 0);
  size_t ss = 0;
  if (code) {
    ss = status_size(code, msg);
    n += mcp_wire_len_field_size(ss);
  }
  void *v;
  for (size_t i = 0; initial && mcp_map_iter(initial, &i, &v);) {
    held *h = v;
    n += mcp_wire_len_field_size(str_size(h->name) + str_size(h->version));
  }
  mcp_msg_builder *b;
  if (mcp_msg_builder_new(&b, o->mem) != 0) {
    return MCP_ERR_NOMEM;
  }
  uint8_t *p = mcp_msg_builder_reserve(b, n);
  if (!p) {
    mcp_msg_builder_del(b);
    return MCP_ERR_NOMEM;
  }
  p = mcp_wire_put_len_field(p, q->node, o->node_enc, o->node_enc_len);
  p = mcp_wire_put_len_field(p, q->key, coll, strlen(coll));
  if (q->version) {
    p = put_str(p, q->version, version);
  }
  for (size_t i = 0; initial && mcp_map_iter(initial, &i, &v);) {
    held *h = v;
    *p++ = (uint8_t)(q->initial << 3 | MCP_WT_LEN);
    p = mcp_wire_put_varint(p, str_size(h->name) + str_size(h->version));
    p = put_str(p, 1, h->name);
    p = put_str(p, 2, h->version);
  }
  p = put_str(p, q->nonce, nonce);
  if (code) {
    *p++ = (uint8_t)(q->error << 3 | MCP_WT_LEN);
    p = mcp_wire_put_varint(p, ss);
    *p++ = 1 << 3 | MCP_WT_VARINT;
    p = mcp_wire_put_varint(p, (uint64_t)(int64_t)code);
    p = put_str(p, 2, msg);
  }
  if (incr) {
    *p++ = (uint8_t)(q->incremental << 3 | MCP_WT_VARINT);
    *p++ = 1;
  }
  int rv = mcp_msg_builder_finish(b, coll, pmsg);
  mcp_msg_builder_del(b);
  return rv;
}
