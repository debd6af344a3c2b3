/* Access lists of peer identities for any thread: the core's rules
 * (mcp_acl, mcp/auth.h) behind a lock, and a file read again when it
 * changes. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

#define ACL_MAX_FILE (1 << 20)

/* One version of the file, to notice changes. */
typedef struct acl_sig {
  int present;
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
} acl_sig;

struct mcp_grpc_acl {
  mcp_mem mem;        /* copied at creation; libc by default */
  pthread_mutex_t mu; /* guards everything below */
  mcp_acl *rules;     /* lasting (add) and parsed (parse, load) rules */
  char *path;         /* the file of the last load, or NULL */
  acl_sig seen;       /* the version of it last read (or found missing) */
};

int mcp_grpc_acl_new(mcp_grpc_acl **pacl) {
  return mcp_grpc_acl_new2(pacl, NULL);
}

int mcp_grpc_acl_new2(mcp_grpc_acl **pacl, const mcp_mem *mem) {
  if (!pacl)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_mem m;
  mcp_grpc_mem_init(&m, mem);
  mcp_grpc_acl *acl = mcp_grpc_calloc(&m, 1, sizeof(*acl));
  if (!acl)
    return MCP_ERR_NOMEM;
  acl->mem = m;
  if (mcp_acl_new(&acl->rules, &acl->mem) < 0) {
    mcp_grpc_free(&m, acl);
    return MCP_ERR_NOMEM;
  }
  if (pthread_mutex_init(&acl->mu, NULL) != 0) {
    mcp_acl_del(acl->rules);
    mcp_grpc_free(&m, acl);
    return MCP_ERR_NOMEM;
  }
  *pacl = acl;
  return 0;
}

void mcp_grpc_acl_del(mcp_grpc_acl *acl) {
  if (!acl)
    return;
  mcp_acl_del(acl->rules);
  mcp_grpc_free(&acl->mem, acl->path);
  pthread_mutex_destroy(&acl->mu);
  mcp_mem m = acl->mem;
  mcp_grpc_free(&m, acl);
}

int mcp_grpc_acl_add(mcp_grpc_acl *acl, mcp_grpc_acl_action action,
                     const char *pattern) {
  if (!acl)
    return MCP_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&acl->mu);
  int rv = mcp_acl_add(acl->rules, (mcp_acl_action)action, pattern);
  pthread_mutex_unlock(&acl->mu);
  return rv;
}

int mcp_grpc_acl_parse(mcp_grpc_acl *acl, const char *text, size_t len,
                       char *err, size_t errlen) {
  if (!acl) {
    if (err && errlen)
      err[0] = '\0';
    return MCP_ERR_INVALID_ARGUMENT;
  }
  pthread_mutex_lock(&acl->mu);
  int rv = mcp_acl_parse(acl->rules, text, len, err, errlen);
  pthread_mutex_unlock(&acl->mu);
  return rv;
}

static void sig_of(const struct stat *st, acl_sig *sig) {
  memset(sig, 0, sizeof(*sig));
  sig->present = 1;
  sig->dev = st->st_dev;
  sig->ino = st->st_ino;
  sig->size = st->st_size;
  sig->mtime = st->st_mtim;
}

static int sig_eq(const acl_sig *a, const acl_sig *b) {
  if (a->present != b->present)
    return 0;
  return !a->present ||
         (a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
          a->mtime.tv_sec == b->mtime.tv_sec &&
          a->mtime.tv_nsec == b->mtime.tv_nsec);
}

/* Reads |path| and parses it into the list (under the lock); |*sig| is
 * the version read (present = 0 when the file could not be opened). */
static int load(mcp_grpc_acl *acl, const char *path, acl_sig *sig, char *err,
                size_t errlen) {
  memset(sig, 0, sizeof(*sig));
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (err && errlen)
      snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return MCP_ERR_IO;
  }
  struct stat st;
  if (fstat(fileno(f), &st) < 0) {
    if (err && errlen)
      snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    fclose(f);
    return MCP_ERR_IO;
  }
  sig_of(&st, sig);
  char *buf = mcp_grpc_malloc(&acl->mem, ACL_MAX_FILE + 1);
  if (!buf) {
    fclose(f);
    return MCP_ERR_NOMEM;
  }
  size_t len = fread(buf, 1, ACL_MAX_FILE + 1, f);
  int rd_err = ferror(f);
  fclose(f);
  int rv;
  if (rd_err) {
    if (err && errlen)
      snprintf(err, errlen, "cannot read %s", path);
    rv = MCP_ERR_IO;
  } else {
    rv = mcp_grpc_acl_parse(acl, buf, len, err, errlen);
  }
  mcp_grpc_free(&acl->mem, buf);
  return rv;
}

int mcp_grpc_acl_load_file(mcp_grpc_acl *acl, const char *path, char *err,
                           size_t errlen) {
  if (err && errlen)
    err[0] = '\0';
  if (!acl || !path)
    return MCP_ERR_INVALID_ARGUMENT;
  char *copy = mcp_grpc_strdup(&acl->mem, path);
  if (!copy)
    return MCP_ERR_NOMEM;
  acl_sig sig;
  int rv = load(acl, path, &sig, err, errlen);
  if (rv < 0) {
    mcp_grpc_free(&acl->mem, copy);
    return rv;
  }
  pthread_mutex_lock(&acl->mu);
  mcp_grpc_free(&acl->mem, acl->path);
  acl->path = copy;
  acl->seen = sig;
  pthread_mutex_unlock(&acl->mu);
  return 0;
}

int mcp_grpc_acl_reload(mcp_grpc_acl *acl, char *err, size_t errlen) {
  if (err && errlen)
    err[0] = '\0';
  if (!acl)
    return MCP_ERR_INVALID_ARGUMENT;
  /* One reloader at a time is the caller's business; the lock is not
   * held while reading, so that checks go on meanwhile. */
  pthread_mutex_lock(&acl->mu);
  char *path = acl->path ? mcp_grpc_strdup(&acl->mem, acl->path) : NULL;
  int had_path = acl->path != NULL;
  acl_sig seen = acl->seen;
  pthread_mutex_unlock(&acl->mu);
  if (!had_path)
    return MCP_ERR_NOT_FOUND;
  if (!path)
    return MCP_ERR_NOMEM;

  struct stat st;
  acl_sig now;
  memset(&now, 0, sizeof(now));
  if (stat(path, &st) == 0)
    sig_of(&st, &now);
  if (sig_eq(&now, &seen)) {
    mcp_grpc_free(&acl->mem, path);
    return 0;
  }
  acl_sig sig;
  int rv = load(acl, path, &sig, err, errlen);
  pthread_mutex_lock(&acl->mu);
  /* A version that fails is reported once: the next change is read. */
  acl->seen = sig.present || rv == 0 ? sig : now;
  pthread_mutex_unlock(&acl->mu);
  mcp_grpc_free(&acl->mem, path);
  return rv < 0 ? rv : 1;
}

size_t mcp_grpc_acl_count(const mcp_grpc_acl *acl) {
  pthread_mutex_t *mu = (pthread_mutex_t *)&acl->mu;
  pthread_mutex_lock(mu);
  size_t n = mcp_acl_count(acl->rules);
  pthread_mutex_unlock(mu);
  return n;
}

int mcp_grpc_acl_check(const mcp_grpc_acl *acl, const mcp_grpc_peer *peer) {
  pthread_mutex_t *mu = (pthread_mutex_t *)&acl->mu;
  pthread_mutex_lock(mu);
  int code = mcp_acl_check(acl->rules, peer);
  pthread_mutex_unlock(mu);
  return code;
}

int mcp_grpc_acl_authorize(const mcp_grpc_peer *peer, void *acl) {
  return mcp_grpc_acl_check(acl, peer);
}
