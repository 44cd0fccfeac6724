#!/usr/bin/env bash
# Build the CSI snapshot controller (cmd/snapshot-controller of external-snapshotter) from its Go module into
# the lab's cache outside the work tree. The lab runs it as its snapshot controller; only the driver side
# (tests/lab/controllers/snapshots.py) stays simulated.
#
#   tools/build-snapshot-controller.sh     build (or reuse) and print the directory holding snapshot-controller
#   LAB_SNAPSHOTTER_VERSION=v8.7.0          the external-snapshotter release to build (the pin)
#   LAB_BIN_CACHE=~/.cache/goldenimage-lab
#
# github.com/kubernetes-csi/external-snapshotter/v8 replaces its client module with ./client, a path that
# does not exist outside its repository, so `go install module@version` refuses it. The wrapper module
# written here requires the release and the client module of the same release instead; every other module
# resolves to the version the release's go.mod requires. The version ldflag is the one upstream's
# release-tools set, so `snapshot-controller --version` reports the release.
# A build is reused when the binary and the stamp of the pin are present; a new pin builds anew.
# Cold (empty module and build caches, 129 modules downloaded) it took 8m 30s on the two shared cores
# (a niced test run alongside); with the module cache warm the build alone took about 5 min; reuse is
# instant.
set -euo pipefail
version=${LAB_SNAPSHOTTER_VERSION:-v8.7.0}
cache=${LAB_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/goldenimage-lab}
out="$cache/snapshot-controller-$version"
stamp="$out/.built"

# One build at a time: a concurrent caller waits for the running build, then reuses what it made.
mkdir -p "$cache" && exec 9>"$cache/.$(basename "$0" .sh).lock" && flock 9

if [ -x "$out/snapshot-controller" ] && [ -f "$stamp" ]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || {
  echo "build-snapshot-controller: go is required (Debian package golang, or a Go toolchain)" >&2
  exit 1
}

log() { echo "build-snapshot-controller: $*" >&2; }
start=$(date +%s)
module=github.com/kubernetes-csi/external-snapshotter/v8
work="$cache/snapshot-controller-src-$version"
mkdir -p "$work" "$out"
cd "$work"
export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-auto}

log "reading $module@$version's go.mod"
modfile=$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[ -f "$modfile" ] || { log "cannot download $module@$version through $(go env GOPROXY)"; exit 1; }
go_directive=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$modfile")
grep -q "client/v8 => ./client" "$modfile" || log "note: $module@$version no longer replaces its client module"

cat >go.mod <<EOF
module goldenimage.local/snapshotcontroller

go $go_directive

require (
	$module $version
	github.com/kubernetes-csi/external-snapshotter/client/v8 $version
)
EOF
cat >tools.go <<'GO'
//go:build tools

package snapshotcontroller

import _ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller"
GO

log "resolving modules (first run downloads them)"
go mod tidy >&2 || { log "cannot resolve the modules of $module@$version (see above)"; exit 1; }
log "building snapshot-controller $version (several minutes on a cold cache)"
go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$out/snapshot-controller" \
  "$module/cmd/snapshot-controller" >&2 || { log "go build of $module/cmd/snapshot-controller failed"; exit 1; }
echo "$version" >"$stamp"
log "done in $(($(date +%s) - start))s: $out"
echo "$out"
