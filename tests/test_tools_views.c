/*
 * The view adapters (tools/views/): the Destination view from Services and
 * Endpoints, the Dispatcher view from swarmkit objects, over real stores
 * and the engine's mcp_watch. Source bodies are made from YAML by
 * libmcp-schema (Struct, or swarmkit's types); view bodies are read back as
 * proto3 JSON with Conduit's and swarmkit's own descriptors.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mcp/engine.h>
#include <mcp/mcp.h>
#include <mcp/schema.h>

#include "views/dest_view.h"
#include "views/disp_view.h"
#include "views/schema_swarmkit.h"
#include "views/view_util.h"

/* ------------------------------------------------------------------ */
/* Failing allocator (the test is linked with --wrap=malloc etc.): the  */
/* i-th allocation fails, once.                                        */
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

#define SVC "k8s/core/v1/services"
#define EP "k8s/core/v1/endpoints"
#define STRUCT "google.protobuf.Struct"

static mcp_schema *schema;
static mcp_store *src, *view;
static mcp_tstamp now = MCP_SECONDS;

static mcp_store *new_store(void) {
  mcp_store_options o;
  mcp_store_options_default(&o);
  o.epoch = 42;
  mcp_store *s = NULL;
  ck_assert_int_eq(mcp_store_new(&s, &o), 0);
  return s;
}

static void setup(void) {
  ck_assert_int_eq(mcp_schema_new(&schema, NULL), 0);
  mcp_schema_error err;
  ck_assert_int_eq(tool_schema_add_swarmkit(schema, &err), 0);
  FILE *f = fopen(CONDUIT_SET, "rb");
  ck_assert_ptr_nonnull(f);
  static uint8_t buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  ck_assert_int_eq(mcp_schema_add_descriptor_set(schema, buf, n, &err), 0);
  src = new_store();
  view = new_store();
}

static void teardown(void) {
  mcp_store_del(src);
  mcp_store_del(view);
  mcp_schema_free(schema);
}

/* Upserts |name| into |coll| of |src| with a body of |msg| made from the
 * YAML |yaml|. */
static void put(const char *coll, const char *name, const char *msg,
                const char *yaml) {
  mcp_schema_docs *docs = NULL;
  mcp_schema_error err;
  int rv = mcp_schema_parse_yaml(NULL, yaml, strlen(yaml), &docs, &err);
  ck_assert_msg(rv == 0, "%s", err.message);
  uint8_t *out = NULL;
  size_t len = 0;
  rv = mcp_schema_encode(schema, msg, mcp_schema_docs_root(docs, 0), "spec",
                         0, &out, &len, &err);
  ck_assert_msg(rv == 0, "%s", err.message);
  char url[200];
  snprintf(url, sizeof url, "type.googleapis.com/%s", msg);
  mcp_resource r = {.name = name, .type_url = url, .body = out,
                    .body_len = len};
  now += MCP_MILLISECONDS;
  ck_assert_int_ge(mcp_store_upsert(src, coll, &r, now), 0);
  mcp_schema_free_bytes(schema, out);
  mcp_schema_docs_free(docs);
}

static void del(const char *coll, const char *name) {
  now += MCP_MILLISECONDS;
  ck_assert_int_eq(mcp_store_delete(src, coll, name, now), 1);
}

/* The body of |name| in view collection |coll| as proto3 JSON of |msg|
 * (caller frees), or NULL when absent. */
typedef struct found {
  const char *name;
  char *json;
  const char *msg;
  char version[64];
} found;

static int on_get(const mcp_item *it, void *ud) {
  found *f = ud;
  if (strcmp(it->name, f->name) != 0)
    return 0;
  size_t n;
  mcp_schema_error err;
  int rv = mcp_schema_to_json(schema, f->msg, it->body, it->body_len, 0,
                              &f->json, &n, &err);
  ck_assert_msg(rv == 0, "%s: %s", f->name, err.message);
  snprintf(f->version, sizeof f->version, "%s", it->version);
  return 1;
}

static char *body_json(const char *coll, const char *name, const char *msg,
                       char *version) {
  mcp_watch *w = NULL;
  ck_assert_int_eq(mcp_watch_new(&w, view, coll, NULL, NULL), 0);
  found f = {name, NULL, msg, ""};
  mcp_watch_foreach(w, on_get, &f);
  mcp_watch_del(w);
  if (version)
    strcpy(version, f.version);
  if (!f.json)
    return NULL;
  char *s = strdup(f.json);
  mcp_schema_free_bytes(schema, f.json);
  return s;
}

static void check_body(const char *coll, const char *name, const char *msg,
                       const char *want) {
  char *got = body_json(coll, name, msg, NULL);
  ck_assert_msg(got != NULL, "%s: no %s", coll, name);
  ck_assert_str_eq(got, want);
  free(got);
}

/* The names of |coll| in |view|, sorted, joined by ','. */
typedef struct names_ctx {
  char **v;
  size_t n;
} names_ctx;

static void on_name(const char *name, const char *version, void *ud) {
  names_ctx *c = ud;
  (void)version;
  c->v = realloc(c->v, (c->n + 1) * sizeof *c->v);
  c->v[c->n++] = strdup(name);
}

static int cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *names(const char *coll) {
  static char buf[4096];
  names_ctx c = {0};
  mcp_store_foreach(view, coll, on_name, &c);
  if (c.n)
    qsort(c.v, c.n, sizeof *c.v, cmp);
  buf[0] = '\0';
  for (size_t i = 0; i < c.n; i++) {
    if (i)
      strcat(buf, ",");
    strcat(buf, c.v[i]);
    free(c.v[i]);
  }
  free(c.v);
  return buf;
}

/* ------------------------------------------------------------------ */
/* Destination                                                         */
/* ------------------------------------------------------------------ */

#define WEB_SVC                                                              \
  "ports:\n"                                                                 \
  "- {name: http, port: 80, targetPort: 8080}\n"                             \
  "- {name: grpc, port: 90}\n"
#define WEB_EP                                                               \
  "subsets:\n"                                                               \
  "- addresses:\n"                                                           \
  "  - {ip: 10.1.0.1, targetRef: {kind: Pod, name: web-0}}\n"                \
  "  - {ip: 10.1.0.2, targetRef: {kind: Pod, name: web-1}}\n"                \
  "  - {ip: 10.1.0.3}\n"                                                     \
  "  notReadyAddresses:\n"                                                   \
  "  - {ip: 10.1.0.4, targetRef: {kind: Pod, name: web-3}}\n"               \
  "  ports: [{name: http, port: 8080}, {name: grpc, port: 9090}]\n"

static dest_view *new_dest(void) {
  dest_view *d = NULL;
  ck_assert_int_eq(dest_view_new(&d, src, view, NULL, NULL), 0);
  return d;
}

static int dsync(dest_view *d) {
  now += MCP_MILLISECONDS;
  int n = dest_view_sync(d, now);
  ck_assert_int_ge(n, 0);
  return n;
}

START_TEST(test_dest_service_ports_give_collections_of_ready_addresses) {
  put(SVC, "default/web", STRUCT, WEB_SVC);
  put(EP, "default/web", STRUCT, WEB_EP);
  dest_view *d = new_dest();
  ck_assert_int_eq(dsync(d), 1);
  ck_assert_str_eq(names("default/web:80"),
                   "10.1.0.1:8080,10.1.0.2:8080,10.1.0.3:8080");
  ck_assert_str_eq(names("default/web:90"),
                   "10.1.0.1:9090,10.1.0.2:9090,10.1.0.3:9090");
  ck_assert_int_eq(mcp_store_has_collection(view, "default/web:8080"), 0);
  /* WeightedAddr: the address as an integer in network order, weight 1,
   * k8s_pod only with a targetRef of kind Pod. */
  check_body("default/web:80", "10.1.0.1:8080",
             "conduit.proxy.destination.WeightedAddr",
             "{\"addr\":{\"ip\":{\"ipv4\":167837697},\"port\":8080},"
             "\"weight\":1,\"metricLabels\":{\"k8s_pod\":\"web-0\"}}");
  check_body("default/web:80", "10.1.0.3:8080",
             "conduit.proxy.destination.WeightedAddr",
             "{\"addr\":{\"ip\":{\"ipv4\":167837699},\"port\":8080},"
             "\"weight\":1}");
  dest_view_del(d);
}
END_TEST

START_TEST(test_dest_service_without_endpoints_exists_empty) {
  put(SVC, "default/web", STRUCT, WEB_SVC);
  put(EP, "default/other", STRUCT, WEB_EP); /* Endpoints without Service */
  dest_view *d = new_dest();
  dsync(d);
  ck_assert_int_eq(mcp_store_has_collection(view, "default/web:80"), 1);
  ck_assert_uint_eq(mcp_store_count(view, "default/web:80"), 0);
  ck_assert_int_eq(mcp_store_has_collection(view, "default/other:80"), 0);
  /* The Endpoints arrive: the addresses appear. */
  put(EP, "default/web", STRUCT, WEB_EP);
  ck_assert_int_eq(dsync(d), 1);
  ck_assert_uint_eq(mcp_store_count(view, "default/web:80"), 3);
  dest_view_del(d);
}
END_TEST

START_TEST(test_dest_only_the_services_changed_are_recomputed) {
  put(SVC, "default/web", STRUCT, WEB_SVC);
  put(EP, "default/web", STRUCT, WEB_EP);
  put(SVC, "ns2/db", STRUCT, "ports: [{port: 5432}]\n");
  dest_view *d = new_dest();
  ck_assert_int_eq(dsync(d), 2);
  ck_assert_int_eq(dsync(d), 0); /* nothing changed */
  uint64_t g80 = mcp_store_generation(view, "default/web:80");
  put(EP, "ns2/db", STRUCT,
      "subsets: [{addresses: [{ip: 10.2.0.1}], ports: [{port: 5432}]}]\n");
  ck_assert_int_eq(dsync(d), 1);
  ck_assert_str_eq(names("ns2/db:5432"), "10.2.0.1:5432");
  ck_assert_uint_eq(mcp_store_generation(view, "default/web:80"), g80);
  /* The same content again: the view does not change. */
  put(EP, "ns2/db", STRUCT,
      "subsets: [{ports: [{port: 5432}], addresses: [{ip: 10.2.0.1}]}]\n");
  uint64_t gdb = mcp_store_generation(view, "ns2/db:5432");
  dsync(d);
  ck_assert_uint_eq(mcp_store_generation(view, "ns2/db:5432"), gdb);
  dest_view_stats st;
  dest_view_get_stats(d, &st);
  ck_assert_uint_eq(st.services, 3); /* the store saw no change */
  dest_view_del(d);
}
END_TEST

START_TEST(test_dest_port_or_service_gone_removes_the_collection) {
  put(SVC, "default/web", STRUCT, WEB_SVC);
  put(EP, "default/web", STRUCT, WEB_EP);
  dest_view *d = new_dest();
  dsync(d);
  put(SVC, "default/web", STRUCT, "ports: [{name: http, port: 80}]\n");
  dsync(d);
  ck_assert_int_eq(mcp_store_has_collection(view, "default/web:90"), 0);
  ck_assert_int_eq(mcp_store_has_collection(view, "default/web:80"), 1);
  /* The last ready address goes: the collection stays, empty. */
  put(EP, "default/web", STRUCT,
      "subsets: [{notReadyAddresses: [{ip: 10.1.0.1}], "
      "ports: [{name: http, port: 8080}]}]\n");
  dsync(d);
  ck_assert_int_eq(mcp_store_has_collection(view, "default/web:80"), 1);
  ck_assert_uint_eq(mcp_store_count(view, "default/web:80"), 0);
  del(SVC, "default/web");
  dsync(d);
  ck_assert_int_eq(mcp_store_has_collection(view, "default/web:80"), 0);
  /* And back. */
  put(SVC, "default/web", STRUCT, WEB_SVC);
  put(EP, "default/web", STRUCT, WEB_EP);
  dsync(d);
  ck_assert_uint_eq(mcp_store_count(view, "default/web:80"), 3);
  ck_assert_uint_eq(mcp_store_count(view, "default/web:90"), 3);
  /* Endpoints deleted: empty, still existing. */
  del(EP, "default/web");
  dsync(d);
  ck_assert_int_eq(mcp_store_has_collection(view, "default/web:80"), 1);
  ck_assert_uint_eq(mcp_store_count(view, "default/web:80"), 0);
  dest_view_del(d);
}
END_TEST

START_TEST(test_dest_ipv6_unnamed_ports_and_bad_input) {
  /* A name without namespace is in "default"; an unnamed service port
   * takes a subset's only port; bad addresses and ports are skipped. */
  put(SVC, "v6", STRUCT, "ports: [{port: 443}, {port: x}, {port: 0}]\n");
  put(EP, "v6", STRUCT,
      "subsets:\n"
      "- addresses: [{ip: '2001:DB8:0:0:0:0:0:1'}, {ip: not-an-ip}, "
      "{ip: '::ffff:10.0.0.1'}, {ip: 10.0.0.9}, {ip: 10.0.0.9}]\n"
      "  ports: [{port: 8443}]\n");
  dest_view *d = new_dest();
  dsync(d);
  ck_assert_str_eq(names("default/v6:443"),
                   "10.0.0.9:8443,[2001:db8::1]:8443,[::ffff:10.0.0.1]:8443");
  check_body("default/v6:443", "[2001:db8::1]:8443",
             "conduit.proxy.destination.WeightedAddr",
             "{\"addr\":{\"ip\":{\"ipv6\":{\"first\":\"2306139568115548160\","
             "\"last\":\"1\"}},\"port\":8443},\"weight\":1}");
  dest_view_stats st;
  dest_view_get_stats(d, &st);
  ck_assert_uint_eq(st.bad_addresses, 3); /* x, 0, not-an-ip */
  /* A body that is not a Struct: no ports, counted. */
  mcp_resource r = {.name = "default/odd", .type_url = "type.googleapis.com/x",
                    .body = (const uint8_t *)"\x0a", .body_len = 1};
  ck_assert_int_eq(mcp_store_upsert(src, SVC, &r, ++now), 1);
  dsync(d);
  dest_view_get_stats(d, &st);
  ck_assert_uint_eq(st.bad_bodies, 1);
  ck_assert_int_eq(mcp_store_has_collection(view, "default/odd:80"), 0);
  dest_view_del(d);
}
END_TEST

START_TEST(test_dest_wrong_shapes_are_skipped_and_said) {
  /* A Service whose ports is not a list has no ports (no collection); an
   * Endpoints whose subsets is a map, or a subset that is a string, gives
   * no address; each is counted and dest_view_why() names it. */
  put(SVC, "default/flat", STRUCT, "ports: 80\n");
  dest_view *d = new_dest();
  ck_assert_str_eq(dest_view_why(d), "");
  dsync(d);
  ck_assert_int_eq(mcp_store_has_collection(view, "default/flat:80"), 0);
  ck_assert_str_eq(dest_view_why(d),
                   "default/flat: not a list, ignored: 'ports'");
  dest_view_stats st;
  dest_view_get_stats(d, &st);
  ck_assert_uint_eq(st.bad_addresses, 1);
  put(SVC, "default/web", STRUCT, WEB_SVC);
  put(EP, "default/web", STRUCT, "subsets: {addresses: [{ip: 10.0.0.1}]}\n");
  dsync(d);
  ck_assert_str_eq(dest_view_why(d),
                   "default/web: not a list, ignored: 'subsets'");
  ck_assert_int_eq(mcp_store_has_collection(view, "default/web:80"), 1);
  ck_assert_uint_eq(mcp_store_count(view, "default/web:80"), 0);
  put(EP, "default/web", STRUCT,
      "subsets:\n- just-a-string\n"
      "- addresses: [{ip: 10.0.0.256}, {ip: 10.1.0.1}]\n"
      "  ports: [{name: http, port: 8080}]\n");
  dsync(d);
  ck_assert_str_eq(names("default/web:80"), "10.1.0.1:8080");
  ck_assert_str_eq(dest_view_why(d),
                   "default/web: not an IP address, skipped: '10.0.0.256'");
  dest_view_get_stats(d, &st);
  ck_assert_uint_eq(st.bad_addresses, 4);
  dest_view_del(d);
}
END_TEST

START_TEST(test_dest_names_and_collections) {
  char b[64];
  ck_assert_int_eq(dest_view_collection(b, sizeof b, "default", "web", 80), 14);
  ck_assert_str_eq(b, "default/web:80");
  ck_assert_int_gt(dest_view_addr_name(b, sizeof b, "010.0.0.1", 1), -2);
  ck_assert_int_eq(dest_view_addr_name(b, sizeof b, "fe80:0:0:0:1:0:0:1", 80),
                   (int)strlen("[fe80::1:0:0:1]:80"));
  ck_assert_str_eq(b, "[fe80::1:0:0:1]:80");
  ck_assert_int_eq(dest_view_addr_name(b, sizeof b, "2001:db8:0:1:1:1:1:1", 1),
                   (int)strlen("[2001:db8:0:1:1:1:1:1]:1"));
  ck_assert_int_eq(dest_view_addr_name(b, sizeof b, "host", 1), -1);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Dispatcher                                                          */
/* ------------------------------------------------------------------ */

#define TASKS "k8s/swarmkit.docker.com/v1/tasks"
#define SECRETS "k8s/swarmkit.docker.com/v1/secrets"
#define CONFIGS "k8s/swarmkit.docker.com/v1/configs"
#define NODES "k8s/swarmkit.docker.com/v1/nodes"
#define TASK "docker.swarmkit.v1.Task"

static char task_yaml[1024];
static const char *task(const char *node, const char *state,
                        const char *image, const char *secrets) {
  snprintf(task_yaml, sizeof task_yaml,
           "nodeId: %s\nserviceId: web\ndesiredState: RUNNING\n"
           "status: {state: %s}\n"
           "spec: {container: {image: '%s', secrets: [%s], "
           "configs: [{configId: conf, configName: conf}]}}\n",
           node, state, image, secrets);
  return task_yaml;
}

#define S1 "{secretId: s1, secretName: s1}"

static disp_view *new_disp(const mcp_schema *sc) {
  disp_view *d = NULL;
  disp_view_options o = {0};
  o.schema = sc;
  ck_assert_int_eq(disp_view_new(&d, src, view, &o), 0);
  return d;
}

static int psync(disp_view *d) {
  now += MCP_MILLISECONDS;
  int n = disp_view_sync(d, now);
  ck_assert_int_ge(n, 0);
  return n;
}

static void put_secret(const char *id) {
  put(SECRETS, id, "docker.swarmkit.v1.Secret",
      "spec: {annotations: {name: x}, data: c2VjcmV0}\n");
}

START_TEST(test_disp_assigned_tasks_and_what_they_reference) {
  put(TASKS, "t1", TASK, task("node-a", "ASSIGNED", "nginx", S1));
  put(TASKS, "t2", TASK, task("node-a", "PENDING", "nginx", S1));
  put(TASKS, "t3", TASK, task("node-b", "RUNNING", "nginx", ""));
  put_secret("s1");
  put_secret("s2"); /* referenced by nobody */
  disp_view *d = new_disp(NULL);
  ck_assert_int_eq(psync(d), 2);
  /* conf is referenced but absent: not listed. */
  ck_assert_str_eq(names("node/node-a"), "secret/s1,task/t1");
  ck_assert_str_eq(names("node/node-b"), "task/t3");
  /* The object's id is set from the name, first. */
  check_body("node/node-a", "task/t1", TASK,
             "{\"id\":\"t1\",\"spec\":{\"container\":{\"image\":\"nginx\","
             "\"secrets\":[{\"secretId\":\"s1\",\"secretName\":\"s1\"}],"
             "\"configs\":[{\"configId\":\"conf\",\"configName\":\"conf\"}]}},"
             "\"serviceId\":\"web\",\"nodeId\":\"node-a\","
             "\"status\":{\"state\":\"ASSIGNED\"},\"desiredState\":\"RUNNING\"}");
  check_body("node/node-a", "secret/s1", "docker.swarmkit.v1.Secret",
             "{\"id\":\"s1\",\"spec\":{\"annotations\":{\"name\":\"x\"},"
             "\"data\":\"c2VjcmV0\"}}");
  /* The config appears: both nodes reference it. */
  put(CONFIGS, "conf", "docker.swarmkit.v1.Config", "spec: {data: eA==}\n");
  ck_assert_int_eq(psync(d), 2);
  ck_assert_str_eq(names("node/node-a"), "config/conf,secret/s1,task/t1");
  ck_assert_str_eq(names("node/node-b"), "config/conf,task/t3");
  /* A secret only node-a's tasks reference changes: only node-a is
   * rewritten. */
  uint64_t gb = mcp_store_generation(view, "node/node-b");
  put(SECRETS, "s1", "docker.swarmkit.v1.Secret", "spec: {data: eg==}\n");
  ck_assert_int_eq(psync(d), 1);
  ck_assert_uint_eq(mcp_store_generation(view, "node/node-b"), gb);
  check_body("node/node-a", "secret/s1", "docker.swarmkit.v1.Secret",
             "{\"id\":\"s1\",\"spec\":{\"data\":\"eg==\"}}");
  /* A change invisible to every node (an unreferenced secret). */
  put(SECRETS, "s2", "docker.swarmkit.v1.Secret", "spec: {data: eQ==}\n");
  ck_assert_int_eq(psync(d), 0);
  disp_view_del(d);
}
END_TEST

START_TEST(test_disp_task_moves_and_shared_secret) {
  put(TASKS, "t1", TASK, task("node-a", "ASSIGNED", "nginx", S1));
  put(TASKS, "t2", TASK, task("node-a", "ASSIGNED", "redis", S1));
  put_secret("s1");
  disp_view *d = new_disp(NULL);
  psync(d);
  ck_assert_str_eq(names("node/node-a"), "secret/s1,task/t1,task/t2");
  /* t1 moves to node-b: both nodes are rewritten, the secret follows. */
  put(TASKS, "t1", TASK, task("node-b", "ASSIGNED", "nginx", S1));
  ck_assert_int_eq(psync(d), 2);
  ck_assert_str_eq(names("node/node-a"), "secret/s1,task/t2");
  ck_assert_str_eq(names("node/node-b"), "secret/s1,task/t1");
  /* A secret shared by two tasks stays until the second goes. */
  put(TASKS, "t1", TASK, task("node-a", "ASSIGNED", "nginx", S1));
  psync(d);
  ck_assert_str_eq(names("node/node-b"), "");
  ck_assert_int_eq(mcp_store_has_collection(view, "node/node-b"), 1);
  del(TASKS, "t1");
  psync(d);
  ck_assert_str_eq(names("node/node-a"), "secret/s1,task/t2");
  del(TASKS, "t2");
  psync(d);
  ck_assert_str_eq(names("node/node-a"), "");
  /* The secret deleted while referenced: it leaves the node. */
  put(TASKS, "t3", TASK, task("node-a", "ASSIGNED", "nginx", S1));
  psync(d);
  ck_assert_str_eq(names("node/node-a"), "secret/s1,task/t3");
  del(SECRETS, "s1");
  ck_assert_int_eq(psync(d), 1);
  ck_assert_str_eq(names("node/node-a"), "task/t3");
  disp_view_del(d);
}
END_TEST

START_TEST(test_disp_task_past_running_keeps_its_bytes) {
  put(TASKS, "t1", TASK, task("node-a", "RUNNING", "nginx", ""));
  disp_view *d = new_disp(NULL);
  psync(d);
  char v1[64], v2[64];
  free(body_json("node/node-a", "task/t1", TASK, v1));
  /* COMPLETE, nothing else changed: not re-published. */
  put(TASKS, "t1", TASK, task("node-a", "COMPLETE", "nginx", ""));
  psync(d);
  char *j = body_json("node/node-a", "task/t1", TASK, v2);
  ck_assert_str_eq(v1, v2);
  ck_assert_ptr_nonnull(strstr(j, "\"RUNNING\"}"));
  free(j);
  disp_view_stats st;
  disp_view_get_stats(d, &st);
  ck_assert_uint_eq(st.kept, 1);
  /* Past RUNNING with a new spec: published. */
  put(TASKS, "t1", TASK, task("node-a", "FAILED", "nginx:2", ""));
  psync(d);
  j = body_json("node/node-a", "task/t1", TASK, v2);
  ck_assert_str_ne(v1, v2);
  ck_assert_ptr_nonnull(strstr(j, "\"FAILED\""));
  free(j);
  /* Issue 24 item 6: a status-only change past ASSIGNED is not published
   * either (assignments.go:268, TasksEqualStable && State > ASSIGNED)... */
  put(TASKS, "t2", TASK, task("node-a", "ASSIGNED", "nginx", ""));
  psync(d);
  put(TASKS, "t2", TASK, task("node-a", "STARTING", "nginx", ""));
  psync(d);
  j = body_json("node/node-a", "task/t2", TASK, NULL);
  ck_assert_ptr_nonnull(strstr(j, "\"ASSIGNED\""));
  free(j);
  disp_view_get_stats(d, &st);
  ck_assert_uint_eq(st.kept, 2);
  /* ...but one with a new spec is, with its status as it is now. */
  put(TASKS, "t2", TASK, task("node-a", "RUNNING", "nginx:2", ""));
  psync(d);
  j = body_json("node/node-a", "task/t2", TASK, NULL);
  ck_assert_ptr_nonnull(strstr(j, "\"RUNNING\""));
  free(j);
  /* Back below ASSIGNED: it leaves the node. */
  put(TASKS, "t2", TASK, task("node-a", "PENDING", "nginx", ""));
  psync(d);
  ck_assert_str_eq(names("node/node-a"), "task/t1");
  disp_view_del(d);
}
END_TEST

/* Issue 24 item 5: swarmkit releases the secrets and configs of a task
 * past RUNNING (assignments.go:268-277) and never adds those of a task first
 * seen past RUNNING (:281); a dependency another live task uses stays. */
START_TEST(test_disp_finished_task_releases_its_dependencies) {
  put(TASKS, "t1", TASK, task("node-a", "RUNNING", "nginx", S1));
  put(TASKS, "t2", TASK, task("node-a", "RUNNING", "redis", S1));
  put(TASKS, "t3", TASK, task("node-b", "COMPLETE", "nginx", S1));
  put(TASKS, "t4", TASK, task("node-b", "SHUTDOWN", "nginx", S1));
  put_secret("s1");
  put(CONFIGS, "conf", "docker.swarmkit.v1.Config", "spec: {data: eA==}\n");
  disp_view *d = new_disp(NULL);
  psync(d);
  ck_assert_str_eq(names("node/node-a"),
                   "config/conf,secret/s1,task/t1,task/t2");
  ck_assert_str_eq(names("node/node-b"), "task/t3,task/t4");
  /* t1 finishes: t2 still uses s1 and conf. */
  put(TASKS, "t1", TASK, task("node-a", "COMPLETE", "nginx", S1));
  psync(d);
  ck_assert_str_eq(names("node/node-a"),
                   "config/conf,secret/s1,task/t1,task/t2");
  /* t2 fails: nothing live uses them any more; the tasks stay. */
  put(TASKS, "t2", TASK, task("node-a", "FAILED", "redis", S1));
  psync(d);
  ck_assert_str_eq(names("node/node-a"), "task/t1,task/t2");
  /* A new task up to RUNNING brings them back. */
  put(TASKS, "t5", TASK, task("node-a", "ASSIGNED", "nginx", S1));
  psync(d);
  ck_assert_str_eq(names("node/node-a"),
                   "config/conf,secret/s1,task/t1,task/t2,task/t5");
  disp_view_del(d);
}
END_TEST

START_TEST(test_disp_nodes_and_struct_bodies) {
  /* Struct bodies (mcp-source --body struct, etcd) are encoded with the
   * schema; without it they are counted and ignored. */
  put(NODES, "node-a", STRUCT,
      "description: {hostname: node-a}\nstatus: {state: READY}\n");
  put(TASKS, "t1", STRUCT,
      "nodeId: node-a\nstatus: {state: ASSIGNED}\n"
      "spec: {container: {image: nginx}}\n");
  disp_view *bare = new_disp(NULL);
  psync(bare);
  disp_view_stats st;
  disp_view_get_stats(bare, &st);
  ck_assert_uint_eq(st.bad_bodies, 2);
  disp_view_del(bare);
  mcp_store_del(view);
  view = new_store();
  disp_view *d = new_disp(schema);
  ck_assert_int_eq(psync(d), 2);
  ck_assert_str_eq(names("nodes"), "node-a");
  check_body("nodes", "node-a", "docker.swarmkit.v1.Node",
             "{\"id\":\"node-a\",\"description\":{\"hostname\":\"node-a\"},"
             "\"status\":{\"state\":\"READY\"}}");
  check_body("node/node-a", "task/t1", TASK,
             "{\"id\":\"t1\",\"spec\":{\"container\":{\"image\":\"nginx\"}},"
             "\"nodeId\":\"node-a\",\"status\":{\"state\":\"ASSIGNED\"}}");
  del(NODES, "node-a");
  psync(d);
  ck_assert_str_eq(names("nodes"), "");
  /* A task whose body is not a Task: as absent. */
  mcp_resource r = {.name = "t1", .type_url = "type.googleapis.com/x.Y",
                    .body = NULL, .body_len = 0};
  ck_assert_int_eq(mcp_store_upsert(src, TASKS, &r, ++now), 1);
  psync(d);
  ck_assert_str_eq(names("node/node-a"), "");
  disp_view_del(d);
}
END_TEST

START_TEST(test_disp_wrong_shapes_are_skipped_and_said) {
  /* A Task in a state swarmkit does not have, or a Struct body that is not
   * a Task, is skipped as absent, counted, and disp_view_why() names it. */
  put(TASKS, "t1", TASK, task("node-a", "ASSIGNED", "nginx", ""));
  disp_view *d = new_disp(schema);
  ck_assert_str_eq(disp_view_why(d), "");
  psync(d);
  ck_assert_str_eq(names("node/node-a"), "task/t1");
  put(TASKS, "t1", TASK, task("node-a", "999", "nginx", ""));
  psync(d);
  ck_assert_str_eq(names("node/node-a"), "");
  ck_assert_str_eq(disp_view_why(d),
                   "t1: a Task in an unknown status.state: 999");
  put(TASKS, "t2", STRUCT,
      "nodeId: node-a\nstatus: {state: SLEEPING}\n");
  psync(d);
  ck_assert_str_eq(names("node/node-a"), "");
  ck_assert_msg(!strncmp(disp_view_why(d), "t2: not a valid object: ", 24),
                "%s", disp_view_why(d));
  put(TASKS, "t3", STRUCT, "nodeId: node-a\nstatus: [1, 2]\n");
  psync(d);
  ck_assert_msg(!strncmp(disp_view_why(d), "t3: not a valid object: ", 24),
                "%s", disp_view_why(d));
  disp_view_stats st;
  disp_view_get_stats(d, &st);
  ck_assert_uint_eq(st.bad_bodies, 3);
  disp_view_del(d);
}
END_TEST

START_TEST(test_disp_collection_removed_drops_everything) {
  put(TASKS, "t1", TASK, task("node-a", "ASSIGNED", "nginx", S1));
  put_secret("s1");
  disp_view *d = new_disp(NULL);
  psync(d);
  ck_assert_str_eq(names("node/node-a"), "secret/s1,task/t1");
  ck_assert_int_eq(mcp_store_remove_collection(src, SECRETS, ++now), 1);
  psync(d);
  ck_assert_str_eq(names("node/node-a"), "task/t1");
  ck_assert_int_eq(mcp_store_remove_collection(src, TASKS, ++now), 1);
  psync(d);
  ck_assert_str_eq(names("node/node-a"), "");
  disp_view_del(d);
}
END_TEST

START_TEST(test_dest_collection_removed_drops_everything) {
  put(SVC, "default/web", STRUCT, WEB_SVC);
  put(EP, "default/web", STRUCT, WEB_EP);
  dest_view *d = new_dest();
  dsync(d);
  ck_assert_int_eq(mcp_store_remove_collection(src, EP, ++now), 1);
  dsync(d);
  ck_assert_uint_eq(mcp_store_count(view, "default/web:80"), 0);
  ck_assert_int_eq(mcp_store_has_collection(view, "default/web:80"), 1);
  ck_assert_int_eq(mcp_store_remove_collection(src, SVC, ++now), 1);
  dsync(d);
  ck_assert_int_eq(mcp_store_has_collection(view, "default/web:80"), 0);
  dest_view_del(d);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Allocation failures: each one fails the sync with NOMEM at most, and */
/* the next syncs finish the change: the view ends as without failure.  */
/* ------------------------------------------------------------------ */

/* Everything the view holds, as text. */
static void view_text(char *out, size_t len) {
  out[0] = '\0';
  for (size_t i = 0; i < mcp_store_collection_count(view); i++) {
    const char *c = mcp_store_collection_name(view, i);
    if (!mcp_store_has_collection(view, c))
      continue;
    char line[4200];
    snprintf(line, sizeof line, "%s=[%s]\n", c, names(c));
    strncat(out, line, len - strlen(out) - 1);
  }
}

/* The view after |steps| (each a source change then a sync), every sync
 * run with the i-th allocation failing, for every i. */
typedef void (*step_fn)(int step);

static void oom_loop(int dest, step_fn step, int nsteps) {
  static char want[16384], got[16384];
  /* Without failure. */
  for (int pass = 0;; pass++) {
    mcp_store_del(src);
    mcp_store_del(view);
    src = new_store();
    view = new_store();
    dest_view *d = NULL;
    disp_view *p = NULL;
    if (dest)
      ck_assert_int_eq(dest_view_new(&d, src, view, NULL, NULL), 0);
    else
      ck_assert_int_eq(disp_view_new(&p, src, view, NULL), 0);
    int failed_any = 0;
    for (int k = 0; k < nsteps; k++) {
      step(k);
      now += MCP_MILLISECONDS;
      alloc_countdown = pass == 0 ? -1 : pass - 1;
      int rv = dest ? dest_view_sync(d, now) : disp_view_sync(p, now);
      failed_any |= alloc_countdown < 0 && pass > 0;
      alloc_countdown = -1;
      if (rv < 0)
        ck_assert_int_eq(rv, MCP_ERR_NOMEM);
      /* Later syncs finish what a failure left. */
      for (int tries = 0; rv < 0 && tries < 3; tries++)
        rv = dest ? dest_view_sync(d, ++now) : disp_view_sync(p, ++now);
      ck_assert_int_ge(rv, 0);
    }
    view_text(pass == 0 ? want : got, sizeof want);
    if (pass > 0)
      ck_assert_msg(strcmp(want, got) == 0, "allocation %d failed:\n%s\nwant\n%s",
                    pass - 1, got, want);
    dest_view_del(d);
    disp_view_del(p);
    if (pass > 0 && !failed_any)
      break; /* no allocation left to fail */
  }
}

static void dest_step(int k) {
  switch (k) {
  case 0:
    put(SVC, "default/web", STRUCT, WEB_SVC);
    put(EP, "default/web", STRUCT, WEB_EP);
    put(SVC, "ns2/db", STRUCT, "ports: [{port: 5432}]\n");
    break;
  case 1:
    put(EP, "default/web", STRUCT,
        "subsets: [{addresses: [{ip: '2001:db8::1'}, {ip: 10.1.0.7}], "
        "ports: [{name: http, port: 8080}]}]\n");
    break;
  default:
    put(SVC, "default/web", STRUCT, "ports: [{name: grpc, port: 90}]\n");
    del(SVC, "ns2/db");
    break;
  }
}

START_TEST(test_dest_allocation_failures) {
  oom_loop(1, dest_step, 3);
}
END_TEST

static void disp_step(int k) {
  switch (k) {
  case 0:
    put(TASKS, "t1", TASK, task("node-a", "ASSIGNED", "nginx", S1));
    put(TASKS, "t2", TASK, task("node-b", "RUNNING", "nginx", S1));
    put_secret("s1");
    put(NODES, "node-a", "docker.swarmkit.v1.Node", "spec: {}\n");
    break;
  case 1:
    put(TASKS, "t1", TASK, task("node-b", "ASSIGNED", "nginx", S1));
    put(CONFIGS, "conf", "docker.swarmkit.v1.Config", "spec: {data: eA==}\n");
    break;
  default:
    put(TASKS, "t2", TASK, task("node-b", "COMPLETE", "nginx", S1));
    del(SECRETS, "s1");
    del(NODES, "node-a");
    break;
  }
}

START_TEST(test_disp_allocation_failures) {
  oom_loop(0, disp_step, 3);
}
END_TEST

/* ------------------------------------------------------------------ */
/* view_util                                                           */
/* ------------------------------------------------------------------ */

START_TEST(test_util_reader_refuses_truncated_fields_and_groups) {
  const uint8_t good[] = {0x0a, 0x01, 'a', 0x10, 0x96, 0x01};
  const uint8_t bad1[] = {0x0a, 0x05, 'a'}, bad2[] = {0x0b};
  const uint8_t *p = good;
  pbr_field f;
  ck_assert_int_eq(pbr_next(&p, good + sizeof good, &f), 1);
  ck_assert_uint_eq(f.field, 1);
  ck_assert_uint_eq(f.len, 1);
  ck_assert_uint_eq(f.total, 3);
  ck_assert_int_eq(pbr_next(&p, good + sizeof good, &f), 1);
  ck_assert_uint_eq(f.v, 150);
  ck_assert_int_eq(pbr_next(&p, good + sizeof good, &f), 0);
  p = bad1;
  ck_assert_int_eq(pbr_next(&p, bad1 + sizeof bad1, &f), -1);
  p = bad2;
  ck_assert_int_eq(pbr_next(&p, bad2 + sizeof bad2, &f), -1);
}
END_TEST

START_TEST(test_util_map_survives_churn) {
  vmap m = {0};
  char k[32];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 5000; i++) {
      snprintf(k, sizeof k, "k%d", i);
      ck_assert_int_eq(vmap_put(&m, k, (void *)(intptr_t)(i + 1)), 0);
    }
    for (int i = 0; i < 5000; i += 2) {
      snprintf(k, sizeof k, "k%d", i);
      ck_assert_ptr_eq(vmap_del(&m, k), (void *)(intptr_t)(i + 1));
    }
    ck_assert_uint_eq(m.n, 2500);
    size_t it = 0, seen = 0;
    const char *key;
    void *val;
    while (vmap_next(&m, &it, &key, &val)) {
      ck_assert_int_eq(atoi(key + 1) % 2, 1);
      seen++;
    }
    ck_assert_uint_eq(seen, 2500);
    for (int i = 1; i < 5000; i += 2) {
      snprintf(k, sizeof k, "k%d", i);
      ck_assert_ptr_eq(vmap_get(&m, k), (void *)(intptr_t)(i + 1));
      vmap_del(&m, k);
    }
    ck_assert_uint_eq(m.n, 0);
  }
  vmap_free(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tools_views");
  TCase *t = tcase_create("dest");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, test_dest_service_ports_give_collections_of_ready_addresses);
  tcase_add_test(t, test_dest_service_without_endpoints_exists_empty);
  tcase_add_test(t, test_dest_only_the_services_changed_are_recomputed);
  tcase_add_test(t, test_dest_port_or_service_gone_removes_the_collection);
  tcase_add_test(t, test_dest_ipv6_unnamed_ports_and_bad_input);
  tcase_add_test(t, test_dest_wrong_shapes_are_skipped_and_said);
  tcase_add_test(t, test_dest_names_and_collections);
  tcase_add_test(t, test_dest_collection_removed_drops_everything);
  suite_add_tcase(s, t);
  t = tcase_create("disp");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, test_disp_assigned_tasks_and_what_they_reference);
  tcase_add_test(t, test_disp_task_moves_and_shared_secret);
  tcase_add_test(t, test_disp_task_past_running_keeps_its_bytes);
  tcase_add_test(t, test_disp_finished_task_releases_its_dependencies);
  tcase_add_test(t, test_disp_nodes_and_struct_bodies);
  tcase_add_test(t, test_disp_wrong_shapes_are_skipped_and_said);
  tcase_add_test(t, test_disp_collection_removed_drops_everything);
  suite_add_tcase(s, t);
  t = tcase_create("alloc");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 300);
  tcase_add_test(t, test_dest_allocation_failures);
  tcase_add_test(t, test_disp_allocation_failures);
  suite_add_tcase(s, t);
  t = tcase_create("util");
  tcase_add_test(t, test_util_reader_refuses_truncated_fields_and_groups);
  tcase_add_test(t, test_util_map_survives_churn);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
