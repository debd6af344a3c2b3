/* Listening: accepts calls for the role's method, shuts down gracefully. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <grpc/grpc_security.h>

#include "internal.h"

/* The def of |defs[0..n)| served on |method|, or NULL. */
static const mcp_service_def *find_def(const mcp_service_def *defs, size_t n,
                                       grpc_slice method) {
  for (size_t i = 0; i < n; i++)
    if (grpc_slice_str_cmp(method, defs[i].method) == 0)
      return &defs[i];
  return NULL;
}

static void on_accept(mcp_grpc_tag *tag, int ok);

static void on_shutdown(mcp_grpc_tag *tag, int ok) {
  (void)ok;
  mcp_grpc_ep *ep = MCP_GRPC_CONTAINER(tag, mcp_grpc_ep, shutdown_tag);
  ep->shutdown_pending = 0;
}

/* Binds |sa| with the options gRPC uses, then closes it. 0 or an errno. */
static int probe_addr(const struct sockaddr *sa, socklen_t len) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return errno;
  int one = 1, e = 0;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd, sa, len) != 0)
    e = errno;
  close(fd);
  return e;
}

/* As probe_addr(); for a wildcard, either family's wildcard will do, as
 * gRPC binds [::] and falls back to 0.0.0.0 for both. */
static int probe_one(const struct addrinfo *ai) {
  int e = probe_addr(ai->ai_addr, ai->ai_addrlen);
  if (e == 0)
    return 0;
  if (ai->ai_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)ai->ai_addr;
    if (in->sin_addr.s_addr != htonl(INADDR_ANY))
      return e;
    struct sockaddr_in6 w6;
    memset(&w6, 0, sizeof(w6));
    w6.sin6_family = AF_INET6;
    w6.sin6_addr = in6addr_any;
    w6.sin6_port = in->sin_port;
    return probe_addr((struct sockaddr *)&w6, sizeof(w6)) == 0 ? 0 : e;
  }
  if (ai->ai_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ai->ai_addr;
    if (memcmp(&in6->sin6_addr, &in6addr_any, sizeof(in6addr_any)) != 0)
      return e;
    struct sockaddr_in w4;
    memset(&w4, 0, sizeof(w4));
    w4.sin_family = AF_INET;
    w4.sin_addr.s_addr = htonl(INADDR_ANY);
    w4.sin_port = in6->sin6_port;
    return probe_addr((struct sockaddr *)&w4, sizeof(w4)) == 0 ? 0 : e;
  }
  return e;
}

/* "unix:PATH" or "unix://PATH": gRPC replaces a socket file left at PATH,
 * so only a path that is not one is tried (then removed again). */
static int probe_unix(const char *path) {
  if (strncmp(path, "//", 2) == 0)
    path += 2;
  struct sockaddr_un sun;
  memset(&sun, 0, sizeof(sun));
  sun.sun_family = AF_UNIX;
  struct stat st;
  if (!path[0] || strlen(path) >= sizeof(sun.sun_path) ||
      (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)))
    return 0;
  strcpy(sun.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return errno;
  int e = 0;
  if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0)
    e = errno;
  else
    unlink(path);
  close(fd);
  return e;
}

/*
 * gRPC reports a failed bind only as a return of 0 and a log line (a raw
 * error dump on stderr). So first bind each address it will resolve
 * ourselves, with the same socket options, to learn the errno
 * (EADDRINUSE, EACCES, EADDRNOTAVAIL) and spare the user the dump. Returns
 * 0 when gRPC may try (some address binds, or the probe cannot tell: an
 * abstract socket, port 0, a name our resolver does not know), else the errno
 * of the first address. The port can change hands in between: then gRPC
 * still fails, as before.
 */
static int probe_bind(const char *address) {
  if (strncmp(address, "unix:", 5) == 0)
    return probe_unix(address + 5);
  if (strncmp(address, "unix-abstract:", 14) == 0 ||
      strncmp(address, "vsock:", 6) == 0)
    return 0;
  char host[256];
  const char *colon = strrchr(address, ':');
  if (!colon || !colon[1])
    return 0;
  size_t hl = (size_t)(colon - address);
  const char *h = address;
  if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
    h++;
    hl -= 2;
  } else if (memchr(h, ':', hl)) {
    return 0; /* a bare IPv6 address: gRPC's own rules */
  }
  if (hl >= sizeof(host))
    return 0;
  memcpy(host, h, hl);
  host[hl] = '\0';
  const char *port = colon + 1;
  if (strspn(port, "0") == strlen(port))
    return 0; /* any free port */
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (getaddrinfo(hl ? host : NULL, port, &hints, &res) != 0 || !res)
    return 0;
  int first = 0;
  for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int e = probe_one(ai);
    if (e == 0) {
      first = 0;
      break;
    }
    if (!first)
      first = e;
  }
  freeaddrinfo(res);
  return first;
}

int mcp_grpc_server_create(mcp_grpc_ep *ep) {
  int e = probe_bind(ep->address);
  if (e) {
    ep->listen_errno = e;
    return MCP_ERR_IO;
  }
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
    all = mcp_grpc_malloc(&ep->mem, (n + 1) * sizeof(*all));
    if (!all) {
      mcp_grpc_free(&ep->mem, a);
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
    mcp_grpc_free(&ep->mem, all);
  mcp_grpc_free(&ep->mem, a);
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
    /* The application's services, then the MCP side's (the core's
     * defs; none with no_mcp). */
    grpc_slice method = ep->accept_details.method;
    const mcp_service_def *def =
        find_def(ep->opts.services, ep->opts.nservices, method);
    mcp_grpc_role role = MCP_GRPC_ROLE_SERVICE;
    if (!def && ep->side) {
      size_t n;
      const mcp_service_def *mcp = mcp_side_services(ep->side, &n);
      def = find_def(mcp, n, method);
      role = ep->role;
    }
    mcp_grpc_stream_accept(ep, ep->accept_call, def,
                           def ? role : MCP_GRPC_ROLE_NONE);
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
