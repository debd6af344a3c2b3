/*
 * A listener's shutdown and its start's failures, written once for every
 * transport (issue 21 item 7; the transport: the adapter it is built
 * with, tests/transport_<name>.c; was test_grpc_shutdown.c): *_del()
 * ends open streams with UNAVAILABLE "server shutting down" without
 * waiting for the grace, cuts off a stream that cannot finish once the
 * grace is over (and not before), runs the updates still queued first,
 * and a listener that cannot bind says why in errno (EADDRINUSE,
 * EADDRNOTAVAIL, ENOENT) and writes nothing to stderr (gRPC core would
 * dump its raw error there), in both roles. (A port in use by
 * another listener, and a dialing sink's bad addresses, are the sync
 * suite's: bad_addresses_are_refused, a_port_in_use_reports_errno.)
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helper.h"
#include "transport_suite.h"

extern const ta_transport TA_ADAPTER;

static const char *const colls[] = {"c1"};

/* ---- what one object's streams report, from any thread ---- */

typedef struct seen {
  pthread_mutex_t mu;
  int opened, closed, last_status;
  char last_details[128];
} seen;

static void seen_init(seen *s) {
  memset(s, 0, sizeof(*s));
  pthread_mutex_init(&s->mu, NULL);
}

static seen seen_get(seen *s) {
  pthread_mutex_lock(&s->mu);
  seen c = *s;
  pthread_mutex_unlock(&s->mu);
  return c;
}

static void on_stream(mcp_stream_event kind, const mcp_stream_info *i,
                      void *ud) {
  seen *s = ud;
  pthread_mutex_lock(&s->mu);
  if (kind == MCP_STREAM_OPENED) {
    s->opened++;
  } else if (kind == MCP_STREAM_CLOSED) {
    /* The first close counts: a dialer then redials a source gone. */
    if (s->closed++ == 0) {
      s->last_status = i->status;
      snprintf(s->last_details, sizeof(s->last_details), "%s",
               i->details ? i->details : "");
    }
  }
  pthread_mutex_unlock(&s->mu);
}

static ta_opts opts(int listen, const char *addr, seen *s) {
  ta_opts o = ta_opts_for(listen, addr, NULL);
  o.on_stream = s ? on_stream : NULL;
  o.on_stream_ud = s;
  return o;
}

static mcp_sink_state *sink_state(int incremental) {
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.node_id = "sink-1";
  so.collections = colls;
  so.ncollections = 1;
  so.incremental = incremental;
  mcp_sink_state *st = NULL;
  ck_assert_int_eq(mcp_sink_state_new(&st, &so), 0);
  return st;
}

/* ---- graceful shutdown ---- */

typedef struct three {
  ta_obj *sink[3];
  seen *k[3];
  mcp_store *store;
} three;

static void count_c1(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  (void)ts;
  *(size_t *)ud = mcp_sink_state_count(st, "c1");
}

static int all_synced(void *ud) {
  three *t = ud;
  for (int i = 0; i < 3; i++) {
    size_t n = 0;
    ck_assert_int_eq(ta->sink_call(t->sink[i], count_c1, &n), 0);
    if (n != 1)
      return 0;
  }
  return 1;
}

static int all_closed(void *ud) {
  three *t = ud;
  for (int i = 0; i < 3; i++)
    if (seen_get(t->k[i]).closed < 1)
      return 0;
  return 1;
}

static int closed_3(void *ud) { return seen_get(ud).closed >= 3; }
static int closed_1(void *ud) { return seen_get(ud).closed >= 1; }

/* A source of |store| listening on |addr|, its streams seen by |obs|
 * (NULL: none). */
static ta_obj *source_on(ta_env *env, const char *addr, mcp_store *store,
                         seen *obs) {
  ta_opts o = opts(1, addr, obs);
  mcp_source_options sopts;
  mcp_source_options_default(&sopts);
  sopts.store = store;
  ta_obj *src = NULL;
  ck_assert_int_eq(ta->source_new(env, &src, &o, &sopts), 0);
  return src;
}

/* Three sinks synced from a source; the source's *_del() ends each
 * stream with its status at once (the sinks read: nothing waits for the
 * grace), and every sink is told UNAVAILABLE "server shutting down". */
START_TEST(open_streams_end_unavailable_at_once_on_shutdown) {
  ta_env *env = ta->env_new();
  mcp_store *store = th_store(NULL);
  th_put(store, "c1", "a", "1", "alpha", ta->now());
  seen so, ko[3];
  seen_init(&so);
  ta_obj *src = source_on(env, "127.0.0.1:0", store, &so);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", ta->port(src));

  three t = {.store = store};
  mcp_sink_state *state[3];
  for (int i = 0; i < 3; i++) {
    seen_init(&ko[i]);
    t.k[i] = &ko[i];
    state[i] = sink_state(i % 2);
    ta_opts d = opts(0, addr, &ko[i]);
    ck_assert_int_eq(ta->sink_new(env, &t.sink[i], &d, state[i]), 0);
  }
  ck_assert(ta->run_until(env, all_synced, &t, TA_TIMEOUT_MS));

  /* Until the streams' CLOSED events (gRPC's *_del() returns after
   * them, h2c's shutdown goes on in its loop). Drained, not cancelled at
   * the grace: the status says so (a cancelled call ends CANCELLED), so
   * no clock is read. */
  ta->del(src);
  ck_assert(ta->run_until(env, closed_3, &so, TA_TIMEOUT_MS));
  seen s = seen_get(&so);
  ck_assert_int_eq(s.closed, 3);
  ck_assert_int_eq(s.last_status, MCP_CODE_UNAVAILABLE);
  ck_assert_str_eq(s.last_details, "server shutting down");
  ck_assert(ta->run_until(env, all_closed, &t, TA_TIMEOUT_MS));
  for (int i = 0; i < 3; i++) {
    s = seen_get(&ko[i]);
    ck_assert_int_eq(s.last_status, MCP_CODE_UNAVAILABLE);
    ck_assert_str_eq(s.last_details, "server shutting down");
    ta->del(t.sink[i]);
  }
  ta->env_del(env);
  for (int i = 0; i < 3; i++) {
    mcp_sink_state_del(state[i]);
    pthread_mutex_destroy(&ko[i].mu);
  }
  pthread_mutex_destroy(&so.mu);
  mcp_store_del(store);
}
END_TEST

static void put_n(mcp_store *st, mcp_tstamp ts, void *ud) {
  char name[16];
  snprintf(name, sizeof(name), "r%d", (int)(intptr_t)ud);
  th_put(st, "c1", name, "1", "x", ts);
}

/* Updates queued when *_del() is called run before it returns. */
START_TEST(del_runs_the_queued_updates_first) {
  ta_env *env = ta->env_new();
  mcp_store *store = th_store(NULL);
  ck_assert_int_eq(mcp_store_add_collection(store, "c1"), 0);
  ta_opts o = opts(1, "127.0.0.1:0", NULL);
  o.max_queued_updates = 1000;
  mcp_source_options sopts;
  mcp_source_options_default(&sopts);
  sopts.store = store;
  ta_obj *src = NULL;
  ck_assert_int_eq(ta->source_new(env, &src, &o, &sopts), 0);
  for (intptr_t i = 0; i < 500; i++)
    ck_assert_int_eq(ta->update(src, put_n, (void *)i), 0);
  ta->del(src);
  ta->env_del(env);
  ck_assert_uint_eq(mcp_store_count(store, "c1"), 500);
  mcp_store_del(store);
}
END_TEST

/* ---- a listener that cannot start ---- */

/* Makes a listening source (|sink| 0) or sink (1) on |addr| with stderr
 * captured: the result, errno after it, and whether anything was
 * written to stderr (gRPC core would dump its raw error there). */
static int new_capturing(ta_env *env, const char *addr, int sink, int *err,
                         int *wrote) {
  fflush(stderr);
  FILE *tmp = tmpfile();
  ck_assert_ptr_nonnull(tmp);
  int saved = dup(2);
  ck_assert_int_ge(saved, 0);
  ck_assert_int_ge(dup2(fileno(tmp), 2), 0);
  ta_opts o = opts(1, addr, NULL);
  ta_obj *x = NULL;
  int rv;
  errno = 0;
  if (sink) {
    mcp_sink_state *state = sink_state(0);
    rv = ta->sink_new(env, &x, &o, state);
    *err = errno;
    mcp_sink_state_del(state);
  } else {
    mcp_store *store = th_store(NULL);
    mcp_source_options sopts;
    mcp_source_options_default(&sopts);
    sopts.store = store;
    rv = ta->source_new(env, &x, &o, &sopts);
    *err = errno;
    mcp_store_del(store);
  }
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ck_assert_ptr_null(x);
  struct stat st;
  ck_assert_int_eq(fstat(fileno(tmp), &st), 0);
  *wrote = st.st_size > 0;
  fclose(tmp);
  return rv;
}

/* Both roles fail to listen on |addr| with IO and errno |e|, and write
 * nothing on stderr. */
static void refused_quietly(ta_env *env, const char *addr, int e) {
  for (int sink = 0; sink <= 1; sink++) {
    int err, wrote;
    ck_assert_int_eq(new_capturing(env, addr, sink, &err, &wrote),
                     MCP_ERR_IO);
    ck_assert_int_eq(err, e);
    ck_assert_msg(!wrote, "something was written to stderr");
  }
}

/* A first-time user's port in use: IO with errno EADDRINUSE, not
 * INVALID_ARGUMENT, and nothing on stderr. Both roles. Once freed, the
 * port is served: the failed start left nothing in the way. */
START_TEST(a_port_in_use_reports_eaddrinuse_and_writes_nothing) {
  ta_env *env = ta->env_new();
  int port;
  int fd = ta_hold_port(&port);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  refused_quietly(env, addr, EADDRINUSE);
  close(fd);
  mcp_store *store = th_store(NULL);
  ta_obj *src = source_on(env, addr, store, NULL);
  ck_assert_int_eq(ta->port(src), port);
  ta->del(src);
  ta->env_del(env);
  mcp_store_del(store);
}
END_TEST

/* An address of no local interface (TEST-NET-1): EADDRNOTAVAIL, nothing
 * on stderr. Both roles. */
START_TEST(a_foreign_address_reports_eaddrnotavail_and_writes_nothing) {
  ta_env *env = ta->env_new();
  refused_quietly(env, "192.0.2.1:15010", EADDRNOTAVAIL);
  ta->env_del(env);
}
END_TEST

/* A unix socket in a directory that does not exist: ENOENT, nothing on
 * stderr, both roles. One that can be made is served, twice in a row. */
START_TEST(a_unix_socket_path_reports_errno_and_writes_nothing) {
  ta_env *env = ta->env_new();
  char dir[] = "/tmp/mcp-shutdown-unix-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char addr[128];
  snprintf(addr, sizeof(addr), "unix:%s/missing/s.sock", dir);
  refused_quietly(env, addr, ENOENT);
  snprintf(addr, sizeof(addr), "unix:%s/s.sock", dir);
  mcp_store *store = th_store(NULL);
  for (int i = 0; i < 2; i++) {
    ta_obj *src = source_on(env, addr, store, NULL);
    ta->del(src);
  }
  ta->env_del(env);
  mcp_store_del(store);
  snprintf(addr, sizeof(addr), "%s/s.sock", dir);
  unlink(addr);
  ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST


/* ---- a stuck stream ---- */

/* A raw cleartext HTTP/2 peer (prior knowledge) that opens one call of
 * |method| with |req| as its message, reads the server's first SETTINGS
 * to acknowledge them, and then never reads again: a push larger than
 * its windows cannot complete. A socket of the test's own rather than
 * transport_peer.c's gRPC-core call, which keeps a receive armed. */
typedef struct stuck_peer {
  int fd;
  int acked; /* the server's SETTINGS acknowledged */
  int rst, eof; /* the call reset; the connection ended */
  uint8_t in[9];
  size_t nin, skip; /* header bytes read; payload bytes left to skip */
} stuck_peer;

static void put_frame(uint8_t *b, size_t len, uint8_t type, uint8_t flags,
                      uint32_t stream) {
  b[0] = (uint8_t)(len >> 16);
  b[1] = (uint8_t)(len >> 8);
  b[2] = (uint8_t)len;
  b[3] = type;
  b[4] = flags;
  b[5] = (uint8_t)(stream >> 24);
  b[6] = (uint8_t)(stream >> 16);
  b[7] = (uint8_t)(stream >> 8);
  b[8] = (uint8_t)stream;
}

static void write_all(int fd, const void *p, size_t len) {
  const uint8_t *b = p;
  while (len) {
    ssize_t n = write(fd, b, len);
    if (n < 0 && errno == EINTR)
      continue;
    ck_assert_int_gt(n, 0);
    b += n;
    len -= (size_t)n;
  }
}

/* A literal header field without indexing (HPACK), name by index |idx|
 * (0: the name as a literal too); strings shorter than 127 bytes. */
static size_t hpack_lit(uint8_t *b, int idx, const char *name,
                        const char *value) {
  size_t n = 0;
  if (idx < 15) {
    b[n++] = (uint8_t)idx;
  } else {
    b[n++] = 0x0f;
    b[n++] = (uint8_t)(idx - 15);
  }
  if (idx == 0) {
    size_t l = strlen(name);
    ck_assert_uint_lt(l, 127);
    b[n++] = (uint8_t)l;
    memcpy(b + n, name, l);
    n += l;
  }
  size_t l = strlen(value);
  ck_assert_uint_lt(l, 127);
  b[n++] = (uint8_t)l;
  memcpy(b + n, value, l);
  return n + l;
}

static void stuck_open(stuck_peer *p, int port, const char *method,
                       const mcp_msg *req) {
  memset(p, 0, sizeof(*p));
  p->fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(p->fd, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ck_assert_int_eq(connect(p->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  write_all(p->fd, preface, sizeof(preface) - 1);
  uint8_t b[512];
  put_frame(b, 0, 4, 0, 0); /* SETTINGS, none: the defaults' windows */
  write_all(p->fd, b, 9);
  size_t n = 9;
  b[n++] = 0x83; /* :method POST */
  b[n++] = 0x86; /* :scheme http */
  n += hpack_lit(b + n, 4, NULL, method);          /* :path */
  n += hpack_lit(b + n, 1, NULL, "127.0.0.1");     /* :authority */
  n += hpack_lit(b + n, 31, NULL, "application/grpc"); /* content-type */
  n += hpack_lit(b + n, 0, "te", "trailers");
  put_frame(b, n - 9, 1, 0x4, 1); /* HEADERS, END_HEADERS, stream 1 */
  write_all(p->fd, b, n);
  size_t len = mcp_msg_len(req);
  uint8_t *d = malloc(9 + 5 + len);
  ck_assert_ptr_nonnull(d);
  put_frame(d, 5 + len, 0, 0, 1); /* DATA, stream 1, not the end */
  d[9] = 0;
  d[10] = (uint8_t)(len >> 24);
  d[11] = (uint8_t)(len >> 16);
  d[12] = (uint8_t)(len >> 8);
  d[13] = (uint8_t)len;
  mcp_msg_flatten(req, d + 14);
  write_all(p->fd, d, 9 + 5 + len);
  free(d);
  ck_assert_int_eq(fcntl(p->fd, F_SETFL, O_NONBLOCK), 0);
}

/* Reads what the server sent, without blocking: its first SETTINGS are
 * acknowledged (the only answer this peer gives), a RST_STREAM of the
 * call and the connection's end are noted. Reading does not unstick the
 * push: only a WINDOW_UPDATE would, and this peer sends none. */
static void peer_read(stuck_peer *p) {
  while (!p->eof) {
    uint8_t b[4096];
    size_t want = p->skip ? (p->skip < sizeof(b) ? p->skip : sizeof(b))
                          : 9 - p->nin;
    ssize_t n = read(p->fd, p->skip ? b : p->in + p->nin, want);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      return;
    if (n <= 0) { /* EOF or ECONNRESET: the connection ended */
      ck_assert(n == 0 || errno == ECONNRESET);
      p->eof = 1;
      return;
    }
    if (p->skip) {
      p->skip -= (size_t)n;
      continue;
    }
    p->nin += (size_t)n;
    if (p->nin < 9)
      continue;
    p->nin = 0;
    size_t len = (size_t)p->in[0] << 16 | (size_t)p->in[1] << 8 | p->in[2];
    uint32_t stream = ((uint32_t)p->in[5] & 0x7f) << 24 |
                      (uint32_t)p->in[6] << 16 | (uint32_t)p->in[7] << 8 |
                      p->in[8];
    p->skip = len;
    if (p->in[3] == 4 && !(p->in[4] & 1) && !p->acked) { /* SETTINGS */
      uint8_t ack[9];
      put_frame(ack, 0, 4, 1, 0);
      write_all(p->fd, ack, 9);
      p->acked = 1;
    }
    if (p->in[3] == 3 && stream == 1) /* RST_STREAM of the call */
      p->rst = 1;
  }
}

/* The server cut the call off: reset it or ended the connection. */
static int peer_cut(void *ud) {
  stuck_peer *p = ud;
  peer_read(p);
  return p->rst || p->eof;
}

/* The first request a sink of "c1" sends (made by the core). */
static mcp_msg *first_request(void) {
  mcp_sink_state *st = sink_state(0);
  mcp_sink_session *ss = NULL;
  ck_assert_int_eq(mcp_sink_session_new(&ss, st, ta->now()), 0);
  mcp_msg *msg = NULL;
  ck_assert_int_eq(mcp_sink_session_next(ss, &msg), 1);
  mcp_sink_session_del(ss);
  mcp_sink_state_del(st);
  return msg;
}

typedef struct stuck {
  ta_env *env;
  ta_obj *src;
  stuck_peer *peer;
} stuck;

static void any_sending(const mcp_stream_info *info, void *ud) {
  if (info->sending)
    *(int *)ud = 1;
}

/* A stream of the source holds a message the transport has not sent in
 * full (the peer stays acknowledged meanwhile). */
static int push_stuck(void *ud) {
  stuck *k = ud;
  peer_read(k->peer);
  int sending = 0;
  ck_assert_int_ge(ta->list(k->src, any_sending, &sending), 0);
  return sending && k->peer->acked;
}

/* A peer that subscribes and then never grants window: the push (larger
 * than any flow-control window) cannot complete, so the status cannot
 * follow it; the listener's shutdown cuts the call off after the grace
 * (gRPC: RST_STREAM, then the connection's end; h2c: the connection's
 * end), and not before. Cleartext: the peer is a raw socket. */
START_TEST(a_stuck_stream_is_cut_off_after_the_grace) {
  ta_env *env = ta->env_new();
  mcp_store *store = th_store(NULL);
  th_put_big(store, "c1", "big", "1", 16 << 20, 'x', ta->now());
  seen so;
  seen_init(&so);
  ta_obj *src = source_on(env, "127.0.0.1:0", store, &so);

  mcp_msg *req = first_request();
  stuck_peer peer;
  stuck_open(&peer, ta->port(src), ta->method(MCP_SERVICE_RESOURCE, 1), req);
  mcp_msg_free(req);
  stuck k = {env, src, &peer};
  ck_assert(ta->run_until(env, push_stuck, &k, TA_TIMEOUT_MS));
  ck_assert(!peer.rst && !peer.eof);

  /* Until the peer is cut off: gRPC's *_del() returns after the grace,
   * h2c's shutdown goes on in its loop (run_until, env_del). */
  mcp_tstamp t0 = ta->now();
  ta->del(src);
  ck_assert(ta->run_until(env, peer_cut, &peer, TA_TIMEOUT_MS));
  mcp_tstamp took = ta->now() - t0;
  /* Not before the grace of both adapters' listeners (1 s,
   * transport_grpc.c and transport_h2c.c; less the clocks' slack). A
   * lower bound only: a busy machine can only make it later. */
  ck_assert_uint_ge(took, 900 * MCP_MILLISECONDS);
  ck_assert(ta->run_until(env, closed_1, &so, TA_TIMEOUT_MS));
  seen s = seen_get(&so);
  ck_assert_int_eq(s.closed, 1);
  /* What the application hears differs (a finding of the move from
   * test_grpc_shutdown.c; ta_transport.ends_streams_at_del): gRPC core
   * keeps the call until the grace, then cancels it; h2c ends every
   * stream for the application in *_del() (transport-h2c/src/ep.c) and
   * drains the connection behind it until the grace. */
  if (ta->ends_streams_at_del) {
    ck_assert_int_eq(s.last_status, MCP_CODE_UNAVAILABLE);
    ck_assert_str_eq(s.last_details, "server shutting down");
  } else {
    ck_assert_int_eq(s.last_status, MCP_CODE_CANCELLED);
  }
  close(peer.fd);
  ta->env_del(env);
  pthread_mutex_destroy(&so.mu);
  mcp_store_del(store);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("transport_shutdown");
  TCase *tc = tcase_create("shutdown");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, open_streams_end_unavailable_at_once_on_shutdown);
  tcase_add_test(tc, a_stuck_stream_is_cut_off_after_the_grace);
  tcase_add_test(tc, del_runs_the_queued_updates_first);
  tcase_add_test(tc, a_port_in_use_reports_eaddrinuse_and_writes_nothing);
  tcase_add_test(tc,
                 a_foreign_address_reports_eaddrnotavail_and_writes_nothing);
  tcase_add_test(tc, a_unix_socket_path_reports_errno_and_writes_nothing);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN); /* libuv writes with write(2) */
  ta = &TA_ADAPTER;
  int failed = ta_run(suite());
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
