#!/usr/bin/env python3
"""End-to-end tests of MCP over xDS (issue 22): mcp-source --api xds and
mcp-sink --api xds (an istiod-like client) over 127.0.0.1, on --transport,
checked through the sink's --json lines and --out mirror.

  XdsSotw*    StreamAggregatedResources: sync of every Istio type, typed
              bodies, edits, both version spellings, exit after sync
  XdsDelta*   DeltaAggregatedResources: removals, moving between replicas
              (--connect A,B) resuming with initial_resource_versions

Usage: test_xds.py --build-dir BUILD [--transport grpc|h2c]
Standard library only (e2e_common.py).
"""

import json
import os
import signal
import sys
import unittest

import e2e_common as common
from e2e_common import doc, free_port, read_mirror

VS = "networking.istio.io/v1alpha3/VirtualService"
VS_V1 = "networking.istio.io/v1/VirtualService"
VS_COLL = "istio/networking/v1alpha3/virtualservices"
VS_URL = "type.googleapis.com/istio.networking.v1alpha3.VirtualService"


class XdsBase(common.Base):
    SOURCE_ARGS = ()  # typed bodies, as istiod reads them
    TMP_PREFIX = "mcp-e2e-xds-"
    SANITIZER_STOP = 10

    def source(self, *extra, addr=None):
        src = self.start("mcp-source", ["--dir", self.config, "--listen",
                                        addr or self.addr, "--api", "xds",
                                        "--debounce", "0"] + list(extra))
        self.wait_for(lambda: "APIs:" in src.stderr(), "mcp-source to listen",
                      src)
        return src

    def sink(self, *extra, connect=None):
        return self.start("mcp-sink", ["--api", "xds", "--connect",
                                       connect or self.addr, "--json"] +
                          list(extra))

    def responses(self, sink, type_url):
        return [e for e in sink.events("response")
                if e["type_url"] == type_url]

    def wait_response(self, sink, type_url, pred, what):
        return self.wait_for(
            lambda: next((e for e in self.responses(sink, type_url)
                          if pred(e)), None), what, sink)


def vs(name, ns, host, api="networking.istio.io/v1alpha3"):
    return doc("VirtualService", name, ns, {"hosts": [host]}, api=api)


class XdsSotw(XdsBase):
    def test_sync_every_type_typed_then_edits_and_exit_after_sync(self):
        self.put("vs.yaml", [vs("reviews", "bookinfo", "reviews"),
                             vs("ratings", "bookinfo", "ratings",
                                api="networking.istio.io/v1")])
        self.source()
        out = os.path.join(self.tmp, "out")
        sink = self.sink("--out", out)
        first = self.wait_response(sink, VS, lambda e: True,
                                   "the VirtualService response")
        self.assertEqual(first["verdict"], "ack")
        self.assertEqual(sorted(r["name"] for r in first["resources"]),
                         ["bookinfo/ratings", "bookinfo/reviews"])
        self.assertEqual({r["type_url"] for r in first["resources"]},
                         {VS_URL})
        # Every type istiod asks for was answered, empty ones included.
        for t in ("mesh.istio.io/v1alpha1/MeshConfig",
                  "security.istio.io/v1beta1/AuthorizationPolicy"):
            self.wait_response(sink, t, lambda e: e["resources"] == [],
                               "the empty response of " + t)
        # The mirror is MCP's layout, bodies as proto3 JSON of the real type.
        self.wait_for(lambda: "every type was answered" in sink.stderr(),
                      "the sync", sink)
        with open(os.path.join(out, VS_COLL, "bookinfo", "reviews.json")) as f:
            self.assertEqual(json.load(f)["body"]["hosts"], ["reviews"])
        # An edit: the complete set again, with a new version.
        self.put("vs.yaml", [vs("reviews", "bookinfo", "reviews-v2")])
        e = self.wait_response(sink, VS, lambda e: e["version_info"] !=
                               first["version_info"], "the edit")
        self.assertEqual([r["name"] for r in e["resources"]],
                         ["bookinfo/reviews"])
        self.wait_for(lambda: not os.path.exists(
            os.path.join(out, VS_COLL, "bookinfo", "ratings.json")),
            "ratings.json removed from the mirror", sink)

        # A second sink asking for the newer spelling only, exiting once
        # answered.
        other = self.sink("--type", VS_V1, "--exit-after-sync")
        self.assertEqual(other.wait(), 0, self.logs())
        [r] = self.responses(other, VS_V1)
        self.assertEqual([x["name"] for x in r["resources"]],
                         ["bookinfo/reviews"])
        self.assertEqual(r["resources"][0]["type_url"], VS_URL)

    def test_bad_type_flag_is_a_usage_error(self):
        p = self.start("mcp-sink", ["--api", "xds", "--type",
                                    "not-a-gvk"])
        self.assertEqual(p.wait(), 2)
        self.assertIn("--type not-a-gvk", p.stderr())
        p = self.start("mcp-source", ["--dir", self.config, "--listen",
                                      self.addr, "--api", "mcp",
                                      "--xds-require-identity", "x"])
        self.assertEqual(p.wait(), 2)


class XdsDelta(XdsBase):
    def test_removal_then_move_to_replica_resumes_with_initial_versions(self):
        self.put("vs.yaml", [vs("a", "ns", "a"), vs("b", "ns", "b"),
                             vs("c", "ns", "c")])
        a = self.source()
        addr_b = "127.0.0.1:%d" % free_port()
        b = self.source(addr=addr_b)
        sink = self.sink("--delta", "--type", VS,
                         connect="%s,%s" % (self.addr, addr_b))
        first = self.wait_response(sink, VS, lambda e: True, "the first")
        self.assertEqual(sorted(r["name"] for r in first["resources"]),
                         ["ns/a", "ns/b", "ns/c"])
        self.put("vs.yaml", [vs("a", "ns", "a2"), vs("b", "ns", "b")])
        e = self.wait_response(sink, VS, lambda e: e["removed"],
                               "the removal")
        self.assertEqual(e["removed"], ["ns/c"])
        self.assertEqual([r["name"] for r in e["resources"]], ["ns/a"])
        n = len(self.responses(sink, VS))
        # Replica A goes; the sink moves to B, which has loaded the same
        # files: it holds a and b in their versions, so B sends nothing
        # but an empty first answer.
        a.signal(signal.SIGTERM)
        self.assertEqual(a.wait(), 0, self.logs())
        r = self.wait_for(lambda: self.responses(sink, VS)[n:], "B's answer",
                          sink)[0]
        self.assertEqual((r["resources"], r["removed"]), ([], []))
        self.assertEqual(r["verdict"], "ack")
        self.assertIn("with what is held", sink.stderr())
        del b


def main():
    argv = common.parse_args(__doc__)
    unittest.main(argv=argv)


if __name__ == "__main__":
    main()
