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
# Ctrl-C stops everything at once and removes the data (in a temporary
# directory). The sinks start once both replicas listen, so each begins on
# replica A.
#
# Ports: etcd members' client and peer ports are MCP_CLUSTER_ETCD_CLIENT+1..3
# and MCP_CLUSTER_ETCD_PEER+1..3 (default 23790, 23800), the replicas'
# MCP_CLUSTER_REPLICA+1 and +2 (default 29100).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
build=$1
client=${MCP_CLUSTER_ETCD_CLIENT:-23790}
peer=${MCP_CLUSTER_ETCD_PEER:-23800}
replica=${MCP_CLUSTER_REPLICA:-29100}
for p in etcd etcdctl; do
  command -v $p >/dev/null || { echo "$0: $p missing (apt-get install etcd-server etcd-client)" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/mcp-cluster-XXXXXX)
etcds=()
pids=()
cleanup() {
  trap - EXIT INT TERM
  # etcd's data is thrown away: nothing to shut down gracefully (a member
  # took 3 s to), so it is killed outright; our programs stop at once on
  # SIGTERM.
  for p in "${etcds[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits until FILE has a line with TEXT; fails if PID ends first.
wait_log() { # PID FILE TEXT WHAT
  until grep -qF -- "$3" "$2" 2>/dev/null; do
    kill -0 "$1" 2>/dev/null || { echo "$0: $4 ended:" >&2; tail -5 "$2" >&2; exit 1; }
    sleep 0.1
  done
}

cluster=""
for i in 1 2 3; do cluster+="${cluster:+,}m$i=http://127.0.0.1:$((peer + i))"; done
endpoints=""
for i in 1 2 3; do
  etcd --name m$i --data-dir "$tmp/m$i" \
    --listen-client-urls http://127.0.0.1:$((client + i)) --advertise-client-urls http://127.0.0.1:$((client + i)) \
    --listen-peer-urls http://127.0.0.1:$((peer + i)) --initial-advertise-peer-urls http://127.0.0.1:$((peer + i)) \
    --initial-cluster "$cluster" --initial-cluster-state new >"$tmp/m$i.log" 2>&1 &
  etcds+=($!); echo "etcd member m$i: pid $! (client 127.0.0.1:$((client + i)))"
  endpoints+="${endpoints:+,}127.0.0.1:$((client + i))"
done
until etcdctl --endpoints=$endpoints endpoint health >/dev/null 2>&1; do sleep 0.2; done

vs=istio/networking/v1alpha3/virtualservices
for svc in reviews ratings details; do
  printf '{"apiVersion":"networking.istio.io/v1alpha3","kind":"VirtualService","metadata":{"name":"%s","namespace":"default"},"spec":{"hosts":["%s"],"http":[{"route":[{"destination":{"host":"%s"}}]}]}}\n' \
    $svc $svc $svc | etcdctl --endpoints=$endpoints put /mcp/$vs/default/$svc >/dev/null
done

replicas=""
for r in A:1 B:2; do
  port=$((replica + ${r#*:})) r=${r%%:*}
  "$build/tools/mcp-source" --etcd $endpoints --listen 127.0.0.1:$port >"$tmp/source-$r.log" 2>&1 &
  pids+=($!); echo "replica $r: pid $! (127.0.0.1:$port, log $tmp/source-$r.log)"
  wait_log $! "$tmp/source-$r.log" "serving ResourceSource on 127.0.0.1:$port" "replica $r"
  replicas+="${replicas:+,}127.0.0.1:$port"
done
for s in 1 2 3; do
  # The sink's own pid (not sed's), so that it is stopped with the rest.
  "$build/tools/mcp-sink" --connect $replicas --incremental \
    --collection $vs --json --node-id sink-$s 2>"$tmp/sink-$s.log" \
    > >(sed -u "s/^/sink-$s: /") &
  pids+=($!); echo "sink-$s: pid $! (log $tmp/sink-$s.log)"
done
echo "writes: etcdctl --endpoints=$endpoints put /mcp/$vs/default/NAME < doc.yaml; Ctrl-C stops"
wait
