/* Between mcp_msg fragments and gRPC byte buffers. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>

#include "internal.h"

/* Fragments shorter than this are copied (runs of them into one slice):
 * below it, a copy is cheaper than gRPC's per-slice refcount allocation.
 * A guess; to be measured in bench/. */
#define MCP_GRPC_COPY_BELOW 512

/* Keeps the message alive while gRPC holds slices referencing it. Released
 * by whichever thread drops the last slice: mcp_msg_free() is thread-safe. */
typedef struct msg_ref {
  atomic_size_t refs;
  mcp_msg *msg;
  mcp_mem mem; /* a copy: the ref may outlive the object */
} msg_ref;

static void msg_ref_release(void *p) {
  msg_ref *r = p;
  if (atomic_fetch_sub(&r->refs, 1) == 1) {
    mcp_msg_free(r->msg);
    mcp_mem mem = r->mem;
    mcp_grpc_free(&mem, r);
  }
}

static grpc_slice copy_run(const mcp_iovec *iov, size_t n, size_t len) {
  grpc_slice s = grpc_slice_malloc(len);
  mcp_iov_flatten(iov, n, GRPC_SLICE_START_PTR(s));
  return s;
}

grpc_byte_buffer *mcp_grpc_buffer_from_msg(const mcp_mem *mem, mcp_msg *msg) {
  const mcp_iovec *iov;
  size_t n = mcp_msg_iov(msg, &iov);
  msg_ref *r = mcp_grpc_malloc(mem, sizeof(*r));
  grpc_slice stack[16];
  grpc_slice *slices =
      n <= 16 ? stack : mcp_grpc_malloc(mem, n * sizeof(*slices));
  if (!r || !slices) {
    mcp_grpc_free(mem, r);
    if (slices && slices != stack)
      mcp_grpc_free(mem, slices);
    mcp_msg_free(msg);
    return NULL;
  }
  atomic_init(&r->refs, 1); /* ours, dropped below */
  r->msg = msg;
  r->mem = *mem;

  size_t k = 0, run = 0, runlen = 0;
  for (size_t i = 0; i < n; i++) {
    if (iov[i].len < MCP_GRPC_COPY_BELOW) {
      if (runlen == 0)
        run = i;
      runlen += iov[i].len;
      continue;
    }
    if (runlen > 0)
      slices[k++] = copy_run(iov + run, i - run, runlen);
    runlen = 0;
    atomic_fetch_add(&r->refs, 1);
    /* gRPC never writes to a slice it sends: dropping const is safe. */
    slices[k++] = grpc_slice_new_with_user_data(
        (void *)(uintptr_t)iov[i].base, iov[i].len, msg_ref_release, r);
  }
  if (runlen > 0)
    slices[k++] = copy_run(iov + run, n - run, runlen);

  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(slices, k);
  for (size_t i = 0; i < k; i++)
    grpc_slice_unref(slices[i]); /* the buffer took its own references */
  if (slices != stack)
    mcp_grpc_free(mem, slices);
  msg_ref_release(r);
  return bb;
}

ptrdiff_t mcp_grpc_buffer_iov(const grpc_byte_buffer *bb, const mcp_mem *mem,
                              mcp_iovec *stack, size_t nstack,
                              mcp_iovec **piov) {
  if (bb->type != GRPC_BB_RAW ||
      bb->data.raw.compression != GRPC_COMPRESS_NONE ||
      bb->data.raw.slice_buffer.count < 2)
    return 0;
  const grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
  mcp_iovec *iov = stack;
  if (sb->count > nstack &&
      !(iov = mcp_grpc_malloc(mem, sb->count * sizeof(*iov))))
    return -1;
  /* By pointer: a small slice holds its bytes inline, in the struct. */
  for (size_t i = 0; i < sb->count; i++) {
    iov[i].base = GRPC_SLICE_START_PTR(sb->slices[i]);
    iov[i].len = GRPC_SLICE_LENGTH(sb->slices[i]);
  }
  *piov = iov;
  return (ptrdiff_t)sb->count;
}

int mcp_grpc_buffer_bytes(grpc_byte_buffer *bb, const uint8_t **p,
                          size_t *len, grpc_slice *flat, int *joined) {
  *joined = 0;
  if (bb->type == GRPC_BB_RAW &&
      bb->data.raw.compression == GRPC_COMPRESS_NONE &&
      bb->data.raw.slice_buffer.count == 1) {
    /* By pointer: a small slice holds its bytes inline, in the struct,
     * so a copy of it would point into this stack frame. */
    const grpc_slice *s = &bb->data.raw.slice_buffer.slices[0];
    *p = GRPC_SLICE_START_PTR(*s);
    *len = GRPC_SLICE_LENGTH(*s);
    return 0;
  }
  if (bb->type == GRPC_BB_RAW &&
      bb->data.raw.compression == GRPC_COMPRESS_NONE) {
    /* Joined here rather than by grpc_byte_buffer_reader_readall() so
     * that a message of megabytes is written into huge pages (issue 25:
     * its page faults were the 20 MB sync's largest cost in the sink). */
    const grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
    *flat = grpc_slice_malloc(sb->length);
    uint8_t *o = GRPC_SLICE_START_PTR(*flat);
    mcp_grpc_hint_large(o, sb->length);
    for (size_t i = 0; i < sb->count; i++) {
      size_t n = GRPC_SLICE_LENGTH(sb->slices[i]);
      if (n)
        memcpy(o, GRPC_SLICE_START_PTR(sb->slices[i]), n);
      o += n;
    }
    *joined = 1;
    *p = GRPC_SLICE_START_PTR(*flat);
    *len = GRPC_SLICE_LENGTH(*flat);
    return 0;
  }
  grpc_byte_buffer_reader rd;
  if (!grpc_byte_buffer_reader_init(&rd, bb))
    return -1;
  *flat = grpc_byte_buffer_reader_readall(&rd);
  grpc_byte_buffer_reader_destroy(&rd);
  *joined = 1;
  *p = GRPC_SLICE_START_PTR(*flat);
  *len = GRPC_SLICE_LENGTH(*flat);
  return 0;
}
