#!/usr/bin/env python3
"""examples/cluster/run.sh as a user runs it (issue 24 item 14).

The script is started on free ports (its MCP_CLUSTER_* variables) in a
session of its own; the test reads its output until the three sinks are
synced, then checks that each sink began on replica A without a refused
dial (the script waits for each listener before starting the sinks). Then
SIGINT to the script alone, as Ctrl-C: when it has exited, every process it
started (etcd members, replicas, sinks) is gone and its directory removed,
by the script itself.

Waits are for events (lines of output, the exit) under a deadline. Exits 77
(skipped) without etcd.

Usage: test_cluster_example.py --source-root DIR --build-dir DIR
"""

import argparse
import json
import os
import random
import re
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

DEADLINE = 120.0  # seconds for the cluster to come up on a busy machine


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def free_block(n):
    """A base such that base+1..base+n are free TCP ports on 127.0.0.1."""
    for _ in range(200):
        base = random.randrange(20000, 60000 - n)
        socks = []
        try:
            for i in range(1, n + 1):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    sys.exit("FAIL: no free ports")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for the user: only its entry is left
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--build-dir", required=True)
    a = ap.parse_args()
    if not shutil.which("etcd") or not shutil.which("etcdctl"):
        print("skip: etcd or etcdctl missing")
        return 77
    client, peer, replica = free_block(3), free_block(3), free_block(2)
    env = dict(os.environ, MCP_CLUSTER_ETCD_CLIENT=str(client),
               MCP_CLUSTER_ETCD_PEER=str(peer),
               MCP_CLUSTER_REPLICA=str(replica))
    script = os.path.join(a.source_root, "examples", "cluster", "run.sh")
    p = subprocess.Popen([script, os.path.abspath(a.build_dir)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    pids, logs, connected, synced, lines = {}, {}, {}, set(), []
    q = queue.Queue()  # its output, line by line ("" at the end)
    threading.Thread(target=lambda: [q.put(l) for l in p.stdout] + [q.put("")],
                     daemon=True).start()
    end = time.monotonic() + DEADLINE
    try:
        while len(synced) < 3:
            try:
                line = q.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                check(False, "the three sinks synced in %.0f s:\n%s" %
                      (DEADLINE, "".join(lines)))
            if not line:
                check(False, "run.sh ended before the sinks synced:\n%s" %
                      "".join(lines))
            lines.append(line)
            m = re.match(r"^(etcd member m\d|replica [AB]|sink-\d): pid (\d+)"
                         r"(.*)$", line.strip())
            if m:
                pids[m.group(1)] = int(m.group(2))
                log = re.search(r"log (\S+)\)$", m.group(3))
                if log:
                    logs[m.group(1)] = log.group(1)
                continue
            m = re.match(r"^(sink-\d): (\{.*\})$", line.strip())
            if m:
                ev = json.loads(m.group(2))
                if ev["event"] == "connected":
                    connected.setdefault(m.group(1), ev["peer"])
                elif ev["event"] == "synced":
                    synced.add(m.group(1))
        check(len(pids) == 8, "run.sh names its 8 processes: %s" % pids)
        a_addr = "127.0.0.1:%d" % (replica + 1)
        check(all(connected.get("sink-%d" % i) == a_addr for i in (1, 2, 3)),
              "each sink began on replica A (%s): %s" % (a_addr, connected))
        for i in (1, 2, 3):
            with open(logs["sink-%d" % i]) as f:
                text = f.read()
            clean = "refused" not in text and "failed" not in text
            check(clean, "sink-%d dialed a listening replica%s" %
                  (i, "" if clean else ":\n" + text))
        tmpdir = os.path.dirname(logs["sink-1"])
        # Ctrl-C, to the script alone: it must stop what it started.
        os.kill(p.pid, signal.SIGINT)
        rc = p.wait(timeout=DEADLINE)
        print("run.sh exited %d" % rc)
        left = [n for n, pid in pids.items() if alive(pid)]
        check(not left, "everything stopped with the script (left: %s)" % left)
        check(not os.path.exists(tmpdir), "its directory is removed")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
