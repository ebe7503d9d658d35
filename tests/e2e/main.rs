//! End-to-end tests against a real control plane (etcd, kube-apiserver, kube-scheduler,
//! kube-controller-manager, kwok; see `harness.rs`) and the real cluster-autoscaler, built
//! from the upstream sources in `../shared/cluster-autoscaler`.
//!
//! - `ca_scaleup`, `ca_lifecycle`, `ca_repair`, `ca_spread`, `ca_wire`, `ca_ha`: every gang
//!   scenario, driven by CA calling gangscaler over `externalgrpc` (see `scenario.rs`); each
//!   records a row of `docs/e2e-results.md`.
//! - `alone`: gangscaler without CA (the kwok backend, the cluster view, and gangscaler's own
//!   side of the gRPC contract).
//! - `doctor`: `gangscaler doctor` against the row's control plane, with the harness's own CA
//!   and scheduler flags.
//! - `outage`: gangscaler alone while kube-apiserver is stopped and started again.
//! - `deploy`: the Helm chart (`chart.rs`) applied to the API server; gangscaler under the
//!   chart's ServiceAccount, with every permission, and without one. Every CA-driven scenario
//!   runs gangscaler under that ServiceAccount too (`Scenario::start`).
//!
//! These tests need the binaries from `tests/e2e/build.sh`; they are `#[ignore]`d so a plain
//! `cargo test` does not need them. Run: `tests/e2e/build.sh --legacy-ca && cargo test
//! --all-features --test e2e -- --ignored --test-threads=1`.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests abort loudly"
)]
#![expect(
    clippy::disallowed_methods,
    reason = "end-to-end tests time real clusters with the real clocks"
)]

#[path = "../common/mod.rs"]
mod common;

mod alone;
mod alone_capi;
mod ca_capi;
mod ca_composite;
mod ca_defer;
mod ca_ha;
mod ca_lifecycle;
mod ca_repair;
mod ca_scaleup;
mod ca_spread;
mod ca_wire;
mod capi;
mod chart;
mod deploy;
mod doctor;
mod harness;
mod idle;
mod migrate;
mod outage;
mod scenario;
mod support;

use std::time::Duration;

use harness::eventually;
use kube::api::{Api, ListParams};
use support::{
    create_dynamic, create_gang_object, gangscaler_bin, start_gangscaler, start_gangscaler_with_env,
};

/// The reasons of every events.k8s.io Event on the gang object named `name` now.
async fn gang_event_reasons(client: &kube::Client, name: &str) -> Vec<String> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.reason)
        .collect()
}

/// The note of the event with `reason` on the gang object named `name` (waits for it).
async fn gang_event(client: &kube::Client, name: &str, reason: &str) -> String {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    let what = format!("event {reason} on {name}");
    eventually(&what, Duration::from_secs(10), || {
        let api = api.clone();
        async move {
            let list = api.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find_map(|e| {
                let on = e.regarding.as_ref()?.name.as_deref() == Some(name);
                (on && e.reason.as_deref() == Some(reason)).then(|| e.note.unwrap_or_default())
            })
        }
    })
    .await
}

/// Deletes the gang object `name` (a PodGroup, or a Workload on v1alpha1) of gang API `api`.
async fn delete_dynamic(client: &kube::Client, api: &str, name: &str) {
    let kind = if api.ends_with("/v1alpha1") {
        "Workload"
    } else {
        "PodGroup"
    };
    let (group, version) = api.split_once('/').unwrap();
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let objects: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ar);
    objects
        .delete(name, &kube::api::DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting {kind} {name}: {e}"));
}

/// The (reason, message) of every core/v1 Event about pod `pod` (CA records its
/// `TriggeredScaleUp` / `NotTriggerScaleUp` there).
async fn pod_events(client: &kube::Client, pod: &str) -> Vec<(String, String)> {
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(pod))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}
