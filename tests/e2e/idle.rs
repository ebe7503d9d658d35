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

/// What a GPU node carried when it was seen: its creation, and what and when it was
/// requested for (the kwok backend's `gangscaler.io/requested-at` and `-for` annotations).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFacts {
    /// `metadata.creationTimestamp`, Unix ms (kwok nodes are Ready from creation).
    pub created_ms: Option<i64>,
    /// When its instance was requested, Unix ms.
    pub requested_ms: Option<i64>,
    /// The claim it was requested for (scale-up id, and gang when gangscaler knew it).
    pub requested_for: Option<String>,
    /// GPUs it has.
    pub gpus: f64,
}

/// A stretch during which a node had a GPU pod of `gang` bound (the first gang by name when
/// pods of several were).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Busy {
    /// First observation with it bound, Unix ms.
    pub from_ms: i64,
    /// First observation without it (idle, another gang first, or the node gone); none while
    /// it lasts.
    pub to_ms: Option<i64>,
    /// The gang (its pods are `<gang>-<i>`).
    pub gang: String,
}

/// One node's life as the sampler saw it, for the soak's orphan and assembly accounting
/// (`tests/soak/report.py`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeLife {
    /// Its facts when first seen.
    #[serde(flatten)]
    pub facts: NodeFacts,
    /// First observation with it, Unix ms.
    pub first_seen_ms: i64,
    /// First observation without it, Unix ms; none while it exists.
    pub gone_ms: Option<i64>,
    /// Its busy stretches, in order; idle time is everything else between first seen and gone.
    pub busy: Vec<Busy>,
}

/// Every GPU node's life, by name.
#[derive(Debug, Clone, Default)]
pub struct NodeLives {
    nodes: BTreeMap<String, NodeLife>,
}

impl NodeLives {
    /// One observation at `now_ms`: the GPU nodes that exist (with their facts) and, for each
    /// busy one, the gang of its bound GPU pods.
    pub fn observe(
        &mut self,
        now_ms: i64,
        current: &BTreeMap<String, NodeFacts>,
        busy: &BTreeMap<String, String>,
    ) {
        for (name, life) in &mut self.nodes {
            if life.gone_ms.is_none() && !current.contains_key(name) {
                life.gone_ms = Some(now_ms);
                close(life, now_ms);
            }
        }
        for (name, facts) in current {
            let life = self.nodes.entry(name.clone()).or_insert_with(|| NodeLife {
                facts: facts.clone(),
                first_seen_ms: now_ms,
                gone_ms: None,
                busy: Vec::new(),
            });
            let open_gang = life
                .busy
                .last()
                .filter(|b| b.to_ms.is_none())
                .map(|b| b.gang.clone());
            let gang = busy.get(name);
            if open_gang.as_ref() != gang {
                close(life, now_ms);
                if let Some(gang) = gang {
                    life.busy.push(Busy {
                        from_ms: now_ms,
                        to_ms: None,
                        gang: gang.clone(),
                    });
                }
            }
        }
    }

    /// The lives so far, by node name.
    pub fn lives(&self) -> &BTreeMap<String, NodeLife> {
        &self.nodes
    }
}

/// Ends `life`'s open busy stretch, if any, at `now_ms`.
fn close(life: &mut NodeLife, now_ms: i64) {
    if let Some(open) = life.busy.last_mut().filter(|b| b.to_ms.is_none()) {
        open.to_ms = Some(now_ms);
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

    fn facts(created_ms: i64) -> NodeFacts {
        NodeFacts {
            created_ms: Some(created_ms),
            requested_ms: Some(created_ms - 90_000),
            requested_for: Some("su-1-1/default/a".to_owned()),
            gpus: 8.0,
        }
    }

    #[test]
    fn node_lives_record_busy_stretches_by_gang_and_close_them_when_a_node_goes() {
        let mut lives = NodeLives::default();
        let n1 = BTreeMap::from([("n1".to_owned(), facts(500))]);
        let both = BTreeMap::from([("n1".to_owned(), facts(500)), ("n2".to_owned(), facts(900))]);
        let on = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(n, g)| ((*n).to_owned(), (*g).to_owned()))
                .collect()
        };
        lives.observe(1_000, &n1, &on(&[]));
        lives.observe(2_000, &both, &on(&[("n1", "a")]));
        lives.observe(3_000, &both, &on(&[("n1", "a"), ("n2", "a")]));
        // n1 changes hands from a to b with no idle observation between.
        lives.observe(4_000, &both, &on(&[("n1", "b")]));
        lives.observe(5_000, &n1, &on(&[]));
        let l = lives.lives();
        let n1 = &l["n1"];
        assert_eq!(n1.first_seen_ms, 1_000);
        assert_eq!(n1.facts, facts(500));
        assert_eq!(n1.gone_ms, None);
        let spans: Vec<_> = n1
            .busy
            .iter()
            .map(|b| (b.from_ms, b.to_ms, b.gang.as_str()))
            .collect();
        assert_eq!(
            spans,
            [(2_000, Some(4_000), "a"), (4_000, Some(5_000), "b")]
        );
        let n2 = &l["n2"];
        assert_eq!((n2.first_seen_ms, n2.gone_ms), (2_000, Some(5_000)));
        let spans: Vec<_> = n2.busy.iter().map(|b| (b.from_ms, b.to_ms)).collect();
        assert_eq!(spans, [(3_000, Some(4_000))]);
    }
}
