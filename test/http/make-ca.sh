#!/bin/sh
# make-ca.sh DIR: a certificate authority of its own (DIR/ca.pem, its key
# DIR/ca.key) and a server certificate it signed for 127.0.0.1 and
# localhost (DIR/server.pem, DIR/server.key), valid for two days, for the
# TLS tests of HTTP routes.  The openssl command-line tool only.
set -eu
dir=$1
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
	-keyout ca.key -out ca.pem -days 2 -subj "/CN=krizaka_outbox test CA $$" \
	-addext "basicConstraints=critical,CA:TRUE" \
	-addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
	-keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
cat >server.ext <<EXT
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
EXT
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
	-out server.pem -days 2 -extfile server.ext 2>/dev/null
openssl verify -CAfile ca.pem server.pem >/dev/null
chmod 600 ca.key server.key
