/*
 * The Destination view helpers: collection and address names, and the
 * WeightedAddr bodies (mcp/destination.h). The adapter that fills the view
 * and the sessions that read it both go through these, so names written
 * by one parse back in the other.
 */
#include "destination_int.h"

/* ---- writer ---- */

void mcp__dwr_bytes(mcp_dwr *w, const void *p, size_t n) {
  if (n && w->len + n <= w->cap) {
    memcpy(w->p + w->len, p, n);
  }
  w->len += n;
}

void mcp__dwr_varint(mcp_dwr *w, uint64_t v) {
  uint8_t tmp[10];
  mcp__dwr_bytes(w, tmp, (size_t)(mcp_wire_put_varint(tmp, v) - tmp));
}

void mcp__dwr_len_field(mcp_dwr *w, uint32_t field, const void *p, size_t n) {
  mcp__dwr_varint(w, (uint64_t)field << 3 | MCP_WT_LEN);
  mcp__dwr_varint(w, n);
  mcp__dwr_bytes(w, p, n);
}

static void put_fixed(mcp_dwr *w, uint32_t field, int wt, uint64_t v,
                      size_t n) {
  uint8_t tmp[8];
  for (size_t i = 0; i < n; i++) {
    tmp[i] = (uint8_t)(v >> (8 * i)); /* little endian on the wire */
  }
  mcp__dwr_varint(w, (uint64_t)field << 3 | (uint32_t)wt);
  mcp__dwr_bytes(w, tmp, n);
}

void mcp__dest_map_entry(mcp_dwr *w, uint32_t field, const char *key,
                         const char *value) {
  size_t kl = strlen(key), vl = strlen(value);
  size_t entry = mcp_wire_len_field_size(kl) + mcp_wire_len_field_size(vl);
  mcp__dwr_varint(w, (uint64_t)field << 3 | MCP_WT_LEN);
  mcp__dwr_varint(w, entry);
  mcp__dwr_len_field(w, 1, key, kl);
  mcp__dwr_len_field(w, 2, value, vl);
}

int mcp__dest_ieq(const char *a, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char x = a[i], y = b[i];
    x = (char)(x >= 'A' && x <= 'Z' ? x + 32 : x);
    y = (char)(y >= 'A' && y <= 'Z' ? y + 32 : y);
    if (x != y) {
      return 0;
    }
  }
  return 1;
}

/* ---- names ---- */

/* Appends |s[0..n)| to |buf| (|*k| bytes so far, room for |len| with the
 * NUL), counting what does not fit. */
static void cat(char *buf, size_t len, size_t *k, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++, (*k)++) {
    if (*k + 1 < len) {
      buf[*k] = s[i];
    }
  }
}

static size_t fmt_u(char *tmp, uint32_t v) {
  char d[10];
  size_t n = 0;
  do {
    d[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; i++) {
    tmp[i] = d[n - 1 - i];
  }
  return n;
}

static void finish(char *buf, size_t len, size_t k) {
  if (len) {
    buf[k < len ? k : len - 1] = '\0';
  }
}

size_t mcp_dest_view_collection(char *buf, size_t len, const char *ns,
                                const char *svc, uint32_t port) {
  char num[10];
  size_t k = 0;
  cat(buf, len, &k, ns, strlen(ns));
  cat(buf, len, &k, "/", 1);
  cat(buf, len, &k, svc, strlen(svc));
  cat(buf, len, &k, ":", 1);
  cat(buf, len, &k, num, fmt_u(num, port));
  finish(buf, len, k);
  return k;
}

/* Four decimal parts 0-255 without leading zeros. */
static int parse_v4(const char *s, size_t n, uint8_t out[4]) {
  size_t i = 0;
  for (int part = 0; part < 4; part++) {
    if (part) {
      if (i >= n || s[i] != '.') {
        return 0;
      }
      i++;
    }
    size_t start = i;
    unsigned v = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9' && i - start < 3) {
      v = v * 10 + (unsigned)(s[i] - '0');
      i++;
    }
    if (i == start || v > 255 || (i - start > 1 && s[start] == '0')) {
      return 0;
    }
    out[part] = (uint8_t)v;
  }
  return i == n;
}

/* RFC 4291 section 2.2 text: groups of 1-4 hex digits, one "::" at most,
 * a dotted IPv4 as the last two groups. */
static int parse_v6(const char *s, size_t n, uint8_t out[16]) {
  uint16_t g[8];
  int ng = 0, dc = -1;
  size_t i = 0;
  if (n >= 2 && s[0] == ':' && s[1] == ':') {
    dc = 0;
    i = 2;
  } else if (n == 0 || s[0] == ':') {
    return 0;
  }
  while (i < n) {
    size_t j = i;
    unsigned v = 0;
    while (j < n && j - i < 5 && mcp_hex_value(s[j]) >= 0) {
      v = v << 4 | (unsigned)mcp_hex_value(s[j]);
      j++;
    }
    if (j < n && s[j] == '.') {
      uint8_t v4[4];
      if (ng > 6 || !parse_v4(s + i, n - i, v4)) {
        return 0;
      }
      g[ng++] = (uint16_t)(v4[0] << 8 | v4[1]);
      g[ng++] = (uint16_t)(v4[2] << 8 | v4[3]);
      i = n;
      break;
    }
    if (j == i || j - i > 4 || ng == 8) {
      return 0;
    }
    g[ng++] = (uint16_t)v;
    i = j;
    if (i == n) {
      break;
    }
    if (s[i] != ':') {
      return 0;
    }
    i++;
    if (i < n && s[i] == ':') {
      if (dc >= 0) {
        return 0;
      }
      dc = ng;
      i++;
    } else if (i == n) {
      return 0; /* a trailing single ':' */
    }
  }
  if (dc < 0 ? ng != 8 : ng > 7) {
    return 0;
  }
  uint16_t full[8] = {0};
  int tail = dc < 0 ? 0 : ng - dc;
  for (int k = 0; k < ng - tail; k++) {
    full[k] = g[k];
  }
  for (int k = 0; k < tail; k++) {
    full[8 - tail + k] = g[dc + k];
  }
  for (int k = 0; k < 8; k++) {
    out[2 * k] = (uint8_t)(full[k] >> 8);
    out[2 * k + 1] = (uint8_t)full[k];
  }
  return 1;
}

int mcp_dest_ip_parse(mcp_dest_addr *a, const char *ip, uint16_t port) {
  if (!a || !ip) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  mcp_dest_addr t;
  memset(&t, 0, sizeof(t));
  size_t n = strlen(ip);
  if (parse_v4(ip, n, t.ip)) {
    t.family = 4;
  } else if (parse_v6(ip, n, t.ip)) {
    t.family = 6;
  } else {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  t.port = port;
  *a = t;
  return 0;
}

/* Decimal 0-65535 without leading zeros, all of s[0..n). */
static int parse_port(const char *s, size_t n, uint32_t *port) {
  if (n == 0 || n > 5 || (n > 1 && s[0] == '0')) {
    return 0;
  }
  uint32_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') {
      return 0;
    }
    v = v * 10 + (uint32_t)(s[i] - '0');
  }
  if (v > 65535) {
    return 0;
  }
  *port = v;
  return 1;
}

int mcp__dest_parse_port(const char *s, size_t n, uint32_t *port) {
  return parse_port(s, n, port);
}

int mcp__dest_parse_v4(const char *s, size_t n, uint8_t out[4]) {
  return parse_v4(s, n, out);
}

int mcp__dest_parse_v6(const char *s, size_t n, uint8_t out[16]) {
  return parse_v6(s, n, out);
}

int mcp_dest_addr_parse(mcp_dest_addr *a, const char *name) {
  if (!a || !name) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  mcp_dest_addr t;
  memset(&t, 0, sizeof(t));
  size_t n = strlen(name);
  const char *colon;
  uint32_t port;
  if (name[0] == '[') {
    const char *close = memchr(name, ']', n);
    if (!close || close[1] != ':' ||
        !parse_v6(name + 1, (size_t)(close - name - 1), t.ip)) {
      return MCP_ERR_INVALID_ARGUMENT;
    }
    t.family = 6;
    colon = close + 1;
  } else {
    colon = strchr(name, ':');
    if (!colon || !parse_v4(name, (size_t)(colon - name), t.ip)) {
      return MCP_ERR_INVALID_ARGUMENT;
    }
    t.family = 4;
  }
  if (!parse_port(colon + 1, strlen(colon + 1), &port)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  t.port = (uint16_t)port;
  *a = t;
  return 0;
}

static size_t fmt_v4(char *tmp, const uint8_t *ip) {
  size_t k = 0;
  for (int i = 0; i < 4; i++) {
    if (i) {
      tmp[k++] = '.';
    }
    k += fmt_u(tmp + k, ip[i]);
  }
  return k;
}

/* RFC 5952: lower-case hex without leading zeros; the longest run of two
 * or more zero groups (the first of equal ones) as "::"; IPv4-mapped
 * addresses with the IPv4 part dotted (section 5). */
static size_t fmt_v6(char *tmp, const uint8_t *ip) {
  static const char hex[] = "0123456789abcdef";
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  size_t k = 0;
  if (memcmp(ip, mapped, 12) == 0) {
    memcpy(tmp, "::ffff:", 7);
    return 7 + fmt_v4(tmp + 7, ip + 12);
  }
  uint16_t g[8];
  for (int i = 0; i < 8; i++) {
    g[i] = (uint16_t)(ip[2 * i] << 8 | ip[2 * i + 1]);
  }
  int best = -1, best_len = 1;
  for (int i = 0; i < 8;) {
    if (g[i]) {
      i++;
      continue;
    }
    int j = i;
    while (j < 8 && !g[j]) {
      j++;
    }
    if (j - i > best_len) {
      best = i;
      best_len = j - i;
    }
    i = j;
  }
  for (int i = 0; i < 8; i++) {
    if (i == best) {
      tmp[k++] = ':';
      tmp[k++] = ':';
      i += best_len - 1;
      continue;
    }
    if (i && i != best + best_len) {
      tmp[k++] = ':';
    }
    int started = 0;
    for (int sh = 12; sh >= 0; sh -= 4) {
      int d = (g[i] >> sh) & 0xf;
      if (d || started || sh == 0) {
        tmp[k++] = hex[d];
        started = 1;
      }
    }
  }
  return k;
}

size_t mcp_dest_addr_name(const mcp_dest_addr *a, char *buf, size_t len) {
  char tmp[MCP_DEST_ADDR_NAME_MAX + 8];
  size_t k = 0;
  if (a->family == 6) {
    tmp[k++] = '[';
    k += fmt_v6(tmp + k, a->ip);
    tmp[k++] = ']';
  } else {
    k += fmt_v4(tmp, a->ip);
  }
  tmp[k++] = ':';
  k += fmt_u(tmp + k, a->port);
  size_t out = 0;
  cat(buf, len, &out, tmp, k);
  finish(buf, len, out);
  return out;
}

/* ---- bodies ---- */

static uint64_t be64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) {
    v = v << 8 | p[i];
  }
  return v;
}

size_t mcp__dest_tcp_encode(const mcp_dest_addr *a, uint8_t *buf,
                            size_t len) {
  /* IPAddress first, into a scratch buffer: its length leads it. */
  uint8_t ipb[24];
  mcp_dwr ip = {ipb, sizeof(ipb), 0};
  if (a->family == 6) {
    uint8_t v6b[18];
    mcp_dwr v6 = {v6b, sizeof(v6b), 0};
    uint64_t first = be64(a->ip), last = be64(a->ip + 8);
    /* proto3: zero scalars are not written (as protobuf-c and Go do). */
    if (first) {
      put_fixed(&v6, 1, MCP_WT_I64, first, 8);
    }
    if (last) {
      put_fixed(&v6, 2, MCP_WT_I64, last, 8);
    }
    mcp__dwr_len_field(&ip, 2, v6b, v6.len);
  } else {
    /* A oneof member is written even when zero (0.0.0.0). */
    put_fixed(&ip, 1, MCP_WT_I32,
              (uint32_t)a->ip[0] << 24 | (uint32_t)a->ip[1] << 16 |
                  (uint32_t)a->ip[2] << 8 | a->ip[3],
              4);
  }
  mcp_dwr w = {buf, len, 0};
  mcp__dwr_len_field(&w, 1, ipb, ip.len);
  if (a->port) {
    mcp__dwr_varint(&w, 2 << 3 | MCP_WT_VARINT);
    mcp__dwr_varint(&w, a->port);
  }
  return w.len;
}

static size_t weighted_addr(const mcp_dest_addr *a, const char *pod,
                            uint8_t *buf, size_t len) {
  uint8_t tcp[MCP_DEST_TCP_MAX];
  size_t tl = mcp__dest_tcp_encode(a, tcp, sizeof(tcp));
  if (tl > sizeof(tcp)) {
    tl = sizeof(tcp); /* cannot happen; tells gcc -O3 the bound */
  }
  mcp_dwr w = {buf, len, 0};
  mcp__dwr_len_field(&w, 1, tcp, tl);
  mcp__dwr_varint(&w, 3 << 3 | MCP_WT_VARINT); /* weight: 1 */
  mcp__dwr_varint(&w, 1);
  if (pod && pod[0]) {
    mcp__dest_map_entry(&w, 4, "k8s_pod", pod);
  }
  return w.len;
}

size_t mcp_dest_weighted_addr_encode(const mcp_dest_addr *a, const char *pod,
                                     uint8_t *buf, size_t len) {
  /* All or nothing: a buffer too small gets no byte. */
  size_t n = weighted_addr(a, pod, NULL, 0);
  if (n <= len) {
    weighted_addr(a, pod, buf, len);
  }
  return n;
}

const mcp_dest_port *mcp_dest_endpoints_port(const mcp_dest_port *service_port,
                                             const mcp_dest_port *ports,
                                             size_t nports) {
  const char *want = service_port->name ? service_port->name : "";
  if (want[0]) {
    for (size_t i = 0; i < nports; ++i) {
      if (ports[i].name && strcmp(ports[i].name, want) == 0) {
        return &ports[i];
      }
    }
    return NULL;
  }
  if (nports == 1) {
    return &ports[0];
  }
  for (size_t i = 0; i < nports; ++i) {
    if (!ports[i].name || !ports[i].name[0]) {
      return &ports[i];
    }
  }
  return NULL;
}
