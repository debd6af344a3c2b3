/*
 * A watch: one subscriber's position in one collection of a store. It
 * holds the generation it last took and whether the collection existed
 * then; what changed since is the tail of the collection's change list
 * (store.c), so a take costs O(changed). When the list no longer reaches
 * back (tombstones compacted) or the collection was absent, the take is a
 * whole state and the caller starts over.
 */
#include "engine_int.h"

#include "mcp/engine.h"

struct mcp_watch {
  mcp_mem mem;
  const mcp_store *store;
  char *collection;
  mcp_tstamp debounce, max_delay;
  uint64_t gen;     /* generation last taken */
  int taken;        /* a take happened */
  int existed;      /* the collection existed at the last take */
  int dirty;        /* mcp_watch_note() saw a change since the last take */
  mcp_tstamp first_seen; /* when it first saw it (max_delay) */
  mcp_tstamp sent;  /* when the last take (or skip) was */
  mcp_tstamp last_ts;
  mcp_buf type_url; /* NUL-terminated copy for mcp_item.type_url */
  /* The collection once it exists: a store frees collections only with
   * itself (a failed first change undoes its collection within the same
   * call), so the pointer stays good and pumps skip the name's lookup. */
  mcp_coll *coll;
};

int mcp_watch_new(mcp_watch **pw, const mcp_store *store,
                  const char *collection, const mcp_watch_options *opts,
                  const mcp_mem *mem) {
  if (!pw || !store || !collection || !collection[0]) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  mcp_mem m;
  mcp_mem_init(&m, mem);
  mcp_watch *w = mcp_mem_calloc(&m, 1, sizeof(*w));
  if (!w) {
    return MCP_ERR_NOMEM;
  }
  w->mem = m;
  w->type_url.mem = &w->mem;
  w->store = store;
  if (!(w->collection = mcp_mem_strdup(&m, collection))) {
    mcp_mem_free(&m, w);
    return MCP_ERR_NOMEM;
  }
  if (opts) {
    w->debounce = opts->debounce;
    w->max_delay = opts->max_delay;
  }
  *pw = w;
  return 0;
}

void mcp_watch_del(mcp_watch *w) {
  if (!w) {
    return;
  }
  mcp_mem m = w->mem;
  mcp_buf_free(&w->type_url);
  mcp_mem_free(&m, w->collection);
  mcp_mem_free(&m, w);
}

const char *mcp_watch_collection(const mcp_watch *w) { return w->collection; }

static mcp_coll *find_coll(const mcp_watch *w) {
  return w->coll ? w->coll : mcp__store_coll(w->store, w->collection);
}

/* find_coll() for the calls that may keep what they found. */
static mcp_coll *cache_coll(mcp_watch *w) {
  if (!w->coll) {
    w->coll = mcp__store_coll(w->store, w->collection);
  }
  return w->coll;
}

static mcp_coll *live_coll(const mcp_watch *w) {
  mcp_coll *c = find_coll(w);
  return c && !c->absent ? c : NULL;
}

int mcp_watch_exists(const mcp_watch *w) { return live_coll(w) != NULL; }

int mcp_watch_changed(const mcp_watch *w) {
  if (!w->taken) {
    return 1;
  }
  mcp_coll *c = live_coll(w);
  if (!c) {
    return w->existed;
  }
  return !w->existed || c->gen != w->gen;
}

/*
 * The pacing rule, for watches and MCP source subscriptions alike
 * (docs/protocol.md "Debounce"). A change leads when it came at least
 * |debounce| after both the change before it and the subscriber's last
 * send: after a quiet period it goes at once. Otherwise it waits until
 * the collection has been quiet for |debounce|, or |max_delay| after it
 * was first seen.
 */
static int leads(const mcp_coll *c, mcp_tstamp debounce, mcp_tstamp sent) {
  mcp_tstamp quiet_from = sent;
  if (c->has_prev && c->prev_change > quiet_from) {
    quiet_from = c->prev_change;
  }
  return c->last_change >= quiet_from + debounce;
}

int mcp_pace_ready(const mcp_coll *c, mcp_tstamp debounce,
                    mcp_tstamp max_delay, mcp_tstamp sent, mcp_tstamp seen,
                    mcp_tstamp ts) {
  return !debounce || leads(c, debounce, sent) ||
         ts >= c->last_change + debounce ||
         (max_delay && ts >= seen + max_delay);
}

mcp_tstamp mcp_pace_due(const mcp_coll *c, mcp_tstamp debounce,
                         mcp_tstamp max_delay, mcp_tstamp sent, int noted,
                         mcp_tstamp seen) {
  if (!debounce || leads(c, debounce, sent)) {
    return 0; /* at once, as without debounce: ready() says so */
  }
  mcp_tstamp d = c->last_change + debounce;
  if (noted && max_delay && seen + max_delay < d) {
    d = seen + max_delay;
  }
  return d;
}

/* The default bound of a debounce: the one rule every module that
 * debounces uses when its options give none. Saturates instead of
 * wrapping for a debounce beyond a tenth of the range. */
mcp_tstamp mcp_watch_default_max_delay(mcp_tstamp debounce) {
  if (debounce == 0) {
    return 0;
  }
  mcp_tstamp ten = debounce > MCP_TSTAMP_MAX / 10 ? MCP_TSTAMP_MAX
                                                  : debounce * 10;
  return ten < MCP_SECONDS ? MCP_SECONDS : ten;
}

int mcp_watch_ready(const mcp_watch *w, mcp_tstamp ts) {
  if (!mcp_watch_changed(w)) {
    return 0;
  }
  const mcp_coll *c;
  if (!w->taken || !w->debounce || !(c = find_coll(w))) {
    return 1;
  }
  return mcp_pace_ready(c, w->debounce, w->max_delay, w->sent,
                         w->dirty ? w->first_seen : ts, ts);
}

void mcp_watch_note(mcp_watch *w, mcp_tstamp ts) {
  if (ts > w->last_ts) {
    w->last_ts = ts;
  }
  cache_coll(w);
  if (w->debounce && w->taken && !w->dirty && mcp_watch_changed(w)) {
    w->dirty = 1;
    w->first_seen = ts;
  }
}

mcp_tstamp mcp_watch_get_expiry(const mcp_watch *w) {
  const mcp_coll *c = find_coll(w);
  if (!w->taken || !c || !mcp_watch_changed(w)) {
    return MCP_TSTAMP_MAX;
  }
  mcp_tstamp d = mcp_pace_due(c, w->debounce, w->max_delay, w->sent,
                               w->dirty, w->first_seen);
  /* Due already: ready() says so; a deadline in the past would make the
   * caller's timer spin. */
  return d <= w->last_ts ? MCP_TSTAMP_MAX : d;
}

/* ---- items (public: mcp_coll_*; the watch reads through them) ---- */

/* Fills |it| from an entry; the type URL is copied into |tu| to make it a
 * string (|tu| NULL: left NULL). */
static int entry_item(const mcp_entry *e, mcp_buf *tu, mcp_item *it) {
  memset(it, 0, sizeof(*it));
  it->name = e->name;
  if (!e->enc) {
    it->removed = 1;
    it->type_url = "";
    return 0;
  }
  it->version = e->version;
  it->ref = e->enc;
  const uint8_t *tp;
  size_t tlen;
  mcp__entry_body(e, &tp, &tlen, &it->body, &it->body_len);
  if (!tu) {
    return 0;
  }
  tu->len = 0;
  if (mcp_buf_reserve(tu, tlen + 1) != 0) {
    return MCP_ERR_NOMEM;
  }
  memcpy(tu->p, tp, tlen);
  tu->p[tlen] = '\0';
  it->type_url = (const char *)tu->p;
  return 0;
}

static int report(const mcp_entry *e, mcp_buf *tu, mcp_watch_fn fn,
                  void *ud) {
  mcp_item it;
  int rv = entry_item(e, tu, &it);
  return rv < 0 ? rv : fn(&it, ud);
}

int mcp_coll_foreach(const mcp_coll *c, mcp_buf *type_urls, mcp_watch_fn fn,
                     void *user_data) {
  int count = 0;
  for (const mcp_entry *e = c->head; e; e = e->next) {
    if (e->enc) {
      int rv = report(e, type_urls, fn, user_data);
      if (rv < 0) {
        return rv;
      }
      count++;
    }
  }
  return count;
}

int mcp_coll_changes(const mcp_coll *c, uint64_t since, unsigned flags,
                     mcp_buf *type_urls, mcp_watch_fn fn, void *user_data) {
  /* The entries changed after |since| are the tail of the list. */
  const mcp_entry *first = NULL;
  for (const mcp_entry *e = c->tail; e && e->gen > since; e = e->prev) {
    first = e;
  }
  int count = 0;
  for (const mcp_entry *e = first; e; e = e->next) {
    if (!e->enc && e->born > since && !(flags & MCP_COLL_UNSEEN)) {
      continue; /* created and removed since: the caller never had it */
    }
    int rv = report(e, type_urls, fn, user_data);
    if (rv < 0) {
      return rv;
    }
    count++;
  }
  return count;
}

int mcp_coll_get(const mcp_coll *c, const char *name, mcp_buf *type_url,
                 mcp_item *item) {
  const mcp_entry *e = name ? mcp_map_get(&c->map, name) : NULL;
  if (!e || !e->enc) {
    return 0;
  }
  return entry_item(e, type_url, item) == 0;
}

/* The watch now holds |c|'s current state (NULL: absent). */
static void move_to(mcp_watch *w, const mcp_coll *c, mcp_tstamp ts) {
  w->taken = 1;
  w->sent = ts;
  w->existed = c != NULL;
  w->gen = c ? c->gen : 0;
  w->dirty = 0;
}

int mcp_watch_take(mcp_watch *w, mcp_tstamp ts, mcp_watch_fn fn,
                   void *user_data, int *full) {
  if (ts > w->last_ts) {
    w->last_ts = ts;
  }
  cache_coll(w);
  mcp_coll *c = live_coll(w);
  int whole = !w->taken || !w->existed || !c || w->gen < c->compact_gen;
  int count = 0;
  if (c && whole) {
    count = mcp_coll_foreach(c, &w->type_url, fn, user_data);
  } else if (c && c->gen != w->gen) {
    count = mcp_coll_changes(c, w->gen, 0, &w->type_url, fn, user_data);
  }
  if (count < 0) {
    return count;
  }
  if (full) {
    *full = whole;
  }
  move_to(w, c, ts);
  return count;
}

void mcp_watch_skip(mcp_watch *w, mcp_tstamp ts) {
  if (ts > w->last_ts) {
    w->last_ts = ts;
  }
  cache_coll(w);
  move_to(w, live_coll(w), ts);
}

uint64_t mcp_watch_generation(const mcp_watch *w) { return w->gen; }

int mcp_watch_get(const mcp_watch *w, const char *name, mcp_item *item) {
  mcp_coll *c = live_coll(w);
  /* The type URL buffer is the watch's scratch space, not its state. */
  return c && mcp_coll_get(c, name, (mcp_buf *)(uintptr_t)&w->type_url, item);
}

/* mcp_watch_foreach() stops at any non-zero return, positive too. */
typedef struct foreach_ctx {
  mcp_watch_fn fn;
  void *ud;
  int rv;
} foreach_ctx;

static int foreach_one(const mcp_item *item, void *ud) {
  foreach_ctx *f = ud;
  f->rv = f->fn(item, f->ud);
  return f->rv ? -1 : 0;
}

int mcp_watch_foreach(const mcp_watch *w, mcp_watch_fn fn, void *user_data) {
  mcp_coll *c = live_coll(w);
  foreach_ctx f = {fn, user_data, 0};
  int rv = c ? mcp_coll_foreach(c, (mcp_buf *)(uintptr_t)&w->type_url,
                                foreach_one, &f)
             : 0;
  return f.rv ? f.rv : (rv < 0 ? rv : 0);
}
