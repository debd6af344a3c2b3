#!/usr/bin/env python3
"""Soak: mcp-source under file churn, many sinks restarting, then a check
that every sink converged to exactly the source's state.

    bench/soak/soak.py --build-dir BUILD [--seconds 300] [--sinks 50]
                       [--transport grpc|h2c|grpc,h2c] [--seed N] ...

For --seconds, random YAML files are created, edited (atomically or in
place), broken, renamed and deleted in a temporary directory served by
mcp-source (one per transport given: with grpc,h2c two sources serve the
same directory and the sinks are spread over them). Half the sinks of each
transport ask for incremental pushes. Every --sink-restart seconds a random sink is killed
(SIGKILL or SIGTERM) and started again on the same mirror directory, and
once per source, at a random time in the middle of the run, the source is
SIGKILLed and restarted.

Then the churn stops (broken files are repaired, so the final state is
fully determined) and, within --settle seconds, every sink's mirror must
hash to what the YAML files map to (name, labels, annotations, body), and
all sinks must hold the same versions. Every child must then exit 0 on
SIGTERM. The source's memory (VmRSS), descriptors and threads are sampled
along the way and printed.

Exit status: 0 when everything converged and exited cleanly, 1 otherwise,
2 on a usage error. Not part of the test suites (it runs for minutes);
see bench/soak/README.md. Standard library only.
"""

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

VS = "istio/networking/v1alpha3/virtualservices"
DR = "istio/networking/v1alpha3/destinationrules"
CM = "k8s/core/v1/configmaps"
COLLS = [VS, DR, CM]
STRUCT = "type.googleapis.com/google.protobuf.Struct"
COLLECTION_OF = {"VirtualService": VS, "DestinationRule": DR, "ConfigMap": CM}


def log(msg):
    print("%s soak: %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM", "Threads"):
                    out[k] = int(v.split()[0])
        out["fds"] = len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        pass
    return out


# --------------------------------------------------------------------------
# The files, and what they map to
# --------------------------------------------------------------------------

class Files:
    """The YAML tree and its model: rel path -> the documents the source
    serves from it (a broken file keeps its last good documents)."""

    def __init__(self, root, rng, max_files):
        self.root = root
        self.rng = rng
        self.max_files = max_files
        self.docs = {}     # rel -> [doc] the source should serve
        self.broken = set()  # rel whose bytes are currently bad YAML
        self.n = 0
        self.ops = {}

    def _doc(self, kind, name, ns, n):
        r = self.rng
        meta = {"name": name, "namespace": ns}
        if r.random() < 0.5:
            meta["labels"] = {"app": name, "rev": str(n)}
        if kind == "ConfigMap":
            return {"apiVersion": "v1", "kind": kind, "metadata": meta,
                    "data": {"k%d" % i: "v%d-%d" % (n, i)
                             for i in range(r.randint(1, 5))}}
        if kind == "VirtualService":
            spec = {"hosts": [name], "http": [{"route": [{"destination": {
                "host": name, "port": {"number": r.choice((80, 9080))}},
                "weight": 100}]}], "rev": n}
        else:
            spec = {"host": name, "trafficPolicy": {"tls": {
                "mode": r.choice(("ISTIO_MUTUAL", "DISABLE"))}}, "rev": n}
        if r.random() < 0.2:  # now and then a large one
            spec["pad"] = "x" * r.randint(1000, 50000)
        return {"apiVersion": ("networking.istio.io/v1alpha3"
                               if kind != "ConfigMap" else "v1"),
                "kind": kind, "metadata": meta, "spec": spec}

    @staticmethod
    def text(docs):
        return "".join("---\n" + json.dumps(d) + "\n" for d in docs)

    def _write(self, rel, text, atomic):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if atomic:
            tmp = os.path.join(os.path.dirname(path),
                               ".soak-tmp-" + os.path.basename(path))
            with open(tmp, "w") as f:
                f.write(text)
            os.rename(tmp, path)
        else:
            with open(path, "w") as f:
                f.write(text)

    def create(self):
        self.n += 1
        n, r = self.n, self.rng
        rel = "d%d/%sf%d.yaml" % (r.randrange(4),
                                  "sub%d/" % r.randrange(3)
                                  if r.random() < 0.3 else "", n)
        docs = [self._doc(r.choice(("VirtualService", "DestinationRule",
                                    "ConfigMap")),
                          "r%d-%d" % (n, j), "ns%d" % r.randrange(5), n)
                for j in range(r.randint(1, 4))]
        self._write(rel, self.text(docs), atomic=r.random() < 0.8)
        self.docs[rel] = docs
        self.broken.discard(rel)

    def edit(self, rel):
        self.n += 1
        docs = [self._doc(d["kind"], d["metadata"]["name"],
                          d["metadata"]["namespace"], self.n)
                for d in self.docs[rel]]
        if docs and self.rng.random() < 0.2:
            docs.pop(self.rng.randrange(len(docs)))  # one document dropped
        self._write(rel, self.text(docs), atomic=self.rng.random() < 0.8)
        self.docs[rel] = docs
        self.broken.discard(rel)

    def break_(self, rel):
        # The source keeps serving the last good content of a broken file
        # (which may be older than the model when a good write was not seen
        # before this one: repaired at the end, so the final state is known).
        self._write(rel, "apiVersion: v1\nkind: [unclosed\n", atomic=True)
        self.broken.add(rel)

    def remove(self, rel):
        os.unlink(os.path.join(self.root, rel))
        del self.docs[rel]
        self.broken.discard(rel)

    def rename(self, rel):
        self.n += 1
        new = "moved/m%d-%s" % (self.n, os.path.basename(rel))
        os.makedirs(os.path.join(self.root, "moved"), exist_ok=True)
        os.rename(os.path.join(self.root, rel), os.path.join(self.root, new))
        self.docs[new] = self.docs.pop(rel)
        if rel in self.broken:
            self.broken.discard(rel)
            self.broken.add(new)

    def step(self):
        names = sorted(self.docs)
        r = self.rng.random()
        if len(names) < 5 or (r < 0.3 and len(names) < self.max_files):
            op = "create"
            self.create()
        elif r < 0.7:
            op = "edit"
            self.edit(self.rng.choice(names))
        elif r < 0.75:
            op = "break"
            self.break_(self.rng.choice(names))
        elif r < 0.9:
            op = "remove"
            self.remove(self.rng.choice(names))
        else:
            op = "rename"
            self.rename(self.rng.choice(names))
        self.ops[op] = self.ops.get(op, 0) + 1

    def repair(self):
        for rel in sorted(self.broken):
            self._write(rel, self.text(self.docs[rel]), atomic=True)
        self.broken.clear()

    def expected(self):
        """{collection: {name: mirror object without version}}."""
        state = {c: {} for c in COLLS}
        for docs in self.docs.values():
            for d in docs:
                m = d["metadata"]
                name = m["namespace"] + "/" + m["name"]
                state[COLLECTION_OF[d["kind"]]][name] = {
                    "name": name, "labels": m.get("labels", {}),
                    "annotations": {}, "create_time": None,
                    "type_url": STRUCT,
                    "body": d["spec"] if "spec" in d else d.get("data", {})}
        return state


def content_hash(state):
    """sha256 of a state without versions, independent of order."""
    items = sorted((c, n, json.dumps(r, sort_keys=True))
                   for c, res in state.items() for n, r in res.items())
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]


def read_mirror(root):
    """(state without versions, {(collection, name): version})."""
    state, vers = {}, {}
    for c in COLLS:
        base = os.path.join(root, c)
        got = {}
        for dirpath, _, filenames in os.walk(base):
            for fn in filenames:
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, base)
                if not fn.endswith(".json"):
                    got[rel] = "<not json>"
                    continue
                try:
                    with open(path) as f:
                        r = json.load(f)
                except FileNotFoundError:
                    continue
                except ValueError:
                    got[rel] = "<bad json>"
                    continue
                vers[(c, rel[:-5])] = r.pop("version", None)
                got[rel[:-5]] = r
        state[c] = got
    return state, vers


def diff_summary(got, want):
    out = []
    for c in COLLS:
        g, w = got.get(c, {}), want.get(c, {})
        missing = sorted(set(w) - set(g))
        extra = sorted(set(g) - set(w))
        changed = sorted(n for n in set(g) & set(w) if g[n] != w[n])
        if missing or extra or changed:
            out.append("%s: %d missing %s, %d extra %s, %d different %s" % (
                c, len(missing), missing[:3], len(extra), extra[:3],
                len(changed), changed[:3]))
    return "; ".join(out) or "equal"


# --------------------------------------------------------------------------
# Children
# --------------------------------------------------------------------------

class Child:
    def __init__(self, name, argv, logdir):
        self.name = name
        self.argv = argv
        self.logpath = os.path.join(logdir, name + ".log")
        self.p = None
        self.starts = 0
        self.expected_exit = True

    def start(self):
        self.starts += 1
        f = open(self.logpath, "a")
        f.write("==== start %d: %s\n" % (self.starts, " ".join(self.argv)))
        f.flush()
        self.p = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=f)
        f.close()
        self.expected_exit = False

    def running(self):
        return self.p is not None and self.p.poll() is None

    def crashed(self):
        """Exited on its own (not by our signal)."""
        return self.p is not None and not self.expected_exit and \
            self.p.poll() is not None

    def stop(self, sig, timeout=30):
        self.expected_exit = True
        if not self.running():
            return self.p.returncode if self.p else None
        self.p.send_signal(sig)
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return "timeout"

    def log_since_start(self):
        try:
            with open(self.logpath, errors="replace") as f:
                return f.read().rsplit("==== start", 1)[-1]
        except OSError:
            return ""

    def tail(self, n=15):
        try:
            with open(self.logpath, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def wait_listening(child, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if what in child.log_since_start():
            return True
        if not child.running():
            break
        time.sleep(0.05)
    sys.exit("soak: %s did not start:\n%s" % (child.name, child.tail()))


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--transport", default="grpc",
                    help="grpc, h2c, or grpc,h2c (a source per transport, "
                         "the sinks spread over them); default grpc")
    ap.add_argument("--seconds", type=float, default=300,
                    help="churn duration (default 300)")
    ap.add_argument("--sinks", type=int, default=50,
                    help="sinks, spread over the transports, half of each "
                         "transport's incremental (default 50)")
    ap.add_argument("--rate", type=float, default=20,
                    help="file operations per second (default 20)")
    ap.add_argument("--max-files", type=int, default=200,
                    help="files at most (default 200)")
    ap.add_argument("--sink-restart", type=float, default=3,
                    help="seconds between sink restarts (default 3; 0: none)")
    ap.add_argument("--no-source-restart", action="store_true",
                    help="do not kill and restart the source(s)")
    ap.add_argument("--debounce", type=int, default=None,
                    help="mcp-source --debounce MS")
    ap.add_argument("--settle", type=float, default=120,
                    help="seconds to converge after the churn (default 120)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--wrapper", default=None,
                    help="a command line run before the source(s) and the "
                         "first --wrap-sinks sinks, e.g. \"valgrind "
                         "--leak-check=full --error-exitcode=99\"")
    ap.add_argument("--wrap-sinks", type=int, default=2,
                    help="sinks run under --wrapper (default 2: one full, "
                         "one incremental)")
    ap.add_argument("--stop-timeout", type=float, default=30,
                    help="seconds a child has to exit after SIGTERM "
                         "(default 30; raise it under valgrind)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the work directory (files, mirrors, logs)")
    ap.add_argument("--workdir", default=None,
                    help="work directory (default: a new temporary one)")
    args = ap.parse_args()

    raise_nofile()  # inherited by the children: 50 sinks x 2 sources
    wrap = args.wrapper.split() if args.wrapper else []
    transports = [t for t in args.transport.split(",") if t]
    if not transports or args.sinks < 1:
        ap.error("need a transport and at least one sink")
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    tools = os.path.join(os.path.abspath(args.build_dir), "tools")
    for prog in ("mcp-source", "mcp-sink"):
        if not os.access(os.path.join(tools, prog), os.X_OK):
            sys.exit("soak: %s/%s is not built" % (tools, prog))
    work = args.workdir or tempfile.mkdtemp(prefix="mcp-soak-")
    os.makedirs(work, exist_ok=True)
    config = os.path.join(work, "config")
    logs = os.path.join(work, "logs")
    os.makedirs(config, exist_ok=True)
    os.makedirs(logs, exist_ok=True)
    log("seed %d, %s, %d sinks, %.0f s of churn at %.0f/s, work dir %s" % (
        seed, ",".join(transports), args.sinks, args.seconds, args.rate, work))

    files = Files(config, rng, args.max_files)
    for _ in range(20):
        files.create()

    sources, addrs = [], {}
    for t in transports:
        addrs[t] = "127.0.0.1:%d" % free_port()
        # Struct bodies: the random specs are not Istio's messages (typed
        # bodies would skip them), and the check hashes the YAML's spec.
        argv = wrap + [os.path.join(tools, "mcp-source"), "--transport", t,
                "--dir", config, "--listen", addrs[t], "--body", "struct"]
        if args.debounce is not None:
            argv += ["--debounce", str(args.debounce)]
        src = Child("source-" + t, argv, logs)
        src.start()
        wait_listening(src, "serving ResourceSource on")
        sources.append(src)

    sinks = []
    for i in range(args.sinks):
        t = transports[i % len(transports)]
        inc = (i // len(transports)) % 2  # half of each transport's sinks
        argv = (wrap if i < args.wrap_sinks else []) + [
            os.path.join(tools, "mcp-sink"), "--transport", t,
                "--connect", addrs[t], "--out",
                os.path.join(work, "mirror", "s%03d" % i)]
        for c in COLLS:
            argv += ["--collection", c]
        if inc:
            argv.append("--incremental")
        s = Child("sink-%03d-%s%s" % (i, t, "-inc" if inc else ""), argv,
                  logs)
        s.mirror = os.path.join(work, "mirror", "s%03d" % i)
        s.start()
        sinks.append(s)

    failures = []
    samples = {s.name: [] for s in sources}
    restart_at = {s.name: rng.uniform(0.3, 0.7) * args.seconds
                  for s in sources}
    t0 = time.monotonic()
    next_op = t0
    next_sink_restart = t0 + (args.sink_restart or float("inf"))
    next_sample = t0
    sink_restarts = source_restarts = 0
    while time.monotonic() - t0 < args.seconds:
        now = time.monotonic()
        if now >= next_op:
            files.step()
            next_op += rng.expovariate(args.rate)
        if now >= next_sink_restart:
            s = rng.choice(sinks)
            sig = rng.choice((signal.SIGKILL, signal.SIGTERM))
            if "dialing the ResourceSource" not in s.log_since_start():
                # Not past its start yet (its signal handlers come just
                # before that line): SIGTERM would end it by default.
                sig = signal.SIGKILL
            rc = s.stop(sig, timeout=args.stop_timeout)
            if sig == signal.SIGTERM and rc != 0:
                failures.append("%s: exit %s on SIGTERM" % (s.name, rc))
            s.start()
            sink_restarts += 1
            next_sink_restart = now + args.sink_restart
        for src in sources:
            if not args.no_source_restart and restart_at[src.name] is not None \
                    and now - t0 >= restart_at[src.name]:
                restart_at[src.name] = None
                log("SIGKILL %s, restarting it" % src.name)
                src.stop(signal.SIGKILL)
                time.sleep(rng.uniform(0.2, 2.0))
                src.start()
                wait_listening(src, "serving ResourceSource on")
                source_restarts += 1
        if now >= next_sample:
            for src in sources:
                st = proc_status(src.p.pid)
                st["t"] = round(now - t0)
                samples[src.name].append(st)
            next_sample = now + max(5.0, args.seconds / 20)
        for c in sources + sinks:
            if c.crashed():
                failures.append("%s exited on its own with status %s:\n%s" % (
                    c.name, c.p.returncode, c.tail()))
                c.start()  # keep going; reported at the end
        time.sleep(max(0.0, min(next_op, next_sink_restart) -
                       time.monotonic()))

    files.repair()
    want = files.expected()
    want_hash = content_hash(want)
    nres = sum(len(v) for v in want.values())
    log("churn over: %s; %d files, %d resources, content hash %s; "
        "%d sink restarts, %d source restarts" % (
            ", ".join("%d %s" % (v, k) for k, v in sorted(files.ops.items())),
            len(files.docs), nres, want_hash, sink_restarts, source_restarts))

    # Quiesce: every mirror must hash to the files' content.
    t1 = time.monotonic()
    pending = list(sinks)
    got = {}
    while pending and time.monotonic() - t1 < args.settle:
        still = []
        for s in pending:
            state, vers = read_mirror(s.mirror)
            got[s.name] = (state, vers)
            if content_hash(state) != want_hash:
                still.append(s)
        pending = still
        if pending:
            time.sleep(1.0)
    log("%d of %d sinks converged in %.1f s" % (
        len(sinks) - len(pending), len(sinks), time.monotonic() - t1))
    for s in pending:
        failures.append("%s did not converge: %s\n%s" % (
            s.name, diff_summary(got[s.name][0], want), s.tail(5)))
    # Same versions everywhere: every sink holds the sources' state (the
    # resource versions are content hashes, the same on every source).
    vhashes = {}
    for s in sinks:
        if s not in pending:
            h = hashlib.sha256(json.dumps(sorted(
                [list(k) + [v] for k, v in got[s.name][1].items()])
            ).encode()).hexdigest()[:16]
            vhashes.setdefault(h, []).append(s.name)
    if len(vhashes) > 1:
        failures.append("sinks hold different versions: %s" % {
            h: names[:3] for h, names in vhashes.items()})

    for src in sources:
        st = proc_status(src.p.pid)
        st["t"] = round(time.monotonic() - t0)
        samples[src.name].append(st)
        log("%s (t s: VmRSS kB / fds / threads): %s; VmHWM %s kB" % (
            src.name, " ".join("%d:%d/%d/%d" % (x["t"], x.get("VmRSS", 0),
                                                x.get("fds", 0),
                                                x.get("Threads", 0))
                               for x in samples[src.name]),
            st.get("VmHWM")))

    # A sink restarted at the very end may still be starting (its mirror
    # can match from its previous run): SIGTERM only once it is up.
    deadline = time.monotonic() + args.stop_timeout
    for c in sinks:
        while c.running() and time.monotonic() < deadline and \
                "dialing the ResourceSource" not in c.log_since_start():
            time.sleep(0.1)
    for c in sinks + sources:
        if c.crashed():
            failures.append("%s exited on its own with status %s:\n%s" % (
                c.name, c.p.returncode, c.tail()))
            continue
        t2 = time.monotonic()
        rc = c.stop(signal.SIGTERM, timeout=args.stop_timeout)
        if time.monotonic() - t2 > 5:
            log("%s took %.1f s to stop" % (c.name, time.monotonic() - t2))
        if rc != 0:
            failures.append("%s: exit %s on SIGTERM:\n%s" % (c.name, rc,
                                                               c.tail()))
    if failures:
        for f in failures:
            log("FAIL: " + f)
        log("FAILED (seed %d); logs and mirrors kept in %s" % (seed, work))
        return 1
    log("OK: %d sinks hold the %d resources of the files (hash %s), every "
        "child exited 0" % (len(sinks), nres, want_hash))
    if not args.keep and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
