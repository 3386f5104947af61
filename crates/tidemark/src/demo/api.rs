//! The demo's view of a server: its public HTTP API with one tenant's key, and `/metrics`.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// A browser's User-Agent (a human click or open).
pub const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";

/// One server, one tenant key.
#[derive(Debug, Clone)]
pub struct Api {
    http: reqwest::Client,
    /// `http://host:port`, no trailing slash.
    pub base: String,
    key: String,
}

impl Api {
    /// A client of `base` authenticating with `key`. Redirects are not followed (the demo
    /// checks each `302` itself).
    pub fn new(base: &str, key: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(120))
            .pool_max_idle_per_host(64)
            .build()?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            key: key.to_owned(),
        })
    }

    /// `method path` with the key and an optional JSON body; returns the status and the JSON
    /// answer (`Null` when there is none).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.key);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {}{path}", self.base))?;
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

    /// A tracking hit on an absolute URL the server rendered, as a browser (`GET` with a
    /// browser User-Agent) or a link scanner (`HEAD`). Returns the status and `Location`.
    pub async fn hit(&self, url: &str, head: bool) -> anyhow::Result<(StatusCode, String)> {
        let method = if head { Method::HEAD } else { Method::GET };
        let resp = self
            .http
            .request(method, url)
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

    /// The unlabelled samples of `/metrics` (Prometheus text format), by name.
    pub async fn metrics(&self) -> anyhow::Result<Metrics> {
        let text = self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        Ok(Metrics::parse(&text))
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
}
