"""Admission of the real mcp-source under the attacks of issue 12, end to end.

The goals, as bounded loopback tests with admit-storm (tests/e2e/
admit_storm.c, one client process):
  - 2000 streams opened at once, none of them ACKing: every one gets its
    first push, or a clean RESOURCE_EXHAUSTED / UNAVAILABLE, within 10 s;
  - a new sink is served within 1 s while 400 streams that ask and never
    read (or never ask) are held, from another peer (127.0.0.2) or, for
    the ones that ask, from the same one.
Before the fix, 128 such streams kept a new sink waiting 19 s on gRPC, and
2000 streams that do not ACK queued for minutes (docs/security.md).

    test_admission.py --build-dir BUILD [--transport grpc|h2c]
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common as common  # noqa: E402

VS = common.VS
SKIP_STATUS = 77


def note(msg):
    """A measurement, shown in meson's log."""
    sys.stderr.write("    [admission] %s\n" % msg)
    sys.stderr.flush()


class Admission(common.Base):
    TMP_PREFIX = "mcp-admission-"
    # mcp-source gets a SIGTERM after each test: a sanitizer build's
    # report (a leak after the storm) fails the test.
    SANITIZER_STOP = 10

    def setUp(self):
        super().setUp()
        self.put("vs.yaml", [common.doc("VirtualService", n, "default",
                                        spec={"hosts": [n + ".example.com"]})
                             for n in ("a", "b", "c")])
        # The storms check the rules of issue 12 (slots, queues, keyed by
        # address); the per-peer new-stream rate of issue 23 would, by
        # design, refuse a new sink behind 400 streams of its own address
        # (that address's rate is used up): it has tests of its own
        # (test_core_admit, test_*_admission, docs/security.md).
        self.src = self.start("mcp-source", ["--dir", self.config, "--listen",
                                             self.addr, "--log-level",
                                             "error", "--stream-rate", "off"])
        self.wait_for(lambda: self.connectable(), "the source to listen",
                      self.src)

    def connectable(self):
        import socket
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.2).close()
            return True
        except OSError:
            return False

    def storm(self, *args, timeout=90):
        argv = [self.exe("admit-storm"), self.addr] + list(args) + [
            "--timeout-ms", str((timeout - 10) * 1000), VS]
        r = subprocess.run(argv, capture_output=True, text=True,
                           timeout=timeout)
        self.assertEqual(r.returncode, 0, r.stderr + self.logs())
        self.assertTrue(self.src.running(), self.logs())
        out = json.loads(r.stdout.strip().splitlines()[-1])
        note("%s %s: %s" % (common.TRANSPORT, " ".join(args), out))
        return out

    def test_2000_streams_not_acking_answered_within_10s(self):
        r = self.storm("--streams", "2000", "--mode", "storm")
        clean = r["pushed"] + r["status"].get("8", 0) + \
            r["status"].get("14", 0)
        self.assertEqual(r["unanswered"], 0, r)
        self.assertEqual(r["reset"], 0, r)
        self.assertEqual(clean, 2000, r)
        self.assertLessEqual(r["max_ms"], 10000, r)

    def probe(self, mode, peer, n=400, bound_ms=1000, *extra):
        """The new sink gets its first push (not a refusal), and not by
        taking the place of a held stream: no storm stream is answered
        (ended, reset, pushed) between the set-up and the probe's answer.
        Its time is bounded against this run's own pace, not the wall
        clock alone: |bound_ms| (the goal on an idle machine), or ten times
        what the source took to take the |n| streams (setup_ms), when the
        machine is busy enough that this is longer. Waiting behind the held
        streams (the bug: 19 s behind 128) stays far beyond either."""
        r = self.storm("--streams", str(n), "--mode", mode, "--from", peer,
                       "--probe-from", "127.0.0.1", *extra)
        self.assertGreaterEqual(r["probe_ms"], 0, r)
        self.assertEqual(r["released"], 0, r)
        self.assertLessEqual(r["probe_ms"],
                             max(bound_ms, 10 * r["setup_ms"]), r)

    def test_new_sink_served_within_1s_while_400_mute_streams_held(self):
        self.probe("mute", "127.0.0.2")

    def test_new_sink_served_within_1s_while_400_mute_streams_of_its_peer_held(
            self):
        self.probe("mute", "127.0.0.1")

    def test_new_sink_served_within_1s_while_400_silent_streams_held(self):
        self.probe("silent", "127.0.0.2")

    def test_new_sink_served_while_another_peer_floods_4000_streams(self):
        """Beyond the goal: the flood fills the new-stream bucket (2000) and
        its share of the queue; the new sink's turn for a token comes round
        robin, not after the flood's (before: no answer within minutes on
        gRPC). The bound leaves room for accepting 4000 calls first."""
        self.probe("mute", "127.0.0.2", 4000, 3000, "--settle-ms", "0")


def main():
    argv = common.parse_args(__doc__.splitlines()[0],
                             programs=("mcp-source", "admit-storm"))
    if not common.transport_built(common.TRANSPORT):
        print("test_admission: SKIP: the programs have no %s transport"
              % common.TRANSPORT)
        sys.exit(SKIP_STATUS)
    import unittest
    unittest.main(argv=argv, verbosity=2)


if __name__ == "__main__":
    main()
