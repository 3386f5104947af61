//! The demo's view of the servers it replays against: their public HTTP API with one tenant's
//! key, and `/metrics`. With several nodes (`--server` given more than once) each request goes
//! to the next node in turn, so a mailing made on one node is rendered on another and its
//! links are followed on a third; `/metrics` is read from every node and summed.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// A browser's User-Agent (a human click or open).
pub const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";

/// Gauges that every node measures on the shared stores alike: merged by taking the greatest
/// value instead of the sum (the freshest watermark, the most cautious backlog).
const SHARED_GAUGES: [&str; 2] = [
    "tidemark_chat_archive_watermark_ms",
    "tidemark_chat_outbox_backlog",
];

/// One or more nodes of one deployment, one tenant key.
#[derive(Debug, Clone)]
pub struct Api {
    http: reqwest::Client,
    /// `http://host:port` of each node, no trailing slash.
    bases: Arc<[String]>,
    next: Arc<AtomicUsize>,
    key: String,
}

impl Api {
    /// A client of the nodes at `bases` (at least one) authenticating with `key`. Redirects
    /// are not followed (the demo checks each `302` itself).
    ///
    /// # Errors
    /// No base given, or the HTTP client cannot be built.
    pub fn new(bases: &[String], key: &str) -> anyhow::Result<Self> {
        if bases.is_empty() {
            bail!("at least one --server is needed");
        }
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(120))
            .pool_max_idle_per_host(64)
            .build()?;
        Ok(Self {
            http,
            bases: bases
                .iter()
                .map(|b| b.trim_end_matches('/').to_owned())
                .collect(),
            next: Arc::default(),
            key: key.to_owned(),
        })
    }

    /// The node the next request goes to (round robin).
    fn base(&self) -> &str {
        &self.bases[self.next.fetch_add(1, Ordering::Relaxed) % self.bases.len()]
    }

    /// `method path` with the key and an optional JSON body; returns the status and the JSON
    /// answer (`Null` when there is none).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let base = self.base();
        let mut req = self
            .http
            .request(method.clone(), format!("{base}{path}"))
            .bearer_auth(&self.key);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {base}{path}"))?;
        let status = resp.status();
        let text = resp.text().await?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// Like [`Api::call`], but any status other than `want` is an error quoting the answer.
    pub async fn expect(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        want: StatusCode,
    ) -> anyhow::Result<Value> {
        let (status, v) = self.call(method.clone(), path, body).await?;
        if status != want {
            bail!("{method} {path}: expected {want}, got {status}: {v}");
        }
        Ok(v)
    }

    /// A tracking hit on an absolute URL a node rendered, as a browser (`GET` with a browser
    /// User-Agent) or a link scanner (`HEAD`), sent to the next node in turn when the URL is
    /// on one of the nodes. Returns the status and `Location`.
    pub async fn hit(&self, url: &str, head: bool) -> anyhow::Result<(StatusCode, String)> {
        let method = if head { Method::HEAD } else { Method::GET };
        let url = match self.bases.iter().find_map(|b| url.strip_prefix(b.as_str())) {
            Some(path) => format!("{}{path}", self.base()),
            None => url.to_owned(),
        };
        let resp = self
            .http
            .request(method, &url)
            .header(reqwest::header::USER_AGENT, BROWSER)
            .send()
            .await
            .with_context(|| format!("hit {url}"))?;
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        Ok((resp.status(), location))
    }

    /// Every node's `/metrics` (Prometheus text format), merged ([`Metrics::merge`]).
    pub async fn metrics(&self) -> anyhow::Result<Metrics> {
        let mut nodes = Vec::with_capacity(self.bases.len());
        for base in self.bases.iter() {
            let text = self
                .http
                .get(format!("{base}/metrics"))
                .send()
                .await
                .with_context(|| format!("GET {base}/metrics"))?
                .error_for_status()?
                .text()
                .await?;
            nodes.push(Metrics::parse(&text));
        }
        Ok(Metrics::merge(nodes))
    }
}

/// Prometheus samples by metric name, a labelled family's samples summed (counters: the total
/// over partitions or shards).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics(HashMap<String, f64>);

impl Metrics {
    /// Parses `name value` and `name{labels} value` lines; comments are skipped.
    pub fn parse(text: &str) -> Self {
        let mut samples = HashMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let name = series.split_once('{').map_or(series, |(n, _)| n);
            *samples.entry(name.to_owned()).or_insert(0.0) += value;
        }
        Self(samples)
    }

    /// The deployment's samples from each node's: counters summed over the nodes, the gauges
    /// every node reads off the shared stores (archive watermark, outbox backlog) the
    /// greatest.
    pub fn merge(nodes: Vec<Metrics>) -> Self {
        let mut merged: HashMap<String, f64> = HashMap::new();
        for node in nodes {
            for (name, value) in node.0 {
                let slot = merged.entry(name.clone()).or_insert(0.0);
                if SHARED_GAUGES.contains(&name.as_str()) {
                    *slot = slot.max(value);
                } else {
                    *slot += value;
                }
            }
        }
        Self(merged)
    }

    /// The sample (0 when absent).
    pub fn get(&self, name: &str) -> f64 {
        self.0.get(name).copied().unwrap_or(0.0)
    }

    /// `self − before` for a counter, as an integer.
    pub fn delta(&self, before: &Metrics, name: &str) -> u64 {
        (self.get(name) - before.get(name)).max(0.0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_is_read_with_labelled_samples_summed() {
        let m = Metrics::parse(
            "# HELP a x\n# TYPE a counter\na 3\nb{p=\"0\"} 9\nb{p=\"1\"} 2\nc 1.5e3\n",
        );
        assert_eq!((m.get("a"), m.get("b"), m.get("c")), (3.0, 11.0, 1500.0));
        assert_eq!(m.delta(&Metrics::parse("a 1"), "a"), 2);
    }

    #[test]
    fn nodes_merge_by_summing_counters_and_taking_the_greatest_shared_gauge() {
        let m = Metrics::merge(vec![
            Metrics::parse(
                "a 3\ntidemark_chat_archive_watermark_ms 100\ntidemark_chat_outbox_backlog 0",
            ),
            Metrics::parse(
                "a 4\ntidemark_chat_archive_watermark_ms 250\ntidemark_chat_outbox_backlog 2",
            ),
        ]);
        assert_eq!(m.get("a"), 7.0);
        assert_eq!(m.get("tidemark_chat_archive_watermark_ms"), 250.0);
        assert_eq!(m.get("tidemark_chat_outbox_backlog"), 2.0);
    }
}
