/*
 * What the schema test programs that are not check(3) suites share: a
 * failure counter, CHECK(), and reading a whole file.
 */
#ifndef MCP_TESTS_SCHEMA_CHECK_H
#define MCP_TESTS_SCHEMA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int g_fail;

#define CHECK(c, ...)                                                    \
  do {                                                                   \
    if (!(c)) {                                                          \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);               \
      fprintf(stderr, __VA_ARGS__);                                      \
      fprintf(stderr, "\n");                                             \
      g_fail++;                                                          \
    }                                                                    \
  } while (0)

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

#endif
