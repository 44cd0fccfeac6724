#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager and etcd from their Go modules into a cache outside the work tree.
#
#   tools/build-apiserver.sh            build (or reuse) and print the directory holding both binaries
#   LAB_K8S_VERSION=v1.36.3             the Kubernetes release to build (the pin)
#   LAB_BIN_CACHE=~/.cache/goldenimage-lab
#
# k8s.io/kubernetes replaces its staging modules (k8s.io/api, k8s.io/apiserver, ...) with ./staging/...
# paths, which do not exist outside its repository, so the wrapper module written here replaces each of
# them with its published version (v0.N.M for release v1.N.M). The list is read from the release's own
# go.mod, never typed. etcd is built at the version that go.mod requires (go.etcd.io/etcd/server/v3),
# through its etcdmain package. The version ldflags make /version report the real release.
# A build is reused when both binaries and the stamp of the pin are present; a new pin builds anew.
set -euo pipefail
version=${LAB_K8S_VERSION:-v1.36.3}
cache=${LAB_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/goldenimage-lab}
out="$cache/bin-$version"
stamp="$out/.built"

# One build at a time: a concurrent caller waits for the running build, then reuses what it made.
mkdir -p "$cache" && exec 9>"$cache/.$(basename "$0" .sh).lock" && flock 9

if [ -x "$out/kube-apiserver" ] && [ -x "$out/kube-controller-manager" ] && [ -x "$out/etcd" ] && [ -f "$stamp" ]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || { echo "build-apiserver: go is required (Debian package golang, or a Go toolchain)" >&2; exit 1; }

log() { echo "build-apiserver: $*" >&2; }
start=$(date +%s)
work="$cache/src-$version"
mkdir -p "$work/cmd/etcd" "$out"
cd "$work"
export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-auto}

log "reading k8s.io/kubernetes@$version's go.mod"
modfile=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[ -f "$modfile" ] || { log "cannot download k8s.io/kubernetes@$version"; exit 1; }
staging="v0.${version#v1.}"
go_directive=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$modfile")
etcd_version=$(sed -n 's/^[[:space:]]*go\.etcd\.io\/etcd\/server\/v3 \(v[0-9.]*\).*$/\1/p' "$modfile" | head -n1)
[ -n "$etcd_version" ] || { log "k8s.io/kubernetes@$version does not name go.etcd.io/etcd/server/v3"; exit 1; }

{
  echo "module goldenimage.local/labbinaries"
  echo
  echo "go $go_directive"
  echo
  sed -n 's/^godebug .*/&/p' "$modfile"
  echo
  echo "require ("
  echo "	k8s.io/kubernetes $version"
  echo "	go.etcd.io/etcd/server/v3 $etcd_version"
  echo ")"
  echo
  echo "replace ("
  sed -n "s#^[[:space:]]*\(k8s\.io/[a-z0-9./-]*\) => \./staging/src/.*\$#	\1 => \1 $staging#p" "$modfile"
  echo ")"
} >go.mod
log "$(grep -c ' => ' go.mod) staging modules replaced by their $staging releases; etcd $etcd_version"

cat >cmd/etcd/main.go <<'GO'
// etcd, built from go.etcd.io/etcd/server/v3 at the version Kubernetes requires.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
cat >tools.go <<'GO'
//go:build tools

package labbinaries

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)
GO

log "resolving modules (first run downloads them)"
go mod tidy >&2
commit=$(go list -m -json k8s.io/kubernetes | sed -n 's/.*"Version": "\(.*\)".*/\1/p' | head -n1)
minor=${version#v1.}
minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z -X $pkg.gitCommit=$commit"
log "building kube-apiserver $version (several minutes on a cold cache)"
go build -trimpath -ldflags "$ldflags" -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
log "building kube-controller-manager $version (its namespace, garbage-collector and ServiceAccount controllers run in the lab)"
go build -trimpath -ldflags "$ldflags" -o "$out/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager >&2
log "building etcd $etcd_version"
go build -trimpath -ldflags "-s -w" -o "$out/etcd" ./cmd/etcd >&2
echo "$version etcd=$etcd_version" >"$stamp"
log "done in $(($(date +%s) - start))s: $out"
echo "$out"
