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
  mcp_wire_field mf, nf;
  if (mcp_wire_field_next(&w, &mf) != 1 || mf.num != 1 ||
      mf.wt != MCP_WT_LEN) {
    return 0;
  }
  const uint8_t *md = mf.data;
  size_t mdlen = mf.len;
  mcp_wire mw = {md, md + mdlen};
  if (mcp_wire_field_next(&mw, &nf) != 1 || nf.num != 1 ||
      nf.wt != MCP_WT_LEN) {
    return 0;
  }
  const uint8_t *nm = nf.data;
  size_t nmlen = nf.len;
  size_t name_field = (size_t)(mw.p - md);
  size_t new_name_field = 1 + mcp_wire_varint_len(nmlen + 1) + nmlen + 1;
  size_t new_md = mdlen - name_field + new_name_field;
  uint8_t *p = s->head;
  *p++ = 1 << 3 | MCP_WT_LEN;
  p = mcp_wire_put_varint(p, new_md);
  *p++ = 1 << 3 | MCP_WT_LEN;
  p = mcp_wire_put_varint(p, nmlen + 1);
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

static size_t len_field(size_t n) { return 1 + mcp_wire_varint_len(n) + n; }

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
  mcp_msg_builder *b;
  size_t count;
} snap_build;

static int snap_item(const mcp_item *it, void *ud) {
  snap_build *sb = ud;
  sb->count++;
  /* DiscoveryResponse.resources = 2 */
  return mcp__xds_put_resource(sb->b, 2, 0, 0, it);
}

int mcp__xds_snap(const mcp_watch *w, const mcp_mem *m, mcp_snap **psn,
                  size_t *count) {
  snap_build sb = {NULL, 0};
  int rv = mcp_msg_builder_new(&sb.b, m);
  if (rv == 0) {
    rv = mcp_watch_foreach(w, snap_item, &sb);
  }
  if (rv == 0) {
    rv = mcp_msg_builder_freeze(sb.b, psn);
  }
  if (rv == 0) {
    *count = sb.count;
  }
  mcp_msg_builder_del(sb.b);
  return rv;
}
