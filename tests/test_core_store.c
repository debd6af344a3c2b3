/*
 * The store: generations, generated versions, replace, validation, epoch,
 * tombstone compaction, and the bytes each resource is encoded into
 * (checked by decoding a push with protobuf-c).
 *
 * docs/protocol.md, "Versions and nonces", is the specification.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"

#define EPOCH 0x1234 /* th_store()'s epoch */
#define COLL "istio/networking/v1alpha3/gateways"

static char vbuf[48];
static const char *genver(uint64_t gen) {
  return th_version(vbuf, sizeof(vbuf), EPOCH, gen);
}

static mcp_store *store_new(void) {
  mcp_store *st = th_store(NULL);
  ck_assert_ptr_nonnull(st);
  return st;
}

static int put(mcp_store *st, const char *name, const char *version,
               const char *body, mcp_tstamp ts) {
  mcp_resource r = th_res(name, version, body);
  return mcp_store_upsert(st, COLL, &r, ts);
}

/* ---- generations ---- */

START_TEST(test_store_upsert_creates_collection_and_advances_generation) {
  mcp_store *st = store_new();
  ck_assert_int_eq(mcp_store_has_collection(st, COLL), 0);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 0);
  ck_assert_uint_eq(mcp_store_collection_count(st), 0);

  ck_assert_int_eq(put(st, "a", "v1", "A", 0), 1);
  ck_assert_int_eq(mcp_store_has_collection(st, COLL), 1);
  ck_assert_uint_eq(mcp_store_collection_count(st), 1);
  ck_assert_str_eq(mcp_store_collection_name(st, 0), COLL);
  ck_assert_ptr_null(mcp_store_collection_name(st, 1));
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 1);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 1);
  ck_assert_str_eq(mcp_store_version(st, COLL, "a"), "v1");

  ck_assert_int_eq(put(st, "b", "v1", "B", 1), 1);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 2);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 2);

  /* A change of one resource: one more generation, same count. */
  ck_assert_int_eq(put(st, "a", "v2", "A2", 2), 1);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 3);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 2);
  ck_assert_str_eq(mcp_store_version(st, COLL, "a"), "v2");
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_collections_are_separate) {
  mcp_store *st = store_new();
  mcp_resource r = th_res("a", "v1", "A");
  ck_assert_int_eq(mcp_store_upsert(st, "c1", &r, 0), 1);
  ck_assert_int_eq(mcp_store_upsert(st, "c2", &r, 0), 1);
  ck_assert_int_eq(mcp_store_upsert(st, "c2", &(mcp_resource){0}, 0),
                   MCP_ERR_INVALID_ARGUMENT);
  r = th_res("b", "v1", "B");
  ck_assert_int_eq(mcp_store_upsert(st, "c2", &r, 0), 1);
  ck_assert_uint_eq(mcp_store_generation(st, "c1"), 1);
  ck_assert_uint_eq(mcp_store_generation(st, "c2"), 2);
  ck_assert_uint_eq(mcp_store_count(st, "c1"), 1);
  ck_assert_uint_eq(mcp_store_count(st, "c2"), 2);
  ck_assert_ptr_null(mcp_store_version(st, "c1", "b"));
  /* Creation order. */
  ck_assert_uint_eq(mcp_store_collection_count(st), 2);
  ck_assert_str_eq(mcp_store_collection_name(st, 0), "c1");
  ck_assert_str_eq(mcp_store_collection_name(st, 1), "c2");
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_identical_upsert_is_noop) {
  mcp_store *st = store_new();
  ck_assert_int_eq(put(st, "a", "v1", "A", 0), 1);
  ck_assert_int_eq(put(st, "a", "v1", "A", 5), 0);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 1);
  ck_assert_str_eq(mcp_store_version(st, COLL, "a"), "v1");

  /* Same version, other content: a change. */
  ck_assert_int_eq(put(st, "a", "v1", "other", 6), 1);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 2);
  /* Same content, other version: a change too. */
  ck_assert_int_eq(put(st, "a", "v9", "other", 7), 1);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 3);
  ck_assert_str_eq(mcp_store_version(st, COLL, "a"), "v9");
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_generated_version_is_epoch_and_generation) {
  mcp_store *st = store_new();
  ck_assert_int_eq(put(st, "a", NULL, "A", 0), 1);
  ck_assert_str_eq(mcp_store_version(st, COLL, "a"), "0000000000001234-1");
  /* "" is "none" too. */
  ck_assert_int_eq(put(st, "b", "", "B", 0), 1);
  ck_assert_str_eq(mcp_store_version(st, COLL, "b"), genver(2));
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_generated_version_stable_while_content_unchanged) {
  mcp_store *st = store_new();
  ck_assert_int_eq(put(st, "a", NULL, "A", 0), 1);
  ck_assert_int_eq(put(st, "b", NULL, "B", 0), 1); /* generation 2 */
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 2);

  /* The same content again, at a later generation: nothing changes and
   * the version generated at generation 1 stays. */
  ck_assert_int_eq(put(st, "a", NULL, "A", 1), 0);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 2);
  ck_assert_str_eq(mcp_store_version(st, COLL, "a"), genver(1));
  ck_assert_int_eq(put(st, "a", "", "A", 1), 0);
  ck_assert_str_eq(mcp_store_version(st, COLL, "a"), genver(1));
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_generated_version_changes_with_content) {
  mcp_store *st = store_new();
  ck_assert_int_eq(put(st, "a", NULL, "A", 0), 1);
  ck_assert_int_eq(put(st, "b", NULL, "B", 0), 1);
  ck_assert_int_eq(put(st, "a", NULL, "A changed", 1), 1);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 3);
  ck_assert_str_eq(mcp_store_version(st, COLL, "a"), genver(3));
  ck_assert_str_eq(mcp_store_version(st, COLL, "b"), genver(2));

  /* Labels are content too. */
  mcp_kv l = {"app", "x"};
  mcp_resource r = th_res("b", NULL, "B");
  r.labels = &l;
  r.nlabels = 1;
  ck_assert_int_eq(mcp_store_upsert(st, COLL, &r, 2), 1);
  ck_assert_str_eq(mcp_store_version(st, COLL, "b"), genver(4));
  mcp_store_del(st);
}
END_TEST

/* ---- replace ---- */

START_TEST(test_store_replace_is_one_generation) {
  mcp_store *st = store_new();
  ck_assert_int_eq(put(st, "keep", "v1", "K", 0), 1);
  ck_assert_int_eq(put(st, "change", "v1", "C", 0), 1);
  ck_assert_int_eq(put(st, "drop", "v1", "D", 0), 1);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 3);

  mcp_resource res[3] = {
      th_res("keep", "v1", "K"),
      th_res("change", "v2", "C2"),
      th_res("new", "v1", "N"),
  };
  ck_assert_int_eq(mcp_store_replace(st, COLL, res, 3, 1), 1);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 4);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 3);
  ck_assert_str_eq(mcp_store_version(st, COLL, "keep"), "v1");
  ck_assert_str_eq(mcp_store_version(st, COLL, "change"), "v2");
  ck_assert_str_eq(mcp_store_version(st, COLL, "new"), "v1");
  ck_assert_ptr_null(mcp_store_version(st, COLL, "drop"));
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_replace_generated_versions_only_for_changes) {
  mcp_store *st = store_new();
  mcp_resource first[2] = {th_res("a", NULL, "A"), th_res("b", NULL, "B")};
  ck_assert_int_eq(mcp_store_replace(st, COLL, first, 2, 0), 1);
  ck_assert_str_eq(mcp_store_version(st, COLL, "a"), genver(1));
  ck_assert_str_eq(mcp_store_version(st, COLL, "b"), genver(1));

  mcp_resource second[2] = {th_res("a", NULL, "A"), th_res("b", NULL, "B2")};
  ck_assert_int_eq(mcp_store_replace(st, COLL, second, 2, 1), 1);
  ck_assert_str_eq(mcp_store_version(st, COLL, "a"), genver(1));
  ck_assert_str_eq(mcp_store_version(st, COLL, "b"), genver(2));
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_replace_unchanged_returns_zero) {
  mcp_store *st = store_new();
  mcp_resource res[2] = {th_res("a", "v1", "A"), th_res("b", NULL, "B")};
  ck_assert_int_eq(mcp_store_replace(st, COLL, res, 2, 0), 1);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 1);
  ck_assert_int_eq(mcp_store_replace(st, COLL, res, 2, 1), 0);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 1);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 2);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_replace_with_nothing_empties_in_one_generation) {
  mcp_store *st = store_new();
  ck_assert_int_eq(put(st, "a", "v1", "A", 0), 1);
  ck_assert_int_eq(put(st, "b", "v1", "B", 0), 1);
  ck_assert_int_eq(mcp_store_replace(st, COLL, NULL, 0, 1), 1);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 3);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 0);
  ck_assert_int_eq(mcp_store_has_collection(st, COLL), 1);
  /* Empty again: no change. */
  ck_assert_int_eq(mcp_store_replace(st, COLL, NULL, 0, 2), 0);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 3);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_replace_name_twice_is_invalid_and_changes_nothing) {
  mcp_store *st = store_new();
  ck_assert_int_eq(put(st, "a", "v1", "A", 0), 1);
  ck_assert_int_eq(put(st, "b", "v1", "B", 0), 1);
  mcp_resource res[3] = {
      th_res("a", "v2", "A2"),
      th_res("c", "v1", "C"),
      th_res("a", "v3", "A3"),
  };
  ck_assert_int_eq(mcp_store_replace(st, COLL, res, 3, 1),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 2);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 2);
  ck_assert_str_eq(mcp_store_version(st, COLL, "a"), "v1");
  ck_assert_str_eq(mcp_store_version(st, COLL, "b"), "v1");
  ck_assert_ptr_null(mcp_store_version(st, COLL, "c"));
  mcp_store_del(st);
}
END_TEST

/* A failed replace must not even create the collection. */
START_TEST(test_store_replace_name_twice_does_not_create_collection) {
  mcp_store *st = store_new();
  mcp_resource res[2] = {th_res("a", "v1", "A"), th_res("a", "v2", "A")};
  ck_assert_int_eq(mcp_store_replace(st, "fresh", res, 2, 0),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_store_has_collection(st, "fresh"), 0);
  ck_assert_uint_eq(mcp_store_collection_count(st), 0);
  mcp_store_del(st);
}
END_TEST

/* ---- validation ---- */

/* Checks that |r| is refused by upsert and by replace (next to a valid
 * resource), and that neither changed anything. */
static void expect_invalid(mcp_store *st, const mcp_resource *r) {
  ck_assert_int_eq(mcp_store_upsert(st, COLL, r, 0), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_store_upsert(st, "other", r, 0),
                   MCP_ERR_INVALID_ARGUMENT);
  mcp_resource two[2] = {th_res("fine", "v1", "F"), *r};
  ck_assert_int_eq(mcp_store_replace(st, COLL, two, 2, 0),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 1);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 1);
  ck_assert_ptr_null(mcp_store_version(st, COLL, "fine"));
  ck_assert_int_eq(mcp_store_has_collection(st, "other"), 0);
}

START_TEST(test_store_empty_name_is_invalid) {
  mcp_store *st = store_new();
  ck_assert_int_eq(put(st, "held", "v1", "H", 0), 1);
  mcp_resource r = th_res("", "v1", "A");
  expect_invalid(st, &r);
  r = th_res("x", "v1", "A");
  r.name = NULL;
  expect_invalid(st, &r);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_invalid_utf8_is_invalid) {
  mcp_store *st = store_new();
  ck_assert_int_eq(put(st, "held", "v1", "H", 0), 1);
  mcp_resource r = th_res("bad\xc3\x28", "v1", "A"); /* broken sequence */
  expect_invalid(st, &r);
  r = th_res("bad\xed\xa0\x80", "v1", "A"); /* a surrogate */
  expect_invalid(st, &r);
  r = th_res("ok", "v\xff", "A");
  expect_invalid(st, &r);
  mcp_kv kv = {"k", "\xc0\xaf"}; /* overlong */
  r = th_res("ok", "v1", "A");
  r.labels = &kv;
  r.nlabels = 1;
  expect_invalid(st, &r);
  r = th_res("ok", "v1", "A");
  r.annotations = &kv;
  r.nannotations = 1;
  expect_invalid(st, &r);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_create_time_nanos_out_of_range_is_invalid) {
  mcp_store *st = store_new();
  ck_assert_int_eq(put(st, "held", "v1", "H", 0), 1);
  mcp_resource r = th_res("t", "v1", "T");
  r.has_create_time = 1;
  r.create_time_seconds = 10;
  r.create_time_nanos = -1;
  expect_invalid(st, &r);
  r.create_time_nanos = 1000000000;
  expect_invalid(st, &r);
  /* The bounds themselves are fine. */
  r.create_time_nanos = 999999999;
  ck_assert_int_eq(mcp_store_upsert(st, COLL, &r, 0), 1);
  r.name = "t0";
  r.create_time_nanos = 0;
  ck_assert_int_eq(mcp_store_upsert(st, COLL, &r, 0), 1);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_invalid_collection_name_is_invalid) {
  mcp_store *st = store_new();
  mcp_resource r = th_res("a", "v1", "A");
  ck_assert_int_eq(mcp_store_upsert(st, "", &r, 0), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_store_upsert(st, "c\xff", &r, 0),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_store_replace(st, "", &r, 1, 0),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_store_add_collection(st, ""), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_store_add_collection(st, "\xe2\x82"),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(mcp_store_collection_count(st), 0);
  mcp_store_del(st);
}
END_TEST

/* ---- delete ---- */

START_TEST(test_store_delete_absent_returns_zero) {
  mcp_store *st = store_new();
  ck_assert_int_eq(mcp_store_delete(st, "nowhere", "a", 0), 0);
  ck_assert_int_eq(mcp_store_has_collection(st, "nowhere"), 0);
  ck_assert_int_eq(put(st, "a", "v1", "A", 0), 1);
  ck_assert_int_eq(mcp_store_delete(st, COLL, "b", 1), 0);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 1);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 1);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_delete_advances_generation_once) {
  mcp_store *st = store_new();
  ck_assert_int_eq(put(st, "a", "v1", "A", 0), 1);
  ck_assert_int_eq(put(st, "b", "v1", "B", 0), 1);
  ck_assert_int_eq(mcp_store_delete(st, COLL, "a", 1), 1);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 3);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 1);
  ck_assert_ptr_null(mcp_store_version(st, COLL, "a"));
  /* Deleting it again is nothing. */
  ck_assert_int_eq(mcp_store_delete(st, COLL, "a", 2), 0);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 3);
  /* The collection stays, even when empty. */
  ck_assert_int_eq(mcp_store_delete(st, COLL, "b", 3), 1);
  ck_assert_int_eq(mcp_store_has_collection(st, COLL), 1);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 0);
  /* And a deleted name comes back as a new resource. */
  ck_assert_int_eq(put(st, "a", "v1", "A", 4), 1);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 1);
  ck_assert_str_eq(mcp_store_version(st, COLL, "a"), "v1");
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_add_collection_declares_empty_collection) {
  mcp_store *st = store_new();
  ck_assert_int_eq(mcp_store_add_collection(st, COLL), 0);
  ck_assert_int_eq(mcp_store_has_collection(st, COLL), 1);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 0);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 0);
  ck_assert_uint_eq(mcp_store_collection_count(st), 1);
  /* Again: a no-op. */
  ck_assert_int_eq(mcp_store_add_collection(st, COLL), 0);
  ck_assert_uint_eq(mcp_store_collection_count(st), 1);
  /* Existing content is kept. */
  ck_assert_int_eq(put(st, "a", "v1", "A", 0), 1);
  ck_assert_int_eq(mcp_store_add_collection(st, COLL), 0);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 1);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 1);
  mcp_store_del(st);
}
END_TEST

/* ---- epoch ---- */

typedef struct rand_probe {
  uint64_t seed;
  int calls;
} rand_probe;

static void probe_rand(uint8_t *dest, size_t len, void *ud) {
  rand_probe *p = ud;
  p->calls++;
  th_rand(dest, len, &p->seed);
}

static mcp_store *store_from_rand(rand_probe *p) {
  mcp_store_options o;
  mcp_store_options_default(&o);
  o.rand = probe_rand;
  o.rand_user_data = p;
  mcp_store *st = NULL;
  ck_assert_int_eq(mcp_store_new(&st, &o), 0);
  ck_assert_ptr_nonnull(st);
  return st;
}

START_TEST(test_store_epoch_drawn_from_rand_hook) {
  rand_probe p1 = {42, 0}, p2 = {42, 0}, p3 = {43, 0};
  mcp_store *s1 = store_from_rand(&p1);
  mcp_store *s2 = store_from_rand(&p2);
  mcp_store *s3 = store_from_rand(&p3);
  ck_assert_int_eq(p1.calls, 1);
  ck_assert_int_eq(p3.calls, 1);
  ck_assert_uint_ne(mcp_store_epoch(s1), 0);
  ck_assert_uint_eq(mcp_store_epoch(s1), mcp_store_epoch(s2));
  ck_assert_uint_ne(mcp_store_epoch(s1), mcp_store_epoch(s3));

  /* Generated versions carry it. */
  mcp_resource r = th_res("a", NULL, "A");
  ck_assert_int_eq(mcp_store_upsert(s3, COLL, &r, 0), 1);
  char want[48];
  th_version(want, sizeof(want), mcp_store_epoch(s3), 1);
  ck_assert_str_eq(mcp_store_version(s3, COLL, "a"), want);
  mcp_store_del(s1);
  mcp_store_del(s2);
  mcp_store_del(s3);
}
END_TEST

START_TEST(test_store_explicit_epoch_wins_over_rand) {
  rand_probe p = {7, 0};
  mcp_store_options o;
  mcp_store_options_default(&o);
  o.epoch = 0xfeedfacecafebeefULL;
  o.rand = probe_rand;
  o.rand_user_data = &p;
  mcp_store *st = NULL;
  ck_assert_int_eq(mcp_store_new(&st, &o), 0);
  ck_assert_uint_eq(mcp_store_epoch(st), 0xfeedfacecafebeefULL);
  ck_assert_int_eq(p.calls, 0);
  mcp_resource r = th_res("a", NULL, "A");
  ck_assert_int_eq(mcp_store_upsert(st, COLL, &r, 0), 1);
  ck_assert_str_eq(mcp_store_version(st, COLL, "a"), "feedfacecafebeef-1");
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_new_without_epoch_or_rand_fails) {
  mcp_store_options o;
  mcp_store_options_default(&o);
  mcp_store *sentinel = (mcp_store *)&o;
  mcp_store *st = sentinel;
  ck_assert_int_eq(mcp_store_new(&st, &o), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_eq(st, sentinel);
}
END_TEST

/* ---- compaction ---- */

START_TEST(test_store_compaction_keeps_store_consistent) {
  mcp_store *st = store_new();
  char name[16];
  for (int i = 0; i < 100; ++i) {
    snprintf(name, sizeof(name), "r%d", i);
    ck_assert_int_eq(put(st, name, "v1", name, 0), 1);
  }
  for (int i = 0; i < 90; ++i) { /* well past the compaction threshold */
    snprintf(name, sizeof(name), "r%d", i);
    ck_assert_int_eq(mcp_store_delete(st, COLL, name, 1), 1);
  }
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 190);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 10);
  for (int i = 0; i < 100; ++i) {
    snprintf(name, sizeof(name), "r%d", i);
    if (i < 90) {
      ck_assert_ptr_null(mcp_store_version(st, COLL, name));
      ck_assert_int_eq(mcp_store_delete(st, COLL, name, 2), 0);
    } else {
      ck_assert_str_eq(mcp_store_version(st, COLL, name), "v1");
    }
  }
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 190);
  /* Deleted names, compacted or not, come back. */
  ck_assert_int_eq(put(st, "r0", "v2", "again", 3), 1);
  ck_assert_int_eq(put(st, "r89", "v2", "again", 3), 1);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 12);
  ck_assert_uint_eq(mcp_store_generation(st, COLL), 192);
  mcp_store_del(st);
}
END_TEST

/* ---- encoding ---- */

/* Subscribes a fresh session to COLL and returns the decoded answer. */
static Istio__Mcp__V1alpha1__Resources *first_push(mcp_store *st) {
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.store = st;
  mcp_source_session *s = NULL;
  ck_assert_int_eq(mcp_source_session_new(&s, &o, 0), 0);
  size_t len;
  uint8_t *req = th_request(&len, "node", COLL, "", 0, NULL, 0, NULL);
  th_source_recv(s, req, len, 0, 0);
  Istio__Mcp__V1alpha1__Resources *r = th_source_next(s, 0);
  ck_assert_ptr_nonnull(r);
  mcp_source_session_del(s);
  return r;
}

static const char *kv_get(Istio__Mcp__V1alpha1__Metadata__LabelsEntry **e,
                          size_t n, const char *key) {
  for (size_t i = 0; i < n; ++i) {
    if (strcmp(e[i]->key, key) == 0) {
      return e[i]->value;
    }
  }
  return NULL;
}

static const char *ann_get(Istio__Mcp__V1alpha1__Metadata__AnnotationsEntry **e,
                           size_t n, const char *key) {
  for (size_t i = 0; i < n; ++i) {
    if (strcmp(e[i]->key, key) == 0) {
      return e[i]->value;
    }
  }
  return NULL;
}

START_TEST(test_store_encoded_resource_decodes_to_exactly_the_input) {
  mcp_store *st = store_new();
  static const uint8_t body[] = {0x08, 0x96, 0x01, 0x00, 0xff, 0x12, 0x00};
  mcp_kv labels[2] = {{"app", "reviews"}, {"tier", ""}};
  mcp_kv ann[3] = {{"note", "h\xc3\xa9llo"}, {"empty", ""}, {"x", "y"}};
  mcp_resource r;
  memset(&r, 0, sizeof(r));
  r.name = "default/reviews";
  r.version = "42";
  r.labels = labels;
  r.nlabels = 2;
  r.annotations = ann;
  r.nannotations = 3;
  r.has_create_time = 1;
  r.create_time_seconds = 1700000000;
  r.create_time_nanos = 123456789;
  r.type_url = "type.googleapis.com/istio.networking.v1alpha3.Gateway";
  r.body = body;
  r.body_len = sizeof(body);
  ck_assert_int_eq(mcp_store_upsert(st, COLL, &r, 0), 1);

  Istio__Mcp__V1alpha1__Resources *m = first_push(st);
  ck_assert_uint_eq(m->n_resources, 1);
  const Istio__Mcp__V1alpha1__Resource *d = m->resources[0];
  ck_assert_ptr_nonnull(d->metadata);
  ck_assert_str_eq(d->metadata->name, "default/reviews");
  ck_assert_str_eq(d->metadata->version, "42");
  ck_assert_uint_eq(d->metadata->n_labels, 2);
  ck_assert_str_eq(kv_get(d->metadata->labels, 2, "app"), "reviews");
  ck_assert_str_eq(kv_get(d->metadata->labels, 2, "tier"), "");
  ck_assert_uint_eq(d->metadata->n_annotations, 3);
  ck_assert_str_eq(ann_get(d->metadata->annotations, 3, "note"), "h\xc3\xa9llo");
  ck_assert_str_eq(ann_get(d->metadata->annotations, 3, "empty"), "");
  ck_assert_str_eq(ann_get(d->metadata->annotations, 3, "x"), "y");
  ck_assert_ptr_nonnull(d->metadata->create_time);
  ck_assert_int_eq(d->metadata->create_time->seconds, 1700000000);
  ck_assert_int_eq(d->metadata->create_time->nanos, 123456789);
  ck_assert_ptr_nonnull(d->body);
  ck_assert_str_eq(d->body->type_url,
                   "type.googleapis.com/istio.networking.v1alpha3.Gateway");
  ck_assert_uint_eq(d->body->value.len, sizeof(body));
  ck_assert_mem_eq(d->body->value.data, body, sizeof(body));
  th_resources_free(m);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_encoded_resource_without_optional_fields) {
  mcp_store *st = store_new();
  mcp_resource r;
  memset(&r, 0, sizeof(r));
  r.name = "bare";
  r.version = "1";
  r.type_url = "type.googleapis.com/test.Empty";
  ck_assert_int_eq(mcp_store_upsert(st, COLL, &r, 0), 1);
  Istio__Mcp__V1alpha1__Resources *m = first_push(st);
  ck_assert_uint_eq(m->n_resources, 1);
  const Istio__Mcp__V1alpha1__Resource *d = m->resources[0];
  ck_assert_str_eq(d->metadata->name, "bare");
  ck_assert_str_eq(d->metadata->version, "1");
  ck_assert_ptr_null(d->metadata->create_time);
  ck_assert_uint_eq(d->metadata->n_labels, 0);
  ck_assert_uint_eq(d->metadata->n_annotations, 0);
  ck_assert_ptr_nonnull(d->body);
  ck_assert_str_eq(d->body->type_url, "type.googleapis.com/test.Empty");
  ck_assert_uint_eq(d->body->value.len, 0);
  th_resources_free(m);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_encoded_create_time_before_epoch) {
  mcp_store *st = store_new();
  mcp_resource r = th_res("old", "1", "O");
  r.has_create_time = 1;
  r.create_time_seconds = -86400;
  r.create_time_nanos = 5;
  ck_assert_int_eq(mcp_store_upsert(st, COLL, &r, 0), 1);
  Istio__Mcp__V1alpha1__Resources *m = first_push(st);
  ck_assert_uint_eq(m->n_resources, 1);
  ck_assert_ptr_nonnull(m->resources[0]->metadata->create_time);
  ck_assert_int_eq(m->resources[0]->metadata->create_time->seconds, -86400);
  ck_assert_int_eq(m->resources[0]->metadata->create_time->nanos, 5);
  th_resources_free(m);
  mcp_store_del(st);
}
END_TEST

/* has_create_time with 0 s and 0 ns is the Unix epoch, not "no time". */
START_TEST(test_store_encoded_create_time_zero_is_present) {
  mcp_store *st = store_new();
  mcp_resource r = th_res("epoch", "1", "E");
  r.has_create_time = 1;
  ck_assert_int_eq(mcp_store_upsert(st, COLL, &r, 0), 1);
  Istio__Mcp__V1alpha1__Resources *m = first_push(st);
  ck_assert_uint_eq(m->n_resources, 1);
  ck_assert_ptr_nonnull(m->resources[0]->metadata->create_time);
  ck_assert_int_eq(m->resources[0]->metadata->create_time->seconds, 0);
  ck_assert_int_eq(m->resources[0]->metadata->create_time->nanos, 0);
  th_resources_free(m);
  mcp_store_del(st);
}
END_TEST

/* Lengths that need multi-byte varints at every level. */
START_TEST(test_store_encoded_large_resource_decodes) {
  mcp_store *st = store_new();
  size_t blen = 70000;
  uint8_t *body = malloc(blen);
  for (size_t i = 0; i < blen; ++i) {
    body[i] = (uint8_t)(i * 7 + 3);
  }
  char longval[301];
  memset(longval, 'v', 300);
  longval[300] = '\0';
  char longname[201];
  memset(longname, 'n', 200);
  longname[200] = '\0';
  mcp_kv labels[1] = {{"long", longval}};
  mcp_resource r = th_res(longname, "1", NULL);
  r.labels = labels;
  r.nlabels = 1;
  r.body = body;
  r.body_len = blen;
  ck_assert_int_eq(mcp_store_upsert(st, COLL, &r, 0), 1);
  Istio__Mcp__V1alpha1__Resources *m = first_push(st);
  ck_assert_uint_eq(m->n_resources, 1);
  const Istio__Mcp__V1alpha1__Resource *d = m->resources[0];
  ck_assert_str_eq(d->metadata->name, longname);
  ck_assert_uint_eq(d->metadata->n_labels, 1);
  ck_assert_str_eq(d->metadata->labels[0]->value, longval);
  ck_assert_uint_eq(d->body->value.len, blen);
  ck_assert_mem_eq(d->body->value.data, body, blen);
  th_resources_free(m);
  free(body);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_generated_version_is_encoded) {
  mcp_store *st = store_new();
  ck_assert_int_eq(put(st, "a", NULL, "A", 0), 1);
  Istio__Mcp__V1alpha1__Resources *m = first_push(st);
  ck_assert_uint_eq(m->n_resources, 1);
  ck_assert_str_eq(m->resources[0]->metadata->version, genver(1));
  ck_assert(th_body_is(m, 0, "A"));
  th_resources_free(m);
  mcp_store_del(st);
}
END_TEST

static Suite *store_suite(void) {
  Suite *s = suite_create("core_store");
  TCase *tc = tcase_create("generation");
  tcase_add_test(tc, test_store_upsert_creates_collection_and_advances_generation);
  tcase_add_test(tc, test_store_collections_are_separate);
  tcase_add_test(tc, test_store_identical_upsert_is_noop);
  tcase_add_test(tc, test_store_generated_version_is_epoch_and_generation);
  tcase_add_test(tc, test_store_generated_version_stable_while_content_unchanged);
  tcase_add_test(tc, test_store_generated_version_changes_with_content);
  suite_add_tcase(s, tc);

  tc = tcase_create("replace");
  tcase_add_test(tc, test_store_replace_is_one_generation);
  tcase_add_test(tc, test_store_replace_generated_versions_only_for_changes);
  tcase_add_test(tc, test_store_replace_unchanged_returns_zero);
  tcase_add_test(tc, test_store_replace_with_nothing_empties_in_one_generation);
  tcase_add_test(tc, test_store_replace_name_twice_is_invalid_and_changes_nothing);
  tcase_add_test(tc, test_store_replace_name_twice_does_not_create_collection);
  suite_add_tcase(s, tc);

  tc = tcase_create("validation");
  tcase_add_test(tc, test_store_empty_name_is_invalid);
  tcase_add_test(tc, test_store_invalid_utf8_is_invalid);
  tcase_add_test(tc, test_store_create_time_nanos_out_of_range_is_invalid);
  tcase_add_test(tc, test_store_invalid_collection_name_is_invalid);
  suite_add_tcase(s, tc);

  tc = tcase_create("delete");
  tcase_add_test(tc, test_store_delete_absent_returns_zero);
  tcase_add_test(tc, test_store_delete_advances_generation_once);
  tcase_add_test(tc, test_store_add_collection_declares_empty_collection);
  tcase_add_test(tc, test_store_compaction_keeps_store_consistent);
  suite_add_tcase(s, tc);

  tc = tcase_create("epoch");
  tcase_add_test(tc, test_store_epoch_drawn_from_rand_hook);
  tcase_add_test(tc, test_store_explicit_epoch_wins_over_rand);
  tcase_add_test(tc, test_store_new_without_epoch_or_rand_fails);
  suite_add_tcase(s, tc);

  tc = tcase_create("encoding");
  tcase_add_test(tc, test_store_encoded_resource_decodes_to_exactly_the_input);
  tcase_add_test(tc, test_store_encoded_resource_without_optional_fields);
  tcase_add_test(tc, test_store_encoded_create_time_before_epoch);
  tcase_add_test(tc, test_store_encoded_create_time_zero_is_present);
  tcase_add_test(tc, test_store_encoded_large_resource_decodes);
  tcase_add_test(tc, test_store_generated_version_is_encoded);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(store_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
