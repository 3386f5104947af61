//! `tidemark-bench links`: the figures of the links subsystem (seed 001), in seven parts:
//! 1. **rewrite** — [`find_links`] + [`splice`] over every corpus template, repeated for
//!    `--rewrite-seconds` on one thread: MB/s of input HTML.
//! 2. **render** — [`LinksService::render`] of `--template` (merge fields, rewrite, ids, and all
//!    link records of the call stored in one batch in the SQLite link store) in calls of
//!    `--render-batch` recipients for `--render-seconds`: recipients/s and link records/s, then
//!    one call's time split into merge fields, rewrite + ids, and the store.
//! 3. **insert** — [`store`]: link-store insert rate per million rows up to `--rows`.
//! 4. **redirect** — [`redirect`]: `GET /c/<id>` against a `tidemark serve` child
//!    (`--server-bin`), with `wrk` and with the open-loop driver, and beside nginx.
//! 5. **clicks** (not by default) — [`clicks`]: the redirect rate as clicks accumulate.
//! 6. **records** (not by default) — [`records`]: the redirect rate as link records
//!    accumulate.
//! 7. **stats** (not by default) — [`stats`]: the campaign statistics of a mailing of a
//!    million recipients, read alone and under redirect load.
//!
//! With `--nodes 1,2,3` it runs instead the redirector on that many nodes sharing MariaDB and
//! the events engines (`nodes.rs`, on [`crate::nodes`]).
//!
//! It prints the figures, then each bar of the links benchmark with PASS/FAIL; it asserts
//! nothing.

mod clicks;
mod hit;
mod nginx;
mod nodes;
mod records;
mod redirect;
mod schemas;
mod stats;
mod store;
mod wrk;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde_json::{Map, Value};
use tidemark_core::clock::SystemClock;
use tidemark_events::{EventsConfig, Ingest, SqliteRaw};
use tidemark_links::builder::{Builder, Recipient};
use tidemark_links::config::LinksConfig;
use tidemark_links::id::IdCodec;
use tidemark_links::metrics::LinksMetrics;
use tidemark_links::render::MailTemplate;
use tidemark_links::rewrite::{RewriteConfig, find_links, pixel_html, splice};
use tidemark_links::rules::RuleConfig;
use tidemark_links::service::LinksService;

use super::{Bar, ServerBin, load_average, print_summary, temp_root};

/// The corpus beside the repository (`shared/corpus/emails`), as seen from this crate.
const DEFAULT_CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/corpus/emails");
/// Tenant of the in-process service.
const TENANT: &str = "demo";
/// Tracking base of the in-process parts (nothing listens there).
const TRACK_BASE: &str = "http://127.0.0.1:1";
/// Subject of the benchmark mailings.
const SUBJECT: &str = "News for {{ first_name }}";
/// Bar: recipients rendered and stored per second.
const BAR_RECIPIENTS: f64 = 1_000.0;
/// Bar: the last million inserts at least this fraction of the first million's rate.
const BAR_FLAT: f64 = 0.85;
/// Bar: redirects per second…
const BAR_REDIRECTS: f64 = 10_000.0;
/// …with a p99 at most this (ms).
const BAR_P99_MS: f64 = 10.0;
/// Bar: the redirector's req/s at least this share of nginx's `return 302` in the same run.
const BAR_NGINX_SHARE: f64 = 0.3;

/// A part of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// Rewrite throughput over the corpus.
    Rewrite,
    /// Recipients rendered and stored per second.
    Render,
    /// Link-store insert rate per million rows.
    Insert,
    /// Redirect requests/s and latency against a server.
    Redirect,
    /// The redirect rate as clicks accumulate (not run by default: `--clicks`, 10 M).
    Clicks,
    /// The redirect rate as link records accumulate (not run by default:
    /// `--records-steps`, up to 50 M).
    Records,
    /// Campaign statistics of a big mailing, read alone and under redirect load (not run by
    /// default: `--stats-recipients`, 1 M).
    Stats,
}

/// Arguments of `tidemark-bench links`.
#[derive(Debug, Clone, clap::Args)]
pub struct LinksBenchArgs {
    /// Parts to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "rewrite,render,insert,redirect"
    )]
    pub parts: Vec<Part>,
    /// Directory of the HTML templates [default: shared/corpus/emails beside the repository].
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// Seconds of the rewrite loop.
    #[arg(long, default_value_t = 2.0)]
    pub rewrite_seconds: f64,
    /// Template of the render part (a file name in the corpus, or a path).
    #[arg(long, default_value = "cerberus-hybrid.html")]
    pub template: String,
    /// Seconds of the render loop.
    #[arg(long, default_value_t = 10.0)]
    pub render_seconds: f64,
    /// Recipients per render call.
    #[arg(long, default_value_t = 1_000)]
    pub render_batch: usize,
    /// Render calls in flight at once.
    #[arg(long, default_value_t = 1)]
    pub render_concurrency: usize,
    /// Link records to insert in the insert part.
    #[arg(long, default_value_t = 10_000_000)]
    pub rows: u64,
    /// Records per insert call.
    #[arg(long, default_value_t = 10_000)]
    pub insert_batch: usize,
    /// Run the insert part on MariaDB instead of SQLite: the server's URL
    /// (`mysql://user[:password]@host[:port]`); each schema gets a scratch database, dropped
    /// afterwards (seed 001: 0 to 20 million rows).
    #[arg(long)]
    pub insert_mysql: Option<String>,
    /// The MariaDB schemas the insert part compares (with `--insert-mysql`).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "random-pk,autoinc-unique,tidemark"
    )]
    pub mysql_schemas: Vec<schemas::MysqlSchema>,
    /// Write the MariaDB insert comparison as `insert-mysql.svg` into this directory
    /// (e.g. `docs/benchmarks`).
    #[arg(long)]
    pub plot_dir: Option<PathBuf>,
    /// Recipients rendered through the server to get the redirect part's `/c/` ids.
    #[arg(long, default_value_t = 2_000)]
    pub recipients: usize,
    /// Measured seconds of each redirect run (wrk, open loop).
    #[arg(long, default_value_t = 10.0)]
    pub redirect_seconds: f64,
    /// Clicks the clicks part stores before it stops.
    #[arg(long, default_value_t = 10_000_000)]
    pub clicks: u64,
    /// Seconds of each wrk step of the clicks and records parts.
    #[arg(long, default_value_t = 10.0)]
    pub clicks_step_seconds: f64,
    /// Link records stored at each step of the records part (increasing).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000000,10000000,20000000,30000000,40000000,50000000"
    )]
    pub records_steps: Vec<u64>,
    /// Recipients of the stats part's mailing.
    #[arg(long, default_value_t = 1_000_000)]
    pub stats_recipients: usize,
    /// Seconds of each phase of stats reads.
    #[arg(long, default_value_t = 5.0)]
    pub stats_seconds: f64,
    /// Clients reading the stats back to back.
    #[arg(long, default_value_t = 4)]
    pub stats_clients: usize,
    /// Seconds of each wrk run of the pairs against nginx's `return 302` (five pairs, when
    /// nginx and wrk are installed).
    #[arg(long, default_value_t = 5.0)]
    pub pair_seconds: f64,
    /// wrk threads.
    #[arg(long, default_value_t = 2)]
    pub wrk_threads: usize,
    /// wrk connections.
    #[arg(long, default_value_t = 64)]
    pub wrk_connections: usize,
    /// Offered rate of the open-loop redirect run, requests per second.
    #[arg(long, default_value_t = 10_000)]
    pub rate: u64,
    /// Seconds of the open-loop run before the measured window (sent, not recorded).
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Seconds of each step of the in-process split of a redirect's cost.
    #[arg(long, default_value_t = 1.0)]
    pub split_seconds: f64,
    /// Most open-loop requests outstanding at once.
    #[arg(long, default_value_t = 512)]
    pub max_in_flight: usize,
    /// Directory under which the temporary data dirs go [default: the system temp dir].
    /// Removed afterwards.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Node counts: run only the redirector on that many nodes in turn (role `all`, links on a
    /// scratch MariaDB database of `--mysql`, click events on a private `influxd` and MariaDB),
    /// with `--wrk-connections` connections spread over the nodes, `--warmup` +
    /// `--redirect-seconds` per count (e.g. `--nodes 1,2,3`).
    #[arg(long, value_delimiter = ',')]
    pub nodes: Vec<usize>,
    /// The MariaDB server of `--nodes` (`mysql://user[:password]@host[:port]`).
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    pub mysql: String,
    /// The server executable of the redirect part.
    #[command(flatten)]
    pub server: ServerBin,
}

/// Runs the links benchmark on its own single-threaded runtime (see
/// [`super::on_own_thread`]); CPU-heavy steps run in blocking tasks.
pub async fn run(args: LinksBenchArgs) -> anyhow::Result<()> {
    super::on_own_thread("bench-links", move || run_here(args)).await
}

async fn run_here(args: LinksBenchArgs) -> anyhow::Result<()> {
    let positive = [
        args.rewrite_seconds,
        args.render_seconds,
        args.redirect_seconds,
        args.split_seconds,
    ];
    ensure!(
        positive.iter().all(|s| *s > 0.0) && args.warmup >= 0.0,
        "durations must be positive (--warmup not negative)"
    );
    ensure!(
        args.render_batch > 0
            && args.render_concurrency > 0
            && args.rows > 0
            && args.insert_batch > 0
            && args.recipients > 0
            && args.rate > 0
            && args.max_in_flight > 0
            && args.wrk_threads > 0
            && args.wrk_connections >= args.wrk_threads,
        "sizes and rates must be positive, --wrk-connections ≥ --wrk-threads"
    );
    ensure!(!args.nodes.contains(&0), "--nodes counts must be positive");
    if !args.nodes.is_empty() {
        let server_bin = args.server.resolve()?;
        let root = temp_root(args.dir.as_deref(), "links-nodes")?;
        println!(
            "tidemark-bench links --nodes — machine: {} CPUs, load average {}; server {}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            load_average(),
            server_bin.display()
        );
        return nodes::run(&args, &server_bin, &args.mysql, root.path()).await;
    }
    let wants = |p: Part| args.parts.contains(&p);
    // Found before any part runs, so a missing server fails the run at once.
    let server_bin = (wants(Part::Redirect)
        || wants(Part::Clicks)
        || wants(Part::Records)
        || wants(Part::Stats))
    .then(|| args.server.resolve())
    .transpose()?;
    let root = temp_root(args.dir.as_deref(), "links")?;
    let corpus_dir = args
        .corpus
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CORPUS));

    println!(
        "tidemark-bench links — machine: {} CPUs, load average {}; data under {}{}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average(),
        root.path().display(),
        server_bin
            .as_deref()
            .map_or_else(String::new, |b| format!("; server {}", b.display()))
    );
    let mut bars = Vec::new();
    if wants(Part::Rewrite) {
        let corpus = load_corpus(&corpus_dir)?;
        let secs = args.rewrite_seconds;
        let r = tokio::task::spawn_blocking(move || bench_rewrite(&corpus, secs)).await??;
        print!("{}", r.report());
    }
    if wants(Part::Render) {
        let dir = root.path().join("render");
        let r = bench_render(&args, &corpus_dir, &dir).await?;
        print!("{}", r.report());
        let _ = std::fs::remove_dir_all(&dir);
        bars.push(Bar {
            name: format!("render+store ≥ {BAR_RECIPIENTS:.0} recipients/s"),
            figure: format!(
                "{:.0} recipients/s ({:.0} link records/s)",
                r.recipients_per_sec(),
                r.records_per_sec()
            ),
            pass: Some(r.recipients_per_sec() >= BAR_RECIPIENTS),
        });
    }
    if wants(Part::Insert)
        && let Some(server) = &args.insert_mysql
    {
        let mut curves = Vec::new();
        for schema in &args.mysql_schemas {
            let r = store::bench_insert_mysql(&args, server, *schema).await?;
            print!("{}", r.report());
            curves.push(super::plot::Series {
                name: schema.label().to_owned(),
                points: r.curve(),
            });
            bars.push(Bar {
                name: format!(
                    "{}: last million within {:.0} % of the first{}",
                    schema.label(),
                    (1.0 - BAR_FLAT) * 100.0,
                    if *schema == schemas::MysqlSchema::Tidemark {
                        ""
                    } else {
                        " (seed: degrades)"
                    }
                ),
                figure: r.ratio().map_or_else(
                    || "fewer than two segments".into(),
                    |x| format!("last/first = {x:.2}"),
                ),
                pass: (*schema == schemas::MysqlSchema::Tidemark)
                    .then(|| r.ratio().map(|x| x >= BAR_FLAT))
                    .flatten(),
            });
        }
        if let Some(dir) = &args.plot_dir {
            super::plot::write_chart(
                &dir.join("insert-mysql.svg"),
                "Seed 001 on MariaDB: link-table insert rate as the table grows",
                "rows in the table",
                "rows/s (per million rows)",
                &curves,
            )?;
        }
    } else if wants(Part::Insert) {
        let dir = root.path().join("insert");
        let r = store::bench_insert(&args, &dir).await?;
        print!("{}", r.report());
        let _ = std::fs::remove_dir_all(&dir);
        bars.push(Bar {
            name: format!(
                "insert rate flat: last million within {:.0} % of the first",
                (1.0 - BAR_FLAT) * 100.0
            ),
            figure: r.ratio().map_or_else(
                || "fewer than two segments".into(),
                |x| format!("last/first = {x:.2}"),
            ),
            pass: r.ratio().map(|x| x >= BAR_FLAT),
        });
    }
    if let Some(server_bin) = server_bin.as_deref().filter(|_| wants(Part::Redirect)) {
        let r = redirect::bench_redirect(&args, server_bin, &root.path().join("redirect")).await?;
        print!("{}", r.report());
        bars.extend(r.bars());
    }
    if let Some(server_bin) = server_bin.as_deref().filter(|_| wants(Part::Clicks)) {
        let r = clicks::bench_clicks(&args, server_bin, &root.path().join("clicks")).await?;
        print!("{}", r.report());
        bars.push(r.bar());
        plot_redirects(
            &args,
            "redirect-clicks.svg",
            "clicks",
            "clicks stored",
            r.curve(),
        )?;
    }
    if let Some(server_bin) = server_bin.as_deref().filter(|_| wants(Part::Records)) {
        let dir = root.path().join("records");
        let r = records::bench_records(&args, server_bin, &dir).await?;
        let _ = std::fs::remove_dir_all(&dir);
        print!("{}", r.report());
        bars.push(r.bar());
        plot_redirects(
            &args,
            "redirect-records.svg",
            "link records",
            "link records stored",
            r.curve(),
        )?;
    }
    if let Some(server_bin) = server_bin.as_deref().filter(|_| wants(Part::Stats)) {
        let dir = root.path().join("stats");
        let r = stats::bench_stats(&args, server_bin, &dir).await?;
        let _ = std::fs::remove_dir_all(&dir);
        print!("{}", r.report());
        bars.push(r.bar());
    }

    print_summary("links", &bars);
    drop(root);
    Ok(())
}

/// With `--plot-dir`, `file` there: the redirect rate of each wrk step against the `what`
/// stored when it ended.
fn plot_redirects(
    args: &LinksBenchArgs,
    file: &str,
    what: &str,
    x_label: &str,
    points: Vec<(f64, f64)>,
) -> anyhow::Result<()> {
    let Some(dir) = &args.plot_dir else {
        return Ok(());
    };
    super::plot::write_chart(
        &dir.join(file),
        &format!("Redirects (each a click stored) as {what} accumulate, wrk -c64"),
        x_label,
        "redirects/s (per step)",
        &[super::plot::Series {
            name: "GET /c/<id>, embedded default".into(),
            points,
        }],
    )
}

fn load_corpus(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let entries = std::fs::read_dir(dir).with_context(|| {
        format!(
            "reading the template corpus {} (pass --corpus DIR)",
            dir.display()
        )
    })?;
    let mut files = Vec::new();
    for e in entries {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "html") {
            let name = path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            let html = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            files.push((name, html));
        }
    }
    files.sort();
    ensure!(!files.is_empty(), "no .html templates in {}", dir.display());
    Ok(files)
}

fn rewrite_config() -> RewriteConfig {
    RewriteConfig {
        rules: RuleConfig {
            own_hosts: vec!["t.example.net".into()],
            ..RuleConfig::default()
        },
        track_images: false,
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Rewrite throughput.

/// Figures of the rewrite part.
#[derive(Debug)]
struct RewriteFigures {
    /// Per template: name, bytes, links found, passes, seconds in find_links, in splice.
    files: Vec<(String, usize, usize, u64, f64, f64)>,
    wall: f64,
}

fn bench_rewrite(corpus: &[(String, String)], secs: f64) -> anyhow::Result<RewriteFigures> {
    let cfg = rewrite_config();
    let replacement = format!("https://t.example.net/c/{}", "A".repeat(32));
    let pixel = pixel_html(&format!("https://t.example.net/o/{}", "B".repeat(32)));
    let mut files: Vec<(String, usize, usize, u64, f64, f64)> = corpus
        .iter()
        .map(|(n, h)| (n.clone(), h.len(), 0, 0, 0.0, 0.0))
        .collect();
    let start = Instant::now();
    let limit = Duration::from_secs_f64(secs);
    while start.elapsed() < limit {
        for ((_, html), f) in corpus.iter().zip(files.iter_mut()) {
            let t0 = Instant::now();
            let found = find_links(html, &cfg)?;
            let t1 = Instant::now();
            let reps = vec![replacement.clone(); found.len()];
            let out = splice(html, &found, &reps, Some(&pixel));
            black_box(&out);
            let t2 = Instant::now();
            f.2 = found.len();
            f.3 += 1;
            f.4 += (t1 - t0).as_secs_f64();
            f.5 += (t2 - t1).as_secs_f64();
        }
    }
    Ok(RewriteFigures {
        files,
        wall: start.elapsed().as_secs_f64(),
    })
}

impl RewriteFigures {
    fn report(&self) -> String {
        let mut s = format!(
            "\n1. rewrite (find_links + splice, one thread, {:.1} s): MB/s of input HTML\n\
             {:<36} {:>8} {:>6} {:>8} {:>10} {:>10} {:>9}\n",
            self.wall, "template", "KB", "links", "passes", "find µs", "splice µs", "MB/s"
        );
        let (mut bytes, mut find, mut spl) = (0.0, 0.0, 0.0);
        for (name, len, links, passes, f, sp) in &self.files {
            let b = (*len as u64 * passes) as f64;
            bytes += b;
            find += f;
            spl += sp;
            s.push_str(&format!(
                "{:<36} {:>8.1} {:>6} {:>8} {:>10.1} {:>10.1} {:>9.1}\n",
                name,
                *len as f64 / 1024.0,
                links,
                passes,
                f / *passes as f64 * 1e6,
                sp / *passes as f64 * 1e6,
                b / (f + sp) / 1e6
            ));
        }
        s.push_str(&format!(
            "whole corpus: {:.1} MB/s ({:.0} MB in {:.2} s; find_links {:.0} %, splice {:.0} %)\n",
            bytes / (find + spl) / 1e6,
            bytes / 1e6,
            find + spl,
            find / (find + spl) * 100.0,
            spl / (find + spl) * 100.0
        ));
        s
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Render and store.

/// Figures of the render part.
#[derive(Debug)]
struct RenderFigures {
    template: String,
    template_bytes: usize,
    batch: usize,
    concurrency: usize,
    recipients: u64,
    records: u64,
    html_bytes: u64,
    wall: f64,
    /// Seconds per call.
    calls: Vec<f64>,
    /// One batch on one thread: merge fields, render + rewrite + ids (the builder), store.
    split: (f64, f64, f64),
    split_records: usize,
}

impl RenderFigures {
    fn recipients_per_sec(&self) -> f64 {
        self.recipients as f64 / self.wall
    }
    fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.wall
    }

    fn report(&self) -> String {
        let mut calls = self.calls.clone();
        calls.sort_by(f64::total_cmp);
        let q = |p: f64| calls[((calls.len() - 1) as f64 * p).round() as usize] * 1000.0;
        let (merge, build, store) = self.split;
        let per = |secs: f64| secs / self.batch as f64 * 1e6;
        format!(
            "\n2. render + store ({}, {:.1} KB, {} links+pixel per message): LinksService::render, \
             {} recipients per call, {} call(s) in flight, {:.1} s\n\
             {} recipients in {} calls: {:.0} recipients/s, {:.0} link records/s, {:.1} MB/s of \
             HTML out; call p50 {:.0} ms, max {:.0} ms\n\
             split of one {}-recipient batch on one thread: merge fields {:.0} µs/recipient, \
             rewrite + ids {:.0} µs/recipient, store {} records in one batch {:.1} ms \
             ({:.1} µs/recipient) → {:.0} recipients/s if run back to back\n",
            self.template,
            self.template_bytes as f64 / 1024.0,
            self.records as f64 / self.recipients.max(1) as f64,
            self.batch,
            self.concurrency,
            self.wall,
            self.recipients,
            calls.len(),
            self.recipients_per_sec(),
            self.records_per_sec(),
            self.html_bytes as f64 / self.wall / 1e6,
            q(0.5),
            q(1.0),
            self.batch,
            per(merge),
            per(build - merge),
            self.split_records,
            store * 1000.0,
            per(store),
            self.batch as f64 / (build + store)
        )
    }
}

/// Merge fields for `html`: every simple `{{ name }}` it uses, plus the subject's.
fn merge_fields(html: &str) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("first_name".into(), "Ada".into());
    fields.insert("last_name".into(), "Lovelace".into());
    let mut rest = html;
    while let Some(at) = rest.find("{{") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find("}}") else { break };
        let name = rest[..end].trim();
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            fields
                .entry(name.to_owned())
                .or_insert_with(|| Value::String(format!("{name} value")));
        }
        rest = &rest[end..];
    }
    fields
}

fn recipients(from: u64, n: usize, fields: &Map<String, Value>) -> Vec<Recipient> {
    (0..n as u64)
        .map(|i| Recipient {
            email: format!("reader{}@example.com", from + i),
            fields: fields.clone(),
        })
        .collect()
}

/// Opens the embedded links service in `dir`, and the events ingest it records into.
fn open_service(dir: &Path, track_base: &str) -> anyhow::Result<(LinksService, Ingest)> {
    std::fs::create_dir_all(dir)?;
    let raw = SqliteRaw::open(&dir.join("raw.db"))?;
    let ingest = Ingest::new(Arc::new(raw), EventsConfig::default());
    let cfg = LinksConfig {
        track_base: track_base.into(),
        ..Default::default()
    };
    let svc = LinksService::open_embedded(
        dir,
        cfg,
        ingest.clone(),
        Arc::new(SystemClock),
        LinksMetrics::unregistered(),
    )?;
    Ok((svc, ingest))
}

async fn bench_render(
    args: &LinksBenchArgs,
    corpus_dir: &Path,
    dir: &Path,
) -> anyhow::Result<RenderFigures> {
    let path = if Path::new(&args.template).exists() {
        PathBuf::from(&args.template)
    } else {
        corpus_dir.join(&args.template)
    };
    let html = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the template {}", path.display()))?;
    let (svc, _) = open_service(dir, TRACK_BASE)?;
    let mid = svc
        .create_mailing(TENANT, SUBJECT, &html, "news@example.com")
        .await?;
    let fields = Arc::new(merge_fields(&html));
    eprintln!("render: {} for {} s …", path.display(), args.render_seconds);

    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(args.render_seconds);
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..args.render_concurrency {
        let (svc, mid, fields, batch) = (
            svc.clone(),
            mid.clone(),
            Arc::clone(&fields),
            args.render_batch,
        );
        workers.spawn(async move {
            let (mut recips, mut records, mut bytes, mut calls) = (0u64, 0u64, 0u64, Vec::new());
            let mut next = (w as u64) << 40;
            while Instant::now() < deadline {
                let t = Instant::now();
                let (_, build) = svc
                    .render(TENANT, &mid, recipients(next, batch, &fields))
                    .await?;
                calls.push(t.elapsed().as_secs_f64());
                if let Some(s) = build.skipped.first() {
                    bail!("{} skipped: {}", s.email, s.reason);
                }
                next += batch as u64;
                recips += build.messages.len() as u64;
                records += build.records.len() as u64;
                bytes += build
                    .messages
                    .iter()
                    .map(|m| m.html.len() as u64)
                    .sum::<u64>();
            }
            anyhow::Ok((recips, records, bytes, calls))
        });
    }
    let mut fig = RenderFigures {
        template: args.template.clone(),
        template_bytes: html.len(),
        batch: args.render_batch,
        concurrency: args.render_concurrency,
        recipients: 0,
        records: 0,
        html_bytes: 0,
        wall: 0.0,
        calls: Vec::new(),
        split: (0.0, 0.0, 0.0),
        split_records: 0,
    };
    while let Some(r) = workers.join_next().await {
        let (recips, records, bytes, calls) = r??;
        fig.recipients += recips;
        fig.records += records;
        fig.html_bytes += bytes;
        fig.calls.extend(calls);
    }
    fig.wall = start.elapsed().as_secs_f64();

    // Where the time of one call goes: the same steps, timed one by one.
    let batch = recipients(u64::MAX >> 1, args.render_batch, &fields);
    let (html2, mid2) = (html.clone(), mid.clone());
    let (merge, build, records) = tokio::task::spawn_blocking(move || {
        let template = MailTemplate::compile(&html2, SUBJECT)?;
        let t = Instant::now();
        for r in &batch {
            black_box(template.render(&r.fields).map_err(anyhow::Error::msg)?);
        }
        let merge = t.elapsed().as_secs_f64();
        let codec = IdCodec::new(rand::random());
        let rewrite = RewriteConfig {
            rules: RuleConfig {
                own_hosts: vec!["127.0.0.1".into()],
                ..RuleConfig::default()
            },
            track_images: false,
        };
        let builder = Builder {
            template: &template,
            rewrite: &rewrite,
            codec: &codec,
            track_base: TRACK_BASE,
            mailing_id: &mid2,
            max_links: usize::MAX,
        };
        let t = Instant::now();
        let now = tidemark_core::clock::Clock::now_ms(&SystemClock);
        let out = builder.build(&batch, &Default::default(), now);
        anyhow::Ok((merge, t.elapsed().as_secs_f64(), out.records))
    })
    .await??;
    fig.split_records = records.len();
    let t = Instant::now();
    svc.link_store().insert(records).await?;
    fig.split = (merge, build, t.elapsed().as_secs_f64());
    Ok(fig)
}
