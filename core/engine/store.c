/*
 * The resource store. Each resource version is encoded once, as the bytes
 * of a Resources.resources field ([tag 3][length][Resource]), into shared
 * refcounted bytes that every push of every stream sends as is.
 *
 * Each collection keeps its entries in one list ordered by the generation
 * of their last change; a deletion leaves a tombstone at the tail. A
 * stream that holds generation G therefore finds what changed after G by
 * walking back from the tail: O(changed), whatever the collection's size.
 * Tombstones are dropped once they outnumber live entries, except those of
 * the latest change; a stream older than the newest dropped tombstone
 * (compact_gen) gets a full-state push.
 */
#include <assert.h>

#include "engine_int.h"

/* Tombstones are kept until they are this many and more than live ones. */
#define MCP_TOMB_MIN 64

void mcp_format_version(char *buf, size_t n, uint64_t epoch, uint64_t gen) {
  static const char hex[] = "0123456789abcdef";
  char tmp[48];
  size_t k = 0;
  for (int i = 60; i >= 0; i -= 4) {
    tmp[k++] = hex[(epoch >> i) & 0xf];
  }
  tmp[k++] = '-';
  char dec[24];
  size_t d = 0;
  do {
    dec[d++] = (char)('0' + gen % 10);
    gen /= 10;
  } while (gen);
  while (d) {
    tmp[k++] = dec[--d];
  }
  if (k >= n) {
    k = n - 1;
  }
  memcpy(buf, tmp, k);
  buf[k] = '\0';
}

/* ---- encoding one Resource ---- */

static size_t kv_entry_size(const mcp_kv *kv) {
  size_t k = strlen(kv->key), v = strlen(kv->value);
  return (k ? mcp_wire_len_field_size(k) : 0) + (v ? mcp_wire_len_field_size(v) : 0);
}

static size_t str_field_size(const char *s) {
  size_t n = s ? strlen(s) : 0;
  return n ? mcp_wire_len_field_size(n) : 0;
}

static uint8_t *put_str(uint8_t *p, uint32_t field, const char *s) {
  size_t n = s ? strlen(s) : 0;
  return n ? mcp_wire_put_len_field(p, field, s, n) : p;
}

static uint8_t *put_kvs(uint8_t *p, uint32_t field, const mcp_kv *kv, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    *p++ = (uint8_t)(field << 3 | MCP_WT_LEN);
    p = mcp_wire_put_varint(p, kv_entry_size(&kv[i]));
    p = put_str(p, 1, kv[i].key);
    p = put_str(p, 2, kv[i].value);
  }
  return p;
}

static size_t kvs_size(const mcp_kv *kv, size_t n) {
  size_t sz = 0;
  for (size_t i = 0; i < n; ++i) {
    sz += mcp_wire_len_field_size(kv_entry_size(&kv[i]));
  }
  return sz;
}

typedef struct res_sizes {
  size_t ts, md, any, res;
} res_sizes;

static void resource_sizes(const mcp_resource *r, const char *version,
                           res_sizes *sz) {
  sz->ts = 0;
  if (r->has_create_time) {
    if (r->create_time_seconds) {
      sz->ts += 1 + mcp_wire_varint_len((uint64_t)r->create_time_seconds);
    }
    if (r->create_time_nanos) {
      sz->ts += 1 + mcp_wire_varint_len((uint64_t)r->create_time_nanos);
    }
  }
  sz->md = str_field_size(r->name) + str_field_size(version) +
           kvs_size(r->labels, r->nlabels) +
           kvs_size(r->annotations, r->nannotations) +
           (r->has_create_time ? mcp_wire_len_field_size(sz->ts) : 0);
  sz->any = str_field_size(r->type_url) +
            (r->body_len ? mcp_wire_len_field_size(r->body_len) : 0);
  sz->res = mcp_wire_len_field_size(sz->md) +
            (r->type_url || r->body_len ? mcp_wire_len_field_size(sz->any) : 0);
}

/* Encodes |r| with |version| as [tag 3][len][Resource] into new shared
 * bytes. */
typedef struct enc_offs {
  uint32_t res, type, body; /* see mcp_entry */
} enc_offs;

static mcp_rcbuf *encode_resource(const mcp_mem *m, const mcp_resource *r,
                                  const char *version, enc_offs *offs) {
  res_sizes sz;
  resource_sizes(r, version, &sz);
  size_t pre = 1 + mcp_wire_varint_len(sz.res);
  mcp_rcbuf *b = mcp__rcbuf_new(m, pre + sz.res);
  if (!b) {
    return NULL;
  }
  uint8_t *p = b->data;
  *p++ = 3 << 3 | MCP_WT_LEN;
  p = mcp_wire_put_varint(p, sz.res);
  offs->res = (uint32_t)pre;

  *p++ = 1 << 3 | MCP_WT_LEN; /* metadata */
  p = mcp_wire_put_varint(p, sz.md);
  p = put_str(p, 1, r->name);
  if (r->has_create_time) {
    *p++ = 2 << 3 | MCP_WT_LEN;
    p = mcp_wire_put_varint(p, sz.ts);
    if (r->create_time_seconds) {
      *p++ = 1 << 3 | MCP_WT_VARINT;
      p = mcp_wire_put_varint(p, (uint64_t)r->create_time_seconds);
    }
    if (r->create_time_nanos) {
      *p++ = 2 << 3 | MCP_WT_VARINT;
      p = mcp_wire_put_varint(p, (uint64_t)r->create_time_nanos);
    }
  }
  p = put_str(p, 3, version);
  p = put_kvs(p, 4, r->labels, r->nlabels);
  p = put_kvs(p, 5, r->annotations, r->nannotations);
  if (r->type_url || r->body_len) {
    *p++ = 2 << 3 | MCP_WT_LEN; /* body */
    p = mcp_wire_put_varint(p, sz.any);
    p = put_str(p, 1, r->type_url);
    offs->type = (uint32_t)(p - b->data - (r->type_url ? strlen(r->type_url) : 0));
    if (r->body_len) {
      p = mcp_wire_put_len_field(p, 2, r->body, r->body_len);
    }
  } else {
    offs->type = (uint32_t)(p - b->data);
  }
  offs->body = (uint32_t)(p - b->data - r->body_len);
  return b;
}

static int resource_valid(const mcp_store *s, const mcp_resource *r) {
  return r && mcp__name_ok(r->name, s->name_rules, s->max_name_len) &&
         (!r->version || r->version[0] == '\0' ||
          (strlen(r->version) <= s->max_version_len && mcp_str_valid(r->version))) &&
         mcp_kvs_valid(r->labels, r->nlabels) &&
         mcp_kvs_valid(r->annotations, r->nannotations) &&
         /* Sinks reject a body without a type: the store never holds one. */
         r->type_url && r->type_url[0] && mcp_str_valid(r->type_url) &&
         (r->body || !r->body_len) &&
         (!r->has_create_time ||
          (r->create_time_nanos >= 0 && r->create_time_nanos < 1000000000));
}

/* ---- store and collections ---- */

static void store_options_default(mcp_store_options *opts) {
  memset(opts, 0, sizeof(*opts));
  opts->max_name_len = MCP_DEFAULT_MAX_NAME_LEN;
  opts->max_version_len = MCP_DEFAULT_MAX_VERSION_LEN;
  opts->max_resources = MCP_DEFAULT_MAX_RESOURCES;
}

void mcp_store_options_default_versioned(int version, mcp_store_options *opts) {
  mcp_store_options o;
  store_options_default(&o);
  memcpy(opts, &o,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_store_options), MCP_VSTRUCT_N));
}

static int store_new(mcp_store **pstore, const mcp_store_options *opts);

int mcp_store_new_versioned(mcp_store **pstore, int version,
                            const mcp_store_options *opts) {
  mcp_store_options o;
  if (!opts || !mcp_vstruct_known(version, MCP_VSTRUCT_N)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  store_options_default(&o);
  memcpy(&o, opts,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_store_options), MCP_VSTRUCT_N));
  return store_new(pstore, &o);
}

static int store_new(mcp_store **pstore, const mcp_store_options *opts) {
  if (!pstore || !opts || (!opts->epoch && !opts->rand) ||
      opts->name_rules > MCP_NAMES_KUBERNETES) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  mcp_mem mem;
  mcp_mem_init(&mem, opts->mem);
  mcp_store *s = mcp_mem_calloc(&mem, 1, sizeof(*s));
  if (!s) {
    return MCP_ERR_NOMEM;
  }
  s->mem = mem;
  s->epoch = opts->epoch;
  s->name_rules = opts->name_rules;
  s->max_name_len = mcp_limit_or(opts->max_name_len, MCP_DEFAULT_MAX_NAME_LEN);
  s->max_version_len = mcp_limit_or(opts->max_version_len, MCP_DEFAULT_MAX_VERSION_LEN);
  s->max_resources = mcp_limit_or(opts->max_resources, MCP_DEFAULT_MAX_RESOURCES);
  if (!s->epoch) {
    uint8_t b[8];
    opts->rand(b, sizeof(b), opts->rand_user_data);
    for (int i = 0; i < 8; ++i) {
      s->epoch = s->epoch << 8 | b[i];
    }
    if (!s->epoch) {
      s->epoch = 1;
    }
  }
  *pstore = s;
  return 0;
}

static void entry_free(const mcp_mem *m, mcp_entry *e) {
  mcp__rcbuf_unref(e->enc);
  mcp_mem_free(m, e->version);
  mcp_mem_free(m, e->name);
  mcp_mem_free(m, e);
}

static void coll_free(const mcp_mem *m, mcp_coll *c) {
  mcp_snap_unref(c->snap);
  for (mcp_entry *e = c->head, *next; e; e = next) {
    next = e->next;
    entry_free(m, e);
  }
  mcp_map_free(&c->map, m);
  mcp_mem_free(m, c->name);
  mcp_mem_free(m, c);
}

/* ---- shared blobs ---- */

typedef struct mcp_shared {
  struct mcp_shared *next;
  size_t refs, len;
  uint64_t data[]; /* len bytes */
} mcp_shared;

const void *mcp_store_share(mcp_store *s, const void *blob, size_t len) {
  for (mcp_shared *sh = s->shared; sh; sh = sh->next) {
    if (sh->len == len && memcmp(sh->data, blob, len) == 0) {
      sh->refs++;
      return sh->data;
    }
  }
  mcp_shared *sh = mcp_mem_malloc(&s->mem, sizeof(*sh) + len);
  if (!sh) {
    return NULL;
  }
  memcpy(sh->data, blob, len);
  sh->refs = 1;
  sh->len = len;
  sh->next = s->shared;
  s->shared = sh;
  return sh->data;
}

void mcp_store_unshare(mcp_store *s, const void *p) {
  for (mcp_shared **pp = &s->shared; *pp; pp = &(*pp)->next) {
    mcp_shared *sh = *pp;
    if ((const void *)sh->data == p) {
      if (--sh->refs == 0) {
        *pp = sh->next;
        mcp_mem_free(&s->mem, sh);
      }
      return;
    }
  }
  assert(0 && "not shared by this store");
}

void mcp_store_del(mcp_store *s) {
  if (!s) {
    return;
  }
  /* Left only by sessions that outlive their store (misuse). */
  while (s->shared) {
    mcp_shared *sh = s->shared;
    s->shared = sh->next;
    mcp_mem_free(&s->mem, sh);
  }
  for (size_t i = 0; i < s->ncolls; ++i) {
    coll_free(&s->mem, s->colls[i]);
  }
  mcp_mem_free(&s->mem, s->colls);
  mcp_map_free(&s->coll_map, &s->mem);
  if (s->has_builder) {
    mcp__msgb_discard(&s->builder.b);
  }
  mcp_mem m = s->mem;
  mcp_mem_free(&m, s);
}

uint64_t mcp_store_epoch(const mcp_store *s) { return s->epoch; }

mcp_coll *mcp__store_coll(const mcp_store *s, const char *name) {
  return mcp_map_get(&s->coll_map, name);
}

/* ---- for protocol modules: collections read directly ---- */

const mcp_coll *mcp_store_coll(const mcp_store *s, const char *name) {
  return mcp__store_coll(s, name);
}

/* The readers of a collection's and a store's head are inline
 * (mcp/engine.h); the heads must stay where those read them. */
_Static_assert(offsetof(struct mcp_coll, head_) == 0 &&
                   offsetof(struct mcp_coll, gen) ==
                       offsetof(mcp_coll_head_, gen),
               "the collection's public head comes first");
_Static_assert(offsetof(struct mcp_store, head_) == 0 &&
                   offsetof(struct mcp_store, ncolls) ==
                       offsetof(mcp_store_head_, ncolls),
               "the store's public head comes first");

mcp_msg_builder *mcp_store_builder(mcp_store *s) {
  if (!s->has_builder) {
    s->builder.mem = s->mem;
    mcp__msgb_init(&s->builder.b, &s->builder.mem);
    s->has_builder = 1;
  }
  return &s->builder;
}

static int coll_get_or_add(mcp_store *s, const char *name, mcp_coll **pc) {
  if (!name || !name[0] || !mcp_str_valid(name)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  mcp_coll *c = mcp__store_coll(s, name);
  if (c) {
    *pc = c;
    return 0;
  }
  if (s->ncolls == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 8;
    mcp_coll **cs = mcp_mem_realloc(&s->mem, s->colls, cap * sizeof(*cs));
    if (!cs) {
      return MCP_ERR_NOMEM;
    }
    s->colls = cs;
    s->cap = cap;
  }
  c = mcp_mem_calloc(&s->mem, 1, sizeof(*c));
  if (!c || !(c->name = mcp_mem_strdup(&s->mem, name)) ||
      mcp_map_reserve(&s->coll_map, &s->mem, 1) != 0) {
    if (c) {
      mcp_mem_free(&s->mem, c->name);
    }
    mcp_mem_free(&s->mem, c);
    return MCP_ERR_NOMEM;
  }
  int err = 0;
  mcp_map_put(&s->coll_map, &s->mem, c->name, c, &err);
  c->index = s->ncolls;
  s->colls[s->ncolls++] = c;
  *pc = c;
  return 0;
}

/* A removed collection comes back with a generation of its own, so that
 * watches see it appear even when nothing else changes. */
static void coll_revive(mcp_coll *c) {
  if (c->absent) {
    c->absent = 0;
    c->gen++;
    mcp_snap_unref(c->snap);
    c->snap = NULL;
  }
}

int mcp_store_add_collection(mcp_store *s, const char *collection) {
  mcp_coll *c;
  int rv = coll_get_or_add(s, collection, &c);
  if (rv == 0) {
    coll_revive(c);
  }
  return rv;
}

static void list_unlink(mcp_coll *c, mcp_entry *e) {
  if (e->prev) {
    e->prev->next = e->next;
  } else {
    c->head = e->next;
  }
  if (e->next) {
    e->next->prev = e->prev;
  } else {
    c->tail = e->prev;
  }
  e->prev = e->next = NULL;
}

static void list_append(mcp_coll *c, mcp_entry *e) {
  e->prev = c->tail;
  e->next = NULL;
  if (c->tail) {
    c->tail->next = e;
  } else {
    c->head = e;
  }
  c->tail = e;
}

static void touch(mcp_coll *c, mcp_entry *e, uint64_t gen) {
  e->gen = gen;
  if (c->tail != e) {
    list_unlink(c, e);
    list_append(c, e);
  }
}

static void make_tombstone(const mcp_mem *m, mcp_coll *c, mcp_entry *e,
                           uint64_t gen) {
  mcp__rcbuf_unref(e->enc);
  mcp_mem_free(m, e->version);
  e->enc = NULL;
  e->version = NULL;
  c->nlive--;
  c->ntomb++;
  touch(c, e, gen);
}

static void compact(const mcp_mem *m, mcp_coll *c) {
  if (c->ntomb < MCP_TOMB_MIN || c->ntomb <= c->nlive) {
    return;
  }
  for (mcp_entry *e = c->head, *next; e && c->ntomb > c->nlive / 2; e = next) {
    next = e->next;
    if (e->gen == c->gen) {
      /* The change just made stays expressible as a difference: a stream
       * that holds the generation before it (every stream keeping up) is
       * not thrown back to a whole state, which protocols without one
       * (Destination's removes) could not send. Dropped at the next one. */
      break;
    }
    if (e->enc) {
      continue;
    }
    c->compact_gen = e->gen;
    mcp_map_del(&c->map, e->name);
    list_unlink(c, e);
    c->ntomb--;
    entry_free(m, e);
  }
}

/* One resource of a change being prepared: everything that can fail is
 * allocated before anything is changed. */
typedef struct prep {
  const mcp_resource *res;
  mcp_entry *e;     /* the entry held, live or tombstone, or NULL */
  mcp_entry *fresh; /* a new entry, when e == NULL */
  mcp_rcbuf *enc;   /* new bytes; NULL: unchanged */
  enc_offs offs;
  char *version;
  uint8_t gen_version;
} prep;

static void prep_free(const mcp_mem *m, prep *p) {
  mcp__rcbuf_unref(p->enc);
  mcp_mem_free(m, p->version);
  if (p->fresh) {
    mcp_mem_free(m, p->fresh->name);
    mcp_mem_free(m, p->fresh);
  }
}

static int same_bytes(const mcp_entry *e, const mcp_rcbuf *b) {
  return e && e->enc && e->enc->len == b->len &&
         memcmp(e->enc->data, b->data, b->len) == 0;
}

/* Encodes one resource and decides whether it changes what is held. */
static int prepare(mcp_store *s, mcp_coll *c, uint64_t gen, prep *p) {
  const mcp_mem *m = &s->mem;
  const mcp_resource *r = p->res;
  p->e = mcp_map_get(&c->map, r->name);
  int live = p->e && p->e->enc;
  char genver[48];
  const char *v = r->version;
  if (!v || !v[0]) {
    /* A generated version must stay the same while the content does, so
     * first compare with the version generated before. */
    if (live && p->e->gen_version) {
      p->enc = encode_resource(m, r, p->e->version, &p->offs);
      if (!p->enc) {
        return MCP_ERR_NOMEM;
      }
      if (same_bytes(p->e, p->enc)) {
        mcp__rcbuf_unref(p->enc);
        p->enc = NULL;
        return 0;
      }
      mcp__rcbuf_unref(p->enc);
      p->enc = NULL;
    }
    mcp_format_version(genver, sizeof(genver), s->epoch, gen);
    v = genver;
    p->gen_version = 1;
  }
  p->enc = encode_resource(m, r, v, &p->offs);
  if (!p->enc) {
    return MCP_ERR_NOMEM;
  }
  if (live && same_bytes(p->e, p->enc)) {
    mcp__rcbuf_unref(p->enc);
    p->enc = NULL;
    return 0;
  }
  if (!(p->version = mcp_mem_strdup(m, v))) {
    return MCP_ERR_NOMEM;
  }
  if (!p->e) {
    p->fresh = mcp_mem_calloc(m, 1, sizeof(*p->fresh));
    if (!p->fresh || !(p->fresh->name = mcp_mem_strdup(m, r->name))) {
      return MCP_ERR_NOMEM;
    }
  }
  return 0;
}

static void commit(mcp_store *s, mcp_coll *c, uint64_t gen, prep *p) {
  mcp_entry *e = p->e;
  if (!e) {
    int err = 0;
    e = p->fresh;
    p->fresh = NULL;
    e->born = gen;
    mcp_map_put(&c->map, &s->mem, e->name, e, &err); /* reserved */
    list_append(c, e);
    c->nlive++;
  } else if (!e->enc) {
    c->ntomb--;
    c->nlive++;
  }
  mcp__rcbuf_unref(e->enc);
  mcp_mem_free(&s->mem, e->version);
  e->enc = p->enc;
  e->res_off = p->offs.res;
  e->type_off = p->offs.type;
  e->body_off = p->offs.body;
  e->version = p->version;
  e->gen_version = p->gen_version;
  p->enc = NULL;
  p->version = NULL;
  touch(c, e, gen);
}

/*
 * Applies |res[0..n)| to |c| as one generation; with |replace|, every live
 * resource not listed is deleted. Returns 1 when something changed.
 */
static int apply(mcp_store *s, mcp_coll *c, const mcp_resource *res, size_t n,
                 int replace, mcp_tstamp ts) {
  const mcp_mem *m = &s->mem;
  mcp_map names = {0};
  prep *preps = NULL;
  int rv = 0;
  size_t nfresh = 0, nchanged = 0, ndeleted = 0;
  uint64_t gen = c->gen + 1;

  if (replace) {
    if (mcp_map_reserve(&names, m, n) != 0) {
      return MCP_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; ++i) {
      int err = 0;
      if (mcp_map_put(&names, m, res[i].name, (void *)&res[i], &err)) {
        mcp_map_free(&names, m);
        return MCP_ERR_INVALID_ARGUMENT; /* a name given twice */
      }
    }
  }
  preps = mcp_mem_calloc(m, n ? n : 1, sizeof(*preps));
  if (!preps) {
    rv = MCP_ERR_NOMEM;
    goto out;
  }
  size_t nrevived = 0;
  for (size_t i = 0; i < n; ++i) {
    preps[i].res = &res[i];
    if ((rv = prepare(s, c, gen, &preps[i])) != 0) {
      goto out;
    }
    nchanged += preps[i].enc != NULL;
    nfresh += preps[i].fresh != NULL;
    nrevived += preps[i].enc && preps[i].e && !preps[i].e->enc;
  }
  if (replace) {
    for (mcp_entry *e = c->head; e; e = e->next) {
      ndeleted += e->enc && !mcp_map_get(&names, e->name);
    }
  }
  if (nchanged + ndeleted == 0) {
    goto out;
  }
  if (c->nlive + nfresh + nrevived - ndeleted > s->max_resources) {
    rv = MCP_ERR_LIMIT;
    goto out;
  }
  if ((rv = mcp_map_reserve(&c->map, m, nfresh)) != 0) {
    goto out;
  }
  /* Nothing below can fail. */
  if (ndeleted) {
    mcp_entry *stop = c->tail;
    for (mcp_entry *e = c->head, *next; e; e = next) {
      next = e == stop ? NULL : e->next;
      if (e->enc && !mcp_map_get(&names, e->name)) {
        make_tombstone(m, c, e, gen);
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (preps[i].enc) {
      commit(s, c, gen, &preps[i]);
    }
  }
  c->gen = gen;
  mcp__coll_touch(c, ts);
  mcp_snap_unref(c->snap);
  c->snap = NULL;
  compact(m, c);
  rv = 1;
out:
  if (preps) {
    for (size_t i = 0; i < n; ++i) {
      prep_free(m, &preps[i]);
    }
    mcp_mem_free(m, preps);
  }
  mcp_map_free(&names, m);
  return rv;
}

/* Drops a collection that coll_get_or_add() just created for a change
 * that then failed: a failed call changes nothing. */
static void coll_undo_add(mcp_store *s, mcp_coll *c) {
  mcp_map_del(&s->coll_map, c->name);
  s->ncolls--;
  coll_free(&s->mem, c);
}

static int change(mcp_store *s, const char *collection, const mcp_resource *res,
                  size_t n, int replace, mcp_tstamp ts) {
  for (size_t i = 0; i < n; ++i) {
    if (!resource_valid(s, &res[i])) {
      return MCP_ERR_INVALID_ARGUMENT;
    }
  }
  int existed = mcp__store_coll(s, collection ? collection : "") != NULL;
  mcp_coll *c;
  int rv = coll_get_or_add(s, collection, &c);
  if (rv != 0) {
    return rv;
  }
  int was_absent = c->absent;
  rv = apply(s, c, res, n, replace, ts);
  if (rv < 0 && !existed) {
    coll_undo_add(s, c);
  } else if (rv >= 0 && was_absent) {
    if (rv == 0) {
      coll_revive(c);
      mcp__coll_touch(c, ts);
    }
    c->absent = 0; /* apply() bumped the generation */
    rv = 1;
  }
  return rv;
}

int mcp_store_upsert(mcp_store *s, const char *collection,
                     const mcp_resource *res, mcp_tstamp ts) {
  if (!res) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  return change(s, collection, res, 1, 0, ts);
}

int mcp_store_replace(mcp_store *s, const char *collection,
                      const mcp_resource *res, size_t n, mcp_tstamp ts) {
  if (n && !res) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  return change(s, collection, res, n, 1, ts);
}

int mcp_store_delete(mcp_store *s, const char *collection, const char *name,
                     mcp_tstamp ts) {
  mcp_coll *c = collection ? mcp__store_coll(s, collection) : NULL;
  mcp_entry *e = c && name ? mcp_map_get(&c->map, name) : NULL;
  if (!e || !e->enc) {
    return 0;
  }
  make_tombstone(&s->mem, c, e, ++c->gen);
  mcp_snap_unref(c->snap);
  c->snap = NULL;
  mcp__coll_touch(c, ts);
  compact(&s->mem, c);
  return 1;
}

int mcp_store_remove_collection(mcp_store *s, const char *collection,
                                mcp_tstamp ts) {
  mcp_coll *c = collection ? mcp__store_coll(s, collection) : NULL;
  if (!c || c->absent) {
    return 0;
  }
  /* Tombstones only: nothing to allocate, so nothing can fail. */
  uint64_t gen = ++c->gen;
  mcp_entry *stop = c->tail;
  for (mcp_entry *e = c->head, *next; e; e = next) {
    next = e == stop ? NULL : e->next;
    if (e->enc) {
      make_tombstone(&s->mem, c, e, gen);
    }
  }
  c->absent = 1;
  mcp__coll_touch(c, ts);
  mcp_snap_unref(c->snap);
  c->snap = NULL;
  compact(&s->mem, c);
  return 1;
}

uint64_t mcp_store_generation(const mcp_store *s, const char *collection) {
  mcp_coll *c = mcp__store_coll(s, collection);
  return c ? c->gen : 0;
}

int mcp_store_has_collection(const mcp_store *s, const char *collection) {
  mcp_coll *c = mcp__store_coll(s, collection);
  return c && !c->absent;
}

size_t mcp_store_count(const mcp_store *s, const char *collection) {
  mcp_coll *c = mcp__store_coll(s, collection);
  return c ? c->nlive : 0;
}

const char *mcp_store_version(const mcp_store *s, const char *collection,
                              const char *name) {
  mcp_coll *c = mcp__store_coll(s, collection);
  mcp_entry *e = c ? mcp_map_get(&c->map, name) : NULL;
  return e ? e->version : NULL;
}

void mcp_store_foreach(const mcp_store *s, const char *collection,
                       void (*fn)(const char *, const char *, void *),
                       void *ud) {
  mcp_coll *c = mcp__store_coll(s, collection);
  for (mcp_entry *e = c ? c->head : NULL; e; e = e->next) {
    if (e->enc) {
      fn(e->name, e->version, ud);
    }
  }
}

size_t mcp_store_collection_count(const mcp_store *s) { return s->ncolls; }

const char *mcp_store_collection_name(const mcp_store *s, size_t i) {
  return i < s->ncolls ? s->colls[i]->name : NULL;
}

mcp_snap *mcp_coll_snapshot(const mcp_store *s, const mcp_coll *cc) {
  /* The snapshot is a cache inside the collection: built at the first
   * full-state push of a generation, shared by every one after. */
  mcp_coll *c = (mcp_coll *)(uintptr_t)cc;
  if (c->snap && c->snap->gen == c->gen) {
    return c->snap;
  }
  size_t n = c->nlive;
  mcp_snap *sn = mcp_mem_malloc(&s->mem, sizeof(*sn) + n * (sizeof(mcp_rcbuf *) +
                                                         sizeof(mcp_iovec)));
  if (!sn) {
    return NULL;
  }
  atomic_init(&sn->ref, 1);
  sn->mem = s->mem;
  sn->gen = c->gen;
  sn->refs = (mcp_rcbuf **)(void *)(sn + 1);
  sn->iov = (mcp_iovec *)(void *)(sn->refs + n);
  sn->n = 0;
  sn->len = 0;
  for (mcp_entry *e = c->head; e; e = e->next) {
    if (e->enc) {
      mcp__rcbuf_ref(e->enc);
      sn->refs[sn->n] = e->enc;
      sn->iov[sn->n].base = e->enc->data;
      sn->iov[sn->n].len = e->enc->len;
      sn->len += e->enc->len;
      sn->n++;
    }
  }
  mcp_snap_unref(c->snap);
  c->snap = sn;
  return sn;
}
