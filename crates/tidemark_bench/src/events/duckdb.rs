//! DuckDB (PyPI's `duckdb`, driven by `duckdb_peer.py` in a `python3` child) as the peer of the
//! rollup and report parts: the same rows in a DuckDB database file, the same question in SQL,
//! runs interleaved with Tidemark's so that both see the same machine.

use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, bail};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const SCRIPT: &str = include_str!("duckdb_peer.py");

/// How to install the peer, for the message when it is missing.
pub(super) const INSTALL: &str = "python3 -m pip install duckdb";

/// One timed run of the peer's query.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct PeerRun {
    /// Wall seconds of the query, result read whole.
    pub(super) secs: f64,
    /// Rows of the result.
    pub(super) rows: u64,
    /// Sum of each numeric column of the result, in column order.
    pub(super) sums: Vec<f64>,
}

impl PeerRun {
    /// Whether this run answered `rows`, each `[listing, total, uniques]`: as many rows, and
    /// the result's numeric columns (listing, total, uniques) sum to the same.
    pub(super) fn answers(&self, rows: impl IntoIterator<Item = [f64; 3]>) -> bool {
        let (mut n, mut sums) = (0u64, [0.0; 3]);
        for row in rows {
            n += 1;
            for (s, v) in sums.iter_mut().zip(row) {
                *s += v;
            }
        }
        self.rows == n && self.sums == sums
    }
}

/// A running peer with its tables loaded.
#[derive(Debug)]
pub(super) struct DuckDb {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

/// Whether `python3` can import `duckdb`.
pub(super) async fn available() -> bool {
    Command::new("python3")
        .args(["-c", "import duckdb"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|s| s.success())
}

impl DuckDb {
    /// Starts the peer on a new database file `db` and loads each `(table, format, file)`
    /// (`format` "parquet", or "csv" with a header line), then waits until it is ready to run
    /// `query`.
    pub(super) async fn start(
        db: &Path,
        load: &[(&str, &str, &Path)],
        query: &str,
    ) -> anyhow::Result<Self> {
        let spec = serde_json::json!({
            "db": db,
            "load": load.iter().map(|(t, f, p)| serde_json::json!([t, f, p])).collect::<Vec<_>>(),
            "query": query,
        });
        let mut child = Command::new("python3")
            .args(["-c", SCRIPT, &spec.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting python3 for the DuckDB peer")?;
        let stdin = child.stdin.take().context("the peer's stdin")?;
        let stdout = child.stdout.take().context("the peer's stdout")?;
        let mut peer = Self {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        };
        peer.answer::<serde_json::Value>()
            .await
            .context("loading the DuckDB peer's tables")?;
        Ok(peer)
    }

    async fn answer<T: for<'de> Deserialize<'de>>(&mut self) -> anyhow::Result<T> {
        match self.lines.next_line().await? {
            Some(line) => Ok(serde_json::from_str(&line)
                .with_context(|| format!("the DuckDB peer said {line:?}"))?),
            None => bail!(
                "the DuckDB peer stopped ({}); its error is above",
                self.child.wait().await?
            ),
        }
    }

    async fn ask(&mut self, line: &str) -> anyhow::Result<()> {
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.write_all(b"\n").await?;
        Ok(self.stdin.flush().await?)
    }

    /// One timed run of the query.
    pub(super) async fn run(&mut self) -> anyhow::Result<PeerRun> {
        self.ask("run").await?;
        self.answer().await
    }

    /// Runs the query on `n` worker threads from now on (0: DuckDB's default, one per core).
    pub(super) async fn set_threads(&mut self, n: usize) -> anyhow::Result<()> {
        self.ask(&format!("threads {n}")).await?;
        self.answer::<serde_json::Value>().await?;
        Ok(())
    }

    /// The database file's size in bytes.
    pub(super) async fn bytes(&mut self) -> anyhow::Result<u64> {
        #[derive(Deserialize)]
        struct Bytes {
            bytes: u64,
        }
        self.ask("bytes").await?;
        Ok(self.answer::<Bytes>().await?.bytes)
    }
}
