/*
 * The benchmark's document: a VirtualService of about 1 KiB, different for
 * each |i| (bench/bench_schema.c). The schema tests read the same text
 * (i = 7, |extra| 1) as the common shape of a configuration file, which
 * the fast scanner and the direct encoder must read themselves
 * (test_schema_yaml_fast, test_schema_encode_yaml): one text, so the two
 * cannot drift.
 */
#ifndef MCP_BENCH_VS_H
#define MCP_BENCH_VS_H

#include <stdio.h>

/* Writes the document into |buf| (|cap| bytes); |extra|: a second header
 * to set, so that a map's keys come out of order. Its length, or 0 when
 * |cap| is too small. */
static inline size_t bench_vs(char *buf, size_t cap, unsigned i, int extra) {
  int n = snprintf(
      buf, cap,
      "hosts:\n- reviews-%u.bookinfo.svc.cluster.local\n- reviews.example.com\n"
      "gateways: [istio-system/bookinfo-gateway, mesh]\n"
      "http:\n"
      "- name: canary-%u\n"
      "  match:\n"
      "  - headers:\n"
      "      end-user: {exact: tester-%u}\n"
      "    uri: {prefix: /reviews/v%u}\n"
      "  route:\n"
      "  - destination: {host: reviews, subset: v3, port: {number: 9080}}\n"
      "    headers:\n"
      "      request: {set: {x-canary: \"true\"%s}}\n"
      "  timeout: %u.5s\n"
      "- match:\n"
      "  - uri: {exact: /productpage}\n"
      "  - uri: {prefix: /static}\n"
      "  route:\n"
      "  - destination: {host: reviews, subset: v1}\n"
      "    weight: %u\n"
      "  - destination: {host: reviews, subset: v2}\n"
      "    weight: %u\n"
      "  retries:\n"
      "    attempts: 3\n"
      "    perTryTimeout: 2s\n"
      "    retryOn: gateway-error,connect-failure,refused-stream\n"
      "  fault:\n"
      "    delay:\n"
      "      percentage: {value: 0.5}\n"
      "      fixedDelay: 5s\n"
      "  corsPolicy:\n"
      "    allowOrigins: [{exact: \"https://example.com\"}]\n"
      "    allowMethods: [GET, POST]\n"
      "    allowHeaders: [x-custom-%u]\n"
      "    maxAge: 86400s\n"
      "  mirror: {host: reviews-shadow, subset: v%u}\n"
      "  mirrorPercentage: {value: 10.0}\n",
      i, i, i, i % 7, extra ? ", a-first: b" : "", i % 30, i % 101, 100 - i % 101, i, i % 5);
  return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

#endif
