//! The wire matrix: CA 1.34 (the legacy wire: the template in field 1, option durations in
//! fields 3–5) against gangscaler, and what gangscaler shows when CA cannot see a gang at all
//! (members without a scheduler verdict).

use std::time::{Duration, Instant};

use super::ca_scaleup::assert_ca_made_the_calls;
use super::harness::{Versions, eventually, metric_value};
use super::scenario::{GangSpec, Group, Row, Scenario, Setup};
use super::{create_dynamic, gang_event};

fn on_group(group: &str) -> serde_json::Value {
    serde_json::json!({"nodeSelector": {"gangscaler.io/node-group": group}})
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh --legacy-ca"]
async fn ca_1_34_reads_the_legacy_template_and_option_fields_and_scales_a_group_from_zero() {
    let legacy = Versions::load().ca_legacy;
    // `keep` overrides scale-down-unneeded-time to 10m through NodeGroupGetOptions; `drop`
    // keeps CA's 5s. CA 1.34 reads the durations from fields 3-5 only: if they were missing
    // there, it would read 0 and remove `keep`'s nodes at once.
    let groups = vec![
        Group::new("keep", 2).extra("autoscalingOptions: {scaleDownUnneededTime: 10m}"),
        Group::new("drop", 2),
    ];
    let setup = Setup::new("ca-legacy-wire", "strict", groups)
        .ca_version(&legacy)
        .ca_flag("scale-down-unneeded-time", "5s")
        .ca_flag("scale-down-delay-after-add", "5s");
    let s = Scenario::start(setup).await;
    s.sampler.begin();
    let created = s
        .create_gang(&GangSpec::new("k", 2).extra(on_group("keep")))
        .await;
    s.create_gang(&GangSpec::new("d", 2).extra(on_group("drop")))
        .await;
    s.wait_running("k", 2, Duration::from_secs(120)).await;
    let formed = created.elapsed().as_secs_f64();
    s.wait_running("d", 2, Duration::from_secs(60)).await;
    // Scaled from zero: CA read the template from field 1 (1.34 has no nodeBytes).
    for group in ["keep", "drop"] {
        let (asks, _) = assert_ca_made_the_calls(&s, group);
        assert_eq!(asks[0].from, 0, "{group}: {asks:?}");
    }
    // Both scale-ups end (which releases their nodes' scale-down protection), then both jobs
    // end; CA removes `drop`'s idle nodes after 5s, and keeps `keep`'s for 10m.
    for gang in ["k", "d"] {
        let o = s.wait_outcome(gang, Duration::from_secs(60)).await;
        assert_eq!(o.outcome.as_str(), "succeeded", "{o:?}");
    }
    s.delete_members("k").await;
    s.delete_members("d").await;
    let ended = Instant::now();
    eventually(
        "CA scaled `drop` down",
        Duration::from_secs(120),
        || async { s.group_nodes("drop").await.is_empty().then_some(()) },
    )
    .await;
    let dropped_after = ended.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let keep = s.group_nodes("keep").await;
    assert_eq!(
        keep.len(),
        2,
        "CA 1.34 honoured keep's 10m scale-down-unneeded-time from the legacy fields"
    );
    assert!(
        keep.iter()
            .all(|n| n.metadata.annotations.as_ref().is_none_or(
                |a| !a.contains_key("cluster-autoscaler.kubernetes.io/scale-down-disabled")
            )),
        "the option, not gangscaler's protection, keeps them"
    );
    assert!(
        s.ca.scaled_down_nodes()
            .iter()
            .all(|n| n.starts_with("drop")),
        "{:?}",
        s.ca.scaled_down_nodes()
    );
    Row::new(&s, "legacy wire: CA 1.34 scales two groups from zero", "keep", Some(formed))
        .outcome("succeeded")
        .note(format!(
            "`drop` (CA's 5s) scaled down {dropped_after:.0}s after the job; `keep` (10m via fields 3-5) kept {:.0}s and more",
            ended.elapsed().as_secs_f64()
        ))
        .record();
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn a_gang_whose_members_get_no_scheduler_verdict_is_flagged_since_ca_cannot_see_it() {
    let setup = Setup::new("ca-no-verdict", "strict", vec![Group::new("gpu", 4)])
        .lifecycle("{interval: 500ms, noVerdictAfter: 5s}");
    let s = Scenario::start(setup).await;
    // No scheduler by this name runs: the members never get PodScheduled=False/Unschedulable,
    // which is what CA needs to consider a pod (the symptom of kube-scheduler 1.37.2's
    // DynamicResources PodGroupPostFilter error).
    s.create_gang(
        &GangSpec::new("unseen", 2)
            .extra(serde_json::json!({"schedulerName": "no-such-scheduler"})),
    )
    .await;
    let note = gang_event(&s.client, "unseen", "GangNotSeenByAutoscaler").await;
    assert!(note.contains("no-such-scheduler"), "{note}");
    let m = s.gangscaler_metrics().await;
    assert_eq!(
        metric_value(&m, "gangscaler_gangs_without_verdict", &[]),
        Some(1.0),
        "{m}"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(s.ca.scale_ups().is_empty(), "CA never saw the gang");
    assert!(s.group_nodes("gpu").await.is_empty());
}

/// kube-scheduler 1.37+ with its default profile: DynamicResources' PodGroupPostFilter fails
/// ("not found") in a gang's cycle where no member reached its PreFilter. In a cluster with no
/// Node at all no member ever does (scheduling stops at "no nodes available"), so the members
/// never get a verdict and CA never scales up for them; gangscaler says so. One Node anywhere
/// in the cluster (here a control-plane Node no gang member may use) is enough: the members
/// reach PreFilter, get Unschedulable, and CA scales the gang up. On 1.35 and 1.36 the plugin
/// has no PodGroupPostFilter and the default profile works from an empty cluster.
#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn with_kube_scheduler_defaults_a_gang_is_invisible_to_ca_only_while_the_cluster_has_no_node()
{
    let setup = Setup::new("ca-default-profile", "strict", vec![Group::new("gpu", 4)])
        .lifecycle("{interval: 500ms, noVerdictAfter: 5s}")
        .scheduler_profile("default");
    let s = Scenario::start(setup).await;
    let created = s.create_gang(&GangSpec::new("train", 2)).await;
    let minor = Versions::load().minor;
    if minor.as_str() >= "1.37" {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let note = gang_event(&s.client, "train", "GangNotSeenByAutoscaler").await;
        assert!(note.contains("DynamicResources"), "{note}");
        tokio::time::sleep(Duration::from_secs(50).saturating_sub(created.elapsed())).await;
        assert!(
            s.ca.scale_ups().is_empty(),
            "CA never saw the gang: {:?}",
            s.ca.scale_ups()
        );
        let log = std::fs::read_to_string(s.cluster.dir.join("kube-scheduler.log")).unwrap();
        assert!(
            log.contains("PodGroupPostFilter"),
            "the scheduler's own error is in its log"
        );
        assert!(
            !s.ca.lines("ignored by allowed schedulers").is_empty(),
            "CA counts the members as ignored"
        );
        assert_eq!(
            scheduled_reasons(&s.client, "train").await,
            ["SchedulerError", "SchedulerError"],
            "the members' verdict is the scheduler's error"
        );
        eprintln!("{minor} trap reproduced with no Node; gangscaler's Event: {note}");
        // The trigger is the empty cluster, not the missing claims: one Node that no member
        // can use lets them reach DynamicResources' PreFilter, and the same gang with the
        // same profile gets Unschedulable and is scaled up.
        let added = Instant::now();
        create_dynamic(&s.client, control_plane_node("control-plane-0")).await;
        // The new GPU nodes take 15 s to come: the verdict is visible meanwhile.
        eventually(
            "the members' verdict is Unschedulable once a Node exists",
            Duration::from_secs(60),
            || async {
                (scheduled_reasons(&s.client, "train").await == ["Unschedulable", "Unschedulable"])
                    .then_some(())
            },
        )
        .await;
        s.wait_running("train", 2, Duration::from_secs(180)).await;
        assert_ca_made_the_calls(&s, "gpu");
        eprintln!(
            "{minor}: with one Node the gang ran {:.1}s later",
            added.elapsed().as_secs_f64()
        );
    } else {
        s.wait_running("train", 2, Duration::from_secs(120)).await;
        assert_ca_made_the_calls(&s, "gpu");
        let m = s.gangscaler_metrics().await;
        assert_eq!(
            metric_value(&m, "gangscaler_gangs_without_verdict", &[]),
            Some(0.0),
            "no false alarm: {m}"
        );
        let reasons = super::gang_event_reasons(&s.client, "train").await;
        assert!(
            reasons.iter().any(|r| r == "ScaleUpAdmitted"),
            "{reasons:?}"
        );
        assert!(
            !reasons.iter().any(|r| r == "GangNotSeenByAutoscaler"),
            "{reasons:?}"
        );
    }
}

/// The reason of each member's `PodScheduled` condition (sorted; empty for none).
async fn scheduled_reasons(client: &kube::Client, gang: &str) -> Vec<String> {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), "default");
    let mut reasons: Vec<String> = pods
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&format!("{gang}-")))
        })
        .map(|p| {
            p.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "PodScheduled")
                .and_then(|c| c.reason)
                .unwrap_or_default()
        })
        .collect();
    reasons.sort();
    reasons
}

/// A kwok Node outside every node group that no gang member may use: a control-plane Node
/// (tainted for control-plane pods only, no GPUs), as most clusters have.
fn control_plane_node(name: &str) -> serde_json::Value {
    let capacity = serde_json::json!({"cpu": "4", "memory": "16Gi", "pods": "110"});
    serde_json::json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name,
                     "labels": {"kubernetes.io/hostname": name, "node-role.kubernetes.io/control-plane": ""},
                     "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]},
        "status": {"capacity": capacity, "allocatable": capacity}})
}
