//! Spread with the real cluster-autoscaler (docs/gang-admission.md, "Spread"): a gang without a
//! topology key that no group holds alone, but its pool does, is admitted in CA's first call
//! over both groups, all of it at once, and forms with no call refused.

use std::time::Duration;

use gangscaler::audit::Verdict;

use super::scenario::{GangSpec, Group, Row, Scenario, Setup};

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_spread_admits_a_gang_no_group_holds_alone_over_both_groups_of_its_pool() {
    // Five whole-node members; each group has room for three.
    let setup = Setup::new(
        "ca-spread",
        "strict",
        vec![Group::new("gpu-a", 3), Group::new("gpu-b", 3)],
    );
    let mut s = Scenario::start(setup).await;
    s.sampler.begin();
    let created = s.create_gang(&GangSpec::new("wide", 5)).await;
    let nodes = s.wait_running("wide", 5, Duration::from_secs(240)).await;
    let formed = created.elapsed().as_secs_f64();
    s.assert_running();
    assert_eq!(nodes.len(), 5, "{nodes:?}");
    let a = s.decisions("gpu-a");
    let b = s.decisions("gpu-b");
    let all: Vec<_> = a.iter().chain(&b).collect();
    assert!(
        all.iter().all(|d| d.verdict == Verdict::Accept),
        "no call refused: {all:#?}"
    );
    // One call carried the whole gang: the asked group's record names the other's share,
    // and the other group's decision is a spread share CA did not ask for.
    let asked = all
        .iter()
        .find(|d| d.rule == "gangs_admitted" && d.gangs.iter().any(|g| !g.spread.is_empty()))
        .unwrap_or_else(|| panic!("a spread admission: {all:#?}"));
    let share = all
        .iter()
        .find(|d| d.rule == "spread_share")
        .unwrap_or_else(|| panic!("a spread share: {all:#?}"));
    assert_ne!(asked.node_group, share.node_group);
    assert_eq!(share.ca_delta, 0);
    assert_eq!(
        asked.applied_delta + share.applied_delta,
        5,
        "{asked:#?} {share:#?}"
    );
    let groups: std::collections::BTreeSet<String> = s
        .group_nodes("gpu-a")
        .await
        .into_iter()
        .chain(s.group_nodes("gpu-b").await)
        .filter_map(|n| n.metadata.name)
        .filter(|n| nodes.contains(n))
        .collect();
    assert_eq!(groups.len(), 5, "the gang runs on both groups' new nodes");
    s.assert_ca_never_refused().await;
    Row::new(
        &s,
        "spread over its pool (5 × 8 GPU, two groups of max 3)",
        asked.node_group.as_str(),
        Some(formed),
    )
    .outcome("succeeded")
    .note(format!(
        "CA asked {} for {}; admitted {} there + {} on {} (spread_share) in the same call; no call refused",
        asked.node_group, asked.ca_delta, asked.applied_delta, share.applied_delta, share.node_group
    ))
    .record();
}
