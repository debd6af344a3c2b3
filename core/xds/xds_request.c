/*
 * Decoding xDS requests by hand with the core's wire reader: a
 * DiscoveryRequest or DeltaDiscoveryRequest (envoy.service.discovery.v3),
 * and the few fields of its config.core.v3.Node that the server keeps.
 * protobuf-c would accept strings that are not UTF-8: every string read
 * here is checked.
 */
#include "xds_int.h"

/* Field numbers of the two requests. */
typedef struct req_fields {
  uint32_t node, type_url, names, unsub, iv, nonce, error, version;
} req_fields;
static const req_fields sotw_fields = {2, 4, 3, 0, 0, 5, 6, 1};
static const req_fields delta_fields = {1, 2, 3, 4, 5, 6, 7, 0};

static int str_of(xds_str *s, const uint8_t *d, size_t n, const char **why,
                  const char *what) {
  if (n > MCP_XDS_MAX_STRING) {
    *why = what;
    return MCP_ERR_INVALID_ARGUMENT;
  }
  if (!mcp_utf8_valid(d, n, 0)) {
    *why = what;
    return MCP_ERR_INVALID_ARGUMENT;
  }
  s->p = (const char *)d;
  s->n = n;
  return 0;
}

/* google.rpc.Status: code = 1, message = 2. */
static int read_status(xds_request *rq, const uint8_t *d, size_t n,
                       const char **why) {
  mcp_wire w = {d, d + n};
  mcp_wire_field fd;
  int rv;
  rq->has_error = 1;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num == 1 && fd.wt == MCP_WT_VARINT) {
      rq->error_code = (int32_t)(uint32_t)fd.v;
    } else if (fd.num == 2 && fd.wt == MCP_WT_LEN) {
      /* Only the first 1 KiB of a long message is kept (logs, debug). */
      size_t len = fd.len;
      size_t keep = len > MCP_XDS_MAX_STRING ? MCP_XDS_MAX_STRING : len;
      while (keep < len && keep > 0 && (fd.data[keep] & 0xc0) == 0x80) {
        keep--; /* not in the middle of a character */
      }
      if ((rv = str_of(&rq->error_message, fd.data, keep, why,
                       "error_detail.message is not UTF-8")) < 0) {
        return rv;
      }
    }
  }
  return rv;
}

/* A map<string, string> entry: key = 1, value = 2. */
static int read_entry(const uint8_t *d, size_t n, xds_str *k, xds_str *v,
                      const char **why) {
  mcp_wire w = {d, d + n};
  mcp_wire_field fd;
  int rv;
  k->p = v->p = "";
  k->n = v->n = 0;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.wt != MCP_WT_LEN || (fd.num != 1 && fd.num != 2)) {
      continue;
    }
    if ((rv = str_of(fd.num == 1 ? k : v, fd.data, fd.len, why,
                     "initial_resource_versions: a name or version is not "
                     "UTF-8 or too long")) < 0) {
      return rv;
    }
  }
  return rv;
}

/* Two passes: count the repeated fields, then fill them. */
static int scan(xds_request *rq, const req_fields *fl, const uint8_t *in,
                size_t len, int fill, const char **why) {
  mcp_wire w = {in, in + len};
  mcp_wire_field fd;
  int rv;
  size_t nn = 0, nu = 0, ni = 0;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.wt != MCP_WT_LEN) {
      continue; /* no scalar field of ours: an unknown one */
    }
    uint32_t f = fd.num;
    const uint8_t *p = fd.data;
    size_t n = fd.len;
    if (f == fl->names) {
      if (fill && (rv = str_of(&rq->names[nn], p, n, why,
                               "a resource name is not UTF-8 or too "
                               "long")) < 0) {
        return rv;
      }
      nn++;
    } else if (fl->unsub && f == fl->unsub) {
      if (fill && (rv = str_of(&rq->unsub[nu], p, n, why,
                               "a resource name is not UTF-8 or too "
                               "long")) < 0) {
        return rv;
      }
      nu++;
    } else if (fl->iv && f == fl->iv) {
      if (fill && (rv = read_entry(p, n, &rq->iv_name[ni],
                                   &rq->iv_version[ni], why)) < 0) {
        return rv;
      }
      ni++;
    } else if (fill) {
      continue;
    } else if (f == fl->node) {
      rq->node = p;
      rq->node_len = n;
    } else if (f == fl->type_url) {
      if ((rv = str_of(&rq->type_url, p, n, why,
                       "type_url is not UTF-8 or too long")) < 0) {
        return rv;
      }
    } else if (f == fl->nonce) {
      if ((rv = str_of(&rq->nonce, p, n, why,
                       "response_nonce is not UTF-8 or too long")) < 0) {
        return rv;
      }
    } else if (fl->version && f == fl->version) {
      if ((rv = str_of(&rq->version_info, p, n, why,
                       "version_info is not UTF-8 or too long")) < 0) {
        return rv;
      }
    } else if (f == fl->error) {
      if ((rv = read_status(rq, p, n, why)) < 0) {
        return rv;
      }
    }
  }
  if (rv < 0) {
    *why = "the request does not decode";
    return rv;
  }
  if (!fill) {
    rq->nnames = nn;
    rq->nunsub = nu;
    rq->niv = ni;
  }
  return 0;
}

void mcp__xds_request_free(xds_request *rq, const mcp_mem *m) {
  mcp_mem_free(m, rq->names);
  mcp_mem_free(m, rq->unsub);
  mcp_mem_free(m, rq->iv_name);
  mcp_mem_free(m, rq->iv_version);
  rq->names = rq->unsub = rq->iv_name = rq->iv_version = NULL;
}

int mcp__xds_request_decode(xds_request *rq, int delta, const uint8_t *in,
                            size_t len, const mcp_mem *m, const char **why) {
  memset(rq, 0, sizeof(*rq));
  rq->delta = delta;
  rq->version_info.p = rq->type_url.p = rq->nonce.p = "";
  rq->error_message.p = "";
  const req_fields *fl = delta ? &delta_fields : &sotw_fields;
  int rv = scan(rq, fl, in, len, 0, why);
  if (rv < 0) {
    return rv;
  }
  if (rq->type_url.n == 0) {
    *why = "the request has no type_url";
    return MCP_ERR_INVALID_ARGUMENT;
  }
  if (rq->nnames > MCP_XDS_MAX_NAMES || rq->nunsub > MCP_XDS_MAX_NAMES ||
      rq->niv > MCP_XDS_MAX_NAMES) {
    *why = "too many resource names in one request";
    return MCP_ERR_LIMIT;
  }
  /* calloc(0) may be NULL: allocate one more. */
  if (!(rq->names = mcp_mem_calloc(m, rq->nnames + 1, sizeof(xds_str))) ||
      !(rq->unsub = mcp_mem_calloc(m, rq->nunsub + 1, sizeof(xds_str))) ||
      !(rq->iv_name = mcp_mem_calloc(m, rq->niv + 1, sizeof(xds_str))) ||
      !(rq->iv_version = mcp_mem_calloc(m, rq->niv + 1, sizeof(xds_str)))) {
    mcp__xds_request_free(rq, m);
    return MCP_ERR_NOMEM;
  }
  if ((rv = scan(rq, fl, in, len, 1, why)) < 0) {
    mcp__xds_request_free(rq, m);
    return rv;
  }
  return 0;
}

/* ---- the node ---- */

/* Formats an integral double (|v| < 2^53) in decimal. */
static void fmt_int(char *buf, double v) {
  char tmp[24];
  size_t k = 0, o = 0;
  int neg = v < 0;
  uint64_t u = (uint64_t)(neg ? -v : v);
  do {
    tmp[k++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (neg) {
    buf[o++] = '-';
  }
  while (k) {
    buf[o++] = tmp[--k];
  }
  buf[o] = '\0';
}

/* google.protobuf.Value: number_value = 2 (double), string_value = 3,
 * bool_value = 4. Sets |*out| to an allocated string, or NULL for a kind
 * not kept (null, struct, list, a non-integral number). */
static int value_str(const uint8_t *d, size_t n, const mcp_mem *m,
                     char **out) {
  mcp_wire w = {d, d + n};
  mcp_wire_field fd;
  int rv;
  *out = NULL;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    char *s = NULL;
    if (fd.num == 3 && fd.wt == MCP_WT_LEN) {
      if (fd.len > MCP_XDS_MAX_STRING || !mcp_utf8_valid(fd.data, fd.len, 0)) {
        continue; /* not shown; the stream goes on */
      }
      s = mcp_mem_strndup(m, (const char *)fd.data, fd.len);
    } else if (fd.num == 4 && fd.wt == MCP_WT_VARINT) {
      s = mcp_mem_strdup(m, fd.v ? "true" : "false");
    } else if (fd.num == 2 && fd.wt == MCP_WT_I64) {
      uint64_t bits = 0;
      for (int i = 7; i >= 0; --i) {
        bits = bits << 8 | w.p[i - 8];
      }
      double x;
      memcpy(&x, &bits, sizeof(x));
      if (!(x > -9007199254740992.0 && x < 9007199254740992.0) ||
          x != (double)(int64_t)x) {
        continue;
      }
      char buf[24];
      fmt_int(buf, x);
      s = mcp_mem_strdup(m, buf);
    } else {
      continue;
    }
    if (!s) {
      return MCP_ERR_NOMEM;
    }
    mcp_mem_free(m, *out);
    *out = s;
  }
  return rv;
}

void mcp__xds_node_free(const mcp_mem *m, char *id, mcp_kv *kvs, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    mcp_mem_free(m, (char *)(uintptr_t)kvs[i].key);
    mcp_mem_free(m, (char *)(uintptr_t)kvs[i].value);
  }
  mcp_mem_free(m, kvs);
  mcp_mem_free(m, id);
}

/* Node.metadata (google.protobuf.Struct): fields = 1, map entries of key =
 * 1 and value = 2. */
static int read_metadata(const uint8_t *d, size_t n, const mcp_mem *m,
                         mcp_kv **kvs, size_t *nkvs) {
  mcp_wire w = {d, d + n};
  mcp_wire_field fd, ef;
  int rv;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num != 1 || fd.wt != MCP_WT_LEN) {
      continue;
    }
    const uint8_t *p = fd.data;
    mcp_wire e = {p, p + fd.len};
    const uint8_t *kp = NULL, *vp = NULL;
    size_t kl = 0, vl = 0;
    while ((rv = mcp_wire_field_next(&e, &ef)) == 1) {
      if (ef.num == 1 && ef.wt == MCP_WT_LEN) {
        kp = ef.data;
        kl = ef.len;
      } else if (ef.num == 2 && ef.wt == MCP_WT_LEN) {
        vp = ef.data;
        vl = ef.len;
      }
    }
    if (rv < 0) {
      return rv;
    }
    if (!kp || kl > MCP_XDS_MAX_STRING || !mcp_utf8_valid(kp, kl, 0) ||
        *nkvs >= 256) {
      continue; /* shown is a bounded, valid subset */
    }
    char *val = NULL;
    if ((rv = value_str(vp ? vp : p, vp ? vl : 0, m, &val)) < 0) {
      return rv;
    }
    if (!val) {
      continue;
    }
    char *key = mcp_mem_strndup(m, (const char *)kp, kl);
    mcp_kv *nk = key ? mcp_mem_realloc(m, *kvs, (*nkvs + 1) * sizeof(**kvs))
                     : NULL;
    if (!nk) {
      mcp_mem_free(m, key);
      mcp_mem_free(m, val);
      return MCP_ERR_NOMEM;
    }
    *kvs = nk;
    nk[*nkvs].key = key;
    nk[*nkvs].value = val;
    ++*nkvs;
  }
  return rv;
}

int mcp__xds_node_decode(const uint8_t *p, size_t n, const mcp_mem *m,
                         char **id, mcp_kv **kvs, size_t *nkvs) {
  mcp_wire w = {p, p + n};
  mcp_wire_field fd;
  int rv;
  char *nid = NULL;
  mcp_kv *nk = NULL;
  size_t nn = 0;
  while ((rv = mcp_wire_field_next(&w, &fd)) == 1) {
    if (fd.num == 1 && fd.wt == MCP_WT_LEN) {
      if (fd.len > MCP_XDS_MAX_STRING || !mcp_utf8_valid(fd.data, fd.len, 0)) {
        rv = MCP_ERR_MALFORMED;
        break;
      }
      mcp_mem_free(m, nid);
      if (!(nid = mcp_mem_strndup(m, (const char *)fd.data, fd.len))) {
        rv = MCP_ERR_NOMEM;
        break;
      }
    } else if (fd.num == 3 && fd.wt == MCP_WT_LEN) {
      if ((rv = read_metadata(fd.data, fd.len, m, &nk, &nn)) < 0) {
        break;
      }
    }
  }
  if (rv == 0 && !nid && !(nid = mcp_mem_strdup(m, ""))) {
    rv = MCP_ERR_NOMEM;
  }
  if (rv < 0) {
    mcp__xds_node_free(m, nid, nk, nn);
    return rv;
  }
  *id = nid;
  *kvs = nk;
  *nkvs = nn;
  return 0;
}
