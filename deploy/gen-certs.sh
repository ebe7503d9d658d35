#!/usr/bin/env bash
# Makes a private CA, a gangscaler server certificate and a Cluster Autoscaler client
# certificate for mutual TLS, with openssl.
#
# Usage: deploy/gen-certs.sh OUT_DIR [SERVER_DNS_NAME ...]
# Default names: localhost, gangscaler, gangscaler.kube-system.svc (plus IP 127.0.0.1).
set -euo pipefail
out=${1:?usage: gen-certs.sh OUT_DIR [SERVER_DNS_NAME ...]}
shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(localhost gangscaler gangscaler.kube-system.svc)
mkdir -p "$out"
cd "$out"
san="IP:127.0.0.1"
for n in "${names[@]}"; do san="$san,DNS:$n"; done

openssl req -x509 -newkey rsa:3072 -nodes -days 825 -subj "/CN=gangscaler-ca" \
  -keyout ca.key -out ca.crt -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

issue() { # name cn eku san
  openssl req -newkey rsa:3072 -nodes -subj "/CN=$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n%s' \
    "$3" "${4:+subjectAltName=$4}" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 825 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
issue server gangscaler serverAuth "$san"
issue client cluster-autoscaler clientAuth ""
chmod 600 ./*.key
echo "wrote $(pwd)/{ca,server,client}.{crt,key}"
