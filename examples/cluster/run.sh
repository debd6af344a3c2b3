#!/usr/bin/env bash
# A cluster on loopback to watch a failover by hand: three etcd members, two
# mcp-source replicas serving what etcd holds, and three mcp-sinks that dial
# the replicas in turn (--connect A,B) and print each update as a JSON line.
#
#   examples/cluster/run.sh BUILD_DIR
#
# It prints the PIDs; in another terminal, for example:
#   kill -9 <replica A>                    the sinks move to B, resend nothing
#   kill -9 <an etcd member>               the replicas move to another member
#   etcdctl --endpoints=127.0.0.1:23791 put /mcp/istio/networking/v1alpha3/virtualservices/default/new < vs.yaml
# Ctrl-C stops everything and removes the data (in a temporary directory).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
build=$1
for p in etcd etcdctl; do
  command -v $p >/dev/null || { echo "$0: $p missing (apt-get install etcd-server etcd-client)" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/mcp-cluster-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

cluster=""
for i in 1 2 3; do cluster+="${cluster:+,}m$i=http://127.0.0.1:2380$i"; done
for i in 1 2 3; do
  etcd --name m$i --data-dir "$tmp/m$i" \
    --listen-client-urls http://127.0.0.1:2379$i --advertise-client-urls http://127.0.0.1:2379$i \
    --listen-peer-urls http://127.0.0.1:2380$i --initial-advertise-peer-urls http://127.0.0.1:2380$i \
    --initial-cluster "$cluster" --initial-cluster-state new >"$tmp/m$i.log" 2>&1 &
  pids+=($!); echo "etcd member m$i: pid $! (client 127.0.0.1:2379$i)"
done
endpoints=127.0.0.1:23791,127.0.0.1:23792,127.0.0.1:23793
until etcdctl --endpoints=$endpoints endpoint health >/dev/null 2>&1; do sleep 0.2; done

vs=istio/networking/v1alpha3/virtualservices
for svc in reviews ratings details; do
  printf '{"apiVersion":"networking.istio.io/v1alpha3","kind":"VirtualService","metadata":{"name":"%s","namespace":"default"},"spec":{"hosts":["%s"],"http":[{"route":[{"destination":{"host":"%s"}}]}]}}\n' \
    $svc $svc $svc | etcdctl --endpoints=$endpoints put /mcp/$vs/default/$svc >/dev/null
done

for r in A:29101 B:29102; do
  "$build/tools/mcp-source" --etcd $endpoints --listen 127.0.0.1:${r#*:} >"$tmp/source-${r%%:*}.log" 2>&1 &
  pids+=($!); echo "replica ${r%%:*}: pid $! (127.0.0.1:${r#*:}, log $tmp/source-${r%%:*}.log)"
done
for s in 1 2 3; do
  "$build/tools/mcp-sink" --connect 127.0.0.1:29101,127.0.0.1:29102 --incremental \
    --collection $vs --json --node-id sink-$s 2>"$tmp/sink-$s.log" | sed -u "s/^/sink-$s: /" &
  pids+=($!)
done
echo "writes: etcdctl --endpoints=$endpoints put /mcp/$vs/default/NAME < doc.yaml; Ctrl-C stops"
wait
