//! Conversions between the wire types (generated protobuf, k8s-pb) and the model.

use std::time::Duration;

use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity as PbQuantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use prost::Message;

use crate::engine::Error;
use crate::model::{AutoscalingOptions, Instance, InstanceState, NodeGroupSpec, TemplateNode};
use crate::proto;
use crate::provision::NodeRef;

/// The wire form of a node group.
pub fn node_group(g: &NodeGroupSpec) -> proto::NodeGroup {
    proto::NodeGroup {
        id: g.id.to_string(),
        min_size: i32::try_from(g.min_size).unwrap_or(i32::MAX),
        max_size: i32::try_from(g.max_size).unwrap_or(i32::MAX),
        debug: g.debug_line(),
    }
}

/// The node a request names; an absent node is an empty one (matches nothing).
pub fn node_ref(node: Option<&proto::ExternalGrpcNode>) -> NodeRef {
    node.map_or_else(
        || NodeRef {
            provider_id: String::new(),
            name: String::new(),
        },
        |n| NodeRef {
            provider_id: n.provider_id.clone(),
            name: n.name.clone(),
        },
    )
}

/// The wire form of an instance. Failed instances are `instanceCreating` with error info,
/// the only combination CA counts as a creation error.
pub fn instance(i: &Instance) -> proto::Instance {
    use proto::instance_status::InstanceState as Wire;
    let state = match i.state {
        InstanceState::Creating => Wire::InstanceCreating,
        InstanceState::Running => Wire::InstanceRunning,
        InstanceState::Deleting => Wire::InstanceDeleting,
    };
    let (state, error_info) = match &i.error {
        Some(e) => (
            Wire::InstanceCreating,
            Some(proto::InstanceErrorInfo {
                error_code: e.code.as_str().to_owned(),
                error_message: e.message.clone(),
                instance_error_class: e.code.class().wire_value(),
            }),
        ),
        None => (state, None),
    };
    proto::Instance {
        id: i.id.clone(),
        status: Some(proto::InstanceStatus {
            instance_state: state as i32,
            error_info,
        }),
    }
}

/// The protobuf `v1.Node` for a template.
pub fn template_node(t: &TemplateNode) -> core::Node {
    let quantities = |m: &std::collections::BTreeMap<String, String>| {
        m.iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    PbQuantity {
                        string: Some(v.clone()),
                    },
                )
            })
            .collect()
    };
    core::Node {
        metadata: Some(ObjectMeta {
            name: Some(t.metadata.name.clone()),
            labels: t.metadata.labels.clone(),
            annotations: t.metadata.annotations.clone(),
            ..ObjectMeta::default()
        }),
        spec: Some(core::NodeSpec {
            taints: t
                .spec
                .taints
                .iter()
                .map(|taint| core::Taint {
                    key: Some(taint.key.clone()),
                    value: Some(taint.value.clone()),
                    effect: Some(taint.effect.to_owned()),
                    time_added: None,
                })
                .collect(),
            ..core::NodeSpec::default()
        }),
        status: Some(core::NodeStatus {
            capacity: quantities(&t.status.capacity),
            allocatable: quantities(&t.status.allocatable),
            conditions: t
                .status
                .conditions
                .iter()
                .map(|c| core::NodeCondition {
                    r#type: Some(c.type_.to_owned()),
                    status: Some(c.status.to_owned()),
                    reason: Some(c.reason.to_owned()),
                    ..core::NodeCondition::default()
                })
                .collect(),
            phase: Some("Running".to_owned()),
            ..core::NodeStatus::default()
        }),
    }
}

/// The template response: the same Node bytes in the legacy field 1 and in field 2.
pub fn template_response(t: &TemplateNode) -> proto::NodeGroupTemplateNodeInfoResponse {
    let bytes = template_node(t).encode_to_vec();
    proto::NodeGroupTemplateNodeInfoResponse {
        node_info: bytes.clone(),
        node_bytes: bytes,
        resource_slice_bytes: Vec::new(),
    }
}

fn duration_in(
    new: Option<&prost_types::Duration>,
    legacy: Option<&proto::LegacyDuration>,
) -> Option<Duration> {
    if let Some(d) = new {
        let secs = u64::try_from(d.seconds).ok()?;
        let nanos = u32::try_from(d.nanos).ok()?;
        return Some(Duration::new(secs, nanos));
    }
    legacy
        .and_then(|d| u64::try_from(d.duration).ok())
        .map(Duration::from_nanos)
}

fn duration_out(
    d: Option<Duration>,
) -> (Option<prost_types::Duration>, Option<proto::LegacyDuration>) {
    match d {
        None => (None, None),
        Some(d) => (
            Some(prost_types::Duration {
                seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
            }),
            Some(proto::LegacyDuration {
                duration: i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
            }),
        ),
    }
}

/// CA's option defaults, reading durations from fields 8–10 with fallback to legacy 3–5.
pub fn options_in(o: &proto::NodeGroupAutoscalingOptions) -> AutoscalingOptions {
    AutoscalingOptions {
        scale_down_utilization_threshold: o.scale_down_utilization_threshold,
        scale_down_gpu_utilization_threshold: o.scale_down_gpu_utilization_threshold,
        zero_or_max_node_scaling: o.zero_or_max_node_scaling,
        ignore_daemon_sets_utilization: o.ignore_daemon_sets_utilization,
        scale_down_unneeded_time: duration_in(
            o.scale_down_unneeded_duration.as_ref(),
            o.scale_down_unneeded_time.as_ref(),
        ),
        scale_down_unready_time: duration_in(
            o.scale_down_unready_duration.as_ref(),
            o.scale_down_unready_time.as_ref(),
        ),
        max_node_provision_time: duration_in(
            o.max_node_provision_duration.as_ref(),
            o.max_node_provision_time.as_ref(),
        ),
        max_node_startup_time: duration_in(o.max_node_startup_duration.as_ref(), None),
        allow_non_atomic_scale_up_to_max: o.allow_non_atomic_scale_up_to_max,
    }
}

/// The options answer, with durations in both the new (8–10) and legacy (3–5) fields.
pub fn options_out(o: &AutoscalingOptions) -> proto::NodeGroupAutoscalingOptions {
    let (unneeded, unneeded_legacy) = duration_out(o.scale_down_unneeded_time);
    let (unready, unready_legacy) = duration_out(o.scale_down_unready_time);
    let (provision, provision_legacy) = duration_out(o.max_node_provision_time);
    let (startup, _) = duration_out(o.max_node_startup_time);
    proto::NodeGroupAutoscalingOptions {
        scale_down_utilization_threshold: o.scale_down_utilization_threshold,
        scale_down_gpu_utilization_threshold: o.scale_down_gpu_utilization_threshold,
        scale_down_unneeded_time: unneeded_legacy,
        scale_down_unready_time: unready_legacy,
        max_node_provision_time: provision_legacy,
        zero_or_max_node_scaling: o.zero_or_max_node_scaling,
        ignore_daemon_sets_utilization: o.ignore_daemon_sets_utilization,
        scale_down_unneeded_duration: unneeded,
        scale_down_unready_duration: unready,
        max_node_provision_duration: provision,
        max_node_startup_duration: startup,
        allow_non_atomic_scale_up_to_max: o.allow_non_atomic_scale_up_to_max,
    }
}

fn instant(
    new: Option<&prost_types::Timestamp>,
    legacy: Option<&proto::LegacyTime>,
) -> Option<(i64, i32)> {
    new.map(|t| (t.seconds, t.nanos))
        .or_else(|| legacy.map(|t| (t.seconds, t.nanos)))
}

/// The pricing period: new timestamp fields first, legacy ones as fallback.
///
/// # Errors
/// [`Error::InvalidRequest`] when a bound is missing or the end precedes the start.
pub fn pricing_period(
    start: Option<&prost_types::Timestamp>,
    legacy_start: Option<&proto::LegacyTime>,
    end: Option<&prost_types::Timestamp>,
    legacy_end: Option<&proto::LegacyTime>,
) -> Result<Duration, Error> {
    let (Some(s), Some(e)) = (instant(start, legacy_start), instant(end, legacy_end)) else {
        return Err(Error::InvalidRequest(
            "pricing request needs both a start and an end timestamp".to_owned(),
        ));
    };
    let nanos = |(secs, n): (i64, i32)| i128::from(secs) * 1_000_000_000 + i128::from(n);
    let span = nanos(e) - nanos(s);
    if span < 0 {
        return Err(Error::InvalidRequest(format!(
            "pricing period ends ({}s) before it starts ({}s)",
            e.0, s.0
        )));
    }
    let span = u64::try_from(span)
        .map_err(|_| Error::InvalidRequest("pricing period is too long".to_owned()))?;
    Ok(Duration::from_nanos(span))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ErrorCode, InstanceError};

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    #[test]
    fn options_are_written_to_new_and_legacy_fields_alike() {
        let o = AutoscalingOptions {
            scale_down_utilization_threshold: 0.3,
            scale_down_unneeded_time: secs(1200),
            scale_down_unready_time: secs(60),
            max_node_provision_time: Some(Duration::from_millis(1500)),
            ..AutoscalingOptions::default()
        };
        let wire = options_out(&o);
        assert_eq!(
            wire.scale_down_unneeded_duration,
            Some(prost_types::Duration {
                seconds: 1200,
                nanos: 0
            })
        );
        assert_eq!(
            wire.scale_down_unneeded_time,
            Some(proto::LegacyDuration {
                duration: 1_200_000_000_000
            })
        );
        assert_eq!(
            wire.max_node_provision_time,
            Some(proto::LegacyDuration {
                duration: 1_500_000_000
            })
        );
        assert_eq!(
            wire.max_node_provision_duration,
            Some(prost_types::Duration {
                seconds: 1,
                nanos: 500_000_000
            })
        );
        assert_eq!(options_in(&wire), o);
    }

    #[test]
    fn option_durations_fall_back_to_legacy_fields() {
        let wire = proto::NodeGroupAutoscalingOptions {
            scale_down_unneeded_time: Some(proto::LegacyDuration {
                duration: 600_000_000_000,
            }),
            scale_down_unready_duration: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
            scale_down_unready_time: Some(proto::LegacyDuration { duration: 1 }),
            ..Default::default()
        };
        let o = options_in(&wire);
        assert_eq!(o.scale_down_unneeded_time, secs(600));
        // The new field wins when both are present.
        assert_eq!(o.scale_down_unready_time, secs(5));
        assert_eq!(o.max_node_provision_time, None);
    }

    #[test]
    fn pricing_period_prefers_new_timestamps_and_rejects_reversed_ones() {
        let ts = |s| prost_types::Timestamp {
            seconds: s,
            nanos: 0,
        };
        let legacy = |s| proto::LegacyTime {
            seconds: s,
            nanos: 0,
        };
        let p = pricing_period(Some(&ts(100)), Some(&legacy(0)), Some(&ts(3700)), None).unwrap();
        assert_eq!(p, Duration::from_secs(3600));
        let p = pricing_period(None, Some(&legacy(0)), None, Some(&legacy(7200))).unwrap();
        assert_eq!(p, Duration::from_secs(7200));
        assert!(matches!(
            pricing_period(Some(&ts(10)), None, Some(&ts(5)), None),
            Err(Error::InvalidRequest(_))
        ));
        assert!(matches!(
            pricing_period(None, None, Some(&ts(5)), None),
            Err(Error::InvalidRequest(_))
        ));
    }

    #[test]
    fn failed_instances_are_creating_with_error_info_and_class() {
        let i = Instance {
            id: "x://1".into(),
            node_name: "1".into(),
            state: InstanceState::Running,
            error: Some(InstanceError {
                code: ErrorCode::QuotaExceeded,
                message: "quota".into(),
            }),
            claim: None,
        };
        let wire = instance(&i);
        let status = wire.status.unwrap();
        assert_eq!(
            status.instance_state,
            proto::instance_status::InstanceState::InstanceCreating as i32
        );
        let info = status.error_info.unwrap();
        assert_eq!(info.error_code, "quotaExceeded");
        assert_eq!(info.instance_error_class, 1);
        let ok = instance(&Instance { error: None, ..i });
        assert_eq!(ok.status.unwrap().error_info, None);
    }
}
