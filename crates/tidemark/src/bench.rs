//! Load generators (`tidemark bench …`): they drive a server over loopback HTTP and print
//! figures. Not tests: nothing here asserts a speed.

pub mod chat;

use clap::Subcommand;

/// `tidemark bench <what>`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Chat SEND_ACK latency at constant offered rates, for each chat mode.
    Chat(chat::ChatBenchArgs),
}

/// Runs the chosen benchmark.
pub async fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Chat(args) => chat::run(args).await,
    }
}
