"""HTTP/2 attacks on a listening mcp-source, per transport (--transport).

Each test starts the real mcp-source on 127.0.0.1, runs one attack of
h2attack.py against it (bounded: at most a few hundred MiB and 20 s),
samples the server's VmRSS from /proc, and asserts that

  - its growth over the baseline stayed under the bound of the attack on
    that transport (the attack stops early once the bound is passed, so a
    broken bound costs little), and
  - the server is still running and serves a well-behaved mcp-sink.

The bounds are the numbers docs/security.md ("gRPC 1.51 under attack")
gives, with room for a loaded machine:

  attack               h2c      grpc (defaults of mcp_grpc_options)
  big_message          64 MiB   memory_limit (256 MiB) + 128 MiB
  continuation         64 MiB   memory_limit + 128 MiB
  continuation_fields  64 MiB   4 x memory_limit + 128 MiB: gRPC 1.51 holds
                                ~3.4 bytes per byte received before its
                                quota closes the connection
  rapid_reset          64 MiB   none: gRPC 1.51 cannot bound it; the test
                                is an expected failure (an unexpected
                                success fails the run: update the docs)

Built with AddressSanitizer, the bounds are doubled (see sanitized()).

And one test of time: a sink that connects while one connection sends an
unfinished header field ("literal" CONTINUATION) syncs within 10 s. h2c
ends that connection at once; gRPC 1.51 spends a core on the unfinished
field and serves nobody while it lasts: an expected failure there.

And, with --tls on h2c, a TLS handshake flood: 2,000 connections that
never send a byte; the listener closes those past its per-address limit
at once and keeps its memory; a sink syncs meanwhile.

With --tls the source listens with mutual TLS (tests/gen_certs.sh's
certificates, made with openssl) and every attacking connection completes
its handshake with a valid client certificate first: the attacks an
authenticated peer can make. The healthy sink dials with TLS too. The
bounds are the same.

Usage: test_grpc_attacks.py --build-dir DIR --transport grpc|h2c [--tls]
Standard library only (tests/attacks/h2attack.py).
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h2attack  # noqa: E402

MIB = 1 << 20
BUILD_DIR = None
TRANSPORT = None
CERTS = None  # --tls: gen_certs.sh's directory
WAIT = 20.0

VS = "istio/networking/v1alpha3/virtualservices"
MEMORY_LIMIT = 256 * MIB  # MCP_GRPC_DEFAULT_MEMORY_LIMIT
BOUND = {
    "h2c": {"big_message": 64 * MIB, "continuation": 64 * MIB,
            "continuation_fields": 64 * MIB, "rapid_reset": 64 * MIB},
    "grpc": {"big_message": MEMORY_LIMIT + 128 * MIB,
             "continuation": MEMORY_LIMIT + 128 * MIB,
             "continuation_fields": 4 * MEMORY_LIMIT + 128 * MIB,
             "rapid_reset": 384 * MIB},
}
DOC = """---
apiVersion: networking.istio.io/v1alpha3
kind: VirtualService
metadata: {name: reviews, namespace: default}
spec: {hosts: [reviews]}
"""


def tls_flags(leaf):
    """The mutual TLS flags of |leaf| (none without --tls)."""
    if not CERTS:
        return []
    c = lambda n: os.path.join(CERTS, n)  # noqa: E731
    return ["--tls-cert", c(leaf + ".pem"), "--tls-key", c(leaf + ".key"),
            "--tls-ca", c("ca.pem")]


# The e2e harness's: a random port below the ephemeral range, never twice
# (bind(0) hands the same port to a make test running beside this one).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "e2e"))
from e2e_common import free_port  # noqa: E402


class Child:
    """A program whose stderr (and stdout) lines are collected."""

    def __init__(self, argv, env=None):
        self.lines = []
        self.lock = threading.Lock()
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  errors="replace", env=env)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def text(self):
        with self.lock:
            return "\n".join(self.lines)

    def running(self):
        return self.p.poll() is None

    def cpu_seconds(self):
        """User and system CPU time the program used so far (0 once it
        is gone)."""
        try:
            with open("/proc/%d/stat" % self.p.pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def death(self, tail=40):
        """Why the program is no longer running, for a failure message:
        its exit status or the signal that ended it, what the kernel said
        about its pid (the OOM killer, a segfault: dmesg, when readable),
        the machine's memory then, and its last |tail| output lines."""
        rc = self.p.poll()
        if rc is None:
            why = "still running"
        elif rc < 0:
            try:
                why = "killed by %s" % signal.Signals(-rc).name
            except ValueError:
                why = "killed by signal %d" % -rc
        else:
            why = "exited with status %d" % rc
        out = ["pid %d %s" % (self.p.pid, why)]
        try:
            k = subprocess.run(["dmesg"], capture_output=True, text=True,
                               errors="replace", timeout=10)
            pid = str(self.p.pid)
            hits = [ln for ln in k.stdout.splitlines()
                    if "[%s]" % pid in ln or "pid=%s," % pid in ln or
                    "process %s " % pid in ln or "pid %s " % pid in ln]
            out.append("dmesg about it: " + ("\n  ".join(hits) if hits else
                                             "nothing") if k.returncode == 0
                       else "dmesg not readable: " + k.stderr.strip())
        except (OSError, subprocess.SubprocessError) as e:
            out.append("dmesg: %s" % e)
        try:
            with open("/proc/meminfo") as f:
                out.append("now: " + ", ".join(
                    ln.split(":")[0] + " " + ln.split(":")[1].strip()
                    for ln in f if ln.startswith(("MemTotal", "MemAvailable",
                                                  "Committed_AS"))))
        except OSError:
            pass
        with self.lock:
            lines = self.lines[-tail:]
        out.append("its last %d output lines:\n%s" % (len(lines),
                                                         "\n".join(lines)))
        return "\n".join(out)

    def stop(self):
        if self.running():
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.t.join(timeout=2)


def child_env():
    """A sanitizer build's freed memory waits in ASan's quarantine (256 MiB
    by default) and would count as growth: keep it small."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") +
                           ":quarantine_size_mb=16").lstrip(":")
    return env


_sanitized = None


def sanitized():
    """Whether the programs are built with AddressSanitizer, whose
    allocator adds a header and redzones to every allocation: gRPC's many
    small metadata allocations then take about twice the memory, and the
    bounds are doubled."""
    global _sanitized
    if _sanitized is None:
        with open(os.path.join(BUILD_DIR, "tools", "mcp-source"), "rb") as f:
            _sanitized = b"__asan_init" in f.read()
    return _sanitized


class Attacks(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mcp-attacks-")
        cfg = os.path.join(self.tmp, "config")
        os.makedirs(cfg)
        with open(os.path.join(cfg, "vs.yaml"), "w") as f:
            f.write(DOC)
        self.addr = "127.0.0.1:%d" % free_port()
        self.children = []
        self.src = self.start([
            os.path.join(BUILD_DIR, "tools", "mcp-source"),
            "--transport", TRANSPORT, "--listen", self.addr,
            "--dir", cfg] + tls_flags("server"))
        self.wait_for(lambda: "serving ResourceSource on" in self.src.text(),
                      "the source to listen")

    def tearDown(self):
        for c in self.children:
            c.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, argv):
        c = Child(argv, env=child_env())
        self.children.append(c)
        return c

    def wait_for(self, cond, what, timeout=WAIT, while_busy=0.0):
        """Waits for cond() up to |timeout| s; with |while_busy| (a total
        bound, seconds), longer while the source still works: each 10 s
        in which it used at least 0.3 s of CPU (an idle source uses next to
        none) extends the wait by 10 s."""
        deadline = time.monotonic() + timeout
        cap = time.monotonic() + max(timeout, while_busy)
        cpu = self.src.cpu_seconds()
        while not cond():
            if not self.src.running():
                self.fail("mcp-source died waiting for %s: %s" % (
                    what, self.src.death()))
            now = time.monotonic()
            if now > deadline:
                used = self.src.cpu_seconds() - cpu
                if now < cap and used >= 0.3:
                    cpu += used
                    deadline = now + 10.0
                    continue
                self.fail("timed out waiting for %s (the source used %.1f "
                          "s of CPU in the last 10 s)\n%s" % (
                              what, used, self.src.text()))
            time.sleep(0.05)

    def attack(self, name, **kw):
        """Runs attack |name|; returns (result, growth in bytes)."""
        bound = BOUND[TRANSPORT][name] * (2 if sanitized() else 1)
        # The baseline from the moment the source serves (setUp waited for
        # its line; it loads --dir before it listens): what it allocates
        # later counts as the attack's, which errs on the safe side.
        sampler = h2attack.RssSampler(self.src.p.pid,
                                      limit_kib=bound // 1024)
        res = h2attack.ATTACKS[name](self.addr, stop=sampler.over, **kw)
        # The peak covers what the server still does with the last bytes:
        # until it closed its side of our connection (it read up to our
        # close). gRPC may work for long on an unfinished field (see
        # assert_serves_sink): the same bounds on that wait.
        port = int(self.addr.rsplit(":", 1)[1])
        pid = self.src.p.pid
        self.wait_for(lambda: not h2attack.open_connections(pid, port),
                      "the source to close the attack's connection",
                      timeout=30, while_busy=240)
        sampler.stop()
        growth = (sampler.peak - sampler.baseline) * 1024
        sys.stderr.write("%s on %s: %r; RSS %.1f MiB -> peak %.1f MiB "
                         "(+%.1f MiB, bound %d MiB)\n" % (
                             name, TRANSPORT, res, sampler.baseline / 1024,
                             sampler.peak / 1024, growth / MIB,
                             bound // MIB))
        return res, growth, bound

    def check(self, name, inconclusive_if_timed_out=False, **kw):
        res, growth, bound = self.attack(name, **kw)
        if (inconclusive_if_timed_out and res.ended == "time" and
                growth <= bound and self.src.running()):
            self.skipTest("inconclusive on this machine: %r, RSS grew %.1f "
                          "MiB (bound %d MiB)" % (res, growth / MIB,
                                                  bound // MIB))
        self.assertTrue(self.src.running(), "mcp-source died: %r\n%s"
                        % (res, self.src.death()))
        self.assertLessEqual(growth, bound, "%s: RSS grew %.1f MiB (bound "
                             "%d MiB): %r" % (name, growth / MIB,
                                              bound // MIB, res))
        self.assert_serves_sink()
        return res

    def assert_serves_sink(self):
        sink = self.start([os.path.join(BUILD_DIR, "tools", "mcp-sink"),
                           "--transport", TRANSPORT, "--connect", self.addr,
                           "--collection", VS, "--json"] +
                          tls_flags("client"))
        # gRPC 1.51 goes on parsing an unfinished field after its sender
        # left (about 10 s of CPU for 5 MiB, 61 s of wall time at load 17,
        # over 120 s under ASan at load 20): wait while it works that off,
        # up to 240 s. A bound on liveness, not on speed.
        self.wait_for(lambda: '"event":"synced"' in sink.text(),
                      "a sink to sync after the attack", timeout=30,
                      while_busy=240)

    def test_settings_limit_streams_and_headers_per_connection(self):
        """The server announces a bounded number of concurrent streams per
        connection (gRPC: 1024; h2: twice its limit of 1024, so that calls
        past the limit are refused rather than queued) and a bounded
        header list (gRPC's own defaults are unlimited streams and 8 KiB
        of headers)."""
        res = h2attack.Result("settings")
        c = h2attack.Conn(self.addr, res)
        try:
            c.flush(5.0)
            deadline = time.monotonic() + WAIT
            while h2attack.SETTINGS_MAX_CONCURRENT_STREAMS not in c.settings:
                self.assertFalse(c.closed, "closed before SETTINGS")
                self.assertLess(time.monotonic(), deadline, c.settings)
                c.pump(0.1)
            self.assertEqual(
                c.settings[h2attack.SETTINGS_MAX_CONCURRENT_STREAMS],
                1024 if TRANSPORT == "grpc" else 2048)
            self.assertLessEqual(
                c.settings.get(h2attack.SETTINGS_MAX_HEADER_LIST_SIZE,
                               1 << 32), 64 << 10)
        finally:
            c.close()

    # -- the attacks --

    def test_declared_4gib_message_is_bounded(self):
        # 768 MiB within flow control: three times gRPC's memory limit.
        self.check("big_message", budget=768 * MIB)

    def test_endless_continuation_literal_is_bounded(self):
        self.check("continuation", budget=512 * MIB)

    def test_endless_continuation_fields_is_bounded(self):
        self.check("continuation_fields", budget=1536 * MIB)

    def test_rapid_reset_is_bounded(self):
        # An expected failure on gRPC: a pass there must mean the attack
        # had its full say. On a slow or busy machine 20 s may end it
        # before gRPC holds the bound; such a run shows nothing either way,
        # and an "unexpected success" would fail the suite for the
        # machine's speed.
        res = self.check("rapid_reset", streams=200000,
                         inconclusive_if_timed_out=TRANSPORT == "grpc")
        if TRANSPORT == "h2c":  # answered as nghttp2's own servers do
            self.assertEqual(res.goaway and res.goaway[1], 11,  # CALM
                             "no GOAWAY ENHANCE_YOUR_CALM: %r" % res)

    def test_handshake_flood_is_bounded(self):
        """--tls on h2c: many connections that never finish their
        handshake. The listener closes those past its per-address limit
        (32 in progress) at once and the others at its handshake timeout;
        its memory stays bounded and a sink that connects meanwhile
        syncs."""
        if not CERTS or TRANSPORT != "h2c":
            self.skipTest("the TLS listener of h2c (--tls)")
        import resource
        import socket
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        n = min(2000, hard - 100)
        if soft < n + 100:
            resource.setrlimit(resource.RLIMIT_NOFILE, (n + 100, hard))
        # No settling: the source logged "serving" after its first scan,
        # and the nghttp2 transport starts no threads.
        sampler = h2attack.RssSampler(self.src.p.pid,
                                      limit_kib=BOUND["h2c"]["rapid_reset"]
                                      // 1024)
        socks = []
        host, port = self.addr.rsplit(":", 1)
        try:
            for _ in range(n):  # connect, then never say a word
                socks.append(socket.create_connection((host, int(port))))
            closed = 0
            deadline = time.monotonic() + WAIT
            # Those past the limit are closed at once: wait for most.
            while closed < n - 64 and time.monotonic() < deadline:
                closed = 0
                for s in socks:
                    s.setblocking(False)
                    try:
                        closed += s.recv(1) == b""
                    except BlockingIOError:
                        pass
                    except OSError:
                        closed += 1
                time.sleep(0.1)
            self.assertGreaterEqual(closed, n - 64, "connections past the "
                                    "per-address handshake limit stay open")
            self.assert_serves_sink()  # while 32 still hold their slots
        finally:
            sampler.stop()
            for s in socks:
                s.close()
        growth = (sampler.peak - sampler.baseline) * 1024
        sys.stderr.write("handshake flood on h2c: %d connections, %d closed "
                         "at once; RSS +%.1f MiB\n" % (n, closed,
                                                      growth / MIB))
        self.assertLessEqual(growth, BOUND["h2c"]["rapid_reset"])
        self.assertTrue(self.src.running(), self.src.death())

    def test_sink_syncs_during_endless_continuation_literal(self):
        """One connection sending an unfinished header field must not
        starve the others: a sink that connects meanwhile syncs within
        10 s (it takes well under 1 s unloaded)."""
        stop = threading.Event()
        started = threading.Event()
        out = {}
        t = threading.Thread(target=lambda: out.update(res=h2attack.continuation(
            self.addr, budget=256 * MIB, seconds=20.0, stop=stop,
            started=started)))
        t.start()
        try:
            # The sink dials once the attack is on the wire (or over).
            self.assertTrue(started.wait(WAIT), "the attack never started")
            t_started = time.monotonic()
            sink = self.start([os.path.join(BUILD_DIR, "tools", "mcp-sink"),
                               "--transport", TRANSPORT, "--connect",
                               self.addr, "--collection", VS, "--json"] +
                              tls_flags("client"))
            t0 = time.monotonic()
            while '"event":"synced"' not in sink.text():
                self.assertLess(time.monotonic() - t0, 10.0,
                                "no sync within 10 s during the attack")
                time.sleep(0.05)
            sys.stderr.write("sink synced %.2f s into the attack on %s\n" % (
                time.monotonic() - t_started, TRANSPORT))
        finally:
            stop.set()
            t.join()


class DefaultTransport(unittest.TestCase):
    """Because of the attacks above, a program that listens without
    --transport uses the nghttp2 transport, "h2", TLS included (run with
    --transport h2c only: both transports must be built)."""

    def test_listening_without_transport_flag_is_h2(self):
        if TRANSPORT != "h2c":
            self.skipTest("checked once, by the h2c run")
        tmp = tempfile.mkdtemp(prefix="mcp-attacks-")
        self.addCleanup(shutil.rmtree, tmp, True)
        for prog, extra in (("mcp-source", ["--dir", tmp] +
                             tls_flags("server")),
                            ("mcp-sink", ["--collection", VS] +
                             tls_flags("server"))):
            c = Child([os.path.join(BUILD_DIR, "tools", prog), "--listen",
                       "127.0.0.1:0"] + extra, env=child_env())
            try:
                deadline = time.monotonic() + WAIT
                while " on 127.0.0.1:" not in c.text():
                    self.assertTrue(c.running(), c.text())
                    self.assertLess(time.monotonic(), deadline, c.text())
                    time.sleep(0.05)
                self.assertRegex(c.text(), r"serving Resource\w+ on "
                                 r"127\.0\.0\.1:\d+ \(h2\)")
            finally:
                c.stop()


def main():
    global BUILD_DIR, TRANSPORT
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--transport", required=True, choices=("grpc", "h2c"))
    ap.add_argument("--tls", action="store_true",
                    help="mutual TLS: the attackers shake hands first")
    args, rest = ap.parse_known_args()
    BUILD_DIR = os.path.abspath(args.build_dir)
    TRANSPORT = args.transport
    if args.tls:
        global CERTS
        if not shutil.which("openssl"):
            print("openssl not found: cannot make the test certificates")
            sys.exit(77)
        top = tempfile.mkdtemp(prefix="mcp-attacks-certs-")
        CERTS = os.path.join(top, "certs")
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.run(["sh", os.path.join(here, "..", "gen_certs.sh"), CERTS],
                       check=True, capture_output=True, timeout=120)
        import atexit
        atexit.register(shutil.rmtree, top, True)
        c = lambda n: os.path.join(CERTS, n)  # noqa: E731
        h2attack.set_tls(c("ca.pem"), c("client.pem"), c("client.key"))
    if TRANSPORT == "grpc":
        # gRPC 1.51 has no defence against rapid reset (CVE-2023-44487;
        # gRPC C core's mitigations came in later releases, 1.60 lists
        # several): known to fail, and an unexpected success fails the run
        # so that the docs get updated.
        Attacks.test_rapid_reset_is_bounded = unittest.expectedFailure(
            Attacks.test_rapid_reset_is_bounded)
        # gRPC 1.51's CPU time grows with what it holds of an unfinished
        # header field: one connection keeps a core busy and the server
        # answers nobody else (no setting of 1.51 bounds it).
        Attacks.test_sink_syncs_during_endless_continuation_literal = \
            unittest.expectedFailure(
                Attacks.test_sink_syncs_during_endless_continuation_literal)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
