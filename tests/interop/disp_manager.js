#!/usr/bin/env node
'use strict';
// A minimal swarmkit manager (Dispatcher server) on @grpc/grpc-js, written
// from swarmkit's dispatcher.proto and its comments (and the behaviour of
// swarmkit's manager/dispatcher where they are silent), to test libmcp's
// mcp-sink --api dispatcher against.
//
//   node disp_manager.js --listen HOST:PORT --state FILE [--heartbeat-period MS]
//        [--manager ADDR ...] [--batch N] [--tls-cert PEM --tls-key PEM [--tls-ca PEM]]
//        [--forget-silently]
//
// FILE (JSON; SIGHUP re-reads it and pushes what changed):
//   {"tasks": [Task], "secrets": [Secret], "configs": [Config], "nodes": [Node]}
// objects in the .proto's field names (snake_case; enums by name; bytes as
// base64), each with its "id".
// - Session: node = the verified client certificate's CN with --tls-ca (as
//   swarmkit), else description.hostname (INVALID_ARGUMENT when empty); a
//   session_id still live for that node is kept, else a new random one; a new
//   session for a node ends its older one's streams (INVALID_ARGUMENT
//   "session invalid", as swarmkit's session check). First SessionMessage:
//   session_id, the Node of FILE (or {id: node}), managers (--manager, or the
//   listen address; weight 1). The stream stays open.
// - Heartbeat: period = --heartbeat-period (default 5000 ms); a session
//   without a heartbeat for 3 periods expires: its streams end UNAVAILABLE
//   ("node not registered"); later calls with its id get INVALID_ARGUMENT
//   "session invalid", as an unknown id.
// - UpdateTaskStatus: known session -> OK (unknown task ids too), the latest
//   status per task kept (a "task_status" line).
// - Assignments: COMPLETE (applies_to "", results_in a new sequence value)
//   with every task of the node whose status.state >= ASSIGNED and every
//   present secret/config they reference; then INCREMENTAL messages chained
//   by applies_to = the previous results_in: UPDATE for a task new or changed,
//   except swarmkit's rule: a task past RUNNING whose spec did not change is
//   not re-sent; REMOVE (id only) for a task gone or moved away; secrets and
//   configs UPDATE/REMOVE as the referenced set changes. At most --batch
//   (default 100) changes per INCREMENTAL message (a COMPLETE goes whole);
//   nothing when nothing visible changed.
//   SIGUSR1: the next INCREMENTAL carries a wrong applies_to (a broken chain).
//   SIGUSR2: every session ends UNAVAILABLE ("dispatcher is stopped"); with
//   --forget-silently, sessions are only forgotten (streams left open).
// - Tasks (deprecated): the full task list on every change.
// stdout, one JSON object per line:
//   {"event":"listening","address"}
//   {"event":"session","node","session_id","resumed":BOOL}
//   {"event":"session_end","node","session_id","why"}     replaced | expired | dropped | forgotten
//   {"event":"heartbeat","node","session_id","ms"}   ms: when it arrived (monotonic)
//   {"event":"rejected","method","session_id","code","details"}
//   {"event":"task_status","node","session_id","task_id","state","message","timestamp"}
//   {"event":"sent","node","session_id","type","applies_to","results_in",
//    "changes":[{"action","kind","id"}]}
//   {"event":"tasks_sent","node","ids":[..]}
//   {"event":"reloaded"}

const fs = require('fs');
const crypto = require('crypto');
const e = require('./engine_common');

const { c, grpc } = e;
const PROG = 'disp_manager.js';
let opts;
try {
  opts = c.parseArgs(process.argv.slice(2), {
    '--listen': 'string', '--state': 'string', '--heartbeat-period': 'string', '--manager': 'list', '--batch': 'string',
    '--forget-silently': 'bool', ...e.TLS_ARGS,
  });
  if (!opts['--listen']) throw new Error('--listen HOST:PORT is required');
  if (!opts['--state']) throw new Error('--state FILE is required');
} catch (err) {
  c.log(PROG, err.message);
  process.exit(64);
}
const PERIOD_MS = Number(opts['--heartbeat-period'] || 5000);
const BATCH = Number(opts['--batch'] || 100);
const { pkg } = e.loadSwarmkit();
const STATE_ORDER = ['NEW', 'PENDING', 'ASSIGNED', 'ACCEPTED', 'PREPARING', 'READY', 'STARTING', 'RUNNING',
  'COMPLETE', 'SHUTDOWN', 'FAILED', 'REJECTED', 'REMOVE', 'ORPHANED'];
const rank = (s) => (typeof s === 'number' ? s : [0, 64, 192, 256, 320, 384, 448, 512, 576, 640, 704, 768, 800, 832][STATE_ORDER.indexOf(s || 'NEW')]);

let data = { tasks: new Map(), secrets: new Map(), configs: new Map(), nodes: new Map() };
let listenAddr = '';

function readState() {
  const raw = JSON.parse(fs.readFileSync(opts['--state'], 'utf8'));
  const next = {};
  for (const k of ['tasks', 'secrets', 'configs', 'nodes']) {
    next[k] = new Map();
    for (const o of raw[k] || []) {
      if (!o.id) throw new Error(`${k}: an object without id`);
      next[k].set(o.id, o);
    }
  }
  data = next;
}

// The node's view: key "kind/id" -> object, by the (swarmkit's) rules.
function viewOf(node) {
  const v = new Map();
  for (const t of data.tasks.values()) {
    if (t.node_id !== node || rank(t.status && t.status.state) < rank('ASSIGNED')) continue;
    v.set(`task/${t.id}`, t);
    const ctr = (t.spec && t.spec.container) || {};
    for (const r of ctr.secrets || []) if (data.secrets.has(r.secret_id)) v.set(`secret/${r.secret_id}`, data.secrets.get(r.secret_id));
    for (const r of ctr.configs || []) if (data.configs.has(r.config_id)) v.set(`config/${r.config_id}`, data.configs.get(r.config_id));
  }
  return v;
}

// session id -> {id, node, calls:Set, expiry timer, assign:[streams], tasks:[calls]}
const sessions = new Map();
const byNode = new Map();
let breakNext = false;

function endSession(s, why, status) {
  if (!sessions.has(s.id)) return;
  sessions.delete(s.id);
  if (byNode.get(s.node) === s) byNode.delete(s.node);
  clearTimeout(s.timer);
  c.emit({ event: 'session_end', node: s.node, session_id: s.id, why });
  for (const call of s.calls) call.emit('error', status);
  s.calls.clear();
  s.assign = [];
  s.tasks = [];
}

function arm(s) {
  clearTimeout(s.timer);
  s.timer = setTimeout(() => endSession(s, 'expired', { code: grpc.status.UNAVAILABLE, details: 'node not registered' }),
    3 * PERIOD_MS);
}

function lookup(method, call, sid, cb) {
  const s = sessions.get(sid || '');
  if (!s) {
    c.emit({ event: 'rejected', method, session_id: sid || '', code: grpc.status.INVALID_ARGUMENT, details: 'session invalid' });
    const err = { code: grpc.status.INVALID_ARGUMENT, details: 'session invalid' };
    if (cb) cb(err); else call.emit('error', err);
    return null;
  }
  return s;
}

function track(s, call) {
  s.calls.add(call);
  const gone = () => s.calls.delete(call);
  call.on('cancelled', gone);
  call.on('close', gone);
}

function Session(call) {
  const node = (opts['--tls-ca'] && e.peerCn(call)) ||
    (call.request.description && call.request.description.hostname) || '';
  if (!node) {
    c.emit({ event: 'rejected', method: 'Session', session_id: '', code: grpc.status.INVALID_ARGUMENT, details: 'no hostname' });
    call.emit('error', { code: grpc.status.INVALID_ARGUMENT, details: 'SessionRequest.description.hostname is required in cleartext' });
    return;
  }
  const want = call.request.session_id || '';
  let s = sessions.get(want);
  const resumed = !!(s && s.node === node);
  if (!resumed) {
    const old = byNode.get(node);
    if (old) endSession(old, 'replaced', { code: grpc.status.INVALID_ARGUMENT, details: 'session invalid' });
    s = { id: crypto.randomBytes(12).toString('hex'), node, calls: new Set(), timer: null, assign: [], tasks: [] };
    sessions.set(s.id, s);
    byNode.set(node, s);
  }
  arm(s);
  track(s, call);
  c.emit({ event: 'session', node, session_id: s.id, resumed });
  const managers = (opts['--manager'].length ? opts['--manager'] : [listenAddr])
    .map((addr) => ({ peer: { node_id: '', addr }, weight: 1 }));
  call.write({ session_id: s.id, node: data.nodes.get(node) || { id: node }, managers });
}

function Heartbeat(call, cb) {
  const s = lookup('Heartbeat', call, call.request.session_id, cb);
  if (!s) return;
  arm(s);
  c.emit({ event: 'heartbeat', node: s.node, session_id: s.id, ms: performance.now() });
  cb(null, { period: { seconds: String(Math.floor(PERIOD_MS / 1000)), nanos: (PERIOD_MS % 1000) * 1e6 } });
}

const taskStatus = new Map();
function UpdateTaskStatus(call, cb) {
  const s = lookup('UpdateTaskStatus', call, call.request.session_id, cb);
  if (!s) return;
  for (const u of call.request.updates || []) {
    taskStatus.set(u.task_id, u.status || {});
    const ts = u.status && u.status.timestamp;
    c.emit({ event: 'task_status', node: s.node, session_id: s.id, task_id: u.task_id,
      state: (u.status && u.status.state) || 'NEW', message: (u.status && u.status.message) || '',
      timestamp: ts ? Number(ts.seconds || 0) : 0 });
  }
  cb(null, {});
}

function UpdateVolumeStatus(call, cb) {
  if (lookup('UpdateVolumeStatus', call, call.request.session_id, cb)) cb(null, {});
}

let seq = 0;
function nextSeq() { return `${process.pid}-${++seq}`; }

const splitKey = (k) => { const i = k.indexOf('/'); return [k.slice(0, i), k.slice(i + 1)]; };

function sendAssignments(s, a, type, changes) {
  // A COMPLETE goes whole (as swarmkit's); increments at most BATCH changes
  // per message, chained.
  const chunks = [];
  const size = type === 'COMPLETE' ? Math.max(changes.length, 1) : BATCH;
  for (let i = 0; i < changes.length; i += size) chunks.push(changes.slice(i, i + size));
  if (chunks.length === 0) chunks.push([]);
  for (const chunk of chunks) {
    let appliesTo = type === 'COMPLETE' ? '' : a.resultsIn;
    if (type === 'INCREMENTAL' && breakNext) { breakNext = false; appliesTo = `broken-${appliesTo}`; }
    const resultsIn = nextSeq();
    a.resultsIn = resultsIn;
    c.emit({ event: 'sent', node: s.node, session_id: s.id, type, applies_to: appliesTo, results_in: resultsIn,
      changes: chunk.map(([action, key]) => { const [kind, id] = splitKey(key); return { action, kind, id }; }) });
    a.call.write({ type, applies_to: appliesTo, results_in: resultsIn, changes: chunk.map(([action, key, obj]) => {
      const [kind, id] = splitKey(key);
      return { action, assignment: { [kind]: action === 'REMOVE' ? { id } : obj } };
    }) });
  }
}

// Bring one Assignments stream up to date with the node's view.
function syncAssignments(s, a) {
  const view = viewOf(s.node);
  const changes = [];
  for (const [key, obj] of view) {
    const old = a.sent.get(key);
    if (old !== undefined && e.stable(old) === e.stable(obj)) continue;
    if (old !== undefined && key.startsWith('task/') && rank(obj.status && obj.status.state) > rank('RUNNING') &&
        e.stable(old.spec) === e.stable(obj.spec)) {
      continue; // swarmkit: a task past RUNNING with the same spec is not re-sent (the agent knows its state)
    }
    changes.push(['UPDATE', key, obj]);
  }
  for (const key of a.sent.keys()) if (!view.has(key)) changes.push(['REMOVE', key, null]);
  // Secrets/configs first on UPDATE, tasks last; tasks first on REMOVE (swarmkit's order).
  const order = (ch) => (ch[0] === 'UPDATE' ? (ch[1].startsWith('task/') ? 1 : 0) : (ch[1].startsWith('task/') ? 2 : 3));
  changes.sort((x, y) => order(x) - order(y) || (x[1] < y[1] ? -1 : 1));
  for (const [action, key, obj] of changes) {
    if (action === 'REMOVE') a.sent.delete(key); else a.sent.set(key, obj);
  }
  if (a.resultsIn === null) sendAssignments(s, a, 'COMPLETE', changes);
  else if (changes.length) sendAssignments(s, a, 'INCREMENTAL', changes);
}

function Assignments(call) {
  const s = lookup('Assignments', call, call.request.session_id);
  if (!s) return;
  track(s, call);
  const a = { call, sent: new Map(), resultsIn: null };
  s.assign.push(a);
  const gone = () => { s.assign = s.assign.filter((x) => x !== a); };
  call.on('cancelled', gone);
  call.on('close', gone);
  syncAssignments(s, a);
}

function sendTasks(s, t) {
  const tasks = [...data.tasks.values()].filter((x) => x.node_id === s.node &&
    rank(x.status && x.status.state) >= rank('ASSIGNED'));
  const sig = e.stable(tasks);
  if (sig === t.sig) return;
  t.sig = sig;
  c.emit({ event: 'tasks_sent', node: s.node, ids: tasks.map((x) => x.id).sort() });
  t.call.write({ tasks });
}

function Tasks(call) {
  const s = lookup('Tasks', call, call.request.session_id);
  if (!s) return;
  track(s, call);
  const t = { call, sig: null };
  s.tasks.push(t);
  const gone = () => { s.tasks = s.tasks.filter((x) => x !== t); };
  call.on('cancelled', gone);
  call.on('close', gone);
  sendTasks(s, t);
}

readState(); // before serving: a bad FILE fails at once
e.listenWith(pkg.Dispatcher.service, { Session, Heartbeat, UpdateTaskStatus, UpdateVolumeStatus, Tasks, Assignments },
  opts['--listen'], e.serverCreds(opts), (port) => { listenAddr = `${opts['--listen'].slice(0, opts['--listen'].lastIndexOf(':'))}:${port}`; });

process.on('SIGHUP', () => {
  try { readState(); } catch (err) { c.log(PROG, `reload failed: ${err.message}`); return; }
  c.emit({ event: 'reloaded' });
  for (const s of sessions.values()) {
    for (const a of s.assign) syncAssignments(s, a);
    for (const t of s.tasks) sendTasks(s, t);
  }
});
process.on('SIGUSR1', () => { breakNext = true; c.emit({ event: 'break_next' }); });
// SIGUSR2: every session ends (UNAVAILABLE), as when a manager steps down;
// with --forget-silently it is only forgotten: its streams stay open, and
// the next call with its id (a Heartbeat) gets INVALID_ARGUMENT.
process.on('SIGUSR2', () => {
  for (const s of [...sessions.values()]) {
    if (opts['--forget-silently']) {
      sessions.delete(s.id);
      if (byNode.get(s.node) === s) byNode.delete(s.node);
      clearTimeout(s.timer);
      c.emit({ event: 'session_end', node: s.node, session_id: s.id, why: 'forgotten' });
    } else {
      endSession(s, 'dropped', { code: grpc.status.UNAVAILABLE, details: 'dispatcher is stopped' });
    }
  }
});
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
