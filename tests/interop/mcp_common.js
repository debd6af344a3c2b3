'use strict';
// Shared pieces of the interop peers: proto loading, google.protobuf.Struct
// <-> JSON, argument parsing and the JSON-lines output. Kept independent of
// libmcp on purpose: everything here comes from the .proto files and
// @grpc/grpc-js / protobufjs, so a disagreement with our C code is a finding.

const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const PROTO_DIR = path.join(__dirname, '../../proto');
const WKT_INCLUDE = '/usr/include'; // google/protobuf/*.proto from libprotobuf-dev

const STRUCT_TYPE_URL = 'type.googleapis.com/google.protobuf.Struct';
const TRIGGER_COLLECTION = '$triggerCollection';
const CODE = { OK: 0, INVALID_ARGUMENT: 3, UNIMPLEMENTED: 12 };

function loadMcp() {
  const def = protoLoader.loadSync('mcp/v1alpha1/mcp.proto', {
    includeDirs: [PROTO_DIR, WKT_INCLUDE],
    keepCase: true, // field names exactly as on the wire reference
    longs: String,
    enums: String,
    defaults: true, // absent proto3 fields read as '', false, {}, []
    oneofs: true,
  });
  return grpc.loadPackageDefinition(def).istio.mcp.v1alpha1;
}

// Struct is decoded/encoded by us (not by proto-loader) because Any.value is
// opaque bytes to gRPC; we load struct.proto from the same include dir.
const structRoot = new protobuf.Root();
structRoot.resolvePath = (_origin, target) =>
  path.isAbsolute(target) ? target : path.join(WKT_INCLUDE, target);
structRoot.loadSync('google/protobuf/struct.proto');
const Struct = structRoot.lookupType('google.protobuf.Struct');

function valueToJson(v) {
  if ('nullValue' in v) return null;
  if ('numberValue' in v) return v.numberValue;
  if ('stringValue' in v) return v.stringValue;
  if ('boolValue' in v) return v.boolValue;
  if ('structValue' in v) return structToJson(v.structValue);
  if ('listValue' in v) return (v.listValue.values || []).map(valueToJson);
  return null; // a Value with no kind set: treat as null
}

function structToJson(s) {
  const out = {};
  for (const [k, v] of Object.entries((s && s.fields) || {})) out[k] = valueToJson(v);
  return out;
}

function jsonToValue(j) {
  if (j === null || j === undefined) return { nullValue: 0 };
  if (typeof j === 'number') return { numberValue: j };
  if (typeof j === 'string') return { stringValue: j };
  if (typeof j === 'boolean') return { boolValue: j };
  if (Array.isArray(j)) return { listValue: { values: j.map(jsonToValue) } };
  return { structValue: jsonToStruct(j) };
}

function jsonToStruct(obj) {
  const fields = {};
  for (const [k, v] of Object.entries(obj || {})) fields[k] = jsonToValue(v);
  return { fields };
}

// Bytes of a Struct (throws on a bad encoding), and back.
function decodeStruct(buf) {
  return structToJson(Struct.toObject(Struct.decode(buf), { defaults: false }));
}
function encodeStruct(obj) {
  return Buffer.from(Struct.encode(Struct.fromObject(jsonToStruct(obj))).finish());
}

// Typed bodies (Istio 1.6's types, issue 15): the message a type URL names,
// from the Istio protos in proto/istio/ (istio/api release-1.6), loaded with
// protobufjs, the library @grpc/proto-loader is built on. Returns the body
// as a plain object (camelCase names, enums by name, 64-bit integers as
// strings), undefined for a type URL that names no Istio type; throws on
// bytes that do not decode as it.
const ISTIO_DIR = path.join(PROTO_DIR, 'istio');
let istioRoot = null;
function decodeTyped(typeUrl, buf) {
  if (!istioRoot) {
    istioRoot = new protobuf.Root();
    istioRoot.resolvePath = (_origin, target) => {
      if (path.isAbsolute(target)) return target;
      const local = path.join(ISTIO_DIR, target);
      return require('fs').existsSync(local) ? local : path.join(WKT_INCLUDE, target);
    };
    istioRoot.loadSync(['networking/v1alpha3/virtual_service.proto',
      'networking/v1alpha3/destination_rule.proto', 'networking/v1alpha3/gateway.proto',
      'networking/v1alpha3/service_entry.proto', 'networking/v1alpha3/sidecar.proto',
      'networking/v1alpha3/envoy_filter.proto', 'networking/v1alpha3/workload_entry.proto',
      'security/v1beta1/authorization.proto', 'security/v1beta1/peer_authentication.proto',
      'security/v1beta1/request_authentication.proto']);
  }
  const name = typeUrl.slice(typeUrl.lastIndexOf('/') + 1);
  if (!name.startsWith('istio.')) return undefined;
  let T;
  try { T = istioRoot.lookupType(name); } catch (e) { return undefined; }
  const m = T.decode(buf);
  const err = T.verify(m);
  if (err) throw new Error(err);
  return T.toObject(m, { longs: String, enums: String, defaults: false });
}

// Tiny option parser: spec maps '--name' to 'bool' | 'string' | 'list'.
function parseArgs(argv, spec) {
  const opts = {};
  for (const [k, t] of Object.entries(spec)) opts[k] = t === 'list' ? [] : t === 'bool' ? false : undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const t = spec[a];
    if (!t) throw new Error(`unknown option ${a}`);
    if (t === 'bool') { opts[a] = true; continue; }
    if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
    if (t === 'list') opts[a].push(argv[++i]); else opts[a] = argv[++i];
  }
  return opts;
}

// stdout carries only JSON lines (the test reads them); logs go to stderr.
function emit(obj) { process.stdout.write(JSON.stringify(obj) + '\n'); }
function log(prog, ...a) { process.stderr.write(`${prog}: ${a.join(' ')}\n`); }

// Serve one service on HOST:PORT (PORT may be 0); reports the bound address.
function listen(service, impl, addr, onBound) {
  const server = new grpc.Server();
  server.addService(service, impl);
  server.bindAsync(addr, grpc.ServerCredentials.createInsecure(), (err, port) => {
    if (err) { process.stderr.write(`bind ${addr}: ${err.message}\n`); process.exit(1); }
    const host = addr.slice(0, addr.lastIndexOf(':'));
    emit({ event: 'listening', address: `${host}:${port}` });
    if (onBound) onBound(port);
  });
  return server;
}

// Dial a bidi stream and keep redialling (fixed short backoff: these are test
// peers, the peer under test is expected to come back quickly). open(call)
// installs the per-stream handlers; the returned stop() ends the loop.
// |method|: the client's method (default EstablishResourceStream).
function dialLoop(ClientCtor, addr, prog, open, method = 'EstablishResourceStream') {
  const client = new ClientCtor(addr, grpc.credentials.createInsecure());
  let stopped = false;
  let call = null;
  const start = () => {
    if (stopped) return;
    call = client[method]();
    let ended = false;
    const again = (why) => {
      if (ended) return;
      ended = true;
      if (!stopped) { log(prog, `stream ended (${why}); redialling`); setTimeout(start, 250); }
    };
    call.on('error', (e) => again(e.details || e.message));
    call.on('end', () => again('end'));
    call.on('status', (s) => again(`status ${s.code}`));
    open(call);
  };
  start();
  return () => { stopped = true; if (call) call.cancel(); client.close(); };
}

module.exports = {
  grpc, loadMcp, decodeStruct, encodeStruct, decodeTyped, parseArgs, emit, log, listen, dialLoop,
  STRUCT_TYPE_URL, TRIGGER_COLLECTION, CODE,
};
