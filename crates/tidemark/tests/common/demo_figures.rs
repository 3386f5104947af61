//! The figures `tidemark demo` must print, computed by the tests with their own code from the
//! same inputs (the corpus files and the rules written in `tidemark::demo::plan`'s module doc —
//! re-derived here, never by calling the demo's code).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::{Value, json};

/// The shared corpus (`../shared/corpus` beside the repository).
pub fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus")
}

/// `(listing, kind)` → (total, distinct sessions).
pub type OttoCounts = BTreeMap<(i64, String), (u64, BTreeSet<i64>)>;

/// The OTTO file's events: `(ts, listing, kind, session)`, kinds as the demo maps them
/// (clicks → view, carts → click, orders → contact).
pub fn otto_events() -> Vec<(i64, i64, &'static str, i64)> {
    let text = std::fs::read_to_string(corpus().join("events/otto-sample.jsonl")).unwrap();
    let mut events = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        let session = v["session"].as_i64().unwrap();
        for e in v["events"].as_array().unwrap() {
            let kind = match e["type"].as_str().unwrap() {
                "clicks" => "view",
                "carts" => "click",
                _ => "contact",
            };
            events.push((
                e["ts"].as_i64().unwrap(),
                e["aid"].as_i64().unwrap(),
                kind,
                session,
            ));
        }
    }
    events
}

/// The listings (ascending), the counts and the number of events of the OTTO file.
pub fn otto() -> (Vec<i64>, OttoCounts, u64) {
    let mut counts = OttoCounts::new();
    let events = otto_events();
    for &(_, listing, kind, session) in &events {
        let entry = counts.entry((listing, kind.to_owned())).or_default();
        entry.0 += 1;
        entry.1.insert(session);
    }
    let listings: BTreeSet<i64> = counts.keys().map(|k| k.0).collect();
    (listings.into_iter().collect(), counts, events.len() as u64)
}

/// Asserts every figure of the demo's JSON summary `s` for a run with `recipients` per
/// campaign and `conversations` conversations, against one fresh set of stores.
pub fn assert_demo_summary(s: &Value, recipients: usize, conversations: usize) {
    // Expected, from the inputs.
    let (listings, otto, events) = otto();
    let n = listings.len();
    let templates = std::fs::read_dir(corpus().join("emails"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "html")
        })
        .count();
    let mut rows: BTreeMap<(i64, String), (u64, u64)> = otto
        .iter()
        .map(|(k, (total, sessions))| (k.clone(), (*total, sessions.len() as u64)))
        .collect();
    let (mut messages, mut retries) = (0u64, 0u64);
    for k in 0..conversations {
        rows.entry((listings[(k * 13) % n], "contact".into()))
            .or_default()
            .0 += 1;
        messages += 2 + (k % 4) as u64;
        retries += u64::from(k % 4 == 0);
    }
    let suppressed = (0..recipients).filter(|r| r % 97 == 0).count() as u64;
    let (mut opens, mut clicks, mut bots) = (0u64, 0u64, 0u64);
    for c in 0..templates {
        for r in (0..recipients).filter(|r| r % 97 != 0) {
            let x = r + c;
            opens += u64::from(x % 3 == 0);
            bots += u64::from(x % 11 == 0);
            if x % 5 == 0 {
                clicks += 1;
                let listing = listings[(c * 7919 + r * 31) % n];
                rows.entry((listing, "email_click".into())).or_default().0 += 1;
            }
        }
    }

    // Per account, the report rows.
    let accounts = s["accounts"].as_array().unwrap();
    assert_eq!(accounts.len(), 3);
    for (a, account) in accounts.iter().enumerate() {
        let owned: BTreeSet<i64> = listings
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 3 == a)
            .map(|(_, l)| *l)
            .collect();
        assert_eq!(account["account_id"], json!(a + 1));
        assert_eq!(account["listings"], json!(owned.len()));
        let mut expected: Vec<Value> = rows
            .iter()
            .filter(|((l, _), _)| owned.contains(l))
            .map(|((l, kind), (total, uniques))| {
                json!({"listing_id": l, "kind": kind, "total": total, "uniques_daily_sum": uniques})
            })
            .collect();
        let mut got = account["rows"].as_array().unwrap().clone();
        let key = |v: &Value| (v["listing_id"].as_i64().unwrap(), v["kind"].to_string());
        expected.sort_by_key(key);
        got.sort_by_key(key);
        assert_eq!(got, expected, "account {}", a + 1);
    }

    assert_eq!(s["events_ingested"], json!(events));
    let chat = &s["chat"];
    assert_eq!(chat["conversations"], json!(conversations));
    assert_eq!(chat["messages_committed"], json!(messages));
    assert_eq!(chat["retries_answered"], json!(retries));
    assert_eq!(
        chat["archived_messages"],
        json!(messages),
        "archived exactly once"
    );
    assert_eq!(chat["contacts_recorded"], json!(conversations));
    assert!(chat["archive_watermark"].is_string(), "{chat}");
    let links = &s["links"];
    assert_eq!(links["campaigns"], json!(templates));
    assert_eq!(
        links["messages_rendered"],
        json!(templates as u64 * (recipients as u64 - suppressed))
    );
    assert_eq!(
        links["recipients_skipped"],
        json!(templates as u64 * suppressed)
    );
    assert_eq!(links["links_stored"], links["tracking_urls"]);
    assert!(
        links["links_stored"].as_u64().unwrap() > 2 * links["messages_rendered"].as_u64().unwrap()
    );
    assert_eq!(links["opens"], json!(opens));
    assert_eq!(links["clicks"], json!(clicks));
    assert_eq!(links["bot_hits"], json!(bots));
}
