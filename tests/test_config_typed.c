/*
 * Tests of the loader's typed bodies (tools/loader/config_body.c, issue 15):
 * a document of a known kind has its spec encoded as its real message
 * (Istio 1.6's types built in), a body that does not match the message is
 * reported with the file, the line and the field path and skips the
 * document, a kind without a schema keeps the Struct body. Bodies are read
 * back with libmcp-schema's decoder (mcp_schema_to_json). Every test works
 * on a real temporary directory under /tmp.
 */
#include <check.h>
#include <stdarg.h>
#include <errno.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mcp/schema_istio.h>

#include "config_notes.h"
#include "mutate.h"
#include "files.h"
#include "loader/config_internal.h"

/* ------------------------------------------------------------------ */
/* Failing allocator (the test is linked with --wrap=malloc etc.)      */
/* ------------------------------------------------------------------ */

void *__real_malloc(size_t size);
void *__real_calloc(size_t nmemb, size_t size);
void *__real_realloc(void *ptr, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t nmemb, size_t size);
void *__wrap_realloc(void *ptr, size_t size);

static long alloc_countdown = -1; /* fail when it reaches 0; -1: never */

static int fail_now(void) {
  if (alloc_countdown < 0)
    return 0;
  return alloc_countdown-- == 0;
}
void *__wrap_malloc(size_t size) {
  return fail_now() ? NULL : __real_malloc(size);
}
void *__wrap_calloc(size_t nmemb, size_t size) {
  return fail_now() ? NULL : __real_calloc(nmemb, size);
}
void *__wrap_realloc(void *ptr, size_t size) {
  return fail_now() ? NULL : __real_realloc(ptr, size);
}

/* ------------------------------------------------------------------ */
/* Fixture: a temporary directory, the Istio schema, reports           */
/* ------------------------------------------------------------------ */

typedef struct report {
  char path[512];
  unsigned long line;
  char msg[512];
} report;

static char dir[64];
static report reps[64];
static int nreps;
static mcp_schema *schema;
static mcpcfg_kind_type kinds[32];
static size_t nkinds;

static void on_report(const char *path, unsigned long line, const char *msg,
                      void *user_data) {
  (void)user_data;
  if (nreps < 64) {
    snprintf(reps[nreps].path, sizeof reps[nreps].path, "%s", path);
    reps[nreps].line = line;
    snprintf(reps[nreps].msg, sizeof reps[nreps].msg, "%s", msg);
  }
  nreps++;
}

static void rm_rf(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      char sub[1024];
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
        continue;
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      rm_rf(sub);
    }
    if (d)
      closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

/* The kinds mcp-source gives the loader by default: Istio 1.6's. */
static void istio_kinds(void) {
  size_t n;
  const mcp_schema_istio_kind *t = mcp_schema_istio_kinds(&n);
  ck_assert_uint_le(n, 30);
  for (nkinds = 0; nkinds < n; nkinds++) {
    kinds[nkinds].api_version = t[nkinds].api_version;
    kinds[nkinds].kind = t[nkinds].kind;
    kinds[nkinds].message = t[nkinds].message;
  }
}

static void setup(void) {
  alloc_countdown = -1;
  nreps = 0;
  nnotes = 0;
  strcpy(dir, "/tmp/mcpcfg-typed-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  mcp_schema_error err;
  ck_assert_int_eq(mcp_schema_new(&schema, NULL), 0);
  ck_assert_int_eq(mcp_schema_add_istio(schema, &err), 0);
  istio_kinds();
}

static void teardown(void) {
  alloc_countdown = -1;
  mcp_schema_free(schema);
  schema = NULL;
  rm_rf(dir);
}

static void path_of(const char *rel, char *out, size_t size) {
  snprintf(out, size, "%s/%s", dir, rel);
}

static void put(const char *rel, const char *content) {
  char p[1024];
  path_of(rel, p, sizeof p);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fputs(content, f) >= 0, 1);
  ck_assert_int_eq(fclose(f), 0);
}

static void typed_options(mcpcfg_options *o) {
  mcpcfg_options_default(o);
  o->report = on_report;
  o->schema = schema;
  o->kinds = kinds;
  o->nkinds = nkinds;
  o->note = on_note;
  o->builtin = kinds; /* Istio's groups, as mcp-source says */
  o->nbuiltin = nkinds;
}

static mcpcfg_loader *new_loader(const mcpcfg_options *o) {
  mcpcfg_loader *l = NULL;
  ck_assert_int_eq(mcpcfg_loader_new(&l, dir, o), 0);
  return l;
}

static mcpcfg_loader *load_typed(void) {
  mcpcfg_options o;
  typed_options(&o);
  mcpcfg_loader *l = new_loader(&o);
  ck_assert_int_ge(mcpcfg_loader_scan(l), 0);
  return l;
}

static int has_report(const char *rel, unsigned long line, const char *text) {
  char p[1024];
  path_of(rel, p, sizeof p);
  for (int i = 0; i < nreps && i < 64; i++)
    if (!strcmp(reps[i].path, p) && (line == 0 || reps[i].line == line) &&
        strstr(reps[i].msg, text))
      return 1;
  return 0;
}

static void print_reports(void) {
  for (int i = 0; i < nreps && i < 64; i++)
    fprintf(stderr, "report %s:%lu: %s\n", reps[i].path, reps[i].line,
            reps[i].msg);
}

/* The body of |r| as compact proto3 JSON of its type URL's message. */
static char *json_of(const mcp_resource *r) {
  char *json = NULL;
  size_t len = 0;
  mcp_schema_error err;
  int rv = mcp_schema_to_json(schema, mcp_schema_type_name(r->type_url),
                              r->body, r->body_len, 0, &json, &len, &err);
  ck_assert_msg(rv == 0, "to_json: %s", err.message);
  return json;
}

static void assert_body_json(const mcp_resource *r, const char *want) {
  char *json = json_of(r);
  ck_assert_str_eq(json, want);
  mcp_schema_free_bytes(schema, json);
}

#define VS_COLL "istio/networking/v1alpha3/virtualservices"
#define VS_URL "type.googleapis.com/istio.networking.v1alpha3.VirtualService"

/* A VirtualService with a weighted route: weight 1 on line 13, weight 2
 * on line 15. */
#define VS_WEIGHTS(w1, w2)                                                   \
  "apiVersion: networking.istio.io/v1alpha3\n"                               \
  "kind: VirtualService\n"                                                   \
  "metadata:\n"                                                              \
  "  name: reviews\n"                                                        \
  "  namespace: bookinfo\n"                                                  \
  "spec:\n"                                                                  \
  "  hosts: [reviews]\n"                                                     \
  "  http:\n"                                                                \
  "  - route:\n"                                                             \
  "    - destination:\n"                                                     \
  "        host: reviews\n"                                                  \
  "        subset: v1\n"                                                     \
  "      weight: " w1 "\n"                                                   \
  "    - destination: {host: reviews, subset: v2}\n"                         \
  "      weight: " w2 "\n"

/* ------------------------------------------------------------------ */
/* Typed bodies                                                        */
/* ------------------------------------------------------------------ */

START_TEST(test_istio_kind_body_is_its_message) {
  put("vs.yaml", VS_WEIGHTS("75", "25"));
  mcpcfg_loader *l = load_typed();
  print_reports();
  ck_assert_int_eq(nreps, 0);
  const mcp_resource *r = mcpcfg_loader_find(l, VS_COLL, "bookinfo/reviews");
  ck_assert_ptr_nonnull(r);
  ck_assert_str_eq(r->type_url, VS_URL);
  assert_body_json(r, "{\"hosts\":[\"reviews\"],\"http\":[{\"route\":["
                      "{\"destination\":{\"host\":\"reviews\",\"subset\":"
                      "\"v1\"},\"weight\":75},{\"destination\":{\"host\":"
                      "\"reviews\",\"subset\":\"v2\"},\"weight\":25}]}]}");
  mcpcfg_loader_del(l);
}
END_TEST

/* Istio's newer API versions are the same types (issue 24 item 3):
 * typed, and in the canonical collection, where MCP and xDS clients of
 * either spelling find them. */
START_TEST(test_newer_istio_versions_are_typed_in_the_canonical_collection) {
  put("v1.yaml", "apiVersion: networking.istio.io/v1\n"
                 "kind: VirtualService\n"
                 "metadata: {name: a, namespace: ns}\n"
                 "spec: {hosts: [ab]}\n"
                 "---\n"
                 "apiVersion: networking.istio.io/v1beta1\n"
                 "kind: Gateway\n"
                 "metadata: {name: g, namespace: ns}\n"
                 "spec: {selector: {k: v}}\n"
                 "---\n"
                 "apiVersion: security.istio.io/v1\n"
                 "kind: AuthorizationPolicy\n"
                 "metadata: {name: p, namespace: ns}\n"
                 "spec: {action: DENY}\n");
  mcpcfg_loader *l = load_typed();
  print_reports();
  ck_assert_int_eq(nreps, 0);
  const mcp_resource *r = mcpcfg_loader_find(l, VS_COLL, "ns/a");
  ck_assert_ptr_nonnull(r);
  ck_assert_str_eq(r->type_url, VS_URL);
  assert_body_json(r, "{\"hosts\":[\"ab\"]}");
  r = mcpcfg_loader_find(l, "istio/networking/v1alpha3/gateways", "ns/g");
  ck_assert_ptr_nonnull(r);
  ck_assert_str_eq(r->type_url,
                   "type.googleapis.com/istio.networking.v1alpha3.Gateway");
  r = mcpcfg_loader_find(l, "istio/security/v1beta1/authorizationpolicies",
                         "ns/p");
  ck_assert_ptr_nonnull(r);
  ck_assert_str_eq(r->type_url, "type.googleapis.com/"
                                "istio.security.v1beta1.AuthorizationPolicy");
  assert_body_json(r, "{\"action\":\"DENY\"}");
  mcpcfg_loader_del(l);
}
END_TEST

/* Hand-checked wire bytes: VirtualService.hosts is field 1 (string),
 * Gateway.selector field 2 (map<string,string>). */
START_TEST(test_typed_body_bytes_are_the_protobuf_encoding) {
  put("vs.yaml", "apiVersion: networking.istio.io/v1alpha3\n"
                 "kind: VirtualService\n"
                 "metadata: {name: a}\n"
                 "spec: {hosts: [ab]}\n"
                 "---\n"
                 "apiVersion: networking.istio.io/v1alpha3\n"
                 "kind: Gateway\n"
                 "metadata: {name: g}\n"
                 "spec: {selector: {k: v}}\n");
  mcpcfg_loader *l = load_typed();
  ck_assert_int_eq(nreps, 0);
  const mcp_resource *r = mcpcfg_loader_find(l, VS_COLL, "a");
  static const uint8_t vs[] = {0x0a, 0x02, 'a', 'b'};
  ck_assert_uint_eq(r->body_len, sizeof vs);
  ck_assert_mem_eq(r->body, vs, sizeof vs);
  r = mcpcfg_loader_find(l, "istio/networking/v1alpha3/gateways", "g");
  ck_assert_str_eq(r->type_url,
                   "type.googleapis.com/istio.networking.v1alpha3.Gateway");
  static const uint8_t gw[] = {0x12, 0x06, 0x0a, 0x01, 'k', 0x12, 0x01, 'v'};
  ck_assert_uint_eq(r->body_len, sizeof gw);
  ck_assert_mem_eq(r->body, gw, sizeof gw);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_every_istio_kind_is_typed_with_its_type_url) {
  size_t n;
  const mcp_schema_istio_kind *t = mcp_schema_istio_kinds(&n);
  char doc[512];
  for (size_t i = 0; i < n; i++) {
    snprintf(doc, sizeof doc,
             "apiVersion: %s\nkind: %s\nmetadata: {name: x, namespace: ns}\n"
             "spec: {}\n",
             t[i].api_version, t[i].kind);
    char rel[64];
    snprintf(rel, sizeof rel, "k%zu.yaml", i);
    put(rel, doc);
  }
  mcpcfg_loader *l = load_typed();
  print_reports();
  ck_assert_int_eq(nreps, 0);
  for (size_t i = 0; i < n; i++) {
    const mcp_resource *r = mcpcfg_loader_find(l, t[i].collection, "ns/x");
    ck_assert_msg(r != NULL, "no %s", t[i].collection);
    char url[256];
    snprintf(url, sizeof url, "type.googleapis.com/%s", t[i].message);
    ck_assert_str_eq(r->type_url, url);
    ck_assert_uint_eq(r->body_len, 0); /* empty message */
  }
  mcpcfg_loader_del(l);
}
END_TEST

/* The table's collections are those the naming rule gives, and its
 * messages are in the built-in set. */
START_TEST(test_istio_table_agrees_with_naming_rule_and_descriptors) {
  size_t n;
  const mcp_schema_istio_kind *t = mcp_schema_istio_kinds(&n);
  ck_assert_uint_eq(n, 10);
  for (size_t i = 0; i < n; i++) {
    char *c = NULL;
    ck_assert_int_eq(mcpcfg_collection_for(t[i].api_version, t[i].kind, &c),
                     0);
    ck_assert_str_eq(c, t[i].collection);
    free(c);
    ck_assert_msg(mcp_schema_has_message(schema, t[i].message), "%s",
                  t[i].message);
  }
}
END_TEST

START_TEST(test_wrong_type_is_reported_with_file_line_and_field_path) {
  put("vs.yaml", VS_WEIGHTS("75", "x"));
  mcpcfg_loader *l = load_typed();
  print_reports();
  ck_assert_int_eq(nreps, 1);
  ck_assert(has_report("vs.yaml", 15,
                       "spec.http[0].route[1].weight: expected an integer, "
                       "got \"x\""));
  ck_assert(has_report("vs.yaml", 15, "document skipped"));
  ck_assert_ptr_null(mcpcfg_loader_find(l, VS_COLL, "bookinfo/reviews"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_unknown_field_enum_and_range_are_reported) {
  put("dr.yaml", "apiVersion: networking.istio.io/v1alpha3\n"
                 "kind: DestinationRule\n"
                 "metadata: {name: a}\n"
                 "spec:\n"
                 "  host: reviews\n"
                 "  trafficPolicy:\n"
                 "    loadBalancer:\n"
                 "      simple: FASTEST\n"
                 "---\n"
                 "apiVersion: networking.istio.io/v1alpha3\n"
                 "kind: DestinationRule\n"
                 "metadata: {name: b}\n"
                 "spec:\n"
                 "  host: reviews\n"
                 "  hostz: typo\n"
                 "---\n"
                 "apiVersion: networking.istio.io/v1alpha3\n"
                 "kind: DestinationRule\n"
                 "metadata: {name: c}\n"
                 "spec:\n"
                 "  host: reviews\n"
                 "  trafficPolicy:\n"
                 "    connectionPool: {tcp: {maxConnections: 5000000000}}\n"
                 "---\n"
                 "apiVersion: networking.istio.io/v1alpha3\n"
                 "kind: DestinationRule\n"
                 "metadata: {name: good}\n"
                 "spec: {host: reviews}\n");
  mcpcfg_loader *l = load_typed();
  print_reports();
  ck_assert_int_eq(nreps, 3);
  ck_assert(has_report("dr.yaml", 8,
                       "spec.trafficPolicy.loadBalancer.simple"));
  ck_assert(has_report("dr.yaml", 8, "FASTEST"));
  ck_assert(has_report("dr.yaml", 15, "spec.hostz"));
  ck_assert(has_report("dr.yaml", 23,
                       "spec.trafficPolicy.connectionPool.tcp.maxConnections"));
  const char *coll = "istio/networking/v1alpha3/destinationrules";
  ck_assert_ptr_null(mcpcfg_loader_find(l, coll, "a"));
  ck_assert_ptr_null(mcpcfg_loader_find(l, coll, "b"));
  ck_assert_ptr_null(mcpcfg_loader_find(l, coll, "c"));
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, coll, "good"));
  mcpcfg_loader_del(l);
}
END_TEST

/* As for a YAML error: a broken edit keeps the last good content. */
START_TEST(test_bad_edit_keeps_the_last_good_typed_content) {
  put("vs.yaml", VS_WEIGHTS("75", "25"));
  mcpcfg_loader *l = load_typed();
  ck_assert_int_eq(nreps, 0);
  char v[32];
  snprintf(v, sizeof v, "%s",
           mcpcfg_loader_find(l, VS_COLL, "bookinfo/reviews")->version);
  put("vs.yaml", VS_WEIGHTS("75", "\"lots\""));
  mcpcfg_loader_set_racy_ns(l, 0);
  ck_assert_int_ge(mcpcfg_loader_scan(l), 0);
  print_reports();
  ck_assert(has_report("vs.yaml", 15, "spec.http[0].route[1].weight"));
  const mcp_resource *r = mcpcfg_loader_find(l, VS_COLL, "bookinfo/reviews");
  ck_assert_ptr_nonnull(r);
  ck_assert_str_eq(r->version, v);
  ck_assert_str_eq(r->type_url, VS_URL);
  char *json = json_of(r);
  ck_assert_ptr_nonnull(strstr(json, "\"weight\":25"));
  mcp_schema_free_bytes(schema, json);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_kind_without_schema_keeps_the_struct_body) {
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n"
                 "data: {anything: goes, n: 1}\n");
  mcpcfg_loader *l = load_typed();
  ck_assert_int_eq(nreps, 0);
  const mcp_resource *r = mcpcfg_loader_find(l, "k8s/core/v1/configmaps", "cfg");
  ck_assert_str_eq(r->type_url, MCPCFG_STRUCT_TYPE_URL);
  assert_body_json(r, "{\"anything\":\"goes\",\"n\":1}");
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_force_struct_keeps_struct_bodies_for_istio_kinds) {
  put("vs.yaml", VS_WEIGHTS("75", "x")); /* fine for a Struct */
  mcpcfg_options o;
  typed_options(&o);
  o.force_struct = 1;
  mcpcfg_loader *l = new_loader(&o);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(nreps, 0);
  const mcp_resource *r = mcpcfg_loader_find(l, VS_COLL, "bookinfo/reviews");
  ck_assert_str_eq(r->type_url, MCPCFG_STRUCT_TYPE_URL);
  mcpcfg_loader_del(l);
}
END_TEST

/* --kind GROUP/VERSION/KIND=message: any kind, any message of the pool;
 * the first match wins over the built-in table after it. */
START_TEST(test_user_kind_maps_a_kind_to_a_message) {
  mcpcfg_kind_type user[2] = {
      {"example.com/v1", "Door", "istio.networking.v1alpha3.Gateway"},
      {"networking.istio.io/v1alpha3", "VirtualService",
       "istio.networking.v1alpha3.Sidecar"}};
  memmove(kinds + 2, kinds, nkinds * sizeof *kinds);
  memcpy(kinds, user, sizeof user);
  nkinds += 2;
  put("d.yaml", "apiVersion: example.com/v1\nkind: Door\n"
                "metadata: {name: d}\nspec: {servers: [{hosts: [a]}]}\n"
                "---\n"
                "apiVersion: networking.istio.io/v1alpha3\n"
                "kind: VirtualService\nmetadata: {name: s}\n"
                "spec: {egress: [{hosts: [\"./*\"]}]}\n");
  mcpcfg_loader *l = load_typed();
  print_reports();
  ck_assert_int_eq(nreps, 0);
  const mcp_resource *r = mcpcfg_loader_find(l, "k8s/example.com/v1/doors", "d");
  ck_assert_str_eq(r->type_url,
                   "type.googleapis.com/istio.networking.v1alpha3.Gateway");
  assert_body_json(r, "{\"servers\":[{\"hosts\":[\"a\"]}]}");
  r = mcpcfg_loader_find(l, VS_COLL, "s");
  ck_assert_str_eq(r->type_url,
                   "type.googleapis.com/istio.networking.v1alpha3.Sidecar");
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_kind_whose_message_is_not_in_the_schema_is_refused) {
  mcpcfg_kind_type k = {"example.com/v1", "Door", "example.v1.Door"};
  mcpcfg_options o;
  typed_options(&o);
  o.kinds = &k;
  o.nkinds = 1;
  mcpcfg_loader *l = NULL;
  ck_assert_int_eq(mcpcfg_loader_new(&l, dir, &o), MCPCFG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(l);
  o.force_struct = 1; /* no typed bodies: nothing to check */
  ck_assert_int_eq(mcpcfg_loader_new(&l, dir, &o), 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_typed_version_changes_with_content_not_key_order) {
  put("vs.yaml", VS_WEIGHTS("75", "25"));
  mcpcfg_loader *l = load_typed();
  mcpcfg_loader_set_racy_ns(l, 0);
  char v1[32], v2[32];
  snprintf(v1, sizeof v1, "%s",
           mcpcfg_loader_find(l, VS_COLL, "bookinfo/reviews")->version);
  put("vs.yaml", VS_WEIGHTS("70", "30"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  snprintf(v2, sizeof v2, "%s",
           mcpcfg_loader_find(l, VS_COLL, "bookinfo/reviews")->version);
  ck_assert_str_ne(v1, v2);
  /* The same content, keys reordered and a comment: the same version. */
  put("vs.yaml", "# reordered\n"
                 "kind: VirtualService\n"
                 "apiVersion: networking.istio.io/v1alpha3\n"
                 "metadata: {namespace: bookinfo, name: reviews}\n"
                 "spec:\n"
                 "  http:\n"
                 "  - route:\n"
                 "    - weight: 70\n"
                 "      destination: {subset: v1, host: reviews}\n"
                 "    - {weight: 30, destination: {host: reviews, subset: v2}}\n"
                 "  hosts: [reviews]\n");
  ck_assert_int_ge(mcpcfg_loader_scan(l), 0);
  ck_assert_int_eq(nreps, 0);
  ck_assert_str_eq(mcpcfg_loader_find(l, VS_COLL, "bookinfo/reviews")->version,
                   v2);
  /* The same spec as a Struct is another resource: another version. */
  mcpcfg_options o;
  typed_options(&o);
  o.force_struct = 1;
  mcpcfg_loader *ls = new_loader(&o);
  ck_assert_int_eq(mcpcfg_loader_scan(ls), 1);
  ck_assert_str_ne(mcpcfg_loader_find(ls, VS_COLL, "bookinfo/reviews")->version,
                   v2);
  mcpcfg_loader_del(ls);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_aliases_in_a_typed_body_are_expanded) {
  put("vs.yaml", "apiVersion: networking.istio.io/v1alpha3\n"
                 "kind: VirtualService\n"
                 "metadata: {name: a}\n"
                 "spec:\n"
                 "  hosts: [reviews]\n"
                 "  http:\n"
                 "  - route: &r\n"
                 "    - destination: {host: reviews}\n"
                 "  - route: *r\n");
  mcpcfg_loader *l = load_typed();
  ck_assert_int_eq(nreps, 0);
  assert_body_json(mcpcfg_loader_find(l, VS_COLL, "a"),
                   "{\"hosts\":[\"reviews\"],\"http\":[{\"route\":[{"
                   "\"destination\":{\"host\":\"reviews\"}}]},{\"route\":[{"
                   "\"destination\":{\"host\":\"reviews\"}}]}]}");
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_document_without_spec_gets_an_empty_typed_body) {
  put("vs.yaml", "apiVersion: networking.istio.io/v1alpha3\n"
                 "kind: VirtualService\nmetadata: {name: a}\n"
                 "---\n"
                 "apiVersion: networking.istio.io/v1alpha3\n"
                 "kind: VirtualService\nmetadata: {name: b}\nspec: null\n");
  mcpcfg_loader *l = load_typed();
  ck_assert_int_eq(nreps, 0);
  for (int i = 0; i < 2; i++) {
    const mcp_resource *r = mcpcfg_loader_find(l, VS_COLL, i ? "b" : "a");
    ck_assert_str_eq(r->type_url, VS_URL);
    ck_assert_uint_eq(r->body_len, 0);
  }
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_example_config_loads_typed_without_reports) {
  mcpcfg_loader *l = NULL;
  mcpcfg_options o;
  typed_options(&o);
  ck_assert_int_eq(mcpcfg_loader_new(&l, MCPCFG_EXAMPLES_DIR, &o), 0);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  print_reports();
  ck_assert_int_eq(nreps, 0);
  ck_assert_int_eq(nnotes, 0); /* no kind taken for a typo */
  size_t typed = 0;
  for (size_t i = 0; i < mcpcfg_loader_collection_count(l); i++) {
    const mcp_resource *r;
    size_t n = mcpcfg_loader_resources(l, i, &r);
    for (size_t j = 0; j < n; j++)
      if (strcmp(r[j].type_url, MCPCFG_STRUCT_TYPE_URL) != 0) {
        typed++;
        mcp_schema_free_bytes(schema, json_of(&r[j])); /* decodes */
      }
  }
  ck_assert_uint_ge(typed, 7);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(
      l, "istio/security/v1beta1/authorizationpolicies", "bookinfo/reviews-viewer"));
  mcpcfg_loader_del(l);
}
END_TEST

/* ---- specs encoded as they are read (issue 25) ---------------------- */

/* What one reading of a file gives: reports and notes in order, as text. */
typedef struct said {
  char *p;
  size_t len, cap;
} said;

static void say(said *w, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  ck_assert_int_ge(n, 0);
  size_t k = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
  if (w->len + k + 1 > w->cap) {
    w->cap = 2 * (w->len + k + 1);
    w->p = __real_realloc(w->p, w->cap);
    ck_assert_ptr_nonnull(w->p);
  }
  memcpy(w->p + w->len, line, k + 1);
  w->len += k;
}

static void said_report(const char *path, unsigned long line, const char *msg, void *ud) {
  say(ud, "R %s:%lu %s\n", path, line, msg);
}

static void said_note(int what, const char *path, unsigned long line, const char *msg,
                      void *ud) {
  say(ud, "N%d %s:%lu %s\n", what, path, line, msg);
}

/* Typed options whose reports and notes go to |w|. */
static void said_options(mcpcfg_options *o, said *w) {
  typed_options(o);
  o->report = said_report;
  o->note = said_note;
  o->user_data = w;
}

/* Parses |text| as it is read and from trees only; both give the same
 * result, documents (bytes of the body included), reports and notes.
 * Returns 1 when the file had a typed document. */
static size_t g_max_nodes, g_max_bytes; /* 0: the defaults */
static unsigned g_max_depth;

static int same_both_ways(const char *text, size_t len) {
  said w[2] = {{0}, {0}};
  mcpcfg_doc **docs[2] = {NULL, NULL};
  size_t nd[2] = {0, 0}, nbad[2] = {0, 0};
  int rv[2];
  for (int k = 0; k < 2; k++) {
    mcpcfg_options o;
    said_options(&o, &w[k]);
    o.tree_only = k;
    if (g_max_nodes)
      o.max_nodes = g_max_nodes;
    if (g_max_bytes)
      o.max_file_size = g_max_bytes;
    if (g_max_depth)
      o.max_depth = g_max_depth;
    rv[k] = mcpcfg_parse(&o, "f.yaml", (const unsigned char *)text, len, &docs[k], &nd[k],
                         &nbad[k]);
  }
  ck_assert_msg(rv[0] == rv[1] && nd[0] == nd[1] && nbad[0] == nbad[1],
                "as read: %d, %zu docs, %zu bad; trees: %d, %zu, %zu:\n%.*s", rv[0], nd[0],
                nbad[0], rv[1], nd[1], nbad[1], (int)len, text);
  ck_assert_msg(w[0].len == w[1].len && (!w[0].len || !memcmp(w[0].p, w[1].p, w[0].len)),
                "as read, said:\n%s\nfrom trees:\n%s\nof:\n%.*s", w[0].p ? w[0].p : "",
                w[1].p ? w[1].p : "", (int)len, text);
  int typed = 0;
  for (size_t i = 0; i < nd[0]; i++) {
    const mcp_resource *a = &docs[0][i]->res, *b = &docs[1][i]->res;
    ck_assert_str_eq(docs[0][i]->collection, docs[1][i]->collection);
    ck_assert_str_eq(a->name, b->name);
    ck_assert_str_eq(a->version, b->version);
    ck_assert_str_eq(a->type_url, b->type_url);
    ck_assert_msg(a->body_len == b->body_len &&
                      (!a->body_len || !memcmp(a->body, b->body, a->body_len)),
                  "document %zu: other body bytes:\n%.*s", i, (int)len, text);
    typed |= strcmp(a->type_url, MCPCFG_STRUCT_TYPE_URL) != 0;
  }
  for (int k = 0; k < 2; k++) {
    for (size_t i = 0; i < nd[k]; i++)
      mcpcfg_doc_unref(docs[k][i]);
    free(docs[k]);
    free(w[k].p);
  }
  return typed;
}

/* Each single-byte change of |text|: a few replacements, the deletion. */
static void mutated(void *ctx, const char *m, size_t n) {
  (void)ctx;
  same_both_ways(m, n);
}

static void same_mutated(const char *text) {
  each_byte_change(text, strlen(text), " :-{}[]x1\n'#&*!", mutated, NULL);
}

/* One example file read both ways (walk_files()). */
static size_t same_file(void *ctx, const char *path) {
  (void)ctx;
  size_t n;
  char *buf = slurp(path, &n);
  ck_assert_ptr_nonnull(buf);
  size_t typed = same_both_ways(buf, n);
  free(buf);
  return typed;
}

static size_t same_dir(const char *path) { return walk_files(path, same_file, NULL); }

/* A typed spec is encoded as the file is read, with no tree; where the
 * encoder gives up the file is read again from trees. Either way the
 * documents, their bytes, and what is reported are the same: on the
 * examples, on documents where the encoder must give up (errors, Struct
 * patches, aliases, a spec before its kind, limits), and on every
 * single-byte change of two of them. */
START_TEST(test_specs_encoded_as_read_equal_the_trees) {
  static const char *const files[] = {
      "apiVersion: networking.istio.io/v1alpha3\nkind: VirtualService\n"
      "metadata: {name: a, namespace: n}\nspec:\n  hosts: [b, a]\n  http:\n"
      "  - route:\n    - destination: {host: a}\n      weight: 3\n    timeout: 2s\n",
      /* spec before kind: from the tree */
      "spec: {hosts: [a]}\napiVersion: networking.istio.io/v1alpha3\n"
      "kind: VirtualService\nmetadata: {name: a}\n",
      /* errors in the spec, reported once */
      "apiVersion: networking.istio.io/v1alpha3\nkind: VirtualService\n"
      "metadata: {name: a}\nspec:\n  hosts: 3\n  nope: 1\n  http: [{timeout: 1x}]\n",
      /* a Struct patch (EnvoyFilter) */
      "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: e}\n"
      "spec:\n  configPatches:\n  - applyTo: HTTP_FILTER\n    patch:\n      operation: MERGE\n"
      "      value: {name: x, typed_config: {a: [1, 2]}}\n",
      /* aliases, a tag, a duplicate key, a null spec, two documents */
      "apiVersion: networking.istio.io/v1alpha3\nkind: Gateway\nmetadata: {name: g}\n"
      "spec:\n  selector: &s {istio: ingressgateway}\n  servers: []\n---\n"
      "apiVersion: networking.istio.io/v1alpha3\nkind: Gateway\nmetadata: {name: h}\n"
      "spec: !!map {servers: []}\n---\n"
      "apiVersion: networking.istio.io/v1alpha3\nkind: Gateway\nmetadata: {name: i}\n"
      "spec: {servers: [], servers: []}\n---\n"
      "apiVersion: networking.istio.io/v1alpha3\nkind: Gateway\nmetadata: {name: j}\nspec:\n",
      /* a bad document before a good one; metadata after spec */
      "apiVersion: networking.istio.io/v1alpha3\nkind: DestinationRule\nmetadata: {}\n"
      "spec: {host: a}\n---\napiVersion: networking.istio.io/v1alpha3\n"
      "kind: DestinationRule\nspec: {host: b, trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}}\n"
      "metadata: {name: b, labels: {x: y}}\n",
      /* a report held, then a document the scanner leaves to libyaml (a
       * tag): the reading starts again and reports it once */
      "apiVersion: networking.istio.io/v1alpha3\nkind: DestinationRule\nmetadata: {}\n"
      "spec: {host: a}\n---\napiVersion: networking.istio.io/v1alpha3\n"
      "kind: DestinationRule\nmetadata: {name: b}\nspec: {host: !!str b}\n",
      /* a NUL in a spec's string (the loader refuses it, the encoder would not) */
      "apiVersion: networking.istio.io/v1alpha3\nkind: VirtualService\nmetadata: {name: a}\n"
      "spec: {hosts: [\"a\\0b\"]}\n",
      /* a kind of a built-in group that does not exist (a note) */
      "apiVersion: networking.istio.io/v1alpha3\nkind: VirtualServic\nmetadata: {name: a}\n"
      "spec: {hosts: [a]}\n",
  };
  for (size_t i = 0; i < sizeof files / sizeof *files; i++)
    same_both_ways(files[i], strlen(files[i]));
  ck_assert_uint_ge(same_dir(MCPCFG_EXAMPLES_DIR), 5);
  /* Limits reached inside a spec: nodes, scalar bytes, depth. */
  for (int lim = 0; lim < 3; lim++) {
    g_max_nodes = lim == 0 ? 12 : 0;
    g_max_bytes = lim == 1 ? 180 : 0;
    g_max_depth = lim == 2 ? 4 : 0;
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
      same_both_ways(files[i], strlen(files[i]));
    same_dir(MCPCFG_EXAMPLES_DIR);
  }
  g_max_nodes = g_max_bytes = 0;
  g_max_depth = 0;
  same_mutated(files[0]);
  same_mutated(files[5]);
}
END_TEST

/* Writes file |i| of the threaded-scan test, in generation |gen|: typed
 * documents, bad ones, Struct kinds, broken YAML, a name defined twice, a
 * kind that is a typo (a note). */
static void put_many(unsigned i, unsigned gen) {
  char rel[64], text[1024];
  snprintf(rel, sizeof rel, "f%03u.yaml", i);
  switch (i % 6) {
  case 0:
  case 1:
    snprintf(text, sizeof text,
             "apiVersion: networking.istio.io/v1alpha3\nkind: VirtualService\n"
             "metadata: {name: vs-%u, namespace: n}\nspec:\n  hosts: [h%u]\n  http:\n"
             "  - route:\n    - destination: {host: h%u}\n      weight: %u\n",
             i, gen, i, i % 2 ? 100 : gen);
    break;
  case 2:
    snprintf(text, sizeof text,
             "apiVersion: networking.istio.io/v1alpha3\nkind: DestinationRule\n"
             "metadata: {name: dr-%u}\nspec: {host: h, trafficPolicy: {loadBalancer: "
             "{simple: %s}}}\n",
             i, gen % 2 ? "FASTEST" : "ROUND_ROBIN");
    break;
  case 3:
    snprintf(text, sizeof text, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%u}\n"
             "data: {k: v%u}\n", i, gen);
    break;
  case 4:
    snprintf(text, sizeof text, i % 4 ? "bad: [%u\n" :
             "apiVersion: networking.istio.io/v1alpha3\nkind: VirtualServic\n"
             "metadata: {name: typo-%u}\nspec: {hosts: [a]}\n", i);
    break;
  default:
    snprintf(text, sizeof text,
             "apiVersion: networking.istio.io/v1alpha3\nkind: Gateway\n"
             "metadata: {name: same}\nspec: {servers: []}\n---\n"
             "apiVersion: networking.istio.io/v1alpha3\nkind: Gateway\n"
             "metadata: {name: g-%u}\nspec: {selector: {x: '%u'}}\n", i, gen);
  }
  put(rel, text);
}

static void same_views(mcpcfg_loader *a, mcpcfg_loader *b) {
  ck_assert_uint_eq(mcpcfg_loader_collection_count(a), mcpcfg_loader_collection_count(b));
  for (size_t c = 0; c < mcpcfg_loader_collection_count(a); c++) {
    ck_assert_str_eq(mcpcfg_loader_collection_name(a, c), mcpcfg_loader_collection_name(b, c));
    const mcp_resource *ra, *rb;
    size_t n = mcpcfg_loader_resources(a, c, &ra);
    ck_assert_uint_eq(mcpcfg_loader_resources(b, c, &rb), n);
    for (size_t j = 0; j < n; j++) {
      ck_assert_str_eq(ra[j].name, rb[j].name);
      ck_assert_str_eq(ra[j].version, rb[j].version);
      ck_assert(ra[j].body_len == rb[j].body_len &&
                (!ra[j].body_len || !memcmp(ra[j].body, rb[j].body, ra[j].body_len)));
    }
  }
}

/* A scan of many files reads them on several threads; the view and what
 * is reported and noted (on the caller's thread, in path order) are the
 * same as with one thread, on a first scan and on a rescan that reads
 * half of them again. */
/* A thread start that fails from the |start_ok|-th on (as pthread_create()
 * does when the process may not have more threads). */
static unsigned start_ok, started;

static int start_some(pthread_t *tid, void *(*fn)(void *), void *arg) {
  if (started >= start_ok)
    return EAGAIN;
  started++;
  return pthread_create(tid, NULL, fn, arg);
}

/* Four threads asked for (the scanning thread and three more): all three,
 * two, one or none of them started (the others could not be made); the
 * threads that started and the scanning thread read what they leave. */
START_TEST(test_many_files_read_on_threads_give_what_one_thread_gives) {
  const unsigned n = 150;
  for (unsigned i = 0; i < n; i++)
    put_many(i, 1);
  enum { K = 5 };
  static const unsigned ok[K] = {0, 3, 2, 1, 0}; /* [0]: one thread asked */
  said w[K];
  memset(w, 0, sizeof w);
  mcpcfg_loader *l[K];
  for (int k = 0; k < K; k++) {
    mcpcfg_options o;
    said_options(&o, &w[k]);
    o.load_threads = k ? 4 : 1;
    o.start_thread = k ? start_some : NULL;
    start_ok = ok[k];
    started = 0;
    l[k] = new_loader(&o);
    mcpcfg_loader_set_racy_ns(l[k], 0);
    ck_assert_int_eq(mcpcfg_loader_scan(l[k]), 1);
    ck_assert_uint_eq(started, ok[k]);
  }
  ck_assert_uint_gt(w[0].len, 0);
  for (int k = 1; k < K; k++) {
    ck_assert_msg(w[0].len == w[k].len && !memcmp(w[0].p, w[k].p, w[0].len),
                  "one thread said:\n%s\n%u of four said:\n%s", w[0].p, ok[k], w[k].p);
    same_views(l[0], l[k]);
  }
  for (unsigned i = 0; i < n; i += 2) /* 75 files: threads again */
    put_many(i, 2);
  for (int k = 0; k < K; k++) {
    w[k].len = 0;
    start_ok = ok[k];
    started = 0;
    ck_assert_int_eq(mcpcfg_loader_scan(l[k]), 1);
  }
  for (int k = 1; k < K; k++) {
    ck_assert_msg(w[0].len == w[k].len && !memcmp(w[0].p, w[k].p, w[0].len),
                  "one thread said:\n%s\n%u of four said:\n%s", w[0].p, ok[k], w[k].p);
    same_views(l[0], l[k]);
  }
  for (int k = 0; k < K; k++) {
    mcpcfg_loader_del(l[k]);
    free(w[k].p);
  }
}
END_TEST

/* A DestinationRule's head, up to its trafficPolicy (line 6). */
#define DR_REVIEWS_POLICY                                                    \
  "apiVersion: networking.istio.io/v1alpha3\n"                               \
  "kind: DestinationRule\n"                                                  \
  "metadata: {name: reviews}\n"                                              \
  "spec:\n"                                                                  \
  "  host: reviews\n"                                                        \
  "  trafficPolicy:\n"

/* Istio's documentation writes Go durations (30ms, 5m, 15m, 1.5h): they
 * load as the Durations Istio reads, in proto3's form. */
START_TEST(test_go_durations_load_as_istio_reads_them) {
  put("dr.yaml", DR_REVIEWS_POLICY
                 "    connectionPool:\n"
                 "      tcp: {connectTimeout: 30ms}\n"
                 "      http: {idleTimeout: 1.5h}\n"
                 "    outlierDetection: {interval: 5m, baseEjectionTime: 15m}\n");
  mcpcfg_loader *l = load_typed();
  print_reports();
  ck_assert_int_eq(nreps, 0);
  const mcp_resource *r =
      mcpcfg_loader_find(l, "istio/networking/v1alpha3/destinationrules", "reviews");
  ck_assert_ptr_nonnull(r);
  assert_body_json(r, "{\"host\":\"reviews\",\"trafficPolicy\":{\"connectionPool\":"
                      "{\"tcp\":{\"connectTimeout\":\"0.030s\"},\"http\":{\"idleTimeout\":"
                      "\"5400s\"}},\"outlierDetection\":{\"interval\":\"300s\","
                      "\"baseEjectionTime\":\"900s\"}}}");
  mcpcfg_loader_del(l);
}
END_TEST

/* Three bad durations, one report each at its line, in line order, the
 * last saying the document is skipped: one edit fixes them all. */
START_TEST(test_every_error_of_a_document_is_reported_at_once) {
  put("dr.yaml", DR_REVIEWS_POLICY
                 "    outlierDetection:\n"
                 "      baseEjectionTime: 15 m\n"
                 "      interval: 5mins\n"
                 "    connectionPool:\n"
                 "      tcp: {connectTimeout: 30}\n");
  mcpcfg_loader *l = load_typed();
  print_reports();
  ck_assert_int_eq(nreps, 3);
  ck_assert_uint_eq(reps[0].line, 8);
  ck_assert_str_eq(reps[0].msg, "spec.trafficPolicy.outlierDetection.baseEjectionTime: "
                                "unknown unit \" m\" in duration 15 m (ns, us, ms, s, m, h)");
  ck_assert_uint_eq(reps[1].line, 9);
  ck_assert_str_eq(reps[1].msg, "spec.trafficPolicy.outlierDetection.interval: unknown unit "
                                "\"mins\" in duration 5mins (ns, us, ms, s, m, h)");
  ck_assert_uint_eq(reps[2].line, 11);
  ck_assert_str_eq(reps[2].msg, "spec.trafficPolicy.connectionPool.tcp.connectTimeout: "
                                "expected a duration such as \"1.5s\" or \"300ms\", got 30; "
                                "document skipped");
  ck_assert_ptr_null(
      mcpcfg_loader_find(l, "istio/networking/v1alpha3/destinationrules", "reviews"));
  mcpcfg_loader_del(l);
}
END_TEST

/* Metadata and body problems of one document come together too. */
START_TEST(test_metadata_and_body_errors_are_reported_together) {
  put("vs.yaml", "apiVersion: networking.istio.io/v1alpha3\n"
                 "kind: VirtualService\n"
                 "metadata:\n"
                 "  name: reviews\n"
                 "  labels: {app: [x]}\n"
                 "  creationTimestamp: yesterday\n"
                 "spec:\n"
                 "  hosts: reviews\n");
  mcpcfg_loader *l = load_typed();
  print_reports();
  ck_assert_int_eq(nreps, 3);
  ck_assert(has_report("vs.yaml", 5, "labels 'app' is not a scalar"));
  ck_assert(has_report("vs.yaml", 6, "bad metadata.creationTimestamp 'yesterday'"));
  ck_assert(has_report("vs.yaml", 8, "spec.hosts: expected a list, got \"reviews\"; "
                                     "document skipped"));
  mcpcfg_loader_del(l);
}
END_TEST

/* Beyond 20 errors: the first 20 by line, then "... and N more". */
START_TEST(test_more_than_twenty_errors_end_with_and_n_more) {
  char y[2048] = "apiVersion: networking.istio.io/v1alpha3\n"
                 "kind: VirtualService\n"
                 "metadata: {name: many}\n"
                 "spec:\n"
                 "  hosts:\n";
  for (int i = 0; i < 23; i++)
    strcat(y, "  - 1\n"); /* lines 6 to 28 */
  put("vs.yaml", y);
  mcpcfg_loader *l = load_typed();
  print_reports();
  ck_assert_int_eq(nreps, 21);
  for (int i = 0; i < 20; i++) {
    char want[64];
    snprintf(want, sizeof want, "spec.hosts[%d]: expected a string, got 1", i);
    ck_assert_uint_eq(reps[i].line, (unsigned long)i + 6);
    ck_assert_str_eq(reps[i].msg, want);
  }
  ck_assert_uint_eq(reps[20].line, 1);
  ck_assert_str_eq(reps[20].msg, "... and 3 more; document skipped");
  ck_assert_ptr_null(mcpcfg_loader_find(l, VS_COLL, "many"));
  mcpcfg_loader_del(l);
}
END_TEST

/* A kind that is not one of its built-in group's: served (untyped, as
 * before) with a warning naming the closest kind; not for other groups,
 * nor for a known kind under another version of its group. */
START_TEST(test_unknown_kind_in_a_builtin_group_is_warned) {
  put("a.yaml", "apiVersion: networking.istio.io/v1alpha3\n"
                "kind: VirtualServce\n"
                "metadata: {name: typo}\n"
                "spec: {hosts: [a]}\n"
                "---\n"
                "apiVersion: security.istio.io/v1beta1\n"
                "kind: Banana\n"
                "metadata: {name: far}\n"
                "---\n"
                "apiVersion: example.com/v1\n"
                "kind: VirtualServce\n"
                "metadata: {name: other-group}\n"
                "---\n"
                "apiVersion: networking.istio.io/v1beta1\n"
                "kind: Gateway\n"
                "metadata: {name: other-version}\n");
  mcpcfg_loader *l = load_typed();
  print_reports();
  ck_assert_int_eq(nreps, 0);
  ck_assert_int_eq(nnotes, 2);
  ck_assert_int_eq(notes[0].what, MCPCFG_NOTE_UNKNOWN_KIND);
  ck_assert_uint_eq(notes[0].line, 2);
  ck_assert_str_eq(notes[0].msg, "no kind VirtualServce in networking.istio.io/v1alpha3; "
                                 "did you mean VirtualService? served as an untyped collection");
  ck_assert_int_eq(notes[1].what, MCPCFG_NOTE_UNKNOWN_KIND);
  ck_assert_uint_eq(notes[1].line, 7);
  ck_assert_str_eq(notes[1].msg,
                   "no kind Banana in security.istio.io/v1beta1; served as an untyped collection");
  const mcp_resource *r =
      mcpcfg_loader_find(l, "istio/networking/v1alpha3/virtualservces", "typo");
  ck_assert_ptr_nonnull(r);
  ck_assert_str_eq(r->type_url, MCPCFG_STRUCT_TYPE_URL);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, "k8s/example.com/v1/virtualservces", "other-group"));
  mcpcfg_loader_del(l);
  /* A case slip is a typo too; the same bytes read again say nothing. */
  nnotes = 0;
  put("a.yaml", "apiVersion: networking.istio.io/v1alpha3\n"
                "kind: Virtualservice\n"
                "metadata: {name: typo}\n");
  l = load_typed();
  ck_assert_int_eq(nnotes, 1);
  ck_assert_str_eq(notes[0].msg, "no kind Virtualservice in networking.istio.io/v1alpha3; "
                                 "did you mean VirtualService? served as an untyped collection");
  mcpcfg_loader_set_racy_ns(l, 0);
  ck_assert_int_ge(mcpcfg_loader_scan(l), 0);
  ck_assert_int_eq(nnotes, 1);
  mcpcfg_loader_del(l);
}
END_TEST

/* Fail the i-th allocation of a typed scan, for every i. */
START_TEST(test_typed_scan_allocation_failure_leaks_nothing) {
  put("vs.yaml", VS_WEIGHTS("75", "25"));
  put("bad.yaml", VS_WEIGHTS("75", "x"));
  int done = 0;
  for (long i = 0; !done; i++) {
    mcpcfg_options o;
    typed_options(&o);
    mcpcfg_loader *l = new_loader(&o);
    alloc_countdown = i;
    int rv = mcpcfg_loader_scan(l);
    done = alloc_countdown >= 0;
    alloc_countdown = -1;
    if (rv < 0) {
      ck_assert_int_eq(rv, MCPCFG_ERR_NOMEM);
      ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
    }
    const mcp_resource *r = mcpcfg_loader_find(l, VS_COLL, "bookinfo/reviews");
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(r->type_url, VS_URL);
    mcpcfg_loader_del(l);
  }
}
END_TEST

static TCase *tc(Suite *s, const char *name) {
  TCase *t = tcase_create(name);
  tcase_add_checked_fixture(t, setup, teardown);
  suite_add_tcase(s, t);
  return t;
}

int main(void) {
  Suite *s = suite_create("config_typed");
  TCase *t = tc(s, "typed");
  tcase_add_test(t, test_istio_kind_body_is_its_message);
  tcase_add_test(t, test_typed_body_bytes_are_the_protobuf_encoding);
  tcase_add_test(t, test_every_istio_kind_is_typed_with_its_type_url);
  tcase_add_test(t, test_istio_table_agrees_with_naming_rule_and_descriptors);
  tcase_add_test(t, test_kind_without_schema_keeps_the_struct_body);
  tcase_add_test(t, test_force_struct_keeps_struct_bodies_for_istio_kinds);
  tcase_add_test(t, test_user_kind_maps_a_kind_to_a_message);
  tcase_add_test(t, test_kind_whose_message_is_not_in_the_schema_is_refused);
  tcase_add_test(t, test_typed_version_changes_with_content_not_key_order);
  tcase_add_test(t, test_aliases_in_a_typed_body_are_expanded);
  tcase_add_test(t, test_document_without_spec_gets_an_empty_typed_body);
  tcase_add_test(t, test_example_config_loads_typed_without_reports);
  t = tc(s, "errors");
  tcase_add_test(t, test_wrong_type_is_reported_with_file_line_and_field_path);
  tcase_add_test(t, test_unknown_field_enum_and_range_are_reported);
  tcase_add_test(t, test_newer_istio_versions_are_typed_in_the_canonical_collection);
  tcase_add_test(t, test_bad_edit_keeps_the_last_good_typed_content);
  tcase_add_test(t, test_go_durations_load_as_istio_reads_them);
  tcase_add_test(t, test_every_error_of_a_document_is_reported_at_once);
  tcase_add_test(t, test_metadata_and_body_errors_are_reported_together);
  tcase_add_test(t, test_more_than_twenty_errors_end_with_and_n_more);
  tcase_add_test(t, test_unknown_kind_in_a_builtin_group_is_warned);
  tcase_add_test(t, test_specs_encoded_as_read_equal_the_trees);
  tcase_add_test(t, test_many_files_read_on_threads_give_what_one_thread_gives);
  t = tc(s, "alloc");
  tcase_add_test(t, test_typed_scan_allocation_failure_leaks_nothing);

  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
