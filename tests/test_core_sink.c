/*
 * The sink side (docs/protocol.md, "Sink"): initial requests, validation
 * before applying, full-state and incremental application, ACK/NACK
 * answers, synced, journal, introspection, events and the one-session rule.
 *
 * Pushes are built here independently of the core: with protobuf-c for the
 * Resource messages and by hand for the Resources envelope, so that broken
 * resources can be embedded in an otherwise valid message.
 */
#include <check.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"
#include "mcp/v1alpha1/resource.pb-c.h"

typedef Istio__Mcp__V1alpha1__RequestResources Req;

/* ------------------------------------------------------------------ */
/* Byte builder for hand-made Resources                                */
/* ------------------------------------------------------------------ */

typedef struct bb {
  uint8_t *p;
  size_t n, cap;
} bb;

static void bb_put(bb *b, const void *d, size_t n) {
  if (b->n + n + 1 > b->cap) {
    b->cap = (b->n + n + 1) * 2;
    b->p = realloc(b->p, b->cap);
    ck_assert_ptr_nonnull(b->p);
  }
  if (n) {
    memcpy(b->p + b->n, d, n);
  }
  b->n += n;
}

static void bb_varint(bb *b, uint64_t v) {
  uint8_t t[10];
  size_t k = 0;
  while (v >= 0x80) {
    t[k++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  t[k++] = (uint8_t)v;
  bb_put(b, t, k);
}

static void bb_field(bb *b, unsigned f, const void *d, size_t n) {
  bb_varint(b, (uint64_t)f << 3 | 2);
  bb_varint(b, n);
  bb_put(b, d, n);
}

static void bb_str(bb *b, unsigned f, const char *s) {
  if (s && s[0]) {
    bb_field(b, f, s, strlen(s));
  }
}

/* The envelope fields of a Resources message. */
static void bb_push(bb *b, const char *coll, const char *nonce, int incremental,
                    const char *sysver) {
  memset(b, 0, sizeof(*b));
  bb_put(b, "", 0); /* never a NULL buffer, even when empty */
  bb_str(b, 1, sysver);
  bb_str(b, 2, coll);
  bb_str(b, 5, nonce);
  if (incremental) {
    bb_varint(b, 6 << 3 | 0);
    bb_varint(b, 1);
  }
}

/* One resource, described loosely so that broken ones can be made. */
typedef struct rspec {
  const char *name;     /* NULL: no metadata at all */
  const char *version;
  const char *type_url; /* NULL: no body at all */
  const char *body;
  const char *label_key, *label_val;
  int has_ct;
  int64_t ct_seconds;
  int32_t ct_nanos;
} rspec;

static void bb_resource(bb *b, const rspec *r) {
  Istio__Mcp__V1alpha1__Resource res = ISTIO__MCP__V1ALPHA1__RESOURCE__INIT;
  Istio__Mcp__V1alpha1__Metadata md = ISTIO__MCP__V1ALPHA1__METADATA__INIT;
  Istio__Mcp__V1alpha1__Metadata__LabelsEntry le =
      ISTIO__MCP__V1ALPHA1__METADATA__LABELS_ENTRY__INIT;
  Istio__Mcp__V1alpha1__Metadata__LabelsEntry *lp = &le;
  Google__Protobuf__Timestamp ts = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
  Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
  if (r->name) {
    md.name = (char *)r->name;
    md.version = (char *)(r->version ? r->version : "");
    if (r->label_key) {
      le.key = (char *)r->label_key;
      le.value = (char *)r->label_val;
      md.n_labels = 1;
      md.labels = &lp;
    }
    if (r->has_ct) {
      ts.seconds = r->ct_seconds;
      ts.nanos = r->ct_nanos;
      md.create_time = &ts;
    }
    res.metadata = &md;
  }
  if (r->type_url) {
    any.type_url = (char *)r->type_url;
    any.value.data = (uint8_t *)(r->body ? r->body : "");
    any.value.len = r->body ? strlen(r->body) : 0;
    res.body = &any;
  }
  size_t n = istio__mcp__v1alpha1__resource__get_packed_size(&res);
  uint8_t *tmp = malloc(n ? n : 1);
  istio__mcp__v1alpha1__resource__pack(&res, tmp);
  bb_field(b, 3, tmp, n);
  free(tmp);
}

/* A good resource: body = "body-<name>". */
static void bb_good(bb *b, const char *name, const char *version) {
  char body[64] = "body-";
  strncat(body, name, sizeof(body) - 6);
  rspec r = {.name = name, .version = version,
             .type_url = "type.googleapis.com/test.Body", .body = body};
  bb_resource(b, &r);
}

static void bb_removed(bb *b, const char *name) { bb_field(b, 4, name, strlen(name)); }

/* ------------------------------------------------------------------ */
/* What the application sees                                           */
/* ------------------------------------------------------------------ */

#define MAXR 16
#define MAXE 64

typedef struct seen {
  /* apply */
  int napply;
  char coll[64], sysver[64], nonce[32];
  int incremental, complete;
  size_t nres, nremoved;
  char names[MAXR][32], versions[MAXR][32], removed[MAXR][32];
  char type_url[MAXR][64], body[MAXR][64];
  char label[MAXR][64];
  int has_ct[MAXR];
  int64_t ct_seconds[MAXR];
  int32_t ct_nanos[MAXR];
  int reject_code;
  const char *reject_msg;
  /* events */
  int nev;
  mcp_event_type ev_type[MAXE];
  int ev_code[MAXE], ev_synced[MAXE];
  char ev_coll[MAXE][32], ev_nonce[MAXE][24], ev_msg[MAXE][160];
  /* The last event's version and lists, each as "x;y;" (dropped sorted). */
  char ev_version[64], ev_listed[256], ev_removed[256], ev_dropped[256];
} seen;

static void cpy(char *d, size_t n, const char *s) {
  size_t l = s ? strlen(s) : 0;
  ck_assert_uint_lt(l, n);
  memcpy(d, s ? s : "", l);
  d[l] = '\0';
}

static int on_apply(const mcp_change *ch, char *msg, size_t msglen, void *ud) {
  seen *s = ud;
  s->napply++;
  cpy(s->coll, sizeof(s->coll), ch->collection);
  cpy(s->sysver, sizeof(s->sysver), ch->system_version_info);
  cpy(s->nonce, sizeof(s->nonce), ch->nonce);
  s->incremental = ch->incremental;
  s->complete = ch->complete;
  ck_assert_uint_le(ch->nresources, MAXR);
  ck_assert_uint_le(ch->nremoved, MAXR);
  s->nres = ch->nresources;
  s->nremoved = ch->nremoved;
  for (size_t i = 0; i < ch->nresources; ++i) {
    const mcp_resource *r = &ch->resources[i];
    cpy(s->names[i], 32, r->name);
    cpy(s->versions[i], 32, r->version);
    cpy(s->type_url[i], 64, r->type_url);
    ck_assert_uint_lt(r->body_len, 64);
    memcpy(s->body[i], r->body, r->body_len);
    s->body[i][r->body_len] = '\0';
    s->label[i][0] = '\0';
    if (r->nlabels) {
      cpy(s->label[i], 64, r->labels[0].key);
      strcat(s->label[i], "=");
      strncat(s->label[i], r->labels[0].value, 30);
    }
    s->has_ct[i] = r->has_create_time;
    s->ct_seconds[i] = r->create_time_seconds;
    s->ct_nanos[i] = r->create_time_nanos;
  }
  for (size_t i = 0; i < ch->nremoved; ++i) {
    cpy(s->removed[i], 32, ch->removed[i]);
  }
  if (s->reject_code) {
    cpy(msg, msglen, s->reject_msg);
    return s->reject_code;
  }
  return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(a, b); }

static void on_event(const mcp_event *ev, void *ud) {
  seen *s = ud;
  ck_assert_int_lt(s->nev, MAXE);
  s->ev_type[s->nev] = ev->type;
  s->ev_code[s->nev] = ev->code;
  s->ev_synced[s->nev] = ev->synced;
  cpy(s->ev_coll[s->nev], 32, ev->collection);
  cpy(s->ev_nonce[s->nev], 24, ev->nonce);
  cpy(s->ev_msg[s->nev], sizeof(s->ev_msg[0]), ev->message);
  s->nev++;
  cpy(s->ev_version, sizeof(s->ev_version), ev->version);
  s->ev_listed[0] = s->ev_removed[0] = s->ev_dropped[0] = '\0';
  ck_assert_uint_le(ev->nlisted, ev->nresources);
  ck_assert_uint_le(ev->nremoved_listed, ev->nremoved);
  for (size_t i = 0; i < ev->nlisted; ++i) {
    ck_assert_uint_lt(strlen(s->ev_listed) + strlen(ev->resources[i].name) +
                          strlen(ev->resources[i].version) + 3, 256);
    strcat(s->ev_listed, ev->resources[i].name);
    strcat(s->ev_listed, "=");
    strcat(s->ev_listed, ev->resources[i].version);
    strcat(s->ev_listed, ";");
  }
  for (size_t i = 0; i < ev->nremoved_listed; ++i) {
    ck_assert_uint_lt(strlen(s->ev_removed) + strlen(ev->removed[i]) + 2, 256);
    strcat(s->ev_removed, ev->removed[i]);
    strcat(s->ev_removed, ";");
  }
  char d[16][32];
  ck_assert_uint_le(ev->ndropped, 16);
  for (size_t i = 0; i < ev->ndropped; ++i) {
    cpy(d[i], 32, ev->dropped[i]);
  }
  qsort(d, ev->ndropped, sizeof(d[0]), cmp_names);
  for (size_t i = 0; i < ev->ndropped; ++i) {
    strcat(s->ev_dropped, d[i]);
    strcat(s->ev_dropped, ";");
  }
}

/* Index of |name| among the resources / removals apply saw, or -1. */
static int seen_res(const seen *s, const char *name) {
  for (size_t i = 0; i < s->nres; ++i) {
    if (strcmp(s->names[i], name) == 0) {
      return (int)i;
    }
  }
  return -1;
}
static int seen_removed(const seen *s, const char *name) {
  for (size_t i = 0; i < s->nremoved; ++i) {
    if (strcmp(s->removed[i], name) == 0) {
      return (int)i;
    }
  }
  return -1;
}

/* ------------------------------------------------------------------ */
/* Fixture                                                             */
/* ------------------------------------------------------------------ */

static const char *const COLLS[] = {"istio/one", "istio/two"};
static const mcp_kv NODE_ANN[] = {{"region", "eu-1"}, {"zone", "b"}};

typedef struct fx {
  mcp_sink_state *st;
  mcp_sink_session *s;
  seen sn;
  mcp_tstamp ts;
} fx;

static void fx_state(fx *f, int incremental, size_t journal_size) {
  memset(f, 0, sizeof(*f));
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  ck_assert_uint_eq(o.journal_size, 64);
  o.node_id = "sink-7";
  o.node_annotations = NODE_ANN;
  o.nnode_annotations = 2;
  o.collections = COLLS;
  o.ncollections = 2;
  o.incremental = incremental;
  o.apply = on_apply;
  o.on_event = on_event;
  o.user_data = &f->sn;
  if (journal_size) {
    o.journal_size = journal_size;
  }
  ck_assert_int_eq(mcp_sink_state_new(&f->st, &o), 0);
  f->ts = 1000;
}

/* Takes every queued request, decoded, into |out| (at most |max|). */
static size_t take(fx *f, Req **out, size_t max) {
  size_t n = 0;
  for (;;) {
    mcp_msg *msg = NULL;
    int rv = mcp_sink_session_next(f->s, &msg);
    ck_assert_int_ge(rv, 0);
    if (!rv) {
      break;
    }
    ck_assert_uint_lt(n, max);
    out[n] = th_decode_request(msg);
    ck_assert_str_eq(mcp_msg_collection(msg), out[n]->collection);
    mcp_msg_free(msg);
    n++;
  }
  ck_assert_int_eq(mcp_sink_session_want_write(f->s), 0);
  return n;
}

static void free_reqs(Req **r, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    istio__mcp__v1alpha1__request_resources__free_unpacked(r[i], NULL);
  }
}

/* Exactly one queued request. */
static Req *take_one(fx *f) {
  Req *r[4];
  size_t n = take(f, r, 4);
  ck_assert_uint_eq(n, 1);
  return r[0];
}

static void fx_open(fx *f) {
  ck_assert_int_eq(mcp_sink_session_new(&f->s, f->st, f->ts), 0);
}

/* Opens a session and discards its initial requests. */
static void fx_open_drained(fx *f) {
  fx_open(f);
  Req *r[4];
  size_t n = take(f, r, 4);
  ck_assert_uint_eq(n, 2);
  free_reqs(r, n);
}

static void fx_close(fx *f) {
  mcp_sink_session_del(f->s);
  f->s = NULL;
  mcp_sink_state_del(f->st);
  f->st = NULL;
}

static int feed(fx *f, bb *b) {
  f->ts += 10;
  int rv = mcp_sink_session_recv(f->s, b->p, b->n, f->ts);
  free(b->p);
  memset(b, 0, sizeof(*b));
  return rv;
}

static int feed_bytes(fx *f, uint8_t *p, size_t n) {
  f->ts += 10;
  int rv = mcp_sink_session_recv(f->s, p, n, f->ts);
  free(p);
  return rv;
}

/* The answer request: collection, nonce and (0 for an ACK) NACK code. */
static void check_answer(const Req *r, const char *coll, const char *nonce,
                         int code) {
  ck_assert_str_eq(r->collection, coll);
  ck_assert_str_eq(r->response_nonce, nonce);
  ck_assert_uint_eq(r->n_initial_resource_versions, 0);
  if (code) {
    ck_assert_ptr_nonnull(r->error_detail);
    ck_assert_int_eq(r->error_detail->code, code);
    ck_assert_str_ne(r->error_detail->message, "");
  } else {
    ck_assert_ptr_null(r->error_detail);
  }
}

static void expect_answer(fx *f, const char *coll, const char *nonce, int code) {
  Req *r = take_one(f);
  check_answer(r, coll, nonce, code);
  istio__mcp__v1alpha1__request_resources__free_unpacked(r, NULL);
}

/* name=version pairs held in |coll|, sorted, as one string. */
typedef struct held_acc {
  char items[64][64];
  size_t n;
} held_acc;

static void held_cb(const char *name, const char *version, void *ud) {
  held_acc *a = ud;
  ck_assert_uint_lt(a->n, 64);
  ck_assert_uint_lt(strlen(name) + strlen(version) + 2, 64);
  strcpy(a->items[a->n], name);
  strcat(a->items[a->n], "=");
  strcat(a->items[a->n], version);
  a->n++;
}

static int cmp_items(const void *a, const void *b) { return strcmp(a, b); }

static const char *held(const mcp_sink_state *st, const char *coll, char *buf,
                        size_t n) {
  held_acc a;
  a.n = 0;
  mcp_sink_state_foreach(st, coll, held_cb, &a);
  ck_assert_uint_eq(a.n, mcp_sink_state_count(st, coll));
  qsort(a.items, a.n, sizeof(a.items[0]), cmp_items);
  buf[0] = '\0';
  for (size_t i = 0; i < a.n; ++i) {
    ck_assert_uint_lt(strlen(buf) + strlen(a.items[i]) + 2, n);
    strcat(buf, a.items[i]);
    strcat(buf, ";");
  }
  return buf;
}

static mcp_collection_status status_of(const fx *f, const char *coll) {
  mcp_collection_status st;
  for (size_t i = 0; i < mcp_sink_state_collection_count(f->st); ++i) {
    ck_assert_int_eq(mcp_sink_state_collection_status(f->st, i, f->ts, &st), 0);
    if (strcmp(st.collection, coll) == 0) {
      return st;
    }
  }
  ck_abort_msg("no status for %s", coll);
  return st;
}

/* Accepts a full-state push of a, b into COLLS[0] (nonce "1", version
 * "sv-1") and its ACK. */
static void fx_hold_ab(fx *f) {
  bb b;
  bb_push(&b, COLLS[0], "1", 0, "sv-1");
  bb_good(&b, "a", "va1");
  bb_good(&b, "b", "vb1");
  ck_assert_int_eq(feed(f, &b), 0);
  expect_answer(f, COLLS[0], "1", 0);
}

/*
 * Everything a NACK must leave as it was: what is held, the ACKed version
 * and counters, and the application (not called).
 */
typedef struct before {
  char held0[512], held1[512];
  char acked0[512], acked1[512]; /* the statuses' strings last until the
                                    state changes: copied */
  mcp_collection_status st0, st1;
  int napply, synced;
} before;

static void remember(fx *f, before *b) {
  held(f->st, COLLS[0], b->held0, sizeof(b->held0));
  held(f->st, COLLS[1], b->held1, sizeof(b->held1));
  b->st0 = status_of(f, COLLS[0]);
  b->st1 = status_of(f, COLLS[1]);
  snprintf(b->acked0, sizeof(b->acked0), "%s", b->st0.acked_version);
  snprintf(b->acked1, sizeof(b->acked1), "%s", b->st1.acked_version);
  b->st0.acked_version = b->acked0;
  b->st1.acked_version = b->acked1;
  b->st0.last_nack_message = b->st1.last_nack_message = NULL;
  b->napply = f->sn.napply;
  b->synced = mcp_sink_state_synced(f->st);
}

/* Nothing held changed; |npush|/|nnack| are the expected increments of the
 * counters of COLLS[0]. |applied|: the application was consulted. */
static void unchanged(fx *f, const before *b, uint64_t npush, uint64_t nnack,
                      int applied) {
  char h[512];
  ck_assert_str_eq(held(f->st, COLLS[0], h, sizeof(h)), b->held0);
  ck_assert_str_eq(held(f->st, COLLS[1], h, sizeof(h)), b->held1);
  mcp_collection_status s0 = status_of(f, COLLS[0]);
  mcp_collection_status s1 = status_of(f, COLLS[1]);
  ck_assert_str_eq(s0.acked_version, b->st0.acked_version);
  ck_assert_uint_eq(s0.acks, b->st0.acks);
  ck_assert_uint_eq(s0.held, b->st0.held);
  ck_assert_uint_eq(s0.pushes, b->st0.pushes + npush);
  ck_assert_uint_eq(s0.nacks, b->st0.nacks + nnack);
  ck_assert_uint_eq(s1.pushes, b->st1.pushes);
  ck_assert_uint_eq(s1.acks, b->st1.acks);
  ck_assert_uint_eq(s1.nacks, b->st1.nacks);
  ck_assert_str_eq(s1.acked_version, b->st1.acked_version);
  ck_assert_int_eq(f->sn.napply, b->napply + (applied ? 1 : 0));
  ck_assert_int_eq(mcp_sink_state_synced(f->st), b->synced);
}

/* Feeds |b| (a push for COLLS[0]) to a sink holding a, b and expects a
 * NACK INVALID_ARGUMENT with |nonce| that changes nothing held. */
static void expect_invalid(int incremental, bb *b, const char *nonce) {
  fx f;
  fx_state(&f, incremental, 0);
  fx_open_drained(&f);
  fx_hold_ab(&f);
  before bf;
  remember(&f, &bf);
  ck_assert_int_eq(feed(&f, b), 0);
  expect_answer(&f, COLLS[0], nonce, MCP_CODE_INVALID_ARGUMENT);
  unchanged(&f, &bf, 1, 1, 0);
  mcp_collection_status s0 = status_of(&f, COLLS[0]);
  ck_assert_int_eq(s0.last_nack_code, MCP_CODE_INVALID_ARGUMENT);
  ck_assert_str_ne(s0.last_nack_message, "");
  fx_close(&f);
}

/* ------------------------------------------------------------------ */
/* Initial requests                                                    */
/* ------------------------------------------------------------------ */

static void check_initial(const Req *r, const char *coll, int incremental) {
  ck_assert_str_eq(r->collection, coll);
  ck_assert_str_eq(r->response_nonce, "");
  ck_assert_ptr_null(r->error_detail);
  ck_assert_int_eq(r->incremental, incremental);
  ck_assert_ptr_nonnull(r->sink_node);
  ck_assert_str_eq(r->sink_node->id, "sink-7");
  ck_assert_uint_eq(r->sink_node->n_annotations, 2);
  int region = 0, zone = 0;
  for (size_t i = 0; i < r->sink_node->n_annotations; ++i) {
    const char *k = r->sink_node->annotations[i]->key;
    const char *v = r->sink_node->annotations[i]->value;
    if (strcmp(k, "region") == 0) {
      ck_assert_str_eq(v, "eu-1");
      region++;
    } else if (strcmp(k, "zone") == 0) {
      ck_assert_str_eq(v, "b");
      zone++;
    }
  }
  ck_assert_int_eq(region, 1);
  ck_assert_int_eq(zone, 1);
}

START_TEST(initial_requests_one_per_collection_in_order_with_node) {
  for (int inc = 0; inc < 2; ++inc) {
    fx f;
    fx_state(&f, inc, 0);
    ck_assert_int_eq(mcp_sink_state_collection_count(f.st), 2);
    fx_open(&f);
    ck_assert_int_eq(mcp_sink_session_want_write(f.s), 1);
    Req *r[4];
    size_t n = take(&f, r, 4);
    ck_assert_uint_eq(n, 2);
    check_initial(r[0], COLLS[0], inc);
    check_initial(r[1], COLLS[1], inc);
    /* Nothing held yet: no initial versions, incremental or not. */
    ck_assert_uint_eq(r[0]->n_initial_resource_versions, 0);
    ck_assert_uint_eq(r[1]->n_initial_resource_versions, 0);
    free_reqs(r, n);
    fx_close(&f);
  }
}
END_TEST

START_TEST(incremental_resumption_sends_every_version_held) {
  fx f;
  fx_state(&f, 1, 0);
  fx_open_drained(&f);
  fx_hold_ab(&f);
  bb b;
  bb_push(&b, COLLS[1], "2", 0, "sv-2");
  bb_good(&b, "x", "vx");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[1], "2", 0);
  mcp_sink_session_del(f.s);
  f.s = NULL;

  fx_open(&f);
  Req *r[4];
  size_t n = take(&f, r, 4);
  ck_assert_uint_eq(n, 2);
  check_initial(r[0], COLLS[0], 1);
  check_initial(r[1], COLLS[1], 1);
  ck_assert_uint_eq(r[0]->n_initial_resource_versions, 2);
  int a = 0, bv = 0;
  for (size_t i = 0; i < 2; ++i) {
    const char *k = r[0]->initial_resource_versions[i]->key;
    const char *v = r[0]->initial_resource_versions[i]->value;
    if (strcmp(k, "a") == 0) {
      ck_assert_str_eq(v, "va1");
      a++;
    } else if (strcmp(k, "b") == 0) {
      ck_assert_str_eq(v, "vb1");
      bv++;
    }
  }
  ck_assert_int_eq(a, 1);
  ck_assert_int_eq(bv, 1);
  ck_assert_uint_eq(r[1]->n_initial_resource_versions, 1);
  ck_assert_str_eq(r[1]->initial_resource_versions[0]->key, "x");
  ck_assert_str_eq(r[1]->initial_resource_versions[0]->value, "vx");
  free_reqs(r, n);
  /* The journal records how many versions each request carried. */
  size_t jn = mcp_sink_state_journal_count(f.st);
  mcp_journal_entry e;
  ck_assert_int_eq(mcp_sink_state_journal_entry(f.st, jn - 2, &e), 0);
  ck_assert_int_eq(e.kind, MCP_EVENT_REQUEST);
  ck_assert_str_eq(e.collection, COLLS[0]);
  ck_assert_uint_eq(e.ninitial, 2);
  ck_assert_int_eq(mcp_sink_state_journal_entry(f.st, jn - 1, &e), 0);
  ck_assert_str_eq(e.collection, COLLS[1]);
  ck_assert_uint_eq(e.ninitial, 1);
  fx_close(&f);
}
END_TEST

START_TEST(non_incremental_resumption_sends_no_versions) {
  fx f;
  fx_state(&f, 0, 0);
  fx_open_drained(&f);
  fx_hold_ab(&f);
  ck_assert_uint_eq(mcp_sink_state_count(f.st, COLLS[0]), 2);
  mcp_sink_session_del(f.s);
  fx_open(&f);
  Req *r[4];
  size_t n = take(&f, r, 4);
  ck_assert_uint_eq(n, 2);
  check_initial(r[0], COLLS[0], 0);
  check_initial(r[1], COLLS[1], 0);
  ck_assert_uint_eq(r[0]->n_initial_resource_versions, 0);
  ck_assert_uint_eq(r[1]->n_initial_resource_versions, 0);
  free_reqs(r, n);
  mcp_journal_entry e;
  ck_assert_int_eq(mcp_sink_state_journal_entry(
                       f.st, mcp_sink_state_journal_count(f.st) - 2, &e), 0);
  ck_assert_uint_eq(e.ninitial, 0);
  fx_close(&f);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Applying                                                            */
/* ------------------------------------------------------------------ */

START_TEST(full_state_replaces_content_and_reports_removed_names) {
  fx f;
  fx_state(&f, 0, 0);
  fx_open_drained(&f);
  bb b;
  bb_push(&b, COLLS[0], "1", 0, "sv-1");
  bb_good(&b, "a", "va1");
  bb_good(&b, "b", "vb1");
  bb_good(&b, "c", "vc1");
  ck_assert_int_eq(feed(&f, &b), 0);
  ck_assert_int_eq(f.sn.napply, 1);
  ck_assert_uint_eq(f.sn.nremoved, 0);
  ck_assert_uint_eq(f.sn.nres, 3);
  expect_answer(&f, COLLS[0], "1", 0);

  /* b changes, c disappears, d appears. */
  bb_push(&b, COLLS[0], "2", 0, "sv-2");
  bb_good(&b, "a", "va1");
  bb_good(&b, "b", "vb2");
  bb_good(&b, "d", "vd1");
  ck_assert_int_eq(feed(&f, &b), 0);
  ck_assert_int_eq(f.sn.napply, 2);
  ck_assert_str_eq(f.sn.coll, COLLS[0]);
  ck_assert_str_eq(f.sn.nonce, "2");
  ck_assert_str_eq(f.sn.sysver, "sv-2");
  ck_assert_int_eq(f.sn.incremental, 0);
  ck_assert_uint_eq(f.sn.nres, 3);
  ck_assert_int_ge(seen_res(&f.sn, "a"), 0);
  ck_assert_int_ge(seen_res(&f.sn, "b"), 0);
  ck_assert_int_ge(seen_res(&f.sn, "d"), 0);
  ck_assert_str_eq(f.sn.versions[seen_res(&f.sn, "b")], "vb2");
  ck_assert_uint_eq(f.sn.nremoved, 1);
  ck_assert_str_eq(f.sn.removed[0], "c");
  expect_answer(&f, COLLS[0], "2", 0);
  char h[512];
  ck_assert_str_eq(held(f.st, COLLS[0], h, sizeof(h)), "a=va1;b=vb2;d=vd1;");
  ck_assert_ptr_null(mcp_sink_state_version(f.st, COLLS[0], "c"));
  ck_assert_str_eq(mcp_sink_state_version(f.st, COLLS[0], "b"), "vb2");

  /* An empty full state removes everything. */
  bb_push(&b, COLLS[0], "3", 0, "sv-3");
  ck_assert_int_eq(feed(&f, &b), 0);
  ck_assert_uint_eq(f.sn.nres, 0);
  ck_assert_uint_eq(f.sn.nremoved, 3);
  ck_assert_int_ge(seen_removed(&f.sn, "a"), 0);
  ck_assert_int_ge(seen_removed(&f.sn, "b"), 0);
  ck_assert_int_ge(seen_removed(&f.sn, "d"), 0);
  expect_answer(&f, COLLS[0], "3", 0);
  ck_assert_uint_eq(mcp_sink_state_count(f.st, COLLS[0]), 0);
  /* The other collection was never touched. */
  ck_assert_uint_eq(mcp_sink_state_count(f.st, COLLS[1]), 0);
  fx_close(&f);
}
END_TEST

START_TEST(apply_sees_every_field_of_the_resources) {
  fx f;
  fx_state(&f, 0, 0);
  fx_open_drained(&f);
  bb b;
  bb_push(&b, COLLS[1], "9", 0, "sv-9");
  rspec r = {.name = "ns/x", .version = "v-x", .type_url = "type.example/X",
             .body = "payload", .label_key = "app", .label_val = "web",
             .has_ct = 1, .ct_seconds = 1700000000, .ct_nanos = 5};
  bb_resource(&b, &r);
  ck_assert_int_eq(feed(&f, &b), 0);
  ck_assert_int_eq(f.sn.napply, 1);
  ck_assert_str_eq(f.sn.coll, COLLS[1]);
  ck_assert_uint_eq(f.sn.nres, 1);
  ck_assert_str_eq(f.sn.names[0], "ns/x");
  ck_assert_str_eq(f.sn.versions[0], "v-x");
  ck_assert_str_eq(f.sn.type_url[0], "type.example/X");
  ck_assert_str_eq(f.sn.body[0], "payload");
  ck_assert_str_eq(f.sn.label[0], "app=web");
  ck_assert_int_eq(f.sn.has_ct[0], 1);
  ck_assert_int_eq(f.sn.ct_seconds[0], 1700000000);
  ck_assert_int_eq(f.sn.ct_nanos[0], 5);
  expect_answer(&f, COLLS[1], "9", 0);
  ck_assert_str_eq(mcp_sink_state_version(f.st, COLLS[1], "ns/x"), "v-x");
  fx_close(&f);
}
END_TEST

START_TEST(full_state_ignores_removed_resources) {
  fx f;
  fx_state(&f, 1, 0);
  fx_open_drained(&f);
  fx_hold_ab(&f);
  /* A full state listing "a" both as a resource and as removed, and
   * removing "b" (which it does not list: so b goes, being absent). */
  bb b;
  bb_push(&b, COLLS[0], "2", 0, "sv-2");
  bb_good(&b, "a", "va2");
  bb_removed(&b, "a");
  bb_removed(&b, "zzz");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[0], "2", 0);
  ck_assert_uint_eq(f.sn.nremoved, 1);
  ck_assert_str_eq(f.sn.removed[0], "b");
  char h[512];
  ck_assert_str_eq(held(f.st, COLLS[0], h, sizeof(h)), "a=va2;");
  fx_close(&f);
}
END_TEST

START_TEST(incremental_adds_updates_and_removes) {
  fx f;
  fx_state(&f, 1, 0);
  fx_open_drained(&f);
  fx_hold_ab(&f); /* a=va1, b=vb1 */
  bb b;
  bb_push(&b, COLLS[0], "2", 1, "sv-2");
  bb_good(&b, "a", "va2"); /* update */
  bb_good(&b, "c", "vc1"); /* add */
  bb_removed(&b, "b");     /* remove */
  ck_assert_int_eq(feed(&f, &b), 0);
  ck_assert_int_eq(f.sn.incremental, 1);
  ck_assert_uint_eq(f.sn.nres, 2);
  ck_assert_uint_eq(f.sn.nremoved, 1);
  ck_assert_str_eq(f.sn.removed[0], "b");
  expect_answer(&f, COLLS[0], "2", 0);
  char h[512];
  ck_assert_str_eq(held(f.st, COLLS[0], h, sizeof(h)), "a=va2;c=vc1;");

  /* An empty incremental push changes nothing and is ACKed. */
  bb_push(&b, COLLS[0], "3", 1, "sv-3");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[0], "3", 0);
  ck_assert_str_eq(held(f.st, COLLS[0], h, sizeof(h)), "a=va2;c=vc1;");
  ck_assert_str_eq(status_of(&f, COLLS[0]).acked_version, "sv-3");

  /* Only removals. */
  bb_push(&b, COLLS[0], "4", 1, "sv-4");
  bb_removed(&b, "a");
  bb_removed(&b, "c");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[0], "4", 0);
  ck_assert_uint_eq(mcp_sink_state_count(f.st, COLLS[0]), 0);
  fx_close(&f);
}
END_TEST

START_TEST(incremental_removal_of_a_name_not_held_is_accepted) {
  fx f;
  fx_state(&f, 1, 0);
  fx_open_drained(&f);
  fx_hold_ab(&f);
  bb b;
  bb_push(&b, COLLS[0], "2", 1, "sv-2");
  bb_removed(&b, "never-held");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[0], "2", 0);
  char h[512];
  ck_assert_str_eq(held(f.st, COLLS[0], h, sizeof(h)), "a=va1;b=vb1;");
  fx_close(&f);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Answers                                                             */
/* ------------------------------------------------------------------ */

START_TEST(ack_echoes_nonce_collection_node_and_incremental_flag) {
  for (int inc = 0; inc < 2; ++inc) {
    fx f;
    fx_state(&f, inc, 0);
    fx_open_drained(&f);
    bb b;
    bb_push(&b, COLLS[1], "17", 0, "sv-17");
    bb_good(&b, "a", "v");
    ck_assert_int_eq(feed(&f, &b), 0);
    Req *r = take_one(&f);
    check_answer(r, COLLS[1], "17", 0);
    ck_assert_ptr_nonnull(r->sink_node);
    ck_assert_str_eq(r->sink_node->id, "sink-7");
    ck_assert_uint_eq(r->sink_node->n_annotations, 2);
    ck_assert_int_eq(r->incremental, inc);
    istio__mcp__v1alpha1__request_resources__free_unpacked(r, NULL);
    /* A NACK carries them too. */
    bb_push(&b, COLLS[0], "18", 0, "sv-18");
    bb_good(&b, "a", "v");
    bb_good(&b, "a", "v");
    ck_assert_int_eq(feed(&f, &b), 0);
    r = take_one(&f);
    check_answer(r, COLLS[0], "18", MCP_CODE_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(r->sink_node);
    ck_assert_str_eq(r->sink_node->id, "sink-7");
    ck_assert_int_eq(r->incremental, inc);
    istio__mcp__v1alpha1__request_resources__free_unpacked(r, NULL);
    fx_close(&f);
  }
}
END_TEST

START_TEST(newest_answer_per_collection_wins) {
  fx f;
  fx_state(&f, 0, 0);
  fx_open_drained(&f);
  bb b;
  bb_push(&b, COLLS[0], "1", 0, "sv-1");
  bb_good(&b, "a", "v1");
  ck_assert_int_eq(feed(&f, &b), 0);
  bb_push(&b, COLLS[1], "2", 0, "sv-2");
  bb_good(&b, "x", "v1");
  ck_assert_int_eq(feed(&f, &b), 0);
  /* A second push of COLLS[0] before the first answer went out; this one
   * is NACKed: only its NACK goes out. */
  bb_push(&b, COLLS[0], "3", 0, "sv-3");
  bb_good(&b, "a", "v2");
  bb_good(&b, "a", "v2");
  ck_assert_int_eq(feed(&f, &b), 0);
  /* And a third, accepted: only its ACK goes out. */
  bb_push(&b, COLLS[0], "4", 0, "sv-4");
  bb_good(&b, "a", "v4");
  ck_assert_int_eq(feed(&f, &b), 0);
  Req *r[8];
  size_t n = take(&f, r, 8);
  ck_assert_uint_eq(n, 2);
  int one = 0, two = 0;
  for (size_t i = 0; i < n; ++i) {
    if (strcmp(r[i]->collection, COLLS[0]) == 0) {
      check_answer(r[i], COLLS[0], "4", 0);
      one++;
    } else {
      check_answer(r[i], COLLS[1], "2", 0);
      two++;
    }
  }
  ck_assert_int_eq(one, 1);
  ck_assert_int_eq(two, 1);
  free_reqs(r, n);
  ck_assert_str_eq(mcp_sink_state_version(f.st, COLLS[0], "a"), "v4");
  /* The journal shows only what was sent. */
  size_t jn = mcp_sink_state_journal_count(f.st);
  ck_assert_uint_eq(jn, 4); /* two initial requests, two answers */
  fx_close(&f);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Validation                                                          */
/* ------------------------------------------------------------------ */

START_TEST(nack_name_listed_twice) {
  for (int inc = 0; inc < 2; ++inc) {
    bb b;
    bb_push(&b, COLLS[0], "5", inc, "sv-5");
    bb_good(&b, "n", "v1");
    bb_good(&b, "m", "v1");
    bb_good(&b, "n", "v2");
    expect_invalid(inc, &b, "5");
  }
}
END_TEST

START_TEST(nack_name_both_updated_and_removed) {
  bb b;
  bb_push(&b, COLLS[0], "5", 1, "sv-5");
  bb_good(&b, "c", "v1");
  bb_good(&b, "a", "v9");
  bb_removed(&b, "a");
  expect_invalid(1, &b, "5");
}
END_TEST

START_TEST(nack_incremental_push_when_not_asked) {
  bb b;
  bb_push(&b, COLLS[0], "5", 1, "sv-5");
  bb_good(&b, "c", "v1");
  expect_invalid(0, &b, "5");
}
END_TEST

START_TEST(nack_resource_that_does_not_decode_echoes_nonce) {
  for (int inc = 0; inc < 2; ++inc) {
    bb b;
    bb_push(&b, COLLS[0], "77", inc, "sv-77");
    bb_good(&b, "c", "v1");
    /* metadata field claiming 5 bytes with 1 present */
    static const uint8_t garbage[] = {0x0a, 0x05, 0x01};
    bb_field(&b, 3, garbage, sizeof(garbage));
    expect_invalid(inc, &b, "77");
    bb_push(&b, COLLS[0], "78", inc, "sv-78");
    static const uint8_t garbage2[] = {0xff, 0xff, 0xff};
    bb_field(&b, 3, garbage2, sizeof(garbage2));
    expect_invalid(inc, &b, "78");
  }
}
END_TEST

START_TEST(nack_resource_without_name) {
  bb b;
  rspec noname = {.name = "", .version = "v", .type_url = "t/x", .body = "b"};
  bb_push(&b, COLLS[0], "5", 0, "sv-5");
  bb_resource(&b, &noname);
  expect_invalid(0, &b, "5");
  rspec nometa = {.name = NULL, .type_url = "t/x", .body = "b"};
  bb_push(&b, COLLS[0], "6", 1, "sv-6");
  bb_resource(&b, &nometa);
  expect_invalid(1, &b, "6");
}
END_TEST

START_TEST(nack_resource_without_body_type) {
  bb b;
  rspec nobody = {.name = "c", .version = "v"};
  bb_push(&b, COLLS[0], "5", 0, "sv-5");
  bb_resource(&b, &nobody);
  expect_invalid(0, &b, "5");
  rspec notype = {.name = "c", .version = "v", .type_url = "", .body = "xx"};
  bb_push(&b, COLLS[0], "6", 1, "sv-6");
  bb_resource(&b, &notype);
  expect_invalid(1, &b, "6");
}
END_TEST

START_TEST(nack_string_not_utf8) {
  bb b;
  rspec badname = {.name = "c\xff", .version = "v", .type_url = "t/x", .body = "b"};
  bb_push(&b, COLLS[0], "5", 0, "sv-5");
  bb_resource(&b, &badname);
  expect_invalid(0, &b, "5");
  rspec badver = {.name = "c", .version = "v\xc3", .type_url = "t/x", .body = "b"};
  bb_push(&b, COLLS[0], "6", 0, "sv-6");
  bb_resource(&b, &badver);
  expect_invalid(0, &b, "6");
  rspec badlabel = {.name = "c", .version = "v", .type_url = "t/x", .body = "b",
                    .label_key = "k", .label_val = "\xed\xa0\x80"};
  bb_push(&b, COLLS[0], "7", 0, "sv-7");
  bb_resource(&b, &badlabel);
  expect_invalid(0, &b, "7");
  rspec badtype = {.name = "c", .version = "v", .type_url = "t/\xc0\xaf", .body = "b"};
  bb_push(&b, COLLS[0], "8", 0, "sv-8");
  bb_resource(&b, &badtype);
  expect_invalid(0, &b, "8");
  /* A removed name that is not UTF-8 (incremental). */
  bb_push(&b, COLLS[0], "9", 1, "sv-9");
  bb_good(&b, "c", "v");
  bb_removed(&b, "a\xfe");
  expect_invalid(1, &b, "9");
}
END_TEST

START_TEST(nack_create_time_nanos_out_of_range) {
  bb b;
  rspec neg = {.name = "c", .version = "v", .type_url = "t/x", .body = "b",
               .has_ct = 1, .ct_seconds = 1, .ct_nanos = -1};
  bb_push(&b, COLLS[0], "5", 0, "sv-5");
  bb_resource(&b, &neg);
  expect_invalid(0, &b, "5");
  rspec big = {.name = "c", .version = "v", .type_url = "t/x", .body = "b",
               .has_ct = 1, .ct_seconds = 1, .ct_nanos = 1000000000};
  bb_push(&b, COLLS[0], "6", 1, "sv-6");
  bb_resource(&b, &big);
  expect_invalid(1, &b, "6");
}
END_TEST

START_TEST(nack_unrequested_collection_unimplemented_echoes_nonce) {
  fx f;
  fx_state(&f, 1, 0);
  fx_open_drained(&f);
  fx_hold_ab(&f);
  before bf;
  remember(&f, &bf);
  bb b;
  bb_push(&b, "istio/other", "42", 0, "sv-42");
  bb_good(&b, "a", "v");
  ck_assert_int_eq(feed(&f, &b), 0);
  Req *r = take_one(&f);
  check_answer(r, "istio/other", "42", MCP_CODE_UNIMPLEMENTED);
  ck_assert_str_eq(r->error_detail->message, "unsupported collection");
  ck_assert_str_eq(r->sink_node->id, "sink-7");
  istio__mcp__v1alpha1__request_resources__free_unpacked(r, NULL);
  unchanged(&f, &bf, 0, 0, 0);
  ck_assert_uint_eq(mcp_sink_state_count(f.st, "istio/other"), 0);
  /* Journaled as a NACK. */
  mcp_journal_entry e;
  ck_assert_int_eq(mcp_sink_state_journal_entry(
                       f.st, mcp_sink_state_journal_count(f.st) - 1, &e), 0);
  ck_assert_int_eq(e.kind, MCP_EVENT_NACK);
  ck_assert_int_eq(e.code, MCP_CODE_UNIMPLEMENTED);
  ck_assert_str_eq(e.collection, "istio/other");
  ck_assert_str_eq(e.nonce, "42");
  ck_assert_str_eq(e.message, "unsupported collection");
  fx_close(&f);
}
END_TEST

/* NACKs of unrequested collections queue up to 64, are answered in order,
 * and the queue works again once drained; a source that sends more before
 * reading them ends the stream (LIMIT). */
START_TEST(nack_queue_of_unrequested_collections_is_bounded_and_reusable) {
  fx f;
  fx_state(&f, 1, 0);
  fx_open_drained(&f);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 64; ++i) {
      char nonce[16];
      snprintf(nonce, sizeof(nonce), "%d", round * 100 + i);
      bb b;
      bb_push(&b, "istio/other", nonce, 0, "sv");
      f.sn.nev = 0; /* events are not what this test reads */
      ck_assert_int_eq(feed(&f, &b), 0);
    }
    if (round == 0) {
      bb b;
      bb_push(&b, "istio/other", "65", 0, "sv");
      ck_assert_int_eq(feed(&f, &b), MCP_ERR_LIMIT);
    }
    Req *r[64];
    ck_assert_uint_eq(take(&f, r, 64), 64);
    for (int i = 0; i < 64; ++i) {
      char nonce[16];
      snprintf(nonce, sizeof(nonce), "%d", round * 100 + i);
      check_answer(r[i], "istio/other", nonce, MCP_CODE_UNIMPLEMENTED);
    }
    free_reqs(r, 64);
  }
  fx_close(&f);
}
END_TEST

START_TEST(nack_trigger_collection_with_empty_nonce) {
  static const char *const trig[] = {MCP_TRIGGER_COLLECTION, ""};
  for (int k = 0; k < 2; ++k) {
    fx f;
    fx_state(&f, 0, 0);
    fx_open_drained(&f);
    before bf;
    remember(&f, &bf);
    bb b;
    bb_push(&b, trig[k], "", 0, "");
    ck_assert_int_eq(feed(&f, &b), 0);
    Req *r = take_one(&f);
    check_answer(r, trig[k], "", MCP_CODE_UNIMPLEMENTED);
    ck_assert_str_eq(r->error_detail->message, "unsupported collection");
    istio__mcp__v1alpha1__request_resources__free_unpacked(r, NULL);
    unchanged(&f, &bf, 0, 0, 0);
    ck_assert_int_eq(f.sn.nev, 1); /* both forms: the trigger */
    ck_assert_int_eq(f.sn.ev_type[0], MCP_EVENT_TRIGGER_IGNORED);
    fx_close(&f);
  }
}
END_TEST

/* The events give the message as it was received, on an ACK and on a
 * NACK alike; a full state's computed drops come apart (dropped). */
START_TEST(events_list_what_the_message_carried_and_drops_apart) {
  fx f;
  fx_state(&f, 0, 0);
  fx_open_drained(&f);
  fx_hold_ab(&f);
  ck_assert_str_eq(f.sn.ev_listed, "a=va1;b=vb1;");
  ck_assert_str_eq(f.sn.ev_dropped, "");
  /* Full state without b: ACKed, b dropped, nothing removed by the
   * message (its removed_resources, ignored, are still listed). */
  bb b;
  bb_push(&b, COLLS[0], "2", 0, "sv-2");
  bb_good(&b, "a", "va2");
  bb_removed(&b, "zzz");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[0], "2", 0);
  ck_assert_int_eq(f.sn.ev_type[f.sn.nev - 1], MCP_EVENT_ACK);
  ck_assert_str_eq(f.sn.ev_version, "sv-2");
  ck_assert_str_eq(f.sn.ev_listed, "a=va2;");
  ck_assert_str_eq(f.sn.ev_removed, "zzz;");
  ck_assert_str_eq(f.sn.ev_dropped, "b;");
  /* A NACK decided by the core (incremental not asked for): the same. */
  bb_push(&b, COLLS[0], "3", 1, "sv-3");
  bb_good(&b, "c", "vc3");
  bb_good(&b, "d", "vd3");
  bb_removed(&b, "a");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[0], "3", MCP_CODE_INVALID_ARGUMENT);
  ck_assert_int_eq(f.sn.ev_type[f.sn.nev - 1], MCP_EVENT_NACK);
  ck_assert_str_eq(f.sn.ev_version, "sv-3");
  ck_assert_str_eq(f.sn.ev_listed, "c=vc3;d=vd3;");
  ck_assert_str_eq(f.sn.ev_removed, "a;");
  ck_assert_str_eq(f.sn.ev_dropped, "");
  /* A resource that does not decode: every other one is listed. */
  bb_push(&b, COLLS[0], "4", 0, "sv-4");
  bb_good(&b, "e", "ve4");
  bb_field(&b, 3, "\x0a\x05" "ab", 4); /* a metadata cut short */
  bb_good(&b, "e2", "ve4");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[0], "4", MCP_CODE_INVALID_ARGUMENT);
  ck_assert_str_eq(f.sn.ev_version, "sv-4");
  ck_assert_str_eq(f.sn.ev_listed, "e=ve4;e2=ve4;");
  ck_assert_str_eq(f.sn.ev_msg[f.sn.nev - 1], "resource 1 does not decode");
  /* Rejected by the application: everything listed, nothing dropped. */
  f.sn.reject_code = MCP_CODE_FAILED_PRECONDITION;
  f.sn.reject_msg = "no";
  bb_push(&b, COLLS[0], "5", 0, "sv-5");
  bb_good(&b, "f", "vf5");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[0], "5", MCP_CODE_FAILED_PRECONDITION);
  ck_assert_str_eq(f.sn.ev_listed, "f=vf5;");
  ck_assert_str_eq(f.sn.ev_dropped, "");
  /* An unrequested collection: its version and resources too. */
  bb_push(&b, "istio/other", "6", 0, "sv-6");
  bb_good(&b, "g", "vg6");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, "istio/other", "6", MCP_CODE_UNIMPLEMENTED);
  ck_assert_int_eq(f.sn.ev_type[f.sn.nev - 1], MCP_EVENT_NACK);
  ck_assert_str_eq(f.sn.ev_version, "sv-6");
  ck_assert_str_eq(f.sn.ev_listed, "g=vg6;");
  fx_close(&f);
}
END_TEST

/* Feeds |b| (a push of COLLS[0]) and expects its NACK, INVALID_ARGUMENT
 * with |msg| (NULL: any), whose event lists |listed|. */
static void expect_nack_listing(fx *f, bb *b, const char *nonce,
                                const char *listed, const char *msg) {
  ck_assert_int_eq(feed(f, b), 0);
  expect_answer(f, COLLS[0], nonce, MCP_CODE_INVALID_ARGUMENT);
  ck_assert_int_eq(f->sn.ev_type[f->sn.nev - 1], MCP_EVENT_NACK);
  ck_assert_str_eq(f->sn.ev_listed, listed);
  if (msg) {
    ck_assert_str_eq(f->sn.ev_msg[f->sn.nev - 1], msg);
  }
}

/* Issue 24 item 11: a NACK lists every resource the message carried, the
 * duplicate and what follows it included (a@2, a@3, b@1 listed only a@2),
 * and those failing any other check; the NACK names the first problem. */
START_TEST(nack_lists_every_resource_duplicates_included) {
  for (int inc = 0; inc < 2; ++inc) {
    fx f;
    fx_state(&f, inc, 0);
    fx_open_drained(&f);
    before bf;
    remember(&f, &bf);
    bb b;
    bb_push(&b, COLLS[0], "1", inc, "sv-1");
    bb_good(&b, "a", "2");
    bb_good(&b, "a", "3");
    bb_good(&b, "b", "1");
    expect_nack_listing(&f, &b, "1", "a=2;a=3;b=1;",
                        "resource a is listed twice");
    unchanged(&f, &bf, 1, 1, 0);
    /* Not UTF-8, unnamed, untyped, a bad time: all but the first are
     * listed (a string that is not UTF-8 cannot be shown). */
    rspec noname = {.name = "", .version = "v", .type_url = "t/x", .body = "b"};
    rspec notype = {.name = "c", .version = "v"};
    rspec badtime = {.name = "d", .version = "v", .type_url = "t/x",
                     .body = "b", .has_ct = 1, .ct_nanos = -1};
    rspec bad8 = {.name = "f\xff", .version = "v", .type_url = "t/x",
                  .body = "b"};
    bb_push(&b, COLLS[0], "2", inc, "sv-2");
    bb_resource(&b, &bad8);
    bb_resource(&b, &noname);
    bb_resource(&b, &notype);
    bb_resource(&b, &badtime);
    bb_good(&b, "g", "1");
    expect_nack_listing(&f, &b, "2", "=v;c=v;d=v;g=1;",
                        "resource 0 has a string that is not UTF-8");
    fx_close(&f);
  }
}
END_TEST

/* Only what cannot be shown is left out of a NACK's list: a body type,
 * label or version that is not UTF-8; a name the rules refuse is listed,
 * and a later problem never replaces the first one's message. Removed
 * names are listed in an incremental NACK as well. */
START_TEST(nack_lists_leave_out_only_what_cannot_be_shown) {
  fx f;
  fx_state(&f, 1, 0);
  fx_open_drained(&f);
  before bf;
  remember(&f, &bf);
  bb b;
  rspec badtype = {.name = "h1", .version = "v", .type_url = "t/\xc0\xaf",
                   .body = "b"};
  rspec badlabel = {.name = "h2", .version = "v", .type_url = "t/x",
                    .body = "b", .label_key = "k", .label_val = "\xed\xa0\x80"};
  rspec badver = {.name = "h3", .version = "v\xc3", .type_url = "t/x",
                  .body = "b"};
  rspec badrule = {.name = "a//b", .version = "v", .type_url = "t/x",
                   .body = "b"};
  bb_push(&b, COLLS[0], "1", 0, "sv-1");
  bb_resource(&b, &badtype);
  bb_resource(&b, &badlabel);
  bb_resource(&b, &badver);
  bb_resource(&b, &badrule);
  bb_good(&b, "g", "1");
  expect_nack_listing(&f, &b, "1", "a//b=v;g=1;",
                      "resource h1 has no body type");
  /* The name rule first: its message, every resource listed. */
  bb_push(&b, COLLS[0], "2", 0, "sv-2");
  bb_resource(&b, &badrule);
  bb_good(&b, "g", "1");
  bb_good(&b, "g", "2");
  expect_nack_listing(&f, &b, "2", "a//b=v;g=1;g=2;", NULL);
  ck_assert_msg(strstr(f.sn.ev_msg[f.sn.nev - 1], "a//b") != NULL, "%s",
                f.sn.ev_msg[f.sn.nev - 1]);
  /* Incremental: a removed name that is not UTF-8 is left out, the others
   * and every resource are listed; then updated and removed at once. */
  bb_push(&b, COLLS[0], "3", 1, "sv-3");
  bb_good(&b, "c", "1");
  bb_good(&b, "d", "1");
  bb_removed(&b, "e");
  bb_removed(&b, "x\xfe");
  expect_nack_listing(&f, &b, "3", "c=1;d=1;", "removed name 1 is not UTF-8");
  ck_assert_str_eq(f.sn.ev_removed, "e;");
  bb_push(&b, COLLS[0], "4", 1, "sv-4");
  bb_good(&b, "c", "1");
  bb_good(&b, "d", "1");
  bb_removed(&b, "c");
  expect_nack_listing(&f, &b, "4", "c=1;d=1;",
                      "resource c is both updated and removed");
  ck_assert_str_eq(f.sn.ev_removed, "c;");
  unchanged(&f, &bf, 4, 4, 0);
  fx_close(&f);
}
END_TEST

/* A sink whose every allocation |m| counts (and can fail), its session
 * open and its initial requests taken. */
static void counted_sink(th_mem *m, mcp_sink_state **st, mcp_sink_session **s) {
  th_mem_init(m, 0);
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.collections = COLLS;
  o.ncollections = 2;
  o.mem = &m->mem;
  ck_assert_int_eq(mcp_sink_state_new(st, &o), 0);
  ck_assert_int_eq(mcp_sink_session_new(s, *st, 1), 0);
  mcp_msg *msg;
  while (mcp_sink_session_next(*s, &msg) == 1)
    mcp_msg_free(msg);
}

/* Receives |b| (in two fragments cut at |cut|; 0: one buffer) with the
 * k-th allocation of the receive failing, then frees |b|. Returns whether
 * that allocation came (else the receive needed fewer than k). */
static int recv_failing(th_mem *m, long k, mcp_sink_session *s, bb *b,
                        size_t cut, int *rv) {
  m->fail_at = m->count + k;
  if (cut) {
    mcp_iovec iov[2] = {{b->p, cut}, {b->p + cut, b->n - cut}};
    *rv = mcp_sink_session_recv_iov(s, iov, 2, 2);
  } else {
    *rv = mcp_sink_session_recv(s, b->p, b->n, 2);
  }
  int failed = m->failed;
  m->fail_at = 0;
  free(b->p);
  return failed;
}

/* counted_sink()'s end: everything it allocated is freed. */
static void counted_sink_del(th_mem *m, mcp_sink_state *st,
                             mcp_sink_session *s) {
  mcp_sink_session_del(s);
  mcp_sink_state_del(st);
  ck_assert_int_eq(m->live, 0);
}

/* The same NACK under every allocation failure of its receive: NOMEM and
 * nothing leaked (the hidden resources' marks included), or the NACK. */
START_TEST(nack_lists_survive_every_allocation_failure) {
  long k;
  for (k = 1;; ++k) {
    th_mem m;
    mcp_sink_state *st;
    mcp_sink_session *s;
    counted_sink(&m, &st, &s);
    bb b;
    bb_push(&b, COLLS[0], "1", 0, "sv-1");
    bb_good(&b, "a", "2");
    bb_field(&b, 3, "\x0a\x05" "ab", 4); /* does not decode */
    rspec bad8 = {.name = "f\xff", .version = "v", .type_url = "t/x",
                  .body = "b"};
    bb_resource(&b, &bad8);
    bb_good(&b, "a", "3");
    int rv;
    int failed = recv_failing(&m, k, s, &b, 0, &rv);
    ck_assert_int_eq(rv, failed ? MCP_ERR_NOMEM : 0);
    counted_sink_del(&m, st, s);
    if (!failed)
      break;
  }
  ck_assert_int_gt(k, 1); /* the receive allocates: failures were tried */
}
END_TEST

/* Istio's trigger is expected: answered with the NACK Istio's sources
 * wait for, but reported as the trigger, not as a rejection. */
START_TEST(trigger_collection_is_reported_as_the_trigger_not_a_nack) {
  fx f;
  fx_state(&f, 0, 0);
  fx_open_drained(&f);
  bb b;
  bb_push(&b, MCP_TRIGGER_COLLECTION, "1", 0, "");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, MCP_TRIGGER_COLLECTION, "1", MCP_CODE_UNIMPLEMENTED);
  ck_assert_int_eq(f.sn.nev, 1);
  ck_assert_int_eq(f.sn.ev_type[0], MCP_EVENT_TRIGGER_IGNORED);
  ck_assert_str_eq(f.sn.ev_coll[0], MCP_TRIGGER_COLLECTION);
  ck_assert_str_eq(f.sn.ev_nonce[0], "1");
  /* Another unrequested collection is still a NACK. */
  bb_push(&b, "istio/other", "2", 0, "");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, "istio/other", "2", MCP_CODE_UNIMPLEMENTED);
  ck_assert_int_eq(f.sn.ev_type[1], MCP_EVENT_NACK);
  fx_close(&f);
}
END_TEST

START_TEST(apply_rejection_nacks_with_its_code_and_message) {
  for (int inc = 0; inc < 2; ++inc) {
    fx f;
    fx_state(&f, inc, 0);
    fx_open_drained(&f);
    fx_hold_ab(&f);
    before bf;
    remember(&f, &bf);
    f.sn.reject_code = MCP_CODE_FAILED_PRECONDITION;
    f.sn.reject_msg = "no thanks";
    bb b;
    bb_push(&b, COLLS[0], "7", inc, "sv-7");
    bb_good(&b, "a", "va9");
    bb_good(&b, "z", "vz");
    if (inc) {
      bb_removed(&b, "b");
    }
    ck_assert_int_eq(feed(&f, &b), 0);
    Req *r = take_one(&f);
    check_answer(r, COLLS[0], "7", MCP_CODE_FAILED_PRECONDITION);
    ck_assert_str_eq(r->error_detail->message, "no thanks");
    istio__mcp__v1alpha1__request_resources__free_unpacked(r, NULL);
    unchanged(&f, &bf, 1, 1, 1);
    mcp_collection_status s0 = status_of(&f, COLLS[0]);
    ck_assert_int_eq(s0.last_nack_code, MCP_CODE_FAILED_PRECONDITION);
    ck_assert_str_eq(s0.last_nack_message, "no thanks");
    /* Accepting again works from the state held. */
    f.sn.reject_code = 0;
    bb_push(&b, COLLS[0], "8", inc, "sv-8");
    bb_good(&b, "z", "vz");
    ck_assert_int_eq(feed(&f, &b), 0);
    expect_answer(&f, COLLS[0], "8", 0);
    char h[512];
    ck_assert_str_eq(held(f.st, COLLS[0], h, sizeof(h)),
                     inc ? "a=va1;b=vb1;z=vz;" : "z=vz;");
    fx_close(&f);
  }
}
END_TEST

START_TEST(malformed_envelope_is_an_error_and_changes_nothing) {
  fx f;
  fx_state(&f, 1, 0);
  fx_open_drained(&f);
  fx_hold_ab(&f);
  before bf;
  remember(&f, &bf);
  size_t jn = mcp_sink_state_journal_count(f.st);
  bb b;
  /* Truncated: a length past the end. */
  bb_push(&b, COLLS[0], "5", 0, "sv-5");
  bb_good(&b, "z", "v");
  b.n -= 2;
  ck_assert_int_eq(feed(&f, &b), MCP_ERR_MALFORMED);
  /* Collection not UTF-8. */
  bb_push(&b, "istio/one\xff", "5", 0, "sv-5");
  ck_assert_int_eq(feed(&f, &b), MCP_ERR_MALFORMED);
  /* Nonce not UTF-8. */
  bb_push(&b, COLLS[0], "5\xff", 0, "sv-5");
  ck_assert_int_eq(feed(&f, &b), MCP_ERR_MALFORMED);
  /* system_version_info not UTF-8. */
  bb_push(&b, COLLS[0], "5", 0, "sv\xc3");
  ck_assert_int_eq(feed(&f, &b), MCP_ERR_MALFORMED);
  /* The collection field with the wrong wire type (varint). */
  bb_push(&b, "", "5", 0, "sv-5");
  bb_varint(&b, 2 << 3 | 0);
  bb_varint(&b, 7);
  ck_assert_int_eq(feed(&f, &b), MCP_ERR_MALFORMED);
  /* A group wire type. */
  bb_push(&b, COLLS[0], "5", 0, "sv-5");
  bb_varint(&b, 9 << 3 | 3);
  ck_assert_int_eq(feed(&f, &b), MCP_ERR_MALFORMED);
  unchanged(&f, &bf, 0, 0, 0);
  ck_assert_int_eq(mcp_sink_session_want_write(f.s), 0);
  ck_assert_uint_eq(mcp_sink_state_journal_count(f.st), jn);
  ck_assert_int_eq(mcp_error_grpc_status(MCP_ERR_MALFORMED), 3);
  fx_close(&f);
}
END_TEST

START_TEST(requested_collection_with_empty_nonce_is_a_protocol_error) {
  for (int inc = 0; inc < 2; ++inc) {
    fx f;
    fx_state(&f, inc, 0);
    fx_open_drained(&f);
    fx_hold_ab(&f);
    before bf;
    remember(&f, &bf);
    bb b;
    bb_push(&b, COLLS[0], "", 0, "sv-5");
    bb_good(&b, "z", "v");
    ck_assert_int_eq(feed(&f, &b), MCP_ERR_PROTOCOL);
    unchanged(&f, &bf, 0, 0, 0);
    ck_assert_int_eq(mcp_sink_session_want_write(f.s), 0);
    fx_close(&f);
  }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Synced, journal, status, events                                     */
/* ------------------------------------------------------------------ */

START_TEST(change_is_complete_for_full_state_and_incremental_into_nothing) {
  fx f;
  fx_state(&f, 1, 0);
  fx_open_drained(&f);
  /* Nothing held: an incremental push is everything there is. */
  bb b;
  bb_push(&b, COLLS[0], "1", 1, "sv-1");
  bb_good(&b, "a", "va1");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[0], "1", 0);
  ck_assert_int_eq(f.sn.incremental, 1);
  ck_assert_int_eq(f.sn.complete, 1);
  /* Something held: an incremental push is a difference. */
  bb_push(&b, COLLS[0], "2", 1, "sv-2");
  bb_good(&b, "b", "vb1");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[0], "2", 0);
  ck_assert_int_eq(f.sn.complete, 0);
  /* A full state always is. */
  bb_push(&b, COLLS[0], "3", 0, "sv-3");
  bb_good(&b, "c", "vc1");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[0], "3", 0);
  ck_assert_int_eq(f.sn.incremental, 0);
  ck_assert_int_eq(f.sn.complete, 1);
  fx_close(&f);
}
END_TEST

START_TEST(event_says_synced_from_the_ack_that_syncs) {
  fx f;
  fx_state(&f, 0, 0);
  fx_open_drained(&f);
  bb b;
  bb_push(&b, COLLS[0], "1", 0, "sv-1");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[0], "1", 0);
  ck_assert_int_eq(f.sn.ev_type[f.sn.nev - 1], MCP_EVENT_ACK);
  ck_assert_int_eq(f.sn.ev_synced[f.sn.nev - 1], 0);
  bb_push(&b, COLLS[1], "2", 0, "sv-2");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[1], "2", 0);
  ck_assert_int_eq(f.sn.ev_type[f.sn.nev - 1], MCP_EVENT_ACK);
  ck_assert_int_eq(f.sn.ev_synced[f.sn.nev - 1], 1);
  ck_assert_int_eq(mcp_sink_state_synced(f.st), 1);
  fx_close(&f);
}
END_TEST

START_TEST(synced_once_every_collection_was_acked) {
  fx f;
  fx_state(&f, 0, 0);
  fx_open_drained(&f);
  ck_assert_int_eq(mcp_sink_state_synced(f.st), 0);
  fx_hold_ab(&f);
  ck_assert_int_eq(mcp_sink_state_synced(f.st), 0);
  /* A NACKed push does not sync the second collection. */
  bb b;
  bb_push(&b, COLLS[1], "2", 0, "sv-2");
  bb_good(&b, "x", "v");
  bb_good(&b, "x", "v");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[1], "2", MCP_CODE_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_sink_state_synced(f.st), 0);
  /* An accepted empty one does. */
  bb_push(&b, COLLS[1], "3", 0, "sv-3");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[1], "3", 0);
  ck_assert_int_eq(mcp_sink_state_synced(f.st), 1);
  /* And it stays synced: across a NACK and a new session. */
  bb_push(&b, COLLS[1], "4", 1, "sv-4");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[1], "4", MCP_CODE_INVALID_ARGUMENT);
  ck_assert_int_eq(mcp_sink_state_synced(f.st), 1);
  mcp_sink_session_del(f.s);
  ck_assert_int_eq(mcp_sink_state_synced(f.st), 1);
  fx_open_drained(&f);
  ck_assert_int_eq(mcp_sink_state_synced(f.st), 1);
  fx_close(&f);
}
END_TEST

START_TEST(journal_records_requests_acks_and_nacks) {
  fx f;
  fx_state(&f, 1, 0);
  fx_open_drained(&f); /* at ts 1000 */
  fx_hold_ab(&f);      /* ACK of "1" at ts 1010 */
  bb b;
  bb_push(&b, COLLS[1], "2", 0, "sv-2");
  bb_good(&b, "x", "v");
  bb_good(&b, "x", "v");
  ck_assert_int_eq(feed(&f, &b), 0); /* ts 1020 */
  expect_answer(&f, COLLS[1], "2", MCP_CODE_INVALID_ARGUMENT);
  f.sn.reject_code = MCP_CODE_UNAVAILABLE;
  f.sn.reject_msg = "later";
  bb_push(&b, COLLS[1], "3", 0, "sv-3");
  ck_assert_int_eq(feed(&f, &b), 0); /* ts 1030 */
  expect_answer(&f, COLLS[1], "3", MCP_CODE_UNAVAILABLE);

  ck_assert_uint_eq(mcp_sink_state_journal_count(f.st), 5);
  mcp_journal_entry e;
  ck_assert_int_eq(mcp_sink_state_journal_entry(f.st, 0, &e), 0);
  ck_assert_int_eq(e.kind, MCP_EVENT_REQUEST);
  ck_assert_str_eq(e.collection, COLLS[0]);
  ck_assert_str_eq(e.nonce, "");
  ck_assert_int_eq(e.code, 0);
  ck_assert_str_eq(e.message, "");
  ck_assert_uint_eq(e.ts, 1000);
  ck_assert_int_eq(mcp_sink_state_journal_entry(f.st, 1, &e), 0);
  ck_assert_int_eq(e.kind, MCP_EVENT_REQUEST);
  ck_assert_str_eq(e.collection, COLLS[1]);
  ck_assert_int_eq(mcp_sink_state_journal_entry(f.st, 2, &e), 0);
  ck_assert_int_eq(e.kind, MCP_EVENT_ACK);
  ck_assert_str_eq(e.collection, COLLS[0]);
  ck_assert_str_eq(e.nonce, "1");
  ck_assert_int_eq(e.code, 0);
  ck_assert_uint_eq(e.ts, 1010);
  ck_assert_int_eq(mcp_sink_state_journal_entry(f.st, 3, &e), 0);
  ck_assert_int_eq(e.kind, MCP_EVENT_NACK);
  ck_assert_str_eq(e.collection, COLLS[1]);
  ck_assert_str_eq(e.nonce, "2");
  ck_assert_int_eq(e.code, MCP_CODE_INVALID_ARGUMENT);
  ck_assert_str_ne(e.message, "");
  ck_assert_uint_eq(e.ts, 1020);
  ck_assert_int_eq(mcp_sink_state_journal_entry(f.st, 4, &e), 0);
  ck_assert_int_eq(e.kind, MCP_EVENT_NACK);
  ck_assert_str_eq(e.nonce, "3");
  ck_assert_int_eq(e.code, MCP_CODE_UNAVAILABLE);
  ck_assert_str_eq(e.message, "later");
  ck_assert_uint_eq(e.ts, 1030);
  ck_assert_int_eq(mcp_sink_state_journal_entry(f.st, 5, &e), MCP_ERR_NOT_FOUND);
  fx_close(&f);
}
END_TEST

START_TEST(journal_is_a_ring_bounded_by_journal_size) {
  fx f;
  fx_state(&f, 0, 3);
  fx_open_drained(&f); /* 2 entries */
  bb b;
  char nonce[8];
  for (int i = 1; i <= 7; ++i) {
    nonce[0] = (char)('0' + i);
    nonce[1] = '\0';
    bb_push(&b, COLLS[0], nonce, 0, "sv");
    ck_assert_int_eq(feed(&f, &b), 0);
    expect_answer(&f, COLLS[0], nonce, 0);
    size_t want = 2 + (size_t)i < 3 ? 2 + (size_t)i : 3;
    ck_assert_uint_eq(mcp_sink_state_journal_count(f.st), want);
  }
  /* The three newest, oldest first: ACKs of 5, 6, 7. */
  mcp_journal_entry e;
  for (size_t i = 0; i < 3; ++i) {
    ck_assert_int_eq(mcp_sink_state_journal_entry(f.st, i, &e), 0);
    ck_assert_int_eq(e.kind, MCP_EVENT_ACK);
    nonce[0] = (char)('5' + i);
    ck_assert_str_eq(e.nonce, nonce);
  }
  ck_assert_int_eq(mcp_sink_state_journal_entry(f.st, 3, &e), MCP_ERR_NOT_FOUND);
  fx_close(&f);
}
END_TEST

START_TEST(status_counts_pushes_acks_nacks_held_and_acked_version) {
  fx f;
  fx_state(&f, 1, 0);
  fx_open_drained(&f);
  mcp_collection_status s = status_of(&f, COLLS[0]);
  ck_assert_str_eq(s.collection, COLLS[0]);
  ck_assert_int_eq(s.incremental, 1);
  ck_assert_uint_eq(s.pushes, 0);
  ck_assert_str_eq(s.acked_version, "");
  ck_assert_int_eq(s.last_nack_code, 0);
  ck_assert_str_eq(s.last_nack_message, "");
  fx_hold_ab(&f);
  s = status_of(&f, COLLS[0]);
  ck_assert_uint_eq(s.pushes, 1);
  ck_assert_uint_eq(s.acks, 1);
  ck_assert_uint_eq(s.nacks, 0);
  ck_assert_uint_eq(s.held, 2);
  ck_assert_str_eq(s.acked_version, "sv-1");
  bb b;
  bb_push(&b, COLLS[0], "2", 1, "sv-2");
  bb_removed(&b, "a");
  bb_removed(&b, "a");
  bb_good(&b, "a", "x");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[0], "2", MCP_CODE_INVALID_ARGUMENT);
  bb_push(&b, COLLS[0], "3", 1, "00000000000012a4-17");
  bb_removed(&b, "a");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[0], "3", 0);
  s = status_of(&f, COLLS[0]);
  ck_assert_uint_eq(s.pushes, 3);
  ck_assert_uint_eq(s.acks, 2);
  ck_assert_uint_eq(s.nacks, 1);
  ck_assert_uint_eq(s.held, 1);
  ck_assert_str_eq(s.acked_version, "00000000000012a4-17");
  ck_assert_int_eq(s.last_nack_code, MCP_CODE_INVALID_ARGUMENT);
  /* The other collection is untouched, and out of range is NOT_FOUND. */
  s = status_of(&f, COLLS[1]);
  ck_assert_uint_eq(s.pushes + s.acks + s.nacks + s.held, 0);
  ck_assert_int_eq(mcp_sink_state_collection_status(f.st, 2, f.ts, &s),
                   MCP_ERR_NOT_FOUND);
  fx_close(&f);
}
END_TEST

START_TEST(events_report_acks_and_nacks) {
  fx f;
  fx_state(&f, 0, 0);
  fx_open_drained(&f);
  ck_assert_int_eq(f.sn.nev, 0);
  fx_hold_ab(&f);
  ck_assert_int_eq(f.sn.nev, 1);
  ck_assert_int_eq(f.sn.ev_type[0], MCP_EVENT_ACK);
  ck_assert_str_eq(f.sn.ev_coll[0], COLLS[0]);
  ck_assert_str_eq(f.sn.ev_nonce[0], "1");
  ck_assert_int_eq(f.sn.ev_code[0], 0);
  bb b;
  bb_push(&b, COLLS[1], "2", 1, "sv-2");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[1], "2", MCP_CODE_INVALID_ARGUMENT);
  ck_assert_int_eq(f.sn.nev, 2);
  ck_assert_int_eq(f.sn.ev_type[1], MCP_EVENT_NACK);
  ck_assert_str_eq(f.sn.ev_coll[1], COLLS[1]);
  ck_assert_str_eq(f.sn.ev_nonce[1], "2");
  ck_assert_int_eq(f.sn.ev_code[1], MCP_CODE_INVALID_ARGUMENT);
  f.sn.reject_code = MCP_CODE_INTERNAL;
  f.sn.reject_msg = "boom";
  bb_push(&b, COLLS[1], "3", 0, "sv-3");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, COLLS[1], "3", MCP_CODE_INTERNAL);
  ck_assert_int_eq(f.sn.nev, 3);
  ck_assert_int_eq(f.sn.ev_type[2], MCP_EVENT_NACK);
  ck_assert_int_eq(f.sn.ev_code[2], MCP_CODE_INTERNAL);
  ck_assert_str_eq(f.sn.ev_msg[2], "boom");
  /* An unrequested collection is NACKed, and reported. */
  bb_push(&b, "else", "4", 0, "sv-4");
  ck_assert_int_eq(feed(&f, &b), 0);
  expect_answer(&f, "else", "4", MCP_CODE_UNIMPLEMENTED);
  ck_assert_int_eq(f.sn.nev, 4);
  ck_assert_int_eq(f.sn.ev_type[3], MCP_EVENT_NACK);
  ck_assert_int_eq(f.sn.ev_code[3], MCP_CODE_UNIMPLEMENTED);
  ck_assert_str_eq(f.sn.ev_coll[3], "else");
  /* Errors are not events. */
  bb_push(&b, COLLS[0], "", 0, "sv-5");
  ck_assert_int_eq(feed(&f, &b), MCP_ERR_PROTOCOL);
  ck_assert_int_eq(f.sn.nev, 4);
  fx_close(&f);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Sessions and state                                                  */
/* ------------------------------------------------------------------ */

START_TEST(only_one_session_per_state) {
  fx f;
  fx_state(&f, 0, 0);
  fx_open(&f);
  mcp_sink_session *second = (mcp_sink_session *)&f; /* must stay untouched */
  ck_assert_int_eq(mcp_sink_session_new(&second, f.st, f.ts),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_eq(second, (mcp_sink_session *)&f);
  ck_assert_int_eq(mcp_sink_session_new(&second, f.st, f.ts),
                   MCP_ERR_INVALID_ARGUMENT);
  mcp_sink_session_del(f.s);
  second = NULL;
  ck_assert_int_eq(mcp_sink_session_new(&second, f.st, f.ts), 0);
  ck_assert_ptr_nonnull(second);
  f.s = second;
  fx_close(&f);
}
END_TEST

START_TEST(state_survives_session_deletion) {
  fx f;
  fx_state(&f, 0, 0);
  fx_open_drained(&f);
  fx_hold_ab(&f);
  bb b;
  bb_push(&b, COLLS[1], "2", 0, "sv-2");
  bb_good(&b, "x", "vx");
  ck_assert_int_eq(feed(&f, &b), 0);
  /* The session goes away with its ACK still queued. */
  mcp_sink_session_del(f.s);
  f.s = NULL;
  char h[512];
  ck_assert_str_eq(held(f.st, COLLS[0], h, sizeof(h)), "a=va1;b=vb1;");
  ck_assert_str_eq(held(f.st, COLLS[1], h, sizeof(h)), "x=vx;");
  ck_assert_int_eq(mcp_sink_state_synced(f.st), 1);
  mcp_collection_status s = status_of(&f, COLLS[1]);
  ck_assert_str_eq(s.acked_version, "sv-2");
  ck_assert_uint_eq(s.acks, 1);
  /* A new session sends initial requests only: the old answer is gone. */
  fx_open(&f);
  Req *r[4];
  size_t n = take(&f, r, 4);
  ck_assert_uint_eq(n, 2);
  check_initial(r[0], COLLS[0], 0);
  check_initial(r[1], COLLS[1], 0);
  free_reqs(r, n);
  /* And it goes on from the state held. */
  bb_push(&b, COLLS[0], "1", 0, "sv-3");
  bb_good(&b, "a", "va1");
  ck_assert_int_eq(feed(&f, &b), 0);
  ck_assert_uint_eq(f.sn.nremoved, 1);
  ck_assert_str_eq(f.sn.removed[0], "b");
  expect_answer(&f, COLLS[0], "1", 0);
  ck_assert_str_eq(held(f.st, COLLS[0], h, sizeof(h)), "a=va1;");
  fx_close(&f);
}
END_TEST

START_TEST(state_new_rejects_bad_options) {
  mcp_sink_state *st = (mcp_sink_state *)&st;
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), MCP_ERR_INVALID_ARGUMENT);
  static const char *const empty[] = {"a", ""};
  o.collections = empty;
  o.ncollections = 2;
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), MCP_ERR_INVALID_ARGUMENT);
  static const char *const twice[] = {"a", "b", "a"};
  o.collections = twice;
  o.ncollections = 3;
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_eq(st, (mcp_sink_state *)&st);
  o.ncollections = 2;
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), 0);
  ck_assert_uint_eq(mcp_sink_state_collection_count(st), 2);
  mcp_sink_state_del(st);
}
END_TEST

START_TEST(accept_everything_without_apply_callback) {
  mcp_sink_state *st = NULL;
  mcp_sink_session *s = NULL;
  mcp_sink_options o;
  mcp_sink_options_default(&o);
  o.collections = COLLS;
  o.ncollections = 1;
  ck_assert_int_eq(mcp_sink_state_new(&st, &o), 0);
  ck_assert_int_eq(mcp_sink_session_new(&s, st, 0), 0);
  mcp_msg *m = NULL;
  ck_assert_int_eq(mcp_sink_session_next(s, &m), 1);
  Req *r = th_decode_request(m);
  mcp_msg_free(m);
  ck_assert_str_eq(r->collection, COLLS[0]);
  ck_assert_str_eq(r->sink_node ? r->sink_node->id : "", "");
  istio__mcp__v1alpha1__request_resources__free_unpacked(r, NULL);
  static const char *const names[] = {"p", "q", NULL};
  size_t len;
  uint8_t *p = th_resources(&len, COLLS[0], "1", 0, names, NULL, NULL);
  ck_assert_int_eq(mcp_sink_session_recv(s, p, len, 1), 0);
  free(p);
  ck_assert_uint_eq(mcp_sink_state_count(st, COLLS[0]), 2);
  ck_assert_int_eq(mcp_sink_state_synced(st), 1);
  ck_assert_int_eq(mcp_sink_session_next(s, &m), 1);
  r = th_decode_request(m);
  mcp_msg_free(m);
  check_answer(r, COLLS[0], "1", 0);
  istio__mcp__v1alpha1__request_resources__free_unpacked(r, NULL);
  mcp_sink_session_del(s);
  mcp_sink_state_del(st);
}
END_TEST

START_TEST(helper_encoded_push_is_accepted_via_feed_bytes) {
  /* th_resources (protobuf-c encoding of the whole message) and our
   * hand-made envelope agree. */
  fx f;
  fx_state(&f, 1, 0);
  fx_open_drained(&f);
  static const char *const names[] = {"a", "b", NULL};
  static const char *const vers[] = {"1", "2", NULL};
  static const char *const rem[] = {"zz", NULL};
  size_t len;
  uint8_t *p = th_resources(&len, COLLS[1], "3", 1, names, vers, rem);
  ck_assert_int_eq(feed_bytes(&f, p, len), 0);
  expect_answer(&f, COLLS[1], "3", 0);
  char h[512];
  ck_assert_str_eq(held(f.st, COLLS[1], h, sizeof(h)), "a=1;b=2;");
  ck_assert_str_eq(f.sn.body[seen_res(&f.sn, "b")], "b");
  ck_assert_str_eq(f.sn.sysver, "sv");
  fx_close(&f);
}
END_TEST

/* ---- mcp_resource_decode(): one Resource, for modules carrying MCP's ---- */

/* The Resource bytes of |r| (inside b, which the caller frees). */
static void resource_bytes(bb *b, const rspec *r, const uint8_t **d,
                           size_t *dl) {
  bb_resource(b, r); /* as field 3 of a push: unwrap it */
  mcp_wire w = {b->p, b->p + b->n};
  uint32_t f;
  int wt;
  uint64_t v;
  ck_assert_int_eq(mcp_wire_next(&w, &f, &wt, &v, d, dl), 1);
  ck_assert_uint_eq(f, 3);
}

START_TEST(resource_decode_reads_what_protobuf_c_wrote) {
  bb b = {0};
  rspec r = {.name = "ns/a", .version = "v7",
             .type_url = "type.googleapis.com/test.Body", .body = "BODY",
             .label_key = "app", .label_val = "web", .has_ct = 1,
             .ct_seconds = 42, .ct_nanos = 7};
  const uint8_t *d;
  size_t dl;
  resource_bytes(&b, &r, &d, &dl);
  th_mem m;
  th_mem_init(&m, 0);
  mcp_resource res;
  void *blk = NULL;
  char *extra = NULL;
  ck_assert_int_eq(mcp_resource_decode(d, dl, &m.mem, 5, &res, &blk, &extra),
                   0);
  ck_assert_str_eq(res.name, "ns/a");
  ck_assert_str_eq(res.version, "v7");
  ck_assert_str_eq(res.type_url, "type.googleapis.com/test.Body");
  ck_assert_uint_eq(res.body_len, 4);
  ck_assert_int_eq(memcmp(res.body, "BODY", 4), 0);
  ck_assert(res.body >= d && res.body + 4 <= d + dl); /* not copied */
  ck_assert_uint_eq(res.nlabels, 1);
  ck_assert_str_eq(res.labels[0].key, "app");
  ck_assert_str_eq(res.labels[0].value, "web");
  ck_assert_uint_eq(res.nannotations, 0);
  ck_assert_int_eq(res.has_create_time, 1);
  ck_assert_int_eq(res.create_time_seconds, 42);
  ck_assert_int_eq(res.create_time_nanos, 7);
  ck_assert_ptr_nonnull(extra);
  memcpy(extra, "abcd", 5); /* the caller's bytes, inside the block */
  ck_assert_int_eq(mcp_resource_check(&res, NULL, NULL, 0), 0);
  ck_assert_int_eq(m.live, 1); /* one block */
  mcp_mem_free(&m.mem, blk);
  ck_assert_int_eq(m.live, 0);
  free(b.p);
}
END_TEST

START_TEST(resource_decode_refuses_bad_bytes_and_allocates_nothing) {
  th_mem m;
  th_mem_init(&m, 0);
  mcp_resource res;
  void *blk = (void *)&res;
  char *extra = (char *)&res;
  bb b = {0};
  rspec r = {.name = "a", .version = "1", .type_url = "t/x", .body = "B"};
  const uint8_t *d;
  size_t dl;
  resource_bytes(&b, &r, &d, &dl);
  /* Cut inside a field: it does not decode. */
  ck_assert_int_eq(mcp_resource_decode(d, dl - 1, &m.mem, 0, &res, &blk,
                                       &extra),
                   MCP_ERR_MALFORMED);
  ck_assert_ptr_null(blk);
  ck_assert_ptr_null(extra);
  /* Out of memory. */
  th_mem_init(&m, 1);
  ck_assert_int_eq(mcp_resource_decode(d, dl, &m.mem, 0, &res, &blk, NULL),
                   MCP_ERR_NOMEM);
  ck_assert_ptr_null(blk);
  free(b.p);
  /* A name, or a label, that is not UTF-8. */
  rspec bad[] = {{.name = "a\xff", .type_url = "t/x"},
                 {.name = "a", .type_url = "t/x", .label_key = "k",
                  .label_val = "\xc3\x28"}};
  for (size_t i = 0; i < 2; ++i) {
    th_mem_init(&m, 0);
    memset(&b, 0, sizeof(b));
    resource_bytes(&b, &bad[i], &d, &dl);
    ck_assert_int_eq(mcp_resource_decode(d, dl, &m.mem, 3, &res, &blk,
                                         &extra),
                     MCP_ERR_PROTOCOL);
    ck_assert_ptr_null(blk);
    ck_assert_int_eq(m.live, 0);
    free(b.p);
  }
  /* Empty bytes are an empty Resource (proto3): "" everywhere, no body. */
  th_mem_init(&m, 0);
  ck_assert_int_eq(mcp_resource_decode(NULL, 0, &m.mem, 0, &res, &blk, NULL),
                   0);
  ck_assert_str_eq(res.name, "");
  ck_assert_ptr_null(res.body);
  mcp_mem_free(&m.mem, blk);
  ck_assert_int_eq(m.live, 0);
}
END_TEST


/* ------------------------------------------------------------------ */
/* A push in fragments (mcp_sink_session_recv_iov)                     */
/* ------------------------------------------------------------------ */

/* What a sink does with one message: its return, what apply and the
 * events saw, and the bytes of the answers it queued. */
typedef struct outcome {
  int rv;
  seen sn;
  uint8_t answers[1024];
  size_t nanswers;
} outcome;

/* Feeds |p|/|n| to a fresh sink in the fragments that |cuts| (|ncuts|
 * positions, in order; equal ones make empty fragments) make of it. */
static void run_cut(int incremental, const uint8_t *p, size_t n,
                    const size_t *cuts, size_t ncuts, outcome *o) {
  fx f;
  fx_state(&f, incremental, 0);
  fx_open_drained(&f);
  mcp_iovec iov[512];
  ck_assert_uint_lt(ncuts, 512);
  size_t at = 0;
  for (size_t i = 0; i <= ncuts; ++i) {
    size_t to = i < ncuts ? cuts[i] : n;
    /* Each fragment a copy of its own: nothing may read past its end. */
    uint8_t *frag = malloc(to - at ? to - at : 1);
    memcpy(frag, p + at, to - at);
    iov[i].base = frag;
    iov[i].len = to - at;
    at = to;
  }
  memset(o, 0, sizeof(*o));
  o->rv = mcp_sink_session_recv_iov(f.s, iov, ncuts + 1, f.ts + 10);
  for (size_t i = 0; i <= ncuts; ++i) {
    free((void *)(uintptr_t)iov[i].base);
  }
  o->sn = f.sn;
  mcp_msg *msg;
  while (mcp_sink_session_next(f.s, &msg) == 1) {
    ck_assert_uint_le(o->nanswers + mcp_msg_len(msg), sizeof(o->answers));
    mcp_msg_flatten(msg, o->answers + o->nanswers);
    o->nanswers += mcp_msg_len(msg);
    mcp_msg_free(msg);
  }
  fx_close(&f);
}

static void same_outcome(const outcome *a, const outcome *b, size_t cut) {
  if (a->rv != b->rv || memcmp(&a->sn, &b->sn, sizeof(a->sn)) != 0 ||
      a->nanswers != b->nanswers ||
      memcmp(a->answers, b->answers, a->nanswers) != 0) {
    ck_abort_msg("cut at %zu: rv %d, %d apply, %d events against one "
                 "buffer's rv %d, %d apply, %d events",
                 cut, b->rv, b->sn.napply, b->sn.nev, a->rv, a->sn.napply,
                 a->sn.nev);
  }
}

/* Every way of cutting |m| in two, into single bytes, and with empty
 * fragments between, answers as the one buffer does; returns that rv. */
static int cuts_read_as_one(int incremental, bb *m) {
  outcome one, cut;
  run_cut(incremental, m->p, m->n, NULL, 0, &one);
  size_t c[512];
  for (size_t k = 0; k <= m->n; ++k) {
    c[0] = k;
    run_cut(incremental, m->p, m->n, c, 1, &cut);
    same_outcome(&one, &cut, k);
  }
  ck_assert_uint_lt(m->n, 250);
  for (size_t k = 1; k < m->n; ++k) {
    c[k - 1] = k; /* single bytes */
  }
  run_cut(incremental, m->p, m->n, c, m->n ? m->n - 1 : 0, &cut);
  same_outcome(&one, &cut, 1);
  for (size_t k = 0; k < m->n; ++k) {
    c[2 * k] = c[2 * k + 1] = k; /* an empty fragment at every byte */
  }
  run_cut(incremental, m->p, m->n, c, 2 * m->n, &cut);
  same_outcome(&one, &cut, 0);
  free(m->p);
  memset(m, 0, sizeof(*m));
  return one.rv;
}

START_TEST(push_in_fragments_reads_as_one_buffer) {
  bb b;
  /* Accepted, full state: labels, create times, an unknown field of
   * each wire type between the resources. */
  bb_push(&b, COLLS[0], "n-1", 0, "sv-1");
  rspec r = {.name = "ns/a", .version = "v1", .type_url = "type.example/A",
             .body = "body-a", .label_key = "app", .label_val = "web",
             .has_ct = 1, .ct_seconds = 1700000000, .ct_nanos = 7};
  bb_resource(&b, &r);
  bb_varint(&b, 9 << 3 | 0);
  bb_varint(&b, 300);
  bb_varint(&b, 10 << 3 | 1);
  bb_put(&b, "12345678", 8);
  bb_varint(&b, 11 << 3 | 5);
  bb_put(&b, "1234", 4);
  bb_good(&b, "ns/b", "v2");
  ck_assert_int_eq(cuts_read_as_one(0, &b), 0);
  /* Incremental, with removed names. */
  bb_push(&b, COLLS[1], "n-2", 1, "sv-2");
  bb_good(&b, "ns/c", "v3");
  bb_removed(&b, "ns/gone");
  bb_removed(&b, "ns/old");
  ck_assert_int_eq(cuts_read_as_one(1, &b), 0);
  /* NACKed: a name twice; a resource that does not decode. */
  bb_push(&b, COLLS[0], "n-3", 0, "sv-3");
  bb_good(&b, "ns/d", "v1");
  bb_good(&b, "ns/d", "v2");
  static const uint8_t garbage[] = {0x0a, 0x05, 0x01};
  bb_field(&b, 3, garbage, sizeof(garbage));
  ck_assert_int_eq(cuts_read_as_one(0, &b), 0);
}
END_TEST

/* A push cut inside its second resource (whose copy needs the scratch
 * buffer), under every allocation failure of its receive: NOMEM with
 * nothing held and nothing leaked, or the ACK. The same cut inside a
 * field that only its copy shows to be malformed (a six-byte tag):
 * MALFORMED, nothing leaked. */
START_TEST(push_in_fragments_survives_every_allocation_failure) {
  for (int malformed = 0; malformed < 2; ++malformed) {
    long k;
    for (k = 1;; ++k) {
      th_mem m;
      mcp_sink_state *st;
      mcp_sink_session *s;
      counted_sink(&m, &st, &s);
      bb b;
      bb_push(&b, COLLS[0], "1", 0, "sv-1");
      bb_good(&b, "a", "1");
      size_t cut = b.n + 5;
      if (malformed) {
        static const uint8_t long_tag[] = {0x9a, 0x80, 0x80, 0x80, 0x80,
                                           0x00, 0x03, 'a', 'b', 'c'};
        bb_put(&b, long_tag, sizeof(long_tag));
      } else {
        bb_good(&b, "b", "1");
      }
      int rv;
      int failed = recv_failing(&m, k, s, &b, cut, &rv);
      if (malformed) {
        ck_assert_int_eq(rv, failed ? MCP_ERR_NOMEM : MCP_ERR_MALFORMED);
      } else {
        ck_assert_int_eq(rv, failed ? MCP_ERR_NOMEM : 0);
        ck_assert_uint_eq(mcp_sink_state_count(st, COLLS[0]), failed ? 0 : 2);
      }
      counted_sink_del(&m, st, s);
      if (!failed)
        break;
    }
    ck_assert_int_gt(k, 1); /* the receive allocates: failures were tried */
  }
}
END_TEST

START_TEST(malformed_push_in_fragments_is_malformed_as_one_buffer) {
  bb b;
  /* A length past the end. */
  bb_push(&b, COLLS[0], "n-1", 0, "sv-1");
  bb_good(&b, "ns/a", "v1");
  bb_varint(&b, 3 << 3 | 2);
  bb_varint(&b, 40);
  bb_put(&b, "short", 5);
  ck_assert_int_eq(cuts_read_as_one(0, &b), MCP_ERR_MALFORMED);
  /* A group between two good resources. */
  bb_push(&b, COLLS[0], "n-2", 0, "sv-2");
  bb_good(&b, "ns/a", "v1");
  bb_varint(&b, 12 << 3 | 3);
  bb_good(&b, "ns/b", "v1");
  ck_assert_int_eq(cuts_read_as_one(0, &b), MCP_ERR_MALFORMED);
  /* A tag of six bytes, and a length of six: both refused. */
  bb_push(&b, COLLS[0], "n-3", 0, "sv-3");
  static const uint8_t long_tag[] = {0x9a, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00};
  bb_put(&b, long_tag, sizeof(long_tag));
  bb_good(&b, "ns/a", "v1");
  ck_assert_int_eq(cuts_read_as_one(0, &b), MCP_ERR_MALFORMED);
  bb_push(&b, COLLS[0], "n-4", 0, "sv-4");
  static const uint8_t long_len[] = {0x1a, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00};
  bb_put(&b, long_len, sizeof(long_len));
  bb_good(&b, "ns/a", "v1");
  ck_assert_int_eq(cuts_read_as_one(0, &b), MCP_ERR_MALFORMED);
  /* A varint cut short at the end, and an I64 of four bytes. */
  bb_push(&b, COLLS[0], "n-5", 0, "sv-5");
  bb_good(&b, "ns/a", "v1");
  bb_varint(&b, 9 << 3 | 0);
  bb_put(&b, "\x80\x80", 2);
  ck_assert_int_eq(cuts_read_as_one(0, &b), MCP_ERR_MALFORMED);
  bb_push(&b, COLLS[0], "n-6", 0, "sv-6");
  bb_good(&b, "ns/a", "v1");
  bb_varint(&b, 10 << 3 | 1);
  bb_put(&b, "1234", 4);
  ck_assert_int_eq(cuts_read_as_one(0, &b), MCP_ERR_MALFORMED);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("core_sink");
  TCase *tc = tcase_create("sink");
  tcase_add_test(tc, initial_requests_one_per_collection_in_order_with_node);
  tcase_add_test(tc, incremental_resumption_sends_every_version_held);
  tcase_add_test(tc, non_incremental_resumption_sends_no_versions);
  tcase_add_test(tc, full_state_replaces_content_and_reports_removed_names);
  tcase_add_test(tc, apply_sees_every_field_of_the_resources);
  tcase_add_test(tc, full_state_ignores_removed_resources);
  tcase_add_test(tc, incremental_adds_updates_and_removes);
  tcase_add_test(tc, incremental_removal_of_a_name_not_held_is_accepted);
  tcase_add_test(tc, ack_echoes_nonce_collection_node_and_incremental_flag);
  tcase_add_test(tc, newest_answer_per_collection_wins);
  tcase_add_test(tc, nack_name_listed_twice);
  tcase_add_test(tc, nack_name_both_updated_and_removed);
  tcase_add_test(tc, nack_incremental_push_when_not_asked);
  tcase_add_test(tc, nack_resource_that_does_not_decode_echoes_nonce);
  tcase_add_test(tc, nack_resource_without_name);
  tcase_add_test(tc, nack_resource_without_body_type);
  tcase_add_test(tc, nack_string_not_utf8);
  tcase_add_test(tc, nack_create_time_nanos_out_of_range);
  tcase_add_test(tc, nack_unrequested_collection_unimplemented_echoes_nonce);
  tcase_add_test(tc, nack_queue_of_unrequested_collections_is_bounded_and_reusable);
  tcase_add_test(tc, nack_trigger_collection_with_empty_nonce);
  tcase_add_test(tc, events_list_what_the_message_carried_and_drops_apart);
  tcase_add_test(tc, nack_lists_every_resource_duplicates_included);
  tcase_add_test(tc, nack_lists_leave_out_only_what_cannot_be_shown);
  tcase_add_test(tc, nack_lists_survive_every_allocation_failure);
  tcase_add_test(tc, trigger_collection_is_reported_as_the_trigger_not_a_nack);
  tcase_add_test(tc, apply_rejection_nacks_with_its_code_and_message);
  tcase_add_test(tc, malformed_envelope_is_an_error_and_changes_nothing);
  tcase_add_test(tc, requested_collection_with_empty_nonce_is_a_protocol_error);
  tcase_add_test(tc, synced_once_every_collection_was_acked);
  tcase_add_test(tc, change_is_complete_for_full_state_and_incremental_into_nothing);
  tcase_add_test(tc, event_says_synced_from_the_ack_that_syncs);
  tcase_add_test(tc, journal_records_requests_acks_and_nacks);
  tcase_add_test(tc, journal_is_a_ring_bounded_by_journal_size);
  tcase_add_test(tc, status_counts_pushes_acks_nacks_held_and_acked_version);
  tcase_add_test(tc, events_report_acks_and_nacks);
  tcase_add_test(tc, only_one_session_per_state);
  tcase_add_test(tc, state_survives_session_deletion);
  tcase_add_test(tc, state_new_rejects_bad_options);
  tcase_add_test(tc, accept_everything_without_apply_callback);
  tcase_add_test(tc, helper_encoded_push_is_accepted_via_feed_bytes);
  tcase_add_test(tc, resource_decode_reads_what_protobuf_c_wrote);
  tcase_add_test(tc, resource_decode_refuses_bad_bytes_and_allocates_nothing);
  tcase_add_test(tc, push_in_fragments_reads_as_one_buffer);
  tcase_add_test(tc, malformed_push_in_fragments_is_malformed_as_one_buffer);
  tcase_add_test(tc, push_in_fragments_survives_every_allocation_failure);
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
