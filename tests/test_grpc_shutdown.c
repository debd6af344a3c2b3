/* Graceful shutdown: open streams are drained then ended, stuck ones are
 * cancelled after the grace period, nothing leaks (run under ASan). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_grpc_util.h"

static const char *const colls[] = {"c1"};

static int all_closed(void *ud) {
  tg_streams **k = ud;
  for (int i = 0; i < 3; i++)
    if (tg_streams_get(k[i]).closed < 1)
      return 0;
  return 1;
}

START_TEST(test_graceful_shutdown_with_open_streams) {
  mcp_store *store = tg_store();
  tg_put(store, "c1", "a", "alpha", mcp_grpc_now());
  tg_streams so, ko[3];
  tg_streams_init(&so);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &so);
  tg_source_opts(&sopts, store);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);

  mcp_sink_state *state[3];
  mcp_grpc_sink *sink[3];
  char addr[64];
  for (int i = 0; i < 3; i++) {
    tg_streams_init(&ko[i]);
    state[i] = tg_sink_state(colls, 1, i % 2);
    tg_dial_opts(&o, addr, sizeof(addr), mcp_grpc_source_port(src), &ko[i]);
    o.backoff.initial = 10 * MCP_SECONDS; /* no reconnection in this test */
    o.backoff.max = 10 * MCP_SECONDS;
    ck_assert_int_eq(mcp_grpc_sink_new(&sink[i], &o, state[i]), 0);
  }
  for (int i = 0; i < 3; i++) {
    tg_pair p = {src, NULL, sink[i], "c1"};
    ck_assert(tg_wait(tg_equal, &p, TG_TIMEOUT_MS));
  }

  mcp_tstamp t0 = mcp_grpc_now();
  mcp_grpc_source_del(src);
  /* Drained at once: the sinks read, nothing waits for the grace. */
  ck_assert_uint_lt(mcp_grpc_now() - t0, 900 * MCP_MILLISECONDS);
  ck_assert_int_eq(tg_streams_get(&so).closed, 3);
  tg_streams *k[3] = {&ko[0], &ko[1], &ko[2]};
  ck_assert(tg_wait(all_closed, k, TG_TIMEOUT_MS));
  for (int i = 0; i < 3; i++) {
    tg_streams s = tg_streams_get(&ko[i]);
    ck_assert_int_eq(s.last_status, GRPC_STATUS_UNAVAILABLE);
    ck_assert_str_eq(s.last_details, "server shutting down");
    mcp_grpc_sink_del(sink[i]);
    mcp_sink_state_del(state[i]);
  }
  mcp_store_del(store);
}
END_TEST

/* The first request a sink sends, as bytes (made by the core). */
static grpc_byte_buffer *first_request(void) {
  mcp_sink_state *st = tg_sink_state(colls, 1, 0);
  mcp_sink_session *ss = NULL;
  ck_assert_int_eq(mcp_sink_session_new(&ss, st, mcp_grpc_now()), 0);
  mcp_msg *msg = NULL;
  ck_assert_int_eq(mcp_sink_session_next(ss, &msg), 1);
  grpc_slice s = grpc_slice_malloc(mcp_msg_len(msg));
  mcp_msg_flatten(msg, GRPC_SLICE_START_PTR(s));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  mcp_msg_free(msg);
  mcp_sink_session_del(ss);
  mcp_sink_state_del(st);
  return bb;
}

static int opened_once(void *ud) { return tg_streams_get(ud).opened >= 1; }

static void any_sending(const mcp_grpc_stream_info *info, void *ud) {
  if (info->sending)
    *(int *)ud = 1;
}

/* A stream of |ud| (a source) holds a message gRPC has not sent in full. */
static int push_stuck(void *ud) {
  int sending = 0;
  ck_assert_int_ge(mcp_grpc_source_streams(ud, any_sending, &sending), 0);
  return sending;
}

START_TEST(test_stuck_stream_cancelled_after_grace) {
  /* A client that subscribes and then never reads: the push (larger than
   * any flow-control window) cannot complete, so the status cannot follow
   * it; the server cancels the call after the grace period. */
  mcp_store *store = tg_store();
  tg_put_big(store, "c1", "big", 16 << 20, mcp_grpc_now());
  tg_streams so;
  tg_streams_init(&so);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &so);
  o.shutdown_grace = 300 * MCP_MILLISECONDS;
  tg_source_opts(&sopts, store);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);

  grpc_init();
  char target[64];
  snprintf(target, sizeof(target), "127.0.0.1:%d", mcp_grpc_source_port(src));
  grpc_channel_credentials *cr = grpc_insecure_credentials_create();
  grpc_channel *ch = grpc_channel_create(target, cr, NULL);
  grpc_channel_credentials_release(cr);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  grpc_call *call = grpc_channel_create_call(
      ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
      grpc_slice_from_static_string(MCP_GRPC_RESOURCE_SOURCE_METHOD), NULL,
      gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  grpc_byte_buffer *req = first_request();
  grpc_metadata_array tm;
  grpc_metadata_array_init(&tm);
  grpc_status_code status = GRPC_STATUS_OK;
  grpc_slice det;
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = req;
  ck_assert_int_eq(grpc_call_start_batch(call, ops, 2, (void *)1, NULL),
                   GRPC_CALL_OK);
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[0].data.recv_status_on_client.trailing_metadata = &tm;
  ops[0].data.recv_status_on_client.status = &status;
  ops[0].data.recv_status_on_client.status_details = &det;
  ck_assert_int_eq(grpc_call_start_batch(call, ops, 1, (void *)2, NULL),
                   GRPC_CALL_OK);
  /* Wait until the server has the stream and its push is stuck in gRPC
   * (the stream reports a message handed over and not yet sent in full).
   * This client's own send batch only completes once the call is over. */
  ck_assert(tg_wait(opened_once, &so, TG_TIMEOUT_MS));
  ck_assert(tg_wait(push_stuck, src, TG_TIMEOUT_MS));

  mcp_tstamp t0 = mcp_grpc_now();
  mcp_grpc_source_del(src);
  mcp_tstamp took = mcp_grpc_now() - t0;
  /* At least the grace (less the clocks' slack), and the configured one:
   * well below the default grace, which a slow machine cannot reach. */
  ck_assert_uint_ge(took, 250 * MCP_MILLISECONDS);
  mcp_grpc_options d;
  mcp_grpc_options_default(&d);
  ck_assert_uint_gt(d.shutdown_grace, 10 * o.shutdown_grace);
  ck_assert_uint_lt(took, d.shutdown_grace);
  tg_streams s = tg_streams_get(&so);
  ck_assert_int_eq(s.closed, 1);
  ck_assert_int_eq(s.last_status, GRPC_STATUS_CANCELLED);

  /* This client, which reads nothing, may not notice the reset behind the
   * data it does not read: end its call from here. */
  grpc_call_cancel(call, NULL);
  gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                 gpr_time_from_millis(5000, GPR_TIMESPAN));
  for (int i = 0; i < 2; i++) {
    grpc_event ev = grpc_completion_queue_next(cq, dl, NULL);
    ck_assert_int_eq(ev.type, GRPC_OP_COMPLETE);
  }
  ck_assert_int_ne(status, GRPC_STATUS_OK);
  grpc_slice_unref(det);
  grpc_metadata_array_destroy(&tm);
  grpc_byte_buffer_destroy(req);
  grpc_call_unref(call);
  grpc_channel_destroy(ch);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL)
             .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(cq);
  grpc_shutdown();
  mcp_store_del(store);
}
END_TEST

static void put_n(mcp_store *st, mcp_tstamp ts, void *ud) {
  char name[16];
  snprintf(name, sizeof(name), "r%d", (int)(intptr_t)ud);
  tg_put(st, "c1", name, "x", ts);
}

START_TEST(test_del_runs_queued_updates_first) {
  mcp_store *store = tg_store();
  tg_streams so;
  tg_streams_init(&so);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &so);
  tg_source_opts(&sopts, store);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  for (intptr_t i = 0; i < 500; i++)
    ck_assert_int_eq(mcp_grpc_source_update(src, put_n, (void *)i), 0);
  mcp_grpc_source_del(src);
  ck_assert_uint_eq(mcp_store_count(store, "c1"), 500);
  mcp_store_del(store);
}
END_TEST

START_TEST(test_bind_failure_is_reported) {
  mcp_store *store = tg_store();
  tg_streams so;
  tg_streams_init(&so);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &so);
  tg_source_opts(&sopts, store);
  mcp_grpc_source *src = NULL, *dup = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", mcp_grpc_source_port(src));
  o.address = addr;
  errno = 0;
  ck_assert_int_eq(mcp_grpc_source_new(&dup, &o, &sopts), MCP_ERR_IO);
  ck_assert_int_eq(errno, EADDRINUSE);
  ck_assert_ptr_null(dup);
  mcp_grpc_source_del(src);
  mcp_store_del(store);
}
END_TEST

/* A plain socket listening on 127.0.0.1; its port in |*port|. */
static int hold_port(int *port) {
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

/* Runs mcp_grpc_*_new() on |addr| with stderr captured: the result, errno
 * after it, and whether anything was written to stderr. */
static int new_capturing(const char *addr, int sink, int *err, int *wrote) {
  fflush(stderr);
  FILE *tmp = tmpfile();
  ck_assert_ptr_nonnull(tmp);
  int saved = dup(2);
  ck_assert_int_ge(saved, 0);
  ck_assert_int_ge(dup2(fileno(tmp), 2), 0);
  mcp_grpc_options o;
  tg_listen_opts(&o, addr, NULL);
  o.on_stream = NULL;
  int rv;
  errno = 0;
  if (sink) {
    static const char *const c[] = {"c1"};
    mcp_sink_state *state = tg_sink_state(c, 1, 0);
    mcp_grpc_sink *k = NULL;
    rv = mcp_grpc_sink_new(&k, &o, state);
    *err = errno;
    ck_assert_ptr_null(k);
    mcp_sink_state_del(state);
  } else {
    mcp_store *store = tg_store();
    mcp_source_options sopts;
    tg_source_opts(&sopts, store);
    mcp_grpc_source *src = NULL;
    rv = mcp_grpc_source_new(&src, &o, &sopts);
    *err = errno;
    ck_assert_ptr_null(src);
    mcp_store_del(store);
  }
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  struct stat st;
  ck_assert_int_eq(fstat(fileno(tmp), &st), 0);
  *wrote = st.st_size > 0;
  fclose(tmp);
  return rv;
}

/* A first-time user's port in use: the errno, not "invalid argument" and
 * gRPC's raw error dump on stderr. Both roles. */
START_TEST(test_port_in_use_reports_eaddrinuse_without_grpc_dump) {
  int port;
  int fd = hold_port(&port);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  for (int sink = 0; sink <= 1; sink++) {
    int err, wrote;
    ck_assert_int_eq(new_capturing(addr, sink, &err, &wrote), MCP_ERR_IO);
    ck_assert_int_eq(err, EADDRINUSE);
    ck_assert_msg(!wrote, "something was written to stderr");
  }
  close(fd);
  /* Free again: the probe does not stand in the way. */
  mcp_store *store = tg_store();
  mcp_source_options sopts;
  tg_source_opts(&sopts, store);
  mcp_grpc_options o;
  tg_listen_opts(&o, addr, NULL);
  o.on_stream = NULL;
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
  ck_assert_int_eq(mcp_grpc_source_port(src), port);
  mcp_grpc_source_del(src);
  mcp_store_del(store);
}
END_TEST

/* An address of no local interface (TEST-NET-1): EADDRNOTAVAIL. */
START_TEST(test_foreign_address_reports_eaddrnotavail) {
  int err, wrote;
  ck_assert_int_eq(new_capturing("192.0.2.1:15010", 0, &err, &wrote),
                   MCP_ERR_IO);
  ck_assert_int_eq(err, EADDRNOTAVAIL);
  ck_assert_msg(!wrote, "something was written to stderr");
}
END_TEST

/* A unix socket in a directory that does not exist: ENOENT, no dump. One
 * that can be made is served, and again over the file left behind. */
START_TEST(test_unix_socket_path_reports_errno) {
  char dir[] = "/tmp/mcp-grpc-unix-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char addr[128];
  snprintf(addr, sizeof(addr), "unix:%s/missing/s.sock", dir);
  int err, wrote;
  ck_assert_int_eq(new_capturing(addr, 0, &err, &wrote), MCP_ERR_IO);
  ck_assert_int_eq(err, ENOENT);
  ck_assert_msg(!wrote, "something was written to stderr");
  snprintf(addr, sizeof(addr), "unix:%s/s.sock", dir);
  mcp_store *store = tg_store();
  mcp_source_options sopts;
  tg_source_opts(&sopts, store);
  mcp_grpc_options o;
  tg_listen_opts(&o, addr, NULL);
  o.on_stream = NULL;
  for (int i = 0; i < 2; i++) {
    mcp_grpc_source *src = NULL;
    ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);
    mcp_grpc_source_del(src);
  }
  mcp_store_del(store);
  snprintf(addr, sizeof(addr), "%s/s.sock", dir);
  unlink(addr);
  ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("grpc_shutdown");
  TCase *tc = tcase_create("shutdown");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, tg_reset, NULL);
  tcase_add_test(tc, test_graceful_shutdown_with_open_streams);
  tcase_add_test(tc, test_stuck_stream_cancelled_after_grace);
  tcase_add_test(tc, test_del_runs_queued_updates_first);
  tcase_add_test(tc, test_bind_failure_is_reported);
  tcase_add_test(tc, test_port_in_use_reports_eaddrinuse_without_grpc_dump);
  tcase_add_test(tc, test_foreign_address_reports_eaddrnotavail);
  tcase_add_test(tc, test_unix_socket_path_reports_errno);
  suite_add_tcase(s, tc);
  return tg_run(s);
}
