//! nginx (Debian's `nginx-light` or `nginx`) as the peer of the redirector: a server that
//! answers every `GET /c/<id>` with a fixed `302` (`return 302`), nothing looked up and nothing
//! stored: the HTTP limit of the machine, which the redirector's rate is measured against.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// What the comparison needs, for the message when it is missing.
pub(super) const INSTALL: &str = "wrk and nginx are needed (apt-get install wrk nginx-light)";

/// The `nginx` executable: on `PATH`, or Debian's `/usr/sbin/nginx`.
pub(super) fn find() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("nginx"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| Some(PathBuf::from("/usr/sbin/nginx")).filter(|p| p.is_file()))
}

/// A running nginx on a free loopback port, its files under a directory of its own; stopped
/// on drop.
#[derive(Debug)]
pub(super) struct Nginx {
    child: Child,
    /// Where it listens.
    pub(super) addr: SocketAddr,
}

impl Nginx {
    /// Starts `exe` in the foreground with one worker per core, access log off, answering
    /// `/c/…` with `302 Location: location`; its config, pid file and logs go under `dir`.
    pub(super) fn start(exe: &Path, dir: &Path, location: &str) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let d = dir.display();
        let config = format!(
            "daemon off;
worker_processes auto;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{port};
    location /c/ {{ return 302 {location}; }}
  }}
}}
"
        );
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config)?;
        let child = Command::new(exe)
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let mut nginx = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(nginx.addr).is_err() {
            if let Some(status) = nginx.child.try_wait()? {
                bail!("nginx stopped at start ({status}); see {d}/error.log");
            }
            if Instant::now() > deadline {
                bail!("nginx did not listen on {} within 10 s", nginx.addr);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(nginx)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGQUIT is nginx's graceful stop; its workers leave with the master.
        let _ = Command::new("kill")
            .arg("-QUIT")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
