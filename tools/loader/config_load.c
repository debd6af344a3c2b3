/*
 * The directory side of mcpcfg: walks the tree, keeps per-file results
 * across scans, and merges them into one sorted view per collection.
 *
 * A scan builds the new file list and the new view aside and swaps them in
 * at the end, so that a failure (out of memory) leaves the loader as it was.
 * Files and documents are reference counted, because the new list shares
 * the unchanged files, and a bad file the documents of its last good
 * content, with the old one until the swap.
 *
 * A rescan costs a stat() per file: a file is read only when its stat
 * changed or its last read was racy (loader.h, "Change detection").
 */
#define _GNU_SOURCE /* sched_getaffinity(): the CPUs this process may use */
#include "loader/config_internal.h"
#include "util/grow.h"
#include "util/sorted.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { MAX_DIR_DEPTH = 64 };

/* What a file looked like when last read; equal means "do not re-parse". */
enum { FP_CONTENT, FP_READ_ERROR, FP_TOO_BIG, FP_UNSTABLE };

/* What stat() says of a file; equal (and not racy) means "do not read". */
typedef struct fstamp {
  uint64_t dev, ino, size;
  int64_t mtime_s, ctime_s;
  long mtime_ns, ctime_ns;
} fstamp;

typedef struct cfile {
  int refs;
  int fpkind;
  uint64_t fp; /* FP_CONTENT: hash of size and bytes; else errno or size */
  int stamped; /* |stamp| is that of the bytes read (fstat before reading) */
  int racy;    /* modified too close to the read: read again next time */
  int bad;     /* its read reported a problem (unreadable, not YAML, ...) */
  fstamp stamp;
  char *path;
  mcpcfg_doc **docs;
  size_t ndocs;
} cfile;

typedef struct coll {
  char *name;
  mcp_resource *res; /* sorted by name; entries borrow from documents */
  /* owner[i]: the path of the file res[i] comes from (borrowed from that
   * file, which the loader holds as long as this view): a resource keeps
   * its file when another file defines the same name. */
  const char **owner;
  const mcpcfg_doc **doc; /* doc[i]: the document res[i] comes from */
  unsigned *ndef; /* ndef[i]: documents defining res[i]'s name (> 1:
                   * duplicates, which only a full merge settles) */
  size_t n;
  int fresh; /* during a merge: name allocated by it */
  /* The names changed since generation |delta_base| (mcpcfg_loader_update
   * records them), valid when |delta_ok|: applying them costs what
   * changed, not the collection. */
  char **delta;
  size_t ndelta;
  int delta_ok;
  uint64_t delta_base;
  /* Bumped by a merge that changed |res|; |applied| is the generation
   * mcpcfg_loader_apply() last gave the store, so that a scan which
   * changed one file applies one collection, not all. */
  uint64_t gen, applied;
} coll;

typedef struct strvec {
  char **v;
  size_t n, cap;
} strvec;

struct mcpcfg_loader {
  mcpcfg_options o;
  char *root;
  strvec problems; /* of the directory walk, reported once: "path\nmsg" */
  cfile **files; /* sorted by path */
  size_t nfiles;
  coll *colls; /* sorted by name */
  size_t ncolls;
  int64_t racy_ns;     /* see mcpcfg_loader_set_racy_ns() */
  mcpcfg_hold_fn hold; /* files being written: not read */
  void *hold_ud;
  unsigned long reads; /* files opened to be read */
  unsigned long unstable; /* reads dropped: the file changed meanwhile */
};

void mcpcfg_options_default(mcpcfg_options *opts) {
  memset(opts, 0, sizeof *opts);
  opts->max_file_size = (size_t)16 << 20;
  opts->max_depth = 64;
  opts->max_nodes = (size_t)1 << 20;
  opts->name_rules = MCP_NAMES_KUBERNETES;
}

/* Takes |s| (freed on failure). */
static int strvec_push(strvec *sv, char *s) {
  if (!s)
    return MCPCFG_ERR_NOMEM;
  char **v = tool_grow(sv->v, sv->n, &sv->cap, sizeof *v, 32);
  if (!v) {
    free(s);
    return MCPCFG_ERR_NOMEM;
  }
  sv->v = v;
  sv->v[sv->n++] = s;
  return 0;
}

static void strvec_free(strvec *sv) {
  for (size_t i = 0; i < sv->n; i++)
    free(sv->v[i]);
  free(sv->v);
}

static void file_unref(cfile *f) {
  if (!f || --f->refs > 0)
    return;
  mcpcfg_docs_free(f->docs, f->ndocs);
  free(f->path);
  free(f);
}

static void delta_clear(coll *c) {
  for (size_t i = 0; i < c->ndelta; i++)
    free(c->delta[i]);
  free(c->delta);
  c->delta = NULL;
  c->ndelta = 0;
  c->delta_ok = 0;
}

static void colls_free(coll *c, size_t n, int fresh_only) {
  for (size_t i = 0; i < n; i++) {
    free(c[i].res);
    free(c[i].owner);
    free(c[i].doc);
    free(c[i].ndef);
    delta_clear(&c[i]);
    if (!fresh_only || c[i].fresh)
      free(c[i].name);
  }
  free(c);
}

int mcpcfg_loader_new(mcpcfg_loader **ploader, const char *dir,
                      const mcpcfg_options *opts) {
  if (!*dir || mcpcfg_body_check(opts) < 0)
    return MCPCFG_ERR_INVALID_ARGUMENT;
  mcpcfg_loader *l = calloc(1, sizeof *l);
  if (!l || !(l->root = mcpcfg_strdup(dir))) {
    free(l);
    return MCPCFG_ERR_NOMEM;
  }
  mcpcfg_options_default(&l->o);
  if (opts) {
    mcpcfg_options def = l->o;
    l->o = *opts;
    if (!l->o.max_file_size)
      l->o.max_file_size = def.max_file_size;
    if (!l->o.max_depth)
      l->o.max_depth = def.max_depth;
    if (!l->o.max_nodes)
      l->o.max_nodes = def.max_nodes;
  }
  for (size_t n = strlen(l->root); n > 1 && l->root[n - 1] == '/'; n--)
    l->root[n - 1] = '\0';
  l->racy_ns = MCPCFG_RACY_NS;
  *ploader = l;
  return 0;
}

void mcpcfg_loader_del(mcpcfg_loader *l) {
  if (!l)
    return;
  for (size_t i = 0; i < l->nfiles; i++)
    file_unref(l->files[i]);
  free(l->files);
  colls_free(l->colls, l->ncolls, 0);
  strvec_free(&l->problems);
  free(l->root);
  free(l);
}

/* Index of |name| in the collections, or of where it would go. */
static size_t coll_pos(const mcpcfg_loader *l, const char *name, int *found) {
  return tool_sorted_find(l->colls, l->ncolls, sizeof(coll),
                          offsetof(coll, name), name, found);
}

int mcpcfg_loader_declare(mcpcfg_loader *l, const char *collection) {
  int found;
  if (!*collection)
    return MCPCFG_ERR_INVALID_ARGUMENT;
  size_t i = coll_pos(l, collection, &found);
  if (found)
    return 0;
  char *name = mcpcfg_strdup(collection);
  coll *c = name ? realloc(l->colls, (l->ncolls + 1) * sizeof *c) : NULL;
  if (!c) {
    free(name);
    return MCPCFG_ERR_NOMEM;
  }
  memmove(c + i + 1, c + i, (l->ncolls - i) * sizeof *c);
  memset(&c[i], 0, sizeof *c);
  c[i].name = name;
  c[i].gen = 1;
  l->colls = c;
  l->ncolls++;
  return 0;
}

void mcpcfg_loader_set_hold(mcpcfg_loader *l, mcpcfg_hold_fn fn,
                            void *user_data) {
  l->hold = fn;
  l->hold_ud = user_data;
}

size_t mcpcfg_loader_delta(const mcpcfg_loader *l, size_t i,
                           const char *const **names) {
  const coll *c = &l->colls[i];
  if (!c->delta_ok || c->delta_base != c->applied)
    return (size_t)-1;
  *names = (const char *const *)c->delta;
  return c->ndelta;
}

void mcpcfg_loader_set_racy_ns(mcpcfg_loader *l, int64_t racy_ns) {
  l->racy_ns = racy_ns < 0 ? 0 : racy_ns;
}

unsigned long mcpcfg_loader_reads(const mcpcfg_loader *l) { return l->reads; }

unsigned long mcpcfg_loader_unstable_reads(const mcpcfg_loader *l) {
  return l->unstable;
}

uint64_t mcpcfg_loader_collection_gen(const mcpcfg_loader *l, size_t i) {
  return i < l->ncolls ? l->colls[i].gen : 0;
}

int mcpcfg_loader_unapplied(const mcpcfg_loader *l, size_t i) {
  return l->colls[i].applied != l->colls[i].gen;
}

void mcpcfg_loader_mark_applied(mcpcfg_loader *l, size_t i) {
  l->colls[i].applied = l->colls[i].gen;
  delta_clear(&l->colls[i]); /* the store has it all */
}

size_t mcpcfg_loader_files_with_errors(const mcpcfg_loader *l) {
  size_t n = 0;
  for (size_t i = 0; i < l->nfiles; i++)
    n += l->files[i]->bad != 0;
  return n;
}

size_t mcpcfg_loader_collection_count(const mcpcfg_loader *l) {
  return l->ncolls;
}

const char *mcpcfg_loader_collection_name(const mcpcfg_loader *l, size_t i) {
  return i < l->ncolls ? l->colls[i].name : NULL;
}

size_t mcpcfg_loader_resources(const mcpcfg_loader *l, size_t i,
                               const mcp_resource **res) {
  *res = i < l->ncolls ? l->colls[i].res : NULL;
  return i < l->ncolls ? l->colls[i].n : 0;
}

const char *mcpcfg_loader_text(const mcpcfg_loader *l, size_t i, size_t k,
                               size_t *len) {
  if (i >= l->ncolls || k >= l->colls[i].n || !l->colls[i].doc[k]->text) {
    *len = 0;
    return NULL;
  }
  *len = l->colls[i].doc[k]->text_len;
  return l->colls[i].doc[k]->text;
}

/* The index of resource |name| in collection |*pc| (set), or -1. */
static long res_pos(const mcpcfg_loader *l, const char *collection,
                    const char *name, const coll **pc) {
  int found;
  size_t i = coll_pos(l, collection, &found);
  if (!found)
    return -1;
  *pc = &l->colls[i];
  size_t lo = 0, hi = l->colls[i].n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(l->colls[i].res[mid].name, name);
    if (c == 0)
      return (long)mid;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

const mcp_resource *mcpcfg_loader_find(const mcpcfg_loader *l,
                                       const char *collection,
                                       const char *name) {
  const coll *c;
  long k = res_pos(l, collection, name, &c);
  return k < 0 ? NULL : &c->res[k];
}

/* ------------------------------------------------------------------ */
/* Walking the directory                                               */
/* ------------------------------------------------------------------ */

/* A YAML file the walk found, and its stat() then. */
typedef struct found {
  char *path;
  fstamp st;
} found;

typedef struct walk {
  const mcpcfg_loader *l;
  struct {
    found *v;
    size_t n, cap;
  } paths;         /* YAML files found */
  strvec skipped;  /* paths not read: what is below keeps its state */
  strvec problems; /* as mcpcfg_loader.problems */
  struct {
    dev_t dev;
    ino_t ino;
  } up[MAX_DIR_DEPTH]; /* directories being walked, to skip loops */
  size_t depth;
} walk;

static char *join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name), slash = a && dir[a - 1] != '/';
  char *p = malloc(a + slash + b + 1);
  if (p) {
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + slash, name, b + 1);
  }
  return p;
}

static void stamp_of(const struct stat *st, fstamp *s) {
  memset(s, 0, sizeof *s);
  s->dev = (uint64_t)st->st_dev;
  s->ino = (uint64_t)st->st_ino;
  s->size = (uint64_t)st->st_size;
  s->mtime_s = (int64_t)st->st_mtim.tv_sec;
  s->mtime_ns = st->st_mtim.tv_nsec;
  s->ctime_s = (int64_t)st->st_ctim.tv_sec;
  s->ctime_ns = st->st_ctim.tv_nsec;
}

static int stamp_eq(const fstamp *a, const fstamp *b) {
  return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
         a->mtime_s == b->mtime_s && a->mtime_ns == b->mtime_ns &&
         a->ctime_s == b->ctime_s && a->ctime_ns == b->ctime_ns;
}

/* Takes |p| (freed on failure). */
static int push_found(walk *w, char *p, const struct stat *st) {
  found *v = tool_grow(w->paths.v, w->paths.n, &w->paths.cap, sizeof *v, 32);
  if (!v) {
    free(p);
    return MCPCFG_ERR_NOMEM;
  }
  w->paths.v = v;
  w->paths.v[w->paths.n].path = p;
  stamp_of(st, &w->paths.v[w->paths.n].st);
  w->paths.n++;
  return 0;
}

int mcpcfg_is_yaml_name(const char *n) {
  size_t l = strlen(n);
  return (l > 5 && !strcmp(n + l - 5, ".yaml")) ||
         (l > 4 && !strcmp(n + l - 4, ".yml"));
}

/* Reports a problem of the walk unless the previous scan had it too: a
 * directory is read at every scan, and a loop would be logged each time. */
static int problem(walk *w, const char *path, const char *msg) {
  size_t a = strlen(path), b = strlen(msg);
  char *k = malloc(a + b + 2);
  if (!k)
    return MCPCFG_ERR_NOMEM;
  memcpy(k, path, a);
  k[a] = '\n';
  memcpy(k + a + 1, msg, b + 1);
  size_t i = 0;
  while (i < w->l->problems.n && strcmp(w->l->problems.v[i], k) != 0)
    i++;
  if (i == w->l->problems.n)
    mcpcfg_report(&w->l->o, path, 0, "%s", msg);
  return strvec_push(&w->problems, k);
}

static int skip(walk *w, const char *path, const char *why) {
  char msg[300];
  snprintf(msg, sizeof msg, "%s; what was loaded from it stays", why);
  int rv = problem(w, path, msg);
  return rv < 0 ? rv : strvec_push(&w->skipped, mcpcfg_strdup(path));
}

/* A problem with the root: the scan fails with MCPCFG_ERR_IO. */
static int root_problem(walk *w, const char *what, const char *why) {
  char msg[300];
  snprintf(msg, sizeof msg, "%s%s", what, why);
  int rv = problem(w, w->l->root, msg);
  return rv < 0 ? rv : MCPCFG_ERR_IO;
}

/* The root cannot be skipped: failing to read it is MCPCFG_ERR_IO. */
static int walk_dir(walk *w, const char *dir, const struct stat *st,
                    int root) {
  for (size_t i = 0; i < w->depth; i++)
    if (w->up[i].dev == st->st_dev && w->up[i].ino == st->st_ino)
      return problem(w, dir, "directory loop; skipped");
  if (w->depth == MAX_DIR_DEPTH)
    return skip(w, dir, "directories nested too deep");
  DIR *d = opendir(dir);
  if (!d) {
    return root ? root_problem(w, "cannot open: ", strerror(errno))
                : skip(w, dir, strerror(errno));
  }
  w->up[w->depth].dev = st->st_dev;
  w->up[w->depth].ino = st->st_ino;
  w->depth++;
  int rv = 0;
  for (;;) {
    errno = 0;
    struct dirent *e = readdir(d);
    if (!e) {
      if (errno)
        rv = root ? root_problem(w, "cannot read: ", strerror(errno))
                  : skip(w, dir, strerror(errno));
      break;
    }
    if (e->d_name[0] == '.') /* hidden, ".", "..", ConfigMap "..data" */
      continue;
    char *p = join(dir, e->d_name);
    struct stat s;
    /* Relative to the open directory, not the whole path resolved again
     * for each file: the call a quarter cheaper, a 20,000-file walk 4 %.
     * Follows links, as stat() does. */
    if (!p) {
      rv = MCPCFG_ERR_NOMEM;
    } else if (fstatat(dirfd(d), e->d_name, &s, 0) != 0) {
      if (errno != ENOENT)         /* ENOENT: dangling link, or gone */
        rv = skip(w, p, strerror(errno));
      free(p);
    } else if (S_ISDIR(s.st_mode)) {
      rv = walk_dir(w, p, &s, 0);
      free(p);
    } else if (S_ISREG(s.st_mode) && mcpcfg_is_yaml_name(e->d_name)) {
      rv = push_found(w, p, &s);
    } else {
      free(p);
    }
    if (rv < 0)
      break;
  }
  w->depth--;
  closedir(d);
  return rv;
}

/* ------------------------------------------------------------------ */
/* Reading one file                                                    */
/* ------------------------------------------------------------------ */

uint64_t mcpcfg_hash64(const void *data, size_t len) {
  /* The structure of xxHash64 (four lanes, then the tail, then an
   * avalanche), words read in the machine's byte order. */
  static const uint64_t P1 = UINT64_C(0x9e3779b185ebca87),
                        P2 = UINT64_C(0xc2b2ae3d27d4eb4f),
                        P3 = UINT64_C(0x165667b19e3779f9),
                        P4 = UINT64_C(0x85ebca77c2b2ae63),
                        P5 = UINT64_C(0x27d4eb2f165667c5);
#define MCPCFG_ROTL(x, r) (((x) << (r)) | ((x) >> (64 - (r))))
#define MCPCFG_ROUND(acc, w) (MCPCFG_ROTL((acc) + (w) * P2, 31) * P1)
  const unsigned char *p = data, *end = p + len;
  uint64_t h, w;
  if (len >= 32) {
    uint64_t v1 = P1 + P2, v2 = P2, v3 = 0, v4 = (uint64_t)0 - P1;
    for (; end - p >= 32; p += 32) {
      memcpy(&w, p, 8);
      v1 = MCPCFG_ROUND(v1, w);
      memcpy(&w, p + 8, 8);
      v2 = MCPCFG_ROUND(v2, w);
      memcpy(&w, p + 16, 8);
      v3 = MCPCFG_ROUND(v3, w);
      memcpy(&w, p + 24, 8);
      v4 = MCPCFG_ROUND(v4, w);
    }
    h = MCPCFG_ROTL(v1, 1) + MCPCFG_ROTL(v2, 7) + MCPCFG_ROTL(v3, 12) +
        MCPCFG_ROTL(v4, 18);
    h = (h ^ MCPCFG_ROUND(0, v1)) * P1 + P4;
    h = (h ^ MCPCFG_ROUND(0, v2)) * P1 + P4;
    h = (h ^ MCPCFG_ROUND(0, v3)) * P1 + P4;
    h = (h ^ MCPCFG_ROUND(0, v4)) * P1 + P4;
  } else {
    h = P5;
  }
  h += (uint64_t)len;
  for (; end - p >= 8; p += 8) {
    memcpy(&w, p, 8);
    h ^= MCPCFG_ROUND(0, w);
    h = MCPCFG_ROTL(h, 27) * P1 + P4;
  }
  for (; p < end; p++) {
    h ^= *p * P5;
    h = MCPCFG_ROTL(h, 11) * P1;
  }
#undef MCPCFG_ROUND
#undef MCPCFG_ROTL
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

/* Whether a file with |st| read at |now| may change again without its
 * timestamps showing it: mtime or ctime within |racy_ns| of |now|, or
 * later. (Compared as (seconds, nanoseconds): timestamps can be anything.) */
static int is_racy(const fstamp *st, const struct timespec *now,
                   int64_t racy_ns) {
  int64_t s = (int64_t)now->tv_sec - racy_ns / 1000000000;
  long ns = now->tv_nsec - (long)(racy_ns % 1000000000);
  if (ns < 0) {
    ns += 1000000000;
    s--;
  }
  return st->mtime_s > s || (st->mtime_s == s && st->mtime_ns >= ns) ||
         st->ctime_s > s || (st->ctime_s == s && st->ctime_ns >= ns);
}

/*
 * Returns 0 and the bytes (or the fingerprint of a read failure) and, when
 * fstat() worked, the file's stamp before the read in |*stamp| (|*stamped|
 * set); 1 when the file is no regular file any more, or NOMEM. The bytes
 * are a whole, consistent copy: the stamp equals |walked| (what the walk's
 * stat() saw) and the stamp after the read, and exactly st_size bytes were
 * read; otherwise |*kind| is FP_UNSTABLE (a writer is at work).
 */
static int read_file(int fd, size_t max, const fstamp *walked,
                     unsigned char **pbuf, size_t *plen, int *kind,
                     uint64_t *fp, fstamp *stamp, int *stamped) {
  struct stat st;
  unsigned char *buf = NULL;
  size_t len = 0, cap;
  *stamped = 0;
  if (fstat(fd, &st) != 0) {
    *kind = FP_READ_ERROR;
    *fp = (uint64_t)errno;
    return 0;
  }
  if (!S_ISREG(st.st_mode))
    return 1;
  stamp_of(&st, stamp);
  *stamped = 1;
  if ((uint64_t)st.st_size > max) {
    *kind = FP_TOO_BIG;
    *fp = (uint64_t)st.st_size;
    return 0;
  }
  if (!stamp_eq(stamp, walked)) { /* changed since the walk saw it */
    *kind = FP_UNSTABLE;
    return 0;
  }
  /* + 1: a file that grew shows as a read longer than st_size. */
  cap = (size_t)st.st_size + 1;
  if (!(buf = malloc(cap)))
    return MCPCFG_ERR_NOMEM;
  while (len < cap) {
    ssize_t r = read(fd, buf + len, cap - len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      free(buf);
      *kind = FP_READ_ERROR;
      *fp = (uint64_t)errno;
      return 0;
    }
    if (r == 0)
      break;
    len += (size_t)r;
  }
  fstamp after;
  int same = fstat(fd, &st) == 0;
  if (same) {
    stamp_of(&st, &after);
    same = stamp_eq(stamp, &after);
  }
  if (!same || len != (size_t)stamp->size) { /* grew, shrank or rewritten */
    free(buf);
    *kind = FP_UNSTABLE;
    return 0;
  }
  *kind = FP_CONTENT;
  *fp = mcpcfg_hash64(buf, len); /* the length is part of it */
  *pbuf = buf;
  *plen = len;
  return 0;
}

/* Adds to |f| references to the documents of |old| for which |f| has no
 * document of the same collection and name (all of them when |all|). */
static int keep_old(cfile *f, const cfile *old, int all) {
  if (!old || !old->ndocs)
    return 0;
  mcpcfg_doc **d = realloc(f->docs, (f->ndocs + old->ndocs) * sizeof *d);
  if (!d)
    return MCPCFG_ERR_NOMEM;
  f->docs = d;
  size_t n = f->ndocs;
  for (size_t i = 0; i < old->ndocs; i++) {
    mcpcfg_doc *o = old->docs[i];
    size_t j = 0;
    while (!all && j < n &&
           (strcmp(d[j]->collection, o->collection) != 0 ||
            strcmp(d[j]->res.name, o->res.name) != 0))
      j++;
    if (all || j == n) {
      o->refs++;
      d[f->ndocs++] = o;
    }
  }
  return 0;
}

/* What to do with a file the walk found: keep |old| as it is (its stamp
 * says it has not changed, or its writer is at work: the hold callback,
 * asked once per file), or read it. */
enum { KEEP_OLD, HELD, READ };

static int decide(mcpcfg_loader *l, const char *path, const fstamp *cur, const cfile *old) {
  if (old && old->stamped && !old->racy && stamp_eq(&old->stamp, cur))
    return KEEP_OLD;
  if (l->hold && l->hold(path, l->hold_ud))
    return HELD;
  return READ;
}

/* A file read and, when its bytes are new, parsed: read_one() touches
 * nothing of the loader, so that workers can run it for many files at
 * once (a scan of many files, mcpcfg_options.load_threads); finish() then
 * takes the results in order on the caller's thread. */
typedef struct reading {
  /* in */
  const mcpcfg_options *o;
  const char *path;
  const fstamp *cur;
  int has_old, old_kind, kept;
  uint64_t old_fp;
  /* out */
  int clock; /* |now| is the time before the read */
  struct timespec now;
  int open_errno; /* open() failed with it */
  int rv;         /* read_file()'s */
  int kind, stamped;
  uint64_t fp;
  fstamp stamp;
  int prv; /* mcpcfg_parse_held()'s, when the bytes were new */
  mcpcfg_doc **docs;
  size_t ndocs, nbad;
  mcpcfg_said said;
} reading;

static void reading_init(reading *r, const mcpcfg_loader *l, const char *path,
                         const fstamp *cur, const cfile *old) {
  memset(r, 0, sizeof *r);
  r->o = &l->o;
  r->path = path;
  r->cur = cur;
  r->has_old = old != NULL;
  r->old_kind = old ? old->fpkind : 0;
  r->old_fp = old ? old->fp : 0;
  r->kept = old && old->ndocs;
}

static void read_one(reading *r) {
  unsigned char *buf = NULL;
  size_t len = 0;
  /* Before the read: a change made after it has a later timestamp. */
  r->clock = clock_gettime(CLOCK_REALTIME, &r->now) == 0;
  int fd = open(r->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* no FIFO wait */
  if (fd < 0) {
    r->open_errno = errno ? errno : EIO;
    return;
  }
  r->rv = read_file(fd, r->o->max_file_size, r->cur, &buf, &len, &r->kind, &r->fp,
                    &r->stamp, &r->stamped);
  close(fd);
  /* The same bytes as before: not parsed again (finish() keeps |old|). */
  if (!r->rv && r->kind == FP_CONTENT &&
      !(r->has_old && r->old_kind == r->kind && r->old_fp == r->fp)) {
    r->prv = mcpcfg_parse_held(r->o, r->path, buf, len, r->kept, &r->docs, &r->ndocs,
                               &r->nbad, &r->said);
  }
  free(buf);
}

static void reading_done(reading *r) {
  mcpcfg_docs_free(r->docs, r->ndocs);
  r->docs = NULL;
  r->ndocs = 0;
  mcpcfg_said_free(&r->said);
}

/* The file's new state from what decide() said and, for READ, |r|. */
static int finish(mcpcfg_loader *l, const char *path, int what, cfile *old, reading *r,
                  cfile **out) {
  int kind, rv = 0, stamped = 0, racy = 0;
  uint64_t fp;
  *out = NULL;
  if (what != READ) {
    if (old) {
      old->racy |= what == HELD; /* read once the writer is done */
      old->refs++;
    }
    /* A held new file has nothing yet. */
    *out = old;
    return 0;
  }
  l->reads++;
  if (r->open_errno) {
    if (r->open_errno == ENOENT)
      return 0;
    kind = FP_READ_ERROR;
    fp = (uint64_t)r->open_errno;
  } else {
    if (r->rv != 0)
      return r->rv < 0 ? r->rv : 0;
    kind = r->kind;
    fp = r->fp;
    if (kind == FP_UNSTABLE) {
      /* Being written: serve nothing of this read; what the file had
       * stays (a new file has nothing yet) and it is read again at the
       * next scan, whatever its stat says then. Not reported: the writer
       * is at work, and the next scan sees the result. */
      l->unstable++;
      if (old) {
        old->racy = 1;
        old->refs++;
      }
      *out = old;
      return 0;
    }
    /* A read error is retried at every scan (errno, not stat, says what
     * it was). No clock: every read is racy (every scan reads every file). */
    stamped = r->stamped && kind != FP_READ_ERROR;
    racy = stamped && (!r->clock || is_racy(&r->stamp, &r->now, l->racy_ns));
  }
  if (old && old->fpkind == kind && old->fp == fp) {
    /* Same bytes: the new stamp describes what |old| was made from (also
     * true if this scan fails later and |old| stays). */
    old->stamped = stamped;
    old->racy = racy;
    if (stamped)
      old->stamp = r->stamp;
    old->refs++;
    *out = old;
    return 0;
  }
  cfile *f = calloc(1, sizeof *f);
  if (!f || !(f->path = mcpcfg_strdup(path))) {
    free(f);
    return MCPCFG_ERR_NOMEM;
  }
  f->refs = 1;
  f->fpkind = kind;
  f->fp = fp;
  f->stamped = stamped;
  f->racy = racy;
  if (stamped)
    f->stamp = r->stamp;
  if (kind == FP_CONTENT) {
    rv = r->prv;
    mcpcfg_said_deliver(&l->o, path, &r->said);
    if (rv == 0) {
      f->docs = r->docs; /* taken */
      f->ndocs = r->ndocs;
      r->docs = NULL;
      r->ndocs = 0;
    }
    /* A file that is not YAML keeps all it had; one with bad documents
     * keeps what its good ones do not replace. */
    f->bad = rv == 1 || (rv == 0 && r->nbad);
    if (f->bad)
      rv = keep_old(f, old, rv == 1);
    else if (rv == 0 && old && old->bad) /* the user's fix worked: say so */
      mcpcfg_note(&l->o, MCPCFG_NOTE_LOADED_AGAIN, path, 0,
                  "loaded again, %zu resource%s", f->ndocs,
                  f->ndocs == 1 ? "" : "s");
  } else {
    /* Says exactly what stays: the documents of the file's last whole,
     * consistent read (reads of a file being written are never used). */
    char kept[96];
    if (old && old->ndocs)
      snprintf(kept, sizeof kept,
               "the %zu document%s of its last complete read stay%s",
               old->ndocs, old->ndocs == 1 ? "" : "s",
               old->ndocs == 1 ? "s" : "");
    else
      snprintf(kept, sizeof kept, "nothing from it is served");
    if (kind == FP_TOO_BIG)
      mcpcfg_report(&l->o, path, 0,
                    "larger than %zu bytes (%llu); file not loaded: %s",
                    l->o.max_file_size, (unsigned long long)fp, kept);
    else
      mcpcfg_report(&l->o, path, 0, "cannot read: %s; file not loaded: %s",
                    strerror((int)fp), kept);
    f->bad = 1;
    rv = keep_old(f, old, 1);
  }
  if (rv < 0) {
    file_unref(f);
    return rv;
  }
  *out = f;
  return 0;
}

/*
 * Sets |*out| to the state of |path| now: |old| itself (one more reference)
 * when the file did not change, a new file otherwise, NULL when the file is
 * gone. |cur| is what the walk's stat() found: when it equals the stamp of
 * the last read and that read was not racy, the file is not read at all.
 * Reports problems. One file, on the caller's thread.
 */
static int load_file(mcpcfg_loader *l, const char *path, const fstamp *cur,
                     cfile *old, cfile **out) {
  int what = decide(l, path, cur, old);
  reading r;
  reading_init(&r, l, path, cur, old);
  if (what == READ)
    read_one(&r);
  int rv = finish(l, path, what, old, &r, out);
  reading_done(&r);
  return rv;
}

/* ---- many files on several threads ----------------------------------- */

/* Below this many files to read a scan reads them on its own thread. */
enum { THREADED_MIN_FILES = 64, MAX_LOAD_THREADS = 16 };

typedef struct workers {
  reading *r;
  const size_t *todo; /* indices into |r| */
  size_t ntodo;
  /* The next file to take: each thread takes one at a time, so that a
   * thread whose CPU is busy elsewhere holds up one file, not a share. */
  atomic_size_t next;
} workers;

static void *work(void *arg) {
  workers *w = arg;
  for (size_t i; (i = atomic_fetch_add(&w->next, 1)) < w->ntodo;)
    read_one(&w->r[w->todo[i]]);
  return NULL;
}

/* How many threads read a scan's |n| files (1: the caller alone): by
 * default one per CPU the process may run on (taskset, cpusets). */
static size_t threads_for(const mcpcfg_loader *l, size_t n) {
  size_t t = l->o.load_threads;
  if (!t) {
    cpu_set_t set;
    long cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                            : sysconf(_SC_NPROCESSORS_ONLN);
    t = cpus > 0 ? (size_t)cpus : 1;
  }
  if (t > MAX_LOAD_THREADS)
    t = MAX_LOAD_THREADS;
  return n < THREADED_MIN_FILES ? 1 : t;
}

/* mcpcfg_options.start_thread's default. */
static int start_pthread(pthread_t *tid, void *(*fn)(void *), void *arg) {
  return pthread_create(tid, NULL, fn, arg);
}

/* Reads the files of |r| marked READ in |what| on |nthreads| threads (the
 * caller is one of them; a thread that cannot start is one fewer). */
static void read_all(const mcpcfg_loader *l, reading *r, const int *what, size_t n,
                     size_t nthreads, size_t *todo) {
  workers w;
  w.r = r;
  w.todo = todo;
  w.ntodo = 0;
  atomic_init(&w.next, 0);
  for (size_t i = 0; i < n; i++)
    if (what[i] == READ)
      todo[w.ntodo++] = i;
  pthread_t tid[MAX_LOAD_THREADS];
  size_t started = 0;
  int (*start)(pthread_t *, void *(*)(void *), void *) =
      l->o.start_thread ? l->o.start_thread : start_pthread;
  while (started + 1 < nthreads && start(&tid[started], work, &w) == 0)
    started++;
  work(&w); /* the caller too; whatever is left when a thread did not start */
  for (size_t t = 0; t < started; t++)
    pthread_join(tid[t], NULL);
}

/* ------------------------------------------------------------------ */
/* Merging files into collections                                      */
/* ------------------------------------------------------------------ */

typedef struct entry {
  mcpcfg_doc *d;
  size_t file, idx; /* files are sorted by path: this is the precedence */
} entry;

/* Documents in (collection, name) order. */
static int cmp_key(const mcpcfg_doc *a, const mcpcfg_doc *b) {
  int c = strcmp(a->collection, b->collection);
  return c ? c : strcmp(a->res.name, b->res.name);
}

static int cmp_entry(const void *pa, const void *pb) {
  const entry *a = pa, *b = pb;
  int c = cmp_key(a->d, b->d);
  if (!c)
    c = a->file != b->file ? (a->file < b->file ? -1 : 1)
                           : (a->idx < b->idx ? -1 : a->idx > b->idx);
  return c;
}

/* The same documents in the same order: an unchanged file keeps its
 * documents, so their strings are the same objects. */
static int same_res(const coll *a, const coll *b) {
  if (a->n != b->n)
    return 0;
  for (size_t i = 0; i < a->n; i++)
    if (a->res[i].name != b->res[i].name || a->res[i].body != b->res[i].body)
      return 0;
  return 1;
}

/* Builds the collections of |files| (plus every collection already known)
 * into |*pcolls|. Reports each duplicate once. */
static int merge(const mcpcfg_loader *l, cfile **files, size_t nfiles,
                 coll **pcolls, size_t *pn) {
  size_t total = 0, w = 0, n = 0;
  for (size_t i = 0; i < nfiles; i++)
    total += files[i]->ndocs;
  entry *e = malloc((total ? total : 1) * sizeof *e);
  coll *c = calloc(l->ncolls + total + 1, sizeof *c);
  if (!e || !c) {
    free(e);
    free(c);
    return MCPCFG_ERR_NOMEM;
  }
  for (size_t i = 0, k = 0; i < nfiles; i++)
    for (size_t j = 0; j < files[i]->ndocs; j++, k++) {
      e[k].d = files[i]->docs[j];
      e[k].file = i;
      e[k].idx = j;
    }
  qsort(e, total, sizeof *e, cmp_entry);
  /* One document per (collection, name): the one in the file that serves
   * it now, if that file still defines it (a newcomer never takes a name
   * over), else the first (lexically first path, first in its file).
   * Report the others. */
  for (size_t i = 0, k; i < total; i = k) {
    mcpcfg_doc *d = e[i].d;
    for (k = i + 1; k < total && !cmp_key(e[k].d, d); k++)
      ;
    size_t win = i;
    const coll *oc;
    long at = k - i > 1 ? res_pos(l, d->collection, d->res.name, &oc) : -1;
    for (size_t j = i; at >= 0 && j < k; j++)
      if (!strcmp(files[e[j].file]->path, oc->owner[at])) {
        win = j;
        break;
      }
    for (size_t j = i; j < k; j++) {
      if (j == win || e[j].d->dup_reported)
        continue;
      mcpcfg_report(&l->o, files[e[j].file]->path, e[j].d->line,
                    "duplicate resource %s %s, served from %s:%lu; "
                    "document ignored",
                    d->collection, d->res.name, files[e[win].file]->path,
                    e[win].d->line);
      e[j].d->dup_reported = 1;
    }
    e[win].d->dup_reported = 0; /* if it loses again later, say so again */
    e[win].idx = k - i; /* from here on: how many define the name */
    e[w++] = e[win];
  }
  /* Merge the known names with those of the winners, both sorted. */
  for (size_t i = 0, j = 0; i < l->ncolls || j < w; n++) {
    int cmp = i == l->ncolls ? 1
              : j == w       ? -1
                             : strcmp(l->colls[i].name, e[j].d->collection);
    const coll *old = NULL;
    if (cmp <= 0) {
      old = &l->colls[i++];
      c[n].name = old->name;
    } else {
      c[n].fresh = 1;
      if (!(c[n].name = mcpcfg_strdup(e[j].d->collection)))
        goto nomem;
    }
    size_t k = j;
    while (k < w && !strcmp(e[k].d->collection, c[n].name))
      k++;
    if (k > j && (!(c[n].res = malloc((k - j) * sizeof *c[n].res)) ||
                  !(c[n].owner = malloc((k - j) * sizeof *c[n].owner)) ||
                  !(c[n].doc = malloc((k - j) * sizeof *c[n].doc)) ||
                  !(c[n].ndef = malloc((k - j) * sizeof *c[n].ndef))))
      goto nomem;
    for (; j < k; j++) {
      c[n].ndef[c[n].n] = (unsigned)e[j].idx;
      c[n].owner[c[n].n] = files[e[j].file]->path;
      c[n].doc[c[n].n] = e[j].d;
      c[n].res[c[n].n++] = e[j].d->res;
    }
    c[n].gen = old ? old->gen + !same_res(old, &c[n]) : 1;
    c[n].applied = old ? old->applied : 0;
  }
  free(e);
  *pcolls = c;
  *pn = n;
  return 0;
nomem:
  free(e);
  colls_free(c, n + 1, 1);
  return MCPCFG_ERR_NOMEM;
}

/* ------------------------------------------------------------------ */
/* Scan                                                                */
/* ------------------------------------------------------------------ */

static int cmp_found(const void *a, const void *b) {
  return strcmp(((const found *)a)->path, ((const found *)b)->path);
}

static int cmp_file(const void *a, const void *b) {
  return strcmp((*(cfile *const *)a)->path, (*(cfile *const *)b)->path);
}

static cfile *find_file(const mcpcfg_loader *l, const char *path) {
  size_t lo = 0, hi = l->nfiles;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(l->files[mid]->path, path);
    if (c == 0)
      return l->files[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

static int under(const char *path, const strvec *dirs) {
  for (size_t i = 0; i < dirs->n; i++) {
    size_t n = strlen(dirs->v[i]);
    if (!strncmp(path, dirs->v[i], n) && (path[n] == '/' || !path[n]))
      return 1;
  }
  return 0;
}

int mcpcfg_loader_scan(mcpcfg_loader *l) {
  walk w;
  struct stat st;
  cfile **files = NULL, **olds = NULL;
  coll *colls = NULL;
  size_t nfiles = 0, ncolls = 0, nreadings = 0, *todo = NULL;
  int rv, changed = 0, *what = NULL;
  reading *reads = NULL;
  memset(&w, 0, sizeof w);
  w.l = l;
  if (stat(l->root, &st) != 0)
    rv = root_problem(&w, "cannot read: ", strerror(errno));
  else if (!S_ISDIR(st.st_mode))
    rv = root_problem(&w, "not a directory", "");
  else
    rv = walk_dir(&w, l->root, &st, 1);
  if (rv != MCPCFG_ERR_NOMEM) { /* the walk is complete: remember it */
    strvec t = l->problems;
    l->problems = w.problems;
    w.problems = t;
  }
  if (rv < 0)
    goto out;
  if (w.paths.n > 1) /* v is NULL when empty: not for qsort/bsearch */
    qsort(w.paths.v, w.paths.n, sizeof *w.paths.v, cmp_found);
  files = malloc((w.paths.n + l->nfiles + 1) * sizeof *files);
  if (!files) {
    rv = MCPCFG_ERR_NOMEM;
    goto out;
  }
  /* What to do with each file, then the reads (on several threads when
   * there are many: all read first), then the results in path order: the
   * same reports in the same order, whatever the threads. */
  size_t n = w.paths.n, nread = 0;
  if (n) {
    what = malloc(n * sizeof *what);
    olds = malloc(n * sizeof *olds);
    reads = malloc(n * sizeof *reads);
    todo = malloc(n * sizeof *todo);
    if (!what || !olds || !reads || !todo) {
      rv = MCPCFG_ERR_NOMEM;
      goto out;
    }
  }
  for (size_t i = 0; i < n; i++) {
    olds[i] = find_file(l, w.paths.v[i].path);
    what[i] = decide(l, w.paths.v[i].path, &w.paths.v[i].st, olds[i]);
    reading_init(&reads[i], l, w.paths.v[i].path, &w.paths.v[i].st, olds[i]);
    nread += what[i] == READ;
  }
  nreadings = n;
  size_t nthreads = threads_for(l, nread);
  if (nthreads > 1)
    read_all(l, reads, what, n, nthreads, todo);
  for (size_t i = 0; i < n; i++) {
    cfile *f;
    if (nthreads == 1 && what[i] == READ) /* each file read as its turn comes */
      read_one(&reads[i]);
    rv = finish(l, w.paths.v[i].path, what[i], olds[i], &reads[i], &f);
    reading_done(&reads[i]);
    if (rv < 0)
      goto out;
    if (f)
      files[nfiles++] = f;
    changed |= f != olds[i];
  }
  for (size_t i = 0; i < l->nfiles; i++) {
    cfile *f = l->files[i];
    found key;
    key.path = f->path;
    if (w.paths.n &&
        bsearch(&key, w.paths.v, w.paths.n, sizeof *w.paths.v, cmp_found))
      continue;
    if (under(f->path, &w.skipped)) { /* not read this time: keep it */
      f->refs++;
      files[nfiles++] = f;
    } else { /* deleted */
      changed = 1;
    }
  }
  if (!changed) {
    rv = 0;
    goto out;
  }
  qsort(files, nfiles, sizeof *files, cmp_file);
  if ((rv = merge(l, files, nfiles, &colls, &ncolls)) < 0)
    goto out;
  /* Commit: from here on nothing fails. */
  for (size_t i = 0; i < l->nfiles; i++)
    file_unref(l->files[i]);
  free(l->files);
  l->files = files;
  l->nfiles = nfiles;
  files = NULL;
  nfiles = 0;
  colls_free(l->colls, l->ncolls, 1); /* names moved to |colls| */
  l->colls = colls;
  l->ncolls = ncolls;
  for (size_t i = 0; i < ncolls; i++)
    colls[i].fresh = 0;
  rv = 1;
out:
  for (size_t i = 0; i < nreadings; i++) /* those a failure left */
    reading_done(&reads[i]);
  free(reads);
  free(what);
  free(olds);
  free(todo);
  for (size_t i = 0; i < nfiles; i++)
    file_unref(files[i]);
  free(files);
  for (size_t i = 0; i < w.paths.n; i++)
    free(w.paths.v[i].path);
  free(w.paths.v);
  strvec_free(&w.skipped);
  strvec_free(&w.problems);
  return rv;
}

/* ------------------------------------------------------------------ */
/* Update: the files a watcher named                                   */
/* ------------------------------------------------------------------ */

typedef struct change {
  const char *path;
  cfile *old, *f; /* before and after; NULL: no such file */
} change;

/* A document of a change, for sorting by (collection, name). */
typedef struct dref {
  mcpcfg_doc *d;
  size_t ch;  /* the change */
  int is_new; /* from |f|, else from |old| */
} dref;

static int cmp_dref(const void *pa, const void *pb) {
  const dref *a = pa, *b = pb;
  int c = cmp_key(a->d, b->d);
  if (!c)
    c = a->ch != b->ch ? (a->ch < b->ch ? -1 : 1) : a->is_new - b->is_new;
  return c;
}

static int cmp_change(const void *a, const void *b) {
  return strcmp(((const change *)a)->path, ((const change *)b)->path);
}

/* Position of |name| in |c| (found or where it goes). */
static size_t name_pos(const coll *c, const char *name, int *found) {
  return tool_sorted_find(c->res, c->n, sizeof *c->res,
                          offsetof(mcp_resource, name), name, found);
}

static int str_eq(const char *a, const char *b) {
  return !strcmp(a ? a : "", b ? b : "");
}

static int kvs_eq(const mcp_kv *a, size_t na, const mcp_kv *b, size_t nb) {
  if (na != nb)
    return 0;
  for (size_t i = 0; i < na; i++)
    if (strcmp(a[i].key, b[i].key) || strcmp(a[i].value, b[i].value))
      return 0;
  return 1;
}

/* Everything the store compares: a document re-parsed from a file whose
 * other documents changed is not a change of its own (a 100-document file
 * with one edit is one upsert, not 100). */
static int res_eq(const mcp_resource *a, const mcp_resource *b) {
  return str_eq(a->version, b->version) && str_eq(a->type_url, b->type_url) &&
         a->body_len == b->body_len &&
         (!a->body_len || !memcmp(a->body, b->body, a->body_len)) &&
         a->has_create_time == b->has_create_time &&
         a->create_time_seconds == b->create_time_seconds &&
         a->create_time_nanos == b->create_time_nanos &&
         kvs_eq(a->labels, a->nlabels, b->labels, b->nlabels) &&
         kvs_eq(a->annotations, a->nannotations, b->annotations,
                b->nannotations);
}

/* The same source text (opts.keep_text: etcdpub publishes it; NULL
 * otherwise). */
static int text_eq(const mcpcfg_doc *a, const mcpcfg_doc *b) {
  return a->text_len == b->text_len &&
         (!a->text_len || !memcmp(a->text, b->text, a->text_len));
}

/* Records |name| as changed in |c| since its last apply; past a few,
 * replacing the whole collection is as cheap. */
static void delta_note(coll *c, const char *name) {
  if (c->gen == c->applied && !c->delta_ok) { /* a fresh delta */
    delta_clear(c);
    c->delta_ok = 1;
    c->delta_base = c->applied;
  }
  if (!c->delta_ok)
    return;
  for (size_t i = 0; i < c->ndelta; i++)
    if (!strcmp(c->delta[i], name))
      return;
  char **v = c->ndelta < 64 ? realloc(c->delta, (c->ndelta + 1) * sizeof *v)
                            : NULL;
  char *s = v ? mcpcfg_strdup(name) : NULL;
  if (v)
    c->delta = v;
  if (!s) {
    delta_clear(c); /* apply replaces the collection */
    return;
  }
  c->delta[c->ndelta++] = s;
}

/*
 * Brings the collections up to date with |ch| in place, in O(documents of
 * the changed files + the size of each collection they touch), when every
 * name those files define or defined is defined by that file only, in
 * collections that exist, and no name is in two changes. Returns 1 when
 * done, 0 when it does not apply (nothing changed: the caller merges
 * everything), or NOMEM (nothing changed but spare capacity).
 */
/* Moves entries |from|.. of |c|'s parallel arrays to |to|.. (one up to
 * open a slot, one down to close one; |c->n| is the caller's). */
static void coll_shift(coll *c, size_t from, size_t to) {
  size_t k = c->n - from;
  memmove(c->res + to, c->res + from, k * sizeof *c->res);
  memmove(c->owner + to, c->owner + from, k * sizeof *c->owner);
  memmove(c->doc + to, c->doc + from, k * sizeof *c->doc);
  memmove(c->ndef + to, c->ndef + from, k * sizeof *c->ndef);
}

static int merge_changes(mcpcfg_loader *l, const change *ch, size_t nch) {
  size_t total = 0, k;
  for (size_t i = 0; i < nch; i++)
    total += (ch[i].old ? ch[i].old->ndocs : 0) + (ch[i].f ? ch[i].f->ndocs : 0);
  dref *r = malloc((total ? total : 1) * sizeof *r);
  size_t *grow = calloc(l->ncolls + 1, sizeof *grow);
  int rv = 0;
  if (!r || !grow) {
    rv = MCPCFG_ERR_NOMEM;
    goto out;
  }
  k = 0;
  for (size_t i = 0; i < nch; i++) {
    for (int side = 0; side < 2; side++) {
      const cfile *f = side ? ch[i].f : ch[i].old;
      for (size_t j = 0; f && j < f->ndocs; j++) {
        r[k].d = f->docs[j];
        r[k].ch = i;
        r[k++].is_new = side;
      }
    }
  }
  qsort(r, total, sizeof *r, cmp_dref);
  /* Check: per name, at most one old and one new document, of one change;
   * an old one is what the view serves, from that file alone; a new one
   * without an old one is a name the view does not have. */
  for (size_t i = 0, j; i < total; i = j) {
    for (j = i + 1; j < total && !cmp_key(r[j].d, r[i].d); j++)
      ;
    if (j - i > 2 || (j - i == 2 && (r[i].ch != r[i + 1].ch ||
                                     r[i].is_new == r[i + 1].is_new)))
      goto out; /* duplicates, or a name moving between files */
    int found;
    size_t ci = coll_pos(l, r[i].d->collection, &found);
    if (!found)
      goto out; /* a new collection */
    const coll *c = &l->colls[ci];
    size_t at = name_pos(c, r[i].d->res.name, &found);
    if (!r[i].is_new) {
      if (!found || c->ndef[at] != 1 ||
          strcmp(c->owner[at], ch[r[i].ch].path) != 0)
        goto out; /* the old document was not the one served */
    } else if (found) {
      goto out; /* served from another file */
    } else {
      grow[ci]++;
    }
  }
  /* Room for the insertions first: from here on nothing fails. */
  for (size_t ci = 0; ci < l->ncolls; ci++) {
    coll *c = &l->colls[ci];
    size_t n = c->n + grow[ci];
    if (!grow[ci])
      continue;
    mcp_resource *res = realloc(c->res, n * sizeof *res);
    if (res)
      c->res = res;
    const char **owner = res ? realloc(c->owner, n * sizeof *owner) : NULL;
    if (owner)
      c->owner = owner;
    const mcpcfg_doc **doc = owner ? realloc(c->doc, n * sizeof *doc) : NULL;
    if (doc)
      c->doc = doc;
    unsigned *ndef = doc ? realloc(c->ndef, n * sizeof *ndef) : NULL;
    if (ndef)
      c->ndef = ndef;
    if (!ndef) {
      rv = MCPCFG_ERR_NOMEM;
      goto out;
    }
  }
  memset(grow, 0, (l->ncolls + 1) * sizeof *grow); /* now: "changed" */
  for (size_t i = 0, j; i < total; i = j) {
    j = i + 1;
    if (j < total && !cmp_key(r[j].d, r[i].d))
      j++;
    const dref *nw = r[j - 1].is_new ? &r[j - 1] : NULL; /* new sorts last */
    int found;
    size_t ci = coll_pos(l, r[i].d->collection, &found);
    coll *c = &l->colls[ci];
    size_t at = name_pos(c, r[i].d->res.name, &found);
    if (!nw) { /* gone from its file */
      coll_shift(c, at + 1, at);
      c->n--;
    } else {
      if (!found) {
        coll_shift(c, at, at + 1);
        c->n++;
      } else if (c->doc[at] == nw->d ||
                 (res_eq(&c->res[at], &nw->d->res) &&
                  text_eq(c->doc[at], nw->d))) {
        /* The same document (kept from a bad read), or the same content
         * re-parsed: the new file's objects, no change. */
        c->res[at] = nw->d->res;
        c->doc[at] = nw->d;
        c->owner[at] = ch[nw->ch].path;
        continue;
      }
      c->res[at] = nw->d->res;
      c->doc[at] = nw->d;
      c->owner[at] = ch[nw->ch].path;
      c->ndef[at] = 1;
    }
    delta_note(c, r[i].d->res.name); /* before the bump: fresh or not */
    if (!grow[ci]) {
      grow[ci] = 1;
      c->gen++;
    }
  }
  rv = 1;
out:
  free(r);
  free(grow);
  return rv;
}

int mcpcfg_loader_update(mcpcfg_loader *l, const char *const *paths,
                         size_t n) {
  change *ch = malloc((n ? n : 1) * sizeof *ch);
  cfile **files = NULL;
  size_t nch = 0, nfiles = 0;
  size_t rootlen = strlen(l->root);
  coll *colls = NULL;
  size_t ncolls = 0;
  int rv = 0;
  if (!ch)
    return MCPCFG_ERR_NOMEM;
  for (size_t i = 0; i < n; i++) {
    const char *path = paths[i], *base = strrchr(path, '/');
    /* Only what the walk would find: below the root, a YAML name, no
     * hidden component (the watcher never names anything else). */
    if (strncmp(path, l->root, rootlen) != 0 || path[rootlen] != '/' ||
        strstr(path + rootlen, "/.") || !mcpcfg_is_yaml_name(base + 1))
      continue;
    struct stat st;
    cfile *old = find_file(l, path), *f = NULL;
    if (stat(path, &st) == 0) {
      if (S_ISDIR(st.st_mode)) { /* a directory now: only a walk knows */
        for (size_t j = 0; j < nch; j++)
          file_unref(ch[j].f);
        free(ch);
        return mcpcfg_loader_scan(l);
      }
      if (S_ISREG(st.st_mode)) {
        fstamp cur;
        stamp_of(&st, &cur);
        if ((rv = load_file(l, path, &cur, old, &f)) < 0)
          goto out;
      }
    } else if (errno != ENOENT && errno != ENOTDIR) {
      continue; /* as the walk's skip(): what it had stays */
    }
    if (f == old) {
      file_unref(f); /* load_file's reference: nothing changed */
      continue;
    }
    ch[nch].path = f ? f->path : path;
    ch[nch].old = old;
    ch[nch++].f = f;
  }
  if (!nch) {
    rv = 0;
    goto out;
  }
  /* The file list with the changes in place (sorted by path). */
  qsort(ch, nch, sizeof *ch, cmp_change);
  if (!(files = malloc((l->nfiles + nch) * sizeof *files))) {
    rv = MCPCFG_ERR_NOMEM;
    goto out;
  }
  /* Runs of unchanged files are copied whole: a binary search per
   * change, not a comparison per file. */
  size_t i = 0;
  for (size_t j = 0; j < nch; j++) {
    size_t lo = i, hi = l->nfiles;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (strcmp(l->files[mid]->path, ch[j].path) < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (lo > i) /* (l->files is NULL when empty: no memcpy of it) */
      memcpy(files + nfiles, l->files + i, (lo - i) * sizeof *files);
    nfiles += lo - i;
    i = lo + (lo < l->nfiles && l->files[lo] == ch[j].old && ch[j].old);
    if (ch[j].f)
      files[nfiles++] = ch[j].f;
  }
  if (l->nfiles > i)
    memcpy(files + nfiles, l->files + i, (l->nfiles - i) * sizeof *files);
  nfiles += l->nfiles - i;
  if ((rv = merge_changes(l, ch, nch)) < 0)
    goto out;
  if (rv == 0) { /* duplicates or a new collection: merge everything */
    if ((rv = merge(l, files, nfiles, &colls, &ncolls)) < 0)
      goto out;
    colls_free(l->colls, l->ncolls, 1); /* names moved to |colls| */
    l->colls = colls;
    l->ncolls = ncolls;
    for (size_t i = 0; i < ncolls; i++)
      colls[i].fresh = 0;
  }
  /* Commit: the new list holds the new files' references. */
  for (size_t j = 0; j < nch; j++) {
    file_unref(ch[j].old);
    ch[j].f = NULL;
  }
  free(l->files);
  l->files = files;
  l->nfiles = nfiles;
  files = NULL;
  rv = 1;
out:
  for (size_t j = 0; j < nch; j++)
    file_unref(ch[j].f);
  free(files);
  free(ch);
  return rv;
}
