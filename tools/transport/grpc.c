/* The gRPC transport (transport-grpc) behind the tools' transport table. */
#include <stdint.h>
#include <stdlib.h>

#include <mcp/grpc.h>

#include "transport/shim.h"
#include "transport/transport.h"

/* The protocol name of each open service or client call, by stream id:
 * gRPC's info no longer has the stream once it is ending, and the programs
 * count per API at CLOSED too. Open addressing; the transport thread only.
 * Names are the protocols' static ops->name strings. */
typedef struct api_slot {
  uint64_t id; /* 0: empty; UINT64_MAX: deleted */
  const char *api;
} api_slot;

typedef struct api_map {
  api_slot *slots;
  size_t cap, used;
} api_map;

static size_t api_hash(uint64_t id, size_t cap) {
  id *= 0x9e3779b97f4a7c15ull;
  return (size_t)(id >> 17) & (cap - 1);
}

static void api_put(api_map *m, uint64_t id, const char *api) {
  if ((m->used + 1) * 4 > m->cap * 3) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    api_slot *s = calloc(cap, sizeof(*s));
    if (!s)
      return; /* then counted as MCP at its end: metrics only */
    for (size_t i = 0; i < m->cap; i++) {
      if (!m->slots[i].id || m->slots[i].id == UINT64_MAX)
        continue;
      size_t j = api_hash(m->slots[i].id, cap);
      while (s[j].id)
        j = (j + 1) & (cap - 1);
      s[j] = m->slots[i];
    }
    size_t live = 0;
    for (size_t i = 0; i < cap; i++)
      live += s[i].id != 0;
    free(m->slots);
    m->slots = s;
    m->cap = cap;
    m->used = live;
  }
  size_t j = api_hash(id, m->cap);
  while (m->slots[j].id && m->slots[j].id != UINT64_MAX)
    j = (j + 1) & (m->cap - 1);
  if (!m->slots[j].id)
    m->used++;
  m->slots[j].id = id;
  m->slots[j].api = api;
}

/* Removes |id| and returns its name, or NULL. */
static const char *api_take(api_map *m, uint64_t id) {
  if (!m->cap)
    return NULL;
  for (size_t j = api_hash(id, m->cap); m->slots[j].id;
       j = (j + 1) & (m->cap - 1))
    if (m->slots[j].id == id) {
      m->slots[j].id = UINT64_MAX;
      return m->slots[j].api;
    }
  return NULL;
}

typedef struct ep_ctx {
  tool_shim_cb cb; /* first: tool_shim_alloc() */
  api_map apis;
} ep_ctx;

typedef struct grpc_ep {
  ep_ctx ctx; /* first: the callback's user_data */
  mcp_grpc_source *src;
  mcp_grpc_sink *sink;
} grpc_ep;

/* |peer| holds the peer in the programs' one form (tool_peer_format). */
static tool_stream_info stream_info(const mcp_grpc_stream_info *info,
                                    char *peer, size_t len) {
  tool_stream_info ti = {
      TOOL_SHIM_STREAM_INFO(info, peer, len),
      .identities = info->identities,
      .nidentities = info->nidentities,
      .tls = info->tls,
  };
  if (info->stream)
    ti.api = mcp_stream_get_ops(info->stream)->name;
  return ti;
}

static void on_stream(mcp_grpc_stream_event ev,
                      const mcp_grpc_stream_info *info, void *ud) {
  ep_ctx *ctx = ud;
  char peer[TOOL_PEER_MAX];
  tool_stream_info ti = stream_info(info, peer, sizeof(peer));
  if (ev == MCP_GRPC_STREAM_OPENED && ti.api)
    api_put(&ctx->apis, info->id, ti.api);
  else if (ev == MCP_GRPC_STREAM_CLOSED) {
    const char *api = api_take(&ctx->apis, info->id);
    if (!ti.api)
      ti.api = api;
  }
  /* A refused call never was a stream: no OPENED came before it. */
  if (ev == MCP_GRPC_STREAM_REFUSED) {
    if (ctx->cb.on_refused)
      ctx->cb.on_refused(&ti, ctx->cb.user_data);
    return;
  }
  tool_shim_report(&ctx->cb, ev == MCP_GRPC_STREAM_OPENED, &ti);
}

static mcp_grpc_tls_options tls_opts(const tool_tls_options *t) {
  mcp_grpc_tls_options g = {
      .cert_file = t->cert_file,
      .key_file = t->key_file,
      .ca_file = t->ca_file,
      .server_name = t->server_name,
  };
  return g;
}

static void fill_opts(mcp_grpc_options *go, const tool_endpoint_options *o,
                      ep_ctx *ctx) {
  mcp_grpc_options_default(go);
  TOOL_SHIM_OPTIONS(go, o, MCP_GRPC_DIAL, MCP_GRPC_LISTEN);
  go->on_stream = on_stream;
  go->user_data = ctx;
  if (o->max_streams_per_connection > 0)
    go->max_concurrent_streams = o->max_streams_per_connection;
  if (o->peer_stream_rate)
    go->peer_stream_rate = o->peer_stream_rate;
  if (o->peer_stream_burst)
    go->peer_stream_burst = o->peer_stream_burst;
  /* TLS when any file is set (the programs ran tls_check() first); the
   * access list decides on the peer's verified identities. */
  go->tls = tls_opts(&o->tls);
  if (o->acl) {
    go->authorize = mcp_grpc_acl_authorize;
    go->authorize_user_data = o->acl;
  }
}

/* An endpoint with the callbacks of |o|, and |go| filled for it. */
static grpc_ep *ep_new(const tool_endpoint_options *o, mcp_grpc_options *go) {
  grpc_ep *ep = tool_shim_alloc(sizeof(*ep), o);
  if (ep)
    fill_opts(go, o, &ep->ctx);
  return ep;
}

static int source_new(void **pep, uv_loop_t *loop,
                      const tool_endpoint_options *o,
                      const mcp_source_options *so) {
  (void)loop; /* gRPC runs on a thread of its own */
  mcp_grpc_options go;
  grpc_ep *ep = ep_new(o, &go);
  if (!ep)
    return MCP_ERR_NOMEM;
  return tool_shim_created(pep, ep, mcp_grpc_source_new(&ep->src, &go, so));
}

static int source_port(void *ep) {
  return mcp_grpc_source_port(((grpc_ep *)ep)->src);
}

/* The store lives on the transport thread: run |fn| there and wait, so
 * that the caller may change what |fn| reads as soon as this returns. */
static int source_apply(void *ep, tool_store_fn fn, void *ud) {
  return mcp_grpc_source_call(((grpc_ep *)ep)->src, fn, ud);
}

/* Blocks until the transport thread is gone (at most the shutdown grace
 * and a send in flight). */
static void source_del(void *p) {
  grpc_ep *ep = p;
  if (ep) {
    mcp_grpc_source_del(ep->src);
    free(ep->ctx.apis.slots);
    free(ep);
  }
}

static int sink_new(void **pep, uv_loop_t *loop,
                    const tool_endpoint_options *o, mcp_sink_state *state) {
  (void)loop;
  mcp_grpc_options go;
  grpc_ep *ep = ep_new(o, &go);
  if (!ep)
    return MCP_ERR_NOMEM;
  return tool_shim_created(pep, ep, mcp_grpc_sink_new(&ep->sink, &go, state));
}

static int sink_port(void *ep) {
  return mcp_grpc_sink_port(((grpc_ep *)ep)->sink);
}

static void stats_fn(const mcp_grpc_stream_info *info, void *ud) {
  tool_shim_stats_add(ud, info->sink, info->sent, 0);
}

static int sink_finish(void *ep) {
  return mcp_grpc_sink_finish(((grpc_ep *)ep)->sink);
}

static int sink_stats(void *ep, tool_sink_stream_stats *st) {
  tool_shim_stats_clear(st);
  int rv = mcp_grpc_sink_streams(((grpc_ep *)ep)->sink, stats_fn, st);
  return rv < 0 ? rv : 0; /* the count is not asked for */
}

/* Introspection (tools/ops): the gRPC calls run |fn| on the transport
 * thread and return once done. */
TOOL_SHIM_DEFINE_WALK(walk_fn, mcp_grpc_stream_info, stream_info)

static int source_streams(void *ep, tool_stream_fn fn, void *ud) {
  tool_shim_walk w = {fn, ud};
  return mcp_grpc_source_streams(((grpc_ep *)ep)->src, walk_fn, &w);
}

static int sink_streams(void *ep, tool_stream_fn fn, void *ud) {
  tool_shim_walk w = {fn, ud};
  return mcp_grpc_sink_streams(((grpc_ep *)ep)->sink, walk_fn, &w);
}

/* The per-peer rate's counters (tools/ops' metric). */
TOOL_SHIM_DEFINE_RATE_LIMITED(grpc_ep, mcp_grpc_stats, mcp_grpc_source_stats,
                              mcp_grpc_sink_stats)

static int sink_call(void *ep, tool_state_fn fn, void *ud) {
  return mcp_grpc_sink_call(((grpc_ep *)ep)->sink, fn, ud);
}

static void sink_del(void *p) {
  grpc_ep *ep = p;
  if (ep) {
    mcp_grpc_sink_del(ep->sink);
    free(ep->ctx.apis.slots);
    free(ep);
  }
}

/* ---- security ---- */

static int tls_check(const tool_tls_options *tls, char *err, size_t errlen) {
  mcp_grpc_tls_options g = tls_opts(tls);
  return mcp_grpc_tls_check(&g, err, errlen);
}

static int acl_new(void **pacl) {
  mcp_grpc_acl *acl = NULL;
  int rv = mcp_grpc_acl_new(&acl);
  if (rv == 0)
    *pacl = acl;
  return rv;
}

static int acl_add(void *acl, int deny, const char *pattern) {
  return mcp_grpc_acl_add(acl, deny ? MCP_GRPC_ACL_DENY : MCP_GRPC_ACL_ALLOW,
                          pattern);
}

static int acl_load(void *acl, const char *path, char *err, size_t errlen) {
  return mcp_grpc_acl_load_file(acl, path, err, errlen);
}

static int acl_reload(void *acl, char *err, size_t errlen) {
  return mcp_grpc_acl_reload(acl, err, errlen);
}

static size_t acl_count(void *acl) { return mcp_grpc_acl_count(acl); }

static void acl_del(void *acl) { mcp_grpc_acl_del(acl); }

static int source_reauthorize(void *ep) {
  return mcp_grpc_source_reauthorize(((grpc_ep *)ep)->src);
}

static int sink_reauthorize(void *ep) {
  return mcp_grpc_sink_reauthorize(((grpc_ep *)ep)->sink);
}

/* ---- clients (mcp_client_def) ---- */

typedef struct grpc_client {
  ep_ctx ctx; /* first: the callback's user_data */
  mcp_grpc_client *c;
} grpc_client;

static int client_new(void **pc, uv_loop_t *loop,
                      const tool_endpoint_options *o,
                      const mcp_client_def *def) {
  (void)loop; /* a thread of its own */
  grpc_client *c = tool_shim_alloc(sizeof(*c), o);
  if (!c)
    return MCP_ERR_NOMEM;
  tool_endpoint_options d = *o;
  d.mode = TOOL_DIAL;
  mcp_grpc_options go;
  fill_opts(&go, &d, &c->ctx);
  return tool_shim_created(pc, c, mcp_grpc_client_new(&c->c, &go, def));
}

static int client_run(void *c, tool_run_fn fn, void *ud) {
  return mcp_grpc_client_call(((grpc_client *)c)->c, fn, ud);
}

static void client_del(void *p) {
  grpc_client *c = p;
  if (c) {
    mcp_grpc_client_del(c->c);
    free(c->ctx.apis.slots);
    free(c);
  }
}

const tool_transport tool_transport_grpc = {
    .name = "grpc",
    .now = mcp_grpc_now,
    TOOL_SHIM_ENDPOINT_ROWS,
    TOOL_SHIM_SECURITY_ROWS,
    .services = 1,
    TOOL_SHIM_CLIENT_ROWS,
};
