/*
 * fuzz_pair: a source session and a sink session wired together in memory
 * (two FIFO queues, one per direction), driven by a script: store changes,
 * which side runs and which direction delivers next, time, expiry, the
 * application rejecting pushes (with a transient or a final code), lost
 * messages (the stream breaks: both sessions are replaced, the sink state
 * is kept, so the sink resumes), reconnects, and failed allocations (a call
 * that meets one is retried later or ends the stream, as the script says).
 *
 * This is tests/test_core_converge.c with the script taken from the fuzzer
 * instead of a seeded generator, over the three services. Checked:
 *  - every call succeeds, except NOMEM exactly when an allocation failed,
 *    and RESYNC (IncrementalAggregatedResources: the stream is replaced);
 *  - at most one push in flight per collection; every answer is for a push;
 *  - NACKed content is not pushed again on the same stream unless the
 *    retry policy covers the NACK's code;
 *  - after a quiet drain, each collection the sink holds is exactly the
 *    store's, unless the store's current generation is the one the
 *    application rejected last, with a final code (docs/protocol.md,
 *    Source rule 6);
 *  - after one more change per collection and a drain, every collection is
 *    exactly the store's and the sink is synced;
 *  - at the end no block is left.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_script.h"
#include "fuzz_util.h"
#include "fuzz_wire.h"

#define MS MCP_MILLISECONDS
#define MAXC 4


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
      FZ_CHECK(q->v, "out of memory");
    }
  }
  q->v[q->head + q->n++] = m;
}

static mcp_msg *q_peek(queue *q) { return q->n ? q->v[q->head] : NULL; }

static void q_drop(queue *q) {
  q->n--;
  q->head++;
}

static void q_clear(queue *q) {
  while (q->n) {
    mcp_msg_free(q_peek(q));
    q_drop(q);
  }
}

typedef struct world {
  fz_mem m;
  mcp_service service;
  uint64_t seed;
  mcp_tstamp ts;
  mcp_store *store;
  mcp_source_options so;
  mcp_sink_options ko;
  mcp_source_session *src;
  mcp_sink_state *st;
  mcp_sink_session *snk;
  queue down, up;
  const char *keys[MAXC];  /* what the sink asks for */
  const char *colls[MAXC]; /* the store collections they are */
  size_t nc;
  int reject;      /* the code the application rejects with, 0: none */
  int inflight[MAXC];
  int last_code[MAXC];
  char last_sysver[MAXC][64];
  unsigned last_session[MAXC];
  unsigned nsession;
  int retry_codes[1];
  int quiet;       /* the final phase: no failures, no rejections */
} world;

static int key_index(const world *w, const char *key) {
  for (size_t i = 0; i < w->nc; ++i) {
    if (strcmp(w->keys[i], key) == 0 || strcmp(w->colls[i], key) == 0) {
      return (int)i;
    }
  }
  return -1;
}

static int retry_covers(const world *w, int code) {
  return w->so.nack_retry_initial &&
         (w->so.nack_retry_codes ? code == w->so.nack_retry_codes[0]
                                 : code == MCP_CODE_UNAVAILABLE);
}

static int on_apply(const mcp_change *ch, char *msg, size_t msglen, void *ud) {
  world *w = ud;
  int i = key_index(w, ch->collection);
  FZ_CHECK(i >= 0, "apply for %s", ch->collection);
  if (w->last_code[i] && w->last_session[i] == w->nsession &&
      !retry_covers(w, w->last_code[i])) {
    FZ_CHECK(strcmp(w->last_sysver[i], ch->system_version_info) != 0,
             "%s: %s pushed again after its NACK (code %d)", ch->collection,
             ch->system_version_info, w->last_code[i]);
  }
  int code = w->quiet ? 0 : w->reject;
  if (code) {
    snprintf(msg, msglen, "rejected with %d", code);
  }
  w->last_code[i] = code;
  w->last_session[i] = w->nsession;
  snprintf(w->last_sysver[i], sizeof(w->last_sysver[i]), "%s",
           ch->system_version_info);
  FZ_LOG("  apply %s %s incr=%d n=%zu rm=%zu -> %d", ch->collection,
         ch->system_version_info, ch->incremental, ch->nresources, ch->nremoved,
         code);
  return code;
}

static void on_event(const mcp_event *ev, void *ud) {
  (void)ud;
  FZ_CHECK(ev->collection && ev->nonce && ev->version && ev->message,
           "event with a NULL string");
  FZ_LOG("  event %d %s nonce=%s version=%s code=%d %s", (int)ev->type,
         ev->collection, ev->nonce, ev->version, ev->code, ev->message);
}

/* ---- sessions ---- */

static int open_sessions(world *w) {
  long fired = w->m.fired;
  int rv = mcp_source_session_new(&w->src, &w->so, w->ts);
  fz_check_nomem(&w->m, fired, rv, "source_session_new");
  if (rv == 0) {
    fired = w->m.fired;
    rv = mcp_sink_session_new(&w->snk, w->st, w->ts);
    fz_check_nomem(&w->m, fired, rv, "sink_session_new");
    if (rv != 0) {
      mcp_source_session_del(w->src);
      w->src = NULL;
    }
  }
  FZ_CHECK(rv == 0 || rv == MCP_ERR_NOMEM, "session_new: %d", rv);
  if (rv == 0) {
    memset(w->inflight, 0, sizeof(w->inflight));
    w->nsession++;
  }
  return rv;
}

/* The stream broke (or was ended): both sessions are replaced, what was in
 * flight is lost, the sink state stays. */
static void reconnect(world *w, const char *why) {
  FZ_LOG("reconnect (%s)", why);
  mcp_source_session_del(w->src);
  mcp_sink_session_del(w->snk);
  w->src = NULL;
  w->snk = NULL;
  q_clear(&w->down);
  q_clear(&w->up);
  if (open_sessions(w) != 0) {
    fz_mem_disarm(&w->m);
    FZ_CHECK(open_sessions(w) == 0, "sessions without failures");
  }
}

/* ---- the two directions ---- */

static int source_produce(world *w) {
  int want = mcp_source_session_want_write(w->src, w->ts);
  mcp_msg *m = NULL;
  long fired = w->m.fired;
  int rv = mcp_source_session_next(w->src, w->ts, &m);
  fz_check_nomem(&w->m, fired, rv, "source_session_next");
  if (rv == MCP_ERR_RESYNC) {
    FZ_CHECK(w->service == MCP_SERVICE_AGGREGATED_INCREMENTAL, "RESYNC");
    reconnect(w, "RESYNC");
    return -1;
  }
  FZ_CHECK(rv == 0 || rv == 1 || rv == MCP_ERR_NOMEM, "source next: %d", rv);
  FZ_CHECK(rv != 0 || !want, "want_write said 1, next produced nothing");
  FZ_CHECK(rv != 1 || want, "want_write said 0, next produced a message");
  if (rv != 1) {
    return rv;
  }
  int i = key_index(w, mcp_msg_collection(m));
  if (i >= 0) {
    FZ_CHECK(!w->inflight[i], "two pushes in flight for %s", w->keys[i]);
    w->inflight[i] = 1;
  } else {
    FZ_CHECK(strcmp(mcp_msg_collection(m), MCP_TRIGGER_COLLECTION) == 0,
             "a push for %s", mcp_msg_collection(m));
  }
  q_push(&w->down, m);
  return 1;
}

static int sink_produce(world *w) {
  int want = mcp_sink_session_want_write(w->snk);
  mcp_msg *m = NULL;
  long fired = w->m.fired;
  int rv = mcp_sink_session_next(w->snk, &m);
  fz_check_nomem(&w->m, fired, rv, "sink_session_next");
  FZ_CHECK(rv == 0 || rv == 1 || rv == MCP_ERR_NOMEM, "sink next: %d", rv);
  FZ_CHECK(rv < 0 || rv == want, "sink want_write %d, next %d", want, rv);
  if (rv == 1) {
    q_push(&w->up, m);
  }
  return rv;
}

/* Delivers the head of a queue. |how|: bit 0 drops it (the stream
 * breaks); bit 1 ends the stream on NOMEM instead of retrying later. */
static int deliver_down(world *w, unsigned how) {
  mcp_msg *m = q_peek(&w->down);
  if (!m) {
    return 0;
  }
  if (how & 1) {
    reconnect(w, "a push was lost");
    return -1;
  }
  size_t len;
  uint8_t *p = fz_flatten(m, &len);
  /* The application may see a push and reject it, and the sink then fail
   * to allocate its NACK: nothing changed, the push will be offered again. */
  int saved_code[MAXC];
  char saved_sysver[MAXC][64];
  unsigned saved_session[MAXC];
  memcpy(saved_code, w->last_code, sizeof(saved_code));
  memcpy(saved_sysver, w->last_sysver, sizeof(saved_sysver));
  memcpy(saved_session, w->last_session, sizeof(saved_session));
  long fired = w->m.fired;
  int rv = mcp_sink_session_recv(w->snk, p, len, w->ts);
  free(p);
  fz_check_nomem(&w->m, fired, rv, "sink_session_recv");
  FZ_CHECK(rv == 0 || rv == MCP_ERR_NOMEM, "sink recv: %d (%s)", rv,
           mcp_strerror(rv));
  if (rv == MCP_ERR_NOMEM) {
    memcpy(w->last_code, saved_code, sizeof(saved_code));
    memcpy(w->last_sysver, saved_sysver, sizeof(saved_sysver));
    memcpy(w->last_session, saved_session, sizeof(saved_session));
    if (how & 2) {
      reconnect(w, "sink recv NOMEM");
      return -1;
    }
    return 0; /* delivered again later */
  }
  q_drop(&w->down);
  mcp_msg_free(m);
  return 1;
}

static int deliver_up(world *w, unsigned how) {
  mcp_msg *m = q_peek(&w->up);
  if (!m) {
    return 0;
  }
  if (how & 1) {
    reconnect(w, "a request was lost");
    return -1;
  }
  size_t len;
  uint8_t *p = fz_flatten(m, &len);
  fz_req q;
  FZ_CHECK(fz_req_decode(w->service, p, len, &q) == 0,
           "a request does not decode");
  int i = key_index(w, q.key);
  int answer = i >= 0 && q.nonce[0];
  long fired = w->m.fired;
  int rv = mcp_source_session_recv(w->src, p, len, w->ts);
  free(p);
  fz_check_nomem(&w->m, fired, rv, "source_session_recv");
  FZ_CHECK(rv == 0 || rv == MCP_ERR_NOMEM, "source recv: %d (%s)", rv,
           mcp_strerror(rv));
  if (rv == MCP_ERR_NOMEM) {
    fz_req_free(&q);
    if (how & 2) {
      reconnect(w, "source recv NOMEM");
      return -1;
    }
    return 0;
  }
  if (answer) {
    FZ_CHECK(w->inflight[i], "an answer for %s with no push in flight", q.key);
    w->inflight[i] = 0;
  }
  fz_req_free(&q);
  q_drop(&w->up);
  mcp_msg_free(m);
  return 1;
}

/* NOMEM only where an allocation failed (a debounced change's record);
 * nothing is lost, a later call does it. */
static void handle_expiry(world *w) {
  if (mcp_source_session_get_expiry(w->src) <= w->ts) {
    long fired = w->m.fired;
    int rv = mcp_source_session_handle_expiry(w->src, w->ts);
    fz_check_nomem(&w->m, fired, rv, "source_session_handle_expiry");
    FZ_CHECK(rv == 0 || rv == MCP_ERR_NOMEM, "expiry: %d (%s)", rv,
             mcp_strerror(rv));
  }
}

/* Runs both sides until nothing moves and no timer is pending. */
static void drain(world *w) {
  int idle = 0;
  for (int guard = 0;; ++guard) {
    FZ_CHECK(guard < 20000, "drain does not end");
    int progress = 0;
    while (source_produce(w) != 0) {
      progress = 1;
    }
    while (deliver_down(w, 0) > 0) {
      progress = 1;
    }
    while (sink_produce(w) > 0) {
      progress = 1;
    }
    while (deliver_up(w, 0) > 0) {
      progress = 1;
    }
    if (progress) {
      idle = 0;
      continue;
    }
    mcp_tstamp e = mcp_source_session_get_expiry(w->src);
    if (e == MCP_TSTAMP_MAX) {
      return;
    }
    FZ_CHECK(++idle < 3, "expiry %" PRIu64 " <= now %" PRIu64 ", nothing to do",
             e, w->ts);
    if (e > w->ts) {
      w->ts = e;
    }
    FZ_CHECK(mcp_source_session_handle_expiry(w->src, w->ts) == 0, "expiry");
  }
}

/* ---- comparing ---- */

typedef struct cmp_ctx {
  const world *w;
  const char *coll;
  size_t n, bad;
  char first[128];
} cmp_ctx;

static void cmp_cb(const char *name, const char *version, void *ud) {
  cmp_ctx *c = ud;
  const char *sv = mcp_store_version(c->w->store, c->coll, name);
  c->n++;
  if (!sv || strcmp(sv, version) != 0) {
    if (!c->bad++) {
      snprintf(c->first, sizeof(c->first), "%s=%s (store: %s)", name, version,
               sv ? sv : "none");
    }
  }
}

/* 1 when the sink holds exactly the store's collection i. */
static int same(const world *w, size_t i, char *why, size_t whyn) {
  cmp_ctx c = {.w = w, .coll = w->colls[i]};
  mcp_sink_state_foreach(w->st, w->keys[i], cmp_cb, &c);
  FZ_CHECK(c.n == mcp_sink_state_count(w->st, w->keys[i]), "count");
  size_t sn = mcp_store_count(w->store, w->colls[i]);
  snprintf(why, whyn, "sink holds %zu, store has %zu, %zu differ (%s)", c.n, sn,
           c.bad, c.bad ? c.first : "-");
  return c.bad == 0 && c.n == sn;
}

/* ---- the script ---- */

static const int k_reject[4] = {0, MCP_CODE_UNAVAILABLE,
                                MCP_CODE_INVALID_ARGUMENT, MCP_CODE_INTERNAL};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int inited;
  if (!inited) {
    fz_init_verbose();
    inited = 1;
  }
  fz_in in = {data, size};
  world *w = calloc(1, sizeof(*w));
  FZ_CHECK(w, "out of memory");
  fz_mem_init(&w->m);
  w->ts = 1 * MCP_SECONDS;
  w->service = (mcp_service)(fz_u8(&in) % 3);
  uint8_t k = fz_u8(&in), t = fz_u8(&in), x = fz_u8(&in);

  /* The sink asks for 1-4 collections; with bit 3 the last one is
   * test/v1/deltas, which only a store operation ever creates. */
  w->nc = 1 + ((k >> 1) & 3);
  for (size_t i = 0; i < w->nc; ++i) {
    size_t j = (k & 8) && i == w->nc - 1 ? 4 : i;
    w->keys[i] = fz_key(w->service, j);
    w->colls[i] = fz_colls[j];
  }

  mcp_store_options o;
  mcp_store_options_default(&o);
  o.mem = &w->m.mem;
  o.rand = fz_rand;
  w->seed = FZ_PAIR_SEED;
  o.rand_user_data = &w->seed;
  int rv = mcp_store_new(&w->store, &o);
  FZ_CHECK(rv == 0, "store_new: %d", rv);
  for (size_t i = 0; i < w->nc; ++i) {
    if (x & (1u << i)) {
      FZ_CHECK(mcp_store_add_collection(w->store, w->colls[i]) == 0, "add");
    }
  }

  mcp_source_options_default(&w->so);
  w->so.mem = &w->m.mem;
  w->so.store = w->store;
  w->so.service = w->service;
  w->so.debounce = k_debounce[t & 3];
  w->so.max_delay = k_max_delay[(t >> 2) & 3];
  w->so.nack_retry_initial = k_retry[(t >> 4) & 3];
  w->so.nack_retry_max = (t & 64) ? 8 * w->so.nack_retry_initial : 0;
  w->so.send_trigger = (t >> 7) & 1;
  if (x & 16) {
    w->retry_codes[0] = MCP_CODE_INVALID_ARGUMENT;
    w->so.nack_retry_codes = w->retry_codes;
    w->so.nnack_retry_codes = 1;
  }

  mcp_sink_options_default(&w->ko);
  w->ko.mem = &w->m.mem;
  w->ko.node_id = "pair";
  w->ko.collections = w->keys;
  w->ko.ncollections = w->nc;
  w->ko.incremental = k & 1;
  w->ko.apply = on_apply;
  w->ko.on_event = on_event;
  w->ko.user_data = w;
  w->ko.journal_size = (size_t)(k >> 4);
  w->ko.service = w->service;
  rv = mcp_sink_state_new(&w->st, &w->ko);
  FZ_CHECK(rv == 0, "sink_state_new: %d", rv);
  FZ_CHECK(open_sessions(w) == 0, "sessions");
  FZ_LOG("pair: service %d incremental %d collections %zu debounce %" PRIu64
         " max_delay %" PRIu64 " retry %" PRIu64 " trigger %d",
         (int)w->service, w->ko.incremental, w->nc, w->so.debounce,
         w->so.max_delay, w->so.nack_retry_initial, w->so.send_trigger);

  while (in.n) {
    uint8_t op = fz_u8(&in) % PAIR_NOPS;
    switch (op) {
    case PAIR_STORE:
      fz_store_op(&in, w->store, &w->m, w->ts);
      break;
    case PAIR_SOURCE:
      source_produce(w);
      break;
    case PAIR_DOWN:
      deliver_down(w, fz_u8(&in) & 3);
      break;
    case PAIR_SINK:
      sink_produce(w);
      break;
    case PAIR_UP:
      deliver_up(w, fz_u8(&in) & 3);
      break;
    case PAIR_ADVANCE:
      w->ts += (mcp_tstamp)(fz_u8(&in) % 64) * MS / 2;
      handle_expiry(w);
      break;
    case PAIR_EXPIRY: {
      mcp_tstamp e = mcp_source_session_get_expiry(w->src);
      if (e != MCP_TSTAMP_MAX && e > w->ts) {
        w->ts = e;
      }
      handle_expiry(w);
      break;
    }
    case PAIR_REJECT:
      w->reject = k_reject[fz_u8(&in) % 4];
      FZ_LOG("reject %d", w->reject);
      break;
    case PAIR_RECONNECT:
      reconnect(w, "script");
      break;
    default: {
      unsigned n = 1 + fz_u8(&in) % 32;
      FZ_LOG("fail allocation +%u", n);
      fz_mem_arm(&w->m, n);
      break;
    }
    }
  }

  /* Quiet: no failures; the application accepts everything. */
  fz_mem_disarm(&w->m);
  w->quiet = 1;
  FZ_LOG("quiet drain");
  drain(w);
  char epoch[24];
  snprintf(epoch, sizeof(epoch), "%016" PRIx64, mcp_store_epoch(w->store));
  for (size_t i = 0; i < w->nc; ++i) {
    char why[200];
    if (same(w, i, why, sizeof(why))) {
      continue;
    }
    /* Only allowed when the current content was rejected for good. */
    char cur[64];
    snprintf(cur, sizeof(cur), "%s-%" PRIu64, epoch,
             mcp_store_generation(w->store, w->colls[i]));
    FZ_CHECK(w->last_code[i] != 0,
             "%s not converged after drain, last push accepted: %s",
             w->keys[i], why);
    FZ_CHECK(strcmp(w->last_sysver[i], cur) == 0,
             "%s: the last rejected push (%s) is not the current generation "
             "(%s): %s",
             w->keys[i], w->last_sysver[i], cur, why);
    FZ_CHECK(!retry_covers(w, w->last_code[i]),
             "%s: code %d with a retry policy was not retried", w->keys[i],
             w->last_code[i]);
  }

  /* One more change per collection, and everything must match. */
  for (size_t i = 0; i < w->nc; ++i) {
    mcp_resource r;
    memset(&r, 0, sizeof(r));
    char body[32];
    snprintf(body, sizeof(body), "final-%" PRIu64 "-fz",
             mcp_store_generation(w->store, w->colls[i]));
    r.name = "final";
    r.type_url = FZ_BODY_TYPE;
    r.body = (const uint8_t *)body;
    r.body_len = strlen(body);
    rv = mcp_store_upsert(w->store, w->colls[i], &r, w->ts);
    FZ_CHECK(rv == 1, "final upsert: %d", rv);
  }
  drain(w);
  for (size_t i = 0; i < w->nc; ++i) {
    char why[200];
    FZ_CHECK(same(w, i, why, sizeof(why)), "%s does not match the store: %s",
             w->keys[i], why);
    FZ_CHECK(!w->inflight[i], "%s: a push still in flight", w->keys[i]);
  }
  FZ_CHECK(mcp_sink_state_synced(w->st), "not synced after the final drain");

  mcp_source_session_del(w->src);
  mcp_sink_session_del(w->snk);
  q_clear(&w->down);
  q_clear(&w->up);
  free(w->down.v);
  free(w->up.v);
  mcp_sink_state_del(w->st);
  mcp_store_del(w->store);
  FZ_CHECK(w->m.live == 0, "%ld blocks leaked", w->m.live);
  free(w);
  return 0;
}
