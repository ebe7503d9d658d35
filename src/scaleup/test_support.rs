//! Records for tests of the tracker, the observer and the recorder.

use crate::audit::{DecisionEvent, Extent, GangId, GangSummary, Verdict};

pub(crate) fn gang(name: &str) -> GangId {
    GangId {
        namespace: "ml".into(),
        name: name.into(),
        api_version: "scheduling.k8s.io/v1alpha2".into(),
        kind: "PodGroup".into(),
    }
}

pub(crate) fn decision(id: Option<&str>, verdict: Verdict, gangs: &[&str]) -> DecisionEvent {
    DecisionEvent {
        scale_up_id: id.map(str::to_owned),
        node_group: "h100".into(),
        policy: "strict".into(),
        verdict,
        rule: "gangs_admitted".into(),
        target: 0,
        max_size: 8,
        headroom: 8,
        ca_delta: 2,
        applied_delta: 2,
        capped: false,
        gang_nodes: 2,
        ungrouped_nodes: 0,
        gangs: gangs
            .iter()
            .map(|g| GangSummary {
                gang: gang(g),
                priority: 0,
                extent: Extent::Whole,
                nodes: 1,
                idle: 0,
                in_flight: 0,
                repair_of: None,
                spread: Vec::new(),
            })
            .collect(),
        deferred: Vec::new(),
        deferred_total: 0,
        covered: 0,
        unhostable: 0,
        duration_ms: None,
        reason: "test".into(),
        reservation_off: None,
        composites: Vec::new(),
    }
}
