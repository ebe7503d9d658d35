//! Command line: `serve`, `validate`, `template`. One `run_*` function per command.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::config::{self, Source};
use crate::model::TemplateNode;
use crate::server::Server;
use crate::telemetry::LogFormat;

/// gangscaler: gang-aware Cluster Autoscaler externalgrpc cloud provider.
#[derive(Debug, Parser)]
#[command(version, about)]
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
        /// Configuration directory.
        #[arg(default_value = "provider-configs")]
        dir: PathBuf,
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
}

/// Runs the parsed command.
///
/// # Errors
/// Any failure, with context naming what was being done.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { config } => run_serve(config).await,
        Command::Validate { dir } => run_validate(dir),
        Command::Template {
            group,
            config,
            output,
        } => run_template(&group, config, output),
    }
}

async fn run_serve(dir: PathBuf) -> anyhow::Result<()> {
    let source = Source::new(&dir);
    let loaded = source
        .load()
        .with_context(|| format!("loading configuration from {}", dir.display()))?;
    info!(node_groups = loaded.groups.len(), config = %dir.display(), "configuration loaded");
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
        Output::Yaml => serde_yaml::to_string(&template).context("encoding YAML")?,
        Output::Json => serde_json::to_string_pretty(&template).context("encoding JSON")? + "\n",
    };
    print!("{text}");
    Ok(())
}
