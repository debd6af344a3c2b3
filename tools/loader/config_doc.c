/*
 * YAML bytes -> mcpcfg_doc. libyaml's event API is used, not its document
 * loader: the loader replaces "no tag" by !!str, which would make a plain
 * `true` indistinguishable from `!!str true`. The events build a small tree
 * in an arena (one per document, freed in one go); an alias points at the
 * node of its anchor, so aliases cost no memory, and an anchor is only
 * registered once its node is finished, so the tree can have no cycle.
 */
#include "loader/config_internal.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "google/protobuf/struct.pb-c.h"
#include "util/edit.h"
#include "util/grow.h"

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */
/* ------------------------------------------------------------------ */

/* A problem (|what| 0) to opts->report, or news to opts->note. */
static void deliver_now(const mcpcfg_options *opts, int what, const char *path,
                        unsigned long line, const char *msg) {
  if (what && opts->note)
    opts->note(what, path, line, msg, opts->user_data);
  else if (!what && opts->report)
    opts->report(path, line, msg, opts->user_data);
}

/* deliver_now() of a message to format (only when someone listens). */
static void deliver(const mcpcfg_options *opts, int what, const char *path,
                    unsigned long line, const char *fmt, va_list ap) {
  char msg[512];
  if (what ? !opts->note : !opts->report)
    return;
  vsnprintf(msg, sizeof msg, fmt, ap);
  deliver_now(opts, what, path, line, msg);
}

void mcpcfg_report(const mcpcfg_options *opts, const char *path,
                   unsigned long line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  deliver(opts, 0, path, line, fmt, ap);
  va_end(ap);
}

void mcpcfg_note(const mcpcfg_options *opts, int what, const char *path,
                 unsigned long line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  deliver(opts, what, path, line, fmt, ap);
  va_end(ap);
}

char *mcpcfg_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p)
    memcpy(p, s, n);
  return p;
}

uint64_t mcpcfg_fnv(uint64_t h, const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= UINT64_C(0x100000001b3);
  }
  return h;
}

void mcpcfg_doc_unref(mcpcfg_doc *doc) {
  if (doc && --doc->refs == 0) {
    free(doc->text);
    free(doc);
  }
}

void mcpcfg_docs_free(mcpcfg_doc **docs, size_t n) {
  for (size_t i = 0; i < n; i++)
    mcpcfg_doc_unref(docs[i]);
  free(docs);
}

/* ASCII only: the C library's version depends on the locale. */
static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* ------------------------------------------------------------------ */
/* Collections and times                                               */
/* ------------------------------------------------------------------ */

char *mcpcfg_plural(const char *kind) {
  /* The rule belongs to the protocol's collection naming: the core has it. */
  size_t n = mcp_kind_plural(kind, NULL, 0);
  char *p = malloc(n + 1);
  if (p)
    mcp_kind_plural(kind, p, n + 1);
  return p;
}

int mcpcfg_collection_for(const char *api_version, const char *kind,
                          char **pcollection) {
  /* The naming rule (with Istio's version aliases) is the core's, shared
   * with xDS's type URLs. */
  int n = mcp_collection_for_kind(api_version, kind, NULL, 0);
  if (n < 0)
    return MCPCFG_ERR_INVALID_ARGUMENT;
  char *c = malloc((size_t)n + 1);
  if (!c)
    return MCPCFG_ERR_NOMEM;
  mcp_collection_for_kind(api_version, kind, c, (size_t)n + 1);
  *pcollection = c;
  return 0;
}

/* Reads exactly |n| digits. */
static int digits(const char **s, int n, int *v) {
  *v = 0;
  for (int i = 0; i < n; i++, (*s)++) {
    if (!is_digit(**s))
      return 0;
    *v = *v * 10 + (**s - '0');
  }
  return 1;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t days_from_civil(int y, int m, int d) {
  y -= m <= 2;
  int era = (y >= 0 ? y : y - 399) / 400;
  int yoe = y - era * 400;
  int doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return (int64_t)era * 146097 + doe - 719468;
}

int mcpcfg_parse_time(const char *s, int64_t *seconds, int32_t *nanos) {
  static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int y, mo, d, h, mi, sec, ns = 0, off = 0;
  if (!digits(&s, 4, &y) || *s++ != '-' || !digits(&s, 2, &mo) ||
      *s++ != '-' || !digits(&s, 2, &d))
    return MCPCFG_ERR_INVALID_ARGUMENT;
  if (*s != 'T' && *s != 't' && *s != ' ')
    return MCPCFG_ERR_INVALID_ARGUMENT;
  s++;
  if (!digits(&s, 2, &h) || *s++ != ':' || !digits(&s, 2, &mi) ||
      *s++ != ':' || !digits(&s, 2, &sec))
    return MCPCFG_ERR_INVALID_ARGUMENT;
  if (*s == '.') {
    int n = 0;
    for (s++; is_digit(*s); s++, n++)
      if (n < 9)
        ns = ns * 10 + (*s - '0');
    if (n == 0)
      return MCPCFG_ERR_INVALID_ARGUMENT;
    for (; n < 9; n++)
      ns *= 10;
  }
  if (*s == 'Z' || *s == 'z') {
    s++;
  } else if (*s == '+' || *s == '-') {
    int sign = *s++ == '-' ? -1 : 1, oh, om;
    if (!digits(&s, 2, &oh) || *s++ != ':' || !digits(&s, 2, &om) ||
        oh > 23 || om > 59)
      return MCPCFG_ERR_INVALID_ARGUMENT;
    off = sign * (oh * 3600 + om * 60);
  } else {
    return MCPCFG_ERR_INVALID_ARGUMENT;
  }
  if (*s != '\0')
    return MCPCFG_ERR_INVALID_ARGUMENT;
  int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (y < 1 || mo < 1 || mo > 12 || d < 1 ||
      d > mdays[mo - 1] + (mo == 2 && leap) || h > 23 || mi > 59 || sec > 59)
    return MCPCFG_ERR_INVALID_ARGUMENT;
  *seconds = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off;
  *nanos = ns;
  return 0;
}

/* ------------------------------------------------------------------ */
/* Arena                                                               */
/* ------------------------------------------------------------------ */

typedef union align {
  void *p;
  double d;
  int64_t i;
} align;

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  align data[];
} chunk;

enum { CHUNK_SIZE = 16384 };

static void *arena_alloc(chunk **head, size_t n) {
  n = (n + sizeof(align) - 1) / sizeof(align) * sizeof(align);
  chunk *c = *head;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > CHUNK_SIZE ? n : CHUNK_SIZE;
    c = malloc(sizeof(chunk) + cap);
    if (!c)
      return NULL;
    c->used = 0;
    c->cap = cap;
    /* A big block goes behind the head, which keeps its free room. */
    if (n > CHUNK_SIZE && *head) {
      c->next = (*head)->next;
      (*head)->next = c;
    } else {
      c->next = *head;
      *head = c;
    }
  }
  void *p = (unsigned char *)c->data + c->used;
  c->used += n;
  return p;
}

static void arena_free(chunk **head) {
  while (*head) {
    chunk *next = (*head)->next;
    free(*head);
    *head = next;
  }
}

/* ------------------------------------------------------------------ */
/* Tree                                                                */
/* ------------------------------------------------------------------ */

enum { YSCALAR, YSEQ, YMAP };
typedef struct ynode {
  int kind, bval;
  mcp_schema_kind stype; /* scalars: the schema library's resolver says */
  unsigned height;      /* containers nested in it, itself included */
  unsigned long line;   /* 1-based */
  size_t weight, bytes; /* nodes and scalar bytes, aliases expanded */
  char *text;           /* scalar, NUL-terminated */
  size_t len;
  double num;
  struct ynode **kids; /* seq: items; map: key, value, key, value... */
  size_t nkids;
  Google__Protobuf__Value *pb; /* encoded once, however often aliased */
  mcp_schema_value *sv;        /* typed bodies: converted once, too */
  /* A spec encoded as it was read (on_spec()): a YMAP with no kids
   * standing for it, its wire bytes in the arena. */
  const uint8_t *wire;
  size_t wire_len;
  int direct;
} ynode;

typedef struct frame {
  ynode **kids; /* malloc'd, reused from document to document */
  size_t n, cap;
  int kind;
  unsigned long line;
  char *anchor; /* registered when the node is finished */
} frame;

typedef struct anchor_slot {
  const char *name;
  ynode *node;
} anchor_slot;

typedef struct builder {
  const mcpcfg_options *o;
  const char *path;
  chunk *arena;
  anchor_slot *anchors; /* open addressing, power-of-two capacity */
  size_t nanchors, anchors_cap;
  frame *stack; /* max_depth + 1 frames */
  size_t depth;
  ynode *root;
  size_t nodes, bytes;
  int failed;
  int stop; /* give up on the whole file */
  int kept; /* the file had documents before: they stay when it fails */
  unsigned long doc_line;
  /* keep_text: the file, and where the document's text starts and ends.
   * libyaml's marks count characters: |at_char| is the character that
   * starts at byte |at_byte|, a cursor that only moves forward. */
  const unsigned char *buf;
  size_t len, at_char, at_byte, text_start, text_end;
  mcpcfg_doc **docs;
  size_t ndocs, docs_cap, nbad;
  /* The problems of the document being made (make_doc()), reported all at
   * once: the first MCP_SCHEMA_ERRORS_SHOWN kept, |nprob| counts all. */
  mcp_schema_error prob[MCP_SCHEMA_ERRORS_SHOWN];
  size_t nprob;
  /* Typed specs straight from the events (issue 25): on the first reading
   * of a file each `spec` of a typed kind goes to |enc| as it is read, and
   * no tree is built for it. When the encoder gives up, the file is read
   * again the usual way (REDO); so reports and notes wait in |said| (b->o
   * is a copy of the options that holds them), to be given in order once
   * the file is read (and by the thread that asked: mcpcfg_parse_held()). */
  mcp_schema_yaml_encoder *enc;
  int direct;                /* the scanner's events: specs go to |enc| */
  int in_spec;               /* 1: the value of a typed spec is next; 2: in it */
  unsigned sdepth, sheight;  /* nesting within the spec, and its deepest */
  size_t snodes, sbytes;     /* the spec's share of the budget */
  unsigned long sline;
  mcpcfg_options held_o;
  mcpcfg_said *said;
} builder;



/* Reports a problem of the current document, which is then skipped.
 * Returns 0 so that callers can `return fail(...)`. */
static int fail(builder *b, unsigned long line, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fail(builder *b, unsigned long line, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  mcpcfg_report(b->o, b->path, line, "%s; document skipped", msg);
  b->failed = 1;
  b->nbad++;
  return 0;
}

/* Notes a problem of the current document; make_doc() goes on to find the
 * others, then skip_doc() reports them. */
static void problem(builder *b, unsigned long line, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void problem(builder *b, unsigned long line, const char *fmt, ...) {
  if (b->nprob < MCP_SCHEMA_ERRORS_SHOWN) {
    mcp_schema_error *e = &b->prob[b->nprob];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->line = line;
  }
  b->nprob++;
}

/* Reports the problems noted, in line order, the last one saying the
 * document is skipped; beyond MCP_SCHEMA_ERRORS_SHOWN, "... and N more".
 * One problem reads as fail()'s. Returns 0, as fail(). */
static int skip_doc(builder *b) {
  size_t shown = b->nprob < MCP_SCHEMA_ERRORS_SHOWN ? b->nprob : MCP_SCHEMA_ERRORS_SHOWN;
  for (size_t i = 1; i < shown; i++) /* insertion sort: stable, tiny */
    for (size_t j = i; j > 0 && b->prob[j - 1].line > b->prob[j].line; j--) {
      mcp_schema_error t = b->prob[j];
      b->prob[j] = b->prob[j - 1];
      b->prob[j - 1] = t;
    }
  for (size_t i = 0; i < shown; i++)
    mcpcfg_report(b->o, b->path, b->prob[i].line ? b->prob[i].line : b->doc_line,
                  "%s%s", b->prob[i].message,
                  i + 1 == b->nprob ? "; document skipped" : "");
  if (b->nprob > shown)
    mcpcfg_report(b->o, b->path, b->doc_line, "... and %zu more; document skipped",
                  b->nprob - shown);
  b->nprob = 0;
  b->failed = 1;
  b->nbad++;
  return 0;
}

/* What a file that fails to load leaves served, for its report. */
static const char *kept_note(const builder *b) {
  return b->kept ? " (what it loaded before stays)" : "";
}

static ynode *anchor_get(builder *b, const char *name) {
  if (!b->anchors_cap)
    return NULL;
  size_t mask = b->anchors_cap - 1;
  for (size_t i = mcpcfg_fnv(MCPCFG_FNV_BASIS, name, strlen(name)) & mask;
       b->anchors[i].name; i = (i + 1) & mask)
    if (strcmp(b->anchors[i].name, name) == 0)
      return b->anchors[i].node;
  return NULL;
}

/* |name| lives in the arena. A later anchor of the same name wins. */
static int anchor_put(builder *b, const char *name, ynode *node) {
  if (2 * (b->nanchors + 1) > b->anchors_cap) {
    size_t cap = b->anchors_cap ? 2 * b->anchors_cap : 16;
    anchor_slot *old = b->anchors, *s = calloc(cap, sizeof *s);
    size_t oldcap = b->anchors_cap;
    if (!s)
      return MCPCFG_ERR_NOMEM;
    b->anchors = s;
    b->anchors_cap = cap;
    b->nanchors = 0;
    for (size_t i = 0; i < oldcap; i++)
      if (old[i].name)
        anchor_put(b, old[i].name, old[i].node); /* cannot grow again */
    free(old);
  }
  size_t mask = b->anchors_cap - 1;
  size_t i = mcpcfg_fnv(MCPCFG_FNV_BASIS, name, strlen(name)) & mask;
  while (b->anchors[i].name && strcmp(b->anchors[i].name, name) != 0)
    i = (i + 1) & mask;
  if (!b->anchors[i].name)
    b->nanchors++;
  b->anchors[i].name = name;
  b->anchors[i].node = node;
  return 0;
}

static char *arena_strndup(builder *b, const void *s, size_t n) {
  char *p = arena_alloc(&b->arena, n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

/* Counts what a node adds to the document once aliases are expanded. */
static int over_budget(builder *b, unsigned long line, size_t nodes,
                       size_t bytes) {
  b->nodes += nodes;
  b->bytes += bytes;
  if (b->nodes > b->o->max_nodes)
    return !fail(b, line, "more than %zu nodes (aliases expanded)",
                 b->o->max_nodes);
  if (b->bytes > b->o->max_file_size)
    return !fail(b, line, "more than %zu bytes of scalars (aliases expanded)",
                 b->o->max_file_size);
  return 0;
}

static int add(builder *b, ynode *n) {
  if (b->depth == 0) {
    b->root = n;
    return 0;
  }
  frame *f = &b->stack[b->depth - 1];
  ynode **k = tool_grow(f->kids, f->n, &f->cap, sizeof *k, 16);
  if (!k)
    return MCPCFG_ERR_NOMEM;
  f->kids = k;
  f->kids[f->n++] = n;
  return 0;
}

/* ------------------------------------------------------------------ */
/* Events                                                              */
/* ------------------------------------------------------------------ */

static ynode *new_node(builder *b, int kind, unsigned long line) {
  ynode *n = arena_alloc(&b->arena, sizeof *n);
  if (n) {
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->line = line;
  }
  return n;
}

static int on_scalar(builder *b, const mcp_schema_yaml_event *ev) {
  unsigned long line = ev->line + 1;
  const char *tag = ev->tag;
  size_t len = ev->len;
  /* Keys, labels and protobuf-c strings are C strings. */
  if (memchr(ev->text, '\0', len))
    return fail(b, line, "NUL character in a scalar");
  if (over_budget(b, line, 1, len))
    return 0;
  ynode *n = new_node(b, YSCALAR, line);
  if (!n || !(n->text = arena_strndup(b, ev->text, len)))
    return MCPCFG_ERR_NOMEM;
  n->len = len;
  n->weight = 1;
  n->bytes = len;
  const char *err = mcp_schema_yaml_resolve(n->text, tag, ev->style == MCP_SCHEMA_YAML_PLAIN,
                                            &n->stype, &n->bval, &n->num);
  if (err)
    return fail(b, line, "%s (%.100s)", err, tag);
  if (ev->anchor) {
    const char *name = ev->anchor;
    char *a = arena_strndup(b, name, strlen(name));
    if (!a || anchor_put(b, a, n) < 0)
      return MCPCFG_ERR_NOMEM;
  }
  return add(b, n);
}

static int on_start(builder *b, const mcp_schema_yaml_event *ev, int kind) {
  unsigned long line = ev->line + 1;
  const char *tag = ev->tag, *anchor = ev->anchor;
  if (mcp_schema_yaml_collection_tag(tag, kind == YMAP ? MCP_SCHEMA_MAP : MCP_SCHEMA_LIST))
    return fail(b, line, "unsupported tag (%.100s)", tag);
  if (b->depth >= b->o->max_depth) {
    /* Stop reading: libyaml's time grows with the square of the nesting
     * (50000 levels take 10 s), so it must not go on through the rest. */
    mcpcfg_report(b->o, b->path, line, "nested deeper than %u levels; file not loaded%s",
                  b->o->max_depth, kept_note(b));
    b->stop = 1;
    return 0;
  }
  if (over_budget(b, line, 1, 0))
    return 0;
  frame *f = &b->stack[b->depth];
  f->n = 0;
  f->kind = kind;
  f->line = line;
  f->anchor = NULL;
  if (anchor && !(f->anchor = arena_strndup(b, anchor, strlen(anchor))))
    return MCPCFG_ERR_NOMEM;
  b->depth++;
  return 0;
}

static int cmp_key(const void *a, const void *b) {
  /* Elements are (key, value) pairs: compare the keys. */
  return strcmp((*(ynode *const *)a)->text, (*(ynode *const *)b)->text);
}

static int on_end(builder *b) {
  frame *f = &b->stack[b->depth - 1];
  ynode *n = new_node(b, f->kind, f->line);
  if (!n || (f->n && !(n->kids = arena_alloc(&b->arena, f->n * sizeof *n->kids))))
    return MCPCFG_ERR_NOMEM;
  if (f->n)
    memcpy(n->kids, f->kids, f->n * sizeof *n->kids);
  n->nkids = f->n;
  n->weight = 1;
  n->height = 1;
  for (size_t i = 0; i < n->nkids; i++) {
    n->weight += n->kids[i]->weight;
    n->bytes += n->kids[i]->bytes;
    if (n->kids[i]->height + 1 > n->height)
      n->height = n->kids[i]->height + 1;
  }
  if (n->kind == YMAP) {
    for (size_t i = 0; i < n->nkids; i += 2)
      if (n->kids[i]->kind != YSCALAR)
        return fail(b, n->kids[i]->line, "a mapping key is not a scalar");
    /* Sorted keys make the encoding canonical (key order is not content)
     * and duplicates adjacent. */
    if (n->nkids > 32) { /* qsort() wants a non-NULL base even for 0 */
      qsort(n->kids, n->nkids / 2, 2 * sizeof *n->kids, cmp_key);
    } else {
      /* Most maps are small: an insertion sort, stable as glibc's qsort()
       * (a merge sort), so the same duplicate is named. */
      for (size_t i = 2; i < n->nkids; i += 2) {
        ynode *k = n->kids[i], *v = n->kids[i + 1];
        size_t j = i;
        for (; j > 0 && strcmp(n->kids[j - 2]->text, k->text) > 0; j -= 2) {
          n->kids[j] = n->kids[j - 2];
          n->kids[j + 1] = n->kids[j - 1];
        }
        n->kids[j] = k;
        n->kids[j + 1] = v;
      }
    }
    for (size_t i = 2; i < n->nkids; i += 2)
      if (!strcmp(n->kids[i]->text, n->kids[i - 2]->text))
        return fail(b, n->kids[i]->line, "duplicate key '%.100s'",
                    n->kids[i]->text);
  }
  b->depth--;
  if (f->anchor && anchor_put(b, f->anchor, n) < 0)
    return MCPCFG_ERR_NOMEM;
  return add(b, n);
}

static int on_alias(builder *b, const mcp_schema_yaml_event *ev) {
  unsigned long line = ev->line + 1;
  const char *name = ev->anchor;
  ynode *n = anchor_get(b, name);
  if (!n)
    return fail(b, line,
                "alias *%.100s: no such anchor before it (or a recursive "
                "alias)",
                name);
  if (b->depth + n->height > b->o->max_depth)
    return fail(b, line, "alias *%.100s nests deeper than %u levels", name,
                b->o->max_depth);
  if (over_budget(b, line, n->weight, n->bytes))
    return 0;
  return add(b, n);
}

/* ------------------------------------------------------------------ */
/* Tree -> protobuf (google.protobuf.Struct)                           */
/* ------------------------------------------------------------------ */

static Google__Protobuf__Value *pb_value(builder *b, ynode *n);

static Google__Protobuf__Struct *pb_struct(builder *b, ynode *map) {
  size_t n = map ? map->nkids / 2 : 0;
  Google__Protobuf__Struct *s = arena_alloc(&b->arena, sizeof *s);
  if (!s)
    return NULL;
  google__protobuf__struct__init(s);
  if (n == 0)
    return s;
  Google__Protobuf__Struct__FieldsEntry *e =
      arena_alloc(&b->arena, n * sizeof *e);
  s->fields = arena_alloc(&b->arena, n * sizeof *s->fields);
  if (!e || !s->fields)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    google__protobuf__struct__fields_entry__init(&e[i]);
    e[i].key = map->kids[2 * i]->text;
    if (!(e[i].value = pb_value(b, map->kids[2 * i + 1])))
      return NULL;
    s->fields[i] = &e[i];
  }
  s->n_fields = n;
  return s;
}

static Google__Protobuf__Value *pb_value(builder *b, ynode *n) {
  if (n->pb)
    return n->pb;
  Google__Protobuf__Value *v = arena_alloc(&b->arena, sizeof *v);
  if (!v)
    return NULL;
  google__protobuf__value__init(v);
  if (n->kind == YMAP) {
    v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE;
    if (!(v->struct_value = pb_struct(b, n)))
      return NULL;
  } else if (n->kind == YSEQ) {
    Google__Protobuf__ListValue *l = arena_alloc(&b->arena, sizeof *l);
    if (!l)
      return NULL;
    google__protobuf__list_value__init(l);
    if (n->nkids &&
        !(l->values = arena_alloc(&b->arena, n->nkids * sizeof *l->values)))
      return NULL;
    for (size_t i = 0; i < n->nkids; i++)
      if (!(l->values[i] = pb_value(b, n->kids[i])))
        return NULL;
    l->n_values = n->nkids;
    v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE;
    v->list_value = l;
  } else if (n->stype == MCP_SCHEMA_NULL) {
    v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE;
    v->null_value = GOOGLE__PROTOBUF__NULL_VALUE__NULL_VALUE;
  } else if (n->stype == MCP_SCHEMA_BOOL) {
    v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE;
    v->bool_value = n->bval;
  } else if (n->stype == MCP_SCHEMA_NUMBER) {
    v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE;
    v->number_value = n->num;
  } else {
    v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
    v->string_value = n->text;
  }
  n->pb = v;
  return v;
}

/* ------------------------------------------------------------------ */
/* Tree -> mcp_schema_value (typed bodies, config_body.c)              */
/* ------------------------------------------------------------------ */

/* The same tree as libmcp-schema's nodes, in the arena; an aliased node is
 * converted once and shared, as the library allows. */
static const mcp_schema_value *sv_of(builder *b, ynode *n) {
  if (n->sv)
    return n->sv;
  mcp_schema_value *v = arena_alloc(&b->arena, sizeof *v);
  if (!v)
    return NULL;
  memset(v, 0, sizeof *v);
  v->line = n->line;
  v->text = n->text ? n->text : "";
  v->len = n->len;
  if (n->kind == YSCALAR) {
    v->kind = n->stype;
    v->boolean = n->bval;
  } else {
    const mcp_schema_value **kids = NULL;
    v->kind = n->kind == YMAP ? MCP_SCHEMA_MAP : MCP_SCHEMA_LIST;
    if (n->nkids && !(kids = arena_alloc(&b->arena, n->nkids * sizeof *kids)))
      return NULL;
    for (size_t i = 0; i < n->nkids; i++)
      if (!(kids[i] = sv_of(b, n->kids[i])))
        return NULL;
    v->kids = kids;
    v->n = n->kind == YMAP ? n->nkids / 2 : n->nkids;
  }
  n->sv = v;
  return v;
}

/* ------------------------------------------------------------------ */
/* Tree -> document                                                    */
/* ------------------------------------------------------------------ */

static ynode *field(const ynode *map, const char *key) {
  for (size_t i = 0; map && i < map->nkids; i += 2)
    if (!strcmp(map->kids[i]->text, key))
      return map->kids[i + 1];
  return NULL;
}

/* A scalar that is set: not null, not empty. */
static const char *text_of(const ynode *n) {
  return n && n->kind == YSCALAR && n->stype != MCP_SCHEMA_NULL && n->len ? n->text
                                                                 : NULL;
}

static int is_null_node(const ynode *n) {
  return !n || (n->kind == YSCALAR && n->stype == MCP_SCHEMA_NULL);
}

/* The keys of a document that are not part of its body. */
static int is_header_key(const char *k) {
  return !strcmp(k, "apiVersion") || !strcmp(k, "kind") ||
         !strcmp(k, "metadata");
}

/* Checks an optional map of strings (labels, annotations); a problem is
 * noted (problem()) and leaves |*out| NULL. */
static void string_map(builder *b, ynode *m, const char *what, ynode **out) {
  *out = NULL;
  if (is_null_node(m))
    return;
  if (m->kind != YMAP) {
    problem(b, m->line, "metadata.%s is not a mapping", what);
    return;
  }
  size_t before = b->nprob;
  for (size_t i = 1; i < m->nkids; i += 2)
    if (m->kids[i]->kind != YSCALAR)
      problem(b, m->kids[i]->line, "%s '%.100s' is not a scalar", what,
              m->kids[i - 1]->text);
  if (b->nprob == before)
    *out = m;
}

static uint64_t hash_len(uint64_t h, size_t n) {
  unsigned char len[8];
  for (int i = 0; i < 8; i++)
    len[i] = (unsigned char)((uint64_t)n >> (8 * i));
  return mcpcfg_fnv(h, len, 8);
}

static uint64_t hash_str(uint64_t h, const char *s, size_t n) {
  return mcpcfg_fnv(hash_len(h, n), s, n);
}

static uint64_t hash_kv(uint64_t h, const mcp_kv *kv, size_t n) {
  h = hash_len(h, n);
  for (size_t i = 0; i < n; i++) {
    h = hash_str(h, kv[i].key, strlen(kv[i].key));
    h = hash_str(h, kv[i].value, strlen(kv[i].value));
  }
  return h;
}

/* Copies the pairs of |m| to |kv|, their strings to |*sp|. */
static void copy_kv(const ynode *m, mcp_kv *kv, char **sp) {
  for (size_t i = 0; m && i < m->nkids / 2; i++) {
    const ynode *k = m->kids[2 * i], *v = m->kids[2 * i + 1];
    size_t vlen = v->stype == MCP_SCHEMA_NULL ? 0 : v->len;
    kv[i].key = memcpy(*sp, k->text, k->len + 1);
    *sp += k->len + 1;
    kv[i].value = memcpy(*sp, v->text, vlen);
    (*sp)[vlen] = '\0';
    *sp += vlen + 1;
  }
}

static size_t kv_bytes(const ynode *m) {
  size_t n = 0;
  for (size_t i = 0; m && i < m->nkids; i += 2)
    n += m->kids[i]->len + 1 +
         (m->kids[i + 1]->stype == MCP_SCHEMA_NULL ? 0 : m->kids[i + 1]->len) + 1;
  return n;
}

/* The group of an apiVersion: what comes before its '/' ("" for "v1"). */
static size_t group_len(const char *api_version) {
  const char *slash = strchr(api_version, '/');
  return slash ? (size_t)(slash - api_version) : 0;
}

/* A kind its built-in group does not have is most likely a typo that would
 * quietly make a new collection: warn, with the closest kind of the group. */
static void check_kind(builder *b, const char *api, const char *kind,
                       unsigned long line) {
  const mcpcfg_options *o = b->o;
  size_t gl = group_len(api), best_d = (size_t)-1;
  const char *best = NULL;
  int in_group = 0;
  if (!gl || !o->note)
    return;
  for (size_t i = 0; i < o->nbuiltin; i++) {
    const mcpcfg_kind_type *k = &o->builtin[i];
    if (group_len(k->api_version) != gl ||
        memcmp(k->api_version, api, gl) != 0)
      continue;
    if (!strcmp(k->kind, kind))
      return; /* known (perhaps under another version: not a typo) */
    in_group = 1;
    /* Case ignored: "Virtualservice" is VirtualService. */
    size_t d = tool_edit_distance(kind, strlen(kind), k->kind,
                                  strlen(k->kind), 1);
    if (d < best_d) {
      best_d = d;
      best = k->kind;
    }
  }
  if (!in_group)
    return;
  /* Close: a few edits, or a third of the name. */
  if (best && (best_d <= 2 || best_d * 3 <= strlen(kind)))
    mcpcfg_note(o, MCPCFG_NOTE_UNKNOWN_KIND, b->path, line,
                "no kind %.60s in %.100s; did you mean %s? served as an "
                "untyped collection",
                kind, api, best);
  else
    mcpcfg_note(o, MCPCFG_NOTE_UNKNOWN_KIND, b->path, line,
                "no kind %.60s in %.100s; served as an untyped collection",
                kind, api);
}

/* Builds the document of |root|; *out stays NULL when it is skipped
 * (empty, or reported). */
static int make_doc(builder *b, ynode *root, mcpcfg_doc **out) {
  unsigned long line = b->doc_line;
  *out = NULL;
  if (is_null_node(root))
    return 0; /* empty document */
  if (root->kind != YMAP)
    return fail(b, line, "the document is not a mapping");
  ynode *meta = field(root, "metadata");
  const char *api = text_of(field(root, "apiVersion"));
  const char *kind = text_of(field(root, "kind"));
  if (!api)
    return fail(b, line, "no apiVersion");
  if (!kind)
    return fail(b, line, "no kind");
  if (!meta || meta->kind != YMAP)
    return fail(b, line, "no metadata mapping");
  /* From here on, every problem of the document is noted and reported
   * together (skip_doc()): one edit fixes them all. */
  b->nprob = 0;
  const char *name = text_of(field(meta, "name"));
  if (!name)
    problem(b, line, "no metadata.name");
  ynode *nsn = field(meta, "namespace");
  if (nsn && nsn->kind != YSCALAR)
    problem(b, nsn->line, "metadata.namespace is not a scalar");
  const char *ns = text_of(nsn);
  ynode *rvn = field(meta, "resourceVersion");
  if (rvn && rvn->kind != YSCALAR)
    problem(b, rvn->line, "metadata.resourceVersion is not a scalar");
  const char *rv = text_of(rvn);

  ynode *labels, *annots;
  string_map(b, field(meta, "labels"), "labels", &labels);
  string_map(b, field(meta, "annotations"), "annotations", &annots);

  int64_t secs = 0;
  int32_t nanos = 0;
  ynode *ctn = field(meta, "creationTimestamp");
  int has_time = !is_null_node(ctn); /* kubectl writes `null` */
  if (has_time && (ctn->kind != YSCALAR ||
                   mcpcfg_parse_time(ctn->text, &secs, &nanos) < 0))
    problem(b, ctn->line, "bad metadata.creationTimestamp '%.60s'",
            ctn->kind == YSCALAR ? ctn->text : "(not a scalar)");

  /* Without spec, `data` (ConfigMaps, Secrets) is the body. */
  ynode *bodyn = field(root, "spec");
  const char *bodyname = "spec";
  if (!bodyn && field(root, "data")) {
    bodyn = field(root, "data");
    bodyname = "data";
  }
  if (!bodyn) {
    /* Neither: the top-level fields other than apiVersion, kind and
     * metadata are the body, as Kubernetes writes kinds without a spec
     * (Endpoints: `subsets`). Same line and budget as the root's. */
    size_t keep = 0;
    for (size_t i = 0; i < root->nkids; i += 2)
      if (!is_header_key(root->kids[i]->text))
        keep++;
    if (keep) {
      ynode *m = new_node(b, YMAP, root->line);
      if (!m || !(m->kids = arena_alloc(&b->arena,
                                        2 * keep * sizeof *m->kids)))
        return MCPCFG_ERR_NOMEM;
      for (size_t i = 0; i < root->nkids; i += 2)
        if (!is_header_key(root->kids[i]->text)) {
          m->kids[m->nkids++] = root->kids[i];
          m->kids[m->nkids++] = root->kids[i + 1];
        }
      m->height = root->height;
      m->weight = root->weight;
      m->bytes = root->bytes;
      bodyn = m;
      bodyname = ""; /* field paths start at the top */
    }
  }
  if (!is_null_node(bodyn) && bodyn->kind != YMAP) {
    problem(b, bodyn->line, "%s is not a mapping", bodyname);
    bodyn = NULL; /* nothing more to check in it */
  }

  char *coll = NULL;
  const char *ann = text_of(field(annots, MCPCFG_COLLECTION_ANNOTATION));
  if (ann) {
    if (!(coll = mcpcfg_strdup(ann)))
      return MCPCFG_ERR_NOMEM;
  } else {
    int r = mcpcfg_collection_for(api, kind, &coll);
    if (r == MCPCFG_ERR_NOMEM)
      return r;
    if (r < 0)
      problem(b, line, "bad apiVersion '%.60s' or kind '%.60s'", api, kind);
  }

  /* The body: a message of the kind's type (config_body.c), else a Struct. */
  const char *message = mcpcfg_body_message(b->o, api, kind);
  Google__Protobuf__Struct *body = NULL;
  uint8_t *typed = NULL;
  size_t body_len = 0, tlen = 0;
  const uint8_t *wire = NULL; /* typed, or the spec encoded as it was read */
  if (message && bodyn && bodyn->direct) {
    wire = bodyn->wire;
    body_len = bodyn->wire_len;
    tlen = mcp_schema_type_url(message, NULL, 0) + 1;
  } else if (message) {
    const mcp_schema_value *sv = NULL;
    if (!is_null_node(bodyn) && !(sv = sv_of(b, bodyn))) {
      free(coll);
      return MCPCFG_ERR_NOMEM;
    }
    /* The body's errors join the ones noted, in the room left. */
    size_t held = b->nprob < MCP_SCHEMA_ERRORS_SHOWN ? b->nprob : MCP_SCHEMA_ERRORS_SHOWN;
    size_t nerr = 0;
    int erv = mcpcfg_body_encode(b->o, message, sv, bodyname, &typed, &body_len,
                                 b->prob + held, MCP_SCHEMA_ERRORS_SHOWN - held,
                                 &nerr);
    if (erv == MCPCFG_ERR_NOMEM) {
      free(coll);
      return erv;
    }
    b->nprob += nerr;
    wire = typed;
    tlen = mcp_schema_type_url(message, NULL, 0) + 1;
  }
  if (b->nprob) {
    free(coll);
    if (typed)
      mcp_schema_free_bytes(b->o->schema, typed);
    return skip_doc(b);
  }
  if (!message) {
    body = pb_struct(b, is_null_node(bodyn) ? NULL : bodyn);
    if (!body) {
      free(coll);
      return MCPCFG_ERR_NOMEM;
    }
    body_len = google__protobuf__struct__get_packed_size(body);
  }
  size_t nl = labels ? labels->nkids / 2 : 0;
  size_t na = annots ? annots->nkids / 2 : 0;
  size_t clen = strlen(coll), nslen = ns ? strlen(ns) + 1 : 0;
  size_t nlen = nslen + strlen(name), vlen = rv ? strlen(rv) : 16;
  size_t size = sizeof(mcpcfg_doc) + (nl + na) * sizeof(mcp_kv) + body_len +
                clen + 1 + nlen + 1 + vlen + 1 + kv_bytes(labels) +
                kv_bytes(annots) + tlen;
  mcpcfg_doc *d = malloc(size);
  if (!d) {
    free(coll);
    if (typed)
      mcp_schema_free_bytes(b->o->schema, typed);
    return MCPCFG_ERR_NOMEM;
  }
  memset(d, 0, sizeof *d);
  d->refs = 1;
  d->line = line;
  mcp_resource *r = &d->res;
  mcp_kv *kv = (mcp_kv *)(d + 1);
  uint8_t *bp = (uint8_t *)(kv + nl + na);
  char *sp = (char *)(bp + body_len);
  r->body = bp;
  r->body_len = body_len;
  if (message) {
    if (body_len)
      memcpy(bp, wire, body_len);
    if (typed)
      mcp_schema_free_bytes(b->o->schema, typed);
    mcp_schema_type_url(message, sp, tlen);
    r->type_url = sp;
    sp += tlen;
  } else {
    google__protobuf__struct__pack(body, bp);
    r->type_url = MCPCFG_STRUCT_TYPE_URL;
  }
  d->collection = memcpy(sp, coll, clen + 1);
  sp += clen + 1;
  free(coll);
  r->name = sp;
  sp += snprintf(sp, nlen + 1, "%s%s%s", ns ? ns : "", ns ? "/" : "", name) +
        1;
  r->labels = kv;
  r->nlabels = nl;
  copy_kv(labels, kv, &sp);
  r->annotations = kv + nl;
  r->nannotations = na;
  copy_kv(annots, kv + nl, &sp);
  r->has_create_time = has_time;
  r->create_time_seconds = secs;
  r->create_time_nanos = nanos;
  if (rv) {
    r->version = memcpy(sp, rv, vlen + 1);
  } else {
    /* Everything the resource carries, each part length-prefixed. */
    uint64_t h = hash_str(MCPCFG_FNV_BASIS, d->collection, clen);
    unsigned char t[13];
    h = hash_str(h, r->name, nlen);
    h = hash_kv(h, r->labels, nl);
    h = hash_kv(h, r->annotations, na);
    for (int i = 0; i < 8; i++)
      t[i] = (unsigned char)((uint64_t)secs >> (8 * i));
    for (int i = 0; i < 4; i++)
      t[8 + i] = (unsigned char)((uint32_t)nanos >> (8 * i));
    t[12] = (unsigned char)has_time;
    h = hash_str(h, (const char *)t, sizeof t);
    h = hash_str(h, r->type_url, strlen(r->type_url));
    h = hash_str(h, (const char *)bp, body_len);
    snprintf(sp, 17, "%016llx", (unsigned long long)h);
    r->version = sp;
  }
  /* What the project's sink rejects (and the store refuses) is refused
   * here, one document at a time, with the sink's own check: served, it
   * would be NACKed, and every later push of the collection with it. */
  mcp_resource_limits lim;
  mcp_resource_limits_default(&lim);
  lim.name_rules = b->o->name_rules;
  char why[400];
  if (mcp_resource_check(r, &lim, why, sizeof why) != 0) {
    mcpcfg_doc_unref(d);
    return fail(b, line, "%s", why);
  }
  if (!message)
    check_kind(b, api, kind, field(root, "kind")->line);
  *out = d;
  return 0;
}

/* The byte offset of character |index| of the file (UTF-8). */
static size_t byte_at(builder *b, size_t index) {
  while (b->at_char < index && b->at_byte < b->len) {
    unsigned char c = b->buf[b->at_byte++];
    if (c >= 0xC0) /* skip the continuation bytes of a sequence */
      while (b->at_byte < b->len && (b->buf[b->at_byte] & 0xC0) == 0x80)
        b->at_byte++;
    b->at_char++;
  }
  return b->at_byte;
}

static int on_document_end(builder *b) {
  mcpcfg_doc *d = NULL;
  int rv = 0;
  if (!b->failed)
    rv = make_doc(b, b->root, &d);
  arena_free(&b->arena); /* the tree and its protobuf: done with them */
  if (rv < 0 || !d)
    return rv;
  if (b->o->keep_text && b->text_end > b->text_start) {
    d->text_len = b->text_end - b->text_start;
    if (!(d->text = malloc(d->text_len))) {
      mcpcfg_doc_unref(d);
      return MCPCFG_ERR_NOMEM;
    }
    memcpy(d->text, b->buf + b->text_start, d->text_len);
  }
  mcpcfg_doc **p = tool_grow(b->docs, b->ndocs, &b->docs_cap, sizeof *p, 8);
  if (!p) {
    mcpcfg_doc_unref(d);
    return MCPCFG_ERR_NOMEM;
  }
  b->docs = p;
  b->docs[b->ndocs++] = d;
  return 0;
}

/* on_event(): STOP: b->stop, the file is not loaded; REDO: the encoder
 * gave up on a spec (or the tree would have reported on it): read the
 * file again the usual way. */
enum { STOP = 1, REDO = 2 };

/* The value of "spec" when it is a typed kind's and the document so far
 * names the kind: the encoder gets it (0), or not (-1). */
static int spec_begins(builder *b) {
  const frame *f = &b->stack[0];
  const char *api = NULL, *kind = NULL;
  for (size_t i = 0; i + 1 < f->n; i += 2) {
    if (f->kids[i]->kind != YSCALAR)
      continue;
    const char *k = f->kids[i]->text;
    if (!strcmp(k, "apiVersion"))
      api = text_of(f->kids[i + 1]);
    else if (!strcmp(k, "kind"))
      kind = text_of(f->kids[i + 1]);
  }
  const char *message = api && kind ? mcpcfg_body_message(b->o, api, kind) : NULL;
  return message && !mcp_schema_yaml_encoder_begin(b->enc, message) ? 0 : -1;
}

/* An event of a spec being encoded as it is read. What would make the
 * tree builder report (a NUL, the budget, the depth, an alias) is REDO:
 * the second reading reports it. */
static int on_spec(builder *b, const mcp_schema_yaml_event *ev) {
  size_t len = 0;
  switch (ev->type) {
  case MCP_SCHEMA_YAML_SCALAR:
    /* A NUL comes only from a double-quoted "\0" (YAML refuses the byte). */
    if (ev->style == MCP_SCHEMA_YAML_DOUBLE_QUOTED && memchr(ev->text, '\0', ev->len))
      return REDO;
    len = ev->len;
    break;
  case MCP_SCHEMA_YAML_SEQ_START:
  case MCP_SCHEMA_YAML_MAP_START:
    /* The scanner leaves such nesting to libyaml (and then nothing is
     * direct); the rule is kept here so as not to depend on that. */
    if (b->depth + b->sdepth >= b->o->max_depth)
      return REDO;
    if (++b->sdepth > b->sheight)
      b->sheight = b->sdepth;
    break;
  case MCP_SCHEMA_YAML_SEQ_END:
  case MCP_SCHEMA_YAML_MAP_END:
    b->sdepth--;
    break;
  default:
    return REDO;
  }
  if (ev->type == MCP_SCHEMA_YAML_SCALAR || ev->type == MCP_SCHEMA_YAML_SEQ_START ||
      ev->type == MCP_SCHEMA_YAML_MAP_START) {
    if (b->nodes + 1 > b->o->max_nodes || b->bytes + len > b->o->max_file_size)
      return REDO;
    b->nodes++;
    b->bytes += len;
    b->snodes++;
    b->sbytes += len;
  }
  if (mcp_schema_yaml_encoder_event(b->enc, ev))
    return REDO;
  if (b->sdepth)
    return 0;
  /* The spec's end: a node standing for it, its bytes in the arena. */
  const uint8_t *wire;
  size_t n;
  if (mcp_schema_yaml_encoder_finish(b->enc, &wire, &n))
    return REDO;
  b->in_spec = 0;
  ynode *node = new_node(b, YMAP, b->sline);
  uint8_t *copy = node && n ? arena_alloc(&b->arena, n) : NULL;
  if (!node || (n && !copy))
    return MCPCFG_ERR_NOMEM;
  if (n)
    memcpy(copy, wire, n);
  node->direct = 1;
  node->wire = copy;
  node->wire_len = n;
  node->weight = b->snodes;
  node->bytes = b->sbytes;
  node->height = b->sheight;
  return add(b, node);
}

/* Forgets everything read so far (RESTART: libyaml reads the file again). */
static void forget(builder *b) {
  for (size_t i = 0; i < b->ndocs; i++)
    mcpcfg_doc_unref(b->docs[i]);
  b->ndocs = 0;
  b->nbad = 0;
  mcpcfg_said_free(b->said);
  b->direct = 0; /* libyaml's events: the usual way */
  b->in_spec = 0;
}

/* One event of the schema library's YAML reader. */
static int on_event(void *ctx, const mcp_schema_yaml_event *ev) {
  builder *b = ctx;
  int rv = 0;
  switch (ev->type) {
  case MCP_SCHEMA_YAML_DOC_START:
    b->in_spec = 0;
    arena_free(&b->arena);
    if (b->anchors_cap)
      memset(b->anchors, 0, b->anchors_cap * sizeof *b->anchors);
    b->nanchors = 0;
    b->depth = 0;
    b->root = NULL;
    b->nodes = b->bytes = 0;
    b->failed = 0;
    b->doc_line = ev->line + 1;
    if (b->o->keep_text)
      b->text_start = byte_at(b, ev->offset);
    return 0;
  case MCP_SCHEMA_YAML_DOC_END:
    if (b->o->keep_text)
      b->text_end = byte_at(b, ev->offset);
    return on_document_end(b);
  default:
    break;
  }
  if (ev->type == MCP_SCHEMA_YAML_RESTART) {
    forget(b);
    return 0;
  }
  if (b->failed) /* skip the rest of a bad document */
    return 0;
  if (b->in_spec == 2)
    return on_spec(b, ev);
  if (b->in_spec == 1) { /* the spec's value: a mapping goes to the encoder */
    b->in_spec = 0;
    if (ev->type == MCP_SCHEMA_YAML_MAP_START && !ev->tag && !ev->anchor) {
      b->in_spec = 2;
      b->sline = ev->line + 1;
      b->sdepth = b->sheight = 0;
      b->snodes = b->sbytes = 0;
      return on_spec(b, ev);
    }
  }
  switch (ev->type) {
  case MCP_SCHEMA_YAML_SCALAR:
    rv = on_scalar(b, ev);
    /* A key "spec" of the document's mapping. */
    if (!rv && b->direct && !b->failed && b->depth == 1 && b->stack[0].kind == YMAP &&
        b->stack[0].n % 2 == 1 && ev->len == 4 && !memcmp(ev->text, "spec", 4) &&
        !spec_begins(b))
      b->in_spec = 1;
    break;
  case MCP_SCHEMA_YAML_SEQ_START:
    rv = on_start(b, ev, YSEQ);
    break;
  case MCP_SCHEMA_YAML_MAP_START:
    rv = on_start(b, ev, YMAP);
    break;
  case MCP_SCHEMA_YAML_SEQ_END:
  case MCP_SCHEMA_YAML_MAP_END:
    rv = on_end(b);
    break;
  case MCP_SCHEMA_YAML_ALIAS:
    rv = on_alias(b, ev);
    break;
  default:
    break;
  }
  return rv == 0 && b->stop ? STOP : rv;
}

int mcpcfg_parse(const mcpcfg_options *opts, const char *path,
                 const unsigned char *buf, size_t len, mcpcfg_doc ***pdocs,
                 size_t *pndocs, size_t *pbad) {
  return mcpcfg_parse2(opts, path, buf, len, 1, pdocs, pndocs, pbad);
}

void mcpcfg_said_free(mcpcfg_said *said) {
  for (size_t i = 0; i < said->n; i++)
    free(said->v[i].msg);
  free(said->v);
  said->v = NULL;
  said->n = said->cap = 0;
  said->nomem = 0;
}

void mcpcfg_said_deliver(const mcpcfg_options *opts, const char *path,
                         const mcpcfg_said *said) {
  for (size_t i = 0; i < said->n; i++)
    deliver_now(opts, said->v[i].what, path, said->v[i].line, said->v[i].msg);
}

/* Holds a report or a note (builder.said); out of memory, the reading
 * fails with MCPCFG_ERR_NOMEM (said->nomem). */
static void hold(builder *b, int what, unsigned long line, const char *msg) {
  mcpcfg_said *said = b->said;
  mcpcfg_said_item *v = tool_grow(said->v, said->n, &said->cap, sizeof *v, 8);
  char *m = v ? mcpcfg_strdup(msg) : NULL;
  if (v)
    said->v = v;
  if (!m) {
    said->nomem = 1;
    return;
  }
  said->v[said->n++] = (mcpcfg_said_item){what, line, m};
}

static void hold_report(const char *path, unsigned long line, const char *msg, void *ud) {
  (void)path;
  hold(ud, 0, line, msg);
}

static void hold_note(int what, const char *path, unsigned long line, const char *msg,
                      void *ud) {
  (void)path;
  hold(ud, what, line, msg);
}

/* One reading of the file into |said|; |direct|: the first, specs encoded
 * as they are read (REDO when the encoder gives up: nothing returned). */
static int parse_once(const mcpcfg_options *opts, const char *path, const unsigned char *buf,
                      size_t len, int kept, int direct, mcpcfg_doc ***pdocs, size_t *pndocs,
                      size_t *pbad, mcpcfg_said *said) {
  builder b;
  int rv = 0;
  memset(&b, 0, sizeof b);
  b.path = path;
  b.kept = kept;
  b.buf = buf;
  /* UTF-16 (a byte order mark): character and byte offsets differ in ways
   * the cursor does not follow: no text kept. */
  b.len = len >= 2 && ((buf[0] == 0xFE && buf[1] == 0xFF) ||
                       (buf[0] == 0xFF && buf[1] == 0xFE))
              ? 0
              : len;
  b.said = said;
  b.held_o = *opts;
  b.held_o.report = hold_report;
  b.held_o.note = hold_note;
  b.held_o.user_data = &b;
  b.o = &b.held_o;
  if (direct) {
    if (mcp_schema_yaml_encoder_new(opts->schema, &b.enc))
      return MCPCFG_ERR_NOMEM;
    b.direct = 1;
  }
  if (!(b.stack = calloc((size_t)opts->max_depth + 1, sizeof *b.stack))) {
    mcp_schema_yaml_encoder_free(b.enc);
    return MCPCFG_ERR_NOMEM;
  }
  /* The schema library reads the YAML (the fast scanner, or libyaml for
   * what it is unsure of). The first reading takes the scanner's events as
   * they come (after a RESTART, libyaml's events start again and what was
   * said is forgotten); the second prescans, so that the events come from
   * one reader only (issue 25). */
  mcp_schema_error err;
  rv = mcp_schema_yaml_read(NULL, (const char *)buf, len, opts->max_depth,
                            direct ? 0 : MCP_SCHEMA_YAML_PRESCAN, on_event, &b, &err);
  if (rv == MCP_ERR_MALFORMED) {
    mcpcfg_report(b.o, path, err.line, "YAML error: %s; file not loaded%s", err.message,
                  kept_note(&b));
    rv = 1;
  }
  if (rv == 0 && said->nomem)
    rv = MCPCFG_ERR_NOMEM;
  mcp_schema_yaml_encoder_free(b.enc);
  arena_free(&b.arena);
  free(b.anchors);
  for (size_t i = 0; i <= opts->max_depth; i++)
    free(b.stack[i].kids);
  free(b.stack);
  if (rv != 0) {
    mcpcfg_docs_free(b.docs, b.ndocs);
    return rv;
  }
  *pdocs = b.docs;
  *pndocs = b.ndocs;
  *pbad = b.nbad;
  return 0;
}

int mcpcfg_parse_held(const mcpcfg_options *opts, const char *path,
                      const unsigned char *buf, size_t len, int kept, mcpcfg_doc ***pdocs,
                      size_t *pndocs, size_t *pbad, mcpcfg_said *said) {
  int rv = REDO;
  memset(said, 0, sizeof *said);
  if (opts->schema && !opts->tree_only) /* typed: encoded as they are read */
    rv = parse_once(opts, path, buf, len, kept, 1, pdocs, pndocs, pbad, said);
  if (rv == REDO) {
    mcpcfg_said_free(said); /* the first reading's: the second says it */
    rv = parse_once(opts, path, buf, len, kept, 0, pdocs, pndocs, pbad, said);
  }
  return rv;
}

int mcpcfg_parse2(const mcpcfg_options *opts, const char *path,
                  const unsigned char *buf, size_t len, int kept,
                  mcpcfg_doc ***pdocs, size_t *pndocs, size_t *pbad) {
  mcpcfg_said said;
  int rv = mcpcfg_parse_held(opts, path, buf, len, kept, pdocs, pndocs, pbad, &said);
  mcpcfg_said_deliver(opts, path, &said);
  mcpcfg_said_free(&said);
  return rv;
}
