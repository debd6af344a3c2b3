/*
 * A fast YAML scanner for the common shape of configuration files: block
 * mappings and sequences, single-line plain and quoted scalars, single-line
 * flow collections, comments, "---" between documents, ASCII only.
 *
 * It produces the events libyaml would produce (same order, same lines, same
 * scalar text and style), at a tenth of libyaml's cost. It never decides
 * anything libyaml might decide differently: whatever it does not know for
 * sure (anchors, tags, block scalars, multi-line scalars, tabs, non-ASCII,
 * CR, "?" keys, directives, empty documents, anything that may be an error)
 * makes it stop with SC_YF_BAIL, and the caller parses the input again with
 * libyaml, which has the last word on every error and every rare construct.
 * tests/schema/test_schema_yaml_fast.c and fuzz_schema compare the two.
 */
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "schema_int.h"

typedef struct yf {
  const char *s, *p, *end;
  const char *bol; /* start of the line p is on */
  unsigned long line;
  unsigned depth, max_depth;
  sc_yf_emit_fn emit;
  void *ctx;
  mcp_buf tmp; /* double-quoted scalars with escapes */
  int rc;     /* what stopped the scan: SC_YF_BAIL or the callback's code */
  int bailed; /* the scanner, not the callback, stopped it */
  sc_yf_event ev; /* the one being given */
} yf;

/* libyaml refuses a simple key longer than this; stay well within it. */
#define YF_KEY_MAX 1000

static int bail(yf *y) {
  if (!y->rc) {
    y->rc = SC_YF_BAIL;
    y->bailed = 1;
  }
  return -1;
}

static int emit_at(yf *y, int type, unsigned long line, size_t offset, const char *text,
                   size_t len, int style) {
  sc_yf_event *ev = &y->ev; /* its tag and anchor stay NULL */
  ev->type = (mcp_schema_yaml_event_type)type;
  ev->line = line;
  ev->offset = offset;
  ev->text = text;
  ev->len = len;
  ev->style = (mcp_schema_yaml_style)style;
  int rc = y->emit(y->ctx, ev);
  if (rc) {
    y->rc = rc;
    return -1;
  }
  return 0;
}

static int emit(yf *y, int type, unsigned long line, const char *text, size_t len,
                int style) {
  return emit_at(y, type, line, 0, text, len, style);
}

static int at_eol(const yf *y) { return y->p >= y->end || *y->p == '\n'; }
static int blank_at(const yf *y, const char *q) { return q >= y->end || *q == ' ' || *q == '\n'; }

/* A block sequence entry ("- ", "-" at the end of the line) at y->p? */
static int dash_at(const yf *y) { return *y->p == '-' && blank_at(y, y->p + 1); }

/* Printable ASCII, the only bytes a scalar may hold here. */
static int plain_byte(unsigned char c) { return c >= 0x20 && c < 0x7f; }

/* The end of a comment at |q|; NULL (bail) on a byte libyaml may refuse
 * or read otherwise (tab, CR, control, non-ASCII). */
static const char *comment_end(yf *y, const char *q) {
  for (; q < y->end && *q != '\n'; q++)
    if (!plain_byte((unsigned char)*q)) {
      bail(y);
      return NULL;
    }
  return q;
}

/* After a node: spaces, an optional comment, the end of the line. */
static int end_line(yf *y) {
  const char *q = y->p;
  while (q < y->end && *q == ' ')
    q++;
  if (q < y->end && *q == '#') {
    if (q == y->p) /* "a#b": not a comment */
      return bail(y);
    if (!(q = comment_end(y, q)))
      return -1;
  }
  if (q < y->end && *q != '\n')
    return bail(y);
  if (q < y->end) {
    q++;
    y->line++;
  }
  y->bol = y->p = q; /* at the end of the input: peek() sees it */
  return 0;
}

enum { PK_EOF = -1, PK_DOC = -2 };

static int peek(yf *y);

/* peek() into |*col|; -1 when it bailed. */
static int next_line(yf *y, int *col) {
  *col = peek(y);
  return y->rc ? -1 : 0;
}

/* From a line start: skips blank and comment lines; returns the column of
 * the next content (y->p on it), PK_EOF, or PK_DOC on a "---" line (y->p
 * at its start). */
static int peek(yf *y) {
  for (;;) {
    const char *q = y->bol;
    y->p = q;
    if (q >= y->end)
      return PK_EOF;
    while (q < y->end && *q == ' ')
      q++;
    if (q >= y->end) {
      y->p = q;
      return PK_EOF;
    }
    if (*q == '\n' || *q == '#') {
      if (!(q = comment_end(y, q)))
        return -1;
      if (q < y->end)
        q++;
      y->line++;
      y->bol = q;
      continue;
    }
    if (q == y->bol && y->end - q >= 3 &&
        (!memcmp(q, "---", 3) || !memcmp(q, "...", 3))) {
      if (q[0] == '-' && (q + 3 == y->end || q[3] == '\n'))
        return PK_DOC;
      return bail(y); /* "--- x", "...", "---x": libyaml's business */
    }
    if (!plain_byte((unsigned char)*q) && *q != '\n')
      return bail(y); /* a tab, CR, BOM, control or non-ASCII byte */
    y->p = q;
    return (int)(q - y->bol);
  }
}

/* ---- scalars ------------------------------------------------------- */

typedef struct tok {
  const char *text;
  size_t len;
  int style; /* SC_YF_PLAIN, _SINGLE, _DOUBLE */
  unsigned long line;
} tok;

static int flow_ind(char c) { return c == ',' || c == '[' || c == ']' || c == '{' || c == '}'; }

/* Bytes plain() looks at: 1 in any context (controls and the newline,
 * non-ASCII, ':', '#'), 2 in flow context only (",[]{}"). */
static const unsigned char special[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 2, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 2, 0, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

/* The first byte at or after |q| (before the end) that plain() must look
 * at: special[b] & |stop| (1: block context, 3: flow), or the end.
 * Sixteen bytes at a time where SSE2 is (every x86-64): the same classes
 * as the table, in a few compares. */
static const char *plain_stop(const yf *y, const char *q, unsigned char stop) {
#if defined(__SSE2__)
  while (y->end - q >= 16) {
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)q);
    /* Signed, one more: below 0x21 is a control, DEL (0x80 then) or a
     * byte of 0x80 and up. */
    __m128i m = _mm_cmplt_epi8(_mm_add_epi8(x, _mm_set1_epi8(1)), _mm_set1_epi8(0x21));
    m = _mm_or_si128(m, _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8(':')),
                                     _mm_cmpeq_epi8(x, _mm_set1_epi8('#'))));
    if (stop & 2) {
      /* ",[]{}": '[' and ']' are '{' and '}' less 0x20. */
      __m128i b = _mm_or_si128(x, _mm_set1_epi8(0x20));
      m = _mm_or_si128(m, _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8(',')),
                                       _mm_or_si128(_mm_cmpeq_epi8(b, _mm_set1_epi8('{')),
                                                    _mm_cmpeq_epi8(b, _mm_set1_epi8('}')))));
    }
    unsigned bits = (unsigned)_mm_movemask_epi8(m);
    if (bits)
      return q + __builtin_ctz(bits);
    q += 16;
  }
#endif
  while (q < y->end && !(special[(unsigned char)*q] & stop))
    q++;
  return q;
}

/* A plain scalar at y->p. Block context: up to ": ", " #" or the end of
 * the line; flow: also up to ",[]{}". *colon is set when it stopped at a
 * ':' that makes it a key. */
static int plain(yf *y, int flow, tok *t, int *colon) {
  const char *s = y->p, *q = s;
  char c = *s;
  *colon = 0;
  /* The indicators a plain scalar cannot start with ("-" only before a
   * blank); the caller has seen the quotes. */
  static const uint64_t bad_lo = 1ull << '?' | 1ull << ':' | 1ull << ',' | 1ull << '#' |
                                 1ull << '&' | 1ull << '*' | 1ull << '!' | 1ull << '>' |
                                 1ull << '\'' | 1ull << '"' | 1ull << '%',
                        bad_hi = 1ull << ('[' - 64) | 1ull << (']' - 64) |
                                 1ull << ('{' - 64) | 1ull << ('}' - 64) |
                                 1ull << ('|' - 64) | 1ull << ('@' - 64) |
                                 1ull << ('`' - 64);
  unsigned char u = (unsigned char)c;
  if (c == '-' ? blank_at(y, s + 1)
               : u < 64 ? (int)(bad_lo >> u & 1) : u < 128 && (bad_hi >> (u - 64) & 1))
    return bail(y);
  const unsigned char stop = flow ? 3 : 1;
  for (;; q++) {
    if ((q = plain_stop(y, q, stop)) >= y->end)
      break;
    unsigned char b = (unsigned char)*q;
    if (b == '\n')
      break;
    if (!plain_byte(b))
      return bail(y);
    if (b == ':') {
      const char *n = q + 1;
      if (blank_at(y, n)) {
        *colon = 1;
        break;
      }
      if (flow && (flow_ind(*n) || *n == '?'))
        return bail(y); /* libyaml versions differ here */
    } else if (b == '#') {
      if (flow)
        return bail(y);
      if (q[-1] == ' ')
        break; /* a comment (q > s: '#' cannot start a plain scalar) */
    } else if (flow && flow_ind((char)b)) {
      break;
    }
  }
  const char *e = q;
  while (e > s && e[-1] == ' ')
    e--;
  t->text = s;
  t->len = (size_t)(e - s);
  t->style = SC_YF_PLAIN;
  t->line = y->line;
  y->p = *colon ? q : e; /* end_line() sees the spaces before a comment */
  return 0;
}

/* A quoted scalar on one line, y->p on its quote. */
static int quoted(yf *y, tok *t) {
  char qc = *y->p;
  const char *s = y->p + 1, *q = s;
  int esc = 0;
  t->line = y->line;
  t->style = qc == '\'' ? SC_YF_SINGLE : SC_YF_DOUBLE;
  /* First pass: where it ends, and whether it needs unescaping. */
  for (;; q++) {
    if (q >= y->end || !plain_byte((unsigned char)*q))
      return bail(y); /* end of line or input, tab, non-ASCII */
    if (*q == qc) {
      if (qc == '\'' && q + 1 < y->end && q[1] == '\'') {
        esc = 1;
        q++;
        continue;
      }
      break;
    }
    if (qc == '"' && *q == '\\') {
      esc = 1;
      q++;
      if (q >= y->end)
        return bail(y);
    }
  }
  y->p = q + 1;
  if (!esc) {
    t->text = s;
    t->len = (size_t)(q - s);
    return 0;
  }
  y->tmp.len = 0;
  if (mcp_buf_reserve(&y->tmp, (size_t)(q - s) + 1)) {
    y->rc = MCP_ERR_NOMEM;
    return -1;
  }
  uint8_t *o = y->tmp.p;
  for (const char *r = s; r < q; r++) {
    if (qc == '\'') {
      *o++ = (uint8_t)*r;
      r += *r == '\''; /* '' is ' */
      continue;
    }
    if (*r != '\\') {
      *o++ = (uint8_t)*r;
      continue;
    }
    char e = *++r;
    static const char from[] = "0abtnvfre\"\\ ", to[] = "\0\a\b\t\n\v\f\r\x1b\"\\ ";
    const char *hit = e ? memchr(from, e, sizeof from - 1) : NULL;
    if (hit) {
      *o++ = (uint8_t)to[hit - from];
    } else if (e == 'x' && q - r > 2 && mcp_hex_value(r[1]) >= 0 && mcp_hex_value(r[2]) >= 0 &&
               mcp_hex_value(r[1]) < 8) {
      *o++ = (uint8_t)(mcp_hex_value(r[1]) << 4 | mcp_hex_value(r[2]));
      r += 2;
    } else {
      return bail(y); /* \u, \N, \/, a line break, a bad escape */
    }
  }
  t->text = (const char *)y->tmp.p;
  t->len = (size_t)(o - y->tmp.p);
  return 0;
}

static int scalar_tok(yf *y, int flow, tok *t, int *colon) {
  if (*y->p == '\'' || *y->p == '"') {
    if (quoted(y, t))
      return -1;
    *colon = 0;
    const char *q = y->p;
    while (q < y->end && *q == ' ')
      q++;
    if (q < y->end && *q == ':' && blank_at(y, q + 1)) {
      *colon = 1;
      y->p = q;
    }
    return 0;
  }
  return plain(y, flow, t, colon);
}

static int emit_tok(yf *y, const tok *t) {
  return emit(y, SC_YF_SCALAR, t->line, t->text, t->len, t->style);
}

/* ---- flow collections (one line) ------------------------------------ */

static void spaces(yf *y) {
  while (y->p < y->end && *y->p == ' ')
    y->p++;
}

static int deeper(yf *y) {
  /* At the limit libyaml's caller reports it: let it. */
  if (++y->depth >= y->max_depth)
    return bail(y);
  return 0;
}

static int flow_node(yf *y);

static int flow_coll(yf *y) {
  char open = *y->p, close = open == '[' ? ']' : '}';
  if (deeper(y) || emit(y, open == '[' ? SC_YF_SEQ_START : SC_YF_MAP_START, y->line, NULL, 0, 0))
    return -1;
  y->p++;
  spaces(y);
  if (y->p < y->end && *y->p == close) {
    y->p++;
  } else {
    for (;;) {
      if (at_eol(y))
        return bail(y);
      if (open == '{') {
        tok k;
        int colon;
        if (scalar_tok(y, 1, &k, &colon))
          return -1;
        if (!colon || (k.style == SC_YF_PLAIN && !k.len) || k.len > YF_KEY_MAX)
          return bail(y);
        if (emit_tok(y, &k))
          return -1;
        y->p++; /* the ':' */
        spaces(y);
      }
      if (at_eol(y) || *y->p == ',' || *y->p == close)
        return bail(y); /* an empty value: leave it to libyaml */
      if (flow_node(y))
        return -1;
      spaces(y);
      if (y->p < y->end && *y->p == ',') {
        y->p++;
        spaces(y);
        if (y->p < y->end && *y->p == close)
          return bail(y); /* a trailing comma */
        continue;
      }
      if (y->p < y->end && *y->p == close) {
        y->p++;
        break;
      }
      return bail(y);
    }
  }
  y->depth--;
  return emit(y, open == '[' ? SC_YF_SEQ_END : SC_YF_MAP_END, y->line, NULL, 0, 0);
}

static int flow_node(yf *y) {
  if (*y->p == '[' || *y->p == '{')
    return flow_coll(y);
  tok t;
  int colon;
  if (scalar_tok(y, 1, &t, &colon))
    return -1;
  if (colon || (t.style == SC_YF_PLAIN && !t.len))
    return bail(y); /* a single-pair mapping, or nothing */
  return emit_tok(y, &t);
}

/* ---- block collections ---------------------------------------------- */

static int block_map(yf *y, int col, const tok *first);
static int block_seq(yf *y, int col, int indentless);

/* A value on the rest of the current line (a scalar or a flow
 * collection), then the end of the line. The next content must not be
 * indented beyond |col| (that would continue a plain scalar, or be an
 * error): libyaml decides those. */
static int inline_value(yf *y, int col) {
  if (*y->p == '[' || *y->p == '{') {
    if (flow_coll(y))
      return -1;
  } else {
    tok t;
    int colon;
    if (scalar_tok(y, 0, &t, &colon))
      return -1;
    if (colon || (t.style == SC_YF_PLAIN && !t.len))
      return bail(y);
    if (emit_tok(y, &t))
      return -1;
  }
  if (end_line(y))
    return -1;
  int next;
  if (next_line(y, &next))
    return -1;
  return next > col ? bail(y) : 0;
}

/* Is the content at y->p a mapping key ("k: ", "k:" at the end of the
 * line)? Scans it into |k| when it is. */
static int key_at(yf *y, tok *k, int *is_key) {
  const char *save = y->p;
  int colon = 0;
  *is_key = 0;
  if (*y->p == '[' || *y->p == '{' || dash_at(y))
    return 0;
  if (scalar_tok(y, 0, k, &colon))
    return -1;
  if (!colon) {
    y->p = save;
    return 0;
  }
  if ((k->style == SC_YF_PLAIN && !k->len) || (size_t)(y->p - save) > YF_KEY_MAX)
    return bail(y);
  *is_key = 1;
  y->p++; /* the ':' */
  return 0;
}

/* The key at y->p into |k|, where only a key may stand: anything else
 * is left to libyaml (bail()). 0, or -1. */
static int key_or_bail(yf *y, tok *k) {
  int is_key;
  if (key_at(y, k, &is_key))
    return -1;
  return is_key ? 0 : bail(y);
}

/* A node that starts a line at column |col|, under a parent at |pcol|. */
static int block_node(yf *y, int col, int pcol) {
  if (dash_at(y))
    return block_seq(y, col, 0);
  tok k;
  int is_key;
  if (key_at(y, &k, &is_key))
    return -1;
  if (is_key)
    return block_map(y, col, &k);
  return inline_value(y, pcol);
}

/* What follows "key:" or "-" on its line, the entry's indicator on line
 * |line|, in a collection at |col|. */
static int entry_value(yf *y, int col, unsigned long line, int in_map) {
  const char *q = y->p;
  while (q < y->end && *q == ' ')
    q++;
  if (q < y->end && *q != '\n' && *q != '#') {
    y->p = q;
    if (dash_at(y))
      return bail(y); /* "- - x", "k: - x" */
    if (!in_map) {
      /* "- k: v": a mapping whose column is that of k. */
      tok k;
      int is_key;
      const char *at = y->p;
      if (key_at(y, &k, &is_key))
        return -1;
      if (is_key)
        return block_map(y, (int)(at - y->bol), &k);
    }
    return inline_value(y, col);
  }
  if (end_line(y))
    return -1;
  int next;
  if (next_line(y, &next))
    return -1;
  if (next > col)
    return block_node(y, next, col);
  if (in_map && next == col && dash_at(y))
    return block_seq(y, col, 1);
  return emit(y, SC_YF_SCALAR, line, "", 0, SC_YF_PLAIN); /* null */
}

/* An entry's value, then whether its collection (at column |col|) goes
 * on: 1 when the next content line is at |col|, 0 when not, -1 on error.
 * entry_value() ends on that line (or the end). */
static int entry_next(yf *y, int col, unsigned long line, int in_map) {
  int next;
  if (entry_value(y, col, line, in_map) || next_line(y, &next))
    return -1;
  return next == col;
}

/* A block mapping at column |col|; |first|, when not NULL, is its first
 * key, already read (y->p after its ':'), so that no key is read twice. */
static int block_map(yf *y, int col, const tok *first) {
  if (deeper(y) || emit(y, SC_YF_MAP_START, y->line, NULL, 0, 0))
    return -1;
  for (;;) {
    tok k;
    if (first)
      k = *first;
    else if (key_or_bail(y, &k))
      return -1;
    first = NULL;
    if (emit_tok(y, &k))
      return -1;
    int more = entry_next(y, col, k.line, 1);
    if (more < 0)
      return -1;
    if (!more)
      break;
    if (dash_at(y))
      return bail(y);
  }
  y->depth--;
  return emit(y, SC_YF_MAP_END, y->line, NULL, 0, 0);
}

static int block_seq(yf *y, int col, int indentless) {
  if (deeper(y) || emit(y, SC_YF_SEQ_START, y->line, NULL, 0, 0))
    return -1;
  for (;;) {
    unsigned long line = y->line;
    y->p++; /* the '-' */
    int more = entry_next(y, col, line, 0);
    if (more < 0)
      return -1;
    if (!more)
      break;
    if (!dash_at(y)) {
      if (indentless)
        break; /* the mapping's next key */
      return bail(y);
    }
  }
  y->depth--;
  return emit(y, SC_YF_SEQ_END, y->line, NULL, 0, 0);
}

/* ---- documents ------------------------------------------------------ */

static int stream(yf *y) {
  int next;
  if (next_line(y, &next))
    return -1;
  if (next == PK_EOF)
    return 0;
  for (;;) {
    /* Where libyaml puts the document's start: its "---", else its first
     * content. */
    unsigned long line = y->line;
    size_t at = (size_t)(y->p - y->s);
    if (next == PK_DOC) {
      y->p += 3;
      if (end_line(y))
        return -1;
      if (next_line(y, &next))
        return -1;
    }
    if (next < 0) /* an empty document */
      return bail(y);
    if (emit_at(y, SC_YF_DOC_START, line, at, NULL, 0, 0))
      return -1;
    /* The root: a mapping or a sequence (a lone scalar is rare: libyaml). */
    if (dash_at(y)) {
      if (block_seq(y, next, 0))
        return -1;
    } else {
      tok k;
      if (key_or_bail(y, &k) || block_map(y, next, &k))
        return -1;
    }
    if (next_line(y, &next))
      return -1;
    if (next >= 0)
      return bail(y); /* content less indented than the root, but not at 0 */
    /* It ends where the next "---" starts, or at the end of the input. */
    if (emit_at(y, SC_YF_DOC_END, y->line, (size_t)(y->p - y->s), NULL, 0, 0))
      return -1;
    if (next == PK_EOF)
      return 0;
  }
}

int mcp_schema_yaml_scan(const mcp_mem *mem, const char *text, size_t len,
                         unsigned max_depth, mcp_schema_yaml_event_fn fn, void *ctx) {
  mcp_mem m;
  sc_mem_init(&m, mem);
  return sc_yaml_fast(&m, text, len, max_depth, fn, ctx, NULL);
}

int sc_yaml_fast(const mcp_mem *mem, const char *text, size_t len, unsigned max_depth,
                 sc_yf_emit_fn fn, void *ctx, int *bailed) {
  yf y;
  memset(&y, 0, sizeof y);
  y.s = y.p = y.bol = text ? text : "";
  y.end = y.p + len;
  y.line = 0;
  y.max_depth = max_depth;
  y.emit = fn;
  y.ctx = ctx;
  y.tmp.mem = mem;
  int rc = stream(&y);
  mcp_buf_free(&y.tmp);
  if (bailed)
    *bailed = rc && (!y.rc || y.bailed);
  return rc ? (y.rc ? y.rc : SC_YF_BAIL) : 0;
}
