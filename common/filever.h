/*
 * The version of a file, as the transports and the programs tell that a
 * certificate or access list changed (re-read at most once a second).
 * Header-only and private: compiled into each user, part of no library's
 * ABI. Not the core's: the engine does no I/O.
 */
#ifndef MCP_COMMON_FILEVER_H
#define MCP_COMMON_FILEVER_H

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

/* What identifies one version: a new inode (the rename a careful writer
 * does) or a change in place (size, modification time). */
typedef struct mcp_filever {
  int ok;      /* 0: stat() failed (no such file, for one) */
  int regular; /* a regular file */
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
} mcp_filever;

static inline void mcp_filever_of(const struct stat *st, mcp_filever *v) {
  memset(v, 0, sizeof(*v));
  v->ok = 1;
  v->regular = S_ISREG(st->st_mode);
  v->dev = st->st_dev;
  v->ino = st->st_ino;
  v->size = st->st_size;
  v->mtime = st->st_mtim;
}

/* The version of |path| now: 0, or -errno with |v->ok| 0. */
static inline int mcp_filever_stat(const char *path, mcp_filever *v) {
  struct stat st;
  if (stat(path, &st) != 0) {
    int e = errno;
    memset(v, 0, sizeof(*v));
    return -e;
  }
  mcp_filever_of(&st, v);
  return 0;
}

/* 1 when |a| and |b| are the same version (two failed stat()s are). */
static inline int mcp_filever_eq(const mcp_filever *a, const mcp_filever *b) {
  if (a->ok != b->ok)
    return 0;
  return !a->ok ||
         (a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
          a->mtime.tv_sec == b->mtime.tv_sec &&
          a->mtime.tv_nsec == b->mtime.tv_nsec);
}

#endif
