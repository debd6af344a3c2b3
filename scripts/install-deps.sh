#!/usr/bin/env bash
# Installs the Debian 12 packages libmcp needs, only those missing.
# Runs apt-get as root, through sudo otherwise.
#
# Usage: scripts/install-deps.sh [run|test] [--list]
#   run    what building the libraries and programs needs (`make run`):
#          no test framework, no sanitizer runtime, no Node.js
#   test   (default) also what the tests, fuzzing and benchmarks use
#   --list print the packages of the set, one a line, and install nothing
set -euo pipefail

set_name=test
list=0
for a in "$@"; do
  case $a in
    run|test) set_name=$a ;;
    --list) list=1 ;;
    *) echo "usage: $0 [run|test] [--list]" >&2; exit 2 ;;
  esac
done

pkgs=(
  meson ninja-build pkg-config gcc
  libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev protobuf-compiler
  libgrpc-dev libnghttp2-dev libhttp-parser-dev libssl-dev
  libyaml-dev libjansson-dev libuv1-dev
)
if [ "$set_name" = test ]; then
  pkgs+=(clang libclang-rt-14-dev check nghttp2-client curl openssl
         valgrind python3 python3-protobuf python3-yaml
         etcd-server etcd-client python3-grpcio)
fi

if [ $list -eq 1 ]; then
  printf '%s\n' "${pkgs[@]}"
  [ "$set_name" = test ] && printf '%s\n' nodejs npm
  exit 0
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# The interop tests' Node.js may come from elsewhere than Debian (with npm
# bundled, when Debian's npm package would conflict): look for the commands.
if [ "$set_name" = test ]; then
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
