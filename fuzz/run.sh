#!/bin/sh
# Builds and runs the libFuzzer targets (fuzz/README.md).
#
#   fuzz/run.sh BUILD_DIR [SECONDS]   run each target SECONDS (default 60)
#   fuzz/run.sh --replay BUILD_DIR    run each target once over its seed
#                                     corpus and its regressions (-runs=0)
#
# BUILD_DIR is configured when it does not exist yet:
#   CC=clang meson setup BUILD_DIR -Dfuzz=true -Db_lundef=false
#     --buildtype=debugoptimized -Dtests=false -Dtools=false
#     -Dtransport_grpc=false -Dtransport_h2c=false
# Each target runs on a copy of its seeds (fuzz/corpus/<target> plus what
# gen_corpus writes) in BUILD_DIR/fuzz-run/<target>/corpus, which grows
# from run to run; fuzz/corpus is never written. Crashes, leaks, timeouts
# and OOMs land in BUILD_DIR/fuzz-run/<target>/ as crash-*, leak-*,
# timeout-*, oom-*; the log of the last run is .../log.
#
# Environment: FUZZ_TARGETS (default: every target built), FUZZ_PARALLEL=N (run
# N targets at a time; default 1), FUZZ_ARGS (more libFuzzer flags).
# Exit status: 0 when no target found anything, 1 otherwise.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
replay=0
if [ "${1:-}" = "--replay" ]; then
  replay=1
  shift
fi
if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [SECONDS] | $0 --replay BUILD_DIR" >&2
  exit 2
fi
build=$1
secs=${2:-60}
parallel=${FUZZ_PARALLEL:-1}

if [ ! -f "$build/build.ninja" ]; then
  CC=${CC:-clang} meson setup "$build" "$src" -Dfuzz=true -Db_lundef=false \
    --buildtype=debugoptimized -Dtests=false -Dtools=false \
    -Dtransport_grpc=false -Dtransport_h2c=false -Dbench=false
fi
ninja -C "$build"
# Every target the build has (fuzz_config_parse needs libyaml).
all=$(cd "$build/fuzz" && for f in fuzz_*; do
  if [ -f "$f" ] && [ -x "$f" ]; then echo "$f"; fi; done)
targets=${FUZZ_TARGETS:-$all}

run="$build/fuzz-run"
mkdir -p "$run"
rm -rf "$run/gen"
if ! "$build/fuzz/gen_corpus" "$run/gen" 2>"$run/gen.log"; then
  echo "gen_corpus failed (see $run/gen.log): the committed seeds only" >&2
  rm -rf "$run/gen"
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

# run_one TARGET: 0 when nothing was found.
run_one() {
  t=$1
  exe="$build/fuzz/$t"
  dir="$run/$t"
  mkdir -p "$dir/corpus"
  regress="$here/regressions/$t"
  touch "$dir/.start"
  rm -f "$dir/failing" "$dir"/log.*
  if [ "$replay" = 1 ]; then
    # The seeds at once, then each regression on its own (so that every
    # one still failing is named).
    rc=0
    seeds="$here/corpus/$t"
    [ -d "$run/gen/$t" ] && seeds="$seeds $run/gen/$t"
    # shellcheck disable=SC2086
    "$exe" -runs=0 -rss_limit_mb=2048 -timeout=10 $seeds >"$dir/log" 2>&1 || rc=$?
    for f in "$regress"/*; do
      [ -f "$f" ] || continue
      if ! "$exe" -runs=0 -rss_limit_mb=2048 -timeout=10 "$f" \
          >"$dir/log.$(basename "$f")" 2>&1; then
        echo "regression still failing: $t/$(basename "$f")" >>"$dir/failing"
        rc=1
      fi
    done
    return $rc
  fi
  for d in "$here/corpus/$t" "$run/gen/$t" "$regress"; do
    if [ -d "$d" ]; then
      for f in "$d"/*; do
        if [ -f "$f" ]; then cp "$f" "$dir/corpus/"; fi
      done
    fi
  done
  dict=""
  [ -f "$here/$t.dict" ] && dict="-dict=$here/$t.dict"
  # shellcheck disable=SC2086
  "$exe" "$dir/corpus" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/" \
    $dict ${FUZZ_ARGS:-} >"$dir/log" 2>&1
}

summary() {
  t=$1
  rc=$2
  log="$run/$t/log"
  last=$(grep -E '^#[0-9]+[[:space:]]+(DONE|INITED|pulse|NEW|REDUCE)' "$log" | tail -n 1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
  ft=$(echo "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
  if [ "$rc" = 0 ]; then
    status=ok
  else
    status="FOUND SOMETHING (exit $rc): see $log"
  fi
  printf '%-22s cov %-6s ft %-7s execs %-10s %s\n' "$t" "${cov:--}" \
    "${ft:--}" "${execs:--}" "$status"
}

failed=0
results=""
# shellcheck disable=SC2086 # a list of names
set -- $targets
while [ $# -gt 0 ]; do
  batch=""
  n=0
  while [ $# -gt 0 ] && [ "$n" -lt "$parallel" ]; do
    batch="$batch $1"
    shift
    n=$((n + 1))
  done
  pids=""
  for t in $batch; do
    ( set +e; run_one "$t"; echo $? >"$run/$t/rc" ) &
    pids="$pids $!"
  done
  for p in $pids; do
    wait "$p" || true
  done
  for t in $batch; do
    rc=$(cat "$run/$t/rc")
    [ "$rc" = 0 ] || failed=1
    results="$results$(summary "$t" "$rc")
"
  done
done
printf '%s' "$results"
if [ "$failed" != 0 ]; then
  for t in $targets; do
    # The artifacts of this run only (older ones stay for reference).
    find "$run/$t" -maxdepth 1 -newer "$run/$t/.start" \
      \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
         -o -name 'oom-*' \) -exec echo "finding: {}" \;
  done
  # The first report of each failed target.
  for t in $targets; do
    if [ "$(cat "$run/$t/rc")" != 0 ]; then
      echo "---- $t ----"
      [ -f "$run/$t/failing" ] && cat "$run/$t/failing"
      grep -h -A1 -E 'ERROR|FUZZ CHECK|runtime error' "$run/$t/log" \
        "$run/$t"/log.* 2>/dev/null | grep -v '^--$' | head -n 30
    fi
  done
  exit 1
fi
