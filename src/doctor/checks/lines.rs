//! The flags that turn gang admission on for a minor, and roll it back.

use super::{GROUP, GangApiRequirements, gates_value};
use crate::doctor::{ComponentFlags, Lines};

/// The enable and roll-back flags for `api`'s minor.
pub fn lines_for(api: &GangApiRequirements) -> Lines {
    let gv = api.group_version();
    let on = format!("--feature-gates={}", gates_value(api, true));
    let off = format!("--feature-gates={}", gates_value(api, false));
    let c = |component: &str, flags: Vec<String>, note: &str| ComponentFlags {
        component: component.to_owned(),
        flags,
        note: note.to_owned(),
    };
    let api_on = vec![on.clone(), format!("--runtime-config={gv}=true")];
    let mut api_off = vec![off.clone(), format!("--runtime-config={gv}=false")];
    let api_note = if api.minor() == 37 {
        api_off[1].push_str(&format!(",{GROUP}/v1alpha3=false"));
        "first; CompositePodGroup also needs scheduling.k8s.io/v1alpha3=true and the gates \
         CompositePodGroup=true,TopologyAwareWorkloadScheduling=true"
    } else {
        "first: the API and the pod field"
    };
    let sched_note = if api.minor() == 37 {
        "gang scheduling follows GenericWorkload from 1.37"
    } else {
        "GangScheduling is the scheduler's gang plugin"
    };
    let ca_note = "no flag or gate gives CA gang semantics: run it with \
                   --cloud-provider=externalgrpc against gangscaler";
    Lines {
        minor: format!("1.{}", api.minor()),
        enable: vec![
            c("kube-apiserver", api_on, api_note),
            c(
                "kube-controller-manager",
                vec![on.clone()],
                "the same gates on every component",
            ),
            c("kube-scheduler", vec![on], sched_note),
            c("cluster-autoscaler", Vec::new(), ca_note),
        ],
        rollback: vec![
            c(
                "kube-scheduler",
                vec![off.clone()],
                "first: gangs are then scheduled pod by pod",
            ),
            c("kube-controller-manager", vec![off.clone()], ""),
            c("kube-apiserver", api_off, "last"),
            c(
                "cluster-autoscaler",
                Vec::new(),
                "nothing; gangscaler's admission.policy: off passes CA's asks through unchanged",
            ),
        ],
        warning: format!(
            "with {gv} off, its Workloads and PodGroups stay in etcd but cannot be read or \
             written through the API until it is on again; with GenericWorkload off, \
             kube-apiserver drops {} from pods written meanwhile, so they lose their gang \
             link. Let running gangs finish first.",
            api.link_path
        ),
    }
}
