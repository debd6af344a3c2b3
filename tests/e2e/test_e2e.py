#!/usr/bin/env python3
"""End-to-end tests of mcp-source and mcp-sink.

The real programs, over 127.0.0.1, on real files in a temporary directory.
Every scenario runs in both directions of the connection:

  SinkDialsSource*   mcp-source --listen  +  mcp-sink --connect
                     (ResourceSource server, ResourceSource client)
  SourceDialsSink*   mcp-sink --listen    +  mcp-source --connect
                     (ResourceSink server, ResourceSink client)

Usage: test_e2e.py --build-dir BUILD [--transport grpc|h2c] [unittest args]

The same suite serves every transport: --transport is passed to both
programs. The Cross* classes run every scenario again with mcp-sink on the
other transport (grpc <-> h2c; skipped when it is not built in), so each
transport's client talks to the other's server in both roles. Standard
library only; the processes, the waits and the YAML and mirror helpers are
e2e_common.py's. Every wait is bounded (a condition polled until a
deadline); children are killed in tearDown.
"""

import hashlib
import json
import os
import shutil
import signal
import socket
import unittest

import e2e_common as common
from e2e_common import (CM, DR, GW, STRUCT, VS, Proc, cm, doc,
                        expected_state, read_mirror, run, strip_versions,
                        transport_built, write_atomic, yaml_text)


# --------------------------------------------------------------------------
# YAML in, expected mirror out
# --------------------------------------------------------------------------

def vs(name, host, ns="default", **kw):
    return doc("VirtualService", name, ns, {
        "hosts": [host],
        "http": [{"route": [{"destination": {"host": host, "port": {"number": 9080}},
                             "weight": 100}]}],
    }, **kw)


def dr(name, host, ns="default", **kw):
    return doc("DestinationRule", name, ns, {
        "host": host,
        "trafficPolicy": {"tls": {"mode": "ISTIO_MUTUAL"}},
        "subsets": [{"name": "v1", "labels": {"version": "v1"}}],
    }, **kw)


# --------------------------------------------------------------------------
# Fixture
# --------------------------------------------------------------------------

class Base(common.Base):
    MODE = "sink-dials"  # or "source-dials"
    YAML_INDENT = 2  # this suite's YAML: flow documents over several lines

    def setUp(self):
        super().setUp()
        self.mirror = os.path.join(self.tmp, "mirror")

    # -- programs --

    def start_source(self, *args, debounce=None, dir=True):
        role = ["--connect" if self.MODE == "source-dials" else "--listen",
                self.addr]
        extra = ["--dir", self.config] if dir else []
        if debounce is not None:
            extra += ["--debounce", str(debounce)]
        p = self.start("mcp-source", extra + role + list(args))
        if self.MODE == "sink-dials":
            self.wait_for(lambda: "serving ResourceSource on" in p.stderr(),
                          "the source to listen", p)
        return p

    def start_sink(self, collections, *args, out=True, json_lines=True):
        role = ["--listen" if self.MODE == "source-dials" else "--connect",
                self.addr]
        extra = []
        for c in collections:
            extra += ["--collection", c]
        if out:
            extra += ["--out", self.mirror]
        if json_lines:
            extra += ["--json"]
        p = self.start("mcp-sink", extra + role + list(args))
        if self.MODE == "source-dials":
            self.wait_for(lambda: "serving ResourceSink on" in p.stderr(),
                          "the sink to listen", p)
        return p

    def start_pair(self, collections, sink_args=(), source_args=(),
                   debounce=None):
        """Starts both (the listening side first) and waits for the sync."""
        if self.MODE == "sink-dials":
            src = self.start_source(*source_args, debounce=debounce)
            snk = self.start_sink(collections, *sink_args)
        else:
            snk = self.start_sink(collections, *sink_args)
            src = self.start_source(*source_args, debounce=debounce)
        self.wait_synced(snk)
        return src, snk

    # -- waiting --

    def logs(self):
        return "\n".join("---- %s %s (status %s)\nstdout:\n%s\nstderr:\n%s" % (
            p.name, " ".join(p.argv[1:]), p.p.poll(),
            "\n".join(p.stdout_lines()[-30:]), p.stderr()[-6000:])
            for p in self.procs)

    def expected(self):
        """What the mirror is to hold: the YAML's resources by collection."""
        return expected_state(self.files)

    def wait_mirror(self, collections, what="the mirror to match the YAML"):
        """Waits until the mirror holds exactly the YAML's resources."""
        want = {c: r for c, r in self.expected().items()
                if c in collections and r}
        self.wait_for(lambda: strip_versions(
            read_mirror(self.mirror, collections)) == want, what)
        return read_mirror(self.mirror, collections)

    def wait_response(self, snk, pred, what, since=0):
        """The first response after the |since|-th that satisfies |pred|."""
        def find():
            for e in snk.responses()[since:]:
                if pred(e):
                    return e
            return None
        return self.wait_for(find, what, snk)

    # -- files --

    def rename(self, old, new):
        os.makedirs(os.path.dirname(os.path.join(self.config, new)),
                    exist_ok=True)
        os.rename(os.path.join(self.config, old),
                  os.path.join(self.config, new))
        docs = self.files.pop(old)
        if new.endswith((".yaml", ".yml")):
            self.files[new] = docs

    def standard_files(self):
        self.put("bookinfo/routing.yaml", [
            vs("reviews", "reviews", "bookinfo",
               labels={"app": "reviews"}, annotations={"team": "books"}),
            vs("ratings", "ratings", "bookinfo", resource_version="v42",
               created="2024-01-02T03:04:05Z"),
        ])
        self.put("bookinfo/rules.yaml", [dr("reviews", "reviews", "bookinfo")])
        self.put("mesh.yaml", [cm("istio", "istio-system",
                                  {"mesh": "enableTracing: true\n"})])

    def stop_both(self):
        for p in self.procs:
            p.signal(signal.SIGTERM)
        for p in self.procs:
            rc = p.wait()
            self.assertEqual(rc, 0, "%s: exit status after SIGTERM\n%s"
                             % (p.name, self.logs()))


# --------------------------------------------------------------------------
# Scenarios, run in both directions
# --------------------------------------------------------------------------

class Scenarios:
    """Mixed into a Base subclass per direction."""

    COLLS = [VS, DR, CM]

    def test_initial_sync(self):
        self.standard_files()
        # A hand-written YAML file: block style, comments, several documents.
        with open(os.path.join(self.config, "gateway.yml"), "w") as f:
            f.write("# the ingress\n"
                    "apiVersion: networking.istio.io/v1alpha3\n"
                    "kind: Gateway\n"
                    "metadata:\n"
                    "  name: ingress   # trailing comment\n"
                    "  namespace: istio-system\n"
                    "spec:\n"
                    "  selector:\n"
                    "    istio: ingressgateway\n"
                    "  servers:\n"
                    "  - port: {number: 80, name: http, protocol: HTTP}\n"
                    "    hosts: ['*']\n"
                    "    tls: null\n"
                    "    enabled: true\n"
                    "    ratio: 0.5\n"
                    "---\n")
        self.files["gateway.yml"] = [doc("Gateway", "ingress", "istio-system", {
            "selector": {"istio": "ingressgateway"},
            "servers": [{"port": {"number": 80, "name": "http", "protocol": "HTTP"},
                         "hosts": ["*"], "tls": None, "enabled": True,
                         "ratio": 0.5}]})]
        colls = self.COLLS + [GW]
        src, snk = self.start_pair(colls)
        mirror = self.wait_mirror(colls)
        # resourceVersion and creationTimestamp are carried.
        r = mirror[VS]["bookinfo/ratings"]
        self.assertEqual(r["version"], "v42")
        self.assertEqual(r["create_time"], "2024-01-02T03:04:05Z")
        # One ACKed response per collection, listing what the mirror holds.
        for c in colls:
            rs = snk.responses(c)
            self.assertEqual(len(rs), 1, rs)
            e = rs[0]
            self.assertEqual(e["verdict"], "ack")
            self.assertNotIn("error", e)
            self.assertFalse(e["incremental"])
            self.assertTrue(e["nonce"])
            self.assertTrue(e["system_version_info"])
            self.assertEqual(e["removed"], [])
            self.assertEqual(e["total"], len(mirror[c]))
            self.assertEqual({x["name"]: x["version"] for x in e["resources"]},
                             {n: m["version"] for n, m in mirror[c].items()})
            for x in e["resources"]:
                self.assertEqual(x["type_url"], STRUCT)
        self.assertNotIn("error", src.stderr())
        self.stop_both()

    def test_live_edit(self):
        self.standard_files()
        src, snk = self.start_pair(self.COLLS)
        before = self.wait_mirror(self.COLLS)
        n = len(snk.responses())
        d = vs("reviews", "reviews", "bookinfo", labels={"app": "reviews"},
               annotations={"team": "books"})
        d["spec"]["http"][0]["route"][0]["weight"] = 50
        d["spec"]["http"][0]["timeout"] = "3s"
        self.put("bookinfo/routing.yaml",
                 [d, self.files["bookinfo/routing.yaml"][1]], atomic=False)
        e = self.wait_response(
            snk, lambda e: e["collection"] == VS and
            any(x["name"] == "bookinfo/reviews" for x in e["resources"]),
            "the edit to be pushed", since=n)
        self.assertEqual(e["verdict"], "ack")
        after = self.wait_mirror(self.COLLS, "the mirror to show the edit")
        v0 = before[VS]["bookinfo/reviews"]["version"]
        v1 = after[VS]["bookinfo/reviews"]["version"]
        self.assertNotEqual(v0, v1)
        self.assertIn({"name": "bookinfo/reviews", "version": v1,
                       "type_url": STRUCT}, e["resources"])
        # Untouched collections got nothing new.
        self.assertEqual(len(snk.responses(DR)), 1)
        self.stop_both()

    def test_create_file(self):
        self.standard_files()
        src, snk = self.start_pair(self.COLLS)
        self.wait_mirror(self.COLLS)
        self.put("new/more.yaml", [vs("details", "details", "bookinfo"),
                                   dr("details", "details", "bookinfo")])
        self.wait_mirror(self.COLLS, "the new file's resources")
        # The JSON line follows the files (apply, then the ACK event).
        e = self.wait_response(snk, lambda e: e["collection"] == VS and
                               e["total"] == 3, "the VS response")
        self.assertEqual(e["verdict"], "ack")
        self.stop_both()

    def test_delete_file(self):
        self.standard_files()
        self.put("extra.yaml", [vs("gone", "gone", "bookinfo"),
                                dr("gone", "gone", "bookinfo")])
        src, snk = self.start_pair(self.COLLS)
        self.wait_mirror(self.COLLS)
        self.assertTrue(os.path.exists(os.path.join(
            self.mirror, VS, "bookinfo", "gone.json")))
        self.remove("extra.yaml")
        self.wait_mirror(self.COLLS, "the deleted file's resources to go")
        e = self.wait_response(snk, lambda e: e["collection"] == VS and
                               "bookinfo/gone" in e["dropped"],
                               "a response dropping bookinfo/gone")
        self.assertEqual(e["verdict"], "ack")
        # Full state: the message removed nothing; the sink computed it.
        self.assertEqual(e["removed"], [], e)
        self.assertEqual(e["total"], 2)
        self.assertFalse(os.path.exists(os.path.join(
            self.mirror, VS, "bookinfo", "gone.json")))
        self.stop_both()

    def test_rename_file(self):
        self.standard_files()
        src, snk = self.start_pair(self.COLLS,
                                   source_args=["--log-level", "debug"])
        self.wait_mirror(self.COLLS)
        # Into a directory created after the start: same content, watched.
        self.rename("bookinfo/rules.yaml", "later/sub/rules.yaml")
        sub = os.path.join(self.config, "later", "sub")
        self.wait_for(lambda: "watching " + sub in src.stderr(),
                      "the new directory to be watched", src)
        n = len(snk.responses())
        d = dr("reviews", "reviews", "bookinfo")
        d["spec"]["host"] = "reviews.bookinfo.svc.cluster.local"
        self.put("later/sub/rules.yaml", [d], atomic=False)
        # Seen by the new directory's own watch (not only the rescan).
        self.wait_for(lambda: "watch %s: rules.yaml changed" % sub
                      in src.stderr(), "an event from the new directory", src)
        self.wait_response(snk, lambda e: e["collection"] == DR and
                           e["resources"], "the renamed file's edit", since=n)
        self.wait_mirror(self.COLLS, "the mirror after the rename")
        # Renamed to a name the loader does not read: its resources go.
        self.rename("later/sub/rules.yaml", "later/sub/rules.yaml.bak")
        self.wait_mirror(self.COLLS, "the resources of the renamed-away file "
                         "to be removed")
        self.wait_response(snk, lambda e: e["collection"] == DR and
                           e["total"] == 0 and e["verdict"] == "ack",
                           "the DR response emptying the collection")
        self.stop_both()

    # -- writers (issue 24, point 15) --

    def metric(self, dport, name, label=""):
        """The sum of metric |name|'s series (those with |label|, such as
        'event="closed"', when given)."""
        status, _, body = common.http_get(dport, "/metrics")
        self.assertEqual(status, 200)
        total = 0.0
        for line in body.splitlines():
            if ((line.startswith(name + " ") or line.startswith(name + "{"))
                    and label in line):
                total += float(line.rsplit(" ", 1)[1])
        return total

    HALF_HOST = "reviews.bookinfo.svc.cluster.local"

    def half_doc(self, host):
        """A VirtualService in block style, so that a cut inside the host
        still parses (as the issue's truncated file did)."""
        d = doc("VirtualService", "half", "bookinfo", {"hosts": [host]})
        text = ("apiVersion: networking.istio.io/v1alpha3\n"
                "kind: VirtualService\nmetadata:\n  name: half\n"
                "  namespace: bookinfo\nspec:\n  hosts:\n  - %s\n" % host)
        return d, text

    def start_watched(self, settle_ms):
        """The standard files served with --write-settle |settle_ms| and
        metrics; (source, sink, metrics port) once the mirror has them."""
        self.standard_files()
        dport = common.free_port()
        src, snk = self.start_pair(self.COLLS, source_args=[
            "--debug-listen", "127.0.0.1:%d" % dport,
            "--write-settle", settle_ms])
        self.wait_mirror(self.COLLS)
        return src, snk, dport

    def test_half_written_file_is_never_pushed(self):
        """A writer rewrites a file in place, writes half, pauses with it
        open, then writes the rest: only the whole file is pushed, at its
        close (not after a settle time: --write-settle is made long)."""
        d, _ = self.half_doc("old.example")
        self.put("bookinfo/half.yaml", [d])
        # A YAML name that is a link keeps the walks at one a second.
        linked = [dr("linked", "linked", "bookinfo")]
        outside = os.path.join(self.tmp, "outside.yaml")
        write_atomic(outside, yaml_text(linked))
        os.symlink(outside, os.path.join(self.config, "bookinfo", "link.yaml"))
        self.files["bookinfo/link.yaml"] = linked
        src, snk, dport = self.start_watched("3600000")
        self.assertIn("every 1000 ms: a YAML name is a symbolic link",
                      src.stderr())
        d, text = self.half_doc(self.HALF_HOST)
        cut = text.index(self.HALF_HOST) + len("reviews.book")
        path = os.path.join(self.config, "bookinfo", "half.yaml")
        n = len(snk.responses())
        with open(path, "w") as f:
            f.write(text[:cut])
            f.flush()
            self.wait_for(lambda: self.metric(
                dport, "mcp_config_files_being_written") == 1,
                "the source to see the file being written", src)
            # Two walks of the directory since (one a second): neither
            # reads it.
            for i in range(2):
                t = self.metric(
                    dport, "mcp_config_last_load_success_timestamp_seconds")
                self.wait_for(lambda: self.metric(
                    dport, "mcp_config_last_load_success_timestamp_seconds")
                    > t, "walk %d of the directory" % (i + 1), src)
            self.assertEqual([e for e in snk.responses()[n:]
                              if e["collection"] == VS], [],
                             "a push of the half-written file")
            f.write(text[cut:])
        self.files["bookinfo/half.yaml"] = [d]
        e = self.wait_response(snk, lambda e: e["collection"] == VS and
                               "bookinfo/half" in [r["name"] for r in
                                                   e["resources"]] and
                               e["verdict"] == "ack",
                               "the push of the closed file", since=n)
        self.assertEqual(len([x for x in snk.responses()[n:]
                              if x["collection"] == VS]), 1, e)
        self.wait_mirror(self.COLLS, "the whole file's content")
        self.assertEqual(self.metric(dport, "mcp_config_files_being_written"),
                         0)
        self.assertGreaterEqual(self.metric(
            dport, "mcp_config_file_events_total", 'event="closed"'), 1)

    def test_file_modified_without_close_is_read_once_settled(self):
        """A writer that keeps the file open (no close comes): read once
        its size and mtime have not changed for --write-settle."""
        src, snk, dport = self.start_watched("300")
        d, text = self.half_doc(self.HALF_HOST)
        with open(os.path.join(self.config, "bookinfo", "half.yaml"),
                  "w") as f:
            f.write(text)
            f.flush()
            self.files["bookinfo/half.yaml"] = [d]
            self.wait_mirror(self.COLLS, "the settled file's content")
            self.assertEqual(self.metric(
                dport, "mcp_config_file_events_total", 'event="settled"'), 1)

    def test_incremental_updates(self):
        self.standard_files()
        src, snk = self.start_pair(self.COLLS, sink_args=["--incremental"])
        self.wait_mirror(self.COLLS)
        # The first answer is full state: the source knew nothing held.
        self.assertFalse(snk.responses(VS)[0]["incremental"])
        n = len(snk.responses())
        d = vs("ratings", "ratings", "bookinfo", resource_version="v43",
               created="2024-01-02T03:04:05Z")
        self.put("bookinfo/routing.yaml",
                 [self.files["bookinfo/routing.yaml"][0], d])
        e = self.wait_response(snk, lambda e: e["collection"] == VS,
                               "the incremental push", since=n)
        self.assertTrue(e["incremental"], e)
        self.assertEqual(e["resources"], [{"name": "bookinfo/ratings",
                                           "version": "v43",
                                           "type_url": STRUCT}])
        self.assertEqual(e["removed"], [])
        self.assertEqual(e["total"], 2)
        n = len(snk.responses())
        self.put("bookinfo/routing.yaml", [d])
        e = self.wait_response(snk, lambda e: e["collection"] == VS,
                               "the incremental removal", since=n)
        self.assertTrue(e["incremental"], e)
        self.assertEqual(e["resources"], [])
        self.assertEqual(e["removed"], ["bookinfo/reviews"])
        self.assertEqual(e["total"], 1)
        self.wait_mirror(self.COLLS)
        self.stop_both()

    def test_configmap_mount_swap(self):
        """A Kubernetes ConfigMap volume: files are links through "..data",
        which is swapped atomically by a rename (hidden names are not
        loaded themselves)."""
        def version_dir(name, docs):
            d = os.path.join(self.config, name)
            os.makedirs(d)
            with open(os.path.join(d, "routing.yaml"), "w") as f:
                f.write(yaml_text(docs))
        first = [vs("reviews", "reviews", "bookinfo")]
        version_dir("..2024_01", first)
        os.symlink("..2024_01", os.path.join(self.config, "..data"))
        os.symlink("..data/routing.yaml",
                   os.path.join(self.config, "routing.yaml"))
        self.files["routing.yaml"] = first
        src, snk = self.start_pair([VS])
        self.wait_mirror([VS])
        second = [vs("reviews", "reviews-v2", "bookinfo"),
                  vs("extra", "extra", "bookinfo")]
        version_dir("..2024_02", second)
        os.symlink("..2024_02", os.path.join(self.config, "..data_tmp"))
        os.rename(os.path.join(self.config, "..data_tmp"),
                  os.path.join(self.config, "..data"))
        shutil.rmtree(os.path.join(self.config, "..2024_01"))
        self.files["routing.yaml"] = second
        self.wait_mirror([VS], "the swapped content")
        self.stop_both()

    def test_bad_yaml(self):
        self.standard_files()
        src, snk = self.start_pair(self.COLLS)
        before = self.wait_mirror(self.COLLS)
        good_files = dict(self.files)
        # Break a file: its resources keep their last good content.
        # Atomically: a scan between a truncation and the write would load
        # an empty (valid) file and drop the resources legitimately.
        path = os.path.join(self.config, "bookinfo", "rules.yaml")
        write_atomic(path, "apiVersion: networking.istio.io/v1alpha3\n"
                     "kind: DestinationRule\n"
                     "metadata: {name: reviews, namespace: bookinfo\n"
                     "spec: [unclosed\n")
        self.wait_for(lambda: path in src.stderr(),
                      "the broken file to be reported with its path", src)
        # A document without metadata.name is reported; its file's other
        # documents load.
        self.put("partial.yaml", [
            vs("fine", "fine", "bookinfo"),
            {"apiVersion": "networking.istio.io/v1alpha3",
             "kind": "VirtualService", "metadata": {"namespace": "x"},
             "spec": {}},
        ])
        self.files["partial.yaml"] = [vs("fine", "fine", "bookinfo")]
        self.wait_for(lambda: os.path.join(self.config, "partial.yaml")
                      in src.stderr(), "the nameless document's report", src)
        self.wait_mirror(self.COLLS, "everything else to be served")
        after = read_mirror(self.mirror, self.COLLS)
        self.assertEqual(after[DR], before[DR])  # the old content, kept
        self.assertTrue(src.running())
        # Fixing the file serves its new content.
        n = len(snk.responses())
        d = dr("reviews", "reviews", "bookinfo")
        d["spec"]["host"] = "fixed"
        self.put("bookinfo/rules.yaml", [d])
        self.wait_response(snk, lambda e: e["collection"] == DR and
                           e["verdict"] == "ack", "the fixed file", since=n)
        self.wait_mirror(self.COLLS, "the fixed content")
        del good_files
        self.stop_both()

    def test_declared_empty_collection(self):
        self.standard_files()
        empty = "k8s/core/v1/secrets"
        colls = [VS, empty]
        if self.MODE == "sink-dials":
            self.start_source("--collection", empty)
            snk = self.start_sink(colls, "--exit-after-sync")
        else:
            snk = self.start_sink(colls, "--exit-after-sync")
            self.start_source("--collection", empty)
        self.assertEqual(snk.wait(), 0, self.logs())
        rs = snk.responses(empty)
        self.assertEqual(len(rs), 1, rs)
        self.assertEqual(rs[0]["resources"], [])
        self.assertEqual(rs[0]["total"], 0)
        self.assertEqual(rs[0]["verdict"], "ack")
        self.assertTrue(any(e.get("event") == "synced" for e in snk.events()))
        self.assertTrue(os.path.isdir(os.path.join(self.mirror, empty)))
        self.assertEqual(os.listdir(os.path.join(self.mirror, empty)), [])

    def test_exit_after_sync_exits_when_the_stream_ends(self):
        """The sync event finishes the stream at once and its end is the
        exit, not a deadline or a poll. Dialing: the stream is half-closed
        and the source ends it (OK). Listening (issue 21): the transport
        ends it with OK once the answers are sent."""
        self.standard_files()
        args = ("--exit-after-sync", "--log-level", "debug")
        if self.MODE == "sink-dials":
            self.start_source()
            snk = self.start_sink([VS], *args, out=False)
            said = "half-closed the stream"
        else:
            snk = self.start_sink([VS], *args, out=False)
            self.start_source()
            said = "finished the stream: it ends once the answers are sent"
        self.assertEqual(snk.wait(), 0, self.logs())
        err = snk.stderr()
        self.assertIn(said, err)
        self.assertIn("exiting after sync", err)
        self.assertNotIn("did not end in time", err)
        self.assertLess(err.index(said), err.index("exiting after sync"))
        if self.MODE != "sink-dials":
            # The ended stream was the sink's own OK, not a cancel.
            self.assertRegex(err, r"closed: status 0\b", err)

    def test_no_dir_declared_only(self):
        colls = ["a/b", "c"]
        if self.MODE == "sink-dials":
            self.start_source("--collection", "a/b", "--collection", "c",
                              dir=False)
            snk = self.start_sink(colls, "--exit-after-sync", out=False)
        else:
            snk = self.start_sink(colls, "--exit-after-sync", out=False)
            self.start_source("--collection", "a/b", "--collection", "c",
                              dir=False)
        self.assertEqual(snk.wait(), 0, self.logs())
        self.assertEqual(sorted(e["collection"] for e in snk.responses()),
                         ["a/b", "c"])

    def test_unsafe_name_nacked(self):
        self._unsafe_name_nacked(incremental=False)

    def test_unsafe_name_nacked_incremental(self):
        """The next incremental push lists the rejected name as removed
        (it came and went since the last ACK): not held, so no file, and
        the mirror must not NACK it again (that would reject every later
        push too)."""
        self._unsafe_name_nacked(incremental=True)

    def _unsafe_name_nacked(self, incremental):
        self.standard_files()
        # x..y is no Kubernetes name: only a permissive source serves it
        # (the sink's lenient default takes it; the mirror refuses it).
        src, snk = self.start_pair(
            self.COLLS, debounce=0,
            sink_args=["--incremental"] if incremental else [],
            source_args=["--names", "permissive"])
        before = self.wait_mirror(self.COLLS)
        n = len(snk.responses())
        self.put("evil.yaml", [vs("x..y", "evil", "bookinfo")])
        e = self.wait_response(snk, lambda e: e["collection"] == VS,
                               "the unsafe push", since=n)
        self.assertEqual(e["verdict"], "nack", e)
        self.assertEqual(e["error"]["code"], 3)
        self.assertIn("x..y", e["error"]["message"])
        self.assertEqual(e["total"], 2)  # nothing changed
        self.assertIn("bookinfo/x..y", [x["name"] for x in e["resources"]])
        self.wait_for(lambda: "rejected" in src.stderr(),
                      "the source to log the NACK", src)
        self.assertEqual(read_mirror(self.mirror, self.COLLS), before)
        # The next change is pushed and accepted.
        n = len(snk.responses())
        self.remove("evil.yaml")
        self.put("ok.yaml", [vs("ok", "ok", "bookinfo")])
        e = self.wait_response(snk, lambda e: e["collection"] == VS,
                               "the next push", since=n)
        self.assertEqual(e["verdict"], "ack", e)
        if incremental:
            self.assertTrue(e["incremental"], e)
            self.assertEqual(e["removed"], ["bookinfo/x..y"])
        self.wait_mirror(self.COLLS)
        # And the one after.
        n = len(snk.responses())
        self.put("ok2.yaml", [vs("ok2", "ok2", "bookinfo")])
        e = self.wait_response(snk, lambda e: e["collection"] == VS,
                               "the push after", since=n)
        self.assertEqual(e["verdict"], "ack", e)
        self.wait_mirror(self.COLLS)
        self.stop_both()

    def test_long_name_mirrored_and_oversized_document_not_served(self):
        """Issue 12, point 4: a 253-byte Kubernetes name is mirrored under
        a mapped file name instead of being NACKed, and a document with
        more labels than the sink takes is skipped by the source (reported
        with PATH:LINE), so the collection's pushes keep being ACKed."""
        self.standard_files()
        src, snk = self.start_pair(self.COLLS, debounce=0)
        self.wait_mirror(self.COLLS)
        n = len(snk.responses())
        long = "a" * 253
        many = {"l%d" % i: "v" for i in range(257)}
        self.put("long.yaml", [vs(long, "long", "bookinfo"),
                               vs("many", "many", "bookinfo", labels=many)])
        e = self.wait_response(
            snk, lambda e: e["collection"] == VS and "bookinfo/" + long in
            [r["name"] for r in e["resources"]], "the long name's push",
            since=n)
        self.assertEqual(e["verdict"], "ack", e)
        self.assertNotIn("bookinfo/many", [r["name"] for r in e["resources"]])
        mapped = "a" * 150 + "~" + hashlib.sha256(long.encode()).hexdigest()
        path = os.path.join(self.mirror, VS, "bookinfo", mapped + ".json")
        self.wait_for(lambda: os.path.exists(path), "the long name's file")
        with open(path) as f:
            self.assertEqual(json.load(f)["name"], "bookinfo/" + long)
        self.wait_for(lambda: "long.yaml:" in src.stderr() and
                      "more than 256 labels" in src.stderr(),
                      "the source to report the document", src)
        # The next change is pushed and accepted.
        n = len(snk.responses())
        self.put("ok.yaml", [vs("ok", "ok", "bookinfo")])
        e = self.wait_response(snk, lambda e: e["collection"] == VS,
                               "the next push", since=n)
        self.assertEqual(e["verdict"], "ack", e)
        self.stop_both()

    def test_sigterm_both_exit_0(self):
        self.standard_files()
        self.start_pair(self.COLLS)
        self.stop_both()

    def test_sigint_both_exit_0(self):
        self.standard_files()
        self.start_pair(self.COLLS)
        for p in self.procs:
            p.signal(signal.SIGINT)
        for p in self.procs:
            self.assertEqual(p.wait(), 0, self.logs())

    def test_debounce_zero_and_node(self):
        self.standard_files()
        src, snk = self.start_pair(self.COLLS, debounce=0, sink_args=[
            "--node-id", "test-node", "--annotation", "zone=a",
            "--annotation", "empty="])
        self.wait_mirror(self.COLLS)
        self.put("more.yaml", [vs("more", "more", "bookinfo")])
        self.wait_mirror(self.COLLS)
        self.stop_both()

    def _restart(self, incremental):
        self.standard_files()
        self.put("doomed.yaml", [vs("doomed", "doomed", "bookinfo"),
                                 cm("doomed", "bookinfo", {"k": "v"})])
        sink_args = ["--incremental"] if incremental else []
        src, snk = self.start_pair(self.COLLS, sink_args=sink_args)
        self.wait_mirror(self.COLLS)
        # The source goes away; the sink keeps what it holds.
        src.signal(signal.SIGTERM)
        self.assertEqual(src.wait(), 0, self.logs())
        self.wait_for(lambda: any(e.get("event") == "disconnected"
                                  for e in snk.events()),
                      "the sink to see the stream end", snk)
        self.assertTrue(os.path.exists(os.path.join(
            self.mirror, VS, "bookinfo", "doomed.json")))
        # While it is down: a file deleted, another changed, one created.
        self.remove("doomed.yaml")
        d = dr("reviews", "reviews", "bookinfo")
        d["spec"]["host"] = "changed-while-down"
        self.put("bookinfo/rules.yaml", [d])
        self.put("born.yaml", [vs("born", "born", "bookinfo")])
        n = len(snk.responses())
        src2 = self.start_source()
        self.wait_mirror(self.COLLS, "the sink to resume into the new state")
        self.assertFalse(os.path.exists(os.path.join(
            self.mirror, VS, "bookinfo", "doomed.json")))
        self.assertFalse(os.path.exists(os.path.join(
            self.mirror, CM, "bookinfo", "doomed.json")))
        # The JSON lines follow the files: wait for one per collection.
        self.wait_for(lambda: {e["collection"] for e in snk.responses()[n:]}
                      == set(self.COLLS), "a response per collection", snk)
        after = snk.responses()[n:]
        self.assertEqual(sorted(e["collection"] for e in after[:3]),
                         sorted(self.COLLS), after)
        for e in after:
            self.assertEqual(e["verdict"], "ack", e)
        first = {e["collection"]: e for e in reversed(after)}
        if incremental:
            # Resumption: only the differences, removals named.
            for e in first.values():
                self.assertTrue(e["incremental"], e)
            self.assertEqual(first[VS]["removed"], ["bookinfo/doomed"])
            self.assertEqual([x["name"] for x in first[VS]["resources"]],
                             ["bookinfo/born"])
            self.assertEqual(first[CM]["removed"], ["bookinfo/doomed"])
            self.assertEqual(first[CM]["resources"], [])
            self.assertEqual([x["name"] for x in first[DR]["resources"]],
                             ["bookinfo/reviews"])
        else:
            for e in first.values():
                self.assertFalse(e["incremental"], e)
            self.assertIn("bookinfo/doomed", first[VS]["dropped"])
            self.assertEqual(first[VS]["removed"], [])
        self.assertEqual(first[VS]["total"], 3)
        self.assertEqual(first[CM]["total"], 1)
        # And the versions the sink holds are the new source's.
        mirror = read_mirror(self.mirror, self.COLLS)
        for c in self.COLLS:
            last = snk.responses(c)[-1]
            self.assertEqual(last["total"], len(mirror[c]))
        self.assertTrue(src2.running())
        self.stop_both()

    def test_source_restart_incremental_resume(self):
        self._restart(incremental=True)

    def test_source_restart_full_state(self):
        self._restart(incremental=False)


class SinkDialsSource(Scenarios, Base):
    MODE = "sink-dials"


class SourceDialsSink(Scenarios, Base):
    MODE = "source-dials"


class CrossBase(common.OtherTransportSink, Base):
    """mcp-source on the transport under test, mcp-sink on the other one:
    both speak standard gRPC on the wire, so every scenario must behave the
    same (gRPC's C core against our HTTP/2 code, in both roles)."""


class CrossSinkDialsSource(Scenarios, CrossBase):
    MODE = "sink-dials"


class CrossSourceDialsSink(Scenarios, CrossBase):
    MODE = "source-dials"


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

class CommandLine(Base):

    def assert_usage(self, prog, args, needle=None):
        rc, out, err = run([self.exe(prog)] + args)
        self.assertEqual(rc, 2, "%s %s: %s" % (prog, args, err))
        self.assert_usage_error(prog, err)
        if needle:
            self.assertIn(needle, err)

    def test_bad_flags_source(self):
        for args in (["--bogus"], ["--debounce", "soon"], ["--debounce", "-1"],
                     ["--log-level", "loud"], ["--dir"],
                     ["--listen", "127.0.0.1:1", "--connect", "127.0.0.1:2"],
                     ["--listen", "nohost"], ["--connect", "h:0"],
                     ["--listen", "h:70000"], ["--transport", "carrier-pigeon"],
                     ["positional"]):
            with self.subTest(args=args):
                self.assert_usage("mcp-source", args)
        for addr, why in (("unix:", "missing PATH after unix:"),
                          ("unix:" + "/x" * 54,
                           "a unix socket PATH has at most 107 bytes")):
            for flag in ("--listen", "--connect"):
                with self.subTest(flag=flag, addr=addr):
                    self.assert_usage("mcp-source", [flag, addr], why)
        for v in ("0", "soon", "3600001", "-5"):
            with self.subTest(write_settle=v):
                self.assert_usage("mcp-source", ["--write-settle", v],
                                  "--write-settle: not a number of "
                                  "milliseconds from 1 to 3600000: " + v)

    def test_bad_flags_sink(self):
        c = ["--collection", VS]
        for args in ([], ["--json"], c + ["--bogus"],
                     c + ["--annotation", "novalue"],
                     c + ["--annotation", "=v"], c + ["--log-level", "loud"],
                     c + ["--listen", "a:1", "--connect", "b:2"],
                     c + ["--connect", "nohost"], c + ["--out"],
                     ["--collection", "../escape", "--out", self.mirror],
                     ["--collection", "a//b", "--out", self.mirror],
                     c + ["--transport", "carrier-pigeon"],
                     c + ["--sync-timeout", "0"], c + ["--sync-timeout", "soon"],
                     c + ["--sync-warn", "-1"], c + ["--sync-warn"]):
            with self.subTest(args=args):
                self.assert_usage("mcp-sink", args)

    def test_mistyped_flag_says_did_you_mean_and_see_help(self):
        """Issue 24 item 13: the error, "did you mean --X?" and where the
        options are; not the 79 lines of usage after the error."""
        c = ["--collection", VS]
        for prog, args, bad, hint in (
                ("mcp-sink", c, "--colection", "did you mean --collection?"),
                ("mcp-sink", c, "--exit-after-synk",
                 "did you mean --exit-after-sync?"),
                ("mcp-sink", c, "--incremntal", "did you mean --incremental?"),
                ("mcp-sink", c, "-json", "did you mean --json?"),
                ("mcp-sink", c, "--coll", "did you mean --collection?"),
                ("mcp-sink", c, "--json=yes", "--json takes no value"),
                ("mcp-source", [], "--drr", "did you mean --dir?"),
                ("mcp-source", [], "--debounse=5", "did you mean --debounce?"),
                ("mcp-source", [], "listen", "did you mean --listen?"),
                ("mcp-sink", ["--api", "dispatcher", "--node-id", "n"],
                 "--report-statu", "did you mean --report-status?"),
                # Nothing close: no guess.
                ("mcp-sink", c, "--bogus", None),
                ("mcp-source", [], "positional", None)):
            with self.subTest(prog=prog, bad=bad):
                rc, out, err = run([self.exe(prog)] + args + [bad])
                self.assertEqual(rc, 2, err)
                self.assert_usage_error(prog, err)
                first = err.splitlines()[0]
                self.assertTrue(first.startswith(prog + ": unknown argument"),
                                err)
                self.assertIn(bad, first)
                if hint:
                    self.assertTrue(first.endswith("; " + hint), err)
                else:
                    self.assertNotIn("did you mean", err)
                self.assertEqual(len(err.splitlines()), 2, err)

    def test_help(self):
        for prog in ("mcp-source", "mcp-sink"):
            rc, out, err = run([self.exe(prog), "--help"])
            self.assertEqual(rc, 0)
            self.assertIn("usage:", out)

    def test_every_transport_runs(self):
        """Both programs start on every transport built in, listen on the
        port given (0: a free one, logged), name the transport, and stop
        with 0 on SIGTERM; the one under test must be built in."""
        self.assertTrue(transport_built(common.TRANSPORT), common.TRANSPORT)
        for t in common.TRANSPORTS:
            if not transport_built(t):
                continue
            # The logs name a transport by its name ("h2c" is h2's old one).
            shown = {"h2c": "h2"}.get(t, t)
            with self.subTest(transport=t):
                snk = Proc("mcp-sink", [self.exe("mcp-sink"), "--transport", t,
                                        "--collection", VS, "--json",
                                        "--listen", "127.0.0.1:0"])
                src = Proc("mcp-source", [self.exe("mcp-source"),
                                          "--transport", t,
                                          "--listen", "127.0.0.1:0"])
                self.procs += [snk, src]
                ev = self.wait_for(
                    lambda: [e for e in snk.events()
                             if e.get("event") == "listening"],
                    "the sink's listening event", snk)[0]
                self.assertRegex(ev["address"], r"^127\.0\.0\.1:[1-9][0-9]*$")
                self.wait_for(lambda: "serving ResourceSink on %s (%s)"
                              % (ev["address"], shown) in snk.stderr(),
                              "the sink to name its transport", snk)
                self.wait_for(lambda: "(%s)" % shown in src.stderr() and
                              "serving ResourceSource on 127.0.0.1:"
                              in src.stderr(), "the source to listen", src)
                for p in (snk, src):
                    p.signal(signal.SIGTERM)
                    self.assertEqual(p.wait(), 0, self.logs())

    def test_unix_socket_listeners_name_their_path(self):
        """A listener on a unix socket is logged, and announced in the
        sink's "listening" event, by its path (it was "unix:0", the port
        appended to "unix"), and a sink that dials that path syncs."""
        self.put("cm.yaml", [cm("one", "default", {"k": "v"})])
        for t in common.TRANSPORTS:
            if not transport_built(t):
                continue
            shown = {"h2c": "h2"}.get(t, t)
            with self.subTest(transport=t):
                sock_snk = "unix:" + os.path.join(self.tmp, t + "-sink.sock")
                sock_src = "unix:" + os.path.join(self.tmp, t + "-src.sock")
                snk = Proc("mcp-sink", [self.exe("mcp-sink"), "--transport", t,
                                        "--collection", CM, "--json",
                                        "--listen", sock_snk])
                src = Proc("mcp-source", [self.exe("mcp-source"),
                                          "--transport", t, "--dir",
                                          self.config, "--listen", sock_src])
                self.procs += [snk, src]
                ev = self.wait_for(
                    lambda: [e for e in snk.events()
                             if e.get("event") == "listening"],
                    "the sink's listening event", snk)[0]
                self.assertEqual(ev["address"], sock_snk)
                self.wait_for(lambda: "serving ResourceSink on %s (%s)"
                              % (sock_snk, shown) in snk.stderr(),
                              "the sink to name its socket", snk)
                self.wait_for(lambda: "serving ResourceSource on %s (%s)"
                              % (sock_src, shown) in src.stderr(),
                              "the source to name its socket", src)
                rc, out, err = run([self.exe("mcp-sink"), "--transport", t,
                                    "--connect", sock_src, "--collection", CM,
                                    "--json", "--exit-after-sync"])
                self.assertEqual(rc, 0, err)
                self.assertIn('"default/one"', out)
                for p in (snk, src):
                    p.signal(signal.SIGTERM)
                    self.assertEqual(p.wait(), 0, self.logs())

    def test_source_missing_dir(self):
        rc, out, err = run([self.exe("mcp-source"), "--transport",
                            common.TRANSPORT,
                            "--dir", os.path.join(self.tmp, "nope"),
                            "--listen", self.addr])
        self.assertEqual(rc, 1, err)
        self.assertIn("nope", err)

    def start_source_walking_a_minute(self):
        """mcp-source on --dir, once it walks the tree once a minute; and
        the line that says so."""
        src = self.start("mcp-source", ["--dir", self.config, "--listen",
                                        self.addr, "--debounce", "0"])
        every_minute = "rescanning %s every 60 s: inotify sees every change" \
            % self.config
        self.wait_for(lambda: every_minute in src.stderr(),
                      "the once-a-minute rescan", src)
        return src, every_minute

    def test_source_rescans_each_second_only_what_inotify_cannot_see(self):
        """The periodic rescan runs once a minute while inotify sees every
        change, each second while a YAML name is a link (its target may
        change outside the watched tree: only a walk finds that)."""
        self.put("bookinfo/a.yaml", [vs("a", "a", "bookinfo")])
        outside = os.path.join(self.tmp, "outside.yaml")
        write_atomic(outside, yaml_text([vs("b", "b", "bookinfo")]))
        src, every_minute = self.start_source_walking_a_minute()
        link = os.path.join(self.config, "bookinfo", "b.yaml")
        os.symlink(outside, link)
        self.wait_for(lambda: "every 1000 ms: a YAML name is a symbolic link"
                      in src.stderr(), "the rescan each second", src)
        # The link's target changes where no watch sees it: the rescan
        # finds it.
        n = src.stderr().count(" changed")
        write_atomic(outside, yaml_text([vs("b", "b2", "bookinfo")]))
        self.wait_for(lambda: src.stderr().count(" changed") > n,
                      "the rescan to find the change behind the link", src)
        os.unlink(link)
        self.wait_for(lambda: src.stderr().count(every_minute) >= 2,
                      "the once-a-minute rescan again", src)
        src.signal(signal.SIGTERM)
        self.assertEqual(src.wait(), 0, self.logs())

    def test_source_directory_gone_and_back(self):
        """--dir renamed away: the source serves what it had, walks each
        second until the directory is back, reads what changed meanwhile,
        and goes back to a walk a minute."""
        self.put("bookinfo/a.yaml", [vs("a", "a", "bookinfo")])
        src, every_minute = self.start_source_walking_a_minute()
        away = self.config + ".away"
        os.rename(self.config, away)
        self.wait_for(lambda: "serving the last content of %s" % self.config
                      in src.stderr(), "the source to keep what it had", src)
        self.wait_for(lambda: "every 1000 ms: the directory cannot be read"
                      in src.stderr(), "the rescan each second", src)
        n = src.stderr().count(" changed")
        write_atomic(os.path.join(away, "bookinfo", "a.yaml"),
                     yaml_text([vs("a", "a2", "bookinfo")]))
        os.rename(away, self.config)
        self.wait_for(lambda: "%s is readable again" % self.config
                      in src.stderr(), "the directory found again", src)
        self.wait_for(lambda: src.stderr().count(" changed") > n,
                      "the edit made while it was away", src)
        self.wait_for(lambda: src.stderr().count(every_minute) >= 2,
                      "the once-a-minute rescan again", src)
        src.signal(signal.SIGTERM)
        self.assertEqual(src.wait(), 0, self.logs())

    def test_source_port_in_use(self):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            addr = "127.0.0.1:%d" % s.getsockname()[1]
            rc, out, err = run([self.exe("mcp-source"), "--transport",
                                common.TRANSPORT, "--listen", addr])
        self.assertEqual(rc, 1, err)
        self.assertIn(addr, err)

    def test_source_dialing_nobody_stops_on_sigterm(self):
        p = self.start("mcp-source", ["--connect", self.addr])
        self.wait_for(lambda: "cannot reach" in p.stderr(),
                      "the failed dial to be reported", p)
        p.signal(signal.SIGTERM)
        self.assertEqual(p.wait(), 0, self.logs())

    def test_sink_names_collections_not_received_then_times_out(self):
        """A collection the source does not serve is never answered: the
        sink names it (--sync-warn), then gives up (--sync-timeout: 3)."""
        self.put("vs.yaml", [vs("reviews", "reviews", "bookinfo")])
        src = self.start_source()
        snk = self.start_sink([VS, "istio/unknown"], "--sync-warn", "1",
                              "--sync-timeout", "4", out=False)
        self.assertEqual(snk.wait(), 3, self.logs())
        warned = [l for l in snk.stderr_lines() if "nothing received" in l]
        self.assertTrue(warned, self.logs())
        for line in warned:
            self.assertIn("istio/unknown", line)
            self.assertNotIn(VS, line)
        self.assertIn("--sync-timeout: not synced after 4 s", snk.stderr())
        self.assertEqual(snk.events("sync_timeout"),
                         [{"event": "sync_timeout",
                           "missing": ["istio/unknown"]}])
        self.assertEqual([e["collection"] for e in snk.responses()], [VS])
        self.assertTrue(src.running())

    def test_sink_names_a_rejected_collection_as_rejected_not_missing(self):
        """A collection that came and was NACKed is named as rejected by
        --sync-warn, one never answered as not received: each its own
        cause, so neither sends the user to the wrong place."""
        # x..y is no Kubernetes name: the mirror refuses the whole push.
        self.put("vs.yaml", [vs("x..y", "evil", "bookinfo")])
        src = self.start_source("--names", "permissive")
        snk = self.start_sink([VS, "istio/unknown"], "--sync-warn", "1",
                              "--sync-timeout", "4")
        self.assertEqual(snk.wait(), 3, self.logs())
        rejected = [l for l in snk.stderr_lines()
                    if "received but rejected" in l]
        nothing = [l for l in snk.stderr_lines() if "nothing received" in l]
        self.assertTrue(rejected and nothing, self.logs())
        for line in rejected:
            self.assertIn(VS, line)
            self.assertNotIn("istio/unknown", line)
        for line in nothing:
            self.assertIn("istio/unknown", line)
            self.assertNotIn(VS, line)
        self.assertEqual([(e["collection"], e["verdict"])
                          for e in snk.responses()], [(VS, "nack")])
        self.assertEqual(sorted(snk.events("sync_timeout")[0]["missing"]),
                         sorted([VS, "istio/unknown"]))
        self.assertTrue(src.running())

    def test_sink_synced_in_time_does_not_time_out(self):
        self.put("vs.yaml", [vs("reviews", "reviews", "bookinfo")])
        self.start_source()
        snk = self.start_sink([VS], "--sync-warn", "1", "--sync-timeout",
                              "2", "--log-level", "debug", out=False)
        self.wait_synced(snk)
        # Both timers fire after the sync, and find nothing missing.
        self.wait_for(lambda: "--sync-warn: every collection received" in
                      snk.stderr() and "--sync-timeout: synced in time" in
                      snk.stderr(), "both timers to find the sink synced",
                      snk)
        self.assertTrue(snk.running(), self.logs())
        self.assertNotIn("nothing received", snk.stderr())
        snk.signal(signal.SIGTERM)
        self.assertEqual(snk.wait(), 0, self.logs())

    def test_sink_sigterm_while_connecting_says_stopping(self):
        """A dial that SIGTERM abandons is no failure and is not retried."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            s.listen(8)  # accepts, never answers: the dial hangs
            addr = "127.0.0.1:%d" % s.getsockname()[1]
            p = self.start("mcp-sink", ["--collection", VS, "--connect", addr,
                                        "--log-level", "debug"])
            self.wait_for(lambda: "stream 1: dialing" in p.stderr(),
                          "the dial", p)
            p.signal(signal.SIGTERM)
            self.assertEqual(p.wait(), 0, self.logs())
        self.assertIn("abandoned: stopping", p.stderr())
        self.assertNotIn("retrying", p.stderr())
        self.assertNotIn("warning", p.stderr())

    def test_sink_dialing_nobody_stops_on_sigterm(self):
        p = self.start("mcp-sink", ["--collection", VS, "--connect", self.addr])
        self.wait_for(lambda: "cannot reach" in p.stderr(),
                      "the failed dial to be reported", p)
        p.signal(signal.SIGTERM)
        self.assertEqual(p.wait(), 0, self.logs())


def main():
    argv = common.parse_args(__doc__.splitlines()[0])
    unittest.main(argv=argv, verbosity=2)


if __name__ == "__main__":
    main()
