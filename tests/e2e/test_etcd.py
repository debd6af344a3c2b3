#!/usr/bin/env python3
"""mcp-source --etcd against a real etcd (Debian's etcd-server): each test
starts its own member on loopback ports with a temporary data directory,
writes with etcdctl, and reads what a real mcp-sink receives.

  load      what etcd holds is served, version = the key's mod_revision
  watch     puts, updates and deletes reach the sink as they happen
  restart   etcd killed and restarted with changes made meanwhile: the
            source reads again and an incremental sink gets exactly the
            difference, not everything again
  bad       a value that is not a document, or sits at the wrong key, is
            reported and skipped; the rest is served
  down      no etcd at start: not ready, retrying, no crash; ready once
            etcd comes
  prefix    another prefix serves nothing of ours; declared collections
            are served empty
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common as E  # noqa: E402

ETCD = shutil.which("etcd")
ETCDCTL = shutil.which("etcdctl")


class Etcd:
    """One etcd member on loopback ports, its data in |tmp|."""

    def __init__(self, tmp, client_port=None, certs=None, name="m",
                 extra=()):
        self.extra = list(extra)  # more etcd flags
        self.certs = certs  # a gen_certs.sh directory: mutual TLS
        self.name = name
        self.cluster = None  # "name=peer,...": set for a cluster member
        self.dir = os.path.join(tmp, "etcd-%d" % E.free_port())
        self.client_port = client_port or E.free_port()
        self.peer_port = E.free_port()
        self.endpoint = "127.0.0.1:%d" % self.client_port
        self.p = None

    def start(self, wait=True):
        client = ("https://" if self.certs else "http://") + self.endpoint
        peer = "http://127.0.0.1:%d" % self.peer_port
        tls = []
        if self.certs:
            c = self.certs
            tls = ["--cert-file", os.path.join(c, "server.pem"),
                   "--key-file", os.path.join(c, "server.key"),
                   "--trusted-ca-file", os.path.join(c, "ca.pem"),
                   "--client-cert-auth"]
        self.log = open(os.path.join(os.path.dirname(self.dir),
                                     os.path.basename(self.dir) + ".log"), "a")
        self.p = subprocess.Popen(
            [ETCD, "--name", self.name, "--data-dir", self.dir,
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", self.cluster or self.name + "=" + peer]
            + tls + self.extra,
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30
        while wait and self.ctl("endpoint", "health",
                                check=False).returncode != 0:
            if time.monotonic() > deadline or self.p.poll() is not None:
                raise RuntimeError("etcd did not start")
            time.sleep(0.1)

    def kill(self):
        if self.p and self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        if self.p:
            self.log.close()
        self.p = None

    def ctl(self, *args, data=None, check=True):
        tls = []
        if self.certs:
            c = self.certs
            tls = ["--cacert", os.path.join(c, "ca.pem"),
                   "--cert", os.path.join(c, "client.pem"),
                   "--key", os.path.join(c, "client.key")]
        r = subprocess.run([ETCDCTL, "--endpoints=" + self.endpoint,
                            "--dial-timeout=2s", "--command-timeout=5s"]
                           + tls + list(args), input=data, capture_output=True,
                           text=True)
        if check and r.returncode != 0:
            raise RuntimeError("etcdctl %s: %s" % (" ".join(args), r.stderr))
        return r

    def put(self, key, value):
        """Puts |value| (a dict as JSON, or text) at |key|: its revision."""
        text = value if isinstance(value, str) else json.dumps(value)
        self.ctl("put", key, data=text)
        return self.mod_revision(key)

    def put_http(self, key, value):
        """A put through etcd's JSON gateway (/v3/kv/put), for values over
        etcdctl's 2 MiB send limit."""
        import base64
        import urllib.request
        text = value if isinstance(value, str) else json.dumps(value)
        body = json.dumps({"key": base64.b64encode(key.encode()).decode(),
                           "value": base64.b64encode(text.encode()).decode()})
        req = urllib.request.Request("http://%s/v3/kv/put" % self.endpoint,
                                     data=body.encode(), method="POST")
        urllib.request.urlopen(req, timeout=30).read()

    def delete(self, key):
        self.ctl("del", key)

    def mod_revision(self, key):
        out = json.loads(self.ctl("get", key, "-w", "json").stdout)
        return out["kvs"][0]["mod_revision"]


def listening(test, p):
    test.wait_for(lambda: "serving ResourceSource on" in p.stderr()
                  or not p.running(), "%s to listen" % p.name)


def key_of(d, prefix="/mcp/"):
    return prefix + E.COLLECTION_OF[d["kind"]] + "/" + E.resource_name(d)


def vs(name, hosts, ns="default"):
    return E.doc("VirtualService", name, ns, spec={"hosts": hosts})


@unittest.skipUnless(ETCD and ETCDCTL, "etcd-server and etcd-client needed")
class EtcdSource(E.Base):
    SANITIZER_STOP = 10  # SIGTERM first: sanitizer builds report leaks

    def setUp(self):
        super().setUp()
        self.etcd = Etcd(self.tmp)
        self.members = [self.etcd]

    def tearDown(self):
        super().tearDown()  # the programs first, then etcd
        for m in self.members:
            m.kill()

    def source(self, *extra, etcd=None, addr=None, wait=True):
        """A replica on |addr| (default self.addr); with |wait|, once it
        listens (a sink dialing a list must find the first one up)."""
        self.ops = E.free_port()
        p = self.start("mcp-source", [
            "--etcd", etcd or self.etcd.endpoint, "--listen", addr or self.addr,
            "--debug-listen", "127.0.0.1:%d" % self.ops, "--debounce", "0",
            "--log-level", "debug"] + list(extra))
        if wait:
            listening(self, p)
        return p

    def sink(self, *extra, collections=(E.VS,), connect=None):
        """An mcp-sink mirroring into a directory of its own."""
        out = os.path.join(self.tmp, "mirror%d" % len(self.procs))
        args = ["--connect", connect or self.addr, "--json", "--out", out]
        for c in collections:
            args += ["--collection", c]
        p = self.start("mcp-sink", args + list(extra))
        p.mirror_dir = out
        return p

    def mirror(self, collections=(E.VS,), sink=None):
        return E.read_mirror(sink.mirror_dir if sink else self.first_mirror(),
                             collections)

    def first_mirror(self):
        return next(p.mirror_dir for p in self.procs
                    if hasattr(p, "mirror_dir"))

    def held(self, sink, collection=E.VS):
        """{name: version} the sink holds after its last response."""
        m = self.mirror((collection,), sink).get(collection, {})
        return {r["name"]: r["version"] for r in m.values()
                if isinstance(r, dict)}

    def metric(self, name):
        status, _, body = E.http_get(self.ops, "/metrics")
        for line in body.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def test_load_serves_what_etcd_holds_with_mod_revision_versions(self):
        self.etcd.start()
        a, b = vs("a", ["a.example"]), vs("b", ["b.example"], ns="prod")
        ra = self.etcd.put(key_of(a), a)
        rb = self.etcd.put(key_of(b), b)
        # Not ours, but the cluster's revision moves: the one served.
        rx = self.etcd.put("/elsewhere/x", "not under the prefix")
        src = self.source()
        snk = self.sink()
        self.wait_synced(snk)
        self.assertEqual(self.held(snk), {"default/a": str(ra),
                                          "prod/b": str(rb)})
        body = self.mirror()[E.VS]["prod/b"]["body"]
        self.assertEqual(body, {"hosts": ["b.example"]})
        self.wait_for(lambda: self.metric("mcp_etcd_revision") == rx,
                      "the revision served in /metrics", src)
        self.assertEqual(E.http_get(self.ops, "/readyz")[0], 200)

    def test_watch_puts_updates_and_deletes_reach_the_sink(self):
        self.etcd.start()
        a, b = vs("a", ["a.example"]), vs("b", ["b.example"])
        self.etcd.put(key_of(a), a)
        self.etcd.put(key_of(b), b)
        src = self.source()
        snk = self.sink()
        self.wait_synced(snk)
        c = vs("c", ["c.example"])
        rc = self.etcd.put(key_of(c), c)
        a2 = vs("a", ["a2.example"])
        ra2 = self.etcd.put(key_of(a2), a2)
        self.etcd.delete(key_of(b))
        want = {"default/a": str(ra2), "default/c": str(rc)}
        self.wait_for(lambda: self.held(snk) == want,
                      lambda: "mirror %s == %s" % (self.held(snk), want),
                      src, snk)
        self.assertEqual(self.mirror()[E.VS]["default/a"]["body"],
                         {"hosts": ["a2.example"]})

    def test_restart_rereads_and_an_incremental_sink_gets_only_the_difference(self):
        self.etcd.start()
        docs = [vs("r%02d" % i, ["h%d" % i]) for i in range(20)]
        for d in docs:
            self.etcd.put(key_of(d), d)
        src = self.source()
        snk = self.sink("--incremental")
        self.wait_synced(snk)
        before = len(snk.responses(E.VS))
        # The member dies (the source keeps serving what it has), comes
        # back on the same ports and data, and is written to: the source
        # sees the writes by its read after reconnecting or by its new
        # watch, and either way sends only what changed.
        self.etcd.kill()
        self.wait_for(lambda: "watch ended" in src.stderr(),
                      "the source to notice etcd is gone", src)
        self.etcd.start()
        changed = vs("r03", ["changed"])
        r = self.etcd.put(key_of(changed), changed)
        self.etcd.delete(key_of(docs[7]))
        # The sink's JSON lines, not its mirror: the mirror is written
        # before the line is printed.
        def removed_seen():
            return any("default/r07" in x["removed"]
                       for x in snk.responses(E.VS)[before:])
        self.wait_for(removed_seen, "the delete at the sink", src, snk)
        self.assertEqual(self.held(snk).get("default/r03"), str(r))
        after = snk.responses(E.VS)[before:]
        sent = [x["name"] for resp in after for x in resp["resources"]]
        removed = [n for resp in after for n in resp["removed"]]
        self.assertEqual(sent, ["default/r03"], after)
        self.assertEqual(removed, ["default/r07"], after)
        self.assertTrue(all(resp["incremental"] for resp in after), after)
        self.assertGreaterEqual(self.metric("mcp_etcd_reloads_total"), 1)

    def test_sink_moves_to_another_replica_and_gets_only_the_difference(self):
        self.etcd.start()
        docs = [vs("r%02d" % i, ["h%d" % i]) for i in range(20)]
        for d in docs:
            self.etcd.put(key_of(d), d)
        b_addr = "127.0.0.1:%d" % E.free_port()
        a = self.source()
        b = self.source(addr=b_addr)
        snk = self.sink("--incremental", connect=self.addr + "," + b_addr)
        self.wait_synced(snk)
        first = snk.events("connected")[0]["peer"]
        self.assertIn(self.addr.split(":")[1], first)
        before = len(snk.responses(E.VS))
        a.kill()
        changed = vs("r05", ["changed"])
        r = self.etcd.put(key_of(changed), changed)
        self.etcd.delete(key_of(docs[9]))

        def removed_seen():
            return any("default/r09" in x["removed"]
                       for x in snk.responses(E.VS)[before:])
        self.wait_for(removed_seen, "the delete, from replica B", b, snk,
                      timeout=30)
        self.assertIn(b_addr.split(":")[1],
                      snk.events("connected")[-1]["peer"])
        after = snk.responses(E.VS)[before:]
        sent = [x["name"] for resp in after for x in resp["resources"]]
        self.assertEqual(sent, ["default/r05"], after)
        self.assertEqual(self.held(snk)["default/r05"], str(r))
        self.assertEqual(len(self.held(snk)), 19)

    def etcd_keys(self, prefix="/mcp/"):
        """{key: (value, mod_revision)} under |prefix|, and the revision."""
        out = json.loads(self.etcd.ctl("get", prefix, "--prefix", "-w",
                                       "json").stdout)
        import base64
        return ({base64.b64decode(kv["key"]).decode():
                 (base64.b64decode(kv["value"]).decode(), kv["mod_revision"])
                 for kv in out.get("kvs", [])}, out["header"]["revision"])

    def test_dir_is_published_into_etcd_and_served_from_it(self):
        self.etcd.start()
        self.etcd.put("/mcp/%s/default/stale" % E.VS, vs("stale", ["s"]))
        self.etcd.put("/other/keep", "not ours")
        a, b, c = vs("a", ["a"]), vs("b", ["b"]), vs("c", ["c"])
        self.put("one.yaml", [a, b])
        self.put("two.yaml", [c])
        d = E.doc("DestinationRule", "d", "default", spec={"host": "d"})
        self.put("three.yaml", [d])
        src = self.source("--dir", self.config)
        # Another replica serves the same from etcd alone.
        other = "127.0.0.1:%d" % E.free_port()
        self.source(addr=other)
        snk = self.sink()
        snk2 = self.sink(connect=other)
        self.wait_synced(snk, snk2)
        self.wait_for(lambda: set(self.held(snk)) == {"default/a",
                                                      "default/b",
                                                      "default/c"},
                      "the directory at the sink", src, snk)
        keys, _ = self.etcd_keys()
        self.assertNotIn("/mcp/%s/default/stale" % E.VS, keys)
        self.assertEqual(self.etcd.ctl("get", "/other/keep",
                                       "--print-value-only").stdout.strip(),
                         "not ours")
        # The value is the document as written in its file ("---" and all).
        self.assertEqual(keys[key_of(c)][0], E.yaml_text([c]))
        self.assertEqual(self.held(snk)["default/c"], str(keys[key_of(c)][1]))
        # One document changes: one key is written, the others keep their
        # revision; a file removed deletes its keys.
        a2 = vs("a", ["a2"])
        self.put("one.yaml", [a2, b])
        self.wait_for(lambda: self.etcd_keys()[0][key_of(a)][0]
                      == E.yaml_text([a2]), "a's new text in etcd", src)
        after, _ = self.etcd_keys()
        self.assertEqual(after[key_of(b)][1], keys[key_of(b)][1])
        # Another collection is not even looked at: its key stays as it was.
        self.assertEqual(after[key_of(d)][1], keys[key_of(d)][1])
        self.assertEqual(after[key_of(c)][1], keys[key_of(c)][1])
        self.remove("two.yaml")
        self.wait_for(lambda: key_of(c) not in self.etcd_keys()[0],
                      "c deleted from etcd", src)
        self.wait_for(lambda: set(self.held(snk2)) == {"default/a",
                                                       "default/b"},
                      "the other replica's sink", snk2)

    def test_publisher_started_before_etcd_publishes_once_it_comes(self):
        self.put("one.yaml", [vs("a", ["a"])])
        src = self.source("--dir", self.config)  # nothing listens yet
        self.wait_for(lambda: "cannot publish into etcd" in src.stderr(),
                      "the publisher's retry message", src)
        self.assertEqual(E.http_get(self.ops, "/readyz")[0], 503)
        self.etcd.start()
        snk = self.sink()
        self.wait_synced(snk, timeout=30)
        self.wait_for(lambda: set(self.held(snk)) == {"default/a"},
                      "the document, published then served", src, snk)
        self.assertEqual(list(self.etcd_keys()[0]), [key_of(vs("a", []))])

    def test_restarted_publisher_rewrites_nothing(self):
        self.etcd.start()
        self.put("one.yaml", [vs("a", ["a"]), vs("b", ["b"])])
        src = self.source("--dir", self.config)
        self.wait_for(lambda: len(self.etcd_keys()[0]) == 2, "published", src)
        kept, rev = self.etcd_keys()
        src.signal(signal.SIGTERM)
        self.assertEqual(src.wait(), 0)
        src = self.source("--dir", self.config)
        snk = self.sink()
        self.wait_synced(snk)
        # A barrier in place of a wait of the clock: a file added now is
        # published after the start's scan, so a rewrite that scan made
        # is in etcd by the time the new document is.
        self.put("two.yaml", [vs("c", ["c"])])
        self.wait_for(lambda: key_of(vs("c", [])) in self.etcd_keys()[0],
                      "the new document published", src)
        keys, _ = self.etcd_keys()
        for k, (_, mod) in kept.items():
            self.assertEqual(keys[k][1], mod, "%s rewritten: %s" % (k, src.stderr()))

    def test_bad_values_are_reported_and_the_rest_served(self):
        self.etcd.start()
        good = vs("good", ["g"])
        self.etcd.put(key_of(good), good)
        self.etcd.put("/mcp/" + E.VS + "/default/broken", "spec: [not yaml")
        moved = vs("elsewhere", ["e"])
        self.etcd.put("/mcp/" + E.VS + "/default/wrong-key", moved)
        two = E.yaml_text([vs("x", ["x"]), vs("y", ["y"])])
        self.etcd.put("/mcp/" + E.VS + "/default/x", two)
        src = self.source()
        snk = self.sink()
        self.wait_synced(snk)
        self.assertEqual(set(self.held(snk)), {"default/good"})
        err = src.stderr()
        self.assertIn("etcd:/mcp/%s/default/broken" % E.VS, err)
        self.assertIn("belongs at key /mcp/%s/default/elsewhere" % E.VS, err)
        self.assertIn("one document, not 2", err)
        self.wait_for(lambda: self.metric("mcp_etcd_bad_documents_total") == 3,
                      "3 bad documents counted", src)
        # A broken edit of a good key keeps its last good content.
        rgood = self.etcd.mod_revision(key_of(good))
        self.etcd.put(key_of(good), "kind: [broken")
        self.wait_for(lambda: self.metric("mcp_etcd_bad_documents_total") == 4,
                      "the broken edit counted", src)
        self.assertEqual(self.held(snk), {"default/good": str(rgood)})

    def test_compaction_while_watching_loses_nothing(self):
        self.etcd.start()
        a = vs("a", ["a"])
        self.etcd.put(key_of(a), a)
        src = self.source()
        snk = self.sink()
        self.wait_synced(snk)
        for i in range(5):
            self.etcd.put(key_of(a), vs("a", ["a%d" % i]))
        rev = self.etcd.mod_revision(key_of(a))
        self.etcd.ctl("compact", str(rev))
        b = vs("b", ["b"])
        rb = self.etcd.put(key_of(b), b)
        self.etcd.delete(key_of(a))
        self.wait_for(lambda: self.held(snk) == {"default/b": str(rb)},
                      "b alone at the sink", src, snk)

    def test_values_over_the_limits_are_reported_and_skipped(self):
        # etcd's own request limit (1.5 MiB) raised, so that a value can be
        # bigger than the loader's 16 MiB.
        self.etcd = Etcd(self.tmp, extra=["--max-request-bytes", "40000000"])
        self.members.append(self.etcd)
        self.etcd.start()
        ok = vs("ok", ["ok"])
        self.etcd.put(key_of(ok), ok)
        many = vs("many", ["m"])
        many["metadata"]["labels"] = {"l%d" % i: "v" for i in range(300)}
        self.etcd.put(key_of(many), many)
        huge = vs("huge", ["h"])
        huge["spec"]["pad"] = "x" * (17 << 20)
        self.etcd.put_http(key_of(huge), huge)
        src = self.source()
        snk = self.sink()
        self.wait_synced(snk)
        self.assertEqual(set(self.held(snk)), {"default/ok"})
        err = src.stderr()
        self.assertIn("etcd:%s" % key_of(many), err)
        self.assertIn("over the limit of 16777216", err)
        self.wait_for(lambda: self.metric("mcp_etcd_bad_documents_total") == 2,
                      "2 bad documents counted", src)

    def test_etcd_down_at_start_is_not_ready_then_served_when_it_comes(self):
        src = self.source()  # nothing listens at the endpoint yet
        self.wait_for(lambda: "cannot read /mcp/ from etcd" in src.stderr(),
                      "a retry message", src)
        self.assertEqual(E.http_get(self.ops, "/readyz")[0], 503)
        snk = self.sink()
        # Nothing served before the load: once the source has the sink's
        # stream (not after a fixed 0.5 s), no push has gone out on it.
        self.wait_for(lambda: (self.metric("mcp_streams_total") or 0) >= 1,
                      "the sink's stream at the source", src, snk)
        self.assertFalse(snk.synced())
        self.assertEqual(snk.responses(E.VS), [])
        self.assertIn(self.metric("mcp_pushes_total"), (None, 0.0))
        self.etcd.start()
        a = vs("a", ["a"])
        ra = self.etcd.put(key_of(a), a)
        self.wait_synced(snk, timeout=30)
        self.wait_for(lambda: E.http_get(self.ops, "/readyz")[0] == 200,
                      "ready", src)
        self.wait_for(lambda: self.held(snk) == {"default/a": str(ra)},
                      "the document", src, snk)

    def test_other_prefix_serves_only_declared_empty_collections(self):
        self.etcd.start()
        a = vs("a", ["a"])
        self.etcd.put(key_of(a), a)
        src = self.source("--etcd-prefix", "/other/", "--collection", E.VS)
        snk = self.sink()
        self.wait_synced(snk)
        self.assertEqual(self.held(snk), {})
        self.assertTrue(src.running())

    def test_usage_errors_for_etcd_flags(self):
        for args, want in (
                (["--etcd-prefix", "/x/"], "need --etcd"),
                (["--etcd", "h:1", "--etcd-cert", "c"], "go together"),
                (["--etcd", "h:1", "--etcd-user", "u"], "go together"),
                (["--etcd", "nonsense"], "bad endpoint list")):
            rc, _, err = E.run([E.exe("mcp-source"), "--listen", self.addr]
                               + args, timeout=30)
            self.assertNotEqual(rc, 0, args)
            self.assertIn(want, err, args)

    def test_password_file_authenticates(self):
        self.etcd.start()
        self.etcd.ctl("user", "add", "root:s3cret")
        self.etcd.ctl("auth", "enable")
        a = vs("a", ["a"])
        self.etcd.ctl("--user", "root:s3cret", "put", key_of(a),
                      data=json.dumps(a))
        pw = os.path.join(self.tmp, "pw")
        with open(pw, "w") as f:
            f.write("s3cret\n")
        self.source("--etcd-user", "root", "--etcd-password-file", pw)
        snk = self.sink()
        self.wait_synced(snk)
        self.assertEqual(set(self.held(snk)), {"default/a"})

    def test_mutual_tls_to_etcd_and_a_missing_client_certificate_refused(self):
        certs = os.path.join(self.tmp, "certs")
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.run(["sh", os.path.join(here, "..", "gen_certs.sh"), certs],
                       check=True, capture_output=True)
        self.etcd = Etcd(self.tmp, certs=certs)
        self.members.append(self.etcd)
        self.etcd.start()
        a = vs("a", ["a"])
        ra = self.etcd.put(key_of(a), a)
        ca = os.path.join(certs, "ca.pem")
        self.source("--etcd-ca", ca,
                    "--etcd-cert", os.path.join(certs, "client.pem"),
                    "--etcd-key", os.path.join(certs, "client.key"))
        snk = self.sink()
        self.wait_synced(snk)
        self.assertEqual(self.held(snk), {"default/a": str(ra)})
        # The CA alone: etcd wants a client certificate, so no read, no
        # readiness, retries.
        ops = self.ops
        other = E.free_port()
        self.addr, kept = "127.0.0.1:%d" % other, self.addr
        src2 = self.source("--etcd-ca", ca)
        self.wait_for(lambda: "cannot read /mcp/ from etcd" in src2.stderr(),
                      "the refusal reported", src2)
        self.assertEqual(E.http_get(self.ops, "/readyz")[0], 503)
        self.addr, self.ops = kept, ops


@unittest.skipUnless(ETCD and ETCDCTL, "etcd-server and etcd-client needed")
class EtcdCluster(E.Base):
    """Three members, three replicas, 100 sinks (5 mcp-sink processes that
    mirror, and 95 streams of mcp-load-sink), a stream of writes, and kill
    -9 of one member and then of one replica in the middle of it."""

    WAIT = 60.0
    SINKS, LOAD_STREAMS, WRITES, KEYS = 5, 95, 120, 30

    def setUp(self):
        super().setUp()
        self.members = [Etcd(self.tmp, name="m%d" % i) for i in range(3)]
        cluster = ",".join("%s=http://127.0.0.1:%d" % (m.name, m.peer_port)
                           for m in self.members)
        for m in self.members:
            m.cluster = cluster
            m.start(wait=False)  # a member waits for a quorum to be healthy
        for m in self.members:
            deadline = time.monotonic() + 30
            while m.ctl("endpoint", "health", check=False).returncode != 0:
                self.assertLess(time.monotonic(), deadline, "etcd cluster")
                time.sleep(0.1)
        self.endpoints = [m.endpoint for m in self.members]

    def tearDown(self):
        super().tearDown()
        for m in self.members:
            m.kill()

    def ctl(self, *args, data=None):
        """etcdctl on whichever member is up. After a member is killed the
        others may be electing a leader ("etcdserver: no leader", "leader
        changed"): asked again until one answers, self.WAIT at most (a failure
        guard; a put or del done twice leaves the same keys, and the test
        compares against etcd's own state read afterwards)."""
        deadline = time.monotonic() + self.WAIT
        why = ""
        while True:
            for m in self.members:
                if m.p and m.p.poll() is None:
                    r = m.ctl(*args, data=data, check=False)
                    if r.returncode == 0:
                        return r
                    why = r.stderr.strip()
            if time.monotonic() > deadline:
                self.fail("no etcd member answers: etcdctl %s: %s"
                          % (" ".join(args), why))
            time.sleep(0.1)

    def etcd_state(self):
        out = json.loads(self.ctl("get", "/mcp/" + E.VS + "/", "--prefix",
                                  "-w", "json").stdout)
        import base64
        return {base64.b64decode(kv["key"]).decode().split("/", 6)[-1]:
                str(kv["mod_revision"]) for kv in out.get("kvs", [])}

    def test_member_and_replica_killed_during_writes_sinks_end_exact_and_resend_nothing(self):
        for i in range(self.KEYS):
            d = vs("k%02d" % i, ["v0"])
            self.ctl("put", key_of(d), data=json.dumps(d))
        replicas, addrs = [], []
        for i in range(3):
            addr = "127.0.0.1:%d" % E.free_port()
            # Each replica starts on a different member.
            eps = self.endpoints[i:] + self.endpoints[:i]
            replicas.append(self.start("mcp-source", [
                "--etcd", ",".join(eps), "--listen", addr, "--debounce", "20"]))
            addrs.append(addr)
        for r in replicas:
            listening(self, r)
        sinks = []
        for i in range(self.SINKS):
            # Every sink starts on replica A, so killing A moves them all.
            sinks.append(self.start("mcp-sink", [
                "--connect", ",".join(addrs), "--incremental", "--json",
                "--collection", E.VS,
                "--out", os.path.join(self.tmp, "mirror%d" % i)]))
        load = self.start("mcp-load-sink", [
            "--streams", str(self.LOAD_STREAMS), "--collection", E.VS,
            "--connect", ",".join(addrs[1:] + addrs[:1]), "--incremental"])
        self.wait_synced(*sinks)
        for i in range(self.WRITES):
            k = i % self.KEYS
            if i % 7 == 3:
                self.ctl("del", "/mcp/%s/default/k%02d" % (E.VS, k))
            else:
                d = vs("k%02d" % k, ["v%d" % i])
                self.ctl("put", key_of(d), data=json.dumps(d))
            if i == self.WRITES // 3:
                self.members[0].kill()  # the member replica A reads from
            if i == 2 * self.WRITES // 3:
                replicas[0].kill()  # the replica every mcp-sink uses
        want = self.etcd_state()

        def mirror_of(i):
            m = E.read_mirror(os.path.join(self.tmp, "mirror%d" % i), (E.VS,))
            return {n: r["version"] for n, r in m.get(E.VS, {}).items()
                    if isinstance(r, dict)}
        for i, snk in enumerate(sinks):
            self.wait_for(lambda: mirror_of(i) == want,
                          lambda: "sink %d: %s == %s" % (i, mirror_of(i), want),
                          snk)
        # The load streams: each one's last ACK holds as many as etcd.
        def load_done():
            last = {}
            for e in load.events("ack"):
                last[e["s"]] = e["n"]
            return (len(last) == self.LOAD_STREAMS and
                    all(n == len(want) for n in last.values()))
        self.wait_for(load_done, "every load stream at %d resources" %
                      len(want), load)
        # Nothing twice: no response carries a resource at the version the
        # sink already held, across the move to another replica too. Read
        # from the JSON lines (printed after the mirror is written: wait for
        # the last one).
        def replay(snk):
            held, moved, dup = {}, [], None  # moved: responses after it
            for e in snk.events():
                if e.get("event") == "connected" and held:
                    moved = [e]
                if e.get("event") != "response" or e["verdict"] != "ack":
                    continue
                if moved:
                    moved.append(e)
                for r in e["resources"]:
                    if held.get(r["name"]) == r["version"] and not dup:
                        dup = r
                    held[r["name"]] = r["version"]
                for n in e["removed"]:
                    held.pop(n, None)
            return held, moved, dup
        for i, snk in enumerate(sinks):
            self.wait_for(lambda: replay(snk)[0] == want,
                          "sink %d's JSON lines at etcd's state" % i, snk)
            held, moved, dup = replay(snk)
            self.assertIsNone(dup, "sink %d got a resource again" % i)
            self.assertTrue(moved, "sink %d never moved" % i)
            # The move resumed: incremental answers only (no full state),
            # each resource in them new to the sink (checked above).
            self.assertTrue(all(e["incremental"] for e in moved[1:]),
                            moved)
    def test_lagging_replica_waits_instead_of_taking_a_sink_back_in_time(self):
        for i in range(5):
            d = vs("k%02d" % i, ["v0"])
            self.ctl("put", key_of(d), data=json.dumps(d))
        a_addr = "127.0.0.1:%d" % E.free_port()
        b_addr = "127.0.0.1:%d" % E.free_port()
        b_ops = E.free_port()
        a = self.start("mcp-source", ["--etcd", self.endpoints[0],
                                      "--listen", a_addr, "--debounce", "0"])
        # B reads from the third member only, which is about to be frozen.
        b = self.start("mcp-source", ["--etcd", self.endpoints[2],
                                      "--listen", b_addr, "--debounce", "0",
                                      "--debug-listen",
                                      "127.0.0.1:%d" % b_ops])
        listening(self, a)
        listening(self, b)
        snk = self.start("mcp-sink", ["--connect", a_addr + "," + b_addr,
                                      "--incremental", "--json",
                                      "--collection", E.VS])
        self.wait_synced(snk)
        self.members[2].p.send_signal(signal.SIGSTOP)  # B stops learning
        try:
            d = vs("k01", ["v1"])
            self.ctl("put", key_of(d), data=json.dumps(d))
            new = self.etcd_state()["default/k01"]

            def holds_new():
                return any(r["name"] == "default/k01" and r["version"] == new
                           for e in snk.responses(E.VS)
                           for r in e["resources"])
            self.wait_for(holds_new, "k01 at %s from replica A" % new, snk)
            before = len(snk.responses(E.VS))
            a.kill()
            self.wait_for(lambda: b_addr in "".join(
                e.get("peer", "") for e in snk.events("connected")) or
                b_addr.split(":")[1] in snk.stderr(),
                "the sink at replica B", snk)
            # B has the sink's request (its /debug/syncz knows the
            # collection): it decided there and then, and pushed nothing.
            def b_request():
                st, _, body = E.http_get(b_ops, "/debug/syncz")
                if st != 200:
                    return None
                return [c for s in json.loads(body)["streams"]
                        for c in s["collections"]
                        if c["collection"] == E.VS and c["known"]]
            held = self.wait_for(b_request, "B has the sink's request", b)
            self.assertEqual([(c["pushes"], c["pending_version"])
                              for c in held], [(0, "")], held)
            self.assertEqual(snk.responses(E.VS)[before:], [],
                             "a lagging replica answered")
        finally:
            self.members[2].p.send_signal(signal.SIGCONT)
        # Caught up: B answers, and the sink never went back. (A put made
        # while the frozen member led may commit twice, the retry and the
        # original: versions only have to grow.)
        self.wait_for(lambda: len(snk.responses(E.VS)) > before,
                      "B's answer once caught up", snk, b)
        seen = [int(r["version"]) for e in snk.responses(E.VS)
                for r in e["resources"] if r["name"] == "default/k01"]
        self.assertEqual(seen, sorted(seen), "k01 went back in time")
        self.assertGreaterEqual(seen[-1], int(new))

if __name__ == "__main__":
    unittest.main(argv=E.parse_args(__doc__))
