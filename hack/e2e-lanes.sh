#!/usr/bin/env bash
# Runs the end-to-end test binaries (built already: `cargo test -p hubfed-e2e --no-run`) in
# lanes side by side, because they mostly wait — on grace periods, outages, pods, staged
# rollouts: one binary alone keeps the 2 cores 20-47 % busy.
#
#   hack/e2e-lanes.sh [--image "NAMES"] "LANE" ["LANE" ...]
#
# Each LANE names test binaries (e2e/tests/NAME.rs) that run one after another beside the
# other lanes; every binary not named, with the crate's lib and bin tests, runs in the main
# lane, in the foreground. The other lanes' output follows once all are done, lane by lane.
# An empty LANE is skipped; no LANE at all runs everything in one sequence.
#
# --image NAMES: the container image is built beside the lanes (hack/build-image.sh, a
# release build: CPU only), at idle CPU priority (SCHED_IDLE, or nice 19 without chrt), so it
# takes only the CPU the tests leave; once built it is checked (hack/test-image.sh) and the
# test binaries NAMES, which need it, run in that lane. A build on its own takes ~11 min on 2
# cores; beside the lanes most of it fits in their idle time.
#
# The exit status is the first failing lane's.
set -uo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}

image_tests=
if [ "${1:-}" = "--image" ]; then
  [ $# -ge 2 ] || { echo "e2e-lanes: --image needs a list of test binaries (may be empty)" >&2; exit 2; }
  image_tests=$2
  with_image=1
  shift 2
fi

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
for name in $image_tests; do
  [ -f "e2e/tests/$name.rs" ] || { echo "e2e-lanes: no test binary e2e/tests/$name.rs" >&2; exit 2; }
  [ -z "${lane_of[$name]:-}" ] || { echo "e2e-lanes: $name is in a lane and in --image" >&2; exit 2; }
  lane_of[$name]=image
done

main=(--lib --bins)
declare -a args=()
image_args=
for file in e2e/tests/*.rs; do
  name=$(basename "$file" .rs)
  case ${lane_of[$name]:-} in
    "") main+=(--test "$name") ;;
    image) image_args+=" --test $name" ;;
    *) args[${lane_of[$name]}]+=" --test $name" ;;
  esac
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

if [ -n "${with_image:-}" ]; then
  if command -v chrt >/dev/null && chrt --idle 0 true 2>/dev/null; then
    idle=(chrt --idle 0)
  else
    idle=(nice -n 19)
  fi
  (
    start=$(date +%s)
    "${idle[@]}" hack/build-image.sh || exit $?
    echo "image: built beside the tests in $(( $(date +%s) - start ))s (${idle[*]})"
    hack/test-image.sh || exit $?
    if [ -n "$image_args" ]; then
      # shellcheck disable=SC2086 # the --test arguments are split on purpose
      "$CARGO" test -p hubfed-e2e --no-fail-fast $image_args -- --test-threads=4
    fi
  ) > "$tmp/lane-image.log" 2>&1 &
  pids+=($!)
  lanes+=("the image (hack/build-image.sh, hack/test-image.sh)${image_tests:+, then $image_tests}")
  image_index=$(( ${#lanes[@]} - 1 ))
fi

status=0
"$CARGO" test -p hubfed-e2e --no-fail-fast "${main[@]}" -- --test-threads=4 || status=$?
for index in "${!pids[@]}"; do
  lane_status=0
  wait "${pids[$index]}" || lane_status=$?
  echo "--- e2e lane beside: ${lanes[$index]} (exit $lane_status)"
  if [ "$index" = "${image_index:-}" ]; then
    cat "$tmp/lane-image.log"
  else
    cat "$tmp/lane-$index.log"
  fi
  if [ "$status" -eq 0 ] && [ "$lane_status" -ne 0 ]; then status=$lane_status; fi
done
exit "$status"
