//! Turns parsed YAML documents into validated settings and node-group specs, collecting every
//! problem instead of stopping at the first.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::walk::{Errors, Obj};
use super::{
    ConnectionSettings, DEFAULT_SHUTDOWN_GRACE_PERIOD, DEFAULT_TLS_POLL_INTERVAL,
    KubernetesSettings, LeaderElectionSettings, LifecycleSettings, ProviderSettings,
    ServerSettings, TlsFiles, Transport,
};
use crate::model::{
    AttachSimulation, AutoscalingOptionOverrides, BackendSpec, Capacity, ClusterApiBackendSpec,
    ErrorCode, GpuSpec, KwokBackendSpec, MemoryBackendSpec, NodeGroupId, NodeGroupSpec, RdmaSpec,
    SimulatedFailure, Taint, TaintEffect, labels,
};

/// Defaults from the provider file that node groups inherit.
#[derive(Debug, Clone)]
pub struct GroupDefaults {
    pub node_groups_dir: PathBuf,
    pub gpu_label: String,
    pub os: String,
    pub arch: String,
    pub gpu_resource: String,
    pub rdma_bandwidth_resource: String,
    pub backend: Option<Value>,
}

/// Default gRPC address.
use super::MAX_GROUP_SIZE;

const DEFAULT_ADDRESS: &str = "127.0.0.1:8086";
/// Default metrics address.
const DEFAULT_METRICS_ADDRESS: &str = "127.0.0.1:9464";
/// Bounds of `lifecycle.interval`, and how an error names them.
const LIFECYCLE_INTERVAL: (Duration, Duration, &str) = (
    Duration::from_millis(100),
    Duration::from_secs(10 * 60),
    "from 100ms to 10m",
);
/// Bounds of every `lifecycle.*Timeout` and of `lifecycle.noVerdictAfter` (above zero), and
/// how an error names them.
const LIFECYCLE_TIMEOUT: (Duration, Duration, &str) = (
    Duration::ZERO,
    Duration::from_secs(24 * 60 * 60),
    "above 0 and at most 24h",
);

/// Validates the provider document. `dir` is the directory relative paths resolve against.
///
/// The defaults are returned even when the server settings are invalid, so that node-group
/// files can still be checked and every error reported in one pass.
pub fn provider(
    doc: &Value,
    dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    errs: &mut Errors,
) -> (Option<ProviderSettings>, GroupDefaults) {
    let mut root = Obj::root_or_empty(doc, errs);
    // A missing server section is validated as an empty one, so its requirements are named.
    let server = root.obj_or_empty("server", errs);
    let written = doc.get("server").and_then(|s| s.get("connections"));
    let server = server_settings(server, written, dir, errs);
    let mut gpu_label = labels::DEFAULT_GPU_LABEL.to_owned();
    let mut gpu_types = None;
    if let Some(mut gpu) = root.obj("gpu", errs) {
        if let Some(label) = gpu.string("label", errs) {
            if let Err(e) = check_label_key(&label) {
                errs.push(&gpu.path("label"), Some(&Value::String(label.clone())), e);
            }
            gpu_label = label;
        }
        let types = gpu.list("types", errs);
        if !types.is_empty() {
            let mut out = Vec::new();
            for (i, t) in types.iter().enumerate() {
                match t {
                    Value::String(s) if !s.is_empty() => out.push(s.clone()),
                    other => errs.push(
                        &format!("gpu.types[{i}]"),
                        Some(other),
                        "must be a non-empty string",
                    ),
                }
            }
            gpu_types = Some(out);
        }
        gpu.finish(errs);
    }
    let node_groups_dir = dir.join(
        root.string("nodeGroupsDir", errs)
            .unwrap_or_else(|| "nodegroups".to_owned()),
    );
    let mut defaults = GroupDefaults {
        node_groups_dir: node_groups_dir.clone(),
        gpu_label: gpu_label.clone(),
        os: "linux".to_owned(),
        arch: "amd64".to_owned(),
        gpu_resource: labels::DEFAULT_GPU_RESOURCE.to_owned(),
        rdma_bandwidth_resource: labels::DEFAULT_RDMA_BANDWIDTH_RESOURCE.to_owned(),
        backend: None,
    };
    if let Some(mut d) = root.obj("defaults", errs) {
        if let Some(os) = d.string("os", errs) {
            defaults.os = os;
        }
        if let Some(arch) = d.string("arch", errs) {
            defaults.arch = arch;
        }
        for (key, slot) in [
            ("gpuResource", &mut defaults.gpu_resource),
            (
                "rdmaBandwidthResource",
                &mut defaults.rdma_bandwidth_resource,
            ),
        ] {
            if let Some(name) = d.string(key, errs) {
                if let Err(e) = check_resource_name(&name) {
                    errs.push(&d.path(key), Some(&Value::String(name.clone())), e);
                }
                *slot = name;
            }
        }
        // Checked in the context of each group that inherits it, and once here.
        if let Some(b) = d.obj("backend", errs) {
            backend(b, errs);
            defaults.backend = doc.get("defaults").and_then(|d| d.get("backend")).cloned();
        }
        d.finish(errs);
    }
    let kubernetes = kubernetes_settings(root.obj_or_empty("kubernetes", errs), dir, errs);
    let admission_policy = admission_policy(root.obj_or_empty("admission", errs), errs);
    let audit = root.obj("audit", errs).and_then(|mut a| {
        let path = a.required_string("path", errs).map(|p| dir.join(p));
        let max_bytes = a
            .int("maxBytes", 4096, i64::MAX, errs)
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(64 << 20);
        let keep_files = a
            .int("keepFiles", 0, 1000, errs)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(5);
        let stdout = a.bool("stdout", errs).unwrap_or(false);
        let file_mode = audit_file_mode(&mut a, errs).unwrap_or(0o600);
        a.finish(errs);
        Some(super::AuditSettings {
            path: path?,
            max_bytes,
            keep_files,
            stdout,
            file_mode,
        })
    });
    let lifecycle = lifecycle_settings(
        root.obj_or_empty("lifecycle", errs),
        doc.get("lifecycle"),
        errs,
    );
    let leader_election = leader_election(
        root.obj_or_empty("leaderElection", errs),
        doc.get("leaderElection"),
        env,
        errs,
    );
    if let Some(audit) = doc.get("audit").and_then(|a| a.get("path")) {
        audit_path_template(audit, leader_election.is_some(), errs);
    }
    root.finish(errs);
    let settings = server.map(|server| ProviderSettings {
        server,
        gpu_label,
        gpu_types,
        node_groups_dir,
        kubernetes,
        admission_policy,
        audit,
        lifecycle,
        leader_election,
    });
    (settings, defaults)
}

/// The `leaderElection` section; `written` is the section as written, for the values in
/// errors. Its settings are checked even when it is disabled; defaults that come from the
/// environment (`POD_NAMESPACE`, `POD_NAME`, the host name) only when it is enabled. `None`
/// unless enabled.
fn leader_election(
    mut l: Obj<'_>,
    written: Option<&Value>,
    env: &dyn Fn(&str) -> Option<String>,
    errs: &mut Errors,
) -> Option<LeaderElectionSettings> {
    let enabled = l.bool("enabled", errs).unwrap_or(false);
    let lease_name = l
        .string("leaseName", errs)
        .unwrap_or_else(|| LeaderElectionSettings::DEFAULT_LEASE_NAME.to_owned());
    if let Err(e) = check_dns_subdomain(&lease_name) {
        errs.push(
            &l.path("leaseName"),
            Some(&Value::String(lease_name.clone())),
            e,
        );
    }
    let set = |v: Option<String>| v.filter(|s| !s.is_empty());
    // (value, where it came from when not written)
    let namespace = match l.string("namespace", errs) {
        Some(ns) => Some((ns, None)),
        None if enabled => Some(set(env("POD_NAMESPACE")).map_or_else(
            || ("kube-system".to_owned(), None),
            |ns| (ns, Some("POD_NAMESPACE")),
        )),
        None => None,
    };
    if let Some((ns, from)) = &namespace
        && let Err(e) = check_dns_label(ns)
    {
        errs.push(
            &l.path("namespace"),
            Some(&Value::String(ns.clone())),
            from_env(e, *from),
        );
    }
    let identity = match l.string("identity", errs) {
        Some(id) => Some((id, None)),
        None if enabled => {
            let found = set(env("POD_NAME"))
                .map(|id| (id, "POD_NAME"))
                .or_else(|| set(env("HOSTNAME")).map(|id| (id, "HOSTNAME")))
                .or_else(|| host_name().map(|id| (id, "the host name")));
            match found {
                Some((id, from)) => Some((id, Some(from))),
                None => {
                    errs.push(
                        &l.path("identity"),
                        None,
                        "is not set, and neither POD_NAME, HOSTNAME nor the host name gives one; set it to a name unique among the replicas",
                    );
                    None
                }
            }
        }
        None => None,
    };
    if let Some((id, from)) = &identity
        && let Err(e) = check_identity(id)
    {
        errs.push(
            &l.path("identity"),
            Some(&Value::String(id.clone())),
            from_env(e, *from),
        );
    }
    let mut timing = |key: &'static str, default: Duration, errs: &mut Errors| {
        let Some(d) = l.duration(key, errs) else {
            return default;
        };
        let bad = if d < LEADER_MIN_PERIOD || d > LEADER_MAX_PERIOD {
            "must be a duration from 100ms to 1h"
        } else if key == "leaseDuration" && d.subsec_nanos() != 0 {
            "must be a whole number of seconds (a Lease counts in seconds)"
        } else {
            return d;
        };
        errs.push(&l.path(key), written.and_then(|w| w.get(key)), bad);
        default
    };
    let lease_duration = timing(
        "leaseDuration",
        LeaderElectionSettings::DEFAULT_LEASE_DURATION,
        errs,
    );
    let renew_deadline = timing(
        "renewDeadline",
        LeaderElectionSettings::DEFAULT_RENEW_DEADLINE,
        errs,
    );
    let retry_period = timing(
        "retryPeriod",
        LeaderElectionSettings::DEFAULT_RETRY_PERIOD,
        errs,
    );
    let show = |d: Duration| humantime::format_duration(d).to_string();
    if renew_deadline >= lease_duration {
        errs.push(
            &l.path("renewDeadline"),
            Some(&Value::String(show(renew_deadline))),
            format!(
                "must be less than leaseDuration ({}): the leader must stop acting before another replica may take the lease",
                show(lease_duration)
            ),
        );
    } else if renew_deadline.as_secs_f64() <= retry_period.as_secs_f64() * LEADER_JITTER {
        errs.push(
            &l.path("renewDeadline"),
            Some(&Value::String(show(renew_deadline))),
            format!(
                "must be more than {LEADER_JITTER} × retryPeriod ({}), so that the leader has more than one attempt to renew",
                show(retry_period)
            ),
        );
    }
    l.finish(errs);
    let (namespace, _) = namespace?;
    let (identity, _) = identity?;
    enabled.then_some(LeaderElectionSettings {
        lease_name,
        namespace,
        identity,
        lease_duration,
        renew_deadline,
        retry_period,
    })
}

/// Shortest and longest `leaderElection` timing.
const LEADER_MIN_PERIOD: Duration = Duration::from_millis(100);
const LEADER_MAX_PERIOD: Duration = Duration::from_secs(60 * 60);
/// Up to this multiple of `retryPeriod` passes between two attempts (the jitter).
const LEADER_JITTER: f64 = 1.2;

/// `message`, saying where a value not written in the file came from.
fn from_env(message: String, from: Option<&str>) -> String {
    match from {
        Some(from) => format!("{message} (taken from {from}; set it explicitly)"),
        None => message,
    }
}

/// The host name, from the kernel.
fn host_name() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// A replica identity: it is the Lease's holder and names the replica's audit file.
fn check_identity(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err("must be 1-253 letters, digits, '-', '_' or '.', not starting with '.' (it names this replica's audit file)".to_owned())
    }
}

/// `audit.path` holds [`crate::audit::IDENTITY`] exactly once, in its file name, with leader
/// election (each replica writes its own file there), and not at all without.
fn audit_path_template(written: &Value, ha: bool, errs: &mut Errors) {
    let Value::String(path) = written else {
        return;
    };
    let placeholder = crate::audit::IDENTITY;
    let count = path.matches(placeholder).count();
    let in_name = Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.contains(placeholder));
    let message = match (ha, count) {
        (true, 1) if in_name => return,
        (true, 0) => format!(
            "with leaderElection.enabled every replica writes its own audit file: put {placeholder} in the file name, e.g. audit/{placeholder}.jsonl on a volume all replicas share (see docs/ha.md)"
        ),
        (true, _) => format!("must hold {placeholder} once, in the file name (not in a directory)"),
        (false, 0) => return,
        (false, _) => format!("{placeholder} is only filled in with leaderElection.enabled"),
    };
    errs.push("audit.path", Some(written), message);
}

/// `audit.fileMode`: a quoted octal mode such as `"0640"`. The leading `0` is required, which
/// refuses an unquoted YAML number (YAML 1.1 and 1.2 read `0640` differently). The owner must
/// be able to read and write (the log is reopened on restart); nobody else may write, and
/// nothing is executable.
fn audit_file_mode(a: &mut Obj<'_>, errs: &mut Errors) -> Option<u32> {
    let s = a.string("fileMode", errs)?;
    let mode = (s.len() == 4 && s.starts_with('0'))
        .then(|| u32::from_str_radix(&s, 8).ok())
        .flatten();
    let message = match mode {
        Some(m) if m & 0o600 == 0o600 && m & !0o664 == 0 => return Some(m),
        Some(_) => {
            "must give the owner read and write (0600) and add at most 0064 \
             (group read/write, others read)"
        }
        None => {
            "must be a quoted octal mode of four digits starting with 0, such as \"0600\" \
             or \"0640\" (YAML reads an unquoted 0640 as a number)"
        }
    };
    errs.push(&a.path("fileMode"), Some(&Value::String(s)), message);
    None
}

/// The `lifecycle` section; `written` is the section as written, for the values in errors.
/// Absent keys, and keys with an invalid value (reported), take the defaults.
fn lifecycle_settings(
    mut l: Obj<'_>,
    written: Option<&Value>,
    errs: &mut Errors,
) -> LifecycleSettings {
    let defaults = LifecycleSettings::default();
    let mut bounded = |key: &'static str,
                       default: Duration,
                       (min, max, bounds): (Duration, Duration, &str),
                       errs: &mut Errors| {
        let Some(d) = l.duration(key, errs) else {
            return default;
        };
        if d.is_zero() || d < min || d > max {
            errs.push(
                &l.path(key),
                written.and_then(|w| w.get(key)),
                format!("must be a duration {bounds}"),
            );
            return default;
        }
        d
    };
    let settings = LifecycleSettings {
        interval: bounded("interval", defaults.interval, LIFECYCLE_INTERVAL, errs),
        registration_timeout: bounded(
            "registrationTimeout",
            defaults.registration_timeout,
            LIFECYCLE_TIMEOUT,
            errs,
        ),
        formation_timeout: bounded(
            "formationTimeout",
            defaults.formation_timeout,
            LIFECYCLE_TIMEOUT,
            errs,
        ),
        attach_timeout: bounded(
            "attachTimeout",
            defaults.attach_timeout,
            LIFECYCLE_TIMEOUT,
            errs,
        ),
        no_verdict_after: bounded(
            "noVerdictAfter",
            defaults.no_verdict_after,
            LIFECYCLE_TIMEOUT,
            errs,
        ),
        scale_down_protection: defaults.scale_down_protection,
    };
    let settings = LifecycleSettings {
        scale_down_protection: l
            .bool("scaleDownProtection", errs)
            .unwrap_or(defaults.scale_down_protection),
        ..settings
    };
    l.finish(errs);
    settings
}

fn admission_policy(mut a: Obj<'_>, errs: &mut Errors) -> crate::planner::Policy {
    use crate::planner::Policy;
    let policy = match a.string("policy", errs).as_deref() {
        None | Some("strict") => Policy::Strict,
        Some("roundUp") => Policy::RoundUp,
        Some("off") => Policy::Off,
        Some(other) => {
            errs.push(
                &a.path("policy"),
                Some(&Value::String(other.to_owned())),
                "must be strict, roundUp or off",
            );
            Policy::Strict
        }
    };
    a.finish(errs);
    policy
}

fn kubernetes_settings(mut k: Obj<'_>, dir: &Path, errs: &mut Errors) -> KubernetesSettings {
    let kubeconfig = k.string("kubeconfig", errs).map(|p| dir.join(p));
    let state_namespace = k
        .string("stateNamespace", errs)
        .unwrap_or_else(|| "kube-system".to_owned());
    if let Err(e) = check_dns_label(&state_namespace) {
        errs.push(
            &k.path("stateNamespace"),
            Some(&Value::String(state_namespace.clone())),
            e,
        );
    }
    let state_config_map = k
        .string("stateConfigMap", errs)
        .unwrap_or_else(|| "gangscaler-state".to_owned());
    if let Err(e) = check_dns_subdomain(&state_config_map) {
        errs.push(
            &k.path("stateConfigMap"),
            Some(&Value::String(state_config_map.clone())),
            e,
        );
    }
    let watch = k.bool("watch", errs).unwrap_or(false);
    let management_kubeconfig = k.string("managementKubeconfig", errs).map(|p| dir.join(p));
    k.finish(errs);
    KubernetesSettings {
        kubeconfig,
        management_kubeconfig,
        state_namespace,
        state_config_map,
        watch,
    }
}

/// `connections` is the `server.connections` section as written, for the values in errors.
fn server_settings(
    mut s: Obj<'_>,
    connections: Option<&Value>,
    dir: &Path,
    errs: &mut Errors,
) -> Option<ServerSettings> {
    let address = socket_addr(&mut s, "address", DEFAULT_ADDRESS, errs);
    let connections = connection_settings(s.obj_or_empty("connections", errs), connections, errs);
    let metrics_address = socket_addr(&mut s, "metricsAddress", DEFAULT_METRICS_ADDRESS, errs);
    let plaintext = s.bool("plaintext", errs).unwrap_or(false);
    let force = s.bool("allowNonLoopbackPlaintext", errs).unwrap_or(false);
    let shutdown_grace_period = bounded_duration(
        &mut s,
        "shutdownGracePeriod",
        DEFAULT_SHUTDOWN_GRACE_PERIOD,
        SHUTDOWN_GRACE_PERIOD,
        errs,
    );
    let mut tls_poll_interval = DEFAULT_TLS_POLL_INTERVAL;
    let tls = s.obj("tls", errs).and_then(|mut t| {
        tls_poll_interval = bounded_duration(
            &mut t,
            "pollInterval",
            DEFAULT_TLS_POLL_INTERVAL,
            TLS_POLL_INTERVAL,
            errs,
        );
        let file = |key: &'static str, t: &mut Obj<'_>, errs: &mut Errors| -> Option<PathBuf> {
            let p = t.required_string(key, errs)?;
            let path = dir.join(&p);
            if !path.is_file() {
                errs.push(
                    &t.path(key),
                    Some(&Value::String(p)),
                    format!("file {} does not exist", path.display()),
                );
                return None;
            }
            Some(path)
        };
        let cert_file = file("certFile", &mut t, errs);
        let key_file = file("keyFile", &mut t, errs);
        let client_ca_file = file("clientCaFile", &mut t, errs);
        t.finish(errs);
        let files = TlsFiles {
            cert_file: cert_file?,
            key_file: key_file?,
            client_ca_file: Some(client_ca_file?),
        };
        // What `serve` would refuse: no PEM certificate, a key of another certificate.
        if let Err(e) = files.check() {
            for p in e.0 {
                errs.push(
                    p.field,
                    Some(&Value::String(p.path.display().to_string())),
                    p.message,
                );
            }
            return None;
        }
        Some(files)
    });
    let had_tls = s.path("tls");
    let tls_given = s.has("tls");
    s.finish(errs);
    let address = address?;
    if let Some(metrics) = metrics_address
        && conflicts(address, metrics)
    {
        errs.push(
            "server.metricsAddress",
            Some(&Value::String(metrics.to_string())),
            format!(
                "must not be the gRPC server.address ({address}): both listeners cannot bind it"
            ),
        );
        return None;
    }
    let transport = match (tls, plaintext) {
        (Some(_), true) => {
            errs.push(
                "server.plaintext",
                Some(&Value::Bool(true)),
                "cannot be combined with server.tls",
            );
            return None;
        }
        (Some(files), false) => Transport::Tls(files),
        (None, true) => {
            let loopback = address.ip().is_loopback();
            if !loopback && !force {
                errs.push(
                    "server.address",
                    Some(&Value::String(address.to_string())),
                    "plaintext is only allowed on a loopback address; use server.tls, or set server.allowNonLoopbackPlaintext: true to force it",
                );
                return None;
            }
            Transport::Plaintext {
                non_loopback: !loopback,
            }
        }
        (None, false) => {
            if !tls_given {
                errs.push(
                    &had_tls,
                    None,
                    "is required unless server.plaintext: true is set explicitly",
                );
            }
            return None;
        }
    };
    Some(ServerSettings {
        address,
        metrics_address: metrics_address?,
        transport,
        connections,
        shutdown_grace_period,
        tls_poll_interval,
    })
}

/// Bounds of `server.shutdownGracePeriod` (0 closes the connections at once).
const SHUTDOWN_GRACE_PERIOD: (Duration, Duration, &str) =
    (Duration::ZERO, Duration::from_secs(5 * 60), "from 0s to 5m");
/// Bounds of `server.tls.pollInterval`.
const TLS_POLL_INTERVAL: (Duration, Duration, &str) = (
    Duration::from_millis(100),
    Duration::from_secs(5 * 60),
    "from 100ms to 5m",
);

/// The duration at `key` of `o`, or `default` when it is absent or invalid (reported).
fn bounded_duration(
    o: &mut Obj<'_>,
    key: &'static str,
    default: Duration,
    (min, max, bounds): (Duration, Duration, &str),
    errs: &mut Errors,
) -> Duration {
    match o.duration(key, errs) {
        Some(d) if d >= min && d <= max => d,
        Some(_) => {
            errs.push(
                &o.path(key),
                o.raw(key),
                format!("must be a duration {bounds}"),
            );
            default
        }
        None => default,
    }
}

/// Bounds of `server.connections.handshakeTimeout`.
const HANDSHAKE_TIMEOUT: (Duration, Duration, &str) = (
    Duration::from_millis(10),
    Duration::from_secs(5 * 60),
    "from 10ms to 5m",
);
/// Bounds of `server.connections.keepaliveInterval` and `.keepaliveTimeout`.
const KEEPALIVE: (Duration, Duration, &str) = (
    Duration::from_secs(1),
    Duration::from_secs(60 * 60),
    "from 1s to 1h",
);
/// Bounds of `server.connections.idleTimeout` (it must also exceed a keepalive round).
const IDLE_TIMEOUT: (Duration, Duration, &str) = (
    Duration::from_secs(1),
    Duration::from_secs(24 * 60 * 60),
    "from 1s to 24h",
);
/// Bounds of `server.connections.max`.
const MAX_CONNECTIONS: i64 = 65_536;

/// The `server.connections` section; `written` is the section as written, for the values in
/// errors. Absent keys, and keys with an invalid value (reported), take the defaults.
fn connection_settings(
    mut c: Obj<'_>,
    written: Option<&Value>,
    errs: &mut Errors,
) -> ConnectionSettings {
    let defaults = ConnectionSettings::default();
    let mut bounded = |key: &'static str,
                       default: Duration,
                       (min, max, bounds): (Duration, Duration, &str),
                       errs: &mut Errors| {
        match c.duration(key, errs) {
            Some(d) if d >= min && d <= max => d,
            Some(_) => {
                errs.push(
                    &c.path(key),
                    written.and_then(|w| w.get(key)),
                    format!("must be a duration {bounds}"),
                );
                default
            }
            None => default,
        }
    };
    let handshake_timeout = bounded(
        "handshakeTimeout",
        defaults.handshake_timeout,
        HANDSHAKE_TIMEOUT,
        errs,
    );
    let keepalive_interval = bounded(
        "keepaliveInterval",
        defaults.keepalive_interval,
        KEEPALIVE,
        errs,
    );
    let keepalive_timeout = bounded(
        "keepaliveTimeout",
        defaults.keepalive_timeout,
        KEEPALIVE,
        errs,
    );
    let idle_timeout = bounded("idleTimeout", defaults.idle_timeout, IDLE_TIMEOUT, errs);
    let max = c
        .int("max", 1, MAX_CONNECTIONS, errs)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(defaults.max);
    let round = keepalive_interval + keepalive_timeout;
    if idle_timeout <= round {
        errs.push(
            &c.path("idleTimeout"),
            written.and_then(|w| w.get("idleTimeout")),
            format!(
                "must be longer than keepaliveInterval + keepaliveTimeout ({}), or live but quiet clients are cut off",
                humantime::format_duration(round)
            ),
        );
    }
    c.finish(errs);
    ConnectionSettings {
        max,
        handshake_timeout,
        idle_timeout,
        keepalive_interval,
        keepalive_timeout,
    }
}

/// Whether two listen addresses would fight over one port: the same port (not 0, which picks
/// a free one) on the same IP, or with either on the unspecified address.
fn conflicts(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

fn socket_addr(
    o: &mut Obj<'_>,
    key: &'static str,
    default: &str,
    errs: &mut Errors,
) -> Option<SocketAddr> {
    let text = o.string(key, errs).unwrap_or_else(|| default.to_owned());
    match text.parse() {
        Ok(a) => Some(a),
        Err(_) => {
            errs.push(
                &o.path(key),
                Some(&Value::String(text)),
                "must be an IP:port address such as 127.0.0.1:8086",
            );
            None
        }
    }
}

/// Validates one node-group document read from `file`.
pub fn node_group(
    doc: &Value,
    file: &Path,
    defaults: &GroupDefaults,
    errs: &mut Errors,
) -> Option<NodeGroupSpec> {
    let mut g = Obj::root(doc, errs)?;
    let id = g.required_string("id", errs);
    if let Some(id) = &id {
        if let Err(e) = check_dns_label(id) {
            errs.push("id", Some(&Value::String(id.clone())), e);
        }
        let stem = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        if stem != id {
            errs.push(
                "id",
                Some(&Value::String(id.clone())),
                format!("must equal the file name without extension ({stem:?}), so environment overrides and reviews find it"),
            );
        }
    }
    let min_size = g.int("minSize", 0, i64::from(MAX_GROUP_SIZE), errs);
    let max_size = g.int("maxSize", 0, i64::from(MAX_GROUP_SIZE), errs);
    for key in ["minSize", "maxSize"] {
        if !g.has(key) {
            g.missing(key, errs);
        }
    }
    if let (Some(min), Some(max)) = (min_size, max_size)
        && min > max
    {
        errs.push(
            "minSize",
            doc.get("minSize"),
            format!("must not exceed maxSize ({max})"),
        );
    }
    let instance_type = g.required_string("instanceType", errs);
    let region = g.required_string("region", errs);
    let zone = g.required_string("zone", errs);
    let os = g.string("os", errs).unwrap_or_else(|| defaults.os.clone());
    let arch = g
        .string("arch", errs)
        .unwrap_or_else(|| defaults.arch.clone());
    let capacity = g
        .obj("capacity", errs)
        .and_then(|c| parse_capacity(c, true, errs));
    let reserved = g
        .obj("reserved", errs)
        .and_then(|c| parse_capacity(c, false, errs))
        .unwrap_or_default();
    if let Some(cap) = &capacity {
        let written = |key: &str| doc.get("reserved").and_then(|r| r.get(key));
        let checks = [
            (
                "cpu",
                reserved.cpu > cap.cpu,
                reserved.cpu.to_decimal_string(),
                cap.cpu.to_decimal_string(),
            ),
            (
                "memory",
                reserved.memory > cap.memory,
                reserved.memory.to_binary_string(),
                cap.memory.to_binary_string(),
            ),
            (
                "ephemeralStorage",
                reserved.ephemeral_storage > cap.ephemeral_storage,
                reserved.ephemeral_storage.to_binary_string(),
                cap.ephemeral_storage.to_binary_string(),
            ),
            (
                "pods",
                reserved.pods > cap.pods,
                reserved.pods.to_string(),
                cap.pods.to_string(),
            ),
        ];
        for (name, exceeds, r, c) in checks {
            if exceeds {
                errs.push(
                    &format!("reserved.{name}"),
                    written(name),
                    format!("exceeds capacity.{name} ({r} > {c})"),
                );
            }
        }
    } else if g.has("reserved") && !g.has("capacity") {
        // An invalid capacity is reported by itself; "requires capacity" would be noise.
        errs.push("reserved", None, "requires capacity");
    }
    let gpu = g.obj("gpu", errs).and_then(|o| gpu(o, defaults, errs));
    let rdma = g.obj("rdma", errs).and_then(|o| rdma(o, defaults, errs));
    let mut csi = BTreeMap::new();
    for (driver, v) in g.map("csi", errs) {
        let path = format!("csi.{driver}");
        if let Err(e) = check_dns_subdomain(&driver) {
            errs.push(
                &path,
                Some(&Value::String(driver.clone())),
                format!("driver name {e}"),
            );
        }
        match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) if n >= 1 => {
                csi.insert(driver, n);
            }
            _ => errs.push(
                &path,
                Some(v),
                "must be a whole number of attachable volumes, at least 1",
            ),
        }
    }
    let labels = label_map(&mut g, "labels", &defaults.gpu_label, errs);
    let topology = label_map(&mut g, "topology", &defaults.gpu_label, errs);
    let mut taints = Vec::new();
    for (i, t) in g.list("taints", errs).into_iter().enumerate() {
        let path = format!("taints[{i}]");
        if let Some(t) = Obj::item(path, t, errs).and_then(|o| taint(o, errs)) {
            taints.push(t);
        }
    }
    let price_per_hour = g.float("price", 0.0, 1e9, errs);
    let backend = match g.obj("backend", errs) {
        Some(b) => backend(b, errs),
        None => match &defaults.backend {
            Some(v) => Obj::root(v, &mut Errors::new(file))
                .and_then(|o| backend(o, &mut Errors::new(file))),
            None => Some(BackendSpec::Memory(MemoryBackendSpec {
                create_delay: Duration::ZERO,
                provision_delay: Duration::ZERO,
                failure: None,
            })),
        },
    };
    if matches!(backend, Some(BackendSpec::Kwok(_))) && capacity.is_none() && !g.has("capacity") {
        errs.push(
            "capacity",
            None,
            "is required by the kwok backend, which creates Node objects from the template",
        );
    }
    // Judged from the type as written, so a clusterapi group whose backend has another
    // mistake still hears about its missing capacity.
    let clusterapi = g
        .raw("backend")
        .and_then(|b| b.get("type"))
        .and_then(Value::as_str)
        == Some("clusterapi");
    if clusterapi && capacity.is_none() && !g.has("capacity") {
        errs.push(
            "capacity",
            None,
            "is required by the clusterapi backend: it is the template node CA plans with before a Machine exists",
        );
    }
    if let Some(BackendSpec::Kwok(k)) = &backend
        && !k.device_delay.is_zero()
        && rdma.is_none()
        && !g.has("rdma")
    {
        errs.push(
            "backend.deviceDelay",
            None,
            "delays the RDMA resources, so it requires an `rdma` section",
        );
    }
    let autoscaling_options = g.obj("autoscalingOptions", errs).map(|o| options(o, errs));
    g.finish(errs);
    Some(NodeGroupSpec {
        id: NodeGroupId::new(id?),
        min_size: u32::try_from(min_size?).ok()?,
        max_size: u32::try_from(max_size?).ok()?,
        instance_type: instance_type?,
        region: region?,
        zone: zone?,
        os,
        arch,
        capacity,
        reserved,
        gpu,
        rdma,
        csi,
        labels,
        taints,
        topology,
        price_per_hour,
        backend: backend?,
        autoscaling_options,
        source: file.to_path_buf(),
    })
}

fn parse_capacity(mut c: Obj<'_>, required: bool, errs: &mut Errors) -> Option<Capacity> {
    let cpu = c.quantity("cpu", errs);
    let memory = c.quantity("memory", errs);
    let ephemeral_storage = c.quantity("ephemeralStorage", errs);
    let pods = c.int("pods", if required { 1 } else { 0 }, 1_000_000, errs);
    if required {
        for (key, present) in [
            ("cpu", cpu.is_some()),
            ("memory", memory.is_some()),
            ("pods", pods.is_some()),
        ] {
            if !present && !c.has(key) {
                c.missing(key, errs);
            }
        }
        if ephemeral_storage.is_none() && !c.has("ephemeralStorage") {
            // The scheduler, and Cluster Autoscaler's simulation of it, reads a resource
            // missing from a node's allocatable as zero: no default would be right.
            errs.push(
                &c.path("ephemeralStorage"),
                None,
                "is required: a node without it is read as having none, so any pod requesting ephemeral storage would never fit; set the node's local disk (kubelet reports it as ephemeral-storage)",
            );
        }
    }
    c.finish(errs);
    Some(Capacity {
        cpu: if required {
            cpu?
        } else {
            cpu.unwrap_or_default()
        },
        memory: if required {
            memory?
        } else {
            memory.unwrap_or_default()
        },
        ephemeral_storage: if required {
            ephemeral_storage?
        } else {
            ephemeral_storage.unwrap_or_default()
        },
        pods: u64::try_from(if required { pods? } else { pods.unwrap_or(0) }).ok()?,
    })
}

fn gpu(mut o: Obj<'_>, defaults: &GroupDefaults, errs: &mut Errors) -> Option<GpuSpec> {
    let count = o.int("count", 1, 1024, errs);
    if count.is_none() && !o.has("count") {
        o.missing("count", errs);
    }
    let product = o.required_string("product", errs);
    if let Some(p) = &product
        && let Err(e) = check_label_value(p)
    {
        errs.push(
            &o.path("product"),
            Some(&Value::String(p.clone())),
            format!("must be usable as a label value: {e}"),
        );
    }
    let memory = o.quantity("memory", errs);
    if memory.is_none() && !o.has("memory") {
        o.missing("memory", errs);
    }
    let resource_name = o
        .string("resourceName", errs)
        .unwrap_or_else(|| defaults.gpu_resource.clone());
    if let Err(e) = check_resource_name(&resource_name) {
        errs.push(
            &o.path("resourceName"),
            Some(&Value::String(resource_name.clone())),
            e,
        );
    }
    o.finish(errs);
    Some(GpuSpec {
        count: u32::try_from(count?).ok()?,
        product: product?,
        memory: memory?,
        resource_name,
    })
}

fn rdma(mut o: Obj<'_>, defaults: &GroupDefaults, errs: &mut Errors) -> Option<RdmaSpec> {
    let resource_name = o.required_string("resourceName", errs);
    if let Some(r) = &resource_name
        && let Err(e) = check_resource_name(r)
    {
        errs.push(&o.path("resourceName"), Some(&Value::String(r.clone())), e);
    }
    let devices = o.int("devices", 1, 1024, errs);
    if devices.is_none() && !o.has("devices") {
        o.missing("devices", errs);
    }
    let bandwidth = o.int("bandwidthGbps", 1, 1_000_000, errs);
    if bandwidth.is_none() && !o.has("bandwidthGbps") {
        o.missing("bandwidthGbps", errs);
    }
    let bandwidth_resource_name = o
        .string("bandwidthResourceName", errs)
        .unwrap_or_else(|| defaults.rdma_bandwidth_resource.clone());
    if let Err(e) = check_resource_name(&bandwidth_resource_name) {
        errs.push(
            &o.path("bandwidthResourceName"),
            Some(&Value::String(bandwidth_resource_name.clone())),
            e,
        );
    }
    o.finish(errs);
    Some(RdmaSpec {
        resource_name: resource_name?,
        devices: u32::try_from(devices?).ok()?,
        bandwidth_gbps: u32::try_from(bandwidth?).ok()?,
        bandwidth_resource_name,
    })
}

fn taint(mut o: Obj<'_>, errs: &mut Errors) -> Option<Taint> {
    let key = o.required_string("key", errs);
    if let Some(k) = &key
        && let Err(e) = check_label_key(k)
    {
        errs.push(&o.path("key"), Some(&Value::String(k.clone())), e);
    }
    let value = o.string("value", errs).unwrap_or_default();
    if let Err(e) = check_label_value(&value) {
        errs.push(&o.path("value"), Some(&Value::String(value.clone())), e);
    }
    let effect = o.required_string("effect", errs).and_then(|e| {
        let parsed = TaintEffect::parse(&e);
        if parsed.is_none() {
            errs.push(
                &o.path("effect"),
                Some(&Value::String(e)),
                "must be NoSchedule, PreferNoSchedule or NoExecute",
            );
        }
        parsed
    });
    o.finish(errs);
    Some(Taint {
        key: key?,
        value,
        effect: effect?,
    })
}

fn backend(mut o: Obj<'_>, errs: &mut Errors) -> Option<BackendSpec> {
    let kind = o
        .string("type", errs)
        .unwrap_or_else(|| "memory".to_owned());
    let spec = match kind.as_str() {
        "memory" => {
            let create_delay = o.duration("createDelay", errs).unwrap_or(Duration::ZERO);
            let provision_delay = o.duration("provisionDelay", errs).unwrap_or(Duration::ZERO);
            let failure = o.obj("failure", errs).and_then(|f| failure(f, errs));
            Some(BackendSpec::Memory(MemoryBackendSpec {
                create_delay,
                provision_delay,
                failure,
            }))
        }
        "kwok" => {
            let provision_delay = o.duration("provisionDelay", errs).unwrap_or(Duration::ZERO);
            let provision_stagger = o
                .duration("provisionStagger", errs)
                .unwrap_or(Duration::ZERO);
            let device_delay = o.duration("deviceDelay", errs).unwrap_or(Duration::ZERO);
            let failure = o.obj("failure", errs).and_then(|f| failure(f, errs));
            let attach = o.obj("attach", errs).map(|mut a| {
                let delay = a.duration("delay", errs).unwrap_or(Duration::ZERO);
                let fail_driver = a.string("failDriver", errs);
                a.finish(errs);
                AttachSimulation { delay, fail_driver }
            });
            Some(BackendSpec::Kwok(KwokBackendSpec {
                provision_delay,
                provision_stagger,
                device_delay,
                failure,
                attach,
            }))
        }
        "clusterapi" => {
            let md = o.obj("machineDeployment", errs);
            if md.is_none() && !o.has("machineDeployment") {
                errs.push(
                    &o.path("machineDeployment"),
                    None,
                    "is required by the clusterapi backend: {namespace, name} of the MachineDeployment the group scales",
                );
            }
            md.and_then(|mut m| {
                let namespace = m.string("namespace", errs);
                let name = m.string("name", errs);
                for (field, value, check) in [
                    (
                        "namespace",
                        &namespace,
                        check_dns_label as fn(&str) -> Result<(), String>,
                    ),
                    ("name", &name, check_dns_subdomain),
                ] {
                    match value {
                        None if !m.has(field) => errs.push(&m.path(field), None, "is required"),
                        Some(v) => {
                            if let Err(e) = check(v) {
                                errs.push(&m.path(field), Some(&Value::String(v.clone())), e);
                            }
                        }
                        None => {}
                    }
                }
                m.finish(errs);
                Some(BackendSpec::ClusterApi(ClusterApiBackendSpec {
                    namespace: namespace?,
                    name: name?,
                }))
            })
        }
        other => {
            errs.push(
                &o.path("type"),
                Some(&Value::String(other.to_owned())),
                "unknown backend; supported: memory, kwok, clusterapi",
            );
            // The other keys cannot be judged without a known type: reporting them as
            // unknown fields would bury the one real mistake.
            return None;
        }
    };
    o.finish(errs);
    spec
}

fn failure(mut f: Obj<'_>, errs: &mut Errors) -> Option<SimulatedFailure> {
    let after = f
        .int("afterInstances", 0, i64::from(u32::MAX), errs)
        .unwrap_or(0);
    let code = f
        .string("code", errs)
        .unwrap_or_else(|| "stockout".to_owned());
    let parsed = ErrorCode::parse(&code);
    if parsed.is_none() {
        let all: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        errs.push(
            &f.path("code"),
            Some(&Value::String(code)),
            format!("must be one of: {}", all.join(", ")),
        );
    }
    f.finish(errs);
    Some(SimulatedFailure {
        after_instances: u32::try_from(after).ok()?,
        code: parsed?,
    })
}

fn options(mut o: Obj<'_>, errs: &mut Errors) -> AutoscalingOptionOverrides {
    let out = AutoscalingOptionOverrides {
        scale_down_utilization_threshold: o.float("scaleDownUtilizationThreshold", 0.0, 1.0, errs),
        scale_down_gpu_utilization_threshold: o.float(
            "scaleDownGpuUtilizationThreshold",
            0.0,
            1.0,
            errs,
        ),
        zero_or_max_node_scaling: o.bool("zeroOrMaxNodeScaling", errs),
        ignore_daemon_sets_utilization: o.bool("ignoreDaemonSetsUtilization", errs),
        scale_down_unneeded_time: o.duration("scaleDownUnneededTime", errs),
        scale_down_unready_time: o.duration("scaleDownUnreadyTime", errs),
        max_node_provision_time: o.duration("maxNodeProvisionTime", errs),
    };
    o.finish(errs);
    out
}

/// Keys that gangscaler derives itself; a group may not set them through `labels`/`topology`.
const DERIVED_LABELS: [&str; 10] = [
    labels::OS,
    labels::ARCH,
    labels::HOSTNAME,
    labels::INSTANCE_TYPE,
    labels::ZONE,
    labels::REGION,
    labels::GPU_PRODUCT,
    labels::GPU_COUNT,
    labels::GPU_MEMORY,
    labels::NODE_GROUP,
];

fn label_map(
    g: &mut Obj<'_>,
    key: &'static str,
    gpu_label: &str,
    errs: &mut Errors,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in g.map(key, errs) {
        let path = format!("{key}.{k}");
        if let Err(e) = check_label_key(&k) {
            errs.push(
                &path,
                Some(&Value::String(k.clone())),
                format!("label key {e}"),
            );
        }
        if DERIVED_LABELS.contains(&k.as_str()) || k == gpu_label {
            errs.push(
                &path,
                Some(v),
                "is set by gangscaler from the group's own fields; set that field instead",
            );
        }
        let value = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            other => {
                errs.push(&path, Some(other), "must be a string");
                continue;
            }
        };
        if let Err(e) = check_label_value(&value) {
            errs.push(&path, Some(v), format!("label value {e}"));
        }
        out.insert(k, value);
    }
    out
}

fn check_dns_label(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err("must be a DNS label: 1-63 lowercase letters, digits or '-', starting and ending alphanumeric".to_owned())
    }
}

fn check_dns_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 253 {
        return Err("must be 1-253 characters".to_owned());
    }
    for part in s.split('.') {
        let ok = !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !part.starts_with('-')
            && !part.ends_with('-');
        if !ok {
            return Err(
                "must be a DNS subdomain (lowercase letters, digits, '-' and '.')".to_owned(),
            );
        }
    }
    Ok(())
}

fn check_name_part(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && s.as_bytes().last().is_some_and(u8::is_ascii_alphanumeric);
    if ok {
        Ok(())
    } else {
        Err(
            "name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
                .to_owned(),
        )
    }
}

fn check_label_key(s: &str) -> Result<(), String> {
    match s.split_once('/') {
        Some((prefix, name)) => {
            check_dns_subdomain(prefix).map_err(|e| format!("prefix {e}"))?;
            check_name_part(name)
        }
        None => check_name_part(s),
    }
}

fn check_label_value(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Ok(());
    }
    check_name_part(s).map_err(|_| {
        "must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
            .to_owned()
    })
}

fn check_resource_name(s: &str) -> Result<(), String> {
    match s.split_once('/') {
        Some(_) => check_label_key(s).map_err(|e| format!("extended resource name {e}")),
        None => Err("extended resource name must be qualified, like example.com/name".to_owned()),
    }
}
