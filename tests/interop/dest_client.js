#!/usr/bin/env node
'use strict';
// A Conduit Destination client (a proxy's service discovery) on @grpc/grpc-js,
// written from conduit's destination.proto and its comments only, to test
// libmcp's mcp-source against.
//
//   node dest_client.js --connect HOST:PORT --authority A [--authority A ...]
//        [--scheme k8s] [--no-redial] [--exit-after-sync] [--timeout-ms MS]
//        [--tls-ca PEM [--tls-cert PEM --tls-key PEM]]
//
// One Destination/Get stream per authority (path = A as given, scheme "k8s"
// unless --scheme), redialled 250 ms after it ends (not with --no-redial).
// The address set per authority follows the proto's rules: the set of the
// previous stream is kept (stale) until the first message of the new one,
// which replaces it; `add` adds, `remove` removes, `no_endpoints` clears;
// messages may come in any order and redundant ones are harmless.
// stdout, one JSON object per line (the first fields are mcp-sink's --json
// line for destination, issue 14):
//   {"event":"destination","authority","update":"add"|"remove"|"no_endpoints",
//    "addrs":["IP:PORT"|"[v6]:PORT",...],"exists":BOOL (no_endpoints only),"total":N,
//    "first":BOOL (first message of its stream),
//    "weights":{addr:W},"addr_labels":{addr:{..}},"set_labels":{..} (add only)}
//   {"event":"invalid","authority","error"}   an Update that breaks the proto
//   {"event":"status","authority","code","details"}   a stream's end
//   {"event":"synced"}   every authority got its first message
//   {"event":"state","sets":{authority:{"exists":BOOL|null,"addrs":[sorted]}}}  on SIGTERM/SIGUSR1
// Exit: 0 on SIGTERM, after --exit-after-sync, or with --no-redial once every
// stream ended; 2 when --timeout-ms passes first; 64 on bad options.

const e = require('./engine_common');

const { c } = e;
const PROG = 'dest_client.js';
let opts;
try {
  opts = c.parseArgs(process.argv.slice(2), {
    '--connect': 'string', '--authority': 'list', '--scheme': 'string', '--no-redial': 'bool',
    '--exit-after-sync': 'bool', '--timeout-ms': 'string', ...e.TLS_ARGS,
  });
  if (!opts['--connect']) throw new Error('--connect HOST:PORT is required');
  if (opts['--authority'].length === 0) throw new Error('at least one --authority');
  if (opts['--scheme'] === undefined) opts['--scheme'] = 'k8s';
} catch (err) {
  c.log(PROG, err.message);
  process.exit(64);
}

const { pkg } = e.loadConduit();
const client = new pkg.proxy.destination.Destination(opts['--connect'], e.clientCreds(opts));

// authority -> {exists: true|false|null (not known yet), addrs: Set, synced, streamFirst}
const sets = new Map();
const stops = [];
let ended = 0;

function stateLine() {
  const out = {};
  for (const [a, s] of sets) out[a] = { exists: s.exists, addrs: [...s.addrs].sort() };
  c.emit({ event: 'state', sets: out });
}

function checkSynced() {
  if ([...sets.values()].every((s) => s.synced)) {
    if (!checkSynced.done) c.emit({ event: 'synced' });
    checkSynced.done = true;
    if (opts['--exit-after-sync']) process.exit(0);
  }
}

function onUpdate(auth, st, u) {
  const line = { event: 'destination', authority: auth, update: u.update };
  let addrs; let weights = {}; const labels = {};
  try {
    if (u.update === 'add') {
      addrs = u.add.addrs.map((w) => {
        const t = e.tcpText(w.addr);
        weights[t] = w.weight;
        if (Object.keys(w.metric_labels).length) labels[t] = w.metric_labels;
        return t;
      });
    } else if (u.update === 'remove') {
      addrs = u.remove.addrs.map(e.tcpText);
      weights = null;
    } else if (u.update === 'no_endpoints') {
      addrs = [];
    } else {
      throw new Error('Update with no member of the oneof set');
    }
  } catch (err) {
    c.emit({ event: 'invalid', authority: auth, error: err.message });
    return;
  }
  // The first message of a stream replaces what a previous stream left.
  const first = st.streamFirst;
  if (first) { st.addrs.clear(); st.exists = null; st.streamFirst = false; }
  if (u.update === 'add') {
    for (const a of addrs) st.addrs.add(a);
    // An empty add is the controller's heartbeat: it says nothing of existence.
    if (addrs.length || st.exists === null) st.exists = addrs.length ? true : st.exists;
  } else if (u.update === 'remove') {
    for (const a of addrs) st.addrs.delete(a);
    // Removing the last endpoint means no_endpoints{exists:true}.
    if (st.exists === null) st.exists = true;
  } else {
    st.addrs.clear();
    st.exists = u.no_endpoints.exists;
    line.exists = u.no_endpoints.exists;
  }
  line.addrs = addrs;
  line.total = st.addrs.size;
  line.first = first;
  if (u.update === 'add') {
    line.weights = weights;
    line.addr_labels = labels;
    line.set_labels = u.add.metric_labels;
  }
  c.emit(line);
  st.synced = true;
  checkSynced();
}

for (const auth of opts['--authority']) {
  const st = { exists: null, addrs: new Set(), synced: false, streamFirst: true };
  sets.set(auth, st);
  stops.push(e.redialLoop(() => {
    st.streamFirst = true;
    return client.Get({ scheme: opts['--scheme'], path: auth });
  }, {
    redial: !opts['--no-redial'],
    onData: (u) => onUpdate(auth, st, u),
    onEnd: (s) => {
      c.emit({ event: 'status', authority: auth, code: s.code, details: s.details });
      if (opts['--no-redial'] && ++ended === opts['--authority'].length) { stateLine(); process.exit(0); }
    },
  }, PROG));
}

process.on('SIGUSR1', stateLine);
const quit = () => { stateLine(); for (const s of stops) s(); process.exit(0); };
process.on('SIGTERM', quit);
process.on('SIGINT', quit);
if (opts['--timeout-ms']) setTimeout(() => { stateLine(); process.exit(2); }, Number(opts['--timeout-ms']));
