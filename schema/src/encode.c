/*
 * Document tree -> protobuf wire bytes, by the proto3 JSON mapping.
 * Deterministic: fields in number order, map entries in key order, packed
 * repeated scalars; so that the bytes equal protobuf's deterministic
 * serialization of what json_format.ParseDict builds.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "encode_int.h"

/* ---- paths and errors ---------------------------------------------- */

/* Appends |pre|, |n| bytes of |s| and |post| to the path (cut at its
 * end); returns the old length for path_pop(). Runs for every field: no
 * printf. */
static size_t path_add(enc *e, const char *pre, const char *s, size_t n, const char *post) {
  size_t old = e->plen, cap = sizeof e->path - 1;
  const char *parts[3] = {pre, s, post};
  size_t lens[3] = {strlen(pre), n, strlen(post)};
  for (int i = 0; i < 3; i++) {
    size_t l = lens[i] < cap - e->plen ? lens[i] : cap - e->plen;
    memcpy(e->path + e->plen, parts[i], l);
    e->plen += l;
  }
  e->path[e->plen] = '\0';
  return old;
}

static size_t path_push(enc *e, const char *s, size_t n) { return path_add(e, "[", s, n, "]"); }

static size_t path_field(enc *e, const char *name) {
  return path_add(e, e->plen ? "." : "", name, strlen(name), "");
}

static size_t path_index(enc *e, size_t i) {
  char n[24], *p = n + sizeof n;
  do {
    *--p = (char)('0' + i % 10);
    i /= 10;
  } while (i);
  return path_add(e, "[", p, (size_t)(n + sizeof n - p), "]");
}

static void path_pop(enc *e, size_t old) {
  e->plen = old;
  e->path[old] = '\0';
}

/* A short description of a node for "got ..." in messages. */
static void describe(const mcp_schema_value *v, char *buf, size_t len) {
  switch (v->kind) {
  case MCP_SCHEMA_NULL:
    snprintf(buf, len, "null");
    break;
  case MCP_SCHEMA_BOOL:
    snprintf(buf, len, "%s", v->boolean ? "true" : "false");
    break;
  case MCP_SCHEMA_NUMBER:
    snprintf(buf, len, "%.40s", v->text ? v->text : "?");
    break;
  case MCP_SCHEMA_STRING:
    snprintf(buf, len, "\"%.40s%s\"", v->text ? v->text : "",
             v->len > 40 ? "..." : "");
    break;
  case MCP_SCHEMA_LIST:
    snprintf(buf, len, "a list");
    break;
  case MCP_SCHEMA_MAP:
    snprintf(buf, len, "an object");
    break;
  default:
    snprintf(buf, len, "a node of unknown kind %d", (int)v->kind);
  }
}

static int fail(enc *e, const mcp_schema_value *v, const char *what) {
  char got[64];
  describe(v, got, sizeof got);
  return sc_error(e->err, MCP_ERR_INVALID_ARGUMENT, v->line, e->path,
                  "expected %s, got %s", what, got);
}

#define FAILF(e, v, ...) \
  sc_error((e)->err, MCP_ERR_INVALID_ARGUMENT, (v)->line, (e)->path, __VA_ARGS__)

static int nomem(enc *e) {
  return sc_error(e->err, MCP_ERR_NOMEM, 0, e->path, "out of memory");
}

/* |rc| of one field, item or entry: when collecting, a mismatch is kept
 * (in line order, a later line dropped when the list is full) and 0
 * returned so that the caller goes on; other errors stop everything. The
 * bytes written so far are then garbage: mcp_schema_encode_all() drops
 * them. */
static int keep_going(enc *e, int rc) {
  if (!e->all || rc != MCP_ERR_INVALID_ARGUMENT)
    return rc;
  size_t held = e->nerrs < e->max_errs ? e->nerrs : e->max_errs;
  size_t pos = held;
  e->nerrs++;
  while (pos > 0 && e->errs[pos - 1].line > e->cur.line)
    pos--;
  if (pos < e->max_errs) {
    size_t move = held < e->max_errs ? held - pos : held - pos - 1;
    memmove(&e->errs[pos + 1], &e->errs[pos], move * sizeof *e->errs);
    e->errs[pos] = e->cur;
  }
  return 0;
}

/* ---- output -------------------------------------------------------- */

static int put_tag(enc *e, uint32_t number, int wt) {
  return sc_buf_varint(&e->out, (uint64_t)number << 3 | (unsigned)wt) ? nomem(e) : 0;
}

static int put_varint(enc *e, uint64_t v) {
  return sc_buf_varint(&e->out, v) ? nomem(e) : 0;
}

static int put_le(enc *e, uint64_t v, unsigned n) {
  uint8_t b[8];
  for (unsigned i = 0; i < n; i++)
    b[i] = (uint8_t)(v >> (8 * i));
  return mcp_buf_append(&e->out, b, n) ? nomem(e) : 0;
}

/* Length-delimited parts (encode_int.h): the cases its inline functions
 * leave here, a full buffer and a length of more than one byte. */
size_t sc_enc_open_len_grow(enc *e) {
  if (sc_buf_putc(&e->out, 0)) {
    e->oom = 1;
    nomem(e);
  }
  return e->out.len;
}

int sc_enc_close_len_long(enc *e, size_t start) {
  if (e->oom)
    return MCP_ERR_NOMEM;
  size_t n = e->out.len - start, k = mcp_wire_varint_len(n);
  if (k > 1) {
    if (mcp_buf_reserve(&e->out, k - 1))
      return nomem(e);
    memmove(e->out.p + start + k - 1, e->out.p + start, n);
    e->out.len += k - 1;
  }
  mcp_wire_put_varint(e->out.p + start - 1, n);
  return 0;
}

static int put_bytes(enc *e, uint32_t number, const void *p, size_t n) {
  return sc_buf_field(&e->out, (uint64_t)number << 3 | WT_LEN, p, n) ? nomem(e) : 0;
}

/* ---- numbers ------------------------------------------------------- */

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* [-+]?(digits(.digits*)?|.digits)([eE][-+]?digits)? : the decimal number
 * forms of JSON and YAML. *frac set when it has a '.' or an exponent. */
static int decimal_syntax(const char *s, size_t len, int *frac) {
  size_t i = 0, d = 0;
  *frac = 0;
  if (i < len && (s[i] == '-' || s[i] == '+'))
    i++;
  while (i < len && is_digit(s[i]))
    i++, d++;
  if (i < len && s[i] == '.') {
    *frac = 1;
    for (i++; i < len && is_digit(s[i]); i++)
      d++;
  }
  if (!d)
    return 0;
  if (i < len && (s[i] == 'e' || s[i] == 'E')) {
    *frac = 1;
    i++;
    if (i < len && (s[i] == '-' || s[i] == '+'))
      i++;
    if (i >= len || !is_digit(s[i]))
      return 0;
    while (i < len && is_digit(s[i]))
      i++;
  }
  return i == len;
}

/* A short decimal without an exponent ("0.5", "-10.25") as strtod() reads
 * it, without strtod(): at most 15 digits make an exact integer of a
 * double, 10^k for k <= 22 is exact too, and one IEEE division of the two
 * is correctly rounded (Clinger's fast path). 0 for anything else. */
static int decimal_fast(const char *s, size_t len, double *out) {
#if FLT_EVAL_METHOD != 0
  (void)s, (void)len, (void)out;
  return 0; /* wider intermediates round twice: strtod() it is */
#else
  static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
  size_t i = s[0] == '-' || s[0] == '+', digits = 0, after = 0;
  int point = 0;
  uint64_t m = 0;
  for (; i < len; i++) {
    if (is_digit(s[i])) {
      if (++digits > 15)
        return 0;
      m = m * 10 + (uint64_t)(s[i] - '0');
      after += (size_t)point;
    } else if (s[i] == '.' && !point) {
      point = 1;
    } else {
      return 0;
    }
  }
  if (!digits)
    return 0;
  double d = (double)m / pow10[after];
  *out = s[0] == '-' ? -d : d;
  return 1;
#endif
}

/* Magnitude of digits in |base|; 0 on overflow or a bad digit. */
static int magnitude(const char *s, size_t len, unsigned base, uint64_t *v) {
  *v = 0;
  if (!len)
    return 0;
  for (size_t i = 0; i < len; i++) {
    int h = mcp_hex_value(s[i]);
    if (h < 0)
      return 0;
    unsigned d = (unsigned)h;
    if (d >= base || *v > (UINT64_MAX - d) / base)
      return 0;
    *v = *v * base + d;
  }
  return 1;
}

/* YAML 1.2 core schema radix forms (NUMBER nodes only). */
static int radix_form(const char *s, size_t len, uint64_t *v, int *ok) {
  if (len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
    *ok = magnitude(s + 2, len - 2, s[1] == 'x' ? 16 : 8, v);
    return 1;
  }
  return 0;
}

/* Special floats of YAML (.inf, .nan with their case forms). */
static int yaml_special(const char *s, double *d) {
  const char *p = s + (*s == '-' || *s == '+');
  if (!strcmp(p, ".inf") || !strcmp(p, ".Inf") || !strcmp(p, ".INF")) {
    *d = *s == '-' ? -INFINITY : INFINITY;
    return 1;
  }
  if (!strcmp(s, ".nan") || !strcmp(s, ".NaN") || !strcmp(s, ".NAN")) {
    *d = NAN;
    return 1;
  }
  return 0;
}

typedef enum { INT_S32, INT_U32, INT_S64, INT_U64 } int_kind;

static const char *int_name(int_kind k) {
  static const char *const n[] = {"int32", "uint32", "int64", "uint64"};
  return n[k];
}

/* An integer field's value from a NUMBER or a STRING node, as the bits of
 * its 64-bit two's complement. */
static int to_integer(enc *e, const mcp_schema_value *v, int_kind k, uint64_t *out) {
  if (v->kind != MCP_SCHEMA_NUMBER && v->kind != MCP_SCHEMA_STRING)
    return fail(e, v, "an integer");
  const char *s = v->text ? v->text : "";
  size_t len = v->text ? v->len : 0;
  int neg = 0, frac = 0, ok = 0;
  uint64_t mag = 0;
  if (v->kind == MCP_SCHEMA_NUMBER && radix_form(s, len, &mag, &ok)) {
    if (!ok)
      return FAILF(e, v, "integer %.40s out of range for %s", s, int_name(k));
  } else if (!decimal_syntax(s, len, &frac)) {
    return fail(e, v, "an integer");
  } else if (!frac) {
    neg = s[0] == '-';
    size_t o = s[0] == '-' || s[0] == '+';
    if (!magnitude(s + o, len - o, 10, &mag))
      return FAILF(e, v, "integer %.40s out of range for %s", s, int_name(k));
  } else {
    /* 1.0, 1e3: integral values in another form. */
    errno = 0;
    double d = strtod(s, NULL);
    if (d != floor(d) || isinf(d))
      return fail(e, v, "an integer");
    neg = d < 0;
    double a = fabs(d);
    if (a >= 18446744073709551616.0)
      return FAILF(e, v, "integer %.40s out of range for %s", s, int_name(k));
    mag = (uint64_t)a;
  }
  if (neg && mag == 0)
    neg = 0;
  switch (k) {
  case INT_S32:
    if (neg ? mag > UINT64_C(2147483648) : mag > INT32_MAX)
      break;
    *out = neg ? (uint64_t)0 - mag : mag;
    return 0;
  case INT_U32:
    if (neg || mag > UINT32_MAX)
      break;
    *out = mag;
    return 0;
  case INT_S64:
    if (neg ? mag > UINT64_C(9223372036854775808) : mag > INT64_MAX)
      break;
    *out = neg ? (uint64_t)0 - mag : mag;
    return 0;
  case INT_U64:
    if (neg)
      break;
    *out = mag;
    return 0;
  }
  return FAILF(e, v, "integer %.40s out of range for %s", s, int_name(k));
}

/* A float or double field's value: NUMBER, or STRING with a number or
 * "NaN", "Infinity", "-Infinity". */
static int to_double(enc *e, const mcp_schema_value *v, int single, double *out) {
  if (v->kind != MCP_SCHEMA_NUMBER && v->kind != MCP_SCHEMA_STRING)
    return fail(e, v, "a number");
  const char *s = v->text ? v->text : "";
  size_t len = v->text ? v->len : 0;
  int frac, ok;
  uint64_t mag;
  double d;
  if (v->kind == MCP_SCHEMA_STRING && !strcmp(s, "NaN"))
    d = NAN;
  else if (v->kind == MCP_SCHEMA_STRING && !strcmp(s, "Infinity"))
    d = INFINITY;
  else if (v->kind == MCP_SCHEMA_STRING && !strcmp(s, "-Infinity"))
    d = -INFINITY;
  else if (v->kind == MCP_SCHEMA_NUMBER && yaml_special(s, &d))
    ;
  else if (v->kind == MCP_SCHEMA_NUMBER && radix_form(s, len, &mag, &ok)) {
    if (!ok)
      return FAILF(e, v, "number %.40s out of range", s);
    d = (double)mag;
  } else if (decimal_syntax(s, len, &frac)) {
    if (!decimal_fast(s, len, &d))
      d = strtod(s, NULL);
    if (!frac && d == 0)
      d = 0.0; /* "-0" is the integer 0 (as in YAML and python), not -0.0 */
    if (isinf(d))
      return FAILF(e, v, "number %.40s out of range for %s", s,
                   single ? "float" : "double");
  } else {
    return fail(e, v, "a number");
  }
  /* What rounds to the largest float is still a float. */
  if (single && isfinite(d) && isinf((float)d))
    return FAILF(e, v, "number %.40s out of range for float", s);
  *out = d;
  return 0;
}

/* ---- scalars ------------------------------------------------------- */

static int int_kind_of(int type) {
  switch (type) {
  case SC_INT32:
  case SC_SINT32:
  case SC_SFIXED32:
  case SC_ENUM:
    return INT_S32;
  case SC_UINT32:
  case SC_FIXED32:
    return INT_U32;
  case SC_INT64:
  case SC_SINT64:
  case SC_SFIXED64:
    return INT_S64;
  default:
    return INT_U64;
  }
}

/* A scalar value ready to write: bits for numbers, or a byte string. */
typedef struct scalar {
  uint64_t bits;
  const uint8_t *data;
  size_t len;
  uint8_t *owned; /* decoded base64 */
} scalar;

static int enum_value(enc *e, const sc_field *f, const mcp_schema_value *v,
                      uint64_t *out) {
  const sc_enum *en = f->enm;
  if (v->kind == MCP_SCHEMA_NULL && en->null_value) {
    *out = 0;
    return 0;
  }
  if (v->kind == MCP_SCHEMA_STRING) {
    const sc_enum_value *ev = sc_enum_by_name(en, v->text ? v->text : "");
    if (ev) {
      *out = (uint64_t)(int64_t)ev->number;
      return 0;
    }
    int frac;
    if (!v->text || !decimal_syntax(v->text, v->len, &frac) || frac)
      return FAILF(e, v, "unknown value \"%.60s\" of enum %s", v->text ? v->text : "",
                   en->full_name);
  } else if (v->kind != MCP_SCHEMA_NUMBER) {
    return fail(e, v, "an enum name or number");
  }
  uint64_t bits;
  int rc = to_integer(e, v, INT_S32, &bits);
  if (rc)
    return rc;
  if (!en->open && !sc_enum_by_number(en, (int32_t)(uint32_t)bits))
    return FAILF(e, v, "unknown value %.40s of enum %s", v->text, en->full_name);
  *out = (uint64_t)(int64_t)(int32_t)(uint32_t)bits;
  return 0;
}

static int to_scalar(enc *e, const sc_field *f, const mcp_schema_value *v,
                     scalar *out) {
  memset(out, 0, sizeof *out);
  switch (f->type) {
  case SC_DOUBLE:
  case SC_FLOAT: {
    double d;
    int rc = to_double(e, v, f->type == SC_FLOAT, &d);
    if (rc)
      return rc;
    if (f->type == SC_FLOAT) {
      float x = (float)d;
      uint32_t b;
      memcpy(&b, &x, 4);
      out->bits = b;
    } else {
      memcpy(&out->bits, &d, 8);
    }
    return 0;
  }
  case SC_BOOL:
    if (v->kind != MCP_SCHEMA_BOOL)
      return fail(e, v, "true or false");
    out->bits = v->boolean != 0;
    return 0;
  case SC_STRING:
    if (v->kind != MCP_SCHEMA_STRING)
      return fail(e, v, "a string");
    if (v->len && !mcp_utf8_valid((const uint8_t *)v->text, v->len, 1))
      return FAILF(e, v, "a string that is not valid UTF-8");
    out->data = (const uint8_t *)v->text;
    out->len = v->len;
    return 0;
  case SC_BYTES: {
    if (v->kind != MCP_SCHEMA_STRING)
      return fail(e, v, "a base64 string");
    if (!v->len)
      return 0;
    uint8_t *p = sc_malloc(&e->s->mem, v->len / 4 * 3 + 3);
    if (!p)
      return nomem(e);
    long n = sc_base64_decode(v->text, v->len, p);
    if (n < 0) {
      sc_free(&e->s->mem, p);
      return fail(e, v, "a base64 string");
    }
    out->owned = p;
    out->data = p;
    out->len = (size_t)n;
    return 0;
  }
  case SC_ENUM:
    return enum_value(e, f, v, &out->bits);
  default:
    return to_integer(e, v, int_kind_of(f->type), &out->bits);
  }
}

static int scalar_is_default(const sc_field *f, const scalar *x) {
  if (f->type == SC_STRING || f->type == SC_BYTES)
    return x->len == 0;
  return x->bits == 0; /* bit pattern: -0.0 is written, as protobuf does */
}

/* The value of a scalar without its tag. */
static int put_scalar_value(enc *e, int type, const scalar *x) {
  switch (type) {
  case SC_DOUBLE:
  case SC_FIXED64:
  case SC_SFIXED64:
    return put_le(e, x->bits, 8);
  case SC_FLOAT:
  case SC_FIXED32:
  case SC_SFIXED32:
    return put_le(e, x->bits, 4);
  case SC_SINT32: {
    int32_t i = (int32_t)(uint32_t)x->bits;
    return put_varint(e, (uint32_t)(((uint32_t)i << 1) ^ (uint32_t)(i >> 31)));
  }
  case SC_SINT64: {
    int64_t i = (int64_t)x->bits;
    return put_varint(e, ((uint64_t)i << 1) ^ (uint64_t)(i >> 63));
  }
  case SC_INT32:
  case SC_ENUM:
    return put_varint(e, (uint64_t)(int64_t)(int32_t)(uint32_t)x->bits);
  case SC_STRING:
  case SC_BYTES:
    if (put_varint(e, x->len))
      return MCP_ERR_NOMEM;
    return mcp_buf_append(&e->out, x->data, x->len) ? nomem(e) : 0;
  default:
    return put_varint(e, x->bits);
  }
}

static int put_scalar(enc *e, const sc_field *f, const scalar *x) {
  int rc = put_tag(e, f->number, sc_wire_type(f->type));
  return rc ? rc : put_scalar_value(e, f->type, x);
}

/* ---- messages ------------------------------------------------------ */

static int encode_body(enc *e, const sc_msg *m, const mcp_schema_value *v);

/* A message-typed value with its tag. */
static int put_message(enc *e, uint32_t number, const sc_msg *m,
                       const mcp_schema_value *v) {
  int rc = put_tag(e, number, WT_LEN);
  if (rc)
    return rc;
  size_t start = sc_enc_open_len(e);
  if ((rc = encode_body(e, m, v)))
    return rc;
  return sc_enc_close_len(e, start);
}

static int field_value(enc *e, const sc_field *f, const mcp_schema_value *v) {
  if (f->type == SC_GROUP)
    return FAILF(e, v, "groups are not supported");
  if (f->type == SC_MESSAGE)
    return put_message(e, f->number, f->msg, v);
  scalar x;
  int rc = to_scalar(e, f, v, &x);
  if (!rc && (f->presence || !scalar_is_default(f, &x)))
    rc = put_scalar(e, f, &x);
  sc_free(&e->s->mem, x.owned);
  return rc;
}

/* null is a value (not "unset") for a Value and for a NullValue. */
static int null_is_value(const sc_field *f) {
  return (f->type == SC_MESSAGE && f->msg->wkt == SC_WKT_VALUE) ||
         (f->type == SC_ENUM && f->enm->null_value);
}

static int repeated_value(enc *e, const sc_field *f, const mcp_schema_value *v) {
  if (v->kind != MCP_SCHEMA_LIST)
    return fail(e, v, "a list");
  int rc = 0;
  size_t pstart = 0;
  if (f->packed && v->n) {
    if ((rc = put_tag(e, f->number, WT_LEN)))
      return rc;
    pstart = sc_enc_open_len(e);
  }
  for (size_t i = 0; i < v->n && !rc; i++) {
    const mcp_schema_value *it = v->kids[i];
    size_t old = path_index(e, i);
    if (it->kind == MCP_SCHEMA_NULL && !null_is_value(f)) {
      rc = FAILF(e, it, "null is not allowed in a list");
    } else if (f->type == SC_MESSAGE || f->type == SC_GROUP) {
      rc = f->type == SC_GROUP ? FAILF(e, it, "groups are not supported")
                               : put_message(e, f->number, f->msg, it);
    } else {
      scalar x;
      rc = to_scalar(e, f, it, &x);
      if (!rc)
        rc = f->packed ? put_scalar_value(e, f->type, &x) : put_scalar(e, f, &x);
      sc_free(&e->s->mem, x.owned);
    }
    rc = keep_going(e, rc);
    path_pop(e, old);
  }
  if (!rc && f->packed && v->n)
    rc = sc_enc_close_len(e, pstart);
  return rc;
}

/* Map keys, parsed and sortable. */
typedef struct mkey {
  const mcp_schema_value *key, *val;
  size_t idx; /* in the document */
  uint64_t bits; /* integers: two's complement; bool: 0/1 */
  int bad;       /* the key was refused (errors collected) */
} mkey;

/* The entries of the map |v|, in document order, for sorting (NULL for
 * none, or when memory ran out). */
static mkey *map_keys(enc *e, const mcp_schema_value *v) {
  mkey *keys = v->n ? sc_malloc(&e->s->mem, v->n * sizeof *keys) : NULL;
  for (size_t i = 0; keys && i < v->n; i++) {
    keys[i].key = v->kids[2 * i];
    keys[i].val = v->kids[2 * i + 1];
    keys[i].idx = i;
    keys[i].bits = 0;
    keys[i].bad = 0;
  }
  return keys;
}

static int cmp_mkey_s(const void *a, const void *b) {
  int64_t x = (int64_t)((const mkey *)a)->bits, y = (int64_t)((const mkey *)b)->bits;
  return x < y ? -1 : x > y;
}

static int cmp_mkey_u(const void *a, const void *b) {
  uint64_t x = ((const mkey *)a)->bits, y = ((const mkey *)b)->bits;
  return x < y ? -1 : x > y;
}

static int cmp_mkey_str(const void *a, const void *b) {
  const mcp_schema_value *x = ((const mkey *)a)->key, *y = ((const mkey *)b)->key;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = n ? memcmp(x->text, y->text, n) : 0;
  return c ? c : (x->len < y->len ? -1 : x->len > y->len);
}

static int map_key(enc *e, const sc_field *kf, const mcp_schema_value *k, mkey *out) {
  if (k->kind == MCP_SCHEMA_LIST || k->kind == MCP_SCHEMA_MAP || !k->text)
    return fail(e, k, "a scalar map key");
  if (kf->type == SC_STRING) {
    if (k->len && !mcp_utf8_valid((const uint8_t *)k->text, k->len, 1))
      return FAILF(e, k, "a map key that is not valid UTF-8");
    return 0;
  }
  if (kf->type == SC_BOOL) {
    if (!strcmp(k->text, "true"))
      out->bits = 1;
    else if (!strcmp(k->text, "false"))
      out->bits = 0;
    else
      return fail(e, k, "\"true\" or \"false\" as a map key");
    return 0;
  }
  /* Integer keys are written as strings in JSON: decimal only. */
  mcp_schema_value t = *k;
  t.kind = MCP_SCHEMA_STRING;
  return to_integer(e, &t, int_kind_of(kf->type), &out->bits);
}

static int map_value(enc *e, const sc_field *f, const mcp_schema_value *v) {
  if (v->kind != MCP_SCHEMA_MAP)
    return fail(e, v, "an object");
  const sc_field *kf = &f->msg->fields[0], *vf = &f->msg->fields[1];
  mkey *keys = map_keys(e, v);
  if (v->n && !keys)
    return nomem(e);
  int rc = 0, badkeys = 0;
  for (size_t i = 0; i < v->n && !rc; i++) {
    size_t old = path_push(e, keys[i].key->text ? keys[i].key->text : "",
                           keys[i].key->text ? keys[i].key->len : 0);
    rc = map_key(e, kf, keys[i].key, &keys[i]);
    keys[i].bad = rc != 0;
    badkeys += rc != 0;
    rc = keep_going(e, rc);
    path_pop(e, old);
  }
  /* With a refused key the order is moot (nothing is written): values
   * are still checked, in document order. */
  if (!rc && !badkeys && v->n > 1) {
    int (*cmp)(const void *, const void *) =
        kf->type == SC_STRING ? cmp_mkey_str
        : kf->type == SC_INT32 || kf->type == SC_INT64 || kf->type == SC_SINT32 ||
                kf->type == SC_SINT64 || kf->type == SC_SFIXED32 ||
                kf->type == SC_SFIXED64
            ? cmp_mkey_s
            : cmp_mkey_u;
    qsort(keys, v->n, sizeof *keys, cmp);
    for (size_t i = 1; i < v->n && !rc; i++)
      if (cmp(&keys[i - 1], &keys[i]) == 0) {
        /* The later one in the document is the duplicate. */
        const mcp_schema_value *k =
            keys[i].idx > keys[i - 1].idx ? keys[i].key : keys[i - 1].key;
        size_t old = path_push(e, k->text, k->len);
        rc = keep_going(e, FAILF(e, k, "duplicate map key"));
        path_pop(e, old);
      }
  }
  for (size_t i = 0; i < v->n && !rc; i++) {
    if (keys[i].bad)
      continue;
    size_t old = path_push(e, keys[i].key->text, keys[i].key->len);
    const mcp_schema_value *val = keys[i].val;
    if (val->kind == MCP_SCHEMA_NULL && !null_is_value(vf)) {
      rc = keep_going(e, FAILF(e, val, "null is not allowed as a map value"));
      path_pop(e, old);
      continue;
    }
    if (!(rc = put_tag(e, f->number, WT_LEN))) {
      size_t start = sc_enc_open_len(e);
      scalar k;
      memset(&k, 0, sizeof k);
      if (kf->type == SC_STRING) {
        k.data = (const uint8_t *)keys[i].key->text;
        k.len = keys[i].key->len;
      } else {
        k.bits = keys[i].bits;
      }
      /* Entries always carry both key and value, as protobuf writes them. */
      if (!(rc = put_scalar(e, kf, &k))) {
        if (vf->type == SC_MESSAGE) {
          rc = put_message(e, 2, vf->msg, val);
        } else {
          scalar x;
          if (!(rc = to_scalar(e, vf, val, &x)))
            rc = put_scalar(e, vf, &x);
          sc_free(&e->s->mem, x.owned);
        }
      }
      if (!rc)
        rc = sc_enc_close_len(e, start);
    }
    rc = keep_going(e, rc);
    path_pop(e, old);
  }
  sc_free(&e->s->mem, keys);
  return rc;
}

typedef struct fpair {
  const sc_field *f;
  const mcp_schema_value *key, *val;
} fpair;

/* A regular message from an object; |skip| is a key to ignore (Any's
 * "@type"). */
static int encode_fields(enc *e, const sc_msg *m, const mcp_schema_value *v,
                         const char *skip) {
  if (v->kind != MCP_SCHEMA_MAP)
    return fail(e, v, "an object");
  fpair local[32], *pairs = local;
  if (v->n > 32 && !(pairs = sc_malloc(&e->s->mem, v->n * sizeof *pairs)))
    return nomem(e);
  size_t np = 0;
  int rc = 0;
  for (size_t i = 0; i < v->n && !rc; i++) {
    const mcp_schema_value *k = v->kids[2 * i], *val = v->kids[2 * i + 1];
    const char *name = k->text ? k->text : "";
    if (k->kind == MCP_SCHEMA_LIST || k->kind == MCP_SCHEMA_MAP || !k->text) {
      rc = keep_going(e, fail(e, k, "a field name"));
      continue;
    }
    if (skip && !strcmp(name, skip) && strlen(name) == k->len)
      continue;
    if (strlen(name) != k->len) {
      rc = keep_going(e, FAILF(e, k, "a field name with a NUL character"));
      continue;
    }
    const sc_field *f = sc_field_lookup(m, name, k->len);
    if (!f) {
      if (e->flags & MCP_SCHEMA_IGNORE_UNKNOWN_FIELDS)
        continue;
      size_t old = path_field(e, name);
      rc = keep_going(e, FAILF(e, k, "unknown field (%s has no field \"%.60s\")",
                               m->full_name, name));
      path_pop(e, old);
      continue;
    }
    int clash = 0;
    for (size_t j = 0; j < np && !rc && !clash; j++) {
      int twice = pairs[j].f == f;
      if (!twice && !(f->oneof >= 0 && pairs[j].f->oneof == f->oneof &&
                      (val->kind != MCP_SCHEMA_NULL || null_is_value(f)) &&
                      (pairs[j].val->kind != MCP_SCHEMA_NULL || null_is_value(pairs[j].f))))
        continue; /* the path is written for an error only: this runs n^2 times */
      size_t old = path_field(e, name);
      if (twice)
        clash = FAILF(e, k, "field set twice (as \"%s\" and \"%s\")", pairs[j].key->text,
                      name);
      else
        clash = FAILF(e, k, "\"%s\" and \"%s\" are both members of oneof %s",
                      pairs[j].key->text, name, m->oneofs[f->oneof]);
      rc = keep_going(e, clash);
      path_pop(e, old);
    }
    if (!rc && !clash) {
      pairs[np].f = f;
      pairs[np].key = k;
      pairs[np].val = val;
      np++;
    }
  }
  /* Into field-number order: an insertion sort (few fields, often in
   * order already); field numbers are distinct (a field twice is refused). */
  for (size_t i = 1; i < np && !rc; i++) {
    fpair t = pairs[i];
    size_t j = i;
    for (; j > 0 && pairs[j - 1].f->number > t.f->number; j--)
      pairs[j] = pairs[j - 1];
    pairs[j] = t;
  }
  for (size_t i = 0; i < np && !rc; i++) {
    const sc_field *f = pairs[i].f;
    const mcp_schema_value *val = pairs[i].val;
    size_t old = path_field(e, pairs[i].key->text);
    if (val->kind == MCP_SCHEMA_NULL) {
      /* null clears a field, but a Value holds it, and NullValue's 0. */
      if (!f->repeated && f->type == SC_MESSAGE && f->msg->wkt == SC_WKT_VALUE)
        rc = put_message(e, f->number, f->msg, val);
      else if (!f->repeated && f->type == SC_ENUM && f->enm->null_value &&
               f->presence)
        rc = field_value(e, f, val);
    } else if (f->type == SC_MESSAGE && f->msg->map_entry && f->repeated) {
      rc = map_value(e, f, val);
    } else if (f->repeated) {
      rc = repeated_value(e, f, val);
    } else {
      rc = field_value(e, f, val);
    }
    rc = keep_going(e, rc);
    path_pop(e, old);
  }
  if (pairs != local)
    sc_free(&e->s->mem, pairs);
  return rc;
}

/* ---- well-known types ---------------------------------------------- */

static int digits_n(const char *s, unsigned n, unsigned *v) {
  *v = 0;
  for (unsigned i = 0; i < n; i++) {
    if (!is_digit(s[i]))
      return 0;
    *v = *v * 10 + (unsigned)(s[i] - '0');
  }
  return 1;
}

static int put_secs_nanos(enc *e, int64_t secs, int32_t nanos) {
  int rc = 0;
  if (secs && !(rc = put_tag(e, 1, WT_VARINT)))
    rc = put_varint(e, (uint64_t)secs);
  if (!rc && nanos && !(rc = put_tag(e, 2, WT_VARINT)))
    rc = put_varint(e, (uint64_t)(int64_t)nanos);
  return rc;
}

static int enc_duration(enc *e, const mcp_schema_value *v) {
  static const char want[] = "a duration such as \"1.5s\" or \"300ms\"";
  if (v->kind != MCP_SCHEMA_STRING || !v->text)
    return fail(e, v, want);
  int64_t secs = 0;
  int32_t nanos = 0;
  size_t at = 0, n = 0;
  switch (sc_duration_parse(v->text, v->len, &secs, &nanos, &at, &n)) {
  case 0:
    return put_secs_nanos(e, secs, nanos);
  case SC_DUR_RANGE:
    return FAILF(e, v, "duration %.40s out of range (at most 315576000000s)", v->text);
  case SC_DUR_GO_RANGE:
    return FAILF(e, v, "duration %.40s out of range (at most 2562047h47m16.854775807s "
                       "in Go's form; up to 315576000000s in seconds alone)", v->text);
  case SC_DUR_NO_UNIT:
    return FAILF(e, v, "duration %.40s has a number without a unit (ns, us, ms, "
                       "s, m, h)", v->text);
  case SC_DUR_UNIT:
    return FAILF(e, v, "unknown unit \"%.*s\" in duration %.40s (ns, us, ms, s, m, h)",
                 (int)(n < 20 ? n : 20), v->text + at, v->text);
  default:
    return fail(e, v, want);
  }
}

static int enc_timestamp(enc *e, const mcp_schema_value *v) {
  static const char want[] = "an RFC 3339 time such as \"2024-01-02T03:04:05Z\"";
  if (v->kind != MCP_SCHEMA_STRING || !v->text || v->len < 20)
    return fail(e, v, want);
  const char *s = v->text;
  unsigned y, mo, d, h, mi, sec;
  if (!digits_n(s, 4, &y) || s[4] != '-' || !digits_n(s + 5, 2, &mo) || s[7] != '-' ||
      !digits_n(s + 8, 2, &d) || s[10] != 'T' || !digits_n(s + 11, 2, &h) ||
      s[13] != ':' || !digits_n(s + 14, 2, &mi) || s[16] != ':' ||
      !digits_n(s + 17, 2, &sec))
    return fail(e, v, want);
  const char *p = s + 19;
  int32_t nanos;
  int k = sc_fraction(p, v->len - (size_t)(p - s), &nanos);
  if (k < 0)
    return fail(e, v, want);
  p += k;
  int64_t off = 0;
  if (*p == 'Z') {
    p++;
  } else if (*p == '+' || *p == '-') {
    unsigned oh, om;
    if (!digits_n(p + 1, 2, &oh) || p[3] != ':' || !digits_n(p + 4, 2, &om) || oh > 23 ||
        om > 59)
      return fail(e, v, want);
    off = (int64_t)(oh * 3600 + om * 60) * (*p == '-' ? -1 : 1);
    p += 6;
  } else {
    return fail(e, v, want);
  }
  if ((size_t)(p - s) != v->len)
    return fail(e, v, want);
  static const unsigned mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] ||
      (mo == 2 && d == 29 && !leap) || h > 23 || mi > 59 || sec > 59)
    return FAILF(e, v, "not a valid date and time: \"%.40s\"", s);
  int64_t t = sc_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off;
  if (t < SC_TIMESTAMP_MIN_SECONDS || t > SC_TIMESTAMP_MAX_SECONDS)
    return FAILF(e, v, "time \"%.40s\" out of range (years 0001 to 9999)", s);
  return put_secs_nanos(e, t, nanos);
}

static int enc_fieldmask(enc *e, const mcp_schema_value *v) {
  if (v->kind != MCP_SCHEMA_STRING || !v->text)
    return fail(e, v, "a field mask such as \"a.b,cD\"");
  mcp_buf path = {NULL, 0, 0, &e->s->mem};
  int rc = 0;
  const char *p = v->text, *end = v->text + v->len;
  while (p < end && !rc) {
    const char *c = memchr(p, ',', (size_t)(end - p));
    if (!c)
      c = end;
    path.len = 0;
    for (const char *q = p; q < c && !rc; q++) {
      if (*q == '_') {
        rc = FAILF(e, v, "field mask path \"%.*s\" has a '_' (paths are lowerCamelCase)",
                   (int)(c - p), p);
      } else if (*q >= 'A' && *q <= 'Z') {
        if (sc_buf_putc(&path, '_') || sc_buf_putc(&path, (uint8_t)(*q + 32)))
          rc = nomem(e);
      } else if (sc_buf_putc(&path, (uint8_t)*q)) {
        rc = nomem(e);
      }
    }
    if (!rc)
      rc = put_bytes(e, 1, path.p, path.len);
    p = c + 1;
  }
  mcp_buf_free(&path);
  return rc;
}

static int enc_value(enc *e, const mcp_schema_value *v);

static int enc_struct(enc *e, const mcp_schema_value *v) {
  if (v->kind != MCP_SCHEMA_MAP)
    return fail(e, v, "an object");
  /* map<string, Value> fields = 1, in key order. */
  mkey *keys = map_keys(e, v);
  if (v->n && !keys)
    return nomem(e);
  int rc = 0, badkeys = 0;
  for (size_t i = 0; i < v->n && !rc; i++) {
    if (keys[i].key->kind == MCP_SCHEMA_LIST || keys[i].key->kind == MCP_SCHEMA_MAP ||
        !keys[i].key->text)
      rc = fail(e, keys[i].key, "a scalar key");
    else if (!mcp_utf8_valid((const uint8_t *)keys[i].key->text, keys[i].key->len, 1))
      rc = FAILF(e, keys[i].key, "a key that is not valid UTF-8");
    keys[i].bad = rc != 0;
    badkeys += rc != 0;
    rc = keep_going(e, rc);
  }
  if (!rc && !badkeys && v->n > 1) {
    qsort(keys, v->n, sizeof *keys, cmp_mkey_str);
    for (size_t i = 1; i < v->n && !rc; i++)
      if (!cmp_mkey_str(&keys[i - 1], &keys[i])) {
        const mcp_schema_value *k =
            keys[i].idx > keys[i - 1].idx ? keys[i].key : keys[i - 1].key;
        size_t old = path_field(e, k->text);
        rc = keep_going(e, FAILF(e, k, "duplicate key"));
        path_pop(e, old);
      }
  }
  for (size_t i = 0; i < v->n && !rc; i++) {
    if (keys[i].bad)
      continue;
    size_t old = path_field(e, keys[i].key->text);
    if (!(rc = put_tag(e, 1, WT_LEN))) {
      size_t start = sc_enc_open_len(e);
      if (!(rc = put_bytes(e, 1, keys[i].key->text, keys[i].key->len)) &&
          !(rc = put_tag(e, 2, WT_LEN))) {
        size_t vs = sc_enc_open_len(e);
        if (!(rc = enc_value(e, keys[i].val)) && !(rc = sc_enc_close_len(e, vs)))
          rc = sc_enc_close_len(e, start);
      }
    }
    rc = keep_going(e, rc);
    path_pop(e, old);
  }
  sc_free(&e->s->mem, keys);
  return rc;
}

static int enc_list(enc *e, const mcp_schema_value *v) {
  if (v->kind != MCP_SCHEMA_LIST)
    return fail(e, v, "a list");
  int rc = 0;
  for (size_t i = 0; i < v->n && !rc; i++) {
    size_t old = path_index(e, i);
    if (!(rc = put_tag(e, 1, WT_LEN))) {
      size_t start = sc_enc_open_len(e);
      if (!(rc = enc_value(e, v->kids[i])))
        rc = sc_enc_close_len(e, start);
    }
    rc = keep_going(e, rc);
    path_pop(e, old);
  }
  return rc;
}

static int deeper(enc *e, const mcp_schema_value *v) {
  if (++e->depth > e->s->max_depth)
    return sc_error(e->err, MCP_ERR_LIMIT, v->line, e->path,
                    "nested deeper than %u messages", e->s->max_depth);
  return 0;
}

/* google.protobuf.Value's body. */
static int enc_value(enc *e, const mcp_schema_value *v) {
  int rc = deeper(e, v);
  if (rc)
    return rc;
  switch (v->kind) {
  case MCP_SCHEMA_NULL:
    if (!(rc = put_tag(e, 1, WT_VARINT)))
      rc = put_varint(e, 0);
    break;
  case MCP_SCHEMA_NUMBER: {
    double d;
    if (!(rc = to_double(e, v, 0, &d))) {
      uint64_t b;
      memcpy(&b, &d, 8);
      if (!isfinite(d))
        rc = FAILF(e, v, "a Value cannot hold %s", v->text);
      else if (!(rc = put_tag(e, 2, WT_I64)))
        rc = put_le(e, b, 8);
    }
    break;
  }
  case MCP_SCHEMA_STRING:
    if (v->len && !mcp_utf8_valid((const uint8_t *)v->text, v->len, 1))
      rc = FAILF(e, v, "a string that is not valid UTF-8");
    else
      rc = put_bytes(e, 3, v->text, v->len);
    break;
  case MCP_SCHEMA_BOOL:
    if (!(rc = put_tag(e, 4, WT_VARINT)))
      rc = put_varint(e, v->boolean != 0);
    break;
  case MCP_SCHEMA_MAP:
  case MCP_SCHEMA_LIST:
    /* The Struct or ListValue is one more message (as the decoder counts). */
    if (!(rc = deeper(e, v)) && !(rc = put_tag(e, v->kind == MCP_SCHEMA_MAP ? 5 : 6, WT_LEN))) {
      size_t start = sc_enc_open_len(e);
      if (!(rc = v->kind == MCP_SCHEMA_MAP ? enc_struct(e, v) : enc_list(e, v)))
        rc = sc_enc_close_len(e, start);
    }
    e->depth--; /* deeper() counted it, failing or not */
    break;
  default:
    rc = fail(e, v, "a JSON value");
  }
  e->depth--;
  return rc;
}

static int enc_any(enc *e, const mcp_schema_value *v) {
  if (v->kind != MCP_SCHEMA_MAP)
    return fail(e, v, "an object with \"@type\"");
  if (!v->n)
    return 0;
  const mcp_schema_value *t = mcp_schema_value_get(v, "@type");
  if (!t)
    return FAILF(e, v, "an Any without \"@type\"");
  if (t->kind != MCP_SCHEMA_STRING || !t->text) {
    size_t old = path_field(e, "@type");
    int rc = fail(e, t, "a type URL");
    path_pop(e, old);
    return rc;
  }
  const char *name = mcp_schema_type_name(t->text);
  const sc_msg *m = sc_find_msg(e->s, name);
  if (!m || !*name || name == t->text) {
    size_t old = path_field(e, "@type");
    int rc = FAILF(e, t, "unknown type \"%.100s\" in an Any (not in the schema)", t->text);
    path_pop(e, old);
    return rc;
  }
  int rc = put_bytes(e, 1, t->text, t->len);
  if (rc)
    return rc;
  /* The body goes in field 2, written only when not empty. */
  size_t mark = e->out.len;
  if ((rc = put_tag(e, 2, WT_LEN)))
    return rc;
  size_t start = sc_enc_open_len(e);
  if (m->wkt != SC_WKT_NONE) {
    const mcp_schema_value *val = NULL;
    for (size_t i = 0; i < v->n && !rc; i++) {
      const mcp_schema_value *k = v->kids[2 * i];
      if (k->text && !strcmp(k->text, "@type"))
        continue;
      if (k->text && !strcmp(k->text, "value")) {
        val = v->kids[2 * i + 1];
        continue;
      }
      size_t old = path_field(e, k->text ? k->text : "?");
      rc = keep_going(e, FAILF(e, k, "unknown field (an Any of %s has only \"@type\" and "
                                     "\"value\")", m->full_name));
      path_pop(e, old);
    }
    if (rc)
      return rc;
    if (!val)
      return FAILF(e, v, "an Any of %s without \"value\"", m->full_name);
    size_t old = path_field(e, "value");
    rc = encode_body(e, m, val);
    path_pop(e, old);
  } else {
    if (!(rc = deeper(e, v))) {
      rc = encode_fields(e, m, v, "@type");
      e->depth--;
    }
  }
  if (rc)
    return rc;
  if (e->out.len == start) {
    e->out.len = mark;
    return 0;
  }
  return sc_enc_close_len(e, start);
}

static int enc_wrapper(enc *e, const sc_msg *m, const mcp_schema_value *v) {
  const sc_field *f = sc_field_by_number(m, 1);
  if (!f)
    return FAILF(e, v, "%s has no field 1", m->full_name);
  return field_value(e, f, v);
}

/* A well-known type's own JSON form, or a message's fields. */
static int encode_kind(enc *e, const sc_msg *m, const mcp_schema_value *v) {
  switch (m->wkt) {
  case SC_WKT_ANY:
    return enc_any(e, v);
  case SC_WKT_DURATION:
    return enc_duration(e, v);
  case SC_WKT_TIMESTAMP:
    return enc_timestamp(e, v);
  case SC_WKT_STRUCT:
    return enc_struct(e, v);
  case SC_WKT_LISTVALUE:
    return enc_list(e, v);
  case SC_WKT_FIELDMASK:
    return enc_fieldmask(e, v);
  case SC_WKT_WRAPPER:
    return enc_wrapper(e, m, v);
  default:
    return encode_fields(e, m, v, NULL);
  }
}

/* The body of a message of type |m| (no tag, no length). */
static int encode_body(enc *e, const sc_msg *m, const mcp_schema_value *v) {
  int rc;
  if (m->wkt == SC_WKT_VALUE)
    return enc_value(e, v);
  if ((rc = deeper(e, v)))
    return rc;
  rc = encode_kind(e, m, v);
  e->depth--;
  return rc;
}

/* mcp_schema_encode(), or with |errs| (collect) mcp_schema_encode_all(). */
static int encode(const mcp_schema *s, const char *type_name, const mcp_schema_value *v,
                  const char *path, unsigned flags, uint8_t **out, size_t *outlen,
                  mcp_schema_error *err, int all, mcp_schema_error *errs,
                  size_t max_errs, size_t *nerrs) {
  if (!s || !type_name || !v || !out || !outlen)
    return sc_error(err, MCP_ERR_INVALID_ARGUMENT, 0, path, "invalid argument");
  const sc_msg *m = sc_find_msg(s, type_name);
  if (!m)
    return sc_error(err, MCP_ERR_NOT_FOUND, v->line, path,
                    "unknown message type %.200s", type_name);
  enc e;
  memset(&e, 0, sizeof e);
  e.s = s;
  e.err = all ? &e.cur : err;
  e.flags = flags;
  e.out.mem = &s->mem;
  e.all = all;
  e.errs = errs;
  e.max_errs = errs ? max_errs : 0;
  if (path)
    path_add(&e, "", path, strlen(path), "");
  /* A null document is the empty message (as a null field is an unset one). */
  int rc = v->kind == MCP_SCHEMA_NULL && m->wkt != SC_WKT_VALUE ? 0 : encode_body(&e, m, v);
  rc = keep_going(&e, rc); /* a mismatch of the root itself */
  if (!rc && e.oom)
    rc = sc_error(e.err, MCP_ERR_NOMEM, 0, path, "out of memory");
  if (all) {
    if (rc) { /* out of memory, too deep: that error alone */
      if (e.max_errs)
        errs[0] = e.cur;
      e.nerrs = 1;
    } else if (e.nerrs) {
      rc = MCP_ERR_INVALID_ARGUMENT;
    }
    *nerrs = e.nerrs;
  }
  if (rc) {
    mcp_buf_free(&e.out);
    return rc;
  }
  if (!e.out.len) {
    mcp_buf_free(&e.out);
    *out = NULL;
    *outlen = 0;
    return 0;
  }
  *out = e.out.p;
  *outlen = e.out.len;
  return 0;
}

int mcp_schema_encode(const mcp_schema *s, const char *type_name,
                      const mcp_schema_value *v, const char *path, unsigned flags,
                      uint8_t **out, size_t *outlen, mcp_schema_error *err) {
  return encode(s, type_name, v, path, flags, out, outlen, err, 0, NULL, 0, NULL);
}

int mcp_schema_encode_all(const mcp_schema *s, const char *type_name,
                          const mcp_schema_value *v, const char *path, unsigned flags,
                          uint8_t **out, size_t *outlen, mcp_schema_error *errs,
                          size_t max_errs, size_t *nerrs) {
  size_t n = 0;
  int rc = encode(s, type_name, v, path, flags, out, outlen,
                  errs && max_errs ? errs : NULL, 1, errs, max_errs, &n);
  if (nerrs)
    *nerrs = rc && !n ? 1 : n; /* argument and type errors: in errs[0] */
  return rc;
}

/* ---- for the direct encoder (encode_int.h) ------------------------- */

int sc_enc_scalar(enc *e, const sc_field *f, const mcp_schema_value *v, int how) {
  if (how == SC_ENC_FIELD)
    return field_value(e, f, v);
  scalar x;
  int rc = to_scalar(e, f, v, &x);
  if (!rc)
    rc = how == SC_ENC_PACKED ? put_scalar_value(e, f->type, &x) : put_scalar(e, f, &x);
  sc_free(&e->s->mem, x.owned);
  return rc;
}

int sc_enc_message(enc *e, uint32_t number, const sc_msg *m, const mcp_schema_value *v) {
  return put_message(e, number, m, v);
}

int sc_enc_null_is_value(const sc_field *f) { return null_is_value(f); }
