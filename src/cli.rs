//! Command line: `serve`, `validate`, `plan`, `template`, `audit`, `convert`, `doctor`,
//! `webhook`. One `run_*` function per command.

mod audit;
mod capacity;
mod convert;
mod doctor;
mod notes;
mod plan;
mod webhook;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use audit::run_audit;
use plan::run_plan;

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
/// node-group file). See docs/configuration.md, "Environment variables".
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
        /// Target: a Kubernetes minor (1.35, 1.36, 1.37, 1.38) or a gang API version:
        /// v1alpha1 (1.35), v1alpha2 (1.36) or v1beta1 (1.37; write 1.38 for 1.38, whose
        /// CompositePodGroups are v1beta1 too).
        #[arg(long, value_parser = parse_target)]
        to: crate::migrate::api::Target,
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
        /// Also give every member of a gang (linked natively or from annotations) the
        /// toleration of its gang's reservation taint, so it can land on nodes reserved for
        /// it from its creation (docs/reservation.md).
        #[arg(long)]
        reservation_tolerations: bool,
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
            reservation_tolerations,
        } => {
            let files = config::TlsFiles {
                cert_file: tls_cert,
                key_file: tls_key,
                client_ca_file: client_ca,
            };
            webhook::run(listen, files, kubeconfig, reservation_tolerations).await
        }
        Command::Doctor(args) => doctor::run(args).await,
    }
}

fn parse_target(s: &str) -> Result<crate::migrate::api::Target, String> {
    s.parse()
        .map_err(|e: crate::migrate::api::UnknownTarget| e.to_string())
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
