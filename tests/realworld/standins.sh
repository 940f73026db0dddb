#!/usr/bin/env bash
# Stand-in base images for the real-world Dockerfiles, pushed to a local
# registry under the names the Dockerfiles use (a registries.conf rewrites
# docker.io to it):
#   REGISTRY/library/golang:1.19.9-alpine3.16  Debian bookworm minbase with
#       golang-any (Go 1.19), git, file and the Go libraries docker-registry
#       builds with (its Debian Build-Depends), GOPATH=/go:/usr/share/gocode
#       (the real image has /go only: its builds fetch modules), and a
#       stand-in /sbin/apk (standin/apk);
#   REGISTRY/tonistiigi/xx:1.2.1  only /usr/bin/xx-go and /usr/bin/xx-verify
#       (standin/), as the real xx image holds only its scripts;
#   REGISTRY/library/alpine:3.16  bookworm minbase with ca-certificates and
#       the stand-in apk.
#   standins.sh REGISTRY_HOST:PORT
# The rootfs tarballs (mmdebstrap, from the Debian mirror) and the OCI
# layouts (umoci) are made once and kept in $IMGBUILD_TEST_CACHE; pushing
# is skopeo's, so imgbuild pulls images it did not make.
set -euo pipefail
registry=$1
here=$(cd "$(dirname "$0")" && pwd)
cache=${IMGBUILD_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imgbuild-tests}/realworld
mirror=${IMGBUILD_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$cache"
golang_pkgs=golang-any,git,file,ca-certificates,golang-github-aws-aws-sdk-go-dev,golang-github-bshuster-repo-logrus-logstash-hook-dev,golang-github-bugsnag-bugsnag-go-dev,golang-github-docker-go-metrics-dev,golang-github-docker-libtrust-dev,golang-github-garyburd-redigo-dev,golang-github-gorilla-handlers-dev,golang-github-gorilla-mux-dev,golang-github-mitchellh-mapstructure-dev,golang-github-ncw-swift-dev,golang-github-opencontainers-go-digest-dev,golang-github-opencontainers-image-spec-dev,golang-github-shopify-logrus-bugsnag-dev,golang-github-sirupsen-logrus-dev,golang-github-spf13-cobra-dev,golang-golang-x-crypto-dev,golang-gopkg-check.v1-dev,golang-gopkg-yaml.v2-dev
path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

rootfs() { # NAME PACKAGES: $cache/NAME.tar, made once
  if [ ! -s "$cache/$1.tar" ]; then
    echo "standins: mmdebstrap $1 from $mirror (once)" >&2
    mmdebstrap --quiet --variant=minbase --include="$2" --format=tar bookworm "$cache/$1.tar.tmp" "$mirror" >&2
    mv "$cache/$1.tar.tmp" "$cache/$1.tar"
  fi
}
shims() { # NAME DIR FILE...: $cache/NAME-shims.tar holding DIR/FILE..., root-owned
  local t; t=$(mktemp -d)
  mkdir -p "$t/root/$2"
  for f in "${@:3}"; do install -m 755 "$here/standin/$f" "$t/root/$2/$f"; done
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --mode=go-w -C "$t/root" -cf "$t/shims.tar" .
  # written only when changed: an unprivileged run reads root's cache
  cmp -s "$t/shims.tar" "$cache/$1-shims.tar" || mv "$t/shims.tar" "$cache/$1-shims.tar"
  rm -rf "$t"
}
layout() { # NAME TAG CMD ARGS...: an OCI layout at $cache/NAME-oci, remade when its inputs change
  local name=$1 tag=$2 stamp; shift 2
  stamp=$(cat "$cache/$name"*.tar "$0" | sha256sum | cut -c1-16)
  if [ "$(cat "$cache/$name-oci/stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$cache/$name-oci.tmp"
    umoci init --layout "$cache/$name-oci.tmp"
    umoci new --image "$cache/$name-oci.tmp:$tag"
    "$@"
    umoci gc --layout "$cache/$name-oci.tmp"
    echo "$stamp" > "$cache/$name-oci.tmp/stamp"
    rm -rf "$cache/$name-oci"
    mv "$cache/$name-oci.tmp" "$cache/$name-oci"
  fi
}
golang_image() {
  local i="$cache/golang-oci.tmp:standin"
  umoci raw add-layer --image "$i" --history.created_by "mmdebstrap bookworm: Go and docker-registry's Build-Depends" "$cache/golang.tar"
  umoci raw add-layer --image "$i" --history.created_by "stand-in apk" "$cache/golang-shims.tar"
  umoci config --image "$i" --config.env "PATH=/go/bin:/usr/local/go/bin:$path" \
    --config.env GOPATH=/go:/usr/share/gocode --config.workingdir /go --config.cmd sh \
    --os linux --architecture amd64
}
xx_image() {
  local i="$cache/xx-oci.tmp:standin"
  umoci raw add-layer --image "$i" --history.created_by "stand-in xx-go, xx-verify" "$cache/xx-shims.tar"
  umoci config --image "$i" --os linux --architecture amd64
}
alpine_image() {
  local i="$cache/alpine-oci.tmp:standin"
  umoci raw add-layer --image "$i" --history.created_by "mmdebstrap bookworm minbase, ca-certificates" "$cache/alpine.tar"
  umoci raw add-layer --image "$i" --history.created_by "stand-in apk" "$cache/alpine-shims.tar"
  umoci config --image "$i" --config.env "PATH=$path" --config.cmd /bin/sh --os linux --architecture amd64
}

rootfs golang "$golang_pkgs"
rootfs alpine ca-certificates
shims golang sbin apk
shims alpine sbin apk
shims xx usr/bin xx-go xx-verify
layout golang standin golang_image
layout xx standin xx_image
layout alpine standin alpine_image
for pair in golang:library/golang:1.19.9-alpine3.16 xx:tonistiigi/xx:1.2.1 alpine:library/alpine:3.16; do
  skopeo copy --quiet --dest-tls-verify=false "oci:$cache/${pair%%:*}-oci:standin" "docker://$registry/${pair#*:}" >&2
done
