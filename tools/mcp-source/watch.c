/* Recursive directory watching on top of uv_fs_event. */
#include "mcp-source/watch.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/log.h"

typedef struct wdir {
  struct wdir *next;
  tool_watch *w;
  uv_fs_event_t h;
  dev_t dev;
  ino_t ino;
  int seen;    /* found by the current walk */
  int active;  /* the handle is started */
  char path[]; /* as reached from the root */
} wdir;

struct tool_watch {
  uv_loop_t *loop;
  char *root;
  tool_watch_cb cb;
  void *user_data;
  wdir *dirs;
  size_t nopen; /* handles not closed yet */
  int closing;
  int warned;   /* a watch failure was reported */
};

static void maybe_free(tool_watch *w) {
  if (w->closing && w->nopen == 0) {
    free(w->root);
    free(w);
  }
}

static void on_closed(uv_handle_t *h) {
  wdir *d = h->data;
  tool_watch *w = d->w;
  free(d);
  w->nopen--;
  maybe_free(w);
}

static void drop(wdir *d) {
  uv_close((uv_handle_t *)&d->h, on_closed);
}

static void on_event(uv_fs_event_t *h, const char *filename, int events,
                     int status) {
  (void)events;
  wdir *d = h->data;
  if (status < 0)
    log_debug("watch %s: %s", d->path, uv_strerror(status));
  else
    log_debug("watch %s: %s changed", d->path, filename ? filename : "?");
  d->w->cb(d->w->user_data);
}

int tool_watch_new(tool_watch **pw, uv_loop_t *loop, const char *root,
                   tool_watch_cb cb, void *user_data) {
  tool_watch *w = calloc(1, sizeof(*w));
  if (!w || !(w->root = strdup(root))) {
    free(w);
    return -1;
  }
  w->loop = loop;
  w->cb = cb;
  w->user_data = user_data;
  *pw = w;
  return 0;
}

/* Directories found by one walk, to skip loops. */
typedef struct visited {
  dev_t *dev;
  ino_t *ino;
  size_t n, cap;
} visited;

static int visited_add(visited *v, dev_t dev, ino_t ino) {
  for (size_t i = 0; i < v->n; i++) {
    if (v->dev[i] == dev && v->ino[i] == ino)
      return 0;
  }
  if (v->n == v->cap) {
    size_t cap = v->cap ? 2 * v->cap : 16;
    dev_t *d = realloc(v->dev, cap * sizeof(*d));
    if (!d)
      return -1;
    v->dev = d;
    ino_t *i = realloc(v->ino, cap * sizeof(*i));
    if (!i)
      return -1;
    v->ino = i;
    v->cap = cap;
  }
  v->dev[v->n] = dev;
  v->ino[v->n] = ino;
  v->n++;
  return 1;
}

static void watch_dir(tool_watch *w, const char *path, const struct stat *st) {
  wdir *d;
  for (d = w->dirs; d; d = d->next) {
    if (strcmp(d->path, path) == 0)
      break;
  }
  if (d && d->dev == st->st_dev && d->ino == st->st_ino) {
    d->seen = 1;
    return;
  }
  /* New, or another directory now under this path: (re)start. The old
   * entry, unseen, is dropped at the end of the walk. */
  size_t len = strlen(path);
  d = calloc(1, sizeof(*d) + len + 1);
  if (!d)
    return; /* the periodic rescan still covers it */
  memcpy(d->path, path, len + 1);
  d->w = w;
  d->dev = st->st_dev;
  d->ino = st->st_ino;
  d->seen = 1;
  d->h.data = d;
  int rv = uv_fs_event_init(w->loop, &d->h);
  if (rv == 0) {
    w->nopen++;
    rv = uv_fs_event_start(&d->h, on_event, path, 0);
    if (rv == 0) {
      d->active = 1;
      log_debug("watching %s", path);
    } else if (!w->warned) {
      w->warned = 1;
      log_warn("cannot watch %s: %s (changes are still found by the periodic "
               "rescan)", path, uv_strerror(rv));
    }
  } else {
    free(d);
    return;
  }
  d->next = w->dirs;
  w->dirs = d;
}

static void walk(tool_watch *w, const char *path, visited *v) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
    return;
  if (visited_add(v, st.st_dev, st.st_ino) <= 0)
    return;
  watch_dir(w, path, &st);
  DIR *dir = opendir(path);
  if (!dir)
    return;
  size_t plen = strlen(path);
  struct dirent *de;
  while ((de = readdir(dir)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    size_t nlen = strlen(de->d_name);
    char *child = malloc(plen + nlen + 2);
    if (!child)
      break;
    memcpy(child, path, plen);
    child[plen] = '/';
    memcpy(child + plen + 1, de->d_name, nlen + 1);
    walk(w, child, v);
    free(child);
  }
  closedir(dir);
}

void tool_watch_sync(tool_watch *w) {
  for (wdir *d = w->dirs; d; d = d->next)
    d->seen = 0;
  visited v = {0};
  walk(w, w->root, &v);
  free(v.dev);
  free(v.ino);
  for (wdir **pd = &w->dirs; *pd;) {
    wdir *d = *pd;
    if (d->seen) {
      pd = &d->next;
      continue;
    }
    *pd = d->next;
    log_debug("watch: %s gone", d->path);
    drop(d);
  }
}

void tool_watch_close(tool_watch *w) {
  if (!w)
    return;
  w->closing = 1;
  while (w->dirs) {
    wdir *d = w->dirs;
    w->dirs = d->next;
    drop(d);
  }
  maybe_free(w);
}
