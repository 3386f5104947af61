//! `tidemark demo --embedded` replays a marketplace day through the public API; every
//! figure of its summary must equal what the tests compute from the same inputs with their own
//! code (`common::demo_figures`).

mod common;

use std::process::Command;

use common::demo_figures::{assert_demo_summary, corpus};
use serde_json::Value;

const RECIPIENTS: usize = 1000;
const CONVERSATIONS: usize = 200;

#[test]
fn the_demo_summary_equals_counts_computed_from_its_inputs() {
    let out = tempfile::tempdir().unwrap();
    let json_path = out.path().join("summary.json");
    let run = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["demo", "--embedded", "--corpus"])
        .arg(corpus())
        .args(["--recipients", &RECIPIENTS.to_string()])
        .args(["--conversations", &CONVERSATIONS.to_string()])
        .arg("--json")
        .arg(&json_path)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "demo failed: {stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let s: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();

    assert_demo_summary(&s, RECIPIENTS, CONVERSATIONS);
    assert!(stdout.contains("clicks counted vs"), "{stdout}");
}
