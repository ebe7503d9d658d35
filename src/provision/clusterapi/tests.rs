//! Tests of the Cluster API backend.

use super::*;
use crate::model::ErrorCode;
use crate::provision::capi_types::{
    MachineDeprecatedStatus, MachineNodeReference, MachineSpec, MachineStatus, MachineV1Beta1Status,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn machine(name: &str, provider_id: Option<&str>, phase: &str) -> Machine {
    Machine {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("fleet".into()),
            ..Default::default()
        },
        spec: MachineSpec {
            provider_id: provider_id.map(Into::into),
        },
        status: MachineStatus {
            phase: Some(phase.into()),
            ..Default::default()
        },
    }
}

fn failed(mut m: Machine, reason: &str, message: &str) -> Machine {
    m.status.deprecated = Some(MachineDeprecatedStatus {
        v1beta1: Some(MachineV1Beta1Status {
            failure_reason: Some(reason.into()),
            failure_message: Some(message.into()),
        }),
    });
    m
}

#[test]
fn a_machine_without_provider_id_gets_a_stable_placeholder_and_is_creating() {
    let i = instance_of(&machine("md-a-x1", None, "Provisioning"));
    assert_eq!(i.id, "clusterapi-machine://fleet/md-a-x1");
    assert_eq!(i.node_name, "md-a-x1");
    assert_eq!(i.state, InstanceState::Creating);
    assert_eq!(i.error, None);
    // Same Machine, same id: CA can name it in a delete request later.
    assert_eq!(instance_of(&machine("md-a-x1", None, "Pending")).id, i.id);
}

#[test]
fn a_machine_with_a_node_is_running_under_its_provider_id_and_node_name() {
    let mut m = machine("md-a-x1", Some("aws:///us-east-1a/i-1"), "Running");
    m.status.node_ref = Some(MachineNodeReference {
        name: "ip-10-0-0-1".into(),
    });
    let i = instance_of(&m);
    assert_eq!(i.id, "aws:///us-east-1a/i-1");
    assert_eq!(i.node_name, "ip-10-0-0-1");
    assert_eq!(i.state, InstanceState::Running);
    // providerID without a Node yet: still creating.
    let i = instance_of(&machine("md-a-x2", Some("aws:///x/i-2"), "Provisioned"));
    assert_eq!(i.state, InstanceState::Creating);
}

#[test]
fn deleting_machines_are_deleting_and_never_failed() {
    let mut m = failed(machine("m", None, "Deleting"), "CreateError", "boom");
    assert_eq!(instance_of(&m).state, InstanceState::Deleting);
    assert_eq!(instance_of(&m).error, None);
    m.status.phase = Some("Running".into());
    m.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    assert_eq!(instance_of(&m).state, InstanceState::Deleting);
}

#[test]
fn failures_map_to_error_codes_ca_backs_off_on() {
    let i = instance_of(&failed(
        machine("m1", None, "Failed"),
        "InsufficientResources",
        "no p5 capacity in us-east-1a",
    ));
    assert_eq!(i.state, InstanceState::Creating);
    let e = i.error.unwrap();
    assert_eq!(e.code, ErrorCode::Stockout);
    assert!(e.message.contains("fleet/m1"), "{}", e.message);
    assert!(e.message.contains("no p5 capacity"), "{}", e.message);
    let e = instance_of(&failed(
        machine("m2", None, "Provisioning"),
        "CreateError",
        "ami",
    ))
    .error
    .unwrap();
    assert_eq!(e.code, ErrorCode::ProvisioningFailed);
    // A Failed phase without a reason still fails.
    let e = instance_of(&machine("m3", None, "Failed")).error.unwrap();
    assert_eq!(e.code, ErrorCode::ProvisioningFailed);
    // Empty failure fields are no failure.
    let i = instance_of(&failed(machine("m4", None, "Provisioning"), "", ""));
    assert_eq!(i.error, None);
}

#[test]
fn delete_requests_name_machines_by_provider_id_placeholder_or_name() {
    let mut m = machine("md-a-x1", Some("aws:///i-1"), "Running");
    m.status.node_ref = Some(MachineNodeReference {
        name: "node-1".into(),
    });
    let i = instance_of(&m);
    let by = |p: &str, n: &str| NodeRef {
        provider_id: p.into(),
        name: n.into(),
    };
    assert!(names(&m, &i, &by("aws:///i-1", "node-1")));
    assert!(names(
        &m,
        &i,
        &by("clusterapi-machine://fleet/md-a-x1", "x")
    ));
    assert!(names(&m, &i, &by("", "node-1")));
    assert!(names(&m, &i, &by("", "md-a-x1")));
    assert!(!names(&m, &i, &by("aws:///i-2", "node-1")));
    assert!(!names(&m, &i, &by("", "")));
    assert!(!names(
        &m,
        &i,
        &by("clusterapi-machine://other/md-a-x1", "")
    ));
}

#[test]
fn capacity_annotations_that_disagree_with_the_template_are_named() {
    let mut group = crate::testing::group("g", 0, 4);
    group.gpu = Some(crate::model::GpuSpec {
        count: 8,
        product: "NVIDIA-H100-80GB-HBM3".into(),
        memory: crate::model::quantity::Quantity::from_units(80 << 30),
        resource_name: "nvidia.com/gpu".into(),
    });
    let key = |k: &str| format!("{CAPACITY_ANNOTATION_PREFIX}{k}");
    let cap = group.capacity.unwrap();
    let gpu = group.gpu.clone().unwrap();
    let agree: BTreeMap<String, String> = [
        (key("cpu"), cap.cpu.to_decimal_string()),
        (key("memory"), cap.memory.to_binary_string()),
        (key("maxPods"), cap.pods.to_string()),
        (key("gpu-count"), gpu.count.to_string()),
        (key("gpu-type"), gpu.resource_name.clone()),
        (key("labels"), "a=b".to_owned()),
    ]
    .into_iter()
    .collect();
    assert_eq!(capacity_drift(&agree, &group), Vec::<String>::new());
    let mut off = agree.clone();
    off.insert(key("cpu"), "1".to_owned());
    off.insert(key("gpu-count"), "2".to_owned());
    off.insert(key("memory"), "lots".to_owned());
    let drift = capacity_drift(&off, &group);
    assert_eq!(drift.len(), 3, "{drift:?}");
    assert!(
        drift.iter().any(|d| d.starts_with("cpu: annotation 1")),
        "{drift:?}"
    );
    assert!(
        drift
            .iter()
            .any(|d| d.starts_with("gpu-count: annotation 2")),
        "{drift:?}"
    );
    assert!(
        drift
            .iter()
            .any(|d| d.contains("\"lots\" is not a quantity")),
        "{drift:?}"
    );
    assert!(capacity_drift(&BTreeMap::new(), &group).is_empty());
}

fn capi_group(id: &str, md: &str) -> NodeGroupSpec {
    let mut g = crate::testing::group(id, 0, 4);
    g.backend = BackendSpec::ClusterApi(ClusterApiBackendSpec {
        namespace: "fleet".into(),
        name: md.into(),
    });
    g
}

/// A backend whose API server is a closed loopback port.
fn unreachable_backend() -> ClusterApiProvisioner {
    let url: hyper::Uri = "http://127.0.0.1:1".parse().unwrap();
    ClusterApiProvisioner::new(kube::Client::try_from(kube::Config::new(url)).unwrap())
}

#[tokio::test]
async fn two_groups_on_one_machine_deployment_are_refused_before_any_call() {
    let p = unreachable_backend();
    let err = p
        .sync_groups(&[capi_group("a", "pool"), capi_group("b", "pool")])
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("MachineDeployment fleet/pool already backs another group"),
        "{err}"
    );
    // An unreachable management cluster is not fatal at start; calls say what failed.
    p.sync_groups(&[capi_group("a", "pool")]).await.unwrap();
    let err = p.target_size(&capi_group("a", "pool")).await.unwrap_err();
    assert_eq!(err.kind(), "unreachable", "{err}");
    assert!(
        err.to_string().contains("MachineDeployment fleet/pool"),
        "{err}"
    );
    let err = p.increase(&capi_group("a", "pool"), 1).await.unwrap_err();
    assert_eq!(err.kind(), "unreachable", "{err}");
    // A node nobody knows is in no group, even when re-listing fails.
    let none = p
        .lookup(&NodeRef {
            provider_id: "aws:///i-1".into(),
            name: "n".into(),
        })
        .await
        .unwrap();
    assert_eq!(none, None);
}

#[tokio::test]
async fn a_group_of_another_backend_is_an_error_not_a_panic() {
    let p = unreachable_backend();
    let err = p
        .target_size(&crate::testing::group("m", 0, 1))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not clusterapi"), "{err}");
}

#[test]
fn the_index_replaces_a_groups_entries_and_keeps_the_others() {
    let mut ix = Index::default();
    let a = NodeGroupId::new("a");
    let b = NodeGroupId::new("b");
    let inst = |id: &str, node: &str| Instance {
        id: id.into(),
        node_name: node.into(),
        state: InstanceState::Running,
        error: None,
        claim: None,
    };
    ix.replace(&a, &[inst("p://1", "n1"), inst("p://2", "n2")]);
    ix.replace(&b, &[inst("p://3", "n3")]);
    let find = |ix: &Index, p: &str, n: &str| {
        ix.find(&NodeRef {
            provider_id: p.into(),
            name: n.into(),
        })
    };
    assert_eq!(find(&ix, "p://1", ""), Some(a.clone()));
    assert_eq!(find(&ix, "", "n3"), Some(b.clone()));
    ix.replace(&a, &[inst("p://2", "n2")]);
    assert_eq!(find(&ix, "p://1", ""), None);
    assert_eq!(find(&ix, "p://2", ""), Some(a));
    assert_eq!(find(&ix, "p://3", ""), Some(b));
}
