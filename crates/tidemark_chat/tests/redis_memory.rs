//! Redis bytes per message of the hot tier (a benchmark figure, measured here as a test):
//! 1,000 committed messages of one conversation on a private redis-server, every key's
//! `MEMORY USAGE` summed, bodies (20 B each) subtracted. Record, hot index, trim candidate and
//! dedup entry (with its expiry entry) are all counted; the test prints the split by key kind.

use std::sync::Arc;

use tidemark_chat::model::{MessageClass, Reservation, SendCommand};
use tidemark_chat::ports::{CommitParams, HotStore};
use tidemark_chat::redis::RedisHot;
use tidemark_chat::redis::keys::kind_of;
use tidemark_chat::testing::RedisServer;

const N: u64 = 1_000;
const BODY: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_per_message_in_redis() {
    let server = RedisServer::start().unwrap();
    let hot = Arc::new(RedisHot::connect(&server.url(), 8).await.unwrap());
    let params = CommitParams {
        dedup_window_ms: 24 * 3_600_000,
        hot_window_ms: 7 * 24 * 3_600_000,
    };
    let members = vec!["buyer-000001".to_string(), "seller-00001".to_string()];
    let cid = "0190d7a4-5b6c-7d8e-9f01-23456789abcd".to_string();
    hot.create_conversation("tenant-01", &cid, &members, Some(1), 0)
        .await
        .unwrap();
    for i in 0..N {
        let cmd = SendCommand {
            tenant: "tenant-01".into(),
            conversation_id: cid.clone(),
            sender: members[(i % 2) as usize].clone(),
            client_msg_id: uuid::Uuid::now_v7().to_string(),
            body: "x".repeat(BODY),
            class: MessageClass::Standard,
        };
        let Reservation::Reserved { record, .. } =
            hot.reserve(cmd, 1_800_000_000_000, params).await.unwrap()
        else {
            panic!("fresh send")
        };
        hot.mark_committed(&[record.key()], 1_800_000_000_000, params)
            .await
            .unwrap();
    }
    assert_eq!(hot.hot_len().await.unwrap(), N);

    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut total = 0u64;
    let mut by_kind: std::collections::BTreeMap<String, u64> = Default::default();
    for k in &keys {
        let bytes: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(k)
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut conn)
            .await
            .unwrap();
        total += bytes.unwrap_or(0);
        let kind = kind_of(k).unwrap_or(k.as_str());
        *by_kind.entry(kind.to_owned()).or_default() += bytes.unwrap_or(0);
    }
    for (kind, bytes) in &by_kind {
        println!("  {kind}: {} B per message", bytes / N);
    }
    let per_message = total / N - BODY as u64;
    println!(
        "redis bytes per message (bodies excluded): {per_message} over {} keys",
        keys.len()
    );
    // The bar counts record + index, body excluded: ≤ 360 B (seed 000: about 360 B).
    let record_and_index = (by_kind["m"] + by_kind["h"]) / N - BODY as u64;
    println!("record + hot index (body excluded): {record_and_index} B per message");
    assert!(record_and_index <= 360, "{record_and_index} B per message");
    // Everything else is dedup (entry + expiry queue) and the trim candidate.
    assert!(per_message < 1_000, "{per_message} B per message");
}
