/* Reconnection, the one policy of every client: the default table, the
 * jittered exponential backoff that never collapses to zero after
 * short-lived streams, its healthy rule, and mcp_redial (when the next
 * attempt is due). Pure arithmetic, time and randomness injected. */
#include "engine_int.h"

/* What an mcp_backoff holds. The public type is storage only: each call
 * copies in and out (64 bytes), which keeps the layout private without
 * breaking C's aliasing rules. */
typedef struct impl {
  mcp_backoff_options o;
  mcp_tstamp nominal;
  mcp_rand_fn rand;
  void *rand_user_data;
  uint64_t state;
} impl;
_Static_assert(sizeof(impl) <= sizeof(mcp_backoff), "mcp_backoff too small");

static impl load(const mcp_backoff *b) {
  impl x;
  memcpy(&x, b, sizeof(x));
  return x;
}

static void store(mcp_backoff *b, const impl *x) { memcpy(b, x, sizeof(*x)); }

/* The one table of defaults (mcp_backoff_options in mcp.h says why). */
static const mcp_backoff_options defaults = {
    .initial = MCP_SECONDS,
    .multiplier = 1.6,
    .jitter = 0.2,
    .max = 120 * MCP_SECONDS,
};

mcp_backoff_options mcp_backoff_defaults(void) { return defaults; }

static void init(impl *b, const mcp_backoff_options *o, mcp_rand_fn rand,
                 void *rand_user_data, const void *seed) {
  memset(b, 0, sizeof(*b));
  if (o) {
    b->o = *o;
  }
  if (b->o.initial == 0) {
    b->o.initial = defaults.initial;
  }
  if (!(b->o.multiplier >= 1.0)) {
    b->o.multiplier = defaults.multiplier;
  }
  if (!(b->o.jitter >= 0.0 && b->o.jitter < 1.0)) {
    b->o.jitter = defaults.jitter;
  }
  if (b->o.max == 0) {
    b->o.max = defaults.max;
  }
  if (b->o.initial > b->o.max) {
    b->o.initial = b->o.max;
  }
  b->nominal = b->o.initial;
  b->rand = rand;
  b->rand_user_data = rand_user_data;
  b->state = (uint64_t)(uintptr_t)seed; /* a seed, when no rand was given */
}

void mcp_backoff_init(mcp_backoff *b, const mcp_backoff_options *o,
                      mcp_rand_fn rand, void *rand_user_data) {
  impl x;
  init(&x, o, rand, rand_user_data, b);
  memset(b, 0, sizeof(*b));
  store(b, &x);
}

static double uniform01(impl *b) {
  uint8_t r[4];
  if (b->rand) {
    b->rand(r, sizeof(r), b->rand_user_data);
  } else {
    mcp_rand_splitmix64(r, sizeof(r), &b->state);
  }
  uint32_t x = (uint32_t)r[0] << 24 | (uint32_t)r[1] << 16 |
               (uint32_t)r[2] << 8 | (uint32_t)r[3];
  return (double)x / 4294967296.0;
}

mcp_tstamp mcp_backoff_next(mcp_backoff *pb) {
  impl x = load(pb), *b = &x;
  double j = b->o.jitter;
  double d = (double)b->nominal * (1.0 - j + 2.0 * j * uniform01(b));
  mcp_tstamp delay = d >= (double)b->o.max ? b->o.max : (mcp_tstamp)d;
  double grown = (double)b->nominal * b->o.multiplier;
  b->nominal = grown >= (double)b->o.max ? b->o.max : (mcp_tstamp)grown;
  store(pb, b);
  return delay;
}

void mcp_backoff_stream_ended(mcp_backoff *pb, mcp_tstamp lived,
                              uint64_t received) {
  impl x = load(pb), *b = &x;
  /* A stream that dies young (even after a message) must not reset the
   * delay, or a peer that fails each stream at once is hammered. */
  if (received > 0 && lived >= b->nominal) {
    b->nominal = b->o.initial;
  }
  store(pb, b);
}

mcp_tstamp mcp_backoff_nominal(const mcp_backoff *b) { return load(b).nominal; }

/* ------------------------------------------------------------------ */
/* mcp_redial                                                          */
/* ------------------------------------------------------------------ */

typedef struct redial {
  mcp_backoff bo;
  mcp_tstamp at;        /* the next attempt is due */
  mcp_tstamp opened_at; /* the attempt open started */
  uint64_t received;    /* messages on the attempt open */
  uint64_t open;
} redial;
_Static_assert(sizeof(redial) <= sizeof(mcp_redial), "mcp_redial too small");
_Static_assert(_Alignof(redial) <= _Alignof(mcp_redial), "mcp_redial align");

/* mcp_redial's bytes hold a redial (stored through memcpy, as impl). */
static redial rload(const mcp_redial *r) {
  redial x;
  memcpy(&x, r, sizeof(x));
  return x;
}

static void rstore(mcp_redial *r, const redial *x) {
  memcpy(r, x, sizeof(*x));
}

void mcp_redial_init(mcp_redial *r, const mcp_backoff_options *o,
                     mcp_rand_fn rand, void *rand_user_data, mcp_tstamp now) {
  redial x;
  impl b;
  memset(&x, 0, sizeof(x));
  /* Seeded from |r|'s address, as mcp_backoff_init() from its own. */
  init(&b, o, rand, rand_user_data, r);
  memcpy(&x.bo, &b, sizeof(b));
  x.at = now;
  memset(r, 0, sizeof(*r));
  rstore(r, &x);
}

void mcp_redial_opened(mcp_redial *r, mcp_tstamp now) {
  redial x = rload(r);
  x.open = 1;
  x.opened_at = now;
  x.received = 0;
  rstore(r, &x);
}

void mcp_redial_received(mcp_redial *r, uint64_t n) {
  redial x = rload(r);
  if (x.open) {
    x.received += n;
  }
  rstore(r, &x);
}

mcp_tstamp mcp_redial_ended(mcp_redial *r, mcp_tstamp now) {
  redial x = rload(r);
  if (x.open) {
    mcp_backoff_stream_ended(&x.bo, now > x.opened_at ? now - x.opened_at : 0,
                             x.received);
  }
  mcp_tstamp d = mcp_backoff_next(&x.bo);
  x.open = 0;
  x.received = 0;
  x.at = now + d;
  rstore(r, &x);
  return d;
}

int mcp_redial_due(const mcp_redial *r, mcp_tstamp now) {
  redial x = rload(r);
  return !x.open && now >= x.at;
}

mcp_tstamp mcp_redial_at(const mcp_redial *r) {
  redial x = rload(r);
  return x.open ? MCP_TSTAMP_MAX : x.at;
}

int mcp_redial_is_open(const mcp_redial *r) { return rload(r).open != 0; }

uint64_t mcp_redial_count(const mcp_redial *r) { return rload(r).received; }

const mcp_backoff *mcp_redial_backoff(const mcp_redial *r) {
  /* The backoff is the first member: its bytes are |r|'s first. */
  return (const mcp_backoff *)(const void *)r;
}

void mcp_rand_splitmix64(uint8_t *dest, size_t len, void *user_data) {
  uint64_t *state = user_data;
  while (len > 0) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    size_t n = len < 8 ? len : 8;
    memcpy(dest, &z, n);
    dest += n;
    len -= n;
  }
}
