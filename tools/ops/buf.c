/* Growable byte buffer with a sticky failure. */
#include "ops/buf.h"
#include "util/utf8.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mcp/engine.h>

void ops_buf_init(ops_buf *b) { memset(b, 0, sizeof(*b)); }

void ops_buf_free(ops_buf *b) {
  free(b->p);
  memset(b, 0, sizeof(*b));
}

void ops_buf_reset(ops_buf *b) {
  b->len = 0;
  b->failed = 0;
  if (b->p)
    b->p[0] = '\0';
}

/* Room for |extra| more bytes and a NUL. Growth is the engine's
 * (mcp_buf_reserve); ops_buf adds the limit, the NUL and the sticky
 * failure. */
static int reserve(ops_buf *b, size_t extra) {
  if (b->failed)
    return -1;
  if (extra > (size_t)-1 / 2 - b->len ||
      (b->max && b->len + extra > b->max)) {
    b->failed = 1;
    return -1;
  }
  mcp_buf m = {(uint8_t *)b->p, b->len, b->cap, NULL};
  if (mcp_buf_reserve(&m, extra + 1) != 0) {
    b->failed = 1;
    return -1;
  }
  b->p = (char *)m.p;
  b->cap = m.cap;
  return 0;
}

int ops_buf_add(ops_buf *b, const void *data, size_t len) {
  if (reserve(b, len) != 0)
    return -1;
  if (len)
    memcpy(b->p + b->len, data, len);
  b->len += len;
  b->p[b->len] = '\0';
  return 0;
}

int ops_buf_str(ops_buf *b, const char *s) {
  return ops_buf_add(b, s, strlen(s));
}

int ops_buf_printf(ops_buf *b, const char *fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof(small), fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->failed = 1;
    return -1;
  }
  if ((size_t)n < sizeof(small))
    return ops_buf_add(b, small, (size_t)n);
  if (reserve(b, (size_t)n) != 0)
    return -1;
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return 0;
}

const char *ops_buf_cstr(ops_buf *b) { return b->p ? b->p : ""; }

/* The bytes of |p| (|n|) before the first that JSON escapes or that is
 * not ASCII; eight at a time (the 20 MB sync writes 60,000 names, issue
 * 25). A word has such a byte when one is below 0x20, has its high bit, or
 * is '"' or '\\' (a borrow may mark a neighbour of such a byte, never a
 * word without one); that word is then walked byte by byte. */
static size_t plain_run(const unsigned char *p, size_t n) {
  const uint64_t ones = 0x0101010101010101u, high = 0x8080808080808080u;
  size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    uint64_t x, q, s;
    memcpy(&x, p + k, 8);
    q = x ^ (ones * '"');
    s = x ^ (ones * '\\');
    if (((x - ones * 0x20) | (q - ones) | (s - ones) | x) & high)
      break;
  }
  while (k < n && p[k] >= 0x20 && p[k] < 0x80 && p[k] != '"' &&
         p[k] != '\\')
    k++;
  return k;
}

int ops_buf_json(ops_buf *b, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);
  if (reserve(b, n + 2) != 0) /* the common case: nothing to escape */
    return -1;
  b->p[b->len++] = '"';
  if (plain_run(p, n) == n) { /* written in the room just reserved */
    memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len++] = '"';
    b->p[b->len] = '\0';
    return 0;
  }
  while (n > 0) {
    /* A run that needs no escape, copied at once. */
    size_t k = plain_run(p, n);
    if (k && ops_buf_add(b, p, k) != 0)
      return -1;
    p += k;
    n -= k;
    if (!n)
      break;
    char esc[8];
    const char *text;
    size_t len;
    k = tool_json_char(p, n, esc, &text, &len);
    if (ops_buf_add(b, text, len) != 0)
      return -1;
    p += k;
    n -= k;
  }
  return ops_buf_add(b, "\"", 1);
}
