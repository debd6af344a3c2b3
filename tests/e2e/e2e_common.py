"""What the end-to-end scripts of tests/e2e share.

  parse_args()     --build-dir and --transport (the rest is unittest's)
  Proc             a child whose stdout and stderr lines are read by threads;
                   its JSON stdout lines are its events (mcp-sink --json)
  Base             a unittest fixture: the programs of the build directory
                   in a temporary directory, every wait bounded, every child
                   killed in tearDown
  doc(), ...       YAML written for mcp-source, the --out mirror read back

Imported by test_e2e.py, test_aggregated.py, test_ops.py, test_tls.py and
test_faults.py, which run as scripts: their directory is on sys.path.
Standard library only.
"""

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

# Set by parse_args(): read them as e2e_common.X when the tests run.
BUILD_DIR = None
TRANSPORT = "grpc"
OTHER = "h2c"  # the other transport (OtherTransportSink)
TRANSPORTS = ("grpc", "h2c")

VS = "istio/networking/v1alpha3/virtualservices"
DR = "istio/networking/v1alpha3/destinationrules"
CM = "k8s/core/v1/configmaps"
GW = "istio/networking/v1alpha3/gateways"
STRUCT = "type.googleapis.com/google.protobuf.Struct"
COLLECTION_OF = {"VirtualService": VS, "DestinationRule": DR,
                 "ConfigMap": CM, "Gateway": GW}

WAIT = 15.0  # seconds: the default deadline of a wait (scripts may differ)


# --------------------------------------------------------------------------
# Command line and programs
# --------------------------------------------------------------------------

def exe(name):
    return os.path.join(BUILD_DIR, "tools", name)


def parse_args(description, programs=("mcp-source", "mcp-sink")):
    """Parses --build-dir and --transport into BUILD_DIR, TRANSPORT and
    OTHER; exits when one of |programs| is not built. Returns the argv for
    unittest.main (with the arguments not parsed here)."""
    global BUILD_DIR, TRANSPORT, OTHER
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--transport", default="grpc")
    args, rest = ap.parse_known_args()
    BUILD_DIR = os.path.abspath(args.build_dir)
    TRANSPORT = args.transport
    OTHER = "h2c" if TRANSPORT == "grpc" else "grpc"
    script = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    for prog in programs:
        if not os.access(exe(prog), os.X_OK):
            sys.exit("%s: %s/tools/%s is not built" % (script, BUILD_DIR,
                                                        prog))
    return [sys.argv[0]] + rest


_built = {}


def transport_built(t, timeout=WAIT):
    """Whether the programs offer transport |t|: a probe mcp-sink either
    starts listening or exits at once (status 2) naming it."""
    if t not in _built:
        p = subprocess.Popen(
            [exe("mcp-sink"), "--transport", t,
             "--collection", "probe", "--json", "--listen", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        timer = threading.Timer(timeout, p.kill)  # bounds the readline
        timer.start()
        try:
            line = p.stdout.readline()  # "listening", or EOF at exit
            _built[t] = '"listening"' in line
        finally:
            timer.cancel()
            if p.poll() is None:
                p.terminate()
            try:
                p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
    return _built[t]


def run_with_certs(argv, use):
    """For the TLS scripts: makes tests/gen_certs.sh's certificates (openssl)
    in a temporary directory, calls use(directory), runs unittest with
    |argv| and removes the directory. Returns the exit status: 77 (meson's
    SKIP) without openssl, 1 when the certificates or a test fail."""
    if not shutil.which("openssl"):
        print("openssl not found: cannot make the test certificates")
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    top = tempfile.mkdtemp(prefix="mcp-tls-certs-")
    try:
        certs = os.path.join(top, "certs")
        p = subprocess.run(["sh", os.path.join(here, "..", "gen_certs.sh"),
                            certs], capture_output=True, text=True,
                           timeout=120)
        if p.returncode != 0:
            print("gen_certs.sh failed:\n" + p.stderr)
            return 1
        use(certs)
        prog = unittest.main(argv=argv, exit=False)
        return 0 if prog.result.wasSuccessful() else 1
    finally:
        shutil.rmtree(top, ignore_errors=True)


_HANDED = set()


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A port free now, never handed out before by this process, and below
    the kernel's ephemeral range: a port from bind(0) was once handed to
    another process between this check and the program's bind (a `make
    test` beside this one: its etcd took it), and the ephemeral range is
    where every outgoing connection takes its port. Random, so two test
    processes seldom pick alike; the bind check catches what they do."""
    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(500):
        port = rng.randrange(10240, max(low, 10241))
        if port in _HANDED:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(argv, timeout=WAIT):
    """Runs a program to its end: (status, stdout, stderr)."""
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def http_get(port, path, method="GET", conn=None):
    """(status, headers dict (lower-case names), body str) of a page of a
    debug listener on 127.0.0.1:|port| (on |conn|, kept open, if given)."""
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request(method, path)
        r = c.getresponse()
        body = r.read().decode("utf-8")
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body
    finally:
        if conn is None:
            c.close()


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------

class Proc:
    """A child whose stdout and stderr lines are collected by threads; its
    stdout lines that are JSON are its events (mcp-sink --json)."""

    WAIT = WAIT  # wait()'s default deadline
    KILL_WAIT = 5  # seconds kill() waits for the exit

    def __init__(self, name, argv, env=None, preexec=None):
        self.name = name
        self.argv = argv
        self.out, self.err = [], []  # the lines so far
        self.lock = threading.Lock()  # out and err
        self.parsed, self.nparsed = [], 0  # events() of out[:nparsed]
        self.parse_lock = threading.Lock()
        # errors="replace": a stray byte must not end a reader thread.
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True,
                                  bufsize=1, errors="replace", env=env,
                                  preexec_fn=preexec)
        self.threads = [threading.Thread(target=self._read, args=(f, into),
                                         daemon=True)
                        for f, into in ((self.p.stdout, self.out),
                                        (self.p.stderr, self.err))]
        for t in self.threads:
            t.start()

    def _read(self, f, into):
        try:
            for line in f:
                with self.lock:
                    into.append(line.rstrip("\n"))
        except (OSError, ValueError):
            pass  # kill() closed the pipe under us

    def stdout_lines(self):
        with self.lock:
            return list(self.out)

    def stderr_lines(self):
        with self.lock:
            return list(self.err)

    def stderr(self):
        return "\n".join(self.stderr_lines())

    def events(self, kind=None):
        """The JSON objects printed so far (other lines skipped), or those
        whose "event" is |kind|. Each line is parsed once: a load client
        prints thousands and the tests poll."""
        with self.parse_lock:
            with self.lock:
                new = self.out[self.nparsed:]
                self.nparsed = len(self.out)
            for line in new:
                try:
                    self.parsed.append(json.loads(line))
                except ValueError:
                    pass
            return [e for e in self.parsed
                    if kind is None or e.get("event") == kind]

    def responses(self, collection=None, triggers=False):
        """The "response" events (of |collection|); without |triggers|, not
        those of the $triggerCollection a dialing source sends first
        (NACKed by design)."""
        return [e for e in self.events("response") if
                (triggers or not e["collection"].startswith("$")) and
                (collection is None or e["collection"] == collection)]

    def synced(self):
        return bool(self.events("synced"))

    def running(self):
        return self.p.poll() is None

    def signal(self, sig):
        if self.running():
            self.p.send_signal(sig)

    def wait(self, timeout=None):
        """Exit status, or None when still running after |timeout| (default
        WAIT)."""
        try:
            rc = self.p.wait(timeout=self.WAIT if timeout is None
                             else timeout)
        except subprocess.TimeoutExpired:
            return None
        for t in self.threads:
            t.join(timeout=2)
        return rc

    def kill(self):
        if self.running():
            self.p.kill()  # SIGKILL ends a stopped process too
        self.wait(timeout=self.KILL_WAIT)
        for f in (self.p.stdout, self.p.stderr):
            try:
                f.close()
            except OSError:
                pass


# --------------------------------------------------------------------------
# Fixture
# --------------------------------------------------------------------------

class Base(unittest.TestCase):
    """The programs of BUILD_DIR over 127.0.0.1: self.config for their
    files (self.files: what put() wrote there), self.addr on a free port,
    self.procs killed in tearDown."""

    WAIT = WAIT  # wait_for()'s default deadline
    POLL = 0.02  # seconds between wait_for()'s polls
    PROC = Proc  # what start() makes
    TMP_PREFIX = "mcp-e2e-"
    YAML_INDENT = None  # put()'s json.dumps indent
    # Seconds tearDown gives the children after a SIGTERM before SIGKILL,
    # so that sanitizer builds report leaks; a report then fails the test.
    # None: SIGKILL at once, nothing checked.
    SANITIZER_STOP = None
    # Arguments start() puts before mcp-source's own. The scripts written
    # before typed bodies (issue 15) expect Struct bodies, and some of their
    # specs are not valid Istio types (test_faults' "edit" field): they run
    # with --body struct, the behaviour they were written for. test_typed.py
    # sets () and checks the typed default.
    SOURCE_ARGS = ("--body", "struct")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix=self.TMP_PREFIX)
        self.config = os.path.join(self.tmp, "config")
        os.makedirs(self.config)
        self.procs = []
        self.files = {}  # path relative to config -> [doc]
        self.port = free_port()
        self.addr = "127.0.0.1:%d" % self.port

    def tearDown(self):
        graceful = self.SANITIZER_STOP is not None
        if graceful:
            for p in self.procs:
                p.signal(signal.SIGTERM)
            for p in self.procs:
                if p.wait(timeout=self.SANITIZER_STOP) is None:
                    p.kill()
        for p in self.procs:
            p.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if graceful:
            for p in self.procs:
                for line in p.stderr_lines():
                    if "Sanitizer" in line or "runtime error:" in line:
                        self.fail("%s: %s\n%s" % (p.name, line, self.logs()))

    # -- programs --

    def exe(self, name):
        return exe(name)

    def assert_usage_error(self, prog, err):
        """|err| is a usage error as the programs report one (issue 24,
        item 13): the error, then one line pointing to --help; not the
        whole usage, which hid the error."""
        lines = err.splitlines()
        self.assertTrue(lines, err)
        self.assertEqual(lines[-1], "%s: see %s --help for every option" %
                         (prog, prog), err)
        self.assertNotIn("usage:", err, err)
        self.assertLessEqual(len(lines), 3, err)

    def transport_for(self, name):
        """The --transport start() gives program |name|."""
        return TRANSPORT

    def start(self, name, args, env=None, preexec=None):
        pre = list(self.SOURCE_ARGS) if name == "mcp-source" else []
        p = self.PROC(name, [self.exe(name), "--transport",
                             self.transport_for(name)] + pre + list(args),
                      env=env, preexec=preexec)
        self.procs.append(p)
        return p

    # -- waiting --

    def logs(self):
        """Every child's command line and stderr, for a failure message."""
        return "\n".join("--- %s %s\n%s" % (p.name, " ".join(p.argv[1:]),
                                              p.stderr())
                         for p in self.procs)

    def poll_pause(self, took):
        """wait_for()'s pause after a poll that took |took| seconds."""
        return self.POLL

    def wait_for(self, cond, what, *procs, timeout=None):
        """The first true value of |cond|, polled until |timeout| (default
        WAIT); fails at the deadline or when one of |procs| exits. |what|,
        a string or a function making one, names the wait in the failure."""
        deadline = time.monotonic() + (self.WAIT if timeout is None
                                       else timeout)
        while True:
            t0 = time.monotonic()
            v = cond()
            if v:
                return v
            for p in procs:
                if not p.running():
                    # What it wrote before exiting may still be in the
                    # pipes: read it all, and ask once more (a program
                    # that does its work and exits, --exit-after-sync).
                    p.wait(timeout=5)
                    v = cond()
                    if v:
                        return v
                    self.fail("%s exited (status %s) while waiting for %s\n%s"
                              % (p.name, p.p.poll(),
                                 what() if callable(what) else what,
                                 self.logs()))
            if time.monotonic() > deadline:
                self.fail("timed out waiting for %s\n%s" % (
                    what() if callable(what) else what, self.logs()))
            time.sleep(self.poll_pause(time.monotonic() - t0))

    def wait_synced(self, *sinks, timeout=None):
        for s in sinks:
            self.wait_for(s.synced, "%s to sync" % s.name, s, timeout=timeout)

    # -- files --

    def put(self, rel, docs, atomic=True):
        """Writes |docs| as config/|rel| (atomically: a temporary file
        renamed over it) and records them in self.files."""
        self.files[rel] = docs
        path = os.path.join(self.config, rel)
        text = yaml_text(docs, self.YAML_INDENT)
        if atomic:
            write_atomic(path, text)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)

    def remove(self, rel):
        del self.files[rel]
        os.unlink(os.path.join(self.config, rel))


class OtherTransportSink:
    """Mixed in before a Base subclass: mcp-sink runs on the other transport
    than mcp-source (skipped when that one is not built in)."""

    def setUp(self):
        if not transport_built(OTHER):
            self.skipTest("the %s transport is not built in" % OTHER)
        super().setUp()

    def transport_for(self, name):
        return TRANSPORT if name == "mcp-source" else OTHER


# --------------------------------------------------------------------------
# YAML in, expected mirror out
# --------------------------------------------------------------------------

def doc(kind, name, namespace=None, spec=None, api="networking.istio.io/v1alpha3",
        labels=None, annotations=None, data=None, resource_version=None,
        created=None):
    meta = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    if resource_version:
        meta["resourceVersion"] = resource_version
    if created:
        meta["creationTimestamp"] = created
    d = {"apiVersion": api, "kind": kind, "metadata": meta}
    if spec is not None:
        d["spec"] = spec
    if data is not None:
        d["data"] = data
    return d


def cm(name, ns, data, **kw):
    return doc("ConfigMap", name, ns, api="v1", data=data, **kw)


def yaml_text(docs, indent=None):
    """JSON is YAML (1.2): one flow document per resource."""
    return "".join("---\n" + json.dumps(d, indent=indent) + "\n"
                   for d in docs)


def write_atomic(path, text):
    """As careful tools write: a hidden temporary file, then rename."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), ".tmp-" + os.path.basename(path))
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def resource_name(d):
    m = d["metadata"]
    return m["namespace"] + "/" + m["name"] if m.get("namespace") else m["name"]


def expected_state(files, collections=None):
    """{collection: {name: expected mirror object without version}} of the
    documents of |files| ({path: [doc]}): for every one of |collections|
    (empty ones too, others left out), or without it for every collection
    with a resource."""
    state = {c: {} for c in collections or ()}
    for docs in files.values():
        for d in docs:
            c = COLLECTION_OF[d["kind"]]
            if collections is not None and c not in state:
                continue
            m = d["metadata"]
            state.setdefault(c, {})[resource_name(d)] = {
                "name": resource_name(d),
                "labels": m.get("labels", {}),
                "annotations": m.get("annotations", {}),
                "create_time": m.get("creationTimestamp"),
                "type_url": STRUCT,
                "body": d["spec"] if "spec" in d else d.get("data", {}),
            }
    return state


def read_mirror(root, collections, keep_empty=False):
    """{collection: {name: file content}} of the mirror (files only); a
    collection without a file only with |keep_empty|."""
    state = {}
    for c in collections:
        base = os.path.join(root, c)
        got = {}
        for dirpath, dirnames, filenames in os.walk(base):
            # Another collection's directory below this one is not ours.
            dirnames[:] = [d for d in dirnames
                           if os.path.relpath(os.path.join(dirpath, d), root)
                           not in collections]
            for fn in filenames:
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, base)
                if not fn.endswith(".json"):
                    got[rel] = "<not json>"
                    continue
                try:
                    with open(path) as f:
                        got[rel[:-5]] = json.load(f)
                except FileNotFoundError:
                    pass  # removed while we walked
                except ValueError:
                    got[rel[:-5]] = "<bad json>"
        if got or keep_empty:
            state[c] = got
    return state


def strip_versions(state):
    return {c: {n: {k: v for k, v in r.items() if k != "version"}
                if isinstance(r, dict) else r for n, r in res.items()}
            for c, res in state.items()}
