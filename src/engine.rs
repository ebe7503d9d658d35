//! The use cases behind each RPC. The engine owns the live configuration (re-read on
//! `Refresh` when its files change), routes each node group to its provisioning backend and
//! turns backend answers into the contract CA relies on. Depends on `config`, `provision`,
//! `planner` and `cluster` (gang admission), `scaleup` (the recorder of decisions; the engine
//! is the scale-up loop's [`InstanceSource`](crate::scaleup::InstanceSource)), `audit`
//! (record phases), `events`, `leader`, `metrics`, `clock` and `model`; knows nothing of
//! gRPC. `increase` is `NodeGroupIncreaseSize` top to bottom, as its phases (prepare,
//! decide, record, apply, publish); `reload` re-reads the configuration, `decisions` records
//! what the engine decided,
//! `failed` keeps the failed instances CA deleted before the scale-up loop saw them, `acting`
//! holds changes to the leader and takes the audit log over, `instances` answers the
//! scale-up loop, `error` lists the errors.

mod acting;
pub mod admission;
mod composite;
mod decisions;
mod error;
mod failed;
mod increase;
mod instances;
mod reload;
mod request;
mod reservation;
mod unapplied;
mod withdraw;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tracing::info;

use crate::config::{self, Fingerprint, Loaded};
use crate::metrics::Metrics;
use crate::model::{AutoscalingOptions, Instance, NodeGroupSpec, TemplateNode, echo};
use crate::provision::{NodeRef, Provisioner};
use crate::scaleup::Recorder;
pub use error::{Error, Result};
use request::NodeList;

/// [`Engine::claims_kept`]'s answer: the audit log, the configuration with the group's index,
/// and the group's backend.
type ClaimsKept<'e> = (&'e Recorder, Arc<Loaded>, usize, &'e Arc<dyn Provisioner>);

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
    /// Notified after each scale-up applied: the lifecycle loop then ticks at once (see
    /// [`crate::scaleup::InstanceSource::scaled_up`]).
    scaled_up: Arc<tokio::sync::Notify>,
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
            scaled_up: Arc::new(tokio::sync::Notify::new()),
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

    /// Turns on gang admission in `NodeGroupIncreaseSize`, reading gangs from `source`, with
    /// candidates of one priority taken oldest first.
    #[must_use]
    pub fn with_admission(
        self,
        policy: crate::planner::Policy,
        source: Arc<dyn admission::GangSource>,
    ) -> Self {
        self.with_admission_in_order(policy, crate::planner::Order::Age, source)
    }

    /// Turns on gang admission in `NodeGroupIncreaseSize`, reading gangs from `source`, with
    /// candidates of one priority taken in `order` (`admission.order`).
    #[must_use]
    pub fn with_admission_in_order(
        mut self,
        policy: crate::planner::Policy,
        order: crate::planner::Order,
        source: Arc<dyn admission::GangSource>,
    ) -> Self {
        self.admission = Some(admission::Admission::new(policy, order, source));
        self.resume_in_flight();
        self
    }

    /// With deferral on: a gang some of whose nodes on another group failed is repaired on
    /// the group CA asks, with only its missing nodes (see
    /// [`admission::Admission::with_repair_where_asked`]). No effect without admission.
    #[must_use]
    pub fn with_repair_where_asked(mut self, on: bool) -> Self {
        self.admission = self.admission.map(|a| a.with_repair_where_asked(on));
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

    /// What the lifecycle passes over instance claims need for group `id`: the audit log, the
    /// configuration with the group's index, and its backend; `None` without the audit log
    /// or when the backend keeps no claims (nothing to do then).
    fn claims_kept(&self, id: &str) -> Result<Option<ClaimsKept<'_>>> {
        let Some(recorder) = self.audit.get() else {
            return Ok(None);
        };
        let (cfg, idx) = self.group(id)?;
        let backend = self.backend(&cfg.groups[idx])?;
        Ok(backend
            .keeps_claims()
            .then_some((recorder.as_ref(), cfg, idx, backend)))
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
        if let Some(admission) = &self.admission {
            admission.charge_failed(g.id.as_str(), &instances);
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
