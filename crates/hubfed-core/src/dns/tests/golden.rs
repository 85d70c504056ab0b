//! Differential test: hubfed's endpoints against KubeFed v0.6.1's own code, case by case.
//!
//! `testdata/dns/cases.json` is the table; `hack/dns-golden` runs KubeFed's
//! `getServiceDNSEndpoints` and `getIngressDNSEndpoints` on each case (its host names resolved
//! from the case's table) and writes `golden.json`; `make generate` refreshes it. A case
//! without a `difference` must give KubeFed's endpoints exactly and no problem; each
//! `difference` is one of hubfed's deliberate ones, checked against KubeFed's output.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use super::*;

fn read(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/dns")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

#[test]
fn golden_file_is_up_to_date_with_the_cases() {
    let (cases, golden) = (read("cases.json"), read("golden.json"));
    let inputs = |rows: &Value| -> Vec<Value> {
        let fields = ["name", "kind", "record", "hosts", "difference"];
        let rows = rows.as_array().unwrap().iter();
        rows.map(|row| fields.iter().map(|f| row[f].clone()).collect())
            .collect()
    };
    assert!(
        inputs(&cases) == inputs(&golden),
        "testdata/dns/golden.json was not made from cases.json: run `make generate`"
    );
}

/// hubfed's endpoints and problems for one golden row.
fn ours(row: &Value) -> (Value, Vec<DnsProblem>) {
    let hosts: BTreeMap<String, Vec<String>> =
        serde_json::from_value(row["hosts"].clone()).unwrap();
    let resolver = ResolvedHosts(hosts.into_iter().map(|(h, a)| (h, Ok(a))).collect());
    let out = match row["kind"].as_str() {
        Some("service") => service_endpoints(
            &serde_json::from_value(row["record"].clone()).unwrap(),
            &resolver,
        ),
        _ => ingress_endpoints(
            &serde_json::from_value(row["record"].clone()).unwrap(),
            &resolver,
        ),
    };
    (serde_json::to_value(&out.endpoints).unwrap(), out.problems)
}

/// KubeFed's endpoints (Go writes none as `null`).
fn theirs(row: &Value) -> Vec<Value> {
    row["endpoints"].as_array().cloned().unwrap_or_default()
}

/// KubeFed's `A` records split into `A` (IPv4) and `AAAA` (IPv6), as hubfed writes them.
fn split_ipv6(endpoints: Vec<Value>) -> Vec<Value> {
    let mut out = Vec::new();
    for endpoint in endpoints {
        if endpoint["recordType"] != "A" {
            out.push(endpoint);
            continue;
        }
        let (v6, v4): (Vec<Value>, Vec<Value>) = endpoint["targets"]
            .as_array()
            .unwrap()
            .iter()
            .cloned()
            .partition(|t| {
                matches!(
                    t.as_str().and_then(|t| t.parse::<IpAddr>().ok()),
                    Some(IpAddr::V6(_))
                )
            });
        for (record_type, targets) in [("A", v4), ("AAAA", v6)] {
            if !targets.is_empty() {
                let mut split = endpoint.clone();
                split["recordType"] = json!(record_type);
                split["targets"] = Value::Array(targets);
                out.push(split);
            }
        }
    }
    out
}

/// Whether hubfed's outcome is KubeFed's, or the case's deliberate difference from it.
fn agrees(row: &Value, endpoints: &Value, problems: &[DnsProblem]) -> bool {
    let kubefed = theirs(row);
    let only = |reason: &str| !problems.is_empty() && problems.iter().all(|p| p.reason() == reason);
    match row["difference"].as_str() {
        None => row.get("error").is_none() && problems.is_empty() && *endpoints == json!(kubefed),
        Some("no-zones") => only(REASON_NO_ZONES) && *endpoints == json!(kubefed),
        // KubeFed named the levels below global with an empty region label (`svc..domain`).
        Some("no-region") => {
            let named: Vec<Value> = kubefed
                .into_iter()
                .filter(|e| !e["dnsName"].as_str().unwrap_or_default().contains(".."))
                .collect();
            only(REASON_NO_REGION) && *endpoints == json!(named)
        }
        // KubeFed failed the whole record.
        Some("unresolved") => row.get("error").is_some() && only(REASON_HOSTNAME_NOT_RESOLVED),
        Some("ipv6") => problems.is_empty() && *endpoints == json!(split_ipv6(kubefed)),
        Some(other) => panic!("unknown difference {other:?}"),
    }
}

#[test]
fn endpoints_are_kubefeds_or_a_listed_difference() {
    let golden = read("golden.json");
    let rows = golden.as_array().unwrap();
    assert!(rows.len() >= 40, "only {} cases", rows.len());
    let kubefeds_own = rows
        .iter()
        .filter(|row| row["name"].as_str().unwrap().starts_with("kubefed "))
        .count();
    assert_eq!(kubefeds_own, 17, "KubeFed's 11 service and 6 ingress cases");
    let mut mismatches = Vec::new();
    for row in rows {
        let (endpoints, problems) = ours(row);
        if !agrees(row, &endpoints, &problems) {
            mismatches.push(format!(
                "{} ({}):\n  kubefed: {} {}\n  hubfed:  {endpoints} {problems:?}",
                row["name"], row["difference"], row["endpoints"], row["error"]
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} cases differ from KubeFed:\n{}",
        mismatches.len(),
        rows.len(),
        mismatches.join("\n")
    );
}
