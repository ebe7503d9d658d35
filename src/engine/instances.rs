//! The engine as the scale-up loop's [`InstanceSource`]: it knows each group's backend.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::{Engine, Error};
use crate::model::Instance;
use crate::scaleup::{InstanceSource, InstancesError};

/// The scale-up loop lists a group's instances through the engine, which knows the group's
/// backend.
#[async_trait]
impl InstanceSource for Engine {
    /// The group's instances, and once each, the failed instances CA deleted since the last
    /// call before any listing showed them to this loop (see the private `failed` module).
    async fn instances(&self, group: &str) -> Result<Vec<Instance>, InstancesError> {
        let mut instances = self.nodes(group).await.map_err(instances_error)?;
        let deleted = self.failed_ledger().take_deleted(group, &instances);
        instances.extend(deleted);
        Ok(instances)
    }

    /// Withdraws the group's pending instances of ended lifecycles (see the private
    /// `withdraw` module).
    async fn withdraw_ended(&self, group: &str) -> Result<u32, InstancesError> {
        Engine::withdraw_ended(self, group)
            .await
            .map_err(instances_error)
    }

    /// Ends the group's scale-ups recorded but never applied (see the private `unapplied`
    /// module).
    async fn close_unapplied(&self, group: &str) -> Result<u32, InstancesError> {
        Engine::close_unapplied(self, group)
            .await
            .map_err(instances_error)
    }

    /// Notified after each admitted scale-up is applied.
    fn scaled_up(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        Some(std::sync::Arc::clone(&self.scaled_up))
    }

    /// The pending gangs to keep out of CA's scale-up (see [`crate::planner::deferrals`]):
    /// none without gang admission or under a policy other than `strict`. Reads every
    /// group's target size from its backend.
    async fn deferrals(
        &self,
        view: &crate::cluster::GangView,
    ) -> Result<Vec<crate::planner::Deferral>, InstancesError> {
        let Some(admission) = &self.admission else {
            return Ok(Vec::new());
        };
        if admission.policy() != crate::planner::Policy::Strict {
            return Ok(Vec::new());
        }
        let cfg = self.config.load();
        let mut targets = Vec::with_capacity(cfg.groups.len());
        for g in &cfg.groups {
            let target = self
                .target_size(g.id.as_str())
                .await
                .map_err(instances_error)?;
            targets.push((g, target));
        }
        Ok(admission.deferrals(view, &targets, &cfg.provider.gpu_label))
    }

    /// Whether the group's backend keeps claims; false for a group no longer configured.
    fn keeps_claims(&self, group: &str) -> bool {
        self.group(group)
            .ok()
            .and_then(|(cfg, idx)| self.backend(&cfg.groups[idx]).ok())
            .is_some_and(|b| b.keeps_claims())
    }

    /// The configured settings, with reservation off for every group a DaemonSet keeps it
    /// off for (see the private `Engine::reservation_off`).
    fn reservations(&self) -> BTreeMap<String, crate::model::ReservationSpec> {
        let cfg = self.config.load();
        cfg.groups
            .iter()
            .map(|g| {
                let mut spec = g.reservation;
                if self.reservation_off(g, &cfg.provider.gpu_label).is_some() {
                    spec.enabled = false;
                }
                (g.id.to_string(), spec)
            })
            .collect()
    }
}

/// An engine error as the scale-up loop sees it: a group no longer configured, or a backend
/// failure.
fn instances_error(e: Error) -> InstancesError {
    match e {
        Error::GroupNotFound(id) => InstancesError::GroupNotFound(id),
        e => InstancesError::Backend(Box::new(e)),
    }
}
