//! Withdrawing the instances of ended lifecycles: capacity requested for a gang (or a
//! scale-up) whose lifecycle has ended, and not created yet, is taken back, so no node comes
//! for a gang that is gone, failed or timed out, or that formed without it.
//!
//! A claim is *live* while a lifecycle it was requested for is open: the lifecycle of its
//! scale-up and gang, or for a claim without a gang, any lifecycle of its scale-up. Every
//! other pending claim on a backend that keeps claims is withdrawn, after its record is
//! durable. The pass runs under the increase lock, so it never sees a decision recorded
//! whose claims are not written yet; it is level-triggered (it compares what is pending with
//! what is open), so a withdrawal a crash or a backend failure interrupted is done by a
//! later pass.

use tracing::info;

use super::{Engine, Error, Result};
use crate::audit::{Record, WithdrawalEvent};
use crate::clock;
use crate::metrics::GroupLabels;
use crate::model::Claim;
use crate::planner::Policy;
use crate::scaleup::Open;

/// Whether `claim` was requested for a lifecycle in `open`.
fn live(claim: &Claim, open: &[Open]) -> bool {
    open.iter().any(|o| {
        o.scale_up_id == claim.scale_up
            && match (&claim.gang, &o.gang) {
                (None, _) => true,
                (Some((ns, name)), Some(g)) => g.namespace == *ns && g.name == *name,
                (Some(_), None) => false,
            }
    })
}

impl Engine {
    /// Withdraws the pending instances of `id` whose claims no open lifecycle holds (see the
    /// module docs); returns how many. Nothing to do (0) without the audit log, without gang
    /// admission or under policy `off` (CA alone takes nothing back), on a backend that keeps
    /// no claims, or while an increase is running (the next pass does it).
    ///
    /// # Errors
    /// [`Error::GroupNotFound`], [`Error::NotLeader`], the backend's failure, or
    /// [`Error::WithdrawalUnrecorded`] when the record cannot be written (nothing is
    /// withdrawn then).
    pub async fn withdraw_ended(&self, id: &str) -> Result<u32> {
        if self
            .admission
            .as_ref()
            .is_none_or(|a| a.policy() == Policy::Off)
        {
            return Ok(0);
        }
        let Some((recorder, cfg, idx, backend)) = self.claims_kept(id)? else {
            return Ok(0);
        };
        let g = &cfg.groups[idx];
        let Ok(_one_at_a_time) = self.increases.try_lock() else {
            return Ok(0);
        };
        self.check_leader()?;
        let open = recorder.open_scale_ups();
        if let Some(admission) = &self.admission {
            admission.forget_ended_repairs(g.id.as_str(), |su, gang| {
                open.iter().any(|o| {
                    o.scale_up_id == su
                        && o.gang.as_ref().is_some_and(|og| {
                            og.namespace == gang.namespace && og.name == gang.name
                        })
                })
            });
        }
        let ended: Vec<Claim> = backend
            .pending_claims(g)
            .await?
            .into_iter()
            .filter(|c| !live(c, &open))
            .collect();
        if ended.is_empty() {
            return Ok(0);
        }
        let count = u32::try_from(ended.len()).unwrap_or(u32::MAX);
        let claims: Vec<String> = ended.iter().map(ToString::to_string).collect();
        let record = Record::new(
            clock::now_ms(),
            WithdrawalEvent {
                node_group: g.id.to_string(),
                claims: claims.clone(),
            },
        );
        if let Err(e) = recorder.record(&record) {
            self.metrics.audit_append(false);
            return Err(Error::WithdrawalUnrecorded {
                group: g.id.clone(),
                instances: count,
                why: e.chain(),
            });
        }
        self.metrics.audit_append(true);
        let result = backend.withdraw(g, &ended).await;
        self.observe(g, "withdraw", &result);
        let withdrawn = result?;
        self.metrics
            .withdrawn_instances
            .get_or_create(&GroupLabels {
                node_group: g.id.to_string(),
            })
            .inc_by(u64::from(withdrawn));
        if let Some(admission) = &self.admission {
            let gangs: Vec<(&str, &str)> = ended
                .iter()
                .filter_map(|c| c.gang.as_ref())
                .map(|(ns, name)| (ns.as_str(), name.as_str()))
                .collect();
            admission.release_gangs(g.id.as_str(), &gangs);
        }
        info!(node_group.id = %g.id, instances = withdrawn, claims = ?distinct(claims), "withdrew the pending instances of ended lifecycles");
        Ok(withdrawn)
    }
}

/// `claims` once each, for the log line.
fn distinct(mut claims: Vec<String>) -> Vec<String> {
    claims.sort();
    claims.dedup();
    claims
}

#[cfg(test)]
mod tests;
