/* UTF-8 sequence length, shared by the JSON log writer (log.c) and the
 * metrics' label escaping (ops/metrics.c); a JSON string's characters,
 * shared by the log writer and ops_buf_json() (ops/buf.c). */
#ifndef TOOLS_UTF8_H
#define TOOLS_UTF8_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Length of the UTF-8 sequence at |s| (at most |n| > 0 bytes), 0 when it
 * is not one (overlong forms, surrogates and code points above U+10FFFF
 * are not). */
static inline size_t tool_utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len;
  uint32_t cp;
  if (c < 0x80)
    return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (len > n)
    return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80)
      return 0;
    cp = (cp << 6) | (s[i] & 0x3f);
  }
  if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
      (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
    return 0;
  return len;
}

/* The first character of |s| (|n| > 0 bytes) in a JSON string, as
 * jansson's json_dumps() writes it without JSON_ENSURE_ASCII: a UTF-8
 * sequence as is; '"', '\\' and control characters escaped (\b \f \n \r
 * \t, else \u00XX); a byte that is not UTF-8 as \ufffd. Sets |*text| (|s|
 * itself or |esc|) and |*len| to what to write; returns how many bytes of
 * |s| it took. */
static inline size_t tool_json_char(const unsigned char *s, size_t n,
                                    char esc[8], const char **text,
                                    size_t *len) {
  size_t k;
  char c = 0;
  switch (*s) {
  case '"': c = '"'; break;
  case '\\': c = '\\'; break;
  case '\b': c = 'b'; break;
  case '\f': c = 'f'; break;
  case '\n': c = 'n'; break;
  case '\r': c = 'r'; break;
  case '\t': c = 't'; break;
  }
  if (c) {
    esc[0] = '\\';
    esc[1] = c;
    *text = esc;
    *len = 2;
    return 1;
  }
  if (*s < 0x20) {
    snprintf(esc, 8, "\\u%04X", *s);
    *text = esc;
    *len = 6;
    return 1;
  }
  if ((k = tool_utf8_len(s, n)) > 0) {
    *text = (const char *)s;
    *len = k;
    return k;
  }
  *text = "\\ufffd";
  *len = 6;
  return 1;
}

#endif /* TOOLS_UTF8_H */
