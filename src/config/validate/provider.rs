//! The provider file, `provider.yaml`: its sections in order, and the defaults node groups
//! inherit. The `server` and `leaderElection` sections have modules of their own.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::GroupDefaults;
use super::backend::backend;
use super::leader::leader_election;
use super::names::{check_dns_label, check_dns_subdomain, check_label_key, check_resource_name};
use super::server::{Bounds, server_settings};
use crate::config::walk::{Errors, Obj};
use crate::config::{
    AuditSettings, DeferralSettings, KubernetesSettings, LifecycleSettings, ProviderSettings,
};
use crate::model::labels;

/// Bounds of `lifecycle.interval`.
const LIFECYCLE_INTERVAL: Bounds = (
    Duration::from_millis(100),
    Duration::from_secs(10 * 60),
    "from 100ms to 10m",
);
/// Bounds of every `lifecycle.*Timeout` and of `lifecycle.noVerdictAfter` (above zero).
const LIFECYCLE_TIMEOUT: Bounds = (
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
    let server = server_settings(root.obj_or_empty("server", errs), dir, errs);
    let (gpu_label, gpu_types) = gpu(&mut root, errs);
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
        reservation: crate::model::ReservationSpec::default(),
    };
    if let Some(d) = root.obj("defaults", errs) {
        group_defaults(d, &mut defaults, errs);
    }
    let kubernetes = kubernetes_settings(root.obj_or_empty("kubernetes", errs), dir, errs);
    let (admission_policy, admission_order, deferral) =
        admission(root.obj_or_empty("admission", errs), errs);
    let audit = root.obj("audit", errs).and_then(|a| audit(a, dir, errs));
    if deferral.enabled {
        let missing = if admission_policy != crate::planner::Policy::Strict {
            Some("admission.policy strict (roundUp and off add what CA asks, so nothing waits)")
        } else if audit.is_none() || !kubernetes.watch {
            Some("audit.path and kubernetes.watch (the lifecycle loop marks the pods)")
        } else {
            None
        };
        if let Some(missing) = missing {
            errs.push(
                "admission.deferral.enabled",
                Some(&Value::Bool(true)),
                format!("needs {missing}"),
            );
        }
    }
    let lifecycle = lifecycle_settings(root.obj_or_empty("lifecycle", errs), errs);
    let leader_election = leader_election(root.obj_or_empty("leaderElection", errs), env, errs);
    if let Some(audit) = root.raw("audit").and_then(|a| a.get("path")) {
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
        admission_order,
        deferral,
        audit,
        lifecycle,
        leader_election,
    });
    (settings, defaults)
}

/// The `gpu` section: the GPU label (its default when absent) and the GPU types, if listed.
fn gpu(root: &mut Obj<'_>, errs: &mut Errors) -> (String, Option<Vec<String>>) {
    let mut gpu_label = labels::DEFAULT_GPU_LABEL.to_owned();
    let mut gpu_types = None;
    let Some(mut gpu) = root.obj("gpu", errs) else {
        return (gpu_label, gpu_types);
    };
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
    (gpu_label, gpu_types)
}

/// The `defaults` section, into `defaults`.
fn group_defaults(mut d: Obj<'_>, defaults: &mut GroupDefaults, errs: &mut Errors) {
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
        defaults.backend = d.raw("backend").cloned();
    }
    if let Some(r) = d.obj("reservation", errs) {
        defaults.reservation = super::reservation::section(r, defaults.reservation, errs).0;
    }
    d.finish(errs);
}

/// The `audit` section; `None` without a valid `path` (reported).
fn audit(mut a: Obj<'_>, dir: &Path, errs: &mut Errors) -> Option<AuditSettings> {
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
    Some(AuditSettings {
        path: path?,
        max_bytes,
        keep_files,
        stdout,
        file_mode,
    })
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

/// The `lifecycle` section. Absent keys, and keys with an invalid value (reported), take the
/// defaults.
fn lifecycle_settings(mut l: Obj<'_>, errs: &mut Errors) -> LifecycleSettings {
    let defaults = LifecycleSettings::default();
    let mut bounded =
        |key: &'static str, default: Duration, (min, max, bounds): Bounds, errs: &mut Errors| {
            let Some(d) = l.duration(key, errs) else {
                return default;
            };
            if d.is_zero() || d < min || d > max {
                errs.push(
                    &l.path(key),
                    l.raw(key),
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

/// The `admission` section: the gang admission policy, the order of gangs of one priority,
/// and deferral.
fn admission(
    mut a: Obj<'_>,
    errs: &mut Errors,
) -> (
    crate::planner::Policy,
    crate::planner::Order,
    DeferralSettings,
) {
    use crate::planner::{Order, Policy};
    let policy = a
        .one_of(
            "policy",
            &[
                ("strict", Policy::Strict),
                ("roundUp", Policy::RoundUp),
                ("off", Policy::Off),
            ],
            errs,
        )
        .unwrap_or_default();
    let order = a
        .one_of(
            "order",
            &[("age", Order::Age), ("fewestMissing", Order::FewestMissing)],
            errs,
        )
        .unwrap_or_default();
    let deferral = deferral(a.obj_or_empty("deferral", errs), errs);
    a.finish(errs);
    (policy, order, deferral)
}

/// Bounds of `admission.deferral.horizon`: at least a few CA loops, at most an hour (a mark
/// outlives a stopped gangscaler by this much).
const DEFERRAL_HORIZON: Bounds = (
    Duration::from_secs(30),
    Duration::from_secs(60 * 60),
    "from 30s to 1h",
);

/// The `admission.deferral` section. Absent keys, and keys with an invalid value (reported),
/// take the defaults.
fn deferral(mut d: Obj<'_>, errs: &mut Errors) -> DeferralSettings {
    let defaults = DeferralSettings::default();
    let enabled = d.bool("enabled", errs).unwrap_or(defaults.enabled);
    let horizon = match d.duration("horizon", errs) {
        Some(h) if h >= DEFERRAL_HORIZON.0 && h <= DEFERRAL_HORIZON.1 => h,
        Some(_) => {
            errs.push(
                &d.path("horizon"),
                d.raw("horizon"),
                format!("must be a duration {}", DEFERRAL_HORIZON.2),
            );
            defaults.horizon
        }
        None => defaults.horizon,
    };
    let ca_new_pod_scale_up_delay = d
        .duration("caNewPodScaleUpDelay", errs)
        .unwrap_or(defaults.ca_new_pod_scale_up_delay);
    d.finish(errs);
    DeferralSettings {
        enabled,
        horizon,
        ca_new_pod_scale_up_delay,
    }
}

/// The `kubernetes` section: cluster access and where durable state is kept.
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
