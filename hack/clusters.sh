#!/usr/bin/env bash
# clusters.sh up DIR MEMBERS | down DIR — a person's local hub and members, in the background.
set -euo pipefail
cmd=${1:?up|down}; dir=${2:?directory}
bin=${HUBFED_TESTENV_BIN:-target/debug/hubfed-testenv}

running() { [ -f "$dir/testenv.pid" ] && kill -0 "$(cat "$dir/testenv.pid")" 2>/dev/null; }

case $cmd in
up)
  members=${3:-2}
  if running; then
    echo "clusters already running (pid $(cat "$dir/testenv.pid")); kubeconfig: $dir/kubeconfig"
    exit 0
  fi
  mkdir -p "$dir"
  rm -f "$dir/ready"
  nohup "$bin" up --dir "$dir" --members "$members" >"$dir/testenv.out" 2>&1 &
  echo $! >"$dir/testenv.pid"
  for _ in $(seq 1 900); do
    if [ -f "$dir/ready" ]; then
      cat "$dir/testenv.out"
      echo
      echo "  export KUBECONFIG=$dir/kubeconfig"
      echo "  kubectl --context member1 get ns"
      echo "  make clusters-down    # stops them"
      exit 0
    fi
    if ! running; then
      echo "clusters failed to start:" >&2
      cat "$dir/testenv.out" >&2
      exit 1
    fi
    sleep 0.2
  done
  echo "clusters did not become ready in 180s; see $dir/testenv.out and $dir/logs/" >&2
  exit 1
  ;;
down)
  if running; then
    pid=$(cat "$dir/testenv.pid")
    kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
    echo "clusters stopped"
  else
    echo "no clusters running in $dir"
  fi
  rm -f "$dir/testenv.pid"
  ;;
*)
  echo "usage: $0 up DIR [MEMBERS] | down DIR" >&2
  exit 2
  ;;
esac
