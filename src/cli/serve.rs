//! `single-flight serve` (SPEC.md §13.5): hold the coordinator of a directory
//! or a cluster in the foreground until SIGTERM or SIGINT.

use tracing::{error, info};

use super::ServeArgs;
use super::exit;
use super::signals::Signals;

/// Runs the subcommand; returns the exit code: 0 after a stop request, 125
/// when the directory or the election failed.
pub async fn serve(args: ServeArgs) -> u8 {
    // Logs go to stderr; RUST_LOG chooses what, `info` by default.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(super::log_colours())
        .try_init();
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(failure) => {
            error!("cannot handle signals: {failure}");
            return exit::FAILED;
        }
    };
    let place = match args.place.place() {
        Ok(place) => place,
        Err(failure) => {
            error!("{failure}");
            return exit::FAILED;
        }
    };
    if let Ok(current) = place.status().await {
        info!(
            pid = current.pid,
            host = current.host.as_deref().unwrap_or("?"),
            epoch = %current.epoch,
            "another process coordinates; waiting to take over when its term ends"
        );
    }
    let builder = match place.builder_with_grace(args.grace) {
        Ok(builder) => builder,
        Err(failure) => {
            error!("{failure}");
            return exit::FAILED;
        }
    };
    let stop = async {
        let received = signals.recv().await;
        info!("{} received; ending the term", received.name());
    };
    let served = if args.while_needed {
        builder.serve_while_needed(stop).await
    } else {
        builder.serve(stop).await
    };
    match served {
        Ok(()) => {
            info!("stopped");
            exit::SUCCESS
        }
        Err(failure) => {
            error!("{failure}");
            exit::FAILED
        }
    }
}
