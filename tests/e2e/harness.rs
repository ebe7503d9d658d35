//! A local control plane for end-to-end tests: etcd, kube-apiserver, kube-scheduler,
//! kube-controller-manager and kwok, built from the Go module proxy by `tests/e2e/build.sh`,
//! all listening on 127.0.0.1, with their own PKI and kubeconfig. Every process is started and
//! stopped here by pid; all logs go to one folder, named on failure.
//!
//! A second Kubernetes minor is a row in `tests/e2e/versions.env` plus a `tools/k8s-<minor>`
//! wrapper module; the gang API and runtime-config come from that row.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test harness: abort loudly"
)]

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

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
    /// `v3.6.14`.
    pub etcd: String,
    /// `v0.8.0`.
    pub kwok: String,
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
            etcd: var("ETCD_VERSION"),
            kwok: var("KWOK_VERSION"),
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
        let p = Self::cache().join(format!("{part}-{version}")).join(name);
        assert!(
            p.is_file(),
            "{} is missing: run tests/e2e/build.sh {} first",
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
}

struct Pki {
    ca: String,
    serving: (String, String),
    admin: (String, String),
    sa_key: String,
    sa_pub: String,
}

fn pki() -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "gangscaler-e2e-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |cn: &str, org: Option<&str>, sans: Vec<String>, usage| {
        let mut p = CertificateParams::new(sans).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            p.distinguished_name.push(DnType::OrganizationName, o);
        }
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        p.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &ca).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let serving = leaf(
        "kube-apiserver",
        None,
        vec![
            "127.0.0.1".into(),
            "localhost".into(),
            "kubernetes.default.svc".into(),
        ],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let admin = leaf(
        "admin",
        Some("system:masters"),
        vec![],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let sa = KeyPair::generate().unwrap();
    Pki {
        ca: ca.pem(),
        serving,
        admin,
        sa_key: sa.serialize_pem(),
        sa_pub: sa.public_key_pem(),
    }
}

fn write(path: &Path, text: &str) {
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
        let versions = Versions::load();
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
        let mut api = Command::new(versions.bin("k8s", "kube-apiserver"));
        api.args([
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
            "--v=1",
        ]);
        cluster
            .procs
            .push(Proc::spawn_logged("kube-apiserver", &dir, api));
        cluster.wait_ready().await;

        let kc = kubeconfig.display().to_string();
        let mut sched = Command::new(versions.bin("k8s", "kube-scheduler"));
        sched.args([
            &format!("--kubeconfig={kc}"),
            &format!("--authentication-kubeconfig={kc}"),
            &format!("--authorization-kubeconfig={kc}"),
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            &format!("--secure-port={}", free_port()),
            &format!("--feature-gates={gates}"),
            "--v=2",
        ]);
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
