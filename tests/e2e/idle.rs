//! Idle GPU node time by cause, attributed from what each node did before and after an idle
//! stretch. The [`Sampler`](super::scenario::Sampler) feeds it one observation a second; the
//! soak reports the causes beside the total.
//!
//! An idle stretch of a node (no unfinished GPU pod bound) is held open until the node's next
//! change settles it:
//! - **waiting**: the node had never hosted a GPU pod and then one bound. With gang scheduling a
//!   member binds only once the whole gang can be placed, so this is the node waiting for the
//!   rest of its gang's nodes (and for the scheduler).
//! - **unused**: the node had never hosted a GPU pod and was removed. The gang it was added for
//!   could not use it: the gang went elsewhere or was placed on other nodes, never formed, or
//!   too few nodes came (partial capacity, stock-outs).
//! - **after job**: the node had hosted a pod, and was removed before another came: from the end
//!   of its last job until the autoscaler removed it.
//! - **between jobs**: the node had hosted a pod, and another one bound later (reuse).
//! - **open at the end**: still idle when the window closed, not settled (split into never used
//!   and used before, since the run's end cuts both short).
//!
//! The attribution needs no knowledge of which gang a node was added for, so it reads the same
//! under every policy, CA alone included.

use std::collections::{BTreeMap, BTreeSet};

/// Idle node-seconds by cause; see the module documentation. The fields sum to the total.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IdleCauses {
    /// Empty until its first GPU pod bound.
    pub waiting: f64,
    /// Removed without ever hosting a GPU pod.
    pub unused: f64,
    /// Empty after its last pod ended until removed.
    pub after_job: f64,
    /// Empty after a pod ended until another bound.
    pub between_jobs: f64,
    /// Never used, still empty when the window closed.
    pub open_unused: f64,
    /// Used before, still empty when the window closed.
    pub open_after_job: f64,
}

impl IdleCauses {
    /// The sum of every cause.
    pub fn total(&self) -> f64 {
        self.waiting
            + self.unused
            + self.after_job
            + self.between_jobs
            + self.open_unused
            + self.open_after_job
    }

    /// Node-minutes per cause, as JSON (the soak's `results.json`).
    pub fn minutes_json(&self) -> serde_json::Value {
        serde_json::json!({
            "waiting": self.waiting / 60.0,
            "unused": self.unused / 60.0,
            "afterJob": self.after_job / 60.0,
            "betweenJobs": self.between_jobs / 60.0,
            "openUnused": self.open_unused / 60.0,
            "openAfterJob": self.open_after_job / 60.0,
        })
    }
}

/// One node's unsettled idle time.
#[derive(Debug, Clone, Default)]
struct Track {
    /// It has hosted a GPU pod.
    used: bool,
    /// Idle seconds since it was last busy (or since it appeared).
    open: f64,
}

/// Follows the nodes and settles each idle stretch when its cause is known.
#[derive(Debug, Clone, Default)]
pub struct Attribution {
    nodes: BTreeMap<String, Track>,
    settled: IdleCauses,
}

impl Attribution {
    /// One observation `dt` seconds after the previous one: the GPU nodes that exist now and
    /// those among them with an unfinished GPU pod bound. A node missing from `current` was
    /// removed since the last observation.
    pub fn observe<'a>(
        &mut self,
        dt: f64,
        current: impl IntoIterator<Item = &'a str>,
        busy: &BTreeSet<String>,
    ) {
        let current: BTreeSet<&str> = current.into_iter().collect();
        let gone: Vec<String> = self
            .nodes
            .keys()
            .filter(|name| !current.contains(name.as_str()))
            .cloned()
            .collect();
        for name in gone {
            if let Some(track) = self.nodes.remove(&name) {
                let cause = if track.used {
                    &mut self.settled.after_job
                } else {
                    &mut self.settled.unused
                };
                *cause += track.open;
            }
        }
        for name in current {
            let track = self.nodes.entry(name.to_owned()).or_default();
            if busy.contains(name) {
                let cause = if track.used {
                    &mut self.settled.between_jobs
                } else {
                    &mut self.settled.waiting
                };
                *cause += track.open;
                track.open = 0.0;
                track.used = true;
            } else {
                track.open += dt;
            }
        }
    }

    /// The causes so far, with every stretch still open counted as open at the end.
    pub fn causes(&self) -> IdleCauses {
        let mut causes = self.settled.clone();
        for track in self.nodes.values() {
            if track.used {
                causes.open_after_job += track.open;
            } else {
                causes.open_unused += track.open;
            }
        }
        causes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_node_that_waits_then_serves_then_drains_is_split_by_cause() {
        let mut a = Attribution::default();
        // n1 appears idle for 3 s, hosts a pod for 2 s, idles 4 s, then is removed.
        for _ in 0..3 {
            a.observe(1.0, ["n1"], &busy(&[]));
        }
        for _ in 0..2 {
            a.observe(1.0, ["n1"], &busy(&["n1"]));
        }
        for _ in 0..4 {
            a.observe(1.0, ["n1"], &busy(&[]));
        }
        a.observe(1.0, [], &busy(&[]));
        let c = a.causes();
        assert_eq!(c.waiting, 3.0, "{c:?}");
        assert_eq!(c.after_job, 4.0, "{c:?}");
        assert_eq!(
            c.unused + c.between_jobs + c.open_unused + c.open_after_job,
            0.0
        );
    }

    #[test]
    fn a_node_removed_before_any_pod_is_unused_and_reuse_is_between_jobs() {
        let mut a = Attribution::default();
        a.observe(1.0, ["never", "reused"], &busy(&["reused"]));
        a.observe(2.0, ["never", "reused"], &busy(&[]));
        a.observe(3.0, ["never", "reused"], &busy(&["reused"]));
        a.observe(1.0, ["reused"], &busy(&["reused"]));
        let c = a.causes();
        assert_eq!(c.unused, 6.0, "{c:?}");
        assert_eq!(c.between_jobs, 2.0, "{c:?}");
        assert_eq!(c.waiting, 0.0, "{c:?}");
    }

    #[test]
    fn stretches_still_idle_at_the_end_are_open_and_everything_sums_to_the_idle_total() {
        let mut a = Attribution::default();
        let mut idle = 0.0;
        let steps: [(&[&str], &[&str]); 5] = [
            (&["a", "b"], &[]),
            (&["a", "b", "c"], &["a"]),
            (&["a", "b", "c"], &[]),
            (&["a", "c"], &["c"]),
            (&["a", "c"], &[]),
        ];
        for (current, on) in steps {
            let on = busy(on);
            idle += current.iter().filter(|n| !on.contains(**n)).count() as f64;
            a.observe(1.0, current.iter().copied(), &on);
        }
        let c = a.causes();
        assert_eq!(c.total(), idle, "{c:?}");
        assert_eq!(
            c.open_after_job,
            3.0 + 1.0,
            "a and c, used and idle at the end: {c:?}"
        );
        assert_eq!(c.unused, 3.0, "b went unused: {c:?}");
        assert_eq!(c.waiting, 1.0 + 2.0, "a waited one second, c two: {c:?}");
    }
}
