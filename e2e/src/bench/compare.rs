//! `hubfed-bench compare HUBFED/result.json KUBEFED/result.json [--output PREFIX]`: two runs
//! side by side (`make bench-kubefed`), with issue 15's ratios. Writes `PREFIX.md` and
//! `PREFIX.json` when `--output` is given, and prints the table. Reported, never asserted.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::{Value, json};

use super::report::{
    TARGET_BURST_SHARE_OF_KUBEFED, TARGET_COLD_START_FACTOR_OVER_KUBEFED, TARGET_LIGHT_P50_MS,
    TARGET_LIGHT_P99_MS, TARGET_LIGHT_RATE,
};

pub fn main(args: Vec<String>) -> anyhow::Result<()> {
    let mut files = Vec::new();
    let mut output = None;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--output" => output = Some(PathBuf::from(it.next().context("--output PREFIX")?)),
            "-h" | "--help" => {
                println!(
                    "hubfed-bench compare HUBFED/result.json KUBEFED/result.json [--output PREFIX]"
                );
                return Ok(());
            }
            _ => files.push(PathBuf::from(arg)),
        }
    }
    anyhow::ensure!(
        files.len() == 2,
        "usage: hubfed-bench compare HUBFED/result.json KUBEFED/result.json [--output PREFIX]"
    );
    let read = |path: &PathBuf| -> anyhow::Result<Value> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    };
    let (a, b) = (read(&files[0])?, read(&files[1])?);
    let (markdown, document) = side_by_side(&a, &b);
    if let Some(prefix) = output {
        if let Some(dir) = prefix.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(prefix.with_extension("md"), &markdown)?;
        std::fs::write(
            prefix.with_extension("json"),
            serde_json::to_string_pretty(&document)? + "\n",
        )?;
    }
    println!("{markdown}");
    Ok(())
}

/// Propagation percentiles (`p50_ms`, `p99_ms`, ...) of the latency phase at `rate`.
fn latency(result: &Value, rate: f64, field: &str) -> Option<f64> {
    result["latencies"]
        .as_array()?
        .iter()
        .find(|l| l["rate"].as_f64() == Some(rate))?["propagation"][field]
        .as_f64()
}

fn number(result: &Value, pointer: &str) -> Option<f64> {
    result.pointer(pointer).and_then(Value::as_f64)
}

/// One compared figure.
struct Row {
    name: &'static str,
    unit: &'static str,
    a: Option<f64>,
    b: Option<f64>,
    /// The target, when the issue sets one.
    goal: String,
    met: Option<bool>,
}

fn rows(a: &Value, b: &Value) -> Vec<Row> {
    let lat = |r: &Value, rate, f| latency(r, rate, f);
    let mib = |r: &Value, p: &str| number(r, p).map(|v| v / 1048576.0);
    let kib = |r: &Value, p: &str| number(r, p).map(|v| v / 1024.0);
    let mut rows = vec![
        Row {
            name: "propagation p50 at 5 updates/s",
            unit: "ms",
            a: lat(a, TARGET_LIGHT_RATE, "p50_ms"),
            b: lat(b, TARGET_LIGHT_RATE, "p50_ms"),
            goal: format!("hubfed ≤ {TARGET_LIGHT_P50_MS} ms"),
            met: lat(a, TARGET_LIGHT_RATE, "p50_ms").map(|v| v <= TARGET_LIGHT_P50_MS),
        },
        Row {
            name: "propagation p99 at 5 updates/s",
            unit: "ms",
            a: lat(a, TARGET_LIGHT_RATE, "p99_ms"),
            b: lat(b, TARGET_LIGHT_RATE, "p99_ms"),
            goal: format!("hubfed ≤ {TARGET_LIGHT_P99_MS} ms"),
            met: lat(a, TARGET_LIGHT_RATE, "p99_ms").map(|v| v <= TARGET_LIGHT_P99_MS),
        },
        Row {
            name: "propagation p50 at 20 updates/s",
            unit: "ms",
            a: lat(a, 20.0, "p50_ms"),
            b: lat(b, 20.0, "p50_ms"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "propagation p99 at 20 updates/s",
            unit: "ms",
            a: lat(a, 20.0, "p99_ms"),
            b: lat(b, 20.0, "p99_ms"),
            goal: String::new(),
            met: None,
        },
    ];
    let (burst_a, burst_b) = (lat(a, 100.0, "p99_ms"), lat(b, 100.0, "p99_ms"));
    rows.push(Row {
        name: "propagation p99 at 100 updates/s",
        unit: "ms",
        a: burst_a,
        b: burst_b,
        goal: "hubfed ≤ 1/5 of KubeFed".to_owned(),
        met: burst_a
            .zip(burst_b)
            .map(|(x, y)| x <= y * TARGET_BURST_SHARE_OF_KUBEFED),
    });
    let (cold_a, cold_b) = (
        number(a, "/cold_start/objects_per_second"),
        number(b, "/cold_start/objects_per_second"),
    );
    rows.extend([
        Row {
            name: "cold start: member objects/s",
            unit: "/s",
            a: cold_a,
            b: cold_b,
            goal: format!("hubfed ≥ {TARGET_COLD_START_FACTOR_OVER_KUBEFED}× KubeFed"),
            met: cold_a
                .zip(cold_b)
                .map(|(x, y)| x >= y * TARGET_COLD_START_FACTOR_OVER_KUBEFED),
        },
        Row {
            name: "cold start: all member objects",
            unit: "s",
            a: number(a, "/cold_start/seconds"),
            b: number(b, "/cold_start/seconds"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "cold start: first member object",
            unit: "s",
            a: number(a, "/cold_start/first_object_seconds"),
            b: number(b, "/cold_start/first_object_seconds"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "controller CPU in the cold start",
            unit: "CPU-s",
            a: number(a, "/resources/cold_start_cpu_seconds"),
            b: number(b, "/resources/cold_start_cpu_seconds"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "controller RSS without objects",
            unit: "MiB",
            a: mib(a, "/setup/baseline_rss_bytes"),
            b: mib(b, "/setup/baseline_rss_bytes"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "controller RSS at rest",
            unit: "MiB",
            a: mib(a, "/resources/rss_at_rest_bytes"),
            b: mib(b, "/resources/rss_at_rest_bytes"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "controller RSS per object×cluster pair",
            unit: "KiB",
            a: kib(a, "/resources/bytes_per_pair"),
            b: kib(b, "/resources/bytes_per_pair"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "controller peak RSS",
            unit: "MiB",
            a: mib(a, "/resources/peak_rss_bytes"),
            b: mib(b, "/resources/peak_rss_bytes"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "controller cores at rest",
            unit: "cores",
            a: number(a, "/resources/cores_at_rest"),
            b: number(b, "/resources/cores_at_rest"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "member changes at rest (member watches)",
            unit: "",
            a: number(a, "/idle/member_watch_events"),
            b: number(b, "/idle/member_watch_events"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "hub objects changed at rest",
            unit: "",
            a: number(a, "/idle/hub_objects_changed"),
            b: number(b, "/idle/hub_objects_changed"),
            goal: String::new(),
            met: None,
        },
    ]);
    rows
}

fn figure(value: Option<f64>, unit: &str) -> String {
    match value {
        None => "–".to_owned(),
        Some(v) if v.abs() >= 100.0 || v == v.trunc() => format!("{v:.0} {unit}"),
        Some(v) if v.abs() >= 1.0 => format!("{v:.1} {unit}"),
        Some(v) => format!("{v:.3} {unit}"),
    }
    .trim_end()
    .to_owned()
}

fn describe(result: &Value) -> String {
    let p = &result["parameters"];
    format!(
        "{} at {} ({}), {} members × {} objects, {}{}",
        p["controller"].as_str().unwrap_or("hubfed"),
        result["commit"].as_str().unwrap_or("?"),
        result["date"].as_str().unwrap_or("?"),
        p["members"],
        p["objects"],
        match result.pointer("/verification") {
            Some(v) if !v.is_null() => format!(
                "final check {} of {} member objects equal to their template",
                v["matching"], v["checked"]
            ),
            _ => "no final check".to_owned(),
        },
        result["error"]
            .as_str()
            .map_or(String::new(), |e| format!("; **stopped early**: {e}"))
    )
}

/// The table and the document of two runs: `a` hubfed's, `b` KubeFed's.
fn side_by_side(a: &Value, b: &Value) -> (String, Value) {
    let rows = rows(a, b);
    let mut md = String::new();
    let _ = writeln!(md, "## hubfed beside KubeFed\n");
    let _ = writeln!(md, "- A: {}\n- B: {}\n", describe(a), describe(b));
    md.push_str(
        "| figure | A | B | A ÷ B | target | met |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    let mut figures = Vec::new();
    for row in &rows {
        let ratio = row
            .a
            .zip(row.b)
            .filter(|(_, y)| *y != 0.0)
            .map(|(x, y)| x / y);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            row.name,
            figure(row.a, row.unit),
            figure(row.b, row.unit),
            ratio.map_or("–".to_owned(), |r| format!("{r:.3}")),
            row.goal,
            match row.met {
                Some(true) => "yes",
                Some(false) => "no",
                None => "",
            }
        );
        figures.push(json!({
            "figure": row.name,
            "unit": row.unit,
            "a": row.a,
            "b": row.b,
            "a_over_b": ratio,
            "target": row.goal,
            "met": row.met,
        }));
    }
    let document = json!({
        "a": {"controller": a["parameters"]["controller"], "commit": a["commit"], "date": a["date"], "parameters": a["parameters"]},
        "b": {"controller": b["parameters"]["controller"], "commit": b["commit"], "date": b["date"], "parameters": b["parameters"]},
        "figures": figures,
    });
    (md, document)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(controller: &str, p50: f64, p99_burst: f64, cold: f64) -> Value {
        json!({
            "commit": "abc1234",
            "date": "2026-11-26 18:00 UTC",
            "parameters": {"controller": controller, "members": 3, "objects": 300},
            "latencies": [
                {"rate": 20.0, "propagation": {"p50_ms": 20.0, "p99_ms": 40.0}},
                {"rate": 5.0, "propagation": {"p50_ms": p50, "p99_ms": 25.0}},
                {"rate": 100.0, "propagation": {"p50_ms": 30.0, "p99_ms": p99_burst}},
            ],
            "cold_start": {"objects_per_second": cold, "seconds": 2.0},
            "resources": {"rss_at_rest_bytes": 1048576.0 * 40.0},
            "verification": {"matching": 900, "checked": 900},
            "error": null,
        })
    }

    #[test]
    fn ratios_and_targets() {
        let (md, doc) = side_by_side(
            &result("hubfed", 10.0, 100.0, 400.0),
            &result("kubefed", 12.0, 600.0, 30.0),
        );
        let figure = |name: &str| {
            doc["figures"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["figure"] == name)
                .unwrap()
                .clone()
        };
        let light = figure("propagation p50 at 5 updates/s");
        assert_eq!(light["a"], 10.0);
        assert_eq!(light["met"], true);
        let burst = figure("propagation p99 at 100 updates/s");
        assert!((burst["a_over_b"].as_f64().unwrap() - 1.0 / 6.0).abs() < 1e-9);
        assert_eq!(burst["met"], true);
        assert_eq!(figure("cold start: member objects/s")["met"], true);
        // Missing on both sides: no ratio, no verdict.
        let missing = figure("controller peak RSS");
        assert!(missing["a"].is_null() && missing["a_over_b"].is_null());
        assert!(md.contains("| propagation p99 at 100 updates/s | 100 ms | 600 ms | 0.167 |"));
        assert!(md.contains("final check 900 of 900"));
    }

    #[test]
    fn unmet_targets() {
        let (_, doc) = side_by_side(
            &result("hubfed", 20.0, 200.0, 100.0),
            &result("kubefed", 12.0, 600.0, 30.0),
        );
        let met: Vec<&Value> = doc["figures"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| !f["met"].is_null())
            .map(|f| &f["met"])
            .collect();
        // light p50 (20 > 15), light p99 (25 ≤ 30), burst (200 > 120), cold start (100 < 300).
        assert_eq!(
            met,
            vec![&json!(false), &json!(true), &json!(false), &json!(false)]
        );
    }
}
