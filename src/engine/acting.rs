//! Whether this engine may act, and the audit log the acting replica writes: leader election
//! gates every change, and the replica that takes over opens the audit log and resumes the
//! requests still in flight in it.

use std::sync::Arc;

use tracing::info;

use super::admission::Resumed;
use super::{Engine, Result};
use crate::model::{GangRef, NodeGroupId};
use crate::scaleup::Recorder;

impl Engine {
    /// Writes every admission decision to the durable audit log behind `recorder`.
    #[must_use]
    pub fn with_audit(self, recorder: Arc<Recorder>) -> Self {
        self.take_over(recorder);
        self
    }

    /// Refuses every change (`NodeGroupIncreaseSize`, `NodeGroupDeleteNodes`,
    /// `NodeGroupDecreaseTargetSize`) unless `leadership` says this replica acts; reads
    /// are answered either way.
    #[must_use]
    pub fn with_leadership(mut self, leadership: crate::leader::Status) -> Self {
        self.leadership = Some(leadership);
        self
    }

    /// Starts writing the audit log through `recorder` (opened from every replica's logs
    /// when this replica has just become the leader) and resumes the in-flight requests it
    /// holds. Only the first recorder is kept; later calls change nothing.
    pub fn take_over(&self, recorder: Arc<Recorder>) {
        if self.audit.set(recorder).is_ok() {
            self.resume_in_flight();
        }
    }

    /// Why the audit log cannot be written now (its last append failed), or `None` while it
    /// can, or when there is none; every scale-up is refused meanwhile.
    pub fn audit_unwritable(&self) -> Option<String> {
        self.audit.get().and_then(|r| r.log().unwritable())
    }

    /// `Ok` unless leader election says this replica may not act now.
    pub(super) fn check_leader(&self) -> Result<()> {
        match &self.leadership {
            Some(l) => Ok(l.check_acting()?),
            None => Ok(()),
        }
    }

    /// With both admission and the audit log: the nodes requested for gangs whose scale-up is
    /// open and not formed yet count as in flight again, so a restart does not request them
    /// twice.
    pub(super) fn resume_in_flight(&self) {
        let (Some(admission), Some(recorder)) = (&self.admission, self.audit.get()) else {
            return;
        };
        let entries: Vec<Resumed> = recorder
            .open_scale_ups()
            .into_iter()
            .filter(|o| o.phase < crate::audit::Phase::GangFormed)
            .filter_map(|o| {
                let gang = o.gang.as_ref()?;
                let nodes = if o.gang_nodes > 0 {
                    o.gang_nodes
                } else {
                    o.nodes
                };
                Some(Resumed {
                    gang: GangRef::from(gang),
                    group: NodeGroupId::new(&o.node_group),
                    nodes: nodes.saturating_add(o.repair.replaced),
                    since_unix: o.last_request_ms().div_euclid(1000),
                    failed: o
                        .repair
                        .failed
                        .iter()
                        .map(|i| (i.clone(), o.scale_up_id.clone()))
                        .collect(),
                })
            })
            .collect();
        if !entries.is_empty() {
            info!(
                gangs = entries.len(),
                "in-flight requests resumed from the audit log"
            );
        }
        admission.resume(entries);
    }
}
