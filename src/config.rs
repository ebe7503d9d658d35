//! Provider and node-group configuration: YAML files under one directory, environment
//! overrides, and validation that reports every error at once with its file, field path and
//! value; [`reference`](mod@reference) lists every field the validator reads
//! (`docs/configuration.md` documents them). Depends on `model`, `planner` (the admission
//! policy type), `yaml` (bounded reading and parsing) and `audit` (the `{identity}`
//! placeholder of `audit.path`); TLS files are checked with rustls, as `serve` will load them.

mod env;
mod load;
pub mod reference;
mod tls;
mod validate;
mod walk;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use load::{Fingerprint, PROVIDER_FILE, Source};
pub use tls::{MAX_TLS_FILE_BYTES, TlsContents, TlsError, TlsFingerprint, TlsMaterial, TlsProblem};

use crate::model::NodeGroupSpec;

/// One invalid setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// File the setting came from.
    pub file: PathBuf,
    /// Dotted field path, e.g. `capacity.memory` or `taints[0].effect`.
    pub field: String,
    /// The offending value as written, when there is one.
    pub value: Option<String>,
    /// What is wrong.
    pub message: String,
    /// The environment variable that set the value, when one did.
    pub env: Option<Box<EnvOrigin>>,
}

/// An environment variable that overrode a setting of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvOrigin {
    /// The variable's name, as set.
    pub variable: String,
    /// Its value, as set.
    pub value: String,
    /// The value the file had there, rendered (`None`: the file does not set it).
    pub replaced: Option<String>,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.file.display(),
            self.field,
            self.message
        )?;
        if let Some(v) = &self.value {
            write!(f, " (got {v})")?;
        }
        if let Some(env) = &self.env {
            write!(
                f,
                "; set by environment variable {}={:?}",
                env.variable, env.value
            )?;
            match &env.replaced {
                Some(old) => write!(f, " in place of {old} from the file")?,
                None => write!(f, " (the file does not set it)")?,
            }
        }
        Ok(())
    }
}

/// A node-group directory entry that cannot be read as a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    /// The entry.
    pub path: PathBuf,
    /// Why it cannot be used, e.g. "is a directory, not a regular file".
    pub reason: String,
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

/// Configuration errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be read.
    #[error("reading {}", path.display())]
    Read {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Entries of the node-group directory named `*.yaml`/`*.yml` that are not (symbolic
    /// links to) regular files: directories, dangling symlinks, symlink loops, FIFOs. Every
    /// one is listed.
    #[error("{} unusable node-group file(s):\n  {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    Unusable(Vec<Unusable>),
    /// A configuration path is not a regular file (a directory, a FIFO, a device).
    #[error("{} is a {kind}, not a regular file", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// A configuration file is larger than [`MAX_FILE_BYTES`].
    #[error("{} is larger than the {} limit for configuration files", path.display(), crate::yaml::Size(*limit))]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
    /// A file is not valid YAML, exceeds the YAML budget (alias expansion, nesting, node
    /// count), or an override is malformed.
    #[error("parsing {}: {message}", path.display())]
    Parse {
        /// The path.
        path: PathBuf,
        /// Parser message.
        message: String,
    },
    /// One or more settings are invalid; every one is listed.
    #[error("{} invalid setting(s):\n  {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    Invalid(Vec<FieldError>),
}

impl From<crate::yaml::ReadError> for Error {
    fn from(e: crate::yaml::ReadError) -> Self {
        use crate::yaml::ReadError;
        match e {
            ReadError::Io { path, source } => Self::Read { path, source },
            ReadError::NotAFile { path, kind } => Self::NotAFile { path, kind },
            ReadError::TooLarge { path, limit } => Self::TooLarge { path, limit },
        }
    }
}

/// Largest configuration file read (`provider.yaml` or a node-group file): 1 MiB.
pub const MAX_FILE_BYTES: u64 = crate::yaml::CONFIG.max_bytes;

/// Largest `minSize`/`maxSize` of a node group: 5,000 nodes, the most Kubernetes supports in
/// one cluster. A larger bound could only let a request through that no backend can honour
/// (the kwok backend keeps a name per requested node in one ConfigMap).
pub const MAX_GROUP_SIZE: u32 = 5_000;

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// TLS files of a server: the gRPC server (mutual TLS: client certificates are required) or
/// the compatibility webhook (mutual TLS, or server TLS only without a client CA).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Server certificate chain (PEM).
    pub cert_file: PathBuf,
    /// Server private key (PEM).
    pub key_file: PathBuf,
    /// CA bundle that client certificates must chain to (PEM). `None`: no client
    /// certificate is asked for (only the webhook allows that; the gRPC server's
    /// configuration always sets it).
    pub client_ca_file: Option<PathBuf>,
}

/// How the gRPC server is secured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// Mutual TLS.
    Tls(TlsFiles),
    /// Plaintext, asked for explicitly. `non_loopback` is set when the operator forced
    /// plaintext on a non-loopback address.
    Plaintext {
        /// Plaintext on a non-loopback address was forced.
        non_loopback: bool,
    },
}

/// Server settings from the provider file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// gRPC listen address.
    pub address: SocketAddr,
    /// HTTP listen address for `/metrics`, `/healthz`, `/readyz`.
    pub metrics_address: SocketAddr,
    /// TLS or plaintext.
    pub transport: Transport,
    /// Timeouts, keepalive and the limit on gRPC connections (`server.connections`).
    pub connections: ConnectionSettings,
    /// After SIGTERM (readiness already false), how long RPCs in flight may still run before
    /// the remaining connections are closed (`server.shutdownGracePeriod`).
    pub shutdown_grace_period: Duration,
    /// How often the TLS files are checked for a rotation (`server.tls.pollInterval`); unused
    /// without TLS.
    pub tls_poll_interval: Duration,
}

/// Default of `server.shutdownGracePeriod`: long enough for CA's calls in flight (they answer
/// in milliseconds, a backend call in seconds), well inside Kubernetes' default 30s
/// `terminationGracePeriodSeconds`.
pub const DEFAULT_SHUTDOWN_GRACE_PERIOD: Duration = Duration::from_secs(5);

/// Default of `server.tls.pollInterval`.
pub const DEFAULT_TLS_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// How long gRPC connections may take to start and stay silent, and how many may be open
/// (`server.connections`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// Open connections at most; one more is closed as soon as it is accepted (`max`).
    pub max: usize,
    /// Open connections from one source address at most (`maxPerPeer`); at most `max`.
    pub max_per_peer: usize,
    /// Slots of `max` that only addresses which completed a mutual-TLS handshake in the last
    /// hour may take (`reservedForCertified`); below `max`. Unused in plaintext.
    pub reserved_for_certified: usize,
    /// Open connections from one source address at most on the metrics listener
    /// (`metricsMaxPerPeer`), which serves at most [`crate::http::MAX_CONNECTIONS`].
    pub metrics_max_per_peer: usize,
    /// Time from accepting a connection to its first HTTP/2 bytes, the TLS handshake
    /// included; a connection that takes longer is closed (`handshakeTimeout`).
    pub handshake_timeout: Duration,
    /// A connection from which nothing has been read this long is closed (`idleTimeout`).
    /// Longer than `keepalive_interval + keepalive_timeout`, so a live client, which answers
    /// the keepalive pings, is never idle that long.
    pub idle_timeout: Duration,
    /// Interval of the server's HTTP/2 keepalive pings (`keepaliveInterval`).
    pub keepalive_interval: Duration,
    /// A connection whose peer has not acknowledged a keepalive ping this long is closed
    /// (`keepaliveTimeout`).
    pub keepalive_timeout: Duration,
}

impl Default for ConnectionSettings {
    /// 256 connections, 32 per source address, 16 reserved for certified clients, 8 per
    /// address on the metrics listener, 10s handshake, 5m idle, a ping every 30s answered
    /// within 20s.
    fn default() -> Self {
        let max = 256;
        Self {
            max,
            max_per_peer: 32,
            // The validator's default for a configured `max` too.
            reserved_for_certified: max / RESERVED_SHARE,
            metrics_max_per_peer: 8,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(5 * 60),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(20),
        }
    }
}

/// `reservedForCertified` defaults to `max` divided by this.
pub const RESERVED_SHARE: usize = 16;

/// How gangscaler reaches the cluster (kwok backend) and where it keeps durable state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesSettings {
    /// Kubeconfig file; `None` means `KUBECONFIG`, `~/.kube/config` or in-cluster config.
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the state ConfigMap.
    pub state_namespace: String,
    /// Name of the ConfigMap holding each group's target size and not-yet-created capacity.
    pub state_config_map: String,
    /// Watch the cluster (pods, gangs, volumes) so `NodeGroupIncreaseSize` admits whole gangs.
    pub watch: bool,
    /// Kubeconfig of the Cluster API management cluster (the clusterapi backend's
    /// MachineDeployments and Machines); `None` means the same cluster as `kubeconfig`.
    pub management_kubeconfig: Option<PathBuf>,
}

impl Default for KubernetesSettings {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            state_namespace: "kube-system".to_owned(),
            state_config_map: "gangscaler-state".to_owned(),
            watch: false,
            management_kubeconfig: None,
        }
    }
}

/// Where the durable audit log goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSettings {
    /// The live log file (rotated files get `.1`, `.2`, ...).
    pub path: PathBuf,
    /// Rotate when the file would pass this size.
    pub max_bytes: u64,
    /// Rotated files kept.
    pub keep_files: u32,
    /// Also write every record to stdout.
    pub stdout: bool,
    /// Permission bits of the log files (`audit.fileMode`, `0600` by default).
    pub file_mode: u32,
}

/// A setting that is valid but deserves the operator's attention (`validate` prints it,
/// `serve` logs it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// Dotted field path in `provider.yaml`.
    pub field: &'static str,
    /// What to consider.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl ServerSettings {
    /// Warnings about these settings: the metrics listener or forced plaintext gRPC on a
    /// non-loopback address.
    pub fn warnings(&self) -> Vec<Warning> {
        let mut out = Vec::new();
        if !self.metrics_address.ip().is_loopback() {
            out.push(Warning {
                field: "server.metricsAddress",
                message: format!(
                    "{} is not a loopback address: /metrics, /healthz and /readyz (nothing else) are served there over plain, unauthenticated HTTP; keep it on a trusted network",
                    self.metrics_address
                ),
            });
        }
        if let Transport::Plaintext { non_loopback: true } = self.transport {
            out.push(Warning {
                field: "server.address",
                message: format!(
                    "plaintext gRPC on {}, a non-loopback address (forced by server.allowNonLoopbackPlaintext): anyone who can reach it can resize node groups",
                    self.address
                ),
            });
        }
        out
    }
}

/// How scale-up lifecycles are tracked after an accepted `NodeGroupIncreaseSize`: how often
/// the open ones are compared with the cluster, when each ends in a timeout outcome, and when
/// a pending gang the scheduler has recorded no verdict on is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LifecycleSettings {
    /// How often open scale-ups are compared with the cluster (`lifecycle.interval`).
    pub interval: Duration,
    /// Time after the request by which the nodes must have registered; past it the lifecycle
    /// ends with the `registrationTimeout` outcome (`lifecycle.registrationTimeout`).
    pub registration_timeout: Duration,
    /// Time after the request by which the gang must have formed; past it the lifecycle ends
    /// with the `formationTimeout` outcome (`lifecycle.formationTimeout`).
    pub formation_timeout: Duration,
    /// Time after the gang formed by which its volumes must be attached; past it the lifecycle
    /// ends with the `attachFailed` outcome (`lifecycle.attachTimeout`).
    pub attach_timeout: Duration,
    /// Keep the nodes of a scale-up whose gang has not reached its outcome out of CA's
    /// scale-down (`lifecycle.scaleDownProtection`). Has no effect under `admission.policy:
    /// off`.
    pub scale_down_protection: bool,
    /// Age after which a whole pending gang none of whose members carries a scheduler verdict
    /// (a `PodScheduled` condition) is reported as unseen by Cluster Autoscaler
    /// (`lifecycle.noVerdictAfter`).
    pub no_verdict_after: Duration,
}

impl Default for LifecycleSettings {
    /// 5s interval, 15m registration, 30m formation and 10m attach timeouts, scale-down
    /// protection on, 2m before a gang without scheduler verdicts is reported.
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(5),
            registration_timeout: Duration::from_secs(15 * 60),
            formation_timeout: Duration::from_secs(30 * 60),
            attach_timeout: Duration::from_secs(10 * 60),
            scale_down_protection: true,
            no_verdict_after: Duration::from_secs(2 * 60),
        }
    }
}

/// Deferral (`admission.deferral`): the pending gangs `strict` would not admit now are kept out
/// of CA's scale-up with CA's per-pod `pod-scale-up-delay` annotation instead of being refused
/// when CA asks (see `docs/deferral.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeferralSettings {
    /// Whether the lifecycle loop marks deferred gangs' pods (`admission.deferral.enabled`).
    pub enabled: bool,
    /// How long a mark keeps a pod out of CA's scale-up past its last refresh
    /// (`admission.deferral.horizon`): also how long marks outlive a stopped gangscaler.
    pub horizon: Duration,
    /// CA's `--new-pod-scale-up-delay` (`admission.deferral.caNewPodScaleUpDelay`): CA refuses
    /// a pod's delay below it, so no mark is shorter.
    pub ca_new_pod_scale_up_delay: Duration,
}

impl Default for DeferralSettings {
    /// Off, a 2-minute horizon, CA's default `--new-pod-scale-up-delay` of 0s.
    fn default() -> Self {
        Self {
            enabled: false,
            horizon: Duration::from_secs(2 * 60),
            ca_new_pod_scale_up_delay: Duration::ZERO,
        }
    }
}

/// Leader election between replicas (`leaderElection`, enabled): only the holder of a
/// `coordination.k8s.io` Lease acts (scale-ups, backend writes, the kwok and scale-up loops,
/// Events); the others serve reads and are not ready. See `docs/ha.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionSettings {
    /// Name of the Lease (`leaseName`, default `gangscaler`).
    pub lease_name: String,
    /// Namespace of the Lease (`namespace`, default `POD_NAMESPACE`, else `kube-system`).
    pub namespace: String,
    /// This replica's holder identity (`identity`, default `POD_NAME`, else the host name);
    /// it also names this replica's audit file (`{identity}` in `audit.path`).
    pub identity: String,
    /// How long a lease lasts after its last renewal, as the other replicas count it from
    /// when they saw that renewal (`leaseDuration`, default 15s, whole seconds).
    pub lease_duration: Duration,
    /// The leader stops acting if it has not renewed this long (`renewDeadline`, default
    /// 10s; less than `leaseDuration`).
    pub renew_deadline: Duration,
    /// Time between attempts to acquire or renew (`retryPeriod`, default 2s).
    pub retry_period: Duration,
}

impl LeaderElectionSettings {
    /// client-go's defaults (kube-scheduler, kube-controller-manager and Cluster Autoscaler
    /// use them): lease 15s, renew deadline 10s, retry every 2s.
    pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
    /// See [`Self::DEFAULT_LEASE_DURATION`].
    pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
    /// See [`Self::DEFAULT_LEASE_DURATION`].
    pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
    /// The default lease name.
    pub const DEFAULT_LEASE_NAME: &'static str = "gangscaler";
}

/// Settings from the provider file that are not per node group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSettings {
    /// Server settings.
    pub server: ServerSettings,
    /// Label CA uses to recognise GPU nodes (GPULabel RPC).
    pub gpu_label: String,
    /// GPU types given to CA; defaults to the products of all GPU groups.
    pub gpu_types: Option<Vec<String>>,
    /// Directory holding one YAML file per node group.
    pub node_groups_dir: PathBuf,
    /// Cluster access and durable state (used by the kwok backend and the cluster view).
    pub kubernetes: KubernetesSettings,
    /// Gang admission policy for `NodeGroupIncreaseSize` (active when `kubernetes.watch`).
    pub admission_policy: crate::planner::Policy,
    /// The order of pending gangs of one priority when headroom is short (`admission.order`).
    pub admission_order: crate::planner::Order,
    /// Deferral of the gangs `strict` would not admit now (`admission.deferral`).
    pub deferral: DeferralSettings,
    /// The durable audit log of admission decisions, if configured.
    pub audit: Option<AuditSettings>,
    /// How scale-up lifecycles are tracked and timed out (defaults when the section is absent).
    pub lifecycle: LifecycleSettings,
    /// Leader election between replicas; `None` unless `leaderElection.enabled`.
    pub leader_election: Option<LeaderElectionSettings>,
}

/// A loaded, validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// Provider settings.
    pub provider: ProviderSettings,
    /// Node groups, sorted by id.
    pub groups: Vec<NodeGroupSpec>,
}

impl Loaded {
    /// The GPU types to report to CA: the configured list, else every group's GPU product.
    pub fn gpu_types(&self) -> Vec<String> {
        if let Some(types) = &self.provider.gpu_types {
            return types.clone();
        }
        let mut types: Vec<String> = self
            .groups
            .iter()
            .filter_map(|g| g.gpu.as_ref().map(|gpu| gpu.product.clone()))
            .collect();
        types.sort();
        types.dedup();
        types
    }
}
