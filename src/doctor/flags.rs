//! Reading component command lines and values as the components do: flags files (one flag a
//! line, a YAML `args:` list, or one command line), `--feature-gates` maps, Go booleans and
//! durations, and Kubernetes versions (also from image tags). Pure.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

/// One `--name[=value]` of a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    /// The name without dashes, e.g. `expander`.
    pub name: String,
    /// The value; `None` for a bare `--name` (a boolean set to true).
    pub value: Option<String>,
    /// 1-based line of the text it was read from.
    pub line: usize,
}

/// Splits `text` into words as a shell would for a plain command line: whitespace separates,
/// single and double quotes group, a backslash escapes the next character (so a trailing `\`
/// joins lines). `#` starts a comment at the start of a word. Returns (word, line) pairs.
fn words(text: &str) -> Result<Vec<(String, usize)>, String> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut word: Option<(String, usize)> = None;
    let mut quote: Option<(char, usize)> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if let Some((q, _)) = quote {
            if c == q {
                quote = None;
            } else {
                if c == '\n' {
                    line += 1;
                }
                word.get_or_insert_with(|| (String::new(), line)).0.push(c);
            }
            continue;
        }
        match c {
            '\'' | '"' => {
                word.get_or_insert_with(|| (String::new(), line));
                quote = Some((c, line));
            }
            '\\' => match chars.next() {
                Some('\n') => line += 1,
                Some(next) => word
                    .get_or_insert_with(|| (String::new(), line))
                    .0
                    .push(next),
                None => {}
            },
            '#' if word.is_none() => {
                // A comment runs to the end of the line.
                for rest in chars.by_ref() {
                    if rest == '\n' {
                        line += 1;
                        break;
                    }
                }
            }
            c if c.is_whitespace() => {
                out.extend(word.take());
                if c == '\n' {
                    line += 1;
                }
            }
            c => word.get_or_insert_with(|| (String::new(), line)).0.push(c),
        }
    }
    if let Some((q, at)) = quote {
        return Err(format!("line {at}: unclosed {q} quote"));
    }
    out.extend(word);
    Ok(out)
}

/// Reads the flags of a command line written one flag a line, as a YAML list (`- --a=b`, or
/// `args: ["--a=b"]` in JSON-ish flow style), or as one command line with the program first.
/// `--name value` is read as a value when the next word is not a flag. Words before the first
/// flag (the program, `command:`) are skipped.
///
/// # Errors
/// An unclosed quote, a word after the flags that is neither a flag nor a value, or no flag
/// at all; with the line.
pub fn parse(text: &str) -> Result<Vec<Flag>, String> {
    from_words(words(text)?)
}

/// The flags of a container's `command` and `args` (one word each, numbered from 1 as lines).
///
/// # Errors
/// As [`parse`].
pub fn from_argv<'a>(argv: impl IntoIterator<Item = &'a str>) -> Result<Vec<Flag>, String> {
    from_words(
        argv.into_iter()
            .enumerate()
            .map(|(i, w)| (w.to_owned(), i + 1))
            .collect(),
    )
}

fn from_words(words: Vec<(String, usize)>) -> Result<Vec<Flag>, String> {
    let mut flags: Vec<Flag> = Vec::new();
    let mut expect_value = false;
    for (raw, line) in words {
        // YAML list items and flow sequences: `- --a=b`, `["--a=b", "--c"]`.
        let w = raw
            .trim_start_matches('[')
            .trim_end_matches([',', ']'])
            .trim();
        if w.is_empty() || w == "-" || w.ends_with(':') {
            continue;
        }
        if let Some(body) = flag_body(w) {
            let (name, value) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (body, None),
            };
            expect_value = value.is_none();
            flags.push(Flag {
                name: name.to_owned(),
                value,
                line,
            });
            continue;
        }
        match flags.last_mut() {
            None => {}
            Some(last) if expect_value => {
                last.value = Some(w.to_owned());
                expect_value = false;
            }
            Some(_) => {
                return Err(format!(
                    "line {line}: {w:?} is not a flag (expected --name=value, one a line, or one command line)"
                ));
            }
        }
    }
    if flags.is_empty() {
        return Err(
            "no flags found (expected --name=value, one a line, or one command line)".to_owned(),
        );
    }
    Ok(flags)
}

/// `name=value` of `--name=value` or `-name=value` (Go accepts one dash), if `w` is a flag.
fn flag_body(w: &str) -> Option<&str> {
    let body = w.strip_prefix("--").or_else(|| w.strip_prefix('-'))?;
    body.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        .then_some(body)
}

/// The value of the last `--name` (a repeated flag takes its last value, as Go's do).
pub fn last<'a>(flags: &'a [Flag], name: &str) -> Option<&'a Flag> {
    flags.iter().rev().find(|f| f.name == name)
}

/// Every `--feature-gates` merged in order (`A=true,B=false`; later settings win).
///
/// # Errors
/// A gate without `=true`/`=false`, naming it.
pub fn feature_gates(flags: &[Flag]) -> Result<BTreeMap<String, bool>, String> {
    let mut gates = BTreeMap::new();
    for f in flags.iter().filter(|f| f.name == "feature-gates") {
        let value = f.value.as_deref().unwrap_or("");
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (gate, on) = item
                .split_once('=')
                .and_then(|(g, v)| Some((g.trim(), parse_bool(v.trim())?)))
                .ok_or_else(|| {
                    format!(
                        "line {}: --feature-gates item {item:?} is not Gate=true or Gate=false",
                        f.line
                    )
                })?;
            gates.insert(gate.to_owned(), on);
        }
    }
    Ok(gates)
}

/// A boolean as Go's `strconv.ParseBool` reads it.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// A boolean flag's value: a bare `--name` is true.
pub fn flag_bool(flag: &Flag) -> Option<bool> {
    flag.value.as_deref().map_or(Some(true), parse_bool)
}

/// A duration as Go's `time.ParseDuration` reads it (`90s`, `1m30s`, `1.5h`, `0`).
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest.get(..digits)?.parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * seconds;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// A Go-style rendering of a duration (`30s`, `5m0s`, `1h0m0s`), as the components print it.
pub fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec}s"),
        (h, m, sec) => format!("{h}h{m}m{sec}s"),
    }
}

/// A Kubernetes (or Cluster Autoscaler) version: `1.36`, `v1.36.2`, `v1.37.0-gke.1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Version {
    /// Major, 1.
    pub major: u32,
    /// Minor, e.g. 36.
    pub minor: u32,
    /// Patch, when given.
    pub patch: Option<u32>,
    /// As written.
    pub text: String,
}

impl Version {
    /// Reads `[v]MAJOR.MINOR[.PATCH][-suffix|+suffix]`.
    pub fn parse(text: &str) -> Option<Self> {
        let t = text.trim();
        let core = t.strip_prefix('v').unwrap_or(t);
        let core = core.split(['-', '+']).next().unwrap_or(core);
        let mut parts = core.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = match parts.next() {
            Some(p) => Some(p.parse().ok()?),
            None => None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            major,
            minor,
            patch,
            text: t.to_owned(),
        })
    }

    /// From kube-apiserver's `/version`: `gitVersion` when it parses, else `major`/`minor`
    /// (a minor may read `36+` on some distributions).
    pub fn from_info(major: &str, minor: &str, git_version: &str) -> Option<Self> {
        Self::parse(git_version).or_else(|| {
            let digits = |s: &str| -> Option<u32> {
                s.trim_end_matches(|c: char| !c.is_ascii_digit())
                    .parse()
                    .ok()
            };
            Some(Self {
                major: digits(major)?,
                minor: digits(minor)?,
                patch: None,
                text: format!("{major}.{minor}"),
            })
        })
    }

    /// The version in an image reference's tag (`registry.k8s.io/kube-scheduler:v1.36.2`),
    /// if the tag is one.
    pub fn from_image(image: &str) -> Option<Self> {
        let image = image.split('@').next().unwrap_or(image);
        let last = image.rsplit('/').next().unwrap_or(image);
        let (_, tag) = last.split_once(':')?;
        Self::parse(tag)
    }

    /// `1.36`.
    pub fn minor_string(&self) -> String {
        format!("{}.{}", self.major, self.minor)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(flags: &[Flag]) -> Vec<(&str, Option<&str>)> {
        flags
            .iter()
            .map(|f| (f.name.as_str(), f.value.as_deref()))
            .collect()
    }

    #[test]
    fn a_flag_a_line_a_command_line_and_a_yaml_list_read_the_same() {
        let want = vec![
            ("cloud-provider", Some("externalgrpc")),
            ("expander", Some("priority,least-waste")),
            ("leader-elect", None),
        ];
        let one_a_line =
            "--cloud-provider=externalgrpc\n--expander=priority,least-waste\n# c\n--leader-elect\n";
        let command = "/cluster-autoscaler --cloud-provider externalgrpc \\\n  '--expander=priority,least-waste' --leader-elect";
        let yaml = "args:\n  - --cloud-provider=externalgrpc\n  - \"--expander=priority,least-waste\"\n  - --leader-elect\n";
        let flow = "[\"--cloud-provider=externalgrpc\", \"--expander=priority,least-waste\", \"--leader-elect\"]";
        for text in [one_a_line, command, yaml, flow] {
            assert_eq!(pairs(&parse(text).unwrap()), want, "{text}");
        }
        assert_eq!(parse(one_a_line).unwrap()[2].line, 4);
    }

    #[test]
    fn stray_words_unclosed_quotes_and_empty_files_are_errors_with_their_line() {
        let err = parse("--a=1\n--b=2 oops\n").unwrap_err();
        assert!(err.starts_with("line 2: \"oops\""), "{err}");
        let err = parse("--a=1\n--b='x\n").unwrap_err();
        assert!(err.contains("line 2: unclosed ' quote"), "{err}");
        assert!(
            parse("# nothing\n\n")
                .unwrap_err()
                .contains("no flags found")
        );
    }

    #[test]
    fn feature_gates_merge_in_order_and_bad_items_are_named() {
        let flags =
            parse("--feature-gates=GenericWorkload=true,GangScheduling=true\n--feature-gates=GangScheduling=false").unwrap();
        let gates = feature_gates(&flags).unwrap();
        assert_eq!(gates.get("GenericWorkload"), Some(&true));
        assert_eq!(gates.get("GangScheduling"), Some(&false));
        let err = feature_gates(&parse("--feature-gates=GenericWorkload").unwrap()).unwrap_err();
        assert!(err.contains("\"GenericWorkload\""), "{err}");
    }

    #[test]
    fn go_durations_and_booleans_read_as_go_reads_them() {
        let d = |s| parse_go_duration(s);
        assert_eq!(d("30s"), Some(Duration::from_secs(30)));
        assert_eq!(d("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(d("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(d("0"), Some(Duration::ZERO));
        assert_eq!(d("500ms"), Some(Duration::from_millis(500)));
        for bad in ["", "5", "5x", "m", "-1s"] {
            assert_eq!(d(bad), None, "{bad}");
        }
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_secs(1800 + 7200)), "2h30m0s");
        assert_eq!(parse_bool("True"), Some(true));
        assert_eq!(parse_bool("yes"), None);
    }

    #[test]
    fn versions_come_from_tags_info_and_text() {
        let v =
            Version::from_image("registry.k8s.io/autoscaling/cluster-autoscaler:v1.36.1").unwrap();
        assert_eq!((v.major, v.minor, v.patch), (1, 36, Some(1)));
        let v =
            Version::from_image("localhost:5000/kube-scheduler:v1.37.2-rc.0@sha256:abc").unwrap();
        assert_eq!(v.minor_string(), "1.37");
        assert!(Version::from_image("localhost:5000/kube-scheduler").is_none());
        assert!(Version::from_image("kube-scheduler:latest").is_none());
        let v = Version::from_info("1", "36+", "not-semver").unwrap();
        assert_eq!((v.minor, v.patch), (36, None));
        assert_eq!(Version::parse("1.35").unwrap().patch, None);
        assert!(Version::parse("1.x").is_none());
    }
}
