#!/usr/bin/env bash
# Run every Molecule scenario of every role (roles/*/molecule/*/) against the lab.
# Each scenario gets a lab of its own (started here, stopped when it ends, whatever happens), so
# scenarios run side by side (MOLECULE_JOBS at a time, default 2) without seeing each other's
# objects. The scenarios inherit .config/molecule/config.yml, which takes the target from
# K8S_AUTH_KUBECONFIG and AWS_*.
#   tools/molecule.sh                 every scenario
#   tools/molecule.sh ROLE [SCENARIO] one role, or one scenario of it
#   tools/molecule.sh --list [...]    the scenario directories it would run, one a line, and nothing else
# The scenarios are found, never listed here: a role's new scenario runs without touching this file.
set -euo pipefail
list=false
if [ "${1:-}" = --list ]; then
  list=true
  shift
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
python="$repo/.venv/bin/python"
export PATH="$repo/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$repo/.collections"
export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false
base_config="$repo/.config/molecule/config.yml"
jobs=${MOLECULE_JOBS:-2}

scenarios=()
while IFS= read -r file; do
  scenarios+=("${file%/molecule.yml}")
done < <(compgen -G "roles/${1:-*}/molecule/${2:-*}/molecule.yml" | sort)
if [ ${#scenarios[@]} -eq 0 ]; then
  echo "molecule: no scenario under roles/${1:-*}/molecule/${2:-*}/" >&2
  [ $# -eq 0 ] && exit 0
  exit 1
fi
if $list; then
  printf '%s\n' "${scenarios[@]}"
  exit 0
fi

mkdir -p "$repo/.lab"
runs=$(mktemp -d "$repo/.lab/molecule.XXXXXX")
cleanup() {
  for state in "$runs"/*/lab; do
    if [ -d "$state" ]; then
      "$python" -m tests.lab down --state-dir "$state" >/dev/null 2>&1 || true
    fi
  done
  rm -rf "$runs"
}
trap cleanup EXIT

# One scenario against its own lab; its output goes to $runs/<n>/log, its verdict to $runs/<n>/rc.
run_scenario() {
  local n=$1 scenario=$2 dir="$runs/$1"
  local role_dir=${scenario%/molecule/*} name=${scenario##*/} status=0
  mkdir -p "$dir"
  (
    set -e
    echo "==> molecule: $role_dir: molecule test --scenario-name $name"
    "$python" -m tests.lab up --state-dir "$dir/lab" >/dev/null
    export K8S_AUTH_KUBECONFIG="$dir/lab/kubeconfig"
    # Harvester's API is a server of its own (the upload action): scenarios that upload name it.
    LAB_HARVESTER_URL=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["front_url"])' \
      "$dir/lab/lab.json")
    export LAB_HARVESTER_URL
    # Molecule's own state (e.g. "already prepared") starts empty on every run.
    export MOLECULE_EPHEMERAL_DIRECTORY="$dir/molecule"
    set -a
    # shellcheck source=/dev/null
    . "$dir/lab/s3.env"
    set +a
    cd "$role_dir"
    molecule --base-config "$base_config" test --scenario-name "$name"
  ) >"$dir/log" 2>&1 || status=$?
  echo "$status" >"$dir/rc"
  "$python" -m tests.lab down --state-dir "$dir/lab" >/dev/null 2>&1 || true
}

n=0
for scenario in "${scenarios[@]}"; do
  n=$((n + 1))
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
    wait -n || true
  done
  run_scenario "$n" "$scenario" &
done
wait

failed=()
n=0
for scenario in "${scenarios[@]}"; do
  n=$((n + 1))
  cat "$runs/$n/log"
  if [ "$(cat "$runs/$n/rc" 2>/dev/null || echo 1)" = 0 ]; then
    echo "    ok: $scenario"
  else
    echo "    FAILED: $scenario" >&2
    failed+=("$scenario")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "molecule: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "molecule: ${#scenarios[@]} scenario(s) passed"
