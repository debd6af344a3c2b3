#!/usr/bin/env bash
# Serves examples/config with mcp-source and subscribes an mcp-sink to every
# collection the examples define: the sink mirrors them into ./mirror and
# prints each update as a JSON line. The Istio documents travel with typed
# bodies (their own messages, Istio 1.6's types built into both programs), so
# the mirror shows them as proto3 JSON, e.g.
# mirror/istio/networking/v1alpha3/virtualservices/bookinfo/reviews.json. Edit a file under examples/config to see
# the push live; Ctrl-C stops both.
#
# Usage: tools/run-example.sh BUILD_DIR      (what `make run` runs)
# Environment: MCP_EXAMPLE_ADDRESS  listen address (default 127.0.0.1:9901)
#              MCP_EXAMPLE_MIRROR   mirror directory (default ./mirror)
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build=$1
root=$(cd "$(dirname "$0")/.." && pwd)
config=$root/examples/config
address=${MCP_EXAMPLE_ADDRESS:-127.0.0.1:9901}
mirror=${MCP_EXAMPLE_MIRROR:-./mirror}
source_bin=$build/tools/mcp-source
sink_bin=$build/tools/mcp-sink
for b in "$source_bin" "$sink_bin"; do
  [ -x "$b" ] || { echo "$0: $b not built (run: ninja -C $build)" >&2; exit 1; }
done

# The collections of the examples, computed as mcp-source names them
# (tools/loader/loader.h): the annotation mcp.istio.io/collection, else
# GROUP.istio.io/V Kind -> istio/GROUP/V/plural, GROUP/V -> k8s/GROUP/V/plural,
# V -> k8s/core/V/plural. Only top-level apiVersion and kind are read.
collections() {
  find "$config" \( -name '.*' -prune \) -o -type f \( -name '*.yaml' -o -name '*.yml' \) -print0 |
    xargs -0 -r awk '
      function clean(v) {
        sub(/[ \t]+#.*$/, "", v); gsub(/^[ \t"'\'']+|[ \t"'\'']+$/, "", v); return v
      }
      function plural(k,   l) {
        k = tolower(k); l = substr(k, length(k), 1)
        if (k == "endpoints") return k
        if (k ~ /[^aeiou]y$/) return substr(k, 1, length(k) - 1) "ies"
        if (k ~ /(s|x|z|ch|sh)$/) return k "es"
        return k "s"
      }
      function flush(   g, v, n) {
        if (coll != "") print coll
        else if (api != "" && kind != "") {
          n = split(api, p, "/")
          if (n == 1) print "k8s/core/" api "/" plural(kind)
          else if (p[1] ~ /\.istio\.io$/) { g = p[1]; sub(/\.istio\.io$/, "", g); print "istio/" g "/" p[2] "/" plural(kind) }
          else print "k8s/" p[1] "/" p[2] "/" plural(kind)
        }
        api = ""; kind = ""; coll = ""
      }
      FNR == 1 { flush() }
      /^---/ { flush(); next }
      /^apiVersion:/ { v = $0; sub(/^apiVersion:/, "", v); api = clean(v) }
      /^kind:/ { v = $0; sub(/^kind:/, "", v); kind = clean(v) }
      /^[ \t]+"?mcp\.istio\.io\/collection"?:/ { v = $0; sub(/^[^:]*:/, "", v); coll = clean(v) }
      END { flush() }' | sort -u
}
mapfile -t colls < <(collections)
if [ ${#colls[@]} -eq 0 ]; then
  echo "$0: no collection found under $config" >&2
  exit 1
fi
sink_args=()
for c in "${colls[@]}"; do sink_args+=(--collection "$c"); done

pids=()
stop() {
  trap - INT TERM
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait || true
}
trap 'stop; exit 0' INT TERM

"$source_bin" --dir "$config" --listen "$address" &
pids+=($!)
"$sink_bin" --connect "$address" "${sink_args[@]}" --out "$mirror" --json \
  --log-level warn &
pids+=($!)

{
  echo "run-example: mcp-source serves $config on $address"
  echo "run-example: mcp-sink mirrors ${#colls[@]} collections into $mirror:"
  printf 'run-example:   %s\n' "${colls[@]}"
  echo "run-example: edit a file under $config to see the push; Ctrl-C stops"
} >&2

# Either program ending on its own ends the example.
set +e
wait -n
rc=$?
set -e
echo "run-example: a program exited (status $rc); stopping" >&2
stop
exit "$rc"
