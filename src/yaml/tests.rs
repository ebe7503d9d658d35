use std::io::Write;

use serde_json::json;

use super::*;

/// A "billion laughs" document: `levels` (at most 26) anchors `a`, `b`, ..., each a list of
/// nine aliases of the one before, about 40 bytes per level; fully expanded it has 9^levels
/// scalars.
fn alias_bomb(levels: u8) -> String {
    let mut text = String::from("a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n");
    for i in 1..levels {
        let (prev, name) = (char::from(b'a' + i - 1), char::from(b'a' + i));
        let items = vec![format!("*{prev}"); 9].join(",");
        text.push_str(&format!("{name}: &{name} [{items}]\n"));
    }
    text
}

#[test]
fn an_alias_bomb_of_a_few_hundred_bytes_is_refused_by_the_budget() {
    let bomb = alias_bomb(9);
    assert!(bomb.len() < 400, "{} bytes", bomb.len());
    let refused = |m: &str| m.contains("aliases") && m.contains("expand to more than");
    let err = config_value(&bomb, &CONFIG).unwrap_err();
    assert!(refused(&err.message), "{err}");
    assert!(
        err.message.contains("10000 parser events"),
        "names the limit: {err}"
    );
    assert!(
        err.message.starts_with("line ") && err.message.contains(", column "),
        "names the line and column: {err}"
    );
    assert!(
        !err.message.contains("RecordedAnchorEvents") && !err.message.contains("budget breached"),
        "no parser internals: {err}"
    );
    assert!(!err.message.contains('\n'), "one line: {err:?}");
    let err = documents(&bomb, &OBJECTS).unwrap_err();
    assert_eq!(err.document, 1);
    assert!(refused(&err.error.message), "{err}");
}

#[test]
fn modest_aliases_are_still_expanded() {
    let v = config_value("base: &b {cpu: \"1\"}\nother: *b\n", &CONFIG).unwrap();
    assert_eq!(v["other"], json!({"cpu": "1"}));
}

#[test]
fn nesting_deeper_than_the_budget_is_refused() {
    let deep = format!("{}1{}", "[".repeat(40), "]".repeat(40));
    let err = config_value(&format!("a: {deep}\n"), &CONFIG).unwrap_err();
    assert!(
        err.message.contains("nested deeper than the 32 levels"),
        "{err}"
    );
    let ok = format!("{}1{}", "[".repeat(20), "]".repeat(20));
    config_value(&format!("a: {ok}\n"), &CONFIG).unwrap();
}

#[test]
fn text_over_the_size_limit_is_refused_before_parsing() {
    let limits = Limits {
        max_bytes: 16,
        ..CONFIG
    };
    let err = config_value("a: 0123456789abcdef\n", &limits).unwrap_err();
    assert!(err.message.contains("16 bytes limit"), "{err}");
}

#[test]
fn a_config_text_is_one_document_with_yaml_1_2_scalars() {
    assert_eq!(config_value("", &CONFIG).unwrap(), Value::Null);
    assert_eq!(
        config_value("# only a comment\n", &CONFIG).unwrap(),
        Value::Null
    );
    let v = config_value("a: yes\nb: on\nc: 007\nd: true\ne: 1.5\nf: 12\n", &CONFIG).unwrap();
    assert_eq!(
        v,
        json!({"a": "yes", "b": "on", "c": "007", "d": true, "e": 1.5, "f": 12})
    );
    let err = config_value("a: 1\n---\nb: 2\n", &CONFIG).unwrap_err();
    assert!(err.message.contains("document"), "{err}");
    let err = config_value("a: 1\nmaxSize: 1\nmaxSize: 2\n", &CONFIG).unwrap_err();
    assert_eq!(
        err.message,
        "line 3, column 1: the key `maxSize` is set twice in the same mapping: keep one of them"
    );
    assert_eq!(err.line, Some(3));
}

#[test]
fn documents_are_numbered_by_the_reader_s_count_including_empty_ones() {
    let text = "# header\napiVersion: v1\nkind: A\n---\n# empty\n---\nkind: B\n--- {kind: C}\n";
    let docs = documents(text, &OBJECTS).unwrap();
    let numbered: Vec<(u32, &str)> = docs
        .iter()
        .map(|d| (d.number, d.value["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(numbered, [(1, "A"), (3, "B"), (4, "C")]);
    let err = documents("kind: A\n---\n---\nkind: [unclosed\n", &OBJECTS).unwrap_err();
    assert_eq!(err.document, 3, "{err}");
    assert!(err.to_string().starts_with("document 3: "), "{err}");
}

#[test]
fn kubernetes_octal_modes_read_as_kubernetes_reads_them() {
    let docs = documents("defaultMode: 0644\nname: on\n", &OBJECTS).unwrap();
    assert_eq!(docs[0].value, json!({"defaultMode": 420, "name": "on"}));
}

#[test]
fn files_are_read_up_to_the_limit_and_refused_beyond_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.yaml");
    let limits = Limits {
        max_bytes: 10,
        ..CONFIG
    };
    std::fs::write(&path, "a: 1234567").unwrap();
    assert_eq!(read_file(&path, &limits).unwrap(), "a: 1234567");
    std::fs::File::options()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"8")
        .unwrap();
    let err = read_file(&path, &limits).unwrap_err();
    assert!(
        matches!(err, ReadError::TooLarge { limit: 10, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("f.yaml"), "{err}");
    assert!(err.to_string().contains("10 bytes limit"), "{err}");
    assert!(
        read_file(&path, &CONFIG).is_ok(),
        "the real limit is larger"
    );
}

#[test]
fn a_directory_is_not_read_as_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = read_file(dir.path(), &CONFIG).unwrap_err();
    assert!(
        matches!(
            err,
            ReadError::NotAFile {
                kind: "directory",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn sizes_are_written_as_documented() {
    assert_eq!(Size(1 << 20).to_string(), "1 MiB");
    assert_eq!(Size(64 << 20).to_string(), "64 MiB");
    assert_eq!(Size(4096).to_string(), "4 KiB");
    assert_eq!(Size(10).to_string(), "10 bytes");
}

#[test]
fn values_are_written_back_as_yaml_that_reads_the_same() {
    let v = json!({"kind": "Node", "metadata": {"labels": {"a/b": "on", "n": "007"}}, "x": [1, 2.5, true]});
    let text = to_string(&v).unwrap();
    assert_eq!(config_value(&text, &CONFIG).unwrap(), v);
}

#[test]
fn non_finite_floats_are_strings_in_config_files_and_refused_in_kubernetes_objects() {
    let v = config_value("a: .nan\nb: .inf\nc: -.inf\nd: 1e999\ne: 1.5\n", &CONFIG).unwrap();
    // Strings, so the setting that holds one is refused by name (not lost as `null`).
    assert_eq!(
        v,
        json!({"a": ".nan", "b": ".inf", "c": "-.inf", "d": ".inf", "e": 1.5})
    );
    let err = documents("a: .nan\n", &OBJECTS).unwrap_err();
    assert!(err.error.message.contains(".nan"), "{err}");
}
