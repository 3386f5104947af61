//! Links' Prometheus metrics.

use prometheus::{IntCounter, Registry};

/// Counters owned by the links subsystem.
#[derive(Debug, Clone)]
pub struct LinksMetrics {
    /// Link records stored (links and pixels).
    pub records_stored: IntCounter,
    /// Messages rendered.
    pub rendered: IntCounter,
    /// Recipients skipped (suppressed, missing field, …).
    pub skipped: IntCounter,
    /// Clicks counted (not bots).
    pub clicks: IntCounter,
    /// Opens counted (not bots).
    pub opens: IntCounter,
    /// Hits flagged as bot traffic (HEAD, scanners).
    pub bot_hits: IntCounter,
    /// Ids that were malformed, forged or unknown (404).
    pub not_found: IntCounter,
    /// Ids whose day partition was dropped (fallback redirect).
    pub expired: IntCounter,
    /// Hits whose analytics event could not be stored (the visitor was still redirected).
    pub event_failures: IntCounter,
    /// Hits whose analytics event was stored in the events subsystem.
    pub events_recorded: IntCounter,
    /// Hits that could not be counted in their mailing's campaign statistics.
    pub stats_failures: IntCounter,
}

impl LinksMetrics {
    /// Creates the metrics and registers them.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self::unregistered();
        for c in [
            &m.records_stored,
            &m.rendered,
            &m.skipped,
            &m.clicks,
            &m.opens,
            &m.bot_hits,
            &m.not_found,
            &m.expired,
            &m.event_failures,
            &m.events_recorded,
            &m.stats_failures,
        ] {
            registry.register(Box::new(c.clone()))?;
        }
        Ok(m)
    }

    /// Metrics exported nowhere (tests, tools).
    pub fn unregistered() -> Self {
        let c = |n: &str, h: &str| IntCounter::new(n, h).expect("valid metric");
        Self {
            records_stored: c("tidemark_links_records_stored_total", "Link records stored"),
            rendered: c("tidemark_links_rendered_total", "Messages rendered"),
            skipped: c("tidemark_links_skipped_total", "Recipients skipped"),
            clicks: c("tidemark_links_clicks_total", "Clicks counted (not bots)"),
            opens: c("tidemark_links_opens_total", "Opens counted (not bots)"),
            bot_hits: c(
                "tidemark_links_bot_hits_total",
                "Hits flagged as bot traffic",
            ),
            not_found: c(
                "tidemark_links_not_found_total",
                "Malformed, forged or unknown ids",
            ),
            expired: c(
                "tidemark_links_expired_total",
                "Ids whose day partition was dropped",
            ),
            events_recorded: c(
                "tidemark_links_events_recorded_total",
                "Hits whose analytics event was stored",
            ),
            event_failures: c(
                "tidemark_links_event_failures_total",
                "Hits whose event could not be stored",
            ),
            stats_failures: c(
                "tidemark_links_stats_failures_total",
                "Hits that could not be counted in their mailing's statistics",
            ),
        }
    }
}
