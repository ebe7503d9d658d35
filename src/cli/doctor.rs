//! `gangscaler doctor`: reads its files and flags, reads the cluster ([`crate::doctor::probe`]),
//! builds the report ([`crate::doctor::report`]) and prints it as a table or JSON. Exits
//! non-zero (through an error) when a check is `error`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::ValueEnum;
use tracing::info;

use crate::config::Source;
use crate::doctor::{self, Component, Found, GroupSeen, ProviderSeen, probe};

/// Output format of `doctor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DoctorOutput {
    /// A table.
    Table,
    /// JSON (schema `gangscaler.io/doctor/v1`, see docs/doctor.md).
    Json,
}

/// Arguments of `gangscaler doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Kubeconfig file; without it `--config`'s `kubernetes.kubeconfig`, else `KUBECONFIG`,
    /// `~/.kube/config` or the in-cluster configuration.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the server-side dry-run pod that tests the pod link field (nothing is
    /// stored).
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// gangscaler's configuration directory: compares each node group's CSI limits with its
    /// live nodes' CSINodes and reads the scale-down protection settings.
    #[arg(long, value_name = "DIR")]
    pub config: Option<PathBuf>,
    /// Cluster Autoscaler's flags: its command line, one flag a line, or a YAML args list.
    /// Without it, the args of a kube-system Deployment with a cluster-autoscaler image.
    #[arg(long, value_name = "FILE")]
    pub ca_flags: Option<PathBuf>,
    /// Cluster Autoscaler's version (e.g. 1.36.1); without it, a kube-system
    /// cluster-autoscaler image's tag.
    #[arg(long, value_name = "VERSION")]
    pub ca_version: Option<String>,
    /// kube-scheduler's flags (for `--feature-gates` and `--config`), as for `--ca-flags`.
    /// Without it, the command of a kube-system pod labelled component=kube-scheduler.
    #[arg(long, value_name = "FILE")]
    pub scheduler_flags: Option<PathBuf>,
    /// kube-scheduler's version (e.g. 1.36.2); without it, that pod's image tag.
    #[arg(long, value_name = "VERSION")]
    pub scheduler_version: Option<String>,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = DoctorOutput::Table)]
    pub output: DoctorOutput,
}

/// A component as given on the command line.
fn component(
    (flags_flag, flags): (&'static str, Option<&Path>),
    (version_flag, version): (&'static str, Option<&str>),
) -> anyhow::Result<Component> {
    Ok(Component {
        version: version
            .map(|v| probe::parse_version(version_flag, v).map(|p| Found::new(p, version_flag)))
            .transpose()?,
        flags: flags
            .map(|p| probe::read_flags_file(flags_flag, p))
            .transpose()?,
        lookup: None,
    })
}

fn provider_seen(dir: &Path, loaded: &crate::config::Loaded) -> ProviderSeen {
    let p = &loaded.provider;
    let off_because = if !p.lifecycle.scale_down_protection {
        Some("lifecycle.scaleDownProtection: false")
    } else if p.admission_policy == crate::planner::Policy::Off {
        Some("admission.policy: off")
    } else if p.audit.is_none() {
        Some("no audit.path, so no lifecycle loop")
    } else if !p.kubernetes.watch {
        Some("kubernetes.watch is off, so no lifecycle loop")
    } else {
        None
    };
    ProviderSeen {
        dir: dir.display().to_string(),
        groups: loaded
            .groups
            .iter()
            .map(|g| GroupSeen {
                id: g.id.to_string(),
                max_size: g.max_size,
                csi: g.csi.clone(),
                reservation: g.reservation.enabled,
                labels: crate::model::TemplateNode::for_group(g, &p.gpu_label)
                    .map(|t| t.metadata.labels)
                    .unwrap_or_default(),
                taints: g.taints.clone(),
                machine_deployment: match &g.backend {
                    crate::model::BackendSpec::ClusterApi(c) => {
                        Some(format!("{}/{}", c.namespace, c.name))
                    }
                    _ => None,
                },
            })
            .collect(),
        protection: off_because.is_none(),
        protection_off_because: off_because.map(str::to_owned),
        formation_timeout: p.lifecycle.formation_timeout,
        lifecycle_interval: p.lifecycle.interval,
    }
}

/// Runs `gangscaler doctor`.
pub(super) async fn run(args: DoctorArgs) -> anyhow::Result<()> {
    // Every file and value is read before the cluster is, so bad input fails fast.
    let scheduler = component(
        ("--scheduler-flags", args.scheduler_flags.as_deref()),
        ("--scheduler-version", args.scheduler_version.as_deref()),
    )?;
    let ca = component(
        ("--ca-flags", args.ca_flags.as_deref()),
        ("--ca-version", args.ca_version.as_deref()),
    )?;
    let loaded = match &args.config {
        None => None,
        Some(dir) => Some(Source::new(dir).load().map_err(|e| {
            match e {
                crate::config::Error::Invalid(_) => {
                    anyhow::anyhow!("--config {}: {e}", dir.display())
                }
                other => anyhow::Error::new(other)
                    .context(format!("--config {}: loading configuration", dir.display())),
            }
        })?),
    };
    let kubeconfig = args.kubeconfig.clone().or_else(|| {
        loaded
            .as_ref()
            .and_then(|l| l.provider.kubernetes.kubeconfig.clone())
    });
    let client = crate::provision::kube_client(kubeconfig.as_deref())
        .await
        .with_context(|| match &kubeconfig {
            Some(p) => format!("--kubeconfig {}: building a Kubernetes client", p.display()),
            None => {
                "building a Kubernetes client (KUBECONFIG, ~/.kube/config or in-cluster)".to_owned()
            }
        })?;
    // Cluster API objects live in the management cluster, as the server reads them.
    let management_kubeconfig = loaded
        .as_ref()
        .and_then(|l| l.provider.kubernetes.management_kubeconfig.clone());
    let management = match &management_kubeconfig {
        None => None,
        Some(p) => Some(
            crate::provision::kube_client(Some(p))
                .await
                .with_context(|| {
                    format!(
                        "kubernetes.managementKubeconfig {}: building a Kubernetes client",
                        p.display()
                    )
                })?,
        ),
    };
    let given = probe::Given {
        namespace: args.namespace.clone(),
        scheduler,
        ca,
        provider: args
            .config
            .as_deref()
            .zip(loaded.as_ref())
            .map(|(dir, l)| provider_seen(dir, l)),
    };
    let observed = probe::observe(&client, management.as_ref(), given).await;
    let report = doctor::report(&observed);
    info!(
        status = report.status.as_str(),
        checks.error = report.summary.error,
        checks.warn = report.summary.warn,
        checks.unknown = report.summary.unknown,
        "doctor report built"
    );
    match args.output {
        DoctorOutput::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report).context("encoding JSON")?
        ),
        DoctorOutput::Table => print!("{}", report.to_table()),
    }
    let failed = report.failed();
    if !failed.is_empty() {
        anyhow::bail!("{} check(s) failed: {}", failed.len(), failed.join(", "));
    }
    Ok(())
}
