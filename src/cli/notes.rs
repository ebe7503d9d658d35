//! What `plan` and `plan --simulate` both print beside their tables: the composites and
//! the cross-group placement each would get, and the notes on the cluster view.

use crate::cluster::GangView;

/// The composites section of the table output: each composite that has not formed, and the
/// cross-group placement it would get, or why none.
pub(super) fn print_composites(composites: &[crate::planner::CompositePreview]) {
    for c in composites {
        let children: Vec<String> = c.children.iter().map(|g| g.name.clone()).collect();
        println!(
            "composite {} ({}) priority {} minGroupCount {} children [{}]",
            c.composite,
            c.composite.api_version,
            c.priority,
            c.min_group_count,
            children.join(", ")
        );
        match (&c.admission, &c.reason) {
            (Some(a), _) => {
                if let Some((k, v)) = &a.domain {
                    println!("  all children in {k}={v}");
                }
                for (group, placed) in &a.shares {
                    for child in placed {
                        println!(
                            "  {:<24} {:>4} nodes  {} (whole)",
                            group.to_string(),
                            child.nodes,
                            child.gang.name
                        );
                    }
                }
            }
            (None, Some(reason)) => println!("  cannot be placed whole: {reason}"),
            (None, None) => {}
        }
    }
}

/// The notes under a report: pending pods of no gang, and the problems the view found.
pub(super) fn print_view_notes(view: &GangView) {
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
