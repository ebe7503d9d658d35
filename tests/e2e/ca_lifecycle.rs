//! What happens after a CA-driven scale-up: CA's scale-down must not take the nodes of a gang
//! still forming, and takes them once the scale-up's outcome is recorded; gangs competing for
//! headroom; a stock-out moving the gang to another group; kill -9 of gangscaler mid-way; and
//! the success accounting (audit report, Prometheus histograms and Events agree with the
//! records).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gangscaler::audit::{Event, Outcome, Phase, ReleaseReason, ReservationAction, Verdict};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, ListParams};

use super::ca_scaleup::assert_ca_made_the_calls;
use super::harness::{eventually, klog_day_seconds, metric_value};
use super::scenario::{
    DRIVER, GPU, GangSpec, Group, Row, Scenario, Setup, audit_report, create_gang,
    create_priority_class,
};
use super::{create_dynamic, gang_event};

/// CA's annotation that keeps a node out of scale-down.
const SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
const BROKEN_DRIVER: &str = "broken.csi.example.com";

fn protected(n: &Node) -> bool {
    n.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SCALE_DOWN_DISABLED))
        .is_some_and(|v| v == "true")
}

/// The RDMA device resource of the scale-down scenarios.
const RDMA: &str = "rdma/ib";

/// A group whose four nodes come 5 s apart (a cloud bringing machines up one by one) and
/// advertise their RDMA devices only `device_delay` after they register (the RDMA device
/// plugin starts after the node is Ready; CA has a grace period for late GPUs, none for other
/// devices). A gang of 4 whole-node members that each need an RDMA device can use none of
/// them until then, so CA's simulation sees the new nodes empty and its scale-down (4 s
/// unneeded time here) takes them unless gangscaler protects them.
/// Under `off` gangscaler protects nothing: CA alone.
fn staggered(name: &str, policy: &str, device_delay: &str) -> Setup {
    Setup::new(
        name,
        policy,
        vec![
            Group::new("gpu", 4)
                .extra(&format!(
                    "rdma: {{resourceName: {RDMA}, devices: 8, bandwidthGbps: 3200}}"
                ))
                .backend(&format!(
                    "provisionDelay: 2s, provisionStagger: 5s, deviceDelay: {device_delay}"
                )),
        ],
    )
    .lifecycle("{interval: 500ms, formationTimeout: 75s, attachTimeout: 2m}")
    .ca_flag("scale-down-unneeded-time", "4s")
    .ca_flag("scale-down-delay-after-add", "4s")
}

/// Waits until at least two nodes of group `gpu` exist, all protected from scale-down.
async fn two_protected_nodes(s: &Scenario) {
    eventually(
        "two nodes of the scale-up, protected",
        Duration::from_secs(60),
        || async {
            let nodes = s.group_nodes("gpu").await;
            (nodes.len() >= 2 && nodes.iter().all(protected)).then_some(())
        },
    )
    .await;
}

fn forming_gang() -> GangSpec {
    GangSpec::new("ckpt", 4).request(RDMA, "1")
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_scale_down_leaves_a_forming_gangs_nodes_alone_and_takes_them_once_the_job_is_done() {
    let s = Scenario::start(staggered("ca-protect", "strict", "25s")).await;
    s.sampler.begin();
    let created = s.create_gang(&forming_gang()).await;
    // While the gang forms, every node that came is protected and none is removed.
    two_protected_nodes(&s).await;
    let nodes = s.wait_running("ckpt", 4, Duration::from_secs(120)).await;
    let formed = created.elapsed().as_secs_f64();
    let sample = s.sampler.sample();
    assert!(
        sample.removed.is_empty(),
        "nodes removed while the gang formed: {sample:?}"
    );
    assert!(
        s.ca.scaled_down_nodes().is_empty(),
        "{:?}",
        s.ca.scaled_down_nodes()
    );
    assert_eq!(nodes.len(), 4);
    let (_, decisions) = assert_ca_made_the_calls(&s, "gpu");
    assert_eq!(decisions[0].applied_delta, 4, "{decisions:?}");
    // CA did consider them: it found them unremovable because of the annotation.
    let outcome = s.wait_outcome("ckpt", Duration::from_secs(60)).await;
    assert_eq!(outcome.outcome, Outcome::Succeeded, "{outcome:?}");
    eventually(
        "the protection released after the outcome",
        Duration::from_secs(20),
        || async {
            let nodes = s.group_nodes("gpu").await;
            nodes.iter().all(|n| !protected(n)).then_some(())
        },
    )
    .await;
    // The job ends; now CA's scale-down takes the nodes.
    let done = Instant::now();
    s.delete_members("ckpt").await;
    eventually(
        "CA scaled the idle nodes down",
        Duration::from_secs(120),
        || async { s.group_nodes("gpu").await.is_empty().then_some(()) },
    )
    .await;
    let gone = done.elapsed().as_secs_f64();
    assert_eq!(s.ca.scaled_down_nodes().len(), 4, "CA removed them itself");
    Row::new(
        &s,
        "scale-down during formation (RDMA advertised 25s late, unneeded-time 4s)",
        "gpu",
        Some(formed),
    )
    .outcome(outcome.outcome.as_str())
    .note(format!(
        "0 of 4 nodes removed while forming; all 4 scaled down by CA {gone:.0}s after the job ended"
    ))
    .record();
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_scale_down_breaks_a_forming_gang_under_off_as_with_ca_alone() {
    let s = Scenario::start(staggered("ca-unprotected", "off", "25s")).await;
    s.sampler.begin();
    let created = s.create_gang(&forming_gang()).await;
    let outcome = s.wait_outcome("ckpt", Duration::from_secs(150)).await;
    let sample = s.sampler.sample();
    assert!(
        !s.ca.scaled_down_nodes().is_empty(),
        "CA removed nodes of the forming gang: {sample:?}"
    );
    assert!(s.group_nodes("gpu").await.iter().all(|n| !protected(n)));
    assert_eq!(outcome.outcome, Outcome::FormationTimeout, "{outcome:?}");
    assert!(s.running("ckpt").await.is_empty(), "the gang never formed");
    let waited = created.elapsed().as_secs_f64();
    Row::new(&s, "scale-down during formation (RDMA advertised 25s late, unneeded-time 4s)", "gpu", None)
        .outcome(outcome.outcome.as_str())
        .note(format!(
            "no protection (CA alone); CA removed {} nodes while the gang formed; not formed after {waited:.0}s",
            s.ca.scaled_down_nodes().len()
        ))
        .record();
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_scale_down_takes_the_nodes_of_a_cancelled_gang_once_its_outcome_is_recorded() {
    let s = Scenario::start(staggered("ca-cancelled", "strict", "5m")).await;
    s.sampler.begin();
    s.create_gang(&forming_gang()).await;
    two_protected_nodes(&s).await;
    // The user cancels the job while it forms: some of its nodes exist, the rest are due.
    super::delete_dynamic(&s.client, &s.api, "ckpt").await;
    s.delete_members("ckpt").await;
    let outcome = s.wait_outcome("ckpt", Duration::from_secs(30)).await;
    assert_eq!(outcome.outcome, Outcome::Cancelled, "{outcome:?}");
    let outcome_at =
        ((outcome.requested_at_ms as f64 + outcome.duration_ms as f64) / 1000.0) % 86400.0;
    // The nodes not created yet are withdrawn (recorded first), never the ones that exist.
    let withdrawn = eventually(
        "the gang's pending nodes withdrawn",
        Duration::from_secs(20),
        || async {
            let report = audit_report(&s.audit);
            let n = report["overall"]["withdrawn"].as_u64().unwrap_or(0);
            (n > 0).then_some(n)
        },
    )
    .await;
    let arrived = 4 - withdrawn;
    assert!(arrived >= 2, "withdrew {withdrawn} of 4 with two nodes up");
    // The ones that arrived lose their protection and CA removes them.
    eventually(
        "CA scaled every arrived node down",
        Duration::from_secs(150),
        || async {
            let done = s.group_nodes("gpu").await.is_empty()
                && s.ca.scaled_down_nodes().len() as u64 == arrived;
            done.then_some(())
        },
    )
    .await;
    for line in s.ca.lines("] Scale-down: removing ") {
        let at = klog_day_seconds(&line).unwrap();
        assert!(
            at >= outcome_at - 1.0,
            "CA removed a node before the outcome ({outcome_at}): {line}"
        );
    }
    assert_eq!(
        s.sampler.sample().seen.len() as u64,
        arrived,
        "no node came for the withdrawn capacity"
    );
    Row::new(
        &s,
        "gang deleted while its nodes provision (4 × 8 GPU, nodes 5s apart)",
        "gpu",
        None,
    )
    .outcome(outcome.outcome.as_str())
    .note(format!(
        "{withdrawn} of 4 nodes withdrawn before they were created; the {arrived} that arrived were released and scaled down by CA"
    ))
    .record();
}

/// The reservation lines of a node-group file in these scenarios.
pub const RESERVATION: &str = "reservation: {enabled: true, bookingDeadline: 5m}\n";

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_two_gangs_compete_for_one_groups_headroom_and_the_higher_priority_one_goes_first() {
    two_gangs_compete(false).await;
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_two_gangs_compete_for_one_groups_headroom_with_the_priorities_reversed() {
    two_gangs_compete(true).await;
}

/// Two gangs of 4 × 8 GPU compete for a group of at most 4 nodes with reservation on: the
/// older one is created first; the one with the higher priority (the newer one, or with
/// `reversed` the older one) is admitted, and the nodes added for it are reserved for it, so
/// the other never binds there (before reservation the scheduler did bind it there first and
/// the admitted gang preempted it).
async fn two_gangs_compete(reversed: bool) {
    let (old_class, new_class) = if reversed {
        ("train-high", "train-low")
    } else {
        ("train-low", "train-high")
    };
    let old_spec = GangSpec::new("old", 4).priority(old_class);
    let new_spec = GangSpec::new("new", 4).priority(new_class);
    let (first, second) = if reversed {
        (&old_spec, &new_spec)
    } else {
        (&new_spec, &old_spec)
    };
    let mut created = None;
    let name = if reversed {
        "ca-compete-rev"
    } else {
        "ca-compete"
    };
    let s = Scenario::start_with(
        Setup::new(
            name,
            "strict",
            vec![Group::new("gpu", 4).extra(RESERVATION)],
        ),
        async |client, api| {
            create_priority_class(client, "train-high", 1000).await;
            create_priority_class(client, "train-low", 100).await;
            let t = create_gang(client, api, &old_spec).await;
            let t2 = create_gang(client, api, &new_spec).await;
            created = Some(if reversed { t } else { t2 });
        },
    )
    .await;
    s.sampler.begin();
    let created = created.unwrap();
    let admitted = s
        .wait_running(&first.name, 4, Duration::from_secs(120))
        .await;
    let formed = created.elapsed().as_secs_f64();
    let (_, decisions) = assert_ca_made_the_calls(&s, "gpu");
    let decision = &decisions[0];
    assert_eq!(decision.gangs.len(), 1, "{decision:?}");
    assert!(
        decision.gangs[0].gang.name.starts_with(&first.name),
        "{decision:?}"
    );
    assert!(
        decision
            .deferred
            .iter()
            .any(|d| d.gang.name.starts_with(&second.name)),
        "{decision:?}"
    );
    // The other gang never bound to the reserved nodes: none of its members is bound, and
    // none was preempted (deleted) on the way.
    assert!(
        s.running(&second.name).await.is_empty(),
        "the other gang waits whole"
    );
    assert_eq!(
        s.recreate_missing_members(second).await,
        0,
        "no member of {} was bound to the nodes reserved for {} and preempted",
        second.name,
        first.name
    );
    // Each node was reserved for the admitted gang, and released once it formed.
    let records = s.records();
    let reservations: Vec<_> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::Reservation(e) => Some(e.clone()),
            _ => None,
        })
        .collect();
    let reserved: std::collections::BTreeSet<&str> = reservations
        .iter()
        .filter(|e| e.action == ReservationAction::Reserved)
        // The gang is `default/<name>` (a PodGroup), or `default/<name>/<podGroup>` (a 1.35
        // Workload's pod group).
        .inspect(|e| {
            let gang = format!("default/{}", first.name);
            assert!(
                e.gang == gang || e.gang.starts_with(&format!("{gang}/")),
                "{e:?}"
            );
        })
        .map(|e| e.node.as_str())
        .collect();
    assert_eq!(
        reserved,
        admitted.iter().map(String::as_str).collect(),
        "{reservations:?}"
    );
    eventually(
        "the reservations released as formed",
        Duration::from_secs(30),
        || async { (s.released_as_formed() == 4).then_some(()) },
    )
    .await;
    // The admitted gang's job finishes; the other runs on the freed nodes.
    let freed = Instant::now();
    s.delete_members(&first.name).await;
    let other = s
        .wait_running(&second.name, 4, Duration::from_secs(120))
        .await;
    let other_after = freed.elapsed().as_secs_f64();
    assert_eq!(
        other, admitted,
        "the other gang took the nodes the first freed"
    );
    assert_eq!(
        s.sampler.sample().max_nodes,
        4,
        "never more than the headroom"
    );
    let scenario = if reversed {
        "two gangs, one group's headroom, reserved; priorities reversed (4 × 8 GPU each, max 4)"
    } else {
        "two gangs, one group's headroom, reserved (4 × 8 GPU each, max 4)"
    };
    Row::new(&s, scenario, "gpu", Some(formed))
        .outcome(format!("succeeded ({}), then {}", first.name, second.name))
        .note(format!(
            "{} ({old_class}, older) and {} ({new_class}); {} admitted, its 4 nodes reserved for it and released when it formed; {} never bound there, no member preempted; it ran {other_after:.1}s after {} finished",
            old_spec.name, new_spec.name, first.name, second.name, first.name
        ))
        .record();
}

/// A DaemonSet on group `gpu`'s nodes, tolerating the GPU taint and, with `tolerates`, the
/// reservation taint (as docs/reservation.md tells DaemonSets to).
fn daemon_set(name: &str, tolerates: bool) -> serde_json::Value {
    let mut tolerations = vec![serde_json::json!({"key": GPU, "operator": "Exists"})];
    if tolerates {
        tolerations.push(serde_json::json!({
            "key": gangscaler::model::reservation::RESERVATION_TAINT,
            "operator": "Exists",
            "effect": "NoSchedule",
        }));
    }
    serde_json::json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"gangscaler.io/node-group": "gpu"},
                    "tolerations": tolerations,
                    "containers": [{"name": "agent", "image": "agent",
                                    "resources": {"requests": {"cpu": "100m"}}}],
                },
            },
        },
    })
}

/// The nodes the pods of DaemonSet `name` are bound to.
async fn ds_nodes(s: &Scenario, name: &str) -> std::collections::BTreeSet<String> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(s.client.clone(), "default");
    pods.list(&ListParams::default().labels(&format!("app={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.spec?.node_name)
        .collect()
}

/// `gangscaler doctor`'s row `id` for the scenario's cluster and config.
pub fn doctor_row(s: &Scenario, id: &str) -> serde_json::Value {
    let out = std::process::Command::new(super::support::gangscaler_bin())
        .arg("doctor")
        .arg("--kubeconfig")
        .arg(&s.cluster.kubeconfig)
        .arg("--config")
        .arg(&s.config)
        .args(["-o", "json"])
        .env("GANGSCALER_LOG", "warn")
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no {id} row: {report:#}"))
        .clone()
}

/// The reservation taint's value on `node`, if it carries the taint.
pub fn reservation_of(node: &Node) -> Option<String> {
    node.spec
        .as_ref()?
        .taints
        .as_ref()?
        .iter()
        .find(|t| t.key == gangscaler::model::reservation::RESERVATION_TAINT)
        .map(|t| t.value.clone().unwrap_or_default())
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_scales_up_a_third_gang_past_reserved_nodes_and_the_booking_deadline_frees_them() {
    // Group of 8, whose nodes advertise their RDMA devices 10 minutes late: a gang that needs
    // RDMA gets its 4 nodes reserved and cannot use them within the test.
    let mut s = Scenario::start(
        Setup::new(
            "ca-reserve-deadline",
            "strict",
            vec![
                Group::new("gpu", 8)
                    .extra(&format!(
                        "rdma: {{resourceName: {RDMA}, devices: 8, bandwidthGbps: 3200}}\n\
                         reservation: {{enabled: true, bookingDeadline: 40s}}\n"
                    ))
                    .backend("provisionDelay: 2s, deviceDelay: 10m"),
            ],
        )
        .ca_flag("scale-down-unneeded-time", "4s")
        .ca_flag("scale-down-delay-after-add", "4s"),
    )
    .await;
    s.sampler.begin();
    s.create_gang(&GangSpec::new("held", 4).request(RDMA, "1"))
        .await;
    let held = eventually(
        "4 nodes reserved for the gang that cannot use them yet",
        Duration::from_secs(90),
        || async {
            let nodes = s.group_nodes("gpu").await;
            let values: std::collections::BTreeSet<String> =
                nodes.iter().filter_map(reservation_of).collect();
            (nodes.len() == 4
                && nodes.iter().all(protected)
                && values.len() == 1
                && !values.contains(gangscaler::model::reservation::UNASSIGNED))
            .then(|| {
                nodes
                    .iter()
                    .filter_map(|n| n.metadata.name.clone())
                    .collect::<std::collections::BTreeSet<String>>()
            })
        },
    )
    .await;
    // A DaemonSet on the group's nodes that tolerates the reservation taint runs its pods on
    // the reserved nodes, and doctor finds nothing to say.
    create_dynamic(&s.client, daemon_set("ds-tolerating", true)).await;
    eventually(
        "the tolerating DaemonSet's pods on every reserved node",
        Duration::from_secs(60),
        || async {
            let on = ds_nodes(&s, "ds-tolerating").await;
            (on == held).then_some(())
        },
    )
    .await;
    let row = doctor_row(&s, "reservation/daemonsets");
    assert_eq!(row["status"], "ok", "{row:#}");
    let value_before: Vec<Option<String>> = s
        .group_nodes("gpu")
        .await
        .iter()
        .map(reservation_of)
        .collect();
    // kill -9 mid-reservation: the restarted replica reads the holds off the nodes and keeps
    // them (the releases checked at the end are all the deadline's).
    s.kill_gangscaler();
    tokio::time::sleep(Duration::from_secs(2)).await;
    s.restart_gangscaler();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let value_after: Vec<Option<String>> = s
        .group_nodes("gpu")
        .await
        .iter()
        .map(reservation_of)
        .collect();
    assert_eq!(
        value_after, value_before,
        "the restart kept every reservation"
    );
    // A third gang arrives while the reserved nodes are Ready: their taint keeps it off them,
    // CA's template for the group is clean, so CA asks for nodes for it and it runs on them.
    let third_created = s.create_gang(&GangSpec::new("third", 4)).await;
    let third = s.wait_running("third", 4, Duration::from_secs(120)).await;
    let third_formed = third_created.elapsed().as_secs_f64();
    assert!(
        third.is_disjoint(&held),
        "the third gang ran on nodes reserved for another: {third:?} vs {held:?}"
    );
    let (_, decisions) = assert_ca_made_the_calls(&s, "gpu");
    assert!(
        decisions
            .iter()
            .any(|d| d.gangs.iter().any(|g| g.gang.name.starts_with("third"))),
        "CA called NodeGroupIncreaseSize for the third gang: {decisions:?}"
    );
    // The first gang never forms: 40 s after its nodes became Ready their taint and their
    // scale-down protection go, and CA scales them down.
    eventually(
        "the booking deadline released the reserved nodes",
        Duration::from_secs(90),
        || async {
            let nodes = s.group_nodes("gpu").await;
            let freed = nodes
                .iter()
                .filter(|n| n.metadata.name.as_ref().is_some_and(|m| held.contains(m)))
                .all(|n| reservation_of(n).is_none() && !protected(n));
            freed.then_some(())
        },
    )
    .await;
    let released = Instant::now();
    eventually(
        "CA scaled the freed nodes down",
        Duration::from_secs(120),
        || async {
            let names: std::collections::BTreeSet<String> = s
                .group_nodes("gpu")
                .await
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            names.is_disjoint(&held).then_some(())
        },
    )
    .await;
    let scaled_down = released.elapsed().as_secs_f64();
    let held_releases: Vec<(String, Option<ReleaseReason>)> = s
        .reservations(ReservationAction::Released)
        .into_iter()
        .filter(|e| held.contains(&e.node))
        .map(|e| (e.node, e.reason))
        .collect();
    assert_eq!(held_releases.len(), 4, "{held_releases:?}");
    let m = s.gangscaler_metrics().await;
    assert_eq!(
        metric_value(
            &m,
            "gangscaler_reservation_released_total",
            &[("reason", "bookingDeadline")]
        ),
        Some(4.0),
        "{m}"
    );
    assert!(
        held_releases
            .iter()
            .all(|(_, r)| *r == Some(ReleaseReason::BookingDeadline)),
        "each held node released once, by the deadline (none by the restart): {held_releases:?}"
    );
    assert!(
        s.running("third").await.len() == 4,
        "the third gang kept running"
    );
    // A DaemonSet on the group's nodes without the toleration: reservation goes off for the
    // group (doctor, the metric, the decision record and an Event say so), and the nodes
    // added for the next gang carry no taint, so the DaemonSet's pods run there too.
    create_dynamic(&s.client, daemon_set("ds-plain", false)).await;
    let row = doctor_row(&s, "reservation/daemonsets");
    let found = row["found"].as_str().unwrap();
    assert_eq!(row["status"], "error", "{row:#}");
    assert!(
        found.contains("default/ds-plain") && !found.contains("ds-tolerating"),
        "{row:#}"
    );
    eventually(
        "the metric counts the DaemonSet that keeps reservation off",
        Duration::from_secs(30),
        || async {
            let m = s.gangscaler_metrics().await;
            (metric_value(
                &m,
                "gangscaler_reservation_blocking_daemon_sets",
                &[("node_group", "gpu")],
            ) == Some(1.0))
            .then_some(())
        },
    )
    .await;
    let before: std::collections::BTreeSet<String> = s
        .group_nodes("gpu")
        .await
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    s.create_gang(&GangSpec::new("after", 4)).await;
    let after = s.wait_running("after", 4, Duration::from_secs(120)).await;
    let added: std::collections::BTreeSet<String> = after.difference(&before).cloned().collect();
    assert!(
        !added.is_empty(),
        "the fourth gang got new nodes: {after:?}"
    );
    let nodes = s.group_nodes("gpu").await;
    assert!(
        nodes.iter().all(|n| reservation_of(n).is_none()),
        "no node reserved while reservation is off"
    );
    eventually(
        "the DaemonSet without the toleration runs on the new nodes",
        Duration::from_secs(60),
        || async {
            ds_nodes(&s, "ds-plain")
                .await
                .is_superset(&added)
                .then_some(())
        },
    )
    .await;
    let records = s.records();
    let off: Vec<&str> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::Decision(d) if d.gangs.iter().any(|g| g.gang.name.starts_with("after")) => {
                d.reservation_off.as_deref()
            }
            _ => None,
        })
        .collect();
    assert!(
        !off.is_empty() && off.iter().all(|why| why.contains("default/ds-plain")),
        "the decision record says why the nodes are not reserved: {off:?}"
    );
    assert!(
        !records.iter().any(|r| matches!(&r.event,
            Event::Reservation(e) if e.action == ReservationAction::Reserved && added.contains(&e.node))),
        "no reservation recorded for the new nodes"
    );
    let reasons = super::gang_event_reasons(&s.client, "after").await;
    assert!(reasons.iter().any(|r| r == "ReservationOff"), "{reasons:?}");
    Row::new(
        &s,
        "reserved nodes: a third gang gets its own, the booking deadline (40s) frees the rest",
        "gpu",
        Some(third_formed),
        )
        .outcome("succeeded (third); held released at its booking deadline")
        .note(format!(
            "4 nodes (all of the group's) reserved for a gang that could not use them (RDMA 10 min late); CA's ask for it again was rejected (all_covered); kill -9 + restart kept every reservation; a DaemonSet tolerating the taint ran on the reserved nodes; the third gang got new nodes, none of the reserved ones; at the deadline the reserved nodes lost taint and protection and CA removed them {scaled_down:.1}s later; then a DaemonSet without the toleration turned reservation off for the group (doctor, metric, decision record, Event) and a fourth gang's new nodes came untainted and ran it"
        ))
        .record();
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_backs_off_a_stocked_out_group_and_the_gang_runs_whole_on_another() {
    let groups = vec![
        Group::new("gpu-a", 4)
            .backend("provisionDelay: 2s, failure: {afterInstances: 0, code: stockout}"),
        Group::new("gpu-b", 4),
    ];
    let setup = Setup::new("ca-stockout", "strict", groups).ca_flag("expander", "priority");
    let s = Scenario::start_with(setup, async |client, _| {
        // CA's priority expander prefers gpu-a.
        create_dynamic(
            client,
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cluster-autoscaler-priority-expander", "namespace": "kube-system"},
                "data": {"priorities": "50:\n  - gpu-a\n10:\n  - gpu-b\n"}}),
        )
        .await;
    })
    .await;
    s.sampler.begin();
    let created = s.create_gang(&GangSpec::new("train", 2)).await;
    let nodes = s.wait_running("train", 2, Duration::from_secs(180)).await;
    let formed = created.elapsed().as_secs_f64();
    let b: Vec<String> = s
        .group_nodes("gpu-b")
        .await
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(
        nodes.iter().all(|n| b.contains(n)),
        "{nodes:?} on gpu-b {b:?}"
    );
    assert!(s.group_nodes("gpu-a").await.is_empty());
    assert_ca_made_the_calls(&s, "gpu-a");
    assert_ca_made_the_calls(&s, "gpu-b");
    assert!(
        !s.ca.lines("stockout").is_empty(),
        "CA saw the stock-out error of gpu-a's instances"
    );
    assert!(
        !s.ca
            .lines("Node group gpu-a is not ready for scaleup - backoff")
            .is_empty(),
        "CA backed gpu-a off"
    );
    let outcomes = s.outcomes("train");
    let by_group: BTreeMap<&str, Outcome> = outcomes
        .iter()
        .map(|o| (o.node_group.as_str(), o.outcome))
        .collect();
    eprintln!("outcomes: {outcomes:?}");
    assert_eq!(
        by_group.get("gpu-a"),
        Some(&Outcome::ProvisionFailed),
        "{outcomes:?}"
    );
    let ok = s
        .wait_outcome_in("train", "gpu-b", Duration::from_secs(30))
        .await;
    assert_eq!(ok.outcome, Outcome::Succeeded);
    Row::new(
        &s,
        "stock-out on the preferred group (2 × 8 GPU)",
        "gpu-a",
        Some(formed),
    )
    .outcome("provisionFailed on gpu-a, succeeded on gpu-b")
    .note(format!(
        "CA asks: gpu-a {:?}, gpu-b {:?}",
        s.ca.asks_of("gpu-a"),
        s.ca.asks_of("gpu-b")
    ))
    .record();
}

/// How long the simulated CSI attach of the kill -9 test takes. Formation and attachment must
/// be observed in different ticks however slowly kwok runs pods: a 4 s delay was observed
/// together with formation on the CI machine (formed 10.4 s after the request).
const ATTACH_DELAY_S: u64 = 15;

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_driven_scale_up_survives_kill_9_and_the_accounting_agrees_with_the_records() {
    let setup = Setup::new(
        "ca-kill9",
        "strict",
        vec![Group::new("gpu", 4).csi(8).backend(&format!(
            "provisionDelay: 2s, attach: {{delay: {ATTACH_DELAY_S}s, failDriver: {BROKEN_DRIVER}}}"
        ))],
    );
    let mut s = Scenario::start(setup).await;
    s.sampler.begin();
    // ckpt's volumes attach after a delay; bad's volumes are on the driver whose attach fails.
    let asked = Instant::now();
    s.create_gang(&GangSpec::new("ckpt", 2).volumes(1)).await;
    s.create_gang(
        &GangSpec::new("bad", 2)
            .volumes(1)
            .volume_driver(BROKEN_DRIVER),
    )
    .await;
    // Crash while the lifecycle is open: after ckpt formed, before its volumes attach.
    let ckpt_phases = |s: &Scenario| -> Vec<Phase> {
        s.records()
            .iter()
            .filter_map(|r| match &r.event {
                Event::Phase(p) if p.gang.as_ref().is_some_and(|g| g.name.starts_with("ckpt")) => {
                    Some(p.phase)
                }
                _ => None,
            })
            .collect()
    };
    eventually("ckpt formed", Duration::from_secs(90), || async {
        ckpt_phases(&s)
            .iter()
            .any(|p| *p >= Phase::GangFormed)
            .then_some(())
    })
    .await;
    // The crash must land between formation and attachment, or the test proves nothing about
    // recovering an open lifecycle (the attach delay is long enough for a slow machine).
    let before_kill = ckpt_phases(&s);
    assert!(
        before_kill.contains(&Phase::GangFormed) && !before_kill.contains(&Phase::VolumesAttached),
        "ckpt's phases before the kill: {before_kill:?}"
    );
    let note = gang_event(&s.client, "ckpt", "ScaleUpGangFormed").await;
    assert!(note.contains("gang formed"), "{note}");
    s.kill_gangscaler();
    let killed_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    s.restart_gangscaler();
    let ok = s.wait_outcome("ckpt", Duration::from_secs(90)).await;
    let failed = s.wait_outcome("bad", Duration::from_secs(60)).await;
    let observed_within_ms = u64::try_from(asked.elapsed().as_millis()).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;

    // No duplicate: the nodes CA asked for once, each record once.
    let (asks, decisions) = assert_ca_made_the_calls(&s, "gpu");
    let applied: u32 = decisions.iter().map(|d| d.applied_delta).sum();
    assert_eq!(applied, 4, "{decisions:?}");
    assert_eq!(
        s.group_nodes("gpu").await.len(),
        4,
        "no duplicate node after kill -9"
    );
    eprintln!("CA asks {asks:?}");
    let all = s.records();
    let keys: Vec<String> = all
        .iter()
        .filter_map(|r| match &r.event {
            Event::Phase(p) => Some(format!(
                "{}/{:?}/{}",
                p.scale_up_id,
                p.gang,
                p.phase.as_str()
            )),
            Event::Outcome(o) => Some(format!("{}/{:?}/outcome", o.scale_up_id, o.gang)),
            Event::Repair(r) => Some(format!(
                "{}/{}/repair/{}",
                r.scale_up_id, r.gang, r.instance
            )),
            Event::Decision(_)
            | Event::Reservation(_)
            | Event::Withdrawal(_)
            | Event::Deferral(_) => None,
        })
        .collect();
    let unique: std::collections::BTreeSet<&String> = keys.iter().collect();
    assert_eq!(keys.len(), unique.len(), "a record written twice: {keys:?}");
    assert_eq!(s.outcomes("ckpt").len(), 1);
    assert_eq!(s.outcomes("bad").len(), 1);

    assert_eq!(ok.outcome, Outcome::Succeeded, "{ok:?}");
    let formed = ok.formed_at_ms.expect("formed time");
    let attached = ok.attached_at_ms.expect("attached time");
    assert!(attached - formed >= 2_000, "the attach delay shows: {ok:?}");
    assert_eq!(failed.outcome, Outcome::AttachFailed, "{failed:?}");
    assert!(failed.reason.contains(BROKEN_DRIVER), "{}", failed.reason);
    // The VolumeAttachments came from the attach-detach controller (`csi-<hash>` names).
    let vas: Api<VolumeAttachment> = Api::all(s.client.clone());
    let vas = vas.list(&ListParams::default()).await.unwrap().items;
    assert!(
        vas.iter()
            .filter(|va| va.spec.attacher == DRIVER)
            .all(|va| va
                .metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("csi-"))),
        "{vas:?}"
    );

    // Metrics of the restarted process (it recorded both outcomes).
    let m = s.gangscaler_metrics().await;
    let value = |name: &str, labels: &[(&str, &str)]| {
        metric_value(&m, name, labels).unwrap_or_else(|| panic!("{name} {labels:?} missing:\n{m}"))
    };
    let g = ("node_group", "gpu");
    assert_eq!(
        value(
            "gangscaler_scaleup_outcomes_total",
            &[g, ("outcome", "succeeded")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "gangscaler_scaleup_outcomes_total",
            &[g, ("outcome", "attachFailed")]
        ),
        1.0
    );
    assert_eq!(value("gangscaler_scaleup_success_seconds_count", &[g]), 1.0);
    assert_eq!(value("gangscaler_scaleup_open", &[]), 0.0);
    // Events on the gang objects.
    assert!(
        gang_event(&s.client, "ckpt", "ScaleUpSucceeded")
            .await
            .contains("succeeded")
    );
    assert!(
        gang_event(&s.client, "bad", "ScaleUpFailed")
            .await
            .contains("attachFailed")
    );
    // `gangscaler audit report` agrees with the records.
    let report = audit_report(&s.audit);
    let overall = &report["overall"];
    assert_eq!(overall["outcomes"]["succeeded"], 1, "{report:#}");
    assert_eq!(overall["outcomes"]["attachFailed"], 1, "{report:#}");
    assert_eq!(overall["startSuccessRate"], 0.5, "{report:#}");
    assert_eq!(overall["attachFailureRate"], 0.5, "{report:#}");
    let formations: Vec<u64> = [&ok, &failed]
        .iter()
        .map(|o| u64::try_from(o.formed_at_ms.expect("both formed") - o.requested_at_ms).unwrap())
        .collect();
    let formation = &overall["formation"];
    assert_eq!(formation["count"], 2, "{report:#}");
    assert_eq!(
        formation["p50Ms"],
        *formations.iter().min().unwrap(),
        "{report:#}"
    );
    assert_eq!(
        formation["p95Ms"],
        *formations.iter().max().unwrap(),
        "{report:#}"
    );
    assert!(*formations.iter().max().unwrap() <= observed_within_ms);
    // Formation is observed once per gang, by the process that appended its first formed
    // record: the restarted process observed exactly the gangs whose record it wrote.
    let mut first_formed: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for r in &all {
        if let Event::Phase(p) = &r.event
            && p.phase >= Phase::GangFormed
        {
            let gang = format!("{}/{:?}", p.scale_up_id, p.gang);
            first_formed
                .entry(gang)
                .or_insert((r.ts_ms, i64::try_from(p.elapsed_ms).unwrap()));
        }
    }
    let formed_after_restart: Vec<i64> = first_formed
        .values()
        .filter(|(ts, _)| *ts > killed_ms)
        .map(|(_, elapsed)| *elapsed)
        .collect();
    let m_count =
        metric_value(&m, "gangscaler_scaleup_formation_seconds_count", &[g]).unwrap_or(0.0);
    assert_eq!(
        m_count,
        formed_after_restart.len() as f64,
        "formation observations of the restarted process vs its formed records: {formed_after_restart:?}"
    );
    if let Some(sum) = metric_value(&m, "gangscaler_scaleup_formation_seconds_sum", &[g]) {
        let want = formed_after_restart.iter().sum::<i64>() as f64 / 1000.0;
        assert!(
            (sum - want).abs() < 0.01,
            "histogram sum {sum} vs records {want}"
        );
    }
    assert!(decisions.iter().all(|d| d.verdict == Verdict::Accept));
    Row::new(&s, "kill -9 mid scale-up (2 gangs × 2 × 8 GPU, volumes)", "gpu", Some(formed as f64 / 1000.0 - ok.requested_at_ms as f64 / 1000.0))
        .outcome("succeeded + attachFailed")
        .note(format!(
            "gangscaler killed after ckpt formed; {applied} nodes for CA's asks {:?}; every record once",
            asks.iter().map(|u| format!("{}->{}", u.from, u.to)).collect::<Vec<_>>()
        ))
        .record();
}
