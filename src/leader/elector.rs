//! [`Elector`]: the election loop of one replica (the algorithm is in the parent module's docs).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::{Error, LeaseRecord, LeaseStore, Role, Status};
use crate::config::LeaderElectionSettings;
use crate::telemetry::Chain;

/// The leader held the Lease and could not renew it within `renewDeadline`, or found it
/// held by another replica.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lost the Lease {lease}: {reason}")]
pub struct Lost {
    /// `namespace/name` of the Lease.
    pub lease: String,
    /// What happened.
    pub reason: String,
}

/// The timings and identity an [`Elector`] runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timing {
    /// This replica's holder identity.
    pub identity: String,
    /// See [`LeaderElectionSettings::lease_duration`].
    pub lease_duration: Duration,
    /// See [`LeaderElectionSettings::renew_deadline`].
    pub renew_deadline: Duration,
    /// See [`LeaderElectionSettings::retry_period`].
    pub retry_period: Duration,
}

impl From<&LeaderElectionSettings> for Timing {
    fn from(s: &LeaderElectionSettings) -> Self {
        Self {
            identity: s.identity.clone(),
            lease_duration: s.lease_duration,
            renew_deadline: s.renew_deadline,
            retry_period: s.retry_period,
        }
    }
}

/// Runs the election for one replica (see the module docs).
#[derive(Debug)]
pub struct Elector {
    store: Arc<dyn LeaseStore>,
    timing: Timing,
    status: Status,
    now_ms: fn() -> i64,
    /// The Lease as last read or written, and when this replica saw it change.
    observed: Option<(LeaseRecord, Instant)>,
    /// Store failures in a row (the first is logged at warn, the rest at debug).
    failures: u32,
}

impl Elector {
    /// An elector for `timing.identity` over `store`, publishing to `status`; `now_ms` is
    /// the wall clock, for the Lease's informational times.
    pub fn new(
        store: Arc<dyn LeaseStore>,
        timing: Timing,
        status: Status,
        now_ms: fn() -> i64,
    ) -> Self {
        Self {
            store,
            timing,
            status,
            now_ms,
            observed: None,
            failures: 0,
        }
    }

    /// Tries to take the Lease until it has it, then renews it, until `stop` is cancelled
    /// (then a held Lease is released) or the Lease is lost.
    ///
    /// # Errors
    /// [`Lost`] when this replica held the Lease and could not renew it before
    /// `renewDeadline` passed (or found another holder); it must stop acting at once.
    pub async fn run(mut self, stop: CancellationToken) -> Result<(), Lost> {
        let lease = self.store.describe();
        info!(lease = %lease, identity = %self.timing.identity, "waiting to acquire the lease");
        let mut last_ok = loop {
            let started = crate::clock::mono();
            let attempt =
                tokio::time::timeout(self.timing.renew_deadline, self.try_acquire_or_renew());
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                ok = attempt => if matches!(ok, Ok(true)) { break started; },
            }
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                () = tokio::time::sleep(self.jittered_retry()) => {}
            }
        };
        self.status.renewed(last_ok + self.timing.renew_deadline);
        info!(lease = %lease, identity = %self.timing.identity, "acquired the lease: leading");
        loop {
            tokio::select! {
                () = stop.cancelled() => {
                    self.release().await;
                    return Ok(());
                }
                () = tokio::time::sleep(self.timing.retry_period) => {}
            }
            let started = crate::clock::mono();
            let deadline = last_ok + self.timing.renew_deadline;
            let attempt = tokio::time::timeout_at(deadline, self.try_acquire_or_renew());
            let renewed = tokio::select! {
                () = stop.cancelled() => {
                    self.release().await;
                    return Ok(());
                }
                r = attempt => r,
            };
            match renewed {
                Ok(true) => {
                    last_ok = started;
                    self.status.renewed(started + self.timing.renew_deadline);
                }
                Ok(false) if self.held_by_other().is_some() => {
                    let holder = self.held_by_other().unwrap_or_default();
                    return Err(self.lose(format!("the lease is held by {holder}")));
                }
                Ok(false) if crate::clock::mono() < deadline => {}
                _ => {
                    let since = self.timing.renew_deadline;
                    return Err(self.lose(format!(
                        "not renewed for {} (renewDeadline)",
                        humantime::format_duration(since)
                    )));
                }
            }
        }
    }

    fn lose(&self, reason: String) -> Lost {
        self.status.ended(Role::Lost);
        let lost = Lost {
            lease: self.store.describe(),
            reason,
        };
        error!(lease = %lost.lease, identity = %self.timing.identity, reason = %lost.reason, "leadership lost: stopping at once");
        lost
    }

    /// The holder of the Lease as last seen, if it is not this replica.
    fn held_by_other(&self) -> Option<String> {
        let (record, _) = self.observed.as_ref()?;
        record
            .holder()
            .filter(|h| *h != self.timing.identity)
            .map(str::to_owned)
    }

    /// `retryPeriod` plus up to a fifth more, so that replicas started together spread out.
    fn jittered_retry(&self) -> Duration {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write(self.timing.identity.as_bytes());
        let fraction = (h.finish() % 1000) as f64 / 1000.0;
        self.timing.retry_period.mul_f64(1.0 + 0.2 * fraction)
    }

    fn store_failed(&mut self, what: &'static str, e: &Error) {
        self.failures += 1;
        if self.failures == 1 {
            warn!(lease = %self.store.describe(), error = %Chain(&e), what, "lease request failed; retrying every retryPeriod");
        } else {
            debug!(lease = %self.store.describe(), error = %Chain(&e), what, failures = self.failures, "lease request failed");
        }
    }

    /// One attempt: read the Lease and take or renew it if this replica may. `true` when
    /// this replica holds it now.
    async fn try_acquire_or_renew(&mut self) -> bool {
        let now_ms = (self.now_ms)();
        let duration_s = i32::try_from(self.timing.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let current = match self.store.get().await {
            Ok(c) => c,
            Err(e) => {
                self.store_failed("reading", &e);
                return false;
            }
        };
        // When this replica saw the Lease as it is now: after the read returned, which is no
        // earlier than the holder's last write.
        let seen = crate::clock::mono();
        let Some(current) = current else {
            self.status.observe(None);
            let record = LeaseRecord {
                holder: Some(self.timing.identity.clone()),
                lease_duration_s: Some(duration_s),
                acquire_ms: Some(now_ms),
                renew_ms: Some(now_ms),
                transitions: 0,
                version: None,
            };
            return match self.store.create(&record).await {
                Ok(stored) => self.wrote(stored),
                Err(Error::Conflict) => false,
                Err(e) => {
                    self.store_failed("creating", &e);
                    false
                }
            };
        };
        self.failures = 0;
        if self.observed.as_ref().is_none_or(|(r, _)| *r != current) {
            self.status.observe(current.holder());
            self.observed = Some((current.clone(), seen));
        }
        let mine = current.holder() == Some(self.timing.identity.as_str());
        if let (Some(_), false) = (current.holder(), mine) {
            let duration = current
                .lease_duration_s
                .and_then(|s| u64::try_from(s).ok())
                .map_or(self.timing.lease_duration, Duration::from_secs);
            let since = self.observed.as_ref().map_or(seen, |(_, at)| *at);
            if since + duration > seen {
                return false;
            }
        }
        let record = LeaseRecord {
            holder: Some(self.timing.identity.clone()),
            lease_duration_s: Some(duration_s),
            acquire_ms: if mine {
                current.acquire_ms
            } else {
                Some(now_ms)
            },
            renew_ms: Some(now_ms),
            transitions: if mine {
                current.transitions
            } else {
                current.transitions.saturating_add(1)
            },
            version: current.version.clone(),
        };
        match self.store.replace(&record).await {
            Ok(stored) => self.wrote(stored),
            Err(Error::Conflict) => false,
            Err(e) => {
                self.store_failed("writing", &e);
                false
            }
        }
    }

    fn wrote(&mut self, stored: LeaseRecord) -> bool {
        self.failures = 0;
        self.status.observe(stored.holder());
        self.observed = Some((stored, crate::clock::mono()));
        true
    }

    /// Gives the Lease up (no holder, 1 s) if this replica holds it, so that the next
    /// replica takes it at its next attempt rather than after `leaseDuration`. Best effort,
    /// bounded by `renewDeadline`.
    async fn release(&mut self) {
        self.status.ended(Role::Standby);
        let identity = self.timing.identity.clone();
        let now_ms = (self.now_ms)();
        let store = self.store.clone();
        let attempt = async move {
            let current = store.get().await?;
            let Some(current) = current.filter(|c| c.holder() == Some(identity.as_str())) else {
                return Ok(false);
            };
            let record = LeaseRecord {
                holder: None,
                lease_duration_s: Some(1),
                acquire_ms: current.acquire_ms,
                renew_ms: Some(now_ms),
                transitions: current.transitions,
                version: current.version.clone(),
            };
            store.replace(&record).await.map(|_| true)
        };
        match tokio::time::timeout(self.timing.renew_deadline, attempt).await {
            Ok(Ok(true)) => info!(lease = %self.store.describe(), "released the lease"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                warn!(lease = %self.store.describe(), error = %Chain(&e), "releasing the lease failed; the next leader waits for it to expire")
            }
            Err(_) => {
                warn!(lease = %self.store.describe(), "releasing the lease timed out; the next leader waits for it to expire")
            }
        }
    }
}
