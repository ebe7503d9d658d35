//! Builders for tests and benchmarks (feature `test-util`, or `cfg(test)`).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::config::{Loaded, ProviderSettings, ServerSettings, Transport};
use crate::model::{
    BackendSpec, Capacity, MemoryBackendSpec, NodeGroupId, NodeGroupSpec, labels,
    quantity::Quantity,
};

/// A memory-backed node group with `[min, max]` bounds, no delays and 8 CPUs / 32Gi per node.
pub fn group(id: &str, min_size: u32, max_size: u32) -> NodeGroupSpec {
    NodeGroupSpec {
        id: NodeGroupId::new(id),
        min_size,
        max_size,
        instance_type: "test.large".into(),
        region: "test-region".into(),
        zone: "test-zone".into(),
        os: "linux".into(),
        arch: "amd64".into(),
        capacity: Some(Capacity {
            cpu: Quantity::from_units(8),
            memory: Quantity::from_units(32 << 30),
            ephemeral_storage: Quantity::from_units(100 << 30),
            pods: 110,
        }),
        reserved: Capacity::default(),
        gpu: None,
        rdma: None,
        csi: BTreeMap::new(),
        labels: BTreeMap::new(),
        taints: Vec::new(),
        topology: BTreeMap::new(),
        price_per_hour: None,
        backend: memory_backend(Duration::ZERO, Duration::ZERO),
        autoscaling_options: None,
        reservation: crate::model::ReservationSpec::default(),
        source: format!("{id}.yaml").into(),
    }
}

/// Memory backend settings with the given delays and no failures.
pub fn memory_backend(create_delay: Duration, provision_delay: Duration) -> BackendSpec {
    BackendSpec::Memory(MemoryBackendSpec {
        create_delay,
        provision_delay,
        failure: None,
    })
}

/// A configuration over `groups` (sorted by id), plaintext on ephemeral loopback ports.
pub fn loaded(mut groups: Vec<NodeGroupSpec>) -> Loaded {
    groups.sort_by(|a, b| a.id.cmp(&b.id));
    let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    Loaded {
        provider: ProviderSettings {
            server: ServerSettings {
                address: any,
                metrics_address: any,
                transport: Transport::Plaintext {
                    non_loopback: false,
                },
                connections: Default::default(),
                shutdown_grace_period: crate::config::DEFAULT_SHUTDOWN_GRACE_PERIOD,
                tls_poll_interval: crate::config::DEFAULT_TLS_POLL_INTERVAL,
            },
            gpu_label: labels::DEFAULT_GPU_LABEL.to_owned(),
            gpu_types: None,
            node_groups_dir: "nodegroups".into(),
            kubernetes: Default::default(),
            admission_policy: Default::default(),
            admission_order: Default::default(),
            deferral: Default::default(),
            audit: None,
            lifecycle: Default::default(),
            leader_election: None,
        },
        groups,
    }
}

/// A DaemonSet `name` (`namespace/name`) whose pods select nodes by `selector` and tolerate
/// each key in `tolerate` with `operator: Exists` (every effect).
pub fn daemon_set(
    name: &str,
    selector: &[(&str, &str)],
    tolerate: &[&str],
) -> crate::model::reservation::DaemonSetDemand {
    use crate::model::{PodDemand, Toleration, TolerationOperator};
    crate::model::reservation::DaemonSetDemand {
        name: name.to_owned(),
        pod: PodDemand {
            node_selector: selector
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            tolerations: tolerate
                .iter()
                .map(|key| Toleration {
                    key: (*key).to_owned(),
                    operator: TolerationOperator::Exists,
                    value: String::new(),
                    effect: None,
                })
                .collect(),
            ..PodDemand::default()
        },
    }
}
