/* h2c transport: the pure parts (grpc-timeout, grpc-message
 * percent-encoding, base64url, addresses, header tokens). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

START_TEST(timeout_units) {
  mcp_tstamp t;
  ck_assert_int_eq(mcp_h2c_parse_timeout("1H", &t), 0);
  ck_assert_uint_eq(t, 3600 * MCP_SECONDS);
  ck_assert_int_eq(mcp_h2c_parse_timeout("2M", &t), 0);
  ck_assert_uint_eq(t, 120 * MCP_SECONDS);
  ck_assert_int_eq(mcp_h2c_parse_timeout("3S", &t), 0);
  ck_assert_uint_eq(t, 3 * MCP_SECONDS);
  ck_assert_int_eq(mcp_h2c_parse_timeout("250m", &t), 0);
  ck_assert_uint_eq(t, 250 * MCP_MILLISECONDS);
  ck_assert_int_eq(mcp_h2c_parse_timeout("7u", &t), 0);
  ck_assert_uint_eq(t, 7000);
  ck_assert_int_eq(mcp_h2c_parse_timeout("99999999n", &t), 0);
  ck_assert_uint_eq(t, 99999999);
  ck_assert_int_eq(mcp_h2c_parse_timeout("99999999H", &t), 0);
  ck_assert_uint_eq(t, MCP_TSTAMP_MAX); /* saturated */
  ck_assert_int_eq(mcp_h2c_parse_timeout("99999999S", &t), 0);
  ck_assert_uint_eq(t, 99999999ull * MCP_SECONDS);
  ck_assert_int_eq(mcp_h2c_parse_timeout("123456789S", &t), -1); /* 9 digits */
  ck_assert_int_eq(mcp_h2c_parse_timeout("S", &t), -1);
  ck_assert_int_eq(mcp_h2c_parse_timeout("10x", &t), -1);
  ck_assert_int_eq(mcp_h2c_parse_timeout("1 S", &t), -1);
  ck_assert_int_eq(mcp_h2c_parse_timeout("", &t), -1);
}
END_TEST

START_TEST(percent_encoding) {
  mcp_h2c_buf b = {0};
  ck_assert_int_eq(mcp_h2c_percent_encode("a b%c\n\xc3\xa9", &b), 0);
  mcp_h2c_buf_append(&b, "", 1);
  ck_assert_str_eq((char *)b.p, "a b%25c%0A%C3%A9");
  char s[64];
  strcpy(s, (char *)b.p);
  mcp_h2c_percent_decode(s);
  ck_assert_str_eq(s, "a b%c\n\xc3\xa9");
  strcpy(s, "bad %zz and %4");
  mcp_h2c_percent_decode(s);
  ck_assert_str_eq(s, "bad %zz and %4");
  mcp_h2c_buf_free(&b);
}
END_TEST

START_TEST(base64url) {
  uint8_t out[32];
  /* curl's HTTP2-Settings for its defaults */
  const char *in = "AAMAAABkAAQCAAAAAAIAAAAA";
  long n = mcp_h2c_base64url_decode(in, strlen(in), out);
  ck_assert_int_eq(n, 18);
  ck_assert_int_eq(out[1], 3);
  ck_assert_int_eq(out[5], 100);
  ck_assert_int_eq(mcp_h2c_base64url_decode("_-8", 3, out), 2);
  ck_assert_int_eq(out[0], 0xff);
  ck_assert_int_eq(out[1], 0xef);
  ck_assert_int_eq(mcp_h2c_base64url_decode("QQ==", 4, out), 1);
  ck_assert_int_eq(out[0], 'A');
  ck_assert_int_eq(mcp_h2c_base64url_decode("Q", 1, out), -1);
  ck_assert_int_eq(mcp_h2c_base64url_decode("Q!==", 4, out), -1);
}
END_TEST

START_TEST(addresses) {
  mcp_h2c_addr a;
  ck_assert_int_eq(mcp_h2c_addr_parse("127.0.0.1:15010", &a), 0);
  ck_assert_str_eq(a.host, "127.0.0.1");
  ck_assert_str_eq(a.port, "15010");
  mcp_h2c_addr_free(&a);
  ck_assert_int_eq(mcp_h2c_addr_parse("dns:///mcp.example:80", &a), 0);
  ck_assert_str_eq(a.host, "mcp.example");
  mcp_h2c_addr_free(&a);
  ck_assert_int_eq(mcp_h2c_addr_parse("[::1]:0", &a), 0);
  ck_assert_str_eq(a.host, "::1");
  ck_assert_str_eq(a.port, "0");
  mcp_h2c_addr_free(&a);
  ck_assert_int_eq(mcp_h2c_addr_parse("unix:/tmp/x.sock", &a), 0);
  ck_assert(a.is_unix);
  ck_assert_str_eq(a.path, "/tmp/x.sock");
  mcp_h2c_addr_free(&a);
  ck_assert_int_eq(mcp_h2c_addr_parse("::1:80", &a), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_h2c_addr_parse("host", &a), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_h2c_addr_parse("host:", &a), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_h2c_addr_parse("host:99999", &a),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_h2c_addr_parse(":80", &a), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_h2c_addr_parse("unix:", &a), MCP_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(headers) {
  ck_assert(mcp_h2c_is_grpc_content_type("application/grpc"));
  ck_assert(mcp_h2c_is_grpc_content_type("application/grpc+proto"));
  ck_assert(mcp_h2c_is_grpc_content_type("application/grpc;charset=x"));
  ck_assert(!mcp_h2c_is_grpc_content_type("application/grpc-web"));
  ck_assert(!mcp_h2c_is_grpc_content_type("application/json"));
  ck_assert(!mcp_h2c_is_grpc_content_type(NULL));
  ck_assert(mcp_h2c_has_token("Upgrade, HTTP2-Settings", "upgrade"));
  ck_assert(mcp_h2c_has_token("websocket,h2c", "h2c"));
  ck_assert(!mcp_h2c_has_token("h2", "h2c"));
  ck_assert_int_eq(mcp_h2c_status_from_http(404), MCP_CODE_UNIMPLEMENTED);
  ck_assert_int_eq(mcp_h2c_status_from_http(503), MCP_CODE_UNAVAILABLE);
  ck_assert_int_eq(mcp_h2c_status_from_h2_error(0x8), 1);
}
END_TEST

Suite *suite(void) {
  Suite *s = suite_create("h2c_unit");
  TCase *t = tcase_create("all");
  tcase_add_test(t, timeout_units);
  tcase_add_test(t, percent_encoding);
  tcase_add_test(t, base64url);
  tcase_add_test(t, addresses);
  tcase_add_test(t, headers);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
