//! `hubfed-bench compare A/result.json B/result.json [--output PREFIX]`: two runs side by
//! side. hubfed's beside KubeFed's (`make bench-kubefed`), with issue 15's ratios; or a run
//! with one member slow (`--slow-member-ms`) beside an all-healthy run of the same size, with
//! target 4's (the healthy members within 1.5× of all healthy). Writes `PREFIX.md` and
//! `PREFIX.json` when `--output` is given, and prints the table. Reported, never asserted.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::{Value, json};

use super::report::{
    TARGET_BURST_SHARE_OF_KUBEFED, TARGET_COLD_START_FACTOR_OVER_KUBEFED, TARGET_LIGHT_P50_MS,
    TARGET_LIGHT_P99_MS, TARGET_LIGHT_RATE, TARGET_SLOW_MEMBER_P99_FACTOR,
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
                    "hubfed-bench compare HUBFED/result.json KUBEFED/result.json [--output PREFIX]\n       hubfed-bench compare SLOW/result.json HEALTHY/result.json [--output PREFIX]"
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
    name: String,
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
            name: "propagation p50 at 5 updates/s".into(),
            unit: "ms",
            a: lat(a, TARGET_LIGHT_RATE, "p50_ms"),
            b: lat(b, TARGET_LIGHT_RATE, "p50_ms"),
            goal: format!("hubfed ≤ {TARGET_LIGHT_P50_MS} ms"),
            met: lat(a, TARGET_LIGHT_RATE, "p50_ms").map(|v| v <= TARGET_LIGHT_P50_MS),
        },
        Row {
            name: "propagation p99 at 5 updates/s".into(),
            unit: "ms",
            a: lat(a, TARGET_LIGHT_RATE, "p99_ms"),
            b: lat(b, TARGET_LIGHT_RATE, "p99_ms"),
            goal: format!("hubfed ≤ {TARGET_LIGHT_P99_MS} ms"),
            met: lat(a, TARGET_LIGHT_RATE, "p99_ms").map(|v| v <= TARGET_LIGHT_P99_MS),
        },
        Row {
            name: "propagation p50 at 20 updates/s".into(),
            unit: "ms",
            a: lat(a, 20.0, "p50_ms"),
            b: lat(b, 20.0, "p50_ms"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "propagation p99 at 20 updates/s".into(),
            unit: "ms",
            a: lat(a, 20.0, "p99_ms"),
            b: lat(b, 20.0, "p99_ms"),
            goal: String::new(),
            met: None,
        },
    ];
    let (burst_a, burst_b) = (lat(a, 100.0, "p99_ms"), lat(b, 100.0, "p99_ms"));
    rows.push(Row {
        name: "propagation p99 at 100 updates/s".into(),
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
            name: "cold start: member objects/s".into(),
            unit: "/s",
            a: cold_a,
            b: cold_b,
            goal: format!("hubfed ≥ {TARGET_COLD_START_FACTOR_OVER_KUBEFED}× KubeFed"),
            met: cold_a
                .zip(cold_b)
                .map(|(x, y)| x >= y * TARGET_COLD_START_FACTOR_OVER_KUBEFED),
        },
        Row {
            name: "cold start: all member objects".into(),
            unit: "s",
            a: number(a, "/cold_start/seconds"),
            b: number(b, "/cold_start/seconds"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "cold start: first member object".into(),
            unit: "s",
            a: number(a, "/cold_start/first_object_seconds"),
            b: number(b, "/cold_start/first_object_seconds"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "controller CPU in the cold start".into(),
            unit: "CPU-s",
            a: number(a, "/resources/cold_start_cpu_seconds"),
            b: number(b, "/resources/cold_start_cpu_seconds"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "controller RSS without objects".into(),
            unit: "MiB",
            a: mib(a, "/setup/baseline_rss_bytes"),
            b: mib(b, "/setup/baseline_rss_bytes"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "controller RSS at rest".into(),
            unit: "MiB",
            a: mib(a, "/resources/rss_at_rest_bytes"),
            b: mib(b, "/resources/rss_at_rest_bytes"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "controller RSS per object×cluster pair".into(),
            unit: "KiB",
            a: kib(a, "/resources/bytes_per_pair"),
            b: kib(b, "/resources/bytes_per_pair"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "controller peak RSS".into(),
            unit: "MiB",
            a: mib(a, "/resources/peak_rss_bytes"),
            b: mib(b, "/resources/peak_rss_bytes"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "controller cores at rest".into(),
            unit: "cores",
            a: number(a, "/resources/cores_at_rest"),
            b: number(b, "/resources/cores_at_rest"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "member changes at rest (member watches)".into(),
            unit: "",
            a: number(a, "/idle/member_watch_events"),
            b: number(b, "/idle/member_watch_events"),
            goal: String::new(),
            met: None,
        },
        Row {
            name: "hub objects changed at rest".into(),
            unit: "",
            a: number(a, "/idle/hub_objects_changed"),
            b: number(b, "/idle/hub_objects_changed"),
            goal: String::new(),
            met: None,
        },
    ]);
    rows
}

/// A `--slow-member-ms` run (`a`) beside an all-healthy run of the same size (`b`): the
/// healthy members' cold start and p99 per rate against the all-healthy ones, each at most
/// [`TARGET_SLOW_MEMBER_P99_FACTOR`] times (issue 15, target 4); the slow member's own
/// figures beside them, unjudged.
fn slow_member_rows(a: &Value, b: &Value) -> Vec<Row> {
    let slow = &a["slow_member"];
    let within = |x: Option<f64>, y: Option<f64>| {
        x.zip(y)
            .map(|(x, y)| x <= y * TARGET_SLOW_MEMBER_P99_FACTOR)
    };
    let goal = format!("A ≤ {TARGET_SLOW_MEMBER_P99_FACTOR}× B");
    let member = slow["member"].as_str().unwrap_or("the slow member");
    let cold_a = slow["cold_start_healthy_seconds"].as_f64();
    let cold_b = number(b, "/cold_start/seconds");
    let mut rows = vec![
        Row {
            name: "cold start: every healthy member's objects".into(),
            unit: "s",
            a: cold_a,
            b: cold_b,
            goal: goal.clone(),
            met: within(cold_a, cold_b),
        },
        Row {
            name: format!("cold start: {member}'s objects too"),
            unit: "s",
            a: slow["cold_start_slow_seconds"].as_f64(),
            b: cold_b,
            goal: String::new(),
            met: None,
        },
    ];
    for phase in slow["latencies"].as_array().into_iter().flatten() {
        let Some(rate) = phase["rate"].as_f64() else {
            continue;
        };
        let (healthy, all_healthy) = (
            phase["healthy"]["p99_ms"].as_f64(),
            latency(b, rate, "p99_ms"),
        );
        rows.push(Row {
            name: format!("propagation p99 to the healthy members at {rate} updates/s"),
            unit: "ms",
            a: healthy,
            b: all_healthy,
            goal: goal.clone(),
            met: within(healthy, all_healthy),
        });
        rows.push(Row {
            name: format!("propagation p99 to {member} at {rate} updates/s"),
            unit: "ms",
            a: phase["slow"]["p99_ms"].as_f64(),
            b: all_healthy,
            goal: String::new(),
            met: None,
        });
    }
    rows
}

/// Whether `a` is a `--slow-member-ms` run and `b` is not.
fn slow_beside_healthy(a: &Value, b: &Value) -> bool {
    let slow = |r: &Value| r.get("slow_member").is_some_and(|s| !s.is_null());
    slow(a) && !slow(b)
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

/// The table and the document of two runs: `a` hubfed's, `b` KubeFed's — or `a` a run with
/// one member slow, `b` an all-healthy one ([`slow_member_rows`]).
fn side_by_side(a: &Value, b: &Value) -> (String, Value) {
    let slow = slow_beside_healthy(a, b);
    let rows = if slow {
        slow_member_rows(a, b)
    } else {
        rows(a, b)
    };
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## {}\n",
        if slow {
            "One member slow (A) beside all healthy (B)"
        } else {
            "hubfed beside KubeFed"
        }
    );
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
        "comparison": if slow { "slow member beside all healthy" } else { "hubfed beside KubeFed" },
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

    #[test]
    fn a_slow_member_run_beside_an_all_healthy_one() {
        let mut slow = result("hubfed", 10.0, 900.0, 400.0);
        slow["slow_member"] = json!({
            "member": "member10",
            "delay_ms": 500,
            "cold_start_healthy_seconds": 2.8,
            "cold_start_slow_seconds": 9.0,
            "latencies": [
                {"rate": 20.0, "healthy": {"p99_ms": 70.0}, "slow": {"p99_ms": 700.0}},
                {"rate": 5.0, "healthy": {"p99_ms": 30.0}, "slow": {"p99_ms": 600.0}},
                {"rate": 100.0, "healthy": {"p99_ms": 800.0}, "slow": {"p99_ms": 5000.0}},
            ],
        });
        let healthy = result("hubfed", 10.0, 1000.0, 400.0);
        let (md, doc) = side_by_side(&slow, &healthy);
        assert_eq!(doc["comparison"], "slow member beside all healthy");
        assert!(md.starts_with("## One member slow (A) beside all healthy (B)"));
        let judged: Vec<(String, bool)> = doc["figures"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| Some((f["figure"].as_str()?.to_owned(), f["met"].as_bool()?)))
            .collect();
        // Healthy cold start 2.8 s ≤ 1.5 × 2.0; 20/s 70 > 1.5 × 40; 5/s 30 ≤ 37.5; 100/s 800
        // ≤ 1,500. The slow member's own figures are not judged.
        assert_eq!(
            judged,
            vec![
                (
                    "cold start: every healthy member's objects".to_owned(),
                    true
                ),
                (
                    "propagation p99 to the healthy members at 20 updates/s".to_owned(),
                    false
                ),
                (
                    "propagation p99 to the healthy members at 5 updates/s".to_owned(),
                    true
                ),
                (
                    "propagation p99 to the healthy members at 100 updates/s".to_owned(),
                    true
                ),
            ]
        );
        assert!(
            md.contains("| propagation p99 to member10 at 100 updates/s | 5000 ms | 1000 ms |")
        );
        // Two hubfed runs without a slow member are compared as hubfed and KubeFed.
        let (md, _) = side_by_side(&healthy, &healthy);
        assert!(md.starts_with("## hubfed beside KubeFed"));
    }
}
