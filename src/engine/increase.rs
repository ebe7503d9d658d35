//! `NodeGroupIncreaseSize`, top to bottom. [`Engine::increase_size`] runs each call in a task
//! of its own, one at a time; the call itself is five phases:
//!
//! 1. **prepare**: the group, its backend, whether the backend registers new Nodes reserved,
//!    and the group's target;
//! 2. **decide**: the planner's decision for this group from the cluster view, and the
//!    decisions of the other groups a composite or a spread gang takes a share of;
//! 3. **record**: every decision durable in the audit log before any node is requested (a
//!    refused call records its decision and stops here);
//! 4. **apply**: the other groups' shares first, then this group; a failure takes back the
//!    shares added and ends the recorded lifecycles;
//! 5. **publish**: Events on the gangs and the nodes remembered in flight for them.
//!
//! Without gang admission a call is prepare and apply only: CA's delta, as asked.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::admission::{Admission, Unavailable};
use super::request::positive;
use super::{Engine, Error, Result};
use crate::clock;
use crate::config::Loaded;
use crate::model::{Claim, NodeGroupSpec, echo};
use crate::planner::Decision;
use crate::provision::{self, Provisioner};
use crate::telemetry::Chain;

/// What the decide phase settled: this group's decision, the other groups' decisions of the
/// same cross-group scale-up, and those groups' specs and backends (in the same order).
struct Plan<'c> {
    decision: Decision,
    companions: Vec<Decision>,
    shares: Vec<(&'c NodeGroupSpec, Arc<dyn Provisioner>)>,
}

impl Plan<'_> {
    /// This group's decision, then the companions'.
    fn decisions(&self) -> impl Iterator<Item = &Decision> {
        std::iter::once(&self.decision).chain(&self.companions)
    }
}

/// The groups whose decisions are recorded, each with its scale-up id if it has one.
type Recorded<'c> = Vec<(&'c NodeGroupSpec, Option<String>)>;

impl Engine {
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
    /// [`Error::GroupNotFound`], [`Error::InvalidRequest`] for `delta <= 0`, the backend's
    /// refusal ([`provision::Error::AboveMax`], also when the target is already above a
    /// `maxSize` a reload lowered) or failure, and with gang admission [`Error::Rejected`],
    /// [`Error::NotSynced`] or [`Error::ViewStale`] (no decision is made or recorded from a
    /// cluster view that may be behind); [`Error::NotLeader`] on a replica that may not act;
    /// [`Error::Interrupted`] if the call's task ended without an answer (a panic, the
    /// runtime shutting down) or was not begun.
    pub async fn increase_size(self: &Arc<Self>, id: &str, delta: i32) -> Result<u32> {
        let engine = Arc::clone(self);
        let group = id.to_owned();
        // Cancelled when the caller stops waiting: a call still queued then is not begun.
        let gone = tokio_util::sync::CancellationToken::new();
        let _caller = gone.clone().drop_guard();
        // The task logs under the caller's span (the RPC's, with its group and outcome).
        let span = tracing::Span::current();
        let call = tokio::spawn(tracing::Instrument::instrument(
            async move {
                let _one_at_a_time = engine.increases.clone().lock_owned().await;
                if gone.is_cancelled() {
                    info!(node_group.id = %echo(&group), delta, "increase not begun: its caller stopped waiting while it queued");
                    return Err(Error::Interrupted {
                        group,
                        why: "the caller stopped waiting before it began".into(),
                    });
                }
                engine.increase_now(&group, delta).await
            },
            span,
        ));
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

    /// One call, under the increase lock: the phases of the module docs.
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
            let target = self.increase_one(backend.as_ref(), g, delta, &[]).await?;
            info!(node_group.id = %g.id, delta, target, "target size increased");
            return Ok(target);
        };
        let now_ms = clock::now_ms();
        let target = self.prepare(g, backend.as_ref()).await?;
        let plan = self
            .decide(admission, &cfg, g, target, delta, now_ms)
            .await?;
        if !plan.decision.is_accepted() || plan.decision.applied_delta == 0 {
            return Err(self.refuse(g, &plan.decision, now_ms));
        }
        // Deciding took time: the leadership is checked again just before acting.
        self.check_leader()?;
        let recorded = self.record(g, &plan, now_ms)?;
        let new_target = self.apply(g, backend.as_ref(), &plan, &recorded).await?;
        self.scaled_up.notify_one();
        self.publish(admission, &plan, now_ms.div_euclid(1000));
        info!(node_group.id = %g.id, ca_delta = delta, applied_delta = plan.decision.applied_delta, target = new_target, companions = plan.companions.len(), "target size increased");
        Ok(new_target)
    }

    /// Prepare: whether the backend registers the new Nodes reserved, read fresh (a decision
    /// that reserves must not rest on a template read before an edit), and the group's target.
    async fn prepare(&self, g: &NodeGroupSpec, backend: &dyn Provisioner) -> Result<u32> {
        self.read_backend_blocker(g, backend).await?;
        let target = backend.target_size(g).await?;
        self.note_target(g, target, false);
        Ok(target)
    }

    /// Decide: the decision for `g` and, where a composite with a child `g` hosts or a gang
    /// spread over its pool takes nodes of other groups, theirs (a group whose target cannot
    /// be read takes no share). Each is logged and counted.
    async fn decide<'c>(
        &self,
        admission: &Admission,
        cfg: &'c Loaded,
        g: &NodeGroupSpec,
        target: u32,
        delta: u32,
        now_ms: i64,
    ) -> Result<Plan<'c>> {
        let now = now_ms.div_euclid(1000);
        let gpu_label = &cfg.provider.gpu_label;
        let view = admission.view(now).map_err(|e| unavailable(g, e))?;
        let others = if admission.needs_other_groups(&view, g, gpu_label, target) {
            self.other_targets(cfg, g).await
        } else {
            Vec::new()
        };
        let others: Vec<(&NodeGroupSpec, u32)> =
            others.iter().map(|(i, t)| (&cfg.groups[*i], *t)).collect();
        let (mut decision, mut companions) =
            admission.decide_in(&view, g, gpu_label, target, delta, &others, now);
        drop(view);
        let shares = companions
            .iter()
            .map(|c| {
                self.companion(cfg, &c.group)
                    .map(|(spec, backend)| (spec, Arc::clone(backend)))
            })
            .collect::<Result<Vec<_>>>()?;
        decision.reservation_off = self.reservation_off(g, gpu_label);
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
            c.reservation_off = self.reservation_off(cg, gpu_label);
        }
        let plan = Plan {
            decision,
            companions,
            shares,
        };
        for d in plan.decisions() {
            self.log_decision(d, delta);
        }
        Ok(plan)
    }

    /// A call that adds nothing: its decision is published and recorded (nothing changes, so
    /// an unwritable log does not change the answer either), and CA gets the reason.
    fn refuse(&self, g: &NodeGroupSpec, decision: &Decision, now_ms: i64) -> Error {
        self.publish_decision(decision);
        let _ = self.record_decision(decision, now_ms);
        Error::Rejected {
            group: g.id.clone(),
            reason: decision.reason.clone(),
        }
    }

    /// Record: every decision of the scale-up durable before any node is requested, so no
    /// node is ever added without the record of why. If one cannot be written, the ones
    /// already written end as failed and nothing is requested.
    fn record<'c>(
        &self,
        g: &'c NodeGroupSpec,
        plan: &Plan<'c>,
        now_ms: i64,
    ) -> Result<Recorded<'c>> {
        let mut recorded = Recorded::new();
        let groups = std::iter::once(g).chain(plan.shares.iter().map(|(cg, _)| *cg));
        for (d, dg) in plan.decisions().zip(groups) {
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
                        nodes: plan.decision.applied_delta,
                        why,
                    });
                }
            }
        }
        Ok(recorded)
    }

    /// Apply: the other groups' shares first, then `g`. If one fails, `g` adds nothing, the
    /// shares already added are taken back (no composite or spread gang is scaled up in
    /// part) and every recorded lifecycle ends as failed. Returns `g`'s new target.
    async fn apply(
        &self,
        g: &NodeGroupSpec,
        backend: &dyn Provisioner,
        plan: &Plan<'_>,
        recorded: &Recorded<'_>,
    ) -> Result<u32> {
        let mut added: Vec<(&NodeGroupSpec, u32)> = Vec::new();
        let ids = recorded.iter().map(|(_, id)| id.as_deref());
        let mut claims = plan.decisions().zip(ids).map(|(d, id)| claims(d, id));
        let own_claims = claims.next().unwrap_or_default();
        for ((c, (spec, cb)), c_claims) in plan.companions.iter().zip(&plan.shares).zip(claims) {
            let cg = self.maybe_unreserved(spec, c);
            if let Err(e) = self
                .increase_one(cb.as_ref(), &cg, c.applied_delta, &c_claims)
                .await
            {
                warn!(node_group.id = %c.group, asked = %g.id, rule = c.rule.as_str(), error = %Chain(&e), "a share of a cross-group scale-up failed: the scale-up is withdrawn");
                return Err(self.undo(&added, recorded, &c.group, e).await);
            }
            added.push((*spec, c.applied_delta));
        }
        let own = self.maybe_unreserved(g, &plan.decision);
        match self
            .increase_one(backend, &own, plan.decision.applied_delta, &own_claims)
            .await
        {
            Ok(target) => Ok(target),
            Err(e) => Err(self.undo(&added, recorded, &g.id, e).await),
        }
    }

    /// Takes back the shares `added` and ends the `recorded` lifecycles, naming the group
    /// whose backend failed; returns the failure for CA.
    async fn undo(
        &self,
        added: &[(&NodeGroupSpec, u32)],
        recorded: &Recorded<'_>,
        failed: &crate::model::NodeGroupId,
        e: provision::Error,
    ) -> Error {
        self.withdraw(added).await;
        let reason = format!("the backend failed the increase of node group {failed}: {e}");
        self.fail_recorded(recorded, &reason);
        e.into()
    }

    /// Publish: Events on the gangs of every decision, and their nodes remembered in flight.
    fn publish(&self, admission: &Admission, plan: &Plan<'_>, now: i64) {
        for d in plan.decisions() {
            self.publish_decision(d);
            admission.record(d, now);
        }
    }

    /// One backend increase with the claims of its instances, observed in the metrics and
    /// the target-above-max check.
    async fn increase_one(
        &self,
        backend: &dyn Provisioner,
        g: &NodeGroupSpec,
        delta: u32,
        claims: &[Claim],
    ) -> provision::Result<u32> {
        let result = backend.increase_for(g, delta, claims).await;
        self.observe(g, "increase", &result);
        self.note_increase(g, &result);
        result
    }
}

/// The claims of the instances `decision` requests under its recorded scale-up `id`: each
/// admitted gang's nodes claimed for that gang (under the scale-up a repair is for), in the
/// order the decision lists them, and any
/// nodes past theirs (pods outside gangs) for the scale-up alone. None without a scale-up id
/// (no audit log): there is nothing to attribute to.
fn claims(decision: &Decision, id: Option<&str>) -> Vec<Claim> {
    let Some(id) = id else {
        return Vec::new();
    };
    let mut out: Vec<Claim> = decision
        .admitted
        .iter()
        .flat_map(|a| {
            // A repair's nodes belong to the lifecycle whose failed instances they replace.
            let for_id = a.repair_of.as_deref().unwrap_or(id);
            let claim = Claim::for_gang(for_id, &a.gang.namespace, &a.gang.name);
            std::iter::repeat_n(claim, a.nodes as usize)
        })
        .take(decision.applied_delta as usize)
        .collect();
    let rest = (decision.applied_delta as usize).saturating_sub(out.len());
    out.extend(std::iter::repeat_n(
        Claim {
            scale_up: id.to_owned(),
            gang: None,
        },
        rest,
    ));
    out
}

/// The answer for a cluster view that cannot be decided from.
fn unavailable(g: &NodeGroupSpec, e: Unavailable) -> Error {
    match e {
        Unavailable::NotSynced => Error::NotSynced(g.id.clone()),
        Unavailable::Stale(stale) => Error::ViewStale {
            group: g.id.clone(),
            stale,
        },
    }
}
