//! `gate/CompositePodGroup` (1.37+): gangscaler admits a CompositePodGroup's PodGroups as one
//! gang, so when kube-apiserver serves CompositePodGroups, kube-scheduler must honour them
//! too (its gates), and when something uses them (PodGroups naming a parent, the scheduler's
//! gate), kube-apiserver must serve them at the version kube-scheduler reads.
//!
//! Facts (k8s.io/kubernetes v1.37.2 and v1.38.0-beta.0): the gate `CompositePodGroup` (1.37
//! alpha, 1.38 beta, off by default) depends on `GenericWorkload` and
//! `TopologyAwareWorkloadScheduling`, and a component refuses to start with a gate on whose
//! dependency is off; kube-apiserver serves `compositepodgroups` only with the gate on (1.37
//! at `v1alpha3`; 1.38 at `v1beta1` and, when asked, `v1alpha3`), and drops
//! `parentCompositePodGroupName` from PodGroups written with it off; kube-scheduler links
//! PodGroups to their parent only with the gate on, reads CompositePodGroups at `v1alpha3`
//! (1.37) or `v1beta1` (1.38), and waits for that informer to sync before it schedules.

use super::{GROUP, GangApiRequirements, SchedulerGates};
use crate::doctor::{COMPOSITE_CHILDREN_LISTED, Observed, Row, Status};

const ID: &str = "gate/CompositePodGroup";
const GATE: &str = "CompositePodGroup";

/// How many children to name in a message.
const NAMED: usize = 3;

pub(super) fn row(
    o: &Observed,
    api: Option<&GangApiRequirements>,
    scheduler_gates: &SchedulerGates,
) -> Row {
    let Some(api) = api else {
        return Row::new(
            ID,
            Status::Unknown,
            format!("the cluster's minor is unknown or not {}", super::KNOWN),
            "",
        );
    };
    let minor = api.minor();
    let gates = match super::read_gates(ID, scheduler_gates) {
        Ok(g) => g,
        Err(row) => return row,
    };
    let Some(composite) = api.composite else {
        return match gates.and_then(|g| g.get(GATE)) {
            Some(_) => Row::new(
                ID,
                Status::Error,
                format!(
                    "set in kube-scheduler's flags, but 1.{minor} has no CompositePodGroup gate \
                     (it arrives in 1.37): a component given an unknown gate refuses to start"
                ),
                "remove CompositePodGroup from every component's --feature-gates",
            ),
            None => Row::new(
                ID,
                Status::Ok,
                format!(
                    "1.{minor} has no CompositePodGroup (it arrives in 1.37): nothing to check"
                ),
                "",
            ),
        };
    };
    let served = match &o.served {
        Ok(s) => s,
        Err(e) => {
            return Row::new(
                ID,
                Status::Unknown,
                format!("API discovery of {GROUP} failed: {e}"),
                "",
            );
        }
    };
    let at: Vec<&str> = served
        .iter()
        .filter(|s| s.resources.iter().any(|r| r == "compositepodgroups"))
        .map(|s| s.version.as_str())
        .collect();
    let version = composite.version;
    let mut needed: Vec<&str> = api.gates.to_vec();
    needed.extend(composite.gates);
    let all_on = needed
        .iter()
        .map(|g| format!("{g}=true"))
        .collect::<Vec<_>>()
        .join(",");
    let apiserver_line = format!(
        "kube-apiserver --feature-gates={all_on} --runtime-config={GROUP}/{version}=true, and \
         --feature-gates={all_on} on kube-scheduler and kube-controller-manager"
    );
    if at.is_empty() {
        return not_served(o, minor, version, gates, &apiserver_line);
    }
    let apiserver = format!(
        "kube-apiserver serves compositepodgroups at {} (so its CompositePodGroup gate is on, and \
         with it GenericWorkload and TopologyAwareWorkloadScheduling: it does not start with one \
         missing)",
        at.join(", ")
    );
    if !at.contains(&version) {
        return Row::new(
            ID,
            Status::Error,
            format!(
                "{apiserver}, but not at {version}, the only version kube-scheduler 1.{minor} reads \
                 them at: its CompositePodGroup informer cannot list, and it waits for it before \
                 scheduling anything"
            ),
            format!("kube-apiserver --runtime-config={GROUP}/{version}=true"),
        );
    }
    let Some(gates) = gates else {
        return Row::new(
            ID,
            Status::Unknown,
            format!(
                "{apiserver}; kube-scheduler's gates unknown, so whether it honours composites \
                 cannot be checked"
            ),
            "pass --scheduler-flags FILE (kube-scheduler's command line) to check them",
        );
    };
    let off: Vec<&str> = needed
        .iter()
        .copied()
        .filter(|g| gates.get(*g) != Some(&true))
        .collect();
    let scheduler_fix = format!("kube-scheduler --feature-gates={all_on}");
    if off.is_empty() {
        return Row::new(
            ID,
            Status::Ok,
            format!(
                "{apiserver}; on in kube-scheduler with {}, so the scheduler and gangscaler \
                 both treat a composite's PodGroups as one unit",
                api.gates
                    .iter()
                    .chain(composite.gates)
                    .filter(|g| **g != GATE)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
            "",
        );
    }
    if gates.get(GATE) == Some(&true) {
        return Row::new(
            ID,
            Status::Error,
            format!(
                "{apiserver}; kube-scheduler's flags turn CompositePodGroup on but leave {} off: \
                 it refuses to start (CompositePodGroup depends on them)",
                off.join(", ")
            ),
            scheduler_fix,
        );
    }
    Row::new(
        ID,
        Status::Error,
        format!(
            "{apiserver}; kube-scheduler's flags leave {} off (default off): the scheduler ignores \
             the composites and places each child PodGroup as a gang of its own, while gangscaler \
             admits the composite whole",
            off.join(", ")
        ),
        scheduler_fix,
    )
}

/// kube-apiserver serves no CompositePodGroup: fine unless something uses them.
fn not_served(
    o: &Observed,
    minor: u32,
    version: &str,
    gates: Option<&std::collections::BTreeMap<String, bool>>,
    apiserver_line: &str,
) -> Row {
    let mut uses = Vec::new();
    if gates.and_then(|g| g.get(GATE)) == Some(&true) {
        uses.push(format!(
            "kube-scheduler's flags turn CompositePodGroup on, so it waits for a {version} \
             CompositePodGroup informer that cannot list before it schedules anything"
        ));
    }
    let mut listed = String::new();
    match &o.composite_children {
        Ok(children) if !children.is_empty() => {
            let named: Vec<String> = children
                .iter()
                .take(NAMED)
                .map(|c| format!("{}/{} names {}", c.namespace, c.name, c.parent))
                .collect();
            let more = children.len().saturating_sub(NAMED);
            uses.push(format!(
                "{} PodGroup(s) among the first {COMPOSITE_CHILDREN_LISTED} name a parent \
                 CompositePodGroup ({}{}): gangscaler cannot read the parents, so it admits each \
                 as a gang of its own and reports the parent missing",
                children.len(),
                named.join(", "),
                if more > 0 {
                    format!(", and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        Ok(_) => {}
        Err(e) => listed = format!("; PodGroups could not be listed to look for children ({e})"),
    }
    if uses.is_empty() {
        return Row::new(
            ID,
            Status::Ok,
            format!(
                "kube-apiserver serves no compositepodgroups: optional (it drops \
                 spec.parentCompositePodGroupName from PodGroups written meanwhile, so each is a \
                 gang of its own); to use CompositePodGroups on 1.{minor}: {apiserver_line}{listed}"
            ),
            "",
        );
    }
    Row::new(
        ID,
        Status::Error,
        format!(
            "kube-apiserver serves no compositepodgroups (its CompositePodGroup gate, or \
             {GROUP}/{version}, is off), but {}",
            uses.join("; and ")
        ),
        apiserver_line.to_owned(),
    )
}
