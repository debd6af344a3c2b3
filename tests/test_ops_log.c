/*
 * Tests of tools/util/log.h: the text format (a time stamp first), the
 * JSON lines (every line parses, context fields, escaping, truncation) and
 * the context nesting. stderr is redirected to a temporary file.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "util/log.h"

static FILE *capture_file;
static int saved_stderr = -1;

static void capture_start(void) {
  fflush(stderr);
  capture_file = tmpfile();
  ck_assert_ptr_nonnull(capture_file);
  saved_stderr = dup(STDERR_FILENO);
  dup2(fileno(capture_file), STDERR_FILENO);
}

/* Everything written since capture_start() (malloc'd). */
static char *capture_end(void) {
  fflush(stderr);
  dup2(saved_stderr, STDERR_FILENO);
  close(saved_stderr);
  long n = ftell(capture_file);
  rewind(capture_file);
  char *s = calloc(1, (size_t)n + 1);
  ck_assert_ptr_nonnull(s);
  ck_assert_int_eq(fread(s, 1, (size_t)n, capture_file), (size_t)n);
  fclose(capture_file);
  return s;
}

/* The |i|-th line of |text| parsed as JSON (must parse). */
static json_t *line(const char *text, int i) {
  const char *p = text;
  for (int k = 0; k < i; k++) {
    p = strchr(p, '\n');
    ck_assert_ptr_nonnull(p);
    p++;
  }
  const char *end = strchr(p, '\n');
  ck_assert_ptr_nonnull(end);
  json_error_t err;
  json_t *j = json_loadb(p, (size_t)(end - p), 0, &err);
  ck_assert_msg(j != NULL, "line %d does not parse: %s: %.*s", i, err.text,
                (int)(end - p), p);
  return j;
}

static const char *str(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

/* |t| as a log stamp's seconds, "YYYY-MM-DDTHH:MM:SS" (UTC). */
static void iso(time_t t, char out[32]) {
  struct tm tm;
  ck_assert_ptr_nonnull(gmtime_r(&t, &tm));
  ck_assert_uint_eq(strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm), 19);
}

/* Issue 24 item 13: text lines carry the time as JSON lines do, then the
 * program, the level and the message as before; no context fields. */
START_TEST(test_text_lines_carry_a_timestamp) {
  tool_log_init("mcp-test", TOOL_LOG_INFO);
  tool_log_set_format(TOOL_LOG_TEXT);
  time_t before = time(NULL);
  capture_start();
  {
    TOOL_LOG_CONTEXT(.stream = 3, .collection = "c");
    log_info("hello %d", 42);
  }
  log_warn("careful");
  log_debug("dropped");
  char *out = capture_end();
  time_t after = time(NULL);
  const char *l2 = strchr(out, '\n');
  ck_assert_ptr_nonnull(l2);
  l2++;
  const char *rest[] = {"mcp-test: info: hello 42\n",
                        "mcp-test: warning: careful\n"};
  const char *lines[] = {out, l2};
  size_t stamp = strlen("2024-01-02T03:04:05.123456Z ");
  char lo[32], hi[32];
  iso(before, lo);
  iso(after, hi);
  for (int i = 0; i < 2; i++) {
    /* ISO 8601 in UTC sorts as text: between the times around the calls. */
    const char *p = lines[i];
    ck_assert_msg(strncmp(p, lo, 19) >= 0 && strncmp(p, hi, 19) <= 0,
                  "stamp not between %s and %s: %s", lo, hi, p);
    for (int k = 20; k < 26; k++)
      ck_assert_msg(p[k] >= '0' && p[k] <= '9', "no microseconds: %s", p);
    ck_assert_msg(p[19] == '.' && p[26] == 'Z' && p[27] == ' ',
                  "not a UTC stamp: %s", p);
    ck_assert_int_eq(strncmp(p + stamp, rest[i], strlen(rest[i])), 0);
  }
  ck_assert_str_eq(l2 + stamp, rest[1]);
  free(out);
}
END_TEST

START_TEST(test_json_lines_and_context) {
  tool_log_init("mcp-test", TOOL_LOG_DEBUG);
  tool_log_set_format(TOOL_LOG_JSON);
  capture_start();
  log_info("plain");
  {
    TOOL_LOG_CONTEXT(.stream = 7, .peer = "ipv4:127.0.0.1:1");
    log_warn("in stream");
    {
      TOOL_LOG_CONTEXT(.collection = "istio/x", .node = "n\"1");
      log_debug("in collection");
    }
    log_error("back in stream");
  }
  log_info("outside again");
  char *out = capture_end();
  tool_log_set_format(TOOL_LOG_TEXT);

  json_t *j = line(out, 0);
  ck_assert_str_eq(str(j, "level"), "info");
  ck_assert_str_eq(str(j, "prog"), "mcp-test");
  ck_assert_str_eq(str(j, "msg"), "plain");
  const char *ts = str(j, "ts");
  ck_assert_ptr_nonnull(ts);
  ck_assert_int_eq(strlen(ts), strlen("2024-01-02T03:04:05.123456Z"));
  ck_assert_int_eq(ts[10], 'T');
  ck_assert_int_eq(ts[strlen(ts) - 1], 'Z');
  ck_assert_ptr_null(json_object_get(j, "stream"));
  json_decref(j);

  j = line(out, 1);
  ck_assert_str_eq(str(j, "level"), "warning");
  ck_assert_int_eq(json_integer_value(json_object_get(j, "stream")), 7);
  ck_assert_str_eq(str(j, "peer"), "ipv4:127.0.0.1:1");
  ck_assert_ptr_null(json_object_get(j, "collection"));
  json_decref(j);

  j = line(out, 2); /* inner context adds to the outer one */
  ck_assert_int_eq(json_integer_value(json_object_get(j, "stream")), 7);
  ck_assert_str_eq(str(j, "collection"), "istio/x");
  ck_assert_str_eq(str(j, "node"), "n\"1");
  json_decref(j);

  j = line(out, 3);
  ck_assert_ptr_null(json_object_get(j, "collection"));
  ck_assert_int_eq(json_integer_value(json_object_get(j, "stream")), 7);
  json_decref(j);

  j = line(out, 4);
  ck_assert_ptr_null(json_object_get(j, "stream"));
  ck_assert_ptr_null(json_object_get(j, "peer"));
  json_decref(j);
  free(out);
}
END_TEST

START_TEST(test_json_escaping_and_truncation) {
  tool_log_init("mcp-test", TOOL_LOG_INFO);
  tool_log_set_format(TOOL_LOG_JSON);
  char big[5000];
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  char ctl[800]; /* control characters escape to 6 bytes each */
  memset(ctl, '\x01', sizeof(ctl) - 1);
  ctl[sizeof(ctl) - 1] = '\0';
  capture_start();
  log_info("quote \" backslash \\ newline \n tab \t bad \xff\xfe end \xc3\xa9");
  log_info("%s", big);
  {
    TOOL_LOG_CONTEXT(.peer = ctl, .node = ctl, .collection = ctl);
    log_info("%s", ctl);
  }
  char *out = capture_end();
  tool_log_set_format(TOOL_LOG_TEXT);
  json_t *j = line(out, 0);
  ck_assert_str_eq(str(j, "msg"), "quote \" backslash \\ newline \n tab \t "
                                  "bad \xef\xbf\xbd\xef\xbf\xbd end \xc3\xa9");
  json_decref(j);
  j = line(out, 1);
  const char *m = str(j, "msg");
  ck_assert_ptr_nonnull(m);
  ck_assert_int_lt(strlen(m), sizeof(big));
  ck_assert_str_eq(m + strlen(m) - 3, "...");
  json_decref(j);
  /* Everything escaped at its longest still makes a whole line. */
  j = line(out, 2);
  ck_assert_ptr_nonnull(str(j, "msg"));
  json_decref(j);
  free(out);
}
END_TEST

START_TEST(test_parse_format) {
  tool_log_format f = TOOL_LOG_TEXT;
  ck_assert_int_eq(tool_log_parse_format("json", &f), 0);
  ck_assert_int_eq(f, TOOL_LOG_JSON);
  ck_assert_int_eq(tool_log_parse_format("text", &f), 0);
  ck_assert_int_eq(f, TOOL_LOG_TEXT);
  ck_assert_int_eq(tool_log_parse_format("JSON", &f), -1);
  ck_assert_int_eq(tool_log_parse_format("", &f), -1);
  ck_assert_int_eq(f, TOOL_LOG_TEXT);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ops_log");
  TCase *t = tcase_create("log");
  tcase_add_test(t, test_text_lines_carry_a_timestamp);
  tcase_add_test(t, test_json_lines_and_context);
  tcase_add_test(t, test_json_escaping_and_truncation);
  tcase_add_test(t, test_parse_format);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_set_fork_status(r, CK_NOFORK); /* stderr redirection in-process */
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
