//! What the engine records of its decisions: Kubernetes Events, audit records, the
//! provisionFailed outcome of a failed increase, and the RPC metrics.

use tracing::{error, info};

use super::{Engine, Result};
use crate::model::NodeGroupSpec;
use crate::provision::{self};

pub(super) fn decision_verdict(d: &crate::planner::Decision) -> &'static str {
    if d.is_accepted() { "accept" } else { "reject" }
}

impl Engine {
    /// Publishes a decision's Kubernetes Events.
    pub(super) fn publish_decision(&self, decision: &crate::planner::Decision) {
        if let Some(events) = &self.events {
            events.decision(decision);
        }
    }

    /// Appends a decision to the audit log (when there is one) and returns the scale-up id it
    /// opened. A failed write is logged and counted, and returned as its error chain: the
    /// caller must not act on the decision.
    pub(super) fn record_decision(
        &self,
        decision: &crate::planner::Decision,
        now_ms: i64,
    ) -> Result<Option<String>, String> {
        let Some(recorder) = self.audit.get() else {
            return Ok(None);
        };
        match recorder.decision(decision, now_ms, None) {
            Ok(id) => {
                self.metrics.audit_append(true);
                if let Some(id) = &id {
                    info!(node_group.id = %decision.group, scale_up.id = %id, "scale-up recorded");
                }
                Ok(id)
            }
            Err(e) => {
                let why = e.chain();
                error!(node_group.id = %decision.group, error = %why, "writing the audit log failed");
                self.metrics.audit_append(false);
                Err(why)
            }
        }
    }

    /// Compares the target an increase reports (the new one, or the one an
    /// [`provision::Error::AboveMax`] refusal names) with the group's `maxSize`.
    pub(super) fn note_increase(&self, g: &NodeGroupSpec, result: &provision::Result<u32>) {
        match result {
            Ok(target)
            | Err(provision::Error::AboveMax {
                current: target, ..
            }) => {
                self.note_target(g, *target, false);
            }
            Err(_) => {}
        }
    }

    pub(super) fn observe<T>(
        &self,
        group: &NodeGroupSpec,
        operation: &'static str,
        result: &provision::Result<T>,
    ) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(e) => e.kind(),
        };
        self.metrics
            .provision_call(group.backend.kind(), operation, outcome);
    }
}
