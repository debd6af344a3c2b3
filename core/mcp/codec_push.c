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

int mcp__push_parse(const mcp_mem *m, mcp_service service,
                          const uint8_t *in, size_t len, envelope *env) {
  const mcp_codec *cd = &mcp__codecs[service];
  memset(env, 0, sizeof(*env));
  for (int pass = 0; pass < 2; ++pass) {
    mcp_wire w = {in, in + len};
    size_t nres = 0, nrem = 0;
    mcp_wire_field fd;
    int rv;
    while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
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
      if (!env->res || !env->rem) {
        mcp_mem_free(m, env->res);
        mcp_mem_free(m, env->rem);
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
