/* Growable buffers, shared refcounted bytes and outgoing messages. */
#include "engine_int.h"

static const mcp_mem *buf_mem(const mcp_buf *b) {
  return b->mem ? b->mem : mcp_mem_default();
}

int mcp_buf_reserve(mcp_buf *b, size_t extra) {
  if (b->cap - b->len >= extra) {
    return 0;
  }
  if (extra > SIZE_MAX / 2 - b->len) {
    return MCP_ERR_NOMEM;
  }
  size_t cap = b->cap ? b->cap : 64;
  while (cap - b->len < extra) {
    cap *= 2;
  }
  uint8_t *p = mcp_mem_realloc(buf_mem(b), b->p, cap);
  if (!p) {
    return MCP_ERR_NOMEM;
  }
  b->p = p;
  b->cap = cap;
  return 0;
}

int mcp_buf_append(mcp_buf *b, const void *p, size_t n) {
  if (n == 0) {
    return 0;
  }
  if (mcp_buf_reserve(b, n) != 0) {
    return MCP_ERR_NOMEM;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  return 0;
}

void mcp_buf_free(mcp_buf *b) {
  mcp_mem_free(buf_mem(b), b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

mcp_rcbuf *mcp__rcbuf_new(const mcp_mem *m, size_t len) {
  mcp_rcbuf *b = mcp_mem_malloc(m, sizeof(*b) + len);
  if (!b) {
    return NULL;
  }
  atomic_init(&b->ref, 1);
  b->mem = *m;
  b->len = len;
  return b;
}

void mcp__rcbuf_unref(mcp_rcbuf *b) {
  if (b && atomic_fetch_sub_explicit(&b->ref, 1, memory_order_acq_rel) == 1) {
    mcp_mem m = b->mem;
    mcp_mem_free(&m, b);
  }
}

/* One block: the struct, then iov[niov], refs[nrefs], the own bytes and
 * the collection name. */
struct mcp_msg {
  mcp_mem mem;
  size_t len;
  size_t niov;
  mcp_iovec *iov;
  mcp_rcbuf **refs;
  size_t nrefs;
  char *collection;
  mcp_snap *snap;
};

size_t mcp_msg_len(const mcp_msg *msg) { return msg->len; }

size_t mcp_msg_iov(const mcp_msg *msg, const mcp_iovec **iov) {
  *iov = msg->iov;
  return msg->niov;
}

size_t mcp_iov_len(const mcp_iovec *iov, size_t n) {
  size_t len = 0;
  for (size_t i = 0; i < n; ++i) {
    len += iov[i].len;
  }
  return len;
}

void mcp_iov_flatten(const mcp_iovec *iov, size_t n, uint8_t *dest) {
  for (size_t i = 0; i < n; ++i) {
    if (iov[i].len) {
      memcpy(dest, iov[i].base, iov[i].len);
      dest += iov[i].len;
    }
  }
}

void mcp_msg_flatten(const mcp_msg *msg, uint8_t *dest) {
  mcp_iov_flatten(msg->iov, msg->niov, dest);
}

const char *mcp_msg_collection(const mcp_msg *msg) { return msg->collection; }

void mcp_msg_free(mcp_msg *msg) {
  if (!msg) {
    return;
  }
  for (size_t i = 0; i < msg->nrefs; ++i) {
    mcp__rcbuf_unref(msg->refs[i]);
  }
  mcp_snap_unref(msg->snap);
  mcp_mem m = msg->mem;
  mcp_mem_free(&m, msg);
}

void mcp__msgb_init(mcp_msgb *b, const mcp_mem *m) {
  b->mem = m;
  b->own.p = b->inl_own;
  b->own.len = 0;
  b->own.cap = sizeof(b->inl_own);
  b->pieces = b->inl_pieces;
  b->npieces = 0;
  b->cap = sizeof(b->inl_pieces) / sizeof(b->inl_pieces[0]);
  b->nshared = 0;
  b->len = 0;
  b->snap = NULL;
  b->failed = 0;
}

static void msgb_release(mcp_msgb *b) {
  if (b->pieces != b->inl_pieces) {
    mcp_mem_free(b->mem, b->pieces);
  }
  if (b->own.p != b->inl_own) {
    mcp_mem_free(b->mem, b->own.p);
  }
}

static mcp_piece *msgb_piece(mcp_msgb *b) {
  if (b->npieces == b->cap) {
    size_t cap = b->cap * 2;
    mcp_piece *p;
    if (b->pieces == b->inl_pieces) {
      if ((p = mcp_mem_malloc(b->mem, cap * sizeof(*p)))) {
        memcpy(p, b->pieces, b->npieces * sizeof(*p));
      }
    } else {
      p = mcp_mem_realloc(b->mem, b->pieces, cap * sizeof(*p));
    }
    if (!p) {
      b->failed = 1;
      return NULL;
    }
    b->pieces = p;
    b->cap = cap;
  }
  return &b->pieces[b->npieces++];
}

static int own_reserve(mcp_msgb *b, size_t n) {
  if (b->own.cap - b->own.len >= n) {
    return 0;
  }
  if (n > SIZE_MAX / 4 - b->own.len) {
    return MCP_ERR_NOMEM;
  }
  size_t cap = b->own.cap * 2;
  while (cap - b->own.len < n) {
    cap *= 2;
  }
  uint8_t *p;
  if (b->own.p == b->inl_own) {
    if ((p = mcp_mem_malloc(b->mem, cap))) {
      memcpy(p, b->own.p, b->own.len);
    }
  } else {
    p = mcp_mem_realloc(b->mem, b->own.p, cap);
  }
  if (!p) {
    return MCP_ERR_NOMEM;
  }
  b->own.p = p;
  b->own.cap = cap;
  return 0;
}

uint8_t *mcp__msgb_own(mcp_msgb *b, size_t n) {
  if (b->failed || own_reserve(b, n) != 0) {
    b->failed = 1;
    return NULL;
  }
  mcp_piece *last = b->npieces ? &b->pieces[b->npieces - 1] : NULL;
  if (last && !last->rc && last->len != SIZE_MAX &&
      last->off + last->len == b->own.len) {
    last->len += n; /* contiguous own bytes stay one fragment */
  } else {
    mcp_piece *p = msgb_piece(b);
    if (!p) {
      return NULL;
    }
    p->rc = NULL;
    p->off = b->own.len;
    p->len = n;
  }
  uint8_t *w = b->own.p + b->own.len;
  b->own.len += n;
  b->len += n;
  return w;
}

void mcp__msgb_shared(mcp_msgb *b, mcp_rcbuf *rc, size_t off, size_t len) {
  if (b->failed) {
    return;
  }
  mcp_piece *p = msgb_piece(b);
  if (!p) {
    return;
  }
  mcp__rcbuf_ref(rc);
  p->rc = rc;
  p->off = off;
  p->len = len;
  b->len += len;
  b->nshared++;
}

void mcp_snap_unref(mcp_snap *sn) {
  if (sn && atomic_fetch_sub_explicit(&sn->ref, 1, memory_order_acq_rel) == 1) {
    for (size_t i = 0; i < sn->n; ++i) {
      mcp__rcbuf_unref(sn->refs[i]);
    }
    mcp_mem m = sn->mem;
    mcp_mem_free(&m, sn);
  }
}

void mcp__msgb_snap(mcp_msgb *b, mcp_snap *sn) {
  if (b->failed) {
    return;
  }
  mcp_piece *p = msgb_piece(b);
  if (!p) {
    return;
  }
  atomic_fetch_add_explicit(&sn->ref, 1, memory_order_relaxed);
  p->rc = NULL;
  p->off = 0;
  p->len = SIZE_MAX;
  b->snap = sn;
  b->len += sn->len;
}

size_t mcp_snap_len(const mcp_snap *sn) { return sn->len; }

int mcp__msgb_freeze(mcp_msgb *b, mcp_snap **psn) {
  if (b->failed || b->snap) {
    int rv = b->failed ? MCP_ERR_NOMEM : MCP_ERR_INVALID_ARGUMENT;
    mcp__msgb_discard(b);
    return rv;
  }
  size_t n = b->npieces;
  mcp_snap *sn = mcp_mem_malloc(b->mem, sizeof(*sn) +
                                            n * (sizeof(mcp_rcbuf *) +
                                                 sizeof(mcp_iovec)));
  /* The own bytes become shared bytes of their own: each fragment in them
   * holds a reference, as each stored fragment does. */
  mcp_rcbuf *own = sn && b->own.len ? mcp__rcbuf_new(b->mem, b->own.len) : NULL;
  if (!sn || (b->own.len && !own)) {
    mcp_mem_free(b->mem, sn);
    mcp__msgb_discard(b);
    return MCP_ERR_NOMEM;
  }
  if (own) {
    memcpy(own->data, b->own.p, b->own.len);
  }
  atomic_init(&sn->ref, 1);
  sn->mem = *b->mem;
  sn->gen = 0;
  sn->n = n;
  sn->len = b->len;
  sn->refs = (mcp_rcbuf **)(void *)(sn + 1);
  sn->iov = (mcp_iovec *)(void *)(sn->refs + n);
  for (size_t i = 0; i < n; ++i) {
    const mcp_piece *p = &b->pieces[i];
    mcp_rcbuf *rc = p->rc; /* the builder's reference moves over */
    if (!rc) {
      rc = own;
      mcp__rcbuf_ref(own);
    }
    sn->refs[i] = rc;
    sn->iov[i].base = rc->data + p->off;
    sn->iov[i].len = p->len;
  }
  if (own) {
    mcp__rcbuf_unref(own); /* the fragments hold it now */
  }
  msgb_release(b);
  mcp__msgb_init(b, b->mem);
  *psn = sn;
  return 0;
}

void mcp__msgb_discard(mcp_msgb *b) {
  for (size_t i = 0; i < b->npieces; ++i) {
    mcp__rcbuf_unref(b->pieces[i].rc);
  }
  mcp_snap_unref(b->snap);
  msgb_release(b);
  mcp__msgb_init(b, b->mem);
}

int mcp__msgb_finish(mcp_msgb *b, const char *collection, mcp_msg **pmsg) {
  if (b->failed) {
    mcp__msgb_discard(b);
    return MCP_ERR_NOMEM;
  }
  const char *coll = collection ? collection : "";
  size_t cl = strlen(coll) + 1;
  size_t niov = b->npieces + (b->snap ? b->snap->n - 1 : 0);
  size_t sz = sizeof(mcp_msg) + niov * sizeof(mcp_iovec) +
              b->nshared * sizeof(mcp_rcbuf *) + b->own.len + cl;
  mcp_msg *msg = mcp_mem_malloc(b->mem, sz);
  if (!msg) {
    mcp__msgb_discard(b);
    return MCP_ERR_NOMEM;
  }
  msg->mem = *b->mem;
  msg->iov = (mcp_iovec *)(void *)(msg + 1);
  msg->refs = (mcp_rcbuf **)(void *)(msg->iov + niov);
  uint8_t *own = (uint8_t *)(msg->refs + b->nshared);
  memcpy(own, b->own.p, b->own.len);
  msg->collection = (char *)own + b->own.len;
  memcpy(msg->collection, coll, cl);
  msg->len = b->len;
  msg->nrefs = 0;
  size_t k = 0;
  for (size_t i = 0; i < b->npieces; ++i) {
    mcp_piece *p = &b->pieces[i];
    if (p->rc) {
      msg->refs[msg->nrefs++] = p->rc;
      msg->iov[k].base = p->rc->data + p->off;
    } else if (p->len == SIZE_MAX) {
      memcpy(&msg->iov[k], b->snap->iov, b->snap->n * sizeof(mcp_iovec));
      k += b->snap->n;
      continue;
    } else {
      msg->iov[k].base = own + p->off;
    }
    msg->iov[k++].len = p->len;
  }
  msg->niov = k;
  msg->snap = b->snap;
  msgb_release(b);
  mcp__msgb_init(b, b->mem);
  *pmsg = msg;
  return 0;
}
