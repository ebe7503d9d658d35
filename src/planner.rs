//! The whole-gang planner: how many fresh nodes of a group a gang needs, which groups can host
//! which gangs, and whether a `NodeGroupIncreaseSize` call may go ahead.
//!
//! The planner is a function: synchronous, deterministic, no I/O, no clock, no randomness.
//! It depends on [`crate::model`] only; the engine feeds it gangs built by the cluster adapters
//! and records what it decides.
//!
//! - [`NodeShape`]: what one fresh node of a group offers ([`shape`]).
//! - [`fit()`]: first-fit-decreasing placement of a gang's unbound members ([`mod@fit`]).
//! - [`plan()`]: every pending gang against every group, for the `plan` command ([`mod@plan`]).
//! - [`admit()`]: the admission decision for one increase ([`mod@admit`]), recorded as a
//!   [`Decision`] ([`decision`]).
//! - [`place_composites()`] and [`combine()`]: composites (CompositePodGroups) admitted whole
//!   across node groups in one increase ([`mod@composite`]).
//! - [`spread_shares()`]: a gang without a topology key admitted over several groups of its
//!   pool when the asked group alone has no room for it ([`mod@spread`]).
//! - [`capacity()`]: every gang shape against every group, with the largest admissible
//!   `minCount`, for `plan --simulate` ([`mod@capacity`]).
//! - [`deferrals()`]: the pending gangs to keep out of CA's scale-up now, and why
//!   ([`mod@defer`]).
//! - [`blocking_daemon_sets()`]: the DaemonSets that keep node reservation off for a group
//!   ([`mod@reservation`]).
//! - [`Reason`]: why something cannot be placed, shared by CLI, audit and metrics ([`explain`]).

pub mod admit;
pub mod capacity;
pub mod composite;
pub mod decision;
pub mod defer;
pub mod explain;
pub mod fit;
pub mod plan;
mod predicates;
pub mod reservation;
pub mod shape;
pub mod spread;

pub use admit::{AdmissionInput, Elsewhere, admit};
pub use capacity::{Capacity, GangShape, GroupCapacity, ShapeCapacity, Threshold, capacity};
pub use composite::{
    CompositeAdmission, CompositeDeferral, CompositeInput, CompositePlan, CompositePreview,
    GroupSlot, combine, considers_composites, place_composites, preview,
};
pub use decision::{
    AdmittedGang, CompositeShares, CoveredGang, Decision, DeferredGang, Extent, GroupShare, Order,
    Policy, Rule, SpreadShare, Verdict,
};
pub use defer::{Deferral, DeferralInput, Hold, deferrals};
pub use explain::Reason;
pub use fit::{GangFit, check_pod, fit, nodes_for_pods};
pub use plan::{FitOutcome, GangPlan, GroupOption, Plan, plan};
pub use reservation::{blocking_daemon_sets, reservation_off_reason};
pub use shape::{Allocatable, NodeShape};
pub use spread::{Spill, spill_of, spread_shares};

#[cfg(test)]
mod tests;
