#!/usr/bin/env bash
# ansible-test sanity for this collection, with the venv's ansible-core and then with the floor of
# meta/runtime.yml's requires_ansible (ansible-core 2.16, in its own venv, .cache/venv-2.16, made on the
# first run), so the floor the collection declares is tested, not only asserted.
# ansible-test needs the collection at .../ansible_collections/<namespace>/<name>, so each run works on a
# copy of the tree in .cache/sanity[-2.16]/ansible_collections/goldenimage/pipeline, with the dependency
# collections linked beside it. The per-test virtualenvs ansible-test builds (pylint, yamllint,
# validate-modules, ...) are kept in .cache/sanity[-2.16]/home, so only the first run installs them.
#   tools/sanity.sh [ansible-test sanity arguments, e.g. --test pep8]   both ansible-cores
#   SANITY_CORE=current|floor tools/sanity.sh [...]                    only one of them
#   SANITY_EXCLUDE="..." tools/sanity.sh   paths to leave out (default: tests/lab/ ...; empty: none)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
floor_version=2.16
floor_requirement="ansible-core>=$floor_version,<2.17"
floor_venv="$repo/.cache/venv-$floor_version"
wheels="$repo/.cache/sanity/wheels"

# Test-support code that is not collection content (the lab, its conformance and controller tests,
# packaging tests, benchmarks, developer scripts) runs only under pytest on the controller's Python
# and is linted by ruff and shellcheck (tools/lint.sh). --exclude is ansible-test's own way to leave
# paths out of sanity; no sanity ignore file is involved.
excludes=()
for path in ${SANITY_EXCLUDE-tests/lab/ tests/packaging/ tests/e2e/ bench/ tools/}; do
  excludes+=(--exclude "$path")
done

# prepare BIN ROOT: copy the collection under ROOT and give ansible-test (of BIN) its get-pip stand-in.
prepare() {
  local bin=$1 root=$2
  local collection="$root/ansible_collections/goldenimage/pipeline" home="$root/home"
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
  local python_version pip_version pip_wheel
  python_version=$("$bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  pip_version=$("$bin/python" -c '
import sys
from ansible_test._internal.host_configs import NativePythonConfig
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(NativePythonConfig(version=sys.argv[1]))["pip"])' "$python_version")
  pip_wheel=$(compgen -G "$wheels/pip-$pip_version-*.whl" | head -n1 || true)
  if [ -z "$pip_wheel" ]; then
    echo "==> sanity: pip download pip==$pip_version (for the sanity virtualenvs)"
    "$repo/.venv/bin/pip" download --quiet --no-deps --only-binary=:all: --dest "$wheels" "pip==$pip_version"
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
}

# run_sanity BIN ROOT ARGS...: ansible-test (of BIN) sanity on the copy under ROOT.
# HOME keeps ansible-test's virtualenvs (~/.ansible/test/venv) and pip's cache under ROOT.
# ANSIBLE_TEST_CONTENT_ROOT stops ansible-test from walking up to the repository's .git, in which
# the copy is an ignored path (it would then find no files to test).
run_sanity() {
  local bin=$1 root=$2
  shift 2
  local collection="$root/ansible_collections/goldenimage/pipeline" python_version
  python_version=$("$bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  (cd "$collection" && HOME="$root/home" PATH="$bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$root" \
    ANSIBLE_TEST_CONTENT_ROOT="$collection" \
    "$bin/ansible-test" sanity --python "$python_version" --requirements --color no "${excludes[@]}" "$@")
}

# sanity_with BIN ROOT [ARGS...]: every sanity test; validate-modules with all codes but one.
sanity_with() {
  local bin=$1 root=$2 core
  shift 2
  core=$("$bin/python" -c 'from ansible.release import __version__; print(__version__)')
  prepare "$bin" "$root"
  if [ $# -gt 0 ]; then
    echo "==> sanity (ansible-core $core): ansible-test sanity $*"
    run_sanity "$bin" "$root" "$@"
    return
  fi
  echo "==> sanity (ansible-core $core): ansible-test sanity --skip-test validate-modules ${excludes[*]}"
  run_sanity "$bin" "$root" --skip-test validate-modules

  # validate-modules holds every module to ansible-core's own rule that a module carries a GPLv3
  # header. This collection is Apache-2.0 (galaxy.yml), so that one code cannot pass and is the only
  # finding dropped here; every other validate-modules finding fails the run.
  echo "==> sanity (ansible-core $core): ansible-test sanity --test validate-modules (all codes but missing-gplv3-license)"
  local log status=0 findings dropped
  log=$(mktemp)
  run_sanity "$bin" "$root" --test validate-modules --lint >"$log" 2>&1 || status=$?
  findings=$(grep -E '^plugins/.*: [a-z0-9-]+: ' "$log" | grep -v ': missing-gplv3-license: ' || true)
  dropped=$(grep -c ': missing-gplv3-license: ' "$log" || true)
  echo "validate-modules: $dropped missing-gplv3-license finding(s) dropped (Apache-2.0 collection)"
  if [ -n "$findings" ]; then
    echo "$findings"
    rm -f "$log"
    return 1
  fi
  if [ "$status" -ne 0 ] && [ "$dropped" -eq 0 ]; then
    cat "$log"
    rm -f "$log"
    return "$status"
  fi
  rm -f "$log"
  echo "validate-modules: ok"
}

floor_bin() {
  if ! "$floor_venv/bin/python" -c 'import ansible_test' 2>/dev/null; then
    echo "==> sanity: $floor_requirement into $floor_venv (requires_ansible's floor)" >&2
    "$repo/.venv/bin/python" -m venv "$floor_venv"
    "$floor_venv/bin/pip" install --quiet --disable-pip-version-check "$floor_requirement" >&2
  fi
  echo "$floor_venv/bin"
}

case "${SANITY_CORE:-both}" in
  current) sanity_with "$repo/.venv/bin" "$repo/.cache/sanity" "$@" ;;
  floor) sanity_with "$(floor_bin)" "$repo/.cache/sanity-$floor_version" "$@" ;;
  both)
    sanity_with "$repo/.venv/bin" "$repo/.cache/sanity" "$@"
    sanity_with "$(floor_bin)" "$repo/.cache/sanity-$floor_version" "$@"
    ;;
  *) echo "SANITY_CORE: current, floor or both, not ${SANITY_CORE}" >&2; exit 2 ;;
esac
