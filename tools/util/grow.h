/* Room for one more element in a growing array, the one way tools/ grows
 * its arrays. Header only; the growth itself is the engine's growable
 * buffer (mcp_buf_reserve: doubling), over the C library's allocator. */
#ifndef TOOLS_UTIL_GROW_H
#define TOOLS_UTIL_GROW_H

#include <stddef.h>
#include <stdint.h>

#include <mcp/engine.h>

/*
 * The array |v| (|n| elements used of |*cap|, each |size| bytes) with room
 * for element |n|: |v| itself when it has room, else |v| reallocated (at
 * least |first| elements when |*cap| is 0, else about twice |*cap|) and
 * |*cap| updated. NULL when memory runs out: then |v| is still valid and
 * |*cap| untouched.
 */
static inline void *tool_grow(void *v, size_t n, size_t *cap, size_t size,
                              size_t first) {
  if (n < *cap)
    return v;
  if (size == 0 || *cap > SIZE_MAX / 2 / size || first > SIZE_MAX / 2 / size)
    return NULL;
  mcp_buf b = {v, *cap * size, *cap * size, NULL};
  if (mcp_buf_reserve(&b, *cap ? size : first * size) != 0)
    return NULL;
  *cap = b.cap / size;
  return b.p;
}

#endif /* TOOLS_UTIL_GROW_H */
