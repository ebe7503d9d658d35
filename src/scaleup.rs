//! What happens after a scale-up: from the admission decision that added nodes to a node group
//! until the gang it was for runs, or the reason it did not. Everything about that lifecycle
//! is here; the records it writes are defined in [`crate::audit`] (their schema is
//! `docs/audit-schema.md`).
//!
//! **Phases.** An accepted decision with a scale-up id opens one lifecycle per admitted gang
//! (or one without a gang) in phase `requested`. It only moves forward, through
//! `instancesCreated`, `nodesRegistered`, `nodesReady`, `gangFormed` and `volumesAttached`
//! ([`Phase`](crate::audit::Phase)); phases observed together are recorded as the latest.
//!
//! **Outcomes.** It ends exactly once ([`Outcome`](crate::audit::Outcome)): `succeeded`,
//! `provisionFailed`, `registrationTimeout`, `formationTimeout`, `attachFailed`, `cancelled`
//! or `preempted`, observed in the cluster or decided by a timeout ([`Timeouts`]).
//!
//! From the cluster inward and back out:
//!
//! - [`mod@progress`]: how far each gang ([`GangProgress`]) and node ([`NodeProgress`]) has
//!   come, computed from the cluster's objects. Pure.
//! - [`mod@observe`]: which nodes are each scale-up's, and the phase and outcome the cluster
//!   shows for each open lifecycle ([`Facts`] in, [`Observation`]s out). Pure.
//! - [`track`]: the state machine, [`Tracker`]: a fold over records that knows the open
//!   lifecycles ([`Open`]) and the records that bring each up to date. Pure.
//! - [`recorder`]: [`Recorder`] pairs the tracker with the durable
//!   [`AuditLog`](crate::audit::AuditLog) (append, then apply) and rebuilds it on restart, so
//!   no record is written twice or lost.
//! - [`events`]: the Kubernetes Events each appended record produces. Pure.
//! - [`reserve`]: which nodes are held for which gang (node reservation: a taint only the
//!   gang's members tolerate) and why a reservation ends. Pure.
//! - [`protect`]: which nodes CA's scale-down must leave alone while their gang forms, and
//!   the node annotations that say so, with the reservation taint (pure plan, one patch per
//!   node).
//! - [`run`]: [`Loop`], the I/O: every `lifecycle.interval` it gathers the facts, reconciles,
//!   and updates the metrics and events. It lists a group's instances through
//!   [`InstanceSource`], which the engine implements. From the same gang view it also warns
//!   about pending gangs Cluster Autoscaler cannot see
//!   ([`cluster::unseen`](crate::cluster::unseen())), before any scale-up exists for them.
//!
//! Depends on `cluster`, `audit`, `events`, `metrics`, `planner` (the decision the recorder
//! writes) and `model`; never on `engine`.

pub mod defer;
pub mod events;
pub mod observe;
pub mod progress;
pub mod protect;
pub mod recorder;
pub mod reserve;
pub mod run;
pub mod track;

#[cfg(test)]
mod test_support;

pub use observe::{Facts, GroupFacts, observe};
pub use progress::{
    GangProgress, NodeProgress, ProgressCache, group_facts, node_progress, open_gang_progress,
    progress, progress_of,
};
pub use protect::Marker;
pub use recorder::{Appended, Recorder, Resumed};
pub use run::{InstanceSource, InstancesError, Loop, count};
pub use track::{Key, Observation, Open, Repair, Timeouts, Tracker};
