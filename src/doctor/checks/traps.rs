//! Known upstream traps for the versions found.

use serde_json::Value;

use crate::doctor::flags;
use crate::doctor::{Observed, Row, Status};

pub(super) fn rows(o: &Observed, minor: Option<u32>) -> Vec<Row> {
    vec![scheduler_dra(o, minor), ca_gangs(o), api_removal(minor)]
}

/// Whether a KubeSchedulerConfiguration disables the DynamicResources plugin (by name or `*`
/// under `multiPoint`) in every profile; a configuration without profiles runs the default
/// one, with it.
///
/// # Errors
/// The text is not YAML.
pub fn disables_dynamic_resources(text: &str) -> Result<bool, String> {
    let v = crate::yaml::config_value(text, &crate::yaml::CONFIG).map_err(|e| e.to_string())?;
    let Some(profiles) = v.get("profiles").and_then(Value::as_array) else {
        return Ok(false);
    };
    let off = |p: &Value| {
        p.pointer("/plugins/multiPoint/disabled")
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
    Ok(!profiles.is_empty() && profiles.iter().all(off))
}

fn scheduler_dra(o: &Observed, minor: Option<u32>) -> Row {
    const ID: &str = "trap/scheduler-dra-podgroup-postfilter";
    let trap = "kube-scheduler 1.37 (seen in 1.37.2): the DynamicResources plugin fails in \
                PodGroupPostFilter for gangs without DRA claims, so gang pods never get \
                PodScheduled=False/Unschedulable and CA never sees them";
    let fix = "run kube-scheduler with --config whose profiles disable DynamicResources under \
               plugins.multiPoint.disabled (only where no gang uses DRA claims)";
    let scheduler_minor = o
        .scheduler
        .version
        .as_ref()
        .map(|v| v.value.minor)
        .or(minor);
    match scheduler_minor {
        None => return Row::new(ID, Status::Unknown, "kube-scheduler's minor is unknown", ""),
        Some(m) if m != 37 => {
            return Row::new(
                ID,
                Status::Ok,
                format!("does not apply to kube-scheduler 1.{m}"),
                "",
            );
        }
        Some(_) => {}
    }
    let Some(sched_flags) = &o.scheduler.flags else {
        return Row::new(
            ID,
            Status::Warn,
            format!("{trap}; kube-scheduler's flags unknown, so the workaround cannot be checked"),
            format!("{fix}; pass --scheduler-flags to check"),
        );
    };
    if flags::last(&sched_flags.value, "config").is_none() {
        return Row::new(
            ID,
            Status::Error,
            format!("{trap}; kube-scheduler runs without --config, so DynamicResources is on"),
            fix,
        );
    }
    match &o.scheduler_config {
        Some(c) => match c.text.as_ref().map(|t| disables_dynamic_resources(t)) {
            Ok(Ok(true)) => Row::new(
                ID,
                Status::Ok,
                format!(
                    "kube-scheduler 1.37's DynamicResources/PodGroupPostFilter trap: worked \
                     around ({} disables DynamicResources in every profile)",
                    c.path
                ),
                "",
            ),
            Ok(Ok(false)) => Row::new(
                ID,
                Status::Error,
                format!("{trap}; {} leaves DynamicResources on", c.path),
                fix,
            ),
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
            "{ca} has no gang semantics (1.35, 1.36 and 1.37 alike): it sees members pod by pod \
             and may add part of a gang; gangscaler, as its externalgrpc provider, makes each \
             ask whole or refuses it"
        ),
        "",
    )
}

fn api_removal(minor: Option<u32>) -> Row {
    const ID: &str = "trap/api-removal";
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
        Some(37) => Row::new(ID, Status::Ok, "no removal of v1beta1 known to doctor", ""),
        _ => Row::new(ID, Status::Unknown, "the cluster's minor is unknown", ""),
    }
}
