//! Gang admission in `NodeGroupIncreaseSize`, end to end through the engine: real Kubernetes
//! object YAML → version adapter → planner → backend, with the in-memory backend. These are the
//! issue's scenarios at the engine level; the CA-driven e2e versions need the real
//! cluster-autoscaler, which cannot be built here.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests abort loudly"
)]

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::FutureExt;

use gangscaler::cluster::{GangView, ObjectSet};
use gangscaler::engine::admission::{GangSource, StaticObjects, Unavailable};
use gangscaler::engine::{Engine, Error};
use gangscaler::grpc::status;
use gangscaler::metrics::Metrics;
use gangscaler::model::reservation::DaemonSetDemand;
use gangscaler::model::{Claim, GpuSpec, NodeGroupSpec, Taint, TaintEffect, quantity::Quantity};
use gangscaler::planner::Policy;
use gangscaler::provision::memory::MemoryProvisioner;
use gangscaler::provision::{NodeRef, Provisioner};
use gangscaler::scaleup::InstanceSource;
use gangscaler::testing;

/// An 8x H100 group with an attach limit of 4 volumes per node for `ebs.csi.aws.com`.
fn h100(max: u32) -> NodeGroupSpec {
    let mut g = testing::group("h100", 0, max);
    g.capacity.as_mut().unwrap().cpu = Quantity::from_units(192);
    g.capacity.as_mut().unwrap().memory = Quantity::from_units(2048 << 30);
    g.gpu = Some(GpuSpec {
        count: 8,
        product: "NVIDIA-H100-80GB-HBM3".into(),
        memory: Quantity::from_units(80 << 30),
        resource_name: "nvidia.com/gpu".into(),
    });
    g.csi = BTreeMap::from([("ebs.csi.aws.com".to_owned(), 4)]);
    g.taints = vec![Taint {
        key: "nvidia.com/gpu".into(),
        value: "present".into(),
        effect: TaintEffect::NoSchedule,
    }];
    g
}

/// A v1alpha2 PodGroup with `pods` members, each asking `gpus` GPUs and `pvcs` volumes.
fn gang(
    name: &str,
    min: u32,
    pods: u32,
    gpus: u32,
    pvcs: u32,
    priority: i32,
    created: &str,
) -> String {
    let mut docs = vec![format!(
        "apiVersion: scheduling.k8s.io/v1alpha2\nkind: PodGroup\nmetadata: {{name: {name}, namespace: ml, creationTimestamp: \"{created}\"}}\nspec:\n  schedulingPolicy: {{gang: {{minCount: {min}}}}}\n  priority: {priority}\n"
    )];
    for i in 0..pods {
        let mut volumes = String::new();
        for v in 0..pvcs {
            let claim = format!("{name}-{i}-{v}");
            volumes.push_str(&format!(
                "  - name: v{v}\n    persistentVolumeClaim: {{claimName: {claim}}}\n"
            ));
            docs.push(format!(
                "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {claim}, namespace: ml}}\nspec: {{storageClassName: gp3, accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 10Gi}}}}}}\n"
            ));
        }
        let volumes = if pvcs == 0 {
            String::new()
        } else {
            format!("  volumes:\n{volumes}")
        };
        docs.push(format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}-{i}, namespace: ml}}\nspec:\n  schedulingGroup: {{podGroupName: {name}}}\n  tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]\n  containers:\n  - name: train\n    image: example.invalid/train:1\n    resources: {{limits: {{nvidia.com/gpu: \"{gpus}\"}}, requests: {{cpu: \"4\"}}}}\n{volumes}status: {{phase: Pending}}\n"
        ));
    }
    docs.join("---\n")
}

const STORAGE_CLASS: &str = "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: gp3}\nprovisioner: ebs.csi.aws.com\nvolumeBindingMode: WaitForFirstConsumer\n";

async fn engine(group: NodeGroupSpec, policy: Policy, objects: &str) -> Engine {
    let set = ObjectSet::from_yaml_documents(objects).expect("fixture objects parse");
    let provisioners: Vec<Arc<dyn Provisioner>> = vec![Arc::new(MemoryProvisioner::new())];
    Engine::new(
        testing::loaded(vec![group]),
        None,
        provisioners,
        Arc::new(Metrics::new()),
    )
    .await
    .unwrap()
    .with_admission(policy, Arc::new(StaticObjects(set)))
}

#[tokio::test]
async fn strict_rejects_a_partial_scale_up_and_off_accepts_it() {
    // minCount 8, each member needs a whole 8-GPU node, but max size allows only 5.
    let objects = gang("train", 8, 8, 8, 0, 0, "2026-11-29T10:00:00Z");
    let strict = Arc::new(engine(h100(5), Policy::Strict, &objects).await);
    let scaled_up = strict.scaled_up().expect("the engine notifies scale-ups");
    let err = strict.increase_size("h100", 5).await.unwrap_err();
    assert!(matches!(err, Error::Rejected { .. }), "{err}");
    assert_eq!(status::code(&err), tonic::Code::FailedPrecondition);
    let msg = err.to_string();
    assert!(
        msg.contains("ml/train") && msg.contains('8') && msg.contains('5'),
        "{msg}"
    );
    assert_eq!(
        strict.target_size("h100").await.unwrap(),
        0,
        "no node added"
    );
    assert!(
        scaled_up.notified().now_or_never().is_none(),
        "a refusal wakes no lifecycle tick"
    );

    let off = Arc::new(engine(h100(5), Policy::Off, &objects).await);
    let scaled_up = off.scaled_up().expect("the engine notifies scale-ups");
    assert_eq!(
        off.increase_size("h100", 5).await.unwrap(),
        5,
        "off applies CA's delta: 5 idle nodes"
    );
    assert!(
        scaled_up.notified().now_or_never().is_some(),
        "an applied scale-up wakes the lifecycle loop"
    );
}

#[tokio::test]
async fn csi_limits_round_a_gang_up_to_one_member_per_node() {
    // 1 GPU and 3 volumes per member, 4 attachments per node: one member per node, 8 nodes,
    // although CA (which cannot see attach limits for a group at zero) asks for 1.
    let objects = format!(
        "{STORAGE_CLASS}---\n{}",
        gang("ckpt", 8, 8, 1, 3, 0, "2026-11-29T10:00:00Z")
    );
    let e = Arc::new(engine(h100(16), Policy::Strict, &objects).await);
    assert_eq!(e.increase_size("h100", 1).await.unwrap(), 8);
    // The gang's need is now in flight and held by the target: a repeated ask adds nothing
    // (rule all_covered), where it used to add CA's 1 node that no member needed.
    let err = e.increase_size("h100", 1).await.unwrap_err();
    assert_eq!(status::code(&err), tonic::Code::FailedPrecondition, "{err}");
    assert!(err.to_string().contains("in flight"), "{err}");
    assert_eq!(e.target_size("h100").await.unwrap(), 8);
}

#[tokio::test]
async fn a_gang_whose_storage_class_is_missing_is_held_not_sized_as_if_it_had_no_volumes() {
    // The same gang as above, but its claims name a StorageClass that does not exist (a typo,
    // or not created yet): the attach count is unknown. Counted toward no driver, the 8
    // members would pack onto 1 node where 8 are needed.
    let objects = gang("ckpt", 8, 8, 1, 3, 0, "2026-11-29T10:00:00Z");
    let e = Arc::new(engine(h100(16), Policy::Strict, &objects).await);
    let err = e.increase_size("h100", 1).await.unwrap_err();
    assert_eq!(status::code(&err), tonic::Code::FailedPrecondition, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("ml/ckpt held") && msg.contains("ckpt-0-0") && msg.contains("CSI driver"),
        "{msg}"
    );
    assert_eq!(e.target_size("h100").await.unwrap(), 0, "no node added");

    // roundUp does not reject, but does not size the gang either: CA's delta as asked.
    let e = Arc::new(engine(h100(16), Policy::RoundUp, &objects).await);
    assert_eq!(e.increase_size("h100", 1).await.unwrap(), 1);

    // Once the class exists, the gang is sized with its volumes: 8 nodes.
    let e = Arc::new(
        engine(
            h100(16),
            Policy::Strict,
            &format!("{STORAGE_CLASS}---\n{objects}"),
        )
        .await,
    );
    assert_eq!(e.increase_size("h100", 1).await.unwrap(), 8);
}

#[tokio::test]
async fn the_higher_priority_gang_is_admitted_whole_and_the_other_when_room_remains() {
    let objects = format!(
        "{}---\n{}",
        gang("low", 8, 8, 8, 0, 10, "2026-11-29T09:00:00Z"),
        gang("high", 8, 8, 8, 0, 100, "2026-11-29T10:00:00Z")
    );
    // Room for one gang: the higher priority one wins although it is younger.
    let e = Arc::new(engine(h100(8), Policy::Strict, &objects).await);
    assert_eq!(e.increase_size("h100", 8).await.unwrap(), 8);
    let err = e.increase_size("h100", 8).await.unwrap_err();
    assert_eq!(status::code(&err), tonic::Code::FailedPrecondition);
    assert!(err.to_string().contains("max size 8"), "{err}");

    // Room appears (the first job's nodes are scaled down): the waiting gang is admitted whole.
    let nodes: Vec<NodeRef> = e
        .nodes("h100")
        .await
        .unwrap()
        .into_iter()
        .map(|i| NodeRef {
            provider_id: i.id,
            name: i.node_name,
        })
        .collect();
    assert_eq!(e.delete_nodes("h100", &nodes).await.unwrap(), 0);
    assert_eq!(
        e.increase_size("h100", 1).await.unwrap(),
        8,
        "rounded up to the whole waiting gang"
    );

    // With room for both, one call admits both.
    let roomy = Arc::new(engine(h100(16), Policy::Strict, &objects).await);
    assert_eq!(roomy.increase_size("h100", 8).await.unwrap(), 16);
}

#[tokio::test]
async fn ungrouped_pods_keep_per_pod_semantics_when_no_gang_is_pending() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec:\n  tolerations: [{key: nvidia.com/gpu, operator: Exists}]\n  containers: [{name: c, image: x, resources: {requests: {cpu: \"1\"}}}]\nstatus: {phase: Pending}\n";
    let e = Arc::new(engine(h100(4), Policy::Strict, pod).await);
    assert_eq!(
        e.increase_size("h100", 2).await.unwrap(),
        2,
        "no gang: CA's delta passes through"
    );
}

struct NeverSynced;

impl GangSource for NeverSynced {
    fn view(&self, _now_unix: i64) -> Result<GangView, Unavailable> {
        Err(Unavailable::NotSynced)
    }

    fn daemon_sets(&self) -> Option<Vec<DaemonSetDemand>> {
        None
    }
}

/// A view whose watches fail (the API server is down): its objects may be behind.
struct Stale;

impl GangSource for Stale {
    fn view(&self, _now_unix: i64) -> Result<GangView, Unavailable> {
        Err(Unavailable::Stale(gangscaler::cluster::Stale {
            kinds: vec!["Node".into(), "Pod".into()],
            for_: std::time::Duration::from_secs(42),
        }))
    }

    fn daemon_sets(&self) -> Option<Vec<DaemonSetDemand>> {
        None
    }
}

#[tokio::test]
async fn a_stale_cluster_view_answers_unavailable_and_records_no_decision() {
    use gangscaler::audit;
    use gangscaler::scaleup::{Recorder, Timeouts};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (recorder, _) = Recorder::open(&path, audit::Config::new(), Timeouts::default()).unwrap();
    let provisioners: Vec<Arc<dyn Provisioner>> = vec![Arc::new(MemoryProvisioner::new())];
    let e = Arc::new(
        Engine::new(
            testing::loaded(vec![h100(4)]),
            None,
            provisioners,
            Arc::new(Metrics::new()),
        )
        .await
        .unwrap()
        .with_admission(Policy::Strict, Arc::new(Stale))
        .with_audit(Arc::new(recorder)),
    );
    let err = e.increase_size("h100", 1).await.unwrap_err();
    assert_eq!(status::code(&err), tonic::Code::Unavailable);
    let msg = err.to_string();
    assert!(
        msg.contains("h100")
            && msg.contains("stale")
            && msg.contains("Node, Pod")
            && msg.contains("42s"),
        "{msg}"
    );
    assert_eq!(e.target_size("h100").await.unwrap(), 0);
    let reading = audit::read_files(&[path]).unwrap();
    assert!(reading.records.is_empty(), "{:?}", reading.records);
}

#[tokio::test]
async fn an_unsynced_cluster_view_answers_unavailable_instead_of_guessing() {
    let provisioners: Vec<Arc<dyn Provisioner>> = vec![Arc::new(MemoryProvisioner::new())];
    let e = Arc::new(
        Engine::new(
            testing::loaded(vec![h100(4)]),
            None,
            provisioners,
            Arc::new(Metrics::new()),
        )
        .await
        .unwrap()
        .with_admission(Policy::Strict, Arc::new(NeverSynced)),
    );
    let err = e.increase_size("h100", 1).await.unwrap_err();
    assert_eq!(status::code(&err), tonic::Code::Unavailable);
    assert_eq!(e.target_size("h100").await.unwrap(), 0);
}

#[tokio::test]
async fn every_decision_lands_in_the_audit_log_rejections_included() {
    use gangscaler::audit::{self, Event, Verdict};
    use gangscaler::scaleup::{Recorder, Timeouts};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (recorder, _) = Recorder::open(&path, audit::Config::new(), Timeouts::default()).unwrap();
    let objects = gang("train", 8, 8, 8, 0, 0, "2026-11-29T10:00:00Z");
    let e = Arc::new(
        engine(h100(8), Policy::Strict, &objects)
            .await
            .with_audit(Arc::new(recorder)),
    );
    assert_eq!(e.increase_size("h100", 8).await.unwrap(), 8);
    assert!(e.increase_size("h100", 1).await.is_err(), "at max");

    let reading = audit::read_files(&[path]).unwrap();
    assert!(reading.bad.is_empty(), "{:?}", reading.bad);
    let decisions: Vec<_> = reading
        .records
        .iter()
        .filter_map(|r| match &r.event {
            Event::Decision(d) => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(decisions.len(), 2);
    assert_eq!(decisions[0].verdict, Verdict::Accept);
    assert_eq!((decisions[0].ca_delta, decisions[0].applied_delta), (8, 8));
    assert!(
        decisions[0].scale_up_id.is_some(),
        "an accepted scale-up gets an id"
    );
    assert_eq!(decisions[0].gangs[0].gang.name, "train");
    assert_eq!(decisions[1].verdict, Verdict::Reject);
    assert_eq!(decisions[1].applied_delta, 0);
    assert!(decisions[1].scale_up_id.is_none());
}

#[tokio::test]
async fn failed_instances_ca_deletes_before_the_lifecycle_reads_them_still_reach_it_once() {
    use gangscaler::audit;
    use gangscaler::model::{BackendSpec, ErrorCode, MemoryBackendSpec, SimulatedFailure};
    use gangscaler::scaleup::{InstanceSource, Recorder, Timeouts};
    let dir = tempfile::tempdir().unwrap();
    let (recorder, _) = Recorder::open(
        dir.path().join("audit.jsonl"),
        audit::Config::new(),
        Timeouts::default(),
    )
    .unwrap();
    let mut g = h100(4);
    g.backend = BackendSpec::Memory(MemoryBackendSpec {
        create_delay: std::time::Duration::ZERO,
        provision_delay: std::time::Duration::ZERO,
        failure: Some(SimulatedFailure {
            after_instances: 0,
            code: ErrorCode::Stockout,
            per_million: SimulatedFailure::ALWAYS,
        }),
    });
    let objects = gang("train", 2, 2, 8, 0, 0, "2026-11-29T10:00:00Z");
    let e = Arc::new(
        engine(g, Policy::Strict, &objects)
            .await
            .with_audit(Arc::new(recorder)),
    );
    e.increase_size("h100", 2).await.unwrap();
    // CA lists the group, sees two failed instances and deletes them at once.
    let listed = e.nodes("h100").await.unwrap();
    let failed: Vec<NodeRef> = listed
        .iter()
        .filter(|i| i.error.is_some())
        .map(|i| NodeRef {
            provider_id: i.id.clone(),
            name: i.node_name.clone(),
        })
        .collect();
    assert_eq!(failed.len(), 2, "{listed:?}");
    e.delete_nodes("h100", &failed).await.unwrap();
    assert!(
        e.nodes("h100").await.unwrap().is_empty(),
        "CA sees them gone"
    );
    // The lifecycle's next read still shows the failures, once.
    let seen = InstanceSource::instances(e.as_ref(), "h100").await.unwrap();
    let codes: Vec<_> = seen
        .iter()
        .map(|i| i.error.as_ref().map(|e| e.code))
        .collect();
    assert_eq!(codes, vec![Some(ErrorCode::Stockout); 2], "{seen:?}");
    assert!(
        InstanceSource::instances(e.as_ref(), "h100")
            .await
            .unwrap()
            .is_empty()
    );
}

/// An engine over `groups` (memory backend) reading gangs from `objects`.
async fn engine_of(groups: Vec<NodeGroupSpec>, objects: &str) -> Engine {
    let set = ObjectSet::from_yaml_documents(objects).expect("fixture objects parse");
    let provisioners: Vec<Arc<dyn Provisioner>> = vec![Arc::new(MemoryProvisioner::new())];
    Engine::new(
        testing::loaded(groups),
        None,
        provisioners,
        Arc::new(Metrics::new()),
    )
    .await
    .unwrap()
    .with_admission(Policy::Strict, Arc::new(StaticObjects(set)))
}

#[tokio::test]
async fn a_gang_in_flight_on_one_group_goes_to_another_only_after_the_first_fails_or_is_withdrawn()
{
    use gangscaler::model::{BackendSpec, ErrorCode, MemoryBackendSpec, SimulatedFailure};
    let mut a = h100(8);
    a.id = gangscaler::model::NodeGroupId::new("h100-a");
    // Nodes requested here take an hour to be created, so CA can still withdraw them.
    a.backend = BackendSpec::Memory(MemoryBackendSpec {
        create_delay: std::time::Duration::from_secs(3600),
        provision_delay: std::time::Duration::from_secs(3600),
        failure: None,
    });
    let mut b = h100(8);
    b.id = gangscaler::model::NodeGroupId::new("h100-b");
    let objects = gang("train", 2, 2, 8, 0, 0, "2026-11-29T10:00:00Z");
    let e = Arc::new(engine_of(vec![a, b], &objects).await);

    // CA asks the first group, then the second for the same pods: the gang is provisioned
    // once. The second call adds nothing: no node for a gang covered on another group.
    assert_eq!(e.increase_size("h100-a", 1).await.unwrap(), 2);
    let err = e.increase_size("h100-b", 1).await.unwrap_err();
    assert_eq!(status::code(&err), tonic::Code::FailedPrecondition, "{err}");
    assert!(
        err.to_string().contains("ml/train on node group h100-a"),
        "{err}"
    );
    assert_eq!(e.target_size("h100-b").await.unwrap(), 0, "no second copy");

    // CA withdraws the first group's nodes: the gang may go to the second.
    e.decrease_target_size("h100-a", -2).await.unwrap();
    assert_eq!(e.increase_size("h100-b", 1).await.unwrap(), 2);

    // A stock-out on the second group (its instances fail) releases it the same way.
    let e = Arc::new(
        engine_of(
            vec![
                {
                    let mut b = h100(8);
                    b.id = gangscaler::model::NodeGroupId::new("h100-b");
                    b
                },
                {
                    let mut a = h100(8);
                    a.id = gangscaler::model::NodeGroupId::new("h100-a");
                    a.backend = BackendSpec::Memory(MemoryBackendSpec {
                        create_delay: std::time::Duration::ZERO,
                        provision_delay: std::time::Duration::ZERO,
                        failure: Some(SimulatedFailure {
                            after_instances: 0,
                            code: ErrorCode::Stockout,
                            per_million: SimulatedFailure::ALWAYS,
                        }),
                    });
                    a
                },
            ],
            &objects,
        )
        .await,
    );
    assert_eq!(e.increase_size("h100-a", 1).await.unwrap(), 2);
    let err = e.increase_size("h100-b", 1).await.unwrap_err();
    assert!(
        err.to_string().contains("in flight"),
        "still in flight: {err}"
    );
    let listed = e.nodes("h100-a").await.unwrap();
    assert!(listed.iter().all(|i| i.error.is_some()), "{listed:?}");
    assert_eq!(e.increase_size("h100-b", 1).await.unwrap(), 2);
}

/// The names of the gangs each decision recorded on `group` admitted, decision by decision.
fn admitted_on(path: &std::path::Path, group: &str) -> Vec<Vec<String>> {
    decisions(path)
        .into_iter()
        .filter(|d| d.node_group == group)
        .map(|d| d.gangs.into_iter().map(|g| g.gang.name).collect())
        .collect()
}

/// Groups `h100-a` (memory, `a`) and `h100-b`, pending gangs "first" (priority 10) and
/// "second" of two 8-GPU members each, and a strict engine over them with an audit log: the
/// log's folder (kept while it lives), its path, its recorder and the engine.
async fn two_gangs_on_two_groups(
    a: gangscaler::model::MemoryBackendSpec,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    Arc<gangscaler::scaleup::Recorder>,
    Arc<Engine>,
) {
    use gangscaler::scaleup::{Recorder, Timeouts};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (recorder, _) =
        Recorder::open(&path, gangscaler::audit::Config::new(), Timeouts::default()).unwrap();
    let recorder = Arc::new(recorder);
    let mut group_a = h100(8);
    group_a.id = gangscaler::model::NodeGroupId::new("h100-a");
    group_a.backend = gangscaler::model::BackendSpec::Memory(a);
    let mut group_b = h100(8);
    group_b.id = gangscaler::model::NodeGroupId::new("h100-b");
    let objects = [
        gang("first", 2, 2, 8, 0, 10, "2026-11-29T10:00:00Z"),
        gang("second", 2, 2, 8, 0, 0, "2026-11-29T10:00:00Z"),
    ]
    .join("---\n");
    let e = Arc::new(
        engine_of(vec![group_a, group_b], &objects)
            .await
            .with_audit(recorder.clone()),
    );
    (dir, path, recorder, e)
}

#[tokio::test]
async fn a_gang_whose_instances_all_failed_may_go_to_another_group_and_no_other_gang() {
    use gangscaler::model::{ErrorCode, MemoryBackendSpec, SimulatedFailure};
    // Group a: its first two instances come up, every later one stocks out.
    let (_dir, path, _, e) = two_gangs_on_two_groups(MemoryBackendSpec {
        create_delay: std::time::Duration::ZERO,
        provision_delay: std::time::Duration::from_secs(3600),
        failure: Some(SimulatedFailure {
            after_instances: 2,
            code: ErrorCode::Stockout,
            per_million: SimulatedFailure::ALWAYS,
        }),
    })
    .await;
    // CA asks group a: both gangs are admitted whole, "first" (higher priority) first.
    assert_eq!(e.increase_size("h100-a", 1).await.unwrap(), 4);
    // "second"'s two instances stock out; CA sees them in its listing.
    let listed = e.nodes("h100-a").await.unwrap();
    let failed: Vec<_> = listed.iter().filter(|i| i.error.is_some()).collect();
    assert_eq!(failed.len(), 2, "{listed:?}");
    for i in &failed {
        let claim = i.claim.as_ref().expect("claimed");
        assert_eq!(claim.gang, Some(("ml".into(), "second".into())), "{i:?}");
    }
    // CA asks group b: only "second" may go there; "first"'s nodes are still in flight on a.
    assert_eq!(e.increase_size("h100-b", 1).await.unwrap(), 2);
    let on_b = admitted_on(&path, "h100-b");
    assert_eq!(
        on_b,
        vec![vec!["second".to_owned()]],
        "first admitted twice"
    );
}

#[tokio::test]
async fn a_stock_out_is_repaired_with_exactly_the_missing_nodes_for_the_gang_they_were_for() {
    use gangscaler::model::{ErrorCode, MemoryBackendSpec, SimulatedFailure};
    use gangscaler::scaleup::{Recorder, Timeouts};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (recorder, _) =
        Recorder::open(&path, gangscaler::audit::Config::new(), Timeouts::default()).unwrap();
    let recorder = Arc::new(recorder);
    // One group whose first two instances come up and every later one stocks out.
    let mut g = h100(32);
    g.backend = gangscaler::model::BackendSpec::Memory(MemoryBackendSpec {
        create_delay: std::time::Duration::ZERO,
        provision_delay: std::time::Duration::from_secs(3600),
        failure: Some(SimulatedFailure {
            after_instances: 2,
            code: ErrorCode::Stockout,
            per_million: SimulatedFailure::ALWAYS,
        }),
    });
    let objects = [
        gang("a", 4, 4, 8, 0, 10, "2026-11-29T10:00:00Z"),
        gang("b", 2, 2, 8, 0, 0, "2026-11-29T10:00:00Z"),
    ]
    .join("---\n");
    let e = Arc::new(
        engine_of(vec![g], &objects)
            .await
            .with_audit(recorder.clone()),
    );
    // CA asks: both gangs whole, a (higher priority) first: 6 nodes, 4 of which stock out
    // (a's last two and b's two).
    assert_eq!(e.increase_size("h100", 1).await.unwrap(), 6);
    let first = decisions(&path).remove(0);
    let su = first.scale_up_id.clone().unwrap();
    let mut failed = 0;
    let mut applied = 6;
    for round in 0..3 {
        let listed = e.nodes("h100").await.unwrap();
        failed = listed.iter().filter(|i| i.error.is_some()).count();
        // CA asks again for the members left without a node: each gang gets exactly its
        // missing nodes, claimed for the first scale-up, and no lifecycle of its own.
        let target = e.increase_size("h100", 1).await.unwrap();
        let d = decisions(&path).pop().unwrap();
        let repaired: Vec<(String, u32, Option<String>)> = d
            .gangs
            .iter()
            .map(|g| (g.gang.name.clone(), g.nodes, g.repair_of.clone()))
            .collect();
        assert_eq!(
            repaired,
            [
                ("a".to_owned(), 2, Some(su.clone())),
                ("b".to_owned(), 2, Some(su.clone()))
            ],
            "round {round}: {d:?}"
        );
        assert!(d.opened_lifecycles().is_empty(), "round {round}");
        assert!(
            d.reason.contains("replacing failed instances of"),
            "{}",
            d.reason
        );
        applied += d.applied_delta;
        assert_eq!(target, applied);
        assert_eq!(
            recorder.open_count(),
            2,
            "round {round}: still a's and b's lifecycles alone"
        );
    }
    // Every node requested is the first six or a replacement of a failed one.
    let listed = e.nodes("h100").await.unwrap();
    let now_failed = listed.iter().filter(|i| i.error.is_some()).count();
    assert!(failed >= 4);
    assert_eq!(applied as usize, 6 + now_failed - 4, "{listed:?}");
    for i in &listed {
        let claim = i.claim.as_ref().expect("claimed");
        assert_eq!(claim.scale_up, su, "{i:?}");
    }
}

#[tokio::test]
async fn a_decision_recorded_but_never_applied_is_ended_at_start_and_its_gang_admitted_afresh() {
    use gangscaler::audit::{self, Event, Outcome};
    use gangscaler::model::MemoryBackendSpec;
    use gangscaler::scaleup::{InstanceSource, Recorder, Timeouts};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let open_recorder = || {
        Arc::new(
            Recorder::open(&path, gangscaler::audit::Config::new(), Timeouts::default())
                .unwrap()
                .0,
        )
    };
    let mut g = h100(8);
    g.backend = gangscaler::model::BackendSpec::Memory(MemoryBackendSpec {
        create_delay: std::time::Duration::from_secs(3600),
        provision_delay: std::time::Duration::ZERO,
        failure: None,
    });
    let objects = gang("train", 2, 2, 8, 0, 0, "2026-11-29T10:00:00Z");
    // The first process records its decision and applies it to its backend...
    let first = Arc::new(
        engine_of(vec![g.clone()], &objects)
            .await
            .with_audit(open_recorder()),
    );
    assert_eq!(first.increase_size("h100", 1).await.unwrap(), 2);
    drop(first);
    // ...but the backend write is what a kill -9 between the two loses: the next process
    // finds the decision in the log and a backend that never saw it (the memory backend
    // starts empty).
    let e = Arc::new(
        engine_of(vec![g], &objects)
            .await
            .with_audit(open_recorder()),
    );
    assert_eq!(e.target_size("h100").await.unwrap(), 0);
    assert_eq!(
        InstanceSource::close_unapplied(e.as_ref(), "h100")
            .await
            .unwrap(),
        1,
        "the lifecycle of train"
    );
    let outcomes: Vec<(Outcome, String)> = audit::read_files(std::slice::from_ref(&path))
        .unwrap()
        .records
        .into_iter()
        .filter_map(|r| match r.event {
            Event::Outcome(o) => Some((o.outcome, o.reason)),
            _ => None,
        })
        .collect();
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert_eq!(outcomes[0].0, Outcome::ProvisionFailed);
    assert!(
        outcomes[0].1.starts_with("recorded but never applied"),
        "{outcomes:?}"
    );
    // CA asks again: the gang is no longer in flight, and gets its two nodes whole (before,
    // it counted as in flight and the call got CA's delta of one).
    assert_eq!(e.increase_size("h100", 1).await.unwrap(), 2);
    // Applied now: nothing more to close.
    assert_eq!(
        InstanceSource::close_unapplied(e.as_ref(), "h100")
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn the_pending_nodes_of_an_ended_gang_are_withdrawn_and_no_other_gangs() {
    use gangscaler::audit::{self, Event, Outcome, OutcomeEvent, Record};
    use gangscaler::model::{Claim, MemoryBackendSpec};
    use gangscaler::scaleup::InstanceSource;
    // Group a's nodes take an hour to be created: all four stay pending.
    let (_dir, path, recorder, e) = two_gangs_on_two_groups(MemoryBackendSpec {
        create_delay: std::time::Duration::from_secs(3600),
        provision_delay: std::time::Duration::ZERO,
        failure: None,
    })
    .await;
    assert_eq!(e.increase_size("h100-a", 1).await.unwrap(), 4);
    assert_eq!(
        InstanceSource::withdraw_ended(e.as_ref(), "h100-a")
            .await
            .unwrap(),
        0,
        "both lifecycles are open"
    );
    // The lifecycle of "first" ends (its gang was deleted, say).
    let decision = decisions(&path).remove(0);
    let id = decision.scale_up_id.clone().unwrap();
    let first = decision
        .gangs
        .iter()
        .find(|g| g.gang.name == "first")
        .unwrap()
        .gang
        .clone();
    recorder
        .record(&Record::new(
            1,
            OutcomeEvent {
                scale_up_id: id.clone(),
                node_group: "h100-a".into(),
                gang: Some(first),
                outcome: Outcome::Cancelled,
                requested_at_ms: 0,
                formed_at_ms: None,
                attached_at_ms: None,
                pending_since_ms: None,
                attach_failures: 0,
                duration_ms: 1,
                reason: "the gang was deleted before it started".into(),
            },
        ))
        .unwrap();
    assert_eq!(
        InstanceSource::withdraw_ended(e.as_ref(), "h100-a")
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        e.target_size("h100-a").await.unwrap(),
        2,
        "second's two stay"
    );
    let withdrawals: Vec<Vec<String>> = audit::read_files(std::slice::from_ref(&path))
        .unwrap()
        .records
        .into_iter()
        .filter_map(|r| match r.event {
            Event::Withdrawal(w) => Some(w.claims),
            _ => None,
        })
        .collect();
    let claim = Claim::for_gang(&id, "ml", "first").to_string();
    assert_eq!(withdrawals, vec![vec![claim.clone(), claim]]);
    assert_eq!(
        InstanceSource::withdraw_ended(e.as_ref(), "h100-a")
            .await
            .unwrap(),
        0,
        "done once"
    );
    // "first" no longer has nodes in flight: CA's ask on group b admits it, not "second".
    assert_eq!(e.increase_size("h100-b", 1).await.unwrap(), 2);
    let on_b = admitted_on(&path, "h100-b");
    assert_eq!(on_b, vec![vec!["first".to_owned()]]);
}

/// The memory backend, but `increase` fails while `failing` is set (a cloud API outage).
struct Flaky {
    inner: MemoryProvisioner,
    failing: std::sync::atomic::AtomicBool,
    /// What `reservation_blocker` answers (a Cluster API template without the taint); it
    /// fails too while `failing`.
    blocker: std::sync::Mutex<Option<String>>,
    /// `increase` of this one group fails.
    failing_group: std::sync::Mutex<Option<String>>,
    /// While set, `increase` says so on `entered` and then waits for a permit of `gate`
    /// before it writes (a slow cloud API).
    gated: std::sync::atomic::AtomicBool,
    entered: tokio::sync::Notify,
    gate: tokio::sync::Semaphore,
}

impl Flaky {
    fn new(failing: bool) -> Self {
        Self {
            inner: MemoryProvisioner::new(),
            failing: std::sync::atomic::AtomicBool::new(failing),
            blocker: std::sync::Mutex::new(None),
            failing_group: std::sync::Mutex::new(None),
            gated: std::sync::atomic::AtomicBool::new(false),
            entered: tokio::sync::Notify::new(),
            gate: tokio::sync::Semaphore::new(0),
        }
    }

    /// A backend whose `increase` waits at the gate.
    fn gated() -> Self {
        let f = Self::new(false);
        f.gated.store(true, std::sync::atomic::Ordering::SeqCst);
        f
    }

    fn unavailable(group: &NodeGroupSpec) -> gangscaler::provision::Error {
        gangscaler::provision::Error::Backend {
            group: group.id.clone(),
            backend: "memory",
            message: "cloud API unavailable".into(),
        }
    }
}

#[async_trait::async_trait]
impl Provisioner for Flaky {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    async fn sync_groups(&self, groups: &[NodeGroupSpec]) -> gangscaler::provision::Result<()> {
        self.inner.sync_groups(groups).await
    }
    async fn target_size(&self, group: &NodeGroupSpec) -> gangscaler::provision::Result<u32> {
        self.inner.target_size(group).await
    }
    async fn increase_for(
        &self,
        group: &NodeGroupSpec,
        delta: u32,
        claims: &[Claim],
    ) -> gangscaler::provision::Result<u32> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst)
            || self.failing_group.lock().unwrap().as_deref() == Some(group.id.as_str())
        {
            return Err(Self::unavailable(group));
        }
        if self.gated.load(std::sync::atomic::Ordering::SeqCst) {
            self.entered.notify_one();
            self.gate.acquire().await.unwrap().forget();
        }
        self.inner.increase_for(group, delta, claims).await
    }
    fn keeps_claims(&self) -> bool {
        self.inner.keeps_claims()
    }
    async fn decrease_target(
        &self,
        group: &NodeGroupSpec,
        delta: u32,
    ) -> gangscaler::provision::Result<u32> {
        self.inner.decrease_target(group, delta).await
    }
    async fn delete(
        &self,
        group: &NodeGroupSpec,
        nodes: &[NodeRef],
    ) -> gangscaler::provision::Result<u32> {
        self.inner.delete(group, nodes).await
    }
    async fn instances(
        &self,
        group: &NodeGroupSpec,
    ) -> gangscaler::provision::Result<Vec<gangscaler::model::Instance>> {
        self.inner.instances(group).await
    }
    async fn lookup(
        &self,
        node: &NodeRef,
    ) -> gangscaler::provision::Result<Option<gangscaler::model::NodeGroupId>> {
        self.inner.lookup(node).await
    }
    async fn reservation_blocker(
        &self,
        group: &NodeGroupSpec,
    ) -> gangscaler::provision::Result<Option<String>> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Self::unavailable(group));
        }
        Ok(self.blocker.lock().unwrap().clone())
    }
}

#[tokio::test]
async fn a_backend_failure_after_the_decision_record_ends_its_scale_up_as_provision_failed() {
    use gangscaler::audit::{self, Event, Outcome};
    use gangscaler::scaleup::{Recorder, Timeouts};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (recorder, _) = Recorder::open(&path, audit::Config::new(), Timeouts::default()).unwrap();
    let recorder = Arc::new(recorder);
    let flaky = Arc::new(Flaky::new(true));
    let provisioners: Vec<Arc<dyn Provisioner>> = vec![flaky.clone()];
    let metrics = Arc::new(Metrics::new());
    let objects = gang("train", 8, 8, 8, 0, 0, "2026-11-29T10:00:00Z");
    let e = Arc::new(
        Engine::new(
            testing::loaded(vec![h100(8)]),
            None,
            provisioners,
            metrics.clone(),
        )
        .await
        .unwrap()
        .with_audit(recorder.clone())
        .with_admission(
            Policy::Strict,
            Arc::new(StaticObjects(
                ObjectSet::from_yaml_documents(&objects).unwrap(),
            )),
        ),
    );

    let err = e.increase_size("h100", 8).await.unwrap_err();
    assert_eq!(status::code(&err), tonic::Code::Unavailable, "{err}");
    assert_eq!(e.target_size("h100").await.unwrap(), 0);
    // The decision was durable before the backend was asked; its failure ends the lifecycle.
    let records = audit::read_files(std::slice::from_ref(&path))
        .unwrap()
        .records;
    let id = match &records[0].event {
        Event::Decision(d) => d.scale_up_id.clone().expect("an id before acting"),
        other => panic!("first record is the decision: {other:?}"),
    };
    match &records[1].event {
        Event::Outcome(o) => {
            assert_eq!(
                (o.outcome, o.scale_up_id.as_str()),
                (Outcome::ProvisionFailed, id.as_str())
            );
            assert_eq!(o.gang.as_ref().unwrap().name, "train");
            assert!(o.reason.contains("cloud API unavailable"), "{}", o.reason);
        }
        other => panic!("second record ends the scale-up: {other:?}"),
    }
    assert_eq!(recorder.open_count(), 0, "nothing left open");
    assert!(
        metrics.encode().contains(
            r#"gangscaler_scaleup_outcomes_total{node_group="h100",outcome="provisionFailed"} 1"#
        ),
        "{}",
        metrics.encode()
    );

    // The gang was not counted in flight: once the backend answers, it is admitted again.
    flaky
        .failing
        .store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(e.increase_size("h100", 8).await.unwrap(), 8);
    assert_eq!(recorder.open_count(), 1);
}

/// A fixed object set with DaemonSets (`None`: not watched).
struct WithDaemonSets(StaticObjects, Option<Vec<DaemonSetDemand>>);

impl GangSource for WithDaemonSets {
    fn view(&self, now_unix: i64) -> Result<GangView, Unavailable> {
        self.0.view(now_unix)
    }

    fn daemon_sets(&self) -> Option<Vec<DaemonSetDemand>> {
        self.1.clone()
    }
}

/// The `reservationOff` of each decision record in the audit log at `path`, in order.
fn recorded_reservation_off(path: &std::path::Path) -> Vec<Option<String>> {
    use gangscaler::audit::{self, Event};
    audit::read_files(&[path.to_path_buf()])
        .unwrap()
        .records
        .into_iter()
        .filter_map(|r| match r.event {
            Event::Decision(d) => Some(d.reservation_off),
            _ => None,
        })
        .collect()
}

/// Objects (YAML documents) that tests add to between calls.
struct Growing(std::sync::Mutex<String>);

impl Growing {
    fn add(&self, documents: &str) {
        let mut all = self.0.lock().unwrap();
        all.push_str("---\n");
        all.push_str(documents);
    }
}

impl GangSource for Growing {
    fn view(&self, now_unix: i64) -> Result<GangView, Unavailable> {
        let set = ObjectSet::from_yaml_documents(&self.0.lock().unwrap()).unwrap();
        StaticObjects(set).view(now_unix)
    }

    fn daemon_sets(&self) -> Option<Vec<DaemonSetDemand>> {
        Some(Vec::new())
    }
}

/// A DaemonSet on every GPU node (it tolerates the GPU taint), and with `tolerates` the
/// reservation taint too.
fn gpu_daemon_set(name: &str, tolerates: bool) -> DaemonSetDemand {
    let reserved = gangscaler::model::reservation::RESERVATION_TAINT;
    let tolerate: &[&str] = if tolerates {
        &["nvidia.com/gpu", reserved]
    } else {
        &["nvidia.com/gpu"]
    };
    testing::daemon_set(&format!("kube-system/{name}"), &[], tolerate)
}

#[tokio::test]
async fn a_daemon_set_without_the_toleration_turns_a_groups_reservation_off_and_says_why() {
    use gangscaler::audit;
    use gangscaler::scaleup::{InstanceSource, Recorder, Timeouts};
    let cases = [
        (
            Some(vec![gpu_daemon_set("plugin", false)]),
            Some("kube-system/plugin"),
        ),
        (Some(vec![gpu_daemon_set("plugin", true)]), None),
        (None, Some("not watched")),
    ];
    for (daemon_sets, off) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let (recorder, _) =
            Recorder::open(&path, audit::Config::new(), Timeouts::default()).unwrap();
        let mut group = h100(4);
        group.reservation.enabled = true;
        let objects = gang("train", 2, 2, 8, 0, 0, "2026-11-29T10:00:00Z");
        let set = ObjectSet::from_yaml_documents(&objects).unwrap();
        let metrics = Arc::new(Metrics::new());
        let provisioners: Vec<Arc<dyn Provisioner>> = vec![Arc::new(MemoryProvisioner::new())];
        let watched = daemon_sets.is_some();
        let e = Arc::new(
            Engine::new(
                testing::loaded(vec![group]),
                None,
                provisioners,
                metrics.clone(),
            )
            .await
            .unwrap()
            .with_admission(
                Policy::Strict,
                Arc::new(WithDaemonSets(StaticObjects(set), daemon_sets)),
            )
            .with_audit(Arc::new(recorder)),
        );
        assert_eq!(
            e.increase_size("h100", 1).await.unwrap(),
            2,
            "the gang is admitted"
        );
        let recorded = recorded_reservation_off(&path);
        assert_eq!(recorded.len(), 1, "{recorded:?}");
        let reserving = e.reservations()["h100"].enabled;
        match off {
            Some(needle) => {
                let why = recorded[0].clone().unwrap_or_default();
                assert!(why.contains(needle), "{why}");
                assert!(
                    !reserving,
                    "the lifecycle loop reserves nothing for the group"
                );
            }
            None => {
                assert_eq!(recorded[0], None);
                assert!(reserving, "a tolerating DaemonSet keeps reservation on");
            }
        }
        if watched {
            let blocking = metrics
                .reservation_blocking_daemon_sets
                .get_or_create(&gangscaler::metrics::GroupLabels {
                    node_group: "h100".into(),
                })
                .get();
            assert_eq!(blocking, i64::from(off.is_some()));
        }
    }
}

#[tokio::test]
async fn a_backend_that_does_not_register_nodes_reserved_turns_the_groups_reservation_off() {
    use gangscaler::audit;
    use gangscaler::scaleup::{InstanceSource, Recorder, Timeouts};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (recorder, _) = Recorder::open(&path, audit::Config::new(), Timeouts::default()).unwrap();
    let backend = Arc::new(Flaky::new(false));
    *backend.blocker.lock().unwrap() =
        Some("reservation is off: MachineDeployment fleet/h100 does not register".into());
    let provisioners: Vec<Arc<dyn Provisioner>> = vec![backend.clone()];
    let metrics = Arc::new(Metrics::new());
    let mut group = h100(8);
    group.reservation.enabled = true;
    let source = Arc::new(Growing(std::sync::Mutex::new(gang(
        "first",
        2,
        2,
        8,
        0,
        0,
        "2026-11-29T10:00:00Z",
    ))));
    let e = Arc::new(
        Engine::new(
            testing::loaded(vec![group]),
            None,
            provisioners,
            metrics.clone(),
        )
        .await
        .unwrap()
        .with_admission(Policy::Strict, source.clone())
        .with_audit(Arc::new(recorder)),
    );
    let blocked = || {
        metrics
            .reservation_backend_blocked
            .get_or_create(&gangscaler::metrics::GroupLabels {
                node_group: "h100".into(),
            })
            .get()
    };
    // Read at start: the lifecycle loop reserves nothing for the group even before a decision.
    assert_eq!(blocked(), 1);
    assert!(!e.reservations()["h100"].enabled);
    assert_eq!(e.increase_size("h100", 2).await.unwrap(), 2);
    // The template is fixed: the next decision, for a new gang, reads it again and reserves.
    *backend.blocker.lock().unwrap() = None;
    source.add(&gang("second", 2, 2, 8, 0, 0, "2026-11-29T10:01:00Z"));
    assert_eq!(e.increase_size("h100", 2).await.unwrap(), 4);
    assert_eq!(blocked(), 0);
    assert!(e.reservations()["h100"].enabled);
    // A backend that cannot tell refuses the decision: nothing is added, nothing recorded.
    backend
        .failing
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let err = e.increase_size("h100", 2).await.unwrap_err();
    assert!(err.to_string().contains("cloud API unavailable"), "{err}");
    assert_eq!(e.target_size("h100").await.unwrap(), 4);
    let recorded = recorded_reservation_off(&path);
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    assert!(
        recorded[0]
            .as_deref()
            .is_some_and(|r| r.contains("MachineDeployment fleet/h100")),
        "{recorded:?}"
    );
    assert_eq!(recorded[1], None, "{recorded:?}");
}

/// A 1.38 CompositePodGroup `job` (gang of 2 child groups): a CPU launcher (one 4-CPU pod)
/// and `workers` members that each need a whole 8-GPU node.
fn composite_job(workers: u32) -> String {
    let mut docs = vec![
        "apiVersion: scheduling.k8s.io/v1beta1\nkind: CompositePodGroup\nmetadata: {name: job, namespace: ml, creationTimestamp: \"2026-12-01T00:00:00Z\"}\nspec:\n  workloadRef: {workloadName: job, templateName: job}\n  schedulingPolicy: {gang: {minGroupCount: 2}}\n".to_owned(),
    ];
    for (child, min) in [("job-launcher", 1), ("job-workers", workers)] {
        docs.push(format!(
            "apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {{name: {child}, namespace: ml, creationTimestamp: \"2026-12-01T00:00:00Z\"}}\nspec:\n  parentCompositePodGroupName: job\n  workloadRef: {{workloadName: job, templateName: {child}}}\n  schedulingPolicy: {{gang: {{minCount: {min}}}}}\n"
        ));
    }
    docs.push("apiVersion: v1\nkind: Pod\nmetadata: {name: job-launcher-0, namespace: ml}\nspec:\n  schedulingGroup: {podGroupName: job-launcher}\n  containers:\n  - name: launch\n    image: example.invalid/launch:1\n    resources: {requests: {cpu: \"4\"}}\nstatus: {phase: Pending}\n".to_owned());
    for i in 0..workers {
        docs.push(format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: job-workers-{i}, namespace: ml}}\nspec:\n  schedulingGroup: {{podGroupName: job-workers}}\n  tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]\n  containers:\n  - name: train\n    image: example.invalid/train:1\n    resources: {{limits: {{nvidia.com/gpu: \"8\"}}, requests: {{cpu: \"4\"}}}}\nstatus: {{phase: Pending}}\n"
        ));
    }
    docs.join("---\n")
}

/// An engine over the CPU group `cpu` (nodes due a minute after the request) and `h100` (max
/// `h100_max`) on `flaky`, with an audit log.
async fn composite_engine(
    flaky: Arc<Flaky>,
    h100_max: u32,
    objects: &str,
    path: &std::path::Path,
) -> (Arc<Engine>, Arc<Metrics>) {
    use gangscaler::audit;
    use gangscaler::scaleup::{Recorder, Timeouts};
    let (recorder, _) = Recorder::open(path, audit::Config::new(), Timeouts::default()).unwrap();
    let provisioners: Vec<Arc<dyn Provisioner>> = vec![flaky];
    // CPU nodes take a minute to come: a share can be taken back until then.
    let mut cpu = testing::group("cpu", 0, 4);
    cpu.backend = testing::memory_backend(
        std::time::Duration::from_secs(60),
        std::time::Duration::from_secs(60),
    );
    let metrics = Arc::new(Metrics::new());
    let e = Arc::new(
        Engine::new(
            testing::loaded(vec![cpu, h100(h100_max)]),
            None,
            provisioners,
            metrics.clone(),
        )
        .await
        .unwrap()
        .with_audit(Arc::new(recorder))
        .with_admission(
            Policy::Strict,
            Arc::new(StaticObjects(
                ObjectSet::from_yaml_documents(objects).unwrap(),
            )),
        ),
    );
    (e, metrics)
}

fn decisions(path: &std::path::Path) -> Vec<gangscaler::audit::DecisionEvent> {
    use gangscaler::audit::{self, Event};
    audit::read_files(&[path.to_path_buf()])
        .unwrap()
        .records
        .into_iter()
        .filter_map(|r| match r.event {
            Event::Decision(d) => Some(d),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn one_increase_scales_every_group_of_a_composite_and_records_both_targets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (e, metrics) =
        composite_engine(Arc::new(Flaky::new(false)), 4, &composite_job(2), &path).await;
    // CA asks for the GPU group, for the workers' pods.
    assert_eq!(e.increase_size("h100", 2).await.unwrap(), 2);
    assert_eq!(
        e.target_size("cpu").await.unwrap(),
        1,
        "the launcher's node"
    );
    let d = decisions(&path);
    assert_eq!(d.len(), 2, "{d:#?}");
    let primary = d.iter().find(|d| d.node_group == "h100").unwrap();
    let share = d.iter().find(|d| d.node_group == "cpu").unwrap();
    assert_eq!(
        (primary.rule.as_str(), share.rule.as_str()),
        ("composite_admitted", "composite_share")
    );
    assert!(primary.scale_up_id.is_some() && share.scale_up_id.is_some());
    let shares: Vec<(&str, u32, u32)> = primary.composites[0]
        .shares
        .iter()
        .map(|s| (s.node_group.as_str(), s.target, s.nodes))
        .collect();
    assert_eq!(shares, [("cpu", 0, 1), ("h100", 0, 2)]);
    assert!(
        metrics
            .encode()
            .contains(r#"gangscaler_admission_composites_total{outcome="admitted"} 1"#),
        "{}",
        metrics.encode()
    );
    // CA asking the CPU group for the launcher's pod again adds nothing.
    let err = e.increase_size("cpu", 1).await.unwrap_err();
    assert!(matches!(err, Error::Rejected { .. }), "{err}");
    assert!(err.to_string().contains("ml/job"), "{err}");
    assert_eq!(e.target_size("cpu").await.unwrap(), 1);
}

#[tokio::test]
async fn a_composite_whose_workers_cannot_fit_gets_no_node_on_either_group() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    // Three whole-node workers, two H100 nodes of room.
    let (e, metrics) =
        composite_engine(Arc::new(Flaky::new(false)), 2, &composite_job(3), &path).await;
    for group in ["cpu", "h100"] {
        let err = e.increase_size(group, 1).await.unwrap_err();
        assert!(matches!(err, Error::Rejected { .. }), "{group}: {err}");
        assert!(err.to_string().contains("job-workers"), "{err}");
    }
    assert_eq!(e.target_size("cpu").await.unwrap(), 0);
    assert_eq!(e.target_size("h100").await.unwrap(), 0);
    assert!(
        metrics
            .encode()
            .contains(r#"gangscaler_admission_composites_total{outcome="deferred"} 2"#),
        "{}",
        metrics.encode()
    );
}

#[tokio::test]
async fn a_failed_share_takes_back_the_shares_added_and_ends_every_lifecycle() {
    use gangscaler::audit::{self, Event, Outcome};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let flaky = Arc::new(Flaky::new(false));
    // The CPU share goes first and succeeds; the asked GPU group then fails.
    *flaky.failing_group.lock().unwrap() = Some("h100".into());
    let (e, _) = composite_engine(flaky.clone(), 4, &composite_job(2), &path).await;
    let err = e.increase_size("h100", 2).await.unwrap_err();
    assert_eq!(status::code(&err), tonic::Code::Unavailable, "{err}");
    assert_eq!(
        e.target_size("cpu").await.unwrap(),
        0,
        "the CPU share was taken back"
    );
    assert_eq!(e.target_size("h100").await.unwrap(), 0);
    let outcomes: Vec<(String, Outcome)> = audit::read_files(std::slice::from_ref(&path))
        .unwrap()
        .records
        .into_iter()
        .filter_map(|r| match r.event {
            Event::Outcome(o) => Some((o.gang.unwrap().name, o.outcome)),
            _ => None,
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("job-workers".to_owned(), Outcome::ProvisionFailed),
            ("job-launcher".to_owned(), Outcome::ProvisionFailed)
        ]
    );
    // Nothing counted in flight: once the backend answers, the composite is admitted again.
    *flaky.failing_group.lock().unwrap() = None;
    assert_eq!(e.increase_size("h100", 2).await.unwrap(), 2);
    assert_eq!(e.target_size("cpu").await.unwrap(), 1);
}

/// An engine over `h100(16)` on a gated backend, with one pending gang of 4 × 8 GPU.
async fn gated_engine() -> (Arc<Engine>, Arc<Flaky>) {
    gated_engine_with(Policy::Strict).await
}

async fn gated_engine_with(policy: Policy) -> (Arc<Engine>, Arc<Flaky>) {
    let flaky = Arc::new(Flaky::gated());
    let provisioners: Vec<Arc<dyn Provisioner>> = vec![flaky.clone()];
    let objects = gang("train", 4, 4, 8, 0, 0, "2026-11-29T10:00:00Z");
    let e = Arc::new(
        Engine::new(
            testing::loaded(vec![h100(16)]),
            None,
            provisioners,
            Arc::new(Metrics::new()),
        )
        .await
        .unwrap()
        .with_admission(
            policy,
            Arc::new(StaticObjects(
                ObjectSet::from_yaml_documents(&objects).unwrap(),
            )),
        ),
    );
    (e, flaky)
}

/// The group's target once it leaves `from`, or `from` if it stays there for two seconds.
async fn target_after(e: &Engine, group: &str, from: u32) -> u32 {
    for _ in 0..100 {
        let t = e.target_size(group).await.unwrap();
        if t != from {
            return t;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    from
}

#[tokio::test]
async fn an_increase_whose_caller_stopped_waiting_is_applied_and_counted_in_flight() {
    let (e, flaky) = gated_engine().await;
    // CA's grpc_timeout fires while the backend is writing: tonic drops the handler.
    tokio::select! {
        r = e.increase_size("h100", 1) => panic!("the gate is closed, yet the call answered {r:?}"),
        () = flaky.entered.notified() => {}
    }
    flaky.gate.add_permits(1);
    assert_eq!(
        target_after(&e, "h100", 0).await,
        4,
        "the call decided to add the gang, so its nodes must be requested"
    );
    assert!(e.settle(std::time::Duration::from_secs(5)).await);
    // The gang's nodes are in flight: asking again for it adds nothing.
    let err = e.increase_size("h100", 1).await.unwrap_err();
    assert!(
        matches!(&err, Error::Rejected { reason, .. } if reason.contains("in flight")),
        "{err}"
    );
    assert_eq!(e.target_size("h100").await.unwrap(), 4);
}

#[tokio::test]
async fn concurrent_increases_for_one_gang_request_its_nodes_once() {
    let (e, flaky) = gated_engine().await;
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let e = e.clone();
            tokio::spawn(async move { e.increase_size("h100", 1).await })
        })
        .collect();
    flaky.entered.notified().await;
    // Let both reach the backend if both decided.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    flaky.gate.add_permits(2);
    let mut answers = Vec::new();
    for c in calls {
        answers.push(c.await.unwrap());
    }
    assert_eq!(
        e.target_size("h100").await.unwrap(),
        4,
        "one gang of 4 nodes, requested by two calls: {answers:?}"
    );
    let accepted = answers.iter().filter(|a| a.is_ok()).count();
    assert_eq!(accepted, 1, "{answers:?}");
}

#[tokio::test]
async fn an_increase_whose_caller_stopped_waiting_while_it_queued_is_not_begun() {
    // `off` applies every delta as asked, so a call that ran would show in the target.
    let (e, flaky) = gated_engine_with(Policy::Off).await;
    let first = tokio::spawn({
        let e = e.clone();
        async move { e.increase_size("h100", 1).await }
    });
    flaky.entered.notified().await;
    // A second call queues behind the first; its caller gives up before it begins.
    let queued = tokio::time::timeout(
        std::time::Duration::from_millis(50),
        e.increase_size("h100", 1),
    )
    .await;
    assert!(
        queued.is_err(),
        "the first call holds the queue: {queued:?}"
    );
    flaky.gate.add_permits(2);
    assert_eq!(first.await.unwrap().unwrap(), 1);
    assert!(e.settle(std::time::Duration::from_secs(5)).await);
    assert_eq!(e.target_size("h100").await.unwrap(), 1);
}

#[tokio::test]
async fn one_increase_spreads_a_gang_no_group_holds_alone_over_its_pool() {
    use gangscaler::scaleup::{Recorder, Timeouts};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (recorder, _) =
        Recorder::open(&path, gangscaler::audit::Config::new(), Timeouts::default()).unwrap();
    let mut a = h100(4);
    a.id = gangscaler::model::NodeGroupId::new("h100-a");
    let mut b = h100(3);
    b.id = gangscaler::model::NodeGroupId::new("h100-b");
    // Six whole-node members: neither group's room alone (4, 3), both together.
    let objects = gang("train", 6, 6, 8, 0, 0, "2026-11-29T10:00:00Z");
    let e = Arc::new(
        engine_of(vec![a, b], &objects)
            .await
            .with_audit(Arc::new(recorder)),
    );
    assert_eq!(e.increase_size("h100-a", 4).await.unwrap(), 4);
    assert_eq!(
        e.target_size("h100-b").await.unwrap(),
        2,
        "h100-b adds the other two in the same call"
    );
    let d = decisions(&path);
    assert_eq!(d.len(), 2, "{d:#?}");
    let primary = d.iter().find(|d| d.node_group == "h100-a").unwrap();
    let share = d.iter().find(|d| d.node_group == "h100-b").unwrap();
    assert_eq!(
        (primary.rule.as_str(), share.rule.as_str()),
        ("gangs_admitted", "spread_share")
    );
    assert_eq!((share.ca_delta, share.applied_delta), (0, 2));
    let spread: Vec<(&str, u32)> = primary.gangs[0]
        .spread
        .iter()
        .map(|s| (s.node_group.as_str(), s.nodes))
        .collect();
    assert_eq!(spread, [("h100-b", 2)]);
    // h100-b's new instances are claimed for the gang, under the share's scale-up.
    let claimed = e
        .nodes("h100-b")
        .await
        .unwrap()
        .into_iter()
        .filter(|i| {
            i.claim.as_ref().is_some_and(|c| {
                Some(&c.scale_up) == share.scale_up_id.as_ref()
                    && c.gang == Some(("ml".to_owned(), "train".to_owned()))
            })
        })
        .count();
    assert_eq!(claimed, 2);
    // CA asks h100-b (one node of room left) for the same pods again: nothing more for a
    // gang covered on both groups.
    let err = e.increase_size("h100-b", 1).await.unwrap_err();
    assert!(matches!(err, Error::Rejected { .. }), "{err}");
    assert!(err.to_string().contains("in flight"), "{err}");
    assert_eq!(e.target_size("h100-b").await.unwrap(), 2);
}
