/*
 * gen_corpus OUTDIR: writes the seed scripts of the fuzz targets into
 * OUTDIR/fuzz_<target>/<scenario>.
 *
 * The scenarios are real traces: a real store, source session and sink
 * session run the scenario (initial sync, edits, NACKs, retries, debounce,
 * reconnect and resumption, the trigger, unknown collections, the three
 * services), and the generator records the script that makes the target
 * see the same thing:
 *  - fuzz_source_session: the store operations, and every request the
 *    real sink sent (as raw bytes), in order, with the drains that produce
 *    the pushes the sink answered;
 *  - fuzz_sink_session: every push the real source sent (raw bytes), with
 *    the application's decision, and the drains of the requests;
 *  - fuzz_pair: the action sequences themselves.
 * Store operations are written as script bytes and then run through the
 * same decoder the targets use (fz_store_op), and the generator's sessions
 * are configured from the same header bytes, so the targets replay the
 * trace exactly (same epochs, nonces and versions).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_script.h"
#include "fuzz_util.h"
#include "fuzz_wire.h"

#define MS MCP_MILLISECONDS

static const char *g_out;
static unsigned g_files;

static void write_file(const char *target, const char *name, const fz_out *o) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", g_out, target);
  if (mkdir(path, 0777) != 0 && errno != EEXIST) {
    perror(path);
    exit(1);
  }
  snprintf(path, sizeof(path), "%s/%s/%s", g_out, target, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(o->p, 1, o->n, f) != o->n || fclose(f) != 0) {
    perror(path);
    exit(1);
  }
  g_files++;
}

/* ---- a real source, sink and store ---- */

typedef struct trace {
  fz_out o;
  mcp_service service;
  mcp_tstamp ts;
  uint64_t seed;
  mcp_store *store;
  mcp_source_options so;
  mcp_source_session *src;
  mcp_sink_options ko;
  const char *keys[4];
  mcp_sink_state *st;
  mcp_sink_session *snk;
  int reject;      /* the sink application's next decisions */
  int for_sink;    /* recording a fuzz_sink_session script (else source) */
  unsigned pushes, requests, resyncs;
} trace;

static int tr_apply(const mcp_change *ch, char *msg, size_t msglen, void *ud) {
  (void)ch;
  trace *t = ud;
  if (t->reject) {
    snprintf(msg, msglen, "rejected by the scenario");
  }
  return t->reject;
}

static void tr_sessions(trace *t) {
  FZ_CHECK(mcp_source_session_new(&t->src, &t->so, t->ts) == 0, "source");
  FZ_CHECK(mcp_sink_session_new(&t->snk, t->st, t->ts) == 0, "sink");
}

/*
 * Opens a trace. For a fuzz_source_session script, |hdr| is its header
 * (timing byte; flags 0); for a fuzz_sink_session script, the sink's
 * header byte. |ncolls| collections, |incremental| sink.
 */
static void tr_open2(trace *t, int for_sink, mcp_service service,
                     unsigned timing, size_t ncolls, int incremental,
                     unsigned sink_g);

static void tr_open(trace *t, int for_sink, mcp_service service, unsigned timing,
                    size_t ncolls, int incremental) {
  tr_open2(t, for_sink, service, timing, ncolls, incremental, 0);
}

/* |sink_g|: the third header byte of a sink script (name rules, limits). */
static void tr_open2(trace *t, int for_sink, mcp_service service,
                     unsigned timing, size_t ncolls, int incremental,
                     unsigned sink_g) {
  memset(t, 0, sizeof(*t));
  t->for_sink = for_sink;
  t->service = service;
  t->ts = 1 * MCP_SECONDS;
  fw_u8(&t->o, service);
  if (for_sink) {
    /* incremental, journal 4, collections */
    fw_u8(&t->o, (incremental ? 1u : 0u) | 4u << 1 | (unsigned)(ncolls - 1) << 5);
    fw_u8(&t->o, sink_g);
    fw_u8(&t->o, 0);
  } else {
    fw_u8(&t->o, timing);
    fw_u8(&t->o, 0);
    fw_u8(&t->o, 0);
  }
  mcp_store_options o;
  mcp_store_options_default(&o);
  o.rand = fz_rand;
  t->seed = FZ_SRC_SEED;
  o.rand_user_data = &t->seed;
  FZ_CHECK(mcp_store_new(&t->store, &o) == 0, "store");
  mcp_source_options_default(&t->so);
  t->so.store = t->store;
  t->so.service = service;
  if (!for_sink) {
    t->so.debounce = k_debounce[timing & 3];
    t->so.max_delay = k_max_delay[(timing >> 2) & 3];
    t->so.nack_retry_initial = k_retry[(timing >> 4) & 3];
    t->so.nack_retry_max = (timing & 64) ? 8 * t->so.nack_retry_initial : 0;
    t->so.send_trigger = (timing >> 7) & 1;
    FZ_CHECK(!t->so.max_delay, "traces keep max_delay 0 (see tr_drain)");
  }
  for (size_t i = 0; i < ncolls; ++i) {
    t->keys[i] = fz_key(service, i);
  }
  mcp_sink_options_default(&t->ko);
  t->ko.node_id = "sink-a";
  t->ko.collections = t->keys;
  t->ko.ncollections = ncolls;
  t->ko.incremental = incremental;
  t->ko.apply = tr_apply;
  t->ko.user_data = t;
  t->ko.service = service;
  FZ_CHECK(mcp_sink_state_new(&t->st, &t->ko) == 0, "sink state");
  tr_sessions(t);
}

static void tr_close(trace *t, const char *name) {
  write_file(t->for_sink ? "fuzz_sink_session" : "fuzz_source_session", name,
             &t->o);
  mcp_source_session_del(t->src);
  mcp_sink_session_del(t->snk);
  mcp_sink_state_del(t->st);
  mcp_store_del(t->store);
  fw_free(&t->o);
}

/* Runs the store operation just written at o->p[start..]. */
static void tr_run_store_op(trace *t, fz_out *o, size_t start) {
  fz_in in = {o->p + start, o->n - start};
  int rv = fz_store_op(&in, t->store, NULL, t->ts);
  FZ_CHECK(rv >= 0, "a scenario's store operation failed: %d", rv);
}

/* Store operations: recorded in a source script; a sink script has no
 * store (its pushes carry the result). */
static void tr_upsert(trace *t, unsigned coll, unsigned name, unsigned ver,
                      const char *body) {
  fz_out tmp = {0};
  fz_out *o = t->for_sink ? &tmp : &t->o;
  if (!t->for_sink) {
    fw_u8(o, SRC_STORE);
    fw_u8(o, 0);
  }
  size_t start = o->n;
  fw_upsert(o, coll, name, ver, body);
  tr_run_store_op(t, o, start);
  fw_free(&tmp);
}

static void tr_delete(trace *t, unsigned coll, unsigned name) {
  fz_out tmp = {0};
  fz_out *o = t->for_sink ? &tmp : &t->o;
  if (!t->for_sink) {
    fw_u8(o, SRC_STORE);
    fw_u8(o, 0);
  }
  size_t start = o->n;
  fw_delete(o, coll, name);
  tr_run_store_op(t, o, start);
  fw_free(&tmp);
}

static void tr_replace(trace *t, unsigned coll, unsigned mask,
                       const unsigned *vers, const char *const *bodies) {
  fz_out tmp = {0};
  fz_out *o = t->for_sink ? &tmp : &t->o;
  if (!t->for_sink) {
    fw_u8(o, SRC_STORE);
    fw_u8(o, 0);
  }
  size_t start = o->n;
  fw_replace(o, coll, mask, vers, bodies);
  tr_run_store_op(t, o, start);
  fw_free(&tmp);
}

static void tr_bulk(trace *t, unsigned coll, unsigned n, int del,
                    unsigned start) {
  fz_out tmp = {0};
  fz_out *o = t->for_sink ? &tmp : &t->o;
  if (!t->for_sink) {
    fw_u8(o, SRC_STORE);
    fw_u8(o, 0);
  }
  size_t start_at = o->n;
  fw_bulk(o, coll, n, del, start);
  tr_run_store_op(t, o, start_at);
  fw_free(&tmp);
}

static void tr_add(trace *t, unsigned coll) {
  fz_out tmp = {0};
  fz_out *o = t->for_sink ? &tmp : &t->o;
  if (!t->for_sink) {
    fw_u8(o, SRC_STORE);
    fw_u8(o, 0);
  }
  size_t start = o->n;
  fw_add(o, coll);
  tr_run_store_op(t, o, start);
  fw_free(&tmp);
}

/* Raw bytes as a script operand. */
static void put_raw(fz_out *o, const uint8_t *p, size_t n) {
  FZ_CHECK(n < SCRIPT_RAW_MAX, "a message of %zu bytes is too long for a script",
           n);
  fw_u16(o, (unsigned)n);
  fw_bytes(o, p, n);
}

/* The sink's requests go to the source (source script: as raw bytes). */
static void tr_requests(trace *t) {
  if (t->for_sink && mcp_sink_session_want_write(t->snk)) {
    fw_u8(&t->o, SNK_DRAIN);
  }
  mcp_msg *m;
  while (mcp_sink_session_next(t->snk, &m) == 1) {
    size_t n;
    uint8_t *p = fz_flatten(m, &n);
    mcp_msg_free(m);
    if (!t->for_sink) {
      fw_u8(&t->o, SRC_RECV_RAW);
      put_raw(&t->o, p, n);
    }
    FZ_CHECK(mcp_source_session_recv(t->src, p, n, t->ts) == 0, "source recv");
    free(p);
    t->requests++;
  }
}

/* The source's pushes go to the sink (sink script: as raw bytes with the
 * application's decision). Mirrors fuzz_source_session's SRC_DRAIN. */
static void tr_drain(trace *t) {
  if (!t->for_sink) {
    fw_u8(&t->o, SRC_DRAIN);
  }
  if (mcp_source_session_get_expiry(t->src) <= t->ts) {
    mcp_source_session_handle_expiry(t->src, t->ts);
  }
  for (;;) {
    mcp_source_session_want_write(t->src, t->ts);
    mcp_msg *m = NULL;
    int rv = mcp_source_session_next(t->src, t->ts, &m);
    if (rv == MCP_ERR_RESYNC) {
      /* The stream ends; the sink resumes on the next one. The source
       * target replaces its session by itself; the sink script says so. */
      if (t->for_sink) {
        fw_u8(&t->o, SNK_RECONNECT);
      }
      mcp_source_session_del(t->src);
      mcp_sink_session_del(t->snk);
      tr_sessions(t);
      t->resyncs++;
      break;
    }
    FZ_CHECK(rv >= 0, "source next: %d", rv);
    if (rv == 0) {
      break;
    }
    size_t n;
    uint8_t *p = fz_flatten(m, &n);
    mcp_msg_free(m);
    if (t->for_sink) {
      fw_u8(&t->o, SNK_RECV_RAW);
      fw_u8(&t->o, t->reject == MCP_CODE_UNAVAILABLE         ? 4
                   : t->reject == MCP_CODE_FAILED_PRECONDITION ? 5
                                                               : 0);
      fw_str(&t->o, t->reject ? "rejected by the scenario" : "");
      put_raw(&t->o, p, n);
    }
    FZ_CHECK(mcp_sink_session_recv(t->snk, p, n, t->ts) == 0, "sink recv");
    free(p);
    t->pushes++;
  }
}

/* Both ways until nothing moves. */
static void tr_sync(trace *t) {
  for (int i = 0; i < 16; ++i) {
    unsigned before = t->pushes + t->requests;
    tr_requests(t);
    if (!mcp_source_session_want_write(t->src, t->ts) &&
        mcp_source_session_get_expiry(t->src) > t->ts) {
      if (t->pushes + t->requests == before) {
        return;
      }
      continue;
    }
    tr_drain(t);
  }
}

static void tr_advance(trace *t, unsigned v) {
  if (t->for_sink) {
    fw_u8(&t->o, SNK_ADVANCE);
    fw_u16(&t->o, (unsigned)(fz_src_advance(v) / MS));
  } else {
    fw_u8(&t->o, SRC_ADVANCE);
    fw_u16(&t->o, v);
  }
  t->ts += fz_src_advance(v);
}

static void tr_status(trace *t) {
  fw_u8(&t->o, t->for_sink ? SNK_STATUS : SRC_STATUS);
}

static void tr_reconnect(trace *t) {
  fw_u8(&t->o, t->for_sink ? SNK_RECONNECT : SRC_RECONNECT);
  mcp_source_session_del(t->src);
  mcp_sink_session_del(t->snk);
  tr_sessions(t);
}

/* A request the real sink would not send (stale, trigger NACK, unknown),
 * sent to both the real source and, raw, the source script. */
static void tr_request(trace *t, const fz_req_spec *r) {
  size_t n;
  uint8_t *p = fz_req_encode(t->service, r, &n);
  if (!t->for_sink) {
    fw_u8(&t->o, SRC_RECV_RAW);
    put_raw(&t->o, p, n);
  }
  int rv = mcp_source_session_recv(t->src, p, n, t->ts);
  FZ_CHECK(rv == 0, "scenario request: %d", rv);
  free(p);
}

/* ---- scenarios shared by the source and sink scripts ---- */

static const char *const k_bodies[8] = {"alpha", "beta", "gamma", "delta",
                                        "eps",   "zeta", "eta",   "theta"};

/* Initial sync of two collections, then edits, deletes and a replace. */
static void sc_sync_edits(int for_sink, mcp_service service, int incremental,
                          const char *name) {
  trace t;
  tr_open(&t, for_sink, service, 0, 2, incremental);
  for (unsigned i = 0; i < 4; ++i) {
    tr_upsert(&t, 0, i, i < 2 ? 0 : 10 + i, k_bodies[i]);
  }
  tr_upsert(&t, 1, 4, 0, "in-beta");
  tr_sync(&t);
  tr_status(&t);
  tr_upsert(&t, 0, 1, 0, "changed");
  tr_delete(&t, 0, 2);
  tr_advance(&t, 4);
  tr_sync(&t);
  static const unsigned vers[3] = {0, 21, 22};
  static const char *const bodies[3] = {"r0", "r5", "r7"};
  tr_replace(&t, 1, 1u | 1u << 5 | 1u << 7, vers, bodies);
  tr_upsert(&t, 0, 1, 0, "changed"); /* no change */
  tr_sync(&t);
  tr_status(&t);
  tr_close(&t, name);
}

/* The application rejects a push; the next change goes through. */
static void sc_nack(int for_sink, mcp_service service, int incremental,
                    int code, unsigned timing, const char *name) {
  trace t;
  tr_open(&t, for_sink, service, timing, 1, incremental);
  tr_upsert(&t, 0, 0, 0, "good");
  tr_sync(&t);
  t.reject = code;
  tr_upsert(&t, 0, 1, 5, "rejected");
  tr_sync(&t);
  tr_status(&t);
  t.reject = 0;
  if (timing & 0x30) { /* a retry policy: wait for it */
    for (int i = 0; i < 3; ++i) {
      tr_advance(&t, 100);
      tr_sync(&t);
    }
  }
  tr_upsert(&t, 0, 1, 6, "fixed");
  tr_sync(&t);
  tr_status(&t);
  tr_close(&t, name);
}

/* A reconnect: the sink resumes with what it holds. */
static void sc_resume(int for_sink, mcp_service service, const char *name) {
  trace t;
  tr_open(&t, for_sink, service, 0, 2, 1);
  for (unsigned i = 0; i < 5; ++i) {
    tr_upsert(&t, i % 2, i, 30 + i, k_bodies[i]);
  }
  tr_sync(&t);
  tr_reconnect(&t);
  tr_delete(&t, 0, 0); /* deleted while the sink was away */
  tr_upsert(&t, 1, 1, 40, "while-away");
  tr_sync(&t);
  tr_upsert(&t, 0, 6, 0, "after");
  tr_sync(&t);
  tr_status(&t);
  tr_close(&t, name);
}

/* Churn past the change log: 100 names created then deleted while the
 * sink holds an older generation. Incremental sinks get full state
 * (ResourceSource) or RESYNC and resume (IncrementalAggregatedResources). */
static void sc_compaction(int for_sink, mcp_service service, const char *name) {
  trace t;
  tr_open(&t, for_sink, service, 0, 1, 1);
  tr_upsert(&t, 0, 0, 0, "keep");
  tr_sync(&t);
  tr_bulk(&t, 0, 100, 0, 10);
  tr_bulk(&t, 0, 100, 1, 10);
  tr_upsert(&t, 0, 1, 0, "after-churn");
  tr_sync(&t);
  tr_status(&t);
  tr_upsert(&t, 0, 2, 0, "then");
  tr_sync(&t);
  FZ_CHECK(service != MCP_SERVICE_AGGREGATED_INCREMENTAL || t.resyncs,
           "%s: no RESYNC", name);
  tr_close(&t, name);
}

/* A sink with small limits (max_resources 4, names of 16 bytes, one label
 * or annotation): the target NACKs what the real sink accepted. */
static void sc_sink_limits(mcp_service service, const char *name) {
  trace t;
  tr_open2(&t, 1, service, 0, 1, service != MCP_SERVICE_AGGREGATED, 4);
  for (unsigned i = 0; i < 3; ++i) {
    tr_upsert(&t, 0, i, 0, k_bodies[i]);
  }
  tr_sync(&t);
  tr_upsert(&t, 0, 3, 0, "four");
  tr_upsert(&t, 0, 7, 0, "five");
  tr_sync(&t);
  tr_delete(&t, 0, 0);
  tr_delete(&t, 0, 1);
  tr_sync(&t);
  tr_status(&t);
  tr_close(&t, name);
}

/* ---- source-only scenarios ---- */

static void sc_src_debounce(void) {
  trace t;
  tr_open(&t, 0, MCP_SERVICE_RESOURCE, 2 /* debounce 5 ms */, 1, 0);
  tr_upsert(&t, 0, 0, 0, "a");
  tr_sync(&t);
  for (unsigned i = 0; i < 5; ++i) {
    tr_upsert(&t, 0, i, 0, k_bodies[(i + 3) % 8]);
    tr_advance(&t, 4); /* 1 ms */
    tr_drain(&t);      /* nothing yet */
  }
  fw_u8(&t.o, SRC_EXPIRY);
  fw_u8(&t.o, 1);
  mcp_tstamp e = mcp_source_session_get_expiry(t.src);
  if (e != MCP_TSTAMP_MAX && e > t.ts) {
    t.ts = e;
  }
  if (e <= t.ts) {
    mcp_source_session_handle_expiry(t.src, t.ts);
  }
  tr_sync(&t);
  tr_status(&t);
  tr_close(&t, "resource-debounce");
}

static void sc_src_trigger(void) {
  trace t;
  tr_open(&t, 0, MCP_SERVICE_RESOURCE, 0x80 /* send_trigger */, 1, 0);
  tr_upsert(&t, 0, 0, 0, "a");
  tr_drain(&t); /* the trigger (lost on the real sink: foreign) */
  tr_requests(&t);
  fz_req_spec r;
  memset(&r, 0, sizeof(r));
  r.key = MCP_TRIGGER_COLLECTION;
  r.has_error = 1;
  r.code = MCP_CODE_UNIMPLEMENTED;
  r.message = "unsupported collection";
  r.has_node = 1;
  r.node_id = "sink-a";
  tr_request(&t, &r);
  tr_sync(&t);
  tr_close(&t, "resource-trigger");
}

static void sc_src_unknown_then_added(void) {
  trace t;
  tr_open(&t, 0, MCP_SERVICE_RESOURCE, 0, 2, 0);
  tr_upsert(&t, 0, 0, 0, "a");
  tr_sync(&t); /* collection 1 is unknown: not answered */
  tr_status(&t);
  tr_add(&t, 1); /* declared: answered empty */
  tr_sync(&t);
  tr_upsert(&t, 1, 3, 0, "now");
  tr_sync(&t);
  tr_close(&t, "resource-unknown-collection-added");
}

static void sc_src_stale(void) {
  trace t;
  tr_open(&t, 0, MCP_SERVICE_RESOURCE, 0, 1, 1);
  tr_upsert(&t, 0, 0, 0, "a");
  tr_requests(&t);
  tr_drain(&t); /* push 1 in flight, not answered yet */
  fz_req_spec r;
  memset(&r, 0, sizeof(r));
  r.key = fz_colls[0];
  r.has_node = 1;
  r.node_id = "sink-a";
  r.nonce = "7"; /* never ours */
  tr_request(&t, &r);
  r.nonce = ""; /* a re-request abandons push 1 */
  r.incremental = 1;
  tr_request(&t, &r);
  tr_requests(&t); /* the real sink's ACK of push 1: stale now */
  tr_sync(&t);
  tr_status(&t);
  tr_close(&t, "resource-stale-and-rerequest");
}

static void sc_src_many(void) {
  /* Enough deletions to compact the change log. */
  trace t;
  tr_open(&t, 0, MCP_SERVICE_RESOURCE, 0, 1, 1);
  for (unsigned round = 0; round < 3; ++round) {
    for (unsigned i = 0; i < 8; ++i) {
      tr_upsert(&t, 0, i, 0, k_bodies[(i + round) % 8]);
    }
    tr_sync(&t);
    for (unsigned i = 0; i < 8; ++i) {
      tr_delete(&t, 0, i);
    }
    tr_sync(&t);
  }
  tr_status(&t);
  tr_close(&t, "resource-churn");
}

/* ---- field-built scripts (not traces) ---- */

static void built_source(void) {
  /* Every action once, with the built request: new, ACK (latest nonce),
   * NACK, stale, trigger NACK, unknown collection, initial versions. */
  fz_out o = {0};
  fw_u8(&o, MCP_SERVICE_RESOURCE);
  fw_u8(&o, 0x11); /* debounce 1 ms, retry 1 ms */
  fw_u8(&o, 0);
  fw_u8(&o, 0);
  fw_u8(&o, SRC_STORE);
  fw_u8(&o, 0);
  fw_upsert(&o, 0, 0, 0, "x");
  /* SRC_RECV: key 0, nonce kind 0, flags incremental+initial, node 1 */
  fw_u8(&o, SRC_RECV);
  fw_u8(&o, 0);
  fw_u8(&o, 0);
  fw_u8(&o, 1 | 4);
  fw_u8(&o, 2);    /* two initial versions */
  fw_u8(&o, 0);    /* n0 */
  fw_u8(&o, 0);    /* at the store's version */
  fw_u8(&o, 1);    /* n1 */
  fw_u8(&o, 7);    /* v7 */
  fw_u8(&o, 1);    /* node sink-a */
  fw_u8(&o, SRC_DRAIN);
  /* ACK of the latest push */
  fw_u8(&o, SRC_RECV);
  fw_u8(&o, 0);
  fw_u8(&o, 1);
  fw_u8(&o, 1);
  fw_u8(&o, 1);
  fw_u8(&o, SRC_STORE);
  fw_u8(&o, 0);
  fw_upsert(&o, 0, 1, 9, "y");
  fw_u8(&o, SRC_ADVANCE);
  fw_u16(&o, 8);
  fw_u8(&o, SRC_DRAIN);
  /* NACK UNAVAILABLE of the latest push, then the retry */
  fw_u8(&o, SRC_RECV);
  fw_u8(&o, 0);
  fw_u8(&o, 1);
  fw_u8(&o, 1 | 2);
  fw_u8(&o, 0); /* UNAVAILABLE */
  fw_str(&o, "try later");
  fw_u8(&o, 1);
  fw_u8(&o, SRC_EXPIRY);
  fw_u8(&o, 1);
  fw_u8(&o, SRC_DRAIN);
  /* stale, trigger NACK, unknown collection */
  fw_u8(&o, SRC_RECV);
  fw_u8(&o, 0);
  fw_u8(&o, 5);
  fw_u8(&o, 0);
  fw_u8(&o, 1);
  fw_u8(&o, SRC_RECV);
  fw_u8(&o, 5);
  fw_u8(&o, 0);
  fw_u8(&o, 2);
  fw_u8(&o, 2); /* UNIMPLEMENTED */
  fw_str(&o, "unsupported collection");
  fw_u8(&o, 1);
  fw_u8(&o, SRC_RECV);
  fw_u8(&o, 3);
  fw_u8(&o, 0);
  fw_u8(&o, 0);
  fw_u8(&o, 1);
  fw_u8(&o, SRC_STATUS);
  fw_u8(&o, SRC_FAIL);
  fw_u8(&o, 2);
  fw_u8(&o, SRC_DRAIN);
  fw_u8(&o, SRC_RECONNECT);
  write_file("fuzz_source_session", "built-actions", &o);
  fw_free(&o);
}

static void built_sink(mcp_service service, const char *name) {
  fz_out o = {0};
  fw_u8(&o, service);
  fw_u8(&o, 1 | 2u << 1 | 1u << 5); /* incremental, journal 2, 2 colls */
  fw_u8(&o, 0);
  fw_u8(&o, 0);
  fw_u8(&o, SNK_DRAIN);
  /* SNK_RECV: coll 0, fresh nonce, flags, 2 resources, 0 removed, accept */
  fw_u8(&o, SNK_RECV);
  fw_u8(&o, 0);
  fw_u8(&o, 1);
  fw_u8(&o, 0);
  fw_u8(&o, 2);
  for (unsigned i = 0; i < 2; ++i) {
    fw_u8(&o, i);        /* name */
    fw_u8(&o, 10 + i);   /* version r10 */
    fw_u8(&o, 8 | 32);   /* create time, a label */
    fw_str(&o, "body");
  }
  fw_u8(&o, 0);
  fw_u8(&o, 0); /* accept */
  fw_str(&o, "");
  fw_u8(&o, SNK_DRAIN);
  /* incremental: remove n0, add n2; rejected */
  fw_u8(&o, SNK_RECV);
  fw_u8(&o, 0);
  fw_u8(&o, 1);
  fw_u8(&o, 1);
  fw_u8(&o, 1);
  fw_u8(&o, 2);
  fw_u8(&o, 12);
  fw_u8(&o, 0);
  fw_str(&o, "b2");
  fw_u8(&o, 1);
  fw_u8(&o, 0);
  fw_u8(&o, 5); /* FAILED_PRECONDITION */
  fw_str(&o, "no");
  /* a push with an undecodable resource, and one for an unrequested
   * collection, and the trigger */
  fw_u8(&o, SNK_RECV);
  fw_u8(&o, 1);
  fw_u8(&o, 1);
  fw_u8(&o, 2);
  fw_u8(&o, 0);
  fw_str(&o, "\x0a\x05");
  fw_u8(&o, 0);
  fw_str(&o, "");
  fw_u8(&o, SNK_RECV);
  fw_u8(&o, 4);
  fw_u8(&o, 1);
  fw_u8(&o, 0);
  fw_u8(&o, 0);
  fw_u8(&o, 0);
  fw_u8(&o, 0);
  fw_str(&o, "");
  fw_u8(&o, SNK_RECV);
  fw_u8(&o, 5);
  fw_u8(&o, 0);
  fw_u8(&o, 0);
  fw_u8(&o, 0);
  fw_u8(&o, 0);
  fw_u8(&o, 0);
  fw_str(&o, "");
  fw_u8(&o, SNK_STATUS);
  fw_u8(&o, SNK_DRAIN);
  fw_u8(&o, SNK_RECONNECT);
  fw_u8(&o, SNK_FAIL);
  fw_u8(&o, 3);
  fw_u8(&o, SNK_DRAIN);
  fw_u8(&o, SNK_STATUS);
  write_file("fuzz_sink_session", name, &o);
  fw_free(&o);
}

/* ---- pair scripts ---- */

static void pair_header(fz_out *o, mcp_service service, unsigned sink,
                        unsigned timing, unsigned extra) {
  fw_u8(o, service);
  fw_u8(o, sink);
  fw_u8(o, timing);
  fw_u8(o, extra);
}

static void pair_exchange(fz_out *o, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    fw_u8(o, PAIR_SINK);
    fw_u8(o, PAIR_UP);
    fw_u8(o, 0);
    fw_u8(o, PAIR_SOURCE);
    fw_u8(o, PAIR_DOWN);
    fw_u8(o, 0);
  }
}

static void pair_put(fz_out *o, unsigned coll, unsigned name, unsigned ver,
                     const char *body) {
  fw_u8(o, PAIR_STORE);
  fw_upsert(o, coll, name, ver, body);
}

static void pair_scenario(mcp_service service, unsigned sink, unsigned timing,
                          unsigned extra, int with_faults, const char *name) {
  fz_out o = {0};
  pair_header(&o, service, sink, timing, extra);
  for (unsigned i = 0; i < 4; ++i) {
    pair_put(&o, i % 2, i, i & 1 ? 0 : 50 + i, k_bodies[i]);
  }
  pair_exchange(&o, 4);
  fw_u8(&o, PAIR_REJECT);
  fw_u8(&o, 1); /* UNAVAILABLE */
  pair_put(&o, 0, 5, 0, "rejected");
  fw_u8(&o, PAIR_ADVANCE);
  fw_u8(&o, 20);
  pair_exchange(&o, 3);
  fw_u8(&o, PAIR_REJECT);
  fw_u8(&o, 2); /* INVALID_ARGUMENT */
  pair_put(&o, 1, 6, 0, "final-no");
  pair_exchange(&o, 3);
  fw_u8(&o, PAIR_REJECT);
  fw_u8(&o, 0);
  fw_u8(&o, PAIR_STORE);
  fw_delete(&o, 0, 0);
  if (with_faults) {
    fw_u8(&o, PAIR_FAIL);
    fw_u8(&o, 3);
  }
  fw_u8(&o, PAIR_SOURCE);
  fw_u8(&o, PAIR_DOWN);
  fw_u8(&o, 1); /* lost: reconnect, the sink resumes */
  pair_put(&o, 0, 7, 0, "while-away");
  pair_exchange(&o, 4);
  fw_u8(&o, PAIR_EXPIRY);
  pair_exchange(&o, 2);
  if (with_faults) {
    fw_u8(&o, PAIR_FAIL);
    fw_u8(&o, 1);
    fw_u8(&o, PAIR_SINK);
    fw_u8(&o, PAIR_UP);
    fw_u8(&o, 2);
  }
  fw_u8(&o, PAIR_RECONNECT);
  pair_exchange(&o, 3);
  write_file("fuzz_pair", name, &o);
  fw_free(&o);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  g_out = argv[1];
  if (mkdir(g_out, 0777) != 0 && errno != EEXIST) {
    perror(g_out);
    return 1;
  }
  static const struct {
    mcp_service s;
    const char *tag;
  } services[] = {
      {MCP_SERVICE_RESOURCE, "resource"},
      {MCP_SERVICE_AGGREGATED, "aggregated"},
      {MCP_SERVICE_AGGREGATED_INCREMENTAL, "aggregated-incremental"},
  };
  char name[96];
  for (int side = 0; side < 2; ++side) {
    for (size_t i = 0; i < 3; ++i) {
      mcp_service s = services[i].s;
      snprintf(name, sizeof(name), "%s-sync-edits", services[i].tag);
      sc_sync_edits(side, s, 0, name);
      if (s == MCP_SERVICE_RESOURCE) {
        snprintf(name, sizeof(name), "%s-incremental-sync-edits",
                 services[i].tag);
        sc_sync_edits(side, s, 1, name);
      }
      snprintf(name, sizeof(name), "%s-nack-final", services[i].tag);
      sc_nack(side, s, s == MCP_SERVICE_AGGREGATED_INCREMENTAL,
              MCP_CODE_FAILED_PRECONDITION, 0, name);
      snprintf(name, sizeof(name), "%s-nack-retry", services[i].tag);
      sc_nack(side, s, 0, MCP_CODE_UNAVAILABLE,
              side ? 0 : 0x10 | 0x40 /* retry 1 ms, max 8 ms */, name);
      if (s != MCP_SERVICE_AGGREGATED) {
        snprintf(name, sizeof(name), "%s-reconnect-resume", services[i].tag);
        sc_resume(side, s, name);
      }
    }
  }
  sc_compaction(0, MCP_SERVICE_RESOURCE, "resource-compaction");
  sc_compaction(0, MCP_SERVICE_AGGREGATED_INCREMENTAL,
                "aggregated-incremental-resync");
  sc_compaction(1, MCP_SERVICE_AGGREGATED_INCREMENTAL,
                "aggregated-incremental-resync");
  sc_sink_limits(MCP_SERVICE_RESOURCE, "resource-small-limits");
  sc_sink_limits(MCP_SERVICE_AGGREGATED, "aggregated-small-limits");
  sc_src_debounce();
  sc_src_trigger();
  sc_src_unknown_then_added();
  sc_src_stale();
  sc_src_many();
  built_source();
  built_sink(MCP_SERVICE_RESOURCE, "built-resource");
  built_sink(MCP_SERVICE_AGGREGATED_INCREMENTAL, "built-aggregated-incremental");
  for (size_t i = 0; i < 3; ++i) {
    mcp_service s = services[i].s;
    snprintf(name, sizeof(name), "%s-full-state", services[i].tag);
    pair_scenario(s, 1u << 1 | 3u << 4, 0, 1, 0, name);
    snprintf(name, sizeof(name), "%s-incremental-debounce-retry",
             services[i].tag);
    pair_scenario(s, 1 | 1u << 1 | 8 | 2u << 4, 0x02 | 0x10 | 0x40, 0, 0, name);
    snprintf(name, sizeof(name), "%s-faults-trigger", services[i].tag);
    pair_scenario(s, 1 | 1u << 1, 0x80 | 0x20, 0x10, 1, name);
  }
  fprintf(stderr, "gen_corpus: %u files in %s\n", g_files, g_out);
  return 0;
}
