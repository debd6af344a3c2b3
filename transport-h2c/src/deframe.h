/* gRPC message deframing (the 5-byte prefix of the gRPC-over-HTTP/2
 * protocol): pure, no I/O, fuzzed on its own (fuzz/fuzz_h2c_deframe.c). */
#ifndef MCP_H2C_DEFRAME_H
#define MCP_H2C_DEFRAME_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* Errors of mcp_h2c_deframe(); the deframer keeps returning the first. */
#define MCP_H2C_DEFRAME_COMPRESSED (-1) /* flag 1: grpc-encoding not identity */
#define MCP_H2C_DEFRAME_FLAGS (-2)      /* reserved flag bits set */
#define MCP_H2C_DEFRAME_TOO_LARGE (-3)  /* announced length > max */
#define MCP_H2C_DEFRAME_NOMEM (-4)

typedef struct mcp_h2c_deframer {
  size_t max;        /* the largest message accepted */
  uint8_t hdr[5];    /* the prefix being read */
  size_t hdr_len;
  uint32_t msg_len;  /* announced length of the message being read */
  mcp_buf body;  /* its bytes so far, or the message last returned */
  int returned;      /* |body| is the message last returned */
  int err;
} mcp_h2c_deframer;

/* Starts empty; nothing is allocated until a message spans two calls.
 * The buffer is allocated with |mem| (NULL, or mcp_h2c_deframer_init():
 * the C library). */
void mcp_h2c_deframer_init(mcp_h2c_deframer *d, size_t max);
void mcp_h2c_deframer_init_mem(mcp_h2c_deframer *d, size_t max,
                               const mcp_mem *mem);

/* Reads from *p (*n bytes), advancing both, until one message is complete
 * or the input is used up. Returns 1 with the message in *msg and *len,
 * 0 when the input ended inside a message (all of it was taken), or a
 * negative MCP_H2C_DEFRAME_* error (d->msg_len is the announced length
 * for TOO_LARGE). A message that lies whole in the input points into it
 * (no copy); one that spans calls is gathered in a buffer that grows with
 * what arrived, never beyond the announced length, and stays valid until
 * the next call to any function here. */
int mcp_h2c_deframe(mcp_h2c_deframer *d, const uint8_t **p, size_t *n,
                    const uint8_t **msg, size_t *len);

/* Bytes the deframer holds (for the transport's memory accounting). */
size_t mcp_h2c_deframer_held(const mcp_h2c_deframer *d);

/* Frees the buffer of the message last returned, if any (a partial
 * message is kept). */
void mcp_h2c_deframer_release(mcp_h2c_deframer *d);

/* Frees everything; |d| may be initialized again. */
void mcp_h2c_deframer_free(mcp_h2c_deframer *d);

#endif
