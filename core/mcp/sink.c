/*
 * The sink side: what a sink holds (mcp_sink_state, which outlives
 * streams) and one stream (mcp_sink_session).
 *
 * A received Resources is validated completely, then offered to the
 * application, and only then applied: everything the apply step needs is
 * allocated before the callback runs, so an accepted change cannot fail
 * half way and a rejected one changes nothing.
 */
#include "codec.h"

#include <assert.h>

#define FOREIGN_MAX 64 /* NACKs of unrequested collections queued at most */

enum { OUT_INITIAL = 1, OUT_ANSWER = 2 };

typedef struct scoll {
  char *name;
  mcp_map held;
  char *acked_version;
  char *nack_msg;
  int nack_code;
  uint64_t pushes, acks, nacks;
  uint8_t synced;
  /* What the current stream still has to send for this collection. */
  uint8_t out;
  uint8_t answered; /* the current stream received a response for it */
  char *ans_nonce;
  int ans_code;
  char *ans_msg;
  char *last_nonce; /* of the last push answered, whole (status) */
} scoll;

typedef struct jent {
  mcp_tstamp ts;
  char *collection;
  char *nonce; /* whole, as sent */
  int kind, code;
  char *message;
  size_t ninitial;
} jent;

struct mcp_sink_state {
  mcp_mem mem;
  uint8_t *node_enc; /* the SinkNode message, encoded once */
  size_t node_enc_len;
  mcp_service service;
  int incremental;
  mcp_name_rules name_rules;
  size_t max_name, max_version, max_resources, max_metadata, max_nonce;
  mcp_apply_cb apply;
  mcp_event_cb on_event;
  void *user_data;
  scoll *colls;
  size_t ncolls, nsynced;
  mcp_map coll_map;
  jent *journal;
  size_t jcap, jhead, jcount;
  mcp_sink_session *session;
  void *stream; /* the engine stream running |session| (mcp_stream.c) */
};

typedef struct foreign {
  char *collection, *nonce;
} foreign;

struct mcp_sink_session {
  mcp_sink_state *st;
  size_t recv_len; /* of the message being answered, for events */
  foreign *q; /* FOREIGN_MAX, while some are queued (rare: 1 KiB a stream
                 would otherwise hold for nothing) */
  size_t nq;
  size_t rr;
  mcp_tstamp last_ts;
};

/* ---- state ---- */

static void sink_options_default(mcp_sink_options *opts) {
  memset(opts, 0, sizeof(*opts));
  opts->journal_size = 64;
  opts->max_name_len = MCP_DEFAULT_MAX_NAME_LEN;
  opts->max_version_len = MCP_DEFAULT_MAX_VERSION_LEN;
  opts->max_resources = MCP_DEFAULT_MAX_RESOURCES;
  opts->max_metadata = MCP_DEFAULT_MAX_METADATA;
  opts->max_nonce_len = MCP_DEFAULT_MAX_NONCE_LEN;
}

static void held_free_all(mcp_map *m, const mcp_mem *mem) {
  void *v;
  for (size_t i = 0; mcp_map_iter(m, &i, &v);) {
    mcp_mem_free(mem, v);
  }
  mcp_map_free(m, mem);
}

static void jent_clear(const mcp_mem *m, jent *j) {
  mcp_mem_free(m, j->collection);
  mcp_mem_free(m, j->nonce);
  mcp_mem_free(m, j->message);
  memset(j, 0, sizeof(*j));
}

static void answer_clear(const mcp_mem *m, scoll *c) {
  mcp_mem_free(m, c->ans_nonce);
  mcp_mem_free(m, c->ans_msg);
  c->ans_nonce = c->ans_msg = NULL;
  c->out &= (uint8_t)~OUT_ANSWER;
}

void mcp_sink_state_del(mcp_sink_state *st) {
  if (!st) {
    return;
  }
  assert(!st->session && "free the session first");
  for (size_t i = 0; i < st->ncolls; ++i) {
    scoll *c = &st->colls[i];
    held_free_all(&c->held, &st->mem);
    answer_clear(&st->mem, c);
    mcp_mem_free(&st->mem, c->name);
    mcp_mem_free(&st->mem, c->acked_version);
    mcp_mem_free(&st->mem, c->nack_msg);
    mcp_mem_free(&st->mem, c->last_nonce);
  }
  for (size_t i = 0; st->journal && i < st->jcap; ++i) {
    jent_clear(&st->mem, &st->journal[i]);
  }
  mcp_mem_free(&st->mem, st->journal);
  mcp_mem_free(&st->mem, st->colls);
  mcp_map_free(&st->coll_map, &st->mem);
  mcp_mem_free(&st->mem, st->node_enc);
  mcp_mem m = st->mem;
  mcp_mem_free(&m, st);
}

void mcp_sink_options_default_versioned(int version, mcp_sink_options *opts) {
  mcp_sink_options o;
  sink_options_default(&o);
  memcpy(opts, &o,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_sink_options), MCP_VSTRUCT_N));
}

static int state_new(mcp_sink_state **pstate, const mcp_sink_options *o);

int mcp_sink_state_new_versioned(mcp_sink_state **pstate, int version,
                                 const mcp_sink_options *opts) {
  mcp_sink_options o;
  if (!opts || !mcp_vstruct_known(version, MCP_VSTRUCT_N)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  sink_options_default(&o);
  memcpy(&o, opts,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_sink_options), MCP_VSTRUCT_N));
  return state_new(pstate, &o);
}

static int state_new(mcp_sink_state **pstate, const mcp_sink_options *o) {
  if (!pstate || !o || !o->ncollections || !o->collections ||
      o->service > MCP_SERVICE_AGGREGATED_INCREMENTAL ||
      o->name_rules > MCP_NAMES_KUBERNETES ||
      (o->node_id && !mcp_str_valid(o->node_id)) ||
      !mcp_kvs_valid(o->node_annotations, o->nnode_annotations) ||
      !mcp__node_size(o)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  for (size_t i = 0; i < o->ncollections; ++i) {
    const char *c = o->collections[i];
    if (!c || !c[0] || !mcp_str_valid(c)) {
      return MCP_ERR_INVALID_ARGUMENT;
    }
    for (size_t k = 0; k < i; ++k) {
      if (strcmp(o->collections[k], c) == 0) {
        return MCP_ERR_INVALID_ARGUMENT;
      }
    }
  }
  mcp_mem mem;
  mcp_mem_init(&mem, o->mem);
  mcp_sink_state *st = mcp_mem_calloc(&mem, 1, sizeof(*st));
  if (!st) {
    return MCP_ERR_NOMEM;
  }
  st->mem = mem;
  st->service = o->service;
  st->incremental = o->service == MCP_SERVICE_RESOURCE
                        ? (o->incremental ? 1 : 0)
                        : o->service == MCP_SERVICE_AGGREGATED_INCREMENTAL;
  st->name_rules = o->name_rules;
  st->max_name = mcp_limit_or(o->max_name_len, MCP_DEFAULT_MAX_NAME_LEN);
  st->max_version = mcp_limit_or(o->max_version_len, MCP_DEFAULT_MAX_VERSION_LEN);
  st->max_resources = mcp_limit_or(o->max_resources, MCP_DEFAULT_MAX_RESOURCES);
  st->max_metadata = mcp_limit_or(o->max_metadata, MCP_DEFAULT_MAX_METADATA);
  st->max_nonce = mcp_limit_or(o->max_nonce_len, MCP_DEFAULT_MAX_NONCE_LEN);
  st->apply = o->apply;
  st->on_event = o->on_event;
  st->user_data = o->user_data;
  st->jcap = o->journal_size;
  if (mcp__node_encode(&st->mem, o, &st->node_enc, &st->node_enc_len) != 0 ||
      !(st->colls = mcp_mem_calloc(&mem, o->ncollections, sizeof(scoll))) ||
      (st->jcap && !(st->journal = mcp_mem_calloc(&mem, st->jcap, sizeof(jent)))) ||
      mcp_map_reserve(&st->coll_map, &mem, o->ncollections) != 0) {
    goto fail;
  }
  for (size_t i = 0; i < o->ncollections; ++i) {
    scoll *c = &st->colls[i];
    if (!(c->name = mcp_mem_strdup(&mem, o->collections[i]))) {
      goto fail;
    }
    st->ncolls++;
    int err = 0;
    mcp_map_put(&st->coll_map, &mem, c->name, c, &err);
  }
  *pstate = st;
  return 0;
fail:
  mcp_sink_state_del(st);
  return MCP_ERR_NOMEM;
}

static scoll *coll_of(const mcp_sink_state *st, const char *name) {
  return mcp_map_get(&st->coll_map, name);
}

size_t mcp_sink_state_count(const mcp_sink_state *st, const char *collection) {
  scoll *c = coll_of(st, collection);
  return c ? c->held.n : 0;
}

const char *mcp_sink_state_version(const mcp_sink_state *st,
                                   const char *collection, const char *name) {
  scoll *c = coll_of(st, collection);
  held *h = c ? mcp_map_get(&c->held, name) : NULL;
  return h ? h->version : NULL;
}

void mcp_sink_state_foreach(const mcp_sink_state *st, const char *collection,
                            void (*fn)(const char *, const char *, void *),
                            void *ud) {
  scoll *c = coll_of(st, collection);
  void *v;
  for (size_t i = 0; c && mcp_map_iter(&c->held, &i, &v);) {
    held *h = v;
    fn(h->name, h->version, ud);
  }
}

mcp_service mcp_sink_state_service(const mcp_sink_state *st) {
  return st->service;
}

int mcp_sink_state_synced(const mcp_sink_state *st) {
  return st->nsynced == st->ncolls;
}

/* ---- session ---- */

const mcp_mem *mcp__sink_state_mem(const mcp_sink_state *st) {
  return &st->mem;
}
void *mcp__sink_state_stream(const mcp_sink_state *st) { return st->stream; }
void mcp__sink_state_set_stream(mcp_sink_state *st, void *stream) {
  st->stream = stream;
}

int mcp_sink_session_new(mcp_sink_session **ps, mcp_sink_state *st,
                         mcp_tstamp ts) {
  if (!ps || !st || st->session) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  mcp_sink_session *s = mcp_mem_calloc(&st->mem, 1, sizeof(*s));
  if (!s) {
    return MCP_ERR_NOMEM;
  }
  s->st = st;
  s->last_ts = ts;
  for (size_t i = 0; i < st->ncolls; ++i) {
    answer_clear(&st->mem, &st->colls[i]);
    st->colls[i].out = OUT_INITIAL;
    st->colls[i].answered = 0;
  }
  st->session = s;
  *ps = s;
  return 0;
}

void mcp_sink_session_del(mcp_sink_session *s) {
  if (!s) {
    return;
  }
  mcp_sink_state *st = s->st;
  for (size_t i = 0; i < s->nq; ++i) {
    mcp_mem_free(&st->mem, s->q[i].collection);
    mcp_mem_free(&st->mem, s->q[i].nonce);
  }
  mcp_mem_free(&st->mem, s->q);
  for (size_t i = 0; i < st->ncolls; ++i) {
    answer_clear(&st->mem, &st->colls[i]);
    st->colls[i].out = 0;
  }
  st->session = NULL;
  mcp_mem_free(&st->mem, s);
}

typedef struct work work;
static void emit_msg(mcp_sink_state *st, mcp_event_type type,
                     const char *coll, const work *w, int code,
                     const char *msg);

/* ---- receiving Resources ---- */




static char *span_dup(const mcp_mem *m, span s) {
  return mcp_mem_strndup(m, (const char *)s.p, s.n);
}

static int validate(const mcp_sink_state *st, work *w, char *msg, size_t ml);

static int queue_foreign(mcp_sink_session *s, const envelope *env, work *w) {
  mcp_sink_state *st = s->st;
  if (s->nq == FOREIGN_MAX) {
    return MCP_ERR_LIMIT; /* a source that ignores our NACKs */
  }
  if (!s->q && !(s->q = mcp_mem_malloc(&st->mem, FOREIGN_MAX * sizeof(foreign)))) {
    return MCP_ERR_NOMEM;
  }
  char vmsg[8];
  int rv = validate(st, w, vmsg, sizeof(vmsg)); /* only for the event's lists */
  if (rv < 0) {
    return rv;
  }
  char *c = span_dup(&st->mem, env->collection);
  char *n = span_dup(&st->mem, env->nonce);
  if (!c || !n) {
    mcp_mem_free(&st->mem, c);
    mcp_mem_free(&st->mem, n);
    return MCP_ERR_NOMEM;
  }
  s->q[s->nq].collection = c;
  s->q[s->nq].nonce = n;
  s->nq++;
  /* Istio's dialing source opens a ResourceSink stream with this (older
   * versions: collection ""), and its sinks answer it with this NACK:
   * expected, not a rejection. */
  int trigger = st->service == MCP_SERVICE_RESOURCE &&
                (!c[0] || strcmp(c, MCP_TRIGGER_COLLECTION) == 0);
  emit_msg(st, trigger ? MCP_EVENT_TRIGGER_IGNORED : MCP_EVENT_NACK, c, w,
           MCP_CODE_UNIMPLEMENTED, "unsupported collection");
  return 0;
}

/* Everything one received push needs, freed in one place. */
static int over_limit(const mcp_sink_state *st, const scoll *c, const work *w,
                      size_t nfresh);

struct work {
  envelope env;
  mcp_resource *res;
  void *arena;         /* the resources' mcp_kv arrays, then their strings */
  char **rem;          /* NUL-terminated removed names */
  size_t nlisted;      /* resources the event lists, in order */
  unsigned char *hidden; /* per resource: not listed (NULL: none is) */
  size_t nrem_listed;  /* names in |rem| */
  const char **gone;   /* full state: names held and now dropped */
  size_t ngone;
  held **fresh;        /* new held entries, one per resource */
  mcp_map names;       /* name -> resource, to find duplicates */
  mcp_map next;        /* full state: the new held map */
  char *sysver, *nonce, *coll;
};

/* An answer's event, with the lists of the message answered (and, for the
 * ACK of full state, the names it dropped: still held by the caller). */
static void emit_msg(mcp_sink_state *st, mcp_event_type type,
                     const char *coll, const work *w, int code,
                     const char *msg) {
  if (!st->on_event) {
    return;
  }
  scoll *c = coll_of(st, coll);
  const envelope *env = &w->env;
  int ack = type == MCP_EVENT_ACK;
  mcp_event ev = {
      .type = type, .collection = coll, .nonce = w->nonce ? w->nonce : "",
      .version = ack && c->acked_version ? c->acked_version
                 : w->sysver                ? w->sysver
                                            : "",
      .code = code, .message = msg, .nresources = env->nres,
      .nremoved = env->nrem, .incremental = env->incremental,
      .held = c ? c->held.n : 0,
      .bytes = st->session ? st->session->recv_len : 0,
      .resources = w->res, .nlisted = w->res ? w->nlisted : 0,
      .removed = (const char *const *)w->rem,
      .nremoved_listed = w->rem ? w->nrem_listed : 0,
      .dropped = ack ? w->gone : NULL, .ndropped = ack ? w->ngone : 0,
      .synced = st->nsynced == st->ncolls};
  st->on_event(&ev, st->user_data);
}

/*
 * 1 when the collection would hold more than max_resources after the push
 * in |w| (|nfresh| of its resources are not held yet), 0 when not, NOMEM.
 */
static int over_limit(const mcp_sink_state *st, const scoll *c, const work *w,
                      size_t nfresh) {
  if (!w->env.incremental) {
    return w->env.nres > st->max_resources;
  }
  if (c->held.n + nfresh <= st->max_resources) {
    return 0; /* removals can only lower it */
  }
  /* Count the distinct held names removed; the list may repeat names. */
  mcp_map gone = {0};
  if (mcp_map_reserve(&gone, &st->mem, w->env.nrem) != 0) {
    return MCP_ERR_NOMEM;
  }
  for (size_t i = 0; i < w->env.nrem; ++i) {
    if (mcp_map_get(&c->held, w->rem[i])) {
      int err = 0;
      mcp_map_put(&gone, &st->mem, w->rem[i], NULL, &err);
    }
  }
  size_t after = c->held.n + nfresh - gone.n;
  mcp_map_free(&gone, &st->mem);
  return after > st->max_resources;
}

static void work_free(const mcp_mem *m, work *w) {
  for (size_t i = 0; w->rem && i < w->env.nrem; ++i) {
    mcp_mem_free(m, w->rem[i]);
  }
  for (size_t i = 0; w->fresh && i < w->env.nres; ++i) {
    mcp_mem_free(m, w->fresh[i]);
  }
  mcp_mem_free(m, w->res);
  mcp_mem_free(m, w->hidden);
  mcp_mem_free(m, w->arena);
  mcp_mem_free(m, w->rem);
  mcp_mem_free(m, w->gone);
  mcp_mem_free(m, w->fresh);
  mcp_map_free(&w->names, m);
  mcp_map_free(&w->next, m);
  mcp_mem_free(m, w->sysver);
  mcp_mem_free(m, w->nonce);
  mcp_mem_free(m, w->coll);
  mcp_mem_free(m, w->env.res);
  mcp_mem_free(m, w->env.rem);
  mcp_mem_free(m, w->env.scratch);
}


/* Marks resource |i| of |w| as one the event cannot list (it does not
 * decode, or a string is not UTF-8); 0 or NOMEM. */
static int hide(const mcp_mem *m, work *w, size_t i) {
  if (!w->hidden && !(w->hidden = mcp_mem_calloc(m, w->env.nres, 1))) {
    return MCP_ERR_NOMEM;
  }
  w->hidden[i] = 1;
  return 0;
}

/* The resources of a large push lie megabytes apart from their first
 * reading: each pass asks for the metadata of the one a few ahead. */
#define PREFETCH_AHEAD 8
static void prefetch_span(span sp) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(sp.p);
  if (sp.n > 64) {
    __builtin_prefetch(sp.p + 64);
  }
#else
  (void)sp;
#endif
}

/* An entry to hold: the name and version copied. NULL: NOMEM. */
static held *held_new(const mcp_mem *m, const char *name,
                      const char *version) {
  size_t nl = strlen(name) + 1, vl = strlen(version) + 1;
  held *h = mcp_mem_malloc(m, sizeof(held) + nl + vl);
  if (h) {
    memcpy(h->name, name, nl);
    memcpy(h->name + nl, version, vl);
    h->version = h->name + nl;
  }
  return h;
}

/*
 * Decodes and checks every resource. Returns 0, a NOMEM, or a positive
 * google.rpc code with |msg| filled for a NACK: the first problem, in
 * message order. A NACK still lists every resource that can be shown
 * (duplicates and resources that fail a check included), so that its event
 * gives what the message carried; only one that does not decode or holds
 * a string that is not UTF-8 is left out.
 */
static int validate(const mcp_sink_state *st, work *w, char *msg, size_t ml) {
  const mcp_mem *m = &st->mem;
  envelope *env = &w->env;
  int code = 0;
  /* The first problem names the NACK; the checks go on for the lists. */
#define NACK_(...)                      \
  do {                                  \
    if (!code) {                        \
      mcp_fmt(msg, ml, __VA_ARGS__);   \
      code = MCP_CODE_INVALID_ARGUMENT; \
    }                                   \
  } while (0)
  w->res = mcp_mem_calloc(m, env->nres ? env->nres : 1, sizeof(*w->res));
  w->rem = mcp_mem_calloc(m, env->nrem ? env->nrem : 1, sizeof(*w->rem));
  w->fresh = mcp_mem_calloc(m, env->nres ? env->nres : 1, sizeof(*w->fresh));
  /* Full state builds the new held map as it goes, and finds a name
   * listed twice there; incremental finds it in a map of the names. */
  if (!w->res || !w->rem || !w->fresh ||
      mcp_map_reserve(env->incremental ? &w->names : &w->next, m,
                      env->nres) != 0) {
    return MCP_ERR_NOMEM;
  }
  /* First pass: the wire structure, and what the views need. A resource
   * that does not decode is hidden from the lists. */
  size_t nkv = 0, bytes = 0;
  for (size_t i = 0; i < env->nres; ++i) {
    if (i + PREFETCH_AHEAD < env->nres) {
      prefetch_span(env->res[i + PREFETCH_AHEAD]);
    }
    rview r;
    memset(&r, 0, sizeof(r));
    if (mcp__resource_read(env->res[i], &r, NULL) != 0) {
      if (hide(m, w, i) != 0) {
        return MCP_ERR_NOMEM;
      }
      continue;
    }
    w->res[i].nlabels = r.nlabels;
    w->res[i].nannotations = r.nannotations;
    nkv += r.nlabels + r.nannotations;
    bytes += r.bytes;
  }
  size_t asize = nkv * sizeof(mcp_kv) + bytes;
  if (!(w->arena = mcp_mem_malloc(m, asize ? asize : 1))) {
    return MCP_ERR_NOMEM;
  }
  filler fl = {.lab = w->arena, .str = (char *)((mcp_kv *)w->arena + nkv)};
  /* The removed names, all of them first: a NACK's event lists them too.
   * Full state ignores them (they are only listed when UTF-8). */
  size_t bad_rem = env->nrem;
  for (size_t i = 0; i < env->nrem; ++i) {
    if (!span_valid(env->rem[i])) {
      if (env->incremental && bad_rem == env->nrem) {
        bad_rem = i;
      }
      continue;
    }
    if (!(w->rem[w->nrem_listed] = span_dup(m, env->rem[i]))) {
      return MCP_ERR_NOMEM;
    }
    w->nrem_listed++;
  }
  /* Second pass: the public views, each checked as it is built. */
  size_t nhidden = 0;
  for (size_t i = 0; i < env->nres; ++i) {
    mcp_resource *o = &w->res[i];
    if (i + PREFETCH_AHEAD < env->nres) {
      prefetch_span(env->res[i + PREFETCH_AHEAD]);
    }
    if (w->hidden && w->hidden[i]) {
      NACK_("resource %zu does not decode", i);
      nhidden++;
      continue;
    }
    rview r;
    memset(&r, 0, sizeof(r));
    o->labels = fl.lab;
    o->annotations = fl.ann = fl.lab + o->nlabels;
    fl.utf8_ok = 1;
    int rv = mcp__resource_read(env->res[i], &r, &fl);
    assert(rv == 0 && r.nlabels == o->nlabels &&
           r.nannotations == o->nannotations);
    (void)rv;
    fl.lab = fl.ann;
    if (!r.name.n || !r.name.p[0]) {
      NACK_("resource %zu has no name", i);
    }
    if (!fl.utf8_ok || !span_valid(r.name) || !span_valid(r.version)) {
      NACK_("resource %zu has a string that is not UTF-8", i);
      if (hide(m, w, i) != 0) {
        return MCP_ERR_NOMEM;
      }
      nhidden++; /* cannot be shown */
      continue;
    }
    o->name = fill_str(&fl, r.name);
    o->version = fill_str(&fl, r.version);
    if (!r.type_url.n || !span_valid(r.type_url)) {
      NACK_("resource %s has no body type", o->name);
      if (r.type_url.n) {
        if (hide(m, w, i) != 0) {
          return MCP_ERR_NOMEM;
        }
        nhidden++; /* not UTF-8: cannot be shown */
        continue;
      }
    }
    o->type_url = fill_str(&fl, r.type_url);
    o->has_create_time = r.has_ct;
    o->create_time_seconds = r.ct_seconds;
    o->create_time_nanos = r.ct_nanos;
    /* The rule sources check too (mcp_resource_check(): one home). */
    mcp_resource_limits lim = {st->name_rules, st->max_name, st->max_version,
                               st->max_metadata};
    if (mcp_resource_check(o, &lim, code ? NULL : msg, code ? 0 : ml) != 0 &&
        !code) {
      code = MCP_CODE_INVALID_ARGUMENT;
    }
    /* Into the received bytes: valid while the apply callback runs. */
    o->body = r.body.n ? r.body.p : NULL;
    o->body_len = r.body.n;
    int err = 0;
    void *twice;
    if (env->incremental) {
      twice = mcp_map_put(&w->names, m, o->name, o, &err);
    } else {
      if (!(w->fresh[i] = held_new(m, o->name, o->version))) {
        return MCP_ERR_NOMEM;
      }
      twice = mcp_map_put(&w->next, m, w->fresh[i]->name, w->fresh[i], &err);
    }
    if (twice) {
      NACK_("resource %s is listed twice", o->name);
    }
  }
  assert(fl.str <= (char *)w->arena + asize);
  /* The listed views, in order (only a NACK hides any: the names map's
   * pointers, which moving them breaks, are not used after one; the new
   * held map points at the entries, not at the views). */
  w->nlisted = env->nres - nhidden;
  for (size_t i = 0, j = 0; nhidden && i < env->nres; ++i) {
    if (!w->hidden[i]) {
      w->res[j++] = w->res[i];
    }
  }
  if (bad_rem < env->nrem) {
    NACK_("removed name %zu is not UTF-8", bad_rem);
  }
  if (env->incremental && !code) {
    for (size_t i = 0; i < env->nrem; ++i) {
      if (mcp_map_get(&w->names, w->rem[i])) {
        NACK_("resource %s is both updated and removed", w->rem[i]);
        break;
      }
    }
  }
  if (code) {
    return code;
  }
  /* Incremental: the entries the resources will be held as. */
  for (size_t i = 0; env->incremental && i < env->nres; ++i) {
    if (!(w->fresh[i] = held_new(m, w->res[i].name, w->res[i].version))) {
      return MCP_ERR_NOMEM;
    }
  }
#undef NACK_
  return 0;
}

static scoll *coll_of_span(const mcp_sink_state *st, span sp) {
  for (size_t i = 0; i < st->ncolls; ++i) {
    scoll *c = &st->colls[i];
    if (strlen(c->name) == sp.n && memcmp(c->name, sp.p, sp.n) == 0) {
      return c;
    }
  }
  return NULL;
}

/*
 * IncrementalAggregatedResources responses name no type. Our sources put it
 * in the nonce, "<number>:<type_url>"; any other nonce is the source's own
 * business and never a reason to NACK (docs/protocol.md). The type is, in
 * order: the nonce's, when in our form and requested or a type URL (then
 * an unrequested type: NACKed); the stream's only type; the body type of
 * the first resource (NACKed when not requested); else, with no resource,
 * the first type not answered yet on this stream, or the first type. A
 * response without nonce is left unattributed (NACKed as unrequested).
 */
static void attribute_type(const mcp_sink_session *s, envelope *env) {
  const mcp_sink_state *st = s->st;
  if (!env->nonce.n) {
    return; /* nothing to answer it with: NACKed as unrequested, as ever */
  }
  const uint8_t *colon = memchr(env->nonce.p, ':', env->nonce.n);
  if (colon && colon > env->nonce.p) {
    int digits = 1;
    for (const uint8_t *p = env->nonce.p; p < colon; ++p) {
      digits &= *p >= '0' && *p <= '9';
    }
    span t = {colon + 1, env->nonce.n - (size_t)(colon + 1 - env->nonce.p)};
    if (digits && (coll_of_span(st, t) || memchr(t.p, '/', t.n))) {
      env->collection = t;
      return;
    }
  }
  const scoll *c = st->ncolls == 1 ? &st->colls[0] : NULL;
  if (!c && env->nres) {
    rview r;
    memset(&r, 0, sizeof(r));
    if (mcp__resource_read(env->res[0], &r, NULL) == 0 && r.type_url.n &&
        span_valid(r.type_url)) {
      env->collection = r.type_url;
      return;
    }
    /* It does not decode (or has no usable type): the validation of
     * whichever type NACKs it. */
  }
  for (size_t i = 0; !c && i < st->ncolls; ++i) {
    if (!st->colls[i].answered) {
      c = &st->colls[i];
    }
  }
  if (!c) {
    c = &st->colls[0];
  }
  env->collection.p = (const uint8_t *)c->name;
  env->collection.n = strlen(c->name);
}

int mcp_sink_session_recv(mcp_sink_session *s, const uint8_t *in, size_t len,
                          mcp_tstamp ts) {
  mcp_iovec one = {in, len};
  return mcp_sink_session_recv_iov(s, &one, 1, ts);
}

int mcp_sink_session_recv_iov(mcp_sink_session *s, const mcp_iovec *iov,
                              size_t niov, mcp_tstamp ts) {
  mcp_sink_state *st = s->st;
  const mcp_mem *m = &st->mem;
  assert(ts >= s->last_ts && "time went backwards");
  s->last_ts = ts;
  work w;
  memset(&w, 0, sizeof(w));
  int rv = mcp__push_parse(m, st->service, iov, niov, &w.env);
  if (rv != 0) {
    return rv;
  }
  s->recv_len = w.env.len;
  envelope *env = &w.env;
  if (st->service == MCP_SERVICE_AGGREGATED_INCREMENTAL) {
    attribute_type(s, env);
  }
  if (!span_valid(env->sysver) || !span_valid(env->collection) ||
      !span_valid(env->nonce)) {
    rv = MCP_ERR_MALFORMED;
    goto out;
  }
  if (env->nonce.n > st->max_nonce) {
    /* Answering it would echo it, and the journal would keep it. */
    rv = MCP_ERR_PROTOCOL;
    goto out;
  }
  if (!(w.coll = span_dup(m, env->collection)) ||
      !(w.nonce = span_dup(m, env->nonce)) ||
      !(w.sysver = span_dup(m, env->sysver))) {
    rv = MCP_ERR_NOMEM;
    goto out;
  }
  scoll *c = coll_of(st, w.coll);
  if (!c) {
    /* Includes Istio's trigger: NACK it as Istio's sinks do. */
    rv = queue_foreign(s, env, &w);
    goto out;
  }
  if (!w.nonce[0]) {
    rv = MCP_ERR_PROTOCOL; /* nothing to ACK or NACK it with */
    goto out;
  }
  char msg[256] = "";
  int code = 0;
  c->pushes++;
  /* Validated even when refused for its flag, so that the NACK's event
   * lists what the message carried. */
  if ((code = validate(st, &w, msg, sizeof(msg))) < 0) {
    c->pushes--;
    rv = code;
    goto out;
  }
  if (env->incremental && !st->incremental) {
    code = MCP_CODE_INVALID_ARGUMENT;
    mcp_fmt(msg, sizeof(msg), "incremental push not requested");
  }
  /* Ready the answer and the new held set, so that nothing can fail once
   * the application has accepted the change. */
  char *ans_nonce = mcp_mem_strdup(m, w.nonce);
  if (!ans_nonce) {
    c->pushes--;
    rv = MCP_ERR_NOMEM;
    goto out;
  }
  size_t nfresh = 0;
  if (!code) {
    if (!env->incremental) {
      if (!(w.gone = mcp_mem_malloc(m, (c->held.n ? c->held.n : 1) * sizeof(char *)))) {
        rv = MCP_ERR_NOMEM;
      }
      void *v;
      for (size_t i = 0; rv == 0 && mcp_map_iter(&c->held, &i, &v);) {
        held *h = v;
        if (!mcp_map_get(&w.next, h->name)) {
          w.gone[w.ngone++] = h->name;
        }
      }
    } else {
      for (size_t i = 0; i < env->nres; ++i) {
        nfresh += !mcp_map_get(&c->held, w.res[i].name);
      }
      rv = mcp_map_reserve(&c->held, m, nfresh);
    }
    if (rv == 0) {
      rv = over_limit(st, c, &w, nfresh);
      if (rv > 0) {
        code = MCP_CODE_RESOURCE_EXHAUSTED;
        mcp_fmt(msg, sizeof(msg), "more than %zu resources in %s",
                 st->max_resources, c->name);
        rv = 0;
      }
    }
    if (rv != 0) {
      mcp_mem_free(m, ans_nonce);
      c->pushes--;
      goto out;
    }
  }
  if (!code) {
    mcp_change ch = {
        .collection = c->name, .system_version_info = w.sysver,
        .nonce = w.nonce, .incremental = env->incremental,
        .resources = w.res, .nresources = env->nres,
        .removed = env->incremental ? (const char *const *)w.rem : w.gone,
        .nremoved = env->incremental ? env->nrem : w.ngone,
        .complete = !env->incremental || c->held.n == 0};
    if (st->apply) {
      code = st->apply(&ch, msg, sizeof(msg), st->user_data);
      msg[sizeof(msg) - 1] = '\0';
      if (code < 0) {
        code = MCP_CODE_INTERNAL;
      }
    }
  }
  if (code) {
    char *cm = mcp_mem_strdup(m, msg), *am = mcp_mem_strdup(m, msg);
    if (!cm || !am) {
      mcp_mem_free(m, cm);
      mcp_mem_free(m, am);
      mcp_mem_free(m, ans_nonce);
      c->pushes--;
      rv = MCP_ERR_NOMEM;
      goto out;
    }
    answer_clear(m, c);
    c->out |= OUT_ANSWER;
    c->ans_nonce = ans_nonce;
    c->ans_code = code;
    c->ans_msg = am;
    mcp_mem_free(m, c->nack_msg);
    c->nack_msg = cm;
    c->nack_code = code;
    c->nacks++;
    c->answered = 1;
    emit_msg(st, MCP_EVENT_NACK, c->name, &w, code, msg);
    mcp_mem_free(m, c->last_nonce);
    c->last_nonce = w.nonce; /* taken from the work: nothing can fail */
    w.nonce = NULL;
    goto out;
  }
  /* Accepted: apply. Nothing below fails. */
  int err = 0;
  mcp_map old = {0}; /* full state: what was held, until the event (gone) */
  if (!env->incremental) {
    for (size_t i = 0; i < env->nres; ++i) {
      w.fresh[i] = NULL; /* the new held map has them */
    }
    old = c->held;
    c->held = w.next;
    memset(&w.next, 0, sizeof(w.next));
  } else {
    for (size_t i = 0; i < env->nrem; ++i) {
      mcp_mem_free(m, mcp_map_del(&c->held, w.rem[i]));
    }
    for (size_t i = 0; i < env->nres; ++i) {
      mcp_mem_free(m, mcp_map_put(&c->held, m, w.fresh[i]->name, w.fresh[i], &err));
      w.fresh[i] = NULL;
    }
  }
  mcp_mem_free(m, c->acked_version);
  c->acked_version = w.sysver;
  w.sysver = NULL;
  answer_clear(m, c);
  c->out |= OUT_ANSWER;
  c->ans_nonce = ans_nonce;
  c->ans_code = 0;
  c->acks++;
  c->answered = 1;
  if (!c->synced) {
    c->synced = 1;
    st->nsynced++;
  }
  emit_msg(st, MCP_EVENT_ACK, c->name, &w, 0, "");
  held_free_all(&old, m);
  mcp_mem_free(m, c->last_nonce);
  c->last_nonce = w.nonce;
  w.nonce = NULL;
out:
  work_free(m, &w);
  return rv;
}

/* ---- sending requests ---- */

int mcp_sink_session_want_write(const mcp_sink_session *s) {
  if (s->nq) {
    return 1;
  }
  for (size_t i = 0; i < s->st->ncolls; ++i) {
    if (s->st->colls[i].out) {
      return 1;
    }
  }
  return 0;
}

static int journal_add(mcp_sink_state *st, mcp_tstamp ts, const char *coll,
                       const char *nonce, int kind, int code, const char *msg,
                       size_t ninitial) {
  if (!st->jcap) {
    return 0;
  }
  char *c = mcp_mem_strdup(&st->mem, coll);
  char *m = mcp_mem_strdup(&st->mem, msg ? msg : "");
  char *n = mcp_mem_strdup(&st->mem, nonce);
  if (!c || !m || !n) {
    mcp_mem_free(&st->mem, c);
    mcp_mem_free(&st->mem, m);
    mcp_mem_free(&st->mem, n);
    return MCP_ERR_NOMEM;
  }
  jent *j = &st->journal[(st->jhead + st->jcount) % st->jcap];
  if (st->jcount == st->jcap) {
    st->jhead = (st->jhead + 1) % st->jcap;
  } else {
    st->jcount++;
  }
  jent_clear(&st->mem, j);
  j->ts = ts;
  j->collection = c;
  j->message = m;
  j->nonce = n;
  j->kind = kind;
  j->code = code;
  j->ninitial = ninitial;
  return 0;
}

int mcp_sink_session_next(mcp_sink_session *s, mcp_msg **pmsg) {
  mcp_sink_state *st = s->st;
  const mcp_mem *m = &st->mem;
  const mcp_request_out ro = {m, st->service, st->incremental, st->node_enc,
                              st->node_enc_len};
  int rv;
  if (s->nq) {
    foreign *f = &s->q[0];
    const char *msg = "unsupported collection";
    mcp_msg *out = NULL;
    if ((rv = mcp__request_encode(&ro, f->collection, f->nonce, MCP_CODE_UNIMPLEMENTED,
                             msg, NULL, "", &out)) != 0 ||
        (rv = journal_add(st, s->last_ts, f->collection, f->nonce,
                          MCP_EVENT_NACK, MCP_CODE_UNIMPLEMENTED, msg, 0)) != 0) {
      mcp_msg_free(out);
      return rv;
    }
    *pmsg = out;
    mcp_mem_free(m, f->collection);
    mcp_mem_free(m, f->nonce);
    memmove(&s->q[0], &s->q[1], --s->nq * sizeof(foreign));
    if (!s->nq) {
      mcp_mem_free(m, s->q);
      s->q = NULL;
    }
    return 1;
  }
  for (size_t k = 0; k < st->ncolls; ++k) {
    size_t i = (s->rr + k) % st->ncolls;
    scoll *c = &st->colls[i];
    if (!c->out) {
      continue;
    }
    mcp_msg *msg = NULL;
    if (c->out & OUT_INITIAL) {
      const mcp_map *init = mcp__request_has_initial(st->service) && st->incremental
                                ? &c->held : NULL;
      const char *ver = c->acked_version ? c->acked_version : "";
      if ((rv = mcp__request_encode(&ro, c->name, "", 0, "", init, ver, &msg)) != 0 ||
          (rv = journal_add(st, s->last_ts, c->name, "", MCP_EVENT_REQUEST, 0,
                            "", init ? init->n : 0)) != 0) {
        mcp_msg_free(msg);
        return rv;
      }
      c->out &= (uint8_t)~OUT_INITIAL;
    } else {
      const char *am = c->ans_msg ? c->ans_msg : "";
      const char *ver = c->acked_version ? c->acked_version : "";
      if ((rv = mcp__request_encode(&ro, c->name, c->ans_nonce, c->ans_code, am,
                               NULL, ver, &msg)) != 0 ||
          (rv = journal_add(st, s->last_ts, c->name, c->ans_nonce,
                            c->ans_code ? MCP_EVENT_NACK : MCP_EVENT_ACK,
                            c->ans_code, am, 0)) != 0) {
        mcp_msg_free(msg);
        return rv;
      }
      answer_clear(m, c);
    }
    s->rr = i + 1;
    *pmsg = msg;
    return 1;
  }
  return 0;
}

/* ---- introspection ---- */

size_t mcp_sink_state_collection_count(const mcp_sink_state *st) {
  return st->ncolls;
}

static int state_collection_status(const mcp_sink_state *st, size_t i,
                                   mcp_tstamp ts, mcp_collection_status *out);

int mcp_sink_state_collection_status_versioned(const mcp_sink_state *st,
                                               size_t i, mcp_tstamp ts,
                                               int version,
                                               mcp_collection_status *out) {
  mcp_collection_status full;
  int rv = state_collection_status(st, i, ts, &full);
  if (rv == 0) {
    memcpy(out, &full,
           mcp_vstruct_size(version, MCP__STATUS_SIZES, MCP__STATUS_N));
  }
  return rv;
}

static int state_collection_status(const mcp_sink_state *st, size_t i,
                                   mcp_tstamp ts, mcp_collection_status *out) {
  (void)ts;
  if (i >= st->ncolls) {
    return MCP_ERR_NOT_FOUND;
  }
  const scoll *c = &st->colls[i];
  memset(out, 0, sizeof(*out));
  out->collection = c->name;
  out->known = 1;
  out->incremental = st->incremental;
  out->acked_version = c->acked_version ? c->acked_version : "";
  out->pending_version = ""; /* a sink has no push in flight */
  out->pending_nonce = "";
  out->last_nonce = c->last_nonce ? c->last_nonce : "";
  out->last_nack_code = c->nack_code;
  out->last_nack_message = c->nack_msg ? c->nack_msg : "";
  out->pushes = c->pushes;
  out->acks = c->acks;
  out->nacks = c->nacks;
  out->held = c->held.n;
  return 0;
}

size_t mcp_sink_state_journal_count(const mcp_sink_state *st) {
  return st->jcount;
}

static int journal_entry(const mcp_sink_state *st, size_t i,
                         mcp_journal_entry *e);

int mcp_sink_state_journal_entry_versioned(const mcp_sink_state *st, size_t i,
                                           int version, mcp_journal_entry *out) {
  mcp_journal_entry e;
  int rv = journal_entry(st, i, &e);
  if (rv == 0) {
    memcpy(out, &e,
           mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_journal_entry), MCP_VSTRUCT_N));
  }
  return rv;
}

static int journal_entry(const mcp_sink_state *st, size_t i,
                         mcp_journal_entry *e) {
  if (i >= st->jcount) {
    return MCP_ERR_NOT_FOUND;
  }
  const jent *j = &st->journal[(st->jhead + i) % st->jcap];
  memset(e, 0, sizeof(*e));
  e->ts = j->ts;
  e->collection = j->collection;
  e->nonce = j->nonce;
  e->kind = j->kind;
  e->code = j->code;
  e->message = j->message;
  e->ninitial = j->ninitial;
  return 0;
}
