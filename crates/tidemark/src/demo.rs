//! `tidemark demo`: one marketplace day, end to end, through the public HTTP API only.
//!
//! Data flow (each step a phase with a progress bar; [`plan`] says exactly what is sent):
//! 1. listings of the OTTO sample → 3 accounts (`POST /v1/listings`);
//! 2. the OTTO events, time-scaled into today, ingested (`POST /v1/events`);
//! 3. a few recipients suppressed (`POST /v1/suppressions`);
//! 4. one campaign per corpus template rendered for N recipients (`POST /v1/mailings`,
//!    `…/render`); every tracking URL of the returned HTML is counted;
//! 5. opens (`GET /o/…`), clicks (`GET /c/…`) and link-scanner bots (`HEAD /c/…`);
//! 6. K buyer–seller conversations about the listings, some first messages retried;
//! 7. waits until the server recorded every contact and hit and archived every message
//!    (from `/metrics`), rolls up the day (`POST /v1/rollups/{day}`), reads each account's
//!    report, and prints the summary (and writes it as JSON with `--json`).
//!
//! Figures that come from `/metrics` are deltas over the run, so a long-running server's
//! earlier traffic does not count; report rows are the day's, which include earlier runs on
//! the same day. `--embedded` runs against a fresh server in a temporary directory. With
//! `--server` given once per node, the nodes of one deployment take the requests in turn and
//! their `/metrics` are summed ([`api::Metrics::merge`]); a node restarted during the run would
//! reset its counters, so the run's figures then no longer hold.

pub mod api;
pub mod plan;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde_json::{Value, json};
use tidemark_core::clock::{Clock, SystemClock};
use tidemark_core::timefmt::rfc3339_ms;

use api::Api;
use plan::Corpus;

/// `tidemark demo` options.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// The server to replay the day against; given more than once, the nodes of one
    /// deployment, which take the requests in turn.
    #[arg(
        long,
        default_value = "http://127.0.0.1:8080",
        conflicts_with = "embedded"
    )]
    pub server: Vec<String>,
    /// The tenant's API key.
    #[arg(long, default_value = "dev-key")]
    pub key: String,
    /// Start a fresh server in a temporary directory instead (stopped at the end).
    #[arg(long)]
    pub embedded: bool,
    /// The corpus directory (holds `events/otto-sample.jsonl` and `emails/*.html`).
    #[arg(long, default_value = "../shared/corpus")]
    pub corpus: PathBuf,
    /// Recipients per campaign.
    #[arg(long, default_value_t = 1000)]
    pub recipients: usize,
    /// Buyer–seller conversations.
    #[arg(long, default_value_t = 200)]
    pub conversations: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Also write the summary as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// What the demo saw, printed at the end (and written with `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The demo day (of the server's `events.time_zone`).
    pub day: String,
    /// Per account: its listings and report rows for the day.
    pub accounts: Vec<AccountSummary>,
    /// OTTO events ingested.
    pub events_ingested: u64,
    /// Chat figures.
    pub chat: ChatSummary,
    /// Link-tracking figures.
    pub links: LinksSummary,
}

/// One account's report for the day.
#[derive(Debug, Clone, Serialize)]
pub struct AccountSummary {
    /// Account id (1..=3).
    pub account_id: u64,
    /// Listings it owns.
    pub listings: usize,
    /// Sum of `total` per kind over its rows.
    pub totals: BTreeMap<String, u64>,
    /// The report rows (`listing_id`, `kind`, `total`, `uniques_daily_sum`).
    pub rows: Vec<Value>,
}

/// Chat figures of the run.
#[derive(Debug, Clone, Serialize)]
pub struct ChatSummary {
    /// Conversations created.
    pub conversations: u64,
    /// Messages committed (201).
    pub messages_committed: u64,
    /// Retries answered with the original ACK (200, same seq and id).
    pub retries_answered: u64,
    /// Records the archiver wrote during the run (`/metrics` delta).
    pub archived_messages: u64,
    /// The published archive watermark T (RFC 3339), if any.
    pub archive_watermark: Option<String>,
    /// Contacts recorded from first messages (`/metrics` delta).
    pub contacts_recorded: u64,
}

/// Link-tracking figures of the run.
#[derive(Debug, Clone, Serialize)]
pub struct LinksSummary {
    /// Campaigns (one per template).
    pub campaigns: u64,
    /// Messages rendered.
    pub messages_rendered: u64,
    /// Recipients skipped (suppressed).
    pub recipients_skipped: u64,
    /// Tracking URLs (`/c/` and `/o/`) in the rendered HTML.
    pub tracking_urls: u64,
    /// Link records the server stored (`/metrics` delta).
    pub links_stored: u64,
    /// Opens counted (`/metrics` delta).
    pub opens: u64,
    /// Clicks counted (`/metrics` delta; bots excluded).
    pub clicks: u64,
    /// Hits flagged as bots (`/metrics` delta).
    pub bot_hits: u64,
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>14} [{bar:40}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what.to_owned());
    pb
}

/// Runs the demo (against `--server`, or a fresh embedded server).
pub async fn run(args: DemoArgs) -> anyhow::Result<Summary> {
    let corpus = Corpus::read(&args.corpus)?;
    if args.recipients == 0 || args.concurrency == 0 {
        bail!("--recipients and --concurrency must be at least 1");
    }
    if !args.embedded {
        return replay(&Api::new(&args.server, &args.key)?, &corpus, &args).await;
    }
    let dir = tempfile::tempdir()?;
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?;
    let config = crate::config::Config {
        listen: addr,
        data_dir: dir.path().to_path_buf(),
        ..Default::default()
    };
    let key = config.tenants[0].key.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::server::run(listener, config, async {
        let _ = stopped.await;
    }));
    eprintln!(
        "embedded server on http://{addr} (data in {})",
        dir.path().display()
    );
    let result = replay(
        &Api::new(&[format!("http://{addr}")], &key)?,
        &corpus,
        &args,
    )
    .await;
    let _ = stop.send(());
    server.await??;
    result
}

async fn replay(api: &Api, corpus: &Corpus, args: &DemoArgs) -> anyhow::Result<Summary> {
    let started = Instant::now();
    let now = SystemClock.now_ms();
    // The server's today, in its `events.time_zone`.
    let top = api
        .expect(Method::GET, "/v1/events/top?limit=1", None, StatusCode::OK)
        .await?;
    let zone = top["time_zone"].as_str().context("time_zone")?;
    let calendar = tidemark_events::calendar::Calendar::named(zone)?;
    let day = calendar.day_of(now);
    let day_start = calendar.start_ms(day);
    let before = api.metrics().await.context("reading /metrics")?;
    let listings = corpus.listings();

    // 1. Listings → accounts.
    let pairs: Vec<Value> = listings
        .iter()
        .enumerate()
        .map(|(i, l)| json!({"listing_id": l, "account_id": plan::account_of(i)}))
        .collect();
    api.expect(
        Method::POST,
        "/v1/listings",
        Some(&json!(pairs)),
        StatusCode::OK,
    )
    .await?;

    // 2. OTTO events into the demo day.
    let (min_ts, max_ts) = corpus
        .events
        .iter()
        .fold((i64::MAX, i64::MIN), |(lo, hi), e| {
            (lo.min(e.ts), hi.max(e.ts))
        });
    let events: Vec<Value> = corpus
        .events
        .iter()
        .map(|e| plan::event_json(e, plan::event_time(e.ts, min_ts, max_ts, day_start, now)))
        .collect();
    let pb = bar(events.len() as u64, "events");
    for chunk in events.chunks(500) {
        let (status, v) = api
            .call(Method::POST, "/v1/events", Some(&json!(chunk)))
            .await?;
        if !status.is_success() {
            bail!("POST /v1/events: {status}: {v}");
        }
        pb.inc(chunk.len() as u64);
    }
    pb.finish();

    // 3. Suppressions.
    let suppressed: Vec<String> = (0..args.recipients)
        .filter(|&r| plan::suppressed(r))
        .map(plan::email)
        .collect();
    api.expect(
        Method::POST,
        "/v1/suppressions",
        Some(&json!({ "emails": suppressed })),
        StatusCode::OK,
    )
    .await?;

    // 4. Campaigns, rendered.
    let campaigns = corpus.templates.len();
    let pb = bar((campaigns * args.recipients) as u64, "rendering");
    let mut hits: Vec<(String, bool)> = Vec::new(); // (absolute URL, HEAD)
    let (mut rendered, mut skipped, mut tracking_urls) = (0u64, 0u64, 0u64);
    for (c, (name, html)) in corpus.templates.iter().enumerate() {
        let mailing = api
            .expect(
                Method::POST,
                "/v1/mailings",
                Some(&json!({
                    "subject": format!("{name}: picked for {{{{ first_name }}}}"),
                    "from": "news@shop.example",
                    "html": plan::with_listing_block(html),
                })),
                StatusCode::CREATED,
            )
            .await?;
        let mid = mailing["mailing_id"]
            .as_str()
            .context("mailing_id")?
            .to_owned();
        let chunks: Vec<Vec<usize>> = (0..args.recipients)
            .collect::<Vec<_>>()
            .chunks(100)
            .map(<[usize]>::to_vec)
            .collect();
        let answers: Vec<(Vec<usize>, Value)> = futures::stream::iter(chunks)
            .map(|rs| {
                let (api, mid, listings) = (api.clone(), mid.clone(), &listings);
                async move {
                    let recipients: Vec<Value> = rs
                        .iter()
                        .map(|&r| {
                            let l = listings[plan::recommended(c, r, listings.len())];
                            json!({"email": plan::email(r), "fields": plan::fields(r, l)})
                        })
                        .collect();
                    let v = api
                        .expect(
                            Method::POST,
                            &format!("/v1/mailings/{mid}/render"),
                            Some(&json!({ "recipients": recipients })),
                            StatusCode::OK,
                        )
                        .await?;
                    anyhow::Ok((rs, v))
                }
            })
            .buffer_unordered(args.concurrency.min(4))
            .try_collect()
            .await?;
        for (_, v) in answers {
            let messages = v["messages"].as_array().context("messages")?;
            let skips = v["skipped"].as_array().context("skipped")?;
            for s in skips {
                if s["reason"] != "suppressed" {
                    bail!("{name}: recipient skipped unexpectedly: {s}");
                }
            }
            skipped += skips.len() as u64;
            for m in messages {
                let email = m["email"].as_str().context("email")?;
                let r: usize = email
                    .strip_prefix("user")
                    .and_then(|s| s.split('@').next())
                    .and_then(|s| s.parse().ok())
                    .with_context(|| format!("unexpected recipient {email}"))?;
                let html = m["html"].as_str().context("html")?;
                let found = tracked(html).with_context(|| format!("{name} for {email}"))?;
                tracking_urls += found.count;
                let b = plan::behaviour(c, r);
                if b.opens {
                    hits.push((found.pixel.clone(), false));
                }
                if b.clicks {
                    hits.push((found.listing.clone(), false));
                }
                if b.scanned {
                    hits.push((found.listing.clone(), true));
                }
            }
            rendered += messages.len() as u64;
            pb.inc((messages.len() + skips.len()) as u64);
        }
    }
    pb.finish();

    // 5. Opens, clicks, bots.
    let pb = bar(hits.len() as u64, "opens/clicks");
    futures::stream::iter(hits)
        .map(|(url, head)| {
            let (api, pb) = (api.clone(), pb.clone());
            async move {
                let (status, location) = api.hit(&url, head).await?;
                let ok = if url.contains("/o/") {
                    status == StatusCode::OK
                } else {
                    status == StatusCode::FOUND && location.starts_with(plan::SHOP)
                };
                if !ok {
                    bail!("{url}: {status} {location}");
                }
                pb.inc(1);
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<()>()
        .await?;
    pb.finish();

    // 6. Conversations.
    let planned: Vec<plan::PlannedConversation> = (0..args.conversations)
        .map(|k| plan::conversation(k, &listings))
        .collect();
    let total_messages: usize = planned.iter().map(|p| p.messages.len()).sum();
    let pb = bar(total_messages as u64, "chat");
    let outcomes: Vec<(u64, u64, i64)> = futures::stream::iter(planned)
        .map(|p| {
            let (api, pb) = (api.clone(), pb.clone());
            async move { converse(&api, &p, &pb).await }
        })
        .buffer_unordered(args.concurrency)
        .try_collect()
        .await?;
    pb.finish();
    let committed: u64 = outcomes.iter().map(|o| o.0).sum();
    let retries: u64 = outcomes.iter().map(|o| o.1).sum();
    let last_commit = outcomes.iter().map(|o| o.2).max().unwrap_or(0);

    // 7. Wait for the asynchronous parts, roll up, report.
    let conversations = args.conversations as u64;
    let after = settle(api, &before, conversations, last_commit).await?;
    api.expect(
        Method::POST,
        &format!("/v1/rollups/{day}"),
        None,
        StatusCode::OK,
    )
    .await?;
    let mut accounts = Vec::new();
    for account_id in 1..=plan::ACCOUNTS {
        let v = api
            .expect(
                Method::GET,
                &format!("/v1/accounts/{account_id}/report?from={day}&to={day}"),
                None,
                StatusCode::OK,
            )
            .await?;
        let rows = v["rows"].as_array().context("rows")?.clone();
        let mut totals = BTreeMap::new();
        for r in &rows {
            *totals
                .entry(r["kind"].as_str().unwrap_or("?").to_owned())
                .or_insert(0) += r["total"].as_u64().unwrap_or(0);
        }
        accounts.push(AccountSummary {
            account_id,
            listings: (0..listings.len())
                .filter(|&i| plan::account_of(i) == account_id)
                .count(),
            totals,
            rows,
        });
    }
    let watermark = after.get("tidemark_chat_archive_watermark_ms") as i64;
    let summary = Summary {
        day: day.to_string(),
        accounts,
        events_ingested: events.len() as u64,
        chat: ChatSummary {
            conversations,
            messages_committed: committed,
            retries_answered: retries,
            archived_messages: after.delta(&before, "tidemark_chat_archived_records_total"),
            archive_watermark: (watermark > 0).then(|| rfc3339_ms(watermark)),
            contacts_recorded: after.delta(&before, "tidemark_chat_contacts_total"),
        },
        links: LinksSummary {
            campaigns: campaigns as u64,
            messages_rendered: rendered,
            recipients_skipped: skipped,
            tracking_urls,
            links_stored: after.delta(&before, "tidemark_links_records_stored_total"),
            opens: after.delta(&before, "tidemark_links_opens_total"),
            clicks: after.delta(&before, "tidemark_links_clicks_total"),
            bot_hits: after.delta(&before, "tidemark_links_bot_hits_total"),
        },
    };
    print_summary(&summary, started.elapsed());
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&summary)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(summary)
}

/// The tracking URLs of one rendered message.
struct Tracked {
    /// The recommended-listing link (absolute `/c/` URL).
    listing: String,
    /// The open pixel (absolute `/o/` URL).
    pixel: String,
    /// Every `/c/` and `/o/` URL in the message.
    count: u64,
}

fn tracked(html: &str) -> anyhow::Result<Tracked> {
    let at = html
        .find(plan::LISTING_MARK)
        .context("the recommended-listing link is missing")?
        + plan::LISTING_MARK.len();
    let listing = html[at..]
        .split('"')
        .next()
        .context("unterminated href")?
        .to_owned();
    let base = listing
        .rfind("/c/")
        .map(|i| &listing[..i])
        .with_context(|| format!("the listing link {listing} was not rewritten"))?;
    let pixel_at = html.rfind(&format!("{base}/o/")).context("no open pixel")?;
    let pixel = html[pixel_at..]
        .split('"')
        .next()
        .context("unterminated pixel src")?
        .to_owned();
    let count = (html.matches(&format!("{base}/c/")).count()
        + html.matches(&format!("{base}/o/")).count()) as u64;
    Ok(Tracked {
        listing,
        pixel,
        count,
    })
}

/// Creates one conversation and sends its messages; returns (committed, retries answered,
/// latest commit time in ms).
async fn converse(
    api: &Api,
    p: &plan::PlannedConversation,
    pb: &ProgressBar,
) -> anyhow::Result<(u64, u64, i64)> {
    let v = api
        .expect(
            Method::POST,
            "/v1/conversations",
            Some(&json!({"members": [p.buyer, p.seller], "listing_id": p.listing_id})),
            StatusCode::CREATED,
        )
        .await?;
    let cid = v["conversation_id"].as_str().context("conversation_id")?;
    let path = format!("/v1/conversations/{cid}/messages");
    let (mut committed, mut retries, mut last) = (0, 0, 0i64);
    for (i, (sender, client_msg_id, body)) in p.messages.iter().enumerate() {
        let msg = json!({"client_msg_id": client_msg_id, "sender": sender, "body": body});
        let ack = api
            .expect(Method::POST, &path, Some(&msg), StatusCode::CREATED)
            .await?;
        committed += 1;
        pb.inc(1);
        if ack["conversation_seq"] != json!(i + 1) {
            bail!("{cid}: message {i} got seq {}", ack["conversation_seq"]);
        }
        let at = ack["committed_at"].as_str().unwrap_or_default();
        last = last.max(
            time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339)
                .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
                .with_context(|| format!("committed_at {at:?}"))?,
        );
        if i == 0 && p.retry_first {
            let again = api
                .expect(Method::POST, &path, Some(&msg), StatusCode::OK)
                .await?;
            if again != ack {
                bail!("{cid}: the retry answered {again}, the first send {ack}");
            }
            retries += 1;
        }
    }
    Ok((committed, retries, last))
}

/// Waits (up to 60 s) until the server recorded every first contact and every tracking hit
/// and archived through `last_commit_ms`; returns the metrics then. A server without an
/// archive (`hot-only`) never publishes a watermark: that wait ends with a note.
async fn settle(
    api: &Api,
    before: &api::Metrics,
    conversations: u64,
    last_commit_ms: i64,
) -> anyhow::Result<api::Metrics> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = api.metrics().await?;
        let d = |n: &str| m.delta(before, n);
        let contacts =
            d("tidemark_chat_contacts_total") + d("tidemark_chat_contact_failures_total");
        let hits = d("tidemark_links_clicks_total")
            + d("tidemark_links_opens_total")
            + d("tidemark_links_bot_hits_total");
        let recorded =
            d("tidemark_links_events_recorded_total") + d("tidemark_links_event_failures_total");
        let archived = m.get("tidemark_chat_archive_watermark_ms") as i64 > last_commit_ms
            && m.get("tidemark_chat_outbox_backlog") == 0.0;
        if contacts >= conversations && recorded >= hits && archived {
            return Ok(m);
        }
        if Instant::now() > deadline {
            if contacts >= conversations && recorded >= hits {
                eprintln!(
                    "note: the archive watermark did not pass the last message within 60 s (hot-only mode?)"
                );
                return Ok(m);
            }
            bail!(
                "the server did not settle within 60 s: contacts {contacts}/{conversations}, hit events {recorded}/{hits}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn print_summary(s: &Summary, took: Duration) {
    println!(
        "\nTidemark demo: one marketplace day ({}), {:.1} s",
        s.day,
        took.as_secs_f64()
    );
    println!("\nAccounts (report for {}):", s.day);
    for a in &s.accounts {
        let totals: Vec<String> = a.totals.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!(
            "  account {}: {} listings, {} report rows: {}",
            a.account_id,
            a.listings,
            a.rows.len(),
            totals.join(", ")
        );
    }
    let c = &s.chat;
    println!(
        "\nChat: {} conversations, {} messages committed, {} retries answered with the original ACK",
        c.conversations, c.messages_committed, c.retries_answered
    );
    println!(
        "      {} messages archived, watermark {}, {} first contacts recorded",
        c.archived_messages,
        c.archive_watermark.as_deref().unwrap_or("none"),
        c.contacts_recorded
    );
    let l = &s.links;
    println!(
        "\nLinks: {} campaigns, {} messages rendered, {} suppressed, {} links stored ({} tracking URLs in the HTML)",
        l.campaigns, l.messages_rendered, l.recipients_skipped, l.links_stored, l.tracking_urls
    );
    println!(
        "       {} clicks counted vs {} bot hits, {} opens",
        l.clicks, l.bot_hits, l.opens
    );
    println!("\nEvents: {} OTTO events ingested", s.events_ingested);
}
