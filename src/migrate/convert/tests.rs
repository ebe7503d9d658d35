//! Golden files per version pair (`tests/fixtures/convert/`) and round-trip properties.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::*;
use crate::migrate::{api, parse, render};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/convert")
}

/// The golden text of a conversion: the output stream, then the report as comments.
fn golden_text(conversion: &Conversion) -> String {
    let mut text = render(&conversion.documents).unwrap();
    text.push_str("# report\n");
    for f in &conversion.findings {
        text.push_str(&format!(
            "# doc {} {} [{}] {}\n",
            f.document, f.object, f.severity, f.message
        ));
    }
    text
}

/// Every input fixture converted to every version matches its golden file. With
/// `GANGSCALER_BLESS=1` the golden files are rewritten instead (review the diff).
#[test]
fn every_fixture_converts_to_every_version_as_its_golden_file() {
    let bless = std::env::var_os("GANGSCALER_BLESS").is_some();
    let mut checked = 0;
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(fixtures().join("input"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 3, "one input per version at least");
    for input in inputs {
        let stem = input.file_stem().unwrap().to_str().unwrap().to_owned();
        let text = std::fs::read_to_string(&input).unwrap();
        let docs = parse(&text, &stem).unwrap();
        for to in api::TARGETS {
            let golden = fixtures().join(format!("golden/{stem}.to-1.{}.yaml", to.minor()));
            let got = golden_text(&convert(&docs, to));
            if bless {
                std::fs::write(&golden, &got).unwrap();
            } else {
                let want = std::fs::read_to_string(&golden)
                    .unwrap_or_else(|e| panic!("{}: {e}", golden.display()));
                assert_eq!(
                    got,
                    want,
                    "{stem} to {to}: differs from {}",
                    golden.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 16);
}

/// The golden outputs parse back, and converting an output to its own version changes
/// nothing: every golden is already in its target's shape.
#[test]
fn converting_a_golden_output_to_its_own_version_is_the_identity() {
    for entry in std::fs::read_dir(fixtures().join("golden")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let to: api::Target = name
            .rsplit_once(".to-")
            .unwrap()
            .1
            .trim_end_matches(".yaml")
            .parse()
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let docs = parse(&text, &name).unwrap();
        let again = convert(&docs, to);
        if again.has_errors() {
            continue; // the golden of a failed conversion holds only what converted
        }
        let before: Vec<Node> = docs.into_iter().map(|d| d.node).collect();
        assert_eq!(again.documents, before, "{name}");
    }
}

fn node(text: &str) -> Node {
    serde_saphyr::from_str(text).unwrap()
}

fn inputs(nodes: Vec<Node>) -> Vec<Input> {
    nodes
        .into_iter()
        .zip(1..)
        .map(|(node, number)| Input { number, node })
        .collect()
}

fn messages(c: &Conversion, severity: Severity) -> Vec<String> {
    c.findings
        .iter()
        .filter(|f| f.severity == severity)
        .map(|f| format!("{}: {}", f.object, f.message))
        .collect()
}

#[test]
fn a_pod_naming_a_pod_group_absent_from_the_input_cannot_go_to_v1alpha1() {
    let pod = node(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\nspec:\n  schedulingGroup: {podGroupName: elsewhere}\n  containers: []\n",
    );
    let c = convert(&inputs(vec![pod.clone()]), GangApi::V1Alpha1);
    assert!(c.has_errors());
    let errors = messages(&c, Severity::Error);
    assert!(
        errors[0].contains("Pod ml/p") && errors[0].contains("\"elsewhere\""),
        "{errors:?}"
    );
    // To a 1.36+ version the same pod is already fine.
    let c = convert(&inputs(vec![pod.clone()]), GangApi::V1Beta1);
    assert!(!c.has_errors());
    assert_eq!(c.documents, vec![pod]);
}

#[test]
fn two_gangs_that_would_share_a_pod_group_name_are_refused() {
    let docs = vec![
        node(
            "apiVersion: scheduling.k8s.io/v1alpha1\nkind: Workload\nmetadata: {name: w}\nspec:\n  podGroups:\n  - {name: a, policy: {gang: {minCount: 1}}}\n  - {name: a-b, policy: {gang: {minCount: 1}}}\n",
        ),
        node(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p1}\nspec:\n  workloadRef: {name: w, podGroup: a, podGroupReplicaKey: b-c}\n",
        ),
        node(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p2}\nspec:\n  workloadRef: {name: w, podGroup: a-b, podGroupReplicaKey: c}\n",
        ),
    ];
    let c = convert(&inputs(docs), GangApi::V1Alpha2);
    let errors = messages(&c, Severity::Error);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("w-a-b-c"), "{errors:?}");
}

#[test]
fn pods_without_a_namespace_find_the_workload_and_pod_groups_that_have_one() {
    // A Job written for `kubectl apply -n ml` next to a Workload that says `namespace: ml`.
    let docs = vec![
        node(
            "apiVersion: scheduling.k8s.io/v1alpha1\nkind: Workload\nmetadata: {name: w, namespace: ml}\nspec:\n  podGroups:\n  - {name: a, policy: {gang: {minCount: 2}}}\n",
        ),
        node(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n      workloadRef: {name: w, podGroup: a, podGroupReplicaKey: \"1\"}\n",
        ),
    ];
    let up = convert(&inputs(docs.clone()), GangApi::V1Alpha2);
    assert!(!up.has_errors(), "{:?}", up.findings);
    let names: Vec<&str> = up
        .documents
        .iter()
        .filter(|d| d.get_str("kind") == Some("PodGroup"))
        .filter_map(|d| d.at(&["metadata", "name"]).and_then(Node::as_str))
        .collect();
    assert_eq!(names, ["w-a-1"], "the Job's gang, not a default one");
    let down = convert(&inputs(up.documents), GangApi::V1Alpha1);
    assert!(!down.has_errors(), "{:?}", down.findings);
    assert_eq!(down.documents, docs);
}

#[test]
fn templates_that_differ_in_priority_cannot_go_to_v1beta1() {
    let workload = node(
        "apiVersion: scheduling.k8s.io/v1alpha2\nkind: Workload\nmetadata: {name: w}\nspec:\n  podGroupTemplates:\n  - {name: a, schedulingPolicy: {basic: {}}, priorityClassName: high}\n  - {name: b, schedulingPolicy: {basic: {}}}\n",
    );
    let c = convert(&inputs(vec![workload.clone()]), GangApi::V1Beta1);
    let errors = messages(&c, Severity::Error);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("a: priorityClassName \"high\"")
            && errors[0].contains("b: priorityClassName \"\""),
        "{errors:?}"
    );
    // 1.36 takes it as it is.
    assert!(!convert(&inputs(vec![workload]), GangApi::V1Alpha2).has_errors());
}

#[test]
fn a_pod_naming_a_group_its_workload_lacks_is_an_error_naming_both() {
    let docs = vec![
        node(
            "apiVersion: scheduling.k8s.io/v1alpha1\nkind: Workload\nmetadata: {name: w}\nspec:\n  podGroups:\n  - {name: a, policy: {basic: {}}}\n",
        ),
        node(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n      workloadRef: {name: w, podGroup: nope}\n",
        ),
    ];
    let c = convert(&inputs(docs), GangApi::V1Beta1);
    let errors = messages(&c, Severity::Error);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("Job j")
            && errors[0].contains("spec.template.spec")
            && errors[0].contains("\"nope\""),
        "{errors:?}"
    );
}

// ---- composites (1.37 v1alpha3, 1.38 v1beta1) ----

fn t(minor: u32) -> api::Target {
    api::Target::of_minor(minor).unwrap()
}

fn composite(api_version: &str) -> Node {
    node(&format!(
        "apiVersion: {api_version}\nkind: CompositePodGroup\nmetadata: {{name: c, namespace: ml}}\nspec:\n  workloadRef: {{workloadName: w, templateName: r}}\n  schedulingPolicy: {{gang: {{minGroupCount: 2}}}}\n  schedulingConstraints: {{topology: [{{key: topology.kubernetes.io/zone}}]}}\n  priority: 7\nstatus:\n  conditions: [{{type: CompositePodGroupInitiallyScheduled, status: 'True'}}]\n"
    ))
}

fn child_pod_group(api_version: &str) -> Node {
    node(&format!(
        "apiVersion: {api_version}\nkind: PodGroup\nmetadata: {{name: c-a, namespace: ml}}\nspec:\n  parentCompositePodGroupName: c\n  workloadRef: {{workloadName: w, templateName: a}}\n  schedulingPolicy: {{gang: {{minCount: 2}}}}\n"
    ))
}

#[test]
fn a_v1alpha3_composite_becomes_v1beta1_for_1_38_with_every_field_and_back_for_1_37() {
    let c = convert(
        &inputs(vec![composite("scheduling.k8s.io/v1alpha3")]),
        t(38),
    );
    assert!(!c.has_errors() && !c.is_lossy(), "{:?}", c.findings);
    let want = composite("scheduling.k8s.io/v1beta1");
    assert_eq!(
        c.documents,
        std::slice::from_ref(&want),
        "only the apiVersion changes"
    );
    let notes = messages(&c, Severity::Note);
    assert!(
        notes[0].contains("CompositePodGroup ml/c")
            && notes[0].contains("scheduling.k8s.io/v1alpha3 becomes scheduling.k8s.io/v1beta1")
            && notes[0].contains("--runtime-config=scheduling.k8s.io/v1beta1=true")
            && notes[0].contains("beta, off by default"),
        "{notes:?}"
    );
    // Back to 1.37, where v1beta1 has no CompositePodGroup.
    let back = convert(&inputs(vec![want]), t(37));
    assert!(
        !back.has_errors() && !back.is_lossy(),
        "{:?}",
        back.findings
    );
    assert_eq!(back.documents, [composite("scheduling.k8s.io/v1alpha3")]);
    // `--to v1beta1` means 1.37: the composite stays v1alpha3.
    let same = convert(
        &inputs(vec![composite("scheduling.k8s.io/v1alpha3")]),
        GangApi::V1Beta1,
    );
    assert_eq!(same.documents, [composite("scheduling.k8s.io/v1alpha3")]);
    assert!(
        messages(&same, Severity::Note)[0].contains("kept as scheduling.k8s.io/v1alpha3"),
        "{:?}",
        same.findings
    );
}

#[test]
fn a_composite_cannot_go_below_1_37() {
    for minor in [35, 36] {
        let c = convert(
            &inputs(vec![composite("scheduling.k8s.io/v1alpha3")]),
            t(minor),
        );
        let errors = messages(&c, Severity::Error);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].contains("CompositePodGroup ml/c")
                && errors[0].contains(&format!("1.{minor} ("))
                && errors[0].contains("cannot express a group of groups"),
            "{errors:?}"
        );
        assert!(c.documents.is_empty());
    }
}

#[test]
fn a_pod_groups_parent_is_kept_where_composites_exist_and_dropped_clearly_below() {
    for (from, minor) in [
        ("scheduling.k8s.io/v1alpha3", 37),
        ("scheduling.k8s.io/v1beta1", 37),
        ("scheduling.k8s.io/v1alpha3", 38),
        ("scheduling.k8s.io/v1beta1", 38),
    ] {
        let c = convert(&inputs(vec![child_pod_group(from)]), t(minor));
        assert!(!c.has_errors() && !c.is_lossy(), "{:?}", c.findings);
        assert_eq!(
            c.documents[0].at(&["spec", "parentCompositePodGroupName"]),
            Some(&Node::str("c")),
            "{from} for 1.{minor}"
        );
        assert_eq!(
            c.documents[0].get_str("apiVersion"),
            Some("scheduling.k8s.io/v1beta1")
        );
        let notes = messages(&c, Severity::Note);
        assert!(
            notes.iter().any(
                |n| n.contains("spec.parentCompositePodGroupName \"c\" kept")
                    && n.contains(&format!(
                        "kube-apiserver 1.{minor} keeps it only with the CompositePodGroup gate"
                    ))
            ),
            "{notes:?}"
        );
    }
    let c = convert(
        &inputs(vec![child_pod_group("scheduling.k8s.io/v1beta1")]),
        t(36),
    );
    assert!(!c.has_errors(), "{:?}", c.findings);
    assert!(
        c.documents[0]
            .at(&["spec", "parentCompositePodGroupName"])
            .is_none()
    );
    let lossy = messages(&c, Severity::Lossy);
    assert!(
        lossy.iter().any(|l| l.contains("PodGroup ml/c-a: spec.parentCompositePodGroupName \"c\" dropped: 1.36 (v1alpha2) has no CompositePodGroup, so the PodGroup becomes a gang of its own")),
        "{lossy:?}"
    );
}

#[test]
fn composite_templates_stay_for_1_37_and_1_38_and_cannot_leave_a_workload_empty_below() {
    let workload = |own: &str| {
        node(&format!(
            "apiVersion: scheduling.k8s.io/v1beta1\nkind: Workload\nmetadata: {{name: w}}\nspec:\n{own}  compositePodGroupTemplates:\n  - name: r\n    schedulingPolicy: {{gang: {{minGroupCount: 2}}}}\n    podGroupTemplates: [{{name: a, schedulingPolicy: {{gang: {{minCount: 2}}}}}}]\n"
        ))
    };
    for minor in [37, 38] {
        let c = convert(&inputs(vec![workload("")]), t(minor));
        assert!(!c.has_errors() && !c.is_lossy(), "{:?}", c.findings);
        assert_eq!(c.documents, [workload("")]);
    }
    let c = convert(&inputs(vec![workload("")]), t(36));
    let errors = messages(&c, Severity::Error);
    assert!(
        errors[0].contains("spec.compositePodGroupTemplates (\"r\") cannot be expressed: 1.36 (v1alpha2) has no CompositePodGroup"),
        "{errors:?}"
    );
    // A Workload with templates of its own beside (not valid from 1.37, but readable) loses
    // only the composite ones.
    let c = convert(
        &inputs(vec![workload(
            "  podGroupTemplates: [{name: b, schedulingPolicy: {basic: {}}}]\n",
        )]),
        t(36),
    );
    assert!(!c.has_errors(), "{:?}", c.findings);
    assert!(
        c.documents[0]
            .at(&["spec", "compositePodGroupTemplates"])
            .is_none()
    );
    assert!(
        messages(&c, Severity::Lossy)[0]
            .contains("spec.compositePodGroupTemplates (\"r\") dropped"),
        "{:?}",
        c.findings
    );
}

#[test]
fn preemption_policy_needs_its_gate_on_1_37_and_its_priority_class_on_1_38() {
    let pg = node(
        "apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {name: p}\nspec:\n  workloadRef: {workloadName: w, templateName: a}\n  schedulingPolicy: {basic: {}}\n  preemptionPolicy: Never\n",
    );
    let workload = node(
        "apiVersion: scheduling.k8s.io/v1beta1\nkind: Workload\nmetadata: {name: w}\nspec:\n  podGroupTemplates:\n  - {name: a, schedulingPolicy: {basic: {}}, preemptionPolicy: Never}\n",
    );
    let notes = |doc: &Node, minor| {
        let c = convert(&inputs(vec![doc.clone()]), t(minor));
        assert!(!c.has_errors() && !c.is_lossy(), "{:?}", c.findings);
        assert_eq!(c.documents, std::slice::from_ref(doc));
        messages(&c, Severity::Note)
    };
    let on_37 = notes(&pg, 37);
    assert!(
        on_37[0].contains("PodGroupPreemptionPolicy gate")
            && on_37[0].contains("Priority admission"),
        "{on_37:?}"
    );
    let on_38 = notes(&pg, 38);
    assert!(
        on_38[0].contains("spec.preemptionPolicy \"Never\" kept: on 1.38")
            && on_38[0].contains("PriorityClass")
            && !on_38[0].contains("gate"),
        "{on_38:?}"
    );
    // A Workload template is not admitted by priority: only 1.37's gate matters.
    let on_37 = notes(&workload, 37);
    assert!(
        on_37[0].contains("spec.podGroupTemplates[0].preemptionPolicy")
            && on_37[0].contains("1.38 needs no gate")
            && !on_37[0].contains("Priority admission"),
        "{on_37:?}"
    );
    assert!(notes(&workload, 38).is_empty());
}

// ---- round trips ----

/// One group entry of a generated Workload: its name, a gang minCount or basic, and the
/// replica keys its pods use (`None`: no key).
#[derive(Debug, Clone)]
struct GenGroup {
    name: String,
    min_count: Option<i64>,
    keys: Vec<Option<String>>,
}

fn gen_groups() -> impl Strategy<Value = Vec<GenGroup>> {
    prop::collection::vec(
        (
            prop::option::of(1i64..64),
            prop::collection::vec(prop::option::of("[0-9a-z]{1,3}"), 0..3),
        ),
        1..4,
    )
    .prop_map(|groups| {
        groups
            .into_iter()
            .enumerate()
            .map(|(i, (min_count, mut keys))| {
                keys.sort();
                keys.dedup();
                GenGroup {
                    name: format!("g{i}"),
                    min_count,
                    keys,
                }
            })
            .collect()
    })
}

fn policy(min_count: Option<i64>) -> Node {
    match min_count {
        Some(n) => Node::map().with("gang", Node::map().with("minCount", Node::Int(n))),
        None => Node::map().with("basic", Node::map()),
    }
}

fn metadata(name: &str, ns: &str) -> Node {
    Node::map()
        .with("name", Node::str(name))
        .with("namespace", Node::str(ns))
}

/// A pod-bearing object of a kind the converter walks.
fn carrier(kind: usize, name: &str, ns: &str, field: &str, link: Node) -> Node {
    let spec = Node::map()
        .with("schedulerName", Node::str("default-scheduler"))
        .with(field, link)
        .with(
            "containers",
            Node::Seq(vec![Node::map().with("name", Node::str("c"))]),
        );
    let template = Node::map().with("spec", spec.clone());
    let (api_version, kind_name, body) = match kind % 3 {
        0 => ("v1", "Pod", ("spec", spec)),
        1 => (
            "batch/v1",
            "Job",
            (
                "spec",
                Node::map()
                    .with("parallelism", Node::Int(2))
                    .with("template", template),
            ),
        ),
        _ => (
            "apps/v1",
            "StatefulSet",
            (
                "spec",
                Node::map()
                    .with("template", template)
                    .with("replicas", Node::Int(3)),
            ),
        ),
    };
    Node::map()
        .with("apiVersion", Node::str(api_version))
        .with("kind", Node::str(kind_name))
        .with("metadata", metadata(name, ns))
        .with(body.0, body.1)
}

/// A 1.35 manifest: a Workload and, per group and replica key, one carrier of pods, plus
/// an unrelated ConfigMap.
fn v1alpha1_manifest(groups: &[GenGroup], kinds: &[usize]) -> Vec<Node> {
    let entries = groups
        .iter()
        .map(|g| {
            Node::map()
                .with("name", Node::str(&g.name))
                .with("policy", policy(g.min_count))
        })
        .collect();
    let mut docs = vec![
        Node::map()
            .with("apiVersion", Node::str("v1"))
            .with("kind", Node::str("ConfigMap"))
            .with("metadata", metadata("settings", "ml"))
            .with("data", Node::map().with("rank", Node::str("0"))),
        Node::map()
            .with("apiVersion", Node::str("scheduling.k8s.io/v1alpha1"))
            .with("kind", Node::str("Workload"))
            .with("metadata", metadata("train", "ml"))
            .with("spec", Node::map().with("podGroups", Node::Seq(entries))),
    ];
    let mut n = 0;
    for g in groups {
        for key in &g.keys {
            let link = GroupLink {
                workload: "train".into(),
                template: g.name.clone(),
                replica_key: key.clone(),
            };
            let (field, value) = link.pod_link(GangApi::V1Alpha1).unwrap();
            docs.push(carrier(
                kinds[n % kinds.len()],
                &format!("c{n}"),
                "ml",
                field,
                value,
            ));
            n += 1;
        }
    }
    docs
}

/// A 1.36 manifest: the Workload with 1.36-only template fields, its PodGroups (one per
/// named gang, and the unkeyed one for each group, named by a carrier when the group has
/// keyed ones too), the carriers, and a standalone PodGroup with its pod.
fn v1alpha2_manifest(groups: &[GenGroup], kinds: &[usize], extras: bool) -> Vec<Node> {
    let templates: Vec<Node> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let mut t = Node::map()
                .with("name", Node::str(&g.name))
                .with("schedulingPolicy", policy(g.min_count));
            if extras {
                t.set(
                    "schedulingConstraints",
                    Node::map().with(
                        "topology",
                        Node::Seq(vec![
                            Node::map().with("key", Node::str("topology.kubernetes.io/rack")),
                        ]),
                    ),
                );
                t.set(
                    "disruptionMode",
                    Node::str(if i % 2 == 0 { "PodGroup" } else { "Pod" }),
                );
                // v1beta1 wants one priority per Workload.
                t.set("priority", Node::Int(10));
            }
            t
        })
        .collect();
    let mut docs = vec![
        Node::map()
            .with("apiVersion", Node::str("scheduling.k8s.io/v1alpha2"))
            .with("kind", Node::str("Workload"))
            .with("metadata", metadata("train", "ml"))
            .with(
                "spec",
                Node::map().with("podGroupTemplates", Node::Seq(templates.clone())),
            ),
    ];
    let mut n = 0;
    for (g, t) in groups.iter().zip(&templates) {
        let mut keys = g.keys.clone();
        if !keys.contains(&None) && !keys.is_empty() {
            keys.insert(0, None);
        }
        if keys.is_empty() {
            keys.push(None);
        }
        for key in keys {
            let link = GroupLink {
                workload: "train".into(),
                template: g.name.clone(),
                replica_key: key,
            };
            docs.push(
                api::pod_group(GangApi::V1Alpha2, Some("ml"), &link, t)
                    .unwrap()
                    .unwrap(),
            );
            let (field, value) = link.pod_link(GangApi::V1Alpha2).unwrap();
            docs.push(carrier(
                kinds[n % kinds.len()],
                &format!("c{n}"),
                "ml",
                field,
                value,
            ));
            n += 1;
        }
    }
    docs
}

fn sorted(docs: &[Node]) -> Vec<String> {
    let mut v: Vec<String> = docs.iter().map(|d| d.to_json().to_string()).collect();
    v.sort();
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// 1.35 → 1.36, 1.37 or 1.38 → 1.35 gives back the input exactly (order included), and the
    /// only lossy findings on the way up are the replica keys folded into PodGroup names.
    #[test]
    fn v1alpha1_round_trips_through_every_pod_group_version(
        groups in gen_groups(),
        kinds in prop::collection::vec(0usize..3, 1..4),
        via in prop::sample::select(api::TARGETS[1..].to_vec()),
    ) {
        let original = v1alpha1_manifest(&groups, &kinds);
        let up = convert(&inputs(original.clone()), via);
        prop_assert!(!up.has_errors(), "{:?}", up.findings);
        for f in up.findings.iter().filter(|f| f.severity == Severity::Lossy) {
            prop_assert!(f.message.contains("podGroupReplicaKey"), "{f:?}");
        }
        let created = up.documents.iter().filter(|d| d.get_str("kind") == Some("PodGroup")).count();
        let gangs: usize = groups.iter().map(|g| g.keys.len().max(1)).sum();
        prop_assert_eq!(created, gangs);
        let down = convert(&inputs(up.documents), GangApi::V1Alpha1);
        prop_assert!(!down.has_errors(), "{:?}", down.findings);
        prop_assert!(!down.is_lossy(), "{:?}", down.findings);
        prop_assert_eq!(down.documents, original);
    }

    /// 1.36 → 1.37 or 1.38 → 1.36 is exact, with the 1.36-only template fields too; 1.36 →
    /// 1.35 → 1.36 gives back the same objects (PodGroups right after their Workload) when the
    /// templates carry only name and policy.
    #[test]
    fn v1alpha2_round_trips(
        groups in gen_groups(),
        kinds in prop::collection::vec(0usize..3, 1..4),
        extras: bool,
        via in prop::sample::select(api::TARGETS[2..].to_vec()),
    ) {
        let original = v1alpha2_manifest(&groups, &kinds, extras);
        let up = convert(&inputs(original.clone()), via);
        prop_assert!(!up.has_errors(), "{:?}", up.findings);
        let back = convert(&inputs(up.documents), GangApi::V1Alpha2);
        prop_assert!(!back.has_errors(), "{:?}", back.findings);
        prop_assert_eq!(&back.documents, &original);

        let down = convert(&inputs(original.clone()), GangApi::V1Alpha1);
        prop_assert!(!down.has_errors(), "{:?}", down.findings);
        prop_assert_eq!(down.is_lossy(), extras, "{:?}", down.findings);
        if !extras {
            let again = convert(&inputs(down.documents), GangApi::V1Alpha2);
            prop_assert!(!again.has_errors(), "{:?}", again.findings);
            prop_assert_eq!(sorted(&again.documents), sorted(&original));
        }
    }

    /// Conversion never panics and never reports nothing for an object it dropped, whatever
    /// the documents hold.
    #[test]
    fn arbitrary_documents_convert_without_panicking(
        groups in gen_groups(),
        kinds in prop::collection::vec(0usize..3, 1..4),
        cut in prop::collection::vec((0usize..8, "[a-zA-Z]{1,12}"), 0..6),
        to in prop::sample::select(api::TARGETS.to_vec()),
    ) {
        let mut docs = v1alpha2_manifest(&groups, &kinds, true);
        // Damage some documents: remove or rename fields at the top of their spec.
        for (i, field) in cut {
            if let Some(spec) = docs.get_mut(i).and_then(|d| d.get_mut("spec")) {
                let first = spec.entries().and_then(|e| e.first()).map(|(k, _)| k.clone());
                if let Some(k) = first {
                    let v = spec.remove(&k).unwrap_or(Node::Null);
                    spec.set(&field, v);
                }
            }
        }
        let n = docs.len();
        let c = convert(&inputs(docs), to);
        let dropped = n.saturating_sub(c.documents.len());
        let reported = c.findings.iter().filter(|f| f.message.contains("folded") || f.severity == Severity::Error).count();
        prop_assert!(reported >= dropped.min(1) || dropped == 0);
    }
}
