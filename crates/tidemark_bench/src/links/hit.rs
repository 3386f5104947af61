//! Where the time of one redirect goes, measured in process (no HTTP): the steps of
//! [`LinksService::hit`] one by one — the id check, the lookup of one day partition, the
//! durable append of the click event — and the whole hit, each driven by `concurrency`
//! concurrent callers for a while. CPU is this process's (its blocking pool and SQLite writer
//! threads included), per operation.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use hdrhistogram::Histogram;
use serde_json::Map;
use tidemark_core::clock::{Clock, SystemClock};
use tidemark_core::day::Day;
use tidemark_links::id::{IdCodec, LinkId};
use tidemark_links::model::Lookup;
use tidemark_links::partitions::oldest_kept;
use tidemark_links::redirect::{UaClass, hit_event};
use tidemark_links::rewrite::LinkKind;
use tidemark_links::service::{Route, load_or_create_secret};

use super::super::process::{clock_ticks_per_sec, cpu_ticks};
use super::{SUBJECT, TENANT, open_service, recipients};

/// One measured step.
#[derive(Debug)]
struct Step {
    name: &'static str,
    concurrency: usize,
    ops: u64,
    wall: f64,
    latency_us: Histogram<u64>,
    cpu_secs: Option<f64>,
}

/// Figures of the split.
#[derive(Debug)]
pub(super) struct HitSplit {
    concurrency: usize,
    steps: Vec<Step>,
}

impl HitSplit {
    /// CPU µs per operation of the whole hit (under load).
    pub(super) fn hit_cpu_us(&self) -> Option<f64> {
        let s = self.steps.last()?;
        Some(s.cpu_secs? / s.ops as f64 * 1e6)
    }

    pub(super) fn report(&self) -> String {
        let mut s = format!(
            "where a redirect's time goes, in process (no HTTP), each step with 1 and with {} \
             concurrent callers:\n{:<52} {:>5} {:>9} {:>8} {:>8} {:>8} {:>10}\n",
            self.concurrency, "  step", "calls", "ops/s", "p50 µs", "p99 µs", "max µs", "cpu µs/op"
        );
        for st in &self.steps {
            s.push_str(&format!(
                "  {:<50} {:>5} {:>9.0} {:>8} {:>8} {:>8} {:>10}\n",
                st.name,
                st.concurrency,
                st.ops as f64 / st.wall,
                st.latency_us.value_at_quantile(0.5),
                st.latency_us.value_at_quantile(0.99),
                st.latency_us.max(),
                st.cpu_secs
                    .map_or_else(|| "-".into(), |c| format!("{:.1}", c / st.ops as f64 * 1e6))
            ));
        }
        s
    }
}

/// Calls `op(i)` with `concurrency` calls in flight for `secs`.
async fn drive<F, Fut>(
    name: &'static str,
    concurrency: usize,
    secs: f64,
    mut op: F,
) -> anyhow::Result<Step>
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut latency_us = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let cpu0 = cpu_ticks(std::process::id());
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let mut in_flight = FuturesUnordered::new();
    let mut i = 0u64;
    let timed = |f: Fut| async move {
        let t = Instant::now();
        f.await.map(|()| t.elapsed())
    };
    for _ in 0..concurrency {
        in_flight.push(timed(op(i)));
        i += 1;
    }
    let mut ops = 0u64;
    while let Some(done) = in_flight.next().await {
        latency_us.saturating_record(done?.as_micros().max(1) as u64);
        ops += 1;
        if Instant::now() < deadline {
            in_flight.push(timed(op(i)));
            i += 1;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu_secs = cpu0
        .zip(cpu_ticks(std::process::id()))
        .map(|(a, b)| (b - a) as f64 / clock_ticks_per_sec());
    Ok(Step {
        name,
        concurrency,
        ops,
        wall,
        latency_us,
        cpu_secs,
    })
}

/// Measures the steps on a fresh embedded service in `dir` holding `template` rendered for
/// 1,000 recipients.
pub(super) async fn bench_hit_split(
    dir: &Path,
    template: &str,
    user_agent: &str,
    concurrency: usize,
    secs: f64,
) -> anyhow::Result<HitSplit> {
    let (svc, ingest) = open_service(dir, super::TRACK_BASE)?;
    let codec = IdCodec::new(load_or_create_secret(svc.config(), &dir.join("links"))?);
    let mid = svc
        .create_mailing(TENANT, SUBJECT, template, "news@example.com")
        .await?;
    let mut fields = Map::new();
    fields.insert("first_name".into(), "Ada".into());
    let (_, build) = svc
        .render(TENANT, &mid, recipients(0, 1_000, &fields))
        .await?;
    let ids: Vec<LinkId> = build
        .records
        .iter()
        .filter(|r| r.kind == LinkKind::Link)
        .map(|r| codec.parse(&r.link_id))
        .collect::<Result<_, _>>()?;
    let texts: Vec<String> = ids.iter().map(|i| i.as_str().to_owned()).collect();
    let n = ids.len() as u64;
    let store = svc.link_store();
    let oldest = oldest_kept(Day::of_utc_ms(SystemClock.now_ms()), 180);
    let record = match store.lookup(&ids[0], oldest).await? {
        Lookup::Found(r) => r,
        other => anyhow::bail!("the first id of the render was not found: {other:?}"),
    };

    let mut steps = Vec::new();
    steps.push(
        drive("id check (IdCodec::parse, keyed SipHash)", 1, secs, |i| {
            let ok = codec.parse(&texts[(i % n) as usize]).is_ok();
            async move {
                anyhow::ensure!(ok, "id did not parse");
                Ok(())
            }
        })
        .await?,
    );
    for c in [1, concurrency] {
        steps.push(
            drive(
                "lookup (SqliteLinks, one partition, blocking pool)",
                c,
                secs,
                |i| {
                    let (store, id) = (Arc::clone(&store), &ids[(i % n) as usize]);
                    async move {
                        match store.lookup(id, oldest).await? {
                            Lookup::Found(_) => Ok(()),
                            other => anyhow::bail!("lookup: {other:?}"),
                        }
                    }
                },
            )
            .await?,
        );
    }
    for c in [1, concurrency] {
        steps.push(
            drive(
                "click event (Ingest::record, durable group commit)",
                c,
                secs,
                |_| {
                    let now = SystemClock.now_ms();
                    let e = hit_event(
                        &record,
                        "email_click",
                        UaClass::Desktop,
                        false,
                        "/item/",
                        now,
                    );
                    let ingest = ingest.clone();
                    async move {
                        ingest.record(vec![e], now).await?;
                        Ok(())
                    }
                },
            )
            .await?,
        );
    }
    for c in [1, concurrency] {
        steps.push(
            drive(
                "whole hit (LinksService::hit = the three above)",
                c,
                secs,
                |i| {
                    let (svc, id) = (svc.clone(), &texts[(i % n) as usize]);
                    async move {
                        svc.hit(Route::Click, id, false, Some(user_agent)).await?;
                        Ok(())
                    }
                },
            )
            .await?,
        );
    }
    Ok(HitSplit { concurrency, steps })
}
