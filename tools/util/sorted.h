/* Binary search in an array kept sorted by a string member (strcmp
 * order), for the tables that keep their entries so: the loader's
 * collections, the etcd source's keys. Header only. */
#ifndef TOOLS_UTIL_SORTED_H
#define TOOLS_UTIL_SORTED_H

#include <stddef.h>
#include <string.h>

/*
 * The index of |key| among the |n| elements of |size| bytes at |base|,
 * sorted by the string (a const char * or char * member) at |key_offset|
 * of each (offsetof), or the index where it would be inserted. |*found|
 * is 1 for the first, 0 for the second.
 */
static inline size_t tool_sorted_find(const void *base, size_t n,
                                      size_t size, size_t key_offset,
                                      const char *key, int *found) {
  size_t lo = 0, hi = n;
  *found = 0;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const char *at = *(const char *const *)((const char *)base + mid * size +
                                            key_offset);
    int c = strcmp(at, key);
    if (c == 0) {
      *found = 1;
      return mid;
    }
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

#endif /* TOOLS_UTIL_SORTED_H */
