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
    // 1.37 and 1.38 also serve v1alpha3 (1.37's CompositePodGroup) when asked: the roll-back
    // turns it off too.
    if api.composite.is_some() {
        api_off[1].push_str(&format!(",{GROUP}/v1alpha3=false"));
    }
    let api_note = match api.composite {
        Some(c) if c.in_lines => format!(
            "first: the API, the pod field and CompositePodGroup (served at {}); {} are for \
             CompositePodGroups and topology constraints: leave them out if you use neither",
            c.version,
            c.gates.join(" and ")
        ),
        Some(c) => format!(
            "first; CompositePodGroup also needs {GROUP}/{}=true and the gates {}",
            c.version,
            c.gates
                .iter()
                .rev()
                .map(|g| format!("{g}=true"))
                .collect::<Vec<_>>()
                .join(",")
        ),
        None => "first: the API and the pod field".to_owned(),
    };
    let sched_note = match api.composite {
        Some(c) if c.in_lines => format!(
            "gang scheduling follows GenericWorkload from 1.37; kube-scheduler 1.{} reads \
             CompositePodGroups at {} only",
            api.minor(),
            c.version
        ),
        Some(_) => "gang scheduling follows GenericWorkload from 1.37".to_owned(),
        None => "GangScheduling is the scheduler's gang plugin".to_owned(),
    };
    let ca_note = "no flag or gate gives CA gang semantics: run it with \
                   --cloud-provider=externalgrpc against gangscaler";
    Lines {
        minor: format!("1.{}", api.minor()),
        enable: vec![
            c("kube-apiserver", api_on, &api_note),
            c(
                "kube-controller-manager",
                vec![on.clone()],
                "the same gates on every component",
            ),
            c("kube-scheduler", vec![on], &sched_note),
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
             link.{} Let running gangs finish first.",
            api.link_path,
            if api.composite.is_some_and(|c| c.in_lines) {
                " With CompositePodGroup off, CompositePodGroups become unreachable the same \
                 way and kube-apiserver drops spec.parentCompositePodGroupName from PodGroups \
                 written meanwhile, so each is a gang of its own."
            } else {
                ""
            }
        ),
    }
}
