#!/bin/sh
# Builds the benchmarks with optimisation and runs every one of them.
#
#   bench/run.sh BUILD_DIR [NAME ...] [-- ARGS ...]
#
# BUILD_DIR is set up (or reconfigured) with -Dbench=true and
# --buildtype=release. Every benchmark registered with meson's benchmark()
# (bench_core here; the transports' end-to-end benchmarks register theirs
# the same way) is run, one after the other, or only those named. ARGS are
# passed to each benchmark (bench_core: --quick, or a subset such as
# `fanout memory`).
#
# Every result is a line "BENCH <name> <value> <unit>" on stdout; the lines
# of all benchmarks are also collected in BUILD_DIR/bench-results.txt, and
# the full output in BUILD_DIR/bench-log.txt. Exit status: non-zero when a
# build or a benchmark fails (a missed target is reported, not a failure).
set -eu

usage() {
  echo "usage: $0 BUILD_DIR [NAME ...] [-- ARGS ...]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
build=$1
shift
names=
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  names="$names $1"
  shift
done
[ $# -gt 0 ] && shift # the "--"

src=$(cd "$(dirname "$0")/.." && pwd)

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$src" -Dbench=true --buildtype=release
else
  # Reconfigures only when an option differs.
  opts=$(meson introspect "$build" --buildoptions | python3 -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
print(o.get("bench"), o.get("buildtype"))')
  if [ "$opts" != "True release" ]; then
    meson configure "$build" -Dbench=true -Dbuildtype=release
  fi
fi
# Only what the benchmarks need: a component that does not build does not
# stop the others' benchmarks.
targets=$(meson introspect "$build" --benchmarks | python3 -c '
import json, os, sys
build = os.path.realpath(sys.argv[1])
for b in json.load(sys.stdin):
    exe = os.path.realpath(b["cmd"][0])
    if exe.startswith(build + os.sep):
        print(os.path.relpath(exe, build))' "$build")
# shellcheck disable=SC2086 # one target per word
ninja -C "$build" $targets

results="$build/bench-results.txt"
log="$build/bench-log.txt"
: >"$results"
: >"$log"

# Machine, build and load, for the record (docs/benchmarks.md).
{
  echo "# date: $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
  echo "# commit: $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$src" diff --quiet 2>/dev/null || echo ' (modified)')"
  echo "# cpu: $(nproc) x $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
  echo "# memory: $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
  echo "# kernel: $(uname -sr)"
  echo "# compiler: $(cc --version 2>/dev/null | head -n 1)"
  echo "# load average before: $(cut -d ' ' -f 1-3 /proc/loadavg)"
} | tee -a "$log"

# The registered benchmarks: name, then the command, one per line.
list=$(meson introspect "$build" --benchmarks | python3 -c '
import json, shlex, sys
for b in json.load(sys.stdin):
    env = " ".join(shlex.quote(k + "=" + v) for k, v in b.get("env", {}).items())
    print(b["name"], ("env " + env + " " if env else "") +
          " ".join(shlex.quote(c) for c in b["cmd"]))')

status=0
ran=0
echo "$list" | {
  while read -r name cmd; do
    [ -n "$name" ] || continue
    if [ -n "$names" ]; then
      case " $names " in *" $name "*) ;; *) continue ;; esac
    fi
    ran=$((ran + 1))
    echo "# ---- benchmark $name: $cmd $*" | tee -a "$log"
    start=$(date +%s)
    out="$build/bench-$name.out"
    # $cmd is a command line quoted by the introspection step above.
    { eval "$cmd" '"$@"' 2>&1; echo $? >"$out.rc"; } | tee "$out"
    if [ "$(cat "$out.rc")" != 0 ]; then
      echo "# benchmark $name FAILED (exit $(cat "$out.rc"))" | tee -a "$log"
      status=1
    fi
    rm -f "$out.rc"
    cat "$out" >>"$log"
    grep '^BENCH ' "$out" >>"$results" || true
    echo "# ---- $name: $(($(date +%s) - start)) s" | tee -a "$log"
  done
  echo "# load average after: $(cut -d ' ' -f 1-3 /proc/loadavg)" | tee -a "$log"
  if [ "$ran" -eq 0 ]; then
    echo "# no benchmark matched:$names" | tee -a "$log"
    status=1
  fi
  echo "# results: $results ($(wc -l <"$results") lines)"
  exit $status
}
