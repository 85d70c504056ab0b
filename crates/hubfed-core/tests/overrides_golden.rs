//! Differential test: hubfed's overrides against KubeFed's, case by case.
//!
//! `testdata/overrides/cases.json` is the table; `hack/overrides-golden` runs KubeFed's override
//! code (GetOverrides' checks and ApplyJSONPatch on `github.com/evanphx/json-patch` v4.12.0 and
//! apimachinery's `Unstructured`) on each case and writes `golden.json`; `make generate`
//! refreshes it. Every case must give the same object, or fail in both.

use std::path::Path;

use hubfed_api::federated::ClusterOverrides;
use hubfed_core::overrides::apply_overrides;
use serde_json::{Value, json};

fn read(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/overrides")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

#[test]
fn golden_file_is_up_to_date_with_the_cases() {
    let cases = read("cases.json");
    let golden = read("golden.json");
    let inputs = |rows: &Value| -> Vec<Value> {
        rows.as_array()
            .unwrap()
            .iter()
            .map(|row| json!([row["name"], row["object"], row["overrides"]]))
            .collect()
    };
    assert!(
        inputs(&cases) == inputs(&golden),
        "testdata/overrides/golden.json was not made from cases.json: run `make generate`"
    );
}

#[test]
fn overrides_behave_exactly_like_kubefed() {
    let golden = read("golden.json");
    let rows = golden.as_array().unwrap();
    assert!(rows.len() >= 60, "only {} cases", rows.len());
    let mut mismatches = Vec::new();
    for row in rows {
        let name = row["name"].as_str().unwrap();
        let overrides: Vec<ClusterOverrides> = serde_json::from_value(
            json!([{"clusterName": "c1", "clusterOverrides": row["overrides"]}]),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut object = row["object"].clone();
        let ours = apply_overrides(&mut object, Some(&overrides), "c1").map(|_| object);
        match (&ours, row.get("result"), row.get("error")) {
            (Ok(object), Some(expected), None) if object == expected => {}
            (Err(_), None, Some(_)) => {}
            _ => mismatches.push(format!(
                "{name}:\n  kubefed: {}\n  hubfed:  {}",
                row.get("result")
                    .map_or_else(|| format!("error {}", row["error"]), Value::to_string),
                match &ours {
                    Ok(object) => object.to_string(),
                    Err(e) => format!("error {e}"),
                }
            )),
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
