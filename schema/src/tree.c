/*
 * Document trees: YAML (libyaml events, YAML 1.2 core-schema scalars, the
 * same rules as mcp-source's loader) and JSON (RFC 8259, own parser: it
 * keeps lines, which jansson's values do not).
 */
#include <stdlib.h>
#include <string.h>


#include "schema_int.h"

struct mcp_schema_docs {
  mcp_mem mem;
  sc_arena arena;
  const mcp_schema_value **roots;
  size_t n, cap;
};

/* A value and what it weighs, aliases expanded. */
typedef struct node {
  mcp_schema_value v; /* first: kids point here */
  size_t weight, bytes;
  unsigned height;
} node;

void mcp_schema_parse_options_default(mcp_schema_parse_options *o) {
  memset(o, 0, sizeof *o);
  o->max_depth = 64;
  o->max_nodes = 1000000;
  o->max_bytes = (size_t)64 << 20;
}

size_t mcp_schema_docs_count(const mcp_schema_docs *d) { return d ? d->n : 0; }

const mcp_schema_value *mcp_schema_docs_root(const mcp_schema_docs *d, size_t i) {
  return d && i < d->n ? d->roots[i] : NULL;
}

void mcp_schema_docs_free(mcp_schema_docs *d) {
  if (!d)
    return;
  sc_arena_free(&d->arena);
  sc_free(&d->mem, d->roots);
  mcp_mem mem = d->mem;
  sc_free(&mem, d);
}

const mcp_schema_value *mcp_schema_value_get(const mcp_schema_value *map,
                                             const char *key) {
  const mcp_schema_value *r = NULL;
  if (!map || map->kind != MCP_SCHEMA_MAP)
    return NULL;
  for (size_t i = 0; i < map->n; i++) {
    const mcp_schema_value *k = map->kids[2 * i];
    if (k->text && !strcmp(k->text, key))
      r = map->kids[2 * i + 1];
  }
  return r;
}

static mcp_schema_docs *docs_new(const mcp_schema_parse_options *o) {
  mcp_mem mem;
  sc_mem_init(&mem, o->mem);
  mcp_schema_docs *d = sc_malloc(&mem, sizeof *d);
  if (!d)
    return NULL;
  memset(d, 0, sizeof *d);
  d->mem = mem;
  d->arena.mem = &d->mem;
  return d;
}

static int docs_add(mcp_schema_docs *d, const mcp_schema_value *root) {
  if (d->n == d->cap) {
    size_t c = d->cap ? d->cap * 2 : 4;
    const mcp_schema_value **r = sc_realloc(&d->mem, d->roots, c * sizeof *r);
    if (!r)
      return MCP_ERR_NOMEM;
    d->roots = r;
    d->cap = c;
  }
  d->roots[d->n++] = root;
  return 0;
}

/* Duplicate keys of a map node: sorts a copy of its key pointers. */
static int cmp_keyp(const void *a, const void *b) {
  const mcp_schema_value *x = *(const mcp_schema_value *const *)a,
                         *y = *(const mcp_schema_value *const *)b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = n ? memcmp(x->text, y->text, n) : 0;
  return c ? c : (x->len < y->len ? -1 : x->len > y->len);
}

/* Returns the duplicate key, NULL when none; *nomem on failure. */
static const mcp_schema_value *dup_key(const mcp_mem *mem, const mcp_schema_value *m,
                                       int *nomem) {
  *nomem = 0;
  if (m->n < 2)
    return NULL;
  if (m->n <= 8) {
    /* Small maps (most of them): compare every pair, no allocation. */
    for (size_t i = 1; i < m->n; i++)
      for (size_t j = 0; j < i; j++)
        if (!cmp_keyp(&m->kids[2 * j], &m->kids[2 * i]))
          return m->kids[2 * i]; /* the later one */
    return NULL;
  }
  const mcp_schema_value **k = sc_malloc(mem, m->n * sizeof *k);
  if (!k) {
    *nomem = 1;
    return NULL;
  }
  for (size_t i = 0; i < m->n; i++)
    k[i] = m->kids[2 * i];
  qsort(k, m->n, sizeof *k, cmp_keyp);
  const mcp_schema_value *d = NULL;
  for (size_t i = 1; i < m->n && !d; i++)
    if (!cmp_keyp(&k[i - 1], &k[i]))
      d = k[i]->line >= k[i - 1]->line ? k[i] : k[i - 1];
  sc_free(mem, k);
  return d;
}

/* ================================================================== */
/* YAML                                                                */
/* ================================================================== */

typedef struct frame {
  const mcp_schema_value **kids; /* malloc'd */
  size_t n, cap;
  node *self;
  char *anchor;
} frame;

typedef struct anchor {
  char *name;
  node *n;
} anchor;

typedef struct yb {
  const mcp_schema_parse_options *o;
  mcp_schema_docs *d;
  mcp_schema_error *err;
  frame *stack;
  size_t depth;
  anchor *anchors;
  size_t nanchors, anchors_cap;
  node *root;
  size_t nodes, bytes;
} yb;

static int dig(char c) { return c >= '0' && c <= '9'; }

static int yfail(yb *b, int code, unsigned long line, const char *what) {
  return sc_error(b->err, code, line, NULL, "%s", what);
}

static int budget(yb *b, unsigned long line, size_t nodes, size_t bytes) {
  if (nodes > b->o->max_nodes - b->nodes || bytes > b->o->max_bytes - b->bytes)
    return sc_error(b->err, MCP_ERR_LIMIT, line, NULL,
                    "the document is too large (more than %zu nodes or %zu "
                    "bytes, aliases expanded)",
                    b->o->max_nodes, b->o->max_bytes);
  b->nodes += nodes;
  b->bytes += bytes;
  return 0;
}

static node *new_node(yb *b, mcp_schema_kind kind, unsigned long line) {
  node *n = sc_arena_alloc(&b->d->arena, sizeof *n);
  if (n) {
    memset(n, 0, sizeof *n);
    n->v.kind = kind;
    n->v.line = line;
    n->weight = 1;
  }
  return n;
}

static uint64_t hash_str(const char *s) {
  uint64_t h = UINT64_C(0xcbf29ce484222325);
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= UINT64_C(0x100000001b3);
  }
  return h;
}

/* Anchors: open addressing on the name (a document may define many and
 * alias them often: a linear search would be quadratic). A redefined
 * anchor replaces the old one, as YAML says. */
static int put_anchor(yb *b, const char *name, node *n) {
  if (b->nanchors * 2 + 2 > b->anchors_cap) {
    if (b->nanchors >= 65536)
      return sc_error(b->err, MCP_ERR_LIMIT, n->v.line, NULL, "more than 65536 anchors");
    size_t c = b->anchors_cap ? b->anchors_cap * 2 : 64;
    anchor *a = sc_malloc(&b->d->mem, c * sizeof *a);
    if (!a)
      return MCP_ERR_NOMEM;
    memset(a, 0, c * sizeof *a);
    for (size_t i = 0; i < b->anchors_cap; i++) {
      if (!b->anchors[i].name)
        continue;
      size_t k = (size_t)hash_str(b->anchors[i].name) & (c - 1);
      while (a[k].name)
        k = (k + 1) & (c - 1);
      a[k] = b->anchors[i];
    }
    sc_free(&b->d->mem, b->anchors);
    b->anchors = a;
    b->anchors_cap = c;
  }
  size_t mask = b->anchors_cap - 1, k = (size_t)hash_str(name) & mask;
  while (b->anchors[k].name && strcmp(b->anchors[k].name, name))
    k = (k + 1) & mask;
  if (!b->anchors[k].name) {
    char *nm = sc_arena_strndup(&b->d->arena, name, strlen(name));
    if (!nm)
      return MCP_ERR_NOMEM;
    b->anchors[k].name = nm;
    b->nanchors++;
  }
  b->anchors[k].n = n;
  return 0;
}

static node *get_anchor(yb *b, const char *name) {
  if (!b->anchors_cap)
    return NULL;
  size_t mask = b->anchors_cap - 1, k = (size_t)hash_str(name) & mask;
  for (; b->anchors[k].name; k = (k + 1) & mask)
    if (!strcmp(b->anchors[k].name, name))
      return b->anchors[k].n;
  return NULL;
}

/* Appends a finished node to its parent, or makes it the root. */
static int attach(yb *b, node *n) {
  if (!b->depth) {
    b->root = n;
    return 0;
  }
  frame *f = &b->stack[b->depth - 1];
  if (f->n == f->cap) {
    size_t c = f->cap ? f->cap * 2 : 8;
    const mcp_schema_value **k = sc_realloc(&b->d->mem, f->kids, c * sizeof *k);
    if (!k)
      return MCP_ERR_NOMEM;
    f->kids = k;
    f->cap = c;
  }
  f->kids[f->n++] = &n->v;
  return 0;
}

/* A scalar event (libyaml's or the fast scanner's): |line| 0-based. */
static int y_scalar(yb *b, unsigned long line0, const char *value, size_t len,
                    const char *tag, const char *anchor, int plain) {
  unsigned long line = line0 + 1;
  int rc = budget(b, line, 1, len);
  if (rc)
    return rc;
  node *n = new_node(b, MCP_SCHEMA_STRING, line);
  char *t = n ? sc_arena_strndup(&b->d->arena, value, len) : NULL;
  if (!t)
    return MCP_ERR_NOMEM;
  n->v.text = t;
  n->v.len = len;
  n->bytes = len;
  const char *e = sc_yaml_resolve(t, tag, plain, &n->v.kind, &n->v.boolean, NULL);
  if (e)
    return sc_error(b->err, MCP_ERR_INVALID_ARGUMENT, line, NULL, "%s (%.100s)", e, tag);
  if (anchor && (rc = put_anchor(b, anchor, n)))
    return rc;
  return attach(b, n);
}

static int y_start(yb *b, unsigned long line0, mcp_schema_kind kind, const char *tag,
                   const char *an) {
  unsigned long line = line0 + 1;
  if (mcp_schema_yaml_collection_tag(tag, kind))
    return sc_error(b->err, MCP_ERR_INVALID_ARGUMENT, line, NULL,
                    "unsupported tag (%.100s)", tag);
  if (b->depth >= b->o->max_depth)
    return sc_error(b->err, MCP_ERR_LIMIT, line, NULL, "nested deeper than %u levels",
                    b->o->max_depth);
  int rc = budget(b, line, 1, 0);
  if (rc)
    return rc;
  node *n = new_node(b, kind, line);
  if (!n)
    return MCP_ERR_NOMEM;
  frame *f = &b->stack[b->depth++];
  f->n = 0;
  f->self = n;
  f->anchor = NULL;
  if (an && !(f->anchor = sc_arena_strndup(&b->d->arena, an, strlen(an))))
    return MCP_ERR_NOMEM;
  return 0;
}

static int y_end(yb *b) {
  frame *f = &b->stack[b->depth - 1];
  node *n = f->self;
  const mcp_schema_value **kids = NULL;
  if (f->n) {
    kids = sc_arena_alloc(&b->d->arena, f->n * sizeof *kids);
    if (!kids)
      return MCP_ERR_NOMEM;
    memcpy(kids, f->kids, f->n * sizeof *kids);
  }
  n->v.kids = kids;
  n->v.n = n->v.kind == MCP_SCHEMA_MAP ? f->n / 2 : f->n;
  n->height = 1;
  for (size_t i = 0; i < f->n; i++) {
    const node *k = (const node *)kids[i];
    n->weight += k->weight;
    n->bytes += k->bytes;
    if (k->height + 1 > n->height)
      n->height = k->height + 1;
  }
  if (n->v.kind == MCP_SCHEMA_MAP) {
    for (size_t i = 0; i < n->v.n; i++) {
      const mcp_schema_value *k = kids[2 * i];
      if (k->kind == MCP_SCHEMA_LIST || k->kind == MCP_SCHEMA_MAP)
        return yfail(b, MCP_ERR_INVALID_ARGUMENT, k->line, "a mapping key is not a scalar");
    }
    int nomem;
    const mcp_schema_value *dk = dup_key(&b->d->mem, &n->v, &nomem);
    if (nomem)
      return MCP_ERR_NOMEM;
    if (dk)
      return sc_error(b->err, MCP_ERR_INVALID_ARGUMENT, dk->line, NULL,
                      "duplicate key \"%.100s\"", dk->text);
  }
  b->depth--;
  int rc;
  if (f->anchor && (rc = put_anchor(b, f->anchor, n)))
    return rc;
  return attach(b, n);
}

static int y_alias(yb *b, unsigned long line0, const char *name) {
  unsigned long line = line0 + 1;
  node *n = get_anchor(b, name);
  if (!n)
    return sc_error(b->err, MCP_ERR_INVALID_ARGUMENT, line, NULL,
                    "alias *%.100s: no such anchor before it (or a recursive alias)",
                    name);
  if (b->depth + n->height > b->o->max_depth)
    return sc_error(b->err, MCP_ERR_LIMIT, line, NULL,
                    "alias *%.100s nests deeper than %u levels", name, b->o->max_depth);
  int rc = budget(b, line, n->weight, n->bytes);
  return rc ? rc : attach(b, n);
}

/* Starts a parse: a new docs object and an empty stack. */
static int yb_init(yb *b, const mcp_schema_parse_options *o, mcp_schema_error *err) {
  memset(b, 0, sizeof *b);
  b->o = o;
  b->err = err;
  if (!(b->d = docs_new(o)))
    return MCP_ERR_NOMEM;
  b->stack = sc_malloc(&b->d->mem, ((size_t)o->max_depth + 1) * sizeof *b->stack);
  if (!b->stack) {
    mcp_schema_docs_free(b->d);
    b->d = NULL;
    return MCP_ERR_NOMEM;
  }
  memset(b->stack, 0, ((size_t)o->max_depth + 1) * sizeof *b->stack);
  return 0;
}

/* Ends a parse: the docs are freed too unless |keep|. */
static void yb_done(yb *b, int keep) {
  for (size_t i = 0; i <= b->o->max_depth; i++)
    sc_free(&b->d->mem, b->stack[i].kids);
  sc_free(&b->d->mem, b->stack);
  sc_free(&b->d->mem, b->anchors);
  if (!keep)
    mcp_schema_docs_free(b->d);
}

static void y_doc_start(yb *b) {
  b->root = NULL;
  /* Anchors are per document. */
  if (b->anchors_cap)
    memset(b->anchors, 0, b->anchors_cap * sizeof *b->anchors);
  b->nanchors = 0;
}

static int y_doc_end(yb *b) { return b->root ? docs_add(b->d, &b->root->v) : 0; }

/* One event of the project's YAML reader (yaml_read.c). */
static int y_event(void *ctx, const mcp_schema_yaml_event *ev) {
  yb *b = ctx;
  switch (ev->type) {
  case MCP_SCHEMA_YAML_DOC_START:
    y_doc_start(b);
    return 0;
  case MCP_SCHEMA_YAML_DOC_END:
    return y_doc_end(b);
  case MCP_SCHEMA_YAML_SCALAR:
    return y_scalar(b, ev->line, ev->text, ev->len, ev->tag, ev->anchor,
                    ev->style == MCP_SCHEMA_YAML_PLAIN);
  case MCP_SCHEMA_YAML_SEQ_START:
    return y_start(b, ev->line, MCP_SCHEMA_LIST, ev->tag, ev->anchor);
  case MCP_SCHEMA_YAML_MAP_START:
    return y_start(b, ev->line, MCP_SCHEMA_MAP, ev->tag, ev->anchor);
  case MCP_SCHEMA_YAML_ALIAS:
    return y_alias(b, ev->line, ev->anchor);
  case MCP_SCHEMA_YAML_RESTART: {
    /* libyaml reads the input again: start over. */
    const mcp_schema_parse_options *o = b->o;
    mcp_schema_error *err = b->err;
    yb_done(b, 0);
    return yb_init(b, o, err);
  }
  default:
    return y_end(b);
  }
}

/* What both parsers check first: |*o| (the defaults, in |def|, for NULL),
 * |pdocs| and |text|. 0 or MCP_ERR_INVALID_ARGUMENT (in |err|). */
static int parse_args(const mcp_schema_parse_options **o, mcp_schema_parse_options *def,
                      mcp_schema_docs **pdocs, const char *text, size_t len,
                      mcp_schema_error *err) {
  if (!*o) {
    mcp_schema_parse_options_default(def);
    *o = def;
  }
  if (!pdocs || (!text && len))
    return sc_error(err, MCP_ERR_INVALID_ARGUMENT, 0, NULL, "invalid argument");
  return 0;
}

int sc_parse_yaml(const mcp_schema_parse_options *o, const char *text, size_t len,
                  mcp_schema_docs **pdocs, mcp_schema_error *err, int mode) {
  mcp_schema_parse_options def;
  int arc = parse_args(&o, &def, pdocs, text, len, err);
  if (arc)
    return arc;
  yb b;
  mcp_schema_error syn;
  int rc = yb_init(&b, o, err);
  if (!rc) {
    /* Most configuration files are read by the fast scanner alone. */
    rc = sc_yaml_read(&b.d->mem, text, len, o->max_depth, mode, 0, y_event, &b, &syn);
    if (rc == MCP_ERR_MALFORMED)
      rc = sc_error(err, MCP_ERR_INVALID_ARGUMENT, syn.line, NULL, "YAML: %s", syn.message);
  }
  if (rc) {
    if (rc == MCP_ERR_NOMEM)
      sc_error(err, rc, 0, NULL, "out of memory");
    if (b.d)
      yb_done(&b, 0);
    return rc;
  }
  yb_done(&b, 1);
  *pdocs = b.d;
  return 0;
}

int mcp_schema_parse_yaml(const mcp_schema_parse_options *o, const char *text, size_t len,
                          mcp_schema_docs **pdocs, mcp_schema_error *err) {
  return sc_parse_yaml(o, text, len, pdocs, err, SC_YAML_AUTO);
}

/* ================================================================== */
/* JSON                                                                */
/* ================================================================== */

typedef struct jp {
  const mcp_schema_parse_options *o;
  mcp_schema_docs *d;
  mcp_schema_error *err;
  const char *s, *end;
  unsigned long line;
  unsigned depth;
  size_t nodes, bytes;
  mcp_buf tmp;
  /* Kid lists under construction, one per level (malloc'd). */
  struct {
    const mcp_schema_value **k;
    size_t cap;
  } * lv;
} jp;

static int jfail(jp *p, const char *what) {
  return sc_error(p->err, MCP_ERR_INVALID_ARGUMENT, p->line, NULL, "JSON: %s", what);
}

static void ws(jp *p) {
  while (p->s < p->end) {
    char c = *p->s;
    if (c == '\n')
      p->line++;
    else if (c != ' ' && c != '\t' && c != '\r')
      return;
    p->s++;
  }
}

static int jbudget(jp *p, size_t bytes) {
  if (p->nodes >= p->o->max_nodes || bytes > p->o->max_bytes - p->bytes)
    return sc_error(p->err, MCP_ERR_LIMIT, p->line, NULL,
                    "the document is too large (more than %zu nodes or %zu bytes)",
                    p->o->max_nodes, p->o->max_bytes);
  p->nodes++;
  p->bytes += bytes;
  return 0;
}

static int hex4(const char *s, unsigned *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    int d = mcp_hex_value(s[i]);
    if (d < 0)
      return 0;
    *v = *v << 4 | (unsigned)d;
  }
  return 1;
}

static int put_utf8(mcp_buf *b, unsigned cp) {
  uint8_t u[4];
  size_t n;
  if (cp < 0x80) {
    u[0] = (uint8_t)cp;
    n = 1;
  } else if (cp < 0x800) {
    u[0] = (uint8_t)(0xC0 | cp >> 6);
    u[1] = (uint8_t)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    u[0] = (uint8_t)(0xE0 | cp >> 12);
    u[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    u[2] = (uint8_t)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    u[0] = (uint8_t)(0xF0 | cp >> 18);
    u[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    u[3] = (uint8_t)(0x80 | (cp & 0x3F));
    n = 4;
  }
  return mcp_buf_append(b, u, n);
}

/* A string at p->s (on the opening quote) into a new STRING node. */
static int jstring(jp *p, node **out) {
  unsigned long line = p->line;
  p->s++;
  p->tmp.len = 0;
  for (;;) {
    if (p->s >= p->end)
      return jfail(p, "unterminated string");
    unsigned char c = (unsigned char)*p->s;
    if (c == '"')
      break;
    if (c < 0x20)
      return jfail(p, "control character in a string");
    if (c != '\\') {
      /* Copy a run of plain bytes. */
      const char *r = p->s;
      while (r < p->end && *r != '"' && *r != '\\' && (unsigned char)*r >= 0x20)
        r++;
      if (mcp_buf_append(&p->tmp, p->s, (size_t)(r - p->s)))
        return MCP_ERR_NOMEM;
      p->s = r;
      continue;
    }
    if (p->end - p->s < 2)
      return jfail(p, "unterminated string");
    char e = p->s[1];
    p->s += 2;
    const char *simple = "\"\\/bfnrt", *val = "\"\\/\b\f\n\r\t";
    const char *hit = e ? strchr(simple, e) : NULL;
    if (hit) {
      if (sc_buf_putc(&p->tmp, (uint8_t)val[hit - simple]))
        return MCP_ERR_NOMEM;
      continue;
    }
    if (e != 'u')
      return jfail(p, "bad escape in a string");
    unsigned cp, lo;
    if (p->end - p->s < 4 || !hex4(p->s, &cp))
      return jfail(p, "bad \\u escape");
    p->s += 4;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
      return jfail(p, "unpaired surrogate in a string");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (p->end - p->s < 6 || p->s[0] != '\\' || p->s[1] != 'u' || !hex4(p->s + 2, &lo) ||
          lo < 0xDC00 || lo > 0xDFFF)
        return jfail(p, "unpaired surrogate in a string");
      p->s += 6;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (put_utf8(&p->tmp, cp))
      return MCP_ERR_NOMEM;
  }
  p->s++;
  if (p->tmp.len && !mcp_utf8_valid(p->tmp.p, p->tmp.len, 1))
    return jfail(p, "invalid UTF-8 in a string");
  int rc = jbudget(p, p->tmp.len);
  if (rc)
    return rc;
  node *n = sc_arena_alloc(&p->d->arena, sizeof *n);
  char *t = n ? sc_arena_strndup(&p->d->arena, (const char *)p->tmp.p, p->tmp.len) : NULL;
  if (!t)
    return MCP_ERR_NOMEM;
  memset(n, 0, sizeof *n);
  n->v.kind = MCP_SCHEMA_STRING;
  n->v.line = line;
  n->v.text = t;
  n->v.len = p->tmp.len;
  *out = n;
  return 0;
}

static int jvalue(jp *p, node **out);

static int kids_put(jp *p, size_t *n, node *k) {
  size_t lv = p->depth;
  if (*n == p->lv[lv].cap) {
    size_t c = p->lv[lv].cap ? p->lv[lv].cap * 2 : 8;
    const mcp_schema_value **a = sc_realloc(&p->d->mem, p->lv[lv].k, c * sizeof *a);
    if (!a)
      return MCP_ERR_NOMEM;
    p->lv[lv].k = a;
    p->lv[lv].cap = c;
  }
  p->lv[lv].k[(*n)++] = &k->v;
  return 0;
}

static int jcontainer(jp *p, node **out, int map) {
  unsigned long line = p->line;
  if (p->depth >= p->o->max_depth)
    return sc_error(p->err, MCP_ERR_LIMIT, line, NULL, "nested deeper than %u levels",
                    p->o->max_depth);
  int rc = jbudget(p, 0);
  if (rc)
    return rc;
  p->depth++;
  p->s++;
  size_t n = 0;
  ws(p);
  if (p->s < p->end && *p->s == (map ? '}' : ']')) {
    p->s++;
  } else {
    for (;;) {
      node *k;
      ws(p);
      if (map) {
        if (p->s >= p->end || *p->s != '"')
          return jfail(p, "expected a string key");
        if ((rc = jstring(p, &k)) || (rc = kids_put(p, &n, k)))
          return rc;
        ws(p);
        if (p->s >= p->end || *p->s != ':')
          return jfail(p, "expected ':'");
        p->s++;
      }
      if ((rc = jvalue(p, &k)) || (rc = kids_put(p, &n, k)))
        return rc;
      ws(p);
      if (p->s < p->end && *p->s == ',') {
        p->s++;
        continue;
      }
      if (p->s < p->end && *p->s == (map ? '}' : ']')) {
        p->s++;
        break;
      }
      return jfail(p, map ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }
  node *c = sc_arena_alloc(&p->d->arena, sizeof *c);
  const mcp_schema_value **kids = n ? sc_arena_alloc(&p->d->arena, n * sizeof *kids) : NULL;
  if (!c || (n && !kids))
    return MCP_ERR_NOMEM;
  if (n)
    memcpy(kids, p->lv[p->depth].k, n * sizeof *kids);
  memset(c, 0, sizeof *c);
  c->v.kind = map ? MCP_SCHEMA_MAP : MCP_SCHEMA_LIST;
  c->v.line = line;
  c->v.kids = kids;
  c->v.n = map ? n / 2 : n;
  p->depth--;
  if (map) {
    int nomem;
    const mcp_schema_value *dk = dup_key(&p->d->mem, &c->v, &nomem);
    if (nomem)
      return MCP_ERR_NOMEM;
    if (dk)
      return sc_error(p->err, MCP_ERR_INVALID_ARGUMENT, dk->line, NULL,
                      "JSON: duplicate key \"%.100s\"", dk->text);
  }
  *out = c;
  return 0;
}

static int jvalue(jp *p, node **out) {
  ws(p);
  if (p->s >= p->end)
    return jfail(p, "unexpected end of input");
  char c = *p->s;
  if (c == '{' || c == '[')
    return jcontainer(p, out, c == '{');
  if (c == '"')
    return jstring(p, out);
  unsigned long line = p->line;
  const char *st = p->s;
  mcp_schema_kind kind;
  int bval = 0;
  static const char *const lits[] = {"true", "false", "null"};
  size_t k = 0;
  for (; k < 3; k++) {
    size_t l = strlen(lits[k]);
    if ((size_t)(p->end - p->s) >= l && !memcmp(p->s, lits[k], l)) {
      p->s += l;
      break;
    }
  }
  if (k < 3) {
    kind = k == 2 ? MCP_SCHEMA_NULL : MCP_SCHEMA_BOOL;
    bval = k == 0;
  } else {
    /* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)? */
    const char *q = p->s;
    if (q < p->end && *q == '-')
      q++;
    if (q < p->end && *q == '0')
      q++;
    else if (q < p->end && *q >= '1' && *q <= '9')
      while (q < p->end && dig(*q))
        q++;
    else
      return jfail(p, "unexpected character");
    if (q < p->end && *q == '.') {
      q++;
      if (q >= p->end || !dig(*q))
        return jfail(p, "bad number");
      while (q < p->end && dig(*q))
        q++;
    }
    if (q < p->end && (*q == 'e' || *q == 'E')) {
      q++;
      if (q < p->end && (*q == '-' || *q == '+'))
        q++;
      if (q >= p->end || !dig(*q))
        return jfail(p, "bad number");
      while (q < p->end && dig(*q))
        q++;
    }
    p->s = q;
    kind = MCP_SCHEMA_NUMBER;
  }
  if (p->s < p->end && (dig(*p->s) || (*p->s >= 'a' && *p->s <= 'z')))
    return jfail(p, "unexpected character");
  int rc = jbudget(p, (size_t)(p->s - st));
  if (rc)
    return rc;
  node *n = sc_arena_alloc(&p->d->arena, sizeof *n);
  char *t = n ? sc_arena_strndup(&p->d->arena, st, (size_t)(p->s - st)) : NULL;
  if (!t)
    return MCP_ERR_NOMEM;
  memset(n, 0, sizeof *n);
  n->v.kind = kind;
  n->v.boolean = bval;
  n->v.line = line;
  n->v.text = t;
  n->v.len = (size_t)(p->s - st);
  *out = n;
  return 0;
}

int mcp_schema_parse_json(const mcp_schema_parse_options *o, const char *text, size_t len,
                          mcp_schema_docs **pdocs, mcp_schema_error *err) {
  mcp_schema_parse_options def;
  int arc = parse_args(&o, &def, pdocs, text, len, err);
  if (arc)
    return arc;
  jp p;
  memset(&p, 0, sizeof p);
  p.o = o;
  p.err = err;
  p.s = text ? text : "";
  p.end = p.s + len;
  p.line = 1;
  if (!(p.d = docs_new(o)))
    return sc_error(err, MCP_ERR_NOMEM, 0, NULL, "out of memory");
  p.tmp.mem = &p.d->mem;
  int rc = 0;
  p.lv = sc_malloc(&p.d->mem, ((size_t)o->max_depth + 1) * sizeof *p.lv);
  if (!p.lv) {
    rc = MCP_ERR_NOMEM;
  } else {
    memset(p.lv, 0, ((size_t)o->max_depth + 1) * sizeof *p.lv);
    node *root = NULL;
    /* A UTF-8 byte order mark is tolerated, as RFC 8259 allows. */
    if (len >= 3 && !memcmp(p.s, "\xEF\xBB\xBF", 3))
      p.s += 3;
    rc = jvalue(&p, &root);
    if (!rc) {
      ws(&p);
      if (p.s != p.end)
        rc = jfail(&p, "trailing characters after the value");
    }
    if (!rc)
      rc = docs_add(p.d, &root->v);
    for (size_t i = 0; i <= o->max_depth; i++)
      sc_free(&p.d->mem, p.lv[i].k);
    sc_free(&p.d->mem, p.lv);
  }
  mcp_buf_free(&p.tmp);
  if (rc) {
    if (rc == MCP_ERR_NOMEM)
      sc_error(err, rc, 0, NULL, "out of memory");
    mcp_schema_docs_free(p.d);
    return rc;
  }
  *pdocs = p.d;
  return 0;
}
