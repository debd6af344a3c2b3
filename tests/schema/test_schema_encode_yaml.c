/*
 * test_schema_encode_yaml: YAML text straight to wire bytes
 * (schema/src/encode_yaml.c) gives what the long way gives (parse to a
 * tree, encode the tree).
 *
 * For every input: where the direct way does not bail, the long way must
 * succeed with the same bytes; and mcp_schema_encode_yaml() must give the
 * long way's result exactly: the return code, the bytes, or the error's
 * code, message, line and path. Inputs: hand-written documents of
 * kinds.proto's types (every field kind, out-of-order fields and map keys,
 * packed and unpacked lists, the scalar forms of well-known types, and
 * mismatches of every kind), the benchmark's VirtualService, the spec of
 * every Istio document in examples/, and single-byte mutations of all of
 * them (deterministic). Also proves the direct way is taken: the documents
 * marked "direct", the VirtualService and the examples' specs must not
 * bail. The encoder of a value within a document
 * (mcp_schema_yaml_encoder, one reused for every input) given the
 * scanner's events must give what the direct way gives.
 *
 * Usage: test_schema_encode_yaml SOURCE_ROOT ISTIO_PB KINDS_PB
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mutate.h"
#include "../../bench/bench_vs.h"
#include "check.h"
#include "schema_int.h"

static size_t g_direct, g_bailed, g_errors;

#define T "mcp.schema.test."

/* The encoder of a value (mcp_schema_yaml_encoder), reused for every input:
 * given the scanner's events of the document's root, it must give what the
 * direct way gives. */
static mcp_schema_yaml_encoder *g_x;

static int to_encoder(void *ctx, const mcp_schema_yaml_event *ev) {
  (void)ctx;
  if (ev->type != MCP_SCHEMA_YAML_DOC_START && ev->type != MCP_SCHEMA_YAML_DOC_END) {
    int rc = mcp_schema_yaml_encoder_event(g_x, ev);
    CHECK(rc == 0 || rc == MCP_SCHEMA_YAML_UNSURE, "encoder event: %d", rc);
  }
  return 0;
}

static void same_as_encoder(const char *type, const char *text, size_t len, int rd,
                            const uint8_t *bd, size_t nd, int rt, const uint8_t *bt,
                            size_t nt) {
  if (mcp_schema_yaml_encoder_begin(g_x, type))
    return; /* an unknown type */
  /* libyaml's events (tags, anchors, block scalars...): where the encoder
   * does not give up, the long way's bytes. */
  const uint8_t *bx = NULL;
  size_t nx = 0;
  mcp_schema_error ey;
  int read = sc_yaml_read(NULL, text, len, 64, SC_YAML_LIBYAML, 0, to_encoder, NULL, &ey);
  int rx = mcp_schema_yaml_encoder_finish(g_x, &bx, &nx);
  if (!read && !rx)
    CHECK(rt == 0 && nx == nt && (!nt || !memcmp(bx, bt, nt)),
          "%s: the encoder on libyaml's events: other bytes:\n%.*s", type, (int)len, text);
  if (mcp_schema_yaml_encoder_begin(g_x, type))
    return;
  int scanned = mcp_schema_yaml_scan(NULL, text, len, 64, to_encoder, NULL);
  rx = mcp_schema_yaml_encoder_finish(g_x, &bx, &nx);
  CHECK(rx == 0 || rx == MCP_SCHEMA_YAML_UNSURE, "encoder finish: %d", rx);
  if (scanned)
    return; /* the scanner was unsure: so was the direct way */
  CHECK(!rx == !rd, "%s: the encoder %s, the direct way %s:\n%.*s", type,
        rx ? "gave up" : "encoded", rd ? "gave up" : "encoded", (int)len, text);
  if (!rx && !rd)
    CHECK(nx == nd && (!nd || !memcmp(bx, bd, nd)), "%s: the encoder's bytes differ:\n%.*s",
          type, (int)len, text);
}

/* Compares the three ways on one input; returns 1 when the direct way
 * encoded it (did not bail). */
static int same(const mcp_schema *s, const char *type, const char *text, size_t len,
                unsigned flags) {
  uint8_t *bt = NULL, *bd = NULL, *ba = NULL;
  size_t nt = 0, nd = 0, na = 0;
  mcp_schema_error et, ed, ea;
  memset(&et, 0, sizeof et);
  memset(&ea, 0, sizeof ea);
  int rt = sc_encode_yaml(s, type, text, len, "spec", flags, &bt, &nt, &et, SC_ENCODE_TREE);
  int rd = sc_encode_yaml(s, type, text, len, "spec", flags, &bd, &nd, &ed, SC_ENCODE_DIRECT);
  int ra = mcp_schema_encode_yaml(s, type, text, len, "spec", flags, &ba, &na, &ea);
  if (!flags)
    same_as_encoder(type, text, len, rd, bd, nd, rt, bt, nt);
  if (rd == 0) {
    g_direct++;
    CHECK(rt == 0, "%s: the direct way encoded what the long way refuses (%s):\n%.*s", type,
          et.message, (int)len, text);
    CHECK(rt != 0 || (nd == nt && (!nd || !memcmp(bd, bt, nd))),
          "%s: other bytes (direct %zu, tree %zu):\n%.*s", type, nd, nt, (int)len, text);
  } else {
    g_bailed++;
    CHECK(rd == SC_YF_BAIL, "%s: the direct way returned %d:\n%.*s", type, rd, (int)len, text);
  }
  CHECK(ra == rt, "%s: mcp_schema_encode_yaml() %d, the long way %d:\n%.*s", type, ra, rt,
        (int)len, text);
  if (ra == rt && rt == 0)
    CHECK(na == nt && (!na || !memcmp(ba, bt, na)), "%s: other bytes:\n%.*s", type, (int)len,
          text);
  if (ra == rt && rt != 0) {
    g_errors++;
    CHECK(ea.code == et.code && ea.line == et.line && !strcmp(ea.message, et.message) &&
              !strcmp(ea.path, et.path),
          "%s: error %lu: %s, the long way's %lu: %s", type, ea.line, ea.message, et.line,
          et.message);
  }
  mcp_schema_free_bytes(s, bt);
  mcp_schema_free_bytes(s, bd);
  mcp_schema_free_bytes(s, ba);
  return rd == 0;
}

/* Every single-byte change of |text| at each position: a few
 * replacements and the deletion. */
typedef struct mut_ctx {
  const mcp_schema *s;
  const char *type;
} mut_ctx;

static void mutated(void *ctx, const char *m, size_t n) {
  const mut_ctx *c = ctx;
  same(c->s, c->type, m, n, 0);
}

static void mutations(const mcp_schema *s, const char *type, const char *text, size_t len) {
  mut_ctx c = {s, type};
  each_byte_change(text, len, " :-{}[]x1\n'\",#~", mutated, &c);
}

typedef struct doc {
  const char *type, *yaml;
  int direct; /* must not bail */
} doc;

static const doc docs[] = {
    /* Every scalar kind, fields out of number order. */
    {T "Scalars",
     "fMessage: {name: a, n: 3, child: {n: -1}}\nfSint64: -5\nfSint32: -6\n"
     "fSfixed64: -7\nfSfixed32: -8\nfEnum: GREEN\nfUint32: 9\nfBytes: AAEC\nfString: \"x\\ty\"\n"
     "fBool: true\nfFixed32: 10\nfFixed64: '11'\nfInt32: 0x1f\nfUint64: 12\nfInt64: \"-13\"\n"
     "fFloat: 1.5\nfDouble: -0.0\n",
     1},
    {T "Scalars", "f_int32: 0\nf_string: ''\nf_bool: false\nf_enum: 0\n", 1},
    {T "Scalars", "fEnum: -3\nfDouble: .inf\nfFloat: -.Inf\n", 1},
    {T "Scalars", "fInt32: ~\nfString:\nfMessage: null\n", 1},
    {T "Scalars", "fDouble: 1e400\n", 0},
    {T "Scalars", "fString: 1\n", 0},
    /* Strings the direct way writes without a node, and those that look
     * like something else first (resolved, then written or refused). */
    {T "Scalars", "fString: nginx\nfMessage: {name: -a}\n", 1},
    {T "Repeated", "rString: [tx, '1', .x, \"\", no]\n", 1},
    {T "Repeated", "rString: [a, 1]\n", 0},
    {T "Oneofs", "oString: ''\noInt32: 1\n", 0},
    {T "Scalars", "fInt32: 1.5\n", 0},
    {T "Scalars", "fEnum: PURPLE\n", 0},
    {T "Scalars", "fBytes: '!!'\n", 0},
    {T "Scalars", "nope: 1\n", 0},
    {T "Scalars", "fInt32: 1\nf_int32: 2\n", 0},
    {T "Scalars", "fMessage: 3\n", 0},
    {T "Scalars", "fMessage: [1]\n", 0},
    {T "Scalars", "- 1\n", 0},
    {T "Scalars", "just text\n", 0},
    {T "Scalars", "", 0},
    {"google.protobuf.Value", "", 0}, /* no document: a null Value */
    {T "Scalars", "fInt32: 1\n---\nfInt32: 2\n", 0},
    {T "Scalars", "fInt32: [1\n", 0},
    /* Lists: packed, unpacked, messages, empty. */
    {T "Repeated",
     "rUnpacked: [1, 2, 0]\nrMessage:\n- {name: a}\n- name: b\n  child: {n: 2}\n- {}\n"
     "rSint64: [-1, 1]\nrEnum: [RED, 2, BLUE]\nrString: [a, '', b]\nrBytes: [AA==, '']\n"
     "rBool: [true, false]\nrFixed32: []\nrDouble: [0, 1.5, -2]\nrInt32: []\n",
     1},
    {T "Repeated", "rInt32: [1, x]\n", 0},
    {T "Repeated", "rInt32: [1, ~]\n", 0},
    {T "Repeated", "rInt32: 1\n", 0},
    {T "Repeated", "rMessage: [[1]]\n", 0},
    {T "Repeated", "rInt32: ~\nrString: []\n", 1},
    /* Maps: keys out of order, message and well-known values. */
    {T "Maps",
     "mString: {b: '1', a: '2', '': empty, ab: x}\nmMessage:\n  z: {n: 1}\n  a: {name: q}\n"
     "mDuration: {b: 1.5s, a: 2h}\nmValue: {k: 1, j: text, i: true}\n",
     1},
    {T "Maps", "mString: {c: '', b: x, a: \"\"}\n", 1},
    {T "Maps", "mString: {a: '1', a: '2'}\n", 0},
    {T "Maps", "mString: {a: '1', b: ~}\n", 0},
    {T "Maps", "mInt32: {'2': 1, '1': 2}\n", 0},
    {T "Maps", "mMessage: {a: 1}\n", 0},
    {T "Maps", "mString: [a]\n", 0},
    {T "Maps", "mString: ~\n", 1},
    /* Oneofs and presence. */
    {T "Oneofs", "oString: a\noptInt32: 0\noptString: ''\noptEnum: COLOR_UNSPECIFIED\n", 1},
    {T "Oneofs", "oMessage: {name: a}\n", 1},
    {T "Oneofs", "oString: a\noInt32: 1\n", 0},
    {T "Oneofs", "oString: ~\noInt32: 1\n", 1},
    {T "Oneofs", "oNull: ~\n", 0},
    /* Well-known types: their scalar forms go directly, the others not. */
    {T "Wkt",
     "wString: s\nwBool: false\nwInt32: 0\nwDouble: 1.5\nmask: a.b,cD\n"
     "timestamp: 2020-01-01T00:00:00.5Z\nduration: 300ms\nvalue: 3\nwBytes: AQ==\n"
     "timestamps: ['1970-01-01T00:00:00Z']\nvalues: [1, a]\n",
     1},
    {T "Wkt", "duration: 1x\n", 0},
    {T "Wkt", "struct: {a: 1}\n", 0},
    {T "Wkt", "any: {'@type': type.googleapis.com/mcp.schema.test.Inner, n: 1}\n", 0},
    {T "Wkt", "list: [1]\n", 0},
    {T "Wkt", "value: {a: [1]}\n", 0},
    {T "Wkt", "empty: {}\n", 1}, /* Empty: a message like any other */
    /* Names: json_name and the .proto name. */
    {T "Names", "renamed: 1\nsnake_case_name: 2\nCapsName: 3\nxDouble: 4\ntrailing: 5\n", 1},
    {T "Names", "custom: 1\n", 1},
    /* Only libyaml reads these (the encoder gives up on tags and anchors). */
    {T "Scalars", "fString: !!str 1\n", 0},
    {T "Scalars", "fString: |\n  two\n  lines\n", 0},
    {T "Scalars", "fMessage: &a {n: 1}\n", 0},
    /* Deep. */
    {T "Inner", "child: {child: {child: {child: {child: {child: {n: 1}}}}}}\n", 1},
};

/* The Istio type of a document's kind, or NULL. */
static const char *istio_type(const char *kind) {
  static const char *const net[] = {"VirtualService", "DestinationRule", "Gateway",
                                     "ServiceEntry",   "Sidecar",         "EnvoyFilter",
                                     "WorkloadEntry"};
  static const char *const sec[] = {"AuthorizationPolicy", "PeerAuthentication",
                                     "RequestAuthentication"};
  static char buf[128];
  for (size_t i = 0; i < sizeof net / sizeof *net; i++)
    if (!strcmp(kind, net[i]))
      return snprintf(buf, sizeof buf, "istio.networking.v1alpha3.%s", kind), buf;
  for (size_t i = 0; i < sizeof sec / sizeof *sec; i++)
    if (!strcmp(kind, sec[i]))
      return snprintf(buf, sizeof buf, "istio.security.v1beta1.%s", kind), buf;
  return NULL;
}

/* Each document of a YAML file: its "kind:" and its "spec:" block,
 * dedented (a document's lines at column 0 end the block). */
static size_t example_specs(const mcp_schema *s, const char *path) {
  size_t len, found = 0;
  char *text = slurp(path, &len);
  if (!text)
    return 0;
  char kind[64] = "";
  for (char *line = text; line && *line;) {
    char *next = strchr(line, '\n');
    next = next ? next + 1 : NULL;
    if (!strncmp(line, "---", 3))
      kind[0] = '\0';
    if (!strncmp(line, "kind:", 5))
      sscanf(line, "kind: %63s", kind);
    if (!strncmp(line, "spec:", 5) && next && istio_type(kind)) {
      char spec[16384];
      size_t n = 0, indent = 0;
      char *l = next;
      for (; l && *l && (*l == ' ' || *l == '\n' || *l == '#'); ) {
        char *e = strchr(l, '\n');
        size_t ll = e ? (size_t)(e - l) + 1 : strlen(l);
        if (!indent && *l == ' ')
          indent = strspn(l, " ");
        size_t skip = strspn(l, " ") < indent ? strspn(l, " ") : indent;
        if (n + ll < sizeof spec) {
          memcpy(spec + n, l + skip, ll - skip);
          n += ll - skip;
        }
        l = e ? e + 1 : NULL;
      }
      const char *type = istio_type(kind);
      CHECK(same(s, type, spec, n, 0), "%s: %s's spec did not go directly:\n%.*s", path,
            kind, (int)n, spec);
      mutations(s, type, spec, n);
      found++;
      next = l;
    }
    line = next;
  }
  free(text);
  return found;
}

/* The Istio specs of one .yaml file of the examples (walk_files()). */
static size_t yaml_specs(void *ctx, const char *path) {
  const mcp_schema *s = ctx;
  size_t n = strlen(path);
  return n > 5 && !strcmp(path + n - 5, ".yaml") ? example_specs(s, path) : 0;
}

static void add_set(mcp_schema *s, const char *path) {
  size_t len;
  char *p = slurp(path, &len);
  mcp_schema_error e;
  CHECK(p && !mcp_schema_add_descriptor_set(s, (const uint8_t *)p, len, &e),
        "cannot load %s", path);
  free(p);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s SOURCE_ROOT ISTIO_PB KINDS_PB\n", argv[0]);
    return 2;
  }
  mcp_schema *s;
  if (mcp_schema_new(&s, NULL))
    return 1;
  add_set(s, argv[2]);
  add_set(s, argv[3]);
  CHECK(!mcp_schema_yaml_encoder_new(s, &g_x), "mcp_schema_yaml_encoder_new");
  if (g_fail) {
    mcp_schema_yaml_encoder_free(g_x);
    mcp_schema_free(s);
    return 1;
  }
  for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
    const doc *d = &docs[i];
    size_t n = strlen(d->yaml);
    int direct = same(s, d->type, d->yaml, n, 0);
    CHECK(!d->direct || direct, "%s did not go directly:\n%s", d->type, d->yaml);
    CHECK(d->direct || !direct, "%s went directly, which the test did not expect:\n%s",
          d->type, d->yaml);
    same(s, d->type, d->yaml, n, MCP_SCHEMA_IGNORE_UNKNOWN_FIELDS);
    mutations(s, d->type, d->yaml, n);
  }
  /* A map of 100 entries, keys in reverse order: more segments than the
   * encoder keeps without allocating, and a body to put in order larger
   * than its scratch (encode_yaml.c dx_seg_add(), dx_order()). */
  char big[4096];
  size_t bn = (size_t)snprintf(big, sizeof big, "mString:\n");
  for (int i = 99; i >= 0; i--)
    bn += (size_t)snprintf(big + bn, sizeof big - bn, "  k%03d: value-%03d\n", i, i);
  CHECK(bn < sizeof big && same(s, T "Maps", big, bn, 0), "100 map entries did not go directly");
  char vs[2048];
  size_t vn = bench_vs(vs, sizeof vs, 7, 1);
  CHECK(vn && same(s, "istio.networking.v1alpha3.VirtualService", vs, vn, 0),
        "the benchmark's VirtualService did not go directly");
  mutations(s, "istio.networking.v1alpha3.VirtualService", vs, vn);
  /* An unknown type: the long way's NOT_FOUND. */
  same(s, "no.such.Type", "a: 1\n", 5, 0);
  char ex[1024];
  snprintf(ex, sizeof ex, "%s/examples", argv[1]);
  size_t specs = walk_files(ex, yaml_specs, s);
  CHECK(specs >= 5, "only %zu Istio specs found in %s", specs, ex);
  printf("%zu inputs went directly, %zu the long way (%zu errors); %zu example specs; %d "
         "failures\n",
         g_direct, g_bailed, g_errors, specs, g_fail);
  mcp_schema_yaml_encoder_free(g_x);
  mcp_schema_free(s);
  return g_fail ? 1 : 0;
}
