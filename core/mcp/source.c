/*
 * The source side of one stream: classifies each request (new, ACK, NACK,
 * stale), keeps at most one push in flight per collection, and builds each
 * push from the store's shared fragments.
 *
 * What the sink holds is tracked as a generation of the collection, not as
 * a copy of the names: after an ACK the sink holds exactly the generation
 * the push described. Only resumption (initial_resource_versions) needs a
 * full comparison, when its answer is built.
 *
 * The three services share everything here: a request of any of them is
 * read into one struct (rq), and a push is written through a table of
 * field numbers (codec).
 */
#include "codec.h"

#include <assert.h>

enum {
  F_INCREMENTAL = 1 << 0, /* the sink asked for incremental pushes */
  F_HELD_GEN = 1 << 1,    /* the sink holds generation held_gen */
  F_ANSWER = 1 << 2,      /* a new request awaits its answer */
  F_PENDING = 1 << 3,     /* a push is in flight */
  F_NACKED = 1 << 4,      /* nacked_gen was rejected */
  F_DIRTY = 1 << 5,       /* a change waits; t = when first seen */
  F_RETRY = 1 << 6,       /* a NACK retry is scheduled at t */
  F_RETRY_DUE = 1 << 7,   /* ... and its time has come */
  F_RESUME = 1 << 8,      /* the sink holds the versions in its resume */
  F_KNOWN = 1 << 9        /* u.coll is set; else u.name is ours */
};

/*
 * One collection on this stream: 32 bytes, since a synced stream is mostly
 * an array of these. What most subscriptions never need (a NACK, stale
 * answers, an abandoned push, the name of a collection the store lacks)
 * lives in an xsub, allocated at the first such event; what a subscription
 * needs only while something is under way, in a live record.
 */
typedef struct sub {
  uint64_t held_gen;
  mcp_tstamp sent; /* when the last push went (pacing) */
  uint32_t coll; /* F_KNOWN: the collection's index in the store (a store
                    frees its collections only with itself; 2^32 of them
                    would take a terabyte) */
  uint32_t pushes; /* acks = pushes - nacks - abandoned - (PENDING ? 1 : 0) */
  uint32_t live;   /* 1 + the index of its live record; 0: none */
  uint16_t flags;
  uint8_t retries;
} sub;

/*
 * A subscription's state while a push is in flight (PENDING), a request
 * awaits its answer (ANSWER), a NACK retry is scheduled (RETRY), or a
 * change waits under a debounce (DIRTY): see needs_live(). A synced stream
 * has none, and frees the array.
 */
typedef struct live {
  uint64_t pending_gen; /* PENDING: the generation pushed */
  mcp_tstamp t; /* push time when PENDING, else DIRTY since, else RETRY
                   at, else (ANSWER) the request's time */
  uint32_t pending_nonce;
  uint32_t sub; /* its subscription; UINT32_MAX: a free slot */
} live;

typedef struct nack {
  uint64_t gen; /* the generation rejected */
  int32_t code;
  char msg[];
} nack;

/* The rarer state of subscription |sub|, in a list (few per stream). */
typedef struct xsub {
  struct xsub *next;
  uint32_t sub;
  uint32_t nacks, stale, abandoned;
  char *name;  /* !F_KNOWN: the collection's name (ours) */
  nack *nack;  /* the last NACK, or NULL */
} xsub;

/* The versions a resuming sink holds, until it ACKs a push. */
typedef struct resume {
  struct resume *next;
  size_t sub;
  mcp_map map; /* name -> version, both in arena */
  char *arena;
} resume;

typedef mcp_codec codec;

/*
 * The options as kept: every session made with the same options shares
 * one copy, interned in the default store (mcp_store_share); a session
 * without a default store has its own.
 */
typedef struct cfg {
  mcp_mem mem;
  mcp_store *default_store;
  mcp_select_store_cb select_store;
  void *select_ud;
  mcp_type_url_cb collection_for_type;
  void *collection_for_type_ud;
  mcp_tstamp debounce, max_delay, retry_initial, retry_max;
  int (*version_reached)(const char *, const char *, void *);
  void *version_reached_ud;
  mcp_tstamp catchup_timeout;
  uint64_t rate, burst; /* requests per second; bucket size */
  mcp_event_cb on_event;
  void *user_data;
  uint32_t max_collections, max_initial, max_node_ann, max_name, max_version;
  uint32_t max_node_id, max_node_key, max_node_value, max_node_bytes;
  uint32_t retry_codes; /* bit per google.rpc code */
  uint32_t service;     /* mcp_service */
  uint32_t send_trigger;
} cfg;

/*
 * A status's strings: two versions ("<epoch hex>-<generation>", at most 37
 * bytes each) and the nonce as sent, "<number>" (at most 10), in a buffer
 * per thread (V2) or the session's (V1). On IncrementalAggregatedResources
 * the nonce is "<number>:<type_url>": then ibig, grown with the
 * subscriptions, holds it.
 */
enum { IBUF_VER = 38, IBUF_FIXED = 2 * IBUF_VER + 11 };

/* What most streams never need, allocated at the first use: a synced
 * stream of ResourceSource is its subscriptions and little else. */
typedef struct rare {
  char **keys; /* aggregated services: the type_url of each sub */
  xsub *xs;
  resume *resumes;
  char *ibig;   /* see IBUF_FIXED */
  char *v1text; /* the text of a V1 caller's status (IBUF_FIXED) */
  uint32_t ibig_cap;
  uint32_t stale_unknown; /* stale requests for collections never asked */
} rare;

struct mcp_source_session {
  const cfg *c;
  mcp_store *store;    /* chosen at the first request */
  mcp_sink_node *node; /* and its strings, one block; NULL before */
  sub *subs;
  rare *r;             /* NULL until needed */
  live *lives;         /* NULL when no subscription has one */
  uint32_t nlives, nlive; /* slots, used */
  uint64_t tokens;      /* in thousandths of a request */
  mcp_tstamp tokens_ts; /* when |tokens| was last refilled */
  mcp_tstamp last_ts;
  uint32_t nsubs, seen_ncolls, rr; /* rr: round-robin cursor */
  uint32_t next_nonce;
  uint8_t trigger_pending;
};

/* The session's rare part, made if needed; NULL: NOMEM. */
static rare *rare_get(mcp_source_session *s) {
  if (!s->r) {
    s->r = mcp_mem_calloc(&s->c->mem, 1, sizeof(*s->r));
  }
  return s->r;
}

static char **keys_of(const mcp_source_session *s) {
  return s->r ? s->r->keys : NULL;
}

static int needs_live(const mcp_source_session *s, const sub *u) {
  return (u->flags & (F_ANSWER | F_PENDING | F_RETRY)) ||
         ((u->flags & F_DIRTY) && s->c->debounce);
}

static live *live_of(const mcp_source_session *s, const sub *u) {
  return u->live ? &s->lives[u->live - 1] : NULL;
}

/* The time of |u|'s live record (0: none, which only a state that reads
 * no time has). */
static mcp_tstamp live_t(const mcp_source_session *s, const sub *u) {
  const live *l = live_of(s, u);
  return l ? l->t : 0;
}

/* Room for one more live record, so that live_take() cannot fail: called
 * before a change that may need one. 0 or NOMEM. */
static int live_reserve(mcp_source_session *s) {
  if (s->nlive < s->nlives) {
    return 0;
  }
  /* At most one record per subscription (and the one a new subscription
   * is about to take). */
  size_t n = s->nlives ? 2 * (size_t)s->nlives : 1;
  if (n > (size_t)s->nsubs + 1) {
    n = (size_t)s->nsubs + 1;
  }
  live *l = mcp_mem_realloc(&s->c->mem, s->lives, n * sizeof(*l));
  if (!l) {
    return MCP_ERR_NOMEM;
  }
  for (size_t k = s->nlives; k < n; ++k) {
    l[k].sub = UINT32_MAX;
  }
  s->lives = l;
  s->nlives = (uint32_t)n;
  return 0;
}

/* |u|'s live record: its own, or a free one (live_reserve() first). The
 * pointer is good until the next live_reserve(). */
static live *live_take(mcp_source_session *s, sub *u) {
  if (u->live) {
    return &s->lives[u->live - 1];
  }
  /* Where the next free slot is when none was freed (takes fill the
   * array in order): O(1) for a stream asking for many at once. */
  size_t i = s->nlive;
  while (s->lives[i].sub != UINT32_MAX) {
    i = i + 1 < s->nlives ? i + 1 : 0;
  }
  live *l = &s->lives[i];
  memset(l, 0, sizeof(*l));
  l->sub = (uint32_t)(u - s->subs);
  u->live = (uint32_t)i + 1;
  s->nlive++;
  return l;
}

/* Drops |u|'s record once its state needs none; the array goes with the
 * last one. */
static void live_settle(mcp_source_session *s, sub *u) {
  if (!u->live || needs_live(s, u)) {
    return;
  }
  s->lives[u->live - 1].sub = UINT32_MAX;
  u->live = 0;
  if (--s->nlive == 0) {
    mcp_mem_free(&s->c->mem, s->lives);
    s->lives = NULL;
    s->nlives = 0;
  }
}

static const mcp_sink_node empty_node = {.id = ""};

static const mcp_coll *sub_coll(const mcp_source_session *s, const sub *u) {
  return mcp_store_coll_at(s->store, u->coll);
}

/* The collection of |u| and its generation, read once for the checks of
 * one pass (NULL and 0 while the store lacks it). */
static const mcp_coll *sub_view(const mcp_source_session *s, const sub *u,
                                uint64_t *gen) {
  const mcp_coll *c = (u->flags & F_KNOWN) ? sub_coll(s, u) : NULL;
  *gen = c ? mcp_coll_generation(c) : 0;
  return c;
}

static xsub *x_find(const mcp_source_session *s, size_t i) {
  xsub *x = s->r ? s->r->xs : NULL;
  while (x && x->sub != i) {
    x = x->next;
  }
  return x;
}

/* The xsub of subscription |i|, made if needed; NULL: NOMEM. */
static xsub *x_get(mcp_source_session *s, size_t i) {
  xsub *x = x_find(s, i);
  if (!x && rare_get(s) && (x = mcp_mem_calloc(&s->c->mem, 1, sizeof(*x)))) {
    x->sub = (uint32_t)i;
    x->next = s->r->xs;
    s->r->xs = x;
  }
  return x;
}

/* The generation |u| last had NACKed (F_NACKED only). */
static uint64_t nacked_gen(const mcp_source_session *s, const sub *u) {
  return x_find(s, (size_t)(u - s->subs))->nack->gen;
}

static const char *sub_name(const mcp_source_session *s, const sub *u) {
  return u->flags & F_KNOWN ? mcp_coll_name(sub_coll(s, u))
                            : x_find(s, (size_t)(u - s->subs))->name;
}

/* What the sink calls the subscription: the collection, or the type_url. */
static const char *sub_key(const mcp_source_session *s, size_t i) {
  return keys_of(s) ? keys_of(s)[i] : sub_name(s, &s->subs[i]);
}

static void check_ts(mcp_source_session *s, mcp_tstamp ts) {
  assert(ts >= s->last_ts && "time went backwards");
  s->last_ts = ts;
}

static void emit(mcp_source_session *s, mcp_event *ev) {
  if (s->c->on_event) {
    ev->node = s->node ? s->node : &empty_node;
    s->c->on_event(ev, s->c->user_data);
  }
}

/* A limit of the options as kept (0: |def|; more than 32 bits: no limit
 * smaller than the largest message). */
static uint32_t limit32(size_t v, size_t def) {
  v = mcp_limit_or(v, def);
  return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static size_t format_nonce(char *buf, uint32_t n) {
  char tmp[16];
  size_t k = 0;
  do {
    tmp[k++] = (char)('0' + n % 10);
    n /= 10;
  } while (n);
  for (size_t i = 0; i < k; ++i) {
    buf[i] = tmp[k - 1 - i];
  }
  buf[k] = '\0';
  return k;
}

/*
 * Our nonces are decimal numbers without leading zeros; on
 * IncrementalAggregatedResources, whose responses name no type, they are
 * "<number>:<type_url>", so that the sink can tell which type a response is
 * for. Anything else was never ours: 0, stale.
 */
static uint32_t parse_nonce(const mcp_source_session *s, const char *p,
                            const char *key) {
  uint64_t n = 0;
  if (p[0] < '1' || p[0] > '9') {
    return 0;
  }
  for (; *p >= '0' && *p <= '9'; ++p) {
    if ((n = n * 10 + (uint64_t)(*p - '0')) > UINT32_MAX) {
      return 0;
    }
  }
  if (s->c->service == MCP_SERVICE_AGGREGATED_INCREMENTAL) {
    return *p == ':' && strcmp(p + 1, key) == 0 ? (uint32_t)n : 0;
  }
  return *p ? 0 : (uint32_t)n;
}

static void source_options_default(mcp_source_options *opts) {
  memset(opts, 0, sizeof(*opts));
  opts->max_collections = MCP_DEFAULT_MAX_COLLECTIONS;
  opts->max_initial_versions = MCP_DEFAULT_MAX_INITIAL_VERSIONS;
  opts->max_node_annotations = MCP_DEFAULT_MAX_NODE_ANNOTATIONS;
  opts->max_name_len = MCP_DEFAULT_MAX_NAME_LEN;
  opts->max_version_len = MCP_DEFAULT_MAX_VERSION_LEN;
  opts->max_node_id_len = MCP_DEFAULT_MAX_NODE_ID_LEN;
  opts->max_node_key_len = MCP_DEFAULT_MAX_NODE_KEY_LEN;
  opts->max_node_value_len = MCP_DEFAULT_MAX_NODE_VALUE_LEN;
  opts->max_node_bytes = MCP_DEFAULT_MAX_NODE_BYTES;
  opts->request_rate = MCP_DEFAULT_REQUEST_RATE;
  opts->request_burst = MCP_DEFAULT_REQUEST_BURST;
}

void mcp_source_options_default_versioned(int version,
                                          mcp_source_options *opts) {
  mcp_source_options o;
  source_options_default(&o);
  memcpy(opts, &o,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_source_options), MCP_VSTRUCT_N));
}

static int session_new(mcp_source_session **ps, const mcp_source_options *opts,
                       mcp_tstamp ts);

/* Drops a session's hold on its options (NULL: none). */
static void cfg_release(const cfg *c) {
  if (!c) {
    return;
  }
  if (c->default_store) {
    mcp_store_unshare(c->default_store, c);
  } else {
    mcp_mem m = c->mem;
    mcp_mem_free(&m, (void *)(uintptr_t)c);
  }
}

int mcp_source_session_new_versioned(mcp_source_session **ps, int version,
                                     const mcp_source_options *opts,
                                     mcp_tstamp ts) {
  mcp_source_options o;
  if (!opts || !mcp_vstruct_known(version, MCP_VSTRUCT_N)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  source_options_default(&o);
  memcpy(&o, opts,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_source_options), MCP_VSTRUCT_N));
  return session_new(ps, &o, ts);
}

static int session_new(mcp_source_session **ps, const mcp_source_options *opts,
                       mcp_tstamp ts) {
  if (!ps || !opts || (!opts->store && !opts->select_store) ||
      opts->service > MCP_SERVICE_AGGREGATED_INCREMENTAL) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  uint32_t codes = 0;
  if (opts->nack_retry_codes) {
    for (size_t i = 0; i < opts->nnack_retry_codes; ++i) {
      int c = opts->nack_retry_codes[i];
      if (c <= 0 || c >= 32) {
        return MCP_ERR_INVALID_ARGUMENT;
      }
      codes |= 1u << c;
    }
  } else {
    codes = 1u << MCP_CODE_UNAVAILABLE;
  }
  cfg k;
  memset(&k, 0, sizeof(k)); /* padding too: configs are compared whole */
  mcp_mem_init(&k.mem, opts->mem);
  k.service = opts->service;
  k.send_trigger = opts->send_trigger != 0;
  k.default_store = opts->store;
  k.select_store = opts->select_store;
  k.select_ud = opts->select_store_user_data;
  k.collection_for_type = opts->collection_for_type;
  k.collection_for_type_ud = opts->collection_for_type_user_data;
  k.debounce = opts->debounce;
  /* The module's own default bound, as Destination's and xDS's. */
  k.max_delay = opts->max_delay ? opts->max_delay
                                : mcp_watch_default_max_delay(opts->debounce);
  k.retry_initial = opts->nack_retry_initial;
  k.retry_max = opts->nack_retry_max ? opts->nack_retry_max : opts->nack_retry_initial;
  k.retry_codes = codes;
  k.version_reached = opts->version_reached;
  k.version_reached_ud = opts->version_reached_user_data;
  k.catchup_timeout = opts->catchup_timeout ? opts->catchup_timeout
                                            : 30 * MCP_SECONDS;
  k.on_event = opts->on_event;
  k.user_data = opts->user_data;
  k.max_collections = (uint32_t)mcp_limit_or(opts->max_collections, MCP_DEFAULT_MAX_COLLECTIONS);
  k.max_initial = (uint32_t)mcp_limit_or(opts->max_initial_versions, MCP_DEFAULT_MAX_INITIAL_VERSIONS);
  k.max_node_ann = (uint32_t)mcp_limit_or(opts->max_node_annotations, MCP_DEFAULT_MAX_NODE_ANNOTATIONS);
  k.max_name = (uint32_t)mcp_limit_or(opts->max_name_len, MCP_DEFAULT_MAX_NAME_LEN);
  k.max_version = (uint32_t)mcp_limit_or(opts->max_version_len, MCP_DEFAULT_MAX_VERSION_LEN);
  k.max_node_id = limit32(opts->max_node_id_len, MCP_DEFAULT_MAX_NODE_ID_LEN);
  k.max_node_key = limit32(opts->max_node_key_len, MCP_DEFAULT_MAX_NODE_KEY_LEN);
  k.max_node_value = limit32(opts->max_node_value_len, MCP_DEFAULT_MAX_NODE_VALUE_LEN);
  k.max_node_bytes = limit32(opts->max_node_bytes, MCP_DEFAULT_MAX_NODE_BYTES);
  k.rate = mcp_limit_or(opts->request_rate, MCP_DEFAULT_REQUEST_RATE);
  k.burst = mcp_limit_or(opts->request_burst, MCP_DEFAULT_REQUEST_BURST);
  const cfg *c;
  if (k.default_store) {
    c = mcp_store_share(k.default_store, &k, sizeof(k));
  } else {
    cfg *own = mcp_mem_malloc(&k.mem, sizeof(k));
    if (own) {
      *own = k;
    }
    c = own;
  }
  mcp_source_session *s = c ? mcp_mem_calloc(&k.mem, 1, sizeof(*s)) : NULL;
  if (!s) {
    cfg_release(c);
    return MCP_ERR_NOMEM;
  }
  s->c = c;
  s->tokens = c->burst * 1000;
  s->tokens_ts = ts;
  /* Only ResourceSink has a dialing source. */
  s->trigger_pending = c->send_trigger && c->service == MCP_SERVICE_RESOURCE;
  s->last_ts = ts;
  *ps = s;
  return 0;
}

static void resume_free(mcp_source_session *s, resume *r) {
  mcp_map_free(&r->map, &s->c->mem);
  mcp_mem_free(&s->c->mem, r->arena);
  mcp_mem_free(&s->c->mem, r);
}

static resume *resume_find(const mcp_source_session *s, size_t i) {
  for (resume *r = s->r ? s->r->resumes : NULL; r; r = r->next) {
    if (r->sub == i) {
      return r;
    }
  }
  return NULL;
}

static void resume_drop(mcp_source_session *s, size_t i) {
  for (resume **pp = s->r ? &s->r->resumes : NULL; pp && *pp;
       pp = &(*pp)->next) {
    if ((*pp)->sub == i) {
      resume *r = *pp;
      *pp = r->next;
      resume_free(s, r);
      return;
    }
  }
}

static void x_free(mcp_source_session *s, xsub *x) {
  mcp_mem_free(&s->c->mem, x->name);
  mcp_mem_free(&s->c->mem, x->nack);
  mcp_mem_free(&s->c->mem, x);
}

void mcp_source_session_del(mcp_source_session *s) {
  if (!s) {
    return;
  }
  rare *r = s->r;
  for (size_t i = 0; r && r->keys && i < s->nsubs; ++i) {
    mcp_mem_free(&s->c->mem, r->keys[i]);
  }
  while (r && r->xs) {
    xsub *x = r->xs;
    r->xs = x->next;
    x_free(s, x);
  }
  while (r && r->resumes) {
    resume *rs = r->resumes;
    r->resumes = rs->next;
    resume_free(s, rs);
  }
  if (r) {
    mcp_mem_free(&s->c->mem, r->keys);
    mcp_mem_free(&s->c->mem, r->ibig);
    mcp_mem_free(&s->c->mem, r->v1text);
    mcp_mem_free(&s->c->mem, r);
  }
  mcp_mem_free(&s->c->mem, s->subs);
  mcp_mem_free(&s->c->mem, s->lives);
  mcp_mem_free(&s->c->mem, s->node);
  const cfg *c = s->c;
  mcp_mem m = c->mem;
  mcp_mem_free(&m, s);
  cfg_release(c);
}

/* Binds subscriptions to collections the store gained since last time. */
static void resolve(mcp_source_session *s) {
  if (!s->store || s->seen_ncolls == mcp_store_coll_count(s->store)) {
    return;
  }
  s->seen_ncolls = (uint32_t)mcp_store_coll_count(s->store);
  for (xsub *x = s->r ? s->r->xs : NULL; x; x = x->next) {
    const mcp_coll *c = x->name ? mcp_store_coll(s->store, x->name) : NULL;
    if (c) {
      mcp_mem_free(&s->c->mem, x->name);
      x->name = NULL;
      s->subs[x->sub].coll = (uint32_t)mcp_coll_index(c);
      s->subs[x->sub].flags |= F_KNOWN;
    }
  }
}

/* ---- receiving requests ---- */

typedef mcp_request rq;
typedef mcp_request_buf decoded;


/* Copies the sink node into one block: the struct, its annotations and
 * strings. */
static int copy_node(const mcp_mem *m, const Istio__Mcp__V1alpha1__SinkNode *n,
                     mcp_sink_node **pnode) {
  size_t na = n ? n->n_annotations : 0;
  size_t sz = sizeof(mcp_sink_node) + sizeof(mcp_kv) * na +
              (n ? strlen(n->id) : 0) + 1;
  for (size_t i = 0; i < na; ++i) {
    sz += strlen(n->annotations[i]->key) + strlen(n->annotations[i]->value) + 2;
  }
  mcp_sink_node *node = mcp_mem_malloc(m, sz);
  if (!node) {
    return MCP_ERR_NOMEM;
  }
  mcp_kv *kv = (mcp_kv *)(void *)(node + 1);
  char *p = (char *)(kv + na);
#define COPY_(dst, src)              \
  do {                               \
    size_t l_ = strlen(src) + 1;     \
    memcpy(p, src, l_);              \
    (dst) = p;                       \
    p += l_;                         \
  } while (0)
  for (size_t i = 0; i < na; ++i) {
    COPY_(kv[i].key, n->annotations[i]->key);
    COPY_(kv[i].value, n->annotations[i]->value);
  }
  COPY_(node->id, n ? n->id : "");
#undef COPY_
  node->annotations = na ? kv : NULL;
  node->nannotations = na;
  *pnode = node;
  return 0;
}

/* The first request names the sink: keep its node and choose its store.
 * Nothing is kept when no store serves it. */
static int take_node(mcp_source_session *s, const rq *r) {
  mcp_sink_node *node;
  int rv = copy_node(&s->c->mem, r->node, &node);
  if (rv != 0) {
    return rv;
  }
  mcp_store *st = s->c->select_store
                      ? s->c->select_store(node, s->c->select_ud)
                      : NULL;
  if (!st && !(st = s->c->default_store)) {
    mcp_mem_free(&s->c->mem, node);
    return MCP_ERR_PROTOCOL;
  }
  s->node = node;
  s->store = st;
  return 0;
}

static resume *resume_new(mcp_source_session *s, const rq *r, size_t i) {
  size_t sz = 1;
  for (size_t k = 0; k < r->ninitial; ++k) {
    sz += strlen(r->initial[k].key) + strlen(r->initial[k].value) + 2;
  }
  resume *rs = mcp_mem_calloc(&s->c->mem, 1, sizeof(*rs));
  if (!rs || !(rs->arena = mcp_mem_malloc(&s->c->mem, sz)) ||
      mcp_map_reserve(&rs->map, &s->c->mem, r->ninitial) != 0) {
    if (rs) {
      resume_free(s, rs);
    }
    return NULL;
  }
  rs->sub = i;
  char *p = rs->arena;
  for (size_t k = 0; k < r->ninitial; ++k) {
    size_t kl = strlen(r->initial[k].key) + 1, vl = strlen(r->initial[k].value) + 1;
    memcpy(p, r->initial[k].key, kl);
    memcpy(p + kl, r->initial[k].value, vl);
    int err = 0;
    /* Duplicate keys: protobuf-c keeps them all; the last one wins, as in
     * every other protobuf implementation. */
    mcp_map_put(&rs->map, &s->c->mem, p, p + kl, &err);
    p += kl + vl;
  }
  return rs;
}

static sub *find_sub(mcp_source_session *s, const char *key, size_t *idx) {
  for (size_t i = 0; i < s->nsubs; ++i) {
    if (strcmp(sub_key(s, i), key) == 0) {
      *idx = i;
      return &s->subs[i];
    }
  }
  return NULL;
}

/* On IncrementalAggregatedResources, room in ibig for the nonce of
 * |key|'s status ("<number>:<type_url>"). */
static int grow_ibig(mcp_source_session *s, const char *key) {
  size_t n = 12 + strlen(key);
  if (s->c->service != MCP_SERVICE_AGGREGATED_INCREMENTAL ||
      (s->r && n <= s->r->ibig_cap)) {
    return 0;
  }
  char *b = rare_get(s) ? mcp_mem_realloc(&s->c->mem, s->r->ibig, n) : NULL;
  if (!b) {
    return MCP_ERR_NOMEM;
  }
  s->r->ibig = b;
  s->r->ibig_cap = (uint32_t)n;
  return 0;
}

/* Makes room for one more subscription (and its key). One at a time: a
 * stream subscribes once per collection, and a synced stream is mostly
 * this array. */
static int grow_subs(mcp_source_session *s) {
  size_t n = (size_t)s->nsubs + 1;
  sub *subs = mcp_mem_realloc(&s->c->mem, s->subs, n * sizeof(*subs));
  if (!subs) {
    return MCP_ERR_NOMEM;
  }
  s->subs = subs;
  if (s->c->service != MCP_SERVICE_RESOURCE) {
    char **keys = rare_get(s) ? mcp_mem_realloc(&s->c->mem, s->r->keys,
                                                n * sizeof(*keys))
                              : NULL;
    if (!keys) {
      return MCP_ERR_NOMEM; /* the larger subs array is harmless */
    }
    s->r->keys = keys;
  }
  return 0;
}

/*
 * Takes one token for a request that answers no push. Refills at |rate|
 * per second up to |burst|. Returns LIMIT when the bucket is empty.
 */
static int take_token(mcp_source_session *s, mcp_tstamp ts) {
  mcp_tstamp dt = ts - s->tokens_ts;
  mcp_tstamp full = s->c->burst * MCP_SECONDS / s->c->rate + 1; /* refill time */
  uint64_t cap = s->c->burst * 1000;
  s->tokens_ts = ts;
  /* ns * requests/s / 1e9 * 1000 thousandths; dt is capped first so the
   * product cannot overflow. */
  s->tokens += (dt < full ? dt : full) * s->c->rate / 1000000;
  if (s->tokens > cap) {
    s->tokens = cap;
  }
  if (s->tokens < 1000) {
    return MCP_ERR_LIMIT;
  }
  s->tokens -= 1000;
  return 0;
}

/* A new or repeated subscription (empty nonce). */
static int on_request(mcp_source_session *s, const rq *r, mcp_tstamp ts) {
  size_t i = 0;
  sub *u = find_sub(s, r->key, &i);
  resume *rs = NULL;

  if (!u && s->nsubs >= s->c->max_collections) {
    return MCP_ERR_LIMIT;
  }
  if (!u) {
    const mcp_coll *c = mcp_store_coll(s->store, r->collection);
    char *name = NULL, *key = NULL;
    xsub *x = NULL;
    if ((!c && (!rare_get(s) ||
                !(name = mcp_mem_strdup(&s->c->mem, r->collection)) ||
                !(x = mcp_mem_calloc(&s->c->mem, 1, sizeof(*x))))) ||
        (s->c->service != MCP_SERVICE_RESOURCE &&
         !(key = mcp_mem_strdup(&s->c->mem, r->key))) ||
        grow_subs(s) != 0 || grow_ibig(s, r->key) != 0 ||
        live_reserve(s) != 0 ||
        (r->resume && (!rare_get(s) || !(rs = resume_new(s, r, s->nsubs))))) {
      mcp_mem_free(&s->c->mem, name);
      mcp_mem_free(&s->c->mem, x);
      mcp_mem_free(&s->c->mem, key);
      return MCP_ERR_NOMEM;
    }
    i = s->nsubs++;
    u = &s->subs[i];
    memset(u, 0, sizeof(*u));
    if (key) {
      s->r->keys[i] = key;
    }
    if (c) {
      u->coll = (uint32_t)mcp_coll_index(c);
      u->flags = F_KNOWN;
    } else {
      x->sub = (uint32_t)i;
      x->name = name;
      x->next = s->r->xs;
      s->r->xs = x;
    }
  } else {
    /* A push in flight is abandoned: counted, so that acks stay
     * pushes - nacks - abandoned. */
    xsub *x = (u->flags & F_PENDING) ? x_get(s, i) : NULL;
    if (((u->flags & F_PENDING) && !x) || live_reserve(s) != 0 ||
        (r->resume && (!rare_get(s) || !(rs = resume_new(s, r, i))))) {
      return MCP_ERR_NOMEM;
    }
    if (x) {
      x->abandoned++;
      u->sent = live_t(s, u);
    }
    resume_drop(s, i);
  }
  /* Whatever was in flight is abandoned: its nonce is stale from now on,
   * and what the sink holds is unknown until this answer is ACKed. */
  u->flags = (uint16_t)((u->flags & F_KNOWN) | F_ANSWER |
                        (r->incremental ? F_INCREMENTAL : 0) |
                        (rs ? F_RESUME : 0));
  u->retries = 0;
  live_take(s, u)->t = ts; /* the request's time: how long a catch-up may
                              wait */
  if (rs) {
    rs->next = s->r->resumes;
    s->r->resumes = rs;
  }
  mcp_event ev = {.type = MCP_EVENT_REQUEST, .collection = sub_name(s, u),
                  .nonce = "", .version = "", .message = "",
                  .incremental = r->incremental};
  emit(s, &ev);
  if (!(u->flags & F_KNOWN)) {
    ev.type = MCP_EVENT_UNKNOWN_COLLECTION;
    emit(s, &ev);
  }
  return 0;
}

static mcp_tstamp retry_delay(const mcp_source_session *s, unsigned retries) {
  mcp_tstamp d = s->c->retry_initial;
  for (unsigned k = 0; k < retries && d < s->c->retry_max; ++k) {
    d *= 2;
  }
  return d < s->c->retry_max ? d : s->c->retry_max;
}

static int on_answer(mcp_source_session *s, const rq *r, mcp_tstamp ts) {
  size_t i = 0;
  sub *u = find_sub(s, r->key, &i);
  uint32_t nonce = parse_nonce(s, r->nonce, r->key);
  mcp_event ev = {.collection = u ? sub_name(s, u) : r->collection,
                  .nonce = r->nonce, .version = "", .message = ""};
  if (!u || !(u->flags & F_PENDING) || nonce != live_of(s, u)->pending_nonce) {
    xsub *x = u ? x_get(s, i) : NULL;
    if ((u && !x) || (!u && !rare_get(s))) {
      return MCP_ERR_NOMEM; /* an xsub left empty is harmless */
    }
    int rv = take_token(s, ts);
    if (rv != 0) {
      return rv;
    }
    if (x) {
      x->stale++;
    } else {
      s->r->stale_unknown++;
    }
    ev.type = MCP_EVENT_STALE;
    emit(s, &ev);
    return 0;
  }
  live *l = live_of(s, u); /* PENDING has one */
  char ver[48] = "";
  if (s->c->on_event) { /* only events need the version as text */
    mcp_format_version(ver, sizeof(ver), mcp_store_epoch(s->store), l->pending_gen);
  }
  ev.version = ver;
  ev.latency = ts - l->t;
  if (r->error) {
    const char *msg = r->error->message ? r->error->message : "";
    size_t ml = strlen(msg) + 1;
    xsub *x = x_get(s, i);
    nack *copy = x ? mcp_mem_malloc(&s->c->mem, sizeof(nack) + ml) : NULL;
    if (!copy) {
      return MCP_ERR_NOMEM; /* nothing changed (an empty xsub is harmless) */
    }
    memcpy(copy->msg, msg, ml);
    copy->code = r->error->code;
    copy->gen = l->pending_gen;
    u->flags &= (uint16_t)~F_PENDING;
    u->sent = l->t;
    mcp_mem_free(&s->c->mem, x->nack);
    x->nack = copy;
    x->nacks++;
    u->flags |= F_NACKED;
    int code = r->error->code;
    if (s->c->retry_initial && code > 0 && code < 32 &&
        (s->c->retry_codes & (1u << code))) {
      l->t = ts + retry_delay(s, u->retries);
      if (u->retries < 63) {
        u->retries++;
      }
      u->flags |= F_RETRY;
    }
    ev.type = MCP_EVENT_NACK;
    ev.code = code;
    ev.message = msg;
  } else {
    /* The sink now holds the pushed generation: what it held before (and
     * a resumption's versions) no longer matters. */
    resume_drop(s, i);
    u->flags = (uint16_t)((u->flags & ~(F_PENDING | F_NACKED | F_RESUME)) |
                          F_HELD_GEN);
    u->held_gen = l->pending_gen;
    u->sent = l->t;
    u->retries = 0;
    ev.type = MCP_EVENT_ACK;
  }
  live_settle(s, u);
  emit(s, &ev);
  return 0;
}



/* The collection a type URL names (the application's mapping, or ours). */
static int map_type(mcp_source_session *s, const char *type_url, char **out) {
  size_t n = s->c->collection_for_type
                 ? s->c->collection_for_type(type_url, NULL, 0, s->c->collection_for_type_ud)
                 : mcp_collection_for_type_url(type_url, NULL, 0);
  char *c = mcp_mem_malloc(&s->c->mem, n + 1);
  if (!c) {
    return MCP_ERR_NOMEM;
  }
  if (s->c->collection_for_type) {
    s->c->collection_for_type(type_url, c, n + 1, s->c->collection_for_type_ud);
  } else {
    mcp_collection_for_type_url(type_url, c, n + 1);
  }
  *out = c;
  return 0;
}


/* Decodes one request of the session's service into |r|, and maps a type
 * URL to its collection. */
static int decode(mcp_source_session *s, const uint8_t *in, size_t len,
                  decoded *d, rq *r) {
  const mcp_request_limits lim = {
      .service = s->c->service, .max_initial = s->c->max_initial,
      .max_node_ann = s->c->max_node_ann, .max_name = s->c->max_name,
      .max_version = s->c->max_version, .max_node_id = s->c->max_node_id,
      .max_node_key = s->c->max_node_key, .max_node_value = s->c->max_node_value,
      .max_node_bytes = s->c->max_node_bytes};
  int rv = mcp__request_decode(&lim, &s->c->mem, in, len, d, r);
  if (rv == 0 && s->c->service != MCP_SERVICE_RESOURCE && r->key[0]) {
    if ((rv = map_type(s, r->key, &d->collection)) != 0) {
      return rv;
    }
    r->collection = d->collection;
  }
  return rv;
}

int mcp_source_session_recv(mcp_source_session *s, const uint8_t *in,
                            size_t len, mcp_tstamp ts) {
  check_ts(s, ts);
  decoded d;
  memset(&d, 0, offsetof(decoded, stack));
  mcp_pballoc_init(&d.pa, &s->c->mem);
  rq r;
  int rv = decode(s, in, len, &d, &r);
  if (rv != 0) {
    goto out;
  }
  /* Istio's dialing source opens with a Resources for no collection, which
   * sinks NACK with UNIMPLEMENTED: that NACK is expected, not a fault. */
  if (s->c->service == MCP_SERVICE_RESOURCE &&
      (r.key[0] == '\0' || strcmp(r.key, MCP_TRIGGER_COLLECTION) == 0) &&
      r.error && r.error->code == MCP_CODE_UNIMPLEMENTED) {
    mcp_event ev = {.type = MCP_EVENT_TRIGGER_IGNORED, .collection = r.key,
                    .nonce = r.nonce, .version = "",
                    .code = MCP_CODE_UNIMPLEMENTED, .message = r.error->message};
    emit(s, &ev);
    goto out;
  }
  if (r.key[0] == '\0') {
    rv = MCP_ERR_PROTOCOL;
    goto out;
  }
  int took = 0;
  if (!s->node) {
    if ((rv = take_node(s, &r)) != 0) {
      goto out;
    }
    took = 1;
  }
  resolve(s);
  if (r.nonce[0] == '\0') {
    rv = take_token(s, ts);
    rv = rv ? rv : on_request(s, &r, ts);
  } else {
    rv = on_answer(s, &r, ts);
  }
  if (rv < 0 && took) { /* a failed call changes nothing */
    mcp_mem_free(&s->c->mem, s->node);
    s->node = NULL;
    s->store = NULL;
    s->seen_ncolls = 0;
  }
out:
  mcp__request_buf_free(&d, &s->c->mem);
  return rv;
}

/* ---- deciding what to push ---- */

/* 1 while the answer to a resuming request waits for this source to reach
 * the versions the sink holds (a replica that lags: version_reached), until
 * catchup_timeout after the request. */
static int catching_up(const mcp_source_session *s, const sub *u,
                       mcp_tstamp ts) {
  if (!s->c->version_reached || (u->flags & (F_ANSWER | F_RESUME)) !=
                                 (F_ANSWER | F_RESUME) ||
      ts >= live_t(s, u) + s->c->catchup_timeout) {
    return 0;
  }
  const resume *r = resume_find(s, (size_t)(u - s->subs));
  void *version;
  for (size_t i = 0; r && mcp_map_iter(&r->map, &i, &version);) {
    if (!s->c->version_reached(sub_name(s, u), version, s->c->version_reached_ud)) {
      return 1;
    }
  }
  return 0;
}

/* 1 when |u| is known, idle, and its collection is not what the sink
 * holds nor exactly what it rejected: a change waits. */
static int change_waits(const mcp_source_session *s, const sub *u,
                        uint64_t gen) {
  if (!(u->flags & F_KNOWN) ||
      (u->flags & (F_PENDING | F_ANSWER | F_RETRY_DUE))) {
    return 0;
  }
  return !(((u->flags & F_HELD_GEN) && u->held_gen == gen) ||
           ((u->flags & F_NACKED) && nacked_gen(s, u) == gen));
}

/* The time-dependent part, done by next() and handle_expiry() only (never
 * by want_write()): the first time a waiting change is seen, its max_delay
 * clock starts, and a NACK retry waiting for old content is dropped. */
static int note_change(mcp_source_session *s, sub *u, uint64_t gen,
                       mcp_tstamp ts) {
  if (!(u->flags & F_DIRTY) && change_waits(s, u, gen)) {
    /* Only a debounce reads when the change was first seen. */
    if (s->c->debounce && live_reserve(s) != 0) {
      return MCP_ERR_NOMEM;
    }
    u->flags = (uint16_t)((u->flags | F_DIRTY) & ~F_RETRY);
    if (s->c->debounce) {
      live_take(s, u)->t = ts;
    }
    live_settle(s, u); /* a retry dropped */
  }
  return 0;
}

/* 1 when |u| has something to push at |ts|. Reads only: a change not
 * noted yet counts as first seen at |ts|. */
static int ready(const mcp_source_session *s, const sub *u,
                 const mcp_coll *c, uint64_t gen, mcp_tstamp ts) {
  if (!c || (u->flags & F_PENDING)) {
    return 0;
  }
  if (u->flags & (F_ANSWER | F_RETRY_DUE)) {
    return !catching_up(s, u, ts);
  }
  if (((u->flags & F_HELD_GEN) && u->held_gen == gen) ||
      ((u->flags & F_NACKED) && nacked_gen(s, u) == gen)) {
    return 0; /* up to date, or exactly what was rejected */
  }
  return mcp_pace_ready(c, s->c->debounce, s->c->max_delay, u->sent,
                        (u->flags & F_DIRTY) ? live_t(s, u) : ts, ts);
}

int mcp_source_session_want_write(mcp_source_session *s, mcp_tstamp ts) {
  assert(ts >= s->last_ts && "time went backwards");
  if (s->trigger_pending) {
    return 1;
  }
  resolve(s); /* a lookup cache: nothing observable changes */
  for (size_t i = 0; i < s->nsubs; ++i) {
    uint64_t gen;
    const mcp_coll *c = sub_view(s, &s->subs[i], &gen);
    if (ready(s, &s->subs[i], c, gen, ts)) {
      return 1;
    }
  }
  return 0;
}

mcp_tstamp mcp_source_session_get_expiry(const mcp_source_session *s) {
  mcp_tstamp t = MCP_TSTAMP_MAX;
  for (size_t i = 0; i < s->nsubs; ++i) {
    const sub *u = &s->subs[i];
    if (s->c->version_reached && (u->flags & F_KNOWN) &&
        (u->flags & (F_ANSWER | F_RESUME)) == (F_ANSWER | F_RESUME) &&
        live_t(s, u) + s->c->catchup_timeout > s->last_ts &&
        live_t(s, u) + s->c->catchup_timeout < t) {
      t = live_t(s, u) + s->c->catchup_timeout; /* a catch-up's end, if it waits */
    }
    if (!(u->flags & F_KNOWN) || (u->flags & (F_PENDING | F_ANSWER | F_RETRY_DUE))) {
      continue;
    }
    mcp_tstamp d = MCP_TSTAMP_MAX;
    uint64_t gen;
    const mcp_coll *c = sub_view(s, u, &gen);
    if ((u->flags & F_NACKED) && nacked_gen(s, u) == gen) {
      if (u->flags & F_RETRY) {
        d = live_t(s, u);
      }
    } else if (!((u->flags & F_HELD_GEN) && u->held_gen == gen)) {
      d = mcp_pace_due(c, s->c->debounce, s->c->max_delay, u->sent,
                       (u->flags & F_DIRTY) != 0, live_t(s, u));
      if (d <= s->last_ts) {
        /* Due already: want_write() says so. A time in the past would
         * make a transport that cannot pull the push yet (a send still
         * in flight) spin on its timer. */
        d = MCP_TSTAMP_MAX;
      }
    }
    if (d < t) {
      t = d;
    }
  }
  return t;
}

int mcp_source_session_handle_expiry(mcp_source_session *s, mcp_tstamp ts) {
  check_ts(s, ts);
  resolve(s);
  for (size_t i = 0; i < s->nsubs; ++i) {
    uint64_t gen;
    (void)sub_view(s, &s->subs[i], &gen);
    int rv = note_change(s, &s->subs[i], gen, ts);
    if (rv != 0) {
      return rv;
    }
  }
  for (size_t i = 0; i < s->nsubs; ++i) {
    sub *u = &s->subs[i];
    if ((u->flags & F_RETRY) && live_t(s, u) <= ts) {
      u->flags = (uint16_t)((u->flags & ~F_RETRY) | F_RETRY_DUE);
      live_settle(s, u);
    }
  }
  return 0;
}

/* ---- building pushes ---- */


/* The Istio trigger: a Resources for $triggerCollection, no nonce. It
 * may go before any request chose a store, so it has a builder of its
 * own (once per stream). */
static int next_trigger(mcp_source_session *s, mcp_msg **pmsg) {
  mcp_msg_builder *b;
  if (mcp_msg_builder_new(&b, &s->c->mem) != 0) {
    return MCP_ERR_NOMEM;
  }
  mcp__push_header(b, &mcp__codecs[MCP_SERVICE_RESOURCE], "",
                   MCP_TRIGGER_COLLECTION, "", 0);
  int rv = mcp_msg_builder_finish(b, MCP_TRIGGER_COLLECTION, pmsg);
  mcp_msg_builder_del(b);
  if (rv != 0) {
    return rv;
  }
  s->trigger_pending = 0;
  return 1;
}

/* What a push holds, counted as the store's items are framed into it. */
typedef struct push_ctx {
  mcp_msg_builder *b;
  const codec *cd;
  const resume *rs; /* resumption: the versions the sink holds */
  size_t nres, nrem, found;
} push_ctx;

/* Resumption: what the sink lacks or holds at another version. */
static int push_resumed(const mcp_item *it, void *ud) {
  push_ctx *x = ud;
  const char *v = mcp_map_get(&x->rs->map, it->name);
  x->found += v != NULL;
  if (!v || strcmp(v, it->version) != 0) {
    mcp_msg_builder_resource(x->b, x->cd->resources, it);
    x->nres++;
  }
  return 0;
}

int mcp_source_session_next(mcp_source_session *s, mcp_tstamp ts,
                            mcp_msg **pmsg) {
  check_ts(s, ts);
  if (s->trigger_pending) {
    return next_trigger(s, pmsg);
  }
  resolve(s);
  size_t idx = s->nsubs;
  const mcp_coll *c = NULL;
  uint64_t gen = 0;
  for (size_t k = 0; k < s->nsubs; ++k) {
    size_t i = (s->rr + k) % s->nsubs;
    c = sub_view(s, &s->subs[i], &gen);
    int rv = note_change(s, &s->subs[i], gen, ts);
    if (rv != 0) {
      return rv;
    }
    if (ready(s, &s->subs[i], c, gen, ts)) {
      idx = i;
      break;
    }
  }
  if (idx == s->nsubs) {
    return 0;
  }
  const codec *cd = &mcp__codecs[s->c->service];
  sub *u = &s->subs[idx];
  const char *cname = mcp_coll_name(c);
  const char *key = sub_key(s, idx);
  resume *rs = (u->flags & F_RESUME) ? resume_find(s, idx) : NULL;
  int incremental = (u->flags & F_INCREMENTAL) &&
                    (rs || ((u->flags & F_HELD_GEN) &&
                           u->held_gen >= mcp_coll_compacted(c)));
  if ((u->flags & F_INCREMENTAL) && !incremental && !cd->incremental) {
    /* IncrementalMeshConfigResponse has no full state, and the change log
     * no longer reaches what the sink holds: it must resume. */
    return MCP_ERR_RESYNC;
  }
  push_ctx x = {mcp_store_builder(s->store), cd, rs, 0, 0, 0};
  if (!x.b || live_reserve(s) != 0) {
    return MCP_ERR_NOMEM;
  }
  char ver[48], nonce_num[16];
  uint32_t n = s->next_nonce + 1 ? s->next_nonce + 1 : 1;
  mcp_format_version(ver, sizeof(ver), mcp_store_epoch(s->store), gen);
  size_t nl = format_nonce(nonce_num, n);
  char *nonce = nonce_num;
  if (s->c->service == MCP_SERVICE_AGGREGATED_INCREMENTAL) {
    size_t kl = strlen(key);
    if (!(nonce = mcp_mem_malloc(&s->c->mem, nl + kl + 2))) {
      return MCP_ERR_NOMEM;
    }
    memcpy(nonce, nonce_num, nl);
    nonce[nl] = ':';
    memcpy(nonce + nl + 1, key, kl + 1);
  }
  mcp__push_header(x.b, cd, ver, key, nonce, incremental);
  if (rs) {
    mcp_coll_foreach(c, NULL, push_resumed, &x);
    /* Names the sink holds that no longer exist: none when every one was
     * found above. */
    mcp_item it;
    for (size_t i = 0; x.found < rs->map.n && i < rs->map.cap; ++i) {
      const char *name = rs->map.slots[i].key;
      if (name && !mcp_coll_get(c, name, NULL, &it)) {
        mcp_msg_builder_len_field(x.b, cd->removed, name, strlen(name));
        x.nrem++;
      }
    }
  } else if (incremental) {
    /* Everything after the generation the sink holds: O(changed); a
     * removal of what came and went since is sent too (harmless, and
     * what this source always did). */
    mcp_msg_builder_coll(x.b, c, 0, u->held_gen, MCP_COLL_UNSEEN,
                         cd->resources, cd->removed, &x.nres, &x.nrem);
  } else if (cd->resources == 3 && mcp_coll_size(c) > 0) {
    /* Full state: the collection's snapshot, shared by every stream. */
    mcp_snap *sn = mcp_coll_snapshot(s->store, c);
    if (sn) {
      mcp_msg_builder_snap(x.b, sn);
    } else {
      mcp_msg_builder_fail(x.b);
    }
    x.nres = mcp_coll_size(c);
  } else {
    mcp_msg_builder_coll(x.b, c, 1, 0, 0, cd->resources, cd->removed, &x.nres,
                         &x.nrem);
  }
  size_t nres = x.nres, nrem = x.nrem;
  int rv = mcp_msg_builder_finish(x.b, cname, pmsg);
  if (rv == 0) {
    s->next_nonce = n;
    live *l = live_take(s, u);
    l->pending_nonce = n;
    l->pending_gen = gen;
    l->t = ts;
    u->pushes++;
    u->flags = (uint16_t)((u->flags & ~(F_ANSWER | F_DIRTY | F_RETRY | F_RETRY_DUE)) |
                          F_PENDING);
    s->rr = idx + 1;
    mcp_event ev = {.type = MCP_EVENT_PUSH, .collection = cname,
                    .nonce = nonce, .version = ver, .message = "",
                    .nresources = nres, .nremoved = nrem,
                    .incremental = incremental, .bytes = mcp_msg_len(*pmsg)};
    emit(s, &ev);
  }
  if (nonce != nonce_num) {
    mcp_mem_free(&s->c->mem, nonce);
  }
  return rv ? rv : 1;
}

/* ---- introspection ---- */

const char *mcp_source_session_node_id(const mcp_source_session *s) {
  return s->node ? s->node->id : "";
}

const mcp_sink_node *mcp_source_session_node(const mcp_source_session *s) {
  return s->node ? s->node : &empty_node;
}

uint64_t mcp_source_session_stale_unknown(const mcp_source_session *s) {
  return s->r ? s->r->stale_unknown : 0;
}

int mcp__source_initial_sent(const mcp_source_session *s) {
  if (s->nsubs == 0) {
    return 0; /* nothing asked yet */
  }
  for (size_t i = 0; i < s->nsubs; ++i) {
    /* A collection the store does not know gets no push. */
    if ((s->subs[i].flags & F_KNOWN) && s->subs[i].pushes == 0) {
      return 0;
    }
  }
  return 1;
}

size_t mcp_source_session_collection_count(const mcp_source_session *s) {
  return s->nsubs;
}

static int collection_status(const mcp_source_session *s, size_t i,
                             mcp_tstamp ts, char *text,
                             mcp_collection_status *st);

int mcp_source_session_collection_status_versioned(
    const mcp_source_session *s, size_t i, mcp_tstamp ts, int version,
    mcp_collection_status *out) {
  static _Thread_local char text[IBUF_FIXED];
  char *b = text;
  if (version < MCP_COLLECTION_STATUS_V2 && i < s->nsubs) {
    /* A V1 caller's strings live until the next call on the session:
     * the session's own scratch, made once (never a const object: the
     * status is what is read, as nghttp2's mem_send output). */
    mcp_source_session *ms = (mcp_source_session *)(uintptr_t)s;
    if (!rare_get(ms) || (!ms->r->v1text &&
        !(ms->r->v1text = mcp_mem_malloc(&s->c->mem, IBUF_FIXED)))) {
      return MCP_ERR_NOMEM;
    }
    b = ms->r->v1text;
  }
  mcp_collection_status st;
  int rv = collection_status(s, i, ts, b, &st);
  if (rv == 0) {
    memcpy(out, &st, mcp_vstruct_size(version, MCP__STATUS_SIZES, MCP__STATUS_N));
  }
  return rv;
}

static int collection_status(const mcp_source_session *s, size_t i,
                             mcp_tstamp ts, char *b,
                             mcp_collection_status *st) {
  if (i >= s->nsubs) {
    return MCP_ERR_NOT_FOUND;
  }
  const sub *u = &s->subs[i];
  const char *key = keys_of(s) ? keys_of(s)[i] : "";
  size_t kl = s->c->service == MCP_SERVICE_AGGREGATED_INCREMENTAL ? strlen(key) + 1 : 0;
  char *nonce = kl ? s->r->ibig : b + 2 * IBUF_VER;
  assert(!kl || (s->r->ibig && s->r->ibig_cap >= 11 + kl)); /* grow_ibig() */
  memset(st, 0, sizeof(*st));
  b[0] = b[IBUF_VER] = nonce[0] = '\0';
  st->acked_version = b;
  st->pending_version = b + IBUF_VER;
  st->pending_nonce = nonce;
  st->last_nonce = "";
  st->collection = sub_name(s, u);
  st->type_url = key;
  st->known = (u->flags & F_KNOWN) != 0;
  st->incremental = (u->flags & F_INCREMENTAL) != 0;
  if (u->flags & F_HELD_GEN) {
    mcp_format_version(b, IBUF_VER, mcp_store_epoch(s->store), u->held_gen);
  }
  if (u->flags & F_PENDING) {
    const live *l = live_of(s, u);
    mcp_format_version(b + IBUF_VER, IBUF_VER, mcp_store_epoch(s->store), l->pending_gen);
    size_t nl = format_nonce(nonce, l->pending_nonce);
    if (kl) { /* the same form as on the wire and in events */
      nonce[nl] = ':';
      memcpy(nonce + nl + 1, key, kl);
    }
    st->pending_age = ts > l->t ? ts - l->t : 0;
  }
  const xsub *x = x_find(s, i);
  const nack *nk = x ? x->nack : NULL;
  st->last_nack_code = nk ? nk->code : 0;
  st->last_nack_message = nk ? nk->msg : "";
  st->pushes = u->pushes;
  st->nacks = x ? x->nacks : 0;
  st->stale = x ? x->stale : 0;
  st->acks = u->pushes - (uint32_t)st->nacks - (x ? x->abandoned : 0) -
             ((u->flags & F_PENDING) ? 1u : 0u);
  return 0;
}
