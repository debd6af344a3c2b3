/*
 * The authorization rules every transport shares (mcp/auth.h): which
 * certificate values are identities and in which order, how a hook's
 * answer becomes a status, the access list's decision and text format,
 * and the admission key (verified identity first, then address).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/auth.h"

#define ID_A "spiffe://cluster.local/ns/default/sa/sink-a"

/* A peer with |n| identities (URIs), for the list's decisions. */
static mcp_peer peer_of(const char *const *ids, size_t n) {
  mcp_peer p;
  memset(&p, 0, sizeof(p));
  p.address = "ipv4:127.0.0.1:40000";
  p.tls = 1;
  p.identities = ids;
  p.nidentities = n;
  p.authenticated = n > 0;
  return p;
}

static void add(mcp_identity_builder *b, mcp_identity_kind k, const char *v) {
  mcp_identity_add(b, k, v, strlen(v));
}

START_TEST(test_identities_in_order_by_the_rules) {
  mcp_identity_builder b;
  memset(&b, 0, sizeof(b));
  add(&b, MCP_IDENTITY_CN, "legacy");
  add(&b, MCP_IDENTITY_DNS, "istiod.istio-system.svc");
  add(&b, MCP_IDENTITY_URI, ID_A);
  add(&b, MCP_IDENTITY_CN, "second-cn"); /* only the first CN */
  add(&b, MCP_IDENTITY_SAN, "spiffe://x/y"); /* untyped: a URI */
  add(&b, MCP_IDENTITY_SAN, "10.0.0.1");     /* an IP: not an identity */
  add(&b, MCP_IDENTITY_SAN, "fd00::1");
  add(&b, MCP_IDENTITY_SAN, "a@b.example");  /* e-mail: neither */
  add(&b, MCP_IDENTITY_SAN, "web.example");  /* untyped: DNS */
  add(&b, MCP_IDENTITY_DNS, "");             /* empty: ignored */
  mcp_identities ids;
  memset(&ids, 0, sizeof(ids));
  ck_assert_int_eq(mcp_identities_build(&b, NULL, &ids), 0);
  ck_assert_uint_eq(ids.n, 5);
  ck_assert_str_eq(ids.v[0], ID_A);
  ck_assert_str_eq(ids.v[1], "spiffe://x/y");
  ck_assert_str_eq(ids.v[2], "istiod.istio-system.svc");
  ck_assert_str_eq(ids.v[3], "web.example");
  ck_assert_str_eq(ids.v[4], "legacy");
  mcp_peer p;
  memset(&p, 0, sizeof(p));
  mcp_identities_peer(&ids, &p);
  ck_assert_int_eq(p.authenticated, 1);
  ck_assert_uint_eq(p.nuris, 2);
  ck_assert_uint_eq(p.ndns_names, 2);
  ck_assert_str_eq(p.dns_names[0], "istiod.istio-system.svc");
  ck_assert_str_eq(p.common_name, "legacy");
  mcp_identities_free(&ids, NULL);
  ck_assert_ptr_null(ids.v);
  ck_assert_uint_eq(ids.n, 0);
}
END_TEST

/* A denied identity that could not be kept must not leave the others to
 * pass a deny list: the certificate then has no identity at all. */
START_TEST(test_unusable_identity_leaves_the_peer_without_any) {
  mcp_acl *acl = NULL;
  ck_assert_int_eq(mcp_acl_new(&acl, NULL), 0);
  ck_assert_int_eq(mcp_acl_add(acl, MCP_ACL_DENY, "spiffe://evil/*"), 0);
  char *big = malloc(MCP_IDENTITY_MAX_LEN + 2);
  memset(big, 'a', MCP_IDENTITY_MAX_LEN + 1);
  big[MCP_IDENTITY_MAX_LEN + 1] = '\0';
  memcpy(big, "spiffe://evil/", 14);
  for (int c = 0; c < 3; c++) {
    mcp_identity_builder b;
    memset(&b, 0, sizeof(b));
    add(&b, MCP_IDENTITY_DNS, "fine.example");
    if (c == 0) /* NUL inside */
      mcp_identity_add(&b, MCP_IDENTITY_URI, "spiffe://evil/x\0y", 17);
    else if (c == 1) /* too long */
      add(&b, MCP_IDENTITY_URI, big);
    else /* one more than are kept */
      for (int i = 0; i <= MCP_IDENTITY_MAX; i++)
        add(&b, MCP_IDENTITY_URI,
            i < MCP_IDENTITY_MAX ? "spiffe://ok/x" : "spiffe://evil/x");
    mcp_identities ids;
    memset(&ids, 0, sizeof(ids));
    ck_assert_int_eq(mcp_identities_build(&b, NULL, &ids), 0);
    ck_assert_uint_eq(ids.n, 0);
    mcp_peer p = peer_of(NULL, 0);
    p.tls = 1;
    mcp_identities_peer(&ids, &p);
    ck_assert_int_eq(p.authenticated, 0);
    ck_assert_int_eq(mcp_acl_check(acl, &p), MCP_CODE_UNAUTHENTICATED);
    mcp_identities_free(&ids, NULL);
  }
  free(big);
  mcp_acl_del(acl);
}
END_TEST

static int refuse_with(const mcp_peer *p, void *ud) {
  (void)p;
  return *(int *)ud;
}

START_TEST(test_authorize_statuses) {
  mcp_peer p = peer_of(NULL, 0);
  const char *d = NULL;
  ck_assert_int_eq(mcp_authorize(NULL, NULL, &p, &d), 0);
  int code = 0;
  ck_assert_int_eq(mcp_authorize(refuse_with, &code, &p, &d), 0);
  code = MCP_CODE_UNAUTHENTICATED;
  ck_assert_int_eq(mcp_authorize(refuse_with, &code, &p, &d), 16);
  ck_assert_str_eq(d, "peer not authenticated: no verified certificate "
                      "identity");
  p.dialed = 1;
  code = MCP_CODE_PERMISSION_DENIED;
  ck_assert_int_eq(mcp_authorize(refuse_with, &code, &p, &d), 7);
  ck_assert_str_eq(d, "permission denied: server identity not allowed");
  code = 99; /* out of range: PERMISSION_DENIED */
  ck_assert_int_eq(mcp_authorize(refuse_with, &code, &p, &d), 7);
  code = MCP_CODE_UNAVAILABLE; /* any other code as given */
  ck_assert_int_eq(mcp_authorize(refuse_with, &code, &p, &d), 14);
  ck_assert_str_eq(d, "refused by the authorization policy");
}
END_TEST

START_TEST(test_acl_decisions) {
  mcp_acl *acl = NULL;
  ck_assert_int_eq(mcp_acl_new(&acl, NULL), 0);
  const char *a[] = {ID_A};
  const char *evil[] = {"spiffe://cluster.local/ns/evil/sa/x", "evil-cn"};
  mcp_peer pa = peer_of(a, 1), pe = peer_of(evil, 2), none = peer_of(NULL, 0);
  /* Empty: nobody (fail closed); no identity: UNAUTHENTICATED. */
  ck_assert_int_eq(mcp_acl_check(acl, &pa), MCP_CODE_PERMISSION_DENIED);
  ck_assert_int_eq(mcp_acl_check(acl, &none), MCP_CODE_UNAUTHENTICATED);
  /* Only deny rules: everybody else. */
  ck_assert_int_eq(mcp_acl_add(acl, MCP_ACL_DENY,
                               "spiffe://cluster.local/ns/evil/*"), 0);
  ck_assert_int_eq(mcp_acl_check(acl, &pa), 0);
  ck_assert_int_eq(mcp_acl_check(acl, &pe), MCP_CODE_PERMISSION_DENIED);
  /* An allow rule makes it an allow list; deny still wins. */
  char err[128];
  const char *text = "# comment\nallow " ID_A "\n  evil-cn # bare: allow\n";
  ck_assert_int_eq(mcp_acl_parse(acl, text, strlen(text), err, sizeof(err)),
                   0);
  ck_assert_uint_eq(mcp_acl_count(acl), 3);
  ck_assert_int_eq(mcp_acl_check(acl, &pa), 0);
  ck_assert_int_eq(mcp_acl_authorize(&pe, acl), MCP_CODE_PERMISSION_DENIED);
  const char *other[] = {"spiffe://cluster.local/ns/default/sa/b"};
  mcp_peer po = peer_of(other, 1);
  ck_assert_int_eq(mcp_acl_check(acl, &po), MCP_CODE_PERMISSION_DENIED);
  /* A bad text changes nothing and says where. */
  const char *bad = "allow x\nalow y\n";
  ck_assert_int_eq(mcp_acl_parse(acl, bad, strlen(bad), err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(err, "line 2: unknown keyword 'alow'");
  ck_assert_uint_eq(mcp_acl_count(acl), 3);
  const char *star = "allow a*b\n";
  ck_assert_int_eq(mcp_acl_parse(acl, star, strlen(star), err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert(strstr(err, "line 1: bad identity pattern") != NULL);
  const char *three = "allow x y\n";
  ck_assert_int_eq(mcp_acl_parse(acl, three, strlen(three), err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(err, "line 1: too many fields");
  ck_assert_int_eq(mcp_acl_add(acl, MCP_ACL_ALLOW, "has space"),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_acl_add(acl, (mcp_acl_action)5, "x"),
                   MCP_ERR_INVALID_ARGUMENT);
  /* Replacing the parsed rules keeps the added ones. */
  ck_assert_int_eq(mcp_acl_parse(acl, "", 0, err, sizeof(err)), 0);
  ck_assert_uint_eq(mcp_acl_count(acl), 1);
  mcp_acl_del(acl);
}
END_TEST

START_TEST(test_admit_key_identity_first) {
  char k[MCP_ADMIT_KEY_MAX];
  const char *a[] = {ID_A, "sink-a"};
  mcp_peer p = peer_of(a, 2);
  mcp_peer_admit_key(&p, k, sizeof(k));
  ck_assert_str_eq(k, "id:" ID_A);
  mcp_peer anon = peer_of(NULL, 0);
  mcp_peer_admit_key(&anon, k, sizeof(k));
  ck_assert_str_eq(k, "ipv4:127.0.0.1"); /* the address without the port */
}
END_TEST

/* Which TLS files make a set: one rule for every transport. */
START_TEST(test_tls_files_need_pairs_and_a_listener_a_certificate) {
  for (int listen = 0; listen < 2; listen++) {
    ck_assert_ptr_nonnull(strstr(mcp_tls_files_check(1, 0, listen),
                                 "needs its key"));
    ck_assert_ptr_nonnull(strstr(mcp_tls_files_check(0, 1, listen),
                                 "needs its key"));
    ck_assert_ptr_null(mcp_tls_files_check(1, 1, listen));
  }
  ck_assert_ptr_null(mcp_tls_files_check(0, 0, 0)); /* a CA alone dials */
  ck_assert_ptr_nonnull(strstr(mcp_tls_files_check(0, 0, 1),
                               "listening object needs a certificate"));
}
END_TEST

/* ---- the access list's rules and text format (were test_grpc_acl.c:
 * the list is the core's, mcp_grpc_acl only puts a lock and a file
 * around it) ---- */

#define ISTIOD "spiffe://cluster.local/ns/istio-system/sa/istiod"
#define SINK_B "spiffe://cluster.local/ns/evil/sa/sink-b"

/* The list's decision for a peer with identities |a| then |b| (either
 * NULL: fewer). */
static int check2(const mcp_acl *acl, const char *a, const char *b) {
  const char *ids[2];
  size_t n = 0;
  if (a)
    ids[n++] = a;
  if (b)
    ids[n++] = b;
  mcp_peer p = peer_of(ids, n);
  return mcp_acl_check(acl, &p);
}

static int parse(mcp_acl *acl, const char *text, char *err, size_t errlen) {
  return mcp_acl_parse(acl, text, strlen(text), err, errlen);
}

START_TEST(test_acl_empty_list_allows_nobody) {
  mcp_acl *acl = NULL;
  ck_assert_int_eq(mcp_acl_new(&acl, NULL), 0);
  ck_assert_uint_eq(mcp_acl_count(acl), 0);
  ck_assert_int_eq(check2(acl, ID_A, NULL), MCP_CODE_PERMISSION_DENIED);
  ck_assert_int_eq(check2(acl, NULL, NULL), MCP_CODE_UNAUTHENTICATED);
  mcp_acl_del(acl);
}
END_TEST

START_TEST(test_acl_allow_exact_and_prefix) {
  mcp_acl *acl = NULL;
  ck_assert_int_eq(mcp_acl_new(&acl, NULL), 0);
  ck_assert_int_eq(mcp_acl_add(acl, MCP_ACL_ALLOW, ISTIOD), 0);
  ck_assert_int_eq(
      mcp_acl_add(acl, MCP_ACL_ALLOW, "spiffe://cluster.local/ns/default/*"),
      0);
  ck_assert_int_eq(check2(acl, ISTIOD, NULL), 0);
  ck_assert_int_eq(check2(acl, ID_A, NULL), 0);
  ck_assert_int_eq(check2(acl, SINK_B, NULL), MCP_CODE_PERMISSION_DENIED);
  /* Exact means exact: no prefix, no suffix, case counts. */
  ck_assert_int_eq(check2(acl, ISTIOD "x", NULL), MCP_CODE_PERMISSION_DENIED);
  ck_assert_int_eq(check2(acl, "SPIFFE://cluster.local/ns/default/sa/a", NULL),
                   MCP_CODE_PERMISSION_DENIED);
  /* The prefix is everything before '*', slash included. */
  ck_assert_int_eq(check2(acl, "spiffe://cluster.local/ns/default", NULL),
                   MCP_CODE_PERMISSION_DENIED);
  /* Any one identity of the peer is enough. */
  ck_assert_int_eq(check2(acl, "localhost", ISTIOD), 0);
  /* No identity: UNAUTHENTICATED, whatever the list says. */
  ck_assert_int_eq(check2(acl, NULL, NULL), MCP_CODE_UNAUTHENTICATED);
  mcp_acl_del(acl);
}
END_TEST

START_TEST(test_acl_deny_wins_and_deny_list) {
  mcp_acl *acl = NULL;
  ck_assert_int_eq(mcp_acl_new(&acl, NULL), 0);
  /* Only deny rules: a deny list, everyone else is allowed. */
  ck_assert_int_eq(
      mcp_acl_add(acl, MCP_ACL_DENY, "spiffe://cluster.local/ns/evil/*"), 0);
  ck_assert_int_eq(check2(acl, ID_A, NULL), 0);
  ck_assert_int_eq(check2(acl, SINK_B, NULL), MCP_CODE_PERMISSION_DENIED);
  ck_assert_int_eq(check2(acl, NULL, NULL), MCP_CODE_UNAUTHENTICATED);
  /* An allow rule makes it an allow list; deny still wins over allow. */
  ck_assert_int_eq(mcp_acl_add(acl, MCP_ACL_ALLOW, "*"), 0);
  ck_assert_int_eq(check2(acl, ID_A, NULL), 0);
  ck_assert_int_eq(check2(acl, SINK_B, NULL), MCP_CODE_PERMISSION_DENIED);
  ck_assert_int_eq(check2(acl, ID_A, SINK_B), MCP_CODE_PERMISSION_DENIED);
  mcp_acl_del(acl);
}
END_TEST

START_TEST(test_acl_bad_patterns_refused) {
  mcp_acl *acl = NULL;
  ck_assert_int_eq(mcp_acl_new(&acl, NULL), 0);
  const char *bad[] = {"", "a b", "spiffe://x/*/y", "**", "tab\there",
                       "ctl\x01"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_int_eq(mcp_acl_add(acl, MCP_ACL_ALLOW, bad[i]),
                     MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_acl_add(acl, (mcp_acl_action)7, "x"),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(mcp_acl_count(acl), 0);
  mcp_acl_del(acl);
}
END_TEST

START_TEST(test_acl_file_format) {
  mcp_acl *acl = NULL;
  ck_assert_int_eq(mcp_acl_new(&acl, NULL), 0);
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
  ck_assert_uint_eq(mcp_acl_count(acl), 4);
  ck_assert_int_eq(check2(acl, ISTIOD, NULL), 0);
  ck_assert_int_eq(check2(acl, ID_A, NULL), 0);
  ck_assert_int_eq(
      check2(acl, "spiffe://cluster.local/ns/default/sa/bad", NULL),
      MCP_CODE_PERMISSION_DENIED);
  ck_assert_int_eq(check2(acl, "legacy-client#not-a-comment", NULL), 0);
  ck_assert_int_eq(check2(acl, SINK_B, NULL), MCP_CODE_PERMISSION_DENIED);
  mcp_acl_del(acl);
}
END_TEST

START_TEST(test_acl_text_errors_name_the_line_and_change_nothing) {
  mcp_acl *acl = NULL;
  ck_assert_int_eq(mcp_acl_new(&acl, NULL), 0);
  char err[128];
  ck_assert_int_eq(parse(acl, "allow " ID_A "\n", err, sizeof(err)), 0);
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
    ck_assert_uint_eq(mcp_acl_count(acl), 1);
    ck_assert_int_eq(check2(acl, ID_A, NULL), 0);
  }
  /* A NUL inside the text is not an identity character. */
  ck_assert_int_eq(mcp_acl_parse(acl, "allow a\0b\n", 10, err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);
  size_t big = (1u << 20) + 1;
  char *huge = malloc(big);
  ck_assert_ptr_nonnull(huge);
  memset(huge, '\n', big);
  ck_assert_int_eq(mcp_acl_parse(acl, huge, big, err, sizeof(err)),
                   MCP_ERR_LIMIT);
  free(huge);
  ck_assert_uint_eq(mcp_acl_count(acl), 1);
  mcp_acl_del(acl);
}
END_TEST

START_TEST(test_acl_lasting_rules_survive_parse) {
  mcp_acl *acl = NULL;
  ck_assert_int_eq(mcp_acl_new(&acl, NULL), 0);
  ck_assert_int_eq(mcp_acl_add(acl, MCP_ACL_ALLOW, ISTIOD), 0);
  ck_assert_int_eq(parse(acl, "allow " ID_A "\n", NULL, 0), 0);
  ck_assert_int_eq(check2(acl, ID_A, NULL), 0);
  ck_assert_int_eq(parse(acl, "deny " ISTIOD "\n", NULL, 0), 0);
  /* The text's deny beats the lasting allow; sink-a's rule is gone. */
  ck_assert_int_eq(check2(acl, ISTIOD, NULL), MCP_CODE_PERMISSION_DENIED);
  ck_assert_int_eq(check2(acl, ID_A, NULL), MCP_CODE_PERMISSION_DENIED);
  ck_assert_int_eq(parse(acl, "", NULL, 0), 0);
  ck_assert_int_eq(check2(acl, ISTIOD, NULL), 0);
  ck_assert_uint_eq(mcp_acl_count(acl), 1);
  mcp_acl_del(acl);
}
END_TEST

int main(void) {
  Suite *s = suite_create("core_auth");
  TCase *tc = tcase_create("auth");
  tcase_add_test(tc, test_identities_in_order_by_the_rules);
  tcase_add_test(tc, test_unusable_identity_leaves_the_peer_without_any);
  tcase_add_test(tc, test_authorize_statuses);
  tcase_add_test(tc, test_acl_decisions);
  tcase_add_test(tc, test_admit_key_identity_first);
  tcase_add_test(tc, test_tls_files_need_pairs_and_a_listener_a_certificate);
  tcase_add_test(tc, test_acl_empty_list_allows_nobody);
  tcase_add_test(tc, test_acl_allow_exact_and_prefix);
  tcase_add_test(tc, test_acl_deny_wins_and_deny_list);
  tcase_add_test(tc, test_acl_bad_patterns_refused);
  tcase_add_test(tc, test_acl_file_format);
  tcase_add_test(tc, test_acl_text_errors_name_the_line_and_change_nothing);
  tcase_add_test(tc, test_acl_lasting_rules_survive_parse);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
