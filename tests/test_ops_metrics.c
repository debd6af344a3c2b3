/*
 * Tests of tools/ops/metrics.h (the registry and the Prometheus text
 * format) and of the metrics tools/ops/ops.h feeds from the core's events
 * and the transport's stream callbacks.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ops/buf.h"
#include "ops/metrics.h"
#include "ops/ops.h"
#include "util/grow.h"

static char *render(ops_metrics *m) {
  ops_buf b;
  ops_buf_init(&b);
  ck_assert_int_eq(ops_metrics_render(m, &b), 0);
  char *s = strdup(ops_buf_cstr(&b));
  ops_buf_free(&b);
  ck_assert_ptr_nonnull(s);
  return s;
}

static void assert_has(const char *text, const char *needle) {
  ck_assert_msg(strstr(text, needle) != NULL, "missing [%s] in:\n%s", needle,
                text);
}

static void assert_lacks(const char *text, const char *needle) {
  ck_assert_msg(strstr(text, needle) == NULL, "unexpected [%s] in:\n%s",
                needle, text);
}

/* ---- the registry and the format ---- */

START_TEST(test_counter_exposition_exact) {
  ops_metrics *m = ops_metrics_new();
  const char *const l[] = {"collection"};
  ops_metric *plain = ops_metrics_counter(m, "a_total", "Plain.", NULL, 0);
  ops_metric *lab = ops_metrics_counter(m, "b_total", "Labelled.", l, 1);
  ck_assert_ptr_nonnull(plain);
  ck_assert_ptr_nonnull(lab);
  char *s = render(m);
  /* The unlabelled series exists from the start, labelled ones do not. */
  ck_assert_str_eq(s, "# HELP a_total Plain.\n# TYPE a_total counter\n"
                      "a_total 0\n"
                      "# HELP b_total Labelled.\n# TYPE b_total counter\n");
  free(s);
  ops_metric_inc(plain, NULL);
  ops_metric_add(plain, NULL, 2.5);
  ops_metric_add(plain, NULL, -1); /* counters never go down */
  ops_metric_add(plain, NULL, NAN);
  const char *x[] = {"x"}, *y[] = {"y"};
  ops_metric_inc(lab, x);
  ops_metric_inc(lab, y);
  ops_metric_inc(lab, x);
  s = render(m);
  ck_assert_str_eq(s, "# HELP a_total Plain.\n# TYPE a_total counter\n"
                      "a_total 3.5\n"
                      "# HELP b_total Labelled.\n# TYPE b_total counter\n"
                      "b_total{collection=\"x\"} 2\n"
                      "b_total{collection=\"y\"} 1\n");
  free(s);
  ck_assert(ops_metric_value(lab, x) == 2);
  ck_assert(ops_metric_value(lab, (const char *[]){"z"}) == 0);
  ops_metrics_del(m);
}
END_TEST

START_TEST(test_const_labels_come_first) {
  ops_metrics *m = ops_metrics_new();
  ck_assert_int_eq(ops_metrics_const_label(m, "component", "mcp-sink"), 0);
  ck_assert_int_eq(ops_metrics_const_label(m, "component", "again"), -1);
  ck_assert_int_eq(ops_metrics_const_label(m, "le", "x"), -1);
  const char *const l[] = {"collection", "code"};
  ops_metric *f = ops_metrics_counter(m, "n_total", "h", l, 2);
  ops_metric *g = ops_metrics_gauge(m, "g", "h", NULL, 0);
  /* A constant label is not a family's label, and comes before them. */
  ck_assert_ptr_null(ops_metrics_counter(
      m, "dup_label_total", "h", (const char *const[]){"component"}, 1));
  ck_assert_int_eq(ops_metrics_const_label(m, "late", "x"), -1);
  ops_metric_inc(f, ((const char *[]){"c", "InvalidArgument"}));
  ops_metric_set(g, NULL, -2);
  char *s = render(m);
  assert_has(s, "n_total{component=\"mcp-sink\",collection=\"c\","
                "code=\"InvalidArgument\"} 1\n");
  assert_has(s, "g{component=\"mcp-sink\"} -2\n");
  free(s);
  ops_metrics_del(m);
}
END_TEST

START_TEST(test_escaping) {
  ops_metrics *m = ops_metrics_new();
  const char *const l[] = {"v"};
  ops_metric *f =
      ops_metrics_counter(m, "e_total", "a \\ back\nslash \"q\"", l, 1);
  ops_metric_inc(f, ((const char *[]){"a\\b\"c\nd"}));
  ops_metric_inc(f, ((const char *[]){"bad\xff utf8 \xc3\xa9"}));
  ops_metric_inc(f, ((const char *[]){""}));
  char *s = render(m);
  /* HELP: backslash and newline escaped, quotes not. */
  assert_has(s, "# HELP e_total a \\\\ back\\nslash \"q\"\n");
  /* Values: backslash, quote and newline escaped. */
  assert_has(s, "e_total{v=\"a\\\\b\\\"c\\nd\"} 1\n");
  /* Not UTF-8: U+FFFD; valid UTF-8 kept. */
  assert_has(s, "e_total{v=\"bad\xef\xbf\xbd utf8 \xc3\xa9\"} 1\n");
  assert_has(s, "e_total{v=\"\"} 1\n");
  free(s);
  ops_metrics_del(m);
}
END_TEST

START_TEST(test_histogram_buckets) {
  ops_metrics *m = ops_metrics_new();
  const double b[] = {1, 5, 10};
  ops_metric *h = ops_metrics_histogram(m, "h_seconds", "H.", NULL, 0, b, 3);
  ck_assert_ptr_nonnull(h);
  char *s = render(m);
  ck_assert_str_eq(s, "# HELP h_seconds H.\n# TYPE h_seconds histogram\n"
                      "h_seconds_bucket{le=\"1\"} 0\n"
                      "h_seconds_bucket{le=\"5\"} 0\n"
                      "h_seconds_bucket{le=\"10\"} 0\n"
                      "h_seconds_bucket{le=\"+Inf\"} 0\n"
                      "h_seconds_sum 0\nh_seconds_count 0\n");
  free(s);
  /* A bound is inclusive (le); cumulative counts. */
  ops_metric_observe(h, NULL, 0.5);
  ops_metric_observe(h, NULL, 1);
  ops_metric_observe(h, NULL, 3);
  ops_metric_observe(h, NULL, 10);
  ops_metric_observe(h, NULL, 11.5);
  ops_metric_observe(h, NULL, NAN); /* ignored */
  ops_metric_add(h, NULL, 1);       /* wrong type: ignored */
  s = render(m);
  ck_assert_str_eq(s, "# HELP h_seconds H.\n# TYPE h_seconds histogram\n"
                      "h_seconds_bucket{le=\"1\"} 2\n"
                      "h_seconds_bucket{le=\"5\"} 3\n"
                      "h_seconds_bucket{le=\"10\"} 4\n"
                      "h_seconds_bucket{le=\"+Inf\"} 5\n"
                      "h_seconds_sum 26\nh_seconds_count 5\n");
  free(s);
  ck_assert(ops_metric_value(h, NULL) == 5);
  ops_metrics_del(m);
}
END_TEST

START_TEST(test_histogram_labels_and_fractions) {
  ops_metrics *m = ops_metrics_new();
  ck_assert_int_eq(ops_metrics_const_label(m, "component", "c"), 0);
  const double b[] = {0.005, 0.25};
  const char *const l[] = {"collection"};
  ops_metric *h = ops_metrics_histogram(m, "lat", "L.", l, 1, b, 2);
  ops_metric_observe(h, ((const char *[]){"x"}), 0.1);
  char *s = render(m);
  assert_has(s, "lat_bucket{component=\"c\",collection=\"x\",le=\"0.005\"} 0\n");
  assert_has(s, "lat_bucket{component=\"c\",collection=\"x\",le=\"0.25\"} 1\n");
  assert_has(s, "lat_bucket{component=\"c\",collection=\"x\",le=\"+Inf\"} 1\n");
  assert_has(s, "lat_sum{component=\"c\",collection=\"x\"} 0.1\n");
  assert_has(s, "lat_count{component=\"c\",collection=\"x\"} 1\n");
  free(s);
  ops_metrics_del(m);
}
END_TEST

START_TEST(test_bad_registrations) {
  ops_metrics *m = ops_metrics_new();
  const double up[] = {1, 2}, down[] = {2, 1}, same[] = {1, 1},
               inf[] = {1, INFINITY};
  ck_assert_ptr_null(ops_metrics_counter(m, "", "h", NULL, 0));
  ck_assert_ptr_null(ops_metrics_counter(m, "9lives", "h", NULL, 0));
  ck_assert_ptr_null(ops_metrics_counter(m, "a-b", "h", NULL, 0));
  ck_assert_ptr_nonnull(ops_metrics_counter(m, "ns:ok_total", "h", NULL, 0));
  ck_assert_ptr_null(ops_metrics_gauge(m, "ns:ok_total", "dup", NULL, 0));
  ck_assert_ptr_null(ops_metrics_counter(
      m, "l1", "h", (const char *const[]){"__reserved"}, 1));
  ck_assert_ptr_null(ops_metrics_counter(
      m, "l2", "h", (const char *const[]){"a:b"}, 1));
  ck_assert_ptr_null(ops_metrics_counter(
      m, "l3", "h", (const char *const[]){"a", "a"}, 2));
  ck_assert_ptr_null(ops_metrics_counter(
      m, "l4", "h", (const char *const[]){"a", "b", "c", "d", "e"}, 5));
  ck_assert_ptr_null(ops_metrics_histogram(
      m, "h1", "h", (const char *const[]){"le"}, 1, up, 2));
  ck_assert_ptr_null(ops_metrics_histogram(m, "h2", "h", NULL, 0, down, 2));
  ck_assert_ptr_null(ops_metrics_histogram(m, "h3", "h", NULL, 0, same, 2));
  ck_assert_ptr_nonnull(ops_metrics_histogram(m, "h5", "h", NULL, 0, up, 2));
  ck_assert_ptr_null(ops_metrics_histogram(m, "h4", "h", NULL, 0, inf, 2));
  /* "le" is fine on counters. */
  ck_assert_ptr_nonnull(ops_metrics_counter(
      m, "l5", "h", (const char *const[]){"le"}, 1));
  /* Updates of a NULL family are no-ops. */
  ops_metric_inc(NULL, NULL);
  ops_metric_observe(NULL, NULL, 1);
  ops_metrics_del(m);
}
END_TEST

START_TEST(test_overflow_series) {
  ops_metrics *m = ops_metrics_new();
  ops_metrics_set_max_series(m, 2);
  const char *const l[] = {"collection", "code"};
  ops_metric *f = ops_metrics_counter(m, "o_total", "h", l, 2);
  ops_metric_inc(f, ((const char *[]){"a", "1"}));
  ops_metric_inc(f, ((const char *[]){"b", "1"}));
  ops_metric_inc(f, ((const char *[]){"c", "1"}));
  ops_metric_inc(f, ((const char *[]){"d", "2"}));
  ops_metric_inc(f, ((const char *[]){"a", "1"})); /* known: not overflow */
  char *s = render(m);
  assert_has(s, "o_total{collection=\"a\",code=\"1\"} 2\n");
  assert_has(s, "o_total{collection=\"b\",code=\"1\"} 1\n");
  assert_has(s, "o_total{collection=\"_other\",code=\"_other\"} 2\n");
  assert_lacks(s, "\"c\"");
  assert_lacks(s, "\"d\"");
  free(s);
  ops_metrics_del(m);
}
END_TEST

START_TEST(test_number_format) {
  char b[40];
  ck_assert_str_eq(ops_metrics_format_double(0, b, sizeof(b)), "0");
  ck_assert_str_eq(ops_metrics_format_double(-0.0, b, sizeof(b)), "0");
  ck_assert_str_eq(ops_metrics_format_double(42, b, sizeof(b)), "42");
  ck_assert_str_eq(ops_metrics_format_double(-3, b, sizeof(b)), "-3");
  ck_assert_str_eq(ops_metrics_format_double(0.1, b, sizeof(b)), "0.1");
  ck_assert_str_eq(ops_metrics_format_double(0.0025, b, sizeof(b)),
                   "0.0025");
  ck_assert_str_eq(ops_metrics_format_double(1073741824, b, sizeof(b)),
                   "1073741824");
  ck_assert_str_eq(ops_metrics_format_double(1e300, b, sizeof(b)), "1e+300");
  ck_assert_str_eq(ops_metrics_format_double(NAN, b, sizeof(b)), "NaN");
  ck_assert_str_eq(ops_metrics_format_double(INFINITY, b, sizeof(b)),
                   "+Inf");
  ck_assert_str_eq(ops_metrics_format_double(-INFINITY, b, sizeof(b)),
                   "-Inf");
  /* The shortest form that reads back the same. */
  double third = 1.0 / 3.0;
  ops_metrics_format_double(third, b, sizeof(b));
  ck_assert(strtod(b, NULL) == third);
}
END_TEST

/* Updates from several threads while another renders. */
typedef struct hammer_arg {
  ops_metric *c, *h;
  int id;
} hammer_arg;

static void *hammer(void *p) {
  hammer_arg *a = p;
  char name[16];
  snprintf(name, sizeof(name), "t%d", a->id % 2);
  const char *v[] = {name};
  for (int i = 0; i < 20000; i++) {
    ops_metric_inc(a->c, v);
    ops_metric_observe(a->h, NULL, (double)(i % 7));
  }
  return NULL;
}

START_TEST(test_concurrent_updates) {
  ops_metrics *m = ops_metrics_new();
  const char *const l[] = {"t"};
  const double b[] = {1, 3};
  ops_metric *c = ops_metrics_counter(m, "c_total", "h", l, 1);
  ops_metric *h = ops_metrics_histogram(m, "hh", "h", NULL, 0, b, 2);
  pthread_t th[4];
  hammer_arg args[4];
  for (int i = 0; i < 4; i++) {
    args[i] = (hammer_arg){c, h, i};
    ck_assert_int_eq(pthread_create(&th[i], NULL, hammer, &args[i]), 0);
  }
  for (int i = 0; i < 50; i++)
    free(render(m));
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  ck_assert(ops_metric_value(c, ((const char *[]){"t0"})) == 40000);
  ck_assert(ops_metric_value(c, ((const char *[]){"t1"})) == 40000);
  ck_assert(ops_metric_value(h, NULL) == 80000);
  ops_metrics_del(m);
}
END_TEST

/* ---- tools/ops/ops.h: events and streams into metrics ---- */

static tool_ops *new_ops(tool_ops_role role) {
  tool_ops_options o = {.role = role,
                        .component = role == TOOL_OPS_SINK ? "mcp-sink"
                                                           : "mcp-source"};
  tool_ops *ops = NULL;
  ck_assert_int_eq(tool_ops_new(&ops, &o), 0);
  return ops;
}

static double metric(tool_ops *ops, const char *sample) {
  char *s = render(tool_ops_metrics(ops));
  const char *p = s;
  double v = -1;
  size_t n = strlen(sample);
  while ((p = strstr(p, sample)) != NULL) {
    if ((p == s || p[-1] == '\n') && p[n] == ' ') {
      v = strtod(p + n + 1, NULL);
      break;
    }
    p += n;
  }
  free(s);
  return v;
}

static mcp_event event(mcp_event_type type, const char *collection) {
  mcp_event ev;
  memset(&ev, 0, sizeof(ev));
  ev.type = type;
  ev.collection = collection;
  ev.nonce = "1";
  ev.version = "v";
  ev.message = "";
  return ev;
}

static void stream(tool_ops *ops, int opened, uint64_t id, int dialed,
                   uint64_t received, int status) {
  tool_stream_info info = {.id = id,
                           .peer = "ipv4:127.0.0.1:1",
                           .dialed = dialed,
                           .received = received,
                           .status = status,
                           .details = ""};
  tool_ops_stream(ops, opened, &info);
}

#define SRC "{component=\"mcp-source\""
#define SNK "{component=\"mcp-sink\""

START_TEST(test_source_events) {
  tool_ops *ops = new_ops(TOOL_OPS_SOURCE);
  stream(ops, 1, 1, 0, 0, 0);
  stream(ops, 1, 2, 0, 0, 0);
  ck_assert(metric(ops, "istio_mcp_clients_total" SRC "}") == 2);
  mcp_event ev = event(MCP_EVENT_PUSH, "c1");
  tool_ops_event(ops, &ev);
  tool_ops_event(ops, &ev);
  ev = event(MCP_EVENT_ACK, "c1");
  ev.latency = 20 * MCP_MILLISECONDS;
  tool_ops_event(ops, &ev);
  ev = event(MCP_EVENT_NACK, "c1");
  ev.code = MCP_CODE_INVALID_ARGUMENT;
  tool_ops_event(ops, &ev);
  ev = event(MCP_EVENT_STALE, "c1");
  tool_ops_event(ops, &ev);
  ev = event(MCP_EVENT_UNKNOWN_COLLECTION, "nope");
  tool_ops_event(ops, &ev);
  ck_assert(metric(ops, "mcp_pushes_total" SRC ",collection=\"c1\"}") == 2);
  ck_assert(metric(ops, "istio_mcp_request_acks_total" SRC
                        ",collection=\"c1\"}") == 1);
  ck_assert(metric(ops, "istio_mcp_request_nacks_total" SRC
                        ",collection=\"c1\",code=\"InvalidArgument\"}") == 1);
  ck_assert(metric(ops, "mcp_stale_requests_total" SRC
                        ",collection=\"c1\"}") == 1);
  ck_assert(metric(ops, "mcp_push_ack_latency_seconds_bucket" SRC
                        ",le=\"0.01\"}") == 0);
  ck_assert(metric(ops, "mcp_push_ack_latency_seconds_bucket" SRC
                        ",le=\"0.025\"}") == 1);
  ck_assert(metric(ops, "mcp_push_ack_latency_seconds_count" SRC "}") == 1);
  /* One stream ends cleanly, one with UNAVAILABLE. */
  stream(ops, 0, 1, 0, 3, 0);
  stream(ops, 0, 2, 0, 3, 14);
  ck_assert(metric(ops, "istio_mcp_clients_total" SRC "}") == 0);
  ck_assert(metric(ops, "istio_mcp_recv_failures_total" SRC
                        ",code=\"14\"}") == 1);
  /* A client that exits cleanly cancels its call: no failure. */
  stream(ops, 1, 3, 0, 0, 0);
  stream(ops, 0, 3, 0, 3, MCP_CODE_CANCELLED);
  ck_assert(metric(ops, "istio_mcp_recv_failures_total" SRC
                        ",code=\"1\"}") == -1);
  ck_assert(metric(ops, "istio_mcp_clients_total" SRC "}") == 0);
  ck_assert(metric(ops, "mcp_streams_total" SRC "}") == 3);
  /* A listening source does not count reconnections. */
  ck_assert(metric(ops, "istio_mcp_reconnections" SRC "}") == 0);
  tool_ops_del(ops);
}
END_TEST

START_TEST(test_dialing_streams) {
  tool_ops *ops = new_ops(TOOL_OPS_SINK);
  /* An attempt that never connects: a send failure, no client. */
  stream(ops, 1, 1, 1, 0, 0);
  ck_assert(metric(ops, "istio_mcp_clients_total" SNK "}") == 0);
  stream(ops, 0, 1, 1, 0, 14);
  ck_assert(metric(ops, "istio_mcp_send_failures_total" SNK
                        ",code=\"14\"}") == 1);
  ck_assert(metric(ops, "mcp_streams_total" SNK "}") == 0);
  /* The next one gets answers: a client, not a reconnection (the first). */
  stream(ops, 1, 2, 1, 0, 0);
  mcp_event ev = event(MCP_EVENT_ACK, "c");
  tool_ops_event(ops, &ev);
  ev = event(MCP_EVENT_NACK, "$triggerCollection");
  ev.code = MCP_CODE_FAILED_PRECONDITION;
  tool_ops_event(ops, &ev);
  ck_assert(metric(ops, "istio_mcp_clients_total" SNK "}") == 1);
  ck_assert(metric(ops, "istio_mcp_reconnections" SNK "}") == 0);
  /* A sink counts the pushes it received, and the ACKs and NACKs it sent;
   * it has no latency (nor stale requests, nor bytes sent). */
  ck_assert(metric(ops, "mcp_pushes_total" SNK ",collection=\"c\"}") == 1);
  ck_assert(metric(ops, "istio_mcp_request_acks_total" SNK
                        ",collection=\"c\"}") == 1);
  ck_assert(metric(ops, "istio_mcp_request_nacks_total" SNK
                        ",collection=\"$triggerCollection\","
                        "code=\"FailedPrecondition\"}") == 1);
  ck_assert(metric(ops, "mcp_push_ack_latency_seconds_count" SNK "}") == -1);
  ck_assert(metric(ops, "mcp_sent_bytes_total" SNK "}") == -1);
  stream(ops, 0, 2, 1, 2, 14);
  ck_assert(metric(ops, "istio_mcp_clients_total" SNK "}") == 0);
  ck_assert(metric(ops, "istio_mcp_recv_failures_total" SNK
                        ",code=\"14\"}") == 1);
  /* The third connects: a reconnection (up on a message, without event). */
  stream(ops, 1, 3, 1, 0, 0);
  stream(ops, 0, 3, 1, 1, 1);
  ck_assert(metric(ops, "istio_mcp_reconnections" SNK "}") == 1);
  ck_assert(metric(ops, "mcp_streams_total" SNK "}") == 2);
  ck_assert(metric(ops, "istio_mcp_clients_total" SNK "}") == 0);
  ck_assert(metric(ops, "istio_mcp_recv_failures_total" SNK
                        ",code=\"1\"}") == 1);
  tool_ops_del(ops);
}
END_TEST

START_TEST(test_refused_calls) {
  tool_ops *ops = new_ops(TOOL_OPS_SOURCE);
  const char *ids[] = {"spiffe://cluster.local/ns/evil/sa/sink-b"};
  tool_stream_info info = {.id = 1,
                           .peer = "ipv4:127.0.0.1:1",
                           .status = 7,
                           .details = "permission denied",
                           .identities = ids,
                           .nidentities = 1};
  /* Before any refusal the family has no series. */
  ck_assert(metric(ops, "mcp_streams_refused_total" SRC ",code=\"7\"}") ==
            -1);
  tool_ops_refused(ops, &info);
  tool_ops_refused(ops, &info);
  info.status = 16;
  tool_ops_refused(ops, &info);
  ck_assert(metric(ops, "mcp_streams_refused_total" SRC ",code=\"7\"}") ==
            2);
  ck_assert(metric(ops, "mcp_streams_refused_total" SRC ",code=\"16\"}") ==
            1);
  /* A refused call is no stream: nothing else moves. */
  ck_assert(metric(ops, "istio_mcp_clients_total" SRC "}") == 0);
  ck_assert(metric(ops, "mcp_streams_total" SRC "}") == 0);
  tool_ops_refused(NULL, &info); /* no registry: a no-op */
  tool_ops_del(ops);
}
END_TEST

START_TEST(test_listening_sink_reconnections) {
  tool_ops *ops = new_ops(TOOL_OPS_SINK);
  stream(ops, 1, 1, 0, 0, 0);
  stream(ops, 1, 2, 0, 0, 0); /* replaces the first */
  stream(ops, 0, 1, 0, 1, 10);
  ck_assert(metric(ops, "istio_mcp_reconnections" SNK "}") == 1);
  ck_assert(metric(ops, "istio_mcp_clients_total" SNK "}") == 1);
  tool_ops_del(ops);
}
END_TEST

START_TEST(test_code_names) {
  char b[24];
  ck_assert_str_eq(tool_ops_code_name(0, b, sizeof(b)), "OK");
  ck_assert_str_eq(tool_ops_code_name(3, b, sizeof(b)), "InvalidArgument");
  ck_assert_str_eq(tool_ops_code_name(8, b, sizeof(b)), "ResourceExhausted");
  ck_assert_str_eq(tool_ops_code_name(16, b, sizeof(b)), "Unauthenticated");
  ck_assert_str_eq(tool_ops_code_name(17, b, sizeof(b)), "Code(17)");
  ck_assert_str_eq(tool_ops_code_name(-1, b, sizeof(b)), "Code(-1)");
}
END_TEST

/* ops_buf_json(|s|) is what jansson's json_dumps() writes of |s|. */
static void check_json_string(const char *s) {
  ops_buf b;
  ops_buf_init(&b);
  ck_assert_int_eq(ops_buf_json(&b, s), 0);
  json_t *j = json_string(s);
  ck_assert_ptr_nonnull(j);
  char *want = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
  ck_assert_str_eq(ops_buf_cstr(&b), want);
  free(want);
  json_decref(j);
  ops_buf_free(&b);
}

/* mcp-sink --json writes its response lines with ops_buf_json(): the
 * strings must come out exactly as jansson's json_dumps() wrote them. */
START_TEST(test_json_string_is_what_jansson_writes) {
  static const char *const cases[] = {
      "", "plain/name-1.2", "quote\" backslash\\ slash/",
      "\b\f\n\r\t\x01\x1f\x7f", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
      "ns/name@v1:type.googleapis.com/x.Y"};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    check_json_string(cases[i]);
  /* Eight bytes at a time (issue 25): each byte that needs care at each
   * place of a 24-byte string, in every word and at its edges. */
  static const char *const special[] = {"\"", "\\", "\x01", "\x1f", "\x7f",
                                        "\xc3\xa9", "\n"};
  for (size_t sp = 0; sp < sizeof special / sizeof *special; sp++)
    for (size_t at = 0; at < 24; at++) {
      char str[40];
      memset(str, 'a' + (int)(at % 26), sizeof(str));
      size_t k = strlen(special[sp]);
      memcpy(str + at, special[sp], k);
      str[24 + k] = '\0';
      check_json_string(str);
    }
  /* Not UTF-8 (jansson refuses it): each bad byte is U+FFFD. */
  ops_buf b;
  ops_buf_init(&b);
  ck_assert_int_eq(ops_buf_json(&b, "a\xff" "b\xc3"), 0);
  ck_assert_str_eq(ops_buf_cstr(&b), "\"a\\ufffdb\\ufffd\"");
  ops_buf_free(&b);
}
END_TEST

/* ops_buf grows through the engine's buffer and keeps its own rules: the
 * NUL after the content, the limit, the sticky failure. */
START_TEST(test_ops_buf_grows_and_keeps_its_limit_and_sticky_failure) {
  ops_buf b;
  ops_buf_init(&b);
  for (int i = 0; i < 1000; i++)
    ck_assert_int_eq(ops_buf_printf(&b, "%03d,", i % 1000), 0);
  ck_assert_uint_eq(b.len, 4000);
  ck_assert_uint_gt(b.cap, b.len); /* room for the NUL */
  ck_assert_int_eq(b.p[b.len], '\0');
  ck_assert(strncmp(b.p + 3996, "999,", 4) == 0);
  ops_buf_reset(&b);
  b.max = 10;
  ck_assert_int_eq(ops_buf_str(&b, "0123456789"), 0);
  ck_assert_int_eq(ops_buf_str(&b, "x"), -1); /* over the limit */
  ck_assert_int_eq(b.failed, 1);
  ck_assert_int_eq(ops_buf_str(&b, ""), -1); /* sticky */
  ck_assert_str_eq(ops_buf_cstr(&b), "0123456789"); /* kept what it had */
  ops_buf_free(&b);
}
END_TEST

/* tool_grow(): the array keeps its elements, has room for element n, and
 * its capacity at least doubles (and starts at |first| or more). */
START_TEST(test_tool_grow_keeps_the_array_and_makes_room) {
  size_t n = 0, cap = 0;
  long *v = NULL;
  for (long i = 0; i < 5000; i++) {
    size_t before = cap;
    long *g = tool_grow(v, n, &cap, sizeof *v, 16);
    ck_assert_ptr_nonnull(g);
    ck_assert_uint_gt(cap, n);
    if (before == 0)
      ck_assert_uint_ge(cap, 16);
    else if (cap != before)
      ck_assert_uint_ge(cap, 2 * before);
    v = g;
    v[n++] = i;
  }
  for (long i = 0; i < 5000; i++)
    ck_assert_int_eq(v[i], i);
  free(v);
  size_t big = SIZE_MAX / 8;
  ck_assert_ptr_null(tool_grow(NULL, big, &big, 8, 1)); /* too large */
  ck_assert_uint_eq(big, SIZE_MAX / 8);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ops_metrics");
  TCase *t = tcase_create("registry");
  tcase_add_test(t, test_counter_exposition_exact);
  tcase_add_test(t, test_const_labels_come_first);
  tcase_add_test(t, test_escaping);
  tcase_add_test(t, test_json_string_is_what_jansson_writes);
  tcase_add_test(t, test_histogram_buckets);
  tcase_add_test(t, test_histogram_labels_and_fractions);
  tcase_add_test(t, test_bad_registrations);
  tcase_add_test(t, test_overflow_series);
  tcase_add_test(t, test_number_format);
  tcase_add_test(t, test_concurrent_updates);
  tcase_add_test(t, test_ops_buf_grows_and_keeps_its_limit_and_sticky_failure);
  tcase_add_test(t, test_tool_grow_keeps_the_array_and_makes_room);
  suite_add_tcase(s, t);
  TCase *o = tcase_create("ops");
  tcase_add_test(o, test_source_events);
  tcase_add_test(o, test_dialing_streams);
  tcase_add_test(o, test_refused_calls);
  tcase_add_test(o, test_listening_sink_reconnections);
  tcase_add_test(o, test_code_names);
  suite_add_tcase(s, o);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
