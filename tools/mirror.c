/* The --out mirror of mcp-sink. */
#include "mirror.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "args.h"
#include "log.h"
#include "resource_json.h"

#define TMP_PREFIX ".mcp-sink-tmp-"

typedef struct mcoll {
  char *name;
  char *dir;       /* DIR/<name> */
  json_t *written; /* name -> version of the file on disk */
  int reconciled;  /* the first full state was applied */
} mcoll;

struct tool_mirror {
  char *root;
  mcoll *colls;
  size_t ncolls;
  int first_is_full; /* tool_mirror_first_is_full() */
  const mcp_schema *schema; /* tool_mirror_set_schema(); NULL: none */
};

void tool_mirror_first_is_full(tool_mirror *m) { m->first_is_full = 1; }

void tool_mirror_set_schema(tool_mirror *m, const mcp_schema *schema) {
  m->schema = schema;
}

static char *join(const char *a, const char *b, const char *suffix) {
  size_t la = strlen(a), lb = strlen(b), ls = strlen(suffix);
  char *p = malloc(la + lb + ls + 2);
  if (p) {
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, lb);
    memcpy(p + la + 1 + lb, suffix, ls + 1);
  }
  return p;
}

/* mkdir -p of |path| (modified in place and restored). */
static int mkdirs(char *path) {
  for (char *p = path + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p = '\0';
      int rv = mkdir(path, 0755);
      int e = errno;
      *p = c;
      if (rv != 0 && e != EEXIST) {
        errno = e;
        return -1;
      }
      if (c == '\0')
        break;
    }
  }
  struct stat st;
  if (stat(path, &st) != 0)
    return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

/* mkdir -p of the directory part of |path|. */
static int mkparents(char *path) {
  char *slash = strrchr(path, '/');
  if (!slash || slash == path)
    return 0;
  *slash = '\0';
  int rv = mkdirs(path);
  int e = errno;
  *slash = '/';
  errno = e;
  return rv;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Writes |data| to |path| through a temporary file and rename(2). */
static int write_atomic(const char *path, const char *data, size_t len) {
  const char *slash = strrchr(path, '/');
  size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
  char *tmp = malloc(dl + sizeof(TMP_PREFIX "XXXXXX"));
  if (!tmp) {
    errno = ENOMEM;
    return -1;
  }
  memcpy(tmp, path, dl);
  memcpy(tmp + dl, TMP_PREFIX "XXXXXX", sizeof(TMP_PREFIX "XXXXXX"));
  int fd = mkstemp(tmp);
  if (fd < 0) {
    free(tmp);
    return -1;
  }
  int rv = write_all(fd, data, len);
  if (rv == 0)
    rv = fchmod(fd, 0644);
  if (close(fd) != 0)
    rv = -1;
  if (rv == 0)
    rv = rename(tmp, path);
  if (rv != 0) {
    int e = errno;
    unlink(tmp);
    errno = e;
  }
  free(tmp);
  return rv;
}

/* Removes the empty directories from |path|'s parent up to |stop|
 * (exclusive). */
static void prune(const char *path, const char *stop) {
  char *p = strdup(path);
  size_t sl = strlen(stop);
  for (char *slash; p && (slash = strrchr(p, '/')) != NULL;) {
    *slash = '\0';
    if (strlen(p) <= sl || rmdir(p) != 0)
      break;
  }
  free(p);
}

static void free_colls(tool_mirror *m) {
  for (size_t i = 0; i < m->ncolls; i++) {
    free(m->colls[i].name);
    free(m->colls[i].dir);
    json_decref(m->colls[i].written);
  }
  free(m->colls);
}

int tool_mirror_new(tool_mirror **pm, const char *dir,
                    const char *const *colls, size_t ncolls, char *err,
                    size_t errlen) {
  tool_mirror *m = calloc(1, sizeof(*m));
  if (!m || !(m->root = strdup(dir)) ||
      !(m->colls = calloc(ncolls ? ncolls : 1, sizeof(mcoll)))) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  /* No trailing slashes: paths are compared as strings. */
  for (size_t l = strlen(m->root); l > 1 && m->root[l - 1] == '/';)
    m->root[--l] = '\0';
  for (size_t i = 0; i < ncolls; i++) {
    mcoll *c = &m->colls[i];
    m->ncolls++;
    if (!(c->name = strdup(colls[i])) || !(c->dir = join(m->root, colls[i], "")) ||
        !(c->written = json_object())) {
      snprintf(err, errlen, "out of memory");
      goto fail;
    }
  }
  if (mkdirs(m->root) != 0) {
    snprintf(err, errlen, "cannot create %s: %s", m->root, strerror(errno));
    goto fail;
  }
  *pm = m;
  return 0;
fail:
  if (m) {
    free_colls(m);
    free(m->root);
    free(m);
  }
  return -1;
}

void tool_mirror_del(tool_mirror *m) {
  if (m) {
    free_colls(m);
    free(m->root);
    free(m);
  }
}

/* 1 when |path| is the directory of a requested collection. */
static int is_coll_dir(const tool_mirror *m, const char *path) {
  for (size_t i = 0; i < m->ncolls; i++) {
    if (strcmp(m->colls[i].dir, path) == 0)
      return 1;
  }
  return 0;
}

/*
 * Deletes the files below |path| (a directory of collection |c|, |rel| the
 * resource-name prefix it stands for, "" at the top) that hold no resource
 * of |c|, and the directories left empty.
 */
static void sweep(tool_mirror *m, mcoll *c, const char *path,
                  const char *rel) {
  DIR *d = opendir(path);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    const char *n = de->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
      continue;
    char *child = join(path, n, "");
    if (!child)
      break;
    struct stat st;
    if (lstat(child, &st) != 0) {
      free(child);
      continue;
    }
    size_t nl = strlen(n);
    if (S_ISDIR(st.st_mode)) {
      if (!is_coll_dir(m, child)) {
        char *sub = rel[0] ? join(rel, n, "") : strdup(n);
        if (sub) {
          sweep(m, c, child, sub);
          free(sub);
          rmdir(child); /* only when empty */
        }
      }
    } else if (S_ISREG(st.st_mode)) {
      int stale = 0;
      if (strncmp(n, TMP_PREFIX, sizeof(TMP_PREFIX) - 1) == 0) {
        stale = 1;
      } else if (nl > 5 && strcmp(n + nl - 5, ".json") == 0) {
        char *name = rel[0] ? join(rel, n, "") : strdup(n);
        if (name) {
          name[strlen(name) - 5] = '\0';
          stale = json_object_get(c->written, name) == NULL;
          free(name);
        }
      }
      if (stale) {
        if (unlink(child) == 0)
          log_debug("mirror: removed stale %s", child);
        else
          log_warn("mirror: cannot remove %s: %s", child, strerror(errno));
      }
    }
    free(child);
  }
  closedir(d);
}

static int remove_file(mcoll *c, const char *name, char *msg, size_t msglen) {
  char *path = join(c->dir, name, ".json");
  if (!path) {
    snprintf(msg, msglen, "out of memory");
    return MCP_CODE_INTERNAL;
  }
  int code = 0;
  if (unlink(path) != 0 && errno != ENOENT) {
    snprintf(msg, msglen, "cannot remove %s: %s", path, strerror(errno));
    code = MCP_CODE_INTERNAL;
  } else {
    prune(path, c->dir);
    json_object_del(c->written, name);
  }
  free(path);
  return code;
}

/* Full state: removes the files written for names the new state lacks
 * (beyond |removed|: a change that failed half way may have left some). */
static int remove_others(mcoll *c, const mcp_change *ch, char *msg,
                         size_t msglen) {
  if (json_object_size(c->written) <= ch->nresources)
    return 0; /* every name written is in the new state */
  json_t *keep = json_object();
  for (size_t i = 0; keep && i < ch->nresources; i++) {
    if (json_object_set_new(keep, ch->resources[i].name, json_true()) != 0) {
      json_decref(keep);
      keep = NULL;
    }
  }
  if (!keep) {
    snprintf(msg, msglen, "out of memory");
    return MCP_CODE_RESOURCE_EXHAUSTED;
  }
  int code = 0;
  const char *name;
  json_t *v;
  void *tmp;
  json_object_foreach_safe(c->written, tmp, name, v) {
    if (!code && !json_object_get(keep, name))
      code = remove_file(c, name, msg, msglen);
  }
  json_decref(keep);
  return code;
}

int tool_mirror_apply(tool_mirror *m, const mcp_change *ch, char *msg,
                      size_t msglen) {
  mcoll *c = NULL;
  for (size_t i = 0; i < m->ncolls && !c; i++) {
    if (strcmp(m->colls[i].name, ch->collection) == 0)
      c = &m->colls[i];
  }
  if (!c)
    return 0;
  /* Check everything before writing anything. */
  for (size_t i = 0; i < ch->nresources; i++) {
    if (!tool_path_safe(ch->resources[i].name)) {
      snprintf(msg, msglen, "resource name \"%s\" is not a safe path",
               ch->resources[i].name);
      return MCP_CODE_INVALID_ARGUMENT;
    }
  }
  json_t **docs = calloc(ch->nresources ? ch->nresources : 1, sizeof(*docs));
  if (!docs) {
    snprintf(msg, msglen, "out of memory");
    return MCP_CODE_RESOURCE_EXHAUSTED;
  }
  int code = 0;
  for (size_t i = 0; i < ch->nresources && !code; i++) {
    const mcp_resource *r = &ch->resources[i];
    const char *have = json_string_value(json_object_get(c->written, r->name));
    if (have && strcmp(have, r->version) == 0)
      continue; /* this version is on disk */
    char why[200];
    if (!(docs[i] = tool_resource_json2(r, m->schema, why, sizeof(why)))) {
      snprintf(msg, msglen, "resource %s: %s", r->name, why);
      code = MCP_CODE_INVALID_ARGUMENT;
    }
  }
  if (!code && (ch->nresources || !c->reconciled) && mkdirs(c->dir) != 0) {
    snprintf(msg, msglen, "cannot create %s: %s", c->dir, strerror(errno));
    code = MCP_CODE_INTERNAL;
  }
  for (size_t i = 0; i < ch->nresources && !code; i++) {
    if (!docs[i])
      continue;
    const mcp_resource *r = &ch->resources[i];
    char *text = json_dumps(docs[i], JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    char *path = join(c->dir, r->name, ".json");
    size_t tl = text ? strlen(text) : 0;
    if (text)
      text[tl] = '\n'; /* json_dumps' NUL becomes the final newline */
    if (!text || !path) {
      snprintf(msg, msglen, "out of memory");
      code = MCP_CODE_RESOURCE_EXHAUSTED;
    } else if (mkparents(path) != 0 || write_atomic(path, text, tl + 1) != 0) {
      snprintf(msg, msglen, "cannot write %s: %s", path, strerror(errno));
      code = MCP_CODE_INTERNAL;
    } else if (json_object_set_new(c->written, r->name,
                                   json_string(r->version)) != 0) {
      json_object_del(c->written, r->name); /* rewritten next time */
    }
    free(text);
    free(path);
  }
  for (size_t i = 0; i < ch->nresources; i++)
    json_decref(docs[i]);
  free(docs);
  /* A removed name that is not a safe path was never written (its change
   * was rejected): nothing to remove. Incremental pushes name such
   * resources when they came and went after what the sink ACKed last. */
  for (size_t i = 0; i < ch->nremoved && !code; i++) {
    if (tool_path_safe(ch->removed[i]))
      code = remove_file(c, ch->removed[i], msg, msglen);
  }
  /* The whole content: full state, or the first change when it is. */
  int whole = !ch->incremental || (m->first_is_full && !c->reconciled);
  if (!code && whole)
    code = remove_others(c, ch, msg, msglen);
  if (!code && whole && !c->reconciled) {
    sweep(m, c, c->dir, "");
    c->reconciled = 1;
  }
  return code;
}
