#!/usr/bin/env python3
"""End-to-end tests of TLS and authorization in mcp-source and mcp-sink.

The real programs over 127.0.0.1 on the transport given (gRPC, or the
nghttp2 one: "h2c", which has TLS since issue 23), with the test
certificates of tests/gen_certs.sh (made with the openssl CLI into a
temporary directory):

  mutual TLS        sink dials source, source dials sink; identities in
                    /debug/syncz on both sides; --tls-server-name
  refused at TLS    a sink without a client certificate, one from another
                    CA: no stream, nothing synced, the sink keeps retrying
  authorization     --allow / --deny on a listener (PERMISSION_DENIED in
                    both programs' logs, mcp_streams_refused_total), on a
                    dialer (the server's identity)
  --access-list     reloaded while running: a denied sink's stream is ended
                    and its reconnections refused; allowed again, it syncs;
                    a broken version keeps the rules; SIGHUP
  command line      h2 listening in cleartext beyond loopback without
                    --allow-cleartext (with TLS it may), bad combinations:
                    exit 2; unreadable files: exit 1

Usage: test_tls.py --build-dir BUILD [--transport grpc|h2c] [unittest args]

Exits 77 (skipped, for meson) when openssl is missing or the programs do
not have the transport. Standard library only; the processes and the waits are
e2e_common.py's. Every wait is bounded and every child is killed at the
end.
"""

import json
import os
import re
import signal
import socket
import sys
import threading
import time
import unittest

import e2e_common as common
from e2e_common import VS, http_get

CERTS = None  # the directory of gen_certs.sh's output
SKIP = 77

ISTIOD = "spiffe://cluster.local/ns/istio-system/sa/istiod"
SINK_A = "spiffe://cluster.local/ns/default/sa/sink-a"
SINK_B = "spiffe://cluster.local/ns/evil/sa/sink-b"

WAIT = 20.0


# --------------------------------------------------------------------------
# Processes and files
# --------------------------------------------------------------------------

class Proc(common.Proc):
    WAIT = WAIT  # wait()'s default: this script's deadline


def run(argv):
    return common.run(argv, timeout=WAIT)


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def metric(text, name, **labels):
    """The value of the sample |name| whose labels include |labels|."""
    total = None
    for line in text.splitlines():
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                              m.group(3) or ""))
        if all(got.get(k) == str(v) for k, v in labels.items()):
            total = (total or 0) + float(m.group(4))
    return total or 0


def cert(name):
    return os.path.join(CERTS, name)


def mtls(name, ca="ca"):
    """The flags presenting |name|.pem and verifying the peer with |ca|."""
    return ["--tls-cert", cert(name + ".pem"), "--tls-key", cert(name + ".key"),
            "--tls-ca", cert(ca + ".pem")]


# --------------------------------------------------------------------------
# Fixture
# --------------------------------------------------------------------------

class Base(common.Base):
    WAIT = WAIT
    POLL = 0.05
    PROC = Proc
    TMP_PREFIX = "mcp-tls-"
    SANITIZER_STOP = 10

    def setUp(self):
        super().setUp()
        with open(os.path.join(self.config, "vs.yaml"), "w") as f:
            f.write("apiVersion: networking.istio.io/v1alpha3\n"
                    "kind: VirtualService\n"
                    "metadata: {name: reviews, namespace: default}\n"
                    "spec: {hosts: [reviews]}\n")

    def spawn(self, name, args):
        return self.start(name, ["--debug-listen", "127.0.0.1:0"] +
                          list(args))

    def debug_port(self, p):
        return int(self.wait_for(
            lambda: re.search(r"debug endpoints on http://127\.0\.0\.1:(\d+)/",
                              p.stderr()),
            "%s's debug listener" % p.name, p).group(1))

    def source(self, *args, dial=None):
        """mcp-source serving the fixture: listening on a free port (its
        address is returned) or dialing |dial|."""
        role = ["--connect", dial] if dial else ["--listen", "127.0.0.1:0"]
        p = self.spawn("mcp-source", ["--dir", self.config] + role +
                       list(args))
        if dial:
            return p, dial
        m = self.wait_for(
            lambda: re.search(r"serving ResourceSource on (127\.0\.0\.1:\d+)",
                              p.stderr()),
            "the source to listen", p)
        return p, m.group(1)

    def sink(self, *args, dial=None):
        """mcp-sink (--json) dialing |dial|, or listening on a free port."""
        role = ["--connect", dial] if dial else ["--listen", "127.0.0.1:0"]
        p = self.spawn("mcp-sink", ["--collection", VS, "--json"] + role +
                       list(args))
        if dial:
            return p, dial
        ev = self.wait_for(lambda: p.events("listening"),
                           "the sink to listen", p)[0]
        return p, ev["address"]

    def wait_synced(self, snk, count=1):
        """Waits for |count| responses and the sync: the fixture, ACKed."""
        self.wait_for(lambda: len(snk.events("response")) >= count and
                      snk.events("synced"), "the sink to sync", snk)
        r = snk.events("response")[-1]
        self.assertEqual(r["verdict"], "ack")
        self.assertEqual([x["name"] for x in r["resources"]],
                         ["default/reviews"])

    def syncz(self, p):
        status, _, body = http_get(self.debug_port(p), "/debug/syncz")
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def metrics(self, p):
        status, _, body = http_get(self.debug_port(p), "/metrics")
        self.assertEqual(status, 200, body)
        return body

    def assert_refused_at_tls(self, snk, src):
        """|snk| cannot get through the handshake of |src|: it keeps trying,
        nothing is synced, the source never sees a stream (gRPC logs the
        failed handshake)."""
        self.wait_for(lambda: "no TLS connection" in snk.stderr(),
                      "the sink to report the failed handshake", snk, src)
        self.wait_for(lambda: len(re.findall(r"stream \d+: dialing",
                                             snk.stderr())) >= 2,
                      "the sink to dial again", snk, src)
        if common.TRANSPORT == "grpc":
            self.wait_for(lambda: "Handshake failed" in src.stderr(),
                          "the source's gRPC to log the failed handshake",
                          src)
        self.assertEqual(snk.events("response"), [])
        self.assertEqual(snk.events("connected"), [])
        self.assertEqual(self.syncz(src)["streams"], [])
        self.assertEqual(metric(self.metrics(src), "mcp_streams_total"), 0)
        self.assertNotIn("connected", src.stderr())


# --------------------------------------------------------------------------
# Mutual TLS
# --------------------------------------------------------------------------

class MutualTLS(Base):

    def test_sink_dials_source(self):
        src, addr = self.source(*mtls("server"))
        snk, _ = self.sink(*mtls("client"), dial=addr)
        self.wait_synced(snk)
        self.assertIn("security: mutual TLS", src.stderr())
        # Each side knows the other's verified identities.
        streams = self.syncz(src)["streams"]
        self.assertEqual(len(streams), 1, streams)
        self.assertTrue(streams[0]["tls"])
        self.assertEqual(streams[0]["identity"], SINK_A)
        self.assertIn(SINK_A, streams[0]["identities"])
        self.wait_for(lambda: "(identity %s)" % SINK_A in src.stderr(),
                      "the source to log the sink's identity", src)
        streams = self.syncz(snk)["streams"]
        self.assertEqual(len(streams), 1, streams)
        self.assertTrue(streams[0]["tls"])
        self.assertTrue(streams[0]["dialed"])
        self.assertEqual(streams[0]["identity"], ISTIOD)

    def test_pipelined_http1_over_tls_gets_every_answer(self):
        # HTTP/1.1 (ALPN) on the TLS listener: 2,000 requests in one write,
        # so the records cross the socket's reads (64 KiB each) and the SSL
        # object reads them where each read left them (tls.c's BIO). Every
        # request gets its answer, in order, and the connection stays up.
        if common.TRANSPORT == "grpc":
            self.skipTest("gRPC core serves no HTTP/1.1")
        import ssl
        src, addr = self.source(*mtls("server"))
        ctx = ssl.create_default_context(cafile=cert("ca.pem"))
        ctx.load_cert_chain(cert("client.pem"), cert("client.key"))
        ctx.set_alpn_protocols(["http/1.1"])
        host, port = addr.rsplit(":", 1)
        n = 2000
        with socket.create_connection((host, int(port)), timeout=WAIT) as raw:
            with ctx.wrap_socket(raw, server_hostname=host) as s:
                self.assertEqual(s.selected_alpn_protocol(), "http/1.1")
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * n)
                got = b""
                while got.count(b"HTTP/1.1 200") < n:
                    chunk = s.recv(1 << 16)
                    self.assertTrue(chunk, "the source closed after %d "
                                    "answers" % got.count(b"HTTP/1.1 200"))
                    got += chunk
                self.assertEqual(got.count(b"HTTP/1.1 "), n)
        self.assertTrue(src.running())

    def test_source_dials_sink(self):
        # The listening sink serves the server certificate (its SANs name
        # 127.0.0.1); the source presents one too and the sink checks it.
        snk, addr = self.sink(*mtls("server"), "--allow", ISTIOD)
        src, _ = self.source(*mtls("server"), "--allow", ISTIOD, dial=addr)
        self.wait_synced(snk)
        streams = self.syncz(snk)["streams"]
        self.assertEqual(len(streams), 1, streams)
        self.assertFalse(streams[0]["dialed"])
        self.assertTrue(streams[0]["tls"])
        self.assertEqual(streams[0]["identity"], ISTIOD)
        streams = self.syncz(src)["streams"]
        self.assertEqual(len(streams), 1, streams)
        self.assertTrue(streams[0]["dialed"])
        self.assertEqual(streams[0]["identity"], ISTIOD)

    def test_broken_certificate_change_is_reported_and_the_old_one_kept(self):
        # Copies the program can watch being replaced.
        d = os.path.join(self.tmp, "tls")
        os.mkdir(d)
        files = {}
        for f in ("server.pem", "server.key", "ca.pem"):
            with open(cert(f), "rb") as i:
                files[f] = i.read()
            with open(os.path.join(d, f), "wb") as o:
                o.write(files[f])
        own = ["--tls-cert", os.path.join(d, "server.pem"),
               "--tls-key", os.path.join(d, "server.key"),
               "--tls-ca", os.path.join(d, "ca.pem")]
        src, addr = self.source(*own)
        snk, _ = self.sink(*mtls("client"), dial=addr)
        self.wait_synced(snk)

        write_atomic(os.path.join(d, "server.pem"), "not a certificate\n")
        self.wait_for(lambda: "TLS files changed and cannot be used" in
                      src.stderr(), "the broken certificate to be reported",
                      src)
        self.assertIn("the certificate in use stays", src.stderr())
        # A new sink is served with the certificate in use.
        snk2, _ = self.sink(*mtls("client"), dial=addr)
        self.wait_synced(snk2)
        self.assertTrue(src.running())

        write_atomic(os.path.join(d, "server.pem"),
                     files["server.pem"].decode())
        self.wait_for(lambda: "TLS files changed and are usable again" in
                      src.stderr(), "the fixed certificate to be reported",
                      src)

    def test_server_name(self):
        # wrongname.pem names other.example only: dialing 127.0.0.1 fails
        # the name check, --tls-server-name other.example passes it.
        src, addr = self.source(*mtls("wrongname"))
        bad, _ = self.sink(*mtls("client"), dial=addr)
        # gRPC's words, and OpenSSL's.
        self.wait_for(lambda: "not in peer certificate" in bad.stderr() or
                      "IP address mismatch" in bad.stderr(),
                      "the name check to fail", bad, src)
        self.assertEqual(bad.events("response"), [])
        good, _ = self.sink(*mtls("client"), "--tls-server-name",
                            "other.example", dial=addr)
        self.wait_synced(good)

    def test_no_client_certificate(self):
        src, addr = self.source(*mtls("server"))
        snk, _ = self.sink("--log-level", "debug", "--tls-ca",
                           cert("ca.pem"), dial=addr)
        self.assert_refused_at_tls(snk, src)

    def test_client_certificate_of_another_ca(self):
        # stranger.pem carries sink-a's SPIFFE ID, signed by another CA.
        src, addr = self.source(*mtls("server"), "--allow", SINK_A)
        snk, _ = self.sink("--log-level", "debug", "--tls-cert",
                           cert("stranger.pem"), "--tls-key",
                           cert("stranger.key"), "--tls-ca", cert("ca.pem"),
                           dial=addr)
        self.assert_refused_at_tls(snk, src)

    def test_server_of_another_ca(self):
        src, addr = self.source(*mtls("server"))
        snk, _ = self.sink(*mtls("client", ca="other-ca"), dial=addr)
        self.wait_for(lambda: "no TLS connection" in snk.stderr(),
                      "the sink to refuse the server", snk, src)
        self.assertEqual(snk.events("response"), [])


class Cleartext(Base):
    def test_cleartext_sink_is_told_the_source_speaks_tls(self):
        """gRPC says only "Socket closed" when a cleartext dial meets TLS:
        the sink finds out and says what to pass."""
        src, addr = self.source("--tls-cert", cert("server.pem"), "--tls-key",
                                cert("server.key"))
        for t in common.TRANSPORTS:
            if not common.transport_built(t):
                continue
            with self.subTest(transport=t):
                snk = common.Proc("mcp-sink", [
                    self.exe("mcp-sink"), "--transport", t, "--collection",
                    VS, "--json", "--connect", addr])
                self.procs.append(snk)
                self.wait_for(lambda: "the source at %s speaks TLS: pass "
                              "--tls-ca" % addr in snk.stderr(),
                              "the hint", snk, src)
                self.assertEqual(snk.events("response"), [])
                snk.signal(signal.SIGTERM)
                self.assertEqual(snk.wait(), 0, self.logs())

    def test_no_hint_for_a_server_without_tls(self):
        """A server that closes every connection at once, without TLS:
        the dial fails the same way, but no hint."""
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.bind(("127.0.0.1", 0))
        ls.listen(16)
        addr = "127.0.0.1:%d" % ls.getsockname()[1]
        accepted = []

        def close_all():
            while True:
                try:
                    c, _ = ls.accept()
                except OSError:
                    return
                accepted.append(1)
                c.close()
        t = threading.Thread(target=close_all, daemon=True)
        t.start()
        try:
            snk, _ = self.sink("--log-level", "debug", dial=addr)
            # The next dial comes after the probe of the first failure.
            self.wait_for(lambda: "cannot reach" in snk.stderr() and
                          "stream 2: dialing" in snk.stderr(),
                          "the failed dial, then the next", snk)
            self.assertGreaterEqual(len(accepted), 2)  # a dial, the probe
            self.assertNotIn("speaks TLS", snk.stderr())
        finally:
            ls.close()


# --------------------------------------------------------------------------
# Authorization
# --------------------------------------------------------------------------

class Authorization(Base):

    def assert_denied(self, src, snk, identity):
        """|snk| is refused by |src| with PERMISSION_DENIED, in both logs
        and the source's metrics, and gets nothing."""
        self.wait_for(lambda: re.search(
            r"refused: status 7 \(PermissionDenied\): permission denied",
            snk.stderr()), "the sink to log PERMISSION_DENIED", snk, src)
        self.wait_for(lambda: re.search(
            r"refused 127\.0\.0\.1:\d+: status 7 \(PermissionDenied\): "
            r"permission denied: peer identity not allowed; identity " +
            re.escape(identity), src.stderr()),
            "the source to log the refusal", src)
        self.assertEqual(snk.events("response"), [])
        self.wait_for(lambda: metric(self.metrics(src),
                                     "mcp_streams_refused_total",
                                     code=7) >= 1,
                      "mcp_streams_refused_total{code=\"7\"}", src)

    def test_allow(self):
        src, addr = self.source(*mtls("server"), "--allow", SINK_A)
        ok, _ = self.sink(*mtls("client"), dial=addr)
        self.wait_synced(ok)
        denied, _ = self.sink(*mtls("denied"), dial=addr)
        self.assert_denied(src, denied, SINK_B)
        # A certificate with a CN only has that CN as identity.
        cn, _ = self.sink(*mtls("cn"), dial=addr)
        self.assert_denied(src, cn, "legacy-client")
        self.assertTrue(ok.running())
        self.assertEqual(len(self.syncz(src)["streams"]), 1)

    def test_deny_prefix(self):
        # Only deny rules: everybody else is allowed.
        src, addr = self.source(*mtls("server"), "--deny",
                                "spiffe://cluster.local/ns/evil/*")
        ok, _ = self.sink(*mtls("client"), dial=addr)
        self.wait_synced(ok)
        denied, _ = self.sink(*mtls("denied"), dial=addr)
        self.assert_denied(src, denied, SINK_B)

    def test_listening_sink_checks_the_source(self):
        snk, addr = self.sink(*mtls("server"), "--allow", SINK_A)
        src, _ = self.source(*mtls("server"), dial=addr)
        # The source presents istiod's certificate: not allowed.
        self.wait_for(lambda: re.search(
            r"refused 127\.0\.0\.1:\d+: status 7 \(PermissionDenied\).*"
            r"identity " + re.escape(ISTIOD), snk.stderr()),
            "the sink to refuse the source", snk, src)
        self.wait_for(lambda: re.search(
            r"stream \d+ to the sink at \S+ refused: status 7 "
            r"\(PermissionDenied\)", src.stderr()),
            "the source to log PERMISSION_DENIED", src)
        self.assertEqual(snk.events("response"), [])
        self.assertGreaterEqual(metric(self.metrics(snk),
                                       "mcp_streams_refused_total", code=7), 1)

    def test_dialing_sink_checks_the_server(self):
        src, addr = self.source(*mtls("server"))
        ok, _ = self.sink(*mtls("client"), "--allow",
                          "spiffe://cluster.local/ns/istio-system/*",
                          dial=addr)
        self.wait_synced(ok)
        bad, _ = self.sink(*mtls("client"), "--allow",
                           "spiffe://cluster.local/ns/other/sa/istiod",
                           dial=addr)
        self.wait_for(lambda: re.search(
            r"refused: status 7 \(PermissionDenied\): permission denied: "
            r"server identity not allowed", bad.stderr()),
            "the sink to refuse the server", bad, src)
        self.assertEqual(bad.events("response"), [])

    def test_access_list_reload(self):
        acl = os.path.join(self.tmp, "acl")
        write_atomic(acl, "# sinks of the default namespace\n"
                          "allow spiffe://cluster.local/ns/default/*\n")
        src, addr = self.source(*mtls("server"), "--access-list", acl)
        snk, _ = self.sink(*mtls("client"), dial=addr)
        self.wait_synced(snk)
        self.assertIn("access list: 1 rule, watching", src.stderr())

        # A broken version is reported and changes nothing.
        write_atomic(acl, "alow spiffe://cluster.local/ns/default/*\n")
        self.wait_for(lambda: "unknown keyword" in src.stderr(),
                      "the broken file to be reported", src)
        # The report is the reload's answer: nothing was reauthorized.
        self.assertNotIn("checking the open streams again", src.stderr())
        self.assertEqual(len(snk.events("disconnected")), 0, self.logs())

        # Denied: the open stream is ended, reconnections are refused.
        write_atomic(acl, "allow spiffe://cluster.local/ns/default/*\n"
                          "deny " + SINK_A + "\n")
        ev = self.wait_for(lambda: snk.events("disconnected"),
                           "the sink's stream to be ended", snk, src)[0]
        self.assertEqual(ev["status"], 7, ev)
        self.assertIn("permission denied", ev["details"])
        self.wait_for(lambda: re.search(
            r"refused 127\.0\.0\.1:\d+: status 7 .*identity " +
            re.escape(SINK_A), src.stderr()),
            "the reconnection to be refused", src, snk)
        self.wait_for(lambda: "refused: status 7" in snk.stderr(),
                      "the sink to log the refusal", snk)
        self.assertEqual(self.syncz(src)["streams"], [])
        self.assertEqual(len(snk.events("connected")), 1)

        # Allowed again: the sink reconnects and gets the state.
        responses = len(snk.events("response"))
        write_atomic(acl, "allow spiffe://cluster.local/ns/default/*\n")
        self.wait_for(lambda: len(snk.events("connected")) >= 2 and
                      len(snk.events("response")) > responses,
                      "the sink to sync again", snk, src, timeout=45)
        self.assertEqual(snk.events("response")[-1]["verdict"], "ack")
        streams = self.syncz(src)["streams"]
        self.assertEqual([s["identity"] for s in streams], [SINK_A])

        # SIGHUP reads the file again (and does not stop the program).
        src.signal(signal.SIGHUP)
        self.wait_for(lambda: "read again (SIGHUP)" in src.stderr(),
                      "the SIGHUP reload", src)
        self.assertTrue(src.running())
        self.assertTrue(snk.running())
        self.assertEqual(len(snk.events("disconnected")), 1)


# --------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------

class CommandLine(Base):

    def assert_usage(self, prog, args, needle):
        rc, _, err = run([self.exe(prog)] + args)
        self.assertEqual(rc, 2, "%s %s: %s" % (prog, args, err))
        self.assertIn(needle, err)
        self.assert_usage_error(prog, err)

    def test_h2_listens_in_cleartext_on_loopback_only(self):
        if not common.transport_built("h2c", timeout=WAIT):
            self.skipTest("no h2 transport")
        c = ["--collection", VS]
        for prog, extra in (("mcp-source", []), ("mcp-sink", c)):
            for name in ("h2", "h2c"):
                with self.subTest(prog=prog, name=name):
                    self.assert_usage(prog, extra + ["--transport", name,
                                                     "--listen", "0.0.0.0:0"],
                                      "--allow-cleartext")
        # With --allow-cleartext or TLS it runs; loopback needs nothing.
        for addr, extra_flags in (("0.0.0.0:0", ["--allow-cleartext"]),
                                  ("0.0.0.0:0", mtls("server")),
                                  ("localhost:0", []),
                                  ("127.0.0.2:0", [])):
            with self.subTest(addr=addr):
                p = Proc("mcp-source", [self.exe("mcp-source"), "--transport",
                                        "h2c", "--listen", addr] +
                         extra_flags)
                self.procs.append(p)
                self.wait_for(lambda: "serving ResourceSource on" in
                              p.stderr(), "the h2c source to listen", p)
                p.signal(signal.SIGTERM)
                self.assertEqual(p.wait(), 0, self.logs())
        snk = Proc("mcp-sink", [self.exe("mcp-sink"), "--transport", "h2c",
                                "--collection", VS, "--json", "--listen",
                                "0.0.0.0:0", "--allow-cleartext"])
        self.procs.append(snk)
        self.wait_for(lambda: snk.events("listening"),
                      "the h2c sink to listen", snk)
        snk.signal(signal.SIGTERM)
        self.assertEqual(snk.wait(), 0, self.logs())

    def test_bad_combinations(self):
        c = ["--collection", VS]
        src_listen = ["--listen", "127.0.0.1:0"]
        dial = ["--connect", "127.0.0.1:1"]
        cases = [
            ("mcp-source", src_listen + ["--tls-ca", cert("ca.pem")],
             "needs --tls-cert and --tls-key"),
            ("mcp-source", src_listen + ["--tls-cert", cert("server.pem")],
             "needs --tls-cert and --tls-key"),
            ("mcp-source", src_listen + ["--allow", SINK_A],
             "give --tls-ca"),
            ("mcp-source", src_listen + ["--tls-cert", cert("server.pem"),
                                         "--tls-key", cert("server.key"),
                                         "--deny", SINK_A],
             "give --tls-ca"),
            ("mcp-source", src_listen + mtls("server") +
             ["--tls-server-name", "x"], "is for dialing"),
            ("mcp-source", src_listen + mtls("server") + ["--allow", "a*b"],
             "not an identity pattern"),
            ("mcp-source", src_listen + ["--tls-cert"], "needs a value"),
            ("mcp-source", src_listen + ["--allow="], "needs an identity"),
            ("mcp-sink", c + dial + ["--tls-cert", cert("client.pem")],
             "--tls-cert without --tls-key"),
            ("mcp-sink", c + dial + ["--tls-key", cert("client.key")],
             "--tls-key without --tls-cert"),
            ("mcp-sink", c + dial + ["--tls-server-name", "localhost"],
             "needs TLS"),
            ("mcp-sink", c + dial + ["--allow", ISTIOD],
             "needs the server's identity"),
            ("mcp-sink", c + ["--listen", "127.0.0.1:0", "--allow", ISTIOD],
             "give --tls-ca"),
        ]
        for prog, args, needle in cases:
            with self.subTest(prog=prog, args=args):
                self.assert_usage(prog, ["--transport", common.TRANSPORT] +
                                  args, needle)

    def test_unreadable_files(self):
        missing = os.path.join(self.tmp, "missing.pem")
        cases = [
            ("mcp-source", ["--listen", "127.0.0.1:0", "--tls-cert", missing,
                            "--tls-key", cert("server.key")],
             "cannot read " + missing),
            ("mcp-sink", ["--collection", VS, "--connect", "127.0.0.1:1",
                          "--tls-ca", missing], "cannot read " + missing),
            ("mcp-source", ["--listen", "127.0.0.1:0"] + mtls("server") +
             ["--access-list", missing], missing),
        ]
        bad = os.path.join(self.tmp, "bad-acl")
        with open(bad, "w") as f:
            f.write("allow x\nalow y\n")
        cases.append(("mcp-sink", ["--collection", VS, "--listen",
                                   "127.0.0.1:0"] + mtls("server") +
                      ["--access-list", bad], "line 2"))
        for prog, args, needle in cases:
            with self.subTest(prog=prog, args=args):
                rc, _, err = run([self.exe(prog), "--transport",
                                  common.TRANSPORT] + args)
                self.assertEqual(rc, 1, err)
                self.assertIn(needle, err)


# --------------------------------------------------------------------------

def transport_built(name):
    """A usage error either way: the transport is looked up first."""
    rc, out, err = run([common.exe("mcp-source"),
                        "--transport", name, "--listen", "127.0.0.1:0",
                        "--tls-ca", "/nonexistent"])
    return rc == 2 and "not built" not in err


def main():
    argv = common.parse_args(__doc__.splitlines()[0], programs=())
    if not transport_built(common.TRANSPORT):
        print("the programs have no %s transport" % common.TRANSPORT)
        return SKIP

    def use(d):
        global CERTS
        CERTS = d
    return common.run_with_certs(argv, use)


if __name__ == "__main__":
    sys.exit(main())
