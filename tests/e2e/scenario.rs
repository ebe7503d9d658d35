//! CA-driven scenarios: a control plane (see `harness.rs`), gangscaler serving kwok GPU groups
//! with the cluster view and the audit log on, and the real cluster-autoscaler calling it over
//! `externalgrpc`. A [`Sampler`] follows the GPU nodes and pods once a second so that each
//! scenario can report idle GPU node-minutes; the results go to `target/e2e-results/`, from
//! which `scripts/e2e-results.py` renders `docs/e2e-results.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gangscaler::audit::{DecisionEvent, Event, OutcomeEvent, Record, read_files};
use gangscaler::model::labels;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use rcgen::ExtendedKeyUsagePurpose;

use super::harness::{
    self, Autoscaler, AutoscalerSpec, Cluster, Forwarder, Proc, TestCa, Transport, Versions,
    eventually, free_port, metric_value, write,
};
use super::idle::{Attribution, NodeFacts, NodeLives};
use super::{capi, chart};
use super::{create_dynamic, start_gangscaler, start_gangscaler_with_env};

/// The GPU resource of every group and member.
pub const GPU: &str = "nvidia.com/gpu";
/// The CSI driver of the attachable volumes.
pub const DRIVER: &str = "ebs.csi.aws.com";
/// GPUs per node of every group.
pub const GPUS_PER_NODE: u32 = 8;
/// How long after the request a kwok node is due (a real GPU node takes minutes; idle
/// node-minutes that come from waiting on provisioning scale with it).
pub const PROVISION_DELAY: &str = "15s";

/// One kwok GPU node group (8 × H100 per node, tainted `nvidia.com/gpu`).
#[derive(Debug, Clone)]
pub struct Group {
    /// Its id (and file stem).
    pub id: String,
    /// `maxSize`.
    pub max: u32,
    /// `csi: {ebs.csi.aws.com: N}` when set.
    pub csi_limit: Option<u32>,
    /// Lines inside `backend: {type: kwok, ...}`.
    pub backend: String,
    /// Extra top-level lines of the node-group file.
    pub extra: String,
    /// Backed by a Cluster API MachineDeployment of this name (in [`capi::NAMESPACE`]) instead
    /// of kwok; `backend` is then unused.
    pub capi: bool,
    /// With `capi`: `(reason, message)` every machine of the group fails with.
    pub capi_failure: Option<(String, String)>,
    /// With `capi`: the MachineDeployment registers its Nodes under the reservation taint.
    pub capi_registers_reserved: bool,
}

impl Group {
    /// A group `id` with max `max`, nodes due [`PROVISION_DELAY`] after the request.
    pub fn new(id: &str, max: u32) -> Self {
        Self {
            id: id.to_owned(),
            max,
            csi_limit: None,
            backend: format!("provisionDelay: {PROVISION_DELAY}"),
            extra: String::new(),
            capi: false,
            capi_failure: None,
            capi_registers_reserved: false,
        }
    }

    /// A group `id` with max `max` on the clusterapi backend: MachineDeployment `id`, whose
    /// machines the stand-in provider boots in [`capi::BOOT_DELAY`].
    pub fn capi(id: &str, max: u32) -> Self {
        Self {
            capi: true,
            ..Self::new(id, max)
        }
    }

    /// With `capi`: every machine fails with Cluster API failure `reason` and `message`.
    #[must_use]
    pub fn failing(mut self, reason: &str, message: &str) -> Self {
        self.capi_failure = Some((reason.to_owned(), message.to_owned()));
        self
    }

    /// With `capi`: the MachineDeployment's template carries the reservation taint
    /// (`propagation: OnInitialization`).
    #[must_use]
    pub fn registering_reserved(mut self) -> Self {
        self.capi_registers_reserved = true;
        self
    }

    /// With a CSI attach limit of `n` volumes per node.
    #[must_use]
    pub fn csi(mut self, n: u32) -> Self {
        self.csi_limit = Some(n);
        self
    }

    /// With these kwok backend settings (replacing the 2 s provision delay).
    #[must_use]
    pub fn backend(mut self, settings: &str) -> Self {
        settings.clone_into(&mut self.backend);
        self
    }

    /// With extra lines in the node-group file.
    #[must_use]
    pub fn extra(mut self, lines: &str) -> Self {
        lines.clone_into(&mut self.extra);
        self
    }

    fn yaml(&self) -> String {
        let csi = self
            .csi_limit
            .map(|n| format!("csi: {{{DRIVER}: {n}}}\n"))
            .unwrap_or_default();
        let backend = if self.capi {
            format!(
                "type: clusterapi, machineDeployment: {{namespace: {ns}, name: {id}}}",
                ns = capi::NAMESPACE,
                id = self.id
            )
        } else {
            format!("type: kwok, {}", self.backend)
        };
        format!(
            "id: {id}\nminSize: 0\nmaxSize: {max}\ninstanceType: p5.48xlarge\nregion: local\nzone: local-a\n\
             capacity: {{cpu: \"192\", memory: 2048Gi, ephemeralStorage: 7600Gi, pods: 110}}\n\
             gpu: {{count: {GPUS_PER_NODE}, product: NVIDIA-H100-80GB-HBM3, memory: 81559Mi}}\n\
             taints: [{{key: {GPU}, value: present, effect: NoSchedule}}]\n{csi}\
             backend: {{{backend}}}\n{extra}\n",
            id = self.id,
            max = self.max,
            extra = self.extra,
        )
    }
}

/// What a scenario runs: gangscaler's policy and groups, CA's flags, the transport.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Test name (log folder).
    pub name: String,
    /// `admission.policy`.
    pub policy: String,
    /// The node groups.
    pub groups: Vec<Group>,
    /// The `lifecycle:` settings of provider.yaml.
    pub lifecycle: String,
    /// CA flags replacing the harness defaults, `(name, value)`.
    pub ca_flags: Vec<(String, String)>,
    /// CA release; the row's by default.
    pub ca_version: Option<String>,
    /// mTLS between CA and gangscaler.
    pub mtls: bool,
    /// The scheduler profile, when not the row's.
    pub scheduler_profile: Option<String>,
    /// gangscaler replicas: 1, or 2 with leader election behind a [`Forwarder`] (the
    /// Service CA dials), each writing its own audit log in one directory.
    pub replicas: u32,
    /// Changes the rendered chart objects before they are applied; a test that takes a
    /// permission away sets it.
    pub chart_edit: Option<fn(&mut [serde_json::Value])>,
    /// CA's `grpc_timeout`, when not the harness's 10 s.
    pub grpc_timeout: Option<String>,
    /// `admission.deferral` settings (a YAML flow mapping), when set.
    pub deferral: Option<String>,
    /// `admission.order` (`age` or `fewestMissing`), when set (the soak's `fewest` arm).
    pub order: Option<String>,
}

impl Setup {
    /// `name` under `policy` with `groups`, a fast lifecycle loop, plaintext.
    pub fn new(name: &str, policy: &str, groups: Vec<Group>) -> Self {
        Self {
            name: format!("{name}-{policy}"),
            policy: policy.to_owned(),
            groups,
            lifecycle: "{interval: 500ms, formationTimeout: 5m, attachTimeout: 2m}".to_owned(),
            ca_flags: Vec::new(),
            ca_version: None,
            mtls: false,
            scheduler_profile: None,
            replicas: 1,
            chart_edit: None,
            grpc_timeout: None,
            deferral: None,
            order: None,
        }
    }

    /// With `admission.deferral: settings` (e.g. `{enabled: true, horizon: 1m}`).
    #[must_use]
    pub fn deferral(mut self, settings: &str) -> Self {
        self.deferral = Some(settings.to_owned());
        self
    }

    /// CA's cloud-config sets `grpc_timeout: timeout` (e.g. `1s`).
    #[must_use]
    pub fn grpc_timeout(mut self, timeout: &str) -> Self {
        self.grpc_timeout = Some(timeout.to_owned());
        self
    }

    /// Two gangscaler replicas with leader election (client-go's default timings), CA
    /// reaching the ready one through a forwarder.
    #[must_use]
    pub fn two_replicas(mut self) -> Self {
        self.replicas = 2;
        self
    }

    /// `edit` changes the rendered chart objects before they are applied.
    #[must_use]
    pub fn chart_edit(mut self, edit: fn(&mut [serde_json::Value])) -> Self {
        self.chart_edit = Some(edit);
        self
    }

    /// With CA flag `--name=value`.
    #[must_use]
    pub fn ca_flag(mut self, name: &str, value: &str) -> Self {
        self.ca_flags.push((name.to_owned(), value.to_owned()));
        self
    }

    /// With these `lifecycle:` settings.
    #[must_use]
    pub fn lifecycle(mut self, settings: &str) -> Self {
        settings.clone_into(&mut self.lifecycle);
        self
    }

    /// Run CA release `version` instead of the row's.
    #[must_use]
    pub fn ca_version(mut self, version: &str) -> Self {
        self.ca_version = Some(version.to_owned());
        self
    }

    /// kube-scheduler runs with `profile` (`default` or `no-dra-postfilter`) whatever the row
    /// says.
    #[must_use]
    pub fn scheduler_profile(mut self, profile: &str) -> Self {
        self.scheduler_profile = Some(profile.to_owned());
        self
    }

    /// CA and gangscaler talk mutual TLS.
    #[must_use]
    pub fn mtls(mut self) -> Self {
        self.mtls = true;
        self
    }
}

/// A running scenario. Fields drop in order: CA, gangscaler, the sampler, then the cluster.
pub struct Scenario {
    /// The real cluster-autoscaler.
    pub ca: Autoscaler,
    /// The gangscaler process (with two replicas: the first, which leads first).
    pub gangscaler: Proc,
    /// With two replicas: the second, a standby at first.
    pub standby: Option<Proc>,
    /// With two replicas: the Service in front of them.
    pub forwarder: Option<Forwarder>,
    /// Each replica's `/metrics`, `/readyz` address.
    pub replica_http: Vec<SocketAddr>,
    /// Follows GPU nodes and pods.
    pub sampler: Sampler,
    /// Admin client.
    pub client: kube::Client,
    /// The served gang API, e.g. `scheduling.k8s.io/v1alpha2`.
    pub api: String,
    /// gangscaler's configuration folder.
    pub config: PathBuf,
    /// gangscaler's `/metrics`.
    pub metrics: SocketAddr,
    /// gangscaler's audit log (with two replicas: its template, `audit/{identity}.jsonl`).
    pub audit: PathBuf,
    /// What was started.
    pub setup: Setup,
    /// The chart as applied; gangscaler runs with its ServiceAccount.
    pub chart: chart::Installed,
    gangscaler_starts: u32,
    /// Cluster API and the stand-in provider, when a group is on the clusterapi backend
    /// (stopped before the control plane).
    #[expect(
        dead_code,
        reason = "held for its Drop, which stops Cluster API before the control plane"
    )]
    pub capi: Option<capi::Capi>,
    /// The control plane.
    pub cluster: Cluster,
}

impl Scenario {
    /// Starts the control plane, gangscaler over `setup.groups` and CA, and waits until CA
    /// is healthy and gangscaler's cluster view has synced.
    pub async fn start(setup: Setup) -> Self {
        Self::start_with(setup, async |_, _| {}).await
    }

    /// [`Self::start`], running `before_ca(client, gang_api)` once gangscaler is ready and
    /// before CA starts (so that CA's first loop sees what it creates).
    pub async fn start_with(
        setup: Setup,
        before_ca: impl AsyncFnOnce(&kube::Client, &str),
    ) -> Self {
        let cluster =
            Cluster::start_with_profile(&setup.name, setup.scheduler_profile.as_deref()).await;
        let client = cluster.client().await;
        let api = Versions::load().gang_api;
        let config = cluster.dir.join("gangscaler");
        std::fs::create_dir_all(config.join("nodegroups")).unwrap();
        for g in &setup.groups {
            write(&config.join(format!("nodegroups/{}.yaml", g.id)), &g.yaml());
        }
        let (grpc, http) = (free_port(), free_port());
        let (server, transport) = if setup.mtls {
            let pki = TestCa::new("gangscaler-e2e-grpc-ca");
            let (cert, key) = pki.leaf(
                "gangscaler",
                None,
                &["127.0.0.1", "localhost"],
                ExtendedKeyUsagePurpose::ServerAuth,
            );
            let (ccert, ckey) = pki.leaf(
                "cluster-autoscaler",
                None,
                &[],
                ExtendedKeyUsagePurpose::ClientAuth,
            );
            for (f, text) in [
                ("ca.crt", pki.pem()),
                ("server.crt", cert),
                ("server.key", key),
                ("client.crt", ccert),
                ("client.key", ckey),
            ] {
                write(&config.join(f), &text);
            }
            (
                format!(
                    "server: {{address: \"127.0.0.1:{grpc}\", metricsAddress: \"127.0.0.1:{http}\", \
                     tls: {{certFile: server.crt, keyFile: server.key, clientCaFile: ca.crt}}}}\n"
                ),
                Transport::Mtls {
                    cert: config.join("client.crt"),
                    key: config.join("client.key"),
                    cacert: config.join("ca.crt"),
                },
            )
        } else {
            (
                format!(
                    "server: {{address: \"127.0.0.1:{grpc}\", metricsAddress: \"127.0.0.1:{http}\", plaintext: true}}\n"
                ),
                Transport::Plaintext,
            )
        };
        // gangscaler talks to the API server as the chart's ServiceAccount (a TokenRequest
        // token), not as admin, so every scenario also proves the chart grants what it uses.
        // The kwok state ConfigMap and the leader Lease live where the chart's Role grants
        // them: the release namespace.
        let installed = chart::install(&cluster, setup.chart_edit.unwrap_or(|_| {})).await;
        let kubernetes = format!(
            "kubernetes: {{kubeconfig: {kc}, watch: true, stateNamespace: {ns}, stateConfigMap: {cm}}}\n",
            kc = installed.kubeconfig.display(),
            ns = chart::NAMESPACE,
            cm = chart::STATE_CONFIG_MAP,
        );
        let ha = setup.replicas > 1;
        let (audit, leader_election) = if ha {
            assert!(!setup.mtls, "two replicas run plaintext");
            std::fs::create_dir_all(config.join("audit")).unwrap();
            (
                "audit/{identity}.jsonl",
                format!(
                    "leaderElection: {{enabled: true, namespace: {ns}}}\n",
                    ns = chart::NAMESPACE
                ),
            )
        } else {
            ("audit.jsonl", String::new())
        };
        write(
            &config.join("provider.yaml"),
            &format!(
                "{server}{kubernetes}admission: {{policy: {policy}{order}{deferral}}}\n\
                 audit: {{path: \"{audit}\"}}\nlifecycle: {lifecycle}\n{leader_election}",
                policy = setup.policy,
                order = setup
                    .order
                    .as_ref()
                    .map_or(String::new(), |o| format!(", order: {o}")),
                deferral = setup
                    .deferral
                    .as_ref()
                    .map_or(String::new(), |d| format!(", deferral: {d}")),
                lifecycle = setup.lifecycle,
            ),
        );
        let capi_groups: Vec<&Group> = setup.groups.iter().filter(|g| g.capi).collect();
        let capi = if capi_groups.is_empty() {
            None
        } else {
            let loaded = gangscaler::config::Source::new(&config)
                .load()
                .expect("the scenario's configuration loads");
            let machine_groups: Vec<capi::MachineGroup> = capi_groups
                .iter()
                .map(|g| {
                    let spec = loaded
                        .groups
                        .iter()
                        .find(|s| s.id.as_str() == g.id)
                        .expect("the group is loaded");
                    let mut mg =
                        capi::MachineGroup::from_template(spec, &loaded.provider.gpu_label);
                    if g.capi_registers_reserved {
                        mg = mg.registering_reserved();
                    }
                    match &g.capi_failure {
                        Some((reason, message)) => mg.failing(reason, message),
                        None => mg,
                    }
                })
                .collect();
            Some(capi::Capi::start(&cluster, &client, &machine_groups).await)
        };
        let ready = |addr: SocketAddr| async move {
            harness::http_get(addr, "/readyz")
                .await
                .is_some_and(|(s, _)| s == 200)
                .then_some(())
        };
        let (gangscaler, standby, forwarder, metrics, replica_http) = if ha {
            // Replica a starts first and leads; b stands by. CA dials the forwarder on `grpc`.
            let ports = [(free_port(), free_port()), (free_port(), free_port())];
            let replica = |i: usize| {
                let (g, h) = ports[i];
                let name = ["gangscaler-a", "gangscaler-b"][i];
                let env = [
                    ("POD_NAME", name.to_owned()),
                    ("GANGSCALER__SERVER__ADDRESS", format!("127.0.0.1:{g}")),
                    (
                        "GANGSCALER__SERVER__METRICS_ADDRESS",
                        format!("127.0.0.1:{h}"),
                    ),
                ];
                start_gangscaler_with_env(&cluster, &config, h, name, &env)
            };
            let http_of = |i: usize| SocketAddr::from(([127, 0, 0, 1], ports[i].1));
            let a = replica(0);
            eventually(
                "gangscaler-a ready (leading)",
                Duration::from_secs(60),
                || ready(http_of(0)),
            )
            .await;
            let b = replica(1);
            eventually(
                "gangscaler-b up (standing by)",
                Duration::from_secs(30),
                || async {
                    harness::http_get(http_of(1), "/readyz")
                        .await
                        .filter(|(s, _)| *s == 503)
                        .map(|_| ())
                },
            )
            .await;
            let forwarder = Forwarder::start(
                grpc,
                vec![(ports[0].0, http_of(0)), (ports[1].0, http_of(1))],
            );
            (
                a,
                Some(b),
                Some(forwarder),
                http_of(0),
                vec![http_of(0), http_of(1)],
            )
        } else {
            let gangscaler = start_gangscaler(&cluster, &config, http, "gangscaler-1");
            let metrics = SocketAddr::from(([127, 0, 0, 1], http));
            eventually("gangscaler ready", Duration::from_secs(30), || {
                ready(metrics)
            })
            .await;
            (gangscaler, None, None, metrics, vec![metrics])
        };
        before_ca(&client, &api).await;
        let mut spec = AutoscalerSpec::new(grpc);
        spec.transport = transport;
        if let Some(v) = &setup.ca_version {
            v.clone_into(&mut spec.version);
        }
        if let Some(t) = &setup.grpc_timeout {
            t.clone_into(&mut spec.grpc_timeout);
        }
        for (k, v) in &setup.ca_flags {
            spec = spec.flag(k, v);
        }
        let mut ca = cluster.start_autoscaler("cluster-autoscaler", &spec);
        ca.wait_healthy().await;
        let sampler = Sampler::start(client.clone());
        Self {
            ca,
            gangscaler,
            standby,
            forwarder,
            replica_http,
            sampler,
            client,
            api,
            audit: config.join(audit),
            config,
            metrics,
            setup,
            chart: installed,
            gangscaler_starts: 1,
            capi,
            cluster,
        }
    }

    /// kill -9 gangscaler, as a crash would.
    pub fn kill_gangscaler(&mut self) {
        self.gangscaler.kill9();
    }

    /// Starts gangscaler again on the same configuration (after [`Self::kill_gangscaler`]).
    pub fn restart_gangscaler(&mut self) {
        self.gangscaler_starts += 1;
        let name = format!("gangscaler-{}", self.gangscaler_starts);
        self.gangscaler = start_gangscaler(&self.cluster, &self.config, self.metrics.port(), &name);
    }

    /// The lines of every gangscaler log of this scenario (all starts) that contain `needle`.
    pub fn gangscaler_log_lines(&self, needle: &str) -> Vec<String> {
        let mut out = Vec::new();
        for i in 1..=self.gangscaler_starts {
            let path = self.cluster.dir.join(format!("gangscaler-{i}.log"));
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            out.extend(
                text.lines()
                    .filter(|l| l.contains(needle))
                    .map(str::to_owned),
            );
        }
        out
    }

    /// Rewrites node group `group`'s file (picked up at CA's next Refresh).
    pub fn rewrite_group(&self, group: &Group) {
        write(
            &self.config.join(format!("nodegroups/{}.yaml", group.id)),
            &group.yaml(),
        );
    }

    /// Every record of gangscaler's audit log (every line must parse); with two replicas,
    /// of both replicas' logs, merged by time.
    pub fn records(&self) -> Vec<Record> {
        if self
            .audit
            .to_string_lossy()
            .contains(gangscaler::audit::IDENTITY)
        {
            let files = gangscaler::audit::discover(&self.audit).unwrap();
            let reading = gangscaler::audit::read_merged(&files).unwrap();
            assert!(reading.bad.is_empty(), "bad audit lines: {:?}", reading.bad);
            return reading.records;
        }
        if !self.audit.exists() {
            return Vec::new();
        }
        let reading = read_files(std::slice::from_ref(&self.audit)).unwrap();
        assert!(reading.bad.is_empty(), "bad audit lines: {:?}", reading.bad);
        reading.records
    }

    /// The reservation records with `action` (reserved or released), in order.
    pub fn reservations(
        &self,
        action: gangscaler::audit::ReservationAction,
    ) -> Vec<gangscaler::audit::ReservationEvent> {
        self.records()
            .into_iter()
            .filter_map(|r| match r.event {
                gangscaler::audit::Event::Reservation(e) if e.action == action => Some(e),
                _ => None,
            })
            .collect()
    }

    /// How many reservations were released because their gang formed.
    pub fn released_as_formed(&self) -> usize {
        self.reservations(gangscaler::audit::ReservationAction::Released)
            .iter()
            .filter(|e| e.reason == Some(gangscaler::audit::ReleaseReason::Formed))
            .count()
    }

    /// The accepted and rejected admission decisions for `group`, in order.
    pub fn decisions(&self, group: &str) -> Vec<DecisionEvent> {
        self.records()
            .into_iter()
            .filter_map(|r| match r.event {
                Event::Decision(d) if d.node_group == group => Some(d),
                _ => None,
            })
            .collect()
    }

    /// The outcomes recorded for gang `gang` (by object name).
    pub fn outcomes(&self, gang: &str) -> Vec<OutcomeEvent> {
        self.records()
            .into_iter()
            .filter_map(|r| match r.event {
                Event::Outcome(o)
                    if gang_name(o.gang.as_ref().map(|g| g.name.as_str())) == Some(gang) =>
                {
                    Some(o)
                }
                _ => None,
            })
            .collect()
    }

    /// Waits for an outcome of gang `gang`.
    pub async fn wait_outcome(&self, gang: &str, timeout: Duration) -> OutcomeEvent {
        eventually(&format!("an outcome for gang {gang}"), timeout, || {
            let o = self.outcomes(gang).into_iter().next();
            async move { o }
        })
        .await
    }

    /// Waits for an outcome of gang `gang` on node group `group`.
    pub async fn wait_outcome_in(
        &self,
        gang: &str,
        group: &str,
        timeout: Duration,
    ) -> OutcomeEvent {
        eventually(
            &format!("an outcome for gang {gang} on {group}"),
            timeout,
            || {
                let o = self
                    .outcomes(gang)
                    .into_iter()
                    .find(|o| o.node_group == group);
                async move { o }
            },
        )
        .await
    }

    /// gangscaler's `/metrics` text.
    pub async fn gangscaler_metrics(&self) -> String {
        harness::http_get(self.metrics, "/metrics")
            .await
            .expect("gangscaler /metrics")
            .1
    }

    /// Fails the test if CA counted a failed scale-up on gangscaler's answer or backed a group
    /// off.
    pub async fn assert_ca_never_refused(&self) {
        let ca_metrics = self.ca.metrics_text().await;
        let failed = metric_value(
            &ca_metrics,
            "cluster_autoscaler_failed_scale_ups_total",
            &[("reason", "cloudProviderError")],
        );
        assert!(
            failed.is_none_or(|v| v == 0.0),
            "CA counted no failed scale-up: {failed:?}"
        );
        assert!(
            self.ca
                .lines("Disabling scale-up for node group")
                .is_empty(),
            "CA backed no group off"
        );
    }

    /// Fails the test if CA or gangscaler has exited.
    pub fn assert_running(&mut self) {
        self.ca.assert_running();
        self.gangscaler.assert_running();
    }

    /// Creates a gang per `spec` (its volumes, gang object and members) and returns when it
    /// was created; the sampler's window starts then.
    pub async fn create_gang(&self, spec: &GangSpec) -> Instant {
        create_gang(&self.client, &self.api, spec).await
    }

    /// Waits until at least `min` members (pods) of gang `gang` run; returns their nodes, so
    /// fewer nodes than members means members share a node.
    pub async fn wait_running(&self, gang: &str, min: u32, timeout: Duration) -> BTreeSet<String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        let what = format!("{min} members of gang {gang} Running");
        let running = eventually(&what, timeout, || {
            let pods = pods.clone();
            async move {
                let running = running_members(&pods, gang).await;
                (running.len() >= min as usize).then_some(running)
            }
        })
        .await;
        eprintln!("gang {gang}: members Running on {running:?}");
        running.into_values().collect()
    }

    /// The nodes of gang `gang`'s Running members now.
    pub async fn running(&self, gang: &str) -> BTreeSet<String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        running_members(&pods, gang).await.into_values().collect()
    }

    /// The nodes of group `group` now.
    pub async fn group_nodes(&self, group: &str) -> Vec<Node> {
        let api: Api<Node> = Api::all(self.client.clone());
        api.list(&ListParams::default().labels(&format!("gangscaler.io/node-group={group}")))
            .await
            .unwrap()
            .items
    }

    /// Creates the member pods of `spec` that no longer exist, as the gang's Job would after
    /// a preemption; returns how many.
    pub async fn recreate_missing_members(&self, spec: &GangSpec) -> u32 {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        let mut created = 0;
        for m in 0..spec.members {
            let name = format!("{}-{m}", spec.name);
            if pods.get_opt(&name).await.unwrap().is_none() {
                create_dynamic(&self.client, spec.member(&self.api, m)).await;
                created += 1;
            }
        }
        created
    }

    /// Deletes every member pod of gang `gang` (the job finished).
    pub async fn delete_members(&self, gang: &str) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        for p in pods.list(&ListParams::default()).await.unwrap().items {
            let name = p.metadata.name.unwrap_or_default();
            if member_of(&name, gang) {
                let _ = pods
                    .delete(&name, &kube::api::DeleteParams::default().grace_period(0))
                    .await;
            }
        }
    }
}

/// `gangscaler audit report --output json <path>` (a log file or a directory of them), parsed.
pub fn audit_report(path: &Path) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gangscaler"))
        .args(["audit", "report", "--output", "json"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "audit report of {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Creates a gang per `spec` in gang API `api`: its volumes, gang object and members. Returns
/// when it was created.
pub async fn create_gang(client: &kube::Client, api: &str, spec: &GangSpec) -> Instant {
    for m in 0..spec.members {
        for v in 0..spec.volumes {
            let driver = spec.volume_driver.as_deref().unwrap_or(DRIVER);
            create_volume(client, &format!("{}-{m}-v{v}", spec.name), driver).await;
        }
    }
    super::create_gang_object(
        client,
        api,
        &spec.name,
        spec.min(),
        spec.priority_class.as_deref(),
    )
    .await;
    for m in 0..spec.members {
        create_dynamic(client, spec.member(api, m)).await;
    }
    Instant::now()
}

/// The gang object name of a gang id name (`<workload>/<podGroup>` on v1alpha1).
fn gang_name(name: Option<&str>) -> Option<&str> {
    name.and_then(|n| n.split('/').next())
}

fn member_of(pod: &str, gang: &str) -> bool {
    pod.strip_prefix(gang)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|i| i.chars().all(|c| c.is_ascii_digit()))
}

/// Gang `gang`'s members in phase Running now, by pod name, with their nodes.
async fn running_members(pods: &Api<Pod>, gang: &str) -> BTreeMap<String, String> {
    let Ok(list) = pods.list(&ListParams::default()).await else {
        return BTreeMap::new();
    };
    list.items
        .into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| {
            let name = p.metadata.name.filter(|n| member_of(n, gang))?;
            Some((name, p.spec?.node_name?))
        })
        .collect()
}

/// A gang to create: `members` pods named `<name>-<i>`, each asking `gpus` GPUs and mounting
/// `volumes` pre-bound CSI volumes.
#[derive(Debug, Clone)]
pub struct GangSpec {
    /// Gang object name.
    pub name: String,
    /// Member pods.
    pub members: u32,
    /// minCount (all members by default).
    pub min_count: Option<u32>,
    /// GPUs per member.
    pub gpus: u32,
    /// Attachable volumes per member.
    pub volumes: u32,
    /// Their CSI driver (ebs.csi.aws.com by default).
    pub volume_driver: Option<String>,
    /// `priorityClassName`.
    pub priority_class: Option<String>,
    /// Extra resource requests (and limits) of each member, e.g. an RDMA device.
    pub requests: Vec<(String, String)>,
    /// Extra fields merged into each member's spec.
    pub extra: serde_json::Value,
}

impl GangSpec {
    /// `members` whole-node members (8 GPUs each), no volumes.
    pub fn new(name: &str, members: u32) -> Self {
        Self {
            name: name.to_owned(),
            members,
            min_count: None,
            gpus: GPUS_PER_NODE,
            volumes: 0,
            volume_driver: None,
            priority_class: None,
            requests: Vec::new(),
            extra: serde_json::json!({}),
        }
    }

    /// Each member asks `gpus` GPUs.
    #[must_use]
    pub fn gpus(mut self, gpus: u32) -> Self {
        self.gpus = gpus;
        self
    }

    /// Each member mounts `n` attachable volumes.
    #[must_use]
    pub fn volumes(mut self, n: u32) -> Self {
        self.volumes = n;
        self
    }

    /// The volumes use CSI driver `driver`.
    #[must_use]
    pub fn volume_driver(mut self, driver: &str) -> Self {
        self.volume_driver = Some(driver.to_owned());
        self
    }

    /// Each member also asks `quantity` of extended resource `resource`.
    #[must_use]
    pub fn request(mut self, resource: &str, quantity: &str) -> Self {
        self.requests
            .push((resource.to_owned(), quantity.to_owned()));
        self
    }

    /// Members use priority class `class`.
    #[must_use]
    pub fn priority(mut self, class: &str) -> Self {
        self.priority_class = Some(class.to_owned());
        self
    }

    /// Extra fields merged into each member's spec.
    #[must_use]
    pub fn extra(mut self, extra: serde_json::Value) -> Self {
        self.extra = extra;
        self
    }

    pub fn min(&self) -> u32 {
        self.min_count.unwrap_or(self.members)
    }

    /// Member `i` as a Pod object.
    pub fn member(&self, api: &str, i: u32) -> serde_json::Value {
        let link = if api.ends_with("/v1alpha1") {
            serde_json::json!({"workloadRef": {"name": self.name, "podGroup": "workers"}})
        } else {
            serde_json::json!({"schedulingGroup": {"podGroupName": self.name}})
        };
        let mut container = serde_json::json!({"name": "train", "image": "example.invalid/train:1",
            "resources": {"requests": {"cpu": "4", GPU: self.gpus.to_string()},
                          "limits": {GPU: self.gpus.to_string()}}});
        for (resource, quantity) in &self.requests {
            container["resources"]["requests"][resource] = serde_json::json!(quantity);
            container["resources"]["limits"][resource] = serde_json::json!(quantity);
        }
        let mut spec = serde_json::json!({
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
        });
        if self.volumes > 0 {
            let names: Vec<String> = (0..self.volumes)
                .map(|v| format!("{}-{i}-v{v}", self.name))
                .collect();
            container["volumeMounts"] = names
                .iter()
                .enumerate()
                .map(|(k, n)| serde_json::json!({"name": format!("v{k}"), "mountPath": format!("/data/{n}")}))
                .collect();
            spec["volumes"] = names
                .iter()
                .enumerate()
                .map(|(k, n)| serde_json::json!({"name": format!("v{k}"), "persistentVolumeClaim": {"claimName": n}}))
                .collect();
        }
        if let Some(class) = &self.priority_class {
            spec["priorityClassName"] = serde_json::json!(class);
        }
        spec["containers"] = serde_json::json!([container]);
        let obj = spec.as_object_mut().unwrap();
        obj.extend(link.as_object().unwrap().clone());
        obj.extend(self.extra.as_object().unwrap().clone());
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{}-{i}", self.name), "namespace": "default"}, "spec": spec})
    }
}

/// A PersistentVolume of `driver` and a claim pre-bound to it, both named `name` (there is no
/// provisioner in the test cluster). The volume names its claim too: a volume bound only from
/// the claim's side is free to the PV controller until that claim is processed, and it once
/// bound such a volume to the chart's audit claim (which has no storage class here either).
pub async fn create_volume(client: &kube::Client, name: &str, driver: &str) {
    create_dynamic(
        client,
        serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                "claimRef": {"namespace": "default", "name": name},
                "csi": {"driver": driver, "volumeHandle": format!("vol-{name}")}}
        }),
    )
    .await;
    create_dynamic(
        client,
        serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": name,
                "resources": {"requests": {"storage": "10Gi"}}}
        }),
    )
    .await;
}

/// A PriorityClass `name` with `value`.
pub async fn create_priority_class(client: &kube::Client, name: &str, value: i32) {
    create_dynamic(
        client,
        serde_json::json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value}),
    )
    .await;
}

/// What the sampler has seen since its window began.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Seconds covered.
    pub seconds: f64,
    /// Σ over GPU nodes of the seconds they existed with no GPU pod bound.
    pub idle_node_seconds: f64,
    /// The same weighted by GPUs per node.
    pub idle_gpu_seconds: f64,
    /// Most GPU nodes seen at once.
    pub max_nodes: usize,
    /// GPU nodes seen in the window.
    pub seen: BTreeSet<String>,
    /// GPU nodes seen and then gone (scaled down or deleted).
    pub removed: BTreeSet<String>,
    /// The idle node time by cause (`idle.rs`).
    pub attribution: Attribution,
    /// Every GPU node's life: facts, busy stretches by gang (`idle.rs`).
    pub lives: NodeLives,
}

impl Sample {
    /// Idle GPU node-minutes.
    pub fn idle_node_minutes(&self) -> f64 {
        self.idle_node_seconds / 60.0
    }
}

/// Unix time now, milliseconds.
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Lists the GPU nodes and pods once a second and integrates idle GPU node time.
pub struct Sampler {
    state: Arc<Mutex<(Sample, Option<Instant>)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(client: kube::Client) -> Self {
        let state = Arc::new(Mutex::new((Sample::default(), None::<Instant>)));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            let nodes: Api<Node> = Api::all(client.clone());
            let pods: Api<Pod> = Api::all(client);
            let mut last = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let (Ok(n), Ok(p)) = (
                    nodes
                        .list(&ListParams::default().labels("gangscaler.io/node-group"))
                        .await,
                    pods.list(&ListParams::default()).await,
                ) else {
                    continue;
                };
                let now = Instant::now();
                let dt = now.duration_since(last).as_secs_f64();
                last = now;
                // Node → the first gang (by name) of the GPU pods bound to it; a member pod
                // is `<gang>-<i>`.
                let mut busy_by: BTreeMap<String, String> = BTreeMap::new();
                for (node, pod) in p
                    .items
                    .iter()
                    .filter(|pod| {
                        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                        !matches!(phase, Some("Succeeded" | "Failed"))
                            && pod.metadata.deletion_timestamp.is_none()
                            && pod.spec.as_ref().is_some_and(|s| {
                                s.containers.iter().any(|c| {
                                    c.resources
                                        .as_ref()
                                        .and_then(|r| r.requests.as_ref())
                                        .is_some_and(|r| r.contains_key(GPU))
                                })
                            })
                    })
                    .filter_map(|pod| {
                        let node = pod.spec.as_ref()?.node_name.clone()?;
                        let name = pod.metadata.name.as_deref()?;
                        let gang = name.rsplit_once('-').map_or(name, |(g, _)| g);
                        Some((node, gang.to_owned()))
                    })
                {
                    let first = busy_by.entry(node).or_insert_with(|| pod.clone());
                    if pod < *first {
                        *first = pod;
                    }
                }
                let busy: BTreeSet<String> = busy_by.keys().cloned().collect();
                let facts: BTreeMap<String, NodeFacts> = n
                    .items
                    .iter()
                    .filter_map(|node| {
                        let gpus = node
                            .status
                            .as_ref()?
                            .capacity
                            .as_ref()?
                            .get(GPU)?
                            .0
                            .parse::<f64>()
                            .ok()?;
                        let note =
                            |key: &str| node.metadata.annotations.as_ref()?.get(key).cloned();
                        let facts = NodeFacts {
                            created_ms: node
                                .metadata
                                .creation_timestamp
                                .as_ref()
                                .map(|t| t.0.as_millisecond()),
                            requested_ms: note(labels::REQUESTED_AT).and_then(|v| v.parse().ok()),
                            requested_for: note(labels::REQUESTED_FOR),
                            gpus,
                        };
                        Some((node.metadata.name.clone()?, facts))
                    })
                    .collect();
                let current: BTreeMap<String, f64> = facts
                    .iter()
                    .map(|(name, f)| (name.clone(), f.gpus))
                    .collect();
                let mut guard = shared.lock().unwrap();
                let (sample, since) = &mut *guard;
                if since.is_none() {
                    continue;
                }
                sample.seconds += dt;
                sample
                    .attribution
                    .observe(dt, current.keys().map(String::as_str), &busy);
                sample.lives.observe(unix_ms(), &facts, &busy_by);
                for (name, gpus) in &current {
                    if !busy.contains(name) {
                        sample.idle_node_seconds += dt;
                        sample.idle_gpu_seconds += dt * gpus;
                    }
                }
                for gone in sample.seen.difference(&current.keys().cloned().collect()) {
                    sample.removed.insert(gone.clone());
                }
                sample.seen.extend(current.keys().cloned());
                sample.max_nodes = sample.max_nodes.max(current.len());
            }
        });
        Self { state, task }
    }

    /// Starts (or restarts) the window now.
    pub fn begin(&self) {
        *self.state.lock().unwrap() = (Sample::default(), Some(Instant::now()));
    }

    /// What the window holds so far.
    pub fn sample(&self) -> Sample {
        self.state.lock().unwrap().0.clone()
    }
}

impl Scenario {
    /// The lines of gangscaler's logs (every start) in which the API server refused it a
    /// permission.
    pub fn forbidden_lines(&self) -> Vec<String> {
        (1..=self.gangscaler_starts)
            .map(|n| self.cluster.dir.join(format!("gangscaler-{n}.log")))
            .filter_map(|log| std::fs::read_to_string(log).ok())
            .flat_map(|text| {
                text.lines()
                    .filter(|l| l.contains("is forbidden"))
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

impl Drop for Scenario {
    /// With the chart's RBAC as rendered, a scenario that passed must not have been refused
    /// anything either: some refusals (an Event, a protection patch) only log a warning and
    /// would otherwise go unnoticed.
    fn drop(&mut self) {
        if std::thread::panicking() || self.setup.chart_edit.is_some() {
            return;
        }
        let refused = self.forbidden_lines();
        assert!(
            refused.is_empty(),
            "the chart's ServiceAccount lacks a permission gangscaler used: {refused:#?}"
        );
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One row of the results table: a scenario under one policy on one version row.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// Scenario, e.g. `whole gang from zero`.
    pub scenario: String,
    /// Admission policy.
    pub policy: String,
    /// Kubernetes minor of the control plane.
    pub k8s: String,
    /// CA release.
    pub ca: String,
    /// What CA asked, e.g. `0->1` (each scale-up it planned for the group, in order).
    pub ca_asks: Vec<String>,
    /// Nodes gangscaler added per IncreaseSize (0 for a rejection), in order.
    pub applied: Vec<u32>,
    /// Gang created → every member Running, seconds; `None` if it never formed in the window.
    pub formed_s: Option<f64>,
    /// The window the idle figure covers, seconds.
    pub window_s: f64,
    /// Idle GPU node-minutes over the window.
    pub idle_gpu_node_min: f64,
    /// The same by cause, node-minutes (`idle.rs`; raw data, not rendered).
    pub idle_causes: serde_json::Value,
    /// Outcome (audit outcome, or what the scenario saw).
    pub outcome: String,
    /// One line of what else was measured.
    pub note: String,
}

impl Row {
    /// A row for `scenario` of `s`, with CA's asks and gangscaler's applied deltas for
    /// `group` read from their logs, and the sampler's window.
    pub fn new(s: &Scenario, scenario: &str, group: &str, formed_s: Option<f64>) -> Self {
        let sample = s.sampler.sample();
        Self {
            scenario: scenario.to_owned(),
            policy: s.setup.policy.clone(),
            k8s: Versions::load().minor,
            ca: s.ca.version.clone(),
            ca_asks: s.ca.asks_of(group),
            applied: s.decisions(group).iter().map(|d| d.applied_delta).collect(),
            formed_s,
            window_s: sample.seconds,
            idle_gpu_node_min: sample.idle_node_minutes(),
            idle_causes: sample.attribution.causes().minutes_json(),
            outcome: String::new(),
            note: String::new(),
        }
    }

    /// Sets the outcome.
    #[must_use]
    pub fn outcome(mut self, outcome: impl Into<String>) -> Self {
        self.outcome = outcome.into();
        self
    }

    /// Sets the note.
    #[must_use]
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    /// Appends the row to `$E2E_RESULTS` (default `target/e2e-results/<minor>.jsonl`) and
    /// prints it.
    pub fn record(&self) {
        let path = std::env::var_os("E2E_RESULTS").map_or_else(
            || {
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join(format!("target/e2e-results/{}.jsonl", self.k8s))
            },
            PathBuf::from,
        );
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        let line = serde_json::to_string(self).unwrap();
        eprintln!("result: {line}");
        append_line(&path, &line);
    }
}

fn append_line(path: &Path, line: &str) {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    writeln!(f, "{line}").unwrap();
}
