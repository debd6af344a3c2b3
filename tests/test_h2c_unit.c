/* h2c transport: the pure parts (grpc-timeout, grpc-message
 * percent-encoding, base64url, addresses, header tokens, the gRPC message
 * deframer). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "deframe.h"
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
  mcp_buf b = {0};
  ck_assert_int_eq(mcp_h2c_percent_encode("a b%c\n\xc3\xa9", &b), 0);
  mcp_buf_append(&b, "", 1);
  ck_assert_str_eq((char *)b.p, "a b%25c%0A%C3%A9");
  char s[64];
  strcpy(s, (char *)b.p);
  mcp_h2c_percent_decode(s);
  ck_assert_str_eq(s, "a b%c\n\xc3\xa9");
  strcpy(s, "bad %zz and %4");
  mcp_h2c_percent_decode(s);
  ck_assert_str_eq(s, "bad %zz and %4");
  mcp_buf_free(&b);
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

/* Feeds |s| to |d| in pieces of |step| bytes; collects the messages,
 * separated by '|', into |out|. Returns the last result. */
static int deframe_all(mcp_h2c_deframer *d, const uint8_t *s, size_t n,
                       size_t step, char *out, size_t cap) {
  int rv = 0;
  out[0] = '\0';
  for (size_t off = 0; off < n; off += step) {
    const uint8_t *p = s + off;
    size_t k = n - off < step ? n - off : step;
    while (k > 0) {
      const uint8_t *m;
      size_t len;
      rv = mcp_h2c_deframe(d, &p, &k, &m, &len);
      if (rv < 0)
        return rv;
      if (rv == 1) {
        size_t at = strlen(out);
        ck_assert_uint_lt(at + len + 1, cap);
        memcpy(out + at, m, len);
        out[at + len] = '|';
        out[at + len + 1] = '\0';
      }
    }
  }
  return rv;
}

START_TEST(deframe_chunked_same_as_whole) {
  static const uint8_t s[] = "\0\0\0\0\5hello\0\0\0\0\0\0\0\0\0\6world!";
  char got[64];
  for (size_t step = 1; step <= sizeof(s) - 1; ++step) {
    mcp_h2c_deframer d;
    mcp_h2c_deframer_init(&d, 100);
    deframe_all(&d, s, sizeof(s) - 1, step, got, sizeof(got));
    ck_assert_msg(strcmp(got, "hello||world!|") == 0, "step %zu: %s", step,
                  got);
    mcp_h2c_deframer_release(&d); /* the last message's buffer, if any */
    ck_assert_uint_eq(mcp_h2c_deframer_held(&d), 0);
    mcp_h2c_deframer_free(&d);
  }
}
END_TEST

/* fuzz/regressions/fuzz_h2c_deframe/header-ends-input-null-offset: a
 * prefix that ends exactly where the input ends left a zero-length copy
 * into a buffer not yet allocated (UB). */
START_TEST(deframe_prefix_ends_input) {
  static const uint8_t s[] = "\0\0\0\0\12";
  mcp_h2c_deframer d;
  mcp_h2c_deframer_init(&d, 4 << 20);
  const uint8_t *p = s, *m;
  size_t n = 5, len;
  ck_assert_int_eq(mcp_h2c_deframe(&d, &p, &n, &m, &len), 0);
  ck_assert_uint_eq(n, 0);
  ck_assert_uint_eq(mcp_h2c_deframer_held(&d), 0);
  mcp_h2c_deframer_free(&d);
}
END_TEST

START_TEST(deframe_errors_are_sticky) {
  static const struct {
    const char *s;
    int err;
  } cases[] = {
      {"\1\0\0\0\1x", MCP_H2C_DEFRAME_COMPRESSED},
      {"\2\0\0\0\1x", MCP_H2C_DEFRAME_FLAGS},
      {"\0\0\0\1\0", MCP_H2C_DEFRAME_TOO_LARGE},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    mcp_h2c_deframer d;
    mcp_h2c_deframer_init(&d, 255);
    const uint8_t *p = (const uint8_t *)cases[i].s, *m;
    size_t n = 5, len;
    ck_assert_int_eq(mcp_h2c_deframe(&d, &p, &n, &m, &len), cases[i].err);
    n = 1;
    ck_assert_int_eq(mcp_h2c_deframe(&d, &p, &n, &m, &len), cases[i].err);
    ck_assert_uint_eq(n, 1);
    mcp_h2c_deframer_free(&d);
  }
  /* The announced length, for the error message. */
  mcp_h2c_deframer d;
  mcp_h2c_deframer_init(&d, 255);
  const uint8_t *p = (const uint8_t *)"\0\0\0\1\0", *m;
  size_t n = 5, len;
  ck_assert_int_eq(mcp_h2c_deframe(&d, &p, &n, &m, &len),
                   MCP_H2C_DEFRAME_TOO_LARGE);
  ck_assert_uint_eq(d.msg_len, 256);
  mcp_h2c_deframer_free(&d);
}
END_TEST

/* A peer announcing 4 MiB and sending a few bytes costs a few KiB; a
 * message that lies whole in the input is not copied. */
START_TEST(deframe_buffer_bounded_and_zero_copy) {
  mcp_h2c_deframer d;
  mcp_h2c_deframer_init(&d, 4 << 20);
  const uint8_t *p = (const uint8_t *)"\0\0\x40\0\0abc", *m;
  size_t n = 8, len;
  ck_assert_int_eq(mcp_h2c_deframe(&d, &p, &n, &m, &len), 0);
  ck_assert_uint_le(mcp_h2c_deframer_held(&d), 4096);
  mcp_h2c_deframer_free(&d);

  static const uint8_t s[] = "\0\0\0\0\3abc";
  mcp_h2c_deframer_init(&d, 100);
  p = s;
  n = 8;
  ck_assert_int_eq(mcp_h2c_deframe(&d, &p, &n, &m, &len), 1);
  ck_assert_ptr_eq(m, s + 5);
  ck_assert_uint_eq(len, 3);
  ck_assert_uint_eq(mcp_h2c_deframer_held(&d), 0);
  mcp_h2c_deframer_free(&d);
}
END_TEST

/* A message of megabytes: the buffer doubles while under MCP_HINT_LARGE,
 * never above twice what arrived, then is sized once to the announced length
 * (huge pages, issue 25); the bytes come out as they went in. */
START_TEST(deframe_large_message_sized_once) {
  const size_t msg = (size_t)12 << 20, step = 16384;
  uint8_t *in = malloc(5 + msg);
  ck_assert_ptr_nonnull(in);
  in[0] = 0;
  in[1] = (uint8_t)(msg >> 24);
  in[2] = (uint8_t)(msg >> 16);
  in[3] = (uint8_t)(msg >> 8);
  in[4] = (uint8_t)msg;
  for (size_t i = 0; i < msg; i++)
    in[5 + i] = (uint8_t)(i * 131 + (i >> 12));
  mcp_h2c_deframer d;
  mcp_h2c_deframer_init(&d, 16 << 20);
  size_t off = 0, grew = 0, last_held = 0;
  const uint8_t *m = NULL;
  size_t len = 0;
  int rv = 0;
  while (off < 5 + msg && rv == 0) {
    const uint8_t *p = in + off;
    size_t n = 5 + msg - off < step ? 5 + msg - off : step, k = n;
    rv = mcp_h2c_deframe(&d, &p, &k, &m, &len);
    ck_assert_int_ge(rv, 0);
    off += n - k;
    size_t held = mcp_h2c_deframer_held(&d);
    size_t got = off > 5 ? off - 5 : 0;
    if (held != last_held)
      grew++;
    last_held = held;
    if (held < msg) { /* doubling: at most twice what arrived */
      ck_assert_uint_le(held, got * 2 > 4096 ? got * 2 : 4096);
      ck_assert_uint_lt(held, MCP_HINT_LARGE);
    } else { /* then the announced length at once */
      ck_assert_uint_eq(held, msg);
    }
  }
  ck_assert_int_eq(rv, 1);
  ck_assert_uint_eq(len, msg);
  ck_assert_mem_eq(m, in + 5, msg);
  /* 16 KiB .. 4 MiB by doubling, then the one jump. */
  ck_assert_uint_le(grew, 10);
  mcp_h2c_deframer_free(&d);
  free(in);
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
  tcase_add_test(t, deframe_chunked_same_as_whole);
  tcase_add_test(t, deframe_prefix_ends_input);
  tcase_add_test(t, deframe_errors_are_sticky);
  tcase_add_test(t, deframe_buffer_bounded_and_zero_copy);
  tcase_add_test(t, deframe_large_message_sized_once);
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
