#!/bin/sh
# Self-test of the Node peers against each other (no libmcp involved): MCP
# (selftest.js), Destination and Dispatcher (selftest_engine.js).
# Installs the locked dependencies first if they are missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ -d "$here/node_modules/@grpc/grpc-js" ] || npm ci --prefix "$here" --no-audit --no-fund
exec node --test "$here/selftest.js" "$here/selftest_engine.js"
