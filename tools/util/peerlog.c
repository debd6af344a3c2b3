/* Per-peer limits on stream log lines, with a summary per window
 * (peerlog.h). A small open-addressing table of the peers seen in the
 * current windows; a peer whose window is over and summarised leaves. */
#include "util/peerlog.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define KEY_MAX 200
#define MAX_PEERS 4096 /* beyond, new peers log as if unlimited */
#define TOLD_MAX 4096  /* peers warned of failing streams, remembered */
#define GRPC_DEFAULT_RECV_MAX (4u << 20)

typedef struct entry {
  char key[KEY_MAX]; /* "" when free */
  uint64_t start;    /* the window's start */
  uint64_t opened, closed, reset, failing, logged, suppressed;
} entry;

struct tool_peerlog {
  pthread_mutex_t mu;
  size_t per_window;
  uint64_t window;
  entry *v;
  size_t cap, n;
  /* The largest push of the current window. */
  char big_coll[KEY_MAX];
  size_t big_bytes;
  uint64_t big_at;
  /* Hashes of the peers warned of failing streams (0: free); cleared
   * when full. */
  uint64_t told[TOLD_MAX];
  size_t ntold;
};

tool_peerlog *tool_peerlog_new(size_t per_window, uint64_t window) {
  tool_peerlog *pl = calloc(1, sizeof(*pl));
  if (!pl)
    return NULL;
  pl->cap = 64;
  pl->v = calloc(pl->cap, sizeof(*pl->v));
  if (!pl->v || pthread_mutex_init(&pl->mu, NULL) != 0) {
    free(pl->v);
    free(pl);
    return NULL;
  }
  pl->per_window = per_window;
  pl->window = window;
  return pl;
}

void tool_peerlog_del(tool_peerlog *pl) {
  if (!pl)
    return;
  pthread_mutex_destroy(&pl->mu);
  free(pl->v);
  free(pl);
}

/* "ipv4:1.2.3.4:5" or "1.2.3.4:5" -> "1.2.3.4"; "[::1]:5" -> "[::1]". */
static void host_of(const char *peer, char *out) {
  const char *p = peer ? peer : "";
  if (!strncmp(p, "ipv4:", 5) || !strncmp(p, "ipv6:", 5))
    p += 5;
  size_t n = strlen(p);
  const char *colon = strrchr(p, ':');
  if (strncmp(p, "unix:", 5) != 0 && colon &&
      (p[0] != '[' || colon > strchr(p, ']')))
    n = (size_t)(colon - p);
  if (n >= KEY_MAX)
    n = KEY_MAX - 1;
  memcpy(out, p, n);
  out[n] = '\0';
}

static size_t hash(const char *s) {
  size_t h = 1469598103934665603u;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211u;
  return h;
}

/* 1 the first time |key| is seen (it is then remembered). */
static int tell_once(tool_peerlog *pl, const char *key) {
  uint64_t h = (uint64_t)hash(key) | 1; /* never 0 */
  if (pl->ntold * 2 >= TOLD_MAX) {
    memset(pl->told, 0, sizeof(pl->told));
    pl->ntold = 0;
  }
  size_t i = (size_t)(h % TOLD_MAX);
  for (; pl->told[i]; i = (i + 1) % TOLD_MAX)
    if (pl->told[i] == h)
      return 0;
  pl->told[i] = h;
  pl->ntold++;
  return 1;
}

/* The warning of tool_peerlog_stream() (peerlog.h). */
static void warn_failing(tool_peerlog *pl, const entry *e, uint64_t now) {
  unsigned long long secs = (now - e->start) / 1000000000u + 1;
  if (!pl->big_bytes)
    log_warn("peer %s: %llu streams in %llu s were reset by the client "
             "after asking; the sink's log says why it fails",
             e->key, (unsigned long long)e->failing, secs);
  else if (pl->big_bytes > GRPC_DEFAULT_RECV_MAX)
    log_warn("peer %s: %llu streams in %llu s were reset by the client "
             "after asking; the largest push lately was %s (%.1f MB): a "
             "gRPC receive limit (4 MiB by default) below that is the "
             "likely cause; raise it on the sink (Istio: --mcpMaxMsgSize). "
             "Its new streams are paced at --stream-rate.",
             e->key, (unsigned long long)e->failing, secs, pl->big_coll,
             (double)pl->big_bytes / 1e6);
  else
    log_warn("peer %s: %llu streams in %llu s were reset by the client "
             "after asking; the largest push lately was %s (%zu bytes); "
             "the sink's log says why it fails",
             e->key, (unsigned long long)e->failing, secs, pl->big_coll,
             pl->big_bytes);
}

void tool_peerlog_push(tool_peerlog *pl, const char *collection,
                       size_t bytes, uint64_t now) {
  if (!pl)
    return;
  pthread_mutex_lock(&pl->mu);
  if (bytes >= pl->big_bytes || now - pl->big_at >= pl->window) {
    snprintf(pl->big_coll, sizeof(pl->big_coll), "%s",
             collection ? collection : "");
    pl->big_bytes = bytes;
    pl->big_at = now;
  }
  pthread_mutex_unlock(&pl->mu);
}

static void summarise(tool_peerlog *pl, const entry *e) {
  if (!e->suppressed)
    return;
  log_warn("peer %s: %llu streams in %llu s, %llu reset by the client; "
           "%llu stream lines not logged",
           e->key, (unsigned long long)e->opened,
           (unsigned long long)(pl->window / 1000000000u),
           (unsigned long long)e->reset,
           (unsigned long long)e->suppressed);
}

/* Removes entry |i| (backward-shift deletion keeps the probes intact). */
static void remove_at(tool_peerlog *pl, size_t i) {
  size_t mask = pl->cap - 1;
  pl->v[i].key[0] = '\0';
  pl->n--;
  for (size_t j = (i + 1) & mask; pl->v[j].key[0]; j = (j + 1) & mask) {
    size_t home = hash(pl->v[j].key) & mask;
    if (((j - home) & mask) >= ((j - i) & mask)) {
      pl->v[i] = pl->v[j];
      pl->v[j].key[0] = '\0';
      i = j;
    }
  }
}

static void flush_locked(tool_peerlog *pl, uint64_t now) {
  for (size_t i = 0; i < pl->cap;) {
    entry *e = &pl->v[i];
    if (e->key[0] && now - e->start >= pl->window) {
      summarise(pl, e);
      remove_at(pl, i); /* another may have moved into |i| */
      continue;
    }
    i++;
  }
}

static int grow(tool_peerlog *pl) {
  size_t cap = pl->cap * 2;
  entry *v = calloc(cap, sizeof(*v));
  if (!v)
    return -1;
  for (size_t i = 0; i < pl->cap; i++) {
    if (!pl->v[i].key[0])
      continue;
    size_t j = hash(pl->v[i].key) & (cap - 1);
    while (v[j].key[0])
      j = (j + 1) & (cap - 1);
    v[j] = pl->v[i];
  }
  free(pl->v);
  pl->v = v;
  pl->cap = cap;
  return 0;
}

int tool_peerlog_stream(tool_peerlog *pl, const char *peer, int opened,
                        int flags, uint64_t now) {
  if (!pl)
    return 1;
  char key[KEY_MAX];
  host_of(peer, key);
  pthread_mutex_lock(&pl->mu);
  int allow = 1;
  size_t mask = pl->cap - 1, i = hash(key) & mask;
  while (pl->v[i].key[0] && strcmp(pl->v[i].key, key) != 0)
    i = (i + 1) & mask;
  entry *e = &pl->v[i];
  if (e->key[0] && now - e->start >= pl->window) {
    summarise(pl, e); /* its window is over: a new one starts */
    uint64_t keep = now;
    memset(e, 0, sizeof(*e));
    memcpy(e->key, key, sizeof(key));
    e->start = keep;
  } else if (!e->key[0]) {
    if (pl->n >= MAX_PEERS || (pl->n + 1) * 2 > pl->cap) {
      if (pl->n >= MAX_PEERS || grow(pl) != 0) {
        pthread_mutex_unlock(&pl->mu);
        return 1;
      }
      mask = pl->cap - 1;
      for (i = hash(key) & mask; pl->v[i].key[0]; i = (i + 1) & mask)
        ;
      e = &pl->v[i];
    }
    memset(e, 0, sizeof(*e));
    memcpy(e->key, key, sizeof(key));
    e->start = now;
    pl->n++;
  }
  if (opened)
    e->opened++;
  else {
    e->closed++;
    e->reset += (flags & TOOL_PEERLOG_RESET) != 0;
    if ((flags & (TOOL_PEERLOG_RESET | TOOL_PEERLOG_ASKED)) ==
            (TOOL_PEERLOG_RESET | TOOL_PEERLOG_ASKED) &&
        ++e->failing == TOOL_PEERLOG_FAILING_MIN && tell_once(pl, key))
      warn_failing(pl, e, now);
  }
  if (e->logged < pl->per_window)
    e->logged++;
  else {
    e->suppressed++;
    allow = 0;
  }
  pthread_mutex_unlock(&pl->mu);
  return allow;
}

void tool_peerlog_flush(tool_peerlog *pl, uint64_t now) {
  if (!pl)
    return;
  pthread_mutex_lock(&pl->mu);
  flush_locked(pl, now);
  pthread_mutex_unlock(&pl->mu);
}
