//! The redirector on the MariaDB link store, with the database going down and coming back:
//! a click answers 302 while it is up, 503 with `Retry-After` while it is down (never a wrong
//! redirect), and rendering fails cleanly without storing anything half-way.
//!
//! "Down" is a TCP proxy in front of the machine's MariaDB that cuts every connection and
//! refuses new ones, so the real driver sees a real outage.

#![allow(clippy::clone_on_ref_ptr)] // test wiring

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::json;
use tidemark_core::clock::{ManualClock, SharedClock};
use tidemark_core::day::Day;
use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};
use tidemark_events::{EventsConfig, Ingest, SqliteRaw};
use tidemark_links::builder::Recipient;
use tidemark_links::config::LinksConfig;
use tidemark_links::error::LinksError;
use tidemark_links::http::public_router;
use tidemark_links::id::IdCodec;
use tidemark_links::metrics::LinksMetrics;
use tidemark_links::mysql::MysqlLinks;
use tidemark_links::send::{MailConfig, SendingPool};
use tidemark_links::service::LinksService;
use tidemark_links::sqlite::SqliteLinks;
use tidemark_links::store::LinkStore;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

const START: i64 = 1_795_999_534_123; // 2026-11-30T00:45:34.123Z

/// A loopback TCP proxy to `target` that can be cut (every live connection closed, new ones
/// closed at once) and restored.
struct Proxy {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    cut: Arc<Mutex<CancellationToken>>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let cut = Arc::new(Mutex::new(CancellationToken::new()));
        let (up2, cut2) = (up.clone(), cut.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let token = cut2.lock().await.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = token.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                    }
                });
            }
        });
        Self { addr, up, cut }
    }

    async fn down(&self) {
        self.up.store(false, Ordering::SeqCst);
        let mut cut = self.cut.lock().await;
        cut.cancel();
        *cut = CancellationToken::new();
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_down_means_503_with_retry_after_and_nothing_half_stored() {
    let dir = tempfile::tempdir().unwrap();
    let url = scratch_database(&test_server_url(), "tm_links_down")
        .await
        .unwrap();
    let parsed = url::Url::parse(&url).unwrap();
    let target: SocketAddr = format!(
        "{}:{}",
        parsed.host_str().unwrap(),
        parsed.port().unwrap_or(3306)
    )
    .parse()
    .unwrap();
    let proxy = Proxy::start(target).await;
    let mut via_proxy = parsed.clone();
    via_proxy.set_port(Some(proxy.addr.port())).unwrap();

    let links = Arc::new(MysqlLinks::connect(via_proxy.as_str(), 2).await.unwrap());
    let clock: SharedClock = Arc::new(ManualClock::new(START));
    let raw = Arc::new(SqliteRaw::open(&dir.path().join("raw.db")).unwrap());
    let svc = LinksService::new(
        links.clone(),
        Arc::new(SqliteLinks::open(&dir.path().join("mailings.db")).unwrap()),
        Ingest::new(raw, EventsConfig::default()),
        Arc::new(SendingPool::start(&MailConfig::default(), dir.path().join("out")).unwrap()),
        IdCodec::new([3; 16]),
        LinksConfig {
            track_base: "https://t.example.net".into(),
            ..LinksConfig::default()
        },
        clock,
        LinksMetrics::unregistered(),
    );
    let mid = svc
        .create_mailing(
            "t",
            "Hi",
            r#"<a href="https://shop.example/item/7">x</a>"#,
            "n@shop.example",
        )
        .await
        .unwrap();
    let recipient = || Recipient {
        email: "ann@x.com".into(),
        fields: json!({}).as_object().unwrap().clone(),
    };
    let (_, build) = svc.render("t", &mid, vec![recipient()]).await.unwrap();
    let html = &build.messages[0].html;
    let at = html.find("/c/").unwrap() + 3;
    let id = html[at..at + 32].to_owned();
    let today = Day::of_utc_ms(START);
    assert_eq!(
        links.count(today).await.unwrap(),
        2,
        "the link and the pixel"
    );

    let click = || async {
        public_router(svc.clone())
            .oneshot(
                Request::get(format!("/c/{id}"))
                    .header(header::USER_AGENT, "Mozilla/5.0 Firefox/120.0")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap()
    };
    let ok = click().await;
    assert_eq!(ok.status(), StatusCode::FOUND);
    assert_eq!(
        ok.headers()[header::LOCATION],
        "https://shop.example/item/7"
    );

    proxy.down().await;
    let down = click().await;
    assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(down.headers()[header::RETRY_AFTER], "5");
    assert!(down.headers().get(header::LOCATION).is_none());
    let failed = svc.render("t", &mid, vec![recipient()]).await;
    assert!(
        matches!(&failed, Err(LinksError::Store(e)) if e.kind() == tidemark_core::store::ErrorKind::Unavailable),
        "{failed:?}"
    );

    proxy.restore();
    let mut back = click().await;
    for _ in 0..20 {
        if back.status() == StatusCode::FOUND {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        back = click().await;
    }
    assert_eq!(back.status(), StatusCode::FOUND);
    assert_eq!(
        links.count(today).await.unwrap(),
        2,
        "the failed render stored nothing"
    );
    links.pool().close().await;
    drop_database(&url).await.unwrap();
}
