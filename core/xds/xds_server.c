/*
 * The xDS server (mcp/xds.h): one session per ADS call, state of the world
 * or delta, behind the stream driver. Each subscribed type is a watch on
 * its collection (mcp_collection_for_gvk()); responses are framed around
 * the store's shared Resource bytes (xds_resource.c). The rules are in
 * mcp/xds.h, mcp_xds_server_open().
 *
 * What a stream remembers per type: the subscription (wildcard or names),
 * the watch's generation (SotW resends the whole set from the store; delta
 * sends the watch's difference), the nonce in flight and the versions sent
 * and ACKed. No copy of what the client holds: a delta client's
 * initial_resource_versions are kept only until the first response is
 * built.
 */
#include <assert.h>

#include "xds_int.h"

struct mcp_xds_server {
  mcp_mem mem;
  const mcp_store *store;
  mcp_tstamp debounce, max_delay;
  char *require;
  mcp_xds_event_fn on_event;
  void *user_data;
  mcp_service_def defs[2];
  /* Per collection, its whole state framed once for SotW wildcard
   * responses (mcp__xds_snap()), at the generation it was built; let go
   * when no SotW stream watches the collection any more (|users|), so
   * that replaced Resources are not held for streams that left. */
  struct xds_snap_cache {
    char *coll;
    mcp_snap *sn;
    uint64_t gen;  /* the watch's generation it was built at */
    size_t count;  /* resources in it */
    size_t users;
  } *snaps;
  size_t nsnaps;
  struct xds_open_ctx {
    mcp_xds_server *srv;
    int delta;
  } ctx[2];
  mcp_xds_server_stats st;
};

/* One type_url of a stream. */
typedef struct xtype {
  char *type_url;
  char *coll;     /* NULL: unknown type */
  mcp_watch *w;   /* NULL: unknown type */
  size_t snap;    /* SotW: 1 + its server's snaps[] entry, or 0 */
  int wildcard;
  int mesh;       /* MCP_XDS_MESH_TYPE: bodies sent as they are */
  mcp_map names;  /* subscribed xDS names; key and value: one allocation */
  mcp_map fresh;  /* delta: names subscribed since the last response */
  mcp_map initial; /* delta: "name\0version" blocks until the first answer */
  int want;       /* a response is owed whatever changed */
  int answered;   /* the first response went out */
  int held;       /* delta: the client may hold resources of this type */
  int pending;    /* a response is in flight */
  char pending_nonce[24];
  char version_sent[48], version_acked[48];
  uint64_t nacks;
  char *last_nack;
} xtype;

typedef struct xsess {
  mcp_xds_server *srv;
  int delta;
  int end;        /* end() says so with status/details */
  int status;
  const char *details;
  char *node_id;
  mcp_kv *meta;
  size_t nmeta;
  xtype **types;
  size_t ntypes;
  mcp_map by_url; /* type_url -> xtype */
  size_t rr;      /* where next() starts looking (fairness) */
  uint64_t nonce;
  mcp_msg_builder *b;
  mcp_buf scratch;
  uint64_t responses, acks, nacks, stale;
  /* The response being built. */
  xtype *cur;
  size_t count;
  int failed;
} xsess;

static const mcp_stream_ops server_ops;

/* ---- options and server ---- */

static void options_default(mcp_xds_server_options *o) {
  memset(o, 0, sizeof(*o));
}

void mcp_xds_server_options_default_versioned(int version,
                                              mcp_xds_server_options *opts) {
  mcp_xds_server_options o;
  options_default(&o);
  memcpy(opts, &o,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_xds_server_options),
                           MCP_VSTRUCT_N));
}

int mcp_xds_identity_match(const char *pat, const char *s) {
  /* Glob with '*' only, iterative with one backtrack point. */
  const char *star = NULL, *mark = NULL;
  while (*s) {
    if (*pat == '*') {
      star = pat++;
      mark = s;
    } else if (*pat == *s) {
      pat++;
      s++;
    } else if (star) {
      pat = star + 1;
      s = ++mark;
    } else {
      return 0;
    }
  }
  while (*pat == '*') {
    pat++;
  }
  return *pat == '\0';
}

static int open_fn(void *user_data, const mcp_peer_info *peer, mcp_tstamp ts,
                   mcp_stream **pst) {
  struct xds_open_ctx *c = user_data;
  return mcp_xds_server_open(c->srv, c->delta, peer, ts, pst);
}

int mcp_xds_server_new_versioned(mcp_xds_server **psrv, int version,
                                 const mcp_xds_server_options *opts) {
  mcp_xds_server_options o;
  if (!psrv || !opts || !mcp_vstruct_known(version, MCP_VSTRUCT_N)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  options_default(&o);
  memcpy(&o, opts,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_xds_server_options),
                           MCP_VSTRUCT_N));
  if (!o.store || (o.require_identity && !o.require_identity[0])) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  mcp_mem m;
  mcp_mem_init(&m, o.mem);
  mcp_xds_server *srv = mcp_mem_calloc(&m, 1, sizeof(*srv));
  if (!srv) {
    return MCP_ERR_NOMEM;
  }
  srv->mem = m;
  if (o.require_identity &&
      !(srv->require = mcp_mem_strdup(&m, o.require_identity))) {
    mcp_mem_free(&m, srv);
    return MCP_ERR_NOMEM;
  }
  srv->store = o.store;
  srv->debounce = o.debounce;
  srv->max_delay = o.max_delay ? o.max_delay
                               : mcp_watch_default_max_delay(o.debounce);
  srv->on_event = o.on_event;
  srv->user_data = o.user_data;
  for (int i = 0; i < 2; i++) {
    srv->ctx[i].srv = srv;
    srv->ctx[i].delta = i;
    srv->defs[i].method = i ? MCP_XDS_METHOD_DELTA : MCP_XDS_METHOD_SOTW;
    srv->defs[i].open = open_fn;
    srv->defs[i].user_data = &srv->ctx[i];
    /* The first answers are the whole state of each type asked for: a
     * listening transport's admission holds an initial-sync slot for them,
     * as for MCP's sources (sess_initial_sent()). */
    srv->defs[i].flags = MCP_DEF_INITIAL_SYNC;
  }
  *psrv = srv;
  return 0;
}

void mcp_xds_server_del(mcp_xds_server *srv) {
  if (!srv) {
    return;
  }
  assert(srv->st.active == 0);
  mcp_mem m = srv->mem;
  for (size_t i = 0; i < srv->nsnaps; ++i) {
    mcp_snap_unref(srv->snaps[i].sn);
    mcp_mem_free(&m, srv->snaps[i].coll);
  }
  mcp_mem_free(&m, srv->snaps);
  mcp_mem_free(&m, srv->require);
  mcp_mem_free(&m, srv);
}

size_t mcp_xds_server_services(const mcp_xds_server *srv,
                               const mcp_service_def **defs) {
  *defs = srv->defs;
  return 2;
}

void mcp_xds_server_get_stats_versioned(const mcp_xds_server *srv,
                                        int version,
                                        mcp_xds_server_stats *st) {
  memcpy(st, &srv->st,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_xds_server_stats),
                           MCP_VSTRUCT_N));
}

static void emit(xsess *s, mcp_xds_event_kind kind, const xtype *t,
                 const char *nonce, int code, const char *message) {
  if (!s->srv->on_event) {
    return;
  }
  mcp_xds_event ev = {
      .kind = kind,
      .delta = s->delta,
      .node_id = s->node_id ? s->node_id : "",
      .type_url = t ? t->type_url : NULL,
      .version = t ? t->version_sent : NULL,
      .nonce = nonce,
      .code = code,
      .message = message,
  };
  s->srv->on_event(&ev, s->srv->user_data);
}

int mcp_xds_server_open(mcp_xds_server *srv, int delta,
                        const mcp_peer_info *peer, mcp_tstamp ts,
                        mcp_stream **pst) {
  const mcp_mem *m = &srv->mem;
  xsess *s = mcp_mem_calloc(m, 1, sizeof(*s));
  if (!s) {
    return MCP_ERR_NOMEM;
  }
  s->srv = srv;
  s->scratch.mem = m;
  s->delta = delta != 0;
  srv->st.active++; /* del() counts it down, also when this fails */
  if (mcp_msg_builder_new(&s->b, m) != 0) {
    server_ops.del(s);
    return MCP_ERR_NOMEM;
  }
  if (srv->require) {
    int ok = 0;
    for (size_t i = 0; peer && i < peer->nidentities && !ok; ++i) {
      ok = peer->identities[i] &&
           mcp_xds_identity_match(srv->require, peer->identities[i]);
    }
    if (!ok) {
      s->end = 1;
      s->status = 7; /* PERMISSION_DENIED */
      s->details = "xDS needs a verified control-plane identity "
                   "(--xds-require-identity)";
      srv->st.refused++;
      emit(s, MCP_XDS_EVENT_REFUSED, NULL, NULL, 0, s->details);
    }
  }
  /* Frees s on error; sets *pst only on success. */
  int rv = mcp_stream_new(pst, &server_ops, s, m, ts);
  if (rv == 0) {
    srv->st.streams++;
  }
  return rv;
}

int mcp_xds_stream_is(const mcp_stream *st) {
  return st && mcp_stream_get_ops(st) == &server_ops;
}

void mcp_xds_stream_info_get(const mcp_stream *st, mcp_xds_stream_info *info) {
  assert(mcp_xds_stream_is(st));
  const xsess *s = mcp_stream_session(st);
  memset(info, 0, sizeof(*info));
  info->delta = s->delta;
  info->node_id = s->node_id ? s->node_id : "";
  info->node_metadata = s->meta;
  info->nnode_metadata = s->nmeta;
  info->ntypes = s->ntypes;
  info->responses = s->responses;
  info->acks = s->acks;
  info->nacks = s->nacks;
  info->stale = s->stale;
}

int mcp_xds_stream_type_get(const mcp_stream *st, size_t i,
                            mcp_xds_type_info *info) {
  assert(mcp_xds_stream_is(st));
  const xsess *s = mcp_stream_session(st);
  if (i >= s->ntypes) {
    return MCP_ERR_NOT_FOUND;
  }
  const xtype *t = s->types[i];
  memset(info, 0, sizeof(*info));
  info->type_url = t->type_url;
  info->collection = t->coll;
  info->version_sent = t->version_sent;
  info->version_acked = t->version_acked;
  info->pending_nonce = t->pending ? t->pending_nonce : "";
  info->nacks = t->nacks;
  info->last_nack = t->last_nack ? t->last_nack : "";
  info->wildcard = t->wildcard;
  info->nnames = t->names.n;
  return 0;
}

/* ---- names ---- */

static void names_clear(mcp_map *mp, const mcp_mem *m) {
  void *v;
  for (size_t i = 0; mcp_map_iter(mp, &i, &v);) {
    mcp_mem_free(m, v);
  }
  mcp_map_free(mp, m);
  memset(mp, 0, sizeof(*mp));
}

/* Adds |n| (a copy) to |mp| unless there. */
static int names_add(mcp_map *mp, const mcp_mem *m, const xds_str *n) {
  if (mcp_map_get_n(mp, n->p, n->n)) {
    return 0;
  }
  char *k = mcp_mem_strndup(m, n->p, n->n);
  int err = 0;
  if (!k || mcp_map_reserve(mp, m, 1) != 0) {
    mcp_mem_free(m, k);
    return MCP_ERR_NOMEM;
  }
  mcp_map_put(mp, m, k, k, &err);
  return 0;
}

static void names_del(mcp_map *mp, const mcp_mem *m, const char *key) {
  void *v = mcp_map_del(mp, key);
  mcp_mem_free(m, v);
}

static int is_star(const xds_str *n) { return n->n == 1 && n->p[0] == '*'; }

/* The xDS name of |store_name| in the session's scratch buffer. */
static const char *xname(xsess *s, const char *store_name) {
  size_t n = mcp__xds_name(store_name, NULL, 0);
  s->scratch.len = 0;
  if (mcp_buf_reserve(&s->scratch, n + 1) != 0) {
    return NULL;
  }
  mcp__xds_name(store_name, (char *)s->scratch.p, n + 1);
  return (const char *)s->scratch.p;
}

static int subscribed(const xtype *t, const char *xn) {
  return t->wildcard || mcp_map_get(&t->names, xn) != NULL;
}

/* SotW: the request's resource_names replace the subscription. Sets
 * |*changed|. */
static int sotw_names(xsess *s, xtype *t, const xds_request *rq,
                      int *changed) {
  const mcp_mem *m = &s->srv->mem;
  mcp_map nm = {0};
  for (size_t i = 0; i < rq->nnames; ++i) {
    if (names_add(&nm, m, &rq->names[i]) < 0) {
      names_clear(&nm, m);
      return MCP_ERR_NOMEM;
    }
  }
  int wildcard = rq->nnames == 0;
  int same = wildcard == t->wildcard && nm.n == t->names.n;
  void *v;
  for (size_t i = 0; same && mcp_map_iter(&nm, &i, &v);) {
    same = mcp_map_get(&t->names, v) != NULL;
  }
  names_clear(&t->names, m);
  t->names = nm;
  t->wildcard = wildcard;
  *changed = !same;
  return 0;
}

/* Delta: subscribe and unsubscribe. |first|: the type's first request
 * (no names, or "*", is the wildcard). */
static int delta_names(xsess *s, xtype *t, const xds_request *rq,
                       int first) {
  const mcp_mem *m = &s->srv->mem;
  if (first && rq->nnames == 0) {
    t->wildcard = 1;
  }
  for (size_t i = 0; i < rq->nnames; ++i) {
    const xds_str *n = &rq->names[i];
    if (is_star(n)) {
      t->wildcard = 1;
      continue;
    }
    if (!mcp_map_get_n(&t->names, n->p, n->n)) {
      if (names_add(&t->names, m, n) < 0 ||
          (!first && !t->wildcard && names_add(&t->fresh, m, n) < 0)) {
        return MCP_ERR_NOMEM;
      }
    }
  }
  for (size_t i = 0; i < rq->nunsub; ++i) {
    const xds_str *n = &rq->unsub[i];
    if (is_star(n)) {
      t->wildcard = 0;
      continue;
    }
    char *k = mcp_map_get_n(&t->names, n->p, n->n);
    if (k) {
      char *f = mcp_map_del(&t->fresh, k);
      mcp_mem_free(m, f);
      names_del(&t->names, m, k);
    }
  }
  return 0;
}

static int delta_initial(xsess *s, xtype *t, const xds_request *rq) {
  const mcp_mem *m = &s->srv->mem;
  for (size_t i = 0; i < rq->niv; ++i) {
    const xds_str *n = &rq->iv_name[i], *v = &rq->iv_version[i];
    if (n->n == 0 || mcp_map_get_n(&t->initial, n->p, n->n)) {
      continue;
    }
    char *blk = mcp_mem_malloc(m, n->n + v->n + 2);
    if (!blk || mcp_map_reserve(&t->initial, m, 1) != 0) {
      mcp_mem_free(m, blk);
      return MCP_ERR_NOMEM;
    }
    memcpy(blk, n->p, n->n);
    blk[n->n] = '\0';
    memcpy(blk + n->n + 1, v->p, v->n);
    blk[n->n + 1 + v->n] = '\0';
    int err = 0;
    mcp_map_put(&t->initial, m, blk, blk, &err);
  }
  return 0;
}

/* ---- types ---- */

static void type_free(mcp_xds_server *srv, xtype *t) {
  const mcp_mem *m = &srv->mem;
  if (!t) {
    return;
  }
  if (t->snap && --srv->snaps[t->snap - 1].users == 0) {
    mcp_snap_unref(srv->snaps[t->snap - 1].sn);
    srv->snaps[t->snap - 1].sn = NULL;
  }
  mcp_watch_del(t->w);
  names_clear(&t->names, m);
  names_clear(&t->fresh, m);
  names_clear(&t->initial, m);
  mcp_mem_free(m, t->last_nack);
  mcp_mem_free(m, t->coll);
  mcp_mem_free(m, t->type_url);
  mcp_mem_free(m, t);
}

/* Counts |t| (SotW, a collection) as a user of its collection's entry in
 * the server's snapshot cache, added if new. */
static int snap_use(mcp_xds_server *srv, xtype *t) {
  size_t i = 0;
  while (i < srv->nsnaps && strcmp(srv->snaps[i].coll, t->coll) != 0) {
    ++i;
  }
  if (i == srv->nsnaps) {
    struct xds_snap_cache *n =
        mcp_mem_realloc(&srv->mem, srv->snaps, (srv->nsnaps + 1) * sizeof(*n));
    if (!n) {
      return MCP_ERR_NOMEM;
    }
    srv->snaps = n;
    if (!(n[i].coll = mcp_mem_strdup(&srv->mem, t->coll))) {
      return MCP_ERR_NOMEM;
    }
    n[i].sn = NULL;
    n[i].users = 0;
    srv->nsnaps++;
  }
  srv->snaps[i].users++;
  t->snap = i + 1;
  return 0;
}

static int type_new(xsess *s, const xds_str *url, xtype **pt) {
  const mcp_mem *m = &s->srv->mem;
  if (s->ntypes >= MCP_XDS_MAX_TYPES) {
    return MCP_ERR_LIMIT;
  }
  xtype *t = mcp_mem_calloc(m, 1, sizeof(*t));
  xtype **nt = t ? mcp_mem_realloc(m, s->types, (s->ntypes + 1) * sizeof(*nt))
                 : NULL;
  if (!nt) {
    mcp_mem_free(m, t);
    return MCP_ERR_NOMEM;
  }
  s->types = nt;
  if (!(t->type_url = mcp_mem_strndup(m, url->p, url->n)) ||
      mcp_map_reserve(&s->by_url, m, 1) != 0) {
    type_free(s->srv, t);
    return MCP_ERR_NOMEM;
  }
  t->mesh = strcmp(t->type_url, MCP_XDS_MESH_TYPE) == 0;
  int n = mcp_collection_for_gvk(t->type_url, NULL, 0);
  if (n >= 0) {
    mcp_watch_options wo = {s->srv->debounce, s->srv->max_delay};
    if (!(t->coll = mcp_mem_malloc(m, (size_t)n + 1)) ||
        (mcp_collection_for_gvk(t->type_url, t->coll, (size_t)n + 1),
         mcp_watch_new(&t->w, s->srv->store, t->coll, &wo, m) != 0) ||
        (!s->delta && snap_use(s->srv, t) != 0)) {
      type_free(s->srv, t);
      return MCP_ERR_NOMEM;
    }
  }
  int err = 0;
  mcp_map_put(&s->by_url, m, t->type_url, t, &err);
  s->types[s->ntypes++] = t;
  if (!t->coll) {
    s->srv->st.unknown_types++;
    emit(s, MCP_XDS_EVENT_UNKNOWN_TYPE, t, NULL, 0,
         "not GROUP/VERSION/KIND: answered empty");
  }
  *pt = t;
  return 0;
}

/* ---- receiving ---- */

static void refuse(xsess *s, const char *why) {
  s->end = 1;
  s->status = 3; /* INVALID_ARGUMENT */
  s->details = why;
  s->srv->st.invalid++;
}

static int on_request(xsess *s, const xds_request *rq) {
  const mcp_mem *m = &s->srv->mem;
  int rv;
  if (rq->node && !s->node_id) {
    rv = mcp__xds_node_decode(rq->node, rq->node_len, m, &s->node_id,
                              &s->meta, &s->nmeta);
    if (rv == MCP_ERR_MALFORMED) {
      refuse(s, "the node does not decode, or its id is not UTF-8");
      return 0;
    }
    if (rv < 0) {
      return rv;
    }
  }
  xtype *t = mcp_map_get_n(&s->by_url, rq->type_url.p, rq->type_url.n);
  if (!t) {
    /* The first request of a type: answered whatever its nonce says. */
    if ((rv = type_new(s, &rq->type_url, &t)) < 0) {
      return rv;
    }
    t->want = 1;
    if (!s->delta) {
      int changed;
      return sotw_names(s, t, rq, &changed);
    }
    if ((rv = delta_names(s, t, rq, 1)) < 0) {
      return rv;
    }
    return delta_initial(s, t, rq);
  }
  const xds_str *nonce = &rq->nonce;
  if (nonce->n == 0) {
    /* A new subscription of a known type (the client dropped what it
     * had, or changes its names): full state again. What was in flight
     * is superseded. */
    t->pending = 0;
    t->want = 1;
    if (!s->delta) {
      int changed;
      return sotw_names(s, t, rq, &changed);
    }
    return delta_names(s, t, rq, 0);
  }
  if (!t->pending || nonce->n != strlen(t->pending_nonce) ||
      memcmp(nonce->p, t->pending_nonce, nonce->n) != 0) {
    s->stale++;
    s->srv->st.stale++;
    char nb[MCP_XDS_MAX_STRING + 1];
    memcpy(nb, nonce->p, nonce->n);
    nb[nonce->n] = '\0';
    emit(s, MCP_XDS_EVENT_STALE, t, nb, 0, "");
    /* Delta subscriptions are not answers: they hold whatever the nonce. */
    return s->delta ? delta_names(s, t, rq, 0) : 0;
  }
  t->pending = 0;
  if (rq->has_error) {
    t->nacks++;
    s->nacks++;
    s->srv->st.nacks++;
    char *msg = mcp_mem_strndup(m, rq->error_message.p, rq->error_message.n);
    if (!msg) {
      return MCP_ERR_NOMEM;
    }
    mcp_mem_free(m, t->last_nack);
    t->last_nack = msg;
    emit(s, MCP_XDS_EVENT_NACK, t, t->pending_nonce, rq->error_code, msg);
    /* The watch already moved past what was rejected: nothing is re-sent
     * until the collection changes again. */
  } else {
    s->acks++;
    s->srv->st.acks++;
    memcpy(t->version_acked, t->version_sent, sizeof(t->version_acked));
  }
  if (!s->delta) {
    int changed;
    if ((rv = sotw_names(s, t, rq, &changed)) < 0) {
      return rv;
    }
    t->want |= changed;
    return 0;
  }
  return delta_names(s, t, rq, 0);
}

static int sess_recv(void *sess, const uint8_t *in, size_t len,
                     mcp_tstamp ts) {
  xsess *s = sess;
  MCP_UNUSED(ts);
  if (s->end) {
    return 0; /* refused: nothing read */
  }
  xds_request rq;
  const char *why = "";
  int rv = mcp__xds_request_decode(&rq, s->delta, in, len, &s->srv->mem, &why);
  if (rv == MCP_ERR_MALFORMED || rv == MCP_ERR_INVALID_ARGUMENT) {
    refuse(s, why);
    return 0;
  }
  if (rv < 0) {
    return rv;
  }
  rv = on_request(s, &rq);
  mcp__xds_request_free(&rq, &s->srv->mem);
  return rv;
}

/* ---- responses ---- */

static void start(xsess *s, xtype *t) {
  s->cur = t;
  s->count = 0;
  s->failed = 0;
}

static int put_item(xsess *s, const mcp_item *it) {
  if (mcp__xds_put_resource(s->b, 2, s->delta, s->cur->mesh, it) < 0) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  s->count++;
  s->cur->held |= s->delta;
  return 0;
}

/* The live item whose xDS name (mcp__xds_name()) is |xn|: a bare store
 * name is "/name" here, and a name without '/' is no store's. */
static int get_xname(const xtype *t, const char *xn, mcp_item *it) {
  const char *slash = strchr(xn, '/');
  return slash && ((slash == xn && !strchr(xn + 1, '/') &&
                    mcp_watch_get(t->w, xn + 1, it)) ||
                   mcp_watch_get(t->w, xn, it));
}

/* SotW by names: each subscribed name looked up, O(names) and not
 * O(collection) per response. */
static int put_named(xsess *s, xtype *t) {
  void *v;
  int rv = 0;
  for (size_t i = 0; rv == 0 && mcp_map_iter(&t->names, &i, &v);) {
    mcp_item it;
    if (get_xname(t, v, &it)) {
      rv = put_item(s, &it);
    }
  }
  return rv;
}

static void put_removed(xsess *s, const char *xn) {
  mcp_msg_builder_len_field(s->b, 6, xn, strlen(xn));
  s->count++;
}

/* One item for the response, if the client subscribes to it. Delta's
 * first response (|first|): what the client lacks or holds in another
 * version; initial names then left are gone. Later ones: the changes. */
static int send_item(const mcp_item *it, xsess *s, int first) {
  xtype *t = s->cur;
  const char *xn = xname(s, it->name);
  if (!xn) {
    return MCP_ERR_NOMEM;
  }
  if (!subscribed(t, xn)) {
    return 0;
  }
  if (first) {
    char *held = mcp_map_del(&t->initial, xn);
    if (held) {
      int same = strcmp(held + strlen(held) + 1, it->version) == 0;
      mcp_mem_free(&s->srv->mem, held);
      t->held = 1;
      if (same) {
        return 0;
      }
    }
  } else {
    if (t->fresh.n) {
      names_del(&t->fresh, &s->srv->mem, xn); /* sent here */
    }
    if (it->removed) {
      put_removed(s, xn);
      return 0;
    }
  }
  return put_item(s, it);
}

static int first_fn(const mcp_item *it, void *ud) {
  return send_item(it, ud, 1);
}

static int diff_fn(const mcp_item *it, void *ud) {
  return send_item(it, ud, 0);
}

/* The version of what |t|'s watch took. */
static void version_of(xsess *s, xtype *t, char *buf, size_t n) {
  mcp_format_version(buf, n, mcp_store_epoch(s->srv->store),
                      t->w ? mcp_watch_generation(t->w) : 0);
}

static int finish(xsess *s, xtype *t, mcp_tstamp ts, mcp_msg **pmsg) {
  MCP_UNUSED(ts);
  char ver[48], nonce[24];
  version_of(s, t, ver, sizeof(ver));
  mcp_fmt(nonce, sizeof(nonce), "%zu", (size_t)++s->nonce);
  /* SotW: version_info = 1, type_url = 4, nonce = 5; delta:
   * system_version_info = 1, type_url = 4, nonce = 5 too. */
  mcp_msg_builder_len_field(s->b, 1, ver, strlen(ver));
  mcp_msg_builder_len_field(s->b, 4, t->type_url, strlen(t->type_url));
  mcp_msg_builder_len_field(s->b, 5, nonce, strlen(nonce));
  int rv = mcp_msg_builder_finish(s->b, t->type_url, pmsg);
  if (rv < 0) {
    return rv;
  }
  memcpy(t->version_sent, ver, sizeof(ver));
  memcpy(t->pending_nonce, nonce, sizeof(nonce));
  t->pending = 1;
  t->want = 0;
  t->answered = 1;
  s->responses++;
  s->srv->st.responses++;
  s->srv->st.resources += s->count;
  return 1;
}

/* Discards what the builder holds. */
static void drop(xsess *s) {
  mcp_msg *junk = NULL;
  if (mcp_msg_builder_finish(s->b, NULL, &junk) == 0) {
    mcp_msg_free(junk);
  }
}

/* MeshConfig over SotW: its Any carries no name, and istiod reads one
 * (Resources[0]): the one whose name sorts first. */
static int mesh_min_fn(const mcp_item *it, void *ud) {
  xsess *s = ud;
  const char *cur = (const char *)s->scratch.p;
  if (s->scratch.len && strcmp(it->name, cur) >= 0) {
    return 0;
  }
  size_t n = strlen(it->name) + 1;
  s->scratch.len = 0;
  if (mcp_buf_reserve(&s->scratch, n) != 0) {
    return MCP_ERR_NOMEM;
  }
  memcpy(s->scratch.p, it->name, n);
  s->scratch.len = n;
  return 0;
}

static int put_mesh(xsess *s, xtype *t) {
  s->scratch.len = 0;
  int rv = mcp_watch_foreach(t->w, mesh_min_fn, s);
  mcp_item it;
  if (rv == 0 && s->scratch.len &&
      mcp_watch_get(t->w, (const char *)s->scratch.p, &it)) {
    rv = put_item(s, &it);
  }
  return rv;
}

/* The framed whole state of |t|'s collection at the watch's generation:
 * built by the first wildcard stream that needs it, shared by the others
 * (the server holds one per collection). Borrowed. */
static int server_snap(mcp_xds_server *srv, const xtype *t, mcp_snap **psn,
                       size_t *count) {
  uint64_t gen = mcp_watch_generation(t->w);
  struct xds_snap_cache *c = &srv->snaps[t->snap - 1];
  if (!c->sn || c->gen != gen) {
    mcp_snap *sn = NULL;
    size_t n = 0;
    int rv = mcp__xds_snap(t->w, &srv->mem, &sn, &n);
    if (rv < 0) {
      return rv;
    }
    mcp_snap_unref(c->sn);
    c->sn = sn;
    c->gen = gen;
    c->count = n;
  }
  *psn = c->sn;
  *count = c->count;
  return 0;
}

static int build_sotw(xsess *s, xtype *t, mcp_tstamp ts, mcp_msg **pmsg) {
  start(s, t);
  if (t->w && t->wildcard && !t->mesh) {
    /* The common case (istiod subscribes with wildcards): the same bytes
     * for every stream, framed once per generation. */
    mcp_watch_skip(t->w, ts);
    mcp_snap *sn = NULL;
    size_t n = 0;
    int rv = server_snap(s->srv, t, &sn, &n);
    if (rv < 0) {
      return rv;
    }
    if (n) {
      mcp_msg_builder_snap(s->b, sn);
      s->count = n;
    }
  } else if (t->w) {
    mcp_watch_skip(t->w, ts);
    int rv = t->wildcard ? put_mesh(s, t) : put_named(s, t);
    if (rv < 0) {
      drop(s);
      return rv;
    }
  }
  return finish(s, t, ts, pmsg);
}

static int build_delta(xsess *s, xtype *t, mcp_tstamp ts, mcp_msg **pmsg) {
  const mcp_mem *m = &s->srv->mem;
  start(s, t);
  int rv = 0;
  if (!t->answered) {
    if (t->w) {
      mcp_watch_skip(t->w, ts);
      rv = mcp_watch_foreach(t->w, first_fn, s);
    }
    void *v;
    for (size_t i = 0; rv == 0 && mcp_map_iter(&t->initial, &i, &v);) {
      if (subscribed(t, v)) {
        put_removed(s, v); /* held by the client, gone here */
      }
    }
    names_clear(&t->initial, m);
    names_clear(&t->fresh, m);
  } else {
    int full = 0;
    if (t->w && mcp_watch_changed(t->w)) {
      rv = mcp_watch_take(t->w, ts, diff_fn, s, &full);
      if (rv >= 0 && full && t->held) {
        /* What the client holds cannot be told apart now. */
        drop(s);
        s->srv->st.resyncs++;
        return MCP_ERR_RESYNC;
      }
      rv = rv < 0 ? rv : 0;
    }
    void *v;
    for (size_t i = 0; rv == 0 && t->w && mcp_map_iter(&t->fresh, &i, &v);) {
      mcp_item it; /* newly subscribed names */
      if (get_xname(t, v, &it)) {
        rv = put_item(s, &it);
      }
    }
    names_clear(&t->fresh, m);
    if (rv == 0 && s->count == 0 && !t->want) {
      drop(s);
      return 0; /* nothing the client subscribed to changed */
    }
  }
  if (rv < 0) {
    drop(s);
    return rv;
  }
  return finish(s, t, ts, pmsg);
}

static int sess_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  xsess *s = sess;
  if (s->end) {
    return 0;
  }
  size_t n = s->ntypes;
  for (size_t k = 0; k < n; ++k) {
    size_t i = (s->rr + k) % n;
    xtype *t = s->types[i];
    /* Note when a change was first seen (max_delay), whatever else holds
     * the type back. */
    if (t->w && t->answered) {
      mcp_watch_note(t->w, ts);
    }
    int ready = t->w && t->answered && mcp_watch_ready(t->w, ts);
    if (t->pending) {
      continue; /* one response in flight per type */
    }
    if (!(t->want || ready || (s->delta && t->answered && t->fresh.n))) {
      continue;
    }
    int rv = s->delta ? build_delta(s, t, ts, pmsg)
                      : build_sotw(s, t, ts, pmsg);
    if (rv != 0) {
      s->rr = i + 1;
      return rv;
    }
  }
  return 0;
}

static mcp_tstamp sess_get_expiry(const void *sess) {
  const xsess *s = sess;
  mcp_tstamp e = MCP_TSTAMP_MAX;
  for (size_t i = 0; !s->end && i < s->ntypes; ++i) {
    const xtype *t = s->types[i];
    if (t->w && !t->pending && t->answered) {
      mcp_tstamp x = mcp_watch_get_expiry(t->w);
      e = x < e ? x : e;
    }
  }
  return e;
}

/* next() does the work at the deadline. */
static int sess_handle_expiry(void *sess, mcp_tstamp ts) {
  MCP_UNUSED(sess);
  MCP_UNUSED(ts);
  return 0;
}

static int sess_end(const void *sess, int *status, const char **details) {
  const xsess *s = sess;
  if (!s->end) {
    return 0;
  }
  *status = s->status;
  *details = s->details;
  return 1;
}

static void sess_del(void *sess) {
  xsess *s = sess;
  const mcp_mem *m = &s->srv->mem;
  for (size_t i = 0; i < s->ntypes; ++i) {
    type_free(s->srv, s->types[i]);
  }
  mcp_mem_free(m, s->types);
  mcp_map_free(&s->by_url, m);
  mcp__xds_node_free(m, s->node_id, s->meta, s->nmeta);
  mcp_msg_builder_del(s->b);
  mcp_buf_free(&s->scratch);
  s->srv->st.active--;
  mcp_mem_free(m, s);
}

/* The initial sync is over once the client asked for a type and every
 * type it asked for had its first answer taken by next() (an unknown type
 * too: it is answered empty), as MCP's mcp_admit_initial_sent(). */
static int sess_initial_sent(const void *p, mcp_tstamp ts) {
  MCP_UNUSED(ts);
  const xsess *s = p;
  for (size_t i = 0; i < s->ntypes; ++i) {
    if (!s->types[i]->answered) {
      return 0;
    }
  }
  return s->ntypes > 0;
}

static const mcp_stream_ops server_ops = {
    .name = MCP_XDS_API_NAME,
    .flags = MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE,
    .recv = sess_recv,
    .next = sess_next,
    .get_expiry = sess_get_expiry,
    .handle_expiry = sess_handle_expiry,
    .end = sess_end,
    .del = sess_del,
    .initial_sent = sess_initial_sent,
};
