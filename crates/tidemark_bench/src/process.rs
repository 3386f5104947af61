//! A `tidemark serve` child process of a benchmark: the server executable of `--server-bin`
//! ([`ServerBin`]), on a free loopback port, with its own data directory and environment
//! overrides, its log in a file beside the data; and what a benchmark reads about it
//! (`/metrics`, CPU time from `/proc`, [`CpuMark`]).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use http_body_util::Full;
use hyper::Request;
use tokio::process::{Child, Command};

use super::load::{HttpClient, call};

/// The `--server-bin` flag of every subcommand.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServerBin {
    /// The `tidemark` executable to start as `tidemark serve` [default: `tidemark` beside this
    /// executable (the same target dir), else `tidemark` on PATH]. Two builds compare by running
    /// the benchmark once with each.
    #[arg(long, value_name = "PATH")]
    pub server_bin: Option<PathBuf>,
}

impl ServerBin {
    /// The executable to start: the flag's path if it is a file; else `tidemark` in the
    /// directory of `own_exe` (this program); else the first `tidemark` file on `path` (a
    /// `PATH`-style list). Errors: the flag's path is not a file; or neither default exists
    /// (the message names both places).
    pub(crate) fn resolve_from(
        &self,
        own_exe: Option<&Path>,
        path: Option<&std::ffi::OsStr>,
    ) -> anyhow::Result<PathBuf> {
        if let Some(bin) = &self.server_bin {
            if !bin.is_file() {
                bail!("--server-bin {}: no such file", bin.display());
            }
            return Ok(bin.clone());
        }
        let beside = own_exe
            .and_then(Path::parent)
            .map(|dir| dir.join(SERVER_EXE));
        if let Some(exe) = beside.as_ref().filter(|p| p.is_file()) {
            return Ok(exe.clone());
        }
        if let Some(exe) = path
            .into_iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join(SERVER_EXE))
            .find(|p| p.is_file())
        {
            return Ok(exe);
        }
        bail!(
            "no `{SERVER_EXE}` server executable: none beside tidemark-bench ({}) and none on \
             PATH; build it (`cargo build -p tidemark`, with `--release` for a release \
             tidemark-bench) or pass --server-bin PATH",
            beside.map_or_else(
                || "its directory is unknown".into(),
                |p| p.display().to_string()
            )
        )
    }

    /// [`ServerBin::resolve_from`] this executable and `PATH`.
    pub(crate) fn resolve(&self) -> anyhow::Result<PathBuf> {
        let own = std::env::current_exe().ok();
        self.resolve_from(own.as_deref(), std::env::var_os("PATH").as_deref())
    }
}

/// The server executable's file name.
const SERVER_EXE: &str = "tidemark";

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
    /// Starts `<exe> serve` on `data_dir` and waits until `GET /readyz` answers 200. `env`
    /// sets (`Some`) or removes (`None`) environment variables of the child, e.g.
    /// `("TIDEMARK_CHAT__MODE", Some("tiered"))`.
    pub(super) async fn start(
        exe: &Path,
        client: &HttpClient,
        data_dir: &Path,
        log: &Path,
        env: &[(&str, Option<&str>)],
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(data_dir)?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let out = std::fs::File::create(log)
            .with_context(|| format!("creating the server log {}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(exe);
        cmd.arg("serve")
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .env("RUST_LOG", "warn");
        for (key, value) in env {
            match value {
                Some(v) => cmd.env(key, v),
                None => cmd.env_remove(key),
            };
        }
        let child = cmd
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

    /// `kill -9`: SIGKILL (no shutdown, nothing written beyond what was already durable), then
    /// waits for the exit.
    pub(super) async fn kill9(mut self) -> anyhow::Result<()> {
        self.child
            .kill()
            .await
            .with_context(|| format!("kill -9 of the server on {}", self.addr))
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

/// The server's `/metrics` (Prometheus text): sample name with its labels → value.
pub(super) async fn scrape_metrics(
    client: &HttpClient,
    addr: SocketAddr,
) -> anyhow::Result<HashMap<String, f64>> {
    let req = Request::get(format!("http://{addr}/metrics")).body(Full::default())?;
    let (status, body) = call(client, req)
        .await
        .map_err(|f| anyhow::anyhow!("GET /metrics: {f:?}"))?;
    if !status.is_success() {
        bail!("GET /metrics: {status}");
    }
    let text = String::from_utf8_lossy(&body);
    Ok(text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse::<f64>().ok()?))
        })
        .collect())
}

/// utime + stime of a process, in clock ticks.
pub(super) fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Bytes written so far to the block device that holds `path`, from `/proc/diskstats`
/// (sectors written × 512; the device is found by the major:minor of `path`'s filesystem).
/// `None` where the device is not listed (tmpfs, overlay without a block device).
pub(super) fn disk_written_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).ok()?.dev();
    let (major, minor) = (u64::from(libc::major(dev)), u64::from(libc::minor(dev)));
    let stats = std::fs::read_to_string("/proc/diskstats").ok()?;
    stats.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (ma, mi): (u64, u64) = (f.first()?.parse().ok()?, f.get(1)?.parse().ok()?);
        let sectors: u64 = f.get(9)?.parse().ok()?;
        (ma == major && mi == minor).then_some(sectors * 512)
    })
}

/// Clock ticks per second of [`cpu_ticks`].
pub(super) fn clock_ticks_per_sec() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Busy time of the whole machine (all CPUs: user, nice, system, irq, softirq, steal; not idle
/// or iowait), in the clock ticks of [`cpu_ticks`], from `/proc/stat`.
pub(super) fn machine_busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal
    Some(v.get(..3)?.iter().sum::<u64>() + v.get(5..8)?.iter().sum::<u64>())
}

/// CPU time of this process's children that have been waited for (`cutime + cstime`), in
/// the clock ticks of [`cpu_ticks`]: the cost of a tool such as `wrk` run to completion.
pub(super) fn waited_children_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = rest.split_whitespace().skip(13);
    let cutime: u64 = fields.next()?.parse().ok()?;
    let cstime: u64 = fields.next()?.parse().ok()?;
    Some(cutime + cstime)
}

/// CPU used during a run, in cores (1.0 = one core busy).
#[derive(Debug, Clone, Copy)]
pub(super) struct Cpu {
    /// The server process.
    pub(super) server: Option<f64>,
    /// This process and the children it waited for (e.g. wrk).
    pub(super) generator: Option<f64>,
    /// Everything else on the machine (other work disturbs the figures).
    pub(super) others: Option<f64>,
}

/// CPU counters at one instant; [`CpuMark::since`] turns two of them into a [`Cpu`].
#[derive(Debug)]
pub(super) struct CpuMark {
    at: Instant,
    server: Option<u64>,
    generator: Option<u64>,
    machine: Option<u64>,
}

impl CpuMark {
    /// The counters now, for the server with process id `pid`.
    pub(super) fn now(pid: Option<u32>) -> Self {
        Self {
            at: Instant::now(),
            server: pid.and_then(cpu_ticks),
            generator: cpu_ticks(std::process::id())
                .and_then(|own| Some(own + waited_children_ticks()?)),
            machine: machine_busy_ticks(),
        }
    }

    /// CPU used from this mark until now.
    pub(super) fn since(&self, pid: Option<u32>) -> Cpu {
        let end = Self::now(pid);
        let wall = (end.at - self.at).as_secs_f64();
        let cores =
            |a: Option<u64>, b: Option<u64>| Some((b? - a?) as f64 / clock_ticks_per_sec() / wall);
        let (server, generator) = (
            cores(self.server, end.server),
            cores(self.generator, end.generator),
        );
        Cpu {
            server,
            generator,
            others: cores(self.machine, end.machine)
                .and_then(|all| Some((all - server? - generator?).max(0.0))),
        }
    }
}

impl std::fmt::Display for Cpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let opt = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.2}"));
        write!(
            f,
            "cpu (cores): server {}, generator {}, other processes {}",
            opt(self.server),
            opt(self.generator),
            opt(self.others)
        )
    }
}

#[cfg(test)]
mod tests;
