//! Readiness: the named conditions behind `/readyz` and the report that names the ones
//! failing. Each condition is set by the part of the server that owns it (the gRPC listener,
//! the cluster view, leader election, shutdown, the audit log); nothing here decides. A
//! *gating* condition that fails makes `/readyz` answer 503; a non-gating one
//! ([`Condition::AuditWritable`]) is reported as degraded and leaves the answer 200 (see
//! [`Condition::gates`] for why). Depends on nothing of ours.

use std::fmt::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// A check asked at every report: `None` while it holds, else why it does not.
pub type Probe = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// One readiness condition. Every one must hold for the process to be ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Condition {
    /// The gRPC server accepts calls. False from start until the listener serves, and again
    /// once it has stopped.
    Serving,
    /// The cluster view (with `kubernetes.watch`) has listed every kind once; true from the
    /// start without it. Not cleared by a later watch failure: the process still answers
    /// reads while the view is stale (see docs/ca-contract.md, "API-server outage").
    Synced,
    /// This replica is the leader. True unless leader election is on and another replica
    /// holds the lease.
    Leader,
    /// The process is not shutting down. Cleared on SIGTERM, before in-flight RPCs drain.
    NotDraining,
    /// The audit log accepted its last record (true without an audit log). Not gating: while
    /// it fails, `NodeGroupIncreaseSize` refuses every scale-up, and every other call is
    /// answered.
    AuditWritable,
}

impl Condition {
    /// Every condition, in report order.
    pub const ALL: [Self; 5] = [
        Self::Serving,
        Self::Synced,
        Self::Leader,
        Self::NotDraining,
        Self::AuditWritable,
    ];

    /// The name in the `/readyz` report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Serving => "serving",
            Self::Synced => "synced",
            Self::Leader => "leader",
            Self::NotDraining => "shutdown",
            Self::AuditWritable => "audit",
        }
    }

    /// Whether this condition failing makes the process not ready. Every condition gates but
    /// [`Condition::AuditWritable`]: Cluster Autoscaler reaches the provider through a Service
    /// that only routes to ready pods, and a replica that is not ready also fails the chart's
    /// startup probe; a full disk would then cut CA off from every call (its whole loop fails,
    /// scale-down too) or restart the container in a loop, where refusing only the scale-ups
    /// keeps the rest of the autoscaler working.
    pub fn gates(self) -> bool {
        !matches!(self, Self::AuditWritable)
    }

    /// Why the process is not ready while this condition fails.
    pub fn failure(self) -> &'static str {
        match self {
            Self::Serving => "the gRPC server is not accepting calls",
            Self::Synced => "the cluster view has not listed every kind yet",
            Self::Leader => "another replica holds the leader lease",
            Self::NotDraining => "shutting down: draining in-flight RPCs",
            Self::AuditWritable => "the audit log cannot be written: scale-ups are refused",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Serving => 0,
            Self::Synced => 1,
            Self::Leader => 2,
            Self::NotDraining => 3,
            Self::AuditWritable => 4,
        }
    }
}

/// The readiness conditions of one process, shared by whoever sets them and `/readyz`.
pub struct Readiness {
    holds: [AtomicBool; 5],
    /// A condition whose state depends on the clock (leadership, whose authority lapses
    /// `renewDeadline` after its last renewal) or on another part's own state (the audit log)
    /// is asked at every report instead of set.
    probes: [OnceLock<Probe>; 5],
}

impl fmt::Debug for Readiness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Readiness").field(&self.report()).finish()
    }
}

impl Default for Readiness {
    fn default() -> Self {
        Self::new()
    }
}

impl Readiness {
    /// Not serving and not synced yet; leader (no leader election), not draining, and the
    /// audit log writable.
    pub fn new() -> Self {
        let r = Self {
            holds: Default::default(),
            probes: Default::default(),
        };
        r.set(Condition::Leader, true);
        r.set(Condition::NotDraining, true);
        r.set(Condition::AuditWritable, true);
        r
    }

    /// Sets whether `condition` holds.
    pub fn set(&self, condition: Condition, holds: bool) {
        self.holds[condition.index()].store(holds, Ordering::Release);
    }

    /// Asks `probe` at every report as well: `condition` holds only while it is set and
    /// `probe` answers `None`; the probe's answer is the reason shown. A second probe for the
    /// same condition is ignored.
    pub fn probe(&self, condition: Condition, probe: Probe) {
        let _ = self.probes[condition.index()].set(probe);
    }

    /// Why `condition` fails now, or `None` while it holds.
    fn why_not(&self, condition: Condition) -> Option<String> {
        if !self.holds[condition.index()].load(Ordering::Acquire) {
            return Some(condition.failure().to_owned());
        }
        self.probes[condition.index()].get().and_then(|p| p())
    }

    /// Whether `condition` holds.
    pub fn holds(&self, condition: Condition) -> bool {
        self.why_not(condition).is_none()
    }

    /// Whether every gating condition holds.
    pub fn is_ready(&self) -> bool {
        Condition::ALL.iter().all(|c| !c.gates() || self.holds(*c))
    }

    /// The conditions that fail now, gating or not, in report order.
    pub fn failing(&self) -> Vec<Condition> {
        Condition::ALL
            .into_iter()
            .filter(|c| !self.holds(*c))
            .collect()
    }

    /// The state of every condition, read once.
    pub fn report(&self) -> Report {
        Report(Condition::ALL.map(|c| (c, self.why_not(c))))
    }
}

/// The state of every condition at one moment. Its `Display` is the `/readyz` body: one line
/// per condition, `[+]name ok` or `[-]name failed: why` (the format of Kubernetes components'
/// verbose health checks; a non-gating condition that fails reads `[!]name degraded: why`),
/// then `readyz check passed` or `readyz check failed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report([(Condition, Option<String>); 5]);

impl Report {
    /// Whether every gating condition held.
    pub fn is_ready(&self) -> bool {
        self.0.iter().all(|(c, why)| !c.gates() || why.is_none())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (c, why) in &self.0 {
            match why {
                None => writeln!(f, "[+]{} ok", c.name())?,
                Some(why) if !c.gates() => writeln!(f, "[!]{} degraded: {why}", c.name())?,
                Some(why) => writeln!(f, "[-]{} failed: {why}", c.name())?,
            }
        }
        let verdict = if self.is_ready() { "passed" } else { "failed" };
        f.write_str("readyz check ")?;
        f.write_str(verdict)?;
        f.write_char('\n')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_process_is_not_ready_until_it_serves_and_has_synced() {
        let r = Readiness::new();
        assert_eq!(r.failing(), [Condition::Serving, Condition::Synced]);
        r.set(Condition::Serving, true);
        assert!(!r.is_ready());
        r.set(Condition::Synced, true);
        assert!(r.is_ready());
        assert!(r.report().is_ready());
    }

    #[test]
    fn the_report_names_each_failing_condition_and_why() {
        let r = Readiness::new();
        r.set(Condition::Serving, true);
        r.set(Condition::Synced, true);
        r.set(Condition::Leader, false);
        r.set(Condition::NotDraining, false);
        let text = r.report().to_string();
        assert_eq!(
            text,
            "[+]serving ok\n[+]synced ok\n\
             [-]leader failed: another replica holds the leader lease\n\
             [-]shutdown failed: shutting down: draining in-flight RPCs\n\
             [+]audit ok\n\
             readyz check failed\n"
        );
        r.set(Condition::Leader, true);
        r.set(Condition::NotDraining, true);
        assert!(r.report().to_string().ends_with("readyz check passed\n"));
    }

    #[test]
    fn a_probed_condition_fails_with_the_probes_reason_while_it_answers_one() {
        let r = Readiness::new();
        r.set(Condition::Serving, true);
        r.set(Condition::Synced, true);
        let standby = Arc::new(AtomicBool::new(true));
        let flag = standby.clone();
        r.probe(
            Condition::Leader,
            Arc::new(move || {
                flag.load(Ordering::Acquire)
                    .then(|| "standby (b): the leader is a".to_owned())
            }),
        );
        assert_eq!(r.failing(), [Condition::Leader]);
        assert!(
            r.report()
                .to_string()
                .contains("[-]leader failed: standby (b): the leader is a\n")
        );
        standby.store(false, Ordering::Release);
        assert!(r.is_ready());
    }

    #[test]
    fn an_unwritable_audit_log_is_reported_as_degraded_without_failing_readiness() {
        let r = Readiness::new();
        r.set(Condition::Serving, true);
        r.set(Condition::Synced, true);
        let why = Arc::new(std::sync::Mutex::new(Some(
            "writing audit log /a: No space left on device (os error 28)".to_owned(),
        )));
        let probe = why.clone();
        r.probe(
            Condition::AuditWritable,
            Arc::new(move || probe.lock().unwrap().clone()),
        );
        assert_eq!(r.failing(), [Condition::AuditWritable]);
        assert!(r.is_ready(), "a full disk must not take CA's endpoint away");
        let text = r.report().to_string();
        assert!(
            text.contains(
                "[!]audit degraded: writing audit log /a: No space left on device (os error 28)\n"
            ),
            "{text}"
        );
        assert!(text.ends_with("readyz check passed\n"), "{text}");
        *why.lock().unwrap() = None;
        assert!(r.failing().is_empty());
        assert!(r.report().to_string().contains("[+]audit ok\n"));
    }
}
