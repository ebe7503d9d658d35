//! The clock: the one place that reads the time (`clippy.toml` disallows every other read).
//!
//! Owns reading the wall clock and the monotonic clock; depends on nothing of ours. Code that
//! decides something from the time takes it as an argument (`now_ms`, `now_unix`) and its
//! caller reads it here, so the decisions stay testable and the reads stay findable.

use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock's time since the Unix epoch; zero if the clock reads before it.
fn since_epoch() -> std::time::Duration {
    #[expect(
        clippy::disallowed_methods,
        reason = "the clock module is the one place that reads the wall clock"
    )]
    let now = SystemTime::now();
    now.duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// Milliseconds since the Unix epoch (0 before it, `i64::MAX` past what fits): the time of
/// audit records, due times and lifecycle timeouts, which must survive a restart.
pub fn now_ms() -> i64 {
    i64::try_from(since_epoch().as_millis()).unwrap_or(i64::MAX)
}

/// Seconds since the Unix epoch (0 before it): the time a gang view is built at.
pub fn now_unix() -> i64 {
    i64::try_from(since_epoch().as_secs()).unwrap_or(i64::MAX)
}

/// The wall clock as a Kubernetes timestamp (`Time`, `MicroTime`).
pub fn timestamp() -> jiff::Timestamp {
    #[expect(
        clippy::disallowed_methods,
        reason = "the clock module is the one place that reads the wall clock"
    )]
    jiff::Timestamp::now()
}

/// The monotonic clock as tokio sees it (paused and advanced by hand in tests that start
/// with tokio's time paused): for deadlines and leases that tokio timers wait on.
pub fn mono() -> tokio::time::Instant {
    #[expect(
        clippy::disallowed_methods,
        reason = "the clock module is the one place that reads the monotonic clock"
    )]
    tokio::time::Instant::now()
}

/// The monotonic clock itself (tokio's paused time does not stop it): for measuring how long
/// something took, and for ages compared only with each other.
pub fn mono_std() -> std::time::Instant {
    #[expect(
        clippy::disallowed_methods,
        reason = "the clock module is the one place that reads the monotonic clock"
    )]
    std::time::Instant::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wall_clock_reads_agree_with_each_other() {
        let ms = now_ms();
        let secs = now_unix();
        let ts = timestamp().as_second();
        assert!(ms > 1_600_000_000_000, "{ms}");
        assert!((ms / 1000 - secs).abs() <= 1);
        assert!((ts - secs).abs() <= 1);
    }

    #[test]
    fn the_monotonic_clock_does_not_go_back() {
        let a = mono_std();
        let b = mono_std();
        assert!(b >= a);
    }
}
