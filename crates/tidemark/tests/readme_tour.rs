//! The README's tour cannot rot. Every `sh` block of the "Tour" section runs, in
//! order, as one bash script (`set -euo pipefail`) against a live server, with three
//! substitutions only: the server's address for `http://127.0.0.1:8080`, this build's binary
//! for `cargo run --release --`, and the corpus's absolute path for `../shared/corpus`. Then
//! the output must hold what the tour's comments promise.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

fn readme() -> String {
    std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
        .unwrap()
}

/// The `sh` blocks between `## Tour` and the next `## ` heading, concatenated.
fn tour_script(readme: &str) -> String {
    let start = readme.find("\n## Tour").expect("README has a Tour section");
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3);
    let section = &rest[..end];
    let mut script = String::new();
    let mut in_block = false;
    for line in section.lines() {
        match (in_block, line.trim_start()) {
            (false, "```sh") => in_block = true,
            (true, "```") => in_block = false,
            (true, _) => {
                script.push_str(line);
                script.push('\n');
            }
            _ => {}
        }
    }
    assert!(!in_block, "unterminated code block in the Tour");
    script
}

#[test]
fn the_tour_script_is_every_sh_block_of_the_section() {
    let s = tour_script(
        "# x\n## Tour\ntext\n```sh\na\nb\n```\n```toml\nno\n```\n```sh\nc\n```\n## Next\n```sh\nd\n```\n",
    );
    assert_eq!(s, "a\nb\nc\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tour_command_works_as_written() {
    let server = TestServer::start(&[]).await;
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus");
    let script = tour_script(&readme())
        .replace("http://127.0.0.1:8080", &server.base)
        .replace("cargo run --release --", env!("CARGO_BIN_EXE_tidemark"))
        .replace("../shared/corpus", corpus.to_str().unwrap());
    assert!(
        script.contains(&server.base),
        "the tour talks to {}",
        server.base
    );
    let work = tempfile::tempdir().unwrap();
    let out = tokio::task::spawn_blocking({
        let dir = work.path().to_path_buf();
        move || {
            Command::new("bash")
                .args(["-euo", "pipefail", "-c", &script])
                .current_dir(dir)
                .env("RUST_LOG", "warn")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the tour failed: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    eprintln!("--- the tour's output\n{stdout}");
    // What the comments promise, in order.
    let promises = [
        r#""conversation_seq":1"#,
        r#""conversation_seq":1"#, // the retry: the same ACK
        r#""conversation_seq":2"#,
        r#""earliest_available_seq":1"#,
        r#""unread":"#,
        // seller7's stream from the start: the conversation's messages, then live.
        "event: message",
        r#""conversation_seq":2"#,
        "event: ready",
        r#""code":"forbidden""#,
        "ok",
        "tidemark_chat_sends_total 2",
        r#""skipped":[{"email":"blocked@example.com","reason":"suppressed"}]"#,
        "location: https://shop.example/item/48213?utm=nl&x=1",
        r#""queued":1"#,
        r#""accepted":2"#,
        r#""rows_written":1"#,
        r#""rows_written":3"#,
        r#""account_id":7"#,
        r#"{"listing_id":48213,"kind":"contact","total":2,"uniques_daily_sum":1,"uniques_period":1}"#,
        r#"{"listing_id":48213,"kind":"email_click","total":1,"uniques_daily_sum":0,"uniques_period":0}"#,
        r#"{"listing_id":48213,"kind":"view","total":2,"uniques_daily_sum":2,"uniques_period":2}"#,
        r#""minutes":["#,
        r#""raw_retention_days":7"#,
        r#""listings":["#,
        "/dashboard?key=dev-key",
    ];
    let mut at = 0;
    for p in promises {
        let found = stdout[at..]
            .find(p)
            .unwrap_or_else(|| panic!("the tour's output lacks {p:?} after byte {at}:\n{stdout}"));
        at += found + p.len();
    }
    // The offline mail builder wrote its messages and skipped nobody.
    let built: Vec<_> = std::fs::read_dir(work.path().join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        built.iter().filter(|n| n.ends_with(".html")).count(),
        2,
        "{built:?}"
    );
    // The report has the tour's view and contact for listing 48213 on 2026-11-29/30.
    assert!(
        stdout.contains(r#""listing_id":48213"#),
        "the report lists the tour's listing: {stdout}"
    );
}
