/*
 * fuzz_schema: libmcp-schema (schema/) against Istio's types: YAML and JSON
 * documents to protobuf wire bytes, and wire bytes to JSON.
 *
 * Input: byte 0 the mode (bits 0-1), byte 1 the message type (an Istio
 * kind of mcp_schema_istio_kinds(), or Struct, Value, Any), byte 2 the
 * allocation to fail in mode 3, then the bytes:
 *   0 YAML, every document encoded; 1 JSON; 2 wire bytes decoded to JSON;
 *   3 YAML again, with an allocation failing.
 *
 * Checked, beyond the sanitizers: a document that encodes decodes to JSON,
 * and that JSON encodes to the same bytes (the round trip of the tests, on
 * every input); wire bytes that decode give JSON that encodes, and whose
 * bytes decode to the same JSON; YAML straight to wire bytes
 * (mcp_schema_encode_yaml()) gives the long way's bytes or error, and its
 * direct way never encodes what the long way refuses; a refused document has an error with a
 * message starting with its field path, a line within the input and the
 * documented codes; NOMEM exactly when an allocation failed; nothing leaks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "mcp/schema.h"
#include "mcp/schema_istio.h"
#include "schema_int.h" /* sc_parse_yaml(): libyaml alone, to compare */

static mcp_schema *g_s;   /* libc allocator */
static mcp_schema *g_fs;  /* the counting, failing one */
static fz_mem g_mem;
static const mcp_schema_istio_kind *g_kinds;
static size_t g_nkinds;

static const char *const g_extra[] = {"google.protobuf.Struct", "google.protobuf.Value",
                                      "google.protobuf.Any"};

static mcp_schema *load(const mcp_mem *mem) {
  mcp_schema_options o;
  mcp_schema_options_default(&o);
  o.mem = mem;
  mcp_schema *s;
  mcp_schema_error e;
  FZ_CHECK(mcp_schema_new(&s, &o) == 0, "mcp_schema_new");
  FZ_CHECK(mcp_schema_add_istio(s, &e) == 0, "mcp_schema_add_istio: %s", e.message);
  return s;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_init_verbose();
  g_s = load(NULL);
  fz_mem_init(&g_mem);
  g_fs = load(&g_mem.mem);
  g_kinds = mcp_schema_istio_kinds(&g_nkinds);
  return 0;
}

static mcp_schema_parse_options popts(const mcp_mem *mem) {
  mcp_schema_parse_options o;
  mcp_schema_parse_options_default(&o);
  o.mem = mem;
  o.max_nodes = 20000; /* keep each run short */
  o.max_bytes = 1 << 20;
  o.max_depth = 128;   /* beyond the schema's 100: its limit is the one met */
  return o;
}

static unsigned long count_lines(const uint8_t *p, size_t n) {
  unsigned long l = 1;
  for (size_t i = 0; i < n; i++)
    l += p[i] == '\n' || (p[i] == '\r' && (i + 1 == n || p[i + 1] != '\n'));
  return l;
}

static void check_error(const mcp_schema_error *e, int rc, unsigned long lines) {
  FZ_CHECK(rc == MCP_ERR_INVALID_ARGUMENT || rc == MCP_ERR_LIMIT || rc == MCP_ERR_NOMEM,
           "unexpected code %d (%s)", rc, e->message);
  FZ_CHECK(e->code == rc, "error code %d, returned %d", e->code, rc);
  FZ_CHECK(e->message[0], "an error without a message");
  FZ_CHECK(!strncmp(e->message, e->path, strlen(e->path)), "message %s, path %s", e->message,
           e->path);
  FZ_CHECK(e->line <= lines + 1, "line %lu of %lu", e->line, lines);
}

/* JSON text -> bytes, which must work. */
static void reencode(const mcp_schema *s, const char *type, const char *js, size_t jl,
                     uint8_t **out, size_t *n) {
  mcp_schema_parse_options po = popts(NULL);
  mcp_schema_docs *d;
  mcp_schema_error e;
  int rc = mcp_schema_parse_json(&po, js, jl, &d, &e);
  FZ_CHECK(rc == 0, "our JSON does not parse: %s\n%s", e.message, js);
  rc = mcp_schema_encode(s, type, mcp_schema_docs_root(d, 0), NULL, 0, out, n, &e);
  FZ_CHECK(rc == 0, "our JSON does not encode: %s\n%s", e.message, js);
  mcp_schema_docs_free(d);
}

/* Encoded bytes: decode, encode that JSON, same bytes. */
static void round_trip(const mcp_schema *s, const char *type, const uint8_t *b, size_t n) {
  char *js;
  size_t jl;
  mcp_schema_error e;
  int rc = mcp_schema_to_json(s, type, b, n, 0, &js, &jl, &e);
  FZ_CHECK(rc == 0, "our bytes do not decode: %s", e.message);
  FZ_CHECK(strlen(js) == jl, "JSON length");
  uint8_t *b2;
  size_t n2;
  reencode(s, type, js, jl, &b2, &n2);
  FZ_CHECK(n2 == n && (!n || !memcmp(b, b2, n)), "round trip changed the bytes: %s", js);
  mcp_schema_free_bytes(s, b2);
  mcp_schema_free_bytes(s, js);
}

/* mcp_schema_encode_all() agrees with mcp_schema_encode() (|rc|, |first|,
 * |b|): the same bytes; the same first mismatch among the errors kept
 * (the same walk finds it first), in line order, each well formed; a later
 * nesting error may stop a walk that goes on. */
static void all_errors(const mcp_schema *s, const char *type, const mcp_schema_value *v, int rc,
                       const mcp_schema_error *first, const uint8_t *b, size_t bn,
                       unsigned long lines) {
  mcp_schema_error errs[4];
  size_t nerr = 99;
  uint8_t *b2 = NULL;
  size_t bn2 = 0;
  int rc2 = mcp_schema_encode_all(s, type, v, "spec", 0, &b2, &bn2, errs, 4, &nerr);
  if (!rc) {
    FZ_CHECK(!rc2 && nerr == 0, "encode_all: %d, %zu errors, encode: 0", rc2, nerr);
    FZ_CHECK(bn2 == bn && (!bn || !memcmp(b, b2, bn)), "encode_all: other bytes");
    mcp_schema_free_bytes(s, b2);
    return;
  }
  FZ_CHECK(rc2 == rc || (rc == MCP_ERR_INVALID_ARGUMENT && rc2 == MCP_ERR_LIMIT),
           "encode_all: %d, encode: %d", rc2, rc);
  FZ_CHECK(nerr >= 1, "encode_all failed without an error");
  int found = 0;
  for (size_t k = 0; k < nerr && k < 4; k++) {
    check_error(&errs[k], errs[k].code, lines);
    FZ_CHECK(k == 0 || errs[k - 1].line <= errs[k].line, "errors out of line order");
    found |= !strcmp(errs[k].message, first->message) && errs[k].line == first->line;
  }
  FZ_CHECK(found || nerr > 4 || rc2 != rc, "encode's error %s not among encode_all's",
           first->message);
}

/* The fast YAML scanner changes nothing: libyaml alone gives the same
 * documents, or the same error. */
static void same_as_libyaml(const mcp_schema_parse_options *po, const uint8_t *p, size_t n,
                            int rc, const mcp_schema_error *e, const mcp_schema_docs *d) {
  mcp_schema_docs *ref = NULL;
  mcp_schema_error re;
  int rr = sc_parse_yaml(po, (const char *)p, n, &ref, &re, SC_YAML_LIBYAML);
  FZ_CHECK(rr == rc, "libyaml alone: %d, with the fast scanner: %d", rr, rc);
  if (rc) {
    FZ_CHECK(re.line == e->line && !strcmp(re.message, e->message),
             "libyaml alone: %lu: %s, with the fast scanner: %lu: %s", re.line, re.message,
             e->line, e->message);
    return;
  }
  size_t nd = mcp_schema_docs_count(d);
  FZ_CHECK(mcp_schema_docs_count(ref) == nd, "libyaml alone: %zu documents, fast: %zu",
           mcp_schema_docs_count(ref), nd);
  for (size_t i = 0; i < nd; i++)
    FZ_CHECK(!sc_value_differ(mcp_schema_docs_root(ref, i), mcp_schema_docs_root(d, i)),
             "document %zu differs from libyaml's", i);
  mcp_schema_docs_free(ref);
}

/* YAML straight to wire bytes: where the direct way encodes, the long way
 * gives the same bytes; mcp_schema_encode_yaml() gives the long way's
 * result. */
static void same_as_direct(const mcp_schema *s, const char *type, const uint8_t *p, size_t n) {
  uint8_t *bt = NULL, *bd = NULL, *ba = NULL;
  size_t nt = 0, nd = 0, na = 0;
  mcp_schema_error et, ed, ea;
  const char *t = (const char *)p;
  int rt = sc_encode_yaml(s, type, t, n, "spec", 0, &bt, &nt, &et, SC_ENCODE_TREE);
  int rd = sc_encode_yaml(s, type, t, n, "spec", 0, &bd, &nd, &ed, SC_ENCODE_DIRECT);
  int ra = mcp_schema_encode_yaml(s, type, t, n, "spec", 0, &ba, &na, &ea);
  FZ_CHECK(rd == 0 || rd == SC_YF_BAIL, "the direct way returned %d", rd);
  if (!rd) {
    FZ_CHECK(rt == 0, "the direct way encoded what the long way refuses: %s", et.message);
    FZ_CHECK(nd == nt && (!nd || !memcmp(bd, bt, nd)), "the direct way wrote other bytes");
  }
  FZ_CHECK(ra == rt, "mcp_schema_encode_yaml(): %d, the long way: %d", ra, rt);
  if (!rt)
    FZ_CHECK(na == nt && (!na || !memcmp(ba, bt, na)), "mcp_schema_encode_yaml(): other bytes");
  else
    FZ_CHECK(ea.line == et.line && !strcmp(ea.message, et.message),
             "mcp_schema_encode_yaml(): %s, the long way: %s", ea.message, et.message);
  mcp_schema_free_bytes(s, bt);
  mcp_schema_free_bytes(s, bd);
  mcp_schema_free_bytes(s, ba);
}

static void run_docs(const mcp_schema *s, const mcp_mem *mem, const char *type, int json,
                     const uint8_t *p, size_t n, long fired_before) {
  mcp_schema_parse_options po = popts(mem);
  mcp_schema_docs *d = NULL;
  mcp_schema_error e;
  unsigned long lines = count_lines(p, n);
  int rc = json ? mcp_schema_parse_json(&po, (const char *)p, n, &d, &e)
                : mcp_schema_parse_yaml(&po, (const char *)p, n, &d, &e);
  if (mem)
    fz_check_nomem(&g_mem, fired_before, rc, "parse");
  if (!json && !mem) {
    same_as_libyaml(&po, p, n, rc, &e, d);
    same_as_direct(s, type, p, n);
  }
  if (rc) {
    check_error(&e, rc, lines);
    return;
  }
  size_t nd = mcp_schema_docs_count(d);
  FZ_CHECK(!json || nd == 1, "JSON gave %zu documents", nd);
  for (size_t i = 0; i < nd && i < 8; i++) {
    uint8_t *b = (uint8_t *)"x";
    size_t bn = 99;
    long before = g_mem.fired;
    rc = mcp_schema_encode(s, type, mcp_schema_docs_root(d, i), "spec", 0, &b, &bn, &e);
    if (mem)
      fz_check_nomem(&g_mem, before, rc, "encode");
    if (!mem)
      all_errors(s, type, mcp_schema_docs_root(d, i), rc, &e, b, bn, lines);
    if (rc) {
      check_error(&e, rc, lines);
      FZ_CHECK(bn == 99 && b[0] == 'x', "a failed encode changed its outputs");
      FZ_CHECK(!strncmp(e.path, "spec", 4), "path %s without the prefix", e.path);
      continue;
    }
    FZ_CHECK((b == NULL) == (bn == 0), "empty output %p %zu", (void *)b, bn);
    if (!mem)
      round_trip(s, type, b, bn);
    mcp_schema_free_bytes(s, b);
  }
  mcp_schema_docs_free(d);
}

static void run_wire(const mcp_schema *s, const char *type, const uint8_t *p, size_t n) {
  char *js;
  size_t jl;
  mcp_schema_error e;
  int rc = mcp_schema_to_json(s, type, p, n, 0, &js, &jl, &e);
  if (rc) {
    FZ_CHECK(rc == MCP_ERR_MALFORMED || rc == MCP_ERR_LIMIT, "decode: %d %s", rc, e.message);
    FZ_CHECK(e.message[0], "an error without a message");
    return;
  }
  uint8_t *b;
  size_t bn;
  reencode(s, type, js, jl, &b, &bn);
  char *js2;
  size_t jl2;
  rc = mcp_schema_to_json(s, type, b, bn, 0, &js2, &jl2, &e);
  FZ_CHECK(rc == 0, "our bytes do not decode: %s", e.message);
  FZ_CHECK(jl == jl2 && !memcmp(js, js2, jl), "JSON not stable:\n%s\n%s", js, js2);
  mcp_schema_free_bytes(s, js2);
  mcp_schema_free_bytes(s, b);
  mcp_schema_free_bytes(s, js);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3)
    return 0;
  unsigned mode = data[0] & 3;
  size_t ntypes = g_nkinds + sizeof g_extra / sizeof g_extra[0];
  size_t t = data[1] % ntypes;
  const char *type = t < g_nkinds ? g_kinds[t].message : g_extra[t - g_nkinds];
  unsigned k = data[2];
  const uint8_t *p = data + 3;
  size_t n = size - 3;
  FZ_LOG("mode %u type %s k %u, %zu bytes\n", mode, type, k, n);
  switch (mode) {
  case 0:
  case 1:
    run_docs(g_s, NULL, type, mode == 1, p, n, 0);
    break;
  case 2:
    run_wire(g_s, type, p, n);
    break;
  default: {
    long live = g_mem.live;
    long before = g_mem.fired;
    fz_mem_arm(&g_mem, k + 1);
    run_docs(g_fs, &g_mem.mem, type, 0, p, n, before);
    fz_mem_disarm(&g_mem);
    FZ_CHECK(g_mem.live == live, "%ld blocks leaked", g_mem.live - live);
  }
  }
  return 0;
}
