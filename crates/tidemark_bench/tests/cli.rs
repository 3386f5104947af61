//! `tidemark-bench` as a user runs it: its help, and short runs of `chat` and `events` against
//! real `tidemark serve` children.
//!
//! The server is the `tidemark` binary of the same target dir. Cargo gives an integration test
//! `CARGO_BIN_EXE_<name>` only for the binaries of its own package, and building another
//! package's binary for a test needs artifact dependencies, which are unstable; so these tests
//! take `tidemark` from beside `tidemark-bench`. `cargo test --workspace` builds it before any
//! test runs; alone, run `cargo build -p tidemark` first (else a stale `tidemark` binary is
//! measured, or the test fails saying so).

use std::path::PathBuf;
use std::process::{Command, Output};

const BENCH: &str = env!("CARGO_BIN_EXE_tidemark-bench");

/// The `tidemark` executable beside `tidemark-bench`.
fn server_bin() -> PathBuf {
    let exe = PathBuf::from(BENCH).with_file_name("tidemark");
    assert!(
        exe.is_file(),
        "{} is missing: build it first (`cargo build -p tidemark`; `cargo test --workspace` does)",
        exe.display()
    );
    exe
}

fn bench(args: &[&str]) -> Output {
    Command::new(BENCH)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("running tidemark-bench")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn help_lists_the_subcommands_and_each_takes_a_server_bin() {
    let out = bench(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        commands,
        ["chat", "links", "events", "soak", "help"],
        "{help}"
    );
    for sub in ["chat", "links", "events", "soak"] {
        let out = bench(&[sub, "--help"]);
        assert!(out.status.success());
        assert!(
            text(&out.stdout).contains("--server-bin <PATH>"),
            "{sub}: {}",
            text(&out.stdout)
        );
    }
}

#[test]
fn a_server_bin_naming_no_file_stops_the_run_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-tidemark");
    let out = bench(&[
        "chat",
        "--server-bin",
        missing.to_str().unwrap(),
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim_end(),
        format!("Error: --server-bin {}: no such file", missing.display())
    );
    // Nothing was measured: no temp data dir was made.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// The measured row of `run` in the chat table: its columns.
fn chat_row<'a>(stdout: &'a str, run: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cols| cols.first() == Some(&run) && cols.len() == 15)
        .unwrap_or_else(|| panic!("no row of {run} in:\n{stdout}"))
}

#[test]
fn chat_drives_the_tidemark_beside_it_by_default() {
    let server = server_bin();
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "chat",
        "--modes",
        "hot-only",
        "--rates",
        "200",
        "--duration",
        "2",
        "--warmup",
        "0.5",
        "--conversations",
        "50",
        "--fsync-seconds",
        "0.2",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.starts_with(&format!(
            "tidemark-bench chat — server {}, embedded (SQLite) engines",
            server.display()
        )),
        "{stdout}"
    );
    let row = chat_row(&stdout, "hot-only");
    assert_eq!(row[1], "200", "offered");
    let achieved: f64 = row[2].parse().unwrap();
    assert!((150.0..=250.0).contains(&achieved), "achieved {achieved}");
    // 400 sends were measured and counted by the server, besides the warmup's 100.
    let storage = stdout
        .lines()
        .find(|l| l.starts_with("hot-only ") && !l.contains('.'))
        .unwrap_or_else(|| panic!("no storage line in:\n{stdout}"));
    let messages: u64 = storage.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(messages, 500, "{storage}");
    assert!(
        stdout.contains("NOT MEASURED (tiered was not run"),
        "{stdout}"
    );
    // The run's temp data dir is gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn events_ingest_drives_the_server_named_by_the_flag() {
    let server = server_bin();
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "events",
        "--parts",
        "json",
        "--server-bin",
        server.to_str().unwrap(),
        "--ingest-seconds",
        "1",
        "--warmup",
        "0.2",
        "--batch",
        "100",
        "--bodies",
        "2",
        "--connections",
        "1",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout
            .lines()
            .next()
            .is_some_and(|l| l.ends_with(&format!("; server {}", server.display()))),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n1. ingest, JSON over loopback HTTP: POST /v1/events"),
        "{stdout}"
    );
    assert!(!stdout.contains("\n2. "), "only the JSON part: {stdout}");
    // The server stored every event it acknowledged, and it acknowledged some.
    let stored = stdout
        .lines()
        .find_map(|l| l.strip_prefix("raw tier after a graceful stop: "))
        .unwrap_or_else(|| panic!("no raw tier line in:\n{stdout}"));
    let words: Vec<&str> = stored.split_whitespace().collect();
    let (kept, acked): (u64, u64) = (words[0].parse().unwrap(), words[4].parse().unwrap());
    assert!(acked >= 100 && kept == acked, "{stored}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn rollup_and_report_run_beside_duckdb_over_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "events",
        "--parts",
        "rollup,report",
        "--rollup-events",
        "20000",
        "--rollup-listings",
        "300",
        "--append-batch",
        "5000",
        "--report-listings",
        "30",
        "--report-accounts",
        "3",
        "--report-days",
        "62",
        "--report-runs",
        "10",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // DuckDB answered both questions as Tidemark did, over five pairs of runs each.
    assert!(
        stdout.contains("DuckDB over the archived day (same answer: yes)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("DuckDB over the same rows (same answer: yes)"),
        "{stdout}"
    );
    assert_eq!(stdout.matches("; median ratio ").count(), 2, "{stdout}");
    // The raw tier's bytes per event beside InfluxDB's for the same events.
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("on disk per event: raw.db ") && l.contains(", InfluxDB ")),
        "{stdout}"
    );
    let pairs = stdout
        .lines()
        .find_map(|l| l.split_once("pairs Tidemark/DuckDB: ").map(|(_, p)| p))
        .and_then(|p| p.split(';').next())
        .unwrap_or_else(|| panic!("no pairs in:\n{stdout}"));
    assert_eq!(pairs.matches(" s").count(), 5, "{pairs}");
    // At rest, the summary tier's log is empty, and writing the days again adds nothing.
    let disk = stdout
        .lines()
        .find(|l| l.starts_with("on disk: rollups.db "))
        .unwrap_or_else(|| panic!("no disk line in:\n{stdout}"));
    assert_eq!(disk.matches("+ log 0 MB").count(), 2, "{disk}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn the_clicks_part_steps_until_the_clicks_are_stored() {
    let server = server_bin();
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "links",
        "--parts",
        "clicks",
        "--server-bin",
        server.to_str().unwrap(),
        "--clicks",
        "3000",
        "--clicks-step-seconds",
        "1",
        "--recipients",
        "100",
        "--wrk-connections",
        "8",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let steps = stdout
        .lines()
        .skip_while(|l| !l.starts_with("5. clicks: "))
        .nth(1)
        .unwrap_or_else(|| panic!("no steps in:\n{stdout}"));
    assert!(
        steps.contains(" M: ") && steps.contains("/s (p99 "),
        "{steps}"
    );
    // Too few clicks for a million-against-million verdict: not judged.
    assert!(
        stdout.contains("last million / first million: - (fewer than 2 M clicks)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("NOT MEASURED redirect rate flat"),
        "{stdout}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn the_records_part_redirects_over_records_stored_beside_the_server() {
    let server = server_bin();
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "links",
        "--parts",
        "records",
        "--server-bin",
        server.to_str().unwrap(),
        "--records-steps",
        "2000,5000",
        "--clicks-step-seconds",
        "1",
        "--warmup",
        "0",
        "--wrk-connections",
        "8",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // Every redirect over the records written beside the server was a 302 (the part fails
    // otherwise), at both steps.
    let steps = stdout
        .lines()
        .skip_while(|l| !l.starts_with("6. records: "))
        .nth(1)
        .unwrap_or_else(|| panic!("no steps in:\n{stdout}"));
    assert!(
        steps.trim_start().starts_with("0.0 M: ") && steps.contains(", 0.0 M: "),
        "{steps}"
    );
    assert!(stdout.contains("last step / first step: "), "{stdout}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// The stats part at a small size: every hit is counted exactly (the part fails otherwise),
/// both phases of reads are reported, and the bar is not judged below a million recipients.
#[test]
fn the_stats_part_reads_the_statistics_of_a_rendered_and_clicked_mailing() {
    let server = server_bin();
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "links",
        "--parts",
        "stats",
        "--server-bin",
        server.to_str().unwrap(),
        "--stats-recipients",
        "2500",
        "--stats-seconds",
        "0.5",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("7. stats: a mailing of 2500 recipients")
            && stdout.contains("1000 opens and clicks"),
        "{stdout}"
    );
    let alone = stdout
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("GET /v1/mailings/{mid}/stats alone: ")
        })
        .unwrap_or_else(|| panic!("no reads in:\n{stdout}"));
    assert!(
        alone.contains(" reads, p50 ") && alone.contains(" ms, p99 "),
        "{alone}"
    );
    assert!(
        stdout.contains("the same while redirects run ("),
        "{stdout}"
    );
    assert!(stdout.contains("NOT MEASURED"), "{stdout}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// The table row of node count `n` in a `--nodes` run: its cells, trimmed.
fn nodes_row(stdout: &str, n: usize) -> Vec<String> {
    let line = stdout
        .lines()
        .find(|l| l.split('|').next().map(str::trim) == Some(&n.to_string()))
        .unwrap_or_else(|| panic!("no row for {n} nodes in:\n{stdout}"));
    line.split('|').map(|c| c.trim().to_owned()).collect()
}

#[test]
fn links_and_events_run_on_two_nodes_sharing_mariadb_and_influxdb() {
    let mysql = tidemark_core::mysql::test_server_url();
    let server = server_bin();
    let server = server.to_str().unwrap();
    let links = bench(&[
        "links",
        "--nodes",
        "2",
        "--recipients",
        "60",
        "--wrk-connections",
        "8",
        "--warmup",
        "0.2",
        "--redirect-seconds",
        "1",
        "--mysql",
        &mysql,
        "--server-bin",
        server,
    ]);
    let events = bench(&[
        "events",
        "--nodes",
        "2",
        "--batch",
        "200",
        "--bodies",
        "2",
        "--connections",
        "2",
        "--warmup",
        "0.2",
        "--ingest-seconds",
        "1",
        "--mysql",
        &mysql,
        "--server-bin",
        server,
    ]);
    for (what, out) in [("links", links), ("events", events)] {
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{what}: {stdout}\n{}",
            text(&out.stderr)
        );
        let row = nodes_row(&stdout, 2);
        // nodes | rate/s | per node | MariaDB ms/k | influxd ms/k | failed
        assert_eq!(row.len(), 6, "{what}: {row:?}");
        assert!(row[1].parse::<f64>().unwrap() > 0.0, "{what}: {row:?}");
        assert_eq!(
            row[2].matches("/s").count(),
            2,
            "{what}: one rate per node: {row:?}"
        );
        assert_eq!(
            row[5], "0",
            "{what}: nothing failed, nothing mismatched: {row:?}"
        );
    }
}

#[test]
fn soak_kills_and_checks_the_embedded_server_for_the_cycles_asked() {
    let server = server_bin();
    let dir = tempfile::tempdir().unwrap();
    // Flags repeat as scripts/soak passes them: the last value wins.
    let out = bench(&[
        "soak",
        "--config",
        "all",
        "--config",
        "embedded",
        "--cycles",
        "2",
        "--senders",
        "2",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.starts_with(&format!(
            "tidemark-bench soak — server {}",
            server.display()
        )),
        "{stdout}"
    );
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("embedded: "))
        .unwrap_or_else(|| panic!("no summary in:\n{stdout}"));
    assert!(summary.starts_with("embedded: 2 cycles in "), "{summary}");
    assert!(summary.ends_with("; 0 violations"), "{summary}");
    assert!(!stdout.contains("redis-mariadb"), "{stdout}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
