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

int main(void) {
  Suite *s = suite_create("core_names");
  TCase *t = tcase_create("names");
  tcase_add_test(t, test_plural_lowercases_and_adds_s);
  tcase_add_test(t, test_plural_consonant_y_gives_ies);
  tcase_add_test(t, test_plural_sibilants_give_es);
  tcase_add_test(t, test_type_url_maps_istio_package);
  tcase_add_test(t, test_type_url_maps_k8s_package);
  tcase_add_test(t, test_type_url_truncates_like_snprintf);
  tcase_add_test(t, test_name_lenient_accepts_kubernetes_names);
  tcase_add_test(t, test_name_lenient_rejects_empty_segments_and_path_tricks);
  tcase_add_test(t, test_name_strict_requires_dns_labels);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
