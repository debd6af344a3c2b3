/* Names: collection names for Kubernetes kinds and type URLs, and the
 * resource naming rules of the MCP reference. */
#include "mcp_int.h"

static char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }
static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* Appends |s[0..n)| at |*k| without overflowing |buf|; counts regardless,
 * so callers learn the length needed, as snprintf does. */
static void put(char *buf, size_t len, size_t *k, const char *s, size_t n) {
  for (size_t i = 0; i < n; ++i, ++*k) {
    if (*k + 1 < len) {
      buf[*k] = s[i];
    }
  }
}

static size_t finish(char *buf, size_t len, size_t k) {
  if (len) {
    buf[k < len ? k : len - 1] = '\0';
  }
  return k;
}

static void put_plural(char *buf, size_t len, size_t *k, const char *kind,
                       size_t n) {
  char last = n ? lower(kind[n - 1]) : '\0';
  char prev = n > 1 ? lower(kind[n - 2]) : '\0';
  for (size_t i = 0; i + (last == 'y' && is_alpha(prev) && !strchr("aeiou", prev)) < n; ++i) {
    char c = lower(kind[i]);
    put(buf, len, k, &c, 1);
  }
  if (last == 'y' && is_alpha(prev) && !strchr("aeiou", prev)) {
    put(buf, len, k, "ies", 3);
  } else if (last == 's' || last == 'x' || last == 'z' ||
             (last == 'h' && (prev == 'c' || prev == 's'))) {
    put(buf, len, k, "es", 2);
  } else {
    put(buf, len, k, "s", 1);
  }
}

size_t mcp_kind_plural(const char *kind, char *buf, size_t len) {
  size_t k = 0;
  put_plural(buf, len, &k, kind, strlen(kind));
  return finish(buf, len, k);
}

size_t mcp_collection_for_type_url(const char *type_url, char *buf, size_t len) {
  const char *full = strrchr(type_url, '/');
  full = full ? full + 1 : type_url;
  const char *dot = strrchr(full, '.');
  size_t k = 0;
  if (!dot || !dot[1]) {
    put(buf, len, &k, full, strlen(full));
    return finish(buf, len, k);
  }
  const char *kind = dot + 1;
  size_t pkg = (size_t)(dot - full);
  static const char k8s[] = "k8s.io.api.";
  if (pkg > sizeof(k8s) - 1 && strncmp(full, k8s, sizeof(k8s) - 1) == 0) {
    /* k8s.io.api.core.v1.ConfigMap -> k8s/core/v1/configmaps */
    put(buf, len, &k, "k8s/", 4);
    full += sizeof(k8s) - 1;
    pkg -= sizeof(k8s) - 1;
  }
  /* istio.networking.v1alpha3.VirtualService ->
   * istio/networking/v1alpha3/virtualservices; any other package likewise,
   * its dots becoming slashes. */
  for (size_t i = 0; i < pkg; ++i) {
    put(buf, len, &k, full[i] == '.' ? "/" : &full[i], 1);
  }
  put(buf, len, &k, "/", 1);
  put_plural(buf, len, &k, kind, strlen(kind));
  return finish(buf, len, k);
}

/* An RFC 1123 DNS label: 1-63 of [a-z0-9-], alphanumeric at both ends. */
static int dns_label(const char *s, size_t n) {
  if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-') {
    return 0;
  }
  for (size_t i = 0; i < n; ++i) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return 0;
    }
  }
  return 1;
}

/* Lenient: a Kubernetes-style name. Segments are non-empty and made of
 * printable ASCII other than space, so DNS subdomains ("a.b.svc"), upper
 * case and underscores pass, while control characters, spaces, empty
 * segments, "." and ".." segments (path tricks) do not. */
static int lenient_segment(const char *s, size_t n) {
  if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.')) {
    return 0;
  }
  for (size_t i = 0; i < n; ++i) {
    if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) {
      return 0;
    }
  }
  return 1;
}

int mcp_name_valid(const char *name, int strict) {
  if (!name) {
    return 0;
  }
  const char *p = name;
  if (*p == '/') {
    ++p; /* the reference writes names with a leading "/" */
  }
  if (!*p) {
    return 0;
  }
  for (;;) {
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (!(strict ? dns_label(p, n) : lenient_segment(p, n))) {
      return 0;
    }
    if (!e) {
      return 1;
    }
    p = e + 1;
  }
}

int mcp__name_ok(const char *name, mcp_name_rules rules, size_t max) {
  if (!name || !name[0] || strlen(name) > max || !mcp__str_valid(name)) {
    return 0;
  }
  return rules == MCP_NAMES_ANY || mcp_name_valid(name, rules == MCP_NAMES_STRICT);
}

int mcp__kvs_valid(const mcp_kv *kv, size_t n) {
  if (n && !kv) {
    return 0;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!mcp__str_valid(kv[i].key) || !mcp__str_valid(kv[i].value)) {
      return 0;
    }
  }
  return 1;
}
