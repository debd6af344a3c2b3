/* Reading the protobuf wire format, and UTF-8 validation. */
#include "mcp_int.h"

static int get_varint(mcp_wire *w, uint64_t *v) {
  uint64_t r = 0;
  for (unsigned shift = 0; shift < 64; shift += 7) {
    if (w->p == w->end) {
      return MCP_ERR_MALFORMED;
    }
    uint8_t b = *w->p++;
    if (shift == 63 && b > 1) {
      /* Bits beyond 64 (or an 11th byte): refused, as Go's protowire
       * does, rather than silently truncated: protobuf-c reads such a bool
       * as true where the truncated value says false. */
      return MCP_ERR_MALFORMED;
    }
    r |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = r;
      return 0;
    }
  }
  return MCP_ERR_MALFORMED; /* more than 10 bytes */
}

int mcp__wire_next(mcp_wire *w, uint32_t *field, int *wt, uint64_t *v,
                   const uint8_t **data, size_t *len) {
  if (w->p == w->end) {
    return 0;
  }
  uint64_t key;
  if (get_varint(w, &key) != 0 || (key >> 3) == 0 || (key >> 3) > 0x1fffffff) {
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
    if (get_varint(w, &n) != 0 || n > (uint64_t)(w->end - w->p)) {
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

int mcp__utf8_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) {
      if (c == 0) {
        return 0; /* C strings cannot carry it */
      }
      ++i;
      continue;
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
    if (n - i <= need) {
      return 0;
    }
    for (size_t k = 1; k <= need; ++k) {
      if ((s[i + k] & 0xc0) != 0x80) {
        return 0;
      }
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    /* Overlong forms, surrogates and values past U+10FFFF. */
    if ((need == 1 && cp < 0x80) || (need == 2 && cp < 0x800) ||
        (need == 3 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return 0;
    }
    i += need + 1;
  }
  return 1;
}
