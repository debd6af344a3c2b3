/* Edit distance, for the "did you mean" of a mistyped option (cli/args.c)
 * and of an unknown kind (loader/config_doc.c). Header only. */
#ifndef TOOLS_UTIL_EDIT_H
#define TOOLS_UTIL_EDIT_H

#include <stddef.h>

/*
 * Edit distance of |a| (|n| bytes) and |b| (|m| bytes), optimal string
 * alignment: insertions, deletions, substitutions and swaps of neighbours
 * cost 1; ASCII case ignored when |fold_case|. At most 64 bytes each;
 * larger: SIZE_MAX.
 */
static inline size_t tool_edit_distance(const char *a, size_t n,
                                        const char *b, size_t m,
                                        int fold_case) {
  enum { MAX = 64 };
  if (n > MAX || m > MAX)
    return (size_t)-1;
  char x[MAX], y[MAX];
  for (size_t i = 0; i < n; i++)
    x[i] = fold_case && a[i] >= 'A' && a[i] <= 'Z' ? (char)(a[i] - 'A' + 'a')
                                                   : a[i];
  for (size_t j = 0; j < m; j++)
    y[j] = fold_case && b[j] >= 'A' && b[j] <= 'Z' ? (char)(b[j] - 'A' + 'a')
                                                   : b[j];
  size_t d[MAX + 1][MAX + 1];
  for (size_t i = 0; i <= n; i++)
    d[i][0] = i;
  for (size_t j = 0; j <= m; j++)
    d[0][j] = j;
  for (size_t i = 1; i <= n; i++) {
    for (size_t j = 1; j <= m; j++) {
      size_t best = d[i - 1][j - 1] + (x[i - 1] != y[j - 1]);
      if (d[i - 1][j] + 1 < best)
        best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best)
        best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && x[i - 1] == y[j - 2] && x[i - 2] == y[j - 1] &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  }
  return d[n][m];
}

#endif /* TOOLS_UTIL_EDIT_H */
