/* Per-peer limits on stream log lines, with a summary per window
 * (peerlog.h). A small open-addressing table of the peers seen in the
 * current windows; a peer whose window is over and summarised leaves. */
#include "util/peerlog.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define KEY_MAX 200
#define MAX_PEERS 4096 /* beyond, new peers log as if unlimited */

typedef struct entry {
  char key[KEY_MAX]; /* "" when free */
  uint64_t start;    /* the window's start */
  uint64_t opened, closed, reset, logged, suppressed;
} entry;

struct tool_peerlog {
  pthread_mutex_t mu;
  size_t per_window;
  uint64_t window;
  entry *v;
  size_t cap, n;
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
                        int reset, uint64_t now) {
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
    e->reset += reset != 0;
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
