//! The claim ledger of a Cluster API group: which scale-up (and gang) each Machine was
//! requested for.
//!
//! A Machine cannot be named when it is requested: the MachineSet controller makes it after
//! the replicas change. So the ledger, kept as one JSON annotation on the MachineDeployment
//! ([`LEDGER_ANNOTATION`]), holds two lists written in the same update as the replicas:
//!
//! - `pending`: one entry per replica requested and not yet stood for by a Machine, oldest
//!   first; the entry is the claim's text, or empty for a replica requested without one;
//! - `machines`: each Machine seen since, by name, with the claim it took (empty: none).
//!
//! **The rule.** When the group is listed, each Machine the ledger has not seen takes the
//! oldest pending entry, the Machines in order of creation (then name); a Machine seen while
//! nothing is pending, or one already being deleted, takes none and never takes one later.
//! Machines gone from the listing are dropped. Because a pending entry is written in the same
//! update that raises the replicas, the Machine made for it appears after it, and requests
//! are served in the order they were made. A Machine the MachineSet makes for another reason
//! (the replicas raised by someone else, a remediated Machine replaced) while claims are
//! pending takes the oldest one: the ledger cannot tell it apart.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::Claim;

/// Annotation on the MachineDeployment that holds its [`Ledger`].
pub const LEDGER_ANNOTATION: &str = "gangscaler.io/claims";

/// A Machine as the ledger orders it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The Machine's name.
    pub name: String,
    /// Its creationTimestamp, in Unix seconds (0 when unset).
    pub created: i64,
    /// Whether it is being deleted.
    pub deleting: bool,
}

/// The claim ledger of one MachineDeployment. See the module documentation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Claims of replicas no Machine stands for yet, oldest first; empty text: no claim.
    #[serde(default)]
    pub pending: Vec<String>,
    /// Machine name → the claim it took; empty text: none.
    #[serde(default)]
    pub machines: BTreeMap<String, String>,
}

impl Ledger {
    /// The ledger in `annotations`; `Ok(None)` when there is none yet.
    ///
    /// # Errors
    /// The annotation's value is not a ledger: the parse error.
    pub fn read(annotations: Option<&BTreeMap<String, String>>) -> Result<Option<Self>, String> {
        match annotations.and_then(|a| a.get(LEDGER_ANNOTATION)) {
            None => Ok(None),
            Some(text) => serde_json::from_str(text)
                .map(Some)
                .map_err(|e| format!("annotation {LEDGER_ANNOTATION} is not a claim ledger: {e}")),
        }
    }

    /// A first ledger: every Machine that exists now is seen, and takes no claim.
    pub fn adopting(machines: &[Seen]) -> Self {
        Self {
            pending: Vec::new(),
            machines: machines
                .iter()
                .map(|m| (m.name.clone(), String::new()))
                .collect(),
        }
    }

    /// The annotation's value.
    pub fn text(&self) -> String {
        // A struct of strings always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Appends `delta` pending entries: `claims[i]` for the first `claims.len()`, none past.
    pub fn request(&mut self, delta: u32, claims: &[Claim]) {
        let delta = usize::try_from(delta).unwrap_or(usize::MAX);
        self.pending
            .extend((0..delta).map(|i| claims.get(i).map(ToString::to_string).unwrap_or_default()));
    }

    /// Applies the rule to `machines`, the group's listing: unseen Machines take the oldest
    /// pending entries, Machines gone are dropped.
    pub fn settle(&mut self, machines: &[Seen]) {
        let listed: std::collections::BTreeSet<&str> =
            machines.iter().map(|m| m.name.as_str()).collect();
        self.machines
            .retain(|name, _| listed.contains(name.as_str()));
        let mut unseen: Vec<&Seen> = machines
            .iter()
            .filter(|m| !self.machines.contains_key(&m.name))
            .collect();
        unseen.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
        let mut taken = 0;
        for m in unseen {
            let claim = if !m.deleting && taken < self.pending.len() {
                taken += 1;
                self.pending[taken - 1].clone()
            } else {
                String::new()
            };
            self.machines.insert(m.name.clone(), claim);
        }
        self.pending.drain(..taken);
    }

    /// Drops the `n` newest pending entries (replicas cancelled before a Machine stood for
    /// them); returns how many there were to drop.
    pub fn cancel_newest(&mut self, n: u32) -> u32 {
        let n = usize::try_from(n)
            .unwrap_or(usize::MAX)
            .min(self.pending.len());
        self.pending.truncate(self.pending.len() - n);
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Removes one pending entry per claim in `claims` (newest first, where one is pending),
    /// at most `most`; returns how many were removed and the claims that found none.
    pub fn withdraw(&mut self, claims: &[Claim], most: u32) -> (u32, Vec<Claim>) {
        let mut removed = 0u32;
        let mut left = Vec::new();
        for claim in claims {
            let text = claim.to_string();
            match self.pending.iter().rposition(|p| *p == text) {
                Some(pos) if removed < most => {
                    self.pending.remove(pos);
                    removed += 1;
                }
                _ => left.push(claim.clone()),
            }
        }
        (removed, left)
    }

    /// The pending entries that carry a claim.
    pub fn pending_claims(&self) -> Vec<Claim> {
        self.pending
            .iter()
            .filter_map(|p| Claim::parse(p))
            .collect()
    }

    /// The claim Machine `name` took, if any.
    pub fn claim_of(&self, name: &str) -> Option<Claim> {
        self.machines.get(name).and_then(|c| Claim::parse(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(name: &str, created: i64) -> Seen {
        Seen {
            name: name.to_owned(),
            created,
            deleting: false,
        }
    }

    fn claim(su: &str, gang: &str) -> Claim {
        Claim::for_gang(su, "ml", gang)
    }

    #[test]
    fn machines_take_pending_claims_in_creation_order() {
        let mut l = Ledger::adopting(&[seen("old", 100)]);
        l.request(2, &[claim("su-1", "a"), claim("su-1", "a")]);
        l.request(1, &[claim("su-2", "b")]);
        // Listed out of creation order; the old Machine keeps taking nothing.
        let listing = [
            seen("m-z", 201),
            seen("old", 100),
            seen("m-y", 202),
            seen("m-x", 201),
        ];
        let before = l.clone();
        l.settle(&listing);
        assert_ne!(l, before);
        assert_eq!(l.claim_of("old"), None);
        assert_eq!(l.claim_of("m-x"), Some(claim("su-1", "a")));
        assert_eq!(l.claim_of("m-z"), Some(claim("su-1", "a")));
        assert_eq!(l.claim_of("m-y"), Some(claim("su-2", "b")));
        assert!(l.pending.is_empty());
        let settled = l.clone();
        l.settle(&listing);
        assert_eq!(
            l, settled,
            "a second pass over the same listing changes nothing"
        );
    }

    #[test]
    fn a_machine_seen_while_nothing_is_pending_never_takes_a_later_claim() {
        let mut l = Ledger::default();
        l.settle(&[seen("stray", 200)]);
        assert_eq!(l.machines.len(), 1, "the stray Machine is seen");
        l.request(1, &[claim("su-1", "a")]);
        l.settle(&[seen("stray", 200), seen("new", 210)]);
        assert_eq!(l.claim_of("stray"), None);
        assert_eq!(l.claim_of("new"), Some(claim("su-1", "a")));
    }

    #[test]
    fn a_deleting_machine_takes_no_claim_and_gone_machines_are_dropped() {
        let mut l = Ledger::default();
        l.request(1, &[claim("su-1", "a")]);
        let mut going = seen("going", 200);
        going.deleting = true;
        l.settle(&[going]);
        assert_eq!(l.claim_of("going"), None);
        assert_eq!(l.pending_claims(), vec![claim("su-1", "a")]);
        l.settle(&[]);
        assert!(l.machines.is_empty());
    }

    #[test]
    fn replicas_past_the_claims_are_pending_without_one() {
        let mut l = Ledger::default();
        l.request(3, &[claim("su-1", "a")]);
        assert_eq!(l.pending.len(), 3);
        assert_eq!(l.pending_claims(), vec![claim("su-1", "a")]);
        l.settle(&[seen("m1", 200), seen("m2", 201)]);
        assert_eq!(l.claim_of("m1"), Some(claim("su-1", "a")));
        assert_eq!(l.claim_of("m2"), None);
        assert_eq!(l.pending.len(), 1);
    }

    #[test]
    fn withdraw_takes_only_pending_entries_with_the_claims_and_at_most_what_it_may() {
        let mut l = Ledger::default();
        l.request(2, &[claim("su-1", "a"), claim("su-1", "a")]);
        l.request(1, &[claim("su-2", "b")]);
        assert_eq!(
            l.withdraw(&[claim("su-1", "a"), claim("su-9", "x")], 5),
            (1, vec![claim("su-9", "x")])
        );
        assert_eq!(
            l.pending_claims(),
            vec![claim("su-1", "a"), claim("su-2", "b")]
        );
        assert_eq!(
            l.withdraw(&[claim("su-1", "a"), claim("su-2", "b")], 1),
            (1, vec![claim("su-2", "b")])
        );
        assert_eq!(l.pending_claims(), vec![claim("su-2", "b")]);
    }

    #[test]
    fn cancelling_drops_the_newest_pending_entries() {
        let mut l = Ledger::default();
        l.request(1, &[claim("su-1", "a")]);
        l.request(1, &[claim("su-2", "b")]);
        assert_eq!(l.cancel_newest(5), 2);
        l.request(1, &[claim("su-1", "a")]);
        l.request(1, &[claim("su-2", "b")]);
        assert_eq!(l.cancel_newest(1), 1);
        assert_eq!(l.pending_claims(), vec![claim("su-1", "a")]);
    }

    #[test]
    fn the_annotation_round_trips_and_a_bad_one_is_an_error_naming_it() {
        let mut l = Ledger::default();
        l.request(1, &[claim("su-1", "a")]);
        let annotations = BTreeMap::from([(LEDGER_ANNOTATION.to_owned(), l.text())]);
        assert_eq!(Ledger::read(Some(&annotations)), Ok(Some(l)));
        assert_eq!(Ledger::read(None), Ok(None));
        let bad = BTreeMap::from([(LEDGER_ANNOTATION.to_owned(), "[1,".to_owned())]);
        let e = Ledger::read(Some(&bad)).unwrap_err();
        assert!(e.contains(LEDGER_ANNOTATION), "{e}");
    }
}
