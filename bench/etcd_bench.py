#!/usr/bin/python3
"""Replicas over etcd: the real etcd (three members), mcp-source --etcd
replicas and sinks on 127.0.0.1.

    bench/etcd_bench.py --build-dir BUILD [--transport grpc|h2c] [--quick]
                        [--streams N] [--rounds N] [--resources N] [PART ...]

  propagation  one write to etcd reaching 300 sink streams spread over 3
               replicas (mcp-load-sink, 100 streams per replica, or
               --streams): from the Put RPC to each stream's ACK of the
               push carrying it, p50/p99 over the rounds
  failover     a sink synced from replica A (1000 resources of 1 KiB) moves
               to replica B after A is killed while 10 resources change:
               the bytes B sends it against the bytes of the full sync A
               sent (mcp_sent_bytes_total of each replica)

Prints "BENCH <name> <value> <unit>" lines (docs/benchmarks.md). Writes go
straight to etcd's gRPC API through Debian's python3-grpcio (PutRequest
encoded by hand: key = 1, value = 2), so no process start is timed.
Waits are driven by the children's output: a wait fails when a child
exits, or when no child has printed anything for a minute (a busy machine
is slow, not stuck), never after a fixed total time.
"""

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc

VS = "istio/networking/v1alpha3/virtualservices"


def note(msg):
    print("# " + msg, flush=True)


def bench(name, value, unit):
    print("BENCH %s %s %s" % (name, ("%.3g" % value) if value < 100
                              else "%d" % value, unit), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ld(field, data):
    """A length-delimited protobuf field."""
    n, out = len(data), bytearray([field << 3 | 2])
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + data


class Etcd:
    def __init__(self, tmp, n=3):
        self.tmp = tmp
        self.ports = [(free_port(), free_port()) for _ in range(n)]
        cluster = ",".join("m%d=http://127.0.0.1:%d" % (i, p[1])
                           for i, p in enumerate(self.ports))
        self.procs = []
        for i, (c, p) in enumerate(self.ports):
            self.procs.append(subprocess.Popen(
                ["etcd", "--name", "m%d" % i,
                 "--data-dir", os.path.join(tmp, "m%d" % i),
                 "--listen-client-urls", "http://127.0.0.1:%d" % c,
                 "--advertise-client-urls", "http://127.0.0.1:%d" % c,
                 "--listen-peer-urls", "http://127.0.0.1:%d" % p,
                 "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % p,
                 "--initial-cluster", cluster],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.endpoints = ["127.0.0.1:%d" % c for c, _ in self.ports]
        self.channel = grpc.insecure_channel(self.endpoints[0])
        self.put_rpc = self.channel.unary_unary("/etcdserverpb.KV/Put")
        deadline = time.monotonic() + 30
        while True:
            try:
                self.put("/bench/ready", b"1")
                break
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def put(self, key, value):
        self.put_rpc(ld(1, key.encode()) + ld(2, value), timeout=10)

    def stop(self):
        self.channel.close()
        for p in self.procs:
            p.kill()
            p.wait()


def vs_doc(name, i, pad=0):
    # Fields of Istio's VirtualService only: the replicas type its bodies
    # (an unknown field skips the document). The generation is a host,
    # the padding an exportTo entry.
    spec = {"hosts": ["%s.example" % name, "gen-%d.example" % i]}
    if pad:
        spec["exportTo"] = ["x" * pad]
    return json.dumps({"apiVersion": "networking.istio.io/v1alpha3",
                       "kind": "VirtualService",
                       "metadata": {"name": name, "namespace": "default"},
                       "spec": spec}).encode()


def key(name):
    return "/mcp/%s/default/%s" % (VS, name)


# Every line read by any child, and every child's end, notifies this:
# wait() sleeps on it instead of polling (the machine may be busy).
EVENTS = threading.Condition()
PROGRESS = [0]  # lines read so far, by all children


class Lines:
    """A child's stdout (or, with stderr=True, its log on stderr) lines,
    each stamped when read."""

    def __init__(self, argv, stderr=False):
        self.argv = argv
        self.p = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL if stderr else subprocess.PIPE,
            stderr=subprocess.PIPE if stderr else subprocess.DEVNULL,
            text=True, bufsize=1)
        self.out = self.p.stderr if stderr else self.p.stdout
        self.lines, self.eof = [], False
        threading.Thread(target=self.read, daemon=True).start()

    def seen(self, line):
        """Called on the reader thread, before waiters are woken."""

    def read(self):
        for line in self.out:
            t = time.monotonic_ns()
            self.seen(line)
            with EVENTS:
                self.lines.append((t, line))
                PROGRESS[0] += 1
                EVENTS.notify_all()
        with EVENTS:
            self.eof = True
            EVENTS.notify_all()

    def since(self, k):
        with EVENTS:
            return self.lines[k:], len(self.lines)

    def stop(self):
        self.p.kill()
        self.p.wait()


def metric(port, name):
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                  timeout=5).read().decode()
    for line in body.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def wait(cond, what, stall=60, children=()):
    """Waits for cond(), re-checked whenever a child prints a line. Fails
    when a child ends, or when |stall| seconds pass without any child
    printing anything: a busy machine is slow, not stuck, so the limit is
    on silence, not on the whole wait."""
    with EVENTS:
        seen, quiet_since = PROGRESS[0], time.monotonic()
        while not cond():
            for c in children:
                if c.eof or c.p.poll() is not None:
                    c.p.wait()
                    tail = "".join(l for _, l in c.lines[-5:])
                    raise RuntimeError("%s: %s exited (%s); its last lines:\n%s"
                                       % (what, os.path.basename(c.argv[0]),
                                          c.p.returncode, tail))
            if PROGRESS[0] != seen:
                seen, quiet_since = PROGRESS[0], time.monotonic()
            left = quiet_since + stall - time.monotonic()
            if left <= 0:
                raise RuntimeError("timed out: %s (nothing new for %d s)" % (
                    what, stall))
            # Woken by every line; the timeout only bounds how late a
            # replica's exit is noticed.
            EVENTS.wait(min(left, 1.0))


class Replica(Lines):
    """An mcp-source --etcd replica on ports it picks itself (port 0: no
    race with another process for a free port). Its log lines are read
    like a sink's output and copied to tmp/name.log; addr and ops are
    known once it says it serves them (ready())."""

    def __init__(self, build, transport, endpoints, tmp, name):
        self.log = open(os.path.join(tmp, name + ".log"), "w")
        self.addr = self.ops = None
        super().__init__(
            [os.path.join(build, "tools", "mcp-source"), "--transport",
             transport, "--etcd", ",".join(endpoints), "--listen",
             "127.0.0.1:0", "--debounce", "0", "--debug-listen",
             "127.0.0.1:0"], stderr=True)

    def seen(self, line):
        self.log.write(line)
        self.log.flush()
        if self.addr is None and "serving ResourceSource on " in line:
            self.addr = line.split(" on ", 1)[1].split()[0]
        if self.ops is None and "debug endpoints on http://" in line:
            self.ops = int(line.rsplit(":", 1)[1].strip().rstrip("/"))

    def ready(self):
        return self.addr is not None and self.ops is not None


class Acks:
    """The streams of |loads| that ACKed a push |want| accepts (the ACK's
    line as a dict) since start(), read incrementally (each line parsed
    once), and the sizes of every push each stream ACKed meanwhile."""

    def __init__(self, loads):
        self.loads = loads

    def start(self, want=None, from_spawn=False):
        """Counts the ACKs after now, or (|from_spawn|) every ACK the
        loads printed: their first ones can come before this is called."""
        self.want = want
        self.k = [0 if from_spawn else l.since(0)[1] for l in self.loads]
        self.got = {}  # (load, stream) -> time of its first wanted ACK
        self.sizes = {}  # (load, stream) -> the sizes it ACKed

    def count(self):
        for li, l in enumerate(self.loads):
            new, self.k[li] = l.since(self.k[li])
            for t, line in new:
                if '"ack"' in line:
                    a = json.loads(line)
                    self.sizes.setdefault((li, a["s"]), []).append(a["n"])
                    if not self.want or self.want(a):
                        self.got.setdefault((li, a["s"]), t)
        return len(self.got)

    def missing(self, total):
        """A stall's evidence: the streams that ACKed pushes but none
        wanted, with their sizes, and how many ACKed nothing."""
        short = sorted(k for k in self.sizes if k not in self.got)
        return ("not synced (load, stream): the sizes they ACKed: %s; %d of "
                "%d streams ACKed nothing" % (
                    ", ".join("%s: %s" % (k, self.sizes[k]) for k in short)
                    or "none", total - len(self.sizes), total))


def propagation(args, tmp, etcd):
    streams = args.streams or (30 if args.quick else 100)
    rounds = args.rounds or (5 if args.quick else 20)
    for i in range(100):
        etcd.put(key("p%03d" % i), vs_doc("p%03d" % i, 0))
    reps, loads = [], []
    for r in range(3):
        eps = etcd.endpoints[r:] + etcd.endpoints[:r]
        reps.append(Replica(args.build_dir, args.transport, eps, tmp,
                            "replica%d" % r))
    wait(lambda: all(r.ready() for r in reps), "the replicas listen",
         children=reps)
    for r in reps:
        loads.append(Lines([os.path.join(args.build_dir, "tools",
                                         "mcp-load-sink"),
                            "--transport", args.transport, "--streams",
                            str(streams), "--collection", VS, "--connect",
                            r.addr, "--incremental"]))
    total = 3 * streams
    acks = Acks(loads)
    # Everyone synced: each stream ACKed a push of 100 resources. A load
    # spawned first may have synced while the others were spawned.
    acks.start(lambda a: a["n"] == 100, from_spawn=True)
    try:
        wait(lambda: acks.count() == total, "%d streams synced" % total,
             children=loads + reps)
    except RuntimeError as e:
        raise RuntimeError("%s; %s" % (e, acks.missing(total)))
    lat = []
    for rnd in range(rounds):
        acks.start()
        t0 = time.monotonic_ns()
        etcd.put(key("p%03d" % rnd), vs_doc("p%03d" % rnd, rnd + 1))
        wait(lambda: acks.count() == total, "round %d at every stream" % rnd,
             children=loads + reps)
        lat += [(t - t0) / 1e6 for t in acks.got.values()]
    lat.sort()
    p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * .99))]
    note("propagation: %d writes x %d streams over 3 replicas" %
         (rounds, total))
    bench("etcd_propagation_p50_ms", p50, "ms")
    bench("etcd_propagation_p99_ms", p99, "ms")
    for x in loads + reps:
        x.stop()


def failover(args, tmp, etcd):
    n = args.resources or (200 if args.quick else 1000)
    for i in range(n):
        etcd.put(key("f%04d" % i), vs_doc("f%04d" % i, 0, pad=1000))
    a = Replica(args.build_dir, args.transport, etcd.endpoints, tmp, "A")
    b = Replica(args.build_dir, args.transport, etcd.endpoints[1:], tmp, "B")
    wait(lambda: a.ready() and b.ready(), "replicas A and B listen",
         children=[a, b])
    sink = Lines([os.path.join(args.build_dir, "tools", "mcp-sink"),
                  "--transport", args.transport, "--connect",
                  a.addr + "," + b.addr, "--incremental", "--json",
                  "--collection", VS])
    wait(lambda: any('"synced"' in line for _, line in sink.since(0)[0]),
         "the sink synced", children=[sink, a, b])
    # The sink picks either replica: the one that sent is the one to
    # kill. The counter moves with each push the source makes (its core
    # event, before the bytes leave), so once the sink has them it is final.
    sent = {r: metric(r.ops, "mcp_sent_bytes_total") for r in (a, b)}
    if not any(sent.values()):
        sys.exit("neither replica's mcp_sent_bytes_total moved after the "
                 "sink synced")
    if not sent[a]:
        a, b = b, a
    full = sent[a]
    a.stop()
    for i in range(10):
        etcd.put(key("f%04d" % i), vs_doc("f%04d" % i, 1, pad=1000))

    def moved():
        got = set()
        for _, line in sink.since(0)[0]:
            if '"response"' in line:
                e = json.loads(line)
                got |= {r["name"] for r in e["resources"]
                        if r["version"] and e["incremental"]}
        return all("default/f%04d" % i in got for i in range(10))
    wait(moved, "the sink got the 10 changes from B", children=[sink, b])
    moved_bytes = metric(b.ops, "mcp_sent_bytes_total")
    note("failover: full sync %d bytes from A; after the move %d bytes from "
         "B" % (full, moved_bytes))
    bench("etcd_failover_bytes", moved_bytes, "bytes")
    bench("etcd_full_sync_bytes", full, "bytes")
    bench("etcd_failover_vs_full_sync", moved_bytes / full, "ratio")
    sink.stop()
    b.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--transport", default="grpc")
    ap.add_argument("--quick", action="store_true",
                    help="30 streams per replica, 5 rounds, 200 resources")
    ap.add_argument("--streams", type=int, default=0,
                    help="propagation: sink streams per replica")
    ap.add_argument("--rounds", type=int, default=0,
                    help="propagation: writes measured")
    ap.add_argument("--resources", type=int, default=0,
                    help="failover: resources of 1 KiB")
    ap.add_argument("parts", nargs="*", default=["propagation", "failover"])
    args = ap.parse_args()
    if not shutil.which("etcd"):
        note("etcd not installed: skipped")
        return 0
    for part in args.parts:
        tmp = tempfile.mkdtemp(prefix="mcp-etcd-bench-")
        etcd = Etcd(tmp)
        try:
            {"propagation": propagation, "failover": failover}[part](
                args, tmp, etcd)
        finally:
            etcd.stop()
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
