//! Events' Prometheus metrics: the raw-tier lifecycle (rollup, archive, drop).

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// Metrics owned by the events subsystem.
#[derive(Debug, Clone)]
pub struct EventsMetrics {
    /// Days rolled up by the lifecycle.
    pub days_rolled_up: IntCounter,
    /// Days archived (written, read back and checked).
    pub days_archived: IntCounter,
    /// Raw events written to the archive.
    pub archived_events: IntCounter,
    /// Raw day partitions dropped.
    pub days_dropped: IntCounter,
    /// Failed lifecycle steps, by `step` (`rollup`, `archive`, `drop`, `catalog`).
    pub failures: IntCounterVec,
    /// Closed days whose last event arrived more than `raw_retention − 1 day` ago that are
    /// not yet rolled up and archived (the pipeline is stalled; nothing is dropped meanwhile).
    pub days_at_risk: IntGauge,
    /// Days in the raw tier (not dropped).
    pub raw_days: IntGauge,
}

impl EventsMetrics {
    /// Creates the metrics and registers them.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self::unregistered();
        for c in [
            &m.days_rolled_up,
            &m.days_archived,
            &m.archived_events,
            &m.days_dropped,
        ] {
            registry.register(Box::new(c.clone()))?;
        }
        registry.register(Box::new(m.failures.clone()))?;
        registry.register(Box::new(m.days_at_risk.clone()))?;
        registry.register(Box::new(m.raw_days.clone()))?;
        Ok(m)
    }

    /// Metrics exported nowhere (tests, tools).
    pub fn unregistered() -> Self {
        let c = |n: &str, h: &str| IntCounter::new(n, h).expect("valid metric");
        let g = |n: &str, h: &str| IntGauge::new(n, h).expect("valid metric");
        Self {
            days_rolled_up: c(
                "tidemark_events_days_rolled_up_total",
                "Raw days rolled up by the lifecycle",
            ),
            days_archived: c(
                "tidemark_events_days_archived_total",
                "Raw days archived as Parquet and checked",
            ),
            archived_events: c(
                "tidemark_events_archived_events_total",
                "Raw events written to the archive",
            ),
            days_dropped: c(
                "tidemark_events_days_dropped_total",
                "Raw day partitions dropped",
            ),
            failures: IntCounterVec::new(
                Opts::new(
                    "tidemark_events_lifecycle_failures_total",
                    "Failed raw-tier lifecycle steps",
                ),
                &["step"],
            )
            .expect("valid metric"),
            days_at_risk: g(
                "tidemark_events_days_at_risk",
                "Closed raw days near the end of retention not yet rolled up and archived",
            ),
            raw_days: g("tidemark_events_raw_days", "Days in the raw tier"),
        }
    }
}
