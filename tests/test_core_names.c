/* Collection names for kinds and type URLs, and resource naming rules. */
#include <check.h>
#include <string.h>

#include "mcp/mcp.h"

static const char *plural(const char *kind) {
  static char buf[128];
  size_t n = mcp_kind_plural(kind, buf, sizeof(buf));
  ck_assert_uint_eq(n, strlen(buf));
  return buf;
}

START_TEST(test_plural_lowercases_and_adds_s) {
  ck_assert_str_eq(plural("VirtualService"), "virtualservices");
  ck_assert_str_eq(plural("Gateway"), "gateways");
}
END_TEST

START_TEST(test_plural_consonant_y_gives_ies) {
  ck_assert_str_eq(plural("Policy"), "policies");
  ck_assert_str_eq(plural("Day"), "days"); /* vowel + y keeps the y */
}
END_TEST

START_TEST(test_plural_sibilants_give_es) {
  ck_assert_str_eq(plural("Status"), "statuses");
  ck_assert_str_eq(plural("Box"), "boxes");
  ck_assert_str_eq(plural("Quiz"), "quizes");
  ck_assert_str_eq(plural("Batch"), "batches");
  ck_assert_str_eq(plural("Mesh"), "meshes");
  ck_assert_str_eq(plural("Path"), "paths"); /* th is no sibilant */
}
END_TEST

/* Kubernetes' Endpoints is plural already (k8s/core/v1/endpoints). */
START_TEST(test_plural_of_a_plural_kind_is_itself) {
  ck_assert_str_eq(plural("Endpoints"), "endpoints");
  ck_assert_str_eq(plural("endpoints"), "endpoints");
  ck_assert_str_eq(plural("Endpoint"), "endpoints");
  ck_assert_str_eq(plural("EndpointsX"), "endpointsxes");
  char buf[4];
  ck_assert_uint_eq(mcp_kind_plural("Endpoints", buf, sizeof(buf)), 9);
  ck_assert_str_eq(buf, "end");
  char tu[64];
  mcp_collection_for_type_url("type.googleapis.com/k8s.io.api.core.v1.Endpoints",
                              tu, sizeof(tu));
  ck_assert_str_eq(tu, "k8s/core/v1/endpoints");
}
END_TEST

START_TEST(test_type_url_maps_istio_package) {
  char buf[128];
  mcp_collection_for_type_url(
      "type.googleapis.com/istio.networking.v1alpha3.VirtualService", buf,
      sizeof(buf));
  ck_assert_str_eq(buf, "istio/networking/v1alpha3/virtualservices");
}
END_TEST

START_TEST(test_type_url_maps_k8s_package) {
  char buf[128];
  mcp_collection_for_type_url("type.googleapis.com/k8s.io.api.core.v1.ConfigMap",
                              buf, sizeof(buf));
  ck_assert_str_eq(buf, "k8s/core/v1/configmaps");
}
END_TEST

START_TEST(test_type_url_truncates_like_snprintf) {
  char buf[10];
  size_t n = mcp_collection_for_type_url(
      "type.googleapis.com/istio.networking.v1alpha3.VirtualService", buf,
      sizeof(buf));
  ck_assert_uint_eq(n, strlen("istio/networking/v1alpha3/virtualservices"));
  ck_assert_str_eq(buf, "istio/net");
}
END_TEST

START_TEST(test_name_lenient_accepts_kubernetes_names) {
  ck_assert(mcp_name_valid("default/reviews", 0));
  ck_assert(mcp_name_valid("/default/reviews", 0));
  ck_assert(mcp_name_valid("istio-system/reviews.default.svc", 0));
  ck_assert(mcp_name_valid("Upper_Case", 0));
}
END_TEST

START_TEST(test_name_lenient_rejects_empty_segments_and_path_tricks) {
  ck_assert(!mcp_name_valid("", 0));
  ck_assert(!mcp_name_valid("/", 0));
  ck_assert(!mcp_name_valid("a//b", 0));
  ck_assert(!mcp_name_valid("a/", 0));
  ck_assert(!mcp_name_valid("../etc/passwd", 0));
  ck_assert(!mcp_name_valid("a/./b", 0));
  ck_assert(!mcp_name_valid("with space", 0));
  ck_assert(!mcp_name_valid("tab\there", 0));
  ck_assert(!mcp_name_valid("caf\xc3\xa9", 0));
}
END_TEST

START_TEST(test_name_strict_requires_dns_labels) {
  ck_assert(mcp_name_valid("default/reviews-v2", 1));
  ck_assert(!mcp_name_valid("default/reviews.default.svc", 1));
  ck_assert(!mcp_name_valid("Default/reviews", 1));
  ck_assert(!mcp_name_valid("-a/b", 1));
  ck_assert(!mcp_name_valid("a/b-", 1));
  char label[70];
  memset(label, 'a', 63);
  label[63] = '\0';
  ck_assert(mcp_name_valid(label, 1));
  label[63] = 'a';
  label[64] = '\0';
  ck_assert(!mcp_name_valid(label, 1));
}
END_TEST


START_TEST(test_name_kubernetes_accepts_lowercase_subdomain_segments) {
  ck_assert(mcp_name_valid2("default/reviews", MCP_NAMES_KUBERNETES));
  ck_assert(mcp_name_valid2("istio-system/reviews.default.svc",
                            MCP_NAMES_KUBERNETES));
  ck_assert(mcp_name_valid2("0a/b0", MCP_NAMES_KUBERNETES));
  ck_assert(mcp_name_valid2("mesh", MCP_NAMES_KUBERNETES));
  /* Kubernetes sets no 63-byte limit per label of a subdomain. */
  char s[300];
  memset(s, 'a', 253);
  s[253] = '\0';
  ck_assert(mcp_name_valid2(s, MCP_NAMES_KUBERNETES));
  s[253] = 'a';
  s[254] = '\0';
  ck_assert(!mcp_name_valid2(s, MCP_NAMES_KUBERNETES));
}
END_TEST

START_TEST(test_name_kubernetes_rejects_what_kubernetes_rejects) {
  ck_assert(!mcp_name_valid2("Not_A_DNS_Label!", MCP_NAMES_KUBERNETES));
  ck_assert(!mcp_name_valid2("default/Reviews", MCP_NAMES_KUBERNETES));
  ck_assert(!mcp_name_valid2("a_b", MCP_NAMES_KUBERNETES));
  ck_assert(!mcp_name_valid2("-a", MCP_NAMES_KUBERNETES));
  ck_assert(!mcp_name_valid2("a-", MCP_NAMES_KUBERNETES));
  ck_assert(!mcp_name_valid2("a.-b", MCP_NAMES_KUBERNETES));
  ck_assert(!mcp_name_valid2("a..b", MCP_NAMES_KUBERNETES));
  ck_assert(!mcp_name_valid2(".a", MCP_NAMES_KUBERNETES));
  ck_assert(!mcp_name_valid2("a.", MCP_NAMES_KUBERNETES));
  ck_assert(!mcp_name_valid2("a//b", MCP_NAMES_KUBERNETES));
  ck_assert(!mcp_name_valid2("ns/..", MCP_NAMES_KUBERNETES));
  ck_assert(!mcp_name_valid2("", MCP_NAMES_KUBERNETES));
  ck_assert(!mcp_name_valid2(NULL, MCP_NAMES_KUBERNETES));
  /* The permissive rule still takes them (a sink's default). */
  ck_assert(mcp_name_valid2("Not_A_DNS_Label!", MCP_NAMES_LENIENT));
  ck_assert(mcp_name_valid2("system:controller:x", MCP_NAMES_LENIENT));
}
END_TEST

static mcp_resource good_resource(void) {
  mcp_resource r;
  memset(&r, 0, sizeof(r));
  r.name = "default/reviews";
  r.version = "v1";
  r.type_url = "type.googleapis.com/google.protobuf.Struct";
  return r;
}

START_TEST(test_resource_check_applies_the_sink_defaults) {
  mcp_resource_limits lim;
  mcp_resource_limits_default(&lim);
  mcp_sink_options so;
  mcp_sink_options_default(&so);
  ck_assert_int_eq(lim.name_rules, so.name_rules);
  ck_assert_uint_eq(lim.max_name_len, so.max_name_len);
  ck_assert_uint_eq(lim.max_version_len, so.max_version_len);
  ck_assert_uint_eq(lim.max_metadata, so.max_metadata);
  char msg[200];
  mcp_resource r = good_resource();
  ck_assert_int_eq(mcp_resource_check(&r, &lim, msg, sizeof(msg)), 0);
  static mcp_kv kv[MCP_DEFAULT_MAX_METADATA + 1];
  for (size_t i = 0; i < MCP_DEFAULT_MAX_METADATA + 1; i++) {
    kv[i].key = "k";
    kv[i].value = "v";
  }
  r.labels = kv;
  r.nlabels = 200;
  r.annotations = kv + 200;
  r.nannotations = MCP_DEFAULT_MAX_METADATA - 200;
  ck_assert_int_eq(mcp_resource_check(&r, &lim, msg, sizeof(msg)), 0);
  r.nannotations++;
  ck_assert_int_eq(mcp_resource_check(&r, &lim, msg, sizeof(msg)),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(msg, "labels and annotations"));
  ck_assert_ptr_nonnull(strstr(msg, "default/reviews"));
}
END_TEST

START_TEST(test_resource_check_reports_each_limit) {
  mcp_resource_limits lim;
  mcp_resource_limits_default(&lim);
  char msg[120], name[MCP_DEFAULT_MAX_NAME_LEN + 2];
  mcp_resource r = good_resource();
  memset(name, 'a', sizeof(name) - 1);
  name[sizeof(name) - 1] = '\0';
  r.name = name;
  ck_assert_int_eq(mcp_resource_check(&r, &lim, msg, sizeof(msg)),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(msg, "longer than 512 bytes"));
  name[MCP_DEFAULT_MAX_NAME_LEN] = '\0';
  ck_assert_int_eq(mcp_resource_check(&r, &lim, msg, sizeof(msg)), 0);
  r.name = "Not_A_DNS_Label!";
  ck_assert_int_eq(mcp_resource_check(&r, &lim, msg, sizeof(msg)), 0);
  lim.name_rules = MCP_NAMES_KUBERNETES;
  ck_assert_int_eq(mcp_resource_check(&r, &lim, msg, sizeof(msg)),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(msg, "naming rules"));
  r = good_resource();
  char version[MCP_DEFAULT_MAX_VERSION_LEN + 2];
  memset(version, '1', sizeof(version) - 1);
  version[sizeof(version) - 1] = '\0';
  r.version = version;
  ck_assert_int_eq(mcp_resource_check(&r, &lim, msg, sizeof(msg)),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(msg, "version longer than 256"));
  r = good_resource();
  r.type_url = "";
  ck_assert_int_eq(mcp_resource_check(&r, &lim, msg, sizeof(msg)),
                   MCP_ERR_INVALID_ARGUMENT);
  r = good_resource();
  r.has_create_time = 1;
  r.create_time_nanos = 1000000000;
  ck_assert_int_eq(mcp_resource_check(&r, &lim, msg, sizeof(msg)),
                   MCP_ERR_INVALID_ARGUMENT);
  /* Smaller limits of the caller's own. */
  r = good_resource();
  lim.max_name_len = 4;
  ck_assert_int_eq(mcp_resource_check(&r, &lim, msg, sizeof(msg)),
                   MCP_ERR_INVALID_ARGUMENT);
}
END_TEST

/* mcp_collection_for_kind(): every part it refuses is INVALID_ARGUMENT
 * and leaves |buf| as it was. */
START_TEST(test_collection_for_kind_refuses_bad_parts_buf_untouched) {
  char buf[64];
  ck_assert_int_eq(mcp_collection_for_kind("networking.istio.io/v1",
                                           "VirtualService", buf, sizeof buf),
                   (int)strlen("istio/networking/v1alpha3/virtualservices"));
  ck_assert_str_eq(buf, "istio/networking/v1alpha3/virtualservices");
  ck_assert_int_eq(mcp_collection_for_kind("v1", "Service", buf, sizeof buf),
                   (int)strlen("k8s/core/v1/services"));
  static char big[4200];
  memset(big, 'a', sizeof big - 1);
  const char *bad[][2] = {
      {NULL, "Kind"},         {"v1", NULL},        {".x.istio.io/v1", "K"},
      {"a/b/c", "Kind"},      {"/v1", "Kind"},     {"apps/", "Kind"},
      {"", "Kind"},           {"v1", ""},          {"v1", "Bad Kind"},
      {"gr\xc3\xa9/v1", "K"}, {"v1", "K/ind"},     {big, "Kind"},
      {"v1", big},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    memcpy(buf, "unchanged", 10);
    ck_assert_int_eq(mcp_collection_for_kind(bad[i][0], bad[i][1], buf,
                                             sizeof buf),
                     MCP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(buf, "unchanged");
  }
}
END_TEST

/* The sink checks on after its NACK's first problem with no message
 * buffer: mcp_resource_check() takes NULL with a length of 0. */
START_TEST(test_resource_check_takes_no_message_buffer) {
  mcp_resource r = good_resource();
  mcp_resource_limits lim;
  mcp_resource_limits_default(&lim);
  ck_assert_int_eq(mcp_resource_check(&r, &lim, NULL, 0), 0);
  r.name = "a//b";
  ck_assert_int_eq(mcp_resource_check(&r, &lim, NULL, 0),
                   MCP_ERR_INVALID_ARGUMENT);
}
END_TEST

int main(void) {
  Suite *s = suite_create("core_names");
  TCase *t = tcase_create("names");
  tcase_add_test(t, test_plural_lowercases_and_adds_s);
  tcase_add_test(t, test_plural_consonant_y_gives_ies);
  tcase_add_test(t, test_plural_sibilants_give_es);
  tcase_add_test(t, test_plural_of_a_plural_kind_is_itself);
  tcase_add_test(t, test_type_url_maps_istio_package);
  tcase_add_test(t, test_type_url_maps_k8s_package);
  tcase_add_test(t, test_type_url_truncates_like_snprintf);
  tcase_add_test(t, test_name_lenient_accepts_kubernetes_names);
  tcase_add_test(t, test_name_lenient_rejects_empty_segments_and_path_tricks);
  tcase_add_test(t, test_name_strict_requires_dns_labels);
  tcase_add_test(t, test_name_kubernetes_accepts_lowercase_subdomain_segments);
  tcase_add_test(t, test_name_kubernetes_rejects_what_kubernetes_rejects);
  tcase_add_test(t, test_resource_check_applies_the_sink_defaults);
  tcase_add_test(t, test_resource_check_reports_each_limit);
  tcase_add_test(t, test_collection_for_kind_refuses_bad_parts_buf_untouched);
  tcase_add_test(t, test_resource_check_takes_no_message_buffer);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
