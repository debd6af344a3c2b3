/*
 * MCP's own sessions on the stream driver (engine.h), so that a transport
 * runs MCP exactly as it runs every other protocol. The rules the
 * transports used to carry each on their own live here: a dialing source
 * sends Istio's trigger first, and a sink state takes one stream at a
 * time (the newest wins, the older one ends ABORTED).
 */
#include "codec.h"

/* ---- source ---- */

static int src_recv(void *sess, const uint8_t *in, size_t len, mcp_tstamp ts) {
  return mcp_source_session_recv(sess, in, len, ts);
}

static int src_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  return mcp_source_session_next(sess, ts, pmsg);
}

static mcp_tstamp src_get_expiry(const void *sess) {
  return mcp_source_session_get_expiry(sess);
}

static int src_handle_expiry(void *sess, mcp_tstamp ts) {
  return mcp_source_session_handle_expiry(sess, ts);
}

static void src_del(void *sess) { mcp_source_session_del(sess); }

static int src_initial_sent(const void *sess, mcp_tstamp ts) {
  return mcp_admit_initial_sent(sess, ts);
}

/* No flag: a peer's half-close ends the stream with OK once what is ready
 * now (the answers to what it sent) has gone out (mcp/grpc.h
 * "Half-close"). */
static const mcp_stream_ops source_ops = {
    .name = MCP_API_NAME,
    .recv = src_recv,
    .next = src_next,
    .get_expiry = src_get_expiry,
    .handle_expiry = src_handle_expiry,
    .del = src_del,
    .initial_sent = src_initial_sent,
};

/* A dialed side's source stream: the session, and the side's reconnection,
 * told of each whole message it took (its healthy rule). */
typedef struct counted_src {
  mcp_mem mem;
  mcp_source_session *s;
  mcp_redial *rd;
} counted_src;

static int csrc_recv(void *sess, const uint8_t *in, size_t len,
                     mcp_tstamp ts) {
  counted_src *k = sess;
  int rv = mcp_source_session_recv(k->s, in, len, ts);
  if (rv >= 0) {
    mcp_redial_received(k->rd, 1);
  }
  return rv;
}

static int csrc_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  return mcp_source_session_next(((counted_src *)sess)->s, ts, pmsg);
}

static mcp_tstamp csrc_get_expiry(const void *sess) {
  return mcp_source_session_get_expiry(((const counted_src *)sess)->s);
}

static int csrc_handle_expiry(void *sess, mcp_tstamp ts) {
  return mcp_source_session_handle_expiry(((counted_src *)sess)->s, ts);
}

static void csrc_del(void *sess) {
  counted_src *k = sess;
  mcp_source_session_del(k->s);
  mcp_mem m = k->mem;
  mcp_mem_free(&m, k);
}

static const mcp_stream_ops counted_source_ops = {
    .name = MCP_API_NAME,
    .recv = csrc_recv,
    .next = csrc_next,
    .get_expiry = csrc_get_expiry,
    .handle_expiry = csrc_handle_expiry,
    .del = csrc_del,
};

/* |rd| NULL: the plain session as the stream's; else the counted
 * wrapper. */
static int source_stream_new(mcp_stream **pst, const mcp_source_options *o,
                             mcp_redial *rd, mcp_tstamp ts) {
  mcp_source_session *s = NULL;
  int rv = mcp_source_session_new(&s, o, ts);
  if (rv < 0) {
    return rv;
  }
  if (!rd) {
    return mcp_stream_new(pst, &source_ops, s, o->mem, ts);
  }
  mcp_mem m;
  mcp_mem_init(&m, o->mem);
  counted_src *k = mcp_mem_calloc(&m, 1, sizeof(*k));
  if (!k) {
    mcp_source_session_del(s);
    return MCP_ERR_NOMEM;
  }
  k->mem = m;
  k->s = s;
  k->rd = rd;
  return mcp_stream_new(pst, &counted_source_ops, k, o->mem, ts);
}

/* |opts| read as |version|'s, for |service|; a dialed stream speaks
 * first. */
static void source_opts(mcp_source_options *o, int version,
                        const mcp_source_options *opts, mcp_service service,
                        int dialed) {
  mcp_source_options_default(o);
  memcpy(o, opts,
         mcp_vstruct_size(version, MCP_VSTRUCT_SIZES(mcp_source_options), MCP_VSTRUCT_N));
  o->service = service;
  /* Istio's sinks wait for a first push before they ask for anything: a
   * source that dialed speaks first. */
  o->send_trigger = dialed ? 1 : 0;
}

int mcp_source_stream_new_versioned(mcp_stream **pst, int version,
                                    const mcp_source_options *opts,
                                    mcp_service service, int dialed,
                                    mcp_tstamp ts) {
  if (!pst || !opts || !mcp_vstruct_known(version, MCP_VSTRUCT_N)) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  mcp_source_options o;
  source_opts(&o, version, opts, service, dialed);
  return source_stream_new(pst, &o, NULL, ts);
}

int mcp__source_stream_new_counted(mcp_stream **pst,
                                   const mcp_source_options *opts,
                                   mcp_service service, mcp_redial *rd,
                                   mcp_tstamp ts) {
  mcp_source_options o;
  source_opts(&o, MCP_SOURCE_OPTIONS_VERSION, opts, service, rd != NULL);
  return source_stream_new(pst, &o, rd, ts);
}

mcp_source_session *mcp_stream_source_session(const mcp_stream *st) {
  const mcp_stream_ops *ops = st ? mcp_stream_get_ops(st) : NULL;
  if (ops == &counted_source_ops) {
    return ((const counted_src *)mcp_stream_session(st))->s;
  }
  return ops == &source_ops ? mcp_stream_session(st) : NULL;
}

/* ---- sink ---- */

/* A sink stream; |s| NULL once a newer stream of the state replaced it. */
typedef struct sink_stream {
  mcp_mem mem;
  mcp_sink_state *state;
  mcp_sink_session *s;
  mcp_stream *st;
  mcp_redial *rd; /* a dialed side's: told of each whole message (or NULL) */
} sink_stream;

static int snk_recv_iov(void *sess, const mcp_iovec *iov, size_t niov,
                        mcp_tstamp ts) {
  sink_stream *k = sess;
  /* Replaced: what still arrives was meant for a session that is gone. */
  if (!k->s) {
    return 0;
  }
  int rv = mcp_sink_session_recv_iov(k->s, iov, niov, ts);
  if (rv >= 0 && k->rd) {
    mcp_redial_received(k->rd, 1);
  }
  return rv;
}

static int snk_recv(void *sess, const uint8_t *in, size_t len, mcp_tstamp ts) {
  mcp_iovec one = {in, len};
  return snk_recv_iov(sess, &one, 1, ts);
}

static int snk_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  MCP_UNUSED(ts);
  sink_stream *k = sess;
  return k->s ? mcp_sink_session_next(k->s, pmsg) : 0;
}

static int snk_end(const void *sess, int *status, const char **details) {
  const sink_stream *k = sess;
  if (k->s) {
    return 0;
  }
  *status = MCP_CODE_ABORTED;
  *details = "replaced by a newer stream";
  return 1;
}

static void snk_drop(sink_stream *k) {
  if (k->s) {
    mcp_sink_session_del(k->s);
    k->s = NULL;
    mcp__sink_state_set_stream(k->state, NULL);
  }
}

static void snk_del(void *sess) {
  sink_stream *k = sess;
  snk_drop(k);
  mcp_mem m = k->mem;
  mcp_mem_free(&m, k);
}

static const mcp_stream_ops sink_ops = {
    .name = MCP_API_NAME,
    .recv = snk_recv,
    .recv_iov = snk_recv_iov,
    .next = snk_next,
    .end = snk_end,
    .del = snk_del,
};

int mcp_sink_stream_new(mcp_stream **pst, mcp_sink_state *state,
                        mcp_tstamp ts) {
  if (!pst || !state) {
    return MCP_ERR_INVALID_ARGUMENT;
  }
  return mcp__sink_stream_new_counted(pst, state, NULL, ts);
}

int mcp__sink_stream_new_counted(mcp_stream **pst, mcp_sink_state *state,
                                 mcp_redial *rd, mcp_tstamp ts) {
  const mcp_mem *m = mcp__sink_state_mem(state);
  sink_stream *k = mcp_mem_calloc(m, 1, sizeof(*k));
  if (!k) {
    return MCP_ERR_NOMEM;
  }
  k->mem = *m;
  k->state = state;
  k->rd = rd;
  mcp_stream *st = NULL;
  int rv = mcp_stream_new(&st, &sink_ops, k, m, ts);
  if (rv < 0) {
    return rv; /* |k| was freed with the stream */
  }
  /* The state takes one session at a time: the newest stream wins, the
   * older one hears at its next pump that it was replaced. */
  sink_stream *old = mcp__sink_state_stream(state);
  if (old) {
    snk_drop(old);
    mcp_stream_wake(old->st);
  }
  rv = mcp_sink_session_new(&k->s, state, ts);
  if (rv < 0) {
    mcp_stream_del(st);
    return rv;
  }
  k->st = st;
  mcp__sink_state_set_stream(state, k);
  *pst = st;
  return 0;
}

mcp_sink_session *mcp_stream_sink_session(const mcp_stream *st) {
  if (!st || mcp_stream_get_ops(st) != &sink_ops) {
    return NULL;
  }
  const sink_stream *k = mcp_stream_session(st);
  return k->s;
}

int mcp_admit_initial_sent(const mcp_source_session *s, mcp_tstamp ts) {
  (void)ts;
  /* Not through collection_status(): its V2 strings are the caller's until
   * the caller's next status call, which a transport's call must not be. */
  return mcp__source_initial_sent(s);
}
