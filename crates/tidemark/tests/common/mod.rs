//! A real `tidemark serve` process for end-to-end tests: a temp data dir, a free loopback
//! port, killed on drop (influxdb3's `TestServer` pattern).

#![allow(dead_code, missing_docs, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub mod demo_figures;

pub const KEY: &str = "dev-key";

pub struct TestServer {
    pub child: Option<Child>,
    pub base: String,
    pub dir: PathBuf,
    pub env: Vec<(String, String)>,
    _tmp: Option<tempfile::TempDir>,
    /// The production engines the server uses (production mode), stopped on drop.
    pub engines: Option<Engines>,
}

/// Which engines a server under test uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The defaults: SQLite files under the data dir.
    Embedded,
    /// Seed 001 and 002's production shapes: link records and rollups on MariaDB (scratch
    /// databases on the machine's server), raw events on a real InfluxDB started for the test.
    Production,
}

/// The production engines of one server under test.
pub struct Engines {
    pub influx: tidemark_events::testing::InfluxServer,
    /// MariaDB URLs: link store, rollups.
    pub links_db: String,
    pub rollups_db: String,
}

impl Engines {
    pub async fn start() -> Self {
        let server = tidemark_core::mysql::test_server_url();
        Self {
            influx: tidemark_events::testing::InfluxServer::start().unwrap(),
            links_db: tidemark_core::mysql::scratch_database(&server, "tm_e2e_links")
                .await
                .unwrap(),
            rollups_db: tidemark_core::mysql::scratch_database(&server, "tm_e2e_rollups")
                .await
                .unwrap(),
        }
    }

    /// `SELECT COUNT(*) FROM <table>` in the MariaDB database `url`.
    pub async fn mysql_count(url: &str, table: &str) -> i64 {
        let pool = tidemark_core::mysql::connect(url, 1).await.unwrap();
        let (n,): (i64,) = sqlx::query_as(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        n
    }

    /// Points of Tidemark's raw measurement in InfluxDB.
    pub async fn influx_points(&self) -> i64 {
        let v: Value = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{}/query", self.influx.port))
            .query(&[
                ("db", "tidemark"),
                (
                    "q",
                    "SELECT count(\"seq\") FROM \"tidemark_raw\".\"listing_event\"",
                ),
            ])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["results"][0]["series"][0]["values"][0][1]
            .as_i64()
            .unwrap_or(0)
    }

    /// The `TIDEMARK_…` variables that point a server at these engines.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("TIDEMARK_LINKS__STORE".into(), self.links_db.clone()),
            // One id secret for every node on these engines, as a multi-node role requires.
            (
                "TIDEMARK_LINKS__ID_SECRET".into(),
                "5eed0001c0ffee00d15ea5e0ba5eba11".into(),
            ),
            ("TIDEMARK_EVENTS__RAW".into(), self.influx.url("tidemark")),
            ("TIDEMARK_EVENTS__ROLLUPS".into(), self.rollups_db.clone()),
        ]
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl TestServer {
    /// Starts a server on a fresh temp dir, embedded mode.
    pub async fn start(env: &[(&str, &str)]) -> Self {
        Self::start_in(Mode::Embedded, env).await
    }

    /// Starts a server on a fresh temp dir in `mode` (production: its own engines).
    pub async fn start_in(mode: Mode, env: &[(&str, &str)]) -> Self {
        Self::start_in_with(mode, env, |_| Vec::new()).await
    }

    /// Like [`TestServer::start_in`]; in production mode `more` adds variables that may name
    /// the engines (e.g. a raw-tier URL with its own retention), set last.
    pub async fn start_in_with(
        mode: Mode,
        env: &[(&str, &str)],
        more: impl FnOnce(&Engines) -> Vec<(String, String)>,
    ) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let engines = match mode {
            Mode::Embedded => None,
            Mode::Production => Some(Engines::start().await),
        };
        let mut all: Vec<(String, String)> = engines.as_ref().map(Engines::env).unwrap_or_default();
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        if let Some(e) = &engines {
            for (k, v) in more(e) {
                all.retain(|(key, _)| *key != k);
                all.push((k, v));
            }
        }
        let mut s = Self {
            child: None,
            base: String::new(),
            dir,
            env: all,
            _tmp: Some(tmp),
            engines,
        };
        s.spawn().await;
        s
    }

    /// Stops the server and drops its scratch databases (production mode).
    pub async fn cleanup(mut self) {
        self.kill9();
        if let Some(e) = self.engines.take() {
            tidemark_core::mysql::drop_database(&e.links_db)
                .await
                .unwrap();
            tidemark_core::mysql::drop_database(&e.rollups_db)
                .await
                .unwrap();
        }
    }

    pub fn command(dir: &Path, port: u16, env: &[(String, String)]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tidemark"));
        cmd.args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs `serve` on `dir` with `env`, which must refuse to start; its stderr.
    pub fn refused_start(dir: &Path, env: &[(String, String)]) -> String {
        let out = Self::command(dir, free_port(), env)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "it started: {stderr}");
        stderr
    }

    /// Starts a server (embedded mode) whose data directory is a tmpfs of `bytes`, mounted
    /// in a mount namespace of the server's own (`unshare --mount`; needs root), so that a
    /// test can fill its disk without touching the machine's. The directory is reached from
    /// outside through [`TestServer::inside`]. Its `min_free_disk_mb` is 1.
    pub async fn start_on_small_disk(bytes: u64) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = Self {
            child: None,
            base: String::new(),
            dir: tmp.path().to_path_buf(),
            env: vec![("TIDEMARK_MIN_FREE_DISK_MB".into(), "1".into())],
            _tmp: Some(tmp),
            engines: None,
        };
        let port = free_port();
        s.base = format!("http://127.0.0.1:{port}");
        let serve = Self::command(&s.dir, port, &s.env);
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "mount -t tmpfs -o size={bytes} tidemark-test \"$0\" && exec \"$@\""
            ))
            .arg(&s.dir)
            .arg(serve.get_program())
            .args(serve.get_args())
            .envs(serve.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        s.child = Some(cmd.spawn().expect("running unshare (util-linux)"));
        s.wait_ready().await;
        s
    }

    /// `rel` under the data directory as the server sees it (its own mount namespace).
    pub fn inside(&self, rel: &str) -> PathBuf {
        let pid = self.child.as_ref().expect("running").id();
        Path::new(&format!("/proc/{pid}/root"))
            .join(self.dir.strip_prefix("/").unwrap())
            .join(rel)
    }

    /// (Re)starts the process on the same data dir and a new port; waits for /readyz.
    pub async fn spawn(&mut self) {
        let port = free_port();
        self.base = format!("http://127.0.0.1:{port}");
        self.child = Some(Self::command(&self.dir, port, &self.env).spawn().unwrap());
        self.wait_ready().await;
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = reqwest::get(format!("{}/readyz", self.base)).await
                && r.status().is_success()
            {
                return;
            }
            assert!(Instant::now() < deadline, "server did not become ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGTERM and wait; returns the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.sigterm();
        self.wait()
    }

    /// SIGTERM without waiting for the exit.
    pub fn sigterm(&self) {
        self.signal("TERM");
    }

    /// Sends signal `name` (`TERM`, `HUP`, …) without waiting for the exit.
    pub fn signal(&self, name: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .unwrap();
    }

    /// Waits for the process to exit (after a signal).
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.take().expect("running").wait().unwrap()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A client that does not follow redirects: the tests check each `302` themselves.
pub fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .unwrap()
}

/// Sends a request with the dev key; returns (status, JSON body or Null).
pub async fn call(
    c: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> (u16, Value) {
    call_as(c, KEY, method, url, body).await
}

/// Sends a request with `credential` (an API key or a user token) as its bearer; returns
/// (status, JSON body or Null).
pub async fn call_as(
    c: &reqwest::Client,
    credential: &str,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = c.request(method, url).bearer_auth(credential);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

pub async fn create_conversation(c: &reqwest::Client, s: &TestServer, members: &[&str]) -> String {
    let (st, v) = call(
        c,
        reqwest::Method::POST,
        &s.url("/v1/conversations"),
        Some(json!({ "members": members })),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    v["conversation_id"].as_str().unwrap().to_owned()
}

pub async fn send(
    c: &reqwest::Client,
    s: &TestServer,
    cid: &str,
    sender: &str,
    client_msg_id: &str,
    body: &str,
) -> (u16, Value) {
    call(
        c,
        reqwest::Method::POST,
        &s.url(&format!("/v1/conversations/{cid}/messages")),
        Some(json!({ "client_msg_id": client_msg_id, "sender": sender, "body": body })),
    )
    .await
}

/// Every message of a conversation as its member `reader` reads it, paging backwards from the
/// newest, 200 seqs a page (or from a page's first message where the page was cut at its byte
/// budget).
pub async fn all_messages(
    c: &reqwest::Client,
    s: &TestServer,
    cid: &str,
    reader: &str,
) -> (u64, Vec<Value>) {
    let mut latest = None;
    let mut out: Vec<Value> = Vec::new();
    let mut query = format!("user={reader}&limit=200");
    loop {
        let (st, page) = call(
            c,
            reqwest::Method::GET,
            &s.url(&format!("/v1/conversations/{cid}/messages?{query}")),
            None,
        )
        .await;
        assert_eq!(st, 200, "{page}");
        let newest = *latest.get_or_insert_with(|| page["latest_seq"].as_u64().unwrap());
        let mut msgs = page["messages"].as_array().unwrap().clone();
        let window_start = match query.split('&').find_map(|p| p.strip_prefix("before=")) {
            Some(q) => q.parse::<u64>().unwrap(),
            None => newest + 1,
        }
        .saturating_sub(200)
        .max(1);
        let before = match (page["truncated"].as_bool(), msgs.first()) {
            (Some(true), Some(m)) => m["conversation_seq"].as_u64().unwrap(),
            _ => window_start,
        };
        msgs.extend(out);
        out = msgs;
        if before <= 1 {
            break;
        }
        query = format!("user={reader}&before={before}&limit=200");
    }
    (latest.unwrap_or(0), out)
}

/// The `/metrics` page (Prometheus text).
pub async fn metrics_text(c: &reqwest::Client, s: &TestServer) -> String {
    c.get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of a counter or gauge on `/metrics`, summed over its label sets (0 when absent).
pub async fn metric(c: &reqwest::Client, s: &TestServer, name: &str) -> u64 {
    metrics_text(c, s)
        .await
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let value = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once("} ")?.1,
                None => rest.strip_prefix(' ')?,
            };
            value.parse::<f64>().ok()
        })
        .sum::<f64>() as u64
}

/// The tracking ids of a rendered message in document order (`/c/<id>`), and its one pixel id
/// (`/o/<id>`, also its unsubscribe id), under the track base `base`.
pub fn tracking_ids(html: &str, base: &str) -> (Vec<String>, String) {
    let grab = |route: &str| -> Vec<String> {
        let prefix = format!("{base}/{route}/");
        html.match_indices(&prefix)
            .map(|(i, _)| html[i + prefix.len()..i + prefix.len() + 32].to_owned())
            .collect()
    };
    let pixel = grab("o");
    assert_eq!(pixel.len(), 1, "one pixel per message");
    (grab("c"), pixel[0].clone())
}
