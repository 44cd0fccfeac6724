#!/usr/bin/env bash
# One lint entry point: Python (ruff), YAML (yamllint), Ansible content (ansible-lint),
# shell scripts (shellcheck) and changelog fragments (antsibull-changelog).
# Every check runs even when an earlier one fails, so one run shows every finding;
# the exit status is non-zero if any check failed.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 1
bin="$repo/.venv/bin"
export PATH="$bin:$PATH"
# Dependency collections come from .collections; ansible-lint never asks Galaxy (offline: true).
export ANSIBLE_COLLECTIONS_PATH="$repo/.collections"
export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false

failed=()

run() {
  local name=$1
  shift
  echo "==> lint: $name: $*"
  if "$@"; then
    echo "    ok: $name"
  else
    echo "    FAILED: $name" >&2
    failed+=("$name")
  fi
}

run ruff-check "$bin/ruff" check .
run ruff-format "$bin/ruff" format --check .
run yamllint "$bin/yamllint" --strict .

lint_targets=()
for dir in roles playbooks awx; do
  if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
    lint_targets+=("$dir")
  fi
done
if [ ${#lint_targets[@]} -gt 0 ]; then
  color=()
  [ -t 1 ] || color=(--nocolor)
  run ansible-lint "$bin/ansible-lint" --offline "${color[@]}" "${lint_targets[@]}"
else
  echo "==> lint: ansible-lint: nothing under roles/ or playbooks/ yet"
fi

if command -v shellcheck >/dev/null 2>&1; then
  mapfile -t scripts < <(compgen -G 'tools/*.sh'; compgen -G 'roles/*/files/*.sh')
  if [ ${#scripts[@]} -gt 0 ]; then
    run shellcheck shellcheck "${scripts[@]}"
  fi
else
  echo "==> lint: shellcheck: not installed, skipped (apt-get install shellcheck)" >&2
fi

run changelog "$bin/antsibull-changelog" lint

if [ ${#failed[@]} -gt 0 ]; then
  echo "lint: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "lint: all checks passed"
