#!/usr/bin/env bash
# make demo: start a fresh lab (Kubernetes API + controllers + loopback S3) in .lab/demo and run
# playbooks/demo.yml against it. The lab keeps running afterwards so the objects can be inspected.
set -euo pipefail
cd "$(dirname "$0")/.."
state=.lab/demo
py=.venv/bin/python

"$py" -m tests.lab down --state-dir "$state" >/dev/null 2>&1 || true
rm -rf "$state"
# HTTPS, so kubectl (which sends no bearer token over plain HTTP) works against it too.
"$py" -m tests.lab up --tls --state-dir "$state"

set -a
# shellcheck source=/dev/null
. "$state/s3.env"
set +a
export K8S_AUTH_KUBECONFIG="$PWD/$state/kubeconfig"
export ANSIBLE_COLLECTIONS_PATH="$PWD/.collections"

.venv/bin/ansible-playbook -i localhost, -c local playbooks/demo.yml \
  -e "ansible_python_interpreter=$PWD/.venv/bin/python" -e "demo_workdir=$PWD/$state/work" "$@"

cat <<MSG

The lab is still running.
  kubeconfig: $K8S_AUTH_KUBECONFIG     (kubectl --kubeconfig $K8S_AUTH_KUBECONFIG get volumesnapshots -A)
  S3:         $AWS_ENDPOINT_URL      (credentials in $state/s3.env)
  stop it:    $py -m tests.lab down --state-dir $state
MSG
