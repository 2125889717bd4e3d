#!/bin/sh
# Make route TLS files for a jetraft cluster with openssl: a private CA (kept in OUT_DIR, reused
# on later runs) and one certificate for the given hostnames, to be used by every node:
#   deploy/tls/make-route-certs.sh OUT_DIR HOSTNAME...
#   deploy/tls/make-route-certs.sh deploy/docker/tls n1 n2 n3              # compose
#   deploy/tls/make-route-certs.sh ./tls '*.jetraft.jetraft.svc'           # Kubernetes
#   deploy/tls/make-route-certs.sh ./n1-tls n1.example.internal            # one per machine
# Writes OUT_DIR/ca.pem, ca-key.pem (keep it offline), route.pem and route-key.pem.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 OUT_DIR HOSTNAME..." >&2; exit 2; }
out=$1; shift
mkdir -p "$out"
umask 077
if [ ! -f "$out/ca.pem" ]; then
  openssl req -x509 -newkey rsa:3072 -nodes -days 3650 -subj "/CN=jetraft route CA" \
    -keyout "$out/ca-key.pem" -out "$out/ca.pem"
fi
san=""
for h in "$@"; do san="${san:+$san,}DNS:$h"; done
openssl req -newkey rsa:3072 -nodes -subj "/CN=$1" -keyout "$out/route-key.pem" -out "$out/route.csr"
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" > "$out/route.ext"
openssl x509 -req -in "$out/route.csr" -CA "$out/ca.pem" -CAkey "$out/ca-key.pem" \
  -CAcreateserial -days 825 -extfile "$out/route.ext" -out "$out/route.pem"
rm -f "$out/route.csr" "$out/route.ext"
chmod 0644 "$out/ca.pem" "$out/route.pem"
echo "wrote $out/ca.pem $out/route.pem $out/route-key.pem (route-key.pem is 0600: give the" \
  "jetraft user read access, e.g. chgrp 10001 + chmod 0640 for the container image)"
