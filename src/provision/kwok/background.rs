//! The kwok backend's background work: creating due capacity, advertising late devices and
//! simulating the CSI attacher, and the loop that runs them, logging a failure streak once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::storage::v1::{VolumeAttachment, VolumeError};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::nodes::late_resources;
use super::state::{FailedNode, GroupRecord};
use super::{FIELD_MANAGER, KwokProvisioner, MANAGED_BY, MANAGED_BY_LABEL, now_ms, spec};
use crate::model::{BackendSpec, NodeGroupSpec, labels, millis};
use crate::provision::Result;
use crate::telemetry::Chain;

/// Consecutive failures of the periodic steps of [`KwokProvisioner::run`], per step and group:
/// the first failure of a streak is logged at warn, the others at debug, and the success that
/// ends it at info with the streak's length. An API-server outage thus logs one warning per
/// step and group, not one per tick.
#[derive(Debug, Default)]
pub(super) struct Streaks(BTreeMap<(&'static str, String), u64>);

/// How [`Streaks::report`] logged a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Logged {
    /// A success after a success: nothing.
    Quiet,
    /// The first failure of a streak.
    Warn,
    /// A later failure of a streak.
    Debug,
    /// The success ending a streak of this many failures.
    Recovered(u64),
}

impl Streaks {
    /// Logs `result` of `step` for `group` (empty for every group) as described above.
    pub(super) fn report(&mut self, step: &'static str, group: &str, result: Result<()>) -> Logged {
        let key = (step, group.to_owned());
        match result {
            Ok(()) => match self.0.remove(&key) {
                Some(failures) => {
                    info!(
                        node_group.id = group,
                        step, failures, "recovered after failing"
                    );
                    Logged::Recovered(failures)
                }
                None => Logged::Quiet,
            },
            Err(e) => {
                let failures = self.0.entry(key).or_insert(0);
                *failures += 1;
                if *failures == 1 {
                    warn!(node_group.id = group, step, error = %Chain(&e), "failed; retrying every tick (further failures are logged at debug)");
                    Logged::Warn
                } else {
                    debug!(node_group.id = group, step, error = %Chain(&e), failures = *failures, "still failing; will retry");
                    Logged::Debug
                }
            }
        }
    }
}

/// Clears the provisioner's `looping` flag when [`KwokProvisioner::run`] ends, however it
/// ends, so increases create their due nodes themselves again.
struct Looping<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for Looping<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

pub(super) fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    crate::clock::timestamp()
}

impl KwokProvisioner {
    /// Turns due capacity into Node objects (or simulated failures) and finishes deletions.
    /// Safe to run concurrently and after a crash at any point.
    ///
    /// # Errors
    /// A Kubernetes API failure.
    pub async fn materialize(&self, group: &NodeGroupSpec) -> Result<()> {
        self.materialize_record(group).await.map(|_| ())
    }

    /// [`KwokProvisioner::materialize`], returning the group's record as it stands afterwards
    /// so callers need not read it again.
    pub(super) async fn materialize_record(&self, group: &NodeGroupSpec) -> Result<GroupRecord> {
        let _guard = self.materialize_lock.lock().await;
        let record = self.record(group).await?;
        // The record as last read or written, returned so callers need not read it again.
        let mut latest = record.clone();
        for name in &record.deleting {
            self.delete_node(&group.id, name).await?;
        }
        if !record.deleting.is_empty() {
            let done: BTreeSet<String> = record.deleting.iter().cloned().collect();
            (latest, ()) = self
                .update(group, |r| {
                    r.deleting.retain(|n| !done.contains(n));
                    Ok(())
                })
                .await?;
        }
        let now = now_ms();
        let failure = spec(group).failure;
        for due in record.pending.iter().filter(|p| p.due_unix_ms <= now) {
            // Decide failure under the record's concurrency control.
            let fail;
            (latest, fail) = self
                .update(group, |r| {
                    let Some(pos) = r.pending.iter().position(|p| p.name == due.name) else {
                        return Ok(None);
                    };
                    match &failure {
                        Some(f) if r.created >= f.after_instances && f.fails(&due.name) => {
                            let p = r.pending.remove(pos);
                            r.created = r.created.saturating_add(1);
                            let failed = FailedNode {
                                claim: p.claim,
                                name: p.name,
                                code: f.code,
                                message: format!(
                                    "simulated {} in node group {} after {} instance(s)",
                                    f.code, group.id, f.after_instances
                                ),
                            };
                            r.failed.push(failed.clone());
                            Ok(Some(Some(failed)))
                        }
                        _ => Ok(Some(None)),
                    }
                })
                .await?;
            match fail {
                None => continue,
                Some(Some(failed)) => {
                    warn!(node_group.id = %group.id, node.name = %failed.name, code = %failed.code, "simulated instance failure");
                    continue;
                }
                Some(None) => {}
            }
            self.create_node(group, due).await?;
            (latest, ()) = self
                .update(group, |r| {
                    if let Some(pos) = r.pending.iter().position(|p| p.name == due.name) {
                        r.pending.remove(pos);
                        r.created = r.created.saturating_add(1);
                    }
                    Ok(())
                })
                .await?;
        }
        Ok(latest)
    }

    /// Runs [`KwokProvisioner::materialize`] for `groups` every `period`, and at once when an
    /// increase made capacity due, until `shutdown`, and the simulated attacher for groups
    /// that configure one. While it runs, increases leave their due nodes to it.
    pub async fn run(
        &self,
        groups: impl Fn() -> Vec<NodeGroupSpec>,
        period: Duration,
        shutdown: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut streaks = Streaks::default();
        self.looping
            .store(true, std::sync::atomic::Ordering::Release);
        let _stopped = Looping(&self.looping);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
                // An increase made nodes due at once: a pass now, not at the next tick.
                () = self.due.notified() => {}
            }
            let groups: Vec<NodeGroupSpec> = groups()
                .into_iter()
                .filter(|g| matches!(g.backend, BackendSpec::Kwok(_)))
                .collect();
            for g in &groups {
                let result = self.materialize(g).await;
                let _ = streaks.report("materialising kwok nodes", g.id.as_str(), result);
            }
            let result = self.simulate_attach(&groups).await;
            let _ = streaks.report("simulated CSI attacher", "", result);
            for g in &groups {
                let result = self.advertise_devices(g).await;
                let _ = streaks.report("advertising late RDMA resources", g.id.as_str(), result);
            }
        }
    }

    /// Adds the RDMA resources held back by `deviceDelay` to the capacity and allocatable of
    /// `group`'s nodes registered at least that long ago (a simulated device plugin).
    ///
    /// # Errors
    /// A Kubernetes API failure.
    pub async fn advertise_devices(&self, group: &NodeGroupSpec) -> Result<()> {
        let late = late_resources(group);
        if late.is_empty() {
            return Ok(());
        }
        let delay = millis(spec(group).device_delay);
        let now = now_ms();
        for node in self.list_nodes(&group.id).await? {
            let Some(name) = node.metadata.name.as_deref() else {
                continue;
            };
            let has_all = node
                .status
                .as_ref()
                .and_then(|s| s.capacity.as_ref())
                .is_some_and(|c| late.iter().all(|r| c.contains_key(r)));
            let registered = node
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| u64::try_from(t.0.as_millisecond()).unwrap_or(0));
            // Whole-second timestamps: count from the end of that second, as the attacher does.
            if has_all || registered.saturating_add(1000).saturating_add(delay) > now {
                continue;
            }
            let full = self.node_object_with(group, name, &BTreeSet::new())?;
            let patch = serde_json::json!({ "status": {
                "capacity": full.status.as_ref().and_then(|s| s.capacity.as_ref()),
                "allocatable": full.status.as_ref().and_then(|s| s.allocatable.as_ref()),
            }});
            self.nodes_api()
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| Self::backend_error(&group.id, "advertising RDMA resources", &e))?;
            info!(node_group.id = %group.id, node.name = name, resources = ?late, "simulated device plugin advertised RDMA resources");
        }
        Ok(())
    }

    /// Marks VolumeAttachments on this backend's nodes attached (or failed) once their delay
    /// has passed, for groups with `attach` configured.
    ///
    /// # Errors
    /// A Kubernetes API failure.
    pub async fn simulate_attach(&self, groups: &[NodeGroupSpec]) -> Result<()> {
        let with_attach: Vec<(&NodeGroupSpec, _)> = groups
            .iter()
            .filter_map(|g| spec(g).attach.map(|a| (g, a)))
            .collect();
        if with_attach.is_empty() {
            return Ok(());
        }
        let api: Api<VolumeAttachment> = Api::all(self.client.clone());
        let Some((first, _)) = with_attach.first() else {
            return Ok(());
        };
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| Self::backend_error(&first.id, "listing VolumeAttachments", &e))?;
        // Which group each of our nodes belongs to, from the nodes' own labels.
        let lp = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
        let owners: BTreeMap<String, String> = self
            .nodes_api()
            .list(&lp)
            .await
            .map_err(|e| Self::backend_error(&first.id, "listing nodes", &e))?
            .items
            .into_iter()
            .filter_map(|n| {
                let group = n.metadata.labels.as_ref()?.get(labels::NODE_GROUP)?.clone();
                Some((n.metadata.name?, group))
            })
            .collect();
        let now = now_ms();
        for va in list.items {
            let node = va.spec.node_name.as_str();
            let Some(owner) = owners.get(node) else {
                continue;
            };
            let Some((g, attach)) = with_attach.iter().find(|(g, _)| g.id.as_str() == owner) else {
                continue;
            };
            let status = va.status.as_ref();
            if status.is_some_and(|s| s.attached || s.attach_error.is_some()) {
                continue;
            }
            let created = va
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| u64::try_from(t.0.as_millisecond()).unwrap_or(0))
                .unwrap_or(0);
            // creationTimestamp has whole-second precision: count from the end of that second
            // so the simulated attach never comes earlier than the configured delay.
            if created
                .saturating_add(1000)
                .saturating_add(millis(attach.delay))
                > now
            {
                continue;
            }
            let name = va.metadata.name.clone().unwrap_or_default();
            let fails = attach.fail_driver.as_deref() == Some(va.spec.attacher.as_str());
            let status = if fails {
                serde_json::json!({ "status": { "attached": false, "attachError": VolumeError {
                    message: Some(format!("simulated attach failure for driver {}", va.spec.attacher)),
                    time: Some(Time(jiff_now())),
                    error_code: None,
                } } })
            } else {
                serde_json::json!({ "status": { "attached": true } })
            };
            api.patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Merge(&status),
            )
            .await
            .map_err(|e| Self::backend_error(&g.id, "updating a VolumeAttachment", &e))?;
            info!(node_group.id = %g.id, node.name = node, volume_attachment = %name, attached = !fails, "simulated CSI attach");
        }
        Ok(())
    }
}
