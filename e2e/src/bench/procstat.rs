//! CPU and memory of processes and of the machine, from `/proc`.

use std::collections::BTreeMap;
use std::time::Instant;

/// Clock ticks per second of `/proc/<pid>/stat` times (USER_HZ; 100 on every Linux we run).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// CPU seconds (user + system) a process has used, `None` when it is gone.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may contain spaces: state is field 3, utime 14.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

/// A `/proc/<pid>/status` field in bytes (`VmRSS`, `VmHWM`).
pub fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    })
}

/// Busy and total CPU seconds of the whole machine since boot (`/proc/stat`).
fn machine_cpu() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let values: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total: f64 = values.iter().take(8).sum();
    let idle = values.get(3).copied().unwrap_or(0.0) + values.get(4).copied().unwrap_or(0.0);
    Some(((total - idle) / clock_ticks(), total / clock_ticks()))
}

/// The CPU group of everything outside the benchmark's processes.
pub const OTHER: &str = "other processes";

/// Named groups of processes whose CPU is measured together.
#[derive(Clone, Debug, Default)]
pub struct Groups(pub BTreeMap<&'static str, Vec<u32>>);

/// CPU counters at one instant.
#[derive(Clone, Debug)]
pub struct CpuSnapshot {
    at: Instant,
    groups: BTreeMap<&'static str, f64>,
    machine_busy: f64,
    machine_total: f64,
}

impl CpuSnapshot {
    pub fn take(groups: &Groups) -> Self {
        let (machine_busy, machine_total) = machine_cpu().unwrap_or_default();
        Self {
            at: Instant::now(),
            groups: groups
                .0
                .iter()
                .map(|(name, pids)| (*name, pids.iter().filter_map(|p| cpu_seconds(*p)).sum()))
                .collect(),
            machine_busy,
            machine_total,
        }
    }
}

/// CPU used between two snapshots.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CpuUsage {
    pub wall_seconds: f64,
    /// Cores the machine has.
    pub cores: usize,
    /// Share of all cores busy, 0–1.
    pub machine_busy: f64,
    /// CPU seconds per group (controller, member API servers, hub, etcd, bench).
    pub cpu_seconds: BTreeMap<&'static str, f64>,
}

impl CpuUsage {
    pub fn between(before: &CpuSnapshot, after: &CpuSnapshot) -> Self {
        let total = after.machine_total - before.machine_total;
        let busy = after.machine_busy - before.machine_busy;
        let mut cpu_seconds: BTreeMap<&'static str, f64> = after
            .groups
            .iter()
            .map(|(name, end)| {
                let start = before.groups.get(name).copied().unwrap_or(0.0);
                (*name, (end - start).max(0.0))
            })
            .collect();
        // Whatever else ran on the machine (other work on a shared machine, the kernel).
        let ours: f64 = cpu_seconds.values().sum();
        cpu_seconds.insert(OTHER, (busy - ours).max(0.0));
        Self {
            wall_seconds: after.at.duration_since(before.at).as_secs_f64(),
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            machine_busy: if total > 0.0 { busy / total } else { 0.0 },
            cpu_seconds,
        }
    }

    /// Cores a group used on average.
    pub fn cores_used(&self, group: &str) -> f64 {
        if self.wall_seconds <= 0.0 {
            return 0.0;
        }
        self.cpu_seconds.get(group).copied().unwrap_or(0.0) / self.wall_seconds
    }

    /// What limited the phase: `machine 99 % busy of 2 cores: member apiservers 57 %, hub
    /// apiserver 25 %, ...` — each group's share of the machine's capacity, the largest first
    /// (groups under 1 % left out).
    pub fn limit(&self) -> String {
        let capacity = self.wall_seconds * self.cores.max(1) as f64;
        let mut shares: Vec<(&str, f64)> = self
            .cpu_seconds
            .iter()
            .map(|(group, seconds)| {
                let share = if capacity > 0.0 {
                    seconds / capacity
                } else {
                    0.0
                };
                (*group, share)
            })
            .filter(|(_, share)| *share >= 0.01)
            .collect();
        shares.sort_by(|a, b| b.1.total_cmp(&a.1));
        let groups: Vec<String> = shares
            .iter()
            .map(|(group, share)| format!("{group} {:.0} %", share * 100.0))
            .collect();
        format!(
            "machine {:.0} % busy of {} cores{}{}",
            self.machine_busy * 100.0,
            self.cores,
            if groups.is_empty() { "" } else { ": " },
            groups.join(", ")
        )
    }

    /// `controller 0.42, member apiservers 1.10, ...` in cores.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .cpu_seconds
            .keys()
            .map(|g| format!("{g} {:.2}", self.cores_used(g)))
            .collect();
        format!(
            "machine {:.0}% busy of {} cores; cores used: {}",
            self.machine_busy * 100.0,
            self.cores,
            parts.join(", ")
        )
    }
}

/// The machine, for the report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
}

impl Machine {
    pub fn describe() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        Self {
            cpu_model,
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            memory_gib: memory_kib / 1024.0 / 1024.0,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|k| k.trim().to_owned())
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_names_the_groups_by_their_share_of_the_machine() {
        let usage = CpuUsage {
            wall_seconds: 10.0,
            cores: 2,
            machine_busy: 0.99,
            cpu_seconds: BTreeMap::from([
                ("controller", 1.4),
                ("etcd", 1.6),
                ("hub apiserver", 5.0),
                ("member apiservers", 11.4),
                ("other processes", 0.1),
            ]),
        };
        assert_eq!(
            usage.limit(),
            "machine 99 % busy of 2 cores: member apiservers 57 %, hub apiserver 25 %, etcd 8 %, controller 7 %"
        );
        let idle = CpuUsage {
            wall_seconds: 0.0,
            cores: 2,
            machine_busy: 0.0,
            cpu_seconds: BTreeMap::new(),
        };
        assert_eq!(idle.limit(), "machine 0 % busy of 2 cores");
    }
}
