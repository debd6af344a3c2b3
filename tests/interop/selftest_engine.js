'use strict';
// Self-test of the Destination and Dispatcher Node peers against each other
// (client vs server, agent vs manager), so they are known good before they
// meet libmcp's programs.
//   node --test tests/interop/selftest_engine.js   (or: sh tests/interop/selftest.sh)

const test = require('node:test');
const assert = require('node:assert');
const { spawn } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const readline = require('readline');
const e = require('./engine_common');

const DEADLINE_MS = 10000;
const children = new Set();

function run(script, args) {
  const p = spawn(process.execPath, [path.join(__dirname, script), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const ch = { p, lines: [], err: '', waiters: new Set() };
  readline.createInterface({ input: p.stdout }).on('line', (l) => {
    ch.lines.push(JSON.parse(l));
    for (const w of ch.waiters) w();
  });
  p.stderr.on('data', (d) => { ch.err += d; });
  ch.exited = new Promise((res) => p.on('exit', (code) => { children.delete(ch); res(code); }));
  children.add(ch);
  return ch;
}

function waitFor(ch, pred, what, from = 0) {
  return new Promise((resolve, reject) => {
    const check = () => {
      const hit = ch.lines.slice(from).find(pred);
      if (hit) { ch.waiters.delete(check); clearTimeout(t); resolve(hit); }
    };
    const t = setTimeout(() => {
      ch.waiters.delete(check);
      reject(new Error(`timed out waiting for ${what}\nlines: ${JSON.stringify(ch.lines)}\nstderr: ${ch.err}`));
    }, DEADLINE_MS);
    ch.waiters.add(check);
    check();
  });
}

const address = async (ch) => (await waitFor(ch, (l) => l.event === 'listening', 'listening')).address;
// The 'sent' lines of a peer from index |from| up to the line |end| (a line
// waitFor returned): a 'reloaded' line comes after all its predecessor sent.
const sentBetween = (ch, from, end) => ch.lines.slice(from, ch.lines.indexOf(end)).filter((l) => l.event === 'sent');

const tmpDirs = [];
function tmpDir(prefix) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tmpDirs.push(d);
  return d;
}
test.after(() => { for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true }); });

function stateFile(obj) {
  const f = path.join(tmpDir('engine-selftest-'), 'state.json');
  fs.writeFileSync(f, JSON.stringify(obj));
  return f;
}
function rewrite(f, obj, ch) {
  fs.writeFileSync(`${f}.tmp`, JSON.stringify(obj));
  fs.renameSync(`${f}.tmp`, f);
  ch.p.kill('SIGHUP');
}

async function stop(ch) {
  if (ch.p.exitCode === null) ch.p.kill('SIGTERM');
  return ch.exited;
}

test.afterEach(() => { for (const ch of children) ch.p.kill('SIGKILL'); });

test('address helpers: IPv4 fixed32, IPv6 halves, RFC 5952 text, authorities', () => {
  assert.strictEqual(e.parseIpv4('10.0.0.1'), 0x0A000001);
  assert.strictEqual(e.parseIpv4('10.0.0.01'), null);
  assert.strictEqual(e.parseIpv4('256.0.0.1'), null);
  assert.strictEqual(e.tcpFromText('[2001:0DB8:0:0:1:0:0:1]:1').text, '[2001:db8::1:0:0:1]:1');
  assert.strictEqual(e.tcpFromText('[::]:5').text, '[::]:5');
  assert.strictEqual(e.tcpFromText('[1:0:0:2:0:0:0:3]:4').text, '[1:0:0:2::3]:4');
  const v6 = e.tcpFromText('[fd00::a:b]:8080');
  assert.strictEqual(e.tcpText({ ip: { ip: 'ipv6', ipv6: v6.ip.ipv6 }, port: 8080 }), '[fd00::a:b]:8080');
  assert.deepStrictEqual(e.halvesFromHextets([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1]), { first: '2306139568115548160', last: '1' });
  assert.throws(() => e.tcpFromText('1.2.3.4'));
  assert.throws(() => e.tcpFromText('[1.2.3.4]:1'));
  assert.deepStrictEqual(e.parseAuthority('Web.NS.svc.cluster.local.'), { host: 'web.ns.svc.cluster.local', port: 80 });
  for (const bad of ['', 'x:', 'x:0', 'x:65536', 'x:1a', 'a b', ':80']) assert.strictEqual(e.parseAuthority(bad), null, bad);
});

const WEB = 'web.default.svc.cluster.local';
const DEST_STATE = {
  services: {
    [`${WEB}:8080`]: { addrs: ['10.0.0.1:8080', { addr: '[fd00::1]:8080', labels: { k8s_pod: 'web-1' } }],
      labels: { k8s_namespace: 'default', k8s_service: 'web' } },
    'empty.default.svc.cluster.local': { addrs: [] },
  },
};

test('destination: first messages, exact diffs, last one gone, service gone', async () => {
  const f = stateFile(DEST_STATE);
  const srv = run('dest_server.js', ['--listen', '127.0.0.1:0', '--state', f]);
  const cl = run('dest_client.js', ['--connect', await address(srv), '--authority', `${WEB}:8080`,
    '--authority', 'empty.default.svc.cluster.local.', '--authority', 'nope.default.svc.cluster.local',
    '--authority', '10.1.2.3:99']);
  await waitFor(cl, (l) => l.event === 'synced', 'synced');
  const first = (a) => cl.lines.find((l) => l.event === 'destination' && l.authority === a);
  const w = first(`${WEB}:8080`);
  assert.deepStrictEqual([w.update, w.addrs, w.total, w.first], ['add', ['10.0.0.1:8080', '[fd00::1]:8080'], 2, true]);
  assert.deepStrictEqual(w.weights, { '10.0.0.1:8080': 1, '[fd00::1]:8080': 1 });
  assert.deepStrictEqual(w.addr_labels, { '[fd00::1]:8080': { k8s_pod: 'web-1' } });
  assert.deepStrictEqual(w.set_labels, { k8s_namespace: 'default', k8s_service: 'web' });
  assert.deepStrictEqual([first('empty.default.svc.cluster.local.').update, first('empty.default.svc.cluster.local.').exists], ['no_endpoints', true]);
  assert.deepStrictEqual([first('nope.default.svc.cluster.local').update, first('nope.default.svc.cluster.local').exists], ['no_endpoints', false]);
  assert.deepStrictEqual(first('10.1.2.3:99').addrs, ['10.1.2.3:99']);

  let m = cl.lines.length;
  const s0 = srv.lines.length;
  const st = JSON.parse(JSON.stringify(DEST_STATE));
  st.services[`${WEB}:8080`].addrs = ['10.0.0.2:8080', { addr: '[fd00::1]:8080', labels: { k8s_pod: 'web-1' } }];
  st.services['empty.default.svc.cluster.local'].addrs = ['10.9.9.9:1'];
  rewrite(f, st, srv);
  const add = await waitFor(cl, (l) => l.authority === `${WEB}:8080` && l.update === 'add', 'add of the new one', m);
  assert.deepStrictEqual([add.addrs, add.total], [['10.0.0.2:8080'], 3]);
  const rm = await waitFor(cl, (l) => l.authority === `${WEB}:8080` && l.update === 'remove', 'remove of the old one', m);
  assert.deepStrictEqual([rm.addrs, rm.total], [['10.0.0.1:8080'], 2]);
  const e2 = await waitFor(cl, (l) => l.authority === 'empty.default.svc.cluster.local.', 'empty gets one', m);
  assert.deepStrictEqual([e2.update, e2.addrs], ['add', ['10.9.9.9:1']]);

  m = cl.lines.length;
  rewrite(f, st, srv); // the same: nothing is sent
  const noop = await waitFor(srv, (l) => l.event === 'reloaded' && l.changed.length === 0, 'no-op reload');
  // Nothing else changed: the server logs every message it sends, in the
  // SIGHUP handler after its 'reloaded' line, so the next 'reloaded' ends
  // the list; the client can only have got what was sent.
  const r1 = await waitFor(srv, (l) => l.event === 'reloaded', 'the reload', s0);
  assert.strictEqual(sentBetween(srv, srv.lines.indexOf(r1), noop).length, 3, 'nothing else changed');
  st.services[`${WEB}:8080`].addrs = [];
  delete st.services['empty.default.svc.cluster.local'];
  rewrite(f, st, srv);
  const ne = await waitFor(cl, (l) => l.authority === `${WEB}:8080`, 'no_endpoints exists', m);
  assert.deepStrictEqual([ne.update, ne.exists, ne.total], ['no_endpoints', true, 0]);
  const gone = await waitFor(cl, (l) => l.authority === 'empty.default.svc.cluster.local.', 'no_endpoints gone', m);
  assert.deepStrictEqual([gone.update, gone.exists], ['no_endpoints', false]);
  await stop(cl);
  assert.deepStrictEqual(cl.lines.at(-1).sets[`${WEB}:8080`], { exists: true, addrs: [] });
  await stop(srv);
});

test('destination: bad scheme or path end with INVALID_ARGUMENT; heartbeat is an empty add', async () => {
  const f = stateFile(DEST_STATE);
  const srv = run('dest_server.js', ['--listen', '127.0.0.1:0', '--state', f, '--heartbeat-ms', '200']);
  const addr = await address(srv);
  const bad = run('dest_client.js', ['--connect', addr, '--authority', 'x:0', '--authority', 'a b', '--no-redial']);
  assert.strictEqual(await bad.exited, 0);
  assert.deepStrictEqual(bad.lines.filter((l) => l.event === 'status').map((l) => l.code), [3, 3]);
  const dns = run('dest_client.js', ['--connect', addr, '--authority', WEB, '--scheme', 'dns', '--no-redial']);
  assert.strictEqual(await dns.exited, 0);
  assert.strictEqual(dns.lines[0].code, 3);
  const cl = run('dest_client.js', ['--connect', addr, '--authority', `${WEB}:8080`, '--authority', 'nope.x']);
  const hb = await waitFor(cl, (l) => l.update === 'add' && !l.first && l.authority === `${WEB}:8080`, 'heartbeat');
  assert.deepStrictEqual([hb.addrs, hb.total], [[], 2]);
  await waitFor(cl, (l) => l.update === 'add' && !l.first && l.authority === 'nope.x', 'heartbeat of an absent one');
  await stop(cl);
  assert.deepStrictEqual(cl.lines.at(-1).sets['nope.x'], { exists: false, addrs: [] }, 'an empty add says nothing of existence');
  await stop(srv);
});

test('destination: the stale set is kept until the first message of the new stream', async () => {
  const f = stateFile(DEST_STATE);
  let srv = run('dest_server.js', ['--listen', '127.0.0.1:0', '--state', f]);
  const addr = await address(srv);
  const cl = run('dest_client.js', ['--connect', addr, '--authority', `${WEB}:8080`]);
  await waitFor(cl, (l) => l.event === 'synced', 'synced');
  await stop(srv);
  await waitFor(cl, (l) => l.event === 'status', 'stream end');
  cl.p.kill('SIGUSR1');
  const stale = await waitFor(cl, (l) => l.event === 'state', 'state while disconnected');
  assert.deepStrictEqual(stale.sets[`${WEB}:8080`].addrs, ['10.0.0.1:8080', '[fd00::1]:8080']);
  fs.writeFileSync(f, JSON.stringify({ services: { [`${WEB}:8080`]: { addrs: ['10.0.0.7:8080'] } } }));
  const m = cl.lines.length;
  srv = run('dest_server.js', ['--listen', addr, '--state', f]);
  const fresh = await waitFor(cl, (l) => l.event === 'destination' && l.first, 'first message again', m);
  assert.deepStrictEqual([fresh.addrs, fresh.total], [['10.0.0.7:8080'], 1]);
  await stop(cl);
  await stop(srv);
});

const task = (id, node, state, extra = {}) => ({ id, node_id: node, service_id: 'web', desired_state: 'RUNNING',
  status: { state }, spec: { container: { image: 'nginx:1.25', ...extra } } });
const DISP_STATE = {
  tasks: [
    task('t1', 'node-a', 'ASSIGNED', { secrets: [{ secret_id: 's1', secret_name: 's1' }], configs: [{ config_id: 'c1', config_name: 'c1' }] }),
    task('t2', 'node-a', 'PENDING'),
    task('t3', 'node-b', 'RUNNING', { secrets: [{ secret_id: 's1', secret_name: 's1' }] }),
    task('t4', 'node-a', 'RUNNING', { secrets: [{ secret_id: 's1', secret_name: 's1' }, { secret_id: 'missing' }] }),
  ],
  secrets: [{ id: 's1', spec: { annotations: { name: 's1' }, data: Buffer.from('pw').toString('base64') } }],
  configs: [{ id: 'c1', spec: { annotations: { name: 'c1' }, data: Buffer.from('cfg').toString('base64') } }],
  nodes: [{ id: 'node-a', spec: { annotations: { name: 'node-a' } } }],
};
const ids = (l) => l.changes.map((x) => `${x.action} ${x.kind}/${x.id}`);

test('dispatcher: session, heartbeats, COMPLETE then chained INCREMENTALs by the rules', async () => {
  const f = stateFile(DISP_STATE);
  const mgr = run('disp_manager.js', ['--listen', '127.0.0.1:0', '--state', f, '--heartbeat-period', '200']);
  const addr = await address(mgr);
  const ag = run('disp_agent.js', ['--connect', addr, '--node-id', 'node-a', '--bodies', '--report-status', 'RUNNING']);
  const s = await waitFor(ag, (l) => l.event === 'session', 'session');
  assert.deepStrictEqual(s.node, { id: 'node-a', spec: { annotations: { name: 'node-a' } } });
  assert.deepStrictEqual(s.managers, [{ addr, node_id: '', weight: 1 }]);
  const full = await waitFor(ag, (l) => l.event === 'assignments', 'COMPLETE');
  assert.deepStrictEqual([full.type, full.applies_to, full.total], ['COMPLETE', '', 4]);
  assert.deepStrictEqual(ids(full).sort(), ['UPDATE config/c1', 'UPDATE secret/s1', 'UPDATE task/t1', 'UPDATE task/t4']);
  assert.strictEqual(full.problems, undefined);
  assert.deepStrictEqual(full.changes.find((x) => x.id === 's1').object, DISP_STATE.secrets[0]);
  assert.strictEqual((await waitFor(ag, (l) => l.event === 'heartbeat', 'heartbeat')).period_ms, 200);
  await waitFor(mgr, (l) => l.event === 'task_status' && l.task_id === 't1' && l.state === 'RUNNING', 'status report');

  // t2 becomes ASSIGNED; t4 goes past RUNNING with the same spec (not re-sent);
  // t1 moves away: s1 stays (t4 holds it), c1 goes.
  let m = ag.lines.length;
  const st = JSON.parse(JSON.stringify(DISP_STATE));
  st.tasks[1].status.state = 'ASSIGNED';
  st.tasks[3].status.state = 'COMPLETE';
  st.tasks[0].node_id = 'node-b';
  rewrite(f, st, mgr);
  const inc = await waitFor(ag, (l) => l.event === 'assignments', 'INCREMENTAL', m);
  assert.deepStrictEqual([inc.type, inc.applies_to], ['INCREMENTAL', full.results_in]);
  assert.notStrictEqual(inc.results_in, full.results_in);
  assert.deepStrictEqual(ids(inc).sort(), ['REMOVE config/c1', 'REMOVE task/t1', 'UPDATE task/t2']);
  assert.strictEqual(inc.total, 3);
  // The second task holding s1 goes: now s1 goes too. A change on node-b only: nothing.
  m = ag.lines.length;
  st.tasks = st.tasks.filter((t) => t.id !== 't4');
  rewrite(f, st, mgr);
  const inc2 = await waitFor(ag, (l) => l.event === 'assignments', 'INCREMENTAL 2', m);
  assert.deepStrictEqual([inc2.applies_to, ids(inc2).sort()], [inc.results_in, ['REMOVE secret/s1', 'REMOVE task/t4']]);
  m = ag.lines.length;
  st.tasks.find((t) => t.id === 't3').spec.container.image = 'other';
  const s3 = mgr.lines.length;
  rewrite(f, st, mgr);
  const r3 = await waitFor(mgr, (l) => l.event === 'reloaded', 'reload', s3);
  rewrite(f, st, mgr); // the same again: its 'reloaded' ends what the one before sent
  const r4 = await waitFor(mgr, (l) => l.event === 'reloaded', 'the barrier reload', mgr.lines.indexOf(r3) + 1);
  assert.deepStrictEqual(sentBetween(mgr, mgr.lines.indexOf(r3), r4).filter((l) => l.node.id === 'node-a'), [],
    'invisible to node-a');
  assert.deepStrictEqual(ag.lines.slice(m).filter((l) => l.event === 'assignments'), [], 'invisible to node-a');
  await stop(ag);
  assert.deepStrictEqual(ag.lines.at(-1).held, { task: ['t2'], secret: [], config: [] });
  await stop(mgr);
});

test('dispatcher: a broken chain re-syncs; an expired session ends UNAVAILABLE, then a new session', async () => {
  const f = stateFile(DISP_STATE);
  const mgr = run('disp_manager.js', ['--listen', '127.0.0.1:0', '--state', f, '--heartbeat-period', '150', '--batch', '2']);
  const addr = await address(mgr);
  const ag = run('disp_agent.js', ['--connect', addr, '--node-id', 'node-a']);
  await waitFor(ag, (l) => l.event === 'synced', 'synced');
  let m = ag.lines.length;
  mgr.p.kill('SIGUSR1');
  await waitFor(mgr, (l) => l.event === 'break_next', 'break armed');
  const st = JSON.parse(JSON.stringify(DISP_STATE));
  st.tasks[1].status.state = 'ASSIGNED';
  rewrite(f, st, mgr);
  await waitFor(ag, (l) => l.event === 'chain_broken', 'chain_broken', m);
  const again = await waitFor(ag, (l) => l.event === 'assignments' && l.type === 'COMPLETE', 'new COMPLETE', m);
  assert.strictEqual(again.total, 5);

  // Batches: 5 new tasks, at most 2 changes per INCREMENTAL, chained.
  m = ag.lines.length;
  for (let i = 0; i < 5; i++) st.tasks.push(task(`n${i}`, 'node-a', 'ASSIGNED'));
  rewrite(f, st, mgr);
  await waitFor(ag, (l) => l.event === 'assignments' && l.total === 10, 'all five', m);
  const incs = ag.lines.slice(m).filter((l) => l.event === 'assignments');
  assert.deepStrictEqual(incs.map((l) => l.changes.length), [2, 2, 1]);
  for (let i = 1; i < incs.length; i++) assert.strictEqual(incs[i].applies_to, incs[i - 1].results_in);

  const sid = ag.lines.find((l) => l.event === 'session').session_id;
  m = ag.lines.length;
  ag.p.kill('SIGUSR1'); // stop heartbeating
  const end = await waitFor(ag, (l) => l.event === 'session_end', 'expiry', m);
  assert.deepStrictEqual([end.code, end.details], [14, 'node not registered']);
  await waitFor(mgr, (l) => l.event === 'session_end' && l.why === 'expired', 'manager expires it');
  ag.p.kill('SIGUSR2');
  const s2 = await waitFor(ag, (l) => l.event === 'session', 'new session', m);
  assert.notStrictEqual(s2.session_id, sid);
  await waitFor(ag, (l) => l.event === 'assignments' && l.type === 'COMPLETE', 'COMPLETE on the new session', m);
  await stop(ag);
  await stop(mgr);
});

test('dispatcher: a second session for the node ends the first; Tasks streams full lists', async () => {
  const f = stateFile(DISP_STATE);
  const mgr = run('disp_manager.js', ['--listen', '127.0.0.1:0', '--state', f]);
  const addr = await address(mgr);
  const a1 = run('disp_agent.js', ['--connect', addr, '--node-id', 'node-a']);
  await waitFor(a1, (l) => l.event === 'synced', 'a1 synced');
  const a2 = run('disp_agent.js', ['--connect', addr, '--node-id', 'node-a', '--api', 'tasks']);
  const t = await waitFor(a2, (l) => l.event === 'tasks', 'tasks');
  assert.deepStrictEqual(t.ids, ['t1', 't4']);
  const end = await waitFor(a1, (l) => l.event === 'session_end', 'a1 replaced');
  assert.deepStrictEqual([end.code, end.details], [3, 'session invalid']);
  await stop(a1);
  await stop(a2);
  await stop(mgr);
});

test('destination: redundant messages (--repeat) are harmless to the client', async () => {
  const f = stateFile(DEST_STATE);
  const srv = run('dest_server.js', ['--listen', '127.0.0.1:0', '--state', f, '--repeat']);
  const cl = run('dest_client.js', ['--connect', await address(srv), '--authority', `${WEB}:8080`]);
  await waitFor(cl, (l) => l.event === 'synced', 'synced');
  const st = JSON.parse(JSON.stringify(DEST_STATE));
  st.services[`${WEB}:8080`].addrs = ['10.0.0.1:8080'];
  const m = cl.lines.length;
  rewrite(f, st, srv);
  await waitFor(cl, (l) => l.update === 'remove', 'remove', m);
  const dest = () => cl.lines.filter((l) => l.event === 'destination');
  await waitFor(cl, () => dest().length >= 4, 'the repeated remove', m);
  // What the server sent in all: the no-op reload's line ends the list.
  rewrite(f, st, srv);
  const noop = await waitFor(srv, (l) => l.event === 'reloaded' && l.changed.length === 0, 'no-op reload');
  assert.strictEqual(sentBetween(srv, 0, noop).length, 4, 'sent: the add and the remove, each twice');
  const ls = dest();
  assert.deepStrictEqual(ls.map((l) => [l.update, l.total]), [['add', 2], ['add', 2], ['remove', 1], ['remove', 1]]);
  await stop(cl);
  await stop(srv);
});

test('dispatcher: the manager drops every session (SIGUSR2): the agent starts a new one', async () => {
  const f = stateFile(DISP_STATE);
  const mgr = run('disp_manager.js', ['--listen', '127.0.0.1:0', '--state', f]);
  const ag = run('disp_agent.js', ['--connect', await address(mgr), '--node-id', 'node-a']);
  await waitFor(ag, (l) => l.event === 'synced', 'synced');
  const m = ag.lines.length;
  mgr.p.kill('SIGUSR2');
  const end = await waitFor(ag, (l) => l.event === 'session_end', 'dropped', m);
  assert.deepStrictEqual([end.code, end.details], [14, 'dispatcher is stopped']);
  const c = await waitFor(ag, (l) => l.event === 'assignments', 'COMPLETE on a new session', m);
  assert.deepStrictEqual([c.type, c.total], ['COMPLETE', 4]);
  await stop(ag);
  await stop(mgr);
});

test('dispatcher: calls with an unknown or expired session id get INVALID_ARGUMENT', async () => {
  const f = stateFile(DISP_STATE);
  const mgr = run('disp_manager.js', ['--listen', '127.0.0.1:0', '--state', f, '--heartbeat-period', '100']);
  const ag = run('disp_agent.js', ['--connect', await address(mgr), '--node-id', 'node-a', '--probe-invalid']);
  for (const method of ['Heartbeat', 'UpdateTaskStatus', 'Assignments']) {
    const p = await waitFor(ag, (l) => l.event === 'probe' && l.why === 'unknown' && l.method === method, method);
    assert.deepStrictEqual([p.code, p.details], [3, 'session invalid']);
  }
  ag.p.kill('SIGUSR1');
  for (const method of ['Heartbeat', 'UpdateTaskStatus', 'Assignments']) {
    const p = await waitFor(ag, (l) => l.event === 'probe' && l.why === 'ended' && l.method === method, `${method} after expiry`);
    assert.deepStrictEqual([p.code, p.details], [3, 'session invalid']);
  }
  await stop(ag);
  await stop(mgr);
});

test('TLS: a Destination client and a worker over TLS; the manager takes the certificate CN as the node', async (t) => {
  const certs = tmpDir('engine-selftest-certs-');
  const gen = require('child_process').spawnSync('sh', [path.join(__dirname, '..', 'gen_certs.sh'), certs]);
  if (gen.status !== 0) { t.skip(`gen_certs.sh failed (openssl?): ${gen.stderr}`); return; }
  const c = (n) => path.join(certs, n);
  const srv = run('dest_server.js', ['--listen', '127.0.0.1:0', '--state', stateFile(DEST_STATE),
    '--tls-cert', c('server.pem'), '--tls-key', c('server.key')]);
  const cl = run('dest_client.js', ['--connect', await address(srv), '--authority', `${WEB}:8080`, '--tls-ca', c('ca.pem')]);
  assert.strictEqual((await waitFor(cl, (l) => l.event === 'destination', 'add over TLS')).total, 2);
  const st = JSON.parse(JSON.stringify(DISP_STATE));
  st.tasks.push(task('tl', 'legacy-client', 'ASSIGNED'));
  const mgr = run('disp_manager.js', ['--listen', '127.0.0.1:0', '--state', stateFile(st),
    '--tls-cert', c('server.pem'), '--tls-key', c('server.key'), '--tls-ca', c('ca.pem')]);
  const ag = run('disp_agent.js', ['--connect', await address(mgr), '--node-id', 'node-a',
    '--tls-ca', c('ca.pem'), '--tls-cert', c('cn.pem'), '--tls-key', c('cn.key')]);
  const a = await waitFor(ag, (l) => l.event === 'assignments', 'COMPLETE over TLS');
  assert.deepStrictEqual(ids(a), ['UPDATE task/tl']);
  assert.strictEqual((await waitFor(mgr, (l) => l.event === 'session', 'session')).node, 'legacy-client');
  for (const ch of [cl, srv, ag, mgr]) await stop(ch);
});

test('dispatcher: a session forgotten by the manager: the heartbeat fails, the agent starts a new session', async () => {
  const f = stateFile(DISP_STATE);
  const mgr = run('disp_manager.js', ['--listen', '127.0.0.1:0', '--state', f, '--heartbeat-period', '100', '--forget-silently']);
  const ag = run('disp_agent.js', ['--connect', await address(mgr), '--node-id', 'node-a']);
  await waitFor(ag, (l) => l.event === 'synced', 'synced');
  const m = ag.lines.length;
  mgr.p.kill('SIGUSR2');
  const end = await waitFor(ag, (l) => l.event === 'session_end', 'heartbeat refused', m);
  assert.deepStrictEqual([end.stream, end.code, end.details], ['heartbeat', 3, 'session invalid']);
  const c = await waitFor(ag, (l) => l.event === 'assignments', 'COMPLETE on a new session', m);
  assert.strictEqual(c.type, 'COMPLETE');
  await stop(ag);
  await stop(mgr);
});
