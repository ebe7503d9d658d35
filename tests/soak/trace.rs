//! The soak trace (`tests/soak/trace.py` writes it): a header line naming the node groups,
//! then one gang per line in arrival order.

use std::path::Path;

use serde::Deserialize;

/// A node group the trace runs against (all of them 8 × H100 kwok nodes).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupDef {
    /// Node-group id.
    pub id: String,
    /// `maxSize`.
    pub max_size: u32,
    /// CSI attach limit per node of the e2e's driver.
    pub csi_limit: u32,
    /// Value of the pool label its nodes carry; gangs select a pool.
    pub pool: String,
    /// Seconds from a request to a node (15 in traces written before it was a parameter).
    #[serde(default = "default_provision_delay")]
    pub provision_delay_s: f64,
    /// Up to this many seconds more per node, drawn per node (`provisionJitter`).
    #[serde(default)]
    pub provision_jitter_s: f64,
    /// Share of the instances that stock out (`failure.probability`); 0 for none.
    #[serde(default)]
    pub stockout: f64,
}

fn default_provision_delay() -> f64 {
    15.0
}

impl GroupDef {
    /// The group's kwok `backend` settings (after `type`), as YAML flow-mapping entries.
    pub fn backend_yaml(&self) -> String {
        let mut yaml = format!(
            "provisionDelay: {}ms, provisionJitter: {}ms, attach: {{delay: 1s}}",
            millis(self.provision_delay_s),
            millis(self.provision_jitter_s)
        );
        if self.stockout > 0.0 {
            yaml.push_str(&format!(
                ", failure: {{code: stockout, probability: {}}}",
                self.stockout
            ));
        }
        yaml
    }
}

/// `s` seconds as whole milliseconds (the trace writes tenths at most).
fn millis(s: f64) -> u64 {
    assert!(
        s.is_finite() && s >= 0.0,
        "a trace duration is a non-negative number of seconds, not {s}"
    );
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "checked non-negative; a soak's durations are far below u64::MAX ms"
    )]
    let ms = (s * 1000.0).round() as u64;
    ms
}

/// The first line of the trace.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    /// Seed the trace was drawn from.
    pub seed: u64,
    /// Length of the run.
    pub minutes: f64,
    /// The groups to configure.
    pub groups: Vec<GroupDef>,
}

/// One gang of the trace.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GangDef {
    /// PodGroup name; members are `<name>-<i>`.
    pub name: String,
    /// Seconds after the replay starts when it is created.
    pub at_s: f64,
    /// Member pods (all of them are `minCount`).
    pub members: u32,
    /// GPUs per member.
    pub gpus: u32,
    /// Attachable volumes per member.
    pub volumes: u32,
    /// The pool its members select.
    pub pool: String,
    /// Whether some group can host it at all.
    pub fits: bool,
    /// Seconds it runs once every member runs; then it is deleted.
    pub run_s: f64,
    /// Seconds after its creation at which it is deleted if it has not started.
    pub give_up_s: f64,
}

/// A parsed trace.
#[derive(Debug, Clone)]
pub struct Trace {
    /// The header.
    pub header: Header,
    /// The header as written (copied into the results).
    pub header_json: serde_json::Value,
    /// The gangs, in arrival order.
    pub gangs: Vec<GangDef>,
}

/// Reads the trace at `path`; panics naming the line that does not parse.
pub fn load(path: &Path) -> Trace {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading trace {}: {e}", path.display()));
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, first) = lines.next().expect("the trace has a header line");
    let header_json: serde_json::Value = serde_json::from_str(first).expect("header is JSON");
    assert_eq!(
        header_json["kind"], "header",
        "line 1 of the trace is its header"
    );
    let header: Header = serde_json::from_value(header_json.clone()).expect("header fields");
    let mut gangs: Vec<GangDef> = lines
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("trace line {}: {e}", i + 1))
        })
        .collect();
    gangs.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    Trace {
        header,
        header_json,
        gangs,
    }
}
