/*
 * Allocation failure at every single allocation of a full scenario: a store
 * with resources, two source sessions and two sink states and sessions (one
 * incremental, one full state, one of them dialed with the trigger), the
 * initial sync, changes, a NACK from the application, a reconnect with
 * resumption.
 *
 * Run k fails the k-th allocation (th_mem fail_at = k), for k = 1, 2, ...
 * until a run sees no failure. Every allocation goes through the mcp_mem
 * hook of the options, so:
 *  - the call that met the failure returns MCP_ERR_NOMEM (never crashes,
 *    never swallows it, never reports something else);
 *  - that call changed nothing visible (store, sessions, sink states, out
 *    parameters);
 *  - after tearing everything down, no block is left (th_mem.live == 0);
 *  - (second test) the same call retried with failures off succeeds, and
 *    the scenario still converges.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"

typedef Istio__Mcp__V1alpha1__RequestResources Req;
typedef Istio__Mcp__V1alpha1__Resources Res;

#define NK 2

/* check's ck_assert records a checkpoint through the runner at every call,
 * which is slow in the hot paths here: check cheaply, abort on failure. */
#define REQUIRE(cond, ...)      \
  do {                          \
    if (!(cond)) {              \
      ck_abort_msg(__VA_ARGS__); \
    }                           \
  } while (0)
#define SNAP 8192

typedef struct ctx {
  th_mem m;
  long fail_at0;  /* the allocation this run fails */
  int retry;      /* 0: tear down at the NOMEM; 1: retry without failures */
  int nomem;      /* calls that returned NOMEM */
  mcp_tstamp ts;
  mcp_store *store;
  mcp_source_session *src[NK];
  mcp_sink_state *st[NK];
  mcp_sink_session *snk[NK];
  uint8_t *buf;   /* a message in transit (libc, not counted) */
  unsigned napply, nrejected;
  /* Every message exchanged, decoded into a canonical line: recorded by the
   * run without failures, compared by the runs that retry (a call that
   * failed and was retried must not change what goes on the wire). */
  struct trace *trace;
  int record;
  size_t tpos;
} ctx;

#define MAXT 128
typedef struct trace {
  char *line[MAXT];
  size_t n;
} trace;

static const char *const NAMES[] = {"a1", "a2", "a4", "bad", "b1", "b2",
                                    "b3", "c1", NULL};
static const char *const SINK_COLLS[NK][4] = {{"A", "B", "C", "D"}, {"A", "B"}};
static const size_t NSINK_COLLS[NK] = {4, 2};

/* ---- a canonical description of everything visible ---- */

typedef struct sbuf {
  char *p;
  size_t n;
} sbuf;

static void sb_add(sbuf *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(s->p + s->n, SNAP - s->n, fmt, ap);
  va_end(ap);
  REQUIRE(k >= 0 && s->n + (size_t)k < SNAP, "snapshot too long");
  s->n += (size_t)k;
}

typedef struct held_acc {
  char items[32][48];
  size_t n;
} held_acc;

static void held_cb(const char *name, const char *version, void *ud) {
  held_acc *a = ud;
  REQUIRE(a->n < 32, "too many held");
  snprintf(a->items[a->n++], 48, "%s=%s", name, version);
}

static int cmp_items(const void *a, const void *b) { return strcmp(a, b); }
static int cmp_strp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void status_line(sbuf *s, const mcp_collection_status *st) {
  sb_add(s, " [%s k%d i%d a'%s' p'%s' n'%s' nc%d nm'%s' %llu/%llu/%llu/%llu h%zu]",
         st->collection, st->known, st->incremental, st->acked_version,
         st->pending_version, st->pending_nonce, st->last_nack_code,
         st->last_nack_message, (unsigned long long)st->pushes,
         (unsigned long long)st->acks, (unsigned long long)st->nacks,
         (unsigned long long)st->stale, st->held);
}

static void snap(ctx *c, char *out) {
  sbuf s = {out, 0};
  out[0] = '\0';
  if (c->store) {
    size_t nc = mcp_store_collection_count(c->store);
    sb_add(&s, "store %zu:", nc);
    for (size_t i = 0; i < nc; ++i) {
      const char *coll = mcp_store_collection_name(c->store, i);
      sb_add(&s, " %s g%llu n%zu", coll,
             (unsigned long long)mcp_store_generation(c->store, coll),
             mcp_store_count(c->store, coll));
      for (size_t k = 0; NAMES[k]; ++k) {
        const char *v = mcp_store_version(c->store, coll, NAMES[k]);
        if (v) {
          sb_add(&s, " %s=%s", NAMES[k], v);
        }
      }
    }
  } else {
    sb_add(&s, "no store");
  }
  for (int k = 0; k < NK; ++k) {
    if (c->src[k]) {
      size_t n = mcp_source_session_collection_count(c->src[k]);
      sb_add(&s, "\nsrc%d '%s' %zu:", k, mcp_source_session_node_id(c->src[k]), n);
      for (size_t i = 0; i < n; ++i) {
        mcp_collection_status st;
        REQUIRE(mcp_source_session_collection_status(c->src[k], i, c->ts, &st) == 0,
                "source status");
        status_line(&s, &st);
      }
    } else {
      sb_add(&s, "\nno src%d", k);
    }
    if (c->st[k]) {
      size_t n = mcp_sink_state_collection_count(c->st[k]);
      sb_add(&s, "\nsink%d synced%d journal%zu:", k, mcp_sink_state_synced(c->st[k]),
             mcp_sink_state_journal_count(c->st[k]));
      for (size_t i = 0; i < n; ++i) {
        mcp_collection_status st;
        REQUIRE(mcp_sink_state_collection_status(c->st[k], i, c->ts, &st) == 0,
                "sink status");
        status_line(&s, &st);
        held_acc a;
        a.n = 0;
        mcp_sink_state_foreach(c->st[k], st.collection, held_cb, &a);
        qsort(a.items, a.n, sizeof(a.items[0]), cmp_items);
        for (size_t j = 0; j < a.n; ++j) {
          sb_add(&s, " %s", a.items[j]);
        }
      }
      size_t jn = mcp_sink_state_journal_count(c->st[k]);
      if (jn) {
        mcp_journal_entry e;
        REQUIRE(mcp_sink_state_journal_entry(c->st[k], jn - 1, &e) == 0, "journal");
        sb_add(&s, " last(%s '%s' %d %d)", e.collection, e.nonce, e.kind, e.code);
      }
    } else {
      sb_add(&s, "\nno sink%d", k);
    }
    if (c->snk[k]) {
      sb_add(&s, " session want%d", mcp_sink_session_want_write(c->snk[k]));
    }
  }
}

/*
 * Failure-atomicity violations: recorded (the first per call site) rather
 * than asserted at once, so that one violation does not hide the crashes,
 * leaks or other violations at later allocations. Each test asserts at its
 * end that there were none.
 */
#define MAXV 16
static struct {
  char expr[128];
  long fail_at;
  char detail[1024];
} viol[MAXV];
static int nviol;

static void violation(long fail_at, const char *expr, const char *before,
                      const char *after) {
  for (int i = 0; i < nviol; ++i) {
    if (strcmp(viol[i].expr, expr) == 0) {
      return;
    }
  }
  if (nviol == MAXV) {
    return;
  }
  snprintf(viol[nviol].expr, sizeof(viol[nviol].expr), "%s", expr);
  viol[nviol].fail_at = fail_at;
  /* Only the first line that differs. */
  const char *b = before, *a = after;
  while (*b && *b == *a) {
    if (*b == '\n') {
      before = b + 1;
      after = a + 1;
    }
    b++;
    a++;
  }
  int bl = (int)strcspn(before, "\n"), al = (int)strcspn(after, "\n");
  snprintf(viol[nviol].detail, sizeof(viol[nviol].detail),
           "before: %.*s\n    after:  %.*s", bl, before, al, after);
  nviol++;
}

static void assert_no_violation(void) {
  char msg[MAXV * 1400] = "";
  size_t n = 0;
  for (int i = 0; i < nviol; ++i) {
    n += (size_t)snprintf(msg + n, sizeof(msg) - n,
                          "\n  %s returned NOMEM (fail_at %ld) but changed "
                          "state:\n    %s",
                          viol[i].expr, viol[i].fail_at, viol[i].detail);
  }
  ck_assert_msg(nviol == 0, "%d call(s) changed state on NOMEM:%s", nviol, msg);
}

/*
 * Runs |expr| (an int-returning core call). On NOMEM: checks that the call
 * met the injected failure and changed nothing, then either gives up
 * (returns -1 from the enclosing function) or retries with failures off.
 * Any other negative result fails the test, and so does a failed
 * allocation the call did not report.
 */
#define TRY(c, rv, expr)                                                        \
  do {                                                                          \
    char s0_[SNAP], s1_[SNAP];                                                  \
    int f0_ = (c)->m.failed;                                                    \
    int armed_ = !f0_ && (c)->m.fail_at; /* this call may meet the failure */   \
    if (armed_) {                                                               \
      snap((c), s0_);                                                           \
    }                                                                           \
    (rv) = (expr);                                                              \
    int hit_ = !f0_ && (c)->m.failed;                                           \
    REQUIRE(!hit_ || (rv) == MCP_ERR_NOMEM,                                     \
            "fail_at %ld: %s met a failed allocation and returned %d",          \
            (c)->fail_at0, #expr, (rv));                                        \
    if ((rv) == MCP_ERR_NOMEM) {                                                \
      REQUIRE(hit_, "fail_at %ld: %s: NOMEM without a failed allocation",       \
              (c)->fail_at0, #expr);                                            \
      (c)->nomem++;                                                             \
      snap((c), s1_);                                                           \
      if (strcmp(s0_, s1_) != 0) {                                              \
        violation((c)->fail_at0, #expr, s0_, s1_);                              \
      }                                                                         \
      if (!(c)->retry) {                                                        \
        return -1;                                                              \
      }                                                                         \
      (c)->m.fail_at = 0;                                                       \
      (rv) = (expr);                                                            \
    }                                                                           \
    REQUIRE((rv) >= 0, "fail_at %ld: %s: %s", (c)->fail_at0, #expr,             \
            mcp_strerror(rv));                                                  \
  } while (0)

/* ---- the scenario ---- */

static int on_apply(const mcp_change *ch, char *msg, size_t msglen, void *ud) {
  ctx *c = ud;
  c->napply++;
  for (size_t i = 0; i < ch->nresources; ++i) {
    if (strcmp(ch->resources[i].name, "bad") == 0) {
      snprintf(msg, msglen, "bad is bad");
      c->nrejected++;
      return MCP_CODE_INVALID_ARGUMENT;
    }
  }
  return 0;
}

static int upsert(ctx *c, const char *coll, const char *name, const char *ver,
                  const char *body) {
  mcp_resource r = th_res(name, ver, body);
  return mcp_store_upsert(c->store, coll, &r, c->ts);
}

static int new_source(ctx *c, int k) {
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.mem = &c->m.mem;
  o.store = c->store;
  o.send_trigger = k == 1;
  int rv;
  TRY(c, rv, mcp_source_session_new(&c->src[k], &o, c->ts));
  return 0;
}

static int new_sink_session(ctx *c, int k) {
  int rv;
  TRY(c, rv, mcp_sink_session_new(&c->snk[k], c->st[k], c->ts));
  return 0;
}

static int new_sink(ctx *c, int k) {
  static const mcp_kv ann[] = {{"team", "alloc"}};
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.mem = &c->m.mem;
  o.node_id = k ? "full" : "incremental";
  o.node_annotations = ann;
  o.nnode_annotations = 1;
  o.collections = SINK_COLLS[k];
  o.ncollections = NSINK_COLLS[k];
  o.incremental = k == 0;
  o.apply = on_apply;
  o.user_data = c;
  o.journal_size = 3; /* small: the ring wraps */
  int rv;
  TRY(c, rv, mcp_sink_state_new(&c->st[k], &o));
  return new_sink_session(c, k);
}

/* Sorted, comma-separated list of |n| strings. */
static void sorted_list(sbuf *s, char **items, size_t n) {
  qsort(items, n, sizeof(*items), cmp_strp);
  sb_add(s, "[");
  for (size_t i = 0; i < n; ++i) {
    sb_add(s, "%s%s", i ? "," : "", items[i]);
  }
  sb_add(s, "]");
}

/* A canonical line for a message: what it means, not how it is laid out
 * (map iteration order may legitimately differ). |up|: a request. */
static void canon(const uint8_t *p, size_t len, int up, char *out) {
  sbuf s = {out, 0};
  char *items[64];
  char tmp[64][64];
  if (up) {
    Req *r = istio__mcp__v1alpha1__request_resources__unpack(NULL, len, p);
    REQUIRE(r, "a request that does not decode");
    REQUIRE(r->n_initial_resource_versions <= 64, "too many");
    for (size_t i = 0; i < r->n_initial_resource_versions; ++i) {
      snprintf(tmp[i], 64, "%s@%s", r->initial_resource_versions[i]->key,
               r->initial_resource_versions[i]->value);
      items[i] = tmp[i];
    }
    sb_add(&s, "Q %s nonce'%s' inc%d code%d node'%s' init", r->collection,
           r->response_nonce, r->incremental,
           r->error_detail ? r->error_detail->code : 0,
           r->sink_node ? r->sink_node->id : "");
    sorted_list(&s, items, r->n_initial_resource_versions);
    istio__mcp__v1alpha1__request_resources__free_unpacked(r, NULL);
  } else {
    Res *r = istio__mcp__v1alpha1__resources__unpack(NULL, len, p);
    REQUIRE(r, "a push that does not decode");
    REQUIRE(r->n_resources <= 64 && r->n_removed_resources <= 64, "too many");
    sb_add(&s, "R %s nonce'%s' sv'%s' inc%d res", r->collection, r->nonce,
           r->system_version_info, r->incremental);
    for (size_t i = 0; i < r->n_resources; ++i) {
      snprintf(tmp[i], 64, "%s@%s", r->resources[i]->metadata->name,
               r->resources[i]->metadata->version);
      items[i] = tmp[i];
    }
    sorted_list(&s, items, r->n_resources);
    sb_add(&s, " rem");
    for (size_t i = 0; i < r->n_removed_resources; ++i) {
      items[i] = r->removed_resources[i];
    }
    sorted_list(&s, items, r->n_removed_resources);
    istio__mcp__v1alpha1__resources__free_unpacked(r, NULL);
  }
}

static uint8_t *flat(ctx *c, mcp_msg *m, size_t *len, int up) {
  *len = mcp_msg_len(m);
  c->buf = malloc(*len ? *len : 1);
  mcp_msg_flatten(m, c->buf);
  mcp_msg_free(m);
  if (c->trace) {
    char line[SNAP];
    canon(c->buf, *len, up, line);
    trace *t = c->trace;
    if (c->record) {
      REQUIRE(t->n < MAXT, "trace too long");
      t->line[t->n++] = strdup(line);
    } else {
      REQUIRE(c->tpos < t->n, "fail_at %ld: message %zu, not in the run "
              "without failures: %s", c->fail_at0, c->tpos, line);
      REQUIRE(strcmp(t->line[c->tpos], line) == 0,
              "fail_at %ld: message %zu differs from the run without "
              "failures:\n  want: %s\n  got:  %s",
              c->fail_at0, c->tpos, t->line[c->tpos], line);
    }
    c->tpos++;
  }
  return c->buf;
}

/* Moves messages between src[k] and snk[k] until both are quiet. */
static int pump(ctx *c, int k) {
  for (int guard = 0; guard < 200; ++guard) {
    int moved = 0, rv;
    for (;;) {
      mcp_msg *m = NULL;
      TRY(c, rv, mcp_sink_session_next(c->snk[k], &m));
      if (!rv) {
        break;
      }
      moved = 1;
      size_t len;
      uint8_t *p = flat(c, m, &len, 1);
      c->ts += 1000;
      TRY(c, rv, mcp_source_session_recv(c->src[k], p, len, c->ts));
      free(c->buf);
      c->buf = NULL;
    }
    while (mcp_source_session_want_write(c->src[k], c->ts)) {
      mcp_msg *m = NULL;
      TRY(c, rv, mcp_source_session_next(c->src[k], c->ts, &m));
      REQUIRE(rv == 1, "want_write without a message");
      moved = 1;
      size_t len;
      uint8_t *p = flat(c, m, &len, 0);
      c->ts += 1000;
      TRY(c, rv, mcp_sink_session_recv(c->snk[k], p, len, c->ts));
      free(c->buf);
      c->buf = NULL;
    }
    if (!moved) {
      return 0;
    }
  }
  ck_abort_msg("fail_at %ld: pump does not end", c->fail_at0);
  return -1;
}

static int pump_all(ctx *c) {
  for (int k = 0; k < NK; ++k) {
    if (pump(c, k) != 0) {
      return -1;
    }
  }
  return 0;
}

typedef struct cmp_ctx {
  ctx *c;
  const char *coll;
  size_t n, bad;
} cmp_ctx;

static void cmp_cb(const char *name, const char *version, void *ud) {
  cmp_ctx *x = ud;
  const char *v = mcp_store_version(x->c->store, x->coll, name);
  x->n++;
  x->bad += !v || strcmp(v, version) != 0;
}

/* Every sink holds exactly the store's content of its collections (all of
 * them, or only |only|). */
static void check_converged(ctx *c, const char *when, const char *only) {
  for (int k = 0; k < NK; ++k) {
    for (size_t i = 0; i < NSINK_COLLS[k]; ++i) {
      const char *coll = SINK_COLLS[k][i];
      if (only && strcmp(only, coll) != 0) {
        continue;
      }
      cmp_ctx x = {.c = c, .coll = coll};
      mcp_sink_state_foreach(c->st[k], coll, cmp_cb, &x);
      REQUIRE(x.bad == 0 && x.n == mcp_store_count(c->store, coll),
              "fail_at %ld, %s: sink %d, %s: holds %zu (%zu differ), "
              "store has %zu",
              c->fail_at0, when, k, coll, x.n, x.bad,
              mcp_store_count(c->store, coll));
    }
  }
}

static int scenario(ctx *c) {
  int rv;
  mcp_store_options so;
  mcp_store_options_default(&so);
  so.mem = &c->m.mem;
  so.epoch = 0x77;
  c->ts = 1000000;
  TRY(c, rv, mcp_store_new(&c->store, &so));
  /* Collections created by their first resource, and one declared. */
  TRY(c, rv, upsert(c, "A", "a1", NULL, "body-a1"));
  TRY(c, rv, upsert(c, "A", "a2", "v2", "body-a2"));
  TRY(c, rv, upsert(c, "B", "b1", NULL, "body-b1"));
  TRY(c, rv, mcp_store_add_collection(c->store, "C"));

  /* Initial sync. */
  for (int k = 0; k < NK; ++k) {
    if (new_source(c, k) || new_sink(c, k)) {
      return -1;
    }
  }
  if (pump_all(c)) {
    return -1;
  }
  check_converged(c, "initial sync", NULL);
  REQUIRE(mcp_sink_state_synced(c->st[0]) == 0, "synced without D"); /* D is unknown */
  REQUIRE(mcp_sink_state_synced(c->st[1]) == 1, "sink 1 not synced");

  /* Changes, one of which the application rejects. */
  c->ts += 1000;
  TRY(c, rv, upsert(c, "A", "a1", NULL, "body-a1-new"));
  TRY(c, rv, mcp_store_delete(c->store, "A", "a2", c->ts));
  mcp_resource rb[2] = {th_res("b2", NULL, "body-b2"), th_res("b3", "v3", "body-b3")};
  TRY(c, rv, mcp_store_replace(c->store, "B", rb, 2, c->ts));
  TRY(c, rv, upsert(c, "A", "bad", NULL, "body-bad"));
  unsigned rejected = c->nrejected;
  if (pump_all(c)) {
    return -1;
  }
  REQUIRE(c->nrejected > rejected, "nothing rejected");
  check_converged(c, "changes", "B"); /* A was rejected */
  REQUIRE(mcp_sink_state_version(c->st[0], "A", "a2") &&
              strcmp(mcp_sink_state_version(c->st[0], "A", "a2"), "v2") == 0,
          "fail_at %ld: the rejected push changed A", c->fail_at0);
  REQUIRE(!mcp_sink_state_version(c->st[0], "A", "bad"), "bad is held");

  /* The fix: the next change is accepted. */
  c->ts += 1000;
  TRY(c, rv, mcp_store_delete(c->store, "A", "bad", c->ts));
  TRY(c, rv, upsert(c, "A", "a4", NULL, "body-a4"));
  if (pump_all(c)) {
    return -1;
  }
  check_converged(c, "after the NACK", NULL);

  /* Reconnect; the store changes while the sinks are away. */
  for (int k = 0; k < NK; ++k) {
    mcp_sink_session_del(c->snk[k]);
    c->snk[k] = NULL;
    mcp_source_session_del(c->src[k]);
    c->src[k] = NULL;
  }
  c->ts += 1000;
  TRY(c, rv, mcp_store_delete(c->store, "B", "b2", c->ts));
  TRY(c, rv, upsert(c, "C", "c1", NULL, "body-c1"));
  TRY(c, rv, upsert(c, "D", "d1", NULL, "body-d1")); /* D becomes known */
  for (int k = 0; k < NK; ++k) {
    if (new_source(c, k) || new_sink_session(c, k)) {
      return -1;
    }
  }
  if (pump_all(c)) {
    return -1;
  }
  check_converged(c, "resumption", NULL);
  REQUIRE(mcp_sink_state_synced(c->st[0]) == 1, "sink 0 not synced");
  return 0;
}

static void teardown(ctx *c) {
  for (int k = 0; k < NK; ++k) {
    mcp_sink_session_del(c->snk[k]);
    mcp_source_session_del(c->src[k]);
    mcp_sink_state_del(c->st[k]);
  }
  mcp_store_del(c->store);
  free(c->buf);
  REQUIRE(c->m.live == 0, "fail_at %ld: %ld blocks leaked", c->fail_at0,
          c->m.live);
}

/* Runs the scenario once per allocation; returns the number of runs. */
static long every_allocation(int retry) {
  long runs = 0;
  trace t;
  memset(&t, 0, sizeof(t));
  {
    ctx c;
    memset(&c, 0, sizeof(c));
    th_mem_init(&c.m, 0);
    c.trace = &t;
    c.record = 1;
    REQUIRE(scenario(&c) == 0, "the run without failures failed");
    teardown(&c);
  }
  for (long fail_at = 1; fail_at < 100000; ++fail_at) {
    ctx c;
    memset(&c, 0, sizeof(c));
    th_mem_init(&c.m, fail_at);
    c.fail_at0 = fail_at;
    c.retry = retry;
    c.trace = retry ? &t : NULL;
    int rv = scenario(&c);
    REQUIRE(!retry || c.tpos == t.n, "fail_at %ld: %zu messages, %zu without "
            "failures", fail_at, c.tpos, t.n);
    runs++;
    int failed = c.m.failed;
    if (retry) {
      REQUIRE(rv == 0, "fail_at %ld: the scenario did not complete", fail_at);
    } else {
      REQUIRE(rv == 0 || c.nomem == 1, "fail_at %ld: gave up without NOMEM",
              fail_at);
    }
    REQUIRE(!failed || c.nomem == 1,
            "fail_at %ld: an allocation failed but no call reported it", fail_at);
    teardown(&c);
    if (!failed) {
      REQUIRE(rv == 0 && c.nomem == 0, "the run without failure failed");
      break;
    }
  }
  for (size_t i = 0; i < t.n; ++i) {
    free(t.line[i]);
  }
  return runs;
}

START_TEST(scenario_without_failures_converges_and_frees_everything) {
  ctx c;
  memset(&c, 0, sizeof(c));
  th_mem_init(&c.m, 0);
  ck_assert_int_eq(scenario(&c), 0);
  ck_assert_int_eq(c.m.failed, 0);
  /* Everything went through the hook. */
  ck_assert_int_gt(c.m.count, 100);
  ck_assert_int_gt(c.m.live, 0);
  ck_assert_uint_gt(c.nrejected, 0);
  teardown(&c);
}
END_TEST

START_TEST(nomem_at_every_allocation_then_teardown_leaks_nothing) {
  long runs = every_allocation(0);
  ck_assert_int_gt(runs, 100);
}
END_TEST

START_TEST(nomem_at_every_allocation_changes_nothing_and_retry_converges) {
  long runs = every_allocation(1);
  ck_assert_int_gt(runs, 100);
  assert_no_violation();
}
END_TEST

/* A failing sticky allocator: every call after the first failure fails
 * too; teardown still frees everything. */
START_TEST(sticky_failure_from_every_allocation_leaks_nothing) {
  for (long fail_at = 1; fail_at < 100000; ++fail_at) {
    ctx c;
    memset(&c, 0, sizeof(c));
    th_mem_init(&c.m, fail_at);
    c.fail_at0 = fail_at;
    c.m.sticky = 1;
    int rv = scenario(&c);
    int failed = c.m.failed;
    teardown(&c);
    if (!failed) {
      REQUIRE(rv == 0, "the run without failure failed");
      break;
    }
    REQUIRE(rv == -1, "fail_at %ld: a sticky failure went unreported", fail_at);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("core_alloc");
  TCase *tc = tcase_create("alloc");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, scenario_without_failures_converges_and_frees_everything);
  tcase_add_test(tc, nomem_at_every_allocation_then_teardown_leaks_nothing);
  tcase_add_test(tc, nomem_at_every_allocation_changes_nothing_and_retry_converges);
  tcase_add_test(tc, sticky_failure_from_every_allocation_leaks_nothing);
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
