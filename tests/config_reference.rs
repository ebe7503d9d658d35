//! `docs/configuration.md` documents exactly the configuration the code reads: every field the
//! validator reads from `provider.yaml` and from a node-group file (as
//! `gangscaler::config::reference` finds them) has a row in the page's table for that file,
//! every row names such a field, and its type column agrees with the kind of value read; every
//! `GANGSCALER_<FLAG>` variable of the command line has a row, and every row is one.
//!
//! A table row is a line starting with "| `path` |" (one path per row) under the table's
//! heading; each problem is reported with the path, the file and the table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use clap::CommandFactory;
use gangscaler::config::reference::{self, Field, Kind};

const PAGE: &str = "docs/configuration.md";
const PROVIDER_TABLE: &str = "### provider.yaml";
const NODE_GROUP_TABLE: &str = "### Node-group file";
const ENV_SECTION: &str = "## Environment variables";

fn page() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(PAGE);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The lines under `heading`, up to the next heading of the same or a higher level.
fn section<'p>(page: &'p str, heading: &str) -> Vec<&'p str> {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let mut lines = page.lines().skip_while(|l| l.trim_end() != heading);
    assert!(lines.next().is_some(), "{PAGE} has no heading {heading:?}");
    lines
        .take_while(|l| {
            let hashes = l.chars().take_while(|c| *c == '#').count();
            !(hashes > 0 && hashes <= level && l[hashes..].starts_with(' '))
        })
        .collect()
}

/// The rows of the tables in `lines`: the first cell's path and the second cell (the type).
fn rows(lines: &[&str]) -> Vec<(String, String)> {
    lines
        .iter()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix("| `")?;
            let (name, rest) = rest.split_once("` |")?;
            let second = rest.split(" |").next().unwrap_or_default().trim();
            Some((name.to_owned(), second.to_owned()))
        })
        .collect()
}

/// The word a type cell starts with for each kind of value; `None`: any word but these
/// (strings), or anything (a section listed as a field, like `defaults.backend`).
fn type_word(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Bool => Some("bool"),
        Kind::Int => Some("int"),
        Kind::Number => Some("number"),
        Kind::Quantity => Some("quantity"),
        Kind::Duration => Some("duration"),
        Kind::List => Some("list"),
        Kind::Map => Some("map"),
        Kind::String | Kind::Section => None,
    }
}

const TYPE_WORDS: [&str; 7] = [
    "bool", "int", "number", "quantity", "duration", "list", "map",
];

/// Every difference between the fields the code reads and the table's rows.
fn compare(table: &str, fields: &[Field], page: &str) -> Vec<String> {
    let documented = rows(&section(page, table));
    let mut problems = Vec::new();
    let mut by_path: BTreeMap<&str, &str> = BTreeMap::new();
    for (path, ty) in &documented {
        if by_path.insert(path, ty).is_some() {
            problems.push(format!(
                "{PAGE}, table {table:?}: `{path}` has more than one row"
            ));
        }
    }
    let read: BTreeMap<&str, Kind> = fields.iter().map(|f| (f.path.as_str(), f.kind)).collect();
    for (path, kind) in &read {
        let Some(ty) = by_path.get(path) else {
            problems.push(format!(
                "`{path}` ({kind}) is read by the validator (src/config/validate) but not documented in {PAGE}, table {table:?}: add a row \"| `{path}` | ...\""
            ));
            continue;
        };
        let first = ty
            .trim_start_matches('`')
            .split([' ', ',', '`'])
            .next()
            .unwrap_or_default();
        match type_word(*kind) {
            Some(word) if first != word => problems.push(format!(
                "{PAGE}, table {table:?}: `{path}` is read as a {kind}, so its type should start with {word:?}, not {ty:?}"
            )),
            None if *kind == Kind::String && TYPE_WORDS.contains(&first) => problems.push(format!(
                "{PAGE}, table {table:?}: `{path}` is read as a string, but its type {ty:?} says {first}"
            )),
            _ => {}
        }
    }
    for path in by_path.keys().filter(|p| !read.contains_key(*p)) {
        problems.push(format!(
            "`{path}` is documented in {PAGE}, table {table:?}, but the validator (src/config/validate) does not read it: remove the row or read the field"
        ));
    }
    problems
}

#[test]
fn provider_yaml_fields_are_documented_and_read() {
    let problems = compare(PROVIDER_TABLE, &reference::provider_fields(), &page());
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn node_group_fields_are_documented_and_read() {
    let problems = compare(NODE_GROUP_TABLE, &reference::node_group_fields(), &page());
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// The `GANGSCALER_<FLAG>` variables clap reads, in any command.
fn flag_variables(command: &clap::Command, out: &mut BTreeSet<String>) {
    for arg in command.get_arguments() {
        if let Some(name) = arg.get_env().and_then(|n| n.to_str()) {
            out.insert(name.to_owned());
        }
    }
    for sub in command.get_subcommands() {
        flag_variables(sub, out);
    }
}

#[test]
fn flag_variables_are_documented_and_read() {
    let page = page();
    let documented: BTreeSet<String> = rows(&section(&page, ENV_SECTION))
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let mut read = BTreeSet::new();
    flag_variables(&gangscaler::cli::Cli::command(), &mut read);
    assert!(
        !read.is_empty(),
        "no flag reads a variable: is clap's `env` feature off?"
    );
    let mut problems = Vec::new();
    for name in read.difference(&documented) {
        problems.push(format!(
            "`{name}` is read by a flag (src/cli.rs) but not documented in {PAGE}, section {ENV_SECTION:?}"
        ));
    }
    for name in documented.difference(&read) {
        problems.push(format!(
            "`{name}` is documented in {PAGE}, section {ENV_SECTION:?}, but no flag reads it (src/cli.rs)"
        ));
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}
