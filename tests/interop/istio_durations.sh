#!/bin/bash
# Go durations against the real Istio 1.6.14 (issue 24 item 1), by hand: the
# peers need Go and the network to build (../shared/peers/istio-1.6), CI has
# neither. The same YAML (istio_durations.yaml: 30ms, 2h45m, 1.5h, 5m, 15m,
# 1us, 1µs, "0", 1ns, -1.5s, 1.0000000001s, 300ms, 500ms, 24h, Go's largest)
# is served by libmcp's mcp-source (both transports) and by Istio's
# peer-source (gogo jsonpb, Go's time.ParseDuration); Istio's peer-sink
# decodes each body into the Go type and prints it (-fields). The bodies
# must be the same. Exit 0 when they are.
#
#   BIN=PEER_BIN BUILD=BUILD_DIR tests/interop/istio_durations.sh
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
B=${BIN:?set BIN to the folder of peer-source and peer-sink}
L=${BUILD:?set BUILD to libmcp build folder}/tools
W=$(mktemp -d /tmp/istio-durations-XXXXXX)
mkdir "$W/cfg" && cp "$HERE/istio_durations.yaml" "$W/cfg/"
VS=istio/networking/v1alpha3/virtualservices
DR=istio/networking/v1alpha3/destinationrules
PORT_L=${PORT_L:-19951} PORT_I=${PORT_I:-19952}
S=
trap '[ -n "$S" ] && kill $S 2>/dev/null' EXIT
listening() { for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.1; done; return 1; }
sink() { # PORT OUT
  timeout 20 "$B/peer-sink" -connect 127.0.0.1:$1 -collection $VS -collection $DR \
    -fields -exit-after-sync > "$2" 2> "$2.err"
  echo "peer-sink <- :$1 rc=$?"
}
for T in grpc h2c; do
  "$L/mcp-source" --dir "$W/cfg" --listen 127.0.0.1:$PORT_L --transport $T --debounce 0 \
    2> "$W/libmcp-$T.log" & S=$!
  listening $PORT_L && sink $PORT_L "$W/from-libmcp-$T.out"
  kill $S; wait $S 2>/dev/null; S=
done
"$B/peer-source" -dir "$W/cfg" -listen 127.0.0.1:$PORT_I 2> "$W/istio-source.log" & S=$!
listening $PORT_I && sink $PORT_I "$W/from-istio.out"
kill $S; wait $S 2>/dev/null; S=
rc=0
for f in from-libmcp-grpc from-libmcp-h2c from-istio; do
  grep 'body(' "$W/$f.out" | sort > "$W/$f.bodies"
  echo "$f: $(wc -l < "$W/$f.bodies") bodies, md5 $(md5sum < "$W/$f.bodies" | cut -c1-12)"
done
for f in from-libmcp-grpc from-libmcp-h2c; do
  cmp -s "$W/$f.bodies" "$W/from-istio.bodies" || { echo "DIFFERENT: $f"; rc=1; }
done
# A document either source refused (Istio's stream teardown logs are not).
grep -h ': error: ' "$W"/libmcp-*.log "$W/istio-source.log" && rc=1
cat "$W/from-istio.bodies"
echo "logs in $W; $([ $rc = 0 ] && echo same bodies || echo FAILED)"
exit $rc
