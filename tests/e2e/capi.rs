//! Cluster API in the e2e: the real Cluster API core manager (`sigs.k8s.io/cluster-api/core`,
//! built by `tests/e2e/build.sh`) runs against the e2e API server, which is both its
//! management cluster and the workload cluster (the Cluster's kubeconfig Secret points back
//! at it). Its MachineDeployment -> MachineSet -> Machine -> Node-reference machinery is real.
//!
//! **STAND-IN infrastructure provider.** No infrastructure provider that Cluster API ships
//! makes Nodes in the API server it runs against (its docker provider needs a container
//! runtime; its in-memory provider simulates workload clusters in an API server of its own).
//! [`StandIn`] is the smallest test-only controller that does: it turns each `StandinMachine`
//! (CRDs in `tests/e2e/capi/standin-crds.yaml`) into a kwok Node with a providerID, after a
//! boot delay, and reports it provisioned as Cluster API's v1beta2 infrastructure contract
//! asks (`spec.providerID`, `status.initialization.provisioned`); a template with a `failure`
//! reports `status.failureReason`/`failureMessage` instead, which Cluster API copies to the
//! Machine. Its Nodes register under Cluster API's `node.cluster.x-k8s.io/uninitialized`
//! taint, as a kubeadm-bootstrapped kubelet's do, so Cluster API's own first reconcile of the
//! Node (which lifts it and adds the Machine's OnInitialization taints) is on the path to a
//! usable Node. Like the kwok backend, it also plays the CSI node plugin (a CSINode with the
//! attach limit) and the external-attacher (VolumeAttachments on its nodes are marked
//! attached). It is a fake of a cloud, named as such; nothing of gangscaler runs in it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use k8s_openapi::api::storage::v1::{CSINode, VolumeAttachment};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use rcgen::ExtendedKeyUsagePurpose;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::harness::{Cluster, Proc, TestCa, Versions, eventually, free_port, write};

/// Namespace of the Cluster API objects.
pub const NAMESPACE: &str = "fleet";
/// The Cluster's name.
pub const CLUSTER: &str = "e2e";
/// API group of the stand-in provider.
const STANDIN_GROUP: &str = "infrastructure.e2e.gangscaler.dev";
/// Scheme of the stand-in's providerIDs.
pub const PROVIDER_ID_SCHEME: &str = "standin://";
/// Label on the stand-in's Nodes.
const STANDIN_LABEL: &str = "e2e.gangscaler.dev/standin";
/// The taint a Node bootstrapped by Cluster API's kubeadm provider registers with (its kubelet's
/// `--register-with-taints`); the Machine controller removes it on its first reconcile of the
/// Node, in the same patch that adds the Machine's OnInitialization taints.
pub const UNINITIALIZED_TAINT: &str = "node.cluster.x-k8s.io/uninitialized";
/// How long a StandinMachine takes to become a Node (a real GPU machine takes minutes).
pub const BOOT_DELAY: Duration = Duration::from_secs(8);
/// The taint a stand-in Node of a group with CSI limits is registered with and loses once its
/// CSINode carries the limits (a CSI node plugin's startup taint; under cluster-autoscaler's
/// startup-taint prefix, so CA counts the node as starting and leaves the taint out of its
/// templates).
const CSI_STARTUP_TAINT: &str =
    "startup-taint.cluster-autoscaler.kubernetes.io/csi-node-not-registered";
/// The Secret Machines name as their bootstrap data (no bootstrap provider runs).
const BOOTSTRAP_SECRET: &str = "standin-bootstrap";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Cluster API's CRDs, from the module source `build.sh` downloaded.
fn capi_crd_dir(version: &str) -> PathBuf {
    let out = Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .expect("go env");
    let modcache = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    PathBuf::from(modcache).join(format!(
        "sigs.k8s.io/cluster-api@{version}/core/config/crd/bases"
    ))
}

fn standin_api(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(STANDIN_GROUP, "v1alpha1", kind),
        plural,
    )
}

/// `cluster.x-k8s.io/v1beta2` `kind`.
pub fn capi_api(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind),
        plural,
    )
}

/// A Machines API in [`NAMESPACE`].
pub fn machines(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), NAMESPACE, &capi_api("Machine", "machines"))
}

/// A MachineDeployments API in [`NAMESPACE`].
pub fn deployments(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &capi_api("MachineDeployment", "machinedeployments"),
    )
}

/// A group's MachineDeployment as the stand-in builds it: the node every Machine becomes.
#[derive(Debug, Clone)]
pub struct MachineGroup {
    /// The MachineDeployment's (and template's) name: the gangscaler group id.
    pub name: String,
    /// The Node the machines become: `{labels, taints, capacity, allocatable}`.
    pub node: Value,
    /// CSI attach limits: driver -> volumes.
    pub csi: BTreeMap<String, u32>,
    /// `(reason, message)` every machine of the group fails with.
    pub failure: Option<(String, String)>,
    /// The MachineDeployment template's taints (`spec.template.spec.taints`).
    pub template_taints: Vec<Value>,
}

impl MachineGroup {
    /// From gangscaler's own template for `group` (the infrastructure is configured to make
    /// the nodes the node-group file describes, as an operator would).
    pub fn from_template(group: &gangscaler::model::NodeGroupSpec, gpu_label: &str) -> Self {
        let t = gangscaler::model::TemplateNode::for_group(group, gpu_label)
            .expect("the group has capacity");
        let t = serde_json::to_value(&t).unwrap();
        Self {
            name: group.id.to_string(),
            node: json!({
                "labels": t["metadata"]["labels"],
                "taints": t["spec"]["taints"],
                "capacity": t["status"]["capacity"],
                "allocatable": t["status"]["allocatable"],
            }),
            csi: group.csi.clone(),
            failure: None,
            template_taints: Vec::new(),
        }
    }

    /// The MachineDeployment registers its Nodes under the reservation taint, as
    /// docs/reservation.md#cluster-api tells a reserving group's owner to.
    #[must_use]
    pub fn registering_reserved(mut self) -> Self {
        self.template_taints.push(json!({
            "key": gangscaler::model::reservation::RESERVATION_TAINT,
            "value": gangscaler::model::reservation::UNASSIGNED,
            "effect": "NoSchedule",
            "propagation": gangscaler::provision::clusterapi::reservation::ON_INITIALIZATION,
        }));
        self
    }

    /// Every machine fails with `reason` and `message`.
    #[must_use]
    pub fn failing(mut self, reason: &str, message: &str) -> Self {
        self.failure = Some((reason.to_owned(), message.to_owned()));
        self
    }
}

/// The Cluster API core manager and the stand-in provider, stopped on drop.
pub struct Capi {
    /// The Cluster API core manager.
    pub manager: Proc,
    stop: CancellationToken,
    standin: tokio::task::JoinHandle<()>,
}

impl Drop for Capi {
    fn drop(&mut self) {
        self.stop.cancel();
        self.standin.abort();
        self.manager.stop();
    }
}

async fn apply(api: &Api<DynamicObject>, name: &str, value: Value) {
    api.patch(
        name,
        &PatchParams::apply("e2e").force(),
        &Patch::Apply(&value),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {name}: {e}"));
}

async fn apply_crds(client: &kube::Client, docs: Vec<Value>) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for d in docs {
        let name = d["metadata"]["name"].as_str().unwrap().to_owned();
        api.patch(&name, &PatchParams::apply("e2e").force(), &Patch::Apply(&d))
            .await
            .unwrap_or_else(|e| panic!("applying CRD {name}: {e}"));
        names.push(name);
    }
    for name in names {
        eventually(
            &format!("CRD {name} established"),
            Duration::from_secs(30),
            || {
                let api = api.clone();
                let name = name.clone();
                async move {
                    let crd = api.get(&name).await.ok()?;
                    crd.status?
                        .conditions?
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                        .then_some(())
                }
            },
        )
        .await;
    }
}

fn yaml_docs(path: &Path) -> Vec<Value> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    docs.into_iter().filter(Value::is_object).collect()
}

/// Applies Cluster API's CRDs (from the module source `build.sh` downloaded) and the
/// stand-in's, waits until they are established, and creates [`NAMESPACE`].
pub async fn install_crds(client: &kube::Client) {
    let crd_dir = capi_crd_dir(&Versions::load().capi);
    let mut crds = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&crd_dir)
        .unwrap_or_else(|e| {
            panic!(
                "reading {}: {e} (run tests/e2e/build.sh)",
                crd_dir.display()
            )
        })
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for f in &files {
        crds.extend(yaml_docs(f));
    }
    crds.extend(yaml_docs(&repo().join("tests/e2e/capi/standin-crds.yaml")));
    apply_crds(client, crds).await;
    let ns: Api<Namespace> = Api::all(client.clone());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap(),
    )
    .await
    .unwrap();
}

impl Capi {
    /// Installs Cluster API's CRDs and the stand-in's, starts the core manager and the
    /// stand-in, creates the Cluster (with one control-plane Machine, so that Cluster API
    /// initializes it and watches the workload cluster's Nodes) and one MachineDeployment per
    /// group at 0 replicas.
    pub async fn start(cluster: &Cluster, client: &kube::Client, groups: &[MachineGroup]) -> Self {
        let versions = Versions::load();
        install_crds(client).await;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
        secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": format!("{CLUSTER}-kubeconfig"),
                                 "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
                    "type": "cluster.x-k8s.io/secret",
                    "stringData": {"value": std::fs::read_to_string(&cluster.kubeconfig).unwrap()},
                }))
                .unwrap(),
            )
            .await
            .unwrap();
        secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": BOOTSTRAP_SECRET,
                                 "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
                    "type": "cluster.x-k8s.io/secret",
                    "stringData": {"value": "#!/bin/sh\n# stand-in machines boot without bootstrap data\n", "format": "cloud-config"},
                }))
                .unwrap(),
            )
            .await
            .unwrap();

        // The manager serves admission and conversion webhooks, which nothing here registers
        // (the CRDs are applied without conversion webhooks, and only v1beta2 objects are
        // written); it still needs a serving certificate to start.
        let certs = cluster.dir.join("capi-webhook");
        std::fs::create_dir_all(&certs).unwrap();
        let pki = TestCa::new("gangscaler-e2e-capi-webhook");
        let (cert, key) = pki.leaf(
            "capi-webhook",
            None,
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        write(&certs.join("tls.crt"), &cert);
        write(&certs.join("tls.key"), &key);
        let mut cmd = Command::new(versions.capi_bin());
        cmd.args([
            &format!("--kubeconfig={}", cluster.kubeconfig.display()),
            "--leader-elect=false",
            &format!("--webhook-port={}", free_port()),
            &format!("--webhook-cert-dir={}", certs.display()),
            &format!("--health-addr=127.0.0.1:{}", free_port()),
            &format!("--diagnostics-address=127.0.0.1:{}", free_port()),
            "--insecure-diagnostics",
            // Machine taints reach the Nodes only with this alpha gate (v1.14).
            "--feature-gates=MachineTaintPropagation=true",
            "--v=2",
        ]);
        let manager = Proc::spawn_logged("capi-manager", &cluster.dir, cmd);

        let stop = CancellationToken::new();
        let standin = tokio::spawn(StandIn::new(client.clone()).run(stop.clone()));

        let dynamic = |kind: &str, plural: &str| {
            Api::<DynamicObject>::namespaced_with(
                client.clone(),
                NAMESPACE,
                &capi_api(kind, plural),
            )
        };
        apply(
            &dynamic("Cluster", "clusters"),
            CLUSTER,
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                   "metadata": {"name": CLUSTER, "namespace": NAMESPACE},
                   "spec": {"clusterNetwork": {"serviceDomain": "cluster.local"}}}),
        )
        .await;
        let machine_templates = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            NAMESPACE,
            &standin_api("StandinMachineTemplate", "standinmachinetemplates"),
        );
        let standin_machines = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            NAMESPACE,
            &standin_api("StandinMachine", "standinmachines"),
        );
        // The control plane: one Machine whose Node is tainted for control-plane pods only.
        apply(
            &standin_machines,
            "control-plane-0",
            json!({"apiVersion": format!("{STANDIN_GROUP}/v1alpha1"), "kind": "StandinMachine",
                   "metadata": {"name": "control-plane-0", "namespace": NAMESPACE},
                   "spec": {"node": {
                       "labels": {"node-role.kubernetes.io/control-plane": ""},
                       "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
                       "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"},
                       "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}}}}),
        )
        .await;
        apply(
            &dynamic("Machine", "machines"),
            "control-plane-0",
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                   "metadata": {"name": "control-plane-0", "namespace": NAMESPACE,
                                "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER,
                                           "cluster.x-k8s.io/control-plane": ""}},
                   "spec": {"clusterName": CLUSTER,
                            "bootstrap": {"dataSecretName": BOOTSTRAP_SECRET},
                            "infrastructureRef": {"apiGroup": STANDIN_GROUP, "kind": "StandinMachine",
                                                  "name": "control-plane-0"}}}),
        )
        .await;
        let clusters = dynamic("Cluster", "clusters");
        let mut me = Self {
            manager,
            stop,
            standin,
        };
        let manager_log = cluster.dir.join("capi-manager.log");
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            me.manager.assert_running();
            let c = clusters.get(CLUSTER).await.unwrap();
            if condition(&c.data, "ControlPlaneInitialized") == Some("True") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "Cluster {CLUSTER} not ControlPlaneInitialized: {}; manager log {}",
                c.data["status"],
                manager_log.display()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }

        for g in groups {
            let mut spec = json!({"node": g.node, "csi": g.csi});
            if let Some((reason, message)) = &g.failure {
                spec["failure"] = json!({"reason": reason, "message": message});
            }
            apply(
                &machine_templates,
                &g.name,
                json!({"apiVersion": format!("{STANDIN_GROUP}/v1alpha1"), "kind": "StandinMachineTemplate",
                       "metadata": {"name": g.name, "namespace": NAMESPACE},
                       "spec": {"template": {"spec": spec}}}),
            )
            .await;
            apply(
                &dynamic("MachineDeployment", "machinedeployments"),
                &g.name,
                machine_deployment_tainted(&g.name, 0, &g.template_taints),
            )
            .await;
        }
        me
    }
}

/// A MachineDeployment `name` of the Cluster at `replicas`, whose Machines are stand-in
/// machines of the StandinMachineTemplate `name`, written out in full (no defaulting webhook).
pub fn machine_deployment(name: &str, replicas: u32) -> Value {
    machine_deployment_tainted(name, replicas, &[])
}

/// [`machine_deployment`] whose template carries `taints` (Cluster API `MachineTaint`s).
pub fn machine_deployment_tainted(name: &str, replicas: u32, taints: &[Value]) -> Value {
    // Without Cluster API's defaulting webhook, the selector must carry the cluster-name
    // label itself, or the MachineDeployment and MachineSet controllers keep rewriting each
    // other's labels.
    let labels =
        json!({"e2e.gangscaler.dev/group": name, "cluster.x-k8s.io/cluster-name": CLUSTER});
    let mut spec = machine_spec(name, "StandinMachineTemplate");
    if !taints.is_empty() {
        spec["taints"] = json!(taints);
    }
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
           "metadata": {"name": name, "namespace": NAMESPACE},
           "spec": {
               "clusterName": CLUSTER,
               "replicas": replicas,
               "selector": {"matchLabels": labels},
               "rollout": {"strategy": {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}},
               "deletion": {"order": "Random"},
               "template": {
                   "metadata": {"labels": labels},
                   "spec": spec}}})
}

/// A Machine's spec (also a MachineDeployment template's) naming infrastructure `kind` `name`.
pub fn machine_spec(name: &str, kind: &str) -> Value {
    json!({"clusterName": CLUSTER,
           "bootstrap": {"dataSecretName": BOOTSTRAP_SECRET},
           "infrastructureRef": {"apiGroup": STANDIN_GROUP, "kind": kind, "name": name},
           "deletion": {"nodeDrainTimeoutSeconds": 5, "nodeVolumeDetachTimeoutSeconds": 5}})
}

/// The status of condition `type_` of a Cluster API object (`status.conditions`).
pub fn condition<'a>(data: &'a Value, type_: &str) -> Option<&'a str> {
    data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?["status"]
        .as_str()
}

/// The STAND-IN infrastructure controller (see the module documentation). It polls every
/// 500 ms; a test-only fake of a cloud needs no watch.
struct StandIn {
    client: kube::Client,
}

impl StandIn {
    fn new(client: kube::Client) -> Self {
        Self { client }
    }

    async fn run(self, stop: CancellationToken) {
        loop {
            if let Err(e) = self.tick().await {
                eprintln!("stand-in provider: {e}");
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    }

    async fn tick(&self) -> Result<(), kube::Error> {
        let machines: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &standin_api("StandinMachine", "standinmachines"),
        );
        let nodes: Api<Node> = Api::all(self.client.clone());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let list = machines.list(&ListParams::default()).await?;
        let mut alive = BTreeSet::new();
        for m in &list.items {
            let name = m.metadata.name.clone().unwrap_or_default();
            let ns = m.metadata.namespace.clone().unwrap_or_default();
            alive.insert(name.clone());
            if m.metadata.deletion_timestamp.is_some()
                || m.data["status"]["initialization"]["provisioned"] == true
                || m.data["status"]["failureReason"].is_string()
            {
                continue;
            }
            let born = m
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(now, |t| t.0.as_duration().as_secs_f64());
            if now - born < BOOT_DELAY.as_secs_f64() {
                continue;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(
                self.client.clone(),
                &ns,
                &standin_api("StandinMachine", "standinmachines"),
            );
            let spec = &m.data["spec"];
            if let Some(f) = spec.get("failure").filter(|f| f.is_object()) {
                let patch = json!({"status": {"failureReason": f["reason"], "failureMessage": f["message"],
                                               "initialization": {"provisioned": false}}});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                continue;
            }
            let provider_id = format!("{PROVIDER_ID_SCHEME}{ns}/{name}");
            self.make_node(&nodes, &name, &provider_id, spec).await?;
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"providerID": provider_id}})),
            )
            .await?;
            let patch = json!({"status": {"initialization": {"provisioned": true},
                                           "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        // A Node whose machine is gone goes too (Cluster API deletes it itself once the
        // Machine had a Node; this covers a machine deleted before that).
        let mine = nodes
            .list(&ListParams::default().labels(STANDIN_LABEL))
            .await?;
        let mut names = BTreeSet::new();
        for n in mine.items {
            let name = n.metadata.name.unwrap_or_default();
            if !alive.contains(&name) && n.metadata.deletion_timestamp.is_none() {
                let _ = nodes.delete(&name, &DeleteParams::default()).await;
            } else {
                names.insert(name);
            }
        }
        self.attach(&names).await
    }

    /// Registers the Node of machine `name` as a kubelet and a CSI node plugin would, under
    /// [`UNINITIALIZED_TAINT`], in an order that never lets the scheduler see the Node usable
    /// before its attach limit: with
    /// CSI limits the Node is registered (capacity included) under [`CSI_STARTUP_TAINT`], its
    /// CSINode is published, and only then is the taint lifted, as a node plugin that owns a
    /// startup taint does. Without the taint the Node would be schedulable at once (no
    /// kubelet reports a Ready condition, so the node lifecycle controller lifts the
    /// admission's not-ready taint) and the scheduler's volume-limit filter, which finds no
    /// CSINode, would set no limit. Idempotent: a failed step is redone on the next tick.
    async fn make_node(
        &self,
        nodes: &Api<Node>,
        name: &str,
        provider_id: &str,
        spec: &Value,
    ) -> Result<(), kube::Error> {
        let n = &spec["node"];
        let csi = spec["csi"].as_object().cloned().unwrap_or_default();
        let mut labels = n["labels"].as_object().cloned().unwrap_or_default();
        labels.insert("kubernetes.io/hostname".into(), json!(name));
        labels.insert(STANDIN_LABEL.into(), json!("true"));
        let mut taints = n["taints"].as_array().cloned().unwrap_or_default();
        // Registered as a kubeadm-bootstrapped kubelet does: uninitialized until Cluster API
        // has reconciled the Node (the control plane's included).
        taints.push(json!({"key": UNINITIALIZED_TAINT, "effect": "NoSchedule"}));
        if !csi.is_empty() {
            taints.push(json!({"key": CSI_STARTUP_TAINT, "effect": "NoSchedule"}));
        }
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels,
                         "annotations": {"kwok.x-k8s.io/node": "fake",
                                         "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
            "spec": {"providerID": provider_id, "taints": taints},
            "status": {"capacity": n["capacity"], "allocatable": n["allocatable"]},
        }))
        .expect("a stand-in Node");
        let created = match nodes.create(&PostParams::default(), &node).await {
            Ok(n) => n,
            Err(kube::Error::Api(s)) if s.is_already_exists() => nodes.get(name).await?,
            Err(e) => return Err(e),
        };
        let has_capacity = created
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .is_some_and(|c| !c.is_empty());
        if !has_capacity {
            let status =
                json!({"status": {"capacity": n["capacity"], "allocatable": n["allocatable"]}});
            nodes
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                .await?;
        }
        if csi.is_empty() {
            return Ok(());
        }
        let drivers: Vec<Value> = csi
            .iter()
            .map(|(driver, count)| json!({"name": driver, "nodeID": name, "allocatable": {"count": count}}))
            .collect();
        let csinode: CSINode = serde_json::from_value(json!({
            "metadata": {"name": name, "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                "name": name, "uid": created.metadata.uid}]},
            "spec": {"drivers": drivers},
        }))
        .expect("a CSINode");
        let api: Api<CSINode> = Api::all(self.client.clone());
        match api.create(&PostParams::default(), &csinode).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_already_exists() => {}
            Err(e) => return Err(e),
        }
        // Lift the startup taint, keeping every other taint (the node lifecycle controller's
        // included); the resourceVersion makes a concurrent change a conflict, retried on the
        // next tick.
        let current = nodes.get(name).await?;
        let taints: Vec<_> = current
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        if taints.iter().any(|t| t.key == CSI_STARTUP_TAINT) {
            let kept: Vec<_> = taints
                .into_iter()
                .filter(|t| t.key != CSI_STARTUP_TAINT)
                .collect();
            let patch = json!({"metadata": {"resourceVersion": current.metadata.resource_version},
                               "spec": {"taints": kept}});
            nodes
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Ok(())
    }

    /// Marks the VolumeAttachments on `nodes` attached, as an external-attacher would.
    async fn attach(&self, nodes: &BTreeSet<String>) -> Result<(), kube::Error> {
        let api: Api<VolumeAttachment> = Api::all(self.client.clone());
        for va in api.list(&ListParams::default()).await?.items {
            let on_mine = nodes.contains(&va.spec.node_name);
            let attached = va.status.as_ref().is_some_and(|s| s.attached);
            if on_mine && !attached && va.metadata.deletion_timestamp.is_none() {
                let name = va.metadata.name.unwrap_or_default();
                api.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"status": {"attached": true}})),
                )
                .await?;
            }
        }
        Ok(())
    }
}
