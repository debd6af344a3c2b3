#!/usr/bin/env node
'use strict';
// An MCP sink on @grpc/grpc-js, written from docs/protocol.md (Sink section)
// and the .proto files only, to test libmcp's source against.
//
//   node mcp_sink.js (--connect HOST:PORT | --listen HOST:PORT)
//        --collection NAME... [--incremental] [--node-id ID] [--bodies]
//        [--exit-after-sync] [--timeout-ms MS] [--nack COLLECTION]...
//        [--nack-name NAME]... [--api resource|aggregated|aggregated-incremental]
//
// --nack COLLECTION rejects every push of it; --nack-name NAME every push
// that carries a resource named NAME (INVALID_ARGUMENT, nothing applied).
// --connect dials ResourceSource/EstablishResourceStream (the usual way);
// --listen serves ResourceSink/EstablishResourceStream (the source dials us).
// --api aggregated dials AggregatedMeshConfigService/StreamAggregatedResources
// (MeshConfigRequest/Response: always full state; requests carry
// version_info = the version last applied for the type, on a NACK the
// previous good one); --api aggregated-incremental dials
// .../IncrementalAggregatedResources (IncrementalMeshConfigRequest/Response:
// always differences; every stream's first request per type carries
// initial_resource_versions = what is held, possibly empty; a response names
// its type only in the nonce, "<n>:<type_url>", docs/protocol.md). With
// either, --collection values (and the "collection" of the lines) are type
// URLs, and --connect is required.
// stdout, one JSON object per line:
//   {"event":"listening","address":"H:P"}             (--listen, once bound)
//   {"event":"response","collection","nonce","incremental","system_version_info",
//    "resources":[{"name","version","type_url"[,"body","labels","annotations"]}],
//    (body: a Struct's JSON, an Istio type's message as an object, else absent)
//    "removed":[..],"verdict":"ack"|"nack"[,"error":{code,message}],"total":N}
//   {"event":"sent","collection","response_nonce"[,"version_info"]
//    [,"initial":{name:version}][,"error_code":N]}  (aggregated APIs: each request)
//   {"event":"protocol_error","collection","message"}  (stream is ended)
//   {"event":"state","collections":{C:{name:version}}[,"timeout":true]} at exit
// Exit: 0 after sync (--exit-after-sync) or SIGTERM/SIGINT; 2 on --timeout-ms.

const c = require('./mcp_common');

const PROG = 'mcp_sink.js';
let opts;
try {
  opts = c.parseArgs(process.argv.slice(2), {
    '--connect': 'string', '--listen': 'string', '--collection': 'list',
    '--incremental': 'bool', '--node-id': 'string', '--exit-after-sync': 'bool',
    '--timeout-ms': 'string', '--bodies': 'bool', '--nack': 'list', '--api': 'string',
    '--nack-name': 'list',
  });
  if (!opts['--connect'] === !opts['--listen']) throw new Error('give exactly one of --connect, --listen');
  if (opts['--collection'].length === 0) throw new Error('give at least one --collection');
  opts['--api'] = opts['--api'] || 'resource';
  if (!['resource', 'aggregated', 'aggregated-incremental'].includes(opts['--api'])) {
    throw new Error(`unknown --api ${opts['--api']}`);
  }
  if (opts['--api'] !== 'resource' && !opts['--connect']) throw new Error(`--api ${opts['--api']} needs --connect`);
  if (opts['--api'] === 'aggregated' && opts['--incremental']) throw new Error('--api aggregated is full state only');
} catch (e) {
  c.log(PROG, e.message);
  process.exit(64);
}

const mcp = c.loadMcp();
const collections = opts['--collection'];
const API = opts['--api'];
// AGGREGATED never asks for differences, AGGREGATED_INCREMENTAL always does.
const incremental = API === 'aggregated-incremental' || opts['--incremental'];
// StreamAggregatedResources: the version_info last applied per type URL.
const applied = new Map(collections.map((col) => [col, '']));
const sinkNode = { id: opts['--node-id'] || 'node-sink', annotations: {} };

// What we hold, per collection: name -> {version, type_url, body?...}. It
// outlives streams, so a redial can resume with initial_resource_versions.
const held = new Map(collections.map((col) => [col, new Map()]));
const synced = new Set(); // collections received and ACKed at least once

function stateJson() {
  const out = {};
  for (const [col, m] of held) {
    out[col] = {};
    for (const [name, r] of m) out[col][name] = r.version;
  }
  return out;
}

let finishing = false;
function finish(code, extra) {
  if (finishing) return;
  finishing = true;
  c.emit({ event: 'state', collections: stateJson(), ...extra });
  process.exit(code);
}

function heldVersions(col) {
  const versions = {};
  for (const [name, r] of held.get(col)) versions[name] = r.version;
  return versions;
}

function initialRequest(col) {
  switch (API) {
    case 'aggregated':
      // A new subscription: no version applied on this stream yet.
      return { version_info: '', sink_node: sinkNode, type_url: col, response_nonce: '' };
    case 'aggregated-incremental':
      // Always the versions held: an empty map means "holds nothing".
      return { sink_node: sinkNode, type_url: col, response_nonce: '',
        initial_resource_versions: heldVersions(col) };
    default:
      return { sink_node: sinkNode, collection: col, response_nonce: '', incremental,
        initial_resource_versions: incremental ? heldVersions(col) : {} };
  }
}

// The answer to a push of |col| (ACK, or NACK with |error|).
function replyTo(col, nonce, error) {
  const detail = error ? { code: error.code, message: error.message, details: [] } : null;
  switch (API) {
    case 'aggregated':
      // version_info: what is applied now (after a NACK, the previous good).
      return { version_info: applied.get(col) || '', sink_node: sinkNode, type_url: col,
        response_nonce: nonce, error_detail: detail };
    case 'aggregated-incremental':
      return { sink_node: sinkNode, type_url: col, response_nonce: nonce, error_detail: detail };
    default:
      return { sink_node: sinkNode, collection: col, response_nonce: nonce, incremental,
        error_detail: detail };
  }
}

// A received message in the shape of a Resources (collection, nonce,
// incremental, system_version_info, resources, removed_resources).
function normalize(msg) {
  switch (API) {
    case 'aggregated':
      return { collection: msg.type_url, nonce: msg.nonce, incremental: false,
        system_version_info: msg.version_info, resources: msg.resources, removed_resources: [] };
    case 'aggregated-incremental': {
      // No type field: the nonce carries it ("<n>:<type_url>").
      const i = msg.nonce.indexOf(':');
      return { collection: i < 0 ? '' : msg.nonce.slice(i + 1), nonce: msg.nonce, incremental: true,
        system_version_info: msg.system_version_info, resources: msg.resources,
        removed_resources: msg.removed_resources };
    }
    default:
      return msg;
  }
}

// The aggregated APIs' requests, as lines (so tests see version_info).
function sentLine(req) {
  if (API === 'resource') return;
  const line = { event: 'sent', collection: req.type_url, response_nonce: req.response_nonce };
  if (API === 'aggregated') line.version_info = req.version_info;
  if (req.initial_resource_versions) line.initial = req.initial_resource_versions;
  if (req.error_detail) line.error_code = req.error_detail.code;
  c.emit(line);
}

// Check a whole Resources before touching anything (a NACK changes nothing).
// Returns {error} for a NACK, or {entries} (decoded resources) to apply.
function validate(msg) {
  const bad = (message) => ({ error: { code: c.CODE.INVALID_ARGUMENT, message } });
  if (!held.has(msg.collection)) {
    return { error: { code: c.CODE.UNIMPLEMENTED, message: `unsupported collection "${msg.collection}"` } };
  }
  if (msg.incremental && !incremental) return bad('incremental push, but the sink did not ask for it');
  const seen = new Set();
  const entries = [];
  for (const r of msg.resources) {
    const md = r.metadata;
    const name = md ? md.name : '';
    if (!name) return bad('resource without metadata.name');
    if (!r.body || !r.body.type_url) return bad(`resource ${name}: body without type_url`);
    if (seen.has(name)) return bad(`resource ${name} listed twice`);
    seen.add(name);
    const nanos = md.create_time ? md.create_time.nanos : 0;
    if (nanos < 0 || nanos >= 1e9) return bad(`resource ${name}: create_time.nanos out of range`);
    const e = { name, version: md.version, type_url: r.body.type_url,
      labels: md.labels, annotations: md.annotations };
    if (r.body.type_url === c.STRUCT_TYPE_URL) {
      try { e.body = c.decodeStruct(r.body.value); } catch (err) {
        return bad(`resource ${name}: Struct body does not decode: ${err.message}`);
      }
    } else {
      // An Istio type (as Pilot would): decoded as that message.
      try { e.body = c.decodeTyped(r.body.type_url, r.body.value); } catch (err) {
        return bad(`resource ${name}: ${r.body.type_url} body does not decode: ${err.message}`);
      }
    }
    entries.push(e);
  }
  if (msg.incremental) {
    for (const n of msg.removed_resources) if (seen.has(n)) return bad(`resource ${n} both added and removed`);
  }
  // --nack COLLECTION: play an application that rejects everything, to see
  // how the source handles NACKs.
  if (opts['--nack'].includes(msg.collection)) return bad('rejected by --nack');
  for (const e of entries) if (opts['--nack-name'].includes(e.name)) return bad(`${e.name}: rejected by --nack-name`);
  return { entries };
}

// One stream, whichever side dialled. send() writes a RequestResources;
// fail() ends the stream after a protocol violation.
function runStream(rawSend, fail) {
  const send = (req, cb) => { sentLine(req); rawSend(req, cb); };
  for (const col of collections) send(initialRequest(col));
  return (raw) => {
    const msg = normalize(raw);
    if (held.has(msg.collection) && msg.nonce === '') {
      // No nonce to answer: the source broke the protocol (docs: stream ends).
      c.emit({ event: 'protocol_error', collection: msg.collection, message: 'push without nonce' });
      fail('push without nonce');
      return;
    }
    const v = validate(msg);
    const line = {
      event: 'response', collection: msg.collection, nonce: msg.nonce, incremental: msg.incremental,
      system_version_info: msg.system_version_info,
      resources: msg.resources.map((r) => ({ name: r.metadata ? r.metadata.name : '',
        version: r.metadata ? r.metadata.version : '', type_url: r.body ? r.body.type_url : '' })),
      removed: msg.removed_resources,
    };
    let reply;
    if (v.error) {
      line.verdict = 'nack';
      line.error = v.error;
      reply = replyTo(msg.collection, msg.nonce, v.error);
    } else {
      const m = held.get(msg.collection);
      if (!msg.incremental) m.clear(); // full state replaces; its removed list is ignored
      else for (const n of msg.removed_resources) m.delete(n);
      for (const e of v.entries) m.set(e.name, e);
      line.verdict = 'ack';
      if (opts['--bodies']) {
        line.resources = v.entries.map((e) => ({ name: e.name, version: e.version, type_url: e.type_url,
          body: e.body, labels: e.labels, annotations: e.annotations }));
      }
      synced.add(msg.collection);
      applied.set(msg.collection, msg.system_version_info);
      reply = replyTo(msg.collection, msg.nonce, null);
    }
    line.total = held.has(msg.collection) ? held.get(msg.collection).size : 0;
    c.emit(line);
    send(reply, () => {
      // Exit only once the ACK is on its way, so the source sees it.
      if (opts['--exit-after-sync'] && collections.every((col) => synced.has(col))) {
        setTimeout(() => finish(0), 100);
      }
    });
  };
}

if (opts['--connect'] && API !== 'resource') {
  const method = API === 'aggregated' ? 'StreamAggregatedResources' : 'IncrementalAggregatedResources';
  c.dialLoop(mcp.AggregatedMeshConfigService, opts['--connect'], PROG, (call) => {
    const onData = runStream((m, cb) => call.write(m, cb), () => call.cancel());
    call.on('data', onData);
  }, method);
} else if (opts['--connect']) {
  c.dialLoop(mcp.ResourceSource, opts['--connect'], PROG, (call) => {
    const onData = runStream((m, cb) => call.write(m, cb), () => call.cancel());
    call.on('data', onData);
  });
} else {
  c.listen(mcp.ResourceSink.service, {
    EstablishResourceStream(call) {
      // The dialling source's first message is the "$triggerCollection"
      // trigger; validate() NACKs it with UNIMPLEMENTED like any unrequested
      // collection, as Istio's sinks do.
      const onData = runStream((m, cb) => call.write(m, cb),
        (why) => call.emit('error', { code: c.grpc.status.INVALID_ARGUMENT, details: why }));
      call.on('data', onData);
      call.on('end', () => call.end());
      call.on('error', () => {});
    },
  }, opts['--listen']);
}

process.on('SIGTERM', () => finish(0));
process.on('SIGINT', () => finish(0));
if (opts['--timeout-ms']) setTimeout(() => finish(2, { timeout: true }), Number(opts['--timeout-ms']));
