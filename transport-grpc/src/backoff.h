/* Reconnection backoff: pure arithmetic, randomness injected. */
#ifndef MCP_GRPC_BACKOFF_H
#define MCP_GRPC_BACKOFF_H

#include "mcp/grpc.h"

typedef struct mcp_grpc_backoff {
  mcp_grpc_backoff_options o;
  mcp_tstamp nominal; /* delay before jitter of the next attempt */
  mcp_rand_fn rand;
  void *rand_user_data;
} mcp_grpc_backoff;

/* |o| is copied; NULL members or zero fields take the defaults. */
void mcp_grpc_backoff_init(mcp_grpc_backoff *b,
                           const mcp_grpc_backoff_options *o,
                           mcp_rand_fn rand, void *rand_user_data);

/* The delay before the next attempt (jittered, at most o.max); grows the
 * nominal delay for the one after. */
mcp_tstamp mcp_grpc_backoff_next(mcp_grpc_backoff *b);

/* A stream that lasted |lived| and received |received| messages ended:
 * back to the initial delay if it was healthy (received something and
 * lasted at least the nominal delay), else keep growing. */
void mcp_grpc_backoff_stream_ended(mcp_grpc_backoff *b, mcp_tstamp lived,
                                   uint64_t received);

/* Default generator (splitmix64); |user_data| points to a uint64_t state. */
void mcp_grpc_default_rand(uint8_t *dest, size_t len, void *user_data);

#endif
