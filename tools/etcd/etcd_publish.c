/* etcdpub (etcd_publish.h): the loader's documents into etcd. */
#include "etcd/etcd_publish.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loader/config_internal.h"
#include "util/grow.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

/* A key and the hash of its value. */
typedef struct kh {
  char *key;
  uint64_t hash;
} kh;

/* One change to publish: a put (text) or a delete (text NULL). */
typedef struct change {
  char *key;
  uint64_t hash;
  char *text;
  size_t len;
} change;

typedef struct changes {
  change *v;
  size_t n, cap;
} changes;

struct etcdpub {
  mcpetcd *client;
  char *prefix;
  void (*log)(int, const char *, void *);
  void *ud;
  pthread_t thread;
  int started;

  /* Main thread: what was offered last, per collection. */
  struct pubcoll *colls;
  size_t ncolls, capcolls;
  int offered_once;

  pthread_mutex_t mu; /* guards the queue, |full|, stats and stopping */
  pthread_cond_t cv;
  changes queue;
  int full; /* the queue holds a whole set: delete what it lacks */
  int stopping;
  etcdpub_stats stats;

  /* The thread: what etcd holds under the prefix, sorted by key. */
  kh *have;
  size_t nhave;
  int have_loaded;
};


static int cmp_kh(const void *a, const void *b) {
  return strcmp(((const kh *)a)->key, ((const kh *)b)->key);
}

static void kh_free(kh *v, size_t n) {
  for (size_t i = 0; i < n; ++i)
    free(v[i].key);
  free(v);
}

static void changes_clear(changes *c) {
  for (size_t i = 0; i < c->n; ++i) {
    free(c->v[i].key);
    free(c->v[i].text);
  }
  free(c->v);
  *c = (changes){0};
}

static int changes_add(changes *c, const char *key, uint64_t hash,
                       const char *text, size_t len) {
  change *v = tool_grow(c->v, c->n, &c->cap, sizeof *v, 64);
  if (!v)
    return MCPETCD_ERR_NOMEM;
  c->v = v;
  change *x = &c->v[c->n];
  *x = (change){strdup(key), hash, NULL, len};
  if (text && (x->text = malloc(len ? len : 1)))
    memcpy(x->text, text, len);
  if (!x->key || (text && !x->text)) {
    free(x->key);
    free(x->text);
    return MCPETCD_ERR_NOMEM;
  }
  c->n++;
  return 0;
}

/* Appends |more| to |to| (taking its entries); frees |more|'s array. */
static int changes_append(changes *to, changes *more) {
  if (to->n + more->n > to->cap) {
    size_t cap = to->n + more->n;
    change *v = realloc(to->v, (cap ? cap : 1) * sizeof *v);
    if (!v)
      return MCPETCD_ERR_NOMEM;
    to->v = v;
    to->cap = cap;
  }
  if (more->n)
    memcpy(to->v + to->n, more->v, more->n * sizeof *more->v);
  to->n += more->n;
  free(more->v);
  *more = (changes){0};
  return 0;
}

/* ---- the main thread ---- */

/* What was offered of one collection: its loader generation, and its keys
 * with the hashes of their texts, in the loader's (name) order. */
typedef struct pubcoll {
  char *name;
  uint64_t gen;
  kh *v;
  size_t n;
} pubcoll;

/* A collection whose new list waits for the offer to be taken. */
typedef struct staged {
  pubcoll *pc;
  uint64_t gen;
  kh *v;
  size_t n;
} staged;

static pubcoll *pubcoll_get(etcdpub *p, const char *name) {
  for (size_t i = 0; i < p->ncolls; ++i)
    if (!strcmp(p->colls[i].name, name))
      return &p->colls[i];
  pubcoll *c = tool_grow(p->colls, p->ncolls, &p->capcolls, sizeof *c, 16);
  if (!c)
    return NULL;
  p->colls = c;
  char *n = strdup(name);
  if (!n)
    return NULL;
  /* A generation the loader never gives: the first offer sees a change. */
  p->colls[p->ncolls] = (pubcoll){n, UINT64_MAX, NULL, 0};
  return &p->colls[p->ncolls++];
}

/* The changes of collection |i| against what was offered of it (|pc|),
 * and its new list in |*st|. Keys share their order with names, the
 * collection's part of them being the same. */
static int diff_coll(etcdpub *p, const mcpcfg_loader *l, size_t i,
                     pubcoll *pc, changes *ch, staged *st) {
  const char *coll = mcpcfg_loader_collection_name(l, i);
  const mcp_resource *res;
  size_t m = mcpcfg_loader_resources(l, i, &res);
  kh *cur = calloc(m ? m : 1, sizeof *cur);
  if (!cur)
    return MCPETCD_ERR_NOMEM;
  int rv = 0;
  size_t k = 0, j = 0;
  for (; !rv && (k < m || j < pc->n);) {
    char *key = NULL;
    if (k < m) {
      size_t kl = strlen(p->prefix) + strlen(coll) + strlen(res[k].name) + 2;
      if (!(key = malloc(kl))) {
        rv = MCPETCD_ERR_NOMEM;
        break;
      }
      snprintf(key, kl, "%s%s/%s", p->prefix, coll, res[k].name);
    }
    int cmp = !key ? 1 : j == pc->n ? -1 : strcmp(key, pc->v[j].key);
    if (cmp > 0) { /* gone */
      free(key);
      rv = changes_add(ch, pc->v[j++].key, 0, NULL, 0);
      continue;
    }
    size_t len;
    const char *text = mcpcfg_loader_text(l, i, k, &len);
    uint64_t hash = text ? mcpcfg_hash64(text, len) : 0;
    if (text && (cmp < 0 || hash != pc->v[j].hash))
      rv = changes_add(ch, key, hash, text, len);
    cur[k++] = (kh){key, hash};
    j += cmp == 0;
  }
  if (rv) {
    kh_free(cur, k);
    return rv;
  }
  *st = (staged){pc, mcpcfg_loader_collection_gen(l, i), cur, m};
  return 0;
}

int etcdpub_offer(etcdpub *p, const mcpcfg_loader *l) {
  size_t nc = mcpcfg_loader_collection_count(l), nst = 0;
  staged *st = calloc(nc ? nc : 1, sizeof *st);
  changes ch = {0};
  int rv = st ? 0 : MCPETCD_ERR_NOMEM;
  /* Only the collections the loader changed: O(changed collections). */
  for (size_t i = 0; !rv && i < nc; ++i) {
    pubcoll *pc = pubcoll_get(p, mcpcfg_loader_collection_name(l, i));
    if (!pc)
      rv = MCPETCD_ERR_NOMEM;
    else if (pc->gen != mcpcfg_loader_collection_gen(l, i) &&
             (rv = diff_coll(p, l, i, pc, &ch, &st[nst])) == 0)
      ++nst;
  }
  size_t nch = ch.n;
  if (!rv) {
    pthread_mutex_lock(&p->mu);
    rv = changes_append(&p->queue, &ch);
    if (!rv) {
      p->full |= !p->offered_once; /* the first offer is the whole set */
      p->stats.synced = 0;
      pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
  }
  for (size_t k = 0; k < nst; ++k) {
    if (rv) { /* not taken: offered as before, the next offer retries */
      kh_free(st[k].v, st[k].n);
      continue;
    }
    kh_free(st[k].pc->v, st[k].pc->n);
    st[k].pc->v = st[k].v;
    st[k].pc->n = st[k].n;
    st[k].pc->gen = st[k].gen;
  }
  if (!rv)
    p->offered_once = 1;
  changes_clear(&ch);
  free(st);
  return rv ? rv : (int)nch;
}

/* ---- the thread ---- */


/* Reads what etcd holds under the prefix (keys and value hashes). */
static int load_have(etcdpub *p) {
  mcpetcd_kvs kvs;
  int rv = mcpetcd_get_prefix(p->client, p->prefix, 0, &kvs);
  if (rv < 0)
    return rv;
  kh *h = calloc(kvs.n ? kvs.n : 1, sizeof *h);
  size_t n = 0;
  for (; h && n < kvs.n; ++n) {
    if (!(h[n].key = strdup(kvs.kvs[n].key))) {
      kh_free(h, n);
      h = NULL;
      break;
    }
    h[n].hash = mcpcfg_hash64(kvs.kvs[n].value, kvs.kvs[n].value_len);
  }
  mcpetcd_kvs_free(&kvs);
  if (!h)
    return MCPETCD_ERR_NOMEM;
  kh_free(p->have, p->nhave);
  p->have = h; /* a Range returns keys in byte order: sorted */
  p->nhave = n;
  p->have_loaded = 1;
  return 0;
}

static const kh *have_find(const etcdpub *p, const char *key) {
  kh k = {(char *)key, 0};
  return bsearch(&k, p->have, p->nhave, sizeof *p->have, cmp_kh);
}

static int cmp_change(const void *a, const void *b) {
  const change *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c ? c : (x < y ? -1 : x > y); /* equal keys: queue order */
}

static int cmp_change_key(const void *a, const void *b) {
  return strcmp(((const change *)a)->key, ((const change *)b)->key);
}

/* Keeps the last change of each key, sorted by key. */
static void squash(changes *q) {
  qsort(q->v, q->n, sizeof *q->v, cmp_change);
  size_t w = 0;
  for (size_t i = 0; i < q->n; ++i) {
    if (i + 1 < q->n && !strcmp(q->v[i].key, q->v[i + 1].key)) {
      free(q->v[i].key);
      free(q->v[i].text);
      continue;
    }
    q->v[w++] = q->v[i];
  }
  q->n = w;
}

/* The operations that bring etcd from |have| to |q|; with |full| also the
 * deletes of what etcd holds and |q| does not define. Borrowed strings. */
static int plan(etcdpub *p, const changes *q, int full, mcpetcd_op **pops,
                size_t *pn) {
  mcpetcd_op *ops = calloc(q->n + (full ? p->nhave : 0) + 1, sizeof *ops);
  if (!ops)
    return MCPETCD_ERR_NOMEM;
  size_t n = 0;
  for (size_t i = 0; i < q->n; ++i) {
    const change *c = &q->v[i];
    const kh *h = have_find(p, c->key);
    if (c->text ? h && h->hash == c->hash : !h)
      continue; /* etcd holds that already: rewriting it would move its
                   mod_revision, and every sink would be sent it again */
    ops[n++] = (mcpetcd_op){c->key, (const uint8_t *)c->text, c->len};
  }
  for (size_t i = 0; full && i < p->nhave; ++i) {
    change k = {p->have[i].key, 0, NULL, 0};
    if (!bsearch(&k, q->v, q->n, sizeof *q->v, cmp_change_key))
      ops[n++] = (mcpetcd_op){p->have[i].key, NULL, 0};
  }
  *pops = ops;
  *pn = n;
  return 0;
}

/* Writes |ops| in transactions within etcd's default limits. Returns 0, or
 * the error of the first that failed (those before it are applied). */
static int write_ops(etcdpub *p, const mcpetcd_op *ops, size_t n) {
  for (size_t i = 0; i < n;) {
    size_t k = i, bytes = 0;
    while (k < n && k - i < MCPETCD_TXN_OPS) {
      size_t b = ops[k].value_len + strlen(ops[k].key);
      if (k > i && bytes + b > MCPETCD_TXN_BYTES)
        break;
      bytes += b;
      ++k;
    }
    int64_t rev = 0;
    int rv = mcpetcd_txn(p->client, ops + i, k - i, &rev);
    if (rv < 0)
      return rv;
    size_t puts = 0;
    for (size_t j = i; j < k; ++j)
      puts += ops[j].value != NULL;
    pthread_mutex_lock(&p->mu);
    p->stats.txns++;
    p->stats.puts += puts;
    p->stats.deletes += k - i - puts;
    p->stats.revision = rev;
    pthread_mutex_unlock(&p->mu);
    mcpetcd_say(p->log, p->ud, 0, "published %zu puts and %zu deletes at revision %" PRId64,
        puts, k - i - puts, rev);
    i = k;
  }
  return 0;
}

/* etcd now holds |q| (sorted by key) and, with |full|, nothing else under
 * the prefix: |have| follows, by a merge, taking |q|'s keys. */
static void have_update(etcdpub *p, changes *q, int full) {
  kh *nh = malloc((p->nhave + q->n + 1) * sizeof *nh);
  if (!nh) { /* read it again before the next plan */
    p->have_loaded = 0;
    return;
  }
  size_t n = 0, i = 0, j = 0;
  while (i < p->nhave || j < q->n) {
    int cmp = i == p->nhave ? 1 : j == q->n ? -1
                                            : strcmp(p->have[i].key,
                                                     q->v[j].key);
    if (cmp < 0) { /* untouched: kept, unless the set was whole */
      if (full)
        free(p->have[i].key);
      else
        nh[n++] = p->have[i];
      ++i;
      continue;
    }
    if (cmp == 0)
      free(p->have[i++].key);
    if (q->v[j].text) {
      nh[n++] = (kh){q->v[j].key, q->v[j].hash};
      q->v[j].key = NULL;
    }
    ++j;
  }
  free(p->have);
  p->have = nh;
  p->nhave = n;
}

static void *run(void *arg) {
  etcdpub *p = arg;
  unsigned backoff = BACKOFF_MIN_MS;
  changes q = {0};
  int full = 0;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    while (!p->stopping && !p->queue.n && !q.n && !p->full && !full)
      pthread_cond_wait(&p->cv, &p->mu);
    int stop = p->stopping;
    /* What is queued joins what failed before, in order. */
    int rv = stop ? 0 : changes_append(&q, &p->queue);
    if (!rv) {
      full |= p->full;
      p->full = 0;
    }
    pthread_mutex_unlock(&p->mu);
    if (stop)
      break;
    mcpetcd_op *ops = NULL;
    size_t n = 0;
    if (!rv && !p->have_loaded)
      rv = load_have(p);
    if (!rv) {
      squash(&q);
      rv = plan(p, &q, full, &ops, &n);
    }
    if (!rv)
      rv = write_ops(p, ops, n);
    free(ops);
    if (rv < 0) {
      /* Applied or not, etcd says best what it holds now. */
      p->have_loaded = 0;
      pthread_mutex_lock(&p->mu);
      p->stats.failures++;
      pthread_mutex_unlock(&p->mu);
      mcpetcd_say(p->log, p->ud, 1, "cannot publish into etcd: %s (%s); retrying in %u ms",
          mcpetcd_strerror(rv), mcpetcd_last_error(p->client), backoff);
      if (mcpetcd_nap(&p->mu, &p->cv, &p->stopping, backoff))
        break;
      backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
      continue;
    }
    backoff = BACKOFF_MIN_MS;
    have_update(p, &q, full);
    changes_clear(&q);
    full = 0;
    pthread_mutex_lock(&p->mu);
    p->stats.synced = !p->queue.n;
    pthread_mutex_unlock(&p->mu);
  }
  changes_clear(&q);
  return NULL;
}

int etcdpub_start(etcdpub **pp, const mcpetcd_options *etcd,
                  const char *prefix,
                  void (*log)(int error, const char *message, void *ud),
                  void *ud, char *err, size_t errlen) {
  etcdpub *p = calloc(1, sizeof *p);
  if (!p || !(p->prefix = strdup(prefix && prefix[0] ? prefix : "/mcp/"))) {
    free(p);
    return MCPETCD_ERR_NOMEM;
  }
  p->log = log;
  p->ud = ud;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  int rv = mcpetcd_new(&p->client, etcd, err, errlen);
  if (!rv && pthread_create(&p->thread, NULL, run, p) != 0)
    rv = MCPETCD_ERR_NOMEM;
  if (rv < 0) {
    etcdpub_stop(p);
    return rv;
  }
  p->started = 1;
  *pp = p;
  return 0;
}

void etcdpub_stats_get(etcdpub *p, etcdpub_stats *st) {
  pthread_mutex_lock(&p->mu);
  *st = p->stats;
  pthread_mutex_unlock(&p->mu);
}

void etcdpub_stop(etcdpub *p) {
  if (!p)
    return;
  if (p->started) {
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
  }
  changes_clear(&p->queue);
  for (size_t i = 0; i < p->ncolls; ++i) {
    free(p->colls[i].name);
    kh_free(p->colls[i].v, p->colls[i].n);
  }
  free(p->colls);
  kh_free(p->have, p->nhave);
  mcpetcd_free(p->client);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p->prefix);
  free(p);
}
