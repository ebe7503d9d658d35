//! The in-memory backend: a simulated cloud that needs nothing outside the process. Requested
//! capacity becomes an instance after `createDelay`, the instance is `creating` for
//! `provisionDelay` and then `running`; an optional failure makes instances after the first N
//! fail with a stable error code. Time is read from tokio's clock, so tests can pause it.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{Error, NodeRef, Provisioner, Result};
use crate::model::{
    BackendSpec, Claim, Instance, InstanceError, InstanceState, MemoryBackendSpec, NodeGroupId,
    NodeGroupSpec,
};

/// Scheme of memory instance ids: `gangscaler-memory://<group>/<node name>`.
pub const PROVIDER_ID_SCHEME: &str = "gangscaler-memory://";

#[derive(Debug)]
struct MemInstance {
    id: String,
    node_name: String,
    created_at: Instant,
    error: Option<InstanceError>,
    claim: Option<Claim>,
}

#[derive(Debug, Default)]
struct GroupState {
    /// Request times (and claims) of capacity not created yet, oldest first.
    pending: VecDeque<(Instant, Option<Claim>)>,
    instances: Vec<MemInstance>,
    /// Instances ever created, for failure injection.
    created_total: u32,
    /// Next name suffix.
    seq: u64,
}

impl GroupState {
    fn target(&self) -> u32 {
        u32::try_from(self.pending.len() + self.instances.len()).unwrap_or(u32::MAX)
    }
}

#[derive(Debug, Default)]
struct State {
    groups: HashMap<NodeGroupId, GroupState>,
    by_provider_id: HashMap<String, NodeGroupId>,
    by_name: HashMap<String, NodeGroupId>,
}

/// The in-memory provisioning backend.
#[derive(Debug, Default)]
pub struct MemoryProvisioner {
    state: Mutex<State>,
}

/// The group's memory settings. The engine routes only memory groups here; anything else is
/// read as an instant, failure-free group rather than panicking on a serving path.
fn settings(group: &NodeGroupSpec) -> MemoryBackendSpec {
    match &group.backend {
        BackendSpec::Memory(m) => m.clone(),
        BackendSpec::Kwok(_) | BackendSpec::ClusterApi(_) => MemoryBackendSpec {
            create_delay: std::time::Duration::ZERO,
            provision_delay: std::time::Duration::ZERO,
            failure: None,
        },
    }
}

impl State {
    /// Makes `group` known, starting it at its min size with running instances.
    fn ensure(&mut self, group: &NodeGroupSpec, now: Instant) -> &mut GroupState {
        if !self.groups.contains_key(&group.id) {
            let mut g = GroupState::default();
            let settings = settings(group);
            let started = now.checked_sub(settings.provision_delay).unwrap_or(now);
            for _ in 0..group.min_size {
                let inst = new_instance(&group.id, &mut g, started, None, None);
                self.by_provider_id
                    .insert(inst.id.clone(), group.id.clone());
                self.by_name
                    .insert(inst.node_name.clone(), group.id.clone());
                g.instances.push(inst);
            }
            self.groups.insert(group.id.clone(), g);
        }
        self.advance(group, now);
        // Present: inserted above if it was missing.
        self.groups.entry(group.id.clone()).or_default()
    }

    /// Turns pending capacity whose create delay has passed into instances.
    fn advance(&mut self, group: &NodeGroupSpec, now: Instant) {
        let settings = settings(group);
        let Some(g) = self.groups.get_mut(&group.id) else {
            return;
        };
        while let Some(&(requested, _)) = g.pending.front() {
            let created_at = requested + settings.create_delay;
            if created_at > now {
                break;
            }
            let claim = g.pending.pop_front().and_then(|(_, claim)| claim);
            let next_name = format!("{}-{:05}", group.id, g.seq + 1);
            let error = settings.failure.as_ref().and_then(|f| {
                (g.created_total >= f.after_instances && f.fails(&next_name)).then(|| {
                    InstanceError {
                        code: f.code,
                        message: format!(
                            "simulated {} in node group {} after {} instance(s)",
                            f.code, group.id, f.after_instances
                        ),
                    }
                })
            });
            let inst = new_instance(&group.id, g, created_at, error, claim);
            self.by_provider_id
                .insert(inst.id.clone(), group.id.clone());
            self.by_name
                .insert(inst.node_name.clone(), group.id.clone());
            g.instances.push(inst);
        }
    }
}

fn new_instance(
    group: &NodeGroupId,
    g: &mut GroupState,
    created_at: Instant,
    error: Option<InstanceError>,
    claim: Option<Claim>,
) -> MemInstance {
    g.seq += 1;
    g.created_total = g.created_total.saturating_add(1);
    // The name `advance` drew the instance's failure from.
    let node_name = format!("{group}-{:05}", g.seq);
    MemInstance {
        id: format!("{PROVIDER_ID_SCHEME}{group}/{node_name}"),
        node_name,
        created_at,
        error,
        claim,
    }
}

impl MemoryProvisioner {
    /// An empty simulated cloud.
    pub fn new() -> Self {
        Self::default()
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> Result<T> {
        // A poisoned lock means a panic mid-update; the state is plain data, keep serving.
        let mut guard = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(f(&mut guard))
    }
}

#[async_trait]
impl Provisioner for MemoryProvisioner {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn sync_groups(&self, groups: &[NodeGroupSpec]) -> Result<()> {
        let now = crate::clock::mono();
        self.with_state(|s| {
            for g in groups {
                s.ensure(g, now);
            }
        })
    }

    async fn target_size(&self, group: &NodeGroupSpec) -> Result<u32> {
        let now = crate::clock::mono();
        self.with_state(|s| s.ensure(group, now).target())
    }

    fn keeps_claims(&self) -> bool {
        true
    }

    async fn increase_for(
        &self,
        group: &NodeGroupSpec,
        delta: u32,
        claims: &[Claim],
    ) -> Result<u32> {
        let now = crate::clock::mono();
        self.with_state(|s| {
            let g = s.ensure(group, now);
            let current = g.target();
            let new = current.saturating_add(delta);
            if new > group.max_size {
                return Err(Error::AboveMax {
                    group: group.id.clone(),
                    current,
                    delta,
                    max: group.max_size,
                });
            }
            let mut claims = claims.iter();
            g.pending
                .extend((0..delta).map(|_| (now, claims.next().cloned())));
            s.advance(group, now);
            Ok(new)
        })?
    }

    async fn pending_claims(&self, group: &NodeGroupSpec) -> Result<Vec<Claim>> {
        let now = crate::clock::mono();
        self.with_state(|s| {
            s.ensure(group, now)
                .pending
                .iter()
                .filter_map(|(_, c)| c.clone())
                .collect()
        })
    }

    async fn withdraw(&self, group: &NodeGroupSpec, claims: &[Claim]) -> Result<u32> {
        let now = crate::clock::mono();
        self.with_state(|s| {
            let g = s.ensure(group, now);
            let mut left: Vec<&Claim> = claims.iter().collect();
            let before = g.pending.len();
            g.pending.retain(|(_, c)| {
                let Some(pos) = c.as_ref().and_then(|c| left.iter().position(|l| *l == c)) else {
                    return true;
                };
                left.swap_remove(pos);
                false
            });
            u32::try_from(before - g.pending.len()).unwrap_or(u32::MAX)
        })
    }

    async fn decrease_target(&self, group: &NodeGroupSpec, delta: u32) -> Result<u32> {
        let now = crate::clock::mono();
        self.with_state(|s| {
            let g = s.ensure(group, now);
            let pending = u32::try_from(g.pending.len()).unwrap_or(u32::MAX);
            if delta > pending {
                return Err(Error::WouldDeleteExisting {
                    group: group.id.clone(),
                    requested: delta,
                    pending,
                    target: g.target(),
                });
            }
            // Cancel the newest requests first.
            for _ in 0..delta {
                g.pending.pop_back();
            }
            Ok(g.target())
        })?
    }

    async fn delete(&self, group: &NodeGroupSpec, nodes: &[NodeRef]) -> Result<u32> {
        let now = crate::clock::mono();
        self.with_state(|s| {
            s.ensure(group, now);
            let State {
                groups,
                by_provider_id,
                by_name,
            } = s;
            let g = groups.get_mut(&group.id).ok_or_else(|| Error::Backend {
                group: group.id.clone(),
                backend: "memory",
                message: "group state vanished".to_owned(),
            })?;
            // Validate every node before changing anything: all or nothing.
            let mut doomed: Vec<usize> = Vec::with_capacity(nodes.len());
            for node in nodes {
                let idx = g.instances.iter().position(|i| {
                    (!node.provider_id.is_empty() && i.id == node.provider_id)
                        || (node.provider_id.is_empty() && i.node_name == node.name)
                });
                match idx {
                    Some(i) if !doomed.contains(&i) => doomed.push(i),
                    Some(_) => {}
                    None => {
                        return Err(Error::NotInGroup {
                            group: group.id.clone(),
                            node: node.name.clone(),
                            provider_id: node.provider_id.clone(),
                        });
                    }
                }
            }
            let current = g.target();
            let healthy = doomed
                .iter()
                .filter(|&&i| g.instances[i].error.is_none())
                .count();
            let removing = u32::try_from(doomed.len()).unwrap_or(u32::MAX);
            if healthy > 0 && current.saturating_sub(removing) < group.min_size {
                return Err(Error::BelowMin {
                    group: group.id.clone(),
                    current,
                    removing,
                    min: group.min_size,
                });
            }
            doomed.sort_unstable_by(|a, b| b.cmp(a));
            for i in doomed {
                let inst = g.instances.remove(i);
                by_provider_id.remove(&inst.id);
                by_name.remove(&inst.node_name);
            }
            Ok(g.target())
        })?
    }

    async fn instances(&self, group: &NodeGroupSpec) -> Result<Vec<Instance>> {
        let now = crate::clock::mono();
        let provision_delay = settings(group).provision_delay;
        self.with_state(|s| {
            s.ensure(group, now)
                .instances
                .iter()
                .map(|i| Instance {
                    id: i.id.clone(),
                    node_name: i.node_name.clone(),
                    state: if i.error.is_none() && i.created_at + provision_delay <= now {
                        InstanceState::Running
                    } else {
                        InstanceState::Creating
                    },
                    error: i.error.clone(),
                    claim: i.claim.clone(),
                })
                .collect()
        })
    }

    async fn lookup(&self, node: &NodeRef) -> Result<Option<NodeGroupId>> {
        // The same rule as `delete`: a providerID decides alone; the name counts only for
        // nodes that have none yet. Otherwise NodeGroupForNode could claim a node that
        // NodeGroupDeleteNodes then refuses.
        self.with_state(|s| {
            if node.provider_id.is_empty() {
                s.by_name.get(&node.name).cloned()
            } else {
                s.by_provider_id.get(&node.provider_id).cloned()
            }
        })
    }
}

#[cfg(test)]
mod tests;
