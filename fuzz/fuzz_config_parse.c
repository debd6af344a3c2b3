/*
 * fuzz_config_parse: the YAML loader of mcp-source (tools/loader), through
 * its in-memory entry point mcpcfg_parse() (one file's bytes), and its small
 * parsers (RFC 3339 times, apiVersion/kind to collection).
 *
 * Input: one byte of mode and limits, then the bytes.
 *   bits 0-1 max_depth {default, 3, 8, 32}; bits 2-3 max_nodes {default, 8,
 *   64, 1024}; bits 4-5 max_file_size {default, 32, 256, 4096};
 *   bits 6-7 mode: 0 a YAML file, 1 a YAML file with Istio's typed
 *   bodies, 2 mcpcfg_parse_time(), 3 mcpcfg_collection_for() (apiVersion
 *   NUL kind) and mcpcfg_plural().
 *
 * Checked, beyond the sanitizers: every document returned is well formed
 * (collection, name, a version, UTF-8 strings, a body that decodes as
 * google.protobuf.Struct, a valid create time) and is accepted by a store
 * with the default rules, as mcp-source applies it (a document the store
 * refuses would make mcpcfg_loader_apply fail for its whole collection
 * and those after it, every scan); parsing is deterministic (the same
 * bytes give the same names and versions); reports have a message. Typed:
 * specs encoded as they are read give what trees give (the same
 * documents, body bytes, reports and notes, in order).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "loader/config_internal.h"
#include "mcp/schema_istio.h"
#include "fuzz_util.h"
#include "fuzz_wire.h"
#include "google/protobuf/struct.pb-c.h"

static unsigned long g_reports;

static void on_report(const char *path, unsigned long line, const char *msg,
                      void *ud) {
  (void)ud;
  (void)line;
  FZ_CHECK(path && msg && msg[0], "a report without path or message");
  volatile size_t n = strlen(path) + strlen(msg);
  (void)n;
  g_reports++;
}

/* Typed mode: everything said, as text, to compare the two ways. */
typedef struct said {
  char *p;
  size_t len, cap;
} said;

static void say(said *w, int what, unsigned long line, const char *msg) {
  char head[48];
  int k = snprintf(head, sizeof head, "%d %lu ", what, line);
  size_t need = (size_t)k + strlen(msg) + 2;
  if (w->len + need > w->cap) {
    w->cap = 2 * (w->len + need);
    w->p = realloc(w->p, w->cap);
    FZ_CHECK(w->p, "out of memory");
  }
  w->len += (size_t)sprintf(w->p + w->len, "%s%s\n", head, msg);
}

static void said_report(const char *path, unsigned long line, const char *msg, void *ud) {
  on_report(path, line, msg, NULL);
  say(ud, 0, line, msg);
}

static void said_note(int what, const char *path, unsigned long line, const char *msg,
                      void *ud) {
  (void)path;
  say(ud, what, line, msg);
}

static mcp_schema *g_schema;
static mcpcfg_kind_type g_kinds[64];
static size_t g_nkinds;

static int str_ok(const char *s) {
  return s && fz_utf8_valid((const uint8_t *)s, strlen(s));
}

static void check_doc(const mcpcfg_doc *d, mcp_store *store) {
  const mcp_resource *r = &d->res;
  FZ_CHECK(d->collection && d->collection[0] && str_ok(d->collection),
           "a document without a valid collection");
  FZ_CHECK(r->name && r->name[0] && str_ok(r->name),
           "a document without a valid name");
  /* resourceVersion "" gives "" (the store then generates one). */
  FZ_CHECK(r->version && str_ok(r->version), "%s: no valid version", r->name);
  FZ_CHECK(r->type_url && strcmp(r->type_url, MCPCFG_STRUCT_TYPE_URL) == 0,
           "%s: body type %s", r->name, r->type_url ? r->type_url : "(null)");
  for (size_t i = 0; i < r->nlabels; ++i) {
    FZ_CHECK(str_ok(r->labels[i].key) && str_ok(r->labels[i].value),
             "%s: a label is not UTF-8", r->name);
  }
  for (size_t i = 0; i < r->nannotations; ++i) {
    FZ_CHECK(str_ok(r->annotations[i].key) && str_ok(r->annotations[i].value),
             "%s: an annotation is not UTF-8", r->name);
  }
  FZ_CHECK(!r->has_create_time ||
               (r->create_time_nanos >= 0 && r->create_time_nanos < 1000000000),
           "%s: create time nanos %d", r->name, (int)r->create_time_nanos);
  Google__Protobuf__Struct *st =
      google__protobuf__struct__unpack(NULL, r->body_len, r->body);
  FZ_CHECK(st, "%s: the body does not decode as a Struct", r->name);
  google__protobuf__struct__free_unpacked(st, NULL);
  /* What mcpcfg_loader_apply() does with it. */
  int rv = mcp_store_add_collection(store, d->collection);
  FZ_CHECK(rv == 0, "the store refuses collection '%s' of %s: %s",
           d->collection, r->name, mcp_strerror(rv));
  rv = mcp_store_upsert(store, d->collection, r, 1);
  FZ_CHECK(rv == 0 || rv == 1,
           "the store refuses document '%s' (collection %s, version %s): %s",
           r->name, d->collection, r->version, mcp_strerror(rv));
}

static void run_yaml(const mcpcfg_options *o, const uint8_t *p, size_t n) {
  mcpcfg_doc **docs = NULL, **docs2 = NULL;
  size_t ndocs = 0, nbad = 0, ndocs2 = 0, nbad2 = 0;
  g_reports = 0;
  int rv = mcpcfg_parse(o, "fuzz.yaml", p, n, &docs, &ndocs, &nbad);
  unsigned long reports = g_reports;
  FZ_CHECK(rv == 0 || rv == 1 || rv == MCPCFG_ERR_NOMEM, "mcpcfg_parse: %d",
           rv);
  FZ_CHECK(rv != 1 || (!docs && !ndocs), "an invalid file gave documents");
  FZ_CHECK(!nbad || reports >= nbad, "%zu documents skipped, %lu reports",
           nbad, reports);
  if (rv != 0) {
    return;
  }
  mcp_store_options so;
  mcp_store_options_default(&so);
  so.epoch = 1;
  mcp_store *store = NULL;
  FZ_CHECK(mcp_store_new(&store, &so) == 0, "store");
  for (size_t i = 0; i < ndocs; ++i) {
    FZ_CHECK(docs[i], "a NULL document");
    check_doc(docs[i], store);
  }
  mcp_store_del(store);
  /* Deterministic. */
  int rv2 = mcpcfg_parse(o, "fuzz.yaml", p, n, &docs2, &ndocs2, &nbad2);
  FZ_CHECK(rv2 == rv && ndocs2 == ndocs && nbad2 == nbad,
           "parsing the same bytes twice: %d/%zu/%zu then %d/%zu/%zu", rv,
           ndocs, nbad, rv2, ndocs2, nbad2);
  for (size_t i = 0; i < ndocs; ++i) {
    FZ_CHECK(strcmp(docs[i]->res.name, docs2[i]->res.name) == 0 &&
                 strcmp(docs[i]->res.version, docs2[i]->res.version) == 0 &&
                 strcmp(docs[i]->collection, docs2[i]->collection) == 0,
             "document %zu differs between two parses", i);
    mcpcfg_doc_unref(docs[i]);
    mcpcfg_doc_unref(docs2[i]);
  }
  free(docs);
  free(docs2);
}

/* Istio's typed bodies: specs encoded as they are read, then from trees
 * only; the same result. */
static void run_typed(const mcpcfg_options *base, const uint8_t *p, size_t n) {
  if (!g_schema) {
    mcp_schema_error e;
    size_t ni;
    FZ_CHECK(!mcp_schema_new(&g_schema, NULL) && !mcp_schema_add_istio(g_schema, &e),
             "Istio's types");
    const mcp_schema_istio_kind *ik = mcp_schema_istio_kinds(&ni);
    for (g_nkinds = 0; g_nkinds < ni && g_nkinds < 64; g_nkinds++)
      g_kinds[g_nkinds] = (mcpcfg_kind_type){ik[g_nkinds].api_version, ik[g_nkinds].kind,
                                             ik[g_nkinds].message};
  }
  said w[2] = {{NULL, 0, 0}, {NULL, 0, 0}};
  mcpcfg_doc **docs[2] = {NULL, NULL};
  size_t nd[2] = {0, 0}, nbad[2] = {0, 0};
  int rv[2];
  for (int k = 0; k < 2; k++) {
    mcpcfg_options o = *base;
    o.schema = g_schema;
    o.kinds = g_kinds;
    o.nkinds = g_nkinds;
    o.builtin = g_kinds;
    o.nbuiltin = g_nkinds;
    o.report = said_report;
    o.note = said_note;
    o.user_data = &w[k];
    o.tree_only = k;
    rv[k] = mcpcfg_parse(&o, "fuzz.yaml", p, n, &docs[k], &nd[k], &nbad[k]);
  }
  FZ_CHECK(rv[0] == rv[1] && nd[0] == nd[1] && nbad[0] == nbad[1],
           "as read: %d/%zu/%zu, from trees: %d/%zu/%zu", rv[0], nd[0], nbad[0], rv[1], nd[1],
           nbad[1]);
  FZ_CHECK(w[0].len == w[1].len && (!w[0].len || !memcmp(w[0].p, w[1].p, w[0].len)),
           "as read, said:\n%.*s\nfrom trees:\n%.*s", (int)w[0].len, w[0].p ? w[0].p : "",
           (int)w[1].len, w[1].p ? w[1].p : "");
  for (size_t i = 0; i < nd[0]; i++) {
    const mcp_resource *a = &docs[0][i]->res, *b = &docs[1][i]->res;
    FZ_CHECK(!strcmp(a->name, b->name) && !strcmp(a->version, b->version) &&
                 !strcmp(a->type_url, b->type_url) && a->body_len == b->body_len &&
                 (!a->body_len || !memcmp(a->body, b->body, a->body_len)),
             "document %zu differs between the two ways", i);
  }
  for (int k = 0; k < 2; k++) {
    for (size_t i = 0; i < nd[k]; i++)
      mcpcfg_doc_unref(docs[k][i]);
    free(docs[k]);
    free(w[k].p);
  }
}

static void run_time(const uint8_t *p, size_t n) {
  char *s = malloc(n + 1);
  FZ_CHECK(s, "out of memory");
  memcpy(s, p, n);
  s[n] = '\0';
  int64_t secs = 12345;
  int32_t nanos = 678;
  int rv = mcpcfg_parse_time(s, &secs, &nanos);
  FZ_CHECK(rv == 0 || rv == MCPCFG_ERR_INVALID_ARGUMENT, "parse_time: %d", rv);
  if (rv == 0) {
    FZ_CHECK(nanos >= 0 && nanos < 1000000000, "'%s': nanos %d", s, (int)nanos);
    /* Years 0001-9999, offsets within a day. */
    FZ_CHECK(secs >= -62135596800LL - 86400 && secs <= 253402300799LL + 86400,
             "'%s': seconds %lld", s, (long long)secs);
  } else {
    FZ_CHECK(secs == 12345 && nanos == 678, "a failed parse changed the outputs");
  }
  free(s);
}

static void run_collection(const uint8_t *p, size_t n) {
  char *s = malloc(n + 2);
  FZ_CHECK(s, "out of memory");
  memcpy(s, p, n);
  s[n] = '\0';
  s[n + 1] = '\0';
  const char *api = s;
  const char *kind = s + strlen(s) + 1; /* after the first NUL, if any */
  if (kind > s + n) {
    kind = "";
  }
  char *coll = (char *)"untouched";
  int rv = mcpcfg_collection_for(api, kind, &coll);
  FZ_CHECK(rv == 0 || rv == MCPCFG_ERR_INVALID_ARGUMENT || rv == MCPCFG_ERR_NOMEM,
           "collection_for: %d", rv);
  if (rv == 0) {
    FZ_CHECK(coll && coll[0] && str_ok(coll), "collection_for gave '%s'", coll);
    mcp_store_options so;
    mcp_store_options_default(&so);
    so.epoch = 1;
    mcp_store *store = NULL;
    FZ_CHECK(mcp_store_new(&store, &so) == 0, "store");
    FZ_CHECK(mcp_store_add_collection(store, coll) == 0,
             "the store refuses collection '%s'", coll);
    mcp_store_del(store);
    free(coll);
  } else {
    FZ_CHECK(strcmp(coll, "untouched") == 0, "a failed call set the output");
  }
  char *pl = mcpcfg_plural(kind);
  if (pl) {
    char buf[512];
    size_t want = mcp_kind_plural(kind, buf, sizeof(buf));
    if (want < sizeof(buf)) {
      FZ_CHECK(strcmp(pl, buf) == 0, "mcpcfg_plural('%s') = '%s', core says '%s'",
               kind, pl, buf);
    }
    free(pl);
  }
  free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const unsigned depth[4] = {0, 3, 8, 32};
  static const size_t nodes[4] = {0, 8, 64, 1024};
  static const size_t fsize[4] = {0, 32, 256, 4096};
  if (size < 1) {
    return 0;
  }
  uint8_t h = data[0];
  mcpcfg_options o;
  mcpcfg_options_default(&o);
  o.report = on_report;
  if (depth[h & 3]) {
    o.max_depth = depth[h & 3];
  }
  if (nodes[(h >> 2) & 3]) {
    o.max_nodes = nodes[(h >> 2) & 3];
  }
  if (fsize[(h >> 4) & 3]) {
    o.max_file_size = fsize[(h >> 4) & 3];
  }
  switch (h >> 6) {
  case 2:
    run_time(data + 1, size - 1);
    break;
  case 3:
    run_collection(data + 1, size - 1);
    break;
  case 1:
    run_typed(&o, data + 1, size - 1);
    break;
  default:
    run_yaml(&o, data + 1, size - 1);
    break;
  }
  return 0;
}
