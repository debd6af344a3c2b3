/*
 * The h2c transport (transport-h2c) behind the tools' transport table.
 *
 * The h2c objects run on the program's libuv loop: no thread of their own.
 * Every function of the table, every core callback and on_stream run on
 * the main thread, so the store is changed in place (then notified) and
 * the sink's streams are read directly. Deleting an object starts its
 * shutdown; the program's loop then runs until the sockets are closed.
 */
#include <stdlib.h>

#include <mcp/h2c.h>

#include "transport/shim.h"
#include "transport/transport.h"

typedef struct h2c_ep {
  tool_shim_cb cb;  /* first: tool_shim_alloc() */
  mcp_store *store; /* source: the store the streams serve */
  mcp_h2c_source *src;
  mcp_h2c_sink *sink;
  mcp_sink_state *state; /* sink: the state its streams share */
  ops_http_fn http;      /* plain HTTP requests on our port (tools/ops) */
  void *http_user_data;
  mcp_h2c_client *client; /* client_new() */
} h2c_ep;

/* |peer| holds the peer in the programs' one form (tool_peer_format). */
static tool_stream_info stream_info(const mcp_h2c_stream_info *info,
                                    char *peer, size_t len) {
  tool_stream_info ti = {
      TOOL_SHIM_STREAM_INFO(info, peer, len),
      .api = info->api,
  };
  return ti;
}

/* The debug endpoints answer HTTP/1.1 requests on the listening port. */
static int http_fn(const char *method, const char *path,
                   mcp_h2c_http_response *resp, void *ud) {
  h2c_ep *ep = ud;
  if (!ep->http)
    return 0;
  ops_http_reply r;
  ops_http_reply_init(&r);
  ep->http(method, path, &r, ep->http_user_data);
  if (r.body.failed) {
    mcp_h2c_http_respond(resp, 500, NULL);
  } else {
    mcp_h2c_http_respond(resp, r.status, r.content_type);
    if (r.body.len && mcp_h2c_http_append(resp, r.body.p, r.body.len) < 0)
      mcp_h2c_http_respond(resp, 500, NULL);
  }
  ops_http_reply_free(&r);
  return 1;
}

static void on_stream(mcp_h2c_stream_event ev, const mcp_h2c_stream_info *info,
                      void *ud) {
  h2c_ep *ep = ud;
  if (!ep->cb.on_stream)
    return;
  char peer[TOOL_PEER_MAX];
  tool_stream_info ti = stream_info(info, peer, sizeof(peer));
  tool_shim_report(&ep->cb, ev == MCP_H2C_STREAM_OPENED, &ti);
}

static void fill_opts(mcp_h2c_options *ho, const tool_endpoint_options *o,
                      h2c_ep *ep) {
  mcp_h2c_options_default(ho);
  TOOL_SHIM_OPTIONS(ho, o, MCP_H2C_DIAL, MCP_H2C_LISTEN);
  ho->on_stream = on_stream;
  ho->user_data = ep;
  if (o->mode == TOOL_LISTEN && o->http) {
    ep->http = o->http;
    ep->http_user_data = o->http_user_data;
    ho->http_handler = http_fn;
  }
  /* No on_closed: the endpoint is freed right after *_del(), after which
   * the library calls nothing else. */
}

static int source_new(void **pep, uv_loop_t *loop,
                      const tool_endpoint_options *o,
                      const mcp_source_options *so) {
  h2c_ep *ep = tool_shim_alloc(sizeof(*ep), o);
  if (!ep)
    return MCP_ERR_NOMEM;
  mcp_h2c_options ho;
  fill_opts(&ho, o, ep);
  ep->store = so->store;
  return tool_shim_created(pep, ep,
                           mcp_h2c_source_new(&ep->src, loop, &ho, so));
}

static int source_port(void *ep) {
  return mcp_h2c_source_port(((h2c_ep *)ep)->src);
}

/* The store lives on this (the loop's) thread: change it in place, then
 * let every stream push what it may on the next loop iteration. */
static int source_apply(void *p, tool_store_fn fn, void *ud) {
  h2c_ep *ep = p;
  fn(ep->store, mcp_h2c_now(), ud);
  mcp_h2c_source_notify(ep->src);
  return 0;
}

/* The sessions are freed at once; the loop closes the connections. */
static void source_del(void *p) {
  h2c_ep *ep = p;
  if (ep) {
    mcp_h2c_source_del(ep->src);
    free(ep);
  }
}

static int sink_new(void **pep, uv_loop_t *loop,
                    const tool_endpoint_options *o, mcp_sink_state *state) {
  h2c_ep *ep = tool_shim_alloc(sizeof(*ep), o);
  if (!ep)
    return MCP_ERR_NOMEM;
  mcp_h2c_options ho;
  fill_opts(&ho, o, ep);
  ep->state = state;
  return tool_shim_created(pep, ep,
                           mcp_h2c_sink_new(&ep->sink, loop, &ho, state));
}

static int sink_port(void *ep) {
  return mcp_h2c_sink_port(((h2c_ep *)ep)->sink);
}

/* An answer still being framed (sending) is not sent yet either. */
static void stats_fn(const mcp_h2c_stream_info *info, void *ud) {
  tool_shim_stats_add(ud, info->sink, info->sent, info->sending);
}

static int sink_finish(void *ep) {
  return mcp_h2c_sink_finish(((h2c_ep *)ep)->sink);
}

static int sink_stats(void *ep, tool_sink_stream_stats *st) {
  tool_shim_stats_clear(st);
  int rv = mcp_h2c_sink_streams(((h2c_ep *)ep)->sink, stats_fn, st);
  return rv < 0 ? rv : 0; /* the count is not asked for */
}

/* Introspection (tools/ops): everything lives on this thread. */
TOOL_SHIM_DEFINE_WALK(walk_fn, mcp_h2c_stream_info, stream_info)

static int source_streams(void *ep, tool_stream_fn fn, void *ud) {
  tool_shim_walk w = {fn, ud};
  return mcp_h2c_source_streams(((h2c_ep *)ep)->src, walk_fn, &w);
}

static int sink_streams(void *ep, tool_stream_fn fn, void *ud) {
  tool_shim_walk w = {fn, ud};
  return mcp_h2c_sink_streams(((h2c_ep *)ep)->sink, walk_fn, &w);
}

/* mcp_h2c_sink_call() is for other threads: here the state is ours. */
static int sink_call(void *p, tool_state_fn fn, void *ud) {
  fn(((h2c_ep *)p)->state, mcp_h2c_now(), ud);
  return 0;
}

static void sink_del(void *p) {
  h2c_ep *ep = p;
  if (ep) {
    mcp_h2c_sink_del(ep->sink);
    free(ep);
  }
}

/* ---- clients (mcp_client_def), on the loop ---- */

static int client_new(void **pc, uv_loop_t *loop,
                      const tool_endpoint_options *o,
                      const mcp_client_def *def) {
  h2c_ep *ep = tool_shim_alloc(sizeof(*ep), o);
  if (!ep)
    return MCP_ERR_NOMEM;
  tool_endpoint_options d = *o;
  d.mode = TOOL_DIAL;
  d.http = NULL;
  mcp_h2c_options ho;
  fill_opts(&ho, &d, ep);
  return tool_shim_created(pc, ep,
                           mcp_h2c_client_new(&ep->client, loop, &ho, def));
}

/* The protocol lives on this thread: run |fn| now, then have the calls
 * pumped and open() asked on the next loop iteration. */
static int client_run(void *p, tool_run_fn fn, void *ud) {
  h2c_ep *ep = p;
  fn(mcp_h2c_now(), ud);
  mcp_h2c_client_notify(ep->client);
  return 0;
}

static void client_del(void *p) {
  h2c_ep *ep = p;
  if (ep) {
    mcp_h2c_client_del(ep->client);
    free(ep);
  }
}

const tool_transport tool_transport_h2c = {
    .name = "h2c",
    .now = mcp_h2c_now,
    TOOL_SHIM_ENDPOINT_ROWS,
    /* Cleartext by definition: no tls_check, acl_* or *_reauthorize (the
     * programs refuse the TLS and access flags with this transport). */
    .services = 1,
    TOOL_SHIM_CLIENT_ROWS,
};
