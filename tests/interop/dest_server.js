#!/usr/bin/env node
'use strict';
// A Conduit Destination server (the controller side) on @grpc/grpc-js,
// written from conduit's destination.proto and its comments only, to test
// libmcp's mcp-sink --api destination against.
//
//   node dest_server.js --listen HOST:PORT --state FILE [--heartbeat-ms MS] [--repeat]
//        [--tls-cert PEM --tls-key PEM [--tls-ca PEM]]
//
// FILE (JSON; SIGHUP re-reads it and pushes what changed to every stream):
//   {"services": {"<host>[:port]": null | {"addrs": [ADDR, ...], "labels": {..}}}}
// A key is an authority (port 80 when absent; trailing dot and case ignored);
// a service absent or null does not exist; "addrs": [] exists without
// endpoints. ADDR is "IP:PORT" / "[v6]:PORT" or {"addr", "weight" (default 1),
// "labels": {..}}; "labels" of a service are WeightedAddrSet.metric_labels.
// Get rules (destination.proto): scheme must be "k8s" and path host[:port]
// (else INVALID_ARGUMENT); an IPv4 literal host gets one `add` of itself and
// nothing more; the first message goes out at once: no_endpoints{exists:false}
// for a service that does not exist, no_endpoints{exists:true} for one
// without endpoints, else `add` with all. Then: `add` with exactly the new (or
// changed) addresses, `remove` with exactly the vanished ones (add before
// remove, so the set never looks empty in between), no_endpoints{exists:true}
// when the last one goes, no_endpoints{exists:false} when the service goes;
// nothing for a reload that leaves a stream's set as it was. Every
// --heartbeat-ms (default 0 = off) without an update, an empty `add`.
// --repeat sends every update twice (clients must cope with redundant
// messages, says the proto).
// stdout, one JSON object per line:
//   {"event":"listening","address":"H:P"}
//   {"event":"get","scheme","path","key"}            a stream opened (key: normalized)
//   {"event":"rejected","scheme","path","code","details"}
//   {"event":"sent","path","update","addrs":[..],"exists"?,"heartbeat"?}
//   {"event":"closed","path"}                        the client went away
//   {"event":"reloaded","changed":[keys]}

const fs = require('fs');
const e = require('./engine_common');

const { c, grpc } = e;
const PROG = 'dest_server.js';
let opts;
try {
  opts = c.parseArgs(process.argv.slice(2), {
    '--listen': 'string', '--state': 'string', '--heartbeat-ms': 'string', '--repeat': 'bool', ...e.TLS_ARGS,
  });
  if (!opts['--listen']) throw new Error('--listen HOST:PORT is required');
  if (!opts['--state']) throw new Error('--state FILE is required');
} catch (err) {
  c.log(PROG, err.message);
  process.exit(64);
}
const HEARTBEAT_MS = Number(opts['--heartbeat-ms'] || 0);

const { pkg } = e.loadConduit();

// key "host:port" -> null (absent) | {addrs: Map text -> WeightedAddr, labels, sig}
let services = new Map();

function keyOf(authority) {
  const a = e.parseAuthority(authority);
  return a ? `${a.host}:${a.port}` : null;
}

function readState() {
  const data = JSON.parse(fs.readFileSync(opts['--state'], 'utf8'));
  const next = new Map();
  for (const [k, v] of Object.entries(data.services || {})) {
    const key = keyOf(k);
    if (!key) throw new Error(`bad authority ${JSON.stringify(k)}`);
    if (v === null) continue;
    const addrs = new Map();
    for (const a of v.addrs || []) {
      const o = typeof a === 'string' ? { addr: a } : a;
      const t = e.tcpFromText(o.addr);
      addrs.set(t.text, { addr: { ip: t.ip, port: t.port }, weight: o.weight === undefined ? 1 : o.weight,
        metric_labels: o.labels || {} });
    }
    next.set(key, { addrs, labels: v.labels || {} });
  }
  const changed = [...new Set([...services.keys(), ...next.keys()])]
    .filter((k) => e.stable(services.get(k) ? [...services.get(k).addrs] : null) !==
      e.stable(next.get(k) ? [...next.get(k).addrs] : null));
  services = next;
  return changed;
}

const streams = new Set();

// items: [[text, WeightedAddr]]; a remove sends only their TcpAddress.
function send(st, update, items, extra = {}) {
  c.emit({ event: 'sent', path: st.path, update, addrs: items.map(([t]) => t), ...extra });
  st.lastSent = Date.now();
  const msg = update === 'add' ? { add: { addrs: items.map(([, w]) => w), metric_labels: st.labels } }
    : update === 'remove' ? { remove: { addrs: items.map(([, w]) => w.addr) } }
      : { no_endpoints: { exists: extra.exists } };
  st.call.write(msg);
  if (opts['--repeat'] && !extra.heartbeat) {
    c.emit({ event: 'sent', path: st.path, update, addrs: items.map(([t]) => t), ...extra, repeated: true });
    st.call.write(msg);
  }
}

// Bring one stream's client to the current state of its service. st.held:
// what the client holds, text -> {sig, w}; st.told: 'absent' | 'empty' |
// 'addrs', the last state it was told.
function sync(st) {
  const svc = services.get(st.key);
  if (!svc) {
    // Does not exist: say so unless that is what the client was told last.
    if (st.told !== 'absent') { st.held = new Map(); st.told = 'absent'; send(st, 'no_endpoints', [], { exists: false }); }
    return;
  }
  st.labels = svc.labels;
  const cur = svc.addrs;
  if (cur.size === 0) {
    if (st.told !== 'empty') { st.held = new Map(); st.told = 'empty'; send(st, 'no_endpoints', [], { exists: true }); }
    return;
  }
  // New or changed (same address, other weight/labels) ones; vanished ones.
  const added = [...cur].filter(([t, w]) => !st.held.has(t) || st.held.get(t).sig !== e.stable(w));
  const removed = [...st.held].filter(([t]) => !cur.has(t)).map(([t, h]) => [t, h.w]);
  st.held = new Map([...cur].map(([t, w]) => [t, { sig: e.stable(w), w }]));
  st.told = 'addrs';
  if (added.length) send(st, 'add', added);
  if (removed.length) send(st, 'remove', removed);
}

function get(call) {
  const { scheme, path } = call.request;
  const fail = (details) => {
    c.emit({ event: 'rejected', scheme, path, code: grpc.status.INVALID_ARGUMENT, details });
    call.emit('error', { code: grpc.status.INVALID_ARGUMENT, details });
  };
  if (scheme !== 'k8s') return fail(`unsupported scheme ${JSON.stringify(scheme)}`);
  const a = e.parseAuthority(path);
  if (!a) return fail(`malformed path ${JSON.stringify(path)}`);
  const key = `${a.host}:${a.port}`;
  c.emit({ event: 'get', scheme, path, key });
  const st = { call, path, key, held: new Map(), told: null, labels: {}, lastSent: 0 };
  const v4 = e.parseIpv4(a.host);
  if (v4 !== null) {
    // An IP literal: itself, once, and nothing more.
    const w = { addr: { ip: { ipv4: v4 }, port: a.port }, weight: 1, metric_labels: {} };
    send(st, 'add', [[`${e.ipv4Text(v4)}:${a.port}`, w]]);
    return;
  }
  streams.add(st);
  const gone = () => { if (streams.delete(st)) c.emit({ event: 'closed', path }); };
  call.on('cancelled', gone);
  call.on('error', gone);
  call.on('close', gone);
  sync(st);
}

readState(); // before serving: a bad FILE fails at once
e.listenWith(pkg.proxy.destination.Destination.service, { Get: get }, opts['--listen'], e.serverCreds(opts));

if (HEARTBEAT_MS > 0) {
  setInterval(() => {
    const now = Date.now();
    for (const st of streams) {
      if (now - st.lastSent >= HEARTBEAT_MS) {
        send(st, 'add', [], { heartbeat: true });
      }
    }
  }, Math.max(10, HEARTBEAT_MS / 4));
}

process.on('SIGHUP', () => {
  let changed;
  try { changed = readState(); } catch (err) { c.log(PROG, `reload failed: ${err.message}`); return; }
  c.emit({ event: 'reloaded', changed });
  for (const st of streams) sync(st);
});
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
