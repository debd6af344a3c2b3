/* core/engine/admit.c: the admission policy both transports share, on a
 * virtual clock. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "helper.h"
#include "mcp/engine.h"

#define MS MCP_MILLISECONDS
#define S MCP_SECONDS

static int ids[4096]; /* user pointers: &ids[i] */
#define U(i) ((void *)&ids[(i)])
#define IDX(p) ((int)((int *)(p)-ids))

/* Options with every limit off but the ones a test sets. */
static mcp_admit_options unlimited(void) {
  mcp_admit_options o;
  memset(&o, 0, sizeof(o));
  o.max_streams = SIZE_MAX;
  o.max_streams_per_peer = SIZE_MAX;
  o.stream_rate = UINT32_MAX;
  o.stream_burst = 1;
  o.max_initial = SIZE_MAX;
  o.max_initial_per_peer = SIZE_MAX;
  o.initial_timeout = MCP_TSTAMP_MAX;
  o.wait_timeout = MCP_TSTAMP_MAX;
  o.peer_stream_rate = UINT32_MAX;
  return o;
}

static mcp_admit *mk(const mcp_admit_options *o) {
  mcp_admit *a = NULL;
  ck_assert_int_eq(mcp_admit_new(&a, o, NULL, 0), 0);
  return a;
}

/* Admits stream |i| from |peer|; returns the verdict, the ticket in *t. */
static mcp_admit_verdict adm(mcp_admit *a, const char *peer, int i,
                             mcp_tstamp ts, mcp_admit_ticket **t) {
  mcp_admit_result r;
  mcp_admit_ticket *tk = NULL;
  ck_assert_int_eq(mcp_admit_stream(a, peer, 1, U(i), ts, &tk, &r), 0);
  ck_assert_ptr_eq(r.user, U(i));
  if (r.verdict == MCP_ADMIT_REFUSE)
    ck_assert_ptr_null(tk);
  else
    ck_assert_ptr_nonnull(tk);
  if (t)
    *t = tk;
  return r.verdict;
}

static mcp_admit_stats st(const mcp_admit *a) {
  mcp_admit_stats s;
  mcp_admit_get_stats(a, &s);
  return s;
}

START_TEST(test_admit_defaults_derive_per_peer_shares) {
  mcp_admit_options o;
  mcp_admit_options_default(&o);
  ck_assert_uint_eq(o.max_streams, 100000);
  ck_assert_uint_eq(o.max_streams_per_peer, 25000);
  ck_assert_uint_eq(o.max_initial, 64);
  ck_assert_uint_eq(o.max_initial_per_peer, 16);
  ck_assert_uint_eq(o.wait_timeout, 5 * S);
  ck_assert_uint_eq(o.initial_timeout, 10 * S);
  ck_assert_uint_eq(o.peer_stream_rate, 100);
  ck_assert_uint_eq(o.peer_stream_burst, 100);
  ck_assert_uint_eq(o.max_rate_peers, 4096);
  /* A V1 caller's struct ends before them; it gets them at the defaults. */
  mcp_admit_options v1;
  memset(&v1, 0xab, sizeof(v1));
  mcp_admit_options_default_versioned(MCP_ADMIT_OPTIONS_V1, &v1);
  ck_assert_uint_eq(v1.wait_timeout, 5 * S);
  ck_assert_uint_eq(v1.peer_stream_rate, 0xabababab); /* not written */
  mcp_admit *av1 = NULL;
  ck_assert_int_eq(
      mcp_admit_new_versioned(&av1, MCP_ADMIT_OPTIONS_V1, &v1, NULL, 0), 0);
  ck_assert_uint_eq(mcp_admit_get_options(av1)->peer_stream_burst, 100);
  mcp_admit_del(av1);
  memset(&o, 0, sizeof(o));
  o.max_initial = 2;
  o.max_streams = SIZE_MAX;
  mcp_admit_options_normalize(&o);
  ck_assert_uint_eq(o.max_initial_per_peer, 1); /* at least one */
  ck_assert_uint_eq(o.max_streams_per_peer, SIZE_MAX);
}
END_TEST

START_TEST(test_admit_refuses_beyond_max_streams_resource_exhausted) {
  mcp_admit_options o = unlimited();
  o.max_streams = 3;
  mcp_admit *a = mk(&o);
  mcp_admit_ticket *t[3];
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(adm(a, "p", i, 0, &t[i]), MCP_ADMIT_RUN);
  mcp_admit_result r;
  mcp_admit_ticket *x;
  ck_assert_int_eq(mcp_admit_stream(a, "q", 1, U(9), 0, &x, &r), 0);
  ck_assert_int_eq(r.verdict, MCP_ADMIT_REFUSE);
  ck_assert_int_eq(r.status, MCP_CODE_RESOURCE_EXHAUSTED);
  ck_assert_int_eq(r.reason, MCP_ADMIT_MAX_STREAMS);
  ck_assert_str_eq(r.details, "too many streams");
  mcp_admit_release(a, t[0]);
  ck_assert_int_eq(adm(a, "q", 9, 0, &x), MCP_ADMIT_RUN);
  ck_assert_uint_eq(st(a).refused_max_streams, 1);
  mcp_admit_del(a); /* frees the tickets still out */
}
END_TEST

/* Issue 21: the transports' one stats shape (mcp/engine.h) takes the
 * admission counters through one core function, and nothing else of it;
 * its versioned copy writes only the caller's version. */
START_TEST(test_transport_stats_take_admission_counters_only) {
  mcp_admit_options o = unlimited();
  o.max_streams = 2;
  o.max_initial = 1;
  mcp_admit *a = mk(&o);
  mcp_admit_ticket *t[2];
  ck_assert_int_eq(adm(a, "p", 0, 0, &t[0]), MCP_ADMIT_RUN);
  ck_assert_int_eq(adm(a, "p", 1, 0, &t[1]), MCP_ADMIT_WAIT); /* a slot */
  ck_assert_int_eq(adm(a, "q", 2, 0, NULL), MCP_ADMIT_REFUSE);
  mcp_transport_stats ts;
  memset(&ts, 0, sizeof(ts));
  ts.connections = 7;
  ts.opened = 9;
  mcp_transport_stats_admit(&ts, a);
  mcp_admit_stats s = st(a);
  ck_assert_uint_eq(ts.refused_max_streams, 1);
  ck_assert_uint_eq(ts.refused_max_streams, s.refused_max_streams);
  ck_assert_uint_eq(ts.initial, 1);
  ck_assert_uint_eq(ts.initial_peak, s.initial_peak);
  ck_assert_uint_eq(ts.waiting_initial, 1);
  ck_assert_uint_eq(ts.connections, 7); /* not admission's */
  ck_assert_uint_eq(ts.opened, 9);
  ck_assert_uint_eq(ts.streams, 0); /* the transport counts its own */
  mcp_transport_stats before = ts;
  mcp_transport_stats_admit(&ts, NULL); /* no admission: no change */
  ck_assert_int_eq(memcmp(&before, &ts, sizeof(ts)), 0);

  /* The versioned copy: V1 stops before the TLS counters; 0 and NULL are
   * refused with nothing written. */
  mcp_transport_stats out;
  memset(&out, 0xab, sizeof(out));
  ck_assert_int_eq(mcp_transport_stats_write(&out, 0, &ts),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_transport_stats_write(NULL, 1, &ts),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_transport_stats_write(&out, 1, NULL),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(out.connections, (size_t)0xabababababababab);
  ck_assert_int_eq(mcp_transport_stats_write(&out, MCP_TRANSPORT_STATS_V1, &ts),
                   0);
  ck_assert_uint_eq(out.connections, 7);
  ck_assert_uint_eq(out.refused_max_streams, 1);
  ck_assert_uint_eq(out.tls_handshakes, 0xababababababababull);
  ck_assert_uint_eq(out.opened, 0xababababababababull);
  ck_assert_int_eq(
      mcp_transport_stats_write(&out, MCP_TRANSPORT_STATS_VERSION + 1, &ts), 0);
  ck_assert_int_eq(memcmp(&out, &ts, sizeof(ts)), 0);
  mcp_admit_del(a);
}
END_TEST

START_TEST(test_admit_peer_stream_share_leaves_room_for_others) {
  mcp_admit_options o = unlimited();
  o.max_streams = 10;
  o.max_streams_per_peer = 4;
  mcp_admit *a = mk(&o);
  for (int i = 0; i < 4; i++)
    ck_assert_int_eq(adm(a, "greedy", i, 0, NULL), MCP_ADMIT_RUN);
  mcp_admit_result r;
  mcp_admit_ticket *x;
  ck_assert_int_eq(mcp_admit_stream(a, "greedy", 1, U(5), 0, &x, &r), 0);
  ck_assert_int_eq(r.verdict, MCP_ADMIT_REFUSE);
  ck_assert_int_eq(r.status, MCP_CODE_RESOURCE_EXHAUSTED);
  ck_assert_int_eq(r.reason, MCP_ADMIT_PEER_STREAMS);
  ck_assert_int_eq(adm(a, "other", 6, 0, NULL), MCP_ADMIT_RUN);
  mcp_admit_stats s = st(a);
  ck_assert_uint_eq(s.refused_peer_streams, 1);
  ck_assert_uint_eq(s.peers, 2);
  ck_assert_uint_eq(s.streams, 5);
  mcp_admit_del(a);
}
END_TEST

START_TEST(test_admit_rate_waits_in_turn_then_refuses_unavailable) {
  mcp_admit_options o = unlimited();
  o.stream_rate = 10; /* one token per 100 ms */
  o.stream_burst = 8; /* 8 may wait, 2 per peer */
  mcp_admit *a = mk(&o);
  mcp_admit_ticket *t[16];
  for (int i = 0; i < 8; i++) /* the bucket */
    ck_assert_int_eq(adm(a, "flood", i, 0, &t[i]), MCP_ADMIT_RUN);
  ck_assert_int_eq(adm(a, "flood", 8, 0, &t[8]), MCP_ADMIT_WAIT);
  ck_assert_int_eq(adm(a, "flood", 9, 0, &t[9]), MCP_ADMIT_WAIT);
  mcp_admit_result r;
  mcp_admit_ticket *x;
  /* The flood's share of the queue is full; another peer still waits. */
  ck_assert_int_eq(mcp_admit_stream(a, "flood", 1, U(10), 0, &x, &r), 0);
  ck_assert_int_eq(r.verdict, MCP_ADMIT_REFUSE);
  ck_assert_int_eq(r.status, MCP_CODE_UNAVAILABLE);
  ck_assert_int_eq(r.reason, MCP_ADMIT_RATE);
  ck_assert_str_eq(r.details, "too many new streams; retry later");
  ck_assert_int_eq(adm(a, "new", 11, 0, &t[11]), MCP_ADMIT_WAIT);
  ck_assert_int_eq(mcp_admit_next(a, 0, &r), 0);
  mcp_tstamp e = mcp_admit_get_expiry(a);
  ck_assert_uint_ge(e, 99 * MS);
  ck_assert_uint_le(e, 101 * MS);
  ck_assert_int_eq(mcp_admit_next(a, 50 * MS, &r), 0);
  /* Tokens go round robin across peers: the newcomer's turn comes second
   * although the flood's streams came first. */
  int order[3];
  for (int k = 0; k < 3; k++) {
    mcp_tstamp at = (mcp_tstamp)(k + 1) * 100 * MS + 1;
    ck_assert_int_eq(mcp_admit_next(a, at, &r), 1);
    ck_assert_int_eq(r.verdict, MCP_ADMIT_RUN);
    order[k] = IDX(r.user);
    ck_assert_int_eq(mcp_admit_next(a, at, &r), 0);
  }
  ck_assert_int_eq(order[0], 8);
  ck_assert_int_eq(order[1], 11);
  ck_assert_int_eq(order[2], 9);
  ck_assert_uint_eq(mcp_admit_get_expiry(a), MCP_TSTAMP_MAX);
  ck_assert_uint_eq(st(a).refused_rate, 1);
  mcp_admit_del(a);
}
END_TEST

/* The queue as a whole holds |stream_burst|. */
START_TEST(test_admit_rate_queue_full_refuses_any_peer) {
  mcp_admit_options o = unlimited();
  o.stream_rate = 1;
  o.stream_burst = 4; /* one waiting per peer */
  mcp_admit *a = mk(&o);
  char peer[8];
  for (int i = 0; i < 4; i++)
    ck_assert_int_eq(adm(a, "x", i, 0, NULL), MCP_ADMIT_RUN);
  for (int i = 0; i < 4; i++) {
    snprintf(peer, sizeof(peer), "p%d", i);
    ck_assert_int_eq(adm(a, peer, 4 + i, 0, NULL), MCP_ADMIT_WAIT);
  }
  ck_assert_int_eq(adm(a, "p9", 9, 0, NULL), MCP_ADMIT_REFUSE);
  ck_assert_uint_eq(st(a).waiting_rate, 4);
  mcp_admit_del(a);
}
END_TEST

/* The fix for issue 12: a stream that asked and never ACKs frees its slot
 * once its push is handed over, not at the timeout. */
START_TEST(test_admit_slot_freed_when_initial_push_handed_over) {
  mcp_admit_options o = unlimited();
  o.max_initial = 1;
  o.initial_timeout = 10 * S;
  mcp_admit *a = mk(&o);
  mcp_admit_ticket *t0, *t1;
  ck_assert_int_eq(adm(a, "p", 0, 0, &t0), MCP_ADMIT_RUN);
  ck_assert(mcp_admit_ticket_initial(t0));
  ck_assert_int_eq(adm(a, "p", 1, 0, &t1), MCP_ADMIT_WAIT);
  mcp_admit_result r;
  ck_assert_int_eq(mcp_admit_next(a, 1 * MS, &r), 0);
  mcp_admit_initial_done(a, t0);
  ck_assert(!mcp_admit_ticket_initial(t0));
  ck_assert_int_eq(mcp_admit_next(a, 2 * MS, &r), 1);
  ck_assert_int_eq(r.verdict, MCP_ADMIT_RUN);
  ck_assert_int_eq(IDX(r.user), 1);
  ck_assert(mcp_admit_ticket_initial(t1));
  mcp_admit_initial_done(a, t0); /* twice: no effect */
  mcp_admit_stats s = st(a);
  ck_assert_uint_eq(s.initial_sent, 1);
  ck_assert_uint_eq(s.initial, 1);
  ck_assert_uint_eq(s.initial_timeouts, 0);
  mcp_admit_release(a, t0);
  mcp_admit_release(a, t1);
  ck_assert_uint_eq(st(a).initial, 0);
  mcp_admit_del(a);
}
END_TEST

START_TEST(test_admit_slot_times_out_and_stream_goes_on) {
  mcp_admit_options o = unlimited();
  o.max_initial = 1;
  o.initial_timeout = 300 * MS;
  mcp_admit *a = mk(&o);
  mcp_admit_ticket *t0, *t1;
  ck_assert_int_eq(adm(a, "p", 0, 0, &t0), MCP_ADMIT_RUN);
  ck_assert_int_eq(adm(a, "p", 1, 10 * MS, &t1), MCP_ADMIT_WAIT);
  ck_assert_uint_eq(mcp_admit_get_expiry(a), 300 * MS);
  mcp_admit_result r;
  ck_assert_int_eq(mcp_admit_next(a, 299 * MS, &r), 0);
  ck_assert_int_eq(mcp_admit_next(a, 300 * MS, &r), 1);
  ck_assert_int_eq(IDX(r.user), 1);
  ck_assert(!mcp_admit_ticket_initial(t0)); /* runs on, without a slot */
  ck_assert_uint_eq(st(a).initial_timeouts, 1);
  mcp_admit_del(a);
}
END_TEST

/* Silent streams from one peer hold at most its share of the slots: a
 * stream from another peer gets one at once. */
START_TEST(test_admit_peer_slot_share_lets_another_peer_run) {
  mcp_admit_options o = unlimited();
  o.max_initial = 8;
  o.max_initial_per_peer = 2;
  o.wait_timeout = 5 * S;
  mcp_admit *a = mk(&o);
  int nrun = 0;
  for (int i = 0; i < 400; i++)
    nrun += adm(a, "mute", i, 0, NULL) == MCP_ADMIT_RUN;
  ck_assert_int_eq(nrun, 2);
  mcp_admit_result r;
  ck_assert_int_eq(mcp_admit_next(a, 0, &r), 0); /* "mute" is at its share */
  ck_assert_uint_eq(st(a).waiting_initial, 398);
  mcp_admit_ticket *t;
  /* Others wait behind the queue for one mcp_admit_next(), no longer. */
  ck_assert_int_eq(adm(a, "new", 1000, 1 * MS, &t), MCP_ADMIT_WAIT);
  ck_assert_int_eq(mcp_admit_next(a, 1 * MS, &r), 1);
  ck_assert_int_eq(r.verdict, MCP_ADMIT_RUN);
  ck_assert_int_eq(IDX(r.user), 1000);
  ck_assert(mcp_admit_ticket_initial(t));
  ck_assert_int_eq(mcp_admit_next(a, 1 * MS, &r), 0);
  mcp_admit_del(a);
}
END_TEST

START_TEST(test_admit_slots_go_round_robin_across_peers) {
  mcp_admit_options o = unlimited();
  o.max_initial = 1;
  o.max_initial_per_peer = 1;
  mcp_admit *a = mk(&o);
  mcp_admit_ticket *t[31];
  const char *peers[3] = {"a", "b", "c"};
  ck_assert_int_eq(adm(a, "z", 30, 0, &t[30]), MCP_ADMIT_RUN);
  /* a's ten arrive first, then b's, then c's. */
  for (int p = 0; p < 3; p++)
    for (int i = 0; i < 10; i++)
      ck_assert_int_eq(adm(a, peers[p], p * 10 + i, 0, &t[p * 10 + i]),
                       MCP_ADMIT_WAIT);
  mcp_admit_ticket *holder = t[30];
  int order[30];
  for (int k = 0; k < 30; k++) {
    mcp_admit_result r;
    mcp_admit_initial_done(a, holder);
    ck_assert_int_eq(mcp_admit_next(a, 0, &r), 1);
    order[k] = IDX(r.user);
    holder = t[order[k]];
  }
  for (int k = 0; k < 30; k++) /* a0 b0 c0 a1 b1 c1 ... */
    ck_assert_int_eq(order[k], (k % 3) * 10 + k / 3);
  mcp_admit_del(a);
}
END_TEST

START_TEST(test_admit_waiting_stream_refused_unavailable_at_deadline) {
  mcp_admit_options o = unlimited();
  o.max_initial = 1;
  o.wait_timeout = 2 * S;
  mcp_admit *a = mk(&o);
  mcp_admit_ticket *t0, *t1, *t2;
  ck_assert_int_eq(adm(a, "p", 0, 0, &t0), MCP_ADMIT_RUN);
  ck_assert_int_eq(adm(a, "p", 1, 100 * MS, &t1), MCP_ADMIT_WAIT);
  ck_assert_int_eq(adm(a, "q", 2, 200 * MS, &t2), MCP_ADMIT_WAIT);
  ck_assert_uint_eq(mcp_admit_get_expiry(a), 2100 * MS);
  mcp_admit_result r;
  ck_assert_int_eq(mcp_admit_next(a, 2099 * MS, &r), 0);
  ck_assert_int_eq(mcp_admit_next(a, 2100 * MS, &r), 1);
  ck_assert_int_eq(r.verdict, MCP_ADMIT_REFUSE);
  ck_assert_int_eq(r.status, MCP_CODE_UNAVAILABLE);
  ck_assert_int_eq(r.reason, MCP_ADMIT_WAIT_TIMEOUT);
  ck_assert_int_eq(IDX(r.user), 1);
  ck_assert_uint_eq(mcp_admit_get_expiry(a), 2200 * MS);
  ck_assert_int_eq(mcp_admit_next(a, 2100 * MS, &r), 0);
  ck_assert_int_eq(mcp_admit_next(a, 3 * S, &r), 1);
  ck_assert_int_eq(IDX(r.user), 2);
  mcp_admit_stats s = st(a);
  ck_assert_uint_eq(s.refused_wait_timeout, 2);
  ck_assert_uint_eq(s.streams, 1);
  ck_assert_uint_eq(s.peers, 1); /* "q" is gone with its only stream */
  mcp_admit_release(a, t0);
  mcp_admit_del(a);
}
END_TEST

START_TEST(test_admit_release_while_waiting_leaves_no_trace) {
  mcp_admit_options o = unlimited();
  o.max_initial = 1;
  o.stream_rate = 1;
  o.stream_burst = 2;
  mcp_admit *a = mk(&o);
  mcp_admit_ticket *t[4];
  ck_assert_int_eq(adm(a, "p", 0, 0, &t[0]), MCP_ADMIT_RUN);
  ck_assert_int_eq(adm(a, "q", 1, 0, &t[1]), MCP_ADMIT_WAIT); /* slot */
  ck_assert_int_eq(adm(a, "r", 2, 0, &t[2]), MCP_ADMIT_WAIT); /* token */
  ck_assert_uint_eq(st(a).waiting_initial, 1);
  ck_assert_uint_eq(st(a).waiting_rate, 1);
  for (int i = 2; i >= 0; i--)
    mcp_admit_release(a, t[i]);
  mcp_admit_release(a, NULL);
  mcp_admit_stats s = st(a);
  ck_assert_uint_eq(s.streams + s.waiting_rate + s.waiting_initial +
                        s.initial + s.peers, 0);
  ck_assert_uint_eq(mcp_admit_get_expiry(a), MCP_TSTAMP_MAX);
  mcp_admit_result r;
  ck_assert_int_eq(mcp_admit_next(a, 10 * S, &r), 0);
  mcp_admit_del(a);
}
END_TEST

/* Streams that need no slot (a listening sink's) only meet the rate. */
START_TEST(test_admit_no_slot_for_streams_that_push_nothing) {
  mcp_admit_options o = unlimited();
  o.max_initial = 1;
  mcp_admit *a = mk(&o);
  mcp_admit_result r;
  mcp_admit_ticket *t;
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(mcp_admit_stream(a, "p", 0, U(i), 0, &t, &r), 0);
    ck_assert_int_eq(r.verdict, MCP_ADMIT_RUN);
    ck_assert(!mcp_admit_ticket_initial(t));
  }
  ck_assert_uint_eq(st(a).initial, 0);
  mcp_admit_del(a);
}
END_TEST

/* Fails the i-th allocation for every i: NOMEM, nothing changed. */
START_TEST(test_admit_nomem_changes_nothing) {
  for (long k = 1;; k++) {
    th_mem m;
    th_mem_init(&m, k);
    mcp_admit_options o = unlimited();
    o.max_initial = 1;
    mcp_admit *a = NULL;
    int rv = mcp_admit_new(&a, &o, &m.mem, 0);
    if (rv < 0) {
      ck_assert_int_eq(rv, MCP_ERR_NOMEM);
      ck_assert_ptr_null(a);
      ck_assert_int_eq(m.live, 0);
      continue;
    }
    int failed = 0;
    char peer[16];
    for (int i = 0; i < 40 && !failed; i++) {
      mcp_admit_result r;
      mcp_admit_ticket *t = (mcp_admit_ticket *)1;
      mcp_admit_stats before = st(a);
      snprintf(peer, sizeof(peer), "peer%d", i % 20); /* grows the table */
      rv = mcp_admit_stream(a, peer, 1, U(i), 0, &t, &r);
      if (rv < 0) {
        ck_assert_int_eq(rv, MCP_ERR_NOMEM);
        mcp_admit_stats after = st(a);
        ck_assert_uint_eq(after.streams, before.streams);
        ck_assert_uint_eq(after.peers, before.peers);
        ck_assert_uint_eq(after.waiting_initial, before.waiting_initial);
        failed = 1;
      }
    }
    mcp_admit_del(a);
    ck_assert_int_eq(m.live, 0);
    if (!m.failed)
      break;
  }
}
END_TEST

/* The signal: a source stream's every known collection had its first
 * push pulled by next(), whatever the sink answers. */
START_TEST(test_admit_initial_sent_once_first_push_pulled) {
  mcp_store *store = th_store(NULL);
  th_put(store, "c1", "a", "v1", "x", 0);
  th_put(store, "c2", "b", "v1", "y", 0);
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = store;
  mcp_source_session *s;
  ck_assert_int_eq(mcp_source_session_new(&s, &so, 0), 0);
  ck_assert(!mcp_admit_initial_sent(s, 0)); /* nothing asked */
  const char *colls[3] = {"c1", "c2", "unknown"};
  for (int i = 0; i < 3; i++) {
    size_t len;
    uint8_t *b = th_request(&len, "n", colls[i], NULL, 0, NULL, 0, NULL);
    th_source_recv(s, b, len, 0, 0); /* frees |b| */
  }
  ck_assert(!mcp_admit_initial_sent(s, 0));
  mcp_msg *msg = NULL;
  ck_assert_int_gt(mcp_source_session_next(s, 0, &msg), 0);
  mcp_msg_free(msg);
  ck_assert(!mcp_admit_initial_sent(s, 0)); /* one of two */
  ck_assert_int_gt(mcp_source_session_next(s, 0, &msg), 0);
  mcp_msg_free(msg);
  /* No ACK came; the unknown collection gets no push. */
  ck_assert(mcp_admit_initial_sent(s, 0));
  mcp_source_session_del(s);
  mcp_store_del(store);
}
END_TEST

START_TEST(test_admit_peer_key_drops_the_port) {
  char b[64];
  mcp_admit_peer_key("ipv4:127.0.0.1:40000", b, sizeof(b));
  ck_assert_str_eq(b, "ipv4:127.0.0.1");
  mcp_admit_peer_key("ipv6:[::1]:40000", b, sizeof(b));
  ck_assert_str_eq(b, "ipv6:[::1]");
  mcp_admit_peer_key("unix:/tmp/a:b", b, sizeof(b));
  ck_assert_str_eq(b, "unix:/tmp/a:b");
  mcp_admit_peer_key("ipv4:", b, sizeof(b));
  ck_assert_str_eq(b, "ipv4:");
  mcp_admit_peer_key("ipv4:127.0.0.1:1", b, 5);
  ck_assert_str_eq(b, "ipv4");
}
END_TEST

/* ---- the per-peer bucket (rule 5, issue 23) ---- */

/* Only the per-peer bucket on: |burst| at once, |rate| per second. */
static mcp_admit_options peer_rate(uint32_t rate, uint32_t burst) {
  mcp_admit_options o = unlimited();
  o.peer_stream_rate = rate;
  o.peer_stream_burst = burst;
  return o;
}

/* The burst runs, the next stream waits for the refill (a quarter of the
 * burst may wait), one more is refused RESOURCE_EXHAUSTED saying why. */
START_TEST(test_admit_peer_rate_burst_then_waits_then_refuses) {
  mcp_admit_options o = peer_rate(10, 4); /* a token per 100 ms, 1 waits */
  mcp_admit *a = mk(&o);
  for (int i = 0; i < 4; i++)
    ck_assert_int_eq(adm(a, "p", i, 0, NULL), MCP_ADMIT_RUN);
  ck_assert_int_eq(adm(a, "p", 4, 0, NULL), MCP_ADMIT_WAIT);
  mcp_admit_result r;
  mcp_admit_ticket *x;
  ck_assert_int_eq(mcp_admit_stream(a, "p", 1, U(5), 0, &x, &r), 0);
  ck_assert_int_eq(r.verdict, MCP_ADMIT_REFUSE);
  ck_assert_int_eq(r.reason, MCP_ADMIT_PEER_RATE);
  ck_assert_int_eq(r.status, MCP_CODE_RESOURCE_EXHAUSTED);
  ck_assert_str_eq(r.details,
                   "too many new streams from this peer: more than 10 per "
                   "second after a burst of 4; retry with backoff");
  mcp_tstamp e = mcp_admit_get_expiry(a);
  ck_assert_uint_ge(e, 99 * MS);
  ck_assert_uint_le(e, 101 * MS);
  ck_assert_int_eq(mcp_admit_next(a, 99 * MS, &r), 0);
  ck_assert_int_eq(mcp_admit_next(a, e, &r), 1);
  ck_assert_int_eq(r.verdict, MCP_ADMIT_RUN);
  ck_assert_int_eq(IDX(r.user), 4);
  ck_assert_uint_eq(mcp_admit_get_expiry(a), MCP_TSTAMP_MAX);
  /* The bucket refills to the burst, no further. */
  for (int i = 0; i < 4; i++)
    ck_assert_int_eq(adm(a, "p", 10 + i, 10 * S, NULL), MCP_ADMIT_RUN);
  ck_assert_int_eq(adm(a, "p", 14, 10 * S, NULL), MCP_ADMIT_WAIT);
  mcp_admit_stats s = st(a);
  ck_assert_uint_eq(s.peer_rate_delayed, 2);
  ck_assert_uint_eq(s.refused_peer_rate, 1);
  ck_assert_uint_eq(s.refused_rate, 0);
  mcp_admit_del(a);
}
END_TEST

/* One peer's empty bucket and waiting streams leave another peer alone:
 * it runs at once, and the waiting one still gets its token. */
START_TEST(test_admit_peer_rate_keys_are_isolated) {
  mcp_admit_options o = peer_rate(1, 2);
  o.stream_rate = 1000; /* the listener's bucket on too, far from empty */
  o.stream_burst = 1000;
  mcp_admit *a = mk(&o);
  ck_assert_int_eq(adm(a, "id:spiffe://x/flood", 0, 0, NULL), MCP_ADMIT_RUN);
  ck_assert_int_eq(adm(a, "id:spiffe://x/flood", 1, 0, NULL), MCP_ADMIT_RUN);
  ck_assert_int_eq(adm(a, "id:spiffe://x/flood", 2, 0, NULL), MCP_ADMIT_WAIT);
  for (int i = 0; i < 50; i++) {
    char peer[32];
    snprintf(peer, sizeof(peer), "10.0.0.%d", i);
    ck_assert_int_eq(adm(a, peer, 100 + 2 * i, 1 * MS, NULL), MCP_ADMIT_RUN);
    ck_assert_int_eq(adm(a, peer, 101 + 2 * i, 1 * MS, NULL), MCP_ADMIT_RUN);
  }
  mcp_admit_result r;
  ck_assert_int_eq(mcp_admit_next(a, 2 * MS, &r), 0);
  ck_assert_int_eq(mcp_admit_next(a, 1 * S + 1, &r), 1);
  ck_assert_int_eq(IDX(r.user), 2);
  ck_assert_uint_eq(st(a).peer_rate_delayed, 1);
  mcp_admit_del(a);
}
END_TEST

/* The failing Istio 1.6 sink: one stream at a time, redialed the moment
 * the last one ends. Its bucket outlives each stream, so it is paced at
 * burst + rate * t (Istio's own source: 100 + 1/s, 105 in 5 s). */
START_TEST(test_admit_peer_rate_paces_a_client_that_redials_at_once) {
  static const struct {
    uint32_t rate, burst;
    int want;
  } cases[] = {{1, 100, 105}, {100, 100, 600}};
  for (size_t c = 0; c < 2; c++) {
    mcp_admit_options o = peer_rate(cases[c].rate, cases[c].burst);
    o.wait_timeout = 5 * S;
    mcp_admit *a = mk(&o);
    mcp_tstamp ts = 0;
    int opened = 0, ran = 0;
    while (ts < 5 * S) {
      mcp_admit_ticket *t;
      opened++;
      mcp_admit_verdict v = adm(a, "127.0.0.1", 0, ts, &t);
      if (v == MCP_ADMIT_WAIT) {
        mcp_admit_result r;
        ts = mcp_admit_get_expiry(a);
        if (ts >= 5 * S) {
          mcp_admit_release(a, t);
          break;
        }
        ck_assert_int_eq(mcp_admit_next(a, ts, &r), 1);
        ck_assert_int_eq(r.verdict, MCP_ADMIT_RUN);
      }
      ck_assert_int_ne(v, MCP_ADMIT_REFUSE);
      ran++;
      ts += 100000; /* the push, and the sink's reset: 0.1 ms */
      mcp_admit_release(a, t);
      ck_assert_uint_eq(st(a).rate_peers, 1); /* remembered */
    }
    ck_assert_int_ge(ran, cases[c].want - 1);
    ck_assert_int_le(ran, cases[c].want + 1);
    ck_assert_int_le(opened, cases[c].want + 2);
    mcp_admit_del(a);
  }
}
END_TEST

/* A peer without a stream is remembered while its bucket is not full,
 * forgotten once it is (nothing to remember). */
START_TEST(test_admit_peer_bucket_forgotten_once_full) {
  mcp_admit_options o = peer_rate(10, 4);
  mcp_admit *a = mk(&o);
  mcp_admit_ticket *t[4];
  for (int i = 0; i < 4; i++)
    ck_assert_int_eq(adm(a, "p", i, 0, &t[i]), MCP_ADMIT_RUN);
  for (int i = 0; i < 4; i++)
    mcp_admit_release(a, t[i]);
  mcp_admit_stats s = st(a);
  ck_assert_uint_eq(s.peers, 0);
  ck_assert_uint_eq(s.rate_peers, 1);
  ck_assert_int_eq(adm(a, "p", 5, 1 * MS, &t[0]), MCP_ADMIT_WAIT);
  mcp_admit_release(a, t[0]);
  mcp_admit_result r;
  ck_assert_int_eq(mcp_admit_next(a, 399 * MS, &r), 0);
  ck_assert_uint_eq(st(a).rate_peers, 1);
  ck_assert_int_eq(mcp_admit_next(a, 400 * MS, &r), 0); /* 4 tokens again */
  ck_assert_uint_eq(st(a).rate_peers, 0);
  ck_assert_uint_eq(st(a).rate_peers_forgotten, 0);
  mcp_admit_del(a);
}
END_TEST

/* An attacker with many addresses, each opening and closing a stream:
 * at most |max_rate_peers| are remembered, the oldest forgotten first,
 * and memory stays flat however many addresses come. */
START_TEST(test_admit_peer_table_bounded_against_many_addresses) {
  th_mem m;
  th_mem_init(&m, 0);
  mcp_admit_options o = peer_rate(1, 10);
  o.max_rate_peers = 64;
  mcp_admit *a = NULL;
  ck_assert_int_eq(mcp_admit_new(&a, &o, &m.mem, 0), 0);
  long live_at_1000 = 0;
  for (int i = 0; i < 20000; i++) {
    char peer[32];
    snprintf(peer, sizeof(peer), "10.%d.%d.%d", i >> 16, (i >> 8) & 255,
             i & 255);
    mcp_admit_ticket *t;
    ck_assert_int_eq(adm(a, peer, 0, (mcp_tstamp)i, &t), MCP_ADMIT_RUN);
    mcp_admit_release(a, t);
    ck_assert_uint_le(st(a).rate_peers, 64);
    if (i == 1000)
      live_at_1000 = m.live;
  }
  mcp_admit_stats s = st(a);
  ck_assert_uint_eq(s.rate_peers, 64);
  ck_assert_uint_eq(s.rate_peers_forgotten, 20000 - 64);
  ck_assert_int_le(m.live, live_at_1000); /* flat: no growth */
  ck_assert_int_le(m.live, 2 * 64 + 8);   /* a peer and its key each */
  /* The newest is still remembered: its bucket is not full. */
  ck_assert_int_eq(adm(a, "10.0.78.31", 1, 20000, NULL), MCP_ADMIT_RUN);
  ck_assert_uint_eq(st(a).rate_peers, 63);
  mcp_admit_del(a);
  ck_assert_int_eq(m.live, 0);
}
END_TEST

/* A random script of admissions, decisions, pushes, releases and time,
 * against a model of what the test holds: the bounds hold after every
 * step, every ticket is accounted for, and releasing all leaves nothing. */
START_TEST(test_admit_random_script_keeps_bounds) {
  enum { N = 600, P = 5 };
  static const char *peers[P] = {"p0", "p1", "p2", "p3", "p4"};
  mcp_admit_options o;
  memset(&o, 0, sizeof(o));
  o.max_streams = 60;
  o.max_streams_per_peer = 30;
  o.stream_rate = 50;
  o.stream_burst = 10;
  o.max_initial = 6;
  o.max_initial_per_peer = 2;
  o.initial_timeout = 400 * MS;
  o.wait_timeout = 300 * MS;
  mcp_admit *a = mk(&o);
  mcp_admit_ticket *t[N];
  int state[N]; /* 0 none, 1 waiting, 2 running, 3 refused/released */
  int peer_of[N];
  memset(state, 0, sizeof(state));
  uint64_t seed = 12345;
  mcp_tstamp ts = 0;
  int next_id = 0;
  for (int step = 0; step < 20000; step++) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    unsigned r = (unsigned)(seed >> 33);
    switch (r % 5) {
    case 0: /* a new stream */
      if (next_id < N) {
        int i = next_id++;
        mcp_admit_result res;
        peer_of[i] = (int)((r >> 8) % P);
        ck_assert_int_eq(mcp_admit_stream(a, peers[peer_of[i]], 1, U(i), ts,
                                          &t[i], &res),
                         0);
        state[i] = res.verdict == MCP_ADMIT_RUN    ? 2
                   : res.verdict == MCP_ADMIT_WAIT ? 1
                                                   : 3;
      }
      break;
    case 1: { /* decisions */
      mcp_admit_result res;
      while (mcp_admit_next(a, ts, &res)) {
        int i = IDX(res.user);
        ck_assert_int_eq(state[i], 1);
        state[i] = res.verdict == MCP_ADMIT_RUN ? 2 : 3;
      }
      break;
    }
    case 2: /* a running stream's push went out */
    case 3: { /* a stream ends */
      if (!next_id)
        break;
      int i = (int)((r >> 8) % (unsigned)next_id);
      if (r % 5 == 2 && state[i] == 2)
        mcp_admit_initial_done(a, t[i]);
      else if (r % 5 == 3 && (state[i] == 1 || state[i] == 2)) {
        mcp_admit_release(a, t[i]);
        state[i] = 3;
      }
      break;
    }
    default:
      ts += (mcp_tstamp)(r >> 8) % (50 * MS);
      break;
    }
    size_t live = 0, slots = 0, pslots[P] = {0};
    for (int i = 0; i < next_id; i++) {
      if (state[i] == 1 || state[i] == 2)
        live++;
      if (state[i] == 2 && mcp_admit_ticket_initial(t[i])) {
        slots++;
        pslots[peer_of[i]]++;
      }
    }
    mcp_admit_stats s = st(a);
    ck_assert_uint_eq(s.streams, live);
    ck_assert_uint_eq(s.initial, slots);
    ck_assert_uint_le(slots, 6);
    for (int p = 0; p < P; p++)
      ck_assert_uint_le(pslots[p], 2);
    ck_assert_uint_le(live, 60);
    ck_assert_uint_le(s.waiting_rate, 10);
    ck_assert(mcp_admit_get_expiry(a) >= ts ||
              s.waiting_rate + s.waiting_initial + s.initial > 0);
  }
  for (int i = 0; i < next_id; i++)
    if (state[i] == 1 || state[i] == 2)
      mcp_admit_release(a, t[i]);
  mcp_admit_stats s = st(a);
  ck_assert_uint_eq(s.streams + s.peers + s.initial + s.waiting_rate +
                        s.waiting_initial, 0);
  ck_assert_uint_gt(s.refused_wait_timeout, 0); /* the script met them all */
  ck_assert_uint_gt(s.initial_timeouts, 0);
  ck_assert_uint_gt(s.initial_sent, 0);
  ck_assert_uint_eq(s.initial_peak, 6); /* the bounds were reached */
  ck_assert_uint_gt(s.refused_rate, 0);
  mcp_admit_del(a);
}
END_TEST

int main(void) {
  Suite *s = suite_create("core_admit");
  TCase *tc = tcase_create("admit");
  tcase_add_test(tc, test_admit_defaults_derive_per_peer_shares);
  tcase_add_test(tc, test_admit_refuses_beyond_max_streams_resource_exhausted);
  tcase_add_test(tc, test_admit_peer_stream_share_leaves_room_for_others);
  tcase_add_test(tc, test_transport_stats_take_admission_counters_only);
  tcase_add_test(tc, test_admit_rate_waits_in_turn_then_refuses_unavailable);
  tcase_add_test(tc, test_admit_rate_queue_full_refuses_any_peer);
  tcase_add_test(tc, test_admit_slot_freed_when_initial_push_handed_over);
  tcase_add_test(tc, test_admit_slot_times_out_and_stream_goes_on);
  tcase_add_test(tc, test_admit_peer_slot_share_lets_another_peer_run);
  tcase_add_test(tc, test_admit_slots_go_round_robin_across_peers);
  tcase_add_test(tc, test_admit_waiting_stream_refused_unavailable_at_deadline);
  tcase_add_test(tc, test_admit_release_while_waiting_leaves_no_trace);
  tcase_add_test(tc, test_admit_no_slot_for_streams_that_push_nothing);
  tcase_add_test(tc, test_admit_nomem_changes_nothing);
  tcase_add_test(tc, test_admit_initial_sent_once_first_push_pulled);
  tcase_add_test(tc, test_admit_peer_key_drops_the_port);
  tcase_add_test(tc, test_admit_random_script_keeps_bounds);
  tcase_add_test(tc, test_admit_peer_rate_burst_then_waits_then_refuses);
  tcase_add_test(tc, test_admit_peer_rate_keys_are_isolated);
  tcase_add_test(tc, test_admit_peer_rate_paces_a_client_that_redials_at_once);
  tcase_add_test(tc, test_admit_peer_bucket_forgotten_once_full);
  tcase_add_test(tc, test_admit_peer_table_bounded_against_many_addresses);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
