//! `tidemark-bench events --nodes 1,2,3`: line-protocol ingest on several nodes sharing
//! InfluxDB (raw events) and MariaDB (the raw day catalog, rollups and day leases); see
//! [`crate::nodes`].
//!
//! Per node count: the bodies of the single-node ingest part (`--batch` events each, the
//! seed's line-protocol shape) are posted to `/api/v2/write` on every node. After the nodes
//! stop, the day catalog on MariaDB must count every acknowledged event.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hyper::Uri;
use tidemark_core::clock::{Clock, SystemClock};

use super::ingest::{Format, SESSIONS, bodies};
use super::{EventsBenchArgs, Population};
use crate::load;
use crate::nodes::{self, SharedEngines};

/// Runs every node count of `--nodes`, printing one table row each.
pub(super) async fn run(
    args: &EventsBenchArgs,
    server_bin: &Path,
    mysql: &str,
    root: &Path,
) -> anyhow::Result<()> {
    let format = Format::LineProtocol;
    let population = Population {
        listings: args.ingest_listings,
        sessions: SESSIONS,
        bot_every: 0,
    };
    let bodies = Arc::new(bodies(
        format,
        &population,
        args.batch,
        args.bodies,
        SystemClock.now_ms(),
    ));
    println!(
        "\nline-protocol ingest on several nodes (role all; raw events on InfluxDB, the day \
         catalog on MariaDB), batches of {} events, {} connections in a closed loop spread over \
         the nodes, {} s warmup + {} s measured per node count\n{}",
        args.batch,
        args.connections,
        args.warmup,
        args.ingest_seconds,
        nodes::header("events")
    );
    for &n in &args.nodes {
        let client = load::http_client(args.connections);
        let engines = SharedEngines::start(mysql).await?;
        let servers = nodes::start_nodes(
            server_bin,
            &client,
            root,
            &format!("events{n}"),
            n,
            &engines.env(),
        )
        .await?;
        let uris: Arc<Vec<Uri>> = Arc::new(
            servers
                .iter()
                .map(|s| format!("http://{}{}", s.addr, format.path()).parse())
                .collect::<Result<_, _>>()?,
        );
        let bodies = Arc::clone(&bodies);
        let run = nodes::closed_loop(
            &client,
            &servers,
            &engines,
            (
                args.connections,
                Duration::from_secs_f64(args.warmup),
                Duration::from_secs_f64(args.ingest_seconds),
            ),
            format.accepted(),
            move |node, i| {
                format.request(
                    uris[node].clone(),
                    bodies[i as usize % bodies.len()].clone(),
                )
            },
        )
        .await;
        nodes::stop_nodes(servers).await?;
        let acknowledged = run.total().ok * args.batch as u64;
        let stored = catalog_events(&engines.rollups_db).await?;
        println!(
            "{}{}",
            run.row(args.batch as f64),
            if stored == acknowledged {
                String::new()
            } else {
                format!(
                    " — MISMATCH: {stored} events in the catalog for {acknowledged} acknowledged"
                )
            }
        );
        engines.remove().await?;
    }
    Ok(())
}

/// Events the MariaDB day catalog counts over all days.
async fn catalog_events(url: &str) -> anyhow::Result<u64> {
    let pool = tidemark_core::mysql::connect(url, 1).await?;
    let (n,): (i64,) =
        sqlx::query_as("SELECT CAST(COALESCE(SUM(events), 0) AS SIGNED) FROM raw_day")
            .fetch_one(&pool)
            .await
            .context("reading the day catalog")?;
    pool.close().await;
    Ok(u64::try_from(n).unwrap_or(0))
}
