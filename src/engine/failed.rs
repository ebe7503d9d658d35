//! [`FailedLedger`]: failed instances that Cluster Autoscaler deleted before the scale-up
//! lifecycle saw them.
//!
//! CA learns of failed instances from `NodeGroupNodes` (their `errorInfo`) and deletes them
//! with `NodeGroupDeleteNodes`, often within a second. The lifecycle loop reads instances every
//! `lifecycle.interval`, so a failure CA saw and cleaned up between two ticks would never reach
//! the audit log: the scale-up would later end as `timedOut` or, if its gang formed on another
//! group, be credited with a success it had no part in. The engine therefore remembers the
//! failed instances of its last listing of each group, and when a delete removes one of them
//! that the lifecycle has not been shown yet, keeps it for the lifecycle's next read of that
//! group ([`FailedLedger::take_deleted`]), which hands it over once.
//!
//! In memory only: after a restart, a failure deleted before it was seen ends its scale-up by
//! the lifecycle timeout instead.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::Instance;

/// At most this many deleted failed instances are kept per group until the lifecycle reads
/// them; older ones are dropped first (a lifecycle loop that never reads would otherwise let
/// the list grow with every failed scale-up).
pub const MAX_KEPT_PER_GROUP: usize = 1024;

/// Failed instances listed per group, and the ones deleted since (see the module docs).
#[derive(Debug, Default)]
pub struct FailedLedger {
    /// The failed instances of the last listing of each group.
    listed: BTreeMap<String, Vec<Instance>>,
    /// Failed instances deleted since the lifecycle last read the group, oldest first.
    deleted: BTreeMap<String, Vec<Instance>>,
    /// The ids of the failed instances the lifecycle's last read of each group showed it.
    shown: BTreeMap<String, BTreeSet<String>>,
}

impl FailedLedger {
    /// Notes the failed instances among `instances`, a complete listing of `group`.
    pub fn listed(&mut self, group: &str, instances: &[Instance]) {
        let failed: Vec<Instance> = instances
            .iter()
            .filter(|i| i.error.is_some())
            .cloned()
            .collect();
        if failed.is_empty() {
            self.listed.remove(group);
        } else {
            self.listed.insert(group.to_owned(), failed);
        }
    }

    /// Notes that the instances with provider ids `ids` were deleted from `group`: the ones
    /// last listed as failed that the lifecycle has not been shown are kept for
    /// [`Self::take_deleted`].
    pub fn deleted<'a>(&mut self, group: &str, ids: impl IntoIterator<Item = &'a str>) {
        let Some(listed) = self.listed.get_mut(group) else {
            return;
        };
        let shown = self.shown.get(group);
        let mut gone = Vec::new();
        for id in ids {
            if let Some(pos) = listed.iter().position(|i| i.id == id) {
                let instance = listed.remove(pos);
                if !shown.is_some_and(|s| s.contains(id)) {
                    gone.push(instance);
                }
            }
        }
        if listed.is_empty() {
            self.listed.remove(group);
        }
        if gone.is_empty() {
            return;
        }
        let kept = self.deleted.entry(group.to_owned()).or_default();
        kept.extend(gone);
        if kept.len() > MAX_KEPT_PER_GROUP {
            let excess = kept.len() - MAX_KEPT_PER_GROUP;
            kept.drain(..excess);
        }
    }

    /// Hands over, once, the failed instances deleted from `group` since the last call that
    /// are not in `current`, the lifecycle's own listing of the group (which shows it the
    /// failed instances it has, so these are not kept when deleted later).
    pub fn take_deleted(&mut self, group: &str, current: &[Instance]) -> Vec<Instance> {
        let failed: BTreeSet<String> = current
            .iter()
            .filter(|i| i.error.is_some())
            .map(|i| i.id.clone())
            .collect();
        if failed.is_empty() {
            self.shown.remove(group);
        } else {
            self.shown.insert(group.to_owned(), failed);
        }
        self.deleted
            .remove(group)
            .unwrap_or_default()
            .into_iter()
            .filter(|d| current.iter().all(|c| c.id != d.id))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ErrorCode, InstanceError, InstanceState};

    fn instance(id: &str, failed: bool) -> Instance {
        Instance {
            id: id.into(),
            node_name: id.into(),
            state: InstanceState::Creating,
            error: failed.then(|| InstanceError {
                code: ErrorCode::Stockout,
                message: format!("{id} stocked out"),
            }),
            claim: None,
        }
    }

    #[test]
    fn a_failed_instance_deleted_after_listing_is_handed_over_once() {
        let mut l = FailedLedger::default();
        l.listed("a", &[instance("x", true), instance("y", false)]);
        l.deleted("a", ["x", "y"]);
        let got = l.take_deleted("a", &[]);
        assert_eq!(got, vec![instance("x", true)]);
        assert!(l.take_deleted("a", &[]).is_empty(), "handed over once");
    }

    #[test]
    fn only_failed_instances_of_the_same_group_are_kept() {
        let mut l = FailedLedger::default();
        l.listed("a", &[instance("x", true)]);
        l.deleted("b", ["x"]);
        assert!(l.take_deleted("b", &[]).is_empty());
        l.deleted("a", ["healthy"]);
        assert!(l.take_deleted("a", &[]).is_empty());
        // Still listed as failed, so a later delete keeps it.
        l.deleted("a", ["x"]);
        assert_eq!(l.take_deleted("a", &[]).len(), 1);
    }

    #[test]
    fn a_new_listing_replaces_the_last_one() {
        let mut l = FailedLedger::default();
        l.listed("a", &[instance("x", true)]);
        l.listed("a", &[instance("z", true)]);
        l.deleted("a", ["x", "z"]);
        let got = l.take_deleted("a", &[]);
        assert_eq!(got, vec![instance("z", true)]);
    }

    #[test]
    fn an_instance_the_current_listing_still_shows_is_not_repeated() {
        let mut l = FailedLedger::default();
        l.listed("a", &[instance("x", true), instance("w", true)]);
        l.deleted("a", ["x", "w"]);
        let got = l.take_deleted("a", &[instance("x", true)]);
        assert_eq!(got, vec![instance("w", true)]);
    }

    #[test]
    fn a_failed_instance_the_lifecycle_already_saw_is_not_handed_over_again() {
        let mut l = FailedLedger::default();
        let seen = [instance("x", true)];
        l.listed("a", &seen);
        assert!(l.take_deleted("a", &seen).is_empty());
        l.deleted("a", ["x"]);
        assert!(l.take_deleted("a", &[]).is_empty(), "x was shown already");
        // A failure the lifecycle has not seen is still kept.
        l.listed("a", &[instance("v", true)]);
        l.deleted("a", ["v"]);
        assert_eq!(l.take_deleted("a", &[]), vec![instance("v", true)]);
    }

    #[test]
    fn the_kept_list_is_bounded_oldest_dropped_first() {
        let mut l = FailedLedger::default();
        let n = MAX_KEPT_PER_GROUP + 3;
        let all: Vec<Instance> = (0..n).map(|i| instance(&format!("i{i}"), true)).collect();
        l.listed("a", &all);
        let ids: Vec<String> = all.iter().map(|i| i.id.clone()).collect();
        l.deleted("a", ids.iter().map(String::as_str));
        let got = l.take_deleted("a", &[]);
        assert_eq!(got.len(), MAX_KEPT_PER_GROUP);
        assert_eq!(got[0].id, "i3");
    }
}
