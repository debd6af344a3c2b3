#!/usr/bin/env python3
"""Records the seeds of fuzz_h2c_conn from real clients.

Runs mcp-source (h2c) on examples/config behind a recording proxy and
points real clients at the proxy: mcp-sink over h2c (the three APIs),
the @grpc/grpc-js sink of tests/interop (when its node_modules are
installed), nghttp (HTTP/2 with prior knowledge, and -u: the HTTP/1.1
Upgrade), curl (--http2: Upgrade; --http2-prior-knowledge; HTTP/1.1 GET,
HEAD, keep-alive) and a few raw HTTP/1.1 requests. What each client sent
is written as a fuzz_h2c_conn script: a configuration byte, then the
bytes in the pieces the proxy received them (each at most 254 bytes, a
length byte before it). Every trace is written for both configurations.

    fuzz/record_h2c_seeds.py BUILD_DIR OUT_DIR
BUILD_DIR holds tools/mcp-source and tools/mcp-sink (a normal build).
"""
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
COLLS = ["istio/networking/v1alpha3/gateways",
         "istio/networking/v1alpha3/virtualservices"]
TYPES = ["type.googleapis.com/istio.networking.v1alpha3.Gateway",
         "type.googleapis.com/istio.networking.v1alpha3.VirtualService"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Recorder:
    """A TCP proxy that keeps what each client sent, in received pieces."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.lis = socket.socket()
        self.lis.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lis.bind(("127.0.0.1", 0))
        self.lis.listen(16)
        self.port = self.lis.getsockname()[1]
        self.traces = []
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.lis.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.upstream))
            trace = []
            with self.lock:
                self.traces.append(trace)
            threading.Thread(target=self.pipe, args=(c, u, trace),
                             daemon=True).start()
            threading.Thread(target=self.pipe, args=(u, c, None),
                             daemon=True).start()

    @staticmethod
    def pipe(a, b, trace):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                if trace is not None:
                    trace.append(d)
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def take(self):
        time.sleep(0.3)
        with self.lock:
            t, self.traces = self.traces, []
        return t


def script(conf, pieces):
    out = bytearray([conf])
    for p in pieces:
        for i in range(0, len(p), 254):
            part = p[i:i + 254]
            out.append(len(part))
            out += part
    return bytes(out)


def main():
    build, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    port = free_port()
    src = subprocess.Popen(
        [os.path.join(build, "tools", "mcp-source"), "--transport", "h2c",
         "--dir", os.path.join(SRC, "examples", "config"), "--listen",
         "127.0.0.1:%d" % port, "--debounce", "0", "--log-level", "error"])
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        rec = Recorder(port)
        addr = "127.0.0.1:%d" % rec.port
        url = "http://" + addr
        sink = os.path.join(build, "tools", "mcp-sink")
        node_sink = os.path.join(SRC, "tests", "interop", "mcp_sink.js")
        have_node = (shutil.which("node") and os.path.isdir(
            os.path.join(SRC, "tests", "interop", "node_modules")))
        runs = []
        for api, colls in (("resource", COLLS), ("aggregated", TYPES),
                           ("aggregated-incremental", TYPES)):
            args = [sink, "--transport", "h2c", "--connect", addr, "--api", api,
                    "--exit-after-sync", "--log-level", "error"]
            for c in colls:
                args += ["--collection", c]
            runs.append(("mcp-sink-" + api, args))
            if have_node:
                args = ["node", node_sink, "--connect", addr, "--api", api,
                        "--exit-after-sync", "--timeout-ms", "5000"]
                for c in colls:
                    args += ["--collection", c]
                runs.append(("grpc-js-" + api, args))
        runs.append(("mcp-sink-incremental",
                     [sink, "--transport", "h2c", "--connect", addr,
                      "--incremental", "--exit-after-sync", "--log-level",
                      "error", "--collection", COLLS[0]]))
        runs += [
            ("nghttp-prior", ["nghttp", url + "/healthz"]),
            ("nghttp-upgrade", ["nghttp", "-u", url + "/healthz"]),
            ("nghttp-upgrade-404", ["nghttp", "-u", url + "/nope"]),
            ("curl-upgrade", ["curl", "-s", "--http2", url + "/healthz"]),
            ("curl-prior", ["curl", "-s", "--http2-prior-knowledge",
                            url + "/healthz"]),
            ("curl-http1-keepalive", ["curl", "-s", url + "/healthz",
                                      url + "/debug/echo"]),
            ("curl-head", ["curl", "-s", "-I", url + "/healthz"]),
            ("curl-upgrade-post", ["curl", "-s", "--http2", "-d", "x=1",
                                   url + "/debug/echo"]),
        ]
        for name, args in runs:
            try:
                subprocess.run(args, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=10)
            except (OSError, subprocess.TimeoutExpired) as e:
                print("skipped %s: %s" % (name, e), file=sys.stderr)
            for i, trace in enumerate(rec.take()):
                if not trace:
                    continue
                for conf in (0, 1):
                    fn = "%s-%d%s" % (name, conf, "-%d" % i if i else "")
                    with open(os.path.join(out, fn), "wb") as f:
                        f.write(script(conf, trace))
        # Raw HTTP/1.1: pipelining, a malformed request, an Upgrade without
        # HTTP2-Settings, the Upgrade followed at once by the preface.
        raw = {
            "raw-pipelined": b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                             b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                             b"GET /debug/echo HTTP/1.1\r\nHost: x\r\n"
                             b"Connection: close\r\n\r\n",
            "raw-bad": b"GET / HTTP/9.9 nonsense\r\n\r\n",
            "raw-empty-body": b"GET /debug/empty HTTP/1.1\r\nHost: x\r\n\r\n"
                              b"HEAD /debug/empty HTTP/1.1\r\nHost: x\r\n\r\n",
            "raw-upgrade-no-settings":
                b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                b"Upgrade: h2c\r\n\r\n",
            "raw-upgrade-bad-settings":
                b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, "
                b"HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAM\r\n\r\n",
            "raw-upgrade-preface":
                b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, "
                b"HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: "
                b"AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00"
                b"\x00\x00",
        }
        for name, data in raw.items():
            for conf in (0, 1):
                with open(os.path.join(out, "%s-%d" % (name, conf)), "wb") as f:
                    f.write(script(conf, [data]))
    finally:
        src.terminate()
        src.wait()
    print("wrote %d seeds to %s" % (len(os.listdir(out)), out))


if __name__ == "__main__":
    main()
