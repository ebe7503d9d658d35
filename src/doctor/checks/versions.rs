//! Component versions and their skew against kube-apiserver.

use super::gang_api;
use crate::doctor::{Observed, Row, Status};

pub(super) fn scheduler(o: &Observed) -> Row {
    const ID: &str = "scheduler-version";
    let Some(found) = &o.scheduler.version else {
        let why =
            o.scheduler.lookup.clone().unwrap_or_else(|| {
                "no kube-system pod labelled component=kube-scheduler".to_owned()
            });
        return Row::new(
            ID,
            Status::Unknown,
            format!("not given; {why}"),
            "pass --scheduler-version (or --scheduler-flags)",
        );
    };
    let v = &found.value;
    let Ok(server) = &o.server else {
        return Row::new(
            ID,
            Status::Unknown,
            format!("{v} ({}); kube-apiserver's version unknown", found.source),
            "",
        );
    };
    if (v.major, v.minor) == (server.major, server.minor) {
        return Row::new(
            ID,
            Status::Ok,
            format!("{v} ({}), the API server's minor", found.source),
            "",
        );
    }
    let theirs = gang_api(v.minor).map_or_else(
        || "a gang API".to_owned(),
        |a| format!("{} (pods' {})", a.group_version(), a.link_path),
    );
    Row::new(
        ID,
        Status::Error,
        format!(
            "{v} ({}) against kube-apiserver {server}: the scheduler reads {theirs} of its own \
             minor, and each minor serves a different gang API",
            found.source
        ),
        format!("run kube-scheduler {}", server.minor_string()),
    )
}

/// The newest Cluster Autoscaler minor released: no 1.37 CA is tagged (its release branch
/// still builds against the 1.36 Kubernetes libraries), so clusters of 1.37 and 1.38 can run
/// nothing newer than 1.36.
pub const NEWEST_CA_MINOR: u32 = 36;

pub(super) fn autoscaler(o: &Observed) -> Row {
    const ID: &str = "ca-version";
    let Some(found) = &o.ca.version else {
        let why = o.ca.lookup.clone().unwrap_or_else(|| {
            "no kube-system Deployment or pod with a cluster-autoscaler image".to_owned()
        });
        return Row::new(
            ID,
            Status::Unknown,
            format!("not given; {why}"),
            "pass --ca-version",
        );
    };
    let v = &found.value;
    let Ok(server) = &o.server else {
        return Row::new(
            ID,
            Status::Unknown,
            format!("{v} ({}); kube-apiserver's version unknown", found.source),
            "",
        );
    };
    let at = format!("{v} ({}) against kube-apiserver {server}", found.source);
    if v.major != server.major {
        return Row::new(ID, Status::Error, at, "run CA of the API server's minor");
    }
    match i64::from(server.minor) - i64::from(v.minor) {
        0 => Row::new(ID, Status::Ok, format!("{at}: same minor"), ""),
        1 => Row::new(
            ID,
            Status::Warn,
            format!(
                "{at}: one minor behind; CA is supported for its own minor only (gangscaler's \
                 e2e runs CA 1.36.1 against 1.37: CA sees gang members as plain pods)"
            ),
            format!(
                "upgrade CA to {} once it is released",
                server.minor_string()
            ),
        ),
        behind if behind > 1 && v.minor == NEWEST_CA_MINOR => Row::new(
            ID,
            Status::Warn,
            format!(
                "{at}: {behind} minors behind, but no newer CA is released (the newest is \
                 1.{NEWEST_CA_MINOR}); gangscaler's e2e runs CA 1.36.1 against 1.37 and 1.38: \
                 CA sees gang members as plain pods"
            ),
            format!(
                "upgrade CA to {} once it is released",
                server.minor_string()
            ),
        ),
        _ => Row::new(
            ID,
            Status::Error,
            format!("{at}: outside CA's support (the same minor)"),
            format!("run CA {}", server.minor_string()),
        ),
    }
}
