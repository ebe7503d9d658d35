//! Live configuration: `Refresh` re-reads the files when they changed, syncs the backends
//! and swaps the configuration in, warning where a group's new bounds miss its target.

use std::sync::Arc;

use tracing::{error, info, warn};

use super::{Engine, Result};
use crate::config::{self, Loaded};
use crate::model::NodeGroupSpec;
use crate::telemetry::{Chain, chain};

impl Engine {
    pub(super) async fn sync(&self, groups: &[NodeGroupSpec]) -> Result<()> {
        for p in self.provisioners.values() {
            let mine: Vec<NodeGroupSpec> = groups
                .iter()
                .filter(|g| g.backend.kind() == p.kind())
                .cloned()
                .collect();
            p.sync_groups(&mine).await?;
        }
        for g in groups {
            let backend = self.backend(g)?;
            // Not fatal: the next admission decision for the group reads it again, and
            // refuses to decide while it cannot.
            if let Err(e) = self.read_backend_blocker(g, backend.as_ref()).await {
                warn!(node_group.id = %g.id, error = %Chain(&e), "cannot read whether the group's backend registers new nodes reserved");
            }
        }
        Ok(())
    }

    /// Re-reads the node-group files if they changed. Never fails: an invalid edit keeps the
    /// last good configuration, is logged once and counted, because an error here would abort
    /// CA's whole loop.
    pub async fn refresh(&self) {
        let Some(source) = &self.source else {
            return;
        };
        let mut last = self.last_fingerprint.lock().await;
        let current = self.config.load_full();
        let fingerprint = match source.fingerprint(&current.provider.node_groups_dir) {
            Ok(f) => f,
            Err(e) => {
                if last.is_some() {
                    error!(error = %Chain(&e), "reading configuration failed; keeping the last good configuration");
                    self.metrics.config_reload(false);
                    *last = None;
                }
                return;
            }
        };
        if *last == Some(fingerprint) {
            return;
        }
        *last = Some(fingerprint);
        match self.try_reload(source, &current).await {
            Ok(new) => {
                info!(node_groups = new.groups.len(), "configuration reloaded");
                let new = Arc::new(new);
                self.config.store(Arc::clone(&new));
                self.metrics.config_reload(true);
                self.check_max_sizes(&current, &new).await;
            }
            Err(message) => {
                error!(error = %message, "configuration edit rejected; keeping the last good configuration");
                self.metrics.config_reload(false);
            }
        }
    }

    /// Loads the configuration again and syncs the backends with it. The error is the
    /// whole cause chain, as `validate` prints it.
    pub(super) async fn try_reload(
        &self,
        source: &config::Source,
        current: &Loaded,
    ) -> Result<Loaded, String> {
        let new = source.load().map_err(|e| chain(&e))?;
        if new.provider != current.provider {
            warn!(
                "provider.yaml changed: server, TLS and GPU settings take effect only after a restart"
            );
        }
        for old in &current.groups {
            if new.groups.iter().any(|g| g.id == old.id) {
                continue;
            }
            let target = match self.backend(old) {
                Ok(b) => b.target_size(old).await.map_err(|e| chain(&e))?,
                Err(e) => return Err(chain(&e)),
            };
            if target > 0 {
                return Err(format!(
                    "node group {} was removed from the configuration but still has target size {target}; scale it to zero before removing it",
                    old.id
                ));
            }
        }
        // Groups keep the provider settings they started with.
        let new = Loaded {
            provider: current.provider.clone(),
            groups: new.groups,
        };
        self.sync(&new.groups).await.map_err(|e| chain(&e))?;
        Ok(new)
    }

    /// After a reload: keeps the per-group gauges in step with the groups, and compares the
    /// target of every group whose `maxSize` changed (or that is new) with its new maximum.
    /// A target above it is kept, never shrunk: Cluster Autoscaler itself only skips such a
    /// group for scale-up and removes its nodes one by one as they become unneeded (see
    /// docs/configuration.md, "Lowering `maxSize` below the target"). A target that cannot
    /// be read now is compared on the next call that reads it.
    pub(super) async fn check_max_sizes(&self, old: &Loaded, new: &Loaded) {
        let removed: Vec<&str> = old
            .groups
            .iter()
            .filter(|o| !new.groups.iter().any(|g| g.id == o.id))
            .map(|o| o.id.as_str())
            .collect();
        self.metrics
            .node_groups(new.groups.iter().map(|g| g.id.as_str()), removed);
        for g in &new.groups {
            let before = old.groups.iter().find(|o| o.id == g.id);
            if before.is_some_and(|o| o.max_size == g.max_size) {
                continue;
            }
            let Ok(backend) = self.backend(g) else {
                continue;
            };
            match backend.target_size(g).await {
                Ok(target) => {
                    let lowered = before.is_some_and(|o| o.max_size > g.max_size);
                    self.note_target(g, target, lowered);
                }
                Err(e) => {
                    warn!(node_group.id = %g.id, max_size = g.max_size, error = %Chain(&e), "reading the target size to compare it with the new maxSize failed; it is compared on the next call that reads it");
                }
            }
        }
    }

    /// Compares `target` with the group's `maxSize`: keeps
    /// `gangscaler_node_group_target_above_max` in step, and logs a warning naming the group,
    /// its maxSize and its target when the target is above the maximum (when it first is, and
    /// after every reload that `lowered` maxSize), and an info line when it is back within.
    pub(super) fn note_target(&self, g: &NodeGroupSpec, target: u32, lowered: bool) {
        let above = target > g.max_size;
        let was = self.metrics.target_above_max(g.id.as_str(), above);
        if above && (lowered || !was) {
            warn!(
                node_group.id = %g.id,
                max_size = g.max_size,
                target_size = target,
                "node group target size is above its maxSize: the nodes are kept (none is removed for a configuration edit), NodeGroupIncreaseSize is refused until the target is within maxSize, and Cluster Autoscaler removes nodes only as they become unneeded"
            );
        } else if !above && was {
            info!(
                node_group.id = %g.id,
                max_size = g.max_size,
                target_size = target,
                "node group target size is within its maxSize again"
            );
        }
    }
}
