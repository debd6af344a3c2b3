/* Listening: accepts calls for the role's method, shuts down gracefully. */
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>

#include "internal.h"

/* The service a listening |ep| serves on |method|, or -1. Sinks dial
 * sources on ResourceSource and both aggregated methods; sources dial sinks
 * on ResourceSink only. */
static int served_service(const mcp_grpc_ep *ep, grpc_slice method) {
  int sink_dials = ep->role == MCP_GRPC_ROLE_SOURCE;
  for (int sv = MCP_SERVICE_RESOURCE; sv <= MCP_SERVICE_AGGREGATED_INCREMENTAL; ++sv) {
    const char *m = mcp_grpc_method((mcp_service)sv, sink_dials);
    if (m && grpc_slice_str_cmp(method, m) == 0)
      return sv;
  }
  return -1;
}

static void on_accept(mcp_grpc_tag *tag, int ok);

static void on_shutdown(mcp_grpc_tag *tag, int ok) {
  (void)ok;
  mcp_grpc_ep *ep = MCP_GRPC_CONTAINER(tag, mcp_grpc_ep, shutdown_tag);
  ep->shutdown_pending = 0;
}

int mcp_grpc_server_create(mcp_grpc_ep *ep) {
  size_t n;
  grpc_arg *a = mcp_grpc_args(ep, 1, &n);
  if (!a)
    return MCP_ERR_NOMEM;
  /* The memory gRPC holds for this server's connections and calls
   * (buffers read from sockets, call arenas); under pressure it cancels
   * streams and closes idle connections instead of growing. */
  grpc_resource_quota *quota = NULL;
  grpc_arg *all = a;
  if (ep->opts.memory_limit > 0) {
    all = malloc((n + 1) * sizeof(*all));
    if (!all) {
      free(a);
      return MCP_ERR_NOMEM;
    }
    memcpy(all, a, n * sizeof(*all));
    quota = grpc_resource_quota_create("mcp-grpc-server");
    grpc_resource_quota_resize(quota, (size_t)ep->opts.memory_limit);
    all[n].type = GRPC_ARG_POINTER;
    all[n].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
    all[n].value.pointer.p = quota;
    all[n].value.pointer.vtable = grpc_resource_quota_arg_vtable();
    n++;
  }
  grpc_channel_args args = {n, all};
  ep->server = grpc_server_create(&args, NULL);
  if (quota)
    grpc_resource_quota_unref(quota); /* the server holds its own ref */
  if (all != a)
    free(all);
  free(a);
  grpc_server_register_completion_queue(ep->server, ep->cq, NULL);
  grpc_server_credentials *creds = ep->opts.server_credentials;
  grpc_server_credentials *own = NULL;
  if (ep->tls)
    creds = own = mcp_grpc_tls_server_credentials(ep->tls);
  else if (!creds)
    creds = own = grpc_insecure_server_credentials_create();
  /* With TLS, 0 also when the certificate and key do not match. */
  ep->port = creds ? grpc_server_add_http2_port(ep->server, ep->address, creds)
                   : 0;
  if (own)
    grpc_server_credentials_release(own);
  if (ep->port == 0) {
    grpc_server_destroy(ep->server); /* never started: allowed */
    ep->server = NULL;
    return MCP_ERR_INVALID_ARGUMENT;
  }
  ep->accept_tag.fn = on_accept;
  ep->shutdown_tag.fn = on_shutdown;
  return 0;
}

/* Unregistered-call handling: one request for any method at a time; the
 * method is checked on arrival, so unknown ones get UNIMPLEMENTED instead
 * of waiting forever for a handler. */
static void request(mcp_grpc_ep *ep) {
  ep->accept_call = NULL;
  grpc_call_details_init(&ep->accept_details);
  grpc_metadata_array_init(&ep->accept_md);
  grpc_call_error e = grpc_server_request_call(
      ep->server, &ep->accept_call, &ep->accept_details, &ep->accept_md,
      ep->cq, ep->cq, &ep->accept_tag);
  if (e != GRPC_CALL_OK)
    abort(); /* the queue is registered: only a bug fails here */
  ep->accept_pending = 1;
}

static void on_accept(mcp_grpc_tag *tag, int ok) {
  mcp_grpc_ep *ep = MCP_GRPC_CONTAINER(tag, mcp_grpc_ep, accept_tag);
  ep->accept_pending = 0;
  if (ok) {
    int sv = served_service(ep, ep->accept_details.method);
    mcp_grpc_stream_accept(ep, ep->accept_call,
                           sv < 0 ? MCP_SERVICE_RESOURCE : (mcp_service)sv,
                           sv < 0 ? MCP_GRPC_ROLE_NONE : ep->role);
  }
  grpc_call_details_destroy(&ep->accept_details);
  grpc_metadata_array_destroy(&ep->accept_md);
  if (ok && !ep->stopping)
    request(ep);
}

void mcp_grpc_server_start(mcp_grpc_ep *ep) {
  grpc_server_start(ep->server);
  request(ep);
}

void mcp_grpc_server_shutdown(mcp_grpc_ep *ep) {
  /* Drain: no new calls; each stream ends with UNAVAILABLE (so sinks
   * reconnect elsewhere) once its send in flight is done; after the grace
   * period, whatever is stuck is cancelled (see the tick). */
  grpc_server_shutdown_and_notify(ep->server, ep->cq, &ep->shutdown_tag);
  ep->shutdown_pending = 1;
  ep->cancel_at = ep->now + ep->opts.shutdown_grace;
  for (mcp_grpc_stream *s = ep->streams; s; s = s->next)
    mcp_grpc_stream_finish(s, GRPC_STATUS_UNAVAILABLE, "server shutting down");
}

void mcp_grpc_server_tick(mcp_grpc_ep *ep, mcp_tstamp *deadline) {
  if (!ep->server || !ep->stopping)
    return;
  if (!ep->cancelled_all) {
    if (ep->now >= ep->cancel_at) {
      grpc_server_cancel_all_calls(ep->server);
      ep->cancelled_all = 1;
    } else if (ep->cancel_at < *deadline) {
      *deadline = ep->cancel_at;
    }
  }
  if (!ep->shutdown_pending && !ep->accept_pending && !ep->streams) {
    grpc_server_destroy(ep->server);
    ep->server = NULL;
  }
}
