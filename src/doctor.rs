//! `gangscaler doctor`: is this cluster ready for gang admission? The cluster, CA's and the
//! scheduler's flags and gangscaler's configuration are read at the edge ([`probe`], and the
//! CLI for files) into a plain [`Observed`]; [`checks::report`] turns that into a [`Report`]
//! of rows (check, status, what was found, what to do) without any I/O. Depends on `model`
//! (label keys), `provision` (kwok provider ids, the Kubernetes client) and `yaml` (the
//! scheduler's configuration file).

pub mod checks;
pub mod flags;
mod observed;
pub mod probe;

use std::fmt::Write as _;

use serde::Serialize;

pub use checks::report;
pub use flags::{Flag, Version};
pub use observed::{
    COMPOSITE_CHILDREN_LISTED, Component, CompositeChildSeen, CsiDriverSeen, CsiNodeSeen, Found,
    GroupSeen, LinkProbe, NodeSeen, Observed, ProviderSeen, Read, SchedulerConfig, ServedVersion,
};

/// The `schema` of the JSON report; a change that removes or renames a field bumps it.
pub const SCHEMA: &str = "gangscaler.io/doctor/v1";

/// Errors of reading doctor's inputs (files and flag values); a failed read of the cluster is
/// not an error but a row of the report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A flags file could not be read.
    #[error("{flag}")]
    FlagsFile {
        /// The command-line flag that named the file, e.g. `--ca-flags`.
        flag: &'static str,
        /// Why (it names the file).
        #[source]
        source: crate::yaml::ReadError,
    },
    /// A flags file was read but holds no usable flags.
    #[error("{flag} {path}: {message}")]
    FlagsText {
        /// The command-line flag that named the file.
        flag: &'static str,
        /// The file.
        path: String,
        /// What is wrong, with the line when known.
        message: String,
    },
    /// A version given on the command line is not a Kubernetes version.
    #[error("{flag} {value:?}: expected a version such as 1.36.1 or v1.36.1")]
    BadVersion {
        /// The command-line flag, e.g. `--ca-version`.
        flag: &'static str,
        /// The value given.
        value: String,
    },
}

/// Result of reading doctor's inputs.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to do.
    Ok,
    /// Could not be determined from what was read.
    Unknown,
    /// Works, but hurts gangs or will break on upgrade.
    Warn,
    /// Gang admission does not work as configured.
    Error,
}

impl Status {
    /// `ok`, `warn`, `error` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Unknown => "unknown",
            Self::Warn => "warn",
            Self::Error => "error",
        }
    }
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// Stable id, e.g. `gang-api` or `ca-flag/expander` (see `docs/doctor.md`).
    pub id: String,
    /// The outcome.
    pub status: Status,
    /// What was found.
    pub found: String,
    /// What to do; empty when nothing.
    pub action: String,
}

impl Row {
    /// A row.
    pub fn new(
        id: impl Into<String>,
        status: Status,
        found: impl Into<String>,
        action: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            status,
            found: found.into(),
            action: action.into(),
        }
    }
}

/// The flags one component needs, to turn gang admission on or to roll it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ComponentFlags {
    /// `kube-apiserver`, `kube-controller-manager`, `kube-scheduler` or `cluster-autoscaler`.
    pub component: String,
    /// Exact flags, e.g. `--feature-gates=GenericWorkload=true`; empty when none is needed.
    pub flags: Vec<String>,
    /// Why, or what else to know.
    pub note: String,
}

/// The enable and roll-back lines for the cluster's minor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lines {
    /// The minor the lines are for, e.g. `1.36`.
    pub minor: String,
    /// To turn gang admission on, in this order.
    pub enable: Vec<ComponentFlags>,
    /// To turn it off again, in this order.
    pub rollback: Vec<ComponentFlags>,
    /// What a roll-back does to existing objects and pods.
    pub warning: String,
}

/// Counts of rows per status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// `ok` rows.
    pub ok: usize,
    /// `warn` rows.
    pub warn: usize,
    /// `error` rows.
    pub error: usize,
    /// `unknown` rows.
    pub unknown: usize,
}

/// Facts the checks derived, for scripts (every value may be `null` when unknown).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Facts {
    /// kube-apiserver's `gitVersion`, e.g. `v1.36.2`.
    pub kubernetes_version: Option<String>,
    /// The gang API this minor should serve, e.g. `scheduling.k8s.io/v1alpha2`.
    pub expected_gang_api: Option<String>,
    /// Every version of `scheduling.k8s.io` served, with its gang resources.
    pub served: Vec<ServedVersion>,
    /// Gate name to `on`, `off` or `unknown`.
    pub gates: std::collections::BTreeMap<String, String>,
    /// The pod field that links a pod to its gang on this minor, e.g. `spec.schedulingGroup`.
    pub pod_link_field: Option<String>,
    /// Whether a server-side dry-run create kept that field (`null`: not probed or failed).
    pub pod_link_kept: Option<bool>,
    /// kube-scheduler's version, when known.
    pub scheduler_version: Option<String>,
    /// Cluster Autoscaler's version, when known.
    pub ca_version: Option<String>,
}

/// The whole outcome of `gangscaler doctor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The worst status of any row (`unknown` counts below `warn`).
    pub status: Status,
    /// Rows per status.
    pub summary: Summary,
    /// One row per check, in a fixed order.
    pub checks: Vec<Row>,
    /// The enable and roll-back lines, when the minor is known.
    pub lines: Option<Lines>,
    /// What the checks derived.
    pub facts: Facts,
}

impl Report {
    /// Builds the report from its rows: the status and summary follow from them.
    pub fn new(checks: Vec<Row>, lines: Option<Lines>, facts: Facts) -> Self {
        let mut summary = Summary::default();
        for r in &checks {
            match r.status {
                Status::Ok => summary.ok += 1,
                Status::Warn => summary.warn += 1,
                Status::Error => summary.error += 1,
                Status::Unknown => summary.unknown += 1,
            }
        }
        let status = checks.iter().map(|r| r.status).max().unwrap_or(Status::Ok);
        Self {
            schema: SCHEMA,
            status,
            summary,
            checks,
            lines,
            facts,
        }
    }

    /// The ids of the `error` rows.
    pub fn failed(&self) -> Vec<&str> {
        self.checks
            .iter()
            .filter(|r| r.status == Status::Error)
            .map(|r| r.id.as_str())
            .collect()
    }

    /// The human table: one row per check (the action indented below it), then the enable
    /// and roll-back lines and the summary.
    pub fn to_table(&self) -> String {
        let width = self
            .checks
            .iter()
            .map(|r| r.id.len())
            .max()
            .unwrap_or(5)
            .max(5);
        let mut out = String::new();
        let _ = writeln!(out, "{:<width$}  {:<7}  FOUND / ACTION", "CHECK", "STATUS");
        for r in &self.checks {
            let _ = writeln!(
                out,
                "{:<width$}  {:<7}  {}",
                r.id,
                r.status.as_str(),
                r.found
            );
            if !r.action.is_empty() {
                let _ = writeln!(out, "{:<width$}  {:<7}  -> {}", "", "", r.action);
            }
        }
        if let Some(lines) = &self.lines {
            let _ = writeln!(
                out,
                "\nEnable gang admission on {} (in this order):",
                lines.minor
            );
            write_lines(&mut out, &lines.enable);
            let _ = writeln!(out, "\nRoll back (in this order):");
            write_lines(&mut out, &lines.rollback);
            let _ = writeln!(out, "  warning: {}", lines.warning);
        }
        let s = &self.summary;
        let _ = writeln!(
            out,
            "\n{}: {} ok, {} warn, {} error, {} unknown",
            self.status.as_str(),
            s.ok,
            s.warn,
            s.error,
            s.unknown
        );
        out
    }
}

fn write_lines(out: &mut String, lines: &[ComponentFlags]) {
    for c in lines {
        let flags = if c.flags.is_empty() {
            "(no flag)".to_owned()
        } else {
            c.flags.join(" ")
        };
        let _ = writeln!(out, "  {:<24} {flags}", c.component);
        if !c.note.is_empty() {
            let _ = writeln!(out, "  {:<24} ({})", "", c.note);
        }
    }
}
