#!/bin/sh
# Self-test of the Node MCP peers against each other (no libmcp involved).
# Installs the locked dependencies first if they are missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ -d "$here/node_modules/@grpc/grpc-js" ] || npm ci --prefix "$here" --no-audit --no-fund
exec node --test "$here/selftest.js"
