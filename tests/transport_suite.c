/*
 * What the transport suite's files share (tests/transport_suite.h): the
 * transport under test and the world most tests start from.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "helper.h"
#include "mem_count.h"
#include "test_certs.h"
#include "transport_suite.h"

const ta_transport *ta;

static const char *const colls[] = {"c1"};

#define BIG (64 << 10)

/* Runs |s| (and frees it); returns how many of its tests failed. */
int ta_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed;
}

int ta_main(const ta_transport *t, Suite *(*make)(void)) {
  signal(SIGPIPE, SIG_IGN); /* libuv writes with write(2) */
  ta = t;
  if (test_tls_mode() && ta_certs_make() != 0)
    return EXIT_FAILURE;
  int failed = ta_run(make());
  if (test_tls_mode())
    ta_certs_remove();
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* ---- certificates ---- */

/* test_certs.h keeps its directory in a static of the file that includes
 * it: this file's is the suite's one. */
int ta_certs_make(void) { return test_certs_make(); }
void ta_certs_remove(void) { test_certs_remove(); }
const char *ta_cert(const char *name) { return test_cert(name); }

/* ---- the shared world ---- */

static void note_item(const char *name, const char *version, void *ud) {
  ta_world *w = ud;
  ck_assert_int_lt(w->n, 4);
  snprintf(w->name[w->n], sizeof(w->name[0]), "%s", name);
  snprintf(w->version[w->n], sizeof(w->version[0]), "%s", version);
  w->n++;
}

void ta_world_init(ta_world *w) {
  memset(w, 0, sizeof(*w));
  w->env = ta->env_new();
  w->store = th_store(NULL);
  ck_assert_ptr_nonnull(w->store);
  mcp_tstamp now = ta->now();
  th_put(w->store, "c1", "a", "1", "alpha", now);
  th_put_big(w->store, "c1", "big", "1", BIG, 'x', now);
  mcp_store_foreach(w->store, "c1", note_item, w);
  ck_assert_int_eq(w->n, 2);
  w->state = ta_sink_state("sink-1");
}

void ta_world_fini(ta_world *w) {
  if (w->sink)
    ta->del(w->sink);
  if (w->src)
    ta->del(w->src);
  ta->env_del(w->env);
  mcp_sink_state_del(w->state);
  mcp_store_del(w->store);
}

ta_opts ta_opts_for(int listen, const char *address, const mcp_mem *mem) {
  ta_opts o;
  memset(&o, 0, sizeof(o));
  o.version = ta->options_version;
  o.listen = listen;
  o.address = address;
  o.mem = mem;
  if (test_tls_mode()) {
    o.cert_file = ta_cert(listen ? "server.pem" : "client.pem");
    o.key_file = ta_cert(listen ? "server.key" : "client.key");
    o.ca_file = ta_cert("ca.pem");
  }
  return o;
}

void ta_start_source_with(ta_world *w, const ta_opts *o) {
  mcp_source_options so;
  mcp_source_options_default(&so);
  so.store = w->store;
  ck_assert_int_eq(ta->source_new(w->env, &w->src, o, &so), 0);
  ck_assert_int_gt(ta->port(w->src), 0);
  snprintf(w->addr, sizeof(w->addr), "127.0.0.1:%d", ta->port(w->src));
}

void ta_start_source(ta_world *w, const mcp_mem *mem) {
  ta_opts o = ta_opts_for(1, "127.0.0.1:0", mem);
  ta_start_source_with(w, &o);
}

void ta_start_sink(ta_world *w, const mcp_mem *mem) {
  ta_opts o = ta_opts_for(0, w->addr, mem);
  ck_assert_int_eq(ta->sink_new(w->env, &w->sink, &o, w->state), 0);
}

typedef struct snap {
  const ta_world *w;
  int n, synced, equal;
} snap;

static void snap_item(const char *name, const char *version, void *ud) {
  snap *s = ud;
  int found = 0;
  for (int i = 0; i < s->w->n; i++)
    found |= strcmp(s->w->name[i], name) == 0 &&
             strcmp(s->w->version[i], version) == 0;
  s->equal &= found;
  s->n++;
}

static void snap_state(mcp_sink_state *st, mcp_tstamp ts, void *ud) {
  (void)ts;
  snap *s = ud;
  s->n = 0;
  s->equal = 1;
  mcp_sink_state_foreach(st, "c1", snap_item, s);
  s->synced = mcp_sink_state_synced(st);
}

int ta_synced(void *ud) {
  ta_world *w = ud;
  snap s = {.w = w};
  ck_assert_int_eq(ta->sink_call(w->sink, snap_state, &s), 0);
  return s.synced && s.equal && s.n == w->n;
}

static int live_zero(void *ud) { return tm_get(ud).live == 0; }

int ta_balanced(void *tm) {
  if (!ta->settled(live_zero, tm))
    return 0;
  tm_counts c = tm_get(tm);
  return c.allocs == c.frees;
}

int ta_open_unsupported(void *ud, const mcp_peer_info *peer, mcp_tstamp ts,
                        mcp_stream **pst) {
  (void)ud;
  (void)peer;
  (void)ts;
  (void)pst;
  return MCP_ERR_UNSUPPORTED;
}

/* ---- test_transport_tls ---- */

mcp_sink_state *ta_sink_state(const char *node_id) {
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  so.node_id = node_id;
  so.collections = colls;
  so.ncollections = 1;
  mcp_sink_state *st = NULL;
  ck_assert_int_eq(mcp_sink_state_new(&st, &so), 0);
  return st;
}

/* ---- busy ports ---- */

int ta_hold_port(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  ck_assert_int_eq(listen(fd, 1), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  *port = ntohs(sa.sin_port);
  return fd;
}
