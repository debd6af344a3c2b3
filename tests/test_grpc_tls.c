/* What of gRPC's TLS only gRPC has (the rest, handshakes, identities,
 * access lists and rotated certificates, is tests/test_transport_tls.c,
 * run over every transport with TLS): mcp_grpc_tls_check()'s messages
 * (h2c's mcp_h2c_tls_check() takes a listen flag and words its own:
 * tests/test_h2c_tls.c), and the application's own gRPC credentials,
 * which exclude the files. */
#include "test_grpc_util.h"

#include "test_certs.h"

#define cp test_cert

static void set_tls(mcp_grpc_options *o) {
  memset(&o->tls, 0, sizeof(o->tls));
  o->tls.cert_file = cp("server.pem");
  o->tls.key_file = cp("server.key");
  o->tls.ca_file = cp("ca.pem");
}

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f)
    return -1;
  fputs(text, f);
  return fclose(f);
}

START_TEST(test_bad_files_are_clear_errors) {
  mcp_store *store = tg_store();
  mcp_source_options sopts;
  tg_source_opts(&sopts, store);
  mcp_grpc_options o;
  mcp_grpc_source *src = NULL;
  char err[256];

  tg_listen_opts(&o, "127.0.0.1:0", NULL);
  o.on_stream = NULL;
  set_tls(&o);
  o.tls.cert_file = cp("missing.pem");
  ck_assert_int_eq(mcp_grpc_tls_check(&o.tls, err, sizeof(err)), MCP_ERR_IO);
  ck_assert_msg(strstr(err, "missing.pem: No such file or directory"), "%s",
                err);

  set_tls(&o);
  o.tls.key_file = NULL; /* a certificate without its key */
  ck_assert_int_eq(mcp_grpc_tls_check(&o.tls, err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);

  ck_assert_int_eq(write_text(cp("junk.pem"), "not a certificate\n"), 0);
  set_tls(&o);
  o.tls.ca_file = cp("junk.pem");
  ck_assert_int_eq(mcp_grpc_tls_check(&o.tls, err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err, "no PEM data in"), "%s", err);

  /* Files and the application's credentials: one or the other. */
  set_tls(&o);
  o.server_credentials = grpc_insecure_server_credentials_create();
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts),
                   MCP_ERR_INVALID_ARGUMENT);
  grpc_server_credentials_release(o.server_credentials);
  o.server_credentials = NULL;

  set_tls(&o);
  ck_assert_int_eq(mcp_grpc_tls_check(&o.tls, err, sizeof(err)), 0);
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  mcp_grpc_source_del(src);
  mcp_store_del(store);
}
END_TEST

int main(void) {
  if (test_certs_make() != 0)
    return EXIT_FAILURE;
  Suite *s = suite_create("grpc_tls");
  TCase *tc = tcase_create("tls");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, tg_reset, NULL);
  tcase_add_test(tc, test_bad_files_are_clear_errors);
  suite_add_tcase(s, tc);
  int rv = tg_run(s);
  test_certs_remove();
  return rv;
}
