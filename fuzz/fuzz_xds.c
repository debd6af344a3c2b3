/*
 * fuzz_xds: the xDS module (core/xds/xds_*.c) driven by a script: server
 * streams (state of the world or delta) each paired with an xDS client
 * stream that answers what its server sends, while the store changes at
 * random; raw request bytes into server streams; raw response bytes into
 * a lone client.
 *
 * Header: options (debounce, max_delay), then actions, one byte each
 * (modulo A_N) with operands:
 *   TIME      u16: 1/16 ms units to advance
 *   OPEN      slot, flags (bit 0: delta; bit 1: a paired client, else raw
 *             requests only; bits 2-4: which types it subscribes to)
 *   RECV      slot, raw bytes: one more request to the server stream
 *   STORE     op, collection, name, body: upsert, delete, bulk (tombstones
 *             to compact), remove_collection
 *   PUMP      slot, flags (bit 0: until idle)
 *   CLOSE     slot: the call goes (both streams deleted)
 *   RAW       raw bytes: one response to the lone client
 *   FAIL      k: the k-th allocation from now fails
 * At the end allocation failures are disarmed, time passes beyond the
 * debounce, and every pair is drained.
 *
 * Oracles (besides ASan/UBSan/LSan):
 *   - a client never rejects what its server sent (every response decodes
 *     and passes the client's checks), unless an allocation failed;
 *   - a server stream ends only with INVALID_ARGUMENT (raw requests),
 *     ABORTED (RESYNC) or RESOURCE_EXHAUSTED (NOMEM, LIMIT);
 *   - after the final drain, a pair that never broke holds, per wildcard
 *     type, exactly the store's collection (same names and versions);
 *   - nothing leaks (fz_mem).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "mcp/xds.h"

#define NSLOTS 3
#define MS MCP_MILLISECONDS

enum { A_TIME, A_OPEN, A_RECV, A_STORE, A_PUMP, A_CLOSE, A_RAW, A_FAIL, A_N };

/* Types a client may ask for, and the collections the store changes. */
static const char *const types[] = {
    "networking.istio.io/v1alpha3/VirtualService",
    "networking.istio.io/v1/VirtualService",
    "core/v1/ConfigMap",
    "mesh.istio.io/v1alpha1/MeshConfig",
    "type.googleapis.com/envoy.config.cluster.v3.Cluster",
};
#define NTYPES 5
static const char *const colls[] = {
    "istio/networking/v1alpha3/virtualservices",
    "k8s/core/v1/configmaps",
    "istio/mesh/v1alpha1/meshconfigs",
};

typedef struct slot {
  mcp_stream *ss, *cs;
  mcp_xds_held *held;
  int delta, paired, broken;
  const char *sub[NTYPES];
  size_t nsub;
} slot;

typedef struct world {
  fz_mem m;
  mcp_store *store;
  mcp_xds_server *srv;
  mcp_tstamp ts, quiet;
  slot s[NSLOTS];
  mcp_xds_held *lheld;
  mcp_stream *ls;
} world;

static int on_resp(const mcp_xds_response *r, const char *rejected, char *msg,
                   size_t msglen, void *ud) {
  slot *s = ud;
  (void)r;
  (void)msg;
  (void)msglen;
  if (rejected && s) {
    /* Only a failed allocation may make the server send less than it
     * should; what it sends must always be acceptable. */
    FZ_CHECK(0, "the client rejected what the server sent: %s", rejected);
  }
  return 0;
}

static void slot_close(slot *s) {
  mcp_stream_del(s->cs);
  mcp_stream_del(s->ss);
  mcp_xds_held_del(s->held);
  memset(s, 0, sizeof(*s));
}

static void slot_open(world *w, fz_in *in) {
  slot *s = &w->s[fz_u8(in) % NSLOTS];
  uint8_t f = fz_u8(in);
  slot_close(s);
  s->delta = f & 1;
  s->paired = (f >> 1) & 1;
  unsigned pick = (f >> 2) & 7;
  for (unsigned i = 0; i < NTYPES; i++) {
    if (pick == 0 || (pick >> (i % 3)) & 1) {
      s->sub[s->nsub++] = types[i];
    }
  }
  long fired = w->m.fired;
  int rv = mcp_xds_server_open(w->srv, s->delta, NULL, w->ts, &s->ss);
  fz_check_nomem(&w->m, fired, rv, "server open");
  if (rv < 0) {
    s->ss = NULL;
    return;
  }
  if (!s->paired) {
    return;
  }
  fired = w->m.fired;
  rv = mcp_xds_held_new(&s->held, &w->m.mem);
  fz_check_nomem(&w->m, fired, rv, "held");
  if (rv < 0) {
    s->broken = 1;
    return;
  }
  mcp_xds_client_options o = {.held = s->held, .delta = s->delta,
                              .type_urls = s->sub, .ntypes = s->nsub,
                              .node_id = "fuzz", .initial_nonce = "t0",
                              .on_response = on_resp, .user_data = s,
                              .mem = &w->m.mem};
  fired = w->m.fired;
  rv = mcp_xds_client_open(&s->cs, &o, w->ts);
  fz_check_nomem(&w->m, fired, rv, "client open");
  if (rv < 0) {
    s->cs = NULL;
    s->broken = 1;
  }
}

/* One pump of |st|; moves a message to |to| (when not NULL). Returns 1 when
 * something moved, 0 idle, -1 the stream ended (then deleted by caller). */
static int pump_one(world *w, slot *s, mcp_stream *st, mcp_stream *to,
                    int server) {
  mcp_msg *msg = NULL;
  int status = 0;
  const char *d = NULL;
  mcp_stream_action a = mcp_stream_pump(st, w->ts, 1, &msg, &status, &d);
  if (a == MCP_STREAM_END) {
    if (server) {
      FZ_CHECK(status == 3 || status == 10 || status == 8,
               "server stream ended with %d: %s", status, d);
      /* NOMEM (of this pump or of an earlier recv), or a raw request
       * over the limits. */
      FZ_CHECK(status != 8 || w->m.fired > 0 || !s->paired,
               "RESOURCE_EXHAUSTED without a failed allocation: %s", d);
    }
    return -1;
  }
  if (a != MCP_STREAM_SEND) {
    return 0;
  }
  size_t len = mcp_msg_len(msg);
  uint8_t *flat = malloc(len ? len : 1);
  FZ_CHECK(flat, "out of memory");
  mcp_msg_flatten(msg, flat);
  mcp_msg_free(msg);
  if (to) {
    mcp_stream_recv(to, flat, len, w->ts);
  }
  free(flat);
  return 1;
}

static void slot_pump(world *w, slot *s, int until_idle) {
  for (int round = 0; round < (until_idle ? 200 : 1); round++) {
    int moved = 0;
    if (s->ss) {
      int r = pump_one(w, s, s->ss, s->cs, 1);
      if (r < 0) {
        mcp_stream_del(s->ss);
        s->ss = NULL;
        s->broken = 1;
      }
      moved |= r > 0;
    }
    if (s->cs) {
      int r = pump_one(w, s, s->cs, s->ss, 0);
      if (r < 0) {
        mcp_stream_del(s->cs);
        s->cs = NULL;
        s->broken = 1;
      }
      moved |= r > 0;
    }
    if (!moved) {
      return;
    }
  }
}

static void store_op(world *w, fz_in *in) {
  uint8_t op = fz_u8(in), c = fz_u8(in), n = fz_u8(in);
  char body[40];
  fz_str(in, body, 32);
  const char *coll = colls[c % 3];
  const char *name = fz_names[n % FZ_NNAMES];
  mcp_resource r;
  memset(&r, 0, sizeof(r));
  r.name = name;
  r.type_url = "type.googleapis.com/test.Body";
  r.body = (const uint8_t *)body;
  r.body_len = strlen(body);
  char g[16];
  switch (op % 4) {
  case 0:
    FZ_CHECK(mcp_store_upsert(w->store, coll, &r, w->ts) >= 0, "upsert");
    break;
  case 1:
    FZ_CHECK(mcp_store_delete(w->store, coll, name, w->ts) >= 0, "delete");
    break;
  case 2: /* many names: big responses, tombstones to compact */
    for (unsigned i = 0; i < 80u + n; i++) {
      snprintf(g, sizeof g, "ns/g%u", i);
      r.name = g;
      if (c & 0x80) {
        FZ_CHECK(mcp_store_delete(w->store, coll, g, w->ts) >= 0, "delete");
      } else {
        FZ_CHECK(mcp_store_upsert(w->store, coll, &r, w->ts) >= 0, "upsert");
      }
    }
    break;
  default:
    FZ_CHECK(mcp_store_remove_collection(w->store, coll, w->ts) >= 0,
             "remove_collection");
    break;
  }
}

typedef struct cmp_ctx {
  const slot *s;
  const char *type_url;
} cmp_ctx;

/* Each store resource is held in its version, under its xDS name. */
static void cmp_fn(const char *name, const char *version, void *ud) {
  cmp_ctx *c = ud;
  char xn[600];
  snprintf(xn, sizeof xn, "%s%s", strchr(name, '/') ? "" : "/", name);
  const char *v = mcp_xds_held_version(c->s->held, c->type_url, xn);
  FZ_CHECK(v && !strcmp(v, version), "%s %s: held %s, store %s", c->type_url,
           xn, v ? v : "(none)", version);
}

/* The converged state: a pair that never broke holds each wildcard type's
 * collection exactly. */
static void check_converged(world *w, slot *s) {
  if (!s->paired || s->broken || !s->ss || !s->cs || w->m.fired) {
    return;
  }
  for (size_t i = 0; i < s->nsub; i++) {
    char coll[128];
    if (mcp_collection_for_gvk(s->sub[i], coll, sizeof coll) < 0) {
      FZ_CHECK(mcp_xds_held_count(s->held, s->sub[i]) == 0, "unknown type");
      continue;
    }
    size_t n = mcp_store_count(w->store, coll);
    if (!s->delta && !strcmp(s->sub[i], "mesh.istio.io/v1alpha1/MeshConfig")) {
      n = n ? 1 : 0; /* SotW sends the first MeshConfig only */
    }
    FZ_CHECK(mcp_xds_held_count(s->held, s->sub[i]) == n,
             "%s: the client holds %zu, the store %zu", s->sub[i],
             mcp_xds_held_count(s->held, s->sub[i]), n);
    if (strcmp(s->sub[i], "mesh.istio.io/v1alpha1/MeshConfig") != 0) {
      /* (MeshConfig is held by its Any: named only in delta.) */
      cmp_ctx c = {s, s->sub[i]};
      mcp_store_foreach(w->store, coll, cmp_fn, &c);
    }
  }
}

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
  w->ts = MCP_SECONDS;
  uint8_t opt = fz_u8(&in);
  mcp_store_options so;
  mcp_store_options_default(&so);
  so.epoch = 7;
  FZ_CHECK(mcp_store_new(&w->store, &so) == 0, "store");
  mcp_xds_server_options o;
  mcp_xds_server_options_default(&o);
  o.store = w->store;
  o.mem = &w->m.mem;
  o.debounce = (opt & 1) ? 30 * MS : 0;
  o.max_delay = (opt & 2) ? 100 * MS : 0;
  w->quiet = o.debounce + o.max_delay + 1;
  FZ_CHECK(mcp_xds_server_new(&w->srv, &o) == 0, "server");
  FZ_CHECK(mcp_xds_held_new(&w->lheld, &w->m.mem) == 0, "held");
  static const char *const one[] = {"networking.istio.io/v1alpha3/VirtualService"};
  mcp_xds_client_options lo = {.held = w->lheld, .delta = (opt >> 2) & 1,
                               .type_urls = one, .ntypes = 1,
                               .on_response = on_resp, .user_data = NULL,
                               .mem = &w->m.mem};
  FZ_CHECK(mcp_xds_client_open(&w->ls, &lo, w->ts) == 0, "lone client");

  for (int steps = 0; in.n > 0 && steps < 2000; steps++) {
    uint8_t act = fz_u8(&in) % A_N;
    switch (act) {
    case A_TIME:
      w->ts += (mcp_tstamp)fz_u16(&in) * MS / 16;
      break;
    case A_OPEN:
      slot_open(w, &in);
      break;
    case A_RECV: {
      slot *s = &w->s[fz_u8(&in) % NSLOTS];
      size_t n;
      const uint8_t *p = fz_take(&in, fz_u8(&in), &n);
      if (s->ss && !s->paired) {
        mcp_stream_recv(s->ss, p, n, w->ts);
      }
      break;
    }
    case A_STORE:
      store_op(w, &in);
      break;
    case A_PUMP: {
      slot *s = &w->s[fz_u8(&in) % NSLOTS];
      slot_pump(w, s, fz_u8(&in) & 1);
      break;
    }
    case A_CLOSE:
      slot_close(&w->s[fz_u8(&in) % NSLOTS]);
      break;
    case A_RAW: {
      size_t n;
      const uint8_t *p = fz_take(&in, fz_u8(&in), &n);
      if (w->ls) {
        mcp_stream_recv(w->ls, p, n, w->ts);
        for (int i = 0; i < 4 && w->ls; i++) {
          mcp_msg *msg = NULL;
          int st;
          const char *d;
          mcp_stream_action a = mcp_stream_pump(w->ls, w->ts, 1, &msg, &st, &d);
          mcp_msg_free(msg);
          if (a == MCP_STREAM_END) {
            mcp_stream_del(w->ls);
            w->ls = NULL;
          }
        }
      }
      break;
    }
    case A_FAIL:
      fz_mem_arm(&w->m, fz_u8(&in) % 64 + 1);
      break;
    }
  }
  fz_mem_disarm(&w->m);
  w->ts += w->quiet;
  for (int i = 0; i < NSLOTS; i++) {
    slot_pump(w, &w->s[i], 1);
    check_converged(w, &w->s[i]);
    slot_close(&w->s[i]);
  }
  mcp_stream_del(w->ls);
  mcp_xds_held_del(w->lheld);
  mcp_xds_server_del(w->srv);
  mcp_store_del(w->store);
  FZ_CHECK(w->m.live == 0, "%ld blocks leaked", w->m.live);
  free(w);
  return 0;
}
