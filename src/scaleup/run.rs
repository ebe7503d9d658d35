//! [`Loop`], the I/O of the scale-up lifecycle: every `lifecycle.interval`, compare each open
//! scale-up with the cluster and record how far it has come. I/O lives here (the cluster
//! view's stores, the backends' instance lists through [`InstanceSource`], the audit log,
//! events); the decisions are the pure [`observe`](super::observe()) and
//! [`Tracker`](super::Tracker).
//!
//! Each tick:
//! 1. sets the pending-gang gauge and adds pending gang-seconds since the last tick; from the
//!    same gang view, finds the gangs Cluster Autoscaler cannot see ([`cluster::unseen`]: no
//!    member carries a scheduler verdict after `lifecycle.noVerdictAfter`), sets their gauge,
//!    and logs and publishes one Warning Event per such gang, once while it stays unseen;
//! 2. gathers [`Facts`] for the node groups with open scale-ups: the backend's instances, the
//!    nodes registered for them, and every gang's progress (bound, formed, volumes attached,
//!    running, disrupted). The engine's instance source also hands over, once, failed
//!    instances CA deleted since the last tick (CA often deletes them within a second of
//!    seeing them, well inside one interval);
//! 3. appends the phase and outcome records that bring the log up to date
//!    ([`Recorder::reconcile`]), then updates the metrics and publishes the events each one
//!    implies. A record that could not be appended is computed again at the next tick, so
//!    metrics and events follow the log: once per record, never for a record not written;
//! 4. marks the nodes of scale-ups whose gang lifecycle is still open so CA's scale-down leaves
//!    them alone, and releases the ones whose scale-up ended ([`protect`](super::protect));
//! 5. with deferral on, marks the unbound members of the gangs the engine defers with CA's
//!    per-pod scale-up delay and lifts the marks of the rest, each change of a gang's hold
//!    recorded first ([`defer`](super::defer)).
//!
//! While the cluster view is stale ([`ClusterView::stale`]: a watch failed, e.g. the API
//! server is down, and has not listed again) ticks are skipped: no record is computed from
//! objects that may be behind. The first tick after the view is current decides from it; time
//! spent stale still counts toward the lifecycle timeouts (the nodes really were not there).
//!
//! Depends on `cluster` (the view), `audit` (record types), `events` (the publisher), `metrics`
//! and `model`. It reaches the backends only through [`InstanceSource`], which the engine
//! implements, and reads the clock it is given.

mod nodes;
mod pods;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::events::events_for;
use super::observe::{Attribution, Facts, GroupFacts, attribution, observe};
use super::progress::{GangProgress, ProgressCache, group_facts, open_gang_progress};
use super::protect::Marker;
use super::recorder::{Appended, Recorder};
use super::track::Open;
use crate::audit::{Event, Outcome};
use crate::cluster::{self, ClusterView, Stale, Unseen};
use crate::events::{EventPublisher, REASON_NOT_SEEN};
use crate::metrics::{GroupLabels, Metrics, ScaleUpOutcomeLabels};
use crate::model::reservation::value_for;
use crate::model::{GangRef, Instance, ReservationSpec};
use crate::telemetry::Chain;

/// The default of `lifecycle.noVerdictAfter`: how long a whole pending gang may go without a
/// scheduler verdict on any member before it is reported ([`Loop::with_no_verdict_after`]).
pub const DEFAULT_NO_VERDICT_AFTER: Duration = Duration::from_secs(2 * 60);

/// Why a node group's instances could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum InstancesError {
    /// No node group has this id (it was removed from the configuration).
    #[error("node group {0:?} not found")]
    GroupNotFound(String),
    /// The backend failed to list them; retried at the next tick.
    #[error(transparent)]
    Backend(Box<dyn std::error::Error + Send + Sync>),
}

/// Where the loop reads a node group's instances: the engine, which routes the group to its
/// provisioning backend.
#[async_trait]
pub trait InstanceSource: Send + Sync {
    /// The instances of node group `group`, as its backend lists them.
    ///
    /// # Errors
    /// [`InstancesError::GroupNotFound`] for a group no longer configured, else
    /// [`InstancesError::Backend`].
    async fn instances(&self, group: &str) -> Result<Vec<Instance>, InstancesError>;

    /// Withdraws `group`'s capacity not created yet whose lifecycles have ended; returns how
    /// many instances. Nothing by default.
    ///
    /// # Errors
    /// As [`InstanceSource::instances`].
    async fn withdraw_ended(&self, _group: &str) -> Result<u32, InstancesError> {
        Ok(0)
    }

    /// Ends `group`'s open lifecycles whose scale-up was recorded and never applied (the
    /// provider stopped between the record and the backend write); returns how many. Called
    /// on the first tick after a start. Nothing by default.
    ///
    /// # Errors
    /// As [`InstanceSource::instances`].
    async fn close_unapplied(&self, _group: &str) -> Result<u32, InstancesError> {
        Ok(0)
    }

    /// Whether `group`'s backend keeps the claims of its instances, so that they are
    /// attributed by claim (see [`observe`](mod@super::observe)). None by default.
    fn keeps_claims(&self, _group: &str) -> bool {
        false
    }

    /// Notified after each scale-up the source applies. With deferral on, the loop ticks at
    /// once instead of waiting for the interval: the gangs just scaled up are covered, and
    /// their pods are marked before CA's next loop asks for them again (a refusal, and a
    /// backoff, otherwise). None by default.
    fn scaled_up(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    /// The pending gangs of `view` to keep out of CA's scale-up now
    /// ([`planner::deferrals`](crate::planner::deferrals) over every configured group). None
    /// by default.
    ///
    /// # Errors
    /// [`InstancesError::Backend`] when a group's target size could not be read.
    async fn deferrals(
        &self,
        _view: &cluster::GangView,
    ) -> Result<Vec<crate::planner::Deferral>, InstancesError> {
        Ok(Vec::new())
    }

    /// Every configured node group's reservation settings, by id (the live configuration's).
    /// None by default: a source without node groups reserves nothing.
    fn reservations(&self) -> BTreeMap<String, ReservationSpec> {
        BTreeMap::new()
    }
}

/// Drives open scale-ups to their outcomes (see the module docs).
pub struct Loop {
    recorder: Arc<Recorder>,
    view: Arc<ClusterView>,
    instances: Arc<dyn InstanceSource>,
    metrics: Arc<Metrics>,
    events: Option<EventPublisher>,
    interval: Duration,
    now_ms: fn() -> i64,
    marker: Option<Marker>,
    protect: bool,
    no_verdict_after: Duration,
    /// Gangs already warned about as unseen, for as long as they stay unseen: one Event per
    /// gang and episode, and a gang that relapses after being seen is warned about again.
    warned: BTreeSet<GangRef>,
    /// The open scale-ups' gang progress from the last tick, reused for gangs that did not
    /// change.
    progress: ProgressCache,
    /// The last tick was skipped because the view was stale.
    paused: bool,
    /// Pods given the reservation toleration whose change the view has not shown yet.
    tolerated: BTreeSet<(String, String)>,
    /// Reservation values of gangs whose lifecycle ended (whether they had formed), kept
    /// while some node still carries the value, so its release names the right reason.
    closed: BTreeMap<String, bool>,
    /// Deferral on the pods (`admission.deferral`), when on.
    deferral: Option<super::defer::Deferring>,
    /// The hold recorded for each gang kept out of CA's scale-up (since the start).
    holds: BTreeMap<GangRef, &'static str>,
    /// Each node group's recent provisioning times (since the start), for the booking
    /// deadline of groups whose files set none.
    provisioning: BTreeMap<String, super::reserve::Provisioning>,
    /// Every configured group had its pending instances of ended lifecycles withdrawn once
    /// (the first tick after a start or a takeover; later ticks look at the groups of open
    /// lifecycles only).
    swept: bool,
}

impl std::fmt::Debug for Loop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loop")
            .field("recorder", &self.recorder)
            .field("view", &self.view)
            .field("events", &self.events)
            .field("interval", &self.interval)
            .field("no_verdict_after", &self.no_verdict_after)
            .field("warned", &self.warned.len())
            .finish_non_exhaustive()
    }
}

impl Loop {
    /// A loop over `recorder`'s open scale-ups, observing `view` and the backends behind
    /// `instances` every `interval`; `now_ms` is the wall clock, in unix milliseconds.
    pub fn new(
        recorder: Arc<Recorder>,
        view: Arc<ClusterView>,
        instances: Arc<dyn InstanceSource>,
        metrics: Arc<Metrics>,
        interval: Duration,
        now_ms: fn() -> i64,
    ) -> Self {
        Self {
            recorder,
            view,
            instances,
            metrics,
            events: None,
            interval,
            now_ms,
            marker: None,
            protect: false,
            no_verdict_after: DEFAULT_NO_VERDICT_AFTER,
            warned: BTreeSet::new(),
            progress: ProgressCache::new(),
            paused: false,
            tolerated: BTreeSet::new(),
            closed: BTreeMap::new(),
            deferral: None,
            holds: BTreeMap::new(),
            provisioning: BTreeMap::new(),
            swept: false,
        }
    }

    /// Keeps the pending gangs the engine defers out of CA's scale-up, marking their pods as
    /// `deferring` says (`admission.deferral`, [`defer`](super::defer)).
    #[must_use]
    pub fn with_deferral(mut self, deferring: super::defer::Deferring) -> Self {
        self.deferral = Some(deferring);
        self
    }

    /// Publishes the Kubernetes Events of every appended record through `events`.
    #[must_use]
    pub fn with_events(mut self, events: EventPublisher) -> Self {
        self.events = Some(events);
        self
    }

    /// Keeps the nodes of forming gangs out of CA's scale-down through `marker` when
    /// `protect` is true (see [`protect`](super::protect)); with `protect` false it only
    /// removes the protection it finds it had set.
    #[must_use]
    pub fn with_protection(mut self, marker: Marker, protect: bool) -> Self {
        self.marker = Some(marker);
        self.protect = protect;
        self
    }

    /// Reports a whole pending gang as unseen by Cluster Autoscaler once none of its members
    /// has carried a scheduler verdict for `after` (`lifecycle.noVerdictAfter`; default
    /// [`DEFAULT_NO_VERDICT_AFTER`]).
    #[must_use]
    pub fn with_no_verdict_after(mut self, after: Duration) -> Self {
        self.no_verdict_after = after;
        self
    }

    /// Runs until `shutdown` is cancelled.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let scaled_up = self
            .deferral
            .as_ref()
            .and_then(|_| self.instances.scaled_up());
        let mut last_ms = None;
        loop {
            if !next_tick(&mut tick, scaled_up.as_deref(), &shutdown).await {
                break;
            }
            if !self.view.is_ready() {
                continue;
            }
            let stale = self.view.stale();
            if pause(&self.metrics, &mut self.paused, stale.as_ref()) {
                // Not counted: the pending gangs of a view that may be behind are not known.
                last_ms = None;
                continue;
            }
            let now_ms = (self.now_ms)();
            self.tick(now_ms, last_ms).await;
            last_ms = Some(now_ms);
        }
    }

    async fn tick(&mut self, now_ms: i64, last_ms: Option<i64>) {
        let now_unix = now_ms.div_euclid(1000);
        let open = self.recorder.open_scale_ups();
        let attachments = if open.iter().any(|o| o.gang.is_some()) {
            self.view.volume_attachments()
        } else {
            Vec::new()
        };
        // One short lock: the view (only what changed is rebuilt) and the progress of the
        // gangs open scale-ups follow.
        let cache = &mut self.progress;
        let (view, gangs) = self
            .view
            .with_index(|index| open_gang_progress(index, cache, &open, &attachments, now_unix));
        let pending = view.gangs.iter().filter(|g| g.is_pending()).count();
        self.metrics
            .gangs_pending
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
        if let Some(last) = last_ms {
            let secs = (now_ms - last).max(0) as f64 / 1000.0;
            self.metrics
                .gangs_pending_seconds
                .inc_by(pending as f64 * secs);
        }
        let unseen = cluster::unseen(&view.gangs, now_unix, self.no_verdict_after);
        let warnings = warn_unseen(&self.metrics, &mut self.warned, &unseen);
        if let Some(events) = &self.events {
            events.publish(warnings);
        }
        let attributed = if open.is_empty() {
            Attribution::default()
        } else {
            self.follow(&open, gangs, now_ms).await
        };
        self.metrics
            .scale_ups_open
            .set(i64::try_from(self.recorder.open_count()).unwrap_or(i64::MAX));
        self.mark_nodes(&attributed, now_ms).await;
        self.tolerate_members(&view.gangs).await;
        self.defer(&view, now_ms).await;
        self.withdraw_ended(&open).await;
    }

    /// Withdraws the capacity not created yet of lifecycles that have ended: on the groups
    /// of the lifecycles open at the start of this tick (the ones that ended during it
    /// included), and on the first tick on every configured group, so that a withdrawal a
    /// restart interrupted is finished. That first pass also ends the lifecycles recorded but
    /// never applied before the start. A failure is retried at the next tick.
    async fn withdraw_ended(&mut self, open: &[Open]) {
        let mut groups: BTreeSet<String> = open.iter().map(|o| o.node_group.clone()).collect();
        let first = !self.swept;
        if first {
            groups.extend(self.instances.reservations().into_keys());
        }
        let mut all_done = true;
        for group in &groups {
            if first {
                let closed = self.instances.close_unapplied(group).await;
                all_done &= settled(
                    group,
                    "ending the scale-ups recorded but never applied",
                    closed,
                );
            }
            let withdrawn = self.instances.withdraw_ended(group).await;
            all_done &= settled(
                group,
                "withdrawing the pending instances of ended lifecycles",
                withdrawn,
            );
        }
        self.swept |= all_done;
    }

    /// Gathers the facts of the `open` scale-ups, appends the records that bring them up to
    /// date and accounts for each; returns the nodes each scale-up (and, by claim, each gang
    /// lifecycle) got.
    async fn follow(
        &mut self,
        open: &[Open],
        gangs: BTreeMap<GangRef, GangProgress>,
        now_ms: i64,
    ) -> Attribution {
        let mut facts = Facts {
            groups: BTreeMap::new(),
            gangs: gangs
                .into_iter()
                .map(|(g, p)| ((g.namespace, g.name), p))
                .collect(),
        };
        let groups: BTreeSet<&str> = open.iter().map(|o| o.node_group.as_str()).collect();
        for group in groups {
            match self.instances.instances(group).await {
                Ok(instances) => {
                    let g = self.view.with_node_table(|nodes| {
                        group_facts(instances, nodes, self.instances.keeps_claims(group))
                    });
                    facts.groups.insert(group.to_owned(), g);
                }
                Err(InstancesError::GroupNotFound(_)) => {
                    // Removed from the configuration: no nodes will come, but the gang may
                    // still form elsewhere, and the timeouts must still end the lifecycle.
                    facts.groups.insert(group.to_owned(), GroupFacts::default());
                }
                Err(e) => {
                    warn!(node_group.id = group, error = %Chain(&e), "reading instances for open scale-ups failed; will retry");
                }
            }
        }
        let observed = observe(open, &facts);
        // A lifecycle record that cannot be made durable is not applied either: its lifecycle
        // stays open (and its nodes protected) until a later tick writes it.
        let appended = match self
            .recorder
            .reconcile(now_ms, |o| observed.get(&o.key()).cloned())
        {
            Ok(appended) => {
                if !appended.is_empty() {
                    self.metrics.audit_append(true);
                }
                appended
            }
            Err((e, appended)) => {
                error!(error = %Chain(&e), "writing the audit log failed; the lifecycle records will be computed again");
                self.metrics.audit_append(false);
                appended
            }
        };
        for a in &appended {
            self.account(a);
            // A gang whose lifecycle ended after forming: its nodes' reservations end as
            // `formed`, even when the outcome came in the same tick as the formation.
            if let Event::Outcome(o) = &a.record.event
                && let Some(gang) = &o.gang
            {
                let value = value_for(&GangRef::from(gang));
                self.closed.insert(value, o.formed_at_ms.is_some());
            }
        }
        attribution(open, &facts)
    }

    /// Metrics, log line and events for one appended record.
    fn account(&self, a: &Appended) {
        count(&self.metrics, a);
        if let Some(events) = &self.events {
            events.publish(events_for(a));
        }
    }
}

/// Waits for the next tick of `tick`, or for a scale-up applied since the last one
/// (`scaled_up`), whichever comes first; `false` once `shutdown` is cancelled. A scale-up
/// applied during a tick is not lost: its notification wakes the next wait at once.
async fn next_tick(
    tick: &mut tokio::time::Interval,
    scaled_up: Option<&tokio::sync::Notify>,
    shutdown: &CancellationToken,
) -> bool {
    let scaled_up = async {
        match scaled_up {
            Some(n) => n.notified().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = shutdown.cancelled() => false,
        _ = tick.tick() => true,
        () = scaled_up => true,
    }
}

/// Whether a per-group step of the tick (`what`) is done for `group`: it succeeded, or the
/// group is no longer configured; a failure is logged and retried at the next tick.
fn settled(group: &str, what: &str, result: Result<u32, InstancesError>) -> bool {
    match result {
        Ok(_) | Err(InstancesError::GroupNotFound(_)) => true,
        Err(e) => {
            warn!(node_group.id = %group, error = %Chain(&e), "{what} failed; will retry");
            false
        }
    }
}

/// Whether to skip a tick because the view is `stale`: nothing is observed, recorded,
/// protected or released from objects that may be behind the cluster, so an outage neither
/// ends a lifecycle nor moves it on. Sets the staleness gauge; `paused` (the last tick was
/// skipped) makes each change logged once.
fn pause(m: &Metrics, paused: &mut bool, stale: Option<&Stale>) -> bool {
    m.cluster_view_stale.set(i64::from(stale.is_some()));
    match (stale, *paused) {
        (Some(s), false) => {
            warn!(stale = %s, "cluster view stale; scale-up lifecycles paused until it is current");
        }
        (None, true) => info!("cluster view current again; scale-up lifecycles resumed"),
        _ => {}
    }
    *paused = stale.is_some();
    *paused
}

/// Sets the gauge of gangs Cluster Autoscaler cannot see to `unseen`'s length, logs each gang
/// not in `warned` yet and returns its Warning Event. `warned` becomes the unseen gangs: a gang
/// is warned about once while it stays unseen, and again if it is seen and then relapses.
fn warn_unseen(
    m: &Metrics,
    warned: &mut BTreeSet<GangRef>,
    unseen: &[Unseen],
) -> Vec<(GangRef, &'static str, &'static str, String)> {
    m.gangs_without_verdict
        .set(i64::try_from(unseen.len()).unwrap_or(i64::MAX));
    let now: BTreeSet<&GangRef> = unseen.iter().map(|u| &u.gang).collect();
    warned.retain(|g| now.contains(g));
    let mut events = Vec::new();
    for u in unseen {
        if !warned.insert(u.gang.clone()) {
            continue;
        }
        warn!(
            gang = %u.gang,
            members = u.members,
            min_count = u.min_count,
            age_s = u.age_secs,
            schedulers = ?u.schedulers,
            "gang not seen by the autoscaler: no scheduler verdict on its members"
        );
        events.push((u.gang.clone(), REASON_NOT_SEEN, "Warning", u.message()));
    }
    events
}

/// Updates the scale-up metrics for one appended record and logs it: for the loop's records
/// and for the `provisionFailed` outcomes the engine appends after a failed increase.
pub fn count(m: &Metrics, a: &Appended) {
    match &a.record.event {
        Event::Phase(p) => {
            let labels = GroupLabels {
                node_group: p.node_group.clone(),
            };
            if a.first_formed().is_some() {
                m.formation_seconds
                    .get_or_create(&labels)
                    .observe(p.elapsed_ms as f64 / 1000.0);
            }
            info!(
                scale_up.id = %p.scale_up_id,
                node_group.id = %p.node_group,
                gang = ?p.gang.as_ref().map(ToString::to_string),
                phase = p.phase.as_str(),
                elapsed_ms = p.elapsed_ms,
                detail = ?p.detail,
                "scale-up phase"
            );
        }
        Event::Outcome(o) => {
            let labels = GroupLabels {
                node_group: o.node_group.clone(),
            };
            m.scale_up_outcomes
                .get_or_create(&ScaleUpOutcomeLabels {
                    node_group: o.node_group.clone(),
                    outcome: o.outcome.as_str(),
                })
                .inc();
            let attach_failures = if o.outcome == Outcome::AttachFailed {
                o.attach_failures.max(1)
            } else {
                o.attach_failures
            };
            if attach_failures > 0 {
                m.attach_failures
                    .get_or_create(&labels)
                    .inc_by(u64::from(attach_failures));
            }
            match o.outcome {
                Outcome::Succeeded => {
                    m.success_seconds
                        .get_or_create(&labels)
                        .observe(o.duration_ms as f64 / 1000.0);
                    if let Some(since) = o.pending_since_ms {
                        let delay = (a.record.ts_ms - since).max(0) as f64 / 1000.0;
                        m.job_start_delay_seconds
                            .get_or_create(&labels)
                            .observe(delay);
                    }
                }
                Outcome::Preempted => {
                    m.preemptions.get_or_create(&labels).inc();
                }
                _ => {}
            }
            info!(
                scale_up.id = %o.scale_up_id,
                node_group.id = %o.node_group,
                gang = ?o.gang.as_ref().map(ToString::to_string),
                outcome = o.outcome.as_str(),
                duration_ms = o.duration_ms,
                reason = %o.reason,
                "scale-up ended"
            );
        }
        Event::Repair(r) => {
            m.repairs
                .get_or_create(&GroupLabels {
                    node_group: r.node_group.clone(),
                })
                .inc();
            warn!(
                scale_up.id = %r.scale_up_id,
                node_group.id = %r.node_group,
                gang = %r.gang,
                instance = %r.instance,
                reason = %r.reason,
                failed = r.failed,
                replaced = r.replaced,
                "an instance requested for a gang failed; its scale-up repairs"
            );
        }
        Event::Decision(_) | Event::Reservation(_) | Event::Withdrawal(_) | Event::Deferral(_) => {
            debug!("decision and reservation records are not appended by the reconciler");
        }
    }
}

#[cfg(test)]
mod tests;
