//! Ingest bodies that take seconds of CPU to refuse (gzip that inflates past the byte limit,
//! batches past the event limit) run on the bounded CPU pool: while four of them are being
//! refused, `/healthz` and a chat SEND keep answering within 100 ms, and the server's memory
//! stays under 512 MB. (One test in this binary: its latencies are not shared with others.)

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::*;

/// `line` repeated up to `bytes`, gzipped as one member compressed once and repeated: a
/// multi-member body that inflates to `bytes` (members are read as one stream) and costs the
/// test little to make.
fn gzip_repeated(line: &str, bytes: usize) -> Vec<u8> {
    const MEMBER: usize = 1 << 20;
    let chunk = line.repeat(MEMBER / line.len());
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(chunk.as_bytes()).unwrap();
    let member = enc.finish().unwrap();
    member.repeat(bytes.div_ceil(chunk.len()))
}

fn peak_rss_mb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb / 1024
}

fn p99(mut ms: Vec<f64>) -> f64 {
    ms.sort_by(f64::total_cmp);
    ms[(ms.len() * 99).div_ceil(100) - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn healthz_and_send_answer_while_heavy_bodies_are_refused() {
    let server = TestServer::start(&[]).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let point = format!("listing_event,event=view listing_id=\"48213\",count=1i {now}\n");
    let event = format!("{{\"time\": {now}, \"kind\": \"view\", \"listing_id\": 48213}}\n");
    let write = server.url("/api/v2/write?precision=ms");
    let events = server.url("/v1/events");
    // Two past the byte limit once inflated, two past the event limit (line protocol and the
    // JSON twin).
    let heavy = [
        (
            write.clone(),
            gzip_repeated(&point, 48 << 20),
            "once decompressed",
        ),
        (
            write.clone(),
            gzip_repeated(&point, 48 << 20),
            "once decompressed",
        ),
        (
            write,
            gzip_repeated(&point, 12 << 20),
            "more than 100000 events",
        ),
        (
            events,
            gzip_repeated(&event, 12 << 20),
            "more than 100000 events",
        ),
    ];
    let mut refusals = Vec::new();
    for (url, body, named) in heavy {
        let c = c.clone();
        refusals.push(tokio::spawn(async move {
            let mut answered = 0;
            let started = Instant::now();
            // Each keeps sending its body for a few seconds: the probes below meet them
            // decoding, not idle between requests.
            while answered < 2 || started.elapsed() < Duration::from_secs(4) {
                let r = c
                    .post(&url)
                    .header("authorization", "Token dev-key")
                    .header("content-encoding", "gzip")
                    .body(body.clone())
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status().as_u16(), 413);
                let v: serde_json::Value = r.json().await.unwrap();
                assert_eq!(v["error"]["code"], "payload_too_large", "{v}");
                let message = v["error"]["message"].as_str().unwrap();
                assert!(message.contains(named), "{message}");
                answered += 1;
            }
            answered
        }));
    }
    // Probes on a fixed schedule, each on its own task, until every heavy sender is done: a
    // stall delays every probe due during it, not only the one waiting when it began.
    let mut probes = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut n = 0;
    while refusals.iter().any(|r| !r.is_finished()) {
        tick.tick().await;
        let (c, healthz) = (c.clone(), server.url("/healthz"));
        let sending = n % 2 == 1;
        let message = format!("{}/v1/conversations/{cid}/messages", server.base);
        probes.push(tokio::spawn(async move {
            let t = Instant::now();
            if sending {
                let r = c
                    .post(&message)
                    .bearer_auth(KEY)
                    .json(&serde_json::json!({
                        "client_msg_id": format!("m{n}"), "sender": "u1", "body": "still here"
                    }))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status().as_u16(), 201);
            } else {
                let r = c.get(&healthz).send().await.unwrap();
                assert_eq!(r.status().as_u16(), 200);
            }
            (sending, t.elapsed().as_secs_f64() * 1000.0)
        }));
        n += 1;
    }
    let (mut healthz, mut sends) = (Vec::new(), Vec::new());
    for p in probes {
        let (sending, ms) = p.await.unwrap();
        if sending {
            sends.push(ms)
        } else {
            healthz.push(ms)
        }
    }
    let mut heavy_answers = 0;
    for r in refusals {
        heavy_answers += r.await.unwrap();
    }
    let pid = server.child.as_ref().unwrap().id();
    let rss = peak_rss_mb(pid);
    let (h99, s99) = (p99(healthz.clone()), p99(sends.clone()));
    eprintln!(
        "{heavy_answers} heavy bodies refused; {} probes: /healthz p99 {h99:.1} ms, SEND p99 \
         {s99:.1} ms; peak RSS {rss} MB",
        healthz.len()
    );
    assert!(healthz.len() >= 50, "only {} probes", healthz.len());
    assert!(h99 <= 100.0, "/healthz p99 {h99:.1} ms");
    assert!(s99 <= 100.0, "SEND p99 {s99:.1} ms");
    assert!(rss < 512, "peak RSS {rss} MB");
}
