//! Test support: a real InfluxDB 1.x server (`influxd`, Debian's `influxdb` package, installed
//! by `scripts/test`) started on a free loopback port with its data in a temporary directory,
//! stopped and removed on drop, and an S3-compatible server ([`S3Server`]) for the archive.
//! Used by this crate's tests and the server's end-to-end tests.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod s3;

pub use s3::S3Server;

/// A running `influxd` (see the module docs).
#[derive(Debug)]
pub struct InfluxServer {
    child: Option<Child>,
    dir: PathBuf,
    /// `[http] max-row-limit` (0: InfluxDB's default, no limit).
    max_row_limit: usize,
    /// The HTTP port on 127.0.0.1.
    pub port: u16,
    rpc_port: u16,
}

/// A loopback port free now and never handed out before in this process. The servers bind
/// their ports only after this returns, and a stopped server keeps its port for its restart:
/// without the record, parallel tests could be given the same port, and one test would talk
/// to another's server.
fn free_port() -> std::io::Result<u16> {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut given = GIVEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if given.insert(port) {
            return Ok(port);
        }
    }
}

impl InfluxServer {
    /// Starts `influxd run` (the binary named by `TEST_INFLUXD`, default `influxd` on the
    /// `PATH`) and waits until its HTTP port accepts connections (at most 20 s).
    pub fn start() -> std::io::Result<Self> {
        Self::start_with_max_row_limit(0)
    }

    /// Like [`InfluxServer::start`], with `[http] max-row-limit = n`: a query answers at most
    /// `n` rows (what a production server may be configured to do).
    pub fn start_with_max_row_limit(n: usize) -> std::io::Result<Self> {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tidemark-influx-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let mut server = Self {
            child: None,
            dir,
            max_row_limit: n,
            port: free_port()?,
            rpc_port: free_port()?,
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        let d = self.dir.display();
        // `[[udp]]`, not `[udp]`: InfluxDB 1.6 reads the UDP section as an array of tables.
        let config = format!(
            "reporting-disabled = true
bind-address = \"127.0.0.1:{rpc}\"
[meta]
  dir = \"{d}/meta\"
[data]
  dir = \"{d}/data\"
  wal-dir = \"{d}/wal\"
  query-log-enabled = false
  # The cache goes to TSM files, and a shard is compacted fully, a second after writes stop
  # (defaults 10 min and 4 h), so a test or a benchmark sees the data as InfluxDB keeps it at
  # rest.
  cache-snapshot-write-cold-duration = \"1s\"
  compact-full-write-cold-duration = \"1s\"
  # No cardinality limits (defaults: 100,000 values per tag, 1,000,000 series): the schema
  # bench measures what identifiers as tags cost without them, as seed 002 saw it.
  max-values-per-tag = 0
  max-series-per-database = 0
[http]
  bind-address = \"127.0.0.1:{port}\"
  log-enabled = false
  max-row-limit = {rows}
[[udp]]
  enabled = false
[monitor]
  store-enabled = false
[continuous_queries]
  enabled = false
",
            rpc = self.rpc_port,
            port = self.port,
            rows = self.max_row_limit
        );
        let path = self.dir.join("influxdb.conf");
        std::fs::write(&path, config)?;
        let log = std::fs::File::create(self.dir.join("influxd.log"))?;
        let bin = std::env::var("TEST_INFLUXD").unwrap_or_else(|_| "influxd".into());
        let child = Command::new(bin)
            .arg("run")
            .arg("-config")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "influxd did not listen on {} within 20 s (log: {}/influxd.log)",
                    self.port, d
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The process id of the running `influxd` (e.g. to read its memory in `/proc`).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Bytes on disk of its data: `(TSM files and indexes, write-ahead log)`.
    pub fn data_bytes(&self) -> (u64, u64) {
        (
            tree_bytes(&self.dir.join("data")),
            tree_bytes(&self.dir.join("wal")),
        )
    }

    /// The Tidemark URL of database `db` on this server: `influxdb://127.0.0.1:<port>/<db>`.
    pub fn url(&self, db: &str) -> String {
        format!("influxdb://127.0.0.1:{}/{db}", self.port)
    }

    /// Stops the server (SIGKILL), keeping its data: the "InfluxDB down" case.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and data after [`InfluxServer::stop`].
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.stop();
        self.spawn()
    }
}

/// Bytes of the files under `dir`, recursively (0 if missing).
fn tree_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => tree_bytes(&e.path()),
                Ok(_) => e.metadata().map_or(0, |m| m.len()),
                Err(_) => 0,
            })
            .sum()
    })
}

impl Drop for InfluxServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
