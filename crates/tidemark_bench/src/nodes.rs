//! Links and events on several nodes (`tidemark-bench links --nodes 1,2,3`,
//! `tidemark-bench events --nodes 1,2,3`): what the sizing guide (`docs/scaling.md`) is computed
//! from.
//!
//! Per node count N: fresh production engines for links and events (a scratch MariaDB link
//! store, a scratch MariaDB rollups database that also holds the raw day catalog and the day
//! leases, and a private `influxd` for raw events), and N `tidemark serve --role all` nodes on
//! them with one `links.id_secret`. A closed loop of `--connections` connections, connection
//! `c` to node `c mod N`, keeps every node busy for the warmup and the measured window; the
//! total number of connections stays the same for every N, so only the node count changes.
//!
//! Measured over the window: requests answered per node and in total, the CPU of each node
//! (cores), and the CPU of each engine (`mariadbd` found by name in `/proc`, `influxd` by its
//! pid) per 1,000 units of work (redirects, or events ingested): `ms/k` in the table. Every process shares one
//! machine: the figures say what a node and the engines cost per unit, not how far N nodes
//! scale here.

use std::time::{Duration, Instant};

use anyhow::Context;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use tidemark_core::mysql::{drop_database, scratch_database};
use tidemark_events::testing::InfluxServer;

use crate::load::{HttpClient, call};
use crate::process::{ServerProcess, clock_ticks_per_sec, cpu_ticks, log_tail};

/// The link id secret every node shares (a multi-node link store refuses nodes without one).
const ID_SECRET: &str = "b3c4a5e6d7f80912a3b4c5d6e7f80912";

/// The production engines of links and events, fresh for one node count.
pub(crate) struct SharedEngines {
    influx: InfluxServer,
    links_db: String,
    /// Rollups, the raw day catalog and the day leases.
    pub(crate) rollups_db: String,
}

impl SharedEngines {
    /// Starts `influxd` and makes two scratch databases on the MariaDB server at `mysql`.
    ///
    /// # Errors
    /// `influxd` does not start, or MariaDB refuses the databases.
    pub(crate) async fn start(mysql: &str) -> anyhow::Result<Self> {
        let influx = InfluxServer::start().context("starting influxd (Debian: influxdb)")?;
        let links_db = scratch_database(mysql, "tm_bench_links")
            .await
            .with_context(|| format!("creating a scratch database on {mysql}"))?;
        let rollups_db = scratch_database(mysql, "tm_bench_rollups").await?;
        Ok(Self {
            influx,
            links_db,
            rollups_db,
        })
    }

    /// The environment of a node on these engines.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        [
            ("TIDEMARK_ROLE", "all".to_owned()),
            ("TIDEMARK_LINKS__STORE", self.links_db.clone()),
            ("TIDEMARK_LINKS__ID_SECRET", ID_SECRET.to_owned()),
            ("TIDEMARK_EVENTS__RAW", self.influx.url("tidemark")),
            ("TIDEMARK_EVENTS__ROLLUPS", self.rollups_db.clone()),
        ]
        .map(|(k, v)| (k.to_owned(), v))
        .to_vec()
    }

    /// Stops `influxd` and drops the scratch databases.
    ///
    /// # Errors
    /// MariaDB refuses the drop.
    pub(crate) async fn remove(self) -> anyhow::Result<()> {
        drop(self.influx);
        drop_database(&self.links_db).await?;
        drop_database(&self.rollups_db).await?;
        Ok(())
    }

    /// The process ids of MariaDB and `influxd`, where found.
    fn pids(&self) -> [Option<u32>; 2] {
        [process_named(&["mariadbd", "mysqld"]), self.influx.pid()]
    }
}

/// The first process whose `/proc/<pid>/comm` is one of `names`.
fn process_named(names: &[&str]) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        names.contains(&comm.trim()).then_some(pid)
    })
}

/// Starts `n` nodes named `<tag>-node<i>` under `root` with `env`.
///
/// # Errors
/// A node does not become ready within 30 s (its log tail is in the error).
pub(crate) async fn start_nodes(
    exe: &std::path::Path,
    client: &HttpClient,
    root: &std::path::Path,
    tag: &str,
    n: usize,
    env: &[(String, String)],
) -> anyhow::Result<Vec<ServerProcess>> {
    let env: Vec<(&str, Option<&str>)> = env
        .iter()
        .map(|(k, v)| (k.as_str(), Some(v.as_str())))
        .collect();
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let dir = root.join(format!("{tag}-node{i}"));
        let log = root.join(format!("{tag}-node{i}.log"));
        nodes.push(ServerProcess::start(exe, client, &dir, &log, &env).await?);
    }
    Ok(nodes)
}

/// Stops every node (SIGTERM, 30 s), reporting the first failure with its log tail.
pub(crate) async fn stop_nodes(nodes: Vec<ServerProcess>) -> anyhow::Result<()> {
    for node in nodes {
        let log = node.log.clone();
        let status = node.stop(Duration::from_secs(30)).await?;
        anyhow::ensure!(
            status.success(),
            "a node exited with {status}; its log:\n{}",
            log_tail(&log, 20)
        );
    }
    Ok(())
}

/// One connection's closed loop, or all of them: what each node answered.
#[derive(Debug, Default, Clone)]
pub(crate) struct NodeTally {
    /// Requests answered as expected inside the measured window.
    pub(crate) ok_in_window: u64,
    /// Requests answered as expected over the whole run.
    pub(crate) ok: u64,
    /// Requests answered otherwise, or not at all.
    pub(crate) failures: u64,
    /// The first such answer.
    pub(crate) first_failure: Option<String>,
}

impl NodeTally {
    fn add(&mut self, other: &NodeTally) {
        self.ok_in_window += other.ok_in_window;
        self.ok += other.ok;
        self.failures += other.failures;
        if self.first_failure.is_none() {
            self.first_failure.clone_from(&other.first_failure);
        }
    }
}

/// Counters of the nodes and the engines at one instant.
struct Marks {
    at: Instant,
    nodes: Vec<Option<u64>>,
    engines: [Option<u64>; 2],
}

impl Marks {
    fn now(nodes: &[ServerProcess], engines: [Option<u32>; 2]) -> Self {
        Self {
            at: Instant::now(),
            nodes: nodes.iter().map(|n| n.pid().and_then(cpu_ticks)).collect(),
            engines: engines.map(|p| p.and_then(cpu_ticks)),
        }
    }
}

/// What one node count measured.
#[derive(Debug)]
pub(crate) struct NodesRun {
    /// Per node: requests answered as expected in the window.
    pub(crate) per_node: Vec<NodeTally>,
    /// Per node: cores used over the window.
    pub(crate) node_cores: Vec<Option<f64>>,
    /// CPU seconds of MariaDB and of `influxd` over the window.
    pub(crate) engine_cpu_secs: [Option<f64>; 2],
    /// The window, s.
    pub(crate) window: f64,
}

impl NodesRun {
    /// All nodes' tallies together.
    pub(crate) fn total(&self) -> NodeTally {
        let mut t = NodeTally::default();
        for n in &self.per_node {
            t.add(n);
        }
        t
    }

    /// One table row: `units` of work per answered request (1 for a redirect, the batch size
    /// for an ingest request), named `unit` in the header.
    pub(crate) fn row(&self, units: f64) -> String {
        let opt = |v: Option<f64>, d: usize| v.map_or_else(|| "-".into(), |v| format!("{v:.d$}"));
        let total = self.total();
        let work = total.ok_in_window as f64 * units;
        let per_node: Vec<String> = self
            .per_node
            .iter()
            .zip(&self.node_cores)
            .map(|(t, c)| {
                format!(
                    "{:.0}/s {} cores",
                    t.ok_in_window as f64 * units / self.window,
                    opt(*c, 2)
                )
            })
            .collect();
        let per_1000 = |secs: Option<f64>| {
            opt(
                secs.filter(|_| work > 0.0).map(|s| s * 1000.0 / work * 1e3),
                1,
            )
        };
        format!(
            "{:>5} | {:>11.0} | {:<44} | {:>12} | {:>12} | {}{}",
            self.per_node.len(),
            work / self.window,
            per_node.join("; "),
            per_1000(self.engine_cpu_secs[0]),
            per_1000(self.engine_cpu_secs[1]),
            total.failures,
            total
                .first_failure
                .as_deref()
                .map_or_else(String::new, |f| format!(" (first: {f})")),
        )
    }
}

/// The header of [`NodesRun::row`]'s table; `unit` names what is counted (e.g. "redirects").
pub(crate) fn header(unit: &str) -> String {
    format!(
        "{:>5} | {:>11} | {:<44} | {:>12} | {:>12} | failed",
        "nodes",
        format!("{unit}/s"),
        "per node: rate, tidemark cores",
        "MariaDB ms/k",
        "influxd ms/k",
    )
}

/// Runs `connections` closed loops against `nodes` (connection `c` to node `c mod N`) for
/// `warmup` + `window`; `request(node, i)` makes request `i` of a connection to node `node`,
/// and an answer with status `expect` counts. Returns the tallies and the CPU figures of the
/// window.
pub(crate) async fn closed_loop<F>(
    client: &HttpClient,
    nodes: &[ServerProcess],
    engines: &SharedEngines,
    (connections, warmup, window): (usize, Duration, Duration),
    expect: StatusCode,
    request: F,
) -> NodesRun
where
    F: Fn(usize, u64) -> Request<Full<Bytes>> + Clone + Send + 'static,
{
    let start = Instant::now();
    let (from, to) = (start + warmup, start + warmup + window);
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..connections {
        let (client, request, node) = (client.clone(), request.clone(), c % nodes.len());
        tasks.spawn(async move {
            let mut t = NodeTally::default();
            for i in (c as u64).. {
                if Instant::now() >= to {
                    break;
                }
                let outcome = call(&client, request(node, i)).await;
                let done = Instant::now();
                match outcome {
                    Ok((status, _)) if status == expect => {
                        t.ok += 1;
                        if done >= from && done <= to {
                            t.ok_in_window += 1;
                        }
                    }
                    other => {
                        t.failures += 1;
                        t.first_failure.get_or_insert_with(|| match other {
                            Ok((status, body)) => format!(
                                "HTTP {status} {}",
                                String::from_utf8_lossy(&body[..body.len().min(200)])
                            ),
                            Err(f) => format!("{f:?}"),
                        });
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            (node, t)
        });
    }
    let pids = engines.pids();
    tokio::time::sleep_until(from.into()).await;
    let before = Marks::now(nodes, pids);
    tokio::time::sleep_until(to.into()).await;
    let after = Marks::now(nodes, pids);
    let mut per_node = vec![NodeTally::default(); nodes.len()];
    while let Some(done) = tasks.join_next().await {
        if let Ok((node, t)) = done {
            per_node[node].add(&t);
        }
    }
    let wall = (after.at - before.at).as_secs_f64();
    let secs =
        |b: Option<u64>, a: Option<u64>| Some(a?.checked_sub(b?)? as f64 / clock_ticks_per_sec());
    NodesRun {
        per_node,
        node_cores: before
            .nodes
            .iter()
            .zip(&after.nodes)
            .map(|(b, a)| secs(*b, *a).map(|s| s / wall))
            .collect(),
        engine_cpu_secs: [
            secs(before.engines[0], after.engines[0]),
            secs(before.engines[1], after.engines[1]),
        ],
        window: wall,
    }
}
