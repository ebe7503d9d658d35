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

pub mod lease;
pub mod memory;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::telemetry::Chain;
use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

pub use lease::KubeLeases;
pub use memory::MemoryLeases;

use crate::config::LeaderElectionSettings;
use crate::metrics::Metrics;

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

/// Why this replica may not act now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotLeader {
    /// Another replica holds the Lease, or nobody does yet.
    #[error(
        "this gangscaler replica ({identity}) is a standby: {}; only the leader changes node groups (its Service routes to the ready replica), retry there",
        leader_text(leader.as_deref(), lease)
    )]
    Standby {
        /// This replica.
        identity: String,
        /// The holder this replica last saw.
        leader: Option<String>,
        /// `namespace/name` of the Lease.
        lease: String,
    },
    /// This replica holds the Lease and is resuming from the shared state.
    #[error(
        "this gangscaler replica ({identity}) has just taken the Lease {lease} and is resuming from the audit log; retry shortly"
    )]
    TakingOver {
        /// This replica.
        identity: String,
        /// `namespace/name` of the Lease.
        lease: String,
    },
    /// This replica could not renew the Lease in time and is stopping.
    #[error(
        "this gangscaler replica ({identity}) could not renew the Lease {lease} in time and is stopping; another replica takes over within the lease duration"
    )]
    Lost {
        /// This replica.
        identity: String,
        /// `namespace/name` of the Lease.
        lease: String,
    },
}

fn leader_text(leader: Option<&str>, lease: &str) -> String {
    match leader {
        Some(l) => format!("the leader is {l} (Lease {lease})"),
        None => format!("no replica holds the Lease {lease} yet"),
    }
}

/// The shared view of this replica's leadership: written by the [`Elector`] (and
/// [`Status::set_acting`]), read by the engine's gate, `/readyz` and the server.
#[derive(Debug, Clone)]
pub struct Status {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    identity: String,
    lease: String,
    state: Mutex<State>,
    role: watch::Sender<Role>,
    metrics: Arc<Metrics>,
}

#[derive(Debug, Default)]
struct State {
    /// The holder last seen (`None`: none, or not read yet).
    holder: Option<String>,
    /// While leading: the authority lasts until then.
    valid_until: Option<Instant>,
    /// Took over (resumed from the shared state): may act while the authority lasts.
    acting: bool,
    /// The Lease has been read at least once.
    seen: bool,
}

impl Status {
    /// A standby `identity` for the Lease `lease` (`namespace/name`), reporting to `metrics`
    /// (`gangscaler_leader`, `gangscaler_leader_transitions_total`).
    pub fn new(
        identity: impl Into<String>,
        lease: impl Into<String>,
        metrics: Arc<Metrics>,
    ) -> Self {
        metrics.leader.set(0);
        Self {
            inner: Arc::new(Inner {
                identity: identity.into(),
                lease: lease.into(),
                state: Mutex::new(State::default()),
                role: watch::Sender::new(Role::Standby),
                metrics,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.inner.identity
    }

    /// `namespace/name` of the Lease.
    pub fn lease(&self) -> &str {
        &self.inner.lease
    }

    /// The holder this replica last saw.
    pub fn leader(&self) -> Option<String> {
        self.state().holder.clone()
    }

    /// The current role.
    pub fn role(&self) -> Role {
        *self.inner.role.borrow()
    }

    /// Follows the role.
    pub fn roles(&self) -> watch::Receiver<Role> {
        self.inner.role.subscribe()
    }

    /// `Ok` while this replica may act: it holds the Lease, took over, and its last renewal
    /// is recent enough (checked against the clock here, so a stalled elector cannot extend
    /// it).
    ///
    /// # Errors
    /// [`NotLeader`], saying why and who leads.
    pub fn check_acting(&self) -> Result<(), NotLeader> {
        let state = self.state();
        let identity = self.inner.identity.clone();
        let lease = self.inner.lease.clone();
        let valid = state
            .valid_until
            .is_some_and(|until| crate::clock::mono() < until);
        match self.role() {
            Role::Leading if valid && state.acting => Ok(()),
            Role::Leading if valid => Err(NotLeader::TakingOver { identity, lease }),
            Role::Leading | Role::Lost => Err(NotLeader::Lost { identity, lease }),
            Role::Standby => Err(NotLeader::Standby {
                identity,
                leader: state.holder.clone(),
                lease,
            }),
        }
    }

    /// Marks the take-over done: from now on [`Status::check_acting`] passes while the Lease
    /// is held.
    pub fn set_acting(&self) {
        self.state().acting = true;
    }

    /// Why this replica is not ready, or `None` when it acts (for `/readyz`).
    pub fn not_ready(&self) -> Option<String> {
        self.check_acting().err().map(|e| match e {
            NotLeader::Standby { leader, lease, .. } => format!(
                "standby ({}): {}",
                self.inner.identity,
                leader_text(leader.as_deref(), &lease)
            ),
            NotLeader::TakingOver { .. } => "taking over: resuming from the audit log".to_owned(),
            NotLeader::Lost { .. } => "lost the lease; stopping".to_owned(),
        })
    }

    /// Records a read of the Lease: its holder. A change of holder after the first read is a
    /// transition (counted).
    fn observe(&self, holder: Option<&str>) {
        let mut state = self.state();
        let holder = holder.map(str::to_owned);
        if holder.is_some() && state.holder != holder && state.seen {
            self.inner.metrics.leader_transitions.inc();
            info!(lease = %self.inner.lease, leader = holder.as_deref().unwrap_or(""), "lease holder changed");
        }
        state.seen = true;
        if holder.is_some() || state.valid_until.is_none() {
            state.holder = holder;
        }
    }

    /// This replica renewed (or took) the Lease; its authority lasts until `valid_until`.
    fn renewed(&self, valid_until: Instant) {
        self.state().valid_until = Some(valid_until);
        if self.role() != Role::Leading {
            self.inner.metrics.leader.set(1);
            self.inner.role.send_replace(Role::Leading);
        }
    }

    /// This replica no longer holds the Lease (lost it, or released it on shutdown).
    fn ended(&self, role: Role) {
        {
            let mut state = self.state();
            state.valid_until = None;
            state.acting = false;
        }
        self.inner.metrics.leader.set(0);
        self.inner.role.send_replace(role);
    }
}

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

#[cfg(test)]
mod tests;
