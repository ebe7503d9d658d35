//! [`Status`]: this replica's leadership as the rest of the process reads it (the engine's
//! gate, `/readyz`, the server), and [`NotLeader`], why it may not act now.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::info;

use super::Role;
use crate::metrics::Metrics;

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

/// The shared view of this replica's leadership: written by the
/// [`Elector`](super::Elector) (and [`Status::set_acting`]), read by the engine's gate,
/// `/readyz` and the server.
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
    pub(super) fn observe(&self, holder: Option<&str>) {
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
    pub(super) fn renewed(&self, valid_until: Instant) {
        self.state().valid_until = Some(valid_until);
        if self.role() != Role::Leading {
            self.inner.metrics.leader.set(1);
            self.inner.role.send_replace(Role::Leading);
        }
    }

    /// This replica no longer holds the Lease (lost it, or released it on shutdown).
    pub(super) fn ended(&self, role: Role) {
        {
            let mut state = self.state();
            state.valid_until = None;
            state.acting = false;
        }
        self.inner.metrics.leader.set(0);
        self.inner.role.send_replace(role);
    }
}
