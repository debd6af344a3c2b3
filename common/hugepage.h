/*
 * A hint for |len| bytes at |p| (any allocator's) about to be written
 * whole, a received message: on Linux, transparent huge pages over its
 * page-aligned part (MADV_HUGEPAGE), so that filling 20 MB takes about ten
 * page faults, not five thousand (several microseconds each, far more in a
 * virtual machine: the 20 MB sync's largest cost in the sink, issue 25).
 * Nothing observable changes; below MCP_HINT_LARGE bytes, or without the
 * advice, it does nothing.
 *
 * Header-only and private, like filever.h. MADV_HUGEPAGE is not POSIX:
 * the including file defines _DEFAULT_SOURCE before its first system
 * header, or the hint is compiled out.
 */
#ifndef MCP_COMMON_HUGEPAGE_H
#define MCP_COMMON_HUGEPAGE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#define MCP_HINT_LARGE ((size_t)4 << 20)

static inline void mcp_hint_large(void *p, size_t len) {
#ifdef MADV_HUGEPAGE
  /* 2 MiB: the x86-64 and arm64 huge page; the advice covers whole pages
   * of the range only. */
  const uintptr_t page = (uintptr_t)2 << 20;
  uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1);
  uintptr_t e = ((uintptr_t)p + len) & ~(page - 1);
  if (p && len >= MCP_HINT_LARGE && e > a)
    (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
  (void)p;
  (void)len;
#endif
}

#endif
