//! Part 5 of `tidemark-bench links`: the redirector's rate as clicks accumulate (a newsletter
//! blast sends its clicks in one burst).
//!
//! A `tidemark serve` child gets the redirect part's mailing, rendered for `--recipients`
//! recipients ([`super::redirect::setup`]); then `wrk` (closed loop, `-c --wrk-connections`)
//! runs in steps of `--clicks-step-seconds` until the server's click counter reaches
//! `--clicks`. Each step's rate is plotted against the clicks stored when it ended, and the
//! rate over the last million clicks is compared with the rate over the first million.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, ensure};

use super::super::load;
use super::super::process::{ServerProcess, scrape_metrics};
use super::redirect::{BROWSER, setup};
use super::wrk::{self, Step};
use super::{BAR_FLAT, Bar, LinksBenchArgs};

/// Figures of the clicks part.
#[derive(Debug)]
pub(super) struct ClicksFigures {
    target: u64,
    ids: usize,
    steps: Vec<Step>,
}

impl ClicksFigures {
    /// Mean rate of the steps that ended within `lo..=hi` clicks (`None` if none did).
    fn rate_between(&self, lo: f64, hi: f64) -> Option<f64> {
        let r: Vec<f64> = self
            .steps
            .iter()
            .filter(|s| s.at > lo && s.at <= hi)
            .map(|s| s.per_sec)
            .collect();
        (!r.is_empty()).then(|| r.iter().sum::<f64>() / r.len() as f64)
    }

    /// Rate over the last million clicks / over the first million.
    pub(super) fn ratio(&self) -> Option<f64> {
        let end = self.steps.last()?.at;
        let first = self.rate_between(0.0, 1e6)?;
        let last = self.rate_between(end - 1e6, end)?;
        (end >= 2e6).then_some(last / first)
    }

    pub(super) fn report(&self) -> String {
        format!(
            "\n5. clicks: GET /c/<id> over {} ids with wrk until {} clicks are stored; per step, \
             clicks stored and the step's rate:\n  {}\nlast million / first million: {}\n",
            self.ids,
            self.target,
            wrk::steps_line(&self.steps),
            self.ratio()
                .map_or_else(|| "- (fewer than 2 M clicks)".into(), |r| format!("{r:.2}"))
        )
    }

    pub(super) fn bar(&self) -> Bar {
        Bar {
            name: format!(
                "redirect rate flat: last million clicks within {:.0} % of the first",
                (1.0 - BAR_FLAT) * 100.0
            ),
            figure: self.ratio().map_or_else(
                || "fewer than 2 M clicks".into(),
                |x| {
                    format!(
                        "last/first = {x:.2} at {:.1} M clicks",
                        self.steps.last().map_or(0.0, |s| s.at) / 1e6
                    )
                },
            ),
            pass: self.ratio().map(|x| x >= BAR_FLAT),
        }
    }

    /// The rate against clicks stored, for `redirect-clicks.svg`.
    pub(super) fn curve(&self) -> Vec<(f64, f64)> {
        wrk::curve(&self.steps)
    }
}

/// The clicks part against a fresh `server_bin serve` with its data under `dir`.
pub(super) async fn bench_clicks(
    args: &LinksBenchArgs,
    server_bin: &Path,
    dir: &Path,
) -> anyhow::Result<ClicksFigures> {
    let exe = wrk::find().context("the clicks part needs wrk (apt-get install wrk)")?;
    ensure!(
        args.clicks_step_seconds >= 1.0,
        "--clicks-step-seconds must be at least 1"
    );
    std::fs::create_dir_all(dir)?;
    let client = load::http_client(args.max_in_flight);
    let server = ServerProcess::start(
        server_bin,
        &client,
        &dir.join("data"),
        &dir.join("server.log"),
        &[("TIDEMARK_LINKS__TRACK_BASE", None)],
    )
    .await?;
    let addr = server.addr;
    let ids = setup(&client, addr, args.recipients).await?;
    let script = dir.join("ids.lua");
    std::fs::write(&script, wrk::script(&ids, BROWSER))?;
    let client_ref = &client;
    let clicks = || async move {
        let m = scrape_metrics(client_ref, addr).await?;
        anyhow::Ok(m.get("tidemark_links_clicks_total").copied().unwrap_or(0.0))
    };
    let mut steps = Vec::new();
    let mut stored = clicks().await?;
    while stored < args.clicks as f64 {
        let (report, _) = wrk::run(
            &exe,
            addr,
            &script,
            args.wrk_threads,
            args.wrk_connections,
            Duration::from_secs_f64(args.clicks_step_seconds),
        )
        .await?;
        ensure!(
            report.bad_status == 0,
            "{} redirects were not answered 302",
            report.bad_status
        );
        stored = clicks().await?;
        eprintln!(
            "clicks: {:.2} M stored, {:.0}/s",
            stored / 1e6,
            report.requests_per_sec
        );
        steps.push(Step {
            at: stored,
            per_sec: report.requests_per_sec,
            p99_ms: report.p99(),
        });
    }
    drop(client);
    if let Err(e) = server.stop(Duration::from_secs(30)).await {
        eprintln!("clicks: {e:#}");
    }
    Ok(ClicksFigures {
        target: args.clicks,
        ids: ids.len(),
        steps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_compares_the_last_million_with_the_first() {
        let step = |at: f64, per_sec: f64| Step {
            at,
            per_sec,
            p99_ms: 1.0,
        };
        let f = |steps| ClicksFigures {
            target: 0,
            ids: 1,
            steps,
        };
        let flat = f(vec![
            step(0.5e6, 100.0),
            step(1.0e6, 120.0),
            step(2.0e6, 110.0),
            step(2.6e6, 99.0),
            step(3.0e6, 99.0),
        ]);
        // First million: 110/s; last (2.0 M, 3.0 M]: 99/s.
        assert_eq!(flat.ratio(), Some(0.9));
        assert!(flat.bar().pass.unwrap());
        assert_eq!(f(vec![step(1.5e6, 100.0)]).ratio(), None);
    }
}
