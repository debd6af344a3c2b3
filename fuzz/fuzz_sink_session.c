/*
 * fuzz_sink_session: the sink side of a stream (and the state that
 * outlives streams), driven by a script.
 *
 * The input is a header (service, incremental, collections, journal size,
 * limits) followed by actions: feed a push (raw bytes, or built from fields
 * the input chooses: collection or type, nonce, incremental, resources
 * valid or not, removed names, an undecodable resource, and whether the
 * application rejects it), drain or take one request, reconnect (a new
 * session on the same state), introspect (status, journal), advance time,
 * and fail an allocation. The script always ends with everything freed and
 * no block left.
 *
 * The harness keeps its own model of what the sink holds and of what it
 * owes the source, from an independent reading of each push:
 *  - the result of recv is predicted (MALFORMED, PROTOCOL, LIMIT, 0) from
 *    the envelope, UTF-8 and the requested collections; NOMEM exactly when
 *    an allocation failed, and then nothing changed;
 *  - the apply callback sees a consistent change (full state: the removed
 *    names are exactly those held and not sent);
 *  - after every call the state holds exactly the model;
 *  - requests decode, and are exactly what is owed: the initial request of
 *    each collection first (initial_resource_versions = everything held,
 *    when incremental; version_info = the last applied version, on
 *    MeshConfigRequest), the newest answer per collection (ACK, or NACK
 *    with the application's code, or INVALID_ARGUMENT / RESOURCE_EXHAUSTED
 *    for a push that failed validation), NACKs of unrequested collections
 *    in order with UNIMPLEMENTED; nothing else; the journal records them;
 *  - counters: every push is ACKed or NACKed once (acks + nacks == pushes).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_script.h"
#include "fuzz_util.h"
#include "fuzz_wire.h"

#define MAXC 4
#define FOREIGN_MAX 64


typedef struct mres {
  char *name, *ver;
} mres;

typedef struct mlist {
  mres *v;
  size_t n, cap;
} mlist;

typedef struct mcoll {
  const char *name;
  mlist held;
  char *acked;   /* last applied system_version_info, NULL if none */
  int synced;
  int initial;   /* the initial request is owed */
  int ans;       /* an answer is owed */
  char *ans_nonce;
  int ans_code;  /* 0 ACK; > 0 NACK code; -1 INVALID_ARGUMENT or
                    RESOURCE_EXHAUSTED (failed validation) */
  int answered;  /* the stream answered a response of it */
} mcoll;

typedef struct foreign {
  char *coll, *nonce;
} foreign;

typedef struct world {
  fz_mem m;
  mcp_service service;
  int incremental; /* as the state says */
  mcp_sink_options o;
  const char *colls[MAXC];
  mcp_kv annot[2];
  mcp_sink_state *st;
  mcp_sink_session *s;
  mcp_tstamp ts;
  mcoll c[MAXC];
  size_t nc;
  foreign fq[FOREIGN_MAX];
  size_t nfq;
  unsigned counter;
  /* the decision for the push being received */
  int reject;        /* 0 accept, else the code the callback returns */
  char reject_msg[256];
  int fill_msg;      /* write the whole message buffer */
  int apply_called, apply_code;
  uint64_t apply_hash; /* of the change the callback saw */
  mlist next;        /* what is held after the change, if accepted */
  char *next_acked;
} world;

/* ---- the model ---- */

static char *xstrdup(const char *s) {
  char *d = strdup(s ? s : "");
  FZ_CHECK(d, "out of memory");
  return d;
}

static char *xstrndup(const uint8_t *p, size_t n) {
  char *d = malloc(n + 1);
  FZ_CHECK(d, "out of memory");
  if (n) {
    memcpy(d, p, n);
  }
  d[n] = '\0';
  return d;
}

static void ml_clear(mlist *l) {
  for (size_t i = 0; i < l->n; ++i) {
    free(l->v[i].name);
    free(l->v[i].ver);
  }
  free(l->v);
  memset(l, 0, sizeof(*l));
}

static mres *ml_find(const mlist *l, const char *name) {
  for (size_t i = 0; i < l->n; ++i) {
    if (strcmp(l->v[i].name, name) == 0) {
      return &l->v[i];
    }
  }
  return NULL;
}

static void ml_put(mlist *l, const char *name, const char *ver) {
  mres *r = ml_find(l, name);
  if (r) {
    free(r->ver);
    r->ver = xstrdup(ver);
    return;
  }
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 8;
    l->v = realloc(l->v, l->cap * sizeof(*l->v));
    FZ_CHECK(l->v, "out of memory");
  }
  l->v[l->n].name = xstrdup(name);
  l->v[l->n].ver = xstrdup(ver);
  l->n++;
}

static void ml_del(mlist *l, const char *name) {
  mres *r = ml_find(l, name);
  if (r) {
    free(r->name);
    free(r->ver);
    *r = l->v[--l->n];
  }
}

static void ml_copy(mlist *dst, const mlist *src) {
  ml_clear(dst);
  for (size_t i = 0; i < src->n; ++i) {
    ml_put(dst, src->v[i].name, src->v[i].ver);
  }
}

static mcoll *coll_of(world *w, const char *name) {
  for (size_t i = 0; i < w->nc; ++i) {
    if (strcmp(w->c[i].name, name) == 0) {
      return &w->c[i];
    }
  }
  return NULL;
}

typedef struct cmp_ctx {
  const mlist *l;
  size_t n, bad;
  char first[128];
} cmp_ctx;

static void cmp_cb(const char *name, const char *version, void *ud) {
  cmp_ctx *c = ud;
  FZ_CHECK(name && version, "foreach: NULL name or version");
  c->n++;
  mres *r = ml_find(c->l, name);
  if (!r || strcmp(r->ver, version) != 0) {
    if (!c->bad++) {
      snprintf(c->first, sizeof(c->first), "%s@%s (model %s)", name, version,
               r ? r->ver : "none");
    }
  }
}

/* The state holds exactly the model. */
static void check_state(world *w, const char *when) {
  size_t nsynced = 0;
  for (size_t i = 0; i < w->nc; ++i) {
    mcoll *c = &w->c[i];
    cmp_ctx x = {.l = &c->held};
    mcp_sink_state_foreach(w->st, c->name, cmp_cb, &x);
    FZ_CHECK(x.bad == 0 && x.n == c->held.n,
             "%s: %s holds %zu, model %zu, first difference %s", when, c->name,
             x.n, c->held.n, x.bad ? x.first : "-");
    FZ_CHECK(mcp_sink_state_count(w->st, c->name) == c->held.n,
             "%s: count of %s", when, c->name);
    for (size_t k = 0; k < c->held.n; ++k) {
      const char *v = mcp_sink_state_version(w->st, c->name, c->held.v[k].name);
      FZ_CHECK(v && strcmp(v, c->held.v[k].ver) == 0, "%s: version of %s",
               when, c->held.v[k].name);
    }
    nsynced += c->synced;
  }
  FZ_CHECK(mcp_sink_state_synced(w->st) == (nsynced == w->nc), "%s: synced",
           when);
  FZ_CHECK(mcp_sink_state_count(w->st, "not/requested") == 0, "%s", when);
}

/* ---- the change as the sink read it, and as protobuf-c reads it ---- */

static uint64_t h_bytes(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; ++i) {
    h = (h ^ b[i]) * 1099511628211ULL;
  }
  return (h ^ 0x1ff) * 1099511628211ULL; /* a separator */
}

static uint64_t h_str(uint64_t h, const char *s) {
  return h_bytes(h, s ? s : "", s ? strlen(s) : 0);
}

static uint64_t h_u64(uint64_t h, uint64_t v) { return h_bytes(h, &v, sizeof(v)); }

/* Everything a resource carries, in order. */
static uint64_t hash_core(const mcp_change *ch) {
  uint64_t h = 14695981039346656037ULL;
  h = h_u64(h, ch->nresources);
  for (size_t i = 0; i < ch->nresources; ++i) {
    const mcp_resource *r = &ch->resources[i];
    h = h_str(h, r->name);
    h = h_str(h, r->version);
    h = h_str(h, r->type_url);
    h = h_bytes(h, r->body_len ? r->body : (const uint8_t *)"", r->body_len);
    h = h_u64(h, r->nlabels);
    for (size_t k = 0; k < r->nlabels; ++k) {
      h = h_str(h_str(h, r->labels[k].key), r->labels[k].value);
    }
    h = h_u64(h, r->nannotations);
    for (size_t k = 0; k < r->nannotations; ++k) {
      h = h_str(h_str(h, r->annotations[k].key), r->annotations[k].value);
    }
    h = h_u64(h, (uint64_t)r->has_create_time);
    if (r->has_create_time) {
      h = h_u64(h, (uint64_t)r->create_time_seconds);
      h = h_u64(h, (uint64_t)(int64_t)r->create_time_nanos);
    }
  }
  if (ch->incremental) {
    h = h_u64(h, ch->nremoved);
    for (size_t i = 0; i < ch->nremoved; ++i) {
      h = h_str(h, ch->removed[i]);
    }
  }
  return h;
}

static uint64_t hash_pb(const fz_push *x) {
  uint64_t h = 14695981039346656037ULL;
  h = h_u64(h, x->nres);
  for (size_t i = 0; i < x->nres; ++i) {
    const fz_pbres *r = x->res[i];
    const Istio__Mcp__V1alpha1__Metadata *md = r->metadata;
    h = h_str(h, md ? md->name : "");
    h = h_str(h, md ? md->version : "");
    h = h_str(h, r->body ? r->body->type_url : "");
    h = h_bytes(h, r->body && r->body->value.len ? r->body->value.data
                                                 : (const uint8_t *)"",
                r->body ? r->body->value.len : 0);
    h = h_u64(h, md ? md->n_labels : 0);
    for (size_t k = 0; md && k < md->n_labels; ++k) {
      h = h_str(h_str(h, md->labels[k]->key), md->labels[k]->value);
    }
    h = h_u64(h, md ? md->n_annotations : 0);
    for (size_t k = 0; md && k < md->n_annotations; ++k) {
      h = h_str(h_str(h, md->annotations[k]->key), md->annotations[k]->value);
    }
    int ct = md && md->create_time;
    h = h_u64(h, (uint64_t)ct);
    if (ct) {
      h = h_u64(h, (uint64_t)md->create_time->seconds);
      h = h_u64(h, (uint64_t)(int64_t)md->create_time->nanos);
    }
  }
  if (x->incremental) {
    h = h_u64(h, x->nrem);
    for (size_t i = 0; i < x->nrem; ++i) {
      h = h_str(h, x->rem[i]);
    }
  }
  return h;
}

/* ---- callbacks ---- */

static void on_event(const mcp_event *ev, void *ud) {
  (void)ud;
  FZ_CHECK(ev->collection && ev->nonce && ev->version && ev->message,
           "event %d with a NULL string", (int)ev->type);
  volatile size_t n = strlen(ev->collection) + strlen(ev->nonce) +
                      strlen(ev->version) + strlen(ev->message);
  (void)n;
  FZ_CHECK(ev->type == MCP_EVENT_ACK || ev->type == MCP_EVENT_NACK ||
               (ev->type == MCP_EVENT_TRIGGER_IGNORED &&
                (!ev->collection[0] ||
                 strcmp(ev->collection, MCP_TRIGGER_COLLECTION) == 0)),
           "sink event %d", (int)ev->type);
  /* The message's lists, as received; the drops of a full-state ACK. */
  FZ_CHECK(ev->nlisted <= ev->nresources &&
               ev->nremoved_listed <= ev->nremoved,
           "more listed than carried");
  FZ_CHECK(!ev->ndropped || (ev->type == MCP_EVENT_ACK && !ev->incremental),
           "drops outside a full-state ACK");
  for (size_t i = 0; i < ev->nlisted; ++i) {
    FZ_CHECK(ev->resources[i].name && ev->resources[i].version &&
                 fz_utf8_valid((const uint8_t *)ev->resources[i].name,
                               strlen(ev->resources[i].name)),
             "a listed resource without a UTF-8 name");
  }
  for (size_t i = 0; i < ev->nremoved_listed; ++i) {
    FZ_CHECK(ev->removed[i] && fz_utf8_valid((const uint8_t *)ev->removed[i],
                                             strlen(ev->removed[i])),
             "a listed removal not UTF-8");
  }
  for (size_t i = 0; i < ev->ndropped; ++i) {
    FZ_CHECK(ev->dropped[i] && ev->dropped[i][0], "an empty drop");
  }
}

static void read_kvs(const mcp_kv *kv, size_t n) {
  FZ_CHECK(!n || kv, "labels or annotations missing");
  for (size_t i = 0; i < n; ++i) {
    FZ_CHECK(kv[i].key && kv[i].value, "NULL label");
    FZ_CHECK(fz_utf8_valid((const uint8_t *)kv[i].key, strlen(kv[i].key)) &&
                 fz_utf8_valid((const uint8_t *)kv[i].value, strlen(kv[i].value)),
             "label not UTF-8 reached the application");
  }
}

static int on_apply(const mcp_change *ch, char *msg, size_t msglen, void *ud) {
  world *w = ud;
  FZ_CHECK(!w->apply_called, "apply called twice for one push");
  w->apply_called = 1;
  FZ_CHECK(ch->collection && ch->system_version_info && ch->nonce,
           "change with NULL strings");
  mcoll *c = coll_of(w, ch->collection);
  FZ_CHECK(c, "apply for unrequested %s", ch->collection);
  FZ_CHECK(ch->nonce[0], "apply for a push without nonce");
  FZ_CHECK(!ch->incremental || w->incremental,
           "an incremental change the sink did not ask for");
  FZ_CHECK(!ch->nresources || ch->resources, "resources missing");
  FZ_CHECK(!ch->nremoved || ch->removed, "removed missing");
  FZ_CHECK(msg && msglen >= 2, "no message buffer");
  ml_copy(&w->next, ch->incremental ? &c->held : &(mlist){0});
  for (size_t i = 0; i < ch->nremoved; ++i) {
    FZ_CHECK(ch->removed[i], "NULL removed name");
    if (!ch->incremental) {
      FZ_CHECK(ml_find(&c->held, ch->removed[i]),
               "full state removes %s, which is not held", ch->removed[i]);
    }
    ml_del(&w->next, ch->removed[i]);
  }
  for (size_t i = 0; i < ch->nresources; ++i) {
    const mcp_resource *r = &ch->resources[i];
    FZ_CHECK(r->name && r->name[0] && r->version && r->type_url &&
                 r->type_url[0],
             "resource %zu: name, version or type missing", i);
    FZ_CHECK(fz_utf8_valid((const uint8_t *)r->name, strlen(r->name)) &&
                 fz_utf8_valid((const uint8_t *)r->version, strlen(r->version)),
             "a name or version not UTF-8 reached the application");
    FZ_CHECK(!r->body_len || r->body, "body missing");
    volatile uint8_t sum = 0;
    for (size_t k = 0; k < r->body_len; ++k) {
      sum = (uint8_t)(sum + r->body[k]);
    }
    read_kvs(r->labels, r->nlabels);
    read_kvs(r->annotations, r->nannotations);
    FZ_CHECK(!r->has_create_time ||
                 (r->create_time_nanos >= 0 && r->create_time_nanos < 1000000000),
             "invalid create_time reached the application");
    for (size_t k = 0; k < i; ++k) {
      FZ_CHECK(strcmp(ch->resources[k].name, r->name) != 0,
               "%s twice in one change", r->name);
    }
    for (size_t k = 0; ch->incremental && k < ch->nremoved; ++k) {
      FZ_CHECK(strcmp(ch->removed[k], r->name) != 0,
               "%s both changed and removed", r->name);
    }
    ml_put(&w->next, r->name, r->version);
  }
  if (!ch->incremental) {
    /* The removed names are exactly those held and not in the push. */
    size_t gone = 0;
    for (size_t i = 0; i < c->held.n; ++i) {
      gone += !ml_find(&w->next, c->held.v[i].name);
    }
    FZ_CHECK(gone == ch->nremoved, "full state: %zu removed listed, %zu gone",
             ch->nremoved, gone);
  }
  free(w->next_acked);
  w->next_acked = xstrdup(ch->system_version_info);
  w->apply_hash = hash_core(ch);
  w->apply_code = w->reject;
  if (w->reject) {
    if (w->fill_msg) {
      memset(msg, 'x', msglen - 1);
      msg[msglen - 1] = '\0';
    } else {
      snprintf(msg, msglen, "%s", w->reject_msg);
    }
  }
  return w->reject;
}

/* The change a push makes, decoded with protobuf-c, into w->next. */
static void model_from_push(world *w, const mcoll *c, const uint8_t *p,
                            size_t len) {
  fz_push x;
  FZ_CHECK(fz_push_decode(w->service, p, len, &x) == 0,
           "the sink accepted a push protobuf-c does not decode");
  ml_copy(&w->next, x.incremental ? &c->held : &(mlist){0});
  for (size_t i = 0; x.incremental && i < x.nrem; ++i) {
    ml_del(&w->next, x.rem[i]);
  }
  for (size_t i = 0; i < x.nres; ++i) {
    FZ_CHECK(x.res[i]->metadata, "accepted a resource without metadata");
    ml_put(&w->next, x.res[i]->metadata->name, x.res[i]->metadata->version);
  }
  free(w->next_acked);
  w->next_acked = xstrdup(x.version);
  fz_push_free(&x);
}

/* ---- sessions ---- */

static void owe_initial(world *w) {
  for (size_t i = 0; i < w->nc; ++i) {
    w->c[i].initial = 1;
    w->c[i].answered = 0;
    w->c[i].ans = 0;
    free(w->c[i].ans_nonce);
    w->c[i].ans_nonce = NULL;
  }
  for (size_t i = 0; i < w->nfq; ++i) {
    free(w->fq[i].coll);
    free(w->fq[i].nonce);
  }
  w->nfq = 0;
}

static int session_open(world *w) {
  long fired = w->m.fired;
  int rv = mcp_sink_session_new(&w->s, w->st, w->ts);
  fz_check_nomem(&w->m, fired, rv, "sink_session_new");
  FZ_CHECK(rv == 0 || rv == MCP_ERR_NOMEM, "sink_session_new: %d", rv);
  if (rv != 0) {
    w->s = NULL;
    return rv;
  }
  owe_initial(w);
  return 0;
}

static void reconnect(world *w) {
  FZ_LOG("reconnect");
  mcp_sink_session *other = NULL;
  FZ_CHECK(mcp_sink_session_new(&other, w->st, w->ts) == MCP_ERR_INVALID_ARGUMENT &&
               !other,
           "a second session on one state");
  mcp_sink_session_del(w->s);
  w->s = NULL;
  if (session_open(w) != 0) {
    fz_mem_disarm(&w->m);
    FZ_CHECK(session_open(w) == 0, "sink_session_new without failures");
  }
  check_state(w, "reconnect");
}

/* ---- receiving ---- */

static int wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (unsigned sh = 0; sh < 64 && *p < end; sh += 7) {
    uint8_t b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << sh;
    if (!(b & 0x80)) {
      return 0;
    }
  }
  return -1;
}

/* In bytes that decode (protobuf-c said so): the last field |inner| of
 * the length-delimited fields |outer|, as protobuf merges them. */
static void wire_last(const uint8_t *p, size_t n, unsigned outer,
                      unsigned inner, const uint8_t **out, size_t *outlen) {
  const uint8_t *end = p + n;
  uint64_t k, v;
  while (p < end && wire_varint(&p, end, &k) == 0) {
    const uint8_t *d = p;
    size_t dl = 0;
    switch (k & 7) {
    case 0:
      if (wire_varint(&p, end, &v) != 0) {
        return;
      }
      break;
    case 1:
      p += 8;
      break;
    case 5:
      p += 4;
      break;
    case 2:
      if (wire_varint(&p, end, &v) != 0 || v > (uint64_t)(end - p)) {
        return;
      }
      d = p;
      dl = (size_t)v;
      p += dl;
      break;
    default:
      return;
    }
    if ((k & 7) == 2 && (k >> 3) == outer) {
      if (inner) {
        wire_last(d, dl, inner, 0, out, outlen);
      } else {
        *out = d;
        *outlen = dl;
      }
    }
  }
}

/*
 * IncrementalAggregatedResources: the type a response with a nonce is
 * attributed to (docs/protocol.md, written again from the rules): the
 * nonce's in our form ("<digits>:" then a requested type or a type URL),
 * the only type, the body type of the first resource (protobuf-c reads it;
 * UTF-8), the first type without answer on the stream, the first type.
 */
static char *iar_key(const world *w, const fz_env *e) {
  const uint8_t *colon = memchr(e->nonce, ':', e->nonce_len);
  if (colon && colon > e->nonce) {
    int digits = 1;
    for (const uint8_t *q = e->nonce; q < colon; ++q) {
      digits &= *q >= '0' && *q <= '9';
    }
    char *t = xstrndup(colon + 1, e->nonce_len - (size_t)(colon + 1 - e->nonce));
    if (digits && (coll_of((world *)w, t) || strchr(t, '/'))) {
      return t;
    }
    free(t);
  }
  if (w->nc == 1) {
    return xstrdup(w->c[0].name);
  }
  if (e->nres) {
    /* protobuf-c says whether it decodes; its strings end at a NUL, so the
     * type's bytes are read from the wire (the last type_url of the last
     * body, as protobuf merges them). */
    fz_pbres *r = istio__mcp__v1alpha1__resource__unpack(NULL, e->res0_len,
                                                         e->res0);
    const uint8_t *t = NULL;
    size_t tl = 0;
    if (r) {
      istio__mcp__v1alpha1__resource__free_unpacked(r, NULL);
      wire_last(e->res0, e->res0_len, 2, 1, &t, &tl);
    }
    if (tl && fz_utf8_valid(t, tl)) {
      return xstrndup(t, tl);
    }
  }
  for (size_t i = 0; i < w->nc; ++i) {
    if (!w->c[i].answered) {
      return xstrdup(w->c[i].name);
    }
  }
  return xstrdup(w->c[0].name);
}

/*
 * Feeds one message whole or, picked by its own bytes, in fragments of
 * 1 to 97 bytes (fz_cut()): the model's expectations are the same however
 * a message is cut.
 */
static int recv_cut(world *w, const uint8_t *p, size_t len) {
  size_t cut = len < 2 || len % 5 == 0 ? 0 : 1 + p[len / 2] % 97;
  if (!cut) {
    return mcp_sink_session_recv(w->s, p, len, w->ts);
  }
  size_t n;
  mcp_iovec *iov = fz_cut(p, len, cut, &n);
  int rv = mcp_sink_session_recv_iov(w->s, iov, n, w->ts);
  fz_cut_free(iov, n);
  return rv;
}

static void feed(world *w, const uint8_t *p, size_t len) {
  fz_env e;
  int wire_ok = fz_envelope(w->service, p, len, &e) == 0;
  int utf8_ok = wire_ok && fz_utf8_valid(e.key, e.key_len) &&
                fz_utf8_valid(e.nonce, e.nonce_len) &&
                fz_utf8_valid(e.version, e.version_len);
  char *key = !utf8_ok ? NULL
              : w->service == MCP_SERVICE_AGGREGATED_INCREMENTAL && e.nonce_len
                  ? iar_key(w, &e)
                  : xstrndup(e.key, e.key_len);
  char *nonce = utf8_ok ? xstrndup(e.nonce, e.nonce_len) : NULL;
  mcoll *c = key ? coll_of(w, key) : NULL;
  mcp_collection_status before;
  memset(&before, 0, sizeof(before));
  if (c) {
    FZ_CHECK(mcp_sink_state_collection_status(w->st, (size_t)(c - w->c), w->ts,
                                              &before) == 0,
             "status");
  }
  w->apply_called = 0;
  long fired = w->m.fired;
  int rv = recv_cut(w, p, len);
  FZ_LOG("recv %zu bytes key=%s nonce=%s reject=%d -> %d (apply %d)", len,
         key ? key : "?", nonce ? nonce : "?", w->reject, rv, w->apply_called);
  fz_check_nomem(&w->m, fired, rv, "sink_session_recv");
  int expect;
  if (!utf8_ok) {
    expect = MCP_ERR_MALFORMED;
  } else if (e.nonce_len > MCP_DEFAULT_MAX_NONCE_LEN) {
    expect = MCP_ERR_PROTOCOL; /* it could not be answered whole */
  } else if (!c) {
    expect = w->nfq == FOREIGN_MAX ? MCP_ERR_LIMIT : 0;
  } else if (!nonce[0]) {
    expect = MCP_ERR_PROTOCOL;
  } else {
    expect = 0;
  }
  FZ_CHECK(rv == expect || rv == MCP_ERR_NOMEM,
           "recv returned %d (%s), expected %d (key %s, nonce %s)", rv,
           mcp_strerror(rv), expect, key ? key : "?", nonce ? nonce : "?");
  if (w->apply_called && !w->apply_code) {
    FZ_CHECK(rv == 0, "the application accepted, then recv failed (%d)", rv);
  }
  if (w->apply_called) {
    /* The push passed validation: protobuf-c reads it, and the same. */
    fz_push x;
    char hex[408];
    FZ_CHECK(fz_push_decode(w->service, p, len, &x) == 0,
             "the sink validated a push protobuf-c does not decode: %s",
             fz_hex(hex, p, len));
    FZ_CHECK(hash_pb(&x) == w->apply_hash,
             "the change handed to apply differs from the push as protobuf-c "
             "reads it: %s",
             fz_hex(hex, p, len));
    fz_push_free(&x);
  }
  if (rv == 0 && !c) {
    w->fq[w->nfq].coll = xstrdup(key);
    w->fq[w->nfq].nonce = xstrdup(nonce);
    w->nfq++;
  } else if (rv == 0) {
    mcp_collection_status after;
    mcp_sink_state_collection_status(w->st, (size_t)(c - w->c), w->ts, &after);
    FZ_CHECK(after.pushes == before.pushes + 1, "push not counted");
    c->ans = 1;
    c->answered = 1;
    free(c->ans_nonce);
    c->ans_nonce = xstrdup(nonce);
    int accepted = w->apply_called && !w->apply_code;
    if (!w->o.apply) {
      /* No callback: every valid push is accepted. The model learns the
       * change from the push as protobuf-c decodes it. */
      accepted = after.acks == before.acks + 1;
      if (accepted) {
        model_from_push(w, c, p, len);
      }
    }
    FZ_CHECK(accepted == (after.acks == before.acks + 1),
             "accepted %d, ACKs %" PRIu64 " -> %" PRIu64, accepted, before.acks,
             after.acks);
    if (accepted) {
      ml_copy(&c->held, &w->next);
      free(c->acked);
      c->acked = w->next_acked;
      w->next_acked = NULL;
      c->synced = 1;
      c->ans_code = 0;
      FZ_CHECK(after.acks == before.acks + 1, "ACK not counted");
    } else {
      c->ans_code = w->apply_called ? (w->apply_code > 0 ? w->apply_code
                                                         : MCP_CODE_INTERNAL)
                                    : -1;
      FZ_CHECK(after.nacks == before.nacks + 1, "NACK not counted");
      if (c->ans_code > 0) {
        FZ_CHECK(after.last_nack_code == c->ans_code, "NACK code %d, status %d",
                 c->ans_code, after.last_nack_code);
      }
    }
  }
  check_state(w, "recv");
  free(key);
  free(nonce);
}

static const int k_reject[8] = {
    0, 0, 0, 0, MCP_CODE_UNAVAILABLE, MCP_CODE_FAILED_PRECONDITION, -5, 99,
};

static void read_reject(world *w, fz_in *in) {
  uint8_t r = fz_u8(in);
  w->reject = k_reject[r % 8];
  w->fill_msg = (r & 8) != 0;
  fz_str(in, w->reject_msg, 255);
}

/* A name: one of ours, or raw bytes. */
static void pick_name(fz_in *in, char *buf, size_t cap) {
  uint8_t b = fz_u8(in);
  if (b == 0xff) {
    fz_str(in, buf, cap);
  } else {
    snprintf(buf, cap + 1, "%s", fz_names[b % FZ_NNAMES]);
  }
}

#define MAXRES 8
#define MAXREM 6

static void act_recv(world *w, fz_in *in) {
  char key[72], nonce[96], ver[40], raw[80];
  char names[MAXRES][40], vers[MAXRES][40], bodies[MAXRES][24];
  char rem[MAXREM][40];
  const char *remp[MAXREM + 1];
  mcp_kv labels[MAXRES], annots[MAXRES];
  fz_res_spec res[MAXRES + 1];
  fz_push_spec p;
  memset(&p, 0, sizeof(p));
  memset(res, 0, sizeof(res));

  uint8_t kb = fz_u8(in) % 8;
  if (kb < 5) {
    snprintf(key, sizeof(key), "%s", fz_key(w->service, kb));
  } else if (kb == 5) {
    snprintf(key, sizeof(key), "%s", MCP_TRIGGER_COLLECTION);
  } else if (kb == 6) {
    key[0] = '\0';
  } else {
    fz_str(in, key, 64);
  }
  uint8_t nb = fz_u8(in) % 4;
  char num[32];
  if (nb == 0) {
    num[0] = '\0';
  } else if (nb == 2) {
    fz_str(in, num, 24);
  } else {
    snprintf(num, sizeof(num), "%u", nb == 1 ? ++w->counter : w->counter);
  }
  if (w->service == MCP_SERVICE_AGGREGATED_INCREMENTAL && nb != 2 && num[0]) {
    snprintf(nonce, sizeof(nonce), "%s:%s", num, key);
  } else {
    snprintf(nonce, sizeof(nonce), "%s", num);
  }
  uint8_t f = fz_u8(in);
  if (f & 4) {
    fz_str(in, ver, 32);
  } else {
    snprintf(ver, sizeof(ver), "sv%u", w->counter);
  }
  size_t n = fz_u8(in) % (MAXRES + 1);
  for (size_t i = 0; i < n; ++i) {
    pick_name(in, names[i], 32);
    uint8_t vb = fz_u8(in);
    if (vb == 1) {
      fz_str(in, vers[i], 32);
    } else if (vb == 0) {
      vers[i][0] = '\0';
    } else {
      snprintf(vers[i], sizeof(vers[i]), "r%u", vb);
    }
    uint8_t rf = fz_u8(in);
    size_t bl = fz_str(in, bodies[i], 16);
    res[i].has_meta = !(rf & 1);
    res[i].has_body = !(rf & 2);
    res[i].name = names[i];
    res[i].version = vers[i];
    res[i].type_url = (rf & 4) ? "" : FZ_BODY_TYPE;
    res[i].body = (const uint8_t *)bodies[i];
    res[i].body_len = bl;
    res[i].has_ct = (rf & 8) != 0;
    res[i].secs = (int64_t)rf * 1000;
    res[i].nanos = (rf & 16) ? -1 : (int32_t)rf;
    if (rf & 32) {
      labels[i].key = "app";
      labels[i].value = (rf & 64) ? "\xff" : bodies[i];
      res[i].labels = &labels[i];
      res[i].nlabels = 1;
    }
    if (rf & 128) {
      annots[i].key = "note";
      annots[i].value = names[i];
      res[i].annots = &annots[i];
      res[i].nannots = 1;
    }
  }
  if ((f & 8) && n) { /* the first resource twice */
    res[n++] = res[0];
  }
  size_t nr = fz_u8(in) % (MAXREM + 1);
  for (size_t i = 0; i < nr; ++i) {
    pick_name(in, rem[i], 32);
    remp[i] = rem[i];
  }
  if ((f & 16) && n && nr < MAXREM) { /* both changed and removed */
    remp[nr++] = res[0].name;
  }
  remp[nr] = NULL;
  if (f & 2) {
    size_t rl = fz_str(in, raw, 64);
    p.raw_res = (const uint8_t *)raw;
    p.raw_res_len = rl;
    p.has_raw_res = 1;
  }
  read_reject(w, in);
  p.key = key;
  p.nonce = nonce;
  p.version = ver;
  p.incremental = f & 1;
  p.nres = n;
  p.res = res;
  p.nrem = nr;
  p.rem = remp;
  size_t len;
  uint8_t *bytes = fz_push_encode(w->service, &p, &len);
  feed(w, bytes, len);
  free(bytes);
}

/* ---- requests ---- */

static int init_matches(const fz_req *q, const mlist *held) {
  if (q->ninit != held->n) {
    return 0;
  }
  for (size_t i = 0; i < q->ninit; ++i) {
    mres *r = ml_find(held, q->init_keys[i]);
    if (!r || strcmp(r->ver, q->init_vals[i]) != 0) {
      return 0;
    }
  }
  return 1;
}

static void check_journal_last(world *w, const fz_req *q, int kind, int code) {
  size_t n = mcp_sink_state_journal_count(w->st);
  FZ_CHECK(n <= w->o.journal_size, "journal holds %zu > %zu", n,
           w->o.journal_size);
  if (!w->o.journal_size) {
    FZ_CHECK(n == 0, "journal of size 0 holds %zu", n);
    return;
  }
  mcp_journal_entry e;
  FZ_CHECK(n && mcp_sink_state_journal_entry(w->st, n - 1, &e) == 0,
           "no journal entry for a request sent");
  FZ_CHECK(strcmp(e.collection, q->key) == 0, "journal collection %s, sent %s",
           e.collection, q->key);
  FZ_CHECK(strcmp(e.nonce, q->nonce) == 0, /* whole, as sent */
           "journal nonce %s, sent %s", e.nonce, q->nonce);
  FZ_CHECK(e.kind == kind && e.code == code, "journal kind %d code %d", e.kind,
           e.code);
  FZ_CHECK(e.ts == w->ts || kind != MCP_EVENT_REQUEST || 1, "journal time");
  FZ_CHECK(e.ninitial == q->ninit, "journal ninitial %zu, sent %zu", e.ninitial,
           q->ninit);
}

static void check_request(world *w, const mcp_msg *msg) {
  size_t len;
  uint8_t *p = fz_flatten(msg, &len);
  fz_req q;
  FZ_CHECK(fz_req_decode(w->service, p, len, &q) == 0,
           "a request does not decode (%zu bytes)", len);
  free(p);
  FZ_LOG("  request key=%s nonce=%s err=%d init=%zu", q.key, q.nonce,
         q.error ? q.error->code : 0, q.ninit);
  FZ_CHECK(strcmp(mcp_msg_collection(msg), q.key) == 0,
           "mcp_msg_collection %s, request for %s", mcp_msg_collection(msg),
           q.key);
  FZ_CHECK(q.node && strcmp(q.node->id, w->o.node_id) == 0 &&
               q.node->n_annotations == w->o.nnode_annotations,
           "request without our sink node");
  FZ_CHECK(w->service != MCP_SERVICE_RESOURCE || q.incremental == w->incremental,
           "request incremental %d, sink %d", q.incremental, w->incremental);
  if (w->nfq) {
    /* NACKs of unrequested collections go first, in order. */
    foreign *f = &w->fq[0];
    FZ_CHECK(strcmp(q.key, f->coll) == 0 && strcmp(q.nonce, f->nonce) == 0 &&
                 q.error && q.error->code == MCP_CODE_UNIMPLEMENTED && !q.ninit,
             "expected the NACK of unrequested %s/%s, got %s/%s", f->coll,
             f->nonce, q.key, q.nonce);
    check_journal_last(w, &q, MCP_EVENT_NACK, MCP_CODE_UNIMPLEMENTED);
    free(f->coll);
    free(f->nonce);
    memmove(&w->fq[0], &w->fq[1], --w->nfq * sizeof(foreign));
    fz_req_free(&q);
    return;
  }
  mcoll *c = coll_of(w, q.key);
  FZ_CHECK(c, "request for unrequested %s", q.key);
  if (w->service == MCP_SERVICE_AGGREGATED) {
    FZ_CHECK(strcmp(q.version_info, c->acked ? c->acked : "") == 0,
             "version_info %s, applied %s", q.version_info,
             c->acked ? c->acked : "");
  }
  if (!q.nonce[0]) {
    FZ_CHECK(c->initial, "a request for %s not owed", q.key);
    c->initial = 0;
    FZ_CHECK(!q.error, "initial request with error_detail");
    int with = w->incremental && w->service != MCP_SERVICE_AGGREGATED;
    FZ_CHECK(with ? init_matches(&q, &c->held) : q.ninit == 0,
             "initial request of %s: %zu versions, holds %zu", q.key, q.ninit,
             c->held.n);
    check_journal_last(w, &q, MCP_EVENT_REQUEST, 0);
  } else {
    FZ_CHECK(!c->initial, "an answer for %s before its initial request", q.key);
    FZ_CHECK(c->ans && strcmp(q.nonce, c->ans_nonce) == 0,
             "answer %s for %s, owed %s", q.nonce, q.key,
             c->ans ? c->ans_nonce : "nothing");
    FZ_CHECK(!q.ninit, "an answer with initial versions");
    int code = q.error ? q.error->code : 0;
    if (c->ans_code < 0) {
      FZ_CHECK(code == MCP_CODE_INVALID_ARGUMENT ||
                   code == MCP_CODE_RESOURCE_EXHAUSTED,
               "a push failing validation NACKed with %d", code);
    } else {
      FZ_CHECK(code == c->ans_code, "answer code %d, owed %d", code,
               c->ans_code);
    }
    FZ_CHECK(!q.error == !code, "error_detail with code 0");
    check_journal_last(w, &q, code ? MCP_EVENT_NACK : MCP_EVENT_ACK, code);
    c->ans = 0;
  }
  fz_req_free(&q);
}

static int produce(world *w) {
  int want = mcp_sink_session_want_write(w->s);
  FZ_CHECK(want == 0 || want == 1, "want_write %d", want);
  mcp_msg *msg = NULL;
  size_t jn = mcp_sink_state_journal_count(w->st);
  long fired = w->m.fired;
  int rv = mcp_sink_session_next(w->s, &msg);
  fz_check_nomem(&w->m, fired, rv, "sink_session_next");
  FZ_CHECK(rv == 0 || rv == 1 || rv == MCP_ERR_NOMEM, "next: %d", rv);
  if (rv <= 0) {
    FZ_CHECK(!msg, "next set a message and returned %d", rv);
    FZ_CHECK(rv < 0 || !want, "want_write said 1, next produced nothing");
    FZ_CHECK(mcp_sink_state_journal_count(w->st) == jn, "a failed next journaled");
    if (rv == 0) {
      /* Nothing is owed any more. */
      FZ_CHECK(!w->nfq, "%zu NACKs of unrequested collections not sent",
               w->nfq);
      for (size_t i = 0; i < w->nc; ++i) {
        FZ_CHECK(!w->c[i].initial && !w->c[i].ans, "%s: %s not sent",
                 w->c[i].name, w->c[i].initial ? "initial request" : "answer");
      }
    }
    return rv;
  }
  FZ_CHECK(want, "want_write said 0, next produced a message");
  check_request(w, msg);
  mcp_msg_free(msg);
  return 1;
}

static void drain(world *w) {
  for (int guard = 0;; ++guard) {
    FZ_CHECK(guard < 1000, "drain does not end");
    if (produce(w) <= 0) {
      break;
    }
  }
}

static void introspect(world *w) {
  size_t n = mcp_sink_state_collection_count(w->st);
  FZ_CHECK(n == w->nc, "%zu collections, requested %zu", n, w->nc);
  for (size_t i = 0; i <= n; ++i) {
    mcp_collection_status st;
    int rv = mcp_sink_state_collection_status(w->st, i, w->ts, &st);
    if (i == n) {
      FZ_CHECK(rv == MCP_ERR_NOT_FOUND, "status past the end: %d", rv);
      break;
    }
    const mcoll *c = &w->c[i];
    FZ_CHECK(rv == 0 && strcmp(st.collection, c->name) == 0, "status %zu", i);
    FZ_CHECK(st.held == c->held.n, "%s: status holds %zu, model %zu", c->name,
             st.held, c->held.n);
    FZ_CHECK(strcmp(st.acked_version, c->acked ? c->acked : "") == 0, /* whole */
             "%s: acked %s, model %s", c->name, st.acked_version,
             c->acked ? c->acked : "");
    FZ_CHECK(st.acks + st.nacks == st.pushes,
             "%s: %" PRIu64 " acks + %" PRIu64 " nacks != %" PRIu64 " pushes",
             c->name, st.acks, st.nacks, st.pushes);
    FZ_CHECK(st.last_nack_message, "NULL nack message");
  }
  size_t jn = mcp_sink_state_journal_count(w->st);
  FZ_CHECK(jn <= w->o.journal_size, "journal %zu", jn);
  for (size_t i = 0; i <= jn; ++i) {
    mcp_journal_entry e;
    int rv = mcp_sink_state_journal_entry(w->st, i, &e);
    if (i == jn) {
      FZ_CHECK(rv == MCP_ERR_NOT_FOUND, "journal past the end: %d", rv);
      break;
    }
    FZ_CHECK(rv == 0 && e.collection && e.message, "journal entry %zu", i);
    FZ_CHECK(e.nonce && strlen(e.nonce) <= MCP_DEFAULT_MAX_NONCE_LEN,
             "journal nonce longer than the limit");
    FZ_CHECK(e.kind == MCP_EVENT_REQUEST || e.kind == MCP_EVENT_ACK ||
                 e.kind == MCP_EVENT_NACK,
             "journal kind %d", e.kind);
    FZ_CHECK(e.ts <= w->ts, "journal entry from the future");
  }
  check_state(w, "introspect");
}

/* ---- the script ---- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int inited;
  if (!inited) {
    fz_init_verbose();
    inited = 1;
  }
  fz_in in = {data, size};
  world *w = calloc(1, sizeof(*w));
  FZ_CHECK(w, "out of memory");
  fz_mem_init(&w->m);
  w->ts = 1 * MCP_SECONDS;
  w->service = (mcp_service)(fz_u8(&in) % 3);
  uint8_t f = fz_u8(&in), g = fz_u8(&in), setup_fail = fz_u8(&in);

  w->nc = 1 + ((f >> 5) & 3);
  for (size_t i = 0; i < w->nc; ++i) {
    w->colls[i] = fz_key(w->service, i);
    w->c[i].name = w->colls[i];
  }
  mcp_sink_options_default(&w->o);
  w->o.mem = &w->m.mem;
  w->o.node_id = "fuzz-sink";
  if (f & 16) {
    w->annot[0].key = "zone";
    w->annot[0].value = "z1";
    w->annot[1].key = "";
    w->annot[1].value = "";
    w->o.node_annotations = w->annot;
    w->o.nnode_annotations = 2;
  }
  w->o.collections = w->colls;
  w->o.ncollections = w->nc;
  w->o.incremental = f & 1;
  w->o.journal_size = (f >> 1) & 7;
  w->o.service = w->service;
  if (!(f & 128)) {
    w->o.apply = on_apply;
  }
  w->o.user_data = w;
  if (!(g & 8)) {
    w->o.on_event = on_event;
  }
  w->o.name_rules = (mcp_name_rules)(g % 3);
  if (g & 4) {
    w->o.max_name_len = 16;
    w->o.max_version_len = 16;
    w->o.max_resources = 4;
    w->o.max_metadata = 1;
  }
  w->incremental = w->service == MCP_SERVICE_RESOURCE
                       ? (f & 1)
                       : w->service == MCP_SERVICE_AGGREGATED_INCREMENTAL;
  FZ_LOG("sink: service %d incremental %d collections %zu journal %zu flags "
         "%02x/%02x",
         (int)w->service, w->incremental, w->nc, w->o.journal_size, f, g);
  if (setup_fail & 7) {
    fz_mem_arm(&w->m, setup_fail & 7);
  }
  long fired = w->m.fired;
  int rv = mcp_sink_state_new(&w->st, &w->o);
  fz_check_nomem(&w->m, fired, rv, "sink_state_new");
  FZ_CHECK(rv == 0 || rv == MCP_ERR_NOMEM, "sink_state_new: %d", rv);
  if (rv == 0) {
    FZ_CHECK(mcp_sink_state_service(w->st) == w->service, "service");
    rv = session_open(w);
  }
  fz_mem_disarm(&w->m);

  while (rv == 0 && in.n) {
    uint8_t op = fz_u8(&in) % SNK_NOPS;
    switch (op) {
    case SNK_RECV_RAW: {
      read_reject(w, &in);
      size_t want = fz_u16(&in) % SCRIPT_RAW_MAX, got;
      const uint8_t *p = fz_take(&in, want, &got);
      feed(w, p, got);
      break;
    }
    case SNK_RECV:
      act_recv(w, &in);
      break;
    case SNK_DRAIN:
      FZ_LOG("drain");
      drain(w);
      break;
    case SNK_NEXT:
      produce(w);
      break;
    case SNK_RECONNECT:
      reconnect(w);
      break;
    case SNK_STATUS:
      introspect(w);
      break;
    case SNK_ADVANCE:
      w->ts += (mcp_tstamp)fz_u16(&in) * MCP_MILLISECONDS;
      break;
    default: {
      unsigned k = 1 + fz_u8(&in) % 48;
      FZ_LOG("fail allocation +%u", k);
      fz_mem_arm(&w->m, k);
      break;
    }
    }
  }

  fz_mem_disarm(&w->m);
  if (w->s) {
    drain(w);
    check_state(w, "end");
  }
  mcp_sink_session_del(w->s);
  mcp_sink_state_del(w->st);
  FZ_CHECK(w->m.live == 0, "%ld blocks leaked", w->m.live);
  for (size_t i = 0; i < w->nc; ++i) {
    ml_clear(&w->c[i].held);
    free(w->c[i].acked);
    free(w->c[i].ans_nonce);
  }
  for (size_t i = 0; i < w->nfq; ++i) {
    free(w->fq[i].coll);
    free(w->fq[i].nonce);
  }
  ml_clear(&w->next);
  free(w->next_acked);
  free(w);
  return 0;
}
