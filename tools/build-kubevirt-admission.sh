#!/usr/bin/env bash
# Build the lab's KubeVirt admission webhook (tools/kubevirt-admission: KubeVirt's own validating
# admitters from kubevirt.io/kubevirt, behind a small HTTPS server) into the lab's cache outside the
# work tree. The lab registers it as the ValidatingWebhookConfiguration for VirtualMachines and
# VirtualMachineInstances, as virt-api registers its own.
#
#   tools/build-kubevirt-admission.sh   build (or reuse) and print the directory holding kubevirt-admission
#   LAB_BIN_CACHE=~/.cache/goldenimage-lab
#
# The pin is kubevirt.io/kubevirt v1.6.0 in tools/kubevirt-admission/go.mod (with the replace directives
# copied from its go.mod, which do not apply to a dependency) and go.sum. The build reads the module
# from a copy in the cache, so the work tree stays clean. A build is reused while the stamp names the
# same sources; a changed main.go, go.mod or go.sum builds anew.
set -euo pipefail
version=v1.6.0
here=$(cd "$(dirname "$0")" && pwd)
src="$here/kubevirt-admission"
cache=${LAB_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/goldenimage-lab}
out="$cache/kubevirt-admission-$version"
stamp="$out/.built"
# One build at a time: a concurrent caller waits for the running build, then reuses what it made.
mkdir -p "$cache" && exec 9>"$cache/.$(basename "$0" .sh).lock" && flock 9
sources=$(cat "$src/main.go" "$src/go.mod" "$src/go.sum" | sha256sum | cut -d' ' -f1)

if [ -x "$out/kubevirt-admission" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$sources" ]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || {
  echo "build-kubevirt-admission: go is required (Debian package golang, or a Go toolchain)" >&2
  exit 1
}

log() { echo "build-kubevirt-admission: $*" >&2; }
start=$(date +%s)
work="$cache/kubevirt-admission-src-$version"
rm -rf "$work"
mkdir -p "$work" "$out"
cp "$src/main.go" "$src/go.mod" "$src/go.sum" "$work/"
cd "$work"
export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
log "building kubevirt-admission from kubevirt.io/kubevirt $version (several minutes on a cold cache)"
go build -trimpath -ldflags "-s -w" -o "$out/kubevirt-admission.tmp" . >&2 || {
  log "go build of tools/kubevirt-admission failed (see above)"
  exit 1
}
mv "$out/kubevirt-admission.tmp" "$out/kubevirt-admission"
echo "$sources" >"$stamp"
log "done in $(($(date +%s) - start))s: $out"
echo "$out"
