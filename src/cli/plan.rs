//! `gangscaler plan`: plan the pending gangs of a cluster or a trace, and print the plan.

use std::path::PathBuf;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::PlanOutput;
use super::capacity;
use super::notes::{print_composites, print_view_notes};
use crate::config::Source;

pub(super) async fn run_plan(
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
    let composites = composite_previews(&view, &groups);
    if simulate.is_some() {
        return capacity::run(traced, &view, &groups, &composites, output);
    }
    let plan = crate::planner::plan(&view.gangs, &groups);
    match output {
        PlanOutput::Json => {
            let out = serde_json::json!({
                "plan": plan,
                "composites": composites,
                "problems": view.problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "ungroupedPending": view.ungrouped_pending.len(),
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&out).context("encoding JSON")?
            );
        }
        PlanOutput::Table => {
            print_plan_table(&plan, &view);
            print_composites(&composites);
        }
    }
    Ok(())
}

/// Every composite of `view` that has not formed, previewed against `groups` (each with its
/// shape and target).
pub(super) fn composite_previews(
    view: &crate::cluster::GangView,
    groups: &[(
        &crate::model::NodeGroupSpec,
        Option<crate::planner::NodeShape>,
        u32,
    )],
) -> Vec<crate::planner::CompositePreview> {
    let slots: Vec<crate::planner::GroupSlot<'_>> = groups
        .iter()
        .map(|(g, shape, target)| crate::planner::GroupSlot {
            id: &g.id,
            shape: shape.as_ref(),
            target: *target,
            max_size: g.max_size,
        })
        .collect();
    crate::planner::preview(
        &view.composites,
        &view.gangs,
        &slots,
        &std::collections::BTreeMap::new(),
    )
}

pub(super) fn print_plan_table(plan: &crate::planner::Plan, view: &crate::cluster::GangView) {
    use crate::planner::FitOutcome;
    if plan.gangs.is_empty() {
        println!("no pending gangs");
    }
    for g in &plan.gangs {
        let parent = view
            .gang(&g.gang)
            .and_then(|gang| view.composite_of(gang))
            .map_or_else(String::new, |c| {
                format!(" [child of composite {}, admitted with it]", c.id)
            });
        println!(
            "{} ({}){parent} priority {} minCount {} bound {} unbound {} -> best: {}",
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
    print_view_notes(view);
}
