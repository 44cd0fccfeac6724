#!/usr/bin/env bash
# Build cosign from its Go module into the lab's cache outside the work tree, for the tests only: the
# collection signs and verifies in-process and needs no cosign at run time.
#
#   tools/build-cosign.sh               build (or reuse) and print the directory holding cosign
#   LAB_COSIGN_VERSION=v2.6.5           the cosign release to build (the pin)
#   LAB_BIN_CACHE=~/.cache/goldenimage-lab
#
# github.com/sigstore/cosign/v2 has no replace directives, so `go install module@version` builds the
# release exactly as its go.mod and go.sum pin it. The version ldflag makes `cosign version` report it.
# A build is reused when the binary and the stamp of the pin are present; a new pin builds anew.
set -euo pipefail
version=${LAB_COSIGN_VERSION:-v2.6.5}
cache=${LAB_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/goldenimage-lab}
out="$cache/cosign-$version"
stamp="$out/.built"

# One build at a time: a concurrent caller waits for the running build, then reuses what it made.
mkdir -p "$cache" && exec 9>"$cache/.$(basename "$0" .sh).lock" && flock 9

if [ -x "$out/cosign" ] && [ -f "$stamp" ]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || { echo "build-cosign: go is required (Debian package golang, or a Go toolchain)" >&2; exit 1; }

log() { echo "build-cosign: $*" >&2; }
start=$(date +%s)
mkdir -p "$out"
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOBIN="$out"
log "building github.com/sigstore/cosign/v2 $version (a few minutes on a cold cache)"
go install -trimpath -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$version" \
  "github.com/sigstore/cosign/v2/cmd/cosign@$version" >&2
echo "$version" >"$stamp"
log "done in $(($(date +%s) - start))s: $out"
echo "$out"
