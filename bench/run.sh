#!/bin/sh
# Builds the benchmarks with optimisation and runs every one of them.
#
#   bench/run.sh BUILD_DIR [NAME ...] [-- ARGS ...]
#
# BUILD_DIR is set up (or reconfigured) with -Dbench=true and
# --buildtype=release. Every benchmark registered with meson's benchmark()
# (core: bench_core; e2e: e2e_bench.py with mcp-source, mcp-sink and
# raw_sink; h2load: h2load_bench.py) is run, one after the other, or only
# those named; each after building what it needs (its executable and its
# depends:), so that one that does not build fails alone. ARGS are passed
# to each benchmark named (core: --quick, or parts such as `fanout memory`;
# e2e: --quick, --transport h2c, `sync1`, ...).
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
# What each benchmark needs built: its executable when it is one of ours,
# and the targets it depends on (meson's `depends:`), as paths relative to
# BUILD_DIR, one benchmark per line: "NAME TARGET...". Each benchmark's
# targets are built just before it runs, so that a component that does not
# build fails only the benchmarks that need it.
needs=$(python3 -c '
import json, os, subprocess, sys
build = os.path.realpath(sys.argv[1])
def intro(what):
    return json.loads(subprocess.check_output(
        ["meson", "introspect", build, what]))
files = {t["id"]: t["filename"] for t in intro("--targets")}
for b in intro("--benchmarks"):
    outs = []
    for f in [b["cmd"][0]] + [x for d in b.get("depends", [])
                              for x in files.get(d, [])]:
        f = os.path.realpath(f)
        if f.startswith(build + os.sep):
            rel = os.path.relpath(f, build)
            if rel not in outs:
                outs.append(rel)
    print(b["name"], " ".join(outs))' "$build")

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
    targets=$(echo "$needs" | sed -n "s/^$name //p")
    # shellcheck disable=SC2086 # one target per word
    if [ -n "$targets" ] && ! ninja -C "$build" $targets >"$out.build" 2>&1; then
      tail -n 30 "$out.build"
      echo "# benchmark $name FAILED: its targets do not build:$targets" |
        tee -a "$log"
      rm -f "$out.build"
      status=1
      continue
    fi
    rm -f "$out.build"
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
