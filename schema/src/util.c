/* Allocation, buffers, errors and small codecs of libmcp-schema. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema_int.h"

static void *libc_malloc(size_t n, void *ud) {
  SC_UNUSED(ud);
  return malloc(n);
}
static void libc_free(void *p, void *ud) {
  SC_UNUSED(ud);
  free(p);
}
static void *libc_calloc(size_t nmemb, size_t size, void *ud) {
  SC_UNUSED(ud);
  return calloc(nmemb, size);
}
static void *libc_realloc(void *p, size_t n, void *ud) {
  SC_UNUSED(ud);
  return realloc(p, n);
}

void sc_mem_init(mcp_mem *dst, const mcp_mem *src) {
  if (src) {
    *dst = *src;
    return;
  }
  dst->user_data = NULL;
  dst->malloc = libc_malloc;
  dst->free = libc_free;
  dst->calloc = libc_calloc;
  dst->realloc = libc_realloc;
}

void *sc_malloc(const mcp_mem *m, size_t n) { return m->malloc(n ? n : 1, m->user_data); }
void *sc_realloc(const mcp_mem *m, void *p, size_t n) {
  return m->realloc(p, n ? n : 1, m->user_data);
}
void sc_free(const mcp_mem *m, void *p) {
  if (p)
    m->free(p, m->user_data);
}

/* ---- arena ---------------------------------------------------------- */

struct sc_chunk {
  sc_chunk *next;
  size_t used, cap;
  max_align_t data[]; /* aligned for anything */
};

#define SC_CHUNK 16384

void *sc_arena_alloc(sc_arena *a, size_t n) {
  n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
  if (n == 0)
    n = sizeof(max_align_t);
  sc_chunk *c = a->head;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > SC_CHUNK ? n : SC_CHUNK;
    if (cap > SIZE_MAX - sizeof *c)
      return NULL;
    c = sc_malloc(a->mem, sizeof *c + cap);
    if (!c)
      return NULL;
    c->used = 0;
    c->cap = cap;
    /* A big block goes behind the current chunk, which keeps its room. */
    if (a->head && n > SC_CHUNK) {
      c->next = a->head->next;
      a->head->next = c;
    } else {
      c->next = a->head;
      a->head = c;
    }
  }
  void *p = (char *)c->data + c->used;
  c->used += n;
  return p;
}

char *sc_arena_strndup(sc_arena *a, const char *s, size_t n) {
  if (n == SIZE_MAX)
    return NULL;
  char *d = sc_arena_alloc(a, n + 1);
  if (d) {
    if (n)
      memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

void sc_arena_free(sc_arena *a) {
  while (a->head) {
    sc_chunk *n = a->head->next;
    sc_free(a->mem, a->head);
    a->head = n;
  }
}

/* ---- buffer --------------------------------------------------------- */

int sc_buf_printf(mcp_buf *b, const char *fmt, ...) {
  char tmp[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof tmp)
    return MCP_ERR_INVALID_ARGUMENT; /* only short numbers go through here */
  return mcp_buf_append(b, tmp, (size_t)n);
}

int sc_wire_type(int type) {
  switch (type) {
  case SC_DOUBLE:
  case SC_FIXED64:
  case SC_SFIXED64:
    return WT_I64;
  case SC_FLOAT:
  case SC_FIXED32:
  case SC_SFIXED32:
    return WT_I32;
  case SC_STRING:
  case SC_BYTES:
  case SC_MESSAGE:
    return WT_LEN;
  case SC_GROUP:
    return WT_SGROUP;
  default:
    return WT_VARINT;
  }
}

/* ---- errors --------------------------------------------------------- */

int sc_error(mcp_schema_error *err, int code, unsigned long line,
             const char *path, const char *fmt, ...) {
  if (!err)
    return code;
  err->code = code;
  err->line = line;
  if (!path)
    path = "";
  size_t pl = strlen(path) < sizeof err->path - 1 ? strlen(path) : sizeof err->path - 1;
  memcpy(err->path, path, pl);
  err->path[pl] = '\0';
  char what[MCP_SCHEMA_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  /* "path: what", cut at the buffer's end. */
  size_t n = 0, cap = sizeof err->message - 1;
  const char *parts[3] = {path, *path ? ": " : "", what};
  for (int i = 0; i < 3; i++) {
    size_t l = strlen(parts[i]);
    if (l > cap - n)
      l = cap - n;
    memcpy(err->message + n, parts[i], l);
    n += l;
  }
  err->message[n] = '\0';
  return code;
}

/* ---- base64 --------------------------------------------------------- */

long sc_base64_decode(const char *in, size_t len, uint8_t *out) {
  return mcp_base64_decode(in, len, out, 1);
}

int sc_base64_encode(mcp_buf *b, const uint8_t *in, size_t len) {
  static const char tab[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  if (mcp_buf_reserve(b, (len + 2) / 3 * 4))
    return MCP_ERR_NOMEM;
  size_t i = 0;
  for (; i + 3 <= len; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
    b->p[b->len++] = (uint8_t)tab[v >> 18];
    b->p[b->len++] = (uint8_t)tab[(v >> 12) & 63];
    b->p[b->len++] = (uint8_t)tab[(v >> 6) & 63];
    b->p[b->len++] = (uint8_t)tab[v & 63];
  }
  if (len - i == 1) {
    uint32_t v = (uint32_t)in[i] << 16;
    b->p[b->len++] = (uint8_t)tab[v >> 18];
    b->p[b->len++] = (uint8_t)tab[(v >> 12) & 63];
    b->p[b->len++] = '=';
    b->p[b->len++] = '=';
  } else if (len - i == 2) {
    uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
    b->p[b->len++] = (uint8_t)tab[v >> 18];
    b->p[b->len++] = (uint8_t)tab[(v >> 12) & 63];
    b->p[b->len++] = (uint8_t)tab[(v >> 6) & 63];
    b->p[b->len++] = '=';
  }
  return 0;
}

/* ---- dates (Howard Hinnant's algorithms) ---------------------------- */

int64_t sc_days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

void sc_civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d) {
  z += 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  *d = (unsigned)(doy - (153 * mp + 2) / 5 + 1);
  *m = (unsigned)(mp < 10 ? mp + 3 : mp - 9);
  *y = yoe + era * 400 + (*m <= 2);
}


const mcp_schema_value *sc_value_differ(const mcp_schema_value *a, const mcp_schema_value *b) {
  if (a->kind != b->kind || a->line != b->line || a->n != b->n || a->len != b->len ||
      (a->kind == MCP_SCHEMA_BOOL && a->boolean != b->boolean) || !a->text != !b->text ||
      (a->text && memcmp(a->text, b->text, a->len + 1)))
    return a;
  size_t kids = a->kind == MCP_SCHEMA_MAP ? 2 * a->n : a->kind == MCP_SCHEMA_LIST ? a->n : 0;
  for (size_t i = 0; i < kids; i++) {
    const mcp_schema_value *d = sc_value_differ(a->kids[i], b->kids[i]);
    if (d)
      return d;
  }
  return NULL;
}
