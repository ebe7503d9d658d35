//! Property-based fuzzing of configuration parsing (issue 10, item 15): arbitrary bytes,
//! YAML-ish token soup, structured mutations of the shipped examples, environment overrides,
//! deep nesting and generated alias bombs. Invariants: loading never panics; every error
//! names the file it is about (every field error its file); and what the parser returns is
//! bounded by the budget, however much the aliases would expand to.
//!
//! Case counts are fixed (`CASES`), so the suite runs in seconds in CI.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a panic is the test failure"
)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gangscaler::config::{Error, Loaded, Source};
use gangscaler::yaml;
use proptest::prelude::*;
use serde_json::Value;

/// Cases per property.
const CASES: u32 = 256;
/// Cases of the alias-bomb property, whose cases each cost up to a full alias budget.
const BOMB_CASES: u32 = 64;

fn config() -> ProptestConfig {
    config_with(CASES)
}

fn config_with(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Failures are reported with their minimal input; nothing is written to the tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The shipped example configuration: `(path relative to the directory, text)`, the provider
/// file first.
fn shipped() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("provider-configs");
    let mut files = vec![(
        "provider.yaml".to_owned(),
        std::fs::read_to_string(root.join("provider.yaml")).unwrap(),
    )];
    let mut groups: Vec<PathBuf> = std::fs::read_dir(root.join("nodegroups"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    groups.sort();
    for g in groups {
        let name = g.file_name().unwrap().to_string_lossy().into_owned();
        files.push((
            format!("nodegroups/{name}"),
            std::fs::read_to_string(g).unwrap(),
        ));
    }
    files
}

/// Writes `files` (relative path, bytes) into a fresh directory and loads it with `env`.
/// Returns the directory (kept alive), the absolute paths written and the result.
fn load(
    files: &[(String, Vec<u8>)],
    env: HashMap<String, String>,
) -> (tempfile::TempDir, Vec<PathBuf>, Result<Loaded, Error>) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("nodegroups")).unwrap();
    let mut paths = Vec::new();
    for (rel, bytes) in files {
        let path = tmp.path().join(rel);
        std::fs::write(&path, bytes).unwrap();
        paths.push(path);
    }
    let result = Source::with_env(tmp.path(), env).load();
    (tmp, paths, result)
}

/// The invariant on every failed load: the error names a file that was written (or the
/// node-group directory), and so does its message.
fn names_its_file(result: &Result<Loaded, Error>, dir: &Path, files: &[PathBuf]) {
    let Err(err) = result else { return };
    // A written file, or a path under the config directory: a mutated `nodeGroupsDir`
    // (say `007`) is read relative to it and named when it does not exist.
    let known = |p: &Path| files.iter().any(|f| f == p) || p.starts_with(dir);
    let text = err.to_string();
    match err {
        Error::Read { path, .. }
        | Error::Parse { path, .. }
        | Error::NotAFile { path, .. }
        | Error::TooLarge { path, .. } => {
            assert!(known(path), "unknown path {}: {err:?}", path.display());
            assert!(text.contains(&*path.to_string_lossy()), "{text}");
        }
        Error::Unusable(list) => {
            assert!(!list.is_empty(), "{err:?}");
            for u in list {
                assert!(known(&u.path), "{err:?}");
            }
        }
        Error::Invalid(list) => {
            assert!(!list.is_empty(), "an empty error list: {err:?}");
            for e in list {
                assert!(known(&e.file), "field error without a written file: {e:?}");
                assert!(!e.field.is_empty(), "{e:?}");
                assert!(text.contains(&*e.file.to_string_lossy()), "{text}");
            }
        }
    }
}

/// Nodes (scalars, sequences and mappings) in a parsed value.
fn nodes(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(nodes).sum(),
        Value::Object(m) => m.values().map(nodes).sum::<usize>() + m.len(),
        _ => 0,
    }
}

/// Pieces of YAML, weighted toward the schema's keys and the syntax that trips parsers.
fn token() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "id",
        "minSize",
        "maxSize",
        "instanceType",
        "region",
        "zone",
        "capacity",
        "reserved",
        "cpu",
        "memory",
        "ephemeralStorage",
        "pods",
        "gpu",
        "count",
        "product",
        "rdma",
        "resourceName",
        "devices",
        "bandwidthGbps",
        "csi",
        "labels",
        "topology",
        "taints",
        "key",
        "value",
        "effect",
        "price",
        "backend",
        "type",
        "kwok",
        "failure",
        "attach",
        "server",
        "address",
        "metricsAddress",
        "plaintext",
        "tls",
        "certFile",
        "lifecycle",
        "interval",
        "audit",
        "path",
        "admission",
        "policy",
        "defaults",
        "nodeGroupsDir",
        ": ",
        ": ",
        ": ",
        "\n",
        "\n",
        "\n  ",
        "\n    ",
        "- ",
        "[",
        "]",
        "{",
        "}",
        ", ",
        "&a ",
        "&b ",
        "*a",
        "*b",
        "<<: ",
        "---\n",
        "...\n",
        "!!str ",
        "!!int ",
        "!foo ",
        "|\n  ",
        ">-\n  ",
        "'",
        "\"",
        "# c",
        "? ",
        "%YAML 1.2\n",
        "\t",
        "\u{feff}",
        "\u{0}",
        "-1",
        "0",
        "1",
        "110",
        "4294967296",
        "1e309",
        "0x10",
        "007",
        ".nan",
        ".inf",
        "1.5",
        "16Gi",
        "500m",
        "lots",
        "NoSchedule",
        "memory",
        "true",
        "null",
        "~",
        "",
        "x",
        "gpu-a",
        "127.0.0.1:0",
        "0.0.0.0:1",
        "30s",
        "0s",
        "-5m",
        "1h30m",
        "strict",
    ])
}

fn yamlish() -> impl Strategy<Value = String> {
    prop::collection::vec(token(), 0..120).prop_map(|t| t.concat())
}

/// A structured edit of one line-oriented YAML text.
#[derive(Debug, Clone)]
enum Mutation {
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    ReplaceValue(usize, String),
    InsertLine(usize, String),
    Indent(usize, bool),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::DeleteLine),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        (any::<usize>(), yamlish()).prop_map(|(i, v)| Mutation::ReplaceValue(i, v)),
        (any::<usize>(), token()).prop_map(|(i, v)| Mutation::ReplaceValue(i, v.to_owned())),
        (any::<usize>(), yamlish()).prop_map(|(i, l)| Mutation::InsertLine(i, l)),
        (any::<usize>(), any::<bool>()).prop_map(|(i, d)| Mutation::Indent(i, d)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn apply(text: &str, m: &Mutation) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    if lines.is_empty() {
        lines.push(String::new());
    }
    let n = lines.len();
    match m {
        Mutation::DeleteLine(i) => {
            lines.remove(i % n);
        }
        Mutation::DuplicateLine(i) => {
            let l = lines[i % n].clone();
            lines.insert(i % n, l);
        }
        Mutation::SwapLines(a, b) => lines.swap(a % n, b % n),
        Mutation::ReplaceValue(i, v) => {
            let l = &mut lines[i % n];
            if let Some(colon) = l.find(": ") {
                l.truncate(colon + 2);
                l.push_str(v);
            } else {
                *l = v.clone();
            }
        }
        Mutation::InsertLine(i, l) => lines.insert(i % (n + 1), l.clone()),
        Mutation::Indent(i, deeper) => {
            let l = &mut lines[i % n];
            if *deeper {
                l.insert_str(0, "  ");
            } else if l.starts_with("  ") {
                l.drain(..2);
            }
        }
        Mutation::Truncate(at) => {
            let joined = lines.join("\n");
            let mut at = at % (joined.len() + 1);
            while !joined.is_char_boundary(at) {
                at -= 1;
            }
            return joined[..at].to_owned();
        }
    }
    lines.join("\n") + "\n"
}

/// A generated alias bomb: `levels` anchors, each a collection of `fanout` aliases of the one
/// before, as lists or as mappings, optionally merged with `<<`.
fn bomb() -> impl Strategy<Value = (String, u32, u32)> {
    (2u32..12, 2u32..16, 0u8..3).prop_map(|(levels, fanout, style)| {
        let mut text = String::from("l0: &l0 [lol]\n");
        for i in 1..levels {
            let prev = format!("*l{}", i - 1);
            let body = match style {
                0 => format!("[{}]", vec![prev.as_str(); fanout as usize].join(", ")),
                1 => format!(
                    "{{{}}}",
                    (0..fanout)
                        .map(|k| format!("k{k}: {prev}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ => format!(
                    "{{<<: {{m: {prev}}}, {}}}",
                    (0..fanout)
                        .map(|k| format!("k{k}: {prev}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            text.push_str(&format!("l{i}: &l{i} {body}\n"));
        }
        (text, levels, fanout)
    })
}

fn with_group(group: Vec<u8>) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = shipped()
        .into_iter()
        .take(1)
        .map(|(p, t)| (p, t.into_bytes()))
        .collect();
    files.push(("nodegroups/gpu-a.yaml".to_owned(), group));
    files
}

#[test]
fn the_unmutated_examples_load() {
    let files: Vec<(String, Vec<u8>)> = shipped()
        .into_iter()
        .map(|(p, t)| (p, t.into_bytes()))
        .collect();
    let (_tmp, _, result) = load(&files, HashMap::new());
    result.unwrap_or_else(|e| panic!("{e}"));
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_as_a_group_file_never_panic_and_errors_name_the_file(
        bytes in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        let (tmp, paths, result) = load(&with_group(bytes), HashMap::new());
        names_its_file(&result, tmp.path(), &paths);
    }

    #[test]
    fn arbitrary_bytes_as_the_provider_file_never_panic_and_errors_name_it(
        bytes in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        let files = vec![("provider.yaml".to_owned(), bytes)];
        let (tmp, paths, result) = load(&files, HashMap::new());
        names_its_file(&result, tmp.path(), &paths);
    }

    #[test]
    fn yaml_ish_text_never_panics_and_errors_name_the_file(
        group in yamlish(),
        provider in prop::option::of(yamlish()),
    ) {
        let mut files = with_group(group.into_bytes());
        if let Some(p) = provider {
            files[0].1 = p.into_bytes();
        }
        let (tmp, paths, result) = load(&files, HashMap::new());
        names_its_file(&result, tmp.path(), &paths);
    }

    #[test]
    fn mutated_examples_never_panic_and_errors_name_the_file(
        which in any::<usize>(),
        mutations in prop::collection::vec(mutation(), 1..5),
    ) {
        let mut files: Vec<(String, String)> = shipped();
        let i = which % files.len();
        for m in &mutations {
            files[i].1 = apply(&files[i].1, m);
        }
        let files: Vec<(String, Vec<u8>)> =
            files.into_iter().map(|(p, t)| (p, t.into_bytes())).collect();
        let (tmp, paths, result) = load(&files, HashMap::new());
        names_its_file(&result, tmp.path(), &paths);
    }

    #[test]
    fn environment_overrides_never_panic_and_errors_name_the_file(
        vars in prop::collection::vec(
            (
                prop::sample::select(vec!["GANGSCALER__", "GANGSCALER_NG_H100_8X__", "gangscaler_ng_l4_4x__"]),
                prop::collection::vec(token(), 1..4),
                token(),
            ),
            0..6,
        ),
    ) {
        let env: HashMap<String, String> = vars
            .into_iter()
            .map(|(prefix, path, value)| {
                let key: Vec<String> = path.iter().map(|s| s.to_uppercase()).collect();
                (format!("{prefix}{}", key.join("__")), value.to_owned())
            })
            .collect();
        let files: Vec<(String, Vec<u8>)> = shipped()
            .into_iter()
            .map(|(p, t)| (p, t.into_bytes()))
            .collect();
        let (tmp, paths, result) = load(&files, env);
        names_its_file(&result, tmp.path(), &paths);
    }

    #[test]
    fn deep_nesting_is_refused_without_overflowing_the_stack(
        depth in 1usize..5000,
        open in prop::sample::select(vec!["[", "{a: ", "- "]),
    ) {
        let text = match open {
            "- " => (0..depth.min(400)).map(|d| format!("{}- ", " ".repeat(d * 2))).collect::<Vec<_>>().join("\n") + "x\n",
            "[" => format!("a: {}1{}\n", "[".repeat(depth), "]".repeat(depth)),
            _ => format!("a: {}1{}\n", "{a: ".repeat(depth), "}".repeat(depth)),
        };
        match yaml::config_value(&text, &yaml::CONFIG) {
            Ok(v) => prop_assert!(nodes(&v) <= yaml::CONFIG.max_nodes),
            Err(e) => prop_assert!(!e.message.is_empty()),
        }
        let (tmp, paths, result) = load(&with_group(text.into_bytes()), HashMap::new());
        names_its_file(&result, tmp.path(), &paths);
    }
}

proptest! {
    // Each case parses up to the shipped alias budget through `Source::load`: fewer cases.
    #![proptest_config(config_with(BOMB_CASES))]

    #[test]
    fn alias_bombs_are_refused_or_stay_within_the_budget(
        (text, levels, fanout) in bomb(),
    ) {
        // Relative to the limits given: small ones keep each case cheap (the parser is
        // slow unoptimised); the shipped limits are exercised through `Source::load`.
        for limits in [
            yaml::Limits { max_alias_events: 1_000, ..yaml::CONFIG },
            yaml::Limits { max_alias_events: 2_000, ..yaml::OBJECTS },
        ] {
            match yaml::config_value(&text, &limits) {
                Ok(v) => {
                    let n = nodes(&v);
                    prop_assert!(
                        n <= limits.max_nodes.min(text.len() + limits.max_alias_events),
                        "{levels} levels of {fanout}: {n} nodes accepted"
                    );
                }
                Err(e) => prop_assert!(e.message.contains("line"), "{e}"),
            }
            match yaml::documents(&text, &limits) {
                Ok(docs) => {
                    let n: usize = docs.iter().map(|d| nodes(&d.value)).sum();
                    prop_assert!(n <= text.len() + limits.max_alias_events);
                }
                Err(e) => prop_assert_eq!(e.document, 1),
            }
        }
        let (tmp, paths, result) = load(&with_group(text.into_bytes()), HashMap::new());
        names_its_file(&result, tmp.path(), &paths);
    }
}
