#!/usr/bin/env bash
# Install the collections this one depends on into .collections/, without Galaxy.
# kubernetes.core and amazon.aws are taken from the `ansible` community wheel on PyPI
# (which bundles them), and awx.awx, whose module argument specs the AWX configuration is checked
# against; only those directories are extracted. This collection is
# linked in beside them so ansible-playbook, ansible-doc and molecule find it by FQCN.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
wheel_version=${ANSIBLE_WHEEL_VERSION:-12.3.0}
dest="$here/.collections/ansible_collections"
cache="$here/.cache/wheels"
pip=${PIP:-"$here/.venv/bin/pip"}

if [ -f "$dest/kubernetes/core/MANIFEST.json" ] && [ -f "$dest/amazon/aws/MANIFEST.json" ] \
  && [ -f "$dest/awx/awx/MANIFEST.json" ]; then
  exit 0
fi
mkdir -p "$cache" "$dest/goldenimage"
wheel=$(compgen -G "$cache/ansible-$wheel_version-*.whl" | head -n1 || true)
if [ -z "$wheel" ]; then
  "$pip" download --quiet --no-deps --dest "$cache" "ansible==$wheel_version"
  wheel=$(compgen -G "$cache/ansible-$wheel_version-*.whl" | head -n1)
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$here/.venv/bin/python" - "$wheel" "$tmp" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
wanted = ("ansible_collections/kubernetes/core/", "ansible_collections/amazon/aws/", "ansible_collections/awx/awx/")
with zipfile.ZipFile(wheel) as zf:
    zf.extractall(out, [n for n in zf.namelist() if n.startswith(wanted)])
PY
rm -rf "$dest/kubernetes" "$dest/amazon" "$dest/awx"
mv "$tmp/ansible_collections/kubernetes" "$tmp/ansible_collections/amazon" "$tmp/ansible_collections/awx" "$dest/"
ln -sfn ../../.. "$dest/goldenimage/pipeline"
echo "collections: kubernetes.core, amazon.aws and awx.awx from ansible==$wheel_version into $dest"
