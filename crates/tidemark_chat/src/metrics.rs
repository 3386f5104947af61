//! Chat's Prometheus metrics, registered once into the server's registry and passed in.

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Counters and gauges owned by the chat subsystem.
#[derive(Debug, Clone)]
pub struct ChatMetrics {
    /// New messages committed.
    pub sends: IntCounter,
    /// Retries answered with the original ACK.
    pub duplicates: IntCounter,
    /// SEND latency inside the server (seconds).
    pub send_seconds: Histogram,
    /// Per outbox partition (label `partition`): records written to the archive by its
    /// archiver on this node (including replays).
    pub archived_records: IntCounterVec,
    /// Archiver batches that failed and will be replayed.
    pub archive_failures: IntCounter,
    /// Per outbox partition (label `partition`): age in seconds of its oldest committed
    /// message not yet archived (0 when caught up).
    pub archive_lag_seconds: IntGaugeVec,
    /// Outbox records not yet archived, over all partitions.
    pub outbox_backlog: IntGauge,
    /// The archive watermark T of the whole outbox (Unix ms): the least partition's `T_p`
    /// this node has published or seen.
    pub watermark_ms: IntGauge,
    /// Per hot-store shard (label `shard`): records this node trimmed from the hot tier.
    pub trimmed_records: IntCounterVec,
    /// RESERVED records re-published by the recovery worker.
    pub recovered: IntCounter,
    /// First contacts about a listing handed to the events subsystem.
    pub contacts: IntCounter,
    /// First contacts the events subsystem could not store (logged).
    pub contact_failures: IntCounter,
    /// Live streams open on this node.
    pub stream_clients: IntGauge,
    /// Events (messages) delivered to live streams; its rate is the events per second.
    pub stream_events: IntCounter,
    /// Streams opened with a position to resume from (each replays what it missed).
    pub stream_replays: IntCounter,
    /// Streams closed because their client did not take its events in time.
    pub stream_dropped: IntCounter,
}

impl ChatMetrics {
    /// The archive lag gauge of outbox `partition`.
    pub fn archive_lag(&self, partition: u32) -> IntGauge {
        self.archive_lag_seconds
            .with_label_values(&[&partition.to_string()])
    }

    /// The archived-records counter of outbox `partition`.
    pub fn archived(&self, partition: u32) -> IntCounter {
        self.archived_records
            .with_label_values(&[&partition.to_string()])
    }

    /// The trimmed-records counter of hot-store `shard`.
    pub fn trimmed(&self, shard: u32) -> IntCounter {
        self.trimmed_records
            .with_label_values(&[&shard.to_string()])
    }

    /// Records archived on this node, over all partitions.
    pub fn archived_total(&self) -> u64 {
        sum(&self.archived_records)
    }

    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self::unregistered();
        registry.register(Box::new(m.sends.clone()))?;
        registry.register(Box::new(m.duplicates.clone()))?;
        registry.register(Box::new(m.send_seconds.clone()))?;
        registry.register(Box::new(m.archived_records.clone()))?;
        registry.register(Box::new(m.archive_failures.clone()))?;
        registry.register(Box::new(m.archive_lag_seconds.clone()))?;
        registry.register(Box::new(m.outbox_backlog.clone()))?;
        registry.register(Box::new(m.watermark_ms.clone()))?;
        registry.register(Box::new(m.trimmed_records.clone()))?;
        registry.register(Box::new(m.recovered.clone()))?;
        registry.register(Box::new(m.contacts.clone()))?;
        registry.register(Box::new(m.contact_failures.clone()))?;
        registry.register(Box::new(m.stream_clients.clone()))?;
        registry.register(Box::new(m.stream_events.clone()))?;
        registry.register(Box::new(m.stream_replays.clone()))?;
        registry.register(Box::new(m.stream_dropped.clone()))?;
        Ok(m)
    }

    /// Metrics that are not exported anywhere (tests, tools).
    pub fn unregistered() -> Self {
        let c = |n: &str, h: &str| IntCounter::new(n, h).expect("valid metric");
        let g = |n: &str, h: &str| IntGauge::new(n, h).expect("valid metric");
        Self {
            sends: c("tidemark_chat_sends_total", "New messages committed"),
            duplicates: c(
                "tidemark_chat_send_duplicates_total",
                "Retries answered with the original ACK",
            ),
            send_seconds: Histogram::with_opts(
                HistogramOpts::new("tidemark_chat_send_seconds", "SEND latency in the server")
                    .buckets(vec![
                        0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0,
                    ]),
            )
            .expect("valid metric"),
            archived_records: IntCounterVec::new(
                Opts::new(
                    "tidemark_chat_archived_records_total",
                    "Records written to the archive, per outbox partition",
                ),
                &["partition"],
            )
            .expect("valid metric"),
            archive_failures: c(
                "tidemark_chat_archive_failures_total",
                "Archiver batches replayed after a failure",
            ),
            archive_lag_seconds: IntGaugeVec::new(
                Opts::new(
                    "tidemark_chat_archive_lag_seconds",
                    "Age of the oldest committed message not yet archived, per outbox partition",
                ),
                &["partition"],
            )
            .expect("valid metric"),
            outbox_backlog: g(
                "tidemark_chat_outbox_backlog",
                "Outbox records not yet archived",
            ),
            watermark_ms: g(
                "tidemark_chat_archive_watermark_ms",
                "Published archive watermark T (Unix ms)",
            ),
            trimmed_records: IntCounterVec::new(
                Opts::new(
                    "tidemark_chat_trimmed_total",
                    "Records trimmed from the hot tier, per hot-store shard",
                ),
                &["shard"],
            )
            .expect("valid metric"),
            recovered: c(
                "tidemark_chat_recovered_total",
                "RESERVED records re-published by recovery",
            ),
            contacts: c(
                "tidemark_chat_contacts_total",
                "First contacts about a listing handed to the events subsystem",
            ),
            contact_failures: c(
                "tidemark_chat_contact_failures_total",
                "First contacts the events subsystem could not store",
            ),
            stream_clients: g("tidemark_chat_stream_clients", "Live streams open"),
            stream_events: c(
                "tidemark_chat_stream_events_total",
                "Messages delivered to live streams",
            ),
            stream_replays: c(
                "tidemark_chat_stream_replays_total",
                "Live streams opened with a position to resume from",
            ),
            stream_dropped: c(
                "tidemark_chat_stream_dropped_total",
                "Live streams closed because their client lagged",
            ),
        }
    }
}

/// The sum of a counter over its label sets.
fn sum(counter: &IntCounterVec) -> u64 {
    use prometheus::core::Collector;
    counter
        .collect()
        .iter()
        .flat_map(|family| family.get_metric())
        .map(|m| m.get_counter().get_value() as u64)
        .sum()
}
