'use strict';
// Shared pieces of the Destination and Dispatcher peers (dest_*.js,
// disp_*.js): where the .proto files are, loading them with
// @grpc/proto-loader, addresses in conduit.common's form, and a redialling
// server-stream helper. Independent of libmcp on purpose: only the upstream
// .proto files, their comments and @grpc/grpc-js.
//
// Proto files: the in-repo copies (proto/conduit, proto/swarmkit) when they
// exist, else the shared verbatim copies (../shared/protos/<name> next to the
// repository); INTEROP_PROTO_DIR=<dir holding conduit/ and swarmkit/>
// overrides both. google/protobuf/*.proto comes from /usr/include.

const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const c = require('./mcp_common');

const REPO = path.join(__dirname, '../..');
const WKT_INCLUDE = '/usr/include';

// The directory holding <name>/ (conduit or swarmkit) and the file that must
// be in it, first match wins.
function protoRoot(name, probe) {
  const cands = [];
  if (process.env.INTEROP_PROTO_DIR) cands.push(path.join(process.env.INTEROP_PROTO_DIR, name));
  cands.push(path.join(REPO, 'proto', name), path.join(REPO, '..', 'shared', 'protos', name),
    path.join('/work/shared/protos', name));
  for (const d of cands) if (fs.existsSync(path.join(d, probe))) return d;
  throw new Error(`no ${name} protos (${probe}) in: ${cands.join(', ')}`);
}

const LOAD_OPTS = {
  keepCase: true, // snake_case field names, as in the .proto text
  longs: String, // fixed64 IPv6 halves and uint64s as decimal strings
  enums: String,
  defaults: true, // absent proto3 fields read as '', 0, false, [], {}
  oneofs: true, // the name of the oneof member set, e.g. update.update === 'add'
};

let conduitCache = null;
function loadConduit() {
  if (!conduitCache) {
    const root = protoRoot('conduit', 'proxy/destination/destination.proto');
    const def = protoLoader.loadSync('proxy/destination/destination.proto',
      { ...LOAD_OPTS, includeDirs: [root, WKT_INCLUDE] });
    conduitCache = { pkg: grpc.loadPackageDefinition(def).conduit, root };
  }
  return conduitCache;
}

let swarmkitCache = null;
function loadSwarmkit() {
  if (!swarmkitCache) {
    const root = protoRoot('swarmkit', 'github.com/docker/swarmkit/api/dispatcher.proto');
    // defaults: false here: swarmkit's objects are large and mostly empty;
    // printed and compared, they should show what was on the wire.
    const def = protoLoader.loadSync('github.com/docker/swarmkit/api/dispatcher.proto',
      { ...LOAD_OPTS, defaults: false, includeDirs: [root, WKT_INCLUDE] });
    swarmkitCache = { pkg: grpc.loadPackageDefinition(def).docker.swarmkit.v1, root };
  }
  return swarmkitCache;
}

// --- addresses (conduit.common.TcpAddress) ------------------------------

// "a.b.c.d" -> uint32 (the fixed32 value: 10.0.0.1 = 0x0A000001), or null.
function parseIpv4(s) {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(s);
  if (!m) return null;
  const b = m.slice(1).map(Number);
  if (b.some((x, i) => x > 255 || (m[i + 1].length > 1 && m[i + 1][0] === '0'))) return null;
  return ((b[0] << 24) >>> 0) + (b[1] << 16) + (b[2] << 8) + b[3];
}

function ipv4Text(n) {
  n >>>= 0;
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

// IPv6 text -> eight hextets, or null. "::" compression; no zone, no
// embedded IPv4 (test data never uses them).
function parseIpv6(s) {
  if (!/^[0-9a-fA-F:]+$/.test(s)) return null;
  const halves = s.split('::');
  if (halves.length > 2) return null;
  const hex = (t) => (t === '' ? [] : t.split(':')).map((h) => (/^[0-9a-fA-F]{1,4}$/.test(h) ? parseInt(h, 16) : NaN));
  const head = hex(halves[0]);
  const rest = halves.length === 2 ? hex(halves[1]) : [];
  if ([...head, ...rest].some(Number.isNaN)) return null;
  const n = head.length + rest.length;
  if (halves.length === 2 ? n > 7 : n !== 8) return null;
  return [...head, ...new Array(8 - n).fill(0), ...rest];
}

// RFC 5952: lower case, no leading zeros, the longest run (>= 2) of zero
// hextets as "::", the first such run on a tie.
function ipv6Text(h) {
  let best = -1; let bestLen = 1;
  for (let i = 0; i < 8;) {
    if (h[i] !== 0) { i++; continue; }
    let j = i;
    while (j < 8 && h[j] === 0) j++;
    if (j - i > bestLen) { best = i; bestLen = j - i; }
    i = j;
  }
  const t = (a) => a.map((x) => x.toString(16)).join(':');
  if (best < 0) return t(h);
  return `${t(h.slice(0, best))}::${t(h.slice(best + bestLen))}`;
}

// Two fixed64 decimal strings (proto-loader's longs: String) <-> hextets.
function hextetsFromHalves(first, last) {
  const out = [];
  for (const v of [BigInt(first), BigInt(last)]) for (let i = 3; i >= 0; i--) out.push(Number((v >> BigInt(16 * i)) & 0xffffn));
  return out;
}
function halvesFromHextets(h) {
  const half = (a) => a.reduce((acc, x) => (acc << 16n) | BigInt(x), 0n).toString();
  return { first: half(h.slice(0, 4)), last: half(h.slice(4)) };
}

// TcpAddress -> "IP:PORT" / "[v6]:PORT"; throws on a malformed address.
function tcpText(a) {
  if (!a || !a.ip || !a.ip.ip) throw new Error('TcpAddress without ip');
  if (a.port > 65535) throw new Error(`port ${a.port} out of range`);
  if (a.ip.ip === 'ipv4') return `${ipv4Text(a.ip.ipv4)}:${a.port}`;
  const v6 = a.ip.ipv6 || {};
  return `[${ipv6Text(hextetsFromHalves(v6.first || '0', v6.last || '0'))}]:${a.port}`;
}

// "IP:PORT" / "[v6]:PORT" -> TcpAddress (throws on a malformed one); the
// canonical text comes back as .text.
function tcpFromText(s) {
  let host; let port;
  const m6 = /^\[([^\]]+)\]:(\d+)$/.exec(s);
  if (m6) { host = m6[1]; port = m6[2]; } else {
    const i = s.lastIndexOf(':');
    if (i < 0) throw new Error(`address ${s}: no port`);
    host = s.slice(0, i); port = s.slice(i + 1);
  }
  if (!/^\d+$/.test(port) || Number(port) > 65535) throw new Error(`address ${s}: bad port`);
  const v4 = parseIpv4(host);
  if (v4 !== null && !m6) return { ip: { ipv4: v4 }, port: Number(port), text: `${ipv4Text(v4)}:${Number(port)}` };
  const h = m6 ? parseIpv6(host) : null;
  if (!h) throw new Error(`address ${s}: not an IPv4 or [IPv6] literal`);
  return { ip: { ipv6: halvesFromHextets(h) }, port: Number(port), text: `[${ipv6Text(h)}]:${Number(port)}` };
}

// Authority "host[:port]" -> {host, port} (port 80 when absent), or null
// when malformed. host is lower-cased and loses a trailing dot.
function parseAuthority(a) {
  if (typeof a !== 'string' || a === '') return null;
  let host = a; let port = '80';
  const m6 = /^\[([^\]]*)\](?::(.*))?$/.exec(a);
  if (m6) { host = m6[1]; if (m6[2] !== undefined) port = m6[2]; } else {
    const i = a.lastIndexOf(':');
    if (i >= 0) { host = a.slice(0, i); port = a.slice(i + 1); }
  }
  if (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) return null;
  if (host.endsWith('.')) host = host.slice(0, -1);
  if (host === '' || !/^[A-Za-z0-9.\-:]+$/.test(host) || host.includes('..')) return null;
  return { host: host.toLowerCase(), port: Number(port) };
}

// Call |open()| (which returns a server-streaming call) again 250 ms after
// each end, until stop(); |handlers| get each call's events.
function redialLoop(open, handlers, prog) {
  let stopped = false;
  let call = null;
  let timer = null;
  const start = () => {
    if (stopped) return;
    call = open();
    let ended = false;
    const again = (st) => {
      if (ended) return;
      ended = true;
      if (handlers.onEnd) handlers.onEnd(st);
      if (!stopped && handlers.redial !== false) {
        c.log(prog, `stream ended (${st.code} ${st.details}); redialling`);
        timer = setTimeout(start, 250);
      }
    };
    call.on('data', (m) => handlers.onData(m, call));
    call.on('error', (e) => again({ code: e.code, details: e.details || e.message }));
    call.on('status', (s) => again({ code: s.code, details: s.details }));
    call.on('end', () => setImmediate(() => again({ code: 0, details: 'end' })));
    if (handlers.onStart) handlers.onStart(call);
  };
  start();
  return () => { stopped = true; clearTimeout(timer); if (call) call.cancel(); };
}

// --- TLS (--tls-ca, --tls-cert, --tls-key: PEM files) ---------------------

// A client's credentials: TLS when --tls-ca is given (with a client
// certificate when --tls-cert/--tls-key are), else cleartext.
function clientCreds(opts) {
  if (!opts['--tls-ca']) return grpc.credentials.createInsecure();
  const rd = (k) => (opts[k] ? fs.readFileSync(opts[k]) : null);
  return grpc.credentials.createSsl(rd('--tls-ca'), rd('--tls-key'), rd('--tls-cert'));
}

// A server's credentials: TLS when --tls-cert/--tls-key are given; with
// --tls-ca, clients must present a certificate it verifies.
function serverCreds(opts) {
  if (!opts['--tls-cert']) return grpc.ServerCredentials.createInsecure();
  const ca = opts['--tls-ca'] ? fs.readFileSync(opts['--tls-ca']) : null;
  return grpc.ServerCredentials.createSsl(ca,
    [{ private_key: fs.readFileSync(opts['--tls-key']), cert_chain: fs.readFileSync(opts['--tls-cert']) }], !!ca);
}

// The verified client certificate's CN of a server call, or ''.
function peerCn(call) {
  try {
    const cert = call.getAuthContext().sslPeerCertificate;
    return (cert && cert.subject && cert.subject.CN) || '';
  } catch (err) {
    return '';
  }
}

// Serve one service on HOST:PORT (PORT may be 0) with |creds|; reports the
// bound address as mcp_common's listen() does.
function listenWith(service, impl, addr, creds, onBound) {
  const server = new grpc.Server();
  server.addService(service, impl);
  server.bindAsync(addr, creds, (err, port) => {
    if (err) { process.stderr.write(`bind ${addr}: ${err.message}\n`); process.exit(1); }
    const host = addr.slice(0, addr.lastIndexOf(':'));
    if (onBound) onBound(port);
    c.emit({ event: 'listening', address: `${host}:${port}` });
  });
  return server;
}

const TLS_ARGS = { '--tls-ca': 'string', '--tls-cert': 'string', '--tls-key': 'string' };

// A decoded message as JSON-ready data: bytes as base64 (proto3 JSON's
// form), the oneof-name properties proto-loader adds dropped.
function plain(v, oneofNames = ONEOF_NAMES) {
  if (Buffer.isBuffer(v) || v instanceof Uint8Array) return Buffer.from(v).toString('base64');
  if (Array.isArray(v)) return v.map((x) => plain(x, oneofNames));
  if (v && typeof v === 'object') {
    const out = {};
    for (const [k, x] of Object.entries(v)) {
      if (typeof x === 'string' && oneofNames.has(k) && Object.prototype.hasOwnProperty.call(v, x)) continue;
      out[k] = plain(x, oneofNames);
    }
    return out;
  }
  return v;
}
// swarmkit's oneof names in the objects we print (Task, Secret, Config, Node).
const ONEOF_NAMES = new Set(['runtime', 'target', 'item', 'mode', 'kind', 'config', 'ip', 'update', 'resource',
  'access_type', 'details', 'message', 'Provider', 'provider', 'spec', 'runtime_data', 'value', 'source']);

// A stable JSON text (object keys sorted) to compare objects by content.
function stable(v) {
  if (Array.isArray(v)) return `[${v.map(stable).join(',')}]`;
  if (v && typeof v === 'object' && !Buffer.isBuffer(v)) {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${stable(v[k])}`).join(',')}}`;
  }
  if (Buffer.isBuffer(v)) return JSON.stringify(v.toString('base64'));
  return JSON.stringify(v === undefined ? null : v);
}

module.exports = {
  grpc, c, loadConduit, loadSwarmkit, protoRoot, parseIpv4, ipv4Text, parseIpv6, ipv6Text,
  hextetsFromHalves, halvesFromHextets, tcpText, tcpFromText, parseAuthority, redialLoop, stable, plain,
  clientCreds, serverCreds, peerCn, listenWith, TLS_ARGS,
};
