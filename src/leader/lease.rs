//! [`KubeLeases`]: the Lease through the API server. Takes and renewals are replaces
//! conditional on the `resourceVersion` read (HTTP 409 on a race), creation a create
//! (HTTP 409 if another replica created it first).

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use super::{Error, LeaseRecord, LeaseStore, Result};

/// The Lease `namespace/name` through a Kubernetes client.
#[derive(Clone)]
pub struct KubeLeases {
    api: Api<Lease>,
    namespace: String,
    name: String,
}

impl std::fmt::Debug for KubeLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeLeases")
            .field("lease", &self.describe())
            .finish()
    }
}

impl KubeLeases {
    /// The Lease `name` in `namespace`, through `client`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    fn to_lease(&self, r: &LeaseRecord) -> Lease {
        let time = |ms: Option<i64>| {
            ms.and_then(|ms| Timestamp::from_millisecond(ms).ok())
                .map(MicroTime)
        };
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                resource_version: r.version.clone(),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: r.holder.clone(),
                lease_duration_seconds: r.lease_duration_s,
                acquire_time: time(r.acquire_ms),
                renew_time: time(r.renew_ms),
                lease_transitions: Some(r.transitions),
                ..LeaseSpec::default()
            }),
        }
    }
}

fn record(lease: Lease) -> LeaseRecord {
    let spec = lease.spec.unwrap_or_default();
    let ms = |t: Option<MicroTime>| t.map(|t| t.0.as_millisecond());
    LeaseRecord {
        holder: spec.holder_identity,
        lease_duration_s: spec.lease_duration_seconds,
        acquire_ms: ms(spec.acquire_time),
        renew_ms: ms(spec.renew_time),
        transitions: spec.lease_transitions.unwrap_or(0),
        version: lease.metadata.resource_version,
    }
}

fn api_error(e: kube::Error) -> Error {
    match &e {
        kube::Error::Api(s) if s.is_conflict() || s.is_already_exists() => Error::Conflict,
        _ => Error::Api(e),
    }
}

#[async_trait]
impl LeaseStore for KubeLeases {
    fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    async fn get(&self) -> Result<Option<LeaseRecord>> {
        self.api
            .get_opt(&self.name)
            .await
            .map(|l| l.map(record))
            .map_err(Error::Api)
    }

    async fn create(&self, r: &LeaseRecord) -> Result<LeaseRecord> {
        let mut lease = self.to_lease(r);
        lease.metadata.resource_version = None;
        self.api
            .create(&PostParams::default(), &lease)
            .await
            .map(record)
            .map_err(api_error)
    }

    async fn replace(&self, r: &LeaseRecord) -> Result<LeaseRecord> {
        self.api
            .replace(&self.name, &PostParams::default(), &self.to_lease(r))
            .await
            .map(record)
            .map_err(api_error)
    }
}
