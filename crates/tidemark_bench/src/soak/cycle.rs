//! One soak cycle's load: concurrent senders until the server is `kill -9`ed under them.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;

use crate::acks::{Api, Ledger, Outcome, Send};
use crate::load::HttpClient;
use crate::process::{ServerProcess, scrape_metrics};

/// ACKs per sender that count as load having built up.
const WARM_ACKS_PER_SENDER: usize = 5;
/// Longest wait for load to build up.
const WARM_MAX: Duration = Duration::from_secs(5);

/// What one cycle's load did.
#[derive(Debug)]
pub(super) struct Load {
    /// From the first send to the kill.
    pub(super) elapsed: Duration,
    /// Sends ACKed before the kill.
    pub(super) acks: usize,
    /// Sends the kill left without an answer.
    pub(super) unanswered: usize,
    /// The server's counters just before the kill (since its start): records archived,
    /// trimmed from the hot tier, re-published by recovery.
    pub(super) counters: Counters,
}

/// Counters of one server process, or their sums over the cycles.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counters {
    pub(super) archived: u64,
    pub(super) trimmed: u64,
    pub(super) recovered: u64,
}

impl std::ops::AddAssign for Counters {
    fn add_assign(&mut self, o: Self) {
        self.archived += o.archived;
        self.trimmed += o.trimmed;
        self.recovered += o.recovered;
    }
}

/// The [`Counters`] of the server at `server` (zero where `/metrics` did not answer).
async fn counters(probe: &HttpClient, server: &ServerProcess) -> Counters {
    let Ok(m) = scrape_metrics(probe, server.addr).await else {
        return Counters::default();
    };
    let sum = |name: &str| -> u64 {
        m.iter()
            .filter(|(k, _)| k.split('{').next() == Some(name))
            .map(|(_, v)| *v as u64)
            .sum()
    };
    Counters {
        archived: sum("tidemark_chat_archived_records_total"),
        trimmed: sum("tidemark_chat_trimmed_total"),
        recovered: sum("tidemark_chat_recovered_total"),
    }
}

/// Starts `senders` concurrent senders over `cids` (conversation `i` has members `a<i>` and
/// `b<i>`), waits for load to build up (5 ACKs per sender, or 5 s), lets it run a random
/// 100–600 ms more, reads the server's [`Counters`] (`probe`), then `kill -9`s `server` under
/// the senders and records every outcome in `ledger`. Sends are named `c<cycle>-w<sender>-n<n>`; their bodies name them and are padded
/// to a random 0–300 bytes more.
pub(super) async fn load_then_kill(
    api: &Api,
    cids: &[String],
    senders: usize,
    cycle: u32,
    ledger: &mut Ledger,
    probe: &HttpClient,
    server: ServerProcess,
) -> anyhow::Result<Load> {
    let shared = Arc::new(Mutex::new(std::mem::take(ledger)));
    let (acks, unanswered) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..senders {
        let (api, cids) = (api.clone(), cids.to_vec());
        let (shared, acks, unanswered, stop) = (
            Arc::clone(&shared),
            Arc::clone(&acks),
            Arc::clone(&unanswered),
            Arc::clone(&stop),
        );
        tasks.push(tokio::spawn(async move {
            for n in 0usize.. {
                let (i, pad) = {
                    let mut rng = rand::rng();
                    (rng.random_range(0..cids.len()), rng.random_range(0..=300))
                };
                let id = format!("c{cycle}-w{w}-n{n}");
                let send = Send {
                    cid: cids[i].clone(),
                    sender: format!("{}{i}", if n % 2 == 0 { 'a' } else { 'b' }),
                    body: format!("soak {id} {}", "x".repeat(pad)),
                    client_msg_id: id,
                };
                let outcome = api.send(&send).await;
                let go_on = match &outcome {
                    Outcome::Acked { .. } => {
                        acks.fetch_add(1, Ordering::Relaxed);
                        true
                    }
                    Outcome::Unanswered(_) => {
                        unanswered.fetch_add(1, Ordering::Relaxed);
                        false
                    }
                    Outcome::NotSent | Outcome::Refused(_) => false,
                };
                shared.lock().unwrap().record(send, outcome);
                if !go_on || stop.load(Ordering::Relaxed) {
                    return;
                }
            }
        }));
    }
    let warm = WARM_ACKS_PER_SENDER * senders;
    while acks.load(Ordering::Relaxed) < warm
        && started.elapsed() < WARM_MAX
        && !tasks.iter().all(tokio::task::JoinHandle::is_finished)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let more = rand::rng().random_range(100..=600);
    tokio::time::sleep(Duration::from_millis(more)).await;
    let counters = counters(probe, &server).await;
    let elapsed = started.elapsed();
    server.kill9().await?;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await?;
    }
    *ledger = Arc::try_unwrap(shared)
        .map_err(|_| anyhow::anyhow!("a sender outlived its cycle"))?
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a sender panicked"))?;
    Ok(Load {
        elapsed,
        acks: acks.load(Ordering::Relaxed),
        unanswered: unanswered.load(Ordering::Relaxed),
        counters,
    })
}
