/* Room for one more element in a growing array, the one way tools/ grows
 * its arrays (doubling). Header only. */
#ifndef TOOLS_UTIL_GROW_H
#define TOOLS_UTIL_GROW_H

#include <stddef.h>
#include <stdlib.h>

/*
 * The array |v| (|n| elements used of |*cap|, each |size| bytes) with room
 * for element |n|: |v| itself when it has room, else |v| reallocated to
 * twice |*cap| elements (|first| when |*cap| is 0) and |*cap| updated.
 * NULL when memory runs out: then |v| is still valid and |*cap| untouched.
 */
static inline void *tool_grow(void *v, size_t n, size_t *cap, size_t size,
                              size_t first) {
  if (n < *cap)
    return v;
  size_t c = *cap ? 2 * *cap : first;
  void *p = realloc(v, c * size);
  if (p)
    *cap = c;
  return p;
}

#endif /* TOOLS_UTIL_GROW_H */
