//! `reservation` of a node-group file and `defaults.reservation` of the provider file: whether
//! the nodes added for a gang are reserved for it (see `docs/reservation.md`) and the booking
//! deadline.

use std::time::Duration;

use serde_json::Value;

use crate::config::walk::{Errors, Obj};
use crate::model::{BackendSpec, ReservationSpec};

/// Bounds of `bookingDeadline`: above 0 and at most 24h.
const MAX_BOOKING_DEADLINE: Duration = Duration::from_secs(24 * 60 * 60);

/// A `reservation` section over `base`: each key present replaces the base's value. Returns
/// the settings and whether `enabled` was written in this section.
pub(super) fn section(
    mut r: Obj<'_>,
    base: ReservationSpec,
    errs: &mut Errors,
) -> (ReservationSpec, bool) {
    let enabled = r.bool("enabled", errs);
    let mut spec = ReservationSpec {
        enabled: enabled.unwrap_or(base.enabled),
        ..base
    };
    if let Some(d) = r.duration("bookingDeadline", errs) {
        if d.is_zero() || d > MAX_BOOKING_DEADLINE {
            errs.push(
                &r.path("bookingDeadline"),
                r.raw("bookingDeadline"),
                "must be a duration above 0 and at most 24h",
            );
        } else {
            spec.booking_deadline = d;
            spec.booking_deadline_measured = false;
        }
    }
    r.finish(errs);
    (spec, enabled.is_some())
}

/// A group's reservation: its own `reservation` section over the provider's defaults. The
/// kwok backend creates its nodes under the taint, and a Cluster API MachineDeployment
/// registers them so when its template carries the taint (checked at run time, see
/// `docs/reservation.md#cluster-api`). The memory backend has no nodes: `enabled: true`
/// written in the file of a memory group is an error; inherited from
/// `defaults.reservation`, it is off for that group.
pub(super) fn group(
    g: &mut Obj<'_>,
    defaults: ReservationSpec,
    backend: Option<&BackendSpec>,
    errs: &mut Errors,
) -> ReservationSpec {
    let (spec, written) = match g.obj("reservation", errs) {
        Some(r) => section(r, defaults, errs),
        None => (defaults, false),
    };
    let Some(backend) = backend else {
        return spec;
    };
    if !spec.enabled || matches!(backend, BackendSpec::Kwok(_) | BackendSpec::ClusterApi(_)) {
        return spec;
    }
    if written {
        errs.push(
            "reservation.enabled",
            Some(&Value::Bool(true)),
            format!(
                "node reservation needs the kwok or clusterapi backend (this group's is {}): its nodes must carry the reservation taint from registration",
                backend.kind()
            ),
        );
    }
    ReservationSpec {
        enabled: false,
        ..spec
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::model::{KwokBackendSpec, MemoryBackendSpec};

    fn run(
        doc: serde_json::Value,
        defaults: ReservationSpec,
        backend: &BackendSpec,
    ) -> (ReservationSpec, Vec<String>) {
        let mut errs = Errors::new(Path::new("nodegroups/gpu.yaml"));
        let mut g = Obj::root(&doc, &mut errs).unwrap();
        let spec = group(&mut g, defaults, Some(backend), &mut errs);
        let list = errs.into_list().iter().map(ToString::to_string).collect();
        (spec, list)
    }

    fn kwok() -> BackendSpec {
        BackendSpec::Kwok(KwokBackendSpec {
            provision_delay: Duration::ZERO,
            provision_stagger: Duration::ZERO,
            provision_jitter: Duration::ZERO,
            device_delay: Duration::ZERO,
            failure: None,
            attach: None,
        })
    }

    fn memory() -> BackendSpec {
        BackendSpec::Memory(MemoryBackendSpec {
            create_delay: Duration::ZERO,
            provision_delay: Duration::ZERO,
            failure: None,
        })
    }

    #[test]
    fn a_groups_keys_override_the_defaults_one_by_one() {
        let on = ReservationSpec {
            enabled: true,
            ..ReservationSpec::default()
        };
        let (spec, errs) = run(serde_json::json!({}), on, &kwok());
        assert_eq!((spec, errs.len()), (on, 0));
        assert!(spec.booking_deadline_measured, "no file sets it: measured");
        let (spec, errs) = run(
            serde_json::json!({"reservation": {"bookingDeadline": "5m"}}),
            on,
            &kwok(),
        );
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(spec.booking_deadline, Duration::from_secs(300));
        assert!(
            !spec.booking_deadline_measured,
            "set in the file: not measured"
        );
        assert!(spec.enabled, "enabled inherited");
        let (spec, _) = run(
            serde_json::json!({"reservation": {"enabled": false}}),
            on,
            &kwok(),
        );
        assert!(!spec.enabled);
    }

    #[test]
    fn a_bad_deadline_names_the_file_field_and_value() {
        for bad in ["0s", "25h"] {
            let (spec, errs) = run(
                serde_json::json!({"reservation": {"enabled": true, "bookingDeadline": bad}}),
                ReservationSpec::default(),
                &kwok(),
            );
            assert_eq!(errs.len(), 1, "{errs:?}");
            assert!(
                errs[0].contains("nodegroups/gpu.yaml")
                    && errs[0].contains("reservation.bookingDeadline")
                    && errs[0].contains(bad),
                "{errs:?}"
            );
            assert_eq!(
                spec.booking_deadline,
                ReservationSpec::default().booking_deadline
            );
        }
    }

    #[test]
    fn enabled_on_the_memory_backend_is_an_error_when_written_and_off_when_inherited_and_on_for_cluster_api()
     {
        let (spec, errs) = run(
            serde_json::json!({"reservation": {"enabled": true}}),
            ReservationSpec::default(),
            &memory(),
        );
        assert!(!spec.enabled);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].contains("needs the kwok or clusterapi backend (this group's is memory)"),
            "{errs:?}"
        );
        let inherited = ReservationSpec {
            enabled: true,
            ..ReservationSpec::default()
        };
        let (spec, errs) = run(serde_json::json!({}), inherited, &memory());
        assert!(!spec.enabled && errs.is_empty(), "{spec:?} {errs:?}");
        // Cluster API registers its nodes under the taint through the MachineDeployment's
        // template: written or inherited, reservation stays on (the template is checked at
        // run time).
        let capi = BackendSpec::ClusterApi(crate::model::ClusterApiBackendSpec {
            namespace: "fleet".into(),
            name: "gpu".into(),
        });
        for doc in [
            serde_json::json!({"reservation": {"enabled": true}}),
            serde_json::json!({}),
        ] {
            let (spec, errs) = run(doc, inherited, &capi);
            assert!(spec.enabled && errs.is_empty(), "{spec:?} {errs:?}");
        }
    }
}
