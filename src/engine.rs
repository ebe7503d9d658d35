//! The use cases behind each RPC. The engine owns the live configuration (re-read on
//! `Refresh` when its files change), routes each node group to its provisioning backend and
//! turns backend answers into the contract CA relies on. Depends on `config`, `provision`,
//! `planner` and `cluster` (gang admission), `scaleup` (the recorder of decisions; the engine
//! is the scale-up loop's [`InstanceSource`](crate::scaleup::InstanceSource)), `audit`
//! (record phases), `events`, `leader`, `metrics`, `clock` and `model`; knows nothing of
//! gRPC. `reload` re-reads the configuration, `decisions` records what the engine decided,
//! `failed` keeps the failed instances CA deleted before the scale-up loop saw them, `acting`
//! holds changes to the leader and takes the audit log over, `instances` answers the
//! scale-up loop, `error` lists the errors.

mod acting;
pub mod admission;
mod composite;
mod decisions;
mod error;
mod failed;
mod instances;
mod reload;
mod request;
mod reservation;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tracing::{info, warn};

use crate::clock;
use crate::config::{self, Fingerprint, Loaded};
use crate::metrics::Metrics;
use crate::model::{AutoscalingOptions, Instance, NodeGroupSpec, TemplateNode, echo};
use crate::provision::{NodeRef, Provisioner};
use crate::scaleup::Recorder;
use crate::telemetry::Chain;
pub use error::{Error, Result};
use request::{NodeList, positive};

/// The use cases behind the RPCs.
pub struct Engine {
    config: ArcSwap<Loaded>,
    source: Option<config::Source>,
    last_fingerprint: tokio::sync::Mutex<Option<Fingerprint>>,
    provisioners: HashMap<&'static str, Arc<dyn Provisioner>>,
    metrics: Arc<Metrics>,
    admission: Option<admission::Admission>,
    /// Set at construction, or on taking over as leader (see [`Engine::take_over`]).
    audit: std::sync::OnceLock<Arc<Recorder>>,
    events: Option<crate::events::EventPublisher>,
    /// Under leader election: whether this replica may act.
    leadership: Option<crate::leader::Status>,
    /// Failed instances CA deleted before the lifecycle loop read them (with the audit log).
    failed: std::sync::Mutex<failed::FailedLedger>,
    /// Per group configured to reserve, the DaemonSets last seen keeping its reservation off
    /// (so that a change is logged once).
    reservation_off: std::sync::Mutex<BTreeMap<String, Vec<String>>>,
    /// Per group configured to reserve, why its backend last said its Nodes would not carry
    /// the reservation taint from registration (`None`: they would). Read at start, on
    /// reload and before each admission decision; absent until read.
    backend_blockers: std::sync::Mutex<BTreeMap<String, Option<String>>>,
    /// Held by each `NodeGroupIncreaseSize` from its first read to its last write: calls
    /// are decided and applied one at a time, so no two decide from the same view.
    increases: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("groups", &self.config.load().groups.len())
            .field("backends", &self.provisioners.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Engine {
    /// An engine over `loaded`, reloading node groups from `source` on refresh when given.
    ///
    /// # Errors
    /// [`Error::NoBackend`] if a group names a backend that is not in `provisioners`, or the
    /// backend's error from registering the groups.
    pub async fn new(
        loaded: Loaded,
        source: Option<config::Source>,
        provisioners: Vec<Arc<dyn Provisioner>>,
        metrics: Arc<Metrics>,
    ) -> Result<Self> {
        let fingerprint = match &source {
            Some(s) => s.fingerprint(&loaded.provider.node_groups_dir).ok(),
            None => None,
        };
        let engine = Self {
            config: ArcSwap::from_pointee(loaded),
            source,
            last_fingerprint: tokio::sync::Mutex::new(fingerprint),
            provisioners: provisioners.into_iter().map(|p| (p.kind(), p)).collect(),
            metrics,
            admission: None,
            audit: std::sync::OnceLock::new(),
            events: None,
            leadership: None,
            failed: std::sync::Mutex::new(failed::FailedLedger::default()),
            reservation_off: std::sync::Mutex::new(BTreeMap::new()),
            backend_blockers: std::sync::Mutex::new(BTreeMap::new()),
            increases: Arc::new(tokio::sync::Mutex::new(())),
        };
        let loaded = engine.config.load_full();
        engine.sync(&loaded.groups).await?;
        engine.metrics.config_valid.set(1);
        // Each group's target is compared with its maxSize whenever a call reads or changes
        // it (CA reads every group's target on every loop).
        engine
            .metrics
            .node_groups(loaded.groups.iter().map(|g| g.id.as_str()), []);
        Ok(engine)
    }

    /// Turns on gang admission in `NodeGroupIncreaseSize`, reading gangs from `source`.
    #[must_use]
    pub fn with_admission(
        mut self,
        policy: crate::planner::Policy,
        source: Arc<dyn admission::GangSource>,
    ) -> Self {
        self.admission = Some(admission::Admission::new(policy, source));
        self.resume_in_flight();
        self
    }

    /// Publishes Kubernetes Events on the gangs of every admission decision.
    #[must_use]
    pub fn with_events(mut self, events: crate::events::EventPublisher) -> Self {
        self.events = Some(events);
        self
    }

    /// The current configuration.
    pub fn config(&self) -> Arc<Loaded> {
        self.config.load_full()
    }

    fn group(&self, id: &str) -> Result<(Arc<Loaded>, usize)> {
        let cfg = self.config.load_full();
        let idx = cfg
            .groups
            .binary_search_by(|g| g.id.as_str().cmp(id))
            .map_err(|_| Error::GroupNotFound(id.to_owned()))?;
        Ok((cfg, idx))
    }

    fn backend(&self, group: &NodeGroupSpec) -> Result<&Arc<dyn Provisioner>> {
        let kind = group.backend.kind();
        self.provisioners.get(kind).ok_or_else(|| Error::NoBackend {
            group: group.id.clone(),
            kind,
        })
    }

    /// The group managing `node`, matched by providerID then by name; `None` if unmanaged.
    ///
    /// # Errors
    /// A backend failure.
    pub async fn node_group_for_node(&self, node: &NodeRef) -> Result<Option<NodeGroupSpec>> {
        let cfg = self.config.load_full();
        for p in self.provisioners.values() {
            if let Some(id) = p.lookup(node).await? {
                // Only answer with groups that NodeGroups lists too.
                if let Ok(idx) = cfg.groups.binary_search_by(|g| g.id.cmp(&id)) {
                    return Ok(cfg.groups.get(idx).cloned());
                }
            }
        }
        Ok(None)
    }

    /// The group's target size.
    ///
    /// # Errors
    /// [`Error::GroupNotFound`], or a backend failure.
    pub async fn target_size(&self, id: &str) -> Result<u32> {
        let (cfg, idx) = self.group(id)?;
        let g = &cfg.groups[idx];
        let target = self.backend(g)?.target_size(g).await?;
        self.note_target(g, target, false);
        Ok(target)
    }

    /// Raises the group's target by `delta`.
    ///
    /// The call runs in a task of its own, one at a time with every other increase: once
    /// begun it runs to completion (its decision recorded, applied and remembered as in
    /// flight, or undone and recorded as failed) even when the caller stops waiting, as tonic
    /// does when CA's `grpc_timeout` fires or the server closes the connection. Concurrent
    /// calls (CA's `--parallel-scale-up`) are decided in turn, each from the view the one
    /// before it left. A call whose caller stopped waiting while it queued is not begun.
    ///
    /// # Errors
    /// Those of the call itself (below), and [`Error::Interrupted`] if its task ended without
    /// an answer (a panic, or the runtime shutting down).
    pub async fn increase_size(self: &Arc<Self>, id: &str, delta: i32) -> Result<u32> {
        let engine = Arc::clone(self);
        let group = id.to_owned();
        // Cancelled when the caller stops waiting: a call still queued then is not begun.
        let gone = tokio_util::sync::CancellationToken::new();
        let _caller = gone.clone().drop_guard();
        let call = tokio::spawn(async move {
            let _one_at_a_time = engine.increases.clone().lock_owned().await;
            if gone.is_cancelled() {
                info!(node_group.id = %echo(&group), delta, "increase not begun: its caller stopped waiting while it queued");
                return Err(Error::Interrupted {
                    group,
                    why: "the caller stopped waiting before it began".into(),
                });
            }
            engine.increase_now(&group, delta).await
        });
        call.await.map_err(|e| Error::Interrupted {
            group: id.to_owned(),
            why: e.to_string(),
        })?
    }

    /// Waits until no increase is running or queued (at most `limit`): called at shutdown,
    /// once gRPC has stopped, so that a call CA gave up on still finishes before the process
    /// exits. Returns whether they all finished in time.
    pub async fn settle(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.increases.lock())
            .await
            .is_ok()
    }

    /// [`Engine::increase_size`] itself, run under the increase lock.
    ///
    /// # Errors
    /// [`Error::GroupNotFound`], [`Error::InvalidRequest`] for `delta <= 0`, the backend's
    /// refusal ([`provision::Error::AboveMax`](crate::provision::Error::AboveMax), also when
    /// the target is already above a `maxSize` a reload lowered) or failure, and with gang
    /// admission [`Error::Rejected`], [`Error::NotSynced`] or [`Error::ViewStale`] (no decision
    /// is made or recorded from a cluster view that may be behind); [`Error::NotLeader`] on a
    /// replica that may not act.
    async fn increase_now(&self, id: &str, delta: i32) -> Result<u32> {
        self.check_leader()?;
        let (cfg, idx) = self.group(id)?;
        let g = &cfg.groups[idx];
        let delta = positive(delta, || {
            format!(
                "node group {}: increase delta must be positive, got {delta}",
                echo(id)
            )
        })?;
        let backend = self.backend(g)?;
        let Some(admission) = &self.admission else {
            self.check_leader()?;
            let result = backend.increase(g, delta).await;
            self.observe(g, "increase", &result);
            self.note_increase(g, &result);
            let target = result?;
            info!(node_group.id = %g.id, delta, target, "target size increased");
            return Ok(target);
        };
        let now_ms = clock::now_ms();
        let now = now_ms.div_euclid(1000);
        // Whether the backend registers the new Nodes reserved, read fresh: a decision that
        // reserves must not rest on a template read before an edit.
        self.read_backend_blocker(g, backend.as_ref()).await?;
        let target = backend.target_size(g).await?;
        self.note_target(g, target, false);
        let unavailable = |e| match e {
            admission::Unavailable::NotSynced => Error::NotSynced(g.id.clone()),
            admission::Unavailable::Stale(stale) => Error::ViewStale {
                group: g.id.clone(),
                stale,
            },
        };
        let view = admission.view(now).map_err(unavailable)?;
        // A composite with a child this group hosts may take nodes of other groups in this
        // decision: read their targets (a group whose target cannot be read takes no share).
        let others = if admission.needs_other_groups(&view, g, &cfg.provider.gpu_label) {
            self.other_targets(&cfg, g).await
        } else {
            Vec::new()
        };
        let others: Vec<(&NodeGroupSpec, u32)> =
            others.iter().map(|(i, t)| (&cfg.groups[*i], *t)).collect();
        let (mut decision, mut companions) = admission.decide_in(
            &view,
            g,
            &cfg.provider.gpu_label,
            target,
            delta,
            &others,
            now,
        );
        drop(view);
        // Each other group's spec and backend, looked up once.
        let shares = companions
            .iter()
            .map(|c| self.companion(&cfg, &c.group))
            .collect::<Result<Vec<_>>>()?;
        decision.reservation_off = self.reservation_off(g, &cfg.provider.gpu_label);
        self.metrics.composites(
            decision.composites.len(),
            decision
                .deferred
                .iter()
                .filter(|d| d.gang.kind == "CompositePodGroup")
                .count(),
        );
        for (c, (cg, cb)) in companions.iter_mut().zip(&shares) {
            self.read_backend_blocker(cg, cb.as_ref()).await?;
            c.reservation_off = self.reservation_off(cg, &cfg.provider.gpu_label);
        }
        for d in std::iter::once(&decision).chain(&companions) {
            self.log_decision(d, delta);
        }
        if !decision.is_accepted() || decision.applied_delta == 0 {
            self.publish_decision(&decision);
            // Nothing changes, so an unwritable log does not change the answer either.
            let _ = self.record_decision(&decision, now_ms);
            return Err(Error::Rejected {
                group: g.id.clone(),
                reason: decision.reason,
            });
        }
        // Deciding took time: the leadership is checked again just before acting.
        self.check_leader()?;
        // Record before acting: every decision of a cross-group scale-up is durable before any
        // node is requested, so no node is ever added without the record of why.
        let mut recorded: Vec<(&NodeGroupSpec, Option<String>)> = Vec::new();
        let groups = std::iter::once(g).chain(shares.iter().map(|(cg, _)| *cg));
        for (d, dg) in std::iter::once(&decision).chain(&companions).zip(groups) {
            match self.record_decision(d, now_ms) {
                Ok(id) => recorded.push((dg, id)),
                Err(why) => {
                    warn!(node_group.id = %d.group, applied_delta = d.applied_delta, error = %why, "scale-up refused: its decision could not be recorded");
                    let reason = format!(
                        "the decision of node group {} in the same cross-group scale-up could not be recorded: nothing was requested",
                        d.group
                    );
                    self.fail_recorded(&recorded, &reason);
                    return Err(Error::AuditUnwritable {
                        group: g.id.clone(),
                        nodes: decision.applied_delta,
                        why,
                    });
                }
            }
        }
        // The other groups' shares first: if one fails, the group CA asked for adds nothing
        // and the shares already added are taken back, so no composite is scaled up in part.
        let mut added: Vec<(&NodeGroupSpec, u32)> = Vec::new();
        for (c, (spec, cb)) in companions.iter().zip(&shares) {
            let cg = self.maybe_unreserved(spec, c);
            let result = cb.increase(&cg, c.applied_delta).await;
            self.observe(&cg, "increase", &result);
            self.note_increase(&cg, &result);
            if let Err(e) = result {
                warn!(node_group.id = %c.group, asked = %g.id, error = %Chain(&e), "a composite's share failed: the cross-group scale-up is withdrawn");
                self.withdraw(&added).await;
                let reason = format!(
                    "the backend failed the increase of node group {}: {e}",
                    c.group
                );
                self.fail_recorded(&recorded, &reason);
                return Err(e.into());
            }
            added.push((*spec, c.applied_delta));
        }
        let g = &self.maybe_unreserved(g, &decision);
        let result = backend.increase(g, decision.applied_delta).await;
        self.observe(g, "increase", &result);
        self.note_increase(g, &result);
        let new_target = match result {
            Ok(t) => t,
            Err(e) => {
                self.withdraw(&added).await;
                let reason = format!(
                    "the backend failed the increase of node group {}: {e}",
                    g.id
                );
                self.fail_recorded(&recorded, &reason);
                return Err(e.into());
            }
        };
        for d in std::iter::once(&decision).chain(&companions) {
            self.publish_decision(d);
            admission.record(d, now);
        }
        info!(node_group.id = %g.id, ca_delta = delta, applied_delta = decision.applied_delta, target = new_target, companions = companions.len(), "target size increased");
        Ok(new_target)
    }

    /// Deletes the named nodes from the group, lowering its target.
    ///
    /// # Errors
    /// [`Error::GroupNotFound`], [`Error::InvalidRequest`] for an empty list, the backend's
    /// refusal (a node not in the group, below min), or [`Error::NotLeader`].
    pub async fn delete_nodes(&self, id: &str, nodes: &[NodeRef]) -> Result<u32> {
        self.check_leader()?;
        let (cfg, idx) = self.group(id)?;
        let g = &cfg.groups[idx];
        if nodes.is_empty() {
            return Err(Error::InvalidRequest(format!(
                "node group {}: delete request names no nodes",
                echo(id)
            )));
        }
        if let Some(i) = nodes
            .iter()
            .position(|n| n.name.is_empty() && n.provider_id.is_empty())
        {
            return Err(Error::InvalidRequest(format!(
                "node group {}: node {i} of {} in the delete request has neither name nor providerID",
                echo(id),
                nodes.len()
            )));
        }
        let result = self.backend(g)?.delete(g, nodes).await;
        self.observe(g, "delete", &result);
        let target = result?;
        self.note_target(g, target, false);
        if self.audit.get().is_some() {
            self.failed_ledger()
                .deleted(g.id.as_str(), nodes.iter().map(|n| n.provider_id.as_str()));
        }
        info!(node_group.id = %g.id, nodes = %NodeList(nodes), target, "nodes deleted");
        Ok(target)
    }

    /// Cancels `-delta` units of not-yet-created capacity. Every negative delta, `i32::MIN`
    /// included, asks to cancel `|delta|` units.
    ///
    /// # Errors
    /// [`Error::GroupNotFound`], [`Error::InvalidRequest`] for `delta >= 0`, the backend's
    /// refusal (it would delete existing nodes), or [`Error::NotLeader`].
    pub async fn decrease_target_size(&self, id: &str, delta: i32) -> Result<u32> {
        self.check_leader()?;
        let (cfg, idx) = self.group(id)?;
        let g = &cfg.groups[idx];
        if delta >= 0 {
            return Err(Error::InvalidRequest(format!(
                "node group {}: decrease delta must be negative, got {delta}",
                echo(id)
            )));
        }
        // `unsigned_abs`, not negation: -i32::MIN does not fit in an i32.
        let by = delta.unsigned_abs();
        let result = self.backend(g)?.decrease_target(g, by).await;
        self.observe(g, "decrease_target", &result);
        let target = result?;
        self.note_target(g, target, false);
        info!(node_group.id = %g.id, delta, target, "target size decreased");
        // CA withdrew requested nodes (they did not come in time, or are no longer needed):
        // the gangs they were for may go to another group.
        if let Some(admission) = &self.admission {
            admission.release(g.id.as_str());
        }
        Ok(target)
    }

    /// The group's instances.
    ///
    /// # Errors
    /// [`Error::GroupNotFound`], or a backend failure.
    pub async fn nodes(&self, id: &str) -> Result<Vec<Instance>> {
        let (cfg, idx) = self.group(id)?;
        let g = &cfg.groups[idx];
        let instances = self.backend(g)?.instances(g).await?;
        if self.audit.get().is_some() {
            self.failed_ledger().listed(g.id.as_str(), &instances);
        }
        if let Some(admission) = &self.admission
            && instances.iter().any(|i| i.error.is_some())
        {
            admission.release(g.id.as_str());
        }
        Ok(instances)
    }

    fn failed_ledger(&self) -> std::sync::MutexGuard<'_, failed::FailedLedger> {
        self.failed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The group's template node.
    ///
    /// # Errors
    /// [`Error::GroupNotFound`], or [`Error::NoTemplate`] for a group without capacity.
    pub fn template(&self, id: &str) -> Result<TemplateNode> {
        let (cfg, idx) = self.group(id)?;
        let g = &cfg.groups[idx];
        TemplateNode::for_group(g, &cfg.provider.gpu_label)
            .ok_or_else(|| Error::NoTemplate(g.id.clone()))
    }

    /// The options CA should use for the group: `None` (use your defaults) unless the group
    /// overrides something, then CA's `defaults` with the overrides applied.
    ///
    /// # Errors
    /// [`Error::GroupNotFound`].
    pub fn options(
        &self,
        id: &str,
        defaults: Option<&AutoscalingOptions>,
    ) -> Result<Option<AutoscalingOptions>> {
        let (cfg, idx) = self.group(id)?;
        let g = &cfg.groups[idx];
        let Some(overrides) = &g.autoscaling_options else {
            return Ok(None);
        };
        let fallback = AutoscalingOptions::default();
        Ok(Some(overrides.apply(defaults.unwrap_or(&fallback))))
    }

    /// The price of running `node` for `period`, from its group's hourly price.
    ///
    /// # Errors
    /// [`Error::NodeNotManaged`], or [`Error::NoPrice`].
    pub async fn node_price(&self, node: &NodeRef, period: Duration) -> Result<f64> {
        let group = self
            .node_group_for_node(node)
            .await?
            .ok_or_else(|| Error::NodeNotManaged {
                name: node.name.clone(),
                provider_id: node.provider_id.clone(),
            })?;
        let hourly = group
            .price_per_hour
            .ok_or_else(|| Error::NoPrice(group.id.clone()))?;
        Ok(hourly * period.as_secs_f64() / 3600.0)
    }

    /// The label CA uses to recognise GPU nodes.
    pub fn gpu_label(&self) -> String {
        self.config.load().provider.gpu_label.clone()
    }

    /// The GPU types CA may see.
    pub fn gpu_types(&self) -> Vec<String> {
        self.config.load().gpu_types()
    }
}
