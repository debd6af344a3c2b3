/*
 * What every transport records of a stream for mcp_stream_info
 * (mcp/engine.h): one struct that each transport's stream embeds, so
 * that one function fills the part of the info they share. Header-only
 * and private: compiled into each transport, part of no library's ABI.
 */
#ifndef MCP_COMMON_STREAMREC_H
#define MCP_COMMON_STREAMREC_H

#include <stdint.h>
#include <string.h>

#include <mcp/engine.h>

typedef struct mcp_stream_rec {
  int dialed;              /* this side started the stream */
  mcp_tstamp opened;       /* the transport's clock when it was made */
  uint64_t received, sent; /* messages, as mcp_stream_info counts them */
  /* The final status and its message (the transport's allocation, NULL
   * for none), once known. */
  int status;
  char *details;
} mcp_stream_rec;

/* Clears |info| and fills what |r| records; the transport fills the rest
 * (its id, peer, identities, engine stream, ...). |info| borrows
 * |r->details|. */
static inline void mcp_stream_rec_info(const mcp_stream_rec *r,
                                       mcp_stream_info *info) {
  memset(info, 0, sizeof(*info));
  info->dialed = r->dialed;
  info->opened = r->opened;
  info->received = r->received;
  info->sent = r->sent;
  info->status = r->status;
  info->details = r->details ? r->details : "";
}

#endif /* MCP_COMMON_STREAMREC_H */
