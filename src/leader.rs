//! Leader election between gangscaler replicas on a `coordination.k8s.io` Lease, so that
//! only one of them acts: admits scale-ups, writes to the backends, runs the kwok and
//! scale-up loops, protects nodes and publishes Events. Why this is written here rather than
//! taken from a crate, and the timings, are in `docs/ha.md`.
//!
//! The algorithm is client-go's (`tools/leaderelection`), which kube-scheduler,
//! kube-controller-manager and Cluster Autoscaler use, from its documented behaviour:
//!
//! - Every `retryPeriod` a replica reads the Lease. A holder other than itself is valid
//!   until `leaseDurationSeconds` after the moment *this replica saw* the Lease change, on
//!   its own monotonic clock; no two clocks are compared, so clock skew between hosts does
//!   not matter (only their rates).
//! - Taking or renewing the Lease is a replace conditional on the `resourceVersion` read
//!   (or a create when there is none), so of two replicas racing, one gets a conflict.
//! - The leader renews every `retryPeriod`. Its authority lasts until `renewDeadline` after
//!   the *start* of its last successful renewal: [`Status::check_acting`] refuses past that
//!   instant even if nothing else has noticed, and the elector gives up there ([`Lost`]).
//!   Since the Lease changed no earlier than that start, and the others count
//!   `leaseDuration` (> `renewDeadline`) from when they saw the change, the leader has
//!   stopped before anyone may take over.
//! - On a clean shutdown the leader, once it has stopped acting, releases the Lease (no
//!   holder, 1 s), so the next replica takes it at its next attempt.
//!
//! The Lease is reached through [`LeaseStore`]: [`KubeLeases`] over the API server, or
//! [`MemoryLeases`] in one process (tests, and several servers in one test process).
//!
//! Depends on `config` (the settings) and `metrics`; nothing else of ours.

mod elector;
pub mod lease;
pub mod memory;
mod status;

use async_trait::async_trait;

pub use elector::{Elector, Lost, Timing};
pub use lease::KubeLeases;
pub use memory::MemoryLeases;
pub use status::{NotLeader, Status};

/// Lease store errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another replica wrote the Lease since it was read, or created it first (HTTP 409).
    #[error("the lease was written by another replica since it was read")]
    Conflict,
    /// The API server refused the request or could not be reached.
    #[error("calling the API server")]
    Api(#[source] kube::Error),
    /// A store without an API server failed (the in-memory store's injected failures).
    #[error("{0}")]
    Unavailable(String),
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The fields of a Lease the election reads and writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    /// `holderIdentity`; `None` (or empty) when nobody holds it.
    pub holder: Option<String>,
    /// `leaseDurationSeconds`.
    pub lease_duration_s: Option<i32>,
    /// `acquireTime`, unix milliseconds.
    pub acquire_ms: Option<i64>,
    /// `renewTime`, unix milliseconds (informational: nobody compares it with a clock).
    pub renew_ms: Option<i64>,
    /// `leaseTransitions`.
    pub transitions: i32,
    /// The `resourceVersion` it was read at; a replace fails with [`Error::Conflict`] if
    /// the Lease has changed since.
    pub version: Option<String>,
}

impl LeaseRecord {
    /// The holder, if there is a non-empty one.
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref().filter(|h| !h.is_empty())
    }
}

/// Where the Lease lives.
#[async_trait]
pub trait LeaseStore: Send + Sync + std::fmt::Debug {
    /// `namespace/name` of the Lease, for logs and messages.
    fn describe(&self) -> String;

    /// The Lease, or `None` if it does not exist.
    ///
    /// # Errors
    /// [`Error::Api`] or [`Error::Unavailable`].
    async fn get(&self) -> Result<Option<LeaseRecord>>;

    /// Creates the Lease with `record`; the record as stored.
    ///
    /// # Errors
    /// [`Error::Conflict`] if it exists already, else [`Error::Api`] or
    /// [`Error::Unavailable`].
    async fn create(&self, record: &LeaseRecord) -> Result<LeaseRecord>;

    /// Replaces the Lease with `record` if it is still at `record.version`; the record as
    /// stored.
    ///
    /// # Errors
    /// [`Error::Conflict`] if it changed since, else [`Error::Api`] or
    /// [`Error::Unavailable`].
    async fn replace(&self, record: &LeaseRecord) -> Result<LeaseRecord>;
}

/// Where a replica stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Not holding the Lease.
    Standby,
    /// Holding the Lease (it may still be taking over: see [`Status::set_acting`]).
    Leading,
    /// Held the Lease and could not renew it in time: it must stop acting at once.
    Lost,
}

#[cfg(test)]
mod tests;
