/*
 * The xDS client (mcp/xds.h): an istiod-like ADS client on the stream
 * driver, as Istio's pkg/adsc does it: the initial requests of every type
 * (the node on the first), then each response decoded, checked, handed to
 * the application, ACKed or NACKed. What is held per type lives in an
 * mcp_xds_held that outlives streams: a delta client's next stream starts
 * with initial_resource_versions.
 */
#include "xds_int.h"

#include "mcp/mcp_v1alpha1.h" /* mcp_resource_decode(): the bodies are MCP's */

/* Bytes inside a received message. */
typedef struct xspan {
  const uint8_t *p;
  size_t n;
} xspan;

/* ---- what is held ---- */

typedef struct htype {
  char *type_url;
  mcp_map names; /* name -> "name\0version" block */
} htype;

struct mcp_xds_held {
  mcp_mem mem;
  htype *types;
  size_t ntypes;
};

int mcp_xds_held_new(mcp_xds_held **ph, const mcp_mem *mem) {
  mcp_mem m;
  mcp_mem_init(&m, mem);
  mcp_xds_held *h = mcp_mem_calloc(&m, 1, sizeof(*h));
  if (!h) {
    return MCP_ERR_NOMEM;
  }
  h->mem = m;
  *ph = h;
  return 0;
}

static void blocks_clear(mcp_map *mp, const mcp_mem *m) {
  void *v;
  for (size_t i = 0; mcp_map_iter(mp, &i, &v);) {
    mcp_mem_free(m, v);
  }
  mcp_map_free(mp, m);
  memset(mp, 0, sizeof(*mp));
}

void mcp_xds_held_del(mcp_xds_held *h) {
  if (!h) {
    return;
  }
  for (size_t i = 0; i < h->ntypes; ++i) {
    blocks_clear(&h->types[i].names, &h->mem);
    mcp_mem_free(&h->mem, h->types[i].type_url);
  }
  mcp_mem_free(&h->mem, h->types);
  mcp_mem m = h->mem;
  mcp_mem_free(&m, h);
}

static htype *held_find(const mcp_xds_held *h, const char *type_url) {
  for (size_t i = 0; i < h->ntypes; ++i) {
    if (strcmp(h->types[i].type_url, type_url) == 0) {
      return &h->types[i];
    }
  }
  return NULL;
}

static htype *held_get(mcp_xds_held *h, const char *type_url) {
  htype *t = held_find(h, type_url);
  if (t) {
    return t;
  }
  htype *nt = mcp_mem_realloc(&h->mem, h->types, (h->ntypes + 1) * sizeof(*nt));
  if (!nt) {
    return NULL;
  }
  h->types = nt;
  t = &nt[h->ntypes];
  memset(t, 0, sizeof(*t));
  if (!(t->type_url = mcp_mem_strdup(&h->mem, type_url))) {
    return NULL;
  }
  h->ntypes++;
  return t;
}

size_t mcp_xds_held_count(const mcp_xds_held *h, const char *type_url) {
  const htype *t = held_find(h, type_url);
  return t ? t->names.n : 0;
}

const char *mcp_xds_held_version(const mcp_xds_held *h, const char *type_url,
                                 const char *name) {
  const htype *t = held_find(h, type_url);
  const char *b = t ? mcp_map_get(&t->names, name) : NULL;
  return b ? b + strlen(b) + 1 : NULL;
}

static char *block(const mcp_mem *m, const char *name, const char *version) {
  size_t n = strlen(name), v = strlen(version);
  char *b = mcp_mem_malloc(m, n + v + 2);
  if (b) {
    memcpy(b, name, n + 1);
    memcpy(b + n + 1, version, v + 1);
  }
  return b;
}

/* Applies an accepted response: SotW replaces the type's set, delta
 * changes it. Prepares everything first: on NOMEM nothing changed. */
static int held_apply(mcp_xds_held *h, const mcp_xds_response *r) {
  const mcp_mem *m = &h->mem;
  htype *t = held_get(h, r->type_url);
  if (!t) {
    return MCP_ERR_NOMEM;
  }
  mcp_map fresh = {0};
  mcp_map *dst = r->delta ? &t->names : &fresh;
  char **blk = mcp_mem_calloc(m, r->nresources + 1, sizeof(*blk));
  int ok = blk && mcp_map_reserve(dst, m, r->nresources) == 0;
  for (size_t i = 0; ok && i < r->nresources; ++i) {
    ok = (blk[i] = block(m, r->resources[i].name,
                         r->resources[i].version ? r->resources[i].version
                                                 : "")) != NULL;
  }
  if (!ok) {
    for (size_t i = 0; blk && i < r->nresources; ++i) {
      mcp_mem_free(m, blk[i]);
    }
    mcp_mem_free(m, blk);
    mcp_map_free(&fresh, m);
    return MCP_ERR_NOMEM;
  }
  if (r->delta) {
    for (size_t i = 0; i < r->nremoved; ++i) {
      mcp_mem_free(m, mcp_map_del(&t->names, r->removed[i]));
    }
  }
  for (size_t i = 0; i < r->nresources; ++i) {
    int err = 0;
    mcp_mem_free(m, mcp_map_put(dst, m, blk[i], blk[i], &err));
  }
  mcp_mem_free(m, blk);
  if (!r->delta) {
    blocks_clear(&t->names, m);
    t->names = fresh;
  }
  return 0;
}

/* ---- the stream ---- */

typedef struct xclient {
  mcp_mem mem;
  mcp_xds_held *held;
  int delta;
  char **types;
  size_t ntypes, next_initial;
  char *node_id;
  mcp_kv *meta;
  size_t nmeta;
  char *initial_nonce;
  mcp_xds_response_fn fn;
  void *ud;
  mcp_msg_builder *b;
  unsigned char *seen; /* per type: a response came on this stream */
  mcp_msg **queue; /* answers to send, oldest first */
  size_t nq, qcap;
  uint64_t responses;
} xclient;

static void put_node(xclient *c, mcp_msg_builder *b, uint32_t field) {
  /* Node { id = 1; metadata = 3 (Struct { map<string, Value> fields = 1 },
   * Value { string_value = 3 }) } */
  size_t md = 0;
  for (size_t i = 0; i < c->nmeta; ++i) {
    size_t k = strlen(c->meta[i].key), v = strlen(c->meta[i].value);
    size_t val = 1 + mcp_wire_varint_len(v) + v;
    size_t ent = 1 + mcp_wire_varint_len(k) + k + 1 + mcp_wire_varint_len(val) + val;
    md += 1 + mcp_wire_varint_len(ent) + ent;
  }
  size_t id = strlen(c->node_id);
  size_t node = 1 + mcp_wire_varint_len(id) + id +
                (c->nmeta ? 1 + mcp_wire_varint_len(md) + md : 0);
  mcp_msg_builder_key(b, field, MCP_WT_LEN);
  mcp_msg_builder_varint(b, node);
  mcp_msg_builder_len_field(b, 1, c->node_id, id);
  if (!c->nmeta) {
    return;
  }
  mcp_msg_builder_key(b, 3, MCP_WT_LEN);
  mcp_msg_builder_varint(b, md);
  for (size_t i = 0; i < c->nmeta; ++i) {
    size_t k = strlen(c->meta[i].key), v = strlen(c->meta[i].value);
    size_t val = 1 + mcp_wire_varint_len(v) + v;
    size_t ent = 1 + mcp_wire_varint_len(k) + k + 1 + mcp_wire_varint_len(val) + val;
    mcp_msg_builder_key(b, 1, MCP_WT_LEN);
    mcp_msg_builder_varint(b, ent);
    mcp_msg_builder_len_field(b, 1, c->meta[i].key, k);
    mcp_msg_builder_key(b, 2, MCP_WT_LEN);
    mcp_msg_builder_varint(b, val);
    mcp_msg_builder_len_field(b, 3, c->meta[i].value, v);
  }
}

static void put_str(mcp_msg_builder *b, uint32_t f, const char *s) {
  if (s && s[0]) {
    mcp_msg_builder_len_field(b, f, s, strlen(s));
  }
}

/* The first request of type |i|. */
static int initial_request(xclient *c, size_t i, mcp_msg **pmsg) {
  mcp_msg_builder *b = c->b;
  const char *tu = c->types[i];
  if (i == 0) {
    put_node(c, b, c->delta ? 1 : 2);
  }
  if (!c->delta) {
    put_str(b, 4, tu);
    put_str(b, 5, c->initial_nonce);
  } else {
    put_str(b, 2, tu);
    /* What this client holds: only the difference comes back. */
    const htype *t = held_find(c->held, tu);
    void *v;
    for (size_t k = 0; t && mcp_map_iter(&t->names, &k, &v);) {
      const char *name = v, *ver = name + strlen(name) + 1;
      size_t nl = strlen(name), vl = strlen(ver);
      mcp_msg_builder_key(b, 5, MCP_WT_LEN);
      mcp_msg_builder_varint(b, 1 + mcp_wire_varint_len(nl) + nl + 1 +
                                    mcp_wire_varint_len(vl) + vl);
      mcp_msg_builder_len_field(b, 1, name, nl);
      mcp_msg_builder_len_field(b, 2, ver, vl);
    }
  }
  return mcp_msg_builder_finish(b, tu, pmsg);
}

static int enqueue(xclient *c, mcp_msg *msg) {
  if (c->nq == c->qcap) {
    size_t cap = c->qcap ? 2 * c->qcap : 8;
    mcp_msg **q = mcp_mem_realloc(&c->mem, c->queue, cap * sizeof(*q));
    if (!q) {
      mcp_msg_free(msg);
      return MCP_ERR_NOMEM;
    }
    c->queue = q;
    c->qcap = cap;
  }
  c->queue[c->nq++] = msg;
  return 0;
}

/* An ACK (code 0) or a NACK of a response. */
static int answer(xclient *c, const char *type_url, const char *version,
                  const char *nonce, int code, const char *msg) {
  mcp_msg_builder *b = c->b;
  if (!c->delta) {
    put_str(b, 1, version);
    put_str(b, 4, type_url);
    put_str(b, 5, nonce);
  } else {
    put_str(b, 2, type_url);
    put_str(b, 6, nonce);
  }
  if (code) {
    size_t ml = strlen(msg);
    mcp_msg_builder_key(b, c->delta ? 7 : 6, MCP_WT_LEN);
    mcp_msg_builder_varint(b, 1 + mcp_wire_varint_len((uint64_t)code) + 1 +
                                  mcp_wire_varint_len(ml) + ml);
    mcp_msg_builder_key(b, 1, MCP_WT_VARINT);
    mcp_msg_builder_varint(b, (uint64_t)code);
    mcp_msg_builder_len_field(b, 2, msg, ml);
  }
  mcp_msg *m = NULL;
  int rv = mcp_msg_builder_finish(b, type_url, &m);
  return rv < 0 ? rv : enqueue(c, m);
}

/* One received resource, before it is decoded. */
typedef struct rin {
  xspan name, version; /* delta's discovery.v3.Resource */
  xspan any_type, any_value;
} rin;

typedef struct parsed {
  xspan version, type_url, nonce;
  rin *res;
  xspan *removed;
  size_t nres, nremoved;
} parsed;

static int read_any_span(const uint8_t *p, size_t n, rin *r) {
  mcp_wire w = {p, p + n};
  mcp_wire_field fd;
  int rv;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.wt == MCP_WT_LEN && fd.num == 1) {
      r->any_type = (xspan){fd.data, fd.len};
    } else if (fd.wt == MCP_WT_LEN && fd.num == 2) {
      r->any_value = (xspan){fd.data, fd.len};
    }
  }
  return rv;
}

/* Reads the envelope; two passes (count, fill). */
static int parse(xclient *c, const uint8_t *in, size_t len, parsed *p,
                 int fill) {
  mcp_wire w = {in, in + len};
  mcp_wire_field fd, rf;
  int rv;
  size_t nr = 0, nm = 0;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.wt != MCP_WT_LEN) {
      continue;
    }
    uint32_t f = fd.num;
    xspan sp = {fd.data, fd.len};
    if (f == 1) {
      p->version = sp;
    } else if (f == 4) {
      p->type_url = sp;
    } else if (f == 5) {
      p->nonce = sp;
    } else if (f == 6 && c->delta) {
      if (fill) {
        p->removed[nm] = sp;
      }
      nm++;
    } else if (f == 2) {
      if (fill) {
        rin *r = &p->res[nr];
        memset(r, 0, sizeof(*r));
        if (!c->delta) {
          rv = read_any_span(sp.p, sp.n, r);
        } else {
          mcp_wire x = {sp.p, sp.p + sp.n};
          while ((rv = mcp_wire_field_next(&x, &rf)) == 1) {
            if (rf.wt != MCP_WT_LEN) {
              continue;
            }
            xspan rs = {rf.data, rf.len};
            if (rf.num == 3) {
              r->name = rs;
            } else if (rf.num == 1) {
              r->version = rs;
            } else if (rf.num == 2 &&
                       (rv = read_any_span(rs.p, rs.n, r)) < 0) {
              break;
            }
          }
        }
        if (rv < 0) {
          return rv;
        }
      }
      nr++;
    }
  }
  if (rv < 0) {
    return rv;
  }
  if (!fill) {
    p->nres = nr;
    p->nremoved = nm;
  }
  return 0;
}

/* A NUL-terminated copy of |s| at |*at|, which moves past it. */
static const char *copy_str(char **at, xspan s) {
  char *d = *at;
  if (s.n) {
    memcpy(d, s.p, s.n);
  }
  d[s.n] = '\0';
  *at += s.n + 1;
  return d;
}

static char *span_str(const mcp_mem *m, xspan s) {
  return mcp_mem_strndup(m, s.n ? (const char *)s.p : "", s.n);
}

/* Builds the public views of the resources; |why| set (a NACK reason) for
 * content that cannot be accepted. Allocations listed in |arenas|. */
static int decode(xclient *c, const parsed *p, int mesh, mcp_resource *out,
                  void **arenas, char *why, size_t wl) {
  const mcp_mem *m = &c->mem;
  static const char rtype[] = MCP_XDS_RESOURCE_TYPE_URL;
  for (size_t i = 0; i < p->nres; ++i) {
    const rin *r = &p->res[i];
    mcp_resource *o = &out[i];
    memset(o, 0, sizeof(*o));
    if (!mcp_utf8_valid(r->any_type.p, r->any_type.n, 0) ||
        !mcp_utf8_valid(r->name.p, r->name.n, 0) ||
        !mcp_utf8_valid(r->version.p, r->version.n, 0)) {
      mcp_fmt(why, wl, "resource %zu: a string is not UTF-8", i);
      return 0;
    }
    int is_res = r->any_type.n == sizeof(rtype) - 1 &&
                 memcmp(r->any_type.p, rtype, r->any_type.n) == 0;
    if (!is_res && !mesh) {
      mcp_fmt(why, wl, "resource %zu: its Any is no %s", i, rtype);
      return 0;
    }
    if (!is_res) {
      /* MeshConfig: the Any is the body. Named by delta, else "mesh". */
      char *arena = mcp_mem_malloc(m, r->name.n + r->version.n +
                                          r->any_type.n + 3);
      if (!arena) {
        return MCP_ERR_NOMEM;
      }
      arenas[i] = arena;
      o->name = r->name.n ? copy_str(&arena, r->name) : "mesh";
      o->version = copy_str(&arena, r->version);
      o->type_url = copy_str(&arena, r->any_type);
      o->body = r->any_value.n ? r->any_value.p : NULL;
      o->body_len = r->any_value.n;
      continue;
    }
    /* The envelope's version (delta) lives with the resource's strings. */
    char *ver = NULL;
    int rv = mcp_resource_decode(r->any_value.p, r->any_value.n, m,
                                 r->version.n + 1, o, &arenas[i], &ver);
    if (rv == MCP_ERR_NOMEM) {
      return rv;
    }
    if (rv < 0) {
      mcp_fmt(why, wl, rv == MCP_ERR_MALFORMED
                           ? "resource %zu does not decode"
                           : "resource %zu: a string is not UTF-8",
              i);
      return 0;
    }
    if (r->version.n) { /* delta: the envelope's version is the resource's */
      o->version = copy_str(&ver, r->version);
    }
    if (r->name.n && (r->name.n != strlen(o->name) ||
                      memcmp(r->name.p, o->name, r->name.n) != 0)) {
      mcp_fmt(why, wl, "resource %zu: its name is not its metadata.name %s",
               i, o->name);
      return 0;
    }
    if (mcp_resource_check(o, NULL, why, wl) != 0) {
      return 0;
    }
  }
  /* One name once: a map, not a pairwise scan (O(n), not O(n^2), for a
   * large SotW set). */
  mcp_map seen = {0};
  if (mcp_map_reserve(&seen, m, p->nres) != 0) {
    return MCP_ERR_NOMEM;
  }
  for (size_t i = 0; i < p->nres; ++i) {
    int err = 0;
    if (mcp_map_put(&seen, m, out[i].name, &out[i], &err)) {
      mcp_fmt(why, wl, "resource %s listed twice", out[i].name);
      break;
    }
  }
  mcp_map_free(&seen, m);
  return 0;
}

/* Delta: the first response of a type this stream asked for while
 * holding nothing of it: it lists the whole set. */
static int first_of_empty(xclient *c, const char *tu) {
  for (size_t i = 0; i < c->ntypes; ++i) {
    if (strcmp(c->types[i], tu) == 0) {
      int first = !c->seen[i];
      c->seen[i] = 1;
      return first && mcp_xds_held_count(c->held, tu) == 0;
    }
  }
  return 0;
}

static int cli_recv(void *sess, const uint8_t *in, size_t len,
                    mcp_tstamp ts) {
  xclient *c = sess;
  const mcp_mem *m = &c->mem;
  MCP_UNUSED(ts);
  parsed p;
  memset(&p, 0, sizeof(p));
  int rv = parse(c, in, len, &p, 0);
  if (rv < 0 || !p.type_url.n || !mcp_utf8_valid(p.type_url.p, p.type_url.n, 0) ||
      !mcp_utf8_valid(p.nonce.p, p.nonce.n, 0) ||
      !mcp_utf8_valid(p.version.p, p.version.n, 0)) {
    return MCP_ERR_MALFORMED; /* nothing to NACK it with */
  }
  char *tu = span_str(m, p.type_url), *ver = span_str(m, p.version),
       *nonce = span_str(m, p.nonce);
  p.res = mcp_mem_calloc(m, p.nres + 1, sizeof(*p.res));
  p.removed = mcp_mem_calloc(m, p.nremoved + 1, sizeof(*p.removed));
  mcp_resource *res = mcp_mem_calloc(m, p.nres + 1, sizeof(*res));
  void **arenas = mcp_mem_calloc(m, p.nres + 1, sizeof(*arenas));
  char **removed = mcp_mem_calloc(m, p.nremoved + 1, sizeof(*removed));
  char why[512] = "", msg[512] = "";
  if (!tu || !ver || !nonce || !p.res || !p.removed || !res || !arenas ||
      !removed) {
    rv = MCP_ERR_NOMEM;
    goto out;
  }
  if ((rv = parse(c, in, len, &p, 1)) < 0) {
    goto out;
  }
  for (size_t i = 0; i < p.nremoved; ++i) {
    if (!mcp_utf8_valid(p.removed[i].p, p.removed[i].n, 0)) {
      mcp_fmt(why, sizeof why, "a removed name is not UTF-8");
      break;
    }
    if (!(removed[i] = span_str(m, p.removed[i]))) {
      rv = MCP_ERR_NOMEM;
      goto out;
    }
  }
  if (!why[0] &&
      (rv = decode(c, &p, strcmp(tu, MCP_XDS_MESH_TYPE) == 0, res, arenas,
                   why, sizeof why)) < 0) {
    goto out;
  }
  int cn = mcp_collection_for_gvk(tu, NULL, 0);
  char coll[512];
  if (cn >= 0 && (size_t)cn < sizeof coll) {
    mcp_collection_for_gvk(tu, coll, sizeof coll);
  }
  mcp_xds_response r = {
      .delta = c->delta,
      .type_url = tu,
      .version = ver,
      .nonce = nonce,
      .collection = cn >= 0 && (size_t)cn < sizeof coll ? coll : NULL,
      .resources = why[0] ? NULL : res,
      .nresources = why[0] ? 0 : p.nres,
      .removed = (const char *const *)removed,
      .nremoved = why[0] ? 0 : p.nremoved,
      .complete = !c->delta || first_of_empty(c, tu),
  };
  int code = c->fn ? c->fn(&r, why[0] ? why : NULL, msg, sizeof msg, c->ud)
                   : 0;
  if (why[0]) {
    code = MCP_CODE_INVALID_ARGUMENT;
    memcpy(msg, why, sizeof msg);
  }
  if (code == 0 && (rv = held_apply(c->held, &r)) < 0) {
    goto out;
  }
  c->responses++;
  rv = answer(c, tu, ver, nonce, code, code ? msg : "");
out:
  for (size_t i = 0; arenas && i < p.nres; ++i) {
    mcp_mem_free(m, arenas[i]);
  }
  for (size_t i = 0; removed && i < p.nremoved; ++i) {
    mcp_mem_free(m, removed[i]);
  }
  mcp_mem_free(m, arenas);
  mcp_mem_free(m, removed);
  mcp_mem_free(m, res);
  mcp_mem_free(m, p.res);
  mcp_mem_free(m, p.removed);
  mcp_mem_free(m, tu);
  mcp_mem_free(m, ver);
  mcp_mem_free(m, nonce);
  return rv;
}

static int cli_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  xclient *c = sess;
  MCP_UNUSED(ts);
  if (c->next_initial < c->ntypes) {
    int rv = initial_request(c, c->next_initial, pmsg);
    if (rv < 0) {
      return rv;
    }
    c->next_initial++;
    return 1;
  }
  if (!c->nq) {
    return 0;
  }
  *pmsg = c->queue[0];
  memmove(c->queue, c->queue + 1, (c->nq - 1) * sizeof(*c->queue));
  c->nq--;
  return 1;
}

static void cli_del(void *sess) {
  xclient *c = sess;
  const mcp_mem *m = &c->mem;
  for (size_t i = 0; i < c->nq; ++i) {
    mcp_msg_free(c->queue[i]);
  }
  mcp_mem_free(m, c->queue);
  for (size_t i = 0; c->types && i < c->ntypes; ++i) {
    mcp_mem_free(m, c->types[i]);
  }
  mcp_mem_free(m, c->types);
  mcp_mem_free(m, c->seen);
  mcp__xds_node_free(m, c->node_id, c->meta, c->nmeta);
  mcp_mem_free(m, c->initial_nonce);
  mcp_msg_builder_del(c->b);
  mcp_mem mm = c->mem;
  mcp_mem_free(&mm, c);
}

static const mcp_stream_ops client_ops = {
    .name = MCP_XDS_API_NAME,
    .flags = MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE,
    .recv = cli_recv,
    .next = cli_next,
    .del = cli_del,
};

int mcp_xds_client_open_versioned(mcp_stream **pst, int version,
                                  const mcp_xds_client_options *opts,
                                  mcp_tstamp ts) {
  mcp_xds_client_options o;
  if (!pst || !opts || !mcp_vstruct_known(version, MCP_VSTRUCT_N)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  memset(&o, 0, sizeof(o));
  memcpy(&o, opts,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_xds_client_options),
                           MCP_VSTRUCT_N));
  if (!o.held || !o.ntypes || !o.type_urls ||
      (o.nnode_metadata && !o.node_metadata)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  for (size_t i = 0; i < o.ntypes; ++i) {
    if (!o.type_urls[i] || !o.type_urls[i][0] ||
        !mcp_str_valid(o.type_urls[i])) {
      return MCP_ERR_INVALID_ARGUMENT;
    }
  }
  mcp_mem m;
  mcp_mem_init(&m, o.mem);
  xclient *c = mcp_mem_calloc(&m, 1, sizeof(*c));
  if (!c) {
    return MCP_ERR_NOMEM;
  }
  c->mem = m;
  c->held = o.held;
  c->delta = o.delta != 0;
  c->fn = o.on_response;
  c->ud = o.user_data;
  c->ntypes = o.ntypes;
  int ok = mcp_msg_builder_new(&c->b, &c->mem) == 0 &&
           (c->types = mcp_mem_calloc(&m, o.ntypes, sizeof(char *))) &&
           (c->seen = mcp_mem_calloc(&m, o.ntypes, 1)) &&
           (c->node_id = mcp_mem_strdup(&m, o.node_id ? o.node_id : "")) &&
           (c->initial_nonce =
                mcp_mem_strdup(&m, o.initial_nonce ? o.initial_nonce : "")) &&
           (!o.nnode_metadata ||
            (c->meta = mcp_mem_calloc(&m, o.nnode_metadata, sizeof(mcp_kv))));
  for (size_t i = 0; ok && i < o.ntypes; ++i) {
    ok = (c->types[i] = mcp_mem_strdup(&m, o.type_urls[i])) != NULL;
  }
  for (size_t i = 0; ok && i < o.nnode_metadata; ++i) {
    c->meta[i].key = mcp_mem_strdup(&m, o.node_metadata[i].key);
    c->meta[i].value = mcp_mem_strdup(&m, o.node_metadata[i].value);
    c->nmeta = i + 1;
    ok = c->meta[i].key && c->meta[i].value;
  }
  if (!ok) {
    if (!c->types) {
      c->ntypes = 0;
    }
    cli_del(c);
    return MCP_ERR_NOMEM;
  }
  return mcp_stream_new(pst, &client_ops, c, &c->mem, ts);
}

int mcp_xds_client_stream_is(const mcp_stream *st) {
  return st && mcp_stream_get_ops(st) == &client_ops;
}
