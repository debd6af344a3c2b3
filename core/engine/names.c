/* Names: collection names for Kubernetes kinds and type URLs, and the
 * resource naming rules of the MCP reference. */
#include "engine_int.h"

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

/* 1 when |kind| equals |word| (lower case) ignoring case. */
static int same_word(const char *kind, size_t n, const char *word) {
  size_t i = 0;
  for (; i < n && word[i] && lower(kind[i]) == word[i]; ++i) {
  }
  return i == n && !word[i];
}

static void put_plural(char *buf, size_t len, size_t *k, const char *kind,
                       size_t n) {
  /* Kinds that are plural already: Kubernetes' RESTMapper knows them as
   * irregular, and their resource is the kind lower-cased
   * (k8s/core/v1/endpoints). */
  static const char *const irregular[] = {"endpoints"};
  for (size_t j = 0; j < sizeof(irregular) / sizeof(irregular[0]); ++j) {
    if (same_word(kind, n, irregular[j])) {
      put(buf, len, k, irregular[j], n);
      return;
    }
  }
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

/* Kubernetes' IsDNS1123Subdomain: at most 253 bytes; labels of [a-z0-9-],
 * alphanumeric at both ends, joined by '.' (Kubernetes sets no per-label
 * length here: only the DNS-1123 label rule has the 63). */
static int dns_subdomain(const char *s, size_t n) {
  if (n == 0 || n > 253) {
    return 0;
  }
  size_t start = 0;
  for (size_t i = 0; i <= n; ++i) {
    if (i == n || s[i] == '.') {
      if (i == start || s[start] == '-' || s[i - 1] == '-') {
        return 0;
      }
      start = i + 1;
    } else if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
                 s[i] == '-')) {
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

int mcp_name_valid2(const char *name, mcp_name_rules rules) {
  if (!name) {
    return 0;
  }
  if (rules == MCP_NAMES_ANY) {
    return name[0] && mcp_str_valid(name);
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
    int ok = rules == MCP_NAMES_STRICT       ? dns_label(p, n)
             : rules == MCP_NAMES_KUBERNETES ? dns_subdomain(p, n)
                                             : lenient_segment(p, n);
    if (!ok) {
      return 0;
    }
    if (!e) {
      return 1;
    }
    p = e + 1;
  }
}

int mcp_name_valid(const char *name, int strict) {
  return mcp_name_valid2(name, strict ? MCP_NAMES_STRICT : MCP_NAMES_LENIENT);
}

int mcp__name_ok(const char *name, mcp_name_rules rules, size_t max) {
  if (!name || !name[0] || strlen(name) > max || !mcp_str_valid(name)) {
    return 0;
  }
  return mcp_name_valid2(name, rules);
}

const char *mcp_name_rules_str(mcp_name_rules rules) {
  switch (rules) {
  case MCP_NAMES_LENIENT:
    return "lenient (segments of printable ASCII, not \".\" or \"..\")";
  case MCP_NAMES_STRICT:
    return "strict (segments are DNS-1123 labels)";
  case MCP_NAMES_ANY:
    return "any (non-empty UTF-8)";
  case MCP_NAMES_KUBERNETES:
    return "kubernetes (segments are lowercase DNS-1123 subdomains)";
  }
  return "unknown";
}

static void limits_default(mcp_resource_limits *lim) {
  memset(lim, 0, sizeof(*lim));
  lim->name_rules = MCP_NAMES_LENIENT;
  lim->max_name_len = MCP_DEFAULT_MAX_NAME_LEN;
  lim->max_version_len = MCP_DEFAULT_MAX_VERSION_LEN;
  lim->max_metadata = MCP_DEFAULT_MAX_METADATA;
}

void mcp_resource_limits_default_versioned(int version,
                                           mcp_resource_limits *lim) {
  mcp_resource_limits l;
  limits_default(&l);
  memcpy(lim, &l,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_resource_limits), MCP_VSTRUCT_N));
}

static int resource_check(const mcp_resource *r, const mcp_resource_limits *lim,
                          char *msg, size_t msglen);

int mcp_resource_check_versioned(const mcp_resource *r, int version,
                                 const mcp_resource_limits *lim, char *msg,
                                 size_t msglen) {
  mcp_resource_limits l;
  limits_default(&l);
  if (lim) {
    if (!mcp_vstruct_known(version, MCP_VSTRUCT_N)) {
      mcp_fmt(msg, msglen, "unknown mcp_resource_limits version");
      return MCP_ERR_INVALID_ARGUMENT;
    }
    memcpy(&l, lim,
           mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_resource_limits),
                             MCP_VSTRUCT_N));
  }
  return resource_check(r, &l, msg, msglen);
}

static int resource_check(const mcp_resource *r, const mcp_resource_limits *lim,
                          char *msg, size_t msglen) {
#define BAD_(...)                      \
  do {                                 \
    mcp_fmt(msg, msglen, __VA_ARGS__); \
    return MCP_ERR_INVALID_ARGUMENT;   \
  } while (0)
  size_t max_name = mcp_limit_or(lim->max_name_len, MCP_DEFAULT_MAX_NAME_LEN);
  size_t max_version = mcp_limit_or(lim->max_version_len, MCP_DEFAULT_MAX_VERSION_LEN);
  size_t max_metadata = mcp_limit_or(lim->max_metadata, MCP_DEFAULT_MAX_METADATA);
  if (!r->name || !r->name[0]) {
    BAD_("resource has no name");
  }
  if (!mcp_str_valid(r->name)) {
    BAD_("resource name is not UTF-8");
  }
  size_t nl = strlen(r->name);
  if (nl > max_name) {
    BAD_("resource name longer than %zu bytes (%zu): %s", max_name, nl,
         r->name);
  }
  if (!mcp_name_valid2(r->name, lim->name_rules)) {
    BAD_("resource name breaks the naming rules, %s: %s",
         mcp_name_rules_str(lim->name_rules), r->name);
  }
  if (r->version && !mcp_str_valid(r->version)) {
    BAD_("resource version not UTF-8: %s", r->name);
  }
  if (r->version && strlen(r->version) > max_version) {
    BAD_("resource version longer than %zu bytes: %s", max_version, r->name);
  }
  if (r->nlabels > max_metadata || r->nannotations > max_metadata - r->nlabels) {
    BAD_("resource with more than %zu labels and annotations (%zu): %s",
         max_metadata, r->nlabels + r->nannotations, r->name);
  }
  if (!mcp_kvs_valid(r->labels, r->nlabels) ||
      !mcp_kvs_valid(r->annotations, r->nannotations)) {
    BAD_("resource label or annotation not UTF-8: %s", r->name);
  }
  if (!r->type_url || !r->type_url[0] || !mcp_str_valid(r->type_url)) {
    BAD_("resource without body type: %s", r->name);
  }
  if (r->has_create_time &&
      (r->create_time_nanos < 0 || r->create_time_nanos >= 1000000000)) {
    BAD_("resource create_time invalid: %s", r->name);
  }
  return 0;
#undef BAD_
}

int mcp_kvs_valid(const mcp_kv *kv, size_t n) {
  if (n && !kv) {
    return 0;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!mcp_str_valid(kv[i].key) || !mcp_str_valid(kv[i].value)) {
      return 0;
    }
  }
  return 1;
}

/* ---- apiVersion and kind, xDS type URLs ---- */

/* Non-empty and only [A-Za-z0-9._-]: the parts end up in a '/'-separated
 * collection name. */
static int kind_part(const char *s, size_t n) {
  if (n == 0) {
    return 0;
  }
  for (size_t i = 0; i < n; ++i) {
    char c = s[i];
    if (!is_alpha(c) && !(c >= '0' && c <= '9') && c != '.' && c != '_' &&
        c != '-') {
      return 0;
    }
  }
  return 1;
}

/* Istio renamed the versions of its own types (1.22: networking v1,
 * security v1); the types stayed. Each alias names the version whose
 * collection holds them, and the kinds it covers (those the canonical
 * version has: networking v1beta1's ProxyConfig is not an alias). */
typedef struct kind_alias {
  const char *api_version, *canonical;
  const char *const *kinds;
} kind_alias;
static const char *const net_kinds[] = {
    "DestinationRule", "EnvoyFilter",  "Gateway",       "ServiceEntry",
    "Sidecar",         "VirtualService", "WorkloadEntry", "WorkloadGroup",
    NULL};
static const char *const sec_kinds[] = {
    "AuthorizationPolicy", "PeerAuthentication", "RequestAuthentication",
    NULL};
static const kind_alias aliases[] = {
    {"networking.istio.io/v1beta1", "networking.istio.io/v1alpha3", net_kinds},
    {"networking.istio.io/v1", "networking.istio.io/v1alpha3", net_kinds},
    {"security.istio.io/v1", "security.istio.io/v1beta1", sec_kinds},
};

static const char *canonical_n(const char *api_version, size_t alen,
                               const char *kind, size_t klen) {
  for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); ++i) {
    const kind_alias *a = &aliases[i];
    if (strlen(a->api_version) != alen ||
        memcmp(a->api_version, api_version, alen) != 0) {
      continue;
    }
    for (const char *const *k = a->kinds; *k; ++k) {
      if (strlen(*k) == klen && memcmp(*k, kind, klen) == 0) {
        return a->canonical;
      }
    }
  }
  return NULL;
}

const char *mcp_kind_canonical_api_version(const char *api_version,
                                           const char *kind) {
  const char *c = canonical_n(api_version, strlen(api_version), kind,
                              strlen(kind));
  return c ? c : api_version;
}

/* mcp_collection_for_kind() over counted strings. */
static int collection_for(const char *api, size_t alen, const char *kind,
                          size_t klen, char *buf, size_t len) {
  const char *canon = canonical_n(api, alen, kind, klen);
  if (canon) {
    api = canon;
    alen = strlen(canon);
  }
  const char *slash = memchr(api, '/', alen);
  const char *group = "core", *version = api;
  size_t glen = 4, vlen = alen;
  if (slash) {
    group = api;
    glen = (size_t)(slash - api);
    version = slash + 1;
    vlen = alen - glen - 1;
    if (memchr(version, '/', vlen)) {
      return MCP_ERR_INVALID_ARGUMENT;
    }
  }
  if (!kind_part(group, glen) || !kind_part(version, vlen) ||
      !kind_part(kind, klen) || alen > 4096 || klen > 4096) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  static const char istio[] = ".istio.io";
  const char *prefix = "k8s/";
  size_t ilen = sizeof(istio) - 1;
  if (glen > ilen && memcmp(group + glen - ilen, istio, ilen) == 0) {
    prefix = "istio/";
    glen = (size_t)((const char *)memchr(group, '.', glen) - group);
    if (glen == 0) {
      return MCP_ERR_INVALID_ARGUMENT; /* ".x.istio.io" */
    }
  }
  size_t k = 0;
  put(buf, len, &k, prefix, strlen(prefix));
  put(buf, len, &k, group, glen);
  put(buf, len, &k, "/", 1);
  put(buf, len, &k, version, vlen);
  put(buf, len, &k, "/", 1);
  put_plural(buf, len, &k, kind, klen);
  return (int)finish(buf, len, k);
}

int mcp_collection_for_kind(const char *api_version, const char *kind,
                            char *buf, size_t len) {
  if (!api_version || !kind) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  return collection_for(api_version, strlen(api_version), kind, strlen(kind),
                        buf, len);
}

int mcp_collection_for_gvk(const char *type_url, char *buf, size_t len) {
  if (!type_url) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  const char *s1 = strchr(type_url, '/');
  const char *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
  if (!s2 || strchr(s2 + 1, '/')) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  const char *kind = s2 + 1;
  if (s1 == type_url) { /* "/v1/Kind": the core group */
    return collection_for(s1 + 1, (size_t)(s2 - s1 - 1), kind, strlen(kind),
                          buf, len);
  }
  return collection_for(type_url, (size_t)(s2 - type_url), kind, strlen(kind),
                        buf, len);
}
