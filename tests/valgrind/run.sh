#!/bin/sh
# Runs the C test suites (core, grpc, h2c, tools) under valgrind's memcheck.
#
#   tests/valgrind/run.sh BUILD_DIR [MESON_TEST_ARGS ...]
#
# BUILD_DIR is an ordinary build (not a sanitizer one: ASan and valgrind do
# not mix); it is built first. Every test runs as
#
#   valgrind --leak-check=full --errors-for-leak-kinds=definite
#            --error-exitcode=1 --suppressions=tests/valgrind/grpc.supp ...
#
# so a test fails on any memory error (invalid read or write, use of
# uninitialised memory in a branch or a system call, bad free) and on any
# definite leak; memory still reachable at exit, and gRPC's own allocations
# listed in grpc.supp, are not errors. check runs in-process (CK_FORK=no):
# forked children would escape the wrapper's leak check. So a failed
# assertion ends the whole test program (check does not unwind): the memory
# the failed test still held is then reported as definitely lost too. Read
# the first failure, not the leak that follows it. Extra arguments go to
# `meson test` (a test name, --num-processes N, ...).
#
# Time: the four suites take about 2.5 minutes on 2 cores (core_alloc, which
# fails every allocation of a scenario in turn, is most of it), about 4 on
# a loaded machine. The tests' waits for a condition are scaled by
# MCP_TEST_TIME_SCALE (default 10 here); bounds a test asserts on are not,
# so a gRPC test that bounds how long something takes may still fail at
# valgrind's speed on a loaded machine: such a failure is an assertion on
# time, not a memory error (no "==PID==" error above it).
#
# Environment: VALGRIND_TIMEOUT_MULTIPLIER (default 20) multiplies each
# test's meson timeout; MCP_TEST_TIME_SCALE (default 10) the tests' waits; VALGRIND_GEN_SUPP=1 prints a suppression block for
# every error (to extend grpc.supp, after checking the error is not ours);
# VALGRIND_OPTS adds valgrind options.
set -eu

if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [MESON_TEST_ARGS ...]" >&2
  exit 2
fi
build=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
command -v valgrind >/dev/null || { echo "$0: valgrind is not installed" >&2; exit 2; }
[ -f "$build/build.ninja" ] || { echo "$0: $build is not a meson build directory" >&2; exit 2; }
if grep -q 'fsanitize' "$build/build.ninja"; then
  echo "$0: $build is a sanitizer build; use an ordinary one" >&2
  exit 2
fi
ninja -C "$build"

gen=
[ "${VALGRIND_GEN_SUPP:-0}" = 1 ] && gen=--gen-suppressions=all
wrapper="valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite \
--errors-for-leak-kinds=definite --error-exitcode=1 --num-callers=40 \
--suppressions=$here/grpc.supp --child-silent-after-fork=yes $gen \
${VALGRIND_OPTS:-}"

start=$(date +%s)
status=0
CK_FORK=no MCP_TEST_TIME_SCALE="${MCP_TEST_TIME_SCALE:-10}" \
meson test -C "$build" --no-rebuild \
  --suite core --suite grpc --suite h2c --suite tools \
  --wrapper "$wrapper" \
  --timeout-multiplier "${VALGRIND_TIMEOUT_MULTIPLIER:-20}" \
  --print-errorlogs "$@" || status=$?
echo "valgrind run: $(( $(date +%s) - start )) s, meson test status $status"
exit $status
