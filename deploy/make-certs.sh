#!/usr/bin/env bash
# Certificates for Squall's mutual TLS on Thrift (nimbus.thrift.tls.*) and HTTPS, with openssl: a CA of the cluster's own,
# then one PEM file (certificate + private key) per nimbus host and per client principal, as the keystore keys
# want them. The CA's key signs every certificate: keep it off the cluster.
#
#   deploy/make-certs.sh DIR ca                               # DIR/ca.pem (every truststore), DIR/ca-key.pem
#   deploy/make-certs.sh DIR nimbus nimbus1 nimbus1.example 10.0.0.5
#                                  # DIR/nimbus1.pem: principal "nimbus1", valid for these host names and addresses
#                                  # (clients check the host they connect to); usable as server and as client
#   deploy/make-certs.sh DIR server ui ui.example 10.0.0.6    # the same for another server: the UI's and the
#                                                             # logviewers' HTTPS (ui.https.*, logviewer.https.*)
#   deploy/make-certs.sh DIR client alice                     # DIR/alice.pem: a client, principal "alice"
#
# Certificates last SQUALL_CERT_DAYS days (default 365). Keys are EC P-256 and unencrypted, readable by their
# owner only (set *.keystore.password only for keys you encrypt yourself).
set -euo pipefail

usage() { sed -n '2,15p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
dir=$1 kind=$2
shift 2
days=${SQUALL_CERT_DAYS:-365}
mkdir -p "$dir"
umask 077

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

case "$kind" in
  ca)
    if [ -e "$dir/ca.pem" ]; then
      echo "$dir/ca.pem exists: a new CA would orphan every certificate it signed" >&2
      exit 1
    fi
    new_key "$dir/ca-key.pem"
    openssl req -x509 -new -key "$dir/ca-key.pem" -out "$dir/ca.pem" -days "$days" -subj "/CN=Squall cluster CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -addext "subjectKeyIdentifier=hash"
    chmod 644 "$dir/ca.pem"
    echo "$dir/ca.pem"
    ;;
  nimbus|server|client)
    [ $# -ge 1 ] || usage
    name=$1
    [ -e "$dir/ca.pem" ] && [ -e "$dir/ca-key.pem" ] || { echo "no CA in $dir: run $0 $dir ca first" >&2; exit 1; }
    usages="clientAuth"
    alt=""
    if [ "$kind" != client ]; then
      usages="serverAuth,clientAuth"
      for host in "$@"; do
        if [[ "$host" =~ ^[0-9.]+$ || "$host" == *:* ]]; then kind_of=IP; else kind_of=DNS; fi
        alt+="${alt:+,}$kind_of:$host"
      done
    fi
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    {
      echo "basicConstraints=critical,CA:FALSE"
      echo "keyUsage=critical,digitalSignature"
      echo "extendedKeyUsage=$usages"
      echo "subjectKeyIdentifier=hash"
      echo "authorityKeyIdentifier=keyid"
      [ -z "$alt" ] || echo "subjectAltName=$alt"
    } > "$work/ext"
    new_key "$work/key.pem"
    openssl req -new -key "$work/key.pem" -out "$work/req.pem" -subj "/CN=$name"
    openssl x509 -req -in "$work/req.pem" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
      -set_serial "0x$(openssl rand -hex 16)" -days "$days" -extfile "$work/ext" -out "$work/cert.pem" 2>/dev/null
    cat "$work/cert.pem" "$work/key.pem" > "$dir/$name.pem"
    echo "$dir/$name.pem"
    ;;
  *) usage ;;
esac
