#!/usr/bin/env node
'use strict';
// A swarmkit worker (agent) on @grpc/grpc-js, written from swarmkit's
// dispatcher.proto and its comments only, to test libmcp's mcp-source
// --api dispatcher against.
//
//   node disp_agent.js --connect HOST:PORT[,HOST:PORT...] --node-id NODE
//        [--api assignments|tasks] [--bodies] [--report-status STATE]
//        [--exit-after-sync] [--timeout-ms MS] [--probe-invalid]
//        [--tls-ca PEM [--tls-cert PEM --tls-key PEM]]
//
// Session (description.hostname = NODE); on its first SessionMessage, the
// session id, then Heartbeat at once and again after each answer's period,
// and Assignments (or, with --api tasks, the deprecated Tasks). A session
// error, a heartbeat error or the end of a stream starts a new session 250 ms
// later, on the next --connect address. Assignments are applied to a held set:
// COMPLETE replaces it, INCREMENTAL must have applies_to == the last
// results_in (else: a "chain_broken" line and a new Assignments stream on the
// same session, as the proto's comment says) and applies UPDATE/REMOVE.
// --report-status STATE: after each message, every held task not yet
// reported in STATE is reported in STATE through UpdateTaskStatus.
// SIGUSR1 pauses the heartbeats (to let the session expire), SIGUSR2 resumes.
// --probe-invalid: once a session starts, Heartbeat, UpdateTaskStatus and
// Assignments with an id no one was given; once a session ends, the same
// with its id; each answer is a "probe" line.
// stdout, one JSON object per line:
//   {"event":"session","session_id","node":{..}|null,"managers":[{"addr","weight"}],"connect"}
//   {"event":"session_message","session_id","managers","node"}  (each later SessionMessage)
//   {"event":"heartbeat","session_id","period_ms"}          (each answer)
//   {"event":"assignments","type":"COMPLETE"|"INCREMENTAL","applies_to","results_in",
//    "changes":[{"action":"UPDATE"|"REMOVE","kind":"task"|"secret"|"config"|"volume","id"
//    [,"object":{..} with --bodies]}],"total":N,"problems":[..]}   (mcp-sink's --json line + problems)
//   {"event":"tasks","ids":[..],"total":N}                  (--api tasks)
//   {"event":"chain_broken","expected","applies_to"}
//   {"event":"reported","state","tasks":[ids],"code","details"}
//   {"event":"session_end","session_id","stream","code","details"}
//   {"event":"probe","why":"unknown"|"ended","session_id","method","code","details"}
//   {"event":"probe","why":"foreign","session_id","method","tasks","code","details"}  (--probe-foreign IDS)
//   {"event":"synced"}                                      first COMPLETE (or Tasks) applied
//   {"event":"state","session_id","held":{"task":[ids],"secret":[..],"config":[..]}}  on SIGTERM
// Exit: 0 on SIGTERM or after --exit-after-sync, 2 at --timeout-ms, 64 on bad options.

const e = require('./engine_common');

const { c, grpc } = e;
const PROG = 'disp_agent.js';
let opts;
try {
  opts = c.parseArgs(process.argv.slice(2), {
    '--connect': 'string', '--node-id': 'string', '--api': 'string', '--bodies': 'bool',
    '--report-status': 'string', '--exit-after-sync': 'bool', '--timeout-ms': 'string',
    '--probe-invalid': 'bool', '--probe-foreign': 'string', ...e.TLS_ARGS,
  });
  if (!opts['--connect']) throw new Error('--connect HOST:PORT[,...] is required');
  if (!opts['--node-id']) throw new Error('--node-id NODE is required');
  opts['--api'] = opts['--api'] || 'assignments';
  if (!['assignments', 'tasks'].includes(opts['--api'])) throw new Error('--api: assignments or tasks');
} catch (err) {
  c.log(PROG, err.message);
  process.exit(64);
}
const NODE = opts['--node-id'];
const { pkg } = e.loadSwarmkit();
const STATE_ORDER = ['NEW', 'PENDING', 'ASSIGNED', 'ACCEPTED', 'PREPARING', 'READY', 'STARTING', 'RUNNING',
  'COMPLETE', 'SHUTDOWN', 'FAILED', 'REJECTED', 'REMOVE', 'ORPHANED'];
if (opts['--report-status'] && !STATE_ORDER.includes(opts['--report-status'])) {
  c.log(PROG, `--report-status: one of ${STATE_ORDER.join(' ')}`);
  process.exit(64);
}
const addrs = opts['--connect'].split(',');
let addrIndex = -1;

// What the agent holds: kind -> Map id -> object. Kept across sessions (a
// new COMPLETE replaces it).
const held = { task: new Map(), secret: new Map(), config: new Map(), volume: new Map() };
const reported = new Map(); // task id -> state reported
let synced = false;
let cur = null; // the current session: {id, client, calls:Set, hbTimer, lastResultsIn, dead}
let paused = false;

function total() { return Object.values(held).reduce((n, m) => n + m.size, 0); }

function stateLine() {
  const out = {};
  for (const [k, m] of Object.entries(held)) if (k !== 'volume' || m.size) out[k] = [...m.keys()].sort();
  c.emit({ event: 'state', session_id: cur ? cur.id : null, held: out });
}

function markSynced() {
  if (synced) return;
  synced = true;
  c.emit({ event: 'synced' });
  if (opts['--exit-after-sync']) { stateLine(); process.exit(0); }
}

// Calls with a session id that is not (or no longer) valid: each answer.
function probe(addr, sid, why) {
  const client = new pkg.Dispatcher(addr, e.clientCreds(opts));
  const out = (method, err) => c.emit({ event: 'probe', why, session_id: sid, method,
    code: err ? err.code : 0, details: err ? err.details : '' });
  client.Heartbeat({ session_id: sid }, (err) => out('Heartbeat', err));
  client.UpdateTaskStatus({ session_id: sid, updates: [{ task_id: 'probe', status: { state: 'RUNNING' } }] },
    (err) => out('UpdateTaskStatus', err));
  const call = client.Assignments({ session_id: sid });
  let got = false;
  call.on('data', () => { if (!got) { got = true; out('Assignments', null); call.cancel(); } });
  call.on('error', (err) => { if (!got) { got = true; out('Assignments', err); } });
  call.on('status', (st) => { if (!got) { got = true; out('Assignments', st.code ? st : null); } });
}

// UpdateTaskStatus, on the live session, for the tasks --probe-foreign
// names (comma-separated: another node's, an unknown one): the answer.
function probeForeign(s) {
  const ids = opts['--probe-foreign'].split(',');
  s.client.UpdateTaskStatus({ session_id: s.id, updates: ids.map((id) => ({ task_id: id,
    status: { state: 'RUNNING', message: 'probe' } })) }, (err) => c.emit({ event: 'probe', why: 'foreign',
    session_id: s.id, method: 'UpdateTaskStatus', tasks: ids, code: err ? err.code : 0,
    details: err ? err.details : '' }));
}

function endSession(s, stream, st) {
  if (s.dead) return;
  s.dead = true;
  c.emit({ event: 'session_end', session_id: s.id, stream, code: st.code, details: st.details });
  clearTimeout(s.hbTimer);
  for (const call of s.calls) call.cancel();
  s.client.close();
  if (opts['--probe-invalid'] && s.id) probe(s.addr, s.id, 'ended');
  if (cur === s) setTimeout(startSession, 250);
}

// Wire the end of |call| (a stream of session |s|) to |onEnd|.
function watchEnd(call, onEnd) {
  let done = false;
  const fin = (st) => { if (!done) { done = true; onEnd(st); } };
  call.on('error', (err) => fin({ code: err.code, details: err.details || err.message }));
  call.on('status', (st) => fin({ code: st.code, details: st.details }));
  call.on('end', () => setImmediate(() => fin({ code: 0, details: 'stream ended' })));
}

function heartbeat(s) {
  if (s.dead) return;
  if (paused) { s.hbTimer = setTimeout(() => heartbeat(s), 100); return; }
  s.client.Heartbeat({ session_id: s.id }, (err, res) => {
    if (s.dead) return;
    if (err) { endSession(s, 'heartbeat', { code: err.code, details: err.details || err.message }); return; }
    const p = res.period || {};
    const ms = Number(p.seconds || 0) * 1000 + Math.floor((p.nanos || 0) / 1e6);
    c.emit({ event: 'heartbeat', session_id: s.id, period_ms: ms });
    s.hbTimer = setTimeout(() => heartbeat(s), Math.max(ms, 10));
  });
}

function kindOf(a) {
  for (const k of ['task', 'secret', 'config', 'volume']) if (a && a[k]) return k;
  return null;
}

function report(s) {
  const want = opts['--report-status'];
  if (!want || s.dead) return;
  const ids = [...held.task.keys()].filter((id) => reported.get(id) !== want).sort();
  if (ids.length === 0) return;
  for (const id of ids) reported.set(id, want);
  const now = Date.now();
  const updates = ids.map((id) => ({ task_id: id, status: { state: want, message: 'reported by disp_agent.js',
    timestamp: { seconds: String(Math.floor(now / 1000)), nanos: (now % 1000) * 1e6 } } }));
  s.client.UpdateTaskStatus({ session_id: s.id, updates }, (err) => {
    c.emit({ event: 'reported', state: want, tasks: ids, code: err ? err.code : 0, details: err ? err.details : '' });
    if (err) for (const id of ids) reported.delete(id);
  });
}

function onAssignments(s, call, m) {
  const type = m.type || 'COMPLETE';
  const appliesTo = m.applies_to || '';
  const resultsIn = m.results_in || '';
  const problems = [];
  if (type === 'INCREMENTAL' && appliesTo !== s.lastResultsIn) {
    // Missed or foreign messages: this set can no longer be trusted.
    c.emit({ event: 'chain_broken', expected: s.lastResultsIn, applies_to: appliesTo, results_in: resultsIn });
    s.calls.delete(call);
    call.cancel();
    s.lastResultsIn = null;
    openAssignments(s);
    return;
  }
  if (type === 'COMPLETE') {
    if (appliesTo !== '') problems.push(`COMPLETE with applies_to ${JSON.stringify(appliesTo)}`);
    for (const mm of Object.values(held)) mm.clear();
  }
  const changes = [];
  for (const ch of m.changes || []) {
    const action = ch.action || 'UPDATE';
    const kind = kindOf(ch.assignment);
    if (!kind) { problems.push('change without an assignment item'); continue; }
    const obj = ch.assignment[kind];
    const id = obj.id || '';
    if (!id) problems.push(`${kind} without id`);
    const line = { action, kind, id };
    if (action === 'REMOVE') {
      if (type === 'COMPLETE') problems.push(`REMOVE ${kind}/${id} in a COMPLETE message`);
      if (!held[kind].has(id)) problems.push(`REMOVE of ${kind}/${id}, not held`);
      held[kind].delete(id);
      if (kind === 'task') reported.delete(id);
    } else {
      if (kind === 'task') {
        if ((obj.node_id || '') !== NODE) problems.push(`task ${id} for node ${JSON.stringify(obj.node_id)}`);
        const st = (obj.status && obj.status.state) || 'NEW';
        if (STATE_ORDER.indexOf(st) < STATE_ORDER.indexOf('ASSIGNED')) problems.push(`task ${id} in state ${st}`);
      }
      held[kind].set(id, obj);
      if (opts['--bodies']) line.object = e.plain(obj);
    }
    changes.push(line);
  }
  s.lastResultsIn = resultsIn;
  const out = { event: 'assignments', type, applies_to: appliesTo, results_in: resultsIn, changes, total: total() };
  if (problems.length) out.problems = problems;
  c.emit(out);
  markSynced();
  report(s);
}

function openAssignments(s) {
  if (s.dead) return;
  if (opts['--api'] === 'tasks') {
    const call = s.client.Tasks({ session_id: s.id });
    s.calls.add(call);
    call.on('data', (m) => {
      held.task.clear();
      for (const t of m.tasks || []) held.task.set(t.id, t);
      c.emit({ event: 'tasks', ids: [...held.task.keys()].sort(), total: held.task.size,
        ...(opts['--bodies'] ? { objects: (m.tasks || []).map(e.plain) } : {}) });
      markSynced();
      report(s);
    });
    watchEnd(call, (st) => { if (s.calls.has(call)) endSession(s, 'tasks', st); });
    return;
  }
  const call = s.client.Assignments({ session_id: s.id });
  s.calls.add(call);
  call.on('data', (m) => { if (s.calls.has(call)) onAssignments(s, call, m); });
  watchEnd(call, (st) => { if (s.calls.has(call)) endSession(s, 'assignments', st); });
}

function startSession() {
  addrIndex = (addrIndex + 1) % addrs.length;
  const client = new pkg.Dispatcher(addrs[addrIndex], e.clientCreds(opts));
  const s = { id: null, client, calls: new Set(), hbTimer: null, lastResultsIn: null, dead: false, addr: addrs[addrIndex] };
  cur = s;
  const call = client.Session({ description: { hostname: NODE }, session_id: '' });
  s.calls.add(call);
  call.on('data', (m) => {
    if (s.dead) return;
    const managers = (m.managers || []).map((w) => ({ addr: (w.peer && w.peer.addr) || '', node_id: (w.peer && w.peer.node_id) || '',
      weight: Number(w.weight || 0) }));
    if (s.id === null) {
      s.id = m.session_id || '';
      c.emit({ event: 'session', session_id: s.id, node: m.node ? e.plain(m.node) : null, managers,
        connect: addrs[addrIndex] });
      if (!s.id) { endSession(s, 'session', { code: -1, details: 'first SessionMessage without session_id' }); return; }
      heartbeat(s);
      openAssignments(s);
      if (opts['--probe-invalid']) probe(s.addr, `${s.id}-not-given`, 'unknown');
      if (opts['--probe-foreign']) probeForeign(s);
    } else {
      c.emit({ event: 'session_message', session_id: m.session_id || '', managers,
        node: m.node ? e.plain(m.node) : null });
    }
  });
  watchEnd(call, (st) => endSession(s, 'session', st));
}

startSession();
process.on('SIGUSR1', () => { paused = true; c.emit({ event: 'heartbeats', paused }); });
process.on('SIGUSR2', () => { paused = false; c.emit({ event: 'heartbeats', paused }); });
const quit = () => { stateLine(); process.exit(0); };
process.on('SIGTERM', quit);
process.on('SIGINT', quit);
if (opts['--timeout-ms']) setTimeout(() => { stateLine(); process.exit(2); }, Number(opts['--timeout-ms']));
