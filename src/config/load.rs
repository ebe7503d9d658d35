//! Reading the configuration directory: the provider file plus one YAML file per node group,
//! each read under the [`yaml::CONFIG`] limits, with environment overrides applied on top.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::walk::Errors;
use super::{Error, FieldError, Loaded, Result, Unusable, env, validate};
use crate::yaml;

/// Name of the provider file inside the configuration directory.
pub const PROVIDER_FILE: &str = "provider.yaml";
/// Environment prefix for provider-file overrides: `GANGSCALER__SERVER__ADDRESS=...`.
pub const ENV_PREFIX: &str = "GANGSCALER";
/// Environment prefix for node-group overrides: `GANGSCALER_NG_<FILE_STEM>__MAX_SIZE=...`,
/// with the file stem upper-cased and `-` written as `_`.
pub const ENV_GROUP_PREFIX: &str = "GANGSCALER_NG_";
/// What separates the file selector and the keys of a setting variable, and the keys from
/// each other. A `GANGSCALER_*` name without it is a command-line flag's variable
/// (`GANGSCALER_LOG`), or not gangscaler's at all (Kubernetes service links such as
/// `GANGSCALER_SERVICE_HOST`), and is not read here.
pub const ENV_SEPARATOR: &str = "__";

/// Where configuration comes from: a directory and an environment.
#[derive(Debug, Clone)]
pub struct Source {
    dir: PathBuf,
    env: Option<HashMap<String, String>>,
}

/// A digest of every configuration file's name and content, to detect edits cheaply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint(u64);

impl Source {
    /// Reads `dir` with overrides from the process environment.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            env: None,
        }
    }

    /// Reads `dir` with overrides from `env` only (tests pass strings here).
    pub fn with_env(dir: impl Into<PathBuf>, env: HashMap<String, String>) -> Self {
        Self {
            dir: dir.into(),
            env: Some(env),
        }
    }

    /// The configuration directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Loads and validates everything.
    ///
    /// # Errors
    /// [`Error::Read`], [`Error::NotAFile`], [`Error::TooLarge`] or [`Error::Parse`] for a file
    /// that cannot be read or parsed, [`Error::Unusable`] listing every node-group entry that is
    /// not (a symbolic link to) a regular file, [`Error::Invalid`] listing every invalid setting
    /// of every file.
    pub fn load(&self) -> Result<Loaded> {
        let provider_path = self.dir.join(PROVIDER_FILE);
        let (doc, applied) = self.read_doc(&provider_path, Some(ENV_PREFIX))?;
        let mut errs = Errors::new(&provider_path);
        let env = |name: &str| match &self.env {
            Some(map) => map.get(name).cloned(),
            None => std::env::var(name).ok(),
        };
        let (provider, defaults) = validate::provider(&doc, &self.dir, &env, &mut errs);
        let ha = provider
            .as_ref()
            .is_some_and(|p| p.leader_election.is_some());
        let mut all: Vec<FieldError> = attributed(errs.into_list(), &applied);
        let mut groups = Vec::new();
        let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
        // A node-group directory that cannot be listed is a setting error of `nodeGroupsDir`,
        // reported with the provider file's other errors.
        let files = match self.group_files(&defaults.node_groups_dir) {
            Ok(files) => files,
            Err(ListError::Dir(e)) => {
                all.push(e);
                Vec::new()
            }
            Err(ListError::Config(e)) => return Err(e),
        };
        let stems: Vec<String> = files.iter().map(|f| env_stem(f)).collect();
        all.extend(self.unaddressed_overrides(&provider_path, &defaults.node_groups_dir, &stems));
        for (file, stem) in files.iter().zip(&stems) {
            // A stem holding the separator (an id with `--`) cannot be addressed: its
            // variables would read as another group's.
            let prefix = if stem.contains(ENV_SEPARATOR) {
                None
            } else {
                Some(format!("{ENV_GROUP_PREFIX}{stem}"))
            };
            let file = file.clone();
            let (doc, applied) = self.read_doc(&file, prefix.as_deref())?;
            let mut errs = Errors::new(&file);
            let group = validate::node_group(&doc, &file, &defaults, &mut errs);
            if ha
                && let Some(g) = &group
                && matches!(g.backend, crate::model::BackendSpec::Memory(_))
            {
                errs.push(
                    "backend.type",
                    Some(&Value::String("memory".to_owned())),
                    "the memory backend keeps its state inside one process, so each replica would have its own: with leaderElection.enabled use a backend whose state lives in the cluster (kwok, clusterapi)",
                );
            }
            if let (Some(g), Some(p)) = (&group, &provider)
                && g.reservation.enabled
                && let Some(missing) = reservation_needs(p)
            {
                errs.push(
                    "reservation.enabled",
                    Some(&Value::Bool(true)),
                    format!("needs {missing} in provider.yaml: the lifecycle loop assigns each reserved node to its gang and releases it, and without it the nodes would stay reserved for nobody"),
                );
            }
            if let Some(g) = &group
                && let Some(first) = seen.insert(g.id.to_string(), file.clone())
            {
                errs.push(
                    "id",
                    Some(&Value::String(g.id.to_string())),
                    format!("duplicates the id in {}", first.display()),
                );
            }
            all.extend(attributed(errs.into_list(), &applied));
            groups.extend(group);
        }
        match provider {
            Some(provider) if all.is_empty() => {
                groups.sort_by(|a, b| a.id.cmp(&b.id));
                Ok(Loaded { provider, groups })
            }
            Some(_) => Err(Error::Invalid(all)),
            None => {
                if all.is_empty() {
                    // Defensive: never report "0 invalid settings".
                    all.push(FieldError {
                        file: provider_path,
                        field: "server".to_owned(),
                        value: None,
                        message: "is invalid".to_owned(),
                        env: None,
                    });
                }
                Err(Error::Invalid(all))
            }
        }
    }

    /// A digest of the provider file and every node-group file (names and contents). An entry
    /// that cannot be used (a dangling symlink, a directory named `*.yaml`, a file over the
    /// size limit) is digested by its error, so that [`Source::load`] reports it once.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming `nodeGroupsDir` in the provider file, with the directory,
    /// when the node-group directory itself cannot be listed (it vanished, became a file, or
    /// cannot be read): the same error [`Source::load`] reports.
    pub fn fingerprint(&self, node_groups_dir: &Path) -> Result<Fingerprint> {
        let mut h = DefaultHasher::new();
        let provider = Listed::File(self.dir.join(PROVIDER_FILE));
        let listed = self
            .list_groups(node_groups_dir)
            .map_err(|e| Error::Invalid(vec![e]))?;
        for entry in std::iter::once(provider).chain(listed) {
            match entry {
                Listed::File(file) => {
                    file.hash(&mut h);
                    // Bounded like every configuration read.
                    match yaml::read_file(&file, &yaml::CONFIG) {
                        Ok(text) => text.hash(&mut h),
                        Err(e) => {
                            e.to_string().hash(&mut h);
                            std::error::Error::source(&e)
                                .map(ToString::to_string)
                                .hash(&mut h);
                        }
                    }
                }
                Listed::Unusable(u) => {
                    u.path.hash(&mut h);
                    u.reason.hash(&mut h);
                }
            }
        }
        Ok(Fingerprint(h.finish()))
    }

    /// The node-group files of `dir`, sorted.
    ///
    /// # Errors
    /// [`ListError::Dir`] when the directory cannot be listed; [`ListError::Config`] with
    /// [`Error::Unusable`] naming every `*.yaml`/`*.yml` entry that is not (a symlink to) a
    /// regular file.
    fn group_files(&self, dir: &Path) -> std::result::Result<Vec<PathBuf>, ListError> {
        let mut files = Vec::new();
        let mut unusable = Vec::new();
        for entry in self.list_groups(dir).map_err(ListError::Dir)? {
            match entry {
                Listed::File(path) => files.push(path),
                Listed::Unusable(u) => unusable.push(u),
            }
        }
        if unusable.is_empty() {
            Ok(files)
        } else {
            Err(ListError::Config(Error::Unusable(unusable)))
        }
    }

    /// Every `*.yaml`/`*.yml` entry of `dir`, sorted by path, following symbolic links (a
    /// Kubernetes ConfigMap mount links `file.yaml -> ..data/file.yaml`). Hidden entries
    /// (`..data`, `..2026_...`, `.x.yaml`) are skipped, so a ConfigMap's files are read once,
    /// and so is the provider file when the node groups share its directory.
    ///
    /// # Errors
    /// A [`FieldError`] of `nodeGroupsDir` (see [`Source::dir_error`]) when `dir` cannot be
    /// listed.
    fn list_groups(&self, dir: &Path) -> std::result::Result<Vec<Listed>, FieldError> {
        let read_err = |source| self.dir_error(dir, &source);
        let provider = self.dir.join(PROVIDER_FILE);
        let mut listed = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read_err)? {
            let path = entry.map_err(read_err)?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let is_yaml = matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            );
            if !is_yaml || name.starts_with('.') || same_file(&path, &provider) {
                continue;
            }
            listed.push(match usable(&path) {
                Ok(()) => Listed::File(path),
                Err(reason) => Listed::Unusable(Unusable { path, reason }),
            });
        }
        listed.sort_by(|a, b| a.path().cmp(b.path()));
        Ok(listed)
    }

    /// Why the node-group directory `dir` could not be listed, as an error of the
    /// `nodeGroupsDir` setting in the provider file whose value is the directory as resolved
    /// (relative to the configuration directory; `nodegroups` when the setting is absent).
    /// `validate`, start-up and a reload (through [`Source::fingerprint`]) all report this one
    /// error, whether the directory is missing, is not a directory, or cannot be read.
    fn dir_error(&self, dir: &Path, e: &std::io::Error) -> FieldError {
        let message = match std::fs::metadata(dir) {
            Ok(meta) if !meta.is_dir() => format!(
                "must be a directory of node-group files, but it is a {}",
                yaml::file_kind(&meta)
            ),
            Err(m) if m.kind() == std::io::ErrorKind::NotFound => {
                "must be a directory of node-group files, but nothing exists at this path"
                    .to_owned()
            }
            _ => format!("must be a readable directory of node-group files: {e}"),
        };
        FieldError {
            file: self.dir.join(PROVIDER_FILE),
            field: "nodeGroupsDir".to_owned(),
            value: Some(super::walk::render(&Value::String(
                dir.display().to_string(),
            ))),
            message,
            env: None,
        }
    }

    /// The environment, as (name, value or `Err` when not Unicode).
    fn vars(&self) -> Vec<(String, std::result::Result<String, ()>)> {
        match &self.env {
            Some(map) => map
                .iter()
                .map(|(k, v)| (k.clone(), Ok(v.clone())))
                .collect(),
            None => std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().map_err(|_| ()))))
                .collect(),
        }
    }

    /// Setting variables (`GANGSCALER…__…`) that address no file: a node-group selector
    /// naming no group of `stems`, or a selector that is neither `GANGSCALER` nor
    /// `GANGSCALER_NG_<GROUP>` (such as `GANGSCALER_SERVER__ADDRESS`, one underscore short).
    /// Without this check such a variable would be ignored without a word.
    fn unaddressed_overrides(
        &self,
        provider: &Path,
        groups_dir: &Path,
        stems: &[String],
    ) -> Vec<FieldError> {
        let mut errors = Vec::new();
        for (name, value) in self.vars() {
            let upper = name.to_uppercase();
            let Some((selector, _)) = upper.split_once(ENV_SEPARATOR) else {
                continue;
            };
            if !selector.starts_with(ENV_PREFIX) || selector == ENV_PREFIX {
                continue;
            }
            let value = value.ok().map(|v| super::walk::render(&Value::String(v)));
            let (file, message) = match selector.strip_prefix(ENV_GROUP_PREFIX) {
                Some(stem) if stems.iter().any(|s| s == stem) => continue,
                Some(stem) => (
                    groups_dir,
                    format!(
                        "environment variable addresses node group {stem}, which has no file here ({}); GANGSCALER_NG_<GROUP>__<KEY> names a group by its file name, upper-cased with `-` as `_`",
                        if stems.is_empty() {
                            "there are no node-group files".to_owned()
                        } else {
                            format!("the groups are {}", stems.join(", "))
                        }
                    ),
                ),
                None => (
                    provider,
                    format!(
                        "environment variable is neither GANGSCALER__<KEY>__... (provider.yaml) nor GANGSCALER_NG_<GROUP>__<KEY>... (a node-group file): {selector} selects no file"
                    ),
                ),
            };
            errors.push(FieldError {
                file: file.to_path_buf(),
                field: name,
                value,
                message,
                env: None,
            });
        }
        errors.sort_by(|a, b| a.field.cmp(&b.field));
        errors
    }

    /// The parsed document of `path` with the overrides of `env_prefix` applied, and those
    /// overrides.
    fn read_doc(
        &self,
        path: &Path,
        env_prefix: Option<&str>,
    ) -> Result<(Value, Vec<env::Applied>)> {
        let text = yaml::read_file(path, &yaml::CONFIG).map_err(Error::from)?;
        let mut doc = yaml::config_value(&text, &yaml::CONFIG).map_err(|e| Error::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        if doc.is_null() {
            // An empty file is an empty mapping, so its required fields are named.
            doc = Value::Object(serde_json::Map::new());
        }
        let Some(env_prefix) = env_prefix else {
            return Ok((doc, Vec::new()));
        };
        let overrides = env::overrides(self.vars().into_iter(), env_prefix).map_err(|message| {
            Error::Parse {
                path: path.to_path_buf(),
                message,
            }
        })?;
        let applied = env::apply(&mut doc, overrides);
        Ok((doc, applied))
    }
}

/// `errors` with each error of a value an environment variable set naming that variable, its
/// value and what it replaced in the file.
fn attributed(mut errors: Vec<FieldError>, applied: &[env::Applied]) -> Vec<FieldError> {
    if applied.is_empty() {
        return errors;
    }
    for e in &mut errors {
        // The innermost override wins (`capacity.pods` over a `capacity` set as a whole).
        let origin = applied
            .iter()
            .filter(|a| a.covers(&e.field))
            .max_by_key(|a| a.field.len());
        e.env = origin.map(|a| {
            Box::new(super::EnvOrigin {
                variable: a.variable.clone(),
                value: a.raw.clone(),
                replaced: a.replaced.as_ref().map(super::walk::render),
            })
        });
    }
    errors
}

/// The environment form of a node-group file's stem: upper-cased, `-` written as `_`.
fn env_stem(file: &Path) -> String {
    file.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_uppercase()
        .replace('-', "_")
}

/// Why the node-group files could not be listed.
enum ListError {
    /// The directory itself: an error of the `nodeGroupsDir` setting.
    Dir(FieldError),
    /// Entries of it ([`Error::Unusable`]).
    Config(Error),
}

/// One `*.yaml` entry of the node-group directory.
enum Listed {
    /// A regular file, or a symbolic link to one.
    File(PathBuf),
    /// Anything else.
    Unusable(Unusable),
}

impl Listed {
    fn path(&self) -> &Path {
        match self {
            Self::File(p) => p,
            Self::Unusable(u) => &u.path,
        }
    }
}

/// Whether `path` (following symbolic links) is a regular file; otherwise why not.
fn usable(path: &Path) -> std::result::Result<(), String> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(meta) => Err(format!(
            "is a {}, not a regular file",
            yaml::file_kind(&meta)
        )),
        Err(e) => match std::fs::read_link(path) {
            Ok(target) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
                "is a dangling symbolic link (to {}, which does not exist)",
                target.display()
            )),
            Ok(target) => Err(format!(
                "is a symbolic link (to {}) that cannot be followed: {e}",
                target.display()
            )),
            Err(_) => Err(format!("cannot be read: {e}")),
        },
    }
}

/// Whether `a` and `b` name the same file (after following symbolic links). `false` when
/// either cannot be resolved.
fn same_file(a: &Path, b: &Path) -> bool {
    if a.file_name() != b.file_name() {
        return false;
    }
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// What node reservation needs of the provider settings and they lack, if anything: the
/// lifecycle loop (`audit.path` and `kubernetes.watch`) under an admission policy other than
/// `off`.
fn reservation_needs(p: &super::ProviderSettings) -> Option<&'static str> {
    if p.audit.is_none() || !p.kubernetes.watch {
        Some("audit.path and kubernetes.watch")
    } else if p.admission_policy == crate::planner::Policy::Off {
        Some("an admission.policy other than off")
    } else {
        None
    }
}
