/*
 * The pushes of the three MCP services (Resources, MeshConfigResponse,
 * IncrementalMeshConfigResponse), written for the source side through the
 * table of field numbers mcp__codecs: the header fields are the message's
 * own bytes, each resource the store's shared encoding.
 */
#include "codec.h"

const mcp_codec mcp__codecs[3] = {
    [MCP_SERVICE_RESOURCE] = {1, 2, 3, 4, 5, 6},       /* Resources */
    [MCP_SERVICE_AGGREGATED] = {1, 3, 2, 0, 4, 0},     /* MeshConfigResponse */
    [MCP_SERVICE_AGGREGATED_INCREMENTAL] = {1, 0, 2, 3, 4, 0},
};

static size_t str_field(uint8_t f, size_t len) {
  return f && len ? mcp_wire_len_field_size(len) : 0;
}

static uint8_t *put_str(uint8_t *p, uint8_t f, const char *s, size_t len) {
  return f && len ? mcp_wire_put_len_field(p, f, s, len) : p;
}

void mcp__push_header(mcp_msg_builder *b, const mcp_codec *cd,
                      const char *version, const char *key, const char *nonce,
                      int incremental) {
  size_t vl = strlen(version), kl = strlen(key), nl = strlen(nonce);
  /* The collection is always written, even empty: it is what the message
   * is about. */
  size_t n = str_field(cd->version, vl) +
             (cd->key ? mcp_wire_len_field_size(kl) : 0) + str_field(cd->nonce, nl) +
             (cd->incremental && incremental ? 2 : 0);
  uint8_t *p = mcp_msg_builder_reserve(b, n);
  if (!p) {
    return;
  }
  p = put_str(p, cd->version, version, vl);
  if (cd->key) {
    p = mcp_wire_put_len_field(p, cd->key, key, kl);
  }
  p = put_str(p, cd->nonce, nonce, nl);
  if (cd->incremental && incremental) {
    *p++ = (uint8_t)(cd->incremental << 3 | MCP_WT_VARINT);
    *p++ = 1;
  }
}

/* ---- reading pushes (the sink) ---- */

/*
 * A read cursor over a message in fragments (a gRPC message arrives as
 * the transport's read slices). A field that lies in one fragment is read
 * where it is; one that crosses into the next is copied whole into
 * |scratch| and read there, so that every field is one span and the same
 * reader, mcp_wire_field_next(), decides about its bytes.
 */
typedef struct frags {
  const mcp_iovec *iov;
  size_t n, i;     /* the fragments, the current one */
  const uint8_t *p; /* where the next field starts, in fragment i */
  uint8_t *scratch; /* NULL: only measure (pass 0) */
  size_t used;      /* scratch bytes taken so far */
} frags;

static const uint8_t *frag_end(const frags *r) {
  return r->iov[r->i].base + r->iov[r->i].len;
}

/* Moves past empty fragments and the end of the current one. */
static void frag_settle(frags *r) {
  while (r->i < r->n && r->p == frag_end(r)) {
    if (++r->i < r->n) {
      r->p = r->iov[r->i].base;
    }
  }
}

/* The byte |k| bytes past the cursor, across fragments; -1 past the end. */
static int frag_byte(const frags *r, size_t k) {
  const uint8_t *p = r->p;
  for (size_t i = r->i; i < r->n; ++i) {
    size_t left = (size_t)(r->iov[i].base + r->iov[i].len - p);
    if (k < left) {
      return p[k];
    }
    k -= left;
    if (i + 1 < r->n) {
      p = r->iov[i + 1].base;
    }
  }
  return -1;
}

/* Reads a varint at |*k| past the cursor (any 10 bytes: the field's own
 * reader judges it once whole); -1 when it does not end. */
static int frag_varint(const frags *r, size_t *k, uint64_t *v) {
  *v = 0;
  for (unsigned sh = 0; sh < 70; sh += 7) {
    int b = frag_byte(r, (*k)++);
    if (b < 0) {
      return -1;
    }
    if (sh < 64) {
      *v |= (uint64_t)(b & 0x7f) << sh;
    }
    if (!(b & 0x80)) {
      return 0;
    }
  }
  return -1;
}

/* The bytes of the field at the cursor, by a reader more lenient than
 * mcp_wire_field_next(): 0 when it finds none (then the message is
 * malformed for that reader too: truncated, a group, wire type 6 or 7).
 * Fills |fd|'s number and wire type, and a LEN's length. */
static size_t frag_field_size(const frags *r, size_t total_left,
                              mcp_wire_field *fd) {
  size_t k = 0;
  uint64_t key, v = 0;
  if (frag_varint(r, &k, &key) != 0) {
    return 0;
  }
  fd->num = (uint32_t)(key >> 3);
  fd->wt = (int)(key & 7);
  fd->v = 0;
  fd->data = NULL;
  fd->len = 0;
  switch (key & 7) {
  case MCP_WT_VARINT:
    if (frag_varint(r, &k, &v) != 0) {
      return 0;
    }
    break;
  case MCP_WT_I64:
    k += 8;
    break;
  case MCP_WT_I32:
    k += 4;
    break;
  case MCP_WT_LEN:
    if (frag_varint(r, &k, &v) != 0 || v > total_left) {
      return 0;
    }
    fd->len = (size_t)v;
    k += (size_t)v;
    break;
  default:
    return 0;
  }
  return k <= total_left ? k : 0;
}

/* Copies |len| bytes from the cursor on to |dst| (NULL: only skips). */
static void frag_take(frags *r, uint8_t *dst, size_t len) {
  while (len) {
    size_t left = (size_t)(frag_end(r) - r->p);
    size_t k = len < left ? len : left;
    if (dst) {
      memcpy(dst, r->p, k);
      dst += k;
    }
    r->p += k;
    len -= k;
    frag_settle(r);
  }
}

/* The next field, as mcp_wire_field_next() reads it: 1, 0 at the end,
 * or MALFORMED. |*left| is what the message has from the cursor on. */
static int frag_field_next(frags *r, size_t *left, mcp_wire_field *fd) {
  frag_settle(r);
  if (r->i == r->n) {
    return 0;
  }
  mcp_wire w = {r->p, frag_end(r)};
  int rv = mcp_wire_field_next(&w, fd);
  if (rv == 1) {
    *left -= (size_t)(w.p - r->p);
    r->p = w.p;
    return 1;
  }
  if ((size_t)(w.end - r->p) == *left) {
    return rv; /* the last fragment: as on one buffer */
  }
  /* Cut by the fragment's end, or malformed: read it whole. */
  size_t size = frag_field_size(r, *left, fd);
  if (!size) {
    return MCP_ERR_MALFORMED;
  }
  uint8_t *dst = r->scratch ? r->scratch + r->used : NULL;
  r->used += size;
  *left -= size;
  if (!dst) {
    /* Pass 0 counts by the number and type read above; pass 1 reads the
     * copy, and judges it as one buffer would. */
    frag_take(r, NULL, size);
    return 1;
  }
  frag_take(r, dst, size);
  mcp_wire c = {dst, dst + size};
  rv = mcp_wire_field_next(&c, fd);
  return rv == 1 && c.p == c.end ? 1 : MCP_ERR_MALFORMED;
}

static int parse(const mcp_mem *m, mcp_service service, const mcp_iovec *iov,
                 size_t niov, envelope *env) {
  const mcp_codec *cd = &mcp__codecs[service];
  size_t len = env->len = mcp_iov_len(iov, niov);
  for (int pass = 0; pass < 2; ++pass) {
    frags r = {iov, niov, 0, niov ? iov[0].base : NULL, env->scratch, 0};
    size_t nres = 0, nrem = 0, left = len;
    mcp_wire_field fd;
    int rv;
    while ((rv = frag_field_next(&r, &left, &fd)) == 1) {
      uint32_t f = fd.num;
      span sp = {fd.data, fd.len};
      if (f == cd->incremental) {
        if (fd.wt != MCP_WT_VARINT) {
          return MCP_ERR_MALFORMED;
        }
        env->incremental = fd.v != 0;
        continue;
      }
      if (f != cd->version && f != cd->key && f != cd->resources &&
          f != cd->removed && f != cd->nonce) {
        continue; /* unknown fields are skipped, as protobuf says */
      }
      if (fd.wt != MCP_WT_LEN) {
        return MCP_ERR_MALFORMED;
      }
      if (f == cd->version) {
        env->sysver = sp;
      } else if (f == cd->key) {
        env->collection = sp;
      } else if (f == cd->nonce) {
        env->nonce = sp;
      } else if (f == cd->resources) {
        if (pass) {
          env->res[nres] = sp;
        }
        nres++;
      } else {
        if (pass) {
          env->rem[nrem] = sp;
        }
        nrem++;
      }
    }
    if (rv < 0) {
      return rv;
    }
    if (!pass) {
      env->res = mcp_mem_malloc(m, (nres ? nres : 1) * sizeof(span));
      env->rem = mcp_mem_malloc(m, (nrem ? nrem : 1) * sizeof(span));
      if (!env->res || !env->rem ||
          (r.used && !(env->scratch = mcp_mem_malloc(m, r.used)))) {
        return MCP_ERR_NOMEM;
      }
    }
    env->nres = nres;
    env->nrem = nrem;
  }
  if (service == MCP_SERVICE_AGGREGATED_INCREMENTAL) {
    env->incremental = 1; /* its type: attribute_type() */
  }
  return 0;
}

int mcp__push_parse(const mcp_mem *m, mcp_service service,
                    const mcp_iovec *iov, size_t niov, envelope *env) {
  memset(env, 0, sizeof(*env));
  int rv = parse(m, service, iov, niov, env);
  if (rv != 0) {
    /* Pass 1 can still refuse a field that crossed fragments. */
    mcp_mem_free(m, env->res);
    mcp_mem_free(m, env->rem);
    mcp_mem_free(m, env->scratch);
    memset(env, 0, sizeof(*env));
  }
  return rv;
}

int mcp__utf8_fast(const uint8_t *s, size_t n) {
  const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
  if (!n) {
    return 1; /* |s| may be NULL */
  }
  size_t i = 0;
  for (; n - i >= 8; i += 8) {
    uint64_t x;
    memcpy(&x, s + i, 8);
    if ((x | ((x - ones) & ~x)) & highs) {
      break; /* a byte >= 0x80 or a NUL: let the full check decide */
    }
  }
  while (i < n && (uint8_t)(s[i] - 1) < 0x7f) {
    ++i;
  }
  return i == n || mcp_utf8_valid(s + i, n - i, 0);
}


/* The last LEN fields 1 and 2 of a message (a map entry's key and
 * value, an Any's type URL and value) into |out| (left as they are when
 * absent); another wire type for either is MALFORMED. */
static int read_pair(const uint8_t *p, size_t n, span out[2]) {
  mcp_wire w = {p, p + n};
  mcp_wire_field fd;
  int rv;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num == 1 || fd.num == 2) {
      if (fd.wt != MCP_WT_LEN) {
        return MCP_ERR_MALFORMED;
      }
      out[fd.num - 1].p = fd.data;
      out[fd.num - 1].n = fd.len;
    }
  }
  return rv;
}

static int read_entry(const uint8_t *p, size_t n, rview *r, filler *fl,
                      mcp_kv *out) {
  span kv[2] = {{NULL, 0}, {NULL, 0}};
  int rv = read_pair(p, n, kv);
  if (rv < 0) {
    return rv;
  }
  if (!fl) {
    r->bytes += span_bytes(kv[0]) + span_bytes(kv[1]);
    return 0;
  }
  if (!span_valid(kv[0]) || !span_valid(kv[1])) {
    fl->utf8_ok = 0;
  }
  out->key = fill_str(fl, kv[0]);
  out->value = fill_str(fl, kv[1]);
  return 0;
}

static int read_timestamp(const uint8_t *p, size_t n, rview *r) {
  mcp_wire w = {p, p + n};
  mcp_wire_field fd;
  int rv;
  /* protobuf-c merges a repeated Timestamp by taking the latter whole:
   * proto3 scalars have no presence for its merge. */
  r->has_ct = 1;
  r->ct_seconds = 0;
  r->ct_nanos = 0;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num == 1 || fd.num == 2) {
      if (fd.wt != MCP_WT_VARINT) {
        return MCP_ERR_MALFORMED;
      }
      if (fd.num == 1) {
        r->ct_seconds = (int64_t)fd.v;
      } else {
        /* the low 32 bits, as protobuf */
        r->ct_nanos = (int32_t)(uint32_t)fd.v;
      }
    }
  }
  return rv;
}

static int read_metadata(const uint8_t *p, size_t n, rview *r, filler *fl) {
  mcp_wire w = {p, p + n};
  mcp_wire_field fd;
  int rv;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num < 1 || fd.num > 5) {
      continue;
    }
    if (fd.wt != MCP_WT_LEN) {
      return MCP_ERR_MALFORMED;
    }
    span sp = {fd.data, fd.len};
    switch (fd.num) {
    case 1:
      r->name = sp;
      break;
    case 2:
      rv = read_timestamp(sp.p, sp.n, r);
      break;
    case 3:
      r->version = sp;
      break;
    case 4:
      rv = read_entry(sp.p, sp.n, r, fl, fl ? fl->lab++ : NULL);
      r->nlabels++;
      break;
    default:
      rv = read_entry(sp.p, sp.n, r, fl, fl ? fl->ann++ : NULL);
      r->nannotations++;
      break;
    }
    if (rv < 0) {
      return rv;
    }
  }
  return rv;
}

static int read_any(const uint8_t *p, size_t n, rview *r) {
  /* A type URL present (even empty) replaces the earlier one; protobuf-c
   * merges a repeated Any keeping the earlier value when the latter's is
   * empty. */
  span tv[2] = {r->type_url, {NULL, 0}};
  int rv = read_pair(p, n, tv);
  if (rv < 0) {
    return rv;
  }
  r->type_url = tv[0];
  if (tv[1].n) {
    r->body = tv[1];
  }
  return 0;
}

int mcp__resource_read(span res, rview *r, filler *fl) {
  mcp_wire w = {res.p, res.p + res.n};
  mcp_wire_field fd;
  int rv;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num != 1 && fd.num != 2) {
      continue;
    }
    if (fd.wt != MCP_WT_LEN) {
      return MCP_ERR_MALFORMED;
    }
    if ((rv = fd.num == 1 ? read_metadata(fd.data, fd.len, r, fl)
                          : read_any(fd.data, fd.len, r)) < 0) {
      return rv;
    }
  }
  if (rv < 0) {
    return rv;
  }
  r->bytes += span_bytes(r->name) + span_bytes(r->version) +
              span_bytes(r->type_url);
  return 0;
}

int mcp_resource_decode(const uint8_t *in, size_t len, const mcp_mem *mem,
                        size_t extra, mcp_resource *res, void **block,
                        char **extra_p) {
  *block = NULL;
  if (extra_p) {
    *extra_p = NULL;
  }
  static const uint8_t none[1];
  span sp = {in ? in : none, in ? len : 0}; /* no arithmetic on NULL */
  rview v;
  memset(&v, 0, sizeof(v));
  if (mcp__resource_read(sp, &v, NULL) != 0) {
    return MCP_ERR_MALFORMED;
  }
  size_t kvb = (v.nlabels + v.nannotations) * sizeof(mcp_kv);
  if (extra > SIZE_MAX / 2 - kvb - v.bytes) {
    return MCP_ERR_NOMEM;
  }
  char *arena = mcp_mem_malloc(mem, kvb + v.bytes + extra + 1);
  if (!arena) {
    return MCP_ERR_NOMEM;
  }
  filler fl = {.lab = (mcp_kv *)(void *)arena,
               .ann = (mcp_kv *)(void *)arena + v.nlabels,
               .str = arena + kvb,
               .utf8_ok = 1};
  memset(res, 0, sizeof(*res));
  res->labels = fl.lab;
  res->nlabels = v.nlabels;
  res->annotations = fl.ann;
  res->nannotations = v.nannotations;
  memset(&v, 0, sizeof(v));
  mcp__resource_read(sp, &v, &fl); /* read once already: cannot fail */
  if (!fl.utf8_ok || !span_valid(v.name) || !span_valid(v.version) ||
      !span_valid(v.type_url)) {
    mcp_mem_free(mem, arena);
    return MCP_ERR_PROTOCOL;
  }
  res->name = fill_str(&fl, v.name);
  res->version = fill_str(&fl, v.version);
  res->type_url = fill_str(&fl, v.type_url);
  res->has_create_time = v.has_ct;
  res->create_time_seconds = v.ct_seconds;
  res->create_time_nanos = v.ct_nanos;
  res->body = v.body.n ? v.body.p : NULL;
  res->body_len = v.body.n;
  if (extra_p && extra) {
    *extra_p = arena + kvb + v.bytes;
  }
  *block = arena;
  return 0;
}
