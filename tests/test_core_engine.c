/*
 * The engine every protocol module shares (mcp/engine.h): watches over a
 * store (full state, O(changed) differences, debounce, a collection that
 * disappears and comes back), the message builder (shared bodies), and
 * the stream driver's policy (order of a pump, endings, half-close, the
 * spin guard, waking).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"
#include "mcp/engine.h"
#include "wire_readers.h"

#define COLL "default/web:80"
#define MS MCP_MILLISECONDS

/* ---- what a take reported ---- */

typedef struct seen {
  char names[64][32];
  char bodies[64][32];
  int removed[64];
  int n;
} seen;

static int record(const mcp_item *it, void *ud) {
  seen *s = ud;
  ck_assert_int_lt(s->n, 64);
  snprintf(s->names[s->n], sizeof(s->names[0]), "%s", it->name);
  snprintf(s->bodies[s->n], sizeof(s->bodies[0]), "%.*s", (int)it->body_len,
           it->body ? (const char *)it->body : "");
  s->removed[s->n] = it->removed;
  if (!it->removed) {
    ck_assert_str_eq(it->type_url, "type.googleapis.com/test.Body");
    ck_assert_ptr_nonnull(it->version);
  } else {
    ck_assert_ptr_null(it->version);
    ck_assert_ptr_null(it->body);
  }
  s->n++;
  return 0;
}

static int take(mcp_watch *w, mcp_tstamp ts, seen *s, int *full) {
  memset(s, 0, sizeof(*s));
  return mcp_watch_take(w, ts, record, s, full);
}

static mcp_watch *watch_new(mcp_store *st, mcp_tstamp debounce,
                            mcp_tstamp max_delay) {
  mcp_watch_options o = {debounce, max_delay};
  mcp_watch *w = NULL;
  ck_assert_int_eq(mcp_watch_new(&w, st, COLL, &o, NULL), 0);
  return w;
}

START_TEST(test_watch_first_take_is_the_whole_state) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "10.0.0.1:80", "v1", "A", 0);
  th_put(st, COLL, "10.0.0.2:80", "v1", "B", 0);
  th_put(st, "other", "x", "v1", "X", 0);
  mcp_watch *w = watch_new(st, 0, 0);
  ck_assert_str_eq(mcp_watch_collection(w), COLL);
  ck_assert_int_eq(mcp_watch_exists(w), 1);
  ck_assert_int_eq(mcp_watch_changed(w), 1);
  ck_assert_int_eq(mcp_watch_ready(w, 0), 1);
  seen s;
  int full = -1;
  ck_assert_int_eq(take(w, 0, &s, &full), 2);
  ck_assert_int_eq(full, 1);
  ck_assert_str_eq(s.names[0], "10.0.0.1:80");
  ck_assert_str_eq(s.bodies[0], "A");
  ck_assert_str_eq(s.names[1], "10.0.0.2:80");
  ck_assert_int_eq(mcp_watch_changed(w), 0);
  ck_assert_int_eq(mcp_watch_ready(w, 1), 0);
  ck_assert_uint_eq(mcp_watch_generation(w), mcp_store_generation(st, COLL));
  /* Another collection's change is not this watch's. */
  th_put(st, "other", "y", "v1", "Y", 1);
  ck_assert_int_eq(mcp_watch_changed(w), 0);
  mcp_watch_del(w);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_watch_reports_only_what_changed_oldest_first) {
  mcp_store *st = th_store(NULL);
  for (int i = 0; i < 50; ++i) {
    char name[32];
    snprintf(name, sizeof(name), "10.0.0.%d:80", i);
    th_put(st, COLL, name, "v1", "A", 0);
  }
  mcp_watch *w = watch_new(st, 0, 0);
  seen s;
  int full;
  ck_assert_int_eq(take(w, 0, &s, &full), 50);
  th_put(st, COLL, "10.0.0.7:80", "v2", "B", 1);
  ck_assert_int_eq(mcp_store_delete(st, COLL, "10.0.0.3:80", 2), 1);
  th_put(st, COLL, "10.0.0.99:80", "v1", "C", 3);
  ck_assert_int_eq(mcp_watch_ready(w, 3), 1);
  ck_assert_int_eq(take(w, 3, &s, &full), 3);
  ck_assert_int_eq(full, 0);
  ck_assert_str_eq(s.names[0], "10.0.0.7:80");
  ck_assert_str_eq(s.bodies[0], "B");
  ck_assert_str_eq(s.names[1], "10.0.0.3:80");
  ck_assert_int_eq(s.removed[1], 1);
  ck_assert_str_eq(s.names[2], "10.0.0.99:80");
  /* Nothing since: an empty take. */
  ck_assert_int_eq(take(w, 4, &s, &full), 0);
  ck_assert_int_eq(full, 0);
  mcp_watch_del(w);
  mcp_store_del(st);
}
END_TEST

/* An address that comes and goes within one debounce window is no news:
 * the caller never had it, so no removal of it is reported. */
START_TEST(test_watch_does_not_report_what_came_and_went_since) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "A", 0);
  mcp_watch *w = watch_new(st, 0, 0);
  seen s;
  int full;
  take(w, 0, &s, &full);
  th_put(st, COLL, "b", "v1", "B", 1);
  ck_assert_int_eq(mcp_store_delete(st, COLL, "b", 2), 1);
  ck_assert_int_eq(mcp_watch_changed(w), 1);
  ck_assert_int_eq(take(w, 2, &s, &full), 0);
  ck_assert_int_eq(full, 0);
  /* One the caller had, removed: reported, also after it came back and
   * went again. */
  ck_assert_int_eq(mcp_store_delete(st, COLL, "a", 3), 1);
  th_put(st, COLL, "a", "v2", "A", 4);
  ck_assert_int_eq(mcp_store_delete(st, COLL, "a", 5), 1);
  ck_assert_int_eq(take(w, 5, &s, &full), 1);
  ck_assert_str_eq(s.names[0], "a");
  ck_assert_int_eq(s.removed[0], 1);
  mcp_watch_del(w);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_watch_sees_a_collection_removed_and_brought_back) {
  mcp_store *st = th_store(NULL);
  mcp_watch *w = watch_new(st, 0, 0);
  seen s;
  int full = 0;
  /* Not there at all: a whole state of nothing. */
  ck_assert_int_eq(mcp_watch_exists(w), 0);
  ck_assert_int_eq(take(w, 0, &s, &full), 0);
  ck_assert_int_eq(full, 1);
  ck_assert_int_eq(mcp_watch_changed(w), 0);

  th_put(st, COLL, "10.0.0.1:80", "v1", "A", 1);
  ck_assert_int_eq(mcp_watch_changed(w), 1);
  ck_assert_int_eq(take(w, 1, &s, &full), 1);
  ck_assert_int_eq(full, 1); /* it appeared: the caller held nothing */

  ck_assert_int_eq(mcp_store_remove_collection(st, COLL, 2), 1);
  ck_assert_int_eq(mcp_store_remove_collection(st, COLL, 2), 0);
  ck_assert_int_eq(mcp_store_has_collection(st, COLL), 0);
  ck_assert_uint_eq(mcp_store_count(st, COLL), 0);
  ck_assert_int_eq(mcp_watch_exists(w), 0);
  ck_assert_int_eq(mcp_watch_changed(w), 1);
  ck_assert_int_eq(take(w, 2, &s, &full), 0);
  ck_assert_int_eq(full, 1);
  ck_assert_int_eq(mcp_watch_changed(w), 0);

  /* Back, empty, through add_collection: changed, exists, nothing in it. */
  uint64_t g = mcp_store_generation(st, COLL);
  ck_assert_int_eq(mcp_store_add_collection(st, COLL), 0);
  ck_assert_uint_gt(mcp_store_generation(st, COLL), g);
  ck_assert_int_eq(mcp_watch_exists(w), 1);
  ck_assert_int_eq(mcp_watch_changed(w), 1);
  ck_assert_int_eq(take(w, 3, &s, &full), 0);
  ck_assert_int_eq(full, 1);

  /* Removed and back within one window: the difference is exact. */
  th_put(st, COLL, "10.0.0.1:80", "v1", "A", 4);
  th_put(st, COLL, "10.0.0.2:80", "v1", "B", 4);
  ck_assert_int_eq(take(w, 4, &s, &full), 2);
  ck_assert_int_eq(full, 0);
  ck_assert_int_eq(mcp_store_remove_collection(st, COLL, 5), 1);
  th_put(st, COLL, "10.0.0.2:80", "v1", "B", 5);
  ck_assert_int_eq(mcp_store_has_collection(st, COLL), 1);
  ck_assert_int_eq(take(w, 5, &s, &full), 2);
  ck_assert_int_eq(full, 0);
  ck_assert_str_eq(s.names[0], "10.0.0.1:80");
  ck_assert_int_eq(s.removed[0], 1);
  ck_assert_str_eq(s.names[1], "10.0.0.2:80");
  ck_assert_int_eq(s.removed[1], 0);
  mcp_watch_del(w);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_store_remove_collection_replace_of_nothing_brings_it_back) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "A", 0);
  ck_assert_int_eq(mcp_store_remove_collection(st, COLL, 1), 1);
  ck_assert_int_eq(mcp_store_remove_collection(st, "never", 1), 0);
  uint64_t g = mcp_store_generation(st, COLL);
  ck_assert_int_eq(mcp_store_replace(st, COLL, NULL, 0, 2), 1);
  ck_assert_int_eq(mcp_store_has_collection(st, COLL), 1);
  ck_assert_uint_gt(mcp_store_generation(st, COLL), g);
  /* Present and unchanged: an empty replace is no change. */
  ck_assert_int_eq(mcp_store_replace(st, COLL, NULL, 0, 3), 0);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_watch_falls_back_to_whole_state_after_compaction) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "keep", "v1", "K", 0);
  mcp_watch *w = watch_new(st, 0, 0);
  seen s;
  int full;
  take(w, 0, &s, &full);
  /* Enough deletions for the store to drop tombstones the watch needs. */
  for (int i = 0; i < 300; ++i) {
    char name[32];
    snprintf(name, sizeof(name), "t%d", i);
    th_put(st, COLL, name, "v1", "T", 1);
    ck_assert_int_eq(mcp_store_delete(st, COLL, name, 1), 1);
  }
  ck_assert_int_eq(take(w, 2, &s, &full), 1);
  ck_assert_int_eq(full, 1);
  ck_assert_str_eq(s.names[0], "keep");
  mcp_watch_del(w);
  mcp_store_del(st);
}
END_TEST

typedef struct tally {
  int live, removed;
} tally;

static int count(const mcp_item *it, void *ud) {
  tally *t = ud;
  if (it->removed) {
    t->removed++;
  } else {
    t->live++;
  }
  return 0;
}

/* Most of a collection deleted in one change (a service scaled down): a
 * watch that held the generation before still gets the exact difference. */
START_TEST(test_watch_keeps_up_through_a_mass_deletion) {
  mcp_store *st = th_store(NULL);
  mcp_resource res[200];
  char names[200][16];
  for (int i = 0; i < 200; ++i) {
    snprintf(names[i], sizeof(names[i]), "r%d", i);
    res[i] = th_res(names[i], "v1", "A");
  }
  ck_assert_int_eq(mcp_store_replace(st, COLL, res, 200, 0), 1);
  mcp_watch *w = watch_new(st, 0, 0);
  tally t = {0};
  int full;
  ck_assert_int_eq(mcp_watch_take(w, 0, count, &t, &full), 200);
  ck_assert_int_eq(mcp_store_replace(st, COLL, res, 3, 1), 1);
  memset(&t, 0, sizeof(t));
  ck_assert_int_eq(mcp_watch_take(w, 1, count, &t, &full), 197);
  ck_assert_int_eq(full, 0);
  ck_assert_int_eq(t.removed, 197);
  /* Later changes drop those tombstones: a watch that did not keep up
   * gets the whole state. */
  ck_assert_int_eq(mcp_store_replace(st, COLL, res, 150, 2), 1);
  ck_assert_int_eq(mcp_store_replace(st, COLL, res, 1, 3), 1);
  ck_assert_int_eq(mcp_store_replace(st, COLL, res, 2, 4), 1);
  memset(&t, 0, sizeof(t));
  ck_assert_int_eq(mcp_watch_take(w, 4, count, &t, &full), 2);
  ck_assert_int_eq(full, 1);
  ck_assert_int_eq(t.live, 2);
  mcp_watch_del(w);
  mcp_store_del(st);
}
END_TEST

/* Puts version |t| of "a" at |t| ms, the store's time. */
static void put_at(mcp_store *st, const char *name, mcp_tstamp t) {
  char v[32];
  snprintf(v, sizeof(v), "v%d", (int)(t / MS));
  th_put(st, COLL, name, v, "A", t);
}

/* Leading edge: a change after a quiet period (no change and no take
 * within the debounce window) is ready at once, without a timer. */
START_TEST(test_watch_isolated_change_goes_at_once) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "A", 0);
  mcp_watch *w = watch_new(st, 100 * MS, 250 * MS);
  seen s;
  int full;
  /* The first take is never delayed. */
  ck_assert_int_eq(mcp_watch_ready(w, 0), 1);
  take(w, 0, &s, &full);
  ck_assert_uint_eq(mcp_watch_get_expiry(w), MCP_TSTAMP_MAX);

  put_at(st, "a", 150 * MS);
  mcp_watch_note(w, 150 * MS);
  ck_assert_int_eq(mcp_watch_ready(w, 150 * MS), 1);
  ck_assert_uint_eq(mcp_watch_get_expiry(w), MCP_TSTAMP_MAX);
  ck_assert_int_eq(take(w, 150 * MS, &s, &full), 1);
  /* Exactly one window after the take and the change before it: quiet. */
  put_at(st, "b", 250 * MS);
  ck_assert_int_eq(mcp_watch_ready(w, 250 * MS), 1);
  ck_assert_int_eq(take(w, 250 * MS, &s, &full), 1);
  /* A batch at one instant is one change: still isolated. */
  th_put(st, COLL, "c", "v1", "C", 400 * MS);
  th_put(st, COLL, "d", "v1", "D", 400 * MS);
  ck_assert_int_eq(mcp_watch_ready(w, 400 * MS), 1);
  ck_assert_int_eq(take(w, 400 * MS, &s, &full), 2);
  mcp_watch_del(w);
  mcp_store_del(st);
}
END_TEST

/* Changes within the window of the last take are held until the
 * collection has been quiet for the window, then go as one take. */
START_TEST(test_watch_burst_is_coalesced_until_quiet) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "A", 0);
  mcp_watch *w = watch_new(st, 100 * MS, 0);
  seen s;
  int full;
  take(w, 0, &s, &full);
  put_at(st, "a", 200 * MS); /* leads the burst: at once */
  mcp_watch_note(w, 200 * MS);
  ck_assert_int_eq(mcp_watch_ready(w, 200 * MS), 1);
  ck_assert_int_eq(take(w, 200 * MS, &s, &full), 1);
  const char *names[] = {"b", "c", "d"};
  for (int i = 0; i < 3; ++i) {
    mcp_tstamp t = (230 + 30 * (mcp_tstamp)i) * MS;
    put_at(st, names[i], t);
    mcp_watch_note(w, t);
    ck_assert_int_eq(mcp_watch_ready(w, t), 0);
    ck_assert_uint_eq(mcp_watch_get_expiry(w), t + 100 * MS);
  }
  /* Past the window of the take (300 ms) but not quiet yet. */
  ck_assert_int_eq(mcp_watch_ready(w, 359 * MS), 0);
  ck_assert_int_eq(mcp_watch_ready(w, 390 * MS), 1);
  ck_assert_int_eq(take(w, 390 * MS, &s, &full), 3);
  ck_assert_str_eq(s.names[0], "b");
  ck_assert_str_eq(s.names[2], "d");
  /* Quiet since the last change (290 ms), but the take was 10 ms ago: a
   * change now follows a send within the window and waits. */
  put_at(st, "e", 400 * MS);
  ck_assert_int_eq(mcp_watch_ready(w, 400 * MS), 0);
  ck_assert_uint_eq(mcp_watch_get_expiry(w), 500 * MS);
  ck_assert_int_eq(mcp_watch_ready(w, 500 * MS), 1);
  mcp_watch_del(w);
  mcp_store_del(st);
}
END_TEST

/* A stream of changes never quiet goes |max_delay| after the watch
 * first saw it. */
START_TEST(test_watch_max_delay_bounds_a_stream_of_changes) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "A", 0);
  mcp_watch *w = watch_new(st, 100 * MS, 250 * MS);
  seen s;
  int full;
  take(w, 0, &s, &full);
  put_at(st, "a", 10 * MS); /* within the window of the take */
  mcp_watch_note(w, 10 * MS);
  ck_assert_int_eq(mcp_watch_ready(w, 10 * MS), 0);
  ck_assert_uint_eq(mcp_watch_get_expiry(w), 110 * MS);
  /* Changes keep coming: the quiet window moves, max_delay does not. */
  for (mcp_tstamp t = 60 * MS; t < 260 * MS; t += 50 * MS) {
    put_at(st, "a", t);
    mcp_watch_note(w, t);
    ck_assert_int_eq(mcp_watch_ready(w, t), 0);
  }
  ck_assert_uint_eq(mcp_watch_get_expiry(w), 10 * MS + 250 * MS);
  ck_assert_int_eq(mcp_watch_ready(w, 259 * MS), 0);
  ck_assert_int_eq(mcp_watch_ready(w, 260 * MS), 1);
  /* Due at the time last noted: no deadline in the past for a timer to
   * spin on. */
  mcp_watch_note(w, 260 * MS);
  ck_assert_uint_eq(mcp_watch_get_expiry(w), MCP_TSTAMP_MAX);
  ck_assert_int_eq(take(w, 260 * MS, &s, &full), 1);
  mcp_watch_del(w);
  mcp_store_del(st);
}
END_TEST

/* mcp_watch_ready() reads only: asking it does not start the max_delay
 * clock (a change not noted counts as seen now); mcp_watch_note() does,
 * once per change. */
START_TEST(test_watch_ready_reads_only_and_note_starts_max_delay) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "A", 0);
  mcp_watch *w = watch_new(st, 100 * MS, 120 * MS);
  seen s;
  int full;
  take(w, 0, &s, &full);
  for (mcp_tstamp t = 10 * MS; t <= 210 * MS; t += 40 * MS) {
    put_at(st, "a", t);
    ck_assert_int_eq(mcp_watch_ready(w, t), 0);
    ck_assert_uint_eq(mcp_watch_get_expiry(w), t + 100 * MS);
  }
  mcp_watch_note(w, 210 * MS);
  mcp_watch_note(w, 220 * MS); /* seen already: no effect */
  put_at(st, "a", 250 * MS);
  ck_assert_uint_eq(mcp_watch_get_expiry(w), 210 * MS + 120 * MS);
  ck_assert_int_eq(mcp_watch_ready(w, 329 * MS), 0);
  ck_assert_int_eq(mcp_watch_ready(w, 330 * MS), 1);
  /* A take ends the change: the next one is noted afresh. */
  take(w, 330 * MS, &s, &full);
  ck_assert_int_eq(mcp_watch_changed(w), 0);
  mcp_watch_note(w, 340 * MS); /* nothing waits: nothing noted */
  put_at(st, "a", 350 * MS);
  ck_assert_uint_eq(mcp_watch_get_expiry(w), 450 * MS);
  mcp_watch_del(w);
  mcp_store_del(st);
}
END_TEST

/* Bodies of every size come back whole, with their type: the empty one
 * (no value field), a one-byte length and a two-byte length. */
START_TEST(test_watch_items_carry_type_and_body_of_any_size) {
  mcp_store *st = th_store(NULL);
  static char big[300];
  memset(big, 'b', sizeof(big) - 1);
  mcp_resource r = th_res("empty", "v1", NULL);
  ck_assert_int_eq(mcp_store_upsert(st, COLL, &r, 0), 1);
  th_put(st, COLL, "small", "v1", "S", 0);
  th_put(st, COLL, "big", "v1", big, 0);
  mcp_watch *w = watch_new(st, 0, 0);
  mcp_item it;
  ck_assert_int_eq(mcp_watch_get(w, "empty", &it), 1);
  ck_assert_str_eq(it.type_url, "type.googleapis.com/test.Body");
  ck_assert_ptr_null(it.body);
  ck_assert_uint_eq(it.body_len, 0);
  ck_assert_int_eq(mcp_watch_get(w, "small", &it), 1);
  ck_assert_str_eq(it.type_url, "type.googleapis.com/test.Body");
  ck_assert_uint_eq(it.body_len, 1);
  ck_assert_int_eq(it.body[0], 'S');
  ck_assert_int_eq(mcp_watch_get(w, "big", &it), 1);
  ck_assert_str_eq(it.type_url, "type.googleapis.com/test.Body");
  ck_assert_uint_eq(it.body_len, strlen(big));
  ck_assert_int_eq(memcmp(it.body, big, it.body_len), 0);
  mcp_watch_del(w);
  mcp_store_del(st);
}
END_TEST

/* A watch looks for its collection until it exists (a first change that
 * fails leaves none behind) and then keeps it. */
START_TEST(test_watch_finds_its_collection_after_a_failed_first_change) {
  for (long fail = 2; fail < 12; ++fail) {
    th_mem m;
    th_mem_init(&m, 0);
    mcp_store *st = th_store(&m.mem);
    mcp_watch *w = watch_new(st, 0, 0);
    ck_assert_int_eq(mcp_watch_ready(w, 0), 1);
    m.count = 0;
    m.fail_at = fail;
    m.sticky = 1;
    mcp_resource r = th_res("a", "v1", "A");
    int rv = mcp_store_upsert(st, COLL, &r, 1);
    ck_assert(rv == 1 || rv == MCP_ERR_NOMEM);
    ck_assert_int_eq(mcp_watch_exists(w), rv == 1);
    m.fail_at = 0;
    ck_assert_int_ge(mcp_store_upsert(st, COLL, &r, 2), 0);
    tally t = {0};
    int full;
    ck_assert_int_eq(mcp_watch_take(w, 2, count, &t, &full), 1);
    ck_assert_int_eq(full, 1);
    th_put(st, COLL, "b", "v1", "B", 3);
    ck_assert_int_eq(mcp_watch_ready(w, 3), 1);
    memset(&t, 0, sizeof(t));
    ck_assert_int_eq(mcp_watch_take(w, 3, count, &t, &full), 1);
    ck_assert_int_eq(full, 0);
    mcp_watch_del(w);
    mcp_store_del(st);
    ck_assert_int_eq(m.live, 0);
  }
}
END_TEST

START_TEST(test_watch_skip_moves_without_reporting) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "A", 0);
  th_put(st, COLL, "b", "v1", "B", 0);
  mcp_watch *w = watch_new(st, 0, 0);
  mcp_watch_skip(w, 0);
  ck_assert_int_eq(mcp_watch_changed(w), 0);
  ck_assert_uint_eq(mcp_watch_generation(w), mcp_store_generation(st, COLL));
  th_put(st, COLL, "b", "v2", "B2", 1);
  seen s;
  int full;
  ck_assert_int_eq(take(w, 1, &s, &full), 1);
  ck_assert_int_eq(full, 0);
  ck_assert_str_eq(s.names[0], "b");
  /* Skipped while absent: its appearance is a whole state. */
  mcp_watch *w2 = NULL;
  ck_assert_int_eq(mcp_watch_new(&w2, st, "later", NULL, NULL), 0);
  mcp_watch_skip(w2, 1);
  ck_assert_int_eq(mcp_watch_changed(w2), 0);
  th_put(st, "later", "x", "v1", "X", 2);
  ck_assert_int_eq(mcp_watch_changed(w2), 1);
  ck_assert_int_eq(mcp_watch_take(w2, 2, record, &s, &full), 1);
  ck_assert_int_eq(full, 1);
  mcp_watch_del(w2);
  mcp_watch_del(w);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_watch_get_and_foreach_do_not_move_the_watch) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "A", 0);
  th_put(st, COLL, "b", "v1", "B", 0);
  mcp_watch *w = watch_new(st, 0, 0);
  mcp_item it;
  ck_assert_int_eq(mcp_watch_get(w, "b", &it), 1);
  ck_assert_str_eq(it.name, "b");
  ck_assert_uint_eq(it.body_len, 1);
  ck_assert_int_eq(it.body[0], 'B');
  ck_assert_int_eq(mcp_watch_get(w, "zz", &it), 0);
  ck_assert_int_eq(mcp_store_delete(st, COLL, "b", 1), 1);
  ck_assert_int_eq(mcp_watch_get(w, "b", &it), 0);
  seen s = {0};
  ck_assert_int_eq(mcp_watch_foreach(w, record, &s), 0);
  ck_assert_int_eq(s.n, 1);
  ck_assert_int_eq(mcp_watch_changed(w), 1); /* still never taken */
  mcp_watch_del(w);
  mcp_store_del(st);
}
END_TEST

static int fail_at_second(const mcp_item *it, void *ud) {
  (void)it;
  return ++*(int *)ud == 2 ? MCP_ERR_NOMEM : 0;
}

START_TEST(test_watch_take_that_fails_does_not_move) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "A", 0);
  th_put(st, COLL, "b", "v1", "B", 0);
  mcp_watch *w = watch_new(st, 0, 0);
  int calls = 0, full;
  ck_assert_int_eq(mcp_watch_take(w, 0, fail_at_second, &calls, &full),
                   MCP_ERR_NOMEM);
  ck_assert_int_eq(mcp_watch_changed(w), 1);
  seen s;
  ck_assert_int_eq(take(w, 0, &s, &full), 2);
  ck_assert_int_eq(full, 1);
  mcp_watch_del(w);
  mcp_store_del(st);
}
END_TEST

/* ---- message builder ---- */

static int build_from(const mcp_item *it, void *ud) {
  mcp_msg_builder *b = ud;
  mcp_msg_builder_len_field(b, 1, it->name, strlen(it->name));
  mcp_msg_builder_key(b, 2, 2);
  mcp_msg_builder_varint(b, it->body_len);
  mcp_msg_builder_body(b, it);
  return 0;
}

START_TEST(test_msg_builder_shares_stored_bodies_and_outlives_the_store) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "BODY-A", 0);
  mcp_watch *w = watch_new(st, 0, 0);
  mcp_msg_builder *b = NULL;
  ck_assert_int_eq(mcp_msg_builder_new(&b, NULL), 0);
  mcp_msg_builder_bytes(b, "\x08\x01", 2);
  int full;
  ck_assert_int_eq(mcp_watch_take(w, 0, build_from, b, &full), 1);
  size_t want = 2 + 3 + 2 + 6;
  ck_assert_uint_eq(mcp_msg_builder_len(b), want);
  mcp_msg *msg = NULL;
  ck_assert_int_eq(mcp_msg_builder_finish(b, "lbl", &msg), 0);
  ck_assert_uint_eq(mcp_msg_builder_len(b), 0); /* reset for the next */
  mcp_watch_del(w);
  mcp_store_del(st); /* the message keeps the body alive */
  ck_assert_uint_eq(mcp_msg_len(msg), want);
  ck_assert_str_eq(mcp_msg_collection(msg), "lbl");
  uint8_t flat[64];
  mcp_msg_flatten(msg, flat);
  ck_assert_int_eq(memcmp(flat, "\x08\x01\x0a\x01" "a\x12\x06" "BODY-A", want),
                   0);
  mcp_msg_free(msg);
  mcp_msg_builder_del(b);
}
END_TEST

START_TEST(test_msg_builder_out_of_memory_produces_nothing) {
  for (long fail = 1; fail < 8; ++fail) {
    th_mem m;
    th_mem_init(&m, fail);
    mcp_msg_builder *b = NULL;
    if (mcp_msg_builder_new(&b, &m.mem) != 0) {
      continue;
    }
    char big[1000];
    memset(big, 'x', sizeof(big));
    mcp_msg_builder_bytes(b, big, sizeof(big));
    mcp_msg_builder_bytes(b, big, sizeof(big));
    mcp_msg *msg = NULL;
    int rv = mcp_msg_builder_finish(b, NULL, &msg);
    if (rv == 0) {
      ck_assert_uint_eq(mcp_msg_len(msg), 2000);
      mcp_msg_free(msg);
    } else {
      ck_assert_int_eq(rv, MCP_ERR_NOMEM);
      ck_assert_ptr_null(msg);
    }
    mcp_msg_builder_del(b);
  }
}
END_TEST

START_TEST(test_msg_builder_snapshot_is_shared_by_messages_and_outlives_the_store) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "BODY-A", 0);
  mcp_watch *w = watch_new(st, 0, 0);
  mcp_msg_builder *b = NULL;
  ck_assert_int_eq(mcp_msg_builder_new(&b, NULL), 0);
  int full;
  ck_assert_int_eq(mcp_watch_take(w, 0, build_from, b, &full), 1);
  mcp_snap *sn = NULL;
  ck_assert_int_eq(mcp_msg_builder_freeze(b, &sn), 0);
  ck_assert_uint_eq(mcp_msg_builder_len(b), 0); /* reset */
  static const char frozen[] = "\x0a\x01" "a\x12\x06" "BODY-A";
  size_t fl = sizeof(frozen) - 1;
  ck_assert_uint_eq(mcp_snap_len(sn), fl);
  /* Two messages share it: one with bytes of its own before it. */
  mcp_msg *m1 = NULL, *m2 = NULL;
  mcp_msg_builder_bytes(b, "\x08\x02", 2);
  mcp_msg_builder_snap(b, sn);
  ck_assert_int_eq(mcp_msg_builder_finish(b, NULL, &m1), 0);
  mcp_msg_builder_snap(b, sn);
  ck_assert_int_eq(mcp_msg_builder_finish(b, NULL, &m2), 0);
  mcp_snap_unref(sn); /* the messages hold it */
  mcp_watch_del(w);
  mcp_store_del(st); /* and it holds the stored body */
  uint8_t flat[64];
  ck_assert_uint_eq(mcp_msg_len(m1), 2 + fl);
  mcp_msg_flatten(m1, flat);
  ck_assert_int_eq(memcmp(flat, "\x08\x02", 2), 0);
  ck_assert_int_eq(memcmp(flat + 2, frozen, fl), 0);
  ck_assert_uint_eq(mcp_msg_len(m2), fl);
  mcp_msg_flatten(m2, flat);
  ck_assert_int_eq(memcmp(flat, frozen, fl), 0);
  mcp_msg_free(m1);
  mcp_msg_free(m2);
  mcp_msg_builder_del(b);
}
END_TEST

START_TEST(test_msg_builder_freeze_refuses_nesting_and_out_of_memory) {
  mcp_msg_builder *b = NULL;
  ck_assert_int_eq(mcp_msg_builder_new(&b, NULL), 0);
  mcp_snap *sn = NULL, *nested = NULL;
  mcp_msg_builder_bytes(b, "xy", 2);
  ck_assert_int_eq(mcp_msg_builder_freeze(b, &sn), 0);
  mcp_msg_builder_snap(b, sn);
  ck_assert_int_eq(mcp_msg_builder_freeze(b, &nested),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(nested);
  ck_assert_uint_eq(mcp_msg_builder_len(b), 0); /* reset either way */
  mcp_snap_unref(sn);
  mcp_snap_unref(NULL);
  mcp_msg_builder_del(b);
  for (long fail = 1; fail < 8; ++fail) {
    th_mem m;
    th_mem_init(&m, fail);
    if (mcp_msg_builder_new(&b, &m.mem) != 0) {
      continue;
    }
    char big[1000];
    memset(big, 'x', sizeof(big));
    mcp_msg_builder_bytes(b, big, sizeof(big));
    mcp_msg_builder_bytes(b, big, sizeof(big));
    sn = NULL;
    int rv = mcp_msg_builder_freeze(b, &sn);
    if (rv == 0) {
      ck_assert_uint_eq(mcp_snap_len(sn), 2000);
      mcp_snap_unref(sn);
    } else {
      ck_assert_int_eq(rv, MCP_ERR_NOMEM);
      ck_assert_ptr_null(sn);
    }
    mcp_msg_builder_del(b);
    ck_assert_int_eq(m.live, 0);
  }
}
END_TEST

/* ---- stream driver, with a small scripted session ---- */

typedef struct script {
  int to_send;       /* messages next() still gives */
  int recv_error;    /* recv returns it */
  int next_error;    /* next returns it */
  int ending;        /* end() says so */
  mcp_tstamp expiry; /* get_expiry() */
  int expiry_moves;  /* handle_expiry moves the deadline */
  int expired, received, half_closed, *deleted;
  int iov_calls;   /* recv_iov() calls */
  size_t got_niov; /* the fragments of the last one */
  char got[32];    /* the bytes of the last message, either way */
} script;

static void s_got(script *s, const uint8_t *in, size_t len) {
  ck_assert_uint_lt(len, sizeof(s->got));
  memcpy(s->got, in ? (const char *)in : "", len);
  s->got[len] = '\0';
}

static int s_recv(void *sess, const uint8_t *in, size_t len, mcp_tstamp ts) {
  (void)ts;
  script *s = sess;
  s->received++;
  s_got(s, in, len);
  return s->recv_error;
}

static int s_recv_iov(void *sess, const mcp_iovec *iov, size_t niov,
                      mcp_tstamp ts) {
  (void)ts;
  script *s = sess;
  s->received++;
  s->iov_calls++;
  s->got_niov = niov;
  s->got[0] = '\0';
  for (size_t i = 0; i < niov; ++i) {
    ck_assert_uint_lt(strlen(s->got) + iov[i].len, sizeof(s->got));
    strncat(s->got, (const char *)iov[i].base, iov[i].len);
  }
  return s->recv_error;
}

static int s_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  (void)ts;
  script *s = sess;
  if (s->next_error) {
    return s->next_error;
  }
  if (!s->to_send) {
    return 0;
  }
  s->to_send--;
  mcp_msg_builder *b;
  ck_assert_int_eq(mcp_msg_builder_new(&b, NULL), 0);
  mcp_msg_builder_bytes(b, "m", 1);
  ck_assert_int_eq(mcp_msg_builder_finish(b, NULL, pmsg), 0);
  mcp_msg_builder_del(b);
  return 1;
}

static mcp_tstamp s_get_expiry(const void *sess) {
  return ((const script *)sess)->expiry;
}

static int s_handle_expiry(void *sess, mcp_tstamp ts) {
  script *s = sess;
  s->expired++;
  if (s->expiry_moves) {
    s->expiry = ts + 10 * MS;
  }
  return 0;
}

static int s_end(const void *sess, int *status, const char **details) {
  const script *s = sess;
  if (!s->ending) {
    return 0;
  }
  *status = 3;
  *details = "scheme must be k8s";
  return 1;
}

static void s_half_close(void *sess, mcp_tstamp ts) {
  (void)ts;
  ((script *)sess)->half_closed++;
}

static void s_del(void *sess) { ++*((script *)sess)->deleted; }

static mcp_stream_ops script_ops(unsigned flags) {
  mcp_stream_ops o = {"script",     flags, s_recv,       s_next,
                      s_get_expiry, s_handle_expiry,     s_end,
                      s_half_close, s_del,  NULL,         NULL};
  return o;
}

/* |mem| NULL: the C library. */
static mcp_stream *stream_new_mem(const mcp_stream_ops *ops, script *s,
                                  int *deleted, const mcp_mem *mem) {
  s->deleted = deleted;
  if (!s->expiry) {
    s->expiry = MCP_TSTAMP_MAX;
  }
  mcp_stream *st = NULL;
  ck_assert_int_eq(mcp_stream_new(&st, ops, s, mem, 0), 0);
  return st;
}

static mcp_stream *stream_new(const mcp_stream_ops *ops, script *s,
                              int *deleted) {
  return stream_new_mem(ops, s, deleted, NULL);
}

#define PUMP(st, ts, can_send)                                               \
  mcp_stream_pump((st), (ts), (can_send), &msg, &status, &details)

START_TEST(test_stream_sends_one_message_per_pump_and_only_when_free) {
  mcp_stream_ops ops = script_ops(0);
  script s = {.to_send = 2};
  int deleted = 0, status = -1;
  const char *details = NULL;
  mcp_msg *msg = NULL;
  mcp_stream *st = stream_new(&ops, &s, &deleted);
  ck_assert_ptr_eq(mcp_stream_get_ops(st), &ops);
  ck_assert_ptr_eq(mcp_stream_session(st), &s);
  ck_assert_int_eq(PUMP(st, 0, 0), MCP_STREAM_IDLE);
  ck_assert_int_eq(s.to_send, 2);
  ck_assert_int_eq(PUMP(st, 0, 1), MCP_STREAM_SEND);
  ck_assert_uint_eq(mcp_msg_len(msg), 1);
  mcp_msg_free(msg);
  ck_assert_int_eq(PUMP(st, 0, 1), MCP_STREAM_SEND);
  mcp_msg_free(msg);
  ck_assert_int_eq(PUMP(st, 0, 1), MCP_STREAM_IDLE);
  ck_assert_ptr_null(msg);
  ck_assert_uint_eq(mcp_stream_sent(st), 2);
  mcp_stream_recv(st, (const uint8_t *)"x", 1, 0);
  ck_assert_uint_eq(mcp_stream_received(st), 1);
  ck_assert_int_eq(s.received, 1);
  mcp_stream_del(st);
  ck_assert_int_eq(deleted, 1);
}
END_TEST

/* The initial-sync slot's question (MCP_DEF_INITIAL_SYNC): ops without
 * initial_sent() have nothing to wait for; with it, its answer, asked
 * read-only of the session. */
static int s_initial_sent(const void *sess, mcp_tstamp ts) {
  (void)ts;
  return ((const script *)sess)->to_send == 0;
}

START_TEST(test_stream_initial_sent_is_the_sessions_answer_or_at_once) {
  mcp_stream_ops ops = script_ops(0);
  script s = {.to_send = 1};
  int deleted = 0, status = -1;
  const char *details = NULL;
  mcp_msg *msg = NULL;
  mcp_stream *st = stream_new(&ops, &s, &deleted);
  ck_assert_int_eq(mcp_stream_initial_sent(st, 0), 1); /* no op: at once */
  mcp_stream_del(st);
  ops.initial_sent = s_initial_sent;
  s = (script){.to_send = 1};
  st = stream_new(&ops, &s, &deleted);
  ck_assert_int_eq(mcp_stream_initial_sent(st, 0), 0);
  /* Asking moves nothing. */
  ck_assert_int_eq(mcp_stream_initial_sent(st, 0), 0);
  ck_assert_int_eq(PUMP(st, 0, 1), MCP_STREAM_SEND);
  mcp_msg_free(msg);
  ck_assert_int_eq(mcp_stream_initial_sent(st, 0), 1);
  mcp_stream_del(st);
  ck_assert_int_eq(deleted, 2);
}
END_TEST

START_TEST(test_stream_recv_iov_joins_for_a_session_that_reads_one_buffer) {
  static const mcp_iovec three[] = {{(const uint8_t *)"ab", 2},
                                    {(const uint8_t *)"", 0},
                                    {(const uint8_t *)"cde", 3}};
  mcp_stream_ops ops = script_ops(0);
  script s = {0};
  int deleted = 0, status = -1;
  const char *details = NULL;
  mcp_msg *msg = NULL;
  th_mem m;
  th_mem_init(&m, 0);
  mcp_stream *st = stream_new_mem(&ops, &s, &deleted, &m.mem);
  ck_assert_int_eq(mcp_stream_takes_iov(st), 0);
  mcp_stream_recv_iov(st, three, 3, 0);
  ck_assert_int_eq(s.received, 1);
  ck_assert_str_eq(s.got, "abcde");
  ck_assert_int_eq(m.live, 1); /* the stream: the joined copy is gone */
  /* Out of memory for the copy: the stream ends with it. */
  m.fail_at = m.count + 1;
  mcp_stream_recv_iov(st, three, 3, 0);
  ck_assert_int_eq(s.received, 1);
  ck_assert_int_eq(PUMP(st, 0, 1), MCP_STREAM_END);
  mcp_stream_del(st);
  ck_assert_int_eq(m.live, 0);
  /* A session that reads fragments gets them as they are; one fragment
   * goes to recv(). */
  ops.recv_iov = s_recv_iov;
  s = (script){0};
  st = stream_new(&ops, &s, &deleted);
  ck_assert_int_eq(mcp_stream_takes_iov(st), 1);
  mcp_stream_recv_iov(st, three, 3, 0);
  ck_assert_int_eq(s.iov_calls, 1);
  ck_assert_uint_eq(s.got_niov, 3);
  ck_assert_str_eq(s.got, "abcde");
  mcp_stream_recv_iov(st, three + 2, 1, 0);
  ck_assert_int_eq(s.iov_calls, 1);
  ck_assert_int_eq(s.received, 2);
  ck_assert_str_eq(s.got, "cde");
  mcp_stream_del(st);
}
END_TEST

START_TEST(test_stream_session_error_ends_at_once_with_its_status) {
  mcp_stream_ops ops = script_ops(0);
  script s = {.recv_error = MCP_ERR_MALFORMED, .to_send = 1};
  int deleted = 0, status = -1;
  const char *details = NULL;
  mcp_msg *msg = NULL;
  mcp_stream *st = stream_new(&ops, &s, &deleted);
  mcp_stream_recv(st, (const uint8_t *)"x", 1, 0);
  ck_assert_uint_eq(mcp_stream_get_expiry(st), 0);
  /* Also with a send in flight: a broken peer is not waited for. */
  ck_assert_int_eq(PUMP(st, 0, 0), MCP_STREAM_END);
  ck_assert_int_eq(status, 3);
  ck_assert_str_eq(details, mcp_strerror(MCP_ERR_MALFORMED));
  /* What arrives after is not read. */
  mcp_stream_recv(st, (const uint8_t *)"x", 1, 0);
  ck_assert_int_eq(s.received, 1);
  mcp_stream_del(st);

  script s2 = {.next_error = MCP_ERR_LIMIT};
  st = stream_new(&ops, &s2, &deleted);
  ck_assert_int_eq(PUMP(st, 0, 1), MCP_STREAM_END);
  ck_assert_int_eq(status, 8);
  mcp_stream_del(st);
  ck_assert_int_eq(deleted, 2);
}
END_TEST

START_TEST(test_stream_session_end_waits_for_the_send_in_flight) {
  mcp_stream_ops ops = script_ops(MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE);
  script s = {.to_send = 1, .ending = 1};
  int deleted = 0, status = -1;
  const char *details = NULL;
  mcp_msg *msg = NULL;
  mcp_stream *st = stream_new(&ops, &s, &deleted);
  ck_assert_int_eq(PUMP(st, 0, 0), MCP_STREAM_IDLE);
  /* What it still has to say goes out before the ending. */
  ck_assert_int_eq(PUMP(st, 0, 1), MCP_STREAM_SEND);
  mcp_msg_free(msg);
  ck_assert_int_eq(PUMP(st, 0, 0), MCP_STREAM_IDLE);
  ck_assert_int_eq(PUMP(st, 0, 1), MCP_STREAM_END);
  ck_assert_int_eq(status, 3);
  ck_assert_str_eq(details, "scheme must be k8s");
  mcp_stream_del(st);
}
END_TEST

START_TEST(test_stream_half_close_ends_with_ok_unless_kept_open) {
  mcp_stream_ops ops = script_ops(0);
  script s = {.to_send = 1};
  int deleted = 0, status = -1;
  const char *details = NULL;
  mcp_msg *msg = NULL;
  mcp_stream *st = stream_new(&ops, &s, &deleted);
  mcp_stream_half_close(st, 0);
  mcp_stream_half_close(st, 0);
  ck_assert_int_eq(s.half_closed, 1);
  /* The answer still due goes out first. */
  ck_assert_int_eq(PUMP(st, 0, 1), MCP_STREAM_SEND);
  mcp_msg_free(msg);
  ck_assert_int_eq(PUMP(st, 0, 1), MCP_STREAM_END);
  ck_assert_int_eq(status, 0);
  mcp_stream_del(st);

  mcp_stream_ops kept = script_ops(MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE);
  script s2 = {0};
  st = stream_new(&kept, &s2, &deleted);
  mcp_stream_half_close(st, 0);
  ck_assert_int_eq(PUMP(st, 0, 1), MCP_STREAM_IDLE);
  mcp_stream_del(st);
}
END_TEST

START_TEST(test_stream_client_half_closes_after_its_first_message) {
  mcp_stream_ops ops = script_ops(MCP_STREAM_CLIENT_HALF_CLOSE_AFTER_FIRST |
                                  MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE);
  script s = {.to_send = 1};
  int deleted = 0, status = -1;
  const char *details = NULL;
  mcp_msg *msg = NULL;
  mcp_stream *st = stream_new(&ops, &s, &deleted);
  /* Not before the request went out. */
  ck_assert_int_eq(PUMP(st, 0, 1), MCP_STREAM_SEND);
  mcp_msg_free(msg);
  ck_assert_int_eq(PUMP(st, 0, 0), MCP_STREAM_IDLE);
  ck_assert_int_eq(PUMP(st, 0, 1), MCP_STREAM_HALF_CLOSE);
  ck_assert_int_eq(PUMP(st, 0, 1), MCP_STREAM_IDLE);
  mcp_stream_del(st);
}
END_TEST

START_TEST(test_stream_timers_run_when_due_and_never_spin) {
  mcp_stream_ops ops = script_ops(0);
  script s = {.expiry = 100 * MS, .expiry_moves = 1};
  int deleted = 0, status = -1;
  const char *details = NULL;
  mcp_msg *msg = NULL;
  mcp_stream *st = stream_new(&ops, &s, &deleted);
  ck_assert_uint_eq(mcp_stream_get_expiry(st), 100 * MS);
  ck_assert_int_eq(PUMP(st, 99 * MS, 1), MCP_STREAM_IDLE);
  ck_assert_int_eq(s.expired, 0);
  ck_assert_int_eq(PUMP(st, 100 * MS, 1), MCP_STREAM_IDLE);
  ck_assert_int_eq(s.expired, 1);
  ck_assert_uint_eq(mcp_stream_get_expiry(st), 110 * MS);

  /* A deadline that stays in the past: at most one run per millisecond. */
  s.expiry_moves = 0;
  s.expiry = 200 * MS;
  ck_assert_int_eq(PUMP(st, 200 * MS, 0), MCP_STREAM_IDLE);
  ck_assert_int_eq(s.expired, 2);
  ck_assert_uint_eq(mcp_stream_get_expiry(st), 201 * MS);
  ck_assert_int_eq(PUMP(st, 200 * MS + 10, 0), MCP_STREAM_IDLE);
  ck_assert_int_eq(s.expired, 2);
  ck_assert_int_eq(PUMP(st, 201 * MS, 0), MCP_STREAM_IDLE);
  ck_assert_int_eq(s.expired, 3);
  mcp_stream_del(st);
}
END_TEST

static void waker(mcp_stream *st, void *ud) {
  mcp_stream **woken = ud;
  *woken = st;
}

START_TEST(test_stream_wake_calls_the_transports_waker_only) {
  mcp_stream_ops ops = script_ops(0);
  script s = {0};
  int deleted = 0;
  mcp_stream *st = stream_new(&ops, &s, &deleted);
  mcp_stream_wake(st); /* no waker: nothing */
  mcp_stream *woken = NULL;
  mcp_stream_set_waker(st, waker, &woken);
  mcp_stream_wake(st);
  ck_assert_ptr_eq(woken, st);
  ck_assert_int_eq(s.expired + s.received, 0); /* the session was not run */
  mcp_stream_del(st);
}
END_TEST

START_TEST(test_stream_new_frees_the_session_when_it_fails) {
  mcp_stream_ops ops = script_ops(0);
  script s = {0};
  int deleted = 0;
  s.deleted = &deleted;
  th_mem m;
  th_mem_init(&m, 1);
  mcp_stream *st = NULL;
  ck_assert_int_eq(mcp_stream_new(&st, &ops, &s, &m.mem, 0), MCP_ERR_NOMEM);
  ck_assert_ptr_null(st);
  ck_assert_int_eq(deleted, 1);
}
END_TEST

static int open_none(void *ud, const mcp_peer_info *peer, mcp_tstamp ts,
                     mcp_stream **pst) {
  (void)ud;
  (void)peer;
  (void)ts;
  (void)pst;
  return MCP_ERR_UNSUPPORTED;
}

START_TEST(test_service_defs_check_is_one_rule_for_every_transport) {
  static char long_method[MCP_SERVICE_METHOD_MAX + 2];
  memset(long_method, 'm', sizeof(long_method) - 1);
  long_method[0] = '/';
  const char *reserved[] = {"/istio.mcp.v1alpha1.ResourceSource/"
                            "EstablishResourceStream"};
  mcp_service_def d[2] = {{"/a.B/C", open_none, NULL, 0},
                          {"/a.B/D", open_none, NULL, 0}};
  ck_assert_int_eq(mcp_service_defs_check(d, 2, reserved, 1), 0);
  ck_assert_int_eq(mcp_service_defs_check(NULL, 0, NULL, 0), 0);
  ck_assert_int_eq(mcp_service_defs_check(NULL, 1, NULL, 0),
                   MCP_ERR_INVALID_ARGUMENT);
  d[1].method = "/a.B/C"; /* twice */
  ck_assert_int_eq(mcp_service_defs_check(d, 2, NULL, 0),
                   MCP_ERR_INVALID_ARGUMENT);
  d[1].method = "a.B/D"; /* not a path */
  ck_assert_int_eq(mcp_service_defs_check(d, 2, NULL, 0),
                   MCP_ERR_INVALID_ARGUMENT);
  d[1].method = NULL;
  ck_assert_int_eq(mcp_service_defs_check(d, 2, NULL, 0),
                   MCP_ERR_INVALID_ARGUMENT);
  d[1].method = long_method;
  ck_assert_int_eq(mcp_service_defs_check(d, 2, NULL, 0),
                   MCP_ERR_INVALID_ARGUMENT);
  long_method[MCP_SERVICE_METHOD_MAX] = '\0'; /* exactly the limit */
  ck_assert_int_eq(mcp_service_defs_check(d, 2, NULL, 0), 0);
  d[1].method = reserved[0];
  ck_assert_int_eq(mcp_service_defs_check(d, 2, reserved, 1),
                   MCP_ERR_INVALID_ARGUMENT);
  d[1].method = "/a.B/D";
  d[1].open = NULL;
  ck_assert_int_eq(mcp_service_defs_check(d, 2, NULL, 0),
                   MCP_ERR_INVALID_ARGUMENT);
}
END_TEST

/* ---- the exported wire reader and UTF-8 check ---- */

START_TEST(test_wire_varint_reads_ten_bytes_and_refuses_bits_beyond_64) {
  static const uint8_t max[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
  static const uint8_t over[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
  static const uint8_t eleven[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
  static const uint8_t two[] = {0xac, 0x02, 0x07};
  const uint8_t *p = max;
  uint64_t v = 0;
  ck_assert_int_eq(mcp_wire_varint(&p, max + sizeof max, &v), 0);
  ck_assert(v == UINT64_MAX);
  ck_assert_ptr_eq(p, max + sizeof max);
  p = two;
  ck_assert_int_eq(mcp_wire_varint(&p, two + sizeof two, &v), 0);
  ck_assert_uint_eq(v, 300);
  ck_assert_ptr_eq(p, two + 2);
  p = over;
  ck_assert_int_eq(mcp_wire_varint(&p, over + sizeof over, &v), MCP_ERR_MALFORMED);
  p = eleven;
  ck_assert_int_eq(mcp_wire_varint(&p, eleven + sizeof eleven, &v), MCP_ERR_MALFORMED);
  p = two; /* truncated: the end cuts the first varint */
  ck_assert_int_eq(mcp_wire_varint(&p, two + 1, &v), MCP_ERR_MALFORMED);
}
END_TEST

/* One field read with mcp_wire_field_next(): |want| the result and, for
 * 1, the field and where |w| stops. */
static void field_is(const uint8_t *in, size_t n, int want, uint32_t num,
                     int wt, uint64_t v, const uint8_t *data, size_t len,
                     size_t stop) {
  mcp_wire w = {in, in + n};
  mcp_wire_field f;
  memset(&f, 0xa5, sizeof f);
  mcp_wire_field before = f;
  ck_assert_int_eq(mcp_wire_field_next(&w, &f), want);
  if (want == 0) {
    ck_assert(memcmp(&f, &before, sizeof f) == 0); /* untouched */
  }
  if (want != 1) {
    return;
  }
  ck_assert_uint_eq(f.num, num);
  ck_assert_int_eq(f.wt, wt);
  ck_assert(f.v == v);
  ck_assert_ptr_eq(f.data, data);
  ck_assert_uint_eq(f.len, len);
  ck_assert_ptr_eq(w.p, in + stop);
}

START_TEST(test_wire_field_next_reads_each_wire_type_and_refuses_bad_bytes) {
  static const uint8_t varint[] = {0x08, 0x96, 0x01};
  static const uint8_t len[] = {0x12, 0x03, 'a', 'b', 'c', 0x08};
  static const uint8_t empty_len[] = {0x7a, 0x00};  /* field 15 */
  static const uint8_t tag16[] = {0x80, 0x01, 0x05}; /* two-byte tag */
  static const uint8_t max_field[] = {0xf8, 0xff, 0xff, 0xff, 0x0f, 0x01};
  static const uint8_t ten[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                0xff, 0xff, 0xff, 0xff, 0x01};
  static const uint8_t i64[] = {0x09, 1, 2, 3, 4, 5, 6, 7, 8};
  static const uint8_t i32[] = {0x15, 1, 2, 3, 4};
  field_is(varint, sizeof varint, 1, 1, MCP_WT_VARINT, 150, NULL, 0, 3);
  field_is(len, sizeof len, 1, 2, MCP_WT_LEN, 0, len + 2, 3, 5);
  field_is(empty_len, sizeof empty_len, 1, 15, MCP_WT_LEN, 0, empty_len + 2,
           0, 2);
  field_is(tag16, sizeof tag16, 1, 16, MCP_WT_VARINT, 5, NULL, 0, 3);
  field_is(max_field, sizeof max_field, 1, 0x1fffffff, MCP_WT_VARINT, 1,
           NULL, 0, 6);
  field_is(ten, sizeof ten, 1, 1, MCP_WT_VARINT, UINT64_MAX, NULL, 0, 11);
  field_is(i64, sizeof i64, 1, 1, MCP_WT_I64, 0, NULL, 0, 9);
  field_is(i32, sizeof i32, 1, 2, MCP_WT_I32, 0, NULL, 0, 5);
  field_is(varint, 0, 0, 0, 0, 0, NULL, 0, 0); /* the end */
  /* A tag and a length in five bytes, longer than they need: taken, as
   * protobuf-c takes them. */
  static const uint8_t tag5[] = {0x8a, 0x80, 0x80, 0x80, 0x00, 0x01, 'x'};
  static const uint8_t len5[] = {0x0a, 0x81, 0x80, 0x80, 0x80, 0x00, 'x'};
  field_is(tag5, sizeof tag5, 1, 1, MCP_WT_LEN, 0, tag5 + 6, 1, 7);
  field_is(len5, sizeof len5, 1, 1, MCP_WT_LEN, 0, len5 + 6, 1, 7);

  static const uint8_t past_end[] = {0x12, 0x05, 'a'};
  static const uint8_t huge_len[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0xff,
                                     0xff, 0xff, 0xff, 0xff, 0x01};
  static const uint8_t field0[] = {0x00, 0x01};
  static const uint8_t field_2_29[] = {0x80, 0x80, 0x80, 0x80, 0x10, 0x01};
  static const uint8_t group[] = {0x0b, 0x0c};
  static const uint8_t wt6[] = {0x0e, 0x01};
  static const uint8_t cut_varint[] = {0x08, 0x80};
  static const uint8_t cut_i64[] = {0x09, 1, 2, 3};
  static const uint8_t eleven[] = {0x08, 0x80, 0x80, 0x80, 0x80, 0x80,
                                   0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
  static const uint8_t beyond_64[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                      0xff, 0xff, 0xff, 0xff, 0x02};
  /* Six bytes for a tag or a length: protobuf-c refuses them (the first, a
   * field 439642321 of wire type 5, is what fuzz_source_session found
   * accepted in a request). */
  static const uint8_t tag6[] = {0x8d, 0x8d, 0x8d, 0x8d, 0x8d, 0x00, 0, 0, 0, 0};
  static const uint8_t tag6_len[] = {0x8a, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01, 'x'};
  static const uint8_t len6[] = {0x0a, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 'x'};
  static const uint8_t len6_16[] = {0x82, 0x01, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 'x'};
  const struct {
    const uint8_t *p;
    size_t n;
  } bad[] = {{past_end, sizeof past_end},     {huge_len, sizeof huge_len},
             {field0, sizeof field0},         {field_2_29, sizeof field_2_29},
             {group, sizeof group},           {wt6, sizeof wt6},
             {cut_varint, sizeof cut_varint}, {cut_varint, 1},
             {cut_i64, sizeof cut_i64},       {eleven, sizeof eleven},
             {beyond_64, sizeof beyond_64},   {tag6, sizeof tag6},
             {tag6_len, sizeof tag6_len},     {len6, sizeof len6},
             {len6_16, sizeof len6_16}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    field_is(bad[i].p, bad[i].n, MCP_ERR_MALFORMED, 0, 0, 0, NULL, 0, 0);
  }
}
END_TEST

/* Whether the inline reader answers as the exported one (no ck_assert
 * in its loop: each one writes to check's pipe). */
static int readers_agree(const uint8_t *in, size_t n) {
  size_t at;
  return wire_readers_agree(in, n, &at);
}

START_TEST(test_wire_field_next_answers_as_mcp_wire_next_on_any_bytes) {
  uint8_t buf[24];
  for (unsigned x = 0; x < 65536; ++x) { /* every two-byte input */
    buf[0] = (uint8_t)(x >> 8);
    buf[1] = (uint8_t)x;
    ck_assert_msg(readers_agree(buf, 1) && readers_agree(buf, 2),
                  "readers differ on %02x %02x", buf[0], buf[1]);
  }
  /* Random inputs over bytes that matter: small tags of every wire type,
   * continuation bytes, small lengths. */
  static const uint8_t alphabet[] = {0x08, 0x0a, 0x10, 0x12, 0x7a, 0x78,
                                     0x09, 0x0d, 0x0b, 0x80, 0xff, 0x01,
                                     0x02, 0x03, 0x00, 0x7f, 0x81, 0x05};
  uint32_t seed = 12345;
  for (int i = 0; i < 5000; ++i) {
    size_t n = 0;
    seed = seed * 1103515245u + 12345u;
    size_t len = (seed >> 16) % sizeof buf;
    while (n < len) {
      seed = seed * 1103515245u + 12345u;
      buf[n++] = alphabet[(seed >> 16) % sizeof alphabet];
    }
    ck_assert_msg(readers_agree(buf, n), "readers differ on input %d", i);
  }
}
END_TEST

START_TEST(test_base64_and_hex_take_both_alphabets_and_strict_refuses_what_is_not_canonical) {
  uint8_t out[16];
  /* Both alphabets, mixed: 0xfb 0xff 0xbf. */
  ck_assert_int_eq(mcp_base64_decode("+/-_", 4, out, 1), 3);
  ck_assert_int_eq(out[0], 0xfb);
  ck_assert_int_eq(out[1], 0xff);
  ck_assert_int_eq(out[2], 0xbf);
  ck_assert_int_eq(mcp_base64_decode("QQ==", 4, out, 1), 1);
  ck_assert_int_eq(out[0], 'A');
  ck_assert_int_eq(mcp_base64_decode("QQ", 2, out, 1), 1); /* no padding */
  ck_assert_int_eq(mcp_base64_decode("", 0, out, 1), 0);
  /* Either way: a character of neither alphabet, a length none has. */
  for (int strict = 0; strict < 2; strict++) {
    ck_assert_int_eq(mcp_base64_decode("Q!==", 4, out, strict), -1);
    ck_assert_int_eq(mcp_base64_decode("Q", 1, out, strict), -1);
    ck_assert_int_eq(mcp_base64_decode("QUJDR", 5, out, strict), -1);
  }
  /* Strict only: padding the group does not need, bits left over. */
  ck_assert_int_eq(mcp_base64_decode("QQ===", 5, out, 1), -1);
  ck_assert_int_eq(mcp_base64_decode("QQ=", 3, out, 1), -1);
  ck_assert_int_eq(mcp_base64_decode("QR==", 4, out, 1), -1);
  ck_assert_int_eq(mcp_base64_decode("QQ===", 5, out, 0), 1);
  ck_assert_int_eq(mcp_base64_decode("QR==", 4, out, 0), 1);
  ck_assert_int_eq(out[0], 'A');
  /* Hex digits, the other text encoding of the kit. */
  ck_assert_int_eq(mcp_hex_value('0'), 0);
  ck_assert_int_eq(mcp_hex_value('f'), 15);
  ck_assert_int_eq(mcp_hex_value('A'), 10);
  ck_assert_int_eq(mcp_hex_value('g'), -1);
  ck_assert_int_eq(mcp_hex_value('\0'), -1);
}
END_TEST

START_TEST(test_utf8_check_is_strict_and_nul_is_the_callers_choice) {
  const uint8_t ok[] = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
  ck_assert(mcp_utf8_valid(ok, sizeof ok - 1, 0));
  ck_assert_uint_eq(mcp_utf8_len(ok + 1, 2), 2);
  ck_assert_uint_eq(mcp_utf8_len(ok + 1, 1), 0); /* cut short */
  ck_assert_uint_eq(mcp_utf8_len(ok + 6, 4), 4);
  static const char *const bad[] = {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                                    "\xe2\x82", "\x80", "\xf8\x88\x80\x80\x80"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ck_assert_msg(!mcp_utf8_valid((const uint8_t *)bad[i], strlen(bad[i]), 1), "%zu", i);
    ck_assert_uint_eq(mcp_utf8_len((const uint8_t *)bad[i], strlen(bad[i])), 0);
  }
  /* The same at every offset of a run of ASCII, where the check reads
   * eight bytes at a time: any other byte goes to the strict check. */
  for (size_t at = 0; at <= 17; at++) {
    uint8_t b[40];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
      size_t l = strlen(bad[i]);
      memset(b, 'x', sizeof b);
      memcpy(b + at, bad[i], l);
      ck_assert_msg(!mcp_utf8_valid(b, at + l, 1), "%zu at %zu", i, at);
      ck_assert_msg(!mcp_utf8_valid(b, at + l + 9, 1), "%zu at %zu", i, at);
    }
    memset(b, 'x', sizeof b);
    memcpy(b + at, ok + 1, sizeof ok - 2);
    ck_assert_msg(mcp_utf8_valid(b, sizeof b, 1), "good at %zu", at);
    b[at + 3] = 0; /* inside the euro sign */
    ck_assert_msg(!mcp_utf8_valid(b, sizeof b, 1), "cut at %zu", at);
    memcpy(b + at, ok + 1, sizeof ok - 2);
    b[sizeof b - 1] = 0;
    ck_assert_msg(!mcp_utf8_valid(b, sizeof b, 0), "NUL, at %zu", at);
  }
  ck_assert(!mcp_utf8_valid((const uint8_t *)"a\0b", 3, 0));
  ck_assert(mcp_utf8_valid((const uint8_t *)"a\0b", 3, 1));
  ck_assert(mcp_utf8_valid(NULL, 0, 0));
  ck_assert(!mcp_utf8_valid(NULL, 1, 1));
}
END_TEST

START_TEST(test_buf_grows_through_the_allocator_and_keeps_its_bytes_when_it_cannot) {
  th_mem m;
  th_mem_init(&m, 0);
  mcp_buf b = {NULL, 0, 0, &m.mem};
  ck_assert_int_eq(mcp_buf_append(&b, NULL, 0), 0); /* nothing: no allocation */
  ck_assert_ptr_null(b.p);
  ck_assert_int_eq(m.count, 0);
  char x[300];
  memset(x, 'x', sizeof x);
  ck_assert_int_eq(mcp_buf_append(&b, "ab", 2), 0);
  ck_assert_int_eq(mcp_buf_append(&b, x, sizeof x), 0);
  ck_assert_uint_eq(b.len, 302);
  ck_assert_uint_ge(b.cap, 302);
  ck_assert_int_gt(m.count, 0); /* through the hook, not malloc */
  ck_assert(memcmp(b.p, "ab", 2) == 0 && b.p[301] == 'x');
  ck_assert_int_eq(mcp_buf_reserve(&b, b.cap - b.len), 0); /* room: no-op */
  /* Out of memory: an error, and what it held is untouched. */
  size_t cap = b.cap;
  m.fail_at = m.count + 1;
  ck_assert_int_eq(mcp_buf_append(&b, x, cap), MCP_ERR_NOMEM);
  ck_assert_uint_eq(b.len, 302);
  ck_assert_uint_eq(b.cap, cap);
  ck_assert(memcmp(b.p, "ab", 2) == 0);
  ck_assert_int_eq(mcp_buf_reserve(&b, SIZE_MAX - 10), MCP_ERR_NOMEM);
  m.fail_at = 0;
  mcp_buf_free(&b);
  ck_assert_ptr_null(b.p);
  ck_assert_uint_eq(b.len + b.cap, 0);
  ck_assert_int_eq(m.live, 0);
  ck_assert_ptr_eq(b.mem, &m.mem); /* usable again */
  /* NULL mem: the C library (mcp_mem_default). */
  mcp_buf c = {0};
  ck_assert_int_eq(mcp_buf_append(&c, "z", 1), 0);
  ck_assert_uint_eq(c.len, 1);
  mcp_buf_free(&c);
}
END_TEST

/* ---- a store's collections, read directly (what watches are made of) ---- */

START_TEST(test_coll_readers_see_generations_and_late_collections) {
  mcp_store *st = th_store(NULL);
  ck_assert_ptr_null(mcp_store_coll(st, COLL));
  ck_assert_uint_eq(mcp_store_coll_count(st), 0);
  th_put(st, COLL, "a", "v1", "A", 0);
  th_put(st, "other", "x", "v1", "X", 0);
  const mcp_coll *c = mcp_store_coll(st, COLL);
  ck_assert_ptr_nonnull(c);
  ck_assert_uint_eq(mcp_store_coll_count(st), 2);
  ck_assert_ptr_eq(mcp_store_coll_at(st, mcp_coll_index(c)), c);
  ck_assert_str_eq(mcp_coll_name(c), COLL);
  ck_assert_uint_eq(mcp_coll_size(c), 1);
  ck_assert_int_eq(mcp_coll_exists(c), 1);
  uint64_t g = mcp_coll_generation(c);
  th_put(st, COLL, "b", "v1", "B", 1);
  ck_assert_uint_gt(mcp_coll_generation(c), g);
  ck_assert_uint_eq(mcp_coll_size(c), 2);
  ck_assert_int_ge(mcp_store_remove_collection(st, COLL, 2), 0);
  ck_assert_ptr_eq(mcp_store_coll(st, COLL), c); /* same collection */
  ck_assert_int_eq(mcp_coll_exists(c), 0);
  ck_assert_uint_eq(mcp_coll_size(c), 0);
  mcp_store_del(st);
}
END_TEST

/* mcp_coll_changes() is the watch's difference; MCP_COLL_UNSEEN adds the
 * removals of what came and went since (MCP's source sends those). */
START_TEST(test_coll_changes_reports_unseen_removals_only_when_asked) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "A", 0);
  const mcp_coll *c = mcp_store_coll(st, COLL);
  uint64_t since = mcp_coll_generation(c);
  th_put(st, COLL, "b", "v1", "B", 1);
  ck_assert_int_eq(mcp_store_delete(st, COLL, "b", 2), 1);
  th_put(st, COLL, "a", "v2", "A2", 3);
  mcp_buf tu = {0};
  seen s;
  memset(&s, 0, sizeof(s));
  ck_assert_int_eq(mcp_coll_changes(c, since, 0, &tu, record, &s), 1);
  ck_assert_str_eq(s.names[0], "a");
  ck_assert_str_eq(s.bodies[0], "A2");
  memset(&s, 0, sizeof(s));
  ck_assert_int_eq(mcp_coll_changes(c, since, MCP_COLL_UNSEEN, &tu, record, &s),
                   2);
  ck_assert_str_eq(s.names[0], "b"); /* oldest change first */
  ck_assert_int_eq(s.removed[0], 1);
  ck_assert_str_eq(s.names[1], "a");
  memset(&s, 0, sizeof(s));
  ck_assert_int_eq(mcp_coll_foreach(c, &tu, record, &s), 1);
  mcp_item it;
  ck_assert_int_eq(mcp_coll_get(c, "a", NULL, &it), 1);
  ck_assert_ptr_null(it.type_url); /* no buffer: not copied */
  ck_assert_str_eq(it.version, "v2");
  ck_assert_int_eq(mcp_coll_get(c, "b", NULL, &it), 0); /* removed */
  ck_assert_int_eq(mcp_coll_get(c, "zz", NULL, &it), 0);
  mcp_buf_free(&tu);
  mcp_store_del(st);
}
END_TEST

static int stop_at_first(const mcp_item *it, void *ud) {
  MCP_UNUSED(it);
  ++*(int *)ud;
  return MCP_ERR_LIMIT;
}

START_TEST(test_coll_iteration_stops_at_a_negative_return) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "A", 0);
  th_put(st, COLL, "b", "v1", "B", 1);
  const mcp_coll *c = mcp_store_coll(st, COLL);
  int calls = 0;
  ck_assert_int_eq(mcp_coll_foreach(c, NULL, stop_at_first, &calls),
                   MCP_ERR_LIMIT);
  ck_assert_int_eq(mcp_coll_changes(c, 0, 0, NULL, stop_at_first, &calls),
                   MCP_ERR_LIMIT);
  ck_assert_int_eq(calls, 2);
  mcp_store_del(st);
}
END_TEST

/* The fast path frames exactly what the item callbacks would. */
typedef struct framed {
  mcp_msg_builder *b;
  size_t nres, nrem;
} framed;

static int frame_item(const mcp_item *it, void *ud) {
  framed *f = ud;
  if (it->removed) {
    mcp_msg_builder_len_field(f->b, 4, it->name, strlen(it->name));
    f->nrem++;
  } else {
    mcp_msg_builder_resource(f->b, 2, it);
    f->nres++;
  }
  return 0;
}

static void flat_of(mcp_msg_builder *b, uint8_t *out, size_t *len) {
  mcp_msg *m = NULL;
  ck_assert_int_eq(mcp_msg_builder_finish(b, "x", &m), 0);
  *len = mcp_msg_len(m);
  ck_assert_uint_le(*len, 4096);
  mcp_msg_flatten(m, out);
  mcp_msg_free(m);
}

START_TEST(test_msg_builder_coll_frames_what_the_callbacks_frame) {
  mcp_store *st = th_store(NULL);
  th_put(st, COLL, "a", "v1", "A", 0);
  const mcp_coll *c = mcp_store_coll(st, COLL);
  uint64_t since = mcp_coll_generation(c);
  th_put(st, COLL, "b", "v1", "BB", 1);
  th_put(st, COLL, "c", "v1", "CCC", 2);
  ck_assert_int_eq(mcp_store_delete(st, COLL, "b", 3), 1);
  ck_assert_int_eq(mcp_store_delete(st, COLL, "a", 4), 1);
  mcp_msg_builder *b = mcp_store_builder(st);
  ck_assert_ptr_nonnull(b);
  uint8_t want[4096], got[4096];
  size_t wl, gl;
  for (int all = 0; all <= 1; ++all) {
    framed f = {b, 0, 0};
    if (all) {
      mcp_coll_foreach(c, NULL, frame_item, &f);
    } else {
      mcp_coll_changes(c, since, MCP_COLL_UNSEEN, NULL, frame_item, &f);
    }
    flat_of(b, want, &wl);
    size_t nres = 0, nrem = 0;
    mcp_msg_builder_coll(b, c, all, since, MCP_COLL_UNSEEN, 2, 4, &nres, &nrem);
    flat_of(b, got, &gl);
    ck_assert_uint_eq(gl, wl);
    ck_assert_int_eq(memcmp(got, want, wl), 0);
    ck_assert_uint_eq(nres, f.nres);
    ck_assert_uint_eq(nrem, f.nrem);
    ck_assert_uint_eq(nres, 1);            /* c */
    ck_assert_uint_eq(nrem, all ? 0 : 2);  /* b (unseen) and a */
  }
  /* Field 3 is the stored framing: the stored bytes as they are. */
  mcp_item it;
  ck_assert_int_eq(mcp_coll_get(c, "c", NULL, &it), 1);
  const uint8_t *res;
  size_t rl;
  ck_assert_int_eq(mcp_item_resource(&it, &res, &rl), 0);
  mcp_msg_builder_resource(b, 3, &it);
  flat_of(b, got, &gl);
  ck_assert_uint_eq(gl, 1 + mcp_wire_varint_len(rl) + rl);
  ck_assert_uint_eq(got[0], 3 << 3 | MCP_WT_LEN);
  ck_assert_int_eq(memcmp(got + gl - rl, res, rl), 0);
  mcp_store_del(st);
}
END_TEST

START_TEST(test_msg_builder_fail_and_reserve) {
  mcp_msg_builder *b = NULL;
  ck_assert_int_eq(mcp_msg_builder_new(&b, NULL), 0);
  uint8_t *p = mcp_msg_builder_reserve(b, 3);
  ck_assert_ptr_nonnull(p);
  memcpy(p, "abc", 3);
  mcp_msg_builder_fail(b);
  mcp_msg *m = NULL;
  ck_assert_int_eq(mcp_msg_builder_finish(b, "x", &m), MCP_ERR_NOMEM);
  ck_assert_ptr_null(m);
  p = mcp_msg_builder_reserve(b, 2); /* reset: usable again */
  memcpy(p, "ok", 2);
  ck_assert_int_eq(mcp_msg_builder_finish(b, "x", &m), 0);
  ck_assert_uint_eq(mcp_msg_len(m), 2);
  mcp_msg_free(m);
  mcp_msg_builder_del(b);
  mcp_kv good[] = {{"k", "v"}}, bad[] = {{"k", "\xff"}};
  ck_assert_int_eq(mcp_kvs_valid(good, 1), 1);
  ck_assert_int_eq(mcp_kvs_valid(bad, 1), 0);
  ck_assert_int_eq(mcp_kvs_valid(NULL, 0), 1);
  ck_assert_int_eq(mcp_kvs_valid(NULL, 1), 0);
}
END_TEST

static Suite *engine_suite(void) {
  Suite *s = suite_create("core_engine");
  TCase *tc = tcase_create("watch");
  tcase_add_test(tc, test_watch_first_take_is_the_whole_state);
  tcase_add_test(tc, test_watch_reports_only_what_changed_oldest_first);
  tcase_add_test(tc, test_watch_does_not_report_what_came_and_went_since);
  tcase_add_test(tc, test_watch_sees_a_collection_removed_and_brought_back);
  tcase_add_test(tc, test_store_remove_collection_replace_of_nothing_brings_it_back);
  tcase_add_test(tc, test_watch_falls_back_to_whole_state_after_compaction);
  tcase_add_test(tc, test_watch_keeps_up_through_a_mass_deletion);
  tcase_add_test(tc, test_watch_isolated_change_goes_at_once);
  tcase_add_test(tc, test_watch_burst_is_coalesced_until_quiet);
  tcase_add_test(tc, test_watch_max_delay_bounds_a_stream_of_changes);
  tcase_add_test(tc, test_watch_ready_reads_only_and_note_starts_max_delay);
  tcase_add_test(tc, test_watch_items_carry_type_and_body_of_any_size);
  tcase_add_test(tc, test_watch_finds_its_collection_after_a_failed_first_change);
  tcase_add_test(tc, test_watch_skip_moves_without_reporting);
  tcase_add_test(tc, test_watch_get_and_foreach_do_not_move_the_watch);
  tcase_add_test(tc, test_watch_take_that_fails_does_not_move);
  suite_add_tcase(s, tc);
  tc = tcase_create("builder");
  tcase_add_test(tc, test_msg_builder_shares_stored_bodies_and_outlives_the_store);
  tcase_add_test(tc, test_msg_builder_out_of_memory_produces_nothing);
  tcase_add_test(tc, test_msg_builder_snapshot_is_shared_by_messages_and_outlives_the_store);
  tcase_add_test(tc, test_msg_builder_freeze_refuses_nesting_and_out_of_memory);
  tcase_add_test(tc, test_coll_readers_see_generations_and_late_collections);
  tcase_add_test(tc, test_coll_changes_reports_unseen_removals_only_when_asked);
  tcase_add_test(tc, test_coll_iteration_stops_at_a_negative_return);
  tcase_add_test(tc, test_msg_builder_coll_frames_what_the_callbacks_frame);
  tcase_add_test(tc, test_msg_builder_fail_and_reserve);
  suite_add_tcase(s, tc);
  tc = tcase_create("stream");
  tcase_add_test(tc, test_stream_sends_one_message_per_pump_and_only_when_free);
  tcase_add_test(tc, test_stream_initial_sent_is_the_sessions_answer_or_at_once);
  tcase_add_test(tc, test_stream_recv_iov_joins_for_a_session_that_reads_one_buffer);
  tcase_add_test(tc, test_stream_session_error_ends_at_once_with_its_status);
  tcase_add_test(tc, test_stream_session_end_waits_for_the_send_in_flight);
  tcase_add_test(tc, test_stream_half_close_ends_with_ok_unless_kept_open);
  tcase_add_test(tc, test_stream_client_half_closes_after_its_first_message);
  tcase_add_test(tc, test_stream_timers_run_when_due_and_never_spin);
  tcase_add_test(tc, test_stream_wake_calls_the_transports_waker_only);
  tcase_add_test(tc, test_stream_new_frees_the_session_when_it_fails);
  tcase_add_test(tc, test_service_defs_check_is_one_rule_for_every_transport);
  tcase_add_test(tc, test_wire_varint_reads_ten_bytes_and_refuses_bits_beyond_64);
  tcase_add_test(tc, test_wire_field_next_reads_each_wire_type_and_refuses_bad_bytes);
  tcase_add_test(tc, test_wire_field_next_answers_as_mcp_wire_next_on_any_bytes);
  tcase_add_test(tc, test_utf8_check_is_strict_and_nul_is_the_callers_choice);
  tcase_add_test(tc, test_base64_and_hex_take_both_alphabets_and_strict_refuses_what_is_not_canonical);
  tcase_add_test(tc, test_buf_grows_through_the_allocator_and_keeps_its_bytes_when_it_cannot);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(engine_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
