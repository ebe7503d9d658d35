//! The I/O of a cross-group scale-up (a composite admitted whole across node groups, or a
//! gang spread over the groups of its pool, inside one `NodeGroupIncreaseSize`): reading the other groups' targets, logging each decision,
//! ending the recorded lifecycles when the scale-up cannot go ahead, and taking back the
//! shares already added.

use std::sync::Arc;

use tracing::{error, info, warn};

use super::decisions::decision_verdict;
use super::reservation::without_reservation;
use super::{Engine, Error, Result};
use crate::clock;
use crate::config::Loaded;
use crate::model::{NodeGroupId, NodeGroupSpec};
use crate::planner::Decision;
use crate::provision::Provisioner;
use crate::telemetry::Chain;

impl Engine {
    /// The target size of every group of `cfg` but `asked`, as `(index in cfg.groups,
    /// target)`, in configuration order. A group whose backend cannot answer is left out (it
    /// takes no share of a composite or spread gang in this decision) and logged. The reads
    /// go out together: the call waits for the slowest backend, not for their sum.
    pub(super) async fn other_targets(
        &self,
        cfg: &Loaded,
        asked: &NodeGroupSpec,
    ) -> Vec<(usize, u32)> {
        let reads = cfg
            .groups
            .iter()
            .enumerate()
            .filter(|(_, g)| g.id != asked.id)
            .filter_map(|(i, g)| self.backend(g).ok().map(|b| (i, g, b)))
            .map(|(i, g, backend)| async move { (i, g, backend.target_size(g).await) });
        let mut out = Vec::with_capacity(cfg.groups.len());
        for (i, g, read) in futures::future::join_all(reads).await {
            match read {
                Ok(target) => out.push((i, target)),
                Err(e) => {
                    warn!(node_group.id = %g.id, asked = %asked.id, error = %Chain(&e), "target size unreadable: the group takes no share of a composite or spread gang in this decision");
                }
            }
        }
        out
    }

    /// The spec and backend of `id`, a group a composite takes a share of.
    pub(super) fn companion<'c>(
        &self,
        cfg: &'c Loaded,
        id: &NodeGroupId,
    ) -> Result<(&'c NodeGroupSpec, &Arc<dyn Provisioner>)> {
        let g = cfg
            .groups
            .binary_search_by(|g| g.id.cmp(id))
            .ok()
            .map(|i| &cfg.groups[i])
            .ok_or_else(|| Error::GroupNotFound(id.to_string()))?;
        Ok((g, self.backend(g)?))
    }

    /// `g` as the backend is asked to grow it: without the reservation taint when the
    /// decision says a DaemonSet (or the backend) keeps reservation off.
    pub(super) fn maybe_unreserved(&self, g: &NodeGroupSpec, d: &Decision) -> NodeGroupSpec {
        if d.reservation_off.is_some() {
            without_reservation(g)
        } else {
            g.clone()
        }
    }

    /// Logs one admission decision with its record.
    pub(super) fn log_decision(&self, d: &Decision, ca_delta: u32) {
        self.metrics.admission(decision_verdict(d), d.rule.as_str());
        let record = serde_json::to_string(d).unwrap_or_default();
        info!(
            node_group.id = %d.group,
            policy = d.policy.as_str(),
            verdict = decision_verdict(d),
            rule = d.rule.as_str(),
            ca_delta,
            applied_delta = d.applied_delta,
            target_size = d.target,
            gangs.admitted = d.admitted.len(),
            gangs.deferred = d.deferred.len(),
            composites = d.composites.len(),
            reason = %d.reason,
            record = %record,
            "admission decision"
        );
    }

    /// Ends the lifecycles of the recorded scale-ups with `provisionFailed` and `reason`. If
    /// even that record cannot be written, they end by their registration timeout.
    pub(super) fn fail_recorded(
        &self,
        recorded: &[(&NodeGroupSpec, Option<String>)],
        reason: &str,
    ) {
        let Some(recorder) = self.audit.get() else {
            return;
        };
        for (group, id) in recorded {
            let Some(id) = id else { continue };
            match recorder.provision_failed(id, clock::now_ms(), reason) {
                Ok(appended) => {
                    self.metrics.audit_append(true);
                    for a in &appended {
                        crate::scaleup::count(&self.metrics, a);
                    }
                }
                Err(w) => {
                    error!(node_group.id = %group.id, scale_up.id = %id, error = %w.chain(), "recording the failed increase failed; its lifecycle ends by its registration timeout");
                    self.metrics.audit_append(false);
                }
            }
        }
    }

    /// Takes back the shares `added` (group, nodes) of a cross-group scale-up whose other
    /// part failed: their nodes are not created yet, so lowering the target cancels them. A
    /// share that cannot be taken back is logged; CA removes unneeded nodes as usual.
    pub(super) async fn withdraw(&self, added: &[(&NodeGroupSpec, u32)]) {
        for (g, nodes) in added {
            let Ok(backend) = self.backend(g) else {
                continue;
            };
            let result = backend.decrease_target(g, *nodes).await;
            self.observe(g, "decrease_target", &result);
            match result {
                Ok(target) => {
                    self.note_target(g, target, false);
                    info!(node_group.id = %g.id, nodes, target, "share of a cross-group scale-up withdrawn");
                }
                Err(e) => {
                    error!(node_group.id = %g.id, nodes, error = %Chain(&e), "withdrawing a share of a cross-group scale-up failed: its nodes stay until CA scales them down");
                }
            }
        }
    }
}
