/* The programs' security flags (tools/cli/args.c): parsing, the checks of
 * their combinations, and what counts as loopback for cleartext h2c. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "util/log.h"

START_TEST(test_loopback) {
  static const char *const yes[] = {
      "127.0.0.1:9901", "127.0.0.1:0",   "127.1.2.3:1",   "localhost:1",
      "LocalHost:1",    "localhost.:1",  "[::1]:9901",    "::1",
      "[::ffff:127.0.0.1]:1", "unix:/run/mcp.sock", "unix-abstract:mcp",
      "127.0.0.1"};
  static const char *const no[] = {
      "0.0.0.0:9901", "[::]:9901",   "10.0.0.1:1",   "128.0.0.1:1",
      "istiod:15010", "[::2]:1",     "localhost.example:1", ":1",
      "[::ffff:10.0.0.1]:1", "[::1:1", "1.2.3.4", ""};
  for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
    ck_assert_msg(tool_addr_is_loopback(yes[i]), "%s", yes[i]);
  for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
    ck_assert_msg(!tool_addr_is_loopback(no[i]), "%s", no[i]);
}
END_TEST

/* Parses |argv| (NULL-terminated, without the program name) into |a|:
 * the result of the last tool_sec_parse_arg(). */
static int parse(tool_sec_args *a, const char **args) {
  char *argv[32];
  int argc = 0;
  argv[argc++] = (char *)"prog";
  while (*args)
    argv[argc++] = (char *)*args++;
  int rv = 0;
  for (int i = 1; i < argc; i++) {
    rv = tool_sec_parse_arg(argc, argv, &i, a);
    if (rv <= 0)
      break;
  }
  return rv;
}

START_TEST(test_parse) {
  tool_sec_args a;
  memset(&a, 0, sizeof(a));
  const char *args[] = {"--tls-cert",     "c.pem",    "--tls-key=k.pem",
                        "--tls-ca",       "ca.pem",   "--tls-server-name",
                        "istiod",         "--allow",  "spiffe://a/*",
                        "--allow",        "spiffe://a/*", "--deny=x",
                        "--access-list",  "acl",      "--allow-cleartext",
                        "--max-streams-per-connection", "2048", NULL};
  ck_assert_int_eq(parse(&a, args), 1);
  ck_assert_str_eq(a.tls_cert, "c.pem");
  ck_assert_str_eq(a.tls_key, "k.pem");
  ck_assert_str_eq(a.tls_ca, "ca.pem");
  ck_assert_str_eq(a.tls_server_name, "istiod");
  ck_assert_uint_eq(a.allow.n, 1); /* repeats are ignored */
  ck_assert_uint_eq(a.deny.n, 1);
  ck_assert_str_eq(a.access_list, "acl");
  ck_assert_int_eq(a.allow_cleartext, 1);
  ck_assert_uint_eq(a.max_streams_per_connection, 2048);
  ck_assert(tool_sec_tls(&a));
  ck_assert(tool_sec_acl(&a));
  tool_sec_args_free(&a);

  /* Another flag; a missing or empty value. */
  const char *other[] = {"--listen", "x:1", NULL};
  ck_assert_int_eq(parse(&a, other), 0);
  const char *missing[] = {"--tls-ca", NULL};
  ck_assert_int_eq(parse(&a, missing), -1);
  const char *empty[] = {"--allow=", NULL};
  ck_assert_int_eq(parse(&a, empty), -1);
  const char *zero[] = {"--max-streams-per-connection", "0", NULL};
  ck_assert_int_eq(parse(&a, zero), -1);
  const char *word[] = {"--max-streams-per-connection=many", NULL};
  ck_assert_int_eq(parse(&a, word), -1);
  /* --stream-rate PER_S[,BURST] | off (issue 23, item 6). */
  const char *rate[] = {"--stream-rate", "5", NULL};
  ck_assert_int_eq(parse(&a, rate), 1);
  ck_assert_uint_eq(a.stream_rate, 5);
  ck_assert_uint_eq(a.stream_burst, 0); /* the default burst */
  const char *rate_burst[] = {"--stream-rate=20,300", NULL};
  ck_assert_int_eq(parse(&a, rate_burst), 1);
  ck_assert_uint_eq(a.stream_rate, 20);
  ck_assert_uint_eq(a.stream_burst, 300);
  ck_assert_int_eq(a.stream_rate_off, 0);
  const char *off[] = {"--stream-rate", "off", NULL};
  ck_assert_int_eq(parse(&a, off), 1);
  ck_assert_int_eq(a.stream_rate_off, 1);
  static const char *const bad_rates[] = {
      "0", "10,0", "-1", "1.5", "10,", ",10", "many", "10,20,30",
      "1000001", "", "10,x"};
  for (size_t k = 0; k < sizeof(bad_rates) / sizeof(bad_rates[0]); k++) {
    const char *bad[] = {"--stream-rate", bad_rates[k], NULL};
    ck_assert_msg(parse(&a, bad) == -1, "accepted --stream-rate %s",
                  bad_rates[k]);
  }
  const char *hs[] = {"--tls-handshakes-per-peer", "256", NULL};
  ck_assert_int_eq(parse(&a, hs), 1);
  ck_assert_uint_eq(a.handshakes_per_peer, 256);
  const char *hs0[] = {"--tls-handshakes-per-peer=0", NULL};
  ck_assert_int_eq(parse(&a, hs0), -1);
  /* --allow is not a prefix of --allow-cleartext, nor the reverse. */
  const char *prefix[] = {"--allowx", "y", NULL};
  ck_assert_int_eq(parse(&a, prefix), 0);
  tool_sec_args_free(&a);
}
END_TEST

/* tool_sec_check() of |args| (NULL-terminated): 0 or -1, with |needle| in
 * the reason when it fails. */
static void check(const char **args, int tls_capable, int listen,
                  const char *address, int want, const char *needle) {
  tool_sec_args a;
  memset(&a, 0, sizeof(a));
  ck_assert_int_ge(parse(&a, args), 0);
  char why[600] = "";
  static const char *const names[] = {"plain", "grpc", "h2"};
  int rv = tool_sec_check(&a, tls_capable, names[tls_capable], listen,
                          address, why, sizeof(why));
  ck_assert_msg(rv == want, "%s: %d, want %d (%s)", args[0] ? args[0] : "-",
                rv, want, why);
  if (needle)
    ck_assert_msg(strstr(why, needle) != NULL, "%s", why);
  tool_sec_args_free(&a);
}

/* A transport without TLS: every security flag is refused, and it
 * listens on loopback only. */
START_TEST(test_check_without_tls) {
  const char *none[] = {NULL};
  const char *tls[] = {"--tls-ca", "ca.pem", NULL};
  const char *name[] = {"--tls-server-name", "x", NULL};
  const char *allow[] = {"--allow", "x", NULL};
  const char *acl[] = {"--access-list", "f", NULL};
  const char *clear[] = {"--allow-cleartext", NULL};
  check(none, 0, 1, "127.0.0.1:9901", 0, NULL);
  check(none, 0, 1, "localhost:0", 0, NULL);
  check(none, 0, 0, "10.0.0.1:9901", 0, NULL); /* dialing: no check */
  check(none, 0, 1, "0.0.0.0:9901", -1, "--allow-cleartext");
  check(none, 0, 1, "[::]:9901", -1, "loopback");
  check(clear, 0, 1, "0.0.0.0:9901", 0, NULL);
  check(tls, 0, 0, "127.0.0.1:1", -1, "cleartext");
  check(name, 0, 0, "127.0.0.1:1", -1, "--tls-server-name");
  check(allow, 0, 1, "127.0.0.1:1", -1, "access lists");
  check(acl, 0, 0, "127.0.0.1:1", -1, "--access-list");
}
END_TEST

/* The nghttp2 transport: TLS as gRPC, and without TLS flags it stays on
 * loopback unless --allow-cleartext (it was h2c). */
START_TEST(test_check_h2) {
  const char *none[] = {NULL};
  const char *clear[] = {"--allow-cleartext", NULL};
  const char *server[] = {"--tls-cert", "c", "--tls-key", "k", NULL};
  const char *mutual_acl[] = {"--tls-cert", "c", "--tls-key", "k",
                              "--tls-ca", "ca", "--access-list", "f", NULL};
  const char *ca[] = {"--tls-ca", "ca", NULL};
  const char *allow[] = {"--allow", "x", NULL};
  check(none, 2, 1, "127.0.0.1:1", 0, NULL);
  check(none, 2, 1, "0.0.0.0:1", -1, "--allow-cleartext");
  check(clear, 2, 1, "0.0.0.0:1", 0, NULL);
  check(server, 2, 1, "0.0.0.0:1", 0, NULL);
  check(mutual_acl, 2, 1, "0.0.0.0:1", 0, NULL);
  check(ca, 2, 1, "0.0.0.0:1", -1, "--tls-cert and --tls-key");
  check(allow, 2, 1, "127.0.0.1:1", -1, "--tls-ca");
  check(none, 2, 0, "10.0.0.1:1", 0, NULL); /* dialing: no check */
  check(ca, 2, 0, "istiod:15010", 0, NULL);
  check(allow, 2, 0, "istiod:15010", -1, "server's identity");
  /* The handshake limit: an h2 TLS listener's only. */
  const char *hs_tls[] = {"--tls-cert", "c", "--tls-key", "k",
                          "--tls-handshakes-per-peer", "1000", NULL};
  const char *hs_clear[] = {"--tls-handshakes-per-peer", "1000", NULL};
  check(hs_tls, 2, 1, "0.0.0.0:1", 0, NULL);
  check(hs_clear, 2, 1, "127.0.0.1:1", -1, "--tls-handshakes-per-peer");
  check(hs_tls, 2, 0, "istiod:15010", -1, "with --listen");
  check(hs_tls, 1, 1, "0.0.0.0:1", -1, "--transport h2");
}
END_TEST

START_TEST(test_check_grpc) {
  const char *none[] = {NULL};
  const char *server[] = {"--tls-cert", "c", "--tls-key", "k", NULL};
  const char *mutual[] = {"--tls-cert", "c", "--tls-key", "k", "--tls-ca",
                          "ca", NULL};
  const char *ca[] = {"--tls-ca", "ca", NULL};
  const char *cert[] = {"--tls-cert", "c", NULL};
  const char *key[] = {"--tls-key", "k", "--tls-ca", "ca", NULL};
  const char *name[] = {"--tls-server-name", "x", NULL};
  const char *ca_name[] = {"--tls-ca", "ca", "--tls-server-name", "x", NULL};
  const char *allow[] = {"--allow", "x", NULL};
  const char *server_allow[] = {"--tls-cert", "c", "--tls-key", "k",
                                "--deny", "x", NULL};
  const char *mutual_acl[] = {"--tls-cert", "c", "--tls-key", "k",
                              "--tls-ca", "ca", "--access-list", "f", NULL};
  const char *mutual_name[] = {"--tls-cert", "c", "--tls-key", "k",
                               "--tls-ca", "ca", "--tls-server-name", "x",
                               NULL};
  const char *ca_allow[] = {"--tls-ca", "ca", "--allow", "x", NULL};
  const char *clear[] = {"--allow-cleartext", NULL};
  /* Listening. */
  check(none, 1, 1, "0.0.0.0:1", 0, NULL); /* cleartext gRPC: a warning */
  check(clear, 1, 1, "0.0.0.0:1", 0, NULL);
  check(server, 1, 1, "0.0.0.0:1", 0, NULL);
  check(mutual, 1, 1, "0.0.0.0:1", 0, NULL);
  check(mutual_acl, 1, 1, "0.0.0.0:1", 0, NULL);
  check(ca, 1, 1, "0.0.0.0:1", -1, "--tls-cert and --tls-key");
  check(cert, 1, 1, "0.0.0.0:1", -1, "--tls-cert and --tls-key");
  check(mutual_name, 1, 1, "0.0.0.0:1", -1, "for dialing");
  check(allow, 1, 1, "0.0.0.0:1", -1, "--tls-ca");
  check(server_allow, 1, 1, "0.0.0.0:1", -1, "--deny needs");
  /* Dialing. */
  check(none, 1, 0, "istiod:15010", 0, NULL);
  check(ca, 1, 0, "istiod:15010", 0, NULL);
  check(mutual, 1, 0, "istiod:15010", 0, NULL);
  check(server, 1, 0, "istiod:15010", 0, NULL); /* the default roots */
  check(ca_name, 1, 0, "10.0.0.1:15010", 0, NULL);
  check(ca_allow, 1, 0, "istiod:15010", 0, NULL);
  check(mutual_acl, 1, 0, "istiod:15010", 0, NULL);
  check(cert, 1, 0, "istiod:15010", -1, "--tls-cert without --tls-key");
  check(key, 1, 0, "istiod:15010", -1, "--tls-key without --tls-cert");
  check(name, 1, 0, "istiod:15010", -1, "needs TLS");
  check(allow, 1, 0, "istiod:15010", -1, "server's identity");
}
END_TEST

/* Without --transport: h2 (nghttp2) to listen, TLS or not (gRPC 1.51's
 * server cannot bound a rapid reset), and grpc to dial. */
START_TEST(test_default_transport_listens_on_h2_tls_included) {
  const char *none[] = {NULL};
  const char *cert[] = {"--tls-cert", "c.pem", "--tls-key", "k.pem", NULL};
  const char *ca[] = {"--tls-ca", "ca.pem", NULL};
  const char *deny[] = {"--deny", "x", NULL};
  const char *acl[] = {"--access-list", "acl", NULL};
  const char *name[] = {"--tls-server-name", "x", NULL};
  const char *clear[] = {"--allow-cleartext", NULL};
  const struct {
    const char **args;
    int listen;
    const char *want;
  } cases[] = {
      {none, 1, "h2"}, {clear, 1, "h2"}, {cert, 1, "h2"},
      {ca, 1, "h2"},   {deny, 1, "h2"},  {acl, 1, "h2"},
      {name, 1, "h2"}, {none, 0, "grpc"}, {cert, 0, "grpc"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    tool_sec_args a;
    memset(&a, 0, sizeof(a));
    ck_assert_int_ge(parse(&a, cases[i].args), 0);
    ck_assert_msg(strcmp(tool_sec_default_transport(&a, cases[i].listen),
                         cases[i].want) == 0,
                  "case %zu: want %s", i, cases[i].want);
    tool_sec_args_free(&a);
  }
}
END_TEST

/* The names come from the one table of args.c, in its order, and a
 * short buffer is cut, never overrun. */
START_TEST(test_transport_names_list_every_known_transport) {
  char buf[64];
  ck_assert_str_eq(tool_transport_names(buf, sizeof buf), "h2, h2c or grpc");
  char small[6];
  ck_assert_str_eq(tool_transport_names(small, sizeof small), "h2, h");
  ck_assert_str_eq(tool_transport_names(buf, 1), "");
}
END_TEST

START_TEST(test_describe) {
  tool_sec_args a;
  memset(&a, 0, sizeof(a));
  char buf[300];
  tool_sec_describe(&a, 1, buf, sizeof(buf));
  ck_assert(strstr(buf, "cleartext") != NULL);
  a.tls_cert = "c";
  a.tls_key = "k";
  tool_sec_describe(&a, 1, buf, sizeof(buf));
  ck_assert(strstr(buf, "without client certificates") != NULL);
  a.tls_ca = "ca.pem";
  tool_sec_describe(&a, 1, buf, sizeof(buf));
  ck_assert(strstr(buf, "mutual TLS") && strstr(buf, "ca.pem"));
  a.tls_server_name = "istiod";
  tool_sec_describe(&a, 0, buf, sizeof(buf));
  ck_assert_str_eq(buf, "TLS: the server's certificate verified by ca.pem "
                        "for the name \"istiod\", presenting c");
  /* Truncation is safe. */
  tool_sec_describe(&a, 0, buf, 8);
  ck_assert_uint_eq(strlen(buf), 7);
}
END_TEST

int main(void) {
  tool_log_init("test", TOOL_LOG_ERROR);
  Suite *s = suite_create("tools_security");
  TCase *t = tcase_create("args");
  tcase_add_test(t, test_loopback);
  tcase_add_test(t, test_parse);
  tcase_add_test(t, test_check_without_tls);
  tcase_add_test(t, test_check_h2);
  tcase_add_test(t, test_check_grpc);
  tcase_add_test(t, test_default_transport_listens_on_h2_tls_included);
  tcase_add_test(t, test_transport_names_list_every_known_transport);
  tcase_add_test(t, test_describe);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
