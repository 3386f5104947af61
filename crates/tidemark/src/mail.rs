//! `tidemark mail render`: the mail builder offline. Reads a template and a CSV of recipients
//! (a header row with an `email` column; every other column is a merge field), renders and
//! rewrites each message, stores the link records in the data dir's link store (the same
//! store the server's redirector reads), and writes one `.html` file per message plus
//! `skipped.csv` into the output directory, with a progress bar.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Map, Value};
use tidemark_core::clock::{SharedClock, SystemClock};
use tidemark_events::Ingest;
use tidemark_links::builder::Recipient;
use tidemark_links::metrics::LinksMetrics;
use tidemark_links::service::LinksService;

use crate::config::Config;

/// Arguments of `tidemark mail render`.
#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// The HTML template (`{{ field }}` merge fields).
    #[arg(long)]
    pub template: PathBuf,
    /// CSV of recipients: header row with `email` and one column per merge field.
    #[arg(long)]
    pub recipients: PathBuf,
    /// Output directory for the rendered messages.
    #[arg(long)]
    pub out: PathBuf,
    /// Subject line (may hold merge fields).
    #[arg(long, default_value = "Newsletter")]
    pub subject: String,
    /// `From:` address.
    #[arg(long, default_value = "news@example.com")]
    pub from: String,
    /// TOML configuration file (for `links.track_base`, `data_dir`, …).
    #[arg(long, env = "TIDEMARK_CONFIG")]
    pub config: Option<PathBuf>,
    /// Data directory holding the link store [default: the configuration's `data_dir`].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

/// `tidemark mail <what>`.
#[derive(Debug, clap::Subcommand)]
pub enum MailCommand {
    /// Render a template for a CSV of recipients offline, storing the link records.
    Render(RenderArgs),
}

/// Runs a mail command.
pub async fn run(cmd: MailCommand) -> anyhow::Result<()> {
    match cmd {
        MailCommand::Render(args) => render(args).await,
    }
}

fn read_recipients(path: &Path) -> anyhow::Result<Vec<Recipient>> {
    let mut reader =
        csv::Reader::from_path(path).with_context(|| format!("reading {}", path.display()))?;
    let headers = reader.headers()?.clone();
    let email_col = headers
        .iter()
        .position(|h| h.trim().eq_ignore_ascii_case("email"))
        .with_context(|| format!("{} has no `email` column", path.display()))?;
    let mut out = Vec::new();
    for (i, row) in reader.records().enumerate() {
        let row = row.with_context(|| format!("{} row {}", path.display(), i + 2))?;
        let mut fields = Map::new();
        for (j, (h, v)) in headers.iter().zip(row.iter()).enumerate() {
            if j != email_col {
                fields.insert(h.trim().to_owned(), Value::String(v.to_owned()));
            }
        }
        out.push(Recipient {
            email: row.get(email_col).unwrap_or("").trim().to_owned(),
            fields,
        });
    }
    Ok(out)
}

fn file_name(index: usize, email: &str) -> String {
    let safe: String = email
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '@' || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{index:06}-{safe}.html")
}

async fn render(args: RenderArgs) -> anyhow::Result<()> {
    let mut cfg = Config::load(args.config.as_deref())?;
    if let Some(d) = args.data_dir {
        cfg.data_dir = d;
    }
    if cfg.links.track_base.is_empty() {
        cfg.links.track_base = format!("http://{}", cfg.listen);
    }
    let html = std::fs::read(&args.template)
        .with_context(|| format!("reading {}", args.template.display()))?;
    let html = String::from_utf8(html)
        .with_context(|| format!("{} is not valid UTF-8", args.template.display()))?;
    let recipients = read_recipients(&args.recipients)?;
    anyhow::ensure!(
        !recipients.is_empty(),
        "{} lists no recipients",
        args.recipients.display()
    );
    std::fs::create_dir_all(&args.out)?;

    let clock: SharedClock = Arc::new(SystemClock);
    let events_dir = cfg.data_dir.join("events");
    std::fs::create_dir_all(&events_dir)?;
    let (raw, _) = tidemark_events::stores::open_both(&cfg.events, &events_dir).await?;
    let ingest = Ingest::new(raw, cfg.events.clone());
    let svc = LinksService::open(
        &cfg.data_dir,
        cfg.links.clone(),
        ingest,
        clock,
        LinksMetrics::unregistered(),
    )
    .await?;
    let tenant = cfg
        .tenants
        .first()
        .map_or("demo", |t| t.name.as_str())
        .to_owned();
    let mailing_id = svc
        .create_mailing(&tenant, &args.subject, &html, &args.from)
        .await?;

    let bar = ProgressBar::new(recipients.len() as u64);
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} recipients {per_sec} eta {eta}",
    )?);
    let mut skipped_csv = csv::Writer::from_path(args.out.join("skipped.csv"))?;
    skipped_csv.write_record(["email", "reason"])?;
    let (mut written, mut skipped) = (0usize, 0usize);
    // A row whose address is not one is reported, not fatal: the rest of the file goes on.
    let (recipients, invalid): (Vec<Recipient>, Vec<Recipient>) = recipients
        .into_iter()
        .partition(|r| r.email.parse::<lettre::Address>().is_ok());
    for r in &invalid {
        skipped_csv.write_record([r.email.as_str(), "not an email address"])?;
        skipped += 1;
        bar.inc(1);
    }
    for (chunk_no, chunk) in recipients.chunks(1000).enumerate() {
        let (_, build) = svc.render(&tenant, &mailing_id, chunk.to_vec()).await?;
        for (i, m) in build.messages.iter().enumerate() {
            std::fs::write(
                args.out.join(file_name(chunk_no * 1000 + i, &m.email)),
                &m.html,
            )?;
        }
        for s in &build.skipped {
            skipped_csv.write_record([s.email.as_str(), s.reason.as_str()])?;
        }
        written += build.messages.len();
        skipped += build.skipped.len();
        bar.inc(chunk.len() as u64);
    }
    skipped_csv.flush()?;
    bar.finish();
    println!(
        "mailing {mailing_id}: {written} messages written to {}, {skipped} skipped (see skipped.csv)",
        args.out.display()
    );
    Ok(())
}
