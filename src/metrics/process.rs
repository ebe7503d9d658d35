//! The standard Prometheus process metrics (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`,
//! `process_max_fds`, `process_start_time_seconds`), read from `/proc/self` at each scrape.
//!
//! prometheus-client has no process collector, and the one crate written for it
//! (kubert-prometheus-process) targets an older prometheus-client and calls libc through
//! `unsafe`; this file reads the few `/proc` files it needs itself. On a system without
//! `/proc` (not Linux) the metrics are simply absent; a metric whose file cannot be read or
//! parsed is left out of that scrape.

use std::fmt;
use std::path::Path;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// Clock ticks per second in `/proc/<pid>/stat` (the kernel's `USER_HZ`). It is part of the
/// kernel's user-space ABI and 100 on every architecture Linux supports today; reading it with
/// `sysconf(_SC_CLK_TCK)` would need `unsafe` (forbidden here) or a new dependency for one
/// constant.
const USER_HZ: f64 = 100.0;

/// The process metrics, read at each scrape.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessCollector;

/// One reading of the process's resources; `None` where the source could not be read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident set size, in bytes.
    pub resident_bytes: Option<u64>,
    /// Virtual memory size, in bytes.
    pub virtual_bytes: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// The soft limit on open file descriptors (`None` when unlimited).
    pub max_fds: Option<u64>,
    /// Process start time, in seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
}

impl Sample {
    /// Reads the current process from `/proc`.
    pub fn read() -> Self {
        Self::read_from(Path::new("/proc"))
    }

    /// Reads the current process from a procfs mounted at `proc` (tests pass a fixture tree).
    pub fn read_from(proc: &Path) -> Self {
        let me = proc.join("self");
        let text = |p: &Path| std::fs::read_to_string(p).ok();
        let stat = text(&me.join("stat")).and_then(|s| Stat::parse(&s));
        let boot = text(&proc.join("stat")).and_then(|s| boot_time(&s));
        Self {
            cpu_seconds: stat.map(|s| (s.utime + s.stime) as f64 / USER_HZ),
            resident_bytes: text(&me.join("status")).and_then(|s| status_kib(&s, "VmRSS:")),
            virtual_bytes: stat.map(|s| s.vsize),
            open_fds: std::fs::read_dir(me.join("fd"))
                .ok()
                .map(|d| d.count() as u64),
            max_fds: text(&me.join("limits")).and_then(|s| soft_limit(&s, "Max open files")),
            start_time_seconds: stat
                .zip(boot)
                .map(|(s, boot)| boot as f64 + s.starttime as f64 / USER_HZ),
        }
    }
}

/// The fields of `/proc/self/stat` used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    /// Field 14, clock ticks in user mode.
    utime: u64,
    /// Field 15, clock ticks in kernel mode.
    stime: u64,
    /// Field 22, clock ticks from boot to the process's start.
    starttime: u64,
    /// Field 23, virtual memory size in bytes.
    vsize: u64,
}

impl Stat {
    fn parse(text: &str) -> Option<Self> {
        // Field 2 is the command name in parentheses, which may itself hold spaces and
        // parentheses: the fields after it start after the last ')'.
        let rest = &text[text.rfind(')')? + 1..];
        // `rest` starts at field 3 (the state), so field N is at index N - 3.
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(Self {
            utime: field(14)?,
            stime: field(15)?,
            starttime: field(22)?,
            vsize: field(23)?,
        })
    }
}

/// `btime` of `/proc/stat`: the boot time in seconds since the Unix epoch.
fn boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// A `kB` value of `/proc/self/status` (`VmRSS:   1234 kB`), in bytes.
fn status_kib(text: &str, key: &str) -> Option<u64> {
    let value = text.lines().find_map(|l| l.strip_prefix(key))?;
    let kib: u64 = value.split_whitespace().next()?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The soft limit of a `/proc/self/limits` row (`Max open files  1024  524288  files`);
/// `None` for `unlimited`.
fn soft_limit(text: &str, row: &str) -> Option<u64> {
    let value = text.lines().find_map(|l| l.strip_prefix(row))?;
    value.split_whitespace().next()?.parse().ok()
}

fn gauge<N: prometheus_client::encoding::EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: Option<N>,
) -> fmt::Result {
    let Some(value) = value else {
        return Ok(());
    };
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, unit, metric.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let s = Sample::read();
        if let Some(cpu) = s.cpu_seconds {
            let metric = ConstCounter::new(cpu);
            metric.encode(encoder.encode_descriptor(
                "process_cpu",
                "CPU time (user plus system) the process has used",
                Some(&Unit::Seconds),
                metric.metric_type(),
            )?)?;
        }
        let bytes = Some(&Unit::Bytes);
        gauge(
            &mut encoder,
            "process_resident_memory",
            "memory of the process resident in RAM",
            bytes,
            s.resident_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory",
            "virtual address space of the process",
            bytes,
            s.virtual_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_open_fds",
            "file descriptors the process has open",
            None,
            s.open_fds,
        )?;
        gauge(
            &mut encoder,
            "process_max_fds",
            "soft limit on the file descriptors the process may open",
            None,
            s.max_fds,
        )?;
        gauge(
            &mut encoder,
            "process_start_time",
            "when the process started, as Unix time",
            Some(&Unit::Seconds),
            s.start_time_seconds,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/proc/self/stat` line whose command name holds spaces and parentheses.
    const STAT: &str = "4242 (gang (scaler) x) S 1 4242 4242 0 -1 4194560 2000 0 0 0 \
                        250 130 0 0 20 0 9 0 123456 987654321 5000 18446744073709551615 \
                        1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        assert_eq!(
            Stat::parse(STAT),
            Some(Stat {
                utime: 250,
                stime: 130,
                starttime: 123_456,
                vsize: 987_654_321,
            })
        );
        assert_eq!(Stat::parse("4242 (truncated) S 1 2"), None);
    }

    #[test]
    fn a_fixture_procfs_reads_as_the_standard_metrics() {
        let dir = tempfile::tempdir().unwrap();
        let me = dir.path().join("self");
        std::fs::create_dir_all(me.join("fd")).unwrap();
        for fd in ["0", "1", "2", "7"] {
            std::fs::write(me.join("fd").join(fd), "").unwrap();
        }
        std::fs::write(me.join("stat"), STAT).unwrap();
        std::fs::write(
            me.join("status"),
            "Name:\tgangscaler\nVmSize:\t  964504 kB\nVmRSS:\t   20480 kB\n",
        )
        .unwrap();
        std::fs::write(
            me.join("limits"),
            "Limit                     Soft Limit           Hard Limit           Units     \n\
             Max cpu time              unlimited            unlimited            seconds   \n\
             Max open files            1024                 524288               files     \n",
        )
        .unwrap();
        std::fs::write(dir.path().join("stat"), "cpu  1 2 3\nbtime 1700000000\n").unwrap();
        let s = Sample::read_from(dir.path());
        assert_eq!(s.cpu_seconds, Some(3.8));
        assert_eq!(s.resident_bytes, Some(20_480 * 1024));
        assert_eq!(s.virtual_bytes, Some(987_654_321));
        assert_eq!(s.open_fds, Some(4));
        assert_eq!(s.max_fds, Some(1024));
        assert_eq!(s.start_time_seconds, Some(1_700_000_000.0 + 1234.56));

        // Unreadable sources leave their metrics out instead of reporting zeros.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(Sample::read_from(empty.path()), Sample::default());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_live_process_reads_plausibly() {
        let s = Sample::read();
        let open = s.open_fds.expect("open fds");
        assert!(open >= 3, "stdin, stdout, stderr at least: {open}");
        if let Some(max) = s.max_fds {
            assert!(max >= open, "{max} < {open}");
        }
        assert!(s.resident_bytes.expect("rss") > 0);
        assert!(s.virtual_bytes.expect("vsize") >= s.resident_bytes.expect("rss"));
        assert!(s.cpu_seconds.expect("cpu") >= 0.0);
        let now = crate::clock::now_unix() as f64;
        let start = s.start_time_seconds.expect("start time");
        assert!(
            start <= now + 1.0 && start > now - 86_400.0,
            "{start} vs {now}"
        );
    }
}
