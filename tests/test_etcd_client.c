/* The etcd client against a real etcd (Debian's etcd-server), one member on
 * loopback ports with a temporary data directory, started per test. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "etcd/etcd.h"
#include "test_exit_probe.h"

extern char **environ;

typedef struct member {
  pid_t pid;
  int client_port, peer_port;
  char dir[64];
  char endpoint[32];
} member;

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void start(member *m) {
  const char *etcd = getenv("MCP_ETCD");
  ck_assert_ptr_nonnull(etcd);
  strcpy(m->dir, "/tmp/mcp-etcd-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(m->dir));
  m->client_port = free_port();
  m->peer_port = free_port();
  snprintf(m->endpoint, sizeof m->endpoint, "127.0.0.1:%d", m->client_port);
  char data[96], client[64], peer[64], cluster[96], log[96];
  snprintf(data, sizeof data, "%s/data", m->dir);
  snprintf(client, sizeof client, "http://127.0.0.1:%d", m->client_port);
  snprintf(peer, sizeof peer, "http://127.0.0.1:%d", m->peer_port);
  snprintf(cluster, sizeof cluster, "t=%s", peer);
  snprintf(log, sizeof log, "%s/etcd.log", m->dir);
  char *argv[] = {(char *)etcd, "--name", "t", "--data-dir", data,
                  "--listen-client-urls", client, "--advertise-client-urls",
                  client, "--listen-peer-urls", peer,
                  "--initial-advertise-peer-urls", peer, "--initial-cluster",
                  cluster, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  ck_assert_int_eq(posix_spawn(&m->pid, etcd, &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  /* Ready when a Range answers. */
  mcpetcd_options o = {.endpoints = m->endpoint, .timeout_ms = 500};
  mcpetcd *c;
  ck_assert_int_eq(mcpetcd_new(&c, &o, NULL, 0), 0);
  double t0 = now_s();
  for (;;) {
    mcpetcd_kvs kvs;
    if (!mcpetcd_get_prefix(c, "/ready", 0, &kvs)) {
      mcpetcd_kvs_free(&kvs);
      break;
    }
    ck_assert_msg(now_s() - t0 < 30, "etcd did not start: %s",
                  mcpetcd_last_error(c));
    sleep_ms(50);
  }
  mcpetcd_free(c);
}

static void kill_member(member *m) {
  if (m->pid > 0) {
    kill(m->pid, SIGKILL);
    waitpid(m->pid, NULL, 0);
    m->pid = 0;
  }
}

static void stop(member *m) {
  kill_member(m);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", m->dir);
  ck_assert_int_eq(system(cmd), 0);
}

static mcpetcd *client(const char *endpoints, int64_t page) {
  mcpetcd_options o = {.endpoints = endpoints, .timeout_ms = 2000,
                       .page_size = page};
  mcpetcd *c;
  ck_assert_int_eq(mcpetcd_new(&c, &o, NULL, 0), 0);
  return c;
}

static void put(mcpetcd *c, const char *key, const char *value, int64_t *rev) {
  mcpetcd_op op = {key, (const uint8_t *)value, strlen(value)};
  ck_assert_int_eq(mcpetcd_txn(c, &op, 1, rev), 0);
}

START_TEST(test_etcd_txn_then_range_reads_one_snapshot_in_pages) {
  member m;
  start(&m);
  mcpetcd *c = client(m.endpoint, 2); /* pages of 2: 3 pages for 5 keys */
  mcpetcd_op ops[] = {
      {"/mcp/a/1", (const uint8_t *)"one", 3},
      {"/mcp/a/2", (const uint8_t *)"two", 3},
      {"/mcp/b/3", (const uint8_t *)"", 0},
      {"/mcp/b/4", (const uint8_t *)"four", 4},
      {"/mcp/c/5", (const uint8_t *)"five", 4},
      {"/other/x", (const uint8_t *)"not ours", 8},
  };
  int64_t rev = 0;
  ck_assert_int_eq(mcpetcd_txn(c, ops, 6, &rev), 0);
  ck_assert_int_gt(rev, 1);
  /* A write after the snapshot began is not in it. */
  mcpetcd_kvs kvs;
  ck_assert_int_eq(mcpetcd_get_prefix(c, "/mcp/", 0, &kvs), 0);
  ck_assert_int_eq(kvs.revision, rev);
  ck_assert_uint_eq(kvs.n, 5);
  ck_assert_str_eq(kvs.kvs[0].key, "/mcp/a/1");
  ck_assert_str_eq(kvs.kvs[4].key, "/mcp/c/5");
  ck_assert_uint_eq(kvs.kvs[2].value_len, 0);
  ck_assert_int_eq(memcmp(kvs.kvs[3].value, "four", 4), 0);
  for (size_t i = 0; i < kvs.n; ++i)
    ck_assert_int_eq(kvs.kvs[i].mod_revision, rev); /* one transaction */
  mcpetcd_kvs_free(&kvs);

  int64_t rev2;
  mcpetcd_op del = {"/mcp/a/1", NULL, 0};
  ck_assert_int_eq(mcpetcd_txn(c, &del, 1, &rev2), 0);
  ck_assert_int_eq(rev2, rev + 1);
  /* Reading at the old revision still sees it: the snapshot of R. */
  ck_assert_int_eq(mcpetcd_get_prefix(c, "/mcp/", rev, &kvs), 0);
  ck_assert_uint_eq(kvs.n, 5);
  mcpetcd_kvs_free(&kvs);
  ck_assert_int_eq(mcpetcd_get_prefix(c, "/mcp/", 0, &kvs), 0);
  ck_assert_uint_eq(kvs.n, 4);
  ck_assert_int_eq(kvs.revision, rev2);
  mcpetcd_kvs_free(&kvs);
  /* A revision etcd has not reached yet. */
  ck_assert_int_eq(mcpetcd_get_prefix(c, "/mcp/", rev2 + 100, &kvs),
                   MCPETCD_ERR_FUTURE_REV);
  ck_assert_uint_eq(kvs.n, 0);
  mcpetcd_free(c);
  stop(&m);
}
END_TEST

typedef struct seen {
  pthread_mutex_t mu;
  char log[4096];
  int64_t last_revision;
  int batches;
} seen;

static int on_events(const mcpetcd_event *evs, size_t n, int64_t revision,
                     void *ud) {
  seen *s = ud;
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < n; ++i) {
    char line[256];
    snprintf(line, sizeof line, "%s %s=%.*s@%lld\n",
             evs[i].is_delete ? "DEL" : "PUT", evs[i].kv.key,
             (int)evs[i].kv.value_len, (const char *)evs[i].kv.value,
             (long long)evs[i].kv.mod_revision);
    strncat(s->log, line, sizeof s->log - strlen(s->log) - 1);
  }
  s->last_revision = revision;
  ++s->batches;
  pthread_mutex_unlock(&s->mu);
  return 0;
}

typedef struct watch_run {
  mcpetcd *c;
  int64_t start;
  seen s;
  int rv;
  int64_t compact;
} watch_run;

static void *watch_thread(void *arg) {
  watch_run *w = arg;
  w->rv = mcpetcd_watch(w->c, "/mcp/", w->start, on_events, &w->s,
                        &w->compact);
  return NULL;
}

static void wait_revision(watch_run *w, int64_t rev) {
  double t0 = now_s();
  for (;;) {
    pthread_mutex_lock(&w->s.mu);
    int64_t got = w->s.last_revision;
    pthread_mutex_unlock(&w->s.mu);
    if (got >= rev)
      return;
    ck_assert_msg(now_s() - t0 < 20, "watch stuck at %lld, want %lld",
                  (long long)got, (long long)rev);
    sleep_ms(10);
  }
}

START_TEST(test_etcd_watch_sees_every_change_in_order_from_start) {
  member m;
  start(&m);
  mcpetcd *c = client(m.endpoint, 0), *wc = client(m.endpoint, 0);
  int64_t r1, r2, r3;
  put(c, "/mcp/k/a", "1", &r1);
  watch_run w = {.c = wc, .start = r1 + 1};
  pthread_mutex_init(&w.s.mu, NULL);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, watch_thread, &w), 0);
  put(c, "/mcp/k/b", "2", &r2);
  put(c, "/elsewhere", "x", NULL); /* outside the prefix: not seen */
  mcpetcd_op two[] = {{"/mcp/k/a", NULL, 0},
                      {"/mcp/k/c", (const uint8_t *)"3", 1}};
  ck_assert_int_eq(mcpetcd_txn(c, two, 2, &r3), 0);
  wait_revision(&w, r3);
  mcpetcd_watch_cancel(wc);
  pthread_join(t, NULL);
  ck_assert_int_eq(w.rv, MCPETCD_ERR_CANCELLED);
  char want[512];
  snprintf(want, sizeof want, "PUT /mcp/k/b=2@%lld\nDEL /mcp/k/a=@%lld\n"
                              "PUT /mcp/k/c=3@%lld\n",
           (long long)r2, (long long)r3, (long long)r3);
  ck_assert_str_eq(w.s.log, want);
  /* Cancelled stays cancelled until reset: no watch can slip in between. */
  ck_assert_int_eq(mcpetcd_watch(wc, "/mcp/", 1, on_events, &w.s, NULL),
                   MCPETCD_ERR_CANCELLED);
  mcpetcd_watch_reset(wc);
  pthread_mutex_destroy(&w.s.mu);
  mcpetcd_free(c);
  mcpetcd_free(wc);
  stop(&m);
}
END_TEST

START_TEST(test_etcd_compacted_revision_is_reported_not_skipped) {
  member m;
  start(&m);
  mcpetcd *c = client(m.endpoint, 0);
  int64_t r1, r2;
  put(c, "/mcp/k/a", "1", &r1);
  put(c, "/mcp/k/a", "2", &r2);
  put(c, "/mcp/k/a", "3", NULL);
  ck_assert_int_eq(mcpetcd_compact(c, r2 + 1), 0);
  mcpetcd_kvs kvs;
  ck_assert_int_eq(mcpetcd_get_prefix(c, "/mcp/", r1, &kvs),
                   MCPETCD_ERR_COMPACTED);
  ck_assert_ptr_nonnull(strstr(mcpetcd_last_error(c), "compacted"));
  int64_t compact = 0;
  seen s = {0};
  pthread_mutex_init(&s.mu, NULL);
  ck_assert_int_eq(mcpetcd_watch(c, "/mcp/", r1, on_events, &s, &compact),
                   MCPETCD_ERR_COMPACTED);
  ck_assert_int_eq(compact, r2 + 1);
  ck_assert_int_eq(s.batches, 0); /* nothing delivered from a gap */
  pthread_mutex_destroy(&s.mu);
  mcpetcd_free(c);
  stop(&m);
}
END_TEST

START_TEST(test_etcd_dead_endpoint_is_skipped_and_counted) {
  member m;
  start(&m);
  char eps[96];
  int dead = free_port(); /* nothing listens there */
  snprintf(eps, sizeof eps, "127.0.0.1:%d,http://%s", dead, m.endpoint);
  mcpetcd *c = client(eps, 0);
  char first[32];
  snprintf(first, sizeof first, "127.0.0.1:%d", dead);
  ck_assert_str_eq(mcpetcd_endpoint(c), first);
  int64_t rev;
  put(c, "/mcp/k/a", "1", &rev);
  ck_assert_uint_eq(mcpetcd_failovers(c), 1);
  ck_assert_str_eq(mcpetcd_endpoint(c), m.endpoint);
  /* Every member down: an error within the timeouts, not a hang. */
  kill_member(&m);
  double t0 = now_s();
  mcpetcd_kvs kvs;
  ck_assert_int_eq(mcpetcd_get_prefix(c, "/mcp/", 0, &kvs),
                   MCPETCD_ERR_UNAVAILABLE);
  ck_assert_double_lt(now_s() - t0, 2 * 2.0 + 5);
  mcpetcd_free(c);
  stop(&m);
}
END_TEST

START_TEST(test_etcd_watch_ends_unavailable_when_member_dies) {
  member m;
  start(&m);
  mcpetcd *c = client(m.endpoint, 0), *wc = client(m.endpoint, 0);
  int64_t r1;
  put(c, "/mcp/k/a", "1", &r1);
  watch_run w = {.c = wc, .start = r1};
  pthread_mutex_init(&w.s.mu, NULL);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, watch_thread, &w), 0);
  wait_revision(&w, r1);
  kill_member(&m);
  pthread_join(t, NULL);
  ck_assert_int_eq(w.rv, MCPETCD_ERR_UNAVAILABLE);
  ck_assert_uint_eq(mcpetcd_failovers(wc), 1);
  pthread_mutex_destroy(&w.s.mu);
  mcpetcd_free(c);
  mcpetcd_free(wc);
  stop(&m);
}
END_TEST

START_TEST(test_etcd_bad_options_are_refused_with_a_reason) {
  mcpetcd *c = NULL;
  char err[256];
  mcpetcd_options o = {.endpoints = "no-port"};
  ck_assert_int_eq(mcpetcd_new(&c, &o, err, sizeof err),
                   MCPETCD_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err, "no-port"));
  o.endpoints = "127.0.0.1:1,";
  ck_assert_int_eq(mcpetcd_new(&c, &o, err, sizeof err), 0);
  mcpetcd_free(c);
  c = NULL;
  o.endpoints = "127.0.0.1:1";
  o.ca_file = "/nonexistent/ca.pem";
  ck_assert_int_eq(mcpetcd_new(&c, &o, err, sizeof err), MCPETCD_ERR_IO);
  ck_assert_ptr_nonnull(strstr(err, "/nonexistent/ca.pem"));
  o.cert_file = "/nonexistent/cert.pem"; /* a certificate without key */
  ck_assert_int_eq(mcpetcd_new(&c, &o, err, sizeof err),
                   MCPETCD_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(c);
}
END_TEST

/* A client made, then OpenSSL first used by someone else (as gRPC does at
 * its first TLS connection), then the client freed. */
static int client_then_openssl(void *ud) {
  (void)ud;
  mcpetcd *c = NULL;
  mcpetcd_options o = {.endpoints = "127.0.0.1:1"};
  if (mcpetcd_new(&c, &o, NULL, 0) != 0)
    return -1;
  /* What gRPC's first TLS use does (a bare init registers nothing). */
  if (OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG, NULL) != 1)
    return -1;
  mcpetcd_free(c);
  return 0;
}

/* The client asks OpenSSL to leave its clean-up at exit to the system, as
 * the gRPC transport does: gRPC's late clean-up thread (TLS to etcd) may
 * outlive the exit (docs/api.md, "OpenSSL at exit"). */
START_TEST(test_etcd_client_leaves_openssl_up_at_exit) {
  ck_assert_int_eq(test_exit_keeps_openssl_up(client_then_openssl, NULL), 0);
}
END_TEST

static void etcdctl(const member *m, const char *args) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "etcdctl --endpoints=%s %s >/dev/null 2>&1",
           m->endpoint, args);
  ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
}

START_TEST(test_etcd_user_password_authenticates_and_wrong_one_is_denied) {
  member m;
  start(&m);
  etcdctl(&m, "user add root:rootpw");
  etcdctl(&m, "auth enable");
  char eps[64];
  snprintf(eps, sizeof eps, "%s", m.endpoint);
  mcpetcd_options o = {.endpoints = eps, .user = "root",
                       .password = "rootpw", .timeout_ms = 2000};
  mcpetcd *c;
  ck_assert_int_eq(mcpetcd_new(&c, &o, NULL, 0), 0);
  int64_t rev;
  put(c, "/mcp/k/a", "1", &rev);
  mcpetcd_kvs kvs;
  ck_assert_int_eq(mcpetcd_get_prefix(c, "/mcp/", 0, &kvs), 0);
  ck_assert_uint_eq(kvs.n, 1);
  mcpetcd_kvs_free(&kvs);
  mcpetcd_free(c);

  o.password = "wrong";
  ck_assert_int_eq(mcpetcd_new(&c, &o, NULL, 0), 0);
  ck_assert_int_eq(mcpetcd_get_prefix(c, "/mcp/", 0, &kvs),
                   MCPETCD_ERR_DENIED);
  ck_assert_ptr_nonnull(strstr(mcpetcd_last_error(c), "authentication"));
  mcpetcd_free(c);

  o.user = NULL; /* no credentials at all */
  ck_assert_int_eq(mcpetcd_new(&c, &o, NULL, 0), 0);
  int rv = mcpetcd_get_prefix(c, "/mcp/", 0, &kvs);
  ck_assert_msg(rv == MCPETCD_ERR_DENIED, "%d: %s", rv, mcpetcd_last_error(c));
  mcpetcd_free(c);
  stop(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("etcd_client");
  TCase *tc = tcase_create("etcd");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_etcd_bad_options_are_refused_with_a_reason);
  tcase_add_test(tc, test_etcd_client_leaves_openssl_up_at_exit);
  tcase_add_test(tc, test_etcd_txn_then_range_reads_one_snapshot_in_pages);
  tcase_add_test(tc, test_etcd_watch_sees_every_change_in_order_from_start);
  tcase_add_test(tc, test_etcd_compacted_revision_is_reported_not_skipped);
  tcase_add_test(tc, test_etcd_dead_endpoint_is_skipped_and_counted);
  tcase_add_test(tc, test_etcd_watch_ends_unavailable_when_member_dies);
  tcase_add_test(tc,
                 test_etcd_user_password_authenticates_and_wrong_one_is_denied);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
