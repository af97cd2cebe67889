#!/bin/sh
# Makes the certificates of a test cluster in the directory given as the only
# argument, with the openssl command line (1.1 or 3):
#
#   ca.pem, ca.key           the cluster's CA
#   server.pem, server.key   a process's certificate, signed by ca: valid for
#                            the names in $EXTRA_SAN too (e.g. IP:10.0.0.1),
#                            IP 127.0.0.1 and DNS localhost, usable both as a
#                            coordinator and as a client (each process of a
#                            cluster is both, at different times)
#   client.pem, client.key   a client-only certificate, signed by ca
#   other-ca.pem, other-ca.key          a second CA, of another cluster
#   other-client.pem, other-client.key  a client certificate signed by other-ca
#   other-server.pem, other-server.key  a certificate signed by other-ca for
#                                       the same names as server.pem
#   revoked-client.pem, .key    a client certificate of ca, revoked by crl.pem
#   revoked-server.pem, .key    a process certificate of ca for the names of
#                               server.pem, revoked by crl.pem
#   expired-server.pem, .key    a process certificate of ca for the names of
#                               server.pem, valid only on 2020-01-01 (UTC)
#   elsewhere-server.pem, .key  a process certificate of ca, valid only for
#                               the name elsewhere.invalid
#   crl.pem                     ca's certificate revocation list, listing
#                               revoked-client and revoked-server
#
# Revocation and chosen validity dates need `openssl ca`, with its small
# database (ca-db/: an index of what it signed and revoked, and the number
# of the next CRL). `openssl x509 -req` of openssl 3.0 takes only -days, and
# a negative number of days gives a notAfter before the notBefore; `openssl
# ca -startdate/-enddate` gives any validity, in the past too.
#
# The same recipe makes a real cluster's files: one CA, then for each host a
# certificate whose subjectAltName lists the names and addresses it
# advertises. Keep ca.key off the hosts; each host needs ca.pem and its own
# pair only. Keys are ECDSA P-256 in PKCS#8 PEM.
set -eu

dir=$1
cd "$dir"

key() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null
}

# ca NAME COMMON_NAME
ca() {
    key "$1"
    openssl req -x509 -new -key "$1.key" -sha256 -days 3650 -subj "/CN=$2" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$1.pem"
}

# leaf NAME CA COMMON_NAME EXTENDED_KEY_USAGE [SUBJECT_ALT_NAME]
leaf() {
    key "$1"
    openssl req -new -key "$1.key" -subj "/CN=$3" -out "$1.csr"
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature"
        echo "extendedKeyUsage=$4"
        if [ $# -ge 5 ]; then echo "subjectAltName=$5"; fi
    } >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -set_serial "0x$(openssl rand -hex 8)" \
        -sha256 -days 3650 -extfile "$1.ext" -out "$1.pem" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}

# The config of `openssl ca` for the CA NAME, in ca-db/NAME.cnf.
ca_database() {
    mkdir -p ca-db
    : >"ca-db/$1.index"
    echo 1000 >"ca-db/$1.crlnumber"
    cat >"ca-db/$1.cnf" <<EOF
[ca]
default_ca = signer
[signer]
database = ca-db/$1.index
crlnumber = ca-db/$1.crlnumber
new_certs_dir = ca-db
certificate = $1.pem
private_key = $1.key
default_md = sha256
default_crl_days = 3650
rand_serial = yes
unique_subject = no
policy = any_name
[any_name]
commonName = supplied
EOF
}

# dated NAME CA COMMON_NAME EXTENDED_KEY_USAGE SUBJECT_ALT_NAME START END:
# a leaf valid from START to END (YYYYMMDDHHMMSSZ).
dated() {
    key "$1"
    openssl req -new -key "$1.key" -subj "/CN=$3" -out "$1.csr"
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature"
        echo "extendedKeyUsage=$4"
        echo "subjectAltName=$5"
    } >"$1.ext"
    openssl ca -batch -config "ca-db/$2.cnf" -in "$1.csr" -extfile "$1.ext" -notext \
        -startdate "$6" -enddate "$7" -out "$1.pem" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}

# revoke NAME CA: adds NAME.pem to the CA's list of revoked certificates.
revoke() {
    openssl ca -batch -config "ca-db/$2.cnf" -revoke "$1.pem" 2>/dev/null
}

names="IP:127.0.0.1,DNS:localhost${EXTRA_SAN:+,$EXTRA_SAN}"
ca ca "single-flight test CA"
ca_database ca
leaf server ca "single-flight test process" "serverAuth,clientAuth" "$names"
leaf client ca "single-flight test client" "clientAuth"
ca other-ca "another cluster's CA"
leaf other-client other-ca "another cluster's client" "clientAuth"
leaf other-server other-ca "another cluster's process" "serverAuth,clientAuth" "IP:127.0.0.1,DNS:localhost"
leaf revoked-client ca "a revoked client" "clientAuth"
leaf revoked-server ca "a revoked process" "serverAuth,clientAuth" "$names"
revoke revoked-client ca
revoke revoked-server ca
openssl ca -batch -config ca-db/ca.cnf -gencrl -out crl.pem 2>/dev/null
dated expired-server ca "an expired process" "serverAuth,clientAuth" "$names" 20200101000000Z 20200102000000Z
leaf elsewhere-server ca "a process of another name" "serverAuth,clientAuth" "DNS:elsewhere.invalid"
