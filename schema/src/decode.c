/*
 * Protobuf wire bytes -> proto3 JSON text. Fields in number order, default
 * values of fields without presence omitted, maps in key order; the output
 * encodes back (mcp_schema_encode) to the deterministic form of the input.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema_int.h"


typedef struct dec {
  const mcp_schema *s;
  mcp_schema_error *err;
  unsigned flags;
  unsigned depth;
  unsigned indent;
  mcp_buf out;
  char path[MCP_SCHEMA_PATH_MAX];
  size_t plen;
} dec;

/* One field occurrence on the wire. */
typedef struct occ {
  const sc_field *f;
  size_t order; /* position on the wire */
  int wt;
  uint64_t v;          /* VARINT, I64, I32 */
  const uint8_t *data; /* LEN */
  size_t len;
} occ;

#define BAD(d, ...) sc_error((d)->err, MCP_ERR_MALFORMED, 0, (d)->path, __VA_ARGS__)

static int nomem(dec *d) { return sc_error(d->err, MCP_ERR_NOMEM, 0, d->path, "out of memory"); }

static size_t dpath(dec *d, const char *fmt, const char *s) {
  size_t old = d->plen;
  if (d->plen < sizeof d->path - 1) {
    int k = snprintf(d->path + d->plen, sizeof d->path - d->plen, fmt, s);
    if (k > 0)
      d->plen += (size_t)k < sizeof d->path - d->plen ? (size_t)k
                                                      : sizeof d->path - 1 - d->plen;
  }
  return old;
}

static void dpop(dec *d, size_t old) {
  d->plen = old;
  d->path[old] = '\0';
}

/* ---- wire reading --------------------------------------------------- */

static int rd_fixed(const uint8_t **p, const uint8_t *end, unsigned n, uint64_t *v) {
  if ((size_t)(end - *p) < n)
    return -1;
  uint64_t r = 0;
  for (unsigned i = 0; i < n; i++)
    r |= (uint64_t)(*p)[i] << (8 * i);
  *p += n;
  *v = r;
  return 0;
}

static int cmp_occ(const void *a, const void *b) {
  const occ *x = a, *y = b;
  if (x->f->number != y->f->number)
    return x->f->number < y->f->number ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

/* Parses the fields of a message body into |*pocc| (malloc'd, sorted by
 * field number then wire order); unknown fields are skipped or refused. */
static int scan(dec *d, const sc_msg *m, const uint8_t *p, size_t len, occ **pocc,
                size_t *pn) {
  if (!p)
    p = (const uint8_t *)""; /* an absent value: no fields */
  const uint8_t *end = p + len;
  occ *o = NULL;
  size_t n = 0, cap = 0, order = 0;
  int rc = 0;
  while (p < end) {
    uint64_t key, v = 0;
    if (mcp_wire_varint(&p, end, &key)) {
      rc = BAD(d, "truncated field key");
      break;
    }
    uint64_t number = key >> 3;
    int wt = (int)(key & 7);
    if (number < 1 || number > 536870911) {
      rc = BAD(d, "field number %llu out of range", (unsigned long long)number);
      break;
    }
    const uint8_t *data = NULL;
    size_t dlen = 0;
    switch (wt) {
    case WT_VARINT:
      if (mcp_wire_varint(&p, end, &v))
        rc = BAD(d, "truncated varint (field %llu)", (unsigned long long)number);
      break;
    case WT_I64:
      if (rd_fixed(&p, end, 8, &v))
        rc = BAD(d, "truncated fixed64 (field %llu)", (unsigned long long)number);
      break;
    case WT_I32:
      if (rd_fixed(&p, end, 4, &v))
        rc = BAD(d, "truncated fixed32 (field %llu)", (unsigned long long)number);
      break;
    case WT_LEN:
      if (mcp_wire_varint(&p, end, &v) || v > (uint64_t)(end - p)) {
        rc = BAD(d, "truncated length-delimited field %llu", (unsigned long long)number);
      } else {
        data = p;
        dlen = (size_t)v;
        p += dlen;
      }
      break;
    default:
      rc = BAD(d, "wire type %d (field %llu) is not supported", wt,
               (unsigned long long)number);
    }
    if (rc)
      break;
    const sc_field *f = sc_field_by_number(m, (uint32_t)number);
    if (!f) {
      if (d->flags & MCP_SCHEMA_JSON_UNKNOWN_ERROR) {
        rc = BAD(d, "unknown field number %llu in %s", (unsigned long long)number,
                 m->full_name);
        break;
      }
      continue;
    }
    int want = sc_wire_type(f->type);
    int packed_ok = f->repeated && want != WT_LEN && want != WT_SGROUP && wt == WT_LEN;
    if (wt != want && !packed_ok) {
      rc = BAD(d, "field %s has wire type %d, expected %d", f->name, wt, want);
      break;
    }
    if (n == cap) {
      size_t c = cap ? cap * 2 : 16;
      occ *no = sc_realloc(&d->s->mem, o, c * sizeof *o);
      if (!no) {
        rc = nomem(d);
        break;
      }
      o = no;
      cap = c;
    }
    o[n].f = f;
    o[n].order = order++;
    o[n].wt = wt;
    o[n].v = v;
    o[n].data = data;
    o[n].len = dlen;
    n++;
  }
  if (rc) {
    sc_free(&d->s->mem, o);
    return rc;
  }
  if (n > 1)
    qsort(o, n, sizeof *o, cmp_occ);
  *pocc = o;
  *pn = n;
  return 0;
}

/* ---- JSON writing --------------------------------------------------- */

static int w(dec *d, const char *s, size_t n) { return mcp_buf_append(&d->out, s, n) ? nomem(d) : 0; }
static int ws(dec *d, const char *s) { return w(d, s, strlen(s)); }

static int newline(dec *d) {
  if (!(d->flags & MCP_SCHEMA_JSON_PRETTY))
    return 0;
  if (mcp_buf_reserve(&d->out, 1 + 2 * (size_t)d->indent))
    return nomem(d);
  d->out.p[d->out.len++] = '\n';
  memset(d->out.p + d->out.len, ' ', 2 * (size_t)d->indent);
  d->out.len += 2 * (size_t)d->indent;
  return 0;
}

/* Containers: open(), then item() before each member, then close(). */
static int open_c(dec *d, char c) {
  d->indent++;
  return sc_buf_putc(&d->out, (uint8_t)c) ? nomem(d) : 0;
}

static int item(dec *d, int *first) {
  int rc = 0;
  if (!*first)
    rc = w(d, ",", 1);
  *first = 0;
  return rc ? rc : newline(d);
}

static int close_c(dec *d, char c, int first) {
  d->indent--;
  int rc = first ? 0 : newline(d);
  return rc ? rc : (sc_buf_putc(&d->out, (uint8_t)c) ? nomem(d) : 0);
}

static int wstring(dec *d, const uint8_t *s, size_t n) {
  if (n && !mcp_utf8_valid(s, n, 1))
    return BAD(d, "a string that is not valid UTF-8");
  if (mcp_buf_reserve(&d->out, n + 2))
    return nomem(d);
  d->out.p[d->out.len++] = '"';
  size_t i = 0;
  while (i < n) {
    size_t r = i;
    while (r < n && s[r] >= 0x20 && s[r] != '"' && s[r] != '\\')
      r++;
    if (mcp_buf_append(&d->out, s + i, r - i))
      return nomem(d);
    if (r == n)
      break;
    char esc[8];
    switch (s[r]) {
    case '"':
      strcpy(esc, "\\\"");
      break;
    case '\\':
      strcpy(esc, "\\\\");
      break;
    case '\n':
      strcpy(esc, "\\n");
      break;
    case '\r':
      strcpy(esc, "\\r");
      break;
    case '\t':
      strcpy(esc, "\\t");
      break;
    case '\b':
      strcpy(esc, "\\b");
      break;
    case '\f':
      strcpy(esc, "\\f");
      break;
    default:
      snprintf(esc, sizeof esc, "\\u%04x", s[r]);
    }
    if (ws(d, esc))
      return MCP_ERR_NOMEM;
    i = r + 1;
  }
  return sc_buf_putc(&d->out, '"') ? nomem(d) : 0;
}

static int wkey(dec *d, const char *k, int *first) {
  int rc = item(d, first);
  if (!rc)
    rc = wstring(d, (const uint8_t *)k, strlen(k));
  if (!rc)
    rc = ws(d, (d->flags & MCP_SCHEMA_JSON_PRETTY) ? ": " : ":");
  return rc;
}

/* The shortest text of a finite |x| that reads back to the same value. */
static void shortest(char b[40], double x, int single) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(b, 40, "%.*g", prec, x);
    /* A float is read back through a double (the encoder's way): both
     * roundings must land on it. */
    if (single ? strtof(b, NULL) == (float)x && (float)strtod(b, NULL) == (float)x
               : strtod(b, NULL) == x)
      break;
  }
}

static int wdouble(dec *d, double x, int single) {
  if (isnan(x))
    return ws(d, "\"NaN\"");
  if (isinf(x))
    return ws(d, x > 0 ? "\"Infinity\"" : "\"-Infinity\"");
  if (x == 0 && signbit(x))
    return ws(d, "-0.0"); /* "-0" would read back as the integer 0 */
  char b[40];
  shortest(b, x, single);
  return ws(d, b);
}

/* A Value's number under MCP_SCHEMA_JSON_LOOSE_VALUES: whole numbers a
 * double holds exactly (|x| <= 2^53) as integers, any other with a '.' or
 * an exponent, so that a reader keeping integers apart reads what the
 * number is; NaN and the infinities as protobuf's strings. */
static int wloose_number(dec *d, double x) {
  if (!isfinite(x))
    return wdouble(d, x, 0);
  char b[44];
  if (x == floor(x) && fabs(x) <= 9007199254740992.0) {
    snprintf(b, sizeof b, "%lld", (long long)x);
  } else {
    shortest(b, x, 0);
    if (!strpbrk(b, ".e"))
      strcat(b, ".0");
  }
  return ws(d, b);
}

/* ---- scalars -------------------------------------------------------- */

static int64_t zz(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

/* The JSON of one scalar value |v| (or bytes) of type |f|. */
static int wscalar(dec *d, const sc_field *f, uint64_t v, const uint8_t *data, size_t len) {
  char b[32];
  switch (f->type) {
  case SC_DOUBLE: {
    double x;
    memcpy(&x, &v, 8);
    return wdouble(d, x, 0);
  }
  case SC_FLOAT: {
    uint32_t u = (uint32_t)v;
    float x;
    memcpy(&x, &u, 4);
    return wdouble(d, x, 1);
  }
  case SC_INT32:
  case SC_SFIXED32:
    snprintf(b, sizeof b, "%ld", (long)(int32_t)(uint32_t)v);
    return ws(d, b);
  case SC_SINT32:
    snprintf(b, sizeof b, "%ld", (long)(int32_t)zz((uint32_t)v));
    return ws(d, b);
  case SC_UINT32:
  case SC_FIXED32:
    snprintf(b, sizeof b, "%lu", (unsigned long)(uint32_t)v);
    return ws(d, b);
  case SC_INT64:
  case SC_SFIXED64:
    snprintf(b, sizeof b, "\"%lld\"", (long long)(int64_t)v);
    return ws(d, b);
  case SC_SINT64:
    snprintf(b, sizeof b, "\"%lld\"", (long long)zz(v));
    return ws(d, b);
  case SC_UINT64:
  case SC_FIXED64:
    snprintf(b, sizeof b, "\"%llu\"", (unsigned long long)v);
    return ws(d, b);
  case SC_BOOL:
    return ws(d, v ? "true" : "false");
  case SC_STRING:
    return wstring(d, data, len);
  case SC_BYTES: {
    int rc = sc_buf_putc(&d->out, '"') || sc_base64_encode(&d->out, data, len) ||
             sc_buf_putc(&d->out, '"');
    return rc ? nomem(d) : 0;
  }
  case SC_ENUM: {
    if (f->enm->null_value)
      return ws(d, "null");
    const sc_enum_value *ev = sc_enum_by_number(f->enm, (int32_t)(uint32_t)v);
    if (ev)
      return wstring(d, (const uint8_t *)ev->name, strlen(ev->name));
    snprintf(b, sizeof b, "%ld", (long)(int32_t)(uint32_t)v);
    return ws(d, b);
  }
  default:
    return BAD(d, "field %s: groups are not supported", f->name);
  }
}

static int is_default(const sc_field *f, uint64_t v, size_t len) {
  if (f->type == SC_STRING || f->type == SC_BYTES)
    return len == 0;
  if (f->type == SC_SINT32 || f->type == SC_INT32 || f->type == SC_ENUM ||
      f->type == SC_FLOAT || f->type == SC_FIXED32 || f->type == SC_SFIXED32 ||
      f->type == SC_UINT32)
    return (uint32_t)v == 0;
  return v == 0;
}

/* Each value of a (possibly packed) scalar occurrence: calls |fn|. */
typedef int (*value_fn)(dec *d, const sc_field *f, uint64_t v, const uint8_t *data,
                        size_t len, void *ctx);

static int each_value(dec *d, const occ *o, value_fn fn, void *ctx) {
  int want = sc_wire_type(o->f->type);
  if (o->wt == want)
    return fn(d, o->f, o->v, o->data, o->len, ctx);
  /* Packed. */
  const uint8_t *p = o->data, *end = o->data + o->len;
  while (p < end) {
    uint64_t v;
    int bad = want == WT_VARINT ? mcp_wire_varint(&p, end, &v)
                                : rd_fixed(&p, end, want == WT_I64 ? 8 : 4, &v);
    if (bad)
      return BAD(d, "field %s: truncated packed values", o->f->name);
    int rc = fn(d, o->f, v, NULL, 0, ctx);
    if (rc)
      return rc;
  }
  return 0;
}

/* ---- messages ------------------------------------------------------- */

static int wmessage(dec *d, const sc_msg *m, const uint8_t *p, size_t len);
static int members(dec *d, const sc_msg *m, const uint8_t *p, size_t len, int *first);

/* The bytes of a singular message field: the occurrences [i, j) merged
 * (protobuf concatenates them), into |*tmp| when more than one. */
static int merged(dec *d, const occ *o, size_t i, size_t j, const uint8_t **p, size_t *len,
                  uint8_t **tmp) {
  *tmp = NULL;
  if (j - i == 1) {
    *p = o[i].data;
    *len = o[i].len;
    return 0;
  }
  size_t n = 0;
  for (size_t k = i; k < j; k++)
    n += o[k].len;
  uint8_t *b = sc_malloc(&d->s->mem, n);
  if (!b)
    return nomem(d);
  size_t at = 0;
  for (size_t k = i; k < j; k++) {
    if (o[k].len)
      memcpy(b + at, o[k].data, o[k].len);
    at += o[k].len;
  }
  *tmp = b;
  *p = b;
  *len = n;
  return 0;
}

static int item_value(dec *d, const sc_field *f, uint64_t v, const uint8_t *data, size_t len,
                      void *ctx) {
  int rc = item(d, ctx);
  return rc ? rc : wscalar(d, f, v, data, len);
}

/* A map entry, decoded. */
typedef struct entry {
  uint64_t kv;
  const uint8_t *kd;
  size_t klen;
  occ vo;         /* the value, when has_val */
  int has_val;    /* not a pointer to vo: qsort moves the entries */
  size_t order;
  int ktype;
} entry;

static int cmp_entry(const void *a, const void *b) {
  const entry *x = a, *y = b;
  int c = 0;
  if (x->ktype == SC_STRING) {
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    c = n ? memcmp(x->kd, y->kd, n) : 0;
    if (!c)
      c = x->klen < y->klen ? -1 : x->klen > y->klen;
  } else {
    int s = x->ktype == SC_INT32 || x->ktype == SC_INT64 || x->ktype == SC_SFIXED32 ||
            x->ktype == SC_SFIXED64 || x->ktype == SC_SINT32 || x->ktype == SC_SINT64;
    uint64_t kx = x->kv, ky = y->kv;
    if (x->ktype == SC_SINT32 || x->ktype == SC_SINT64) {
      kx = (uint64_t)zz(kx);
      ky = (uint64_t)zz(ky);
    } else if (x->ktype == SC_INT32 || x->ktype == SC_SFIXED32) {
      kx = (uint64_t)(int64_t)(int32_t)(uint32_t)kx;
      ky = (uint64_t)(int64_t)(int32_t)(uint32_t)ky;
    }
    if (s)
      c = (int64_t)kx < (int64_t)ky ? -1 : (int64_t)kx > (int64_t)ky;
    else
      c = kx < ky ? -1 : kx > ky;
  }
  return c ? c : (x->order < y->order ? -1 : x->order > y->order);
}

static int same_key(const entry *x, const entry *y) {
  entry a = *x, b = *y;
  a.order = b.order = 0;
  return !cmp_entry(&a, &b);
}

static int cmp_order(const void *a, const void *b) {
  const entry *x = a, *y = b;
  return x->order < y->order ? -1 : x->order > y->order;
}

/* A map field's occurrences [i, j): in key order, or with |wire_order| in
 * the order each key first appears on the wire. */
static int wmap(dec *d, const sc_field *f, const occ *o, size_t i, size_t j,
                int wire_order) {
  const sc_msg *em = f->msg;
  const sc_field *kf = &em->fields[0], *vf = &em->fields[1];
  entry *es = sc_malloc(&d->s->mem, (j - i) * sizeof *es);
  if (!es)
    return nomem(d);
  int rc = 0;
  size_t n = 0;
  for (size_t k = i; k < j && !rc; k++, n++) {
    entry *e = &es[n];
    memset(e, 0, sizeof *e);
    e->order = k;
    e->ktype = kf->type;
    occ *eo;
    size_t en;
    if ((rc = scan(d, em, o[k].data, o[k].len, &eo, &en)))
      break;
    for (size_t q = 0; q < en; q++) {
      if (eo[q].f == kf) {
        if (eo[q].wt != sc_wire_type(kf->type)) {
          rc = BAD(d, "a packed map key");
          break;
        }
        e->kv = eo[q].v;
        e->kd = eo[q].data;
        e->klen = eo[q].len;
      } else {
        e->vo = eo[q];
      }
    }
    /* Keep the last value occurrence; for messages, the merge of all is
     * rare enough to refuse. */
    size_t nv = 0;
    for (size_t q = 0; q < en; q++)
      nv += eo[q].f == vf;
    if (!rc && nv > 1 && vf->type == SC_MESSAGE)
      rc = BAD(d, "a map entry with its value twice");
    e->has_val = nv > 0;
    /* vo.data points into the input, which outlives |eo|. */
    sc_free(&d->s->mem, eo);
    if (!rc && kf->type == SC_STRING && e->klen && !mcp_utf8_valid(e->kd, e->klen, 1))
      rc = BAD(d, "a map key that is not valid UTF-8");
  }
  if (!rc && n > 1)
    qsort(es, n, sizeof *es, cmp_entry);
  /* Equal keys: the last on the wire wins (sorted after the others), in
   * the place of the first. */
  size_t kept = 0;
  for (size_t k = 0; k < n && !rc;) {
    size_t g = k + 1;
    while (g < n && same_key(&es[k], &es[g]))
      g++;
    entry e = es[g - 1];
    e.order = es[k].order;
    es[kept++] = e;
    k = g;
  }
  if (!rc) {
    n = kept;
    if (wire_order && n > 1)
      qsort(es, n, sizeof *es, cmp_order);
  }
  int first = 1;
  if (!rc)
    rc = open_c(d, '{');
  for (size_t k = 0; k < n && !rc; k++) {
    char kb[32];
    const char *key = kb;
    char *kdup = NULL;
    switch (kf->type) {
    case SC_STRING:
      kdup = sc_malloc(&d->s->mem, es[k].klen + 1);
      if (!kdup) {
        rc = nomem(d);
        continue;
      }
      if (es[k].klen)
        memcpy(kdup, es[k].kd, es[k].klen);
      kdup[es[k].klen] = '\0';
      key = kdup;
      break;
    case SC_BOOL:
      key = es[k].kv ? "true" : "false";
      break;
    case SC_INT32:
    case SC_SFIXED32:
      snprintf(kb, sizeof kb, "%ld", (long)(int32_t)(uint32_t)es[k].kv);
      break;
    case SC_SINT32:
    case SC_SINT64:
      snprintf(kb, sizeof kb, "%lld", (long long)zz(es[k].kv));
      break;
    case SC_INT64:
    case SC_SFIXED64:
      snprintf(kb, sizeof kb, "%lld", (long long)(int64_t)es[k].kv);
      break;
    case SC_UINT32:
    case SC_FIXED32:
      snprintf(kb, sizeof kb, "%lu", (unsigned long)(uint32_t)es[k].kv);
      break;
    default:
      snprintf(kb, sizeof kb, "%llu", (unsigned long long)es[k].kv);
    }
    if (!(rc = item(d, &first)) &&
        !(rc = kdup ? wstring(d, es[k].kd, es[k].klen)
                    : wstring(d, (const uint8_t *)key, strlen(key))) &&
               !(rc = ws(d, (d->flags & MCP_SCHEMA_JSON_PRETTY) ? ": " : ":"))) {
      size_t old = dpath(d, "[%s]", key);
      if (vf->type == SC_MESSAGE)
        rc = wmessage(d, vf->msg, es[k].has_val ? es[k].vo.data : NULL,
                      es[k].has_val ? es[k].vo.len : 0);
      else if (es[k].has_val)
        rc = wscalar(d, vf, es[k].vo.v, es[k].vo.data, es[k].vo.len);
      else
        rc = wscalar(d, vf, 0, (const uint8_t *)"", 0);
      dpop(d, old);
    }
    sc_free(&d->s->mem, kdup);
  }
  if (!rc)
    rc = close_c(d, '}', first);
  sc_free(&d->s->mem, es);
  return rc;
}

/* The members of a regular message, into an open object. */
static int members(dec *d, const sc_msg *m, const uint8_t *p, size_t len, int *first) {
  occ *o;
  size_t n;
  int rc = scan(d, m, p, len, &o, &n);
  if (rc)
    return rc;
  /* A oneof keeps only its member set last on the wire. */
  size_t last_local[16], *last = last_local;
  if (m->noneofs > 16 && !(last = sc_malloc(&d->s->mem, m->noneofs * sizeof *last))) {
    sc_free(&d->s->mem, o);
    return nomem(d);
  }
  for (size_t k = 0; k < m->noneofs; k++)
    last[k] = SIZE_MAX;
  for (size_t k = 0; k < n; k++)
    if (o[k].f->oneof >= 0 &&
        (last[o[k].f->oneof] == SIZE_MAX || o[k].order > last[o[k].f->oneof]))
      last[o[k].f->oneof] = o[k].order;
  for (size_t i = 0; i < n && !rc;) {
    size_t j = i + 1;
    while (j < n && o[j].f == o[i].f)
      j++;
    const sc_field *f = o[i].f;
    if (f->oneof >= 0 && o[j - 1].order != last[f->oneof]) {
      i = j;
      continue;
    }
    const char *key = (d->flags & MCP_SCHEMA_JSON_PROTO_NAMES) ? f->name : f->json_name;
    size_t old = dpath(d, d->plen ? ".%s" : "%s", key);
    if (f->repeated && f->type == SC_MESSAGE && f->msg->map_entry) {
      if (!(rc = wkey(d, key, first)))
        rc = wmap(d, f, o, i, j, 0);
    } else if (f->repeated) {
      int fi = 1;
      if (!(rc = wkey(d, key, first)) && !(rc = open_c(d, '[')))
        for (size_t k = i; k < j && !rc; k++) {
          if (f->type == SC_MESSAGE) {
            if (!(rc = item(d, &fi)))
              rc = wmessage(d, f->msg, o[k].data, o[k].len);
          } else {
            rc = each_value(d, &o[k], item_value, &fi);
          }
        }
      if (!rc)
        rc = close_c(d, ']', fi);
    } else if (f->type == SC_MESSAGE) {
      const uint8_t *mp;
      size_t ml;
      uint8_t *tmp;
      if (!(rc = merged(d, o, i, j, &mp, &ml, &tmp))) {
        if (!(rc = wkey(d, key, first)))
          rc = wmessage(d, f->msg, mp, ml);
        sc_free(&d->s->mem, tmp);
      }
    } else if (f->type == SC_GROUP) {
      rc = BAD(d, "groups are not supported");
    } else {
      /* Singular scalar: the last value wins (a packed one too). */
      const occ *l = &o[j - 1];
      uint64_t v = l->v;
      if (l->wt != sc_wire_type(f->type)) {
        const uint8_t *q = l->data, *end = l->data + l->len;
        int want = sc_wire_type(f->type);
        if (q == end)
          rc = BAD(d, "field %s: an empty packed value", f->name);
        while (!rc && q < end)
          if (want == WT_VARINT ? mcp_wire_varint(&q, end, &v)
                                : rd_fixed(&q, end, want == WT_I64 ? 8 : 4, &v))
            rc = BAD(d, "field %s: truncated packed value", f->name);
      }
      if (!rc && (f->presence || !is_default(f, v, l->len)) &&
          !(rc = wkey(d, key, first)))
        rc = wscalar(d, f, v, l->data, l->len);
    }
    dpop(d, old);
    i = j;
  }
  if (last != last_local)
    sc_free(&d->s->mem, last);
  sc_free(&d->s->mem, o);
  return rc;
}

/* ---- well-known types ----------------------------------------------- */

/* Fields 1 and 2 as varints (Duration, Timestamp): last wins. */
static int secs_nanos(dec *d, const sc_msg *m, const uint8_t *p, size_t len, int64_t *secs,
                      int32_t *nanos) {
  occ *o;
  size_t n;
  int rc = scan(d, m, p, len, &o, &n);
  if (rc)
    return rc;
  *secs = 0;
  *nanos = 0;
  for (size_t k = 0; k < n; k++) {
    if (o[k].f->number == 1)
      *secs = (int64_t)o[k].v;
    else if (o[k].f->number == 2)
      *nanos = (int32_t)(uint32_t)o[k].v;
  }
  sc_free(&d->s->mem, o);
  return 0;
}

/* The fraction of a second as proto3 JSON writes it: none, or 3, 6 or 9
 * digits, whichever is exact. |nanos| in 0..999999999. */
static void frac_text(char b[16], int32_t nanos) {
  if (!nanos)
    b[0] = '\0';
  else if (nanos % 1000000 == 0)
    snprintf(b, 16, ".%03d", (int)(nanos / 1000000));
  else if (nanos % 1000 == 0)
    snprintf(b, 16, ".%06d", (int)(nanos / 1000));
  else
    snprintf(b, 16, ".%09d", (int)nanos);
}

static int wfrac(dec *d, int32_t nanos) {
  char b[16];
  frac_text(b, nanos);
  return ws(d, b);
}

static int wduration(dec *d, const sc_msg *m, const uint8_t *p, size_t len) {
  int64_t s;
  int32_t ns;
  int rc = secs_nanos(d, m, p, len, &s, &ns);
  if (rc)
    return rc;
  if (s > SC_DURATION_MAX_SECONDS || s < -SC_DURATION_MAX_SECONDS || ns > 999999999 ||
      ns < -999999999 || (s > 0 && ns < 0) || (s < 0 && ns > 0))
    return BAD(d, "Duration out of range (%lld s, %ld ns)", (long long)s, (long)ns);
  char b[40];
  snprintf(b, sizeof b, "\"%s%lld", (s < 0 || ns < 0) ? "-" : "",
           (long long)(s < 0 ? -s : s));
  if ((rc = ws(d, b)) || (rc = wfrac(d, ns < 0 ? -ns : ns)))
    return rc;
  return ws(d, "s\"");
}

static int wtimestamp(dec *d, const sc_msg *m, const uint8_t *p, size_t len) {
  int64_t s;
  int32_t ns;
  int rc = secs_nanos(d, m, p, len, &s, &ns);
  if (rc)
    return rc;
  char b[MCP_SCHEMA_TIMESTAMP_TEXT_MAX + 2];
  b[0] = '"';
  if (mcp_schema_timestamp_text(s, ns, b + 1, sizeof b - 2) < 0)
    return BAD(d, "Timestamp out of range (%lld s, %ld ns)", (long long)s, (long)ns);
  strcat(b, "\"");
  return ws(d, b);
}

int mcp_schema_timestamp_text(int64_t s, int32_t ns, char *buf, size_t len) {
  if (!buf || s < SC_TIMESTAMP_MIN_SECONDS || s > SC_TIMESTAMP_MAX_SECONDS || ns < 0 ||
      ns > 999999999)
    return MCP_ERR_INVALID_ARGUMENT;
  int64_t days = s >= 0 ? s / 86400 : -((-s + 86399) / 86400);
  int64_t rem = s - days * 86400, y;
  unsigned mo, dd;
  sc_civil_from_days(days, &y, &mo, &dd);
  char frac[16];
  frac_text(frac, ns);
  int n = snprintf(buf, len, "%04lld-%02u-%02uT%02u:%02u:%02u%sZ", (long long)y, mo, dd,
                   (unsigned)(rem / 3600), (unsigned)(rem / 60 % 60),
                   (unsigned)(rem % 60), frac);
  return n < 0 || (size_t)n >= len ? MCP_ERR_LIMIT : n;
}

int mcp_schema_base64(const mcp_schema *s, const uint8_t *p, size_t n, char **out,
                      size_t *out_len) {
  if (!s || (!p && n) || !out)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_buf b;
  memset(&b, 0, sizeof b);
  b.mem = &s->mem;
  if ((n && sc_base64_encode(&b, p, n)) || sc_buf_putc(&b, '\0')) {
    mcp_buf_free(&b);
    return MCP_ERR_NOMEM;
  }
  *out = (char *)b.p;
  if (out_len)
    *out_len = b.len - 1;
  return 0;
}

static int wfieldmask(dec *d, const sc_msg *m, const uint8_t *p, size_t len) {
  occ *o;
  size_t n;
  int rc = scan(d, m, p, len, &o, &n);
  if (rc)
    return rc;
  rc = sc_buf_putc(&d->out, '"') ? nomem(d) : 0;
  size_t count = 0;
  for (size_t k = 0; k < n && !rc; k++) {
    if (o[k].f->number != 1)
      continue;
    if (count++ && sc_buf_putc(&d->out, ',')) {
      rc = nomem(d);
      break;
    }
    const uint8_t *s = o[k].data;
    for (size_t i = 0; i < o[k].len && !rc; i++) {
      uint8_t c = s[i];
      if ((c >= 'A' && c <= 'Z') || c == ',' || c == '"' || c == '\\' || c < 0x20 ||
          c >= 0x80)
        rc = BAD(d, "FieldMask path cannot be written in JSON");
      else if (c == '_') {
        if (i + 1 >= o[k].len || s[i + 1] < 'a' || s[i + 1] > 'z')
          rc = BAD(d, "FieldMask path cannot be written in JSON");
        else if (sc_buf_putc(&d->out, (uint8_t)(s[++i] - 32)))
          rc = nomem(d);
      } else if (sc_buf_putc(&d->out, c)) {
        rc = nomem(d);
      }
    }
  }
  if (!rc && count == 1 && n && o[n - 1].len == 0)
    rc = BAD(d, "FieldMask with an empty path");
  if (!rc)
    rc = sc_buf_putc(&d->out, '"') ? nomem(d) : 0;
  sc_free(&d->s->mem, o);
  return rc;
}

static int wany(dec *d, const sc_msg *m, const uint8_t *p, size_t len) {
  occ *o;
  size_t n;
  int rc = scan(d, m, p, len, &o, &n);
  if (rc)
    return rc;
  const occ *url = NULL, *val = NULL;
  for (size_t k = 0; k < n; k++) {
    if (o[k].f->number == 1)
      url = &o[k];
    else if (o[k].f->number == 2)
      val = &o[k];
  }
  int first = 1;
  if (!url || !url->len) {
    rc = val && val->len ? BAD(d, "an Any with a value but no type URL")
                         : (open_c(d, '{') ? MCP_ERR_NOMEM : close_c(d, '}', 1));
    sc_free(&d->s->mem, o);
    return rc;
  }
  char *u = sc_malloc(&d->s->mem, url->len + 1);
  if (!u) {
    sc_free(&d->s->mem, o);
    return nomem(d);
  }
  memcpy(u, url->data, url->len);
  u[url->len] = '\0';
  const char *name = mcp_schema_type_name(u);
  const sc_msg *t = strlen(u) == url->len && name != u ? sc_find_msg(d->s, name) : NULL;
  const uint8_t *vp = val ? val->data : NULL;
  size_t vl = val ? val->len : 0;
  if (!t) {
    rc = BAD(d, "an Any of an unknown type \"%.100s\"", u);
  } else if (!(rc = open_c(d, '{')) && !(rc = wkey(d, "@type", &first)) &&
             !(rc = wstring(d, url->data, url->len))) {
    if (t->wkt != SC_WKT_NONE) {
      if (!(rc = wkey(d, "value", &first)))
        rc = wmessage(d, t, vp, vl);
    } else if (++d->depth > d->s->max_depth) {
      rc = sc_error(d->err, MCP_ERR_LIMIT, 0, d->path, "nested deeper than %u messages",
                    d->s->max_depth);
    } else {
      rc = members(d, t, vp, vl, &first);
      d->depth--;
    }
    if (!rc)
      rc = close_c(d, '}', first);
  }
  sc_free(&d->s->mem, u);
  sc_free(&d->s->mem, o);
  return rc;
}

static int wvalue(dec *d, const sc_msg *m, const uint8_t *p, size_t len) {
  occ *o;
  size_t n;
  int rc = scan(d, m, p, len, &o, &n);
  if (rc)
    return rc;
  /* The kind set last on the wire. */
  const occ *k = NULL;
  for (size_t i = 0; i < n; i++)
    if (o[i].f->oneof >= 0 && (!k || o[i].order > k->order))
      k = &o[i];
  if (!k) {
    rc = (d->flags & MCP_SCHEMA_JSON_LOOSE_VALUES)
             ? ws(d, "null")
             : BAD(d, "a google.protobuf.Value with no kind set");
  } else if (k->f->type == SC_MESSAGE) {
    /* struct_value or list_value: merge every occurrence of that field. */
    size_t i = 0, j;
    while (o[i].f != k->f)
      i++;
    for (j = i; j < n && o[j].f == k->f; j++)
      ;
    const uint8_t *mp;
    size_t ml;
    uint8_t *tmp;
    if (!(rc = merged(d, o, i, j, &mp, &ml, &tmp))) {
      rc = wmessage(d, k->f->msg, mp, ml);
      sc_free(&d->s->mem, tmp);
    }
  } else if (k->f->type == SC_DOUBLE) {
    double x;
    memcpy(&x, &k->v, 8);
    if (d->flags & MCP_SCHEMA_JSON_LOOSE_VALUES)
      rc = wloose_number(d, x);
    else
      rc = isfinite(x) ? wdouble(d, x, 0) : BAD(d, "a Value holding %f", x);
  } else if (k->f->type == SC_ENUM) {
    rc = ws(d, "null");
  } else {
    rc = wscalar(d, k->f, k->v, k->data, k->len);
  }
  sc_free(&d->s->mem, o);
  return rc;
}

static int wwrapper(dec *d, const sc_msg *m, const uint8_t *p, size_t len) {
  occ *o;
  size_t n;
  int rc = scan(d, m, p, len, &o, &n);
  if (rc)
    return rc;
  const sc_field *f = sc_field_by_number(m, 1);
  const occ *l = NULL;
  for (size_t k = 0; k < n; k++)
    if (o[k].f == f)
      l = &o[k];
  if (!f)
    rc = BAD(d, "%s has no field 1", m->full_name);
  else if (l && l->wt != sc_wire_type(f->type))
    rc = BAD(d, "a packed wrapper value");
  else
    rc = wscalar(d, f, l ? l->v : 0, l ? l->data : (const uint8_t *)"", l ? l->len : 0);
  sc_free(&d->s->mem, o);
  return rc;
}

/* A message value: its JSON form. */
static int wmessage(dec *d, const sc_msg *m, const uint8_t *p, size_t len) {
  if (++d->depth > d->s->max_depth)
    return sc_error(d->err, MCP_ERR_LIMIT, 0, d->path, "nested deeper than %u messages",
                    d->s->max_depth);
  int rc, first = 1;
  switch (m->wkt) {
  case SC_WKT_ANY:
    rc = wany(d, m, p, len);
    break;
  case SC_WKT_DURATION:
    rc = wduration(d, m, p, len);
    break;
  case SC_WKT_TIMESTAMP:
    rc = wtimestamp(d, m, p, len);
    break;
  case SC_WKT_FIELDMASK:
    rc = wfieldmask(d, m, p, len);
    break;
  case SC_WKT_VALUE:
    rc = wvalue(d, m, p, len);
    break;
  case SC_WKT_WRAPPER:
    rc = wwrapper(d, m, p, len);
    break;
  case SC_WKT_STRUCT:
  case SC_WKT_LISTVALUE: {
    /* Their single field (a map, a list) is the whole value. */
    occ *o;
    size_t n;
    if ((rc = scan(d, m, p, len, &o, &n)))
      break;
    const sc_field *f = sc_field_by_number(m, 1);
    if (!n)
      rc = (open_c(d, m->wkt == SC_WKT_STRUCT ? '{' : '[') ? MCP_ERR_NOMEM
              : close_c(d, m->wkt == SC_WKT_STRUCT ? '}' : ']', 1));
    else if (m->wkt == SC_WKT_STRUCT)
      rc = wmap(d, f, o, 0, n, !!(d->flags & MCP_SCHEMA_JSON_LOOSE_VALUES));
    else {
      int fi = 1;
      rc = open_c(d, '[');
      for (size_t k = 0; k < n && !rc; k++)
        if (!(rc = item(d, &fi)))
          rc = wmessage(d, f->msg, o[k].data, o[k].len);
      if (!rc)
        rc = close_c(d, ']', fi);
    }
    sc_free(&d->s->mem, o);
    break;
  }
  default:
    if (!(rc = open_c(d, '{')) && !(rc = members(d, m, p, len, &first)))
      rc = close_c(d, '}', first);
  }
  d->depth--;
  return rc;
}

int mcp_schema_to_json(const mcp_schema *s, const char *type_name, const uint8_t *wire,
                       size_t len, unsigned flags, char **json, size_t *json_len,
                       mcp_schema_error *err) {
  if (!s || !type_name || (!wire && len) || !json || !json_len)
    return sc_error(err, MCP_ERR_INVALID_ARGUMENT, 0, NULL, "invalid argument");
  const sc_msg *m = sc_find_msg(s, type_name);
  if (!m)
    return sc_error(err, MCP_ERR_NOT_FOUND, 0, NULL, "unknown message type %.200s", type_name);
  dec d;
  memset(&d, 0, sizeof d);
  d.s = s;
  d.err = err;
  d.flags = flags;
  d.out.mem = &s->mem;
  int rc = wmessage(&d, m, wire ? wire : (const uint8_t *)"", len);
  if (!rc && sc_buf_putc(&d.out, '\0'))
    rc = nomem(&d);
  if (rc) {
    mcp_buf_free(&d.out);
    return rc;
  }
  *json = (char *)d.out.p;
  *json_len = d.out.len - 1;
  return 0;
}
