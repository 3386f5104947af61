//! Part 6 of `tidemark-bench links`: the redirector's rate as link records accumulate (a day
//! of big sends leaves tens of millions of them in one day partition).
//!
//! The records go straight into the server's `links/links.db` with [`SqliteLinks::insert`]
//! (the server stopped meanwhile; [`super::store::record`], one UTC day), with ids made by an
//! [`IdCodec`] on a secret the server is given too (`TIDEMARK_LINKS__ID_SECRET`). At each of
//! `--records-steps` the server starts on that data dir, `wrk` (closed loop,
//! `-c --wrk-connections`) runs `--warmup` seconds unmeasured, then `--clicks-step-seconds`
//! measured, over [`IDS`] ids spread evenly over every record stored so far, and the server
//! stops. The rate of the last step is compared with the first.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, ensure};
use tidemark_core::clock::{Clock, SystemClock};
use tidemark_core::day::Day;
use tidemark_links::id::IdCodec;
use tidemark_links::sqlite::SqliteLinks;
use tidemark_links::store::LinkStore;

use super::super::load;
use super::super::process::ServerProcess;
use super::redirect::BROWSER;
use super::store::record;
use super::wrk::{self, Step};
use super::{BAR_FLAT, Bar, LinksBenchArgs};

/// Ids each wrk step draws from.
pub(super) const IDS: usize = 12_000;
/// The id secret of the part; the server gets it in hex (`links.id_secret`).
const SECRET: [u8; 16] = *b"tidemark-records";

/// Figures of the records part.
#[derive(Debug)]
pub(super) struct RecordsFigures {
    steps: Vec<Step>,
}

impl RecordsFigures {
    /// Rate of the last step over the first (`None` with fewer than two steps).
    pub(super) fn ratio(&self) -> Option<f64> {
        match self.steps.as_slice() {
            [first, .., last] => Some(last.per_sec / first.per_sec),
            _ => None,
        }
    }

    pub(super) fn report(&self) -> String {
        format!(
            "\n6. records: GET /c/<id> with wrk over {IDS} ids spread over every link record \
             stored (one day partition); per step, records stored and the rate:\n  {}\n\
             last step / first step: {}\n",
            wrk::steps_line(&self.steps),
            self.ratio()
                .map_or_else(|| "- (fewer than 2 steps)".into(), |r| format!("{r:.2}"))
        )
    }

    pub(super) fn bar(&self) -> Bar {
        let last = self.steps.last().map_or(0.0, |s| s.at);
        Bar {
            name: format!(
                "redirect rate flat as link records grow: last step within {:.0} % of the first",
                (1.0 - BAR_FLAT) * 100.0
            ),
            figure: self.ratio().map_or_else(
                || "fewer than 2 steps".into(),
                |x| format!("last/first = {x:.2} at {:.1} M records", last / 1e6),
            ),
            pass: self.ratio().map(|x| x >= BAR_FLAT),
        }
    }

    /// The rate against records stored, for `redirect-records.svg`.
    pub(super) fn curve(&self) -> Vec<(f64, f64)> {
        wrk::curve(&self.steps)
    }
}

/// `IDS` ids spread evenly over `kept` (or all of them if fewer).
fn spread(kept: &[String]) -> Vec<String> {
    let n = kept.len().min(IDS);
    (0..n).map(|i| kept[i * kept.len() / n].clone()).collect()
}

/// The records part against `server_bin serve` with its data under `dir`.
pub(super) async fn bench_records(
    args: &LinksBenchArgs,
    server_bin: &Path,
    dir: &Path,
) -> anyhow::Result<RecordsFigures> {
    let exe = wrk::find().context("the records part needs wrk (apt-get install wrk)")?;
    let targets = &args.records_steps;
    ensure!(
        !targets.is_empty() && targets.windows(2).all(|w| w[0] < w[1]) && targets[0] > 0,
        "--records-steps must be increasing and positive"
    );
    let total = *targets.last().expect("not empty");
    let data = dir.join("data");
    std::fs::create_dir_all(data.join("links"))?;
    let store = Arc::new(SqliteLinks::open(&data.join("links").join("links.db"))?);
    let codec = IdCodec::new(SECRET);
    let secret: String = SECRET.iter().map(|b| format!("{b:02x}")).collect();
    let day_start = Day::of_utc_ms(SystemClock.now_ms()).utc_start_ms();
    // Every `keep`-th id is kept: enough for the first step to draw all of its `IDS`, and
    // every later step draws as many, spread over all the records stored by then.
    let keep = (targets[0] / IDS as u64).max(1);
    let mut kept = Vec::new();
    let client = load::http_client(args.max_in_flight);
    let mut steps = Vec::new();
    let mut stored = 0u64;
    for &target in targets {
        while stored < target {
            let end = (stored + args.insert_batch as u64).min(target);
            let recs: Vec<_> = (stored..end)
                .map(|i| record(&codec, day_start, i, total))
                .collect();
            kept.extend(
                recs.iter()
                    .zip(stored..end)
                    .filter(|(_, i)| i % keep == 0)
                    .map(|(r, _)| r.link_id.clone()),
            );
            store.insert(recs).await?;
            stored = end;
        }
        let ids = spread(&kept);
        let script = dir.join("ids.lua");
        std::fs::write(&script, wrk::script(&ids, BROWSER))?;
        let server = ServerProcess::start(
            server_bin,
            &client,
            &data,
            &dir.join("server.log"),
            &[
                ("TIDEMARK_LINKS__TRACK_BASE", None),
                ("TIDEMARK_LINKS__ID_SECRET", Some(&secret)),
            ],
        )
        .await?;
        let run = |secs: f64| {
            wrk::run(
                &exe,
                server.addr,
                &script,
                args.wrk_threads,
                args.wrk_connections,
                Duration::from_secs_f64(secs),
            )
        };
        if args.warmup >= 1.0 {
            run(args.warmup).await?;
        }
        let (report, _) = run(args.clicks_step_seconds).await?;
        if let Err(e) = server.stop(Duration::from_secs(30)).await {
            eprintln!("records: {e:#}");
        }
        ensure!(
            report.bad_status == 0,
            "{} of the redirects over {stored} records were not answered 302",
            report.bad_status
        );
        eprintln!(
            "records: {:.1} M stored, {:.0}/s over {} ids",
            stored as f64 / 1e6,
            report.requests_per_sec,
            ids.len()
        );
        steps.push(Step {
            at: stored as f64,
            per_sec: report.requests_per_sec,
            p99_ms: report.p99(),
        });
    }
    Ok(RecordsFigures { steps })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ids_spread_over_all_kept_and_the_ratio_is_last_over_first() {
        let kept: Vec<String> = (0..3 * IDS).map(|i| i.to_string()).collect();
        let ids = spread(&kept);
        assert_eq!(ids.len(), IDS);
        assert_eq!((ids[0].as_str(), ids[IDS - 1].as_str()), ("0", "35997"));
        let ids = spread(&kept[..IDS + 48]);
        assert_eq!(ids.len(), IDS);
        assert_eq!((ids[1].as_str(), ids[IDS - 1].as_str()), ("1", "12046"));
        assert_eq!(spread(&kept[..10]).len(), 10);
        let step = |at, per_sec| Step {
            at,
            per_sec,
            p99_ms: 1.0,
        };
        let f = RecordsFigures {
            steps: vec![step(1.0, 100.0), step(2.0, 90.0), step(3.0, 80.0)],
        };
        assert_eq!(f.ratio(), Some(0.8));
        assert!(!f.bar().pass.unwrap());
        assert_eq!(RecordsFigures { steps: vec![] }.ratio(), None);
    }
}
