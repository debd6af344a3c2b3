/*
 * Every single-byte change of a text, for the tests that compare two ways
 * of reading the same input: each byte replaced by each byte of |repl|
 * (where it differs), then deleted. |fn| gets each changed text (not
 * NUL-terminated; valid during the call).
 */
#ifndef MCP_TESTS_MUTATE_H
#define MCP_TESTS_MUTATE_H

#include <stdlib.h>
#include <string.h>

static inline void each_byte_change(const char *text, size_t len, const char *repl,
                                    void (*fn)(void *ctx, const char *m, size_t n),
                                    void *ctx) {
  char *m = malloc(len + 1);
  if (!m)
    abort();
  for (size_t i = 0; i < len; i++) {
    for (const char *r = repl; *r; r++) {
      if (text[i] == *r)
        continue;
      memcpy(m, text, len);
      m[i] = *r;
      fn(ctx, m, len);
    }
    memcpy(m, text, i);
    memcpy(m + i, text + i + 1, len - i - 1);
    fn(ctx, m, len - 1);
  }
  free(m);
}

#endif
