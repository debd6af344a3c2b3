/*
 * Tests of tools/util/peerlog.h: each peer logs a few stream lines per
 * window, the rest are counted and summarised once when the window is over
 * (a rapid reset once wrote 26,000 lines); peers are counted apart; a new
 * window logs again. stderr is captured into a temporary file.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/peerlog.h"

#define SEC 1000000000ull

static FILE *cap;
static int saved = -1;

static void capture_start(void) {
  fflush(stderr);
  cap = tmpfile();
  ck_assert_ptr_nonnull(cap);
  saved = dup(STDERR_FILENO);
  dup2(fileno(cap), STDERR_FILENO);
}

static char *capture_end(void) {
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  long n = ftell(cap);
  rewind(cap);
  char *s = calloc(1, (size_t)n + 1);
  ck_assert_int_eq(fread(s, 1, (size_t)n, cap), (size_t)n);
  fclose(cap);
  return s;
}

static int count(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, needle)); p++)
    n++;
  return n;
}

START_TEST(test_limits_and_summarises_per_peer) {
  tool_log_init("test", TOOL_LOG_INFO);
  tool_peerlog *pl = tool_peerlog_new(4, 10 * SEC);
  ck_assert_ptr_nonnull(pl);
  capture_start();
  int allowed = 0;
  /* 1000 streams of one peer (two ports), opened then reset. */
  for (int i = 0; i < 1000; i++) {
    const char *peer = i % 2 ? "ipv4:127.0.0.1:40000" : "127.0.0.1:40001";
    allowed += tool_peerlog_stream(pl, peer, 1, 0, SEC + (uint64_t)i);
    allowed += tool_peerlog_stream(pl, peer, 0, 1, SEC + (uint64_t)i);
  }
  ck_assert_int_eq(allowed, 4);
  /* Another peer is not limited by the first. */
  ck_assert_int_eq(tool_peerlog_stream(pl, "[::1]:5000", 1, 0, 2 * SEC), 1);
  tool_peerlog_flush(pl, 5 * SEC); /* not over yet: nothing */
  char *out = capture_end();
  ck_assert_str_eq(out, "");
  free(out);
  capture_start();
  tool_peerlog_flush(pl, 12 * SEC);
  out = capture_end();
  ck_assert_int_eq(count(out, "\n"), 1); /* [::1] logged all it had */
  ck_assert_msg(strstr(out, "peer 127.0.0.1: 1000 streams in 10 s, 1000 "
                            "reset by the client; 1996 stream lines not "
                            "logged") != NULL, "%s", out);
  free(out);
  /* A new window logs again. */
  ck_assert_int_eq(tool_peerlog_stream(pl, "127.0.0.1:1", 1, 0, 13 * SEC), 1);
  tool_peerlog_del(pl);
  ck_assert_int_eq(tool_peerlog_stream(NULL, "x", 1, 0, 0), 1);
}
END_TEST

/* Many peers: the table grows and every window is summarised once. */
START_TEST(test_many_peers) {
  tool_log_init("test", TOOL_LOG_INFO);
  tool_peerlog *pl = tool_peerlog_new(1, SEC);
  char peer[64];
  capture_start();
  for (int p = 0; p < 300; p++) {
    snprintf(peer, sizeof(peer), "ipv4:10.0.%d.%d:1", p / 256, p % 256);
    for (int i = 0; i < 3; i++)
      tool_peerlog_stream(pl, peer, 1, 0, 0);
  }
  tool_peerlog_flush(pl, 2 * SEC);
  char *out = capture_end();
  ck_assert_int_eq(count(out, "stream lines not logged"), 300);
  free(out);
  capture_start();
  tool_peerlog_flush(pl, 4 * SEC); /* all gone: nothing twice */
  out = capture_end();
  ck_assert_str_eq(out, "");
  free(out);
  tool_peerlog_del(pl);
}
END_TEST

/* Issue 23, item 6: a sink that resets each stream after asking (its
 * receive limit is below the push) gets one warning naming the largest
 * push and the likely cause, once per peer; a smaller push, or streams
 * reset before asking, say no such thing. */
START_TEST(test_failing_streams_warned_once_with_the_likely_cause) {
  tool_log_init("test", TOOL_LOG_WARN);
  tool_peerlog *pl = tool_peerlog_new(1000, 10 * SEC);
  const char *vs = "istio/networking/v1alpha3/virtualservices";
  capture_start();
  tool_peerlog_push(pl, "small", 100, 0);
  tool_peerlog_push(pl, vs, 21268956, 0);
  tool_peerlog_push(pl, "small", 100, 1); /* smaller: the largest stays */
  int flags = TOOL_PEERLOG_RESET | TOOL_PEERLOG_ASKED;
  for (int i = 0; i < 57; i++) {
    uint64_t t = (uint64_t)i * SEC / 12; /* 57 in under 5 s */
    tool_peerlog_stream(pl, "ipv4:127.0.0.1:4000", 1, 0, t);
    tool_peerlog_stream(pl, "ipv4:127.0.0.1:4000", 0, flags, t);
    /* Reset before asking: a rapid reset, not this. */
    tool_peerlog_stream(pl, "ipv4:127.0.0.2:4000", 0, TOOL_PEERLOG_RESET, t);
  }
  char *out = capture_end();
  ck_assert_int_eq(count(out, "\n"), 1);
  ck_assert_msg(
      strstr(out, "peer 127.0.0.1: 20 streams in 2 s were reset by the "
                  "client after asking; the largest push lately was "
                  "istio/networking/v1alpha3/virtualservices (21.3 MB): a "
                  "gRPC receive limit (4 MiB by default) below that is the "
                  "likely cause; raise it on the sink (Istio: "
                  "--mcpMaxMsgSize). Its new streams are paced at "
                  "--stream-rate.") != NULL,
      "%s", out);
  free(out);
  /* Once per peer, also in a later window. */
  capture_start();
  for (int i = 0; i < 40; i++)
    tool_peerlog_stream(pl, "127.0.0.1:1", 0, flags, 20 * SEC);
  out = capture_end();
  ck_assert_str_eq(out, "");
  free(out);
  /* Pushes below gRPC's default limit: no guess at the cause. */
  capture_start();
  tool_peerlog_push(pl, "small", 1000, 40 * SEC); /* a new window */
  for (int i = 0; i < 20; i++)
    tool_peerlog_stream(pl, "10.0.0.9:1", 0, flags, 40 * SEC);
  out = capture_end();
  ck_assert_msg(strstr(out, "peer 10.0.0.9: 20 streams in 1 s were reset by "
                            "the client after asking; the largest push "
                            "lately was small (1000 bytes); the sink's log "
                            "says why it fails") != NULL,
                "%s", out);
  free(out);
  tool_peerlog_del(pl);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ops_peerlog");
  TCase *tc = tcase_create("peerlog");
  tcase_add_test(tc, test_limits_and_summarises_per_peer);
  tcase_add_test(tc, test_many_peers);
  tcase_add_test(tc, test_failing_streams_warned_once_with_the_likely_cause);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK); /* stderr redirection */
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
