//! The kwok backend's durable state: one JSON record per group in the state ConfigMap,
//! changed only by optimistic-concurrency replaces, and what this process last read of each
//! group, which answers reads while the API server is unreachable.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use serde::{Deserialize, Serialize};
use tracing::debug;

use super::{
    KwokProvisioner, MANAGED_BY, MANAGED_BY_LABEL, MAX_CONFLICT_RETRIES, now_ms, random_suffix,
    spec,
};
use crate::model::{ErrorCode, Instance, NodeGroupId, NodeGroupSpec};
use crate::provision::{Error, Result};
use crate::telemetry::Chain;

/// Capacity requested but not created yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PendingNode {
    pub(super) name: String,
    pub(super) due_unix_ms: u64,
    /// What the node was requested for ([`crate::model::Claim`]'s text form); absent in
    /// records written before claims were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) claim: Option<String>,
    /// When it was requested, Unix milliseconds; absent in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) requested_unix_ms: Option<u64>,
}

/// A simulated failed instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct FailedNode {
    pub(super) name: String,
    pub(super) code: ErrorCode,
    pub(super) message: String,
    /// The claim of the pending node that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) claim: Option<String>,
}

/// One group's durable state, stored as JSON under the group id in the state ConfigMap.
/// Invariant at rest: `target == live nodes + pending + failed`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct GroupRecord {
    pub(super) target: u32,
    /// Nodes ever created, for failure injection.
    #[serde(default)]
    pub(super) created: u32,
    #[serde(default)]
    pub(super) pending: Vec<PendingNode>,
    #[serde(default)]
    pub(super) failed: Vec<FailedNode>,
    /// Nodes whose deletion was decided but may not have happened yet.
    #[serde(default)]
    pub(super) deleting: Vec<String>,
}

impl GroupRecord {
    pub(super) fn pending_count(&self) -> u32 {
        u32::try_from(self.pending.len()).unwrap_or(u32::MAX)
    }
}

/// What this process last read of a group, for reads while the API server is unreachable.
#[derive(Debug, Clone, Default)]
pub(super) struct LastKnown {
    pub(super) target: Option<u32>,
    pub(super) instances: Option<Vec<Instance>>,
}

impl KwokProvisioner {
    pub(super) fn known(
        &self,
    ) -> std::sync::MutexGuard<'_, (BTreeMap<NodeGroupId, LastKnown>, u64)> {
        self.last_known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The number of writes attempted so far; pass it to [`Self::remember`] after a read.
    pub(super) fn writes(&self) -> u64 {
        self.known().1
    }

    /// Records what a read or write that began after `writes` writes found, unless another
    /// write has started since (its result would be older than that write's).
    pub(super) fn remember(
        &self,
        writes: u64,
        group: &NodeGroupId,
        f: impl FnOnce(&mut LastKnown),
    ) {
        let mut known = self.known();
        if known.1 == writes {
            f(known.0.entry(group.clone()).or_default());
        }
    }

    /// Forgets what was read of `group`: a write is about to change it, or may have. Returns
    /// the write count to remember the write's own result with.
    pub(super) fn forget(&self, group: &NodeGroupId) -> u64 {
        let mut known = self.known();
        known.0.remove(group);
        known.1 += 1;
        known.1
    }

    /// `err`, unless it says the API server is unreachable and `pick` finds an answer in what
    /// was last read of `group`.
    pub(super) fn last_known<T>(
        &self,
        group: &NodeGroupId,
        err: Error,
        what: &'static str,
        pick: impl FnOnce(&LastKnown) -> Option<T>,
    ) -> Result<T> {
        if !matches!(err, Error::Unreachable { .. }) {
            return Err(err);
        }
        match self.known().0.get(group).and_then(pick) {
            Some(v) => {
                debug!(node_group.id = %group, error = %Chain(&err), what, "API server unreachable; answering from the last state read");
                Ok(v)
            }
            None => Err(err),
        }
    }

    pub(super) fn state_api(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.settings.state_namespace)
    }

    /// Reads the state ConfigMap, creating it when missing.
    pub(super) async fn read_state(&self, group: &NodeGroupId) -> Result<ConfigMap> {
        let api = self.state_api();
        let name = &self.settings.state_config_map;
        loop {
            match api.get_opt(name).await {
                Ok(Some(cm)) => return Ok(cm),
                Ok(None) if self.is_read_only() => return Ok(ConfigMap::default()),
                Ok(None) => {
                    let cm = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            labels: Some(BTreeMap::from([(
                                MANAGED_BY_LABEL.to_owned(),
                                MANAGED_BY.to_owned(),
                            )])),
                            ..ObjectMeta::default()
                        },
                        ..ConfigMap::default()
                    };
                    match api.create(&PostParams::default(), &cm).await {
                        Ok(cm) => return Ok(cm),
                        Err(kube::Error::Api(s)) if s.is_already_exists() => continue,
                        Err(e) => {
                            return Err(Self::backend_error(
                                group,
                                "creating the state ConfigMap",
                                &e,
                            ));
                        }
                    }
                }
                Err(e) => {
                    return Err(Self::backend_error(
                        group,
                        "reading the state ConfigMap",
                        &e,
                    ));
                }
            }
        }
    }

    pub(super) fn record_of(cm: &ConfigMap, group: &NodeGroupId) -> Result<Option<GroupRecord>> {
        let Some(text) = cm.data.as_ref().and_then(|d| d.get(group.as_str())) else {
            return Ok(None);
        };
        serde_json::from_str(text)
            .map(Some)
            .map_err(|e| Error::Backend {
                group: group.clone(),
                backend: "kwok",
                message: format!("state ConfigMap entry for the group does not parse: {e}"),
            })
    }

    /// Reads the group's record (created at min size if missing).
    pub(super) async fn record(&self, group: &NodeGroupSpec) -> Result<GroupRecord> {
        let cm = self.read_state(&group.id).await?;
        match Self::record_of(&cm, &group.id)? {
            Some(r) => Ok(r),
            None if self.is_read_only() => Ok(self.initial_record(group)),
            None => self.update(group, |_| Ok(())).await.map(|(r, ())| r),
        }
    }

    /// Applies `f` to the group's record with optimistic concurrency; `f` may run several times
    /// and must decide from the record it is given. A refusal from `f` writes nothing.
    pub(super) async fn update<T>(
        &self,
        group: &NodeGroupSpec,
        mut f: impl FnMut(&mut GroupRecord) -> Result<T>,
    ) -> Result<(GroupRecord, T)> {
        if self.is_read_only() {
            return Err(Error::Backend {
                group: group.id.clone(),
                backend: "kwok",
                message: "this replica is a standby under leader election; only the leader changes node groups".to_owned(),
            });
        }
        let api = self.state_api();
        for _ in 0..MAX_CONFLICT_RETRIES {
            let mut cm = self.read_state(&group.id).await?;
            let mut record = match Self::record_of(&cm, &group.id)? {
                Some(r) => r,
                None => self.initial_record(group),
            };
            let out = f(&mut record)?;
            let text = serde_json::to_string(&record).map_err(|e| Error::Backend {
                group: group.id.clone(),
                backend: "kwok",
                message: format!("encoding state: {e}"),
            })?;
            cm.data
                .get_or_insert_with(BTreeMap::new)
                .insert(group.id.to_string(), text);
            let writes = self.forget(&group.id);
            match api
                .replace(&self.settings.state_config_map, &PostParams::default(), &cm)
                .await
            {
                Ok(_) => {
                    self.remember(writes, &group.id, |k| k.target = Some(record.target));
                    return Ok((record, out));
                }
                Err(kube::Error::Api(s)) if s.is_conflict() => {
                    debug!(node_group.id = %group.id, "state update conflicted; retrying");
                    crate::provision::conflict_pause().await;
                }
                Err(e) => {
                    return Err(Self::backend_error(
                        &group.id,
                        "writing the state ConfigMap",
                        &e,
                    ));
                }
            }
        }
        Err(Error::Backend {
            group: group.id.clone(),
            backend: "kwok",
            message: format!(
                "state update still conflicting after {MAX_CONFLICT_RETRIES} attempts"
            ),
        })
    }

    /// A new group starts at min size, all of it requested now.
    pub(super) fn initial_record(&self, group: &NodeGroupSpec) -> GroupRecord {
        GroupRecord {
            target: group.min_size,
            pending: pending_nodes(group, group.min_size),
            ..GroupRecord::default()
        }
    }
}

/// `n` new nodes of `group` requested now, each named and given its due time.
pub(super) fn pending_nodes(group: &NodeGroupSpec, n: u32) -> Vec<PendingNode> {
    let now = now_ms();
    (0..n)
        .map(|i| {
            let name = format!("{}-{}", group.id, random_suffix());
            PendingNode {
                due_unix_ms: spec(group).due_at(now, i, &name),
                name,
                claim: None,
                requested_unix_ms: Some(now),
            }
        })
        .collect()
}
