#!/usr/bin/env node
'use strict';
// An MCP source on @grpc/grpc-js, written from docs/protocol.md (Source
// sections) and the .proto files only, to test libmcp's sink against.
//
//   node mcp_source.js (--listen HOST:PORT | --connect HOST:PORT) --state FILE
//        [--timeout-ms MS] [--api resource|aggregated-incremental]
//
// --listen serves ResourceSource/EstablishResourceStream (the sink dials us);
// --connect dials ResourceSink/EstablishResourceStream, sends the
// "$triggerCollection" trigger first and ignores its UNIMPLEMENTED NACK.
// FILE is {"collection": [{"name", "version", "body": {...}, "labels"?}]}; each
// body is sent as a google.protobuf.Struct in an Any ({"type_url", "value_b64"}
// instead of "body" sends raw bytes). Entries go out as listed, duplicates too. SIGHUP re-reads FILE and
// pushes what changed. A collection the file lacks is served as empty.
// --api aggregated-incremental (--listen only) serves
// AggregatedMeshConfigService/IncrementalAggregatedResources instead: FILE's
// keys are type URLs, and the nonces are plain counters ("1", "2", ...): the
// protocol leaves their form to the source (libmcp's own carry the type).
// stdout, one JSON object per line:
//   {"event":"listening","address":"H:P"}
//   {"event":"request","collection","nonce","verdict":"new"|"ack"|"nack"|"stale"|"trigger",
//    "incremental","initial":{name:version},"node"[,"error":{code,message}]}
//   {"event":"push","collection","nonce","incremental","system_version_info",
//    "resources":[names],"removed":[names]}
//   {"event":"reloaded","changed":[collections]}

const fs = require('fs');
const crypto = require('crypto');
const c = require('./mcp_common');

const PROG = 'mcp_source.js';
let opts;
try {
  opts = c.parseArgs(process.argv.slice(2), {
    '--connect': 'string', '--listen': 'string', '--state': 'string', '--timeout-ms': 'string',
    '--api': 'string',
  });
  opts['--api'] = opts['--api'] || 'resource';
  if (!['resource', 'aggregated-incremental'].includes(opts['--api'])) throw new Error('--api: resource or aggregated-incremental');
  if (opts['--api'] !== 'resource' && !opts['--listen']) throw new Error('--api aggregated-incremental needs --listen');
  if (!opts['--connect'] === !opts['--listen']) throw new Error('give exactly one of --connect, --listen');
  if (!opts['--state']) throw new Error('--state FILE is required');
} catch (e) {
  c.log(PROG, e.message);
  process.exit(64);
}

const mcp = c.loadMcp();
// Versions must not repeat across restarts: system_version_info carries a
// per-process epoch (resource versions are the file's own).
const epoch = crypto.randomBytes(8).toString('hex');

// col -> {gen, sig, list: [{name, version, resource}] in file order,
// versions: Map name -> version}. The list keeps duplicates on purpose, so a
// test can check that a sink rejects them.
const store = new Map();

function toResource(r) {
  // A raw body ("type_url" + "value_b64") lets a test send bytes that are
  // not a valid Struct; otherwise "body" is encoded as a Struct.
  const body = r.type_url !== undefined
    ? { type_url: r.type_url, value: Buffer.from(r.value_b64 || '', 'base64') }
    : { type_url: c.STRUCT_TYPE_URL, value: c.encodeStruct(r.body || {}) };
  return { metadata: { name: r.name, version: r.version || '', labels: r.labels || {}, annotations: {} }, body };
}

function readState() {
  const data = JSON.parse(fs.readFileSync(opts['--state'], 'utf8'));
  const changed = [];
  for (const col of new Set([...store.keys(), ...Object.keys(data)])) {
    const entries = data[col] || [];
    const sig = JSON.stringify(entries);
    const old = store.get(col);
    if (old && old.sig === sig) continue;
    const list = entries.map((r) => ({ name: r.name, version: r.version || '', resource: toResource(r) }));
    store.set(col, { gen: old ? old.gen + 1 : 1, sig, list, versions: new Map(list.map((e) => [e.name, e.version])) });
    changed.push(col);
  }
  return changed;
}

function current(col) {
  if (!store.has(col)) store.set(col, { gen: 0, sig: '[]', list: [], versions: new Map() });
  return store.get(col);
}

const streams = new Set();

// Push collection `col` to one stream. `answer` is true for the answer to a
// new request, which is always sent; otherwise we only send real changes.
function push(st, col, sub, answer) {
  const cur = current(col);
  if (sub.pending) return; // one push in flight per collection
  if (!answer && (sub.gen === cur.gen || sub.nackedGen === cur.gen)) return; // nothing new / NACKed content
  let list = cur.list;
  let removed = [];
  const inc = sub.incremental && sub.known !== null;
  if (inc) {
    // Incremental: what the sink lacks or holds at another version, and
    // the names it holds that are gone.
    list = list.filter((e) => sub.known.get(e.name) !== e.version);
    removed = [...sub.known.keys()].filter((n) => !cur.versions.has(n));
    if (!answer && list.length === 0 && removed.length === 0) { sub.gen = cur.gen; return; }
  }
  const nonce = String(++st.nonce);
  sub.pending = { nonce, gen: cur.gen, snapshot: new Map(cur.versions) };
  const msg = opts['--api'] === 'resource' ? {
    system_version_info: `${epoch}-${cur.gen}`, collection: col, nonce, incremental: inc,
    resources: list.map((e) => e.resource), removed_resources: removed,
  } : { // IncrementalMeshConfigResponse: no type field, the nonce is ours
    system_version_info: `${epoch}-${cur.gen}`, nonce,
    resources: list.map((e) => e.resource), removed_resources: removed,
  };
  c.emit({ event: 'push', collection: col, nonce, incremental: inc, system_version_info: msg.system_version_info,
    resources: list.map((e) => e.name), removed });
  st.send(msg);
}

function onRequest(st, req) {
  const col = req.collection;
  const line = { event: 'request', collection: col, nonce: req.response_nonce, incremental: req.incremental,
    initial: req.initial_resource_versions, node: req.sink_node ? req.sink_node.id : '' };
  if (req.error_detail) line.error = { code: req.error_detail.code, message: req.error_detail.message };
  const sub = st.subs.get(col);
  if ((col === '' || col === c.TRIGGER_COLLECTION) && req.error_detail &&
      req.error_detail.code === c.CODE.UNIMPLEMENTED) {
    line.verdict = 'trigger'; // the sink's answer to our dial-out trigger
  } else if (req.response_nonce === '') {
    // New subscription or re-request: forget what we believed the sink
    // holds, abandon a push in flight, and answer at once.
    line.verdict = 'new';
    const known = req.incremental && Object.keys(req.initial_resource_versions).length > 0
      ? new Map(Object.entries(req.initial_resource_versions)) : null;
    const s = { incremental: req.incremental, known, pending: null, gen: -1, nackedGen: -1 };
    st.subs.set(col, s);
    c.emit(line);
    push(st, col, s, true);
    return;
  } else if (!sub || !sub.pending || sub.pending.nonce !== req.response_nonce) {
    line.verdict = 'stale'; // not the nonce we wait for: ignore
  } else if (req.error_detail) {
    line.verdict = 'nack'; // the sink keeps what it held; never resend this content
    sub.nackedGen = sub.pending.gen;
    sub.pending = null;
  } else {
    line.verdict = 'ack'; // the sink holds exactly what that push described
    sub.known = sub.pending.snapshot;
    sub.gen = sub.pending.gen;
    sub.pending = null;
  }
  c.emit(line);
  if (sub && !sub.pending && line.verdict !== 'stale') push(st, col, sub, false); // coalesced changes
}

function openStream(send) {
  const st = { send, nonce: 0, subs: new Map() };
  streams.add(st);
  return st;
}

readState(); // before serving: a bad FILE fails at once

if (opts['--listen'] && opts['--api'] === 'aggregated-incremental') {
  c.listen(mcp.AggregatedMeshConfigService.service, {
    IncrementalAggregatedResources(call) {
      const st = openStream((m) => call.write(m));
      // The request in RequestResources' shape: the type plays the
      // collection, and the service is always incremental.
      call.on('data', (req) => onRequest(st, { ...req, collection: req.type_url, incremental: true }));
      call.on('end', () => { streams.delete(st); call.end(); });
      call.on('error', () => streams.delete(st));
      call.on('cancelled', () => streams.delete(st));
    },
    StreamAggregatedResources(call) {
      call.emit('error', { code: c.grpc.status.UNIMPLEMENTED, details: 'not served here' });
    },
  }, opts['--listen']);
} else if (opts['--listen']) {
  c.listen(mcp.ResourceSource.service, {
    EstablishResourceStream(call) {
      const st = openStream((m) => call.write(m));
      call.on('data', (req) => onRequest(st, req));
      call.on('end', () => { streams.delete(st); call.end(); });
      call.on('error', () => streams.delete(st));
      call.on('cancelled', () => streams.delete(st));
    },
  }, opts['--listen']);
} else {
  c.dialLoop(mcp.ResourceSink, opts['--connect'], PROG, (call) => {
    const st = openStream((m) => call.write(m));
    const gone = () => streams.delete(st);
    call.on('error', gone);
    call.on('end', gone);
    call.on('data', (req) => onRequest(st, req));
    // The trigger: lets the sink's server side see the stream (Istio does this).
    call.write({ system_version_info: '', collection: c.TRIGGER_COLLECTION, resources: [],
      removed_resources: [], nonce: '', incremental: false });
  });
}

process.on('SIGHUP', () => {
  let changed;
  try { changed = readState(); } catch (e) { c.log(PROG, `reload failed: ${e.message}`); return; }
  c.emit({ event: 'reloaded', changed });
  for (const st of streams) for (const col of changed) if (st.subs.has(col)) push(st, col, st.subs.get(col), false);
});
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
if (opts['--timeout-ms']) setTimeout(() => process.exit(2), Number(opts['--timeout-ms']));
