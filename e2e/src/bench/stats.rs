//! Latency summaries.

use std::time::Duration;

/// Percentiles of a set of durations, in milliseconds.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

/// Nearest-rank percentile `p` (0–100) of sorted `values`.
fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    // Nearest rank: the smallest value with at least p % of the values at or below it.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

impl Percentiles {
    pub fn of(durations: &[Duration]) -> Self {
        let mut ms: Vec<f64> = durations.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let mean = if ms.is_empty() {
            0.0
        } else {
            ms.iter().sum::<f64>() / ms.len() as f64
        };
        Self {
            count: ms.len(),
            p50_ms: nearest_rank(&ms, 50.0),
            p90_ms: nearest_rank(&ms, 90.0),
            p99_ms: nearest_rank(&ms, 99.0),
            max_ms: ms.last().copied().unwrap_or(0.0),
            mean_ms: mean,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let p = Percentiles::of(&d);
        assert_eq!(
            (p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms),
            (50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(Percentiles::of(&[]).count, 0);
        let one = Percentiles::of(&[Duration::from_millis(7)]);
        assert_eq!((one.p50_ms, one.p99_ms), (7.0, 7.0));
    }
}
