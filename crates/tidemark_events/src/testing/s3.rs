//! An S3-compatible server for tests: moto's server (`python3 -m moto.server`, PyPI's
//! `moto[server]`, installed by `scripts/test` in seconds; a server built with cargo would add
//! its whole build to every fresh CI run) on a free loopback port, stopped on drop. It keeps
//! its objects in its own process, so a test reads back through S3 what the archive wrote.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running S3-compatible server (see the module docs).
#[derive(Debug)]
pub struct S3Server {
    child: Option<Child>,
    /// The HTTP port on 127.0.0.1.
    pub port: u16,
}

impl S3Server {
    /// Starts the server (the interpreter named by `TEST_PYTHON`, default `python3`) and waits
    /// until it answers (at most 20 s).
    pub fn start() -> std::io::Result<Self> {
        let port = super::free_port()?;
        let python = std::env::var("TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let child = Command::new(python)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let server = Self {
            child: Some(child),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while server.request("GET", "/").is_err() {
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "moto.server did not answer on {port} within 20 s (pip install 'moto[server]')"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }

    /// Creates bucket `name`.
    pub fn create_bucket(&self, name: &str) -> std::io::Result<()> {
        let status = self.request("PUT", &format!("/{name}"))?;
        if status == 200 {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "creating bucket {name}: HTTP {status}"
            )))
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The object_store options a user sets (as `AWS_*` environment variables) to point an
    /// `s3://bucket/prefix` archive at this server.
    pub fn options(&self) -> Vec<(String, String)> {
        [
            ("aws_endpoint", self.endpoint()),
            ("aws_allow_http", "true".into()),
            ("aws_access_key_id", "tidemark-test".into()),
            ("aws_secret_access_key", "tidemark-test-secret".into()),
            ("aws_region", "us-east-1".into()),
        ]
        .map(|(k, v)| (k.to_owned(), v))
        .to_vec()
    }

    /// Stops the server (SIGKILL): every object it held is gone, and requests fail to connect.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// One unsigned request with an empty body (the server does not check signatures);
    /// returns the status.
    fn request(&self, method: &str, path: &str) -> std::io::Result<u16> {
        let mut conn = TcpStream::connect(("127.0.0.1", self.port))?;
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(
            conn,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )?;
        let mut head = Vec::new();
        conn.read_to_end(&mut head)?;
        let line = String::from_utf8_lossy(&head);
        line.split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {line:.80}")))
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}
