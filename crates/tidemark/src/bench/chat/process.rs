//! A `tidemark serve` child process of the benchmark: this same executable, on a free loopback
//! port, with its own data directory and chat mode, its log in a file beside the data.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use http_body_util::Full;
use hyper::Request;
use tokio::process::{Child, Command};

use super::load::{HttpClient, call};

/// A running server.
#[derive(Debug)]
pub(super) struct ServerProcess {
    child: Child,
    /// Where it listens.
    pub(super) addr: SocketAddr,
    /// Its stderr/stdout.
    pub(super) log: PathBuf,
}

fn free_port() -> anyhow::Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(l.local_addr()?.port())
}

/// The last `lines` lines of the file at `path` (for error messages).
pub(super) fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl ServerProcess {
    /// Starts `tidemark serve` in `mode` on `data_dir` and waits until `GET /readyz` answers 200.
    pub(super) async fn start(
        client: &HttpClient,
        mode: &str,
        data_dir: &Path,
        log: &Path,
    ) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("locating the tidemark executable")?;
        std::fs::create_dir_all(data_dir)?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let out = std::fs::File::create(log)
            .with_context(|| format!("creating the server log {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new(&exe)
            .arg("serve")
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .env("TIDEMARK_CHAT__MODE", mode)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} serve", exe.display()))?;
        let mut server = Self {
            child,
            addr,
            log: log.to_owned(),
        };
        server.wait_ready(client, Duration::from_secs(30)).await?;
        Ok(server)
    }

    async fn wait_ready(&mut self, client: &HttpClient, within: Duration) -> anyhow::Result<()> {
        let uri: hyper::Uri = format!("http://{}/readyz", self.addr).parse()?;
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "the server exited before it was ready ({status}); its log {}:\n{}",
                    self.log.display(),
                    log_tail(&self.log, 20)
                );
            }
            let req = Request::get(uri.clone()).body(Full::default())?;
            if let Ok((s, _)) = call(client, req).await
                && s.is_success()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the server on {} was not ready within {within:?}; its log {}:\n{}",
                    self.addr,
                    self.log.display(),
                    log_tail(&self.log, 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The process id (while it runs).
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends SIGTERM (graceful shutdown) and waits up to `within`; kills it after that.
    pub(super) async fn stop(mut self, within: Duration) -> anyhow::Result<ExitStatus> {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status();
        }
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => {
                self.child.kill().await?;
                bail!(
                    "the server did not stop within {within:?} of SIGTERM and was killed; its log {}:\n{}",
                    self.log.display(),
                    log_tail(&self.log, 20)
                )
            }
        }
    }
}
