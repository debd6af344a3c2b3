/* Admission policy shared by the transports (mcp.h, "Admission"): stream
 * limits, the new-stream token buckets (the listener's and each peer's),
 * and initial slots with per-peer shares and round-robin across peers. No
 * I/O, time is an argument. */
#include <assert.h>
#include <stddef.h>

#include "engine_int.h"

typedef struct peer peer;
enum { Q_RATE = 0, Q_SLOT = 1 }; /* the two waiting queues */
typedef struct ticket_list {
  mcp_admit_ticket *head, *tail;
  size_t n;
} ticket_list;

typedef enum tstate {
  T_RATE,    /* waiting for a token (in a->rate) */
  T_WAIT,    /* waiting for a slot (in a->wait and its peer's list) */
  T_SLOT,    /* running, holding a slot (in a->slots) */
  T_RUNNING  /* running, no slot */
} tstate;

struct mcp_admit_ticket {
  peer *p;
  void *user;
  tstate st;
  int initial;
  mcp_tstamp arrived, slot_until;
  mcp_admit_ticket *prev, *next;   /* a->rate, a->wait or a->slots */
  mcp_admit_ticket *pprev, *pnext; /* its peer's list in that queue */
  mcp_admit_ticket *aprev, *anext; /* every ticket (for mcp_admit_del) */
};

struct peer {
  char *key;
  size_t nstreams, nslots;
  /* Its new-stream bucket (rule 5): |tokens| at |tokens_at|. */
  double tokens;
  mcp_tstamp tokens_at;
  /* Without a stream and remembered for its bucket: in a->idle, oldest
   * first. */
  int idle;
  peer *iprev, *inext;
  /* Its streams waiting for a token [Q_RATE] or a slot [Q_SLOT] (through
   * pprev/pnext), and its place in that queue's ring of peers. */
  ticket_list waiting[2];
  peer *hnext; /* hash chain */
  peer *rprev[2], *rnext[2];
  int in_ring[2];
};

struct mcp_admit {
  mcp_mem mem;
  mcp_admit_options o;
  mcp_tstamp last_ts;
  double tokens;
  mcp_tstamp tokens_at;
  size_t nstreams;
  ticket_list rate, wait, slots;
  mcp_admit_ticket *all;
  peer **buckets;
  size_t nbuckets, npeers; /* every peer in the table, idle ones included */
  peer *idle_head, *idle_tail;
  size_t nidle;
  peer *ring[2]; /* the next peer to serve, NULL when none waits */
  mcp_admit_stats stats;
  char peer_rate_details[160]; /* MCP_ADMIT_PEER_RATE's details */
};

/* The versions of the structs (mcp.h): each a prefix of the next. */
static const size_t options_sizes[] = {
    0, offsetof(mcp_admit_options, peer_stream_rate), sizeof(mcp_admit_options)};
static const size_t stats_sizes[] = {
    0, offsetof(mcp_admit_stats, peer_rate_delayed), sizeof(mcp_admit_stats)};
#define NV 3

/* ---- options ---- */

static void options_normalize(mcp_admit_options *o) {
  if (o->max_streams == 0)
    o->max_streams = MCP_ADMIT_DEFAULT_MAX_STREAMS;
  if (o->max_streams_per_peer == 0)
    o->max_streams_per_peer =
        o->max_streams == SIZE_MAX ? SIZE_MAX
                                   : (o->max_streams / 4 ? o->max_streams / 4 : 1);
  if (o->stream_rate == 0)
    o->stream_rate = MCP_ADMIT_DEFAULT_STREAM_RATE;
  if (o->stream_burst == 0)
    o->stream_burst = MCP_ADMIT_DEFAULT_STREAM_BURST;
  if (o->max_initial == 0)
    o->max_initial = MCP_ADMIT_DEFAULT_MAX_INITIAL;
  if (o->max_initial_per_peer == 0)
    o->max_initial_per_peer =
        o->max_initial == SIZE_MAX ? SIZE_MAX
                                   : (o->max_initial / 4 ? o->max_initial / 4 : 1);
  if (o->initial_timeout == 0)
    o->initial_timeout = MCP_ADMIT_DEFAULT_INITIAL_TIMEOUT;
  if (o->wait_timeout == 0)
    o->wait_timeout = MCP_ADMIT_DEFAULT_WAIT_TIMEOUT;
  if (o->peer_stream_rate == 0)
    o->peer_stream_rate = MCP_ADMIT_DEFAULT_PEER_STREAM_RATE;
  if (o->peer_stream_burst == 0)
    o->peer_stream_burst = MCP_ADMIT_DEFAULT_PEER_STREAM_BURST;
  if (o->max_rate_peers == 0)
    o->max_rate_peers = MCP_ADMIT_DEFAULT_MAX_RATE_PEERS;
}

void mcp_admit_options_normalize_versioned(int version, mcp_admit_options *o) {
  mcp_admit_options full;
  memset(&full, 0, sizeof(full));
  size_t n = mcp_vstruct_size(version, options_sizes, NV);
  memcpy(&full, o, n);
  options_normalize(&full);
  memcpy(o, &full, n);
}

void mcp_admit_options_default_versioned(int version, mcp_admit_options *o) {
  mcp_admit_options full;
  memset(&full, 0, sizeof(full));
  options_normalize(&full);
  memcpy(o, &full,
         mcp_vstruct_size(version, options_sizes, NV));
}

/* ---- lists ---- */

static void l_push(ticket_list *l, mcp_admit_ticket *t) {
  t->next = NULL;
  t->prev = l->tail;
  if (l->tail)
    l->tail->next = t;
  else
    l->head = t;
  l->tail = t;
  l->n++;
}

/* Inserts |t| by arrival time: tokens are given round robin across peers,
 * so a stream may reach the slot queue after a younger one. From the tail,
 * where it nearly always goes. */
static void l_insert_by_arrival(ticket_list *l, mcp_admit_ticket *t) {
  mcp_admit_ticket *after = l->tail;
  while (after && after->arrived > t->arrived)
    after = after->prev;
  t->prev = after;
  t->next = after ? after->next : l->head;
  if (t->next)
    t->next->prev = t;
  else
    l->tail = t;
  if (after)
    after->next = t;
  else
    l->head = t;
  l->n++;
}

static void l_remove(ticket_list *l, mcp_admit_ticket *t) {
  if (t->prev)
    t->prev->next = t->next;
  else
    l->head = t->next;
  if (t->next)
    t->next->prev = t->prev;
  else
    l->tail = t->prev;
  t->prev = t->next = NULL;
  l->n--;
}

static void pl_push(ticket_list *l, mcp_admit_ticket *t) {
  t->pnext = NULL;
  t->pprev = l->tail;
  if (l->tail)
    l->tail->pnext = t;
  else
    l->head = t;
  l->tail = t;
  l->n++;
}

static void pl_remove(ticket_list *l, mcp_admit_ticket *t) {
  if (t->pprev)
    t->pprev->pnext = t->pnext;
  else
    l->head = t->pnext;
  if (t->pnext)
    t->pnext->pprev = t->pprev;
  else
    l->tail = t->pprev;
  t->pprev = t->pnext = NULL;
  l->n--;
}

/* ---- peers ---- */

static size_t hash(const char *s) {
  uint64_t h = 1469598103934665603u; /* FNV-1a */
  for (; *s; s++) {
    h ^= (uint8_t)*s;
    h *= 1099511628211u;
  }
  return (size_t)h;
}

static peer **slot_of(mcp_admit *a, const char *key) {
  peer **pp = &a->buckets[hash(key) & (a->nbuckets - 1)];
  while (*pp && strcmp((*pp)->key, key) != 0)
    pp = &(*pp)->hnext;
  return pp;
}

/* Doubles the table when it is full; a failure leaves it as it was (and
 * only makes the chains longer). */
static void grow(mcp_admit *a) {
  size_t n = a->nbuckets * 2;
  peer **b = mcp_mem_calloc(&a->mem, n, sizeof(*b));
  if (!b)
    return;
  for (size_t i = 0; i < a->nbuckets; i++) {
    peer *p = a->buckets[i], *next;
    for (; p; p = next) {
      next = p->hnext;
      size_t k = hash(p->key) & (n - 1);
      p->hnext = b[k];
      b[k] = p;
    }
  }
  mcp_mem_free(&a->mem, a->buckets);
  a->buckets = b;
  a->nbuckets = n;
}

/* ---- the per-peer buckets (rule 5) ---- */

static int peer_rate_limited(const mcp_admit *a) {
  return a->o.peer_stream_rate != UINT32_MAX;
}

/* |p|'s tokens at |ts| (not stored). */
static double peer_tokens_at(const mcp_admit *a, const peer *p,
                             mcp_tstamp ts) {
  double t = p->tokens + (double)(ts - p->tokens_at) *
                             (double)a->o.peer_stream_rate / 1e9;
  return t > (double)a->o.peer_stream_burst ? (double)a->o.peer_stream_burst
                                            : t;
}

static void peer_refill(const mcp_admit *a, peer *p, mcp_tstamp ts) {
  p->tokens = peer_tokens_at(a, p, ts);
  p->tokens_at = ts;
}

static int peer_has_token(const mcp_admit *a, peer *p, mcp_tstamp ts) {
  if (!peer_rate_limited(a))
    return 1;
  peer_refill(a, p, ts);
  return p->tokens >= 1.0;
}

static void peer_take_token(const mcp_admit *a, peer *p) {
  if (peer_rate_limited(a))
    p->tokens -= 1.0;
}

/* When a bucket holding |tokens| at |at|, refilled at |rate| per second,
 * has a whole one. */
static mcp_tstamp token_time(double tokens, mcp_tstamp at, uint32_t rate) {
  double missing = 1.0 - tokens;
  if (missing <= 0)
    return at;
  return at + (mcp_tstamp)(missing * 1e9 / (double)rate) + 1;
}

static void idle_unlink(mcp_admit *a, peer *p) {
  if (p->iprev)
    p->iprev->inext = p->inext;
  else
    a->idle_head = p->inext;
  if (p->inext)
    p->inext->iprev = p->iprev;
  else
    a->idle_tail = p->iprev;
  p->iprev = p->inext = NULL;
  p->idle = 0;
  a->nidle--;
}

static void peer_free(mcp_admit *a, peer *p) {
  peer **pp = slot_of(a, p->key);
  *pp = p->hnext;
  a->npeers--;
  mcp_mem_free(&a->mem, p->key);
  mcp_mem_free(&a->mem, p);
}

/* Forgets peers without a stream whose bucket is full again (as if never
 * seen) and, past |max_rate_peers|, the oldest. The list is in the order
 * they went idle, and every bucket refills at the same rate, so the full
 * ones are mostly at its head; one behind a fuller one waits its turn (at
 * most burst / rate longer). */
static void forget_idle(mcp_admit *a, mcp_tstamp ts) {
  while (a->idle_head &&
         (a->nidle > a->o.max_rate_peers ||
          peer_tokens_at(a, a->idle_head, ts) >=
              (double)a->o.peer_stream_burst)) {
    peer *p = a->idle_head;
    if (a->nidle > a->o.max_rate_peers)
      a->stats.rate_peers_forgotten++;
    idle_unlink(a, p);
    peer_free(a, p);
  }
}

static peer *peer_get(mcp_admit *a, const char *key, mcp_tstamp ts) {
  peer **pp = slot_of(a, key);
  if (*pp) {
    if ((*pp)->idle)
      idle_unlink(a, *pp);
    return *pp;
  }
  peer *p = mcp_mem_calloc(&a->mem, 1, sizeof(*p));
  if (!p)
    return NULL;
  p->key = mcp_mem_strdup(&a->mem, key);
  if (!p->key) {
    mcp_mem_free(&a->mem, p);
    return NULL;
  }
  p->tokens = (double)a->o.peer_stream_burst;
  p->tokens_at = ts;
  *pp = p;
  a->npeers++;
  if (a->npeers > a->nbuckets)
    grow(a);
  return p;
}

static void ring_add(mcp_admit *a, int q, peer *p) {
  if (p->in_ring[q])
    return;
  p->in_ring[q] = 1;
  peer *r = a->ring[q];
  if (!r) {
    p->rprev[q] = p->rnext[q] = p;
    a->ring[q] = p;
    return;
  }
  /* Last in the round: just before the next one to serve. */
  p->rnext[q] = r;
  p->rprev[q] = r->rprev[q];
  p->rprev[q]->rnext[q] = p;
  r->rprev[q] = p;
}

static void ring_remove(mcp_admit *a, int q, peer *p) {
  if (!p->in_ring[q])
    return;
  p->in_ring[q] = 0;
  if (p->rnext[q] == p) {
    a->ring[q] = NULL;
  } else {
    p->rprev[q]->rnext[q] = p->rnext[q];
    p->rnext[q]->rprev[q] = p->rprev[q];
    if (a->ring[q] == p)
      a->ring[q] = p->rnext[q];
  }
  p->rprev[q] = p->rnext[q] = NULL;
}

/* |p| lost a stream: a peer with none left is forgotten, or remembered
 * while its bucket is not full (else a client that redials after each
 * failure would get a full bucket each time). */
static void peer_put(mcp_admit *a, peer *p) {
  if (p->nstreams > 0)
    return;
  assert(p->waiting[0].n == 0 && p->waiting[1].n == 0 && p->nslots == 0 &&
         !p->in_ring[0] && !p->in_ring[1] && !p->idle);
  if (!peer_rate_limited(a) ||
      peer_tokens_at(a, p, a->last_ts) >= (double)a->o.peer_stream_burst) {
    peer_free(a, p);
    return;
  }
  p->idle = 1;
  p->inext = NULL;
  p->iprev = a->idle_tail;
  if (a->idle_tail)
    a->idle_tail->inext = p;
  else
    a->idle_head = p;
  a->idle_tail = p;
  a->nidle++;
  forget_idle(a, a->last_ts);
}

/* ---- the object ---- */

/* Appends |s| to |buf| at |*n| (the buffer is large enough: 160 bytes for
 * the text and two 10-digit numbers). */
static void put(char *buf, size_t *n, const char *s) {
  size_t k = strlen(s);
  memcpy(buf + *n, s, k);
  *n += k;
}

static void put_u32(char *buf, size_t *n, uint32_t v) {
  char d[10];
  int k = 0;
  do {
    d[k++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (k)
    buf[(*n)++] = d[--k];
}

/* MCP_ADMIT_PEER_RATE's details, with the numbers in force (the core has
 * no stdio). */
static void peer_rate_details(mcp_admit *a) {
  char *b = a->peer_rate_details;
  size_t n = 0;
  put(b, &n, "too many new streams from this peer: more than ");
  put_u32(b, &n, a->o.peer_stream_rate);
  put(b, &n, " per second after a burst of ");
  put_u32(b, &n, a->o.peer_stream_burst);
  put(b, &n, "; retry with backoff");
  b[n] = '\0';
}

static int admit_new(mcp_admit **padmit, const mcp_admit_options *opts,
                     const mcp_mem *mem, mcp_tstamp ts);

int mcp_admit_new_versioned(mcp_admit **padmit, int version,
                            const mcp_admit_options *opts, const mcp_mem *mem,
                            mcp_tstamp ts) {
  mcp_admit_options o;
  memset(&o, 0, sizeof(o));
  if (opts) {
    if (!mcp_vstruct_known(version, NV)) {
      return MCP_ERR_INVALID_ARGUMENT;
    }
    memcpy(&o, opts,
           mcp_vstruct_size(version, options_sizes, NV));
  }
  return admit_new(padmit, &o, mem, ts);
}

static int admit_new(mcp_admit **padmit, const mcp_admit_options *opts,
                     const mcp_mem *mem, mcp_tstamp ts) {
  if (!padmit)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_mem m;
  mcp_mem_init(&m, mem);
  mcp_admit *a = mcp_mem_calloc(&m, 1, sizeof(*a));
  if (!a)
    return MCP_ERR_NOMEM;
  a->mem = m;
  if (opts)
    a->o = *opts;
  mcp_admit_options_normalize(&a->o);
  a->nbuckets = 16;
  a->buckets = mcp_mem_calloc(&m, a->nbuckets, sizeof(*a->buckets));
  if (!a->buckets) {
    mcp_mem_free(&m, a);
    return MCP_ERR_NOMEM;
  }
  a->tokens = (double)a->o.stream_burst;
  a->tokens_at = ts;
  a->last_ts = ts;
  peer_rate_details(a);
  *padmit = a;
  return 0;
}

void mcp_admit_del(mcp_admit *a) {
  if (!a)
    return;
  mcp_admit_ticket *t, *tnext;
  for (t = a->all; t; t = tnext) {
    tnext = t->anext;
    mcp_mem_free(&a->mem, t);
  }
  for (size_t i = 0; i < a->nbuckets; i++) {
    peer *p = a->buckets[i], *next;
    for (; p; p = next) {
      next = p->hnext;
      mcp_mem_free(&a->mem, p->key);
      mcp_mem_free(&a->mem, p);
    }
  }
  mcp_mem_free(&a->mem, a->buckets);
  mcp_mem_free(&a->mem, a);
}

const mcp_admit_options *mcp_admit_get_options(const mcp_admit *a) {
  return &a->o;
}

static void advance(mcp_admit *a, mcp_tstamp ts) {
  assert(ts >= a->last_ts && "time went backwards");
  a->last_ts = ts;
  forget_idle(a, ts);
}

static int rate_limited(const mcp_admit *a) {
  return a->o.stream_rate != UINT32_MAX;
}

/* 1 when a stream waiting for a token could take the listener's next one
 * now (its peer has a token): a new stream then waits behind it. Those
 * waiting only for their peer's token do not hold up other peers. At most
 * |stream_burst| peers wait. */
static int global_waiting(mcp_admit *a, mcp_tstamp ts) {
  if (a->rate.n == 0)
    return 0;
  if (!peer_rate_limited(a))
    return 1;
  peer *p = a->ring[Q_RATE];
  do {
    if (peer_has_token(a, p, ts))
      return 1;
    p = p->rnext[Q_RATE];
  } while (p != a->ring[Q_RATE]);
  return 0;
}

static void refill(mcp_admit *a, mcp_tstamp ts) {
  mcp_tstamp dt = ts - a->tokens_at;
  a->tokens_at = ts;
  a->tokens += (double)dt * (double)a->o.stream_rate / 1e9;
  if (a->tokens > (double)a->o.stream_burst)
    a->tokens = (double)a->o.stream_burst;
}


static void hold_slot(mcp_admit *a, mcp_admit_ticket *t, mcp_tstamp ts) {
  t->st = T_SLOT;
  t->slot_until = a->o.initial_timeout > MCP_TSTAMP_MAX - ts
                      ? MCP_TSTAMP_MAX
                      : ts + a->o.initial_timeout;
  t->p->nslots++;
  l_push(&a->slots, t);
  if (a->slots.n > a->stats.initial_peak)
    a->stats.initial_peak = a->slots.n;
}

static void drop_slot(mcp_admit *a, mcp_admit_ticket *t) {
  l_remove(&a->slots, t);
  t->p->nslots--;
  t->st = T_RUNNING;
}

static int slot_free_for(const mcp_admit *a, const peer *p) {
  return a->slots.n < a->o.max_initial && p->nslots < a->o.max_initial_per_peer;
}

static ticket_list *queue_of(mcp_admit *a, int q) {
  return q == Q_RATE ? &a->rate : &a->wait;
}

/* Queues |t| in |q|: in arrival order (deadlines) and in its peer's list
 * (round robin). */
static void enqueue(mcp_admit *a, int q, mcp_admit_ticket *t) {
  t->st = q == Q_RATE ? T_RATE : T_WAIT;
  l_insert_by_arrival(queue_of(a, q), t);
  pl_push(&t->p->waiting[q], t);
  ring_add(a, q, t->p);
}

static void dequeue(mcp_admit *a, mcp_admit_ticket *t) {
  int q = t->st == T_RATE ? Q_RATE : Q_SLOT;
  l_remove(queue_of(a, q), t);
  pl_remove(&t->p->waiting[q], t);
  if (t->p->waiting[q].n == 0)
    ring_remove(a, q, t->p);
}

static void wait_slot(mcp_admit *a, mcp_admit_ticket *t) {
  enqueue(a, Q_SLOT, t);
}

/* A stream past the rate: it runs, with a slot if it needs one and one is
 * free to it, or it waits for one. Those already waiting go first, unless
 * only peers at their share wait (mcp_admit_next() settles that). */
static mcp_admit_verdict past_rate(mcp_admit *a, mcp_admit_ticket *t,
                                   mcp_tstamp ts) {
  if (!t->initial || a->o.max_initial == SIZE_MAX) {
    t->st = T_RUNNING;
    return MCP_ADMIT_RUN;
  }
  if (a->wait.n == 0 && slot_free_for(a, t->p)) {
    hold_slot(a, t, ts);
    return MCP_ADMIT_RUN;
  }
  wait_slot(a, t);
  return MCP_ADMIT_WAIT;
}

static void refuse(const mcp_admit *a, mcp_admit_result *res,
                   mcp_admit_reason why) {
  res->verdict = MCP_ADMIT_REFUSE;
  res->reason = why;
  switch (why) {
  case MCP_ADMIT_PEER_RATE:
    res->status = MCP_CODE_RESOURCE_EXHAUSTED;
    res->details = a->peer_rate_details;
    break;
  case MCP_ADMIT_MAX_STREAMS:
    res->status = MCP_CODE_RESOURCE_EXHAUSTED;
    res->details = "too many streams";
    break;
  case MCP_ADMIT_PEER_STREAMS:
    res->status = MCP_CODE_RESOURCE_EXHAUSTED;
    res->details = "too many streams from this peer";
    break;
  case MCP_ADMIT_RATE:
    res->status = MCP_CODE_UNAVAILABLE;
    res->details = "too many new streams; retry later";
    break;
  default:
    res->status = MCP_CODE_UNAVAILABLE;
    res->details = "server busy: not admitted within the wait timeout; "
                   "retry later";
    break;
  }
}

static void run(mcp_admit_result *res, void *user) {
  memset(res, 0, sizeof(*res));
  res->verdict = MCP_ADMIT_RUN;
  res->user = user;
}

int mcp_admit_stream(mcp_admit *a, const char *peer_key, int initial,
                     void *user, mcp_tstamp ts, mcp_admit_ticket **pticket,
                     mcp_admit_result *res) {
  assert(a && pticket && res);
  advance(a, ts);
  memset(res, 0, sizeof(*res));
  res->user = user;
  *pticket = NULL;
  const char *key = peer_key ? peer_key : "";
  if (a->o.max_streams != SIZE_MAX && a->nstreams >= a->o.max_streams) {
    a->stats.refused_max_streams++;
    refuse(a, res, MCP_ADMIT_MAX_STREAMS);
    return 0;
  }
  peer **pp = slot_of(a, key);
  if (*pp && a->o.max_streams_per_peer != SIZE_MAX &&
      (*pp)->nstreams >= a->o.max_streams_per_peer) {
    a->stats.refused_peer_streams++;
    refuse(a, res, MCP_ADMIT_PEER_STREAMS);
    return 0;
  }
  /* Decided before anything is allocated, so that NOMEM changes nothing.
   * A token of the listener's bucket (and none of its streams waiting for
   * one: they come first) and one of the peer's (a peer not in the table
   * has a full bucket), with none of its own streams waiting before it. */
  size_t pwaiting = *pp ? (*pp)->waiting[Q_RATE].n : 0;
  int ptoken = !*pp || peer_has_token(a, *pp, ts);
  int token = 0;
  if (pwaiting == 0 && ptoken && !global_waiting(a, ts)) {
    if (rate_limited(a))
      refill(a, ts);
    token = !rate_limited(a) || a->tokens >= 1.0;
  }
  /* The peer's queue holds a quarter of its burst: a client redialing
   * after each failure waits its turn, a flood is refused at once. */
  size_t pshare =
      a->o.peer_stream_burst / 4 ? a->o.peer_stream_burst / 4 : 1;
  if (!token && !ptoken && pwaiting >= pshare) {
    a->stats.refused_peer_rate++;
    refuse(a, res, MCP_ADMIT_PEER_RATE);
    return 0;
  }
  /* The token queue holds |stream_burst|, a quarter of it per peer, so
   * one peer's flood cannot keep others from waiting their turn. */
  size_t share = a->o.stream_burst / 4 ? a->o.stream_burst / 4 : 1;
  if (!token && (a->rate.n >= a->o.stream_burst || pwaiting >= share)) {
    a->stats.refused_rate++;
    refuse(a, res, MCP_ADMIT_RATE);
    return 0;
  }
  mcp_admit_ticket *t = mcp_mem_calloc(&a->mem, 1, sizeof(*t));
  if (!t)
    return MCP_ERR_NOMEM;
  peer *p = peer_get(a, key, ts);
  if (!p) {
    mcp_mem_free(&a->mem, t);
    return MCP_ERR_NOMEM;
  }
  t->p = p;
  t->user = user;
  t->initial = initial != 0;
  t->arrived = ts;
  p->nstreams++;
  a->nstreams++;
  t->anext = a->all;
  if (a->all)
    a->all->aprev = t;
  a->all = t;
  *pticket = t;
  if (!token) {
    if (!ptoken)
      a->stats.peer_rate_delayed++;
    enqueue(a, Q_RATE, t);
    res->verdict = MCP_ADMIT_WAIT;
    return 0;
  }
  if (rate_limited(a))
    a->tokens -= 1.0;
  peer_take_token(a, p);
  res->verdict = past_rate(a, t, ts);
  return 0;
}

/* Frees a ticket that is in no list. */
static void ticket_free(mcp_admit *a, mcp_admit_ticket *t) {
  peer *p = t->p;
  p->nstreams--;
  a->nstreams--;
  if (t->aprev)
    t->aprev->anext = t->anext;
  else
    a->all = t->anext;
  if (t->anext)
    t->anext->aprev = t->aprev;
  mcp_mem_free(&a->mem, t);
  peer_put(a, p);
}

static mcp_tstamp deadline(const mcp_admit *a, const mcp_admit_ticket *t) {
  return a->o.wait_timeout > MCP_TSTAMP_MAX - t->arrived
             ? MCP_TSTAMP_MAX
             : t->arrived + a->o.wait_timeout;
}

/* The next waiting stream of |q|, round robin across peers; for slots,
 * only from a peer below its share. NULL when none. */
static mcp_admit_ticket *pick(mcp_admit *a, int q, mcp_tstamp ts) {
  peer *p = a->ring[q];
  if (!p)
    return NULL;
  do {
    if (q == Q_RATE ? peer_has_token(a, p, ts)
                    : p->nslots < a->o.max_initial_per_peer) {
      mcp_admit_ticket *t = p->waiting[q].head;
      a->ring[q] = p->rnext[q]; /* the next turn is the next peer's */
      dequeue(a, t);
      return t;
    }
    p = p->rnext[q];
  } while (p != a->ring[q]);
  return NULL;
}

int mcp_admit_next(mcp_admit *a, mcp_tstamp ts, mcp_admit_result *res) {
  advance(a, ts);
  /* Slots held too long go back; their streams go on without one. */
  while (a->slots.head && a->slots.head->slot_until <= ts) {
    a->stats.initial_timeouts++;
    drop_slot(a, a->slots.head);
  }
  /* Both queues are in arrival order: their heads wait the longest. */
  ticket_list *lists[2] = {&a->rate, &a->wait};
  for (int i = 0; i < 2; i++) {
    mcp_admit_ticket *t = lists[i]->head;
    if (t && deadline(a, t) <= ts) {
      dequeue(a, t);
      a->stats.refused_wait_timeout++;
      memset(res, 0, sizeof(*res));
      refuse(a, res, MCP_ADMIT_WAIT_TIMEOUT);
      res->user = t->user;
      ticket_free(a, t);
      return 1;
    }
  }
  while (a->rate.head) {
    if (rate_limited(a)) {
      refill(a, ts);
      if (a->tokens < 1.0)
        break;
    }
    mcp_admit_ticket *t = pick(a, Q_RATE, ts); /* one with a peer token */
    if (!t)
      break;
    if (rate_limited(a))
      a->tokens -= 1.0;
    peer_take_token(a, t->p);
    if (past_rate(a, t, ts) == MCP_ADMIT_RUN) {
      run(res, t->user);
      return 1;
    }
  }
  if (a->wait.n > 0 && a->slots.n < a->o.max_initial) {
    mcp_admit_ticket *t = pick(a, Q_SLOT, ts);
    if (t) {
      hold_slot(a, t, ts);
      run(res, t->user);
      return 1;
    }
  }
  return 0;
}

mcp_tstamp mcp_admit_get_expiry(const mcp_admit *a) {
  mcp_tstamp at = MCP_TSTAMP_MAX;
  if (a->slots.head && a->slots.head->slot_until < at)
    at = a->slots.head->slot_until;
  if (a->rate.head) {
    mcp_tstamp d = deadline(a, a->rate.head);
    if (d < at)
      at = d;
    /* When the listener's next token is there and a waiting peer has one
     * of its own (the later of the two). */
    mcp_tstamp tok =
        rate_limited(a) ? token_time(a->tokens, a->tokens_at, a->o.stream_rate)
                        : a->tokens_at;
    if (peer_rate_limited(a)) {
      mcp_tstamp ptok = MCP_TSTAMP_MAX;
      const peer *p = a->ring[Q_RATE];
      do { /* at most |stream_burst| waiting peers */
        mcp_tstamp pt =
            token_time(p->tokens, p->tokens_at, a->o.peer_stream_rate);
        if (pt < ptok)
          ptok = pt;
        p = p->rnext[Q_RATE];
      } while (p != a->ring[Q_RATE]);
      if (ptok > tok)
        tok = ptok;
    }
    if (tok < at)
      at = tok;
  }
  if (a->wait.head) {
    mcp_tstamp d = deadline(a, a->wait.head);
    if (d < at)
      at = d;
  }
  return at;
}

int mcp_admit_ticket_initial(const mcp_admit_ticket *t) {
  return t && t->st == T_SLOT;
}

void mcp_admit_initial_done(mcp_admit *a, mcp_admit_ticket *t) {
  if (!t || t->st != T_SLOT)
    return;
  a->stats.initial_sent++;
  drop_slot(a, t);
}

void mcp_admit_release(mcp_admit *a, mcp_admit_ticket *t) {
  if (!t)
    return;
  switch (t->st) {
  case T_RATE:
  case T_WAIT:
    dequeue(a, t);
    break;
  case T_SLOT:
    drop_slot(a, t);
    break;
  case T_RUNNING:
    break;
  }
  ticket_free(a, t);
}

static void get_stats(const mcp_admit *a, mcp_admit_stats *st);

void mcp_admit_get_stats_versioned(const mcp_admit *a, int version,
                                   mcp_admit_stats *out) {
  mcp_admit_stats st;
  get_stats(a, &st);
  memcpy(out, &st,
         mcp_vstruct_size(version, stats_sizes, NV));
}

static void get_stats(const mcp_admit *a, mcp_admit_stats *st) {
  *st = a->stats;
  st->streams = a->nstreams;
  st->waiting_rate = a->rate.n;
  st->waiting_initial = a->wait.n;
  st->initial = a->slots.n;
  st->peers = a->npeers - a->nidle;
  st->rate_peers = a->nidle;
}

void mcp_admit_peer_key(const char *peer, char *buf, size_t len) {
  if (!len)
    return;
  const char *p = peer ? peer : "";
  size_t n = strlen(p);
  if (strncmp(p, "ipv4:", 5) == 0 || strncmp(p, "ipv6:", 5) == 0) {
    const char *colon = strrchr(p, ':');
    if (colon > p + 4)
      n = (size_t)(colon - p);
  }
  if (n >= len)
    n = len - 1;
  memcpy(buf, p, n);
  buf[n] = '\0';
}
