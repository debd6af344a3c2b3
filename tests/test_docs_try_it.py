#!/usr/bin/env python3
"""docs/tools.md's "Try it" runs as written (issue 24 item 14).

The commands name the programs where `make run` builds them (the Makefile's
RUN_BUILD, build-run/, then tools/), which a user has after `make run`. They
are run from the source tree with only the build directory, the port and
the --out directory put in: the source in the background, the Destination
sink to its sync (one `add` of the three ready endpoints, as the text
says), the Dispatcher worker in the background until its COMPLETE (task,
secret, config), and curl until /debug/tasks shows the task RUNNING.
Waits are for events under a deadline.

Usage: test_docs_try_it.py --source-root DIR --build-dir DIR
"""

import argparse
import json
import os
import queue
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

DEADLINE = 60.0


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def try_it_commands(root):
    """The commands of the indented block under "### Try it"."""
    with open(os.path.join(root, "docs", "tools.md")) as f:
        text = f.read()
    m = re.search(r"^### Try it\n(.*?)(?=^#)", text, re.M | re.S)
    check(m, "docs/tools.md has a Try it section")
    block = re.search(r"(?:^    .*\S.*\n)+", m.group(1), re.M)
    check(block, "with a block of commands")
    joined = block.group(0).replace("\\\n", " ")
    return [" ".join(l.split()) for l in joined.splitlines()]


class Bg:
    """A background command; its stdout lines in a queue."""

    def __init__(self, cmd, cwd):
        self.p = subprocess.Popen(["bash", "-c", "exec " + cmd], cwd=cwd,
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.q = queue.Queue()
        self.err = []
        threading.Thread(target=lambda: [self.q.put(l) for l in self.p.stdout],
                         daemon=True).start()
        threading.Thread(target=lambda: [self.err.append(l)
                                         for l in self.p.stderr],
                         daemon=True).start()

    def wait_line(self, pred, what):
        end = time.monotonic() + DEADLINE
        while True:
            try:
                line = self.q.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                check(False, "%s:\n%s" % (what, "".join(self.err)))
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if pred(ev):
                return ev

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--build-dir", required=True)
    a = ap.parse_args()
    root, build = a.source_root, os.path.abspath(a.build_dir)
    with open(os.path.join(root, "Makefile")) as f:
        m = re.search(r"^RUN_BUILD\s*\?=\s*(\S+)", f.read(), re.M)
    check(m and m.group(1) == "build-run", "make run builds into build-run/")
    cmds = try_it_commands(root)
    progs = [shlex.split(c)[0] for c in cmds if "mcp-" in shlex.split(c)[0]]
    check(len(progs) == 3 and
          all(p.startswith("build-run/tools/mcp-") for p in progs),
          "the programs are named where make run builds them: %s" % progs)
    for p in progs:
        exe = os.path.join(build, p[len("build-run/"):])
        check(os.access(exe, os.X_OK), "%s is what the build makes" % p)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="mcp-try-it-")
    sub = []
    for c in cmds:
        c = c.replace("build-run/", build + "/")
        c = c.replace("127.0.0.1:9901", "127.0.0.1:%d" % port)
        sub.append(c.replace("/tmp/node-a", os.path.join(tmp, "node-a")))
    bg = []
    try:
        source, dest, worker, curl = sub
        check(source.endswith("&") and worker.endswith("&"),
              "the source and the worker run in the background")
        bg.append(Bg(source[:-1], root))
        p = subprocess.run(["bash", "-c", dest], cwd=root, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=DEADLINE)
        check(p.returncode == 0, "the Destination sink synced and exited%s"
              % ("" if p.returncode == 0 else ":\n" + p.stderr))
        evs = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
        adds = [e for e in evs if e.get("update") == "add"]
        check(len(adds) == 1 and sorted(adds[0]["addrs"]) ==
              ["10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080"],
              "one add with the three ready endpoints: %s" % evs)
        w = Bg(worker[:-1], root)
        bg.append(w)
        ev = w.wait_line(lambda e: e.get("event") == "assignments" and
                         e.get("type") == "COMPLETE", "the worker's COMPLETE")
        got = sorted((c["kind"], c["id"]) for c in ev["changes"])
        check(got == [("config", "web-conf"), ("secret", "db-pass"),
                      ("task", "task-web-1")],
              "a COMPLETE with task-web-1, db-pass and web-conf: %s" % got)
        if not shutil.which("curl"):
            print("skip: no curl for the last command")
            return 0
        end = time.monotonic() + DEADLINE
        while True:  # the status is reported after the COMPLETE
            out = subprocess.run(["bash", "-c", curl], cwd=root, text=True,
                                 stdout=subprocess.PIPE).stdout
            try:
                tasks = json.loads(out)["tasks"]
            except (ValueError, KeyError):
                tasks = []
            if any(t["task_id"] == "task-web-1" and t["state"] == "RUNNING"
                   for t in tasks):
                break
            check(time.monotonic() < end,
                  "/debug/tasks shows task-web-1 RUNNING: %s" % out)
            time.sleep(0.1)
        check(True, "/debug/tasks shows task-web-1 RUNNING")
    finally:
        for b in reversed(bg):
            b.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
