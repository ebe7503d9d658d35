//! Connection refusals of the two listeners (`gangscaler_connections_refused_total`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Labels of the refused-connection counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// `grpc` or `metrics`.
    pub listener: &'static str,
    /// `per_peer` (the source address holds its `maxPerPeer` connections) or `full` (the
    /// listener holds its maximum, or all but the slots reserved for certified clients).
    pub reason: &'static str,
}

/// The listeners' connection families.
#[derive(Debug, Clone, Default)]
pub struct ConnectionMetrics {
    /// Connections closed as soon as they were accepted, by listener and reason.
    pub refused: Family<RefusedLabels, Counter>,
}

impl ConnectionMetrics {
    /// Counts one refused connection.
    pub fn refused(&self, listener: &'static str, reason: &'static str) {
        self.refused
            .get_or_create(&RefusedLabels { listener, reason })
            .inc();
    }

    /// Registers `connections_refused` under `registry` (the `gangscaler` prefix), every
    /// label pair present from the start so that `increase()` sees the first refusal.
    pub(super) fn register(&self, registry: &mut Registry) {
        for listener in ["grpc", "metrics"] {
            for reason in ["per_peer", "full"] {
                let _ = self
                    .refused
                    .get_or_create(&RefusedLabels { listener, reason });
            }
        }
        registry.sub_registry_with_prefix("connections").register(
            "refused",
            "connections closed as soon as they were accepted, by listener (grpc, metrics) and reason (per_peer: the source address holds its maxPerPeer connections; full: the listener is full, or full but for the slots reserved for certified clients)",
            self.refused.clone(),
        );
    }
}
