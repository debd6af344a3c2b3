#!/usr/bin/env python3
"""h2load against the servers of both transports (mcp-source --listen).

    bench/h2load_bench.py --build-dir BUILD [--transport grpc,h2c]
                          [--seconds S] [--quick]

h2load (nghttp2-client) opens HTTP/2 connections with prior knowledge and
sends requests as fast as the server answers them. Here each request is one
whole MCP stream: POST /istio.mcp.v1alpha1.ResourceSource/
EstablishResourceStream with the headers of gRPC (content-type
application/grpc, te trailers) and a body that is one gRPC-framed
RequestResources (sink node "h2load", one collection, a first request: no
nonce), sent with END_STREAM. The server accepts the stream, makes a source
session, answers the request with the collection's full state, sees the
client's half-close, and ends the stream with grpc-status 0; h2load counts
the stream done when the trailers arrive. So a request measures the setup
and teardown of a stream and one full-state push, end to end through the
server's HTTP/2 stack; not the steady state of long-lived streams (see
e2e_bench.py for that) and never an ACK (h2load does not read the answer).

Runs, for each transport the programs have (one that they do not have yet
is skipped with a message):
  small/1x1   a collection of 10 resources (about 11 KB per answer), one
              connection, one stream at a time: latency.
  small/10x10 the same, 10 connections x 10 concurrent streams: streams/s.
  large/4x1   a collection of 1000 resources (about 1.1 MB per answer),
              4 connections, one stream each: MB/s of full state.
Each run is preceded by a short warm-up run (discarded) that also sizes the
measured run to last about --seconds. Latency percentiles come from h2load's
--log-file (one line per request). h2load runs with one thread, so on this
2-core machine it takes one core and the server the other: the figures are
bounded by h2load as much as by the server, and compare the transports, not
absolute capacity.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_bench as eb  # noqa: E402

PATH = "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream"
# Both transports admit 1000 new streams/s with a burst of 2000 by
# default (stream_rate, stream_burst of mcp_grpc_options and
# mcp_h2c_options; mcp-source has no flag for them): a measured run stays
# within the burst, after a pause that refills the bucket.
MAX_STREAMS_PER_RUN = 1800
REFILL_S = 2.2


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ld(field, data):
    return varint(field << 3 | 2) + varint(len(data)) + data


def request(collection):
    """A gRPC-framed RequestResources: sink_node{id}, collection."""
    msg = ld(1, ld(1, b"h2load")) + ld(2, collection.encode())
    return b"\0" + len(msg).to_bytes(4, "big") + msg


RE_FINISHED = re.compile(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s")
RE_REQS = re.compile(r"requests: (\d+) total, (\d+) started, (\d+) done, "
                     r"(\d+) succeeded, (\d+) failed, (\d+) errored, "
                     r"(\d+) timeout")
RE_DATA = re.compile(r"traffic: .*\((\d+)\) total.*\((\d+)\) data")


def h2load(reactor, port, body, clients, streams, n, log):
    """Runs h2load while the reactor drains the servers' logs."""
    argv = ["h2load", "-n", str(n), "-c", str(clients), "-m", str(streams),
            "-t", "1", "-d", body, "-H", "content-type: application/grpc",
            "-H", "te: trailers", "--log-file", log,
            "http://127.0.0.1:%d%s" % (port, PATH)]
    if os.path.exists(log):
        os.unlink(log)  # h2load appends to it
    with tempfile.TemporaryFile("w+") as outf:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=outf,
                             stderr=subprocess.STDOUT)
        try:
            reactor.wait(lambda: p.poll() is not None, 300, "h2load")
        finally:
            if p.poll() is None:
                p.kill()
            p.wait()
        outf.seek(0)
        text = outf.read()
    m, q, d = (RE_FINISHED.search(text), RE_REQS.search(text),
               RE_DATA.search(text))
    if p.returncode != 0 or not (m and q and d):
        raise eb.BenchError("h2load failed (exit %d): %s" % (
            p.returncode, text[-800:]))
    secs = float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)
    lat = []
    with open(log) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 3 and fields[1] == "200":
                lat.append(int(fields[2]))
    return {"secs": secs, "rps": float(m.group(3)),
            "done": int(q.group(3)), "ok": int(q.group(4)),
            "failed": int(q.group(5)) + int(q.group(6)) + int(q.group(7)),
            "data": int(d.group(2)), "lat_us": lat}


def report(t, name, shape, c, m, reps):
    reps.sort(key=lambda x: x["rps"])
    res = reps[len(reps) // 2]  # the median run
    per = res["data"] / res["ok"]
    lat = res["lat_us"]
    eb.note("%s %s/%s: streams/s over %d runs: %s; the median run: %d "
            "streams in %.2f s, %.1f MB/s, %.0f bytes of DATA per stream, "
            "latency p50 %d us, p99 %d us, max %d us" % (
                t, name, shape, len(reps),
                " ".join("%.0f" % x["rps"] for x in reps), res["ok"],
                res["secs"], res["data"] / res["secs"] / 1e6, per,
                eb.percentile(lat, 50), eb.percentile(lat, 99), max(lat)))
    tag = "%s_%s" % (name, shape)
    if name == "small":
        eb.result("h2load_%s_streams_per_s_%s" % (tag, t), res["rps"],
                  "per_s", "streams/s (open, request, 10 x 1 KiB full "
                  "state, trailers), %d conn x %d streams" % (c, m))
        eb.result("h2load_%s_p50_us_%s" % (tag, t), eb.percentile(lat, 50),
                  "us", "the same, latency p50")
        eb.result("h2load_%s_p99_us_%s" % (tag, t), eb.percentile(lat, 99),
                  "us", "the same, latency p99")
    else:
        eb.result("h2load_%s_mb_per_s_%s" % (tag, t),
                  res["data"] / res["secs"] / 1e6, "MB_per_s",
                  "DATA MB/s of full state (1000 x 1 KiB per stream), "
                  "%d conn x %d stream" % (c, m))
        eb.result("h2load_%s_p50_us_%s" % (tag, t), eb.percentile(lat, 50),
                  "us", "the same, latency p50 per stream")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--transport", default="grpc,h2c")
    ap.add_argument("--seconds", type=float, default=3.0,
                    help="target length of a run (at most %d streams)"
                    % MAX_STREAMS_PER_RUN)
    ap.add_argument("--reps", type=int, default=5,
                    help="measured runs per shape (the median is kept)")
    ap.add_argument("--quick", action="store_true",
                    help="0.3 s runs: a smoke test")
    args = ap.parse_args()
    if args.quick:
        args.seconds = 0.3
        args.reps = 1
    if not shutil.which("h2load"):
        print("# h2load not found (Debian: apt-get install nghttp2-client): "
              "skipped")
        return 0
    version = subprocess.run(["h2load", "--version"], capture_output=True,
                             text=True).stdout.strip()

    class A:
        pass
    a = A()
    a.build_dir = args.build_dir
    a.bodies = "struct"  # e2e_bench.Bench's --bodies: the default
    b = eb.Bench(a)
    root = tempfile.mkdtemp(prefix="mcp-h2load-bench-")
    skipped, failed = [], []
    try:
        eb.note("%s; each request: one stream, one RequestResources, the "
                "full-state answer, grpc-status" % version)
        small = eb.Workload(os.path.join(root, "small"), 1, 10, 10, 1024)
        large = eb.Workload(os.path.join(root, "large"), 1, 1000, 100, 1024)
        bodies = {}
        for name, wl in (("small", small), ("large", large)):
            bodies[name] = os.path.join(root, name + ".req")
            with open(bodies[name], "wb") as f:
                f.write(request(wl.collection(0)))
        runs = [("small", "1x1", 1, 1), ("small", "10x10", 10, 10),
                ("large", "4x1", 4, 1)]
        srcs = {}  # transport -> {"small": Source, "large": Source}
        for t in args.transport.split(","):
            why = b.available(t)
            if why:
                eb.note("%s: SKIPPED: %s" % (t, why))
                skipped.append((t, why))
                continue
            srcs[t] = {}
            for name, wl in (("small", small), ("large", large)):
                srcs[t][name] = b.start_source(t, "%s %s source" % (t, name),
                                               ["--dir", wl.dir,
                                                # h2load's clients are one
                                                # peer: the per-peer rate
                                                # would pace them
                                                "--stream-rate", "off"])
        log = os.path.join(root, "h2load.log")
        for name, shape, c, m in runs:
            # Size the runs on a warm-up of each transport.
            n = MAX_STREAMS_PER_RUN
            for t in srcs:
                warm = h2load(b.reactor, srcs[t][name].port, bodies[name], c,
                              m, 200 if name == "small" else 40, log)
                n = min(n, max(c * m, int(warm["rps"] * args.seconds)))
            # The transports alternate, run after run, so that a change
            # of the machine's load weighs on both.
            reps = {t: [] for t in srcs}
            for _ in range(args.reps):
                for t in srcs:
                    if t in failed:
                        continue
                    b.reactor.idle(REFILL_S)
                    try:
                        res = h2load(b.reactor, srcs[t][name].port,
                                     bodies[name], c, m, n, log)
                        if res["failed"] or res["ok"] != n:
                            raise eb.BenchError(
                                "%s %s: %d of %d requests succeeded" % (
                                    name, shape, res["ok"], n))
                        # The whole answer must arrive: a server that
                        # dropped it on the half-close would look fast.
                        want = 1100 * (large.nres if name == "large"
                                       else small.nres)
                        if res["data"] / res["ok"] < want:
                            raise eb.BenchError(
                                "%s %s: %.0f bytes per stream, expected at "
                                "least %d: answers are missing" % (
                                    name, shape, res["data"] / res["ok"],
                                    want))
                    except eb.BenchError as e:
                        eb.note("%s: FAILED: %s" % (t, e))
                        failed.append(t)
                        continue
                    reps[t].append(res)
            for t in srcs:
                if not reps[t] or t in failed:
                    continue
                report(t, name, shape, c, m, reps[t])
        for t in srcs:
            b.reactor.stop(list(srcs[t].values()))
    finally:
        b.reactor.kill_all()
        shutil.rmtree(root, ignore_errors=True)
    eb.table("h2load against mcp-source --listen (one stream per request)",
             skipped, "h2load")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
