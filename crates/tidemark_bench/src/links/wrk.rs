//! `wrk` (the HTTP load generator from Debian's `wrk` package) as a closed-loop driver of the
//! redirector: a Lua script that asks for `GET /c/<id>` with a random id of a fixed set and a
//! browser User-Agent, and a parser of wrk's `--latency` report.
//!
//! wrk keeps `-c` connections busy back to back, so its latencies leave out the time a request
//! would have waited to be sent (coordinated omission); the open-loop driver's figures next to
//! them include it.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};

/// The `wrk` executable on `PATH`, if any.
pub(super) fn find() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("wrk"))
        .find(|p| p.is_file())
}

/// The Lua script: each request a random id of `ids`, with `user_agent`.
pub(super) fn script(ids: &[String], user_agent: &str) -> String {
    let mut s = String::from("local ids = {\n");
    for id in ids {
        let _ = writeln!(s, "  \"{id}\",");
    }
    let _ = write!(
        s,
        "}}\nlocal headers = {{ [\"User-Agent\"] = \"{}\" }}\n\
         local n = #ids\n\
         function init(args)\n  math.randomseed(os.time() + math.floor(os.clock() * 1000000))\nend\n\
         function request()\n  return wrk.format(\"GET\", \"/c/\" .. ids[math.random(n)], headers)\nend\n",
        user_agent.replace('\\', "\\\\").replace('"', "\\\"")
    );
    s
}

/// What one wrk run reported.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct WrkReport {
    /// `Requests/sec:`.
    pub(super) requests_per_sec: f64,
    /// Requests completed.
    pub(super) requests: u64,
    /// Latency percentiles (50, 75, 90, 99) in ms.
    pub(super) percentiles_ms: [f64; 4],
    /// Mean and max latency in ms.
    pub(super) mean_ms: f64,
    pub(super) max_ms: f64,
    /// `Non-2xx or 3xx responses:` (0 if absent).
    pub(super) bad_status: u64,
    /// The `Socket errors:` line, if any.
    pub(super) socket_errors: Option<String>,
}

impl WrkReport {
    /// p50 in ms.
    pub(super) fn p50(&self) -> f64 {
        self.percentiles_ms[0]
    }
    /// p99 in ms.
    pub(super) fn p99(&self) -> f64 {
        self.percentiles_ms[3]
    }
}

/// One wrk step of a part that steps as work accumulates: the work stored when it ended
/// (clicks, link records), its rate and its p99.
#[derive(Debug, Clone, Copy)]
pub(super) struct Step {
    pub(super) at: f64,
    pub(super) per_sec: f64,
    pub(super) p99_ms: f64,
}

/// `1.0 M: 45158/s (p99 3.7 ms), …` for the steps' report.
pub(super) fn steps_line(steps: &[Step]) -> String {
    let parts: Vec<String> = steps
        .iter()
        .map(|s| {
            format!(
                "{:.1} M: {:.0}/s (p99 {:.1} ms)",
                s.at / 1e6,
                s.per_sec,
                s.p99_ms
            )
        })
        .collect();
    parts.join(", ")
}

/// The rate against the work stored, for a plot.
pub(super) fn curve(steps: &[Step]) -> Vec<(f64, f64)> {
    steps.iter().map(|s| (s.at, s.per_sec)).collect()
}

/// A wrk duration (`850.00us`, `1.23ms`, `2.00s`, `1.50m`) in ms.
fn duration_ms(s: &str) -> Option<f64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    Some(match unit {
        "us" => v / 1000.0,
        "ms" => v,
        "s" => v * 1000.0,
        "m" => v * 60_000.0,
        "h" => v * 3_600_000.0,
        _ => return None,
    })
}

/// Parses wrk's output (with `--latency`).
pub(super) fn parse(out: &str) -> anyhow::Result<WrkReport> {
    let mut r = WrkReport {
        requests_per_sec: f64::NAN,
        requests: 0,
        percentiles_ms: [f64::NAN; 4],
        mean_ms: f64::NAN,
        max_ms: f64::NAN,
        bad_status: 0,
        socket_errors: None,
    };
    let mut in_distribution = false;
    for line in out.lines() {
        let t = line.trim();
        let words: Vec<&str> = t.split_whitespace().collect();
        if t.starts_with("Latency Distribution") {
            in_distribution = true;
            continue;
        }
        if in_distribution {
            let slot = match words.first().copied() {
                Some("50%") => Some(0),
                Some("75%") => Some(1),
                Some("90%") => Some(2),
                Some("99%") => Some(3),
                _ => None,
            };
            match (slot, words.get(1).and_then(|w| duration_ms(w))) {
                (Some(i), Some(ms)) => {
                    r.percentiles_ms[i] = ms;
                    continue;
                }
                _ => in_distribution = false,
            }
        }
        if words.first() == Some(&"Latency") && words.len() >= 4 {
            r.mean_ms = duration_ms(words[1]).unwrap_or(f64::NAN);
            r.max_ms = duration_ms(words[3]).unwrap_or(f64::NAN);
        } else if let Some(v) = t.strip_prefix("Requests/sec:") {
            r.requests_per_sec = v.trim().parse().unwrap_or(f64::NAN);
        } else if let Some(v) = t.strip_prefix("Non-2xx or 3xx responses:") {
            r.bad_status = v.trim().parse().unwrap_or(0);
        } else if t.starts_with("Socket errors:") {
            r.socket_errors = Some(t.to_owned());
        } else if words.get(1) == Some(&"requests") && words.get(2) == Some(&"in") {
            r.requests = words[0].parse().unwrap_or(0);
        }
    }
    if r.requests_per_sec.is_nan() || r.percentiles_ms.iter().any(|p| p.is_nan()) {
        bail!("could not read wrk's report:\n{out}");
    }
    Ok(r)
}

/// Runs `wrk` against `addr` with the script at `script` and parses its report.
pub(super) async fn run(
    exe: &Path,
    addr: SocketAddr,
    script: &Path,
    threads: usize,
    connections: usize,
    duration: Duration,
) -> anyhow::Result<(WrkReport, String)> {
    let out = tokio::process::Command::new(exe)
        .arg(format!("-t{threads}"))
        .arg(format!("-c{connections}"))
        .arg(format!("-d{}s", duration.as_secs().max(1)))
        .arg("--latency")
        .arg("-s")
        .arg(script)
        .arg(format!("http://{addr}"))
        .output()
        .await
        .with_context(|| format!("running {}", exe.display()))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "wrk failed ({}): {}{}",
            out.status,
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok((parse(&text)?, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "Running 10s test @ http://127.0.0.1:8080
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.13ms    1.01ms  22.52ms   82.17%
    Req/Sec    10.30k     0.89k   12.05k    71.50%
  Latency Distribution
     50%  850.00us
     75%    3.49ms
     90%    4.12ms
     99%    1.02s
  205007 requests in 10.01s, 43.59MB read
  Socket errors: connect 0, read 0, write 0, timeout 12
  Non-2xx or 3xx responses: 7
Requests/sec:  20480.57
Transfer/sec:      4.36MB
";

    #[test]
    fn reads_the_latency_report() {
        let r = parse(SAMPLE).unwrap();
        assert_eq!(r.requests_per_sec, 20480.57);
        assert_eq!(r.requests, 205_007);
        assert_eq!(r.percentiles_ms, [0.85, 3.49, 4.12, 1020.0]);
        assert_eq!((r.mean_ms, r.max_ms), (3.13, 22.52));
        assert_eq!(r.bad_status, 7);
        assert_eq!(
            r.socket_errors.as_deref(),
            Some("Socket errors: connect 0, read 0, write 0, timeout 12")
        );
        assert!(parse("Running 10s test\n").is_err());
    }

    #[test]
    fn the_script_lists_the_ids_and_escapes_the_user_agent() {
        let s = script(&["abc".into(), "def".into()], "Mozilla \"x\"");
        assert!(s.contains("  \"abc\",\n  \"def\",\n}"), "{s}");
        assert!(s.contains(r#"["User-Agent"] = "Mozilla \"x\"""#), "{s}");
        assert!(s.contains("ids[math.random(n)]"));
    }
}
