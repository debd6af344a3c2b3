/*
 * bench_schema: libmcp-schema's conversions on 1 KiB Istio VirtualServices
 * (issue 15): what mcp-source pays per document to send a typed body, and
 * what mcp-sink pays to mirror one as JSON.
 *
 *   typed_encode_docs_per_s       YAML text -> wire bytes
 *                                 (mcp_schema_encode_yaml(): no tree)
 *   typed_encode_via_tree_docs_per_s  YAML text -> value tree -> wire
 *                                 bytes (parse, then encode the tree)
 *   typed_encode_tree_docs_per_s  value tree -> wire bytes (the loader's
 *                                 share when it builds the tree itself)
 *   typed_decode_docs_per_s       wire bytes -> proto3 JSON text
 *   typed_dir_load_20000_s        mcp-source's loader (tools/loader) reading
 *                                 a directory of 20,000 such documents, one
 *                                 a file with apiVersion, kind, metadata,
 *                                 into a store, typed (issue 25 target 4),
 *                                 the files read on one thread per CPU
 *   typed_dir_load_20000_1thread_s  the same on one thread
 *
 * Each: the median of several rounds over a set of distinct documents,
 * single thread, wall time (CPU time printed beside it). The FNV-1a hash
 * of every document's wire bytes is printed too: equal hashes before and
 * after a change to the encoder mean byte-identical output.
 *
 * Usage: bench_schema [--quick | --dir]   (--quick: a smoke test, numbers
 * mean nothing; --dir: the directory load alone, for a profile)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_util.h"
#include "bench_vs.h"
#include "mcp/schema.h"
#include "mcp/schema_istio.h"
#ifdef BENCH_LOADER
#include "loader/config_internal.h"
#endif

#define VS "istio.networking.v1alpha3.VirtualService"

#ifdef BENCH_LOADER
/* mcp-source's start on a directory of |n| typed VirtualServices, one a
 * file (written once to a temporary directory): a new loader's scan and
 * its apply into a new store, |rounds| times; the median in seconds. */
static double dir_load(const mcp_schema *s, unsigned n, int rounds, unsigned threads) {
  char dir[] = "/tmp/mcp-bench-schema-XXXXXX", path[128];
  if (!mkdtemp(dir))
    return -1;
  for (unsigned i = 0; i < n; i++) {
    char vs[2048], doc[4096];
    size_t vn = bench_vs(vs, sizeof vs, i, 0);
    int k = snprintf(doc, sizeof doc,
                     "apiVersion: networking.istio.io/v1alpha3\nkind: VirtualService\n"
                     "metadata:\n  name: reviews-%u\n  namespace: bench\nspec:\n",
                     i);
    /* The body, indented under spec. */
    for (size_t j = 0; j < vn && k > 0 && (size_t)k + 4 < sizeof doc; j++) {
      if (j == 0 || vs[j - 1] == '\n')
        doc[k++] = ' ', doc[k++] = ' ';
      doc[k++] = vs[j];
    }
    snprintf(path, sizeof path, "%s/vs-%06u.yaml", dir, i);
    FILE *f = fopen(path, "w");
    if (!f || fwrite(doc, 1, (size_t)k, f) != (size_t)k || fclose(f))
      return -1;
  }
  size_t ni;
  const mcp_schema_istio_kind *ik = mcp_schema_istio_kinds(&ni);
  mcpcfg_kind_type *kinds = calloc(ni, sizeof *kinds);
  double r[16];
  if (!kinds)
    return -1;
  for (size_t i = 0; i < ni; i++)
    kinds[i] = (mcpcfg_kind_type){ik[i].api_version, ik[i].kind, ik[i].message};
  mcpcfg_options lo;
  mcpcfg_options_default(&lo);
  lo.schema = s;
  lo.kinds = kinds;
  lo.nkinds = ni;
  lo.load_threads = threads;
  for (int round = 0; round < rounds; round++) {
    mcpcfg_loader *l;
    mcp_store *st;
    mcp_store_options so;
    mcp_store_options_default(&so);
    so.epoch = 1;
    bu_sw sw = bu_sw_start();
    if (mcpcfg_loader_new(&l, dir, &lo) < 0 || mcp_store_new(&st, &so) < 0)
      return -1;
    mcpcfg_loader_set_racy_ns(l, 0); /* files written a moment ago: read once */
    if (mcpcfg_loader_scan(l) < 0)
      return -1;
    double scan_s = bu_sw_ns(&sw, NULL) / 1e9;
    if (mcpcfg_loader_apply(l, st, 1) < 0)
      return -1;
    double cpu;
    r[round] = bu_sw_ns(&sw, &cpu) / 1e9;
    bu_note("directory load %d (%s): %.3f s wall (the scan %.3f s), %.3f s CPU of the "
            "calling thread",
            round + 1, threads == 1 ? "one thread" : "threads", r[round], scan_s, cpu / 1e9);
    /* Every document loaded, typed. */
    size_t nres = 0, typed = 0;
    for (size_t c = 0; c < mcpcfg_loader_collection_count(l); c++) {
      const mcp_resource *res;
      size_t k = mcpcfg_loader_resources(l, c, &res);
      nres += k;
      for (size_t j = 0; j < k; j++)
        typed += strstr(res[j].type_url, VS) != NULL;
    }
    if (typed != n || mcpcfg_loader_files_with_errors(l)) {
      fprintf(stderr, "bench_schema: %zu of %u resources loaded, %zu typed\n", nres, n,
              typed);
      return -1;
    }
    mcpcfg_loader_del(l);
    mcp_store_del(st);
  }
  free(kinds);
  for (unsigned i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/vs-%06u.yaml", dir, i);
    unlink(path);
  }
  rmdir(dir);
  return bu_median(r, (size_t)rounds);
}
#endif

int main(int argc, char **argv) {
  int quick = argc > 1 && !strcmp(argv[1], "--quick");
  int dir_only = argc > 1 && !strcmp(argv[1], "--dir"); /* for a profile of the load */
  const size_t ndocs = quick ? 100 : 2000;
  const int rounds = quick ? 3 : 9;
  mcp_schema *s;
  mcp_schema_error e;
  if (mcp_schema_new(&s, NULL) || mcp_schema_add_istio(s, &e)) {
    fprintf(stderr, "bench_schema: cannot load Istio's types\n");
    return 1;
  }
  char **text = calloc(ndocs, sizeof *text);
  size_t *tlen = calloc(ndocs, sizeof *tlen);
  mcp_schema_docs **docs = calloc(ndocs, sizeof *docs);
  uint8_t **wire = calloc(ndocs, sizeof *wire);
  size_t *wlen = calloc(ndocs, sizeof *wlen);
  if (!text || !tlen || !docs || !wire || !wlen)
    return 1;
  size_t bytes = 0, wbytes = 0;
  for (size_t i = 0; i < ndocs; i++) {
    char buf[2048];
    size_t n = bench_vs(buf, sizeof buf, (unsigned)i, 0);
    if (!n)
      return 1;
    text[i] = malloc(n + 1);
    if (!text[i])
      return 1;
    memcpy(text[i], buf, n + 1);
    tlen[i] = n;
    bytes += n;
    if (mcp_schema_parse_yaml(NULL, text[i], n, &docs[i], &e) ||
        mcp_schema_encode(s, VS, mcp_schema_docs_root(docs[i], 0), "spec", 0, &wire[i],
                          &wlen[i], &e)) {
      fprintf(stderr, "bench_schema: document %zu: %lu: %s\n%s", i, e.line, e.message,
              text[i]);
      return 1;
    }
    wbytes += wlen[i];
  }
  bu_note("%zu VirtualServices, %.0f bytes of YAML and %.0f bytes of protobuf each on "
          "average, %d rounds",
          ndocs, (double)bytes / (double)ndocs, (double)wbytes / (double)ndocs, rounds);
  uint64_t h = UINT64_C(0xcbf29ce484222325);
  for (size_t i = 0; i < ndocs; i++)
    for (size_t j = 0; j < wlen[i]; j++)
      h = (h ^ wire[i][j]) * UINT64_C(0x100000001b3);
  bu_note("FNV-1a of the %zu documents' wire bytes: %016llx", ndocs, (unsigned long long)h);
  /* The direct way gives the same bytes. */
  for (size_t i = 0; i < ndocs; i++) {
    uint8_t *out;
    size_t n;
    if (mcp_schema_encode_yaml(s, VS, text[i], tlen[i], "spec", 0, &out, &n, &e) ||
        n != wlen[i] || memcmp(out, wire[i], n)) {
      fprintf(stderr, "bench_schema: document %zu: mcp_schema_encode_yaml() differs\n", i);
      return 1;
    }
    mcp_schema_free_bytes(s, out);
  }

  double r_enc[16], r_via[16], r_tree[16], r_dec[16], cpu;
  double c_enc = 0, c_via = 0, c_tree = 0, c_dec = 0;
  for (int r = 0; r < rounds && !dir_only; r++) {
    bu_sw sw = bu_sw_start();
    for (size_t i = 0; i < ndocs; i++) {
      uint8_t *out;
      size_t n;
      if (mcp_schema_encode_yaml(s, VS, text[i], tlen[i], "spec", 0, &out, &n, &e))
        return 1;
      mcp_schema_free_bytes(s, out);
    }
    r_enc[r] = (double)ndocs / (bu_sw_ns(&sw, &cpu) / 1e9);
    c_enc += (double)ndocs / (cpu / 1e9) / rounds;

    sw = bu_sw_start();
    for (size_t i = 0; i < ndocs; i++) {
      mcp_schema_docs *d;
      uint8_t *out;
      size_t n;
      if (mcp_schema_parse_yaml(NULL, text[i], tlen[i], &d, &e) ||
          mcp_schema_encode(s, VS, mcp_schema_docs_root(d, 0), "spec", 0, &out, &n, &e))
        return 1;
      mcp_schema_free_bytes(s, out);
      mcp_schema_docs_free(d);
    }
    r_via[r] = (double)ndocs / (bu_sw_ns(&sw, &cpu) / 1e9);
    c_via += (double)ndocs / (cpu / 1e9) / rounds;

    sw = bu_sw_start();
    for (size_t i = 0; i < ndocs; i++) {
      uint8_t *out;
      size_t n;
      if (mcp_schema_encode(s, VS, mcp_schema_docs_root(docs[i], 0), "spec", 0, &out, &n, &e))
        return 1;
      mcp_schema_free_bytes(s, out);
    }
    r_tree[r] = (double)ndocs / (bu_sw_ns(&sw, &cpu) / 1e9);
    c_tree += (double)ndocs / (cpu / 1e9) / rounds;

    sw = bu_sw_start();
    for (size_t i = 0; i < ndocs; i++) {
      char *js;
      size_t n;
      if (mcp_schema_to_json(s, VS, wire[i], wlen[i], 0, &js, &n, &e))
        return 1;
      mcp_schema_free_bytes(s, js);
    }
    r_dec[r] = (double)ndocs / (bu_sw_ns(&sw, &cpu) / 1e9);
    c_dec += (double)ndocs / (cpu / 1e9) / rounds;
  }
  if (!dir_only) {
    bu_note("CPU-time rates (mean): encode %.0f, via the tree %.0f, tree %.0f, decode "
            "%.0f docs/s",
            c_enc, c_via, c_tree, c_dec);
    double enc = bu_median(r_enc, (size_t)rounds), via = bu_median(r_via, (size_t)rounds);
    bu_result("typed_encode_docs_per_s", enc, "docs_per_s",
              "1 KiB VirtualService: YAML -> protobuf (no tree)", ">= 150000",
              quick ? -1 : enc >= 150000);
    bu_result("typed_encode_via_tree_docs_per_s", via, "docs_per_s",
              "1 KiB VirtualService: YAML -> tree -> protobuf", NULL, -1);
    bu_result("typed_encode_direct_vs_tree_x", enc / via, "x", "the two, in this run", NULL,
              -1);
    bu_result("typed_encode_tree_docs_per_s", bu_median(r_tree, (size_t)rounds), "docs_per_s",
              "1 KiB VirtualService: tree -> protobuf", NULL, -1);
    bu_result("typed_decode_docs_per_s", bu_median(r_dec, (size_t)rounds), "docs_per_s",
              "1 KiB VirtualService: protobuf -> JSON", NULL, -1);
  }
#ifdef BENCH_LOADER
  unsigned nfiles = quick ? 200 : 20000;
  double load = dir_load(s, nfiles, quick ? 1 : 3, 0);
  double load1 = dir_load(s, nfiles, quick ? 1 : 3, 1);
  if (load < 0 || load1 < 0) {
    fprintf(stderr, "bench_schema: the directory load failed\n");
    return 1;
  }
  bu_result("typed_dir_load_20000_s", load, "s",
            quick ? "200 files (quick)" : "20,000 typed VirtualService files: scan + apply",
            "< 0.3 s", quick ? -1 : load < 0.3);
  bu_result("typed_dir_load_20000_1thread_s", load1, "s",
            quick ? "200 files (quick), one thread" : "the same on one thread", NULL, -1);
#endif
  bu_table("libmcp-schema");
  for (size_t i = 0; i < ndocs; i++) {
    free(text[i]);
    mcp_schema_docs_free(docs[i]);
    mcp_schema_free_bytes(s, wire[i]);
  }
  free(text);
  free(tlen);
  free(docs);
  free(wire);
  free(wlen);
  mcp_schema_free(s);
  return 0;
}
