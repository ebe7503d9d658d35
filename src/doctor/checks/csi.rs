//! CSI attach limits: the live CSINodes' drivers, and each node group's template limits
//! against the CSINodes of that group's live nodes.

use std::collections::{BTreeMap, BTreeSet};

use crate::doctor::{CsiNodeSeen, NodeSeen, Observed, Row, Status};

/// The node group of a live node, as gangscaler ties them: its `gangscaler.io/node-group`
/// label, else the group in a kwok provider id.
pub fn group_of(node: &NodeSeen) -> Option<String> {
    node.group_label.clone().or_else(|| {
        node.provider_id
            .as_deref()
            .and_then(crate::provision::kwok::parse_provider_id)
            .map(|(g, _)| g.to_owned())
    })
}

pub(super) fn rows(o: &Observed) -> Vec<Row> {
    let mut rows = vec![live(o)];
    if let Some(p) = &o.provider {
        for g in &p.groups {
            rows.push(template(o, &g.id, &g.csi));
        }
    }
    rows
}

fn count_word(count: Option<i32>) -> String {
    count.map_or_else(|| "no count".to_owned(), |c| c.to_string())
}

fn live(o: &Observed) -> Row {
    const ID: &str = "csi/live";
    let csi_nodes = match &o.csi_nodes {
        Err(e) => {
            return Row::new(
                ID,
                Status::Unknown,
                format!("cannot list CSINodes: {e}"),
                "",
            );
        }
        Ok(c) => c,
    };
    let nodes = o
        .nodes
        .as_ref()
        .map_or_else(|_| "? nodes".to_owned(), |n| format!("{} nodes", n.len()));
    // driver -> (counts seen, nodes without a count)
    let mut drivers: BTreeMap<&str, (BTreeSet<i32>, usize, usize)> = BTreeMap::new();
    for c in csi_nodes {
        for d in &c.drivers {
            let e = drivers.entry(d.name.as_str()).or_default();
            match d.count {
                Some(n) => {
                    e.0.insert(n);
                    e.1 += 1;
                }
                None => e.2 += 1,
            }
        }
    }
    if drivers.is_empty() {
        return Row::new(
            ID,
            Status::Ok,
            format!(
                "{} CSINodes, {nodes}: no CSI driver registered",
                csi_nodes.len()
            ),
            "",
        );
    }
    let mut mixed = Vec::new();
    let parts: Vec<String> = drivers
        .iter()
        .map(|(name, (counts, with, without))| {
            let counts: Vec<String> = counts.iter().map(ToString::to_string).collect();
            if *with > 0 && *without > 0 {
                mixed.push(*name);
            }
            match (with, without) {
                (_, 0) => format!(
                    "{name} on {with} with allocatable.count {}",
                    counts.join("/")
                ),
                (0, _) => format!("{name} on {without} without allocatable.count (no limit)"),
                _ => format!(
                    "{name} on {with} with allocatable.count {}, on {without} without",
                    counts.join("/")
                ),
            }
        })
        .collect();
    let found = format!(
        "{} CSINodes, {nodes}: {}",
        csi_nodes.len(),
        parts.join("; ")
    );
    if mixed.is_empty() {
        Row::new(ID, Status::Ok, found, "")
    } else {
        Row::new(
            ID,
            Status::Warn,
            found,
            format!(
                "{} report a limit on some nodes only: CA copies one node's CSINode per group, so \
                 check the driver's node plugin (max_volumes_per_node)",
                mixed.join(", ")
            ),
        )
    }
}

fn template(o: &Observed, group: &str, csi: &BTreeMap<String, u32>) -> Row {
    let id = format!("csi-template/{group}");
    let tmpl = if csi.is_empty() {
        "template has no CSI limits".to_owned()
    } else {
        let parts: Vec<String> = csi.iter().map(|(d, n)| format!("{d}={n}")).collect();
        format!("template {}", parts.join(","))
    };
    let (nodes, csi_nodes) = match (&o.nodes, &o.csi_nodes) {
        (Ok(n), Ok(c)) => (n, c),
        (Err(e), _) | (_, Err(e)) => {
            return Row::new(
                id,
                Status::Unknown,
                format!("{tmpl}; cannot read nodes or CSINodes: {e}"),
                "",
            );
        }
    };
    let members: Vec<&str> = nodes
        .iter()
        .filter(|n| group_of(n).as_deref() == Some(group))
        .map(|n| n.name.as_str())
        .collect();
    if members.is_empty() {
        return Row::new(
            id,
            Status::Unknown,
            format!(
                "{tmpl}; no live node of the group to compare with (CA gets no CSINode from an \
                 externalgrpc template, so from zero it counts no attach limit)"
            ),
            "",
        );
    }
    let by_name: BTreeMap<&str, &CsiNodeSeen> =
        csi_nodes.iter().map(|c| (c.name.as_str(), c)).collect();
    let mut problems = Vec::new();
    let mut without_csinode = 0;
    // driver -> live counts (None: registered without a count) with the nodes that have them
    let mut live: BTreeMap<&str, BTreeMap<Option<i32>, Vec<&str>>> = BTreeMap::new();
    for name in &members {
        let Some(c) = by_name.get(name) else {
            without_csinode += 1;
            continue;
        };
        for d in &c.drivers {
            live.entry(d.name.as_str())
                .or_default()
                .entry(d.count)
                .or_default()
                .push(name);
        }
    }
    for (driver, counts) in &live {
        match csi.get(*driver) {
            None => problems.push(format!(
                "live nodes register {driver} ({}) that the template lacks",
                counts
                    .keys()
                    .map(|c| count_word(*c))
                    .collect::<Vec<_>>()
                    .join("/")
            )),
            Some(&want) => {
                for (count, names) in counts {
                    if *count != i32::try_from(want).ok() {
                        problems.push(format!(
                            "{driver}: template {want}, live {} on {}",
                            count_word(*count),
                            names.join(", ")
                        ));
                    }
                }
            }
        }
    }
    let checked = members.len() - without_csinode;
    if checked > 0 {
        for driver in csi.keys() {
            if !live.contains_key(driver.as_str()) {
                problems.push(format!(
                    "template lists {driver}, which no live node registers"
                ));
            }
        }
    }
    let found = format!(
        "{tmpl}; {} live node(s), {without_csinode} without a CSINode",
        members.len()
    );
    if problems.is_empty() {
        Row::new(id, Status::Ok, format!("{found}; limits match"), "")
    } else {
        Row::new(
            id,
            Status::Warn,
            format!("{found}; {}", problems.join("; ")),
            "make the group's csi: limits match the nodes' CSINodes (gangscaler packs by the template)",
        )
    }
}
