//! `tidemark-bench links --nodes 1,2,3`: the redirector on several nodes sharing a MariaDB link
//! store and the events engines that store each click (see [`crate::nodes`]).
//!
//! Per node count: `--recipients` recipients are rendered through node 0 (six tracked links
//! each), then every node answers `GET /c/<id>` for those ids at random, with a browser
//! User-Agent, so each answered request is a redirect, a link lookup on MariaDB and an
//! `email_click` event stored. Afterwards the nodes' click counters must add up to the
//! redirects answered.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;

use super::LinksBenchArgs;
use super::redirect::{click_request, setup};
use crate::load::{self, HttpClient};
use crate::nodes::{self, SharedEngines};
use crate::process::scrape_metrics;

/// Runs every node count of `--nodes`, printing one table row each.
pub(super) async fn run(
    args: &LinksBenchArgs,
    server_bin: &Path,
    mysql: &str,
    root: &Path,
) -> anyhow::Result<()> {
    println!(
        "\nredirects on several nodes (role all; links on MariaDB, click events on InfluxDB + \
         MariaDB), {} connections in a closed loop spread over the nodes, {} s warmup + {} s \
         measured per node count\n{}",
        args.wrk_connections,
        args.warmup,
        args.redirect_seconds,
        nodes::header("redirects")
    );
    for &n in &args.nodes {
        let client = load::http_client(args.wrk_connections.max(args.max_in_flight));
        let engines = SharedEngines::start(mysql).await?;
        let servers = nodes::start_nodes(
            server_bin,
            &client,
            root,
            &format!("links{n}"),
            n,
            &engines.env(),
        )
        .await?;
        let ids = Arc::new(setup(&client, servers[0].addr, args.recipients).await?);
        let addrs: Arc<Vec<_>> = Arc::new(servers.iter().map(|s| s.addr).collect());
        let run = nodes::closed_loop(
            &client,
            &servers,
            &engines,
            (
                args.wrk_connections,
                Duration::from_secs_f64(args.warmup),
                Duration::from_secs_f64(args.redirect_seconds),
            ),
            StatusCode::FOUND,
            move |node, i| {
                let id = &ids[(spread(i) % ids.len() as u64) as usize];
                let uri = format!("http://{}/c/{id}", addrs[node])
                    .parse()
                    .expect("a valid URI");
                click_request(uri)
            },
        )
        .await;
        let clicks = clicks(&client, &servers).await?;
        println!(
            "{}{}",
            run.row(1.0),
            if clicks as u64 >= run.total().ok {
                String::new()
            } else {
                format!(
                    " — MISMATCH: {clicks} clicks counted for {} redirects",
                    run.total().ok
                )
            }
        );
        nodes::stop_nodes(servers).await?;
        engines.remove().await?;
    }
    Ok(())
}

/// A well-spread id index for request `i`.
fn spread(i: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17
}

/// The clicks every node counted.
async fn clicks(
    client: &HttpClient,
    servers: &[crate::process::ServerProcess],
) -> anyhow::Result<f64> {
    let mut total = 0.0;
    for s in servers {
        let m = scrape_metrics(client, s.addr).await?;
        total += m.get("tidemark_links_clicks_total").copied().unwrap_or(0.0);
    }
    Ok(total)
}
