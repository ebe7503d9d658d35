//! [`Recorder`]: the scale-up [`Tracker`] paired with the durable [`AuditLog`], so that a
//! restart neither repeats nor loses a record. It appends each record and only then applies it
//! to the tracker. On restart, [`Recorder::open`] rebuilds the tracker from the log files, so:
//!
//! - **No duplicates.** A phase or outcome is emitted only when it is past what the log holds;
//!   the log holds exactly the acknowledged records, and the tracker is rebuilt from them.
//! - **Nothing dropped.** Observations are of state, not of edges: a transition that happened
//!   while gangscaler was down, or whose record failed to append, is still visible in the
//!   cluster at the next [`Recorder::reconcile`] and is recorded then (at observation time;
//!   phases observed together are recorded as the latest of them).
//!
//! Depends on `audit` (the log, its reader and record types) and `planner` (the decision it
//! records); the only I/O is the log's.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use super::track::{Observation, Open, Timeouts, Tracker};
use crate::audit::{
    self, AuditLog, BadLine, Config, DecisionEvent, Event, Outcome, OutcomeEvent, Phase,
    PhaseEvent, Record, read_files, rotated_paths,
};
use crate::planner;

/// A record [`Recorder::reconcile`] appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The record.
    pub record: Record,
    /// Its lifecycle just before the record was applied.
    pub before: Option<Open>,
}

impl Appended {
    /// The record is the first to show its gang formed (a phase at or past `gangFormed` of a
    /// lifecycle with a gang that had not formed): the moment formation time is measured.
    pub fn first_formed(&self) -> Option<&PhaseEvent> {
        let Event::Phase(p) = &self.record.event else {
            return None;
        };
        let before = self.before.as_ref()?;
        (p.gang.is_some() && p.phase >= Phase::GangFormed && before.formed_at_ms.is_none())
            .then_some(p)
    }
}

/// An [`AuditLog`] and the [`Tracker`] rebuilt from it: the engine's one handle on the audit.
#[derive(Debug)]
pub struct Recorder {
    log: AuditLog,
    // Held across the append so that the tracker never runs ahead of (or behind) the log.
    tracker: Mutex<Tracker>,
}

/// What [`Recorder::open`] found in the existing log files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resumed {
    /// Files read, oldest first.
    pub files: Vec<PathBuf>,
    /// Records read.
    pub records: usize,
    /// Lines skipped (at most [`audit::read::MAX_BAD_LINES_PER_FILE`] per file listed).
    pub bad: Vec<BadLine>,
    /// Lines skipped past those listed in `bad`.
    pub bad_unlisted: u64,
    /// Lifecycles still open.
    pub open: usize,
    /// Bytes of a torn last line cut off.
    pub repaired_bytes: u64,
}

impl Recorder {
    /// Opens the log at `path` (repairing a torn tail), reads it and its rotated files, and
    /// resumes the lifecycles they leave open.
    ///
    /// # Errors
    /// The [`AuditLog::open`] errors, or [`audit::Error::Read`].
    pub fn open(
        path: impl Into<PathBuf>,
        config: Config,
        timeouts: Timeouts,
    ) -> audit::Result<(Self, Resumed)> {
        Self::open_merged(path, config, timeouts, &[])
    }

    /// [`Recorder::open`], resuming from `others` too: the files of other logs (other
    /// replicas' logs under leader election, see [`audit::replicas`]), whose records are
    /// merged with this log's by time ([`audit::read_merged`]). This log writes on; the
    /// others are only read. A file of this log listed in `others` is read once.
    ///
    /// # Errors
    /// The [`AuditLog::open`] errors, or [`audit::Error::Read`].
    pub fn open_merged(
        path: impl Into<PathBuf>,
        config: Config,
        timeouts: Timeouts,
        others: &[PathBuf],
    ) -> audit::Result<(Self, Resumed)> {
        let log = AuditLog::open(path, config)?;
        let mut files = rotated_paths(log.path())?;
        let reading = if others.is_empty() {
            read_files(&files)?
        } else {
            files.extend(others.iter().cloned());
            files = audit::log_order(&files);
            audit::read_merged(&files)?
        };
        let tracker = Tracker::resume(timeouts, &reading.records);
        let resumed = Resumed {
            files,
            records: reading.records.len(),
            bad: reading.bad,
            bad_unlisted: reading.bad_unlisted,
            open: tracker.open_count(),
            repaired_bytes: log.repaired_bytes(),
        };
        Ok((
            Self {
                log,
                tracker: Mutex::new(tracker),
            },
            resumed,
        ))
    }

    /// The log.
    pub fn log(&self) -> &AuditLog {
        &self.log
    }

    fn tracker(&self) -> std::sync::MutexGuard<'_, Tracker> {
        // The tracker is only changed after a successful append, so it is consistent even if
        // a holder panicked.
        self.tracker.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The open lifecycles.
    pub fn open_scale_ups(&self) -> Vec<Open> {
        self.tracker().open().cloned().collect()
    }

    /// How many lifecycles are open.
    pub fn open_count(&self) -> usize {
        self.tracker().open_count()
    }

    /// Records an admission decision made at `now_ms`. Call it *before* the provisioner is
    /// asked: an accepted decision with nodes to add gets a new scale-up id (returned), and the
    /// increase may be applied only once this returned `Ok`; if the provisioner then fails,
    /// [`Recorder::provision_failed`] ends the lifecycles the record opened.
    ///
    /// # Errors
    /// The [`AuditLog::append`] errors; the decision is then not recorded.
    pub fn decision(
        &self,
        decision: &planner::Decision,
        now_ms: i64,
        duration_ms: Option<u64>,
    ) -> audit::Result<Option<String>> {
        let mut tracker = self.tracker();
        let mut event = DecisionEvent::from(decision);
        event.duration_ms = duration_ms;
        if decision.is_accepted() && decision.applied_delta > 0 {
            event.scale_up_id = Some(tracker.next_id(now_ms));
        }
        let id = event.scale_up_id.clone();
        let record = Record::new(now_ms, event);
        self.log.append(&record)?;
        tracker.apply(&record);
        Ok(id)
    }

    /// Ends every lifecycle that scale-up `scale_up_id` opened, and that is still open, with a
    /// `provisionFailed` outcome at `now_ms` saying `reason`: its decision was recorded, then
    /// the backend refused or failed the increase. Returns the records appended, each with the
    /// lifecycle it ended.
    ///
    /// # Errors
    /// The first [`AuditLog::append`] error; the lifecycles not ended stay open (in the log as
    /// in the tracker) and end by their timeouts, as if the nodes never came.
    pub fn provision_failed(
        &self,
        scale_up_id: &str,
        now_ms: i64,
        reason: &str,
    ) -> audit::Result<Vec<Appended>> {
        let mut tracker = self.tracker();
        let ending: Vec<Open> = tracker
            .open()
            .filter(|o| o.scale_up_id == scale_up_id)
            .cloned()
            .collect();
        let mut done = Vec::with_capacity(ending.len());
        for open in ending {
            let record = Record::new(
                now_ms,
                OutcomeEvent {
                    scale_up_id: open.scale_up_id.clone(),
                    node_group: open.node_group.clone(),
                    gang: open.gang.clone(),
                    outcome: Outcome::ProvisionFailed,
                    requested_at_ms: open.requested_at_ms,
                    formed_at_ms: None,
                    attached_at_ms: None,
                    pending_since_ms: None,
                    attach_failures: 0,
                    duration_ms: u64::try_from(now_ms.saturating_sub(open.requested_at_ms))
                        .unwrap_or(0),
                    reason: reason.to_owned(),
                },
            );
            self.log.append(&record)?;
            tracker.apply(&record);
            done.push(Appended {
                record,
                before: Some(open),
            });
        }
        Ok(done)
    }

    /// Appends any record (e.g. `provisionFailed` straight after a failed call) and applies it.
    ///
    /// # Errors
    /// The [`AuditLog::append`] errors; the record is then not recorded.
    pub fn record(&self, record: &Record) -> audit::Result<()> {
        let mut tracker = self.tracker();
        self.log.append(record)?;
        tracker.apply(record);
        Ok(())
    }

    /// Brings every open lifecycle up to date with what `observe` says the cluster shows at
    /// `now_ms` (see [`Tracker::plan`]); returns the records appended, each with the
    /// lifecycle as it was before them (for metrics and events that fire on a transition).
    ///
    /// # Errors
    /// The first [`AuditLog::append`] error, with the records appended before it (kept and
    /// applied); the rest are computed again by the next call.
    pub fn reconcile(
        &self,
        now_ms: i64,
        observe: impl FnMut(&Open) -> Option<Observation>,
    ) -> Result<Vec<Appended>, (audit::Error, Vec<Appended>)> {
        let mut tracker = self.tracker();
        let records = tracker.plan(now_ms, observe);
        let mut done = Vec::with_capacity(records.len());
        for record in records {
            let before = record.lifecycle().and_then(|k| tracker.get(&k).cloned());
            if let Err(e) = self.log.append(&record) {
                return Err((e, done));
            }
            tracker.apply(&record);
            done.push(Appended { record, before });
        }
        Ok(done)
    }
}
