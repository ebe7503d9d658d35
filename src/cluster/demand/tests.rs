//! Pod demand tests over real-looking pods and storage objects
//! (`tests/fixtures/gangs/demand/`).

use std::collections::BTreeMap;

use super::*;
use crate::cluster::gangs;
use crate::cluster::problem::ClaimCause;
use crate::model::{
    PodDemand, SelectorOperator, SelectorRequirement, TaintEffect, Toleration, TolerationOperator,
};

const RESOURCES: &str = include_str!("../../../tests/fixtures/gangs/demand/resources.yaml");
const VOLUMES: &str = include_str!("../../../tests/fixtures/gangs/demand/volumes.yaml");

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;

/// The demand of `pod` in `yaml`, computed from the typed pod ([`demand`]) and from the
/// compacted pod the set keeps, which must agree.
fn demand_of(yaml: &str, pod: &str) -> PodDemand {
    let objects = ObjectSet::from_yaml_documents(yaml).unwrap();
    let compact = objects
        .pods()
        .find(|p| p.name() == pod)
        .unwrap_or_else(|| panic!("no pod {pod}"));
    let typed = typed_pod(yaml, pod);
    let d = demand(&typed, &objects);
    assert_eq!(
        d,
        compact.demand(&objects),
        "typed and compact demand of {pod}"
    );
    d
}

/// The pod named `name` in `yaml`, as the typed `k8s-openapi` object.
fn typed_pod(yaml: &str, name: &str) -> k8s_openapi::api::core::v1::Pod {
    crate::yaml::documents(yaml, &crate::yaml::OBJECTS)
        .unwrap()
        .into_iter()
        .map(|d| d.value)
        .find(|v| v["kind"] == "Pod" && v["metadata"]["name"] == name)
        .map(|v| serde_json::from_value(v).unwrap())
        .unwrap_or_else(|| panic!("no pod {name}"))
}

fn volumes_of(pod: &str) -> Vec<(String, u32)> {
    demand_of(VOLUMES, pod).volumes.into_iter().collect()
}

fn counts(pairs: &[(&str, u32)]) -> Vec<(String, u32)> {
    pairs.iter().map(|(d, n)| ((*d).to_owned(), *n)).collect()
}

#[test]
fn init_containers_count_as_their_peak_not_added_to_the_app() {
    let d = demand_of(RESOURCES, "init-heavy");
    // max(1 + 0.5, 4) CPUs; max(1Gi + 2Gi, 512Mi) memory.
    assert_eq!(d.cpu_milli, 4000);
    assert_eq!(d.memory_bytes, 3 * GI);
    // The init container's 8 GPUs are reused by the app's 8, not added.
    assert_eq!(
        d.extended,
        BTreeMap::from([("nvidia.com/gpu".to_owned(), 8)])
    );
}

#[test]
fn sidecars_add_to_the_app_and_to_every_later_init_container() {
    let d = demand_of(RESOURCES, "sidecar");
    // CPU: app 1 + sidecar 0.1 = 1.1 < migrate 2 + sidecar 0.1 = 2.1.
    assert_eq!(d.cpu_milli, 2100);
    // Memory: app 4Gi + sidecar 128Mi > migrate 1Gi + sidecar 128Mi.
    assert_eq!(d.memory_bytes, 4 * GI + 128 * MI);
}

#[test]
fn pod_overhead_is_added_to_the_requests() {
    let d = demand_of(RESOURCES, "sandboxed");
    assert_eq!(d.cpu_milli, 1250);
    assert_eq!(d.memory_bytes, 2 * GI + 160 * MI);
}

#[test]
fn an_overhead_past_u64_saturates_instead_of_overflowing() {
    let yaml = r#"
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: default}
spec:
  overhead: {cpu: "9223372036854775807"}
  containers:
  - name: main
    image: x
    resources: {requests: {cpu: "9223372036854775807"}}
"#;
    let d = demand_of(yaml, "huge");
    assert_eq!(d.cpu_milli, u64::MAX, "request plus overhead saturates");
}

#[test]
fn resources_given_only_as_limits_are_requested() {
    let d = demand_of(RESOURCES, "gpu-limits-only");
    assert_eq!(d.cpu_milli, 16_000);
    assert_eq!(d.memory_bytes, 128 * GI);
    // The request wins over the (larger) limit when both are set.
    assert_eq!(d.ephemeral_storage_bytes, 50_000_000_000);
    let extended: Vec<(&str, u64)> = d.extended.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        extended,
        [
            ("example.com/rdma-gbps", 400),
            ("nvidia.com/gpu", 8),
            ("rdma/rdma_shared_device_a", 1)
        ]
    );
}

#[test]
fn pod_level_requests_replace_the_container_sum_for_cpu_and_memory_only() {
    let d = demand_of(RESOURCES, "pod-level");
    assert_eq!(d.cpu_milli, 8000);
    assert_eq!(d.memory_bytes, 32 * GI);
    assert_eq!(d.extended["nvidia.com/gpu"], 1);
}

#[test]
fn node_selector_required_affinity_and_tolerations_are_carried_over() {
    let d = demand_of(RESOURCES, "placement");
    assert_eq!(
        d.node_selector,
        BTreeMap::from([(
            "nvidia.com/gpu.product".to_owned(),
            "H100-SXM5-80GB".to_owned()
        )])
    );
    let zone = SelectorRequirement {
        key: "topology.kubernetes.io/zone".into(),
        operator: SelectorOperator::In,
        values: vec!["us-east-1a".into(), "us-east-1b".into()],
    };
    let count = SelectorRequirement {
        key: "nvidia.com/gpu.count".into(),
        operator: SelectorOperator::Gt,
        values: vec!["7".into()],
    };
    let field = SelectorRequirement {
        key: "field:metadata.name".into(),
        operator: SelectorOperator::In,
        values: vec!["gpu-a-0".into()],
    };
    // Preferred terms are not requirements.
    assert_eq!(d.affinity_terms, [vec![zone, count], vec![field]]);
    let new_node = BTreeMap::from([
        (
            "topology.kubernetes.io/zone".to_owned(),
            "us-east-1b".to_owned(),
        ),
        ("nvidia.com/gpu.count".to_owned(), "8".to_owned()),
        ("kubernetes.io/hostname".to_owned(), "gpu-a-0".to_owned()),
    ]);
    assert!(d.affinity_terms[0].iter().all(|r| r.matches(&new_node)));
    assert!(
        !d.affinity_terms[1][0].matches(&new_node),
        "a matchFields term never matches a node we could create"
    );
    assert_eq!(
        d.tolerations,
        [
            Toleration {
                key: String::new(),
                operator: TolerationOperator::Exists,
                value: String::new(),
                effect: None,
            },
            Toleration {
                key: "nvidia.com/gpu".into(),
                operator: TolerationOperator::Equal,
                value: "present".into(),
                effect: Some(TaintEffect::NoExecute),
            },
            Toleration {
                key: "example.com/dedicated".into(),
                operator: TolerationOperator::Equal,
                value: "ml".into(),
                effect: None,
            },
        ]
    );
}

#[test]
fn required_affinity_with_only_empty_terms_matches_no_node() {
    let d = demand_of(RESOURCES, "empty-term");
    assert_eq!(d.affinity_terms.len(), 1);
    let any_node = BTreeMap::from([("kubernetes.io/hostname".to_owned(), "n".to_owned())]);
    assert!(!d.affinity_terms[0].iter().all(|r| r.matches(&any_node)));
}

#[test]
fn an_unparsable_quantity_counts_as_zero_and_is_reported() {
    let objects = ObjectSet::from_yaml_documents(RESOURCES).unwrap();
    let view = gangs(&objects, 0);
    let (_, d) = view
        .ungrouped_pending
        .iter()
        .find(|(n, _)| n == "ml/bad-quantity")
        .unwrap();
    assert_eq!((d.cpu_milli, d.memory_bytes), (0, GI));
    let problem = view
        .problems
        .iter()
        .find(|p| p.object.name == "bad-quantity")
        .unwrap();
    assert_eq!(
        problem.issue,
        Issue::InvalidQuantity {
            path: "spec.containers[0].resources.requests.cpu".into(),
            value: "lots".into()
        }
    );
}

#[test]
fn a_bound_claim_counts_for_its_persistent_volume_driver() {
    assert_eq!(volumes_of("pvc-bound"), counts(&[("ebs.csi.aws.com", 1)]));
}

#[test]
fn an_unbound_wait_for_first_consumer_claim_counts_for_its_class_provisioner() {
    assert_eq!(volumes_of("pvc-wffc"), counts(&[("ebs.csi.aws.com", 1)]));
}

#[test]
fn a_generic_ephemeral_volume_counts_for_its_template_class_and_inline_csi_does_not() {
    // `secrets` (attach not required) and `inline-block` (attachable driver, but inline)
    // are both inline CSI volumes: neither is ever attached.
    assert_eq!(volumes_of("ephemeral"), counts(&[("ebs.csi.aws.com", 1)]));
}

#[test]
fn an_existing_ephemeral_claim_wins_over_its_template() {
    // The template says nfs (never attached); the created claim is bound to an EBS volume.
    assert_eq!(
        volumes_of("ephemeral-created"),
        counts(&[("ebs.csi.aws.com", 1)])
    );
}

#[test]
fn drivers_whose_csidriver_does_not_require_attach_are_skipped() {
    assert_eq!(volumes_of("nfs-only"), []);
}

#[test]
fn a_claim_mounted_twice_by_one_pod_counts_once() {
    assert_eq!(volumes_of("shared"), counts(&[("ebs.csi.aws.com", 2)]));
}

#[test]
fn default_class_migrated_in_tree_and_driverless_claims_count_as_the_scheduler_would() {
    // checkpoints (PV), legacy (in-tree provisioner), default-class (default class) and
    // legacy-static (in-tree PV) on EBS; block-data on a driver with no CSIDriver object;
    // datasets (nfs) skipped; the missing claim counts nowhere and is unresolved.
    assert_eq!(
        volumes_of("mixed"),
        counts(&[("disk.csi.example.com", 1), ("ebs.csi.aws.com", 4)])
    );
    assert_eq!(
        demand_of(VOLUMES, "mixed").unresolved_claims,
        ["not-created-yet"]
    );
    let objects = ObjectSet::from_yaml_documents(VOLUMES).unwrap();
    let view = gangs(&objects, 0);
    let issues: Vec<String> = view
        .problems
        .iter()
        .filter(|p| p.object.name == "mixed")
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        issues,
        [
            "Pod ml/mixed (v1): persistentvolumeclaim \"not-created-yet\" not found: its CSI \
          driver is unknown, so no node group is planned to host the pod until it resolves"
        ]
    );
}

#[test]
fn a_bound_claim_counts_for_its_volume_driver_not_its_class() {
    // The claim names `block` (disk.csi.example.com), its PV attaches through EBS.
    assert_eq!(volumes_of("pv-wins"), counts(&[("ebs.csi.aws.com", 1)]));
    assert!(demand_of(VOLUMES, "pv-wins").unresolved_claims.is_empty());
}

#[test]
fn claims_whose_driver_cannot_be_resolved_are_listed_and_reported_once_each() {
    let d = demand_of(VOLUMES, "unresolved");
    // Only the resolvable claim counts; the others are not silently counted toward nothing.
    assert_eq!(
        d.volumes.into_iter().collect::<Vec<_>>(),
        counts(&[("ebs.csi.aws.com", 1)])
    );
    assert_eq!(
        d.unresolved_claims,
        [
            "typo-class",
            "bound-to-missing",
            "static-unbound",
            "never-created",
            "unresolved-scratch"
        ]
    );
    let objects = ObjectSet::from_yaml_documents(VOLUMES).unwrap();
    let view = gangs(&objects, 0);
    let causes: Vec<(String, ClaimCause)> = view
        .problems
        .iter()
        .filter(|p| p.object.name == "unresolved" && p.object.kind == "Pod")
        .map(|p| match &p.issue {
            Issue::UnresolvedClaim { claim, cause } => (claim.clone(), cause.clone()),
            other => panic!("unexpected issue {other:?}"),
        })
        .collect();
    let class = |c: &str| ClaimCause::ClassNotFound { class: c.into() };
    let mut want = vec![
        (
            "bound-to-missing".to_owned(),
            ClaimCause::VolumeNotFound {
                volume: "pvc-not-listed-yet".into(),
            },
        ),
        ("never-created".to_owned(), ClaimCause::ClaimNotFound),
        ("static-unbound".to_owned(), ClaimCause::NoClassUnbound),
        ("typo-class".to_owned(), class("ebs-gp3-fast")),
        ("unresolved-scratch".to_owned(), class("local-nvme")),
    ];
    want.sort();
    let mut causes = causes;
    causes.sort();
    assert_eq!(causes, want);
    // The message names the claim and the missing object.
    let typo = view
        .problems
        .iter()
        .find(|p| matches!(&p.issue, Issue::UnresolvedClaim { claim, .. } if claim == "typo-class"))
        .unwrap()
        .to_string();
    assert!(
        typo.starts_with("Pod ml/unresolved (v1): persistentvolumeclaim \"typo-class\" storageclass \"ebs-gp3-fast\" not found"),
        "{typo}"
    );
}

#[test]
fn a_claim_without_a_class_is_unresolved_when_no_class_is_the_default() {
    let yaml = r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: gp3}
provisioner: ebs.csi.aws.com
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: ml}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ml}
spec:
  containers: [{name: c, image: app}]
  volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]
"#;
    let d = demand_of(yaml, "p");
    assert_eq!(d.unresolved_claims, ["data"]);
    assert!(d.volumes.is_empty());
    let view = gangs(&ObjectSet::from_yaml_documents(yaml).unwrap(), 0);
    assert_eq!(
        view.problems[0].issue,
        Issue::UnresolvedClaim {
            claim: "data".into(),
            cause: ClaimCause::NoDefaultClass
        }
    );
    // Marking gp3 the default resolves it.
    let with_default = yaml.replace(
        "metadata: {name: gp3}",
        "metadata: {name: gp3, annotations: {storageclass.kubernetes.io/is-default-class: \"true\"}}",
    );
    let d = demand_of(&with_default, "p");
    assert!(d.unresolved_claims.is_empty());
    assert_eq!(
        d.volumes.into_iter().collect::<Vec<_>>(),
        counts(&[("ebs.csi.aws.com", 1)])
    );
}
