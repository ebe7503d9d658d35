//! `gangscaler convert` as a user runs it: files and standard input, the report on standard
//! error, `--strict`, and refusals that name the file, document and value.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests abort loudly"
)]

use std::io::Write;
use std::process::{Command, Stdio};

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn convert(args: &[&str], stdin: Option<&str>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gangscaler"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("convert")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running gangscaler convert");
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

const V135: &str = "tests/fixtures/convert/input/1.35-jobset.yaml";
const V137: &str = "tests/fixtures/convert/input/1.37-beta.yaml";
const COMPOSITE: &str = "tests/fixtures/convert/input/1.37-composite.yaml";

#[test]
fn a_minor_is_a_target_and_1_38_moves_composites_to_v1beta1() {
    let run = convert(&["--to", "1.38", "--strict", "-f", COMPOSITE], None);
    assert!(run.ok, "{}", run.stderr);
    let golden =
        std::fs::read_to_string("tests/fixtures/convert/golden/1.37-composite.to-1.38.yaml")
            .unwrap();
    assert_eq!(run.stdout, golden.split("# report\n").next().unwrap());
    assert!(!run.stdout.contains("v1alpha3"), "{}", run.stdout);
    assert!(
        run.stderr.contains(&format!(
            "{COMPOSITE}: document 2: CompositePodGroup serving/infer-replica-0: note: apiVersion scheduling.k8s.io/v1alpha3 becomes scheduling.k8s.io/v1beta1"
        )),
        "{}",
        run.stderr
    );
    // Below 1.37 there is no CompositePodGroup: nothing is written, and the reason is named.
    let run = convert(&["--to", "v1alpha2", "-f", COMPOSITE], None);
    assert!(!run.ok);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.contains("PodGroup serving/infer-replica-0-leader: lossy: spec.parentCompositePodGroupName \"infer-replica-0\" dropped")
            && run.stderr.contains("cannot be converted to 1.36 (v1alpha2)"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_file_converts_to_the_golden_output_with_the_report_on_stderr() {
    let run = convert(&["--to", "v1alpha2", "-f", V135], None);
    assert!(run.ok, "{}", run.stderr);
    let golden =
        std::fs::read_to_string("tests/fixtures/convert/golden/1.35-jobset.to-1.36.yaml").unwrap();
    let golden_docs = golden.split("# report\n").next().unwrap();
    assert_eq!(run.stdout, golden_docs);
    assert!(
        run.stderr.contains(&format!(
            "{V135}: document 2: Workload ml/train: note: created PodGroup train-workers-0"
        )),
        "{}",
        run.stderr
    );
}

#[test]
fn standard_input_works_and_strict_refuses_a_lossy_conversion_writing_nothing() {
    let text = std::fs::read_to_string(V137).unwrap();
    let lenient = convert(&["--to", "v1alpha1"], Some(&text));
    assert!(lenient.ok, "{}", lenient.stderr);
    assert!(
        lenient.stdout.contains("podGroupReplicaKey: a"),
        "{}",
        lenient.stdout
    );
    assert!(
        lenient
            .stderr
            .contains("-: document 3: PodGroup research/rl-actors-b: lossy: spec.schedulingPolicy"),
        "{}",
        lenient.stderr
    );

    let strict = convert(&["--to", "v1alpha1", "--strict", "-f", "-"], Some(&text));
    assert!(!strict.ok);
    assert_eq!(strict.stdout, "");
    assert!(strict.stderr.contains("--strict"), "{}", strict.stderr);
    assert!(strict.stderr.contains("would lose 4"), "{}", strict.stderr);

    // Converting to its own version loses nothing, so --strict passes.
    let same = convert(&["--to", "v1beta1", "--strict", "-f", V137], None);
    assert!(same.ok, "{}", same.stderr);
    assert_eq!(
        same.stdout,
        std::fs::read_to_string("tests/fixtures/convert/golden/1.37-beta.to-1.37.yaml")
            .unwrap()
            .split("# report\n")
            .next()
            .unwrap()
    );
}

#[test]
fn an_object_that_cannot_be_converted_writes_nothing_and_names_the_reason() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\nspec:\n  schedulingGroup: {podGroupName: elsewhere}\n";
    let run = convert(&["--to", "v1alpha1"], Some(text));
    assert!(!run.ok);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr
            .contains("Pod ml/p: error: spec.schedulingGroup.podGroupName \"elsewhere\""),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("1 object(s) cannot be converted to 1.35 (v1alpha1); nothing written"),
        "{}",
        run.stderr
    );
}

#[test]
fn bad_arguments_and_inputs_are_refused_naming_them() {
    let run = convert(&["--to", "v2"], Some(""));
    assert!(!run.ok);
    assert!(
        run.stderr.contains("\"v2\"")
            && run.stderr.contains("1.35, 1.36, 1.37, 1.38")
            && run.stderr.contains("v1alpha1, v1alpha2 or v1beta1"),
        "{}",
        run.stderr
    );

    let run = convert(
        &[
            "--to",
            "v1beta1",
            "-f",
            "tests/fixtures/convert/missing.yaml",
        ],
        None,
    );
    assert!(!run.ok);
    assert!(
        run.stderr.contains("tests/fixtures/convert/missing.yaml"),
        "{}",
        run.stderr
    );

    let run = convert(&["--to", "v1beta1"], Some("a: 1\n---\nb: [unclosed\n"));
    assert!(!run.ok);
    assert!(run.stderr.contains("-: document 2"), "{}", run.stderr);
}
