//! The `tidemark-bench` binary: `chat`, `links`, `events` and `soak` (see the crate
//! documentation for what each measures and how it starts `tidemark serve`).

use clap::Parser;
use tidemark_bench::BenchCommand;

#[derive(Debug, Parser)]
#[command(
    name = "tidemark-bench",
    version,
    about = "Tidemark's load generators: they start `tidemark serve` children (--server-bin) \
             and the subsystems in process, and print figures"
)]
struct Cli {
    #[command(subcommand)]
    command: BenchCommand,
}

/// Runs the benchmark; on an error prints it once, with its causes on the same line (`Error:
/// <what failed>: <why>`), and exits with code 1, as `tidemark` does. Usage errors are clap's
/// (code 2).
fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(tidemark_bench::run(cli.command))
}
