#!/usr/bin/env bash
# Build versitygw (an S3 server with a POSIX backend) from its Go module into the lab's cache outside the
# work tree: the lab's S3 endpoint (tests/lab/s3.py) runs it.
#
#   tools/build-versitygw.sh            build (or reuse) and print the directory holding versitygw
#   LAB_VERSITYGW_VERSION=v1.8.0        the versitygw release to build (the pin)
#   LAB_BIN_CACHE=~/.cache/goldenimage-lab
#
# github.com/versity/versitygw has no replace directives, so `go install module@version` builds the
# release exactly as its go.mod and go.sum pin it. A build is reused when the binary and the stamp of the
# pin are present; a new pin builds anew.
set -euo pipefail
version=${LAB_VERSITYGW_VERSION:-v1.8.0}
cache=${LAB_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/goldenimage-lab}
out="$cache/versitygw-$version"
stamp="$out/.built"

# One build at a time: a concurrent caller waits for the running build, then reuses what it made.
mkdir -p "$cache" && exec 9>"$cache/.$(basename "$0" .sh).lock" && flock 9
if [ -x "$out/versitygw" ] && [ -f "$stamp" ]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || { echo "build-versitygw: go is required (Debian package golang, or a Go toolchain)" >&2; exit 1; }

log() { echo "build-versitygw: $*" >&2; }
start=$(date +%s)
mkdir -p "$out"
export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOBIN="$out"
log "building github.com/versity/versitygw $version (a few minutes on a cold cache)"
go install -trimpath -ldflags "-s -w -X main.Version=$version" \
  "github.com/versity/versitygw/cmd/versitygw@$version" >&2
echo "$version" >"$stamp"
log "done in $(($(date +%s) - start))s: $out"
echo "$out"
