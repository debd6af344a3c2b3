/*
 * Destination/Get, client side: the address set a client holds for one
 * authority (across reconnections), the session of one call, behind
 * the stream driver, and the agent that runs one call per authority and
 * reconnects through the core's mcp_redial. Updates are decoded with the protobuf-c code
 * generated from proto/conduit, checked whole, then applied (so a bad or
 * unaffordable message changes nothing) by the proto's rules: any order,
 * redundant messages harmless, no_endpoints clears, and the stale content
 * of a previous stream lives until the first message of the next.
 */
#include <stdlib.h>

#include "destination_int.h"
#include "proxy/destination/destination.pb-c.h"

struct mcp_dest_set {
  mcp_mem mem;
  char **v;        /* sorted by strcmp(), each its own allocation */
  size_t n;
  int exists;
  int stale;       /* a stream started and sent nothing yet */
  int synced;      /* the current stream sent its first message */
  uint64_t updates;
};

int mcp_dest_set_new(mcp_dest_set **pset, const mcp_mem *mem) {
  if (!pset) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  mcp_mem m;
  mcp_mem_init(&m, mem);
  mcp_dest_set *s = mcp_mem_calloc(&m, 1, sizeof(*s));
  if (!s) {
    return MCP_ERR_NOMEM;
  }
  s->mem = m;
  *pset = s;
  return 0;
}

static void set_clear(mcp_dest_set *s) {
  for (size_t i = 0; i < s->n; i++) {
    mcp_mem_free(&s->mem, s->v[i]);
  }
  s->n = 0;
}

void mcp_dest_set_del(mcp_dest_set *s) {
  if (!s) {
    return;
  }
  set_clear(s);
  mcp_mem m = s->mem;
  mcp_mem_free(&m, s->v);
  mcp_mem_free(&m, s);
}

size_t mcp_dest_set_count(const mcp_dest_set *s) { return s->n; }
const char *mcp_dest_set_addr(const mcp_dest_set *s, size_t i) {
  return i < s->n ? s->v[i] : NULL;
}
int mcp_dest_set_exists(const mcp_dest_set *s) { return s->exists; }
int mcp_dest_set_stale(const mcp_dest_set *s) { return s->stale; }
int mcp_dest_set_synced(const mcp_dest_set *s) { return s->synced; }
uint64_t mcp_dest_set_updates(const mcp_dest_set *s) { return s->updates; }

/* Index of |name| in the set, or where it would go (|*found| = 0). */
static size_t set_find(const mcp_dest_set *s, const char *name, int *found) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(s->v[mid], name);
    if (c == 0) {
      *found = 1;
      return mid;
    }
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  *found = 0;
  return lo;
}

/* ---- the session ---- */

typedef struct csess {
  mcp_mem mem;
  mcp_dest_set *set;
  char *scheme, *path;
  mcp_dest_update_fn fn;
  void *ud;
  int sent;   /* the request went out */
  int got;    /* a message came in */
} csess;

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* An address of a message as the set names it; 0, or MALFORMED. */
static int tcp_name(const Conduit__Common__TcpAddress *t, char *buf) {
  mcp_dest_addr a;
  memset(&a, 0, sizeof(a));
  if (!t || !t->ip || t->port > 65535) {
    return MCP_ERR_MALFORMED;
  }
  const Conduit__Common__IPAddress *ip = t->ip;
  if (ip->ip_case == CONDUIT__COMMON__IPADDRESS__IP_IPV4) {
    a.family = 4;
    for (int i = 0; i < 4; i++) {
      a.ip[i] = (uint8_t)(ip->ipv4 >> (24 - 8 * i));
    }
  } else if (ip->ip_case == CONDUIT__COMMON__IPADDRESS__IP_IPV6 && ip->ipv6) {
    a.family = 6;
    for (int i = 0; i < 8; i++) {
      a.ip[i] = (uint8_t)(ip->ipv6->first >> (56 - 8 * i));
      a.ip[8 + i] = (uint8_t)(ip->ipv6->last >> (56 - 8 * i));
    }
  } else {
    return MCP_ERR_MALFORMED;
  }
  a.port = (uint16_t)t->port;
  mcp_dest_addr_name(&a, buf, MCP_DEST_ADDR_NAME_MAX);
  return 0;
}

/*
 * Applies one decoded Update to the set: everything that can fail (names,
 * the new array, copies) is prepared first, then the set changes without
 * failing. |names| holds the message's addresses in its order.
 */
static int apply(csess *c, const Conduit__Proxy__Destination__Update *u,
                 char **names, size_t nn, int first) {
  mcp_dest_set *s = c->set;
  const mcp_mem *m = &s->mem;
  size_t base = first ? 0 : s->n; /* the stale content goes first */
  if (u->update_case == CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_ADD) {
    /* Sorted and deduplicated copies, merged with what is held. */
    char **add = nn ? mcp_mem_calloc(m, nn, sizeof(*add)) : NULL;
    char **merged = mcp_mem_calloc(m, base + nn ? base + nn : 1, sizeof(*merged));
    size_t na = 0;
    int rv = (nn && !add) || !merged ? MCP_ERR_NOMEM : 0;
    for (size_t i = 0; rv == 0 && i < nn; i++) {
      if (!(add[na++] = mcp_mem_strdup(m, names[i]))) {
        rv = MCP_ERR_NOMEM;
      }
    }
    if (rv < 0) {
      for (size_t i = 0; add && i < na; i++) {
        mcp_mem_free(m, add[i]);
      }
      mcp_mem_free(m, add);
      mcp_mem_free(m, merged);
      return rv;
    }
    if (na > 1) {
      qsort(add, na, sizeof(*add), cmp_str);
    }
    size_t i = 0, j = 0, k = 0;
    while (i < base || j < na) {
      int cmp = i == base ? 1 : j == na ? -1 : strcmp(s->v[i], add[j]);
      if (cmp < 0) {
        merged[k++] = s->v[i++];
      } else if (cmp > 0) {
        if (k && strcmp(merged[k - 1], add[j]) == 0) {
          mcp_mem_free(m, add[j++]); /* listed twice in the message */
        } else {
          merged[k++] = add[j++];
        }
      } else {
        mcp_mem_free(m, add[j++]); /* held already */
      }
    }
    if (first) {
      set_clear(s);
    }
    mcp_mem_free(m, s->v);
    mcp_mem_free(m, add);
    s->v = merged;
    s->n = k;
    s->exists = 1;
  } else if (u->update_case ==
             CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_REMOVE) {
    if (first) {
      set_clear(s);
    }
    for (size_t i = 0; i < nn; i++) {
      int found;
      size_t at = set_find(s, names[i], &found);
      if (found) { /* an address not held is no error */
        mcp_mem_free(m, s->v[at]);
        memmove(s->v + at, s->v + at + 1, (s->n - at - 1) * sizeof(*s->v));
        s->n--;
      }
    }
  } else {
    set_clear(s);
    s->exists = u->no_endpoints->exists ? 1 : 0;
  }
  return 0;
}

static int sess_recv(void *sess, const uint8_t *in, size_t len,
                     mcp_tstamp ts) {
  csess *c = sess;
  MCP_UNUSED(ts);
  mcp_pballoc pa;
  mcp_pballoc_init(&pa, &c->mem);
  Conduit__Proxy__Destination__Update *u =
      conduit__proxy__destination__update__unpack(&pa.a, len, in);
  if (!u) {
    return pa.failed ? MCP_ERR_NOMEM : MCP_ERR_MALFORMED;
  }
  int rv = 0;
  size_t nn = 0;
  char *buf = NULL, **names = NULL;
  mcp_dest_update_kind kind;
  switch (u->update_case) {
  case CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_ADD:
    kind = MCP_DEST_UPDATE_ADD;
    nn = u->add->n_addrs;
    break;
  case CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_REMOVE:
    kind = MCP_DEST_UPDATE_REMOVE;
    nn = u->remove->n_addrs;
    break;
  case CONDUIT__PROXY__DESTINATION__UPDATE__UPDATE_NO_ENDPOINTS:
    kind = MCP_DEST_UPDATE_NO_ENDPOINTS;
    break;
  default:
    /* No oneof member we know: a newer server's kind of update. */
    conduit__proxy__destination__update__free_unpacked(u, &pa.a);
    return 0;
  }
  if (nn) {
    buf = mcp_mem_malloc(&c->mem, nn * MCP_DEST_ADDR_NAME_MAX);
    names = mcp_mem_malloc(&c->mem, nn * sizeof(*names));
    rv = buf && names ? 0 : MCP_ERR_NOMEM;
  }
  for (size_t i = 0; rv == 0 && i < nn; i++) {
    names[i] = buf + i * MCP_DEST_ADDR_NAME_MAX;
    if (kind == MCP_DEST_UPDATE_ADD) {
      const Conduit__Proxy__Destination__WeightedAddr *wa = u->add->addrs[i];
      rv = tcp_name(wa ? wa->addr : NULL, names[i]);
    } else {
      rv = tcp_name(u->remove->addrs[i], names[i]);
    }
  }
  int first = !c->got;
  if (rv == 0) {
    rv = apply(c, u, names, nn, first);
  }
  if (rv == 0) {
    mcp_dest_set *s = c->set;
    c->got = 1;
    s->stale = 0;
    s->synced = 1;
    s->updates++;
    if (c->fn) {
      mcp_dest_update up;
      memset(&up, 0, sizeof(up));
      up.kind = kind;
      up.addrs = (const char *const *)names;
      up.naddrs = nn;
      up.exists = s->exists;
      up.total = s->n;
      up.first = first;
      c->fn(&up, c->ud);
    }
  }
  mcp_mem_free(&c->mem, names);
  mcp_mem_free(&c->mem, buf);
  conduit__proxy__destination__update__free_unpacked(u, &pa.a);
  return rv;
}

static int sess_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  csess *c = sess;
  MCP_UNUSED(ts);
  if (c->sent) {
    return 0;
  }
  mcp_msg_builder *b;
  int rv = mcp_msg_builder_new(&b, &c->mem);
  if (rv < 0) {
    return rv;
  }
  /* Destination{scheme = 1, path = 2} */
  mcp_msg_builder_len_field(b, 1, c->scheme, strlen(c->scheme));
  mcp_msg_builder_len_field(b, 2, c->path, strlen(c->path));
  rv = mcp_msg_builder_finish(b, NULL, pmsg);
  mcp_msg_builder_del(b);
  if (rv < 0) {
    return rv;
  }
  c->sent = 1;
  return 1;
}

static void sess_del(void *sess) {
  csess *c = sess;
  mcp_mem m = c->mem;
  mcp_mem_free(&m, c->scheme);
  mcp_mem_free(&m, c->path);
  mcp_mem_free(&m, c);
}

static const mcp_stream_ops client_ops = {
    MCP_DEST_API_NAME,
    MCP_STREAM_CLIENT_HALF_CLOSE_AFTER_FIRST |
        MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE,
    sess_recv,
    sess_next,
    NULL,
    NULL,
    NULL,
    NULL,
    sess_del,
    NULL,
    NULL,
};

int mcp_dest_client_open_versioned(mcp_stream **pst, int version,
                                   const mcp_dest_client_options *opts,
                                   mcp_tstamp ts) {
  mcp_dest_client_options o;
  memset(&o, 0, sizeof(o));
  if (!pst || !opts || !mcp_vstruct_known(version, MCP_VSTRUCT_N)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  memcpy(&o, opts,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_dest_client_options),
                           MCP_VSTRUCT_N));
  const char *scheme = o.scheme ? o.scheme : MCP_DEST_SCHEME;
  if (!o.set || !o.authority || !o.authority[0] ||
      !mcp_str_valid(o.authority) || !mcp_str_valid(scheme)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  mcp_mem m;
  mcp_mem_init(&m, o.mem);
  csess *c = mcp_mem_calloc(&m, 1, sizeof(*c));
  if (!c) {
    return MCP_ERR_NOMEM;
  }
  c->mem = m;
  c->set = o.set;
  c->fn = o.on_update;
  c->ud = o.user_data;
  if (!(c->scheme = mcp_mem_strdup(&m, scheme)) ||
      !(c->path = mcp_mem_strdup(&m, o.authority))) {
    sess_del(c);
    return MCP_ERR_NOMEM;
  }
  mcp_stream *st;
  int rv = mcp_stream_new(&st, &client_ops, c, &m, ts); /* frees c on error */
  if (rv < 0) {
    return rv;
  }
  /* Only now, when nothing can fail: the set keeps what it holds, stale
   * until this stream's first message. */
  o.set->stale = 1;
  o.set->synced = 0;
  *pst = st;
  return 0;
}

/* ------------------------------------------------------------------ */
/* Agent: one call per authority, reconnecting                         */
/* ------------------------------------------------------------------ */

typedef struct aslot {
  mcp_dest_agent *a;
  size_t i;
  char *authority;
  mcp_dest_set *set;
  mcp_redial rd;             /* the Get call is the attempt */
  uint64_t updates_at_open;
} aslot;

struct mcp_dest_agent {
  mcp_mem mem;
  mcp_dest_agent_options o;
  char *scheme;
  aslot *slots;
  size_t n;
  mcp_client_def def;
};

#define AGENT_MAX_SLOTS 65536

static const char *agent_method(void *ud, size_t slot) {
  MCP_UNUSED(ud);
  MCP_UNUSED(slot);
  return MCP_DEST_METHOD;
}

static void agent_update(const mcp_dest_update *u, void *ud) {
  aslot *s = ud;
  if (s->a->o.on_update) {
    s->a->o.on_update(s->i, u, s->a->o.user_data);
  }
}

static void agent_report(mcp_dest_agent *a, const mcp_dest_call_end *e) {
  if (a->o.on_end) {
    a->o.on_end(e, a->o.user_data);
  }
}

static int agent_open(void *ud, size_t slot, mcp_tstamp ts, mcp_stream **pst) {
  mcp_dest_agent *a = ud;
  if (slot >= a->n || !mcp_redial_due(&a->slots[slot].rd, ts)) {
    return 0;
  }
  aslot *s = &a->slots[slot];
  mcp_dest_client_options o = {.set = s->set,
                               .authority = s->authority,
                               .scheme = a->scheme,
                               .on_update = agent_update,
                               .user_data = s,
                               .mem = &a->mem};
  int rv = mcp_dest_client_open(pst, &o, ts);
  if (rv < 0) {
    /* Not opened: a failure all the same, paced (never a spin). */
    mcp_dest_call_end e = {slot, rv, 0, "", 0, mcp_redial_ended(&s->rd, ts)};
    agent_report(a, &e);
    return 0;
  }
  mcp_redial_opened(&s->rd, ts);
  s->updates_at_open = mcp_dest_set_updates(s->set);
  return 1;
}

static void agent_ended(void *ud, size_t slot, int status, const char *details,
                        mcp_tstamp ts) {
  mcp_dest_agent *a = ud;
  if (slot >= a->n) {
    return;
  }
  aslot *s = &a->slots[slot];
  uint64_t received = mcp_dest_set_updates(s->set) - s->updates_at_open;
  mcp_redial_received(&s->rd, received);
  mcp_dest_call_end e = {slot,     0, status, details ? details : "",
                         received, mcp_redial_ended(&s->rd, ts)};
  agent_report(a, &e);
}

static mcp_tstamp agent_expiry(void *ud) {
  mcp_dest_agent *a = ud;
  mcp_tstamp t = MCP_TSTAMP_MAX;
  for (size_t i = 0; i < a->n; i++) {
    mcp_tstamp at = mcp_redial_at(&a->slots[i].rd); /* MAX while open */
    t = at < t ? at : t;
  }
  return t;
}

void mcp_dest_agent_del(mcp_dest_agent *a) {
  if (!a) {
    return;
  }
  mcp_mem m = a->mem;
  for (size_t i = 0; a->slots && i < a->n; i++) {
    mcp_mem_free(&m, a->slots[i].authority);
  }
  mcp_mem_free(&m, a->slots);
  mcp_mem_free(&m, a->scheme);
  mcp_mem_free(&m, a);
}

int mcp_dest_agent_new_versioned(mcp_dest_agent **pa, int version,
                                 const mcp_dest_agent_options *opts,
                                 mcp_tstamp ts) {
  mcp_dest_agent_options o;
  memset(&o, 0, sizeof(o));
  if (!pa || !opts || !mcp_vstruct_known(version, MCP_VSTRUCT_N)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  memcpy(&o, opts,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_dest_agent_options),
                           MCP_VSTRUCT_N));
  const char *scheme = o.scheme ? o.scheme : MCP_DEST_SCHEME;
  if (o.nauthorities == 0 || o.nauthorities > AGENT_MAX_SLOTS ||
      !o.authorities || !o.sets || !mcp_str_valid(scheme)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  for (size_t i = 0; i < o.nauthorities; i++) {
    if (!o.sets[i] || !o.authorities[i] || !o.authorities[i][0] ||
        !mcp_str_valid(o.authorities[i])) {
      return MCP_ERR_INVALID_ARGUMENT;
    }
  }
  mcp_mem m;
  mcp_mem_init(&m, o.mem);
  mcp_dest_agent *a = mcp_mem_calloc(&m, 1, sizeof(*a));
  if (!a) {
    return MCP_ERR_NOMEM;
  }
  a->mem = m;
  a->o = o;
  a->o.mem = &a->mem;
  a->n = o.nauthorities;
  a->scheme = mcp_mem_strdup(&m, scheme);
  a->slots = mcp_mem_calloc(&m, a->n, sizeof(*a->slots));
  if (!a->scheme || !a->slots) {
    mcp_dest_agent_del(a);
    return MCP_ERR_NOMEM;
  }
  for (size_t i = 0; i < a->n; i++) {
    aslot *s = &a->slots[i];
    s->a = a;
    s->i = i;
    s->set = o.sets[i];
    if (!(s->authority = mcp_mem_strdup(&m, o.authorities[i]))) {
      mcp_dest_agent_del(a);
      return MCP_ERR_NOMEM;
    }
    mcp_redial_init(&s->rd, &o.backoff, o.rand, o.rand_user_data, ts);
  }
  a->o.authorities = NULL; /* the caller's: not kept */
  a->o.sets = NULL;
  a->def.nslots = a->n;
  a->def.method = agent_method;
  a->def.open = agent_open;
  a->def.ended = agent_ended;
  a->def.get_expiry = agent_expiry;
  a->def.user_data = a;
  *pa = a;
  return 0;
}

const mcp_client_def *mcp_dest_agent_client_def(mcp_dest_agent *a) {
  return a ? &a->def : NULL;
}
