//! Node reservation where it cannot work, and the group reserves nothing while that lasts:
//! - its backend would not register the new Nodes under the reservation taint (Cluster API:
//!   the MachineDeployment's template lacks it), counted by
//!   `gangscaler_reservation_backend_blocked`;
//! - a DaemonSet on its nodes does not tolerate the taint, counted by
//!   `gangscaler_reservation_blocking_daemon_sets`.
//!
//! Its nodes are created without the taint where gangscaler creates them, the lifecycle loop
//! releases what it held (and what Cluster API tainted anyway), each admitted gang gets a
//! `ReservationOff` Event, and the decision record says why (`reservationOff`).

use tracing::{info, warn};

use super::{Engine, Result};
use crate::metrics::GroupLabels;
use crate::model::NodeGroupSpec;
use crate::planner;
use crate::provision::Provisioner;

/// Why a group reserves nothing when the cluster view does not watch DaemonSets: it starts
/// watching them only when some group reserves at start, so a reload that turns reservation
/// on cannot tell which DaemonSets would be kept off the reserved nodes.
const UNWATCHED: &str = "reservation is off: DaemonSets are not watched (no node group reserved when gangscaler started), so whether they tolerate the reservation taint is unknown; restart gangscaler to reserve";

/// `group` with reservation off.
pub(super) fn without_reservation(group: &NodeGroupSpec) -> NodeGroupSpec {
    let mut g = group.clone();
    g.reservation.enabled = false;
    g
}

impl Engine {
    /// Asks `backend` whether `g`'s new Nodes would carry the reservation taint from
    /// registration and keeps the answer for [`Engine::reservation_off`]; sets the group's
    /// metric and logs a change. Nothing to ask for a group that does not reserve.
    ///
    /// # Errors
    /// The backend's failure to answer (the last answer is kept).
    pub(super) async fn read_backend_blocker(
        &self,
        g: &NodeGroupSpec,
        backend: &dyn Provisioner,
    ) -> Result<()> {
        if !g.reservation.enabled {
            return Ok(());
        }
        let blocker = backend.reservation_blocker(g).await?;
        self.metrics
            .reservation_backend_blocked
            .get_or_create(&GroupLabels {
                node_group: g.id.to_string(),
            })
            .set(i64::from(blocker.is_some()));
        let mut seen = self
            .backend_blockers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = seen.insert(g.id.to_string(), blocker.clone());
        if before.as_ref() != Some(&blocker) {
            match &blocker {
                Some(why) => {
                    warn!(node_group.id = %g.id, backend = backend.kind(), reason = %why, "node reservation off for the group: its backend does not register new nodes reserved");
                }
                None => {
                    info!(node_group.id = %g.id, backend = backend.kind(), "the group's backend registers new nodes reserved");
                }
            }
        }
        Ok(())
    }

    /// Why reservation is off for `g` now although its configuration reserves: its backend
    /// would not register new Nodes under the taint (as last read by
    /// [`Engine::read_backend_blocker`]), else the DaemonSets that would run on its nodes
    /// without tolerating the taint. `None` when the group does not reserve, or nothing keeps
    /// it off, or there is no cluster view to read DaemonSets from. Sets the group's
    /// DaemonSet metric and logs a change.
    pub(super) fn reservation_off(&self, g: &NodeGroupSpec, gpu_label: &str) -> Option<String> {
        if !g.reservation.enabled {
            return None;
        }
        let backend = self
            .backend_blockers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(g.id.as_str())
            .cloned()
            .flatten();
        if backend.is_some() {
            return backend;
        }
        let admission = self.admission.as_ref()?;
        let Some(blocking) = admission.blocking_daemon_sets(g, gpu_label) else {
            return Some(UNWATCHED.to_owned());
        };
        self.metrics
            .reservation_blocking_daemon_sets
            .get_or_create(&GroupLabels {
                node_group: g.id.to_string(),
            })
            .set(i64::try_from(blocking.len()).unwrap_or(i64::MAX));
        let names: Vec<&str> = blocking.iter().map(String::as_str).collect();
        let reason = planner::reservation_off_reason(&names);
        let mut seen = self
            .reservation_off
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = seen.get(g.id.as_str()).cloned().unwrap_or_default();
        if before != blocking {
            match &reason {
                Some(why) => {
                    warn!(node_group.id = %g.id, daemon_sets = ?blocking, reason = %why, "node reservation off for the group");
                }
                None => {
                    info!(node_group.id = %g.id, "node reservation on again for the group: every DaemonSet on its nodes tolerates the taint");
                }
            }
            seen.insert(g.id.to_string(), blocking);
        }
        reason
    }
}
