//! The fields of a node-group file that make its template node: capacity and reservation,
//! GPUs, RDMA, CSI attach limits, labels and taints.

use std::collections::BTreeMap;

use serde_json::Value;

use super::GroupDefaults;
use super::names::{check_dns_subdomain, check_label_key, check_label_value, check_resource_name};
use crate::config::walk::{Errors, Obj};
use crate::model::{Capacity, GpuSpec, RdmaSpec, Taint, TaintEffect, labels};

/// Keys that gangscaler derives itself; a group may not set them through `labels`/`topology`.
const DERIVED_LABELS: [&str; 10] = [
    labels::OS,
    labels::ARCH,
    labels::HOSTNAME,
    labels::INSTANCE_TYPE,
    labels::ZONE,
    labels::REGION,
    labels::GPU_PRODUCT,
    labels::GPU_COUNT,
    labels::GPU_MEMORY,
    labels::NODE_GROUP,
];

/// `capacity` (`None` without it, or when invalid) and `reserved` (zero without it), with
/// every reservation within its capacity.
pub(super) fn capacity_and_reserved(
    g: &mut Obj<'_>,
    errs: &mut Errors,
) -> (Option<Capacity>, Capacity) {
    let capacity = g
        .obj("capacity", errs)
        .and_then(|c| parse_capacity(c, true, errs));
    let reserved = g
        .obj("reserved", errs)
        .and_then(|c| parse_capacity(c, false, errs))
        .unwrap_or_default();
    if let Some(cap) = &capacity {
        reserved_within(g, &reserved, cap, errs);
    } else if g.has("reserved") && !g.has("capacity") {
        // An invalid capacity is reported by itself; "requires capacity" would be noise.
        errs.push("reserved", None, "requires capacity");
    }
    (capacity, reserved)
}

/// Reports every `reserved` value above its `capacity`.
fn reserved_within(g: &Obj<'_>, reserved: &Capacity, cap: &Capacity, errs: &mut Errors) {
    let written = |key: &str| g.raw("reserved").and_then(|r| r.get(key));
    let checks = [
        (
            "cpu",
            reserved.cpu > cap.cpu,
            reserved.cpu.to_decimal_string(),
            cap.cpu.to_decimal_string(),
        ),
        (
            "memory",
            reserved.memory > cap.memory,
            reserved.memory.to_binary_string(),
            cap.memory.to_binary_string(),
        ),
        (
            "ephemeralStorage",
            reserved.ephemeral_storage > cap.ephemeral_storage,
            reserved.ephemeral_storage.to_binary_string(),
            cap.ephemeral_storage.to_binary_string(),
        ),
        (
            "pods",
            reserved.pods > cap.pods,
            reserved.pods.to_string(),
            cap.pods.to_string(),
        ),
    ];
    for (name, exceeds, r, c) in checks {
        if exceeds {
            errs.push(
                &format!("reserved.{name}"),
                written(name),
                format!("exceeds capacity.{name} ({r} > {c})"),
            );
        }
    }
}

/// A `capacity` (every field `required`) or `reserved` (every field defaults to zero).
fn parse_capacity(mut c: Obj<'_>, required: bool, errs: &mut Errors) -> Option<Capacity> {
    let cpu = c.quantity("cpu", errs);
    let memory = c.quantity("memory", errs);
    let ephemeral_storage = c.quantity("ephemeralStorage", errs);
    let pods = c.int("pods", if required { 1 } else { 0 }, 1_000_000, errs);
    if required {
        for (key, present) in [
            ("cpu", cpu.is_some()),
            ("memory", memory.is_some()),
            ("pods", pods.is_some()),
        ] {
            if !present && !c.has(key) {
                c.missing(key, errs);
            }
        }
        if ephemeral_storage.is_none() && !c.has("ephemeralStorage") {
            // The scheduler, and Cluster Autoscaler's simulation of it, reads a resource
            // missing from a node's allocatable as zero: no default would be right.
            errs.push(
                &c.path("ephemeralStorage"),
                None,
                "is required: a node without it is read as having none, so any pod requesting ephemeral storage would never fit; set the node's local disk (kubelet reports it as ephemeral-storage)",
            );
        }
    }
    c.finish(errs);
    if !required {
        return Some(Capacity {
            cpu: cpu.unwrap_or_default(),
            memory: memory.unwrap_or_default(),
            ephemeral_storage: ephemeral_storage.unwrap_or_default(),
            pods: u64::try_from(pods.unwrap_or(0)).ok()?,
        });
    }
    Some(Capacity {
        cpu: cpu?,
        memory: memory?,
        ephemeral_storage: ephemeral_storage?,
        pods: u64::try_from(pods?).ok()?,
    })
}

/// The `gpu` section.
pub(super) fn gpu(mut o: Obj<'_>, defaults: &GroupDefaults, errs: &mut Errors) -> Option<GpuSpec> {
    let count = o.int("count", 1, 1024, errs);
    if count.is_none() && !o.has("count") {
        o.missing("count", errs);
    }
    let product = o.required_string("product", errs);
    if let Some(p) = &product
        && let Err(e) = check_label_value(p)
    {
        errs.push(
            &o.path("product"),
            Some(&Value::String(p.clone())),
            format!("must be usable as a label value: {e}"),
        );
    }
    let memory = o.quantity("memory", errs);
    if memory.is_none() && !o.has("memory") {
        o.missing("memory", errs);
    }
    let resource_name = o
        .string("resourceName", errs)
        .unwrap_or_else(|| defaults.gpu_resource.clone());
    if let Err(e) = check_resource_name(&resource_name) {
        errs.push(
            &o.path("resourceName"),
            Some(&Value::String(resource_name.clone())),
            e,
        );
    }
    o.finish(errs);
    Some(GpuSpec {
        count: u32::try_from(count?).ok()?,
        product: product?,
        memory: memory?,
        resource_name,
    })
}

/// The `rdma` section.
pub(super) fn rdma(
    mut o: Obj<'_>,
    defaults: &GroupDefaults,
    errs: &mut Errors,
) -> Option<RdmaSpec> {
    let resource_name = o.required_string("resourceName", errs);
    if let Some(r) = &resource_name
        && let Err(e) = check_resource_name(r)
    {
        errs.push(&o.path("resourceName"), Some(&Value::String(r.clone())), e);
    }
    let devices = o.int("devices", 1, 1024, errs);
    if devices.is_none() && !o.has("devices") {
        o.missing("devices", errs);
    }
    let bandwidth = o.int("bandwidthGbps", 1, 1_000_000, errs);
    if bandwidth.is_none() && !o.has("bandwidthGbps") {
        o.missing("bandwidthGbps", errs);
    }
    let bandwidth_resource_name = o
        .string("bandwidthResourceName", errs)
        .unwrap_or_else(|| defaults.rdma_bandwidth_resource.clone());
    if let Err(e) = check_resource_name(&bandwidth_resource_name) {
        errs.push(
            &o.path("bandwidthResourceName"),
            Some(&Value::String(bandwidth_resource_name.clone())),
            e,
        );
    }
    o.finish(errs);
    Some(RdmaSpec {
        resource_name: resource_name?,
        devices: u32::try_from(devices?).ok()?,
        bandwidth_gbps: u32::try_from(bandwidth?).ok()?,
        bandwidth_resource_name,
    })
}

/// The `csi` map: attachable volumes per node (at least 1) by CSI driver.
pub(super) fn csi(g: &mut Obj<'_>, errs: &mut Errors) -> BTreeMap<String, u32> {
    let mut csi = BTreeMap::new();
    for (driver, v) in g.map("csi", errs) {
        let path = format!("csi.{driver}");
        if let Err(e) = check_dns_subdomain(&driver) {
            errs.push(
                &path,
                Some(&Value::String(driver.clone())),
                format!("driver name {e}"),
            );
        }
        match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) if n >= 1 => {
                csi.insert(driver, n);
            }
            _ => errs.push(
                &path,
                Some(v),
                "must be a whole number of attachable volumes, at least 1",
            ),
        }
    }
    csi
}

/// The `taints` list; invalid items (reported) are left out.
pub(super) fn taints(g: &mut Obj<'_>, errs: &mut Errors) -> Vec<Taint> {
    let mut taints = Vec::new();
    for (i, t) in g.list("taints", errs).into_iter().enumerate() {
        let path = format!("taints[{i}]");
        if let Some(t) = Obj::item(path, t, errs).and_then(|o| taint(o, errs)) {
            taints.push(t);
        }
    }
    taints
}

fn taint(mut o: Obj<'_>, errs: &mut Errors) -> Option<Taint> {
    let key = o.required_string("key", errs);
    if let Some(k) = &key
        && let Err(e) = check_label_key(k)
    {
        errs.push(&o.path("key"), Some(&Value::String(k.clone())), e);
    }
    let value = o.string("value", errs).unwrap_or_default();
    if let Err(e) = check_label_value(&value) {
        errs.push(&o.path("value"), Some(&Value::String(value.clone())), e);
    }
    let effect = o.required_string("effect", errs).and_then(|e| {
        let parsed = TaintEffect::parse(&e);
        if parsed.is_none() {
            errs.push(
                &o.path("effect"),
                Some(&Value::String(e)),
                "must be NoSchedule, PreferNoSchedule or NoExecute",
            );
        }
        parsed
    });
    o.finish(errs);
    Some(Taint {
        key: key?,
        value,
        effect: effect?,
    })
}

/// The label map at `key` (`labels` or `topology`): valid keys and values, none of them one
/// gangscaler derives itself (`gpu_label` included).
pub(super) fn label_map(
    g: &mut Obj<'_>,
    key: &'static str,
    gpu_label: &str,
    errs: &mut Errors,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in g.map(key, errs) {
        let path = format!("{key}.{k}");
        if let Err(e) = check_label_key(&k) {
            errs.push(
                &path,
                Some(&Value::String(k.clone())),
                format!("label key {e}"),
            );
        }
        if DERIVED_LABELS.contains(&k.as_str()) || k == gpu_label {
            errs.push(
                &path,
                Some(v),
                "is set by gangscaler from the group's own fields; set that field instead",
            );
        }
        let value = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            other => {
                errs.push(&path, Some(other), "must be a string");
                continue;
            }
        };
        if let Err(e) = check_label_value(&value) {
            errs.push(&path, Some(v), format!("label value {e}"));
        }
        out.insert(k, value);
    }
    out
}
