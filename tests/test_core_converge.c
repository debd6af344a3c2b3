/*
 * Convergence, as a seeded property test: a source session and a sink
 * session talk through two in-memory queues while a random script changes
 * the store (upserts of new and existing names, deletes, whole replaces),
 * delivers messages in random order of the two directions, advances a
 * virtual clock past debounce windows, makes the sink's application reject
 * random pushes for a while, and reconnects (both sessions replaced, the
 * sink state kept: resumption).
 *
 * Properties checked:
 *  - every call succeeds (the peers only ever send valid messages);
 *  - at most one push in flight per collection;
 *  - NACKed content is not pushed again on the same stream (unless the
 *    retry policy covers its code);
 *  - after draining with rejections off, each collection the sink holds is
 *    exactly the store's (names and versions), unless the source's current
 *    generation was the one rejected last with a final code (it must then
 *    not be pushed again: docs/protocol.md, Source, rule 6);
 *  - after one more change per collection and a drain, every collection is
 *    exactly the store's, and the sink is synced.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"

typedef Istio__Mcp__V1alpha1__RequestResources Req;

#define MS MCP_MILLISECONDS
#define MAXC 4
#define STEPS 300

/* splitmix64 */
typedef struct rng {
  uint64_t s;
} rng;

static uint64_t rnext(rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static unsigned rn(rng *r, unsigned n) { return (unsigned)(rnext(r) % n); }

/* A FIFO of messages in flight on one direction of the stream. */
typedef struct queue {
  mcp_msg **v;
  size_t head, n, cap;
} queue;

static void q_push(queue *q, mcp_msg *m) {
  if (q->head + q->n == q->cap) {
    if (q->head) {
      memmove(q->v, q->v + q->head, q->n * sizeof(*q->v));
      q->head = 0;
    } else {
      q->cap = q->cap ? q->cap * 2 : 16;
      q->v = realloc(q->v, q->cap * sizeof(*q->v));
      ck_assert_ptr_nonnull(q->v);
    }
  }
  q->v[q->head + q->n++] = m;
}

static mcp_msg *q_pop(queue *q) {
  if (!q->n) {
    return NULL;
  }
  q->n--;
  return q->v[q->head++];
}

static void q_clear(queue *q) {
  mcp_msg *m;
  while ((m = q_pop(q))) {
    mcp_msg_free(m);
  }
  q->head = 0;
}

static void q_free(queue *q) {
  q_clear(q);
  free(q->v);
  memset(q, 0, sizeof(*q));
}

typedef struct world {
  rng r;
  int seed;
  mcp_tstamp ts;
  uint64_t epoch_seed;
  mcp_store *store;
  mcp_source_options so;
  mcp_source_session *src;
  mcp_sink_state *st;
  mcp_sink_session *snk;
  queue down, up; /* source -> sink, sink -> source */
  const char *colls[MAXC]; /* requested by the sink */
  size_t ncolls;
  size_t nstore;           /* colls[0..nstore) are changed in the store */
  int missing;             /* the last requested one the store never has */
  int incremental;
  unsigned nnames;
  unsigned counter;
  int reject;              /* the application rejects some pushes */
  int retry;               /* the source retries UNAVAILABLE */
  int inflight[MAXC];
  /* The application's last decision per collection. */
  int last_code[MAXC];
  char last_sysver[MAXC][64];
  unsigned last_session[MAXC]; /* the session that made that decision */
  unsigned nsession;
  /* stats, to make sure the script exercises what it should */
  unsigned napply, nreject, nreconnect, npush, nresume;
} world;

static int coll_index(const world *w, const char *coll) {
  for (size_t i = 0; i < w->ncolls; ++i) {
    if (strcmp(w->colls[i], coll) == 0) {
      return (int)i;
    }
  }
  return -1;
}

static int on_apply(const mcp_change *ch, char *msg, size_t msglen, void *ud) {
  world *w = ud;
  int i = coll_index(w, ch->collection);
  ck_assert_int_ge(i, 0);
  ck_assert_int_eq(ch->incremental ? 1 : 0, ch->incremental && w->incremental);
  w->napply++;
  /* NACKed content is never pushed again on the same stream, unless the
   * retry policy covers the code. */
  if (w->last_code[i] && w->last_session[i] == w->nsession &&
      !(w->retry && w->last_code[i] == MCP_CODE_UNAVAILABLE)) {
    ck_assert_msg(strcmp(w->last_sysver[i], ch->system_version_info) != 0,
                  "seed %d: %s: the source pushed %s again after its NACK",
                  w->seed, ch->collection, ch->system_version_info);
  }
  int code = 0;
  if (w->reject && rn(&w->r, 100) < 35) {
    code = rn(&w->r, 2) ? MCP_CODE_UNAVAILABLE : MCP_CODE_INVALID_ARGUMENT;
    snprintf(msg, msglen, "rejected by seed %d", w->seed);
    w->nreject++;
  }
  w->last_code[i] = code;
  w->last_session[i] = w->nsession;
  snprintf(w->last_sysver[i], sizeof(w->last_sysver[i]), "%s",
           ch->system_version_info);
  return code;
}

static void new_sessions(world *w) {
  ck_assert_int_eq(mcp_source_session_new(&w->src, &w->so, w->ts), 0);
  ck_assert_int_eq(mcp_sink_session_new(&w->snk, w->st, w->ts), 0);
  memset(w->inflight, 0, sizeof(w->inflight));
  w->nsession++;
}

static void reconnect(world *w) {
  /* Sessions go first: messages already taken stay valid, and are freed
   * after them. */
  mcp_source_session_del(w->src);
  mcp_sink_session_del(w->snk);
  q_clear(&w->down);
  q_clear(&w->up);
  new_sessions(w);
  w->nreconnect++;
}

/* ---- the two directions ---- */

static int source_produce(world *w) {
  if (!mcp_source_session_want_write(w->src, w->ts)) {
    mcp_msg *m = NULL;
    ck_assert_int_eq(mcp_source_session_next(w->src, w->ts, &m), 0);
    return 0;
  }
  mcp_msg *m = NULL;
  ck_assert_int_eq(mcp_source_session_next(w->src, w->ts, &m), 1);
  int i = coll_index(w, mcp_msg_collection(m));
  if (i >= 0) {
    ck_assert_msg(!w->inflight[i], "seed %d: two pushes in flight for %s",
                  w->seed, w->colls[i]);
    w->inflight[i] = 1;
  } else {
    ck_assert_str_eq(mcp_msg_collection(m), MCP_TRIGGER_COLLECTION);
  }
  w->npush++;
  q_push(&w->down, m);
  return 1;
}

static int sink_produce(world *w) {
  mcp_msg *m = NULL;
  int want = mcp_sink_session_want_write(w->snk);
  int rv = mcp_sink_session_next(w->snk, &m);
  ck_assert_int_eq(rv, want);
  if (rv) {
    q_push(&w->up, m);
  }
  return rv;
}

static uint8_t *flat(const mcp_msg *m, size_t *len) {
  *len = mcp_msg_len(m);
  uint8_t *p = malloc(*len ? *len : 1);
  mcp_msg_flatten(m, p);
  return p;
}

static int deliver_down(world *w) {
  mcp_msg *m = q_pop(&w->down);
  if (!m) {
    return 0;
  }
  size_t len;
  uint8_t *p = flat(m, &len);
  mcp_msg_free(m);
  int rv = mcp_sink_session_recv(w->snk, p, len, w->ts);
  free(p);
  ck_assert_msg(rv == 0, "seed %d: sink recv: %s", w->seed, mcp_strerror(rv));
  return 1;
}

static int deliver_up(world *w) {
  mcp_msg *m = q_pop(&w->up);
  if (!m) {
    return 0;
  }
  size_t len;
  uint8_t *p = flat(m, &len);
  mcp_msg_free(m);
  Req *r = istio__mcp__v1alpha1__request_resources__unpack(NULL, len, p);
  ck_assert_ptr_nonnull(r);
  int i = coll_index(w, r->collection);
  if (i >= 0 && r->response_nonce[0]) {
    ck_assert_msg(w->inflight[i], "seed %d: an answer for no push", w->seed);
    w->inflight[i] = 0;
  }
  if (i >= 0 && !r->response_nonce[0] && r->n_initial_resource_versions) {
    w->nresume++;
  }
  istio__mcp__v1alpha1__request_resources__free_unpacked(r, NULL);
  int rv = mcp_source_session_recv(w->src, p, len, w->ts);
  free(p);
  ck_assert_msg(rv == 0, "seed %d: source recv: %s", w->seed, mcp_strerror(rv));
  return 1;
}

static void advance(world *w, mcp_tstamp dt) {
  w->ts += dt;
  if (mcp_source_session_get_expiry(w->src) <= w->ts) {
    ck_assert_int_eq(mcp_source_session_handle_expiry(w->src, w->ts), 0);
  }
}

/* Runs both sessions until nothing moves and no timer is pending. */
static void drain(world *w) {
  int idle = 0;
  for (int guard = 0; guard < 100000; ++guard) {
    int progress = 0;
    while (source_produce(w)) {
      progress = 1;
    }
    while (deliver_down(w)) {
      progress = 1;
    }
    while (sink_produce(w)) {
      progress = 1;
    }
    while (deliver_up(w)) {
      progress = 1;
    }
    if (progress) {
      idle = 0;
      continue;
    }
    mcp_tstamp exp = mcp_source_session_get_expiry(w->src);
    if (exp == MCP_TSTAMP_MAX) {
      return;
    }
    ck_assert_msg(++idle < 3, "seed %d: expiry %llu <= now %llu, nothing to do",
                  w->seed, (unsigned long long)exp, (unsigned long long)w->ts);
    if (exp > w->ts) {
      w->ts = exp;
    }
    ck_assert_int_eq(mcp_source_session_handle_expiry(w->src, w->ts), 0);
  }
  ck_abort_msg("seed %d: drain does not end", w->seed);
}

/* ---- store changes ---- */

static void name_of(char *buf, size_t n, unsigned k) { snprintf(buf, n, "n%u", k); }

/* A resource for |name|: a fresh body and version, or (sometimes) a body
 * that is the same as last time with a generated version (no change). */
static mcp_resource make_res(world *w, const char *name, char *body, size_t bn,
                             char *ver, size_t vn) {
  unsigned k = rn(&w->r, 10);
  const char *v = NULL;
  if (k < 2) {
    snprintf(body, bn, "same-%s", name);
  } else {
    snprintf(body, bn, "b%u", ++w->counter);
    if (k < 6) {
      snprintf(ver, vn, "v%u", ++w->counter);
      v = ver;
    }
  }
  return th_res(name, v, body);
}

static void change_store(world *w) {
  unsigned op = rn(&w->r, 10);
  const char *coll = w->colls[rn(&w->r, (unsigned)w->nstore)];
  char name[32], body[32], ver[32];
  if (op < 6) {
    name_of(name, sizeof(name), rn(&w->r, w->nnames));
    mcp_resource r = make_res(w, name, body, sizeof(body), ver, sizeof(ver));
    ck_assert_int_ge(mcp_store_upsert(w->store, coll, &r, w->ts), 0);
  } else if (op < 9) {
    name_of(name, sizeof(name), rn(&w->r, w->nnames));
    ck_assert_int_ge(mcp_store_delete(w->store, coll, name, w->ts), 0);
  } else {
    unsigned pct = (unsigned[]){5, 50, 95}[rn(&w->r, 3)];
    mcp_resource *res = calloc(w->nnames, sizeof(*res));
    char(*names)[16] = calloc(w->nnames, 16);
    char(*bodies)[32] = calloc(w->nnames, 32);
    char(*vers)[32] = calloc(w->nnames, 32);
    size_t n = 0;
    for (unsigned k = 0; k < w->nnames; ++k) {
      if (rn(&w->r, 100) < pct) {
        name_of(names[n], 16, k);
        res[n] = make_res(w, names[n], bodies[n], 32, vers[n], 32);
        n++;
      }
    }
    ck_assert_int_ge(mcp_store_replace(w->store, coll, res, n, w->ts), 0);
    free(res);
    free(names);
    free(bodies);
    free(vers);
  }
}

/* ---- comparing ---- */

typedef struct cmp_ctx {
  const world *w;
  const char *coll;
  size_t n, bad;
  char first_bad[96];
} cmp_ctx;

static void cmp_cb(const char *name, const char *version, void *ud) {
  cmp_ctx *c = ud;
  const char *sv = mcp_store_version(c->w->store, c->coll, name);
  c->n++;
  if (!sv || strcmp(sv, version) != 0) {
    if (!c->bad++) {
      snprintf(c->first_bad, sizeof(c->first_bad), "%s=%s (store: %s)", name,
               version, sv ? sv : "none");
    }
  }
}

/* 1 when the sink holds exactly the store's |coll|. */
static int same(const world *w, const char *coll, char *why, size_t whyn) {
  cmp_ctx c = {.w = w, .coll = coll};
  mcp_sink_state_foreach(w->st, coll, cmp_cb, &c);
  ck_assert_uint_eq(c.n, mcp_sink_state_count(w->st, coll));
  size_t sn = mcp_store_count(w->store, coll);
  snprintf(why, whyn, "sink holds %zu, store has %zu, %zu differ (%s)", c.n, sn,
           c.bad, c.bad ? c.first_bad : "-");
  return c.bad == 0 && c.n == sn;
}

/* ---- the script ---- */

static void world_init(world *w, int seed) {
  memset(w, 0, sizeof(*w));
  w->seed = seed;
  w->r.s = 0x5eed0000u + (uint64_t)seed;
  w->ts = 1 * MCP_SECONDS;
  w->incremental = seed % 2;
  w->nnames = seed % 4 == 3 ? 120 : 3 + rn(&w->r, 10);

  static const char *const names[] = {"c0", "c1", "c2"};
  w->nstore = 1 + rn(&w->r, 3);
  for (size_t i = 0; i < w->nstore; ++i) {
    w->colls[w->ncolls++] = names[i];
  }
  w->missing = rn(&w->r, 5) == 0;
  if (w->missing) {
    w->colls[w->ncolls++] = "never";
  }

  mcp_store_options o;
  mcp_store_options_default(&o);
  o.rand = th_rand;
  w->epoch_seed = (uint64_t)seed;
  o.rand_user_data = &w->epoch_seed;
  ck_assert_int_eq(mcp_store_new(&w->store, &o), 0);
  for (size_t i = 0; i < w->nstore; ++i) {
    if (rn(&w->r, 2)) {
      ck_assert_int_eq(mcp_store_add_collection(w->store, w->colls[i]), 0);
    }
  }

  mcp_source_options_default(&w->so);
  w->so.store = w->store;
  if (rn(&w->r, 3)) {
    w->so.debounce = (1 + rn(&w->r, 5)) * MS;
    if (rn(&w->r, 2)) {
      w->so.max_delay = (2 + rn(&w->r, 10)) * MS;
    }
  }
  w->retry = rn(&w->r, 3) == 0;
  if (w->retry) {
    w->so.nack_retry_initial = 1 * MS;
    w->so.nack_retry_max = 8 * MS;
  }
  w->so.send_trigger = (int)rn(&w->r, 2);

  mcp_sink_options k;
  mcp_sink_options_default(&k);
  k.node_id = "converge";
  k.collections = w->colls;
  k.ncollections = w->ncolls;
  k.incremental = w->incremental;
  k.apply = on_apply;
  k.user_data = w;
  k.journal_size = 1 + rn(&w->r, 8);
  ck_assert_int_eq(mcp_sink_state_new(&w->st, &k), 0);
  new_sessions(w);
}

static void world_free(world *w) {
  mcp_source_session_del(w->src);
  mcp_sink_session_del(w->snk);
  q_free(&w->down);
  q_free(&w->up);
  mcp_sink_state_del(w->st);
  mcp_store_del(w->store);
}

static void run_seed(int seed) {
  world w;
  world_init(&w, seed);
  for (int step = 0; step < STEPS; ++step) {
    unsigned k = rn(&w.r, 100);
    if (k < 30) {
      change_store(&w);
    } else if (k < 45) {
      source_produce(&w);
    } else if (k < 60) {
      deliver_down(&w);
    } else if (k < 72) {
      sink_produce(&w);
    } else if (k < 84) {
      deliver_up(&w);
    } else if (k < 95) {
      advance(&w, rn(&w.r, 4) * MS);
    } else if (k < 98) {
      w.reject = !w.reject;
    } else {
      reconnect(&w);
    }
  }

  /* Quiet: the application accepts everything from now on. */
  w.reject = 0;
  drain(&w);
  char epoch[24];
  snprintf(epoch, sizeof(epoch), "%016llx",
           (unsigned long long)mcp_store_epoch(w.store));
  for (size_t i = 0; i < w.ncolls; ++i) {
    char why[160];
    if (same(&w, w.colls[i], why, sizeof(why))) {
      continue;
    }
    /* Only allowed when the current content was rejected for good. */
    char cur[64];
    snprintf(cur, sizeof(cur), "%s-%llu", epoch,
             (unsigned long long)mcp_store_generation(w.store, w.colls[i]));
    ck_assert_msg(w.last_code[i] != 0,
                  "seed %d: %s not converged after drain, last push accepted: %s",
                  seed, w.colls[i], why);
    ck_assert_msg(strcmp(w.last_sysver[i], cur) == 0,
                  "seed %d: %s: the last rejected push (%s) is not the current "
                  "generation (%s): %s",
                  seed, w.colls[i], w.last_sysver[i], cur, why);
    ck_assert_msg(!(w.retry && w.last_code[i] == MCP_CODE_UNAVAILABLE),
                  "seed %d: %s: UNAVAILABLE with a retry policy was not retried",
                  seed, w.colls[i]);
  }

  /* One more change per collection, and everything must match. */
  for (size_t i = 0; i < w.nstore; ++i) {
    char body[32];
    snprintf(body, sizeof(body), "final-%u", ++w.counter);
    th_put(w.store, w.colls[i], "final", NULL, body, w.ts);
  }
  drain(&w);
  for (size_t i = 0; i < w.ncolls; ++i) {
    char why[160];
    ck_assert_msg(same(&w, w.colls[i], why, sizeof(why)),
                  "seed %d (%s, %u names): %s does not match the store: %s", seed,
                  w.incremental ? "incremental" : "full state", w.nnames,
                  w.colls[i], why);
  }
  ck_assert_int_eq(mcp_sink_state_synced(w.st), !w.missing);
  for (size_t i = 0; i < w.ncolls; ++i) {
    ck_assert_int_eq(w.inflight[i], 0);
  }
  ck_assert_uint_gt(w.npush, 0);
  world_free(&w);
}

START_TEST(sink_converges_to_store_under_random_script) { run_seed(_i); }
END_TEST

/*
 * The script must exercise what it claims: over all seeds, rejections,
 * reconnects with resumption, and both kinds of sink happen.
 */
START_TEST(script_exercises_rejections_reconnects_and_resumption) {
  unsigned rej = 0, rec = 0, res = 0, big = 0;
  for (int seed = 0; seed < 40; ++seed) {
    world w;
    world_init(&w, seed);
    big += w.nnames > 100;
    for (int step = 0; step < STEPS; ++step) {
      unsigned k = rn(&w.r, 100);
      if (k < 30) {
        change_store(&w);
      } else if (k < 45) {
        source_produce(&w);
      } else if (k < 60) {
        deliver_down(&w);
      } else if (k < 72) {
        sink_produce(&w);
      } else if (k < 84) {
        deliver_up(&w);
      } else if (k < 95) {
        advance(&w, rn(&w.r, 4) * MS);
      } else if (k < 98) {
        w.reject = !w.reject;
      } else {
        reconnect(&w);
      }
    }
    rej += w.nreject;
    rec += w.nreconnect;
    res += w.nresume;
    world_free(&w);
  }
  ck_assert_uint_gt(rej, 20);
  ck_assert_uint_gt(rec, 20);
  ck_assert_uint_gt(res, 5);
  ck_assert_uint_gt(big, 5);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("core_converge");
  TCase *tc = tcase_create("converge");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, sink_converges_to_store_under_random_script, 0, 200);
  tcase_add_test(tc, script_exercises_rejections_reconnects_and_resumption);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
