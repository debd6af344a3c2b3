/*
 * A 1 KiB VirtualService as bench/bench_schema.c writes it (its i = 7, with
 * a second header to set, so that a map's keys come out of order): the common shape
 * of a configuration file, which the fast scanner and the direct encoder
 * must read themselves (test_schema_yaml_fast, test_schema_encode_yaml).
 */
#ifndef MCP_TESTS_SCHEMA_BENCH_VS_H
#define MCP_TESTS_SCHEMA_BENCH_VS_H

static const char bench_vs[] =
    "hosts:\n- reviews-7.bookinfo.svc.cluster.local\n- reviews.example.com\n"
    "gateways: [istio-system/bookinfo-gateway, mesh]\n"
    "http:\n"
    "- name: canary-7\n"
    "  match:\n"
    "  - headers:\n"
    "      end-user: {exact: tester-7}\n"
    "    uri: {prefix: /reviews/v0}\n"
    "  route:\n"
    "  - destination: {host: reviews, subset: v3, port: {number: 9080}}\n"
    "    headers:\n"
    "      request: {set: {x-canary: \"true\", a-first: b}}\n"
    "  timeout: 7.5s\n"
    "- match:\n"
    "  - uri: {exact: /productpage}\n"
    "  - uri: {prefix: /static}\n"
    "  route:\n"
    "  - destination: {host: reviews, subset: v1}\n"
    "    weight: 7\n"
    "  - destination: {host: reviews, subset: v2}\n"
    "    weight: 93\n"
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
    "    allowHeaders: [x-custom-7]\n"
    "    maxAge: 86400s\n"
    "  mirror: {host: reviews-shadow, subset: v2}\n"
    "  mirrorPercentage: {value: 10.0}\n";

#endif
