/* mcp_grpc_acl's own part: reloading a changed file and replacement
 * while other threads check. No network. The list's rules and text
 * format are the core's (mcp_acl) and tested in test_core_auth.c; this
 * stays a gRPC test because the file and the lock are libmcp-grpc's
 * wrapper (mcp_grpc_acl, transport-grpc/src/acl.c): h2c has no such
 * wrapper and uses the core's mcp_acl on its loop thread. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcp/grpc.h"

#define ISTIOD "spiffe://cluster.local/ns/istio-system/sa/istiod"
#define SINK_A "spiffe://cluster.local/ns/default/sa/sink-a"
#define SINK_B "spiffe://cluster.local/ns/evil/sa/sink-b"

/* A peer with the given identities (NULL-terminated). */
typedef struct tpeer {
  const char *ids[8];
  mcp_grpc_peer p;
} tpeer;

static const mcp_grpc_peer *peer(tpeer *t, const char *a, const char *b) {
  memset(t, 0, sizeof(*t));
  size_t n = 0;
  if (a)
    t->ids[n++] = a;
  if (b)
    t->ids[n++] = b;
  t->p.address = "ipv4:127.0.0.1:1";
  t->p.tls = 1;
  t->p.authenticated = n > 0;
  t->p.identities = t->ids;
  t->p.nidentities = n;
  return &t->p;
}

static int check(mcp_grpc_acl *acl, const char *a, const char *b) {
  tpeer t;
  return mcp_grpc_acl_check(acl, peer(&t, a, b));
}

static int parse(mcp_grpc_acl *acl, const char *text, char *err,
                 size_t errlen) {
  return mcp_grpc_acl_parse(acl, text, strlen(text), err, errlen);
}


static void write_file(const char *path, const char *text) {
  char tmp[256];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  ck_assert_int_eq(fclose(f), 0);
  ck_assert_int_eq(rename(tmp, path), 0); /* a new inode: a change */
}

START_TEST(test_load_and_reload_file) {
  char dir[] = "/tmp/mcp-acl-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof(path), "%s/access.list", dir);
  mcp_grpc_acl *acl = NULL;
  ck_assert_int_eq(mcp_grpc_acl_new(&acl), 0);
  char err[256];
  ck_assert_int_eq(mcp_grpc_acl_reload(acl, err, sizeof(err)),
                   MCP_ERR_NOT_FOUND);
  ck_assert_int_eq(mcp_grpc_acl_load_file(acl, path, err, sizeof(err)),
                   MCP_ERR_IO);
  ck_assert_ptr_nonnull(strstr(err, "No such file"));

  write_file(path, "allow " SINK_A "\n");
  ck_assert_int_eq(mcp_grpc_acl_load_file(acl, path, err, sizeof(err)), 0);
  ck_assert_int_eq(check(acl, SINK_A, NULL), 0);
  ck_assert_int_eq(mcp_grpc_acl_reload(acl, err, sizeof(err)), 0);

  write_file(path, "deny " SINK_A "\nallow " SINK_B "\n");
  ck_assert_int_eq(mcp_grpc_acl_reload(acl, err, sizeof(err)), 1);
  ck_assert_int_eq(check(acl, SINK_A, NULL), GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_int_eq(check(acl, SINK_B, NULL), 0);
  ck_assert_int_eq(mcp_grpc_acl_reload(acl, err, sizeof(err)), 0);

  /* A broken version is reported once and the rules in use are kept. */
  write_file(path, "allow " SINK_A "\nbogus line here\n");
  ck_assert_int_eq(mcp_grpc_acl_reload(acl, err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(err, "line 2: too many fields");
  ck_assert_int_eq(mcp_grpc_acl_reload(acl, err, sizeof(err)), 0);
  ck_assert_int_eq(check(acl, SINK_B, NULL), 0);

  /* So is a file that went away. */
  ck_assert_int_eq(unlink(path), 0);
  ck_assert_int_eq(mcp_grpc_acl_reload(acl, err, sizeof(err)), MCP_ERR_IO);
  ck_assert_int_eq(mcp_grpc_acl_reload(acl, err, sizeof(err)), 0);
  ck_assert_int_eq(check(acl, SINK_B, NULL), 0);

  write_file(path, SINK_A "\n");
  ck_assert_int_eq(mcp_grpc_acl_reload(acl, err, sizeof(err)), 1);
  ck_assert_int_eq(check(acl, SINK_A, NULL), 0);
  ck_assert_int_eq(check(acl, SINK_B, NULL), GRPC_STATUS_PERMISSION_DENIED);
  mcp_grpc_acl_del(acl);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* ---- replacement while other threads check ---- */

typedef struct checker {
  mcp_grpc_acl *acl;
  atomic_int *stop;
  long checks;
} checker;

static void *check_main(void *arg) {
  checker *c = arg;
  while (!atomic_load(c->stop)) {
    /* Every version of the list allows istiod; sink-a flips. */
    ck_assert_int_eq(check(c->acl, ISTIOD, NULL), 0);
    int r = check(c->acl, SINK_A, NULL);
    ck_assert(r == 0 || r == GRPC_STATUS_PERMISSION_DENIED);
    c->checks++;
  }
  return NULL;
}

START_TEST(test_replace_while_checking) {
  mcp_grpc_acl *acl = NULL;
  ck_assert_int_eq(mcp_grpc_acl_new(&acl), 0);
  ck_assert_int_eq(parse(acl, ISTIOD "\n", NULL, 0), 0);
  atomic_int stop;
  atomic_init(&stop, 0);
  checker c[3];
  pthread_t th[3];
  for (int i = 0; i < 3; i++) {
    memset(&c[i], 0, sizeof(c[i]));
    c[i].acl = acl;
    c[i].stop = &stop;
    ck_assert_int_eq(pthread_create(&th[i], NULL, check_main, &c[i]), 0);
  }
  for (int i = 0; i < 2000; i++) {
    const char *text = i % 2 ? ISTIOD "\n" SINK_A "\n"
                             : ISTIOD "\ndeny " SINK_A "\n";
    ck_assert_int_eq(parse(acl, text, NULL, 0), 0);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 3; i++)
    pthread_join(th[i], NULL);
  mcp_grpc_acl_del(acl);
}
END_TEST

int main(void) {
  Suite *s = suite_create("grpc_acl");
  TCase *tc = tcase_create("acl");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_load_and_reload_file);
  tcase_add_test(tc, test_replace_while_checking);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
