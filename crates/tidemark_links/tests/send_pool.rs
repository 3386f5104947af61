//! Sending pool: `.eml` files, SMTP to a real server (aiosmtpd) on loopback through
//! pooled connections, retries with back-off on transient failures, no retry on permanent ones,
//! bounded queue and graceful shutdown.
#![allow(clippy::clone_on_ref_ptr, missing_docs)]

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tidemark_links::send::{
    MailConfig, MailTransport, OutgoingMail, PoolStats, SendError, SendingPool,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Pool warnings (retries with their SMTP errors) in the test output, shown on failure.
fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("tidemark_links=debug")
        .with_ansi(false)
        .with_test_writer()
        .try_init();
}

/// Non-ASCII text and a line far beyond RFC 5322's 998-byte limit: the message must pick a
/// transfer encoding that carries both unchanged.
fn html_body(name: &str) -> String {
    format!(
        "<html><body>\n<p>Hallo {name}, die Wiese ist grün! Grüße aus Sarajevo – čćšđž.</p>\n<p>{}</p>\n</body></html>\n",
        "lorem ipsum dolor sit amet ".repeat(60)
    )
}

fn mail(mailing: &str, to: &str) -> OutgoingMail {
    OutgoingMail {
        mailing_id: mailing.to_owned(),
        from: "Tidemark News <news@tidemark.test>".to_owned(),
        to: to.to_owned(),
        subject: "Neuigkeiten für dich – grün".to_owned(),
        html: html_body(to),
        list_unsubscribe: vec![
            "mailto:unsubscribe@tidemark.test?subject=unsubscribe".to_owned(),
            "https://tidemark.test/unsubscribe/AbC_123".to_owned(),
        ],
    }
}

/// The decoded body is the original HTML, byte for byte, except that text travels with CRLF
/// line ends (RFC 5322 canonical form) and lettre ends a single-part body with one more line
/// break (its SMTP DATA adds another): trailing line breaks only, insignificant in HTML.
fn assert_same_html(decoded: &str, original: &str) {
    let decoded = decoded.replace("\r\n", "\n");
    let extra = decoded
        .strip_prefix(original)
        .unwrap_or_else(|| panic!("body differs:\n{decoded}\n---\n{original}"));
    assert!(
        extra.len() <= 2 && extra.bytes().all(|b| b == b'\n'),
        "{extra:?}"
    );
}

fn parse(bytes: &[u8]) -> mail_parser::Message<'_> {
    mail_parser::MessageParser::default()
        .parse(bytes)
        .expect("parsable RFC 5322 message")
}

fn header<'a>(msg: &'a mail_parser::Message<'a>, name: &str) -> String {
    let raw = msg
        .header_raw(name)
        .unwrap_or_else(|| panic!("header {name} missing"));
    // Unfold (RFC 5322 2.2.3) and trim.
    raw.replace("\r\n", "").replace('\n', "").trim().to_owned()
}

fn address(a: Option<&mail_parser::Address<'_>>) -> String {
    a.and_then(|a| a.first())
        .and_then(|a| a.address())
        .expect("address")
        .to_owned()
}

// ----- EmlDir ------------------------------------------------------------------------------

#[tokio::test]
async fn eml_dir_writes_one_rfc5322_file_per_mail() {
    logs();
    let dir = tempfile::tempdir().unwrap();
    let pool = SendingPool::start(&MailConfig::default(), dir.path().to_path_buf()).unwrap();
    let to = ["ann@ex.com", "bob@ex.com", "cem@ex.com"];
    let queued = pool
        .enqueue(to.iter().map(|t| mail("mailing-1", t)).collect())
        .await
        .unwrap();
    assert_eq!(queued, 3);
    let stats_before = pool.stats();
    assert_eq!(stats_before.queued, 3);
    pool_shutdown_with_stats(
        pool,
        PoolStats {
            queued: 3,
            sent: 3,
            retried: 0,
            failed: 0,
        },
    )
    .await;

    // Exactly 3 files, all *.eml (no temp file left), named <unix_ms>-<email>-<suffix>.eml.
    let mdir = dir.path().join("mailing-1");
    let mut names: Vec<String> = std::fs::read_dir(&mdir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 3, "{names:?}");
    for name in &names {
        let parts: Vec<&str> = name.strip_suffix(".eml").unwrap().splitn(2, '-').collect();
        assert!(
            parts[0].len() == 13 && parts[0].bytes().all(|b| b.is_ascii_digit()),
            "{name}"
        );
        let (email, suffix) = parts[1].rsplit_once('-').unwrap();
        assert!(to.contains(&email), "{name}");
        assert_eq!(suffix.len(), 16, "{name}");
    }
    let bob = names.iter().find(|n| n.contains("-bob@ex.com-")).unwrap();
    let raw = std::fs::read(mdir.join(bob)).unwrap();

    // Raw form: 7-bit clean, CRLF lines within RFC 5322's limit, the required headers.
    assert!(raw.is_ascii(), "message must be 7-bit clean");
    let text = String::from_utf8(raw.clone()).unwrap();
    for line in text.split("\r\n") {
        assert!(line.len() <= 998, "line of {} bytes", line.len());
        assert!(!line.contains('\n'), "bare LF in {line:?}");
    }
    let head = &text[..text.find("\r\n\r\n").unwrap()];
    for h in [
        "Date: ",
        "Message-ID: <",
        "MIME-Version: 1.0",
        "Content-Type: text/html; charset=utf-8",
    ] {
        assert!(
            head.lines().any(|l| l.starts_with(h)),
            "{h} missing in\n{head}"
        );
    }
    assert!(
        head.contains("Content-Transfer-Encoding: quoted-printable")
            || head.contains("Content-Transfer-Encoding: base64"),
        "{head}"
    );
    // Long header lines are folded (CRLF + space); unfolded, the URIs are exactly as given.
    let unfolded = head.replace("\r\n ", " ");
    assert!(
        unfolded.lines().any(|l| l
            == "List-Unsubscribe: <mailto:unsubscribe@tidemark.test?subject=unsubscribe>, <https://tidemark.test/unsubscribe/AbC_123>"),
        "{head}"
    );
    assert!(
        unfolded
            .lines()
            .any(|l| l == "List-Unsubscribe-Post: List-Unsubscribe=One-Click"),
        "{head}"
    );

    // Parsed back: the same values.
    let msg = parse(&raw);
    assert_eq!(address(msg.from()), "news@tidemark.test");
    assert_eq!(
        msg.from().unwrap().first().unwrap().name(),
        Some("Tidemark News")
    );
    assert_eq!(address(msg.to()), "bob@ex.com");
    assert_eq!(msg.subject(), Some("Neuigkeiten für dich – grün"));
    assert_eq!(
        header(&msg, "List-Unsubscribe"),
        "<mailto:unsubscribe@tidemark.test?subject=unsubscribe>, <https://tidemark.test/unsubscribe/AbC_123>"
    );
    assert_eq!(
        header(&msg, "List-Unsubscribe-Post"),
        "List-Unsubscribe=One-Click"
    );
    let html = msg.body_html(0).expect("html body");
    assert_same_html(&html, &html_body("bob@ex.com"));
    assert!(html.contains("grün") && html.contains("čćšđž"));
}

/// Stops the pool at once: `shutdown` must still deliver everything queued.
async fn pool_shutdown_with_stats(pool: SendingPool, want: PoolStats) {
    let stats = pool.shutdown().await;
    assert_eq!(stats, want);
}

// ----- a real SMTP server: aiosmtpd --------------------------------------------------------

/// aiosmtpd importable (installing it with pip if needed)? Checked once per test binary.
fn aiosmtpd_available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        let importable = || {
            Command::new("python3")
                .args(["-c", "import aiosmtpd"])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if importable() {
            return true;
        }
        let _ = Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "aiosmtpd"])
            .status();
        importable()
    })
}

macro_rules! require_aiosmtpd {
    () => {
        if !aiosmtpd_available() {
            eprintln!(
                "SKIPPED: python3 module aiosmtpd is missing and `python3 -m pip install aiosmtpd` failed"
            );
            return;
        }
    };
}

/// A loopback port nothing listens on, below the kernel's ephemeral range (32768+) so that no
/// outgoing connection can take it before the server we start binds it, and never handed out
/// twice in this test binary.
fn free_port() -> u16 {
    static TAKEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut taken = TAKEN.lock().unwrap();
    loop {
        let port = rand::random_range(20_000..32_000);
        if taken.contains(&port) || StdListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        taken.insert(port);
        return port;
    }
}

/// `python3 -m aiosmtpd` storing every message in a maildir; killed on drop.
struct Aiosmtpd {
    child: Child,
    port: u16,
    maildir: tempfile::TempDir,
}

impl Aiosmtpd {
    fn start() -> Aiosmtpd {
        let maildir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Command::new("python3")
            .args(["-m", "aiosmtpd", "-n", "-l"])
            .arg(format!("127.0.0.1:{port}"))
            .args(["-c", "aiosmtpd.handlers.Mailbox"])
            .arg(maildir.path().join("box"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn python3 -m aiosmtpd");
        let mut server = Aiosmtpd {
            child,
            port,
            maildir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while StdStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "aiosmtpd did not start");
            assert!(
                server.child.try_wait().unwrap().is_none(),
                "aiosmtpd exited (port {port} taken?)"
            );
            std::thread::sleep(Duration::from_millis(25));
        }
        server
    }

    /// Raw messages delivered so far.
    fn messages(&self) -> Vec<Vec<u8>> {
        let new = self.maildir.path().join("box").join("new");
        match std::fs::read_dir(new) {
            Ok(entries) => entries
                .map(|e| std::fs::read(e.unwrap().path()).unwrap())
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

impl Drop for Aiosmtpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback TCP proxy in front of an SMTP server: answers the first `refuse_first`
/// connections with `421` and closes them, relays the others; counts connections.
#[derive(Debug, Default)]
struct ProxyStats {
    connections: AtomicUsize,
    refused: AtomicUsize,
    active: AtomicUsize,
    max_active: AtomicUsize,
}

fn spawn_proxy(listener: TcpListener, upstream: u16, refuse_first: usize) -> Arc<ProxyStats> {
    let stats = Arc::new(ProxyStats::default());
    let st = stats.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            let n = st.connections.fetch_add(1, Ordering::SeqCst);
            let st = st.clone();
            tokio::spawn(async move {
                if n < refuse_first {
                    st.refused.fetch_add(1, Ordering::SeqCst);
                    let _ = client
                        .write_all(b"421 4.3.2 Service not available, try again later\r\n")
                        .await;
                    let _ = client.shutdown().await;
                    return;
                }
                let now = st.active.fetch_add(1, Ordering::SeqCst) + 1;
                st.max_active.fetch_max(now, Ordering::SeqCst);
                if let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
                st.active.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    stats
}

fn smtp_config(port: u16, connections: usize) -> MailConfig {
    MailConfig {
        transport: format!("smtp://127.0.0.1:{port}"),
        connections,
        ..MailConfig::default()
    }
}

#[tokio::test]
async fn smtp_delivers_every_mail_to_a_real_server_over_pooled_connections() {
    logs();
    require_aiosmtpd!();
    let server = Aiosmtpd::start();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let proxy = spawn_proxy(listener, server.port, 0);

    let pool = SendingPool::start(&smtp_config(port, 2), PathBuf::from("unused")).unwrap();
    let want: BTreeSet<String> = (0..20).map(|i| format!("user{i:02}@ex.com")).collect();
    let queued = pool
        .enqueue(want.iter().map(|to| mail("mailing-smtp", to)).collect())
        .await
        .unwrap();
    assert_eq!(queued, 20);
    let stats = pool.shutdown().await;
    assert_eq!(
        (stats.queued, stats.sent, stats.failed),
        (20, 20, 0),
        "{stats:?}"
    );

    let raws = server.messages();
    assert_eq!(raws.len(), 20);
    let mut got = BTreeSet::new();
    for raw in &raws {
        let msg = parse(raw);
        let to = address(msg.to());
        // The envelope recipient (aiosmtpd's X-RcptTo) is the header recipient.
        assert_eq!(header(&msg, "X-RcptTo"), to);
        assert_eq!(header(&msg, "X-MailFrom"), "news@tidemark.test");
        assert_eq!(msg.subject(), Some("Neuigkeiten für dich – grün"));
        assert_eq!(
            header(&msg, "List-Unsubscribe"),
            "<mailto:unsubscribe@tidemark.test?subject=unsubscribe>, <https://tidemark.test/unsubscribe/AbC_123>"
        );
        let html = msg.body_html(0).expect("html body");
        assert_same_html(&html, &html_body(&to));
        got.insert(to);
    }
    assert_eq!(got, want, "each recipient exactly once");

    // Two workers → two SMTP sessions at a time; connections are reused, not one per mail.
    let total = proxy.connections.load(Ordering::SeqCst);
    let max_active = proxy.max_active.load(Ordering::SeqCst);
    eprintln!(
        "smtp: 20 mails over {total} connections, at most {max_active} open at once, {} retries",
        stats.retried
    );
    assert!(
        total < 20,
        "pooled connections must be reused ({total} opened)"
    );
}

#[tokio::test]
async fn smtp_retries_a_down_then_busy_relay_and_delivers_once() {
    logs();
    require_aiosmtpd!();
    let server = Aiosmtpd::start();
    // Nothing listens on this port yet: the first attempts are refused connections.
    let port = free_port();
    let cfg = MailConfig {
        retries: 6,
        retry_backoff: Duration::from_millis(100),
        ..smtp_config(port, 1)
    };
    let pool = SendingPool::start(&cfg, PathBuf::from("unused")).unwrap();
    pool.enqueue(vec![mail("mailing-retry", "late@ex.com")])
        .await
        .unwrap();

    // Once the refusal was retried, the relay comes up, but busy: its first session gets 421.
    let deadline = Instant::now() + Duration::from_secs(5);
    while pool.stats().retried == 0 {
        assert!(
            Instant::now() < deadline,
            "no retry after a refused connection"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(pool.stats().sent, 0);
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .unwrap();
    let proxy = spawn_proxy(listener, server.port, 1);

    // Shutdown waits for the pending retries.
    let stats = pool.shutdown().await;
    assert_eq!((stats.queued, stats.sent, stats.failed), (1, 1, 0));
    // ≥ 1 retry after "connection refused", exactly 1 after the 421.
    assert!(stats.retried >= 2, "{stats:?}");
    assert_eq!(proxy.refused.load(Ordering::SeqCst), 1);
    assert!(proxy.connections.load(Ordering::SeqCst) >= 2);

    let raws = server.messages();
    assert_eq!(raws.len(), 1, "delivered exactly once");
    assert_eq!(address(parse(&raws[0]).to()), "late@ex.com");
}

// ----- permanent failures: a relay answering 550, an invalid address ------------------------

/// Minimal SMTP server that accepts the session but rejects every recipient with 550.
async fn spawn_rejecting_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let rcpts = Arc::new(AtomicUsize::new(0));
    let counter = rcpts.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let (rd, mut wr) = stream.into_split();
                let mut lines = BufReader::new(rd).lines();
                if wr.write_all(b"220 reject.test ESMTP\r\n").await.is_err() {
                    return;
                }
                while let Ok(Some(line)) = lines.next_line().await {
                    let cmd = line.get(..4).unwrap_or("").to_ascii_uppercase();
                    let reply: &[u8] = match cmd.as_str() {
                        "EHLO" | "HELO" => b"250 reject.test\r\n",
                        "MAIL" | "RSET" | "NOOP" => b"250 2.0.0 OK\r\n",
                        "RCPT" => {
                            counter.fetch_add(1, Ordering::SeqCst);
                            b"550 5.1.1 No such user here\r\n"
                        }
                        "QUIT" => {
                            let _ = wr.write_all(b"221 2.0.0 Bye\r\n").await;
                            return;
                        }
                        _ => b"503 5.5.1 Bad sequence of commands\r\n",
                    };
                    if wr.write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, rcpts)
}

#[tokio::test]
async fn permanent_failures_are_not_retried() {
    logs();
    let (port, rcpts) = spawn_rejecting_server().await;
    let cfg = MailConfig {
        retries: 3,
        retry_backoff: Duration::from_millis(50),
        ..smtp_config(port, 1)
    };
    let pool = SendingPool::start(&cfg, PathBuf::from("unused")).unwrap();
    pool.enqueue(vec![
        mail("mailing-perm", "nobody@ex.com"),
        mail("mailing-perm", "not an address"),
    ])
    .await
    .unwrap();
    pool_shutdown_with_stats(
        pool,
        PoolStats {
            queued: 2,
            sent: 0,
            retried: 0,
            failed: 2,
        },
    )
    .await;
    // One RCPT for the rejected recipient (no retry); none for the invalid address.
    assert_eq!(rcpts.load(Ordering::SeqCst), 1);
}

// ----- bounded queue, graceful shutdown, configuration ------------------------------------

/// Slow transport that records what it delivered.
#[derive(Debug, Default)]
struct Slow {
    delivered: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

#[async_trait::async_trait]
impl MailTransport for Slow {
    async fn deliver(&self, mail: &OutgoingMail) -> Result<(), SendError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.delivered.lock().unwrap().push(mail.to.clone());
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn bounded_queue_and_shutdown_lose_nothing() {
    logs();
    let a = Arc::new(Slow::default());
    let b = Arc::new(Slow::default());
    let cfg = MailConfig {
        connections: 2,
        queue: 4,
        ..MailConfig::default()
    };
    let pool = SendingPool::with_transports(vec![a.clone(), b.clone()], &cfg).unwrap();
    let mails: Vec<OutgoingMail> = (0..40)
        .map(|i| mail("m", &format!("u{i}@ex.com")))
        .collect();
    // 40 mails through a queue of 4: enqueue has to wait for the workers.
    assert_eq!(pool.enqueue(mails).await.unwrap(), 40);
    let at_return = pool.stats();
    assert!(
        at_return.sent >= 40 - 4 - 4,
        "enqueue returned before the queue had room: {at_return:?}"
    );
    // Stop at once: everything queued is still delivered.
    let stats = pool.shutdown().await;
    assert_eq!((stats.queued, stats.sent, stats.failed), (40, 40, 0));
    let (da, db) = (
        a.delivered.lock().unwrap().clone(),
        b.delivered.lock().unwrap().clone(),
    );
    // Round-robin: 20 each, every recipient exactly once.
    assert_eq!((da.len(), db.len()), (20, 20));
    let all: BTreeSet<String> = da.iter().chain(&db).cloned().collect();
    assert_eq!(all.len(), 40);
    assert!(a.max_in_flight.load(Ordering::SeqCst) <= 2);
    assert!(b.max_in_flight.load(Ordering::SeqCst) <= 2);
}

#[tokio::test]
async fn start_rejects_bad_configuration() {
    let dir = PathBuf::from("unused");
    for (cfg, why) in [
        (
            MailConfig {
                connections: 0,
                ..MailConfig::default()
            },
            "connections",
        ),
        (
            MailConfig {
                queue: 0,
                ..MailConfig::default()
            },
            "queue",
        ),
        (
            MailConfig {
                transport: "ftp://127.0.0.1:21".into(),
                ..MailConfig::default()
            },
            "unknown scheme",
        ),
        (
            MailConfig {
                relays: vec!["smtp://127.0.0.1:25".into()],
                ..MailConfig::default()
            },
            "relays next to eml",
        ),
    ] {
        let err = SendingPool::start(&cfg, dir.clone()).unwrap_err();
        assert!(matches!(err, SendError::Permanent(_)), "{why}: {err}");
    }
    // smtps:// builds (TLS support compiled in).
    let pool = SendingPool::start(
        &MailConfig {
            transport: "smtps://mail.example.com:465".into(),
            ..MailConfig::default()
        },
        dir,
    )
    .unwrap();
    pool.shutdown().await;
}

#[test]
fn start_outside_a_runtime_is_an_error_not_a_panic() {
    let smtp = smtp_config(2525, 1);
    let err = SendingPool::start(&smtp, PathBuf::from("x")).unwrap_err();
    assert!(matches!(err, SendError::Permanent(_)));
    let err = SendingPool::start(&MailConfig::default(), PathBuf::from("x")).unwrap_err();
    assert!(matches!(err, SendError::Permanent(_)));
}
