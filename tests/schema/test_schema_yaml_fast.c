/*
 * test_schema_yaml_fast: the fast YAML scanner (schema/src/yaml_fast.c)
 * reads what libyaml reads. Every input is parsed by both; where the fast
 * one does not bail, the two results must be identical: the same error
 * (code, line, message), or the same documents node for node (kind, text,
 * length, line). Inputs: the project's YAML files (examples/, the fuzz
 * corpora, tests/interop), hand-written edge cases, and single-byte
 * mutations of all of them (deterministic). Also proves the scanner is
 * used: the examples and a VirtualService as the benchmark writes it must
 * not bail.
 * The project's one YAML reader, mcp_schema_yaml_read() (yaml_read.c),
 * over the same inputs: its events are libyaml's whichever parser reads
 * (PRESCAN: no RESTART; without: RESTART, then libyaml's), a refused event
 * goes to libyaml, a stop stops, a syntax error names the right line; and
 * the one YAML 1.2 resolver, mcp_schema_yaml_resolve(), case by case.
 *
 * Usage: test_schema_yaml_fast SOURCE_ROOT
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "../../bench/bench_vs.h"
#include "check.h"
#include "schema_int.h"

static size_t g_same, g_bailed, g_errors;

/* An event stream as text, one event a line: what mcp-source's loader
 * reads of libyaml's events (type, line, document offsets, scalar text
 * and style). */
typedef struct trace {
  char *p;
  size_t len, cap;
} trace;

static void tput(trace *t, int type, unsigned long line, size_t off, const char *text,
                 size_t len, int style) {
  char head[96];
  if (type == MCP_SCHEMA_YAML_DOC_END || type == MCP_SCHEMA_YAML_SEQ_END ||
      type == MCP_SCHEMA_YAML_MAP_END)
    line = 0; /* not given for ends (mcp/schema.h) */
  int n = snprintf(head, sizeof head, "%d %lu %zu %d %zu:", type, line, off, style, len);
  size_t need = (size_t)n + len + 1;
  if (t->len + need > t->cap) {
    t->cap = (t->len + need) * 2;
    if (!(t->p = realloc(t->p, t->cap)))
      abort();
  }
  memcpy(t->p + t->len, head, (size_t)n);
  if (len)
    memcpy(t->p + t->len + (size_t)n, text, len);
  t->p[t->len + (size_t)n + len] = '\n';
  t->len += need;
}

static int fast_trace(void *ctx, const mcp_schema_yaml_event *ev) {
  tput(ctx, (int)ev->type, ev->line,
       ev->type == MCP_SCHEMA_YAML_DOC_START || ev->type == MCP_SCHEMA_YAML_DOC_END ? ev->offset
                                                                                    : 0,
       ev->text, ev->len, ev->type == MCP_SCHEMA_YAML_SCALAR ? (int)ev->style : 0);
  return 0;
}

/* mcp_schema_yaml_read()'s events in the same form (aliases and block
 * styles as libyaml_trace() writes them); RESTART counted apart. */
typedef struct rtrace {
  trace t;
  int restarts;
  size_t events, refuse_at; /* refuse_at: 1-based event to refuse, 0 none */
  int refuse_with;
} rtrace;

static int reader_trace(void *ctx, const mcp_schema_yaml_event *ev) {
  rtrace *r = ctx;
  if (ev->type == MCP_SCHEMA_YAML_RESTART) {
    r->restarts++;
    r->t.len = 0;
    return 0;
  }
  if (++r->events == r->refuse_at)
    return r->refuse_with;
  int type = ev->type == MCP_SCHEMA_YAML_ALIAS ? 99 : (int)ev->type;
  int style = ev->type != MCP_SCHEMA_YAML_SCALAR ? 0
              : ev->style > MCP_SCHEMA_YAML_DOUBLE_QUOTED ? 9
                                                         : (int)ev->style;
  tput(&r->t, type, ev->line,
       ev->type == MCP_SCHEMA_YAML_DOC_START || ev->type == MCP_SCHEMA_YAML_DOC_END ? ev->offset
                                                                                    : 0,
       ev->type == MCP_SCHEMA_YAML_SCALAR ? ev->text : NULL,
       ev->type == MCP_SCHEMA_YAML_SCALAR ? ev->len : 0, style);
  return 0;
}

/* libyaml's events in the same form; 0 when it failed. */
static int libyaml_trace(const char *text, size_t len, trace *t) {
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p))
    abort();
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  int ok = 1;
  for (int done = 0; !done;) {
    yaml_event_t e;
    if (!yaml_parser_parse(&p, &e)) {
      ok = 0;
      break;
    }
    static const int types[] = {
        [YAML_DOCUMENT_START_EVENT] = MCP_SCHEMA_YAML_DOC_START,
        [YAML_DOCUMENT_END_EVENT] = MCP_SCHEMA_YAML_DOC_END,
        [YAML_SCALAR_EVENT] = MCP_SCHEMA_YAML_SCALAR,
        [YAML_SEQUENCE_START_EVENT] = MCP_SCHEMA_YAML_SEQ_START,
        [YAML_SEQUENCE_END_EVENT] = MCP_SCHEMA_YAML_SEQ_END,
        [YAML_MAPPING_START_EVENT] = MCP_SCHEMA_YAML_MAP_START,
        [YAML_MAPPING_END_EVENT] = MCP_SCHEMA_YAML_MAP_END,
        [YAML_ALIAS_EVENT] = 99};
    done = e.type == YAML_STREAM_END_EVENT;
    if (e.type != YAML_STREAM_START_EVENT && !done) {
      int style = 0;
      if (e.type == YAML_SCALAR_EVENT)
        style = e.data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? MCP_SCHEMA_YAML_PLAIN
                : e.data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE
                    ? MCP_SCHEMA_YAML_SINGLE_QUOTED
                : e.data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE
                    ? MCP_SCHEMA_YAML_DOUBLE_QUOTED
                    : 9;
      size_t off = e.type == YAML_DOCUMENT_START_EVENT ? e.start_mark.index
                   : e.type == YAML_DOCUMENT_END_EVENT ? e.end_mark.index
                                                       : 0;
      tput(t, types[e.type], e.start_mark.line, off,
           e.type == YAML_SCALAR_EVENT ? (const char *)e.data.scalar.value : NULL,
           e.type == YAML_SCALAR_EVENT ? e.data.scalar.length : 0, style);
    }
    yaml_event_delete(&e);
  }
  yaml_parser_delete(&p);
  return ok;
}

/* The public scanner's events equal libyaml's wherever it reads the input. */
static void compare_events(const char *what, const char *text, size_t len) {
  trace f = {0}, l = {0};
  int rc = mcp_schema_yaml_scan(NULL, text, len, 16, fast_trace, &f);
  CHECK(rc == 0 || rc == MCP_SCHEMA_YAML_UNSURE, "%s: scan returned %d", what, rc);
  if (rc == 0) {
    int ok = libyaml_trace(text, len, &l);
    CHECK(ok, "%s: the fast scanner read what libyaml refuses\n%.*s", what, (int)len, text);
    CHECK(!ok || (f.len == l.len && (!f.len || !memcmp(f.p, l.p, f.len))),
          "%s: events differ\nfast:\n%.*s\nlibyaml:\n%.*s", what, (int)f.len, f.p,
          (int)l.len, l.p);
  }
  /* The reader gives libyaml's events whichever parser reads, with and
   * without the prescan; a syntax error is MCP_ERR_MALFORMED. */
  l.len = 0;
  int lok = libyaml_trace(text, len, &l);
  for (unsigned flags = 0; flags <= MCP_SCHEMA_YAML_PRESCAN; flags++) {
    rtrace r;
    memset(&r, 0, sizeof r);
    mcp_schema_error e;
    memset(&e, 0, sizeof e);
    int rr = mcp_schema_yaml_read(NULL, text, len, 16, flags, reader_trace, &r, &e);
    CHECK(rr == (lok ? 0 : MCP_ERR_MALFORMED), "%s: reader %d, libyaml %s", what, rr,
          lok ? "reads it" : "refuses it");
    CHECK(!rr || (e.code == MCP_ERR_MALFORMED && e.line >= 1 && e.message[0]),
          "%s: reader's error %d %lu '%s'", what, e.code, e.line, e.message);
    CHECK(!(flags & MCP_SCHEMA_YAML_PRESCAN) || !r.restarts, "%s: RESTART after a prescan",
          what);
    CHECK(r.restarts == (rc == 0 ? 0 : rc == MCP_SCHEMA_YAML_UNSURE && !flags),
          "%s: %d restarts, flags %u", what, r.restarts, flags);
    CHECK(!lok || (r.t.len == l.len && (!l.len || !memcmp(r.t.p, l.p, l.len))),
          "%s: reader's events differ\nreader:\n%.*s\nlibyaml:\n%.*s", what, (int)r.t.len,
          r.t.p, (int)l.len, l.p);
    free(r.t.p);
  }
  free(f.p);
  free(l.p);
}

/* Compares the two parsers on one input; returns 1 when the fast one read it. */
static int compare(const char *what, const char *text, size_t len) {
  mcp_schema_parse_options o;
  mcp_schema_parse_options_default(&o);
  o.max_nodes = 5000;
  o.max_depth = 16;
  mcp_schema_docs *slow = NULL, *fast = NULL;
  mcp_schema_error es, ef;
  memset(&es, 0, sizeof es);
  memset(&ef, 0, sizeof ef);
  int rs = sc_parse_yaml(&o, text, len, &slow, &es, SC_YAML_LIBYAML);
  int rf = sc_parse_yaml(&o, text, len, &fast, &ef, SC_YAML_FAST);
  int read = rf != SC_YF_BAIL;
  compare_events(what, text, len);
  if (!read) {
    g_bailed++;
  } else {
    CHECK(rs == rf, "%s: libyaml %d (%lu: %s), fast %d (%lu: %s)\n%.*s", what, rs, es.line,
          es.message, rf, ef.line, ef.message, (int)len, text);
    if (rs == rf && rs) {
      g_errors++;
      CHECK(es.line == ef.line && !strcmp(es.message, ef.message),
            "%s: libyaml %lu: %s, fast %lu: %s", what, es.line, es.message, ef.line,
            ef.message);
    }
    if (!rs && !rf) {
      g_same++;
      size_t n = mcp_schema_docs_count(slow);
      CHECK(n == mcp_schema_docs_count(fast), "%s: %zu documents, fast %zu", what, n,
            mcp_schema_docs_count(fast));
      for (size_t i = 0; i < n && i < mcp_schema_docs_count(fast); i++) {
        const mcp_schema_value *d =
            sc_value_differ(mcp_schema_docs_root(slow, i), mcp_schema_docs_root(fast, i));
        CHECK(!d, "%s: document %zu differs at line %lu (\"%s\")\n%.*s", what, i,
              d ? d->line : 0, d && d->text ? d->text : "", (int)len, text);
      }
    }
  }
  /* What the library's callers get: libyaml's answer either way. */
  mcp_schema_docs *autod = NULL;
  mcp_schema_error ea;
  int ra = sc_parse_yaml(&o, text, len, &autod, &ea, SC_YAML_AUTO);
  CHECK(ra == rs, "%s: auto %d, libyaml %d", what, ra, rs);
  if (!ra && !rs)
    for (size_t i = 0; i < mcp_schema_docs_count(slow); i++)
      CHECK(!sc_value_differ(mcp_schema_docs_root(slow, i), mcp_schema_docs_root(autod, i)),
            "%s: auto differs", what);
  mcp_schema_docs_free(slow);
  mcp_schema_docs_free(fast);
  mcp_schema_docs_free(autod);
  return read;
}

/* Single-byte mutations: replace, insert, delete, at positions picked by a
 * fixed generator. */
static void mutate(const char *what, const char *text, size_t len, unsigned count) {
  static const char bytes[] = " \n:-#'\"[]{},a0\t&!|>?.\\x";
  uint32_t r = 2463534242u ^ (uint32_t)len;
  char *buf = malloc(len + 2);
  if (!buf)
    abort();
  for (unsigned i = 0; i < count && len; i++) {
    r ^= r << 13, r ^= r >> 17, r ^= r << 5;
    size_t at = r % len;
    char c = bytes[(r >> 16) % (sizeof bytes - 1)];
    size_t n = len;
    switch ((r >> 8) % 3) {
    case 0:
      memcpy(buf, text, len);
      buf[at] = c;
      break;
    case 1:
      memcpy(buf, text, at);
      buf[at] = c;
      memcpy(buf + at + 1, text + at, len - at);
      n = len + 1;
      break;
    default:
      memcpy(buf, text, at);
      memcpy(buf + at, text + at + 1, len - at - 1);
      n = len - 1;
    }
    compare(what, buf, n);
  }
  free(buf);
}

/* Every byte at every position of a plain scalar longer than the
 * scanner's 16-byte step (its first byte too: the indicators), as a block
 * value and as a flow item: the scanner reads what libyaml reads, and
 * refuses (leaves to libyaml) every control but the newline, DEL and every
 * byte from 0x80, wherever it stands. */
static void plain_every_byte_everywhere(void) {
  char text[96];
  for (int flow = 0; flow < 2; flow++)
    for (unsigned b = 0; b < 256; b++)
      for (size_t at = 0; at < 40; at++) {
        const char *pre = flow ? "k: [x, " : "k: ", *post = flow ? ", y]\n" : "\n";
        size_t n = strlen(pre);
        memcpy(text, pre, n);
        memset(text + n, 'a', 41);
        text[n + at] = (char)b;
        n += 41;
        memcpy(text + n, post, strlen(post));
        n += strlen(post);
        char what[48];
        snprintf(what, sizeof what, "byte 0x%02x at %zu (%s)", b, at, flow ? "flow" : "block");
        int read = compare(what, text, n);
        if ((b < 0x20 && b != '\n') || b >= 0x7f)
          CHECK(!read, "%s: the fast scanner read it", what);
      }
}

/* The YAML files of |dir| (.yaml, .yml). |must_read|: the fast scanner must
 * read every one (hand-written configuration: the common case). */
static void files(const char *root, const char *dir, int must_read, unsigned mutations) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", root, dir);
  DIR *d = opendir(path);
  CHECK(d, "cannot open %s", path);
  if (!d)
    return;
  struct dirent *de;
  size_t seen = 0;
  while ((de = readdir(d))) {
    size_t l = strlen(de->d_name);
    if (!(l > 5 && !strcmp(de->d_name + l - 5, ".yaml")) &&
        !(l > 4 && !strcmp(de->d_name + l - 4, ".yml")))
      continue;
    snprintf(path, sizeof path, "%s/%s/%s", root, dir, de->d_name);
    size_t len;
    char *text = slurp(path, &len);
    CHECK(text, "cannot read %s", path);
    if (!text)
      continue;
    seen++;
    int read = compare(path, text, len);
    CHECK(read || !must_read, "%s: the fast scanner bailed", path);
    mutate(path, text, len, mutations);
    free(text);
  }
  closedir(d);
  CHECK(seen, "no YAML file in %s", dir);
}

/* Hand-written: each construct the scanner reads, and each it must leave
 * to libyaml (those must bail, or agree). */
static const char *const cases[] = {
    "a: 1\n",
    "a: 1",
    "a:\n",
    "a:\nb: 2\n",
    "a:\n- 1\n- 2\nb: x\n",
    "a:\n  - 1\n  -\n  - x: 1\n    y: [1, 2, {z: 3}]\n",
    "- a\n- b: c\n  d: e\n-\n  f: g\n- - x\n",
    "---\na: 1\n---\nb: 2\n",
    "a: 1\n---\n",
    "---\n",
    "# only a comment\n",
    "",
    "\n\n   \n",
    "a: 'it''s'\nb: \"q\\\"\\n\\t\\x41\"\nc: \"\\u00e9\"\n",
    "a: b # comment\nc: d#e\n# x\n",
    "a: b: c\n",
    "a: - b\n",
    "a: [1, 2,]\n",
    "a: [1,, 2]\n",
    "a: {b}\n",
    "a: {b: }\n",
    "a: {\"b\":1}\n",
    "a: [a:b, c]\n",
    "a: [http://x, y]\n",
    "a: x\n  continued\n",
    "a:\n    b: 1\n  c: 2\n",
    "  a: 1\nb: 2\n",
    "  a: 1\n  b: 2\n",
    "a: 1\n- b\n",
    "- a\nb: 1\n",
    "a: 1\na: 2\n",
    "a: &x 1\nb: *x\n",
    "a: !!str 1\n",
    "a: |\n  text\n",
    "a: >\n  text\n",
    "? a\n: b\n",
    "a:\tb\n",
    "a: b\r\n",
    "a: caf\xc3\xa9\n",
    "a: \"unterminated\n",
    "a: [1, 2\n",
    "a: true\nb: ~\nc: null\nd: 0x1F\ne: 1e3\nf: .inf\ng: -\n",
    "a: -1\nb: -x\nc: ---\n",
    "'': 1\n",
    ": 1\n",
    "a : 1\nb  :  2  \n",
    "a:b\n",
    "a: 'x' y\n",
    "a: 'x'#y\n",
    "a: [x]#y\n",
    "a: [x] #y\n",
    "--- a: 1\n",
    "...\n",
    "%YAML 1.2\n---\na: 1\n",
    "a:\n  b:\n    c:\n      d:\n        e:\n          f:\n            g:\n              h: 1\n",
    "a: [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]\n",
    "a: 1\n  # indented comment\nb: 2\n",
    "a:\n\n  b: 1\n\n\nc: 2\n",
    "- - 1\n",
    "-\n-\n",
    "a: \"\\/\"\n",
    "a: \"\\0x\"\n",
};

/* A refused event (negative) makes the reader start over with libyaml; a
 * positive value stops it and is returned; NOMEM stops it. */
static void reader_refusals(void) {
  static const char doc[] = "a: 1\nb: [x, y]\n";
  rtrace r;
  memset(&r, 0, sizeof r);
  r.refuse_at = 4;
  r.refuse_with = MCP_ERR_INVALID_ARGUMENT;
  int rc = mcp_schema_yaml_read(NULL, doc, sizeof doc - 1, 16, 0, reader_trace, &r, NULL);
  /* Event 4 is refused by the fast scanner's run, then libyaml's run
   * (events 5..) goes through. */
  CHECK(rc == 0 && r.restarts == 1, "refused: rc %d, %d restarts", rc, r.restarts);
  free(r.t.p);
  memset(&r, 0, sizeof r);
  r.refuse_at = 4;
  r.refuse_with = 7;
  rc = mcp_schema_yaml_read(NULL, doc, sizeof doc - 1, 16, 0, reader_trace, &r, NULL);
  CHECK(rc == 7 && r.restarts == 0 && r.events == 4, "stopped: rc %d, %d restarts, %zu events",
        rc, r.restarts, r.events);
  free(r.t.p);
  memset(&r, 0, sizeof r);
  r.refuse_at = 2;
  r.refuse_with = MCP_ERR_NOMEM;
  rc = mcp_schema_yaml_read(NULL, doc, sizeof doc - 1, 16, MCP_SCHEMA_YAML_PRESCAN, reader_trace,
                            &r, NULL);
  CHECK(rc == MCP_ERR_NOMEM && r.restarts == 0, "nomem: rc %d", rc);
  free(r.t.p);
  CHECK(mcp_schema_yaml_read(NULL, NULL, 3, 16, 0, reader_trace, &r, NULL) ==
            MCP_ERR_INVALID_ARGUMENT,
        "NULL text with a length");
}

static void *no_malloc(size_t n, void *u) {
  (void)n;
  (void)u;
  return NULL;
}
static void *no_realloc(void *p, size_t n, void *u) {
  (void)p;
  (void)n;
  (void)u;
  return NULL;
}
static void *no_calloc(size_t a, size_t n, void *u) {
  (void)a;
  (void)n;
  (void)u;
  return NULL;
}
static void just_free(void *p, void *u) {
  (void)u;
  free(p);
}

/* The fast scanner's buffer (an escape in a double-quoted scalar) fails to
 * grow: MCP_ERR_NOMEM, said in |err|. */
static void reader_nomem(void) {
  static const char doc[] = "a: \"x\\ny\"\n";
  mcp_mem m = {NULL, no_malloc, just_free, no_calloc, no_realloc};
  for (unsigned flags = 0; flags <= MCP_SCHEMA_YAML_PRESCAN; flags++) {
    rtrace r;
    memset(&r, 0, sizeof r);
    mcp_schema_error e;
    memset(&e, 0, sizeof e);
    int rc = mcp_schema_yaml_read(&m, doc, sizeof doc - 1, 16, flags, reader_trace, &r, &e);
    CHECK(rc == MCP_ERR_NOMEM && e.code == MCP_ERR_NOMEM, "flags %u: rc %d, err %d", flags, rc,
          e.code);
    free(r.t.p);
  }
}

/* Syntax errors: libyaml's words, the line where it noticed, or where the
 * construct began when that is the end of the input, or the line of a bad
 * byte (the loader's rule, now everyone's: mcp_schema_parse_yaml() named
 * the last line for an unclosed "{" before). */
static void reader_syntax_lines(void) {
  static const struct {
    const char *text;
    unsigned long line;
    const char *message;
  } cases[] = {
      {"a: 1\nb: {c: d\n", 2,
       "did not find expected ',' or '}' while parsing a flow mapping"},
      {"a: 1\nb: [1, 2\nc: 3\n", 3, "did not find expected ',' or ']' while parsing a flow sequence"},
      {"a: 1\nb: 2\n  c: 3\n", 3, "mapping values are not allowed in this context"},
      {"a: 1\nb: 2\nc: \xff\n", 3, "invalid leading UTF-8 octet"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    rtrace r;
    memset(&r, 0, sizeof r);
    mcp_schema_error e;
    memset(&e, 0, sizeof e);
    int rc = mcp_schema_yaml_read(NULL, cases[i].text, strlen(cases[i].text), 16,
                                  MCP_SCHEMA_YAML_PRESCAN, reader_trace, &r, &e);
    CHECK(rc == MCP_ERR_MALFORMED && e.line == cases[i].line &&
              !strcmp(e.message, cases[i].message),
          "syntax case %zu: rc %d, %lu: '%s'", i, rc, e.line, e.message);
    free(r.t.p);
    /* The schema's trees say the same, prefixed. */
    mcp_schema_docs *d = NULL;
    char want[MCP_SCHEMA_MESSAGE_MAX];
    snprintf(want, sizeof want, "YAML: %s", cases[i].message);
    rc = mcp_schema_parse_yaml(NULL, cases[i].text, strlen(cases[i].text), &d, &e);
    CHECK(rc == MCP_ERR_INVALID_ARGUMENT && !d && e.line == cases[i].line &&
              !strcmp(e.message, want),
          "parse_yaml case %zu: rc %d, %lu: '%s'", i, rc, e.line, e.message);
  }
}

/* The one YAML 1.2 core-schema resolver, case by case. */
static void resolver_cases(void) {
  static const struct {
    const char *text, *tag;
    int plain;
    mcp_schema_kind kind;
    int boolean;
    double num;
    const char *err;
  } cases[] = {
      {"", NULL, 1, MCP_SCHEMA_NULL, 0, 0, NULL},
      {"~", NULL, 1, MCP_SCHEMA_NULL, 0, 0, NULL},
      {"Null", NULL, 1, MCP_SCHEMA_NULL, 0, 0, NULL},
      {"null", NULL, 0, MCP_SCHEMA_STRING, 0, 0, NULL}, /* quoted */
      {"nULL", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"TRUE", NULL, 1, MCP_SCHEMA_BOOL, 1, 0, NULL},
      {"False", NULL, 1, MCP_SCHEMA_BOOL, 0, 0, NULL},
      {"yes", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL}, /* YAML 1.1 only */
      /* Three spellings each, no others. */
      {"NuLL", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"nulL", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"nul", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"nulls", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"~~", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"True", NULL, 1, MCP_SCHEMA_BOOL, 1, 0, NULL},
      {"tRUE", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"TRue", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"FALSE", NULL, 1, MCP_SCHEMA_BOOL, 0, 0, NULL},
      {"fals", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {".INF", NULL, 1, MCP_SCHEMA_NUMBER, 0, 1.0 / 0.0, NULL},
      {".iNF", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"+.inf", NULL, 1, MCP_SCHEMA_NUMBER, 0, 1.0 / 0.0, NULL},
      {".Nan", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL}, /* .NaN is the form */
      {"+.nan", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL}, /* no sign on .nan */
      {"inf", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"+12", NULL, 1, MCP_SCHEMA_NUMBER, 0, 12, NULL},
      {"0x1F", NULL, 1, MCP_SCHEMA_NUMBER, 0, 31, NULL},
      {"0o17", NULL, 1, MCP_SCHEMA_NUMBER, 0, 15, NULL},
      {"0o18", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"0x", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"0x100000000000000000000", NULL, 1, MCP_SCHEMA_NUMBER, 0, 1208925819614629174706176.0,
       NULL},
      {"1e3", NULL, 1, MCP_SCHEMA_NUMBER, 0, 1000, NULL},
      {"1e", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {".5", NULL, 1, MCP_SCHEMA_NUMBER, 0, 0.5, NULL},
      {"-.Inf", NULL, 1, MCP_SCHEMA_NUMBER, 0, -1.0 / 0.0, NULL},
      {"1.2.3", NULL, 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"1", "tag:yaml.org,2002:str", 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"1", "!", 1, MCP_SCHEMA_STRING, 0, 0, NULL},
      {"7", "tag:yaml.org,2002:int", 0, MCP_SCHEMA_NUMBER, 0, 7, NULL},
      {"x", "tag:yaml.org,2002:int", 1, MCP_SCHEMA_NUMBER, 0, 0, "!!int on a non-integer value"},
      {"7", "tag:yaml.org,2002:float", 1, MCP_SCHEMA_NUMBER, 0, 7, NULL},
      {"x", "tag:yaml.org,2002:bool", 1, MCP_SCHEMA_BOOL, 0, 0, "!!bool on a non-boolean value"},
      {"x", "tag:yaml.org,2002:null", 1, MCP_SCHEMA_NULL, 0, 0, "!!null on a non-null value"},
      {"x", "!foo", 1, MCP_SCHEMA_STRING, 0, 0, "unsupported tag"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    mcp_schema_kind kind = MCP_SCHEMA_LIST;
    int boolean = -1;
    double num = -99;
    const char *err = mcp_schema_yaml_resolve(cases[i].text, cases[i].tag, cases[i].plain,
                                              &kind, &boolean, &num);
    CHECK(kind == cases[i].kind, "resolve '%s': kind %d", cases[i].text, (int)kind);
    CHECK(cases[i].err ? err && !strcmp(err, cases[i].err) : !err, "resolve '%s': '%s'",
          cases[i].text, err ? err : "(none)");
    if (!err && kind == MCP_SCHEMA_BOOL)
      CHECK(boolean == cases[i].boolean, "resolve '%s': %d", cases[i].text, boolean);
    if (!err && kind == MCP_SCHEMA_NUMBER)
      CHECK(num == cases[i].num, "resolve '%s': %g", cases[i].text, num);
  }
  /* .nan: not equal to itself. */
  mcp_schema_kind kind;
  int b = 0;
  double num = 0;
  CHECK(!mcp_schema_yaml_resolve(".NaN", NULL, 1, &kind, &b, &num) &&
            kind == MCP_SCHEMA_NUMBER && num != num,
        ".NaN");
  CHECK(!mcp_schema_yaml_collection_tag(NULL, MCP_SCHEMA_MAP) &&
            !mcp_schema_yaml_collection_tag("!", MCP_SCHEMA_LIST) &&
            !mcp_schema_yaml_collection_tag("tag:yaml.org,2002:map", MCP_SCHEMA_MAP) &&
            mcp_schema_yaml_collection_tag("tag:yaml.org,2002:map", MCP_SCHEMA_LIST) &&
            mcp_schema_yaml_collection_tag("!set", MCP_SCHEMA_MAP),
        "collection tags");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_schema_yaml_fast SOURCE_ROOT\n");
    return 2;
  }
  reader_refusals();
  reader_nomem();
  reader_syntax_lines();
  resolver_cases();
  plain_every_byte_everywhere();
  char vs[2048];
  size_t vn = bench_vs(vs, sizeof vs, 7, 1);
  CHECK(vn && compare("bench VirtualService", vs, vn),
        "the fast scanner bailed on the benchmark's VirtualService");
  mutate("bench VirtualService", vs, vn, 2000);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char what[32];
    snprintf(what, sizeof what, "case %zu", i);
    compare(what, cases[i], strlen(cases[i]));
    mutate(what, cases[i], strlen(cases[i]), 40);
  }
  files(argv[1], "examples/config/bookinfo", 1, 400);
  files(argv[1], "examples/config/istio-system", 0, 400); /* mesh.yaml: a block scalar */
  files(argv[1], "examples/config/egress", 1, 400);
  files(argv[1], "examples/config/default", 1, 400);
  files(argv[1], "examples/config/swarm", 0, 400);
  files(argv[1], "tests/interop", 0, 400);
  files(argv[1], "fuzz/corpus/fuzz_config_parse", 0, 400);
  files(argv[1], "fuzz/corpus/fuzz_schema", 0, 400);
  printf("fast scanner: %zu inputs read alike, %zu refused alike, %zu left to libyaml\n",
         g_same, g_errors, g_bailed);
  CHECK(g_same > 1000, "the fast scanner read only %zu inputs", g_same);
  CHECK(g_errors > 10, "only %zu errors compared", g_errors);
  if (g_fail)
    fprintf(stderr, "%d failures\n", g_fail);
  return g_fail ? 1 : 0;
}
