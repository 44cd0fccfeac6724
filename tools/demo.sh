#!/usr/bin/env bash
# make demo: start a fresh lab (Kubernetes API + controllers + loopback S3) in .lab/demo and run
# playbooks/demo.yml against it. The lab keeps running afterwards so the objects can be inspected.
# ACT=<name>[,<name>] runs only those acts (golden, baked, workers, microvm); the summary runs with every act.
# DEMO_STATE=<dir> keeps the lab somewhere else than .lab/demo. Further arguments go to ansible-playbook;
# `tools/demo.sh stop` stops the lab and the registry.
set -euo pipefail
cd "$(dirname "$0")/.."
state=$(realpath -m "${DEMO_STATE:-.lab/demo}")
py=.venv/bin/python

stop() {
  if [ -f "$state/registry/pid" ]; then
    kill "$(cat "$state/registry/pid")" 2>/dev/null || true
    rm -f "$state/registry/pid"
  fi
  "$py" -m tests.lab down --state-dir "$state" >/dev/null 2>&1 || true
}

started=$SECONDS
stop
if [ "${1:-}" = stop ]; then
  echo "stopped the lab and the registry of $state"
  exit 0
fi
rm -rf "$state"
# The lab serves HTTPS with its own CA, which the kubeconfig carries, so kubectl works against it too.
"$py" -m tests.lab up --state-dir "$state"

set -a
# shellcheck source=/dev/null
. "$state/s3.env"
set +a
export K8S_AUTH_KUBECONFIG="$state/kubeconfig"

# A docker-registry on loopback for the micro-VM images, plain HTTP, its storage under the state dir.
mkdir -p "$state/registry"
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export DEMO_REGISTRY="127.0.0.1:$port"
cat >"$state/registry/config.yml" <<CONF
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $state/registry/data
http:
  addr: $DEMO_REGISTRY
CONF
docker-registry serve "$state/registry/config.yml" >"$state/registry/log" 2>&1 &
echo $! >"$state/registry/pid"
for _ in $(seq 100); do
  curl -fsS "http://$DEMO_REGISTRY/v2/" >/dev/null 2>&1 && break
  sleep 0.1
done
export ANSIBLE_COLLECTIONS_PATH="$PWD/.collections"

act=()
if [ -n "${ACT:-}" ]; then
  act=(--tags "$ACT")
fi

lab_seconds=$((SECONDS - started))
.venv/bin/ansible-playbook -i localhost, -c local playbooks/demo.yml "${act[@]}" \
  -e "ansible_python_interpreter=$PWD/.venv/bin/python" -e "demo_workdir=$state/work" \
  -e "demo_lab_state=$state" "$@"

# Each act's seconds, as the summary play recorded them ("<act> <seconds>" a line, in the order they ran).
acts=""
while read -r name seconds; do
  acts+="${acts:+, }$name $seconds s"
done <"$state/act-seconds"

cat <<MSG

The lab and the registry are still running.
  kubeconfig: $K8S_AUTH_KUBECONFIG     (kubectl --kubeconfig $K8S_AUTH_KUBECONFIG get volumesnapshots -A)
  S3:         $AWS_ENDPOINT_URL      (credentials in $state/s3.env)
  registry:   http://$DEMO_REGISTRY
  stop them:  DEMO_STATE=$state tools/demo.sh stop
  each act:   lab start $lab_seconds s, ${acts:-no act ran}
  wall time:  $((SECONDS - started)) s for the whole demo, the lab's start included
MSG
