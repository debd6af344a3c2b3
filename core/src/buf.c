/* Growable buffers, shared refcounted bytes and outgoing messages. */
#include "mcp_int.h"

int mcp__buf_reserve(mcp_buf *b, const mcp_mem *m, size_t extra) {
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
  uint8_t *p = mcp__realloc(m, b->p, cap);
  if (!p) {
    return MCP_ERR_NOMEM;
  }
  b->p = p;
  b->cap = cap;
  return 0;
}

void mcp__buf_free(mcp_buf *b, const mcp_mem *m) {
  mcp__free(m, b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

mcp_rcbuf *mcp__rcbuf_new(const mcp_mem *m, size_t len) {
  mcp_rcbuf *b = mcp__malloc(m, sizeof(*b) + len);
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
    mcp__free(&m, b);
  }
}

struct mcp_msg {
  mcp_mem mem;
  size_t len;
  size_t niov;
  mcp_iovec *iov;
  mcp_rcbuf **refs;
  size_t nrefs;
  uint8_t *own;
  char *collection;
};

size_t mcp_msg_len(const mcp_msg *msg) { return msg->len; }

size_t mcp_msg_iov(const mcp_msg *msg, const mcp_iovec **iov) {
  *iov = msg->iov;
  return msg->niov;
}

void mcp_msg_flatten(const mcp_msg *msg, uint8_t *dest) {
  for (size_t i = 0; i < msg->niov; ++i) {
    memcpy(dest, msg->iov[i].base, msg->iov[i].len);
    dest += msg->iov[i].len;
  }
}

const char *mcp_msg_collection(const mcp_msg *msg) { return msg->collection; }

void mcp_msg_free(mcp_msg *msg) {
  if (!msg) {
    return;
  }
  for (size_t i = 0; i < msg->nrefs; ++i) {
    mcp__rcbuf_unref(msg->refs[i]);
  }
  mcp_mem m = msg->mem;
  mcp__free(&m, msg->refs);
  mcp__free(&m, msg->iov);
  mcp__free(&m, msg->own);
  mcp__free(&m, msg->collection);
  mcp__free(&m, msg);
}

void mcp__msgb_init(mcp_msgb *b, const mcp_mem *m) {
  memset(b, 0, sizeof(*b));
  b->mem = m;
}

static mcp_piece *msgb_piece(mcp_msgb *b) {
  if (b->npieces == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 16;
    mcp_piece *p = mcp__realloc(b->mem, b->pieces, cap * sizeof(*p));
    if (!p) {
      b->failed = 1;
      return NULL;
    }
    b->pieces = p;
    b->cap = cap;
  }
  return &b->pieces[b->npieces++];
}

uint8_t *mcp__msgb_own(mcp_msgb *b, size_t n) {
  if (b->failed || mcp__buf_reserve(&b->own, b->mem, n) != 0) {
    b->failed = 1;
    return NULL;
  }
  mcp_piece *last = b->npieces ? &b->pieces[b->npieces - 1] : NULL;
  if (last && !last->rc && last->off + last->len == b->own.len) {
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

void mcp__msgb_discard(mcp_msgb *b) {
  for (size_t i = 0; i < b->npieces; ++i) {
    mcp__rcbuf_unref(b->pieces[i].rc);
  }
  mcp__free(b->mem, b->pieces);
  mcp__buf_free(&b->own, b->mem);
  mcp__msgb_init(b, b->mem);
}

int mcp__msgb_finish(mcp_msgb *b, const char *collection, mcp_msg **pmsg) {
  mcp_msg *msg = NULL;
  if (b->failed) {
    goto fail;
  }
  msg = mcp__calloc(b->mem, 1, sizeof(*msg));
  if (!msg) {
    goto fail;
  }
  msg->mem = *b->mem;
  msg->iov = mcp__malloc(b->mem, (b->npieces ? b->npieces : 1) * sizeof(mcp_iovec));
  msg->refs = mcp__malloc(b->mem, (b->nshared ? b->nshared : 1) * sizeof(mcp_rcbuf *));
  msg->collection = mcp__strdup(b->mem, collection ? collection : "");
  if (!msg->iov || !msg->refs || !msg->collection) {
    goto fail;
  }
  /* The message takes over the own buffer and the references. */
  msg->own = b->own.p;
  msg->len = b->len;
  for (size_t i = 0; i < b->npieces; ++i) {
    mcp_piece *p = &b->pieces[i];
    if (p->rc) {
      msg->refs[msg->nrefs++] = p->rc;
      msg->iov[i].base = p->rc->data + p->off;
    } else {
      msg->iov[i].base = msg->own + p->off;
    }
    msg->iov[i].len = p->len;
  }
  msg->niov = b->npieces;
  mcp__free(b->mem, b->pieces);
  mcp__msgb_init(b, b->mem);
  *pmsg = msg;
  return 0;
fail:
  if (msg) {
    mcp__free(b->mem, msg->iov);
    mcp__free(b->mem, msg->refs);
    mcp__free(b->mem, msg->collection);
    mcp__free(b->mem, msg);
  }
  mcp__msgb_discard(b);
  return MCP_ERR_NOMEM;
}
