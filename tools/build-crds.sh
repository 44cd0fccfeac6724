#!/usr/bin/env bash
# Generate the CRDs of KubeVirt, CDI and the CSI snapshot API from their upstream Go API types with
# controller-gen, into a cache outside the work tree; the lab installs them instead of hand-written ones.
#
#   tools/build-crds.sh                 build (or reuse) and print the directory holding the CRD files
#   LAB_BIN_CACHE=~/.cache/goldenimage-lab
#
# The pins are below; a change to any of them generates anew into a directory of its own. The schemas
# are what controller-gen derives from the types (KubeVirt itself derives its CRD validation from its
# API types with controller-tools): structural, pruning unknown fields. Descriptions are dropped
# (maxDescLen=0) to keep them small; KubeVirt's types hold float fields (allowDangerousTypes).
# What KubeVirt's types do not say (short names, the status subresource, served versions) and the
# API-approval annotation of the snapshot CRDs are put in by tools/crdfinish.py, as upstream installs them.
set -euo pipefail
controller_tools=v0.23.0
kubevirt_api=v1.6.0
# CDI v1.65.0 is the first release whose DataVolume http source has checksum, which the collection pins
# goldens with (v1.62.0 prunes it); LAB_CDI_API_VERSION generates an older one to test against.
cdi_api=${LAB_CDI_API_VERSION:-v1.65.0}
snapshot_client=v8.7.0
pin="ct$controller_tools-kv$kubevirt_api-cdi$cdi_api-snap$snapshot_client"
cache=${LAB_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/goldenimage-lab}
out="$cache/crds-$pin"
stamp="$out/.built"
here=$(cd "$(dirname "$0")" && pwd)

# One build at a time: a concurrent caller waits for the running build, then reuses what it made.
mkdir -p "$cache" && exec 9>"$cache/.$(basename "$0" .sh).lock" && flock 9

if [ -f "$stamp" ]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || { echo "build-crds: go is required (Debian package golang, or a Go toolchain)" >&2; exit 1; }

log() { echo "build-crds: $*" >&2; }
start=$(date +%s)
work="$cache/crdgen-src-$pin"
raw="$work/out"
rm -rf "$raw" "$out.tmp"
mkdir -p "$work" "$raw" "$out.tmp"
cd "$work"
export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-auto}

cat >go.mod <<MOD
module goldenimage.local/labcrds

go 1.24

require (
	sigs.k8s.io/controller-tools $controller_tools
	kubevirt.io/api $kubevirt_api
	kubevirt.io/containerized-data-importer-api $cdi_api
	github.com/kubernetes-csi/external-snapshotter/client/v8 $snapshot_client
)
MOD
cat >tools.go <<'GO'
//go:build tools

package labcrds

import (
	_ "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	_ "kubevirt.io/api/core/v1"
	_ "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
GO
# go get resolves the imports of these packages only; go mod tidy would fetch every dependency's tests
# too, several times the downloads on a cold cache.
log "resolving modules (first run downloads them)"
go get sigs.k8s.io/controller-tools/cmd/controller-gen@"$controller_tools" \
  kubevirt.io/api/core/v1@"$kubevirt_api" \
  kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1@"$cdi_api" \
  github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1@"$snapshot_client" >&2
log "building controller-gen $controller_tools"
go build -trimpath -ldflags "-s -w" -o "$work/controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen >&2
built=$(date +%s)
for pkg in kubevirt.io/api/core/v1 \
  kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1 \
  github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1; do
  log "generating from $pkg"
  "$work/controller-gen" crd:allowDangerousTypes=true,maxDescLen=0 paths="$pkg" output:crd:dir="$raw" >&2
done
python=${PYTHON:-python3}
[ -x "$here/../.venv/bin/python" ] && python=${PYTHON:-$here/../.venv/bin/python}
snapshot_dir=$(go list -m -f '{{.Dir}}' github.com/kubernetes-csi/external-snapshotter/client/v8)
"$python" "$here/crdfinish.py" "$raw" "$out.tmp" "$snapshot_dir/config/crd" "$cdi_api" >&2
echo "$pin" >"$out.tmp/.built"
rm -rf "$out"
mv "$out.tmp" "$out"
log "done in $(($(date +%s) - start))s (modules and controller-gen in $((built - start))s): $out"
echo "$out"
