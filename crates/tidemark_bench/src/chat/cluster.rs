//! `tidemark-bench chat --engines cluster --nodes 1,2,3`: chat as several nodes on one set of
//! production engines, the figures the sizing guide (`docs/scaling.md`) is computed from.
//!
//! Per node count N: a fresh 3-master Redis Cluster (AOF always), a tansu broker with
//! `--partitions` outbox partitions, a scratch MariaDB archive, and N `tidemark serve --role all`
//! nodes (each answers HTTP, joins the archivers' consumer group and takes shard leases). The
//! conversations are created through node 0; each rate is then offered open loop, request `i`
//! to node `i mod N`. The hot window is short (2 s), so the trimmers work during the run.
//!
//! Per run it reports the load's latency, and from each node's `/metrics` and `/proc`:
//! - msg/s per node and in total (`tidemark_chat_sends_total`);
//! - CPU per node in cores, and per message in ms; and the cores of everything else on the
//!   machine (`engines`: Redis, the broker and MariaDB, less this generator);
//! - archiver records/s per outbox partition (`tidemark_chat_archived_records_total{partition}`,
//!   summed over nodes: a partition moves between nodes with the group's assignment);
//! - trimmer removals/s per hot-store shard (`tidemark_chat_trimmed_total{shard}`, summed over
//!   nodes): the total, and the least, median and most of the shards.
//!
//! Every process shares one machine, so the figures say what one node costs, not how far N
//! nodes scale: the sizing guide divides a target rate by the per-node figures.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Context;
use hyper::Uri;
use rand::{Rng, SeedableRng};
use tidemark_chat::testing::{KafkaBroker, RedisCluster};
use tidemark_core::mysql::{drop_database, scratch_database};

use super::{
    RunInputs, create_conversations, created, median, open_loop, opt, print_now, quantile_ms,
    send_request, server_log_dir,
};
use crate::load::{self, HttpClient};
use crate::process::{
    ServerProcess, clock_ticks_per_sec, cpu_ticks, machine_busy_ticks, scrape_metrics,
};

/// The hot window of the nodes: short, so that trimming runs inside a measured window.
const HOT_WINDOW: &str = "2s";

/// One node's counters at one instant.
#[derive(Debug, Default, Clone)]
struct NodeSample {
    sends: f64,
    cpu_ticks: Option<u64>,
    /// Per partition.
    archived: BTreeMap<u32, f64>,
    /// Per shard.
    trimmed: BTreeMap<u32, f64>,
}

/// The value of `label` in a series name such as `name{partition="3"}`.
fn label_value(series: &str, name: &str, label: &str) -> Option<u32> {
    let labels = series.strip_prefix(name)?.strip_prefix('{')?;
    let start = labels.find(&format!("{label}=\""))? + label.len() + 2;
    let rest = &labels[start..];
    rest[..rest.find('"')?].parse().ok()
}

async fn sample(client: &HttpClient, node: &ServerProcess) -> anyhow::Result<NodeSample> {
    let m = scrape_metrics(client, node.addr).await?;
    let mut s = NodeSample {
        sends: m.get("tidemark_chat_sends_total").copied().unwrap_or(0.0),
        cpu_ticks: node.pid().and_then(cpu_ticks),
        ..NodeSample::default()
    };
    for (series, v) in &m {
        if let Some(p) = label_value(series, "tidemark_chat_archived_records_total", "partition") {
            *s.archived.entry(p).or_default() += v;
        }
        if let Some(shard) = label_value(series, "tidemark_chat_trimmed_total", "shard") {
            *s.trimmed.entry(shard).or_default() += v;
        }
    }
    Ok(s)
}

/// Every node's sample, in node order.
async fn sample_all(
    client: &HttpClient,
    nodes: &[ServerProcess],
) -> anyhow::Result<Vec<NodeSample>> {
    let mut samples = Vec::with_capacity(nodes.len());
    for node in nodes {
        samples.push(sample(client, node).await?);
    }
    Ok(samples)
}

/// `after − before` per key, summed over nodes, per second of `wall`.
fn rates_per_key(
    before: &[NodeSample],
    after: &[NodeSample],
    of: fn(&NodeSample) -> &BTreeMap<u32, f64>,
    wall: f64,
) -> BTreeMap<u32, f64> {
    let mut out = BTreeMap::new();
    for (b, a) in before.iter().zip(after) {
        for (k, v) in of(a) {
            let was = of(b).get(k).copied().unwrap_or(0.0);
            *out.entry(*k).or_default() += (v - was) / wall;
        }
    }
    out
}

/// The engines of one node count, and its nodes.
struct Cluster {
    nodes: Vec<ServerProcess>,
    _redis: RedisCluster,
    _broker: KafkaBroker,
    archive: String,
}

async fn start_cluster(
    inputs: &RunInputs<'_>,
    n: usize,
    client: &HttpClient,
) -> anyhow::Result<Cluster> {
    let args = inputs.args;
    let redis = RedisCluster::start().context("starting a 3-master Redis Cluster")?;
    let broker = KafkaBroker::start().context("starting a private tansu broker")?;
    let archive = scratch_database(&args.mysql, "tm_bench_cluster")
        .await
        .with_context(|| format!("creating a scratch database on {}", args.mysql))?;
    let outbox = broker.url("tidemark.chat.outbox");
    let partitions = args.partitions.to_string();
    let hot = redis.url();
    let mut env: Vec<(&str, Option<&str>)> = vec![
        ("TIDEMARK_ROLE", Some("all")),
        ("TIDEMARK_CHAT__MODE", Some("tiered")),
        ("TIDEMARK_CHAT__HOT", Some(&hot)),
        ("TIDEMARK_CHAT__OUTBOX", Some(&outbox)),
        ("TIDEMARK_CHAT__OUTBOX_PARTITIONS", Some(&partitions)),
        ("TIDEMARK_CHAT__ARCHIVE", Some(&archive)),
        ("TIDEMARK_CHAT__HOT_WINDOW", Some(HOT_WINDOW)),
        ("TIDEMARK_CHAT__OUTBOX_RECOVERY_WINDOW", Some("500ms")),
        ("TIDEMARK_CHAT__SAFETY_MARGIN", Some("200ms")),
        ("TIDEMARK_CHAT__TRIM_INTERVAL", Some("200ms")),
    ];
    let log_dir = server_log_dir(args, &mut env)?.unwrap_or(inputs.root);
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let dir = inputs.root.join(format!("cluster{n}-node{i}"));
        let log = log_dir.join(format!("cluster{n}-node{i}.log"));
        nodes.push(ServerProcess::start(inputs.server_bin, client, &dir, &log, &env).await?);
    }
    Ok(Cluster {
        nodes,
        _redis: redis,
        _broker: broker,
        archive,
    })
}

/// Runs the cluster benchmark over `--nodes` × `--rates`, printing a line per run.
pub(super) async fn run(inputs: &RunInputs<'_>) -> anyhow::Result<()> {
    let args = inputs.args;
    let mut out = String::new();
    writeln!(
        out,
        "engines = cores of every other process (Redis, broker, MariaDB); per node: its sends/s, \
         cores, and CPU ms per send; trimmer removals/s: total, and per shard least / median / most"
    )?;
    writeln!(
        out,
        "{:>5} {:>7} {:>9} {:>8} {:>8} {:>7} | {:>7} | {:<30} | {:<40} | trimmer removals/s",
        "nodes",
        "offered",
        "achieved",
        "p50 ms",
        "p99 ms",
        "errors",
        "engines",
        "per node: msg/s, cores, cpu ms/msg",
        "archiver records/s per partition"
    )?;
    print_now(&out);
    for &n in &args.nodes {
        let client = load::http_client(args.max_in_flight);
        let t = Instant::now();
        let cluster = start_cluster(inputs, n, &client).await?;
        eprintln!(
            "cluster of {n}: nodes ready in {:.1} s; creating {} conversations …",
            t.elapsed().as_secs_f64(),
            args.conversations
        );
        let made = create_conversations(&client, cluster.nodes[0].addr, args.conversations).await?;
        // Each conversation's messages URI on every node.
        let uris: Vec<Vec<Uri>> = cluster
            .nodes
            .iter()
            .map(|node| {
                made.iter()
                    .map(|u| format!("http://{}{}", node.addr, u.path()).parse())
                    .collect::<Result<_, _>>()
            })
            .collect::<Result<_, _>>()?;
        settle(inputs, &client, &cluster.nodes, &uris).await?;
        for (ri, &rate) in args.rates.iter().enumerate() {
            let (line, _) = run_rate(inputs, &client, &cluster.nodes, &uris, ri, rate).await?;
            print_now(&line);
        }
        drop(client);
        for node in cluster.nodes {
            if let Err(e) = node.stop(Duration::from_secs(30)).await {
                eprintln!("cluster of {n}: {e:#}");
            }
        }
        drop_database(&cluster.archive).await?;
    }
    Ok(())
}

/// Sends at the first rate, in runs of `--warmup` + `--duration` (not reported), until the
/// trimmers have removed something (at most six runs): the measured runs then see every worker
/// at work — archivers assigned their partitions, watermarks published, trim candidates due.
async fn settle(
    inputs: &RunInputs<'_>,
    client: &HttpClient,
    nodes: &[ServerProcess],
    uris: &[Vec<Uri>],
) -> anyhow::Result<()> {
    let rate = inputs.args.rates[0];
    for attempt in 0..6 {
        let (_, trimmed) = run_rate(inputs, client, nodes, uris, 1000 + attempt, rate).await?;
        if trimmed > 0.0 {
            return Ok(());
        }
    }
    eprintln!(
        "cluster of {}: nothing trimmed while settling; measuring anyway",
        nodes.len()
    );
    Ok(())
}

/// One rate against the nodes; returns its report line and the trimmers' removals/s.
async fn run_rate(
    inputs: &RunInputs<'_>,
    client: &HttpClient,
    nodes: &[ServerProcess],
    uris: &[Vec<Uri>],
    ri: usize,
    rate: u64,
) -> anyhow::Result<(String, f64)> {
    let args = inputs.args;
    eprintln!(
        "cluster of {}: {rate} msg/s, {} s warmup + {} s measured …",
        nodes.len(),
        args.warmup,
        args.duration
    );
    let before = sample_all(client, nodes).await?;
    let machine_before = (machine_busy_ticks(), cpu_ticks(std::process::id()));
    let wall = Instant::now();
    let cfg = open_loop(args, rate, false);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0xc105_7e12 ^ rate ^ ((ri as u64) << 40));
    let zipf = inputs.zipf;
    let result = load::run(cfg, |i| {
        let (k, b_side) = (zipf.sample(&mut rng), rng.random::<bool>());
        let node = (i as usize) % uris.len();
        let req = send_request(
            uris[node][k].clone(),
            ('c', ri, i),
            (b_side, k),
            inputs.body_tail,
        );
        created(client, req)
    })
    .await?;
    let wall = wall.elapsed().as_secs_f64();
    let machine_after = (machine_busy_ticks(), cpu_ticks(std::process::id()));
    let after = sample_all(client, nodes).await?;
    let cores = |b: Option<u64>, a: Option<u64>| -> Option<f64> {
        Some(a?.checked_sub(b?)? as f64 / clock_ticks_per_sec() / wall)
    };
    let node_cores: Vec<Option<f64>> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| cores(b.cpu_ticks, a.cpu_ticks))
        .collect();
    // Everything else on the machine: Redis, the broker, MariaDB (and any other work).
    let engines_cores = (|| {
        let machine = cores(machine_before.0, machine_after.0)?;
        let generator = cores(machine_before.1, machine_after.1)?;
        let nodes: f64 = node_cores.iter().copied().sum::<Option<f64>>()?;
        Some((machine - generator - nodes).max(0.0))
    })();

    let per_node: Vec<String> = before
        .iter()
        .zip(&after)
        .zip(&node_cores)
        .map(|((b, a), &cores)| {
            let sends = a.sends - b.sends;
            let ms_per_msg = cores
                .filter(|_| sends > 0.0)
                .map(|c| c * wall * 1000.0 / sends);
            format!(
                "{:.0}, {}, {}",
                sends / wall,
                opt(cores, 2),
                opt(ms_per_msg, 3)
            )
        })
        .collect();
    let archived = rates_per_key(&before, &after, |s| &s.archived, wall);
    let trimmed = rates_per_key(&before, &after, |s| &s.trimmed, wall);
    let shard_rates: Vec<f64> = trimmed.values().copied().collect();
    let least = shard_rates.iter().copied().fold(f64::INFINITY, f64::min);
    let most = shard_rates.iter().copied().fold(0.0, f64::max);
    let l = &result;
    let line = format!(
        "{:>5} {:>7} {:>9.0} {:>8} {:>8} {:>7} | {:>7} | {:<30} | {:<40} | {:.0} total over {} shards, per shard {} / {} / {}\n",
        nodes.len(),
        rate,
        l.achieved(),
        opt(quantile_ms(l, 0.5), 1),
        opt(quantile_ms(l, 0.99), 1),
        l.errors(),
        opt(engines_cores, 2),
        per_node.join("; "),
        archived
            .iter()
            .map(|(p, r)| format!("{p}: {r:.0}"))
            .collect::<Vec<_>>()
            .join(", "),
        shard_rates.iter().sum::<f64>(),
        shard_rates.len(),
        opt(least.is_finite().then_some(least), 1),
        opt(median(&shard_rates), 1),
        opt(Some(most), 1),
    );
    Ok((line, shard_rates.iter().sum()))
}
