/*
 * What the schema test programs that are not check(3) suites share: a
 * failure counter and CHECK(); reading files is ../files.h.
 */
#ifndef MCP_TESTS_SCHEMA_CHECK_H
#define MCP_TESTS_SCHEMA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "../files.h"

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

#endif
