/* Option defaults and their translation into gRPC channel arguments. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define MCP_GRPC_DEFAULT_MAX_MESSAGE (64 << 20)

mcp_tstamp mcp_grpc_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (mcp_tstamp)t.tv_sec * MCP_SECONDS + (mcp_tstamp)t.tv_nsec;
}

/* The bytes of each version of the structs (append-only: each a prefix of
 * the next), indexed by version; docs/api.md, "Versioned structs". */
static const size_t options_sizes[] = {
    0, offsetof(mcp_grpc_options, mem),
    offsetof(mcp_grpc_options, peer_stream_rate), sizeof(mcp_grpc_options)};
#define NVERSIONS(a) (sizeof(a) / sizeof((a)[0]))

/* The bytes of |version| (0 below 1; the newest known above it). */
static size_t version_size(int version, const size_t *sizes, size_t n) {
  if (version < 1)
    return 0;
  return (size_t)version < n ? sizes[version] : sizes[n - 1];
}

static void options_default(mcp_grpc_options *opts);

void mcp_grpc_options_default_versioned(int version, mcp_grpc_options *opts) {
  mcp_grpc_options o;
  options_default(&o);
  memcpy(opts, &o,
         version_size(version, options_sizes, NVERSIONS(options_sizes)));
}

int mcp_grpc_options_read(mcp_grpc_options *out, int version,
                          const mcp_grpc_options *opts) {
  if (!opts || version < 1 || (size_t)version >= NVERSIONS(options_sizes))
    return MCP_ERR_INVALID_ARGUMENT;
  options_default(out);
  memcpy(out, opts, options_sizes[version]);
  return 0;
}

static void options_default(mcp_grpc_options *opts) {
  memset(opts, 0, sizeof(*opts));
  opts->mode = MCP_GRPC_LISTEN;
  opts->max_recv_message_size = MCP_GRPC_DEFAULT_MAX_MESSAGE;
  opts->max_send_message_size = MCP_GRPC_DEFAULT_MAX_MESSAGE;
  opts->backoff = mcp_backoff_defaults(); /* the core's one table */
  opts->shutdown_grace = 5 * MCP_SECONDS;
  opts->max_queued_updates = 65536;
  opts->max_streams = MCP_GRPC_DEFAULT_MAX_STREAMS;
  opts->stream_rate = MCP_GRPC_DEFAULT_STREAM_RATE;
  opts->stream_burst = MCP_GRPC_DEFAULT_STREAM_BURST;
  opts->peer_stream_rate = MCP_ADMIT_DEFAULT_PEER_STREAM_RATE;
  opts->peer_stream_burst = MCP_ADMIT_DEFAULT_PEER_STREAM_BURST;
  opts->max_initial_pushes = MCP_GRPC_DEFAULT_MAX_INITIAL_PUSHES;
  opts->initial_push_timeout = MCP_GRPC_DEFAULT_INITIAL_PUSH_TIMEOUT;
  opts->max_concurrent_streams = MCP_GRPC_DEFAULT_MAX_CONCURRENT_STREAMS;
  opts->max_metadata_size = MCP_GRPC_DEFAULT_MAX_METADATA_SIZE;
  opts->memory_limit = MCP_GRPC_DEFAULT_MEMORY_LIMIT;
  opts->max_ping_strikes = MCP_GRPC_DEFAULT_MAX_PING_STRIKES;
  opts->max_connection_idle_ms = -1;
}

void mcp_grpc_options_normalize(mcp_grpc_options *o) {
  if (o->max_streams == 0)
    o->max_streams = MCP_GRPC_DEFAULT_MAX_STREAMS;
  if (o->stream_rate == 0)
    o->stream_rate = MCP_GRPC_DEFAULT_STREAM_RATE;
  if (o->stream_burst == 0)
    o->stream_burst = MCP_GRPC_DEFAULT_STREAM_BURST;
  if (o->max_initial_pushes == 0)
    o->max_initial_pushes = MCP_GRPC_DEFAULT_MAX_INITIAL_PUSHES;
  if (o->initial_push_timeout == 0)
    o->initial_push_timeout = MCP_GRPC_DEFAULT_INITIAL_PUSH_TIMEOUT;
  if (o->max_concurrent_streams == 0)
    o->max_concurrent_streams = MCP_GRPC_DEFAULT_MAX_CONCURRENT_STREAMS;
  if (o->max_metadata_size == 0)
    o->max_metadata_size = MCP_GRPC_DEFAULT_MAX_METADATA_SIZE;
  if (o->memory_limit == 0)
    o->memory_limit = MCP_GRPC_DEFAULT_MEMORY_LIMIT;
  if (o->max_ping_strikes == 0)
    o->max_ping_strikes = MCP_GRPC_DEFAULT_MAX_PING_STRIKES;
  if (o->max_connection_idle_ms == 0)
    o->max_connection_idle_ms = -1;
}

static void set_str(grpc_arg *a, const char *key, const char *value) {
  a->type = GRPC_ARG_STRING;
  a->key = (char *)key; /* gRPC copies the arguments it keeps */
  a->value.string = (char *)value;
}

static void set_int(grpc_arg *a, const char *key, int value) {
  a->type = GRPC_ARG_INTEGER;
  a->key = (char *)key; /* gRPC copies the arguments it keeps */
  a->value.integer = value;
}

/* gRPC takes the first of two arguments with one key, so a default the
 * application may change is set only where |channel_args| does not. */
static int user_arg(const mcp_grpc_options *o, const char *key) {
  const grpc_channel_args *ca = o->channel_args;
  for (size_t i = 0; ca && i < ca->num_args; i++)
    if (ca->args[i].key && strcmp(ca->args[i].key, key) == 0)
      return 1;
  return 0;
}

grpc_arg *mcp_grpc_args(const mcp_grpc_ep *ep, int server, size_t *nargs) {
  const mcp_grpc_options *o = &ep->opts;
  size_t extra = o->channel_args ? o->channel_args->num_args : 0;
  grpc_arg *a = mcp_grpc_malloc(&ep->mem, (18 + extra) * sizeof(*a));
  if (!a)
    return NULL;
  size_t n = 0;
  set_int(&a[n++], GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
          o->max_recv_message_size ? o->max_recv_message_size
                                   : MCP_GRPC_DEFAULT_MAX_MESSAGE);
  set_int(&a[n++], GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
          o->max_send_message_size ? o->max_send_message_size
                                   : MCP_GRPC_DEFAULT_MAX_MESSAGE);
  /* Fixed HTTP/2 receive windows, those of the nghttp2 transport. gRPC's
   * bandwidth-delay probe answers data it reads with PINGs, which the
   * peer must answer and this side read back: with 100 sinks on one
   * machine, that was 40 % of the sinks' CPU per change and a third of
   * the source's (docs/benchmarks.md, "gRPC's BDP probes"). */
  if (!user_arg(o, GRPC_ARG_HTTP2_BDP_PROBE))
    set_int(&a[n++], GRPC_ARG_HTTP2_BDP_PROBE, 0);
  if (!user_arg(o, GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES))
    set_int(&a[n++], GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
            MCP_GRPC_STREAM_WINDOW);
  if (o->keepalive_time_ms > 0)
    set_int(&a[n++], GRPC_ARG_KEEPALIVE_TIME_MS, o->keepalive_time_ms);
  if (o->keepalive_timeout_ms > 0)
    set_int(&a[n++], GRPC_ARG_KEEPALIVE_TIMEOUT_MS, o->keepalive_timeout_ms);
  if (o->keepalive_permit_without_calls)
    set_int(&a[n++], GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  if (server) {
    if (o->min_recv_ping_interval_ms > 0)
      set_int(&a[n++], GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
              o->min_recv_ping_interval_ms);
    /* gRPC enables SO_REUSEPORT by default: two servers could then bind
     * the same port without an error. */
    set_int(&a[n++], GRPC_ARG_ALLOW_REUSEPORT, 0);
    /* The HTTP/2 limits against hostile clients (-1: gRPC's own). */
    if (o->max_concurrent_streams > 0)
      set_int(&a[n++], GRPC_ARG_MAX_CONCURRENT_STREAMS,
              o->max_concurrent_streams);
    if (o->max_metadata_size > 0)
      set_int(&a[n++], GRPC_ARG_MAX_METADATA_SIZE, o->max_metadata_size);
    if (o->max_ping_strikes > 0)
      set_int(&a[n++], GRPC_ARG_HTTP2_MAX_PING_STRIKES, o->max_ping_strikes);
    if (o->max_connection_idle_ms > 0)
      set_int(&a[n++], GRPC_ARG_MAX_CONNECTION_IDLE_MS,
              o->max_connection_idle_ms);
  } else {
    /* Each attempt uses a new channel; a shared subchannel would carry
     * gRPC's own reconnect backoff over from the previous one. */
    set_int(&a[n++], GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    /* MCP streams idle for hours; by default gRPC stops pinging after 2
     * pings without data and spaces them 5 minutes apart, which would
     * end dead-peer detection. */
    if (o->keepalive_time_ms > 0) {
      set_int(&a[n++], GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
      set_int(&a[n++], GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS,
              o->keepalive_time_ms);
    }
    if (o->tls.server_name)
      set_str(&a[n++], GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, o->tls.server_name);
  }
  for (size_t i = 0; i < extra; i++)
    a[n++] = o->channel_args->args[i];
  *nargs = n;
  return a;
}
