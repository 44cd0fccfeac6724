#!/usr/bin/env bash
# Run every Molecule scenario of every role (roles/*/molecule/*/) against the lab.
# The lab is started here and stopped on exit, whatever happens. The scenarios inherit
# .config/molecule/config.yml, which takes the target from K8S_AUTH_KUBECONFIG and AWS_*.
#   tools/molecule.sh                 every scenario
#   tools/molecule.sh ROLE [SCENARIO] one role, or one scenario of it
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
python="$repo/.venv/bin/python"
export PATH="$repo/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$repo/.collections"
export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false
base_config="$repo/.config/molecule/config.yml"
# A lab of its own per run, so concurrent runs never restart each other's lab.
mkdir -p "$repo/.lab"
lab_dir=$(mktemp -d "$repo/.lab/molecule.XXXXXX")

scenarios=()
while IFS= read -r file; do
  scenarios+=("${file%/molecule.yml}")
done < <(compgen -G "roles/${1:-*}/molecule/${2:-*}/molecule.yml" | sort)
if [ ${#scenarios[@]} -eq 0 ]; then
  echo "molecule: no scenario under roles/${1:-*}/molecule/${2:-*}/"
  [ $# -eq 0 ] && exit 0
  exit 1
fi

stop_lab() {
  echo "==> molecule: stopping the lab ($lab_dir)"
  "$python" -m tests.lab down --state-dir "$lab_dir" || true
  rm -rf "$lab_dir"
}
echo "==> molecule: starting the lab: python -m tests.lab up --state-dir $lab_dir"
trap stop_lab EXIT
"$python" -m tests.lab up --state-dir "$lab_dir"

export K8S_AUTH_KUBECONFIG="$lab_dir/kubeconfig"
# AWS_* for the loopback S3 server, as the lab writes them.
if [ -f "$lab_dir/s3.env" ]; then
  set -a
  # shellcheck source=/dev/null
  . "$lab_dir/s3.env"
  set +a
fi

failed=()
for scenario in "${scenarios[@]}"; do
  role_dir=${scenario%/molecule/*}
  name=${scenario##*/}
  echo "==> molecule: $role_dir: molecule test --scenario-name $name"
  if (cd "$role_dir" && molecule --base-config "$base_config" test --scenario-name "$name"); then
    echo "    ok: $role_dir/$name"
  else
    echo "    FAILED: $role_dir/$name" >&2
    failed+=("$role_dir/$name")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "molecule: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "molecule: ${#scenarios[@]} scenario(s) passed"
