#include "fuzz_util.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- failing loudly ---- */

int fz_verbose;

void fz_init_verbose(void) {
  const char *v = getenv("MCP_FUZZ_VERBOSE");
  fz_verbose = v && v[0] && v[0] != '0';
}

void fz_log_(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

void fz_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
  fprintf(stderr, "\n==FUZZ CHECK FAILED== %s:%d: %s\n  ", file, line, cond);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  abort();
}

char *fz_hex(char *buf, const uint8_t *p, size_t n) {
  static const char hx[] = "0123456789abcdef";
  size_t k = 0;
  for (size_t i = 0; i < n && i < 200; ++i) {
    buf[k++] = hx[p[i] >> 4];
    buf[k++] = hx[p[i] & 15];
  }
  if (n > 200) {
    buf[k++] = '.';
    buf[k++] = '.';
  }
  buf[k] = '\0';
  return buf;
}

/* ---- reading ---- */

uint8_t fz_u8(fz_in *in) {
  if (!in->n) {
    return 0;
  }
  in->n--;
  return *in->p++;
}

uint16_t fz_u16(fz_in *in) {
  uint16_t lo = fz_u8(in);
  return (uint16_t)(lo | (uint16_t)fz_u8(in) << 8);
}

const uint8_t *fz_take(fz_in *in, size_t want, size_t *got) {
  size_t n = want < in->n ? want : in->n;
  const uint8_t *p = in->p;
  in->p += n;
  in->n -= n;
  *got = n;
  return p;
}

size_t fz_str(fz_in *in, char *buf, size_t cap) {
  size_t want = fz_u8(in) % (cap + 1), n;
  const uint8_t *p = fz_take(in, want, &n);
  if (n) {
    memcpy(buf, p, n);
  }
  buf[n] = '\0';
  return n;
}

/* ---- writing ---- */

void fw_bytes(fz_out *o, const void *p, size_t n) {
  if (o->n + n > o->cap) {
    size_t cap = o->cap ? o->cap : 256;
    while (cap < o->n + n) {
      cap *= 2;
    }
    uint8_t *q = realloc(o->p, cap);
    FZ_CHECK(q, "out of memory");
    o->p = q;
    o->cap = cap;
  }
  if (n) {
    memcpy(o->p + o->n, p, n);
  }
  o->n += n;
}

void fw_u8(fz_out *o, unsigned v) {
  uint8_t b = (uint8_t)v;
  fw_bytes(o, &b, 1);
}

void fw_u16(fz_out *o, unsigned v) {
  fw_u8(o, v & 0xff);
  fw_u8(o, (v >> 8) & 0xff);
}

void fw_str(fz_out *o, const char *s) {
  size_t n = strlen(s);
  FZ_CHECK(n < 256, "string too long for a script: %zu", n);
  fw_u8(o, (unsigned)n);
  fw_bytes(o, s, n);
}

void fw_free(fz_out *o) {
  free(o->p);
  memset(o, 0, sizeof(*o));
}

/* ---- allocator ---- */

static int should_fail(fz_mem *m) {
  m->count++;
  if (m->fail_at && m->count == m->fail_at) {
    m->fail_at = 0;
    m->fired++;
    return 1;
  }
  return 0;
}

static void *fm_malloc(size_t n, void *ud) {
  fz_mem *m = ud;
  if (should_fail(m)) {
    return NULL;
  }
  void *p = malloc(n);
  m->live += p != NULL;
  return p;
}

static void fm_free(void *p, void *ud) {
  fz_mem *m = ud;
  if (p) {
    m->live--;
    free(p);
  }
}

static void *fm_calloc(size_t a, size_t b, void *ud) {
  fz_mem *m = ud;
  if (should_fail(m)) {
    return NULL;
  }
  void *p = calloc(a, b);
  m->live += p != NULL;
  return p;
}

static void *fm_realloc(void *p, size_t n, void *ud) {
  fz_mem *m = ud;
  if (should_fail(m)) {
    return NULL;
  }
  void *q = realloc(p, n);
  m->live += q && !p;
  return q;
}

void fz_mem_init(fz_mem *m) {
  memset(m, 0, sizeof(*m));
  m->mem.user_data = m;
  m->mem.malloc = fm_malloc;
  m->mem.free = fm_free;
  m->mem.calloc = fm_calloc;
  m->mem.realloc = fm_realloc;
}

void fz_mem_arm(fz_mem *m, unsigned k) { m->fail_at = m->count + (k ? k : 1); }

void fz_mem_disarm(fz_mem *m) { m->fail_at = 0; }

void fz_check_nomem(const fz_mem *m, long fired_before, int rv,
                    const char *what) {
  int met = m->fired != fired_before;
  FZ_CHECK(!met || rv == MCP_ERR_NOMEM,
           "%s met a failed allocation and returned %d (%s), not NOMEM", what,
           rv, mcp_strerror(rv));
  FZ_CHECK(met || rv != MCP_ERR_NOMEM,
           "%s returned NOMEM without a failed allocation", what);
}

void fz_rand(uint8_t *dest, size_t len, void *user_data) {
  uint64_t *seed = user_data;
  for (size_t i = 0; i < len; ++i) {
    *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
    dest[i] = (uint8_t)(*seed >> 56);
  }
}

/* ---- tables ---- */

const char *const fz_names[FZ_NNAMES] = {
    "n0", "n1", "n2", "ns/n3", "a.b.svc", "/lead", "Upper_6", "n7",
};

const char *const fz_colls[FZ_NCOLLS] = {
    "test/v1/alphas",
    "test/v1/betas",
    "test/v1/gammas",
    "k8s/core/v1/configmaps",
    "test/v1/deltas",
};

const char *const fz_types[FZ_NTYPES] = {
    "type.googleapis.com/test.v1.Alpha",
    "type.googleapis.com/test.v1.Beta",
    "type.googleapis.com/test.v1.Gamma",
    "type.googleapis.com/k8s.io.api.core.v1.ConfigMap",
    "type.googleapis.com/test.v1.Delta",
};

const char *fz_key(mcp_service service, size_t i) {
  return service == MCP_SERVICE_RESOURCE ? fz_colls[i % FZ_NCOLLS]
                                         : fz_types[i % FZ_NTYPES];
}

/* ---- store operations ---- */

/* A fingerprint of a collection: names and versions in change order. */
typedef struct fp_ctx {
  uint64_t h;
  size_t n;
} fp_ctx;

static void fp_mix(fp_ctx *c, const char *s) {
  for (; *s; ++s) {
    c->h = (c->h ^ (uint8_t)*s) * 1099511628211ULL;
  }
  c->h = (c->h ^ 0xff) * 1099511628211ULL;
}

static void fp_cb(const char *name, const char *version, void *ud) {
  fp_ctx *c = ud;
  FZ_CHECK(name && version, "foreach gave a NULL name or version");
  fp_mix(c, name);
  fp_mix(c, version);
  c->n++;
}

static fp_ctx fingerprint(const mcp_store *st, const char *coll) {
  fp_ctx c = {14695981039346656037ULL, 0};
  if (coll[0]) {
    mcp_store_foreach(st, coll, fp_cb, &c);
    FZ_CHECK(c.n == mcp_store_count(st, coll), "foreach saw %zu, count %zu",
             c.n, mcp_store_count(st, coll));
  }
  return c;
}

static const char *pick_coll(fz_in *in) {
  unsigned c = fz_u8(in) % (FZ_NCOLLS + 1);
  return c < FZ_NCOLLS ? fz_colls[c] : "";
}

static const char *pick_name(fz_in *in, char *raw, size_t cap) {
  uint8_t b = fz_u8(in);
  if (b == 0xff) {
    fz_str(in, raw, cap);
    return raw;
  }
  if (b == 0xfe) {
    snprintf(raw, cap + 1, "g%u", fz_u8(in));
    return raw;
  }
  return fz_names[b % FZ_NNAMES];
}

/* Reads a version choice. |held| is the version held for the name. */
static const char *pick_version(fz_in *in, const char *held, char *buf,
                                size_t cap) {
  uint8_t v = fz_u8(in);
  switch (v) {
  case 0:
    return NULL;
  case 1:
    return "";
  case 2:
    return held;
  case 3:
    fz_str(in, buf, cap);
    return buf;
  default:
    snprintf(buf, cap + 1, "v%u", v);
    return buf;
  }
}

typedef struct res_buf {
  char name[64];
  char ver[64];
  char want[80]; /* a copy of the version given */
  char body[40];
  char lv[16];
  mcp_kv label, annot;
} res_buf;

/* Reads version, body and extra into |r| (name already set). */
static void read_res(fz_in *in, const mcp_store *st, const char *coll,
                     mcp_resource *r, res_buf *b, int with_extra) {
  r->version = pick_version(in, coll[0] ? mcp_store_version(st, coll, r->name)
                                        : NULL,
                            b->ver, sizeof(b->ver) - 1);
  size_t bl = fz_str(in, b->body, sizeof(b->body) - 1);
  r->type_url = FZ_BODY_TYPE;
  r->body = (const uint8_t *)b->body;
  r->body_len = bl;
  uint8_t x = with_extra ? fz_u8(in) : 0;
  if (x & 1) {
    snprintf(b->lv, sizeof(b->lv), "l%u", x);
    b->label.key = "app";
    b->label.value = b->lv;
    r->labels = &b->label;
    r->nlabels = 1;
  }
  if (x & 2) {
    b->annot.key = "note";
    b->annot.value = b->body; /* may be invalid UTF-8: INVALID_ARGUMENT */
    r->annotations = &b->annot;
    r->nannotations = 1;
  }
  if (x & 4) {
    r->has_create_time = 1;
    r->create_time_seconds = (int64_t)x * 1000 - 100000;
    r->create_time_nanos = (x & 8) ? 1000000000 : (int32_t)x * 7;
  }
  if (x & 16) {
    r->type_url = (x & 32) ? NULL : "";
  }
  if (x & 64) {
    r->body = NULL;
    r->body_len = 0;
  }
}

static int rv_documented(int rv) {
  return rv == 0 || rv == 1 || rv == MCP_ERR_NOMEM ||
         rv == MCP_ERR_INVALID_ARGUMENT || rv == MCP_ERR_LIMIT;
}

int fz_store_op(fz_in *in, mcp_store *st, const fz_mem *m, mcp_tstamp ts) {
  unsigned op = fz_u8(in) % FZ_ST_NOPS;
  const char *coll = pick_coll(in);
  size_t ncolls = mcp_store_collection_count(st);
  int had = coll[0] && mcp_store_has_collection(st, coll);
  uint64_t gen = coll[0] ? mcp_store_generation(st, coll) : 0;
  fp_ctx before = fingerprint(st, coll);
  long fired = m ? m->fired : 0;
  int rv = 0;
  char what[96];

  switch (op) {
  case FZ_ST_UPSERT: {
    res_buf b;
    memset(&b, 0, sizeof(b));
    mcp_resource r;
    memset(&r, 0, sizeof(r));
    r.name = pick_name(in, b.name, sizeof(b.name) - 1);
    read_res(in, st, coll, &r, &b, 1);
    /* The version may be the one the store holds (the store must cope
     * with that): keep a copy for the checks after the change. */
    int given = r.version && r.version[0];
    snprintf(b.want, sizeof(b.want), "%s", given ? r.version : "");
    rv = mcp_store_upsert(st, coll, &r, ts);
    snprintf(what, sizeof(what), "upsert %s %s", coll, r.name);
    FZ_LOG("  store upsert %s/%s ver=%s -> %d", coll, r.name,
           given ? b.want : "(gen)", rv);
    if (rv == 1) {
      const char *v = mcp_store_version(st, coll, r.name);
      FZ_CHECK(v, "%s: changed but holds no version", what);
      if (given) {
        FZ_CHECK(strcmp(v, b.want) == 0, "%s: holds %s, gave %s", what, v,
                 b.want);
      } else {
        char g[48];
        snprintf(g, sizeof(g), "%016" PRIx64 "-%" PRIu64, mcp_store_epoch(st),
                 gen + 1);
        FZ_CHECK(strcmp(v, g) == 0, "%s: generated %s, expected %s", what, v,
                 g);
      }
    }
    break;
  }
  case FZ_ST_DELETE: {
    char raw[64];
    const char *name = pick_name(in, raw, sizeof(raw) - 1);
    int live = coll[0] && mcp_store_version(st, coll, name) != NULL;
    rv = mcp_store_delete(st, coll, name, ts);
    snprintf(what, sizeof(what), "delete %s %s", coll, name);
    FZ_LOG("  store delete %s/%s -> %d", coll, name, rv);
    FZ_CHECK(rv == live || rv == MCP_ERR_NOMEM,
             "%s: returned %d, the resource was %slive", what, rv,
             live ? "" : "not ");
    if (rv == 1) {
      FZ_CHECK(!mcp_store_version(st, coll, name), "%s: still held", what);
    }
    break;
  }
  case FZ_ST_REPLACE: {
    unsigned mask = fz_u8(in);
    unsigned flags = fz_u8(in);
    res_buf b[FZ_NNAMES + 1];
    mcp_resource r[FZ_NNAMES + 1];
    memset(b, 0, sizeof(b));
    memset(r, 0, sizeof(r));
    size_t n = 0;
    for (unsigned k = 0; k < FZ_NNAMES; ++k) {
      if (mask & (1u << k)) {
        r[n].name = fz_names[k];
        read_res(in, st, coll, &r[n], &b[n], 0);
        snprintf(b[n].want, sizeof(b[n].want), "%s",
                 r[n].version ? r[n].version : "");
        n++;
      }
    }
    if ((flags & 1) && n) { /* a name given twice: INVALID_ARGUMENT */
      r[n] = r[0];
      n++;
    }
    rv = mcp_store_replace(st, coll, r, n, ts);
    snprintf(what, sizeof(what), "replace %s (%zu)", coll, n);
    FZ_LOG("  store replace %s mask=%02x n=%zu -> %d", coll, mask, n, rv);
    if ((flags & 1) && n) {
      FZ_CHECK(rv < 0, "%s: a name given twice was accepted", what);
    }
    if (rv == 1) {
      FZ_CHECK(mcp_store_count(st, coll) == n, "%s: holds %zu", what,
               mcp_store_count(st, coll));
      for (size_t i = 0; i < n; ++i) {
        const char *v = mcp_store_version(st, coll, r[i].name);
        FZ_CHECK(v, "%s: %s not held", what, r[i].name);
        if (b[i].want[0]) {
          FZ_CHECK(strcmp(v, b[i].want) == 0, "%s: %s holds %s, gave %s",
                   what, r[i].name, v, b[i].want);
        }
      }
    }
    break;
  }
  case FZ_ST_BULK: {
    /* Checked call by call; returns the last result. */
    unsigned n = fz_u8(in), mode = fz_u8(in), start = fz_u8(in);
    snprintf(what, sizeof(what), "bulk %s %u from g%u (%s)", coll, n, start,
             mode & 1 ? "delete" : "upsert");
    FZ_LOG("  store %s", what);
    for (unsigned i = 0; i < n; ++i) {
      char name[16], body[16];
      snprintf(name, sizeof(name), "g%u", (start + i) & 0xff);
      snprintf(body, sizeof(body), "b%u", mode);
      uint64_t g0 = coll[0] ? mcp_store_generation(st, coll) : 0;
      int had0 = coll[0] && mcp_store_has_collection(st, coll);
      long f0 = m ? m->fired : 0;
      if (mode & 1) {
        int live = coll[0] && mcp_store_version(st, coll, name) != NULL;
        rv = mcp_store_delete(st, coll, name, ts);
        FZ_CHECK(rv == live || rv == MCP_ERR_NOMEM, "%s: delete %s: %d", what,
                 name, rv);
      } else {
        mcp_resource r;
        memset(&r, 0, sizeof(r));
        r.name = name;
        r.type_url = FZ_BODY_TYPE;
        r.body = (const uint8_t *)body;
        r.body_len = strlen(body);
        rv = mcp_store_upsert(st, coll, &r, ts);
        FZ_CHECK(rv != 1 || mcp_store_version(st, coll, name), "%s: %s not held",
                 what, name);
      }
      FZ_CHECK(rv_documented(rv), "%s: %d", what, rv);
      if (m) {
        fz_check_nomem(m, f0, rv, what);
      }
      if (coll[0]) {
        FZ_CHECK(mcp_store_generation(st, coll) == g0 + (rv == 1),
                 "%s: %s returned %d, generation %" PRIu64 " -> %" PRIu64,
                 what, name, rv, g0, mcp_store_generation(st, coll));
        FZ_CHECK(rv >= 0 || mcp_store_has_collection(st, coll) == had0,
                 "%s: failed but the collection appeared", what);
      }
      if (rv < 0) {
        break;
      }
    }
    return rv;
  }
  default:
    rv = mcp_store_add_collection(st, coll);
    snprintf(what, sizeof(what), "add_collection %s", coll);
    FZ_LOG("  store add %s -> %d", coll, rv);
    FZ_CHECK(rv == 0 || rv == MCP_ERR_NOMEM || rv == MCP_ERR_INVALID_ARGUMENT ||
                 rv == MCP_ERR_LIMIT,
             "%s: %d", what, rv);
    if (rv == 0) {
      FZ_CHECK(mcp_store_has_collection(st, coll), "%s: not added", what);
      FZ_CHECK(mcp_store_generation(st, coll) == gen, "%s: generation moved",
               what);
    }
    break;
  }
  FZ_CHECK(rv_documented(rv), "%s: undocumented result %d", what, rv);
  if (!coll[0]) {
    FZ_CHECK(rv == MCP_ERR_INVALID_ARGUMENT || (op == FZ_ST_DELETE && rv == 0),
             "%s: the empty collection gave %d", what, rv);
  }
  if (m) {
    fz_check_nomem(m, fired, rv, what);
  }
  if (coll[0]) {
    uint64_t g = mcp_store_generation(st, coll);
    if (rv == 1) {
      FZ_CHECK(g == gen + 1, "%s: changed, generation %" PRIu64 " -> %" PRIu64,
               what, gen, g);
    } else {
      fp_ctx after = fingerprint(st, coll);
      FZ_CHECK(g == gen, "%s: returned %d, generation %" PRIu64 " -> %" PRIu64,
               what, rv, gen, g);
      FZ_CHECK(after.h == before.h && after.n == before.n,
               "%s: returned %d but the content changed", what, rv);
    }
    if (rv < 0) {
      FZ_CHECK(mcp_store_has_collection(st, coll) == had &&
                   mcp_store_collection_count(st) == ncolls,
               "%s: failed (%d) but the collections changed", what, rv);
    }
  }
  return rv;
}

void fw_upsert(fz_out *o, unsigned coll, unsigned name, unsigned ver,
               const char *body) {
  fw_u8(o, FZ_ST_UPSERT);
  fw_u8(o, coll);
  fw_u8(o, name);
  fw_u8(o, ver);
  fw_str(o, body);
  fw_u8(o, 0);
}

void fw_delete(fz_out *o, unsigned coll, unsigned name) {
  fw_u8(o, FZ_ST_DELETE);
  fw_u8(o, coll);
  fw_u8(o, name);
}

void fw_replace(fz_out *o, unsigned coll, unsigned mask, const unsigned *vers,
                const char *const *bodies) {
  fw_u8(o, FZ_ST_REPLACE);
  fw_u8(o, coll);
  fw_u8(o, mask);
  fw_u8(o, 0);
  size_t j = 0;
  for (unsigned k = 0; k < FZ_NNAMES; ++k) {
    if (mask & (1u << k)) {
      fw_u8(o, vers[j]);
      fw_str(o, bodies[j]);
      j++;
    }
  }
}

void fw_bulk(fz_out *o, unsigned coll, unsigned n, int del, unsigned start) {
  fw_u8(o, FZ_ST_BULK);
  fw_u8(o, coll);
  fw_u8(o, n);
  fw_u8(o, del ? 1 : 0);
  fw_u8(o, start);
}

void fw_add(fz_out *o, unsigned coll) {
  fw_u8(o, FZ_ST_ADD);
  fw_u8(o, coll);
}
