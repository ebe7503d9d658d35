//! The deferral half of each [`Loop`] tick (`admission.deferral`, [`defer`](super::super::defer)):
//! the engine says which pending gangs to keep out of CA's scale-up, each change of a gang's
//! hold is recorded, and then the pods are marked or released. A gang whose record could not
//! be written is left as it was (retried at the next tick): no pod changes without its record.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tracing::{debug, info, warn};

use super::Loop;
use crate::audit::{DeferralEvent, GangId, Record};
use crate::cluster::{CompactPod, GangView};
use crate::metrics::{HoldLabels, OutcomeLabels};
use crate::model::GangRef;
use crate::planner::{Deferral, Hold};
use crate::scaleup::defer::{PodState, Timing, plan};
use crate::telemetry::Chain;

/// Most pod writes of deferral per tick, so a burst of gangs does not flood the API server;
/// the rest follow at the next ticks.
pub const DEFERRAL_PATCHES_PER_TICK: usize = 200;

/// The holds a gauge is kept for.
const HOLDS: [&str; 4] = ["covered", "unhostable", "no_room", "behind"];

impl Loop {
    /// Marks the members of the gangs to defer and releases the rest (see the module docs).
    pub(super) async fn defer(&mut self, view: &GangView, now_ms: i64) {
        let Some(settings) = self.deferral.clone() else {
            return;
        };
        let deferrals = match self.instances.deferrals(view).await {
            Ok(d) => d,
            Err(e) => {
                warn!(error = %Chain(&e), "deciding which gangs to keep out of CA's scale-up failed; retried at the next tick");
                return;
            }
        };
        for hold in HOLDS {
            let n = deferrals.iter().filter(|d| d.hold.as_str() == hold).count();
            self.metrics
                .gangs_deferred
                .get_or_create(&HoldLabels { hold })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let pods = self.view.pods();
        // Every gang member's gang, to say whose marks are lifted.
        let member_of: BTreeMap<(&str, &str), &GangRef> = view
            .gangs
            .iter()
            .flat_map(|g| {
                g.members
                    .iter()
                    .map(move |m| ((g.id.namespace.as_str(), m.pod.as_str()), &g.id))
            })
            .collect();
        let marked: Vec<Arc<CompactPod>> = pods
            .pods()
            .into_iter()
            .filter(|p| p.deferral().is_some_and(|m| m.hold.is_some()))
            .collect();
        // Record the changes first.
        let mut now_deferred: BTreeMap<GangRef, &'static str> = BTreeMap::new();
        let mut wanted: Vec<(Arc<CompactPod>, &'static str)> = Vec::new();
        let mut unrecorded = false;
        for d in &deferrals {
            let label = d.hold.as_str();
            let members = unbound_pods(view, d, pods);
            if self.holds.get(&d.gang) != Some(&label) {
                let event = deferred_event(d, members.len());
                if !self.append(now_ms, event) {
                    unrecorded = true;
                    // Left as it was: its old hold stays, and so do its pods' marks.
                    if let Some(&old) = self.holds.get(&d.gang) {
                        now_deferred.insert(d.gang.clone(), old);
                        wanted.extend(members.into_iter().map(|p| (p, old)));
                    }
                    continue;
                }
                info!(gang = %d.gang, hold = label, reason = %d.hold.reason(), "kept out of CA's scale-up");
            }
            now_deferred.insert(d.gang.clone(), label);
            wanted.extend(members.into_iter().map(|p| (p, label)));
        }
        // Releases: gangs let back in, and marked pods of no deferred gang (after a start, or
        // of gangs gone).
        let keep: BTreeSet<(&str, &str)> = wanted
            .iter()
            .map(|(p, _)| (p.namespace(), p.name()))
            .collect();
        let mut releasing: BTreeMap<Option<&GangRef>, u32> = BTreeMap::new();
        for p in &marked {
            if !keep.contains(&(p.namespace(), p.name())) {
                *releasing
                    .entry(member_of.get(&(p.namespace(), p.name())).copied())
                    .or_default() += 1;
            }
        }
        for gang in self.holds.keys() {
            if !now_deferred.contains_key(gang) {
                releasing.entry(Some(gang)).or_default();
            }
        }
        let mut held_back: BTreeSet<Option<GangRef>> = BTreeSet::new();
        for (gang, n) in &releasing {
            let event = DeferralEvent {
                node_group: String::new(),
                gang: (*gang).map(GangId::from),
                hold: None,
                reason: "it may be admitted now, or it is no longer pending".to_owned(),
                pods: *n,
            };
            if self.append(now_ms, event) {
                if let Some(g) = gang {
                    info!(gang = %g, pods = n, "let back into CA's scale-up");
                }
            } else {
                unrecorded = true;
                held_back.insert((*gang).cloned());
                if let Some(g) = *gang
                    && let Some(&old) = self.holds.get(g)
                {
                    now_deferred.insert(g.clone(), old);
                }
            }
        }
        // Pods whose release was not recorded stay marked.
        let releasable: Vec<&Arc<CompactPod>> = marked
            .iter()
            .filter(|p| {
                let gang = member_of
                    .get(&(p.namespace(), p.name()))
                    .map(|g| (*g).clone());
                !held_back.contains(&gang)
            })
            .collect();
        self.holds = now_deferred;
        let wanted_states: Vec<(PodState<'_>, &'static str)> =
            wanted.iter().map(|(p, hold)| (state(p), *hold)).collect();
        let marked_states: Vec<PodState<'_>> = releasable.iter().map(|p| state(p)).collect();
        let timing = Timing {
            now_unix: now_ms.div_euclid(1000),
            horizon: settings.horizon,
            floor: settings.floor,
        };
        let changes = plan(&wanted_states, &marked_states, timing);
        let mut failed = 0_u32;
        for change in changes.iter().take(DEFERRAL_PATCHES_PER_TICK) {
            let ok = match settings.marker.apply(change).await {
                Ok(()) => true,
                Err(e) => {
                    failed += 1;
                    debug!(error = %Chain(&e), change = ?change, "deferral pod write failed; retried at the next tick");
                    false
                }
            };
            let outcome = if ok { "success" } else { "failure" };
            self.metrics
                .deferral_patches
                .get_or_create(&OutcomeLabels { outcome })
                .inc();
        }
        if failed > 0 {
            warn!(
                failed,
                "some deferral pod writes failed; retried at the next tick"
            );
        }
        if unrecorded {
            warn!(
                "some deferral changes could not be recorded in the audit log; their pods are left as they were and retried at the next tick"
            );
        }
    }

    /// Appends `event`; false (and the audit metric says so) when it could not be written.
    fn append(&self, now_ms: i64, event: DeferralEvent) -> bool {
        let written = self.recorder.record(&Record::new(now_ms, event)).is_ok();
        self.metrics.audit_append(written);
        written
    }
}

/// The unbound members of deferral `d`'s gang, as the pod store has them.
fn unbound_pods(
    view: &GangView,
    d: &Deferral,
    pods: &crate::cluster::PodStore,
) -> Vec<Arc<CompactPod>> {
    let Ok(i) = view.gangs.binary_search_by(|g| g.id.cmp(&d.gang)) else {
        return Vec::new();
    };
    let gang = &view.gangs[i];
    gang.unbound()
        .filter_map(|m| pods.get(&gang.id.namespace, &m.pod))
        .collect()
}

/// The record of deferring `d`'s gang with `pods` members to mark.
fn deferred_event(d: &Deferral, pods: usize) -> DeferralEvent {
    DeferralEvent {
        node_group: match &d.hold {
            Hold::Covered { group, .. } => group.to_string(),
            _ => String::new(),
        },
        gang: Some(GangId::from(&d.gang)),
        hold: Some(d.hold.as_str().to_owned()),
        reason: d.hold.reason(),
        pods: u32::try_from(pods).unwrap_or(u32::MAX),
    }
}

/// `pod` as [`plan`] sees it.
fn state(pod: &CompactPod) -> PodState<'_> {
    PodState {
        namespace: pod.namespace(),
        name: pod.name(),
        created_unix: pod.created_unix(),
        marks: pod.deferral(),
    }
}
