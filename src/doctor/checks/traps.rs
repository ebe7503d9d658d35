//! Known upstream traps for the versions found.

use serde_json::Value;

use super::SchedulerGates;
use crate::doctor::flags;
use crate::doctor::{Observed, Row, Status};

pub(super) fn rows(o: &Observed, minor: Option<u32>, scheduler_gates: &SchedulerGates) -> Vec<Row> {
    vec![
        scheduler_dra(o, minor),
        ca_gangs(o),
        api_removal(minor, scheduler_gates, v1alpha3_composites(o)),
    ]
}

/// Whether `v1alpha3` serves `compositepodgroups` (1.37's CompositePodGroup version).
fn v1alpha3_composites(o: &Observed) -> bool {
    o.served.as_ref().is_ok_and(|s| {
        s.iter().any(|v| {
            v.version == "v1alpha3" && v.resources.iter().any(|r| r == "compositepodgroups")
        })
    })
}

/// The gates 1.38 removed that gang clusters of 1.37 may set (k8s.io/kubernetes
/// v1.38.0-beta.0 `pkg/features` has neither): `preemptionPolicy` of PodGroups and their
/// templates needs no gate from 1.38, and DRA was locked on since 1.35.
pub(super) const REMOVED_IN_1_38: [&str; 2] =
    ["PodGroupPreemptionPolicy", "DynamicResourceAllocation"];

/// How a KubeSchedulerConfiguration keeps DynamicResources out of the gang post-filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraPostFilter {
    /// Every profile disables DynamicResources at `podGroupPostFilter` (or `*` there), and
    /// keeps the rest of the plugin: the least that avoids the trap.
    PostFilterOff,
    /// Every profile disables the whole plugin (`multiPoint`), DRA included.
    PluginOff,
    /// Some profile (or the default one, without profiles) runs it.
    On,
}

/// Whether every profile of a KubeSchedulerConfiguration keeps DynamicResources out of
/// `podGroupPostFilter`, and how ([`DraPostFilter`]); a configuration without profiles runs
/// the default one, with it.
///
/// # Errors
/// The text is not YAML.
pub fn dra_post_filter(text: &str) -> Result<DraPostFilter, String> {
    let v = crate::yaml::config_value(text, &crate::yaml::CONFIG).map_err(|e| e.to_string())?;
    let Some(profiles) = v.get("profiles").and_then(Value::as_array) else {
        return Ok(DraPostFilter::On);
    };
    let disabled_at = |p: &Value, point: &str| {
        p.pointer(&format!("/plugins/{point}/disabled"))
            .and_then(Value::as_array)
            .is_some_and(|d| {
                d.iter().any(|e| {
                    matches!(
                        e.get("name").and_then(Value::as_str),
                        Some("DynamicResources" | "*")
                    )
                })
            })
    };
    if profiles.is_empty() {
        return Ok(DraPostFilter::On);
    }
    if profiles.iter().all(|p| disabled_at(p, "multiPoint")) {
        return Ok(DraPostFilter::PluginOff);
    }
    let off = |p: &Value| disabled_at(p, "multiPoint") || disabled_at(p, "podGroupPostFilter");
    Ok(if profiles.iter().all(off) {
        DraPostFilter::PostFilterOff
    } else {
        DraPostFilter::On
    })
}

/// The kube-scheduler minors whose DynamicResources plugin has the gang post-filter trap:
/// 1.37 (read and reproduced in 1.37.2) and 1.38 (the same code in 1.38.0-beta.0).
const TRAP_MINORS: [u32; 2] = [37, 38];

fn scheduler_dra(o: &Observed, minor: Option<u32>) -> Row {
    const ID: &str = "trap/scheduler-dra-podgroup-postfilter";
    let trap = "kube-scheduler 1.37+: DynamicResources' PodGroupPostFilter reads state its \
                PreFilter writes for every member (claims or not), and fails with \"not found\" \
                in a gang's cycle where no member reached that PreFilter: when the cluster has \
                no Node at all, while fewer member pods exist than minCount, or when an earlier \
                PreFilter rejects every member (e.g. a missing PVC); the members then get \
                PodScheduled=False/SchedulerError, not Unschedulable, and CA ignores them";
    let fix = "run kube-scheduler with --config whose every profile has plugins.podGroupPostFilter.disabled: \
               [{name: DynamicResources}] (DRA itself stays on; see docs/limits.md)";
    let scheduler_minor = o
        .scheduler
        .version
        .as_ref()
        .map(|v| v.value.minor)
        .or(minor);
    match scheduler_minor {
        None => return Row::new(ID, Status::Unknown, "kube-scheduler's minor is unknown", ""),
        Some(m) if m < TRAP_MINORS[0] => {
            return Row::new(
                ID,
                Status::Ok,
                format!(
                    "does not apply to kube-scheduler 1.{m} (its DynamicResources has no PodGroupPostFilter)"
                ),
                "",
            );
        }
        Some(m) if !TRAP_MINORS.contains(&m) => {
            return Row::new(
                ID,
                Status::Unknown,
                format!(
                    "kube-scheduler 1.{m} is newer than doctor knows; the 1.37/1.38 trap is not checked"
                ),
                fix,
            );
        }
        Some(_) => {}
    }
    // Where the trap fires on every cycle: a cluster without any Node (every member stops
    // before PreFilter with "no nodes available").
    let severity = match &o.nodes {
        Ok(nodes) if nodes.is_empty() => (
            Status::Error,
            "the cluster has no Node now, so every gang's cycle fails",
        ),
        Ok(_) => (
            Status::Warn,
            "the cluster has Nodes, so it fails only in the cycles above",
        ),
        Err(_) => (Status::Warn, "the Nodes could not be listed"),
    };
    let unfixed = |why: String| {
        Row::new(
            ID,
            severity.0,
            format!("{trap}; {why}; {}", severity.1),
            fix,
        )
    };
    let Some(sched_flags) = &o.scheduler.flags else {
        return Row::new(
            ID,
            Status::Warn,
            format!("{trap}; kube-scheduler's flags unknown, so the workaround cannot be checked"),
            format!("{fix}; pass --scheduler-flags to check"),
        );
    };
    if flags::last(&sched_flags.value, "config").is_none() {
        return unfixed(
            "kube-scheduler runs without --config, so the default profile runs it".to_owned(),
        );
    }
    match &o.scheduler_config {
        Some(c) => match c.text.as_ref().map(|t| dra_post_filter(t)) {
            Ok(Ok(DraPostFilter::PostFilterOff)) => Row::new(
                ID,
                Status::Ok,
                format!(
                    "kube-scheduler's DynamicResources/PodGroupPostFilter trap: worked around \
                     ({} disables DynamicResources at podGroupPostFilter in every profile; DRA \
                     stays on)",
                    c.path
                ),
                "",
            ),
            Ok(Ok(DraPostFilter::PluginOff)) => Row::new(
                ID,
                Status::Ok,
                format!(
                    "kube-scheduler's DynamicResources/PodGroupPostFilter trap: worked around \
                     ({} disables the whole DynamicResources plugin, so no workload can use DRA \
                     claims; disabling it at podGroupPostFilter alone is enough)",
                    c.path
                ),
                "",
            ),
            Ok(Ok(DraPostFilter::On)) => unfixed(format!(
                "{} leaves DynamicResources' PodGroupPostFilter on",
                c.path
            )),
            Ok(Err(e)) => Row::new(
                ID,
                Status::Warn,
                format!("{trap}; {} does not read as YAML: {e}", c.path),
                fix,
            ),
            Err(e) => Row::new(
                ID,
                Status::Warn,
                format!("{trap}; cannot read {} here ({e}) to check", c.path),
                fix,
            ),
        },
        None => Row::new(
            ID,
            Status::Warn,
            format!("{trap}; kube-scheduler's --config was not read"),
            fix,
        ),
    }
}

fn ca_gangs(o: &Observed) -> Row {
    const ID: &str = "trap/ca-gang-semantics";
    let ca =
        o.ca.version
            .as_ref()
            .map_or_else(|| "CA".to_owned(), |v| format!("CA {}", v.value));
    Row::new(
        ID,
        Status::Ok,
        format!(
            "{ca} has no gang semantics (1.35 to 1.38 alike): it sees members pod by pod \
             and may add part of a gang; gangscaler, as its externalgrpc provider, makes each \
             ask whole or refuses it"
        ),
        "",
    )
}

/// What the next minor removes; on 1.38, the removed gates still set. `composites`: the
/// cluster serves v1alpha3 CompositePodGroups (1.37), which should move to v1beta1 for 1.38.
fn api_removal(minor: Option<u32>, scheduler_gates: &SchedulerGates, composites: bool) -> Row {
    const ID: &str = "trap/api-removal";
    // The 1.38-removed gates kube-scheduler's flags set (`None`: its flags are unknown or do
    // not read; gate/GenericWorkload reports the latter).
    let set: Option<Vec<&str>> = match scheduler_gates {
        Some(Ok(g)) => Some(
            REMOVED_IN_1_38
                .into_iter()
                .filter(|r| g.contains_key(*r))
                .collect(),
        ),
        _ => None,
    };
    let removed = REMOVED_IN_1_38.join(" and ");
    match minor {
        Some(35) => Row::new(
            ID,
            Status::Warn,
            "1.36 removes scheduling.k8s.io/v1alpha1 and pod spec.workloadRef (replaced by \
             v1alpha2 PodGroups and spec.schedulingGroup.podGroupName)",
            "before upgrading: let gangs finish, delete v1alpha1 Workloads, move controllers to \
             v1alpha2 PodGroups and spec.schedulingGroup",
        ),
        Some(36) => Row::new(
            ID,
            Status::Warn,
            "1.37 removes scheduling.k8s.io/v1alpha2 (v1beta1 and v1alpha3 replace it; PodGroup's \
             podGroupTemplateRef becomes workloadRef) and merges GangScheduling into \
             GenericWorkload",
            "before upgrading: let gangs finish, delete v1alpha2 objects, move controllers to \
             v1beta1, enable --runtime-config=scheduling.k8s.io/v1beta1=true, remove \
             GangScheduling from every --feature-gates",
        ),
        Some(37) => {
            let upgrade = "1.38 keeps Workload and PodGroup at v1beta1 (the same fields) and \
                           serves CompositePodGroup at v1beta1 too (beta; it still serves v1alpha3 \
                           when asked, but kube-scheduler 1.38 reads v1beta1 only)";
            let convert = if composites {
                "; move manifests and controllers that write v1alpha3 CompositePodGroups to \
                 v1beta1 (gangscaler convert --to 1.38)"
            } else {
                ""
            };
            match set {
                Some(set) if !set.is_empty() => Row::new(
                    ID,
                    Status::Warn,
                    format!(
                        "{upgrade}; it removes the gates {removed}, and kube-scheduler's flags set \
                         {}: a component given an unknown gate refuses to start",
                        set.join(", ")
                    ),
                    format!(
                        "before upgrading to 1.38: remove {} from every component's \
                         --feature-gates (preemptionPolicy needs no gate in 1.38; DRA stays \
                         on){convert}",
                        set.join(" and ")
                    ),
                ),
                Some(_) => Row::new(
                    ID,
                    Status::Ok,
                    format!(
                        "{upgrade}; it removes the gates {removed}, which kube-scheduler's flags \
                         do not set"
                    ),
                    convert
                        .strip_prefix("; ")
                        .map(|c| format!("before upgrading to 1.38: {c}"))
                        .unwrap_or_default(),
                ),
                None => Row::new(
                    ID,
                    Status::Ok,
                    format!(
                        "{upgrade}; it removes the gates {removed} (kube-scheduler's flags \
                         unknown: check that no component sets them)"
                    ),
                    format!(
                        "before upgrading to 1.38: remove {removed} from every --feature-gates \
                         that sets them{convert}"
                    ),
                ),
            }
        }
        Some(38) => match set {
            Some(set) if !set.is_empty() => Row::new(
                ID,
                Status::Error,
                format!(
                    "kube-scheduler's flags set {}, which 1.38 removed: a component given an \
                     unknown gate refuses to start",
                    set.join(", ")
                ),
                format!(
                    "remove {} from every component's --feature-gates",
                    set.join(" and ")
                ),
            ),
            Some(_) => Row::new(
                ID,
                Status::Ok,
                format!(
                    "no removal after 1.38 known to doctor; the gates 1.38 removed ({removed}) \
                     are not set in kube-scheduler's flags"
                ),
                "",
            ),
            None => Row::new(
                ID,
                Status::Ok,
                format!(
                    "no removal after 1.38 known to doctor; 1.38 removed the gates {removed} \
                     (kube-scheduler's flags unknown: check that no component sets them)"
                ),
                "",
            ),
        },
        Some(m) if m > 38 => Row::new(
            ID,
            Status::Unknown,
            format!("1.{m} is newer than doctor knows"),
            "",
        ),
        _ => Row::new(ID, Status::Unknown, "the cluster's minor is unknown", ""),
    }
}
