use super::*;

#[test]
fn the_probe_pod_carries_the_minors_link_field_and_the_answer_is_read_back() {
    let pod = probe_pod("ml", "schedulingGroup");
    assert_eq!(pod["metadata"]["namespace"], "ml");
    assert_eq!(
        pod["spec"]["schedulingGroup"]["podGroupName"],
        "gangscaler-doctor-probe"
    );
    assert!(link_kept("schedulingGroup", &pod));
    let pod = probe_pod("default", "workloadRef");
    assert_eq!(pod["spec"]["workloadRef"]["podGroup"], "probe");
    assert!(link_kept("workloadRef", &pod));
    let dropped = json!({"spec": {"containers": []}});
    assert!(!link_kept("workloadRef", &dropped));
    assert!(!link_kept("schedulingGroup", &json!({})));
}

#[test]
fn autoscaler_images_are_told_by_name_not_tag() {
    assert!(is_autoscaler_image(
        "registry.k8s.io/autoscaling/cluster-autoscaler:v1.36.1"
    ));
    assert!(is_autoscaler_image(
        "my.registry:5000/cluster-autoscaler-amd64"
    ));
    assert!(!is_autoscaler_image("busybox:cluster-autoscaler"));
    assert!(!is_autoscaler_image(
        "registry.k8s.io/kube-scheduler:v1.36.2"
    ));
}

#[test]
fn a_flags_file_that_is_missing_or_empty_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.flags");
    let err = read_flags_file("--ca-flags", &missing).unwrap_err();
    let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(chain.starts_with("--ca-flags: "), "{chain}");
    assert!(chain.contains("nope.flags"), "{chain}");
    let empty = dir.path().join("empty.flags");
    std::fs::write(&empty, "# nothing\n").unwrap();
    let err = read_flags_file("--scheduler-flags", &empty)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("--scheduler-flags "), "{err}");
    assert!(err.contains("empty.flags: no flags found"), "{err}");
    assert_eq!(
        parse_version("--ca-version", "latest")
            .unwrap_err()
            .to_string(),
        "--ca-version \"latest\": expected a version such as 1.36.1 or v1.36.1"
    );
}
