/*
 * The stream driver: the policy every transport used to carry on its own,
 * once. A transport moves bytes and asks mcp_stream_pump() what to do; the
 * protocol session behind mcp_stream_ops decides what to say.
 *
 * The order of one pump: a kept error ends the stream; due timers run;
 * with the sending side free, the session's next message goes out; with
 * nothing more to send, the session may end the stream, the peer's
 * half-close may end it, or (client) our side half-closes.
 */
#include "engine_int.h"

#include "mcp/engine.h"

/* An expiry that produced nothing is not run again before this much time:
 * a session whose deadline stays in the past must not spin its transport. */
#define MCP_STREAM_SPIN_GUARD MCP_MILLISECONDS

struct mcp_stream {
  mcp_mem mem;
  const mcp_stream_ops *ops;
  void *sess;
  int err;              /* kept error: the next pump ends the stream */
  int peer_half_closed; /* the peer sends nothing more */
  int half_closed;      /* client: our side is half-closed */
  int finish;           /* client: mcp_stream_finish() was called */
  mcp_tstamp not_before; /* spin guard for timers */
  uint64_t received, sent;
  mcp_stream_waker waker;
  void *waker_user_data;
};

int mcp_stream_new(mcp_stream **pst, const mcp_stream_ops *ops, void *sess,
                   const mcp_mem *mem, mcp_tstamp ts) {
  MCP_UNUSED(ts);
  if (!pst || !ops || !ops->next || !ops->del) {
    if (ops && ops->del && sess) {
      ops->del(sess);
    }
    return MCP_ERR_INVALID_ARGUMENT;
  }
  mcp_mem m;
  mcp_mem_init(&m, mem);
  mcp_stream *st = mcp_mem_calloc(&m, 1, sizeof(*st));
  if (!st) {
    ops->del(sess);
    return MCP_ERR_NOMEM;
  }
  st->mem = m;
  st->ops = ops;
  st->sess = sess;
  *pst = st;
  return 0;
}

void mcp_stream_del(mcp_stream *st) {
  if (!st) {
    return;
  }
  st->ops->del(st->sess);
  mcp_mem m = st->mem;
  mcp_mem_free(&m, st);
}

const mcp_stream_ops *mcp_stream_get_ops(const mcp_stream *st) {
  return st->ops;
}

void *mcp_stream_session(const mcp_stream *st) { return st->sess; }

int mcp_stream_initial_sent(const mcp_stream *st, mcp_tstamp ts) {
  return !st->ops->initial_sent || st->ops->initial_sent(st->sess, ts);
}

void mcp_stream_recv(mcp_stream *st, const uint8_t *in, size_t len,
                     mcp_tstamp ts) {
  if (st->err) {
    return; /* ending: what follows is not read */
  }
  st->received++;
  if (!st->ops->recv) {
    /* A protocol that expects nothing from the peer. */
    st->err = MCP_ERR_PROTOCOL;
    return;
  }
  int rv = st->ops->recv(st->sess, in, len, ts);
  if (rv < 0) {
    st->err = rv;
  }
}

void mcp_stream_recv_iov(mcp_stream *st, const mcp_iovec *iov, size_t niov,
                         mcp_tstamp ts) {
  if (niov == 1 || st->err || !st->ops->recv) {
    mcp_stream_recv(st, niov ? iov[0].base : NULL, niov ? iov[0].len : 0, ts);
    return;
  }
  if (st->ops->recv_iov) {
    st->received++;
    int rv = st->ops->recv_iov(st->sess, iov, niov, ts);
    if (rv < 0) {
      st->err = rv;
    }
    return;
  }
  size_t len = mcp_iov_len(iov, niov);
  uint8_t *flat = mcp_mem_malloc(&st->mem, len ? len : 1);
  if (!flat) {
    st->received++;
    st->err = MCP_ERR_NOMEM;
    return;
  }
  mcp_iov_flatten(iov, niov, flat);
  mcp_stream_recv(st, flat, len, ts);
  mcp_mem_free(&st->mem, flat);
}

int mcp_stream_takes_iov(const mcp_stream *st) {
  return st->ops->recv_iov != NULL;
}

void mcp_stream_half_close(mcp_stream *st, mcp_tstamp ts) {
  if (st->peer_half_closed) {
    return;
  }
  st->peer_half_closed = 1;
  if (st->ops->half_close) {
    st->ops->half_close(st->sess, ts);
  }
}

static mcp_stream_action end_with_error(mcp_stream *st, int *status,
                                        const char **details) {
  *status = mcp_error_grpc_status(st->err);
  *details = mcp_strerror(st->err);
  return MCP_STREAM_END;
}

static mcp_tstamp session_expiry(const mcp_stream *st) {
  return st->ops->get_expiry && st->ops->handle_expiry
             ? st->ops->get_expiry(st->sess)
             : MCP_TSTAMP_MAX;
}

mcp_stream_action mcp_stream_pump(mcp_stream *st, mcp_tstamp ts, int can_send,
                                  mcp_msg **pmsg, int *status,
                                  const char **details) {
  *pmsg = NULL;
  if (st->err) {
    return end_with_error(st, status, details);
  }
  int fired = 0;
  if (ts >= st->not_before && session_expiry(st) <= ts) {
    int rv = st->ops->handle_expiry(st->sess, ts);
    if (rv < 0) {
      st->err = rv;
      return end_with_error(st, status, details);
    }
    fired = 1;
  }
  int rv = 0;
  if (can_send) {
    rv = st->ops->next(st->sess, ts, pmsg);
    if (rv < 0) {
      *pmsg = NULL;
      st->err = rv;
      return end_with_error(st, status, details);
    }
    if (rv > 0) {
      st->sent++;
      return MCP_STREAM_SEND;
    }
  }
  if (fired && session_expiry(st) <= ts) {
    /* The timer did nothing that moved its deadline (for instance a push
     * that cannot be sent while one is in flight): wait a little. */
    st->not_before = ts + MCP_STREAM_SPIN_GUARD;
  }
  if (!can_send) {
    return MCP_STREAM_IDLE; /* endings wait for the send in flight */
  }
  if (st->ops->end && st->ops->end(st->sess, status, details)) {
    return MCP_STREAM_END;
  }
  if (st->peer_half_closed &&
      !(st->ops->flags & MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE)) {
    *status = 0; /* GRPC_STATUS_OK */
    *details = "";
    return MCP_STREAM_END;
  }
  if (!st->half_closed &&
      (st->finish ||
       ((st->ops->flags & MCP_STREAM_CLIENT_HALF_CLOSE_AFTER_FIRST) &&
        st->sent > 0))) {
    st->half_closed = 1;
    return MCP_STREAM_HALF_CLOSE;
  }
  return MCP_STREAM_IDLE;
}

mcp_tstamp mcp_stream_get_expiry(const mcp_stream *st) {
  if (st->err) {
    return 0; /* pump now: it ends */
  }
  mcp_tstamp e = session_expiry(st);
  return e < st->not_before ? st->not_before : e;
}

void mcp_stream_finish(mcp_stream *st) { st->finish = 1; }

uint64_t mcp_stream_received(const mcp_stream *st) { return st->received; }
uint64_t mcp_stream_sent(const mcp_stream *st) { return st->sent; }

void mcp_stream_set_waker(mcp_stream *st, mcp_stream_waker fn,
                          void *user_data) {
  st->waker = fn;
  st->waker_user_data = user_data;
}

void mcp_stream_wake(mcp_stream *st) {
  if (st->waker) {
    st->waker(st, st->waker_user_data);
  }
}

/* ---- services (what a listening transport is given) ---- */

static int method_ok(const char *m) {
  size_t n = m ? strlen(m) : 0;
  return n && m[0] == '/' && n <= MCP_SERVICE_METHOD_MAX;
}

int mcp_service_defs_check(const mcp_service_def *defs, size_t n,
                           const char *const *reserved, size_t nreserved) {
  if (n && !defs) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  for (size_t i = 0; i < n; ++i) {
    const char *m = defs[i].method;
    if (!defs[i].open || !method_ok(m)) {
      return MCP_ERR_INVALID_ARGUMENT;
    }
    for (size_t j = 0; j < i; ++j) {
      if (strcmp(defs[j].method, m) == 0) {
        return MCP_ERR_INVALID_ARGUMENT;
      }
    }
    for (size_t j = 0; j < nreserved; ++j) {
      if (reserved[j] && strcmp(reserved[j], m) == 0) {
        return MCP_ERR_INVALID_ARGUMENT;
      }
    }
  }
  return 0;
}
