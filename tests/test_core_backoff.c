/* core/engine/backoff.c: the reconnection policy of every client (the default
 * table, the delays, the healthy rule, mcp_redial), with fake time and
 * injected randomness. */
#include <check.h>
#include <stdlib.h>

#include "mcp/mcp.h"

/* Returns the 32-bit value *user_data as the random bytes (big endian, the
 * order backoff.c reads them in). */
static void fixed_rand(uint8_t *dest, size_t len, void *user_data) {
  uint32_t v = *(uint32_t *)user_data;
  for (size_t i = 0; i < len; i++)
    dest[i] = (uint8_t)(v >> (8 * (3 - (i % 4))));
}

static mcp_backoff_options defaults(void) { return mcp_backoff_defaults(); }

/* Within 1 µs: the arithmetic is in double. */
#define ck_assert_near(a, b)                                                  \
  do {                                                                        \
    mcp_tstamp a_ = (a), b_ = (b);                                            \
    ck_assert_msg((a_ > b_ ? a_ - b_ : b_ - a_) <= 1000, "%llu != %llu",      \
                  (unsigned long long)a_, (unsigned long long)b_);            \
  } while (0)

START_TEST(test_backoff_grows_by_multiplier) {
  uint32_t mid = 0x80000000u; /* u = 0.5: no jitter */
  mcp_backoff b;
  mcp_backoff_options o = defaults();
  mcp_backoff_init(&b, &o, fixed_rand, &mid);
  double want = 1e9;
  for (int i = 0; i < 8; i++) {
    ck_assert_near(mcp_backoff_next(&b), (mcp_tstamp)want);
    want *= 1.6;
  }
}
END_TEST

START_TEST(test_backoff_capped_at_max) {
  uint32_t top = 0xffffffffu; /* the largest jitter factor */
  mcp_backoff b;
  mcp_backoff_options o = defaults();
  mcp_backoff_init(&b, &o, fixed_rand, &top);
  mcp_tstamp d = 0;
  for (int i = 0; i < 40; i++) {
    d = mcp_backoff_next(&b);
    ck_assert_uint_le(d, 120 * MCP_SECONDS);
  }
  ck_assert_uint_eq(d, 120 * MCP_SECONDS);
  ck_assert_uint_eq(mcp_backoff_nominal(&b), 120 * MCP_SECONDS);
}
END_TEST

START_TEST(test_backoff_jitter_within_20_percent) {
  /* The extremes of the generator give the extremes of the factor. */
  uint32_t r = 0;
  mcp_backoff b;
  mcp_backoff_options o = defaults();
  mcp_backoff_init(&b, &o, fixed_rand, &r);
  ck_assert_near(mcp_backoff_next(&b), 800 * MCP_MILLISECONDS);
  r = 0xffffffffu;
  mcp_backoff_init(&b, &o, fixed_rand, &r);
  ck_assert_near(mcp_backoff_next(&b), 1200 * MCP_MILLISECONDS);

  /* A deterministic sequence: every draw within ±20 % of the nominal. */
  uint64_t seed = 42;
  mcp_backoff_init(&b, &o, mcp_rand_splitmix64, &seed);
  int below = 0, above = 0;
  for (int i = 0; i < 2000; i++) {
    mcp_tstamp nominal = mcp_backoff_nominal(&b);
    mcp_tstamp d = mcp_backoff_next(&b);
    ck_assert_uint_ge(d, (mcp_tstamp)(0.8 * (double)nominal) - 1);
    ck_assert_uint_le(d, (mcp_tstamp)(1.2 * (double)nominal) + 1);
    below += d < nominal;
    above += d > nominal;
    if (i % 10 == 9)
      mcp_backoff_stream_ended(&b, 1000 * MCP_SECONDS, 1);
  }
  ck_assert_int_gt(below, 100); /* it does jitter, both ways */
  ck_assert_int_gt(above, 100);
}
END_TEST

START_TEST(test_backoff_short_stream_does_not_reset) {
  uint32_t mid = 0x80000000u;
  mcp_backoff b;
  mcp_backoff_options o = defaults();
  mcp_backoff_init(&b, &o, fixed_rand, &mid);
  for (int i = 0; i < 4; i++)
    mcp_backoff_next(&b);
  mcp_tstamp nominal = mcp_backoff_nominal(&b); /* 1.6^4 s */
  /* It received a message but died young: keep growing. */
  mcp_backoff_stream_ended(&b, 10 * MCP_MILLISECONDS, 1);
  ck_assert_near(mcp_backoff_next(&b), nominal);
  /* Long but silent (never got a message): not healthy either. */
  mcp_backoff_stream_ended(&b, 3600 * MCP_SECONDS, 0);
  ck_assert_near(mcp_backoff_next(&b), (mcp_tstamp)(nominal * 1.6));
}
END_TEST

START_TEST(test_backoff_healthy_stream_resets_to_initial_not_zero) {
  uint32_t mid = 0x80000000u;
  mcp_backoff b;
  mcp_backoff_options o = defaults();
  mcp_backoff_init(&b, &o, fixed_rand, &mid);
  for (int i = 0; i < 6; i++)
    mcp_backoff_next(&b);
  mcp_backoff_stream_ended(&b, 600 * MCP_SECONDS, 5);
  mcp_tstamp d = mcp_backoff_next(&b);
  ck_assert_near(d, MCP_SECONDS);
  ck_assert_uint_gt(d, 0);
}
END_TEST

START_TEST(test_backoff_zero_options_take_defaults) {
  uint32_t mid = 0x80000000u;
  mcp_backoff b;
  mcp_backoff_options zero = {0, 0, -1, 0};
  mcp_backoff_init(&b, &zero, fixed_rand, &mid);
  ck_assert_near(mcp_backoff_next(&b), MCP_SECONDS);
  ck_assert_near(mcp_backoff_next(&b), 1600 * MCP_MILLISECONDS);
  for (int i = 0; i < 50; ++i) {
    mcp_backoff_next(&b);
  }
  ck_assert_uint_eq(mcp_backoff_nominal(&b), 120 * MCP_SECONDS); /* max */
}
END_TEST


START_TEST(test_backoff_defaults_are_the_documented_table) {
  mcp_backoff_options o = mcp_backoff_defaults();
  ck_assert_uint_eq(o.initial, MCP_SECONDS);
  ck_assert(o.multiplier == 1.6);
  ck_assert(o.jitter == 0.2);
  ck_assert_uint_eq(o.max, 120 * MCP_SECONDS);
}
END_TEST

/* Fake time: |t0| is an arbitrary start, every step an argument. */
#define T0 ((mcp_tstamp)1000 * MCP_SECONDS)

START_TEST(test_redial_first_attempt_now_then_paced) {
  uint32_t mid = 0x80000000u; /* no jitter */
  mcp_redial r;
  mcp_backoff_options o = defaults();
  mcp_redial_init(&r, &o, fixed_rand, &mid, T0);
  ck_assert(mcp_redial_due(&r, T0));
  ck_assert_uint_eq(mcp_redial_at(&r), T0);
  mcp_redial_opened(&r, T0);
  /* Open: nothing due, no deadline, however late. */
  ck_assert(mcp_redial_is_open(&r));
  ck_assert(!mcp_redial_due(&r, T0 + 3600 * MCP_SECONDS));
  ck_assert_uint_eq(mcp_redial_at(&r), MCP_TSTAMP_MAX);
  /* Failed attempts: 1 s, 1.6 s, 2.56 s after each end. */
  mcp_tstamp t = T0 + 5 * MCP_MILLISECONDS, want = MCP_SECONDS;
  for (int i = 0; i < 3; i++) {
    mcp_tstamp d = mcp_redial_ended(&r, t);
    ck_assert_near(d, want);
    ck_assert_uint_eq(mcp_redial_at(&r), t + d);
    ck_assert(!mcp_redial_due(&r, t + d - 1));
    ck_assert(mcp_redial_due(&r, t + d));
    t += d;
    mcp_redial_opened(&r, t);
    want = (mcp_tstamp)((double)want * 1.6);
  }
}
END_TEST

/* The healthy rule, once for every client: a message received and the
 * attempt lasted the nominal delay. */
START_TEST(test_redial_first_message_on_a_lasting_call_resets) {
  uint32_t mid = 0x80000000u;
  mcp_redial r;
  mcp_backoff_options o = defaults();
  mcp_redial_init(&r, &o, fixed_rand, &mid, T0);
  mcp_tstamp t = T0;
  for (int i = 0; i < 4; i++) { /* four failures: nominal 1.6^4 s */
    mcp_redial_opened(&r, t);
    t += mcp_redial_ended(&r, t);
  }
  mcp_tstamp nominal = mcp_backoff_nominal(mcp_redial_backoff(&r));
  ck_assert_near(nominal, (mcp_tstamp)(1.6 * 1.6 * 1.6 * 1.6 * 1e9));
  /* Lived long, silent (a server's SETTINGS are no message): grows. */
  mcp_redial_opened(&r, t);
  ck_assert_uint_eq(mcp_redial_count(&r), 0);
  t += 3600 * MCP_SECONDS;
  ck_assert_near(mcp_redial_ended(&r, t), nominal);
  nominal = mcp_backoff_nominal(mcp_redial_backoff(&r));
  /* A message, but the call died young: grows (no hammering). */
  mcp_redial_opened(&r, t);
  mcp_redial_received(&r, 1);
  ck_assert_near(mcp_redial_ended(&r, t + 10 * MCP_MILLISECONDS), nominal);
  t += 10 * MCP_MILLISECONDS;
  nominal = mcp_backoff_nominal(mcp_redial_backoff(&r));
  /* The first message on a call that lasted: back to 1 s, not zero. */
  mcp_redial_opened(&r, t);
  mcp_redial_received(&r, 1);
  ck_assert_uint_eq(mcp_redial_count(&r), 1);
  ck_assert_near(mcp_redial_ended(&r, t + nominal), MCP_SECONDS);
  ck_assert(!mcp_redial_is_open(&r));
  ck_assert_uint_eq(mcp_redial_count(&r), 0);
}
END_TEST

/* An attempt that could not start (nothing opened) counts as a failure;
 * messages reported while nothing is open count for nothing. */
START_TEST(test_redial_unopened_failure_grows_and_ignores_stray_messages) {
  uint32_t mid = 0x80000000u;
  mcp_redial r;
  mcp_redial_init(&r, NULL, fixed_rand, &mid, T0);
  mcp_redial_received(&r, 7);
  ck_assert_uint_eq(mcp_redial_count(&r), 0);
  ck_assert_near(mcp_redial_ended(&r, T0 + 3600 * MCP_SECONDS), MCP_SECONDS);
  ck_assert_near(mcp_redial_ended(&r, T0 + 7200 * MCP_SECONDS),
                 1600 * MCP_MILLISECONDS);
}
END_TEST

int main(void) {
  Suite *s = suite_create("core_backoff");
  TCase *tc = tcase_create("backoff");
  tcase_add_test(tc, test_backoff_grows_by_multiplier);
  tcase_add_test(tc, test_backoff_capped_at_max);
  tcase_add_test(tc, test_backoff_jitter_within_20_percent);
  tcase_add_test(tc, test_backoff_short_stream_does_not_reset);
  tcase_add_test(tc, test_backoff_healthy_stream_resets_to_initial_not_zero);
  tcase_add_test(tc, test_backoff_zero_options_take_defaults);
  tcase_add_test(tc, test_backoff_defaults_are_the_documented_table);
  tcase_add_test(tc, test_redial_first_attempt_now_then_paced);
  tcase_add_test(tc, test_redial_first_message_on_a_lasting_call_resets);
  tcase_add_test(tc,
                 test_redial_unopened_failure_grows_and_ignores_stray_messages);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
