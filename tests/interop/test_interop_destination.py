#!/usr/bin/env python3
"""Interop, Conduit's Destination API: our programs against @grpc/grpc-js peers.

    python3 tests/interop/test_interop_destination.py --build-dir build [--transport grpc|h2c] [-v] [-k PATTERN]

- OurSourceToNodeClient: our `mcp-source --api destination --dir D` (Service +
  Endpoints YAML) against dest_client.js: exact first messages for services
  with endpoints (IPv4 and IPv6, named and unnamed ports, pod labels), without
  endpoints, absent, no such port, a foreign host, an IP literal; then exact
  add/remove diffs after YAML edits, nothing for an edit that leaves the set
  as it was, no_endpoints{exists:true} when the last endpoint goes,
  no_endpoints{exists:false} when the Service goes; INVALID_ARGUMENT for a bad
  scheme or path; --destination-heartbeat, --dns-zone, --api mcp (no
  Destination service).
- NodeServerToOurSink: dest_server.js against our `mcp-sink --api destination`:
  the --json lines (issue 14's shape, exact addrs and totals), --out files, a
  change, the stale set kept until the first message of a new stream, empty
  `add` heartbeats, --exit-after-sync.
Both --transport grpc and h2c (one per run). See engine_interop.py for skips.
"""

import json
import os
import signal
import time
import unittest

from engine_interop import EngineBase, DEADLINE, main
import test_interop as ti

WEB = 'web.default.svc.cluster.local'
V6 = 'v6.default.svc.cluster.local'

SERVICES_YAML = """\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: admin, port: 9000, targetPort: 9901}
---
apiVersion: v1
kind: Service
metadata: {name: v6, namespace: default}
spec:
  ports:
  - {port: 80, targetPort: 8080}
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: default}
spec:
  ports:
  - {port: 80}
---
apiVersion: v1
kind: Service
metadata: {name: unready, namespace: default}
spec:
  ports:
  - {name: http, port: 80}
"""


def endpoints_yaml(web_addrs, web_not_ready=('10.1.0.4',), v6_addrs=('fd00::1', 'fd00::2'), pod_suffix=''):
    """Endpoints of web (pods for all but 10.1.0.3), v6 and unready, as
    Kubernetes writes them: `subsets` at the top level, no `spec`."""
    def addr(ip):
        if ip == '10.1.0.3':
            return f'  - ip: {ip}\n'
        return f'  - ip: {ip}\n    targetRef: {{kind: Pod, name: web-{ip.split(".")[-1]}{pod_suffix}, namespace: default}}\n'
    web = ''.join(addr(ip) for ip in web_addrs)
    nr = ''.join(f'  - ip: {ip}\n' for ip in web_not_ready)
    out = 'apiVersion: v1\nkind: Endpoints\nmetadata: {name: web, namespace: default}\nsubsets:\n'
    out += '- addresses:' + ('\n' + web if web else ' []\n')
    if nr:
        out += '  notReadyAddresses:\n' + nr
    out += '  ports:\n  - {name: http, port: 8080, protocol: TCP}\n  - {name: admin, port: 9901, protocol: TCP}\n'
    out += '---\napiVersion: v1\nkind: Endpoints\nmetadata: {name: v6, namespace: default}\nsubsets:\n'
    out += '- addresses:\n' + ''.join(f'  - ip: "{ip}"\n' for ip in v6_addrs) + '  ports:\n  - {port: 8080}\n'
    out += ('---\napiVersion: v1\nkind: Endpoints\nmetadata: {name: unready, namespace: default}\nsubsets:\n'
            '- notReadyAddresses:\n  - ip: 10.2.0.1\n  ports:\n  - {name: http, port: 80}\n')
    return out


WEB3 = ['10.1.0.1', '10.1.0.2', '10.1.0.3']
LABELS_WEB = {'k8s_namespace': 'default', 'k8s_service': 'web'}


def dest_lines(p, authority, since=0):
    """p: a Proc or a list of its lines."""
    lines = p if isinstance(p, list) else p.lines
    return [l for l in lines[since:] if l.get('event') == 'destination' and l.get('authority') == authority]


def held(lines):
    """Replay destination lines (of one authority) to the address set."""
    s = set()
    for l in lines:
        if l.get('first'):
            s = set()
        if l['update'] == 'add':
            s |= set(l['addrs'])
        elif l['update'] == 'remove':
            s -= set(l['addrs'])
        else:
            s = set()
    return s


class OurSourceToNodeClient(EngineBase):
    needs = (('mcp-source', ('--api', 'destination')),)

    def start(self, extra=(), authorities=()):
        self.write_yaml('default/services.yaml', SERVICES_YAML)
        self.write_yaml('default/endpoints.yaml', endpoints_yaml(WEB3))
        port = ti.free_port()
        self.src = self.ours('mcp-source', [self.src_bin, '--api', 'destination', '--dir', self.conf,
                                            '--listen', f'127.0.0.1:{port}', '--debounce', '20'] + list(extra), port)
        self.addr = f'127.0.0.1:{port}'
        args = ['--connect', self.addr]
        for a in authorities:
            args += ['--authority', a]
        self.cl = self.node_peer('dest_client.js', args)
        return self.cl

    def web_edits(self, cl):
        """10.1.0.5 comes, then goes: returns web:80's line for the second
        edit (a barrier: whatever the source wrote before it arrived first)."""
        for addrs, update in ((WEB3 + ['10.1.0.5'], 'add'), (WEB3, 'remove')):
            mark = cl.mark()
            self.write_yaml('default/endpoints.yaml', endpoints_yaml(addrs))
            r = cl.wait_for(lambda l, u=update: l.get('authority') == f'{WEB}:80' and l.get('update') == u and
                            l['addrs'] == ['10.1.0.5:8080'], f'the barrier edit ({update} 10.1.0.5)', mark)
        return r

    def first(self, authority):
        return self.cl.wait_for(lambda l: l.get('event') == 'destination' and l.get('authority') == authority,
                                f'the first message for {authority}')

    def test_first_messages(self):
        auths = [f'{WEB}:80', WEB, f'{WEB}.:80', f'{WEB}:9000', V6, 'empty.default.svc.cluster.local',
                 'unready.default.svc.cluster.local:80', f'{WEB}:81', 'nope.default.svc.cluster.local',
                 'example.com:443', '10.9.8.7:1234']
        cl = self.start(authorities=auths)
        cl.wait_for(lambda l: l.get('event') == 'synced', 'every authority answered')
        for a in (f'{WEB}:80', WEB, f'{WEB}.:80'):
            w = self.first(a)
            self.assertEqual((w['update'], sorted(w['addrs']), w['total'], w['first']),
                             ('add', [f'{ip}:8080' for ip in WEB3], 3, True), w)
            self.assertEqual(w['weights'], {f'{ip}:8080': 1 for ip in WEB3})
            self.assertEqual(w['addr_labels'], {'10.1.0.1:8080': {'k8s_pod': 'web-1'},
                                                '10.1.0.2:8080': {'k8s_pod': 'web-2'}})
            self.assertEqual(w['set_labels'], LABELS_WEB)
        admin = self.first(f'{WEB}:9000')
        self.assertEqual(sorted(admin['addrs']), [f'{ip}:9901' for ip in WEB3])
        v6 = self.first(V6)
        self.assertEqual((v6['update'], sorted(v6['addrs'])), ('add', ['[fd00::1]:8080', '[fd00::2]:8080']))
        self.assertEqual(v6['set_labels'], {'k8s_namespace': 'default', 'k8s_service': 'v6'})
        for a, exists in (('empty.default.svc.cluster.local', True), ('unready.default.svc.cluster.local:80', True),
                          (f'{WEB}:81', False), ('nope.default.svc.cluster.local', False), ('example.com:443', False)):
            l = self.first(a)
            self.assertEqual((l['update'], l['exists'], l['total']), ('no_endpoints', exists, 0), l)
        ip = self.first('10.9.8.7:1234')
        self.assertEqual((ip['update'], ip['addrs']), ('add', ['10.9.8.7:1234']))
        # Barrier: two edits of web, each a pass of the source over its
        # streams, all on the one connection: anything more for the literal
        # would be written before web's second update.
        self.web_edits(cl)
        self.assertEqual(len(dest_lines(cl, '10.9.8.7:1234')), 1, 'an IP literal: one add, then nothing more')
        bad = [l for l in cl.lines if l.get('event') in ('invalid', 'status')]
        self.assertEqual(bad, [], cl.describe())

    def test_changes_propagate_exactly(self):
        auths = [f'{WEB}:80', f'{WEB}:9000', V6, 'empty.default.svc.cluster.local']
        cl = self.start(authorities=auths)
        cl.wait_for(lambda l: l.get('event') == 'synced', 'synced')
        # 10.1.0.1 goes, 10.1.0.5 comes (ready), 10.1.0.4 stays not ready.
        mark1 = cl.mark()
        self.write_yaml('default/endpoints.yaml', endpoints_yaml(['10.1.0.2', '10.1.0.3', '10.1.0.5']))
        for a in (f'{WEB}:80', f'{WEB}:9000'):
            cl.wait_for(lambda l, a=a: l.get('authority') == a and l.get('update') == 'remove', f'remove on {a}', mark1)
            cl.wait_for(lambda l, a=a: l.get('authority') == a and l.get('update') == 'add' and l['addrs'], f'add on {a}', mark1)

        # An edit that leaves web's addresses as they were (one more not-ready
        # address), together with a change to v6 (to know it was applied).
        # It is also the first edit's barrier: the source wrote all it had
        # for that one before v6's line (one connection, in order).
        mark2 = cl.mark()
        self.write_yaml('default/endpoints.yaml', endpoints_yaml(['10.1.0.2', '10.1.0.3', '10.1.0.5'],
                                                                 web_not_ready=('10.1.0.4', '10.1.0.9'),
                                                                 v6_addrs=('fd00::2',)))
        r = cl.wait_for(lambda l: l.get('authority') == V6, 'v6 change', mark1)
        self.assertEqual((r['update'], r['addrs'], r['total']), ('remove', ['[fd00::1]:8080'], 1))
        first_edit = cl.lines[mark1:cl.index(r)]
        for a, port in ((f'{WEB}:80', 8080), (f'{WEB}:9000', 9901)):
            ls = dest_lines(first_edit, a)
            adds = [x for l in ls if l['update'] == 'add' for x in l['addrs']]
            rms = [x for l in ls if l['update'] == 'remove' for x in l['addrs']]
            self.assertEqual((adds, rms), ([f'10.1.0.5:{port}'], [f'10.1.0.1:{port}']), ls)
            self.assertEqual(ls[-1]['total'], 3)
            self.assertEqual(held(dest_lines(cl.lines[:cl.index(r)], a)), {f'10.1.0.{i}:{port}' for i in (2, 3, 5)})
        self.assertEqual(dest_lines(first_edit, V6), [], 'v6 did not change')
        self.assertEqual(dest_lines(first_edit, 'empty.default.svc.cluster.local'), [])

        # A pod renamed behind the same address: re-sent in an add. (The
        # barrier of the edit invisible to web, below.)
        mark3 = cl.mark()
        self.write_yaml('default/endpoints.yaml', endpoints_yaml(['10.1.0.2', '10.1.0.3', '10.1.0.5'],
                                                                 v6_addrs=('fd00::2',), pod_suffix='-b'))
        r = cl.wait_for(lambda l: l.get('authority') == f'{WEB}:80', 'the relabelled ones', mark2)
        self.assertEqual((r['update'], sorted(r['addrs'])), ('add', ['10.1.0.2:8080', '10.1.0.5:8080']), r)
        self.assertEqual(r['addr_labels']['10.1.0.2:8080'], {'k8s_pod': 'web-2-b'})
        self.assertEqual(r['total'], 3)
        relabelled = ['10.1.0.2', '10.1.0.5']
        bad = [l for l in cl.lines[mark2:cl.index(r)] if l.get('event') == 'destination' and l['authority'] != V6 and
               not (l['update'] == 'add' and sorted(x.split(':')[0] for x in l['addrs']) == relabelled)]
        self.assertEqual(bad, [], f'an edit invisible to web sent something (lines from {mark3} are the relabel\'s)')

        # The last endpoint goes: no_endpoints{exists:true}; the Service
        # goes: no_endpoints{exists:false}; it comes back: add with all.
        mark = cl.mark()
        self.write_yaml('default/endpoints.yaml', endpoints_yaml([], v6_addrs=('fd00::2',)))
        r = cl.wait_for(lambda l: l.get('authority') == f'{WEB}:80', 'no endpoints left', mark)
        self.assertEqual((r['update'], r.get('exists'), r['total']), ('no_endpoints', True, 0), r)
        mark = cl.mark()
        self.write_yaml('default/services.yaml', SERVICES_YAML.split('---\n', 1)[1])
        r = cl.wait_for(lambda l: l.get('authority') == f'{WEB}:80', 'service deleted', mark)
        self.assertEqual((r['update'], r.get('exists')), ('no_endpoints', False), r)
        mark = cl.mark()
        self.write_yaml('default/services.yaml', SERVICES_YAML)
        self.write_yaml('default/endpoints.yaml', endpoints_yaml(WEB3))
        r = cl.wait_for(lambda l: l.get('authority') == f'{WEB}:80' and l['update'] == 'add', 'service back', mark)
        # Barrier: v6 changes once more, web does not; what the source had
        # for web came before v6's line.
        mark_b = cl.mark()
        self.write_yaml('default/endpoints.yaml', endpoints_yaml(WEB3, v6_addrs=('fd00::2',)))
        b = cl.wait_for(lambda l: l.get('authority') == V6 and l['update'] == 'remove', 'the barrier (v6)', mark_b)
        upto = cl.lines[:cl.index(b)]
        self.assertEqual(held(dest_lines(upto, f'{WEB}:80')), {f'{ip}:8080' for ip in WEB3})
        ls = dest_lines(upto, f'{WEB}:80', mark)
        self.assertNotIn('remove', [l['update'] for l in ls], ls)
        # The empty service got an endpoint nowhere: still nothing for it.
        self.assertEqual(len(dest_lines(upto, 'empty.default.svc.cluster.local')), 1)

    def test_changes_coalesce_within_the_debounce(self):
        # Edits 30 ms apart inside a 500 ms debounce. The first may go at
        # once (the debounce's leading edge, when it comes a window after
        # the first message); those that follow within the window are
        # coalesced: the client hears the net change only (10.1.0.5 came
        # and went: never sent).
        self.write_yaml('default/services.yaml', SERVICES_YAML)
        self.write_yaml('default/endpoints.yaml', endpoints_yaml(WEB3))
        port = ti.free_port()
        self.ours('mcp-source', [self.src_bin, '--api', 'destination', '--dir', self.conf,
                                 '--listen', f'127.0.0.1:{port}', '--debounce', '500'], port)
        cl = self.node_peer('dest_client.js', ['--connect', f'127.0.0.1:{port}', '--authority', f'{WEB}:80'])
        cl.wait_for(lambda l: l.get('event') == 'synced', 'synced')
        mark = cl.mark()
        four = WEB3 + ['10.1.0.10']
        for addrs in (four, four + ['10.1.0.5'], four, four + ['10.1.0.6']):
            self.write_yaml('default/endpoints.yaml', endpoints_yaml(addrs))
            time.sleep(0.03)
        cl.wait_for(lambda l: l.get('event') == 'destination' and '10.1.0.6:8080' in l.get('addrs', []),
                    'the coalesced change', mark)
        ls = dest_lines(cl, f'{WEB}:80', mark)
        got = [(l['update'], sorted(l['addrs']), l['total']) for l in ls]
        self.assertIn(got, ([('add', ['10.1.0.10:8080', '10.1.0.6:8080'], 5)],
                            [('add', ['10.1.0.10:8080'], 4), ('add', ['10.1.0.6:8080'], 5)]), ls)

    def test_a_change_undone_within_the_debounce_sends_nothing(self):
        # 10.1.0.7 comes and goes inside the window that 10.1.0.8's change
        # opened: the set is as it was, so nothing is sent for it (issue
        # 14). 10.1.0.9 comes after it within the window: its update is the
        # event to wait for (any update for 10.1.0.7 would come first).
        self.write_yaml('default/services.yaml', SERVICES_YAML)
        self.write_yaml('default/endpoints.yaml', endpoints_yaml(WEB3))
        port = ti.free_port()
        self.ours('mcp-source', [self.src_bin, '--api', 'destination', '--dir', self.conf,
                                 '--listen', f'127.0.0.1:{port}', '--debounce', '500'], port)
        cl = self.node_peer('dest_client.js', ['--connect', f'127.0.0.1:{port}', '--authority', f'{WEB}:80'])
        cl.wait_for(lambda l: l.get('event') == 'synced', 'synced')
        mark = cl.mark()
        four = WEB3 + ['10.1.0.8']
        for addrs in (four, four + ['10.1.0.7'], four, four + ['10.1.0.9']):
            self.write_yaml('default/endpoints.yaml', endpoints_yaml(addrs))
            time.sleep(0.03)
        cl.wait_for(lambda l: l.get('event') == 'destination' and '10.1.0.9:8080' in l.get('addrs', []),
                    'the change after the undone one', mark)
        ls = dest_lines(cl, f'{WEB}:80', mark)
        self.assertEqual([l for l in ls if '10.1.0.7:8080' in l.get('addrs', [])], [],
                         'a change undone within the debounce window was sent')
        self.assertEqual(held(dest_lines(cl, f'{WEB}:80')),
                         {f'{ip}:8080' for ip in four + ['10.1.0.9']})

    def test_invalid_requests(self):
        self.start(authorities=[f'{WEB}:80'])
        self.cl.wait_for(lambda l: l.get('event') == 'synced', 'synced')
        for args in (['--scheme', 'dns', '--authority', WEB], ['--scheme', '', '--authority', WEB],
                     ['--authority', f'{WEB}:abc'], ['--authority', f'{WEB}:99999'], ['--authority', '']):
            p = self.node_peer('dest_client.js', ['--connect', self.addr, '--no-redial'] + args)
            st = p.wait_for(lambda l: l.get('event') == 'status', f'the status of {args}')
            self.assertEqual(st['code'], 3, f'{args}: {st}')
            self.assertEqual(dest_lines(p, args[-1]), [], 'no message before INVALID_ARGUMENT')
        # Our source is still serving.
        self.assertIsNone(self.src.p.poll())

    def test_heartbeat(self):
        self.need('mcp-source', '--destination-heartbeat')
        cl = self.start(['--destination-heartbeat', '300'], [f'{WEB}:80', 'empty.default.svc.cluster.local'])
        cl.wait_for(lambda l: l.get('event') == 'synced', 'synced')
        t0 = time.monotonic()
        for a, total in ((f'{WEB}:80', 3), ('empty.default.svc.cluster.local', 0)):
            hb = cl.wait_for(lambda l, a=a: l.get('authority') == a and not l['first'], f'a heartbeat on {a}')
            self.assertEqual((hb['update'], hb['addrs'], hb['total']), ('add', [], total), hb)
        self.assertGreater(time.monotonic() - t0, 0.15, 'a heartbeat long before the period')

    def test_no_heartbeat_when_off(self):
        self.need('mcp-source', '--destination-heartbeat')
        cl = self.start(['--destination-heartbeat', '0'], [f'{WEB}:80'])
        cl.wait_for(lambda l: l.get('event') == 'synced', 'synced')
        # No clock-driven message is provable in no time; what is: a period
        # of 0 taken as "every tick" (or the default) sends before the edits'
        # barrier, which the source writes after anything it had for web.
        r = self.web_edits(cl)
        extra = [l for l in cl.lines[:cl.index(r)] if l.get('event') == 'destination' and not l['first'] and
                 l['addrs'] != ['10.1.0.5:8080']]
        self.assertEqual(extra, [], f'sent with heartbeats off\n{cl.describe()}')

    def test_dns_zone(self):
        self.need('mcp-source', '--dns-zone')
        cl = self.start(['--dns-zone', 'example.org'], ['web.default.svc.example.org', f'{WEB}:80'])
        cl.wait_for(lambda l: l.get('event') == 'synced', 'synced')
        w = self.first('web.default.svc.example.org')
        self.assertEqual(sorted(w['addrs']), [f'{ip}:8080' for ip in WEB3])
        o = self.first(f'{WEB}:80')
        self.assertEqual((o['update'], o.get('exists')), ('no_endpoints', False))

    def test_tls(self):
        c = self.certs()
        self.write_yaml('default/services.yaml', SERVICES_YAML)
        self.write_yaml('default/endpoints.yaml', endpoints_yaml(WEB3))
        port = ti.free_port()
        self.ours('mcp-source', [self.src_bin, '--api', 'destination', '--dir', self.conf,
                                 '--listen', f'127.0.0.1:{port}', '--tls-cert', c('server.pem'),
                                 '--tls-key', c('server.key'), '--tls-ca', c('ca.pem')], port)
        cl = self.node_peer('dest_client.js', ['--connect', f'127.0.0.1:{port}', '--authority', f'{WEB}:80',
                                               '--tls-ca', c('ca.pem'), '--tls-cert', c('client.pem'),
                                               '--tls-key', c('client.key')])
        w = cl.wait_for(lambda l: l.get('event') == 'destination', 'the first message over TLS')
        self.assertEqual(sorted(w['addrs']), [f'{ip}:8080' for ip in WEB3])
        # Without a client certificate the handshake fails: nothing arrives.
        bad = self.node_peer('dest_client.js', ['--connect', f'127.0.0.1:{port}', '--authority', f'{WEB}:80',
                                                '--tls-ca', c('ca.pem'), '--no-redial'])
        st = bad.wait_for(lambda l: l.get('event') == 'status', 'refused')
        self.assertNotEqual(st['code'], 0, st)
        self.assertEqual([l for l in bad.lines if l.get('event') == 'destination'], [])

    def test_api_mcp_only_serves_no_destination(self):
        self.write_yaml('default/services.yaml', SERVICES_YAML)
        port = ti.free_port()
        self.ours('mcp-source', [self.src_bin, '--api', 'mcp', '--dir', self.conf,
                                 '--listen', f'127.0.0.1:{port}'], port)
        p = self.node_peer('dest_client.js', ['--connect', f'127.0.0.1:{port}', '--authority', WEB, '--no-redial'])
        st = p.wait_for(lambda l: l.get('event') == 'status', 'the status')
        self.assertEqual(st['code'], 12, st)  # UNIMPLEMENTED


# ---------------------------------------------------------------------------
NODE_STATE = {'services': {
    f'{WEB}:80': {'addrs': ['10.0.0.1:8080', {'addr': '[fd00::1]:8080', 'labels': {'k8s_pod': 'web-1'}}],
                  'labels': LABELS_WEB},
    'empty.default.svc.cluster.local': {'addrs': []},
}}


class NodeServerToOurSink(EngineBase):
    needs = (('mcp-sink', ('--api', 'destination', '--destination')),)

    def start(self, authorities, state=NODE_STATE, extra=(), server_args=()):
        self.write_state(state)
        self.srv = self.node_peer('dest_server.js', ['--listen', '127.0.0.1:0', '--state', self.state_file] +
                                  list(server_args))
        self.addr = self.listening(self.srv)
        self.out = os.path.join(self.tmp, 'out')
        argv = [self.sink_bin, '--api', 'destination', '--connect', self.addr, '--json', '--out', self.out]
        for a in authorities:
            argv += ['--destination', a]
        self.sink = self.ours('mcp-sink', argv + list(extra))
        return self.sink

    def line(self, authority, since=0, what=None, **kw):
        return self.sink.wait_for(lambda l: l.get('event') == 'destination' and l.get('authority') == authority and
                                  all(l.get(k) == v for k, v in kw.items()),
                                  what or f'a line for {authority} {kw}', since)

    def out_file(self, authority, want, what):
        path = os.path.join(self.out, f'{authority}.json')
        end = time.monotonic() + DEADLINE
        got = None
        while time.monotonic() < end:
            try:
                with open(path) as f:
                    got = json.load(f)
                if got == want:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        self.fail(f'{what}: {path} holds {got}, want {want}\n{self.sink.describe()}')

    def test_sync_and_changes(self):
        sink = self.start([f'{WEB}:80', 'empty.default.svc.cluster.local', 'nope.default.svc.cluster.local'])
        w = self.line(f'{WEB}:80')
        self.assertEqual((w['update'], sorted(w['addrs']), w['total']), ('add', ['10.0.0.1:8080', '[fd00::1]:8080'], 2), w)
        self.assertNotIn('exists', w)
        e = self.line('empty.default.svc.cluster.local')
        self.assertEqual((e['update'], e['exists'], e['addrs'], e['total']), ('no_endpoints', True, [], 0), e)
        n = self.line('nope.default.svc.cluster.local')
        self.assertEqual((n['update'], n['exists'], n['total']), ('no_endpoints', False, 0), n)
        self.out_file(f'{WEB}:80', {'exists': True, 'addrs': ['10.0.0.1:8080', '[fd00::1]:8080']}, 'first state')
        self.out_file('empty.default.svc.cluster.local', {'exists': True, 'addrs': []}, 'empty')
        self.out_file('nope.default.svc.cluster.local', {'exists': False, 'addrs': []}, 'absent')
        for p in self.srv.lines:
            if p.get('event') == 'get':
                self.assertEqual(p['scheme'], 'k8s')

        mark = sink.mark()
        st = json.loads(json.dumps(NODE_STATE))
        st['services'][f'{WEB}:80']['addrs'] = ['10.0.0.2:8080', {'addr': '[fd00::1]:8080', 'labels': {'k8s_pod': 'web-1'}}]
        st['services']['nope.default.svc.cluster.local'] = {'addrs': ['10.3.0.1:80']}
        self.write_state(st, self.srv)
        a = self.line(f'{WEB}:80', mark, update='add')
        self.assertEqual((a['addrs'], a['total']), (['10.0.0.2:8080'], 3))
        r = self.line(f'{WEB}:80', mark, update='remove')
        self.assertEqual((r['addrs'], r['total']), (['10.0.0.1:8080'], 2))
        n = self.line('nope.default.svc.cluster.local', mark)
        self.assertEqual((n['update'], n['addrs'], n['total']), ('add', ['10.3.0.1:80'], 1))
        self.out_file(f'{WEB}:80', {'exists': True, 'addrs': ['10.0.0.2:8080', '[fd00::1]:8080']}, 'after the change')
        self.out_file('nope.default.svc.cluster.local', {'exists': True, 'addrs': ['10.3.0.1:80']}, 'appeared')

        mark = sink.mark()
        st['services'][f'{WEB}:80']['addrs'] = []
        del st['services']['nope.default.svc.cluster.local']
        self.write_state(st, self.srv)
        r = self.line(f'{WEB}:80', mark)
        self.assertEqual((r['update'], r['exists'], r['total']), ('no_endpoints', True, 0), r)
        r = self.line('nope.default.svc.cluster.local', mark)
        self.assertEqual((r['update'], r['exists'], r['total']), ('no_endpoints', False, 0), r)
        self.out_file(f'{WEB}:80', {'exists': True, 'addrs': []}, 'emptied')
        self.out_file('nope.default.svc.cluster.local', {'exists': False, 'addrs': []}, 'gone')

    def test_ipv6_text_and_redundant_messages(self):
        # RFC 5952 text from IPv6{first,last}; every update sent twice: the
        # set and the totals must not move on the repeats.
        state = {'services': {V6: {'addrs': ['[2001:db8:0:0:1:0:0:1]:8080', '[fd00:0:0:1::]:80', '[::1]:1']}}}
        sink = self.start([V6, f'{WEB}:80'], state=state, server_args=['--repeat'])
        first = self.line(V6)
        for a in (V6, f'{WEB}:80'):  # each first message and its repeat
            sink.wait_for(lambda l, a=a: len(dest_lines(sink, a)) >= 2, f'{a}: the first message twice')
        self.assertEqual(dest_lines(sink, V6)[1]['total'], 3, 'a repeated add changed the total')
        self.assertEqual(sorted(first['addrs']), ['[2001:db8::1:0:0:1]:8080', '[::1]:1', '[fd00:0:0:1::]:80'], first)
        self.assertEqual(first['total'], 3)
        self.out_file(V6, {'exists': True, 'addrs': sorted(['[2001:db8::1:0:0:1]:8080', '[::1]:1', '[fd00:0:0:1::]:80'])},
                      'IPv6 set')
        mark = sink.mark()
        state['services'][V6]['addrs'] = ['[::1]:1', '[fd00::9]:80']
        state['services'][f'{WEB}:80'] = {'addrs': ['10.0.0.1:80']}
        self.write_state(state, self.srv)
        self.line(f'{WEB}:80', mark, update='add')
        self.line(V6, mark, update='remove')
        # Barrier: a change of web only; the server wrote every repeat for v6
        # before it (one connection, in order).
        mark_b = sink.mark()
        state['services'][f'{WEB}:80'] = {'addrs': ['10.0.0.1:80', '10.0.0.2:80']}
        self.write_state(state, self.srv)
        b = self.line(f'{WEB}:80', mark_b, update='add', addrs=['10.0.0.2:80'])
        ls = [l for l in sink.lines[mark:sink.index(b)] if l.get('event') == 'destination' and l['authority'] == V6]
        self.assertEqual(sorted((l['update'], tuple(sorted(l['addrs'])), l['total']) for l in ls),
                         [('add', ('[fd00::9]:80',), 4), ('add', ('[fd00::9]:80',), 4),
                          ('remove', ('[2001:db8::1:0:0:1]:8080', '[fd00:0:0:1::]:80'), 2),
                          ('remove', ('[2001:db8::1:0:0:1]:8080', '[fd00:0:0:1::]:80'), 2)], ls)
        self.out_file(V6, {'exists': True, 'addrs': ['[::1]:1', '[fd00::9]:80']}, 'after the repeats')
        self.out_file(f'{WEB}:80', {'exists': True, 'addrs': ['10.0.0.1:80', '10.0.0.2:80']}, 'web appeared (twice)')

    def test_stale_set_until_first_message(self):
        sink = self.start([f'{WEB}:80'])
        self.line(f'{WEB}:80')
        self.out_file(f'{WEB}:80', {'exists': True, 'addrs': ['10.0.0.1:8080', '[fd00::1]:8080']}, 'first state')
        self.srv.stop()
        # While the controller is away the stale set stays: once the sink
        # has handled the stream's end (it logs it), the file is unchanged.
        sink.wait_stderr(lambda t: f'{WEB}:80: stream ended' in t, 'the sink sees the stream end')
        self.out_file(f'{WEB}:80', {'exists': True, 'addrs': ['10.0.0.1:8080', '[fd00::1]:8080']}, 'kept while away')
        mark = sink.mark()
        self.write_state({'services': {f'{WEB}:80': {'addrs': ['10.0.0.7:8080']}}})
        self.srv = self.node_peer('dest_server.js', ['--listen', self.addr, '--state', self.state_file])
        r = self.line(f'{WEB}:80', mark, what='the first message of the new stream')
        self.assertEqual((r['update'], r['addrs'], r['total']), ('add', ['10.0.0.7:8080'], 1), r)
        self.out_file(f'{WEB}:80', {'exists': True, 'addrs': ['10.0.0.7:8080']}, 'replaced by the first message')

    def test_heartbeats_change_nothing(self):
        sink = self.start([f'{WEB}:80', 'empty.default.svc.cluster.local'], server_args=['--heartbeat-ms', '200'])
        self.line(f'{WEB}:80')
        self.line('empty.default.svc.cluster.local')
        mark = sink.mark()
        hb = self.line(f'{WEB}:80', mark, update='add')
        self.assertEqual((hb['addrs'], hb['total']), ([], 2))
        hb = self.line('empty.default.svc.cluster.local', mark, update='add')
        self.assertEqual((hb['addrs'], hb['total']), ([], 0))
        # The sink writes the --out file before it prints the line: after
        # the heartbeats' lines, their files are as they leave them.
        self.out_file(f'{WEB}:80', {'exists': True, 'addrs': ['10.0.0.1:8080', '[fd00::1]:8080']}, 'after heartbeats')
        self.out_file('empty.default.svc.cluster.local', {'exists': True, 'addrs': []}, 'after heartbeats')

    def test_tls(self):
        c = self.certs()
        self.write_state(NODE_STATE)
        self.srv = self.node_peer('dest_server.js', ['--listen', '127.0.0.1:0', '--state', self.state_file,
                                                     '--tls-cert', c('server.pem'), '--tls-key', c('server.key'),
                                                     '--tls-ca', c('ca.pem')])
        addr = self.listening(self.srv)
        self.sink = self.ours('mcp-sink', [self.sink_bin, '--api', 'destination', '--connect', addr, '--json',
                                           '--destination', f'{WEB}:80', '--tls-ca', c('ca.pem'),
                                           '--tls-cert', c('client.pem'), '--tls-key', c('client.key')])
        w = self.line(f'{WEB}:80', what='the first message over TLS')
        self.assertEqual(sorted(w['addrs']), ['10.0.0.1:8080', '[fd00::1]:8080'])

    def test_exit_after_sync(self):
        self.write_state(NODE_STATE)
        self.srv = self.node_peer('dest_server.js', ['--listen', '127.0.0.1:0', '--state', self.state_file])
        addr = self.listening(self.srv)
        sink = self.ours('mcp-sink', [self.sink_bin, '--api', 'destination', '--connect', addr, '--json',
                                      '--destination', f'{WEB}:80', '--destination', 'empty.default.svc.cluster.local',
                                      '--exit-after-sync'])
        try:
            rc = sink.p.wait(DEADLINE)
        except Exception:
            self.fail(f'mcp-sink did not exit after the sync\n{sink.describe()}')
        self.assertEqual(rc, 0, sink.describe())
        sink.stop()
        self.assertEqual(sorted(l['authority'] for l in sink.lines if l.get('event') == 'destination'),
                         sorted([f'{WEB}:80', 'empty.default.svc.cluster.local']))


if __name__ == '__main__':
    main()
