//! `gangscaler plan --simulate`: gang shapes from traces and pending gangs against every node
//! group, as a threshold table per shape or as JSON.

use std::path::PathBuf;

use anyhow::Context;

use crate::cluster::GangView;
use crate::model::quantity::Quantity;
use crate::model::{NodeGroupSpec, PodDemand};
use crate::planner::capacity::{Skipped, collapse, shapes_of};
use crate::planner::{Capacity, GangShape, NodeShape, Threshold, capacity};

use super::PlanOutput;
use super::notes::{print_composites, print_view_notes};

/// Every gang spec of every trace, in file and line order.
pub(super) fn read_traces(traces: &[PathBuf]) -> anyhow::Result<Vec<GangShape>> {
    let mut shapes = Vec::new();
    for path in traces {
        shapes.extend(crate::trace::read(path)?);
    }
    Ok(shapes)
}

/// Prints the capacity of the traced shapes, then the pending gangs' shapes, on `groups`.
pub(super) fn run(
    traced: Vec<GangShape>,
    view: &GangView,
    groups: &[(&NodeGroupSpec, Option<NodeShape>, u32)],
    composites: &[crate::planner::CompositePreview],
    output: PlanOutput,
) -> anyhow::Result<()> {
    let (pending, skipped) = shapes_of(&view.gangs);
    let shapes = collapse(traced.into_iter().chain(pending));
    let result = capacity(&shapes, groups);
    match output {
        PlanOutput::Json => {
            let out = serde_json::json!({
                "capacity": result,
                "composites": composites,
                "skipped": skipped,
                "problems": view.problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "ungroupedPending": view.ungrouped_pending.len(),
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&out).context("encoding JSON")?
            );
        }
        PlanOutput::Table => {
            print_table(&result, &skipped, view);
            print_composites(composites);
        }
    }
    Ok(())
}

fn print_table(result: &Capacity, skipped: &[Skipped], view: &GangView) {
    if result.shapes.is_empty() {
        println!("no gang shapes (no pending gangs and no trace)");
    } else {
        println!(
            "NODES-ALL, NODES-MIN: fresh nodes for every member, for minCount members. \
             MIN@MAX, MIN@HEADROOM: the largest\nminCount of the shape admitted with maxSize \
             nodes (from an empty group), with the headroom (maxSize - target)."
        );
    }
    for s in &result.shapes {
        let shape = &s.shape;
        let topology = shape
            .topology_key
            .as_ref()
            .map_or_else(String::new, |k| format!("; topology {k}"));
        println!(
            "\nshape {}: {} members, minCount {}; per member {}{topology}",
            shape.name,
            shape.members,
            shape.min_count,
            describe(&shape.demand)
        );
        if shape.gangs.len() > 1 {
            println!("  gangs: {}", shape.gangs.join(", "));
        }
        println!(
            "  {:<16} {:>5} {:>8} {:>8} {:>9} {:>9} {:>8} {:>12}  VERDICT",
            "GROUP",
            "MAX",
            "HEADROOM",
            "PER-NODE",
            "NODES-ALL",
            "NODES-MIN",
            "MIN@MAX",
            "MIN@HEADROOM"
        );
        for g in &s.groups {
            let (numbers, verdict) = match &g.outcome {
                Threshold::Fits {
                    per_node,
                    nodes_all,
                    nodes_min,
                    largest_min_count_at_max,
                    largest_min_count_at_headroom,
                    fits_headroom,
                    min_fits_headroom,
                    min_fits_max_size,
                    ..
                } => {
                    let verdict = if *fits_headroom {
                        "whole gang fits now".to_owned()
                    } else if *min_fits_headroom {
                        "minCount fits now".to_owned()
                    } else if *min_fits_max_size {
                        format!("minCount fits maxSize, not the headroom {}", g.headroom)
                    } else {
                        format!("minCount needs {nodes_min} nodes, maxSize {}", g.max_size)
                    };
                    (
                        [
                            per_node.to_string(),
                            nodes_all.to_string(),
                            nodes_min.to_string(),
                            largest_min_count_at_max.to_string(),
                            largest_min_count_at_headroom.to_string(),
                        ],
                        verdict,
                    )
                }
                Threshold::Unfittable { message, .. } => (
                    ["-", "-", "-", "0", "0"].map(str::to_owned),
                    format!("cannot host: {message}"),
                ),
            };
            let [per, all, min, at_max, at_headroom] = numbers;
            println!(
                "  {:<16} {:>5} {:>8} {per:>8} {all:>9} {min:>9} {at_max:>8} {at_headroom:>12}  {verdict}",
                g.group.to_string(),
                g.max_size,
                g.headroom,
            );
        }
    }
    if !skipped.is_empty() {
        println!();
    }
    for s in skipped {
        println!("skipped gang {}: {}", s.gang, s.reason);
    }
    print_view_notes(view);
}

/// What one member requests, e.g. `cpu 16, memory 200Gi, nvidia.com/gpu 1, ebs.csi.aws.com
/// volumes 3`; `nothing` for an empty demand.
fn describe(demand: &PodDemand) -> String {
    let mut parts = Vec::new();
    if demand.cpu_milli > 0 {
        parts.push(format!(
            "cpu {}",
            Quantity::from_milli(demand.cpu_milli).to_decimal_string()
        ));
    }
    for (name, b) in [
        ("memory", demand.memory_bytes),
        ("ephemeral-storage", demand.ephemeral_storage_bytes),
    ] {
        if b == 0 {
            continue;
        }
        parts.push(format!(
            "{name} {}",
            Quantity::from_units(b).to_binary_string()
        ));
    }
    for (name, n) in &demand.extended {
        parts.push(format!("{name} {n}"));
    }
    for (driver, n) in &demand.volumes {
        parts.push(format!("{driver} volumes {n}"));
    }
    if parts.is_empty() {
        "nothing".to_owned()
    } else {
        parts.join(", ")
    }
}
