//! [`TlsMetrics`]: the served TLS material and its reloads (`gangscaler_tls_*`).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::OutcomeLabels;

/// Metrics of the served TLS material and its reloads (`gangscaler_tls_*`).
#[derive(Debug, Clone, Default)]
pub struct TlsMetrics {
    /// Reloads after a change of the TLS files, by outcome (`success`, `failure`).
    pub reloads: Family<OutcomeLabels, Counter>,
    /// Unix time at which the served material was last loaded (at start, then at each
    /// successful reload).
    pub last_reload_success: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// The notAfter of the served certificate (the leaf), as Unix time.
    pub certificate_expiration: Gauge,
    /// 1 while the served material is what the files hold, 0 while they hold a change that
    /// was rejected.
    pub valid: Gauge,
}

impl TlsMetrics {
    /// Records a successful (re)load at `now_ms` of a certificate expiring at `not_after`
    /// (Unix seconds, if it could be read); `reload` is false for the load at start.
    pub fn loaded(&self, now_ms: i64, not_after: Option<i64>, reload: bool) {
        if reload {
            self.reloads
                .get_or_create(&OutcomeLabels { outcome: "success" })
                .inc();
        }
        self.last_reload_success.set(now_ms as f64 / 1000.0);
        if let Some(t) = not_after {
            self.certificate_expiration.set(t);
        }
        self.valid.set(1);
    }

    /// Records a change of the files that could not be loaded.
    pub fn rejected(&self) {
        self.reloads
            .get_or_create(&OutcomeLabels { outcome: "failure" })
            .inc();
        self.valid.set(0);
    }
}
