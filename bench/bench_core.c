/*
 * In-process benchmarks of the libmcp core: no sockets, no threads. Each
 * benchmark drives real sessions with real protobuf bytes and prints
 * "BENCH <name> <value> <unit>" lines and a readable table (bench_util.h).
 *
 *   incremental  one changed resource in N (1k..1M) pushed to 1000 synced
 *                incremental streams: next() + iov + mcp_msg_free + the
 *                ACK's recv, per stream; growth from 1k to 1M.
 *   streams      the same at 10k resources for 100, 1000, 10000 streams.
 *   fanout       full state, 10k resources of 1 KiB, to 1000 streams:
 *                shared fragments (next() + iov + free) against packing
 *                the message per stream with protobuf-c.
 *   memory       10 collections x 10k resources, 1000 synced streams:
 *                bytes held per stream, counted by an mcp_mem hook.
 *   sink         resources per second decoded, validated and applied by
 *                a sink, full state and incremental.
 *   resume       a stream resuming with 100k initial_resource_versions, 1 %
 *                changed: recv of the request to the answer built.
 *   destination  Conduit's Destination/Get on the same engine: 1000
 *                streams watching one service of 1000 endpoints, one
 *                endpoint changes: pump + iov + free per stream, against
 *                MCP's incremental push of the same change from the same
 *                store (next + iov + free + ACK).
 *   dispatcher   swarmkit's Dispatcher: 1000 agents (a Session and an
 *                Assignments stream each) on one manager; one task of one
 *                node changes: the view's upsert and a pump of all 2000
 *                streams, and the bytes sent to the 999 other nodes.
 *   xds          MCP over xDS: 10k VirtualServices, one changes; 1000
 *                state-of-the-world streams (the whole set, the stored
 *                Resource bytes shared) and 1000 delta streams (the one
 *                resource): pump + iov + free per stream.
 *
 * Usage: bench_core [--quick] [--max-n=N]
 *                   [incremental|streams|fanout|memory|sink|resume|
 *                    destination|dispatcher|xds ...]
 * --quick shrinks every size (a smoke test; its numbers mean nothing).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "mcp/mcp.h"
#include "conduit/common/common.pb-c.h"
#include "conduit/proxy/destination/destination.pb-c.h"
#include "github.com/docker/swarmkit/api/dispatcher.pb-c.h"
#include "mcp/dispatcher.h"
#include "mcp/destination.h"
#include "mcp/xds.h"
#include "mcp/v1alpha1/mcp.pb-c.h"

typedef Istio__Mcp__V1alpha1__RequestResources PbReq;
typedef Istio__Mcp__V1alpha1__Resources PbResources;
typedef Istio__Mcp__V1alpha1__Resource PbResource;
typedef Istio__Mcp__V1alpha1__Metadata PbMetadata;
typedef Istio__Mcp__V1alpha1__Metadata__LabelsEntry PbLabel;
typedef Google__Protobuf__Any PbAny;
typedef Google__Protobuf__Timestamp PbTimestamp;

static int quick;         /* --quick: sizes divided, for smoke tests only */
static size_t max_n = 0;  /* --max-n=N: skip incremental sizes above N */

#define TYPE_URL "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry"
#define NODE_ID "bench-sink"

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */
/* ------------------------------------------------------------------ */

static void die(const char *what, int rv) {
  fprintf(stderr, "bench_core: %s: %s (%d)\n", what, mcp_strerror(rv), rv);
  exit(1);
}

static void check(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "bench_core: check failed: %s\n", what);
    exit(1);
  }
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "bench_core: out of memory (%zu bytes)\n", n);
    exit(1);
  }
  return p;
}

static void *xcalloc(size_t a, size_t b) {
  void *p = calloc(a ? a : 1, b ? b : 1);
  if (!p) {
    fprintf(stderr, "bench_core: out of memory\n");
    exit(1);
  }
  return p;
}

/* The sessions' clock: any monotonic nanoseconds will do, and the core
 * reads none of its own, so a counter keeps runs deterministic. */
static mcp_tstamp vclock = 1;
static mcp_tstamp tick(void) { return ++vclock; }

static double ns_since(uint64_t t0) { return (double)(bu_now_ns() - t0); }

static const char *size_name(size_t n) {
  static char buf[8][24];
  static int k;
  char *b = buf[k++ % 8];
  if (n >= 1000000 && n % 1000000 == 0) {
    snprintf(b, 24, "%zum", n / 1000000);
  } else if (n >= 1000 && n % 1000 == 0) {
    snprintf(b, 24, "%zuk", n / 1000);
  } else {
    snprintf(b, 24, "%zu", n);
  }
  return b;
}

/* ------------------------------------------------------------------ */
/* Resources                                                           */
/* ------------------------------------------------------------------ */

/* Bodies are slices of one pool of printable bytes (like YAML or JSON
 * config), so building a million resources does not cost a million
 * random fills. */
#define POOL_LEN (256 * 1024)
static uint8_t *body_pool;

static const uint8_t *body_at(uint64_t seed, size_t len) {
  if (!body_pool) {
    body_pool = xmalloc(POOL_LEN);
    bu_fill(body_pool, POOL_LEN, 42);
  }
  return body_pool + (seed * 7919) % (POOL_LEN - len);
}

static const mcp_kv labels[] = {{"app", "bench"}, {"istio.io/rev", "default"}};

typedef struct res_buf {
  char name[64];
  char version[32];
  mcp_resource r;
} res_buf;

static void res_name(char *buf, size_t n, size_t i) {
  snprintf(buf, n, "ns-%03zu/serviceentry-%07zu", i % 100, i);
}

/* Resource |i| at version |ver| (the body changes with it). */
static const mcp_resource *make_res(res_buf *b, size_t i, uint64_t ver,
                                    size_t body_len) {
  res_name(b->name, sizeof(b->name), i);
  snprintf(b->version, sizeof(b->version), "%" PRIu64, ver);
  memset(&b->r, 0, sizeof(b->r));
  b->r.name = b->name;
  b->r.version = b->version;
  b->r.labels = labels;
  b->r.nlabels = 2;
  b->r.has_create_time = 1;
  b->r.create_time_seconds = 1700000000 + (int64_t)i;
  b->r.type_url = TYPE_URL;
  b->r.body = body_at(i * 31 + ver, body_len);
  b->r.body_len = body_len;
  return &b->r;
}

static mcp_store *store_new(const mcp_mem *mem) {
  mcp_store_options o;
  mcp_store_options_default(&o);
  o.mem = mem;
  o.epoch = 0x5eed5eed12345678ULL;
  mcp_store *st = NULL;
  int rv = mcp_store_new(&st, &o);
  if (rv) {
    die("mcp_store_new", rv);
  }
  return st;
}

/* Fills |coll| with resources 0..n-1 at version 1. */
static void store_fill(mcp_store *st, const char *coll, size_t n,
                       size_t body_len) {
  res_buf b;
  int rv = mcp_store_add_collection(st, coll);
  if (rv) {
    die("mcp_store_add_collection", rv);
  }
  for (size_t i = 0; i < n; ++i) {
    if ((rv = mcp_store_upsert(st, coll, make_res(&b, i, 1, body_len), tick())) < 0) {
      die("mcp_store_upsert", rv);
    }
  }
}

/* ------------------------------------------------------------------ */
/* Peer messages, packed with protobuf-c (what a sink would send)      */
/* ------------------------------------------------------------------ */

typedef struct bytes {
  uint8_t *p;
  size_t len;
} bytes;

/* A RequestResources as our sink sends it: sink node, collection, nonce,
 * incremental flag, and optionally initial_resource_versions. */
static bytes pack_request(const char *coll, const char *nonce, int incremental,
                          char **names, char **versions, size_t ninit) {
  Istio__Mcp__V1alpha1__SinkNode node = ISTIO__MCP__V1ALPHA1__SINK_NODE__INIT;
  node.id = (char *)NODE_ID;
  PbReq req = ISTIO__MCP__V1ALPHA1__REQUEST_RESOURCES__INIT;
  req.sink_node = &node;
  req.collection = (char *)coll;
  req.response_nonce = (char *)nonce;
  req.incremental = incremental ? 1 : 0;
  Istio__Mcp__V1alpha1__RequestResources__InitialResourceVersionsEntry *ents = NULL,
      **pents = NULL;
  if (ninit) {
    ents = xcalloc(ninit, sizeof(*ents));
    pents = xcalloc(ninit, sizeof(*pents));
    for (size_t i = 0; i < ninit; ++i) {
      Istio__Mcp__V1alpha1__RequestResources__InitialResourceVersionsEntry e =
          ISTIO__MCP__V1ALPHA1__REQUEST_RESOURCES__INITIAL_RESOURCE_VERSIONS_ENTRY__INIT;
      e.key = names[i];
      e.value = versions[i];
      ents[i] = e;
      pents[i] = &ents[i];
    }
    req.n_initial_resource_versions = ninit;
    req.initial_resource_versions = pents;
  }
  bytes b;
  b.len = istio__mcp__v1alpha1__request_resources__get_packed_size(&req);
  b.p = xmalloc(b.len);
  istio__mcp__v1alpha1__request_resources__pack(&req, b.p);
  free(ents);
  free(pents);
  return b;
}

static bytes pack_ack(const char *coll, uint32_t nonce, int incremental) {
  char n[16];
  snprintf(n, sizeof(n), "%" PRIu32, nonce);
  return pack_request(coll, n, incremental, NULL, NULL, 0);
}

static bytes flatten(const mcp_msg *m) {
  bytes b;
  b.len = mcp_msg_len(m);
  b.p = xmalloc(b.len);
  mcp_msg_flatten(m, b.p);
  return b;
}

/* Decodes a push, for the checks made outside the timed loops. */
static PbResources *decode_push(const mcp_msg *m) {
  bytes b = flatten(m);
  PbResources *r = istio__mcp__v1alpha1__resources__unpack(NULL, b.len, b.p);
  free(b.p);
  check(r != NULL, "a push decodes with protobuf-c");
  return r;
}

/* What a transport does with a message: walk its fragments (it would
 * hand them to writev or to gRPC slices). Returns the byte count. */
static size_t consume(const mcp_msg *m) {
  const mcp_iovec *iov;
  size_t n = mcp_msg_iov(m, &iov), len = 0;
  for (size_t i = 0; i < n; ++i) {
    len += iov[i].len;
  }
  return len;
}

/* ------------------------------------------------------------------ */
/* Source sessions                                                     */
/* ------------------------------------------------------------------ */

static mcp_source_session *source_new(mcp_store *st, const mcp_mem *mem) {
  mcp_source_options o;
  mcp_source_options_default(&o);
  o.store = st;
  o.mem = mem;
  mcp_source_session *s = NULL;
  int rv = mcp_source_session_new(&s, &o, tick());
  if (rv) {
    die("mcp_source_session_new", rv);
  }
  return s;
}

static void source_recv(mcp_source_session *s, bytes b) {
  int rv = mcp_source_session_recv(s, b.p, b.len, tick());
  if (rv) {
    die("mcp_source_session_recv", rv);
  }
}

static mcp_msg *source_next(mcp_source_session *s) {
  mcp_msg *m = NULL;
  int rv = mcp_source_session_next(s, tick(), &m);
  if (rv != 1) {
    die("mcp_source_session_next produced nothing", rv);
  }
  return m;
}

/*
 * Brings a stream to synced: answers every push with an ACK until nothing
 * is left to send. Nonces are the decimal numbers 1, 2, 3, ... per stream
 * (docs/protocol.md); |*nonce| counts the pushes of this stream.
 */
static void source_sync(mcp_source_session *s, uint32_t *nonce, int incremental) {
  mcp_msg *m;
  int rv;
  while ((rv = mcp_source_session_next(s, tick(), &m)) == 1) {
    consume(m);
    bytes ack = pack_ack(mcp_msg_collection(m), ++*nonce, incremental);
    mcp_msg_free(m);
    source_recv(s, ack);
    free(ack.p);
  }
  if (rv < 0) {
    die("mcp_source_session_next", rv);
  }
}

/* ------------------------------------------------------------------ */
/* 1. Incremental push cost against collection size                    */
/* ------------------------------------------------------------------ */

#define INC_COLL "istio/networking/v1alpha3/serviceentries"
#define INC_SIZES 4

/* One collection size: its store and its synced streams. */
typedef struct inc_case {
  size_t n;
  mcp_store *st;
  mcp_source_session **ss;
  uint32_t nonce;    /* the last nonce of every stream (they go in step) */
  double *samples;   /* ns per stream, one per measured round */
  double *cpu;       /* the same in thread CPU time */
  double full_us;    /* full-state push + ACK, per stream (median) */
  double upsert_ns;  /* the store change of each round, summed */
} inc_case;

#define INC_BODY 256
#define INC_BATCH 5000 /* resources added per step while streams sync */
#define INC_FULL 9     /* extra streams timed for a full-state push */
#define INC_CHUNK 1000 /* streams per timed sample */

/* Pushes what changed to every stream and ACKs it (setup, not timed). */
static void inc_push_all(inc_case *c, size_t nstreams) {
  bytes ack = pack_ack(INC_COLL, ++c->nonce, 1);
  for (size_t i = 0; i < nstreams; ++i) {
    mcp_msg *m = source_next(c->ss[i]);
    consume(m);
    mcp_msg_free(m);
    source_recv(c->ss[i], ack);
  }
  free(ack.p);
}

/*
 * Setup: every stream subscribes (incremental) while the collection is
 * empty and ACKs the empty full-state answer; then the collection grows
 * to N in steps, each pushed to every stream and ACKed, as for sinks
 * connected to a source whose configuration grows. Each stream ends
 * synced at the last generation, having received every resource once;
 * growing in steps keeps the resources being pushed in the caches, which
 * makes syncing 1000 streams at 1M about 3x cheaper than 1000 full-state
 * pushes of 1M. The full-state cost is measured on INC_FULL other
 * streams.
 */
static void inc_setup(inc_case *c, size_t nstreams, size_t rounds) {
  uint64_t t0 = bu_now_ns();
  c->st = store_new(NULL);
  int rv = mcp_store_add_collection(c->st, INC_COLL);
  if (rv) {
    die("mcp_store_add_collection", rv);
  }
  c->ss = xcalloc(nstreams, sizeof(*c->ss));
  c->samples = xcalloc(rounds, sizeof(double));
  c->cpu = xcalloc(rounds, sizeof(double));
  bytes req = pack_request(INC_COLL, "", 1, NULL, NULL, 0);
  for (size_t i = 0; i < nstreams; ++i) {
    c->ss[i] = source_new(c->st, NULL);
    source_recv(c->ss[i], req);
  }
  inc_push_all(c, nstreams);
  double fill_ns = 0;
  for (size_t done = 0; done < c->n; done += INC_BATCH) {
    size_t end = done + INC_BATCH < c->n ? done + INC_BATCH : c->n;
    uint64_t f0 = bu_now_ns();
    for (size_t i = done; i < end; ++i) {
      res_buf b;
      if ((rv = mcp_store_upsert(c->st, INC_COLL, make_res(&b, i, 1, INC_BODY),
                                 tick())) != 1) {
        die("mcp_store_upsert", rv);
      }
    }
    fill_ns += ns_since(f0);
    inc_push_all(c, nstreams);
  }
  check(mcp_store_count(c->st, INC_COLL) == c->n, "the store holds N resources");
  double sync_ms = ns_since(t0) / 1e6;

  /* Full state: a new stream's first answer, and its ACK. */
  double full[INC_FULL];
  bytes ack1 = pack_ack(INC_COLL, 1, 1);
  for (size_t k = 0; k < INC_FULL; ++k) {
    mcp_source_session *s = source_new(c->st, NULL);
    source_recv(s, req);
    uint64_t f0 = bu_now_ns();
    mcp_msg *m = source_next(s);
    consume(m);
    mcp_msg_free(m);
    source_recv(s, ack1);
    full[k] = ns_since(f0);
    mcp_source_session_del(s);
  }
  c->full_us = bu_median(full, INC_FULL) / 1e3;
  bu_note("incremental N=%s: store filled (%.0f ns per upsert) and %zu streams "
          "synced in %.0f ms; full-state push %.0f us", size_name(c->n),
          fill_ns / (double)c->n, nstreams, sync_ms, c->full_us);
  free(req.p);
  free(ack1.p);
}

/* Round |r|: one resource changes, every stream gets it and ACKs. Round 0
 * warms up and checks the push. Returns ns per stream. */
static double inc_round(inc_case *c, size_t nstreams, size_t r, double *cpu_out) {
  res_buf b;
  size_t idx = (r * 7919 + 13) % c->n, sink = 0;
  uint64_t t0 = bu_now_ns();
  int rv = mcp_store_upsert(c->st, INC_COLL, make_res(&b, idx, 2 + r, INC_BODY),
                            tick());
  c->upsert_ns += ns_since(t0);
  check(rv == 1, "the upsert changes the collection");
  bytes ack = pack_ack(INC_COLL, ++c->nonce, 1);
  if (r == 0) {
    char nonce[16];
    snprintf(nonce, sizeof(nonce), "%" PRIu32, c->nonce);
    mcp_msg *m = source_next(c->ss[0]);
    PbResources *p = decode_push(m);
    check(p->incremental && p->n_resources == 1 && p->n_removed_resources == 0 &&
              strcmp(p->nonce, nonce) == 0 &&
              strcmp(p->resources[0]->metadata->name, b.name) == 0,
          "an incremental push of the one changed resource");
    istio__mcp__v1alpha1__resources__free_unpacked(p, NULL);
    mcp_msg_free(m);
    source_recv(c->ss[0], ack);
  }
  /* Timed in chunks of at most INC_CHUNK streams, so that a sample is
   * short enough to run without preemption on a loaded machine; the
   * round's value is the median of its chunks. */
  size_t nchunks = (nstreams + INC_CHUNK - 1) / INC_CHUNK;
  double wall[64], cpu_s[64];
  check(nchunks <= 64, "at most 64 chunks");
  for (size_t k = 0; k < nchunks; ++k) {
    size_t from = k * INC_CHUNK, to = from + INC_CHUNK < nstreams ? from + INC_CHUNK : nstreams;
    if (r == 0 && from == 0) {
      from = 1; /* stream 0 was checked above */
    }
    bu_sw sw = bu_sw_start();
    for (size_t i = from; i < to; ++i) {
      mcp_msg *m = NULL;
      if (mcp_source_session_next(c->ss[i], tick(), &m) != 1) {
        die("no incremental push", 0);
      }
      sink += consume(m);
      mcp_msg_free(m);
      if ((rv = mcp_source_session_recv(c->ss[i], ack.p, ack.len, tick())) != 0) {
        die("ACK", rv);
      }
    }
    double cpu;
    wall[k] = bu_sw_ns(&sw, &cpu) / (double)(to - from);
    cpu_s[k] = cpu / (double)(to - from);
  }
  free(ack.p);
  check(sink > 0, "pushes carried bytes");
  *cpu_out = bu_median(cpu_s, nchunks);
  return bu_median(wall, nchunks);
}

static void inc_teardown(inc_case *c, size_t nstreams) {
  for (size_t i = 0; i < nstreams; ++i) {
    mcp_source_session_del(c->ss[i]);
  }
  free(c->ss);
  free(c->samples);
  free(c->cpu);
  mcp_store_del(c->st);
}

/*
 * Every size is set up first; then the rounds alternate between the sizes,
 * so that the machine's load and cache state weigh on all of them alike
 * and the growth ratio is measured side by side (per round, then the
 * median).
 */
static void bench_incremental(void) {
  static const size_t sizes[INC_SIZES] = {1000, 10000, 100000, 1000000};
  const size_t nstreams = quick ? 100 : 1000, rounds = quick ? 11 : 101;
  inc_case cs[INC_SIZES];
  int on[INC_SIZES];
  memset(cs, 0, sizeof(cs));
  for (size_t k = 0; k < INC_SIZES; ++k) {
    cs[k].n = quick ? sizes[k] / 100 : sizes[k];
    on[k] = !(max_n && cs[k].n > max_n);
    if (on[k]) {
      inc_setup(&cs[k], nstreams, rounds);
    } else {
      bu_note("incremental N=%s skipped (--max-n)", size_name(cs[k].n));
    }
  }
  double *growth = xcalloc(rounds, sizeof(double));
  double *growth_cpu = xcalloc(rounds, sizeof(double));
  for (size_t r = 0; r <= rounds; ++r) {
    /* Each round starts with another size, so that no size always runs
     * at the same point of the scheduler's time slice. */
    for (size_t j = 0; j < INC_SIZES; ++j) {
      size_t k = (r + j) % INC_SIZES;
      if (on[k]) {
        double cpu, v = inc_round(&cs[k], nstreams, r, &cpu);
        if (r > 0) {
          cs[k].samples[r - 1] = v;
          cs[k].cpu[r - 1] = cpu;
        }
      }
    }
    if (r > 0 && on[0] && on[INC_SIZES - 1]) {
      growth[r - 1] = cs[INC_SIZES - 1].samples[r - 1] / cs[0].samples[r - 1];
      growth_cpu[r - 1] = cs[INC_SIZES - 1].cpu[r - 1] / cs[0].cpu[r - 1];
    }
  }
  double med[INC_SIZES] = {0};
  for (size_t k = 0; k < INC_SIZES; ++k) {
    inc_case *c = &cs[k];
    if (!on[k]) {
      continue;
    }
    med[k] = bu_median(c->samples, rounds);
    bu_note("incremental N=%s: %.0f ns/stream (min %.0f, max %.0f over %zu "
            "rounds x %zu streams; cpu %.0f); upsert %.0f ns", size_name(c->n),
            med[k], bu_min(c->samples, rounds), bu_max(c->samples, rounds),
            rounds, nstreams, bu_median(c->cpu, rounds),
            c->upsert_ns / (double)(rounds + 1));
    char name[64], what[96];
    snprintf(name, sizeof(name), "incremental_push_ns_per_stream_%s",
             size_name(sizes[k]));
    snprintf(what, sizeof(what),
             "1 changed of %s, %zu streams: next+iov+free+ACK recv",
             size_name(c->n), nstreams);
    bu_result(name, med[k], "ns", what, NULL, -1);
  }
  for (size_t k = 0; k < INC_SIZES; ++k) {
    if (!on[k]) {
      continue;
    }
    char name[64], what[96];
    snprintf(name, sizeof(name), "full_push_us_per_stream_%s", size_name(sizes[k]));
    snprintf(what, sizeof(what), "full state of %s (256 B bodies): next+iov+free+ACK",
             size_name(cs[k].n));
    bu_result(name, cs[k].full_us, "us", what, NULL, -1);
    snprintf(name, sizeof(name), "full_vs_incremental_%s", size_name(sizes[k]));
    bu_result(name, cs[k].full_us * 1e3 / med[k], "x",
              "full-state push cost / incremental push cost", NULL, -1);
  }
  if (on[0] && on[INC_SIZES - 1]) {
    double g = bu_median(growth, rounds), gc = bu_median(growth_cpu, rounds);
    bu_note("incremental growth 1k to 1M: median of per-round ratios %.3f "
            "(cpu %.3f), ratio of medians %.3f", g, gc, med[INC_SIZES - 1] / med[0]);
    /* The verdict takes the worse of wall and CPU time. */
    bu_result("incremental_growth_1k_to_1m", g, "x",
              "incremental push cost at 1M / at 1k (paired)", "<= 2",
              g <= 2.0 && gc <= 2.0);
    bu_result("incremental_growth_1k_to_1m_cpu", gc, "x",
              "the same in thread CPU time", NULL, -1);
  }
  for (size_t k = 0; k < INC_SIZES; ++k) {
    if (on[k]) {
      inc_teardown(&cs[k], nstreams);
    }
  }
  free(growth);
  free(growth_cpu);
}

/*
 * The same push at a fixed collection size (10k) to 100, 1000 and 10000
 * streams. Unlike the sizes above, the stream counts run one after the
 * other, each alone in memory: what is measured is how the per-stream
 * cost changes as the streams' own state grows past the caches.
 */
static void bench_streams(void) {
  static const size_t counts[3] = {100, 1000, 10000};
  const size_t n = quick ? 1000 : 10000, rounds = quick ? 11 : 51;
  double med[3];
  for (size_t k = 0; k < 3; ++k) {
    size_t ns = quick ? counts[k] / 10 : counts[k];
    inc_case c;
    memset(&c, 0, sizeof(c));
    c.n = n;
    inc_setup(&c, ns, rounds);
    for (size_t r = 0; r <= rounds; ++r) {
      double cpu, v = inc_round(&c, ns, r, &cpu);
      if (r > 0) {
        c.samples[r - 1] = v;
        c.cpu[r - 1] = cpu;
      }
    }
    med[k] = bu_median(c.samples, rounds);
    bu_note("streams S=%s: %.0f ns/stream (min %.0f, max %.0f; cpu %.0f)",
            size_name(ns), med[k], bu_min(c.samples, rounds),
            bu_max(c.samples, rounds), bu_median(c.cpu, rounds));
    char name[64], what[96];
    snprintf(name, sizeof(name), "incremental_push_ns_per_stream_s%s",
             size_name(counts[k]));
    snprintf(what, sizeof(what), "1 changed of %s, %s streams: per stream",
             size_name(n), size_name(ns));
    bu_result(name, med[k], "ns", what, NULL, -1);
    inc_teardown(&c, ns);
  }
  bu_result("incremental_growth_s100_to_s10k", med[2] / med[0], "x",
            "per-stream push cost at 10k streams / at 100", NULL, -1);
}

/* ------------------------------------------------------------------ */
/* 2. Full-state fan-out: shared fragments against per-stream packing  */
/* ------------------------------------------------------------------ */

#define FAN_COLL "istio/networking/v1alpha3/virtualservices"

/* The Resources message a per-stream marshaller holds: a protobuf-c
 * struct tree with every resource, built once (not timed: Go's control
 * planes keep their resources as decoded structs too). */
typedef struct pbtree {
  PbResources msg;
  PbResource *res, **pres;
  PbMetadata *md;
  PbAny *any;
  PbTimestamp *ts;
  PbLabel *lab, **plab;
  char (*names)[64];
  char (*versions)[32];
} pbtree;

static void pbtree_build(pbtree *t, size_t n, size_t body_len) {
  PbResources init = ISTIO__MCP__V1ALPHA1__RESOURCES__INIT;
  t->msg = init;
  t->res = xcalloc(n, sizeof(*t->res));
  t->pres = xcalloc(n, sizeof(*t->pres));
  t->md = xcalloc(n, sizeof(*t->md));
  t->any = xcalloc(n, sizeof(*t->any));
  t->ts = xcalloc(n, sizeof(*t->ts));
  t->lab = xcalloc(2 * n, sizeof(*t->lab));
  t->plab = xcalloc(2 * n, sizeof(*t->plab));
  t->names = xcalloc(n, sizeof(*t->names));
  t->versions = xcalloc(n, sizeof(*t->versions));
  for (size_t i = 0; i < n; ++i) {
    res_buf b;
    const mcp_resource *r = make_res(&b, i, 1, body_len);
    memcpy(t->names[i], b.name, sizeof(b.name));
    memcpy(t->versions[i], b.version, sizeof(b.version));
    PbResource ri = ISTIO__MCP__V1ALPHA1__RESOURCE__INIT;
    PbMetadata mi = ISTIO__MCP__V1ALPHA1__METADATA__INIT;
    PbAny ai = GOOGLE__PROTOBUF__ANY__INIT;
    PbTimestamp ti = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    PbLabel li = ISTIO__MCP__V1ALPHA1__METADATA__LABELS_ENTRY__INIT;
    t->res[i] = ri;
    t->md[i] = mi;
    t->any[i] = ai;
    t->ts[i] = ti;
    for (size_t k = 0; k < 2; ++k) {
      t->lab[2 * i + k] = li;
      t->lab[2 * i + k].key = (char *)labels[k].key;
      t->lab[2 * i + k].value = (char *)labels[k].value;
      t->plab[2 * i + k] = &t->lab[2 * i + k];
    }
    t->ts[i].seconds = r->create_time_seconds;
    t->md[i].name = t->names[i];
    t->md[i].version = t->versions[i];
    t->md[i].create_time = &t->ts[i];
    t->md[i].n_labels = 2;
    t->md[i].labels = &t->plab[2 * i];
    t->any[i].type_url = (char *)TYPE_URL;
    t->any[i].value.data = (uint8_t *)r->body;
    t->any[i].value.len = r->body_len;
    t->res[i].metadata = &t->md[i];
    t->res[i].body = &t->any[i];
    t->pres[i] = &t->res[i];
  }
  t->msg.collection = (char *)FAN_COLL;
  t->msg.n_resources = n;
  t->msg.resources = t->pres;
}

static void pbtree_free(pbtree *t) {
  free(t->res);
  free(t->pres);
  free(t->md);
  free(t->any);
  free(t->ts);
  free(t->lab);
  free(t->plab);
  free(t->names);
  free(t->versions);
}

/* Per-stream marshalling of one push, as go-control-plane and Istio do:
 * the per-stream fields are set, the whole message is packed into a new
 * buffer, which the transport would send and then release. */
static size_t pack_per_stream(pbtree *t, const char *version, uint32_t nonce) {
  char n[16];
  snprintf(n, sizeof(n), "%" PRIu32, nonce);
  t->msg.system_version_info = (char *)version;
  t->msg.nonce = n;
  size_t len = istio__mcp__v1alpha1__resources__get_packed_size(&t->msg);
  uint8_t *buf = xmalloc(len);
  size_t w = istio__mcp__v1alpha1__resources__pack(&t->msg, buf);
  size_t sum = w + buf[len / 2];
  free(buf);
  t->msg.nonce = (char *)"";
  return sum;
}

static void bench_fanout(void) {
  const size_t n = quick ? 1000 : 10000, body_len = 1024;
  const size_t nstreams = quick ? 100 : 1000;
  const size_t reps = quick ? 2 : 5; /* shared reps; per-stream: batches */
  mcp_store *st = store_new(NULL);
  store_fill(st, FAN_COLL, n, body_len);
  pbtree t;
  pbtree_build(&t, n, body_len);
  char version[48];
  snprintf(version, sizeof(version), "%016" PRIx64 "-%" PRIu64,
           mcp_store_epoch(st), mcp_store_generation(st, FAN_COLL));

  mcp_source_session **ss = xcalloc(nstreams, sizeof(*ss));
  bytes req = pack_request(FAN_COLL, "", 0, NULL, NULL, 0);
  for (size_t i = 0; i < nstreams; ++i) {
    ss[i] = source_new(st, NULL);
  }

  /* Check that both produce the same message (but for the nonce). */
  source_recv(ss[0], req);
  mcp_msg *m0 = source_next(ss[0]);
  PbResources *a = decode_push(m0);
  check(a->n_resources == n && !a->incremental && strcmp(a->nonce, "1") == 0 &&
            strcmp(a->system_version_info, version) == 0,
        "a full-state push of every resource");
  size_t shared_len = mcp_msg_len(m0);
  mcp_msg_free(m0);
  istio__mcp__v1alpha1__resources__free_unpacked(a, NULL);
  t.msg.system_version_info = version;
  t.msg.nonce = (char *)"1";
  size_t packed_len = istio__mcp__v1alpha1__resources__get_packed_size(&t.msg);
  t.msg.nonce = (char *)"";
  check(packed_len == shared_len, "both variants produce messages of one size");
  bu_note("fanout: %zu resources of %zu B, message %zu bytes, %zu streams",
          n, body_len, shared_len, nstreams);

  /* Every push is one sample (long enough for the clock, short enough to
   * run mostly unpreempted on a loaded machine); each rep gives one ratio
   * of the medians of its samples. */
  size_t batch = nstreams / reps, sink = 0;
  double *sw_wall = xcalloc(nstreams, sizeof(double)), *sw_cpu = xcalloc(nstreams, sizeof(double));
  double *pw_wall = xcalloc(batch, sizeof(double)), *pw_cpu = xcalloc(batch, sizeof(double));
  double *shared = xcalloc(reps, sizeof(double)), *shared_cpu = xcalloc(reps, sizeof(double));
  double *per = xcalloc(reps, sizeof(double)), *per_cpu = xcalloc(reps, sizeof(double));
  double *ratio = xcalloc(reps, sizeof(double)), *ratio_cpu = xcalloc(reps, sizeof(double));
  uint32_t nonce = 2;
  sink += pack_per_stream(&t, version, nonce); /* warm-up */
  for (size_t r = 0; r <= reps; ++r) {
    /* Shared: every stream (re)subscribes, then each answer is built. */
    for (size_t i = 0; i < nstreams; ++i) {
      source_recv(ss[i], req);
    }
    for (size_t i = 0; i < nstreams; ++i) {
      bu_sw sw = bu_sw_start();
      mcp_msg *m = NULL;
      if (mcp_source_session_next(ss[i], tick(), &m) != 1) {
        die("no full-state push", 0);
      }
      sink += consume(m);
      mcp_msg_free(m);
      sw_wall[i] = bu_sw_ns(&sw, &sw_cpu[i]);
    }
    if (r == 0) {
      continue; /* warm-up */
    }
    shared[r - 1] = bu_median(sw_wall, nstreams);
    shared_cpu[r - 1] = bu_median(sw_cpu, nstreams);
    /* Per-stream: one batch of the streams each rep, so that the reps
     * together marshal for all of them. */
    for (size_t i = 0; i < batch; ++i) {
      bu_sw sw = bu_sw_start();
      sink += pack_per_stream(&t, version, nonce++);
      pw_wall[i] = bu_sw_ns(&sw, &pw_cpu[i]);
    }
    per[r - 1] = bu_median(pw_wall, batch);
    per_cpu[r - 1] = bu_median(pw_cpu, batch);
    ratio[r - 1] = per[r - 1] / shared[r - 1];
    ratio_cpu[r - 1] = per_cpu[r - 1] / shared_cpu[r - 1];
  }
  check(sink > 0, "bytes produced");
  double ms = bu_median(shared, reps), mp = bu_median(per, reps);
  double rm = bu_median(ratio, reps), rc = bu_median(ratio_cpu, reps);
  double cs = bu_median(shared_cpu, reps), cp = bu_median(per_cpu, reps);
  bu_note("fanout: shared %.1f us/stream (reps from %.1f to %.1f; cpu %.1f), "
          "per-stream pack %.1f us/stream (reps from %.1f to %.1f; cpu %.1f)",
          ms / 1e3, bu_min(shared, reps) / 1e3, bu_max(shared, reps) / 1e3,
          cs / 1e3, mp / 1e3, bu_min(per, reps) / 1e3, bu_max(per, reps) / 1e3,
          cp / 1e3);
  bu_note("fanout: ratio %.1f (median of per-rep ratios; cpu %.1f)", rm, rc);
  char what[96];
  snprintf(what, sizeof(what), "full state %s x 1 KiB: next+iov+free, per stream",
           size_name(n));
  bu_result("fanout_shared_us_per_stream", ms / 1e3, "us", what, NULL, -1);
  snprintf(what, sizeof(what), "full state %s x 1 KiB: protobuf-c pack, per stream",
           size_name(n));
  bu_result("fanout_per_stream_pack_us_per_stream", mp / 1e3, "us", what, NULL, -1);
  bu_result("fanout_shared_ns_per_resource", ms / (double)n, "ns",
            "shared: cost per resource per stream", NULL, -1);
  /* The verdict takes the worse of wall and CPU time: on a loaded machine
   * the long per-stream samples are preempted more than the short shared
   * ones, which flatters the wall-time ratio. */
  bu_result("fanout_shared_vs_per_stream", rm, "x",
            "per-stream pack time / shared time (paired)", ">= 20",
            rm >= 20.0 && rc >= 20.0);
  bu_result("fanout_shared_vs_per_stream_cpu", rc, "x",
            "the same ratio in thread CPU time", NULL, -1);

  for (size_t i = 0; i < nstreams; ++i) {
    mcp_source_session_del(ss[i]);
  }
  free(ss);
  free(shared);
  free(per);
  free(shared_cpu);
  free(per_cpu);
  free(ratio);
  free(ratio_cpu);
  free(sw_wall);
  free(sw_cpu);
  free(pw_wall);
  free(pw_cpu);
  free(req.p);
  pbtree_free(&t);
  mcp_store_del(st);
}

/* ------------------------------------------------------------------ */
/* 3. Memory per synced stream                                         */
/* ------------------------------------------------------------------ */

static void bench_memory(void) {
  const size_t ncolls = 10, n = quick ? 1000 : 10000, body_len = 1024;
  const size_t nstreams = quick ? 100 : 1000;
  bu_count_mem store_mem, sess_mem;
  bu_count_mem_init(&store_mem);
  bu_count_mem_init(&sess_mem);
  mcp_store *st = store_new(&store_mem.mem);
  char colls[10][64];
  bytes reqs[10];
  for (size_t c = 0; c < ncolls; ++c) {
    snprintf(colls[c], sizeof(colls[c]), "istio/networking/v1alpha3/kind%02zu", c);
    store_fill(st, colls[c], n, body_len);
    reqs[c] = pack_request(colls[c], "", 1, NULL, NULL, 0);
  }
  size_t store_bytes = store_mem.live_bytes;

  uint64_t t0 = bu_now_ns();
  mcp_source_session **ss = xcalloc(nstreams, sizeof(*ss));
  size_t msg_peak = 0;
  for (size_t i = 0; i < nstreams; ++i) {
    ss[i] = source_new(st, &sess_mem.mem);
    for (size_t c = 0; c < ncolls; ++c) {
      source_recv(ss[i], reqs[c]);
    }
    uint32_t nonce = 0;
    if (i == 0) {
      /* What one full-state push of 10k resources costs while it lives
       * (it is freed once the transport sent it). */
      size_t before = sess_mem.live_bytes;
      mcp_msg *m = source_next(ss[i]);
      msg_peak = sess_mem.live_bytes - before;
      bytes ack = pack_ack(mcp_msg_collection(m), ++nonce, 1);
      mcp_msg_free(m);
      source_recv(ss[i], ack);
      free(ack.p);
    }
    source_sync(ss[i], &nonce, 1);
    check(nonce == ncolls, "one push per collection");
  }
  double sync_ms = ns_since(t0) / 1e6;
  /* Every stream is synced: nothing is in flight, nothing to send. */
  for (size_t i = 0; i < nstreams; ++i) {
    check(!mcp_source_session_want_write(ss[i], tick()), "synced streams are idle");
  }
  /* Whatever the store allocated meanwhile (caches shared by all streams)
   * is the store's, not the streams'. */
  size_t store_growth = store_mem.live_bytes - store_bytes;
  double req = (double)sess_mem.live_bytes / (double)nstreams;
  double blocks = (double)sess_mem.live_blocks / (double)nstreams;
  double chunk = (double)sess_mem.chunk_bytes / (double)nstreams;
  double plus16 = req + 16.0 * blocks;
  bu_note("memory: %zu collections x %zu resources (store %.1f MiB, %.0f B per "
          "resource); %zu streams synced in %.0f ms", ncolls, n,
          (double)store_bytes / 1048576.0,
          (double)store_bytes / (double)(ncolls * n), nstreams, sync_ms);
  bu_note("memory: per stream %.1f bytes requested in %.1f blocks; +16 B/block: "
          "%.1f; glibc chunks: %.1f; the store grew by %zu bytes meanwhile",
          req, blocks, plus16, chunk, store_growth);

  /* The same after one incremental push per collection is in flight. */
  res_buf b;
  for (size_t c = 0; c < ncolls; ++c) {
    int rv = mcp_store_upsert(st, colls[c], make_res(&b, 7, 2, body_len), tick());
    check(rv == 1, "upsert");
  }
  for (size_t i = 0; i < nstreams; ++i) {
    mcp_msg *m;
    while (mcp_source_session_next(ss[i], tick(), &m) == 1) {
      mcp_msg_free(m);
    }
  }
  double inflight = (double)sess_mem.chunk_bytes / (double)nstreams;
  bu_note("memory: per stream with a push in flight in every collection: %.1f "
          "(glibc chunks)", inflight);

  bu_result("stream_state_bytes", chunk > plus16 ? chunk : plus16, "bytes",
            "per synced stream, 10 colls, incl. malloc overhead", "<= 512",
            (chunk > plus16 ? chunk : plus16) <= 512.0);
  bu_result("stream_state_bytes_requested", req, "bytes",
            "per synced stream, bytes requested (exact)", NULL, -1);
  bu_result("stream_state_blocks", blocks, "blocks",
            "per synced stream, live allocations", NULL, -1);
  bu_result("stream_state_bytes_inflight", inflight, "bytes",
            "per stream, a push pending in all 10 colls", NULL, -1);
  bu_result("store_bytes_per_resource", (double)store_bytes / (double)(ncolls * n),
            "bytes", "store, 1 KiB bodies (shared by all streams)", NULL, -1);
  bu_result("full_push_msg_bytes_per_resource", (double)msg_peak / (double)n,
            "bytes", "transient, while one full-state push lives", NULL, -1);

  for (size_t i = 0; i < nstreams; ++i) {
    mcp_source_session_del(ss[i]);
  }
  check(sess_mem.live_bytes == 0, "sessions free everything");
  free(ss);
  for (size_t c = 0; c < ncolls; ++c) {
    free(reqs[c].p);
  }
  mcp_store_del(st);
  check(store_mem.live_bytes == 0, "the store frees everything");
}

/* ------------------------------------------------------------------ */
/* 4. Sink apply throughput                                            */
/* ------------------------------------------------------------------ */

#define SINK_COLL "istio/networking/v1alpha3/destinationrules"

typedef struct apply_stats {
  size_t changes, resources, body_bytes;
} apply_stats;

/* An application that looks at what it is given and accepts it. */
static int on_apply(const mcp_change *ch, char *msg, size_t msglen, void *ud) {
  (void)msg;
  (void)msglen;
  apply_stats *a = ud;
  a->changes++;
  a->resources += ch->nresources;
  for (size_t i = 0; i < ch->nresources; ++i) {
    a->body_bytes += ch->resources[i].body_len;
  }
  return 0;
}

/* Feeds one push to the sink and sends its ACK. */
static void sink_feed(mcp_sink_session *s, bytes b) {
  int rv = mcp_sink_session_recv(s, b.p, b.len, tick());
  if (rv) {
    die("mcp_sink_session_recv", rv);
  }
  mcp_msg *m = NULL;
  if ((rv = mcp_sink_session_next(s, &m)) != 1) {
    die("mcp_sink_session_next (ACK)", rv);
  }
  mcp_msg_free(m);
}

static void bench_sink(void) {
  const size_t n = quick ? 1000 : 10000, body_len = 1024;
  const size_t nchanged = n / 10;
  const size_t full_reps = quick ? 3 : 9, inc_reps = quick ? 5 : 41;

  /* The pushes, as our source produces them and a transport delivers
   * them (contiguous bytes). */
  mcp_store *st = store_new(NULL);
  store_fill(st, SINK_COLL, n, body_len);
  mcp_source_session *src = source_new(st, NULL);
  bytes req = pack_request(SINK_COLL, "", 1, NULL, NULL, 0);
  source_recv(src, req);
  mcp_msg *m = source_next(src);
  bytes full = flatten(m);
  mcp_msg_free(m);
  bytes ack = pack_ack(SINK_COLL, 1, 1);
  source_recv(src, ack);
  res_buf b;
  for (size_t i = 0; i < nchanged; ++i) {
    check(mcp_store_upsert(st, SINK_COLL, make_res(&b, i * 10, 2, body_len), tick()) == 1,
          "upsert");
  }
  m = source_next(src);
  PbResources *p = decode_push(m);
  check(p->incremental && p->n_resources == nchanged, "an incremental push");
  istio__mcp__v1alpha1__resources__free_unpacked(p, NULL);
  bytes inc = flatten(m);
  mcp_msg_free(m);

  apply_stats stats = {0};
  const char *colls[] = {SINK_COLL};
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.node_id = NODE_ID;
  o.collections = colls;
  o.ncollections = 1;
  o.incremental = 1;
  o.apply = on_apply;
  o.user_data = &stats;
  mcp_sink_state *state = NULL;
  mcp_sink_session *s = NULL;
  int rv = mcp_sink_state_new(&state, &o);
  if (!rv) {
    rv = mcp_sink_session_new(&s, state, tick());
  }
  if (rv) {
    die("sink", rv);
  }
  while ((rv = mcp_sink_session_next(s, &m)) == 1) { /* the first request */
    mcp_msg_free(m);
  }

  double *fs = xcalloc(full_reps, sizeof(double)), *fc = xcalloc(full_reps, sizeof(double));
  double *is = xcalloc(inc_reps, sizeof(double)), *ic = xcalloc(inc_reps, sizeof(double));
  sink_feed(s, full); /* warm-up */
  for (size_t r = 0; r < full_reps; ++r) {
    bu_sw sw = bu_sw_start();
    sink_feed(s, full);
    double cpu, dt = bu_sw_ns(&sw, &cpu);
    fs[r] = (double)n / (dt / 1e9);
    fc[r] = (double)n / (cpu / 1e9);
  }
  check(mcp_sink_state_count(state, SINK_COLL) == n, "the sink holds everything");
  sink_feed(s, inc);
  for (size_t r = 0; r < inc_reps; ++r) {
    bu_sw sw = bu_sw_start();
    sink_feed(s, inc);
    double cpu, dt = bu_sw_ns(&sw, &cpu);
    is[r] = (double)nchanged / (dt / 1e9);
    ic[r] = (double)nchanged / (cpu / 1e9);
  }
  check(mcp_sink_state_count(state, SINK_COLL) == n, "the sink holds everything");
  check(stats.changes == 2 + full_reps + inc_reps, "every push was applied");
  double fm = bu_median(fs, full_reps), im = bu_median(is, inc_reps);
  bu_note("sink: full state of %zu (%zu bytes): %.0f resources/s (%.2f ms per "
          "push; cpu %.0f/s); incremental %zu of %zu (%zu bytes): %.0f "
          "resources/s (cpu %.0f/s)", n, full.len, fm, (double)n / fm * 1e3,
          bu_median(fc, full_reps), nchanged, n, inc.len, im,
          bu_median(ic, inc_reps));
  char what[96];
  snprintf(what, sizeof(what), "full state, %s x 1 KiB: decode+validate+apply+ACK",
           size_name(n));
  bu_result("sink_apply_resources_per_s", fm, "resources_per_s", what, NULL, -1);
  bu_result("sink_apply_full_resources_per_s", fm, "resources_per_s", what, NULL, -1);
  bu_result("sink_apply_full_cpu_resources_per_s", bu_median(fc, full_reps),
            "resources_per_s", "the same in thread CPU time", NULL, -1);
  snprintf(what, sizeof(what), "incremental, %s changed of %s held",
           size_name(nchanged), size_name(n));
  bu_result("sink_apply_incremental_resources_per_s", im, "resources_per_s", what,
            NULL, -1);
  bu_result("sink_apply_incremental_cpu_resources_per_s", bu_median(ic, inc_reps),
            "resources_per_s", "the same in thread CPU time", NULL, -1);
  bu_result("sink_apply_mib_per_s", fm * (double)full.len / (double)n / 1048576.0,
            "MiB_per_s", "full state, wire bytes", NULL, -1);

  mcp_sink_session_del(s);
  mcp_sink_state_del(state);
  mcp_source_session_del(src);
  mcp_store_del(st);
  free(fs);
  free(is);
  free(fc);
  free(ic);
  free(full.p);
  free(inc.p);
  free(req.p);
  free(ack.p);
}

/* ------------------------------------------------------------------ */
/* 5. Resumption                                                       */
/* ------------------------------------------------------------------ */

#define RES_COLL "istio/networking/v1alpha3/gateways"

static void bench_resume(void) {
  const size_t n = quick ? 10000 : 100000, body_len = 256;
  const size_t reps = quick ? 3 : 7;
  mcp_store *st = store_new(NULL);
  store_fill(st, RES_COLL, n, body_len);
  /* The sink was away: 1 % of the resources changed meanwhile. */
  res_buf b;
  size_t nchanged = 0;
  for (size_t i = 0; i < n; i += 100, ++nchanged) {
    check(mcp_store_upsert(st, RES_COLL, make_res(&b, i, 2, body_len), tick()) == 1,
          "upsert");
  }
  char **names = xcalloc(n, sizeof(char *)), **versions = xcalloc(n, sizeof(char *));
  char(*nb)[64] = xcalloc(n, sizeof(*nb));
  for (size_t i = 0; i < n; ++i) {
    res_name(nb[i], sizeof(nb[i]), i);
    names[i] = nb[i];
    versions[i] = (char *)"1";
  }
  bytes req = pack_request(RES_COLL, "", 1, names, versions, n);
  bu_note("resume: %zu resources, %zu changed; request %zu bytes", n, nchanged,
          req.len);

  double *tot = xcalloc(reps, sizeof(double)), *rcv = xcalloc(reps, sizeof(double)),
         *bld = xcalloc(reps, sizeof(double)), *cpu = xcalloc(reps, sizeof(double));
  for (size_t r = 0; r <= reps; ++r) {
    mcp_source_session *s = source_new(st, NULL);
    uint64_t c0 = bu_cpu_ns();
    uint64_t t0 = bu_now_ns();
    source_recv(s, req);
    uint64_t t1 = bu_now_ns();
    mcp_msg *m = source_next(s);
    uint64_t t2 = bu_now_ns();
    consume(m);
    if (r == 0) {
      PbResources *p = decode_push(m);
      check(p->incremental && p->n_resources == nchanged &&
                p->n_removed_resources == 0,
            "the resumption answer carries what changed");
      istio__mcp__v1alpha1__resources__free_unpacked(p, NULL);
    }
    mcp_msg_free(m);
    uint64_t t3 = bu_now_ns();
    uint64_t c3 = bu_cpu_ns();
    mcp_source_session_del(s);
    if (r > 0) {
      cpu[r - 1] = (double)(c3 - c0) / 1e6;
      rcv[r - 1] = (double)(t1 - t0) / 1e6;
      bld[r - 1] = (double)(t2 - t1) / 1e6;
      tot[r - 1] = (double)(t3 - t0) / 1e6;
    }
  }
  double tm = bu_median(tot, reps), rm = bu_median(rcv, reps),
         bm = bu_median(bld, reps);
  bu_note("resume: %.2f ms (recv %.2f, build %.2f; min %.2f max %.2f; cpu %.2f)",
          tm, rm, bm, bu_min(tot, reps), bu_max(tot, reps), bu_median(cpu, reps));
  char what[96];
  snprintf(what, sizeof(what), "%s initial versions, 1%% changed: recv to answer",
           size_name(n));
  bu_result("resume_100k_ms", tm, "ms", what, NULL, -1);
  bu_result("resume_100k_cpu_ms", bu_median(cpu, reps), "ms",
            "the same in thread CPU time", NULL, -1);
  bu_result("resume_100k_recv_ms", rm, "ms", "of which: recv (decode + index map)",
            NULL, -1);
  bu_result("resume_100k_build_ms", bm, "ms", "of which: next (compare, build)",
            NULL, -1);
  free(tot);
  free(cpu);
  free(rcv);
  free(bld);
  free(names);
  free(versions);
  free(nb);
  free(req.p);
  mcp_store_del(st);
}

/* ------------------------------------------------------------------ */

/* ------------------------------------------------------------------ */
/* 7. Destination fan-out against MCP on the same store                */
/* ------------------------------------------------------------------ */

#define DEST_COLL "default/web:80"
#define DEST_PATH "web.default.svc.cluster.local:80"

/* Endpoint |i| (10.x.y.z:8080) with pod label "web-<i>-<gen>", as the view
 * adapter writes it (empty version: the store's follows the body). */
static void dest_put(mcp_store *st, uint32_t i, uint64_t gen) {
  mcp_dest_addr a;
  char ip[32], name[MCP_DEST_ADDR_NAME_MAX], pod[48];
  snprintf(ip, sizeof(ip), "10.%u.%u.%u", (i >> 16) & 255, (i >> 8) & 255,
           i & 255);
  check(mcp_dest_ip_parse(&a, ip, 8080) == 0, "an IPv4 address");
  mcp_dest_addr_name(&a, name, sizeof(name));
  snprintf(pod, sizeof(pod), "web-%u-%" PRIu64, i, gen);
  uint8_t body[128];
  size_t n = mcp_dest_weighted_addr_encode(&a, pod, body, sizeof(body));
  check(n <= sizeof(body), "a WeightedAddr fits");
  mcp_resource r;
  memset(&r, 0, sizeof(r));
  r.name = name;
  r.type_url = MCP_DEST_WEIGHTED_ADDR_TYPE_URL;
  r.body = body;
  r.body_len = n;
  int rv = mcp_store_upsert(st, DEST_COLL, &r, tick());
  if (rv != 1) {
    die("mcp_store_upsert (view)", rv);
  }
}

static bytes dest_request(void) {
  Conduit__Common__Destination d = CONDUIT__COMMON__DESTINATION__INIT;
  d.scheme = (char *)"k8s";
  d.path = (char *)DEST_PATH;
  bytes b;
  b.len = conduit__common__destination__get_packed_size(&d);
  b.p = xmalloc(b.len);
  conduit__common__destination__pack(&d, b.p);
  return b;
}

/* One pump that must send; returns the message. */
static mcp_msg *dest_pump(mcp_stream *st) {
  mcp_msg *m = NULL;
  int status;
  const char *details;
  if (mcp_stream_pump(st, tick(), 1, &m, &status, &details) != MCP_STREAM_SEND) {
    die("the Destination stream sent nothing", 0);
  }
  return m;
}

static void bench_destination(void) {
  const size_t nend = quick ? 100 : 1000, nstreams = quick ? 100 : 1000;
  const size_t rounds = quick ? 11 : 101;
  mcp_store *st = store_new(NULL);
  for (uint32_t i = 0; i < nend; ++i) {
    dest_put(st, i, 0);
  }
  mcp_dest_server_options o;
  mcp_dest_server_options_default(&o);
  o.view = st;
  o.heartbeat = 0;
  mcp_dest_server *srv = NULL;
  int rv = mcp_dest_server_new(&srv, &o);
  if (rv) {
    die("mcp_dest_server_new", rv);
  }
  bytes req = dest_request();
  mcp_stream **ds = xcalloc(nstreams, sizeof(*ds));
  double *first = xcalloc(nstreams, sizeof(double));
  size_t first_bytes = 0;
  for (size_t i = 0; i < nstreams; ++i) {
    if ((rv = mcp_dest_server_open(srv, tick(), &ds[i])) != 0) {
      die("mcp_dest_server_open", rv);
    }
    mcp_stream_recv(ds[i], req.p, req.len, tick());
    uint64_t t0 = bu_now_ns();
    mcp_msg *m = dest_pump(ds[i]);
    first_bytes = consume(m);
    mcp_msg_free(m);
    first[i] = ns_since(t0);
  }
  /* The same collection, watched by MCP streams (incremental, synced). */
  mcp_source_session **ms = xcalloc(nstreams, sizeof(*ms));
  bytes mreq = pack_request(DEST_COLL, "", 1, NULL, NULL, 0);
  uint32_t nonce = 0;
  for (size_t i = 0; i < nstreams; ++i) {
    uint32_t n = 0;
    ms[i] = source_new(st, NULL);
    source_recv(ms[i], mreq);
    source_sync(ms[i], &n, 1);
    nonce = n;
  }
  double *dsamp = xcalloc(rounds, sizeof(double));
  double *msamp = xcalloc(rounds, sizeof(double));
  size_t sink = 0;
  for (size_t r = 0; r <= rounds; ++r) {
    dest_put(st, (uint32_t)((r * 7919 + 13) % nend), 1 + r);
    if (r == 0) {
      /* The Update is an add of exactly the changed address. */
      mcp_msg *m = dest_pump(ds[0]);
      bytes b = flatten(m);
      Conduit__Proxy__Destination__Update *u =
          conduit__proxy__destination__update__unpack(NULL, b.len, b.p);
      check(u && u->update_case == CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_ADD &&
                u->add->n_addrs == 1,
            "an add of the one changed endpoint");
      conduit__proxy__destination__update__free_unpacked(u, NULL);
      free(b.p);
      mcp_msg_free(m);
    }
    bu_sw sw = bu_sw_start();
    for (size_t i = r == 0 ? 1 : 0; i < nstreams; ++i) {
      mcp_msg *m = dest_pump(ds[i]);
      sink += consume(m);
      mcp_msg_free(m);
    }
    double d = bu_sw_ns(&sw, NULL) / (double)nstreams;
    bytes ack = pack_ack(DEST_COLL, ++nonce, 1);
    sw = bu_sw_start();
    for (size_t i = 0; i < nstreams; ++i) {
      mcp_msg *m = source_next(ms[i]);
      sink += consume(m);
      mcp_msg_free(m);
      source_recv(ms[i], ack);
    }
    double mc = bu_sw_ns(&sw, NULL) / (double)nstreams;
    free(ack.p);
    if (r > 0) {
      dsamp[r - 1] = d;
      msamp[r - 1] = mc;
    }
  }
  check(sink > 0, "updates carried bytes");
  double *ratio = xcalloc(rounds, sizeof(double));
  for (size_t r = 0; r < rounds; ++r) {
    ratio[r] = dsamp[r] / msamp[r];
  }
  double dmed = bu_median(dsamp, rounds), mmed = bu_median(msamp, rounds);
  double fmed = bu_median(first, nstreams);
  bu_note("destination: %zu streams x %zu endpoints: update %.0f ns/stream "
          "(MCP %.0f ns), first add %.1f us (%zu bytes)", nstreams, nend, dmed,
          mmed, fmed / 1e3, first_bytes);
  bu_result("destination_update_us_per_stream", dmed / 1e3, "us",
            "1 endpoint of 1000 changes, 1000 Get streams: pump+iov+free",
            NULL, -1);
  bu_result("destination_vs_mcp_update", bu_median(ratio, rounds), "x",
            "the same change as an MCP incremental push (+ACK), same store",
            NULL, -1);
  bu_result("destination_first_add_us_per_stream", fmed / 1e3, "us",
            "a new Get stream's first add of 1000 endpoints", NULL, -1);
  for (size_t i = 0; i < nstreams; ++i) {
    mcp_stream_del(ds[i]);
    mcp_source_session_del(ms[i]);
  }
  mcp_dest_server_del(srv);
  mcp_store_del(st);
  free(ds);
  free(ms);
  free(first);
  free(dsamp);
  free(msamp);
  free(ratio);
  free(req.p);
  free(mreq.p);
}

/* ------------------------------------------------------------------ */
/* 8. Dispatcher: one node's change among 1000 agents                  */
/* ------------------------------------------------------------------ */

/* One encoded Task assigned to |node| (RUNNING) with image |gen|. */
static bytes disp_task(const char *id, const char *node, uint64_t gen) {
  Docker__Swarmkit__V1__Task t = DOCKER__SWARMKIT__V1__TASK__INIT;
  Docker__Swarmkit__V1__TaskStatus st = DOCKER__SWARMKIT__V1__TASK_STATUS__INIT;
  Docker__Swarmkit__V1__TaskSpec spec = DOCKER__SWARMKIT__V1__TASK_SPEC__INIT;
  Docker__Swarmkit__V1__ContainerSpec c =
      DOCKER__SWARMKIT__V1__CONTAINER_SPEC__INIT;
  char image[48];
  snprintf(image, sizeof(image), "nginx:1.%" PRIu64, gen);
  t.id = (char *)id;
  t.node_id = (char *)node;
  st.state = DOCKER__SWARMKIT__V1__TASK_STATE__RUNNING;
  t.status = &st;
  c.image = image;
  spec.runtime_case = DOCKER__SWARMKIT__V1__TASK_SPEC__RUNTIME_CONTAINER;
  spec.container = &c;
  t.spec = &spec;
  bytes b;
  b.len = docker__swarmkit__v1__task__get_packed_size(&t);
  b.p = xmalloc(b.len);
  docker__swarmkit__v1__task__pack(&t, b.p);
  return b;
}

static void disp_put(mcp_store *st, size_t node, size_t task, uint64_t gen) {
  char nid[32], tid[48], coll[64], name[64];
  snprintf(nid, sizeof(nid), "node-%zu", node);
  snprintf(tid, sizeof(tid), "task-%zu-%zu", node, task);
  mcp_disp_node_collection(coll, sizeof(coll), nid);
  mcp_disp_item_name(name, sizeof(name), MCP_DISP_TASK, tid);
  bytes b = disp_task(tid, nid, gen);
  mcp_resource r;
  memset(&r, 0, sizeof(r));
  r.name = name;
  r.type_url = MCP_DISP_TYPE_TASK;
  r.body = b.p;
  r.body_len = b.len;
  int rv = mcp_store_upsert(st, coll, &r, tick());
  if (rv != 1) {
    die("mcp_store_upsert (dispatcher view)", rv);
  }
  free(b.p);
}

static mcp_stream *disp_open(const mcp_service_def *def,
                             const ProtobufCMessage *req) {
  mcp_peer_info peer = {"127.0.0.1:5555", 0, NULL, NULL, 0};
  mcp_stream *st = NULL;
  int rv = def->open(def->user_data, &peer, tick(), &st);
  if (rv) {
    die("Dispatcher open", rv);
  }
  size_t n = protobuf_c_message_get_packed_size(req);
  uint8_t *b = xmalloc(n);
  protobuf_c_message_pack(req, b);
  mcp_stream_recv(st, b, n, tick());
  mcp_stream_half_close(st, tick());
  free(b);
  return st;
}

/* Pumps until idle; returns the bytes sent (the last message in |*last|
 * when wanted, else freed). */
static size_t disp_drain(mcp_stream *st, bytes *last) {
  size_t sent = 0;
  for (;;) {
    mcp_msg *m = NULL;
    int status;
    const char *details;
    mcp_stream_action a = mcp_stream_pump(st, tick(), 1, &m, &status, &details);
    if (a == MCP_STREAM_END) {
      die("a Dispatcher stream ended", status);
    }
    if (a != MCP_STREAM_SEND) {
      return sent;
    }
    sent += consume(m);
    if (last) {
      free(last->p);
      *last = flatten(m);
    }
    mcp_msg_free(m);
  }
}

static void bench_dispatcher(void) {
  const size_t nodes = quick ? 100 : 1000, tasks = 10;
  const size_t rounds = quick ? 11 : 101;
  mcp_store *st = store_new(NULL);
  for (size_t n = 0; n < nodes; ++n) {
    for (size_t t = 0; t < tasks; ++t) {
      disp_put(st, n, t, 0);
    }
  }
  static uint64_t seed = 7;
  mcp_disp_options o;
  mcp_disp_options_default(&o);
  o.view = st;
  o.rand = mcp_rand_splitmix64;
  o.rand_user_data = &seed;
  o.debounce = 0; /* at once: the cost of a change, not of a timer */
  o.max_delay = 0;
  o.heartbeat_period = 3600 * MCP_SECONDS;
  mcp_disp *d = NULL;
  int rv = mcp_disp_new(&d, &o, tick());
  if (rv) {
    die("mcp_disp_new", rv);
  }
  const mcp_service_def *defs;
  check(mcp_disp_services(d, &defs) == 5, "five Dispatcher methods");
  mcp_stream **sess = xcalloc(nodes, sizeof(*sess));
  mcp_stream **asg = xcalloc(nodes, sizeof(*asg));
  for (size_t n = 0; n < nodes; ++n) {
    char nid[32];
    snprintf(nid, sizeof(nid), "node-%zu", n);
    Docker__Swarmkit__V1__SessionRequest r =
        DOCKER__SWARMKIT__V1__SESSION_REQUEST__INIT;
    Docker__Swarmkit__V1__NodeDescription desc =
        DOCKER__SWARMKIT__V1__NODE_DESCRIPTION__INIT;
    desc.hostname = nid;
    r.description = &desc;
    sess[n] = disp_open(&defs[0], &r.base);
    bytes first = {NULL, 0};
    disp_drain(sess[n], &first);
    Docker__Swarmkit__V1__SessionMessage *m =
        docker__swarmkit__v1__session_message__unpack(NULL, first.len, first.p);
    check(m && m->session_id && m->session_id[0], "a session id");
    Docker__Swarmkit__V1__AssignmentsRequest ar =
        DOCKER__SWARMKIT__V1__ASSIGNMENTS_REQUEST__INIT;
    ar.session_id = m->session_id;
    asg[n] = disp_open(&defs[4], &ar.base);
    docker__swarmkit__v1__session_message__free_unpacked(m, NULL);
    free(first.p);
    disp_drain(asg[n], NULL); /* the COMPLETE */
  }
  double *samp = xcalloc(rounds, sizeof(double));
  size_t others = 0, mine = 0;
  for (size_t r = 0; r <= rounds; ++r) {
    size_t node = (r * 7919 + 13) % nodes;
    bu_sw sw = bu_sw_start();
    disp_put(st, node, r % tasks, 1 + r);
    size_t got = 0;
    bytes last = {NULL, 0};
    for (size_t n = 0; n < nodes; ++n) {
      size_t b = disp_drain(sess[n], NULL);
      b += disp_drain(asg[n], n == node && r == 0 ? &last : NULL);
      if (n == node) {
        got += b;
      } else {
        others += b;
      }
    }
    double ns = bu_sw_ns(&sw, NULL);
    check(got > 0, "the changed node got its INCREMENTAL");
    mine += got;
    if (r == 0) {
      Docker__Swarmkit__V1__AssignmentsMessage *m =
          docker__swarmkit__v1__assignments_message__unpack(NULL, last.len,
                                                            last.p);
      check(m && m->type == DOCKER__SWARMKIT__V1__ASSIGNMENTS_MESSAGE__TYPE__INCREMENTAL &&
                m->n_changes == 1,
            "one INCREMENTAL change");
      docker__swarmkit__v1__assignments_message__free_unpacked(m, NULL);
      free(last.p);
    } else {
      samp[r - 1] = ns;
    }
  }
  double med = bu_median(samp, rounds);
  bu_note("dispatcher: %zu agents x %zu tasks: a change to one node %.1f us "
          "(upsert + %zu stream pumps), %zu bytes to it, %zu to the others",
          nodes, tasks, med / 1e3, 2 * nodes, mine / (rounds + 1), others);
  bu_result("dispatcher_change_us", med / 1e3, "us",
            "one task of one node of 1000 changes: upsert + pump 2000 streams",
            NULL, -1);
  bu_result("dispatcher_bytes_to_uninvolved_nodes", (double)others, "bytes",
            "sent to the 999 other nodes' streams over all rounds", "0",
            others == 0);
  for (size_t n = 0; n < nodes; ++n) {
    mcp_stream_del(asg[n]);
    mcp_stream_del(sess[n]);
  }
  mcp_disp_del(d);
  mcp_store_del(st);
  free(sess);
  free(asg);
  free(samp);
}

/* ------------------------------------------------------------------ */
/* 9. xDS: one changed resource of 10k, 1000 streams                    */
/* ------------------------------------------------------------------ */

#define XDS_VS "networking.istio.io/v1alpha3/VirtualService"
#define XDS_COLL "istio/networking/v1alpha3/virtualservices"

static void xds_put(mcp_store *st, size_t i, uint64_t gen) {
  char name[48];
  uint8_t body[256];
  snprintf(name, sizeof(name), "ns-%zu/vs-%zu", i % 100, i);
  bu_fill(body, sizeof(body), i * 1000003u + gen);
  mcp_resource r;
  memset(&r, 0, sizeof(r));
  r.name = name;
  r.type_url = "type.googleapis.com/istio.networking.v1alpha3.VirtualService";
  r.body = body;
  r.body_len = sizeof(body);
  int rv = mcp_store_upsert(st, XDS_COLL, &r, tick());
  if (rv != 1) {
    die("mcp_store_upsert (xds)", rv);
  }
}

/* A DiscoveryRequest (|delta| 0) or DeltaDiscoveryRequest for XDS_VS with
 * |nonce| (0: none), by hand. */
static bytes xds_request(int delta, uint32_t nonce) {
  char n[16] = "";
  if (nonce) {
    snprintf(n, sizeof(n), "%u", nonce);
  }
  size_t tl = strlen(XDS_VS), nl = strlen(n);
  bytes b;
  b.p = xmalloc(8 + tl + nl);
  uint8_t *p = b.p;
  *p++ = (uint8_t)((delta ? 2 : 4) << 3 | 2);
  *p++ = (uint8_t)tl;
  memcpy(p, XDS_VS, tl);
  p += tl;
  if (nl) {
    *p++ = (uint8_t)((delta ? 6 : 5) << 3 | 2);
    *p++ = (uint8_t)nl;
    memcpy(p, n, nl);
    p += nl;
  }
  b.len = (size_t)(p - b.p);
  return b;
}

static mcp_msg *xds_pump(mcp_stream *st) {
  mcp_msg *m = NULL;
  int status;
  const char *details;
  mcp_stream_action a = mcp_stream_pump(st, tick(), 1, &m, &status, &details);
  if (a != MCP_STREAM_SEND) {
    die("an xDS stream did not answer", a == MCP_STREAM_END ? status : 0);
  }
  return m;
}

static void bench_xds(void) {
  const size_t nres = quick ? 1000 : 10000, nstreams = quick ? 100 : 1000;
  const size_t rounds[2] = {quick ? 3 : 11, quick ? 11 : 101};
  mcp_store *st = store_new(NULL);
  for (size_t i = 0; i < nres; ++i) {
    xds_put(st, i, 0);
  }
  mcp_xds_server_options o;
  mcp_xds_server_options_default(&o);
  o.store = st;
  mcp_xds_server *srv = NULL;
  int rv = mcp_xds_server_new(&srv, &o);
  if (rv) {
    die("mcp_xds_server_new", rv);
  }
  static const char *const names[2] = {"xds_sotw_push_us_per_stream",
                                       "xds_delta_push_us_per_stream"};
  double med[2] = {0, 0};
  size_t bytes_per[2] = {0, 0};
  uint64_t gen = 0;
  for (int delta = 0; delta < 2; ++delta) {
    mcp_stream **ss = xcalloc(nstreams, sizeof(*ss));
    bytes first = xds_request(delta, 0);
    for (size_t i = 0; i < nstreams; ++i) {
      if ((rv = mcp_xds_server_open(srv, delta, NULL, tick(), &ss[i])) != 0) {
        die("mcp_xds_server_open", rv);
      }
      mcp_stream_recv(ss[i], first.p, first.len, tick());
      mcp_msg *m = xds_pump(ss[i]);
      mcp_msg_free(m);
    }
    free(first.p);
    double *samp = xcalloc(rounds[delta], sizeof(double));
    uint32_t nonce = 1; /* every stream's counter moves alike */
    size_t sink = 0;
    for (size_t r = 0; r <= rounds[delta]; ++r) {
      /* The ACK of the response each stream holds (not timed: the
       * previous round's answer), then one changed resource. */
      bytes ack = xds_request(delta, nonce++);
      for (size_t i = 0; i < nstreams; ++i) {
        mcp_stream_recv(ss[i], ack.p, ack.len, tick());
      }
      free(ack.p);
      xds_put(st, (r * 7919 + 13) % nres, ++gen);
      bu_sw sw = bu_sw_start();
      for (size_t i = 0; i < nstreams; ++i) {
        mcp_msg *m = xds_pump(ss[i]);
        size_t b = consume(m);
        sink += b;
        if (i == 0) {
          bytes_per[delta] = b;
        }
        mcp_msg_free(m);
      }
      double d = bu_sw_ns(&sw, NULL) / (double)nstreams;
      if (r > 0) {
        samp[r - 1] = d;
      }
    }
    check(sink > 0, "xDS responses carried bytes");
    med[delta] = bu_median(samp, rounds[delta]);
    for (size_t i = 0; i < nstreams; ++i) {
      mcp_stream_del(ss[i]);
    }
    free(ss);
    free(samp);
  }
  /* SotW carries the whole set, delta the one resource. */
  check(bytes_per[0] > 100 * bytes_per[1], "SotW full state, delta one");
  bu_note("xds: %zu streams x %zu resources: SotW %.1f us/stream (%zu bytes), "
          "delta %.2f us/stream (%zu bytes)", nstreams, nres, med[0] / 1e3,
          bytes_per[0], med[1] / 1e3, bytes_per[1]);
  bu_result(names[0], med[0] / 1e3, "us",
            "1 of 10k VirtualServices changes, 1000 SotW streams: the whole "
            "set, shared Resource bytes (pump+iov+free)",
            NULL, -1);
  bu_result(names[1], med[1] / 1e3, "us",
            "the same change, 1000 delta streams: the one resource",
            NULL, -1);
  mcp_xds_server_del(srv);
  mcp_store_del(st);
}

static const struct {
  const char *name;
  void (*fn)(void);
} benches[] = {
    {"incremental", bench_incremental},
    {"streams", bench_streams},
    {"fanout", bench_fanout},
    {"memory", bench_memory},
    {"sink", bench_sink},
    {"resume", bench_resume},
    {"destination", bench_destination},
    {"dispatcher", bench_dispatcher},
    {"xds", bench_xds},
};
#define NBENCH (sizeof(benches) / sizeof(benches[0]))

int main(int argc, char **argv) {
  int want[NBENCH] = {0}, any = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
      continue;
    }
    if (strncmp(argv[i], "--max-n=", 8) == 0) {
      max_n = (size_t)strtoull(argv[i] + 8, NULL, 10);
      continue;
    }
    size_t k = 0;
    while (k < NBENCH && strcmp(argv[i], benches[k].name) != 0) {
      ++k;
    }
    if (k == NBENCH) {
      fprintf(stderr, "usage: %s [--quick] [--max-n=N] [", argv[0]);
      for (k = 0; k < NBENCH; ++k) {
        fprintf(stderr, "%s%s", k ? "|" : "", benches[k].name);
      }
      fprintf(stderr, " ...]\n");
      return 2;
    }
    want[k] = any = 1;
  }
  if (quick) {
    bu_note("--quick: reduced sizes, the numbers are not comparable");
  }
  uint64_t t0 = bu_now_ns();
  for (size_t k = 0; k < NBENCH; ++k) {
    if (!any || want[k]) {
      uint64_t t1 = bu_now_ns();
      benches[k].fn();
      bu_note("%s done in %.1f s", benches[k].name, ns_since(t1) / 1e9);
    }
  }
  bu_table("libmcp core benchmarks");
  bu_note("total %.1f s; %zu target(s) missed", ns_since(t0) / 1e9, bu_missed());
  free(body_pool);
  return 0;
}
