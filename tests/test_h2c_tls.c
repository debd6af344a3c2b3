/*
 * What of TLS only the h2c transport can be tested for (the rest,
 * handshakes, identities, access lists, admission by identity and rotated
 * certificates, is tests/test_transport_tls.c, run over every transport
 * with TLS). Each, and why it is h2c's:
 * - mcp_h2c_tls_check()'s messages: h2c's own API (gRPC's is
 *   mcp_grpc_tls_check(), tests/transport_grpc.c);
 * - a handshake flood bounded at accept, a client or a server gone
 *   mid-handshake, garbage for a ClientHello: h2c's listener runs its own
 *   handshakes and counts them (gRPC core owns its handshakes and exposes
 *   no such limits or counters).
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h2c_harness.h"
#include "helper.h"
#include "mcp/h2c.h"

#include <openssl/ssl.h>

#include "test_certs.h"

#define cp test_cert

/* Certificate |leaf| (NULL: none) and CA |ca| (NULL: none). */
static void set_tls(mcp_h2c_options *o, const char *leaf, const char *ca) {
  char name[64];
  memset(&o->tls, 0, sizeof(o->tls));
  if (leaf) {
    snprintf(name, sizeof(name), "%s.pem", leaf);
    o->tls.cert_file = cp(name);
    snprintf(name, sizeof(name), "%s.key", leaf);
    o->tls.key_file = cp(name);
  }
  if (ca) {
    snprintf(name, sizeof(name), "%s.pem", ca);
    o->tls.ca_file = cp(name);
  }
}

static const char *const colls[] = {"c1"};

typedef struct env {
  uv_loop_t loop;
  mcp_store *store;
  mcp_sink_state *state;
  mcp_h2c_source *src;
  mcp_h2c_sink *sink;
  uint64_t seed;
  /* the listener's and the dialer's events */
  int opened[2], closed[2], refused[2];
  int last_status[2];
  char last_details[2][256];
  char ids[2][512]; /* the identities of the last OPENED, ' '-joined */
  int tls[2];
} env;

/* Which side an event came from: 0 the listener, 1 the dialer. */
typedef struct side {
  env *e;
  int i;
} side;
static side sides[2];

static void on_stream(mcp_h2c_stream_event ev, const mcp_h2c_stream_info *in,
                      void *ud) {
  side *sd = ud;
  env *e = sd->e;
  int k = sd->i;
  if (ev == MCP_H2C_STREAM_OPENED) {
    e->opened[k]++;
  } else if (ev == MCP_H2C_STREAM_REFUSED) {
    e->refused[k]++;
    e->last_status[k] = in->status;
  } else {
    e->closed[k]++;
    e->last_status[k] = in->status;
    snprintf(e->last_details[k], sizeof(e->last_details[k]), "%s",
             in->details);
  }
  if (ev != MCP_H2C_STREAM_CLOSED) {
    e->ids[k][0] = '\0';
    for (size_t j = 0; j < in->nidentities; j++) {
      size_t l = strlen(e->ids[k]);
      snprintf(e->ids[k] + l, sizeof(e->ids[k]) - l, "%s%s", j ? " " : "",
               in->identities[j]);
    }
    e->tls[k] = in->tls;
  }
}

static void env_init(env *e) {
  memset(e, 0, sizeof(*e));
  e->seed = 11;
  ck_assert_int_eq(uv_loop_init(&e->loop), 0);
  e->store = th_store(NULL);
  th_put(e->store, "c1", "a", "1", "A", mcp_h2c_now());
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.node_id = "sink-1";
  so.collections = colls;
  so.ncollections = 1;
  ck_assert_int_eq(mcp_sink_state_new(&e->state, &so), 0);
  for (int i = 0; i < 2; i++)
    sides[i] = (side){e, i};
}

static void env_fini(env *e) {
  mcp_h2c_source_del(e->src);
  mcp_h2c_sink_del(e->sink);
  h2t_loop_finish(&e->loop);
  mcp_sink_state_del(e->state);
  mcp_store_del(e->store);
}

static mcp_h2c_options options(env *e, mcp_h2c_mode mode, const char *addr,
                               int k) {
  mcp_h2c_options o;
  mcp_h2c_options_default(&o);
  o.mode = mode;
  o.address = addr;
  o.backoff.initial = 50 * MCP_MILLISECONDS;
  o.backoff.max = 200 * MCP_MILLISECONDS;
  o.rand = th_rand;
  o.rand_user_data = &e->seed;
  o.shutdown_grace = MCP_SECONDS;
  o.on_stream = on_stream;
  o.user_data = &sides[k];
  return o;
}

/* A source on |o| serving the env's store. */
static int source_with(env *e, const mcp_h2c_options *o) {
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = e->store;
  return mcp_h2c_source_new(&e->src, &e->loop, o, &so);
}

static int start_sink(env *e, mcp_h2c_mode mode, const char *addr,
                      const char *leaf, const char *ca, mcp_acl *acl,
                      const char *server_name) {
  mcp_h2c_options o = options(e, mode, addr, mode == MCP_H2C_DIAL);
  set_tls(&o, leaf, ca);
  o.tls.server_name = server_name;
  o.authorize = acl ? mcp_acl_authorize : NULL;
  o.authorize_user_data = acl;
  return mcp_h2c_sink_new(&e->sink, &e->loop, &o, e->state);
}

static char abuf[64];
static const char *loopback(int port) {
  snprintf(abuf, sizeof(abuf), "127.0.0.1:%d", port);
  return abuf;
}

static int synced(void *ud) {
  return mcp_sink_state_synced(((env *)ud)->state);
}
static int dial_closed(void *ud) { return ((env *)ud)->closed[1] >= 1; }

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

START_TEST(test_bad_files_are_clear_errors) {
  char err[256];
  mcp_h2c_tls_options t;
  memset(&t, 0, sizeof(t));
  t.cert_file = cp("missing.pem");
  t.key_file = cp("server.key");
  ck_assert_int_eq(mcp_h2c_tls_check(&t, 1, err, sizeof(err)), MCP_ERR_IO);
  ck_assert_msg(strstr(err, "cannot read") && strstr(err, "missing.pem") &&
                    strstr(err, "No such file"),
                "%s", err);
  const char *junk = cp("junk.pem");
  write_text(junk, "not a certificate\n");
  t.cert_file = junk;
  ck_assert_int_eq(mcp_h2c_tls_check(&t, 1, err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err, "no certificate in") != NULL, "%s", err);
  t.cert_file = cp("server.pem");
  t.key_file = cp("client.key");
  ck_assert_int_eq(mcp_h2c_tls_check(&t, 1, err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err, "does not match") != NULL, "%s", err);
  t.key_file = NULL;
  ck_assert_int_eq(mcp_h2c_tls_check(&t, 1, err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err, "needs its key") != NULL, "%s", err);
  memset(&t, 0, sizeof(t));
  t.ca_file = cp("ca.pem");
  ck_assert_int_eq(mcp_h2c_tls_check(&t, 1, err, sizeof(err)),
                   MCP_ERR_INVALID_ARGUMENT); /* a listener needs a cert */
  ck_assert_int_eq(mcp_h2c_tls_check(&t, 0, err, sizeof(err)), 0);

  /* *_new() fails the same way and leaves nothing on the loop. */
  env e;
  env_init(&e);
  mcp_h2c_options o = options(&e, MCP_H2C_LISTEN, "127.0.0.1:0", 0);
  o.tls.cert_file = junk;
  o.tls.key_file = cp("server.key");
  ck_assert_int_eq(source_with(&e, &o), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(e.src);
  env_fini(&e);
}
END_TEST

/* A raw TCP connection to the listener (it sends nothing). */
static int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(0x7f000001);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  return fd;
}

/* What the listener's counters must reach (at least), and whether all
 * its connections must be gone. */
typedef struct want {
  env *e;
  uint64_t refused, timeouts, failures, bytes;
  int no_connections;
} want;

static int stats_reached(void *ud) {
  want *w = ud;
  mcp_h2c_stats st;
  mcp_h2c_source_stats(w->e->src, &st);
  return st.refused_handshakes >= w->refused &&
         st.tls_handshake_timeouts >= w->timeouts &&
         st.tls_handshake_failures >= w->failures &&
         st.bytes_read >= w->bytes &&
         (!w->no_connections || st.connections == 0);
}

/* Connections that never start their handshake: beyond the per-address
 * limit they are closed at accept, the others when the handshake times
 * out; a healthy client then still gets through. */
START_TEST(test_handshake_flood_is_bounded) {
  env e;
  env_init(&e);
  mcp_h2c_options o = options(&e, MCP_H2C_LISTEN, "127.0.0.1:0", 0);
  set_tls(&o, "server", "ca");
  o.handshake_timeout_ms = 300;
  o.max_handshakes_per_peer = 4;
  ck_assert_int_eq(source_with(&e, &o), 0);
  int port = mcp_h2c_source_port(e.src);
  int fds[6];
  for (int i = 0; i < 6; i++)
    fds[i] = raw_connect(port);
  want w = {.e = &e, .refused = 2, .timeouts = 4};
  ck_assert(h2t_run_until(&e.loop, stats_reached, &w, 10000));
  mcp_h2c_stats st;
  mcp_h2c_source_stats(e.src, &st);
  ck_assert_uint_eq(st.refused_handshakes, 2);
  ck_assert_uint_eq(st.tls_handshake_timeouts, 4);
  ck_assert_uint_eq(st.handshaking, 0);
  for (int i = 0; i < 6; i++)
    close(fds[i]);
  ck_assert_int_eq(start_sink(&e, MCP_H2C_DIAL, loopback(port), "client",
                              "ca", NULL, NULL),
                   0);
  ck_assert(h2t_run_until(&e.loop, synced, &e, 10000));
  env_fini(&e);
}
END_TEST

/* The first bytes a real TLS client sends: its ClientHello. */
static size_t client_hello(uint8_t *buf, size_t cap) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  ck_assert_ptr_nonnull(ctx);
  SSL *ssl = SSL_new(ctx);
  ck_assert_ptr_nonnull(ssl);
  BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, rb, wb);
  SSL_set_connect_state(ssl);
  ck_assert_int_le(SSL_do_handshake(ssl), 0); /* waits for the server */
  int n = BIO_read(wb, buf, (int)cap);
  ck_assert_int_gt(n, 10);
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return (size_t)n;
}

static void listen_tls(env *e) {
  mcp_h2c_options o = options(e, MCP_H2C_LISTEN, "127.0.0.1:0", 0);
  set_tls(&o, "server", "ca");
  o.handshake_timeout_ms = 60000; /* never what ends these connections */
  ck_assert_int_eq(source_with(e, &o), 0);
}

/* No handshake is left in progress, none was completed, and a healthy
 * client then syncs. */
static void assert_clean_and_serving(env *e, int port) {
  mcp_h2c_stats st;
  mcp_h2c_source_stats(e->src, &st);
  ck_assert_uint_eq(st.handshaking, 0);
  ck_assert_uint_eq(st.tls_handshakes, 0);
  ck_assert_int_eq(start_sink(e, MCP_H2C_DIAL, loopback(port), "client",
                              "ca", NULL, NULL),
                   0);
  ck_assert(h2t_run_until(&e->loop, synced, e, 10000));
}

/* A client that sends half its ClientHello and vanishes: the listener
 * frees the connection and its handshake slot at once (no timeout), and
 * serves the next client. */
START_TEST(test_client_vanishing_mid_handshake_frees_its_slot) {
  env e;
  env_init(&e);
  listen_tls(&e);
  int port = mcp_h2c_source_port(e.src);
  uint8_t hello[4096];
  size_t n = client_hello(hello, sizeof(hello));
  int fd = raw_connect(port);
  ck_assert_int_eq(write(fd, hello, n / 2), (ssize_t)(n / 2));
  close(fd);
  want w = {.e = &e, .bytes = n / 2, .no_connections = 1};
  ck_assert(h2t_run_until(&e.loop, stats_reached, &w, 10000));
  mcp_h2c_stats st;
  mcp_h2c_source_stats(e.src, &st);
  ck_assert_uint_eq(st.tls_handshake_timeouts, 0);
  assert_clean_and_serving(&e, port);
  env_fini(&e);
}
END_TEST

/* Bytes that are no ClientHello (plain HTTP on the TLS port, and a TLS
 * record holding a handshake message that is not one): each is a failed
 * handshake, the connection is closed, and nothing else is disturbed. */
START_TEST(test_garbage_client_hello_is_a_failed_handshake) {
  static const char http[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  static const uint8_t bogus[] = {0x16, 0x03, 0x01, 0x00, 0x08, 0x01, 0x00,
                                  0x00, 0x04, 0xde, 0xad, 0xbe, 0xef};
  const struct {
    const void *p;
    size_t n;
  } sends[] = {{http, sizeof(http) - 1}, {bogus, sizeof(bogus)}};
  env e;
  env_init(&e);
  listen_tls(&e);
  int port = mcp_h2c_source_port(e.src);
  uint64_t bytes = 0;
  for (int i = 0; i < 2; i++) {
    int fd = raw_connect(port);
    ck_assert_int_eq(write(fd, sends[i].p, sends[i].n), (ssize_t)sends[i].n);
    bytes += sends[i].n;
    want w = {.e = &e, .bytes = bytes, .failures = (uint64_t)i + 1,
              .no_connections = 1};
    ck_assert(h2t_run_until(&e.loop, stats_reached, &w, 10000));
    /* The listener closed it: what is left to read ends (an alert at
     * most, never an HTTP answer). */
    uint8_t buf[512];
    ssize_t r, got = 0;
    while ((r = read(fd, buf + got, sizeof(buf) - (size_t)got)) > 0)
      got += r;
    ck_assert_int_eq(r, 0);
    ck_assert(got == 0 || buf[0] == 0x15); /* a TLS alert record */
    close(fd);
  }
  mcp_h2c_stats st;
  mcp_h2c_source_stats(e.src, &st);
  ck_assert_uint_eq(st.tls_handshake_failures, 2);
  assert_clean_and_serving(&e, port);
  env_fini(&e);
}
END_TEST

/* A server that reads the ClientHello and hangs up. */
typedef struct vanish {
  uv_tcp_t lis, peer;
  int accepted, read, closed;
} vanish;

static void vanish_alloc(uv_handle_t *h, size_t size, uv_buf_t *b) {
  (void)h;
  static char buf[4096];
  (void)size;
  *b = uv_buf_init(buf, sizeof(buf));
}

static void vanish_closed(uv_handle_t *h) {
  vanish *v = h->data;
  v->closed++;
}

static void vanish_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  (void)b;
  vanish *v = st->data;
  if (n == 0)
    return;
  v->read = n > 0;
  uv_read_stop(st);
  uv_close((uv_handle_t *)st, vanish_closed);
}

static void vanish_conn(uv_stream_t *lis, int status) {
  vanish *v = lis->data;
  if (status < 0 || v->accepted)
    return;
  uv_tcp_init(lis->loop, &v->peer);
  v->peer.data = v;
  ck_assert_int_eq(uv_accept(lis, (uv_stream_t *)&v->peer), 0);
  v->accepted = 1;
  uv_read_start((uv_stream_t *)&v->peer, vanish_alloc, vanish_read);
}

/* The dialer's handshake ends with the server gone: its stream closes
 * UNAVAILABLE as a failed handshake ("no TLS connection"), never a call. */
START_TEST(test_server_vanishing_mid_handshake_is_no_tls_connection) {
  env e;
  env_init(&e);
  vanish v;
  memset(&v, 0, sizeof(v));
  ck_assert_int_eq(uv_tcp_init(&e.loop, &v.lis), 0);
  v.lis.data = &v;
  struct sockaddr_in a;
  uv_ip4_addr("127.0.0.1", 0, &a);
  ck_assert_int_eq(uv_tcp_bind(&v.lis, (struct sockaddr *)&a, 0), 0);
  ck_assert_int_eq(uv_listen((uv_stream_t *)&v.lis, 8, vanish_conn), 0);
  int len = sizeof(a);
  ck_assert_int_eq(uv_tcp_getsockname(&v.lis, (struct sockaddr *)&a, &len), 0);
  ck_assert_int_eq(start_sink(&e, MCP_H2C_DIAL, loopback(ntohs(a.sin_port)),
                              "client", "ca", NULL, NULL),
                   0);
  ck_assert(h2t_run_until(&e.loop, dial_closed, &e, 10000));
  ck_assert(v.read);
  ck_assert_int_eq(e.last_status[1], MCP_CODE_UNAVAILABLE);
  ck_assert_msg(strncmp(e.last_details[1], "no TLS connection", 17) == 0,
                "details: %s", e.last_details[1]);
  uv_close((uv_handle_t *)&v.lis, NULL);
  env_fini(&e);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("h2c_tls");
  TCase *tc = tcase_create("tls");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_bad_files_are_clear_errors);
  tcase_add_test(tc, test_handshake_flood_is_bounded);
  tcase_add_test(tc, test_client_vanishing_mid_handshake_frees_its_slot);
  tcase_add_test(tc, test_garbage_client_hello_is_a_failed_handshake);
  tcase_add_test(tc, test_server_vanishing_mid_handshake_is_no_tls_connection);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (test_certs_make() != 0)
    return 1;
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  test_certs_remove();
  return failed ? 1 : 0;
}
