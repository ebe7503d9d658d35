//! Logging setup: an env filter and text or JSON output.

use tracing_subscriber::EnvFilter;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per event, with span fields.
    Json,
}

/// Installs the global subscriber. `RUST_LOG` wins over `default_filter`.
///
/// # Errors
/// When the filter does not parse or a subscriber is already installed.
pub fn init(
    format: LogFormat,
    default_filter: &str,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(s) if !s.is_empty() => EnvFilter::try_new(s)?,
        _ => EnvFilter::try_new(default_filter)?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    }
}
