/* Recursive directory watching with inotify, on the libuv loop. libuv's
 * uv_fs_event cannot be used: it neither asks for IN_CLOSE_WRITE nor tells
 * a close from a modify, and "closed after writing" is what says a file is
 * whole (issue 24, half-written files). */
/* struct dirent's d_type (DT_*), so that the walk stats directories and
 * links only: glibc shows it beyond POSIX. */
#define _DEFAULT_SOURCE
#include "mcp-source/watch.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "loader/loader.h"
#include "util/log.h"

/* What a directory watch asks for: every change of a file in it, and of
 * the directory itself. */
#define WATCH_MASK                                                           \
  (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE |    \
   IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

typedef struct wdir {
  struct wdir *next;
  int wd;
  dev_t dev;
  ino_t ino;
  int seen;    /* found by the current walk */
  char path[]; /* as reached from the root */
} wdir;

/* A file being written: final once size and mtime hold for the settle
 * time (when no close or rename comes first). */
typedef struct wfile {
  struct wfile *next;
  off_t size;
  struct timespec mtime;
  uint64_t since; /* uv_now() when size and mtime were first seen so */
  char path[];
} wfile;

struct tool_watch {
  uv_loop_t *loop;
  char *root;
  unsigned settle_ms;
  tool_watch_cb cb;
  void *user_data;
  int fd;
  uv_poll_t poll;
  uv_timer_t timer;
  int handles; /* poll and timer initialised (not closed yet): 0..2 */
  int closing;
  int warned;  /* a watch failure was reported */
  int aliased; /* the last walk found a name a file or directory shares */
  /* What the last walk found that inotify cannot see (tool_watch_blind) */
  int unwatched;     /* the root, or a directory, has no watch */
  int linked;        /* a YAML name is a symbolic link */
  long fs_type;      /* a directory's file system is not known local */
  wdir *dirs;
  wfile *writing;
  tool_watch_stats st;
  /* The batch being built: final paths (deduplicated), rescan. */
  char **paths;
  size_t npaths, cap;
  int rescan;
  int began; /* a file began being written (the batch says it, empty) */
};

static void maybe_free(tool_watch *w) {
  if (!w->closing || w->handles > 0)
    return;
  if (w->fd >= 0)
    close(w->fd);
  while (w->dirs) {
    wdir *d = w->dirs;
    w->dirs = d->next;
    free(d);
  }
  while (w->writing) {
    wfile *f = w->writing;
    w->writing = f->next;
    free(f);
  }
  for (size_t i = 0; i < w->npaths; i++)
    free(w->paths[i]);
  free(w->paths);
  free(w->root);
  free(w);
}

static void on_closed(uv_handle_t *h) {
  tool_watch *w = h->data;
  w->handles--;
  maybe_free(w);
}

static char *join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = malloc(a + b + 2);
  if (p) {
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
  }
  return p;
}

/* Adds |path| (taken) to the batch; a walk when out of memory. Repeats
 * are dropped at the flush: a batch of a tree's checkout holds thousands of
 * paths, too many to compare each with all before it. */
static void batch_add(tool_watch *w, char *path) {
  if (!path) {
    w->rescan = 1;
    return;
  }
  if (w->npaths == w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 8;
    char **v = realloc(w->paths, cap * sizeof *v);
    if (!v) {
      free(path);
      w->rescan = 1;
      return;
    }
    w->paths = v;
    w->cap = cap;
  }
  w->paths[w->npaths++] = path;
  if (w->aliased)
    w->rescan = 1;
}

static int cmp_path(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void batch_flush(tool_watch *w) {
  if (w->closing || (!w->npaths && !w->rescan && !w->began))
    return;
  w->began = 0;
  /* Distinct paths, as mcpcfg_loader_update() takes them. */
  if (w->npaths > 1) /* qsort's base may not be NULL, even for none */
    qsort(w->paths, w->npaths, sizeof *w->paths, cmp_path);
  size_t k = 0;
  for (size_t i = 0; i < w->npaths; i++) {
    if (k && !strcmp(w->paths[k - 1], w->paths[i]))
      free(w->paths[i]);
    else
      w->paths[k++] = w->paths[i];
  }
  w->npaths = k;
  w->st.rescans += w->rescan != 0;
  w->cb((const char *const *)w->paths, w->npaths, w->rescan, w->user_data);
  for (size_t i = 0; i < w->npaths; i++)
    free(w->paths[i]);
  w->npaths = 0;
  w->rescan = 0;
}

static wfile **writing_find(tool_watch *w, const char *path) {
  wfile **pf = &w->writing;
  while (*pf && strcmp((*pf)->path, path) != 0)
    pf = &(*pf)->next;
  return pf;
}

/* |path| is no longer being written; 1 when it was. */
static int writing_end(tool_watch *w, const char *path) {
  wfile **pf = writing_find(w, path), *f = *pf;
  if (!f)
    return 0;
  *pf = f->next;
  free(f);
  return 1;
}

static void on_tick(uv_timer_t *t);

static void writing_begin(tool_watch *w, const char *path) {
  if (*writing_find(w, path))
    return; /* the tick samples it */
  size_t len = strlen(path);
  wfile *f = calloc(1, sizeof *f + len + 1);
  if (!f) {
    /* Cannot track it: the periodic rescan reads it as before. */
    return;
  }
  memcpy(f->path, path, len + 1);
  struct stat st;
  if (stat(path, &st) == 0) {
    f->size = st.st_size;
    f->mtime = st.st_mtim;
  }
  f->since = uv_now(w->loop);
  f->next = w->writing;
  w->writing = f;
  w->st.modified++;
  w->began = 1;
  log_debug("watch: %s is being written (read at its close or rename, or "
            "once unchanged for %u ms)", path, w->settle_ms);
  if (!uv_is_active((uv_handle_t *)&w->timer)) {
    uint64_t every = w->settle_ms / 4 ? w->settle_ms / 4 : 1;
    uv_timer_start(&w->timer, on_tick, every, every);
  }
}

/* The settle rule: files written without a close. */
static void on_tick(uv_timer_t *t) {
  tool_watch *w = t->data;
  uint64_t now = uv_now(w->loop);
  for (wfile **pf = &w->writing; *pf;) {
    wfile *f = *pf;
    struct stat st;
    int gone = stat(f->path, &st) != 0;
    if (!gone && (st.st_size != f->size ||
                  st.st_mtim.tv_sec != f->mtime.tv_sec ||
                  st.st_mtim.tv_nsec != f->mtime.tv_nsec)) {
      f->size = st.st_size;
      f->mtime = st.st_mtim;
      f->since = now;
    } else if (gone || now - f->since >= w->settle_ms) {
      if (!gone) {
        w->st.settled++;
        log_debug("watch: %s unchanged for %u ms without a close: read",
                  f->path, w->settle_ms);
      }
      *pf = f->next;
      batch_add(w, strdup(f->path));
      free(f);
      continue;
    }
    pf = &f->next;
  }
  if (!w->writing)
    uv_timer_stop(&w->timer);
  batch_flush(w);
}

static wdir *dir_by_wd(tool_watch *w, int wd) {
  for (wdir *d = w->dirs; d; d = d->next)
    if (d->wd == wd)
      return d;
  return NULL;
}

static int dir_watched(tool_watch *w, const char *path) {
  for (wdir *d = w->dirs; d; d = d->next)
    if (!strcmp(d->path, path))
      return 1;
  return 0;
}

static void on_event(tool_watch *w, const struct inotify_event *ev) {
  if (ev->mask & IN_Q_OVERFLOW) {
    log_debug("watch: event queue overflow");
    w->rescan = 1;
    return;
  }
  wdir *d = dir_by_wd(w, ev->wd);
  if (!d)
    return; /* a watch dropped meanwhile */
  if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
    w->rescan = 1; /* the directory went */
    return;
  }
  if (!ev->len || !ev->name[0])
    return; /* the directory's own attributes */
  const char *name = ev->name;
  log_debug("watch %s: %s changed", d->path, name);
  if (ev->mask & IN_ISDIR) {
    w->rescan = 1; /* created, removed, renamed, permissions */
    return;
  }
  char *path = join(d->path, name);
  if (!path) {
    w->rescan = 1;
    return;
  }
  struct stat st;
  if (name[0] == '.' || !mcpcfg_is_yaml_name(name)) {
    /* Not loaded itself, but a link to a directory is walked (ConfigMap
     * "..data" renamed over), and a walked directory may have gone. */
    if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
      if (lstat(path, &st) == 0 &&
          (S_ISLNK(st.st_mode) || S_ISDIR(st.st_mode)))
        w->rescan = 1;
    } else if ((ev->mask & (IN_DELETE | IN_MOVED_FROM)) &&
               dir_watched(w, path)) {
      w->rescan = 1;
    }
    free(path);
    return;
  }
  if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
      w->rescan = 1; /* a link (another name of a file) or a directory */
      batch_add(w, path);
      return;
    }
  }
  if (ev->mask & (IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM)) {
    writing_end(w, path);
    if (ev->mask & IN_CLOSE_WRITE)
      w->st.closed++;
    if (ev->mask & IN_MOVED_TO)
      w->st.moved++;
    batch_add(w, path);
  } else if (ev->mask & (IN_MODIFY | IN_CREATE)) {
    writing_begin(w, path);
    free(path);
  } else if ((ev->mask & IN_ATTRIB) && !*writing_find(w, path)) {
    batch_add(w, path); /* chmod, touch: read again (its stamp says) */
  } else {
    free(path);
  }
}

static void on_readable(uv_poll_t *h, int status, int events) {
  tool_watch *w = h->data;
  (void)events;
  if (status < 0) {
    log_debug("watch: %s", uv_strerror(status));
    return;
  }
  /* Aligned for struct inotify_event; room for many events. */
  _Alignas(struct inotify_event) char buf[64 * 1024];
  for (;;) {
    ssize_t r = read(w->fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break; /* EAGAIN: the queue is drained */
    for (char *p = buf; p < buf + r;) {
      const struct inotify_event *ev = (const struct inotify_event *)p;
      on_event(w, ev);
      p += sizeof *ev + ev->len;
    }
  }
  batch_flush(w);
}

int tool_watch_new(tool_watch **pw, uv_loop_t *loop, const char *root,
                   unsigned settle_ms, tool_watch_cb cb, void *user_data) {
  tool_watch *w = calloc(1, sizeof(*w));
  if (!w || !(w->root = strdup(root))) {
    free(w);
    return -1;
  }
  /* As the loader spells paths: no trailing '/'. */
  for (size_t n = strlen(w->root); n > 1 && w->root[n - 1] == '/'; n--)
    w->root[n - 1] = '\0';
  w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (w->fd < 0) {
    int err = errno;
    free(w->root);
    free(w);
    return -err;
  }
  w->loop = loop;
  w->settle_ms = settle_ms ? settle_ms : 1;
  w->cb = cb;
  w->user_data = user_data;
  uv_poll_init(loop, &w->poll, w->fd);
  uv_timer_init(loop, &w->timer);
  w->poll.data = w->timer.data = w;
  w->handles = 2;
  uv_poll_start(&w->poll, UV_READABLE, on_readable);
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
  int wd = inotify_add_watch(w->fd, path, WATCH_MASK);
  if (wd < 0) {
    w->unwatched = 1;
    if (!w->warned) {
      w->warned = 1;
      log_warn("cannot watch %s: %s (changes are still found by the "
               "periodic rescan)", path, strerror(errno));
    }
    return;
  }
  size_t len = strlen(path);
  d = calloc(1, sizeof(*d) + len + 1);
  if (!d) {
    inotify_rm_watch(w->fd, wd);
    w->unwatched = 1;
    return; /* the periodic rescan still covers it */
  }
  memcpy(d->path, path, len + 1);
  d->wd = wd;
  d->dev = st->st_dev;
  d->ino = st->st_ino;
  d->seen = 1;
  log_debug("watching %s", path);
  d->next = w->dirs;
  w->dirs = d;
}

/* File systems whose changes are all made by this kernel, so that
 * inotify reports each (linux/magic.h). Anything else, a network or FUSE
 * file system above all, can change under a watch without an event. */
static int fs_local(long type) {
  static const unsigned long local[] = {
      0xEF53,     /* ext2, ext3, ext4 */
      0x58465342, /* xfs */
      0x9123683E, /* btrfs */
      0x01021994, /* tmpfs */
      0x858458F6, /* ramfs */
      0x794C7630, /* overlayfs (containers) */
      0xF2F52010, /* f2fs */
      0x2FC12FC1, /* zfs */
      0xCA451A4E, /* bcachefs */
      0x3153464A, /* jfs */
      0x52654973, /* reiserfs */
      0x73717368, /* squashfs */
      0xE0F5E1E2, /* erofs */
      0x9660,     /* iso9660 */
  };
  for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
    if ((unsigned long)type == local[i])
      return 1;
  return 0;
}

static void walk(tool_watch *w, const char *path, const struct stat *st,
                 visited *v) {
  int rv = visited_add(v, st->st_dev, st->st_ino);
  if (rv == 0)
    w->aliased = 1; /* a directory reached twice (or a loop) */
  if (rv <= 0)
    return;
  watch_dir(w, path, st);
  struct statfs sf;
  if (!w->fs_type) { /* the first one found is enough to say why */
    if (statfs(path, &sf) != 0)
      w->fs_type = -1;
    else if (!fs_local((long)sf.f_type))
      w->fs_type = (long)sf.f_type;
  }
  DIR *dir = opendir(path);
  if (!dir)
    return;
  struct dirent *de;
  while ((de = readdir(dir)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    /* Files are never walked: no stat() for each of 20,000 files. */
    if (de->d_type == DT_REG)
      continue;
    char *child = join(path, de->d_name);
    if (!child)
      break;
    struct stat cst;
    if (de->d_type == DT_LNK && mcpcfg_is_yaml_name(de->d_name))
      w->aliased = w->linked = 1; /* a file with two names */
    if ((de->d_type == DT_DIR || de->d_type == DT_LNK ||
         de->d_type == DT_UNKNOWN) &&
        stat(child, &cst) == 0 && S_ISDIR(cst.st_mode))
      walk(w, child, &cst, v);
    else if (de->d_type == DT_UNKNOWN && mcpcfg_is_yaml_name(de->d_name) &&
             lstat(child, &cst) == 0 && S_ISLNK(cst.st_mode))
      w->aliased = w->linked = 1;
    free(child);
  }
  closedir(dir);
}

void tool_watch_sync(tool_watch *w) {
  for (wdir *d = w->dirs; d; d = d->next)
    d->seen = 0;
  visited v = {0};
  struct stat st;
  w->aliased = w->linked = 0;
  w->fs_type = 0;
  w->unwatched = !(stat(w->root, &st) == 0 && S_ISDIR(st.st_mode));
  if (!w->unwatched)
    walk(w, w->root, &st, &v);
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
    /* Unless another entry now has the same watch (same directory). */
    int shared = 0;
    for (wdir *o = w->dirs; o; o = o->next)
      shared |= o->wd == d->wd;
    if (!shared)
      inotify_rm_watch(w->fd, d->wd); /* EINVAL when already gone */
    free(d);
  }
}

const char *tool_watch_blind(const tool_watch *w, char *buf, size_t len) {
  if (w->unwatched)
    return "the root or a directory has no inotify watch";
  if (w->linked)
    return "a YAML name is a symbolic link (its target may be out of the "
           "watched tree)";
  if (w->fs_type) {
    if (w->fs_type < 0)
      return "a directory's file system cannot be told (statfs failed)";
    snprintf(buf, len, "a directory is on a file system not known to be "
             "local (type 0x%lx: network, FUSE, ...)", (unsigned long)w->fs_type);
    return buf;
  }
  return NULL;
}

int tool_watch_writing(const tool_watch *w, const char *path) {
  for (const wfile *f = w->writing; f; f = f->next)
    if (!strcmp(f->path, path))
      return 1;
  return 0;
}

void tool_watch_get_stats(const tool_watch *w, tool_watch_stats *st) {
  *st = w->st;
  st->writing = 0;
  for (const wfile *f = w->writing; f; f = f->next)
    st->writing++;
}

void tool_watch_close(tool_watch *w) {
  if (!w)
    return;
  w->closing = 1;
  uv_close((uv_handle_t *)&w->poll, on_closed);
  uv_close((uv_handle_t *)&w->timer, on_closed);
}
