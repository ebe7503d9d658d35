//! Node reservation: the nodes gangscaler adds for a gang carry a `NoSchedule` taint that only
//! that gang's members tolerate, so the scheduler cannot give them to another pod first.
//!
//! The key is a Cluster Autoscaler *status taint* (prefix
//! `status-taint.cluster-autoscaler.kubernetes.io/`, CA's `utils/taints.StatusTaintPrefix` in
//! 1.34, 1.35 and 1.36): CA removes it from the node templates it builds from a group's real
//! nodes (`SanitizeTaints`, called by `simulator/node_info_utils.go`'s `createSanitizedNode`),
//! so another gang still looks like it fits the group, and unlike a startup taint it does not
//! make CA treat the node as unready (`FilterOutNodesWithStartupTaints` looks at startup
//! taints only). See `docs/reservation.md` for the lines.
//!
//! The taint's value names the gang by a hash ([`value_for`]); the gang's name is in the
//! [`RESERVED_FOR`] annotation. A node created under a reservation before gangscaler knows
//! which gang it is for carries [`UNASSIGNED`], which no pod tolerates.

use std::time::Duration;

use super::gang::{GangRef, PodDemand, Toleration, TolerationOperator};
use super::taint::TaintEffect;

/// The reservation taint's key.
pub const RESERVATION_TAINT: &str =
    "status-taint.cluster-autoscaler.kubernetes.io/gangscaler-reserved";

/// Node annotation naming the gang a reserved node is held for: `<namespace>/<name>`.
pub const RESERVED_FOR: &str = "gangscaler.io/reserved-for";

/// The taint value of a node reserved for no gang yet (no toleration names it).
pub const UNASSIGNED: &str = "unassigned";

/// Cluster API's taint on a Node it has not reconciled yet (kubeadm's bootstrap registers the
/// kubelet under it). Its first reconcile lifts it and, in the same patch, sets the Machine's
/// `OnInitialization` taints, the reservation taint among them, to their template values: a
/// node assigned to a gang before that would be set back to [`UNASSIGNED`], so reservation
/// leaves such a node alone until then (nothing can land on it meanwhile).
pub const CLUSTER_API_UNINITIALIZED: &str = "node.cluster.x-k8s.io/uninitialized";

/// The reservation taint's effect.
pub const RESERVATION_EFFECT: TaintEffect = TaintEffect::NoSchedule;

/// The booking deadline before a group's provisioning time is measured: how long after a
/// reserved node became Ready it stays held for a gang that has not formed (CA's own
/// ProvisioningRequest booking lasts as long).
pub const DEFAULT_BOOKING_DEADLINE: Duration = Duration::from_secs(10 * 60);

/// A node group's reservation settings (`reservation` in its file, else the provider's
/// `defaults.reservation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationSpec {
    /// Nodes added for a gang are reserved for it.
    pub enabled: bool,
    /// How long after a reserved node became Ready it stays held for a gang that has not
    /// formed.
    #[serde(with = "super::humantime_serde_compat")]
    pub booking_deadline: Duration,
    /// No file sets `bookingDeadline`: the deadline is measured, the group's provisioning
    /// time (P95 of its recent nodes) plus a margin, and `booking_deadline` applies only until
    /// enough nodes were measured.
    pub booking_deadline_measured: bool,
}

impl Default for ReservationSpec {
    /// Off, with the booking deadline measured (the default one until measured).
    fn default() -> Self {
        Self {
            enabled: false,
            booking_deadline: DEFAULT_BOOKING_DEADLINE,
            booking_deadline_measured: true,
        }
    }
}

/// The reservation taint value of `gang`: `g-` and 16 hex digits of the 64-bit FNV-1a hash
/// of `<namespace>/<name>`. A valid label value (the API server requires one for a taint
/// value), stable across releases, computed the same by the lifecycle loop and the webhook.
pub fn value_for(gang: &GangRef) -> String {
    value_for_name(&gang.namespace, &gang.name)
}

/// [`value_for`] from a namespace and a gang name.
pub fn value_for_name(namespace: &str, name: &str) -> String {
    let hash = super::hash::fnv1a64(
        namespace
            .bytes()
            .chain(std::iter::once(b'/'))
            .chain(name.bytes()),
    );
    format!("g-{hash:016x}")
}

/// The toleration a member of the gang whose value is `value` carries.
pub fn toleration_for(value: &str) -> Toleration {
    Toleration {
        key: RESERVATION_TAINT.to_owned(),
        operator: TolerationOperator::Equal,
        value: value.to_owned(),
        effect: Some(RESERVATION_EFFECT),
    }
}

/// [`toleration_for`] as a pod spec writes it (the Kubernetes JSON form).
pub fn toleration_json(value: &str) -> serde_json::Value {
    serde_json::json!({
        "key": RESERVATION_TAINT,
        "operator": "Equal",
        "value": value,
        "effect": RESERVATION_EFFECT.as_str(),
    })
}

/// Whether `tolerations` let a pod onto a node reserved with `value`.
pub fn tolerated(tolerations: &[Toleration], value: &str) -> bool {
    tolerations
        .iter()
        .any(|t| t.tolerates(RESERVATION_TAINT, value, RESERVATION_EFFECT))
}

/// A DaemonSet as reservation sees it: its `namespace/name` and its pod template's placement
/// (node selector, required node affinity, tolerations; resources are not read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonSetDemand {
    /// `namespace/name`.
    pub name: String,
    /// Its pod template's demand.
    pub pod: PodDemand,
}

/// Whether `tolerations` let a pod onto every reserved node, whatever gang it is held for: a
/// toleration with `operator: Exists` for the reservation key (or no key) and `NoSchedule`
/// (or every effect), as a DaemonSet that must run on reserved nodes carries.
pub fn tolerates_every_reservation(tolerations: &[Toleration]) -> bool {
    tolerations.iter().any(|t| {
        t.operator == TolerationOperator::Exists
            && (t.key.is_empty() || t.key == RESERVATION_TAINT)
            && t.effect.is_none_or(|e| e == RESERVATION_EFFECT)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gang(ns: &str, name: &str) -> GangRef {
        GangRef {
            namespace: ns.into(),
            name: name.into(),
            api_version: "scheduling.k8s.io/v1alpha2".into(),
            kind: "PodGroup".into(),
        }
    }

    #[test]
    fn the_value_is_a_label_value_that_differs_by_namespace_and_name_only() {
        let v = value_for(&gang("ml", "train"));
        assert_eq!(v.len(), 18, "{v}");
        assert!(v.starts_with("g-") && v[2..].bytes().all(|b| b.is_ascii_hexdigit()));
        // FNV-1a 64 of "/", computed independently (Python, 64-bit wrapping arithmetic).
        assert_eq!(value_for_name("", ""), "g-af63a24c860189fe");
        let mut other_version = gang("ml", "train");
        other_version.api_version = "scheduling.k8s.io/v1beta1".into();
        assert_eq!(
            value_for(&other_version),
            v,
            "the API version is not part of it"
        );
        assert_ne!(value_for(&gang("ml2", "train")), v);
        assert_ne!(value_for(&gang("ml", "train2")), v);
        // The separator keeps ("a", "b/c") and ("a/b", "c") apart only by position; both
        // are valid names for different objects, so they must differ.
        assert_ne!(value_for_name("a", "bc"), value_for_name("ab", "c"));
    }

    #[test]
    fn only_the_gangs_own_toleration_or_a_wildcard_tolerates_its_reservation() {
        let v = value_for(&gang("ml", "train"));
        assert!(tolerated(&[toleration_for(&v)], &v));
        assert!(!tolerated(&[toleration_for(&v)], UNASSIGNED));
        let other = value_for(&gang("ml", "other"));
        assert!(!tolerated(&[toleration_for(&other)], &v));
        let exists = Toleration {
            key: RESERVATION_TAINT.into(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: None,
        };
        assert!(tolerated(&[exists], &v), "a DaemonSet's Exists toleration");
        let no_execute = Toleration {
            effect: Some(TaintEffect::NoExecute),
            ..toleration_for(&v)
        };
        assert!(!tolerated(&[no_execute], &v), "the effect must match");
    }

    #[test]
    fn only_an_exists_toleration_for_the_key_or_every_key_tolerates_every_reservation() {
        let exists = |key: &str, effect| Toleration {
            key: key.into(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect,
        };
        assert!(tolerates_every_reservation(&[exists(
            RESERVATION_TAINT,
            None
        )]));
        assert!(
            tolerates_every_reservation(&[exists("", None)]),
            "operator: Exists alone"
        );
        assert!(tolerates_every_reservation(&[exists(
            RESERVATION_TAINT,
            Some(TaintEffect::NoSchedule)
        )]));
        assert!(!tolerates_every_reservation(&[exists(
            RESERVATION_TAINT,
            Some(TaintEffect::NoExecute)
        )]));
        assert!(!tolerates_every_reservation(&[exists(
            "nvidia.com/gpu",
            None
        )]));
        let v = value_for(&gang("ml", "train"));
        assert!(
            !tolerates_every_reservation(&[toleration_for(&v)]),
            "a member's toleration names one gang"
        );
        assert!(!tolerates_every_reservation(&[]));
    }
}
