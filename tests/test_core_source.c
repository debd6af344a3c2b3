/*
 * The source session: request classification, one push in flight per
 * collection, coalescing, incremental pushes, NACK handling, resumption,
 * unknown collections, the dial-out trigger, debounce, NACK retry, per-sink
 * views, introspection, events and the messages' fragments.
 *
 * docs/protocol.md ("Source: ...", "Resumption", "Unknown collections",
 * "Dial-out trigger") is the specification. Time is a plain variable.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"
#include "mem_count.h"
#include "mcp/engine.h"

typedef Istio__Mcp__V1alpha1__Resources Res;

#define EPOCH 0x1234 /* th_store()'s epoch */
#define MS MCP_MILLISECONDS
#define SEC MCP_SECONDS
#define NODE "sink-1"

/* NULL-terminated lists. */
#define LIST(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NONE ((const char *const[]){NULL})

/* ---- fixture ---- */

typedef struct fx {
  mcp_store *st;
  mcp_source_session *s;
  mcp_source_options opts; /* adjust between fx_new() and fx_start() */
  mcp_tstamp ts;           /* the virtual clock */
  th_evlog log;
} fx;

static fx *fx_new(void) {
  fx *f = calloc(1, sizeof(*f));
  ck_assert_ptr_nonnull(f);
  f->st = th_store(NULL);
  ck_assert_ptr_nonnull(f->st);
  mcp_source_options_default(&f->opts);
  f->opts.store = f->st;
  f->opts.on_event = th_evlog_cb;
  f->opts.user_data = &f->log;
  return f;
}

static void fx_start(fx *f) {
  ck_assert_int_eq(mcp_source_session_new(&f->s, &f->opts, f->ts), 0);
  ck_assert_ptr_nonnull(f->s);
}

static fx *fx_open(void) {
  fx *f = fx_new();
  fx_start(f);
  return f;
}

static void fx_free(fx *f) {
  mcp_source_session_del(f->s);
  mcp_store_del(f->st);
  ck_assert_uint_eq(f->log.dropped, 0);
  free(f);
}

static const char *ver(char *buf, size_t n, uint64_t gen) {
  return th_version(buf, n, EPOCH, gen);
}
#define VER(gen) ver((char[48]){0}, 48, (gen))

/* Store changes, stamped with the virtual clock. */
static void put(fx *f, const char *coll, const char *name, const char *version,
                const char *body) {
  th_put(f->st, coll, name, version, body, f->ts);
}

static void del(fx *f, const char *coll, const char *name) {
  ck_assert_int_eq(mcp_store_delete(f->st, coll, name, f->ts), 1);
}

/* Peer requests. */
static int recv_req(fx *f, const char *node, const char *coll,
                    const char *nonce, int incremental,
                    const char *const *initial, int code, const char *msg) {
  size_t len;
  uint8_t *b = th_request(&len, node, coll, nonce, incremental, initial, code,
                          msg);
  int rv = mcp_source_session_recv(f->s, b, len, f->ts);
  free(b);
  return rv;
}

static void subscribe(fx *f, const char *coll, int incremental) {
  ck_assert_int_eq(recv_req(f, NODE, coll, "", incremental, NULL, 0, NULL), 0);
}

static void resume(fx *f, const char *coll, const char *const *initial) {
  ck_assert_int_eq(recv_req(f, NODE, coll, "", 1, initial, 0, NULL), 0);
}

static void ack(fx *f, const char *coll, const char *nonce) {
  ck_assert_int_eq(recv_req(f, NODE, coll, nonce, 0, NULL, 0, NULL), 0);
}

static void nack(fx *f, const char *coll, const char *nonce, int code,
                 const char *msg) {
  ck_assert_int_eq(recv_req(f, NODE, coll, nonce, 0, NULL, code, msg), 0);
}

/* The next push, which must exist. Free with th_resources_free(). */
static Res *push(fx *f) {
  ck_assert_int_eq(mcp_source_session_want_write(f->s, f->ts), 1);
  Res *r = th_source_next(f->s, f->ts);
  ck_assert_msg(r != NULL, "a push was expected");
  return r;
}

/* Nothing may be sent now. */
static void no_push(fx *f) {
  ck_assert_int_eq(mcp_source_session_want_write(f->s, f->ts), 0);
  mcp_msg *m = NULL;
  ck_assert_int_eq(mcp_source_session_next(f->s, f->ts, &m), 0);
  ck_assert_ptr_null(m);
}

/* Subscribes, takes the answer and ACKs it: the stream is in sync. */
static void sync_coll(fx *f, const char *coll, int incremental) {
  subscribe(f, coll, incremental);
  Res *r = push(f);
  ck_assert_str_eq(r->collection, coll);
  ack(f, coll, r->nonce);
  th_resources_free(r);
}

/* |r| carries exactly |names| (and no other resource). */
static void expect_names(const Res *r, const char *const *names) {
  size_t n = 0;
  for (; names[n]; ++n) {
    ck_assert_msg(th_find(r, names[n]) >= 0, "resource %s missing", names[n]);
  }
  ck_assert_uint_eq(r->n_resources, n);
}

/* |r| removes exactly |names|. */
static void expect_removed(const Res *r, const char *const *names) {
  size_t n = 0;
  for (; names[n]; ++n) {
    ck_assert_msg(th_find_removed(r, names[n]) >= 0, "removal %s missing",
                  names[n]);
  }
  ck_assert_uint_eq(r->n_removed_resources, n);
}

static void expect_body(const Res *r, const char *name, const char *body) {
  int i = th_find(r, name);
  ck_assert_msg(i >= 0, "resource %s missing", name);
  ck_assert_msg(th_body_is(r, i, body), "resource %s: wrong body", name);
}

/* Introspection of one collection by name. */
static mcp_collection_status status(fx *f, const char *coll) {
  mcp_collection_status st;
  memset(&st, 0, sizeof(st));
  size_t n = mcp_source_session_collection_count(f->s);
  for (size_t i = 0; i < n; ++i) {
    ck_assert_int_eq(mcp_source_session_collection_status(f->s, i, f->ts, &st),
                     0);
    if (strcmp(st.collection, coll) == 0) {
      return st;
    }
  }
  ck_abort_msg("collection %s not on the stream", coll);
  return st;
}

/* ---- first requests ---- */

START_TEST(test_source_initial_request_gets_full_state) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v1", "B");
  subscribe(f, "c", 0);
  Res *r = push(f);
  ck_assert_str_eq(r->collection, "c");
  ck_assert_int_eq(r->incremental, 0);
  ck_assert_str_eq(r->nonce, "1");
  ck_assert_str_eq(r->system_version_info, VER(2));
  expect_names(r, LIST("a", "b"));
  expect_body(r, "a", "A");
  expect_body(r, "b", "B");
  ck_assert_uint_eq(r->n_removed_resources, 0);
  th_resources_free(r);
  no_push(f);
  fx_free(f);
}
END_TEST

/* An incremental request without initial versions: the source does not
 * know what the sink holds, so the answer is full state. */
START_TEST(test_source_first_answer_full_even_when_incremental_asked) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 1);
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 0);
  expect_names(r, LIST("a"));
  th_resources_free(r);
  fx_free(f);
}
END_TEST

START_TEST(test_source_empty_collection_is_answered) {
  fx *f = fx_open();
  ck_assert_int_eq(mcp_store_add_collection(f->st, "empty"), 0);
  subscribe(f, "empty", 1);
  Res *r = push(f);
  ck_assert_str_eq(r->collection, "empty");
  ck_assert_uint_eq(r->n_resources, 0);
  ck_assert_uint_eq(r->n_removed_resources, 0);
  ck_assert_int_eq(r->incremental, 0);
  ck_assert_str_ne(r->nonce, "");
  ck_assert_str_eq(r->system_version_info, VER(0));
  th_resources_free(r);
  /* ... and it is a real push: ACKable. */
  ack(f, "empty", "1");
  ck_assert_uint_eq(status(f, "empty").acks, 1);
  fx_free(f);
}
END_TEST

/* A collection emptied by deletes is answered too. */
START_TEST(test_source_emptied_collection_is_answered) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  del(f, "c", "a");
  subscribe(f, "c", 0);
  Res *r = push(f);
  ck_assert_uint_eq(r->n_resources, 0);
  ck_assert_uint_eq(r->n_removed_resources, 0);
  ck_assert_str_eq(r->system_version_info, VER(2));
  th_resources_free(r);
  fx_free(f);
}
END_TEST

START_TEST(test_source_nonces_are_per_stream_decimal_sequence) {
  fx *f = fx_open();
  put(f, "a", "x", "v1", "X");
  put(f, "b", "x", "v1", "X");
  subscribe(f, "a", 0);
  subscribe(f, "b", 0);
  Res *r1 = push(f);
  Res *r2 = push(f);
  ck_assert_str_eq(r1->nonce, "1");
  ck_assert_str_eq(r2->nonce, "2");
  ck_assert_str_ne(r1->collection, r2->collection);
  ack(f, r1->collection, "1");
  put(f, r1->collection, "x", "v2", "X2");
  Res *r3 = push(f);
  ck_assert_str_eq(r3->nonce, "3");
  th_resources_free(r1);
  th_resources_free(r2);
  th_resources_free(r3);

  /* Another stream counts on its own. */
  mcp_source_session *s2 = NULL;
  ck_assert_int_eq(mcp_source_session_new(&s2, &f->opts, f->ts), 0);
  size_t len;
  uint8_t *b = th_request(&len, NODE, "a", "", 0, NULL, 0, NULL);
  th_source_recv(s2, b, len, f->ts, 0);
  Res *o = th_source_next(s2, f->ts);
  ck_assert_ptr_nonnull(o);
  ck_assert_str_eq(o->nonce, "1");
  th_resources_free(o);
  mcp_source_session_del(s2);
  fx_free(f);
}
END_TEST

START_TEST(test_source_sink_node_of_first_request_identifies_stream) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  ck_assert_str_eq(mcp_source_session_node_id(f->s), "");
  ck_assert_int_eq(recv_req(f, "first-node", "c", "", 0, NULL, 0, NULL), 0);
  ck_assert_str_eq(mcp_source_session_node_id(f->s), "first-node");
  ck_assert_int_eq(recv_req(f, "second-node", "d", "", 0, NULL, 0, NULL), 0);
  ck_assert_str_eq(mcp_source_session_node_id(f->s), "first-node");
  fx_free(f);
}
END_TEST

/* ---- one push in flight, coalescing ---- */

START_TEST(test_source_one_push_in_flight_per_collection) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  put(f, "c", "a", "v2", "A2");
  no_push(f);
  f->ts += 10 * SEC;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  no_push(f);
  ck_assert_uint_eq(status(f, "c").pushes, 1);
  fx_free(f);
}
END_TEST

START_TEST(test_source_changes_while_pending_coalesce) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v1", "B");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  put(f, "c", "a", "v2", "A2");
  put(f, "c", "a", "v3", "A3");
  del(f, "c", "b");
  put(f, "c", "n", "v1", "N");
  no_push(f);
  ack(f, "c", "1");
  r = push(f);
  ck_assert_str_eq(r->system_version_info, VER(6));
  expect_names(r, LIST("a", "n"));
  expect_body(r, "a", "A3");
  ck_assert_str_eq(r->resources[th_find(r, "a")]->metadata->version, "v3");
  th_resources_free(r);
  no_push(f); /* exactly one push */
  ck_assert_uint_eq(status(f, "c").pushes, 2);
  fx_free(f);
}
END_TEST

START_TEST(test_source_collections_are_independent) {
  fx *f = fx_open();
  put(f, "a", "x", "v1", "X");
  put(f, "b", "y", "v1", "Y");
  subscribe(f, "a", 0);
  Res *ra = push(f);
  ck_assert_str_eq(ra->collection, "a");
  /* "a" pending: "b" is answered anyway. */
  subscribe(f, "b", 0);
  Res *rb = push(f);
  ck_assert_str_eq(rb->collection, "b");
  ack(f, "b", rb->nonce);
  /* A change in "b" goes out while "a" is still pending. */
  put(f, "b", "y", "v2", "Y2");
  Res *rb2 = push(f);
  ck_assert_str_eq(rb2->collection, "b");
  expect_body(rb2, "y", "Y2");
  no_push(f);
  /* And "a" is still ACKable with its nonce. */
  ack(f, "a", ra->nonce);
  ck_assert_uint_eq(status(f, "a").acks, 1);
  ck_assert_str_eq(status(f, "b").pending_nonce, rb2->nonce);
  th_resources_free(ra);
  th_resources_free(rb);
  th_resources_free(rb2);
  fx_free(f);
}
END_TEST

/* A collection that changes all the time cannot starve another. */
START_TEST(test_source_round_robin_serves_every_collection) {
  fx *f = fx_open();
  put(f, "a", "x", "v1", "X");
  put(f, "b", "x", "v1", "X");
  sync_coll(f, "a", 0);
  sync_coll(f, "b", 0);
  put(f, "a", "x", "v2", "X");
  put(f, "b", "x", "v2", "X");
  Res *first = push(f);
  ack(f, first->collection, first->nonce);
  /* The first one changes again at once. */
  put(f, first->collection, "x", "v3", "X");
  Res *second = push(f);
  ck_assert_str_ne(second->collection, first->collection);
  th_resources_free(first);
  th_resources_free(second);
  fx_free(f);
}
END_TEST

/* ---- ACK ---- */

START_TEST(test_source_ack_makes_next_push_incremental) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v1", "B");
  sync_coll(f, "c", 1);
  put(f, "c", "b", "v2", "B2");
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, LIST("b"));
  expect_body(r, "b", "B2");
  expect_removed(r, NONE);
  ck_assert_str_eq(r->system_version_info, VER(3));
  th_resources_free(r);
  fx_free(f);
}
END_TEST

START_TEST(test_source_non_incremental_stream_always_gets_full_state) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v1", "B");
  sync_coll(f, "c", 0);
  put(f, "c", "b", "v2", "B2");
  del(f, "c", "a");
  put(f, "c", "n", "v1", "N");
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 0);
  expect_names(r, LIST("b", "n"));
  expect_removed(r, NONE);
  th_resources_free(r);
  fx_free(f);
}
END_TEST

START_TEST(test_source_incremental_add_update_delete) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v1", "B");
  put(f, "c", "c", "v1", "C");
  sync_coll(f, "c", 1);

  put(f, "c", "d", "v1", "D"); /* add */
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, LIST("d"));
  expect_removed(r, NONE);
  ack(f, "c", r->nonce);
  th_resources_free(r);

  put(f, "c", "b", "v2", "B2"); /* update */
  r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, LIST("b"));
  expect_body(r, "b", "B2");
  expect_removed(r, NONE);
  ack(f, "c", r->nonce);
  th_resources_free(r);

  del(f, "c", "c"); /* delete */
  r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, NONE);
  expect_removed(r, LIST("c"));
  ack(f, "c", r->nonce);
  th_resources_free(r);

  /* All three at once, in one push. */
  put(f, "c", "e", "v1", "E");
  put(f, "c", "a", "v2", "A2");
  del(f, "c", "d");
  r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, LIST("e", "a"));
  expect_removed(r, LIST("d"));
  ck_assert_str_eq(r->system_version_info, VER(9));
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* Deleted and re-added while the sink held an older generation: sent as a
 * resource, not as a removal. */
START_TEST(test_source_incremental_delete_then_readd_is_sent_as_resource) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  sync_coll(f, "c", 1);
  del(f, "c", "a");
  put(f, "c", "a", "v2", "A2");
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, LIST("a"));
  expect_removed(r, NONE);
  th_resources_free(r);
  fx_free(f);
}
END_TEST

START_TEST(test_source_replace_pushes_only_real_changes) {
  fx *f = fx_open();
  mcp_resource first[3] = {th_res("keep", "v1", "K"), th_res("chg", "v1", "C"),
                           th_res("drop", "v1", "D")};
  ck_assert_int_eq(mcp_store_replace(f->st, "c", first, 3, f->ts), 1);
  sync_coll(f, "c", 1);
  mcp_resource second[3] = {th_res("keep", "v1", "K"),
                            th_res("chg", "v2", "C2"), th_res("new", "v1", "N")};
  ck_assert_int_eq(mcp_store_replace(f->st, "c", second, 3, f->ts), 1);
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, LIST("chg", "new"));
  expect_removed(r, LIST("drop"));
  ck_assert_str_eq(r->system_version_info, VER(2));
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* ---- NACK ---- */

START_TEST(test_source_nack_does_not_resend) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  nack(f, "c", "1", MCP_CODE_INVALID_ARGUMENT, "bad gateway spec");
  no_push(f);
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), MCP_TSTAMP_MAX);
  f->ts += 3600 * SEC;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  no_push(f);
  /* A no-op store change does not resend it either. */
  put(f, "c", "a", "v1", "A");
  no_push(f);
  mcp_collection_status st = status(f, "c");
  ck_assert_uint_eq(st.pushes, 1);
  ck_assert_uint_eq(st.nacks, 1);
  ck_assert_str_eq(st.pending_nonce, "");
  fx_free(f);
}
END_TEST

START_TEST(test_source_nack_then_change_is_pushed) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  nack(f, "c", "1", MCP_CODE_INVALID_ARGUMENT, "no");
  put(f, "c", "a", "v2", "A2");
  r = push(f);
  ck_assert_int_eq(r->incremental, 0);
  expect_names(r, LIST("a"));
  expect_body(r, "a", "A2");
  ck_assert_str_eq(r->system_version_info, VER(2));
  ck_assert_str_eq(r->nonce, "2");
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* A change made while the rejected push was in flight is pushed right
 * after the NACK. */
START_TEST(test_source_nack_with_change_meanwhile_pushes_at_once) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  put(f, "c", "a", "v2", "A2");
  nack(f, "c", "1", MCP_CODE_INVALID_ARGUMENT, "no");
  r = push(f);
  expect_body(r, "a", "A2");
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* An incremental sink that NACKed still holds the generation it ACKed: the
 * next push is the difference from there, including the rejected change. */
START_TEST(test_source_nack_next_push_is_difference_from_held) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v1", "B");
  put(f, "c", "z", "v1", "Z");
  sync_coll(f, "c", 1);
  put(f, "c", "a", "v2", "A2");
  Res *r = push(f);
  expect_names(r, LIST("a"));
  nack(f, "c", r->nonce, MCP_CODE_INVALID_ARGUMENT, "no");
  th_resources_free(r);
  put(f, "c", "b", "v2", "B2");
  r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, LIST("a", "b"));
  expect_removed(r, NONE);
  th_resources_free(r);
  fx_free(f);
}
END_TEST

START_TEST(test_source_nack_code_and_message_in_status) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  mcp_collection_status st = status(f, "c");
  ck_assert_int_eq(st.last_nack_code, 0);
  ck_assert_str_eq(st.last_nack_message, "");
  nack(f, "c", "1", MCP_CODE_FAILED_PRECONDITION, "port 80 already bound");
  st = status(f, "c");
  ck_assert_int_eq(st.last_nack_code, MCP_CODE_FAILED_PRECONDITION);
  ck_assert_str_eq(st.last_nack_message, "port 80 already bound");
  ck_assert_uint_eq(st.nacks, 1);
  ck_assert_uint_eq(st.acks, 0);
  ck_assert_str_eq(st.acked_version, "");
  fx_free(f);
}
END_TEST

/* ---- stale nonces ---- */

START_TEST(test_source_stale_nonce_is_ignored_and_counted) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  sync_coll(f, "c", 0);
  put(f, "c", "a", "v2", "A2");
  Res *r = push(f);
  ck_assert_str_eq(r->nonce, "2");
  th_resources_free(r);
  size_t ack_events = th_evlog_count(&f->log, MCP_EVENT_ACK);

  ack(f, "c", "1"); /* an old nonce */
  mcp_collection_status st = status(f, "c");
  ck_assert_uint_eq(st.stale, 1);
  ck_assert_uint_eq(st.acks, 1);
  ck_assert_str_eq(st.pending_nonce, "2");
  ck_assert_str_eq(st.acked_version, VER(1));
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_ACK), ack_events);
  const th_event *e = th_evlog_last(&f->log, MCP_EVENT_STALE);
  ck_assert_ptr_nonnull(e);
  ck_assert_str_eq(e->collection, "c");
  ck_assert_str_eq(e->nonce, "1");
  no_push(f);

  /* A future nonce is stale too. */
  ack(f, "c", "3");
  ck_assert_uint_eq(status(f, "c").stale, 2);
  /* The pending one still works. */
  ack(f, "c", "2");
  st = status(f, "c");
  ck_assert_uint_eq(st.acks, 2);
  ck_assert_str_eq(st.acked_version, VER(2));
  fx_free(f);
}
END_TEST

START_TEST(test_source_stale_nack_is_not_a_nack) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  nack(f, "c", "7", MCP_CODE_INVALID_ARGUMENT, "late");
  mcp_collection_status st = status(f, "c");
  ck_assert_uint_eq(st.stale, 1);
  ck_assert_uint_eq(st.nacks, 0);
  ck_assert_int_eq(st.last_nack_code, 0);
  ck_assert_str_eq(st.pending_nonce, "1");
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_NACK), 0);
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_STALE), 1);
  ack(f, "c", "1");
  ck_assert_uint_eq(status(f, "c").acks, 1);
  fx_free(f);
}
END_TEST

/* Nonces that are not exactly one we sent: never an ACK. */
START_TEST(test_source_non_numeric_nonce_is_stale) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  ck_assert_str_eq(r->nonce, "1");
  th_resources_free(r);
  ack(f, "c", "abc");
  ack(f, "c", "01");
  ack(f, "c", "1 ");
  ack(f, "c", "-1");
  ack(f, "c", "4294967297"); /* 2^32 + 1 */
  mcp_collection_status st = status(f, "c");
  ck_assert_uint_eq(st.stale, 5);
  ck_assert_uint_eq(st.acks, 0);
  ck_assert_str_eq(st.pending_nonce, "1");
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_STALE), 5);
  fx_free(f);
}
END_TEST

START_TEST(test_source_nonce_for_unrequested_collection_is_stale) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "other", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  /* The nonce of "c", answered for "other", never requested here. */
  ack(f, "other", "1");
  const th_event *e = th_evlog_last(&f->log, MCP_EVENT_STALE);
  ck_assert_ptr_nonnull(e);
  ck_assert_str_eq(e->collection, "other");
  ck_assert_uint_eq(mcp_source_session_collection_count(f->s), 1);
  mcp_collection_status st = status(f, "c");
  ck_assert_uint_eq(st.acks, 0);
  ck_assert_str_eq(st.pending_nonce, "1");
  no_push(f);
  ack(f, "c", "1");
  ck_assert_uint_eq(status(f, "c").acks, 1);
  fx_free(f);
}
END_TEST

START_TEST(test_source_duplicate_ack_is_stale) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  sync_coll(f, "c", 0);
  ack(f, "c", "1");
  mcp_collection_status st = status(f, "c");
  ck_assert_uint_eq(st.acks, 1);
  ck_assert_uint_eq(st.stale, 1);
  fx_free(f);
}
END_TEST

/* ---- re-requests ---- */

START_TEST(test_source_rerequest_while_pending_is_answered_at_once) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  put(f, "c", "b", "v1", "B");
  subscribe(f, "c", 0); /* the sink starts over */
  r = push(f);
  ck_assert_int_eq(r->incremental, 0);
  ck_assert_str_eq(r->nonce, "2");
  ck_assert_str_eq(r->system_version_info, VER(2));
  expect_names(r, LIST("a", "b"));
  th_resources_free(r);
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_REQUEST), 2);
  fx_free(f);
}
END_TEST

START_TEST(test_source_ack_for_abandoned_nonce_is_stale) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  subscribe(f, "c", 0);
  /* Before and after the new answer went out. */
  ack(f, "c", "1");
  mcp_collection_status st = status(f, "c");
  ck_assert_uint_eq(st.stale, 1);
  ck_assert_uint_eq(st.acks, 0);
  r = push(f);
  ck_assert_str_eq(r->nonce, "2");
  th_resources_free(r);
  nack(f, "c", "1", MCP_CODE_INVALID_ARGUMENT, "old");
  st = status(f, "c");
  ck_assert_uint_eq(st.stale, 2);
  ck_assert_uint_eq(st.nacks, 0);
  ck_assert_str_eq(st.pending_nonce, "2");
  ack(f, "c", "2");
  ck_assert_uint_eq(status(f, "c").acks, 1);
  fx_free(f);
}
END_TEST

/* After a re-request the source no longer knows what the sink holds. */
START_TEST(test_source_rerequest_forgets_what_sink_held) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v1", "B");
  sync_coll(f, "c", 1);
  put(f, "c", "b", "v2", "B2");
  subscribe(f, "c", 1);
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 0);
  expect_names(r, LIST("a", "b"));
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* The sink asked anew after a NACK: it gets an answer, even with the very
 * content it rejected. */
START_TEST(test_source_rerequest_after_nack_is_answered) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  nack(f, "c", "1", MCP_CODE_INVALID_ARGUMENT, "no");
  no_push(f);
  subscribe(f, "c", 0);
  r = push(f);
  ck_assert_str_eq(r->system_version_info, VER(1));
  expect_names(r, LIST("a"));
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* A re-request switches between full and incremental. */
START_TEST(test_source_rerequest_switches_to_full_state) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v1", "B");
  sync_coll(f, "c", 1);
  sync_coll(f, "c", 0);
  put(f, "c", "b", "v2", "B2");
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 0);
  expect_names(r, LIST("a", "b"));
  ck_assert_int_eq(status(f, "c").incremental, 0);
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* ---- resumption ---- */

START_TEST(test_source_resume_sends_only_difference) {
  fx *f = fx_open();
  put(f, "c", "same", "v1", "S");
  put(f, "c", "changed", "v2", "C2");
  put(f, "c", "new", "v1", "N");
  resume(f, "c", LIST("same", "v1", "changed", "v1", "gone", "v1"));
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, LIST("changed", "new"));
  expect_removed(r, LIST("gone"));
  expect_body(r, "changed", "C2");
  ck_assert_str_eq(r->system_version_info, VER(3));
  /* After the ACK the stream is incremental from there. */
  ack(f, "c", r->nonce);
  th_resources_free(r);
  put(f, "c", "new", "v2", "N2");
  r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, LIST("new"));
  expect_removed(r, NONE);
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* A resource deleted while the sink was away (a tombstone in the store) is
 * removed at the sink. */
START_TEST(test_source_resume_removes_resource_deleted_while_away) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v1", "B");
  del(f, "c", "b");
  resume(f, "c", LIST("a", "v1", "b", "v1"));
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, NONE);
  expect_removed(r, LIST("b"));
  th_resources_free(r);
  fx_free(f);
}
END_TEST

START_TEST(test_source_resume_answer_sent_when_diff_empty) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v7", "B");
  resume(f, "c", LIST("a", "v1", "b", "v7"));
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, NONE);
  expect_removed(r, NONE);
  ck_assert_str_eq(r->nonce, "1");
  ck_assert_str_eq(r->system_version_info, VER(2));
  ack(f, "c", "1");
  ck_assert_str_eq(status(f, "c").acked_version, VER(2));
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* After a NACK the sink still holds the versions it resumed with, so the
 * next push is again the difference from them. */
START_TEST(test_source_resume_nack_keeps_resuming_from_initial_versions) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v2", "B2");
  resume(f, "c", LIST("a", "v1", "b", "v1", "gone", "v1"));
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  nack(f, "c", r->nonce, MCP_CODE_INVALID_ARGUMENT, "no");
  th_resources_free(r);
  no_push(f); /* the same content is never pushed again */
  put(f, "c", "n", "v1", "N");
  r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, LIST("b", "n"));
  ck_assert_int_eq(r->n_removed_resources, 1);
  ck_assert_str_eq(r->removed_resources[0], "gone");
  ack(f, "c", r->nonce);
  th_resources_free(r);
  /* Once ACKed, the sink holds that generation: only changes follow. */
  put(f, "c", "a", "v2", "A2");
  r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, LIST("a"));
  ck_assert_int_eq(r->n_removed_resources, 0);
  th_resources_free(r);
  fx_free(f);
}
END_TEST

START_TEST(test_source_resume_duplicate_key_last_wins) {
  fx *f = fx_open();
  put(f, "c", "a", "v2", "A");
  put(f, "c", "b", "v2", "B");
  resume(f, "c", LIST("a", "v1", "a", "v2", "b", "v2", "b", "v1"));
  Res *r = push(f);
  expect_names(r, LIST("b"));
  th_resources_free(r);
  fx_free(f);
}
END_TEST

START_TEST(test_source_non_incremental_request_ignores_initial_versions) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v1", "B");
  ck_assert_int_eq(recv_req(f, NODE, "c", "", 0,
                            LIST("a", "v1", "gone", "v1"), 0, NULL),
                   0);
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 0);
  expect_names(r, LIST("a", "b"));
  expect_removed(r, NONE);
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* version_reached for the catch-up tests: versions are decimal revisions,
 * and the source has reached |*reached|. */
static int reached_upto(const char *collection, const char *version,
                        void *ud) {
  (void)collection;
  return strtoull(version, NULL, 10) <= *(const unsigned long long *)ud;
}

/* A replica that lags the one the sink came from: the sink holds "b" at 7,
 * this source has reached 5 and still has b at 4. Answering now would take
 * the sink back to 4; the answer waits until the source reaches 7. */
START_TEST(test_source_resume_waits_until_the_versions_are_reached) {
  fx *f = fx_new();
  unsigned long long reached = 5;
  f->opts.version_reached = reached_upto;
  f->opts.version_reached_user_data = &reached;
  f->opts.catchup_timeout = 10 * SEC;
  fx_start(f);
  put(f, "c", "a", "3", "A");
  put(f, "c", "b", "4", "B4");
  resume(f, "c", LIST("a", "3", "b", "7"));
  no_push(f);
  /* The timer for the wait's end, so nothing hangs if it never catches up. */
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), f->ts + 10 * SEC);
  f->ts += 1 * SEC;
  put(f, "c", "a", "6", "A6"); /* catching up: 6 < 7, still waits */
  reached = 6;
  no_push(f);
  f->ts += 1 * SEC;
  put(f, "c", "b", "7", "B7");
  reached = 7;
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, LIST("a")); /* b is at 7 at the sink already */
  expect_body(r, "a", "A6");
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* A source that never reaches the sink's versions (the sink came from
 * another cluster) answers with what it has once catchup_timeout passed. */
START_TEST(test_source_resume_catchup_wait_ends_at_its_timeout) {
  fx *f = fx_new();
  unsigned long long reached = 5;
  f->opts.version_reached = reached_upto;
  f->opts.version_reached_user_data = &reached;
  f->opts.catchup_timeout = 10 * SEC;
  fx_start(f);
  put(f, "c", "b", "4", "B4");
  resume(f, "c", LIST("b", "900"));
  no_push(f);
  f->ts += 10 * SEC - 1;
  no_push(f);
  f->ts += 1;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  Res *r = push(f);
  expect_names(r, LIST("b"));
  expect_body(r, "b", "B4");
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* Without version_reached versions are opaque: the answer goes at once,
 * and a request without initial versions never waits either. */
START_TEST(test_source_no_catchup_wait_without_hook_or_resume) {
  fx *f = fx_open();
  put(f, "c", "b", "4", "B4");
  resume(f, "c", LIST("b", "900"));
  th_resources_free(push(f));
  fx_free(f);
  f = fx_new();
  unsigned long long reached = 0;
  f->opts.version_reached = reached_upto;
  f->opts.version_reached_user_data = &reached;
  fx_start(f);
  put(f, "c", "b", "4", "B4");
  subscribe(f, "c", 1);
  th_resources_free(push(f));
  fx_free(f);
}
END_TEST

/* A re-request with initial versions resumes too. */
START_TEST(test_source_rerequest_with_initial_versions_resumes) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v1", "B");
  subscribe(f, "c", 1);
  Res *r = push(f);
  th_resources_free(r);
  put(f, "c", "b", "v2", "B2");
  resume(f, "c", LIST("a", "v1", "b", "v1"));
  r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, LIST("b"));
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* ---- compaction ---- */

static void fill(fx *f, const char *coll, int n) {
  char name[16];
  for (int i = 0; i < n; ++i) {
    snprintf(name, sizeof(name), "r%d", i);
    put(f, coll, name, "v1", name);
  }
}

static void delete_range(fx *f, const char *coll, int from, int to) {
  char name[16];
  for (int i = from; i < to; ++i) {
    snprintf(name, sizeof(name), "r%d", i);
    del(f, coll, name);
  }
}

START_TEST(test_source_stream_older_than_compaction_gets_full_state) {
  fx *f = fx_open();
  fill(f, "c", 100);
  sync_coll(f, "c", 1);
  delete_range(f, "c", 0, 70); /* tombstones >= 64 and > live: compacted */
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 0);
  ck_assert_uint_eq(r->n_resources, 30);
  ck_assert_int_ge(th_find(r, "r70"), 0);
  ck_assert_int_lt(th_find(r, "r69"), 0);
  ck_assert_str_eq(r->system_version_info, VER(170));
  ack(f, "c", r->nonce);
  th_resources_free(r);
  /* Held after the compaction: incremental again. */
  delete_range(f, "c", 70, 71);
  r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, NONE);
  expect_removed(r, LIST("r70"));
  th_resources_free(r);
  fx_free(f);
}
END_TEST

START_TEST(test_source_stream_within_change_log_gets_removals) {
  fx *f = fx_open();
  fill(f, "c", 100);
  sync_coll(f, "c", 1);
  delete_range(f, "c", 0, 10);
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  ck_assert_uint_eq(r->n_resources, 0);
  ck_assert_uint_eq(r->n_removed_resources, 10);
  ck_assert_int_ge(th_find_removed(r, "r0"), 0);
  ck_assert_int_ge(th_find_removed(r, "r9"), 0);
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* ---- unknown collections ---- */

START_TEST(test_source_unknown_collection_keeps_stream) {
  fx *f = fx_open();
  put(f, "known", "a", "v1", "A");
  subscribe(f, "unknown", 0);
  subscribe(f, "known", 0);
  const th_event *e = th_evlog_last(&f->log, MCP_EVENT_UNKNOWN_COLLECTION);
  ck_assert_ptr_nonnull(e);
  ck_assert_str_eq(e->collection, "unknown");
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_UNKNOWN_COLLECTION), 1);
  ck_assert_int_eq(status(f, "unknown").known, 0);
  ck_assert_int_eq(status(f, "known").known, 1);

  Res *r = push(f);
  ck_assert_str_eq(r->collection, "known");
  th_resources_free(r);
  no_push(f); /* nothing for "unknown" */
  ack(f, "known", "1");
  put(f, "known", "a", "v2", "A2");
  r = push(f);
  ck_assert_str_eq(r->collection, "known");
  ack(f, "known", r->nonce);
  th_resources_free(r);
  mcp_collection_status st = status(f, "unknown");
  ck_assert_uint_eq(st.pushes, 0);
  ck_assert_str_eq(st.pending_nonce, "");
  ck_assert_uint_eq(status(f, "known").acks, 2);
  fx_free(f);
}
END_TEST

START_TEST(test_source_unknown_collection_answered_when_store_gains_it) {
  fx *f = fx_open();
  put(f, "known", "a", "v1", "A");
  subscribe(f, "later", 0);
  subscribe(f, "declared", 0);
  no_push(f);
  put(f, "later", "x", "v1", "X");
  Res *r = push(f);
  ck_assert_str_eq(r->collection, "later");
  ck_assert_int_eq(r->incremental, 0);
  expect_names(r, LIST("x"));
  ck_assert_int_eq(status(f, "later").known, 1);
  th_resources_free(r);
  no_push(f);
  /* Declared empty: answered empty. */
  ck_assert_int_eq(mcp_store_add_collection(f->st, "declared"), 0);
  r = push(f);
  ck_assert_str_eq(r->collection, "declared");
  ck_assert_uint_eq(r->n_resources, 0);
  ck_assert_str_ne(r->nonce, "");
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* ---- the dial-out trigger ---- */

START_TEST(test_source_trigger_is_first_message) {
  fx *f = fx_new();
  f->opts.send_trigger = 1;
  fx_start(f);
  put(f, "c", "a", "v1", "A");
  ck_assert_int_eq(mcp_source_session_want_write(f->s, f->ts), 1);
  mcp_msg *m = NULL;
  ck_assert_int_eq(mcp_source_session_next(f->s, f->ts, &m), 1);
  ck_assert_str_eq(mcp_msg_collection(m), MCP_TRIGGER_COLLECTION);
  Res *r = th_decode_resources(m);
  mcp_msg_free(m);
  ck_assert_str_eq(r->collection, "$triggerCollection");
  ck_assert_str_eq(r->nonce, "");
  ck_assert_uint_eq(r->n_resources, 0);
  ck_assert_uint_eq(r->n_removed_resources, 0);
  ck_assert_int_eq(r->incremental, 0);
  th_resources_free(r);
  no_push(f); /* only once */
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_PUSH), 0);
  fx_free(f);
}
END_TEST

START_TEST(test_source_no_trigger_unless_asked) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  no_push(f);
  fx_free(f);
}
END_TEST

START_TEST(test_source_trigger_nack_is_ignored) {
  fx *f = fx_new();
  f->opts.send_trigger = 1;
  fx_start(f);
  put(f, "c", "a", "v1", "A");
  Res *r = push(f);
  th_resources_free(r);
  ck_assert_int_eq(recv_req(f, NODE, MCP_TRIGGER_COLLECTION, "", 0, NULL,
                            MCP_CODE_UNIMPLEMENTED, "unsupported collection"),
                   0);
  ck_assert_int_eq(recv_req(f, NODE, "", "", 0, NULL, MCP_CODE_UNIMPLEMENTED,
                            "unsupported collection"),
                   0);
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_TRIGGER_IGNORED), 2);
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_STALE), 0);
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_NACK), 0);
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_REQUEST), 0);
  ck_assert_uint_eq(mcp_source_session_collection_count(f->s), 0);
  no_push(f);

  /* The stream then works normally, and a late trigger NACK changes
   * nothing on it. */
  subscribe(f, "c", 0);
  r = push(f);
  ck_assert_str_eq(r->nonce, "1");
  th_resources_free(r);
  ck_assert_int_eq(recv_req(f, NODE, MCP_TRIGGER_COLLECTION, "", 0, NULL,
                            MCP_CODE_UNIMPLEMENTED, ""),
                   0);
  mcp_collection_status st = status(f, "c");
  ck_assert_uint_eq(st.stale, 0);
  ck_assert_uint_eq(st.nacks, 0);
  ck_assert_str_eq(st.pending_nonce, "1");
  ack(f, "c", "1");
  ck_assert_uint_eq(status(f, "c").acks, 1);
  fx_free(f);
}
END_TEST

/* ---- malformed and protocol errors ---- */

START_TEST(test_source_malformed_bytes_leave_session_working) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  static const uint8_t truncated[] = {0x12, 0x05, 'a', 'b'};
  static const uint8_t badtag[] = {0x00, 0x01};
  ck_assert_int_eq(
      mcp_source_session_recv(f->s, truncated, sizeof(truncated), f->ts),
      MCP_ERR_MALFORMED);
  ck_assert_int_eq(mcp_source_session_recv(f->s, badtag, sizeof(badtag), f->ts),
                   MCP_ERR_MALFORMED);
  ck_assert_uint_eq(mcp_source_session_collection_count(f->s), 0);
  ck_assert_str_eq(mcp_source_session_node_id(f->s), "");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  /* In the middle of a push too. */
  ck_assert_int_eq(
      mcp_source_session_recv(f->s, truncated, sizeof(truncated), f->ts),
      MCP_ERR_MALFORMED);
  ck_assert_str_eq(status(f, "c").pending_nonce, "1");
  ack(f, "c", "1");
  ck_assert_uint_eq(status(f, "c").acks, 1);
  fx_free(f);
}
END_TEST

START_TEST(test_source_invalid_utf8_is_malformed) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  ck_assert_int_eq(recv_req(f, NODE, "c\xff", "", 0, NULL, 0, NULL),
                   MCP_ERR_MALFORMED);
  ck_assert_int_eq(recv_req(f, "node\xc3", "c", "", 0, NULL, 0, NULL),
                   MCP_ERR_MALFORMED);
  ck_assert_int_eq(recv_req(f, NODE, "c", "", 1, LIST("a\xed\xb0\x80", "v1"), 0,
                            NULL),
                   MCP_ERR_MALFORMED);
  ck_assert_uint_eq(mcp_source_session_collection_count(f->s), 0);
  ck_assert_str_eq(mcp_source_session_node_id(f->s), "");
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_REQUEST), 0);
  no_push(f);
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  ck_assert_int_eq(recv_req(f, NODE, "c", "1", 0, NULL,
                            MCP_CODE_INVALID_ARGUMENT, "bad \xff message"),
                   MCP_ERR_MALFORMED);
  ck_assert_int_eq(recv_req(f, NODE, "c", "\xff", 0, NULL, 0, NULL),
                   MCP_ERR_MALFORMED);
  mcp_collection_status st = status(f, "c");
  ck_assert_uint_eq(st.nacks, 0);
  ck_assert_uint_eq(st.stale, 0);
  ck_assert_str_eq(st.pending_nonce, "1");
  fx_free(f);
}
END_TEST

START_TEST(test_source_empty_collection_is_protocol_error) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  ck_assert_int_eq(recv_req(f, NODE, "", "", 0, NULL, 0, NULL),
                   MCP_ERR_PROTOCOL);
  /* Only the trigger's UNIMPLEMENTED NACK is excused. */
  ck_assert_int_eq(recv_req(f, NODE, "", "", 0, NULL, MCP_CODE_INVALID_ARGUMENT,
                            "x"),
                   MCP_ERR_PROTOCOL);
  ck_assert_int_eq(recv_req(f, NODE, "", "3", 0, NULL, 0, NULL),
                   MCP_ERR_PROTOCOL);
  static const uint8_t nothing[1] = {0};
  ck_assert_int_eq(mcp_source_session_recv(f->s, nothing, 0, f->ts),
                   MCP_ERR_PROTOCOL); /* decodes: every field empty */
  ck_assert_uint_eq(mcp_source_session_collection_count(f->s), 0);
  ck_assert_str_eq(mcp_source_session_node_id(f->s), "");
  no_push(f);
  subscribe(f, "c", 0);
  Res *r = push(f);
  ck_assert_str_eq(r->nonce, "1");
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* ---- debounce ---- */

START_TEST(test_source_debounce_waits_for_quiet_period) {
  fx *f = fx_new();
  f->opts.debounce = 100 * MS;
  fx_start(f);
  put(f, "c", "a", "v1", "A");
  sync_coll(f, "c", 1);

  f->ts = 10 * MS;
  put(f, "c", "a", "v2", "A2");
  no_push(f);
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), 110 * MS);
  f->ts = 60 * MS; /* another change restarts the quiet period */
  put(f, "c", "b", "v1", "B");
  no_push(f);
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), 160 * MS);
  f->ts = 160 * MS - 1;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  no_push(f);
  f->ts = 160 * MS;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  Res *r = push(f);
  ck_assert_int_eq(r->incremental, 1);
  expect_names(r, LIST("a", "b"));
  th_resources_free(r);
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), MCP_TSTAMP_MAX);
  fx_free(f);
}
END_TEST

START_TEST(test_source_debounce_never_delays_answer) {
  fx *f = fx_new();
  f->opts.debounce = 100 * MS;
  fx_start(f);
  f->ts = 5 * MS;
  put(f, "c", "a", "v1", "A"); /* a change just now */
  subscribe(f, "c", 0);
  Res *r = push(f);
  expect_names(r, LIST("a"));
  th_resources_free(r);
  /* A re-request is a new request too. */
  f->ts = 6 * MS;
  put(f, "c", "a", "v2", "A2");
  subscribe(f, "c", 0);
  r = push(f);
  expect_body(r, "a", "A2");
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* A change that waited while a push was in flight is debounced from its
 * own time, not from the ACK. */
START_TEST(test_source_debounce_after_ack_counts_from_change) {
  fx *f = fx_new();
  f->opts.debounce = 100 * MS;
  fx_start(f);
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  f->ts = 10 * MS;
  put(f, "c", "a", "v2", "A2");
  f->ts = 50 * MS;
  ack(f, "c", "1");
  no_push(f);
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), 110 * MS);
  f->ts = 110 * MS;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  r = push(f);
  expect_body(r, "a", "A2");
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* A window that ended while the transport could not take the push (a
 * send still in flight) is due, not a timer: an expiry in the past would
 * fire at once, forever. */
START_TEST(test_source_expiry_never_in_the_past_for_a_due_push) {
  fx *f = fx_new();
  f->opts.debounce = 100 * MS;
  fx_start(f);
  put(f, "c", "a", "v1", "A");
  sync_coll(f, "c", 1);
  f->ts = 10 * MS;
  put(f, "c", "a", "v2", "A2");
  no_push(f);
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), 110 * MS);
  f->ts = 200 * MS; /* the transport looks again, late */
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  ck_assert_int_eq(mcp_source_session_want_write(f->s, f->ts), 1);
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), MCP_TSTAMP_MAX);
  Res *r = push(f);
  expect_body(r, "a", "A2");
  th_resources_free(r);
  fx_free(f);
}
END_TEST

START_TEST(test_source_max_delay_caps_continuous_churn) {
  fx *f = fx_new();
  f->opts.debounce = 100 * MS;
  f->opts.max_delay = 250 * MS;
  fx_start(f);
  put(f, "c", "a", "v1", "A");
  sync_coll(f, "c", 0);

  /* A change every 50 ms: never quiet for 100 ms. */
  char body[16];
  for (int i = 0; i < 5; ++i) {
    f->ts = (mcp_tstamp)(10 + 50 * i) * MS; /* 10, 60, ..., 210 ms */
    snprintf(body, sizeof(body), "A%d", i);
    put(f, "c", "a", NULL, body);
    no_push(f);
    mcp_tstamp want = f->ts + 100 * MS < 260 * MS ? f->ts + 100 * MS : 260 * MS;
    ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), want);
  }
  f->ts = 260 * MS - 1;
  no_push(f);
  f->ts = 260 * MS; /* 250 ms after the first change was seen */
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  Res *r = push(f);
  expect_body(r, "a", "A4");
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* Issue 21: a debounce with max_delay 0 is bounded by the module's own
 * default, mcp_watch_default_max_delay() (10 x 200 ms = 2 s), as
 * Destination's and xDS's; no program sets it. */
START_TEST(test_source_debounce_without_max_delay_is_bounded_by_default) {
  fx *f = fx_new();
  f->opts.debounce = 200 * MS;
  ck_assert_uint_eq(f->opts.max_delay, 0);
  fx_start(f);
  put(f, "c", "a", "v1", "A");
  sync_coll(f, "c", 0);
  const mcp_tstamp bound = mcp_watch_default_max_delay(200 * MS);
  ck_assert_uint_eq(bound, 2 * MCP_SECONDS);

  /* A change every 100 ms: never quiet for 200 ms. The first is seen at
   * 10 ms, so the push is due at 10 ms + 2 s. */
  char body[16];
  mcp_tstamp due = 10 * MS + bound;
  int i = 0;
  for (mcp_tstamp t = 10 * MS; t < due; t += 100 * MS, i++) {
    f->ts = t;
    snprintf(body, sizeof(body), "A%d", i);
    put(f, "c", "a", NULL, body);
    no_push(f);
    mcp_tstamp want = t + 200 * MS < due ? t + 200 * MS : due;
    ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), want);
  }
  f->ts = due - 1;
  no_push(f);
  f->ts = due;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  Res *r = push(f);
  snprintf(body, sizeof(body), "A%d", i - 1);
  expect_body(r, "a", body);
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* Leading edge: a change after a quiet period (no change and no push of
 * the collection within the window) goes at once, with no timer. */
START_TEST(test_source_isolated_change_is_pushed_at_once) {
  fx *f = fx_new();
  f->opts.debounce = 100 * MS;
  fx_start(f);
  put(f, "c", "a", "v1", "A");
  sync_coll(f, "c", 1);
  f->ts = 200 * MS;
  put(f, "c", "a", "v2", "A2");
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), MCP_TSTAMP_MAX);
  Res *r = push(f);
  expect_body(r, "a", "A2");
  ack(f, "c", r->nonce);
  th_resources_free(r);
  /* Within the window of that push: held until quiet. */
  f->ts = 230 * MS;
  put(f, "c", "b", "v1", "B");
  no_push(f);
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), 330 * MS);
  f->ts = 260 * MS;
  put(f, "c", "c", "v1", "C");
  no_push(f);
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), 360 * MS);
  f->ts = 360 * MS - 1;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  no_push(f);
  f->ts = 360 * MS;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  r = push(f);
  expect_names(r, LIST("b", "c"));
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* The window counts from the push, not from the ACK: a change made while
 * a push was in flight, a window after it and after the change before,
 * goes as soon as the ACK comes. */
START_TEST(test_source_change_waiting_for_ack_after_quiet_goes_on_ack) {
  fx *f = fx_new();
  f->opts.debounce = 100 * MS;
  fx_start(f);
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f); /* at 0 */
  f->ts = 150 * MS;
  put(f, "c", "a", "v2", "A2");
  no_push(f); /* one push in flight */
  f->ts = 170 * MS;
  ack(f, "c", r->nonce);
  th_resources_free(r);
  r = push(f);
  expect_body(r, "a", "A2");
  th_resources_free(r);
  fx_free(f);
}
END_TEST

/* want_write() reads only: the max_delay clock of a change starts at the
 * first next() or handle_expiry() that sees it, never at want_write(). */
START_TEST(test_source_want_write_has_no_side_effects) {
  for (int noted = 0; noted < 2; ++noted) {
    fx *f = fx_new();
    f->opts.debounce = 100 * MS;
    f->opts.max_delay = 250 * MS;
    fx_start(f);
    put(f, "c", "a", "v1", "A");
    sync_coll(f, "c", 0);
    char body[16];
    for (int i = 0; i < 5; ++i) { /* a change every 50 ms from 10 ms */
      f->ts = (mcp_tstamp)(10 + 50 * i) * MS;
      snprintf(body, sizeof(body), "A%d", i);
      put(f, "c", "a", NULL, body);
      if (i == 0 && noted) {
        ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
      }
      ck_assert_int_eq(mcp_source_session_want_write(f->s, f->ts), 0);
    }
    f->ts = 260 * MS;
    /* Only handle_expiry() at 10 ms started the clock: 250 ms later the
     * push is due; want_write() alone started nothing. */
    ck_assert_int_eq(mcp_source_session_want_write(f->s, f->ts), noted);
    ck_assert_int_eq(mcp_source_session_want_write(f->s, f->ts), noted);
    fx_free(f);
  }
}
END_TEST

/* ---- NACK retry ---- */

START_TEST(test_source_nack_retry_pushes_same_content_after_backoff) {
  fx *f = fx_new();
  f->opts.nack_retry_initial = 1 * SEC;
  f->opts.nack_retry_max = 4 * SEC;
  fx_start(f);
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  char sysver[48];
  snprintf(sysver, sizeof(sysver), "%s", r->system_version_info);
  th_resources_free(r);

  f->ts = 10 * MS;
  nack(f, "c", "1", MCP_CODE_UNAVAILABLE, "try later");
  no_push(f);
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), 1010 * MS);
  f->ts = 1010 * MS - 1;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  no_push(f);
  f->ts = 1010 * MS;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  ck_assert_int_eq(mcp_source_session_want_write(f->s, f->ts), 1);
  r = push(f);
  ck_assert_str_eq(r->system_version_info, sysver);
  ck_assert_str_eq(r->nonce, "2");
  expect_names(r, LIST("a"));
  expect_body(r, "a", "A");
  th_resources_free(r);
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), MCP_TSTAMP_MAX);
  fx_free(f);
}
END_TEST

START_TEST(test_source_nack_retry_backoff_doubles_up_to_max) {
  fx *f = fx_new();
  f->opts.nack_retry_initial = 1 * SEC;
  f->opts.nack_retry_max = 4 * SEC;
  fx_start(f);
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  static const mcp_tstamp delays[] = {1 * SEC, 2 * SEC, 4 * SEC, 4 * SEC};
  for (size_t i = 0; i < sizeof(delays) / sizeof(delays[0]); ++i) {
    Res *r = push(f);
    ck_assert_str_eq(r->system_version_info, VER(1));
    f->ts += 10 * MS;
    nack(f, "c", r->nonce, MCP_CODE_UNAVAILABLE, "busy");
    th_resources_free(r);
    mcp_tstamp at = mcp_source_session_get_expiry(f->s);
    ck_assert_uint_eq(at, f->ts + delays[i]);
    f->ts = at;
    ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  }
  /* An ACK resets the backoff. */
  Res *r = push(f);
  ack(f, "c", r->nonce);
  th_resources_free(r);
  put(f, "c", "a", "v2", "A2");
  r = push(f);
  nack(f, "c", r->nonce, MCP_CODE_UNAVAILABLE, "busy");
  th_resources_free(r);
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), f->ts + 1 * SEC);
  fx_free(f);
}
END_TEST

START_TEST(test_source_nack_invalid_argument_is_never_retried) {
  fx *f = fx_new();
  f->opts.nack_retry_initial = 1 * SEC;
  fx_start(f);
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  nack(f, "c", "1", MCP_CODE_INVALID_ARGUMENT, "bad");
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), MCP_TSTAMP_MAX);
  f->ts += 3600 * SEC;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  no_push(f);
  fx_free(f);
}
END_TEST

START_TEST(test_source_nack_retry_codes_are_configurable) {
  fx *f = fx_new();
  static const int codes[] = {MCP_CODE_RESOURCE_EXHAUSTED};
  f->opts.nack_retry_initial = 1 * SEC;
  f->opts.nack_retry_codes = codes;
  f->opts.nnack_retry_codes = 1;
  fx_start(f);
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  nack(f, "c", "1", MCP_CODE_UNAVAILABLE, "not in the list");
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), MCP_TSTAMP_MAX);
  subscribe(f, "c", 0);
  r = push(f);
  th_resources_free(r);
  nack(f, "c", "2", MCP_CODE_RESOURCE_EXHAUSTED, "in the list");
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), f->ts + 1 * SEC);
  fx_free(f);
}
END_TEST

/* Without a retry policy a transient NACK is final too. */
START_TEST(test_source_nack_unavailable_without_policy_is_not_retried) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  nack(f, "c", "1", MCP_CODE_UNAVAILABLE, "busy");
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), MCP_TSTAMP_MAX);
  f->ts += 3600 * SEC;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  no_push(f);
  fx_free(f);
}
END_TEST

/* ---- per-sink views ---- */

typedef struct views {
  mcp_store *canary;
  int calls;
  char seen[32];
} views;

static mcp_store *select_view(const mcp_sink_node *node, void *ud) {
  views *v = ud;
  v->calls++;
  snprintf(v->seen, sizeof(v->seen), "%s", node->id);
  return strcmp(node->id, "canary") == 0 ? v->canary : NULL;
}

static Res *first_answer(const mcp_source_options *o, const char *node) {
  mcp_source_session *s = NULL;
  ck_assert_int_eq(mcp_source_session_new(&s, o, 0), 0);
  size_t len;
  uint8_t *b = th_request(&len, node, "c", "", 0, NULL, 0, NULL);
  th_source_recv(s, b, len, 0, 0);
  b = th_request(&len, "canary", "c", "", 0, NULL, 0, NULL); /* ignored */
  th_source_recv(s, b, len, 0, 0);
  Res *r = th_source_next(s, 0);
  ck_assert_ptr_nonnull(r);
  mcp_source_session_del(s);
  return r;
}

START_TEST(test_source_select_store_gives_per_sink_views) {
  mcp_store *stable = th_store(NULL), *canary = th_store(NULL);
  th_put(stable, "c", "a", "v1", "stable", 0);
  th_put(canary, "c", "a", "v2", "canary", 0);
  th_put(canary, "c", "extra", "v1", "E", 0);
  views v = {canary, 0, ""};
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.store = stable;
  o.select_store = select_view;
  o.select_store_user_data = &v;

  Res *r = first_answer(&o, "canary");
  ck_assert_int_eq(v.calls, 1);
  ck_assert_str_eq(v.seen, "canary");
  expect_names(r, LIST("a", "extra"));
  expect_body(r, "a", "canary");
  th_resources_free(r);

  r = first_answer(&o, "prod-7");
  ck_assert_int_eq(v.calls, 2); /* once per stream */
  ck_assert_str_eq(v.seen, "prod-7");
  expect_names(r, LIST("a"));
  expect_body(r, "a", "stable");
  th_resources_free(r);
  mcp_store_del(stable);
  mcp_store_del(canary);
}
END_TEST

static mcp_store *select_none(const mcp_sink_node *node, void *ud) {
  (void)node;
  (void)ud;
  return NULL;
}

/* No default store and no view for this sink: a PROTOCOL error that, like
 * every one, leaves the session unchanged. */
START_TEST(test_source_no_store_for_sink_is_protocol_error_and_changes_nothing) {
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.select_store = select_none;
  mcp_source_session *s = NULL;
  ck_assert_int_eq(mcp_source_session_new(&s, &o, 0), 0);
  size_t len;
  uint8_t *b = th_request(&len, "nobody", "c", "", 0, NULL, 0, NULL);
  th_source_recv(s, b, len, 0, MCP_ERR_PROTOCOL);
  /* Fed again, it must fail the same way (not crash). */
  b = th_request(&len, "nobody", "c", "", 0, NULL, 0, NULL);
  th_source_recv(s, b, len, 0, MCP_ERR_PROTOCOL);
  ck_assert_str_eq(mcp_source_session_node_id(s), "");
  ck_assert_uint_eq(mcp_source_session_collection_count(s), 0);
  mcp_source_session_del(s);
}
END_TEST

/* ---- introspection and events ---- */

/* A started fixture whose session allocates through |m| (counted), with
 * a debounce of 100 ms. */
static fx *fx_counted(tm_mem *m) {
  tm_init(m, 0);
  fx *f = fx_new();
  f->opts.mem = &m->mem;
  f->opts.debounce = 100 * MS;
  fx_start(f);
  return f;
}

/* Issue 25's bytes per stream: what a subscription needs only while a
 * push is in flight, a request unanswered or a change debounced is made
 * then, and a synced stream is its session, node and subscriptions. */
START_TEST(test_source_synced_stream_keeps_no_live_records) {
  tm_mem m;
  fx *f = fx_counted(&m);
  long empty = m.live; /* the session (and its options) */
  put(f, "c", "a", "v1", "A");
  put(f, "d", "a", "v1", "A");
  sync_coll(f, "c", 1);
  sync_coll(f, "d", 1);
  ck_assert_int_eq(m.live, empty + 2); /* the node, the subscriptions */

  f->ts = 10 * MS;
  subscribe(f, "c", 1); /* asked again: an answer is due */
  ck_assert_int_eq(m.live, empty + 3);
  Res *r = push(f);
  ck_assert_int_eq(m.live, empty + 3); /* the same record, now in flight */
  ack(f, "c", r->nonce);
  th_resources_free(r);
  ck_assert_int_eq(m.live, empty + 2);

  /* A change under the debounce: noted with its time, then pushed. */
  f->ts = 20 * MS;
  put(f, "d", "a", "v2", "B");
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  ck_assert_int_eq(m.live, empty + 3);
  f->ts = 200 * MS;
  r = push(f);
  ck_assert_str_eq(r->collection, "d");
  ack(f, "d", r->nonce);
  th_resources_free(r);
  ck_assert_int_eq(m.live, empty + 2);
  fx_free(f);
  ck_assert_int_eq(m.live, 0);
  tm_fini(&m);
}
END_TEST

/* Out of memory where a record or a V1 buffer is made: the call says
 * NOMEM, changes nothing, and works once memory is back. */
START_TEST(test_source_nomem_for_a_live_record_or_v1_text_changes_nothing) {
  tm_mem m;
  fx *f = fx_counted(&m);
  put(f, "c", "a", "v1", "A");
  sync_coll(f, "c", 1);
  long live = m.live;

  /* A debounced change, noted: its record cannot be made. */
  f->ts = 10 * MS;
  put(f, "c", "a", "v2", "B");
  m.fail_at = m.count + 1;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts),
                   MCP_ERR_NOMEM);
  ck_assert_int_eq(m.live, live);
  ck_assert_uint_eq(mcp_source_session_get_expiry(f->s), 110 * MS);
  m.fail_at = 0;
  ck_assert_int_eq(mcp_source_session_handle_expiry(f->s, f->ts), 0);
  ck_assert_int_eq(m.live, live + 1);

  /* A V1 caller's first status: its buffer cannot be made. */
  mcp_collection_status st;
  m.fail_at = m.count + 1;
  ck_assert_int_eq(mcp_source_session_collection_status_versioned(
                       f->s, 0, f->ts, MCP_COLLECTION_STATUS_V1, &st),
                   MCP_ERR_NOMEM);
  m.fail_at = 0;
  ck_assert_int_eq(mcp_source_session_collection_status_versioned(
                       f->s, 0, f->ts, MCP_COLLECTION_STATUS_V1, &st), 0);
  ck_assert_str_eq(st.acked_version, VER(1));
  fx_free(f);
  ck_assert_int_eq(m.live, 0);
  tm_fini(&m);
}
END_TEST

/* A caller built against V1 keeps V1's rule: the strings live until the
 * next call on that session, whatever other sessions are asked meanwhile.
 * V2's live in one buffer per thread, until the next status call. */
START_TEST(test_source_status_v1_strings_outlive_other_sessions_status) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  sync_coll(f, "c", 0);
  put(f, "c", "a", "v2", "B");
  Res *r = push(f); /* in flight: nonce 2, version 2 */
  mcp_source_session *other = NULL;
  ck_assert_int_eq(mcp_source_session_new(&other, &f->opts, f->ts), 0);
  size_t len;
  uint8_t *q = th_request(&len, "other", "c", "", 0, NULL, 0, NULL);
  th_source_recv(other, q, len, f->ts, 0);
  mcp_msg *m = NULL;
  ck_assert_int_eq(mcp_source_session_next(other, f->ts, &m), 1);
  mcp_msg_free(m); /* other's push in flight: nonce 1, version 2 */

  mcp_collection_status v1, v2;
  ck_assert_int_eq(mcp_source_session_collection_status_versioned(
                       f->s, 0, f->ts, MCP_COLLECTION_STATUS_V1, &v1), 0);
  ck_assert_int_eq(mcp_source_session_collection_status(other, 0, f->ts, &v2),
                   0);
  ck_assert_str_eq(v2.pending_nonce, "1");
  ck_assert_int_eq(mcp_source_session_collection_status_versioned(
                       other, 0, f->ts, MCP_COLLECTION_STATUS_V1, &v2), 0);
  ck_assert_str_eq(v1.pending_nonce, "2");
  ck_assert_str_eq(v1.pending_version, VER(2));
  ck_assert_str_eq(v1.acked_version, VER(1));
  ck_assert_str_eq(v2.pending_nonce, "1");
  ck_assert_str_eq(v2.pending_version, VER(2));
  ck_assert_str_eq(v2.acked_version, "");
  th_resources_free(r);
  mcp_source_session_del(other);
  fx_free(f);
}
END_TEST

START_TEST(test_source_status_reports_pending_and_acked) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 1);
  mcp_collection_status st = status(f, "c");
  ck_assert_int_eq(st.known, 1);
  ck_assert_int_eq(st.incremental, 1);
  ck_assert_str_eq(st.pending_nonce, "");
  ck_assert_uint_eq(st.pushes, 0);

  f->ts = 100 * MS;
  Res *r = push(f);
  th_resources_free(r);
  f->ts = 130 * MS;
  st = status(f, "c");
  ck_assert_str_eq(st.collection, "c");
  ck_assert_str_eq(st.pending_nonce, "1");
  ck_assert_str_eq(st.pending_version, VER(1));
  ck_assert_uint_eq(st.pending_age, 30 * MS);
  ck_assert_str_eq(st.acked_version, "");
  ck_assert_uint_eq(st.pushes, 1);
  ck_assert_uint_eq(st.acks, 0);

  ack(f, "c", "1");
  st = status(f, "c");
  ck_assert_str_eq(st.acked_version, VER(1));
  ck_assert_str_eq(st.pending_nonce, "");
  ck_assert_str_eq(st.pending_version, "");
  ck_assert_uint_eq(st.pending_age, 0);
  ck_assert_uint_eq(st.acks, 1);

  put(f, "c", "a", "v2", "A2");
  r = push(f);
  th_resources_free(r);
  nack(f, "c", "2", MCP_CODE_INVALID_ARGUMENT, "no");
  ack(f, "c", "2"); /* now stale */
  st = status(f, "c");
  ck_assert_str_eq(st.acked_version, VER(1)); /* the NACK kept it */
  ck_assert_uint_eq(st.pushes, 2);
  ck_assert_uint_eq(st.acks, 1);
  ck_assert_uint_eq(st.nacks, 1);
  ck_assert_uint_eq(st.stale, 1);
  mcp_collection_status out;
  ck_assert_int_eq(mcp_source_session_collection_status(f->s, 1, f->ts, &out),
                   MCP_ERR_NOT_FOUND);
  fx_free(f);
}
END_TEST

/* A push the sink never answered because it asked again is counted once,
 * as a push: neither ACKed nor NACKed. */
START_TEST(test_source_status_counts_an_abandoned_push_as_neither_ack_nor_nack) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  subscribe(f, "c", 0);
  Res *r = push(f);
  th_resources_free(r);
  subscribe(f, "c", 0); /* asks again: push 1 is abandoned */
  mcp_collection_status st = status(f, "c");
  ck_assert_uint_eq(st.pushes, 1);
  ck_assert_uint_eq(st.acks, 0);
  ck_assert_uint_eq(st.nacks, 0);
  ck_assert_str_eq(st.pending_nonce, "");
  r = push(f);
  ck_assert_str_eq(r->nonce, "2");
  th_resources_free(r);
  ack(f, "c", "1"); /* the abandoned one: stale */
  ack(f, "c", "2");
  st = status(f, "c");
  ck_assert_uint_eq(st.pushes, 2);
  ck_assert_uint_eq(st.acks, 1);
  ck_assert_uint_eq(st.nacks, 0);
  ck_assert_uint_eq(st.stale, 1);
  fx_free(f);
}
END_TEST

/* Counts live bytes, for the test below. */
typedef struct live_mem {
  mcp_mem mem;
  size_t bytes;
} live_mem;
typedef struct live_hdr {
  size_t n;
  max_align_t pad;
} live_hdr;
static void *live_malloc(size_t n, void *ud) {
  live_hdr *h = malloc(sizeof(live_hdr) + n);
  if (!h) {
    return NULL;
  }
  h->n = n;
  ((live_mem *)ud)->bytes += n;
  return h + 1;
}
static void live_free(void *p, void *ud) {
  if (p) {
    live_hdr *h = (live_hdr *)p - 1;
    ((live_mem *)ud)->bytes -= h->n;
    free(h);
  }
}
static void *live_calloc(size_t k, size_t n, void *ud) {
  void *p = live_malloc(k * n, ud);
  return p ? memset(p, 0, k * n) : NULL;
}
static void *live_realloc(void *p, size_t n, void *ud) {
  void *q = live_malloc(n, ud);
  if (q && p) {
    size_t old = ((live_hdr *)p - 1)->n;
    memcpy(q, p, old < n ? old : n);
    live_free(p, ud);
  }
  return q;
}

/* Streams made alike keep one copy of their options, in their store: a
 * session adds nothing to the store's memory but the first of a kind, and
 * the copy goes with the last session that uses it. */
START_TEST(test_source_sessions_of_a_store_share_their_options) {
  live_mem lm = {{&lm, live_malloc, live_free, live_calloc, live_realloc}, 0};
  mcp_store *st = th_store(&lm.mem);
  ck_assert_ptr_nonnull(st);
  size_t base = lm.bytes;
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.store = st;
  mcp_source_session *a, *b, *c;
  ck_assert_int_eq(mcp_source_session_new(&a, &o, 0), 0);
  size_t one = lm.bytes;
  ck_assert_uint_gt(one, base);
  ck_assert_int_eq(mcp_source_session_new(&b, &o, 0), 0);
  ck_assert_uint_eq(lm.bytes, one); /* the same options: shared */
  o.debounce = 5 * MS;
  ck_assert_int_eq(mcp_source_session_new(&c, &o, 0), 0);
  ck_assert_uint_eq(lm.bytes, 2 * one - base); /* other options: a copy */
  mcp_source_session_del(a);
  ck_assert_uint_eq(lm.bytes, 2 * one - base); /* b still uses it */
  mcp_source_session_del(c);
  ck_assert_uint_eq(lm.bytes, one);
  mcp_source_session_del(b);
  ck_assert_uint_eq(lm.bytes, base);
  mcp_store_del(st);
  ck_assert_uint_eq(lm.bytes, 0);
}
END_TEST

START_TEST(test_source_events_report_request_push_ack_nack) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v1", "B");
  subscribe(f, "c", 1);
  const th_event *e = th_evlog_last(&f->log, MCP_EVENT_REQUEST);
  ck_assert_ptr_nonnull(e);
  ck_assert_str_eq(e->collection, "c");
  ck_assert_str_eq(e->nonce, "");
  ck_assert_int_eq(e->incremental, 1);

  f->ts = 1 * SEC;
  Res *r = push(f);
  th_resources_free(r);
  e = th_evlog_last(&f->log, MCP_EVENT_PUSH);
  ck_assert_ptr_nonnull(e);
  ck_assert_str_eq(e->collection, "c");
  ck_assert_str_eq(e->nonce, "1");
  ck_assert_str_eq(e->version, VER(2));
  ck_assert_uint_eq(e->nresources, 2);
  ck_assert_uint_eq(e->nremoved, 0);
  ck_assert_int_eq(e->incremental, 0);

  f->ts = 1 * SEC + 7 * MS;
  ack(f, "c", "1");
  e = th_evlog_last(&f->log, MCP_EVENT_ACK);
  ck_assert_ptr_nonnull(e);
  ck_assert_str_eq(e->collection, "c");
  ck_assert_str_eq(e->nonce, "1");
  ck_assert_str_eq(e->version, VER(2));
  ck_assert_uint_eq(e->latency, 7 * MS);

  del(f, "c", "a");
  f->ts = 2 * SEC;
  r = push(f);
  th_resources_free(r);
  e = th_evlog_last(&f->log, MCP_EVENT_PUSH);
  ck_assert_str_eq(e->nonce, "2");
  ck_assert_uint_eq(e->nresources, 0);
  ck_assert_uint_eq(e->nremoved, 1);
  ck_assert_int_eq(e->incremental, 1);

  f->ts = 2 * SEC + 40 * MS;
  nack(f, "c", "2", MCP_CODE_INTERNAL, "apply failed");
  e = th_evlog_last(&f->log, MCP_EVENT_NACK);
  ck_assert_ptr_nonnull(e);
  ck_assert_str_eq(e->nonce, "2");
  ck_assert_str_eq(e->version, VER(3));
  ck_assert_int_eq(e->code, MCP_CODE_INTERNAL);
  ck_assert_str_eq(e->message, "apply failed");
  ck_assert_uint_eq(e->latency, 40 * MS);

  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_REQUEST), 1);
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_PUSH), 2);
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_ACK), 1);
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_NACK), 1);
  ck_assert_uint_eq(th_evlog_count(&f->log, MCP_EVENT_STALE), 0);
  fx_free(f);
}
END_TEST

/* ---- messages ---- */

static mcp_msg *next_msg(fx *f) {
  mcp_msg *m = NULL;
  ck_assert_int_eq(mcp_source_session_next(f->s, f->ts, &m), 1);
  ck_assert_ptr_nonnull(m);
  return m;
}

START_TEST(test_source_msg_iov_concatenation_equals_flatten) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v1", "BBBBBBBB");
  put(f, "c", "c", "v1", "");
  subscribe(f, "c", 0);
  mcp_msg *m = next_msg(f);
  ck_assert_str_eq(mcp_msg_collection(m), "c");
  size_t len = mcp_msg_len(m);
  ck_assert_uint_gt(len, 0);
  uint8_t *flat = malloc(len), *cat = malloc(len);
  mcp_msg_flatten(m, flat);
  const mcp_iovec *iov = NULL;
  size_t n = mcp_msg_iov(m, &iov);
  ck_assert_uint_ge(n, 1);
  size_t off = 0;
  for (size_t i = 0; i < n; ++i) {
    ck_assert_uint_le(off + iov[i].len, len);
    memcpy(cat + off, iov[i].base, iov[i].len);
    off += iov[i].len;
  }
  ck_assert_uint_eq(off, len);
  ck_assert_mem_eq(cat, flat, len);
  Res *r = istio__mcp__v1alpha1__resources__unpack(NULL, len, cat);
  ck_assert_ptr_nonnull(r);
  expect_names(r, LIST("a", "b", "c"));
  th_resources_free(r);
  free(flat);
  free(cat);
  mcp_msg_free(m);
  mcp_msg_free(NULL);
  fx_free(f);
}
END_TEST

START_TEST(test_source_msg_outlives_store_changes_and_store) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "A");
  put(f, "c", "b", "v1", "B");
  subscribe(f, "c", 0);
  mcp_msg *m = next_msg(f);
  size_t len = mcp_msg_len(m);
  uint8_t *before = malloc(len), *after = malloc(len);
  mcp_msg_flatten(m, before);

  put(f, "c", "a", "v2", "A changed"); /* the old version's bytes go */
  del(f, "c", "b");
  mcp_msg_flatten(m, after);
  ck_assert_mem_eq(after, before, len);

  mcp_source_session_del(f->s);
  f->s = NULL;
  mcp_store_del(f->st);
  f->st = NULL;
  ck_assert_uint_eq(mcp_msg_len(m), len);
  memset(after, 0, len);
  mcp_msg_flatten(m, after);
  ck_assert_mem_eq(after, before, len);
  Res *r = th_decode_resources(m);
  expect_names(r, LIST("a", "b"));
  expect_body(r, "a", "A");
  expect_body(r, "b", "B");
  th_resources_free(r);
  mcp_msg_free(m);
  free(before);
  free(after);
  fx_free(f);
}
END_TEST

/* A push of many fragments (resources and removals interleaved, the own
 * bytes growing) comes out whole. */
START_TEST(test_source_incremental_push_with_many_changes_decodes) {
  fx *f = fx_open();
  char name[80], body[16];
  for (int i = 0; i < 100; ++i) {
    snprintf(name, sizeof(name), "namespace-%03d/a-rather-long-resource-name", i);
    put(f, "c", name, "v1", "B");
  }
  sync_coll(f, "c", 1);
  for (int i = 0; i < 50; ++i) {
    snprintf(name, sizeof(name), "namespace-%03d/a-rather-long-resource-name", i);
    if (i % 5 < 2) {
      snprintf(body, sizeof(body), "B%d", i);
      put(f, "c", name, "v2", body);
    } else {
      del(f, "c", name);
    }
  }
  mcp_msg *m = NULL;
  ck_assert_int_eq(mcp_source_session_next(f->s, f->ts, &m), 1);
  size_t len = mcp_msg_len(m);
  uint8_t *flat = malloc(len), *cat = malloc(len);
  mcp_msg_flatten(m, flat);
  const mcp_iovec *iov = NULL;
  size_t n = mcp_msg_iov(m, &iov), off = 0;
  for (size_t i = 0; i < n; ++i) {
    ck_assert_uint_le(off + iov[i].len, len);
    memcpy(cat + off, iov[i].base, iov[i].len);
    off += iov[i].len;
  }
  ck_assert_uint_eq(off, len);
  ck_assert_mem_eq(cat, flat, len);
  Res *r = th_decode_resources(m);
  ck_assert_int_eq(r->incremental, 1);
  ck_assert_uint_eq(r->n_resources, 20);
  ck_assert_uint_eq(r->n_removed_resources, 30);
  for (int i = 0; i < 50; ++i) {
    snprintf(name, sizeof(name), "namespace-%03d/a-rather-long-resource-name", i);
    if (i % 5 < 2) {
      snprintf(body, sizeof(body), "B%d", i);
      expect_body(r, name, body);
    } else {
      ck_assert_int_ge(th_find_removed(r, name), 0);
    }
  }
  th_resources_free(r);
  free(flat);
  free(cat);
  mcp_msg_free(m);
  fx_free(f);
}
END_TEST

/* Each resource version is encoded once: two streams send the same bytes
 * (the same fragment, not a copy). */
START_TEST(test_source_resource_bytes_shared_across_streams) {
  fx *f = fx_open();
  put(f, "c", "a", "v1", "a body long enough to be recognisable");
  subscribe(f, "c", 0);
  mcp_source_session *s2 = NULL;
  ck_assert_int_eq(mcp_source_session_new(&s2, &f->opts, f->ts), 0);
  size_t len;
  uint8_t *b = th_request(&len, "other", "c", "", 0, NULL, 0, NULL);
  th_source_recv(s2, b, len, f->ts, 0);
  mcp_msg *m1 = next_msg(f), *m2 = NULL;
  ck_assert_int_eq(mcp_source_session_next(s2, f->ts, &m2), 1);
  const mcp_iovec *v1, *v2;
  size_t n1 = mcp_msg_iov(m1, &v1), n2 = mcp_msg_iov(m2, &v2);
  int shared = 0;
  for (size_t i = 0; i < n1; ++i) {
    for (size_t k = 0; k < n2; ++k) {
      shared += v1[i].base == v2[k].base && v1[i].len == v2[k].len &&
                v1[i].len > 40;
    }
  }
  ck_assert_int_eq(shared, 1);
  mcp_msg_free(m1);
  mcp_msg_free(m2);
  mcp_source_session_del(s2);
  fx_free(f);
}
END_TEST

/* Events carry the sizes that metrics report: the encoded push on the
 * source, the answered message on the sink. */
static size_t last_push_bytes, last_sink_bytes;
static void size_cb(const mcp_event *ev, void *ud) {
  (void)ud;
  if (ev->type == MCP_EVENT_PUSH) {
    last_push_bytes = ev->bytes;
  } else if (ev->type == MCP_EVENT_ACK) {
    last_sink_bytes = ev->bytes;
  }
}

START_TEST(test_source_events_report_message_sizes) {
  mcp_store *st = th_store(NULL);
  th_put(st, "c", "a", "1", "some body bytes", 1);
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.store = st;
  o.on_event = size_cb;
  mcp_source_session *s;
  ck_assert_int_eq(mcp_source_session_new(&s, &o, 1), 0);
  size_t n;
  uint8_t *b = th_request(&n, "n", "c", "", 0, NULL, 0, NULL);
  th_source_recv(s, b, n, 2, 0);
  mcp_msg *m;
  ck_assert_int_eq(mcp_source_session_next(s, 3, &m), 1);
  ck_assert_uint_gt(last_push_bytes, 15);
  ck_assert_uint_eq(last_push_bytes, mcp_msg_len(m));

  static const char *colls[] = {"c"};
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.collections = colls;
  so.ncollections = 1;
  so.on_event = size_cb;
  mcp_sink_state *state;
  mcp_sink_session *k;
  ck_assert_int_eq(mcp_sink_state_new(&state, &so), 0);
  ck_assert_int_eq(mcp_sink_session_new(&k, state, 0), 0);
  size_t len = mcp_msg_len(m);
  uint8_t *flat = malloc(len);
  mcp_msg_flatten(m, flat);
  ck_assert_int_eq(mcp_sink_session_recv(k, flat, len, 4), 0);
  ck_assert_uint_eq(last_sink_bytes, len);
  free(flat);
  mcp_msg_free(m);
  mcp_sink_session_del(k);
  mcp_sink_state_del(state);
  mcp_source_session_del(s);
  mcp_store_del(st);
}
END_TEST

static Suite *source_suite(void) {
  Suite *s = suite_create("core_source");
  TCase *tc = tcase_create("first");
  tcase_add_test(tc, test_source_events_report_message_sizes);
  tcase_add_test(tc, test_source_initial_request_gets_full_state);
  tcase_add_test(tc, test_source_first_answer_full_even_when_incremental_asked);
  tcase_add_test(tc, test_source_empty_collection_is_answered);
  tcase_add_test(tc, test_source_emptied_collection_is_answered);
  tcase_add_test(tc, test_source_nonces_are_per_stream_decimal_sequence);
  tcase_add_test(tc, test_source_sink_node_of_first_request_identifies_stream);
  suite_add_tcase(s, tc);

  tc = tcase_create("in_flight");
  tcase_add_test(tc, test_source_one_push_in_flight_per_collection);
  tcase_add_test(tc, test_source_changes_while_pending_coalesce);
  tcase_add_test(tc, test_source_collections_are_independent);
  tcase_add_test(tc, test_source_round_robin_serves_every_collection);
  suite_add_tcase(s, tc);

  tc = tcase_create("ack");
  tcase_add_test(tc, test_source_ack_makes_next_push_incremental);
  tcase_add_test(tc, test_source_non_incremental_stream_always_gets_full_state);
  tcase_add_test(tc, test_source_incremental_add_update_delete);
  tcase_add_test(tc, test_source_incremental_delete_then_readd_is_sent_as_resource);
  tcase_add_test(tc, test_source_replace_pushes_only_real_changes);
  suite_add_tcase(s, tc);

  tc = tcase_create("nack");
  tcase_add_test(tc, test_source_nack_does_not_resend);
  tcase_add_test(tc, test_source_nack_then_change_is_pushed);
  tcase_add_test(tc, test_source_nack_with_change_meanwhile_pushes_at_once);
  tcase_add_test(tc, test_source_nack_next_push_is_difference_from_held);
  tcase_add_test(tc, test_source_nack_code_and_message_in_status);
  suite_add_tcase(s, tc);

  tc = tcase_create("stale");
  tcase_add_test(tc, test_source_stale_nonce_is_ignored_and_counted);
  tcase_add_test(tc, test_source_stale_nack_is_not_a_nack);
  tcase_add_test(tc, test_source_non_numeric_nonce_is_stale);
  tcase_add_test(tc, test_source_nonce_for_unrequested_collection_is_stale);
  tcase_add_test(tc, test_source_duplicate_ack_is_stale);
  suite_add_tcase(s, tc);

  tc = tcase_create("rerequest");
  tcase_add_test(tc, test_source_rerequest_while_pending_is_answered_at_once);
  tcase_add_test(tc, test_source_ack_for_abandoned_nonce_is_stale);
  tcase_add_test(tc, test_source_rerequest_forgets_what_sink_held);
  tcase_add_test(tc, test_source_rerequest_after_nack_is_answered);
  tcase_add_test(tc, test_source_rerequest_switches_to_full_state);
  suite_add_tcase(s, tc);

  tc = tcase_create("resume");
  tcase_add_test(tc, test_source_resume_sends_only_difference);
  tcase_add_test(tc, test_source_resume_waits_until_the_versions_are_reached);
  tcase_add_test(tc, test_source_resume_catchup_wait_ends_at_its_timeout);
  tcase_add_test(tc, test_source_no_catchup_wait_without_hook_or_resume);
  tcase_add_test(tc, test_source_resume_removes_resource_deleted_while_away);
  tcase_add_test(tc, test_source_resume_answer_sent_when_diff_empty);
  tcase_add_test(tc, test_source_resume_nack_keeps_resuming_from_initial_versions);
  tcase_add_test(tc, test_source_resume_duplicate_key_last_wins);
  tcase_add_test(tc, test_source_non_incremental_request_ignores_initial_versions);
  tcase_add_test(tc, test_source_rerequest_with_initial_versions_resumes);
  suite_add_tcase(s, tc);

  tc = tcase_create("compaction");
  tcase_add_test(tc, test_source_stream_older_than_compaction_gets_full_state);
  tcase_add_test(tc, test_source_stream_within_change_log_gets_removals);
  suite_add_tcase(s, tc);

  tc = tcase_create("unknown");
  tcase_add_test(tc, test_source_unknown_collection_keeps_stream);
  tcase_add_test(tc, test_source_unknown_collection_answered_when_store_gains_it);
  suite_add_tcase(s, tc);

  tc = tcase_create("trigger");
  tcase_add_test(tc, test_source_trigger_is_first_message);
  tcase_add_test(tc, test_source_no_trigger_unless_asked);
  tcase_add_test(tc, test_source_trigger_nack_is_ignored);
  suite_add_tcase(s, tc);

  tc = tcase_create("errors");
  tcase_add_test(tc, test_source_malformed_bytes_leave_session_working);
  tcase_add_test(tc, test_source_invalid_utf8_is_malformed);
  tcase_add_test(tc, test_source_empty_collection_is_protocol_error);
  suite_add_tcase(s, tc);

  tc = tcase_create("debounce");
  tcase_add_test(tc, test_source_debounce_waits_for_quiet_period);
  tcase_add_test(tc, test_source_debounce_never_delays_answer);
  tcase_add_test(tc, test_source_debounce_after_ack_counts_from_change);
  tcase_add_test(tc, test_source_max_delay_caps_continuous_churn);
  tcase_add_test(tc, test_source_debounce_without_max_delay_is_bounded_by_default);
  tcase_add_test(tc, test_source_isolated_change_is_pushed_at_once);
  tcase_add_test(tc, test_source_change_waiting_for_ack_after_quiet_goes_on_ack);
  tcase_add_test(tc, test_source_want_write_has_no_side_effects);
  tcase_add_test(tc, test_source_expiry_never_in_the_past_for_a_due_push);
  suite_add_tcase(s, tc);

  tc = tcase_create("retry");
  tcase_add_test(tc, test_source_nack_retry_pushes_same_content_after_backoff);
  tcase_add_test(tc, test_source_nack_retry_backoff_doubles_up_to_max);
  tcase_add_test(tc, test_source_nack_invalid_argument_is_never_retried);
  tcase_add_test(tc, test_source_nack_retry_codes_are_configurable);
  tcase_add_test(tc, test_source_nack_unavailable_without_policy_is_not_retried);
  suite_add_tcase(s, tc);

  tc = tcase_create("views");
  tcase_add_test(tc, test_source_select_store_gives_per_sink_views);
  tcase_add_test(tc, test_source_no_store_for_sink_is_protocol_error_and_changes_nothing);
  suite_add_tcase(s, tc);

  tc = tcase_create("introspection");
  tcase_add_test(tc, test_source_status_reports_pending_and_acked);
  tcase_add_test(tc, test_source_synced_stream_keeps_no_live_records);
  tcase_add_test(tc, test_source_status_v1_strings_outlive_other_sessions_status);
  tcase_add_test(tc, test_source_nomem_for_a_live_record_or_v1_text_changes_nothing);
  tcase_add_test(tc, test_source_status_counts_an_abandoned_push_as_neither_ack_nor_nack);
  tcase_add_test(tc, test_source_sessions_of_a_store_share_their_options);
  tcase_add_test(tc, test_source_events_report_request_push_ack_nack);
  suite_add_tcase(s, tc);

  tc = tcase_create("messages");
  tcase_add_test(tc, test_source_msg_iov_concatenation_equals_flatten);
  tcase_add_test(tc, test_source_msg_outlives_store_changes_and_store);
  tcase_add_test(tc, test_source_resource_bytes_shared_across_streams);
  tcase_add_test(tc, test_source_incremental_push_with_many_changes_decodes);
  suite_add_tcase(s, tc);
  return s;
}


int main(void) {
  SRunner *sr = srunner_create(source_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
