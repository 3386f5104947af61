//! Part 3 of `tidemark-bench events`: the daily rollup of one big day.
//!
//! A raw tier in a temp dir is filled in process through [`RawStore::append`] (batches of
//! `--append-batch`, the next batch generated while the last is written) with a day of
//! `--rollup-events` events over `--rollup-listings` listings, 1 % of them flagged as bots; then
//! [`roll_up_day`] of that day into a fresh [`SqliteRollups`] is timed, and timed again over
//! the rows it wrote (the re-run a late event causes).

use std::path::Path;
use std::time::Instant;

use anyhow::ensure;
use tidemark_core::clock::{Clock, SystemClock};
use tidemark_core::day::{DAY_MS, UtcDay};
use tidemark_events::rollup::{RollupOutcome, roll_up_day};
use tidemark_events::rollups::{RollupStore, SqliteRollups};
use tidemark_events::{Event, RawStore, SqliteRaw};

use super::super::sqlite_bytes;
use super::{BAR_ROLLUP_EVENTS, BAR_ROLLUP_SECS, Bar, EventsBenchArgs, Population};

/// Sessions of the rolled-up day.
const SESSIONS: u64 = 300_000;
/// One event in this many is flagged `bot = true`.
const BOT_EVERY: u64 = 100;

/// Figures of the rollup part.
#[derive(Debug)]
pub(super) struct RollupFigures {
    events: u64,
    listings: u64,
    day: UtcDay,
    fill_secs: f64,
    raw_bytes: u64,
    first: RollupOutcome,
    first_secs: f64,
    again: RollupOutcome,
    again_secs: f64,
    /// The day's rows after the re-run equal those after the first run.
    unchanged: bool,
}

impl RollupFigures {
    pub(super) fn report(&self) -> String {
        let o = &self.first;
        format!(
            "\n3. rollup: roll_up_day of {} ({} events, {} listings, {} sessions, kinds \
             view/click/contact, 1 in {BOT_EVERY} a bot) from the SQLite raw tier into \
             listing_daily\n\
             filled through RawStore::append in batches in {:.1} s ({:.0} events/s; raw.db {:.0} \
             MB)\n\
             rollup: {:.2} s ({:.0} events/s); {} events read, {} bots skipped, {} rows \
             written\n\
             re-run over the existing rows: {:.2} s ({} rows; every row as before: {})\n",
            self.day,
            self.events,
            self.listings,
            SESSIONS,
            self.fill_secs,
            self.events as f64 / self.fill_secs,
            self.raw_bytes as f64 / 1e6,
            self.first_secs,
            o.events_read as f64 / self.first_secs,
            o.events_read,
            o.bots_skipped,
            o.rows_written,
            self.again_secs,
            self.again.rows_written,
            if self.unchanged { "yes" } else { "NO" }
        )
    }

    pub(super) fn bar(&self) -> Bar {
        Bar {
            name: format!("rollup of a {BAR_ROLLUP_EVENTS}-event day ≤ {BAR_ROLLUP_SECS:.0} s"),
            figure: format!(
                "{:.2} s for {} events ({} rows), re-run {:.2} s",
                self.first_secs, self.events, self.first.rows_written, self.again_secs
            ),
            pass: (self.events >= BAR_ROLLUP_EVENTS)
                .then_some(self.first_secs <= BAR_ROLLUP_SECS && self.unchanged),
        }
    }
}

/// Fills yesterday with the events and times its rollup twice; data under `dir`.
pub(super) async fn bench_rollup(
    args: &EventsBenchArgs,
    dir: &Path,
) -> anyhow::Result<RollupFigures> {
    std::fs::create_dir_all(dir)?;
    let raw = SqliteRaw::open(&dir.join("raw.db"))?;
    let rollups = SqliteRollups::open(&dir.join("rollups.db"))?;
    let now = SystemClock.now_ms();
    let day = UtcDay::of_ms(now).plus(-1);
    let population = Population {
        listings: args.rollup_listings,
        sessions: SESSIONS,
        bot_every: BOT_EVERY,
    };
    let n = args.rollup_events;
    let generate = move |from: u64, to: u64| -> Vec<Event> {
        (from..to)
            // Spread evenly over the day.
            .map(|i| population.event(i, day.start_ms() + (i as i64 * DAY_MS / n as i64)))
            .collect()
    };
    eprintln!("rollup: filling {day} with {n} events …");
    let t = Instant::now();
    let mut batch = generate(0, args.append_batch.min(n));
    let mut from = batch.len() as u64;
    loop {
        let following = (from < n).then(|| {
            let (make, to) = (generate, (from + args.append_batch).min(n));
            tokio::task::spawn_blocking(move || make(from, to))
        });
        raw.append(batch, now).await?;
        match following {
            Some(next) => {
                batch = next.await?;
                from += batch.len() as u64;
            }
            None => break,
        }
    }
    let fill_secs = t.elapsed().as_secs_f64();
    let raw_bytes = sqlite_bytes(&dir.join("raw.db"));

    eprintln!("rollup: rolling up {day} …");
    let t = Instant::now();
    let first = roll_up_day(&raw, &rollups, day, now).await?;
    let first_secs = t.elapsed().as_secs_f64();
    ensure!(
        first.events_read == n,
        "the rollup read {} events of {n}",
        first.events_read
    );
    let rows = rollups.day_rows(day).await?;
    let t = Instant::now();
    let again = roll_up_day(&raw, &rollups, day, now).await?;
    let again_secs = t.elapsed().as_secs_f64();
    let unchanged = rollups.day_rows(day).await? == rows;
    Ok(RollupFigures {
        events: n,
        listings: args.rollup_listings,
        day,
        fill_secs,
        raw_bytes,
        first,
        first_secs,
        again,
        again_secs,
        unchanged,
    })
}
