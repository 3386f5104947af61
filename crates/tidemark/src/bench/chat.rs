//! `tidemark bench chat` (being written).

/// Arguments of `tidemark bench chat`.
#[derive(Debug, clap::Args)]
pub struct ChatBenchArgs {}

/// Runs the chat benchmark.
pub async fn run(_args: ChatBenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("tidemark bench chat is not built yet")
}
