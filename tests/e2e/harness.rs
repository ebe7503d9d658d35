//! A local control plane for end-to-end tests: etcd, kube-apiserver, kube-scheduler,
//! kube-controller-manager and kwok, built from the Go module proxy by `tests/e2e/build.sh`,
//! all listening on 127.0.0.1, with their own PKI and kubeconfig; and the real
//! cluster-autoscaler, built by the same script from `../shared/cluster-autoscaler`, started
//! against it by [`Cluster::start_autoscaler`]. Every process is started and stopped here by
//! pid; all logs go to one folder, named on failure.
//!
//! A Kubernetes minor is a row in `tests/e2e/versions.env`: the gang API, feature gates, the CA
//! release and the scheduler profile come from that row.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test harness: abort loudly"
)]

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{ExtendedKeyUsagePurpose, KeyPair};

pub use crate::common::pki::TestCa;

/// One row of `versions.env`.
#[derive(Debug)]
pub struct Versions {
    /// e.g. `1.36`.
    pub minor: String,
    /// e.g. `v1.36.2`.
    pub k8s: String,
    /// The gang-scheduling API group/version served, e.g. `scheduling.k8s.io/v1alpha2`.
    pub gang_api: String,
    /// Feature gates for every component, e.g. `GenericWorkload=true,GangScheduling=true`.
    pub gates: String,
    /// The cluster-autoscaler release run against this row, e.g. `1.36.1`.
    pub ca: String,
    /// The CA release that checks the legacy wire, e.g. `1.34.5`.
    pub ca_legacy: String,
    /// `default`, or `no-dra-postfilter` (the default profile with DynamicResources disabled
    /// at `podGroupPostFilter` only).
    pub scheduler_profile: String,
    /// `v3.6.14`.
    pub etcd: String,
    /// `v0.8.0`.
    pub kwok: String,
    /// `v3.22.0`.
    pub helm: String,
    /// The Cluster API core release, e.g. `v1.14.2`.
    pub capi: String,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl Versions {
    /// Reads the row for `E2E_K8S_MINOR` (default 1.36).
    pub fn load() -> Self {
        let minor = std::env::var("E2E_K8S_MINOR").unwrap_or_else(|_| "1.36".to_owned());
        let text = fs::read_to_string(repo().join("tests/e2e/versions.env")).expect("versions.env");
        let var = |name: &str| -> String {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .map(|v| v.trim_matches('"').to_owned())
                .unwrap_or_else(|| panic!("{name} missing from versions.env"))
        };
        let row = var(&format!("K8S_{}", minor.replace('.', "_")));
        let cols: Vec<&str> = row.split_whitespace().collect();
        Self {
            minor,
            k8s: cols[1].to_owned(),
            gang_api: cols[3].to_owned(),
            gates: cols[4].to_owned(),
            ca: cols[5].to_owned(),
            ca_legacy: var("CA_LEGACY"),
            scheduler_profile: cols[6].to_owned(),
            etcd: var("ETCD_VERSION"),
            kwok: var("KWOK_VERSION"),
            helm: var("HELM_VERSION"),
            capi: var("CAPI_VERSION"),
        }
    }

    fn cache() -> PathBuf {
        let home = std::env::var("GANGSCALER_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|_| {
                PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/gangscaler")
            });
        home.join("e2e")
    }

    fn bin(&self, part: &str, name: &str) -> PathBuf {
        let version = match part {
            "k8s" => &self.k8s,
            "etcd" => &self.etcd,
            _ => &self.kwok,
        };
        self.cached(&format!("{part}-{version}"), name)
    }

    /// The helm binary (renders `charts/gangscaler`).
    pub fn helm_bin(&self) -> PathBuf {
        self.cached(&format!("helm-{}", self.helm), "helm")
    }

    /// The Cluster API core manager.
    pub fn capi_bin(&self) -> PathBuf {
        self.cached(&format!("capi-{}", self.capi), "manager")
    }

    /// The cluster-autoscaler binary of release `version`.
    pub fn ca_bin(&self, version: &str) -> PathBuf {
        self.cached(&format!("ca-{version}"), "cluster-autoscaler")
    }

    fn cached(&self, dir: &str, name: &str) -> PathBuf {
        let p = Self::cache().join(dir).join(name);
        let legacy = if dir == format!("ca-{}", self.ca_legacy) {
            " --legacy-ca"
        } else {
            ""
        };
        assert!(
            p.is_file(),
            "{} is missing: run tests/e2e/build.sh {}{legacy} first",
            p.display(),
            self.minor
        );
        p
    }
}

/// A free port on 127.0.0.1 for a server this harness starts.
///
/// Ports come from 20000-31999, below Linux's ephemeral range (32768-60999), so a port we
/// checked and released cannot be taken meanwhile as the source port of some outgoing
/// connection (which made etcd fail with "address already in use"). Ports handed out once in
/// this process are never handed out again.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(given.len());
        let port = 20000 + u16::try_from(h.finish() % 12000).unwrap();
        if given.contains(&port) || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        given.insert(port);
        return port;
    }
}

/// A child process stopped by pid on drop: SIGTERM, then SIGKILL after a grace period.
pub struct Proc {
    name: String,
    child: Child,
}

impl Proc {
    /// Starts `cmd` with stdout and stderr in `<logs>/<name>.log`.
    pub fn spawn_logged(name: &str, logs: &Path, mut cmd: Command) -> Self {
        let log = fs::File::create(logs.join(format!("{name}.log"))).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Self {
            name: name.to_owned(),
            child,
        }
    }

    /// Its process id (to read `/proc/<pid>`).
    #[allow(
        dead_code,
        reason = "the soak run reads gangscaler's /proc; the e2e tests do not. An allow, not \
                  an expect: this file is compiled into both crates and only e2e leaves it unused"
    )]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails the test if the process has exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited early: {status}", self.name);
        }
    }

    /// SIGKILL now, like a crash.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, wait up to 10 s, then SIGKILL.
    pub fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill9();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A running control plane.
pub struct Cluster {
    /// All files of this run: PKI, kubeconfig, logs.
    pub dir: PathBuf,
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    procs: Vec<Proc>,
    /// kube-apiserver's binary and flags, to start it again on the same port and etcd.
    apiserver: (PathBuf, Vec<String>),
    /// How many times kube-apiserver was started (names its log files).
    apiserver_starts: u32,
}

struct Pki {
    ca: String,
    serving: (String, String),
    admin: (String, String),
    /// The client certificate kube-apiserver presents to admission webhooks.
    webhook_client: (String, String),
    sa_key: String,
    sa_pub: String,
}

fn pki() -> Pki {
    let ca = TestCa::new("gangscaler-e2e-ca");
    let serving = ca.leaf(
        "kube-apiserver",
        None,
        &["127.0.0.1", "localhost", "kubernetes.default.svc"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let admin = ca.leaf(
        "admin",
        Some("system:masters"),
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let webhook_client = ca.leaf(
        "kube-apiserver-webhook-client",
        None,
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let sa = KeyPair::generate().unwrap();
    Pki {
        ca: ca.pem(),
        serving,
        admin,
        webhook_client,
        sa_key: sa.serialize_pem(),
        sa_pub: sa.public_key_pem(),
    }
}

/// Writes `text` to `path`, naming the file on failure.
pub fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

fn kwok_stages(version: &str) -> String {
    let out = Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .expect("go env");
    let modcache = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let base = PathBuf::from(modcache).join(format!("sigs.k8s.io/kwok@{version}/kustomize/stage"));
    let files = [
        "node/fast/node-initialize.yaml",
        "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
        "pod/fast/pod-ready.yaml",
        "pod/fast/pod-complete.yaml",
        "pod/fast/pod-delete.yaml",
    ];
    files
        .iter()
        .map(|f| {
            fs::read_to_string(base.join(f))
                .unwrap_or_else(|e| panic!("reading kwok stage {f} from {}: {e}", base.display()))
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

impl Cluster {
    /// Starts etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok, and
    /// waits until the API server is ready and the `default` ServiceAccount exists.
    pub async fn start(test: &str) -> Self {
        Self::start_with_profile(test, None).await
    }

    /// [`Cluster::start`] with the scheduler profile `profile` (`default` or `no-dra-postfilter`) instead
    /// of the row's.
    pub async fn start_with_profile(test: &str, profile: Option<&str>) -> Self {
        let mut versions = Versions::load();
        if let Some(p) = profile {
            p.clone_into(&mut versions.scheduler_profile);
        }
        let root = repo().join("target/e2e-logs");
        fs::create_dir_all(&root).unwrap();
        let dir = root.join(format!("{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let p = pki();
        write(&dir.join("ca.crt"), &p.ca);
        write(&dir.join("apiserver.crt"), &p.serving.0);
        write(&dir.join("apiserver.key"), &p.serving.1);
        write(&dir.join("admin.crt"), &p.admin.0);
        write(&dir.join("admin.key"), &p.admin.1);
        // kube-apiserver presents this certificate to every admission webhook (users entry
        // `*`), so a webhook can require mutual TLS with `ca.crt` as its client CA.
        write(&dir.join("webhook-client.crt"), &p.webhook_client.0);
        write(&dir.join("webhook-client.key"), &p.webhook_client.1);
        write(
            &dir.join("webhook-kubeconfig"),
            &format!(
                "apiVersion: v1\nkind: Config\nusers:\n- name: \"*\"\n  user:\n    client-certificate: {}\n    client-key: {}\n",
                dir.join("webhook-client.crt").display(),
                dir.join("webhook-client.key").display(),
            ),
        );
        write(
            &dir.join("admission.yaml"),
            &format!(
                "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: MutatingAdmissionWebhook\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: {}\n",
                dir.join("webhook-kubeconfig").display(),
            ),
        );
        write(&dir.join("sa.key"), &p.sa_key);
        write(&dir.join("sa.pub"), &p.sa_pub);
        let (etcd_client, etcd_peer, api_port) = (free_port(), free_port(), free_port());
        let server = format!("https://127.0.0.1:{api_port}");
        let kubeconfig = dir.join("kubeconfig");
        write(
            &kubeconfig,
            &format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: admin\n  user:\n    client-certificate: {cert}\n    client-key: {key}\ncontexts:\n- name: e2e\n  context: {{cluster: e2e, user: admin}}\ncurrent-context: e2e\n",
                ca = dir.join("ca.crt").display(),
                cert = dir.join("admin.crt").display(),
                key = dir.join("admin.key").display(),
            ),
        );
        let mut cluster = Self {
            dir: dir.clone(),
            kubeconfig: kubeconfig.clone(),
            procs: Vec::new(),
            apiserver: (PathBuf::new(), Vec::new()),
            apiserver_starts: 0,
        };

        let mut etcd = Command::new(versions.bin("etcd", "etcd"));
        etcd.args([
            "--name=e2e",
            &format!("--data-dir={}", dir.join("etcd").display()),
            &format!("--listen-client-urls=http://127.0.0.1:{etcd_client}"),
            &format!("--advertise-client-urls=http://127.0.0.1:{etcd_client}"),
            &format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
            &format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
            &format!("--initial-cluster=e2e=http://127.0.0.1:{etcd_peer}"),
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]);
        cluster.procs.push(Proc::spawn_logged("etcd", &dir, etcd));

        let gates = versions.gates.clone();
        let d = |f: &str| dir.join(f).display().to_string();
        let api_args: Vec<String> = [
            &format!("--etcd-servers=http://127.0.0.1:{etcd_client}"),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            &format!("--secure-port={api_port}"),
            &format!("--tls-cert-file={}", d("apiserver.crt")),
            &format!("--tls-private-key-file={}", d("apiserver.key")),
            &format!("--client-ca-file={}", d("ca.crt")),
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            &format!("--service-account-key-file={}", d("sa.pub")),
            &format!("--service-account-signing-key-file={}", d("sa.key")),
            "--service-cluster-ip-range=10.96.0.0/16",
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false",
            &format!("--feature-gates={gates}"),
            &format!("--runtime-config={}=true", versions.gang_api),
            &format!("--admission-control-config-file={}", d("admission.yaml")),
            "--v=1",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        cluster.apiserver = (versions.bin("k8s", "kube-apiserver"), api_args);
        cluster.spawn_apiserver();
        cluster.wait_ready().await;

        let kc = kubeconfig.display().to_string();
        let mut sched = Command::new(versions.bin("k8s", "kube-scheduler"));
        sched.args([
            &format!("--authentication-kubeconfig={kc}"),
            &format!("--authorization-kubeconfig={kc}"),
            "--bind-address=127.0.0.1",
            &format!("--secure-port={}", free_port()),
            &format!("--feature-gates={gates}"),
            "--v=2",
        ]);
        match versions.scheduler_profile.as_str() {
            "default" => {
                sched.args([&format!("--kubeconfig={kc}"), "--leader-elect=false"]);
            }
            "no-dra-postfilter" => {
                // kube-scheduler 1.37+: DynamicResources' PodGroupPostFilter fails ("not
                // found") in a gang's cycle where no member reached its PreFilter, which is
                // every cycle while the cluster has no Node (the e2e clusters start empty), so
                // the members get SchedulerError, not Unschedulable, and CA ignores them. Only
                // that extension point is disabled; DRA's PreFilter, Filter and Score stay on.
                // With --config the kubeconfig and leader-election flags are ignored, so they
                // go in the file.
                write(
                    &dir.join("scheduler.yaml"),
                    &format!(
                        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
                         clientConnection: {{kubeconfig: {kc}}}\nleaderElection: {{leaderElect: false}}\n\
                         profiles:\n- schedulerName: default-scheduler\n  plugins:\n    podGroupPostFilter:\n      \
                         disabled: [{{name: DynamicResources}}]\n"
                    ),
                );
                sched.arg(format!("--config={}", d("scheduler.yaml")));
            }
            other => panic!("unknown scheduler-profile {other:?} in versions.env"),
        }
        cluster
            .procs
            .push(Proc::spawn_logged("kube-scheduler", &dir, sched));

        let mut kcm = Command::new(versions.bin("k8s", "kube-controller-manager"));
        kcm.args([
            &format!("--kubeconfig={kc}"),
            &format!("--authentication-kubeconfig={kc}"),
            &format!("--authorization-kubeconfig={kc}"),
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            &format!("--secure-port={}", free_port()),
            &format!("--service-account-private-key-file={}", d("sa.key")),
            &format!("--root-ca-file={}", d("ca.crt")),
            "--use-service-account-credentials=false",
            &format!("--feature-gates={gates}"),
            "--v=1",
        ]);
        cluster
            .procs
            .push(Proc::spawn_logged("kube-controller-manager", &dir, kcm));

        write(&dir.join("kwok-stages.yaml"), &kwok_stages(&versions.kwok));
        let mut kwok = Command::new(versions.bin("kwok", "kwok"));
        kwok.args([
            &format!("--kubeconfig={kc}"),
            &format!("--config={}", d("kwok-stages.yaml")),
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=127.0.0.1",
            "--cidr=10.244.0.0/16",
            "--node-lease-duration-seconds=40",
            &format!("--server-address=127.0.0.1:{}", free_port()),
        ]);
        cluster.procs.push(Proc::spawn_logged("kwok", &dir, kwok));
        cluster.wait_default_service_account().await;
        cluster
    }

    /// Starts kube-apiserver with the flags of the first start (same port, same etcd); its
    /// log is `kube-apiserver.log`, then `kube-apiserver-2.log`, ...
    fn spawn_apiserver(&mut self) {
        self.apiserver_starts += 1;
        let name = match self.apiserver_starts {
            1 => "kube-apiserver".to_owned(),
            n => format!("kube-apiserver-{n}"),
        };
        let mut cmd = Command::new(&self.apiserver.0);
        cmd.args(&self.apiserver.1);
        self.procs.push(Proc::spawn_logged(&name, &self.dir, cmd));
    }

    /// Stops kube-apiserver (by pid: SIGTERM, then SIGKILL after 10 s), leaving etcd and every
    /// other component running, like an API-server outage.
    pub fn stop_apiserver(&mut self) {
        let i = self
            .procs
            .iter()
            .position(|p| p.name.starts_with("kube-apiserver"))
            .expect("kube-apiserver is running");
        let mut api = self.procs.remove(i);
        api.stop();
    }

    /// Starts kube-apiserver again on the same port and etcd, and waits until it answers.
    pub async fn restart_apiserver(&mut self) {
        assert!(
            !self
                .procs
                .iter()
                .any(|p| p.name.starts_with("kube-apiserver")),
            "kube-apiserver is already running"
        );
        self.spawn_apiserver();
        self.wait_ready().await;
    }

    /// An admin client.
    pub async fn client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .unwrap();
        kube::Client::try_from(config).unwrap()
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            for p in &mut self.procs {
                p.assert_running();
            }
            if let Ok(c) = tokio::time::timeout(Duration::from_secs(2), self.client()).await
                && c.apiserver_version().await.is_ok()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready; logs in {}",
                self.dir.display()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn wait_default_service_account(&mut self) {
        use k8s_openapi::api::core::v1::ServiceAccount;
        let api: kube::Api<ServiceAccount> = kube::Api::namespaced(self.client().await, "default");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !matches!(api.get_opt("default").await, Ok(Some(_))) {
            for p in &mut self.procs {
                p.assert_running();
            }
            assert!(
                Instant::now() < deadline,
                "no default ServiceAccount; logs in {}",
                self.dir.display()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Stop in reverse start order: kwok, controllers, apiserver, etcd.
        while let Some(mut p) = self.procs.pop() {
            p.stop();
        }
        if std::thread::panicking() || std::env::var_os("E2E_KEEP_LOGS").is_some() {
            eprintln!("e2e logs kept in {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Polls `check` every 200 ms until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How CA reaches gangscaler: plaintext, or mutual TLS with these PEM files.
#[derive(Debug, Clone)]
pub enum Transport {
    /// `address` only: CA dials without TLS.
    Plaintext,
    /// CA presents `cert`/`key` and verifies the server against `cacert`.
    Mtls {
        /// Client certificate.
        cert: PathBuf,
        /// Client key.
        key: PathBuf,
        /// CA bundle that signed gangscaler's serving certificate.
        cacert: PathBuf,
    },
}

/// What to start CA with.
#[derive(Debug, Clone)]
pub struct AutoscalerSpec {
    /// CA release (a `ca-<version>` folder in the cache).
    pub version: String,
    /// gangscaler's gRPC port on 127.0.0.1.
    pub grpc_port: u16,
    /// Plaintext or mTLS.
    pub transport: Transport,
    /// Flags that replace or add to the defaults, as `--name=value`.
    pub flags: Vec<String>,
    /// The cloud-config's `grpc_timeout` (CA's deadline on each call).
    pub grpc_timeout: String,
}

impl AutoscalerSpec {
    /// The row's CA over plaintext to `grpc_port`.
    pub fn new(grpc_port: u16) -> Self {
        Self {
            version: Versions::load().ca,
            grpc_port,
            transport: Transport::Plaintext,
            flags: Vec::new(),
            grpc_timeout: "10s".to_owned(),
        }
    }

    /// Sets `--name=value` (replacing the default, if any).
    #[must_use]
    pub fn flag(mut self, name: &str, value: &str) -> Self {
        self.flags.push(format!("--{name}={value}"));
        self
    }
}

/// The scan interval every CA in these tests runs with.
pub const CA_SCAN_INTERVAL: &str = "2s";

/// CA's flags for a test: loopback, no leader election, a short loop, fast scale-down and
/// backoff so that scenarios finish in minutes; verbosity 4 (decisions, not every RPC).
pub fn autoscaler_flags(
    kubeconfig: &Path,
    cloud_config: &Path,
    metrics_port: u16,
    extra: &[String],
) -> Vec<String> {
    let mut flags: Vec<(String, String)> = [
        ("kubeconfig", kubeconfig.display().to_string()),
        ("cloud-provider", "externalgrpc".into()),
        ("cloud-config", cloud_config.display().to_string()),
        ("leader-elect", "false".into()),
        ("address", format!("127.0.0.1:{metrics_port}")),
        ("namespace", "kube-system".into()),
        ("scan-interval", CA_SCAN_INTERVAL.into()),
        ("expander", "least-waste".into()),
        ("max-node-provision-time", "3m".into()),
        ("new-pod-scale-up-delay", "0s".into()),
        ("scale-down-enabled", "true".into()),
        ("scale-down-delay-after-add", "20s".into()),
        ("scale-down-delay-after-delete", "0s".into()),
        ("scale-down-delay-after-failure", "10s".into()),
        ("scale-down-unneeded-time", "20s".into()),
        ("scale-down-unready-time", "1m".into()),
        ("node-delete-delay-after-taint", "1s".into()),
        ("unremovable-node-recheck-timeout", "10s".into()),
        ("initial-node-group-backoff-duration", "30s".into()),
        ("max-node-group-backoff-duration", "2m".into()),
        ("skip-nodes-with-local-storage", "false".into()),
        ("skip-nodes-with-system-pods", "false".into()),
        ("write-status-configmap", "true".into()),
        ("v", "4".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    for f in extra {
        let (k, v) = f
            .trim_start_matches("--")
            .split_once('=')
            .unwrap_or_else(|| panic!("flag {f:?} is not --name=value"));
        match flags.iter_mut().find(|(name, _)| name == k) {
            Some(slot) => slot.1 = v.to_owned(),
            None => flags.push((k.to_owned(), v.to_owned())),
        }
    }
    flags
        .into_iter()
        .map(|(k, v)| format!("--{k}={v}"))
        .collect()
}

/// A running cluster-autoscaler (stopped by pid on drop) and its signals: its log, its
/// metrics endpoint and its status ConfigMap.
pub struct Autoscaler {
    proc: Proc,
    /// Its log file (klog, `--v=4`).
    pub log: PathBuf,
    /// `/metrics` and `/health-check`.
    pub metrics: std::net::SocketAddr,
    /// Its release.
    pub version: String,
}

/// One `Final scale-up plan` entry of CA's log: group, current size, new size, max.
#[derive(Debug, Clone, PartialEq)]
pub struct CaScaleUp {
    /// Seconds of the UTC day of the log line.
    pub at_day_s: f64,
    /// Node group.
    pub group: String,
    /// Size before.
    pub from: u32,
    /// Size asked for.
    pub to: u32,
}

impl CaScaleUp {
    /// Nodes CA asked for.
    pub fn delta(&self) -> u32 {
        self.to - self.from
    }
}

/// Seconds of the UTC day of a klog line (`I1201 03:40:12.345678 ...`), if it is one.
pub fn klog_day_seconds(line: &str) -> Option<f64> {
    let time = line.get(6..21)?;
    let mut parts = time.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

/// Seconds of the current UTC day.
pub fn now_day_seconds() -> f64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    (now.as_secs_f64()) % 86400.0
}

impl Cluster {
    /// Starts CA against this control plane and gangscaler per `spec`. Writes the cloud-config
    /// CA reads (`address`, and `cert`/`key`/`cacert` for mTLS) into this run's folder.
    pub fn start_autoscaler(&self, name: &str, spec: &AutoscalerSpec) -> Autoscaler {
        let versions = Versions::load();
        let cc = self.dir.join(format!("{name}-cloud-config.yaml"));
        let mut text = format!(
            "address: \"127.0.0.1:{}\"\ngrpc_timeout: {}\n",
            spec.grpc_port, spec.grpc_timeout
        );
        if let Transport::Mtls { cert, key, cacert } = &spec.transport {
            text.push_str(&format!(
                "cert: {}\nkey: {}\ncacert: {}\n",
                cert.display(),
                key.display(),
                cacert.display()
            ));
        }
        write(&cc, &text);
        let port = free_port();
        let mut cmd = Command::new(versions.ca_bin(&spec.version));
        cmd.args(autoscaler_flags(&self.kubeconfig, &cc, port, &spec.flags));
        let proc = Proc::spawn_logged(name, &self.dir, cmd);
        Autoscaler {
            proc,
            log: self.dir.join(format!("{name}.log")),
            metrics: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            version: spec.version.clone(),
        }
    }
}

impl Autoscaler {
    /// Everything CA has logged so far.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Fails the test if CA has exited.
    pub fn assert_running(&mut self) {
        self.proc.assert_running();
    }

    /// The log lines containing `needle`.
    pub fn lines(&self, needle: &str) -> Vec<String> {
        self.log_text()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }

    /// Every scale-up CA planned, from its `Final scale-up plan: [{gpu 0->1 (max: 4)}]` lines.
    pub fn scale_ups(&self) -> Vec<CaScaleUp> {
        let mut out = Vec::new();
        // `] ` keeps CA's own klog lines, not the event-sink lines that echo them.
        for line in self.lines("] Final scale-up plan: [") {
            let at_day_s = klog_day_seconds(&line).unwrap_or(0.0);
            let plan = line.split("Final scale-up plan: [").nth(1).unwrap_or("");
            for entry in plan.split('{').skip(1) {
                let mut words = entry.split_whitespace();
                let (Some(group), Some(sizes)) = (words.next(), words.next()) else {
                    continue;
                };
                let Some((from, to)) = sizes.split_once("->") else {
                    continue;
                };
                if let (Ok(from), Ok(to)) = (from.parse(), to.parse()) {
                    out.push(CaScaleUp {
                        at_day_s,
                        group: group.to_owned(),
                        from,
                        to,
                    });
                }
            }
        }
        out
    }

    /// Every scale-up CA planned for `group`.
    /// CA's plans for `group` as `from->to`, for result notes.
    pub fn asks_of(&self, group: &str) -> Vec<String> {
        self.scale_ups_of(group)
            .iter()
            .map(|u| format!("{}->{}", u.from, u.to))
            .collect()
    }

    pub fn scale_ups_of(&self, group: &str) -> Vec<CaScaleUp> {
        self.scale_ups()
            .into_iter()
            .filter(|s| s.group == group)
            .collect()
    }

    /// The nodes CA's scale-down removed (empty or drained), in log order.
    pub fn scaled_down_nodes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for line in self.lines("] Scale-down: removing ") {
            let rest = line.split("Scale-down: removing ").nth(1).unwrap_or("");
            let name = rest
                .trim_start_matches("empty node ")
                .trim_start_matches("node ")
                .split([',', ' '])
                .next()
                .unwrap_or("")
                .trim_matches('"');
            if !name.is_empty() {
                out.push(name.to_owned());
            }
        }
        out
    }

    /// CA's `/metrics` text.
    pub async fn metrics_text(&self) -> String {
        let (status, body) = http_get(self.metrics, "/metrics")
            .await
            .unwrap_or_else(|| panic!("CA /metrics at {} did not answer", self.metrics));
        assert_eq!(status, 200, "CA /metrics: {body}");
        body
    }

    /// CA's status ConfigMap (`kube-system/cluster-autoscaler-status`), its `status` text.
    pub async fn status(&self, client: &kube::Client) -> Option<String> {
        use k8s_openapi::api::core::v1::ConfigMap;
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), "kube-system");
        let cm = api.get_opt("cluster-autoscaler-status").await.ok()??;
        cm.data?.get("status").cloned()
    }

    /// Waits until CA's health check answers (its informers synced and the loop running).
    pub async fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.proc.assert_running();
            if http_get(self.metrics, "/health-check")
                .await
                .is_some_and(|(status, _)| status == 200)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cluster-autoscaler not healthy; log {}",
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// The sum of the samples of `name` whose labels contain every `k="v"` of `labels` (`None`
/// when no sample matches): CA pre-creates some series at 0 beside the ones it increments.
pub fn metric_value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name).is_some_and(|rest| {
                (rest.starts_with('{') || rest.starts_with(' '))
                    && labels
                        .iter()
                        .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
            })
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(None, |sum, v| Some(sum.unwrap_or(0.0) + v))
}

/// An HTTP/1.0 GET (so that Go servers answer without chunked encoding); `None` if nothing
/// answered within 5 s.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_owned()))
    };
    tokio::time::timeout(Duration::from_secs(5), fetch)
        .await
        .ok()
        .flatten()
}

/// A loopback TCP forwarder standing in for a Kubernetes Service in front of several
/// replicas: every 200 ms it asks each backend's `/readyz` and sends new connections to the
/// first ready one. With none ready a connection is closed at once, as a Service without
/// ready endpoints refuses it. Open connections stay with their backend until either side
/// closes. Runs on its own thread (and runtime), stopped on drop.
pub struct Forwarder {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Each change of the ready backend: when, and its index (`None`: none ready).
    pub switches: Switches,
}

/// When the forwarder's ready backend changed, and to which (`None`: none ready).
pub type Switches = std::sync::Arc<std::sync::Mutex<Vec<(Instant, Option<usize>)>>>;

impl Forwarder {
    /// Forwards 127.0.0.1:`port` to the gRPC port of the first of `backends` (gRPC port,
    /// HTTP address) whose `/readyz` answers 200.
    pub fn start(port: u16, backends: Vec<(u16, std::net::SocketAddr)>) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let stop = Arc::new(AtomicBool::new(false));
        let switches: Switches = Arc::default();
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let (stopping, log) = (stop.clone(), switches.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let target: Arc<Mutex<Option<usize>>> = Arc::default();
                let (poll_target, poll_stop) = (target.clone(), stopping.clone());
                let poll_backends = backends.clone();
                tokio::spawn(async move {
                    while !poll_stop.load(Ordering::SeqCst) {
                        let mut ready = None;
                        for (i, (_, http)) in poll_backends.iter().enumerate() {
                            if http_get(*http, "/readyz")
                                .await
                                .is_some_and(|(s, _)| s == 200)
                            {
                                ready = Some(i);
                                break;
                            }
                        }
                        {
                            let mut t = poll_target.lock().unwrap();
                            if *t != ready {
                                *t = ready;
                                log.lock().unwrap().push((Instant::now(), ready));
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                });
                while !stopping.load(Ordering::SeqCst) {
                    let accepted = tokio::select! {
                        a = listener.accept() => a,
                        () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                    };
                    let Ok((mut inbound, _)) = accepted else {
                        continue;
                    };
                    let chosen = *target.lock().unwrap();
                    let Some(i) = chosen else {
                        continue;
                    };
                    let grpc = backends[i].0;
                    tokio::spawn(async move {
                        if let Ok(mut out) =
                            tokio::net::TcpStream::connect(("127.0.0.1", grpc)).await
                        {
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                        }
                    });
                }
            });
        });
        Self {
            stop,
            thread: Some(thread),
            switches,
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
