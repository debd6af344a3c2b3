/*
 * A growable byte buffer for the operations code (metrics text, HTTP
 * answers). A failed allocation is sticky: the buffer keeps what it had,
 * every later append is dropped, and |failed| tells the caller once at the
 * end, so that builders need not check every call.
 */
#ifndef TOOLS_OPS_BUF_H
#define TOOLS_OPS_BUF_H

#include <stddef.h>

#if defined(__GNUC__) || defined(__clang__)
#define OPS_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define OPS_PRINTF(f, a)
#endif

typedef struct ops_buf {
  char *p;     /* NUL-terminated when len > 0 or after ops_buf_cstr() */
  size_t len;
  size_t cap;
  size_t max;  /* 0: no limit; beyond it appends fail (failed = 1) */
  int failed;
} ops_buf;

void ops_buf_init(ops_buf *b);
void ops_buf_free(ops_buf *b);
/* Empties the buffer (keeps its memory and clears |failed|). */
void ops_buf_reset(ops_buf *b);
/* Appends; 0, or -1 when out of memory or over |max| (then |failed|). */
int ops_buf_add(ops_buf *b, const void *data, size_t len);
int ops_buf_str(ops_buf *b, const char *s);
int ops_buf_printf(ops_buf *b, const char *fmt, ...) OPS_PRINTF(2, 3);
/* Appends |s| as a JSON string (quoted) as jansson's json_dumps() writes
 * it without JSON_ENSURE_ASCII: UTF-8 as is; '"', '\\' and control
 * characters escaped (\b \f \n \r \t, else \u00XX); a byte that is not
 * UTF-8 as \ufffd. 0, or -1 as ops_buf_add(). */
int ops_buf_json(ops_buf *b, const char *s);
/* The content as a C string ("" when empty or failed to allocate). */
const char *ops_buf_cstr(ops_buf *b);

#endif /* TOOLS_OPS_BUF_H */
