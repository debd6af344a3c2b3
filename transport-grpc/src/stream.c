/* One gRPC call carrying one core session: at most one receive and one
 * send in flight; messages go between the call and the session as bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/support/alloc.h>

#include "internal.h"

static void on_recv(mcp_grpc_tag *tag, int ok);
static void on_send(mcp_grpc_tag *tag, int ok);
static void on_close(mcp_grpc_tag *tag, int ok);

static void start_batch(mcp_grpc_stream *s, const grpc_op *ops, size_t n,
                        mcp_grpc_tag *tag) {
  grpc_call_error e = grpc_call_start_batch(s->call, ops, n, tag, NULL);
  if (e != GRPC_CALL_OK) {
    /* Only misuse fails here (e.g. two sends in flight): a bug in this
     * file, not a peer fault. */
    fprintf(stderr, "mcp_grpc: grpc_call_start_batch: %s\n",
            grpc_call_error_to_string(e));
    abort();
  }
  s->ops++;
}

static void notify(mcp_grpc_stream *s, mcp_grpc_stream_event ev) {
  mcp_grpc_ep *ep = s->ep;
  if (!ep->opts.on_stream || s->role == MCP_GRPC_ROLE_NONE)
    return;
  /* CLOSED only pairs with an OPENED; REFUSED with nothing. */
  if (ev == MCP_GRPC_STREAM_CLOSED && !s->announced)
    return;
  if (ev == MCP_GRPC_STREAM_OPENED)
    s->announced = 1;
  mcp_grpc_stream_info info;
  mcp_grpc_stream_info_fill(s, &info);
  ep->opts.on_stream(ev, &info, ep->opts.user_data);
}

static void set_details(mcp_grpc_stream *s, const char *details) {
  char *d = mcp_grpc_strdup(&s->ep->mem, details ? details : ""); /* |details| may be ours */
  mcp_grpc_free(&s->ep->mem, s->rec.details);
  s->rec.details = d;
}

static void drop_session(mcp_grpc_stream *s) {
  if (s->st) {
    mcp_stream_del(s->st);
    s->st = NULL;
  }
  if (s->ep->sink_stream == s)
    s->ep->sink_stream = NULL;
  s->expiry = MCP_TSTAMP_MAX;
  mcp_grpc_admit_leave(s);
}

static mcp_grpc_stream *stream_new(mcp_grpc_ep *ep, grpc_call *call,
                                   mcp_grpc_role role, int dialed) {
  mcp_grpc_stream *s = mcp_grpc_calloc(&ep->mem, 1, sizeof(*s));
  if (!s) {
    grpc_call_cancel_with_status(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                 mcp_strerror(MCP_ERR_NOMEM), NULL);
    grpc_call_unref(call);
    return NULL;
  }
  s->ep = ep;
  s->call = call;
  s->id = ++ep->next_id;
  s->role = role;
  s->rec.dialed = dialed;
  s->peer = grpc_call_get_peer(call);
  s->rec.opened = ep->now;
  s->expiry = MCP_TSTAMP_MAX;
  s->rec.status = GRPC_STATUS_OK;
  s->recv_tag.fn = on_recv;
  s->send_tag.fn = on_send;
  s->close_tag.fn = on_close;
  s->next = ep->streams;
  if (ep->streams)
    ep->streams->prev = s;
  ep->streams = s;
  ep->nstreams++;
  return s;
}

static void stream_free(mcp_grpc_stream *s) {
  mcp_grpc_ep *ep = s->ep;
  if (s->prev)
    s->prev->next = s->next;
  else
    ep->streams = s->next;
  if (s->next)
    s->next->prev = s->prev;
  ep->nstreams--;
  grpc_call_unref(s->call);
  gpr_free(s->peer);
  mcp_grpc_free(&ep->mem, s->rec.details);
  mcp_grpc_free(&ep->mem, s->api);
  mcp_grpc_stream_identity_free(s);
  if (s->rec.dialed)
    grpc_metadata_array_destroy(&s->md_initial);
  mcp_grpc_free(&ep->mem, s);
}

/* Frees the stream once no operation is in flight (the close operation
 * is one of them, so the call is over). */
static void maybe_free(mcp_grpc_stream *s) {
  if (s->ops > 0)
    return;
  mcp_grpc_ep *ep = s->ep;
  drop_session(s);
  notify(s, MCP_GRPC_STREAM_CLOSED);
  if (s->rec.dialed) {
    /* The call is released before its channel may be (call_gone). */
    size_t slot = s->slot;
    mcp_grpc_chan *chan = s->chan;
    uint64_t received = s->rec.received;
    int status = s->rec.status;
    char *details = s->rec.details;
    s->rec.details = NULL;
    stream_free(s);
    mcp_grpc_svc_client_call_gone(ep, slot, chan, received, status,
                                  details ? details : "");
    mcp_grpc_free(&ep->mem, details);
    return;
  }
  stream_free(s);
}

/* The engine asks for |st| to be pumped: only noted here (a waker never
 * re-enters the stream); the loop's tick pumps it before it sleeps. */
static void on_wake(mcp_stream *st, void *user_data) {
  (void)st;
  mcp_grpc_stream *s = user_data;
  s->dirty = 1;
  s->ep->woken = 1;
}

static void attach(mcp_grpc_stream *s, mcp_stream *st) {
  s->st = st;
  const mcp_stream_ops *ops = mcp_stream_get_ops(st);
  mcp_grpc_free(&s->ep->mem, s->api);
  /* NULL (no memory): reported as "" */
  s->api = mcp_grpc_strdup(&s->ep->mem, ops && ops->name ? ops->name : "");
  mcp_stream_set_waker(st, on_wake, s);
  s->expiry = mcp_stream_get_expiry(st);
}

/* A service call: the protocol opens its stream for this peer. */
static int open_service(mcp_grpc_stream *s) {
  mcp_grpc_ep *ep = s->ep;
  mcp_peer_info peer;
  memset(&peer, 0, sizeof(peer));
  peer.address = s->peer ? s->peer : "";
  peer.tls = s->tls;
  mcp_peer who;
  memset(&who, 0, sizeof(who));
  mcp_identities_peer(&s->ids, &who);
  peer.common_name = who.common_name;
  peer.identities = who.identities;
  peer.nidentities = who.nidentities;
  mcp_stream *st = NULL;
  int rv = s->svc->open(s->svc->user_data, &peer, ep->now, &st);
  if (rv < 0) {
    mcp_stream_del(st); /* a protocol that gave one anyway */
    return rv;
  }
  if (!st)
    return MCP_ERR_CALLBACK; /* "0 and *pst" is the contract */
  attach(s, st);
  return 0;
}

/* MCP's own listening streams come from the core's service defs
 * (mcp_side) as every other protocol's; the core holds MCP's rules (the
 * newest sink stream wins). Dialed ones come with their stream. */
static int open_session(mcp_grpc_stream *s) {
  int rv = open_service(s);
  if (rv == 0 && s->role == MCP_GRPC_ROLE_SINK)
    s->ep->sink_stream = s;
  return rv;
}

static void start_recv(mcp_grpc_stream *s) {
  grpc_op ops[2];
  size_t n = 0;
  memset(ops, 0, sizeof(ops));
  if (s->rec.dialed && s->rec.received == 0 && !s->peer_known) {
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n].data.recv_initial_metadata.recv_initial_metadata = &s->md_initial;
    n++;
  }
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n].data.recv_message.recv_message = &s->recv_bb;
  n++;
  start_batch(s, ops, n, &s->recv_tag);
  s->recv_busy = 1;
}

static void send_initial_metadata(mcp_grpc_stream *s) {
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_INITIAL_METADATA;
  start_batch(s, &op, 1, &s->send_tag);
  s->send_busy = 1; /* counts as the send in flight */
  s->md_sent = 1;
}

static void send_status(mcp_grpc_stream *s) {
  s->state = MCP_GRPC_ST_CLOSING;
  if (s->closed)
    return;
  grpc_slice details =
      grpc_slice_from_copied_string(s->rec.details ? s->rec.details : "");
  grpc_op ops[2];
  size_t n = 0;
  memset(ops, 0, sizeof(ops));
  /* gRPC 1.51 sends no status (no trailers-only response) for a call
   * whose initial metadata was not sent: a refused call sends both. */
  if (!s->md_sent) {
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    s->md_sent = 1;
  }
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = (grpc_status_code)s->rec.status;
  ops[n].data.send_status_from_server.status_details = &details;
  n++;
  start_batch(s, ops, n, &s->send_tag);
  s->send_busy = 1;
  grpc_slice_unref(details); /* gRPC took its own reference */
}

void mcp_grpc_stream_finish(mcp_grpc_stream *s, int status,
                            const char *details) {
  if (s->state != MCP_GRPC_ST_OPEN)
    return;
  /* Copied first: |details| may belong to the session (an engine
   * stream's END), which goes now. */
  s->rec.status = status;
  set_details(s, details);
  drop_session(s);
  if (s->rec.dialed) {
    s->state = MCP_GRPC_ST_CLOSING;
    grpc_call_cancel_with_status(s->call, (grpc_status_code)status,
                                 s->rec.details ? s->rec.details : "", NULL);
  } else if (s->send_busy) {
    s->state = MCP_GRPC_ST_FINISHING; /* the status must follow the send */
  } else {
    send_status(s);
  }
}

static void fail(mcp_grpc_stream *s, int err) {
  mcp_grpc_stream_finish(s, mcp_error_grpc_status(err), mcp_strerror(err));
}

void mcp_grpc_stream_refuse(mcp_grpc_stream *s, int status,
                            const char *details) {
  mcp_grpc_stream_finish(s, status, details);
  notify(s, MCP_GRPC_STREAM_REFUSED);
}

/* Reads the peer's identities and asks the authorizer: 0 (the stream is
 * authorized) or the status to end it with, counted in the stats. */
static int identify_and_authorize(mcp_grpc_stream *s, const char **details) {
  mcp_grpc_stream_identify(s);
  int code = mcp_grpc_stream_authorize(s, details);
  if (code == GRPC_STATUS_UNAUTHENTICATED)
    s->ep->stats.refused_unauthenticated++;
  else if (code)
    s->ep->stats.refused_denied++;
  else
    s->authorized = 1;
  return code;
}

/* A new call: nothing is read from or sent on it (and no session exists)
 * until it is authorized and admitted. The close operation is posted at
 * once, so that a client giving up while its call waits is noticed. A
 * service call goes the same way as an MCP one (authorization, admission
 * without an initial slot, limits, shutdown): only its session differs. */
void mcp_grpc_stream_accept(mcp_grpc_ep *ep, grpc_call *call,
                            const mcp_service_def *svc, mcp_grpc_role role) {
  mcp_grpc_stream *s = stream_new(ep, call, role, 0);
  if (!s)
    return;
  s->svc = svc;
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &s->cancelled;
  start_batch(s, &op, 1, &s->close_tag);

  if (role == MCP_GRPC_ROLE_NONE) {
    mcp_grpc_stream_finish(s, GRPC_STATUS_UNIMPLEMENTED, "unknown method");
    return;
  }
  if (ep->stopping) {
    mcp_grpc_stream_finish(s, GRPC_STATUS_UNAVAILABLE,
                           "server shutting down");
    return;
  }
  const char *details = NULL;
  int code = identify_and_authorize(s, &details);
  if (code) {
    mcp_grpc_stream_refuse(s, code, details);
    return;
  }
  mcp_grpc_admit(s);
}

/* A stream with its session: the reads start and the application hears
 * it opened. */
static void stream_started(mcp_grpc_stream *s) {
  start_recv(s);
  s->dirty = 1;
  s->ep->stats.opened++;
  notify(s, MCP_GRPC_STREAM_OPENED);
}

/* A stream whose initial metadata is on its way: its session, then the
 * reads. */
static void start_session(mcp_grpc_stream *s) {
  int rv = open_session(s);
  if (rv < 0) {
    fail(s, rv);
    return;
  }
  stream_started(s);
}

void mcp_grpc_stream_open(mcp_grpc_stream *s) {
  send_initial_metadata(s);
  start_session(s);
}

void mcp_grpc_stream_reauthorize(mcp_grpc_stream *s) {
  if (s->state != MCP_GRPC_ST_OPEN || !s->authorized ||
      s->role == MCP_GRPC_ROLE_NONE)
    return;
  const char *details = NULL;
  int code = mcp_grpc_stream_authorize(s, &details);
  if (!code)
    return;
  s->ep->stats.revoked++;
  if (!s->rec.dialed && !s->st)
    mcp_grpc_stream_refuse(s, code, details); /* it was waiting */
  else
    mcp_grpc_stream_finish(s, code, details);
}

/* Dialed: the initial metadata went out, so the connection (and its TLS
 * handshake) is up and the server's identity is known. Nothing has been
 * sent yet: the server is authorized first. */
static void dial_connected(mcp_grpc_stream *s) {
  s->connected = 1;
  gpr_free(s->peer);
  s->peer = grpc_call_get_peer(s->call);
  const char *details = NULL;
  int code = identify_and_authorize(s, &details);
  if (code)
    mcp_grpc_stream_finish(s, code, details);
}

/* A dialed call's start, the same for every protocol: the initial
 * metadata out, and the status awaited (close_tag says the call ended). */
static void open_client_call(mcp_grpc_stream *s) {
  grpc_metadata_array_init(&s->md_initial);
  grpc_metadata_array_init(&s->md_trailing);
  send_initial_metadata(s);
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  op.data.recv_status_on_client.trailing_metadata = &s->md_trailing;
  op.data.recv_status_on_client.status = &s->recv_status;
  op.data.recv_status_on_client.status_details = &s->recv_details;
  start_batch(s, &op, 1, &s->close_tag);
}

/* A dialed call of a slot, with the protocol's stream: nothing is sent
 * before the connection is up and the server authorized (dial_connected),
 * then what the pump gives. */
int mcp_grpc_stream_dial_service(mcp_grpc_ep *ep, grpc_call *call,
                                 size_t slot, mcp_grpc_chan *chan,
                                 mcp_stream *st) {
  mcp_grpc_stream *s = stream_new(ep, call, MCP_GRPC_ROLE_SERVICE, 1);
  if (!s) { /* the call is cancelled and released */
    mcp_stream_del(st);
    return MCP_ERR_NOMEM;
  }
  s->slot = slot;
  s->chan = chan;
  ep->slots[slot] = s;
  attach(s, st);
  open_client_call(s);
  stream_started(s);
  return 0;
}

static void send_msg(mcp_grpc_stream *s, mcp_msg *msg) {
  grpc_byte_buffer *bb = mcp_grpc_buffer_from_msg(&s->ep->mem, msg);
  if (!bb) {
    fail(s, MCP_ERR_NOMEM);
    return;
  }
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = bb;
  s->send_bb = bb;
  start_batch(s, &op, 1, &s->send_tag);
  s->send_busy = 1;
}

static void send_close(mcp_grpc_stream *s) {
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  start_batch(s, &op, 1, &s->send_tag);
  s->send_busy = 1;
  s->close_sent = 1;
}

/* What the driver says, until it has nothing now. One message in flight
 * at a time: after a SEND, the next pumps only run timers and look for
 * the end, until on_send pumps again. */
void mcp_grpc_stream_pump(mcp_grpc_stream *s) {
  mcp_grpc_ep *ep = s->ep;
  s->dirty = 0;
  if (s->state != MCP_GRPC_ST_OPEN || !s->authorized)
    return;
  /* Each turn either starts a send (the following ones cannot send) or
   * ends the loop: a few turns suffice. */
  for (int turn = 0; turn < 4 && s->st && s->state == MCP_GRPC_ST_OPEN;
       turn++) {
    /* Between the client's HALF_CLOSE and the close going out nothing
     * may be sent; after it the pump must still run with the sending side
     * free, or a client session could never end its own call (a broken
     * Assignments chain). */
    int can_send = !s->send_busy && !(s->client_done && !s->close_sent);
    mcp_msg *msg = NULL;
    int status = GRPC_STATUS_OK;
    const char *details = NULL;
    mcp_stream_action a =
        mcp_stream_pump(s->st, ep->now, can_send, &msg, &status, &details);
    if (a == MCP_STREAM_IDLE)
      break;
    if (a == MCP_STREAM_END) {
      mcp_grpc_stream_finish(s, status, details);
      return;
    }
    if (a == MCP_STREAM_SEND) {
      if (!can_send || s->close_sent) { /* the driver broke its contract */
        mcp_msg_free(msg);
        fail(s, MCP_ERR_CALLBACK);
        return;
      }
      if (msg)
        send_msg(s, msg);
    } else if (a == MCP_STREAM_HALF_CLOSE) {
      /* A client's goes out after the send in flight; a server's side
       * ends with its status, OK (only mcp_grpc_sink_finish() asks a
       * server stream for it: the pump says so once nothing is in
       * flight and the session has nothing ready). */
      if (s->rec.dialed) {
        s->client_done = 1;
      } else {
        mcp_grpc_stream_finish(s, GRPC_STATUS_OK, "");
        return;
      }
    }
  }
  if (s->rec.dialed && s->client_done && !s->close_sent && !s->send_busy &&
      s->state == MCP_GRPC_ST_OPEN)
    send_close(s);
  if (s->ticket && s->st)
    mcp_grpc_admit_check_initial(s);
  s->expiry = s->st ? mcp_stream_get_expiry(s->st) : MCP_TSTAMP_MAX;
}

/* Hands one received message to the session. */
static int deliver(mcp_grpc_stream *s, grpc_byte_buffer *bb) {
  mcp_grpc_ep *ep = s->ep;
  if (mcp_stream_takes_iov(s->st)) {
    /* Read as gRPC's read slices hold it: a push of megabytes is not
     * joined (issue 25, target 3). */
    mcp_iovec stack[64], *iov = NULL;
    ptrdiff_t n = mcp_grpc_buffer_iov(bb, &ep->mem, stack, 64, &iov);
    if (n < 0)
      return MCP_ERR_NOMEM;
    if (n > 0) {
      mcp_stream_recv_iov(s->st, iov, (size_t)n, ep->now);
      s->expiry = mcp_stream_get_expiry(s->st);
      if (iov != stack)
        mcp_grpc_free(&ep->mem, iov);
      return 0;
    }
  }
  const uint8_t *p;
  size_t len;
  grpc_slice flat;
  int joined;
  if (mcp_grpc_buffer_bytes(bb, &p, &len, &flat, &joined) < 0)
    return MCP_ERR_MALFORMED;
  /* The driver keeps a session's error for the next pump. */
  mcp_stream_recv(s->st, p, len, ep->now);
  s->expiry = mcp_stream_get_expiry(s->st);
  if (joined)
    grpc_slice_unref(flat);
  return 0;
}

/* A dialed call (unary, server streaming, MCP's) hears the server's last
 * message even when the status came first, as on the h2c transport,
 * where messages come before the trailers. */
static int keeps_last(const mcp_grpc_stream *s) {
  return s->st && s->rec.dialed;
}

static void on_recv(mcp_grpc_tag *tag, int ok) {
  mcp_grpc_stream *s = MCP_GRPC_CONTAINER(tag, mcp_grpc_stream, recv_tag);
  s->ops--;
  s->recv_busy = 0;
  grpc_byte_buffer *bb = s->recv_bb;
  s->recv_bb = NULL;
  if (s->rec.dialed && !s->peer_known && ok) {
    /* Before the connection, gRPC's peer is the target; now the address. */
    gpr_free(s->peer);
    s->peer = grpc_call_get_peer(s->call);
    s->peer_known = 1;
  }
  if (ok && bb) {
    s->rec.received++;
    s->ep->stats.messages_received++;
    /* A client call still hears the server's last message when the
     * status was seen first (on_close kept its session). */
    if (s->state == MCP_GRPC_ST_OPEN || keeps_last(s)) {
      int rv = deliver(s, bb);
      if (rv < 0) {
        fail(s, rv);
      } else {
        s->dirty = 1;
        if (s->state == MCP_GRPC_ST_OPEN)
          start_recv(s);
      }
    }
  } else if (ok && !s->rec.dialed && s->st) {
    /* The client half-closed: nothing more is read; the driver applies
     * the protocol's half-close rule (MCP's: what is ready now, the
     * answers to what it sent, still goes out, then OK). */
    if (s->state == MCP_GRPC_ST_OPEN) {
      mcp_stream_half_close(s->st, s->ep->now);
      s->dirty = 1;
    }
  }
  /* Else the call failed or (client) the server ended it: on_close
   * reports the status. */
  if (bb)
    grpc_byte_buffer_destroy(bb);
  maybe_free(s);
}

static void on_send(mcp_grpc_tag *tag, int ok) {
  mcp_grpc_stream *s = MCP_GRPC_CONTAINER(tag, mcp_grpc_stream, send_tag);
  s->ops--;
  s->send_busy = 0;
  if (s->send_bb) {
    grpc_byte_buffer_destroy(s->send_bb);
    s->send_bb = NULL;
    if (ok) {
      s->rec.sent++;
      s->ep->stats.messages_sent++;
    }
  } else if (s->rec.dialed && !s->connected && ok &&
             s->state == MCP_GRPC_ST_OPEN) {
    dial_connected(s);
  }
  if (s->state == MCP_GRPC_ST_FINISHING)
    send_status(s);
  else if (ok)
    s->dirty = 1; /* pull the next message */
  maybe_free(s);
}

static void on_close(mcp_grpc_tag *tag, int ok) {
  (void)ok; /* both close operations always succeed */
  mcp_grpc_stream *s = MCP_GRPC_CONTAINER(tag, mcp_grpc_stream, close_tag);
  s->ops--;
  s->closed = 1;
  if (s->rec.dialed) {
    s->rec.status = s->recv_status;
    char *d = grpc_slice_to_c_string(s->recv_details);
    if (s->ep->tls && !s->connected &&
        s->rec.status == GRPC_STATUS_UNAVAILABLE) {
      /* gRPC's own words ("Socket closed" when the server refused our
       * certificate) rarely say that TLS is why. */
      static const char pre[] =
          "no TLS connection (handshake failed or server unreachable): ";
      size_t n = sizeof(pre) + strlen(d);
      char *full = mcp_grpc_malloc(&s->ep->mem, n);
      if (full) {
        snprintf(full, n, "%s%s", pre, d);
        set_details(s, full);
        mcp_grpc_free(&s->ep->mem, full);
      } else {
        set_details(s, d);
      }
    } else {
      set_details(s, d);
    }
    gpr_free(d);
    grpc_slice_unref(s->recv_details);
    grpc_metadata_array_destroy(&s->md_trailing);
  } else if (s->cancelled) {
    s->rec.status = GRPC_STATUS_CANCELLED;
    set_details(s, "cancelled");
  }
  if (s->state != MCP_GRPC_ST_CLOSING) {
    /* A client call keeps its session while a receive is in flight: it
     * may still carry the server's last message (on_recv); maybe_free()
     * deletes it. */
    if (!(keeps_last(s) && s->recv_busy))
      drop_session(s);
    s->state = MCP_GRPC_ST_CLOSING;
  }
  maybe_free(s);
}
