use std::time::Duration;

use super::*;
use crate::model::{Claim, ErrorCode, SimulatedFailure};

fn group(min: u32, max: u32, backend: MemoryBackendSpec) -> NodeGroupSpec {
    NodeGroupSpec {
        backend: BackendSpec::Memory(backend),
        ..crate::testing::group("g", min, max)
    }
}

fn delays(create: u64, provision: u64) -> MemoryBackendSpec {
    MemoryBackendSpec {
        create_delay: Duration::from_secs(create),
        provision_delay: Duration::from_secs(provision),
        failure: None,
    }
}

fn by_id(id: &str) -> NodeRef {
    NodeRef {
        provider_id: id.into(),
        name: String::new(),
    }
}

#[tokio::test(start_paused = true)]
async fn groups_start_at_min_size_with_running_instances() {
    let p = MemoryProvisioner::new();
    let g = group(2, 5, delays(0, 30));
    assert_eq!(p.target_size(&g).await.unwrap(), 2);
    let inst = p.instances(&g).await.unwrap();
    assert_eq!(inst.len(), 2);
    assert!(inst.iter().all(|i| i.state == InstanceState::Running));
    assert!(
        inst.iter()
            .all(|i| i.id.starts_with(PROVIDER_ID_SCHEME) && i.id.ends_with(&i.node_name))
    );
}

#[tokio::test(start_paused = true)]
async fn instances_move_from_creating_to_running_after_the_provision_delay() {
    let p = MemoryProvisioner::new();
    let g = group(0, 5, delays(0, 30));
    assert_eq!(p.increase(&g, 2).await.unwrap(), 2);
    let states: Vec<_> = p
        .instances(&g)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.state)
        .collect();
    assert_eq!(states, vec![InstanceState::Creating; 2]);
    tokio::time::advance(Duration::from_secs(31)).await;
    let states: Vec<_> = p
        .instances(&g)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.state)
        .collect();
    assert_eq!(states, vec![InstanceState::Running; 2]);
}

#[tokio::test(start_paused = true)]
async fn increase_past_max_is_refused_and_changes_nothing() {
    let p = MemoryProvisioner::new();
    let g = group(0, 3, delays(0, 0));
    p.increase(&g, 2).await.unwrap();
    let err = p.increase(&g, 2).await.unwrap_err();
    assert_eq!(
        err,
        Error::AboveMax {
            group: NodeGroupId::new("g"),
            current: 2,
            delta: 2,
            max: 3
        }
    );
    assert_eq!(p.target_size(&g).await.unwrap(), 2);
    assert_eq!(p.instances(&g).await.unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn decrease_cancels_only_capacity_not_yet_created() {
    let p = MemoryProvisioner::new();
    let g = group(0, 10, delays(60, 0));
    p.increase(&g, 3).await.unwrap();
    assert!(p.instances(&g).await.unwrap().is_empty());
    assert_eq!(p.decrease_target(&g, 2).await.unwrap(), 1);
    tokio::time::advance(Duration::from_secs(61)).await;
    assert_eq!(p.instances(&g).await.unwrap().len(), 1);
    let err = p.decrease_target(&g, 1).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::WouldDeleteExisting {
                pending: 0,
                target: 1,
                requested: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(p.target_size(&g).await.unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn injected_stockout_fails_instances_after_the_first_n() {
    let p = MemoryProvisioner::new();
    let mut spec = delays(0, 0);
    spec.failure = Some(SimulatedFailure {
        after_instances: 1,
        code: ErrorCode::Stockout,
        per_million: SimulatedFailure::ALWAYS,
    });
    let g = group(0, 5, spec);
    p.increase(&g, 3).await.unwrap();
    let inst = p.instances(&g).await.unwrap();
    assert_eq!(inst.iter().filter(|i| i.error.is_none()).count(), 1);
    let failed: Vec<_> = inst.iter().filter(|i| i.error.is_some()).collect();
    assert_eq!(failed.len(), 2);
    assert!(failed.iter().all(|i| i.state == InstanceState::Creating));
    assert!(
        failed
            .iter()
            .all(|i| i.error.as_ref().map(|e| e.code) == Some(ErrorCode::Stockout))
    );
}

#[tokio::test(start_paused = true)]
async fn delete_is_all_or_nothing_and_respects_min_for_healthy_instances() {
    let p = MemoryProvisioner::new();
    let mut spec = delays(0, 0);
    spec.failure = Some(SimulatedFailure {
        after_instances: 3,
        code: ErrorCode::QuotaExceeded,
        per_million: SimulatedFailure::ALWAYS,
    });
    let g = group(2, 5, spec);
    p.increase(&g, 2).await.unwrap(); // 2 initial + 1 good + 1 failed
    let inst = p.instances(&g).await.unwrap();
    let good: Vec<_> = inst.iter().filter(|i| i.error.is_none()).collect();
    let bad = inst.iter().find(|i| i.error.is_some()).unwrap();
    assert_eq!(good.len(), 3);

    let foreign = NodeRef {
        provider_id: "other://x".into(),
        name: "x".into(),
    };
    let err = p
        .delete(&g, &[by_id(&good[0].id), foreign])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotInGroup { .. }), "{err:?}");
    assert_eq!(p.target_size(&g).await.unwrap(), 4);

    // 4 -> 2 would reach min with healthy nodes: allowed; -> 1 is not.
    let err = p
        .delete(
            &g,
            &[by_id(&good[0].id), by_id(&good[1].id), by_id(&good[2].id)],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::BelowMin {
                current: 4,
                removing: 3,
                min: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        p.delete(&g, &[by_id(&good[0].id), by_id(&good[1].id)])
            .await
            .unwrap(),
        2
    );
    // The failed instance is not capacity: it can always go.
    assert_eq!(p.delete(&g, &[by_id(&bad.id)]).await.unwrap(), 1);
    assert_eq!(p.lookup(&by_id(&bad.id)).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn lookup_finds_instances_by_provider_id_then_by_name() {
    let p = MemoryProvisioner::new();
    let g = group(1, 5, delays(0, 0));
    p.sync_groups(std::slice::from_ref(&g)).await.unwrap();
    let inst = p.instances(&g).await.unwrap().remove(0);
    let want = Some(NodeGroupId::new("g"));
    assert_eq!(p.lookup(&by_id(&inst.id)).await.unwrap(), want);
    let by_name = NodeRef {
        provider_id: String::new(),
        name: inst.node_name.clone(),
    };
    assert_eq!(p.lookup(&by_name).await.unwrap(), want);
    let fake = NodeRef {
        provider_id: inst.id.clone(),
        name: inst.id.clone(),
    };
    assert_eq!(p.lookup(&fake).await.unwrap(), want);
    let unknown = NodeRef {
        provider_id: "aws:///i-1".into(),
        name: "ip-10-0-0-1".into(),
    };
    assert_eq!(p.lookup(&unknown).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn instances_carry_the_claims_they_were_requested_with_also_when_they_fail() {
    let p = MemoryProvisioner::new();
    assert!(p.keeps_claims());
    let mut spec = delays(10, 0);
    spec.failure = Some(SimulatedFailure {
        after_instances: 1,
        code: ErrorCode::Stockout,
        per_million: SimulatedFailure::ALWAYS,
    });
    let g = group(0, 5, spec);
    let a = Claim::for_gang("su-1-1", "ml", "a");
    let b = Claim::for_gang("su-1-1", "ml", "b");
    assert_eq!(
        p.increase_for(&g, 3, &[a.clone(), b.clone()])
            .await
            .unwrap(),
        3
    );
    assert!(p.instances(&g).await.unwrap().is_empty(), "not created yet");
    tokio::time::advance(Duration::from_secs(11)).await;
    let listed: Vec<(bool, Option<Claim>)> = p
        .instances(&g)
        .await
        .unwrap()
        .into_iter()
        .map(|i| (i.error.is_some(), i.claim))
        .collect();
    assert_eq!(
        listed,
        [(false, Some(a)), (true, Some(b)), (true, None)],
        "in request order; the third was requested without a claim"
    );
}

#[tokio::test(start_paused = true)]
async fn withdraw_takes_back_only_pending_capacity_of_the_claims_named() {
    let p = MemoryProvisioner::new();
    let g = group(0, 8, delays(10, 0));
    let a = Claim::for_gang("su-1-1", "ml", "a");
    let b = Claim::for_gang("su-1-1", "ml", "b");
    p.increase_for(&g, 2, &[a.clone(), a.clone()])
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(11)).await;
    // a's two exist now; then two for b and two more for a, still pending.
    p.increase_for(&g, 5, &[b.clone(), b.clone(), a.clone(), a.clone()])
        .await
        .unwrap();
    let mut pending = p.pending_claims(&g).await.unwrap();
    pending.sort();
    assert_eq!(pending, [a.clone(), a.clone(), b.clone(), b.clone()]);
    // Asking for three of a's takes the two pending ones and never a created instance.
    assert_eq!(
        p.withdraw(&g, &[a.clone(), a.clone(), a.clone()])
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        p.target_size(&g).await.unwrap(),
        5,
        "2 created + 2 b + 1 unclaimed"
    );
    assert_eq!(p.pending_claims(&g).await.unwrap(), [b.clone(), b]);
    assert_eq!(p.instances(&g).await.unwrap().len(), 2);
    assert_eq!(p.withdraw(&g, &[a]).await.unwrap(), 0, "nothing left of a");
}
