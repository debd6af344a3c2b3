/* Access lists: the decision rules, the file format and its errors,
 * lasting and loaded rules together, reloading a changed file, and
 * replacement while other threads check. No network. */
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

START_TEST(test_empty_list_allows_nobody) {
  mcp_grpc_acl *acl = NULL;
  ck_assert_int_eq(mcp_grpc_acl_new(&acl), 0);
  ck_assert_uint_eq(mcp_grpc_acl_count(acl), 0);
  ck_assert_int_eq(check(acl, SINK_A, NULL), GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_int_eq(check(acl, NULL, NULL), GRPC_STATUS_UNAUTHENTICATED);
  mcp_grpc_acl_del(acl);
}
END_TEST

START_TEST(test_allow_list_exact_and_prefix) {
  mcp_grpc_acl *acl = NULL;
  ck_assert_int_eq(mcp_grpc_acl_new(&acl), 0);
  ck_assert_int_eq(mcp_grpc_acl_add(acl, MCP_GRPC_ACL_ALLOW, ISTIOD), 0);
  ck_assert_int_eq(mcp_grpc_acl_add(acl, MCP_GRPC_ACL_ALLOW,
                                    "spiffe://cluster.local/ns/default/*"),
                   0);
  ck_assert_int_eq(check(acl, ISTIOD, NULL), 0);
  ck_assert_int_eq(check(acl, SINK_A, NULL), 0);
  ck_assert_int_eq(check(acl, SINK_B, NULL), GRPC_STATUS_PERMISSION_DENIED);
  /* Exact means exact: no prefix, no suffix, case counts. */
  ck_assert_int_eq(check(acl, ISTIOD "x", NULL),
                   GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_int_eq(check(acl, "SPIFFE://cluster.local/ns/default/sa/a", NULL),
                   GRPC_STATUS_PERMISSION_DENIED);
  /* The prefix is everything before '*', slash included. */
  ck_assert_int_eq(check(acl, "spiffe://cluster.local/ns/default", NULL),
                   GRPC_STATUS_PERMISSION_DENIED);
  /* Any one identity of the peer is enough. */
  ck_assert_int_eq(check(acl, "localhost", ISTIOD), 0);
  /* No identity: UNAUTHENTICATED, whatever the list says. */
  ck_assert_int_eq(check(acl, NULL, NULL), GRPC_STATUS_UNAUTHENTICATED);
  mcp_grpc_acl_del(acl);
}
END_TEST

START_TEST(test_deny_wins_and_deny_list) {
  mcp_grpc_acl *acl = NULL;
  ck_assert_int_eq(mcp_grpc_acl_new(&acl), 0);
  /* Only deny rules: a deny list, everyone else is allowed. */
  ck_assert_int_eq(mcp_grpc_acl_add(acl, MCP_GRPC_ACL_DENY,
                                    "spiffe://cluster.local/ns/evil/*"),
                   0);
  ck_assert_int_eq(check(acl, SINK_A, NULL), 0);
  ck_assert_int_eq(check(acl, SINK_B, NULL), GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_int_eq(check(acl, NULL, NULL), GRPC_STATUS_UNAUTHENTICATED);
  /* An allow rule makes it an allow list; deny still wins over allow. */
  ck_assert_int_eq(mcp_grpc_acl_add(acl, MCP_GRPC_ACL_ALLOW, "*"), 0);
  ck_assert_int_eq(check(acl, SINK_A, NULL), 0);
  ck_assert_int_eq(check(acl, SINK_B, NULL), GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_int_eq(check(acl, SINK_A, SINK_B), GRPC_STATUS_PERMISSION_DENIED);
  mcp_grpc_acl_del(acl);
}
END_TEST

START_TEST(test_bad_patterns_refused) {
  mcp_grpc_acl *acl = NULL;
  ck_assert_int_eq(mcp_grpc_acl_new(&acl), 0);
  const char *bad[] = {"", "a b", "spiffe://x/*/y", "**", "tab\there",
                       "ctl\x01"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_int_eq(mcp_grpc_acl_add(acl, MCP_GRPC_ACL_ALLOW, bad[i]),
                     MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_grpc_acl_add(acl, (mcp_grpc_acl_action)7, "x"),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(mcp_grpc_acl_count(acl), 0);
  mcp_grpc_acl_del(acl);
}
END_TEST

START_TEST(test_file_format) {
  mcp_grpc_acl *acl = NULL;
  ck_assert_int_eq(mcp_grpc_acl_new(&acl), 0);
  char err[128];
  ck_assert_int_eq(parse(acl,
                         "# istiod, and all of default, but not sa/bad\n"
                         "\n"
                         "   allow   " ISTIOD "   # the control plane\n"
                         "allow spiffe://cluster.local/ns/default/*\r\n"
                         "deny\tspiffe://cluster.local/ns/default/sa/bad\n"
                         "legacy-client#not-a-comment\n"
                         "\t# indented comment",
                         err, sizeof(err)),
                   0);
  ck_assert_str_eq(err, "");
  ck_assert_uint_eq(mcp_grpc_acl_count(acl), 4);
  ck_assert_int_eq(check(acl, ISTIOD, NULL), 0);
  ck_assert_int_eq(check(acl, SINK_A, NULL), 0);
  ck_assert_int_eq(check(acl, "spiffe://cluster.local/ns/default/sa/bad",
                         NULL),
                   GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_int_eq(check(acl, "legacy-client#not-a-comment", NULL), 0);
  ck_assert_int_eq(check(acl, SINK_B, NULL), GRPC_STATUS_PERMISSION_DENIED);
  mcp_grpc_acl_del(acl);
}
END_TEST

START_TEST(test_file_errors_name_the_line_and_change_nothing) {
  mcp_grpc_acl *acl = NULL;
  ck_assert_int_eq(mcp_grpc_acl_new(&acl), 0);
  char err[128];
  ck_assert_int_eq(parse(acl, "allow " SINK_A "\n", err, sizeof(err)), 0);
  static const struct {
    const char *text, *err;
  } cases[] = {
      {"allow a\nalow b\n", "line 2: unknown keyword 'alow'"},
      {"# x\n\ndeny\n", "line 3: no identity after 'deny'"},
      {"allow a b\n", "line 1: too many fields"},
      {"allow spiffe://x/*/y\n",
       "line 1: bad identity pattern (a '*' may only end it) "
       "'spiffe://x/*/y'"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    ck_assert_int_eq(parse(acl, cases[i].text, err, sizeof(err)),
                     MCP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(err, cases[i].err);
    /* The rules in use are kept. */
    ck_assert_uint_eq(mcp_grpc_acl_count(acl), 1);
    ck_assert_int_eq(check(acl, SINK_A, NULL), 0);
  }
  /* A NUL inside the text is not an identity character. */
  ck_assert_int_eq(mcp_grpc_acl_parse(acl, "allow a\0b\n", 10, err,
                                      sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);
  size_t big = (1u << 20) + 1;
  char *huge = malloc(big);
  ck_assert_ptr_nonnull(huge);
  memset(huge, '\n', big);
  ck_assert_int_eq(mcp_grpc_acl_parse(acl, huge, big, err, sizeof(err)),
                   MCP_ERR_LIMIT);
  free(huge);
  ck_assert_uint_eq(mcp_grpc_acl_count(acl), 1);
  mcp_grpc_acl_del(acl);
}
END_TEST

START_TEST(test_lasting_rules_survive_parse) {
  mcp_grpc_acl *acl = NULL;
  ck_assert_int_eq(mcp_grpc_acl_new(&acl), 0);
  ck_assert_int_eq(mcp_grpc_acl_add(acl, MCP_GRPC_ACL_ALLOW, ISTIOD), 0);
  ck_assert_int_eq(parse(acl, "allow " SINK_A "\n", NULL, 0), 0);
  ck_assert_int_eq(check(acl, SINK_A, NULL), 0);
  ck_assert_int_eq(parse(acl, "deny " ISTIOD "\n", NULL, 0), 0);
  /* The file's deny beats the lasting allow; sink-a's rule is gone. */
  ck_assert_int_eq(check(acl, ISTIOD, NULL), GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_int_eq(check(acl, SINK_A, NULL), GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_int_eq(parse(acl, "", NULL, 0), 0);
  ck_assert_int_eq(check(acl, ISTIOD, NULL), 0);
  ck_assert_uint_eq(mcp_grpc_acl_count(acl), 1);
  mcp_grpc_acl_del(acl);
}
END_TEST

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
  tcase_add_test(tc, test_empty_list_allows_nobody);
  tcase_add_test(tc, test_allow_list_exact_and_prefix);
  tcase_add_test(tc, test_deny_wins_and_deny_list);
  tcase_add_test(tc, test_bad_patterns_refused);
  tcase_add_test(tc, test_file_format);
  tcase_add_test(tc, test_file_errors_name_the_line_and_change_nothing);
  tcase_add_test(tc, test_lasting_rules_survive_parse);
  tcase_add_test(tc, test_load_and_reload_file);
  tcase_add_test(tc, test_replace_while_checking);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
