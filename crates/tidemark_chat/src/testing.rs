//! Test wrappers around the ports (STYLE.md: counting, failing on demand), used by the fault
//! tests of the archiver and available to any backend's conformance run; [`RedisServer`], a
//! private durable `redis-server` for the Redis hot-store tests,
//! [`RedisCluster`], three of them as a Redis Cluster, and [`KafkaBroker`], a private tansu
//! broker for the Kafka-protocol outbox tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;

use crate::error::Result;
use crate::model::{IndexEntry, MessageRecord};
use crate::ports::Archive;
use tidemark_core::store::StoreError;

/// Forwards to an inner archive, but fails the next `n` calls of a chosen write.
#[derive(Debug)]
pub struct FaultyArchive {
    inner: Arc<dyn Archive>,
    fail_records: AtomicUsize,
    fail_index: AtomicUsize,
    /// Calls of `put_records` (including failed ones).
    pub record_writes: AtomicUsize,
    /// Calls of `put_index` (including failed ones).
    pub index_writes: AtomicUsize,
}

impl FaultyArchive {
    /// Wraps `inner`; nothing fails until asked.
    pub fn new(inner: Arc<dyn Archive>) -> Self {
        Self {
            inner,
            fail_records: AtomicUsize::new(0),
            fail_index: AtomicUsize::new(0),
            record_writes: AtomicUsize::new(0),
            index_writes: AtomicUsize::new(0),
        }
    }
    /// The next `n` `put_records` calls fail without writing.
    pub fn fail_next_records(&self, n: usize) {
        self.fail_records.store(n, Ordering::SeqCst);
    }
    /// The next `n` `put_index` calls fail without writing.
    pub fn fail_next_index(&self, n: usize) {
        self.fail_index.store(n, Ordering::SeqCst);
    }
}

fn take_failure(counter: &AtomicUsize) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

#[async_trait]
impl Archive for FaultyArchive {
    async fn put_records(&self, records: &[MessageRecord]) -> Result<()> {
        self.record_writes.fetch_add(1, Ordering::SeqCst);
        if take_failure(&self.fail_records) {
            return Err(StoreError::unavailable("sqlite", "injected put_records failure").into());
        }
        self.inner.put_records(records).await
    }
    async fn put_index(&self, entries: &[IndexEntry], through: Option<(u32, u64)>) -> Result<()> {
        self.index_writes.fetch_add(1, Ordering::SeqCst);
        if take_failure(&self.fail_index) {
            return Err(StoreError::unavailable("sqlite", "injected put_index failure").into());
        }
        self.inner.put_index(entries, through).await
    }
    async fn index_range(&self, t: &str, c: &str, lo: u64, hi: u64) -> Result<Vec<IndexEntry>> {
        self.inner.index_range(t, c, lo, hi).await
    }
    async fn records(&self, t: &str, c: &str, seqs: &[u64]) -> Result<Vec<MessageRecord>> {
        self.inner.records(t, c, seqs).await
    }
    async fn earliest_seq(&self, t: &str, c: &str, now: i64) -> Result<Option<u64>> {
        self.inner.earliest_seq(t, c, now).await
    }
    async fn purge_expired(&self, now: i64, batch: usize) -> Result<usize> {
        self.inner.purge_expired(now, batch).await
    }
    async fn identity(&self) -> Result<i64> {
        self.inner.identity().await
    }
    async fn archived_through(&self, partition: u32) -> Result<Option<u64>> {
        self.inner.archived_through(partition).await
    }
}

/// A private `redis-server` (`/usr/bin/redis-server`, or `TEST_REDIS_SERVER`) on a free
/// loopback port with its data in a temporary directory, configured as DESIGN.md
/// "Durability" requires (`appendonly yes`, `appendfsync always`,
/// `no-appendfsync-on-rewrite no`, no RDB snapshots). Killed (SIGKILL) on drop.
#[derive(Debug)]
pub struct RedisServer {
    /// First field: dropped (killed) before the data directory is removed.
    child: ChildProcess,
    port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts one and waits (up to 10 s) until it answers `PING`. Errors: the binary is
    /// missing, no free port, or it did not come up.
    pub fn start() -> std::io::Result<Self> {
        Self::start_with(&[])
    }

    /// As [`RedisServer::start`], with `extra` arguments after the durable ones (the last
    /// value of a setting wins: e.g. `["--appendfsync", "everysec"]` for a refusal test).
    pub fn start_with(extra: &[&str]) -> std::io::Result<Self> {
        let mut server = Self {
            child: ChildProcess::default(),
            port: free_port()?,
            dir: tempfile::tempdir()?,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        let bin =
            std::env::var("TEST_REDIS_SERVER").unwrap_or_else(|_| "/usr/bin/redis-server".into());
        let child = std::process::Command::new(bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .args(["--no-appendfsync-on-rewrite", "no", "--save", ""])
            .args(&self.extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        self.child.set(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if self.pong() {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Err(std::io::Error::other(format!(
            "redis-server on port {} did not answer PING within 10 s",
            self.port
        )))
    }

    fn pong(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILLs the server (no chance to flush anything beyond what `appendfsync always`
    /// already made durable).
    pub fn kill(&mut self) {
        self.child.kill();
    }

    /// Starts it again on the same port and directory (it replays its AOF).
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.kill();
        self.spawn()
    }
}

/// A private Redis Cluster of three masters (no replicas): three [`RedisServer`]s with
/// `--cluster-enabled yes`, durable as the hot store requires, joined by
/// `redis-cli --cluster create` (`/usr/bin/redis-cli`, or `TEST_REDIS_CLI`). Killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the three servers, creates the cluster and waits (up to 20 s) until every node
    /// says `cluster_state:ok`. Errors: a binary is missing, or the cluster did not form.
    pub fn start() -> std::io::Result<Self> {
        let cluster_args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
        ];
        let nodes = (0..3)
            .map(|_| RedisServer::start_with(&cluster_args))
            .collect::<std::io::Result<Vec<_>>>()?;
        let cluster = Self { nodes };
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = std::process::Command::new(Self::cli())
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()?;
        if !created.success() {
            return Err(std::io::Error::other(format!(
                "redis-cli --cluster create {addrs:?}: {created}"
            )));
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !(0..3).all(|i| {
            cluster
                .cli_on(i, &["cluster", "info"])
                .contains("cluster_state:ok")
        }) {
            if std::time::Instant::now() > deadline {
                return Err(std::io::Error::other(
                    "the Redis Cluster did not reach state ok",
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Ok(cluster)
    }

    fn cli() -> String {
        std::env::var("TEST_REDIS_CLI").unwrap_or_else(|_| "/usr/bin/redis-cli".into())
    }

    /// Runs `redis-cli -p <node i's port> <args>` and returns what it printed.
    pub fn cli_on(&self, i: usize, args: &[&str]) -> String {
        std::process::Command::new(Self::cli())
            .args(["-p", &self.nodes[i].port.to_string()])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// `redis+cluster://127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>`.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// `redis://127.0.0.1:<port>` of node `i` (0..3).
    pub fn node_url(&self, i: usize) -> String {
        self.nodes[i].url()
    }
}

/// The child process of a test server: killed (SIGKILL) and reaped by [`ChildProcess::kill`]
/// and on drop, so a server never outlives its test.
#[derive(Debug, Default)]
struct ChildProcess(Option<std::process::Child>);

impl ChildProcess {
    fn set(&mut self, child: std::process::Child) {
        self.kill();
        self.0 = Some(child);
    }

    fn id(&self) -> Option<u32> {
        self.0.as_ref().map(std::process::Child::id)
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A free loopback port (bound, then released).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A private tansu broker (Kafka protocol; `TEST_TANSU`, else `~/.cargo/bin/tansu`, else
/// `tansu` on `PATH`; `scripts/test` installs it) on a free loopback port, on tansu's SQLite
/// storage engine (a tansu built with `--features libsql`) with its file in a temporary
/// directory: it keeps every record of a multi-record batch, and what it acknowledged outlives
/// a [`KafkaBroker::restart`]. Killed on drop.
#[derive(Debug)]
pub struct KafkaBroker {
    /// First field: dropped (killed) before the storage directory is removed.
    child: ChildProcess,
    port: u16,
    dir: tempfile::TempDir,
}

impl KafkaBroker {
    /// Starts one and waits (up to 20 s) until it accepts connections. Errors: tansu is not
    /// installed (the message says how to install it), or it did not come up.
    pub fn start() -> std::io::Result<Self> {
        let mut broker = Self {
            child: ChildProcess::default(),
            port: free_port()?,
            dir: tempfile::tempdir()?,
        };
        broker.spawn()?;
        Ok(broker)
    }

    fn binary() -> std::path::PathBuf {
        if let Ok(p) = std::env::var("TEST_TANSU") {
            return p.into();
        }
        let home = std::env::var("HOME").unwrap_or_default();
        let cargo = std::path::Path::new(&home).join(".cargo/bin/tansu");
        if cargo.exists() {
            cargo
        } else {
            "tansu".into()
        }
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        let listener = format!("tcp://127.0.0.1:{}", self.port);
        // tansu takes the storage path relative to its working directory.
        let child = std::process::Command::new(Self::binary())
            .current_dir(self.dir.path())
            .args(["broker", "--listener-url", &listener])
            .args(["--advertised-listener-url", &listener])
            .args(["--storage-engine", "sqlite://tansu.db"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| {
                std::io::Error::other(format!(
                    "starting tansu ({e}); install it with \
                     `cargo install tansu --locked --features libsql` or run scripts/test"
                ))
            })?;
        self.child.set(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Err(std::io::Error::other(format!(
            "tansu on port {} did not accept connections within 20 s",
            self.port
        )))
    }

    /// `kafka://127.0.0.1:<port>/<topic>?idempotence=false&delete_records=false`: tansu 0.6
    /// acknowledged records of a restarted idempotent producer without writing them (see
    /// `tidemark_chat::kafka::new_producer`), and its SQLite engine stops serving every client
    /// on a `DeleteRecords` (see `tidemark_chat::kafka`).
    pub fn url(&self, topic: &str) -> String {
        format!(
            "kafka://127.0.0.1:{}/{topic}?idempotence=false&delete_records=false",
            self.port
        )
    }

    /// Kills the broker (SIGKILL) and starts it again on the same port and storage file.
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.child.kill();
        self.spawn()
    }

    /// Freezes the broker (SIGSTOP): connections stay open, nothing is answered — a broker
    /// that is down as far as clients can tell, which [`KafkaBroker::resume`] brings back with
    /// its log intact.
    pub fn pause(&self) -> std::io::Result<()> {
        self.signal("-STOP")
    }

    /// Thaws a paused broker (SIGCONT).
    pub fn resume(&self) -> std::io::Result<()> {
        self.signal("-CONT")
    }

    fn signal(&self, sig: &str) -> std::io::Result<()> {
        let pid = self
            .child
            .id()
            .map(|id| id.to_string())
            .ok_or_else(|| std::io::Error::other("the broker is not running"))?;
        let status = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!("kill {sig} {pid}: {status}")))
        }
    }

    /// Kills the broker (SIGKILL); [`KafkaBroker::restart`] brings it back.
    pub fn kill(&mut self) {
        self.child.kill();
    }
}

/// A private MariaDB server (`mariadb-install-db` + `mariadbd`, `TEST_MARIADBD_DIR` for
/// another bin directory) on a free loopback port with its data in a temporary directory, for
/// fault tests that must stop the archive's server (the machine's shared MariaDB is never
/// stopped). Killed (SIGKILL) on drop.
#[derive(Debug)]
pub struct MariadbServer {
    /// First field: dropped (killed) before the data directory is removed.
    child: ChildProcess,
    port: u16,
    dir: tempfile::TempDir,
}

impl MariadbServer {
    /// Initialises a data directory and starts the server; waits (up to 30 s) until it accepts
    /// connections. Errors: the binaries are missing or it did not come up.
    pub fn start() -> std::io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let status = std::process::Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .args([
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()?;
        if !status.success() {
            return Err(std::io::Error::other(format!(
                "mariadb-install-db failed: {status}"
            )));
        }
        let mut server = Self {
            child: ChildProcess::default(),
            port: free_port()?,
            dir,
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        let bin = std::env::var("TEST_MARIADBD_DIR").unwrap_or_else(|_| "/usr/sbin".into());
        let data = self.dir.path().join("data");
        let child = std::process::Command::new(std::path::Path::new(&bin).join("mariadbd"))
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!(
                "--socket={}",
                self.dir.path().join("s.sock").display()
            ))
            .arg(format!("--port={}", self.port))
            .args(["--bind-address=127.0.0.1", "--user=root", "--skip-log-bin"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        self.child.set(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Err(std::io::Error::other(format!(
            "mariadbd on port {} did not accept connections within 30 s",
            self.port
        )))
    }

    /// `mysql://root@127.0.0.1:<port>/<database>`.
    pub fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.port)
    }

    /// SIGKILLs the server.
    pub fn kill(&mut self) {
        self.child.kill();
    }

    /// Starts it again on the same port and data directory (InnoDB recovers).
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.kill();
        self.spawn()
    }
}
