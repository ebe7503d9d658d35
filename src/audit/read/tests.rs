use super::*;

fn read(text: &str) -> Reading {
    let mut out = Reading::default();
    read_lines(text.as_bytes(), Path::new("mem.jsonl"), &mut out).unwrap();
    out
}

const GOOD: &str = r#"{"schema":1,"tsMs":5,"event":"phase","scaleUpId":"a","nodeGroup":"g","gang":null,"phase":"nodesReady","atMs":5,"elapsedMs":0,"detail":null}"#;

#[test]
fn every_kind_of_bad_line_is_named_with_its_number_and_skipped() {
    let text = format!(
        "{GOOD}\nnot json\n\n{}\n{}\n{}\n\u{0}\u{0}\n{GOOD}\n{{\"schema\":1",
        GOOD.replace("\"phase\",", "\"teleport\","),
        GOOD.replace("\"schema\":1", "\"schema\":2"),
        GOOD.replace("\"schema\":1,", ""),
    );
    let r = read(&text);
    assert_eq!(r.records.len(), 2);
    let got: Vec<(u64, &str)> = r.bad.iter().map(|b| (b.line, b.error.as_str())).collect();
    assert_eq!(got.len(), 7, "{got:?}");
    assert_eq!(got[0].0, 2);
    assert!(got[0].1.starts_with("not a JSON object"), "{}", got[0].1);
    assert_eq!(got[1], (3, "empty line"));
    assert_eq!(got[2].0, 4);
    assert!(
        got[2].1.contains("unknown variant `teleport`"),
        "{}",
        got[2].1
    );
    assert_eq!(
        got[3],
        (5, "unsupported schema version 2 (this build reads 1)")
    );
    assert_eq!(got[4], (6, "missing field `schema`"));
    assert_eq!(got[5].0, 7);
    assert_eq!(got[6].0, 9);
    assert!(got[6].1.starts_with("truncated: 11 bytes"), "{}", got[6].1);
    assert_eq!(r.bad[0].to_string().split(':').next(), Some("mem.jsonl"));
}

#[test]
fn invalid_utf8_is_a_bad_line_not_an_error() {
    let mut out = Reading::default();
    let bytes: &[u8] = b"\xff\xfe\n";
    read_lines(bytes, Path::new("x"), &mut out).unwrap();
    assert_eq!(out.bad.len(), 1);
    assert!(out.bad[0].error.starts_with("not UTF-8"));
}

#[test]
fn rotated_paths_lists_oldest_first_and_ignores_look_alikes() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("a.jsonl");
    for name in [
        "a.jsonl.1",
        "a.jsonl.10",
        "a.jsonl.2",
        "a.jsonl.x",
        "a.jsonl.01",
    ] {
        std::fs::write(dir.path().join(name), "").unwrap();
    }
    let names: Vec<String> = rotated_paths(&live)
        .unwrap()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["a.jsonl.10", "a.jsonl.2", "a.jsonl.1", "a.jsonl"]);
}

#[test]
fn log_order_puts_rotated_files_oldest_first_and_drops_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for name in [
        "a.jsonl",
        "a.jsonl.1",
        "a.jsonl.2",
        "a.jsonl.10",
        "b.jsonl",
        "b.jsonl.1",
    ] {
        std::fs::write(d.join(name), "").unwrap();
    }
    // As a shell expands `*.jsonl*`, with repeats and another spelling of one file.
    let given: Vec<PathBuf> = [
        "b.jsonl",
        "a.jsonl",
        "a.jsonl.1",
        "a.jsonl.10",
        "b.jsonl.1",
        "a.jsonl.2",
        "a.jsonl",
    ]
    .iter()
    .map(|n| d.join(n))
    .chain([d.join(".").join("a.jsonl.2")])
    .collect();
    let names: Vec<String> = log_order(&given)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "a.jsonl.10",
            "a.jsonl.2",
            "a.jsonl.1",
            "a.jsonl",
            "b.jsonl.1",
            "b.jsonl"
        ]
    );
}

#[test]
fn only_positive_indexes_without_leading_zeros_are_rotations() {
    for (name, base, n) in [
        ("a.jsonl.3", "a.jsonl", 3),
        ("a.jsonl", "a.jsonl", 0),
        ("a.jsonl.03", "a.jsonl.03", 0),
        ("a.jsonl.0", "a.jsonl.0", 0),
        ("a.jsonl.+1", "a.jsonl.+1", 0),
        ("a.jsonl.", "a.jsonl.", 0),
        (".1", ".1", 0),
    ] {
        let (b, i) = split_rotation(Path::new(name));
        assert_eq!((b.to_str().unwrap(), i), (base, n), "{name}");
    }
}

#[test]
fn an_overlong_line_is_a_bad_line_not_held_whole_and_reading_goes_on() {
    assert!(GOOD.len() < 200);
    let text = format!(
        "{}\n{GOOD}\n{}\n{}",
        "x".repeat(300),
        "y".repeat(200),
        "z".repeat(500)
    );
    let mut out = Reading::default();
    let mut reader = io::BufReader::with_capacity(16, text.as_bytes());
    read_lines_within(&mut reader, Path::new("big"), &mut out, 200, 10).unwrap();
    assert_eq!(out.records.len(), 1);
    let got: Vec<(u64, &str)> = out.bad.iter().map(|b| (b.line, b.error.as_str())).collect();
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[0].0, 1);
    assert!(
        got[0]
            .1
            .starts_with("a line of 300 bytes, longer than the 200"),
        "{}",
        got[0].1
    );
    // Exactly the limit is not too long (it is just not JSON).
    assert_eq!(got[1].0, 3);
    assert!(got[1].1.starts_with("not a JSON object"), "{}", got[1].1);
    assert_eq!(got[2].0, 4);
    assert!(got[2].1.starts_with("a line of 500 bytes"), "{}", got[2].1);
}

#[test]
fn bad_lines_past_the_cap_are_counted_not_listed_and_messages_are_short() {
    let huge_schema = format!("{{\"schema\":\"{}\"}}", "s".repeat(10_000));
    let text = format!("{huge_schema}\n{}", "\n".repeat(20));
    let mut out = Reading::default();
    read_lines_within(text.as_bytes(), Path::new("f"), &mut out, 1 << 20, 5).unwrap();
    assert_eq!(out.bad.len(), 5);
    assert_eq!(out.bad_unlisted, 16);
    assert_eq!(out.bad_total(), 21);
    assert!(
        out.bad[0].error.chars().count() <= MAX_ERROR_CHARS + 10,
        "{}",
        out.bad[0]
    );
    assert!(out.bad[0].error.ends_with("… (cut)"), "{}", out.bad[0]);
    // The cap is per file.
    read_lines_within("\n\n".as_bytes(), Path::new("g"), &mut out, 1 << 20, 5).unwrap();
    assert_eq!((out.bad.len(), out.bad_unlisted), (7, 16));
}
