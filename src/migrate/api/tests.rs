use super::*;

fn link(w: &str, t: &str, k: Option<&str>) -> GroupLink {
    GroupLink {
        workload: w.into(),
        template: t.into(),
        replica_key: k.map(Into::into),
    }
}

#[test]
fn pod_group_names_carry_the_replica_key_and_read_back() {
    for l in [
        link("train", "workers", None),
        link("train", "workers", Some("3")),
    ] {
        let name = l.pod_group_name().unwrap();
        assert_eq!(GroupLink::of_pod_group("train", "workers", &name), l);
    }
    assert_eq!(
        link("train", "workers", Some("0"))
            .pod_group_name()
            .unwrap(),
        "train-workers-0"
    );
    // A PodGroup named by hand keeps its name as the replica key.
    assert_eq!(
        GroupLink::of_pod_group("train", "workers", "custom").replica_key,
        Some("custom".into())
    );
}

#[test]
fn a_replica_key_that_cannot_name_an_object_is_refused_naming_it() {
    let err = link("train", "workers", Some("Rank_0"))
        .pod_group_name()
        .unwrap_err();
    assert_eq!(err.name, "train-workers-Rank_0");
    assert!(err.to_string().contains("Rank_0"), "{err}");
    let long = "a".repeat(252);
    assert!(link(&long, "w", None).pod_group_name().is_err());
}

#[test]
fn pod_links_per_version() {
    let l = link("train", "workers", Some("1"));
    let (field, value) = l.pod_link(GangApi::V1Alpha1).unwrap();
    assert_eq!(field, "workloadRef");
    assert_eq!(value.get_str("podGroupReplicaKey"), Some("1"));
    for api in [GangApi::V1Alpha2, GangApi::V1Beta1] {
        let (field, value) = l.pod_link(api).unwrap();
        assert_eq!(field, "schedulingGroup");
        assert_eq!(value.get_str("podGroupName"), Some("train-workers-1"));
    }
}

#[test]
fn versions_parse_and_v1alpha3_reads_as_v1beta1() {
    assert_eq!("v1alpha2".parse::<GangApi>().unwrap(), GangApi::V1Alpha2);
    assert_eq!(
        "scheduling.k8s.io/v1beta1".parse::<GangApi>().unwrap(),
        GangApi::V1Beta1
    );
    assert!("v2".parse::<GangApi>().is_err());
    assert_eq!(
        GangApi::of_api_version("scheduling.k8s.io/v1alpha3"),
        Some(GangApi::V1Beta1)
    );
    assert_eq!(GangApi::of_api_version("batch/v1"), None);
}

#[test]
fn targets_are_minors_or_version_names() {
    let t38: Target = "1.38".parse().unwrap();
    assert_eq!(t38.minor(), 38);
    assert_eq!(t38.api(), GangApi::V1Beta1);
    assert_eq!(t38.composite_version(), Some("v1beta1"));
    assert_eq!(t38.to_string(), "1.38 (v1beta1)");
    assert_eq!("v1.38".parse::<Target>().unwrap(), t38);
    let t37: Target = "v1beta1".parse().unwrap();
    assert_eq!(
        t37.minor(),
        37,
        "a version name is the first minor that serves it"
    );
    assert_eq!(t37.composite_version(), Some("v1alpha3"));
    assert_eq!(
        "scheduling.k8s.io/v1alpha2".parse::<Target>().unwrap(),
        Target::of_minor(36).unwrap()
    );
    assert!(!Target::of_minor(36).unwrap().has_composites());
    assert_eq!(Target::from(GangApi::V1Alpha1).minor(), 35);
    for bad in ["1.34", "1.39", "v2", "1.x", ""] {
        let e = bad.parse::<Target>().unwrap_err();
        assert!(
            e.to_string().contains(&format!("{bad:?}")) && e.to_string().contains("1.38"),
            "{e}"
        );
    }
    assert_eq!(
        TARGETS.map(|t| t.api()),
        [
            GangApi::V1Alpha1,
            GangApi::V1Alpha2,
            GangApi::V1Beta1,
            GangApi::V1Beta1
        ]
    );
    assert_eq!(GangApi::of_minor(38), Some(GangApi::V1Beta1));
    assert_eq!(composite_version(36), None);
}

#[test]
fn pod_group_spec_references_the_template_in_each_shape() {
    let template = Node::map()
        .with("name", Node::str("workers"))
        .with(
            "schedulingPolicy",
            Node::map().with("gang", Node::map().with("minCount", Node::Int(4))),
        )
        .with("priority", Node::Int(5));
    assert!(pod_group_spec(GangApi::V1Alpha1, "train", &template).is_none());
    let a2 = pod_group_spec(GangApi::V1Alpha2, "train", &template).unwrap();
    assert_eq!(
        a2.at(&["podGroupTemplateRef", "workload", "podGroupTemplateName"]),
        Some(&Node::str("workers"))
    );
    assert_eq!(a2.get("priority"), Some(&Node::Int(5)));
    assert!(a2.get("name").is_none());
    let b1 = pod_group_spec(GangApi::V1Beta1, "train", &template).unwrap();
    assert_eq!(
        b1.at(&["workloadRef", "templateName"]),
        Some(&Node::str("workers"))
    );
}
