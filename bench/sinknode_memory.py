#!/usr/bin/python3
"""Memory of mcp-source under sinks that claim huge SinkNodes (issue 12).

Starts MCP_SOURCE (argument 1) on a directory with one VirtualService,
then tests/e2e/sinknode_flood.py with STREAMS streams whose SinkNode id is
ID_MIB MiB, holds them, and reports the source's resident memory (VmRSS)
before, while the streams are held, its peak (VmHWM), the flood's verdict,
and the size and time of one GET /debug/syncz meanwhile. docs/security.md
("SinkNode") has the numbers.

Usage: bench/sinknode_memory.py PATH/TO/mcp-source [STREAMS [ID_MIB]]
"""

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
FLOOD = os.path.join(HERE, "..", "tests", "e2e", "sinknode_flood.py")
VS = "istio/networking/v1alpha3/virtualservices"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def mem(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) // 1024  # MiB
    return out


def main():
    src_bin = sys.argv[1]
    streams = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    id_mib = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    tmp = tempfile.mkdtemp(prefix="mcp-sinknode-")
    with open(os.path.join(tmp, "vs.yaml"), "w") as f:
        f.write("apiVersion: networking.istio.io/v1alpha3\n"
                "kind: VirtualService\nmetadata:\n  name: reviews\n"
                "  namespace: default\nspec:\n  hosts: [reviews]\n")
    port, dport = free_port(), free_port()
    src = subprocess.Popen([src_bin, "--dir", tmp, "--listen",
                            "127.0.0.1:%d" % port, "--debug-listen",
                            "127.0.0.1:%d" % dport],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/healthz" % dport)
                break
            except OSError:
                time.sleep(0.1)
        before = mem(src.pid)
        flood = subprocess.Popen(
            ["/usr/bin/python3", FLOOD, "--target", "127.0.0.1:%d" % port,
             "--streams", str(streams), "--id-bytes", str(id_mib << 20),
             "--collection", VS, "--timeout", "120", "--hold", "120"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        verdict = json.loads(flood.stdout.readline())
        time.sleep(1)
        held = mem(src.pid)
        t = time.monotonic()
        r = urllib.request.urlopen(
            "http://127.0.0.1:%d/debug/syncz" % dport, timeout=300)
        took = time.monotonic() - t  # until the page was built
        size = int(r.headers["Content-Length"])
        try:
            r.read()
        except http.client.IncompleteRead:
            pass  # the server gave up sending hundreds of MB
        after_syncz = mem(src.pid)
        flood.stdin.close()
        flood.wait(timeout=120)
        print(json.dumps({
            "streams": streams, "id_mib": id_mib,
            "flood": {"ok": verdict["ok"], "ended": verdict["ended"]},
            "rss_before_mib": before["VmRSS"],
            "rss_held_mib": held["VmRSS"],
            "peak_mib": after_syncz["VmHWM"],
            "syncz_bytes": size, "syncz_seconds": round(took, 3)}))
    finally:
        src.kill()
        src.wait()


if __name__ == "__main__":
    main()
