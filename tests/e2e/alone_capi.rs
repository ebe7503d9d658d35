//! The clusterapi backend ALONE (no CA, no Cluster API controllers): gangscaler's
//! `ClusterApiProvisioner` against a real kube-apiserver serving Cluster API's own v1beta2
//! CRDs. Machines are written by the test, so their shapes (and the backend's typed reading of
//! them) go through the real CRD schema; the scale subresource, optimistic concurrency and the
//! all-or-nothing delete are the API server's and the backend's alone.

use std::collections::BTreeMap;
use std::sync::Arc;

use gangscaler::model::{
    BackendSpec, ClusterApiBackendSpec, ErrorCode, InstanceState, NodeGroupSpec,
};
use gangscaler::provision::clusterapi::{ClusterApiProvisioner, placeholder_id};
use gangscaler::provision::{NodeRef, Provisioner};
use gangscaler::testing;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use super::capi::{self, NAMESPACE};
use super::harness::Cluster;

fn group(min: u32, max: u32) -> NodeGroupSpec {
    let mut g = testing::group("gpu", min, max);
    g.backend = BackendSpec::ClusterApi(ClusterApiBackendSpec {
        namespace: NAMESPACE.into(),
        name: "gpu".into(),
    });
    g
}

/// Creates Machine `name` of MachineDeployment `gpu` with `status`, and `providerID` if any.
async fn machine(
    client: &kube::Client,
    name: &str,
    provider_id: Option<&str>,
    status: serde_json::Value,
) {
    let api = capi::machines(client);
    let mut spec = capi::machine_spec(name, "StandinMachine");
    if let Some(p) = provider_id {
        spec["providerID"] = json!(p);
    }
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": name, "namespace": NAMESPACE,
                     "labels": {"cluster.x-k8s.io/deployment-name": "gpu",
                                "cluster.x-k8s.io/cluster-name": capi::CLUSTER}},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": status})),
    )
    .await
    .unwrap();
}

/// A fresh API server `name` with Cluster API's CRDs and MachineDeployment `gpu` at
/// `replicas`.
async fn with_deployment(name: &str, replicas: u32) -> (Cluster, kube::Client) {
    let cluster = Cluster::start(name).await;
    let client = cluster.client().await;
    capi::install_crds(&client).await;
    capi::deployments(&client)
        .create(
            &PostParams::default(),
            &serde_json::from_value(capi::machine_deployment("gpu", replicas)).unwrap(),
        )
        .await
        .unwrap();
    (cluster, client)
}

async fn delete_marks(client: &kube::Client) -> BTreeMap<String, bool> {
    capi::machines(client)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|m| {
            let marked = m
                .metadata
                .annotations
                .is_some_and(|a| a.contains_key("cluster.x-k8s.io/delete-machine"));
            (m.metadata.name.unwrap_or_default(), marked)
        })
        .collect()
}

async fn replicas(client: &kube::Client) -> i64 {
    capi::deployments(client).get("gpu").await.unwrap().data["spec"]["replicas"]
        .as_i64()
        .unwrap()
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn clusterapi_backend_scales_reads_and_deletes_machine_deployments_on_a_real_api_server() {
    let (cluster, client) = with_deployment("alone-capi", 0).await;
    // Two providers (two processes) race: 16 concurrent +1s against max 10.
    let a = Arc::new(ClusterApiProvisioner::new(client.clone()));
    let b = Arc::new(ClusterApiProvisioner::new(cluster.client().await));
    let g = group(0, 10);
    a.sync_groups(std::slice::from_ref(&g)).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let p = if i % 2 == 0 { a.clone() } else { b.clone() };
        let g = g.clone();
        tasks.push(tokio::spawn(async move { p.increase(&g, 1).await }));
    }
    let mut ok = 0;
    let mut above = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => ok += 1,
            Err(e) => {
                assert_eq!(e.kind(), "above_max", "{e}");
                above += 1;
            }
        }
    }
    assert_eq!((ok, above), (10, 6), "no lost update, no overshoot");
    assert_eq!(replicas(&client).await, 10);
    assert_eq!(a.target_size(&g).await.unwrap(), 10);

    // Machines as Cluster API writes them (no controllers run here, so replicas and
    // Machines are independent): one with a Node, one still without a providerID, one whose
    // infrastructure ran out of capacity.
    machine(
        &client,
        "gpu-running",
        Some("aws:///us-east-1a/i-0abc"),
        json!({"phase": "Running", "nodeRef": {"name": "ip-10-0-0-1"}}),
    )
    .await;
    machine(&client, "gpu-pending", None, json!({"phase": "Pending"})).await;
    machine(
        &client,
        "gpu-failed",
        None,
        json!({"phase": "Pending", "deprecated": {"v1beta1": {
            "failureReason": "InsufficientResources",
            "failureMessage": "no p5.48xlarge capacity in us-east-1a"}}}),
    )
    .await;
    let instances = a.instances(&g).await.unwrap();
    let by_id: BTreeMap<&str, _> = instances.iter().map(|i| (i.id.as_str(), i)).collect();
    assert_eq!(by_id.len(), 3, "{instances:?}");
    let running = by_id["aws:///us-east-1a/i-0abc"];
    assert_eq!(
        (running.state, running.node_name.as_str()),
        (InstanceState::Running, "ip-10-0-0-1")
    );
    let pending = by_id[placeholder_id(NAMESPACE, "gpu-pending").as_str()];
    assert_eq!(
        (pending.state, pending.error.clone()),
        (InstanceState::Creating, None)
    );
    let failed = by_id[placeholder_id(NAMESPACE, "gpu-failed").as_str()];
    assert_eq!(failed.state, InstanceState::Creating);
    let e = failed.error.as_ref().expect("the failure is reported");
    assert_eq!(e.code, ErrorCode::Stockout);
    assert!(
        e.message.contains("no p5.48xlarge capacity"),
        "{}",
        e.message
    );
    // NodeGroupForNode finds the group by providerID from a fresh process too.
    let lookup = b
        .lookup(&NodeRef {
            provider_id: "aws:///us-east-1a/i-0abc".into(),
            name: "ip-10-0-0-1".into(),
        })
        .await;
    assert!(lookup.is_ok());
    b.sync_groups(std::slice::from_ref(&g)).await.unwrap();
    let found = b
        .lookup(&NodeRef {
            provider_id: "aws:///us-east-1a/i-0abc".into(),
            name: "ip-10-0-0-1".into(),
        })
        .await
        .unwrap();
    assert_eq!(found.map(|id| id.to_string()), Some("gpu".to_owned()));

    // DecreaseTargetSize cancels only replicas no Machine stands for: 10 - 3 = 7.
    let err = a.decrease_target(&g, 8).await.unwrap_err();
    assert_eq!(err.kind(), "would_delete_existing", "{err}");
    assert_eq!(a.decrease_target(&g, 4).await.unwrap(), 6);

    // DeleteNodes: a node of no Machine refuses the whole request and marks nothing.
    let running_ref = NodeRef {
        provider_id: "aws:///us-east-1a/i-0abc".into(),
        name: "ip-10-0-0-1".into(),
    };
    let foreign = NodeRef {
        provider_id: "aws:///us-east-1a/i-other".into(),
        name: "other".into(),
    };
    let err = a
        .delete(&g, &[running_ref.clone(), foreign])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "not_in_group", "{err}");
    assert!(delete_marks(&client).await.values().all(|m| !m));
    assert_eq!(replicas(&client).await, 6);
    // Healthy Machines may not take the group below its minimum; failed ones may.
    let g_min = group(6, 10);
    let err = a
        .delete(&g_min, std::slice::from_ref(&running_ref))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "below_min", "{err}");
    assert!(delete_marks(&client).await.values().all(|m| !m));
    let failed_ref = NodeRef {
        provider_id: placeholder_id(NAMESPACE, "gpu-failed"),
        name: placeholder_id(NAMESPACE, "gpu-failed"),
    };
    assert_eq!(a.delete(&g_min, &[failed_ref]).await.unwrap(), 5);
    // Named by providerID and by name, the same Machine twice: one mark, one replica less.
    let by_name = NodeRef {
        provider_id: String::new(),
        name: "ip-10-0-0-1".into(),
    };
    assert_eq!(a.delete(&g, &[running_ref, by_name]).await.unwrap(), 4);
    let marks = delete_marks(&client).await;
    assert_eq!(
        marks,
        BTreeMap::from([
            ("gpu-failed".to_owned(), true),
            ("gpu-pending".to_owned(), false),
            ("gpu-running".to_owned(), true),
        ]),
        "exactly the named Machines are marked"
    );
    assert_eq!(replicas(&client).await, 4);
}

/// The claim ledger (`gangscaler.io/claims` on the MachineDeployment) on a real API server:
/// Machines take the claims in the order they were requested, a Machine older than the
/// ledger takes none, a fresh process reads the same claims, and withdrawing takes pending
/// replicas first and then Machines of the claim that are not machines yet, never one with a
/// providerID.
#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn clusterapi_backend_claims_machines_in_request_order_across_a_restart_and_withdraws_by_claim()
 {
    use gangscaler::model::Claim;
    use gangscaler::provision::clusterapi::ledger::LEDGER_ANNOTATION;

    let (cluster, client) = with_deployment("alone-capi-claims", 1).await;
    let g = group(0, 10);
    // The replica's Machine from before gangscaler kept claims: adopted, never claimed.
    machine(&client, "gpu-0-old", None, json!({"phase": "Pending"})).await;
    let a = ClusterApiProvisioner::new(client.clone());
    a.sync_groups(std::slice::from_ref(&g)).await.unwrap();
    let for_a = Claim::for_gang("su-1", "ml", "a");
    let for_b = Claim::for_gang("su-2", "ml", "b");
    assert_eq!(
        a.increase_for(&g, 2, &[for_a.clone(), for_a.clone()])
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        a.increase_for(&g, 1, std::slice::from_ref(&for_b))
            .await
            .unwrap(),
        4
    );
    let mut pending = a.pending_claims(&g).await.unwrap();
    pending.sort_by_key(ToString::to_string);
    assert_eq!(pending, vec![for_a.clone(), for_a.clone(), for_b.clone()]);

    // The MachineSet's Machines, as Cluster API writes them: two for the first request (the
    // infrastructure has made one: it has a providerID, its Node may be registering), one
    // for the second.
    machine(
        &client,
        "gpu-1",
        Some("standin://gpu-1"),
        json!({"phase": "Provisioned"}),
    )
    .await;
    machine(&client, "gpu-2", None, json!({"phase": "Pending"})).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    machine(&client, "gpu-3", None, json!({"phase": "Pending"})).await;
    let claims_of =
        |instances: Vec<gangscaler::model::Instance>| -> BTreeMap<String, Option<String>> {
            instances
                .into_iter()
                .map(|i| (i.node_name, i.claim.map(|c| c.to_string())))
                .collect()
        };
    let expected = BTreeMap::from([
        ("gpu-0-old".to_owned(), None),
        ("gpu-1".to_owned(), Some(for_a.to_string())),
        ("gpu-2".to_owned(), Some(for_a.to_string())),
        ("gpu-3".to_owned(), Some(for_b.to_string())),
    ]);
    assert_eq!(claims_of(a.instances(&g).await.unwrap()), expected);
    // A restarted provider reads them back from the MachineDeployment.
    let fresh = ClusterApiProvisioner::new(cluster.client().await);
    fresh.sync_groups(std::slice::from_ref(&g)).await.unwrap();
    assert_eq!(claims_of(fresh.instances(&g).await.unwrap()), expected);
    let md = capi::deployments(&client).get("gpu").await.unwrap();
    let ledger = md.metadata.annotations.unwrap_or_default()[LEDGER_ANNOTATION].clone();
    assert!(ledger.contains("\"pending\":[]"), "{ledger}");

    // b ended: its Machine, not a machine yet, goes (marked, replicas lowered by one). a
    // ended too: only gpu-2 goes, never gpu-1, which has a providerID.
    assert_eq!(
        fresh
            .withdraw(&g, std::slice::from_ref(&for_b))
            .await
            .unwrap(),
        1
    );
    assert_eq!(replicas(&client).await, 3);
    assert_eq!(
        fresh
            .withdraw(&g, &[for_a.clone(), for_a.clone()])
            .await
            .unwrap(),
        1
    );
    assert_eq!(replicas(&client).await, 2);
    assert_eq!(
        delete_marks(&client).await,
        BTreeMap::from([
            ("gpu-0-old".to_owned(), false),
            ("gpu-1".to_owned(), false),
            ("gpu-2".to_owned(), true),
            ("gpu-3".to_owned(), true),
        ])
    );
    // The MachineSet deletes the marked Machines (no controllers run here).
    for name in ["gpu-2", "gpu-3"] {
        capi::machines(&client)
            .delete(name, &Default::default())
            .await
            .unwrap();
    }
    // A replica not stood for by any Machine yet is withdrawn from the ledger, in the same
    // write that lowers the replicas; one without the claim is not.
    let for_c = Claim::for_gang("su-3", "ml", "c");
    fresh
        .increase_for(&g, 1, std::slice::from_ref(&for_c))
        .await
        .unwrap();
    assert_eq!(
        fresh
            .withdraw(&g, &[Claim::for_gang("su-9", "ml", "x")])
            .await
            .unwrap(),
        0
    );
    assert_eq!(fresh.pending_claims(&g).await.unwrap(), vec![for_c.clone()]);
    assert_eq!(fresh.withdraw(&g, &[for_c]).await.unwrap(), 1);
    assert_eq!(replicas(&client).await, 2);
    assert_eq!(fresh.pending_claims(&g).await.unwrap(), Vec::<Claim>::new());
}
