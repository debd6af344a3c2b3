#!/usr/bin/python3
"""End-to-end tests of typed bodies (issue 15): mcp-source sends every
Istio document's body as its real message, as Istio 1.6's Pilot and Galley
exchange them, and mcp-sink --out mirrors it as readable proto3 JSON.

The real programs over 127.0.0.1 on real files, on the transport under test
(--transport). The bodies are checked with the real message types of
Debian's python3-protobuf, built from the descriptor set the build compiles
from proto/istio/ (BUILD/schema/istio/istio.pb): the mirror's JSON parses
into them (json_format, unknown fields refused), and a gRPC client of
python3-grpcio subscribes to mcp-source itself and decodes each
Resource.body's bytes as the message its type URL names.

Usage: test_typed.py --build-dir BUILD [--transport grpc|h2c] [unittest args]
Runs with /usr/bin/python3 (protobuf, grpcio).
"""

import base64
import os
import re
import subprocess
import unittest

import e2e_common as common
from e2e_common import CM, DR, GW, STRUCT, VS, cm, doc, read_mirror, run

from google.protobuf import descriptor_pb2, descriptor_pool, json_format
from google.protobuf import message_factory

import grpc

SE = "istio/networking/v1alpha3/serviceentries"
AP = "istio/security/v1beta1/authorizationpolicies"
URL = "type.googleapis.com/"
TYPE_OF = {VS: "istio.networking.v1alpha3.VirtualService",
           DR: "istio.networking.v1alpha3.DestinationRule",
           GW: "istio.networking.v1alpha3.Gateway",
           SE: "istio.networking.v1alpha3.ServiceEntry",
           AP: "istio.security.v1beta1.AuthorizationPolicy"}
COLLECTION_OF = dict(common.COLLECTION_OF, ServiceEntry=SE,
                     AuthorizationPolicy=AP)
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


# --------------------------------------------------------------------------
# Real message types
# --------------------------------------------------------------------------

class Types:
    """Message classes of one descriptor pool holding Istio's set (as built)
    and MCP's own protos (compiled here with protoc)."""

    def __init__(self, tmp, extra_sets=()):
        mcp_set = os.path.join(tmp, "mcp.pb")
        subprocess.run(["protoc", "-I", os.path.join(REPO, "proto"),
                        "-I", "/usr/include", "--include_imports",
                        "--descriptor_set_out=" + mcp_set,
                        "mcp/v1alpha1/mcp.proto"], check=True)
        self.pool = descriptor_pool.DescriptorPool()
        seen = set()
        for path in [os.path.join(common.BUILD_DIR, "schema", "istio",
                                  "istio.pb"), mcp_set] + list(extra_sets):
            fds = descriptor_pb2.FileDescriptorSet()
            with open(path, "rb") as f:
                fds.ParseFromString(f.read())
            for fd in fds.file:
                if fd.name not in seen:
                    seen.add(fd.name)
                    self.pool.Add(fd)
        self.classes = {}

    def cls(self, name):
        if name not in self.classes:
            d = self.pool.FindMessageTypeByName(name)
            if hasattr(message_factory, "GetMessageClass"):
                self.classes[name] = message_factory.GetMessageClass(d)
            else:
                self.classes[name] = message_factory.MessageFactory(
                    self.pool).GetPrototype(d)
        return self.classes[name]

    def from_json(self, name, obj):
        """|obj| (proto3 JSON) as message |name|; unknown fields refused."""
        return json_format.ParseDict(obj, self.cls(name)(),
                                     descriptor_pool=self.pool)


def subscribe(types, addr, collections, timeout=common.WAIT):
    """{collection: [Resource]} of the first push of each of |collections|,
    received by a python3-grpcio ResourceSource client of |addr|."""
    req_cls = types.cls("istio.mcp.v1alpha1.RequestResources")
    res_cls = types.cls("istio.mcp.v1alpha1.Resources")
    channel = grpc.insecure_channel(addr)
    call = channel.stream_stream(
        "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=res_cls.FromString)
    reqs = []
    for c in collections:
        r = req_cls(collection=c)
        r.sink_node.id = "python-grpcio"
        reqs.append(r)
    got = {}
    stream = call(iter(reqs), timeout=timeout)
    try:
        for resp in stream:
            got.setdefault(resp.collection, list(resp.resources))
            if all(c in got for c in collections):
                break
    finally:
        stream.cancel()
        channel.close()
    return got


# --------------------------------------------------------------------------
# Istio documents, valid for Istio 1.6's types
# --------------------------------------------------------------------------

def vs(name, weights=(90, 10), ns="bookinfo"):
    return doc("VirtualService", name, ns, {
        "hosts": [name],
        "gateways": ["istio-system/ingress"],
        "http": [{
            "match": [{"uri": {"prefix": "/api"}}],
            "route": [{"destination": {"host": name, "subset": "v%d" % i,
                                       "port": {"number": 9080}},
                       "weight": w} for i, w in enumerate(weights, 1)],
            "timeout": "3s",
            "retries": {"attempts": 3, "perTryTimeout": "1s"},
        }],
    })


def dr(name, ns="bookinfo"):
    return doc("DestinationRule", name, ns, {
        "host": name,
        "trafficPolicy": {
            "loadBalancer": {"simple": "LEAST_CONN"},
            "connectionPool": {"tcp": {"maxConnections": 100},
                               "http": {"http1MaxPendingRequests": 10}},
            "outlierDetection": {"consecutiveErrors": 5, "interval": "10s",
                                 "baseEjectionTime": "30s"},
        },
        "subsets": [{"name": "v1", "labels": {"version": "v1"}},
                    {"name": "v2", "labels": {"version": "v2"},
                     "trafficPolicy": {"tls": {"mode": "ISTIO_MUTUAL"}}}],
    })


def gw(name, ns="istio-system"):
    return doc("Gateway", name, ns, {
        "selector": {"istio": "ingressgateway"},
        "servers": [{"port": {"number": 443, "name": "https",
                              "protocol": "HTTPS"},
                     "hosts": ["bookinfo.example.com"],
                     "tls": {"mode": "SIMPLE",
                             "credentialName": "bookinfo-cert"}}],
    })


def se(name, ns="egress"):
    return doc("ServiceEntry", name, ns, {
        "hosts": ["httpbin.org"],
        "location": "MESH_EXTERNAL",
        "resolution": "DNS",
        "ports": [{"number": 443, "name": "https", "protocol": "TLS"}],
    })


def ap(name, ns="bookinfo"):
    return doc("AuthorizationPolicy", name, ns, {
        "selector": {"matchLabels": {"app": "reviews"}},
        "action": "ALLOW",
        "rules": [{"from": [{"source": {"principals": [
                      "cluster.local/ns/bookinfo/sa/productpage"]}}],
                   "to": [{"operation": {"methods": ["GET"],
                                         "paths": ["/reviews/*"]}}],
                   "when": [{"key": "request.headers[x-probe]",
                             "values": ["1"]}]}],
    }, api="security.istio.io/v1beta1")


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------

class TypedBodies(common.Base):
    SOURCE_ARGS = ()  # the default: typed bodies
    YAML_INDENT = 2
    SANITIZER_STOP = 10  # SIGTERM: a sanitizer build's reports fail the test

    def setUp(self):
        super().setUp()
        self.mirror = os.path.join(self.tmp, "mirror")
        self.types = Types(self.tmp)

    def source(self, *args):
        p = self.start("mcp-source", ["--dir", self.config, "--listen",
                                      self.addr] + list(args))
        self.wait_for(lambda: "serving ResourceSource on" in p.stderr(),
                      "the source to listen", p)
        return p

    def sink(self, collections, *args, out=None):
        a = ["--connect", self.addr, "--out", out or self.mirror]
        for c in collections:
            a += ["--collection", c]
        return self.start("mcp-sink", a + ["--json"] + list(args))

    def mirror_of(self, collections, out=None):
        return read_mirror(out or self.mirror, collections)

    def wait_mirror(self, cond, what, *procs, collections, out=None):
        return self.wait_for(lambda: cond(self.mirror_of(collections, out)),
                             what, *procs)

    def put_all(self):
        self.put("bookinfo/routing.yaml", [vs("reviews"), vs("ratings",
                                                           (100,))])
        self.put("bookinfo/rules.yaml", [dr("reviews"), ap("reviews-viewer")])
        self.put("istio-system/gateway.yaml", [gw("ingress")])
        self.put("egress/external.yaml", [se("httpbin-ext")])
        self.put("istio-system/mesh.yaml",
                 [cm("istio", "istio-system", {"mesh": "enableTracing: true"})])

    def expected_bodies(self):
        """{(collection, name): spec} of every Istio document written."""
        want = {}
        for docs in self.files.values():
            for d in docs:
                c = COLLECTION_OF[d["kind"]]
                if c in TYPE_OF:
                    want[(c, common.resource_name(d))] = d["spec"]
        return want

    def test_typed_bodies_decode_as_istio_types(self):
        """The mirror holds each body as proto3 JSON of its real type, equal
        to the document's spec once both are parsed into that type."""
        self.put_all()
        src = self.source()
        colls = list(TYPE_OF) + [CM]
        snk = self.sink(colls)
        self.wait_synced(snk)
        got = self.mirror_of(colls)
        want = self.expected_bodies()
        self.assertEqual(len(want), 6)
        for (c, name), spec in want.items():
            with self.subTest(resource=name, collection=c):
                r = got[c][name]
                self.assertEqual(r["type_url"], URL + TYPE_OF[c])
                self.assertIsInstance(r["body"], dict)
                self.assertEqual(self.types.from_json(TYPE_OF[c], r["body"]),
                                 self.types.from_json(TYPE_OF[c], spec))
        # A weight, as Pilot reads it.
        route = got[VS]["bookinfo/reviews"]["body"]["http"][0]["route"]
        self.assertEqual([x["weight"] for x in route], [90, 10])
        # A kind without a schema keeps the Struct body.
        cmr = got[CM]["istio-system/istio"]
        self.assertEqual(cmr["type_url"], STRUCT)
        self.assertEqual(cmr["body"], {"mesh": "enableTracing: true"})
        self.assertNotIn("error", src.stderr())

    def test_wire_bodies_are_the_real_messages(self):
        """A python3-grpcio ResourceSource client: each Resource.body is an
        Any of the type URL Istio 1.6 uses whose bytes decode as that
        message and equal the spec."""
        if common.TRANSPORT not in ("grpc", "h2c"):
            self.skipTest("unknown transport")
        self.put_all()
        self.source()
        got = subscribe(self.types, self.addr, list(TYPE_OF))
        want = self.expected_bodies()
        n = 0
        for c in TYPE_OF:
            for res in got[c]:
                name = res.metadata.name
                with self.subTest(resource=name, collection=c):
                    self.assertEqual(res.body.type_url, URL + TYPE_OF[c])
                    m = self.types.cls(TYPE_OF[c]).FromString(res.body.value)
                    # Canonical bytes, nothing unknown: protobuf's own
                    # deterministic encoding is the same.
                    self.assertEqual(m.SerializeToString(deterministic=True),
                                     res.body.value)
                    self.assertEqual(m, self.types.from_json(
                        TYPE_OF[c], want[(c, name)]))
                    n += 1
        self.assertEqual(n, len(want))

    def test_bad_document_names_file_line_and_field_and_keeps_last_content(self):
        self.put("routing.yaml", [vs("reviews", (75, 25))])
        src = self.source()
        snk = self.sink([VS])
        self.wait_synced(snk)
        # weight "x" on the second route: line 27 of the indented JSON.
        bad = vs("reviews", (75, 25))
        bad["spec"]["http"][0]["route"][1]["weight"] = "x"
        self.put("routing.yaml", [bad])
        path = os.path.join(self.config, "routing.yaml")
        with open(path) as f:
            line = 1 + next(i for i, l in enumerate(f) if '"x"' in l)
        msg = ('%s:%d: spec.http[0].route[1].weight: expected an integer, '
               'got "x"; document skipped' % (path, line))
        self.wait_for(lambda: msg in src.stderr(), msg, src)
        # Another change of the collection: its push still holds reviews'
        # last good content.
        self.put("more.yaml", [vs("details", (100,))])
        got = self.wait_mirror(lambda m: "bookinfo/details" in m.get(VS, {})
                               and m, "details in the mirror", src, snk,
                               collections=[VS])
        route = got[VS]["bookinfo/reviews"]["body"]["http"][0]["route"]
        self.assertEqual([x["weight"] for x in route], [75, 25])
        # Fixed: pushed.
        self.put("routing.yaml", [vs("reviews", (50, 50))])
        self.wait_mirror(
            lambda m: [x["weight"] for x in m[VS]["bookinfo/reviews"]["body"]
                       ["http"][0]["route"]] == [50, 50],
            "the fixed weights", src, snk, collections=[VS])

    # Istio's documentation writes durations as Go does (30ms, 5m, 1.5h).
    GO_DR = ("apiVersion: networking.istio.io/v1alpha3\n"
             "kind: DestinationRule\n"
             "metadata: {name: reviews, namespace: bookinfo}\n"
             "spec:\n"
             "  host: reviews\n"
             "  trafficPolicy:\n"
             "    connectionPool:\n"
             "      tcp: {connectTimeout: %s}\n"
             "      http: {idleTimeout: %s}\n"
             "    outlierDetection: {interval: %s, baseEjectionTime: 15m}\n")

    def test_go_durations_are_served_as_istio_reads_them(self):
        """Go duration strings load; on the wire they are the Durations
        Istio reads (python's message from proto3's form, byte for byte);
        the mirror shows proto3's canonical form."""
        common.write_atomic(os.path.join(self.config, "dr.yaml"),
                            self.GO_DR % ("30ms", "1.5h", "5m"))
        src = self.source()
        want = self.types.from_json(TYPE_OF[DR], {
            "host": "reviews", "trafficPolicy": {
                "connectionPool": {"tcp": {"connectTimeout": "0.030s"},
                                   "http": {"idleTimeout": "5400s"}},
                "outlierDetection": {"interval": "300s",
                                     "baseEjectionTime": "900s"}}})
        got = subscribe(self.types, self.addr, [DR])[DR]
        self.assertEqual(len(got), 1)
        self.assertEqual(got[0].body.value,
                         want.SerializeToString(deterministic=True))
        snk = self.sink([DR])
        self.wait_synced(snk)
        body = self.mirror_of([DR])[DR]["bookinfo/reviews"]["body"]
        self.assertEqual(body["trafficPolicy"]["connectionPool"]["tcp"],
                         {"connectTimeout": "0.030s"})
        self.assertNotIn("error", src.stderr())

    def test_every_error_at_once_then_loaded_again(self):
        """Three bad durations: three lines at once, the last saying the
        document is skipped (a first load claims nothing stays); fixed, the
        file says it loaded again and its resource is pushed."""
        path = os.path.join(self.config, "dr.yaml")
        common.write_atomic(path, self.GO_DR % ("30 ms", "1.5", "5mins"))
        self.put("other.yaml", [dr("ratings")])
        src = self.source()
        snk = self.sink([DR])
        self.wait_synced(snk)
        p = "spec.trafficPolicy."
        want = [
            '%s:8: %sconnectionPool.tcp.connectTimeout: unknown unit " ms" '
            'in duration 30 ms (ns, us, ms, s, m, h)' % (path, p),
            '%s:9: %sconnectionPool.http.idleTimeout: expected a duration '
            'such as "1.5s" or "300ms", got 1.5' % (path, p),
            '%s:10: %soutlierDetection.interval: unknown unit "mins" in '
            'duration 5mins (ns, us, ms, s, m, h); document skipped'
            % (path, p)]
        self.wait_for(lambda: want[-1] in src.stderr(), "the third error",
                      src)
        errs = [l.split("error: ", 1)[1] for l in src.stderr_lines()
                if path in l and "error: " in l]
        self.assertEqual(errs, want)
        self.assertEqual(list(self.mirror_of([DR])[DR]), ["bookinfo/ratings"])
        common.write_atomic(path, self.GO_DR % ("30ms", "1.5h", "5m"))
        fixed = "%s: loaded again, 1 resource" % path
        self.wait_for(lambda: fixed in src.stderr(), fixed, src)
        self.assertIn("info: " + fixed, src.stderr())
        self.wait_mirror(lambda m: "bookinfo/reviews" in m.get(DR, {}),
                         "the fixed resource", src, snk, collections=[DR])
        self.assertNotIn("loaded before", src.stderr())

    def test_unknown_field_enum_and_range_are_reported(self):
        d1 = dr("a")
        d1["spec"]["trafficPolicy"]["loadBalancer"]["simple"] = "FASTEST"
        d2 = dr("b")
        d2["spec"]["hostz"] = "typo"
        d3 = dr("c")
        d3["spec"]["trafficPolicy"]["connectionPool"]["tcp"][
            "maxConnections"] = 5000000000
        self.put("dr.yaml", [d1, d2, d3, dr("good")])
        src = self.source()
        snk = self.sink([DR])
        self.wait_synced(snk)
        err = src.stderr()
        for field in ("spec.trafficPolicy.loadBalancer.simple: ",
                      "spec.hostz: ",
                      "spec.trafficPolicy.connectionPool.tcp.maxConnections: "):
            self.assertRegex(err, re.escape(os.path.join(self.config, "dr.yaml"))
                             + r":\d+: " + re.escape(field))
        self.assertEqual(list(self.mirror_of([DR])[DR]), ["bookinfo/good"])

    def test_body_struct_sends_struct_bodies(self):
        self.put("routing.yaml", [vs("reviews")])
        self.source("--body", "struct")
        snk = self.sink([VS])
        self.wait_synced(snk)
        r = self.mirror_of([VS])[VS]["bookinfo/reviews"]
        self.assertEqual(r["type_url"], STRUCT)
        self.assertEqual(r["body"], self.files["routing.yaml"][0]["spec"])

    def test_descriptor_set_and_kind_map_a_kind_to_a_message(self):
        proto = os.path.join(self.tmp, "door.proto")
        with open(proto, "w") as f:
            f.write('syntax = "proto3";\npackage example.v1;\n'
                    'import "google/protobuf/duration.proto";\n'
                    'message Door {\n  string color = 1;\n  int32 width = 2;\n'
                    '  google.protobuf.Duration close_after = 3;\n'
                    '  enum Kind { SWING = 0; SLIDING = 1; }\n  Kind kind = 4;\n'
                    '}\n')
        pb = os.path.join(self.tmp, "door.pb")
        subprocess.run(["protoc", "-I", self.tmp, "-I", "/usr/include",
                        "--include_imports", "--descriptor_set_out=" + pb,
                        "door.proto"], check=True)
        spec = {"color": "red", "width": 3, "closeAfter": "2.500s",
                "kind": "SLIDING"}
        self.put("door.yaml", [doc("Door", "front", "home", spec,
                                   api="example.com/v1")])
        coll = "k8s/example.com/v1/doors"
        self.source("--descriptor-set", pb,
                    "--kind", "example.com/v1/Door=example.v1.Door")
        typed = self.sink([coll], "--descriptor-set", pb)
        other = os.path.join(self.tmp, "mirror-untyped")
        untyped = self.sink([coll], out=other)  # without the set
        self.wait_synced(typed, untyped)
        r = self.mirror_of([coll])[coll]["home/front"]
        self.assertEqual(r["type_url"], URL + "example.v1.Door")
        self.assertEqual(r["body"], spec)
        types = Types(self.tmp, [pb])
        u = self.mirror_of([coll], other)[coll]["home/front"]
        self.assertEqual(u["type_url"], URL + "example.v1.Door")
        m = types.cls("example.v1.Door").FromString(
            base64.b64decode(u["body"]))
        self.assertEqual(m, types.from_json("example.v1.Door", spec))

    def test_bad_flags_are_clear_errors_at_start(self):
        garbage = os.path.join(self.tmp, "garbage.pb")
        with open(garbage, "wb") as f:
            f.write(b"\xff\xff\xff\xff not a descriptor set")
        missing = os.path.join(self.tmp, "missing.pb")
        src = [self.exe("mcp-source"), "--transport", common.TRANSPORT,
               "--dir", self.config, "--listen", "127.0.0.1:0"]
        snk = [self.exe("mcp-sink"), "--transport", common.TRANSPORT,
               "--collection", VS, "--connect", self.addr]
        cases = [
            (src + ["--descriptor-set", missing], 1,
             "--descriptor-set %s: No such file" % missing),
            (src + ["--descriptor-set", garbage], 1,
             "--descriptor-set %s: not a FileDescriptorSet" % garbage),
            (src + ["--kind", "example.com/v1/Door=example.v1.Door"], 1,
             "no message example.v1.Door"),
            (src + ["--kind", "Door=example.v1.Door"], 2,
             "--kind: expected GROUP/VERSION/KIND=full.message.Name"),
            (src + ["--kind", "example.com/v1/Door="], 2, "--kind: expected"),
            (src + ["--body", "json"], 2, "--body: expected typed or struct"),
            (snk + ["--descriptor-set", garbage], 1,
             "not a FileDescriptorSet"),
            (snk + ["--kind", "a/v1/K=x.Y"], 2, "unknown argument: --kind"),
        ]
        for argv, status, text in cases:
            with self.subTest(argv=" ".join(argv[1:])):
                rc, out, err = run(argv)
                self.assertEqual(rc, status, err)
                self.assertIn(text, err)


def main():
    argv = common.parse_args(__doc__.splitlines()[0])
    unittest.main(argv=argv, verbosity=2)


if __name__ == "__main__":
    main()
