//! gangscaler binary: parse the command line, set up logging, run, set the exit code.

use std::process::ExitCode;

use clap::Parser;
use gangscaler::cli::{self, Cli};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = gangscaler::telemetry::init(cli.log_format, &cli.log) {
        eprintln!("error: setting up logging: {e}");
        return ExitCode::from(2);
    }
    if let Err(e) = gangscaler::signals::survive_write_signals() {
        eprintln!("error: installing the SIGXFSZ handler: {e}");
        return ExitCode::from(2);
    }
    match cli::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
