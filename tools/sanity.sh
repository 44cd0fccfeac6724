#!/usr/bin/env bash
# ansible-test sanity for this collection, on the controller with the venv's Python.
# ansible-test needs the collection at .../ansible_collections/<namespace>/<name>, so it runs on a
# copy of the tree in .cache/sanity/ansible_collections/goldenimage/pipeline, with the dependency
# collections linked beside it. The per-test virtualenvs ansible-test builds (pylint, yamllint,
# validate-modules, ...) are kept in .cache/sanity/home, so only the first run installs them.
#   tools/sanity.sh [ansible-test sanity arguments, e.g. --test pep8]
#   SANITY_EXCLUDE="..." tools/sanity.sh   paths to leave out (default: tests/lab/; empty: none)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bin="$repo/.venv/bin"
python_version=$("$bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
root="$repo/.cache/sanity"
collection="$root/ansible_collections/goldenimage/pipeline"
home="$root/home"
wheels="$root/wheels"

echo "==> sanity: copying the collection to $collection"
mkdir -p "$collection"
rsync -a --delete --delete-excluded \
  --exclude=/.git --exclude=/.venv --exclude=/.collections --exclude=/.cache --exclude=/.lab \
  --exclude=/.ansible --exclude=/tests/output --exclude=__pycache__ --exclude='*.pyc' \
  --exclude=.pytest_cache --exclude=.ruff_cache --exclude=.hypothesis \
  "$repo/" "$collection/"
for dep in kubernetes/core amazon/aws; do
  mkdir -p "$root/ansible_collections/${dep%/*}"
  ln -sfn "$repo/.collections/ansible_collections/$dep" "$root/ansible_collections/$dep"
done

# ansible-test creates each virtualenv without pip and bootstraps pip with a get-pip script it
# downloads from ci-files.testing.ansible.com, which is not reachable from every machine. It
# reads the script from its cache (~/.ansible/test/cache) first, so the cache gets a stand-in
# that does what get-pip does (pip install ARGS, with pip run from its wheel, fetched from PyPI).
pip_version=$("$bin/python" -c '
import sys
from ansible_test._internal.host_configs import NativePythonConfig
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(NativePythonConfig(version=sys.argv[1]))["pip"])' "$python_version")
pip_wheel=$(compgen -G "$wheels/pip-$pip_version-*.whl" | head -n1 || true)
if [ -z "$pip_wheel" ]; then
  echo "==> sanity: pip download pip==$pip_version (for the sanity virtualenvs)"
  "$bin/pip" download --quiet --no-deps --only-binary=:all: --dest "$wheels" "pip==$pip_version"
  pip_wheel=$(compgen -G "$wheels/pip-$pip_version-*.whl" | head -n1)
fi
mkdir -p "$home/.ansible/test/cache"
cat > "$home/.ansible/test/cache/get_pip_${pip_version//./_}.py" <<PY
"""Stand-in for get-pip.py: pip install ARGS, with pip run from its wheel."""
import sys

sys.path.insert(0, "$pip_wheel")
from pip._internal.cli.main import main

args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
sys.exit(main(["install", "--find-links", "$wheels", *args]))
PY

# Test-support code that is not collection content (the lab, its conformance and controller tests,
# packaging tests, benchmarks, developer scripts) runs only under pytest on the controller's Python
# and is linted by ruff and shellcheck (tools/lint.sh). --exclude is ansible-test's own way to leave
# paths out of sanity; no sanity ignore file is involved.
excludes=()
for path in ${SANITY_EXCLUDE-tests/lab/ tests/packaging/ tests/e2e/ bench/ tools/}; do
  excludes+=(--exclude "$path")
done

cd "$collection"
# HOME keeps ansible-test's virtualenvs (~/.ansible/test/venv) and pip's cache in .cache.
# ANSIBLE_TEST_CONTENT_ROOT stops ansible-test from walking up to the repository's .git, in which
# this copy is an ignored path (it would then find no files to test).
run_sanity() {
  HOME="$home" PATH="$bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$root" ANSIBLE_TEST_CONTENT_ROOT="$collection" \
    "$bin/ansible-test" sanity --python "$python_version" --requirements --color no "${excludes[@]}" "$@"
}

if [ $# -gt 0 ]; then
  run_sanity "$@"
  exit
fi

echo "==> sanity: ansible-test sanity --skip-test validate-modules ${excludes[*]}"
run_sanity --skip-test validate-modules

# validate-modules holds every module to ansible-core's own rule that a module carries a GPLv3
# header. This collection is Apache-2.0 (galaxy.yml), so that one code cannot pass and is the only
# finding dropped here; every other validate-modules finding fails the run.
echo "==> sanity: ansible-test sanity --test validate-modules (all codes but missing-gplv3-license)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
run_sanity --test validate-modules --lint >"$log" 2>&1 || status=$?
findings=$(grep -E '^plugins/.*: [a-z0-9-]+: ' "$log" | grep -v ': missing-gplv3-license: ' || true)
dropped=$(grep -c ': missing-gplv3-license: ' "$log" || true)
echo "validate-modules: $dropped missing-gplv3-license finding(s) dropped (Apache-2.0 collection)"
if [ -n "$findings" ]; then
  echo "$findings"
  exit 1
fi
if [ "$status" -ne 0 ] && [ "$dropped" -eq 0 ]; then
  cat "$log"
  exit "$status"
fi
echo "validate-modules: ok"
