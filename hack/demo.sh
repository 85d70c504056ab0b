#!/usr/bin/env bash
# demo.sh — a local federation to try hubfed: a hub and 2 member clusters (hubfed-testenv),
# the KubeFed CRDs and default federated types, hubfed-controller, both members joined with
# hubfedctl, and the examples of docs/examples/. Runs until Ctrl-C, then stops the controller
# and the clusters. `make demo` builds the binaries and runs it.
#
#   HUBFED_DEMO_DIR   where clusters, kubeconfig and logs go (default ~/.cache/hubfed/demo)
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${CARGO_TARGET_DIR:-target}/debug
dir=${HUBFED_DEMO_DIR:-$HOME/.cache/hubfed/demo}
kubeconfig=$dir/kubeconfig

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
fail() { echo "demo: $*" >&2; exit 1; }
k() { kubectl --kubeconfig "$kubeconfig" "$@"; }
hubfedctl() { "$bin/hubfedctl" --kubeconfig "$kubeconfig" --host-cluster-context hub "$@"; }

command -v kubectl >/dev/null ||
  fail "kubectl not found on PATH; install it (https://kubernetes.io/docs/tasks/tools/)"
for b in hubfed-testenv hubfed-controller hubfedctl; do
  [ -x "$bin/$b" ] || fail "$bin/$b is missing; run 'make demo' (it builds it)"
done
mkdir -p "$dir"
if [ -f "$dir/demo.pid" ] && kill -0 "$(cat "$dir/demo.pid")" 2>/dev/null; then
  fail "a demo is already running (pid $(cat "$dir/demo.pid")); export KUBECONFIG=$kubeconfig"
fi
echo $$ >"$dir/demo.pid"

# The clusters and the controller run in their own sessions: Ctrl-C reaches only this
# script, which then stops the controller first and the clusters after it.
# Only ever run in the background (`detach cmd &`): it replaces that subshell, so $! is cmd.
detach() { if command -v setsid >/dev/null; then exec setsid "$@"; else exec "$@"; fi; }
testenv_pid=
controller_pid=
stop() {
  trap - EXIT INT TERM HUP
  trap "" PIPE
  # Cleanup must not stop half-way when the terminal or a pipe (`make demo | tee`) is gone.
  set +e
  { echo; echo "demo: stopping"; } 2>/dev/null
  if [ -n "$controller_pid" ] && kill -0 "$controller_pid" 2>/dev/null; then
    kill -TERM "$controller_pid" 2>/dev/null || true
    wait "$controller_pid" 2>/dev/null || true
    echo "demo: hubfed-controller stopped" 2>/dev/null
  fi
  if [ -n "$testenv_pid" ] && kill -0 "$testenv_pid" 2>/dev/null; then
    kill -TERM "$testenv_pid" 2>/dev/null || true
    wait "$testenv_pid" 2>/dev/null || true
    echo "demo: clusters stopped" 2>/dev/null
  fi
  rm -f "$dir/demo.pid"
}
trap stop EXIT
trap 'exit 130' INT TERM HUP PIPE

say "Starting a hub and 2 member clusters (logs: $dir/logs/)"
rm -f "$dir/ready"
detach "$bin/hubfed-testenv" up --dir "$dir" --members 2 >"$dir/testenv.log" 2>&1 &
testenv_pid=$!
for _ in $(seq 1 900); do
  [ -f "$dir/ready" ] && break
  kill -0 "$testenv_pid" 2>/dev/null || { cat "$dir/testenv.log" >&2; fail "the clusters failed to start"; }
  sleep 0.2
done
[ -f "$dir/ready" ] || fail "the clusters did not start in 180s; see $dir/testenv.log"
head -1 "$dir/testenv.log"

say "Installing the KubeFed CRDs and the default federated types in the hub"
k --context hub apply --server-side -f crds/core.yaml -f crds/federated-types.yaml >/dev/null
k --context hub wait --for condition=established --timeout=60s crd --all >/dev/null
k --context hub create namespace kube-federation-system --dry-run=client -o yaml | k --context hub apply -f - >/dev/null
k --context hub apply --server-side -f crds/default-ftcs.yaml >/dev/null
k --context hub -n kube-federation-system get federatedtypeconfigs

say "Starting hubfed-controller (log: $dir/controller.log)"
detach "$bin/hubfed-controller" --kubeconfig "$kubeconfig" --context hub >"$dir/controller.log" 2>&1 &
controller_pid=$!

say "Joining the members: hubfedctl join member1 / member2"
hubfedctl join member1 --error-on-existing=false
hubfedctl join member2 --error-on-existing=false

say "Applying docs/examples/ (a federated namespace, ConfigMap and Deployment)"
k --context hub apply -f docs/examples/
say "Federating an existing ConfigMap: hubfedctl federate configmap greeting -n demo"
k --context hub -n demo create configmap greeting --from-literal=message='federated by hubfedctl' \
  --dry-run=client -o yaml | k --context hub apply -f - >/dev/null
hubfedctl federate configmap greeting -n demo 2>/dev/null || echo "(already federated)"

say "Waiting for propagation"
k --context hub -n demo wait --for=condition=Propagation --timeout=90s \
  federatednamespace/demo federatedconfigmap/settings federatedconfigmap/greeting \
  federateddeployment/web

say "hubfedctl get clusters"
hubfedctl get clusters
say "kubectl --context hub get federated -A"
k --context hub get federated -A
for member in member1 member2; do
  say "In $member: kubectl --context $member -n demo get deployments,configmaps"
  k --context "$member" -n demo get deployments -o custom-columns='DEPLOYMENT:.metadata.name,REPLICAS:.spec.replicas,MANAGED:.metadata.labels.kubefed\.io/managed'
  k --context "$member" -n demo get configmaps -l kubefed.io/managed=true -o custom-columns='CONFIGMAP:.metadata.name,DATA:.data'
done
echo
echo "(The test clusters run no nodes: pods stay Pending. The replica counts are the point.)"

cat <<EOF

The federation is running. From another terminal:

  export KUBECONFIG=$kubeconfig
  kubectl --context hub get federated -A
  kubectl --context member2 -n demo get deployment web
  $bin/hubfedctl get clusters
  kubectl --context hub -n demo edit federateddeployment web     # change replicas, watch members

Controller log: $dir/controller.log   Cluster logs: $dir/logs/
Press Ctrl-C to stop the controller and the clusters.
EOF

while kill -0 "$controller_pid" 2>/dev/null && kill -0 "$testenv_pid" 2>/dev/null; do
  sleep 1
done
kill -0 "$controller_pid" 2>/dev/null || fail "hubfed-controller exited; see $dir/controller.log"
fail "the clusters stopped; see $dir/testenv.log"
