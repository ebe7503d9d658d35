//! A node group's `backend` section (also `defaults.backend` of the provider file): the
//! memory, kwok and clusterapi backends' settings and the simulated failures.

use std::time::Duration;

use serde_json::Value;

use super::names::{check_dns_label, check_dns_subdomain};
use crate::config::walk::{Errors, Obj};
use crate::model::{
    AttachSimulation, BackendSpec, ClusterApiBackendSpec, ErrorCode, KwokBackendSpec,
    MemoryBackendSpec, SimulatedFailure,
};

/// Reads the settings of one backend type from its `backend` mapping.
type Reader = fn(&mut Obj<'_>, &mut Errors) -> Option<BackendSpec>;

/// Every value of `backend.type`, with the reader of its settings. The configuration
/// reference (`super::super::reference`) reads each type's fields from here.
pub const TYPES: [(&str, Reader); 3] = [
    ("memory", memory),
    ("kwok", kwok),
    ("clusterapi", cluster_api),
];

/// The `backend` mapping `o`; `None` when it is invalid (reported).
pub(super) fn backend(mut o: Obj<'_>, errs: &mut Errors) -> Option<BackendSpec> {
    let kind = o
        .string("type", errs)
        .unwrap_or_else(|| "memory".to_owned());
    let Some((_, read)) = TYPES.iter().find(|(name, _)| *name == kind) else {
        let names: Vec<&str> = TYPES.iter().map(|(name, _)| *name).collect();
        errs.push(
            &o.path("type"),
            Some(&Value::String(kind)),
            format!("unknown backend; supported: {}", names.join(", ")),
        );
        // The other keys cannot be judged without a known type: reporting them as unknown
        // fields would bury the one real mistake.
        return None;
    };
    let spec = read(&mut o, errs);
    o.finish(errs);
    spec
}

fn memory(o: &mut Obj<'_>, errs: &mut Errors) -> Option<BackendSpec> {
    let create_delay = o.duration("createDelay", errs).unwrap_or(Duration::ZERO);
    let provision_delay = o.duration("provisionDelay", errs).unwrap_or(Duration::ZERO);
    let failure = o.obj("failure", errs).and_then(|f| failure(f, errs));
    Some(BackendSpec::Memory(MemoryBackendSpec {
        create_delay,
        provision_delay,
        failure,
    }))
}

fn kwok(o: &mut Obj<'_>, errs: &mut Errors) -> Option<BackendSpec> {
    let provision_delay = o.duration("provisionDelay", errs).unwrap_or(Duration::ZERO);
    let provision_stagger = o
        .duration("provisionStagger", errs)
        .unwrap_or(Duration::ZERO);
    let provision_jitter = o
        .duration("provisionJitter", errs)
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
        provision_jitter,
        device_delay,
        failure,
        attach,
    }))
}

fn cluster_api(o: &mut Obj<'_>, errs: &mut Errors) -> Option<BackendSpec> {
    let md = o.obj("machineDeployment", errs);
    if md.is_none() && !o.has("machineDeployment") {
        errs.push(
            &o.path("machineDeployment"),
            None,
            "is required by the clusterapi backend: {namespace, name} of the MachineDeployment the group scales",
        );
    }
    let mut m = md?;
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
    let probability = f.float("probability", 0.0, 1.0, errs).unwrap_or(1.0);
    f.finish(errs);
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a probability in [0, 1] times a million fits u32"
    )]
    let per_million = (probability * f64::from(SimulatedFailure::ALWAYS)).round() as u32;
    Some(SimulatedFailure {
        after_instances: u32::try_from(after).ok()?,
        code: parsed?,
        per_million,
    })
}
