#!/usr/bin/env bash
# Runs one real Kubernetes node on this machine until SIGTERM or SIGINT: containerd (Debian
# package) and the pinned kubelet (`hack/build-kube.sh kubelet`), registered as NODE with the
# cluster of KUBECONFIG's current context, with the OCI image archives given imported first.
# e2e/tests/image_pod.rs runs the project's image on it as a real Pod.
#
#   hack/run-node.sh DIR KUBECONFIG NODE KUBELET_PORT HEALTHZ_PORT IMAGE.oci.tar...
#
# Needs root, containerd, runc and ctr; HUBFED_KUBELET names another kubelet. Everything lives under DIR (containerd's root, state
# and socket, the kubelet's root directory, pod logs, logs/) and in a private mount
# namespace, so every mount the node makes (container root file systems, pod volumes)
# disappears with it and none is seen by the rest of the machine. On SIGTERM the kubelet
# stops, every container is killed and deleted, then containerd stops; any process still
# in the namespace is killed, and containerd's emptied cgroups (`k8s.io`) are removed.
#
# What the kubelet is told, and why:
# - cgroupfs driver, no QoS cgroup tree, no node allocatable enforcement, failCgroupV1 off:
#   the kernel only offers cgroup v1 hierarchies here, which a kubelet ≥ 1.35 refuses by
#   default; containers still get their cgroups from runc.
# - protectKernelDefaults: the kubelet then only checks the six sysctls it would otherwise
#   set for the whole machine (vm.overcommit_memory=1, kernel.panic=10,
#   kernel.panic_on_oops=1, ...): inside the namespace, files bind-mounted over them in
#   /proc/sys hold the values it wants, and the machine's own settings stay untouched.
# - no swap check, no eviction thresholds, no image garbage collection (the imported images
#   cannot be pulled again), loopback-only kubelet server with anonymous access.
# - no CNI: containerd reports the pod network not ready, so the Node stays NotReady and
#   only `hostNetwork: true` pods run — all a control plane on loopback needs.
set -euo pipefail

if [ "${HUBFED_NODE_NAMESPACE:-}" != "$$" ]; then
  [ $# -ge 5 ] || { sed -n '2,8p' "$0" >&2; exit 2; }
  [ "$(id -u)" = 0 ] || { echo "run-node.sh: needs root" >&2; exit 1; }
  for tool in containerd runc ctr unshare; do
    command -v "$tool" >/dev/null || {
      echo "run-node.sh: $tool is missing (Debian: apt-get install containerd runc)" >&2
      exit 1
    }
  done
  # exec keeps the pid, so the namespace's first process is this script and it knows it.
  export HUBFED_NODE_NAMESPACE=$$
  exec unshare --mount --propagation private "$0" "$@"
fi

DIR=$1 KUBECONFIG=$2 NODE=$3 KUBELET_PORT=$4 HEALTHZ_PORT=$5
shift 5
KUBELET=${HUBFED_KUBELET:-$("$(dirname "$0")/build-kube.sh" kubelet)/kubelet}
mkdir -p "$DIR"/{containerd,kubelet,podlogs,sysctl,logs}
DIR=$(cd "$DIR" && pwd)
SOCK=$DIR/containerd/containerd.sock

# The values the kubelet's container manager expects (its setupKernelTunables).
for tunable in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 \
  kernel/panic_on_oops=1 kernel/keys/root_maxkeys=1000000 \
  kernel/keys/root_maxbytes=25000000; do
  file=$DIR/sysctl/${tunable%%=*}
  mkdir -p "$(dirname "$file")"
  echo "${tunable#*=}" >"$file"
  mount --bind "$file" "/proc/sys/${tunable%%=*}"
done

cat >"$DIR/containerd.toml" <<EOF
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
[grpc]
  address = "$SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "hubfed.local/pause:1"
  # No CAP_SYS_RESOURCE here: an oom_score_adj below containerd's own is refused.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = "$DIR/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
EOF

cat >"$DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $HEALTHZ_PORT
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: true
containerRuntimeEndpoint: unix://$SOCK
podLogsDir: $DIR/podlogs
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "0%"
  nodefs.available: "0%"
  imagefs.available: "0%"
EOF

containerd_pid= kubelet_pid=
stop() {
  trap - TERM INT EXIT
  [ -z "$kubelet_pid" ] || { kill -TERM "$kubelet_pid" 2>/dev/null; wait "$kubelet_pid" || true; }
  if [ -n "$containerd_pid" ]; then
    for task in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$SOCK" -n k8s.io tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true
    done
    for task in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$SOCK" -n k8s.io tasks delete -f "$task" >/dev/null 2>&1 || true
    done
    for container in $(ctr -a "$SOCK" -n k8s.io containers ls -q 2>/dev/null); do
      ctr -a "$SOCK" -n k8s.io containers delete "$container" >/dev/null 2>&1 || true
    done
    kill -TERM "$containerd_pid" 2>/dev/null
    wait "$containerd_pid" || true
    # containerd's parent cgroup of the containers, once empty (rmdir refuses otherwise).
    rmdir /sys/fs/cgroup/*/k8s.io 2>/dev/null || true
  fi
  # Whatever is left in this mount namespace (shims): it goes with the namespace.
  self=$(readlink /proc/$$/ns/mnt)
  for proc in /proc/[0-9]*; do
    pid=${proc#/proc/}
    [ "$pid" != $$ ] && [ "$(readlink "$proc/ns/mnt" 2>/dev/null)" = "$self" ] &&
      kill -KILL "$pid" 2>/dev/null
  done
  exit 0
}
trap stop TERM INT EXIT

containerd --config "$DIR/containerd.toml" >"$DIR/logs/containerd.log" 2>&1 &
containerd_pid=$!
for _ in $(seq 1 100); do
  [ -S "$SOCK" ] && ctr -a "$SOCK" version >/dev/null 2>&1 && break
  sleep 0.1
done
for image in "$@"; do
  ctr -a "$SOCK" -n k8s.io images import "$image" >>"$DIR/logs/containerd.log" 2>&1
done

"$KUBELET" --config="$DIR/kubelet.yaml" --kubeconfig="$KUBECONFIG" --root-dir="$DIR/kubelet" \
  --hostname-override="$NODE" --v=1 >"$DIR/logs/kubelet.log" 2>&1 &
kubelet_pid=$!
echo "node $NODE: containerd $containerd_pid, kubelet $kubelet_pid, logs in $DIR/logs" >&2
wait "$kubelet_pid" || echo "kubelet exited: $?" >&2
stop
