/* The object's allocator: mcp_grpc_options.mem, copied at creation, with
 * the C library's functions when NULL (as the core's mcp_mem rule). */
/* madvise() and MADV_HUGEPAGE are not POSIX. */
#define _DEFAULT_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void mcp_grpc_mem_init(mcp_mem *dst, const mcp_mem *src) {
  *dst = src ? *src : *mcp_mem_default();
}

void *mcp_grpc_malloc(const mcp_mem *m, size_t n) {
  return m->malloc(n ? n : 1, m->user_data);
}

void *mcp_grpc_calloc(const mcp_mem *m, size_t nmemb, size_t size) {
  if (nmemb == 0 || size == 0)
    nmemb = size = 1;
  return m->calloc(nmemb, size, m->user_data);
}

void *mcp_grpc_realloc(const mcp_mem *m, void *p, size_t n) {
  return m->realloc(p, n ? n : 1, m->user_data);
}

void mcp_grpc_free(const mcp_mem *m, void *p) {
  if (p)
    m->free(p, m->user_data);
}

char *mcp_grpc_strdup(const mcp_mem *m, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = mcp_grpc_malloc(m, n);
  if (d)
    memcpy(d, s, n);
  return d;
}

void mcp_grpc_hint_large(void *p, size_t len) { mcp_hint_large(p, len); }
