#!/usr/bin/env python3
"""End-to-end tests of swarmkit's Dispatcher (issue 16).

The real programs over 127.0.0.1: mcp-source serves Task, Secret, Config
and Node documents (apiVersion swarmkit.docker.com/v1) of a temporary
directory as docker.swarmkit.v1.Dispatcher beside MCP; mcp-sink --api
dispatcher is a worker (Session, Heartbeat, Assignments, UpdateTaskStatus).
Its --json lines (one per Assignments message) and --out files are checked
as the files change.

  Disp*        both programs on --transport
  CrossDisp*   mcp-sink on the other transport (skipped when not built)

Usage: test_dispatcher.py --build-dir BUILD [--transport grpc|h2c]
Standard library only (e2e_common.py).
"""

import json
import os
import signal
import subprocess
import sys
import unittest

import e2e_common as common
from e2e_common import doc, http_get, run

API = "swarmkit.docker.com/v1"


def task(tid, node, state="ASSIGNED", image="nginx:1.25", secrets=(),
         configs=()):
    spec = {"container": {"image": image}}
    if secrets:
        spec["container"]["secrets"] = [{"secretId": s, "secretName": s}
                                        for s in secrets]
    if configs:
        spec["container"]["configs"] = [{"configId": c, "configName": c}
                                        for c in configs]
    return doc("Task", tid, None, {"nodeId": node, "serviceId": "web",
                                   "desiredState": "RUNNING",
                                   "status": {"state": state},
                                   "spec": spec}, api=API)


def secret(sid, data="c2VjcmV0"):
    return doc("Secret", sid, None, {"spec": {"annotations": {"name": sid},
                                              "data": data}}, api=API)


def config(cid, data="eA=="):
    return doc("Config", cid, None, {"spec": {"annotations": {"name": cid},
                                              "data": data}}, api=API)


def node(nid):
    return doc("Node", nid, None, {"description": {"hostname": nid},
                                   "status": {"state": "READY"}}, api=API)


class DispBase(common.Base):
    SOURCE_ARGS = ()
    TMP_PREFIX = "mcp-e2e-disp-"
    SANITIZER_STOP = 10  # SIGTERM first: sanitizer builds report leaks

    def source(self, *extra):
        src = self.start("mcp-source", ["--dir", self.config, "--listen",
                                        self.addr, "--debounce", "0"] +
                         list(extra))
        self.wait_for(lambda: "APIs:" in src.stderr(), "mcp-source to listen",
                      src)
        return src

    def agent(self, node_id, *extra):
        return self.start("mcp-sink", ["--api", "dispatcher", "--node-id",
                                       node_id, "--connect", self.addr,
                                       "--json"] + list(extra))

    def msgs(self, a):
        return a.events("assignments")

    def wait_msgs(self, a, n):
        return self.wait_for(lambda: len(self.msgs(a)) >= n and
                             self.msgs(a)[:n],
                             lambda: "%d Assignments messages (have %s)" % (
                                 n, self.msgs(a)), a)

    @staticmethod
    def changes(m):
        return sorted((c["action"], c["kind"], c["id"]) for c in m["changes"])


class DispRules(DispBase):
    def test_complete_then_incremental_chain(self):
        self.put("a.yaml", [node("node-a"),
                            task("t1", "node-a", secrets=["s1"],
                                 configs=["c1"]),
                            task("t2", "node-a", state="PENDING"),
                            task("t3", "node-b"),
                            secret("s1"), config("c1"), secret("s9")])
        self.source()
        out = os.path.join(self.tmp, "out")
        a = self.agent("node-a", "--out", out)
        m = self.wait_msgs(a, 1)[0]
        self.assertEqual((m["type"], m["applies_to"]), ("COMPLETE", ""))
        self.assertTrue(m["results_in"])
        self.assertEqual(self.changes(m), [("UPDATE", "config", "c1"),
                                           ("UPDATE", "secret", "s1"),
                                           ("UPDATE", "task", "t1")])
        self.assertEqual(m["total"], 3)
        with open(os.path.join(out, "tasks", "t1.json")) as f:
            t1 = json.load(f)
        self.assertEqual((t1["id"], t1["nodeId"], t1["status"]["state"]),
                         ("t1", "node-a", "ASSIGNED"))
        self.assertTrue(os.path.exists(os.path.join(out, "secrets", "s1.json")))
        self.assertTrue(os.path.exists(os.path.join(out, "configs", "c1.json")))
        # t2 assigned: one INCREMENTAL chained on the COMPLETE.
        self.put("a.yaml", [node("node-a"),
                            task("t1", "node-a", secrets=["s1"],
                                 configs=["c1"]),
                            task("t2", "node-a", secrets=["s1"]),
                            task("t3", "node-b"),
                            secret("s1"), config("c1"), secret("s9")])
        m2 = self.wait_msgs(a, 2)[1]
        self.assertEqual((m2["type"], m2["applies_to"]),
                         ("INCREMENTAL", m["results_in"]))
        self.assertEqual(self.changes(m2), [("UPDATE", "task", "t2")])
        self.assertEqual(m2["total"], 4)
        # t1 goes: its config goes with it, the secret t2 shares stays.
        self.put("a.yaml", [node("node-a"),
                            task("t2", "node-a", secrets=["s1"]),
                            task("t3", "node-b"),
                            secret("s1"), config("c1"), secret("s9")])
        m3 = self.wait_msgs(a, 3)[2]
        self.assertEqual(m3["applies_to"], m2["results_in"])
        self.assertEqual(self.changes(m3), [("REMOVE", "config", "c1"),
                                            ("REMOVE", "task", "t1")])
        self.wait_for(lambda: not os.path.exists(
            os.path.join(out, "tasks", "t1.json")), "t1.json removed", a)
        self.assertFalse(os.path.exists(os.path.join(out, "configs",
                                                     "c1.json")))
        # The last task using s1 moves to node-b: REMOVE both.
        self.put("a.yaml", [node("node-a"),
                            task("t2", "node-b", secrets=["s1"]),
                            task("t3", "node-b"),
                            secret("s1"), config("c1"), secret("s9")])
        m4 = self.wait_msgs(a, 4)[3]
        self.assertEqual(self.changes(m4), [("REMOVE", "secret", "s1"),
                                            ("REMOVE", "task", "t2")])
        self.assertEqual(m4["total"], 0)

    def test_changes_invisible_to_the_node_send_nothing(self):
        self.put("a.yaml", [task("t1", "node-a"), task("t3", "node-b"),
                            secret("s9")])
        self.source()
        a = self.agent("node-a")
        b = self.agent("node-b")
        self.wait_msgs(a, 1)
        self.wait_msgs(b, 1)
        self.put("a.yaml", [task("t1", "node-a"),
                            task("t3", "node-b", image="nginx:2"),
                            secret("s9", data="eQ==")])
        m = self.wait_msgs(b, 2)[1]
        self.assertEqual(self.changes(m), [("UPDATE", "task", "t3")])
        # A change node-a sees: its next message holds only that.
        self.put("a.yaml", [task("t1", "node-a", image="nginx:2"),
                            task("t3", "node-b", image="nginx:2"),
                            secret("s9", data="eQ==")])
        m = self.wait_msgs(a, 2)[1]
        self.assertEqual(self.changes(m), [("UPDATE", "task", "t1")])

    def test_task_past_running_with_the_same_spec_is_not_resent(self):
        self.put("a.yaml", [task("t1", "node-a", state="RUNNING")])
        self.source()
        a = self.agent("node-a")
        self.wait_msgs(a, 1)
        # Each status-only change is followed by a change that is sent: the
        # next message holds only that one, whether the two reloads were one
        # or two (no wall-clock window to wait out).
        self.put("a.yaml", [task("t1", "node-a", state="COMPLETE")])
        # Issue 24 item 6: nor past ASSIGNED, at or below RUNNING.
        self.put("a.yaml", [task("t1", "node-a", state="COMPLETE"),
                            task("t2", "node-a")])
        m = self.wait_msgs(a, 2)[1]
        self.assertEqual(self.changes(m), [("UPDATE", "task", "t2")])
        self.put("a.yaml", [task("t1", "node-a", state="COMPLETE"),
                            task("t2", "node-a", state="STARTING")])
        # A new spec is sent, past RUNNING or not.
        self.put("a.yaml", [task("t1", "node-a", state="FAILED",
                                 image="nginx:2"),
                            task("t2", "node-a", state="STARTING")])
        m = self.wait_msgs(a, 3)[2]
        self.assertEqual(self.changes(m), [("UPDATE", "task", "t1")])

    def test_finished_task_releases_its_secret(self):
        # Issue 24 item 5: past RUNNING, a task's secrets and configs that no
        # live task uses go (INCREMENTAL REMOVE, assignments.go:268-277); a
        # task first seen past RUNNING brings none (:281).
        def put(t1_state):
            self.put("a.yaml", [task("t1", "node-a", state=t1_state,
                                     secrets=["s1"], configs=["c1"]),
                                task("t2", "node-a", state="RUNNING",
                                     secrets=["s2"]),
                                task("t3", "node-a", state="COMPLETE",
                                     secrets=["s3"]),
                                secret("s1"), secret("s2"), secret("s3"),
                                config("c1")])
        put("RUNNING")
        self.source()
        out = os.path.join(self.tmp, "out")
        a = self.agent("node-a", "--out", out)
        m = self.wait_msgs(a, 1)[0]
        self.assertEqual(self.changes(m), [("UPDATE", "config", "c1"),
                                           ("UPDATE", "secret", "s1"),
                                           ("UPDATE", "secret", "s2"),
                                           ("UPDATE", "task", "t1"),
                                           ("UPDATE", "task", "t2"),
                                           ("UPDATE", "task", "t3")])
        put("COMPLETE")
        m2 = self.wait_msgs(a, 2)[1]
        self.assertEqual(m2["type"], "INCREMENTAL")
        self.assertEqual(self.changes(m2), [("REMOVE", "config", "c1"),
                                            ("REMOVE", "secret", "s1")])
        self.wait_for(lambda: not os.path.exists(
            os.path.join(out, "secrets", "s1.json")), "s1.json removed", a)
        self.assertTrue(os.path.exists(os.path.join(out, "tasks", "t1.json")))
        self.assertTrue(os.path.exists(os.path.join(out, "secrets", "s2.json")))

    def test_report_status_reaches_debug_tasks(self):
        self.put("a.yaml", [task("t1", "node-a"), task("t2", "node-a")])
        dport = common.free_port()
        self.source("--debug-listen", "127.0.0.1:%d" % dport)
        a = self.agent("node-a", "--report-status", "RUNNING")
        self.wait_msgs(a, 1)

        def tasks():
            st, _, body = http_get(dport, "/debug/tasks")
            return st == 200 and json.loads(body)
        page = self.wait_for(lambda: (tasks() or {}).get("count") == 2 and
                             tasks(), "/debug/tasks to list both", a)
        page = self.wait_for(
            lambda: all(t["state"] == "RUNNING" for t in tasks()["tasks"])
            and tasks(), "both tasks RUNNING", a)
        # Issue 24 item 10: the last of the controller's states, with its
        # message ("started", controller.go:230).
        self.assertEqual([(t["task_id"], t["node_id"], t["state"],
                           t["message"]) for t in page["tasks"]],
                         [("t1", "node-a", "RUNNING", "started"),
                          ("t2", "node-a", "RUNNING", "started")])
        st, _, body = http_get(dport, "/metrics")
        self.assertIn('mcp_api_streams_total{component="mcp-source",'
                      'api="dispatcher"}', body)
        # The served data did not change: no message after the COMPLETE.
        self.assertEqual(len(self.msgs(a)), 1)

    def test_session_expires_and_the_agent_starts_a_new_one(self):
        self.put("a.yaml", [task("t1", "node-a")])
        src = self.source("--heartbeat-period", "200")
        a = self.agent("node-a")
        m = self.wait_msgs(a, 1)[0]
        a.signal(signal.SIGSTOP)  # no heartbeat until its session expired

        def expired():
            # The session call ends NotFound once its session expired,
            # whether the registry's timer or the call's own turn found it
            # due (only the first logs "session expired").
            return any("session call" in line and
                       "closed: status 5: node not registered" in line
                       for line in src.stderr_lines())
        try:
            self.wait_for(expired, "the stopped agent's session to expire",
                          src)
        finally:
            a.signal(signal.SIGCONT)
        m2 = self.wait_msgs(a, 2)[1]
        self.assertEqual((m2["type"], m2["applies_to"]), ("COMPLETE", ""))
        self.assertEqual(self.changes(m2), [("UPDATE", "task", "t1")])
        self.assertEqual(m["total"], 1)
        self.assertTrue(src.running())

    def test_session_of_a_gone_agent_expires_at_its_deadline(self):
        # The registry's timer is the Dispatcher's get_expiry (issue 21):
        # the session of an agent that vanished is freed at its deadline,
        # by the timer armed when its calls ended, not by a metrics tick.
        self.put("a.yaml", [task("t1", "node-a")])
        src = self.source("--heartbeat-period", "100", "--log-level", "debug")
        a = self.agent("node-a")
        self.wait_msgs(a, 1)
        a.signal(signal.SIGKILL)  # its calls end; its session lives on
        self.wait_for(lambda: "Dispatcher: 1 session expired" in src.stderr(),
                      "the session to expire", src)
        self.assertTrue(src.running())

    def test_restarted_manager_gives_a_new_session(self):
        self.put("a.yaml", [task("t1", "node-a")])
        src = self.source()
        a = self.agent("node-a", "--log-level", "debug")
        self.wait_msgs(a, 1)
        src.signal(signal.SIGTERM)
        self.assertEqual(src.wait(), 0, src.stderr())
        self.put("a.yaml", [task("t1", "node-a"), task("t2", "node-a")])
        self.source()
        m = self.wait_msgs(a, 2)[1]
        self.assertEqual(m["type"], "COMPLETE")
        self.assertEqual(self.changes(m), [("UPDATE", "task", "t1"),
                                           ("UPDATE", "task", "t2")])

    def test_struct_bodies_and_exit_after_sync(self):
        # --body struct: the view encodes swarmkit's objects itself.
        self.put("a.yaml", [task("t1", "node-a", secrets=["s1"]),
                            secret("s1")])
        self.source("--body", "struct")
        out = os.path.join(self.tmp, "out")
        rc, stdout, stderr = run([self.exe("mcp-sink"), "--transport",
                                  self.transport_for("mcp-sink"), "--api",
                                  "dispatcher", "--node-id", "node-a",
                                  "--connect", self.addr, "--json", "--out",
                                  out, "--exit-after-sync"])
        self.assertEqual(rc, 0, stderr)
        m = json.loads(stdout.splitlines()[0])
        self.assertEqual(self.changes(m), [("UPDATE", "secret", "s1"),
                                           ("UPDATE", "task", "t1")])
        with open(os.path.join(out, "secrets", "s1.json")) as f:
            self.assertEqual(json.load(f)["id"], "s1")


class DispTLS(DispBase):
    """With TLS the node is the client certificate's CN, whatever the
    agent's description says (gRPC only; certificates of
    tests/gen_certs.sh, skipped without openssl)."""

    def setUp(self):
        if common.TRANSPORT != "grpc":
            self.skipTest("TLS: gRPC only")
        super().setUp()
        self.certs = os.path.join(self.tmp, "certs")
        here = os.path.dirname(os.path.abspath(__file__))
        p = subprocess.run(["sh", os.path.join(here, "..", "gen_certs.sh"),
                            self.certs], capture_output=True, text=True)
        if p.returncode != 0:
            self.skipTest("gen_certs.sh failed (openssl?): " + p.stderr)

    def test_node_is_the_certificates_cn(self):
        c = lambda n: os.path.join(self.certs, n)
        self.put("a.yaml", [task("t1", "legacy-client"),
                            task("t2", "claimed")])
        self.source("--tls-cert", c("server.pem"), "--tls-key",
                    c("server.key"), "--tls-ca", c("ca.pem"))
        a = self.agent("claimed", "--tls-cert", c("cn.pem"), "--tls-key",
                       c("cn.key"), "--tls-ca", c("ca.pem"))
        m = self.wait_msgs(a, 1)[0]
        self.assertEqual(self.changes(m), [("UPDATE", "task", "t1")])


class DispFlags(DispBase):
    def test_flags(self):
        rc, _, err = run([self.exe("mcp-sink"), "--api", "dispatcher",
                          "--connect", self.addr])
        self.assertEqual(rc, 2, err)
        self.assertIn("--node-id", err)
        rc, _, err = run([self.exe("mcp-sink"), "--api", "dispatcher",
                          "--node-id", "n", "--report-status", "BOGUS"])
        self.assertEqual(rc, 2, err)
        rc, _, err = run([self.exe("mcp-source"), "--heartbeat-period", "0"])
        self.assertEqual(rc, 2, err)
        rc, _, err = run([self.exe("mcp-source"), "--manager", "nohost"])
        self.assertEqual(rc, 2, err)
        # --manager [ID=]ADDR: an empty id, or a bad address after it.
        rc, _, err = run([self.exe("mcp-source"), "--manager",
                          "=10.0.0.1:4242"])
        self.assertEqual(rc, 2, err)
        self.assertIn("empty node id", err)
        rc, _, err = run([self.exe("mcp-source"), "--manager", "m1=nohost"])
        self.assertEqual(rc, 2, err)
        rc, _, err = run([self.exe("mcp-source"), "--manager-id", ""])
        self.assertEqual(rc, 2, err)


class CrossDispRules(common.OtherTransportSink, DispRules):
    pass


def built():
    """Whether the programs have the API: mcp-sink says "not built" at
    once otherwise (a usage error either way)."""
    rc, _, err = run([common.exe("mcp-sink"), "--api", "dispatcher"])
    return "not built" not in err and "has no clients" not in err


if __name__ == "__main__":
    argv = common.parse_args(__doc__.splitlines()[0])
    if not built():
        print("test_dispatcher.py: the dispatcher API is not built into the programs: skipped")
        sys.exit(77)
    unittest.main(argv=argv, verbosity=2)
