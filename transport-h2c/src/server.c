/* Listening: bind, accept, and name the peer of each connection. */
#define _GNU_SOURCE /* accept4() */
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

static void accept_some(mcp_h2c_ep *ep);

static void on_accept_retry(uv_timer_t *t) { accept_some(t->data); }

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

/*
 * Accepting. The listener is our own descriptor under a uv_poll_t, not
 * uv_listen(): out of descriptors, libuv accepts and closes the waiting
 * connections without telling anyone. Here accept() failing stops the
 * polling (nothing spins: the listener stays readable while connections
 * wait), the application hears it once (on_listener), and accepting
 * resumes when one of our connections closes (a descriptor is free) or,
 * failing that, after a second. The waiting connections stay in the
 * listen backlog and are served then; beyond the backlog the kernel
 * drops SYNs and the clients retransmit.
 */
#define ACCEPT_RETRY_MS 1000
/* Connections the kernel completes before we accept them (it caps this
 * at net.core.somaxconn, 4096 by default): thousands of sinks that dial
 * at once, or that wait while we are out of descriptors. */
#define LISTEN_BACKLOG 4096
#define ACCEPT_BATCH 64 /* per loop iteration: reads of others go on */

static void on_listener_event(mcp_h2c_ep *ep, mcp_h2c_listener_event ev,
                              int err) {
  if (ep->opts.on_listener && !ep->stopping)
    ep->opts.on_listener(ev, err, ep->opts.user_data);
}

static void accept_pause(mcp_h2c_ep *ep, int err, uint64_t retry_ms) {
  uv_poll_stop(&ep->lis);
  uv_timer_start(&ep->accept_retry, on_accept_retry, retry_ms, 0);
  if (!ep->accept_paused) {
    ep->accept_paused = 1;
    ep->accept_pauses++;
    on_listener_event(ep, MCP_H2C_LISTENER_PAUSED, err);
  }
}

static void on_listen_ready(uv_poll_t *p, int status, int events) {
  (void)events;
  mcp_h2c_ep *ep = p->data;
  if (status < 0) { /* the descriptor failed: try again later */
    accept_pause(ep, -status, ACCEPT_RETRY_MS);
    return;
  }
  accept_some(ep);
}

void mcp_h2c_server_conn_gone(mcp_h2c_ep *ep) {
  if (ep->accept_paused && ep->listening && !ep->stopping)
    uv_timer_start(&ep->accept_retry, on_accept_retry, 0, 0);
}

/* Takes the connection |fd| (accepted, non-blocking). */
static void serve(mcp_h2c_ep *ep, int fd) {
  mcp_h2c_conn *c = mcp_h2c_conn_new(ep, 0);
  if (!c) {
    close(fd); /* this one is lost; the next wait a little */
    accept_pause(ep, ENOMEM, 10);
    return;
  }
  int rv = ep->addr.is_unix ? uv_pipe_open(&c->h.pipe, fd)
                            : uv_tcp_open(&c->h.tcp, fd);
  if (rv != 0) {
    close(fd);
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

static void accept_some(mcp_h2c_ep *ep) {
  if (ep->stopping || !ep->listening)
    return;
  for (int i = 0; i < ACCEPT_BATCH; i++) {
    int fd = accept4(ep->lis_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      serve(ep, fd);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED)
      continue; /* nothing we can do for that one */
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      break;
    /* EMFILE, ENFILE (out of descriptors), ENOBUFS, ENOMEM, or worse:
     * the same again at once would spin. */
    accept_pause(ep, errno, ACCEPT_RETRY_MS);
    return;
  }
  if (ep->accept_paused) {
    ep->accept_paused = 0;
    uv_timer_stop(&ep->accept_retry);
    on_listener_event(ep, MCP_H2C_LISTENER_RESUMED, 0);
  }
  if (!uv_is_active((uv_handle_t *)&ep->lis))
    uv_poll_start(&ep->lis, UV_READABLE, on_listen_ready);
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
        listen(fd, LISTEN_BACKLOG) != 0) {
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
      bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
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
  int rv = uv_poll_init(ep->loop, &ep->lis, fd);
  if (rv != 0) {
    close(fd);
    errno = -rv; /* libuv's codes are negated errnos on Unix */
    return MCP_ERR_IO;
  }
  ep->lis.data = ep;
  ep->lis_fd = fd; /* ours: closed by mcp_h2c_server_stop() */
  ep->refs++;
  ep->listening = 1; /* closed by mcp_h2c_server_stop(), also on failure */
  uv_timer_init(ep->loop, &ep->accept_retry);
  ep->accept_retry.data = ep;
  ep->refs++;
  if ((rv = uv_poll_start(&ep->lis, UV_READABLE, on_listen_ready)) != 0) {
    errno = -rv;
    return MCP_ERR_IO;
  }
  return 0;
}

void mcp_h2c_server_stop(mcp_h2c_ep *ep) {
  if (!ep->listening)
    return;
  ep->listening = 0;
  uv_close((uv_handle_t *)&ep->lis, on_listener_closed);
  close(ep->lis_fd); /* the poll handle is stopped by uv_close() */
  ep->lis_fd = -1;
  uv_close((uv_handle_t *)&ep->accept_retry, on_listener_closed);
  if (ep->addr.is_unix)
    unlink(ep->addr.path);
}
