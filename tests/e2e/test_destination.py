#!/usr/bin/env python3
"""End-to-end tests of Conduit's Destination API (issue 14).

The real programs over 127.0.0.1: mcp-source serves Service and Endpoints
documents of a temporary directory as conduit.proxy.destination.Destination
beside MCP; mcp-sink --api destination is the client (one Get stream per
--destination AUTHORITY), its --json lines and --out files are checked
against the proto's rules as each file changes.

  Dest*        both programs on --transport
  CrossDest*   mcp-sink on the other transport (skipped when not built)

Usage: test_destination.py --build-dir BUILD [--transport grpc|h2c]
Standard library only (e2e_common.py).
"""

import json
import os
import signal
import sys
import unittest

import e2e_common as common
from e2e_common import doc, http_get, run, transport_built

WEB = "web.default.svc.cluster.local:80"
WEB_GRPC = "web.default.svc.cluster.local:90"


def service(name, ns, ports):
    return doc("Service", name, ns, {"ports": ports}, api="v1")


def endpoints(name, ns, ready, not_ready=(), ports=None):
    """An Endpoints document as Kubernetes writes it: `subsets` at the top
    level, no spec. |ready|: (ip, pod or None) pairs."""
    def addr(ip, pod):
        a = {"ip": ip}
        if pod:
            a["targetRef"] = {"kind": "Pod", "name": pod, "namespace": ns}
        return a
    subset = {"addresses": [addr(ip, pod) for ip, pod in ready],
              "ports": ports or [{"name": "http", "port": 8080},
                                 {"name": "grpc", "port": 9090}]}
    if not_ready:
        subset["notReadyAddresses"] = [addr(ip, pod) for ip, pod in not_ready]
    return {"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": name, "namespace": ns},
            "subsets": [subset] if ready or not_ready else []}


WEB_PORTS = [{"name": "http", "port": 80, "targetPort": 8080},
             {"name": "grpc", "port": 90}]
READY3 = [("10.1.0.1", "web-0"), ("10.1.0.2", "web-1"), ("10.1.0.3", None)]


class DestBase(common.Base):
    SOURCE_ARGS = ()
    TMP_PREFIX = "mcp-e2e-dest-"
    SANITIZER_STOP = 10  # SIGTERM first: sanitizer builds report leaks

    def source(self, *extra):
        src = self.start("mcp-source", ["--dir", self.config, "--listen",
                                        self.addr, "--debounce", "0"] +
                         list(extra))
        self.wait_for(lambda: "APIs:" in src.stderr(), "mcp-source to listen",
                      src)
        return src

    def sink(self, auths, *extra):
        args = ["--api", "destination", "--connect", self.addr, "--json"]
        for a in auths:
            args += ["--destination", a]
        return self.start("mcp-sink", args + list(extra))

    def updates(self, sink, auth):
        return [e for e in sink.events("destination")
                if e["authority"] == auth]

    def wait_updates(self, sink, auth, n):
        """The first |n| updates of |auth|."""
        return self.wait_for(
            lambda: len(self.updates(sink, auth)) >= n and
            self.updates(sink, auth)[:n],
            lambda: "%d updates of %s (have %s)" % (
                n, auth, self.updates(sink, auth)), sink)

    def out_file(self, out, auth):
        with open(os.path.join(out, auth + ".json")) as f:
            return json.load(f)


class DestRules(DestBase):
    def test_first_messages_by_the_rules_and_exit_after_sync(self):
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", READY3,
                                        not_ready=[("10.1.0.4", "web-3")])])
        self.put("empty.yaml", [service("empty", "ns2", [{"port": 80}])])
        self.source()
        out = os.path.join(self.tmp, "out")
        auths = [WEB, WEB_GRPC, "empty.ns2.svc.cluster.local",
                 "missing.default.svc.cluster.local:80", "10.9.8.7:1234",
                 "example.com:443", "web.default.svc.cluster.local.:80"]
        argv = [self.exe("mcp-sink"), "--transport",
                self.transport_for("mcp-sink"), "--api", "destination",
                "--connect", self.addr, "--json", "--out", out,
                "--exit-after-sync"]
        for a in auths:
            argv += ["--destination", a]
        rc, stdout, stderr = run(argv)
        self.assertEqual(rc, 0, stderr)
        ev = {}
        for line in stdout.splitlines():
            e = json.loads(line)
            self.assertEqual(e["event"], "destination")
            ev.setdefault(e["authority"], []).append(e)
        self.assertEqual(sorted(ev), sorted(auths))
        web = ev[WEB][0]
        self.assertEqual(web["update"], "add")
        self.assertEqual(sorted(web["addrs"]),
                         ["10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080"])
        self.assertEqual(web["total"], 3)
        self.assertNotIn("exists", web)
        self.assertEqual(sorted(ev[WEB_GRPC][0]["addrs"]),
                         ["10.1.0.1:9090", "10.1.0.2:9090", "10.1.0.3:9090"])
        self.assertEqual(ev["web.default.svc.cluster.local.:80"][0]["total"], 3)
        # A Service without Endpoints exists, with no endpoints.
        e = ev["empty.ns2.svc.cluster.local"][0]
        self.assertEqual((e["update"], e["exists"], e["total"], e["addrs"]),
                         ("no_endpoints", True, 0, []))
        for a in ("missing.default.svc.cluster.local:80", "example.com:443"):
            e = ev[a][0]
            self.assertEqual((e["update"], e["exists"]), ("no_endpoints", False))
        e = ev["10.9.8.7:1234"][0]
        self.assertEqual((e["update"], e["addrs"]), ("add", ["10.9.8.7:1234"]))
        # --out: DIR/<authority>.json, sorted addresses.
        self.assertEqual(self.out_file(out, WEB),
                         {"exists": True, "addrs": ["10.1.0.1:8080",
                                                    "10.1.0.2:8080",
                                                    "10.1.0.3:8080"]})
        self.assertEqual(self.out_file(out, "missing.default.svc.cluster.local:80"),
                         {"exists": False, "addrs": []})

    def test_changes_add_remove_no_endpoints_as_they_happen(self):
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", READY3)])
        self.source()
        out = os.path.join(self.tmp, "out")
        s = self.sink([WEB], "--out", out)
        self.wait_updates(s, WEB, 1)
        # A new ready address: an add with exactly it.
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default",
                                        READY3 + [("10.1.0.5", "web-5")])])
        u = self.wait_updates(s, WEB, 2)[1]
        self.assertEqual((u["update"], u["addrs"], u["total"]),
                         ("add", ["10.1.0.5:8080"], 4))
        # One gone: a remove with exactly it.
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default",
                                        READY3[1:] + [("10.1.0.5", "web-5")])])
        u = self.wait_updates(s, WEB, 3)[2]
        self.assertEqual((u["update"], u["addrs"], u["total"]),
                         ("remove", ["10.1.0.1:8080"], 3))
        self.wait_for(lambda: self.out_file(out, WEB)["addrs"] ==
                      ["10.1.0.2:8080", "10.1.0.3:8080", "10.1.0.5:8080"],
                      "the --out file", s)
        # A change that leaves the address set as it was: nothing.
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default",
                                        READY3[1:] + [("10.1.0.5", "web-5")],
                                        not_ready=[("10.1.0.9", None)])])
        # Every ready address becomes not ready: no_endpoints{exists:true}.
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", [],
                                        not_ready=READY3)])
        u = self.wait_updates(s, WEB, 4)[3]
        self.assertEqual((u["update"], u["exists"], u["total"]),
                         ("no_endpoints", True, 0))
        # The Service deleted: no_endpoints{exists:false}.
        self.put("web.yaml", [endpoints("web", "default", READY3)])
        u = self.wait_updates(s, WEB, 5)[4]
        self.assertEqual((u["update"], u["exists"]), ("no_endpoints", False))
        self.wait_for(lambda: self.out_file(out, WEB) ==
                      {"exists": False, "addrs": []}, "the --out file", s)
        # Back: an add with every endpoint.
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", READY3)])
        u = self.wait_updates(s, WEB, 6)[5]
        self.assertEqual((u["update"], sorted(u["addrs"]), u["total"]),
                         ("add", ["10.1.0.1:8080", "10.1.0.2:8080",
                                  "10.1.0.3:8080"], 3))
        # The port removed from the Service: the service port is gone.
        self.put("web.yaml", [service("web", "default", WEB_PORTS[1:]),
                              endpoints("web", "default", READY3)])
        u = self.wait_updates(s, WEB, 7)[6]
        self.assertEqual((u["update"], u["exists"]), ("no_endpoints", False))
        # Nothing more for that edit: the port back is the barrier (the
        # source writes the stream in order), so the 8th is its add.
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", READY3)])
        u = self.wait_updates(s, WEB, 8)[7]
        self.assertEqual((u["update"], sorted(u["addrs"]), u["total"]),
                         ("add", ["10.1.0.1:8080", "10.1.0.2:8080",
                                  "10.1.0.3:8080"], 3), self.updates(s, WEB))

    def test_mcp_and_destination_on_one_listener(self):
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", READY3)])
        self.source()
        m = self.start("mcp-sink", ["--connect", self.addr, "--collection",
                                    "k8s/core/v1/endpoints", "--json"])
        s = self.sink([WEB])
        self.wait_updates(s, WEB, 1)
        self.wait_synced(m)
        # One edit reaches both: the MCP resource and the address set.
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", READY3[:1])])
        u = self.wait_updates(s, WEB, 2)[1]
        self.assertEqual((u["update"], u["total"]), ("remove", 1))
        self.wait_for(lambda: len(m.responses("k8s/core/v1/endpoints")) >= 2,
                      "the MCP push of the Endpoints", m)

    def test_ipv6_endpoints(self):
        self.put("v6.yaml", [service("v6", "default", [{"port": 443}]),
                             endpoints("v6", "default",
                                       [("2001:DB8::0:1", "p"),
                                        ("10.0.0.1", None)],
                                       ports=[{"port": 8443}])])
        self.source()
        s = self.sink(["v6.default.svc.cluster.local:443"])
        u = self.wait_updates(s, "v6.default.svc.cluster.local:443", 1)[0]
        self.assertEqual(sorted(u["addrs"]),
                         ["10.0.0.1:8443", "[2001:db8::1]:8443"])

    def test_heartbeat_is_an_empty_add(self):
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", READY3)])
        self.source("--destination-heartbeat", "200")
        s = self.sink([WEB])
        us = self.wait_updates(s, WEB, 3)
        for u in us[1:]:
            self.assertEqual((u["update"], u["addrs"], u["total"]),
                             ("add", [], 3))

    def test_dns_zone(self):
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", READY3)])
        self.source("--dns-zone", "example.org")
        s = self.sink(["web.default.svc.example.org:80", WEB])
        u = self.wait_updates(s, "web.default.svc.example.org:80", 1)[0]
        self.assertEqual(u["total"], 3)
        u = self.wait_updates(s, WEB, 1)[0]
        self.assertEqual((u["update"], u["exists"]), ("no_endpoints", False))

    def test_reconnect_keeps_the_set_until_the_first_message(self):
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", READY3)])
        src = self.source()
        s = self.sink([WEB])
        self.wait_updates(s, WEB, 1)
        src.signal(signal.SIGTERM)
        self.assertEqual(src.wait(), 0, src.stderr())
        # While the source is away, the endpoints change.
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", READY3[:1])])
        self.source()
        u = self.wait_updates(s, WEB, 2)[1]
        self.assertEqual((u["update"], u["addrs"], u["total"]),
                         ("add", ["10.1.0.1:8080"], 1))

    def test_metrics_count_streams_and_updates_per_api(self):
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", READY3)])
        dport = common.free_port()
        self.source("--debug-listen", "127.0.0.1:%d" % dport)
        s = self.sink([WEB, WEB_GRPC])
        self.wait_updates(s, WEB, 1)
        self.wait_updates(s, WEB_GRPC, 1)

        def metric(name):
            st, _, body = http_get(dport, "/metrics")
            for line in body.splitlines():
                if line.startswith(name):
                    return float(line.rsplit(" ", 1)[1])
            return None
        self.wait_for(lambda: (metric('mcp_api_updates_total{component='
                                      '"mcp-source",api="destination"}') or 0)
                      >= 2, "the update counter", s)
        self.assertEqual(metric('mcp_api_streams_total{component="mcp-source"'
                                ',api="destination"}'), 2)
        self.assertEqual(metric('mcp_api_streams{component="mcp-source",'
                                'api="destination"}'), 2)
        # /debug/syncz lists the Destination calls with their API.
        st, _, body = http_get(dport, "/debug/syncz")
        self.assertEqual(st, 200)
        apis = [x.get("api") for x in json.loads(body)["streams"]]
        self.assertEqual(apis.count("destination"), 2, body)


class DestEtcd(DestBase):
    """--etcd: the directory is published into etcd and served from it; the
    view follows the store on that path too."""

    def setUp(self):
        import test_etcd
        if not (test_etcd.ETCD and test_etcd.ETCDCTL):
            self.skipTest("etcd-server and etcd-client needed")
        super().setUp()
        self.etcd = test_etcd.Etcd(self.tmp)
        self.etcd.start()

    def tearDown(self):
        super().tearDown()
        self.etcd.kill()

    def test_served_from_etcd(self):
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", READY3)])
        src = self.start("mcp-source", ["--dir", self.config, "--etcd",
                                        self.etcd.endpoint, "--listen",
                                        self.addr, "--debounce", "0"])
        self.wait_for(lambda: "is served" in src.stderr(),
                      "the etcd revision to be served", src)
        s = self.sink([WEB])
        # The first revision served may predate the publishing of the
        # directory (the sink then first hears of an absent service): wait
        # for the state the directory describes.
        self.wait_for(lambda: any(u["total"] == 3
                                  for u in self.updates(s, WEB)),
                      lambda: "the 3 endpoints (have %s)" %
                      self.updates(s, WEB), s)
        n = len(self.updates(s, WEB))
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", READY3[:2])])
        u = self.wait_updates(s, WEB, n + 1)[n]
        self.assertEqual((u["update"], u["addrs"], u["total"]),
                         ("remove", ["10.1.0.3:8080"], 2))


class DestFlags(DestBase):
    def test_api_flag(self):
        mk = [self.exe("mcp-source"), "--transport", common.TRANSPORT]
        rc, _, err = run(mk + ["--api", "mcp,bogus"])
        self.assertEqual(rc, 2, err)
        self.assertIn("bogus", err)
        rc, _, err = run(mk + ["--api", "destination", "--connect", self.addr])
        self.assertEqual(rc, 2, err)
        rc, _, err = run([self.exe("mcp-sink"), "--api", "destination",
                          "--connect", self.addr])
        self.assertEqual(rc, 2, err)
        self.assertIn("--destination", err)

    def test_destination_only_does_not_serve_mcp(self):
        self.put("web.yaml", [service("web", "default", WEB_PORTS),
                              endpoints("web", "default", READY3)])
        self.source("--api", "destination")
        s = self.sink([WEB])
        self.wait_updates(s, WEB, 1)
        m = self.start("mcp-sink", ["--connect", self.addr, "--collection",
                                    "k8s/core/v1/services", "--json"])
        self.wait_for(lambda: "12" in m.stderr() or "UNIMPLEMENTED" in
                      m.stderr().upper() or "unimplemented" in m.stderr(),
                      "the MCP sink to be refused", m)
        self.assertFalse(m.synced())

    def test_mcp_only_does_not_serve_destination(self):
        self.put("web.yaml", [service("web", "default", WEB_PORTS)])
        self.source("--api", "mcp")
        s = self.sink([WEB], "--log-level", "debug")
        self.wait_for(lambda: "status 12" in s.stderr(),
                      "the Get call to end UNIMPLEMENTED", s)
        self.assertEqual(self.updates(s, WEB), [])


class CrossDestRules(common.OtherTransportSink, DestRules):
    pass


def built():
    """Whether the programs have the API: mcp-sink says "not built" at
    once otherwise (a usage error either way)."""
    rc, _, err = run([common.exe("mcp-sink"), "--api", "destination"])
    return "not built" not in err and "has no clients" not in err


if __name__ == "__main__":
    argv = common.parse_args(__doc__.splitlines()[0])
    if not built():
        print("test_destination.py: the destination API is not built into the programs: skipped")
        sys.exit(77)
    unittest.main(argv=argv, verbosity=2)
