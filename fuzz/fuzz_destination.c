/*
 * fuzz_destination: Conduit's Destination module (core/destination/destination*.c)
 * driven by a script: server sessions fed arbitrary or built requests
 * while the view store changes at random, each paired with a client
 * session that receives what its server sends; and a lone client session
 * fed arbitrary Update bytes.
 *
 * Header: options (heartbeat, debounce, max_delay, DNS zone), then
 * actions, one byte each (modulo A_N) with operands:
 *   TIME      u16: milliseconds to advance
 *   OPEN      slot, request kind (0: the client's own request; 1: built
 *             from a scheme and a path picked or raw; 2: raw bytes)
 *   RECV      slot, raw bytes: one more message to the server stream
 *   VIEW      operation on the view (upsert, delete, remove_collection,
 *             add_collection, bulk upsert, bulk delete), its operands
 *   PUMP      slot, flags (bit 0: the sending side busy; bit 1: pump
 *             until idle)
 *   HALF      slot: the client half-closes
 *   CLOSE     slot: the call goes (both streams deleted)
 *   RAW       raw bytes: one Update to the lone client
 *   FAIL      k: the k-th allocation from now fails
 * At the end every allocation failure is disarmed, time passes beyond the
 * debounce, and every pair is drained.
 *
 * Oracles (besides ASan/UBSan/LSan):
 *   - every message a server sends decodes with protobuf-c and is one of
 *     add, remove, no_endpoints; an add of a watched service carries the
 *     metric labels; the first message follows the request at once;
 *   - a stream ends only with INVALID_ARGUMENT (refused request), RESYNC,
 *     or NOMEM when an allocation failed;
 *   - after the final drain, a client whose pair never broke holds exactly
 *     the view's collection (addresses, and whether it exists);
 *   - the lone client's set equals a model applied from protobuf-c's
 *     decoding of the same bytes; what protobuf-c cannot decode, or an
 *     address without IP or with a port over 65535, ends the stream with
 *     MALFORMED and changes nothing;
 *   - NOMEM exactly when an allocation failed; nothing leaks (fz_mem).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "mcp/destination.h"
#include "proxy/destination/destination.pb-c.h"

#define NSLOTS 4
#define MS MCP_MILLISECONDS

enum { A_TIME, A_OPEN, A_RECV, A_VIEW, A_PUMP, A_HALF, A_CLOSE, A_RAW, A_FAIL,
       A_N };

static const char *const colls[] = {"default/web:80", "prod/db:5432"};
static const char *const paths[] = {
    "web.default.svc.cluster.local",  "web.default.svc.cluster.local:80",
    "Web.Default.svc.cluster.local.", "db.prod.svc.cluster.local:5432",
    "db.prod.svc.corp.example:5432",  "10.0.0.1:8080",
    "example.com",                    "[::1]:80",
    "web.default.svc.cluster.local:0", ""};
static const char *const ips[] = {"10.0.0.1", "10.0.0.2", "10.0.0.3",
                                  "10.1.0.1", "fd00::1",  "fd00::2",
                                  "::ffff:10.0.0.9", "0.0.0.0"};

typedef struct slot {
  mcp_stream *ss;      /* server side */
  mcp_stream *cs;      /* the paired client */
  mcp_dest_set *set;
  int requested;       /* the server stream got its request */
  int first_pending;   /* its first message is owed */
  int broken;          /* a message was lost (failed allocation, error) */
  long fired0;         /* allocations failed before the request */
} slot;

typedef struct world {
  fz_mem m;
  mcp_store *view;
  mcp_dest_server *srv;
  mcp_tstamp ts, quiet;
  slot s[NSLOTS];
  /* the lone client and its model */
  mcp_dest_set *lset;
  mcp_stream *ls;
  char **model;
  size_t nmodel;
  int mexists, mfirst_done;
} world;

/* ---- helpers ---- */

static void view_put(world *w, const char *coll, const char *ip,
                     uint16_t port, const char *pod) {
  mcp_dest_addr a;
  FZ_CHECK(mcp_dest_ip_parse(&a, ip, port) == 0, "ip %s", ip);
  char name[MCP_DEST_ADDR_NAME_MAX];
  mcp_dest_addr_name(&a, name, sizeof(name));
  mcp_dest_addr back;
  FZ_CHECK(mcp_dest_addr_parse(&back, name) == 0 &&
               memcmp(back.ip, a.ip, 16) == 0 && back.port == a.port,
           "name %s does not parse back", name);
  uint8_t body[300];
  size_t n = mcp_dest_weighted_addr_encode(&a, pod, body, sizeof(body));
  FZ_CHECK(n <= sizeof(body), "body of %zu bytes", n);
  mcp_resource r;
  memset(&r, 0, sizeof(r));
  r.name = name;
  r.type_url = MCP_DEST_WEIGHTED_ADDR_TYPE_URL;
  r.body = body;
  r.body_len = n;
  int rv = mcp_store_upsert(w->view, coll, &r, w->ts);
  FZ_CHECK(rv == 0 || rv == 1, "upsert: %d", rv);
}

static void view_op(world *w, fz_in *in) {
  uint8_t op = fz_u8(in), c = fz_u8(in), x = fz_u8(in), y = fz_u8(in);
  const char *coll = colls[c & 1];
  const char *ip = ips[x % 8];
  uint16_t port = (uint16_t)((c >> 1) % 3 == 0 ? 8080 : (c >> 1) % 3);
  char name[MCP_DEST_ADDR_NAME_MAX];
  mcp_dest_addr a;
  switch (op % 6) {
  case 0:
    view_put(w, coll, ip, port, (y & 1) ? ((y & 2) ? "pod-a" : "pod-b") : NULL);
    break;
  case 1:
    mcp_dest_ip_parse(&a, ip, port);
    mcp_dest_addr_name(&a, name, sizeof(name));
    FZ_CHECK(mcp_store_delete(w->view, coll, name, w->ts) >= 0, "delete");
    break;
  case 2:
    FZ_CHECK(mcp_store_remove_collection(w->view, coll, w->ts) >= 0,
             "remove_collection");
    break;
  case 3:
    FZ_CHECK(mcp_store_add_collection(w->view, coll) == 0, "add_collection");
    break;
  case 4: /* many addresses: big adds, and tombstones to compact */
  case 5:
    for (unsigned i = 0; i < (unsigned)(y % 100); i++) {
      char ipb[24];
      snprintf(ipb, sizeof(ipb), "10.2.%u.%u", i / 200, i % 200 + 1);
      if (op % 6 == 4) {
        view_put(w, coll, ipb, 80, NULL);
      } else {
        snprintf(name, sizeof(name), "%s:80", ipb);
        mcp_store_delete(w->view, coll, name, w->ts);
      }
    }
    break;
  }
}

static uint8_t *flatten(const mcp_msg *msg, size_t *len) {
  *len = mcp_msg_len(msg);
  uint8_t *p = malloc(*len ? *len : 1);
  FZ_CHECK(p, "out of memory");
  mcp_msg_flatten(msg, p);
  return p;
}

static void slot_close(slot *s) {
  mcp_stream_del(s->ss);
  mcp_stream_del(s->cs);
  mcp_dest_set_del(s->set);
  memset(s, 0, sizeof(*s));
}

/* Pumps the client once (its request), returning it flattened or NULL. */
static uint8_t *client_request(world *w, slot *s, size_t *len) {
  mcp_msg *msg;
  int status;
  const char *details;
  long fired = w->m.fired;
  mcp_stream_action a =
      mcp_stream_pump(s->cs, w->ts, 1, &msg, &status, &details);
  if (a == MCP_STREAM_END) {
    FZ_CHECK(w->m.fired > fired && status == 8, "client ended: %d %s",
             status, details);
    return NULL;
  }
  FZ_CHECK(a == MCP_STREAM_SEND, "client's first pump: %d", (int)a);
  uint8_t *p = flatten(msg, len);
  mcp_msg_free(msg);
  a = mcp_stream_pump(s->cs, w->ts, 1, &msg, &status, &details);
  FZ_CHECK(a == MCP_STREAM_HALF_CLOSE, "client's second pump: %d", (int)a);
  return p;
}

static void slot_open(world *w, fz_in *in) {
  slot *s = &w->s[fz_u8(in) % NSLOTS];
  uint8_t kind = fz_u8(in), pick = fz_u8(in);
  slot_close(s);
  long fired = w->m.fired;
  int rv = mcp_dest_set_new(&s->set, &w->m.mem);
  fz_check_nomem(&w->m, fired, rv, "set_new");
  if (rv < 0) {
    return;
  }
  char raw[300];
  const char *path = paths[pick % 10];
  if (pick >= 0xf0) {
    fz_str(in, raw, 255);
    path = raw;
  }
  mcp_dest_client_options co;
  memset(&co, 0, sizeof(co));
  co.set = s->set;
  co.authority = path[0] ? path : "x";
  co.mem = &w->m.mem;
  fired = w->m.fired;
  rv = mcp_dest_client_open(&s->cs, &co, w->ts);
  FZ_CHECK(rv == 0 || rv == MCP_ERR_NOMEM || rv == MCP_ERR_INVALID_ARGUMENT,
           "client_open: %d", rv);
  fz_check_nomem(&w->m, fired, rv, "client_open");
  if (rv < 0) {
    slot_close(s);
    return;
  }
  fired = w->m.fired;
  rv = mcp_dest_server_open(w->srv, w->ts, &s->ss);
  fz_check_nomem(&w->m, fired, rv, "server_open");
  if (rv < 0) {
    slot_close(s);
    return;
  }
  size_t len = 0;
  uint8_t *req = NULL;
  if (kind % 3 == 0) {
    req = client_request(w, s, &len);
    if (!req) {
      slot_close(s);
      return;
    }
  } else if (kind % 3 == 1) {
    static const char *const schemes[] = {"k8s", "K8S", "", "dns"};
    Conduit__Common__Destination d = CONDUIT__COMMON__DESTINATION__INIT;
    d.scheme = (char *)((kind / 3) % 8 < 5 ? "k8s" : schemes[(kind / 3) % 4]);
    d.path = (char *)path;
    len = conduit__common__destination__get_packed_size(&d);
    req = malloc(len ? len : 1);
    conduit__common__destination__pack(&d, req);
    s->broken = 1; /* the client did not send this: no convergence check */
  } else {
    size_t n;
    const uint8_t *p = fz_take(in, fz_u8(in), &n);
    req = malloc(n ? n : 1);
    if (n) {
      memcpy(req, p, n);
    }
    len = n;
    s->broken = 1;
  }
  s->fired0 = w->m.fired;
  mcp_stream_recv(s->ss, req, len, w->ts);
  free(req);
  s->requested = 1;
  s->first_pending = 1;
}

/* Checks one Update a server sent, and hands it to the paired client. */
static void deliver(world *w, slot *s, const uint8_t *p, size_t len) {
  Conduit__Proxy__Destination__Update *u =
      conduit__proxy__destination__update__unpack(NULL, len, p);
  char hex[404];
  FZ_CHECK(u, "the server sent an undecodable Update: %s", fz_hex(hex, p, len));
  FZ_CHECK(u->update_case == CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_ADD ||
               u->update_case ==
                   CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_REMOVE ||
               u->update_case ==
                   CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_NO_ENDPOINTS,
           "Update without a member");
  const char *coll = mcp_dest_server_stream_collection(s->ss);
  if (u->update_case == CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_ADD &&
      coll) {
    FZ_CHECK(u->add->n_metric_labels == 2, "add without its metric labels");
  }
  if (coll && w->quiet == 1) {
    /* Without debounce every message but a pending remove reflects the
     * view as it is now (the take happened in this very pump). */
    int exists = mcp_store_has_collection(w->view, coll);
    size_t n = exists ? mcp_store_count(w->view, coll) : 0;
    if (u->update_case == CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_ADD) {
      FZ_CHECK(exists, "an add for a service that does not exist");
    } else if (u->update_case ==
               CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_NO_ENDPOINTS) {
      FZ_CHECK(u->no_endpoints->exists ? exists && n == 0 : !exists,
               "no_endpoints{exists:%d} while the view has %d/%zu",
               (int)u->no_endpoints->exists, exists, n);
    }
  }
  conduit__proxy__destination__update__free_unpacked(u, NULL);
  if (!s->cs || s->broken) {
    return;
  }
  long fired = w->m.fired;
  mcp_stream_recv(s->cs, p, len, w->ts);
  mcp_msg *msg;
  int status;
  const char *details;
  mcp_stream_action a =
      mcp_stream_pump(s->cs, w->ts, 1, &msg, &status, &details);
  if (a == MCP_STREAM_SEND) {
    mcp_msg_free(msg); /* its request, when the server got a built one */
    a = mcp_stream_pump(s->cs, w->ts, 1, &msg, &status, &details);
  }
  if (a == MCP_STREAM_END) {
    FZ_CHECK(w->m.fired > fired && status == 8,
             "the client refused what the server sent: %d %s", status,
             details);
    s->broken = 1;
  }
}

/* One pump of a server stream (or until idle). */
static void slot_pump(world *w, slot *s, uint8_t flags) {
  if (!s->ss) {
    return;
  }
  for (int i = 0; i < 64; i++) {
    mcp_msg *msg;
    int status;
    const char *details;
    long fired = w->m.fired;
    mcp_stream_action a = mcp_stream_pump(s->ss, w->ts, !(flags & 1), &msg,
                                          &status, &details);
    if (a == MCP_STREAM_END) {
      FZ_CHECK(status == 3 || status == 10 ||
                   (status == 8 && w->m.fired > s->fired0),
               "server stream ended: %d %s", status, details);
      FZ_CHECK(status != 3 || !mcp_dest_server_stream_collection(s->ss) ||
                   s->broken,
               "a watching stream refused its client's only request");
      mcp_stream_del(s->ss);
      s->ss = NULL;
      s->broken = 1;
      return;
    }
    if (a == MCP_STREAM_SEND) {
      size_t len;
      uint8_t *p = flatten(msg, &len);
      mcp_msg_free(msg);
      s->first_pending = 0;
      deliver(w, s, p, len);
      free(p);
    } else {
      FZ_CHECK(a == MCP_STREAM_IDLE, "server action %d", (int)a);
      FZ_CHECK(!s->first_pending || (flags & 1) || w->m.fired > s->fired0,
               "the first message was not sent at once");
      if (w->m.fired > fired) {
        s->broken = 1;
      }
      return;
    }
    if (!(flags & 2)) {
      return;
    }
  }
}

/* ---- the lone client ---- */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int tcp_name(const Conduit__Common__TcpAddress *t, char *buf) {
  if (!t || !t->ip || t->port > 65535) {
    return 0;
  }
  mcp_dest_addr a;
  memset(&a, 0, sizeof(a));
  if (t->ip->ip_case == CONDUIT__COMMON__IPADDRESS__IP_IPV4) {
    a.family = 4;
    a.ip[0] = (uint8_t)(t->ip->ipv4 >> 24);
    a.ip[1] = (uint8_t)(t->ip->ipv4 >> 16);
    a.ip[2] = (uint8_t)(t->ip->ipv4 >> 8);
    a.ip[3] = (uint8_t)t->ip->ipv4;
  } else if (t->ip->ip_case == CONDUIT__COMMON__IPADDRESS__IP_IPV6 &&
             t->ip->ipv6) {
    a.family = 6;
    for (int i = 0; i < 8; i++) {
      a.ip[i] = (uint8_t)(t->ip->ipv6->first >> (56 - 8 * i));
      a.ip[8 + i] = (uint8_t)(t->ip->ipv6->last >> (56 - 8 * i));
    }
  } else {
    return 0;
  }
  a.port = (uint16_t)t->port;
  mcp_dest_addr_name(&a, buf, MCP_DEST_ADDR_NAME_MAX);
  return 1;
}

static void model_clear(world *w) {
  for (size_t i = 0; i < w->nmodel; i++) {
    free(w->model[i]);
  }
  free(w->model);
  w->model = NULL;
  w->nmodel = 0;
}

static void model_add(world *w, const char *name) {
  for (size_t i = 0; i < w->nmodel; i++) {
    if (strcmp(w->model[i], name) == 0) {
      return;
    }
  }
  w->model = realloc(w->model, (w->nmodel + 1) * sizeof(*w->model));
  FZ_CHECK(w->model, "out of memory");
  w->model[w->nmodel++] = strdup(name);
  qsort(w->model, w->nmodel, sizeof(*w->model), cmp_str);
}

static void model_remove(world *w, const char *name) {
  for (size_t i = 0; i < w->nmodel; i++) {
    if (strcmp(w->model[i], name) == 0) {
      free(w->model[i]);
      memmove(w->model + i, w->model + i + 1,
              (w->nmodel - i - 1) * sizeof(*w->model));
      w->nmodel--;
      return;
    }
  }
}

static void lone_check(world *w) {
  FZ_CHECK(mcp_dest_set_count(w->lset) == w->nmodel, "set %zu, model %zu",
           mcp_dest_set_count(w->lset), w->nmodel);
  for (size_t i = 0; i < w->nmodel; i++) {
    FZ_CHECK(strcmp(mcp_dest_set_addr(w->lset, i), w->model[i]) == 0,
             "set[%zu] %s, model %s", i, mcp_dest_set_addr(w->lset, i),
             w->model[i]);
  }
  FZ_CHECK(mcp_dest_set_exists(w->lset) == w->mexists, "exists");
}

static void lone_open(world *w) {
  mcp_dest_client_options co;
  memset(&co, 0, sizeof(co));
  co.set = w->lset;
  co.authority = "web.default.svc.cluster.local";
  co.mem = &w->m.mem;
  long fired = w->m.fired;
  int rv = mcp_dest_client_open(&w->ls, &co, w->ts);
  fz_check_nomem(&w->m, fired, rv, "client_open");
  w->mfirst_done = 0;
  if (rv < 0) {
    return;
  }
  /* Its request goes out first: later pumps allocate nothing, so an
   * ending after a recv is the recv's. */
  mcp_msg *msg;
  int status;
  const char *details;
  fired = w->m.fired;
  mcp_stream_action a =
      mcp_stream_pump(w->ls, w->ts, 1, &msg, &status, &details);
  if (a == MCP_STREAM_SEND) {
    mcp_msg_free(msg);
    a = mcp_stream_pump(w->ls, w->ts, 1, &msg, &status, &details);
    FZ_CHECK(a == MCP_STREAM_HALF_CLOSE, "lone client: %d", (int)a);
  } else {
    FZ_CHECK(a == MCP_STREAM_END && status == 8 && w->m.fired > fired,
             "lone client's request: %d", (int)a);
    mcp_stream_del(w->ls);
    w->ls = NULL;
  }
}

static void lone_raw(world *w, fz_in *in) {
  if (!w->ls) {
    lone_open(w);
    if (!w->ls) {
      return;
    }
  }
  size_t n;
  uint8_t which = fz_u8(in);
  const uint8_t *p = fz_take(in, (size_t)fz_u8(in) + (which & 1) * 256, &n);
  Conduit__Proxy__Destination__Update *u =
      conduit__proxy__destination__update__unpack(NULL, n, p);
  int valid = u != NULL, names_n = 0;
  char(*names)[MCP_DEST_ADDR_NAME_MAX] = NULL;
  if (u && u->update_case == CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_ADD) {
    names = calloc(u->add->n_addrs + 1, sizeof(*names));
    for (size_t i = 0; valid && i < u->add->n_addrs; i++) {
      valid = u->add->addrs[i] &&
              tcp_name(u->add->addrs[i]->addr, names[names_n++]);
    }
  } else if (u && u->update_case ==
                      CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_REMOVE) {
    names = calloc(u->remove->n_addrs + 1, sizeof(*names));
    for (size_t i = 0; valid && i < u->remove->n_addrs; i++) {
      valid = tcp_name(u->remove->addrs[i], names[names_n++]);
    }
  }
  long fired = w->m.fired;
  mcp_stream_recv(w->ls, p, n, w->ts);
  mcp_msg *msg;
  int status;
  const char *details;
  mcp_stream_action a =
      mcp_stream_pump(w->ls, w->ts, 1, &msg, &status, &details);
  int nomem = w->m.fired > fired;
  if (a == MCP_STREAM_END) {
    FZ_CHECK(!valid || nomem, "a valid Update ended the stream: %d", status);
    FZ_CHECK(status == (nomem && valid ? 8 : 3) || (nomem && status == 8),
             "status %d", status);
    mcp_stream_del(w->ls);
    w->ls = NULL;
  } else {
    FZ_CHECK(valid, "an invalid Update was taken");
    if (u->update_case != CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE__NOT_SET) {
      if (!w->mfirst_done) {
        model_clear(w);
        w->mfirst_done = 1;
      }
      switch (u->update_case) {
      case CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_ADD:
        for (int i = 0; i < names_n; i++) {
          model_add(w, names[i]);
        }
        w->mexists = 1;
        break;
      case CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_REMOVE:
        for (int i = 0; i < names_n; i++) {
          model_remove(w, names[i]);
        }
        break;
      default:
        model_clear(w);
        w->mexists = u->no_endpoints->exists ? 1 : 0;
        break;
      }
    }
  }
  lone_check(w);
  free(names);
  if (u) {
    conduit__proxy__destination__update__free_unpacked(u, NULL);
  }
}

/* ---- the final drain ---- */

static void converge(world *w, slot *s) {
  if (!s->ss || !s->cs || s->broken) {
    return;
  }
  slot_pump(w, s, 2);
  const char *coll = s->ss ? mcp_dest_server_stream_collection(s->ss) : NULL;
  if (!coll || s->broken) {
    return;
  }
  int exists = mcp_store_has_collection(w->view, coll);
  size_t n = exists ? mcp_store_count(w->view, coll) : 0;
  FZ_CHECK(mcp_dest_set_synced(s->set), "not synced");
  FZ_CHECK(mcp_dest_set_exists(s->set) == exists, "exists %d, view %d",
           mcp_dest_set_exists(s->set), exists);
  FZ_CHECK(mcp_dest_set_count(s->set) == n, "client holds %zu, view %zu",
           mcp_dest_set_count(s->set), n);
  for (size_t i = 0; i < n; i++) {
    FZ_CHECK(mcp_store_version(w->view, coll, mcp_dest_set_addr(s->set, i)),
             "client holds %s, not in the view", mcp_dest_set_addr(s->set, i));
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
  FZ_CHECK(mcp_store_new(&w->view, &so) == 0, "store");
  mcp_dest_server_options o;
  mcp_dest_server_options_default(&o);
  o.view = w->view;
  o.mem = &w->m.mem;
  static const mcp_tstamp hbs[] = {0, 50 * MS, 1000 * MS, 10000 * MS};
  o.heartbeat = hbs[opt & 3];
  o.debounce = (opt & 4) ? 30 * MS : 0;
  o.max_delay = (opt & 8) ? 100 * MS : 0;
  o.dns_zone = (opt & 16) ? "corp.example." : NULL;
  w->quiet = o.debounce + o.max_delay + 1;
  FZ_CHECK(mcp_dest_server_new(&w->srv, &o) == 0, "server");
  FZ_CHECK(mcp_dest_set_new(&w->lset, &w->m.mem) == 0, "set");

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
      if (s->ss) {
        mcp_stream_recv(s->ss, p, n, w->ts);
        s->broken = 1; /* the stream ends: INVALID_ARGUMENT */
      }
      break;
    }
    case A_VIEW:
      view_op(w, &in);
      break;
    case A_PUMP: {
      slot *s = &w->s[fz_u8(&in) % NSLOTS];
      slot_pump(w, s, fz_u8(&in));
      break;
    }
    case A_HALF: {
      slot *s = &w->s[fz_u8(&in) % NSLOTS];
      if (s->ss) {
        mcp_stream_half_close(s->ss, w->ts);
      }
      break;
    }
    case A_CLOSE:
      slot_close(&w->s[fz_u8(&in) % NSLOTS]);
      break;
    case A_RAW:
      lone_raw(w, &in);
      break;
    case A_FAIL:
      fz_mem_arm(&w->m, fz_u8(&in) % 16 + 1);
      break;
    }
  }
  fz_mem_disarm(&w->m);
  w->ts += w->quiet;
  for (int i = 0; i < NSLOTS; i++) {
    converge(w, &w->s[i]);
  }
  for (int i = 0; i < NSLOTS; i++) {
    slot_close(&w->s[i]);
  }
  mcp_dest_server_stats st;
  mcp_dest_server_get_stats(w->srv, &st);
  FZ_CHECK(st.active == 0, "active streams %llu", (unsigned long long)st.active);
  FZ_LOG("streams %llu updates %llu (add %llu remove %llu no_endpoints %llu "
         "heartbeats %llu) invalid %llu resyncs %llu; lone client %llu\n",
         (unsigned long long)st.streams, (unsigned long long)st.updates,
         (unsigned long long)st.adds, (unsigned long long)st.removes,
         (unsigned long long)st.no_endpoints,
         (unsigned long long)st.heartbeats, (unsigned long long)st.invalid,
         (unsigned long long)st.resyncs,
         (unsigned long long)mcp_dest_set_updates(w->lset));
  mcp_stream_del(w->ls);
  mcp_dest_set_del(w->lset);
  mcp_dest_server_del(w->srv);
  model_clear(w);
  FZ_CHECK(w->m.live == 0, "%ld blocks leaked", w->m.live);
  mcp_store_del(w->view);
  free(w);
  return 0;
}
