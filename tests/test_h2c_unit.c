/* h2c transport: the pure parts (backoff, grpc-timeout, grpc-message
 * percent-encoding, base64url, addresses, header tokens). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "backoff.h"
#include "util.h"

/* rand that always returns the same byte: 0x00 (low), 0xff (high) or
 * 0x80 (middle) jitter. */
static void fixed_rand(uint8_t *d, size_t n, void *ud) {
  memset(d, *(uint8_t *)ud, n);
}

START_TEST(backoff_grows_with_jitter_and_cap) {
  uint8_t r = 0x80;
  mcp_h2c_backoff b;
  mcp_h2c_backoff_options o = {.initial = MCP_SECONDS,
                               .multiplier = 1.6,
                               .jitter = 0.2,
                               .max = 120 * MCP_SECONDS};
  mcp_h2c_backoff_init(&b, &o, fixed_rand, &r);
  mcp_tstamp d1 = mcp_h2c_backoff_next(&b);
  ck_assert_uint_ge(d1, 999 * MCP_MILLISECONDS);
  ck_assert_uint_le(d1, 1002 * MCP_MILLISECONDS);
  mcp_tstamp d2 = mcp_h2c_backoff_next(&b);
  ck_assert_uint_ge(d2, 1599 * MCP_MILLISECONDS);
  ck_assert_uint_le(d2, 1603 * MCP_MILLISECONDS);
  for (int i = 0; i < 50; ++i)
    mcp_h2c_backoff_next(&b);
  ck_assert_uint_eq(mcp_h2c_backoff_next(&b), 120 * MCP_SECONDS);
  /* jitter bounds */
  r = 0;
  mcp_h2c_backoff_init(&b, &o, fixed_rand, &r);
  ck_assert_uint_ge(mcp_h2c_backoff_next(&b), 800 * MCP_MILLISECONDS - 1);
  r = 0xff;
  mcp_h2c_backoff_init(&b, &o, fixed_rand, &r);
  mcp_tstamp hi = mcp_h2c_backoff_next(&b);
  ck_assert_uint_le(hi, 1200 * MCP_MILLISECONDS);
  ck_assert_uint_ge(hi, 1199 * MCP_MILLISECONDS);
}
END_TEST

START_TEST(backoff_does_not_collapse) {
  uint8_t r = 0x80;
  mcp_h2c_backoff b;
  mcp_h2c_backoff_init(&b, NULL, fixed_rand, &r); /* defaults */
  mcp_h2c_backoff_next(&b);
  mcp_h2c_backoff_next(&b);
  mcp_tstamp nominal = b.nominal;
  /* A short stream, even one that received messages: no reset. */
  mcp_h2c_backoff_stream_ended(&b, 10 * MCP_MILLISECONDS, 5);
  ck_assert_uint_eq(b.nominal, nominal);
  /* A long stream that received nothing: no reset either. */
  mcp_h2c_backoff_stream_ended(&b, 600 * MCP_SECONDS, 0);
  ck_assert_uint_eq(b.nominal, nominal);
  /* Healthy: back to the initial delay, never to zero. */
  mcp_h2c_backoff_stream_ended(&b, nominal, 1);
  ck_assert_uint_eq(b.nominal, MCP_SECONDS);
  ck_assert_uint_gt(mcp_h2c_backoff_next(&b), 0);
}
END_TEST

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
  tcase_add_test(t, backoff_grows_with_jitter_and_cap);
  tcase_add_test(t, backoff_does_not_collapse);
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
