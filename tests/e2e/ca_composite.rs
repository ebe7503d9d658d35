//! CompositePodGroups (Kubernetes 1.38, `scheduling.k8s.io/v1beta1`) driven by the real
//! cluster-autoscaler: a composite whose two children need two different node groups is
//! scaled up from zero in one decision (the group CA asked for and the other one, both target
//! sizes in one audit record), and a composite whose second child cannot fit gets no node on
//! either group. Rows without CompositePodGroup (the gate is off) skip these tests, saying so.

use std::time::{Duration, Instant};

use gangscaler::audit::{DecisionEvent, Verdict};

use super::harness::Versions;
use super::scenario::{GangSpec, Group, Row, Scenario, Setup};
use super::support::create_dynamic;

/// Whether the row serves CompositePodGroups (its gates turn them on).
fn composites_served() -> bool {
    let row = Versions::load();
    let on = row.gates.contains("CompositePodGroup=true");
    if !on {
        eprintln!(
            "skipped: Kubernetes {} row runs without the CompositePodGroup gate",
            row.minor
        );
    }
    on
}

/// A child of `members` whole-GPU-node pods that only group `group`'s nodes can host.
fn child(name: &str, members: u32, group: &str) -> GangSpec {
    GangSpec::new(name, members).extra(serde_json::json!({
        "nodeSelector": {"gangscaler.io/node-group": group}
    }))
}

/// Creates CompositePodGroup `name` (gang of `min_groups` children), then each child
/// PodGroup naming it as parent, then the children's pods.
async fn create_composite(
    s: &Scenario,
    name: &str,
    min_groups: u32,
    children: &[GangSpec],
) -> Instant {
    // A child must name a Workload template (apiserver validation); the scheduler does not
    // read the Workload itself.
    create_dynamic(
        &s.client,
        serde_json::json!({
            "apiVersion": s.api, "kind": "CompositePodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "workloadRef": {"workloadName": name, "templateName": "job"},
                "schedulingPolicy": {"gang": {"minGroupCount": min_groups}}
            }
        }),
    )
    .await;
    for c in children {
        create_dynamic(
            &s.client,
            serde_json::json!({
                "apiVersion": s.api, "kind": "PodGroup",
                "metadata": {"name": c.name, "namespace": "default"},
                "spec": {
                    "parentCompositePodGroupName": name,
                    "workloadRef": {"workloadName": name, "templateName": c.name},
                    "schedulingPolicy": {"gang": {"minCount": c.min()}}
                }
            }),
        )
        .await;
    }
    for c in children {
        for m in 0..c.members {
            create_dynamic(&s.client, c.member(&s.api, m)).await;
        }
    }
    Instant::now()
}

/// Nodes gangscaler added on `group` (accepted decisions).
fn added(decisions: &[DecisionEvent]) -> u32 {
    decisions
        .iter()
        .filter(|d| d.verdict == Verdict::Accept)
        .map(|d| d.applied_delta)
        .sum()
}

/// Starts `name` under `policy` with groups `gpu-a` (max 4) and `gpu-b` (max `gpu_b_max`), and
/// creates composite `job`: children `job-a` (2 whole nodes of gpu-a) and `job-b` (2 of gpu-b).
async fn start_job(name: &str, policy: &str, gpu_b_max: u32) -> (Scenario, Instant) {
    let setup = Setup::new(
        name,
        policy,
        vec![Group::new("gpu-a", 4), Group::new("gpu-b", gpu_b_max)],
    );
    let s = Scenario::start(setup).await;
    s.sampler.begin();
    let created = create_composite(
        &s,
        "job",
        2,
        &[child("job-a", 2, "gpu-a"), child("job-b", 2, "gpu-b")],
    )
    .await;
    (s, created)
}

async fn two_groups(policy: &str) {
    if !composites_served() {
        return;
    }
    let (s, created) = start_job("ca-composite-two-groups", policy, 4).await;
    let a = s.wait_running("job-a", 2, Duration::from_secs(180)).await;
    let b = s.wait_running("job-b", 2, Duration::from_secs(60)).await;
    let formed = created.elapsed().as_secs_f64();
    assert_eq!(
        (a.len(), b.len()),
        (2, 2),
        "one member per node: {a:?} {b:?}"
    );
    if policy == "off" {
        // CA alone: each group is scaled for its own child's pods, in separate loops.
        let asks = |g: &str| s.decisions(g).iter().filter(|d| d.ca_delta > 0).count();
        let (on_a, on_b) = (asks("gpu-a"), asks("gpu-b"));
        assert!(
            on_a >= 1 && on_b >= 1,
            "CA asked both groups itself: {on_a} {on_b}"
        );
        Row::new(
            &s,
            "composite of two children on two groups (2 + 2 × 8 GPU)",
            "gpu-a",
            Some(formed),
        )
        .outcome("formed")
        .note(format!(
            "CA scaled each group for its own child's pods ({on_a} + {on_b} asks)"
        ))
        .record();
        return;
    }

    // One decision admitted the whole composite: the record of the group CA asked for holds
    // both groups' target sizes and nodes.
    let all: Vec<DecisionEvent> = ["gpu-a", "gpu-b"]
        .iter()
        .flat_map(|g| s.decisions(g))
        .collect();
    let primary: Vec<&DecisionEvent> = all
        .iter()
        .filter(|d| d.rule == "composite_admitted")
        .collect();
    assert_eq!(primary.len(), 1, "one cross-group decision: {all:#?}");
    let primary = primary[0];
    assert_eq!(primary.verdict, Verdict::Accept);
    let shares: Vec<(&str, u32, u32)> = primary.composites[0]
        .shares
        .iter()
        .map(|s| (s.node_group.as_str(), s.target, s.nodes))
        .collect();
    assert_eq!(
        shares,
        [("gpu-a", 0, 2), ("gpu-b", 0, 2)],
        "both groups from zero in one record: {primary:#?}"
    );
    assert_eq!(primary.composites[0].composite.name, "job");
    let other = if primary.node_group == "gpu-a" {
        "gpu-b"
    } else {
        "gpu-a"
    };
    let share = s
        .decisions(other)
        .into_iter()
        .find(|d| d.rule == "composite_share")
        .unwrap_or_else(|| panic!("the share record of {other}: {all:#?}"));
    assert_eq!(share.ca_delta, 0, "CA did not ask for {other}: {share:#?}");
    assert_eq!(share.composites, primary.composites);
    // CA asked only for the primary group's pods in that call; any later ask for the other
    // group's (still pending) pods was not given nodes a second time.
    for g in ["gpu-a", "gpu-b"] {
        assert_eq!(
            added(&s.decisions(g)),
            2,
            "{g} got its share once: {all:#?}"
        );
        assert_eq!(
            s.group_nodes(g).await.len(),
            2,
            "{g}: exactly the child's nodes"
        );
    }
    let asked_other = s.decisions(other).iter().filter(|d| d.ca_delta > 0).count();
    // Each child's lifecycle ends succeeded, once the composite formed.
    let oa = s.wait_outcome("job-a", Duration::from_secs(60)).await;
    let ob = s.wait_outcome("job-b", Duration::from_secs(60)).await;
    assert_eq!(
        (oa.outcome.as_str(), ob.outcome.as_str()),
        ("succeeded", "succeeded")
    );
    Row::new(&s, "composite of two children on two groups (2 + 2 × 8 GPU)", primary.node_group.as_str(), Some(formed))
        .outcome("succeeded")
        .note(format!(
            "one decision on {} ({} asked by CA) raised both groups from 0 to 2; CA asked {other} {} more time(s) and got nothing twice",
            primary.node_group,
            primary.ca_delta,
            asked_other
        ))
        .record();
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_composite_on_two_groups_strict_scales_both_from_zero_in_one_decision() {
    two_groups("strict").await;
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_composite_on_two_groups_off_scales_each_group_for_its_own_child() {
    two_groups("off").await;
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_composite_second_child_too_big_strict_gives_no_node_on_any_group() {
    second_child_too_big("strict").await;
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_composite_second_child_too_big_off_adds_nodes_the_composite_cannot_use() {
    second_child_too_big("off").await;
}

async fn second_child_too_big(policy: &str) {
    if !composites_served() {
        return;
    }
    let window = Duration::from_secs(90);
    // job-b needs two whole nodes of gpu-b, whose max is 1.
    let (mut s, created) = start_job("ca-composite-second-child-too-big", policy, 1).await;
    while created.elapsed() < window {
        s.assert_running();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let sample = s.sampler.sample();
    assert!(
        s.running("job-a").await.is_empty(),
        "the composite cannot form"
    );
    if policy == "off" {
        // CA alone adds what each group allows for its own child's pods; nothing can run.
        assert!(!sample.seen.is_empty(), "CA added nodes: {sample:?}");
        Row::new(
            &s,
            "composite whose second child cannot fit (2 × 8 GPU on max 1)",
            "gpu-a",
            None,
        )
        .outcome(format!("never formed in {:.0}s", window.as_secs_f64()))
        .note(format!(
            "{} nodes added on both groups that no member can use",
            sample.seen.len()
        ))
        .record();
        return;
    }
    assert!(sample.seen.is_empty(), "no node on any group: {sample:?}");
    let asked_a = s.decisions("gpu-a");
    assert!(!asked_a.is_empty(), "CA asked for gpu-a (job-a fits it)");
    for d in asked_a.iter().chain(&s.decisions("gpu-b")) {
        assert_eq!(d.verdict, Verdict::Reject, "{d:#?}");
        assert_eq!(d.applied_delta, 0);
        assert!(
            d.deferred
                .iter()
                .any(|g| g.gang.name == "job" && g.reason.contains("job-b")),
            "the record names the composite and the child that cannot fit: {d:#?}"
        );
    }
    Row::new(
        &s,
        "composite whose second child cannot fit (2 × 8 GPU on max 1)",
        "gpu-a",
        None,
    )
    .outcome(format!("no node in {:.0}s", window.as_secs_f64()))
    .note(format!(
        "{} asks for gpu-a rejected whole; job-a's fitting half got nothing",
        asked_a.len()
    ))
    .record();
}
