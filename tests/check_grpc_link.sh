#!/bin/sh
# check_grpc_link.sh static|shared PROGRAM...: each program maps the
# shared gRPC and Abseil ("shared") or none of their libraries ("static",
# meson option static_grpc): a program linked from the archives that also
# loaded libgrpc.so would run two gRPCs, each with its own threads.
mode=$1
shift
[ "$mode" = static ] || [ "$mode" = shared ] || {
  echo "usage: $0 static|shared PROGRAM..." >&2
  exit 2
}
command -v ldd >/dev/null || { echo "no ldd: skipped"; exit 77; }
rc=0
for p in "$@"; do
  libs=$(ldd "$p") || { echo "$p: ldd failed" >&2; exit 1; }
  grpc=$(printf '%s\n' "$libs" | grep -E 'lib(grpc|gpr|upb|re2|cares|address_sorting|absl_[a-z0-9_]+)\.so' || true)
  if [ "$mode" = static ] && [ -n "$grpc" ]; then
    echo "$p: linked from gRPC's archives, yet it loads:" >&2
    printf '%s\n' "$grpc" >&2
    rc=1
  elif [ "$mode" = shared ] && ! printf '%s\n' "$libs" | grep -q 'libgrpc\.so'; then
    echo "$p: built with the shared gRPC, yet it does not load libgrpc.so" >&2
    rc=1
  else
    echo "$p: gRPC $mode, as built"
  fi
done
exit $rc
