#!/usr/bin/env python3
"""End-to-end tests of the aggregated services: mcp-sink --api aggregated
and --api aggregated-incremental against mcp-source.

  mcp-source --listen (serves ResourceSource and both
  AggregatedMeshConfigService methods on one port, no flag needed)
  mcp-sink --connect --api aggregated
      StreamAggregatedResources: always full state, keyed by type URL
  mcp-sink --connect --api aggregated-incremental
      IncrementalAggregatedResources: always differences, the type in the
      nonce ("<n>:<type_url>"), resumption from initial_resource_versions

The sink's --collection values are type URLs; the source maps each to a
collection (mcp_collection_for_type_url: ...v1alpha3.VirtualService ->
istio/networking/v1alpha3/virtualservices). The JSON lines and the --out
mirror are keyed by the type URL.

Usage: test_aggregated.py --build-dir BUILD [--transport grpc|h2c]
       [unittest args]

Built on test_e2e.py's fixture (processes, YAML, mirror: e2e_common.py's):
every wait is bounded, children are killed in tearDown. The Cross* classes
run the scenarios again with mcp-sink on the other transport (skipped when
it is not built in).
"""

import os
import signal
import unittest

import e2e_common as common
import test_e2e as e2e
from e2e_common import CM, DR, STRUCT, VS, cm, doc, expected_state, read_mirror
from test_e2e import dr, vs

T_VS = "type.googleapis.com/istio.networking.v1alpha3.VirtualService"
T_DR = "type.googleapis.com/istio.networking.v1alpha3.DestinationRule"
T_CM = "type.googleapis.com/k8s.io.api.core.v1.ConfigMap"
T_SECRET = "type.googleapis.com/k8s.io.api.core.v1.Secret"
SECRETS = "k8s/core/v1/secrets"
TYPE_OF = {VS: T_VS, DR: T_DR, CM: T_CM}
TYPES = [T_VS, T_DR, T_CM]


def by_type(state):
    """An expected_state() ({collection: ...}) keyed by type URL."""
    return {TYPE_OF[c]: r for c, r in state.items()}


class AggBase(e2e.Base):
    """The sink dials the source (the aggregated services have no other
    direction)."""
    MODE = "sink-dials"
    API = "aggregated"  # or "aggregated-incremental"

    @property
    def incremental(self):
        return self.API == "aggregated-incremental"

    def start_agg_sink(self, types, *args, out=True):
        return self.start_sink(types, "--api", self.API, *args, out=out)

    def start_agg_pair(self, types, sink_args=(), source_args=(),
                       debounce=None):
        src = self.start_source(*source_args, debounce=debounce)
        snk = self.start_agg_sink(types, *sink_args)
        self.wait_synced(snk)
        return src, snk

    def expected(self):
        # The sink's --out mirror is keyed by type URL (wait_mirror()).
        return by_type(expected_state(self.files))

    def check_nonce(self, e):
        if self.incremental:
            n, _, t = e["nonce"].partition(":")
            self.assertTrue(n.isdigit(), e)
            self.assertEqual(t, e["collection"], e)
        else:
            self.assertTrue(e["nonce"].isdigit(), e)

    def pushes(self, src, collection):
        """Pushes the source logged (--log-level debug) for |collection|."""
        return src.stderr().count("push %s nonce " % collection)


class AggScenarios:
    """Mixed into an AggBase subclass per API (and transport pairing)."""

    def test_initial_sync(self):
        self.standard_files()
        src, snk = self.start_agg_pair(TYPES)
        mirror = self.wait_mirror(TYPES)
        for t in TYPES:
            rs = snk.responses(t)
            self.assertEqual(len(rs), 1, rs)
            e = rs[0]
            self.assertEqual(e["verdict"], "ack", e)
            self.assertEqual(e["incremental"], self.incremental, e)
            self.check_nonce(e)
            self.assertTrue(e["system_version_info"], e)
            self.assertEqual(e["removed"], [])
            self.assertEqual(e["total"], len(mirror[t]))
            self.assertEqual({x["name"]: x["version"] for x in e["resources"]},
                             {n: m["version"] for n, m in mirror[t].items()})
            for x in e["resources"]:
                self.assertEqual(x["type_url"], STRUCT)  # the bodies' type
        # The mirror is keyed by the type URL.
        self.assertTrue(os.path.isfile(os.path.join(
            self.mirror, T_VS, "bookinfo", "reviews.json")))
        self.assertNotIn("error", src.stderr())
        self.stop_both()

    def test_live_edit(self):
        self.standard_files()
        src, snk = self.start_agg_pair(TYPES, debounce=0)
        before = self.wait_mirror(TYPES)
        n = len(snk.responses())
        d = vs("reviews", "reviews", "bookinfo", labels={"app": "reviews"},
               annotations={"team": "books"})
        d["spec"]["http"][0]["timeout"] = "3s"
        self.put("bookinfo/routing.yaml",
                 [d, self.files["bookinfo/routing.yaml"][1]])
        e = self.wait_response(snk, lambda e: e["collection"] == T_VS,
                               "the edit to be pushed", since=n)
        self.assertEqual(e["verdict"], "ack", e)
        self.check_nonce(e)
        after = self.wait_mirror(TYPES, "the mirror to show the edit")
        v0 = before[T_VS]["bookinfo/reviews"]["version"]
        v1 = after[T_VS]["bookinfo/reviews"]["version"]
        self.assertNotEqual(v0, v1)
        names = sorted(x["name"] for x in e["resources"])
        if self.incremental:
            self.assertTrue(e["incremental"], e)
            self.assertEqual(names, ["bookinfo/reviews"])  # the change only
        else:
            self.assertFalse(e["incremental"], e)
            self.assertEqual(names, ["bookinfo/ratings", "bookinfo/reviews"])
        self.assertIn({"name": "bookinfo/reviews", "version": v1,
                       "type_url": STRUCT}, e["resources"])
        self.assertEqual(e["total"], 2)
        # Untouched types got nothing new.
        self.assertEqual(len(snk.responses(T_DR)), 1)
        self.assertEqual(len(snk.responses(T_CM)), 1)
        self.stop_both()

    def test_delete(self):
        self.standard_files()
        self.put("extra.yaml", [vs("gone", "gone", "bookinfo"),
                                cm("gone", "bookinfo", {"k": "v"})])
        src, snk = self.start_agg_pair(TYPES, debounce=0)
        self.wait_mirror(TYPES)
        gone = os.path.join(self.mirror, T_VS, "bookinfo", "gone.json")
        self.assertTrue(os.path.exists(gone))
        n = len(snk.responses())
        self.remove("extra.yaml")
        self.wait_mirror(TYPES, "the deleted file's resources to go")
        self.assertFalse(os.path.exists(gone))
        for t, left in ((T_VS, 2), (T_CM, 1)):
            e = self.wait_response(snk, lambda e: e["collection"] == t,
                                   "the removal in " + t, since=n)
            self.assertEqual(e["verdict"], "ack", e)
            self.assertEqual(e["total"], left, e)
            if self.incremental:
                # removed_resources, as received; nothing else.
                self.assertTrue(e["incremental"], e)
                self.assertEqual(e["removed"], ["bookinfo/gone"], e)
                self.assertEqual(e["dropped"], [], e)
                self.assertEqual(e["resources"], [])
            else:
                # Full state: what is left; the sink computes what went.
                self.assertFalse(e["incremental"], e)
                self.assertEqual(e["removed"], [], e)
                self.assertEqual(e["dropped"], ["bookinfo/gone"], e)
                self.assertEqual(len(e["resources"]), left)
        self.stop_both()

    def test_nack_not_repushed(self):
        """istio/istio#12023: the aggregated source answered a NACK with the
        same content at once, and the sink rejected it again, forever. Here
        the rejected content is never pushed again; the next change is."""
        self.standard_files()
        # x..y is no Kubernetes name: only a permissive source serves it.
        src, snk = self.start_agg_pair(TYPES, debounce=0,
                                       source_args=["--log-level", "debug",
                                                    "--names", "permissive"])
        before = self.wait_mirror(TYPES)
        pushes0 = self.pushes(src, VS)
        n = len(snk.responses())
        # A name the --out mirror refuses (".." in a segment): NACK.
        self.put("evil.yaml", [vs("x..y", "evil", "bookinfo")])
        e = self.wait_response(snk, lambda e: e["collection"] == T_VS,
                               "the unsafe push", since=n)
        self.assertEqual(e["verdict"], "nack", e)
        self.assertEqual(e["error"]["code"], 3, e)
        self.assertIn("x..y", e["error"]["message"])
        self.assertEqual(e["total"], 2)  # nothing changed
        self.check_nonce(e)
        self.wait_for(lambda: "rejected" in src.stderr(),
                      "the source to log the NACK", src)
        # Nothing more so far. Stream order is the witness, not a window of
        # wall-clock time: a repush of the rejected content would come
        # before the pushes of the two changes below, which are waited for
        # (and checked to be the only responses after the NACK).
        self.assertEqual(len(snk.responses(T_VS)), 2, snk.responses(T_VS))
        self.assertEqual(self.pushes(src, VS), pushes0 + 1, src.stderr())
        self.assertEqual(src.stderr().count("sink rejected " + VS), 1)
        self.assertEqual(read_mirror(self.mirror, TYPES), before)
        # The next change is pushed (once) and accepted. One change: the
        # bad file replaced by a good one (with --debounce 0, a removal and
        # a new file are two changes, each pushed at once, since files are
        # read as their writers finish them, with no settle delay).
        n = len(snk.responses())
        self.put("evil.yaml", [vs("ok", "ok", "bookinfo")])
        e = self.wait_response(snk, lambda e: e["collection"] == T_VS,
                               "the next push", since=n)
        self.assertEqual(e["verdict"], "ack", e)
        self.assertIn("bookinfo/ok", [x["name"] for x in e["resources"]])
        if self.incremental:
            # The difference from what the sink holds (the NACK changed
            # nothing): the new resource, and the rejected one that came
            # and went since (removing a name not held is a no-op; the
            # mirror ignores such a name rather than NACK it again).
            self.assertEqual([x["name"] for x in e["resources"]],
                             ["bookinfo/ok"])
            self.assertEqual(e["removed"], ["bookinfo/x..y"])
        self.assertEqual(e["total"], 3)
        self.wait_mirror(TYPES)
        # One more change: nothing was pushed between the last two.
        n = len(snk.responses())
        self.put("sentinel.yaml", [vs("sentinel", "s", "bookinfo")])
        e = self.wait_response(snk, lambda e: e["collection"] == T_VS,
                               "the sentinel's push", since=n)
        self.assertIn("bookinfo/sentinel", [x["name"] for x in e["resources"]])
        self.assertEqual([(r["verdict"], r["total"])
                          for r in snk.responses(T_VS)],
                         [("ack", 2), ("nack", 2), ("ack", 3), ("ack", 4)],
                         snk.responses(T_VS))
        self.assertEqual(self.pushes(src, VS), pushes0 + 3, src.stderr())
        self.assertEqual(src.stderr().count("sink rejected " + VS), 1)
        self.wait_mirror(TYPES)
        self.stop_both()

    def test_declared_empty_type_exit_after_sync(self):
        self.standard_files()
        self.start_source("--collection", SECRETS)
        snk = self.start_agg_sink([T_VS, T_SECRET], "--exit-after-sync")
        self.assertEqual(snk.wait(), 0, self.logs())
        rs = snk.responses(T_SECRET)
        self.assertEqual(len(rs), 1, rs)
        self.assertEqual((rs[0]["resources"], rs[0]["total"], rs[0]["verdict"]),
                         ([], 0, "ack"))
        self.assertEqual(snk.responses(T_VS)[0]["total"], 2)
        self.assertTrue(any(e.get("event") == "synced" for e in snk.events()))
        self.assertEqual(os.listdir(os.path.join(self.mirror, T_SECRET)), [])

    def test_unknown_type_keeps_stream(self):
        """A type no collection answers is not an error: the others are
        served, and it is served once the collection exists."""
        self.standard_files()
        src, snk = self.start_source(debounce=0), None
        snk = self.start_agg_sink([T_VS, T_SECRET])
        self.wait_response(snk, lambda e: e["collection"] == T_VS and
                           e["verdict"] == "ack", "the known type")
        self.assertEqual(snk.responses(T_SECRET), [])
        self.put("secret.yaml", [doc("Secret", "s", "bookinfo", api="v1",
                                     data={"k": "dg=="})])
        e = self.wait_response(snk, lambda e: e["collection"] == T_SECRET,
                               "the type once its collection exists")
        self.assertEqual((e["verdict"], e["total"]), ("ack", 1), e)
        # Its first and only response (no wall-clock window: one sent
        # before the collection existed would come before this one).
        self.assertEqual(snk.responses(T_SECRET), [e])
        self.wait_synced(snk)
        self.stop_both()

    def test_source_restart(self):
        self.standard_files()
        self.put("doomed.yaml", [vs("doomed", "doomed", "bookinfo"),
                                 cm("doomed", "bookinfo", {"k": "v"})])
        src, snk = self.start_agg_pair(TYPES)
        self.wait_mirror(TYPES)
        src.signal(signal.SIGTERM)
        self.assertEqual(src.wait(), 0, self.logs())
        self.wait_for(lambda: any(e.get("event") == "disconnected"
                                  for e in snk.events()),
                      "the sink to see the stream end", snk)
        # While it is down: a file deleted, another changed, one created.
        self.remove("doomed.yaml")
        d = dr("reviews", "reviews", "bookinfo")
        d["spec"]["host"] = "changed-while-down"
        self.put("bookinfo/rules.yaml", [d])
        self.put("born.yaml", [vs("born", "born", "bookinfo")])
        n = len(snk.responses())
        src2 = self.start_source()
        self.wait_mirror(TYPES, "the sink to resume into the new state")
        self.wait_for(lambda: {e["collection"] for e in snk.responses()[n:]}
                      == set(TYPES), "a response per type", snk)
        first = {}
        for e in snk.responses()[n:]:
            first.setdefault(e["collection"], e)
        for e in first.values():
            self.assertEqual(e["verdict"], "ack", e)
            self.assertEqual(e["incremental"], self.incremental, e)
        if self.incremental:
            # Resumption from initial_resource_versions: only the
            # differences, and the resources deleted meanwhile removed.
            self.assertEqual([x["name"] for x in first[T_VS]["resources"]],
                             ["bookinfo/born"])
            self.assertEqual(first[T_VS]["removed"], ["bookinfo/doomed"])
            self.assertEqual(first[T_CM]["resources"], [])
            self.assertEqual(first[T_CM]["removed"], ["bookinfo/doomed"])
            self.assertEqual([x["name"] for x in first[T_DR]["resources"]],
                             ["bookinfo/reviews"])
            self.assertEqual(first[T_DR]["removed"], [])
        else:
            # Full state; the sink computes what went.
            self.assertEqual(len(first[T_VS]["resources"]), 3)
            self.assertEqual(first[T_VS]["dropped"], ["bookinfo/doomed"])
            self.assertEqual(first[T_CM]["dropped"], ["bookinfo/doomed"])
            self.assertEqual(first[T_VS]["removed"], [])
        self.assertEqual(first[T_VS]["total"], 3)
        self.assertEqual(first[T_CM]["total"], 1)
        self.assertTrue(src2.running())
        self.stop_both()

    def test_stale_mirror_files_removed(self):
        """What an earlier run left below DIR/<type> goes with the first
        push (for the incremental API too: its first push is everything)."""
        self.standard_files()
        stale = os.path.join(self.mirror, T_VS, "old", "left.json")
        os.makedirs(os.path.dirname(stale))
        with open(stale, "w") as f:
            f.write("{}\n")
        self.start_agg_pair(TYPES)
        self.wait_mirror(TYPES)
        self.assertFalse(os.path.exists(stale))
        self.stop_both()


class Aggregated(AggScenarios, AggBase):
    API = "aggregated"


class AggregatedIncremental(AggScenarios, AggBase):
    API = "aggregated-incremental"


class CrossAggBase(common.OtherTransportSink, AggBase):
    """mcp-sink on the other transport than mcp-source."""


class CrossAggregated(AggScenarios, CrossAggBase):
    API = "aggregated"


class CrossAggregatedIncremental(AggScenarios, CrossAggBase):
    API = "aggregated-incremental"


class OnePort(AggBase):

    def test_three_services_on_one_port(self):
        """mcp-source --listen serves ResourceSource and both aggregated
        methods on the same port at once, from the same store: the three
        sinks get the same resources at the same versions."""
        self.standard_files()
        self.start_source()
        sinks = {
            "resource": self.start_sink([VS], "--exit-after-sync", out=False),
            "aggregated": self.start_sink([T_VS], "--api", "aggregated",
                                          "--exit-after-sync", out=False),
            "aggregated-incremental": self.start_sink(
                [T_VS], "--api", "aggregated-incremental",
                "--exit-after-sync", out=False),
        }
        got = {}
        for api, snk in sinks.items():
            self.assertEqual(snk.wait(), 0, self.logs())
            (e,) = snk.responses()
            self.assertEqual(e["verdict"], "ack", e)
            got[api] = {x["name"]: x["version"] for x in e["resources"]}
        self.assertEqual(len(got["resource"]), 2)
        self.assertEqual(got["aggregated"], got["resource"])
        self.assertEqual(got["aggregated-incremental"], got["resource"])


class CommandLine(AggBase):

    def assert_usage(self, args, needle):
        rc, out, err = common.run([self.exe("mcp-sink"), "--transport",
                                   common.TRANSPORT] + args)
        self.assertEqual(rc, 2, "%s: %s" % (args, err))
        self.assert_usage_error("mcp-sink", err)
        self.assertIn(needle, err, err)

    def test_listen_is_a_usage_error(self):
        for api in ("aggregated", "aggregated-incremental"):
            with self.subTest(api=api):
                self.assert_usage(["--api", api, "--collection", T_VS,
                                   "--listen", self.addr], "cannot --listen")

    def test_bad_api(self):
        self.assert_usage(["--api", "sotw", "--collection", T_VS], "--api")
        self.assert_usage(["--api", "aggregated", "--incremental",
                           "--collection", T_VS], "full state only")

    def test_resource_is_the_default(self):
        """--api resource is what runs without the flag."""
        self.standard_files()
        self.start_source()
        for args in ([], ["--api", "resource"]):
            with self.subTest(args=args):
                snk = self.start_sink([VS], "--exit-after-sync", *args,
                                      out=False)
                self.assertEqual(snk.wait(), 0, self.logs())
                self.assertIn("dialing the ResourceSource", snk.stderr())
                self.assertEqual(snk.responses(VS)[0]["collection"], VS)

    def test_help_names_the_api(self):
        rc, out, err = common.run([self.exe("mcp-sink"), "--help"])
        self.assertEqual(rc, 0)
        self.assertIn("--api", out)


def main():
    argv = common.parse_args(__doc__.splitlines()[0])
    unittest.main(argv=argv, verbosity=2)


if __name__ == "__main__":
    main()
