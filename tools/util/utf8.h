/* A JSON string's characters, shared by the log writer and ops_buf_json()
 * (ops/buf.c); UTF-8 by the core's rules (mcp_utf8_len()). */
#ifndef TOOLS_UTF8_H
#define TOOLS_UTF8_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <mcp/engine.h>

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
  if ((k = mcp_utf8_len(s, n)) > 0) {
    *text = (const char *)s;
    *len = k;
    return k;
  }
  *text = "\\ufffd";
  *len = 6;
  return 1;
}

#endif /* TOOLS_UTF8_H */
