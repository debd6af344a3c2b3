/*
 * Tests of tools/loader/loader.h: a YAML directory -> MCP resources.
 * Every test works on a real temporary directory under /tmp.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config_notes.h"
#include "loader/config_internal.h" /* mcpcfg_hash64, read counter, racy window */
#include "google/protobuf/struct.pb-c.h"

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
/* Fixture: a temporary directory and a report collector               */
/* ------------------------------------------------------------------ */

typedef struct report {
  char path[512];
  unsigned long line;
  char msg[512];
} report;

static char dir[64];
static report reps[64];
static int nreps;

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

static void setup(void) {
  alloc_countdown = -1;
  nreps = 0;
  nnotes = 0;
  strcpy(dir, "/tmp/mcpcfg-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
  alloc_countdown = -1;
  rm_rf(dir);
}

static void path_of(const char *rel, char *out, size_t size) {
  snprintf(out, size, "%s/%s", dir, rel);
}

/* Writes |rel| (creating its directories) with |content|. */
static void put(const char *rel, const char *content) {
  char p[1024];
  path_of(rel, p, sizeof p);
  for (char *s = strchr(p + strlen(dir) + 1, '/'); s; s = strchr(s + 1, '/')) {
    *s = '\0';
    mkdir(p, 0755);
    *s = '/';
  }
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fputs(content, f) >= 0, 1);
  ck_assert_int_eq(fclose(f), 0);
}

static void del(const char *rel) {
  char p[1024];
  path_of(rel, p, sizeof p);
  ck_assert_int_eq(unlink(p), 0);
}

static mcpcfg_loader *new_loader(const mcpcfg_options *o) {
  mcpcfg_options opts;
  mcpcfg_loader *l = NULL;
  if (o)
    opts = *o;
  else
    mcpcfg_options_default(&opts);
  opts.report = on_report;
  opts.note = on_note;
  ck_assert_int_eq(mcpcfg_loader_new(&l, dir, &opts), 0);
  return l;
}

static mcpcfg_loader *load(void) {
  mcpcfg_loader *l = new_loader(NULL);
  ck_assert_int_ge(mcpcfg_loader_scan(l), 0);
  return l;
}

static int has_report(const char *rel, unsigned long line, const char *text) {
  if (getenv("SHOW_REPORTS"))
    for (int i = 0; i < nreps && i < 64; i++)
      fprintf(stderr, "%s:%lu: %s\n", reps[i].path, reps[i].line, reps[i].msg);
  char p[1024];
  path_of(rel, p, sizeof p);
  for (int i = 0; i < nreps && i < 64; i++)
    if (!strcmp(reps[i].path, p) && (line == 0 || reps[i].line == line) &&
        strstr(reps[i].msg, text))
      return 1;
  return 0;
}

static size_t count(const mcpcfg_loader *l, const char *collection) {
  for (size_t i = 0; i < mcpcfg_loader_collection_count(l); i++)
    if (!strcmp(mcpcfg_loader_collection_name(l, i), collection)) {
      const mcp_resource *r;
      return mcpcfg_loader_resources(l, i, &r);
    }
  return 0;
}

static int listed(const mcpcfg_loader *l, const char *collection) {
  for (size_t i = 0; i < mcpcfg_loader_collection_count(l); i++)
    if (!strcmp(mcpcfg_loader_collection_name(l, i), collection))
      return 1;
  return 0;
}

static const char *kv_get(const mcp_kv *kv, size_t n, const char *key) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(kv[i].key, key))
      return kv[i].value;
  return NULL;
}

static Google__Protobuf__Struct *body_of(const mcp_resource *r) {
  ck_assert_str_eq(r->type_url, "type.googleapis.com/google.protobuf.Struct");
  Google__Protobuf__Struct *s =
      google__protobuf__struct__unpack(NULL, r->body_len, r->body);
  ck_assert_ptr_nonnull(s);
  return s;
}

static const Google__Protobuf__Value *sfield(const Google__Protobuf__Struct *s,
                                             const char *key) {
  for (size_t i = 0; i < s->n_fields; i++)
    if (!strcmp(s->fields[i]->key, key))
      return s->fields[i]->value;
  ck_abort_msg("no field %s", key);
  return NULL;
}

#define VS_COLL "istio/networking/v1alpha3/virtualservices"
#define CM_COLL "k8s/core/v1/configmaps"

/* A VirtualService |name| in |ns| routing to |host|. */
#define VS(name, ns, host)                                                   \
  "apiVersion: networking.istio.io/v1alpha3\n"                               \
  "kind: VirtualService\n"                                                   \
  "metadata:\n"                                                              \
  "  name: " name "\n"                                                       \
  "  namespace: " ns "\n"                                                    \
  "spec:\n"                                                                  \
  "  hosts: [" host "]\n"

/* ------------------------------------------------------------------ */
/* Collections                                                         */
/* ------------------------------------------------------------------ */

START_TEST(test_istio_group_gives_istio_first_label_collection) {
  put("vs.yaml", VS("reviews", "default", "reviews"));
  mcpcfg_loader *l = load();
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "default/reviews"));
  ck_assert_int_eq(nreps, 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_other_group_gives_k8s_group_collection) {
  put("d.yaml", "apiVersion: apps/v1\nkind: Deployment\n"
                "metadata: {name: web}\nspec: {replicas: 2}\n");
  mcpcfg_loader *l = load();
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, "k8s/apps/v1/deployments", "web"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_api_version_without_group_gives_core_group) {
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n");
  mcpcfg_loader *l = load();
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, CM_COLL, "cfg"));
  mcpcfg_loader_del(l);
}
END_TEST

/* Kubernetes writes some kinds without a spec (Endpoints: `subsets` at the
 * top level): their top-level fields other than apiVersion, kind and
 * metadata are the body. spec, then data, still win when present. */
START_TEST(test_document_without_spec_keeps_its_top_level_fields) {
  put("ep.yaml", "apiVersion: v1\nkind: Endpoints\n"
                 "metadata: {name: web, namespace: default}\n"
                 "subsets:\n"
                 "- addresses: [{ip: 10.0.0.1}]\n"
                 "  ports: [{name: http, port: 8080}]\n"
                 "extra: 7\n"
                 "---\n"
                 "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n"
                 "spec: {ports: [{port: 80}]}\nstatus: {x: 1}\n"
                 "---\n"
                 "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
                 "data: {k: v}\nimmutable: true\n"
                 "---\n"
                 "apiVersion: v1\nkind: Namespace\nmetadata: {name: n}\n");
  mcpcfg_loader *l = load();
  ck_assert_int_eq(nreps, 0);
  const mcp_resource *r =
      mcpcfg_loader_find(l, "k8s/core/v1/endpoints", "default/web");
  ck_assert_ptr_nonnull(r);
  Google__Protobuf__Struct *s = body_of(r);
  ck_assert_uint_eq(s->n_fields, 2);
  const Google__Protobuf__Value *sub = sfield(s, "subsets");
  ck_assert_int_eq(sub->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE);
  ck_assert_uint_eq(sub->list_value->n_values, 1);
  const Google__Protobuf__Struct *s0 = sub->list_value->values[0]->struct_value;
  ck_assert_ptr_nonnull(s0);
  const Google__Protobuf__Value *addrs = sfield(s0, "addresses");
  ck_assert_str_eq(sfield(addrs->list_value->values[0]->struct_value, "ip")
                       ->string_value,
                   "10.0.0.1");
  ck_assert(sfield(s, "extra")->number_value == 7);
  google__protobuf__struct__free_unpacked(s, NULL);
  /* With a spec, only the spec (status is not part of the body). */
  r = mcpcfg_loader_find(l, "k8s/core/v1/services", "web");
  s = body_of(r);
  ck_assert_uint_eq(s->n_fields, 1);
  sfield(s, "ports");
  google__protobuf__struct__free_unpacked(s, NULL);
  /* With data, only the data. */
  s = body_of(mcpcfg_loader_find(l, CM_COLL, "c"));
  ck_assert_uint_eq(s->n_fields, 1);
  ck_assert_str_eq(sfield(s, "k")->string_value, "v");
  google__protobuf__struct__free_unpacked(s, NULL);
  /* Nothing but the header: an empty body, as before. */
  s = body_of(mcpcfg_loader_find(l, "k8s/core/v1/namespaces", "n"));
  ck_assert_uint_eq(s->n_fields, 0);
  google__protobuf__struct__free_unpacked(s, NULL);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_collection_annotation_overrides_api_version) {
  put("x.yaml", "apiVersion: networking.istio.io/v1alpha3\n"
                "kind: VirtualService\n"
                "metadata:\n  name: x\n  annotations:\n"
                "    mcp.istio.io/collection: custom/things\n");
  mcpcfg_loader *l = load();
  const mcp_resource *r = mcpcfg_loader_find(l, "custom/things", "x");
  ck_assert_ptr_nonnull(r);
  ck_assert_ptr_null(mcpcfg_loader_find(l, VS_COLL, "x"));
  ck_assert_str_eq(kv_get(r->annotations, r->nannotations,
                          "mcp.istio.io/collection"),
                   "custom/things");
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_collection_for_maps_and_rejects) {
  char *c = NULL;
  ck_assert_int_eq(mcpcfg_collection_for("security.istio.io/v1beta1",
                                         "AuthorizationPolicy", &c), 0);
  ck_assert_str_eq(c, "istio/security/v1beta1/authorizationpolicies");
  free(c);
  ck_assert_int_eq(mcpcfg_collection_for("istio.io/v1", "Thing", &c), 0);
  ck_assert_str_eq(c, "k8s/istio.io/v1/things"); /* no ".istio.io" suffix */
  free(c);
  c = NULL;
  ck_assert_int_eq(mcpcfg_collection_for("a/b/c", "Kind", &c),
                   MCPCFG_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcpcfg_collection_for("/v1", "Kind", &c),
                   MCPCFG_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcpcfg_collection_for("apps/", "Kind", &c),
                   MCPCFG_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcpcfg_collection_for("v1", "Bad Kind", &c),
                   MCPCFG_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcpcfg_collection_for("v1", "", &c),
                   MCPCFG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_bad_api_version_is_reported_and_skipped) {
  put("x.yaml", "apiVersion: a/b/c\nkind: Thing\nmetadata: {name: x}\n");
  mcpcfg_loader *l = load();
  ck_assert_int_eq(mcpcfg_loader_collection_count(l), 0);
  ck_assert(has_report("x.yaml", 1, "bad apiVersion"));
  mcpcfg_loader_del(l);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Plurals                                                             */
/* ------------------------------------------------------------------ */

static void check_plural(const char *kind, const char *want) {
  char *p = mcpcfg_plural(kind);
  ck_assert_ptr_nonnull(p);
  ck_assert_str_eq(p, want);
  free(p);
}

START_TEST(test_plural_consonant_y_gives_ies) {
  check_plural("Policy", "policies");
  check_plural("ServiceEntry", "serviceentries");
  check_plural("MeshPolicy", "meshpolicies");
}
END_TEST

START_TEST(test_plural_vowel_y_gives_ys) {
  check_plural("Gateway", "gateways");
  check_plural("Key", "keys");
  check_plural("Y", "ys");
}
END_TEST

START_TEST(test_plural_s_x_z_ch_sh_give_es) {
  check_plural("Ingress", "ingresses");
  check_plural("Box", "boxes");
  check_plural("Quiz", "quizes");
  check_plural("Match", "matches");
  check_plural("Endpoints", "endpoints"); /* plural already (Kubernetes) */
  check_plural("Mesh", "meshes");
}
END_TEST

START_TEST(test_plural_otherwise_adds_s) {
  check_plural("DestinationRule", "destinationrules");
  check_plural("ConfigMap", "configmaps");
  check_plural("Graph", "graphs"); /* "ph" is no "ch"/"sh" */
}
END_TEST

/* ------------------------------------------------------------------ */
/* Names, versions, metadata                                           */
/* ------------------------------------------------------------------ */

/* keep_text (for publishing into etcd): each document's bytes exactly as
 * in its file, also after multi-byte characters (libyaml's marks count
 * characters, not bytes). */
START_TEST(test_keep_text_gives_each_documents_bytes_as_written) {
  const char *d1 = "apiVersion: v1\nkind: ConfigMap\n"
                   "metadata: {name: a, namespace: n, labels: {l: \"\xc3\xa9\"}}\n"
                   "data: {k: \"\xe2\x82\xac \xf0\x9f\x98\x80\"}\n";
  const char *d2 = "---\napiVersion: v1\nkind: ConfigMap\n"
                   "metadata: {name: b, namespace: n}\n"
                   "data: {k: \"\xc3\xa9\"}\n";
  char file[512];
  snprintf(file, sizeof file, "%s%s", d1, d2);
  put("m.yaml", file);
  mcpcfg_options o;
  mcpcfg_options_default(&o);
  o.keep_text = 1;
  mcpcfg_loader *l = new_loader(&o);
  ck_assert_int_ge(mcpcfg_loader_scan(l), 0);
  ck_assert_uint_eq(mcpcfg_loader_collection_count(l), 1);
  const mcp_resource *res;
  ck_assert_uint_eq(mcpcfg_loader_resources(l, 0, &res), 2);
  /* Sorted by name: n/a, then n/b. */
  size_t len;
  const char *t = mcpcfg_loader_text(l, 0, 0, &len);
  ck_assert_ptr_nonnull(t);
  ck_assert_uint_eq(len, strlen(d1));
  ck_assert_int_eq(memcmp(t, d1, len), 0);
  t = mcpcfg_loader_text(l, 0, 1, &len);
  ck_assert_ptr_nonnull(t);
  ck_assert_uint_eq(len, strlen(d2));
  ck_assert_int_eq(memcmp(t, d2, len), 0);
  mcpcfg_loader_del(l);
  /* Without keep_text, nothing is kept. */
  l = load();
  ck_assert_ptr_null(mcpcfg_loader_text(l, 0, 0, &len));
  ck_assert_uint_eq(len, 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_name_with_namespace_is_namespace_slash_name) {
  put("vs.yaml", VS("reviews", "bookinfo", "reviews"));
  mcpcfg_loader *l = load();
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "bookinfo/reviews"));
  ck_assert_ptr_null(mcpcfg_loader_find(l, VS_COLL, "reviews"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_name_without_namespace_is_name) {
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n");
  put("cm2.yaml", "apiVersion: v1\nkind: ConfigMap\n"
                  "metadata: {name: cfg2, namespace: ''}\n");
  mcpcfg_loader *l = load();
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, CM_COLL, "cfg"));
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, CM_COLL, "cfg2"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_version_from_resource_version) {
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\n"
                 "metadata: {name: cfg, resourceVersion: '4711'}\n");
  mcpcfg_loader *l = load();
  ck_assert_str_eq(mcpcfg_loader_find(l, CM_COLL, "cfg")->version, "4711");
  mcpcfg_loader_del(l);
}
END_TEST

/* Loads |content| as the only file and returns the version of cfg. */
static void version_of(mcpcfg_loader *l, const char *content, char *out) {
  put("cm.yaml", content);
  ck_assert_int_ge(mcpcfg_loader_scan(l), 0);
  const mcp_resource *r = mcpcfg_loader_find(l, CM_COLL, "ns/cfg");
  ck_assert_ptr_nonnull(r);
  snprintf(out, 32, "%s", r->version);
}

START_TEST(test_version_hash_changes_iff_content_changes) {
  static const char base[] =
      "apiVersion: v1\nkind: ConfigMap\n"
      "metadata:\n  name: cfg\n  namespace: ns\n  labels: {a: '1'}\n"
      "  annotations: {n: x}\n  creationTimestamp: 2024-01-02T03:04:05Z\n"
      "data:\n  k: v\n  j: 1\n";
  /* Same content: other key order, flow style, comments, quoting. */
  static const char same[] =
      "# a comment\nkind: ConfigMap\napiVersion: v1\n"
      "data: {j: 1, \"k\": v}\n"
      "metadata:\n  namespace: ns\n  annotations: {n: x}\n"
      "  creationTimestamp: '2024-01-02T03:04:05Z'\n  labels: {a: '1'}\n"
      "  name: cfg\n";
  static const char *const changed[] = {
      /* data value, data type, label, annotation, time, name */
      "apiVersion: v1\nkind: ConfigMap\n"
      "metadata:\n  name: cfg\n  namespace: ns\n  labels: {a: '1'}\n"
      "  annotations: {n: x}\n  creationTimestamp: 2024-01-02T03:04:05Z\n"
      "data:\n  k: w\n  j: 1\n",
      "apiVersion: v1\nkind: ConfigMap\n"
      "metadata:\n  name: cfg\n  namespace: ns\n  labels: {a: '1'}\n"
      "  annotations: {n: x}\n  creationTimestamp: 2024-01-02T03:04:05Z\n"
      "data:\n  k: v\n  j: '1'\n",
      "apiVersion: v1\nkind: ConfigMap\n"
      "metadata:\n  name: cfg\n  namespace: ns\n  labels: {a: '2'}\n"
      "  annotations: {n: x}\n  creationTimestamp: 2024-01-02T03:04:05Z\n"
      "data:\n  k: v\n  j: 1\n",
      "apiVersion: v1\nkind: ConfigMap\n"
      "metadata:\n  name: cfg\n  namespace: ns\n  labels: {a: '1'}\n"
      "  annotations: {n: y}\n  creationTimestamp: 2024-01-02T03:04:05Z\n"
      "data:\n  k: v\n  j: 1\n",
      "apiVersion: v1\nkind: ConfigMap\n"
      "metadata:\n  name: cfg\n  namespace: ns\n  labels: {a: '1'}\n"
      "  annotations: {n: x}\n  creationTimestamp: 2024-01-02T03:04:06Z\n"
      "data:\n  k: v\n  j: 1\n",
  };
  char v0[32], v[32];
  mcpcfg_loader *l = new_loader(NULL);
  version_of(l, base, v0);
  ck_assert_int_eq((int)strlen(v0), 16);
  ck_assert_int_eq((int)strspn(v0, "0123456789abcdef"), 16);
  version_of(l, same, v);
  ck_assert_str_eq(v, v0);
  for (size_t i = 0; i < sizeof changed / sizeof *changed; i++) {
    version_of(l, changed[i], v);
    ck_assert_msg(strcmp(v, v0) != 0, "change %zu kept the version", i);
  }
  version_of(l, base, v);
  ck_assert_str_eq(v, v0);
  ck_assert_int_eq(nreps, 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_labels_and_annotations_are_copied_as_text) {
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n"
                 "  labels:\n    app: reviews\n    version: 2\n"
                 "    canary: true\n    empty: ~\n"
                 "  annotations: {owner: team-a, 'x/y': \"1.50\"}\n");
  mcpcfg_loader *l = load();
  const mcp_resource *r = mcpcfg_loader_find(l, CM_COLL, "cfg");
  ck_assert_ptr_nonnull(r);
  ck_assert_uint_eq(r->nlabels, 4);
  ck_assert_str_eq(kv_get(r->labels, r->nlabels, "app"), "reviews");
  ck_assert_str_eq(kv_get(r->labels, r->nlabels, "version"), "2");
  ck_assert_str_eq(kv_get(r->labels, r->nlabels, "canary"), "true");
  ck_assert_str_eq(kv_get(r->labels, r->nlabels, "empty"), "");
  ck_assert_uint_eq(r->nannotations, 2);
  ck_assert_str_eq(kv_get(r->annotations, r->nannotations, "owner"), "team-a");
  ck_assert_str_eq(kv_get(r->annotations, r->nannotations, "x/y"), "1.50");
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_label_that_is_not_a_scalar_is_reported) {
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n"
                 "  labels:\n    app: [a, b]\n");
  mcpcfg_loader *l = load();
  ck_assert_ptr_null(mcpcfg_loader_find(l, CM_COLL, "cfg"));
  ck_assert(has_report("cm.yaml", 6, "labels 'app' is not a scalar"));
  mcpcfg_loader_del(l);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Creation time                                                       */
/* ------------------------------------------------------------------ */

START_TEST(test_create_time_from_creation_timestamp) {
  put("a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"
                "  creationTimestamp: 2024-01-02T03:04:05Z\n");
  put("b.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n"
                "  creationTimestamp: \"2024-01-02T04:04:05.5+01:00\"\n");
  put("c.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n"
                "  creationTimestamp: null\n");
  mcpcfg_loader *l = load();
  const mcp_resource *a = mcpcfg_loader_find(l, CM_COLL, "a");
  const mcp_resource *b = mcpcfg_loader_find(l, CM_COLL, "b");
  const mcp_resource *c = mcpcfg_loader_find(l, CM_COLL, "c");
  ck_assert(a && b && c);
  ck_assert_int_eq(a->has_create_time, 1);
  ck_assert_int_eq(a->create_time_seconds, 1704164645);
  ck_assert_int_eq(a->create_time_nanos, 0);
  ck_assert_int_eq(b->has_create_time, 1);
  ck_assert_int_eq(b->create_time_seconds, 1704164645);
  ck_assert_int_eq(b->create_time_nanos, 500000000);
  ck_assert_int_eq(c->has_create_time, 0); /* kubectl writes null */
  ck_assert_int_eq(nreps, 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_bad_create_time_is_reported_and_document_skipped) {
  put("a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"
                "  creationTimestamp: yesterday\n"
                "---\n"
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n");
  mcpcfg_loader *l = load();
  ck_assert_ptr_null(mcpcfg_loader_find(l, CM_COLL, "a"));
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, CM_COLL, "b"));
  ck_assert_int_eq(nreps, 1);
  ck_assert(has_report("a.yaml", 5, "creationTimestamp 'yesterday'"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_parse_time_accepts_rfc3339_and_rejects_the_rest) {
  int64_t s = 7;
  int32_t ns = 7;
  ck_assert_int_eq(mcpcfg_parse_time("1970-01-01T00:00:00Z", &s, &ns), 0);
  ck_assert_int_eq(s, 0);
  ck_assert_int_eq(mcpcfg_parse_time("1969-12-31t23:59:59.999999999z", &s, &ns), 0);
  ck_assert_int_eq(s, -1);
  ck_assert_int_eq(ns, 999999999);
  ck_assert_int_eq(mcpcfg_parse_time("2024-02-29 12:00:00.1234567891-02:30", &s, &ns), 0);
  ck_assert_int_eq(s, 1709208000 + 9000);
  ck_assert_int_eq(ns, 123456789);
  ck_assert_int_eq(mcpcfg_parse_time("0001-01-01T00:00:00Z", &s, &ns), 0);
  ck_assert_int_eq(s, INT64_C(-62135596800));
  static const char *const bad[] = {
      "2023-02-29T00:00:00Z", "2024-04-31T00:00:00Z", "2024-13-01T00:00:00Z",
      "2024-01-02T24:00:00Z", "2024-01-02T23:60:00Z", "2024-01-02T23:59:60Z",
      "2024-01-02T03:04:05",  "2024-01-02",           "2024-01-02T03:04:05.Z",
      "0000-01-01T00:00:00Z", "2024-01-02T03:04:05+1:00",
      "2024-01-02T03:04:05+24:00", "2024-01-02T03:04:05Zjunk", "",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    s = 7;
    ck_assert_msg(mcpcfg_parse_time(bad[i], &s, &ns) ==
                      MCPCFG_ERR_INVALID_ARGUMENT,
                  "accepted %s", bad[i]);
    ck_assert_int_eq(s, 7);
  }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Body: google.protobuf.Struct                                        */
/* ------------------------------------------------------------------ */

START_TEST(test_spec_is_encoded_as_struct_with_yaml_types) {
  put("t.yaml",
      "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: t}\n"
      "spec:\n"
      "  str: hello\n"
      "  int: 42\n"
      "  float: -1.5e3\n"
      "  hex: 0x1F\n"
      "  oct: 0o17\n"
      "  inf: -.inf\n"
      "  yes: true\n"
      "  no: FALSE\n"
      "  nothing: null\n"
      "  tilde: ~\n"
      "  empty:\n"
      "  word: yes\n"
      "  version: 1.2.3\n"
      "  block: |\n    line\n"
      "  list: [a, 1, true, null, [x], {k: v}]\n"
      "  nested:\n    deeper:\n      x: y\n");
  mcpcfg_loader *l = load();
  const mcp_resource *r =
      mcpcfg_loader_find(l, "k8s/example.com/v1/things", "t");
  ck_assert_ptr_nonnull(r);
  Google__Protobuf__Struct *s = body_of(r);
  const Google__Protobuf__Value *v;
  ck_assert_uint_eq(s->n_fields, 16);
  v = sfield(s, "str");
  ck_assert_int_eq(v->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE);
  ck_assert_str_eq(v->string_value, "hello");
  v = sfield(s, "int");
  ck_assert_int_eq(v->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE);
  ck_assert(v->number_value == 42);
  ck_assert(sfield(s, "float")->number_value == -1500);
  ck_assert(sfield(s, "hex")->number_value == 31);
  ck_assert(sfield(s, "oct")->number_value == 15);
  ck_assert(isinf(sfield(s, "inf")->number_value) &&
            sfield(s, "inf")->number_value < 0);
  v = sfield(s, "yes");
  ck_assert_int_eq(v->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE);
  ck_assert_int_eq(v->bool_value, 1);
  v = sfield(s, "no");
  ck_assert_int_eq(v->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE);
  ck_assert_int_eq(v->bool_value, 0);
  ck_assert_int_eq(sfield(s, "nothing")->kind_case,
                   GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE);
  ck_assert_int_eq(sfield(s, "tilde")->kind_case,
                   GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE);
  ck_assert_int_eq(sfield(s, "empty")->kind_case,
                   GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE);
  /* YAML 1.2: yes is a word, and so is a dotted version. */
  ck_assert_str_eq(sfield(s, "word")->string_value, "yes");
  ck_assert_str_eq(sfield(s, "version")->string_value, "1.2.3");
  ck_assert_str_eq(sfield(s, "block")->string_value, "line\n");
  v = sfield(s, "list");
  ck_assert_int_eq(v->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE);
  const Google__Protobuf__ListValue *lv = v->list_value;
  ck_assert_uint_eq(lv->n_values, 6);
  ck_assert_str_eq(lv->values[0]->string_value, "a");
  ck_assert(lv->values[1]->number_value == 1);
  ck_assert_int_eq(lv->values[2]->kind_case,
                   GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE);
  ck_assert_int_eq(lv->values[3]->kind_case,
                   GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE);
  ck_assert_int_eq(lv->values[4]->kind_case,
                   GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE);
  ck_assert_str_eq(lv->values[4]->list_value->values[0]->string_value, "x");
  ck_assert_int_eq(lv->values[5]->kind_case,
                   GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE);
  ck_assert_str_eq(sfield(lv->values[5]->struct_value, "k")->string_value, "v");
  v = sfield(s, "nested");
  ck_assert_int_eq(v->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE);
  v = sfield(v->struct_value, "deeper");
  ck_assert_int_eq(v->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE);
  ck_assert_str_eq(sfield(v->struct_value, "x")->string_value, "y");
  google__protobuf__struct__free_unpacked(s, NULL);
  ck_assert_int_eq(nreps, 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_quoted_scalars_stay_strings) {
  put("t.yaml", "apiVersion: v1\nkind: Thing\nmetadata: {name: t}\n"
                "spec:\n  a: \"true\"\n  b: '12'\n  c: \"null\"\n  d: ''\n"
                "  e: |-\n    false\n");
  mcpcfg_loader *l = load();
  Google__Protobuf__Struct *s =
      body_of(mcpcfg_loader_find(l, "k8s/core/v1/things", "t"));
  const char *keys[] = {"a", "b", "c", "d", "e"};
  const char *want[] = {"true", "12", "null", "", "false"};
  for (int i = 0; i < 5; i++) {
    const Google__Protobuf__Value *v = sfield(s, keys[i]);
    ck_assert_int_eq(v->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE);
    ck_assert_str_eq(v->string_value, want[i]);
  }
  google__protobuf__struct__free_unpacked(s, NULL);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_tags_are_honoured) {
  put("t.yaml", "apiVersion: v1\nkind: Thing\nmetadata: {name: t}\n"
                "spec:\n  s: !!str 123\n  i: !!int \"7\"\n  f: !!float 1\n"
                "  b: !!bool 'true'\n  n: !!null ''\n  x: ! 12\n"
                "  m: !!map {k: v}\n  q: !!seq [1]\n");
  mcpcfg_loader *l = load();
  Google__Protobuf__Struct *s =
      body_of(mcpcfg_loader_find(l, "k8s/core/v1/things", "t"));
  ck_assert_str_eq(sfield(s, "s")->string_value, "123");
  ck_assert(sfield(s, "i")->number_value == 7);
  ck_assert_int_eq(sfield(s, "f")->kind_case,
                   GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE);
  ck_assert_int_eq(sfield(s, "b")->kind_case,
                   GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE);
  ck_assert_int_eq(sfield(s, "n")->kind_case,
                   GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE);
  ck_assert_str_eq(sfield(s, "x")->string_value, "12");
  ck_assert_int_eq(sfield(s, "m")->kind_case,
                   GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE);
  ck_assert_int_eq(sfield(s, "q")->kind_case,
                   GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE);
  google__protobuf__struct__free_unpacked(s, NULL);
  ck_assert_int_eq(nreps, 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_unsupported_or_mismatched_tag_is_reported) {
  put("t.yaml", "apiVersion: v1\nkind: Thing\nmetadata: {name: t}\n"
                "spec: {a: !Ref x}\n"
                "---\n"
                "apiVersion: v1\nkind: Thing\nmetadata: {name: u}\n"
                "spec:\n  a: !!int twelve\n");
  mcpcfg_loader *l = load();
  ck_assert_int_eq(mcpcfg_loader_collection_count(l), 0);
  ck_assert(has_report("t.yaml", 4, "unsupported tag (!Ref)"));
  ck_assert(has_report("t.yaml", 10, "!!int on a non-integer"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_document_without_spec_gets_empty_struct) {
  put("t.yaml", "apiVersion: v1\nkind: Thing\nmetadata: {name: t}\n"
                "---\napiVersion: v1\nkind: Thing\nmetadata: {name: u}\n"
                "spec:\n");
  mcpcfg_loader *l = load();
  const char *names[] = {"t", "u"};
  for (int i = 0; i < 2; i++) {
    const mcp_resource *r = mcpcfg_loader_find(l, "k8s/core/v1/things", names[i]);
    ck_assert_ptr_nonnull(r);
    Google__Protobuf__Struct *s = body_of(r);
    ck_assert_uint_eq(s->n_fields, 0);
    google__protobuf__struct__free_unpacked(s, NULL);
  }
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_configmap_data_is_the_body_when_there_is_no_spec) {
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n"
                 "data:\n  mesh: |\n    a: b\n  port: \"80\"\n");
  mcpcfg_loader *l = load();
  Google__Protobuf__Struct *s = body_of(mcpcfg_loader_find(l, CM_COLL, "cfg"));
  ck_assert_uint_eq(s->n_fields, 2);
  ck_assert_str_eq(sfield(s, "mesh")->string_value, "a: b\n");
  ck_assert_str_eq(sfield(s, "port")->string_value, "80");
  google__protobuf__struct__free_unpacked(s, NULL);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_spec_that_is_not_a_mapping_is_reported) {
  put("t.yaml", "apiVersion: v1\nkind: Thing\nmetadata: {name: t}\n"
                "spec: [1, 2]\n");
  mcpcfg_loader *l = load();
  ck_assert_int_eq(mcpcfg_loader_collection_count(l), 0);
  ck_assert(has_report("t.yaml", 4, "spec is not a mapping"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_duplicate_key_is_reported) {
  put("t.yaml", "apiVersion: v1\nkind: Thing\nmetadata: {name: t}\n"
                "spec:\n  a: 1\n  b: 2\n  a: 3\n");
  mcpcfg_loader *l = load();
  ck_assert_int_eq(mcpcfg_loader_collection_count(l), 0);
  ck_assert_int_eq(nreps, 1);
  ck_assert(has_report("t.yaml", 0, "duplicate key 'a'"));
  mcpcfg_loader_del(l);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Anchors, aliases and limits                                         */
/* ------------------------------------------------------------------ */

START_TEST(test_aliases_are_expanded) {
  put("t.yaml", "apiVersion: v1\nkind: Thing\nmetadata: {name: t}\n"
                "spec:\n  base: &p {port: 80, tls: &t true}\n"
                "  again: *p\n  list: [*p, *t]\n");
  mcpcfg_loader *l = load();
  Google__Protobuf__Struct *s =
      body_of(mcpcfg_loader_find(l, "k8s/core/v1/things", "t"));
  const Google__Protobuf__Value *a = sfield(s, "again");
  ck_assert_int_eq(a->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE);
  ck_assert(sfield(a->struct_value, "port")->number_value == 80);
  const Google__Protobuf__ListValue *lv = sfield(s, "list")->list_value;
  ck_assert_uint_eq(lv->n_values, 2);
  ck_assert(sfield(lv->values[0]->struct_value, "port")->number_value == 80);
  ck_assert_int_eq(lv->values[1]->bool_value, 1);
  google__protobuf__struct__free_unpacked(s, NULL);
  ck_assert_int_eq(nreps, 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_billion_laughs_is_reported_not_expanded) {
  put("lol.yaml",
      "apiVersion: v1\nkind: Thing\nmetadata: {name: lol}\nspec:\n"
      "  a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol,lol]\n"
      "  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
      "  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
      "  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
      "  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
      "  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
      "  g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
      "  h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
      "  i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]\n");
  put("ok.yaml", "apiVersion: v1\nkind: Thing\nmetadata: {name: ok}\n");
  mcpcfg_loader *l = load();
  ck_assert_ptr_null(mcpcfg_loader_find(l, "k8s/core/v1/things", "lol"));
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, "k8s/core/v1/things", "ok"));
  ck_assert(has_report("lol.yaml", 0, "aliases expanded"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_recursive_alias_is_reported) {
  put("t.yaml", "apiVersion: v1\nkind: Thing\nmetadata: {name: t}\n"
                "spec:\n  a: &x [1, *x]\n");
  mcpcfg_loader *l = load();
  ck_assert_int_eq(mcpcfg_loader_collection_count(l), 0);
  ck_assert(has_report("t.yaml", 5, "alias *x"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_nesting_deeper_than_the_limit_stops_the_file) {
  char doc[4096], *p = doc;
  p += sprintf(p, "apiVersion: v1\nkind: Thing\nmetadata: {name: ok}\n---\n"
                  "apiVersion: v1\nkind: Thing\nmetadata: {name: t}\nspec: ");
  for (int i = 0; i < 70; i++)
    *p++ = '[';
  for (int i = 0; i < 70; i++)
    *p++ = ']';
  strcpy(p, "\n");
  put("deep.yaml", doc);
  mcpcfg_options o;
  mcpcfg_options_default(&o);
  o.max_depth = 8;
  mcpcfg_loader *l = new_loader(&o);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  /* Like a syntax error: nothing of the file, not even its first document. */
  ck_assert_int_eq(mcpcfg_loader_collection_count(l), 0);
  ck_assert_int_eq(nreps, 1);
  ck_assert(has_report("deep.yaml", 8, "nested deeper than 8 levels"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_alias_nesting_deeper_than_the_limit_is_reported) {
  /* Each part is within the limit; the alias would nest it deeper. */
  put("alias.yaml", "apiVersion: v1\nkind: Thing\nmetadata: {name: u}\n"
                    "spec: {a: &d [[[[[1]]]]], b: [[[[*d]]]]}\n"
                    "---\napiVersion: v1\nkind: Thing\nmetadata: {name: ok}\n");
  mcpcfg_options o;
  mcpcfg_options_default(&o);
  o.max_depth = 8;
  mcpcfg_loader *l = new_loader(&o);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_ptr_null(mcpcfg_loader_find(l, "k8s/core/v1/things", "u"));
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, "k8s/core/v1/things", "ok"));
  ck_assert(has_report("alias.yaml", 4, "alias *d nests deeper than 8 levels"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_a_million_open_brackets_are_rejected_quickly) {
  /* libyaml alone needs minutes for this; the loader stops at level 64. */
  size_t n = 1 << 20;
  char *doc = malloc(n + 64);
  ck_assert_ptr_nonnull(doc);
  int k = sprintf(doc, "apiVersion: v1\nkind: T\nmetadata: {name: t}\nspec: ");
  memset(doc + k, '[', n);
  strcpy(doc + k + n, "\n");
  put("deep.yaml", doc);
  free(doc);
  mcpcfg_loader *l = load();
  ck_assert_int_eq(mcpcfg_loader_collection_count(l), 0);
  ck_assert(has_report("deep.yaml", 4, "nested deeper than 64 levels"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_file_over_the_size_limit_is_reported_and_keeps_last_content) {
  mcpcfg_options o;
  mcpcfg_options_default(&o);
  o.max_file_size = 200;
  put("vs.yaml", VS("a", "ns", "a"));
  mcpcfg_loader *l = new_loader(&o);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  char big[512];
  snprintf(big, sizeof big, "%s# %0300d\n", VS("a", "ns", "b"), 0);
  put("vs.yaml", big);
  mcpcfg_loader_scan(l);
  ck_assert(has_report("vs.yaml", 0, "larger than 200 bytes"));
  Google__Protobuf__Struct *s =
      body_of(mcpcfg_loader_find(l, VS_COLL, "ns/a"));
  ck_assert_str_eq(sfield(s, "hosts")->list_value->values[0]->string_value, "a");
  google__protobuf__struct__free_unpacked(s, NULL);
  mcpcfg_loader_del(l);
}
END_TEST

/* A report callback that, at its first call, appends |append_text| to
 * |append_path|: a writer at work while the scan runs, between the walk's
 * stat() of that file and its read. */
static const char *append_path, *append_text;

static void append_file(const char *p, const char *text) {
  int fd = open(p, O_WRONLY | O_APPEND);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
}

static void report_and_append(const char *path, unsigned long line,
                              const char *msg, void *user_data) {
  on_report(path, line, msg, user_data);
  if (append_path) {
    append_file(append_path, append_text);
    append_path = NULL;
  }
}

/* Issue 12, point 5: a file being written was loaded half-written. A read
 * is used only when the file did not change from the walk's stat() to the
 * end of the read; otherwise nothing of it is served until a later scan
 * reads it whole. */
START_TEST(test_file_changed_during_the_scan_is_not_served_half_written) {
  char b[1024];
  path_of("b.yaml", b, sizeof b);
  put("a.yaml", "apiVersion: v1\nkind: Thing\nmetadata: {}\n"); /* reported */
  put("b.yaml", VS("first", "ns", "f"));
  mcpcfg_options o;
  mcpcfg_options_default(&o);
  o.report = report_and_append;
  mcpcfg_loader *l = NULL;
  ck_assert_int_eq(mcpcfg_loader_new(&l, dir, &o), 0);
  append_path = b;
  append_text = "---\napiVersion: networking.istio.io/v1alpha3\n"
                "kind: VirtualService\nmetadata:\n  name: half\n"
                "  namespace: ns\n"; /* the writer's first half */
  mcpcfg_loader_scan(l);
  ck_assert_ptr_null(append_path); /* it did write, during the scan */
  ck_assert(has_report("a.yaml", 1, "no metadata.name"));
  ck_assert_ptr_null(mcpcfg_loader_find(l, VS_COLL, "ns/half"));
  ck_assert_ptr_null(mcpcfg_loader_find(l, VS_COLL, "ns/first"));
  ck_assert_uint_eq(mcpcfg_loader_unstable_reads(l), 1);
  /* The writer finishes; the next scan reads the whole file. */
  append_file(b, "spec:\n  hosts: [done]\n");
  mcpcfg_loader_scan(l);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/first"));
  Google__Protobuf__Struct *s = body_of(mcpcfg_loader_find(l, VS_COLL, "ns/half"));
  ck_assert_str_eq(sfield(s, "hosts")->list_value->values[0]->string_value,
                   "done");
  google__protobuf__struct__free_unpacked(s, NULL);
  /* A served file that changes during a scan keeps what it had. */
  append_path = b;
  append_text = "---\napiVersion: networking.istio.io/v1alpha3\n"
                "kind: VirtualService\nmetadata:\n  name: third\n";
  put("a.yaml", "apiVersion: v1\nkind: Thing\nmetadata: {}\n# again\n");
  put("b.yaml", VS("first", "ns", "f2")); /* changed: read this scan */
  mcpcfg_loader_scan(l);
  ck_assert_ptr_null(append_path);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/half"));
  ck_assert_ptr_null(mcpcfg_loader_find(l, VS_COLL, "ns/third"));
  ck_assert_uint_eq(mcpcfg_loader_unstable_reads(l), 2);
  mcpcfg_loader_del(l);
}
END_TEST

/* One 512-byte document (a ConfigMap whose data ends with end: "yes"), so
 * that a writer appending one per write() never splits a page. */
static void padded_cm(char *out, int i) {
  int k = snprintf(out, 513,
                   "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n"
                   "  name: cm-%05d\ndata:\n  end: \"yes\"\n  pad: \"",
                   i);
  memset(out + k, 'x', (size_t)(512 - k - 2));
  out[510] = '"';
  out[511] = '\n';
  out[512] = '\0';
}

/* Issue 12, point 5, with a real writer: a file appended document by
 * document while scans run, until it is over the size limit. No scan
 * serves a document the writer had not finished, and once the file is
 * too big the report says exactly what stays, which is what is served. */
START_TEST(test_file_appended_while_scanning_then_too_big_says_what_stays) {
  enum { LIMIT = 48 * 1024, DOCS = 200 };
  char p[1024];
  path_of("gen.yaml", p, sizeof p);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ck_assert_int_ge(fd, 0);
  mcpcfg_options o;
  mcpcfg_options_default(&o);
  o.max_file_size = LIMIT;
  mcpcfg_loader *l = new_loader(&o);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    char d[513];
    for (int i = 0; i < DOCS; i++) {
      padded_cm(d, i);
      if (write(fd, d, 512) != 512)
        _exit(1);
      if (i % 8 == 7) { /* a page at a time: scans see it grow */
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
      }
    }
    _exit(0);
  }
  close(fd);
  int status = 0, done = 0, scans = 0;
  while (!done) {
    done = waitpid(pid, &status, WNOHANG) == pid;
    ck_assert_int_ge(mcpcfg_loader_scan(l), 0);
    scans++;
    const mcp_resource *r;
    size_t n = 0;
    for (size_t i = 0; i < mcpcfg_loader_collection_count(l); i++)
      if (!strcmp(mcpcfg_loader_collection_name(l, i), CM_COLL))
        n = mcpcfg_loader_resources(l, i, &r);
    for (size_t i = 0; i < n; i++) { /* every document whole */
      Google__Protobuf__Struct *s = body_of(&r[i]);
      ck_assert_str_eq(sfield(s, "end")->string_value, "yes");
      ck_assert_uint_eq(strlen(sfield(s, "pad")->string_value), 421);
      google__protobuf__struct__free_unpacked(s, NULL);
    }
  }
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ck_assert_int_ge(mcpcfg_loader_scan(l), 0);
  mcpcfg_loader_scan(l);
  size_t served = count(l, CM_COLL);
  ck_assert_uint_le(served, LIMIT / 512);
  char want[128];
  if (served)
    snprintf(want, sizeof want, "the %zu document%s of its last complete read",
             served, served == 1 ? "" : "s");
  else
    snprintf(want, sizeof want, "nothing from it is served");
  ck_assert(has_report("gen.yaml", 0, "larger than 49152 bytes (102400)"));
  ck_assert(has_report("gen.yaml", 0, want));
  (void)scans;
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_nul_character_in_a_scalar_is_reported) {
  put("t.yaml", "apiVersion: v1\nkind: Thing\nmetadata: {name: t}\n"
                "spec: {a: \"x\\0y\"}\n");
  mcpcfg_loader *l = load();
  ck_assert_int_eq(mcpcfg_loader_collection_count(l), 0);
  ck_assert(has_report("t.yaml", 4, "NUL character"));
  mcpcfg_loader_del(l);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Files and directories                                               */
/* ------------------------------------------------------------------ */

START_TEST(test_multi_document_file_loads_every_document) {
  put("multi.yaml", "---\n" VS("a", "ns", "a") "---\n" VS("b", "ns", "b")
                    "...\n---\n# nothing\n---\n" VS("c", "other", "c"));
  mcpcfg_loader *l = load();
  ck_assert_uint_eq(count(l, VS_COLL), 3);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "other/c"));
  ck_assert_int_eq(nreps, 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_empty_documents_and_files_are_skipped_silently) {
  put("empty.yaml", "");
  put("comments.yaml", "# only a comment\n");
  put("dashes.yaml", "---\n---\n...\n---\nnull\n");
  mcpcfg_loader *l = load();
  ck_assert_int_eq(mcpcfg_loader_collection_count(l), 0);
  ck_assert_int_eq(nreps, 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_directories_are_read_recursively) {
  put("a.yaml", VS("a", "ns", "a"));
  put("sub/b.yml", VS("b", "ns", "b"));
  put("sub/deeper/still/c.yaml", VS("c", "ns", "c"));
  mcpcfg_loader *l = load();
  ck_assert_uint_eq(count(l, VS_COLL), 3);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/c"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_non_yaml_and_hidden_files_are_ignored) {
  put("a.yaml", VS("a", "ns", "a"));
  put("notes.txt", VS("txt", "ns", "x"));
  put("a.yaml.bak", VS("bak", "ns", "x"));
  put("README", "not: [yaml");
  put(".hidden.yaml", VS("hidden", "ns", "x"));
  put(".git/x.yaml", VS("git", "ns", "x"));
  put("sub/.cache/y.yaml", VS("cache", "ns", "x"));
  mcpcfg_loader *l = load();
  ck_assert_uint_eq(count(l, VS_COLL), 1);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/a"));
  ck_assert_int_eq(nreps, 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_configmap_mount_symlinks_are_followed_once) {
  /* The layout of a Kubernetes ConfigMap volume. */
  char target[1024], link[1024];
  put("..2024_01_01/vs.yaml", VS("a", "ns", "a"));
  path_of("..data", link, sizeof link);
  ck_assert_int_eq(symlink("..2024_01_01", link), 0);
  path_of("vs.yaml", link, sizeof link);
  ck_assert_int_eq(symlink("..data/vs.yaml", link), 0);
  /* A directory loop and a dangling link are skipped. */
  path_of("loop", link, sizeof link);
  ck_assert_int_eq(symlink(".", link), 0);
  path_of("dangling.yaml", link, sizeof link);
  path_of("nowhere", target, sizeof target);
  ck_assert_int_eq(symlink(target, link), 0);
  mcpcfg_loader *l = load();
  ck_assert_uint_eq(count(l, VS_COLL), 1);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/a"));
  ck_assert(has_report("loop", 0, "directory loop"));
  /* The directory is read at every scan; the loop is reported once. */
  int n = nreps;
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0);
  ck_assert_int_eq(nreps, n);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_broken_file_is_reported_with_path_and_line_others_load) {
  put("a.yaml", VS("a", "ns", "a"));
  put("bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
                  "  name: x\n  labels: {a: b\n");
  put("z.yaml", VS("z", "ns", "z"));
  mcpcfg_loader *l = load();
  ck_assert_uint_eq(count(l, VS_COLL), 2);
  ck_assert_ptr_null(mcpcfg_loader_find(l, CM_COLL, "x"));
  ck_assert_int_eq(nreps, 1);
  ck_assert_msg(has_report("bad.yaml", 5, "YAML error"), "%s:%lu: %s",
                reps[0].path, reps[0].line, reps[0].msg);
  mcpcfg_loader_del(l);
}
END_TEST

/* The first load of a broken file has nothing that could stay: it does
 * not claim otherwise. Once it served something, a broken edit says that
 * stays; fixed, it says so, with what it serves now. */
START_TEST(test_fixed_file_says_loaded_again_and_first_load_claims_nothing) {
  put("bad.yaml", VS("a", "ns", "a") "spec: [oops\n");
  mcpcfg_loader *l = load();
  ck_assert_int_eq(nreps, 1);
  ck_assert(has_report("bad.yaml", 0, "YAML error"));
  ck_assert_ptr_nonnull(strstr(reps[0].msg, "; file not loaded"));
  ck_assert_ptr_null(strstr(reps[0].msg, "loaded before"));
  ck_assert_int_eq(nnotes, 0);
  mcpcfg_loader_set_racy_ns(l, 0);
  /* Fixed: "loaded again, 2 resources", once. */
  put("bad.yaml", VS("a", "ns", "a") "---\n" VS("b", "ns", "b"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(nnotes, 1);
  char p[1024];
  path_of("bad.yaml", p, sizeof p);
  ck_assert_str_eq(notes[0].path, p);
  ck_assert_uint_eq(notes[0].line, 0);
  ck_assert_int_eq(notes[0].what, MCPCFG_NOTE_LOADED_AGAIN);
  ck_assert_str_eq(notes[0].msg, "loaded again, 2 resources");
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0);
  ck_assert_int_eq(nnotes, 1);
  /* Broken after serving: what it loaded before stays. */
  put("bad.yaml", VS("a", "ns", "a") "spec: [oops\n");
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(nreps, 2);
  ck_assert_ptr_nonnull(strstr(reps[1].msg, "; file not loaded (what it loaded before stays)"));
  ck_assert_uint_eq(count(l, VS_COLL), 2);
  /* A bad document, then fixed: one resource now. */
  put("bad.yaml", VS("a", "ns", "a") "---\nkind: ConfigMap\n");
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(nreps, 3);
  ck_assert_int_eq(nnotes, 1);
  put("bad.yaml", VS("a", "ns", "a"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(nnotes, 2);
  ck_assert_str_eq(notes[1].msg, "loaded again, 1 resource");
  /* A good file edited: no news. */
  put("bad.yaml", VS("a", "ns", "a2"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(nnotes, 2);
  mcpcfg_loader_del(l);
}
END_TEST

/* Issue 24 item 13: a YAML error names one line, not two ("bad.yaml:6:
 * YAML error: while parsing a flow mapping (line 5): ..."): the line of
 * the problem, or, when that is the end of the file (something left
 * open), the line where what is left open begins. */
START_TEST(test_yaml_error_names_one_line) {
  static const struct {
    const char *text;
    unsigned long line;
    const char *msg;
  } cases[] = {
      /* Open at the end: where the "{" is. */
      {"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"
       "  labels: {a: b\n",
       5,
       "YAML error: did not find expected ',' or '}' while parsing a flow "
       "mapping; file not loaded"},
      {"apiVersion: v1\nkind: ConfigMap\ndata:\n  k: [1, 2\n\n\n",
       4, "while parsing a flow sequence"},
      /* A bad line inside a mapping begun earlier: the bad line. */
      {"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"
       " namespace: y\n",
       5, "YAML error: did not find expected key while parsing a block "
       "mapping; file not loaded"},
      {"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"
       "data:\n  a: b\n  - c\n",
       7, "while parsing a block mapping"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    nreps = 0;
    put("bad.yaml", cases[i].text);
    mcpcfg_loader *l = load();
    ck_assert_int_eq(nreps, 1);
    ck_assert_msg(has_report("bad.yaml", cases[i].line, cases[i].msg),
                  "case %zu: %s:%lu: %s", i, reps[0].path, reps[0].line,
                  reps[0].msg);
    /* One line number: the report's, none in the message. */
    ck_assert_msg(!strstr(reps[0].msg, "line"), "%s", reps[0].msg);
    mcpcfg_loader_del(l);
  }
}
END_TEST

START_TEST(test_invalid_utf8_is_reported_with_its_line) {
  put("bad.yaml", "apiVersion: v1\nkind: ConfigMap\n"
                  "metadata: {name: \"\xff\"}\n");
  mcpcfg_loader *l = load();
  ck_assert_int_eq(mcpcfg_loader_collection_count(l), 0);
  ck_assert(has_report("bad.yaml", 3, "YAML error"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_document_without_api_version_kind_or_name_is_reported) {
  put("m.yaml", "kind: ConfigMap\nmetadata: {name: a}\n"
                "---\napiVersion: v1\nmetadata: {name: b}\n"
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: c}\n"
                "---\napiVersion: v1\nkind: ConfigMap\n"
                "---\n[a, list]\n"
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n");
  mcpcfg_loader *l = load();
  ck_assert_uint_eq(count(l, CM_COLL), 1);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, CM_COLL, "ok"));
  ck_assert_int_eq(nreps, 5);
  ck_assert(has_report("m.yaml", 1, "no apiVersion"));
  ck_assert(has_report("m.yaml", 3, "no kind"));
  ck_assert(has_report("m.yaml", 6, "no metadata.name"));
  ck_assert(has_report("m.yaml", 10, "no metadata"));
  ck_assert(has_report("m.yaml", 13, "not a mapping"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_file_that_turns_bad_keeps_its_last_good_content) {
  put("vs.yaml", VS("a", "ns", "a") "---\n" VS("b", "ns", "b"));
  mcpcfg_loader *l = load();
  char va[32];
  snprintf(va, sizeof va, "%s", mcpcfg_loader_find(l, VS_COLL, "ns/a")->version);
  put("vs.yaml", VS("a", "ns", "changed") "spec: [oops\n");
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(nreps, 1);
  ck_assert(has_report("vs.yaml", 0, "YAML error"));
  ck_assert_uint_eq(count(l, VS_COLL), 2);
  ck_assert_str_eq(mcpcfg_loader_find(l, VS_COLL, "ns/a")->version, va);
  /* Unchanged and still bad: nothing new, no second report. */
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0);
  ck_assert_int_eq(nreps, 1);
  /* Fixed: exactly its new content. */
  put("vs.yaml", VS("a", "ns", "fixed"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_uint_eq(count(l, VS_COLL), 1);
  ck_assert_str_ne(mcpcfg_loader_find(l, VS_COLL, "ns/a")->version, va);
  ck_assert_int_eq(nreps, 1);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_bad_document_keeps_the_previous_version_of_its_resource) {
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"
                 "data: {v: '1'}\n---\n"
                 "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"
                 "data: {v: '1'}\n");
  mcpcfg_loader *l = load();
  char va[32], vb[32];
  snprintf(va, sizeof va, "%s", mcpcfg_loader_find(l, CM_COLL, "a")->version);
  snprintf(vb, sizeof vb, "%s", mcpcfg_loader_find(l, CM_COLL, "b")->version);
  /* a's edit is bad, b's is good: a keeps its old version, b updates. */
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\n"
                 "metadata: {name: a, creationTimestamp: never}\n"
                 "data: {v: '2'}\n---\n"
                 "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"
                 "data: {v: '2'}\n");
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(nreps, 1);
  ck_assert_str_eq(mcpcfg_loader_find(l, CM_COLL, "a")->version, va);
  ck_assert_str_ne(mcpcfg_loader_find(l, CM_COLL, "b")->version, vb);
  /* Once the file is valid, a document removed from it is gone. */
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"
                 "data: {v: '2'}\n");
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_ptr_null(mcpcfg_loader_find(l, CM_COLL, "a"));
  ck_assert_uint_eq(count(l, CM_COLL), 1);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_deleted_file_removes_its_resources) {
  put("a.yaml", VS("a", "ns", "a"));
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n");
  mcpcfg_loader *l = load();
  ck_assert_uint_eq(count(l, CM_COLL), 1);
  del("cm.yaml");
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_ptr_null(mcpcfg_loader_find(l, CM_COLL, "cfg"));
  ck_assert_uint_eq(count(l, VS_COLL), 1);
  /* Still listed, empty: applying it empties it in the store. */
  ck_assert(listed(l, CM_COLL));
  ck_assert_uint_eq(count(l, CM_COLL), 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_duplicate_across_files_lexically_first_path_wins) {
  put("b.yaml", VS("same", "ns", "from-b"));
  put("a/x.yaml", VS("same", "ns", "from-a"));
  mcpcfg_loader *l = load();
  ck_assert_uint_eq(count(l, VS_COLL), 1);
  Google__Protobuf__Struct *s = body_of(mcpcfg_loader_find(l, VS_COLL, "ns/same"));
  ck_assert_str_eq(sfield(s, "hosts")->list_value->values[0]->string_value,
                   "from-a");
  google__protobuf__struct__free_unpacked(s, NULL);
  ck_assert_int_eq(nreps, 1);
  ck_assert(has_report("b.yaml", 1, "duplicate resource " VS_COLL " ns/same"));
  ck_assert(strstr(reps[0].msg, "a/x.yaml:1"));
  /* Reported once, not at every scan. */
  put("other.yaml", VS("o", "ns", "o"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(nreps, 1);
  /* The winner goes: the other one is served. */
  del("a/x.yaml");
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  s = body_of(mcpcfg_loader_find(l, VS_COLL, "ns/same"));
  ck_assert_str_eq(sfield(s, "hosts")->list_value->values[0]->string_value,
                   "from-b");
  google__protobuf__struct__free_unpacked(s, NULL);
  mcpcfg_loader_del(l);
}
END_TEST

/* Issue 12, point 6: a new file defining a name another file serves took
 * it over when its path sorted first, and the report blamed the old file.
 * The served resource keeps its file; the newcomer is reported. */
START_TEST(test_new_file_does_not_take_over_a_served_name) {
  put("b.yaml", VS("same", "ns", "from-b"));
  mcpcfg_loader *l = load();
  put("a.yaml", VS("other", "ns", "o") "---\n" VS("same", "ns", "from-a"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  Google__Protobuf__Struct *s = body_of(mcpcfg_loader_find(l, VS_COLL, "ns/same"));
  ck_assert_str_eq(sfield(s, "hosts")->list_value->values[0]->string_value,
                   "from-b");
  google__protobuf__struct__free_unpacked(s, NULL);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/other"));
  ck_assert_int_eq(nreps, 1);
  ck_assert(has_report("a.yaml", 8, "duplicate resource " VS_COLL " ns/same"));
  ck_assert(strstr(reps[0].msg, "b.yaml:1"));
  /* Editing the owner keeps it the owner. */
  put("b.yaml", VS("same", "ns", "from-b2"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  s = body_of(mcpcfg_loader_find(l, VS_COLL, "ns/same"));
  ck_assert_str_eq(sfield(s, "hosts")->list_value->values[0]->string_value,
                   "from-b2");
  google__protobuf__struct__free_unpacked(s, NULL);
  /* When the owner stops defining it, the other definition is served. */
  put("b.yaml", VS("renamed", "ns", "r"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  s = body_of(mcpcfg_loader_find(l, VS_COLL, "ns/same"));
  ck_assert_str_eq(sfield(s, "hosts")->list_value->values[0]->string_value,
                   "from-a");
  google__protobuf__struct__free_unpacked(s, NULL);
  /* And a.yaml owns it now: b.yaml defining it again is reported. */
  nreps = 0;
  put("b.yaml", VS("same", "ns", "from-b3"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  s = body_of(mcpcfg_loader_find(l, VS_COLL, "ns/same"));
  ck_assert_str_eq(sfield(s, "hosts")->list_value->values[0]->string_value,
                   "from-a");
  google__protobuf__struct__free_unpacked(s, NULL);
  ck_assert(has_report("b.yaml", 1, "served from"));
  ck_assert(strstr(reps[0].msg, "a.yaml:8"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_duplicate_within_file_first_document_wins) {
  put("a.yaml", VS("same", "ns", "first") "---\n" VS("same", "ns", "second"));
  mcpcfg_loader *l = load();
  Google__Protobuf__Struct *s = body_of(mcpcfg_loader_find(l, VS_COLL, "ns/same"));
  ck_assert_str_eq(sfield(s, "hosts")->list_value->values[0]->string_value,
                   "first");
  google__protobuf__struct__free_unpacked(s, NULL);
  ck_assert_int_eq(nreps, 1);
  ck_assert(has_report("a.yaml", 8, "duplicate resource"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_declared_collections_are_listed_empty) {
  mcpcfg_loader *l = new_loader(NULL);
  ck_assert_int_eq(mcpcfg_loader_declare(l, "istio/mesh/v1alpha1/MeshConfig"), 0);
  ck_assert_int_eq(mcpcfg_loader_declare(l, VS_COLL), 0);
  ck_assert_int_eq(mcpcfg_loader_declare(l, VS_COLL), 0);
  ck_assert_int_eq(mcpcfg_loader_declare(l, ""), MCPCFG_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0); /* empty directory */
  ck_assert_uint_eq(mcpcfg_loader_collection_count(l), 2);
  ck_assert_uint_eq(count(l, VS_COLL), 0);
  put("a.yaml", VS("a", "ns", "a"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_uint_eq(mcpcfg_loader_collection_count(l), 2);
  ck_assert_uint_eq(count(l, VS_COLL), 1);
  ck_assert_uint_eq(count(l, "istio/mesh/v1alpha1/MeshConfig"), 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_rescan_without_changes_returns_0_and_reports_nothing) {
  put("a.yaml", VS("a", "ns", "a"));
  put("bad.yaml", "a: [");
  mcpcfg_loader *l = load();
  ck_assert_int_eq(nreps, 1);
  const mcp_resource *r = mcpcfg_loader_find(l, VS_COLL, "ns/a");
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0);
  ck_assert_ptr_eq(mcpcfg_loader_find(l, VS_COLL, "ns/a"), r);
  put("a.yaml", VS("a", "ns", "a")); /* rewritten, same bytes */
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0);
  ck_assert_int_eq(nreps, 1);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_missing_root_is_an_io_error) {
  char p[1024];
  mcpcfg_loader *l = NULL;
  mcpcfg_options o;
  mcpcfg_options_default(&o);
  o.report = on_report;
  path_of("missing", p, sizeof p);
  ck_assert_int_eq(mcpcfg_loader_new(&l, p, &o), 0);
  ck_assert_int_eq(mcpcfg_loader_scan(l), MCPCFG_ERR_IO);
  ck_assert_int_eq(nreps, 1);
  ck_assert_int_eq(mcpcfg_loader_scan(l), MCPCFG_ERR_IO);
  ck_assert_int_eq(nreps, 1); /* reported once */
  ck_assert_int_eq(mkdir(p, 0755), 0);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0);
  ck_assert_int_eq(rmdir(p), 0);
  ck_assert_int_eq(mcpcfg_loader_scan(l), MCPCFG_ERR_IO);
  ck_assert_int_eq(nreps, 2); /* gone again: reported again */
  ck_assert_str_eq(mcpcfg_strerror(MCPCFG_ERR_IO),
                   "cannot read the configuration directory");
  mcpcfg_loader_del(l);
  ck_assert_int_eq(mcpcfg_loader_new(&l, "", &o), MCPCFG_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_directories_nested_too_deep_are_reported) {
  char rel[512] = "";
  for (int i = 0; i < 64; i++)
    strcat(rel, "d/");
  strcat(rel, "x.yaml");
  put(rel, VS("x", "ns", "x"));
  put("top.yaml", VS("top", "ns", "top"));
  mcpcfg_loader *l = load();
  ck_assert_uint_eq(count(l, VS_COLL), 1);
  ck_assert_int_eq(nreps, 1);
  ck_assert(strstr(reps[0].msg, "directories nested too deep"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_root_that_is_a_file_is_an_io_error) {
  char p[1024];
  mcpcfg_loader *l = NULL;
  mcpcfg_options o;
  mcpcfg_options_default(&o);
  o.report = on_report;
  put("a.yaml", VS("a", "ns", "a"));
  path_of("a.yaml", p, sizeof p);
  ck_assert_int_eq(mcpcfg_loader_new(&l, p, &o), 0);
  ck_assert_int_eq(mcpcfg_loader_scan(l), MCPCFG_ERR_IO);
  ck_assert(has_report("a.yaml", 0, "not a directory"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_example_config_loads_without_reports) {
  mcpcfg_loader *l = NULL;
  mcpcfg_options o;
  mcpcfg_options_default(&o);
  o.report = on_report;
  ck_assert_int_eq(mcpcfg_loader_new(&l, MCPCFG_EXAMPLES_DIR, &o), 0);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  for (int i = 0; i < nreps && i < 64; i++)
    fprintf(stderr, "%s:%lu: %s\n", reps[i].path, reps[i].line, reps[i].msg);
  ck_assert_int_eq(nreps, 0);
  ck_assert_uint_ge(count(l, VS_COLL), 2);
  ck_assert_uint_ge(count(l, "istio/networking/v1alpha3/destinationrules"), 1);
  ck_assert_uint_ge(count(l, "istio/networking/v1alpha3/gateways"), 1);
  ck_assert_uint_ge(count(l, "istio/networking/v1alpha3/serviceentries"), 1);
  ck_assert_uint_ge(count(l, CM_COLL), 1);
  /* Destination (issue 14) and Dispatcher (issue 16) data. */
  ck_assert_uint_eq(count(l, "k8s/core/v1/services"), 1);
  ck_assert_uint_eq(count(l, "k8s/core/v1/endpoints"), 1);
  ck_assert_uint_eq(count(l, "k8s/swarmkit.docker.com/v1/tasks"), 2);
  ck_assert_uint_eq(count(l, "k8s/swarmkit.docker.com/v1/secrets"), 1);
  ck_assert_uint_eq(count(l, "k8s/swarmkit.docker.com/v1/configs"), 1);
  ck_assert_uint_eq(count(l, "k8s/swarmkit.docker.com/v1/nodes"), 1);
  mcpcfg_loader_del(l);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Allocation failures                                                 */
/* ------------------------------------------------------------------ */

/* A directory that exercises every path of a scan. */
static void put_everything(const char *host) {
  char buf[2048];
  snprintf(buf, sizeof buf,
           "%s---\n%s---\n"
           "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n"
           "  labels: {a: b, c: d}\n  annotations: {e: f}\n"
           "  creationTimestamp: 2024-01-02T03:04:05Z\n"
           "data: {x: &x [1, {y: z}], w: *x}\n"
           "---\napiVersion: v1\nkind: Bad\nmetadata: {name: t, "
           "creationTimestamp: bad}\n",
           VS("a", "ns", "h"), VS("b", "ns", "h"));
  put("m.yaml", buf);
  snprintf(buf, sizeof buf, VS("a", "ns", "%s"), host); /* duplicate */
  put("n/dup.yaml", buf);
  put("z.yaml", "bad: [");
}

START_TEST(test_scan_allocation_failure_leaks_nothing_and_changes_nothing) {
  int done = 0;
  char link[1024];
  path_of("loop", link, sizeof link); /* a walk problem, too */
  ck_assert_int_eq(symlink(".", link), 0);
  for (long i = 0; !done; i++) {
    nreps = 0;
    put_everything("h1");
    mcpcfg_loader *l = new_loader(NULL);
    ck_assert_int_eq(mcpcfg_loader_declare(l, "declared"), 0);
    /* First scan: fails cleanly and leaves the loader empty. */
    alloc_countdown = i;
    int rv = mcpcfg_loader_scan(l);
    done = alloc_countdown >= 0; /* the i-th allocation was not reached */
    alloc_countdown = -1;
    if (rv < 0) {
      ck_assert_int_eq(rv, MCPCFG_ERR_NOMEM);
      ck_assert_uint_eq(mcpcfg_loader_collection_count(l), 1);
      ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
    } else {
      ck_assert_int_eq(rv, 1);
    }
    char v[32];
    snprintf(v, sizeof v, "%s", mcpcfg_loader_find(l, CM_COLL, "cfg")->version);
    ck_assert_uint_eq(count(l, VS_COLL), 2);
    /* Rescan after changes: fails cleanly and keeps the old view. */
    put("m.yaml", VS("a", "ns", "h"));
    put("new.yaml", VS("c", "ns", "h"));
    del("n/dup.yaml");
    alloc_countdown = i;
    rv = mcpcfg_loader_scan(l);
    done = done && alloc_countdown >= 0;
    alloc_countdown = -1;
    if (rv < 0) {
      ck_assert_int_eq(rv, MCPCFG_ERR_NOMEM);
      ck_assert_str_eq(mcpcfg_loader_find(l, CM_COLL, "cfg")->version, v);
      ck_assert_uint_eq(count(l, VS_COLL), 2);
      ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
    }
    ck_assert_ptr_null(mcpcfg_loader_find(l, CM_COLL, "cfg"));
    ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/c"));
    mcpcfg_loader_del(l);
    del("new.yaml");
  }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Applying to a store                                                 */
/* ------------------------------------------------------------------ */

static mcp_store *new_store(void) {
  mcp_store_options o;
  mcp_store *s = NULL;
  mcp_store_options_default(&o);
  o.epoch = 42;
  ck_assert_int_eq(mcp_store_new(&s, &o), 0);
  return s;
}

/* Found by fuzz_config_parse: a name the store refuses failed the whole
 * collection's apply; it must be reported and skipped like any bad
 * document. */
START_TEST(test_name_the_store_refuses_is_skipped_not_blocking) {
  put("vs.yaml", VS("good", "ns", "a") "---\n" VS("bad name", "ns", "b"));
  mcpcfg_loader *l = load();
  ck_assert(has_report("vs.yaml", 0, "naming rules"));
  ck_assert_uint_eq(count(l, VS_COLL), 1);
  mcp_store *s = new_store();
  ck_assert_int_ge(mcpcfg_loader_apply(l, s, 1), 1);
  ck_assert_uint_eq(mcp_store_count(s, VS_COLL), 1);
  ck_assert_ptr_nonnull(mcp_store_version(s, VS_COLL, "ns/good"));
  mcp_store_del(s);
  mcpcfg_loader_del(l);
}
END_TEST

static int nacks_seen;

static void count_nacks(const mcp_event *ev, void *user_data) {
  (void)user_data;
  if (ev->type == MCP_EVENT_NACK)
    nacks_seen++;
}

static void flatten_msg(mcp_msg *m, uint8_t **buf, size_t *len) {
  *len = mcp_msg_len(m);
  *buf = malloc(*len ? *len : 1);
  ck_assert_ptr_nonnull(*buf);
  mcp_msg_flatten(m, *buf);
  mcp_msg_free(m);
}

/* Serves what |l| holds for |coll| through a real source session to a
 * sink session with the sink's default limits (what mcp-sink applies);
 * returns the number of resources the sink holds after, and counts its
 * NACKs in |nacks_seen|. */
static size_t through_a_default_sink(mcpcfg_loader *l, const char *coll) {
  mcp_store *st = new_store();
  ck_assert_int_ge(mcpcfg_loader_apply(l, st, 1), 0);
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = st;
  mcp_source_session *src = NULL;
  ck_assert_int_eq(mcp_source_session_new(&src, &so, 1), 0);
  mcp_sink_options ko;
  mcp_sink_options_default(&ko);
  const char *cs[] = {coll};
  ko.collections = cs;
  ko.ncollections = 1;
  ko.on_event = count_nacks;
  mcp_sink_state *ss = NULL;
  mcp_sink_session *sk = NULL;
  ck_assert_int_eq(mcp_sink_state_new(&ss, &ko), 0);
  ck_assert_int_eq(mcp_sink_session_new(&sk, ss, 1), 0);
  nacks_seen = 0;
  for (int moved = 1, round = 0; moved && round < 20; round++) {
    mcp_msg *m;
    uint8_t *b;
    size_t n;
    moved = 0;
    while (mcp_sink_session_next(sk, &m) == 1) {
      flatten_msg(m, &b, &n);
      ck_assert_int_ge(mcp_source_session_recv(src, b, n, 1), 0);
      free(b);
      moved = 1;
    }
    while (mcp_source_session_next(src, 1, &m) == 1) {
      flatten_msg(m, &b, &n);
      ck_assert_int_ge(mcp_sink_session_recv(sk, b, n, 1), 0);
      free(b);
      moved = 1;
    }
  }
  size_t held = mcp_sink_state_count(ss, coll);
  mcp_sink_session_del(sk);
  mcp_sink_state_del(ss);
  mcp_source_session_del(src);
  mcp_store_del(st);
  return held;
}

/* A YAML document of VS |name| in "ns" with |nlabels| labels. */
static char *vs_with_labels(const char *name, int nlabels, const char *host) {
  size_t cap = 256 + (size_t)nlabels * 32;
  char *y = malloc(cap);
  ck_assert_ptr_nonnull(y);
  int k = snprintf(y, cap,
                   "apiVersion: networking.istio.io/v1alpha3\n"
                   "kind: VirtualService\nmetadata:\n  name: %s\n"
                   "  namespace: ns\n  labels:\n",
                   name);
  for (int i = 0; i < nlabels; i++)
    k += snprintf(y + k, cap - (size_t)k, "    l%d: v\n", i);
  snprintf(y + k, cap - (size_t)k, "spec:\n  hosts: [%s]\n", host);
  return y;
}

/* Issue 12, point 4: the source served 257 labels, the sink NACKed every
 * later push of the collection. The loader applies the sink's limits
 * (mcp_resource_check() with the sink's defaults): the document is skipped
 * with PATH:LINE, the resource keeps its last good content, and a default
 * sink takes every push. */
START_TEST(test_document_over_the_sinks_metadata_limit_is_skipped) {
  char *ok = vs_with_labels("big", MCP_DEFAULT_MAX_METADATA, "before");
  put("vs.yaml", ok);
  free(ok);
  put("other.yaml", VS("other", "ns", "o"));
  mcpcfg_loader *l = load();
  ck_assert_int_eq(nreps, 0);
  ck_assert_uint_eq(count(l, VS_COLL), 2);
  ck_assert_uint_eq(through_a_default_sink(l, VS_COLL), 2);
  ck_assert_int_eq(nacks_seen, 0);
  /* One label too many, in the second document of the file. */
  char *bad = vs_with_labels("big", MCP_DEFAULT_MAX_METADATA + 1, "after");
  char *two = malloc(strlen(bad) + 200);
  ck_assert_ptr_nonnull(two);
  sprintf(two, "%s---\n%s", VS("first", "ns", "f"), bad);
  put("vs.yaml", two);
  free(bad);
  free(two);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert(has_report("vs.yaml", 8, "more than 256 labels and annotations"));
  ck_assert(has_report("vs.yaml", 8, "document skipped"));
  Google__Protobuf__Struct *s = body_of(mcpcfg_loader_find(l, VS_COLL, "ns/big"));
  ck_assert_str_eq(sfield(s, "hosts")->list_value->values[0]->string_value,
                   "before");
  google__protobuf__struct__free_unpacked(s, NULL);
  ck_assert_uint_eq(count(l, VS_COLL), 3);
  ck_assert_uint_eq(through_a_default_sink(l, VS_COLL), 3);
  ck_assert_int_eq(nacks_seen, 0);
  mcpcfg_loader_del(l);
}
END_TEST

/* Issue 12, point 7: by default names are what Kubernetes accepts (each
 * segment a lowercase DNS-1123 subdomain); the permissive rule is an
 * option. */
START_TEST(test_default_names_are_kubernetes_names) {
  put("vs.yaml", VS("Not_A_DNS_Label!", "ns", "a") "---\n"
                 VS("reviews.default.svc", "ns", "b") "---\n"
                 VS("ok", "Bad_Namespace", "c"));
  mcpcfg_loader *l = load();
  ck_assert_uint_eq(count(l, VS_COLL), 1);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/reviews.default.svc"));
  ck_assert(has_report("vs.yaml", 1, "naming rules"));
  ck_assert(has_report("vs.yaml", 1, "ns/Not_A_DNS_Label!"));
  ck_assert(has_report("vs.yaml", 16, "Bad_Namespace/ok"));
  mcpcfg_loader_del(l);
  /* A 254-byte segment is not a subdomain. */
  char name[300], doc[600];
  memset(name, 'a', 254);
  name[254] = '\0';
  snprintf(doc, sizeof doc, VS("%s", "ns", "x"), name);
  put("vs.yaml", doc);
  nreps = 0;
  l = load();
  ck_assert_uint_eq(count(l, VS_COLL), 0);
  ck_assert(has_report("vs.yaml", 1, "naming rules"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_permissive_names_are_an_option) {
  put("vs.yaml", VS("Not_A_DNS_Label!", "ns", "a") "---\n"
                 VS("bad name", "ns", "b"));
  mcpcfg_options o;
  mcpcfg_options_default(&o);
  o.name_rules = MCP_NAMES_LENIENT;
  mcpcfg_loader *l = new_loader(&o);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/Not_A_DNS_Label!"));
  /* Never what the sink would refuse: a space breaks every rule but ANY. */
  ck_assert_uint_eq(count(l, VS_COLL), 1);
  ck_assert(has_report("vs.yaml", 8, "naming rules"));
  ck_assert_uint_eq(through_a_default_sink(l, VS_COLL), 1);
  ck_assert_int_eq(nacks_seen, 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_apply_fills_the_store) {
  put("vs.yaml", VS("a", "ns", "a") "---\n" VS("b", "ns", "b"));
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n"
                 "  resourceVersion: '7'\n");
  mcpcfg_loader *l = new_loader(NULL);
  ck_assert_int_eq(mcpcfg_loader_declare(l, "istio/extra/v1/things"), 0);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  mcp_store *s = new_store();
  ck_assert_int_ge(mcpcfg_loader_apply(l, s, 1), 2);
  ck_assert_uint_eq(mcp_store_count(s, VS_COLL), 2);
  ck_assert_uint_eq(mcp_store_count(s, CM_COLL), 1);
  ck_assert_str_eq(mcp_store_version(s, CM_COLL, "cfg"), "7");
  ck_assert_str_eq(mcp_store_version(s, VS_COLL, "ns/a"),
                   mcpcfg_loader_find(l, VS_COLL, "ns/a")->version);
  ck_assert_int_eq(mcp_store_has_collection(s, "istio/extra/v1/things"), 1);
  ck_assert_uint_eq(mcp_store_count(s, "istio/extra/v1/things"), 0);
  mcp_store_del(s);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_apply_unchanged_content_changes_nothing) {
  put("vs.yaml", VS("a", "ns", "a"));
  mcpcfg_loader *l = load();
  mcp_store *s = new_store();
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 1), 1);
  uint64_t g = mcp_store_generation(s, VS_COLL);
  put("vs.yaml", "# same resource\n" VS("a", "ns", "a"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 2), 0);
  ck_assert_uint_eq(mcp_store_generation(s, VS_COLL), g);
  put("vs.yaml", VS("a", "ns", "changed"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 3), 1);
  ck_assert_uint_gt(mcp_store_generation(s, VS_COLL), g);
  ck_assert_str_eq(mcp_store_version(s, VS_COLL, "ns/a"),
                   mcpcfg_loader_find(l, VS_COLL, "ns/a")->version);
  mcp_store_del(s);
  mcpcfg_loader_del(l);
}
END_TEST

/* A scan that changed one file applies its collection only: the others
 * are not validated and compared again (they would cost O(all) per change;
 * docs/benchmarks.md, proposal 8). A resource put straight into the other
 * collection's store shows it was not replaced. */
START_TEST(test_apply_touches_only_changed_collections) {
  put("vs.yaml", VS("a", "ns", "a"));
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n");
  mcpcfg_loader *l = load();
  mcp_store *s = new_store();
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 1), 2);
  mcp_resource extra = {.name = "marker", .version = "1",
                        .type_url = "type.googleapis.com/google.protobuf.Struct",
                        .body = (const uint8_t *)"", .body_len = 0};
  ck_assert_int_ge(mcp_store_upsert(s, CM_COLL, &extra, 2), 0);
  put("vs.yaml", VS("a", "ns", "changed"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 3), 1);
  ck_assert_str_eq(mcp_store_version(s, VS_COLL, "ns/a"),
                   mcpcfg_loader_find(l, VS_COLL, "ns/a")->version);
  ck_assert_uint_eq(mcp_store_count(s, CM_COLL), 2); /* not replaced */
  /* Nothing changed: nothing applied. */
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0);
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 4), 0);
  mcp_store_del(s);
  mcpcfg_loader_del(l);
}
END_TEST

/* The store refuses a collection (here: over its resource limit): apply
 * fails, the collection stays to apply, and once the files are fixed the
 * next apply gives the store exactly what it still lacks. */
START_TEST(test_apply_refused_collection_is_retried) {
  put("vs.yaml", VS("a", "ns", "a") "---\n" VS("b", "ns", "b"));
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n");
  mcpcfg_loader *l = load();
  mcp_store_options o;
  mcp_store *s = NULL;
  mcp_store_options_default(&o);
  o.epoch = 42;
  o.max_resources = 1;
  ck_assert_int_eq(mcp_store_new(&s, &o), 0);
  int rv = mcpcfg_loader_apply(l, s, 1);
  ck_assert_int_lt(rv, 0);
  /* Nothing new on disk: applying again fails again, nothing is lost. */
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 2), rv);
  put("vs.yaml", VS("a", "ns", "a"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_ge(mcpcfg_loader_apply(l, s, 3), 1);
  ck_assert_uint_eq(mcp_store_count(s, VS_COLL), 1);
  ck_assert_uint_eq(mcp_store_count(s, CM_COLL), 1);
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 4), 0);
  mcp_store_del(s);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_apply_after_delete_empties_the_collection) {
  put("vs.yaml", VS("a", "ns", "a"));
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n");
  mcpcfg_loader *l = load();
  mcp_store *s = new_store();
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 1), 2);
  del("cm.yaml");
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 2), 1);
  ck_assert_uint_eq(mcp_store_count(s, CM_COLL), 0);
  ck_assert_int_eq(mcp_store_has_collection(s, CM_COLL), 1);
  ck_assert_uint_eq(mcp_store_count(s, VS_COLL), 1);
  mcp_store_del(s);
  mcpcfg_loader_del(l);
}
END_TEST

/* ------------------------------------------------------------------ */

/* ------------------------------------------------------------------ */
/* Change detection: stat first, read only what may have changed       */
/* ------------------------------------------------------------------ */

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0)
    ;
}

static struct stat stat_of(const char *rel) {
  char p[1024];
  struct stat st;
  path_of(rel, p, sizeof p);
  ck_assert_int_eq(stat(p, &st), 0);
  return st;
}

static int ts_after(struct timespec a, struct timespec b) {
  return a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec > b.tv_nsec);
}

/* Returns once the file system stamps a change later than the ctime of
 * |rel| (its timestamp clock ticks coarsely): seen on a probe file next to
 * the directory, so that |rel| itself and the loader's view are not
 * touched. Waits for the tick, not a fixed time; fails after 30 s. */
static void wait_ctime_tick(const char *rel) {
  struct stat cur = stat_of(rel), pr;
  char probe[1024];
  snprintf(probe, sizeof probe, "%s.tick", dir);
  for (int i = 0;; i++) {
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fstat(fd, &pr), 0);
    close(fd);
    if (ts_after(pr.st_ctim, cur.st_ctim))
      break;
    ck_assert_msg(i < 30000, "the file system's clock does not move");
    sleep_ms(1);
  }
  ck_assert_int_eq(unlink(probe), 0);
}

/* Sets the atime and mtime of |rel| back to those of |st| (nanoseconds
 * included): a content change that mtime alone cannot show. */
static void restore_times(const char *rel, const struct stat *st) {
  char p[1024];
  struct timespec ts[2] = {st->st_atim, st->st_mtim};
  path_of(rel, p, sizeof p);
  ck_assert_int_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
  struct stat now = stat_of(rel);
  ck_assert_int_eq(now.st_mtim.tv_sec, st->st_mtim.tv_sec);
  ck_assert_int_eq(now.st_mtim.tv_nsec, st->st_mtim.tv_nsec);
  ck_assert_int_eq(now.st_size, st->st_size);
}

START_TEST(test_untouched_file_is_not_read_again) {
  put("a.yaml", VS("a", "ns", "a"));
  put("b.yaml", VS("b", "ns", "b"));
  mcpcfg_loader *l = new_loader(NULL);
  mcpcfg_loader_set_racy_ns(l, 0); /* the files were just written */
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_uint_eq(mcpcfg_loader_reads(l), 2);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0);
  ck_assert_uint_eq(mcpcfg_loader_reads(l), 2);
  put("b.yaml", VS("b", "ns", "bb")); /* other size */
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_uint_eq(mcpcfg_loader_reads(l), 3); /* b only */
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/b"));
  ck_assert_int_eq(nreps, 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_same_size_rewrite_with_restored_mtime_is_seen_via_ctime) {
  put("a.yaml", VS("a", "ns", "x1"));
  struct stat before = stat_of("a.yaml");
  mcpcfg_loader *l = new_loader(NULL);
  mcpcfg_loader_set_racy_ns(l, 0); /* stat alone must see it */
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  char v1[32];
  snprintf(v1, sizeof v1, "%s",
           mcpcfg_loader_find(l, VS_COLL, "ns/a")->version);
  wait_ctime_tick("a.yaml"); /* so that the rewrite's ctime moves */
  put("a.yaml", VS("a", "ns", "x2")); /* same size */
  restore_times("a.yaml", &before);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_uint_eq(mcpcfg_loader_reads(l), 2);
  ck_assert_str_ne(mcpcfg_loader_find(l, VS_COLL, "ns/a")->version, v1);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_chmod_rereads_but_same_bytes_change_nothing) {
  put("a.yaml", VS("a", "ns", "a"));
  mcpcfg_loader *l = new_loader(NULL);
  mcpcfg_loader_set_racy_ns(l, 0);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  const mcp_resource *r = mcpcfg_loader_find(l, VS_COLL, "ns/a");
  wait_ctime_tick("a.yaml"); /* so that the chmod's ctime moves */
  char p[1024];
  path_of("a.yaml", p, sizeof p);
  ck_assert_int_eq(chmod(p, 0600), 0); /* ctime only */
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0); /* read, same bytes */
  ck_assert_uint_eq(mcpcfg_loader_reads(l), 2);
  ck_assert_ptr_eq(mcpcfg_loader_find(l, VS_COLL, "ns/a"), r);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0); /* its new stamp is kept */
  ck_assert_uint_eq(mcpcfg_loader_reads(l), 2);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_file_replaced_by_rename_with_same_size_and_mtime_is_seen) {
  put("a.yaml", VS("a", "ns", "x1"));
  struct stat before = stat_of("a.yaml");
  mcpcfg_loader *l = new_loader(NULL);
  mcpcfg_loader_set_racy_ns(l, 0);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  put(".a.yaml.tmp", VS("a", "ns", "x2")); /* hidden: not loaded */
  restore_times(".a.yaml.tmp", &before);
  char from[1024], to[1024];
  path_of(".a.yaml.tmp", from, sizeof from);
  path_of("a.yaml", to, sizeof to);
  ck_assert_int_eq(rename(from, to), 0); /* another inode */
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_uint_eq(mcpcfg_loader_reads(l), 2);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_racy_file_is_read_again_until_read_after_the_window) {
  put("a.yaml", VS("a", "ns", "x1"));
  struct stat before = stat_of("a.yaml");
  mcpcfg_loader *l = new_loader(NULL); /* default window: 2 s */
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0); /* written < 2 s ago */
  ck_assert_uint_eq(mcpcfg_loader_reads(l), 2);
  /* A same-size rewrite with mtime restored and no pause, so that even a
   * ctime of the same tick (a coarse clock) cannot hide it. */
  put("a.yaml", VS("a", "ns", "x2"));
  restore_times("a.yaml", &before);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  const mcp_resource *r = mcpcfg_loader_find(l, VS_COLL, "ns/a");
  ck_assert_ptr_nonnull(r);
  /* The rule is decided at each read: a read made outside the window
   * (here: the window shrunk to 0) is trusted from then on. */
  mcpcfg_loader_set_racy_ns(l, 0);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0); /* racy when last read */
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0);
  ck_assert_uint_eq(mcpcfg_loader_reads(l), 4);
  ck_assert_ptr_eq(mcpcfg_loader_find(l, VS_COLL, "ns/a"), r);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_file_with_mtime_in_the_future_is_read_at_every_scan) {
  put("a.yaml", VS("a", "ns", "a"));
  char p[1024];
  struct timespec ts[2] = {{0, UTIME_OMIT}, {time(NULL) + 3600, 0}};
  path_of("a.yaml", p, sizeof p);
  ck_assert_int_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
  mcpcfg_loader *l = new_loader(NULL);
  mcpcfg_loader_set_racy_ns(l, 0);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0);
  ck_assert_uint_eq(mcpcfg_loader_reads(l), 3);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_unreadable_file_is_tried_at_every_scan) {
  if (geteuid() == 0) /* root reads a mode 000 file: nothing to test */
    return;
  put("a.yaml", VS("a", "ns", "a"));
  char p[1024];
  path_of("a.yaml", p, sizeof p);
  ck_assert_int_eq(chmod(p, 0), 0);
  mcpcfg_loader *l = new_loader(NULL);
  mcpcfg_loader_set_racy_ns(l, 0);
  ck_assert_int_ge(mcpcfg_loader_scan(l), 0);
  ck_assert_int_eq(nreps, 1);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0);
  ck_assert_uint_eq(mcpcfg_loader_reads(l), 2); /* errors are retried */
  ck_assert_int_eq(nreps, 1);                   /* and reported once */
  ck_assert_int_eq(chmod(p, 0644), 0);
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/a"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_hash64_sees_every_bit_and_the_length) {
  unsigned char buf[130];
  memset(buf, 0x5a, sizeof buf);
  ck_assert_uint_eq(mcpcfg_hash64(buf, 77), mcpcfg_hash64(buf, 77));
  for (size_t len = 0; len <= sizeof buf; len++) {
    uint64_t h = mcpcfg_hash64(buf, len);
    if (len)
      ck_assert_uint_ne(h, mcpcfg_hash64(buf, len - 1));
    for (size_t i = 0; i < len; i++)
      for (int bit = 0; bit < 8; bit++) {
        buf[i] ^= (unsigned char)(1u << bit);
        ck_assert_uint_ne(mcpcfg_hash64(buf, len), h);
        buf[i] ^= (unsigned char)(1u << bit);
      }
  }
  unsigned char zeros[64] = {0};
  for (size_t len = 1; len < sizeof zeros; len++)
    ck_assert_uint_ne(mcpcfg_hash64(zeros, len), mcpcfg_hash64(zeros, len - 1));
}
END_TEST

START_TEST(test_version_hash_is_still_fnv1a) {
  /* The content-derived version is observable: sinks see it. It must not
   * change across this release (the file change detection hash did). */
  mcpcfg_loader *l = new_loader(NULL);
  char v[32];
  version_of(l, "apiVersion: v1\nkind: ConfigMap\n"
                "metadata: {name: cfg, namespace: ns}\ndata: {k: v}\n",
             v);
  ck_assert_str_eq(v, "bc3661a8f321648f"); /* as computed before */
  mcpcfg_loader_del(l);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Updating the files a watcher named (issue 25: O(changed))           */
/* ------------------------------------------------------------------ */

/* mcpcfg_loader_update() of |n| relative paths. */
static int update(mcpcfg_loader *l, size_t n, const char *const *rel) {
  char p[8][1024];
  const char *v[8];
  if (n > 8) /* no ck_assert: it may allocate, and allocations can fail */
    abort();
  for (size_t i = 0; i < n; i++) {
    path_of(rel[i], p[i], sizeof p[i]);
    v[i] = p[i];
  }
  return mcpcfg_loader_update(l, v, n);
}
#define UPDATE(l, ...)                                                       \
  update((l), sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *), \
         (const char *const[]){__VA_ARGS__})

/* |l| holds what a new loader's walk of the directory gives: the same
 * collections, names and versions. */
static void same_as_a_scan(const mcpcfg_loader *l) {
  int n0 = nreps;
  mcpcfg_loader *fresh = load();
  nreps = n0; /* its reports are the same ones again */
  ck_assert_uint_eq(mcpcfg_loader_collection_count(l),
                    mcpcfg_loader_collection_count(fresh));
  for (size_t i = 0; i < mcpcfg_loader_collection_count(l); i++) {
    ck_assert_str_eq(mcpcfg_loader_collection_name(l, i),
                     mcpcfg_loader_collection_name(fresh, i));
    const mcp_resource *a, *b;
    size_t na = mcpcfg_loader_resources(l, i, &a),
           nb = mcpcfg_loader_resources(fresh, i, &b);
    ck_assert_uint_eq(na, nb);
    for (size_t k = 0; k < na; k++) {
      ck_assert_str_eq(a[k].name, b[k].name);
      ck_assert_str_eq(a[k].version, b[k].version);
    }
  }
  mcpcfg_loader_del(fresh);
}

START_TEST(test_update_reads_only_the_named_file) {
  put("a.yaml", VS("a", "ns", "a"));
  put("b.yaml", VS("b", "ns", "b"));
  put("sub/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n");
  mcpcfg_loader *l = load();
  char before[64];
  snprintf(before, sizeof before, "%s",
           mcpcfg_loader_find(l, VS_COLL, "ns/a")->version);
  unsigned long reads = mcpcfg_loader_reads(l);
  put("a.yaml", VS("a", "ns", "a2") "---\n" VS("a3", "ns", "x"));
  ck_assert_int_eq(UPDATE(l, "a.yaml"), 1);
  ck_assert_uint_eq(mcpcfg_loader_reads(l), reads + 1);
  ck_assert_str_ne(mcpcfg_loader_find(l, VS_COLL, "ns/a")->version, before);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/a3"));
  same_as_a_scan(l);
  /* Named again, unchanged: nothing to do. */
  ck_assert_int_eq(UPDATE(l, "a.yaml"), 0);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_update_sees_new_deleted_and_renamed_files) {
  put("a.yaml", VS("a", "ns", "a"));
  put("b.yaml", VS("b", "ns", "b"));
  mcpcfg_loader *l = load();
  put("sub/d.yaml", VS("d", "ns", "d"));
  ck_assert_int_eq(UPDATE(l, "sub/d.yaml"), 1);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/d"));
  same_as_a_scan(l);
  del("b.yaml");
  ck_assert_int_eq(UPDATE(l, "b.yaml"), 1);
  ck_assert_ptr_null(mcpcfg_loader_find(l, VS_COLL, "ns/b"));
  same_as_a_scan(l);
  /* A rename: the name moves from one file to another in one update. */
  char from[1024], to[1024];
  path_of("a.yaml", from, sizeof from);
  path_of("e.yaml", to, sizeof to);
  ck_assert_int_eq(rename(from, to), 0);
  ck_assert_int_eq(UPDATE(l, "a.yaml", "e.yaml"), 1);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/a"));
  same_as_a_scan(l);
  /* A document of a collection never seen before. */
  put("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n");
  ck_assert_int_eq(UPDATE(l, "cm.yaml"), 1);
  ck_assert(listed(l, CM_COLL));
  same_as_a_scan(l);
  ck_assert_int_eq(nreps, 0);
  mcpcfg_loader_del(l);
}
END_TEST

/* Names defined by two files follow the scan's rules (the served one keeps
 * its file, then the lexically first path), reported once. */
START_TEST(test_update_follows_the_duplicate_rules) {
  put("b.yaml", VS("same", "ns", "from-b"));
  mcpcfg_loader *l = load();
  put("a.yaml", VS("same", "ns", "from-a"));
  ck_assert_int_eq(UPDATE(l, "a.yaml"), 0 + 1);
  Google__Protobuf__Struct *s = body_of(mcpcfg_loader_find(l, VS_COLL, "ns/same"));
  ck_assert_str_eq(sfield(s, "hosts")->list_value->values[0]->string_value,
                   "from-b"); /* the newcomer does not take it over */
  google__protobuf__struct__free_unpacked(s, NULL);
  ck_assert(has_report("a.yaml", 1, "duplicate resource"));
  del("b.yaml");
  ck_assert_int_eq(UPDATE(l, "b.yaml"), 1);
  s = body_of(mcpcfg_loader_find(l, VS_COLL, "ns/same"));
  ck_assert_str_eq(sfield(s, "hosts")->list_value->values[0]->string_value,
                   "from-a");
  google__protobuf__struct__free_unpacked(s, NULL);
  /* Two documents of one file: the first wins, as in a scan. */
  put("a.yaml", VS("same", "ns", "first") "---\n" VS("same", "ns", "second"));
  ck_assert_int_eq(UPDATE(l, "a.yaml"), 1);
  s = body_of(mcpcfg_loader_find(l, VS_COLL, "ns/same"));
  ck_assert_str_eq(sfield(s, "hosts")->list_value->values[0]->string_value,
                   "first");
  google__protobuf__struct__free_unpacked(s, NULL);
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_update_ignores_what_a_walk_would_not_read) {
  put("a.yaml", VS("a", "ns", "a"));
  mcpcfg_loader *l = load();
  put(".hidden/x.yaml", VS("h", "ns", "h"));
  put("notes.txt", VS("t", "ns", "t"));
  ck_assert_int_eq(UPDATE(l, ".hidden/x.yaml", "notes.txt"), 0);
  const char *outside[] = {"/etc/hostname", "relative.yaml"};
  ck_assert_int_eq(mcpcfg_loader_update(l, outside, 2), 0);
  ck_assert_uint_eq(count(l, VS_COLL), 1);
  /* A bad edit keeps what the file had, as in a scan. */
  put("a.yaml", "bad: [");
  ck_assert_int_eq(UPDATE(l, "a.yaml"), 1);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/a"));
  ck_assert(has_report("a.yaml", 0, ""));
  mcpcfg_loader_del(l);
}
END_TEST

static int hold_a(const char *path, void *ud) {
  const char *suffix = ud;
  size_t n = strlen(path), k = strlen(suffix);
  return n >= k && !strcmp(path + n - k, suffix);
}

/* Issue 24, point 15: a file whose writer is still at work (the watcher
 * saw a modify and no close) is not read, by a walk or an update: it
 * keeps what it had; a new one has nothing yet. */
START_TEST(test_file_being_written_keeps_what_it_had) {
  put("a.yaml", VS("a", "ns", "whole"));
  mcpcfg_loader *l = load();
  const char *v = mcpcfg_loader_find(l, VS_COLL, "ns/a")->version;
  char before[64];
  snprintf(before, sizeof before, "%s", v);
  mcpcfg_loader_set_hold(l, hold_a, "/a.yaml");
  put("a.yaml", VS("a", "ns", "ha")); /* "half" of a longer value */
  ck_assert_int_eq(mcpcfg_loader_scan(l), 0);
  ck_assert_str_eq(mcpcfg_loader_find(l, VS_COLL, "ns/a")->version, before);
  mcpcfg_loader_set_hold(l, hold_a, "/n.yaml");
  put("n.yaml", VS("n", "ns", "n"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1); /* a.yaml: done, read */
  ck_assert_str_ne(mcpcfg_loader_find(l, VS_COLL, "ns/a")->version, before);
  ck_assert_ptr_null(mcpcfg_loader_find(l, VS_COLL, "ns/n"));
  mcpcfg_loader_set_hold(l, NULL, NULL);
  ck_assert_int_eq(UPDATE(l, "n.yaml"), 1);
  ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/n"));
  mcpcfg_loader_del(l);
}
END_TEST

START_TEST(test_update_allocation_failure_changes_nothing) {
  int done = 0;
  for (long i = 0; !done; i++) {
    nreps = 0;
    put("a.yaml", VS("a", "ns", "a"));
    put("b.yaml", VS("b", "ns", "b"));
    put("d.yaml", VS("d", "ns", "d"));
    mcpcfg_loader *l = load();
    char v[64];
    snprintf(v, sizeof v, "%s", mcpcfg_loader_find(l, VS_COLL, "ns/a")->version);
    put("a.yaml", VS("a", "ns", "a2") "---\n" VS("c", "ns", "c"));
    del("d.yaml");
    alloc_countdown = i;
    int rv = UPDATE(l, "a.yaml", "d.yaml");
    done = alloc_countdown >= 0;
    alloc_countdown = -1;
    if (rv < 0) {
      ck_assert_int_eq(rv, MCPCFG_ERR_NOMEM);
      ck_assert_str_eq(mcpcfg_loader_find(l, VS_COLL, "ns/a")->version, v);
      ck_assert_ptr_null(mcpcfg_loader_find(l, VS_COLL, "ns/c"));
      ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/d"));
      ck_assert_int_eq(UPDATE(l, "a.yaml", "d.yaml"), 1);
    } else {
      ck_assert_int_eq(rv, 1);
    }
    ck_assert_ptr_nonnull(mcpcfg_loader_find(l, VS_COLL, "ns/c"));
    ck_assert_ptr_null(mcpcfg_loader_find(l, VS_COLL, "ns/d"));
    same_as_a_scan(l);
    mcpcfg_loader_del(l);
  }
}
END_TEST

/* One edit in a file of many documents is one change: the others, parsed
 * again, are equal to what is served. */
START_TEST(test_update_of_a_many_document_file_records_only_the_edit) {
  put("many.yaml", VS("a", "ns", "a") "---\n" VS("b", "ns", "b") "---\n"
                   VS("c", "ns", "c"));
  mcpcfg_loader *l = load();
  mcp_store *s = new_store();
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 1), 1);
  uint64_t g = mcp_store_generation(s, VS_COLL);
  put("many.yaml", VS("a", "ns", "a") "---\n" VS("b", "ns", "edited") "---\n"
                   VS("c", "ns", "c"));
  ck_assert_int_eq(UPDATE(l, "many.yaml"), 1);
  const char *const *names;
  ck_assert_uint_eq(mcpcfg_loader_delta(l, 0, &names), 1);
  ck_assert_str_eq(names[0], "ns/b");
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 2), 1);
  ck_assert_uint_eq(mcp_store_generation(s, VS_COLL), g + 1);
  ck_assert_str_eq(mcp_store_version(s, VS_COLL, "ns/b"),
                   mcpcfg_loader_find(l, VS_COLL, "ns/b")->version);
  /* Only comments changed: nothing to apply. */
  put("many.yaml", "# a comment\n" VS("a", "ns", "a") "---\n"
                   VS("b", "ns", "edited") "---\n" VS("c", "ns", "c"));
  ck_assert_int_eq(UPDATE(l, "many.yaml"), 1);
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 3), 0);
  ck_assert_uint_eq(mcp_store_generation(s, VS_COLL), g + 1);
  mcp_store_del(s);
  mcpcfg_loader_del(l);
}
END_TEST

/* After an update the store gets the resources that changed, not the
 * collection: a resource put straight into the store stays. */
START_TEST(test_apply_after_update_changes_only_what_changed) {
  put("a.yaml", VS("a", "ns", "a"));
  put("b.yaml", VS("b", "ns", "b"));
  mcpcfg_loader *l = load();
  mcp_store *s = new_store();
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 1), 1);
  mcp_resource extra = {.name = "ns/marker", .version = "1",
                        .type_url = "type.googleapis.com/google.protobuf.Struct",
                        .body = (const uint8_t *)"", .body_len = 0};
  ck_assert_int_ge(mcp_store_upsert(s, VS_COLL, &extra, 2), 0);
  uint64_t g = mcp_store_generation(s, VS_COLL);
  put("a.yaml", VS("a", "ns", "changed"));
  ck_assert_int_eq(UPDATE(l, "a.yaml"), 1);
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 3), 1);
  ck_assert_uint_gt(mcp_store_generation(s, VS_COLL), g);
  ck_assert_str_eq(mcp_store_version(s, VS_COLL, "ns/a"),
                   mcpcfg_loader_find(l, VS_COLL, "ns/a")->version);
  ck_assert_uint_eq(mcp_store_count(s, VS_COLL), 3); /* marker kept */
  del("b.yaml");
  ck_assert_int_eq(UPDATE(l, "b.yaml"), 1);
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 4), 1);
  ck_assert_ptr_null(mcp_store_version(s, VS_COLL, "ns/b"));
  ck_assert_uint_eq(mcp_store_count(s, VS_COLL), 2);
  /* Same bytes again: nothing. */
  ck_assert_int_eq(UPDATE(l, "a.yaml"), 0);
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 5), 0);
  /* A scan in between (whole collection): replaced, marker gone. */
  put("a.yaml", VS("a", "ns", "again"));
  ck_assert_int_eq(mcpcfg_loader_scan(l), 1);
  ck_assert_int_eq(mcpcfg_loader_apply(l, s, 6), 1);
  ck_assert_uint_eq(mcp_store_count(s, VS_COLL), 1);
  mcp_store_del(s);
  mcpcfg_loader_del(l);
}
END_TEST

static TCase *tc(Suite *s, const char *name) {
  TCase *t = tcase_create(name);
  tcase_add_checked_fixture(t, setup, teardown);
  suite_add_tcase(s, t);
  return t;
}

int main(void) {
  Suite *s = suite_create("config_load");
  TCase *t = tc(s, "collection");
  tcase_add_test(t, test_istio_group_gives_istio_first_label_collection);
  tcase_add_test(t, test_other_group_gives_k8s_group_collection);
  tcase_add_test(t, test_api_version_without_group_gives_core_group);
  tcase_add_test(t, test_collection_annotation_overrides_api_version);
  tcase_add_test(t, test_document_without_spec_keeps_its_top_level_fields);
  tcase_add_test(t, test_collection_for_maps_and_rejects);
  tcase_add_test(t, test_bad_api_version_is_reported_and_skipped);
  tcase_add_test(t, test_plural_consonant_y_gives_ies);
  tcase_add_test(t, test_plural_vowel_y_gives_ys);
  tcase_add_test(t, test_plural_s_x_z_ch_sh_give_es);
  tcase_add_test(t, test_plural_otherwise_adds_s);
  t = tc(s, "metadata");
  tcase_add_test(t, test_name_with_namespace_is_namespace_slash_name);
  tcase_add_test(t, test_keep_text_gives_each_documents_bytes_as_written);
  tcase_add_test(t, test_name_without_namespace_is_name);
  tcase_add_test(t, test_version_from_resource_version);
  tcase_add_test(t, test_version_hash_changes_iff_content_changes);
  tcase_add_test(t, test_labels_and_annotations_are_copied_as_text);
  tcase_add_test(t, test_label_that_is_not_a_scalar_is_reported);
  tcase_add_test(t, test_create_time_from_creation_timestamp);
  tcase_add_test(t, test_bad_create_time_is_reported_and_document_skipped);
  tcase_add_test(t, test_parse_time_accepts_rfc3339_and_rejects_the_rest);
  t = tc(s, "body");
  tcase_add_test(t, test_spec_is_encoded_as_struct_with_yaml_types);
  tcase_add_test(t, test_quoted_scalars_stay_strings);
  tcase_add_test(t, test_tags_are_honoured);
  tcase_add_test(t, test_unsupported_or_mismatched_tag_is_reported);
  tcase_add_test(t, test_document_without_spec_gets_empty_struct);
  tcase_add_test(t, test_configmap_data_is_the_body_when_there_is_no_spec);
  tcase_add_test(t, test_spec_that_is_not_a_mapping_is_reported);
  tcase_add_test(t, test_duplicate_key_is_reported);
  t = tc(s, "limits");
  tcase_add_test(t, test_aliases_are_expanded);
  tcase_add_test(t, test_billion_laughs_is_reported_not_expanded);
  tcase_add_test(t, test_recursive_alias_is_reported);
  tcase_add_test(t, test_nesting_deeper_than_the_limit_stops_the_file);
  tcase_add_test(t, test_alias_nesting_deeper_than_the_limit_is_reported);
  tcase_add_test(t, test_a_million_open_brackets_are_rejected_quickly);
  tcase_add_test(t, test_file_over_the_size_limit_is_reported_and_keeps_last_content);
  tcase_add_test(t, test_nul_character_in_a_scalar_is_reported);
  tcase_add_test(t, test_file_changed_during_the_scan_is_not_served_half_written);
  tcase_add_test(t, test_file_appended_while_scanning_then_too_big_says_what_stays);
  t = tc(s, "files");
  tcase_add_test(t, test_multi_document_file_loads_every_document);
  tcase_add_test(t, test_empty_documents_and_files_are_skipped_silently);
  tcase_add_test(t, test_directories_are_read_recursively);
  tcase_add_test(t, test_non_yaml_and_hidden_files_are_ignored);
  tcase_add_test(t, test_configmap_mount_symlinks_are_followed_once);
  tcase_add_test(t, test_broken_file_is_reported_with_path_and_line_others_load);
  tcase_add_test(t, test_yaml_error_names_one_line);
  tcase_add_test(t, test_invalid_utf8_is_reported_with_its_line);
  tcase_add_test(t, test_fixed_file_says_loaded_again_and_first_load_claims_nothing);
  tcase_add_test(t, test_document_without_api_version_kind_or_name_is_reported);
  tcase_add_test(t, test_file_that_turns_bad_keeps_its_last_good_content);
  tcase_add_test(t, test_bad_document_keeps_the_previous_version_of_its_resource);
  tcase_add_test(t, test_deleted_file_removes_its_resources);
  tcase_add_test(t, test_duplicate_across_files_lexically_first_path_wins);
  tcase_add_test(t, test_duplicate_within_file_first_document_wins);
  tcase_add_test(t, test_new_file_does_not_take_over_a_served_name);
  tcase_add_test(t, test_declared_collections_are_listed_empty);
  tcase_add_test(t, test_rescan_without_changes_returns_0_and_reports_nothing);
  tcase_add_test(t, test_missing_root_is_an_io_error);
  tcase_add_test(t, test_root_that_is_a_file_is_an_io_error);
  tcase_add_test(t, test_directories_nested_too_deep_are_reported);
  tcase_add_test(t, test_example_config_loads_without_reports);
  t = tc(s, "change");
  tcase_add_test(t, test_untouched_file_is_not_read_again);
  tcase_add_test(t, test_same_size_rewrite_with_restored_mtime_is_seen_via_ctime);
  tcase_add_test(t, test_chmod_rereads_but_same_bytes_change_nothing);
  tcase_add_test(t, test_file_replaced_by_rename_with_same_size_and_mtime_is_seen);
  tcase_add_test(t, test_racy_file_is_read_again_until_read_after_the_window);
  tcase_add_test(t, test_file_with_mtime_in_the_future_is_read_at_every_scan);
  tcase_add_test(t, test_unreadable_file_is_tried_at_every_scan);
  tcase_add_test(t, test_hash64_sees_every_bit_and_the_length);
  tcase_add_test(t, test_version_hash_is_still_fnv1a);
  t = tc(s, "alloc");
  tcase_add_test(t, test_scan_allocation_failure_leaks_nothing_and_changes_nothing);
  t = tc(s, "store");
  tcase_add_test(t, test_apply_fills_the_store);
  tcase_add_test(t, test_name_the_store_refuses_is_skipped_not_blocking);
  tcase_add_test(t, test_document_over_the_sinks_metadata_limit_is_skipped);
  tcase_add_test(t, test_default_names_are_kubernetes_names);
  tcase_add_test(t, test_permissive_names_are_an_option);
  tcase_add_test(t, test_apply_unchanged_content_changes_nothing);
  tcase_add_test(t, test_apply_after_delete_empties_the_collection);
  tcase_add_test(t, test_apply_touches_only_changed_collections);
  tcase_add_test(t, test_apply_refused_collection_is_retried);
  t = tc(s, "update");
  tcase_add_test(t, test_update_reads_only_the_named_file);
  tcase_add_test(t, test_update_sees_new_deleted_and_renamed_files);
  tcase_add_test(t, test_update_follows_the_duplicate_rules);
  tcase_add_test(t, test_update_ignores_what_a_walk_would_not_read);
  tcase_add_test(t, test_file_being_written_keeps_what_it_had);
  tcase_add_test(t, test_update_allocation_failure_changes_nothing);
  tcase_add_test(t, test_apply_after_update_changes_only_what_changed);
  tcase_add_test(t, test_update_of_a_many_document_file_records_only_the_edit);

  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
