/* etcdsrc (etcd_source.h): a thread that mirrors an etcd prefix into a
 * queue of store changes. */
#include "etcd/etcd_source.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loader/config_internal.h"
#include "util/sorted.h"

#define DEFAULT_PREFIX "/mcp/"
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

/* One key held: the mod_revision last seen and the last document of it that
 * converted (NULL when none did yet). */
typedef struct entry {
  char *key;
  int64_t mod_revision;
  mcpcfg_doc *doc;
} entry;

/* One change for the store. A delete keeps the document it removes, for
 * its collection and name. */
typedef struct change {
  struct change *next;
  int is_delete;
  mcpcfg_doc *doc;
  int64_t mod_revision;
  double received; /* monotonic seconds */
} change;

struct etcdsrc {
  mcpetcd *client;
  char *prefix;
  mcpcfg_options parse;
  void (*notify)(void *);
  void (*log)(int, const char *, void *);
  void *user_data;
  pthread_t thread;
  int started;

  /* The etcd thread only. */
  entry *held;
  size_t nheld, capheld;

  pthread_mutex_t mu; /* guards what follows */
  pthread_cond_t cv;  /* stop, for the backoff sleeps */
  int stopping;
  change *head, **tail; /* the queue, oldest first */
  int64_t queued_revision;
  int load_queued; /* the first read is wholly in the queue */
  etcdsrc_stats stats;
};

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}


/* Queues one change. */
static int enqueue(etcdsrc *s, int is_delete, mcpcfg_doc *doc, int64_t rev,
                   double received) {
  change *c = malloc(sizeof *c);
  if (!c)
    return MCPETCD_ERR_NOMEM;
  ++doc->refs;
  *c = (change){NULL, is_delete, doc, rev, received};
  pthread_mutex_lock(&s->mu);
  *s->tail = c;
  s->tail = &c->next;
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static void free_changes(change *c) {
  while (c) {
    change *next = c->next;
    mcpcfg_doc_unref(c->doc);
    free(c);
    c = next;
  }
}

/* Converts the value of |key|: its one document, when it converts and names
 * |key|; NULL otherwise (reported). */
static mcpcfg_doc *convert(etcdsrc *s, const char *key, const uint8_t *value,
                           size_t len) {
  char path[600];
  snprintf(path, sizeof path, "etcd:%s", key);
  mcpcfg_doc **docs = NULL;
  size_t ndocs = 0, bad = 0;
  int rv = 1;
  if (len > s->parse.max_file_size) /* as for a file */
    mcpcfg_report(&s->parse, path, 0,
                  "value of %zu bytes, over the limit of %zu: skipped", len,
                  s->parse.max_file_size);
  else
    rv = mcpcfg_parse(&s->parse, path, value, len, &docs, &ndocs, &bad);
  mcpcfg_doc *doc = NULL;
  if (rv == 0 && ndocs == 1 && bad == 0) {
    const char *c = docs[0]->collection, *n = docs[0]->res.name;
    size_t pl = strlen(s->prefix), cl = strlen(c);
    if (!strncmp(key, s->prefix, pl) && !strncmp(key + pl, c, cl) &&
        key[pl + cl] == '/' && !strcmp(key + pl + cl + 1, n))
      doc = docs[0];
    else
      mcpcfg_report(&s->parse, path, docs[0]->line,
                    "the document is %s %s, which belongs at key %s%s/%s: "
                    "skipped",
                    c, n, s->prefix, c, n);
  } else if (rv == 0 && ndocs + bad != 1) {
    mcpcfg_report(&s->parse, path, 0,
                  "a key holds one document, not %zu: skipped", ndocs + bad);
  } else if (rv < 0) {
    mcpcfg_report(&s->parse, path, 0, "cannot convert: %s",
                  mcpcfg_strerror(rv));
  } /* else reported by the parser */
  for (size_t i = 0; i < ndocs; ++i)
    if (docs[i] != doc)
      mcpcfg_doc_unref(docs[i]);
  free(docs);
  if (!doc) {
    pthread_mutex_lock(&s->mu);
    ++s->stats.bad_documents;
    pthread_mutex_unlock(&s->mu);
  }
  return doc;
}

/* Binary search: the index of |key| in held, or where it would go. */
static size_t find(const etcdsrc *s, const char *key, int *found) {
  return tool_sorted_find(s->held, s->nheld, sizeof(entry),
                          offsetof(entry, key), key, found);
}

/* A put of |key| at |rev|. The entry at |i| exists (found) or is inserted
 * there. The entry's mod_revision moves only once the change is queued (or
 * the document reported), so a change that could not be queued is found
 * again by the next read of everything. */
static int put(etcdsrc *s, size_t i, int found, const char *key,
               const uint8_t *value, size_t len, int64_t rev, double now) {
  if (!found) {
    if (s->nheld == s->capheld) {
      size_t cap = s->capheld ? s->capheld * 2 : 256;
      entry *h = realloc(s->held, cap * sizeof *h);
      if (!h)
        return MCPETCD_ERR_NOMEM;
      s->held = h;
      s->capheld = cap;
    }
    char *k = strdup(key);
    if (!k)
      return MCPETCD_ERR_NOMEM;
    memmove(&s->held[i + 1], &s->held[i], (s->nheld - i) * sizeof *s->held);
    s->held[i] = (entry){k, 0, NULL};
    ++s->nheld;
  }
  entry *e = &s->held[i];
  mcpcfg_doc *doc = convert(s, key, value, len);
  if (!doc) { /* keeps its last good content, if any */
    e->mod_revision = rev;
    return 0;
  }
  int rv = enqueue(s, 0, doc, rev, now);
  if (rv < 0) {
    mcpcfg_doc_unref(doc);
    return rv;
  }
  e->mod_revision = rev;
  if (e->doc)
    mcpcfg_doc_unref(e->doc);
  e->doc = doc;
  return 0;
}

static int del(etcdsrc *s, size_t i, int64_t rev, double now) {
  entry *e = &s->held[i];
  if (e->doc) {
    int rv = enqueue(s, 1, e->doc, rev, now);
    if (rv < 0)
      return rv;
    mcpcfg_doc_unref(e->doc);
  }
  free(e->key);
  memmove(&s->held[i], &s->held[i + 1], (s->nheld - i - 1) * sizeof *s->held);
  --s->nheld;
  return 0;
}

/* Queues the difference between what is held and the snapshot |kv| (both
 * in key order): a merge walk, so O(held + snapshot) and a document is
 * converted only when its mod_revision changed. */
static int resync(etcdsrc *s, const mcpetcd_kvs *kv, double now) {
  size_t i = 0, j = 0;
  int rv = 0;
  while (!rv && (i < s->nheld || j < kv->n)) {
    int c = i == s->nheld ? 1 : j == kv->n ? -1
                                           : strcmp(s->held[i].key,
                                                    kv->kvs[j].key);
    if (c < 0) { /* gone while we were not watching */
      rv = del(s, i, kv->revision, now);
      continue; /* |i| now names the next entry */
    }
    const mcpetcd_kv *k = &kv->kvs[j++];
    if (c > 0 || s->held[i].mod_revision != k->mod_revision)
      rv = put(s, i, c == 0, k->key, k->value, k->value_len, k->mod_revision,
               now);
    ++i;
  }
  return rv;
}

static int on_watch(const mcpetcd_event *evs, size_t n, int64_t revision,
                    void *ud) {
  etcdsrc *s = ud;
  double now = mono_s();
  int rv = 0;
  for (size_t k = 0; !rv && k < n; ++k) {
    int found;
    size_t i = find(s, evs[k].kv.key, &found);
    if (evs[k].is_delete)
      rv = found ? del(s, i, evs[k].kv.mod_revision, now) : 0;
    else
      rv = put(s, i, found, evs[k].kv.key, evs[k].kv.value,
               evs[k].kv.value_len, evs[k].kv.mod_revision, now);
  }
  if (!rv) {
    pthread_mutex_lock(&s->mu);
    s->queued_revision = s->stats.revision = revision;
    pthread_mutex_unlock(&s->mu);
  }
  if (n && s->notify)
    s->notify(s->user_data);
  /* Out of memory: end the watch; the thread reads everything again. */
  return rv;
}

/* Sleeps |ms| or until stopped; returns 1 when stopping. */

static int stopping(etcdsrc *s) {
  pthread_mutex_lock(&s->mu);
  int v = s->stopping;
  pthread_mutex_unlock(&s->mu);
  return v;
}

static void update_failovers(etcdsrc *s) {
  pthread_mutex_lock(&s->mu);
  s->stats.failovers = mcpetcd_failovers(s->client);
  pthread_mutex_unlock(&s->mu);
}

static void *run(void *arg) {
  etcdsrc *s = arg;
  unsigned backoff = BACKOFF_MIN_MS;
  int loaded = 0;
  while (!stopping(s)) {
    mcpetcd_kvs kv;
    int rv = mcpetcd_get_prefix(s->client, s->prefix, 0, &kv);
    update_failovers(s);
    if (rv < 0) {
      mcpetcd_say(s->log, s->user_data, 1, "cannot read %s from etcd: %s (%s); retrying in %u ms",
          s->prefix, mcpetcd_strerror(rv), mcpetcd_last_error(s->client),
          backoff);
      if (mcpetcd_nap(&s->mu, &s->cv, &s->stopping, backoff))
        break;
      backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
      continue;
    }
    rv = resync(s, &kv, mono_s());
    pthread_mutex_lock(&s->mu);
    if (!rv) {
      s->queued_revision = s->stats.revision = kv.revision;
      if (loaded)
        ++s->stats.reloads;
      s->load_queued = 1;
    }
    pthread_mutex_unlock(&s->mu);
    if (s->notify)
      s->notify(s->user_data);
    if (rv < 0) {
      mcpetcd_kvs_free(&kv);
      mcpetcd_say(s->log, s->user_data, 1, "out of memory mirroring etcd; retrying in %u ms", backoff);
      if (mcpetcd_nap(&s->mu, &s->cv, &s->stopping, backoff))
        break;
      continue;
    }
    mcpetcd_say(s->log, s->user_data, 0, "%s %zu keys under %s at revision %" PRId64 " from %s",
        loaded ? "read again" : "loaded", kv.n, s->prefix, kv.revision,
        mcpetcd_endpoint(s->client));
    loaded = 1;
    int64_t start = kv.revision + 1, compact = 0;
    mcpetcd_kvs_free(&kv);
    rv = mcpetcd_watch(s->client, s->prefix, start, on_watch, s, &compact);
    update_failovers(s);
    if (rv == MCPETCD_ERR_CANCELLED)
      break;
    if (rv == MCPETCD_ERR_COMPACTED) {
      mcpetcd_say(s->log, s->user_data, 0, "watch from revision %" PRId64 " compacted (oldest %" PRId64
                "): reading everything again",
          start, compact);
      backoff = BACKOFF_MIN_MS;
      continue;
    }
    mcpetcd_say(s->log, s->user_data, 1, "watch ended: %s (%s); reading again from %s in %u ms",
        mcpetcd_strerror(rv), mcpetcd_last_error(s->client),
        mcpetcd_endpoint(s->client), backoff);
    if (mcpetcd_nap(&s->mu, &s->cv, &s->stopping, backoff))
      break;
    backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
  }
  return NULL;
}

int etcdsrc_start(etcdsrc **ps, const etcdsrc_options *o, char *err,
                  size_t errlen) {
  const char *prefix = o->prefix ? o->prefix : DEFAULT_PREFIX;
  if (!prefix[0] || !o->parse) {
    snprintf(err, errlen, "the etcd prefix must not be empty");
    return MCPETCD_ERR_INVALID_ARGUMENT;
  }
  etcdsrc *s = calloc(1, sizeof *s);
  if (!s || !(s->prefix = strdup(prefix))) {
    free(s);
    return MCPETCD_ERR_NOMEM;
  }
  s->parse = *o->parse;
  s->notify = o->notify;
  s->log = o->log;
  s->user_data = o->user_data;
  s->tail = &s->head;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  int rv = mcpetcd_new(&s->client, &o->etcd, err, errlen);
  if (!rv && pthread_create(&s->thread, NULL, run, s) != 0)
    rv = MCPETCD_ERR_NOMEM;
  if (rv < 0) {
    etcdsrc_stop(s);
    return rv;
  }
  s->started = 1;
  *ps = s;
  return 0;
}

void etcdsrc_stop(etcdsrc *s) {
  if (!s)
    return;
  if (s->started) {
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    mcpetcd_watch_cancel(s->client);
    pthread_join(s->thread, NULL);
  }
  for (size_t i = 0; i < s->nheld; ++i) {
    free(s->held[i].key);
    if (s->held[i].doc)
      mcpcfg_doc_unref(s->held[i].doc);
  }
  free_changes(s->head);
  free(s->held);
  mcpetcd_free(s->client);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s->prefix);
  free(s);
}

static int apply_one(mcp_store *store, const change *c, mcp_tstamp ts) {
  if (c->is_delete)
    return mcp_store_delete(store, c->doc->collection, c->doc->res.name, ts);
  char version[24];
  snprintf(version, sizeof version, "%" PRId64, c->mod_revision);
  mcp_resource r = c->doc->res;
  r.version = version;
  return mcp_store_upsert(store, c->doc->collection, &r, ts);
}

int etcdsrc_apply(etcdsrc *s, mcp_store *store, mcp_tstamp ts) {
  pthread_mutex_lock(&s->mu);
  change *q = s->head;
  int64_t rev = s->queued_revision;
  int load_queued = s->load_queued;
  s->head = NULL;
  s->tail = &s->head;
  pthread_mutex_unlock(&s->mu);

  int changed = 0, rv = 0;
  double received = -1;
  while (q) {
    rv = apply_one(store, q, ts);
    if (rv == MCP_ERR_NOMEM)
      break; /* tried again at the next call, in order */
    if (rv < 0) /* the store refuses it (its limits): never will it take it */
      mcpetcd_say(s->log, s->user_data, 1, "etcd:%s%s/%s: the store refuses it: %s", s->prefix,
          q->doc->collection, q->doc->res.name, mcp_strerror(rv));
    else
      changed += rv;
    received = q->received;
    change *next = q->next;
    q->next = NULL;
    free_changes(q);
    q = next;
  }
  pthread_mutex_lock(&s->mu);
  if (q) { /* the rest goes back in front of what came meanwhile */
    change **end = &q;
    while (*end)
      end = &(*end)->next;
    *end = s->head;
    if (!s->head)
      s->tail = end;
    s->head = q;
  } else {
    if (rev > s->stats.applied)
      s->stats.applied = rev;
    s->stats.loaded |= load_queued;
  }
  if (received >= 0)
    s->stats.lag_seconds = mono_s() - received;
  pthread_mutex_unlock(&s->mu);
  return q ? MCP_ERR_NOMEM : changed;
}

void etcdsrc_stats_get(etcdsrc *s, etcdsrc_stats *st) {
  pthread_mutex_lock(&s->mu);
  *st = s->stats;
  pthread_mutex_unlock(&s->mu);
}
