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
 *
 * Usage: test_schema_yaml_fast SOURCE_ROOT
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "schema_int.h"

static int g_fail;
static size_t g_same, g_bailed, g_errors;

#define CHECK(c, ...)                                                    \
  do {                                                                   \
    if (!(c)) {                                                          \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);               \
      fprintf(stderr, __VA_ARGS__);                                      \
      fprintf(stderr, "\n");                                             \
      g_fail++;                                                          \
    }                                                                    \
  } while (0)

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

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  char *buf = NULL;
  size_t cap = 0, n = 0, k;
  do {
    if (n == cap) {
      char *p = realloc(buf, cap = cap ? cap * 2 : 4096);
      if (!p)
        abort();
      buf = p;
    }
    k = fread(buf + n, 1, cap - n, f);
    n += k;
  } while (k);
  fclose(f);
  *len = n;
  return buf;
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

/* A VirtualService as bench/bench_schema.c writes it. */
static const char bench_vs[] =
    "hosts:\n- reviews-7.bookinfo.svc.cluster.local\n- reviews.example.com\n"
    "gateways: [istio-system/bookinfo-gateway, mesh]\n"
    "http:\n"
    "- name: canary-7\n"
    "  match:\n"
    "  - headers:\n"
    "      end-user: {exact: tester-7}\n"
    "    uri: {prefix: /reviews/v0}\n"
    "  route:\n"
    "  - destination: {host: reviews, subset: v3, port: {number: 9080}}\n"
    "    headers:\n"
    "      request: {set: {x-canary: \"true\"}}\n"
    "  timeout: 7.5s\n"
    "- match:\n"
    "  - uri: {exact: /productpage}\n"
    "  route:\n"
    "  - destination: {host: reviews, subset: v1}\n"
    "    weight: 7\n"
    "  retries:\n"
    "    attempts: 3\n"
    "    perTryTimeout: 2s\n"
    "    retryOn: gateway-error,connect-failure,refused-stream\n"
    "  corsPolicy:\n"
    "    allowOrigins: [{exact: \"https://example.com\"}]\n"
    "  mirrorPercentage: {value: 10.0}\n";

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_schema_yaml_fast SOURCE_ROOT\n");
    return 2;
  }
  CHECK(compare("bench VirtualService", bench_vs, sizeof bench_vs - 1),
        "the fast scanner bailed on the benchmark's VirtualService");
  mutate("bench VirtualService", bench_vs, sizeof bench_vs - 1, 2000);
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
