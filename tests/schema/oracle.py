#!/usr/bin/python3
"""libmcp-schema against an independent oracle: python3-protobuf.

For every case of a generated corpus (every field kind, the well-known
types, names, Istio documents) and every document of examples/:
  1. python: json_format.ParseDict(value) then
     SerializeToString(deterministic=True): the expected bytes;
  2. mcp-schema-conv encode, from the value written as YAML and as JSON,
     must give the same bytes, byte for byte. The only exception, marked
     "decoded" below: an Any whose embedded message holds a map with more
     than one entry, because python serializes an Any's embedded message
     without the deterministic flag (its map order is its own): there the
     decoded messages are compared;
  3. round trip: mcp-schema-conv decode of those bytes, then encode of that
     JSON, gives the same bytes again; and python's json_format.Parse of our
     JSON gives the same message.
Every error case must fail in python and in mcp-schema-conv, the latter with
the expected message (field path first) and line.

Go's duration strings (go_durations.txt, written by Go's own
time.ParseDuration, the parser behind Istio's YAML): what Go reads, ours
must encode to the bytes python gives for the same duration in proto3's
form; what Go refuses, ours must refuse.

usage: oracle.py --conv BIN --protoc BIN --src SRCDIR --work DIR
"""
import argparse
import base64
import json
import os
import re
import subprocess
import sys

try:
    import yaml
    from google.protobuf import descriptor_pb2, descriptor_pool, json_format
    from google.protobuf import message_factory
except ImportError as e:  # 77: meson's "skipped"
    print("oracle: skipped, %s (Debian: python3-protobuf python3-yaml)" % e)
    sys.exit(77)

T = "mcp.schema.test."
T2 = "mcp.schema.test2."
VS = "istio.networking.v1alpha3.VirtualService"
KINDS = {
    "VirtualService": VS,
    "DestinationRule": "istio.networking.v1alpha3.DestinationRule",
    "Gateway": "istio.networking.v1alpha3.Gateway",
    "ServiceEntry": "istio.networking.v1alpha3.ServiceEntry",
    "Sidecar": "istio.networking.v1alpha3.Sidecar",
    "EnvoyFilter": "istio.networking.v1alpha3.EnvoyFilter",
    "WorkloadEntry": "istio.networking.v1alpha3.WorkloadEntry",
    "AuthorizationPolicy": "istio.security.v1beta1.AuthorizationPolicy",
    "PeerAuthentication": "istio.security.v1beta1.PeerAuthentication",
    "RequestAuthentication": "istio.security.v1beta1.RequestAuthentication",
}


def b64(b):
    return base64.b64encode(b).decode()


def corpus():
    """(type, value, mode) for every field kind; mode "exact", "decoded" or
    "exact-nopyread" (see where they are used)."""
    c = []
    s = T + "Scalars"
    for field, values in [
        ("fDouble", [0, 1.5, -2.25e-300, 1e308, "NaN", "Infinity", "-Infinity",
                     "1.5", 5, -0.0, "-12e3"]),
        ("fFloat", [1.5, 1e-45, "NaN", 0.1, "-Infinity"]),
        ("fInt64", [0, "9223372036854775807", "-9223372036854775808", 42, -1,
                    "123", 1e3]),
        ("fUint64", ["18446744073709551615", 7, "0"]),
        ("fInt32", [2147483647, -2147483648, -1, 1.0, "12", 0]),
        ("fFixed64", ["18446744073709551615", 1]),
        ("fFixed32", [4294967295, "17"]),
        ("fBool", [True, False]),
        ("fString", ["", "h\u00e9llo \u2603 \U0001d11e", "quote\"back\\slash\nnl\ttab\u0001"]),
        ("fBytes", [b64(b"\x00\xff\x10"), "", b64(bytes(range(256))), "-_8=", "+/8",
                    "YQ"]),
        ("fUint32", [4294967295, 3]),
        ("fEnum", ["RED", 2, "BLUE", -3, 7, "COLOR_UNSPECIFIED", "1"]),
        ("fSfixed32", [-5, 2147483647]),
        ("fSfixed64", ["-5", "-9223372036854775808"]),
        ("fSint32", [-2147483648, 2147483647, -1]),
        ("fSint64", ["-9223372036854775808", "9223372036854775807", -3]),
        ("fMessage", [{}, {"name": "a", "child": {"n": 1, "child": {}}}]),
    ]:
        for v in values:
            c.append((s, {field: v}, "exact"))
    c.append((s, {"f_double": 2.5, "f_int32": 3, "fString": "x", "f_enum": "GREEN",
                  "fMessage": {"name": "n"}, "f_bytes": "AA==", "fSint64": "-2"},
              "exact"))
    c.append((s, {}, "exact"))
    # The largest float: its shortest text, -3.4028235e+38, reads back as the
    # same float, but python refuses it (it compares the double with
    # FLT_MAX before rounding): python does not read our JSON here.
    c.append((s, {"fFloat": -3.4028234663852886e+38}, "exact-nopyread"))
    c.append((s, {"fInt32": None, "fMessage": None, "fString": None}, "exact"))

    r = T + "Repeated"
    for field, values in [
        ("rDouble", [[], [1.5, -0.0, "NaN", 0]]),
        ("rFloat", [[0.5, "Infinity"]]),
        ("rInt64", [["-1", 2, "9223372036854775807"]]),
        ("rUint64", [["18446744073709551615", 0]]),
        ("rInt32", [[-1, 0, 300, 2147483647]]),
        ("rFixed64", [["1", 2]]),
        ("rFixed32", [[1, 4294967295]]),
        ("rBool", [[True, False, True]]),
        ("rString", [["a", "", "\u00e9"]]),
        ("rBytes", [["", "AQI=", "_w"]]),
        ("rUint32", [[0, 1]]),
        ("rEnum", [["RED", "BLUE", 0, 9]]),
        ("rSfixed32", [[-1, 1]]),
        ("rSfixed64", [["-1", "1"]]),
        ("rSint32", [[-1, 1, -2147483648]]),
        ("rSint64", [["-1", "1"]]),
        ("rMessage", [[{}, {"n": 1}, {"name": "x", "child": {"n": -1}}]]),
        ("rUnpacked", [[1, -2, 0]]),
    ]:
        for v in values:
            c.append((r, {field: v}, "exact"))

    m = T + "Maps"
    for field, v in [
        ("mString", {"b": "2", "a": "1", "": "", "\u00e9": "x", "aa": "y"}),
        ("mInt32", {"-1": 2, "5": -3, "0": 0, "-2147483648": 1}),
        ("mInt64", {"-9223372036854775808": "a", "3": "b", "-3": ""}),
        ("mUint32", {"4294967295": True, "0": False}),
        ("mUint64", {"18446744073709551615": 1.5, "2": 0}),
        ("mSint32", {"-7": "RED", "7": 0, "1": 5}),
        ("mSint64", {"-1": "AAE=", "1": ""}),
        ("mFixed32", {"1": 0.5, "4294967295": "NaN"}),
        ("mFixed64", {"18446744073709551615": "-1", "0": 0}),
        ("mSfixed32", {"-2": "9", "2": 0}),
        ("mSfixed64", {"-9223372036854775808": "x", "1": "y"}),
        ("mBool", {"true": {"n": 1}, "false": {}}),
        ("mMessage", {"z": {"name": "z"}, "a": {}}),
        ("mValue", {"a": None, "b": [1, "x"], "c": {"d": True, "e": {}}, "f": 0}),
        ("mDuration", {"x": "1s", "y": "0s"}),
    ]:
        c.append((m, {field: v}, "exact"))
        c.append((m, {field: {}}, "exact"))

    o = T + "Oneofs"
    for v in [{"oString": ""}, {"oInt32": 0}, {"oMessage": {}}, {"oEnum": "COLOR_UNSPECIFIED"},
              {"oNull": None}, {"oString": "x", "oInt32": None}, {"optInt32": 0},
              {"optString": ""}, {"optEnum": 0}, {"optInt32": -5, "oMessage": {"n": 2}},
              {"o_string": "y"}]:
        c.append((o, v, "exact"))

    w = T + "Wkt"
    inner_any = {"@type": "type.googleapis.com/mcp.schema.test.Inner", "name": "x",
                 "child": {"n": 3}}
    for v in [
        {"any": inner_any},
        {"any": {}},
        {"any": {"@type": "type.googleapis.com/google.protobuf.Duration", "value": "1.5s"}},
        {"any": {"@type": "type.googleapis.com/google.protobuf.Struct", "value": {"a": [1]}}},
        {"any": {"@type": "type.googleapis.com/google.protobuf.Value", "value": "s"}},
        {"any": {"@type": "type.googleapis.com/google.protobuf.Int32Value", "value": 0}},
        {"any": {"@type": "type.googleapis.com/google.protobuf.Any", "value": inner_any}},
        {"any": {"@type": "type.googleapis.com/google.protobuf.Empty"}},
        {"any": {"@type": "type.googleapis.com/mcp.schema.test.Inner"}},
        {"any": {"@type": "example.com/x/mcp.schema.test.Scalars", "fInt32": 1}},
        {"duration": "0s"}, {"duration": "1.5s"}, {"duration": "-1.5s"},
        {"duration": "-0.000000001s"}, {"duration": "315576000000s"},
        {"duration": "-315576000000.999999999s"}, {"duration": "0.100s"},
        {"timestamp": "1970-01-01T00:00:00Z"}, {"timestamp": "2024-02-29T12:34:56.789Z"},
        {"timestamp": "0001-01-01T00:00:00Z"},
        {"timestamp": "9999-12-31T23:59:59.999999999Z"},
        {"timestamp": "2024-01-01T10:00:00+02:00"},
        {"timestamp": "2024-01-01T10:00:00.5-05:30"},
        {"timestamp": "1969-12-31T23:59:59.000001Z"},
        {"struct": {}}, {"struct": {"a": 1, "b": [True, None, "s", {"c": []}], "d": -2.5}},
        {"value": None}, {"value": 1.25}, {"value": "x"}, {"value": False},
        {"value": {"k": "v"}}, {"value": []}, {"value": [[], {}]},
        {"list": []}, {"list": [1, "a", None]},
        {"mask": "a.bC,d"}, {"mask": ""}, {"mask": "fooBar.bazQux"},
        {"empty": {}},
        {"wDouble": 0}, {"wDouble": "NaN"}, {"wFloat": 1.5}, {"wInt64": "-7"},
        {"wInt64": 0}, {"wUint64": "18446744073709551615"}, {"wInt32": -1},
        {"wUint32": 7}, {"wBool": False}, {"wBool": True}, {"wString": ""},
        {"wString": "s"}, {"wBytes": "AP8="}, {"wBytes": ""},
        {"wInt32": None},
        {"values": [None, 1, "x", True, {"a": None}, [None]]},
        {"anys": [{}, inner_any, {"@type": "type.googleapis.com/google.protobuf.Timestamp",
                                  "value": "2020-01-01T00:00:00Z"}]},
        {"timestamps": ["2020-01-01T00:00:00Z", "1970-01-01T00:00:00Z"]},
        {"null": None}, {"null": "NULL_VALUE"},
    ]:
        c.append((w, v, "exact"))
    # An Any holding a map of several entries: python writes the embedded
    # message without deterministic order.
    c.append((w, {"any": {"@type": "type.googleapis.com/google.protobuf.Struct",
                          "value": {"b": 1, "a": 2, "c": {"x": 1, "y": 2}}}}, "decoded"))
    c.append((w, {"any": {"@type": "type.googleapis.com/mcp.schema.test.Maps",
                          "mString": {"b": "1", "a": "2", "c": "3"}}}, "decoded"))

    n = T + "Names"
    for v in [{"snake_case_name": 1}, {"snakeCaseName": 1}, {"renamed": 2}, {"custom": 2},
              {"xDouble": 3}, {"x__double": 3}, {"trailing": 4}, {"trailing_": 4},
              {"CapsName": 5}]:
        c.append((n, v, "exact"))

    # One document of each other Istio kind, with its enums, maps and WKTs.
    net, sec = "istio.networking.v1alpha3.", "istio.security.v1beta1."
    c.append((net + "DestinationRule", {
        "host": "reviews.bookinfo.svc.cluster.local",
        "trafficPolicy": {
            "loadBalancer": {"simple": "LEAST_CONN"},
            "connectionPool": {"tcp": {"maxConnections": 100, "connectTimeout": "0.030s",
                                       "tcpKeepalive": {"time": "7200s", "probes": 9}},
                               "http": {"http1MaxPendingRequests": 1, "idleTimeout": "1.5s",
                                        "h2UpgradePolicy": "UPGRADE"}},
            "outlierDetection": {"consecutiveErrors": 7, "interval": "300s",
                                 "baseEjectionTime": "900s",
                                 "maxEjectionPercent": 100},
            "tls": {"mode": "ISTIO_MUTUAL", "subjectAltNames": ["spiffe://a/b"]},
            "portLevelSettings": [{"port": {"number": 80},
                                   "loadBalancer": {"consistentHash": {"httpCookie": {
                                       "name": "user", "ttl": "0s"}}}}]},
        "subsets": [{"name": "v1", "labels": {"version": "v1", "app": "reviews"}},
                    {"name": "v2", "labels": {"version": "v2"},
                     "trafficPolicy": {"loadBalancer": {"simple": "ROUND_ROBIN"}}}],
        "exportTo": ["*"]}, "exact"))
    c.append((net + "Gateway", {
        "selector": {"istio": "ingressgateway"},
        "servers": [{"port": {"number": 443, "name": "https", "protocol": "HTTPS"},
                     "hosts": ["*.example.com"],
                     "tls": {"mode": "SIMPLE", "credentialName": "cert",
                             "minProtocolVersion": "TLSV1_2", "httpsRedirect": False}},
                    {"port": {"number": 80, "name": "http", "protocol": "HTTP"},
                     "hosts": ["*"], "tls": {"httpsRedirect": True}}]}, "exact"))
    c.append((net + "ServiceEntry", {
        "hosts": ["api.example.com"], "addresses": ["192.0.2.0/24"],
        "ports": [{"number": 443, "name": "tls", "protocol": "TLS"}],
        "location": "MESH_EXTERNAL", "resolution": "DNS",
        "endpoints": [{"address": "192.0.2.1", "ports": {"tls": 8443},
                       "labels": {"zone": "a"}, "weight": 3, "network": "n1"}]}, "exact"))
    c.append((net + "Sidecar", {
        "workloadSelector": {"labels": {"app": "ratings"}},
        "egress": [{"hosts": ["./*", "istio-system/*"]}],
        "outboundTrafficPolicy": {"mode": "REGISTRY_ONLY"}}, "exact"))
    c.append((net + "EnvoyFilter", {
        "workloadSelector": {"labels": {"app": "x"}},
        "configPatches": [{"applyTo": "HTTP_FILTER",
                           "match": {"context": "SIDECAR_INBOUND", "listener": {
                               "portNumber": 8080, "filterChain": {"filter": {
                                   "name": "envoy.http_connection_manager"}}}},
                           "patch": {"operation": "INSERT_BEFORE", "value": {
                               "name": "envoy.lua", "typed_config": {
                                   "@type": "type.googleapis.com/envoy.Lua",
                                   "inlineCode": "function f() end", "n": 1.5,
                                   "list": [True, None]}}}}]}, "exact"))
    c.append((net + "WorkloadEntry", {"address": "10.0.0.1", "ports": {"http": 8080},
                                      "labels": {"app": "vm"}, "weight": 2,
                                      "serviceAccount": "sa"}, "exact"))
    c.append((sec + "AuthorizationPolicy", {
        "selector": {"matchLabels": {"app": "httpbin"}}, "action": "DENY",
        "rules": [{"from": [{"source": {"principals": ["cluster.local/ns/a/sa/b"],
                                        "notIpBlocks": ["10.0.0.0/8"]}}],
                   "to": [{"operation": {"methods": ["GET"], "paths": ["/admin*"]}}],
                   "when": [{"key": "request.auth.claims[iss]", "values": ["x"]}]}]},
              "exact"))
    c.append((sec + "PeerAuthentication", {
        "selector": {"matchLabels": {"app": "db"}}, "mtls": {"mode": "STRICT"},
        "portLevelMtls": {"5432": {"mode": "DISABLE"}, "80": {"mode": "PERMISSIVE"}}},
              "exact"))
    c.append((sec + "RequestAuthentication", {
        "jwtRules": [{"issuer": "https://issuer", "jwksUri": "https://issuer/jwks",
                      "audiences": ["a"], "fromHeaders": [{"name": "x-jwt",
                                                           "prefix": "Bearer "}],
                      "forwardOriginalToken": True}]}, "exact"))

    # proto2: presence for every singular field, closed enums, unpacked.
    p2 = "mcp.schema.test2.P2"
    for v in [{"a": 0}, {"s": ""}, {"e": "ZERO"}, {"e": 1}, {"r": [1, 0, -1]},
              {"rp": [1, 0]}, {"child": {}}, {"child": {"a": 0, "child": {"b": False}}},
              {"b": True}, {"d": -0.0}, {"a": None}]:
        c.append((p2, v, "exact"))

    # Generated VirtualServices: many routes, matches and the WKTs Istio uses.
    for i in range(12):
        c.append((VS, virtual_service(i), "exact"))
    return c


def virtual_service(i):
    routes = []
    for k in range(1 + i % 3):
        routes.append({
            "destination": {"host": "svc%d.ns.svc.cluster.local" % k, "subset": "v%d" % k,
                            "port": {"number": 8000 + k}},
            "weight": 100 // (1 + i % 3),
            "headers": {"request": {"set": {"x-a": "1", "x-b": str(i)},
                                    "remove": ["x-c"]}},
        })
    http = {
        "name": "r%d" % i,
        "match": [{"uri": {"prefix": "/p%d" % i}, "headers": {"end-user": {"exact": "u"},
                                                             "x-re": {"regex": "a.*"}},
                   "ignoreUriCase": i % 2 == 0, "queryParams": {"q": {"exact": "1"}}}],
        "route": routes,
        "timeout": "%d.5s" % i,
        "retries": {"attempts": i, "perTryTimeout": "2s", "retryOn": "5xx"},
        "fault": {"delay": {"percentage": {"value": 0.1 * i}, "fixedDelay": "5s"}},
        "mirrorPercentage": {"value": 50.0},
        "corsPolicy": {"allowOrigins": [{"exact": "https://a"}], "allowMethods": ["GET"],
                       "maxAge": "86400s", "allowCredentials": True},
    }
    return {"hosts": ["h%d" % i, "*.example.com"], "gateways": ["mesh"], "http": [http],
            "exportTo": ["."]}


# (type, YAML text, expected message, expected line[, "lax"]): "lax" where
# python accepts what the proto3 JSON mapping refuses (said where).
ERRORS = [
    (T + "Scalars", "fInt32: x\n", 'fInt32: expected an integer, got "x"', 1),
    (T + "Scalars", "\nfInt32: 2147483648\n",
     "fInt32: integer 2147483648 out of range for int32", 2),
    (T + "Scalars", "fUint32: -1\n", "fUint32: integer -1 out of range for uint32", 1),
    (T + "Scalars", "fInt64: '9223372036854775808'\n",
     "fInt64: integer 9223372036854775808 out of range for int64", 1),
    (T + "Scalars", "fInt32: 1.5\n", "fInt32: expected an integer, got 1.5", 1),
    (T + "Scalars", "fInt32: true\n", "fInt32: expected an integer, got true", 1),
    (T + "Scalars", "fFloat: 1.0e+39\n", "fFloat: number 1.0e+39 out of range for float", 1),
    (T + "Scalars", "fDouble: abc\n", 'fDouble: expected a number, got "abc"', 1),
    (T + "Scalars", "fBool: 'true'\n", 'fBool: expected true or false, got "true"', 1),
    (T + "Scalars", "fString: 12\n", "fString: expected a string, got 12", 1),
    # python's base64 decoding skips characters outside the alphabet.
    (T + "Scalars", "fBytes: '!!'\n", 'fBytes: expected a base64 string, got "!!"', 1,
     "lax"),
    (T + "Scalars", "fEnum: PURPLE\n",
     'fEnum: unknown value "PURPLE" of enum mcp.schema.test.Color', 1),
    (T + "Scalars", "fInt32: 1\nnope: 2\n",
     'nope: unknown field (mcp.schema.test.Scalars has no field "nope")', 2),
    (T + "Scalars", "fMessage:\n  child:\n    n: 1\n    zz: 0\n",
     'fMessage.child.zz: unknown field (mcp.schema.test.Inner has no field "zz")', 4),
    # python checks repeated keys, not a field named twice under both names.
    (T + "Scalars", "fInt32: 1\nf_int32: 2\n",
     'f_int32: field set twice (as "fInt32" and "f_int32")', 2, "lax"),
    (T + "Scalars", "fMessage: 3\n", "fMessage: expected an object, got 3", 1),
    (T + "Repeated", "rInt32: [1, x]\n", 'rInt32[1]: expected an integer, got "x"', 1),
    (T + "Repeated", "rInt32: 1\n", "rInt32: expected a list, got 1", 1),
    (T + "Repeated", "rMessage:\n- {}\n- null\n", "rMessage[1]: null is not allowed in a list", 3),
    (T + "Maps", "mInt32: {x: 1}\n", 'mInt32[x]: expected an integer, got "x"', 1),
    (T + "Maps", "mBool: {yes: {}}\n", 'mBool[yes]: expected "true" or "false" as a map key, got "yes"', 1),
    (T + "Maps", "mString: {a: null}\n", "mString[a]: null is not allowed as a map value", 1),
    # python lets a null NullValue member join another member of its oneof
    # (the result depends on the key order); null is that member's value.
    (T + "Oneofs", "oString: x\noNull: null\n",
     'oNull: "oString" and "oNull" are both members of oneof choice', 2, "lax"),
    (T + "Oneofs", "oString: x\noInt32: 1\n",
     'oInt32: "oString" and "oInt32" are both members of oneof choice', 2),
    (T + "Wkt", "duration: 1.5\n",
     'duration: expected a duration such as "1.5s" or "300ms", got 1.5', 1),
    (T + "Wkt", "duration: 1.5x\n",
     'duration: unknown unit "x" in duration 1.5x (ns, us, ms, s, m, h)', 1),
    (T + "Wkt", "duration: 315576000001s\n",
     "duration: duration 315576000001s out of range (at most 315576000000s)", 1),
    (T + "Wkt", "timestamp: '2024-13-01T00:00:00Z'\n",
     'timestamp: not a valid date and time: "2024-13-01T00:00:00Z"', 1),
    (T + "Wkt", "timestamp: '2024-01-01 00:00:00'\n",
     'timestamp: expected an RFC 3339 time such as "2024-01-02T03:04:05Z", got "2024-01-01 00:00:00"', 1),
    (T + "Wkt", "any:\n  '@type': type.googleapis.com/no.Such\n",
     'any.@type: unknown type "type.googleapis.com/no.Such" in an Any (not in the schema)', 2),
    (T + "Wkt", "any:\n  name: x\n", 'any: an Any without "@type"', 2),
    (T + "Wkt", "mask: a_b\n",
     "mask: field mask path \"a_b\" has a '_' (paths are lowerCamelCase)", 1),
    (T + "Wkt", "struct: [1]\n", "struct: expected an object, got a list", 1),
    (T + "Wkt", "list: {}\n", "list: expected a list, got an object", 1),
    (T + "Wkt", "wInt32: x\n", 'wInt32: expected an integer, got "x"', 1),
    (T2 + "P2", "e: 7\n", "e: unknown value 7 of enum mcp.schema.test2.Closed", 1),
    (T2 + "P2", "e: TWO\n", 'e: unknown value "TWO" of enum mcp.schema.test2.Closed', 1),
    (VS, "hosts: [a]\nhttp:\n- route:\n  - destination: {host: a}\n    weight: x\n",
     'spec.http[0].route[0].weight: expected an integer, got "x"', 5),
]


def go_durations(path):
    """(input, proto3 form or "error") of go_durations.txt."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line and not line.startswith("#"):
                a, b = line.split("\t")
                out.append((a, b))
    return out


def load_pool(paths):
    pool = descriptor_pool.DescriptorPool()
    seen = set()
    for p in paths:
        with open(p, "rb") as f:
            fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
        for fd in fds.file:
            if fd.name not in seen:
                seen.add(fd.name)
                pool.Add(fd)
    return pool


class Oracle:
    def __init__(self, conv, sets, work):
        self.conv, self.sets, self.work = conv, sets, work
        self.pool = load_pool(sets)
        self.factory = message_factory.MessageFactory(self.pool)
        self.failures = 0
        self.checked = 0

    def cls(self, name):
        return self.factory.GetPrototype(self.pool.FindMessageTypeByName(name))

    def run(self, args, data):
        cmd = [self.conv] + args[:1]
        for s in self.sets:
            cmd += ["-d", s]
        cmd += args[1:]
        return subprocess.run(cmd, input=data, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)

    def fail(self, what, detail):
        self.failures += 1
        print("FAIL %s\n  %s" % (what, detail))

    def expect(self, name, value):
        m = json_format.ParseDict(value, self.cls(name)(), descriptor_pool=self.pool)
        return m, m.SerializeToString(deterministic=True)

    def same(self, name, a, b, mode):
        if a == b:
            return True
        if mode != "decoded":
            return False
        c = self.cls(name)
        x, y = c.FromString(a), c.FromString(b)
        return x == y

    def check(self, name, value, mode, label, yaml_text=None, c_args=()):
        self.checked += 1
        try:
            msg, want = self.expect(name, value)
        except Exception as e:  # the corpus must be valid for python
            self.fail(label, "python refused it: %s" % e)
            return
        inputs = [("json", ["encode", "--json", name],
                   json.dumps(value).encode())]
        inputs.append(("yaml", ["encode"] + list(c_args) + [name],
                       yaml_text.encode() if yaml_text is not None else
                       yaml.safe_dump(value, allow_unicode=True).encode()))
        got = None
        for how, args, data in inputs:
            r = self.run(args, data)
            if r.returncode != 0:
                self.fail("%s (%s)" % (label, how), r.stderr.decode(errors="replace"))
                return
            if not self.same(name, r.stdout, want, mode):
                self.fail("%s (%s)" % (label, how),
                          "bytes differ:\n  python %s\n  ours   %s" %
                          (want.hex(), r.stdout.hex()))
                return
            got = r.stdout
        # Round trip: bytes -> JSON -> bytes.
        r = self.run(["decode", name], got)
        if r.returncode != 0:
            self.fail(label + " (decode)", r.stderr.decode(errors="replace"))
            return
        js = r.stdout
        r2 = self.run(["encode", "--json", name], js)
        if r2.returncode != 0 or r2.stdout != got:
            self.fail(label + " (round trip)", "JSON %s: %s %s" %
                      (js.decode(errors="replace"), r2.stderr.decode(errors="replace"),
                       r2.stdout.hex()))
            return
        # Our JSON means the same message to python.
        if mode == "exact-nopyread":
            return
        try:
            back = json_format.Parse(js.decode(), self.cls(name)(),
                                     descriptor_pool=self.pool)
        except Exception as e:
            self.fail(label + " (python reads our JSON)", "%s: %s" % (js, e))
            return
        if not self.same(name, back.SerializeToString(deterministic=True), want, mode):
            self.fail(label + " (python reads our JSON)", js.decode())

    def check_go_durations(self, cases):
        """Two runs for all the cases (a run costs much under ASan): the
        ones Go reads as one map of durations, which must give python's
        bytes for Go's values; the ones Go refuses as another, which must
        fail with one error per entry (every error of a document is
        reported: 20 lines, then "... and N more")."""
        good = [(t, w) for t, w in cases if w != "error"]
        bad = [t for t, w in cases if w == "error"]
        self.checked += 2

        def doc(texts):
            return "mDuration:\n" + "".join(
                "  k%03d: %s\n" % (i, json.dumps(t, ensure_ascii=False))
                for i, t in enumerate(texts))

        r = self.run(["encode", T + "Maps"], doc([t for t, _ in good]).encode())
        _, expect = self.expect(T + "Maps", {"mDuration": {
            "k%03d" % i: w for i, (_, w) in enumerate(good)}})
        if r.returncode != 0 or r.stdout != expect:
            self.fail("Go durations (%d that Go reads)" % len(good),
                      "exit %d, %r; bytes %s, python's %s" %
                      (r.returncode, r.stderr, r.stdout.hex(), expect.hex()))
        r = self.run(["encode", T + "Maps"], doc(bad).encode())
        lines = r.stderr.decode(errors="replace").splitlines()
        keys = set()
        for l in lines:
            m = re.match(r"<stdin>:\d+: mDuration\[(k\d+)\]: ", l)
            if m:
                keys.add(m.group(1))
        more = re.match(r"<stdin>: \.\.\. and (\d+) more$", lines[-1]) if lines else None
        total = len(keys) + (int(more.group(1)) if more else 0)
        # One error at most per entry: as many errors as entries means
        # each entry was refused.
        if r.returncode != 1 or total != len(bad) or len(keys) != min(20, len(bad)):
            self.fail("Go durations (%d that Go refuses)" % len(bad),
                      "exit %d, %d refused: %r" % (r.returncode, total, lines))

    def check_error(self, name, text, message, line, lax=None):
        self.checked += 1
        label = "error %r" % message
        value = yaml.safe_load(text)
        if name == VS:
            value = {"spec": value}
            text = "spec:\n" + "".join("  " + l + "\n" for l in text.splitlines())
            line += 1
        try:
            v = value["spec"] if name == VS else value
            json_format.ParseDict(v, self.cls(name)(), descriptor_pool=self.pool)
            if not lax:
                self.fail(label, "python accepted it")
                return
        except json_format.ParseError:
            pass
        args = ["encode", name] + (["--select", "spec"] if name == VS else [])
        r = self.run(args, text.encode())
        err = r.stderr.decode(errors="replace").strip()
        want = "<stdin>:%d: %s" % (line, message)
        if r.returncode != 1 or err != want:
            self.fail(label, "exit %d, stderr %r, want %r" % (r.returncode, err, want))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conv", required=True)
    ap.add_argument("--protoc", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    istio = os.path.join(a.src, "proto", "istio")
    if not os.path.isdir(istio):
        istio = "/work/shared/protos/istio"
    kinds_pb = os.path.join(a.work, "kinds.pb")
    kinds2_pb = os.path.join(a.work, "kinds2.pb")
    istio_pb = os.path.join(a.work, "istio.pb")
    subprocess.check_call([a.protoc, "-I" + os.path.join(a.src, "tests", "schema"),
                           "-I/usr/include", "--include_imports",
                           "--descriptor_set_out=" + kinds_pb, "kinds.proto"])
    subprocess.check_call([a.protoc, "-I" + os.path.join(a.src, "tests", "schema"),
                           "--descriptor_set_out=" + kinds2_pb, "kinds2.proto"])
    protos = sorted(os.path.relpath(os.path.join(d, f), istio)
                    for d, _, fs in os.walk(istio) for f in fs
                    if f.endswith(".proto") and not f.startswith("gogo"))
    subprocess.run([a.protoc, "-I" + istio, "-I/usr/include", "--include_imports",
                    "--descriptor_set_out=" + istio_pb] + protos, check=True,
                   stderr=subprocess.DEVNULL)
    o = Oracle(a.conv, [kinds_pb, kinds2_pb, istio_pb], a.work)

    for i, (name, value, mode) in enumerate(corpus()):
        o.check(name, value, mode, "corpus[%d] %s %s" % (i, name, json.dumps(value)[:80]))
    ncorpus = o.checked

    # examples/: every document whose kind has a type, from its own YAML text.
    nex = 0
    ex = os.path.join(a.src, "examples")
    for d, _, fs in sorted(os.walk(ex)):
        for f in sorted(fs):
            if not f.endswith((".yaml", ".yml")):
                continue
            path = os.path.join(d, f)
            with open(path) as fh:
                text = fh.read()
            for k, doc in enumerate(yaml.safe_load_all(text)):
                if not isinstance(doc, dict) or doc.get("kind") not in KINDS:
                    continue
                nex += 1
                o.check(KINDS[doc["kind"]], doc.get("spec") or {}, "exact",
                        "%s doc %d" % (os.path.relpath(path, a.src), k), yaml_text=text,
                        c_args=["--doc", str(k), "--select", "spec"])

    for e in ERRORS:
        o.check_error(*e)

    gd = go_durations(os.path.join(a.src, "tests", "schema", "go_durations.txt"))
    o.check_go_durations(gd)

    print("oracle: %d corpus cases, %d example documents, %d error cases, "
          "%d Go durations; %d failures" %
          (ncorpus, nex, len(ERRORS), len(gd), o.failures))
    if nex == 0:
        print("oracle: no Istio document found in examples/")
        return 1
    return 1 if o.failures else 0


if __name__ == "__main__":
    sys.exit(main())
