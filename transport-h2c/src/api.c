/* The versioned structs of the public API (docs/api.md, "Versioned
 * structs"), the object's allocator, and the loop-thread check. */
#include <stddef.h>
#include <string.h>

#include "internal.h"

/* The bytes of each version (append-only: each a prefix of the next),
 * indexed by version. */
static const size_t options_sizes[] = {
    0, offsetof(mcp_h2c_options, mem), offsetof(mcp_h2c_options, tls),
    offsetof(mcp_h2c_options, on_listener), sizeof(mcp_h2c_options)};
#define NVERSIONS(a) (sizeof(a) / sizeof((a)[0]))

/* The bytes of |version| (0 below 1; the newest known above it). */
static size_t version_size(int version, const size_t *sizes, size_t n) {
  if (version < 1)
    return 0;
  return (size_t)version < n ? sizes[version] : sizes[n - 1];
}

static void options_default(mcp_h2c_options *opts) {
  memset(opts, 0, sizeof(*opts));
  opts->mode = MCP_H2C_LISTEN;
  opts->max_recv_message_size = 64 << 20;
  opts->max_send_message_size = 64 << 20;
  opts->keepalive_timeout_ms = 20000;
  opts->idle_timeout_ms = 300000;
  opts->stream_window_size = 1 << 20;
  opts->connection_window_size = 16 << 20;
  opts->max_concurrent_streams = 0; /* twice max_streams_per_connection */
  opts->write_buffer_size = 64 << 10;
  opts->backoff = mcp_backoff_defaults(); /* the core's one table */
  opts->shutdown_grace = 5 * MCP_SECONDS;
  opts->max_queued_updates = 65536;
  opts->handshake_timeout_ms = 10000;
  opts->max_handshakes = 1024;
  opts->max_handshakes_per_peer = 32;
  opts->max_streams_per_connection = 1024;
  opts->stream_reset_rate = 33;
  opts->stream_reset_burst = 1000;
  opts->peer_stream_rate = MCP_ADMIT_DEFAULT_PEER_STREAM_RATE;
  opts->peer_stream_burst = MCP_ADMIT_DEFAULT_PEER_STREAM_BURST;
}

void mcp_h2c_options_default_versioned(int version, mcp_h2c_options *opts) {
  mcp_h2c_options o;
  options_default(&o);
  memcpy(opts, &o,
         version_size(version, options_sizes, NVERSIONS(options_sizes)));
}

int mcp_h2c_options_read(mcp_h2c_options *out, int version,
                         const mcp_h2c_options *opts) {
  if (!opts || version < 1 || (size_t)version >= NVERSIONS(options_sizes))
    return MCP_ERR_INVALID_ARGUMENT;
  options_default(out);
  memcpy(out, opts, options_sizes[version]);
  return 0;
}

int mcp_h2c_on_loop_thread(const mcp_h2c_ep *ep) {
  uv_thread_t self = uv_thread_self();
  return uv_thread_equal(&self, &ep->loop_thread);
}

void mcp_h2c_ep_mem_init(mcp_h2c_ep *ep, const mcp_mem *mem) {
  mcp_h2c_mem_init(&ep->mem, mem);
  /* nghttp2_mem has mcp_mem's shape: the same functions serve it. */
  ep->ngmem.mem_user_data = ep->mem.user_data;
  ep->ngmem.malloc = ep->mem.malloc;
  ep->ngmem.free = ep->mem.free;
  ep->ngmem.calloc = ep->mem.calloc;
  ep->ngmem.realloc = ep->mem.realloc;
}
