//! The durable audit log: one JSON line per admission decision (rejections included), per
//! lifecycle phase transition of a scale-up and per terminal outcome, and the report computed
//! from it. Depends on [`crate::model`] and [`crate::planner`] (for the decision it records),
//! serde and std; no async, no Kubernetes client. What writes the phase and outcome records
//! (the lifecycle state machine, its observer and loop) is in `scaleup`.
//!
//! - [`record`]: the versioned record ([`Record`], schema [`SCHEMA_VERSION`]) and its events.
//! - [`log`]: [`AuditLog`], the append-only JSON Lines writer: one `write` plus `fdatasync`
//!   per record, torn-tail repair on open, size-based rotation, optional copy to stdout.
//! - [`read`]: reads log files back, reporting bad or truncated lines with their numbers.
//! - [`report`]: formation-time percentiles and rates per node group for a time window (pure).
//! - [`replicas`]: the logs of several replicas under leader election, one per replica in a
//!   shared directory: finding them and merging their records by time.
//!
//! The schema, the durability guarantees and the report's definitions are published in
//! `docs/audit-schema.md`.

pub mod log;
pub mod read;
pub mod record;
pub mod replicas;
pub mod report;

use std::path::PathBuf;

pub use log::{AuditLog, Config};
pub use read::{BadLine, Reading, log_order, read_files, rotated_paths};
pub use record::{
    CompositeSummary, DecisionEvent, DeferralEvent, DeferredSummary, Event, Extent, GangId,
    GangSummary, Outcome, OutcomeEvent, Phase, PhaseEvent, Record, ReleaseReason, RepairEvent,
    ReservationAction, ReservationEvent, SCHEMA_VERSION, ShareSummary, SpreadPart, Verdict,
    WithdrawalEvent,
};
pub use replicas::{IDENTITY, discover, read_merged, replica_log};
pub use report::{Percentiles, Report, Stats, Window};

/// Audit errors. Every I/O variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The log file (or its directory) could not be opened or created.
    #[error("opening audit log {path}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A torn tail left by a crash could not be cut off.
    #[error("repairing the torn tail of audit log {path}")]
    Repair {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Appending or syncing a record failed; the record is not acknowledged.
    #[error("writing audit log {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Rotating the log failed; the record that triggered it is not acknowledged.
    #[error("rotating audit log {path}")]
    Rotate {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A log file could not be read (missing, unreadable).
    #[error("reading audit log {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A record could not be encoded as JSON (a bug: records are plain data).
    #[error("encoding an audit record")]
    Encode(#[source] serde_json::Error),
}

impl Error {
    /// The error and its causes, `: `-separated: what the disk refused, for logs, readiness
    /// and the RPC's message.
    pub fn chain(&self) -> String {
        crate::telemetry::chain(self)
    }

    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Open { .. } => "open",
            Self::Repair { .. } => "repair",
            Self::Write { .. } => "write",
            Self::Rotate { .. } => "rotate",
            Self::Read { .. } => "read",
            Self::Encode(_) => "encode",
        }
    }
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;
