/* The gRPC transport (transport-grpc) behind the tools' transport table. */
#include <stdint.h>
#include <stdlib.h>

#include <mcp/grpc.h>

#include "transport/shim.h"
#include "transport/transport.h"

typedef struct grpc_ep {
  tool_shim_cb cb; /* first: tool_shim_alloc(), the callback's user_data */
  mcp_grpc_source *src;
  mcp_grpc_sink *sink;
} grpc_ep;

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
                      tool_shim_cb *cb) {
  mcp_grpc_options_default(go);
  TOOL_SHIM_OPTIONS(go, o, MCP_GRPC_DIAL, MCP_GRPC_LISTEN);
  go->on_stream = tool_shim_on_stream;
  go->user_data = cb;
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
    fill_opts(go, o, &ep->cb);
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

static int sink_finish(void *ep) {
  return mcp_grpc_sink_finish(((grpc_ep *)ep)->sink);
}

static int sink_stats(void *ep, tool_sink_stream_stats *st) {
  tool_shim_stats_clear(st);
  int rv = mcp_grpc_sink_streams(((grpc_ep *)ep)->sink, tool_shim_stats_stream, st);
  return rv < 0 ? rv : 0; /* the count is not asked for */
}

/* Introspection (tools/ops): the gRPC calls run |fn| on the transport
 * thread and return once done. */
static int source_streams(void *ep, tool_stream_fn fn, void *ud) {
  tool_shim_walk w = {fn, ud};
  return mcp_grpc_source_streams(((grpc_ep *)ep)->src, tool_shim_walk_stream, &w);
}

static int sink_streams(void *ep, tool_stream_fn fn, void *ud) {
  tool_shim_walk w = {fn, ud};
  return mcp_grpc_sink_streams(((grpc_ep *)ep)->sink, tool_shim_walk_stream, &w);
}

/* mcp_grpc_stats is the engine's mcp_transport_stats. */
static int stats(void *p, mcp_transport_stats *st) {
  grpc_ep *ep = p;
  return ep->src ? mcp_grpc_source_stats(ep->src, st)
                 : mcp_grpc_sink_stats(ep->sink, st);
}

static int sink_call(void *ep, tool_state_fn fn, void *ud) {
  return mcp_grpc_sink_call(((grpc_ep *)ep)->sink, fn, ud);
}

static void sink_del(void *p) {
  grpc_ep *ep = p;
  if (ep) {
    mcp_grpc_sink_del(ep->sink);
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
  tool_shim_cb cb; /* first: tool_shim_alloc(), the callback's user_data */
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
  fill_opts(&go, &d, &c->cb);
  return tool_shim_created(pc, c, mcp_grpc_client_new(&c->c, &go, def));
}

static int client_run(void *c, tool_run_fn fn, void *ud) {
  return mcp_grpc_client_call(((grpc_client *)c)->c, fn, ud);
}

static void client_del(void *p) {
  grpc_client *c = p;
  if (c) {
    mcp_grpc_client_del(c->c);
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
