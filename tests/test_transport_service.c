/*
 * Protocols on a transport without transport code of their own
 * (mcp/engine.h), written once for every transport (issue 21 item 7; the
 * transport: the adapter it is built with, tests/transport_<name>.c).
 * The per-transport files (test_grpc_service.c, test_h2c_service.c) hold
 * the tests not moved here yet; each test moved here is deleted there,
 * with the union of their checks.
 *
 * The protocol here, over mcp_stream_ops:
 *   /test.Counter/Count  server streaming, kept open on the client's
 *                        half-close: each request is answered with "0"
 *                        and "1" ("count 0", "count 1" after "long");
 *                        "stop" ends it FAILED_PRECONDITION; an update
 *                        of the listener (s_bump) gives every counter
 *                        one more message.
 *   /test.Echo/Echo      unary: answers each message with itself; the
 *                        client's half-close ends it OK.
 * The client: slot 0 keeps a counter call open (asked again as soon as
 * it ends) when |counter| is set, and ends it itself after |end_after|
 * messages; slot 1 asks again and again at |method| when it is set
 * (once each with |once|).
 */
#include <arpa/inet.h>
#include <check.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "helper.h" /* th_put() */
#include "test_certs.h" /* test_tls_mode() */
#include "transport_suite.h"
#ifdef TA_PEER
#include "transport_peer.h"
#endif

typedef struct cstate {
  pthread_mutex_t mu; /* gRPC calls the protocol from its own thread */
  const char *method; /* slot 1's */
  int once;           /* each slot asks once only */
  const char *request; /* slot 0's request (NULL: "go") */
  int end_after;      /* slot 0 ends its call after this many messages */
  int no_half_close;  /* slot 0 keeps its sending side open */
  mcp_tstamp not_before; /* open() says "not now" before this */
  mcp_tstamp first_open; /* ts of the first call opened (0: none) */
  int counter;        /* slot 0 keeps a counter call */
  int opens[2], ended[2], dels[2], recv[2];
  int call_recv; /* messages on slot 0's call now */
  int status;
  char details[160];
  char last[2][16]; /* each slot's last message */
  mcp_tstamp ended_at[64]; /* slot 0's first 64 ends (ts) */
} cstate;

typedef struct csess {
  cstate *c;
  size_t slot;
  int sent, got;
  mcp_msg_builder *b;
} csess;

static int c_recv(void *sess, const uint8_t *in, size_t len, mcp_tstamp ts) {
  (void)ts;
  csess *s = sess;
  s->got++;
  pthread_mutex_lock(&s->c->mu);
  s->c->recv[s->slot]++;
  s->c->call_recv++;
  snprintf(s->c->last[s->slot], sizeof(s->c->last[0]), "%.*s", (int)len,
           (const char *)in);
  pthread_mutex_unlock(&s->c->mu);
  return 0;
}

static int c_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  (void)ts;
  csess *s = sess;
  if (s->sent) /* one request on either slot */
    return 0;
  s->sent = 1;
  const char *req = s->slot == 0 && s->c->request ? s->c->request : "go";
  mcp_msg_builder_bytes(s->b, req, strlen(req));
  int rv = mcp_msg_builder_finish(s->b, NULL, pmsg);
  return rv < 0 ? rv : 1;
}

/* Slot 0 ends its own call after |end_after| messages on it. */
static int c_end(const void *sess, int *status, const char **details) {
  const csess *s = sess;
  if (s->slot != 0 || !s->c->end_after || s->got < s->c->end_after)
    return 0;
  *status = MCP_CODE_ABORTED;
  *details = "client had enough";
  return 1;
}

static void c_del(void *sess) {
  csess *s = sess;
  pthread_mutex_lock(&s->c->mu);
  s->c->dels[s->slot]++;
  pthread_mutex_unlock(&s->c->mu);
  mcp_msg_builder_del(s->b);
  free(s);
}

static const mcp_stream_ops c_ops = {
    .name = "test-client",
    .flags = MCP_STREAM_CLIENT_HALF_CLOSE_AFTER_FIRST |
             MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE,
    .recv = c_recv,
    .next = c_next,
    .end = c_end,
    .del = c_del,
};

/* The same, its sending side kept open after the request. */
static const mcp_stream_ops c_open_ops = {
    .name = "test-client",
    .recv = c_recv,
    .next = c_next,
    .end = c_end,
    .del = c_del,
};

#define COUNTER_METHOD "/test.Counter/Count"

static const char *c_method(void *ud, size_t slot) {
  return slot == 0 ? COUNTER_METHOD : ((cstate *)ud)->method;
}

static int c_open(void *ud, size_t slot, mcp_tstamp ts, mcp_stream **pst) {
  cstate *c = ud;
  if (slot == 1 ? !c->method : !c->counter)
    return 0;
  if (c->once && c->opens[slot] > 0)
    return 0;
  if (ts < c->not_before)
    return 0;
  csess *s = calloc(1, sizeof(*s));
  ck_assert_ptr_nonnull(s);
  s->c = c;
  s->slot = slot;
  ck_assert_int_eq(mcp_msg_builder_new(&s->b, NULL), 0);
  ck_assert_int_eq(mcp_stream_new(pst,
                                  slot == 0 && c->no_half_close ? &c_open_ops
                                                                : &c_ops,
                                  s, NULL, ts),
                   0);
  pthread_mutex_lock(&c->mu);
  if (!c->first_open)
    c->first_open = ts;
  c->opens[slot]++;
  if (slot == 0)
    c->call_recv = 0;
  pthread_mutex_unlock(&c->mu);
  return 1;
}

static void c_ended(void *ud, size_t slot, int status, const char *details,
                    mcp_tstamp ts) {
  cstate *c = ud;
  pthread_mutex_lock(&c->mu);
  /* The call's stream is deleted before ended() is told. */
  ck_assert_int_eq(c->dels[slot], c->ended[slot] + 1);
  if (slot == 0 && c->ended[0] < 64)
    c->ended_at[c->ended[0]] = ts;
  c->ended[slot]++;
  c->status = status;
  snprintf(c->details, sizeof(c->details), "%s", details);
  pthread_mutex_unlock(&c->mu);
}

/* A copy of the counts (the mutex left out). */
typedef struct ccounts {
  int opens[2], ended[2], dels[2], recv[2];
  int call_recv;
  int status;
  char details[160];
  char last[2][16];
  mcp_tstamp ended_at[64];
} ccounts;

static void c_read(cstate *c, ccounts *k) {
  pthread_mutex_lock(&c->mu);
  memcpy(k->opens, c->opens, sizeof(k->opens));
  memcpy(k->ended, c->ended, sizeof(k->ended));
  memcpy(k->dels, c->dels, sizeof(k->dels));
  memcpy(k->recv, c->recv, sizeof(k->recv));
  k->call_recv = c->call_recv;
  k->status = c->status;
  memcpy(k->details, c->details, sizeof(k->details));
  memcpy(k->last, c->last, sizeof(k->last));
  memcpy(k->ended_at, c->ended_at, sizeof(k->ended_at));
  pthread_mutex_unlock(&c->mu);
}

static void c_init(cstate *c) {
  memset(c, 0, sizeof(*c));
  pthread_mutex_init(&c->mu, NULL);
}

static ccounts c_get(cstate *c) {
  ccounts k;
  c_read(c, &k);
  return k;
}

/* The client def of |c| (slots: see the top of the file). */
static mcp_client_def c_def(cstate *c) {
  mcp_client_def def = {.nslots = 2,
                        .method = c_method,
                        .open = c_open,
                        .ended = c_ended,
                        .user_data = c};
  return def;
}

typedef struct creader {
  cstate *c;
  ccounts k;
} creader;

static void c_read_turn(void *ud) {
  creader *r = ud;
  c_read(r->c, &r->k);
}

static int slot1_ended(void *ud) {
  ccounts k;
  c_read(ud, &k);
  return k.ended[1] >= 1;
}

/* A method that is not a path: the call ends at once with UNIMPLEMENTED
 * (what a server answers an unknown method; the same on every
 * transport), nothing is dialed, and a protocol that asks again at once
 * is asked at the next event of the loop, not in a loop of its own.
 * Counted in turns of the transport's loop (ta->turn), never in a window
 * of time: a spin would ask thousands of times meanwhile. */
START_TEST(client_bad_method_ends_the_call_without_a_spin) {
  ta_env *env = ta->env_new();
  cstate c;
  c_init(&c);
  c.method = "test.Echo/Echo";
  mcp_client_def def = c_def(&c);
  ta_opts o = ta_opts_for(0, "127.0.0.1:1", NULL); /* never dialed */
  ta_obj *cli = NULL;
  ck_assert_int_eq(ta->client_new(env, &cli, &o, &def), 0);
  ck_assert(ta->run_until(env, slot1_ended, &c, TA_TIMEOUT_MS));

  creader r = {.c = &c};
  c_read(&c, &r.k);
  int before = r.k.opens[1];
  enum { TURNS = 100 };
  for (int i = 0; i < TURNS; i++)
    ck_assert_int_eq(ta->turn(env, cli, c_read_turn, &r), 0);
  ccounts k = r.k;
  /* |k| was read between two turns, where every call asked has ended
   * (and its stream was deleted first). */
  /* Every transport ends it the same way (mcp/engine.h). */
  ck_assert_int_eq(k.status, MCP_CODE_UNIMPLEMENTED);
  ck_assert_str_eq(k.details, MCP_CLIENT_BAD_METHOD_DETAILS);
  ck_assert_int_le(k.opens[1], before + TURNS * ta->asks_per_turn + 20);
  ck_assert_int_eq(k.ended[1], k.opens[1]);
  ck_assert_int_eq(k.dels[1], k.opens[1]);
  ck_assert_int_eq(k.opens[0], 0);
  ck_assert_int_eq(k.ended[0], 0);

  /* Nothing dialed: no stream, none ever opened. */
  mcp_transport_stats st;
  ck_assert_int_eq(ta->stats_versioned(cli, MCP_TRANSPORT_STATS_VERSION, &st),
                   0);
  ck_assert_uint_eq(st.streams, 0);
  ck_assert_uint_eq(st.opened, 0);
  ta->del(cli);
  ta->env_del(env);
  pthread_mutex_destroy(&c.mu);
}
END_TEST

/* ---- the served protocol ---- */

/* What the server side saw (gRPC runs it on its own thread). */
static pthread_mutex_t smu = PTHREAD_MUTEX_INITIALIZER;
static int sopens, sdels;
static int sclosed, sclosed_status; /* service streams CLOSED, the last */
static int shalf_closes; /* counter streams' half-closes */
static int secho_half_closes; /* the echo's */
static char sclosed_api[16], sclosed_details[64]; /* the last closed */
static char speer[128]; /* the last open()'s peer address */
static int speer_tls;
static char speer_id[160], speer_cn[64]; /* its first identity, its CN */
static int skicks;       /* "kick" requests */
static int sopened_svc, sopened_mcp; /* OPENED events */
static int srefused, srefused_status; /* REFUSED events (any call), last */

/* The listener's stream events (serve()): what each says of its stream
 * (the engine's one shape on every transport), service streams' closes,
 * and refusals. */
static void s_on_stream(mcp_stream_event ev, const mcp_stream_info *info,
                        void *ud) {
  (void)ud;
  if (ev == MCP_STREAM_OPENED) {
    /* Every call, MCP's too: its stream, named by its API; MCP's own
     * accessors find MCP's sessions behind it, and only there. */
    ck_assert_ptr_nonnull(info->stream);
    ck_assert_ptr_nonnull(info->api);
    ck_assert_str_eq(info->api, mcp_stream_get_ops(info->stream)->name);
    int mcp = mcp_stream_source_session(info->stream) != NULL ||
              mcp_stream_sink_session(info->stream) != NULL;
    ck_assert_int_eq(mcp, strcmp(info->api, "mcp") == 0);
    if (ta->tells_method)
      ck_assert(info->method[0] == '/');
    else
      ck_assert_str_eq(info->method, ""); /* documented: not kept */
    pthread_mutex_lock(&smu);
    ++*(mcp ? &sopened_mcp : &sopened_svc);
    pthread_mutex_unlock(&smu);
    return;
  }
  ck_assert_ptr_null(info->stream); /* refused, or already deleted */
  pthread_mutex_lock(&smu);
  if (ev == MCP_STREAM_REFUSED) {
    srefused++;
    srefused_status = info->status;
  } else if (info->api && strcmp(info->api, "mcp") != 0) {
    sclosed++;
    sclosed_status = info->status;
    snprintf(sclosed_api, sizeof(sclosed_api), "%s", info->api);
    snprintf(sclosed_details, sizeof(sclosed_details), "%s", info->details);
  }
  pthread_mutex_unlock(&smu);
}

/* A counter of the server side's, read under its mutex. */
static int s_get(const int *v) {
  pthread_mutex_lock(&smu);
  int n = *v;
  pthread_mutex_unlock(&smu);
  return n;
}

static int s_closed(int *status) {
  pthread_mutex_lock(&smu);
  int n = sclosed;
  if (status)
    *status = sclosed_status;
  pthread_mutex_unlock(&smu);
  return n;
}

static int s_closed_ge(void *ud) { return s_closed(NULL) >= *(int *)ud; }

/* A request "stop" ends the call FAILED_PRECONDITION "counter stopped by
 * request"; "long" makes each answer "count <n>" (7 bytes); "many" is
 * answered with 200 messages, "some" with 50; "kick" and "replace": see
 * s_recv(). The
 * echo answers each of up to ECHO_QUEUE messages, in order. */
#define ECHO_QUEUE 4
#define SOME 50
#define TICK_EVERY (50 * MCP_MILLISECONDS)

typedef struct ssess {
  mcp_stream *st;
  int pending, seq, stop, long_msgs;
  int ticks_left, ticks_due; /* "tick": three "tick"s, TICK_EVERY apart */
  mcp_tstamp tick_at;
  mcp_tstamp due; /* the echo's "late": answered at |due| (0: now) */
  int woken;    /* "kick"s by other counters: a "woken" each */
  int replaced; /* "replace" by another counter: ends ABORTED */
  int echo; /* the echo: answers each message with itself */
  char said[ECHO_QUEUE][16]; /* the echo's messages not answered yet */
  int said_head;
  mcp_msg_builder *b;
  struct ssess *next; /* live counters (the transport's thread only) */
} ssess;

static ssess *counters;

static int s_recv(void *sess, const uint8_t *in, size_t len, mcp_tstamp ts) {
  ssess *p = sess;
  if (len == 0 || (len == 4 && memcmp(in, "fail", 4) == 0))
    return MCP_ERR_MALFORMED; /* the call ends with the error */
  if (p->echo) {
    if (p->pending == ECHO_QUEUE)
      return MCP_ERR_LIMIT;
    snprintf(p->said[(p->said_head + p->pending) % ECHO_QUEUE],
             sizeof(p->said[0]), "%.*s", (int)len, (const char *)in);
    p->pending++;
    if (len == 4 && memcmp(in, "late", 4) == 0)
      p->due = ts + TICK_EVERY; /* through the stream's timer */
    return 0;
  }
  if (len == 4 && memcmp(in, "tick", 4) == 0) {
    p->ticks_left = 3;
    p->tick_at = ts + TICK_EVERY;
    return 0;
  }
  int kick = len == 4 && memcmp(in, "kick", 4) == 0;
  int replace = len == 7 && memcmp(in, "replace", 7) == 0;
  if (kick || replace) { /* every other counter, through a wake */
    for (ssess *o = counters; o; o = o->next) {
      if (o == p)
        continue;
      if (kick)
        o->woken++;
      else
        o->replaced = 1;
      mcp_stream_wake(o->st);
    }
    pthread_mutex_lock(&smu);
    skicks += kick;
    pthread_mutex_unlock(&smu);
    return 0;
  }
  if (len == 4 && memcmp(in, "stop", 4) == 0) {
    p->stop = 1; /* what it has is sent first */
    return 0;
  }
  if (len == 4 && memcmp(in, "long", 4) == 0)
    p->long_msgs = 1;
  if (len == 4 && memcmp(in, "many", 4) == 0)
    p->pending += 200;
  else if (len == 4 && memcmp(in, "some", 4) == 0)
    p->pending += SOME;
  else
    p->pending += 2;
  return 0;
}

static int s_end(const void *sess, int *status, const char **details) {
  const ssess *p = sess;
  if (p->replaced) {
    *status = MCP_CODE_ABORTED;
    *details = "replaced by a newer call";
    return 1;
  }
  if (!p->stop)
    return 0;
  *status = MCP_CODE_FAILED_PRECONDITION;
  *details = "counter stopped by request";
  return 1;
}

static int s_next(void *sess, mcp_tstamp ts, mcp_msg **pmsg) {
  (void)ts;
  ssess *p = sess;
  char text[16];
  if (p->woken) {
    p->woken--;
    mcp_msg_builder_bytes(p->b, "woken", 5);
    int rv = mcp_msg_builder_finish(p->b, NULL, pmsg);
    return rv < 0 ? rv : 1;
  }
  if (p->ticks_due) {
    p->ticks_due--;
    mcp_msg_builder_bytes(p->b, "tick", 4);
    int rv = mcp_msg_builder_finish(p->b, NULL, pmsg);
    return rv < 0 ? rv : 1;
  }
  if (!p->pending || p->due)
    return 0;
  p->pending--;
  int n;
  if (p->echo) {
    n = snprintf(text, sizeof(text), "%s", p->said[p->said_head]);
    p->said_head = (p->said_head + 1) % ECHO_QUEUE;
  } else {
    n = snprintf(text, sizeof(text), p->long_msgs ? "count %d" : "%d",
                 p->seq++);
  }
  mcp_msg_builder_bytes(p->b, text, (size_t)n);
  int rv = mcp_msg_builder_finish(p->b, NULL, pmsg);
  return rv < 0 ? rv : 1;
}

static mcp_tstamp s_get_expiry(const void *sess) {
  const ssess *p = sess;
  if (p->due)
    return p->due;
  return p->ticks_left ? p->tick_at : MCP_TSTAMP_MAX;
}

static int s_handle_expiry(void *sess, mcp_tstamp ts) {
  ssess *p = sess;
  if (p->due && ts >= p->due)
    p->due = 0;
  if (p->ticks_left && ts >= p->tick_at) {
    p->ticks_left--;
    p->ticks_due++;
    p->tick_at += TICK_EVERY;
  }
  return 0;
}

static void s_half_close(void *sess, mcp_tstamp ts) {
  (void)ts;
  pthread_mutex_lock(&smu);
  ++*(((ssess *)sess)->echo ? &secho_half_closes : &shalf_closes);
  pthread_mutex_unlock(&smu);
}

static void s_del(void *sess) {
  ssess *p = sess;
  for (ssess **pp = &counters; *pp; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  mcp_msg_builder_del(p->b);
  free(p);
  pthread_mutex_lock(&smu);
  sdels++;
  pthread_mutex_unlock(&smu);
}

static const mcp_stream_ops s_counter_ops = {
    .name = "counter",
    .flags = MCP_STREAM_KEEP_OPEN_ON_HALF_CLOSE,
    .recv = s_recv,
    .next = s_next,
    .get_expiry = s_get_expiry,
    .handle_expiry = s_handle_expiry,
    .end = s_end,
    .half_close = s_half_close,
    .del = s_del,
};

/* Unary rules: the client's half-close ends it once answered (OK). */
static const mcp_stream_ops s_echo_ops = {
    .name = "echo",
    .recv = s_recv,
    .next = s_next,
    .get_expiry = s_get_expiry,
    .handle_expiry = s_handle_expiry,
    .half_close = s_half_close,
    .del = s_del,
};

#define ECHO_METHOD "/test.Echo/Echo"

/* An update of the listener (ta->update, on its thread): one more
 * message for every counter call. */
static void s_bump(mcp_store *store, mcp_tstamp ts, void *ud) {
  (void)store;
  (void)ts;
  (void)ud;
  for (ssess *p = counters; p; p = p->next)
    p->pending++;
}

static int s_open(void *ud, const mcp_peer_info *peer, mcp_tstamp ts,
                  mcp_stream **pst) {
  ssess *p = calloc(1, sizeof(*p));
  if (!p)
    return MCP_ERR_NOMEM;
  p->echo = ud != NULL;
  if (mcp_msg_builder_new(&p->b, NULL) < 0) {
    free(p);
    return MCP_ERR_NOMEM;
  }
  if (!p->echo) { /* s_del() unlinks it, also on failure below */
    p->next = counters;
    counters = p;
  }
  int rv = mcp_stream_new(pst, p->echo ? &s_echo_ops : &s_counter_ops, p,
                          NULL, ts);
  if (rv < 0)
    return rv; /* p was freed by the driver */
  p->st = *pst;
  pthread_mutex_lock(&smu);
  snprintf(speer, sizeof(speer), "%s", peer->address);
  speer_tls = peer->tls;
  snprintf(speer_id, sizeof(speer_id), "%s",
           peer->nidentities ? peer->identities[0] : "");
  snprintf(speer_cn, sizeof(speer_cn), "%s",
           peer->common_name ? peer->common_name : "");
  sopens++;
  pthread_mutex_unlock(&smu);
  return 0;
}

static int echo_tag; /* the echo's user_data: not NULL */

static const mcp_service_def services[] = {
    {.method = COUNTER_METHOD, .open = s_open},
    {.method = ECHO_METHOD, .open = s_open, .user_data = &echo_tag},
};

static void s_counts(int *o, int *d) {
  pthread_mutex_lock(&smu);
  *o = sopens;
  *d = sdels;
  pthread_mutex_unlock(&smu);
}

/* A source serving the counter alone (no MCP) at |address|; 0 or an
 * mcp error (the port may be briefly taken on a restart). */
static int serve(ta_env *env, ta_obj **psrc, const char *address) {
  ta_opts o = ta_opts_for(1, address, NULL);
  o.services = services;
  o.nservices = 2;
  o.no_mcp = 1;
  o.on_stream = s_on_stream;
  return ta->source_new(env, psrc, &o, NULL);
}

/* serve() on 127.0.0.1:0; |addr| (64 bytes) gets where it listens. */
static ta_obj *serve_any(ta_env *env, char *addr) {
  ta_obj *src = NULL;
  ck_assert_int_eq(serve(env, &src, "127.0.0.1:0"), 0);
  snprintf(addr, 64, "127.0.0.1:%d", ta->port(src));
  return src;
}

/* A client of the transport running |c|'s def, dialing |addr|. */
static ta_obj *client_at(ta_env *env, const char *addr, cstate *c) {
  mcp_client_def def = c_def(c);
  ta_opts o = ta_opts_for(0, addr, NULL);
  ta_obj *cli = NULL;
  ck_assert_int_eq(ta->client_new(env, &cli, &o, &def), 0);
  return cli;
}

typedef struct cwait {
  cstate *c;
  int ended, call_recv;
} cwait;

static int ended_ge(void *ud) {
  cwait *w = ud;
  return c_get(w->c).ended[0] >= w->ended;
}

static int call_has(void *ud) {
  cwait *w = ud;
  return c_get(w->c).call_recv >= w->call_recv;
}

static int ended_or_two(void *ud) {
  cwait *w = ud;
  ccounts k = c_get(w->c);
  return k.ended[0] >= w->ended || k.call_recv >= w->call_recv;
}

static int never(void *ud) {
  (void)ud;
  return 0;
}

/* A client dialing a list (a closed port first: its calls end
 * UNAVAILABLE, then the server) keeps a counter call open; the server
 * goes: the call ends UNAVAILABLE, the attempts that follow fail
 * (UNAVAILABLE) at least the shortest backoff apart (a lower bound: a
 * slow machine only spaces them more); the server comes back on the same
 * port: a new call, new messages; deleting the client ends the open call
 * (deleted, then ended() CANCELLED) before it returns. */
START_TEST(client_reconnects_after_restart) {
  ta_env *env = ta->env_new();
  int o0, d0;
  s_counts(&o0, &d0);
  ta_obj *src = NULL;
  ck_assert_int_eq(serve(env, &src, "127.0.0.1:0"), 0);
  int port = ta->port(src);
  cstate c;
  c_init(&c);
  c.counter = 1;
  mcp_client_def def = c_def(&c);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:1,127.0.0.1:%d", port);
  ta_opts o = ta_opts_for(0, addr, NULL);
  ta_obj *cli = NULL;
  ck_assert_int_eq(ta->client_new(env, &cli, &o, &def), 0);
  cwait w = {.c = &c, .call_recv = 2};
  ck_assert(ta->run_until(env, call_has, &w, TA_TIMEOUT_MS));
  ccounts k = c_get(&c);
  ck_assert_str_eq(k.last[0], "1");
  /* The list is tried in order: the closed port's call ended first. */
  ck_assert_int_ge(k.ended[0], 1);
  ck_assert_int_eq(k.status, MCP_CODE_UNAVAILABLE);
  int ended = k.ended[0];

  /* The server goes. */
  ta->del(src);
  w.ended = ended + 1;
  ck_assert(ta->run_until(env, ended_ge, &w, TA_TIMEOUT_MS));
  ck_assert_int_eq(c_get(&c).status, MCP_CODE_UNAVAILABLE);
  int so, sd;
  s_counts(&so, &sd);
  ck_assert_int_eq(so - o0, 1);
  ck_assert_int_eq(sd - d0, 1); /* its stream deleted */

  /* Four failed attempts, waited for as they end. */
  int first = ended;
  w.ended = ended + 5;
  ck_assert(ta->run_until(env, ended_ge, &w, TA_TIMEOUT_MS));
  k = c_get(&c);
  ck_assert_int_eq(k.status, MCP_CODE_UNAVAILABLE);
  for (int i = first + 1; i < first + 5 && i < 64; i++)
    ck_assert_msg(k.ended_at[i] - k.ended_at[i - 1] >= ta->min_redial,
                  "attempt %d ended %lld ns after the one before", i,
                  (long long)(k.ended_at[i] - k.ended_at[i - 1]));

  /* Back on the same port (it may be briefly taken: the dialer's own
   * attempts can self-connect on loopback). */
  char again[64];
  snprintf(again, sizeof(again), "127.0.0.1:%d", port);
  int rv = -1;
  for (int tries = 0; tries < 100 && rv != 0; tries++)
    if ((rv = serve(env, &src, again)) != 0)
      ta->run_until(env, never, NULL, 20);
  ck_assert_int_eq(rv, 0);
  w.call_recv = 2;
  ck_assert(ta->run_until(env, call_has, &w, TA_TIMEOUT_MS));
  k = c_get(&c);
  ck_assert_str_eq(k.last[0], "1");
  ck_assert_int_ge(k.opens[0], 2);

  /* Deleting the client ends the open call before it returns. */
  ended = c_get(&c).ended[0];
  ta->del(cli);
  k = c_get(&c);
  ck_assert_int_eq(k.ended[0], ended + 1);
  ck_assert_int_eq(k.status, MCP_CODE_CANCELLED);
  ck_assert_str_eq(k.details, "client shutting down");
  ck_assert_int_eq(k.dels[0], k.opens[0]);
  ta->del(src);
  ta->env_del(env);
  s_counts(&so, &sd);
  ck_assert_int_eq(sd, so);
  pthread_mutex_destroy(&c.mu);
}
END_TEST

/* One call of a client of the transport at |method| on a listener at
 * |addr|: its status, and its details in |det|. */
static int call_once(ta_env *env, const char *addr, const char *method,
                     char *det, size_t ndet) {
  cstate c;
  c_init(&c);
  c.method = method;
  c.once = 1;
  ta_obj *cli = client_at(env, addr, &c);
  ck_assert(ta->run_until(env, slot1_ended, &c, TA_TIMEOUT_MS));
  ta->del(cli);
  ccounts k = c_get(&c);
  pthread_mutex_destroy(&c.mu);
  ck_assert_int_eq(k.opens[1], 1);
  snprintf(det, ndet, "%s", k.details);
  return k.status;
}

/* A service whose open() fails ends the call with that error's status
 * and text; a method the listener does not serve, or an MCP method while
 * no_mcp, ends UNIMPLEMENTED (what every gRPC server answers), the same
 * on every transport (docs/protocol.md). */
START_TEST(open_error_and_unknown_method_end_the_call) {
  ta_env *env = ta->env_new();
  mcp_service_def d[2] = {
      {.method = "/test.Fail/Fail", .open = ta_open_unsupported},
      services[0]};
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  o.services = d;
  o.nservices = 2;
  o.no_mcp = 1;
  ta_obj *src = NULL;
  ck_assert_int_eq(ta->source_new(env, &src, &o, NULL), 0);
  char addr[64], det[160];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", ta->port(src));
  ck_assert_int_eq(call_once(env, addr, "/test.Fail/Fail", det, sizeof(det)),
                   MCP_CODE_UNIMPLEMENTED); /* UNSUPPORTED's status */
  ck_assert_str_eq(det, mcp_strerror(MCP_ERR_UNSUPPORTED));
  ck_assert_int_eq(call_once(env, addr, "/test.None/None", det, sizeof(det)),
                   MCP_CODE_UNIMPLEMENTED);
  ck_assert_int_eq(
      call_once(env, addr, MCP_RESOURCE_SOURCE_METHOD, det, sizeof(det)),
      MCP_CODE_UNIMPLEMENTED);
  ta->del(src);
  ta->env_del(env);
}
END_TEST

/* A listening sink serves services too, beside ResourceSink: a client
 * of the transport is answered by the service, and a source dialing the
 * sink syncs it. */
START_TEST(listening_sink_serves_services_beside_mcp) {
  ta_world w;
  ta_world_init(&w);
  int o0, d0;
  s_counts(&o0, &d0);
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  o.services = services;
  o.nservices = 1;
  ck_assert_int_eq(ta->sink_new(w.env, &w.sink, &o, w.state), 0);
  ck_assert_int_gt(ta->port(w.sink), 0);
  snprintf(w.addr, sizeof(w.addr), "127.0.0.1:%d", ta->port(w.sink));
  cstate c;
  c_init(&c);
  c.counter = 1;
  mcp_client_def def = c_def(&c);
  ta_opts co = ta_opts_for(0, w.addr, NULL);
  ta_obj *cli = NULL;
  ck_assert_int_eq(ta->client_new(w.env, &cli, &co, &def), 0);
  cwait cw = {.c = &c, .call_recv = 2};
  ck_assert(ta->run_until(w.env, call_has, &cw, TA_TIMEOUT_MS));
  ck_assert_str_eq(c_get(&c).last[0], "1");
  ta->del(cli);
  pthread_mutex_destroy(&c.mu);
  int o1, d1;
  s_counts(&o1, &d1);
  ck_assert_int_eq(o1 - o0, 1); /* one service call, by the sink */
  /* ResourceSink is still served: a source dials it and the sink syncs. */
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = w.store;
  ta_opts d = ta_opts_for(0, w.addr, NULL);
  ck_assert_int_eq(ta->source_new(w.env, &w.src, &d, &so), 0);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  ta_world_fini(&w);
}
END_TEST

/* When open() should be asked again: at |not_before| until a call
 * opened (runs where open() does). */
static mcp_tstamp c_expiry(void *ud) {
  cstate *c = ud;
  return c->first_open ? MCP_TSTAMP_MAX : c->not_before;
}

static int first_message(void *ud) { return c_get(ud).recv[0] >= 1; }

/* A client whose open() says "not now" until a time is asked again at
 * its get_expiry(), with no event to wake it: the call starts then, not
 * before (a lower bound only; the wait's guard is a failure guard). */
START_TEST(client_asks_open_at_expiry) {
  ta_env *env = ta->env_new();
  char addr[64];
  ta_obj *src = serve_any(env, addr);
  cstate c;
  c_init(&c);
  c.counter = 1;
  c.not_before = ta->now() + 300 * MCP_MILLISECONDS;
  mcp_client_def def = c_def(&c);
  def.get_expiry = c_expiry;
  ta_opts o = ta_opts_for(0, addr, NULL);
  ta_obj *cli = NULL;
  ck_assert_int_eq(ta->client_new(env, &cli, &o, &def), 0);
  ck_assert(ta->run_until(env, first_message, &c, TA_TIMEOUT_MS));
  pthread_mutex_lock(&c.mu);
  mcp_tstamp first = c.first_open;
  pthread_mutex_unlock(&c.mu);
  ck_assert_int_ge(first, c.not_before);
  ta->del(cli);
  ta->del(src);
  ta->env_del(env);
  pthread_mutex_destroy(&c.mu);
}
END_TEST

/* A listener and a client on a unix socket ("unix:PATH"): the call is
 * answered, and the server's stream is freed once the client goes.
 * Cleartext only (once is enough: the socket is what is tested). */
START_TEST(client_over_unix_socket) {
  if (test_tls_mode())
    return;
  ta_env *env = ta->env_new();
  int o0, d0;
  s_counts(&o0, &d0);
  char path[96];
  snprintf(path, sizeof(path), "unix:/tmp/mcp-%s-svc-%d.sock", ta->name,
           (int)getpid());
  ta_obj *src = NULL;
  ck_assert_int_eq(serve(env, &src, path), 0);
  cstate c;
  c_init(&c);
  c.counter = 1;
  mcp_client_def def = c_def(&c);
  ta_opts o = ta_opts_for(0, path, NULL);
  ta_obj *cli = NULL;
  ck_assert_int_eq(ta->client_new(env, &cli, &o, &def), 0);
  cwait w = {.c = &c, .call_recv = 2};
  ck_assert(ta->run_until(env, call_has, &w, TA_TIMEOUT_MS));
  ck_assert_str_eq(c_get(&c).last[0], "1");
  ta->del(cli);
  ta->del(src);
  ta->env_del(env);
  int o1, d1;
  s_counts(&o1, &d1);
  ck_assert_int_eq(o1 - o0, 1);
  ck_assert_int_eq(d1 - d0, 1);
  unlink(path + 5);
  pthread_mutex_destroy(&c.mu);
}
END_TEST

/* The options of services and clients are checked alike on every
 * transport (the union of what test_grpc_service.c and
 * test_h2c_service.c checked): INVALID_ARGUMENT and nothing made for a
 * method twice, not a path, a def without open(), an MCP method the
 * object serves; services or no_mcp on a dialer; a source without a
 * store unless no_mcp; a client without a usable def or with services.
 * The other side's MCP methods are not reserved (a source may serve
 * ResourceSink as a service, a sink ResourceSource), and no_mcp frees
 * the object's own (docs/protocol.md). A client whose server is down
 * ends its call UNAVAILABLE. */
START_TEST(services_and_client_options_are_checked_alike) {
  ta_world w;
  ta_world_init(&w);
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = w.store;
  ta_obj *obj = NULL;
  mcp_service_def d[2] = {services[0], services[0]}; /* twice */
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  o.services = d;
  o.nservices = 2;
  ck_assert_int_eq(ta->source_new(w.env, &obj, &o, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  d[1].method = "no-slash";
  ck_assert_int_eq(ta->source_new(w.env, &obj, &o, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  d[1].method = "/test.Echo/Echo";
  d[1].open = NULL;
  ck_assert_int_eq(ta->source_new(w.env, &obj, &o, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  d[1].open = s_open;
  /* A source's own MCP methods are MCP's. */
  static const char *const own[] = {MCP_RESOURCE_SOURCE_METHOD,
                                    MCP_AGGREGATED_METHOD,
                                    MCP_AGGREGATED_INCREMENTAL_METHOD};
  for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
    d[1].method = own[i];
    ck_assert_int_eq(ta->source_new(w.env, &obj, &o, &so),
                     MCP_ERR_INVALID_ARGUMENT);
  }
  /* A sink listening: ResourceSink is its own. */
  d[1].method = MCP_RESOURCE_SINK_METHOD;
  ck_assert_int_eq(ta->sink_new(w.env, &obj, &o, w.state),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(obj);
  /* Without no_mcp a source needs a store. */
  o.nservices = 1;
  ck_assert_int_eq(ta->source_new(w.env, &obj, &o, NULL),
                   MCP_ERR_INVALID_ARGUMENT);
  /* Services and no_mcp are for listening. */
  ta_opts dial = ta_opts_for(0, "127.0.0.1:1", NULL);
  dial.services = services;
  dial.nservices = 1;
  ck_assert_int_eq(ta->source_new(w.env, &obj, &dial, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(ta->sink_new(w.env, &obj, &dial, w.state),
                   MCP_ERR_INVALID_ARGUMENT);
  dial.services = NULL;
  dial.nservices = 0;
  dial.no_mcp = 1;
  ck_assert_int_eq(ta->source_new(w.env, &obj, &dial, &so),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(ta->sink_new(w.env, &obj, &dial, w.state),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(obj);
  /* A sink needs a state unless it serves its services alone. */
  ck_assert_int_eq(ta->sink_new(w.env, &obj, &o, NULL),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(obj);

  /* The other side's method is a service like any other. */
  o.nservices = 2;
  ck_assert_int_eq(ta->source_new(w.env, &obj, &o, &so), 0);
  ta->del(obj);
  obj = NULL;
  d[1].method = MCP_RESOURCE_SOURCE_METHOD;
  ck_assert_int_eq(ta->sink_new(w.env, &obj, &o, w.state), 0);
  ta->del(obj);
  obj = NULL;
  /* no_mcp: the MCP methods may be anyone's, and no store is needed. */
  d[1].method = MCP_AGGREGATED_METHOD;
  o.no_mcp = 1;
  ck_assert_int_eq(ta->source_new(w.env, &obj, &o, NULL), 0);
  ta->del(obj);
  obj = NULL;

  /* Clients. */
  cstate c;
  c_init(&c);
  c.counter = 1;
  mcp_client_def def = c_def(&c);
  dial.no_mcp = 0;
  ck_assert_int_eq(ta->client_new(w.env, &obj, &dial, NULL),
                   MCP_ERR_INVALID_ARGUMENT);
  mcp_client_def bad = def;
  bad.nslots = 0;
  ck_assert_int_eq(ta->client_new(w.env, &obj, &dial, &bad),
                   MCP_ERR_INVALID_ARGUMENT);
  bad = def;
  bad.ended = NULL;
  ck_assert_int_eq(ta->client_new(w.env, &obj, &dial, &bad),
                   MCP_ERR_INVALID_ARGUMENT);
  bad = def;
  bad.open = NULL;
  ck_assert_int_eq(ta->client_new(w.env, &obj, &dial, &bad),
                   MCP_ERR_INVALID_ARGUMENT);
  bad = def;
  bad.method = NULL;
  ck_assert_int_eq(ta->client_new(w.env, &obj, &dial, &bad),
                   MCP_ERR_INVALID_ARGUMENT);
  dial.services = services;
  dial.nservices = 1;
  ck_assert_int_eq(ta->client_new(w.env, &obj, &dial, &def),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(obj);
  /* Nobody listens: the call ends UNAVAILABLE. */
  dial.services = NULL;
  dial.nservices = 0;
  ck_assert_int_eq(ta->client_new(w.env, &obj, &dial, &def), 0);
  cwait cw = {.c = &c, .ended = 1};
  ck_assert(ta->run_until(w.env, ended_ge, &cw, TA_TIMEOUT_MS));
  ck_assert_int_eq(c_get(&c).status, MCP_CODE_UNAVAILABLE);
  ta->del(obj);
  ta_world_fini(&w);
  pthread_mutex_destroy(&c.mu);
}
END_TEST

/* ---- calls side by side ---- */

/* The client's stream events: its calls' OPENED and CLOSED. */
typedef struct cevents {
  pthread_mutex_t mu;
  int opened, closed;
  char api[32];
} cevents;

static void c_on_stream(mcp_stream_event ev, const mcp_stream_info *info,
                        void *ud) {
  cevents *e = ud;
  ck_assert(info->dialed);
  pthread_mutex_lock(&e->mu);
  if (ev == MCP_STREAM_OPENED) {
    e->opened++;
    snprintf(e->api, sizeof(e->api), "%s", info->api ? info->api : "(mcp)");
  } else if (ev == MCP_STREAM_CLOSED) {
    e->closed++;
  }
  pthread_mutex_unlock(&e->mu);
}

/* The one open call, as the client lists it. */
static void check_counter_call(const mcp_stream_info *i, void *ud) {
  ++*(int *)ud;
  ck_assert(i->dialed);
  ck_assert_str_eq(i->method, ta->tells_method ? COUNTER_METHOD : "");
  ck_assert_str_eq(i->api, "test-client");
  ck_assert_ptr_nonnull(i->stream);
  ck_assert_uint_eq(mcp_stream_sent(i->stream), 1);
}

static int both_answered(void *ud) {
  ccounts k = c_get(ud);
  return k.ended[1] >= 1 && k.recv[0] >= 2;
}

static int s_half_closed(void *ud) {
  (void)ud;
  pthread_mutex_lock(&smu);
  int n = shalf_closes;
  pthread_mutex_unlock(&smu);
  return n >= 1;
}

static int counter_has_3(void *ud) { return c_get(ud).recv[0] >= 3; }

/* A client runs two calls at once on one connection: a unary echo
 * (answered, then OK) and a server-streaming counter that stays open
 * after the client's half-close (the server hears the half-close); the
 * client's stats, listing and stream events show them; an update of the
 * server reaches the open call; deleting the client ends it CANCELLED
 * before it returns, every stream deleted and every event closed. */
START_TEST(client_runs_calls_side_by_side) {
  ta_env *env = ta->env_new();
  pthread_mutex_lock(&smu);
  shalf_closes = 0;
  pthread_mutex_unlock(&smu);
  char addr[64];
  ta_obj *src = serve_any(env, addr);
  cstate c;
  c_init(&c);
  c.counter = 1;
  c.method = ECHO_METHOD;
  c.once = 1;
  mcp_client_def def = c_def(&c);
  cevents ev;
  memset(&ev, 0, sizeof(ev));
  pthread_mutex_init(&ev.mu, NULL);
  ta_opts o = ta_opts_for(0, addr, NULL);
  o.on_stream = c_on_stream;
  o.on_stream_ud = &ev;
  ta_obj *cli = NULL;
  ck_assert_int_eq(ta->client_new(env, &cli, &o, &def), 0);
  ck_assert(ta->run_until(env, both_answered, &c, TA_TIMEOUT_MS));
  ccounts k = c_get(&c);
  ck_assert_int_eq(k.status, MCP_CODE_OK); /* the echo's: unary, OK */
  ck_assert_str_eq(k.last[1], "go");
  ck_assert_int_eq(k.recv[1], 1);
  ck_assert_str_eq(k.last[0], "1");
  ck_assert_int_eq(k.opens[0], 1);
  ck_assert_int_eq(k.ended[0], 0); /* the counter call stays */
  ck_assert(ta->run_until(env, s_half_closed, NULL, TA_TIMEOUT_MS));

  mcp_transport_stats st;
  ck_assert_int_eq(ta->stats_versioned(cli, MCP_TRANSPORT_STATS_VERSION, &st),
                   0);
  ck_assert_uint_eq(st.streams, 1);
  ck_assert_uint_eq(st.opened, 2);
  ck_assert_uint_eq(st.connections, ta->counts_bytes ? 1 : 0);
  int listed = 0;
  ck_assert_int_eq(ta->list(cli, check_counter_call, &listed), 1);
  ck_assert_int_eq(listed, 1);
  ck_assert_int_eq(ta->stats_versioned(src, MCP_TRANSPORT_STATS_VERSION, &st),
                   0);
  ck_assert_uint_eq(st.connections, ta->counts_bytes ? 1 : 0); /* shared */

  /* An update of the server reaches the open call. */
  ck_assert_int_eq(ta->update(src, s_bump, NULL), 0);
  ck_assert(ta->run_until(env, counter_has_3, &c, TA_TIMEOUT_MS));
  ck_assert_str_eq(c_get(&c).last[0], "2");

  ta->del(cli);
  k = c_get(&c);
  ck_assert_int_eq(k.ended[0], 1);
  ck_assert_int_eq(k.status, MCP_CODE_CANCELLED);
  ck_assert_int_eq(k.dels[0], k.opens[0]);
  ck_assert_int_eq(k.dels[1], k.opens[1]);
  pthread_mutex_lock(&ev.mu);
  ck_assert_int_eq(ev.opened, 2);
  ck_assert_int_eq(ev.closed, 2);
  ck_assert_str_eq(ev.api, "test-client");
  pthread_mutex_unlock(&ev.mu);
  ta->del(src);
  ta->env_del(env);
  pthread_mutex_destroy(&ev.mu);
  pthread_mutex_destroy(&c.mu);
}
END_TEST

/* ---- a call's end, either side's ---- */

/* A client ends its own call (its END: the call is reset with the
 * client's status, which ended() hears), whether or not it half-closed
 * first (a server-streaming client, as Destination/Get and Assignments,
 * must still be able to end its call), and the protocol asks again; the
 * server sees the call go CANCELLED, its stream deleted. Then the
 * server's own status and details reach the client's ended(). */
START_TEST(client_ends_its_call_and_hears_the_servers_status) {
  ta_env *env = ta->env_new();
  char addr[64];
  ta_obj *src = serve_any(env, addr);
  for (int half_close = 0; half_close < 2; half_close++) {
    int closed0 = s_closed(NULL);
    cstate c;
    c_init(&c);
    c.counter = 1;
    c.end_after = 2;
    c.no_half_close = !half_close;
    ta_obj *cli = client_at(env, addr, &c);
    cwait w = {.c = &c, .ended = 2};
    ck_assert(ta->run_until(env, ended_ge, &w, TA_TIMEOUT_MS));
    ccounts k = c_get(&c);
    ck_assert_int_eq(k.status, MCP_CODE_ABORTED);
    ck_assert_str_eq(k.details, "client had enough");
    ck_assert_int_ge(k.opens[0], 2);
    ck_assert_int_ge(k.recv[0], 4); /* a read may bring more at once */
    int want = closed0 + 1;
    ck_assert(ta->run_until(env, s_closed_ge, &want, TA_TIMEOUT_MS));
    int status = -1;
    s_closed(&status);
    ck_assert_int_eq(status, MCP_CODE_CANCELLED);
    ta->del(cli);
    pthread_mutex_destroy(&c.mu);
  }

  cstate c;
  c_init(&c);
  c.counter = 1;
  c.once = 1;
  c.request = "stop";
  ta_obj *cli = client_at(env, addr, &c);
  cwait w = {.c = &c, .ended = 1};
  ck_assert(ta->run_until(env, ended_ge, &w, TA_TIMEOUT_MS));
  ccounts k = c_get(&c);
  ck_assert_int_eq(k.status, MCP_CODE_FAILED_PRECONDITION);
  ck_assert_str_eq(k.details, "counter stopped by request");
  ck_assert_int_eq(k.opens[0], 1);
  ta->del(cli);
  ta->del(src);
  ta->env_del(env);
  int so, sd;
  s_counts(&so, &sd);
  ck_assert_int_eq(sd, so);
  pthread_mutex_destroy(&c.mu);
}
END_TEST

/* A message beyond the client's max_recv_message_size ends its call
 * RESOURCE_EXHAUSTED, the message not handed to the protocol. */
START_TEST(client_message_beyond_its_limit_ends_the_call) {
  ta_env *env = ta->env_new();
  char addr[64];
  ta_obj *src = serve_any(env, addr);
  cstate c;
  c_init(&c);
  c.counter = 1;
  c.once = 1;
  c.request = "long";
  mcp_client_def def = c_def(&c);
  ta_opts o = ta_opts_for(0, addr, NULL);
  o.max_recv_message_size = 4; /* "count 0" is 7 bytes */
  ta_obj *cli = NULL;
  ck_assert_int_eq(ta->client_new(env, &cli, &o, &def), 0);
  cwait w = {.c = &c, .ended = 1};
  ck_assert(ta->run_until(env, ended_ge, &w, TA_TIMEOUT_MS));
  ccounts k = c_get(&c);
  ck_assert_int_eq(k.status, MCP_CODE_RESOURCE_EXHAUSTED);
  ck_assert_int_eq(k.recv[0], 0);
  ck_assert_int_eq(k.dels[0], 1);
  ta->del(cli);
  ta->del(src);
  ta->env_del(env);
  pthread_mutex_destroy(&c.mu);
}
END_TEST

/* ---- many calls; a call asked from another thread ---- */

#define NMANY 40

/* Slot i asks the echo once with "slot<i>" (the transport's thread). */
typedef struct many {
  pthread_mutex_t mu;
  int opened[NMANY], ended[NMANY], status[NMANY], sent[NMANY];
  char got[NMANY][16];
  int nended;
} many;

typedef struct msess {
  many *m;
  size_t slot;
} msess;

static int m_recv(void *p, const uint8_t *in, size_t len, mcp_tstamp ts) {
  (void)ts;
  msess *s = p;
  pthread_mutex_lock(&s->m->mu);
  snprintf(s->m->got[s->slot], sizeof(s->m->got[0]), "%.*s", (int)len,
           (const char *)in);
  pthread_mutex_unlock(&s->m->mu);
  return 0;
}

static int m_next(void *p, mcp_tstamp ts, mcp_msg **pmsg) {
  (void)ts;
  msess *s = p;
  if (s->m->sent[s->slot])
    return 0;
  s->m->sent[s->slot] = 1;
  char b[16];
  int n = snprintf(b, sizeof(b), "slot%zu", s->slot);
  mcp_msg_builder *mb = NULL;
  ck_assert_int_eq(mcp_msg_builder_new(&mb, NULL), 0);
  mcp_msg_builder_bytes(mb, b, (size_t)n);
  int rv = mcp_msg_builder_finish(mb, NULL, pmsg);
  mcp_msg_builder_del(mb);
  return rv < 0 ? rv : 1;
}

static void m_del(void *p) { free(p); }

static const mcp_stream_ops many_ops = {
    .name = "many",
    .flags = MCP_STREAM_CLIENT_HALF_CLOSE_AFTER_FIRST,
    .recv = m_recv,
    .next = m_next,
    .del = m_del};

static const char *m_method(void *ud, size_t slot) {
  (void)ud;
  (void)slot;
  return ECHO_METHOD;
}

static int m_open(void *ud, size_t slot, mcp_tstamp ts, mcp_stream **pst) {
  many *m = ud;
  if (m->opened[slot])
    return 0; /* once per slot */
  m->opened[slot] = 1;
  msess *s = calloc(1, sizeof(*s));
  ck_assert_ptr_nonnull(s);
  s->m = m;
  s->slot = slot;
  ck_assert_int_eq(mcp_stream_new(pst, &many_ops, s, NULL, ts), 0);
  return 1;
}

static void m_ended(void *ud, size_t slot, int status, const char *details,
                    mcp_tstamp ts) {
  (void)details;
  (void)ts;
  many *m = ud;
  pthread_mutex_lock(&m->mu);
  m->ended[slot]++;
  m->status[slot] = status;
  m->nended++;
  pthread_mutex_unlock(&m->mu);
}

static int all_ended(void *ud) {
  many *m = ud;
  pthread_mutex_lock(&m->mu);
  int n = m->nended;
  pthread_mutex_unlock(&m->mu);
  return n >= NMANY;
}

/* Many slots at once on one connection, beyond the server's
 * max_concurrent_streams: the calls past it wait for a free stream (h2c
 * and gRPC clients alike queue them, unstarted), and every one is
 * answered, OK. */
START_TEST(client_many_slots_beyond_the_servers_stream_limit) {
  ta_env *env = ta->env_new();
  int o0, d0;
  s_counts(&o0, &d0);
  ta_opts so = ta_opts_for(1, "127.0.0.1:0", NULL);
  so.services = services;
  so.nservices = 2;
  so.no_mcp = 1;
  so.max_concurrent_streams = 8;
  ta_obj *src = NULL;
  ck_assert_int_eq(ta->source_new(env, &src, &so, NULL), 0);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", ta->port(src));
  many *m = calloc(1, sizeof(*m));
  ck_assert_ptr_nonnull(m);
  pthread_mutex_init(&m->mu, NULL);
  mcp_client_def def = {.nslots = NMANY,
                        .method = m_method,
                        .open = m_open,
                        .ended = m_ended,
                        .user_data = m};
  ta_opts o = ta_opts_for(0, addr, NULL);
  ta_obj *cli = NULL;
  ck_assert_int_eq(ta->client_new(env, &cli, &o, &def), 0);
  ck_assert(ta->run_until(env, all_ended, m, TA_TIMEOUT_MS));
  ta->del(cli);
  for (int i = 0; i < NMANY; ++i) {
    char want[16];
    snprintf(want, sizeof(want), "slot%d", i);
    ck_assert_int_eq(m->ended[i], 1);
    ck_assert_int_eq(m->status[i], MCP_CODE_OK);
    ck_assert_str_eq(m->got[i], want);
  }
  mcp_transport_stats st;
  ck_assert_int_eq(ta->stats_versioned(src, MCP_TRANSPORT_STATS_VERSION, &st),
                   0);
  ck_assert_uint_eq(st.connections, ta->counts_bytes ? 1 : 0);
  ta->del(src);
  ta->env_del(env);
  int o1, d1;
  s_counts(&o1, &d1);
  ck_assert_int_eq(o1 - o0, NMANY);
  ck_assert_int_eq(d1 - d0, NMANY);
  pthread_mutex_destroy(&m->mu);
  free(m);
}
END_TEST

/* A call asked from another thread through the client's *_call(); on the
 * transport's own thread *_call() is refused. */
static void want_echo(mcp_tstamp ts, void *ud) {
  (void)ts;
  ((cstate *)ud)->method = ECHO_METHOD; /* where open() reads it */
}

typedef struct asker_arg {
  ta_obj *cli;
  cstate *c;
  int rv;
} asker_arg;

static void *asker(void *ud) {
  asker_arg *a = ud;
  a->rv = ta->call(a->cli, want_echo, a->c);
  return NULL;
}

static void call_on_its_thread(void *ud) {
  asker_arg *a = ud;
  a->rv = ta->call(a->cli, want_echo, a->c);
}

START_TEST(client_call_from_another_thread) {
  ta_env *env = ta->env_new();
  char addr[64];
  ta_obj *src = serve_any(env, addr);
  cstate c;
  c_init(&c);
  c.once = 1;
  ta_obj *cli = client_at(env, addr, &c);
  /* Turns of its loop: no call yet (none is asked). */
  creader r = {.c = &c};
  for (int i = 0; i < 20; i++)
    ck_assert_int_eq(ta->turn(env, cli, c_read_turn, &r), 0);
  ck_assert_int_eq(r.k.opens[1], 0);
  /* On the transport's thread, *_call() is refused. */
  asker_arg a = {.cli = cli, .c = &c, .rv = 1};
  ck_assert_int_eq(ta->turn(env, cli, call_on_its_thread, &a), 0);
  ck_assert_int_eq(a.rv, MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(c_get(&c).opens[1], 0);
  /* From another thread: the call is asked, and answered. */
  a.rv = 1;
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, asker, &a), 0);
  ck_assert(ta->run_until(env, slot1_ended, &c, TA_TIMEOUT_MS));
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_int_eq(a.rv, 0);
  ccounts k = c_get(&c);
  ck_assert_int_eq(k.status, MCP_CODE_OK);
  ck_assert_str_eq(k.last[1], "go");
  ck_assert_int_eq(k.opens[1], 1);
  ta->del(cli);
  ta->del(src);
  ta->env_del(env);
  pthread_mutex_destroy(&c.mu);
}
END_TEST

#ifdef TA_PEER
/* ---- services driven by the raw peer (tests/transport_peer.h) ---- */

static int s_closed_n(void *ud) { return s_closed(NULL) >= *(int *)ud; }

/* A stream woken by another call's message: "kick" on one counter call
 * wakes every other, each of which sends "woken" and nothing else
 * happens (the kicking call's next message is its next count, in
 * order); "replace" on a new call ends every older one through a wake,
 * ABORTED with its details, the new one open. Served by a listening sink
 * with no_mcp and no state (services alone), which answers MCP's
 * ResourceSink UNIMPLEMENTED. */
START_TEST(a_call_wakes_and_replaces_the_others) {
  ta_env *env = ta->env_new();
  int o0, d0;
  s_counts(&o0, &d0);
  pthread_mutex_lock(&smu);
  int kicks0 = skicks;
  pthread_mutex_unlock(&smu);
  int closed0 = s_closed(NULL);
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  o.services = services;
  o.nservices = 2;
  o.no_mcp = 1;
  o.on_stream = s_on_stream;
  ta_obj *sink = NULL;
  ck_assert_int_eq(ta->sink_new(env, &sink, &o, NULL), 0);
  int port = ta->port(sink);
  ck_assert_int_gt(port, 0);
  tp_call *k[3];
  for (int i = 0; i < 3; i++) {
    k[i] = tp_open(port, COUNTER_METHOD);
    tp_send_str(k[i], "go");
  }
  for (int i = 0; i < 3; i++) {
    ck_assert(tp_wait_msgs(env, k[i], 2));
    ck_assert_str_eq(tp_msg(k[i], 1), "1");
  }
  /* A message on the first wakes the two others. */
  tp_send_str(k[0], "kick");
  for (int i = 1; i < 3; i++) {
    ck_assert(tp_wait_msgs(env, k[i], 3));
    ck_assert_str_eq(tp_msg(k[i], 2), "woken");
  }
  tp_send_str(k[0], "go");
  ck_assert(tp_wait_msgs(env, k[0], 3));
  ck_assert_str_eq(tp_msg(k[0], 2), "2"); /* nothing came between */
  pthread_mutex_lock(&smu);
  ck_assert_int_eq(skicks - kicks0, 1);
  pthread_mutex_unlock(&smu);

  /* A newer call replaces the three. */
  tp_call *n = tp_open(port, COUNTER_METHOD);
  tp_send_str(n, "go");
  ck_assert(tp_wait_msgs(env, n, 2));
  tp_send_str(n, "replace");
  for (int i = 0; i < 3; i++) {
    ck_assert(tp_wait_status(env, k[i]));
    ck_assert_int_eq(tp_status(k[i]), MCP_CODE_ABORTED);
    ck_assert_str_eq(tp_details(k[i]), "replaced by a newer call");
  }
  int want = closed0 + 3;
  ck_assert(ta->run_until(env, s_closed_n, &want, TA_TIMEOUT_MS));
  int status = -1;
  s_closed(&status);
  ck_assert_int_eq(status, MCP_CODE_ABORTED);
  ck_assert_int_eq(tp_status(n), -1); /* still open */
  ck_assert_int_eq(ta->streams(sink, NULL), 1);

  /* MCP is not served here. */
  tp_call *m = tp_open(port, MCP_RESOURCE_SINK_METHOD);
  tp_half_close(m);
  ck_assert(tp_wait_status(env, m));
  ck_assert_int_eq(tp_status(m), MCP_CODE_UNIMPLEMENTED);
  tp_close(env, m);
  for (int i = 0; i < 3; i++)
    tp_close(env, k[i]);
  tp_close(env, n);
  ta->del(sink);
  ta->env_del(env);
  int o1, d1;
  s_counts(&o1, &d1);
  ck_assert_int_eq(o1 - o0, 4);
  ck_assert_int_eq(d1 - d0, 4);
}
END_TEST

/* A service whose open() fails with LIMIT. */
static int open_limit(void *ud, const mcp_peer_info *peer, mcp_tstamp ts,
                      mcp_stream **pst) {
  (void)ud;
  (void)peer;
  (void)ts;
  (void)pst;
  return MCP_ERR_LIMIT;
}

static void put_b(mcp_store *store, mcp_tstamp ts, void *ud) {
  (void)ud;
  th_put(store, "c1", "b", "1", "B", ts);
}

static void count_c1(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  (void)ts;
  *(size_t *)ud = mcp_sink_state_count(st, "c1");
}

static int sink_has_3(void *ud) {
  size_t n = 0;
  ck_assert_int_eq(ta->sink_call(ud, count_c1, &n), 0);
  return n == 3;
}

/* A listed stream: service calls by their API, MCP streams by session. */
typedef struct listed {
  int counter, mcp;
} listed;

static void list_one(const mcp_stream_info *info, void *ud) {
  listed *l = ud;
  if (info->stream &&
      strcmp(mcp_stream_get_ops(info->stream)->name, "counter") == 0) {
    ck_assert_str_eq(info->api, "counter");
    l->counter++;
  }
  if (mcp_stream_source_session(info->stream))
    l->mcp++;
}

static int echo_half_closed(void *ud) {
  return s_get(&secho_half_closes) >= *(int *)ud;
}

/* Services on a listening source beside MCP, on one port: a sink syncs
 * meanwhile; a unary echo sent two messages and its half-close at once
 * answers both, then ends OK (the server hears the half-close); a
 * server-streaming counter stays open after it (the server hears the
 * half-close), an update of the source pumps it, the stats and the
 * listing count it beside the MCP stream (opened, and holding no
 * initial-sync slot, which MCP's push freed), and its session ends it
 * with a status and details that reach the client and the server's
 * stream events; an unknown method is UNIMPLEMENTED, an open() error the
 * error's status and text; open() sees the peer's address; MCP is never
 * disturbed (a store change still reaches the sink). */
START_TEST(services_served_beside_mcp) {
  ta_world w;
  ta_world_init(&w);
  int o0, d0;
  s_counts(&o0, &d0);
  int closed0 = s_closed(NULL);
  pthread_mutex_lock(&smu);
  shalf_closes = 0;
  pthread_mutex_unlock(&smu);
  int osvc0 = s_get(&sopened_svc), omcp0 = s_get(&sopened_mcp);
  mcp_service_def d[3] = {
      services[0], services[1], {.method = "/test.Refuse/Call", .open = open_limit}};
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  o.services = d;
  o.nservices = 3;
  o.on_stream = s_on_stream;
  ta_start_source_with(&w, &o);
  ta_start_sink(&w, NULL);
  ck_assert(ta->run_until(w.env, ta_synced, &w, TA_TIMEOUT_MS));
  int port = ta->port(w.src);

  /* Unary: each message comes back, then the client's half-close ends
   * it OK. */
  int echo_hc = s_get(&secho_half_closes) + 1;
  tp_call *x = tp_open(port, ECHO_METHOD);
  tp_send(x, "hello", 5, 0);
  tp_send(x, "again", 5, 1);
  ck_assert(tp_wait_status(w.env, x));
  ck_assert_int_eq(tp_status(x), MCP_CODE_OK);
  ck_assert_int_eq(tp_nmsgs(x), 2);
  ck_assert_str_eq(tp_msg(x, 0), "hello");
  ck_assert_str_eq(tp_msg(x, 1), "again");
  ck_assert(ta->run_until(w.env, echo_half_closed, &echo_hc, TA_TIMEOUT_MS));
  int want = closed0 + 1;
  ck_assert(ta->run_until(w.env, s_closed_n, &want, TA_TIMEOUT_MS));
  pthread_mutex_lock(&smu);
  ck_assert_str_eq(sclosed_api, "echo");
  ck_assert_int_eq(sclosed_status, MCP_CODE_OK);
  ck_assert(strncmp(speer, "ipv4:127.0.0.1:", 15) == 0);
  ck_assert_int_eq(speer_tls, test_tls_mode());
  pthread_mutex_unlock(&smu);
  tp_close(w.env, x);

  /* Server streaming, kept open on the half-close. */
  tp_call *k = tp_open(port, COUNTER_METHOD);
  tp_send(k, "go", 2, 1);
  ck_assert(tp_wait_msgs(w.env, k, 2));
  ck_assert_str_eq(tp_msg(k, 0), "0");
  ck_assert_str_eq(tp_msg(k, 1), "1");
  ck_assert(ta->run_until(w.env, s_half_closed, NULL, TA_TIMEOUT_MS));
  /* An update pumps it: the next message, on the stream the half-close
   * left open, with nothing before it. */
  ck_assert_int_eq(ta->update(w.src, s_bump, NULL), 0);
  ck_assert(tp_wait_msgs(w.env, k, 3));
  ck_assert_str_eq(tp_msg(k, 2), "2");
  ck_assert_int_eq(tp_status(k), -1);

  /* Stats and the stream list count it beside the MCP stream. */
  mcp_transport_stats st;
  ck_assert_int_eq(
      ta->stats_versioned(w.src, MCP_TRANSPORT_STATS_VERSION, &st), 0);
  ck_assert_uint_eq(st.streams, 2);
  ck_assert_uint_eq(st.opened, 3); /* MCP's, the echo, the counter */
  ck_assert_uint_eq(st.initial, 0); /* service streams take no slot */
  listed l = {0, 0};
  ck_assert_int_eq(ta->list(w.src, list_one, &l), 2);
  ck_assert_int_eq(l.counter, 1);
  ck_assert_int_eq(l.mcp, 1);

  /* Unknown paths keep their answer; open() errors end the call. */
  tp_call *u = tp_open(port, "/test.Nope/Call");
  tp_send(u, "x", 1, 1);
  ck_assert(tp_wait_status(w.env, u));
  ck_assert_int_eq(tp_status(u), MCP_CODE_UNIMPLEMENTED);
  tp_close(w.env, u);
  tp_call *r = tp_open(port, "/test.Refuse/Call");
  tp_send(r, "x", 1, 1);
  ck_assert(tp_wait_status(w.env, r));
  ck_assert_int_eq(tp_status(r), MCP_CODE_RESOURCE_EXHAUSTED);
  ck_assert_str_eq(tp_details(r), mcp_strerror(MCP_ERR_LIMIT));
  tp_close(w.env, r);

  /* MCP was never disturbed: a store change reaches the sink. */
  ck_assert_int_eq(ta->update(w.src, put_b, NULL), 0);
  ck_assert(ta->run_until(w.env, sink_has_3, w.sink, TA_TIMEOUT_MS));
  ck_assert_int_eq(tp_status(k), -1); /* the half-closed counter too */

  /* A session ends its call: its status and details reach the client
   * and the server's stream event. */
  tp_call *k2 = tp_open(port, COUNTER_METHOD);
  tp_send_str(k2, "stop");
  ck_assert(tp_wait_status(w.env, k2));
  ck_assert_int_eq(tp_status(k2), MCP_CODE_FAILED_PRECONDITION);
  ck_assert_str_eq(tp_details(k2), "counter stopped by request");
  want = closed0 + 2;
  ck_assert(ta->run_until(w.env, s_closed_n, &want, TA_TIMEOUT_MS));
  pthread_mutex_lock(&smu);
  ck_assert_str_eq(sclosed_api, "counter");
  ck_assert_int_eq(sclosed_status, MCP_CODE_FAILED_PRECONDITION);
  ck_assert_str_eq(sclosed_details, "counter stopped by request");
  pthread_mutex_unlock(&smu);
  tp_close(w.env, k2);
  tp_close(w.env, k);
  ta_world_fini(&w);
  int o1, d1;
  s_counts(&o1, &d1);
  ck_assert_int_eq(o1 - o0, 3); /* the echo and two counters */
  ck_assert_int_eq(d1 - d0, 3);
  ck_assert_int_eq(s_get(&sopened_svc) - osvc0, 3);
  ck_assert_int_eq(s_get(&sopened_mcp) - omcp0, 1);
}
END_TEST

/* A peer that resets its call (RST_STREAM CANCEL) while the service is
 * sending: the stream is deleted once, its CLOSED event says CANCELLED,
 * and nothing of the call is left (no stream, no buffered byte). The
 * source's shutdown then frees a stream still open, once, before *_del()
 * returns, and the peer and the CLOSED event say UNAVAILABLE "server
 * shutting down". (A peer whose connection
 * vanishes without GOAWAY or reset is h2c's own test: gRPC core, the
 * raw peer, always says goodbye.) */
START_TEST(service_stream_freed_once_when_the_peer_resets) {
  ta_env *env = ta->env_new();
  int o0, d0;
  s_counts(&o0, &d0);
  int closed0 = s_closed(NULL);
  ta_obj *src = NULL;
  ck_assert_int_eq(serve(env, &src, "127.0.0.1:0"), 0);
  int port = ta->port(src);
  tp_call *k = tp_open(port, COUNTER_METHOD);
  tp_send_str(k, "many");
  ck_assert(tp_wait_msgs(env, k, 1)); /* 199 more to send: mid-send */
  tp_close(env, k);
  int want = closed0 + 1;
  ck_assert(ta->run_until(env, s_closed_n, &want, TA_TIMEOUT_MS));
  int status = -1;
  s_closed(&status);
  ck_assert_int_eq(status, MCP_CODE_CANCELLED);
  int o1, d1;
  s_counts(&o1, &d1);
  ck_assert_int_eq(o1 - o0, 1);
  ck_assert_int_eq(d1 - d0, 1);
  mcp_transport_stats st;
  ck_assert_int_eq(ta->stats_versioned(src, MCP_TRANSPORT_STATS_VERSION, &st),
                   0);
  ck_assert_uint_eq(st.streams, 0);
  ck_assert_uint_eq(st.read_buffered, 0);
  ck_assert_uint_eq(st.msg_buffered, 0);

  /* The shutdown frees a stream still open, once: UNAVAILABLE "server
   * shutting down" to the peer and in its CLOSED event. */
  k = tp_open(port, COUNTER_METHOD);
  tp_send_str(k, "go");
  ck_assert(tp_wait_msgs(env, k, 2));
  ta->del(src);
  s_counts(&o1, &d1);
  ck_assert_int_eq(o1 - o0, 2);
  ck_assert_int_eq(d1 - d0, 2);
  ck_assert(tp_wait_status(env, k));
  ck_assert_int_eq(tp_status(k), MCP_CODE_UNAVAILABLE);
  ck_assert_str_eq(tp_details(k), "server shutting down");
  want = closed0 + 2;
  ck_assert(ta->run_until(env, s_closed_n, &want, TA_TIMEOUT_MS));
  pthread_mutex_lock(&smu);
  ck_assert_int_eq(sclosed, closed0 + 2);
  ck_assert_int_eq(sclosed_status, MCP_CODE_UNAVAILABLE);
  ck_assert_str_eq(sclosed_details, "server shutting down");
  pthread_mutex_unlock(&smu);
  tp_close(env, k);
  ta->env_del(env);
}
END_TEST

/* An update of a source without a store: fn gets NULL. */
static void note_null_store(mcp_store *store, mcp_tstamp ts, void *ud) {
  (void)ts;
  pthread_mutex_lock(&smu);
  *(int *)ud = store == NULL ? 1 : -1;
  pthread_mutex_unlock(&smu);
}

static int flag_set(void *ud) {
  pthread_mutex_lock(&smu);
  int v = *(int *)ud;
  pthread_mutex_unlock(&smu);
  return v != 0;
}

static int no_streams(void *ud) {
  mcp_transport_stats st;
  ck_assert_int_eq(ta->stats_versioned(ud, MCP_TRANSPORT_STATS_VERSION, &st),
                   0);
  return st.streams == 0;
}

/* Service calls go through admission and the limits as MCP ones do: a
 * call beyond max_streams is refused RESOURCE_EXHAUSTED "too many
 * streams" before open() (counted in refused_max_streams, no initial
 * slot held), and a message beyond max_recv_message_size ends its call
 * RESOURCE_EXHAUSTED. With no_mcp a source needs no store, serves no MCP
 * method (UNIMPLEMENTED), and an update's fn gets a NULL store. */
START_TEST(services_go_through_admission_and_limits) {
  ta_env *env = ta->env_new();
  int o0, d0;
  s_counts(&o0, &d0);
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  o.services = services;
  o.nservices = 2;
  o.no_mcp = 1;
  o.max_streams = 1;
  o.max_recv_message_size = 64;
  ta_obj *src = NULL;
  ck_assert_int_eq(ta->source_new(env, &src, &o, NULL), 0);
  int port = ta->port(src);
  tp_call *a = tp_open(port, COUNTER_METHOD);
  tp_send(a, "go", 2, 1);
  ck_assert(tp_wait_msgs(env, a, 2));
  /* A second stream: beyond max_streams. */
  tp_call *x = tp_open(port, ECHO_METHOD);
  tp_send(x, "x", 1, 1);
  ck_assert(tp_wait_status(env, x));
  ck_assert_int_eq(tp_status(x), MCP_CODE_RESOURCE_EXHAUSTED);
  ck_assert_str_eq(tp_details(x), "too many streams");
  tp_close(env, x);
  int o1, d1;
  s_counts(&o1, &d1);
  ck_assert_int_eq(o1 - o0, 1); /* the echo's open() never ran */
  mcp_transport_stats st;
  ck_assert_int_eq(ta->stats_versioned(src, MCP_TRANSPORT_STATS_VERSION, &st),
                   0);
  ck_assert_uint_eq(st.refused_max_streams, 1);
  ck_assert_uint_eq(st.initial, 0); /* no initial-push slot held */
  tp_close(env, a);

  /* A message beyond max_recv_message_size ends the call. */
  ck_assert(ta->run_until(env, no_streams, src, TA_TIMEOUT_MS));
  char big[200];
  memset(big, 'b', sizeof(big));
  tp_call *r = tp_open(port, ECHO_METHOD);
  tp_send(r, big, sizeof(big), 1);
  ck_assert(tp_wait_status(env, r));
  ck_assert_int_eq(tp_status(r), MCP_CODE_RESOURCE_EXHAUSTED);
  tp_close(env, r);

  /* No MCP here. */
  tp_call *m = tp_open(port, MCP_RESOURCE_SOURCE_METHOD);
  tp_half_close(m);
  ck_assert(tp_wait_status(env, m));
  ck_assert_int_eq(tp_status(m), MCP_CODE_UNIMPLEMENTED);
  tp_close(env, m);
  /* An update without a store still runs. */
  int seen = 0;
  ck_assert_int_eq(ta->update(src, note_null_store, &seen), 0);
  ck_assert(ta->run_until(env, flag_set, &seen, TA_TIMEOUT_MS));
  ck_assert_int_eq(seen, 1);
  ta->del(src);
  ta->env_del(env);
}
END_TEST

/* A session ends its call with its own status and text, after what it
 * had (end()), or with an error's (recv() failing, also while messages
 * are going out); the stream is gone at CLOSED, its API's name still
 * told. Timers pump a stream with nothing else moving it: three ticks
 * at least TICK_EVERY apart (a lower bound only), then nothing more (the
 * next message is the next request's answer); an echo answered late
 * through its timer stays open without a half-close, and the half-close
 * ends it once the answer due went out. The service defs are copied:
 * the caller's array and strings may go once *_new() returned. */
START_TEST(sessions_end_calls_and_timers_pump_them) {
  ta_env *env = ta->env_new();
  int o0, d0;
  s_counts(&o0, &d0);
  int closed0 = s_closed(NULL);
  mcp_service_def tmp[2];
  char paths[2][32];
  for (int i = 0; i < 2; ++i) {
    snprintf(paths[i], sizeof(paths[i]), "%s", services[i].method);
    tmp[i] = services[i];
    tmp[i].method = paths[i];
  }
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  o.services = tmp;
  o.nservices = 2;
  o.no_mcp = 1;
  o.on_stream = s_on_stream;
  ta_obj *src = NULL;
  ck_assert_int_eq(ta->source_new(env, &src, &o, NULL), 0);
  memset(tmp, 0, sizeof(tmp));
  memset(paths, 0, sizeof(paths));
  int port = ta->port(src);

  /* end(): the protocol's own status and text, after what it had. */
  tp_call *r = tp_open(port, COUNTER_METHOD);
  tp_send_str(r, "go");
  tp_send_str(r, "stop");
  ck_assert(tp_wait_status(env, r));
  ck_assert_int_eq(tp_status(r), MCP_CODE_FAILED_PRECONDITION);
  ck_assert_str_eq(tp_details(r), "counter stopped by request");
  ck_assert_int_eq(tp_nmsgs(r), 2);
  ck_assert_str_eq(tp_msg(r, 1), "1");
  tp_close(env, r);
  /* recv() failing: the error's status and text. */
  r = tp_open(port, COUNTER_METHOD);
  tp_send(r, "", 0, 0);
  ck_assert(tp_wait_status(env, r));
  ck_assert_int_eq(tp_status(r), mcp_error_grpc_status(MCP_ERR_MALFORMED));
  ck_assert_str_eq(tp_details(r), mcp_strerror(MCP_ERR_MALFORMED));
  tp_close(env, r);
  /* The same while messages are going out. */
  r = tp_open(port, COUNTER_METHOD);
  tp_send_str(r, "many");
  ck_assert(tp_wait_msgs(env, r, 1));
  tp_send(r, "", 0, 0);
  ck_assert(tp_wait_status(env, r));
  ck_assert_int_eq(tp_status(r), MCP_CODE_INVALID_ARGUMENT);
  tp_close(env, r);
  int want = closed0 + 3;
  ck_assert(ta->run_until(env, s_closed_n, &want, TA_TIMEOUT_MS));
  pthread_mutex_lock(&smu);
  ck_assert_int_eq(sclosed_status, MCP_CODE_INVALID_ARGUMENT);
  ck_assert_str_eq(sclosed_api, "counter");
  pthread_mutex_unlock(&smu);
  /* The echo's error: its status and text. */
  r = tp_open(port, ECHO_METHOD);
  tp_send_str(r, "fail");
  ck_assert(tp_wait_status(env, r));
  ck_assert_int_eq(tp_status(r), MCP_CODE_INVALID_ARGUMENT);
  ck_assert_str_eq(tp_details(r), mcp_strerror(MCP_ERR_MALFORMED));
  tp_close(env, r);

  /* Timers alone pump a stream. */
  r = tp_open(port, COUNTER_METHOD);
  mcp_tstamp t0 = ta->now();
  tp_send_str(r, "tick");
  ck_assert(tp_wait_msgs(env, r, 3));
  ck_assert_uint_ge(ta->now() - t0, 3 * TICK_EVERY - 5 * MCP_MILLISECONDS);
  for (int i = 0; i < 3; i++)
    ck_assert_str_eq(tp_msg(r, i), "tick");
  tp_send_str(r, "go");
  ck_assert(tp_wait_msgs(env, r, 4));
  ck_assert_str_eq(tp_msg(r, 3), "0"); /* no fourth tick came before */
  tp_close(env, r);

  /* A late echo, then a half-close after the next message. */
  t0 = ta->now();
  r = tp_open(port, ECHO_METHOD);
  tp_send_str(r, "late");
  ck_assert(tp_wait_msgs(env, r, 1));
  ck_assert_uint_ge(ta->now() - t0, TICK_EVERY - 5 * MCP_MILLISECONDS);
  ck_assert_str_eq(tp_msg(r, 0), "late");
  ck_assert_int_eq(tp_status(r), -1); /* open: "again" is answered on it */
  tp_send(r, "again", 5, 1);
  ck_assert(tp_wait_status(env, r));
  ck_assert_int_eq(tp_status(r), MCP_CODE_OK);
  ck_assert_int_eq(tp_nmsgs(r), 2);
  ck_assert_str_eq(tp_msg(r, 1), "again");
  tp_close(env, r);
  ta->del(src);
  ta->env_del(env);
  int o1, d1;
  s_counts(&o1, &d1);
  ck_assert_int_eq(o1 - o0, 6);
  ck_assert_int_eq(d1 - d0, 6);
}
END_TEST
/* ---- authorization ---- */

static int deny_now; /* under smu: deny_when_told() refuses */

static int deny_when_told(const mcp_peer *peer, void *ud) {
  (void)peer;
  (void)ud;
  return s_get(&deny_now) ? MCP_CODE_PERMISSION_DENIED : 0;
}

static void set_deny(int v) {
  pthread_mutex_lock(&smu);
  deny_now = v;
  pthread_mutex_unlock(&smu);
}

static int refused_ge(void *ud) { return s_get(&srefused) >= *(int *)ud; }

/* The authorize hook refuses a service call as it refuses MCP's: the
 * same status and details, before open() (never run), a REFUSED event
 * each, counted in refused_denied. A call it allowed is ended by
 * *_reauthorize() once the hook refuses it (PERMISSION_DENIED, counted
 * in revoked, its CLOSED event saying so). */
START_TEST(authorization_refuses_and_revokes_service_calls_as_mcp) {
  ta_world w;
  ta_world_init(&w);
  int o0, d0;
  s_counts(&o0, &d0);
  int closed0 = s_closed(NULL), refused0 = s_get(&srefused);
  int osvc0 = s_get(&sopened_svc), omcp0 = s_get(&sopened_mcp);
  set_deny(1);
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  o.services = services;
  o.nservices = 2;
  o.on_stream = s_on_stream;
  o.authorize = deny_when_told;
  ta_start_source_with(&w, &o);
  int port = ta->port(w.src);

  tp_call *m = tp_open(port, MCP_RESOURCE_SOURCE_METHOD);
  tp_half_close(m);
  ck_assert(tp_wait_status(w.env, m));
  ck_assert_int_eq(tp_status(m), MCP_CODE_PERMISSION_DENIED);
  tp_call *k = tp_open(port, COUNTER_METHOD);
  tp_send_str(k, "go");
  ck_assert(tp_wait_status(w.env, k));
  ck_assert_int_eq(tp_status(k), MCP_CODE_PERMISSION_DENIED);
  ck_assert_str_eq(tp_details(k), tp_details(m));
  ck_assert_int_eq(tp_nmsgs(k), 0);
  tp_close(w.env, m);
  tp_close(w.env, k);
  /* The event may follow the status the peer already has. */
  int want = refused0 + 2;
  ck_assert(ta->run_until(w.env, refused_ge, &want, TA_TIMEOUT_MS));
  ck_assert_int_eq(s_get(&srefused_status), MCP_CODE_PERMISSION_DENIED);
  ck_assert_int_eq(s_get(&sopened_svc), osvc0);
  ck_assert_int_eq(s_get(&sopened_mcp), omcp0);
  int o1, d1;
  s_counts(&o1, &d1);
  ck_assert_int_eq(o1, o0); /* open() never ran */
  mcp_transport_stats st;
  ck_assert_int_eq(
      ta->stats_versioned(w.src, MCP_TRANSPORT_STATS_VERSION, &st), 0);
  ck_assert_uint_eq(st.refused_denied, 2);

  /* Allowed, then revoked. */
  set_deny(0);
  k = tp_open(port, COUNTER_METHOD);
  tp_send_str(k, "go");
  ck_assert(tp_wait_msgs(w.env, k, 2));
  set_deny(1);
  ck_assert_int_eq(ta->reauthorize(w.src), 0);
  ck_assert(tp_wait_status(w.env, k));
  ck_assert_int_eq(tp_status(k), MCP_CODE_PERMISSION_DENIED);
  tp_close(w.env, k);
  want = closed0 + 1;
  ck_assert(ta->run_until(w.env, s_closed_n, &want, TA_TIMEOUT_MS));
  int status = -1;
  s_closed(&status);
  ck_assert_int_eq(status, MCP_CODE_PERMISSION_DENIED);
  ck_assert_int_eq(
      ta->stats_versioned(w.src, MCP_TRANSPORT_STATS_VERSION, &st), 0);
  ck_assert_uint_eq(st.revoked, 1);
  ta_world_fini(&w);
  set_deny(0);
  s_counts(&o1, &d1);
  ck_assert_int_eq(o1 - o0, 1);
  ck_assert_int_eq(d1 - d0, 1);
}
END_TEST

/* ---- a protocol over the store ---- */

/* "snap": after any request, sends the whole collection "c1" of the
 * store, then each change, one message per take: per item, field 1 the
 * name and (live items) field 2 the stored body, referenced, not copied
 * (as Destination and the Dispatcher do). */
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
  int body_ok[8];   /* the body is put_pattern()'s or the text put */
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

static void snap_parse(const tp_call *c, int i, snap_msg *m) {
  const uint8_t *p = (const uint8_t *)tp_msg(c, i);
  const uint8_t *end = p + tp_msg_len(c, i);
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
      for (uint64_t j = 0; j < n && ok; j++)
        ok = p[j] == (uint8_t)(j * 7) || p[0] == 'x';
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

/* A resource whose stored body is |len| raw bytes. */
static void put_raw(mcp_store *store, const char *name, const void *body,
                    size_t len, mcp_tstamp ts) {
  mcp_resource r;
  memset(&r, 0, sizeof(r));
  r.name = name;
  r.type_url = "type.googleapis.com/test.Body";
  r.body = body;
  r.body_len = len;
  ck_assert_int_ge(mcp_store_upsert(store, "c1", &r, ts), 0);
}

static void put_new(mcp_store *store, mcp_tstamp ts, void *ud) {
  (void)ud;
  put_raw(store, "new", "x-new", 5, ts);
}

static void delete_small(mcp_store *store, mcp_tstamp ts, void *ud) {
  (void)ud;
  ck_assert_int_ge(mcp_store_delete(store, "c1", "small", ts), 0);
}

/* A protocol over the store, as Destination and the Dispatcher are: a
 * large stored body (300000 bytes) goes out by reference, whole, and a
 * store change made through *_update() reaches the stream as a
 * difference (an item put, an item removed). */
START_TEST(a_protocol_over_the_store_sends_bodies_and_differences) {
  ta_env *env = ta->env_new();
  mcp_store *store = th_store(NULL);
  ck_assert_ptr_nonnull(store);
  enum { BIG = 300000 };
  uint8_t *b = malloc(BIG);
  ck_assert_ptr_nonnull(b);
  for (size_t i = 0; i < BIG; i++)
    b[i] = (uint8_t)(i * 7);
  put_raw(store, "big", b, BIG, 0);
  free(b);
  put_raw(store, "small", "x-small", 7, 0);
  mcp_service_def d = {SNAP_METHOD, snap_open, store, 0};
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  o.services = &d;
  o.nservices = 1;
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = store;
  ta_obj *src = NULL;
  ck_assert_int_eq(ta->source_new(env, &src, &o, &so), 0);
  tp_call *r = tp_open(ta->port(src), SNAP_METHOD);
  tp_send_str(r, "go");
  ck_assert(tp_wait_msgs(env, r, 1));
  snap_msg m;
  snap_parse(r, 0, &m);
  ck_assert_int_eq(m.n, 2);
  int big = snap_index(&m, "big"), small = snap_index(&m, "small");
  ck_assert_int_ge(big, 0);
  ck_assert_int_ge(small, 0);
  ck_assert_int_eq(m.body_len[big], BIG);
  ck_assert(m.body_ok[big]);
  ck_assert_int_eq(m.body_len[small], 7);

  /* Changes through the transport's update: the difference only. */
  ck_assert_int_eq(ta->update(src, put_new, NULL), 0);
  ck_assert(tp_wait_msgs(env, r, 2));
  snap_parse(r, 1, &m);
  ck_assert_int_eq(m.n, 1);
  ck_assert_str_eq(m.name[0], "new");
  ck_assert_int_eq(m.body_len[0], 5);
  ck_assert_int_eq(ta->update(src, delete_small, NULL), 0);
  ck_assert(tp_wait_msgs(env, r, 3));
  snap_parse(r, 2, &m);
  ck_assert_int_eq(m.n, 1);
  ck_assert_str_eq(m.name[0], "small");
  ck_assert_int_eq(m.body_len[0], -1); /* removed */
  tp_close(env, r);
  ta->del(src);
  ta->env_del(env);
  mcp_store_del(store);
}
END_TEST

/* ---- many calls at once ---- */

#define NSTRESS 16

/* The calls, each moved (tp_pump) at every look: a call waited on alone
 * would hold the others' sends and reads. */
typedef struct calls {
  tp_call **k;
  int opens, kicks, msgs; /* what the conditions wait for */
} calls;

static void pump_all(calls *c) {
  for (int i = 0; i < NSTRESS; i++)
    tp_pump(c->k[i]);
}

static int all_opened(void *ud) {
  calls *c = ud;
  pump_all(c);
  int o, d;
  s_counts(&o, &d);
  return o >= c->opens;
}

static int all_kicked(void *ud) {
  calls *c = ud;
  pump_all(c);
  return s_get(&skicks) >= c->kicks;
}

static int all_calls_ended(void *ud) {
  calls *c = ud;
  pump_all(c);
  for (int i = 0; i < NSTRESS; i++)
    if (tp_status(c->k[i]) < 0)
      return 0;
  return 1;
}

static int all_have_msgs(void *ud) {
  calls *c = ud;
  pump_all(c);
  for (int i = 0; i < NSTRESS; i++)
    if (tp_nmsgs(c->k[i]) < c->msgs)
      return 0;
  return 1;
}

/* Many calls at once (a connection each), woken by each other while
 * they send, then a shutdown in the middle: every one gets all its
 * messages in order, the others' wakes among them, then UNAVAILABLE;
 * every session is deleted once. */
START_TEST(many_calls_woken_by_each_other_then_shutdown) {
  ta_env *env = ta->env_new();
  int o0, d0;
  s_counts(&o0, &d0);
  int kicks0 = s_get(&skicks);
  char addr[64];
  ta_obj *src = serve_any(env, addr);
  int port = ta->port(src);
  tp_call *k[NSTRESS];
  for (int i = 0; i < NSTRESS; i++) {
    k[i] = tp_open(port, COUNTER_METHOD);
    tp_send_str(k[i], "some");
  }
  /* Every session is there before the kicks. */
  calls c = {.k = k, .opens = o0 + NSTRESS, .kicks = kicks0 + NSTRESS,
             .msgs = SOME + NSTRESS - 1};
  ck_assert(ta->run_until(env, all_opened, &c, TA_TIMEOUT_MS));
  for (int i = 0; i < NSTRESS; i++)
    tp_send_str(k[i], "kick"); /* each wakes all the others */
  ck_assert(ta->run_until(env, all_kicked, &c, TA_TIMEOUT_MS));
  ck_assert(ta->run_until(env, all_have_msgs, &c, TA_TIMEOUT_MS));
  for (int i = 0; i < NSTRESS; i++) {
    int seq = 0, woken = 0;
    for (int j = 0; j < tp_nmsgs(k[i]); j++) {
      const char *msg = tp_msg(k[i], j);
      if (strcmp(msg, "woken") == 0) {
        woken++;
      } else {
        char want[16];
        snprintf(want, sizeof(want), "%d", seq++);
        ck_assert_str_eq(msg, want);
      }
    }
    ck_assert_int_eq(seq, SOME);
    ck_assert_int_eq(woken, NSTRESS - 1);
  }
  ck_assert_int_eq(s_get(&skicks) - kicks0, NSTRESS);
  tp_send_str(k[0], "some"); /* in flight when the server goes */
  ta->del(src);
  ck_assert(ta->run_until(env, all_calls_ended, &c, TA_TIMEOUT_MS));
  for (int i = 0; i < NSTRESS; i++)
    ck_assert_int_eq(tp_status(k[i]), MCP_CODE_UNAVAILABLE);
  for (int i = 0; i < NSTRESS; i++)
    tp_close(env, k[i]);
  ta->env_del(env);
  int o1, d1;
  s_counts(&o1, &d1);
  ck_assert_int_eq(o1 - o0, NSTRESS);
  ck_assert_int_eq(d1 - d0, NSTRESS);
}
END_TEST
#endif

/* ---- TLS: who the peer is; each side authorizes ---- */

/* The explicit TLS tests run once: in the TLS run where the transport
 * has one (ta_transport.tls_run), else in its only run. */
static int explicit_tls_run(void) {
  return ta->tls_run ? test_tls_mode() : 1;
}

static mcp_acl *acl_of(const char *pattern) {
  mcp_acl *acl = NULL;
  ck_assert_int_eq(mcp_acl_new(&acl, NULL), 0);
  ck_assert_int_eq(mcp_acl_add(acl, MCP_ACL_ALLOW, pattern), 0);
  return acl;
}

/* One counter call of a client with |leaf|'s certificate that authorizes
 * the server with |acl|; it ends when the call ended once or had two
 * messages. */
static ccounts tls_call(ta_env *env, const char *addr, const char *leaf,
                        mcp_acl *acl, uint64_t *refused_denied) {
  cstate c;
  c_init(&c);
  c.counter = 1;
  c.once = 1;
  mcp_client_def def = c_def(&c);
  ta_opts o = ta_opts_for(0, addr, NULL);
  char cert[32], key[32];
  snprintf(cert, sizeof(cert), "%s.pem", leaf);
  snprintf(key, sizeof(key), "%s.key", leaf);
  o.cert_file = ta_cert(cert);
  o.key_file = ta_cert(key);
  o.ca_file = ta_cert("ca.pem");
  o.authorize = mcp_acl_authorize;
  o.authorize_ud = acl;
  ta_obj *cli = NULL;
  ck_assert_int_eq(ta->client_new(env, &cli, &o, &def), 0);
  cwait w = {.c = &c, .ended = 1, .call_recv = 2};
  ck_assert(ta->run_until(env, ended_or_two, &w, TA_TIMEOUT_MS));
  mcp_transport_stats st;
  ck_assert_int_eq(ta->stats_versioned(cli, MCP_TRANSPORT_STATS_VERSION, &st),
                   0);
  *refused_denied = st.refused_denied;
  ccounts k = c_get(&c);
  ta->del(cli);
  pthread_mutex_destroy(&c.mu);
  return k;
}

/* Mutual TLS between a listener serving services and the transport's
 * client, each side authorizing the other with an access list: allowed
 * both ways, the call runs and open() sees the client's identity (its
 * SPIFFE ID and CN); a client refusing the server's identity sends
 * nothing and its call ends PERMISSION_DENIED "permission denied: server
 * identity not allowed" (refused_denied); a server refusing the
 * client's identity ends the call as it would an MCP sink's,
 * PERMISSION_DENIED "permission denied: peer identity not allowed". */
START_TEST(tls_identities_reach_open_and_each_side_authorizes) {
  if (!explicit_tls_run())
    return;
  ta_env *env = ta->env_new();
  mcp_acl *server_acl = acl_of("spiffe://cluster.local/ns/default/*");
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", NULL);
  o.cert_file = ta_cert("server.pem");
  o.key_file = ta_cert("server.key");
  o.ca_file = ta_cert("ca.pem");
  o.services = services;
  o.nservices = 2;
  o.no_mcp = 1;
  o.authorize = mcp_acl_authorize;
  o.authorize_ud = server_acl;
  ta_obj *src = NULL;
  ck_assert_int_eq(ta->source_new(env, &src, &o, NULL), 0);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", ta->port(src));
  mcp_acl *istiod = acl_of("spiffe://cluster.local/ns/istio-system/sa/istiod");
  mcp_acl *other = acl_of("spiffe://cluster.local/ns/other/*");

  uint64_t denied = 0;
  ccounts k = tls_call(env, addr, "client", istiod, &denied);
  ck_assert_int_ge(k.recv[0], 2);
  pthread_mutex_lock(&smu);
  ck_assert_int_eq(speer_tls, 1);
  ck_assert_str_eq(speer_id, "spiffe://cluster.local/ns/default/sa/sink-a");
  ck_assert_str_eq(speer_cn, "sink-a");
  pthread_mutex_unlock(&smu);

  k = tls_call(env, addr, "client", other, &denied);
  ck_assert_int_eq(k.ended[0], 1);
  ck_assert_int_eq(k.status, MCP_CODE_PERMISSION_DENIED);
  ck_assert_str_eq(k.details, "permission denied: server identity not allowed");
  ck_assert_int_eq(k.recv[0], 0);
  ck_assert_uint_ge(denied, 1);

  k = tls_call(env, addr, "denied", istiod, &denied);
  ck_assert_int_eq(k.ended[0], 1);
  ck_assert_int_eq(k.status, MCP_CODE_PERMISSION_DENIED);
  ck_assert_str_eq(k.details, "permission denied: peer identity not allowed");
  ck_assert_int_eq(k.recv[0], 0);

  ta->del(src);
  ta->env_del(env);
  mcp_acl_del(server_acl);
  mcp_acl_del(istiod);
  mcp_acl_del(other);
}
END_TEST


/* ---- a server that vanishes ---- */

/* A bare HTTP/2 peer on a raw socket: it accepts, answers the preface
 * with an empty SETTINGS, and reads until the call's HEADERS came. */
typedef struct bare_peer {
  int lfd, afd, port, wrote;
  size_t got;
  uint8_t in[65536];
} bare_peer;

static void bare_listen(bare_peer *b) {
  memset(b, 0, sizeof(*b));
  b->afd = -1;
  b->lfd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(b->lfd, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(bind(b->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
  ck_assert_int_eq(listen(b->lfd, 4), 0);
  socklen_t alen = sizeof(a);
  ck_assert_int_eq(getsockname(b->lfd, (struct sockaddr *)&a, &alen), 0);
  ck_assert_int_eq(fcntl(b->lfd, F_SETFL, O_NONBLOCK), 0);
  b->port = ntohs(a.sin_port);
}

/* Whether a frame of |type| follows the client preface in |p|. */
static int frame_seen(const uint8_t *p, size_t n, uint8_t type) {
  size_t at = 24;
  while (at + 9 <= n) {
    size_t len = ((size_t)p[at] << 16) | ((size_t)p[at + 1] << 8) | p[at + 2];
    if (p[at + 3] == type)
      return 1;
    at += 9 + len;
  }
  return 0;
}

/* A run_until() condition: moves the bare peer's bytes (it runs between
 * the transport's events, on the test's thread); true once the call's
 * HEADERS came. */
static int bare_took_headers(void *ud) {
  bare_peer *b = ud;
  if (b->afd < 0) {
    b->afd = accept(b->lfd, NULL, NULL);
    if (b->afd < 0)
      return 0;
    ck_assert_int_eq(fcntl(b->afd, F_SETFL, O_NONBLOCK), 0);
  }
  if (!b->wrote) {
    static const uint8_t settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};
    ck_assert_int_eq(write(b->afd, settings, sizeof(settings)), 9);
    b->wrote = 1;
  }
  ssize_t n = read(b->afd, b->in + b->got, sizeof(b->in) - b->got);
  if (n > 0)
    b->got += (size_t)n;
  return frame_seen(b->in, b->got, 1 /* HEADERS */);
}

static int opened_twice(void *ud) { return c_get(ud).opens[0] >= 2; }

/* A server that vanishes with the client's call in flight (the bare peer
 * takes the call's HEADERS and closes the connection, without GOAWAY or
 * RST_STREAM): the call ends UNAVAILABLE, its stream deleted first and
 * gone from the stats; the protocol's next call waits for a connection
 * the listener never serves, and *_del() ends it CANCELLED "client
 * shutting down", once, its stream deleted first. Cleartext only: the
 * bare peer speaks no TLS. */
START_TEST(client_call_ends_unavailable_when_the_server_vanishes) {
  if (test_tls_mode())
    return;
  ta_env *env = ta->env_new();
  bare_peer *b = malloc(sizeof(*b));
  ck_assert_ptr_nonnull(b);
  bare_listen(b);
  cstate c;
  c_init(&c);
  c.counter = 1;
  mcp_client_def def = c_def(&c);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", b->port);
  ta_opts o = ta_opts_for(0, addr, NULL);
  ta_obj *cli = NULL;
  ck_assert_int_eq(ta->client_new(env, &cli, &o, &def), 0);
  ck_assert(ta->run_until(env, bare_took_headers, b, TA_TIMEOUT_MS));
  ccounts k = c_get(&c);
  ck_assert_int_eq(k.opens[0], 1);
  ck_assert_int_eq(k.ended[0], 0);
  mcp_transport_stats st;
  ck_assert_int_eq(ta->stats_versioned(cli, MCP_TRANSPORT_STATS_VERSION, &st),
                   0);
  ck_assert_uint_eq(st.streams, 1);
  if (ta->counts_bytes)
    ck_assert_uint_gt(st.bytes_written, 24); /* the preface and more */
  else
    ck_assert_uint_eq(st.bytes_written, 0); /* documented: not counted */

  close(b->afd); /* the server vanishes, mid-call */
  cwait w = {.c = &c, .ended = 1};
  ck_assert(ta->run_until(env, ended_ge, &w, TA_TIMEOUT_MS));
  k = c_get(&c);
  ck_assert_int_eq(k.status, MCP_CODE_UNAVAILABLE);
  ck_assert_int_eq(k.dels[0], 1);

  /* The protocol asks again (after the transport's backoff, if any); that
   * call waits for a connection the listener never serves. */
  ck_assert(ta->run_until(env, opened_twice, &c, TA_TIMEOUT_MS));
  k = c_get(&c);
  ck_assert_int_eq(k.ended[0], 1);
  ck_assert_int_eq(ta->stats_versioned(cli, MCP_TRANSPORT_STATS_VERSION, &st),
                   0);
  ck_assert_uint_eq(st.streams, 1); /* the new call's; the old one gone */
  ta->del(cli);
  k = c_get(&c);
  ck_assert_int_eq(k.ended[0], k.opens[0]);
  ck_assert_int_eq(k.dels[0], k.opens[0]);
  ck_assert_int_eq(k.status, MCP_CODE_CANCELLED);
  ck_assert_str_eq(k.details, "client shutting down");
  ta->env_del(env);
  close(b->lfd);
  free(b);
  pthread_mutex_destroy(&c.mu);
}
END_TEST

/* Under AddressSanitizer, also catch pointers into returned stack frames:
 * the gRPC transport once handed sessions a pointer into a copy of a
 * small (inline) gRPC slice on its stack; the small messages of these
 * protocols then read freed stack bytes (the echo came back empty). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "detect_stack_use_after_return=1";
}

/* The adapter this executable is built with (tests/meson.build:
 * -DTA_ADAPTER=ta_<transport>). */
extern const ta_transport TA_ADAPTER;

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  ta = &TA_ADAPTER;
  /* With MCP_TEST_TLS=1 every connection is mutual TLS (ta_opts_for());
   * the explicit TLS test needs the certificates in its run too. */
  if (explicit_tls_run() && ta_certs_make() != 0)
    return EXIT_FAILURE;
  char name[64];
  snprintf(name, sizeof(name), "%s_service%s", ta->name,
           test_tls_mode() ? "_tls" : "");
  Suite *s = suite_create(name);
  TCase *tc = tcase_create("client");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, client_bad_method_ends_the_call_without_a_spin);
  tcase_add_test(tc, client_reconnects_after_restart);
  tcase_add_test(tc, services_and_client_options_are_checked_alike);
  tcase_add_test(tc, open_error_and_unknown_method_end_the_call);
  tcase_add_test(tc, listening_sink_serves_services_beside_mcp);
  tcase_add_test(tc, client_asks_open_at_expiry);
  tcase_add_test(tc, client_over_unix_socket);
  tcase_add_test(tc, client_call_ends_unavailable_when_the_server_vanishes);
  tcase_add_test(tc, client_ends_its_call_and_hears_the_servers_status);
  tcase_add_test(tc, client_message_beyond_its_limit_ends_the_call);
  tcase_add_test(tc, client_runs_calls_side_by_side);
  tcase_add_test(tc, client_many_slots_beyond_the_servers_stream_limit);
  tcase_add_test(tc, client_call_from_another_thread);
#ifdef TA_PEER
  tcase_add_test(tc, a_call_wakes_and_replaces_the_others);
  tcase_add_test(tc, services_served_beside_mcp);
  tcase_add_test(tc, service_stream_freed_once_when_the_peer_resets);
  tcase_add_test(tc, services_go_through_admission_and_limits);
  tcase_add_test(tc, sessions_end_calls_and_timers_pump_them);
  tcase_add_test(tc, authorization_refuses_and_revokes_service_calls_as_mcp);
  tcase_add_test(tc, a_protocol_over_the_store_sends_bodies_and_differences);
  tcase_add_test(tc, many_calls_woken_by_each_other_then_shutdown);
#endif
  tcase_add_test(tc, tls_identities_reach_open_and_each_side_authorizes);
  suite_add_tcase(s, tc);
  int failed = ta_run(s);
  if (explicit_tls_run())
    ta_certs_remove();
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
