use std::collections::BTreeMap;

use super::*;

fn problems(text: &str, jsonl: bool) -> Vec<String> {
    match parse(text, jsonl) {
        Err(ParseError::Invalid(p)) => p.iter().map(ToString::to_string).collect(),
        other => panic!("expected problems, got {other:?}"),
    }
}

#[test]
fn a_jsonl_trace_reads_every_field_into_a_shape() {
    let text = r#"
# comment
{"name": "pretrain", "members": 16, "minCount": 12, "resources": {"cpu": "500m", "memory": "16Gi", "ephemeral-storage": 1000, "nvidia.com/gpu": 4, "rdma/x": "0"}, "volumes": {"ebs.csi.aws.com": 3, "other": 0}, "nodeSelector": {"pool": "h100"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, {"key": "k", "value": "v"}], "topologyKey": "block"}

{"members": 2}
"#;
    let shapes = parse(text, true).unwrap();
    assert_eq!(shapes.len(), 2);
    let s = &shapes[0];
    assert_eq!(
        (s.name.as_str(), s.member.as_str()),
        ("pretrain", "pretrain[*]")
    );
    assert_eq!((s.members, s.min_count), (16, 12));
    assert_eq!(s.demand.cpu_milli, 500);
    assert_eq!(s.demand.memory_bytes, 16 << 30);
    assert_eq!(s.demand.ephemeral_storage_bytes, 1000);
    assert_eq!(
        s.demand.extended,
        BTreeMap::from([("nvidia.com/gpu".to_owned(), 4)])
    );
    assert_eq!(
        s.demand.volumes,
        BTreeMap::from([("ebs.csi.aws.com".to_owned(), 3)])
    );
    assert_eq!(s.demand.node_selector["pool"], "h100");
    assert_eq!(s.demand.tolerations.len(), 2);
    assert_eq!(
        s.demand.tolerations[0].effect,
        Some(TaintEffect::NoSchedule)
    );
    assert_eq!(s.demand.tolerations[1].operator, TolerationOperator::Equal);
    assert_eq!(s.topology_key.as_deref(), Some("block"));
    // Defaults: named by its line, minCount = members.
    assert_eq!(
        (shapes[1].name.as_str(), shapes[1].min_count),
        ("line 5", 2)
    );
}

#[test]
fn a_yaml_trace_takes_one_gang_per_document_or_a_list() {
    let text = "members: 4\nresources: {nvidia.com/gpu: 8}\n---\n- {name: a, members: 1}\n- {name: b, members: 2}\n";
    let shapes = parse(text, false).unwrap();
    let names: Vec<&str> = shapes.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["document 1", "a", "b"]);
}

#[test]
fn every_bad_field_is_reported_with_its_line_field_and_value() {
    let text = concat!(
        "{\"name\": \"ok\", \"members\": 2}\n",
        "{\"name\": \"x\", \"members\": 0, \"resources\": {\"memory\": \"2048GB\", \"nvidia.com/gpu\": \"1.5\"}, \"gpus\": 8}\n",
        "{\"members\": 4, \"minCount\": 5, \"tolerations\": [{\"operator\": \"Sometimes\"}], \"volumes\": {\"ebs\": -1}}\n",
        "{\"members\": 4,\n",
        "[1, 2]\n",
    );
    assert_eq!(
        problems(text, true),
        [
            "line 2: gpus: unknown field; expected one of: name, members, minCount, resources, volumes, nodeSelector, tolerations, topologyKey",
            "line 2: members: must be at least 1 (got 0)",
            "line 2: resources.memory: is not a valid quantity: unknown quantity suffix (got \"2048GB\")",
            "line 2: resources.nvidia.com/gpu: an extended resource must be a whole number (got \"1.5\")",
            "line 3: minCount: must not exceed members (4) (got 5)",
            "line 3: volumes.ebs: expected a whole number from 0 to 4294967295 (got -1)",
            "line 3: tolerations[0].operator: expected Equal or Exists (got \"Sometimes\")",
            "line 4: not valid JSON: EOF while parsing a value at column 14",
            "line 5: expected a gang spec (a mapping) (got [1,2])",
        ]
    );
}

#[test]
fn a_yaml_error_names_its_document() {
    let p = problems("members: 1\n---\nmembers: [\n", false);
    assert_eq!(p.len(), 1);
    assert!(p[0].starts_with("document 2: not valid YAML: "), "{p:?}");
    let p = problems("members: 1\n---\nmembers: 2\nmemberz: 3\n", false);
    assert_eq!(
        p,
        [
            "document 2: memberz: unknown field; expected one of: name, members, minCount, resources, volumes, nodeSelector, tolerations, topologyKey"
        ]
    );
}

#[test]
fn an_empty_trace_is_an_error_and_the_file_is_named() {
    assert!(matches!(
        parse("\n# nothing\n", true),
        Err(ParseError::Empty)
    ));
    let e = ParseError::Empty.at(Path::new("t.jsonl"));
    assert_eq!(e.to_string(), "t.jsonl: no gang specs");
    let e =
        ParseError::Invalid(vec![whole(Location::Line(3), "bad".into())]).at(Path::new("t.jsonl"));
    assert_eq!(
        e.to_string(),
        "1 invalid gang spec(s) in t.jsonl:\n  line 3: bad"
    );
    assert_eq!(e.kind(), "invalid");
}
