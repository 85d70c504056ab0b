#!/usr/bin/env bash
# Runs the end-to-end test binaries (built already: `cargo test -p hubfed-e2e --no-run`) in
# lanes side by side, because they mostly wait — on grace periods, outages, pods, staged
# rollouts: one binary alone keeps the 2 cores 20-47 % busy.
#
#   hack/e2e-lanes.sh "LANE" ["LANE" ...]
#
# Each LANE names test binaries (e2e/tests/NAME.rs) that run one after another beside the
# other lanes; every binary not named, with the crate's lib and bin tests, runs in the main
# lane, in the foreground. The other lanes' output follows once all are done, lane by lane.
# An empty LANE is skipped; no LANE at all runs everything in one sequence. The exit status
# is the first failing lane's.
set -uo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}

declare -A lane_of=()
lanes=()
for lane in "$@"; do
  [ -n "${lane// /}" ] || continue
  index=${#lanes[@]}
  lanes+=("$lane")
  for name in $lane; do
    [ -f "e2e/tests/$name.rs" ] || { echo "e2e-lanes: no test binary e2e/tests/$name.rs" >&2; exit 2; }
    lane_of[$name]=$index
  done
done

main=(--lib --bins)
declare -a args=()
for file in e2e/tests/*.rs; do
  name=$(basename "$file" .rs)
  if [ -n "${lane_of[$name]:-}" ]; then
    args[${lane_of[$name]}]+=" --test $name"
  else
    main+=(--test "$name")
  fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pids=()
for index in "${!lanes[@]}"; do
  # shellcheck disable=SC2086 # the --test arguments are split on purpose
  "$CARGO" test -p hubfed-e2e --no-fail-fast ${args[$index]} -- --test-threads=4 \
    > "$tmp/lane-$index.log" 2>&1 &
  pids+=($!)
done

status=0
"$CARGO" test -p hubfed-e2e --no-fail-fast "${main[@]}" -- --test-threads=4 || status=$?
for index in "${!pids[@]}"; do
  lane_status=0
  wait "${pids[$index]}" || lane_status=$?
  echo "--- e2e lane beside: ${lanes[$index]} (exit $lane_status)"
  cat "$tmp/lane-$index.log"
  if [ "$status" -eq 0 ] && [ "$lane_status" -ne 0 ]; then status=$lane_status; fi
done
exit "$status"
