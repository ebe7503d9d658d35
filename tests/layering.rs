//! The module map in `src/lib.rs` is the rule, and this test holds the code to it.
//!
//! The `text` block of `src/lib.rs`'s doc comment lists, for each top-level module, the
//! top-level modules it may reference (`use crate::x`, `crate::x::…` in a path, or an item
//! of a grouped `use crate::{x, y::z}`). This test reads that block, reads every file under
//! `src/`, and fails on:
//!
//! - an edge in the code that the map does not list (a file of `planner` naming
//!   `crate::engine`), named by file, line and edge;
//! - an edge the map lists that no code uses (the map went stale);
//! - a module declared in `src/lib.rs` that the map does not mention, or a name in the map
//!   that is no module.
//!
//! Rules, stated here once:
//!
//! - A file belongs to the first component of its path under `src/`: `src/foo.rs` and
//!   everything under `src/foo/` are `foo`. `src/main.rs` is `main`, the binary, whose
//!   references are `gangscaler::x`. `src/lib.rs` (the module declarations) is not checked.
//! - Comments are not code: a doc link such as ``[`Outcome`](crate::audit::Outcome)`` is no
//!   dependency.
//! - Test code inside `src/` is held to the same map as the rest of its module, with one
//!   exception: any module may reference `testing`. `testing` exists only under
//!   `#[cfg(test)]` or the `test-util` feature, so the default build, which has neither,
//!   refuses a non-test reference to it; the compiler already confines those edges to test
//!   code, and the map need not list them.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test aborts loudly on a source tree it cannot read"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The module every module's test code may reference.
const TEST_ONLY: &str = "testing";

/// The arrow the map uses between a module and what it references.
const ARROW: &str = "─►";

/// One reference in the code from a file of one top-level module to another.
#[derive(Debug)]
struct Use {
    file: PathBuf,
    line: usize,
    from: String,
    to: String,
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap_or_else(|e| panic!("reading {}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The top-level module a file under `src/` belongs to (`main` for the binary); `None` for
/// `lib.rs`.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" => None,
        f => Some(f.strip_suffix(".rs").unwrap_or(f).to_owned()),
    }
}

/// `text` with every comment blanked out (newlines kept, so offsets keep their lines).
/// Strings and char literals are skipped so that `"http://…"` is no comment.
fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |s: &str, out: &mut String| {
        out.extend(s.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
    };
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            let end = text[i..].find('\n').map_or(text.len(), |n| i + n);
            blank(&text[i..end], &mut out);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&text[i..j], &mut out);
            i = j;
        } else if b[i] == b'"' {
            // A string: copy it through, escapes included, up to its closing quote.
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            out.push_str(&text[i..end]);
            i = end;
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            // A one-byte char literal such as '"' (lifetimes are left alone).
            out.push_str(&text[i..i + 3]);
            i += 3;
        } else {
            let len = text[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[i..i + len]);
            i += len;
        }
    }
    out
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The identifier at the start of `s`, after any whitespace.
fn ident(s: &str) -> &str {
    let s = s.trim_start();
    let end = s.bytes().position(|c| !is_ident_byte(c)).unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules `code` references through `root` (`crate::` inside the library,
/// `gangscaler::` in the binary), with their byte offsets.
fn crate_refs(code: &str, root: &str) -> Vec<(usize, String)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    for (at, _) in code.match_indices(root) {
        // `$crate::` (macros) and `foo_crate::` are not this crate's paths.
        if at > 0 && (is_ident_byte(b[at - 1]) || b[at - 1] == b'$') {
            continue;
        }
        let rest = code[at + root.len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c, d::{e, f}}`: the first segment of each top-level item.
            let mut depth = 0usize;
            let mut item_start = true;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        item_start = false;
                        let name = ident(&group[k..]);
                        if !name.is_empty() && name != "self" {
                            out.push((at, name.to_owned()));
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.push((at, name.to_owned()));
            }
        }
    }
    out
}

/// The module map: each module to the modules it may reference. Parsed from the `text`
/// block of `src/lib.rs`'s doc comment.
fn parse_map(lib_rs: &str) -> BTreeMap<String, BTreeSet<String>> {
    let doc: Vec<&str> = lib_rs
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let start = doc
        .iter()
        .position(|l| l.trim() == "```text")
        .expect("src/lib.rs's doc comment has a ```text block with the module map");
    let end = start
        + 1
        + doc[start + 1..]
            .iter()
            .position(|l| l.trim() == "```")
            .expect("the ```text block in src/lib.rs is closed");
    let names = |s: &str| -> Vec<String> {
        // Parenthesized remarks, such as `(never engine)`, are not names.
        let mut plain = String::new();
        let mut depth = 0usize;
        for c in s.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                c if depth == 0 => plain.push(c),
                _ => {}
            }
        }
        plain
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current: Vec<String> = Vec::new();
    for line in &doc[start + 1..end] {
        if let Some((left, right)) = line.split_once(ARROW) {
            current = names(left);
            for from in &current {
                map.entry(from.clone()).or_default().extend(names(right));
            }
        } else if line.starts_with(char::is_whitespace) && !current.is_empty() {
            // The continuation of the previous line's list.
            for from in &current {
                map.entry(from.clone()).or_default().extend(names(line));
            }
        } else if let Some((left, right)) = line.split_once(':') {
            assert_eq!(
                right.trim(),
                "nothing of ours",
                "src/lib.rs's map: a line without {ARROW} must end `: nothing of ours`: {line:?}"
            );
            current.clear();
            for from in names(left) {
                map.entry(from).or_default();
            }
        } else if !line.trim().is_empty() {
            panic!("src/lib.rs's map: cannot read {line:?}");
        }
    }
    map
}

/// The top-level modules `src/lib.rs` declares: `mod x;`, `pub mod x;` and inline
/// `pub mod x {`, at the start of a line.
fn declared_modules(lib_rs: &str) -> BTreeSet<String> {
    lib_rs
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ").map(ident).map(str::to_owned)
        })
        .collect()
}

/// Every reference in `src/` from one top-level module to another.
fn uses(src: &Path) -> Vec<Use> {
    let mut out = Vec::new();
    for file in rust_files(src) {
        let Some(from) = module_of(src, &file) else {
            continue;
        };
        let text = fs::read_to_string(&file).unwrap();
        let code = strip_comments(&text);
        let root = if from == "main" {
            "gangscaler::"
        } else {
            "crate::"
        };
        for (at, to) in crate_refs(&code, root) {
            if to == from {
                continue;
            }
            let line = code[..at].matches('\n').count() + 1;
            out.push(Use {
                file: file
                    .strip_prefix(src.parent().unwrap())
                    .unwrap()
                    .to_path_buf(),
                line,
                from: from.clone(),
                to,
            });
        }
    }
    out
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_reference_between_modules_is_in_the_map_of_lib_rs() {
    let src = src_dir();
    let lib_rs = fs::read_to_string(src.join("lib.rs")).unwrap();
    let map = parse_map(&lib_rs);
    let mut wrong = Vec::new();
    for u in uses(&src) {
        if u.to == TEST_ONLY {
            continue;
        }
        if !map.get(&u.from).is_some_and(|to| to.contains(&u.to)) {
            wrong.push(format!(
                "{}:{}: {} {ARROW} {} is not in the module map of src/lib.rs",
                u.file.display(),
                u.line,
                u.from,
                u.to
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} reference(s) the module map does not allow (remove the import, or, if the \
         dependency is right, add it to the map in src/lib.rs's doc comment):\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn every_edge_of_the_map_is_used_by_the_code() {
    let src = src_dir();
    let lib_rs = fs::read_to_string(src.join("lib.rs")).unwrap();
    let map = parse_map(&lib_rs);
    let used: BTreeSet<(String, String)> = uses(&src).into_iter().map(|u| (u.from, u.to)).collect();
    let stale: Vec<String> = map
        .iter()
        .flat_map(|(from, tos)| tos.iter().map(move |to| (from, to)))
        .filter(|(from, to)| !used.contains(&((*from).clone(), (*to).clone())))
        .map(|(from, to)| format!("{from} {ARROW} {to}"))
        .collect();
    assert!(
        stale.is_empty(),
        "the module map of src/lib.rs lists edges no code uses (remove them):\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_map_names_every_module_and_only_modules() {
    let src = src_dir();
    let lib_rs = fs::read_to_string(src.join("lib.rs")).unwrap();
    let map = parse_map(&lib_rs);
    let declared = declared_modules(&lib_rs);
    let missing: Vec<&String> = declared.iter().filter(|m| !map.contains_key(*m)).collect();
    assert!(
        missing.is_empty(),
        "src/lib.rs declares modules its map does not list: {missing:?}"
    );
    let mentioned: BTreeSet<&String> = map.keys().chain(map.values().flatten()).collect();
    let unknown: Vec<&&String> = mentioned
        .iter()
        .filter(|m| m.as_str() != "main" && !declared.contains(**m))
        .collect();
    assert!(
        unknown.is_empty(),
        "src/lib.rs's map names modules that do not exist: {unknown:?}"
    );
}

#[test]
fn the_reader_finds_plain_grouped_and_nested_references_and_skips_comments() {
    let code = strip_comments(
        "use crate::alpha::X;\n\
         use crate::{beta, gamma::Y, delta::{Z, W}, self};\n\
         // use crate::commented;\n\
         /// [`T`](crate::doclink::T)\n\
         let s = \"http://host\"; let t = crate::epsilon::f();\n\
         macro_rules! m { () => { $crate::zeta } }\n",
    );
    let found: Vec<(usize, String)> = crate_refs(&code, "crate::");
    let names: Vec<&str> = found.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "gamma", "delta", "epsilon"]);
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    assert_eq!(line_of(found[4].0), 5);
}

#[test]
fn the_map_reader_reads_lists_continuations_remarks_and_leaves() {
    let lib = "//! ```text\n\
               //! a, b  ─► c, d,\n\
               //!          e      (never f)\n\
               //! c      ─► d\n\
               //! d, e: nothing of ours\n\
               //! ```\n";
    let map = parse_map(lib);
    let set = |v: &[&str]| {
        v.iter()
            .map(|s| (*s).to_owned())
            .collect::<BTreeSet<String>>()
    };
    assert_eq!(map["a"], set(&["c", "d", "e"]));
    assert_eq!(map["b"], set(&["c", "d", "e"]));
    assert_eq!(map["c"], set(&["d"]));
    assert!(map["d"].is_empty() && map["e"].is_empty());
}

#[test]
fn the_map_has_no_cycle() {
    let lib_rs = fs::read_to_string(src_dir().join("lib.rs")).unwrap();
    let map = parse_map(&lib_rs);
    // Depth-first from every module; a module met again on the current path closes a cycle.
    fn visit<'a>(
        m: &'a str,
        map: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if let Some(i) = path.iter().position(|p| *p == m) {
            panic!(
                "src/lib.rs's map has a cycle: {} {ARROW} {m}",
                path[i..].join(&format!(" {ARROW} "))
            );
        }
        if !done.insert(m) {
            return;
        }
        path.push(m);
        for to in map.get(m).into_iter().flatten() {
            visit(to, map, path, done);
        }
        path.pop();
    }
    let mut done = BTreeSet::new();
    for m in map.keys() {
        visit(m, &map, &mut Vec::new(), &mut done);
    }
}
