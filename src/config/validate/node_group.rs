//! A node-group file: its identity and size bounds, the template node's fields (in
//! `template`), the backend and what it requires of the rest, and the per-group Cluster
//! Autoscaler options.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::GroupDefaults;
use super::backend::backend;
use super::names::check_dns_label;
use super::reservation;
use super::template;
use crate::config::MAX_GROUP_SIZE;
use crate::config::walk::{Errors, Obj};
use crate::model::{
    AutoscalingOptionOverrides, BackendSpec, Capacity, MemoryBackendSpec, NodeGroupId,
    NodeGroupSpec, RdmaSpec,
};

/// Validates one node-group document read from `file`.
pub fn node_group(
    doc: &Value,
    file: &Path,
    defaults: &GroupDefaults,
    errs: &mut Errors,
) -> Option<NodeGroupSpec> {
    let mut g = Obj::root(doc, errs)?;
    let id = id(&mut g, file, errs);
    let (min_size, max_size) = sizes(&mut g, errs);
    let instance_type = g.required_string("instanceType", errs);
    let region = g.required_string("region", errs);
    let zone = g.required_string("zone", errs);
    let os = g.string("os", errs).unwrap_or_else(|| defaults.os.clone());
    let arch = g
        .string("arch", errs)
        .unwrap_or_else(|| defaults.arch.clone());
    let (capacity, reserved) = template::capacity_and_reserved(&mut g, errs);
    let gpu = g
        .obj("gpu", errs)
        .and_then(|o| template::gpu(o, defaults, errs));
    let rdma = g
        .obj("rdma", errs)
        .and_then(|o| template::rdma(o, defaults, errs));
    let csi = template::csi(&mut g, errs);
    let labels = template::label_map(&mut g, "labels", &defaults.gpu_label, errs);
    let topology = template::label_map(&mut g, "topology", &defaults.gpu_label, errs);
    let taints = template::taints(&mut g, errs);
    let price_per_hour = g.float("price", 0.0, 1e9, errs);
    let backend = group_backend(&mut g, file, defaults, errs);
    backend_requirements(&g, backend.as_ref(), capacity.as_ref(), rdma.as_ref(), errs);
    let autoscaling_options = g.obj("autoscalingOptions", errs).map(|o| options(o, errs));
    let reservation = reservation::group(&mut g, defaults.reservation, backend.as_ref(), errs);
    g.finish(errs);
    Some(NodeGroupSpec {
        id: NodeGroupId::new(id?),
        min_size: u32::try_from(min_size?).ok()?,
        max_size: u32::try_from(max_size?).ok()?,
        instance_type: instance_type?,
        region: region?,
        zone: zone?,
        os,
        arch,
        capacity,
        reserved,
        gpu,
        rdma,
        csi,
        labels,
        taints,
        topology,
        price_per_hour,
        backend: backend?,
        autoscaling_options,
        reservation,
        source: file.to_path_buf(),
    })
}

/// `id`: a DNS label equal to the file name without extension.
fn id(g: &mut Obj<'_>, file: &Path, errs: &mut Errors) -> Option<String> {
    let id = g.required_string("id", errs);
    if let Some(id) = &id {
        if let Err(e) = check_dns_label(id) {
            errs.push("id", Some(&Value::String(id.clone())), e);
        }
        let stem = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        if stem != id {
            errs.push(
                "id",
                Some(&Value::String(id.clone())),
                format!("must equal the file name without extension ({stem:?}), so environment overrides and reviews find it"),
            );
        }
    }
    id
}

/// `minSize` and `maxSize`: both required, within [`MAX_GROUP_SIZE`], in order.
fn sizes(g: &mut Obj<'_>, errs: &mut Errors) -> (Option<i64>, Option<i64>) {
    let min_size = g.int("minSize", 0, i64::from(MAX_GROUP_SIZE), errs);
    let max_size = g.int("maxSize", 0, i64::from(MAX_GROUP_SIZE), errs);
    for key in ["minSize", "maxSize"] {
        if !g.has(key) {
            g.missing(key, errs);
        }
    }
    if let (Some(min), Some(max)) = (min_size, max_size)
        && min > max
    {
        errs.push(
            "minSize",
            g.raw("minSize"),
            format!("must not exceed maxSize ({max})"),
        );
    }
    (min_size, max_size)
}

/// The group's `backend`, else the provider's `defaults.backend` (checked there, so its
/// errors are not repeated here), else the memory backend.
fn group_backend(
    g: &mut Obj<'_>,
    file: &Path,
    defaults: &GroupDefaults,
    errs: &mut Errors,
) -> Option<BackendSpec> {
    match g.obj("backend", errs) {
        Some(b) => backend(b, errs),
        None => match &defaults.backend {
            Some(v) => Obj::root(v, &mut Errors::new(file))
                .and_then(|o| backend(o, &mut Errors::new(file))),
            None => Some(BackendSpec::Memory(MemoryBackendSpec {
                create_delay: Duration::ZERO,
                provision_delay: Duration::ZERO,
                failure: None,
            })),
        },
    }
}

/// What a backend requires of the rest of the group: kwok and clusterapi a `capacity`,
/// kwok's `deviceDelay` an `rdma` section.
fn backend_requirements(
    g: &Obj<'_>,
    backend: Option<&BackendSpec>,
    capacity: Option<&Capacity>,
    rdma: Option<&RdmaSpec>,
    errs: &mut Errors,
) {
    if matches!(backend, Some(BackendSpec::Kwok(_))) && capacity.is_none() && !g.has("capacity") {
        errs.push(
            "capacity",
            None,
            "is required by the kwok backend, which creates Node objects from the template",
        );
    }
    // Judged from the type as written, so a clusterapi group whose backend has another
    // mistake still hears about its missing capacity.
    let clusterapi = g
        .raw("backend")
        .and_then(|b| b.get("type"))
        .and_then(Value::as_str)
        == Some("clusterapi");
    if clusterapi && capacity.is_none() && !g.has("capacity") {
        errs.push(
            "capacity",
            None,
            "is required by the clusterapi backend: it is the template node CA plans with before a Machine exists",
        );
    }
    if let Some(BackendSpec::Kwok(k)) = backend
        && !k.device_delay.is_zero()
        && rdma.is_none()
        && !g.has("rdma")
    {
        errs.push(
            "backend.deviceDelay",
            None,
            "delays the RDMA resources, so it requires an `rdma` section",
        );
    }
}

/// The `autoscalingOptions` section: per-group overrides of Cluster Autoscaler's options.
fn options(mut o: Obj<'_>, errs: &mut Errors) -> AutoscalingOptionOverrides {
    let out = AutoscalingOptionOverrides {
        scale_down_utilization_threshold: o.float("scaleDownUtilizationThreshold", 0.0, 1.0, errs),
        scale_down_gpu_utilization_threshold: o.float(
            "scaleDownGpuUtilizationThreshold",
            0.0,
            1.0,
            errs,
        ),
        zero_or_max_node_scaling: o.bool("zeroOrMaxNodeScaling", errs),
        ignore_daemon_sets_utilization: o.bool("ignoreDaemonSetsUtilization", errs),
        scale_down_unneeded_time: o.duration("scaleDownUnneededTime", errs),
        scale_down_unready_time: o.duration("scaleDownUnreadyTime", errs),
        max_node_provision_time: o.duration("maxNodeProvisionTime", errs),
    };
    o.finish(errs);
    out
}
