//! Node reservation where it cannot work: a group configured to reserve whose nodes run a
//! DaemonSet that does not tolerate the reservation taint reserves nothing while that lasts.
//! Its nodes are created without the taint, the lifecycle loop releases what it held, each
//! admitted gang gets a `ReservationOff` Event, the decision record says why
//! (`reservationOff`), and `gangscaler_reservation_blocking_daemon_sets` counts them.

use tracing::{info, warn};

use super::Engine;
use crate::model::NodeGroupSpec;
use crate::planner;

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
    /// Why reservation is off for `g` now although its configuration reserves: the
    /// DaemonSets that would run on its nodes without tolerating the taint. `None` when the
    /// group does not reserve, or none does, or there is no cluster view to read DaemonSets
    /// from. Sets the group's metric and logs a change.
    pub(super) fn reservation_off(&self, g: &NodeGroupSpec, gpu_label: &str) -> Option<String> {
        if !g.reservation.enabled {
            return None;
        }
        let admission = self.admission.as_ref()?;
        let Some(blocking) = admission.blocking_daemon_sets(g, gpu_label) else {
            return Some(UNWATCHED.to_owned());
        };
        self.metrics
            .reservation_blocking_daemon_sets
            .get_or_create(&crate::metrics::GroupLabels {
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
