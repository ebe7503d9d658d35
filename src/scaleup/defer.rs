//! Deferral on the pods (`admission.deferral`, `docs/deferral.md`): the pending gangs the
//! planner says CA should not be asked about now ([`deferrals`](crate::planner::deferrals))
//! have their unbound members marked with CA's per-pod scale-up delay, so that CA leaves them
//! out of its scale-up instead of asking and being refused (a refusal backs the group off).
//!
//! CA measures the delay from the pod's creation (`filterOutYoungPods`, CA 1.34 to 1.36), so a
//! mark that keeps a pod out for `horizon` more seconds is `age + horizon`; [`plan`] renews it
//! when less than half the horizon is left, and a stopped gangscaler's marks run out within one
//! horizon. No mark is below CA's `--new-pod-scale-up-delay` (CA refuses those). A pod's own
//! delay is kept in `gangscaler.io/scale-up-delay-was`, never lowered, and put back on release;
//! only pods carrying our `gangscaler.io/deferred` are ever released. [`plan`] is pure;
//! [`PodMarker`] writes its [`PodChange`]s, one merge patch of annotations per pod.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};

use crate::cluster::DeferralMarks;
use crate::model::labels::{CA_POD_SCALE_UP_DELAY, DEFERRED, SCALE_UP_DELAY_WAS};

/// A pod as [`plan`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct PodState<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
    /// `creationTimestamp`, unix seconds; a pod without one is never marked (its age is
    /// unknown).
    pub created_unix: Option<i64>,
    /// Its deferral annotations.
    pub marks: Option<&'a DeferralMarks>,
}

/// One pod's write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodChange {
    /// Set the delay to `delay` and our mark to `hold`, keeping the pod's own delay in `was`.
    Mark {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The hold label ([`Hold::as_str`](crate::planner::Hold::as_str)).
        hold: &'static str,
        /// The delay, as a Go duration (`"<seconds>s"`).
        delay: String,
        /// The pod's own delay before ours, if it had one.
        was: Option<String>,
    },
    /// Remove our mark, and put back the pod's own delay (or remove the delay).
    Release {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The pod's own delay, put back.
        restore: Option<String>,
    },
}

/// The timing of one [`plan`].
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Now, unix seconds.
    pub now_unix: i64,
    /// `admission.deferral.horizon`.
    pub horizon: Duration,
    /// `admission.deferral.caNewPodScaleUpDelay`.
    pub floor: Duration,
}

/// The writes that bring the pods in line: every pod of `wanted` marked with its hold (renewed
/// when less than half the horizon is left), and every pod of `marked` (those carrying our
/// mark) not in `wanted` released. Pure.
pub fn plan(
    wanted: &[(PodState<'_>, &'static str)],
    marked: &[PodState<'_>],
    t: Timing,
) -> Vec<PodChange> {
    let horizon = secs(t.horizon);
    let floor = secs(t.floor);
    let mut out = Vec::new();
    let mut keep: BTreeSet<(&str, &str)> = BTreeSet::new();
    for (pod, hold) in wanted {
        keep.insert((pod.namespace, pod.name));
        let Some(created) = pod.created_unix else {
            continue;
        };
        let age = (t.now_unix - created).max(0);
        let marks = pod.marks.cloned().unwrap_or_default();
        let ours = marks.hold.is_some();
        // The pod's own delay: the one it had before we marked it.
        let was: Option<String> = if ours {
            marks.was.as_deref().map(str::to_owned)
        } else {
            marks.delay.as_deref().map(str::to_owned)
        };
        let current = marks.delay.as_deref().and_then(go_duration_secs);
        if ours
            && marks.hold.as_deref() == Some(*hold)
            && current.is_some_and(|c| c >= age + horizon / 2)
        {
            continue;
        }
        let own = was.as_deref().and_then(go_duration_secs).unwrap_or(0);
        let delay = (age + horizon).max(floor).max(own);
        out.push(PodChange::Mark {
            namespace: pod.namespace.to_owned(),
            name: pod.name.to_owned(),
            hold,
            delay: format!("{delay}s"),
            was,
        });
    }
    for pod in marked {
        if keep.contains(&(pod.namespace, pod.name)) {
            continue;
        }
        let Some(marks) = pod.marks.filter(|m| m.hold.is_some()) else {
            continue;
        };
        out.push(PodChange::Release {
            namespace: pod.namespace.to_owned(),
            name: pod.name.to_owned(),
            restore: marks.was.as_deref().map(str::to_owned),
        });
    }
    out
}

/// Whole seconds of `d`, rounded up, as i64.
fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs() + u64::from(d.subsec_nanos() > 0)).unwrap_or(i64::MAX)
}

/// A Go duration (`"300s"`, `"1h30m"`, `"1.5m"`, `"250ms"`) in whole seconds, rounded up;
/// `None` when it does not parse (CA would refuse it too).
pub fn go_duration_secs(text: &str) -> Option<i64> {
    let mut rest = text.trim();
    if rest == "0" {
        return Some(0);
    }
    let mut nanos: f64 = 0.0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let value: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        nanos += value * scale;
        rest = &rest[unit_end..];
    }
    #[expect(
        clippy::cast_possible_truncation,
        reason = "a pod's delay is far below i64::MAX seconds"
    )]
    let whole = (nanos / 1e9).ceil() as i64;
    Some(whole)
}

/// What the lifecycle loop needs to defer gangs: the pod writer and the timing settings.
#[derive(Debug, Clone)]
pub struct Deferring {
    /// Writes the marks.
    pub marker: PodMarker,
    /// `admission.deferral.horizon`.
    pub horizon: Duration,
    /// `admission.deferral.caNewPodScaleUpDelay`.
    pub floor: Duration,
}

/// Writes [`PodChange`]s.
#[derive(Clone)]
pub struct PodMarker {
    client: kube::Client,
}

impl std::fmt::Debug for PodMarker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodMarker").finish_non_exhaustive()
    }
}

impl PodMarker {
    /// A marker writing through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    /// Applies one change with one JSON merge patch of the pod's annotations (only ours and
    /// CA's delay are named). A pod that is gone needs nothing.
    ///
    /// # Errors
    /// The API server's error.
    pub async fn apply(&self, change: &PodChange) -> Result<(), kube::Error> {
        let text = |v: Option<&str>| v.map_or(serde_json::Value::Null, |v| v.into());
        let mut annotations = serde_json::Map::new();
        let (namespace, name) = match change {
            PodChange::Mark {
                namespace,
                name,
                hold,
                delay,
                was,
            } => {
                annotations.insert(CA_POD_SCALE_UP_DELAY.into(), delay.as_str().into());
                annotations.insert(DEFERRED.into(), (*hold).into());
                annotations.insert(SCALE_UP_DELAY_WAS.into(), text(was.as_deref()));
                (namespace, name)
            }
            PodChange::Release {
                namespace,
                name,
                restore,
            } => {
                annotations.insert(CA_POD_SCALE_UP_DELAY.into(), text(restore.as_deref()));
                annotations.insert(DEFERRED.into(), serde_json::Value::Null);
                annotations.insert(SCALE_UP_DELAY_WAS.into(), serde_json::Value::Null);
                (namespace, name)
            }
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch = serde_json::json!({"metadata": {"annotations": annotations}});
        match pods
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timing = Timing {
        now_unix: 1_000,
        horizon: Duration::from_secs(120),
        floor: Duration::ZERO,
    };

    fn pod<'a>(name: &'a str, created: i64, marks: Option<&'a DeferralMarks>) -> PodState<'a> {
        PodState {
            namespace: "ml",
            name,
            created_unix: Some(created),
            marks,
        }
    }

    fn marks(delay: Option<&str>, hold: Option<&str>, was: Option<&str>) -> DeferralMarks {
        DeferralMarks {
            delay: delay.map(Into::into),
            hold: hold.map(Into::into),
            was: was.map(Into::into),
        }
    }

    #[test]
    fn a_deferred_pod_is_kept_out_for_the_horizon_from_now_and_renewed_only_near_its_end() {
        // 400 s old: the mark is 400 + 120 = 520 s from its creation.
        let got = plan(&[(pod("a-0", 600, None), "no_room")], &[], T);
        assert_eq!(
            got,
            [PodChange::Mark {
                namespace: "ml".into(),
                name: "a-0".into(),
                hold: "no_room",
                delay: "520s".into(),
                was: None,
            }]
        );
        // Marked at 520 s: more than half the horizon left (520 >= 400 + 60), nothing to do.
        let fresh = marks(Some("520s"), Some("no_room"), None);
        assert!(plan(&[(pod("a-0", 600, Some(&fresh)), "no_room")], &[], T).is_empty());
        // Less than half left (450 < 460): renewed.
        let stale = marks(Some("450s"), Some("no_room"), None);
        let got = plan(&[(pod("a-0", 600, Some(&stale)), "no_room")], &[], T);
        assert!(matches!(&got[..], [PodChange::Mark { delay, .. }] if delay == "520s"));
        // Another hold is written at once, so the pod says why it waits.
        let got = plan(&[(pod("a-0", 600, Some(&fresh)), "behind")], &[], T);
        assert!(matches!(&got[..], [PodChange::Mark { hold: "behind", .. }]));
    }

    #[test]
    fn the_pods_own_delay_and_cas_floor_are_never_undercut_and_the_own_one_comes_back() {
        let own = marks(Some("1h"), None, None);
        let got = plan(&[(pod("a-0", 990, Some(&own)), "covered")], &[], T);
        assert!(
            matches!(&got[..], [PodChange::Mark { delay, was: Some(w), .. }] if delay == "3600s" && w == "1h"),
            "{got:?}"
        );
        let floored = Timing {
            floor: Duration::from_secs(600),
            ..T
        };
        let got = plan(&[(pod("b-0", 990, None), "covered")], &[], floored);
        assert!(matches!(&got[..], [PodChange::Mark { delay, .. }] if delay == "600s"));
        // Released: only our marks, and the pod's own delay put back.
        let ours = marks(Some("3600s"), Some("covered"), Some("1h"));
        let someone_elses = marks(Some("10m"), None, None);
        let got = plan(
            &[],
            &[
                pod("a-0", 990, Some(&ours)),
                pod("c-0", 990, Some(&someone_elses)),
            ],
            T,
        );
        assert_eq!(
            got,
            [PodChange::Release {
                namespace: "ml".into(),
                name: "a-0".into(),
                restore: Some("1h".into()),
            }]
        );
    }

    #[test]
    fn a_pod_still_wanted_is_not_released_and_one_without_a_creation_time_is_not_marked() {
        let ours = marks(Some("520s"), Some("no_room"), None);
        let kept = pod("a-0", 600, Some(&ours));
        assert!(plan(&[(kept, "no_room")], &[kept], T).is_empty());
        let unknown = PodState {
            created_unix: None,
            ..pod("x-0", 0, None)
        };
        assert!(plan(&[(unknown, "no_room")], &[], T).is_empty());
    }

    #[test]
    fn go_durations_parse_as_ca_writes_and_reads_them() {
        for (text, want) in [
            ("0", Some(0)),
            ("300s", Some(300)),
            ("1h30m", Some(5400)),
            ("1.5m", Some(90)),
            ("250ms", Some(1)),
            ("2m3s", Some(123)),
            ("", None),
            ("10", None),
            ("5 minutes", None),
            ("-1s", None),
        ] {
            assert_eq!(go_duration_secs(text), want, "{text:?}");
        }
    }
}
