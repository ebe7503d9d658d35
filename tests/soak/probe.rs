//! What the soak reads from processes it started: `/proc/<pid>/stat` and `/proc/<pid>/status`
//! of gangscaler (CPU ticks, resident and peak resident memory), and histogram series from a
//! Prometheus text page (CA's loop duration).

use serde::Serialize;

/// One reading of a process from `/proc`.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcSample {
    /// Seconds since the replay started.
    pub t_s: f64,
    /// `utime + stime` (fields 14 and 15 of `/proc/<pid>/stat`), in clock ticks.
    pub cpu_ticks: u64,
    /// `VmRSS` of `/proc/<pid>/status`, KiB.
    pub vm_rss_kb: u64,
    /// `VmHWM` (peak resident set) of `/proc/<pid>/status`, KiB.
    pub vm_hwm_kb: u64,
}

/// Reads process `pid` now; `None` once it is gone or `/proc` is not Linux's.
pub fn sample(pid: u32, t_s: f64) -> Option<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state), so field n is at index n - 3.
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |key: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some(ProcSample {
        t_s,
        cpu_ticks: utime + stime,
        vm_rss_kb: kb("VmRSS:")?,
        vm_hwm_kb: kb("VmHWM:")?,
    })
}

/// Clock ticks per second (`getconf CLK_TCK`; 100, Linux's value, if that fails).
pub fn clock_ticks() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// `_sum` and `_count` of histogram `name` over the series whose labels contain every
/// `k="v"` of `labels`, from a Prometheus text page.
pub fn histogram_sum_count(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<(f64, f64)> {
    let sum = super::harness::metric_value(text, &format!("{name}_sum"), labels)?;
    let count = super::harness::metric_value(text, &format!("{name}_count"), labels)?;
    Some((sum, count))
}
