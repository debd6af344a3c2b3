/*
 * Framing a stored resource for xDS: the Any of istio.mcp.v1alpha1.Resource
 * (SotW) or a discovery.v3.Resource around it (delta), around the store's
 * encoded-once Resource bytes, shared. A bare store name is sent as
 * "/name": only the metadata header and the name field are written anew
 * (a few bytes of the message's own); the rest of the Resource stays the
 * store's.
 */
#include "xds_int.h"

static const char any_type[] = MCP_XDS_RESOURCE_TYPE_URL;

size_t mcp__xds_name(const char *store_name, char *buf, size_t len) {
  size_t n = strlen(store_name), k = 0;
  int bare = strchr(store_name, '/') == NULL;
  size_t total = n + (size_t)bare;
  if (len) {
    if (bare && k + 1 < len) {
      buf[k++] = '/';
    }
    for (size_t i = 0; i < n && k + 1 < len; ++i) {
      buf[k++] = store_name[i];
    }
    buf[k] = '\0';
  }
  return total;
}

/* The Resource to send: |head| bytes of our own (empty when the stored
 * bytes are sent as they are) then the shared |tail|. */
typedef struct rsplit {
  uint8_t head[2 * 10 + 2];
  size_t head_len;    /* metadata key and length, name key and length */
  int slash;          /* a '/' follows head, then the name */
  const uint8_t *name;
  size_t name_len;
  const uint8_t *tail;
  size_t tail_len;
  size_t total;       /* bytes of the Resource sent */
} rsplit;

static int split(const mcp_item *it, rsplit *s) {
  const uint8_t *r;
  size_t rlen;
  if (mcp_item_resource(it, &r, &rlen) != 0) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  memset(s, 0, sizeof(*s));
  s->tail = r;
  s->tail_len = s->total = rlen;
  if (strchr(it->name, '/')) {
    return 0;
  }
  /* store.c writes metadata first and its name first: [1][md][1][name] */
  mcp_wire w = {r, r + rlen};
  uint32_t f;
  int wt;
  uint64_t v;
  const uint8_t *md, *nm;
  size_t mdlen, nmlen;
  if (mcp__wire_next(&w, &f, &wt, &v, &md, &mdlen) != 1 || f != 1 ||
      wt != MCP_WT_LEN) {
    return 0;
  }
  mcp_wire mw = {md, md + mdlen};
  if (mcp__wire_next(&mw, &f, &wt, &v, &nm, &nmlen) != 1 || f != 1 ||
      wt != MCP_WT_LEN) {
    return 0;
  }
  size_t name_field = (size_t)(mw.p - md);
  size_t new_name_field = 1 + mcp__varint_len(nmlen + 1) + nmlen + 1;
  size_t new_md = mdlen - name_field + new_name_field;
  uint8_t *p = s->head;
  *p++ = 1 << 3 | MCP_WT_LEN;
  p = mcp__put_varint(p, new_md);
  *p++ = 1 << 3 | MCP_WT_LEN;
  p = mcp__put_varint(p, nmlen + 1);
  s->head_len = (size_t)(p - s->head);
  s->slash = 1;
  s->name = nm;
  s->name_len = nmlen;
  s->tail = mw.p; /* the rest of the metadata, then the body */
  s->tail_len = (size_t)(r + rlen - mw.p);
  s->total = s->head_len + 1 + nmlen + s->tail_len;
  return 0;
}

static void put_split(mcp_msg_builder *b, const mcp_item *it,
                      const rsplit *s) {
  if (s->slash) {
    mcp_msg_builder_bytes(b, s->head, s->head_len);
    mcp_msg_builder_bytes(b, "/", 1);
    mcp_msg_builder_item_bytes(b, it, s->name, s->name_len);
  }
  mcp_msg_builder_item_bytes(b, it, s->tail, s->tail_len);
}

static size_t len_field(size_t n) { return 1 + mcp__varint_len(n) + n; }

int mcp__xds_put_resource(mcp_msg_builder *b, uint32_t field, int delta,
                          int body_only, const mcp_item *it) {
  rsplit s;
  int rv = split(it, &s);
  if (rv < 0) {
    return rv;
  }
  size_t tlen = strlen(it->type_url);
  size_t any = body_only ? len_field(tlen) + (it->body_len
                                                  ? len_field(it->body_len)
                                                  : 0)
                         : len_field(sizeof(any_type) - 1) + len_field(s.total);
  if (delta) {
    size_t name_len = mcp__xds_name(it->name, NULL, 0);
    size_t vlen = it->version ? strlen(it->version) : 0;
    size_t res = len_field(name_len) + (vlen ? len_field(vlen) : 0) +
                 len_field(any);
    mcp_msg_builder_key(b, field, MCP_WT_LEN);
    mcp_msg_builder_varint(b, res);
    /* name = 3, version = 1, resource = 2 */
    mcp_msg_builder_key(b, 3, MCP_WT_LEN);
    mcp_msg_builder_varint(b, name_len);
    if (!strchr(it->name, '/')) {
      mcp_msg_builder_bytes(b, "/", 1);
    }
    mcp_msg_builder_bytes(b, it->name, strlen(it->name));
    if (vlen) {
      mcp_msg_builder_len_field(b, 1, it->version, vlen);
    }
    mcp_msg_builder_key(b, 2, MCP_WT_LEN);
  } else {
    mcp_msg_builder_key(b, field, MCP_WT_LEN);
  }
  mcp_msg_builder_varint(b, any);
  if (body_only) {
    /* The body's own Any, shared: what istiod's apigen sends for its
     * MeshConfig and adsc reads. */
    mcp_msg_builder_len_field(b, 1, it->type_url, tlen);
    if (it->body_len) {
      mcp_msg_builder_key(b, 2, MCP_WT_LEN);
      mcp_msg_builder_varint(b, it->body_len);
      mcp_msg_builder_body(b, it);
    }
    return 0;
  }
  mcp_msg_builder_len_field(b, 1, any_type, sizeof(any_type) - 1);
  mcp_msg_builder_key(b, 2, MCP_WT_LEN);
  mcp_msg_builder_varint(b, s.total);
  put_split(b, it, &s);
  return 0;
}

/* ---- a whole state, framed once per generation ---- */

typedef struct snap_build {
  const mcp_mem *mem;
  mcp_buf hdr;        /* every item's own bytes, back to back */
  size_t *hlen;       /* per item: bytes of |hdr| */
  mcp_rcbuf **rc;     /* per item: its stored bytes */
  const uint8_t **tail;
  size_t *tlen;
  size_t n, cap;
  int failed;
} snap_build;

static int grow(snap_build *sb) {
  size_t cap = sb->cap ? 2 * sb->cap : 64;
  size_t *hl = mcp__realloc(sb->mem, sb->hlen, cap * sizeof(*hl));
  if (hl) {
    sb->hlen = hl;
  }
  mcp_rcbuf **rc = hl ? mcp__realloc(sb->mem, sb->rc, cap * sizeof(*rc)) : NULL;
  if (rc) {
    sb->rc = rc;
  }
  const uint8_t **t =
      rc ? mcp__realloc(sb->mem, (void *)sb->tail, cap * sizeof(*t)) : NULL;
  if (t) {
    sb->tail = t;
  }
  size_t *tl = t ? mcp__realloc(sb->mem, sb->tlen, cap * sizeof(*tl)) : NULL;
  if (!tl) {
    return MCP_ERR_NOMEM;
  }
  sb->tlen = tl;
  sb->cap = cap;
  return 0;
}

static int snap_item(const mcp_item *it, void *ud) {
  snap_build *sb = ud;
  rsplit s;
  if (split(it, &s) < 0) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  if (sb->n == sb->cap && grow(sb) < 0) {
    return MCP_ERR_NOMEM;
  }
  size_t any = len_field(sizeof(any_type) - 1) + len_field(s.total);
  size_t own = 1 + mcp__varint_len(any) + len_field(sizeof(any_type) - 1) +
               1 + mcp__varint_len(s.total) +
               (s.slash ? s.head_len + 1 + s.name_len : 0);
  if (mcp_buf_reserve(&sb->hdr, own) != 0) {
    return MCP_ERR_NOMEM;
  }
  uint8_t *p = sb->hdr.p + sb->hdr.len;
  *p++ = 2 << 3 | MCP_WT_LEN; /* DiscoveryResponse.resources */
  p = mcp__put_varint(p, any);
  p = mcp__put_len_field(p, 1, any_type, sizeof(any_type) - 1);
  *p++ = 2 << 3 | MCP_WT_LEN;
  p = mcp__put_varint(p, s.total);
  if (s.slash) { /* the renamed name field: small, copied */
    memcpy(p, s.head, s.head_len);
    p += s.head_len;
    *p++ = '/';
    memcpy(p, s.name, s.name_len);
    p += s.name_len;
  }
  sb->hlen[sb->n] = (size_t)(p - (sb->hdr.p + sb->hdr.len));
  sb->hdr.len += sb->hlen[sb->n];
  sb->rc[sb->n] = (mcp_rcbuf *)(uintptr_t)it->ref;
  sb->tail[sb->n] = s.tail;
  sb->tlen[sb->n] = s.tail_len;
  sb->n++;
  return 0;
}

int mcp__xds_snap(const mcp_watch *w, const mcp_mem *m, uint64_t gen,
                  mcp_snap **psn) {
  snap_build sb;
  memset(&sb, 0, sizeof(sb));
  sb.mem = m;
  sb.hdr.mem = m;
  int rv = mcp_watch_foreach(w, snap_item, &sb);
  mcp_snap *sn = NULL;
  mcp_rcbuf *hdr = NULL;
  if (rv == 0) {
    size_t k = 2 * sb.n;
    sn = mcp__malloc(m, sizeof(*sn) + k * (sizeof(mcp_rcbuf *) +
                                           sizeof(mcp_iovec)));
    hdr = sn ? mcp__rcbuf_new(m, sb.hdr.len ? sb.hdr.len : 1) : NULL;
    rv = hdr ? 0 : MCP_ERR_NOMEM;
  }
  if (rv == 0) {
    if (sb.hdr.len) { /* an empty collection has no header bytes */
      memcpy(hdr->data, sb.hdr.p, sb.hdr.len);
    }
    atomic_init(&sn->ref, 1);
    sn->mem = *m;
    sn->gen = gen;
    sn->refs = (mcp_rcbuf **)(void *)(sn + 1);
    sn->iov = (mcp_iovec *)(void *)(sn->refs + 2 * sb.n);
    sn->n = 0;
    sn->len = 0;
    size_t off = 0;
    for (size_t i = 0; i < sb.n; ++i) {
      /* Each iovec holds a reference to the bytes it points into. */
      mcp__rcbuf_ref(hdr);
      sn->refs[sn->n] = hdr;
      sn->iov[sn->n].base = hdr->data + off;
      sn->iov[sn->n].len = sb.hlen[i];
      sn->len += sb.hlen[i];
      off += sb.hlen[i];
      sn->n++;
      mcp__rcbuf_ref(sb.rc[i]);
      sn->refs[sn->n] = sb.rc[i];
      sn->iov[sn->n].base = sb.tail[i];
      sn->iov[sn->n].len = sb.tlen[i];
      sn->len += sb.tlen[i];
      sn->n++;
    }
    mcp__rcbuf_unref(hdr); /* the iovecs hold it now */
    *psn = sn;
  } else {
    mcp__free(m, sn);
  }
  mcp_buf_free(&sb.hdr);
  mcp__free(m, sb.hlen);
  mcp__free(m, sb.rc);
  mcp__free(m, (void *)sb.tail);
  mcp__free(m, sb.tlen);
  return rv;
}
