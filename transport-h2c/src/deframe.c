/* gRPC message deframing: see deframe.h. */
#include <stdlib.h>
#include <string.h>

#include "deframe.h"

void mcp_h2c_deframer_init_mem(mcp_h2c_deframer *d, size_t max,
                               const mcp_mem *mem) {
  memset(d, 0, sizeof(*d));
  d->max = max;
  d->body.mem = mem;
}

void mcp_h2c_deframer_init(mcp_h2c_deframer *d, size_t max) {
  mcp_h2c_deframer_init_mem(d, max, NULL);
}

size_t mcp_h2c_deframer_held(const mcp_h2c_deframer *d) { return d->body.cap; }

void mcp_h2c_deframer_release(mcp_h2c_deframer *d) {
  if (d->returned) {
    mcp_buf_free(&d->body);
    d->returned = 0;
  }
}

void mcp_h2c_deframer_free(mcp_h2c_deframer *d) {
  mcp_buf_free(&d->body);
  d->returned = 0;
  d->hdr_len = 0;
}

/* Grows the buffer to hold |k| more bytes: doubling, at least 4 KiB, at
 * most the announced length (a peer announcing 4 MiB and sending 10 bytes
 * costs 4 KiB). Where doubling would reach MCP_HINT_LARGE (2 MiB
 * received), once to the announced length, in huge pages: filled 4 KiB
 * page by page (a realloc of huge pages splits them) the 20 MB sync took
 * five thousand page faults, most of the sink's time (issue 25). The rest
 * is address space until the peer sends it. */
static int grow(mcp_h2c_deframer *d, size_t k) {
  mcp_buf *b = &d->body;
  if (b->cap - b->len >= k)
    return 0;
  size_t want = b->cap * 2;
  if (want < b->len + k)
    want = b->len + k;
  if (want < 4096)
    want = 4096;
  if (want > d->msg_len || want >= MCP_HINT_LARGE)
    want = d->msg_len;
  uint8_t *np = mcp_h2c_realloc(b->mem, b->p, want);
  if (!np)
    return -1;
  b->p = np;
  b->cap = want;
  mcp_h2c_hint_large(np, want);
  return 0;
}

int mcp_h2c_deframe(mcp_h2c_deframer *d, const uint8_t **p, size_t *n,
                    const uint8_t **msg, size_t *len) {
  if (d->err)
    return d->err;
  mcp_h2c_deframer_release(d);
  if (*n == 0)
    return 0;
  if (d->hdr_len < 5) {
    size_t k = 5 - d->hdr_len < *n ? 5 - d->hdr_len : *n;
    memcpy(d->hdr + d->hdr_len, *p, k);
    d->hdr_len += k;
    *p += k;
    *n -= k;
    if (d->hdr_len < 5)
      return 0;
    d->msg_len = (uint32_t)d->hdr[1] << 24 | (uint32_t)d->hdr[2] << 16 |
                 (uint32_t)d->hdr[3] << 8 | (uint32_t)d->hdr[4];
    if (d->hdr[0] & 1)
      return d->err = MCP_H2C_DEFRAME_COMPRESSED;
    if (d->hdr[0] != 0)
      return d->err = MCP_H2C_DEFRAME_FLAGS;
    if (d->msg_len > d->max)
      return d->err = MCP_H2C_DEFRAME_TOO_LARGE;
  }
  size_t need = d->msg_len - d->body.len;
  if (need > 0 && *n == 0)
    return 0;
  if (d->body.len == 0 && *n >= need) { /* whole in the input */
    *msg = need ? *p : (const uint8_t *)"";
    *len = need;
    *p += need;
    *n -= need;
    d->hdr_len = 0;
    return 1;
  }
  size_t k = need < *n ? need : *n;
  if (grow(d, k) < 0)
    return d->err = MCP_H2C_DEFRAME_NOMEM;
  memcpy(d->body.p + d->body.len, *p, k);
  d->body.len += k;
  *p += k;
  *n -= k;
  if (d->body.len < d->msg_len)
    return 0;
  *msg = d->body.p;
  *len = d->body.len;
  d->returned = 1;
  d->hdr_len = 0;
  return 1;
}
