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

// ---- circles inside a module ----
//
// The map above orders the top-level modules; inside one, the files must not import each
// other in a circle either (the issue of config's nine-file circle). Rules, stated here once:
//
// - A file is a module path: `src/planner.rs` is `planner`, `src/planner/composite/decisions.rs`
//   is `planner::composite::decisions`.
// - A reference is a path starting `crate::`, `super::` or `self::` (grouped `use` items
//   included), resolved from the file's module to the longest module path that is a file.
// - An edge runs from a file to the file it names, except to itself and to its own
//   descendants: a parent declares its children and may re-export them. Edges to an
//   ancestor, a sibling or a cousin count.
// - Test files (`tests.rs`, anything under a `tests/` folder) and `#[cfg(test)]` blocks are
//   left out: test code imports its module by nature.

/// The module path of a file under `src/`, e.g. `["planner", "composite"]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_str().unwrap().to_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Whether a file holds test code only.
fn is_test_file(path: &[String]) -> bool {
    path.iter().any(|p| p == "tests")
}

/// `code` with every `#[cfg(test)]` item blanked (newlines and byte offsets kept).
fn strip_cfg_test(code: &str) -> String {
    let mut out = code.to_owned();
    let mut from = 0;
    while let Some(found) = out[from..].find("#[cfg(test)]") {
        let at = from + found;
        let Some(open) = out[at..].find(['{', ';']).map(|n| at + n) else {
            break;
        };
        let mut end = open + 1;
        if out.as_bytes()[open] == b'{' {
            let mut depth = 0usize;
            for (k, c) in out[open..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + k + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
        }
        // One space per byte, so every later offset stays where it was.
        let blanked: String = out[at..end]
            .chars()
            .map(|c| {
                if c == '\n' {
                    "\n".to_owned()
                } else {
                    " ".repeat(c.len_utf8())
                }
            })
            .collect();
        out.replace_range(at..end, &blanked);
        from = end;
    }
    out
}

/// The paths `code` names from `crate::`, `super::` or `self::`, each as its segments
/// (`super`, `self` and `crate` kept), with byte offsets. A grouped `use` gives one path per
/// item.
fn relative_paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .any(|s| b[i..].starts_with(s.as_bytes()));
        let after_path = i > 0 && (is_ident_byte(b[i - 1]) || b[i - 1] == b'$' || b[i - 1] == b':');
        if !starts || after_path {
            i += 1;
            continue;
        }
        let end = path_end(code, i);
        expand(&code[i..end], Vec::new(), &mut |p| out.push((i, p)));
        i = end.max(i + 1);
    }
    out
}

/// Where the path starting at `i` ends: after its last segment or its closing brace.
fn path_end(code: &str, i: usize) -> usize {
    let b = code.as_bytes();
    let mut j = i;
    loop {
        while j < b.len() && is_ident_byte(b[j]) {
            j += 1;
        }
        if code[j..].starts_with("::") {
            j += 2;
            let rest = code[j..].trim_start();
            j = code.len() - rest.len();
            if rest.starts_with('{') {
                let mut depth = 0usize;
                for (k, c) in rest.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                return j + k + 1;
                            }
                        }
                        _ => {}
                    }
                }
                return code.len();
            }
        } else {
            return j;
        }
    }
}

/// Calls `each` with every path `text` (one path, possibly ending in a `{…}` group) spells,
/// prefixed by `prefix`.
fn expand(text: &str, prefix: Vec<String>, each: &mut dyn FnMut(Vec<String>)) {
    let text = text.trim();
    let (head, group) = match text.find('{') {
        Some(open) => (
            &text[..open],
            Some(&text[open + 1..text.rfind('}').unwrap_or(text.len())]),
        ),
        None => (text, None),
    };
    let mut path = prefix;
    path.extend(
        head.split("::")
            .map(|s| ident(s).to_owned())
            .filter(|s| !s.is_empty()),
    );
    let Some(group) = group else {
        each(path);
        return;
    };
    let mut depth = 0usize;
    let mut start = 0;
    for (k, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand(&group[start..k], path.clone(), each);
                start = k + 1;
            }
            _ => {}
        }
    }
    if !group[start..].trim().is_empty() {
        expand(&group[start..], path, each);
    }
}

/// `path` resolved from the module `from` to absolute segments (no `crate`), or `None` when it
/// climbs above the crate.
fn absolute(from: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut at: Vec<String> = from.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            at.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().is_some_and(|s| s == "super") {
        at.pop()?;
        rest = &rest[1..];
    }
    at.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(at)
}

/// Edges between files of one top-level module: (from, to) → the first file and line.
fn file_edges(src: &Path) -> BTreeMap<(String, String), String> {
    let files: Vec<(PathBuf, Vec<String>)> = rust_files(src)
        .into_iter()
        .map(|f| {
            let m = module_path(src, &f);
            (f, m)
        })
        .filter(|(_, m)| !m.is_empty() && m[0] != "lib" && m[0] != "main" && !is_test_file(m))
        .collect();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(_, m)| m.clone()).collect();
    let mut edges = BTreeMap::new();
    for (file, from) in &files {
        let text = fs::read_to_string(file).unwrap();
        let code = strip_cfg_test(&strip_comments(&text));
        for (at, path) in relative_paths(&code) {
            let Some(abs) = absolute(from, &path) else {
                continue;
            };
            let Some(to) = (1..=abs.len())
                .rev()
                .map(|n| abs[..n].to_vec())
                .find(|p| modules.contains(p))
            else {
                continue;
            };
            // Other top-level modules are the map's business; a file's own descendants are
            // its children.
            if to[0] != from[0] || to.starts_with(from) || is_test_file(&to) {
                continue;
            }
            let line = code[..at].matches('\n').count() + 1;
            edges
                .entry((from.join("::"), to.join("::")))
                .or_insert_with(|| {
                    format!(
                        "{}:{line}",
                        file.strip_prefix(src.parent().unwrap()).unwrap().display()
                    )
                });
        }
    }
    edges
}

/// The circles of `edges`: strongly connected sets of two or more files (Tarjan).
fn circles(edges: &BTreeMap<(String, String), String>) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
        next.entry(to).or_default();
    }
    struct Tarjan<'a> {
        next: &'a BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, (usize, usize)>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            self.on_stack.insert(v);
            for &w in &self.next[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.index[w].1.min(self.index[v].1);
                    self.index.get_mut(v).unwrap().1 = low;
                } else if self.on_stack.contains(w) {
                    let low = self.index[w].0.min(self.index[v].1);
                    self.index.get_mut(v).unwrap().1 = low;
                }
            }
            if self.index[v].0 == self.index[v].1 {
                let mut set = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    set.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if set.len() > 1 {
                    set.sort();
                    self.found.push(set);
                }
            }
        }
    }
    let mut t = Tarjan {
        next: &next,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for &v in next.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.found
}

#[test]
fn no_files_of_a_module_import_each_other_in_a_circle() {
    let edges = file_edges(&src_dir());
    let found = circles(&edges);
    let report: Vec<String> = found
        .iter()
        .map(|set| {
            let inside: Vec<String> = edges
                .iter()
                .filter(|((a, b), _)| set.contains(a) && set.contains(b))
                .map(|((a, b), at)| format!("    {a} {ARROW} {b} ({at})"))
                .collect();
            format!(
                "  {} files: {}\n{}",
                set.len(),
                set.join(", "),
                inside.join("\n")
            )
        })
        .collect();
    assert!(
        found.is_empty(),
        "{} import circle(s) between files of one module (move the shared definition to \
         the file the others import, or to the parent):\n{}",
        found.len(),
        report.join("\n")
    );
}

#[test]
fn the_circle_finder_resolves_relative_paths_and_finds_a_circle() {
    let code = strip_cfg_test(
        "use super::{a::X, b::{self, Y}};\n\
         use crate::top::c::Z;\n\
         let v = super::super::d::f();\n\
         #[cfg(test)]\nmod tests { use super::e::W; }\n",
    );
    let from: Vec<String> = ["top", "mid", "me"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let resolved: Vec<String> = relative_paths(&code)
        .into_iter()
        .filter_map(|(_, p)| absolute(&from, &p))
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        resolved,
        [
            "top::mid::a::X",
            "top::mid::b",
            "top::mid::b::Y",
            "top::c::Z",
            "top::d::f"
        ]
    );
    let edge = |a: &str, b: &str| ((a.to_owned(), b.to_owned()), String::new());
    let edges: BTreeMap<_, _> = [
        edge("m::a", "m::b"),
        edge("m::b", "m::c"),
        edge("m::c", "m::a"),
        edge("m::c", "m::d"),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        circles(&edges),
        [vec![
            "m::a".to_owned(),
            "m::b".to_owned(),
            "m::c".to_owned()
        ]]
    );
}
