/*
 * Internal declarations shared by the core's files. Nothing here is API.
 */
#ifndef MCP_INT_H
#define MCP_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "mcp/mcp.h"
#include "mcp/engine.h" /* every public declaration in scope: MCP_EXTERN exports */

#define MCP_UNUSED(x) ((void)(x))

/* ---- allocation (mem.c) ---- */

/* Fills |dst| from |src|, or with the C library when |src| is NULL. */
void mcp__mem_init(mcp_mem *dst, const mcp_mem *src);
void *mcp__malloc(const mcp_mem *m, size_t n);
void *mcp__calloc(const mcp_mem *m, size_t nmemb, size_t size);
void *mcp__realloc(const mcp_mem *m, void *p, size_t n);
void mcp__free(const mcp_mem *m, void *p);
char *mcp__strdup(const mcp_mem *m, const char *s);
char *mcp__strndup(const mcp_mem *m, const char *s, size_t n);

/*
 * protobuf-c allocator bridged to an mcp_mem. protobuf-c cannot tell a
 * failed allocation from bad input, so the bridge remembers the failure:
 * check |failed| after a NULL unpack to return NOMEM rather than MALFORMED.
 */
typedef struct mcp_pballoc {
  ProtobufCAllocator a;
  const mcp_mem *mem;
  int failed;
} mcp_pballoc;
void mcp__pballoc_init(mcp_pballoc *pa, const mcp_mem *mem);

/* A small snprintf for messages (the core includes no stdio): %s, %zu,
 * %d and %%. Always NUL-terminates; truncates silently. */
void mcp__fmt(char *buf, size_t n, const char *fmt, ...);

/* ---- bytes (buf.c) ---- */

typedef struct mcp_snap mcp_snap;

/* The growable byte buffer is public: mcp_buf in engine.h. */

/*
 * Shared, immutable, atomically reference-counted bytes: one encoded
 * resource version. It carries its own allocator so that the last
 * reference may be dropped anywhere, after the store is gone.
 */
typedef struct mcp_rcbuf {
  atomic_uint_fast32_t ref;
  mcp_mem mem;
  size_t len;
  uint8_t data[];
} mcp_rcbuf;
mcp_rcbuf *mcp__rcbuf_new(const mcp_mem *m, size_t len);
static inline void mcp__rcbuf_ref(mcp_rcbuf *b) {
  atomic_fetch_add_explicit(&b->ref, 1, memory_order_relaxed);
}
void mcp__rcbuf_unref(mcp_rcbuf *b);

/*
 * Builds an mcp_msg: bytes of its own (header fields, removed names)
 * interleaved with shared fragments. Own bytes are recorded as offsets and
 * resolved to pointers in mcp__msgb_finish(), since the own buffer may move
 * while it grows.
 */
typedef struct mcp_piece {
  mcp_rcbuf *rc; /* NULL: own bytes at |off| */
  size_t off, len;
} mcp_piece;

typedef struct mcp_msgb {
  const mcp_mem *mem;
  mcp_buf own;
  mcp_piece *pieces;
  size_t npieces, cap;
  size_t nshared;
  size_t len;
  mcp_snap *snap;  /* its fragments go where the piece with rc == NULL and
                      len == SIZE_MAX is */
  int failed; /* sticky NOMEM: the builder's calls need no checks */
  /* Small messages are built without allocating. */
  mcp_piece inl_pieces[8];
  uint8_t inl_own[192];
} mcp_msgb;

void mcp__msgb_init(mcp_msgb *b, const mcp_mem *m);
/* Appends own bytes; returns a pointer to write |n| bytes into, valid until
 * the next append, or NULL after a failure. */
uint8_t *mcp__msgb_own(mcp_msgb *b, size_t n);
/* Appends a shared fragment [off, off + len) of |rc| (takes a reference). */
void mcp__msgb_shared(mcp_msgb *b, mcp_rcbuf *rc, size_t off, size_t len);
/* Produces the message (or NULL and NOMEM); the builder is reset either
 * way. */
int mcp__msgb_finish(mcp_msgb *b, const char *collection, mcp_msg **pmsg);
void mcp__msgb_discard(mcp_msgb *b);
/* Appends the fragments of a snapshot (takes a reference; at most one per
 * message). */
void mcp__msgb_snap(mcp_msgb *b, mcp_snap *sn);

/* ---- protobuf wire format (wire.c) ---- */

enum { MCP_WT_VARINT = 0, MCP_WT_I64 = 1, MCP_WT_LEN = 2, MCP_WT_I32 = 5 };

static inline size_t mcp__varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}
static inline uint8_t *mcp__put_varint(uint8_t *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}
/* Size of a length-delimited field with a one-byte tag (fields 1-15). */
static inline size_t mcp__len_field_size(size_t len) {
  return 1 + mcp__varint_len(len) + len;
}
static inline uint8_t *mcp__put_len_field(uint8_t *p, uint32_t field,
                                          const void *data, size_t len) {
  *p++ = (uint8_t)(field << 3 | MCP_WT_LEN);
  p = mcp__put_varint(p, len);
  if (len) {
    memcpy(p, data, len);
  }
  return p + len;
}

/* mcp_wire_varint()'s body, inlined into the core's own readers. */
static inline int mcp__varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  uint64_t r = 0;
  for (unsigned shift = 0; shift < 64; shift += 7) {
    if (*p == end) {
      return MCP_ERR_MALFORMED;
    }
    uint8_t b = *(*p)++;
    if (shift == 63 && b > 1) {
      /* Bits beyond 64 (or an 11th byte): refused, as Go's protowire
       * does, rather than silently truncated: protobuf-c reads such a bool
       * as true where the truncated value says false. */
      return MCP_ERR_MALFORMED;
    }
    r |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = r;
      return 0;
    }
  }
  return MCP_ERR_MALFORMED; /* more than 10 bytes */
}

/* A read cursor over a protobuf message. */
typedef struct mcp_wire {
  const uint8_t *p, *end;
} mcp_wire;

/*
 * Reads the next field: its number, wire type and, for LEN fields, the
 * payload in |*data|/|*len|; for VARINT the value in |*v|; other types are
 * skipped. Returns 1 for a field, 0 at the end, MCP_ERR_MALFORMED on bad
 * bytes (including groups and field number 0).
 */
int mcp__wire_next(mcp_wire *w, uint32_t *field, int *wt, uint64_t *v,
                   const uint8_t **data, size_t *len);

/* 1 when |s[0..n)| is valid UTF-8 without NUL bytes. */
int mcp__utf8_valid(const uint8_t *s, size_t n);
static inline int mcp__str_valid(const char *s) {
  return s && mcp__utf8_valid((const uint8_t *)s, strlen(s));
}

/* Field numbers of the push message of each service (Resources,
 * MeshConfigResponse, IncrementalMeshConfigResponse); 0: no such field.
 * The source writes pushes with it, the sink reads them. */
typedef struct mcp_codec {
  uint8_t version, key, resources, removed, nonce, incremental;
} mcp_codec;
extern const mcp_codec mcp__codecs[3];

/* ---- versioned structs (mcp.h, "Conventions") ---- */

/*
 * The bytes of version |version| of a struct whose versions' sizes are
 * |sizes[1..n)| (append-only: each is a prefix of the next). A version
 * newer than this library knows gets the newest prefix it knows (the
 * caller's struct is larger); 0 or less gets 0.
 */
static inline size_t mcp__version_size(int version, const size_t *sizes,
                                       size_t n) {
  if (version < 1) {
    return 0;
  }
  return (size_t)version < n ? sizes[version] : sizes[n - 1];
}
/* 1 when |version| is one this library knows (an input struct of another
 * version is refused: its fields cannot be read safely). */
static inline int mcp__version_known(int version, size_t n) {
  return version >= 1 && (size_t)version < n;
}
#define MCP__VSIZES(T) ((const size_t[]){0, sizeof(T)})
#define MCP__VN 2 /* versions known + 1, for every struct so far */

/* |v| or, when 0, |def|: limits of 0 take their defaults. */
static inline size_t mcp__limit(size_t v, size_t def) { return v ? v : def; }

/* 1 when every key and value of |kv[0..n)| is UTF-8 without NUL. */
int mcp__kvs_valid(const mcp_kv *kv, size_t n);

/* 1 when |name| passes |rules| and is at most |max| bytes. */
int mcp__name_ok(const char *name, mcp_name_rules rules, size_t max);

/* ---- string-keyed hash map (map.c) ---- */

/* Open addressing, linear probing, backward-shift deletion. Keys are
 * borrowed from the values' owners. */
typedef struct mcp_map_slot {
  const char *key; /* NULL: empty */
  uint64_t hash;
  void *val;
} mcp_map_slot;

typedef struct mcp_map {
  mcp_map_slot *slots;
  size_t cap; /* a power of two, or 0 */
  size_t n;
} mcp_map;

uint64_t mcp__hash(const char *s, size_t n);
void *mcp__map_get(const mcp_map *m, const char *key);
void *mcp__map_get_n(const mcp_map *m, const char *key, size_t n);
/* Makes room for |extra| more keys so that the next |extra| puts of new
 * keys cannot fail. */
int mcp__map_reserve(mcp_map *m, const mcp_mem *mem, size_t extra);
/* Inserts or replaces; returns the previous value (or NULL). Fails only
 * when no room was reserved and growing fails: then |*err| = NOMEM. */
void *mcp__map_put(mcp_map *m, const mcp_mem *mem, const char *key, void *val,
                   int *err);
/* Removes and returns the value (or NULL). */
void *mcp__map_del(mcp_map *m, const char *key);
void mcp__map_free(mcp_map *m, const mcp_mem *mem);
/* Iteration: for (size_t i = 0; mcp__map_iter(m, &i, &val);) */
int mcp__map_iter(const mcp_map *m, size_t *i, void **val);

/* ---- store internals used by sessions (store.c) ---- */

typedef struct mcp_entry mcp_entry;
struct mcp_entry {
  char *name;
  char *version;    /* NULL for a tombstone */
  mcp_rcbuf *enc;   /* [tag 3][len][Resource]; NULL for a tombstone */
  uint32_t res_off; /* where the Resource bytes start in enc->data */
  /* Where the body's type URL and value start in enc->data (the value runs
   * to the end: the body is the Resource's last field, the value the
   * Any's), so that watches read them without parsing (mcp__entry_body). */
  uint32_t type_off, body_off;
  uint8_t gen_version; /* the version was generated by the store */
  uint64_t gen;     /* generation of the last change (or the deletion) */
  uint64_t born;    /* generation it was first created at (not reset when
                       a tombstone comes back): a watch older than that
                       never saw it, so its tombstone is not news to it */
  mcp_entry *prev, *next; /* change list, oldest first */
};

/*
 * The full state of a collection at one generation, as fragments: built
 * once, at the first full-state push of that generation, and shared by
 * every full-state push of it (one reference each instead of one per
 * resource). Atomically refcounted like mcp_rcbuf.
 */
struct mcp_snap {
  atomic_uint_fast32_t ref;
  mcp_mem mem;
  uint64_t gen;
  size_t n, len;       /* fragments, bytes */
  mcp_rcbuf **refs;    /* n, after the struct */
  mcp_iovec *iov;      /* n, after refs */
};
void mcp__snap_unref(mcp_snap *sn);

typedef struct mcp_coll {
  mcp_snap *snap;          /* full state at snap->gen, or NULL */
  char *name;
  size_t index;
  mcp_map map;             /* name -> entry, tombstones included */
  mcp_entry *head, *tail;  /* ordered by gen */
  size_t nlive, ntomb;
  uint64_t gen;
  uint64_t compact_gen;    /* tombstones up to here were dropped */
  mcp_tstamp last_change;  /* the last instant it changed ... */
  mcp_tstamp prev_change;  /* ... and the one before (has_prev): pacing */
  int absent;              /* removed (mcp_store_remove_collection) and not
                              brought back: every entry is a tombstone */
  uint8_t touched, has_prev; /* last_change, prev_change are set */
} mcp_coll;

/* |c| changed at |ts|. Changes at one instant (a batch) are one change,
 * so that the pacing rule sees a batch as isolated. */
static inline void mcp__coll_touch(mcp_coll *c, mcp_tstamp ts) {
  if (c->touched && ts != c->last_change) {
    c->prev_change = c->last_change;
    c->has_prev = 1;
  }
  c->last_change = ts;
  c->touched = 1;
}

/*
 * The pacing rule of every subscriber of a collection (watch.c; the rule
 * in words is docs/protocol.md "Debounce"): an mcp_watch and an MCP source
 * subscription keep their own state and ask here. |sent|: when the
 * subscriber last sent (took) the collection; |seen|: when it first saw
 * the change that waits (|ts| if not noted yet).
 * mcp__pace_ready(): a change that waits may go at |ts|.
 * mcp__pace_due(): the earliest time it may go (noted: |seen| is noted,
 * so max_delay counts); 0 when at once (no debounce, or it leads).
 */
int mcp__pace_ready(const mcp_coll *c, mcp_tstamp debounce,
                    mcp_tstamp max_delay, mcp_tstamp sent, mcp_tstamp seen,
                    mcp_tstamp ts);
mcp_tstamp mcp__pace_due(const mcp_coll *c, mcp_tstamp debounce,
                         mcp_tstamp max_delay, mcp_tstamp sent, int noted,
                         mcp_tstamp seen);

struct mcp_store {
  mcp_mem mem;
  uint64_t epoch;
  mcp_name_rules name_rules;
  size_t max_name_len, max_version_len, max_resources;
  mcp_coll **colls;
  size_t ncolls, cap;
  mcp_map coll_map;
  struct mcp_shared *shared; /* mcp__store_share() */
};

mcp_coll *mcp__store_coll(const mcp_store *s, const char *name);
/*
 * Immutable blobs shared by the objects that use a store (the options of
 * its source sessions): one refcounted copy per distinct content, so that
 * a thousand streams made alike keep one. Returns the copy equal to
 * |blob[0..len)| (8-byte aligned), or NULL for NOMEM. Same thread as the
 * store; every share is paired with an unshare before mcp_store_del().
 */
const void *mcp__store_share(mcp_store *s, const void *blob, size_t len);
void mcp__store_unshare(mcp_store *s, const void *p);
/* The Any of a live entry: its type URL (|*tlen| bytes, not NUL-terminated)
 * and value (NULL when empty). */
static inline void mcp__entry_body(const mcp_entry *e, const uint8_t **type,
                                   size_t *tlen, const uint8_t **body,
                                   size_t *blen) {
  const uint8_t *d = e->enc->data;
  size_t n = e->enc->len - e->body_off;
  size_t type_end = n ? e->body_off - 1 - mcp__varint_len(n) : e->enc->len;
  *type = d + e->type_off;
  *tlen = type_end - e->type_off;
  *body = n ? d + e->body_off : NULL;
  *blen = n;
}
/* The full state of |c| now (built if needed; owned by |c|), or NULL for
 * NOMEM. */
mcp_snap *mcp__store_snap(const mcp_store *s, mcp_coll *c);
/* mcp__msgb_snap() for a protocol module's builder (msg_builder.c). */
struct mcp_msg_builder;
void mcp__msg_builder_snap(struct mcp_msg_builder *b, mcp_snap *sn);
/* Formats "<epoch hex>-<gen>" into |buf| (at least 40 bytes). */
void mcp__format_version(char *buf, size_t n, uint64_t epoch, uint64_t gen);

/* The sink state's allocator, and the engine stream running its session
 * (mcp_stream.c: the newest stream wins), or NULL. */
const mcp_mem *mcp__sink_state_mem(const mcp_sink_state *st);
void *mcp__sink_state_stream(const mcp_sink_state *st);
void mcp__sink_state_set_stream(mcp_sink_state *st, void *stream);

/* Decoding a Resource into the public view (sink.c, tests). */

#endif /* MCP_INT_H */
