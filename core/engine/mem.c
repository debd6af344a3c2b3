#include <stdlib.h>

#include "engine_int.h"

static void *libc_malloc(size_t n, void *ud) {
  MCP_UNUSED(ud);
  return malloc(n);
}
static void libc_free(void *p, void *ud) {
  MCP_UNUSED(ud);
  free(p);
}
static void *libc_calloc(size_t nmemb, size_t size, void *ud) {
  MCP_UNUSED(ud);
  return calloc(nmemb, size);
}
static void *libc_realloc(void *p, size_t n, void *ud) {
  MCP_UNUSED(ud);
  return realloc(p, n);
}

static const mcp_mem libc_mem = {NULL, libc_malloc, libc_free, libc_calloc,
                                  libc_realloc};

const mcp_mem *mcp_mem_default(void) { return &libc_mem; }

void mcp_mem_init(mcp_mem *dst, const mcp_mem *src) {
  *dst = src ? *src : libc_mem;
}

void *mcp_mem_malloc(const mcp_mem *m, size_t n) {
  return m->malloc(n ? n : 1, m->user_data);
}

void *mcp_mem_calloc(const mcp_mem *m, size_t nmemb, size_t size) {
  if (nmemb == 0 || size == 0) {
    nmemb = size = 1;
  }
  return m->calloc(nmemb, size, m->user_data);
}

void *mcp_mem_realloc(const mcp_mem *m, void *p, size_t n) {
  return m->realloc(p, n ? n : 1, m->user_data);
}

void mcp_mem_free(const mcp_mem *m, void *p) {
  if (p) {
    m->free(p, m->user_data);
  }
}

char *mcp_mem_strndup(const mcp_mem *m, const char *s, size_t n) {
  char *d = mcp_mem_malloc(m, n + 1);
  if (d) {
    if (n) { /* |s| may be NULL when |n| is 0: an absent field */
      memcpy(d, s, n);
    }
    d[n] = '\0';
  }
  return d;
}

char *mcp_mem_strdup(const mcp_mem *m, const char *s) {
  return mcp_mem_strndup(m, s, strlen(s));
}

static void *pb_alloc(void *ud, size_t n) {
  mcp_pballoc *pa = ud;
  void *p = mcp_mem_malloc(pa->mem, n);
  if (!p) {
    pa->failed = 1;
  }
  return p;
}

static void pb_free(void *ud, void *p) {
  mcp_pballoc *pa = ud;
  mcp_mem_free(pa->mem, p);
}

void mcp_pballoc_init(mcp_pballoc *pa, const mcp_mem *mem) {
  pa->a.alloc = pb_alloc;
  pa->a.free = pb_free;
  pa->a.allocator_data = pa;
  pa->mem = mem;
  pa->failed = 0;
}
