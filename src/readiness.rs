//! Readiness: the named conditions that must all hold for `/readyz` to answer 200, and the
//! report that names the ones failing. Each condition is set by the part of the server that
//! owns it (the gRPC listener, the cluster view, leader election, shutdown); nothing here
//! decides. Depends on nothing of ours.

use std::fmt::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// One readiness condition. Every one must hold for the process to be ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Condition {
    /// The gRPC server accepts calls. False from start until the listener serves, and again
    /// once it has stopped.
    Serving,
    /// The cluster view (with `kubernetes.watch`) has listed every kind once; true from the
    /// start without it. Not cleared by a later watch failure: the process still answers
    /// reads while the view is stale (see the README's "API-server outage").
    Synced,
    /// This replica is the leader. True unless leader election is on and another replica
    /// holds the lease.
    Leader,
    /// The process is not shutting down. Cleared on SIGTERM, before in-flight RPCs drain.
    NotDraining,
}

impl Condition {
    /// Every condition, in report order.
    pub const ALL: [Self; 4] = [Self::Serving, Self::Synced, Self::Leader, Self::NotDraining];

    /// The name in the `/readyz` report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Serving => "serving",
            Self::Synced => "synced",
            Self::Leader => "leader",
            Self::NotDraining => "shutdown",
        }
    }

    /// Why the process is not ready while this condition fails.
    pub fn failure(self) -> &'static str {
        match self {
            Self::Serving => "the gRPC server is not accepting calls",
            Self::Synced => "the cluster view has not listed every kind yet",
            Self::Leader => "another replica holds the leader lease",
            Self::NotDraining => "shutting down: draining in-flight RPCs",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Serving => 0,
            Self::Synced => 1,
            Self::Leader => 2,
            Self::NotDraining => 3,
        }
    }
}

/// The readiness conditions of one process, shared by whoever sets them and `/readyz`.
#[derive(Debug)]
pub struct Readiness {
    holds: [AtomicBool; 4],
}

impl Default for Readiness {
    fn default() -> Self {
        Self::new()
    }
}

impl Readiness {
    /// Not serving and not synced yet; leader (no leader election) and not draining.
    pub fn new() -> Self {
        let r = Self {
            holds: Default::default(),
        };
        r.set(Condition::Leader, true);
        r.set(Condition::NotDraining, true);
        r
    }

    /// Sets whether `condition` holds.
    pub fn set(&self, condition: Condition, holds: bool) {
        self.holds[condition.index()].store(holds, Ordering::Release);
    }

    /// Whether `condition` holds.
    pub fn holds(&self, condition: Condition) -> bool {
        self.holds[condition.index()].load(Ordering::Acquire)
    }

    /// Whether every condition holds.
    pub fn is_ready(&self) -> bool {
        Condition::ALL.iter().all(|c| self.holds(*c))
    }

    /// The conditions that fail now, in report order.
    pub fn failing(&self) -> Vec<Condition> {
        Condition::ALL
            .into_iter()
            .filter(|c| !self.holds(*c))
            .collect()
    }

    /// The state of every condition, read once.
    pub fn report(&self) -> Report {
        Report(Condition::ALL.map(|c| (c, self.holds(c))))
    }
}

/// The state of every condition at one moment. Its `Display` is the `/readyz` body: one line
/// per condition, `[+]name ok` or `[-]name failed: why` (the format of Kubernetes components'
/// verbose health checks), then `readyz check passed` or `readyz check failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report([(Condition, bool); 4]);

impl Report {
    /// Whether every condition held.
    pub fn is_ready(&self) -> bool {
        self.0.iter().all(|(_, holds)| *holds)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (c, holds) in self.0 {
            if holds {
                writeln!(f, "[+]{} ok", c.name())?;
            } else {
                writeln!(f, "[-]{} failed: {}", c.name(), c.failure())?;
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
             readyz check failed\n"
        );
        r.set(Condition::Leader, true);
        r.set(Condition::NotDraining, true);
        assert!(r.report().to_string().ends_with("readyz check passed\n"));
    }
}
