#!/usr/bin/env python3
"""End-to-end tests of the operations side of mcp-source and mcp-sink.

The real programs over 127.0.0.1 with --debug-listen and --log-format json:
every debug endpoint is checked against the state it reports, as the
programs show it elsewhere (the sink's --json lines, its mirror):

  /metrics         counters against the responses the sink printed
  /debug/syncz     versions, nonces and counters against the same
  /debug/journal   the sink's initial requests and answers, in order
  /healthz         200 while running
  /readyz          503 before the sync, 200 after (sink); 200 once loaded
                   (source)
  --log-format     every line of stderr is a JSON object

With --transport h2c, the same paths also answer plain HTTP/1.1 on the
transport's own port.

Usage: test_ops.py --build-dir BUILD [--transport grpc|h2c] [unittest args]

Standard library only (http.client); the processes and the waits are
e2e_common.py's. Every wait is bounded.
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import time
import unittest

import e2e_common as common
from e2e_common import DR, VS, doc, http_get, run

TRIGGER = "$triggerCollection"


# --------------------------------------------------------------------------
# Processes and files
# --------------------------------------------------------------------------

class Proc(common.Proc):
    """A program with --log-format json."""

    def log_messages(self):
        """The "msg" of every JSON log line."""
        msgs = []
        for line in self.stderr_lines():
            try:
                msgs.append(json.loads(line).get("msg", ""))
            except ValueError:
                pass
        return msgs


def vs(name, host, ns="default"):
    return doc("VirtualService", name, ns, {
        "hosts": [host],
        "http": [{"route": [{"destination": {"host": host}}]}]})


def dr(name, host, ns="default"):
    return doc("DestinationRule", name, ns, {"host": host})


# --------------------------------------------------------------------------
# HTTP and the exposition format
# --------------------------------------------------------------------------

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


def unescape(v):
    return re.sub(r'\\(.)', lambda m: {"n": "\n"}.get(m.group(1), m.group(1)),
                  v)


def parse_metrics(text):
    """{name: {"type": t, "help": h, "samples": [(labels dict, value)]}}.
    Fails on a line that is not of the text format."""
    fams = {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            kind, name, rest = line[2:6], *line[7:].split(" ", 1)
            fams.setdefault(name, {"samples": []})[kind.lower()] = rest
            continue
        m = SAMPLE.match(line)
        if not m:
            raise AssertionError("not the text format: %r" % line)
        labels = {}
        if m.group(3):
            pos = 0
            for lm in LABEL.finditer(m.group(3)):
                if lm.start() != pos:
                    raise AssertionError("bad labels: %r" % line)
                labels[lm.group(1)] = unescape(lm.group(2))
                pos = lm.end()
            if pos != len(m.group(3)):
                raise AssertionError("bad labels: %r" % line)
        name = m.group(1)
        base = re.sub(r'_(bucket|sum|count)$', "", name)
        fam = fams.get(name) or fams.get(base)
        if fam is None:
            raise AssertionError("sample without TYPE: %r" % line)
        fam["samples"].append((name, labels, float(m.group(4))))
    return fams


def value(fams, name, **labels):
    """The value of the sample |name| whose labels include |labels| (0 when
    there is none)."""
    base = re.sub(r'_(bucket|sum|count)$', "", name)
    fam = fams.get(name) or fams.get(base) or {"samples": []}
    for n, l, v in fam["samples"]:
        if n == name and all(l.get(k) == str(x) for k, x in labels.items()):
            return v
    return 0


# --------------------------------------------------------------------------
# Fixture
# --------------------------------------------------------------------------

class Base(common.Base):
    PROC = Proc
    TMP_PREFIX = "mcp-ops-"
    SANITIZER_STOP = 5

    def start(self, name, args):
        """(the program, its debug port), with JSON logs."""
        p = super().start(name, ["--log-format", "json",
                                 "--debug-listen", "127.0.0.1:0"] + list(args))
        port = self.wait_for(lambda: self.debug_port(p),
                             "%s's debug listener" % name, p)
        return p, port

    @staticmethod
    def debug_port(p):
        for m in p.log_messages():
            found = re.match(r"debug endpoints on http://127\.0\.0\.1:(\d+)/",
                             m)
            if found:
                return int(found.group(1))
        return None

    def start_source(self, dial=False, *args):
        files = ["--dir", self.config]
        role = ["--connect" if dial else "--listen", self.addr]
        p, port = self.start("mcp-source", files + role + list(args))
        if not dial:
            self.wait_for(lambda: any("serving ResourceSource" in m
                                      for m in p.log_messages()),
                          "the source to listen", p)
        return p, port

    def start_sink(self, listen=False, *args):
        colls = ["--collection", VS, "--collection", DR]
        role = ["--listen" if listen else "--connect", self.addr]
        p, port = self.start("mcp-sink", colls + role + ["--json"] +
                             list(args))
        if listen:
            self.wait_for(lambda: any(e.get("event") == "listening"
                                      for e in p.events()),
                          "the sink to listen", p)
        return p, port

    def standard_files(self):
        self.put("vs.yaml", [vs("reviews", "reviews"),
                             vs("ratings", "ratings")])
        self.put("dr.yaml", [dr("reviews", "reviews")])

    def metrics(self, port):
        status, headers, body = http_get(port, "/metrics")
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["content-type"],
                         "text/plain; version=0.0.4; charset=utf-8")
        return parse_metrics(body)

    def json_page(self, port, path):
        status, headers, body = http_get(port, path)
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["content-type"], "application/json")
        return json.loads(body)

    def verdicts(self, snk, collection, verdict):
        return len([e for e in snk.responses(collection, triggers=True)
                    if e["verdict"] == verdict])

    def assert_json_logs(self, p, need_context=True):
        """Every stderr line of |p| is a JSON object with ts, level, prog
        and msg (gRPC's own log lines, "E0101 ...", are not ours)."""
        lines = p.stderr_lines()
        self.assertTrue(lines, "%s logged nothing" % p.name)
        context = 0
        for line in lines:
            if re.match(r"^[EWID]\d{4} ", line):
                continue
            o = json.loads(line)  # raises on a line that is not JSON
            self.assertIsInstance(o, dict)
            for k in ("ts", "level", "prog", "msg"):
                self.assertIn(k, o, line)
            self.assertRegex(o["ts"],
                             r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
            self.assertEqual(o["prog"], p.name)
            self.assertIn(o["level"], ("error", "warning", "info", "debug"))
            if "stream" in o:
                self.assertIsInstance(o["stream"], int)
                context += 1
        if need_context:
            self.assertGreater(context, 0, "no line with a stream context")


# --------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------

class SinkDialsSource(Base):

    def test_endpoints_against_state(self):
        self.standard_files()
        # The sink first, dialing nobody: alive, not ready.
        snk, sport = self.start_sink(False, "--node-id", "ops-node",
                                     "--annotation", "team=mesh")
        status, _, body = http_get(sport, "/healthz")
        self.assertEqual((status, body), (200, "ok\n"))
        status, _, _ = http_get(sport, "/readyz")
        self.assertEqual(status, 503)
        syncz = self.json_page(sport, "/debug/syncz")
        self.assertEqual(syncz["role"], "sink")
        self.assertFalse(syncz["synced"])
        self.assertEqual(syncz["node"], {"id": "ops-node",
                                         "annotations": {"team": "mesh"}})
        self.assertEqual([c["collection"] for c in syncz["collections"]],
                         [VS, DR])
        self.assertEqual([c["acked_version"] for c in syncz["collections"]],
                         ["", ""])
        # Its failed dials are send failures (UNAVAILABLE), not clients.
        self.wait_for(lambda: value(self.metrics(sport),
                                    "istio_mcp_send_failures_total",
                                    code=14) >= 1,
                      "a failed dial to be counted", snk)
        self.assertEqual(value(self.metrics(sport), "istio_mcp_clients_total",
                               component="mcp-sink"), 0)

        src, oport = self.start_source(False, "--debounce", "0")
        status, _, body = http_get(oport, "/readyz")
        self.assertEqual((status, body), (200, "ready\n"))
        self.wait_synced(snk)
        status, _, _ = http_get(sport, "/readyz")
        self.assertEqual(status, 200)

        # A change: a second push of the VirtualServices.
        n = len(snk.responses(VS))
        self.put("vs.yaml", [vs("reviews", "reviews-v2"),
                             vs("ratings", "ratings")])
        self.wait_for(lambda: len(snk.responses(VS)) > n, "the second push",
                      snk)

        def counters_agree():
            s, o = self.metrics(sport), self.metrics(oport)
            for c in (VS, DR):
                acks = self.verdicts(snk, c, "ack")
                if not (value(s, "istio_mcp_request_acks_total",
                              collection=c) == acks ==
                        value(o, "istio_mcp_request_acks_total",
                              collection=c) ==
                        value(s, "mcp_pushes_total", collection=c) ==
                        value(o, "mcp_pushes_total", collection=c)):
                    return False
            return True
        self.wait_for(counters_agree,
                      "/metrics ACKs to match the sink's JSON lines",
                      snk, src)
        s, o = self.metrics(sport), self.metrics(oport)
        self.assertEqual(self.verdicts(snk, VS, "ack"), 2)
        for fams in (s, o):
            self.assertEqual(fams["istio_mcp_clients_total"]["type"],
                             "gauge")
            self.assertEqual(fams["istio_mcp_request_acks_total"]["type"],
                             "counter")
            self.assertEqual(value(fams, "istio_mcp_clients_total"), 1)
            self.assertEqual(value(fams, "mcp_streams_total"), 1)
            self.assertEqual(value(fams, "istio_mcp_request_nacks_total"), 0)
        self.assertEqual(o["mcp_push_ack_latency_seconds"]["type"],
                         "histogram")
        total = self.verdicts(snk, VS, "ack") + self.verdicts(snk, DR, "ack")
        self.assertEqual(value(o, "mcp_push_ack_latency_seconds_count"),
                         total)
        self.assertEqual(value(o, "mcp_push_ack_latency_seconds_bucket",
                               le="+Inf"), total)
        self.assertEqual(value(s, "istio_mcp_reconnections"), 0)
        # Message sizes: one observation per push on both sides, the same
        # encoded messages, and the source's byte total is their sum.
        sent = 0
        for c in (VS, DR):
            n = len(snk.responses(c))
            for fams in (s, o):
                self.assertEqual(value(fams, "istio_mcp_message_sizes_bytes_count",
                                       collection=c), n)
            size = value(o, "istio_mcp_message_sizes_bytes_sum", collection=c)
            self.assertGreater(size, 0)
            self.assertEqual(value(s, "istio_mcp_message_sizes_bytes_sum",
                                   collection=c), size)
            sent += size
        self.assertEqual(value(o, "mcp_sent_bytes_total"), sent)

        last = {c: snk.responses(c)[-1] for c in (VS, DR)}
        # The source's view of the stream.
        syncz = self.json_page(oport, "/debug/syncz")
        self.assertEqual(syncz["role"], "source")
        self.assertEqual(len(syncz["streams"]), 1)
        st = syncz["streams"][0]
        self.assertEqual(st["node"], {"id": "ops-node",
                                      "annotations": {"team": "mesh"}})
        self.assertRegex(st["peer"], r"127\.0\.0\.1:\d+$")
        self.assertEqual(st["identity"], "")
        self.assertEqual(st["identities"], [])
        self.assertFalse(st["dialed"])
        by = {c["collection"]: c for c in st["collections"]}
        self.assertEqual(sorted(by), sorted([VS, DR]))
        for c in (VS, DR):
            self.assertEqual(by[c]["acked_version"],
                             last[c]["system_version_info"])
            self.assertEqual(by[c]["pending_nonce"], "")
            self.assertEqual(by[c]["pending_version"], "")
            self.assertEqual(by[c]["pending_nonce_age_seconds"], 0)
            self.assertEqual(by[c]["acks"], self.verdicts(snk, c, "ack"))
            self.assertEqual(by[c]["pushes"], len(snk.responses(c)))
            self.assertEqual((by[c]["nacks"], by[c]["last_nack_code"],
                              by[c]["last_nack_message"]), (0, 0, ""))
        # The sink's view of its collections.
        syncz = self.json_page(sport, "/debug/syncz")
        self.assertTrue(syncz["synced"])
        self.assertEqual(len(syncz["streams"]), 1)
        self.assertTrue(syncz["streams"][0]["dialed"])
        for c in syncz["collections"]:
            e = last[c["collection"]]
            self.assertEqual(c["acked_version"], e["system_version_info"])
            self.assertEqual(c["held"], e["total"])
            self.assertEqual(c["acks"], self.verdicts(snk, c["collection"],
                                                      "ack"))
        # The journal: one request per collection, in order, then the
        # answers, with the nonces of the responses.
        journal = self.json_page(sport, "/debug/journal")["journal"]
        self.assertEqual([(j["kind"], j["collection"], j["nonce"])
                          for j in journal[:2]],
                         [("request", VS, ""), ("request", DR, "")])
        answers = [(j["kind"], j["collection"], j["nonce"])
                   for j in journal[2:]]
        want = [(e["verdict"], e["collection"], e["nonce"])
                for e in snk.responses(triggers=True)]
        self.assertEqual(answers, want)

        # Several requests on one connection (keep-alive), HEAD, 404, 405.
        conn = http.client.HTTPConnection("127.0.0.1", oport, timeout=5)
        for path in ("/healthz", "/metrics", "/debug/syncz"):
            status, _, _ = http_get(oport, path, conn=conn)
            self.assertEqual(status, 200)
        status, headers, body = http_get(oport, "/metrics", "HEAD", conn=conn)
        self.assertEqual(status, 200)
        self.assertEqual(body, "")
        self.assertGreater(int(headers["content-length"]), 0)
        status, _, _ = http_get(oport, "/nope", conn=conn)
        self.assertEqual(status, 404)
        status, _, _ = http_get(oport, "/debug/journal", conn=conn)
        self.assertEqual(status, 404)  # a sink's page
        status, headers, _ = http_get(oport, "/metrics", "POST", conn=conn)
        self.assertEqual(status, 405)
        self.assertEqual(headers.get("allow"), "GET, HEAD")
        conn.close()

        # The logs are JSON lines, with stream context.
        for p in (src, snk):
            p.signal(signal.SIGTERM)
            self.assertEqual(p.wait(), 0, self.logs())
        self.assert_json_logs(src)
        self.assert_json_logs(snk)
        lines = [json.loads(l) for l in snk.stderr_lines()
                 if l.startswith("{")]
        applied = [o for o in lines if "applied" in o["msg"]]
        self.assertTrue(applied)
        self.assertIn(applied[0]["collection"], (VS, DR))
        connected = [e for e in snk.events() if e.get("event") == "connected"]
        self.assertEqual(applied[0]["stream"], connected[0]["stream"])

    def test_nack_counted(self):
        self.standard_files()
        # x..y is no Kubernetes name: only a permissive source serves it.
        src, oport = self.start_source(False, "--debounce", "0",
                                       "--names", "permissive")
        snk, sport = self.start_sink(False, "--out",
                                     os.path.join(self.tmp, "mirror"))
        self.wait_synced(snk)
        n = len(snk.responses(VS))
        self.put("evil.yaml", [vs("x..y", "evil")])
        self.wait_for(lambda: len(snk.responses(VS)) > n, "the NACK", snk)
        e = snk.responses(VS)[-1]
        self.assertEqual(e["verdict"], "nack")

        def agree():
            s, o = self.metrics(sport), self.metrics(oport)
            nacks = self.verdicts(snk, VS, "nack")
            return (nacks == 1 and
                    value(s, "istio_mcp_request_nacks_total", collection=VS,
                          code="InvalidArgument") == nacks ==
                    value(o, "istio_mcp_request_nacks_total", collection=VS,
                          code="InvalidArgument"))
        self.wait_for(agree, "the NACK in both /metrics", snk, src)
        st = self.json_page(oport, "/debug/syncz")["streams"][0]
        c = [c for c in st["collections"] if c["collection"] == VS][0]
        self.assertEqual(c["last_nack_code"], 3)
        self.assertEqual(c["last_nack_message"], e["error"]["message"])
        self.assertEqual(c["nacks"], 1)
        c = [c for c in self.json_page(sport, "/debug/syncz")["collections"]
             if c["collection"] == VS][0]
        self.assertEqual((c["last_nack_code"], c["last_nack_message"]),
                         (3, e["error"]["message"]))
        journal = self.json_page(sport, "/debug/journal")["journal"]
        self.assertEqual((journal[-1]["kind"], journal[-1]["code"],
                          journal[-1]["nonce"]), ("nack", 3, e["nonce"]))


class ConfigHealth(Base):
    """Config health on the source's /metrics, a clean client exit, and
    the one form of "peer" in both programs' JSON logs and events."""

    def test_config_metrics_follow_the_files(self):
        self.standard_files()
        src, oport = self.start_source(False, "--debounce", "0")
        m = self.metrics(oport)
        for name in ("mcp_config_files_with_errors",
                     "mcp_config_last_load_success_timestamp_seconds",
                     "mcp_config_resources"):
            self.assertEqual(m[name]["type"], "gauge", name)
        self.assertEqual(value(m, "mcp_config_files_with_errors"), 0)
        self.assertEqual(value(m, "mcp_config_resources", collection=VS), 2)
        self.assertEqual(value(m, "mcp_config_resources", collection=DR), 1)
        first = value(m, "mcp_config_last_load_success_timestamp_seconds")
        self.assertLess(abs(first - time.time()), 60)
        # A broken file: counted, and its neighbours still load.
        with open(os.path.join(self.config, "broken.yaml"), "w") as f:
            f.write("kind: [unclosed\n")
        self.put("more.yaml", [dr("ratings", "ratings")])
        self.wait_for(lambda: value(self.metrics(oport),
                                    "mcp_config_files_with_errors") == 1 and
                      value(self.metrics(oport), "mcp_config_resources",
                            collection=DR) == 2,
                      "the broken file counted, the good one loaded", src)
        # Rescans go on: the load time moves.
        self.wait_for(lambda: value(
            self.metrics(oport),
            "mcp_config_last_load_success_timestamp_seconds") > first,
            "a later good load", src)
        # Fixed: no file in error; a file removed: its resources go.
        self.put("broken.yaml", [vs("details", "details")])
        self.remove("more.yaml")
        self.wait_for(lambda: value(self.metrics(oport),
                                    "mcp_config_files_with_errors") == 0 and
                      value(self.metrics(oport), "mcp_config_resources",
                            collection=VS) == 3 and
                      value(self.metrics(oport), "mcp_config_resources",
                            collection=DR) == 1,
                      "the fixed file loaded", src)

    def test_unknown_kind_is_warned_and_counted(self):
        """A kind its built-in group does not have (VirtualServce): served,
        warned with the closest kind, counted in
        mcp_config_unknown_kinds_total."""
        self.standard_files()
        typo = vs("typo", "typo")
        typo["kind"] = "VirtualServce"
        self.put("typo.yaml", [typo])
        src, oport = self.start_source(False, "--debounce", "0")
        m = self.metrics(oport)
        self.assertEqual(m["mcp_config_unknown_kinds_total"]["type"], "counter")
        self.assertEqual(value(m, "mcp_config_unknown_kinds_total"), 1)
        want = ("no kind VirtualServce in networking.istio.io/v1alpha3; did "
                "you mean VirtualService? served as an untyped collection")
        lines = [json.loads(l) for l in src.stderr_lines()
                 if l.startswith("{") and want in l]
        self.assertEqual(len(lines), 1, src.stderr())
        self.assertEqual(lines[0]["level"], "warning")
        self.assertRegex(lines[0]["msg"], "^%s:[0-9]+: %s$" % (
            re.escape(os.path.join(self.config, "typo.yaml")), re.escape(want)))
        # Not an error: the files count as good.
        self.assertEqual(value(m, "mcp_config_files_with_errors"), 0)
        self.assertEqual(value(m, "mcp_config_resources",
                               collection="istio/networking/v1alpha3/"
                                          "virtualservces"), 1)
        # Another one read later: counted too.
        self.put("typo2.yaml", [dict(typo, kind="DestinationRul")])
        self.wait_for(lambda: value(self.metrics(oport),
                                    "mcp_config_unknown_kinds_total") == 2,
                      "the second typo counted", src)

    def test_clean_sink_exit_is_not_a_failure(self):
        self.standard_files()
        src, oport = self.start_source(False, "--debounce", "0")
        snk, _ = self.start_sink(False)
        self.wait_synced(snk)
        self.wait_for(lambda: value(self.metrics(oport),
                                    "istio_mcp_clients_total") == 1,
                      "the sink counted as a client", src)
        snk.signal(signal.SIGTERM)
        self.assertEqual(snk.wait(), 0)
        self.wait_for(lambda: value(self.metrics(oport),
                                    "istio_mcp_clients_total") == 0,
                      "the stream to end", src)
        fams = self.metrics(oport)
        self.assertEqual(
            fams.get("istio_mcp_recv_failures_total", {}).get("samples", []),
            [], "a clean exit counted as a failure")

    PEER = re.compile(r"^(\d{1,3}(\.\d{1,3}){3}|\[[0-9a-fA-F:.]+\]|"
                      r"localhost):\d+$")

    def peers(self, p):
        """Every "peer" of |p|'s JSON log lines and --json events."""
        found = []
        for line in p.stderr_lines() + p.stdout_lines():
            if line.startswith("{"):
                o = json.loads(line)
                if "peer" in o:
                    found.append(o["peer"])
        return found

    def check_peers(self, *procs):
        for p in procs:
            got = self.peers(p)
            self.assertTrue(got, "%s logged no peer" % p.name)
            for peer in got:
                self.assertRegex(peer, self.PEER, p.name)

    def test_one_peer_form_both_directions(self):
        self.standard_files()
        src, _ = self.start_source(False, "--debounce", "0")
        snk, _ = self.start_sink(False)
        self.wait_synced(snk)
        src.signal(signal.SIGTERM)
        snk.signal(signal.SIGTERM)
        self.assertEqual(src.wait(), 0)
        self.assertEqual(snk.wait(), 0)
        self.check_peers(src, snk)
        # The sink listens, the source dials it.
        self.addr = "127.0.0.1:%d" % common.free_port()
        snk, _ = self.start_sink(True)
        src, _ = self.start_source(True, "--debounce", "0")
        self.wait_synced(snk)
        src.signal(signal.SIGTERM)
        snk.signal(signal.SIGTERM)
        self.assertEqual(src.wait(), 0)
        self.assertEqual(snk.wait(), 0)
        self.check_peers(src, snk)

    def test_ipv6_peer_in_brackets(self):
        try:
            with socket.socket(socket.AF_INET6) as s:
                s.bind(("::1", 0))
        except OSError:
            self.skipTest("no IPv6 loopback")
        self.standard_files()
        self.addr = "[::1]:%d" % common.free_port()
        src, _ = self.start_source(False, "--debounce", "0")
        snk, _ = self.start_sink(False)
        self.wait_synced(snk)
        src.signal(signal.SIGTERM)
        snk.signal(signal.SIGTERM)
        self.assertEqual(src.wait(), 0)
        self.assertEqual(snk.wait(), 0)
        got = self.peers(src)
        self.assertTrue(got)
        for peer in got:
            self.assertRegex(peer, r"^\[::1\]:\d+$")
        for peer in self.peers(snk):
            self.assertRegex(peer, r"^\[::1\]:\d+$")


    def test_exit_after_sync_is_clean_at_the_source(self):
        """--exit-after-sync half-closes and lets the source end the
        stream: the source counts every ACK and no failed stream (a
        cancel right after the last ACK could beat it and count one)."""
        self.standard_files()
        src, oport = self.start_source(False, "--debounce", "0")
        for run in range(1, 4):
            snk, _ = self.start_sink(False, "--exit-after-sync")
            self.assertEqual(snk.wait(), 0, self.logs())
            self.assertEqual(snk.events("disconnected")[-1]["status"], 0,
                             self.logs())

            def counted(run=run):
                o = self.metrics(oport)
                return all(value(o, "istio_mcp_request_acks_total",
                                 collection=c) == run for c in (VS, DR)) \
                    and value(o, "istio_mcp_clients_total") == 0
            self.wait_for(counted, "the source to count the ACKs", src)
            o = self.metrics(oport)
            fails = [(n, l, v) for n, l, v in o.get(
                "istio_mcp_recv_failures_total", {"samples": []})["samples"]
                if v]
            self.assertEqual(fails, [], self.logs())
        self.assertNotIn("cancel", " ".join(src.log_messages()).lower())


class SourceDialsSink(Base):

    def test_listening_sink(self):
        self.standard_files()
        snk, sport = self.start_sink(True)
        status, _, _ = http_get(sport, "/readyz")
        self.assertEqual(status, 503)
        self.assertEqual(self.json_page(sport, "/debug/syncz")["streams"], [])
        src, oport = self.start_source(True, "--debounce", "0")
        self.wait_synced(snk)
        status, _, _ = http_get(sport, "/readyz")
        self.assertEqual(status, 200)

        def agree():
            s, o = self.metrics(sport), self.metrics(oport)
            return all(
                value(s, "istio_mcp_request_acks_total", collection=c) ==
                self.verdicts(snk, c, "ack") ==
                value(o, "istio_mcp_request_acks_total", collection=c)
                for c in (VS, DR)) and \
                self.verdicts(snk, TRIGGER, "nack") == 1 and \
                value(o, "istio_mcp_clients_total") == 1 and \
                value(s, "istio_mcp_clients_total") == 1
        self.wait_for(agree, "/metrics to match the JSON lines", snk, src)
        # Istio's trigger is expected: answered (the NACK Istio's sources
        # wait for) but no rejection: not counted, not warned, marked.
        self.assertEqual(value(self.metrics(sport),
                               "istio_mcp_request_nacks_total",
                               collection=TRIGGER), 0)
        trig = snk.responses(TRIGGER, triggers=True)
        self.assertEqual([e.get("trigger") for e in trig], [True], trig)
        for line in snk.stderr_lines():
            if TRIGGER in line and line.startswith("{"):
                self.assertNotIn(json.loads(line)["level"],
                                 ("warn", "warning", "error"), line)
        st = self.json_page(oport, "/debug/syncz")["streams"][0]
        self.assertTrue(st["dialed"])
        by = {c["collection"]: c for c in st["collections"]}
        for c in (VS, DR):
            self.assertEqual(by[c]["acked_version"],
                             snk.responses(c)[-1]["system_version_info"])

        # The source goes and comes back: one reconnection on each side.
        src.signal(signal.SIGTERM)
        self.assertEqual(src.wait(), 0, self.logs())
        self.wait_for(lambda: value(self.metrics(sport),
                                    "istio_mcp_clients_total") == 0,
                      "the sink to see the stream end", snk)
        # Still ready: it synced once.
        self.assertEqual(http_get(sport, "/readyz")[0], 200)
        src2, oport2 = self.start_source(True, "--debounce", "0")
        self.wait_for(lambda: value(self.metrics(sport),
                                    "mcp_streams_total") == 2 and
                      value(self.metrics(sport),
                            "istio_mcp_clients_total") == 1,
                      "the second stream", snk, src2)
        self.assertEqual(value(self.metrics(sport), "istio_mcp_reconnections"),
                         1)
        self.assertEqual(value(self.metrics(oport2),
                               "istio_mcp_reconnections"), 0)
        self.assertEqual(len(self.json_page(sport, "/debug/syncz")["streams"]),
                         1)


class OnTransportPort(Base):
    """h2c answers the debug paths as plain HTTP/1.1 on its own port."""

    def setUp(self):
        if common.TRANSPORT != "h2c":
            self.skipTest("only the h2c transport answers HTTP/1.1 on its port")
        super().setUp()

    def test_same_pages_on_the_mcp_port(self):
        self.standard_files()
        src, oport = self.start_source(False, "--debounce", "0")
        snk, sport = self.start_sink(False)
        self.wait_synced(snk)
        mport = int(self.addr.rsplit(":", 1)[1])
        status, _, body = http_get(mport, "/healthz")
        self.assertEqual((status, body), (200, "ok\n"))
        self.assertEqual(http_get(mport, "/readyz")[0], 200)
        self.wait_for(lambda: value(self.metrics(mport),
                                    "istio_mcp_request_acks_total",
                                    collection=VS) ==
                      self.verdicts(snk, VS, "ack"), "the ACKs", src, snk)
        syncz = self.json_page(mport, "/debug/syncz")
        other = self.json_page(oport, "/debug/syncz")
        self.assertEqual(syncz["role"], "source")
        self.assertEqual([(s["id"], s["node"]) for s in syncz["streams"]],
                         [(s["id"], s["node"]) for s in other["streams"]])
        self.assertEqual(len(syncz["streams"]), 1)
        self.assertEqual(http_get(mport, "/nope")[0], 404)


class CommandLine(Base):

    def test_usage_errors(self):
        for prog, extra in (("mcp-source", []),
                            ("mcp-sink", ["--collection", VS])):
            for bad in (["--debug-listen", "nocolon"],
                        ["--debug-listen", "127.0.0.1:99999"],
                        ["--debug-listen"],
                        ["--log-format", "xml"]):
                rc, out, err = run([self.exe(prog)] + extra + bad)
                self.assertEqual(rc, 2, (prog, bad, err))
                self.assert_usage_error(prog, err)

    def test_debug_port_in_use(self):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            busy = "127.0.0.1:%d" % s.getsockname()[1]
            for prog, extra in (("mcp-source", ["--listen", self.addr]),
                                ("mcp-sink", ["--collection", VS,
                                              "--connect", self.addr])):
                rc, out, err = run([self.exe(prog), "--transport",
                                    common.TRANSPORT, "--debug-listen", busy] +
                                   extra)
                self.assertEqual(rc, 1, (prog, err))
                self.assertIn("--debug-listen", err)

    def test_version(self):
        info = json.loads(subprocess.run(
            ["meson", "introspect", "--projectinfo", common.BUILD_DIR],
            stdout=subprocess.PIPE, check=True, text=True).stdout)
        for prog in ("mcp-source", "mcp-sink"):
            rc, out, err = run([self.exe(prog), "--version"])
            self.assertEqual((rc, out, err),
                             (0, "%s %s\n" % (prog, info["version"]), ""))

    def test_mcp_port_in_use_names_the_errno(self):
        """A first-time user's port in use: "HOST:PORT: address already in
        use" on one line, exit 1, no "invalid argument" and no gRPC dump."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            busy = "127.0.0.1:%d" % s.getsockname()[1]
            for prog, extra in (("mcp-source", ["--dir", self.config]),
                                ("mcp-sink", ["--collection", VS])):
                rc, out, err = run([self.exe(prog), "--transport",
                                    common.TRANSPORT, "--listen", busy] +
                                   extra)
                self.assertEqual(rc, 1, (prog, err))
                self.assertIn("%s: address already in use" % busy, err)
                self.assertNotIn("invalid argument", err)
                for line in err.splitlines():  # only our own lines
                    self.assertRegex(line, r"^\S+Z %s: (info|error): " % prog)

    def test_text_logs_carry_a_timestamp(self):
        p = Proc("mcp-source", [self.exe("mcp-source"), "--transport",
                                common.TRANSPORT, "--listen", self.addr])
        self.procs.append(p)
        self.wait_for(lambda: any("serving ResourceSource" in l
                                  for l in p.stderr_lines()),
                      "the source to listen", p)
        p.signal(signal.SIGTERM)
        self.assertEqual(p.wait(), 0)
        for line in p.stderr_lines():
            if not re.match(r"^[EWID]\d{4} ", line):
                # Issue 24 item 13: the time first, as in the JSON logs.
                self.assertRegex(line, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z "
                                       r"mcp-source: (info|warning|error|"
                                       r"debug): ")


# --------------------------------------------------------------------------
# Large SinkNodes (issue 12, point 3): the source refuses a node over its
# limits, and /debug/syncz stays bounded however many streams it lists.
# The sinks are tests/e2e/sinknode_flood.py under Debian's python3 (grpcio).
# --------------------------------------------------------------------------

FLOOD = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                     "sinknode_flood.py")
GRPC_PYTHON = "/usr/bin/python3"


def grpcio_available():
    try:
        return subprocess.run([GRPC_PYTHON, "-c", "import grpc"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class LargeSinkNodes(Base):

    def setUp(self):
        if not grpcio_available():
            self.skipTest("%s has no grpcio" % GRPC_PYTHON)
        super().setUp()

    def flood(self, *args):
        """Starts the flood; returns (the process, its summary line). The
        streams it holds stay open until its stdin is closed."""
        p = subprocess.Popen([GRPC_PYTHON, FLOOD, "--target", self.addr,
                              "--timeout", str(self.WAIT)] + list(args),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        def stop():
            p.kill()
            p.wait()
            for f in (p.stdin, p.stdout, p.stderr):
                f.close()
        self.addCleanup(stop)
        line = p.stdout.readline()
        if not line:  # (stderr is read only then: it ends with the flood)
            self.fail("the flood said nothing: %s" % p.stderr.read())
        return p, json.loads(line)

    def test_node_over_the_limits_ends_the_stream(self):
        self.standard_files()
        src, oport = self.start_source()
        _, r = self.flood("--streams", "3", "--id-bytes", "1025",
                          "--collection", VS)
        self.assertEqual(r, {"ok": 0, "ended": {"INVALID_ARGUMENT": 3},
                             "details": r["details"]})
        _, r = self.flood("--streams", "1", "--id-bytes", "8",
                          "--annotations", "9", "--value-bytes", "4096",
                          "--collection", VS)
        self.assertEqual(r["ended"], {"INVALID_ARGUMENT": 1})
        # At the limits: served.
        _, r = self.flood("--streams", "1", "--id-bytes", "1024",
                          "--annotations", "7", "--value-bytes", "4096",
                          "--collection", VS)
        self.assertEqual(r, {"ok": 1, "ended": {}, "details": []})
        self.assertTrue(src.running())
        # And a sink started with such a node is refused at once.
        snk = self.PROC("mcp-sink", [self.exe("mcp-sink"), "--transport",
                                     self.transport_for("mcp-sink"),
                                     "--connect", self.addr,
                                     "--collection", VS,
                                     "--node-id", "n" * 1025])
        self.procs.append(snk)
        self.assertEqual(snk.wait(timeout=self.WAIT), 1)
        self.assertIn("--node-id at most 1024 bytes", snk.stderr())

    def test_syncz_stays_bounded_with_many_large_nodes(self):
        self.standard_files()
        # 150 streams from one address: past the default per-peer rate's
        # burst of 100, so the last ones would race its refill.
        src, oport = self.start_source(False, "--stream-rate", "off")
        p, r = self.flood("--streams", "150", "--id-bytes", "1024",
                          "--annotations", "7", "--value-bytes", "4096",
                          "--collection", VS)
        self.assertEqual(r["ok"], 150, r)
        status, _, body = http_get(oport, "/debug/syncz")
        self.assertEqual(status, 200)
        # 150 nodes of 33 KiB: 5 MB of node alone, before the page's bounds.
        self.assertLess(len(body), 1 << 20)
        syncz = json.loads(body)
        self.assertEqual((len(syncz["streams"]), syncz["streams_omitted"]),
                         (100, 50))
        self.assertTrue(syncz["truncated"])
        node = syncz["streams"][0]["node"]
        self.assertEqual(node["id"], "n" * 256 + "...[+768 bytes]")
        self.assertEqual(len(node["annotations"]), 7)
        for v in node["annotations"].values():
            self.assertEqual(v, "v" * 256 + "...[+3840 bytes]")
        p.stdin.close()
        self.assertEqual(p.wait(timeout=self.WAIT), 0)


def main():
    argv = common.parse_args(__doc__.splitlines()[0])
    unittest.main(argv=argv, verbosity=2)


if __name__ == "__main__":
    main()
