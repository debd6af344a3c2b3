/* Reading the protobuf wire format, and UTF-8 validation. */
#include "engine_int.h"

int mcp_wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  return mcp__varint(p, end, v);
}

static int get_varint(mcp_wire *w, uint64_t *v) {
  return mcp__varint(&w->p, w->end, v);
}

/* A tag or a length: at most five bytes (a uint32's varint), the rule
 * protobuf-c reads them by. No encoder writes a longer one; refusing it
 * keeps every reader of the tree to what protobuf-c would decode. */
static int get_varint32(mcp_wire *w, uint64_t *v) {
  const uint8_t *start = w->p;
  return get_varint(w, v) != 0 || w->p - start > MCP_WIRE_VARINT32_MAX
             ? MCP_ERR_MALFORMED
             : 0;
}

int mcp_wire_next(mcp_wire *w, uint32_t *field, int *wt, uint64_t *v,
                   const uint8_t **data, size_t *len) {
  if (w->p == w->end) {
    return 0;
  }
  uint64_t key;
  if (get_varint32(w, &key) != 0 || (key >> 3) == 0 || (key >> 3) > 0x1fffffff) {
    return MCP_ERR_MALFORMED;
  }
  *field = (uint32_t)(key >> 3);
  *wt = (int)(key & 7);
  *v = 0;
  *data = NULL;
  *len = 0;
  switch (*wt) {
  case MCP_WT_VARINT:
    return get_varint(w, v) == 0 ? 1 : MCP_ERR_MALFORMED;
  case MCP_WT_I64:
  case MCP_WT_I32: {
    size_t n = *wt == MCP_WT_I64 ? 8 : 4;
    if ((size_t)(w->end - w->p) < n) {
      return MCP_ERR_MALFORMED;
    }
    w->p += n;
    return 1;
  }
  case MCP_WT_LEN: {
    uint64_t n;
    if (get_varint32(w, &n) != 0 || n > (uint64_t)(w->end - w->p)) {
      return MCP_ERR_MALFORMED;
    }
    *data = w->p;
    *len = (size_t)n;
    w->p += n;
    return 1;
  }
  default: /* groups are long deprecated and never valid here */
    return MCP_ERR_MALFORMED;
  }
}

/* The length of the UTF-8 character at |s| (|n| > 0 bytes), 0 when it
 * is not one: overlong forms, surrogates and values past U+10FFFF are
 * not. A byte below 0x80 (NUL too) is one. */
static inline size_t utf8_len(const uint8_t *s, size_t n) {
  uint8_t c = s[0];
  if (c < 0x80) {
    return 1;
  }
  size_t need;
  uint32_t cp;
  if ((c & 0xe0) == 0xc0) {
    need = 1;
    cp = c & 0x1f;
  } else if ((c & 0xf0) == 0xe0) {
    need = 2;
    cp = c & 0x0f;
  } else if ((c & 0xf8) == 0xf0) {
    need = 3;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (n <= need) {
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if ((s[k] & 0xc0) != 0x80) {
      return 0;
    }
    cp = cp << 6 | (s[k] & 0x3f);
  }
  if ((need == 1 && cp < 0x80) || (need == 2 && cp < 0x800) ||
      (need == 3 && cp < 0x10000) || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff)) {
    return 0;
  }
  return need + 1;
}

static inline int utf8_valid(const uint8_t *s, size_t n, int allow_nul) {
  size_t i = 0;
  while (i < n) {
    if (allow_nul) { /* most text is ASCII: eight bytes at a time */
      uint64_t w;
      while (n - i >= 8 &&
             (memcpy(&w, s + i, 8), !(w & UINT64_C(0x8080808080808080)))) {
        i += 8;
      }
      if (i == n) {
        break;
      }
    }
    uint8_t c = s[i];
    if (c < 0x80) {
      if (c == 0 && !allow_nul) {
        return 0;
      }
      ++i;
      continue;
    }
    size_t k = utf8_len(s + i, n - i);
    if (k == 0) {
      return 0;
    }
    i += k;
  }
  return 1;
}

int mcp_utf8_valid(const uint8_t *s, size_t n, int allow_nul) {
  return (s || !n) && utf8_valid(s, n, allow_nul);
}

size_t mcp_utf8_len(const uint8_t *s, size_t n) {
  return s && n ? utf8_len(s, n) : 0;
}

static int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') {
    return c - 'A';
  }
  if (c >= 'a' && c <= 'z') {
    return c - 'a' + 26;
  }
  if (c >= '0' && c <= '9') {
    return c - '0' + 52;
  }
  if (c == '+' || c == '-') {
    return 62;
  }
  if (c == '/' || c == '_') {
    return 63;
  }
  return -1;
}

long mcp_base64_decode(const char *in, size_t len, uint8_t *out,
                       int strict) {
  size_t pad = 0;
  while (len > 0 && in[len - 1] == '=' && (!strict || pad < 2)) {
    len--;
    pad++;
  }
  if ((strict && pad && (len + pad) % 4 != 0) || len % 4 == 1) {
    return -1;
  }
  long n = 0;
  uint32_t acc = 0;
  unsigned bits = 0;
  for (size_t i = 0; i < len; i++) {
    int v = b64_value((unsigned char)in[i]);
    if (v < 0) {
      return -1;
    }
    acc = (acc << 6 | (uint32_t)v) & 0xffffu; /* at most 14 bits matter */
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[n++] = (uint8_t)(acc >> bits);
    }
  }
  /* A canonical encoding leaves zero bits over. */
  if (strict && bits && (acc & ((1u << bits) - 1))) {
    return -1;
  }
  return n;
}
