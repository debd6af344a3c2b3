#!/usr/bin/env python3
"""End-to-end benchmarks: the real mcp-source and mcp-sink over 127.0.0.1.

    bench/e2e_bench.py --build-dir BUILD [--transport grpc,h2c,h2c_tls,grpc_tls]
                       [--quick]
                       [--sinks N] [--changes N] [--rounds N] [--keep]
                       [--bodies struct|typed] [--per-file N] [--many N]
                       [--many-procs N] [--tls-sinks N] [PART ...]

PART: sync1 (initial sync to one sink, and to bench/raw_sink when built)
and sinks (the same to N sinks started at once, the source's memory per
sink, propagation of a file change to N sinks, full-state then
incremental); default: both. sinks10k (issue 25, target 6; not in the
default): --many sinks (10,000) of a 1 MB configuration (10 collections x
100 resources x 1 KiB), as bench/raw_sink --conns processes (--many-procs,
4) of many connections each, every connection from its own 127.1.x.y
address: the initial sync of them all, the source's RSS per idle sink,
and one changed resource reaching all of them (incremental), p50/p99
("sinks10k_*" BENCH lines; "sinksN_*" for another N). tlsload (issue 23;
not in the default): --tls-sinks (1,000) incremental sink streams of that
1 MB configuration in one mcp-load-sink process, every stream its own
endpoint (over TLS its own handshake), for each transport listed: spawn to
the last ACK, both sides' CPU, and NAME_tls against NAME as a ratio
("tls_load1000_*"). The driver raises
its soft RLIMIT_NOFILE to the hard limit for its children. Every transport listed is measured; one that
the programs do not have is skipped with a message (not a failure). A
transport named NAME_tls (h2c_tls, grpc_tls) is NAME over mutual TLS
(tests/gen_certs.sh's certificates, P-256, made with openssl): the source
listens with --tls-cert/--tls-key/--tls-ca, each sink presents a client
certificate; every connection makes a full handshake. raw_sink is
cleartext: not run over TLS.

The workload: 20 collections x 1000 resources, each with a 1 KiB body (a
google.protobuf.Struct of exactly 1024 bytes, the YAML document's spec),
written as 10 YAML files of 100 documents per collection (200 files, 22.6
MB). The source serves them with --debounce 0. --bodies typed: the same
files, the specs sent as a message of their own (bench.v1.Service, compiled
by protoc here; mcp-source --descriptor-set and --kind per collection)
instead of a Struct (the figures' names then carry "_typed"). --per-file 1:
the same resources as 20,000 files of one document (names "e2e_files20000_...":
what one changed file costs in a large directory). "N sinks at once": the
source is stopped (SIGSTOP) while the sinks start and dial, then continued.

Clock: time.monotonic_ns() of this driver. The driver reads the lines the
programs write on stderr (unbuffered, one write per line) as they come,
through one epoll loop, and stamps each read. It runs 10 nice levels above
the programs (when allowed) so that its stamps are taken when the lines are
written, not after 100 busy sinks. The propagation figures use the lines'
own stamps instead (wall clock, microseconds: when the sink had the change,
whatever the driver was doing; see propagate()).
CPU times come from /proc/PID/task/*/schedstat, memory from
/proc/PID/status (VmHWM reset through /proc/PID/clear_refs).

Results are printed as "BENCH <name> <value> <unit>" lines (see
bench/bench_util.h), progress as "# " lines, and a readable table at the
end; docs/benchmarks.md defines every figure. Exit status: 0 when every
measurement of every available transport completed (missed targets are not
failures), 1 otherwise. Standard library only.
"""

import argparse
import calendar
import gc
import json
import os
import random
import resource
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time

now = time.monotonic_ns

MS = 1e6  # ns per ms


_stamp_secs = {}


def log_stamp_ns(stamp):
    """A log line's own stamp ("2026-11-29T08:09:41.700318Z": UTC,
    microseconds; util/log.c) in ns since the epoch."""
    secs = _stamp_secs.get(stamp[:19])
    if secs is None:
        secs = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
        _stamp_secs[stamp[:19]] = secs
    return secs * 10**9 + int(stamp[20:26]) * 1000


class BenchError(Exception):
    pass


def note(msg):
    print("# " + msg, flush=True)


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------

RESULTS = []  # (name, value, unit, what, target, verdict)


def fmt_value(v):
    if v == int(v) and abs(v) >= 100:
        return "%d" % v
    if abs(v) >= 100:
        return "%.1f" % v
    return "%.3g" % v if abs(v) < 1 else "%.2f" % v


# --per-file: a tag in every name ("e2e_files20000_..."), so that the
# figures of another workload never pass for the default one's.
RESULT_TAG = ""


def result(name, value, unit, what, target=None, holds=None):
    """Prints the BENCH line at once and keeps a row for the table."""
    if RESULT_TAG:
        name = name.replace("e2e_", "e2e_%s_" % RESULT_TAG, 1)
    verdict = -1 if target is None else (1 if holds else 0)
    print("BENCH %s %s %s" % (name, fmt_value(value), unit), flush=True)
    RESULTS.append((name, value, unit, what, target, verdict))


def table(title, skipped, prefix="e2e"):
    print()
    print(title)
    w = max([len(r[0]) for r in RESULTS] + [40])
    print("%-*s  %12s %-6s  %-8s %-5s  %s" % (w, "name", "value", "unit",
                                            "target", "holds", "what"))
    for name, value, unit, what, target, verdict in RESULTS:
        holds = {-1: "", 0: "NO", 1: "yes"}[verdict]
        print("%-*s  %12s %-6s  %-8s %-5s  %s" % (
            w, name, fmt_value(value), unit, target or "", holds, what))
    for t, why in skipped:
        print("%-*s  %12s %-6s  %-8s %-5s  %s" % (
            w, prefix + "_*_" + t, "skipped", "", "", "", why))


def percentile(values, p):
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, -(-len(s) * p // 100) - 1))
    return s[int(k)]


def median(values):
    s = sorted(values)
    n = len(s)
    return (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0)


# ---------------------------------------------------------------------------
# Processes and their stderr lines
# ---------------------------------------------------------------------------

class Reactor:
    """One epoll loop over the stderr pipes of every child."""

    def __init__(self):
        self.sel = selectors.DefaultSelector()
        self.procs = []
        self.lower_children = False

    base_nice = 0  # the children's priority: the driver's at its start

    def _preexec(self):
        # The driver runs at a raised priority; its children do not.
        os.setpriority(os.PRIO_PROCESS, 0, Reactor.base_nice)

    def spawn(self, proc, argv, stdout=False):
        """Starts |proc|; its stderr lines (with |stdout|: stdout and
        stderr, merged) come to proc.on_line()."""
        proc.t_spawn = now()
        proc.p = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if stdout else subprocess.PIPE,
            preexec_fn=self._preexec if self.lower_children else None)
        proc.pid = proc.p.pid
        proc.out = proc.p.stdout if stdout else proc.p.stderr
        proc.fd = proc.out.fileno()
        os.set_blocking(proc.fd, False)
        self.sel.register(proc.fd, selectors.EVENT_READ, proc)
        self.procs.append(proc)
        return proc

    def pump(self, timeout):
        """Reads what is ready (waiting at most |timeout| s)."""
        for key, _ in self.sel.select(max(timeout, 0)):
            proc = key.data
            while True:
                try:
                    data = os.read(proc.fd, 65536)
                except BlockingIOError:
                    break
                t = now()
                if not data:
                    self.sel.unregister(proc.fd)
                    proc.eof = True
                    break
                proc.feed(data, t)
                if len(data) < 65536:
                    break  # drained: no second read just to hear EAGAIN

    def wait(self, pred, timeout, what):
        """Pumps until pred() is true; BenchError after |timeout| s."""
        deadline = now() + int(timeout * 1e9)
        while not pred():
            left = (deadline - now()) / 1e9
            if left <= 0:
                raise BenchError("timed out after %.0f s waiting for %s"
                                 % (timeout, what))
            self.pump(min(left, 0.05))

    def idle(self, seconds):
        """Pumps for |seconds| (never sleeps with pipes unread)."""
        end = now() + int(seconds * 1e9)
        while now() < end:
            self.pump((end - now()) / 1e9)

    def forget(self, proc):
        if not proc.eof:
            try:
                self.sel.unregister(proc.fd)
            except (KeyError, ValueError):
                pass
            proc.eof = True
        proc.out.close()
        if proc in self.procs:
            self.procs.remove(proc)

    def stop(self, procs, grace=10.0):
        """SIGTERM (SIGCONT first), then SIGKILL after |grace| s; reaps."""
        procs = [p for p in procs if p.p is not None]
        for p in procs:
            if p.p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    os.kill(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        try:
            self.wait(lambda: all(p.p.poll() is not None for p in procs),
                      grace, "children to exit")
        except BenchError:
            for p in procs:
                if p.p.poll() is None:
                    note("%s (pid %d) did not stop on SIGTERM: SIGKILL"
                         % (p.name, p.pid))
                    p.p.kill()
        for p in procs:
            p.p.wait()
            self.forget(p)

    def kill_all(self):
        for p in list(self.procs):
            if p.p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                p.p.kill()
            p.p.wait()
            self.forget(p)


class Proc:
    def __init__(self, name):
        self.name = name
        self.p = None
        self.pid = None
        self.buf = b""
        self.eof = False
        self.problems = []  # warning and error lines
        self.tail = []      # the last lines, for error reports

    def feed(self, data, t):
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            self.tail = (self.tail + [line])[-20:]
            if ": error: " in line or ": warning: " in line:
                self.problems.append(line)
            self.on_line(line, t)

    def on_line(self, line, t):
        pass

    def exited(self):
        return self.p.poll() is not None


# Text log lines start with the time (issue 24 item 13).
STAMP = r"^\S+Z "
RE_SERVING = re.compile(r"serving ResourceSource on (\S+):(\d+) \((\S+)\)")
RE_COLL = re.compile(STAMP + r"mcp-source: info: collection (\S+): (\d+) resources?$")
RE_CHANGED = re.compile(STAMP + r"mcp-source: info: (\d+) collections? changed")
RE_SRC_CONN = re.compile(STAMP + r"mcp-source: info: stream \d+: sink .* connected")
RE_SRC_CLOSED = re.compile(STAMP + r"mcp-source: info: stream \d+: .* closed")
RE_APPLIED = re.compile(STAMP + r"mcp-sink: info: (\S+): version (\S+) applied: "
                        r"(\d+) resources, (\d+) removed")


class Source(Proc):
    def __init__(self, name):
        super().__init__(name)
        self.port = None
        self.collections = {}
        self.changes = []  # stamps of "N collections changed"
        self.changes_own = []  # the same lines' own stamps (strings)
        self.connected = 0
        self.closed = 0

    def on_line(self, line, t):
        m = RE_SERVING.search(line)
        if m:
            self.port = int(m.group(2))
            return
        m = RE_COLL.match(line)
        if m and self.port is None:
            self.collections[m.group(1)] = int(m.group(2))
            return
        if RE_CHANGED.match(line):
            self.changes.append(t)
            self.changes_own.append(line[:27])
        elif RE_SRC_CONN.match(line):
            self.connected += 1
        elif RE_SRC_CLOSED.match(line):
            self.closed += 1


class Sink(Proc):
    def __init__(self, name, sample_cpu=False):
        super().__init__(name)
        self.t_dial = None
        self.t_synced = None
        # (stamp, collection, version, nres, nremoved, the line's own stamp)
        self.applied = []
        # propagate(): the collection awaited, its first application since
        # the change, and the count of sinks still waiting (shared)
        self.expect = None
        self.hit = None
        self.left = None
        self.sample_cpu = sample_cpu  # its CPU time at "dialing", "synced"
        self.cpu_dial = self.cpu_synced = None

    def on_line(self, line, t):
        m = RE_APPLIED.match(line)
        if m:
            e = (t, m.group(1), m.group(2), int(m.group(3)), int(m.group(4)),
                 line[:27])
            self.applied.append(e)
            if self.hit is None and e[1] == self.expect:
                self.hit = e
                self.left[0] -= 1
        elif "info: dialing the ResourceSource at" in line:
            self.t_dial = t
            if self.sample_cpu:
                self.cpu_dial = cpu_ns(self.pid)
        elif "info: synced: " in line:
            self.t_synced = t
            if self.sample_cpu:
                self.cpu_synced = cpu_ns(self.pid)


class RawMany(Proc):
    """A bench/raw_sink --conns process: its SYNCED and CHANGE lines."""

    def __init__(self, name):
        super().__init__(name)
        self.synced = None   # (first connect ns, last synced ns, conns, ...)
        self.changes = []    # (collection, version, resources, [ns, ...])

    def on_line(self, line, t):
        f = line.split()
        if not f:
            return
        if f[0] == "SYNCED":
            self.synced = [int(x) for x in f[1:]]
        elif f[0] == "CHANGE":
            self.changes.append((f[1], f[2], int(f[3]),
                                 [int(x) for x in f[5:]]))


class LoadSink(Proc):
    """An mcp-load-sink process (many sink streams, one endpoint each):
    when each (stream, collection) first ACKed a push of |nres|."""

    def __init__(self, name, nres):
        super().__init__(name)
        self.nres = nres
        self.synced = {}  # (stream, collection) -> stamp

    def on_line(self, line, t):
        if not line.startswith('{"event":"ack"'):
            return
        e = json.loads(line)
        if e["n"] == self.nres:
            self.synced.setdefault((e["s"], e["c"]), t)


def raise_nofile(need):
    """Raises the soft RLIMIT_NOFILE to the hard limit (the children
    inherit it); BenchError when the hard limit is below |need|."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY
                                           or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft != resource.RLIM_INFINITY and soft < need:
        raise BenchError("open files: the hard limit is %d, %d needed "
                         "(ulimit -Hn)" % (soft, need))
    return soft


def proc_status(pid):
    """VmRSS and VmHWM of |pid| in bytes."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0]) * 1024
    return out["VmRSS"], out["VmHWM"]


def reset_hwm(pid):
    """Resets VmHWM to the current RSS (Linux >= 4.0)."""
    with open("/proc/%d/clear_refs" % pid, "w") as f:
        f.write("5")


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_ns(pid):
    """CPU time of every thread of |pid| (schedstat: ns on the CPU)."""
    total = 0
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except FileNotFoundError:
        return 0
    for tid in tasks:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass
    return total


# ---------------------------------------------------------------------------
# The workload
# ---------------------------------------------------------------------------

def varint_len(n):
    k = 1
    while n >= 0x80:
        n >>= 7
        k += 1
    return k


def ld_len(field, n):
    return varint_len(field << 3 | 2) + varint_len(n) + n


def value_len(v):
    """Encoded size of a google.protobuf.Value holding |v|."""
    if isinstance(v, bool):
        return 2
    if isinstance(v, (int, float)):
        return 9  # number_value: tag + fixed64
    if isinstance(v, str):
        return ld_len(3, len(v.encode()))
    if isinstance(v, list):
        return ld_len(6, sum(ld_len(1, value_len(x)) for x in v))
    if isinstance(v, dict):
        return ld_len(5, struct_len(v))
    raise TypeError(v)


def struct_len(d):
    """Encoded size of a google.protobuf.Struct holding |d|."""
    return sum(ld_len(1, ld_len(1, len(k.encode())) + ld_len(2, value_len(v)))
               for k, v in d.items())


# --bodies typed: the spec's own message. Field numbers follow the order of
# Workload.spec(); typed_len() is its encoded size.
TYPED_PROTO = """syntax = "proto3";
package bench.v1;
message Service {
  repeated string hosts = 1;
  int32 port = 2;
  string protocol = 3;
  int64 revision = 4;
  string owner = 5;
  int32 timeout_seconds = 6;
  int32 retries = 7;
  string data = 8;
}
"""
TYPED_MESSAGE = "bench.v1.Service"


def typed_len(d):
    n = sum(ld_len(1, len(h.encode())) for h in d["hosts"])
    for f, k in ((2, "port"), (4, "revision"), (6, "timeoutSeconds"),
                 (7, "retries")):
        if d[k]:
            n += 1 + varint_len(d[k])
    for f, k in ((3, "protocol"), (5, "owner"), (8, "data")):
        n += ld_len(f, len(d[k].encode()))
    return n


def typed_source_args(root, colls):
    """mcp-source's flags for typed bench bodies: the descriptor set
    (protoc) and a --kind per collection."""
    proto = os.path.join(root, "bench_service.proto")
    with open(proto, "w") as f:
        f.write(TYPED_PROTO)
    pb = os.path.join(root, "bench_service.pb")
    subprocess.run(["protoc", "-I", root, "--include_imports",
                    "--descriptor_set_out=" + pb, "bench_service.proto"],
                   check=True)
    args = ["--descriptor-set", pb]
    for c in range(colls):
        args += ["--kind", "bench.istio.io/v1alpha1/Kind%02d=%s" % (
            c, TYPED_MESSAGE)]
    return args


class Workload:
    """20 collections x N resources, YAML files of 100 documents."""

    def __init__(self, root, ncoll, nres, per_file, body):
        self.root = root
        self.dir = os.path.join(root, "config")
        self.stage = os.path.join(root, "stage")  # same file system
        self.ncoll, self.nres, self.per_file, self.body = (
            ncoll, nres, per_file, body)
        self.nfiles = nres // per_file
        self.label = "%d x %d x %d B" % (ncoll, nres, body)
        self.rev = [[0] * nres for _ in range(ncoll)]
        self.blob = {}
        os.makedirs(self.dir)
        os.makedirs(self.stage)
        self.body_bytes = []
        self.typed_bytes = []
        for c in range(ncoll):
            for f in range(self.nfiles):
                with open(self.path(c, f), "w") as fh:
                    fh.write(self.file_text(c, f))

    def collection(self, c):
        # What the loader makes of apiVersion bench.istio.io/v1alpha1 and
        # kind KindNN (checked against the source's list).
        return "istio/bench/v1alpha1/kind%02ds" % c

    def path(self, c, f):
        return os.path.join(self.dir, "kind%02d-%02d.yaml" % (c, f))

    def spec(self, c, r, blob):
        ns = "ns-%02d" % (r % 50)
        return ns, {
            "hosts": ["kind%02d-%05d.%s.svc.cluster.local" % (c, r, ns)],
            "port": 8000 + r % 1000,
            "protocol": "HTTP",
            "revision": self.rev[c][r],
            "owner": "team-%d" % (r % 13),
            "timeoutSeconds": 30,
            "retries": 3,
            "data": blob,
        }

    def doc(self, c, r):
        key = (c, r)
        if key not in self.blob:
            # Printable, never a YAML number: "x" + hex.
            rnd = random.Random(c * 1000003 + r)
            n = self.body - 200
            for _ in range(3):  # size the blob so that the Struct is |body|
                _, sp = self.spec(c, r, "x" * n)
                n += self.body - struct_len(sp)
            self.blob[key] = "x" + rnd.randbytes(n).hex()[:n - 1]
            self.body_bytes.append(struct_len(self.spec(c, r,
                                                        self.blob[key])[1]))
            self.typed_bytes.append(typed_len(self.spec(c, r,
                                                        self.blob[key])[1]))
        ns, sp = self.spec(c, r, self.blob[key])
        return ("apiVersion: bench.istio.io/v1alpha1\n"
                "kind: Kind%02d\n"
                "metadata:\n"
                "  name: kind%02d-%05d\n"
                "  namespace: %s\n"
                "  labels:\n"
                "    app: app-%d\n"
                "    version: v%d\n"
                "spec:\n"
                "  hosts:\n"
                "  - %s\n"
                "  port: %d\n"
                "  protocol: %s\n"
                "  revision: %d\n"
                "  owner: %s\n"
                "  timeoutSeconds: %d\n"
                "  retries: %d\n"
                "  data: %s\n") % (
                    c, c, r, ns, r % 97, r % 3, sp["hosts"][0], sp["port"],
                    sp["protocol"], sp["revision"], sp["owner"],
                    sp["timeoutSeconds"], sp["retries"], sp["data"])

    def file_text(self, c, f):
        return "---\n".join(self.doc(c, r) for r in
                            range(f * self.per_file, (f + 1) * self.per_file))

    def stage_change(self, c, r):
        """Bumps resource r of collection c; returns (staged, final path):
        the new file, written beside the tree and on disk, to be renamed
        into it. Synced as careful writers do (write, fsync, rename): else
        ext4 writes the new file's data back inside rename(2) when it
        replaces a file (auto_da_alloc), before the new name is seen."""
        self.rev[c][r] += 1
        f = r // self.per_file
        staged = os.path.join(self.stage, "kind%02d-%02d.yaml" % (c, f))
        with open(staged, "w") as fh:
            fh.write(self.file_text(c, f))
            fh.flush()
            os.fsync(fh.fileno())
        return staged, self.path(c, f)

    def size(self):
        return sum(os.path.getsize(os.path.join(self.dir, n))
                   for n in os.listdir(self.dir))


# ---------------------------------------------------------------------------
# The benchmark
# ---------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.reactor = Reactor()
        tools = os.path.join(args.build_dir, "tools")
        self.src_bin = os.path.join(tools, "mcp-source")
        self.sink_bin = os.path.join(tools, "mcp-sink")
        # --bodies typed: the data source's extra flags, the names' suffix.
        self.source_args = []
        self.sfx = "_typed" if args.bodies == "typed" else ""
        self.raw_bin = os.path.join(args.build_dir, "bench", "raw_sink")
        if not os.access(self.raw_bin, os.X_OK):
            self.raw_bin = None
        self.failed = []
        self.certs = None  # the first *_tls transport makes them
        self.load_bin = os.path.join(tools, "mcp-load-sink")
        self.tls_figures = {}  # transport -> (sync s, source, sinks CPU s)
        self.hs_bin = os.path.join(args.build_dir, "bench", "tls_handshake")

    # ---- NAME_tls: NAME over mutual TLS ----

    def tls_args(self, t, leaf):
        """(the transport's own name, the flags presenting |leaf|)."""
        if not t.endswith("_tls"):
            return t, []
        if self.certs is None:
            self.certs = tempfile.mkdtemp(prefix="mcp-bench-certs-")
            here = os.path.dirname(os.path.abspath(__file__))
            subprocess.run(["sh", os.path.join(here, "..", "tests",
                                               "gen_certs.sh"), self.certs],
                           check=True, capture_output=True, timeout=120)
        c = lambda n: os.path.join(self.certs, n)  # noqa: E731
        return t[:-4], ["--tls-cert", c(leaf + ".pem"), "--tls-key",
                        c(leaf + ".key"), "--tls-ca", c("ca.pem")]

    # ---- programs ----

    def start_source(self, t, name, extra):
        s = Source(name)
        base, tls = self.tls_args(t, "server")
        self.reactor.spawn(s, [self.src_bin, "--transport", base, "--listen",
                               "127.0.0.1:0", "--debounce", "0",
                               "--log-level", "info"] + tls + extra)
        self.reactor.wait(lambda: s.port is not None or s.exited(), 120,
                          "%s to listen" % name)
        if s.port is None:
            self.reactor.wait(lambda: s.eof, 5, "%s's output" % name)
            raise BenchError("%s exited with %s: %s" % (
                name, s.p.returncode, " | ".join(s.tail[-5:])))
        return s

    def sink_argv(self, t, port, colls, exit_after_sync=False,
                  incremental=False):
        base, tls = self.tls_args(t, "client")
        argv = [self.sink_bin, "--transport", base, "--connect",
                "127.0.0.1:%d" % port, "--log-level", "info"] + tls
        for c in colls:
            argv += ["--collection", c]
        if exit_after_sync:
            argv.append("--exit-after-sync")
        if incremental:
            argv.append("--incremental")
        return argv

    def available(self, t):
        """None when both programs run transport t, else why not."""
        s = Source("probe source")
        base, tls = self.tls_args(t, "server")
        self.reactor.spawn(s, [self.src_bin, "--transport", base, "--listen",
                               "127.0.0.1:0", "--collection", "probe"] + tls)
        try:
            self.reactor.wait(lambda: s.port is not None or s.exited(), 10,
                              "the probe source")
            if s.port is None:
                self.reactor.wait(lambda: s.eof, 5, "the probe's output")
                return "mcp-source --transport %s: exit %d: %s" % (
                    t, s.p.returncode, " | ".join(s.tail[-3:]))
            k = Sink("probe sink")
            self.reactor.spawn(k, self.sink_argv(t, s.port, ["probe"],
                                                 exit_after_sync=True))
            try:
                self.reactor.wait(lambda: k.exited(), 10, "the probe sink")
            except BenchError:
                self.reactor.stop([k])
                return "mcp-sink --transport %s: no sync within 10 s" % t
            self.reactor.wait(lambda: k.eof, 5, "the probe sink's output")
            if k.p.returncode != 0 or k.t_synced is None:
                return "mcp-sink --transport %s: exit %d: %s" % (
                    t, k.p.returncode, " | ".join(k.tail[-3:]))
            self.reactor.forget(k)
            return None
        finally:
            self.reactor.stop([s])

    def check_sink_synced(self, k, colls, expect_total):
        got = {}
        for _, coll, _, nres, _, _ in k.applied:
            got.setdefault(coll, nres)
        if set(got) != set(colls) or sum(got.values()) != expect_total:
            raise BenchError("%s synced %d collections, %d resources; "
                             "expected %d, %d" % (k.name, len(got),
                                                  sum(got.values()),
                                                  len(colls), expect_total))

    # ---- part 1: one sink ----

    def sync1(self, t, wl, src, empty, colls, total):
        """Initial sync to one sink, alternating with a trivial sync (the
        same collections, empty) that measures what is not the data."""
        r = self.reactor
        runs = {"full": [], "empty": []}
        cold = None
        for rnd in range(self.args.rounds + 1):
            order = ("full", "empty") if rnd % 2 == 0 else ("empty", "full")
            for kind in order:
                s = src if kind == "full" else empty
                k = Sink("sink", sample_cpu=True)
                c0 = cpu_ns(s.pid)
                r.spawn(k, self.sink_argv(t, s.port, colls,
                                          exit_after_sync=True))
                r.wait(lambda: k.t_synced is not None or k.exited(), 60,
                       "a sink's sync (%s)" % kind)
                c1 = cpu_ns(s.pid)
                r.wait(lambda: k.exited(), 15, "the sink to exit after sync")
                r.wait(lambda: k.eof, 5, "the sink's output")
                if k.t_synced is None or k.p.returncode != 0:
                    raise BenchError("sink exited with %d before its sync: %s"
                                     % (k.p.returncode, " | ".join(k.tail)))
                self.check_sink_synced(k, colls,
                                       total if kind == "full" else 0)
                run = {"dial": (k.t_synced - k.t_dial) / MS,
                       "spawn": (k.t_synced - k.t_spawn) / MS,
                       "start": (k.t_dial - k.t_spawn) / MS,
                       "sink_cpu": (k.cpu_synced - k.cpu_dial) / MS,
                       "src_cpu": (c1 - c0) / MS}
                r.forget(k)
                if rnd == 0:
                    if kind == "full":
                        cold = run
                    continue
                runs[kind].append(run)
                r.idle(0.05)
            if self.raw_bin and not t.endswith("_tls"):
                raw = self.raw_sync(src, colls, total)
                if rnd > 0:
                    runs.setdefault("raw", []).append(raw)
                r.idle(0.05)
        full, emp = runs["full"], runs["empty"]

        def med(rs, key):
            return median([x[key] for x in rs])
        dial = [x["dial"] for x in full]
        note("%s 1 sink: dial->synced median %.2f ms (min %.2f, max %.2f, "
             "%d runs; the first run, not counted: %.2f ms); spawn->synced "
             "%.2f ms; spawn->dialing %.2f ms" % (
                 t, median(dial), min(dial), max(dial), len(dial),
                 cold["dial"], med(full, "spawn"), med(full, "start")))
        note("%s 1 sink: CPU time from its dial to its sync: the sink %.2f "
             "ms (all threads), the source %.2f ms (from the sink's spawn)"
             % (t, med(full, "sink_cpu"), med(full, "src_cpu")))
        note("%s 1 sink, %d empty collections: dial->synced %.2f ms, "
             "spawn->synced %.2f ms; CPU: the sink %.2f ms, the source "
             "%.2f ms" % (t, len(colls), med(emp, "dial"), med(emp, "spawn"),
                          med(emp, "sink_cpu"), med(emp, "src_cpu")))
        v = median(dial)
        result("e2e_initial_sync_1sink%s_ms_%s" % (self.sfx, t), v, "ms",
               "%s initial sync, 1 sink: from its dial to every collection "
               "ACKed%s" % (wl.label, ", typed bodies" if self.sfx else ""),
               "< 50", v < 50)
        result("e2e_initial_sync_1sink_net%s_ms_%s" % (self.sfx, t),
               med(full, "spawn") - med(emp, "spawn"), "ms",
               "the same as (spawn->synced) - (spawn->synced with the "
               "collections empty)")
        result("e2e_initial_sync_1sink_sink_cpu%s_ms_%s" % (self.sfx, t),
               med(full, "sink_cpu"), "ms",
               "the sink's CPU time (all threads) from its dial to its sync")
        result("e2e_initial_sync_1sink_source_cpu%s_ms_%s" % (self.sfx, t),
               med(full, "src_cpu"), "ms",
               "the source's CPU time (all threads) for that sync")
        if "raw" in runs:
            raw = runs["raw"]
            note("%s raw sink (bench/raw_sink: HTTP/2, no decoding): "
                 "connect->synced median %.2f ms (min %.2f, max %.2f); CPU: "
                 "the raw sink %.2f ms, the source %.2f ms" % (
                     t, med(raw, "dial"), min(x["dial"] for x in raw),
                     max(x["dial"] for x in raw), med(raw, "sink_cpu"),
                     med(raw, "src_cpu")))
            result("e2e_initial_sync_1sink_raw%s_ms_%s" % (self.sfx, t), med(raw, "dial"),
                   "ms", "the same sync to bench/raw_sink, which ACKs "
                   "without decoding: the source and the transport alone")

    def raw_sync(self, src, colls, total):
        """One sync to bench/raw_sink (run to its end: it exits at once)."""
        c0 = cpu_ns(src.pid)
        u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            out = subprocess.run(
                [self.raw_bin, "127.0.0.1:%d" % src.port] + colls,
                stdin=subprocess.DEVNULL, capture_output=True, text=True,
                timeout=60,
                preexec_fn=self.reactor._preexec
                if self.reactor.lower_children else None)
        except subprocess.TimeoutExpired:
            raise BenchError("raw_sink: no sync within 60 s")
        u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        c1 = cpu_ns(src.pid)
        f = out.stdout.split()
        if out.returncode != 0 or len(f) != 5 or f[0] != "RAW" or \
                int(f[2]) != len(colls) or int(f[4]) != total:
            raise BenchError("raw_sink: exit %d: %s %s" % (
                out.returncode, out.stdout.strip(), out.stderr.strip()))
        return {"dial": int(f[1]) / MS,
                "sink_cpu": (u1.ru_utime + u1.ru_stime - u0.ru_utime -
                             u0.ru_stime) * 1e3,
                "src_cpu": (c1 - c0) / MS}

    # ---- part 2: N sinks ----

    def start_sinks_at_once(self, t, src, n, colls, incremental):
        """Starts n sinks against a stopped source (SIGSTOP): they connect
        (the kernel completes the handshakes into the listen backlog) and
        send their requests; then SIGCONT. Returns (sinks, t0)."""
        r = self.reactor
        sinks = []
        os.kill(src.pid, signal.SIGSTOP)
        try:
            for i in range(n):
                k = Sink("sink %d" % i)
                r.spawn(k, self.sink_argv(t, src.port, colls,
                                          incremental=incremental))
                sinks.append(k)
            r.wait(lambda: all(k.t_dial is not None or k.exited()
                               for k in sinks), 60, "%d sinks to dial" % n)
            dead = [k for k in sinks if k.exited()]
            if dead:
                raise BenchError("%s exited: %s" % (dead[0].name,
                                                    " | ".join(dead[0].tail)))
            r.idle(0.5)  # their connections and requests go out
        finally:
            t0 = now()
            os.kill(src.pid, signal.SIGCONT)
        return sinks, t0

    def wait_synced(self, sinks, timeout):
        self.reactor.wait(lambda: all(k.t_synced is not None or k.exited()
                                      for k in sinks), timeout,
                          "%d sinks to sync" % len(sinks))
        dead = [k for k in sinks if k.t_synced is None]
        if dead:
            raise BenchError("%s exited before its sync: %s" % (
                dead[0].name, " | ".join(dead[0].tail)))

    def propagate(self, t, wl, src, sinks, incremental):
        """One file change at a time; returns per-reception latencies (ms),
        per change the last sink's (ms), the source's apply (ms), and the
        first and last as this driver read them (ms).
        A reception's time is the sink's own stamp on its "applied" line
        (the wall clock, read by the sink after the apply) against the
        wall clock just before the rename: when the sink had it, whatever
        this driver was doing then. Stamped by this driver's reads instead
        (the figures before issue 25's session 19, printed as a note), a
        change also waited for the driver: for its rename(2) to return
        (ext4 frees the replaced file after the new name is seen: 0.3 to 2
        ms), for a garbage collection of its heap, for its turn among 100
        sinks. So the driver also steps down to the programs' priority
        here, and its cycle collector is off."""
        gc.collect()
        gc.freeze()
        gc.disable()
        prio = None
        try:
            prio = os.getpriority(os.PRIO_PROCESS, 0)
            os.setpriority(os.PRIO_PROCESS, 0, Reactor.base_nice)
        except OSError:
            prio = None
        try:
            return self.propagate_(t, wl, src, sinks, incremental)
        finally:
            if prio is not None:
                try:
                    os.setpriority(os.PRIO_PROCESS, 0, prio)
                except OSError:
                    pass
            gc.enable()
            gc.unfreeze()

    def propagate_(self, t, wl, src, sinks, incremental):
        r = self.reactor
        every, last, at_src = [], [], []
        every_read, at_src_read = [], []
        for i in range(self.args.changes):
            c = (i * 7) % wl.ncoll
            res = (i * 37 + 11) % wl.nres
            coll = wl.collection(c)
            staged, final = wl.stage_change(c, res)
            r.idle(0.1)  # settle between changes
            # Each sink counts itself down when it applies |coll|: the
            # wait's test is O(1), not a walk of 100 sinks per line read
            # (the driver runs above the sinks' priority; its CPU is
            # theirs taken).
            left = [len(sinks)]
            for k in sinks:
                k.expect, k.hit, k.left = coll, None, left
            nchg = len(src.changes)
            t0 = now()
            t0_wall = time.time_ns()
            os.rename(staged, final)
            if self.args.hold_reads > 0:
                time.sleep(self.args.hold_reads / 1000.0)
            r.wait(lambda: left[0] == 0, 20,
                   "change %d to reach %d sinks" % (i, len(sinks)))
            lat = []
            for k in sinks:
                e, k.expect = k.hit, None
                want = 1 if incremental else wl.nres
                if e[3] != want or e[4] != 0:
                    raise BenchError("%s applied %d resources, %d removed for "
                                     "change %d; expected %d, 0" % (
                                         k.name, e[3], e[4], i, want))
                lat.append((log_stamp_ns(e[5]) - t0_wall) / MS)
                every_read.append((e[0] - t0) / MS)
            every += lat
            last.append(max(lat))
            if len(src.changes) > nchg:
                at_src.append((log_stamp_ns(src.changes_own[nchg]) - t0_wall)
                              / MS)
                at_src_read.append((src.changes[nchg] - t0) / MS)
        if min(every + at_src) < 0:
            raise BenchError("a log stamp before its change: the wall clock "
                             "was stepped during the run")
        return every, last, at_src, (every_read, at_src_read)

    def idle_sinks(self, t, empty, colls):
        """What a connection costs the source without data: N sinks on the
        same collections, empty."""
        r = self.reactor
        n = self.args.sinks
        r.wait(lambda: empty.closed >= empty.connected, 15,
               "the empty source to close the earlier streams")
        r.idle(0.2)
        rss0, _ = proc_status(empty.pid)
        reset_hwm(empty.pid)
        _, hwm0 = proc_status(empty.pid)
        sinks, t0 = self.start_sinks_at_once(t, empty, n, colls, False)
        try:
            self.wait_synced(sinks, 120)
            rss1, hwm1 = proc_status(empty.pid)
            note("%s %d sinks at once, %d empty collections: the last synced "
                 "after %.1f ms; source RSS %.1f -> %.1f MB (peak %.1f)" % (
                     t, n, len(colls),
                     max(k.t_synced - t0 for k in sinks) / MS, rss0 / 1e6,
                     rss1 / 1e6, hwm1 / 1e6))
            result("e2e_source_rss_per_idle_sink_bytes_%s" % t,
                   round((hwm1 - hwm0) / n), "bytes",
                   "the same with the collections empty: a connection and "
                   "its session, no data")
        finally:
            r.stop(sinks)

    def sinks(self, t, wl, src, colls, total):
        r = self.reactor
        n = self.args.sinks
        # Every earlier stream closed.
        r.wait(lambda: src.closed >= src.connected, 15,
               "the source to close the earlier streams")
        r.idle(0.2)
        rss0, _ = proc_status(src.pid)
        reset_hwm(src.pid)
        _, hwm0 = proc_status(src.pid)
        cpu0 = cpu_ns(src.pid)

        # -- full-state sinks: sync, memory, propagation --
        sinks, t0 = self.start_sinks_at_once(t, src, n, colls, False)
        try:
            self.wait_synced(sinks, 300)
            cpu1 = cpu_ns(src.pid)
            rss1, hwm1 = proc_status(src.pid)
            sink_cpu = [cpu_ns(k.pid) / MS for k in sinks]
            for k in sinks:
                self.check_sink_synced(k, colls, total)
            done = sorted((k.t_synced - t0) / MS for k in sinks)
            note("%s %d sinks at once: first synced after %.1f ms, median "
                 "%.1f, last %.1f; source CPU %.1f ms (%.2f ms per sink); "
                 "sink CPU median %.1f ms each" % (
                     t, n, done[0], median(done), done[-1],
                     (cpu1 - cpu0) / MS, (cpu1 - cpu0) / MS / n,
                     median(sink_cpu)))
            result("e2e_initial_sync_%dsinks_ms_%s" % (n, t), done[-1], "ms",
                   "%s initial sync, %d sinks started at once: until "
                   "the last one has every collection ACKed" % (wl.label, n))
            result("e2e_initial_sync_%dsinks_source_cpu_ms_%s" % (n, t),
                   (cpu1 - cpu0) / MS, "ms",
                   "the source's CPU time (all threads) for that sync")
            note("%s source: RSS %.1f MB before, %.1f MB with %d synced "
                 "sinks; peak %.1f MB (from %.1f)" % (
                     t, rss0 / 1e6, rss1 / 1e6, n, hwm1 / 1e6, hwm0 / 1e6))
            result("e2e_source_rss_per_sink_bytes_%s" % t,
                   round((hwm1 - hwm0) / n), "bytes",
                   "source's peak RSS (VmHWM) growth per sink, %d sinks "
                   "syncing %s" % (n, wl.label))
            result("e2e_source_rss_steady_per_sink_bytes_%s" % t,
                   round((rss1 - rss0) / n), "bytes",
                   "source's RSS growth per synced, idle sink")

            self.report_propagation(t, n, wl.nres, "full",
                                    *self.propagate(t, wl, src, sinks, False))
        finally:
            r.stop(sinks)

        # -- incremental sinks: propagation of one resource --
        r.wait(lambda: src.closed >= src.connected, 15,
               "the source to close the earlier streams")
        sinks, t0 = self.start_sinks_at_once(t, src, n, colls, True)
        try:
            self.wait_synced(sinks, 300)
            done = max((k.t_synced - t0) / MS for k in sinks)
            note("%s %d incremental sinks at once: last synced after %.1f ms"
                 % (t, n, done))
            # What the programs spend idle (timers), to take out of what
            # the changes cost: a second of it, then the changes.
            def cpus():
                return [cpu_ns(k.pid) for k in sinks + [src]]
            i0, ti0 = cpus(), now()
            r.idle(1.0)
            i1, ti1 = cpus(), now()
            prop = self.propagate(t, wl, src, sinks, True)
            c1, tc1 = cpus(), now()
            self.report_propagation(t, n, wl.nres, "", *prop)
            busy = [(c - b) - (b - a) * (tc1 - ti1) / (ti1 - ti0)
                    for a, b, c in zip(i0, i1, c1)]
            self.report_change_cpu(t, n, len(prop[1]), busy[:-1], busy[-1])
        finally:
            r.stop(sinks)

    def report_propagation(self, t, n, nres, kind, every, last, at_src, read):
        what = ("incremental: the one changed resource" if not kind else
                "full state: the changed collection (%d resources)" % nres)
        sfx = "_" + kind if kind else ""
        note("%s propagation (%s) to %d sinks, %d changes: per reception "
             "p50 %.2f p90 %.2f p99 %.2f max %.2f ms; per change, the last "
             "sink: median %.2f max %.2f ms; file write -> source's store "
             "updated: median %.2f ms (max %.2f)" % (
                 t, what, n, len(last), percentile(every, 50),
                 percentile(every, 90), percentile(every, 99), max(every),
                 median(last), max(last), median(at_src) if at_src else -1,
                 max(at_src) if at_src else -1))
        rd, rd_src = read
        note("%s the same, stamped when this driver read the lines (as "
             "before session 19): p50 %.2f p99 %.2f max %.2f ms; the "
             "source's store: median %.2f ms" % (
                 t, percentile(rd, 50), percentile(rd, 99), max(rd),
                 median(rd_src) if rd_src else -1))
        result("e2e_propagation%s_p50_ms_%s" % (sfx, t),
               percentile(every, 50), "ms",
               "file renamed -> sink applied (its own log stamp), %s; p50 "
               "over all %d receptions "
               "(%d sinks x %d changes)" % (what, len(every), n, len(last)))
        result("e2e_propagation%s_p99_ms_%s" % (sfx, t),
               percentile(every, 99), "ms", "the same, p99")
        result("e2e_propagation%s_last_p50_ms_%s" % (sfx, t), median(last),
               "ms", "the same, per change until the last sink applied it: median")
        if not kind and at_src:
            result("e2e_propagation_source_p50_ms_%s" % t, median(at_src),
                   "ms", "file renamed into place -> the source's store "
                   "updated (inotify, that file read alone, the store's "
                   "upsert; the source's own stamp on its log line): median")
            result("e2e_propagation_source_p99_ms_%s" % t,
                   percentile(at_src, 99), "ms", "the same, p99")

    def report_change_cpu(self, t, n, changes, sink_ns, src_ns):
        """What one incremental change costs in CPU: each sink's (median
        over the sinks) and the source's, over the whole propagation run,
        less what each spent idle at the rate of the second before it (gRPC's
        timers; an idle h2c sink spends nothing, an idle h2c source about
        0.1 ms a second, its 1 s timers). A change finds every
        sink asleep (0.1 s between changes), so this is the cost of a
        wake-up too. n sinks times a sink's share, spread over this
        machine's CPUs, is the least the last sink can wait once every sink
        takes its turn."""
        per_sink = median(sink_ns) / changes / 1e3
        per_src = src_ns / changes / 1e3
        ncpu = os.cpu_count() or 1
        note("%s CPU per incremental change: a sink %.1f us (median of %d; "
             "min %.1f, max %.1f), the source %.1f us; %d sinks on %d CPUs: "
             "%.2f ms of their and the source's work per CPU" % (
                 t, per_sink, n, min(sink_ns) / changes / 1e3,
                 max(sink_ns) / changes / 1e3, per_src, n, ncpu,
                 (per_sink * n + per_src) / ncpu / 1e3))
        result("e2e_propagation_sink_cpu_us_%s" % t, per_sink, "us",
               "incremental propagation: one sink's CPU time (all threads) "
               "per change, median over the sinks")
        result("e2e_propagation_source_cpu_us_%s" % t, per_src, "us",
               "the same, the source's per change (to all the sinks)")

    # ---- part 3: thousands of sinks (bench/raw_sink --conns) ----

    def many_name(self, n, t, what):
        k = "10k" if n == 10000 else str(n)
        return "sinks%s_%s%s" % (k, what, "" if t == "h2c" else "_" + t)

    def sinks_many(self, t, wl):
        """N incremental sinks of the 1 MB workload, in a few raw_sink
        processes of many connections each: the initial sync of them all,
        the source's memory per idle sink, then one changed resource at a
        time to every one of them."""
        if t.endswith("_tls"):
            note("%s: sinks%d: raw_sink is cleartext: skipped" % (
                t, self.args.many))
            return
        if not self.raw_bin:
            raise BenchError("bench/raw_sink is not built")
        r = self.reactor
        n = self.args.many
        procs = max(1, min(self.args.many_procs, n))
        colls = [wl.collection(c) for c in range(wl.ncoll)]
        total = wl.ncoll * wl.nres
        src = self.start_source(t, "source (%d sinks)" % n,
                                ["--dir", wl.dir])
        sinks = []
        try:
            if sum(src.collections.values()) != total:
                raise BenchError("the source serves %s" % src.collections)
            r.idle(0.3)
            rss0, _ = proc_status(src.pid)
            reset_hwm(src.pid)
            cpu0 = cpu_ns(src.pid)
            first = 0
            for i in range(procs):
                k = RawMany("raw_sink %d" % i)
                share = n // procs + (1 if i < n % procs else 0)
                r.spawn(k, [self.raw_bin, "127.0.0.1:%d" % src.port,
                            "--conns", str(share), "--first", str(first),
                            "--incremental"] + colls, stdout=True)
                first += share
                sinks.append(k)
            r.wait(lambda: all(k.synced or k.exited() for k in sinks), 600,
                   "%d sinks to sync" % n)
            dead = [k for k in sinks if not k.synced]
            if dead:
                raise BenchError("%s: %s" % (dead[0].name,
                                             " | ".join(dead[0].tail[-3:])))
            cpu1 = cpu_ns(src.pid)
            t_sync = (max(k.synced[1] for k in sinks) -
                      min(k.synced[0] for k in sinks)) / 1e9
            msgs = sum(k.synced[3] for k in sinks)
            nbytes = sum(k.synced[4] for k in sinks)
            nres = sum(k.synced[5] for k in sinks)
            refused = sum(k.synced[6] for k in sinks)
            if msgs != n * len(colls) or nres != n * total:
                raise BenchError("%d sinks got %d messages, %d resources; "
                                 "expected %d, %d" % (n, msgs, nres,
                                                      n * len(colls),
                                                      n * total))
            _, hwm1 = proc_status(src.pid)
            # Every sink idle, nothing in flight, and the h2c transport's
            # write buffers freed (a second after a connection's last write).
            r.idle(1.5)
            rss1, _ = proc_status(src.pid)
            note("%s %d sinks (%d raw_sink processes): synced in %.2f s, "
                 "%.0f MB delivered, %d streams refused by admission and "
                 "asked again; source CPU %.2f s; source RSS %.1f MB "
                 "idle -> %.1f MB with the sinks idle (peak %.1f); load "
                 "average %s" % (
                     t, n, procs, t_sync, nbytes / 1e6, refused,
                     (cpu1 - cpu0) / 1e9,
                     rss0 / 1e6, rss1 / 1e6, hwm1 / 1e6, loadavg()))
            result(self.many_name(n, t, "initial_sync_s"), t_sync, "s",
                   "%s (%d collections) to %d incremental raw sinks: first "
                   "connect to the last one synced" % (wl.label, wl.ncoll, n),
                   "< 10", t_sync < 10)
            result(self.many_name(n, t, "source_cpu_s"), (cpu1 - cpu0) / 1e9,
                   "s", "the source's CPU time (all threads) for that sync")
            per = round((rss1 - rss0) / n)
            result(self.many_name(n, t, "source_bytes_per_idle_sink"), per,
                   "bytes", "(source RSS with the %d synced sinks idle - "
                   "RSS before) / %d" % (n, n), "<= 51200", per <= 51200)
            result(self.many_name(n, t, "source_peak_bytes_per_sink"),
                   round((hwm1 - rss0) / n), "bytes",
                   "(source VmHWM during the sync - RSS before) / %d" % n)

            every, last = [], []
            for i in range(self.args.many_changes):
                c = (i * 7) % wl.ncoll
                res = (i * 37 + 11) % wl.nres
                coll = wl.collection(c)
                staged, final = wl.stage_change(c, res)
                r.idle(0.1)
                marks = [len(k.changes) for k in sinks]
                t0 = now()
                os.rename(staged, final)
                r.wait(lambda: all(any(e[0] == coll for e in k.changes[m:])
                                   for k, m in zip(sinks, marks)), 60,
                       "change %d to reach %d sinks" % (i, n))
                lat = []
                for k, m in zip(sinks, marks):
                    e = [e for e in k.changes[m:] if e[0] == coll][0]
                    if e[2] != 1:
                        raise BenchError("%s: change %d carried %d resources"
                                         % (k.name, i, e[2]))
                    lat += [(x - t0) / MS for x in e[3]]
                every += lat
                last.append(max(lat))
            note("%s change to %d sinks (%d changes): p50 %.1f p90 %.1f p99 "
                 "%.1f max %.1f ms; the last sink per change: median %.1f "
                 "ms; load average %s" % (
                     t, n, len(last), percentile(every, 50),
                     percentile(every, 90), percentile(every, 99),
                     max(every), median(last), loadavg()))
            result(self.many_name(n, t, "change_p50_ms"),
                   percentile(every, 50), "ms",
                   "one resource changed (file renamed into place) -> a "
                   "sink has it (raw_sink: message received, ACK queued); "
                   "p50 over %d sinks x %d changes" % (n, len(last)))
            result(self.many_name(n, t, "change_p99_ms"),
                   percentile(every, 99), "ms", "the same, p99", "< 1000",
                   percentile(every, 99) < 1000)
            result(self.many_name(n, t, "change_last_ms"), median(last),
                   "ms", "the same, per change until the last sink: median")
            if src.problems:
                note("%s source warnings: %s" % (t, src.problems[:5]))
        finally:
            r.stop(sinks + [src])

    # ---- part 4: TLS against cleartext, many sinks (mcp-load-sink) ----

    def tls_load(self, t, wl):
        """N incremental sink streams of the 1 MB workload in one
        mcp-load-sink process (each stream its own endpoint: over TLS its
        own full handshake), started at once: from the spawn to the last
        stream's ACK of every collection, and the source's CPU. The same
        sink program for every transport, so NAME_tls / NAME is what TLS
        costs (issue 23)."""
        r = self.reactor
        n = self.args.tls_sinks
        colls = [wl.collection(c) for c in range(wl.ncoll)]
        # All the streams come from 127.0.0.1: the per-peer limits (new
        # streams: 100/s after 100; h2 TLS handshakes in progress: 32)
        # would pace them, not TLS.
        extra = ["--dir", wl.dir, "--stream-rate", "off"]
        if t == "h2c_tls":
            extra += ["--tls-handshakes-per-peer", str(n)]
        src = self.start_source(t, "source (%d load sinks)" % n, extra)
        k = None
        try:
            r.idle(0.3)
            cpu0 = cpu_ns(src.pid)
            base, tls = self.tls_args(t, "client")
            argv = [self.load_bin, "--transport", base, "--streams", str(n),
                    "--connect", "127.0.0.1:%d" % src.port,
                    "--incremental"] + tls
            for c in colls:
                argv += ["--collection", c]
            k = LoadSink("mcp-load-sink", wl.nres)
            r.spawn(k, argv, stdout=True)
            r.wait(lambda: len(k.synced) == n * len(colls) or k.exited(),
                   600, "%d load sinks to sync" % n)
            if len(k.synced) != n * len(colls):
                raise BenchError("mcp-load-sink exited: %s" %
                                 " | ".join(k.tail[-3:]))
            t_sync = (max(k.synced.values()) - k.t_spawn) / 1e9
            cpu = (cpu_ns(src.pid) - cpu0) / 1e9
            sink_cpu = cpu_ns(k.pid) / 1e9
            note("%s: %d load sinks synced in %.2f s, source CPU %.2f s, "
                 "mcp-load-sink CPU %.2f s; load average %s" % (
                     t, n, t_sync, cpu, sink_cpu, loadavg()))
            self.tls_figures[t] = (t_sync, cpu, sink_cpu)
            name = "tls_load%d_initial_sync_s%s" % (
                n, "" if t == "h2c" else "_" + t)
            result(name, t_sync, "s", "%s (%d collections) to %d incremental "
                   "mcp-load-sink streams: spawn to the last ACK" % (
                       wl.label, wl.ncoll, n))
            result(name.replace("initial_sync_s", "source_cpu_s"), cpu, "s",
                   "the source's CPU time for that sync")
            result(name.replace("initial_sync_s", "sinks_cpu_s"), sink_cpu,
                   "s", "mcp-load-sink's CPU time (all its streams)")
            plain = t[:-4] if t.endswith("_tls") else None
            if plain in self.tls_figures:
                p_sync, p_cpu, p_sink_cpu = self.tls_figures[plain]
                ratio = t_sync / p_sync
                result("tls_load%d_tls_ratio_%s" % (n, plain), ratio, "x",
                       "%s over mutual TLS against cleartext, %d sinks' "
                       "initial sync (wall time; source CPU %.2fx)" % (
                           plain, n, cpu / p_cpu), "<= 1.3", ratio <= 1.3)
                self.tls_floor(n, plain, p_sync, p_cpu + p_sink_cpu)
        finally:
            r.stop([x for x in (k, src) if x])

    def tls_floor(self, n, plain, p_sync, p_cpu):
        """The least the TLS ratio can be on this machine: the cleartext
        sync's CPU (source and sinks) plus n mutual-TLS handshakes of
        OpenSSL alone (bench/tls_handshake, the same certificates), spread
        over every core, against the cleartext wall time. TLS only adds
        work, so the TLS sync cannot take less."""
        if not os.access(self.hs_bin, os.X_OK):
            note("no %s: the ratio's floor is not measured" % self.hs_bin)
            return
        if not hasattr(self, "hs_us"):
            out = subprocess.run(
                [self.hs_bin, "--certs", self.certs, "--handshakes",
                 str(min(n, 1000))], stdin=subprocess.DEVNULL,
                capture_output=True, text=True, timeout=600)
            v = dict((p[1], float(p[2])) for p in
                     (ln.split() for ln in out.stdout.splitlines())
                     if len(p) == 4 and p[0] == "BENCH")
            names = ("tls_handshake_mutual_server_cpu_us",
                     "tls_handshake_mutual_client_cpu_us")
            if out.returncode or any(k not in v for k in names):
                raise BenchError("%s: exit %d, %s" % (
                    self.hs_bin, out.returncode,
                    out.stderr.strip()[-300:] or "no handshake figures"))
            self.hs_us = tuple(v[k] for k in names)
            note("one mutual-TLS handshake, OpenSSL alone: server %.0f us, "
                 "client %.0f us of CPU" % self.hs_us)
        cores = os.cpu_count() or 1
        hs = n * (self.hs_us[0] + self.hs_us[1]) / 1e6
        floor = (p_cpu + hs) / cores / p_sync
        result("tls_load%d_tls_ratio_floor_%s" % (n, plain), floor, "x",
               "the least that ratio can be here: the cleartext sync's CPU "
               "(%.2f s) and %d handshakes' (%.2f s, bench/tls_handshake) "
               "over %d cores, against its %.2f s" % (
                   p_cpu, n, hs, cores, p_sync))

    # ---- one transport ----

    def transport(self, t, wl, parts):
        colls = [wl.collection(c) for c in range(wl.ncoll)]
        total = wl.ncoll * wl.nres
        r = self.reactor
        src = self.start_source(t, "source", ["--dir", wl.dir] +
                                self.source_args)
        empty = None
        try:
            if sorted(src.collections) != sorted(colls) or \
                    sum(src.collections.values()) != total:
                raise BenchError("the source serves %s, expected %d "
                                 "collections of %d" % (src.collections,
                                                        wl.ncoll, wl.nres))
            rss, _ = proc_status(src.pid)
            note("%s source: %d resources loaded in %.0f ms, RSS %.1f MB" % (
                t, total, (src.changes[0] - src.t_spawn) / MS if src.changes
                else -1, rss / 1e6))
            ex = []
            for c in colls:
                ex += ["--collection", c]
            empty = self.start_source(t, "empty source", ex)
            if "sync1" in parts:
                self.sync1(t, wl, src, empty, colls, total)
            if "sinks" in parts:
                self.idle_sinks(t, empty, colls)
                self.sinks(t, wl, src, colls, total)
            if src.problems:
                note("%s source warnings: %s" % (t, src.problems[:5]))
        finally:
            r.stop([x for x in (src, empty) if x])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--transport", default="grpc,h2c",
                    help="comma-separated (default grpc,h2c)")
    ap.add_argument("--quick", action="store_true",
                    help="50 resources per collection, 5 sinks, 5 changes, "
                         "2 rounds; sinks10k: 200 sinks, 3 changes, h2c "
                         "(or the first transport) only: a smoke test, its numbers "
                         "mean nothing")
    ap.add_argument("--sinks", type=int)
    ap.add_argument("--changes", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--keep", action="store_true",
                    help="keep the workload directory")
    ap.add_argument("--bodies", choices=("struct", "typed"), default="struct",
                    help="the bodies mcp-source sends: Struct (the default "
                         "figures) or a message of their own (_typed)")
    ap.add_argument("--per-file", type=int,
                    help="resources per YAML file (default 100, --quick "
                         "10); 1 gives 20,000 files (names tagged "
                         "e2e_filesN_)")
    ap.add_argument("--many", type=int,
                    help="sinks of the sinks10k part (default 10000, "
                         "--quick 200)")
    ap.add_argument("--many-procs", type=int, default=4,
                    help="raw_sink processes sharing them (default 4)")
    ap.add_argument("--tls-sinks", type=int,
                    help="sink streams of the tlsload part (default 1000, "
                         "--quick 20)")
    ap.add_argument("--hold-reads", type=float, default=0, metavar="MS",
                    help="propagation: after each change, read nothing for "
                         "MS milliseconds (the driver sleeps, off the CPU "
                         "the sinks need); the figures are the lines' own "
                         "stamps either way (default 0: read as lines come)")
    ap.add_argument("parts", nargs="*", default=["sync1", "sinks"])
    args = ap.parse_args()
    for p in args.parts:
        if p not in ("sync1", "sinks", "sinks10k", "tlsload"):
            ap.error("unknown part %s (sync1, sinks, sinks10k, tlsload)" % p)
    nres = 50 if args.quick else 1000
    per_file = args.per_file or (10 if args.quick else 100)
    if args.per_file:
        global RESULT_TAG
        RESULT_TAG = "files%d" % (20 * nres // per_file)
    args.sinks = args.sinks or (5 if args.quick else 100)
    args.changes = args.changes or (5 if args.quick else 20)
    args.rounds = args.rounds or (2 if args.quick else 9)
    args.many = args.many or (200 if args.quick else 10000)
    args.many_changes = 3 if args.quick else args.changes
    args.tls_sinks = args.tls_sinks or (20 if args.quick else 1000)

    def on_term(signum, frame):
        raise SystemExit("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_term)

    b = Bench(args)
    for exe in (b.src_bin, b.sink_bin):
        if not os.access(exe, os.X_OK):
            print("e2e_bench: %s not built" % exe, file=sys.stderr)
            return 1
    try:
        base = os.getpriority(os.PRIO_PROCESS, 0)
        Reactor.base_nice = base
        os.setpriority(os.PRIO_PROCESS, 0, max(-20, base - 10))
        b.reactor.lower_children = True
        note("driver at nice %d, the programs at %d" % (max(-20, base - 10),
                                                        base))
    except PermissionError:
        note("driver at normal priority (cannot raise it): its stamps may "
             "lag on a busy machine")

    root = tempfile.mkdtemp(prefix="mcp-e2e-bench-")
    skipped = []
    try:
        t0 = now()
        many = None
        if "sinks10k" in args.parts or "tlsload" in args.parts:
            # Each sink takes a descriptor in the source and one in a
            # raw_sink process (tlsload: all in one mcp-load-sink); the
            # source adds its own (listener, loop, watches: about 30) and
            # the files it reads.
            n = args.many if "sinks10k" in args.parts else 0
            lim = raise_nofile(max(n // args.many_procs,
                                   args.tls_sinks if "tlsload" in args.parts
                                   else 0) + 64)
            note("open files: limit %s (the source needs %d: a socket per "
                 "sink, about 30 of its own, and its YAML files while it "
                 "reads them; mcp-source raises its soft limit to the hard "
                 "one)" % (lim, max(n, args.tls_sinks) + 64))
            # About 1 MB: 10 collections x 100 resources of 1 KiB, one
            # YAML file per collection.
            many = Workload(os.path.join(root, "many"), 10, 100, 100, 1024)
            note("sinks10k workload: %d collections x %d resources, %.2f MB"
                 % (many.ncoll, many.nres, many.size() / 1e6))
        wl = None
        if "sync1" in args.parts or "sinks" in args.parts:
            wl = Workload(root, 20, nres, per_file, 1024)
            note("workload: %d collections x %d resources, bodies (Struct) "
                 "of %d to %d bytes, %d YAML files, %.1f MB, in %s (%.1f s)"
                 % (wl.ncoll, wl.nres, min(wl.body_bytes),
                    max(wl.body_bytes), wl.ncoll * wl.nfiles,
                    wl.size() / 1e6, root, (now() - t0) / 1e9))
        if wl and args.bodies == "typed":
            b.source_args = typed_source_args(root, wl.ncoll)
            note("typed bodies (%s) of %d to %d bytes" % (
                TYPED_MESSAGE, min(wl.typed_bytes), max(wl.typed_bytes)))
        ts = args.transport.split(",")
        quick_t = "h2c" if "h2c" in ts else ts[0]
        for t in ts:
            why = b.available(t)
            if why:
                note("%s: SKIPPED: %s" % (t, why))
                skipped.append((t, why))
                continue
            t1 = now()
            try:
                if wl:
                    b.transport(t, wl, args.parts)
                # --quick (CI's bench-smoke): one transport only (h2c, the
                # default, when listed), to keep the smoke test's time flat.
                if many and "sinks10k" in args.parts and \
                        not (args.quick and t != quick_t):
                    b.sinks_many(t, many)
                if many and "tlsload" in args.parts:
                    b.tls_load(t, many)
            except BenchError as e:
                note("%s: FAILED: %s" % (t, e))
                b.failed.append(t)
                b.reactor.kill_all()
            note("%s: %.0f s" % (t, (now() - t1) / 1e9))
    finally:
        b.reactor.kill_all()
        if b.certs:
            shutil.rmtree(b.certs, ignore_errors=True)
        if args.keep:
            note("workload kept in %s" % root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    table("End-to-end (mcp-source -> mcp-sink over 127.0.0.1)%s" % (
        " [--quick: the numbers mean nothing]" if args.quick else ""),
        skipped)
    return 1 if b.failed else 0


if __name__ == "__main__":
    sys.exit(main())
