#!/usr/bin/env python3
"""Interop: libmcp's mcp-source / mcp-sink against independent @grpc/grpc-js peers.

    python3 tests/interop/test_interop.py --build-dir build [--transport grpc|h2c] [-v] [-k PATTERN]

The Node peers (mcp_sink.js, mcp_source.js, next to this file) are written
from docs/protocol.md and the .proto files only. Every case runs over
127.0.0.1 with fresh ports, in both directions of the protocol:
  ResourceSource (the sink dials the source) and ResourceSink (the source dials
  the sink, with the "$triggerCollection" trigger); and the node sink on
  AggregatedMeshConfigService (StreamAggregatedResources and
  IncrementalAggregatedResources, keyed by type URL) against our mcp-source.
The Node dependencies are installed from package-lock.json (npm ci) when
tests/interop/node_modules is missing. Cases skip, with a message, when our
programs are not built, do not offer --transport (a probe mcp-sink exits
naming it), or node is not installed. Every wait is bounded (INTEROP_TIMEOUT
seconds, default 20); every child is stopped in tearDown and must exit 0.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DEADLINE = float(os.environ.get('INTEROP_TIMEOUT', '20'))  # seconds, per wait
STRUCT = 'type.googleapis.com/google.protobuf.Struct'
VS = 'istio/networking/v1alpha3/virtualservices'
DR = 'istio/networking/v1alpha3/destinationrules'
GW = 'istio/networking/v1alpha3/gateways'
CM = 'k8s/core/v1/configmaps'

OPTS = argparse.Namespace(build_dir='build', transport='grpc')


# The e2e harness's: a random port below the ephemeral range, never twice
# (bind(0) hands the same port to a make test running beside this one).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "e2e"))
from e2e_common import free_port  # noqa: E402


class Proc:
    """A child process whose stdout JSON lines are collected by a thread."""

    def __init__(self, name, argv):
        self.name, self.argv = name, argv
        self.lines, self.raw, self.eof = [], [], False
        self.cond = threading.Condition()
        self.err = tempfile.TemporaryFile()
        # Own session: signals we send reach this child only.
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=self.err, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.p.stdout:
            text = raw.decode('utf-8', 'replace').rstrip('\n')
            try:
                obj = json.loads(text)
            except ValueError:
                obj = None
            with self.cond:
                (self.lines if isinstance(obj, dict) else self.raw).append(obj if isinstance(obj, dict) else text)
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def stderr(self):
        # pread, never seek: the child writes through the same open file
        # (one shared offset), and a seek(0) racing its write would make it
        # overwrite the start of its own log.
        fd, out, at = self.err.fileno(), [], 0
        while True:
            b = os.pread(fd, 1 << 20, at)
            if not b:
                return b''.join(out).decode('utf-8', 'replace')
            out.append(b)
            at += len(b)

    def describe(self):
        return (f'--- {self.name}: {" ".join(self.argv)} (rc={self.p.poll()})\n'
                f'stdout JSON: {json.dumps(self.lines)[-6000:]}\nstdout other: {self.raw[-20:]}\n'
                f'stderr: {self.stderr()[-4000:]}')

    def wait_for(self, pred, what, since=0, timeout=DEADLINE):
        """First line from index `since` matching pred; fails at the deadline or EOF."""
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines[since:]:
                    if pred(line):
                        return line
                left = end - time.monotonic()
                if self.eof or left <= 0:
                    why = 'exited' if self.eof else 'timed out'
                    raise AssertionError(f'{self.name} {why} waiting for {what}\n{self.describe()}')
                self.cond.wait(min(left, 0.5))

    def wait_stderr(self, pred, what, timeout=DEADLINE):
        """Polls stderr (a file: no reader thread to wake us) until
        pred(text); fails at the deadline or once the child exited."""
        end = time.monotonic() + timeout
        while True:
            gone = self.p.poll() is not None
            text = self.stderr()
            if pred(text):
                return text
            if gone or time.monotonic() > end:
                raise AssertionError(f'{self.name} {"exited" if gone else "timed out"} waiting for {what}\n'
                                     f'{self.describe()}')
            time.sleep(0.02)

    def index(self, line):
        """Where |line| (an object wait_for returned) is in self.lines."""
        with self.cond:
            return next(i for i, l in enumerate(self.lines) if l is line)

    def mark(self):
        with self.cond:
            return len(self.lines)

    def signal(self, sig):
        if self.p.poll() is None:
            self.p.send_signal(sig)

    def stop(self, timeout=5):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
        rc = self.p.wait(timeout)
        # Let the reader thread drain what the child printed before exiting.
        end = time.monotonic() + 2
        with self.cond:
            while not self.eof and time.monotonic() < end:
                self.cond.wait(0.1)
        return rc

    def close(self):
        self.stop()
        self.p.stdout.close()
        self.err.close()


def replay(lines, collection):
    """The name -> version a sink holds, from its ACKed response lines."""
    held = {}
    for l in lines:
        if l.get('event') != 'response' or l.get('collection') != collection or l.get('verdict') != 'ack':
            continue
        if not l.get('incremental'):
            held = {}
        for n in l.get('removed', []) if l.get('incremental') else []:
            held.pop(n, None)
        for r in l['resources']:
            held[r['name']] = r['version']
    return held


def read_json(path):
    with open(path) as f:
        return json.load(f)


def response(collection, **kw):
    return lambda l: (l.get('event') == 'response' and l.get('collection') == collection and
                      all(l.get(k) == v for k, v in kw.items()))


def request(collection, **kw):
    return lambda l: (l.get('event') == 'request' and l.get('collection') == collection and
                      all(l.get(k) == v for k, v in kw.items()))


# ---------------------------------------------------------------------------
# The YAML our mcp-source serves (mapping: tools/loader/loader.h).
# ---------------------------------------------------------------------------
VS_YAML = """\
apiVersion: networking.istio.io/v1alpha3
kind: VirtualService
metadata:
  name: reviews
  namespace: bookinfo
  resourceVersion: "7"
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews, subset: v1}
---
apiVersion: networking.istio.io/v1alpha3
kind: VirtualService
metadata:
  name: ratings
  namespace: bookinfo
  labels: {app: ratings}
spec:
  hosts: [ratings]
  retries: {attempts: 3, perTryTimeout: 2s}
"""
VS_YAML_EDITED = """\
apiVersion: networking.istio.io/v1alpha3
kind: VirtualService
metadata:
  name: reviews
  namespace: bookinfo
  resourceVersion: "8"
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews, subset: v2}
"""
DR_YAML = """\
apiVersion: networking.istio.io/v1alpha3
kind: DestinationRule
metadata: {name: reviews, namespace: bookinfo}
spec:
  host: reviews
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
"""
# A change of the DestinationRule that the tests make to learn that the
# source has handled what came before it on the stream (a barrier, in place
# of a wait of the clock): the source answers in order, so a push it owed
# before the change comes before the change's push.
DR_YAML_BARRIER = DR_YAML.replace('ISTIO_MUTUAL', 'DISABLE')
CM_YAML = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: istio, namespace: istio-system}
data:
  mesh: "enableTracing: true"
  enabled: "true"
"""
BODIES = {
    (VS, 'bookinfo/reviews'): {'hosts': ['reviews'], 'http': [{'route': [{'destination': {'host': 'reviews', 'subset': 'v1'}}]}]},
    (VS, 'bookinfo/ratings'): {'hosts': ['ratings'], 'retries': {'attempts': 3, 'perTryTimeout': '2s'}},
    (DR, 'bookinfo/reviews'): {'host': 'reviews', 'subsets': [{'name': 'v1', 'labels': {'version': 'v1'}},
                                                             {'name': 'v2', 'labels': {'version': 'v2'}}],
                               'trafficPolicy': {'tls': {'mode': 'ISTIO_MUTUAL'}}},
    (CM, 'istio-system/istio'): {'mesh': 'enableTracing: true', 'enabled': 'true'},
}
EDITED_REVIEWS = {'hosts': ['reviews'], 'http': [{'route': [{'destination': {'host': 'reviews', 'subset': 'v2'}}]}]}
# The node source's state file: bodies are arbitrary JSON (sent as Struct).
NODE_STATE = {
    VS: [{'name': 'default/a', 'version': '1', 'body': {'hosts': ['a'], 'n': 1.5, 'ok': True, 'none': None}},
         {'name': 'default/b', 'version': '1', 'body': {'hosts': ['b']}},
         {'name': 'default/c', 'version': '1', 'body': {}}],
    GW: [],
}


_transport_probe = {}


def transport_unavailable(sink_bin):
    """Why our programs cannot run OPTS.transport (None when they can): a probe
    mcp-sink either starts listening or exits at once naming the transport."""
    if OPTS.transport not in _transport_probe:
        port = free_port()
        p = subprocess.Popen([sink_bin, '--collection', 'probe', '--transport', OPTS.transport,
                              '--listen', f'127.0.0.1:{port}'], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        why, end = None, time.monotonic() + DEADLINE
        while time.monotonic() < end and p.poll() is None:
            try:
                socket.create_connection(('127.0.0.1', port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        if p.poll() is None:
            p.terminate()
        try:
            err = p.communicate(timeout=5)[1].decode('utf-8', 'replace').strip()
        except subprocess.TimeoutExpired:
            p.kill()
            err = p.communicate()[1].decode('utf-8', 'replace').strip()
        if p.returncode not in (0, -signal.SIGTERM) and 'transport' in err.lower():
            why = f'mcp-sink --transport {OPTS.transport}: {err[:300]}'
        _transport_probe[OPTS.transport] = why
    return _transport_probe[OPTS.transport]


class Base(unittest.TestCase):
    node = None

    @classmethod
    def setUpClass(cls):
        build = os.path.abspath(OPTS.build_dir)
        cls.src_bin = os.path.join(build, 'tools', 'mcp-source')
        cls.sink_bin = os.path.join(build, 'tools', 'mcp-sink')
        missing = [b for b in (cls.src_bin, cls.sink_bin) if not os.access(b, os.X_OK)]
        if missing:
            raise unittest.SkipTest(f'our programs are not built: missing {", ".join(missing)}')
        why = transport_unavailable(cls.sink_bin)
        if why:
            raise unittest.SkipTest(f'transport not available: {why}')
        cls.node = shutil.which('node')
        if not cls.node:
            raise unittest.SkipTest('node is not installed (needed for the @grpc/grpc-js peers)')
        if not os.path.isdir(os.path.join(HERE, 'node_modules', '@grpc', 'grpc-js')):
            subprocess.run(['npm', 'ci', '--prefix', HERE, '--no-audit', '--no-fund'],
                           check=True, timeout=600, stdout=subprocess.DEVNULL)

    def setUp(self):
        self.procs = []
        self.tmp = tempfile.mkdtemp(prefix='mcp-interop-')

    def tearDown(self):
        # Show the children's output when the test failed (or INTEROP_VERBOSE=1).
        failed = not getattr(self._outcome, 'success', True)
        unclean = []
        for p in self.procs:
            if p.stop() != 0:  # SIGTERM must end every child cleanly (sanitizers report here too)
                unclean.append(p)
            if failed or os.environ.get('INTEROP_VERBOSE'):
                sys.stderr.write(p.describe() + '\n')
        report = '\n'.join(p.describe() for p in unclean)
        for p in self.procs:
            p.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if unclean and not failed:
            self.fail('children did not exit with status 0:\n' + report)

    def spawn(self, name, argv):
        p = Proc(name, argv)
        self.procs.append(p)
        return p

    # --- our programs -------------------------------------------------------
    def ours(self, name, argv, port=None):
        p = self.spawn(name, argv + ['--transport', OPTS.transport])
        if port is not None:
            self.wait_port(p, port)
        return p

    def wait_port(self, p, port):
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            if p.p.poll() is not None:
                self.fail(f'{p.name} exited before listening\n{p.describe()}')
            try:
                socket.create_connection(('127.0.0.1', port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.fail(f'{p.name} is not listening on {port}\n{p.describe()}')

    def our_source(self, extra, port=None):
        port = port or free_port()
        d = os.path.join(self.tmp, 'config')
        # --body struct: these cases check Struct bodies (their YAML is not
        # all valid Istio: ratings' spec has retries at the top);
        # TypedInterop checks typed bodies.
        return self.ours('mcp-source', [self.src_bin, '--dir', d, '--listen', f'127.0.0.1:{port}',
                                        '--debounce', '20', '--body', 'struct'] + extra, port), port

    def write_yaml(self, rel, text):
        path = os.path.join(self.tmp, 'config', rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), '.' + os.path.basename(path) + '.tmp')
        with open(tmp, 'w') as f:
            f.write(text)
        os.replace(tmp, path)  # atomic: the source never sees half a file

    def barrier(self, sink, dr, n):
        """Edits the DestinationRule (n even: DR_YAML_BARRIER, odd: back to
        DR_YAML) and waits for its push (|dr|: its collection or type)."""
        mark = sink.mark()
        self.write_yaml('bookinfo/destinationrule.yaml', DR_YAML_BARRIER if n % 2 == 0 else DR_YAML)
        sink.wait_for(response(dr), 'the DestinationRule push after the barrier edit', since=mark)

    def write_config(self):
        self.write_yaml('bookinfo/virtualservices.yaml', VS_YAML)
        self.write_yaml('bookinfo/destinationrule.yaml', DR_YAML)
        self.write_yaml('istio-system/mesh.yaml', CM_YAML)

    # --- the node peers -----------------------------------------------------
    def node_sink(self, args):
        return self.spawn('node mcp_sink.js', [self.node, os.path.join(HERE, 'mcp_sink.js'), '--bodies',
                                               '--timeout-ms', str(int(DEADLINE * 3000))] + args)

    def node_source(self, args, state=None):
        self.state_file = os.path.join(self.tmp, 'state.json')
        if state is not None:
            self.set_state(state)
        return self.spawn('node mcp_source.js', [self.node, os.path.join(HERE, 'mcp_source.js'),
                                                 '--state', self.state_file] + args)

    def set_state(self, state):
        with open(self.state_file + '.tmp', 'w') as f:
            json.dump(state, f)
        os.replace(self.state_file + '.tmp', self.state_file)

    def listening(self, p):
        return p.wait_for(lambda l: l.get('event') == 'listening', 'listening')['address']

    # --- checks ---------------------------------------------------------------
    def assert_no_nack(self, p, ignore=('$triggerCollection', '')):
        bad = [l for l in p.lines if l.get('verdict') in ('nack', 'stale') and l.get('collection') not in ignore]
        self.assertEqual(bad, [], f'unexpected NACK/stale lines\n{p.describe()}')

    def check_node_sink_synced(self, sink):
        """The node sink holds exactly the YAML's resources, with the right bodies."""
        for col in (VS, DR, CM, GW):
            sink.wait_for(response(col, verdict='ack'), f'ACKed push of {col}')
        self.assertEqual(set(replay(sink.lines, VS)), {'bookinfo/reviews', 'bookinfo/ratings'})
        self.assertEqual(replay(sink.lines, VS)['bookinfo/reviews'], '7')  # metadata.resourceVersion
        self.assertEqual(set(replay(sink.lines, DR)), {'bookinfo/reviews'})
        self.assertEqual(set(replay(sink.lines, CM)), {'istio-system/istio'})
        self.assertEqual(replay(sink.lines, GW), {})
        for l in sink.lines:
            if l.get('event') == 'response' and l['collection'] in (VS, DR, CM):
                for r in l['resources']:
                    self.assertEqual(r['type_url'], STRUCT)
                    self.assertTrue(r['version'])
                    self.assertEqual(r['body'], BODIES[(l['collection'], r['name'])], r['name'])
        ratings = [r for l in sink.lines if l.get('event') == 'response'
                   for r in l['resources'] if r['name'] == 'bookinfo/ratings']
        self.assertEqual(ratings[0]['labels'], {'app': 'ratings'})

    def check_edit_reaches_node_sink(self, sink, incremental):
        mark = sink.mark()
        self.write_yaml('bookinfo/virtualservices.yaml', VS_YAML_EDITED)
        line = sink.wait_for(response(VS), 'push after the YAML edit', since=mark)
        self.assertEqual(line['verdict'], 'ack', line)
        self.assertEqual(replay(sink.lines, VS), {'bookinfo/reviews': '8'})
        self.assertEqual(line['resources'][0]['body'], EDITED_REVIEWS)
        if incremental:
            self.assertTrue(line['incremental'], line)
            self.assertEqual(line['removed'], ['bookinfo/ratings'])
            self.assertEqual([r['name'] for r in line['resources']], ['bookinfo/reviews'])
        else:
            self.assertFalse(line['incremental'], line)
        self.assertEqual(line['total'], 1)

    def check_our_sink_synced(self, sink, src, state, incremental=False):
        for col, res in state.items():
            line = sink.wait_for(response(col, verdict='ack'), f'our sink ACKs {col}')
            self.assertEqual(replay(sink.lines, col), {r['name']: r['version'] for r in res})
            self.assertEqual(line['total'], len(res))
            self.assertEqual(line['incremental'], False)  # first answer without versions: full
            for r in line['resources']:
                self.assertEqual(r['type_url'], STRUCT)
            src.wait_for(request(col, verdict='ack', nonce=line['nonce']), f'node source sees the ACK of {col}')
            new = [l for l in src.lines if request(col, verdict='new')(l)]
            self.assertEqual(len(new), 1, f'one initial request for {col}: {new}')
            self.assertEqual(new[0]['nonce'], '')
            self.assertEqual(new[0]['incremental'], incremental)

    def check_change_reaches_our_sink(self, sink, src, incremental):
        mark = sink.mark()
        changed = {VS: [{'name': 'default/a', 'version': '2', 'body': {'hosts': ['a2']}},
                        {'name': 'default/c', 'version': '1', 'body': {}},
                        {'name': 'default/d', 'version': '1', 'body': {'x': [1, 2]}}],
                   GW: [{'name': 'istio-system/gw', 'version': '1', 'body': {'servers': []}}]}
        self.set_state(changed)
        src.signal(signal.SIGHUP)
        for col, res in changed.items():
            line = sink.wait_for(response(col, verdict='ack'), f'{col} change at our sink', since=mark)
            self.assertEqual(replay(sink.lines, col), {r['name']: r['version'] for r in res})
            src.wait_for(request(col, verdict='ack', nonce=line['nonce']), f'ACK of the {col} change')
        line = sink.wait_for(response(VS, verdict='ack'), 'VS change', since=mark)
        self.assertEqual(line['incremental'], incremental)
        if incremental:
            self.assertEqual(sorted(r['name'] for r in line['resources']), ['default/a', 'default/d'])
            self.assertEqual(line['removed'], ['default/b'])
        return changed


TYPED_YAML = """\
apiVersion: networking.istio.io/v1alpha3
kind: VirtualService
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews, subset: v1}
      weight: 90
    - destination: {host: reviews, subset: v2}
      weight: 10
    retries: {attempts: 3, perTryTimeout: 2s}
---
apiVersion: networking.istio.io/v1alpha3
kind: DestinationRule
metadata: {name: reviews, namespace: bookinfo}
spec:
  host: reviews
  trafficPolicy: {loadBalancer: {simple: LEAST_CONN}, tls: {mode: ISTIO_MUTUAL}}
  subsets:
  - {name: v1, labels: {version: v1}}
"""


class TypedBodiesToNodeSink(Base):
    """Our mcp-source's default typed bodies (issue 15): the node sink reads
    the type URLs Istio 1.6 uses and decodes the bodies as Istio's messages
    (protobufjs, from proto/istio/), as Pilot would."""

    def test_node_sink_decodes_istio_types(self):
        self.write_yaml('bookinfo/typed.yaml', TYPED_YAML)
        port = free_port()
        self.ours('mcp-source', [self.src_bin, '--dir', os.path.join(self.tmp, 'config'),
                                 '--listen', f'127.0.0.1:{port}'], port)
        sink = self.node_sink(['--connect', f'127.0.0.1:{port}', '--collection', VS, '--collection', DR])
        vs = sink.wait_for(response(VS, verdict='ack'), 'ACKed push of VS')
        dr = sink.wait_for(response(DR, verdict='ack'), 'ACKed push of DR')
        self.assert_no_nack(sink)
        (r,) = vs['resources']
        self.assertEqual(r['type_url'], 'type.googleapis.com/istio.networking.v1alpha3.VirtualService')
        self.assertEqual(r['body']['hosts'], ['reviews'])
        route = r['body']['http'][0]['route']
        self.assertEqual([(x['destination']['subset'], x['weight']) for x in route], [('v1', 90), ('v2', 10)])
        self.assertEqual(r['body']['http'][0]['retries']['attempts'], 3)
        self.assertEqual(r['body']['http'][0]['retries']['perTryTimeout'], {'seconds': '2'})
        (d,) = dr['resources']
        self.assertEqual(d['type_url'], 'type.googleapis.com/istio.networking.v1alpha3.DestinationRule')
        self.assertEqual(d['body']['trafficPolicy']['loadBalancer'], {'simple': 'LEAST_CONN'})
        self.assertEqual(d['body']['trafficPolicy']['tls'], {'mode': 'ISTIO_MUTUAL'})
        self.assertEqual(d['body']['subsets'], [{'name': 'v1', 'labels': {'version': 'v1'}}])


class OurSourceToNodeSink(Base):
    """(a) our mcp-source serves ResourceSource; the node sink dials it."""

    def run_case(self, incremental):
        self.write_config()
        _, port = self.our_source(['--collection', GW])
        sink = self.node_sink(['--connect', f'127.0.0.1:{port}', '--collection', VS, '--collection', DR,
                               '--collection', CM, '--collection', GW] + (['--incremental'] if incremental else []))
        self.check_node_sink_synced(sink)
        self.check_edit_reaches_node_sink(sink, incremental)
        self.assert_no_nack(sink)

    def test_full_state(self):
        self.run_case(False)

    def test_incremental(self):
        self.run_case(True)

    def test_exit_after_sync(self):
        self.write_config()
        _, port = self.our_source(['--collection', GW])
        sink = self.node_sink(['--connect', f'127.0.0.1:{port}', '--collection', VS, '--collection', GW,
                               '--exit-after-sync'])
        self.assertEqual(sink.p.wait(DEADLINE), 0, sink.describe())
        state = sink.wait_for(lambda l: l.get('event') == 'state', 'final state')
        self.assertEqual(set(state['collections'][VS]), {'bookinfo/reviews', 'bookinfo/ratings'})
        self.assertEqual(state['collections'][GW], {})

    def test_nack_is_not_resent(self):
        # docs/protocol.md, NACK: the sink keeps what it held; the source never
        # pushes the same content again, and pushes again once it changes.
        self.write_config()
        _, port = self.our_source([])
        sink = self.node_sink(['--connect', f'127.0.0.1:{port}', '--collection', VS, '--collection', DR,
                               '--nack', VS])
        first = sink.wait_for(response(VS), 'first VS push')
        self.assertEqual((first['verdict'], first['error']['code']), ('nack', 3))
        sink.wait_for(response(DR, verdict='ack'), 'DR ACKed next to the NACKed VS')
        self.barrier(sink, DR, 0)
        self.assertEqual(len([l for l in sink.lines if response(VS)(l)]), 1, 'NACKed content pushed again')
        mark = sink.mark()
        self.write_yaml('bookinfo/virtualservices.yaml', VS_YAML_EDITED)
        line = sink.wait_for(response(VS), 'VS push after the edit', since=mark)
        self.assertNotEqual(line['nonce'], first['nonce'])
        self.assertEqual([r['version'] for r in line['resources']], ['8'])
        self.barrier(sink, DR, 1)
        self.assertEqual(len([l for l in sink.lines if response(VS)(l)]), 2, 'NACKed content pushed again')

    def test_unknown_collection_keeps_stream(self):
        # docs/protocol.md: an unknown collection is not an error; the others are served.
        self.write_config()
        _, port = self.our_source([])
        sink = self.node_sink(['--connect', f'127.0.0.1:{port}', '--collection', 'example/unknown',
                               '--collection', DR])
        sink.wait_for(response(DR, verdict='ack'), 'DR served next to an unknown collection')
        self.barrier(sink, DR, 0)
        self.assertEqual([l for l in sink.lines if l.get('collection') == 'example/unknown'], [])


T_VS = 'type.googleapis.com/istio.networking.v1alpha3.VirtualService'
T_DR = 'type.googleapis.com/istio.networking.v1alpha3.DestinationRule'
T_GW = 'type.googleapis.com/istio.networking.v1alpha3.Gateway'
T_CM = 'type.googleapis.com/k8s.io.api.core.v1.ConfigMap'
COLLECTION_OF_TYPE = {T_VS: VS, T_DR: DR, T_GW: GW, T_CM: CM}


def sent(collection, **kw):
    """A request the node sink sent on an aggregated API."""
    return lambda l: (l.get('event') == 'sent' and l.get('collection') == collection and
                      all(l.get(k) == v for k, v in kw.items()))


class OurSourceToNodeAggregatedSink(Base):
    """(d) our mcp-source serves AggregatedMeshConfigService (on the same port
    as ResourceSource, no flag); the node sink dials StreamAggregatedResources
    or IncrementalAggregatedResources with type URLs."""

    def start(self, api, extra=(), port=None):
        self.write_config()
        src, port = self.our_source(['--collection', GW], port)
        sink = self.node_sink(['--connect', f'127.0.0.1:{port}', '--api', api, '--collection', T_VS,
                               '--collection', T_DR, '--collection', T_CM, '--collection', T_GW] + list(extra))
        return src, sink, port

    def check_synced(self, sink, api):
        inc = api == 'aggregated-incremental'
        for t in (T_VS, T_DR, T_CM, T_GW):
            line = sink.wait_for(response(t, verdict='ack'), f'ACKed push of {t}')
            self.assertEqual(line['incremental'], inc, line)
            if inc:
                # The type travels in the nonce; the first request said "holds nothing".
                self.assertRegex(line['nonce'], r'^[0-9]+:' + t.replace('.', r'\.') + '$')
                self.assertEqual(sink.wait_for(sent(t, response_nonce=''), 'first request')['initial'], {})
            else:
                self.assertRegex(line['nonce'], r'^[0-9]+$')
                self.assertEqual(sink.wait_for(sent(t, response_nonce=''), 'first request')['version_info'], '')
                ack = sink.wait_for(sent(t, response_nonce=line['nonce']), f'ACK of {t}')
                self.assertEqual(ack['version_info'], line['system_version_info'])  # what is applied
            self.assertEqual(line['removed'], [])
            for r in line['resources']:
                self.assertEqual(r['type_url'], STRUCT)  # the bodies, whatever the type requested
                self.assertEqual(r['body'], BODIES[(COLLECTION_OF_TYPE[t], r['name'])], r['name'])
        self.assertEqual(set(replay(sink.lines, T_VS)), {'bookinfo/reviews', 'bookinfo/ratings'})
        self.assertEqual(replay(sink.lines, T_VS)['bookinfo/reviews'], '7')  # metadata.resourceVersion
        self.assertEqual(set(replay(sink.lines, T_DR)), {'bookinfo/reviews'})
        self.assertEqual(set(replay(sink.lines, T_CM)), {'istio-system/istio'})
        self.assertEqual(replay(sink.lines, T_GW), {})

    def check_edit(self, sink, api):
        mark = sink.mark()
        self.write_yaml('bookinfo/virtualservices.yaml', VS_YAML_EDITED)
        line = sink.wait_for(response(T_VS), 'push after the YAML edit', since=mark)
        self.assertEqual(line['verdict'], 'ack', line)
        self.assertEqual(replay(sink.lines, T_VS), {'bookinfo/reviews': '8'})
        self.assertEqual([r['name'] for r in line['resources']], ['bookinfo/reviews'])
        self.assertEqual(line['resources'][0]['body'], EDITED_REVIEWS)
        if api == 'aggregated-incremental':
            self.assertTrue(line['incremental'], line)
            self.assertEqual(line['removed'], ['bookinfo/ratings'])
        else:
            self.assertFalse(line['incremental'], line)  # full state: ratings is gone by absence
        self.assertEqual(line['total'], 1)
        # Untouched types got nothing: not "nothing within 0.3 s" but
        # nothing before the barrier's push (one aggregated stream keeps the
        # source's order), which is then the only other push.
        end = sink.mark()
        self.barrier(sink, T_DR, 0)
        end = next(k for k in range(end, len(sink.lines)) if response(T_DR)(sink.lines[k])) + 1
        others = [l for l in sink.lines[mark:end] if l.get('event') == 'response' and l['collection'] != T_VS]
        self.assertEqual([l['collection'] for l in others], [T_DR], 'untouched types got nothing')

    def run_case(self, api):
        _, sink, _ = self.start(api)
        self.check_synced(sink, api)
        self.check_edit(sink, api)
        self.assert_no_nack(sink)

    def test_aggregated(self):
        self.run_case('aggregated')

    def test_aggregated_incremental(self):
        self.run_case('aggregated-incremental')

    def nack_case(self, api):
        # istio/istio#12023: a NACK must not be answered by the same push.
        src, sink, _ = self.start(api, ['--nack-name', 'bookinfo/evil'])
        good = sink.wait_for(response(T_VS, verdict='ack'), 'first VS push')
        for t in (T_DR, T_CM, T_GW):
            sink.wait_for(response(t, verdict='ack'), f'{t} ACKed')
        mark = sink.mark()
        self.write_yaml('bookinfo/evil.yaml', VS_YAML.replace('name: ratings', 'name: evil'))
        bad = sink.wait_for(response(T_VS), 'the push the sink rejects', since=mark)
        self.assertEqual((bad['verdict'], bad['error']['code']), ('nack', 3), bad)
        nack = sink.wait_for(sent(T_VS, response_nonce=bad['nonce']), 'the NACK')
        self.assertEqual(nack['error_code'], 3)
        if api == 'aggregated':
            # version_info of a NACK: the previous good version, still applied.
            self.assertEqual(nack['version_info'], good['system_version_info'])
        end = time.monotonic() + DEADLINE
        while 'rejected' not in src.stderr() and time.monotonic() < end:
            time.sleep(0.05)
        self.assertIn('rejected', src.stderr())
        self.barrier(sink, T_DR, 0)
        self.assertEqual([l for l in sink.lines[mark:] if response(T_VS)(l)], [bad], 'NACKed content pushed again')
        self.assertEqual(src.stderr().count('sink rejected'), 1, src.stderr())
        self.assertEqual(set(replay(sink.lines, T_VS)), {'bookinfo/reviews', 'bookinfo/ratings'})
        # The next change is pushed, once, and accepted.
        mark = sink.mark()
        os.unlink(os.path.join(self.tmp, 'config', 'bookinfo', 'evil.yaml'))
        line = sink.wait_for(response(T_VS), 'the push after the fix', since=mark)
        self.assertEqual(line['verdict'], 'ack', line)
        if api == 'aggregated':
            self.assertEqual(sink.wait_for(sent(T_VS, response_nonce=line['nonce']), 'ACK')['version_info'],
                             line['system_version_info'])
        else:
            # The difference from what the sink holds: evil came and went.
            self.assertEqual(line['resources'], [])
        self.assertEqual(set(replay(sink.lines, T_VS)), {'bookinfo/reviews', 'bookinfo/ratings'})
        self.barrier(sink, T_DR, 1)
        self.assertEqual(len([l for l in sink.lines[mark:] if response(T_VS)(l)]), 1)

    def test_aggregated_nack_is_not_resent(self):
        self.nack_case('aggregated')

    def test_aggregated_incremental_nack_is_not_resent(self):
        self.nack_case('aggregated-incremental')

    def test_aggregated_incremental_resumes_after_source_restart(self):
        src, sink, port = self.start('aggregated-incremental')
        self.check_synced(sink, 'aggregated-incremental')
        ratings = replay(sink.lines, T_VS)['bookinfo/ratings']
        self.assertEqual(src.stop(), 0, src.describe())
        self.write_yaml('bookinfo/virtualservices.yaml', VS_YAML_EDITED)  # ratings deleted meanwhile
        mark = sink.mark()
        self.our_source(['--collection', GW], port)
        req = sink.wait_for(sent(T_VS, response_nonce=''), 'the resumed request', since=mark)
        self.assertEqual(req['initial'], {'bookinfo/reviews': '7', 'bookinfo/ratings': ratings})
        line = sink.wait_for(response(T_VS), 'the resumption difference', since=mark)
        self.assertEqual((line['verdict'], line['incremental']), ('ack', True), line)
        self.assertEqual([r['name'] for r in line['resources']], ['bookinfo/reviews'])
        self.assertEqual(line['removed'], ['bookinfo/ratings'])
        self.assertEqual(replay(sink.lines, T_VS), {'bookinfo/reviews': '8'})
        # Unchanged types: an empty difference, answered all the same.
        dr = sink.wait_for(response(T_DR), 'the DR resumption', since=mark)
        self.assertEqual((dr['resources'], dr['removed'], dr['verdict']), ([], [], 'ack'))
        self.assert_no_nack(sink)


class NodeSourceToOurSink(Base):
    """(b) the node source serves ResourceSource; our mcp-sink dials it."""

    def start(self, incremental, extra=()):
        src = self.node_source(['--listen', '127.0.0.1:0'], NODE_STATE)
        addr = self.listening(src)
        self.out = os.path.join(self.tmp, 'mirror')
        sink = self.ours('mcp-sink', [self.sink_bin, '--collection', VS, '--collection', GW, '--connect', addr,
                                      '--json', '--out', self.out, '--node-id', 'interop-sink']
                         + (['--incremental'] if incremental else []) + list(extra))
        return src, sink, addr

    def check_mirror(self, state):
        """--out DIR holds exactly DIR/<collection>/<name>.json per resource held, with
        name, version and the body as JSON (polled: written around the JSON line)."""
        want = {f'{col}/{r["name"]}.json': r for col, res in state.items() for r in res}
        end = time.monotonic() + DEADLINE
        while True:
            files = set()
            for col in state:
                for root, _, names in os.walk(os.path.join(self.out, col)):
                    files |= {os.path.relpath(os.path.join(root, n), self.out) for n in names if not n.startswith('.')}
            if files == set(want):
                try:
                    docs = {f: read_json(os.path.join(self.out, f)) for f in want}
                    if all(d['version'] == want[f]['version'] for f, d in docs.items()):
                        break
                except (OSError, ValueError, KeyError):
                    pass
            if time.monotonic() > end:
                self.fail(f'mirror {self.out}: files {sorted(files)}, want {sorted(want)}')
            time.sleep(0.1)
        for f, r in want.items():
            self.assertEqual((docs[f]['name'], docs[f]['type_url'], docs[f]['body']),
                             (r['name'], STRUCT, r['body']), f)

    def run_case(self, incremental):
        src, sink, _ = self.start(incremental)
        self.check_our_sink_synced(sink, src, NODE_STATE, incremental)
        self.assertEqual(src.wait_for(request(VS, verdict='new'), 'first request')['node'], 'interop-sink')
        self.check_mirror(NODE_STATE)
        changed = self.check_change_reaches_our_sink(sink, src, incremental)
        self.check_mirror(changed)
        self.assert_no_nack(src)
        self.assert_no_nack(sink)

    def test_full_state(self):
        self.run_case(False)

    def test_incremental(self):
        self.run_case(True)

    def test_a_push_of_megabytes_arrives_whole(self):
        # 2,500 resources of about 1 KiB in one push: over gRPC our sink reads
        # it as the read slices hold it (docs/api.md, "A message in
        # fragments"), so many resources cross from one slice into the next.
        # Every one must arrive whole: names, versions and bodies.
        big = {VS: [{'name': f'big/vs-{i:04d}', 'version': f'v{i}',
                     'body': {'hosts': [f'h{i}.example'], 'pad': 'x' * (700 + i % 301)}}
                    for i in range(2500)],
               GW: []}
        src = self.node_source(['--listen', '127.0.0.1:0'], big)
        addr = self.listening(src)
        self.out = os.path.join(self.tmp, 'mirror')
        sink = self.ours('mcp-sink', [self.sink_bin, '--collection', VS, '--collection', GW,
                                      '--connect', addr, '--json', '--out', self.out])
        self.check_our_sink_synced(sink, src, big)
        self.check_mirror(big)
        self.assert_no_nack(src)
        self.assert_no_nack(sink)

    def test_our_sink_nacks_bad_content(self):
        # docs/protocol.md, Sink validation: duplicate names and a body that
        # does not decode are NACKed with INVALID_ARGUMENT; nothing changes.
        # VS: a@2, a@3, b@1 (issue 24 item 11: every one is listed).
        bad = {VS: [{'name': 'default/a', 'version': '2', 'body': {}},
                    {'name': 'default/a', 'version': '3', 'body': {}},
                    {'name': 'default/b', 'version': '1', 'body': {}}],
               GW: [{'name': 'gw', 'version': '1', 'type_url': STRUCT, 'value_b64': '/////w=='}]}
        src = self.node_source(['--listen', '127.0.0.1:0'], bad)
        self.out = os.path.join(self.tmp, 'mirror')
        sink = self.ours('mcp-sink', [self.sink_bin, '--collection', VS, '--collection', GW,
                                      '--connect', self.listening(src), '--json', '--out', self.out])
        for col in bad:
            req = src.wait_for(request(col, verdict='nack'), f'our sink NACKs {col}')
            self.assertEqual(req['error']['code'], 3, req)
            self.assertTrue(req['error']['message'])
            line = sink.wait_for(response(col), f'our sink reports {col}')
            self.assertEqual((line['verdict'], line['total']), ('nack', 0), line)
            # The line gives what the message carried, NACK or not: the
            # version, and every resource, the duplicate and those after it
            # included (the body that does not decode, by the mirror: gw
            # itself).
            push = src.wait_for(lambda l, col=col: l.get('event') == 'push' and l['collection'] == col,
                                f'the push of {col}')
            self.assertEqual(line['system_version_info'], push['system_version_info'], line)
            self.assertEqual([(r['name'], r['version']) for r in line['resources']],
                             {VS: [('default/a', '2'), ('default/a', '3'), ('default/b', '1')],
                              GW: [('gw', '1')]}[col], line)
            self.assertEqual((line['removed'], line['dropped']), ([], []), line)
        self.check_mirror({VS: [], GW: []})  # nothing written
        good = {VS: [{'name': 'default/x', 'version': '1', 'body': {'a': 1}}], GW: []}
        self.set_state(good)
        src.signal(signal.SIGHUP)
        for col in good:
            line = sink.wait_for(response(col, verdict='ack'), f'{col} ACKed once fixed')
            src.wait_for(request(col, verdict='ack', nonce=line['nonce']), f'ACK of fixed {col}')
        self.check_mirror(good)

    def test_exit_after_sync(self):
        src, sink, _ = self.start(False, ['--exit-after-sync'])
        self.assertEqual(sink.p.wait(DEADLINE), 0, sink.describe())
        for col in NODE_STATE:
            src.wait_for(request(col, verdict='ack'), f'ACK of {col} before exit')

    def test_resumption_after_source_restart(self):
        src, sink, addr = self.start(True)
        self.check_our_sink_synced(sink, src, NODE_STATE, True)
        src.stop()
        # The restarted source lost default/b and changed default/a.
        state = {VS: [{'name': 'default/a', 'version': '2', 'body': {'hosts': ['a', 'a2']}},
                      {'name': 'default/c', 'version': '1', 'body': {}}], GW: []}
        mark = sink.mark()
        src2 = self.node_source(['--listen', addr], state)
        req = src2.wait_for(request(VS, verdict='new'), 'resumed request (our sink reconnects)')
        self.assertTrue(req['incremental'])
        self.assertEqual(req['initial'], {'default/a': '1', 'default/b': '1', 'default/c': '1'})
        self.assertEqual(src2.wait_for(request(GW, verdict='new'), 'resumed GW request')['initial'], {})
        line = sink.wait_for(response(VS, verdict='ack'), 'resumption diff', since=mark)
        self.assertTrue(line['incremental'], line)
        self.assertEqual([r['name'] for r in line['resources']], ['default/a'])
        self.assertEqual(line['removed'], ['default/b'])
        self.assertEqual(line['total'], 2)
        self.assertEqual(replay(sink.lines, VS), {'default/a': '2', 'default/c': '1'})
        src2.wait_for(request(VS, verdict='ack', nonce=line['nonce']), 'ACK of the resumption diff')
        self.assert_no_nack(src2)


T_VS = 'type.googleapis.com/istio.networking.v1alpha3.VirtualService'
T_DR = 'type.googleapis.com/istio.networking.v1alpha3.DestinationRule'
T_GW = 'type.googleapis.com/istio.networking.v1alpha3.Gateway'


class NodeAggregatedSourceToOurSink(Base):
    """(d) the node source serves IncrementalAggregatedResources with nonces
    of its own form (plain counters); our mcp-sink dials it. The protocol
    leaves the nonce to the source: a response is never NACKed for it."""

    def sync(self, state, types):
        src = self.node_source(['--listen', '127.0.0.1:0', '--api', 'aggregated-incremental'], state)
        addr = self.listening(src)
        args = [self.sink_bin, '--api', 'aggregated-incremental', '--connect', addr, '--json',
                '--exit-after-sync']
        for t in types:
            args += ['--collection', t]
        sink = self.ours('mcp-sink', args)
        self.assertEqual(sink.p.wait(DEADLINE), 0, sink.describe() + '\n' + src.describe())
        for t, res in state.items():
            line = sink.wait_for(response(t, verdict='ack'), f'our sink ACKs {t}')
            self.assertEqual(sorted(r['name'] for r in line['resources']), sorted(r['name'] for r in res))
            self.assertEqual(replay(sink.lines, t), {r['name']: r['version'] for r in res})
            src.wait_for(request(t, verdict='ack', nonce=line['nonce']), f'node source sees the ACK of {t}')
        self.assert_no_nack(src)
        self.assert_no_nack(sink)

    def test_one_type_with_foreign_nonces(self):
        # Struct bodies: only the stream's type says which type they are.
        self.sync({T_VS: [{'name': 'default/a', 'version': '1', 'body': {'hosts': ['a']}}]}, [T_VS])

    def test_several_types_with_foreign_nonces(self):
        # Bodies of the requested types (as Istio's sources send them); an
        # empty answer goes to the type not answered yet.
        state = {T_VS: [{'name': 'default/a', 'version': '1', 'type_url': T_VS, 'value_b64': 'CgFh'}],
                 T_DR: [{'name': 'default/r', 'version': '2', 'type_url': T_DR, 'value_b64': 'CgFi'},
                        {'name': 'default/s', 'version': '3', 'type_url': T_DR, 'value_b64': 'CgFj'}],
                 T_GW: []}
        self.sync(state, [T_VS, T_DR, T_GW])


class Reverse(Base):
    """(c) ResourceSink: the source dials the sink, in both pairings."""

    def test_our_source_dials_node_sink(self):
        self.write_config()
        sink = self.node_sink(['--listen', '127.0.0.1:0', '--collection', VS, '--collection', DR,
                               '--collection', CM, '--collection', GW])
        addr = self.listening(sink)
        self.ours('mcp-source', [self.src_bin, '--dir', os.path.join(self.tmp, 'config'), '--connect', addr,
                                 '--collection', GW, '--debounce', '20', '--body', 'struct'])
        trig = sink.wait_for(response('$triggerCollection'), 'the dial-out trigger')
        self.assertEqual((trig['nonce'], trig['resources'], trig['verdict'], trig['error']['code']),
                         ('', [], 'nack', 12))
        self.check_node_sink_synced(sink)
        self.check_edit_reaches_node_sink(sink, False)
        self.assert_no_nack(sink)

    def test_node_source_dials_our_sink(self):
        port = free_port()
        sink = self.ours('mcp-sink', [self.sink_bin, '--collection', VS, '--collection', GW,
                                      '--listen', f'127.0.0.1:{port}', '--json', '--incremental'], port)
        src = self.node_source(['--connect', f'127.0.0.1:{port}'], NODE_STATE)
        t = src.wait_for(lambda l: l.get('verdict') == 'trigger', 'our sink NACKs the trigger')
        self.assertEqual(t['error']['code'], 12)
        # Expected, so no rejection on our side: marked, and not warned.
        line = sink.wait_for(response('$triggerCollection'), 'our sink reports the trigger')
        self.assertEqual((line['verdict'], line.get('trigger')), ('nack', True), line)
        self.assertNotIn('$triggerCollection', ''.join(
            l for l in sink.stderr().splitlines(True) if 'warning' in l or 'error' in l))
        self.check_our_sink_synced(sink, src, NODE_STATE, True)
        self.check_change_reaches_our_sink(sink, src, True)
        self.assert_no_nack(src)
        self.assert_no_nack(sink)


if __name__ == '__main__':
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument('--build-dir', default='build')
    ap.add_argument('--transport', choices=('grpc', 'h2c'), default='grpc')
    OPTS, rest = ap.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
