/*
 * fuzz_source_session: the source side of a stream, driven by a script.
 *
 * The input is a header (service, timing, retry policy, limits) followed by
 * actions: feed a request (raw bytes, or built from fields the input
 * chooses: key, nonce kind, error_detail, incremental,
 * initial_resource_versions, sink node), change the store, advance time,
 * handle expiry, produce and drain pushes, introspect, reconnect, and fail
 * an allocation. The script always ends with the session and stores freed
 * and no block left.
 *
 * Checked on the way (docs/protocol.md):
 *  - every result is a documented one; NOMEM exactly when an allocation
 *    failed; a failed call changes nothing visible (introspection);
 *  - want_write() says whether next() produces a message;
 *  - every push decodes (protobuf-c), has the next nonce (1, 2, 3, ...),
 *    the version <epoch>-<generation> of the collection now, and is full
 *    state (exactly the store's resources) or a consistent difference;
 *  - at most one push in flight per collection;
 *  - content NACKed is not pushed again on the stream (unless the retry
 *    policy covers the NACK's code, or the sink asked anew);
 *  - ACK / NACK / stale are counted as the nonce says;
 *  - after handle_expiry() and draining, get_expiry() is in the future.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_script.h"
#include "fuzz_util.h"
#include "fuzz_wire.h"

#define MS MCP_MILLISECONDS
#define MAXTRACK 16
#define NRING 8
#define MAXSNAP 24


/* What the harness remembers of one subscription key on this stream. */
typedef struct track {
  char key[80];
  char last_nonce[80]; /* wire nonce of the latest push */
  char nacked[64];     /* version NACKed (and not asked anew since) */
  int nacked_code;
} track;

/* A copy of one collection's status, to compare across a failed call. */
typedef struct snap1 {
  char coll[80], type_url[80];
  int incremental;
  char acked[48], pending[48], nonce[128];
  int nack_code;
  char nack_msg[64];
  uint64_t pushes, acks, nacks, stale;
} snap1;

typedef struct snap {
  size_t n;
  snap1 s[MAXSNAP];
  char node[64];
  uint64_t stale_unknown;
} snap;

typedef struct world {
  fz_mem m;
  mcp_service service;
  uint64_t seed;
  mcp_store *store, *alt;
  mcp_source_options so;
  int retry_codes[2];
  mcp_source_session *s;
  mcp_tstamp ts;
  unsigned nsession;
  /* this stream */
  uint32_t last_nonce_num;
  int trigger_expected;
  int node_taken; /* a request named the sink */
  const mcp_store *bound; /* the store the pushes come from */
  track tr[MAXTRACK];
  size_t ntr;
  char ring[NRING][80]; /* recent wire nonces, any key */
  size_t nring;
  /* events */
  uint64_t ev_push, ev_seen_push;
} world;

/* ---- callbacks ---- */

static void on_event(const mcp_event *ev, void *ud) {
  world *w = ud;
  FZ_CHECK(ev->collection && ev->nonce && ev->version && ev->message,
           "event %d with a NULL string", (int)ev->type);
  /* Read every string (ASan checks they are alive). */
  volatile size_t n = strlen(ev->collection) + strlen(ev->nonce) +
                      strlen(ev->version) + strlen(ev->message);
  (void)n;
  FZ_CHECK(ev->type <= MCP_EVENT_TRIGGER_IGNORED, "event type %d",
           (int)ev->type);
  if (ev->type == MCP_EVENT_PUSH) {
    w->ev_push++;
  }
}

static mcp_store *select_store(const mcp_sink_node *node, void *ud) {
  world *w = ud;
  FZ_CHECK(node && node->id, "select_store without a node id");
  for (size_t i = 0; i < node->nannotations; ++i) {
    volatile size_t n =
        strlen(node->annotations[i].key) + strlen(node->annotations[i].value);
    (void)n;
  }
  return strncmp(node->id, "alt", 3) == 0 ? w->alt : NULL;
}

/* Known types map to our collections; others to "x/<type_url>". */
static size_t map_type(const char *type_url, char *buf, size_t len, void *ud) {
  (void)ud;
  FZ_CHECK(type_url, "collection_for_type without a type");
  for (size_t i = 0; i < FZ_NTYPES; ++i) {
    if (strcmp(type_url, fz_types[i]) == 0) {
      return (size_t)snprintf(buf, len, "%s", fz_colls[i]);
    }
  }
  return (size_t)snprintf(buf, len, "x/%s", type_url);
}

/* ---- tracking ---- */

static track *track_of(world *w, const char *key, int create) {
  for (size_t i = 0; i < w->ntr; ++i) {
    if (strcmp(w->tr[i].key, key) == 0) {
      return &w->tr[i];
    }
  }
  if (!create || w->ntr == MAXTRACK || strlen(key) >= sizeof(w->tr[0].key)) {
    return NULL;
  }
  track *t = &w->tr[w->ntr++];
  memset(t, 0, sizeof(*t));
  snprintf(t->key, sizeof(t->key), "%s", key);
  return t;
}

/* Room for the strings of a status the session writes into its own
 * buffer (valid until its next call): versions and the nonce. */
typedef char status_strs[3][128];

/* The status of the subscription named |key| (collection or type URL),
 * its versions and nonce copied into |keep|. */
static int status_of(world *w, const char *key, mcp_collection_status *st,
                     status_strs keep) {
  size_t n = mcp_source_session_collection_count(w->s);
  for (size_t i = 0; i < n; ++i) {
    FZ_CHECK(mcp_source_session_collection_status(w->s, i, w->ts, st) == 0,
             "status %zu of %zu", i, n);
    const char *k = w->service == MCP_SERVICE_RESOURCE ? st->collection
                                                        : st->type_url;
    if (strcmp(k, key) == 0) {
      snprintf(keep[0], sizeof(keep[0]), "%s", st->acked_version);
      snprintf(keep[1], sizeof(keep[1]), "%s", st->pending_version);
      snprintf(keep[2], sizeof(keep[2]), "%s", st->pending_nonce);
      st->acked_version = keep[0];
      st->pending_version = keep[1];
      st->pending_nonce = keep[2];
      return 1;
    }
  }
  return 0;
}

static void take_snap(world *w, snap *sn) {
  memset(sn, 0, sizeof(*sn));
  size_t n = mcp_source_session_collection_count(w->s);
  sn->n = n;
  for (size_t i = 0; i < n && i < MAXSNAP; ++i) {
    mcp_collection_status st;
    FZ_CHECK(mcp_source_session_collection_status(w->s, i, w->ts, &st) == 0,
             "status %zu", i);
    snap1 *x = &sn->s[i];
    snprintf(x->coll, sizeof(x->coll), "%s", st.collection);
    snprintf(x->type_url, sizeof(x->type_url), "%s", st.type_url);
    x->incremental = st.incremental;
    snprintf(x->acked, sizeof(x->acked), "%s", st.acked_version);
    snprintf(x->pending, sizeof(x->pending), "%s", st.pending_version);
    snprintf(x->nonce, sizeof(x->nonce), "%s", st.pending_nonce);
    x->nack_code = st.last_nack_code;
    snprintf(x->nack_msg, sizeof(x->nack_msg), "%s", st.last_nack_message);
    x->pushes = st.pushes;
    x->acks = st.acks;
    x->nacks = st.nacks;
    x->stale = st.stale;
  }
  snprintf(sn->node, sizeof(sn->node), "%s", mcp_source_session_node_id(w->s));
  sn->stale_unknown = mcp_source_session_stale_unknown(w->s);
}

static void same_snap(const snap *a, const snap *b, const char *what) {
  FZ_CHECK(a->n == b->n, "%s failed but the collections went %zu -> %zu", what,
           a->n, b->n);
  FZ_CHECK(memcmp(a->s, b->s, sizeof(a->s)) == 0,
           "%s failed but a collection's status changed", what);
  FZ_CHECK(strcmp(a->node, b->node) == 0 && a->stale_unknown == b->stale_unknown,
           "%s failed but the node or stale count changed", what);
}

/* ---- sessions ---- */

static void track_reset(world *w) {
  w->ntr = 0;
  w->nring = 0;
  w->last_nonce_num = 0;
  w->node_taken = 0;
  w->bound = NULL;
  w->trigger_expected = w->so.send_trigger && w->service == MCP_SERVICE_RESOURCE;
}

static int session_open(world *w) {
  long fired = w->m.fired;
  int rv = mcp_source_session_new(&w->s, &w->so, w->ts);
  fz_check_nomem(&w->m, fired, rv, "source_session_new");
  FZ_CHECK(rv == 0 || rv == MCP_ERR_NOMEM, "session_new: %d", rv);
  if (rv != 0) {
    w->s = NULL;
    return rv;
  }
  w->nsession++;
  track_reset(w);
  FZ_CHECK(mcp_source_session_collection_count(w->s) == 0, "new session has subs");
  FZ_CHECK(strcmp(mcp_source_session_node_id(w->s), "") == 0, "new node id");
  return 0;
}

static void reconnect(world *w) {
  FZ_LOG("reconnect");
  mcp_source_session_del(w->s);
  w->s = NULL;
  /* A failed open is retried without failures: the script goes on. */
  if (session_open(w) != 0) {
    fz_mem_disarm(&w->m);
    FZ_CHECK(session_open(w) == 0, "session_new without failures");
  }
}

/* ---- receiving ---- */

static int retry_covers(const world *w, int code) {
  if (!w->so.nack_retry_initial || code <= 0 || code >= 32) {
    return 0;
  }
  if (!w->so.nack_retry_codes) {
    return code == MCP_CODE_UNAVAILABLE;
  }
  for (size_t i = 0; i < w->so.nnack_retry_codes; ++i) {
    if (w->so.nack_retry_codes[i] == code) {
      return 1;
    }
  }
  return 0;
}

/* The wire nonce of a pending push: the number, and on
 * IncrementalAggregatedResources ":<type_url>". */
static void wire_nonce(const world *w, char *buf, size_t n, const char *num,
                       const char *key) {
  if (w->service == MCP_SERVICE_AGGREGATED_INCREMENTAL) {
    snprintf(buf, n, "%s:%s", num, key);
  } else {
    snprintf(buf, n, "%s", num);
  }
}

static void feed(world *w, const uint8_t *p, size_t len) {
  fz_req q;
  int decoded = fz_req_decode(w->service, p, len, &q) == 0;
  mcp_collection_status before;
  status_strs before_strs;
  int had = 0;
  char want_nonce[128] = "";
  if (decoded) {
    had = status_of(w, q.key, &before, before_strs);
    if (had && before.pending_nonce[0]) {
      /* The status shows the nonce as it is on the wire. */
      snprintf(want_nonce, sizeof(want_nonce), "%s", before.pending_nonce);
    }
  }
  snap sa, sb;
  take_snap(w, &sa);
  long fired = w->m.fired;
  int rv = mcp_source_session_recv(w->s, p, len, w->ts);
  FZ_LOG("recv %zu bytes key=%s nonce=%s err=%d -> %d", len,
         decoded ? q.key : "?", decoded ? q.nonce : "?",
         decoded && q.error ? q.error->code : 0, rv);
  fz_check_nomem(&w->m, fired, rv, "source_session_recv");
  FZ_CHECK(rv == 0 || rv == MCP_ERR_MALFORMED || rv == MCP_ERR_PROTOCOL ||
               rv == MCP_ERR_NOMEM || rv == MCP_ERR_LIMIT,
           "recv: undocumented %d", rv);
  if (rv != 0) {
    take_snap(w, &sb);
    same_snap(&sa, &sb, "recv");
    if (decoded) {
      fz_req_free(&q);
    }
    return;
  }
  char hex[408];
  FZ_CHECK(decoded, "recv accepted bytes protobuf-c does not decode: %s",
           fz_hex(hex, p, len));
  int trigger_nack = w->service == MCP_SERVICE_RESOURCE &&
                     (!q.key[0] || strcmp(q.key, MCP_TRIGGER_COLLECTION) == 0) &&
                     q.error && q.error->code == MCP_CODE_UNIMPLEMENTED;
  FZ_CHECK(q.key[0] || trigger_nack, "recv accepted an empty key");
  if (trigger_nack) {
    take_snap(w, &sb);
    same_snap(&sa, &sb, "the trigger's NACK");
    fz_req_free(&q);
    return;
  }
  if (!w->node_taken) {
    /* The first request names the sink: as protobuf reads it (a message
     * field given twice is merged, the last scalar wins). */
    const mcp_sink_node *node = mcp_source_session_node(w->s);
    const char *id = q.node ? q.node->id : "";
    size_t na = q.node ? q.node->n_annotations : 0;
    FZ_CHECK(strcmp(node->id, id) == 0 && node->nannotations == na,
             "sink node: the session read id '%s' (%zu annotations), "
             "protobuf says '%s' (%zu)",
             node->id, node->nannotations, id, na);
    for (size_t i = 0; i < na; ++i) {
      FZ_CHECK(strcmp(node->annotations[i].key, q.node->annotations[i]->key) == 0 &&
                   strcmp(node->annotations[i].value,
                          q.node->annotations[i]->value) == 0,
               "sink node annotation %zu differs from protobuf's", i);
      /* The limits were checked before anything was kept. */
      FZ_CHECK(!w->so.max_node_key_len ||
                   (strlen(node->annotations[i].key) <= w->so.max_node_key_len &&
                    strlen(node->annotations[i].value) <= w->so.max_node_value_len),
               "sink node annotation %zu over the limits", i);
    }
    FZ_CHECK(!w->so.max_node_id_len || strlen(node->id) <= w->so.max_node_id_len,
             "sink node id of %zu bytes kept", strlen(node->id));
    w->node_taken = 1;
  }
  mcp_collection_status after;
  status_strs after_strs;
  int has = status_of(w, q.key, &after, after_strs);
  track *t = track_of(w, q.key, 1);
  if (!q.nonce[0]) {
    /* A new request or a re-request: answered; past NACKs forgotten. */
    FZ_CHECK(has, "request for %s: no subscription", q.key);
    FZ_CHECK(!after.pending_nonce[0], "re-request for %s: a push is in flight",
             q.key);
    /* Every new request is answered at once, even during a debounce. */
    if (after.known) {
      FZ_CHECK(mcp_source_session_want_write(w->s, w->ts) == 1,
               "request for known %s: nothing to send", q.key);
    }
    if (t) {
      t->nacked[0] = '\0';
    }
  } else if (want_nonce[0] && strcmp(q.nonce, want_nonce) == 0) {
    FZ_CHECK(has && !after.pending_nonce[0],
             "answer to %s's push: still pending", q.key);
    if (q.error) {
      FZ_CHECK(after.nacks == before.nacks + 1 && after.acks == before.acks,
               "NACK of %s counted as %" PRIu64 "/%" PRIu64, q.key, after.acks,
               after.nacks);
      FZ_CHECK(after.last_nack_code == q.error->code, "NACK code %d, status %d",
               q.error->code, after.last_nack_code);
      FZ_CHECK(strcmp(after.last_nack_message,
                      q.error->message ? q.error->message : "") == 0,
               "NACK message not kept");
      FZ_CHECK(strcmp(after.acked_version, before.acked_version) == 0,
               "a NACK changed what %s holds", q.key);
      if (t) {
        snprintf(t->nacked, sizeof(t->nacked), "%s", before.pending_version);
        t->nacked_code = q.error->code;
      }
    } else {
      FZ_CHECK(after.acks == before.acks + 1 && after.nacks == before.nacks,
               "ACK of %s counted as %" PRIu64 "/%" PRIu64, q.key, after.acks,
               after.nacks);
      FZ_CHECK(strcmp(after.acked_version, before.pending_version) == 0,
               "ACK of %s: holds %s, pushed %s", q.key, after.acked_version,
               before.pending_version);
      if (t) {
        t->nacked[0] = '\0';
      }
    }
  } else {
    /* Stale: counted, nothing else. */
    take_snap(w, &sb);
    if (had) {
      FZ_CHECK(after.stale == before.stale + 1, "stale answer for %s not counted",
               q.key);
    } else {
      FZ_CHECK(sb.stale_unknown == sa.stale_unknown + 1 && sb.n == sa.n,
               "stale answer for unknown %s not counted", q.key);
    }
    if (had) {
      FZ_CHECK(strcmp(after.pending_nonce, before.pending_nonce) == 0 &&
                   strcmp(after.acked_version, before.acked_version) == 0 &&
                   after.acks == before.acks && after.nacks == before.nacks,
               "a stale answer for %s changed its state", q.key);
    }
  }
  fz_req_free(&q);
}

/* Picks a string for a nonce. */
static void pick_nonce(world *w, fz_in *in, const char *key, char *buf,
                       size_t cap) {
  track *t = track_of(w, key, 0);
  switch (fz_u8(in) % 8) {
  case 0:
    buf[0] = '\0';
    break;
  case 1: /* the latest push's: an ACK or NACK */
    snprintf(buf, cap, "%s", t ? t->last_nonce : "");
    break;
  case 2: /* any recent one: usually stale */
    snprintf(buf, cap, "%s", w->nring ? w->ring[fz_u8(in) % w->nring] : "1");
    break;
  case 3:
    fz_str(in, buf, cap - 1 < 64 ? cap - 1 : 64);
    break;
  case 4: { /* the next push's: not sent yet, stale */
    char num[24];
    snprintf(num, sizeof(num), "%" PRIu32, w->last_nonce_num + 1);
    wire_nonce(w, buf, cap, num, key);
    break;
  }
  case 5:
    snprintf(buf, cap, "0");
    break;
  case 6:
    snprintf(buf, cap, "4294967296");
    break;
  default: /* the latest push's number with another type, or a leading 0 */
    snprintf(buf, cap, "0%s", t ? t->last_nonce : "1");
    if (w->service == MCP_SERVICE_AGGREGATED_INCREMENTAL && t) {
      char *colon = strchr(t->last_nonce, ':');
      snprintf(buf, cap, "%.*s:%s", colon ? (int)(colon - t->last_nonce) : 1,
               t->last_nonce, fz_types[fz_u8(in) % FZ_NTYPES]);
    }
    break;
  }
}

static const int k_codes[8] = {
    MCP_CODE_UNAVAILABLE, MCP_CODE_INVALID_ARGUMENT, MCP_CODE_UNIMPLEMENTED,
    0, MCP_CODE_INTERNAL, -1, 31, 40,
};

/* Builds a request from the script and feeds it. */
static void act_recv(world *w, fz_in *in) {
  char key[72], nonce[96], msg[48], vinfo[40], node_id[40];
  char ikeys[8][40], ivals[8][56];
  mcp_kv init[8], annot[2];
  fz_req_spec r;
  memset(&r, 0, sizeof(r));

  uint8_t kb = fz_u8(in) % 8;
  if (kb < 5) {
    snprintf(key, sizeof(key), "%s", fz_key(w->service, kb));
  } else if (kb == 5) {
    snprintf(key, sizeof(key), "%s", MCP_TRIGGER_COLLECTION);
  } else if (kb == 6) {
    key[0] = '\0';
  } else {
    fz_str(in, key, 64);
  }
  pick_nonce(w, in, key, nonce, sizeof(nonce));
  uint8_t f = fz_u8(in);
  r.key = key;
  r.nonce = nonce;
  r.incremental = f & 1;
  if (f & 2) {
    r.has_error = 1;
    r.code = k_codes[fz_u8(in) % 8];
    fz_str(in, msg, 40);
    r.message = msg;
  }
  if (f & 4) {
    const mcp_store *st = w->bound ? w->bound : w->store;
    const char *coll = w->service == MCP_SERVICE_RESOURCE
                           ? key
                           : fz_colls[kb < 5 ? kb : 0];
    size_t n = fz_u8(in) % 8;
    for (size_t i = 0; i < n; ++i) {
      uint8_t nb = fz_u8(in);
      if (nb == 0xff) {
        fz_str(in, ikeys[i], 32);
      } else {
        snprintf(ikeys[i], sizeof(ikeys[i]), "%s", fz_names[nb % FZ_NNAMES]);
      }
      uint8_t vb = fz_u8(in);
      const char *held = coll[0] ? mcp_store_version(st, coll, ikeys[i]) : NULL;
      switch (vb % 4) {
      case 0:
        snprintf(ivals[i], sizeof(ivals[i]), "%s", held ? held : "v1");
        break;
      case 1:
        ivals[i][0] = '\0';
        break;
      case 2:
        fz_str(in, ivals[i], 32);
        break;
      default:
        snprintf(ivals[i], sizeof(ivals[i]), "v%u", vb);
        break;
      }
      init[i].key = ikeys[i];
      init[i].value = ivals[i];
    }
    r.ninit = n;
    r.init = init;
  }
  r.has_node = !(f & 8);
  uint8_t nb = fz_u8(in) % 4;
  if (nb == 3) {
    fz_str(in, node_id, 32);
  } else {
    snprintf(node_id, sizeof(node_id), "%s",
             (const char *[]){"", "sink-a", "alt-sink"}[nb]);
  }
  r.node_id = node_id;
  if (f & 16) {
    annot[0].key = "zone";
    annot[0].value = "z1";
    annot[1].key = "ver";
    annot[1].value = msg; /* may be unset: then "" below */
    if (!(f & 2)) {
      msg[0] = '\0';
    }
    r.annot = annot;
    r.nannot = (f & 32) ? 2 : 1;
  }
  if (f & 64) {
    fz_str(in, vinfo, 32);
  } else {
    vinfo[0] = '\0';
  }
  r.version_info = vinfo;
  size_t len;
  uint8_t *p = fz_req_encode(w->service, &r, &len);
  feed(w, p, len);
  free(p);
}

/* ---- pushes ---- */

typedef struct live_ctx {
  const fz_push *x;
  size_t n, bad;
  char first[96];
} live_ctx;

static int push_find(const fz_push *x, const char *name) {
  for (size_t i = 0; i < x->nres; ++i) {
    const Istio__Mcp__V1alpha1__Metadata *md = x->res[i]->metadata;
    if (md && strcmp(md->name, name) == 0) {
      return (int)i;
    }
  }
  return -1;
}

static void full_cb(const char *name, const char *version, void *ud) {
  live_ctx *c = ud;
  c->n++;
  int i = push_find(c->x, name);
  if (i < 0 || strcmp(c->x->res[i]->metadata->version, version) != 0) {
    if (!c->bad++) {
      snprintf(c->first, sizeof(c->first), "%s@%s", name, version);
    }
  }
}

/* Checks one push against the store and the stream's rules. */
static void check_push(world *w, const mcp_msg *msg, const snap *before) {
  size_t len;
  uint8_t *p = fz_flatten(msg, &len);
  fz_push x;
  FZ_CHECK(fz_push_decode(w->service, p, len, &x) == 0,
           "a push does not decode (%zu bytes)", len);
  free(p);
  FZ_LOG("  push key=%s nonce=%s version=%s incr=%d res=%zu rem=%zu", x.key,
         x.nonce, x.version, x.incremental, x.nres, x.nrem);
  FZ_CHECK(strcmp(mcp_msg_collection(msg), x.key) == 0 ||
               w->service != MCP_SERVICE_RESOURCE,
           "mcp_msg_collection %s, message says %s", mcp_msg_collection(msg),
           x.key);
  if (w->trigger_expected) {
    w->trigger_expected = 0;
    FZ_CHECK(strcmp(x.key, MCP_TRIGGER_COLLECTION) == 0 && !x.nonce[0] &&
                 !x.nres && !x.nrem,
             "the first message is not the trigger");
    fz_push_free(&x);
    return;
  }
  /* Nonce: the next number. */
  char *end = NULL;
  unsigned long long n = strtoull(x.nonce, &end, 10);
  FZ_CHECK(end != x.nonce && x.nonce[0] != '0', "push nonce %s", x.nonce);
  FZ_CHECK(n == (unsigned long long)w->last_nonce_num + 1,
           "push nonce %llu after %" PRIu32, n, w->last_nonce_num);
  if (w->service == MCP_SERVICE_AGGREGATED_INCREMENTAL) {
    FZ_CHECK(*end == ':', "incremental aggregated nonce %s has no type",
             x.nonce);
  } else {
    FZ_CHECK(*end == '\0', "push nonce %s", x.nonce);
  }
  w->last_nonce_num = (uint32_t)n;
  /* The subscription: one push in flight at most. */
  mcp_collection_status st;
  status_strs st_strs;
  FZ_CHECK(status_of(w, x.key, &st, st_strs), "push for %s: no subscription",
           x.key);
  FZ_CHECK(st.known, "push for unknown %s", x.key);
  for (size_t i = 0; i < before->n && i < MAXSNAP; ++i) {
    const snap1 *b = &before->s[i];
    const char *k = w->service == MCP_SERVICE_RESOURCE ? b->coll : b->type_url;
    if (strcmp(k, x.key) == 0) {
      FZ_CHECK(!b->nonce[0], "two pushes in flight for %s (%s, then %s)", x.key,
               b->nonce, x.nonce);
      FZ_CHECK(st.pushes == b->pushes + 1, "pushes of %s not counted", x.key);
    }
  }
  /* One form of the nonce: the status shows it as pushed. */
  FZ_CHECK(strcmp(st.pending_nonce, x.nonce) == 0 &&
               strcmp(st.pending_version, x.version) == 0,
           "status of %s: pending %s@%s, pushed %s@%s", x.key, st.pending_nonce,
           st.pending_version, x.nonce, x.version);
  /* Version: <epoch>-<generation of the collection now>. */
  unsigned long long epoch = strtoull(x.version, &end, 16);
  FZ_CHECK(end - x.version == 16 && *end == '-', "push version %s", x.version);
  const mcp_store *store = epoch == mcp_store_epoch(w->store)  ? w->store
                           : w->alt && epoch == mcp_store_epoch(w->alt) ? w->alt
                                                                        : NULL;
  FZ_CHECK(store, "push version %s: epoch of no store", x.version);
  FZ_CHECK(!w->bound || w->bound == store, "a stream switched stores");
  w->bound = store;
  char want[48];
  snprintf(want, sizeof(want), "%016llx-%" PRIu64, epoch,
           mcp_store_generation(store, st.collection));
  FZ_CHECK(strcmp(x.version, want) == 0, "push of %s at %s, store is at %s",
           x.key, x.version, want);
  /* Content. */
  for (size_t i = 0; i < x.nres; ++i) {
    const Istio__Mcp__V1alpha1__Metadata *md = x.res[i]->metadata;
    FZ_CHECK(md && md->name[0], "pushed resource %zu has no name", i);
    const char *v = mcp_store_version(store, st.collection, md->name);
    FZ_CHECK(v && strcmp(v, md->version) == 0,
             "pushed %s@%s, the store holds %s", md->name, md->version,
             v ? v : "nothing");
    FZ_CHECK(push_find(&x, md->name) == (int)i, "%s pushed twice", md->name);
  }
  for (size_t i = 0; i < x.nrem; ++i) {
    FZ_CHECK(!mcp_store_version(store, st.collection, x.rem[i]),
             "removed %s, the store holds it", x.rem[i]);
    FZ_CHECK(push_find(&x, x.rem[i]) < 0, "%s both pushed and removed",
             x.rem[i]);
  }
  if (!x.incremental) {
    FZ_CHECK(!x.nrem, "a full-state push lists removals");
    live_ctx c = {.x = &x};
    mcp_store_foreach(store, st.collection, full_cb, &c);
    FZ_CHECK(c.bad == 0 && c.n == x.nres,
             "full-state push of %s: %zu resources, store %zu, first diff %s",
             x.key, x.nres, c.n, c.bad ? c.first : "-");
  }
  FZ_CHECK(w->service != MCP_SERVICE_AGGREGATED || !x.incremental,
           "incremental MeshConfigResponse");
  /* NACKed content is not pushed again. */
  track *t = track_of(w, x.key, 1);
  if (t) {
    if (t->nacked[0] && !retry_covers(w, t->nacked_code)) {
      FZ_CHECK(strcmp(t->nacked, x.version) != 0,
               "%s: %s pushed again after its NACK (code %d)", x.key, x.version,
               t->nacked_code);
    }
    snprintf(t->last_nonce, sizeof(t->last_nonce), "%s", x.nonce);
  }
  snprintf(w->ring[w->nring % NRING], sizeof(w->ring[0]), "%s", x.nonce);
  if (w->nring < NRING) {
    w->nring++;
  }
  fz_push_free(&x);
}

/* One want_write/next. Returns 1 when a message came out, 0 when none,
 * < 0 on an error (the stream was replaced after RESYNC). */
static int produce(world *w) {
  int want = mcp_source_session_want_write(w->s, w->ts);
  FZ_CHECK(want == 0 || want == 1, "want_write %d", want);
  snap sa, sb;
  take_snap(w, &sa);
  uint64_t ev0 = w->ev_push;
  mcp_msg *msg = NULL;
  long fired = w->m.fired;
  int rv = mcp_source_session_next(w->s, w->ts, &msg);
  fz_check_nomem(&w->m, fired, rv, "source_session_next");
  FZ_CHECK(rv == 0 || rv == 1 || rv == MCP_ERR_NOMEM || rv == MCP_ERR_RESYNC,
           "next: %d", rv);
  FZ_CHECK(rv != MCP_ERR_RESYNC || w->service == MCP_SERVICE_AGGREGATED_INCREMENTAL,
           "RESYNC on service %d", (int)w->service);
  if (rv <= 0) {
    FZ_CHECK(!msg, "next set a message and returned %d", rv);
    FZ_CHECK(rv < 0 || !want, "want_write said 1, next produced nothing");
    take_snap(w, &sb);
    same_snap(&sa, &sb, "next");
    if (rv == MCP_ERR_RESYNC) {
      FZ_LOG("next: RESYNC");
      reconnect(w);
    }
    return rv;
  }
  FZ_CHECK(want, "want_write said 0, next produced a message");
  FZ_CHECK(msg, "next returned 1 without a message");
  check_push(w, msg, &sa);
  FZ_CHECK(w->so.on_event == NULL || w->ev_push == ev0 + 1 ||
               strcmp(mcp_msg_collection(msg), MCP_TRIGGER_COLLECTION) == 0,
           "a push without its event");
  mcp_msg_free(msg);
  return 1;
}

/* handle_expiry(): NOMEM only where an allocation failed (a debounced
 * change's record); nothing is lost, a later call does it. 1 when it
 * failed. */
static int expire(world *w) {
  long fired = w->m.fired;
  int rv = mcp_source_session_handle_expiry(w->s, w->ts);
  fz_check_nomem(&w->m, fired, rv, "handle_expiry");
  FZ_CHECK(rv == 0 || rv == MCP_ERR_NOMEM, "handle_expiry: %d (%s)", rv,
           mcp_strerror(rv));
  return rv != 0;
}

static void drain(world *w) {
  int failed = 0;
  if (mcp_source_session_get_expiry(w->s) <= w->ts) {
    failed = expire(w);
  }
  for (int guard = 0;; ++guard) {
    FZ_CHECK(guard < 10000, "drain does not end");
    int rv = produce(w);
    if (rv == 0) {
      break;
    }
    if (rv < 0) {
      failed = 1;
      break;
    }
  }
  if (!failed) {
    mcp_tstamp e = mcp_source_session_get_expiry(w->s);
    FZ_CHECK(e > w->ts,
             "after handle_expiry and draining, expiry %" PRIu64 " <= now %" PRIu64,
             e, w->ts);
  }
}

static void introspect(world *w) {
  size_t n = mcp_source_session_collection_count(w->s);
  for (size_t i = 0; i <= n; ++i) {
    mcp_collection_status st;
    int rv = mcp_source_session_collection_status(w->s, i, w->ts, &st);
    if (i == n) {
      FZ_CHECK(rv == MCP_ERR_NOT_FOUND, "status past the end: %d", rv);
      break;
    }
    FZ_CHECK(rv == 0, "status %zu: %d", i, rv);
    FZ_CHECK(st.collection && st.type_url && st.last_nack_message,
             "status with NULL strings");
    FZ_CHECK(!st.pending_nonce[0] == !st.pending_version[0],
             "pending nonce %s, version %s", st.pending_nonce,
             st.pending_version);
    FZ_CHECK(st.acks + st.nacks <= st.pushes,
             "%s: %" PRIu64 " acks + %" PRIu64 " nacks > %" PRIu64 " pushes",
             st.collection, st.acks, st.nacks, st.pushes);
    FZ_CHECK(w->service == MCP_SERVICE_RESOURCE || st.type_url[0],
             "aggregated subscription without type");
    FZ_CHECK(st.known == 0 || st.known == 1, "known %d", st.known);
    for (size_t k = 0; k < i; ++k) {
      mcp_collection_status o;
      mcp_source_session_collection_status(w->s, k, w->ts, &o);
      const char *a = w->service == MCP_SERVICE_RESOURCE ? o.collection : o.type_url;
      FZ_CHECK(strcmp(a, w->service == MCP_SERVICE_RESOURCE ? st.collection
                                                            : st.type_url) != 0,
               "two subscriptions for one key");
    }
  }
  const mcp_sink_node *node = mcp_source_session_node(w->s);
  FZ_CHECK(node && node->id, "no node");
  FZ_CHECK(strcmp(node->id, mcp_source_session_node_id(w->s)) == 0, "node ids");
  for (size_t i = 0; i < node->nannotations; ++i) {
    volatile size_t l =
        strlen(node->annotations[i].key) + strlen(node->annotations[i].value);
    (void)l;
  }
  (void)mcp_source_session_stale_unknown(w->s);
  /* The stores' collections, as listed. */
  const mcp_store *stores[2] = {w->store, w->alt};
  for (size_t k = 0; k < 2; ++k) {
    size_t nc = mcp_store_collection_count(stores[k]);
    for (size_t i = 0; i < nc; ++i) {
      const char *c = mcp_store_collection_name(stores[k], i);
      FZ_CHECK(c && c[0] && mcp_store_has_collection(stores[k], c),
               "collection %zu of %zu", i, nc);
    }
    FZ_CHECK(!mcp_store_collection_name(stores[k], nc), "a name past the end");
  }
}

/* ---- the script ---- */


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
  uint8_t t = fz_u8(&in), f = fz_u8(&in), setup_fail = fz_u8(&in);

  mcp_store_options o;
  mcp_store_options_default(&o);
  o.mem = &w->m.mem;
  o.rand = fz_rand;
  w->seed = FZ_SRC_SEED;
  o.rand_user_data = &w->seed;
  o.name_rules = (mcp_name_rules)((f >> 4) % 3);
  if (f & 64) {
    o.max_name_len = 16;
    o.max_version_len = 20;
    o.max_resources = 4;
  }
  if (setup_fail & 7) {
    fz_mem_arm(&w->m, setup_fail & 7);
  }
  long fired = w->m.fired;
  int rv = mcp_store_new(&w->store, &o);
  fz_check_nomem(&w->m, fired, rv, "store_new");
  if (rv == 0) {
    o.rand = NULL;
    o.epoch = 0xa17a17a17ULL;
    fired = w->m.fired;
    rv = mcp_store_new(&w->alt, &o);
    fz_check_nomem(&w->m, fired, rv, "store_new");
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
  if (f & 1) {
    w->retry_codes[0] = MCP_CODE_UNAVAILABLE;
    w->retry_codes[1] = MCP_CODE_INVALID_ARGUMENT;
    w->so.nack_retry_codes = w->retry_codes;
    w->so.nnack_retry_codes = 2;
  }
  if (f & 2) {
    w->so.select_store = select_store;
    w->so.select_store_user_data = w;
    if (setup_fail & 128) {
      w->so.store = NULL; /* only sinks named "alt..." are served */
    }
  }
  if (f & 4) {
    w->so.collection_for_type = map_type;
  }
  if (!(f & 8)) {
    w->so.on_event = on_event;
    w->so.user_data = w;
  }
  if (f & 128) {
    w->so.max_collections = 3;
    w->so.max_initial_versions = 4;
    w->so.max_node_annotations = 1;
    w->so.max_node_id_len = 12;
    w->so.max_node_key_len = 6;
    w->so.max_node_value_len = 10;
    w->so.max_node_bytes = 40;
    w->so.max_name_len = 40;
    w->so.max_version_len = 24;
    w->so.request_rate = 5;
    w->so.request_burst = 10;
  }
  FZ_LOG("source: service %d debounce %" PRIu64 " max_delay %" PRIu64
         " retry %" PRIu64 "/%" PRIu64 " trigger %d flags %02x",
         (int)w->service, w->so.debounce, w->so.max_delay,
         w->so.nack_retry_initial, w->so.nack_retry_max, w->so.send_trigger, f);
  if (rv == 0) {
    rv = session_open(w);
  }
  fz_mem_disarm(&w->m);

  while (rv == 0 && in.n) {
    uint8_t op = fz_u8(&in) % SRC_NOPS;
    switch (op) {
    case SRC_RECV_RAW: {
      size_t want = fz_u16(&in) % SCRIPT_RAW_MAX, got;
      const uint8_t *p = fz_take(&in, want, &got);
      feed(w, p, got);
      break;
    }
    case SRC_RECV:
      act_recv(w, &in);
      break;
    case SRC_STORE: {
      uint8_t which = fz_u8(&in);
      mcp_store *st = (which & 1) && (f & 2) ? w->alt : w->store;
      fz_store_op(&in, st, &w->m, w->ts);
      break;
    }
    case SRC_ADVANCE: {
      w->ts += fz_src_advance(fz_u16(&in));
      FZ_LOG("advance to %" PRIu64, w->ts);
      break;
    }
    case SRC_DRAIN:
      FZ_LOG("drain");
      drain(w);
      break;
    case SRC_NEXT:
      produce(w);
      break;
    case SRC_EXPIRY: {
      uint8_t how = fz_u8(&in) % 3;
      mcp_tstamp e = mcp_source_session_get_expiry(w->s);
      if (how == 1 && e != MCP_TSTAMP_MAX && e > w->ts) {
        w->ts = e;
      }
      if (how == 2 || e <= w->ts) {
        FZ_LOG("handle_expiry at %" PRIu64, w->ts);
        (void)expire(w);
      }
      break;
    }
    case SRC_STATUS:
      introspect(w);
      break;
    case SRC_RECONNECT:
      reconnect(w);
      break;
    default: {
      unsigned k = 1 + fz_u8(&in) % 48;
      FZ_LOG("fail allocation +%u", k);
      fz_mem_arm(&w->m, k);
      break;
    }
    }
  }

  fz_mem_disarm(&w->m);
  mcp_source_session_del(w->s);
  mcp_store_del(w->store);
  mcp_store_del(w->alt);
  FZ_CHECK(w->m.live == 0, "%ld blocks leaked", w->m.live);
  free(w);
  return 0;
}
