/*
 * common/admitopts.h: each transport's admission options reach the
 * engine's mcp_admit_options field by field, none swapped or dropped
 * (both options structs, each value distinct so that a swap shows).
 */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "admitopts.h"
#include "mcp/grpc.h"
#include "mcp/h2c.h"

/* Distinct values for every admission field of |o|, from |base|. */
#define SET_DISTINCT(o, base)                                                \
  do {                                                                       \
    (o)->max_streams = (base) + 1;                                           \
    (o)->max_streams_per_peer = (base) + 2;                                  \
    (o)->stream_rate = (base) + 3;                                           \
    (o)->stream_burst = (base) + 4;                                          \
    (o)->max_initial_pushes = (base) + 5;                                    \
    (o)->max_initial_pushes_per_peer = (base) + 6;                           \
    (o)->initial_push_timeout = (base) + 7;                                  \
    (o)->admission_wait_timeout = (base) + 8;                                \
    (o)->peer_stream_rate = (base) + 9;                                      \
    (o)->peer_stream_burst = (base) + 10;                                    \
  } while (0)

static void check_mapped(const mcp_admit_options *ao, uint32_t base) {
  ck_assert_uint_eq(ao->max_streams, base + 1);
  ck_assert_uint_eq(ao->max_streams_per_peer, base + 2);
  ck_assert_uint_eq(ao->stream_rate, base + 3);
  ck_assert_uint_eq(ao->stream_burst, base + 4);
  ck_assert_uint_eq(ao->max_initial, base + 5);
  ck_assert_uint_eq(ao->max_initial_per_peer, base + 6);
  ck_assert_int_eq(ao->initial_timeout, (mcp_tstamp)base + 7);
  ck_assert_int_eq(ao->wait_timeout, (mcp_tstamp)base + 8);
  ck_assert_uint_eq(ao->peer_stream_rate, base + 9);
  ck_assert_uint_eq(ao->peer_stream_burst, base + 10);
  /* What no transport option names stays the core's default (0). */
  ck_assert_uint_eq(ao->max_rate_peers, 0);
}

/* |type|'s defaults, every admission field set apart, mapped, checked. */
#define CHECK_MAPPING(type, defaults, base)                                  \
  do {                                                                       \
    type o;                                                                  \
    defaults(&o);                                                            \
    SET_DISTINCT(&o, base);                                                  \
    mcp_admit_options ao = MCP_ADMIT_OPTIONS_OF(&o);                         \
    check_mapped(&ao, base);                                                 \
  } while (0)

START_TEST(admission_options_map_field_by_field_on_both_transports) {
  CHECK_MAPPING(mcp_grpc_options, mcp_grpc_options_default, 100);
  CHECK_MAPPING(mcp_h2c_options, mcp_h2c_options_default, 200);
}
END_TEST

int main(void) {
  Suite *s = suite_create("admitopts");
  TCase *t = tcase_create("map");
  tcase_add_test(t, admission_options_map_field_by_field_on_both_transports);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
