//! Closing the window between a decision's record and its backend write. The record is
//! durable before the backend is asked, so a provider that stops in between (kill -9, a lost
//! machine) leaves a lifecycle open for nodes that were never requested: it would claim
//! nothing, keep its gangs in flight (CA's asks for them covered) and end only at its
//! registration timeout.
//!
//! On a backend that keeps claims, every instance requested carries its scale-up's id, and
//! the claims are stored with the target in one atomic step. So a scale-up that is still
//! `requested`, has charged no failed instance, and whose id no instance (pending, created or
//! failed) carries was never applied. [`Engine::close_unapplied`] ends each such lifecycle
//! `provisionFailed`, saying so, and its gangs stop counting as in flight: CA's next ask
//! admits them afresh. It runs under the increase lock, so a call of this process between its
//! record and its write is never taken for one.

use std::collections::BTreeSet;

use tracing::{error, info};

use super::{Engine, Error, Result};
use crate::audit::Phase;
use crate::clock;
use crate::scaleup::Open;

/// The `reason` of the outcome that ends a scale-up recorded but never applied.
pub const NEVER_APPLIED: &str = "recorded but never applied: no instance carries its claim (the provider stopped between the decision's record and the backend write); the gang no longer counts as in flight";

/// The scale-ups among `open` on `group` that could be unapplied: still `requested`, adding
/// nodes, and without a charged failure.
fn suspects(open: &[Open], group: &str) -> BTreeSet<String> {
    open.iter()
        .filter(|o| {
            o.node_group == group
                && o.phase == Phase::Requested
                && o.nodes > 0
                && o.repair.failed.is_empty()
        })
        .map(|o| o.scale_up_id.clone())
        .collect()
}

impl Engine {
    /// Ends the open lifecycles of group `id` whose scale-up was recorded and never applied
    /// (see the module docs); returns how many lifecycles it ended. Nothing to do (0) without
    /// the audit log or on a backend that keeps no claims. The lifecycle loop calls it on its
    /// first tick after a start or a takeover.
    ///
    /// # Errors
    /// [`Error::GroupNotFound`], [`Error::NotLeader`], the backend's failure to list, or
    /// [`Error::UnappliedUnrecorded`] when an outcome cannot be written (the lifecycle stays
    /// open; the next tick tries again).
    pub async fn close_unapplied(&self, id: &str) -> Result<u32> {
        let Some((recorder, cfg, idx, backend)) = self.claims_kept(id)? else {
            return Ok(0);
        };
        let g = &cfg.groups[idx];
        let _one_at_a_time = self.increases.lock().await;
        self.check_leader()?;
        let open = recorder.open_scale_ups();
        let mut unapplied = suspects(&open, g.id.as_str());
        if unapplied.is_empty() {
            return Ok(0);
        }
        for claim in backend.pending_claims(g).await? {
            unapplied.remove(&claim.scale_up);
        }
        for i in backend.instances(g).await? {
            if let Some(claim) = i.claim {
                unapplied.remove(&claim.scale_up);
            }
        }
        let mut closed = 0;
        for scale_up in unapplied {
            let appended = recorder
                .provision_failed(&scale_up, clock::now_ms(), NEVER_APPLIED)
                .map_err(|e| {
                    self.metrics.audit_append(false);
                    error!(node_group.id = %g.id, scale_up.id = %scale_up, error = %e.chain(), "ending a scale-up recorded but never applied failed; will retry");
                    Error::UnappliedUnrecorded {
                        group: g.id.clone(),
                        scale_up: scale_up.clone(),
                        why: e.chain(),
                    }
                })?;
            self.metrics.audit_append(true);
            let mut gangs: Vec<(String, String)> = Vec::new();
            for a in &appended {
                crate::scaleup::count(&self.metrics, a);
                if let Some(g) = a.before.as_ref().and_then(|o| o.gang.as_ref()) {
                    gangs.push((g.namespace.clone(), g.name.clone()));
                }
            }
            if let Some(admission) = &self.admission {
                let gangs: Vec<(&str, &str)> = gangs
                    .iter()
                    .map(|(n, m)| (n.as_str(), m.as_str()))
                    .collect();
                admission.release_gangs(g.id.as_str(), &gangs);
            }
            info!(node_group.id = %g.id, scale_up.id = %scale_up, lifecycles = appended.len(), "a scale-up recorded but never applied was ended");
            closed += u32::try_from(appended.len()).unwrap_or(u32::MAX);
        }
        Ok(closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::GangId;
    use crate::scaleup::Repair;

    fn open(id: &str, group: &str, phase: Phase, nodes: u32, failed: &[&str]) -> Open {
        Open {
            scale_up_id: id.into(),
            node_group: group.into(),
            gang: Some(GangId {
                namespace: "ml".into(),
                name: "a".into(),
                api_version: "scheduling.k8s.io/v1alpha2".into(),
                kind: "PodGroup".into(),
            }),
            nodes,
            gang_nodes: nodes,
            phase,
            requested_at_ms: 0,
            formed_at_ms: None,
            attached_at_ms: None,
            repair: Repair {
                failed: failed.iter().map(|s| (*s).to_owned()).collect(),
                ..Repair::default()
            },
        }
    }

    #[test]
    fn only_requested_lifecycles_of_the_group_without_failures_are_suspects() {
        let open = [
            open("s1", "h100", Phase::Requested, 2, &[]),
            open("s2", "h100", Phase::InstancesCreated, 2, &[]),
            open("s3", "h100", Phase::Requested, 2, &["i-1"]),
            open("s4", "other", Phase::Requested, 2, &[]),
            open("s5", "h100", Phase::Requested, 0, &[]),
        ];
        assert_eq!(suspects(&open, "h100"), BTreeSet::from(["s1".to_owned()]));
    }
}
