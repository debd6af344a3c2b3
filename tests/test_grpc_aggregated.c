/*
 * The aggregated services over real gRPC: our sink dials
 * StreamAggregatedResources and IncrementalAggregatedResources on the same
 * source listener that serves ResourceSource.
 */
#include <check.h>

#include "test_grpc_util.h"

#define VS_TYPE "type.googleapis.com/istio.networking.v1alpha3.VirtualService"
#define VS_COLL "istio/networking/v1alpha3/virtualservices"

/* The sink holds exactly the store's collection for the type. */
static int converged(void *ud) {
  struct {
    mcp_grpc_sink *sink;
    mcp_grpc_source *src;
  } *p = ud;
  tg_snap s;
  memset(&s, 0, sizeof(s));
  s.coll = VS_TYPE;
  ck_assert_int_eq(mcp_grpc_sink_call(p->sink, tg_snap_state, &s), 0);
  s.coll = VS_COLL; /* the same names, in the store's collection */
  ck_assert_int_eq(mcp_grpc_source_call(p->src, tg_compare_store, &s), 0);
  return s.synced && s.equal;
}

static void put_a2(mcp_store *st, mcp_tstamp ts, void *ud) {
  (void)ud;
  tg_put(st, VS_COLL, "default/a", "2", ts);
  mcp_store_delete(st, VS_COLL, "default/b", ts);
}

static void run(mcp_service service) {
  mcp_store *store = tg_store();
  tg_put(store, VS_COLL, "default/a", "1", 1);
  tg_put(store, VS_COLL, "default/b", "1", 1);
  tg_streams so, ko;
  tg_streams_init(&so);
  tg_streams_init(&ko);
  mcp_grpc_options o;
  mcp_source_options sopts;
  tg_listen_opts(&o, "127.0.0.1:0", &so);
  tg_source_opts(&sopts, store);
  mcp_grpc_source *src = NULL;
  ck_assert_int_eq(mcp_grpc_source_new(&src, &o, &sopts), 0);

  static const char *types[] = {VS_TYPE};
  mcp_sink_options ko_opts;
  mcp_sink_options_default(&ko_opts);
  ko_opts.node_id = "agg";
  ko_opts.collections = types;
  ko_opts.ncollections = 1;
  ko_opts.service = service;
  mcp_sink_state *state = NULL;
  ck_assert_int_eq(mcp_sink_state_new(&state, &ko_opts), 0);
  char addr[64];
  tg_dial_opts(&o, addr, sizeof(addr), mcp_grpc_source_port(src), &ko);
  mcp_grpc_sink *sink = NULL;
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), 0);

  struct {
    mcp_grpc_sink *sink;
    mcp_grpc_source *src;
  } p = {sink, src};
  ck_assert_msg(tg_wait(converged, &p, TG_TIMEOUT_MS), "initial sync");
  ck_assert_int_eq(mcp_grpc_source_update(src, put_a2, NULL), 0);
  ck_assert_msg(tg_wait(converged, &p, TG_TIMEOUT_MS), "update");
  tg_streams s = tg_streams_get(&so);
  ck_assert_int_eq(s.opened, 1);
  ck_assert_int_eq(s.closed, 0);
  mcp_grpc_sink_del(sink);
  mcp_grpc_source_del(src);
  mcp_sink_state_del(state);
  mcp_store_del(store);
}

START_TEST(test_sink_syncs_over_stream_aggregated_resources) {
  run(MCP_SERVICE_AGGREGATED);
}
END_TEST

START_TEST(test_sink_syncs_over_incremental_aggregated_resources) {
  run(MCP_SERVICE_AGGREGATED_INCREMENTAL);
}
END_TEST

START_TEST(test_sink_server_refuses_aggregated_state) {
  static const char *types[] = {VS_TYPE};
  mcp_sink_options ko;
  mcp_sink_options_default(&ko);
  ko.collections = types;
  ko.ncollections = 1;
  ko.service = MCP_SERVICE_AGGREGATED;
  mcp_sink_state *state = NULL;
  ck_assert_int_eq(mcp_sink_state_new(&state, &ko), 0);
  mcp_grpc_options o;
  mcp_grpc_options_default(&o);
  o.mode = MCP_GRPC_LISTEN;
  o.address = "127.0.0.1:0";
  mcp_grpc_sink *sink = NULL;
  /* Only ResourceSink has a listening sink. */
  ck_assert_int_eq(mcp_grpc_sink_new(&sink, &o, state), MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(sink);
  mcp_sink_state_del(state);
}
END_TEST

START_TEST(test_method_names) {
  ck_assert_str_eq(mcp_grpc_method(MCP_SERVICE_RESOURCE, 1), MCP_GRPC_RESOURCE_SOURCE_METHOD);
  ck_assert_str_eq(mcp_grpc_method(MCP_SERVICE_RESOURCE, 0), MCP_GRPC_RESOURCE_SINK_METHOD);
  ck_assert_str_eq(mcp_grpc_method(MCP_SERVICE_AGGREGATED, 1),
                   "/istio.mcp.v1alpha1.AggregatedMeshConfigService/StreamAggregatedResources");
  ck_assert_str_eq(mcp_grpc_method(MCP_SERVICE_AGGREGATED_INCREMENTAL, 1),
                   "/istio.mcp.v1alpha1.AggregatedMeshConfigService/IncrementalAggregatedResources");
  ck_assert_ptr_null(mcp_grpc_method(MCP_SERVICE_AGGREGATED, 0));
}
END_TEST

int main(void) {
  Suite *s = suite_create("grpc_aggregated");
  TCase *t = tcase_create("aggregated");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, test_sink_syncs_over_stream_aggregated_resources);
  tcase_add_test(t, test_sink_syncs_over_incremental_aggregated_resources);
  tcase_add_test(t, test_sink_server_refuses_aggregated_state);
  tcase_add_test(t, test_method_names);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
