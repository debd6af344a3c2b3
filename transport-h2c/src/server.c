/* Listening: bind, accept, and name the peer of each connection. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

static void on_listener_closed(uv_handle_t *h) { mcp_h2c_ep_unref(h->data); }

static void accept_one(mcp_h2c_ep *ep);

static void on_accept_retry(uv_timer_t *t) { accept_one(t->data); }

/* TLS: 1 when |c| may start a handshake now (the limits on handshakes in
 * progress, in all and from its address), and then it counts. */
static int handshake_admit(mcp_h2c_ep *ep, mcp_h2c_conn *c) {
  const mcp_h2c_options *o = &ep->opts;
  if (ep->handshaking >= (size_t)o->max_handshakes)
    return 0;
  char key[160], other[160]; /* the address without the port */
  mcp_admit_peer_key(c->peer, key, sizeof(key));
  size_t same = 0, seen = 0;
  /* New connections are at the head: the handshaking ones are near it. */
  for (const mcp_h2c_conn *d = ep->conns; d && seen < ep->handshaking;
       d = d->next) {
    if (!d->hs_counted)
      continue;
    seen++;
    mcp_admit_peer_key(d->peer, other, sizeof(other));
    if (strcmp(key, other) == 0 &&
        ++same >= (size_t)o->max_handshakes_per_peer)
      return 0;
  }
  c->hs_counted = 1;
  ep->handshaking++;
  return 1;
}

static void on_connection(uv_stream_t *lis, int status) {
  mcp_h2c_ep *ep = lis->data;
  if (status < 0 || ep->stopping)
    return;
  accept_one(ep);
}

/* Accepts the connection libuv holds. */
static void accept_one(mcp_h2c_ep *ep) {
  if (ep->stopping || !ep->listening)
    return;
  uv_stream_t *lis = ep->addr.is_unix ? (uv_stream_t *)&ep->lis.pipe
                                      : (uv_stream_t *)&ep->lis.tcp;
  mcp_h2c_conn *c = mcp_h2c_conn_new(ep, 0);
  if (!c) {
    /* libuv keeps the connection and stops watching the listener until
     * it is accepted: without a retry, one failed allocation would stop
     * the listener for good. */
    uv_timer_start(&ep->accept_retry, on_accept_retry, 10, 0);
    return;
  }
  if (uv_accept(lis, c->sock) != 0) {
    mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE, "accept failed");
    return;
  }
  if (!ep->addr.is_unix)
    uv_tcp_nodelay(&c->h.tcp, 1);
  mcp_h2c_conn_name_peer(c);
  if (ep->tls) {
    if (!handshake_admit(ep, c)) {
      ep->refused_handshakes++;
      mcp_h2c_conn_close(c, MCP_CODE_UNAVAILABLE,
                         "too many TLS handshakes in progress");
      return;
    }
    if (mcp_h2c_tls_conn_start(c) < 0) {
      mcp_h2c_conn_close(c, MCP_CODE_RESOURCE_EXHAUSTED, "out of memory");
      return;
    }
  }
  mcp_h2c_conn_start(c);
  mcp_h2c_conn_arm(c);
}

/* Opens a listening socket with plain system calls, so that a failure
 * leaves nothing on the loop. Returns the descriptor or a negative
 * mcp_error: INVALID_ARGUMENT (a path too long, a name that does not
 * resolve), IO with errno set (socket(), bind() or listen() failed:
 * EADDRINUSE, EACCES, EADDRNOTAVAIL...). */
static int listen_fd(mcp_h2c_ep *ep) {
  const mcp_h2c_addr *a = &ep->addr;
  int fd;
  if (a->is_unix) {
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    if (strlen(a->path) >= sizeof(sun.sun_path))
      return MCP_ERR_INVALID_ARGUMENT;
    strcpy(sun.sun_path, a->path);
    struct stat st;
    if (lstat(a->path, &st) == 0 && S_ISSOCK(st.st_mode))
      unlink(a->path); /* a stale socket of an earlier run */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return MCP_ERR_IO;
    if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0 ||
        listen(fd, 511) != 0) {
      int e = errno;
      close(fd);
      errno = e;
      return MCP_ERR_IO;
    }
    return fd;
  }
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const char *host = a->host;
  if (strcmp(host, "*") == 0)
    host = NULL;
  if (getaddrinfo(host, a->port, &hints, &res) != 0 || !res)
    return MCP_ERR_INVALID_ARGUMENT;
  const struct addrinfo *ai = res;
  for (const struct addrinfo *i = res; i; i = i->ai_next)
    if (i->ai_family == AF_INET) { /* IPv4 first, as the dialer does */
      ai = i;
      break;
    }
  fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 511) != 0) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    freeaddrinfo(res);
    errno = e;
    return MCP_ERR_IO;
  }
  freeaddrinfo(res);
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
    ep->port =
        ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                       : ((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

int mcp_h2c_server_start(mcp_h2c_ep *ep) {
  int fd = listen_fd(ep);
  if (fd < 0)
    return fd;
  int rv;
  uv_stream_t *lis;
  if (ep->addr.is_unix) {
    uv_pipe_init(ep->loop, &ep->lis.pipe, 0);
    ep->lis.pipe.data = ep;
    lis = (uv_stream_t *)&ep->lis.pipe;
    rv = uv_pipe_open(&ep->lis.pipe, fd);
  } else {
    uv_tcp_init(ep->loop, &ep->lis.tcp);
    ep->lis.tcp.data = ep;
    lis = (uv_stream_t *)&ep->lis.tcp;
    rv = uv_tcp_open(&ep->lis.tcp, fd);
  }
  ep->refs++;
  ep->listening = 1; /* closed by mcp_h2c_server_stop(), also on failure */
  uv_timer_init(ep->loop, &ep->accept_retry);
  ep->accept_retry.data = ep;
  ep->refs++;
  if (rv != 0) {
    close(fd); /* not the handle's */
    errno = -rv; /* libuv's codes are negated errnos on Unix */
    return MCP_ERR_IO;
  }
  /* From here on the handle owns the descriptor. */
  if ((rv = uv_listen(lis, 511, on_connection)) != 0) {
    errno = -rv;
    return MCP_ERR_IO;
  }
  return 0;
}

void mcp_h2c_server_stop(mcp_h2c_ep *ep) {
  if (!ep->listening)
    return;
  ep->listening = 0;
  if (ep->addr.is_unix)
    uv_close((uv_handle_t *)&ep->lis.pipe, on_listener_closed);
  else
    uv_close((uv_handle_t *)&ep->lis.tcp, on_listener_closed);
  uv_close((uv_handle_t *)&ep->accept_retry, on_listener_closed);
  if (ep->addr.is_unix)
    unlink(ep->addr.path);
}
