#!/usr/bin/env bash
# Checks the monitoring assets in deploy/:
#   - deploy/prometheus/hubfed-alerts.yaml passes `promtool check rules` and its unit tests
#     (deploy/prometheus/hubfed-alerts.test.yaml, `promtool test rules`);
#   - deploy/grafana/hubfed.json is valid JSON and every panel query parses as PromQL;
#   - every metric the rules and the dashboard use is documented in docs/metrics.md and
#     defined by the controller (crates/hubfed-controller/src/metrics.rs).
#
#   hack/check-monitoring.sh
#
# Needs promtool (Debian: apt-get install --no-install-recommends prometheus) and jq.
set -euo pipefail

cd "$(dirname "$0")/.."
RULES=deploy/prometheus/hubfed-alerts.yaml
TESTS=deploy/prometheus/hubfed-alerts.test.yaml
DASHBOARD=deploy/grafana/hubfed.json
METRICS_DOC=docs/metrics.md
METRICS_SRC=crates/hubfed-controller/src/metrics.rs

for tool in promtool jq; do
  command -v "$tool" >/dev/null || {
    echo "$tool is needed (Debian: apt-get install --no-install-recommends prometheus jq)" >&2
    exit 1
  }
done

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

promtool check rules "$RULES"
promtool test rules "$TESTS"

# The dashboard: valid JSON, unique panel ids, and each query a valid PromQL expression once
# Grafana's variables are replaced (checked by promtool as recording rules).
jq -e '.panels | length > 0' "$DASHBOARD" >/dev/null
dupes=$(jq -r '[.panels[].id] | group_by(.) | map(select(length > 1) | .[0]) | .[]' "$DASHBOARD")
[ -z "$dupes" ] || { echo "$DASHBOARD: duplicate panel ids: $dupes" >&2; exit 1; }
{
  echo "groups:"
  echo "  - name: dashboard-queries"
  echo "    rules:"
  # JSON strings are valid YAML scalars.
  jq -r '.panels[].targets[]?.expr | tojson' "$DASHBOARD" |
    sed -e 's/\$__rate_interval/5m/g' -e 's/\$[a-z_]*/.*/g' |
    awk '{ printf "      - record: dashboard:query_%d\n        expr: %s\n", NR, $0 }'
} >"$W/dashboard-rules.yaml"
queries=$(jq '[.panels[].targets[]?.expr] | length' "$DASHBOARD")
promtool check rules "$W/dashboard-rules.yaml" >/dev/null || {
  promtool check rules "$W/dashboard-rules.yaml" >&2
  exit 1
}
echo "$DASHBOARD: valid JSON, $queries queries parse"

# Metric names used by rules and dashboard (histogram suffixes stripped).
used=$( { cat "$RULES"; jq -r '.panels[].targets[]?.expr' "$DASHBOARD"; } |
  grep -oE '\b(hubfed_[a-z_]+|kubefedcluster_state|cluster_health_status_duration_seconds|reconcile_federated_resources_duration_seconds|dispatch_operation_duration_seconds|controller_runtime_[a-z_]+|process_[a-z_]+)\b' |
  sed -E 's/_(bucket|count|sum)$//' | sort -u)
missing=()
for metric in $used; do
  grep -q "\`$metric\`" "$METRICS_DOC" || missing+=("$metric (not in $METRICS_DOC)")
  case $metric in
    process_*) ;; # the process collector's
    *) if [ -f "$METRICS_SRC" ] && ! grep -q "\"$metric\"" "$METRICS_SRC"; then
         missing+=("$metric (not defined in $METRICS_SRC)")
       fi ;;
  esac
done
if [ ${#missing[@]} -gt 0 ]; then
  printf 'unknown metric: %s\n' "${missing[@]}" >&2
  exit 1
fi
echo "metrics used by rules and dashboard: $(wc -w <<<"$used"), all documented and defined"
