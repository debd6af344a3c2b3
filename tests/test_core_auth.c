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

int main(void) {
  Suite *s = suite_create("core_auth");
  TCase *tc = tcase_create("auth");
  tcase_add_test(tc, test_identities_in_order_by_the_rules);
  tcase_add_test(tc, test_unusable_identity_leaves_the_peer_without_any);
  tcase_add_test(tc, test_authorize_statuses);
  tcase_add_test(tc, test_acl_decisions);
  tcase_add_test(tc, test_admit_key_identity_first);
  tcase_add_test(tc, test_tls_files_need_pairs_and_a_listener_a_certificate);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
