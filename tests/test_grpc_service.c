/*
 * Protocols on the gRPC transport without transport code of their own
 * (mcp/engine.h): services served beside MCP on a listening object, and
 * the client object running an mcp_client_def. Real gRPC on 127.0.0.1.
 *
 * The protocol is written here, over mcp_stream_ops:
 *   counter  (server streaming, keeps open on the client's half-close):
 *            each request byte N > 0 is answered with N messages
 *            "count <i>"; 0xFE ("kick") wakes every other counter stream,
 *            each of which then sends "woken"; 0xFF ends the stream with
 *            FAILED_PRECONDITION "counter stopped by request"; an empty
 *            message is malformed (INVALID_ARGUMENT). An update of the
 *            object ("bump") gives every counter one more message.
 *   echo     (unary rules: the half-close ends it once answered): sends
 *            back each message.
 * The peer is gRPC's C core driven by hand (rc_*), independent of the
 * transport. The client object's tests (and the server tests moved so
 * far) are tests/test_transport_service.c's, written once over both
 * transports (issue 21 item 7); the one left here runs over TLS.
 */
#include "test_grpc_util.h"

#include <stdatomic.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <grpc/byte_buffer_reader.h>

#include "mcp/engine.h"

#define COUNTER_METHOD "/test.Counter/Count"
#define ECHO_METHOD "/test.Echo/Echo"

#define TICKS 0xFD /* three "tick" messages, 50 ms apart (timers) */
#define KICK 0xFE
#define STOP 0xFF
#define TICK_EVERY (50 * MCP_MILLISECONDS)

/* ------------------------------------------------------------------ */
/* The protocol (server side)                                          */
/* ------------------------------------------------------------------ */

typedef struct psess {
  int echo; /* 0: counter */
  mcp_stream *st;
  mcp_msg_builder *b;
  int pending, seq, woken, stopping;
  int ticks_left, ticks_due;
  mcp_tstamp tick_at;
  char echo_buf[8][256];
  size_t echo_len[8];
  int echo_head, echo_n;
  struct psess *next; /* the registry of counter sessions */
} psess;

/* What the server side saw; the registry is touched on the transport
 * thread only, the counters read from the test thread. */
static psess *registry;
static atomic_int opens, dels, half_closes, kicks;
static char last_peer[128], last_id[160], last_cn[64];
static int last_peer_tls = -1;
static pthread_mutex_t peer_mu = PTHREAD_MUTEX_INITIALIZER;

static void reset_proto(void) {
  registry = NULL;
  atomic_store(&opens, 0);
  atomic_store(&dels, 0);
  atomic_store(&half_closes, 0);
  atomic_store(&kicks, 0);
  last_peer[0] = last_id[0] = last_cn[0] = 0;
  last_peer_tls = -1;
}

static int p_recv(void *sess, const uint8_t *in, size_t len, mcp_tstamp ts) {
  psess *p = sess;
  if (len == 0)
    return MCP_ERR_MALFORMED;
  if (p->echo) {
    if (p->echo_n == 8 || len > sizeof(p->echo_buf[0]))
      return MCP_ERR_LIMIT;
    int k = (p->echo_head + p->echo_n++) % 8;
    memcpy(p->echo_buf[k], in, len);
    p->echo_len[k] = len;
    return 0;
  }
  if (in[0] == STOP) {
    p->stopping = 1;
  } else if (in[0] == TICKS) {
    p->ticks_left = 3;
    p->tick_at = ts + TICK_EVERY;
  } else if (in[0] == KICK) {
    /* Another stream's fate changed: only noted and woken, never pumped
     * from here. */
    atomic_fetch_add(&kicks, 1);
    for (psess *o = registry; o; o = o->next) {
      if (o != p) {
        o->woken++;
        mcp_stream_wake(o->st);
      }
    }
  } else {
    p->pending += in[0];
  }
  return 0;
}

static int p_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  (void)ts;
  psess *p = sess;
  char text[300];
  size_t len;
  if (p->echo) {
    if (!p->echo_n)
      return 0;
    len = p->echo_len[p->echo_head];
    memcpy(text, p->echo_buf[p->echo_head], len);
    p->echo_head = (p->echo_head + 1) % 8;
    p->echo_n--;
  } else if (p->woken) {
    p->woken--;
    len = (size_t)snprintf(text, sizeof(text), "woken");
  } else if (p->ticks_due) {
    p->ticks_due--;
    len = (size_t)snprintf(text, sizeof(text), "tick");
  } else if (p->pending) {
    p->pending--;
    len = (size_t)snprintf(text, sizeof(text), "count %d", p->seq++);
  } else {
    return 0;
  }
  mcp_msg_builder_bytes(p->b, text, len);
  int rv = mcp_msg_builder_finish(p->b, p->echo ? "echo" : "counter", pmsg);
  return rv < 0 ? rv : 1;
}

static mcp_tstamp p_get_expiry(const void *sess) {
  const psess *p = sess;
  return p->ticks_left ? p->tick_at : MCP_TSTAMP_MAX;
}

static int p_handle_expiry(void *sess, mcp_tstamp ts) {
  psess *p = sess;
  if (p->ticks_left && ts >= p->tick_at) {
    p->ticks_left--;
    p->ticks_due++;
    p->tick_at += TICK_EVERY;
  }
  return 0;
}

static int p_end(const void *sess, int *status, const char **details) {
  const psess *p = sess;
  if (!p->stopping)
    return 0;
  *status = GRPC_STATUS_FAILED_PRECONDITION;
  *details = "counter stopped by request";
  return 1;
}

static void p_half_close(void *sess, mcp_tstamp ts) {
  (void)sess;
  (void)ts;
  atomic_fetch_add(&half_closes, 1);
}

static void p_del(void *sess) {
  psess *p = sess;
  for (psess **pp = &registry; *pp; pp = &(*pp)->next) {
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  }
  mcp_msg_builder_del(p->b);
  free(p);
  atomic_fetch_add(&dels, 1);
}

static const mcp_stream_ops counter_ops = {
    .name = "counter",
    .flags = MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE,
    .recv = p_recv,
    .next = p_next,
    .get_expiry = p_get_expiry,
    .handle_expiry = p_handle_expiry,
    .end = p_end,
    .half_close = p_half_close,
    .del = p_del,
};

static const mcp_stream_ops echo_ops = {
    .name = "echo",
    .flags = 0,
    .recv = p_recv,
    .next = p_next,
    .end = p_end,
    .half_close = p_half_close,
    .del = p_del,
};

static int p_open(void *user_data, const mcp_peer_info *peer, mcp_tstamp ts,
                  mcp_stream **pst) {
  int echo = user_data != NULL;
  psess *p = calloc(1, sizeof(*p));
  if (!p)
    return MCP_ERR_NOMEM;
  p->echo = echo;
  if (mcp_msg_builder_new(&p->b, NULL) < 0) {
    free(p);
    return MCP_ERR_NOMEM;
  }
  int rv = mcp_stream_new(pst, echo ? &echo_ops : &counter_ops, p, NULL, ts);
  if (rv < 0)
    return rv; /* p was freed by the driver */
  p->st = *pst;
  if (!echo) {
    p->next = registry;
    registry = p;
  }
  pthread_mutex_lock(&peer_mu);
  snprintf(last_peer, sizeof(last_peer), "%s", peer->address);
  last_peer_tls = peer->tls;
  snprintf(last_id, sizeof(last_id), "%s",
           peer->nidentities ? peer->identities[0] : "");
  snprintf(last_cn, sizeof(last_cn), "%s",
           peer->common_name ? peer->common_name : "");
  pthread_mutex_unlock(&peer_mu);
  atomic_fetch_add(&opens, 1);
  return 0;
}

static int echo_tag; /* its address marks the echo service */

static const mcp_service_def services[] = {
    {COUNTER_METHOD, p_open, NULL},
    {ECHO_METHOD, p_open, &echo_tag},
};

/* An update: one more message for every counter stream. */
static void bump(mcp_store *store, mcp_tstamp ts, void *ud) {
  (void)store;
  (void)ts;
  (void)ud;
  for (psess *p = registry; p; p = p->next)
    p->pending++;
}

/* ------------------------------------------------------------------ */
/* snap: a protocol over a view store (mcp_watch, shared bodies)       */
/* ------------------------------------------------------------------ */

/* After any request, sends the whole collection "c1" of the store, then
 * each change, one message per take: per item, field 1 the name and
 * (live items) field 2 the stored body, referenced, not copied. */
#define SNAP_METHOD "/test.Snap/Snap"

typedef struct snap {
  mcp_watch *w;
  mcp_msg_builder *b;
  int started;
} snap;

static int snap_recv(void *sess, const uint8_t *in, size_t len,
                     mcp_tstamp ts) {
  (void)in;
  (void)len;
  (void)ts;
  ((snap *)sess)->started = 1;
  return 0;
}

static int snap_item(const mcp_item *item, void *ud) {
  snap *s = ud;
  mcp_msg_builder_len_field(s->b, 1, item->name, strlen(item->name));
  if (!item->removed) {
    mcp_msg_builder_key(s->b, 2, 2);
    mcp_msg_builder_varint(s->b, item->body_len);
    mcp_msg_builder_body(s->b, item);
  }
  return 0;
}

static int snap_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  snap *s = sess;
  if (!s->started)
    return 0;
  mcp_watch_note(s->w, ts);
  if (!mcp_watch_ready(s->w, ts))
    return 0;
  int full = 0;
  int rv = mcp_watch_take(s->w, ts, snap_item, s, &full);
  if (rv < 0)
    return rv;
  rv = mcp_msg_builder_finish(s->b, "snap", pmsg);
  return rv < 0 ? rv : 1;
}

static mcp_tstamp snap_get_expiry(const void *sess) {
  return mcp_watch_get_expiry(((const snap *)sess)->w);
}

static int snap_handle_expiry(void *sess, mcp_tstamp ts) {
  (void)sess;
  (void)ts;
  return 0; /* next() takes what is ready */
}

static void snap_del(void *sess) {
  snap *s = sess;
  mcp_watch_del(s->w);
  mcp_msg_builder_del(s->b);
  free(s);
}

static const mcp_stream_ops snap_ops = {
    .name = "snap",
    .flags = MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE,
    .recv = snap_recv,
    .next = snap_next,
    .get_expiry = snap_get_expiry,
    .handle_expiry = snap_handle_expiry,
    .del = snap_del,
};

static int snap_open(void *user_data, const mcp_peer_info *peer,
                     mcp_tstamp ts, mcp_stream **pst) {
  (void)peer;
  snap *s = calloc(1, sizeof(*s));
  if (!s)
    return MCP_ERR_NOMEM;
  if (mcp_watch_new(&s->w, user_data, "c1", NULL, NULL) < 0 ||
      mcp_msg_builder_new(&s->b, NULL) < 0) {
    mcp_watch_del(s->w);
    free(s);
    return MCP_ERR_NOMEM;
  }
  return mcp_stream_new(pst, &snap_ops, s, NULL, ts);
}

/* One decoded snap message. */
typedef struct snap_msg {
  int n;
  char name[8][32];
  long body_len[8]; /* -1: removed */
  int body_ok[8];   /* the body has tg_put_big's pattern or is "x..." */
} snap_msg;

static uint64_t snap_varint(const uint8_t **p, const uint8_t *end) {
  uint64_t v = 0;
  for (int shift = 0; *p < end && shift < 64; shift += 7) {
    uint8_t c = *(*p)++;
    v |= (uint64_t)(c & 0x7f) << shift;
    if (!(c & 0x80))
      return v;
  }
  ck_abort_msg("bad varint");
  return 0;
}

static void snap_parse(const uint8_t *p, size_t len, snap_msg *m) {
  const uint8_t *end = p + len;
  memset(m, 0, sizeof(*m));
  while (p < end) {
    uint64_t key = snap_varint(&p, end);
    uint64_t n = snap_varint(&p, end);
    ck_assert_uint_eq(key & 7, 2);
    ck_assert_uint_le(n, (uint64_t)(end - p));
    if (key >> 3 == 1) {
      ck_assert_int_lt(m->n, 8);
      snprintf(m->name[m->n], sizeof(m->name[0]), "%.*s", (int)n,
               (const char *)p);
      m->body_len[m->n] = -1;
      m->n++;
    } else {
      ck_assert_uint_eq(key >> 3, 2);
      ck_assert_int_gt(m->n, 0);
      m->body_len[m->n - 1] = (long)n;
      int ok = 1;
      for (uint64_t i = 0; i < n && ok; i++)
        ok = p[i] == (uint8_t)(i * 7) || p[0] == 'x';
      m->body_ok[m->n - 1] = ok;
    }
    p += n;
  }
}

static int snap_index(const snap_msg *m, const char *name) {
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->name[i], name) == 0)
      return i;
  return -1;
}

static void put_new(mcp_store *store, mcp_tstamp ts, void *ud) {
  (void)ud;
  tg_put(store, "c1", "new", "x-new", ts);
}

static void delete_small(mcp_store *store, mcp_tstamp ts, void *ud) {
  (void)ud;
  ck_assert_int_ge(mcp_store_delete(store, "c1", "small", ts), 0);
}

/* ------------------------------------------------------------------ */
/* Stream events, per API                                              */
/* ------------------------------------------------------------------ */

typedef struct evs {
  pthread_mutex_t mu;
  int opened_counter, opened_echo, opened_mcp, opened_other, closed, refused;
  int closed_status, refused_status;
  char closed_details[160];
  char closed_api[32]; /* the last CLOSED's api ("(mcp)": NULL) */
} evs;

static void evs_init(evs *e) {
  memset(e, 0, sizeof(*e));
  pthread_mutex_init(&e->mu, NULL);
  e->closed_status = e->refused_status = -1;
}

static void on_stream(mcp_grpc_stream_event ev,
                      const mcp_grpc_stream_info *info, void *ud) {
  evs *e = ud;
  pthread_mutex_lock(&e->mu);
  if (ev == MCP_GRPC_STREAM_OPENED) {
    if (info->stream) {
      const char *name = mcp_stream_get_ops(info->stream)->name;
      if (strcmp(name, "counter") == 0)
        e->opened_counter++;
      else if (strcmp(name, "echo") == 0)
        e->opened_echo++;
      else
        e->opened_other++;
      ck_assert(!info->source && !info->sink);
      /* The engine's one shape: the API by name, as h2c reports it. */
      ck_assert_str_eq(info->api, name);
    } else {
      ck_assert(info->source || info->sink);
      ck_assert_ptr_null(info->api);
      e->opened_mcp++;
    }
    ck_assert_str_eq(info->method, ""); /* gRPC does not tell */
  } else if (ev == MCP_GRPC_STREAM_CLOSED) {
    ck_assert_ptr_null(info->stream);
    e->closed++;
    e->closed_status = info->status;
    snprintf(e->closed_details, sizeof(e->closed_details), "%s",
             info->details);
    snprintf(e->closed_api, sizeof(e->closed_api), "%s",
             info->api ? info->api : "(mcp)");
  } else {
    ck_assert_ptr_null(info->stream);
    e->refused++;
    e->refused_status = info->status;
  }
  pthread_mutex_unlock(&e->mu);
}

static evs evs_get(evs *e) {
  pthread_mutex_lock(&e->mu);
  evs c = *e;
  pthread_mutex_unlock(&e->mu);
  return c;
}

/* ------------------------------------------------------------------ */
/* A raw gRPC client, driven by hand                                   */
/* ------------------------------------------------------------------ */

#define T_STATUS ((void *)1)
#define T_RECV ((void *)2)
#define T_SEND ((void *)3)

typedef struct rc {
  grpc_channel *ch;
  grpc_completion_queue *cq;
  grpc_call *call;
  grpc_metadata_array im, tm;
  grpc_status_code status;
  grpc_slice det;
  grpc_byte_buffer *rbb;
  int status_done, recv_busy, send_busy, got_im;
  int ended; /* a receive found no more messages */
  char details[256];
} rc;

static void rc_open(rc *r, int port, const char *method) {
  memset(r, 0, sizeof(*r));
  grpc_init();
  char target[64];
  snprintf(target, sizeof(target), "127.0.0.1:%d", port);
  grpc_channel_credentials *cr = grpc_insecure_credentials_create();
  r->ch = grpc_channel_create(target, cr, NULL);
  grpc_channel_credentials_release(cr);
  r->cq = grpc_completion_queue_create_for_next(NULL);
  r->call = grpc_channel_create_call(
      r->ch, NULL, GRPC_PROPAGATE_DEFAULTS, r->cq,
      grpc_slice_from_static_string(method), NULL,
      gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  grpc_metadata_array_init(&r->im);
  grpc_metadata_array_init(&r->tm);
  r->det = grpc_empty_slice();
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[0].data.recv_status_on_client.trailing_metadata = &r->tm;
  ops[0].data.recv_status_on_client.status = &r->status;
  ops[0].data.recv_status_on_client.status_details = &r->det;
  ck_assert_int_eq(grpc_call_start_batch(r->call, ops, 1, T_STATUS, NULL),
                   GRPC_CALL_OK);
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ck_assert_int_eq(grpc_call_start_batch(r->call, ops, 1, T_SEND, NULL),
                   GRPC_CALL_OK);
  r->send_busy = 1;
}

/* Runs completions until |*flag| is 0 or |ms| passed; 1 when cleared. */
static int rc_wait(rc *r, int *flag, long ms) {
  ms = tg_scale(ms);
  gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                 gpr_time_from_millis(ms, GPR_TIMESPAN));
  while (*flag) {
    grpc_event ev = grpc_completion_queue_next(r->cq, dl, NULL);
    if (ev.type != GRPC_OP_COMPLETE)
      return 0;
    if (ev.tag == T_STATUS) {
      r->status_done = 1;
      char *d = grpc_slice_to_c_string(r->det);
      snprintf(r->details, sizeof(r->details), "%s", d);
      gpr_free(d);
    } else if (ev.tag == T_RECV) {
      r->recv_busy = 0;
    } else if (ev.tag == T_SEND) {
      r->send_busy = 0;
    }
  }
  return 1;
}

/* Sends |len| bytes as one message, with the half-close when |close|. */
static void rc_send(rc *r, const void *p, size_t len, int close) {
  ck_assert(rc_wait(r, &r->send_busy, TG_TIMEOUT_MS));
  grpc_slice s = grpc_slice_from_copied_buffer(p, len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  size_t n = 0;
  ops[n].op = GRPC_OP_SEND_MESSAGE;
  ops[n++].data.send_message.send_message = bb;
  if (close)
    ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ck_assert_int_eq(grpc_call_start_batch(r->call, ops, n, T_SEND, NULL),
                   GRPC_CALL_OK);
  r->send_busy = 1;
  ck_assert(rc_wait(r, &r->send_busy, TG_TIMEOUT_MS));
  grpc_byte_buffer_destroy(bb);
}

static void rc_byte(rc *r, uint8_t b) { rc_send(r, &b, 1, 0); }

static void rc_half_close(rc *r) {
  ck_assert(rc_wait(r, &r->send_busy, TG_TIMEOUT_MS));
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ck_assert_int_eq(grpc_call_start_batch(r->call, &op, 1, T_SEND, NULL),
                   GRPC_CALL_OK);
  r->send_busy = 1;
  ck_assert(rc_wait(r, &r->send_busy, TG_TIMEOUT_MS));
}

static void rc_start_recv(rc *r);

/* The next message into |buf| (NUL terminated): its length, -1 when the
 * call ended without one, -2 when none came within |ms| (the receive then
 * stays in flight for the next call). */
static int rc_recv(rc *r, char *buf, size_t cap, long ms) {
  if (r->ended)
    return -1;
  if (!r->recv_busy)
    rc_start_recv(r);
  if (!rc_wait(r, &r->recv_busy, ms))
    return -2;
  if (!r->rbb) {
    r->ended = 1;
    return -1;
  }
  grpc_byte_buffer_reader rd;
  ck_assert(grpc_byte_buffer_reader_init(&rd, r->rbb));
  grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
  grpc_byte_buffer_reader_destroy(&rd);
  size_t len = GRPC_SLICE_LENGTH(s);
  ck_assert_uint_lt(len, cap);
  memcpy(buf, GRPC_SLICE_START_PTR(s), len);
  buf[len] = 0;
  grpc_slice_unref(s);
  grpc_byte_buffer_destroy(r->rbb);
  r->rbb = NULL;
  return (int)len;
}

static void rc_start_recv(rc *r) {
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  size_t n = 0;
  if (!r->got_im) {
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n++].data.recv_initial_metadata.recv_initial_metadata = &r->im;
    r->got_im = 1;
  }
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n++].data.recv_message.recv_message = &r->rbb;
  ck_assert_int_eq(grpc_call_start_batch(r->call, ops, n, T_RECV, NULL),
                   GRPC_CALL_OK);
  r->recv_busy = 1;
}

/* The call's status (waits up to |ms|), or -1. Messages still coming are
 * read and dropped: gRPC hands the status over once they are. */
static int rc_status(rc *r, long ms) {
  gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                 gpr_time_from_millis(tg_scale(ms),
                                                      GPR_TIMESPAN));
  while (!r->status_done) {
    if (!r->recv_busy && !r->ended)
      rc_start_recv(r);
    grpc_event ev = grpc_completion_queue_next(r->cq, dl, NULL);
    if (ev.type != GRPC_OP_COMPLETE)
      break;
    if (ev.tag == T_STATUS) {
      r->status_done = 1;
      char *d = grpc_slice_to_c_string(r->det);
      snprintf(r->details, sizeof(r->details), "%s", d);
      gpr_free(d);
    } else if (ev.tag == T_RECV) {
      r->recv_busy = 0;
      if (r->rbb) {
        grpc_byte_buffer_destroy(r->rbb);
        r->rbb = NULL;
      } else {
        r->ended = 1;
      }
    } else if (ev.tag == T_SEND) {
      r->send_busy = 0;
    }
  }
  return r->status_done ? (int)r->status : -1;
}

static void rc_close(rc *r) {
  grpc_call_cancel(r->call, NULL);
  rc_status(r, TG_TIMEOUT_MS);
  ck_assert(rc_wait(r, &r->recv_busy, TG_TIMEOUT_MS));
  ck_assert(rc_wait(r, &r->send_busy, TG_TIMEOUT_MS));
  if (r->rbb)
    grpc_byte_buffer_destroy(r->rbb);
  grpc_metadata_array_destroy(&r->im);
  grpc_metadata_array_destroy(&r->tm);
  grpc_slice_unref(r->det);
  grpc_call_unref(r->call);
  grpc_channel_destroy(r->ch);
  grpc_completion_queue_shutdown(r->cq);
  while (grpc_completion_queue_next(r->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL)
             .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(r->cq);
  grpc_shutdown();
}

/* ------------------------------------------------------------------ */
/* Servers                                                             */
/* ------------------------------------------------------------------ */

static mcp_grpc_source *serve(const char *addr, mcp_store *store, evs *e,
                              mcp_grpc_options *o_out) {
  mcp_grpc_options o;
  mcp_grpc_options_default(&o);
  o.address = addr;
  o.on_stream = on_stream;
  o.user_data = e;
  o.shutdown_grace = MCP_SECONDS;
  o.services = services;
  o.nservices = 2;
  if (o_out)
    o = *o_out, o.address = addr, o.on_stream = on_stream, o.user_data = e;
  mcp_source_options so;
  tg_source_opts(&so, store);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, store ? &so : NULL), 0);
  return src;
}

static void setup(void) {
  tg_reset();
  reset_proto();
}

static int expect(rc *r, const char *want) {
  char buf[300];
  int n = rc_recv(r, buf, sizeof(buf), TG_TIMEOUT_MS);
  ck_assert_msg(n >= 0, "no message, wanted \"%s\" (%d)", want, n);
  ck_assert_str_eq(buf, want);
  return n;
}

/* ------------------------------------------------------------------ */
/* Tests: listening                                                    */
/* ------------------------------------------------------------------ */



/* Service streams count in the stats and are listed with their stream. */
typedef struct listed {
  int counter, mcp;
} listed;

static void list_one(const mcp_grpc_stream_info *info, void *ud) {
  listed *l = ud;
  if (info->stream &&
      strcmp(mcp_stream_get_ops(info->stream)->name, "counter") == 0)
    l->counter++;
  if (info->source)
    l->mcp++;
}

/* A protocol over the store, as Destination and Dispatcher are: a large
 * stored body goes out by reference (several fragments), and a store
 * change made through *_update() reaches the stream as a difference. */
START_TEST(test_view_store_protocol) {
  mcp_store *store = tg_store();
  tg_put_big(store, "c1", "big", 300000, 0);
  tg_put(store, "c1", "small", "x-small", 0);
  mcp_service_def d = {SNAP_METHOD, snap_open, store};
  evs e;
  evs_init(&e);
  mcp_grpc_options o;
  mcp_grpc_options_default(&o);
  o.shutdown_grace = MCP_SECONDS;
  o.services = &d;
  o.nservices = 1;
  mcp_grpc_source *src = serve("127.0.0.1:0", store, &e, &o);
  rc r;
  rc_open(&r, mcp_grpc_source_port(src), SNAP_METHOD);
  rc_byte(&r, 1);
  size_t cap = 400000;
  char *buf = malloc(cap);
  ck_assert_ptr_nonnull(buf);
  int n = rc_recv(&r, buf, cap, TG_TIMEOUT_MS);
  ck_assert_int_gt(n, 300000);
  snap_msg m;
  snap_parse((const uint8_t *)buf, (size_t)n, &m);
  ck_assert_int_eq(m.n, 2);
  int big = snap_index(&m, "big"), small = snap_index(&m, "small");
  ck_assert_int_ge(big, 0);
  ck_assert_int_ge(small, 0);
  ck_assert_int_eq(m.body_len[big], 300000);
  ck_assert(m.body_ok[big]);
  ck_assert_int_eq(m.body_len[small], 7);

  /* Changes through the transport's update: the difference only. */
  ck_assert_int_eq(mcp_grpc_source_update(src, put_new, NULL), 0);
  n = rc_recv(&r, buf, cap, TG_TIMEOUT_MS);
  ck_assert_int_gt(n, 0);
  snap_parse((const uint8_t *)buf, (size_t)n, &m);
  ck_assert_int_eq(m.n, 1);
  ck_assert_str_eq(m.name[0], "new");
  ck_assert_int_eq(m.body_len[0], 5);
  ck_assert_int_eq(mcp_grpc_source_update(src, delete_small, NULL), 0);
  n = rc_recv(&r, buf, cap, TG_TIMEOUT_MS);
  ck_assert_int_gt(n, 0);
  snap_parse((const uint8_t *)buf, (size_t)n, &m);
  ck_assert_int_eq(m.n, 1);
  ck_assert_str_eq(m.name[0], "small");
  ck_assert_int_eq(m.body_len[0], -1); /* removed */
  free(buf);
  rc_close(&r);
  mcp_grpc_source_del(src);
  mcp_store_del(store);
}
END_TEST

START_TEST(test_stats_and_listing) {
  mcp_store *store = tg_store();
  evs e;
  evs_init(&e);
  mcp_grpc_source *src = serve("127.0.0.1:0", store, &e, NULL);
  int port = mcp_grpc_source_port(src);
  rc a, b;
  rc_open(&a, port, COUNTER_METHOD);
  rc_open(&b, port, COUNTER_METHOD);
  rc_byte(&a, 1);
  rc_byte(&b, 1);
  expect(&a, "count 0");
  expect(&b, "count 0");
  mcp_grpc_stats st;
  ck_assert_int_eq(mcp_grpc_source_stats(src, &st), 0);
  ck_assert_uint_eq(st.streams, 2);
  ck_assert_uint_eq(st.opened, 2);
  ck_assert_uint_eq(st.initial, 0); /* service streams take no slot */
  listed l = {0, 0};
  ck_assert_int_eq(mcp_grpc_source_streams(src, list_one, &l), 2);
  ck_assert_int_eq(l.counter, 2);
  ck_assert_int_eq(l.mcp, 0);
  rc_close(&a);
  rc_close(&b);
  mcp_grpc_source_del(src);
  mcp_store_del(store);
}
END_TEST

static int deny_all(const mcp_grpc_peer *peer, void *ud) {
  (void)peer;
  (void)ud;
  return GRPC_STATUS_PERMISSION_DENIED;
}

static int refused_two(void *ud) { return evs_get(ud).refused >= 2; }

START_TEST(test_authorization_refuses_service_as_mcp) {
  mcp_store *store = tg_store();
  evs e;
  evs_init(&e);
  mcp_grpc_options o;
  mcp_grpc_options_default(&o);
  o.shutdown_grace = MCP_SECONDS;
  o.services = services;
  o.nservices = 2;
  o.authorize = deny_all;
  mcp_grpc_source *src = serve("127.0.0.1:0", store, &e, &o);
  int port = mcp_grpc_source_port(src);

  char d1[160], d2[160];
  int mcp_status =
      tg_raw_call(port, MCP_GRPC_RESOURCE_SOURCE_METHOD, NULL, 0, d1,
                  sizeof(d1), TG_TIMEOUT_MS);
  int svc_status = tg_raw_call(port, COUNTER_METHOD, (const uint8_t *)"\1",
                               1, d2, sizeof(d2), TG_TIMEOUT_MS);
  ck_assert_int_eq(mcp_status, GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_int_eq(svc_status, mcp_status);
  ck_assert_str_eq(d2, d1);
  ck_assert_int_eq(atomic_load(&opens), 0); /* open() never ran */
  /* The event may follow the status the client already has. */
  ck_assert(tg_wait(refused_two, &e, TG_TIMEOUT_MS));
  evs c = evs_get(&e);
  ck_assert_int_eq(c.refused, 2);
  ck_assert_int_eq(c.refused_status, GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_int_eq(c.opened_counter + c.opened_mcp, 0);
  mcp_grpc_stats st;
  ck_assert_int_eq(mcp_grpc_source_stats(src, &st), 0);
  ck_assert_uint_eq(st.refused_denied, 2);
  mcp_grpc_source_del(src);
  mcp_store_del(store);
}
END_TEST

static atomic_int deny_now;

static int deny_when_told(const mcp_grpc_peer *peer, void *ud) {
  (void)peer;
  (void)ud;
  return atomic_load(&deny_now) ? GRPC_STATUS_PERMISSION_DENIED : 0;
}

START_TEST(test_reauthorize_ends_service_streams) {
  atomic_store(&deny_now, 0);
  evs e;
  evs_init(&e);
  mcp_grpc_options o;
  mcp_grpc_options_default(&o);
  o.shutdown_grace = MCP_SECONDS;
  o.services = services;
  o.nservices = 2;
  o.no_mcp = 1;
  o.authorize = deny_when_told;
  mcp_grpc_source *src = serve("127.0.0.1:0", NULL, &e, &o);
  rc r;
  rc_open(&r, mcp_grpc_source_port(src), COUNTER_METHOD);
  rc_byte(&r, 1);
  expect(&r, "count 0");
  atomic_store(&deny_now, 1);
  ck_assert_int_eq(mcp_grpc_source_reauthorize(src), 0);
  ck_assert_int_eq(rc_status(&r, TG_TIMEOUT_MS),
                   GRPC_STATUS_PERMISSION_DENIED);
  rc_close(&r);
  mcp_grpc_stats st;
  ck_assert_int_eq(mcp_grpc_source_stats(src, &st), 0);
  ck_assert_uint_eq(st.revoked, 1);
  mcp_grpc_source_del(src);
}
END_TEST

static int half_closes_ge(void *ud) {
  return atomic_load(&half_closes) >= *(int *)ud;
}

START_TEST(test_half_close_follows_the_protocol) {
  evs e;
  evs_init(&e);
  mcp_grpc_options o;
  mcp_grpc_options_default(&o);
  o.shutdown_grace = MCP_SECONDS;
  o.services = services;
  o.nservices = 2;
  o.no_mcp = 1;
  mcp_grpc_source *src = serve("127.0.0.1:0", NULL, &e, &o);
  int port = mcp_grpc_source_port(src);

  /* Unary rules (no KEEP_OPEN): answered, then OK. Two messages sent
   * with the half-close in one go: both answers come first. */
  rc r;
  rc_open(&r, port, ECHO_METHOD);
  rc_send(&r, "one", 3, 0);
  rc_send(&r, "two", 3, 1);
  expect(&r, "one");
  expect(&r, "two");
  ck_assert_int_eq(rc_status(&r, TG_TIMEOUT_MS), GRPC_STATUS_OK);
  rc_close(&r);

  /* KEEP_OPEN: the half-close does not end it; later news still flows. */
  rc_open(&r, port, COUNTER_METHOD);
  rc_send(&r, "\2", 1, 0);
  rc_half_close(&r);
  expect(&r, "count 0");
  expect(&r, "count 1");
  char buf[64];
  ck_assert_int_eq(rc_recv(&r, buf, sizeof(buf), 300), -2);
  ck_assert(!r.status_done);
  int two = 2; /* the echo's and the counter's */
  ck_assert(tg_wait(half_closes_ge, &two, TG_TIMEOUT_MS));
  ck_assert_int_eq(mcp_grpc_source_update(src, bump, NULL), 0);
  expect(&r, "count 2");
  rc_close(&r);
  mcp_grpc_source_del(src);
}
END_TEST

START_TEST(test_shutdown_ends_service_streams_unavailable) {
  evs e;
  evs_init(&e);
  mcp_grpc_options o;
  mcp_grpc_options_default(&o);
  o.shutdown_grace = MCP_SECONDS;
  o.services = services;
  o.nservices = 2;
  o.no_mcp = 1;
  mcp_grpc_source *src = serve("127.0.0.1:0", NULL, &e, &o);
  int port = mcp_grpc_source_port(src);
  rc r;
  rc_open(&r, port, COUNTER_METHOD);
  rc_byte(&r, 1);
  expect(&r, "count 0");
  mcp_grpc_source_del(src);
  ck_assert_int_eq(rc_status(&r, TG_TIMEOUT_MS), GRPC_STATUS_UNAVAILABLE);
  ck_assert_str_eq(r.details, "server shutting down");
  ck_assert_int_eq(atomic_load(&dels), 1);
  evs c = evs_get(&e);
  ck_assert_int_eq(c.closed, 1);
  ck_assert_int_eq(c.closed_status, GRPC_STATUS_UNAVAILABLE);
  rc_close(&r);
}
END_TEST

/* Many streams at once, woken while they send, then a shutdown in the
 * middle: every one gets all its messages in order and then UNAVAILABLE;
 * every session is deleted once. */
#define NSTRESS 16
static int opens_ge(void *ud) { return atomic_load(&opens) >= *(int *)ud; }

START_TEST(test_many_streams_wakes_and_shutdown) {
  evs e;
  evs_init(&e);
  mcp_grpc_options o;
  mcp_grpc_options_default(&o);
  o.shutdown_grace = MCP_SECONDS;
  o.services = services;
  o.nservices = 2;
  o.no_mcp = 1;
  mcp_grpc_source *src = serve("127.0.0.1:0", NULL, &e, &o);
  int port = mcp_grpc_source_port(src);
  static rc r[NSTRESS];
  for (int i = 0; i < NSTRESS; i++) {
    rc_open(&r[i], port, COUNTER_METHOD);
    rc_byte(&r[i], 100);
  }
  /* Every session registered before the kicks (each call comes on a
   * connection of its own, in no particular order). */
  int all = NSTRESS;
  ck_assert(tg_wait(opens_ge, &all, TG_TIMEOUT_MS));
  for (int i = 0; i < NSTRESS; i++)
    rc_byte(&r[i], KICK); /* each wakes all the others */
  char buf[64];
  for (int i = 0; i < NSTRESS; i++) {
    int seq = 0, woken = 0;
    while (seq < 100 || woken < NSTRESS - 1) {
      int n = rc_recv(&r[i], buf, sizeof(buf), TG_TIMEOUT_MS);
      ck_assert_msg(n > 0, "stream %d: %d after %d counts, %d woken", i, n,
                    seq, woken);
      if (strcmp(buf, "woken") == 0) {
        woken++;
      } else {
        char want[32];
        snprintf(want, sizeof(want), "count %d", seq++);
        ck_assert_str_eq(buf, want);
      }
    }
    ck_assert_int_eq(woken, NSTRESS - 1);
  }
  ck_assert_int_eq(atomic_load(&kicks), NSTRESS);
  rc_byte(&r[0], 200); /* in flight when the server goes */
  mcp_grpc_source_del(src);
  for (int i = 0; i < NSTRESS; i++) {
    ck_assert_int_eq(rc_status(&r[i], TG_TIMEOUT_MS),
                     GRPC_STATUS_UNAVAILABLE);
    rc_close(&r[i]);
  }
  ck_assert_int_eq(atomic_load(&opens), NSTRESS);
  ck_assert_int_eq(atomic_load(&dels), NSTRESS);
}
END_TEST

/* ------------------------------------------------------------------ */
/* The client object                                                   */
/* ------------------------------------------------------------------ */

/* The client side of the protocol: slot 0 counts (asks for |ask| and
 * keeps the call); slot 1 is never asked (the TLS test needs one call;
 * the client's behaviour is tests/test_transport_service.c's). */
typedef struct cli {
  pthread_mutex_t mu;
  int enabled;
  int ask;        /* counter request */
  int opens[2], ended[2], received[2];
  int last_status[2];
  char last_details[2][160];
  char last_msg[2][64];
} cli;

typedef struct csess {
  cli *c;
  size_t slot;
  int sent;
  mcp_msg_builder *b;
} csess;

static int c_recv(void *sess, const uint8_t *in, size_t len, mcp_tstamp ts) {
  (void)ts;
  csess *s = sess;
  pthread_mutex_lock(&s->c->mu);
  s->c->received[s->slot]++;
  snprintf(s->c->last_msg[s->slot], sizeof(s->c->last_msg[0]), "%.*s",
           (int)len, (const char *)in);
  pthread_mutex_unlock(&s->c->mu);
  return 0;
}

static int c_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  (void)ts;
  csess *s = sess;
  if (s->sent)
    return 0;
  s->sent = 1;
  if (s->slot == 0) {
    uint8_t n = (uint8_t)s->c->ask;
    mcp_msg_builder_bytes(s->b, &n, 1);
  } else {
    mcp_msg_builder_bytes(s->b, "ping", 4);
  }
  int rv = mcp_msg_builder_finish(s->b, NULL, pmsg);
  return rv < 0 ? rv : 1;
}

static void c_del(void *sess) {
  csess *s = sess;
  mcp_msg_builder_del(s->b);
  free(s);
}

static const mcp_stream_ops c_counter_ops = {
    .name = "counter-client",
    .recv = c_recv,
    .next = c_next,
    .del = c_del,
};

static const char *c_method(void *ud, size_t slot) {
  (void)ud;
  return slot == 0 ? COUNTER_METHOD : ECHO_METHOD;
}

static int c_open(void *ud, size_t slot, mcp_tstamp ts, mcp_stream **pst) {
  cli *c = ud;
  pthread_mutex_lock(&c->mu);
  int go = c->enabled && slot == 0;
  if (go)
    c->opens[slot]++;
  pthread_mutex_unlock(&c->mu);
  if (!go)
    return 0;
  csess *s = calloc(1, sizeof(*s));
  ck_assert_ptr_nonnull(s);
  s->c = c;
  s->slot = slot;
  ck_assert_int_eq(mcp_msg_builder_new(&s->b, NULL), 0);
  ck_assert_int_eq(
      mcp_stream_new(pst, &c_counter_ops, s, NULL, ts),
      0);
  return 1;
}

static void c_ended(void *ud, size_t slot, int status, const char *details,
                    mcp_tstamp ts) {
  cli *c = ud;
  pthread_mutex_lock(&c->mu);
  (void)ts;
  c->ended[slot]++;
  c->last_status[slot] = status;
  snprintf(c->last_details[slot], sizeof(c->last_details[0]), "%s", details);
  pthread_mutex_unlock(&c->mu);
}

static cli cl;

static void cli_init(cli *c, int ask) {
  memset(c, 0, sizeof(*c));
  pthread_mutex_init(&c->mu, NULL);
  c->enabled = 1;
  c->ask = ask;
  c->last_status[0] = c->last_status[1] = -1;
}

static cli cli_get(cli *c) {
  pthread_mutex_lock(&c->mu);
  cli copy = *c;
  pthread_mutex_unlock(&c->mu);
  return copy;
}

static int cli_received_ge(void *ud) {
  int *want = ud;
  return cli_get(&cl).received[0] >= *want;
}

static int cli_ended_ge(void *ud) {
  int *want = ud;
  return cli_get(&cl).ended[0] >= *want;
}

static mcp_client_def cli_def(cli *c) {
  mcp_client_def d;
  memset(&d, 0, sizeof(d));
  d.nslots = 2;
  d.method = c_method;
  d.open = c_open;
  d.ended = c_ended;
  d.user_data = c;
  return d;
}

/* ------------------------------------------------------------------ */
/* TLS: the peer's identity reaches open(); each side authorizes        */
/* ------------------------------------------------------------------ */

static char certdir[64];

static const char *cp(const char *name) {
  static char buf[8][128];
  static int k;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof(buf[k]), "%s/%s", certdir, name);
  return buf[k];
}

static mcp_grpc_acl *acl_of(const char *pattern) {
  mcp_grpc_acl *acl = NULL;
  ck_assert_int_eq(mcp_grpc_acl_new(&acl), 0);
  ck_assert_int_eq(mcp_grpc_acl_add(acl, MCP_GRPC_ACL_ALLOW, pattern), 0);
  return acl;
}

static mcp_grpc_client *dial_tls(int port, char *addr, size_t alen,
                                 const char *leaf, mcp_grpc_acl *acl,
                                 mcp_client_def *d) {
  mcp_grpc_options o;
  tg_streams unused;
  tg_streams_init(&unused);
  tg_dial_opts(&o, addr, alen, port, &unused);
  o.on_stream = NULL;
  char cert[32], key[32];
  snprintf(cert, sizeof(cert), "%s.pem", leaf);
  snprintf(key, sizeof(key), "%s.key", leaf);
  o.tls.cert_file = cp(cert);
  o.tls.key_file = cp(key);
  o.tls.ca_file = cp("ca.pem");
  o.authorize = mcp_grpc_acl_authorize;
  o.authorize_user_data = acl;
  mcp_grpc_client *c = NULL;
  ck_assert_int_eq(mcp_grpc_client_new(&c, &o, d), 0);
  return c;
}

START_TEST(test_tls_identities_and_authorization) {
  evs se;
  evs_init(&se);
  mcp_grpc_acl *server_acl = acl_of("spiffe://cluster.local/ns/default/*");
  mcp_grpc_options o;
  mcp_grpc_options_default(&o);
  o.shutdown_grace = MCP_SECONDS;
  o.services = services;
  o.nservices = 2;
  o.no_mcp = 1;
  o.tls.cert_file = cp("server.pem");
  o.tls.key_file = cp("server.key");
  o.tls.ca_file = cp("ca.pem");
  o.authorize = mcp_grpc_acl_authorize;
  o.authorize_user_data = server_acl;
  mcp_grpc_source *src = serve("127.0.0.1:0", NULL, &se, &o);
  int port = mcp_grpc_source_port(src);

  /* Both sides allow each other: the call runs; open() saw who. */
  mcp_grpc_acl *istiod =
      acl_of("spiffe://cluster.local/ns/istio-system/sa/istiod");
  cli_init(&cl, 2);
  mcp_client_def d = cli_def(&cl);
  char addr[64];
  mcp_grpc_client *c = dial_tls(port, addr, sizeof(addr), "client", istiod, &d);
  int two = 2;
  ck_assert(tg_wait(cli_received_ge, &two, TG_TIMEOUT_MS));
  pthread_mutex_lock(&peer_mu);
  ck_assert_int_eq(last_peer_tls, 1);
  ck_assert_str_eq(last_id, "spiffe://cluster.local/ns/default/sa/sink-a");
  ck_assert_str_eq(last_cn, "sink-a");
  pthread_mutex_unlock(&peer_mu);
  mcp_grpc_client_del(c);

  /* The client refuses the server's identity: nothing is sent, the call
   * ends PERMISSION_DENIED. */
  mcp_grpc_acl *other = acl_of("spiffe://cluster.local/ns/other/*");
  cli_init(&cl, 2);
  d = cli_def(&cl);
  c = dial_tls(port, addr, sizeof(addr), "client", other, &d);
  int one = 1;
  ck_assert(tg_wait(cli_ended_ge, &one, TG_TIMEOUT_MS));
  cli k = cli_get(&cl);
  ck_assert_int_eq(k.last_status[0], GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_str_eq(k.last_details[0],
                   "permission denied: server identity not allowed");
  ck_assert_int_eq(k.received[0], 0);
  mcp_grpc_stats st;
  ck_assert_int_eq(mcp_grpc_client_stats(c, &st), 0);
  ck_assert_uint_ge(st.refused_denied, 1);
  mcp_grpc_client_del(c);

  /* The server refuses the client's identity, as it would an MCP sink. */
  cli_init(&cl, 2);
  d = cli_def(&cl);
  c = dial_tls(port, addr, sizeof(addr), "denied", istiod, &d);
  ck_assert(tg_wait(cli_ended_ge, &one, TG_TIMEOUT_MS));
  k = cli_get(&cl);
  ck_assert_int_eq(k.last_status[0], GRPC_STATUS_PERMISSION_DENIED);
  ck_assert_str_eq(k.last_details[0],
                   "permission denied: peer identity not allowed");
  ck_assert_int_eq(k.received[0], 0);
  mcp_grpc_client_del(c);

  mcp_grpc_source_del(src);
  mcp_grpc_acl_del(server_acl);
  mcp_grpc_acl_del(istiod);
  mcp_grpc_acl_del(other);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("grpc_service");
  TCase *tc = tcase_create("listen");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_stats_and_listing);
  tcase_add_test(tc, test_view_store_protocol);
  tcase_add_test(tc, test_authorization_refuses_service_as_mcp);
  tcase_add_test(tc, test_reauthorize_ends_service_streams);
  tcase_add_test(tc, test_half_close_follows_the_protocol);
  tcase_add_test(tc, test_shutdown_ends_service_streams_unavailable);
  tcase_add_test(tc, test_many_streams_wakes_and_shutdown);
  suite_add_tcase(s, tc);
  TCase *tk = tcase_create("client");
  tcase_add_checked_fixture(tk, setup, NULL);
  tcase_set_timeout(tk, 60);
  tcase_add_test(tk, test_tls_identities_and_authorization);
  suite_add_tcase(s, tk);
  return s;
}

/* Under AddressSanitizer, also catch pointers into returned stack frames:
 * the transport once handed sessions a pointer into a copy of a small
 * (inline) gRPC slice on its stack; the small messages of these
 * protocols then read freed stack bytes (the echo came back empty). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "detect_stack_use_after_return=1";
}

int main(void) {
  snprintf(certdir, sizeof(certdir), "/tmp/mcp-svc-tls-XXXXXX");
  if (!mkdtemp(certdir)) {
    perror("mkdtemp");
    return EXIT_FAILURE;
  }
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "sh '%s' '%s'", MCP_GEN_CERTS, certdir);
  if (system(cmd) != 0) {
    fprintf(stderr, "%s failed\n", cmd);
    return EXIT_FAILURE;
  }
  int rv = tg_run(suite());
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", certdir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", certdir);
  return rv;
}
