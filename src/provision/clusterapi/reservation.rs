//! Node reservation on Cluster API: nothing may land on a new Node before gangscaler assigns
//! it to the gang it was added for, so the Node must carry the reservation taint from
//! registration. gangscaler does not create these Nodes; Cluster API does it for us when the
//! MachineDeployment's template carries the taint with `propagation: OnInitialization`:
//!
//! - the MachineSet copies the template's taints into each new Machine, and changing them
//!   rolls nothing out (taints are mutated in place);
//! - a kubeadm-bootstrapped Node registers under `node.cluster.x-k8s.io/uninitialized`
//!   (NoSchedule), and the Machine controller's first reconcile of the Node removes that taint
//!   and adds the Machine's OnInitialization taints in the same patch, so the Node is never
//!   free of both;
//! - an OnInitialization taint is added only while the Node lacks Cluster API's tracking
//!   annotation, so once gangscaler assigns or releases the Node, Cluster API never puts the
//!   taint back (an `Always` taint would be).
//!
//! The template taint is the user's to declare (a MachineDeployment is theirs, often owned by
//! a ClusterClass topology that would undo a write of ours); [`blocker`] says what is wrong
//! with it, and the engine keeps reservation off for the group until it is right.
//! `docs/reservation.md#cluster-api` cites the Cluster API lines.

use super::super::capi_types::{MachineDeployment, MachineTaint};
use crate::model::reservation::{RESERVATION_EFFECT, RESERVATION_TAINT, UNASSIGNED};

/// The propagation the reservation taint must have.
pub const ON_INITIALIZATION: &str = "OnInitialization";

/// The template taint a reserving group's MachineDeployment must carry, as YAML for messages
/// and docs.
pub fn wanted_taint_yaml() -> String {
    format!(
        "{{key: {RESERVATION_TAINT}, value: {UNASSIGNED}, effect: {}, propagation: {ON_INITIALIZATION}}}",
        RESERVATION_EFFECT.as_str()
    )
}

/// The template taints of `md`, as [`blocker`] reads them.
pub fn template_taints(md: &MachineDeployment) -> &[MachineTaint] {
    &md.spec.template.spec.taints
}

/// Why the Machines of MachineDeployment `name` (`<namespace>/<name>`), whose template has
/// `taints`, would not register under the reservation taint as reservation needs; `None`
/// when they would. `taints` `None` is a MachineDeployment that does not exist.
pub fn blocker(name: &str, taints: Option<&[MachineTaint]>) -> Option<String> {
    let Some(taints) = taints else {
        return Some(format!(
            "reservation is off: MachineDeployment {name} does not exist, so whether its Nodes register under the reservation taint is unknown"
        ));
    };
    let fix = format!(
        "spec.template.spec.taints needs {} (Cluster API's MachineTaintPropagation feature gate on)",
        wanted_taint_yaml()
    );
    let ours: Vec<&MachineTaint> = taints
        .iter()
        .filter(|t| t.key == RESERVATION_TAINT)
        .collect();
    let Some(t) = ours.first() else {
        return Some(format!(
            "reservation is off: MachineDeployment {name} does not register its Nodes under the reservation taint, so a pod could land on a new Node before gangscaler assigns it; {fix}"
        ));
    };
    let problem = if ours.len() > 1 {
        format!("carries the reservation taint {} times", ours.len())
    } else if t.effect != RESERVATION_EFFECT.as_str() {
        format!(
            "has the reservation taint with effect {:?}, not {}",
            t.effect,
            RESERVATION_EFFECT.as_str()
        )
    } else if t.value.as_deref() != Some(UNASSIGNED) {
        format!(
            "has the reservation taint with value {:?}, not {UNASSIGNED} (a new Node is held for no gang until gangscaler assigns it)",
            t.value.as_deref().unwrap_or("")
        )
    } else if t.propagation != ON_INITIALIZATION {
        format!(
            "has the reservation taint with propagation {:?}, not {ON_INITIALIZATION} (Cluster API would put it back after gangscaler assigns or releases the Node)",
            t.propagation
        )
    } else {
        return None;
    };
    Some(format!(
        "reservation is off: MachineDeployment {name}'s template {problem}; {fix}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provision::capi_types::{MachineDeployment, MachineTaint};

    fn md(taints: Vec<MachineTaint>) -> MachineDeployment {
        let mut md = MachineDeployment::default();
        md.spec.template.spec.taints = taints;
        md
    }

    fn reservation(value: &str, effect: &str, propagation: &str) -> MachineTaint {
        MachineTaint {
            key: RESERVATION_TAINT.into(),
            value: Some(value.into()),
            effect: effect.into(),
            propagation: propagation.into(),
        }
    }

    fn gpu() -> MachineTaint {
        MachineTaint {
            key: "nvidia.com/gpu".into(),
            value: Some("present".into()),
            effect: "NoSchedule".into(),
            propagation: "Always".into(),
        }
    }

    #[test]
    fn the_exact_on_initialization_taint_among_others_is_enough() {
        let ok = md(vec![
            gpu(),
            reservation(UNASSIGNED, "NoSchedule", ON_INITIALIZATION),
        ]);
        assert_eq!(blocker("fleet/gpu", Some(template_taints(&ok))), None);
    }

    #[test]
    fn each_wrong_template_names_the_deployment_what_is_wrong_and_the_fix() {
        let cases = [
            (md(vec![gpu()]), "does not register its Nodes"),
            (
                md(vec![reservation(UNASSIGNED, "NoSchedule", "Always")]),
                "propagation \"Always\"",
            ),
            (
                md(vec![reservation(
                    UNASSIGNED,
                    "NoExecute",
                    ON_INITIALIZATION,
                )]),
                "effect \"NoExecute\"",
            ),
            (
                md(vec![reservation("g-1", "NoSchedule", ON_INITIALIZATION)]),
                "value \"g-1\"",
            ),
            (
                md(vec![
                    reservation(UNASSIGNED, "NoSchedule", ON_INITIALIZATION),
                    reservation(UNASSIGNED, "NoExecute", ON_INITIALIZATION),
                ]),
                "2 times",
            ),
        ];
        for (md, what) in cases {
            let why = blocker("fleet/gpu", Some(template_taints(&md))).expect("a blocker");
            assert!(why.starts_with("reservation is off:"), "{why}");
            assert!(why.contains("MachineDeployment fleet/gpu"), "{why}");
            assert!(why.contains(what), "{what}: {why}");
            assert!(why.contains(&wanted_taint_yaml()), "{why}");
            assert!(why.contains("MachineTaintPropagation"), "{why}");
        }
        let missing = blocker("fleet/gone", None).expect("a blocker");
        assert!(missing.contains("fleet/gone does not exist"), "{missing}");
    }

    #[test]
    fn the_template_taints_are_read_from_the_v1beta2_object() {
        let md: MachineDeployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gpu", "namespace": "fleet"},
            "spec": {"clusterName": "c", "replicas": 2, "template": {"spec": {"taints": [
                {"key": RESERVATION_TAINT, "value": UNASSIGNED, "effect": "NoSchedule",
                 "propagation": "OnInitialization"}]}}}
        }))
        .unwrap();
        assert_eq!(blocker("fleet/gpu", Some(template_taints(&md))), None);
        // A MachineDeployment without a template reads as one without the taint.
        let bare: MachineDeployment =
            serde_json::from_value(serde_json::json!({"spec": {"replicas": 1}})).unwrap();
        assert!(blocker("fleet/gpu", Some(template_taints(&bare))).is_some());
    }
}
