//! Command line: `serve`, `validate`, `plan`, `template`, `audit`, `convert`, `doctor`,
//! `webhook`. One `run_*` function per command.

mod capacity;
mod convert;
mod doctor;
mod webhook;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::clock::now_ms;
use crate::config::{self, Source};
use crate::model::TemplateNode;
use crate::server::Server;
use crate::telemetry::LogFormat;

/// `--version`'s long form: the version, then the git commit and compiler it was built with.
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("BUILD_GIT_COMMIT"),
    ", rustc ",
    env!("BUILD_RUSTC_VERSION"),
    ")"
);

/// gangscaler: gang-aware Cluster Autoscaler externalgrpc cloud provider.
///
/// Environment variables: a flag that every command shares can be set as `GANGSCALER_<FLAG>`
/// (`GANGSCALER_LOG`, `GANGSCALER_LOG_FORMAT`, `GANGSCALER_CONFIG`); a configuration setting
/// as `GANGSCALER__<KEY>__<KEY>` (provider.yaml) or `GANGSCALER_NG_<GROUP>__<KEY>` (a
/// node-group file). See the README's "Environment variables".
#[derive(Debug, Parser)]
#[command(version, long_version = LONG_VERSION, about)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "GANGSCALER_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log filter (overridden by RUST_LOG), e.g. `info` or `gangscaler=debug`.
    #[arg(long, global = true, default_value = "info", env = "GANGSCALER_LOG")]
    pub log: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Output format of `template`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

/// Output format of `plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanOutput {
    /// A table.
    Table,
    /// JSON.
    Json,
}

/// Output format of `audit report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportOutput {
    /// A table.
    Table,
    /// JSON.
    Json,
}

/// `audit` subcommands.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Formation time (P50/P95/P99), start success rate, attach failure rate and pending time,
    /// overall and per node group, for a time window. Bad or truncated lines are reported on
    /// stderr with their line numbers and skipped.
    Report {
        /// Audit log files, in any order (`audit.jsonl*` is fine): they are read oldest first
        /// (`LOG.N` ... `LOG.1`, then `LOG`), and a file named twice is read once. A
        /// directory stands for every `*.jsonl` log in it with its rotated files: the logs of
        /// every replica under leader election (`audit/{identity}.jsonl`).
        #[arg(required = true, value_name = "LOG")]
        logs: Vec<PathBuf>,
        /// Also read each LOG's rotated files (`LOG.N` ... `LOG.1`).
        #[arg(long)]
        rotated: bool,
        /// Start of the window (inclusive): an RFC 3339 time (`Z` or an offset such as
        /// `+02:00`; none means UTC), unix milliseconds, or a duration before now such as `24h`.
        #[arg(long)]
        since: Option<String>,
        /// End of the window (exclusive), in the same forms; must be later than `--since`.
        /// Lifecycles count as open when no outcome was recorded before it.
        #[arg(long)]
        until: Option<String>,
        /// An open lifecycle requested longer than this before `--until` (or now, if earlier)
        /// is also counted as overdue. The default is the default `formationTimeout` plus
        /// `attachTimeout`.
        #[arg(long, default_value = "40m", value_parser = humantime::parse_duration)]
        overdue_after: std::time::Duration,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = ReportOutput::Table)]
        output: ReportOutput,
    },
    /// Append COUNT records to FILE, printing each sequence number once it is acknowledged
    /// (for crash tests).
    #[command(hide = true)]
    Stress {
        /// The log (`--log` is the global log filter).
        #[arg(long)]
        file: PathBuf,
        /// Records to append.
        #[arg(long)]
        count: u64,
        /// Rotation size.
        #[arg(long, default_value_t = 64 << 20)]
        max_bytes: u64,
        /// Rotated files kept.
        #[arg(long, default_value_t = 5)]
        keep: u32,
        /// Padding bytes per record.
        #[arg(long, default_value_t = 512)]
        pad: usize,
        /// Also copy each record to stdout (before its sequence number).
        #[arg(long)]
        copy_to_stdout: bool,
    },
    /// Open SCALE_UPS synthetic scale-ups (two gangs each) in FILE and drive them through a
    /// synthetic cluster whose state advances one phase every STEP_MS, printing a line per
    /// record appended; resumes what an earlier (killed) run left (for crash tests).
    #[command(hide = true)]
    LifecycleStress {
        /// The log.
        #[arg(long)]
        file: PathBuf,
        /// Scale-ups to open.
        #[arg(long)]
        scale_ups: u32,
        /// Milliseconds per synthetic phase.
        #[arg(long, default_value_t = 20)]
        step_ms: u64,
    },
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the externalgrpc CloudProvider API.
    Serve {
        /// Configuration directory (provider.yaml + node-group files).
        #[arg(long, default_value = "provider-configs", env = "GANGSCALER_CONFIG")]
        config: PathBuf,
    },
    /// Validate a configuration directory; exits non-zero on any error.
    Validate {
        /// Configuration directory (provider.yaml + node-group files).
        #[arg(long, default_value = "provider-configs", env = "GANGSCALER_CONFIG")]
        config: PathBuf,
        /// Deprecated: the configuration directory as a positional argument, as before
        /// `--config`; it still works, with a warning, and wins over `--config` and
        /// `GANGSCALER_CONFIG` (so a deployment that sets the variable keeps working).
        #[arg(value_name = "DIR", hide = true)]
        dir: Option<PathBuf>,
    },
    /// Show, for each pending gang, which node groups can host it whole and with how many
    /// nodes, and why the others cannot.
    Plan {
        /// Configuration directory.
        #[arg(long, default_value = "provider-configs", env = "GANGSCALER_CONFIG")]
        config: PathBuf,
        /// A YAML file of Kubernetes objects (Pods, PodGroups/Workloads, PVCs, PVs,
        /// StorageClasses, CSIDrivers); without it the live cluster is read (kubeconfig).
        #[arg(long)]
        objects: Option<PathBuf>,
        /// Current target size of a group, `GROUP=N` (repeatable; default 0).
        #[arg(long = "target", value_name = "GROUP=N")]
        targets: Vec<String>,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = PlanOutput::Table)]
        output: PlanOutput,
        /// Capacity planning instead: for each gang shape (the pending gangs' and every
        /// `--trace` gang's) and node group, the nodes a whole gang and its minCount need and
        /// the largest minCount the group's maxSize, and its headroom, admit.
        #[arg(long)]
        simulate: bool,
        /// A trace of gang specs for `--simulate`: JSON Lines (`*.jsonl`, `*.ndjson`) or YAML
        /// (repeatable). With a trace and no `--objects`, the cluster is not read.
        #[arg(long = "trace", value_name = "FILE", requires = "simulate")]
        traces: Vec<PathBuf>,
    },
    /// Print the template Node of a node group.
    Template {
        /// Node-group id.
        group: String,
        /// Configuration directory.
        #[arg(long, default_value = "provider-configs", env = "GANGSCALER_CONFIG")]
        config: PathBuf,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = Output::Yaml)]
        output: Output,
    },
    /// Convert manifests (Workloads, PodGroups, Pods and pod templates in Jobs, JobSets,
    /// CronJobs, Deployments, StatefulSets and any `spec.template`) to another gang API
    /// version. The result goes to standard output, a line per finding to standard error;
    /// nothing is written when an object cannot be converted.
    Convert {
        /// Target version: v1alpha1 (Kubernetes 1.35), v1alpha2 (1.36) or v1beta1 (1.37).
        #[arg(long, value_parser = parse_gang_api)]
        to: crate::migrate::api::GangApi,
        /// Manifest file (multi-document YAML); `-` for standard input.
        #[arg(long, short = 'f', default_value = "-")]
        file: PathBuf,
        /// Fail, writing nothing, when the target cannot express something the input says.
        #[arg(long)]
        strict: bool,
    },
    /// Serve the compatibility webhook: link annotated pods the way the cluster's gang API
    /// version expects and create their PodGroups (HTTPS, mutual TLS, AdmissionReview v1).
    Webhook {
        /// Listen address.
        #[arg(long, default_value_t = crate::webhook::default_listen())]
        listen: std::net::SocketAddr,
        /// Serving certificate chain (PEM).
        #[arg(long)]
        tls_cert: PathBuf,
        /// Serving private key (PEM).
        #[arg(long)]
        tls_key: PathBuf,
        /// CA bundle the API server's client certificate must chain to (PEM): mutual TLS.
        /// Without it any client that trusts the serving certificate is served (server TLS
        /// only, for control planes whose admission configuration cannot be set).
        #[arg(long)]
        client_ca: Option<PathBuf>,
        /// kubeconfig; default: KUBECONFIG, ~/.kube/config or in-cluster.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
    /// Read the audit log.
    Audit {
        /// What to do.
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Report whether the live cluster is ready for gang admission: served gang API, gates,
    /// component versions and skew, CSI attach limits, CA flags that hurt gangs, known traps,
    /// and the flags to turn it on and roll it back. Exits 1 when a check is `error`.
    Doctor(doctor::DoctorArgs),
}

/// Runs the parsed command.
///
/// # Errors
/// Any failure, with context naming what was being done.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { config } => run_serve(config).await,
        Command::Validate { config, dir } => {
            let dir = match dir {
                Some(dir) => {
                    eprintln!(
                        "warning: `gangscaler validate DIR` is deprecated; use `gangscaler validate --config DIR`"
                    );
                    dir
                }
                None => config,
            };
            run_validate(dir)
        }
        Command::Template {
            group,
            config,
            output,
        } => run_template(&group, config, output),
        Command::Plan {
            config,
            objects,
            targets,
            output,
            simulate,
            traces,
        } => {
            run_plan(
                config,
                objects,
                &targets,
                output,
                simulate.then_some(traces),
            )
            .await
        }
        Command::Audit { command } => run_audit(command),
        Command::Convert { to, file, strict } => convert::run(&file, to, strict),
        Command::Webhook {
            listen,
            tls_cert,
            tls_key,
            client_ca,
            kubeconfig,
        } => {
            let files = config::TlsFiles {
                cert_file: tls_cert,
                key_file: tls_key,
                client_ca_file: client_ca,
            };
            webhook::run(listen, files, kubeconfig).await
        }
        Command::Doctor(args) => doctor::run(args).await,
    }
}

fn parse_gang_api(s: &str) -> Result<crate::migrate::api::GangApi, String> {
    s.parse()
        .map_err(|e: crate::migrate::api::UnknownVersion| e.to_string())
}

fn run_audit(command: AuditCommand) -> anyhow::Result<()> {
    match command {
        AuditCommand::Report {
            logs,
            rotated,
            since,
            until,
            overdue_after,
            output,
        } => run_audit_report(
            &logs,
            rotated,
            (since.as_deref(), until.as_deref()),
            overdue_after,
            output,
        ),
        AuditCommand::Stress {
            file,
            count,
            max_bytes,
            keep,
            pad,
            copy_to_stdout,
        } => run_audit_stress(file, count, max_bytes, keep, pad, copy_to_stdout),
        AuditCommand::LifecycleStress {
            file,
            scale_ups,
            step_ms,
        } => run_lifecycle_stress(file, scale_ups, step_ms),
    }
}

/// An RFC 3339 time (with `Z`, an offset such as `+02:00`, or none for UTC), unix
/// milliseconds, or a duration before `now_ms`.
fn parse_time(flag: &str, s: &str, now_ms: i64) -> anyhow::Result<i64> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    if let Ok(t) = s.parse::<jiff::Timestamp>() {
        return Ok(t.as_millisecond());
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        let d = t
            .duration_since(std::time::UNIX_EPOCH)
            .with_context(|| format!("{flag} {s:?}: before 1970"))?;
        return Ok(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    }
    let ago = humantime::parse_duration(s).map_err(|_| {
        anyhow::anyhow!(
            "{flag} {s:?}: expected an RFC 3339 time (2026-05-01T15:00:00Z or \
             2026-05-01T15:00:00+02:00), unix milliseconds or a duration such as 24h"
        )
    })?;
    Ok(now_ms.saturating_sub(i64::try_from(ago.as_millis()).unwrap_or(i64::MAX)))
}

/// The window of `--since` and `--until`.
fn parse_window(
    since: Option<&str>,
    until: Option<&str>,
    now_ms: i64,
) -> anyhow::Result<crate::audit::Window> {
    let since_ms = since
        .map(|s| parse_time("--since", s, now_ms))
        .transpose()?;
    let until_ms = until
        .map(|s| parse_time("--until", s, now_ms))
        .transpose()?;
    if let (Some(s), Some(u), Some(since), Some(until)) = (since_ms, until_ms, since, until)
        && s >= u
    {
        let bound = crate::audit::report::rfc3339;
        anyhow::bail!(
            "--since {since:?} ({}) must be earlier than --until {until:?} ({}): \
             the window [since, until) would be empty",
            bound(s),
            bound(u)
        );
    }
    Ok(crate::audit::Window::new(since_ms, until_ms))
}

fn run_audit_report(
    logs: &[PathBuf],
    rotated: bool,
    (since, until): (Option<&str>, Option<&str>),
    overdue_after: std::time::Duration,
    output: ReportOutput,
) -> anyhow::Result<()> {
    use crate::audit;
    let now = now_ms();
    let window = parse_window(since, until, now)?;
    let mut files = Vec::new();
    for log in logs {
        if log.is_dir() {
            let every = log.join(format!("{}.jsonl", audit::IDENTITY));
            files.extend(audit::discover(&every)?);
        } else if rotated {
            files.extend(audit::rotated_paths(log)?);
        } else {
            files.push(log.clone());
        }
    }
    let files = audit::log_order(&files);
    let reading = audit::read_files(&files)?;
    for bad in &reading.bad {
        eprintln!("warning: skipped {bad}");
    }
    if reading.bad_unlisted > 0 {
        eprintln!(
            "warning: skipped {} more bad line(s), not listed (at most {} per file are)",
            reading.bad_unlisted,
            audit::read::MAX_BAD_LINES_PER_FILE
        );
    }
    let options = audit::report::Options::new()
        .with_now_ms(now)
        .with_overdue_after_ms(u64::try_from(overdue_after.as_millis()).unwrap_or(u64::MAX));
    let report = audit::Report::compute_with(&reading.records, window, options);
    match output {
        ReportOutput::Json => {
            #[derive(serde::Serialize)]
            #[serde(rename_all = "camelCase")]
            struct Json<'a> {
                #[serde(flatten)]
                report: &'a audit::Report,
                files: Vec<String>,
                bad_lines: &'a [audit::BadLine],
                bad_lines_unlisted: u64,
            }
            let json = Json {
                report: &report,
                files: files.iter().map(|f| f.display().to_string()).collect(),
                bad_lines: &reading.bad,
                bad_lines_unlisted: reading.bad_unlisted,
            };
            println!(
                "{}",
                serde_json::to_string_pretty(&json).context("encoding JSON")?
            );
        }
        ReportOutput::Table => {
            print!("{}", report.to_table());
            if reading.bad_total() > 0 {
                println!(
                    "\n{} bad line(s) skipped (listed on stderr)",
                    reading.bad_total()
                );
            }
        }
    }
    Ok(())
}

fn run_audit_stress(
    log: PathBuf,
    count: u64,
    max_bytes: u64,
    keep: u32,
    pad: usize,
    copy_to_stdout: bool,
) -> anyhow::Result<()> {
    use std::io::Write as _;

    use crate::audit::{self, PhaseEvent, Record};
    let config = audit::Config::new()
        .with_max_bytes(max_bytes)
        .with_keep_files(keep)
        .with_copy_to_stdout(copy_to_stdout);
    let log = audit::AuditLog::open(log, config)?;
    if log.repaired_bytes() > 0 {
        eprintln!("repaired a torn tail of {} bytes", log.repaired_bytes());
    }
    let detail = "x".repeat(pad);
    for seq in 0..count {
        let now = now_ms();
        let record = Record::new(
            now,
            PhaseEvent {
                scale_up_id: format!("stress-{seq}"),
                node_group: "stress".into(),
                gang: None,
                phase: audit::Phase::NodesReady,
                at_ms: now,
                elapsed_ms: seq,
                detail: Some(detail.clone()),
            },
        );
        log.append(&record)?;
        // Locked per record: the log takes stdout's lock for its copy.
        let mut out = std::io::stdout().lock();
        writeln!(out, "{seq}")
            .and_then(|()| out.flush())
            .context("writing to stdout")?;
    }
    Ok(())
}

fn run_lifecycle_stress(log: PathBuf, scale_ups: u32, step_ms: u64) -> anyhow::Result<()> {
    use std::io::Write as _;

    use crate::audit::{
        self, DecisionEvent, Event, Extent, GangId, GangSummary, Outcome, Phase, Record, Verdict,
    };
    use crate::scaleup::{Observation, Recorder, Timeouts};
    let timeouts = Timeouts {
        registration_ms: 3_600_000,
        formation_ms: 3_600_000,
        attach_ms: 3_600_000,
    };
    let (recorder, _) = Recorder::open(&log, audit::Config::new(), timeouts)?;
    let files = audit::rotated_paths(&log)?;
    let written: std::collections::BTreeSet<String> = audit::read_files(&files)?
        .records
        .into_iter()
        .filter_map(|r| match r.event {
            Event::Decision(d) => d.scale_up_id,
            _ => None,
        })
        .collect();
    let gang = |k: u32, side: &str| GangId {
        namespace: "stress".into(),
        name: format!("g{k}-{side}"),
        api_version: "scheduling.k8s.io/v1alpha2".into(),
        kind: "PodGroup".into(),
    };
    let mut out = std::io::stdout().lock();
    let mut ack = |n: usize| -> anyhow::Result<()> {
        for _ in 0..n {
            writeln!(out, "ok").context("writing to stdout")?;
        }
        out.flush().context("writing to stdout")
    };
    for k in 0..scale_ups {
        let id = format!("life-{k}");
        if written.contains(&id) {
            continue;
        }
        let summary = |side| GangSummary {
            gang: gang(k, side),
            priority: 0,
            extent: Extent::Whole,
            nodes: 1,
            in_flight: 0,
        };
        let decision = DecisionEvent {
            scale_up_id: Some(id),
            node_group: "stress".into(),
            policy: "strict".into(),
            verdict: Verdict::Accept,
            rule: "gangs_admitted".into(),
            target: 0,
            max_size: 1000,
            headroom: 1000,
            ca_delta: 2,
            applied_delta: 2,
            capped: false,
            gang_nodes: 2,
            ungrouped_nodes: 0,
            gangs: vec![summary("a"), summary("b")],
            deferred: Vec::new(),
            deferred_total: 0,
            covered: 0,
            unhostable: 0,
            duration_ms: None,
            reason: "lifecycle stress".into(),
        };
        recorder.record(&Record::new(now_ms(), decision))?;
        ack(1)?;
    }
    let step = i64::try_from(step_ms.max(1)).unwrap_or(i64::MAX);
    while !recorder.open_scale_ups().is_empty() {
        let appended = recorder
            .reconcile(now_ms(), |o| {
                let stage = (now_ms() - o.requested_at_ms) / step;
                let phase = Phase::ALL[usize::try_from(stage.clamp(0, 5)).unwrap_or(0)];
                let obs = Observation::at(phase);
                let failing = o.gang.as_ref().is_some_and(|g| g.name.ends_with("-b"));
                Some(match (stage >= 6, failing) {
                    (false, _) => obs,
                    (true, false) => obs.with_outcome(Outcome::Succeeded, "synthetic start"),
                    (true, true) => {
                        obs.with_outcome(Outcome::AttachFailed, "synthetic attach error")
                    }
                })
            })
            .map_err(|(e, _)| e)?;
        ack(appended.len())?;
        std::thread::sleep(std::time::Duration::from_millis(step_ms / 4 + 1));
    }
    Ok(())
}

async fn run_serve(dir: PathBuf) -> anyhow::Result<()> {
    let source = Source::new(&dir);
    let loaded = source
        .load()
        .with_context(|| format!("loading configuration from {}", dir.display()))?;
    info!(node_groups = loaded.groups.len(), config = %dir.display(), "configuration loaded");
    for w in loaded.provider.server.warnings() {
        // The server logs its own warning for forced non-loopback plaintext.
        if w.field != "server.address" {
            warn!(field = w.field, warning = %w.message, "listener setting needs attention");
        }
    }
    let server = Server::bind(loaded, Some(source))
        .await
        .context("starting the server")?;
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        info!("shutdown signal received");
        signal.cancel();
    });
    server.run(shutdown).await.context("serving")
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

fn run_validate(dir: PathBuf) -> anyhow::Result<()> {
    let loaded = Source::new(&dir).load().map_err(|e| match e {
        config::Error::Invalid(_) => anyhow::anyhow!("{e}"),
        other => anyhow::Error::new(other),
    })?;
    let provider = dir.join(crate::config::PROVIDER_FILE);
    for w in loaded.provider.server.warnings() {
        eprintln!("warning: {}: {w}", provider.display());
    }
    let ids: Vec<String> = loaded.groups.iter().map(|g| g.id.to_string()).collect();
    println!(
        "{}: valid, {} node group(s): {}",
        dir.display(),
        ids.len(),
        ids.join(", ")
    );
    Ok(())
}

fn run_template(group: &str, dir: PathBuf, output: Output) -> anyhow::Result<()> {
    let loaded = Source::new(&dir)
        .load()
        .with_context(|| format!("loading configuration from {}", dir.display()))?;
    let spec = loaded
        .groups
        .iter()
        .find(|g| g.id.as_str() == group)
        .with_context(|| {
            let ids: Vec<&str> = loaded.groups.iter().map(|g| g.id.as_str()).collect();
            format!("node group {group:?} not found; known: {}", ids.join(", "))
        })?;
    let template =
        TemplateNode::for_group(spec, &loaded.provider.gpu_label).with_context(|| {
            format!(
                "node group {group} has no template node: set capacity in {}",
                spec.source.display()
            )
        })?;
    let text = match output {
        Output::Yaml => crate::yaml::to_string(&template).context("encoding YAML")?,
        Output::Json => serde_json::to_string_pretty(&template).context("encoding JSON")? + "\n",
    };
    print!("{text}");
    Ok(())
}

async fn run_plan(
    dir: PathBuf,
    objects: Option<PathBuf>,
    targets: &[String],
    output: PlanOutput,
    simulate: Option<Vec<PathBuf>>,
) -> anyhow::Result<()> {
    let loaded = Source::new(&dir)
        .load()
        .with_context(|| format!("loading configuration from {}", dir.display()))?;
    let mut target_of = std::collections::BTreeMap::new();
    for t in targets {
        let (group, n) = t
            .split_once('=')
            .with_context(|| format!("--target {t:?}: expected GROUP=N"))?;
        let n: u32 = n
            .parse()
            .with_context(|| format!("--target {t:?}: {n:?} is not a whole number"))?;
        if !loaded.groups.iter().any(|g| g.id.as_str() == group) {
            anyhow::bail!("--target {t:?}: no node group {group:?}");
        }
        target_of.insert(group.to_owned(), n);
    }
    let traced = match &simulate {
        Some(traces) => capacity::read_traces(traces)?,
        None => Vec::new(),
    };
    let set = match &objects {
        // A trace alone is the whole input of a simulation.
        None if !traced.is_empty() => crate::cluster::ObjectSet::new(),
        Some(path) => {
            // Bounded: an object file larger than the limit is refused before it is parsed.
            let text = crate::yaml::read_file(path, &crate::yaml::OBJECTS)?;
            crate::cluster::ObjectSet::from_yaml_documents(&text)
                .with_context(|| format!("reading objects from {}", path.display()))?
        }
        None => {
            let client =
                crate::provision::kwok::KwokProvisioner::client(&loaded.provider.kubernetes)
                    .await
                    .context("building a Kubernetes client")?;
            let shutdown = CancellationToken::new();
            let view = crate::cluster::ClusterView::start(client, &shutdown)
                .await
                .context("reading the cluster")?;
            view.wait_ready().await;
            let set = view.snapshot();
            shutdown.cancel();
            set
        }
    };
    let view = crate::cluster::gangs(&set, crate::clock::now_unix());
    let gpu_label = &loaded.provider.gpu_label;
    let groups: Vec<_> = loaded
        .groups
        .iter()
        .map(|g| {
            let target = target_of.get(g.id.as_str()).copied().unwrap_or(0);
            (
                g,
                crate::planner::NodeShape::from_group(g, gpu_label),
                target,
            )
        })
        .collect();
    if simulate.is_some() {
        return capacity::run(traced, &view, &groups, output);
    }
    let plan = crate::planner::plan(&view.gangs, &groups);
    match output {
        PlanOutput::Json => {
            let out = serde_json::json!({
                "plan": plan,
                "problems": view.problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "ungroupedPending": view.ungrouped_pending.len(),
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&out).context("encoding JSON")?
            );
        }
        PlanOutput::Table => print_plan_table(&plan, &view),
    }
    Ok(())
}

fn print_plan_table(plan: &crate::planner::Plan, view: &crate::cluster::GangView) {
    use crate::planner::FitOutcome;
    if plan.gangs.is_empty() {
        println!("no pending gangs");
    }
    for g in &plan.gangs {
        println!(
            "{} ({}) priority {} minCount {} bound {} unbound {} -> best: {}",
            g.gang,
            g.gang.api_version,
            g.priority,
            g.min_count,
            g.bound,
            g.unbound,
            g.best
                .as_ref()
                .map_or_else(|| "none".to_owned(), ToString::to_string)
        );
        println!(
            "  {:<24} {:>8} {:>10} {:>9}  VERDICT",
            "GROUP", "HEADROOM", "NODES", "MINCOUNT"
        );
        for o in &g.groups {
            match &o.outcome {
                FitOutcome::Fits {
                    nodes_all,
                    nodes_min,
                    fits_headroom,
                    min_fits_headroom,
                } => {
                    let verdict = match (fits_headroom, min_fits_headroom) {
                        (true, _) => "fits whole".to_owned(),
                        (false, true) => "fits minCount only".to_owned(),
                        (false, false) => {
                            format!("needs {nodes_min}+ nodes, headroom {}", o.headroom)
                        }
                    };
                    println!(
                        "  {:<24} {:>8} {:>10} {:>9}  {verdict}",
                        o.group.to_string(),
                        o.headroom,
                        nodes_all,
                        nodes_min
                    );
                }
                FitOutcome::Unfittable { message, .. } => {
                    println!(
                        "  {:<24} {:>8} {:>10} {:>9}  cannot host: {message}",
                        o.group.to_string(),
                        o.headroom,
                        "-",
                        "-"
                    );
                }
            }
        }
    }
    if !view.ungrouped_pending.is_empty() {
        println!(
            "{} pending pod(s) belong to no gang (CA's per-pod semantics apply)",
            view.ungrouped_pending.len()
        );
    }
    for p in &view.problems {
        println!("problem: {p}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-05-01T13:00:00Z in unix milliseconds.
    const ONE_PM_UTC: i64 = 1_777_640_400_000;

    #[test]
    fn times_with_a_utc_offset_are_the_same_instant_as_in_utc() {
        for s in [
            "2026-05-01T13:00:00Z",
            "2026-05-01T15:00:00+02:00",
            "2026-05-01T08:30:00-04:30",
            "2026-05-01T13:00:00",
            "1777640400000",
        ] {
            assert_eq!(parse_time("--since", s, 0).unwrap(), ONE_PM_UTC, "{s}");
        }
        assert_eq!(
            parse_time("--since", "2026-05-01T15:00:00.250+02:00", 0).unwrap(),
            ONE_PM_UTC + 250
        );
        assert_eq!(
            parse_time("--until", "2h", ONE_PM_UTC).unwrap(),
            ONE_PM_UTC - 7_200_000
        );
    }

    #[test]
    fn an_unreadable_time_names_its_flag_and_value() {
        let err = parse_time("--until", "2026-05-01T15:00:00+2", 0).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("--until \"2026-05-01T15:00:00+2\""),
            "{msg}"
        );
    }

    #[test]
    fn since_must_be_earlier_than_until_and_the_error_names_both() {
        let since = "2026-05-01T15:00:00+02:00";
        let until = "2026-05-01T12:00:00Z";
        let msg = parse_window(Some(since), Some(until), 0)
            .unwrap_err()
            .to_string();
        for part in [
            since,
            until,
            "2026-05-01T13:00:00.000Z",
            "2026-05-01T12:00:00.000Z",
        ] {
            assert!(msg.contains(part), "{part}: {msg}");
        }
        assert!(
            parse_window(Some(since), Some(since), 0).is_err(),
            "empty window"
        );
        let w = parse_window(Some(until), Some(since), 0).unwrap();
        assert_eq!(
            (w.since_ms, w.until_ms),
            (Some(ONE_PM_UTC - 3_600_000), Some(ONE_PM_UTC))
        );
        assert!(parse_window(Some(since), None, 0).is_ok());
    }
}
