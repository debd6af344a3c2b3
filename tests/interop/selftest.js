'use strict';
// Self-test of the two Node peers against each other (both directions), so
// they are known good before they meet libmcp's programs.
//   node --test tests/interop/selftest.js      (or: sh tests/interop/selftest.sh)

const test = require('node:test');
const assert = require('node:assert');
const { spawn } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const readline = require('readline');

const DEADLINE_MS = 10000;
const children = new Set();

// A child whose stdout JSON lines are collected; waitFor() polls them.
function run(script, args) {
  const p = spawn(process.execPath, [path.join(__dirname, script), ...args],
    { stdio: ['ignore', 'pipe', 'pipe'] });
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

// Resolve with the first line (from index `from`) matching pred, or reject.
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

async function address(ch) {
  return (await waitFor(ch, (l) => l.event === 'listening', 'listening')).address;
}

function stateFile(obj) {
  const f = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-selftest-')), 'state.json');
  fs.writeFileSync(f, JSON.stringify(obj));
  return f;
}

async function stop(ch) {
  if (ch.p.exitCode === null) ch.p.kill('SIGTERM');
  return ch.exited;
}

test.afterEach(() => { for (const ch of children) ch.p.kill('SIGKILL'); });

const A = { x: 1, nested: { s: 'str', l: [true, null, 2.5] } };

test('sink dials source: full sync, bodies, ACKs, exit after sync', async () => {
  const f = stateFile({ 'c/one': [{ name: 'ns/a', version: 'v1', body: A }, { name: 'ns/b', version: 'v1' }], 'c/empty': [] });
  const src = run('mcp_source.js', ['--listen', '127.0.0.1:0', '--state', f]);
  const sink = run('mcp_sink.js', ['--connect', await address(src), '--collection', 'c/one',
    '--collection', 'c/empty', '--bodies', '--exit-after-sync', '--timeout-ms', String(DEADLINE_MS)]);
  assert.strictEqual(await sink.exited, 0);
  const st = sink.lines.find((l) => l.event === 'state');
  assert.deepStrictEqual(st.collections, { 'c/one': { 'ns/a': 'v1', 'ns/b': 'v1' }, 'c/empty': {} });
  const r = sink.lines.find((l) => l.event === 'response' && l.collection === 'c/one');
  assert.deepStrictEqual(r.resources.find((x) => x.name === 'ns/a').body, A);
  await waitFor(src, (l) => l.event === 'request' && l.collection === 'c/one' && l.verdict === 'ack', 'ack c/one');
  await waitFor(src, (l) => l.event === 'request' && l.collection === 'c/empty' && l.verdict === 'ack', 'ack c/empty');
  await stop(src);
});

test('SIGHUP changes: full state to a plain sink, a diff to an incremental one', async () => {
  const f = stateFile({ c: [{ name: 'a', version: '1' }, { name: 'b', version: '1' }] });
  const src = run('mcp_source.js', ['--listen', '127.0.0.1:0', '--state', f]);
  const addr = await address(src);
  const full = run('mcp_sink.js', ['--connect', addr, '--collection', 'c']);
  const inc = run('mcp_sink.js', ['--connect', addr, '--collection', 'c', '--incremental', '--node-id', 'inc']);
  for (const s of [full, inc]) await waitFor(s, (l) => l.event === 'response' && l.verdict === 'ack', 'first sync');
  await waitFor(src, (l) => l.verdict === 'ack' && l.node === 'inc', 'ack from inc');
  fs.writeFileSync(f, JSON.stringify({ c: [{ name: 'a', version: '2' }, { name: 'n', version: '1' }] }));
  src.p.kill('SIGHUP');
  const rf = await waitFor(full, (l) => l.event === 'response' && l.nonce !== '1', 'full push', 1);
  assert.strictEqual(rf.incremental, false);
  assert.deepStrictEqual(rf.resources.map((x) => x.name).sort(), ['a', 'n']);
  assert.strictEqual(rf.total, 2);
  const ri = await waitFor(inc, (l) => l.event === 'response' && l.incremental, 'incremental push');
  assert.deepStrictEqual(ri.resources.map((x) => [x.name, x.version]).sort(), [['a', '2'], ['n', '1']]);
  assert.deepStrictEqual(ri.removed, ['b']);
  assert.strictEqual(ri.verdict, 'ack');
  assert.strictEqual(ri.total, 2);
  for (const s of [full, inc]) {
    await stop(s);
    assert.deepStrictEqual(s.lines.at(-1).collections, { c: { a: '2', n: '1' } });
  }
  await stop(src);
});

test('resumption: an incremental sink redials a restarted source that lost a resource', async () => {
  const f = stateFile({ c: [{ name: 'keep', version: '1' }, { name: 'gone', version: '1' }, { name: 'chg', version: '1' }] });
  let src = run('mcp_source.js', ['--listen', '127.0.0.1:0', '--state', f]);
  const addr = await address(src);
  const sink = run('mcp_sink.js', ['--connect', addr, '--collection', 'c', '--incremental']);
  await waitFor(src, (l) => l.verdict === 'ack', 'first ack');
  await stop(src);
  fs.writeFileSync(f, JSON.stringify({ c: [{ name: 'keep', version: '1' }, { name: 'chg', version: '2' }] }));
  src = run('mcp_source.js', ['--listen', addr, '--state', f]);
  const req = await waitFor(src, (l) => l.verdict === 'new', 'resumed request');
  assert.deepStrictEqual(req.initial, { keep: '1', gone: '1', chg: '1' });
  const r = await waitFor(sink, (l) => l.event === 'response' && l.incremental, 'resumption diff');
  assert.deepStrictEqual(r.resources.map((x) => x.name), ['chg']);
  assert.deepStrictEqual(r.removed, ['gone']);
  await stop(sink);
  assert.deepStrictEqual(sink.lines.at(-1).collections, { c: { keep: '1', chg: '2' } });
  await stop(src);
});

test('source dials sink: trigger NACKed UNIMPLEMENTED, then sync and changes', async () => {
  const f = stateFile({ c: [{ name: 'a', version: '1', body: A }] });
  const sink = run('mcp_sink.js', ['--listen', '127.0.0.1:0', '--collection', 'c', '--bodies']);
  const src = run('mcp_source.js', ['--connect', await address(sink), '--state', f]);
  const trig = await waitFor(sink, (l) => l.event === 'response' && l.collection === '$triggerCollection', 'trigger');
  assert.strictEqual(trig.verdict, 'nack');
  assert.strictEqual(trig.error.code, 12);
  await waitFor(src, (l) => l.verdict === 'trigger', 'trigger NACK seen by source');
  const r = await waitFor(sink, (l) => l.event === 'response' && l.collection === 'c', 'sync');
  assert.deepStrictEqual(r.resources[0].body, A);
  await waitFor(src, (l) => l.verdict === 'ack', 'ack');
  fs.writeFileSync(f, JSON.stringify({ c: [] }));
  src.p.kill('SIGHUP');
  const r2 = await waitFor(sink, (l) => l.event === 'response' && l.collection === 'c' && l.total === 0, 'emptied');
  assert.strictEqual(r2.verdict, 'ack');
  await stop(src);
  await stop(sink);
});

test('NACKs: the sink rejects duplicates and bad Struct bytes; the source never resends NACKed content', async () => {
  const f = stateFile({
    dup: [{ name: 'x', version: '1' }, { name: 'x', version: '1' }],
    bad: [{ name: 'y', version: '1', type_url: 'type.googleapis.com/google.protobuf.Struct', value_b64: '/////w==' }],
    no: [{ name: 'z', version: '1' }],
  });
  const src = run('mcp_source.js', ['--listen', '127.0.0.1:0', '--state', f]);
  const sink = run('mcp_sink.js', ['--connect', await address(src), '--collection', 'dup', '--collection', 'bad',
    '--collection', 'no', '--nack', 'no']);
  for (const col of ['dup', 'bad', 'no']) {
    const r = await waitFor(sink, (l) => l.event === 'response' && l.collection === col, `${col} push`);
    assert.strictEqual(r.verdict, 'nack');
    assert.strictEqual(r.error.code, 3);
    assert.strictEqual(r.total, 0);
    await waitFor(src, (l) => l.event === 'request' && l.collection === col && l.verdict === 'nack', `${col} NACK`);
  }
  await new Promise((r) => setTimeout(r, 300));
  assert.strictEqual(src.lines.filter((l) => l.event === 'push').length, 3, 'NACKed content is not resent');
  fs.writeFileSync(f, JSON.stringify({ dup: [{ name: 'x', version: '1' }], bad: [], no: [{ name: 'z', version: '2' }] }));
  src.p.kill('SIGHUP');
  await waitFor(sink, (l) => l.collection === 'dup' && l.verdict === 'ack', 'fixed dup ACKed');
  await waitFor(sink, (l) => l.collection === 'bad' && l.verdict === 'ack', 'fixed bad ACKed');
  const n = await waitFor(sink, (l) => l.collection === 'no' && l.nonce !== '3' && l.event === 'response', 'changed no');
  assert.strictEqual(n.verdict, 'nack');
  await stop(sink);
  await stop(src);
});
