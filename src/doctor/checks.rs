//! The report builder: [`report`] turns an [`Observed`] into rows, with no I/O. One function
//! per check; the gang-API facts per Kubernetes minor (1.35-1.38) are the table
//! [`GANG_APIS`].

mod autoscaler;
mod composite;
mod csi;
mod lines;
mod reservation;
mod traps;
mod versions;

pub use csi::group_of;
pub use lines::lines_for;
pub use traps::{DraPostFilter, dra_post_filter};

use super::flags::{self, Version};
use super::{Facts, LinkProbe, Observed, Report, Row, Status};

pub use crate::migrate::api::GROUP;
use crate::migrate::api::GangApi as Shape;

/// The gang resources doctor looks for in discovery.
pub const GANG_RESOURCES: [&str; 3] = ["workloads", "podgroups", "compositepodgroups"];

/// What CompositePodGroups need on a minor that has them (1.37+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompositeRequirements {
    /// The version that serves `compositepodgroups` and that kube-scheduler reads them from:
    /// `v1alpha3` on 1.37, `v1beta1` on 1.38 (which still serves `v1alpha3` when asked).
    pub version: &'static str,
    /// The gates they need beside the gang API's: kube-apiserver and kube-scheduler refuse to
    /// start with `CompositePodGroup` on and `TopologyAwareWorkloadScheduling` or
    /// `GenericWorkload` off.
    pub gates: &'static [&'static str],
    /// Whether the enable lines turn them on (1.38, beta) or only name them (1.37, alpha).
    pub in_lines: bool,
}

/// What doctor checks of the gang-scheduling API of one Kubernetes minor, beside the
/// version's [`Shape`] (its name and pod link field, shared with `migrate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GangApiRequirements {
    /// The minor, e.g. 38 for 1.38 (1.37 and 1.38 share one [`Shape`]).
    pub minor: u32,
    /// The version that carries the gang objects on this minor.
    pub shape: Shape,
    /// The resources that version must serve.
    pub resources: &'static [&'static str],
    /// How a pod names its gang, for the report.
    pub link_path: &'static str,
    /// The feature gates gang admission needs on every control-plane component.
    pub gates: &'static [&'static str],
    /// CompositePodGroup, on minors that have it.
    pub composite: Option<CompositeRequirements>,
}

impl GangApiRequirements {
    /// The minor, e.g. 36 for 1.36.
    pub fn minor(&self) -> u32 {
        self.minor
    }

    /// The gates the enable and roll-back lines set: [`Self::gates`], then the composite
    /// gates where the lines turn CompositePodGroup on (1.38).
    pub fn line_gates(&self) -> Vec<&'static str> {
        let mut gates = self.gates.to_vec();
        if let Some(c) = self.composite.filter(|c| c.in_lines) {
            gates.extend(c.gates);
        }
        gates
    }

    /// The version, e.g. `v1alpha2`.
    pub fn version(&self) -> &'static str {
        self.shape.version()
    }

    /// `scheduling.k8s.io/<version>`.
    pub fn group_version(&self) -> String {
        self.shape.api_version()
    }
}

/// The gates CompositePodGroup needs beside GenericWorkload, in the order the lines set them.
const COMPOSITE_GATES: &[&str] = &["TopologyAwareWorkloadScheduling", "CompositePodGroup"];

/// The gang API of 1.35, 1.36, 1.37 and 1.38 (k8s.io/api v0.35.4, v0.36.2, v0.37.2,
/// v0.38.0-beta.0; gates from k8s.io/kubernetes `pkg/features` of v1.37.2 and
/// v1.38.0-beta.0).
pub const GANG_APIS: [GangApiRequirements; 4] = [
    GangApiRequirements {
        minor: 35,
        shape: Shape::V1Alpha1,
        resources: &["workloads"],
        link_path: "spec.workloadRef",
        gates: &["GenericWorkload", "GangScheduling"],
        composite: None,
    },
    GangApiRequirements {
        minor: 36,
        shape: Shape::V1Alpha2,
        resources: &["workloads", "podgroups"],
        link_path: "spec.schedulingGroup.podGroupName",
        gates: &["GenericWorkload", "GangScheduling"],
        composite: None,
    },
    GangApiRequirements {
        minor: 37,
        shape: Shape::V1Beta1,
        resources: &["workloads", "podgroups"],
        link_path: "spec.schedulingGroup.podGroupName",
        gates: &["GenericWorkload"],
        composite: Some(CompositeRequirements {
            version: "v1alpha3",
            gates: COMPOSITE_GATES,
            in_lines: false,
        }),
    },
    GangApiRequirements {
        minor: 38,
        shape: Shape::V1Beta1,
        resources: &["workloads", "podgroups"],
        link_path: "spec.schedulingGroup.podGroupName",
        gates: &["GenericWorkload"],
        composite: Some(CompositeRequirements {
            version: "v1beta1",
            gates: COMPOSITE_GATES,
            in_lines: true,
        }),
    },
];

/// The minors doctor knows, for messages: `1.35-1.38`.
const KNOWN: &str = "1.35-1.38";

/// The gang API of Kubernetes 1.`minor`, if doctor knows it.
pub fn gang_api(minor: u32) -> Option<&'static GangApiRequirements> {
    GANG_APIS.iter().find(|a| a.minor() == minor)
}

/// The pod field (`spec.<field>`) the dry run sends on Kubernetes `version`: `workloadRef` on
/// 1.35, `schedulingGroup` from 1.36 on (assumed for later minors); none before 1.35.
pub fn link_field(version: &Version) -> Option<&'static str> {
    (version.major == 1)
        .then(|| Shape::of_minor(version.minor))
        .flatten()
        .map(Shape::pod_link_field)
}

/// kube-scheduler's gates: `None` without its flags, `Err` when `--feature-gates` does not read.
type SchedulerGates = Option<Result<std::collections::BTreeMap<String, bool>, String>>;

/// The cluster's minor, when the server version was read and is 1.x.
fn server_minor(o: &Observed) -> Option<u32> {
    o.server
        .as_ref()
        .ok()
        .filter(|v| v.major == 1)
        .map(|v| v.minor)
}

/// Builds the report: every check in a fixed order, the enable and roll-back lines, and facts.
pub fn report(o: &Observed) -> Report {
    let minor = server_minor(o);
    let api = minor.and_then(gang_api);
    let scheduler_gates = scheduler_gates(o);
    let mut rows = vec![
        apiserver_version(o),
        served_api(o, api),
        generic_workload(o, api, &scheduler_gates),
        pod_link(o, api),
        gang_scheduling(minor, &scheduler_gates),
        composite::row(o, api, &scheduler_gates),
        versions::scheduler(o),
        versions::autoscaler(o),
    ];
    rows.extend(csi::rows(o));
    rows.extend(reservation::rows(o));
    rows.extend(reservation::cluster_api_rows(o));
    rows.extend(autoscaler::rows(o));
    rows.extend(traps::rows(o, minor, &scheduler_gates));
    let lines = api.map(lines_for);
    rows.push(match &lines {
        Some(l) => Row::new(
            "enable-lines",
            Status::Ok,
            format!(
                "enable and roll-back flags for {} are listed below",
                l.minor
            ),
            "",
        ),
        None => Row::new(
            "enable-lines",
            Status::Unknown,
            format!("no enable lines: the cluster's minor is unknown or not {KNOWN}"),
            "",
        ),
    });
    Report::new(rows, lines, facts(o, api, &scheduler_gates))
}

/// kube-scheduler's `--feature-gates`, when its flags are known: `None` without flags, the
/// parse error when they do not read.
fn scheduler_gates(o: &Observed) -> SchedulerGates {
    o.scheduler
        .flags
        .as_ref()
        .map(|f| flags::feature_gates(&f.value).map_err(|e| format!("{}: {e}", f.source)))
}

fn gate_word(on: Option<bool>) -> &'static str {
    match on {
        Some(true) => "on",
        Some(false) => "off",
        None => "unknown",
    }
}

fn facts(
    o: &Observed,
    api: Option<&GangApiRequirements>,
    scheduler_gates: &SchedulerGates,
) -> Facts {
    let served = o.served.clone().unwrap_or_default();
    let mut gates = std::collections::BTreeMap::new();
    if let Some(api) = api {
        gates.insert(
            "GenericWorkload".to_owned(),
            gate_word(
                o.served
                    .as_ref()
                    .ok()
                    .map(|s| serves(s, api.version(), "workloads")),
            )
            .to_owned(),
        );
        if api.composite.is_some() {
            gates.insert(
                "CompositePodGroup".to_owned(),
                gate_word(o.served.as_ref().ok().map(|s| {
                    s.iter()
                        .any(|v| v.resources.iter().any(|r| r == "compositepodgroups"))
                }))
                .to_owned(),
            );
        }
        if api.gates.contains(&"GangScheduling") {
            let on = match scheduler_gates {
                Some(Ok(g)) => Some(g.get("GangScheduling").copied().unwrap_or(false)),
                _ => None,
            };
            gates.insert("GangScheduling".to_owned(), gate_word(on).to_owned());
        }
    }
    let (pod_link_field, pod_link_kept) = match &o.pod_link {
        LinkProbe::NotProbed(_) => (None, None),
        LinkProbe::Kept { field } => (Some(field.clone()), Some(true)),
        LinkProbe::Dropped { field } => (Some(field.clone()), Some(false)),
        LinkProbe::Failed { field, .. } => (Some(field.clone()), None),
    };
    Facts {
        kubernetes_version: o.server.as_ref().ok().map(|v| v.text.clone()),
        expected_gang_api: api.map(GangApiRequirements::group_version),
        served,
        gates,
        pod_link_field,
        pod_link_kept,
        scheduler_version: o.scheduler.version.as_ref().map(|v| v.value.text.clone()),
        ca_version: o.ca.version.as_ref().map(|v| v.value.text.clone()),
    }
}

/// Whether `version` of the group serves `resource`.
fn serves(served: &[super::ServedVersion], version: &str, resource: &str) -> bool {
    served
        .iter()
        .any(|s| s.version == version && s.resources.iter().any(|r| r == resource))
}

fn apiserver_version(o: &Observed) -> Row {
    const ID: &str = "apiserver-version";
    match &o.server {
        Err(e) => Row::new(
            ID,
            Status::Error,
            format!("cannot read kube-apiserver's /version: {e}"),
            "check --kubeconfig and that the API server is reachable",
        ),
        Ok(v) if v.major != 1 || v.minor < 35 => Row::new(
            ID,
            Status::Error,
            format!("{v}: no gang-scheduling API before Kubernetes 1.35"),
            "upgrade the control plane to 1.35 or later",
        ),
        Ok(v) => match gang_api(v.minor) {
            Some(api) => Row::new(
                ID,
                Status::Ok,
                format!(
                    "{v}: its gang API is {} (pods link with {})",
                    api.group_version(),
                    api.link_path
                ),
                "",
            ),
            None => Row::new(
                ID,
                Status::Warn,
                format!("{v}: doctor knows the gang API of {KNOWN} only"),
                "check the checks below against this release's notes",
            ),
        },
    }
}

/// `v1alpha2 (workloads, podgroups)` for every gang version served.
fn describe_served(served: &[super::ServedVersion]) -> String {
    let gang: Vec<String> = served
        .iter()
        .filter_map(|s| {
            let rs: Vec<&str> = s
                .resources
                .iter()
                .map(String::as_str)
                .filter(|r| GANG_RESOURCES.contains(r))
                .collect();
            (!rs.is_empty()).then(|| format!("{} ({})", s.version, rs.join(", ")))
        })
        .collect();
    if gang.is_empty() {
        format!("{GROUP} serves no Workload, PodGroup or CompositePodGroup")
    } else {
        format!("{GROUP} serves {}", gang.join("; "))
    }
}

/// The kube-apiserver flags that serve `api` (and, on 1.38, its CompositePodGroups).
fn apiserver_enable(api: &GangApiRequirements) -> String {
    format!(
        "kube-apiserver --feature-gates={} --runtime-config={}=true",
        gates_value(api, true),
        api.group_version()
    )
}

/// `Gate=on,...` for every gate of `api`'s lines ([`GangApiRequirements::line_gates`]).
fn gates_value(api: &GangApiRequirements, on: bool) -> String {
    api.line_gates()
        .iter()
        .map(|g| format!("{g}={on}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn served_api(o: &Observed, api: Option<&GangApiRequirements>) -> Row {
    const ID: &str = "gang-api";
    let served = match &o.served {
        Err(e) => {
            return Row::new(
                ID,
                Status::Unknown,
                format!("API discovery of {GROUP} failed: {e}"),
                "",
            );
        }
        Ok(s) => s,
    };
    let found = describe_served(served);
    let Some(api) = api else {
        return Row::new(ID, Status::Unknown, found, "");
    };
    let missing: Vec<&str> = api
        .resources
        .iter()
        .copied()
        .filter(|r| !serves(served, api.version(), r))
        .collect();
    if !missing.is_empty() {
        return Row::new(
            ID,
            Status::Error,
            format!(
                "{found}; 1.{} needs {} serving {}",
                api.minor(),
                api.group_version(),
                missing.join(", ")
            ),
            apiserver_enable(api),
        );
    }
    let mut found = format!("{found}; expected {}", api.group_version());
    if let Some(c) = api.composite {
        let at: Vec<&str> = served
            .iter()
            .filter(|s| s.resources.iter().any(|r| r == "compositepodgroups"))
            .map(|s| s.version.as_str())
            .collect();
        found.push_str(&if at.contains(&c.version) {
            format!(
                "; CompositePodGroup served at {}: gangscaler admits a composite's PodGroups as one gang",
                c.version
            )
        } else if at.is_empty() {
            format!(
                "; CompositePodGroup not served at {} (optional; when served, gangscaler admits a composite's PodGroups as one gang)",
                c.version
            )
        } else {
            format!(
                "; CompositePodGroup served at {} but not at {}, where kube-scheduler 1.{} reads it (see gate/CompositePodGroup)",
                at.join(", "),
                c.version,
                api.minor()
            )
        });
    }
    Row::new(ID, Status::Ok, found, "")
}

fn generic_workload(
    o: &Observed,
    api: Option<&GangApiRequirements>,
    scheduler_gates: &SchedulerGates,
) -> Row {
    const ID: &str = "gate/GenericWorkload";
    let (Some(api), Ok(served)) = (api, &o.served) else {
        return Row::new(
            ID,
            Status::Unknown,
            "cannot infer: the minor or the served API is unknown",
            "",
        );
    };
    if !serves(served, api.version(), "workloads") {
        return Row::new(
            ID,
            Status::Error,
            format!(
                "off on kube-apiserver, or its API version is off: {} serves no workloads",
                api.group_version()
            ),
            apiserver_enable(api),
        );
    }
    let scheduler = match scheduler_gates {
        None => "kube-scheduler's gates unknown (--scheduler-flags)".to_owned(),
        Some(Err(e)) => {
            return Row::new(
                ID,
                Status::Error,
                format!("kube-apiserver on; kube-scheduler's --feature-gates do not read: {e}"),
                "fix kube-scheduler's --feature-gates",
            );
        }
        Some(Ok(g)) if g.get("GenericWorkload") == Some(&true) => "on in kube-scheduler".to_owned(),
        Some(Ok(_)) => {
            return Row::new(
                ID,
                Status::Error,
                "on in kube-apiserver (it serves workloads), off in kube-scheduler's flags (default off)",
                format!("kube-scheduler --feature-gates={}", gates_value(api, true)),
            );
        }
    };
    Row::new(
        ID,
        Status::Ok,
        format!(
            "on in kube-apiserver ({} serves workloads); {scheduler}",
            api.group_version()
        ),
        "",
    )
}

fn pod_link(o: &Observed, api: Option<&GangApiRequirements>) -> Row {
    const ID: &str = "pod-link-field";
    let ns = &o.namespace;
    let fix = api.map_or_else(
        || "turn GenericWorkload on in kube-apiserver".to_owned(),
        |a| format!("kube-apiserver --feature-gates={}", gates_value(a, true)),
    );
    match &o.pod_link {
        LinkProbe::NotProbed(why) => {
            Row::new(ID, Status::Unknown, format!("not probed: {why}"), "")
        }
        LinkProbe::Kept { field } => Row::new(
            ID,
            Status::Ok,
            format!("a server-side dry-run create of a pod in {ns} kept spec.{field}"),
            "",
        ),
        LinkProbe::Dropped { field } => Row::new(
            ID,
            Status::Error,
            format!(
                "a server-side dry-run create of a pod in {ns} dropped spec.{field}: GenericWorkload \
                 is off for the pod field, so pods lose their gang link and schedule one by one"
            ),
            fix,
        ),
        LinkProbe::Failed { field, error } => Row::new(
            ID,
            Status::Unknown,
            format!("the dry-run create of a pod with spec.{field} in {ns} failed: {error}"),
            "pass --namespace of a namespace where you may create pods",
        ),
    }
}

/// kube-scheduler's `--feature-gates` (`None` when its flags are unknown), or row `id` in
/// error when they do not read.
fn read_gates<'a>(
    id: &'static str,
    scheduler_gates: &'a SchedulerGates,
) -> Result<Option<&'a std::collections::BTreeMap<String, bool>>, Row> {
    match scheduler_gates {
        Some(Ok(g)) => Ok(Some(g)),
        Some(Err(e)) => Err(Row::new(
            id,
            Status::Error,
            format!("kube-scheduler's --feature-gates do not read: {e}"),
            "fix kube-scheduler's --feature-gates",
        )),
        None => Ok(None),
    }
}

fn gang_scheduling(minor: Option<u32>, scheduler_gates: &SchedulerGates) -> Row {
    const ID: &str = "gate/GangScheduling";
    let Some(minor) = minor.filter(|m| gang_api(*m).is_some()) else {
        return Row::new(ID, Status::Unknown, "the cluster's minor is unknown", "");
    };
    let gates = match read_gates(ID, scheduler_gates) {
        Ok(g) => g,
        Err(row) => return row,
    };
    if minor >= 37 {
        return match gates.and_then(|g| g.get("GangScheduling")) {
            Some(_) => Row::new(
                ID,
                Status::Error,
                format!(
                    "set in kube-scheduler's flags, but 1.{minor} has no GangScheduling gate \
                     (merged into GenericWorkload in 1.37): a component given an unknown gate \
                     refuses to start"
                ),
                "remove GangScheduling from every component's --feature-gates",
            ),
            None => Row::new(
                ID,
                Status::Ok,
                "merged into GenericWorkload in 1.37: nothing to set",
                "",
            ),
        };
    }
    let upgrade = "before upgrading to 1.37 remove GangScheduling from every --feature-gates (merged into GenericWorkload)";
    let Some(gates) = gates else {
        return Row::new(
            ID,
            Status::Unknown,
            "a kube-scheduler gate the API server cannot reveal",
            "pass --scheduler-flags FILE (kube-scheduler's command line) to check it",
        );
    };
    match (gates.get("GangScheduling"), gates.get("GenericWorkload")) {
        (Some(true), Some(true)) => Row::new(
            ID,
            Status::Ok,
            "on in kube-scheduler's flags (with GenericWorkload)",
            upgrade,
        ),
        (Some(true), _) => Row::new(
            ID,
            Status::Error,
            "on in kube-scheduler's flags, but GangScheduling needs GenericWorkload, which is off",
            "kube-scheduler --feature-gates=GenericWorkload=true,GangScheduling=true",
        ),
        (on, _) => Row::new(
            ID,
            Status::Error,
            format!(
                "{} in kube-scheduler's flags: the scheduler places gang members one by one",
                if on.is_some() {
                    "off"
                } else {
                    "not set (default off)"
                }
            ),
            "kube-scheduler --feature-gates=GenericWorkload=true,GangScheduling=true",
        ),
    }
}

#[cfg(test)]
mod tests;
