/*
 * The public face of the message builder of buf.c: protocol modules frame
 * their messages with it, own bytes copied and stored bodies shared.
 */
#include <assert.h>

#include "engine_int.h"

#include "mcp/engine.h"


int mcp_msg_builder_new(mcp_msg_builder **pb, const mcp_mem *mem) {
  mcp_mem m;
  mcp_mem_init(&m, mem);
  mcp_msg_builder *b = mcp_mem_malloc(&m, sizeof(*b));
  if (!b) {
    return MCP_ERR_NOMEM;
  }
  b->mem = m;
  mcp__msgb_init(&b->b, &b->mem);
  *pb = b;
  return 0;
}

void mcp_msg_builder_del(mcp_msg_builder *b) {
  if (!b) {
    return;
  }
  mcp__msgb_discard(&b->b);
  mcp_mem m = b->mem;
  mcp_mem_free(&m, b);
}

void mcp_msg_builder_bytes(mcp_msg_builder *b, const void *p, size_t len) {
  if (!len) {
    return;
  }
  uint8_t *w = mcp__msgb_own(&b->b, len);
  if (w) {
    memcpy(w, p, len);
  }
}

void mcp_msg_builder_varint(mcp_msg_builder *b, uint64_t v) {
  uint8_t *w = mcp__msgb_own(&b->b, mcp_wire_varint_len(v));
  if (w) {
    mcp_wire_put_varint(w, v);
  }
}

void mcp_msg_builder_key(mcp_msg_builder *b, uint32_t field, int wire_type) {
  mcp_msg_builder_varint(b, (uint64_t)field << 3 | (uint32_t)(wire_type & 7));
}

void mcp_msg_builder_len_field(mcp_msg_builder *b, uint32_t field,
                               const void *p, size_t len) {
  mcp_msg_builder_key(b, field, MCP_WT_LEN);
  mcp_msg_builder_varint(b, len);
  mcp_msg_builder_bytes(b, p, len);
}

void mcp_msg_builder_body(mcp_msg_builder *b, const mcp_item *item) {
  mcp_rcbuf *rc = (mcp_rcbuf *)(uintptr_t)item->ref;
  if (!rc || !item->body_len) {
    return;
  }
  mcp__msgb_shared(&b->b, rc, (size_t)(item->body - rc->data), item->body_len);
}

size_t mcp_msg_builder_len(const mcp_msg_builder *b) { return b->b.len; }

int mcp_msg_builder_finish(mcp_msg_builder *b, const char *label,
                           mcp_msg **pmsg) {
  return mcp__msgb_finish(&b->b, label, pmsg);
}

int mcp_item_resource(const mcp_item *item, const uint8_t **p, size_t *len) {
  const mcp_rcbuf *rc = item ? item->ref : NULL;
  if (!rc || item->removed || rc->len < 2) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  /* A store entry's bytes are [tag 3][len][Resource] (store.c). */
  mcp_wire w = {rc->data, rc->data + rc->len};
  mcp_wire_field fd;
  if (mcp_wire_field_next(&w, &fd) != 1 || fd.num != 3 ||
      fd.wt != MCP_WT_LEN) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  *p = fd.data;
  *len = fd.len;
  return 0;
}

void mcp_msg_builder_item_bytes(mcp_msg_builder *b, const mcp_item *item,
                                const uint8_t *p, size_t len) {
  mcp_rcbuf *rc = (mcp_rcbuf *)(uintptr_t)item->ref;
  if (!rc || !len) {
    return;
  }
  /* A range outside the stored bytes is a caller's bug. */
  assert(p >= rc->data && (size_t)(p - rc->data) + len <= rc->len);
  mcp__msgb_shared(&b->b, rc, (size_t)(p - rc->data), len);
}

void mcp_msg_builder_snap(mcp_msg_builder *b, mcp_snap *sn) {
  mcp__msgb_snap(&b->b, sn);
}

int mcp_msg_builder_freeze(mcp_msg_builder *b, mcp_snap **psn) {
  return mcp__msgb_freeze(&b->b, psn);
}

uint8_t *mcp_msg_builder_reserve(mcp_msg_builder *b, size_t n) {
  return mcp__msgb_own(&b->b, n);
}

/* [key |field|][len][Resource] of the stored |rc| ([tag 3][len][Resource],
 * store.c: field 3 shares the stored framing as is). */
static void put_resource(mcp_msgb *b, uint32_t field, mcp_rcbuf *rc,
                         size_t res_off) {
  if (field == 3) {
    mcp__msgb_shared(b, rc, 0, rc->len);
    return;
  }
  size_t len = rc->len - res_off;
  uint8_t *w = mcp__msgb_own(b, mcp_wire_varint_len((uint64_t)field << 3) +
                                    mcp_wire_varint_len(len));
  if (w) {
    w = mcp_wire_put_varint(w, (uint64_t)field << 3 | MCP_WT_LEN);
    mcp_wire_put_varint(w, len);
  }
  mcp__msgb_shared(b, rc, res_off, len);
}

void mcp_msg_builder_resource(mcp_msg_builder *b, uint32_t field,
                              const mcp_item *item) {
  mcp_rcbuf *rc = (mcp_rcbuf *)(uintptr_t)item->ref;
  if (!rc || item->removed) {
    return;
  }
  /* The store wrote the length's varint: it cannot be bad. */
  const uint8_t *p = rc->data + 1;
  uint64_t len = 0;
  (void)mcp__varint(&p, rc->data + rc->len, &len);
  put_resource(&b->b, field, rc, (size_t)(p - rc->data));
}

static void put_entry(mcp_msgb *b, const mcp_entry *e, uint32_t res_field,
                      uint32_t removed_field, size_t *nres, size_t *nrem) {
  if (e->enc) {
    put_resource(b, res_field, e->enc, e->res_off);
    ++*nres;
    return;
  }
  if (removed_field) {
    size_t l = strlen(e->name);
    uint8_t *w = mcp__msgb_own(b, mcp_wire_len_field_size(l));
    if (w) {
      mcp_wire_put_len_field(w, removed_field, e->name, l);
    }
  }
  ++*nrem;
}

void mcp_msg_builder_coll(mcp_msg_builder *b, const mcp_coll *c, int all,
                          uint64_t since, unsigned flags, uint32_t res_field,
                          uint32_t removed_field, size_t *nres, size_t *nrem) {
  if (all) {
    for (const mcp_entry *e = c->head; e; e = e->next) {
      if (e->enc) {
        put_entry(&b->b, e, res_field, removed_field, nres, nrem);
      }
    }
    return;
  }
  /* mcp_coll_changes()'s walk: the changes after |since| are the tail. */
  const mcp_entry *first = NULL;
  for (const mcp_entry *e = c->tail; e && e->gen > since; e = e->prev) {
    first = e;
  }
  for (const mcp_entry *e = first; e; e = e->next) {
    if (!e->enc && e->born > since && !(flags & MCP_COLL_UNSEEN)) {
      continue;
    }
    put_entry(&b->b, e, res_field, removed_field, nres, nrem);
  }
}

void mcp_msg_builder_fail(mcp_msg_builder *b) { b->b.failed = 1; }
