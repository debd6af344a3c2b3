#!/bin/sh
# check_static_grpc_fallback.sh SOURCE_DIR: configures SOURCE_DIR with a
# compiler that has no libre2.a and checks what static_grpc does without
# one of gRPC's archives: "auto" says so and links the shared gRPC,
# "enabled" fails the configuration.
src=$1
command -v meson >/dev/null || { echo "no meson: skipped"; exit 77; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
cat > "$t/cc" <<'CC'
#!/bin/sh
for a in "$@"; do
  [ "$a" = "-print-file-name=libre2.a" ] && { echo libre2.a; exit 0; }
done
exec cc "$@"
CC
chmod +x "$t/cc"
rc=0
CC="$t/cc" meson setup "$t/auto" "$src" -Dtests=false >"$t/auto.log" 2>&1 || {
  echo "auto: the configuration failed:" >&2; tail -5 "$t/auto.log" >&2; exit 1; }
grep -q "static_grpc: no static archive of re2: the programs link the shared gRPC" \
  "$t/auto.log" || { echo "auto: no fallback message" >&2; rc=1; }
if CC="$t/cc" meson setup "$t/on" "$src" -Dtests=false \
    -Dstatic_grpc=enabled >"$t/on.log" 2>&1; then
  echo "enabled: configured without libre2.a" >&2
  rc=1
elif ! grep -q "static_grpc: no static archive of re2" "$t/on.log"; then
  echo "enabled: failed, but not for the archive:" >&2
  tail -5 "$t/on.log" >&2
  rc=1
fi
[ $rc = 0 ] && echo "without libre2.a: auto falls back, enabled fails"
exit $rc
