/*
 * YAML text -> protobuf wire bytes with no tree in between (issue 25
 * target 4): the fast scanner's events drive the encoder directly.
 *
 * The bytes must equal the tree encoder's (encode.c): fields in number
 * order, map entries in key order. Events come in document order, so each
 * message (and each map) keeps a list of segments, one per field (entry),
 * in the output buffer; at its end, if they are out of order, the body is
 * copied aside once and written back in order. Values are converted by
 * the tree encoder's own code (encode_int.h) from a node made for the one
 * scalar.
 *
 * Everything that is not plainly right is left to the long way (parse to
 * a tree, encode the tree), which then gives the result or the error: an
 * unknown field, a field twice, two members of a oneof, a null where it
 * means something, Struct, Any and the other object-form well-known types,
 * a duplicate or non-string map key, any conversion error, the limits.
 * The scanner itself gives up on rare YAML the same way. So this file
 * never reports an error: it says SC_YF_BAIL.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "encode_int.h"

#define DX_MAX_DEPTH 64 /* mcp_schema_parse_options_default()'s max_depth */

enum { DX_MSG, DX_LIST, DX_MAP };

typedef struct dx_frame {
  int kind;
  /* DX_MSG: the message, and the field whose value is awaited (NULL while
   * a key is). DX_LIST, DX_MAP: the repeated field. */
  const sc_msg *m;
  const sc_field *f;
  size_t start;  /* DX_MSG: where the awaited field's bytes begin; DX_LIST:
                    where the list's (a packed one's tag); DX_MAP: where
                    the entry being written begins */
  size_t len_at; /* sc_enc_open_len() of this body (0: the root), of a
                    packed list's, of a map's current entry */
  size_t seg0;   /* this frame's first segment */
  int has_key;   /* DX_MAP: the entry's key is written, its value awaited */
} dx_frame;

/* A field of a message (f, set: not null) or an entry of a map, as the
 * bytes [start, end) of the output. */
typedef struct dx_seg {
  const sc_field *f;
  size_t start, end;
  int set;
  const uint8_t *key; /* a map entry's key, while dx_order() sorts */
  size_t klen;
} dx_seg;

typedef struct dx {
  enc *e;
  const sc_msg *root;
  size_t depth, docs;
  dx_seg *segs;
  size_t nsegs, segs_cap;
  size_t nodes, bytes; /* the parser's budget, counted as it counts */
  char *big;
  size_t big_cap;
  mcp_buf tmp; /* a body being put in order */
  /* The text the fast scanner reads: a scalar within it is printable ASCII
   * (the scanner leaves every other byte to libyaml), so it needs no UTF-8
   * check; the scanner's unescaped strings are elsewhere. 0 and 0 for the
   * streaming encoder, whose events are libyaml's. */
  uintptr_t text_lo, text_hi;
  /* Not cleared before use: */
  dx_frame stack[DX_MAX_DEPTH + 1];
  char small[256]; /* the scalar, NUL-terminated */
  /* The first segments, and a small body being put in order, without an
   * allocation (a document of a few dozen fields needs no more). */
  dx_seg seg_buf[64];
  uint8_t scratch[1024];
} dx;

#define BAIL SC_YF_BAIL

/* The handlers dx_step() picks from stay out of it, so that it saves few
 * registers: it runs for every event. */
#if defined(__GNUC__) || defined(__clang__)
#define DX_HANDLER __attribute__((noinline)) static int
#else
#define DX_HANDLER static int
#endif

/* The scalar of |ev|, NUL-terminated (in |d|, until the next one); NULL
 * when memory ran out. */
static const char *dx_text(dx *d, const sc_yf_event *ev) {
  char *t = d->small;
  if (ev->len >= sizeof d->small) {
    if (ev->len >= d->big_cap) {
      char *n = sc_realloc(&d->e->s->mem, d->big, ev->len + 1);
      if (!n)
        return NULL;
      d->big = n;
      d->big_cap = ev->len + 1;
    }
    t = d->big;
  }
  memcpy(t, ev->text, ev->len);
  t[ev->len] = '\0';
  return t;
}

/* The scalar of |ev| as a node, resolved as the tree's builder resolves it. */
static int dx_node(dx *d, const sc_yf_event *ev, mcp_schema_value *v) {
  const char *t = dx_text(d, ev);
  if (!t)
    return BAIL;
  memset(v, 0, sizeof *v);
  v->text = t;
  v->len = ev->len;
  v->line = ev->line + 1;
  if (sc_yaml_resolve(t, NULL, ev->style == MCP_SCHEMA_YAML_PLAIN, &v->kind, &v->boolean, NULL))
    return BAIL;
  return 0;
}

static int dx_seg_add(dx *d, const sc_field *f, size_t start, int set) {
  if (d->nsegs == d->segs_cap) {
    size_t cap = 2 * d->segs_cap;
    int own = d->segs != d->seg_buf;
    dx_seg *n = own ? sc_realloc(&d->e->s->mem, d->segs, cap * sizeof *n)
                    : sc_malloc(&d->e->s->mem, cap * sizeof *n);
    if (!n)
      return BAIL;
    if (!own)
      memcpy(n, d->seg_buf, d->nsegs * sizeof *n);
    d->segs = n;
    d->segs_cap = cap;
  }
  d->segs[d->nsegs++] = (dx_seg){f, start, d->e->out.len, set, NULL, 0};
  return 0;
}

/* A field of the message |fr| is about to get a value (|set|: not null):
 * refused when it clashes with one it already has (the tree encoder says
 * how). */
static int dx_clash(const dx *d, const dx_frame *fr, const sc_field *f, int set) {
  for (size_t i = fr->seg0; i < d->nsegs; i++) {
    const dx_seg *g = &d->segs[i];
    if (g->f == f || (set && g->set && f->oneof >= 0 && g->f->oneof == f->oneof))
      return 1;
  }
  return 0;
}

static int wrote(dx *d, int rc) { return rc || d->e->oom ? BAIL : 0; }

static int dx_tag(dx *d, uint32_t number) {
  return sc_buf_varint(&d->e->out, (uint64_t)number << 3 | WT_LEN) ? BAIL : 0;
}

/* The key of the map entry |g| (a string, field 1), read back from the
 * bytes it was written as, with the engine's wire reader. */
static const uint8_t *entry_key(const uint8_t *base, const dx_seg *g, size_t *n) {
  mcp_wire w = {base + g->start, base + g->end};
  mcp_wire_field f = {.data = NULL, .len = 0}; /* our own bytes: they read */
  mcp_wire_field_next(&w, &f);                 /* the entry */
  w = (mcp_wire){f.data, f.data + f.len};
  mcp_wire_field_next(&w, &f); /* its key */
  *n = f.len;
  return f.data;
}

static int cmp_key(const uint8_t *a, size_t an, const uint8_t *b, size_t bn) {
  int c = memcmp(a, b, an < bn ? an : bn);
  return c ? c : (an < bn ? -1 : an > bn);
}

static int cmp_seg_key(const void *x, const void *y) {
  const dx_seg *a = x, *b = y;
  return cmp_key(a->key, a->klen, b->key, b->klen);
}

/* Puts the segments of frame |fr| (they tile its body) in field-number
 * order (DX_MSG) or key order (DX_MAP, where two equal keys bail). */
static int dx_order(dx *d, const dx_frame *fr) {
  size_t n = d->nsegs - fr->seg0, i;
  if (n < 2)
    return 0;
  dx_seg *s = d->segs + fr->seg0;
  const uint8_t *base = d->e->out.p;
  if (fr->kind == DX_MSG) {
    for (i = 1; i < n && s[i - 1].f->number < s[i].f->number; i++)
      ;
    if (i == n)
      return 0;
    /* An insertion sort: few fields, field numbers distinct (dx_clash). */
    for (i = 1; i < n; i++) {
      dx_seg t = s[i];
      size_t j = i;
      for (; j > 0 && s[j - 1].f->number > t.f->number; j--)
        s[j] = s[j - 1];
      s[j] = t;
    }
  } else {
    size_t an, bn;
    for (i = 1; i < n; i++) {
      const uint8_t *a = entry_key(base, &s[i - 1], &an);
      const uint8_t *b = entry_key(base, &s[i], &bn);
      if (cmp_key(a, an, b, bn) >= 0)
        break;
    }
    if (i == n)
      return 0;
    for (i = 0; i < n; i++)
      s[i].key = entry_key(base, &s[i], &s[i].klen);
    qsort(s, n, sizeof *s, cmp_seg_key);
    for (i = 1; i < n; i++)
      if (!cmp_seg_key(&s[i - 1], &s[i]))
        return BAIL; /* a duplicate key: the long way names it */
  }
  size_t lo = SIZE_MAX, hi = 0;
  for (i = 0; i < n; i++) {
    lo = s[i].start < lo ? s[i].start : lo;
    hi = s[i].end > hi ? s[i].end : hi;
  }
  if (hi == lo)
    return 0; /* null fields only: nothing written */
  const uint8_t *t = d->scratch;
  if (hi - lo <= sizeof d->scratch) {
    memcpy(d->scratch, base + lo, hi - lo);
  } else {
    d->tmp.len = 0;
    if (mcp_buf_append(&d->tmp, base + lo, hi - lo))
      return BAIL;
    t = d->tmp.p;
  }
  uint8_t *w = d->e->out.p + lo;
  for (i = 0; i < n; i++) {
    memcpy(w, t + (s[i].start - lo), s[i].end - s[i].start);
    w += s[i].end - s[i].start;
  }
  return 0;
}

static int dx_push(dx *d, int kind, const sc_msg *m, const sc_field *f, size_t start,
                   size_t len_at) {
  if (d->depth > DX_MAX_DEPTH)
    return BAIL;
  if (kind == DX_MSG && ++d->e->depth > d->e->s->max_depth)
    return BAIL; /* the long way reports the limit */
  dx_frame *fr = &d->stack[d->depth++];
  fr->kind = kind;
  fr->m = m;
  fr->f = f;
  fr->start = start;
  fr->len_at = len_at;
  fr->seg0 = d->nsegs;
  fr->has_key = 0;
  return 0;
}

/* A value of the top frame is complete: a field of a message, an entry of
 * a map (its length is written now). */
static int dx_value_done(dx *d) {
  if (!d->depth)
    return 0;
  dx_frame *fr = &d->stack[d->depth - 1];
  if (fr->kind == DX_MSG) {
    int rc = dx_seg_add(d, fr->f, fr->start, 1);
    fr->f = NULL;
    return rc;
  }
  if (fr->kind == DX_MAP) {
    fr->has_key = 0;
    if (sc_enc_close_len(d->e, fr->len_at))
      return BAIL;
    return dx_seg_add(d, NULL, fr->start, 1);
  }
  return 0;
}

/* A message begins as the value of the top frame's field (or as a list
 * item, or a map entry's value, of message type |m|, tag |number|). */
static int dx_message(dx *d, uint32_t number, const sc_msg *m) {
  if (m->wkt != SC_WKT_NONE)
    return BAIL; /* Struct, Any, ...: their object forms */
  if (dx_tag(d, number))
    return BAIL;
  size_t at = sc_enc_open_len(d->e);
  return d->e->oom ? BAIL : dx_push(d, DX_MSG, m, NULL, 0, at);
}

/* The end of the top frame. */
static int dx_end(dx *d) {
  dx_frame *fr = &d->stack[d->depth - 1];
  enc *e = d->e;
  if (fr->kind == DX_LIST) {
    if (fr->f->packed) {
      if (e->out.len == fr->len_at) /* no item: no field */
        e->out.len = fr->start;
      else if (sc_enc_close_len(e, fr->len_at))
        return BAIL;
    }
  } else if (fr->kind == DX_MAP && fr->has_key) {
    return BAIL;
  } else {
    if (fr->kind == DX_MSG && fr->f)
      return BAIL; /* a key without a value: not from the scanner */
    if (dx_order(d, fr))
      return BAIL;
    if (fr->kind == DX_MSG) {
      e->depth--;
      if (fr->len_at && sc_enc_close_len(e, fr->len_at))
        return BAIL;
    }
  }
  d->nsegs = fr->seg0;
  d->depth--;
  return dx_value_done(d);
}

/* An event while the message |fr| awaits a key. */
DX_HANDLER dx_key(dx *d, dx_frame *fr, const sc_yf_event *ev) {
  if (ev->type == MCP_SCHEMA_YAML_MAP_END)
    return dx_end(d);
  if (ev->type != MCP_SCHEMA_YAML_SCALAR)
    return BAIL;
  /* A NUL comes only from a double-quoted "\0" (YAML refuses the byte). */
  if (ev->style == MCP_SCHEMA_YAML_DOUBLE_QUOTED && memchr(ev->text, 0, ev->len))
    return BAIL;
  const sc_field *f = sc_field_lookup(fr->m, ev->text, ev->len);
  if (!f)
    return BAIL;
  fr->f = f;
  fr->start = d->e->out.len;
  return 0;
}

/* The scalar of |ev| is UTF-8 (NUL allowed): known for the text's own
 * bytes (dx.text_lo), checked for the rest. */
static int dx_utf8(const dx *d, const sc_yf_event *ev) {
  uintptr_t t = (uintptr_t)ev->text;
  return !ev->len || (t >= d->text_lo && t < d->text_hi) ||
         mcp_utf8_valid((const uint8_t *)ev->text, ev->len, 1);
}

/* The common scalar: a string for a string field, which needs no node (nor
 * its copy and resolution). 0 for anything else: the node's way decides,
 * and reports. */
static int dx_is_string(const dx *d, const sc_field *f, const sc_yf_event *ev) {
  return f->type == SC_STRING &&
         (ev->style != MCP_SCHEMA_YAML_PLAIN || !sc_yaml_may_resolve(ev->len ? ev->text[0] : 0)) &&
         dx_utf8(d, ev);
}

/* Writes the string of |ev| as the field |f| (|always|: even when empty,
 * as a list item is; else as field_value() does). */
static int dx_string(dx *d, const sc_field *f, const sc_yf_event *ev, int always) {
  if (!ev->len && !always && !f->presence)
    return 0; /* the default: not written */
  return sc_buf_field(&d->e->out, (uint64_t)f->number << 3 | WT_LEN, ev->text, ev->len) ? BAIL
                                                                                      : 0;
}

/* The value of the field |f| of the message |fr|. */
DX_HANDLER dx_field(dx *d, dx_frame *fr, const sc_field *f, const sc_yf_event *ev) {
  enc *e = d->e;
  if (ev->type == MCP_SCHEMA_YAML_SCALAR) {
    if (!f->repeated && dx_is_string(d, f, ev)) {
      if (dx_clash(d, fr, f, 1) || dx_string(d, f, ev, 0))
        return BAIL;
      return dx_value_done(d);
    }
    mcp_schema_value v;
    if (dx_node(d, ev, &v))
      return BAIL;
    if (v.kind == MCP_SCHEMA_NULL) { /* unset, unless null means something */
      if (sc_enc_null_is_value(f) || dx_clash(d, fr, f, 0))
        return BAIL;
      fr->f = NULL;
      return dx_seg_add(d, f, fr->start, 0);
    }
    if (f->repeated || dx_clash(d, fr, f, 1))
      return BAIL;
    if (wrote(d, sc_enc_scalar(e, f, &v, SC_ENC_FIELD)))
      return BAIL;
    return dx_value_done(d);
  }
  if (dx_clash(d, fr, f, 1))
    return BAIL;
  if (ev->type == MCP_SCHEMA_YAML_MAP_START) {
    if (f->type != SC_MESSAGE)
      return BAIL;
    if (f->repeated) {
      if (!f->msg->map_entry || f->msg->fields[0].type != SC_STRING)
        return BAIL;
      return dx_push(d, DX_MAP, NULL, f, 0, 0);
    }
    return dx_message(d, f->number, f->msg);
  }
  if (ev->type == MCP_SCHEMA_YAML_SEQ_START) {
    if (!f->repeated || (f->type == SC_MESSAGE && f->msg->map_entry))
      return BAIL;
    size_t start = e->out.len, at = 0;
    if (f->packed) {
      if (dx_tag(d, f->number))
        return BAIL;
      at = sc_enc_open_len(e);
      if (e->oom)
        return BAIL;
    }
    return dx_push(d, DX_LIST, NULL, f, start, at);
  }
  return BAIL;
}

/* An item of the list |fr|. */
DX_HANDLER dx_item(dx *d, dx_frame *fr, const sc_yf_event *ev) {
  const sc_field *f = fr->f;
  if (ev->type == MCP_SCHEMA_YAML_SEQ_END)
    return dx_end(d);
  if (ev->type == MCP_SCHEMA_YAML_MAP_START)
    return f->type == SC_MESSAGE ? dx_message(d, f->number, f->msg) : BAIL;
  if (ev->type != MCP_SCHEMA_YAML_SCALAR)
    return BAIL;
  if (dx_is_string(d, f, ev))
    return dx_string(d, f, ev, 1);
  mcp_schema_value v;
  if (dx_node(d, ev, &v) || v.kind == MCP_SCHEMA_NULL)
    return BAIL;
  if (f->type == SC_MESSAGE)
    return wrote(d, sc_enc_message(d->e, f->number, f->msg, &v));
  return wrote(d, sc_enc_scalar(d->e, f, &v, f->packed ? SC_ENC_PACKED : SC_ENC_TAGGED));
}

/* An event of the map field |fr|: a key, or an entry's value. */
DX_HANDLER dx_entry(dx *d, dx_frame *fr, const sc_yf_event *ev) {
  enc *e = d->e;
  const sc_field *kf = &fr->f->msg->fields[0], *vf = &fr->f->msg->fields[1];
  if (!fr->has_key) {
    if (ev->type == MCP_SCHEMA_YAML_MAP_END)
      return dx_end(d);
    if (ev->type != MCP_SCHEMA_YAML_SCALAR)
      return BAIL;
    if (!dx_utf8(d, ev))
      return BAIL;
    fr->start = e->out.len;
    if (dx_tag(d, fr->f->number))
      return BAIL;
    fr->len_at = sc_enc_open_len(e);
    fr->has_key = 1;
    /* The key's field (1, a string), written even when empty. */
    if (sc_buf_field(&e->out, (uint64_t)kf->number << 3 | WT_LEN, ev->text, ev->len))
      return BAIL;
    return e->oom ? BAIL : 0;
  }
  if (ev->type == MCP_SCHEMA_YAML_MAP_START)
    return vf->type == SC_MESSAGE ? dx_message(d, vf->number, vf->msg) : BAIL;
  if (ev->type != MCP_SCHEMA_YAML_SCALAR)
    return BAIL;
  if (dx_is_string(d, vf, ev))
    return dx_string(d, vf, ev, 1) ? BAIL : dx_value_done(d);
  mcp_schema_value v;
  if (dx_node(d, ev, &v) || v.kind == MCP_SCHEMA_NULL)
    return BAIL;
  int rc = vf->type == SC_MESSAGE ? sc_enc_message(e, vf->number, vf->msg, &v)
                                  : sc_enc_scalar(e, vf, &v, SC_ENC_TAGGED);
  return wrote(d, rc) ? BAIL : dx_value_done(d);
}

/* An event of the document (the parser's limits checked, or out of reach). */
static int dx_step(dx *d, const sc_yf_event *ev) {
  if (d->depth) { /* within the document: its start or end there gives up */
    dx_frame *fr = &d->stack[d->depth - 1];
    switch (fr->kind) {
    case DX_MSG:
      return fr->f ? dx_field(d, fr, fr->f, ev) : dx_key(d, fr, ev);
    case DX_LIST:
      return dx_item(d, fr, ev);
    default:
      return dx_entry(d, fr, ev);
    }
  }
  if (ev->type == MCP_SCHEMA_YAML_DOC_START)
    return d->docs++ ? BAIL : 0;
  if (ev->type == MCP_SCHEMA_YAML_DOC_END)
    return 0;
  if (ev->type != MCP_SCHEMA_YAML_MAP_START || d->root == NULL)
    return BAIL;
  const sc_msg *m = d->root;
  d->root = NULL; /* one root */
  return m->wkt != SC_WKT_NONE ? BAIL : dx_push(d, DX_MSG, m, NULL, 0, 0);
}

/* Any event: libyaml's (an encoder's caller gives them) may carry tags and
 * anchors, and, with aliases, reach the parser's limits. */
static int dx_event(void *ctx, const sc_yf_event *ev) {
  dx *d = ctx;
  if (ev->tag || ev->anchor)
    return BAIL;
  if (ev->type == MCP_SCHEMA_YAML_SCALAR)
    d->bytes += ev->len;
  if ((ev->type == MCP_SCHEMA_YAML_SCALAR || ev->type == MCP_SCHEMA_YAML_SEQ_START ||
       ev->type == MCP_SCHEMA_YAML_MAP_START) &&
      (++d->nodes >= 1000000 || d->bytes >= (size_t)64 << 20))
    return BAIL; /* near the parser's default limits: its word */
  return dx_step(d, ev);
}

/* The fast scanner's events over a text of at most DX_SMALL bytes: no tag
 * or anchor (it leaves those to libyaml), at most two nodes per byte of
 * text (the densest: "a:\n", a mapping, its key and an empty value, three
 * nodes in three bytes) and scalars of at most its bytes, so the parser's
 * limits (a million nodes, 64 MiB of scalars) are out of reach. */
#define DX_SMALL ((size_t)400000)
static int dx_fast_event(void *ctx, const sc_yf_event *ev) { return dx_step(ctx, ev); }

/* The direct way: 0 with the bytes in e->out, or SC_YF_BAIL. */
static int direct(enc *e, const sc_msg *m, const char *text, size_t len) {
  dx d;
  memset(&d, 0, offsetof(dx, stack));
  d.e = e;
  d.root = m;
  d.tmp.mem = &e->s->mem;
  d.segs = d.seg_buf;
  d.segs_cap = sizeof d.seg_buf / sizeof *d.seg_buf;
  d.text_lo = (uintptr_t)text;
  d.text_hi = (uintptr_t)text + len;
  int bailed = 0;
  int rc = sc_yaml_fast(&e->s->mem, text, len, DX_MAX_DEPTH,
                        len <= DX_SMALL ? dx_fast_event : dx_event, &d, &bailed);
  if (!rc && (d.depth || e->oom || !d.docs || d.root))
    rc = BAIL; /* unfinished; no document (a null: the long way knows what
                  that is for each type); or the document was not a map */
  if (d.segs != d.seg_buf)
    sc_free(&e->s->mem, d.segs);
  sc_free(&e->s->mem, d.big);
  mcp_buf_free(&d.tmp);
  return rc ? BAIL : 0;
}

/* ---- the encoder of a value within a document ---------------------- */

struct mcp_schema_yaml_encoder {
  enc e;
  dx d;
  int state; /* 0 idle, 1 encoding, 2 gave up */
};

int mcp_schema_yaml_encoder_new(const mcp_schema *s, mcp_schema_yaml_encoder **px) {
  if (!s || !px)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_schema_yaml_encoder *x = sc_malloc(&s->mem, sizeof *x);
  if (!x)
    return MCP_ERR_NOMEM;
  memset(x, 0, sizeof *x);
  x->e.s = s;
  x->e.out.mem = &s->mem;
  x->d.e = &x->e;
  x->d.tmp.mem = &s->mem;
  x->d.segs = x->d.seg_buf;
  x->d.segs_cap = sizeof x->d.seg_buf / sizeof *x->d.seg_buf;
  *px = x;
  return 0;
}

void mcp_schema_yaml_encoder_free(mcp_schema_yaml_encoder *x) {
  if (!x)
    return;
  const mcp_mem *m = &x->e.s->mem;
  if (x->d.segs != x->d.seg_buf)
    sc_free(m, x->d.segs);
  sc_free(m, x->d.big);
  mcp_buf_free(&x->d.tmp);
  mcp_buf_free(&x->e.out);
  sc_free(m, x);
}

int mcp_schema_yaml_encoder_begin(mcp_schema_yaml_encoder *x, const char *type_name) {
  if (!x || !type_name)
    return MCP_ERR_INVALID_ARGUMENT;
  const sc_msg *m = sc_find_msg(x->e.s, type_name);
  if (!m)
    return MCP_ERR_NOT_FOUND;
  dx *d = &x->d;
  d->root = m;
  d->depth = d->nsegs = d->nodes = d->bytes = 0;
  d->docs = 1; /* within one: a document's start or end gives up */
  x->e.depth = 0;
  x->e.oom = 0;
  x->e.out.len = 0;
  x->state = 1;
  return 0;
}

int mcp_schema_yaml_encoder_event(mcp_schema_yaml_encoder *x, const mcp_schema_yaml_event *ev) {
  if (!x || !ev || !x->state)
    return MCP_ERR_INVALID_ARGUMENT;
  if (x->state == 1 && dx_event(&x->d, ev))
    x->state = 2;
  return x->state == 1 ? 0 : MCP_SCHEMA_YAML_UNSURE;
}

int mcp_schema_yaml_encoder_finish(mcp_schema_yaml_encoder *x, const uint8_t **out,
                                   size_t *outlen) {
  if (!x || !out || !outlen || !x->state)
    return MCP_ERR_INVALID_ARGUMENT;
  int done = x->state == 1 && !x->d.depth && !x->d.root && !x->e.oom;
  x->state = 0;
  if (!done)
    return MCP_SCHEMA_YAML_UNSURE;
  *out = x->e.out.p;
  *outlen = x->e.out.len;
  return 0;
}

/* The long way: a tree, then the tree encoder. */
static int long_way(const mcp_schema *s, const char *type_name, const char *text,
                    size_t len, const char *path, unsigned flags, uint8_t **out,
                    size_t *outlen, mcp_schema_error *err) {
  mcp_schema_parse_options o;
  mcp_schema_parse_options_default(&o);
  o.mem = &s->mem;
  mcp_schema_docs *docs;
  int rc = mcp_schema_parse_yaml(&o, text, len, &docs, err);
  if (rc)
    return rc;
  size_t n = mcp_schema_docs_count(docs);
  if (n > 1) {
    rc = sc_error(err, MCP_ERR_INVALID_ARGUMENT, 0, path,
                  "expected one YAML document, found %zu", n);
  } else if (n == 0) {
    mcp_schema_value null = {.kind = MCP_SCHEMA_NULL, .text = ""};
    rc = mcp_schema_encode(s, type_name, &null, path, flags, out, outlen, err);
  } else {
    rc = mcp_schema_encode(s, type_name, mcp_schema_docs_root(docs, 0), path, flags, out,
                           outlen, err);
  }
  mcp_schema_docs_free(docs);
  return rc;
}

int sc_encode_yaml(const mcp_schema *s, const char *type_name, const char *text, size_t len,
                   const char *path, unsigned flags, uint8_t **out, size_t *outlen,
                   mcp_schema_error *err, int mode) {
  if (!s || !type_name || !out || !outlen || (!text && len))
    return sc_error(err, MCP_ERR_INVALID_ARGUMENT, 0, path, "invalid argument");
  const sc_msg *m = sc_find_msg(s, type_name);
  if (m && mode != SC_ENCODE_TREE) {
    enc e;
    memset(&e, 0, sizeof e);
    e.s = s;
    e.flags = flags; /* e.err NULL: this way never reports */
    e.out.mem = &s->mem;
    /* The bytes are about half the YAML: one allocation, most often. */
    if (mcp_buf_reserve(&e.out, len / 2 + 64))
      return sc_error(err, MCP_ERR_NOMEM, 0, path, "out of memory");
    if (!direct(&e, m, text, len)) {
      if (e.out.len) {
        *out = e.out.p;
        *outlen = e.out.len;
      } else {
        mcp_buf_free(&e.out);
        *out = NULL;
        *outlen = 0;
      }
      return 0;
    }
    mcp_buf_free(&e.out);
  }
  if (mode == SC_ENCODE_DIRECT)
    return SC_YF_BAIL;
  return long_way(s, type_name, text, len, path, flags, out, outlen, err);
}

int mcp_schema_encode_yaml(const mcp_schema *s, const char *type_name, const char *text,
                           size_t len, const char *path, unsigned flags, uint8_t **out,
                           size_t *outlen, mcp_schema_error *err) {
  return sc_encode_yaml(s, type_name, text, len, path, flags, out, outlen, err,
                        SC_ENCODE_AUTO);
}
