/*
 * A counting, failing, thread-safe allocator for the transports' mcp_mem
 * tests (tests/test_grpc_api.c, tests/test_h2c_api.c). Every block carries
 * a header with a magic number: a block this hook did not allocate, given
 * to its free(), aborts at once, and one it allocated, given to libc's
 * free(), is an invalid free under ASan. So a balanced count after *_del()
 * means the hook saw every allocation and every free of the transport's
 * own objects. |fail_at| fails that one allocation (1-based; 0: never),
 * as nghttp2's failmalloc does.
 */
#ifndef TEST_MEM_COUNT_H
#define TEST_MEM_COUNT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/mcp.h"

#define TM_MAGIC 0x4d434d454d4f5259ull /* "MCMEMORY" */

typedef union tm_hdr {
  struct {
    uint64_t magic;
    size_t size;
  } h;
  max_align_t align; /* the block after it stays aligned */
} tm_hdr;

typedef struct tm_mem {
  mcp_mem mem;
  pthread_mutex_t mu;
  long count;   /* allocations attempted (malloc, calloc, realloc) */
  long allocs;  /* blocks handed out */
  long frees;   /* blocks given back */
  long live;    /* allocs - frees */
  long fail_at; /* the allocation to fail, 1-based; 0: none */
  long failed;  /* allocations failed */
} tm_mem;

/* 1 when this attempt is the one to fail. Under |m->mu|. */
static inline int tm_fail_now(tm_mem *m) {
  m->count++;
  if (m->fail_at && m->count == m->fail_at) {
    m->failed++;
    return 1;
  }
  return 0;
}

static inline tm_hdr *tm_hdr_of(void *p) {
  tm_hdr *h = (tm_hdr *)p - 1;
  if (h->h.magic != TM_MAGIC) {
    fprintf(stderr, "mem_count: %p was not allocated by this hook\n", p);
    abort();
  }
  return h;
}

static inline void *tm_malloc(size_t n, void *ud) {
  tm_mem *m = ud;
  pthread_mutex_lock(&m->mu);
  int fail = tm_fail_now(m);
  if (!fail) {
    m->allocs++;
    m->live++;
  }
  pthread_mutex_unlock(&m->mu);
  if (fail)
    return NULL;
  tm_hdr *h = malloc(sizeof(*h) + n);
  if (!h)
    abort();
  h->h.magic = TM_MAGIC;
  h->h.size = n;
  return h + 1;
}

static inline void *tm_calloc(size_t nmemb, size_t size, void *ud) {
  if (size && nmemb > SIZE_MAX / size)
    return NULL;
  void *p = tm_malloc(nmemb * size, ud);
  if (p)
    memset(p, 0, nmemb * size);
  return p;
}

static inline void tm_free(void *p, void *ud) {
  tm_mem *m = ud;
  if (!p)
    return;
  tm_hdr *h = tm_hdr_of(p);
  h->h.magic = 0;
  free(h);
  pthread_mutex_lock(&m->mu);
  m->frees++;
  m->live--;
  pthread_mutex_unlock(&m->mu);
}

static inline void *tm_realloc(void *p, size_t n, void *ud) {
  tm_mem *m = ud;
  if (!p)
    return tm_malloc(n, ud);
  tm_hdr *h = tm_hdr_of(p);
  pthread_mutex_lock(&m->mu);
  int fail = tm_fail_now(m);
  pthread_mutex_unlock(&m->mu);
  if (fail)
    return NULL;
  tm_hdr *nh = realloc(h, sizeof(*h) + n);
  if (!nh)
    abort();
  nh->h.size = n;
  return nh + 1;
}

static inline void tm_init(tm_mem *m, long fail_at) {
  memset(m, 0, sizeof(*m));
  pthread_mutex_init(&m->mu, NULL);
  m->fail_at = fail_at;
  m->mem.user_data = m;
  m->mem.malloc = tm_malloc;
  m->mem.free = tm_free;
  m->mem.calloc = tm_calloc;
  m->mem.realloc = tm_realloc;
}

static inline void tm_fini(tm_mem *m) { pthread_mutex_destroy(&m->mu); }

typedef struct tm_counts {
  long count, allocs, frees, live, failed;
} tm_counts;

static inline tm_counts tm_get(tm_mem *m) {
  pthread_mutex_lock(&m->mu);
  tm_counts c = {m->count, m->allocs, m->frees, m->live, m->failed};
  pthread_mutex_unlock(&m->mu);
  return c;
}

#endif
