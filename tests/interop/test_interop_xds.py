#!/usr/bin/env python3
"""Interop: our mcp-source --api xds against an independent xDS client that
behaves as istiod's pkg/adsc does (xds_adsc.py: python grpcio, the Envoy
and Istio protos compiled by protoc), on --transport grpc or h2c.

    python3 tests/interop/test_interop_xds.py --build-dir build [--transport grpc|h2c]

What istiod does with `configSources: xds://`: subscribe to every config
type with a timestamp nonce, decode each body into the real Istio type,
ACK, see edits arrive, NACK one (never sent again), reconnect (delta:
with initial_resource_versions, getting only the difference). Every wait
is bounded (INTEROP_TIMEOUT seconds, default 20) and waits for an event.
Needs python3-grpcio and python3-protobuf (Debian; scripts/install-deps.sh):
when the running python lacks grpc, the script runs itself again with
/usr/bin/python3.
"""

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import grpc  # noqa: F401
except ImportError:
    if sys.executable != '/usr/bin/python3' and os.access('/usr/bin/python3', os.X_OK):
        os.execv('/usr/bin/python3', ['/usr/bin/python3'] + sys.argv)
    print('python3-grpcio is not installed: skipped', file=sys.stderr)
    sys.exit(77)

import grpc  # noqa: E402
import test_interop as ti  # noqa: E402  (Proc, free_port)
import xds_adsc  # noqa: E402

DEADLINE = ti.DEADLINE
OPTS = argparse.Namespace(build_dir='build', transport='grpc')
VS = 'networking.istio.io/v1alpha3/VirtualService'
VS_V1 = 'networking.istio.io/v1/VirtualService'
DR = 'networking.istio.io/v1alpha3/DestinationRule'


def vs_yaml(name, ns, host, api='networking.istio.io/v1alpha3'):
    return (f'apiVersion: {api}\nkind: VirtualService\n'
            f'metadata: {{name: {name}, namespace: {ns}}}\n'
            f'spec: {{hosts: [{host}]}}\n')


def dr_yaml(name, ns, host):
    return (f'apiVersion: networking.istio.io/v1alpha3\nkind: DestinationRule\n'
            f'metadata: {{name: {name}, namespace: {ns}}}\n'
            f'spec: {{host: {host}}}\n')


class XdsBase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.src_bin = os.path.join(OPTS.build_dir, 'tools', 'mcp-source')
        if not os.access(cls.src_bin, os.X_OK):
            raise unittest.SkipTest(f'mcp-source is not built in {OPTS.build_dir}')
        r = subprocess.run([cls.src_bin, '--help'], capture_output=True, text=True)
        if 'xds' not in r.stdout + r.stderr:
            raise unittest.SkipTest('mcp-source --help does not offer --api xds')
        if not shutil.which('protoc'):
            raise unittest.SkipTest('protoc (protobuf-compiler) is not installed')
        xds_adsc.types()  # compile the descriptors once

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix='mcp-interop-xds-')
        self.conf = os.path.join(self.tmp, 'config')
        os.makedirs(self.conf)
        self.procs, self.clients = [], []
        self.src = None

    def tearDown(self):
        failed = not getattr(self._outcome, 'success', True)
        for c in self.clients:
            c.close()
        unclean = []
        for p in self.procs:
            if p.stop() not in (0, None):
                unclean.append(p)
            if failed or os.environ.get('INTEROP_VERBOSE'):
                sys.stderr.write(p.describe() + '\n')
        report = '\n'.join(p.describe() for p in unclean)
        for p in self.procs:
            p.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if unclean and not failed:
            self.fail('children did not exit with status 0:\n' + report)

    def write_yaml(self, rel, text):
        """Writes (renames into place: never half a file) and, once
        mcp-source runs, returns when it applied the change."""
        mark = self.src.stderr().count('changed') if self.src else 0
        path = os.path.join(self.conf, rel)
        tmp = path + '.tmp'
        with open(tmp, 'w') as f:
            f.write(text)
        os.replace(tmp, path)
        if self.src:
            self.wait_until(lambda: self.src.stderr().count('changed') > mark, 'the edit applied', self.src)

    def source(self, *extra, apis='xds'):
        self.port, self.debug = ti.free_port(), ti.free_port()
        argv = [self.src_bin, '--dir', self.conf, '--listen', f'127.0.0.1:{self.port}',
                '--api', apis, '--debounce', '0', '--transport', OPTS.transport,
                '--debug-listen', f'127.0.0.1:{self.debug}'] + list(extra)
        p = ti.Proc('mcp-source', argv)
        self.procs.append(p)
        self.wait_until(lambda: 'APIs:' in p.stderr(), 'mcp-source listens', p)
        self.src = p
        return p

    def wait_until(self, cond, what, p=None):
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            if cond():
                return
            if p is not None and p.p.poll() is not None:
                self.fail(f'{p.name} exited while waiting for {what}\n{p.describe()}')
            time.sleep(0.02)
        self.fail(f'timed out waiting for {what}\n' + (p.describe() if p else ''))

    def client(self, delta=False, **kw):
        c = xds_adsc.Adsc(f'127.0.0.1:{self.port}', delta=delta, **kw)
        self.clients.append(c)
        return c

    def recv(self, c, type_url=None):
        """The next response (of |type_url| when given; others are ACKed)."""
        end = time.monotonic() + DEADLINE
        while True:
            try:
                r = c.recv(max(0.01, end - time.monotonic()))
            except queue.Empty:
                self.fail(f'no response for {type_url or "any type"} in {DEADLINE}s\n{self.src.describe()}')
            if type_url is None or r.type_url == type_url:
                return r
            c.answer(r)

    def syncz(self):
        with urllib.request.urlopen(f'http://127.0.0.1:{self.debug}/debug/syncz', timeout=DEADLINE) as f:
            return json.load(f)

    def sync_all(self, c, types):
        """adsc's first sync: one response per type, each ACKed; returns
        them by type URL."""
        got = {}
        while len(got) < len(types):
            r = self.recv(c)
            self.assertNotIn(r.type_url, got, 'a second response before every type was answered')
            got[r.type_url] = r
            c.answer(r)
        self.assertTrue(c.has_synced())
        return got


class SotwAdsc(XdsBase):
    def test_adsc_syncs_every_type_decodes_bodies_acks_and_sees_edits(self):
        self.write_yaml('vs.yaml', vs_yaml('reviews', 'bookinfo', 'reviews') + '---\n' +
                        vs_yaml('ratings', 'bookinfo', 'ratings', api='networking.istio.io/v1'))
        self.source()
        c = self.client()
        types = xds_adsc.config_initial_types([VS_V1, 'type.googleapis.com/envoy.config.cluster.v3.Cluster'])
        c.start(types)
        got = self.sync_all(c, types)
        for t in (VS, VS_V1):
            r = got[t]
            self.assertEqual(r.names(), ['bookinfo/ratings', 'bookinfo/reviews'])
            body = r.get('bookinfo/reviews').body
            self.assertEqual(type(body).DESCRIPTOR.full_name, 'istio.networking.v1alpha3.VirtualService')
            self.assertEqual(list(body.hosts), ['reviews'])
            self.assertEqual(list(r.get('bookinfo/ratings').body.hosts), ['ratings'])
        for t in types:
            if t not in (VS, VS_V1):
                self.assertEqual(got[t].resources, [], t)
        # An edit reaches both spellings, with the complete set.
        self.write_yaml('vs.yaml', vs_yaml('reviews', 'bookinfo', 'reviews-v2'))
        seen = {}
        while len(seen) < 2:
            r = self.recv(c)
            c.answer(r)
            if r.type_url in (VS, VS_V1):
                self.assertNotEqual(r.version, got[r.type_url].version)
                seen[r.type_url] = r
        for r in seen.values():
            self.assertEqual(r.names(), ['bookinfo/reviews'])
            self.assertEqual(list(r.get('bookinfo/reviews').body.hosts), ['reviews-v2'])
        # /debug/syncz shows the node istiod sent and its ACKs.
        def xds_stream():
            s = [x for x in self.syncz()['streams'] if x['api'] == 'xds']
            self.assertEqual(len(s), 1)
            return s[0]

        def vs_type():
            return [x for x in xds_stream()['collections'] if x['type_url'] == VS][0]
        self.wait_until(lambda: vs_type()['version_acked'] == seen[VS].version, 'the ACK seen', self.src)
        s = xds_stream()
        self.assertEqual(s['node']['id'], c.node_id)
        self.assertEqual(s['node']['annotations']['GENERATOR'], 'api')
        self.assertEqual(vs_type()['collection'], 'istio/networking/v1alpha3/virtualservices')

    def test_nack_is_logged_counted_and_never_resent(self):
        self.write_yaml('vs.yaml', vs_yaml('reviews', 'bookinfo', 'reviews'))
        self.write_yaml('dr.yaml', dr_yaml('reviews', 'bookinfo', 'reviews'))
        self.source()
        c = self.client()
        c.start([VS, DR])
        got = self.sync_all(c, [VS, DR])
        # An edit to VS, NACKed.
        self.write_yaml('vs.yaml', vs_yaml('reviews', 'bookinfo', 'bad-host'))
        r = self.recv(c, VS)
        c.answer(r, nack='cannot apply bad-host')
        # Then an edit of another type: its response comes, and no VS
        # response came in between (the rejected version is not re-sent).
        self.write_yaml('dr.yaml', dr_yaml('reviews', 'bookinfo', 'reviews-2'))
        while True:
            x = self.recv(c)
            self.assertNotEqual(x.type_url, VS, 'the NACKed version was sent again')
            c.answer(x)
            if x.type_url == DR and x.version != got[DR].version:
                break
        self.wait_until(lambda: 'rejected ' + VS in self.src.stderr(), 'the NACK logged', self.src)
        self.assertIn(c.node_id, self.src.stderr())
        s = [x for x in self.syncz()['streams'] if x['api'] == 'xds'][0]
        vs = [x for x in s['collections'] if x['type_url'] == VS][0]
        self.assertEqual(vs['nacks'], 1)  # logged after it was counted
        self.assertEqual(vs['last_nack'], 'cannot apply bad-host')
        self.assertEqual(vs['version_acked'], got[VS].version)
        # The stream keeps serving: a new edit comes.
        self.write_yaml('vs.yaml', vs_yaml('reviews', 'bookinfo', 'good-host'))
        r2 = self.recv(c, VS)
        self.assertNotEqual(r2.version, r.version)
        self.assertEqual(list(r2.get('bookinfo/reviews').body.hosts), ['good-host'])
        with urllib.request.urlopen(f'http://127.0.0.1:{self.debug}/metrics', timeout=DEADLINE) as f:
            metrics = f.read().decode()
        self.assertIn(f'mcp_xds_nacks_total{{component="mcp-source",type_url="{VS}"}} 1', metrics)

    def test_reconnect_gets_full_state_again(self):
        self.write_yaml('vs.yaml', vs_yaml('reviews', 'bookinfo', 'reviews'))
        self.source()
        c = self.client()
        c.start([VS])
        self.sync_all(c, [VS])
        c.stop()
        self.write_yaml('vs.yaml', vs_yaml('ratings', 'bookinfo', 'ratings'))
        c.start([VS])
        r = self.recv(c, VS)
        self.assertEqual(r.names(), ['bookinfo/ratings'])

    def test_api_xds_alone_answers_mcp_unimplemented(self):
        self.source()
        ch = grpc.insecure_channel(f'127.0.0.1:{self.port}')
        try:
            call = ch.stream_stream('/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream',
                                    request_serializer=lambda b: b, response_deserializer=lambda b: b)
            with self.assertRaises(grpc.RpcError) as e:
                for _ in call(iter([b''])):
                    pass
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        finally:
            ch.close()

    def test_require_identity_refuses_a_caller_without_one(self):
        self.write_yaml('vs.yaml', vs_yaml('reviews', 'bookinfo', 'reviews'))
        self.source('--xds-require-identity', 'spiffe://cluster.local/ns/istio-system/sa/*')
        c = self.client()
        c.start([VS])
        with self.assertRaises(grpc.RpcError) as e:
            self.recv(c)
        self.assertEqual(e.exception.code(), grpc.StatusCode.PERMISSION_DENIED)


class DeltaAdsc(XdsBase):
    def put_vs(self, hosts):
        """One file with a VirtualService ns/NAME per entry of |hosts|;
        returns once mcp-source applied it (one apply per rename)."""
        self.write_yaml('vs.yaml', '---\n'.join(vs_yaml(n, 'ns', h) for n, h in sorted(hosts.items())))

    def test_delta_resumes_with_initial_versions_and_gets_only_the_difference(self):
        self.put_vs({'a': 'a', 'b': 'b', 'c': 'c'})
        self.source()
        c = self.client(delta=True)
        c.start([VS, DR])
        got = self.sync_all(c, [VS, DR])
        self.assertEqual(got[VS].names(), ['ns/a', 'ns/b', 'ns/c'])
        self.assertEqual(list(got[VS].get('ns/a').body.hosts), ['a'])
        self.assertEqual(got[DR].resources, [])
        # A change while connected: only it, and a removal.
        self.put_vs({'a': 'a2', 'b': 'b'})
        r = self.recv(c, VS)
        self.assertEqual((r.names(), r.removed), (['ns/a'], ['ns/c']))
        self.assertEqual(list(r.get('ns/a').body.hosts), ['a2'])
        c.answer(r)
        self.assertEqual(sorted(c.held[VS]), ['ns/a', 'ns/b'])
        # Away: a goes, b stays as it was, d comes. Back with what it holds
        # (initial_resource_versions): only the difference.
        c.stop()
        self.put_vs({'b': 'b', 'd': 'd'})
        c.start([VS])
        r = self.recv(c, VS)
        self.assertEqual(r.names(), ['ns/d'])
        self.assertEqual(r.removed, ['ns/a'])
        self.assertEqual(list(r.get('ns/d').body.hosts), ['d'])
        c.answer(r)
        self.assertEqual(sorted(c.held[VS]), ['ns/b', 'ns/d'])
        # A NACK keeps the stream; the next change comes.
        self.put_vs({'b': 'b3', 'd': 'd'})
        r = self.recv(c, VS)
        self.assertEqual(r.names(), ['ns/b'])
        c.answer(r, nack='no')
        self.put_vs({'b': 'b4', 'd': 'd'})
        r = self.recv(c, VS)
        self.assertEqual(list(r.get('ns/b').body.hosts), ['b4'])
        s = [x for x in self.syncz()['streams'] if x['api'] == 'xds'][0]
        self.assertTrue(s['delta'])
        self.assertEqual(s['nacks'], 1)


def main():
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument('--build-dir', default=OPTS.build_dir)
    ap.add_argument('--transport', choices=('grpc', 'h2c'), default='grpc')
    args, rest = ap.parse_known_args()
    OPTS.build_dir, OPTS.transport = args.build_dir, args.transport
    prog = unittest.main(module='__main__', argv=[sys.argv[0]] + rest, exit=False)
    r = prog.result
    if not r.wasSuccessful():
        sys.exit(1)
    sys.exit(77 if r.testsRun == 0 and r.skipped else 0)


if __name__ == '__main__':
    main()
