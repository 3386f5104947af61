//! Load generators (`tidemark bench …`): they drive a server over loopback HTTP (or a
//! subsystem in process) and print figures. Not tests: nothing here asserts a speed.
//!
//! Shared pieces: [`load`] (the open-loop driver and its HTTP client) and [`process`] (a
//! `tidemark serve` child on a free port, its metrics and CPU time).

pub mod chat;
pub mod links;
mod load;
mod process;

use clap::Subcommand;

/// `tidemark bench <what>`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Chat SEND_ACK latency at constant offered rates, for each chat mode.
    Chat(chat::ChatBenchArgs),
    /// Links: rewrite throughput, render+store rate, link-store insert rate, redirector load.
    Links(links::LinksBenchArgs),
}

/// Runs the chosen benchmark.
pub async fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Chat(args) => chat::run(args).await,
        BenchCommand::Links(args) => links::run(args).await,
    }
}

/// Runs `make()`'s future on its own single-threaded runtime in a dedicated thread and waits
/// for it. A load generator on a small machine shared with the server costs less CPU as one
/// thread that never hands work to another than as a work-stealing pool.
pub(crate) async fn on_own_thread<F, Fut, T>(name: &str, make: F) -> anyhow::Result<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
    T: Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(make()));
            let _ = tx.send(result);
        })?;
    rx.await
        .map_err(|_| anyhow::anyhow!("the {name} thread panicked"))?
}
