//! `plan`, `Reason` labels and `Policy` defaults.

use crate::model::labels;
use crate::planner::{FitOutcome, Policy, Reason, plan};

use super::*;

#[test]
fn plan_lists_pending_gangs_by_priority_against_every_group() {
    let h100 = gpu_group("h100", 10, 8);
    let small = gpu_group("h100-small", 2, 8);
    let mut bare = cpu_group("bare", 5);
    bare.capacity = None;
    let cpu = cpu_group("cpu", 10);
    let groups = [
        (&h100, Some(shape(&h100)), 0),
        (&small, Some(shape(&small)), 0),
        (&bare, None, 0),
        (&cpu, Some(shape(&cpu)), 0),
    ];
    let mut done = gang("done").min(1).members(1, |p| p).build();
    done.scheduled = true;
    let gangs = vec![
        gang("low")
            .min(2)
            .members(2, |p| p.gpus(8).gpu_tolerant())
            .build(),
        gang("high")
            .priority(5)
            .min(2)
            .members(4, |p| p.gpus(4).gpu_tolerant())
            .build(),
        done,
    ];
    let p = plan(&arcs(gangs), &groups);
    let names: Vec<&str> = p.gangs.iter().map(|g| g.gang.name.as_str()).collect();
    assert_eq!(names, vec!["high", "low"]);
    let high = &p.gangs[0];
    assert_eq!((high.unbound, high.bound, high.min_count), (4, 0, 2));
    assert_eq!(
        high.groups[0].outcome,
        FitOutcome::Fits {
            nodes_all: 2,
            nodes_min: 1,
            fits_headroom: true,
            min_fits_headroom: true
        }
    );
    assert!(matches!(
        &high.groups[2].outcome,
        FitOutcome::Unfittable {
            reason: Reason::NoTemplate,
            ..
        }
    ));
    assert!(matches!(
        &high.groups[3].outcome,
        FitOutcome::Unfittable {
            reason: Reason::PodTooLarge { .. },
            ..
        }
    ));
    assert_eq!(high.best.as_ref().map(|g| g.as_str()), Some("h100"));
}

#[test]
fn plan_reports_whether_the_need_fits_the_headroom() {
    let h100 = gpu_group("h100", 10, 8);
    let groups = [(&h100, Some(shape(&h100)), 7)];
    let gangs = vec![
        gang("train")
            .min(2)
            .members(4, |p| p.gpus(8).gpu_tolerant())
            .build(),
    ];
    let p = plan(&arcs(gangs), &groups);
    assert_eq!(p.gangs[0].groups[0].headroom, 3);
    assert_eq!(
        p.gangs[0].groups[0].outcome,
        FitOutcome::Fits {
            nodes_all: 4,
            nodes_min: 2,
            fits_headroom: false,
            min_fits_headroom: true
        }
    );
    assert_eq!(p.gangs[0].best, None);
}

#[test]
fn plan_serializes_outcomes_with_a_status_tag_and_reasons_with_their_kind() {
    let cpu = cpu_group("cpu", 10);
    let groups = [(&cpu, Some(shape(&cpu)), 0)];
    let gangs = vec![
        gang("g")
            .member(pod("p").selector(labels::GPU_PRODUCT, "x").build())
            .build(),
    ];
    let json = serde_json::to_value(plan(&arcs(gangs), &groups)).unwrap();
    let option = &json["gangs"][0]["groups"][0];
    assert_eq!(option["status"], "unfittable");
    assert_eq!(option["group"], "cpu");
    assert_eq!(option["reason"]["kind"], "selector_mismatch");
    assert_eq!(option["reason"]["key"], labels::GPU_PRODUCT);
    assert!(option["message"].as_str().unwrap().contains("pod p"));
}

#[test]
fn every_reason_serializes_its_kind_label_and_displays_its_numbers() {
    let reasons = [
        Reason::NoTemplate,
        Reason::NothingToPlace,
        Reason::PodTooLarge {
            pod: "p".into(),
            resource: "memory".into(),
            requested: 40 * GI,
            allocatable: 32 * GI,
        },
        Reason::Untolerated {
            pod: "p".into(),
            taint: "k=v:NoSchedule".into(),
        },
        Reason::SelectorMismatch {
            pod: "p".into(),
            key: "k".into(),
        },
        Reason::AffinityMismatch {
            pod: "p".into(),
            key: "k".into(),
        },
        Reason::TopologyMissing { key: "rack".into() },
        Reason::CsiLimit {
            pod: "p".into(),
            driver: EBS.into(),
            volumes: 5,
            limit: 4,
        },
        Reason::InsufficientHeadroom {
            nodes_all: 8,
            nodes_min: 6,
            headroom: 5,
        },
        Reason::UnresolvedClaim {
            pod: "p".into(),
            claim: "data".into(),
        },
    ];
    for r in &reasons {
        let json = serde_json::to_value(r).unwrap();
        assert_eq!(json["kind"], r.kind());
    }
    assert_eq!(
        reasons[2].to_string(),
        "pod p requests 40Gi memory but a node offers 32Gi"
    );
    assert_eq!(
        reasons[7].to_string(),
        "pod p attaches 5 volumes of ebs.csi.aws.com but a node allows 4"
    );
    assert_eq!(
        reasons[8].to_string(),
        "gang needs 8 nodes (6 for minCount) but 5 can be added"
    );
    assert_eq!(
        reasons[9].to_string(),
        "pod p uses persistentvolumeclaim data whose CSI driver cannot be resolved"
    );
    let cpu = Reason::PodTooLarge {
        pod: "p".into(),
        resource: "cpu".into(),
        requested: 8500,
        allocatable: 8000,
    };
    assert_eq!(
        cpu.to_string(),
        "pod p requests 8500m cpu but a node offers 8"
    );
}

#[test]
fn strict_is_the_default_policy() {
    assert_eq!(Policy::default(), Policy::Strict);
    assert_eq!(serde_json::to_value(Policy::RoundUp).unwrap(), "roundUp");
    assert_eq!(Policy::RoundUp.as_str(), "roundUp");
}
