#!/bin/sh
# Generates the certificates of the TLS tests into directory $1 (created if
# needed), with the openssl CLI. Keys are P-256, certificates valid 2 days.
#
#   ca.pem ca.key              the test CA ("libmcp test CA")
#   server.pem server.key      CN=localhost; SAN DNS:localhost, IP:127.0.0.1,
#                              URI:spiffe://cluster.local/ns/istio-system/sa/istiod
#   wrongname.pem .key         signed by the CA, SAN DNS:other.example only
#   client.pem client.key      SAN URI:spiffe://cluster.local/ns/default/sa/sink-a
#   denied.pem denied.key      SAN URI:spiffe://cluster.local/ns/evil/sa/sink-b
#   cn.pem cn.key              CN=legacy-client, no SAN
#   other-ca.pem other-ca.key  another CA
#   stranger.pem stranger.key  signed by the other CA, the same URI as client
#
# Every leaf may serve and dial (extendedKeyUsage serverAuth, clientAuth).
set -eu
dir=$1
mkdir -p "$dir"
cd "$dir"
umask 077

ossl() { openssl "$@" 2>/dev/null; }

ca() { # name CN
  ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$1.key" -out "$1.pem" -days 2 -subj "/O=libmcp tests/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign"
}

leaf() { # name CA subject [subjectAltName]
  ossl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$1.key" -out "$1.csr" -subj "$3"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    if [ -n "${4:-}" ]; then echo "subjectAltName=$4"; fi
  } >"$1.ext"
  ossl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" \
    -CAcreateserial -days 2 -extfile "$1.ext" -out "$1.pem"
  rm -f "$1.csr" "$1.ext"
}

ca ca "libmcp test CA"
ca other-ca "another CA"
leaf server ca "/CN=localhost" \
  "DNS:localhost,IP:127.0.0.1,URI:spiffe://cluster.local/ns/istio-system/sa/istiod"
leaf wrongname ca "/CN=other.example" "DNS:other.example"
leaf client ca "/CN=sink-a" "URI:spiffe://cluster.local/ns/default/sa/sink-a"
leaf denied ca "/CN=sink-b" "URI:spiffe://cluster.local/ns/evil/sa/sink-b"
leaf cn ca "/CN=legacy-client"
leaf stranger other-ca "/CN=sink-a" \
  "URI:spiffe://cluster.local/ns/default/sa/sink-a"
rm -f ./*.srl
