/*
 * Files for the tests: a whole file's bytes, and every file under a
 * directory (the tests that run over the examples).
 */
#ifndef MCP_TESTS_FILES_H
#define MCP_TESTS_FILES_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* The bytes of |path| (malloc'd, NUL-terminated past |*len|), or NULL. */
static inline char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  char *buf = NULL;
  size_t cap = 0, n = 0, k;
  do {
    if (n + 1 >= cap) {
      char *p = realloc(buf, cap = cap ? cap * 2 : 4096);
      if (!p)
        abort();
      buf = p;
    }
    k = fread(buf + n, 1, cap - n - 1, f);
    n += k;
  } while (k);
  fclose(f);
  buf[n] = '\0';
  *len = n;
  return buf;
}

/*
 * |fn| is called with the path of each regular file below |dir|, in
 * readdir() order, names starting with '.' skipped; walk_files() returns
 * the sum of what it returned (0 when |dir| cannot be opened).
 */
static inline size_t walk_files(const char *dir, size_t (*fn)(void *ctx, const char *path),
                                void *ctx) {
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  size_t sum = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    char path[1024];
    int n = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (n < 0 || (size_t)n >= sizeof path || stat(path, &st) != 0)
      continue;
    sum += S_ISDIR(st.st_mode) ? walk_files(path, fn, ctx)
                               : S_ISREG(st.st_mode) ? fn(ctx, path) : 0;
  }
  closedir(d);
  return sum;
}

#endif
