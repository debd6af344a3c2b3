#!/usr/bin/env bash
# Installs the Debian 12 packages libmcp needs, only those missing.
# Runs apt-get as root, through sudo otherwise.
set -euo pipefail

pkgs=(
  meson ninja-build pkg-config gcc clang libclang-rt-14-dev
  libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev protobuf-compiler
  libgrpc-dev libnghttp2-dev libhttp-parser-dev
  check libyaml-dev libjansson-dev libuv1-dev
  python3-protobuf python3-yaml
  nghttp2-client curl openssl valgrind python3
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# Node.js may come from elsewhere than Debian (with npm bundled, when
# Debian's npm package would conflict): look for the commands.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
