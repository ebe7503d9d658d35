//! Every relative link in the repository's Markdown files (the README, `docs/`, CONTRIBUTING,
//! the CHANGELOG and the others git tracks) points at a file or folder that exists, and every
//! `#anchor` at a heading of the page it names, as GitHub renders anchors. A renamed heading
//! or a moved page fails here, naming the file, the line and the link.

#![expect(
    clippy::unwrap_used,
    reason = "a test aborts loudly on a tree it cannot read"
)]

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files under the repository, outside build output and hidden folders.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The anchor GitHub gives a heading: lower case, letters, digits, `-` and `_` kept, spaces
/// made `-`, everything else dropped; a repeated anchor gets `-1`, `-2`, ...
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// Every anchor of a page's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = anchor(&line[hashes..]);
        let mut name = base.clone();
        let mut n = 0;
        while seen.contains(&name) {
            n += 1;
            name = format!("{base}-{n}");
        }
        seen.insert(name);
    }
    seen
}

/// `line` without its inline code spans.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of the inline links `[text](target)` of `line`.
fn links(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.to_owned());
        rest = &after[end..];
    }
    out
}

/// `path` with `.` and `..` resolved without touching the disk.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// What is wrong with `target` in `file`, if anything.
fn check(file: &Path, target: &str) -> Option<String> {
    let external = ["http://", "https://", "mailto:"];
    if target.is_empty() || external.iter().any(|p| target.starts_with(p)) {
        return None;
    }
    let (path, fragment) = match target.split_once('#') {
        Some((p, f)) => (p, Some(f)),
        None => (target, None),
    };
    let resolved = if path.is_empty() {
        file.to_path_buf()
    } else {
        normal(&file.parent().unwrap().join(path))
    };
    if !resolved.starts_with(root()) {
        return Some("points outside the repository".to_owned());
    }
    if !resolved.exists() {
        return Some(format!("{} does not exist", resolved.display()));
    }
    let fragment = fragment?;
    if resolved.extension().is_none_or(|e| e != "md") {
        // Line anchors of source files (`#L12`) are GitHub's, not checked.
        return None;
    }
    let page = std::fs::read_to_string(&resolved).unwrap();
    (!anchors(&page).contains(fragment)).then(|| {
        format!(
            "{} has no heading with the anchor #{fragment}",
            resolved.display()
        )
    })
}

#[test]
fn every_relative_link_and_anchor_in_the_markdown_resolves() {
    let mut files = Vec::new();
    markdown_files(&root(), &mut files);
    files.sort();
    assert!(files.len() > 20, "found only {files:?}");
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in prose(&text) {
            for target in links(line) {
                if let Some(why) = check(file, &target) {
                    let rel = file.strip_prefix(root()).unwrap();
                    broken.push(format!("{}:{n}: ({target}): {why}", rel.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(
        anchor(" Capacity planning: `plan --simulate`"),
        "capacity-planning-plan---simulate"
    );
    assert_eq!(
        anchor("Composites: one decision across node groups"),
        "composites-one-decision-across-node-groups"
    );
    let page = "# A\n## Limits\n```\n## Not a heading\n```\n### Limits\n";
    let got = anchors(page);
    assert!(
        got.contains("limits") && got.contains("limits-1"),
        "{got:?}"
    );
    assert!(!got.contains("not-a-heading"), "{got:?}");
    assert_eq!(
        links("see [x](a.md#b) and `[y](c.md)` and [z](https://e.org)"),
        ["a.md#b", "https://e.org"]
    );
}

#[test]
fn a_broken_link_and_a_missing_anchor_are_found() {
    let readme = root().join("README.md");
    assert!(check(&readme, "docs/no-such-page.md").is_some());
    assert!(check(&readme, "docs/limits.md#no-such-heading").is_some());
    assert!(check(&readme, "docs/limits.md").is_none());
    assert!(check(&readme, "#two-commands").is_none());
    assert!(check(&readme, "../../etc/passwd").is_some());
}

/// The rows of `tests/e2e/versions.env`: (minor, Kubernetes version, CA version).
fn e2e_rows() -> Vec<(String, String, String)> {
    let env = std::fs::read_to_string(root().join("tests/e2e/versions.env")).unwrap();
    env.lines()
        .filter(|l| l.starts_with("K8S_1_"))
        .filter_map(|l| {
            let row = l.split_once("=\"")?.1.trim_end_matches('"');
            let cols: Vec<&str> = row.split_whitespace().collect();
            Some((cols[0].to_owned(), cols[1].to_owned(), cols[5].to_owned()))
        })
        .collect()
}

/// The README's compatibility table names, for each Kubernetes minor, the Kubernetes and CA
/// versions its e2e row runs (`tests/e2e/versions.env`), so moving a row to a new patch
/// without the table, or the reverse, fails.
#[test]
fn the_compatibility_table_names_the_versions_the_e2e_rows_run() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let rows = e2e_rows();
    assert!(rows.len() >= 4, "{rows:?}");
    for (minor, k8s, ca) in rows {
        let line = readme
            .lines()
            .find(|l| {
                l.strip_prefix(&format!("| {minor} "))
                    .is_some_and(|rest| rest.starts_with('|') || rest.starts_with('('))
            })
            .unwrap_or_else(|| panic!("README.md's compatibility table has no row {minor}"));
        let bare = k8s.trim_start_matches('v');
        assert!(
            line.contains(&format!("k8s {bare},")) || line.contains(&format!("k8s {k8s},")),
            "README.md's row {minor} does not name k8s {bare} (tests/e2e/versions.env): {line}"
        );
        assert!(
            line.contains(&format!("CA {ca}")),
            "README.md's row {minor} does not name CA {ca}: {line}"
        );
    }
}
