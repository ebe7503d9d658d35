//! Every check, every status it can give.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::doctor::{
    Component, CsiDriverSeen, CsiNodeSeen, Found, GroupSeen, NodeSeen, ProviderSeen,
    SchedulerConfig, ServedVersion,
};
use crate::model::reservation::{DaemonSetDemand, RESERVATION_TAINT};
use crate::model::{Taint, TaintEffect};

const NO_DRA: &str = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
    profiles:\n- schedulerName: default-scheduler\n  plugins:\n    multiPoint:\n      disabled: [{name: DynamicResources}]\n";
const NO_DRA_POST_FILTER: &str = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
    profiles:\n- schedulerName: default-scheduler\n  plugins:\n    podGroupPostFilter:\n      disabled: [{name: DynamicResources}]\n";

fn v(s: &str) -> Version {
    Version::parse(s).unwrap()
}

fn sv(version: &str, resources: &[&str]) -> ServedVersion {
    ServedVersion {
        version: version.to_owned(),
        resources: resources.iter().map(|r| (*r).to_owned()).collect(),
    }
}

/// What each minor serves with gang admission on, as the e2e rows run it: 1.37 without its
/// alpha v1alpha3 (so without CompositePodGroup), 1.38 with CompositePodGroup at v1beta1.
fn served(minor: u32) -> Vec<ServedVersion> {
    let mut s = vec![sv("v1", &["priorityclasses"])];
    match minor {
        35 => s.push(sv("v1alpha1", &["workloads"])),
        36 => s.push(sv("v1alpha2", &["workloads", "podgroups"])),
        37 => s.push(sv("v1beta1", &["workloads", "podgroups"])),
        _ => s.push(sv(
            "v1beta1",
            &["workloads", "podgroups", "compositepodgroups"],
        )),
    }
    s
}

/// The gates the e2e row of `minor` runs every component with.
fn row_gates(minor: u32) -> &'static str {
    match minor {
        35 | 36 => "GenericWorkload=true,GangScheduling=true",
        37 => "GenericWorkload=true",
        _ => "GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true",
    }
}

fn flags_of(text: &str) -> Found<Vec<flags::Flag>> {
    Found::new(flags::parse(text).unwrap(), "test.flags")
}

fn node(name: &str, group: Option<&str>) -> NodeSeen {
    NodeSeen {
        name: name.to_owned(),
        group_label: group.map(str::to_owned),
        provider_id: None,
    }
}

fn csi_node(name: &str, drivers: &[(&str, Option<i32>)]) -> CsiNodeSeen {
    CsiNodeSeen {
        name: name.to_owned(),
        drivers: drivers
            .iter()
            .map(|(d, c)| CsiDriverSeen {
                name: (*d).to_owned(),
                count: *c,
            })
            .collect(),
    }
}

/// A cluster of `minor` ready for gang admission, with every input given.
fn healthy(minor: u32) -> Observed {
    let gates = row_gates(minor);
    let sched_flags = if minor >= 37 {
        format!("--feature-gates={gates}\n--config=/etc/sched.yaml\n")
    } else {
        format!("--feature-gates={gates}\n")
    };
    let csi_flag = if minor == 35 {
        ""
    } else {
        "--enable-csi-node-aware-scheduling=true\n"
    };
    Observed {
        server: Ok(v(&format!("v1.{minor}.2"))),
        served: Ok(served(minor)),
        pod_link: LinkProbe::Kept {
            field: link_field(&v(&format!("1.{minor}"))).unwrap().to_owned(),
        },
        composite_children: Ok(Vec::new()),
        namespace: "default".to_owned(),
        scheduler: Component {
            version: Some(Found::new(
                v(&format!("v1.{minor}.2")),
                "--scheduler-version",
            )),
            flags: Some(flags_of(&sched_flags)),
            lookup: None,
        },
        scheduler_config: (minor >= 37).then(|| SchedulerConfig {
            path: "/etc/sched.yaml".to_owned(),
            text: Ok(NO_DRA_POST_FILTER.to_owned()),
        }),
        ca: Component {
            version: Some(Found::new(v(&format!("1.{minor}.1")), "--ca-version")),
            flags: Some(flags_of(&format!(
                "--cloud-provider=externalgrpc\n--expander=least-waste\n\
                 --initial-node-group-backoff-duration=30s\n--max-node-group-backoff-duration=2m\n\
                 --ok-total-unready-count=7\n{csi_flag}"
            ))),
            lookup: None,
        },
        nodes: Ok(vec![node("gpu-0", Some("gpu")), node("cp", None)]),
        csi_nodes: Ok(vec![csi_node("gpu-0", &[("ebs.csi.aws.com", Some(24))])]),
        daemon_sets: Ok(Vec::new()),
        machine_deployments: BTreeMap::new(),
        provider: Some(ProviderSeen {
            dir: "provider-configs".to_owned(),
            groups: vec![GroupSeen {
                id: "gpu".to_owned(),
                max_size: 8,
                csi: BTreeMap::from([("ebs.csi.aws.com".to_owned(), 24)]),
                reservation: false,
                labels: BTreeMap::from([
                    ("gangscaler.io/node-group".to_owned(), "gpu".to_owned()),
                    ("nvidia.com/gpu.present".to_owned(), "true".to_owned()),
                ]),
                taints: vec![Taint {
                    key: "nvidia.com/gpu".to_owned(),
                    value: "present".to_owned(),
                    effect: TaintEffect::NoSchedule,
                }],
                machine_deployment: None,
            }],
            protection: true,
            protection_off_because: None,
            formation_timeout: Duration::from_secs(1800),
            lifecycle_interval: Duration::from_secs(5),
        }),
    }
}

fn row(o: &Observed, id: &str) -> Row {
    report(o)
        .checks
        .into_iter()
        .find(|r| r.id == id)
        .unwrap_or_else(|| panic!("no row {id}"))
}

fn status(o: &Observed, id: &str) -> Status {
    row(o, id).status
}

fn with_ca_flags(text: &str) -> Observed {
    let mut o = healthy(36);
    o.ca.flags = Some(flags_of(text));
    o
}

#[test]
fn a_ready_cluster_of_each_minor_has_no_error_and_names_its_gang_api() {
    for (minor, api) in [
        (35, "v1alpha1"),
        (36, "v1alpha2"),
        (37, "v1beta1"),
        (38, "v1beta1"),
    ] {
        let r = report(&healthy(minor));
        assert!(r.failed().is_empty(), "1.{minor}: {:#?}", r.checks);
        assert_eq!(
            r.facts.expected_gang_api.as_deref(),
            Some(format!("scheduling.k8s.io/{api}").as_str())
        );
        assert_eq!(
            r.facts.gates.get("GenericWorkload").map(String::as_str),
            Some("on")
        );
        assert_eq!(r.facts.pod_link_kept, Some(true));
        let ids: Vec<&str> = r.checks.iter().map(|c| c.id.as_str()).collect();
        for id in [
            "apiserver-version",
            "gang-api",
            "gate/GenericWorkload",
            "pod-link-field",
            "gate/GangScheduling",
            "gate/CompositePodGroup",
            "scheduler-version",
            "ca-version",
            "csi/live",
            "csi-template/gpu",
            "ca-flags",
            "ca-flag/cloud-provider",
            "trap/scheduler-dra-podgroup-postfilter",
            "trap/ca-gang-semantics",
            "trap/api-removal",
            "enable-lines",
        ] {
            assert!(ids.contains(&id), "1.{minor}: {id} missing from {ids:?}");
        }
    }
    let r = report(&healthy(35));
    assert_eq!(r.facts.pod_link_field.as_deref(), Some("workloadRef"));
    assert_eq!(
        r.facts.gates.get("GangScheduling").map(String::as_str),
        Some("on")
    );
    assert!(
        !report(&healthy(37))
            .facts
            .gates
            .contains_key("GangScheduling")
    );
    // CompositePodGroup is inferred from the served API from 1.37 on.
    let gate = |minor| {
        report(&healthy(minor))
            .facts
            .gates
            .get("CompositePodGroup")
            .cloned()
    };
    assert_eq!(gate(36), None);
    assert_eq!(gate(37).as_deref(), Some("off"));
    assert_eq!(gate(38).as_deref(), Some("on"));
}

#[test]
fn doctors_table_agrees_with_migrates_shapes_and_composite_versions() {
    for api in &GANG_APIS {
        assert_eq!(
            Shape::of_minor(api.minor()),
            Some(api.shape),
            "1.{}",
            api.minor()
        );
        assert_eq!(
            api.composite.map(|c| c.version),
            crate::migrate::api::composite_version(api.minor()),
            "1.{}",
            api.minor()
        );
    }
    assert_eq!(
        gang_api(38).map(GangApiRequirements::version),
        Some("v1beta1")
    );
    assert!(gang_api(39).is_none());
}

#[test]
fn apiserver_version_is_an_error_when_unreadable_or_too_old_and_a_warning_when_too_new() {
    let mut o = healthy(36);
    assert_eq!(status(&o, "apiserver-version"), Status::Ok);
    assert!(
        row(&o, "apiserver-version")
            .found
            .contains("scheduling.k8s.io/v1alpha2")
    );
    o.server = Err("connection refused".to_owned());
    assert_eq!(status(&o, "apiserver-version"), Status::Error);
    o.server = Ok(v("v1.34.3"));
    assert_eq!(status(&o, "apiserver-version"), Status::Error);
    o.server = Ok(v("v1.38.0-beta.0"));
    let r = row(&o, "apiserver-version");
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert!(r.found.contains("scheduling.k8s.io/v1beta1"), "{}", r.found);
    o.server = Ok(v("v1.39.0"));
    let r = row(&o, "apiserver-version");
    assert_eq!(r.status, Status::Warn);
    assert!(r.found.contains("1.35-1.38 only"), "{}", r.found);
}

#[test]
fn the_gang_api_must_serve_the_minors_version_and_resources() {
    let mut o = healthy(36);
    assert_eq!(status(&o, "gang-api"), Status::Ok);
    o.served = Ok(vec![sv("v1alpha2", &["workloads"])]);
    let r = row(&o, "gang-api");
    assert_eq!(r.status, Status::Error);
    assert!(r.found.contains("podgroups"), "{}", r.found);
    assert!(
        r.action
            .contains("--runtime-config=scheduling.k8s.io/v1alpha2=true"),
        "{}",
        r.action
    );
    o.served = Ok(served(35));
    assert_eq!(status(&o, "gang-api"), Status::Error, "1.35's API on 1.36");
    o.served = Err("forbidden".to_owned());
    assert_eq!(status(&o, "gang-api"), Status::Unknown);
    let mut o = healthy(36);
    o.server = Err("down".to_owned());
    assert_eq!(status(&o, "gang-api"), Status::Unknown);
    let r = row(&healthy(37), "gang-api");
    assert_eq!(r.status, Status::Ok);
    assert!(
        r.found
            .contains("CompositePodGroup not served at v1alpha3 (optional"),
        "{}",
        r.found
    );
    let r = row(&healthy(38), "gang-api");
    assert_eq!(r.status, Status::Ok);
    assert!(
        r.found.contains(
            "CompositePodGroup served at v1beta1: gangscaler admits a composite's PodGroups as one gang"
        ),
        "{}",
        r.found
    );
    // 1.38 serving CompositePodGroup at v1alpha3 only: noted here, an error in its own row.
    let mut o = healthy(38);
    o.served = Ok(vec![
        sv("v1beta1", &["workloads", "podgroups"]),
        sv(
            "v1alpha3",
            &["workloads", "podgroups", "compositepodgroups"],
        ),
    ]);
    let r = row(&o, "gang-api");
    assert_eq!(r.status, Status::Ok);
    assert!(
        r.found
            .contains("served at v1alpha3 but not at v1beta1, where kube-scheduler 1.38 reads it"),
        "{}",
        r.found
    );
    o.served = Ok(served(37));
    assert_eq!(status(&o, "gang-api"), Status::Ok, "1.37's API is 1.38's");
    o.served = Ok(served(36));
    assert_eq!(status(&o, "gang-api"), Status::Error, "1.36's API on 1.38");
}

#[test]
fn generic_workload_is_inferred_from_served_workloads_and_the_schedulers_flags() {
    let mut o = healthy(36);
    assert_eq!(status(&o, "gate/GenericWorkload"), Status::Ok);
    o.scheduler.flags = None;
    let r = row(&o, "gate/GenericWorkload");
    assert_eq!(r.status, Status::Ok);
    assert!(
        r.found.contains("kube-scheduler's gates unknown"),
        "{}",
        r.found
    );
    o.scheduler.flags = Some(flags_of("--feature-gates=GangScheduling=true"));
    assert_eq!(status(&o, "gate/GenericWorkload"), Status::Error);
    o.scheduler.flags = Some(flags_of("--feature-gates=GenericWorkload"));
    assert_eq!(status(&o, "gate/GenericWorkload"), Status::Error);
    let mut o = healthy(36);
    o.served = Ok(vec![sv("v1", &["priorityclasses"])]);
    let r = row(&o, "gate/GenericWorkload");
    assert_eq!(r.status, Status::Error);
    assert!(
        r.action
            .contains("--feature-gates=GenericWorkload=true,GangScheduling=true")
    );
    assert_eq!(report(&o).facts.gates["GenericWorkload"], "off");
    o.server = Ok(v("v1.30.0"));
    assert_eq!(status(&o, "gate/GenericWorkload"), Status::Unknown);
}

#[test]
fn the_pod_link_dry_run_decides_the_pod_field_gate() {
    let mut o = healthy(36);
    assert_eq!(status(&o, "pod-link-field"), Status::Ok);
    o.pod_link = LinkProbe::Dropped {
        field: "schedulingGroup".to_owned(),
    };
    let r = row(&o, "pod-link-field");
    assert_eq!(r.status, Status::Error);
    assert!(
        r.found.contains("dropped spec.schedulingGroup"),
        "{}",
        r.found
    );
    assert_eq!(report(&o).facts.pod_link_kept, Some(false));
    o.pod_link = LinkProbe::Failed {
        field: "schedulingGroup".to_owned(),
        error: "pods is forbidden".to_owned(),
    };
    assert_eq!(status(&o, "pod-link-field"), Status::Unknown);
    assert_eq!(report(&o).facts.pod_link_kept, None);
    o.pod_link = LinkProbe::NotProbed("no version".to_owned());
    assert_eq!(status(&o, "pod-link-field"), Status::Unknown);
}

#[test]
fn link_fields_follow_the_minor() {
    assert_eq!(link_field(&v("1.35.4")), Some("workloadRef"));
    assert_eq!(link_field(&v("1.36.2")), Some("schedulingGroup"));
    assert_eq!(link_field(&v("1.37.2")), Some("schedulingGroup"));
    assert_eq!(link_field(&v("1.34.0")), None);
    // Later minors are assumed to keep 1.37's link.
    assert_eq!(link_field(&v("1.40.1")), Some("schedulingGroup"));
}

#[test]
fn gang_scheduling_needs_the_schedulers_flags_before_1_37_and_is_gone_after() {
    let mut o = healthy(36);
    let r = row(&o, "gate/GangScheduling");
    assert_eq!(r.status, Status::Ok);
    assert!(
        r.action.contains("before upgrading to 1.37"),
        "{}",
        r.action
    );
    o.scheduler.flags = None;
    assert_eq!(status(&o, "gate/GangScheduling"), Status::Unknown);
    o.scheduler.flags = Some(flags_of("--feature-gates=GenericWorkload=true"));
    assert_eq!(status(&o, "gate/GangScheduling"), Status::Error);
    o.scheduler.flags = Some(flags_of(
        "--feature-gates=GenericWorkload=true,GangScheduling=false",
    ));
    assert_eq!(status(&o, "gate/GangScheduling"), Status::Error);
    o.scheduler.flags = Some(flags_of("--feature-gates=GangScheduling=true"));
    let r = row(&o, "gate/GangScheduling");
    assert_eq!(r.status, Status::Error);
    assert!(r.found.contains("needs GenericWorkload"), "{}", r.found);
    o.scheduler.flags = Some(flags_of("--feature-gates=GangScheduling=maybe"));
    assert_eq!(status(&o, "gate/GangScheduling"), Status::Error);
    let mut o = healthy(37);
    assert_eq!(status(&o, "gate/GangScheduling"), Status::Ok);
    o.scheduler.flags = Some(flags_of(
        "--feature-gates=GenericWorkload=true,GangScheduling=true\n--config=/etc/sched.yaml",
    ));
    assert_eq!(status(&o, "gate/GangScheduling"), Status::Error);
    o.server = Err("down".to_owned());
    assert_eq!(status(&o, "gate/GangScheduling"), Status::Unknown);
    let mut o = healthy(38);
    assert_eq!(status(&o, "gate/GangScheduling"), Status::Ok);
    o.scheduler.flags = Some(flags_of(&format!(
        "--feature-gates={},GangScheduling=true",
        row_gates(38)
    )));
    let r = row(&o, "gate/GangScheduling");
    assert_eq!(r.status, Status::Error);
    assert!(
        r.found.contains("1.38 has no GangScheduling gate"),
        "{}",
        r.found
    );
}

/// A PodGroup naming parent `parent`.
fn child(namespace: &str, name: &str, parent: &str) -> crate::doctor::CompositeChildSeen {
    crate::doctor::CompositeChildSeen {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        parent: parent.to_owned(),
    }
}

#[test]
fn composites_are_optional_before_they_are_served_or_used() {
    const ID: &str = "gate/CompositePodGroup";
    for minor in [35, 36] {
        let r = row(&healthy(minor), ID);
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(r.found.contains("arrives in 1.37"), "{}", r.found);
    }
    // 1.36 has no such gate: a component given it refuses to start.
    let mut o = healthy(36);
    o.scheduler.flags = Some(flags_of(
        "--feature-gates=GenericWorkload=true,GangScheduling=true,CompositePodGroup=true",
    ));
    let r = row(&o, ID);
    assert_eq!(r.status, Status::Error);
    assert!(
        r.action.contains("remove CompositePodGroup"),
        "{}",
        r.action
    );
    // 1.37 without v1alpha3 and nothing using composites: fine, with the line to turn them on.
    let r = row(&healthy(37), ID);
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert!(r.found.contains("optional"), "{}", r.found);
    assert!(
        r.found.contains(
            "kube-apiserver --feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true --runtime-config=scheduling.k8s.io/v1alpha3=true"
        ),
        "{}",
        r.found
    );
    let mut o = healthy(37);
    o.composite_children = Err("podgroups is forbidden".to_owned());
    let r = row(&o, ID);
    assert_eq!(r.status, Status::Ok);
    assert!(r.found.contains("could not be listed"), "{}", r.found);
    o.served = Err("forbidden".to_owned());
    assert_eq!(status(&o, ID), Status::Unknown);
    o.server = Err("down".to_owned());
    assert_eq!(status(&o, ID), Status::Unknown);
}

#[test]
fn composites_in_use_need_the_api_server_to_serve_them() {
    const ID: &str = "gate/CompositePodGroup";
    for (minor, version) in [(37, "v1alpha3"), (38, "v1beta1")] {
        // PodGroups naming a parent while nothing serves CompositePodGroups.
        let mut o = healthy(minor);
        o.served = Ok(served(37));
        o.scheduler.flags = Some(flags_of("--feature-gates=GenericWorkload=true"));
        o.composite_children = Ok(vec![
            child("ml", "a-leader", "a"),
            child("ml", "a-workers", "a"),
            child("ml", "b-leader", "b"),
            child("ml", "b-workers", "b"),
            child("ml", "c-leader", "c"),
        ]);
        let r = row(&o, ID);
        assert_eq!(r.status, Status::Error, "1.{minor}: {r:?}");
        assert!(
            r.found.contains("5 PodGroup(s)")
                && r.found.contains("ml/a-leader names a")
                && r.found.contains("and 2 more")
                && r.found.contains("a gang of its own"),
            "{}",
            r.found
        );
        assert!(
            r.action.contains(&format!(
                "--runtime-config=scheduling.k8s.io/{version}=true"
            )),
            "{}",
            r.action
        );
        // The scheduler's gate on without the API: it waits for an informer that cannot list.
        o.composite_children = Ok(Vec::new());
        o.scheduler.flags = Some(flags_of(&format!("--feature-gates={}", row_gates(38))));
        let r = row(&o, ID);
        assert_eq!(r.status, Status::Error, "1.{minor}: {r:?}");
        assert!(
            r.found
                .contains(&format!("waits for a {version} CompositePodGroup informer")),
            "{}",
            r.found
        );
    }
}

#[test]
fn served_composites_need_the_schedulers_gates_and_its_version() {
    const ID: &str = "gate/CompositePodGroup";
    let r = row(&healthy(38), ID);
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert!(
        r.found.contains("compositepodgroups at v1beta1")
            && r.found
                .contains("with GenericWorkload and TopologyAwareWorkloadScheduling"),
        "{}",
        r.found
    );
    // 1.37 serving v1alpha3 composites, the scheduler with every gate: fine.
    let mut o = healthy(37);
    o.served = Ok(vec![
        sv("v1beta1", &["workloads", "podgroups"]),
        sv(
            "v1alpha3",
            &["workloads", "podgroups", "compositepodgroups"],
        ),
    ]);
    o.scheduler.flags = Some(flags_of(&format!(
        "--feature-gates={}\n--config=/etc/sched.yaml",
        row_gates(38)
    )));
    assert_eq!(status(&o, ID), Status::Ok);
    for minor in [37, 38] {
        let mut o = if minor == 37 { o.clone() } else { healthy(38) };
        // The scheduler leaves the composite gates at their default (off).
        o.scheduler.flags = Some(flags_of("--feature-gates=GenericWorkload=true"));
        let r = row(&o, ID);
        assert_eq!(r.status, Status::Error, "1.{minor}: {r:?}");
        assert!(
            r.found
                .contains("leave TopologyAwareWorkloadScheduling, CompositePodGroup off")
                && r.found.contains("gang of its own"),
            "{}",
            r.found
        );
        assert_eq!(
            r.action,
            "kube-scheduler --feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true"
        );
        // CompositePodGroup on without its dependency: the scheduler does not start.
        o.scheduler.flags = Some(flags_of(
            "--feature-gates=GenericWorkload=true,CompositePodGroup=true",
        ));
        let r = row(&o, ID);
        assert_eq!(r.status, Status::Error);
        assert!(
            r.found
                .contains("leave TopologyAwareWorkloadScheduling off")
                && r.found.contains("refuses to start"),
            "{}",
            r.found
        );
        o.scheduler.flags = None;
        let r = row(&o, ID);
        assert_eq!(r.status, Status::Unknown);
        assert!(r.action.contains("--scheduler-flags"), "{}", r.action);
        o.scheduler.flags = Some(flags_of("--feature-gates=CompositePodGroup=perhaps"));
        assert_eq!(status(&o, ID), Status::Error);
    }
    // 1.38 serving them at v1alpha3 only: kube-scheduler 1.38 reads v1beta1.
    let mut o = healthy(38);
    o.served = Ok(vec![
        sv("v1beta1", &["workloads", "podgroups"]),
        sv(
            "v1alpha3",
            &["workloads", "podgroups", "compositepodgroups"],
        ),
    ]);
    let r = row(&o, ID);
    assert_eq!(r.status, Status::Error);
    assert!(r.found.contains("but not at v1beta1"), "{}", r.found);
    assert_eq!(
        r.action,
        "kube-apiserver --runtime-config=scheduling.k8s.io/v1beta1=true"
    );
}

#[test]
fn the_scheduler_must_run_the_api_servers_minor() {
    let mut o = healthy(36);
    assert_eq!(status(&o, "scheduler-version"), Status::Ok);
    o.scheduler.version = Some(Found::new(v("v1.35.4"), "kube-system/pod/s image tag"));
    let r = row(&o, "scheduler-version");
    assert_eq!(r.status, Status::Error);
    assert!(
        r.found.contains("scheduling.k8s.io/v1alpha1"),
        "{}",
        r.found
    );
    o.scheduler.version = None;
    o.scheduler.lookup = Some("no pod".to_owned());
    let r = row(&o, "scheduler-version");
    assert_eq!(r.status, Status::Unknown);
    assert!(r.found.contains("no pod"), "{}", r.found);
    let mut o = healthy(36);
    o.server = Err("down".to_owned());
    assert_eq!(status(&o, "scheduler-version"), Status::Unknown);
}

#[test]
fn ca_is_supported_for_its_minor_one_behind_is_a_warning() {
    let mut o = healthy(37);
    assert_eq!(status(&o, "ca-version"), Status::Ok);
    o.ca.version = Some(Found::new(v("1.36.1"), "--ca-version"));
    let r = row(&o, "ca-version");
    assert_eq!(r.status, Status::Warn);
    assert!(r.found.contains("one minor behind"), "{}", r.found);
    o.ca.version = Some(Found::new(v("1.35.2"), "--ca-version"));
    assert_eq!(status(&o, "ca-version"), Status::Error);
    o.ca.version = Some(Found::new(v("1.38.0"), "--ca-version"));
    assert_eq!(status(&o, "ca-version"), Status::Error);
    o.ca.version = None;
    assert_eq!(status(&o, "ca-version"), Status::Unknown);
    // Two minors behind is a warning only while nothing newer is released.
    let mut o = healthy(38);
    o.ca.version = Some(Found::new(v("1.36.1"), "--ca-version"));
    let r = row(&o, "ca-version");
    assert_eq!(r.status, Status::Warn, "{r:?}");
    assert!(r.found.contains("2 minors behind"), "{}", r.found);
    o.ca.version = Some(Found::new(v("1.35.2"), "--ca-version"));
    assert_eq!(status(&o, "ca-version"), Status::Error);
}

#[test]
fn live_csi_drivers_are_listed_with_and_without_counts() {
    let mut o = healthy(36);
    let r = row(&o, "csi/live");
    assert_eq!(r.status, Status::Ok);
    assert!(
        r.found
            .contains("ebs.csi.aws.com on 1 with allocatable.count 24"),
        "{}",
        r.found
    );
    o.csi_nodes = Ok(vec![
        csi_node(
            "a",
            &[("ebs.csi.aws.com", Some(24)), ("efs.csi.aws.com", None)],
        ),
        csi_node("b", &[("ebs.csi.aws.com", None)]),
    ]);
    let r = row(&o, "csi/live");
    assert_eq!(r.status, Status::Warn);
    assert!(
        r.found
            .contains("efs.csi.aws.com on 1 without allocatable.count"),
        "{}",
        r.found
    );
    assert!(
        r.action.starts_with("ebs.csi.aws.com report"),
        "{}",
        r.action
    );
    o.csi_nodes = Ok(Vec::new());
    assert_eq!(status(&o, "csi/live"), Status::Ok);
    o.csi_nodes = Err("forbidden".to_owned());
    assert_eq!(status(&o, "csi/live"), Status::Unknown);
}

#[test]
fn templates_are_compared_with_their_groups_live_csinodes() {
    let mut o = healthy(36);
    assert_eq!(status(&o, "csi-template/gpu"), Status::Ok);
    o.csi_nodes = Ok(vec![csi_node("gpu-0", &[("ebs.csi.aws.com", Some(28))])]);
    let r = row(&o, "csi-template/gpu");
    assert_eq!(r.status, Status::Warn);
    assert!(
        r.found.contains("template 24, live 28 on gpu-0"),
        "{}",
        r.found
    );
    o.csi_nodes = Ok(vec![csi_node(
        "gpu-0",
        &[("ebs.csi.aws.com", Some(24)), ("efs.csi.aws.com", None)],
    )]);
    let r = row(&o, "csi-template/gpu");
    assert_eq!(r.status, Status::Warn);
    assert!(
        r.found
            .contains("efs.csi.aws.com (no count) that the template lacks"),
        "{}",
        r.found
    );
    o.csi_nodes = Ok(vec![csi_node("gpu-0", &[])]);
    let r = row(&o, "csi-template/gpu");
    assert_eq!(r.status, Status::Warn);
    assert!(
        r.found.contains("which no live node registers"),
        "{}",
        r.found
    );
    // A node tied to the group by its kwok provider id only.
    o.nodes = Ok(vec![NodeSeen {
        name: "kwok-gpu-0".to_owned(),
        group_label: None,
        provider_id: Some("kwok://gpu/kwok-gpu-0".to_owned()),
    }]);
    o.csi_nodes = Ok(vec![csi_node(
        "kwok-gpu-0",
        &[("ebs.csi.aws.com", Some(24))],
    )]);
    assert_eq!(status(&o, "csi-template/gpu"), Status::Ok);
    o.nodes = Ok(vec![node("cpu-0", Some("cpu"))]);
    assert_eq!(status(&o, "csi-template/gpu"), Status::Unknown);
    o.nodes = Err("forbidden".to_owned());
    assert_eq!(status(&o, "csi-template/gpu"), Status::Unknown);
    o.provider = None;
    assert!(
        report(&o)
            .checks
            .iter()
            .all(|r| !r.id.starts_with("csi-template/"))
    );
}

#[test]
fn without_ca_flags_one_unknown_row_stands_for_them() {
    let mut o = healthy(36);
    o.ca.flags = None;
    let r = report(&o);
    let ca_flags = r.checks.iter().find(|c| c.id == "ca-flags").unwrap();
    assert_eq!(ca_flags.status, Status::Unknown);
    assert!(r.checks.iter().all(|c| !c.id.starts_with("ca-flag/")));
    assert_eq!(status(&healthy(36), "ca-flags"), Status::Ok);
}

#[test]
fn ca_must_call_an_externalgrpc_provider() {
    assert_eq!(status(&healthy(36), "ca-flag/cloud-provider"), Status::Ok);
    let o = with_ca_flags("--cloud-provider=gce");
    assert_eq!(status(&o, "ca-flag/cloud-provider"), Status::Error);
    let o = with_ca_flags("--expander=least-waste");
    assert_eq!(status(&o, "ca-flag/cloud-provider"), Status::Warn);
}

#[test]
fn csi_node_aware_scheduling_depends_on_cas_minor() {
    const ID: &str = "ca-flag/enable-csi-node-aware-scheduling";
    assert_eq!(status(&healthy(36), ID), Status::Ok);
    let o = with_ca_flags("--cloud-provider=externalgrpc");
    let r = row(&o, ID);
    assert_eq!(r.status, Status::Warn);
    assert!(r.found.contains("default false"), "{}", r.found);
    let o = with_ca_flags("--enable-csi-node-aware-scheduling=maybe");
    assert_eq!(status(&o, ID), Status::Error);
    let mut o = healthy(35);
    assert_eq!(
        status(&o, ID),
        Status::Warn,
        "off on 1.35 is the lesser evil"
    );
    o.ca.flags = Some(flags_of("--enable-csi-node-aware-scheduling"));
    let r = row(&o, ID);
    assert_eq!(r.status, Status::Error);
    assert!(r.found.contains("autoscaler#10131"), "{}", r.found);
    o.ca.version = Some(Found::new(v("1.34.5"), "--ca-version"));
    assert_eq!(status(&o, ID), Status::Error, "no such flag in 1.34");
    o.ca.flags = Some(flags_of("--cloud-provider=externalgrpc"));
    assert_eq!(status(&o, ID), Status::Warn);
}

#[test]
fn long_node_group_backoffs_delay_gangs_after_a_refusal() {
    const ID: &str = "ca-flag/node-group-backoff";
    assert_eq!(status(&healthy(36), ID), Status::Ok);
    let o = with_ca_flags("--cloud-provider=externalgrpc");
    let r = row(&o, ID);
    assert_eq!(r.status, Status::Warn);
    assert!(
        r.found
            .contains("initial 5m0s (default), max 30m0s (default)"),
        "{}",
        r.found
    );
    let o = with_ca_flags(
        "--initial-node-group-backoff-duration=1m\n--max-node-group-backoff-duration=10m",
    );
    assert_eq!(status(&o, ID), Status::Warn);
    let o = with_ca_flags("--initial-node-group-backoff-duration=five");
    let r = row(&o, ID);
    assert_eq!(r.status, Status::Error);
    assert!(
        r.found
            .contains("--initial-node-group-backoff-duration=five"),
        "{}",
        r.found
    );
}

#[test]
fn expanders_that_ignore_gang_fit_are_warned_about_and_unknown_ones_are_errors() {
    const ID: &str = "ca-flag/expander";
    assert_eq!(status(&healthy(36), ID), Status::Ok);
    let o = with_ca_flags("--cloud-provider=externalgrpc");
    assert!(row(&o, ID).found.contains("least-waste (default)"));
    assert_eq!(
        status(&with_ca_flags("--expander=priority,least-waste"), ID),
        Status::Ok
    );
    assert_eq!(
        status(&with_ca_flags("--expander=random"), ID),
        Status::Warn
    );
    assert_eq!(
        status(&with_ca_flags("--expander=most-pods"), ID),
        Status::Warn
    );
    assert_eq!(
        status(&with_ca_flags("--expander=least-waste,bogus"), ID),
        Status::Error
    );
}

#[test]
fn max_nodes_total_is_checked_against_live_nodes_and_group_headroom() {
    const ID: &str = "ca-flag/max-nodes-total";
    assert_eq!(status(&healthy(36), ID), Status::Ok);
    assert_eq!(
        status(&with_ca_flags("--max-nodes-total=0"), ID),
        Status::Ok
    );
    // 2 live nodes; group gpu max 8 with 1 node: 7 more needed.
    assert_eq!(
        status(&with_ca_flags("--max-nodes-total=2"), ID),
        Status::Error
    );
    assert_eq!(
        status(&with_ca_flags("--max-nodes-total=5"), ID),
        Status::Warn
    );
    assert_eq!(
        status(&with_ca_flags("--max-nodes-total=9"), ID),
        Status::Ok
    );
    let mut o = with_ca_flags("--max-nodes-total=9");
    o.provider = None;
    assert_eq!(status(&o, ID), Status::Warn);
    o.nodes = Err("forbidden".to_owned());
    assert_eq!(status(&o, ID), Status::Unknown);
    assert_eq!(
        status(&with_ca_flags("--max-nodes-total=lots"), ID),
        Status::Error
    );
}

#[test]
fn unready_limits_are_compared_with_the_largest_whole_gang_round_up() {
    const ID: &str = "ca-flag/unready-limits";
    // Group gpu has maxSize 8: a whole gang adds up to 7 nodes beyond CA's ask of one.
    let r = row(&with_ca_flags("--cloud-provider=externalgrpc"), ID);
    assert_eq!(r.status, Status::Warn, "{r:?}");
    assert!(
        r.found.contains("ok-total-unready-count 3") && r.found.contains("up to 7 nodes"),
        "{r:?}"
    );
    assert!(r.action.contains("--ok-total-unready-count=7"), "{r:?}");
    assert_eq!(
        status(&with_ca_flags("--ok-total-unready-count=7"), ID),
        Status::Ok
    );
    assert_eq!(
        status(&with_ca_flags("--ok-total-unready-count=6"), ID),
        Status::Warn
    );
    assert_eq!(
        status(&with_ca_flags("--ok-total-unready-count=seven"), ID),
        Status::Error
    );
    assert_eq!(
        status(
            &with_ca_flags("--ok-total-unready-count=7\n--max-total-unready-percentage=x"),
            ID
        ),
        Status::Error
    );
    let mut o = with_ca_flags("--ok-total-unready-count=7");
    o.provider = None;
    assert_eq!(status(&o, ID), Status::Unknown);
}

#[test]
fn a_short_unneeded_time_is_fine_only_while_gangscaler_protects_forming_gangs() {
    const ID: &str = "ca-flag/scale-down-unneeded-time";
    let mut o = with_ca_flags("--scale-down-unneeded-time=20s");
    assert_eq!(status(&o, ID), Status::Ok);
    o.provider.as_mut().unwrap().lifecycle_interval = Duration::from_secs(30);
    assert_eq!(status(&o, ID), Status::Warn);
    let p = o.provider.as_mut().unwrap();
    p.protection = false;
    p.protection_off_because = Some("admission.policy: off".to_owned());
    let r = row(&o, ID);
    assert_eq!(r.status, Status::Warn);
    assert!(r.found.contains("admission.policy: off"), "{}", r.found);
    o.provider = None;
    let r = row(&o, ID);
    assert_eq!(r.status, Status::Warn);
    assert!(r.found.contains("30m0s"), "{}", r.found);
    assert_eq!(
        status(&with_ca_flags("--scale-down-unneeded-time=45m"), ID),
        Status::Ok
    );
    let mut o = with_ca_flags("--scale-down-enabled=false");
    o.provider = None;
    assert_eq!(status(&o, ID), Status::Ok);
    assert_eq!(
        status(&with_ca_flags("--scale-down-unneeded-time=10"), ID),
        Status::Error
    );
}

#[test]
fn the_scheduler_trap_is_checked_through_its_configuration_and_the_clusters_nodes() {
    const ID: &str = "trap/scheduler-dra-podgroup-postfilter";
    for minor in [37, 38] {
        let mut o = healthy(minor);
        assert_eq!(status(&o, ID), Status::Ok);
        o.scheduler_config = Some(SchedulerConfig {
            path: "/etc/sched.yaml".to_owned(),
            text: Ok(NO_DRA_POST_FILTER.to_owned()),
        });
        let r = row(&o, ID);
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(r.found.contains("DRA stays on"), "{r:?}");
        // Left on: a warning while the cluster has Nodes (the trap fires only in cycles where
        // no member reaches PreFilter), an error when it has none (it fires every cycle).
        o.scheduler_config = Some(SchedulerConfig {
            path: "/etc/sched.yaml".to_owned(),
            text: Ok("profiles:\n- schedulerName: default-scheduler\n".to_owned()),
        });
        let r = row(&o, ID);
        assert_eq!(r.status, Status::Warn, "{r:?}");
        assert!(r.found.contains("no Node at all"), "{r:?}");
        assert!(r.action.contains("podGroupPostFilter"), "{r:?}");
        o.nodes = Ok(Vec::new());
        let r = row(&o, ID);
        assert_eq!(r.status, Status::Error, "{r:?}");
        assert!(r.found.contains("the cluster has no Node now"), "{r:?}");
        o.scheduler_config = Some(SchedulerConfig {
            path: "/etc/sched.yaml".to_owned(),
            text: Err("No such file".to_owned()),
        });
        assert_eq!(status(&o, ID), Status::Warn);
        o.scheduler_config = Some(SchedulerConfig {
            path: "/etc/sched.yaml".to_owned(),
            text: Ok("profiles: [".to_owned()),
        });
        assert_eq!(status(&o, ID), Status::Warn);
        o.scheduler.flags = Some(flags_of("--feature-gates=GenericWorkload=true"));
        let r = row(&o, ID);
        assert_eq!(r.status, Status::Error);
        assert!(r.found.contains("without --config"), "{}", r.found);
        o.scheduler.flags = None;
        assert_eq!(status(&o, ID), Status::Warn);
    }
    assert_eq!(status(&healthy(36), ID), Status::Ok);
    let mut o = healthy(36);
    o.server = Err("down".to_owned());
    o.scheduler.version = None;
    assert_eq!(status(&o, ID), Status::Unknown);
    let mut o = healthy(37);
    o.scheduler.version = Some(Found::new(v("v1.39.0"), "--scheduler-version"));
    assert_eq!(status(&o, ID), Status::Unknown);
}

#[test]
fn dynamic_resources_must_be_kept_out_of_the_gang_post_filter_in_every_profile() {
    assert_eq!(dra_post_filter(NO_DRA).unwrap(), DraPostFilter::PluginOff);
    assert_eq!(
        dra_post_filter(NO_DRA_POST_FILTER).unwrap(),
        DraPostFilter::PostFilterOff
    );
    let star = "profiles:\n- plugins: {multiPoint: {disabled: [{name: '*'}]}}\n";
    assert_eq!(dra_post_filter(star).unwrap(), DraPostFilter::PluginOff);
    let mixed = format!(
        "{NO_DRA}- schedulerName: other\n  plugins: {{podGroupPostFilter: {{disabled: [{{name: DynamicResources}}]}}}}\n"
    );
    assert_eq!(
        dra_post_filter(&mixed).unwrap(),
        DraPostFilter::PostFilterOff
    );
    let one_of_two = format!("{NO_DRA_POST_FILTER}- schedulerName: other\n");
    assert_eq!(dra_post_filter(&one_of_two).unwrap(), DraPostFilter::On);
    assert_eq!(
        dra_post_filter("kind: KubeSchedulerConfiguration\n").unwrap(),
        DraPostFilter::On
    );
    assert!(dra_post_filter("a: [").is_err());
}

#[test]
fn upgrade_removals_are_warned_about_on_1_35_and_1_36_and_removed_gates_on_1_37_and_1_38() {
    const ID: &str = "trap/api-removal";
    let r = row(&healthy(35), ID);
    assert_eq!(r.status, Status::Warn);
    assert!(r.found.contains("spec.workloadRef"), "{}", r.found);
    let r = row(&healthy(36), ID);
    assert_eq!(r.status, Status::Warn);
    assert!(r.found.contains("v1alpha2"), "{}", r.found);
    let r = row(&healthy(37), ID);
    assert_eq!(r.status, Status::Ok);
    assert!(
        r.found.contains("serves CompositePodGroup at v1beta1")
            && r.found
                .contains("PodGroupPreemptionPolicy and DynamicResourceAllocation, which kube-scheduler's flags do not set"),
        "{}",
        r.found
    );
    assert_eq!(r.action, "", "no v1alpha3 composites to move");
    let mut o = healthy(37);
    o.served = Ok(vec![
        sv("v1beta1", &["workloads", "podgroups"]),
        sv(
            "v1alpha3",
            &["workloads", "podgroups", "compositepodgroups"],
        ),
    ]);
    let r = row(&o, ID);
    assert!(
        r.action.contains("gangscaler convert --to 1.38"),
        "{}",
        r.action
    );
    o.scheduler.flags = Some(flags_of(
        "--feature-gates=GenericWorkload=true,PodGroupPreemptionPolicy=true",
    ));
    let r = row(&o, ID);
    assert_eq!(r.status, Status::Warn);
    assert!(
        r.found
            .contains("kube-scheduler's flags set PodGroupPreemptionPolicy")
            && r.action.contains("remove PodGroupPreemptionPolicy")
            && r.action.contains("gangscaler convert --to 1.38"),
        "{r:?}"
    );
    o.scheduler.flags = None;
    let r = row(&o, ID);
    assert_eq!(r.status, Status::Ok);
    assert!(
        r.action
            .contains("remove PodGroupPreemptionPolicy and DynamicResourceAllocation"),
        "{}",
        r.action
    );
    // On 1.38 a removed gate still set stops the component.
    let r = row(&healthy(38), ID);
    assert_eq!(r.status, Status::Ok);
    assert!(r.found.contains("no removal after 1.38"), "{}", r.found);
    let mut o = healthy(38);
    o.scheduler.flags = Some(flags_of(&format!(
        "--feature-gates={},DynamicResourceAllocation=true",
        row_gates(38)
    )));
    let r = row(&o, ID);
    assert_eq!(r.status, Status::Error);
    assert!(
        r.found
            .contains("DynamicResourceAllocation, which 1.38 removed"),
        "{}",
        r.found
    );
    o.scheduler.flags = None;
    assert_eq!(status(&o, ID), Status::Ok);
    o.server = Ok(v("v1.39.0"));
    assert_eq!(status(&o, ID), Status::Unknown);
    let mut o = healthy(37);
    o.server = Err("down".to_owned());
    assert_eq!(status(&o, ID), Status::Unknown);
    let r = row(&healthy(36), "trap/ca-gang-semantics");
    assert_eq!(r.status, Status::Ok);
    assert!(
        r.found.contains("CA 1.36.1 has no gang semantics"),
        "{}",
        r.found
    );
}

#[test]
fn enable_and_rollback_lines_name_the_minors_gates_and_api() {
    let lines = report(&healthy(36)).lines.unwrap();
    assert_eq!(lines.minor, "1.36");
    assert_eq!(lines.enable[0].component, "kube-apiserver");
    assert_eq!(
        lines.enable[0].flags,
        [
            "--feature-gates=GenericWorkload=true,GangScheduling=true",
            "--runtime-config=scheduling.k8s.io/v1alpha2=true"
        ]
    );
    assert_eq!(lines.rollback[0].component, "kube-scheduler");
    let api_off = lines
        .rollback
        .iter()
        .find(|c| c.component == "kube-apiserver")
        .unwrap();
    assert_eq!(
        api_off.flags,
        [
            "--feature-gates=GenericWorkload=false,GangScheduling=false",
            "--runtime-config=scheduling.k8s.io/v1alpha2=false"
        ]
    );
    assert!(lines.warning.contains("spec.schedulingGroup.podGroupName"));
    assert!(lines.warning.contains("cannot be read"));
    let lines = report(&healthy(37)).lines.unwrap();
    assert_eq!(
        lines.enable[0].flags,
        [
            "--feature-gates=GenericWorkload=true",
            "--runtime-config=scheduling.k8s.io/v1beta1=true"
        ]
    );
    let api_off = lines
        .rollback
        .iter()
        .find(|c| c.component == "kube-apiserver")
        .unwrap();
    assert_eq!(
        api_off.flags[1],
        "--runtime-config=scheduling.k8s.io/v1beta1=false,scheduling.k8s.io/v1alpha3=false"
    );
    assert!(
        lines.enable[0]
            .note
            .contains("CompositePodGroup also needs scheduling.k8s.io/v1alpha3=true"),
        "{}",
        lines.enable[0].note
    );
    // 1.38: the e2e row's gates, CompositePodGroup at v1beta1 with the gang API.
    let lines = report(&healthy(38)).lines.unwrap();
    assert_eq!(lines.minor, "1.38");
    let gates = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true";
    assert_eq!(
        lines.enable[0].flags,
        [
            format!("--feature-gates={gates}"),
            "--runtime-config=scheduling.k8s.io/v1beta1=true".to_owned()
        ]
    );
    assert!(
        lines.enable[0]
            .note
            .contains("leave them out if you use neither"),
        "{}",
        lines.enable[0].note
    );
    for component in ["kube-controller-manager", "kube-scheduler"] {
        let c = lines
            .enable
            .iter()
            .find(|c| c.component == component)
            .unwrap();
        assert_eq!(c.flags, [format!("--feature-gates={gates}")], "{component}");
    }
    let api_off = lines
        .rollback
        .iter()
        .find(|c| c.component == "kube-apiserver")
        .unwrap();
    assert_eq!(
        api_off.flags,
        [
            "--feature-gates=GenericWorkload=false,TopologyAwareWorkloadScheduling=false,CompositePodGroup=false",
            "--runtime-config=scheduling.k8s.io/v1beta1=false,scheduling.k8s.io/v1alpha3=false"
        ]
    );
    assert!(
        lines.warning.contains("spec.parentCompositePodGroupName"),
        "{}",
        lines.warning
    );
    assert!(
        report(&healthy(38))
            .checks
            .iter()
            .any(|c| c.id == "enable-lines" && c.status == Status::Ok)
    );
    let lines = report(&healthy(35)).lines.unwrap();
    assert!(lines.warning.contains("spec.workloadRef"));
    assert!(
        lines
            .enable
            .iter()
            .any(|c| c.component == "cluster-autoscaler" && c.flags.is_empty())
    );
    let mut o = healthy(36);
    o.server = Err("down".to_owned());
    let r = report(&o);
    assert!(r.lines.is_none());
    assert_eq!(
        r.checks
            .iter()
            .find(|c| c.id == "enable-lines")
            .unwrap()
            .status,
        Status::Unknown
    );
}

#[test]
fn the_report_sums_its_rows_and_renders_as_table_and_json() {
    let mut o = healthy(36);
    o.pod_link = LinkProbe::Dropped {
        field: "schedulingGroup".to_owned(),
    };
    let r = report(&o);
    assert_eq!(r.status, Status::Error);
    assert_eq!(r.failed(), ["pod-link-field"]);
    let s = r.summary;
    assert_eq!(s.ok + s.warn + s.error + s.unknown, r.checks.len());
    let table = r.to_table();
    assert!(table.starts_with("CHECK"), "{table}");
    assert!(table.contains("pod-link-field"), "{table}");
    assert!(table.contains("Enable gang admission on 1.36"), "{table}");
    assert!(
        table.contains("--runtime-config=scheduling.k8s.io/v1alpha2=false"),
        "{table}"
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["schema"], "gangscaler.io/doctor/v1");
    assert_eq!(json["status"], "error");
    assert_eq!(json["summary"]["error"], 1);
    assert_eq!(json["checks"][0]["id"], "apiserver-version");
    assert_eq!(json["checks"][0]["status"], "ok");
    assert_eq!(json["facts"]["podLinkKept"], false);
    assert_eq!(
        json["facts"]["expectedGangApi"],
        "scheduling.k8s.io/v1alpha2"
    );
    assert_eq!(json["lines"]["enable"][0]["component"], "kube-apiserver");
    assert_eq!(report(&healthy(36)).status, Status::Warn);
}

fn daemon_set(name: &str, selector: &[(&str, &str)], tolerates: bool) -> DaemonSetDemand {
    let tolerate: &[&str] = if tolerates {
        &["nvidia.com/gpu", RESERVATION_TAINT]
    } else {
        &["nvidia.com/gpu"]
    };
    crate::testing::daemon_set(&format!("kube-system/{name}"), selector, tolerate)
}

#[test]
fn daemonsets_that_select_a_reserving_groups_nodes_without_the_toleration_are_an_error() {
    let mut o = healthy(36);
    o.daemon_sets = Ok(vec![
        daemon_set(
            "nvidia-device-plugin",
            &[("nvidia.com/gpu.present", "true")],
            false,
        ),
        daemon_set("csi-node", &[], true),
        daemon_set("cpu-agent", &[("gangscaler.io/node-group", "cpu")], false),
    ]);
    assert!(
        report(&o)
            .checks
            .iter()
            .all(|r| r.id != "reservation/daemonsets"),
        "no row while no group reserves"
    );
    o.provider.as_mut().unwrap().groups[0].reservation = true;
    let r = row(&o, "reservation/daemonsets");
    assert_eq!(r.status, Status::Error, "{r:?}");
    assert!(
        r.found
            .contains("kube-system/nvidia-device-plugin (groups gpu)"),
        "{r:?}"
    );
    assert!(!r.found.contains("csi-node"), "it tolerates: {r:?}");
    assert!(
        !r.found.contains("cpu-agent"),
        "it selects other nodes: {r:?}"
    );
    assert!(r.action.contains("operator: Exists"), "{r:?}");
    o.daemon_sets = Ok(vec![daemon_set("nvidia-device-plugin", &[], true)]);
    assert_eq!(status(&o, "reservation/daemonsets"), Status::Ok);
    o.daemon_sets = Err("forbidden".to_owned());
    assert_eq!(status(&o, "reservation/daemonsets"), Status::Unknown);
}

#[test]
fn a_reserving_cluster_api_group_needs_the_taint_in_its_machine_deployment_template() {
    use crate::provision::capi_types::MachineTaint;
    use crate::provision::clusterapi::reservation::ON_INITIALIZATION;
    let mut o = healthy(36);
    o.provider.as_mut().unwrap().groups[0].machine_deployment = Some("fleet/gpu".to_owned());
    assert!(
        report(&o)
            .checks
            .iter()
            .all(|r| r.id != "reservation/clusterapi"),
        "no row while no group reserves"
    );
    o.provider.as_mut().unwrap().groups[0].reservation = true;
    o.machine_deployments
        .insert("fleet/gpu".to_owned(), Ok(Some(Vec::new())));
    let r = row(&o, "reservation/clusterapi");
    assert_eq!(r.status, Status::Error, "{r:?}");
    assert!(r.found.contains("group gpu"), "{r:?}");
    assert!(r.found.contains("MachineDeployment fleet/gpu"), "{r:?}");
    assert!(r.action.contains("MachineTaintPropagation=true"), "{r:?}");
    assert!(r.action.contains(ON_INITIALIZATION), "{r:?}");
    let tainted = vec![MachineTaint {
        key: RESERVATION_TAINT.to_owned(),
        value: Some(crate::model::reservation::UNASSIGNED.to_owned()),
        effect: "NoSchedule".to_owned(),
        propagation: ON_INITIALIZATION.to_owned(),
    }];
    o.machine_deployments
        .insert("fleet/gpu".to_owned(), Ok(Some(tainted)));
    assert_eq!(status(&o, "reservation/clusterapi"), Status::Ok);
    o.machine_deployments
        .insert("fleet/gpu".to_owned(), Err("forbidden".to_owned()));
    let r = row(&o, "reservation/clusterapi");
    assert_eq!(r.status, Status::Unknown, "{r:?}");
    assert!(r.found.contains("forbidden"), "{r:?}");
    o.machine_deployments
        .insert("fleet/gpu".to_owned(), Ok(None));
    let r = row(&o, "reservation/clusterapi");
    assert_eq!(r.status, Status::Error, "{r:?}");
    assert!(r.found.contains("does not exist"), "{r:?}");
}
