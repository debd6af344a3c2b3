/* Command-line helpers. */
#include "args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

int tool_arg_value(int argc, char **argv, int *i, const char *name,
                   const char **value) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0)
    return 0;
  if (a[n] == '=') {
    *value = a + n + 1;
    return 1;
  }
  if (a[n] != '\0')
    return 0;
  if (*i + 1 >= argc) {
    fprintf(stderr, "%s: option %s needs a value\n", tool_log_prog(), name);
    return -1;
  }
  *i += 1;
  *value = argv[*i];
  return 1;
}

int tool_arg_flag(char **argv, int i, const char *name) {
  return strcmp(argv[i], name) == 0;
}

int tool_parse_ulong(const char *s, unsigned long max, unsigned long *out) {
  if (s[0] < '0' || s[0] > '9')
    return -1;
  errno = 0;
  char *end;
  unsigned long v = strtoul(s, &end, 10);
  if (errno != 0 || *end != '\0' || v > max)
    return -1;
  *out = v;
  return 0;
}

int tool_check_hostport(const char *s, unsigned min_port, const char **why) {
  const char *colon;
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    if (!close || close == s + 1) {
      *why = "bad IPv6 address (expected [ADDRESS]:PORT)";
      return -1;
    }
    colon = close + 1;
    if (*colon != ':') {
      *why = "missing :PORT";
      return -1;
    }
  } else {
    colon = strrchr(s, ':');
    if (!colon) {
      *why = "missing :PORT";
      return -1;
    }
    if (colon == s) {
      *why = "missing HOST";
      return -1;
    }
    if (memchr(s, ':', (size_t)(colon - s))) {
      *why = "an IPv6 address must be in brackets ([::1]:PORT)";
      return -1;
    }
  }
  unsigned long port;
  if (tool_parse_ulong(colon + 1, 65535, &port) != 0 || port < min_port) {
    *why = min_port ? "PORT must be a number in [1, 65535]"
                    : "PORT must be a number in [0, 65535]";
    return -1;
  }
  return 0;
}

int tool_strv_add(tool_strv *sv, const char *s, int unique) {
  if (unique) {
    for (size_t i = 0; i < sv->n; i++) {
      if (strcmp(sv->v[i], s) == 0)
        return 0;
    }
  }
  if (sv->n == sv->cap) {
    size_t cap = sv->cap ? 2 * sv->cap : 8;
    const char **v = realloc(sv->v, cap * sizeof(*v));
    if (!v)
      return -1;
    sv->v = v;
    sv->cap = cap;
  }
  sv->v[sv->n++] = s;
  return 0;
}

void tool_strv_free(tool_strv *sv) {
  free(sv->v);
  memset(sv, 0, sizeof(*sv));
}

int tool_path_safe(const char *rel) {
  if (rel[0] == '\0' || rel[0] == '/' || strstr(rel, ".."))
    return 0;
  const char *seg = rel;
  for (;;) {
    const char *end = strchr(seg, '/');
    size_t len = end ? (size_t)(end - seg) : strlen(seg);
    if (len == 0 || (len == 1 && seg[0] == '.'))
      return 0;
    if (!end)
      return 1;
    seg = end + 1;
  }
}
