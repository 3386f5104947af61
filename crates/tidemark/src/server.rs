//! `tidemark serve`: opens the stores (chat, links, events) and builds the services over them
//! (`Node::open`, the same for every role), then by the node's [`crate::config::Role`]
//! starts the background workers (archiver, trimmer, recovery, partition manager, events
//! lifecycle) and serves the HTTP API (or, on a `workers` node, only `/healthz`, `/readyz` and
//! `/metrics`), and shuts down in order (stop accepting, finish in-flight requests, stop
//! workers, close stores).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus::{Encoder, Registry, TextEncoder};
use tidemark_chat::metrics::ChatMetrics;
use tidemark_chat::{ChatService, ChatStores};
use tidemark_core::clock::{SharedClock, SystemClock};
use tidemark_core::cpu::CpuPool;
use tidemark_core::health::StoreHealth;
use tidemark_core::http::{ApiError, ApiKeys, json_errors, require_tenant};
use tidemark_core::store::ErrorKind;
use tidemark_events::Ingest;
use tidemark_events::http::EventsHttp;
use tidemark_events::lifecycle::Lifecycle;
use tidemark_events::report_http::AnalyticsHttp;
use tidemark_events::rollup::RollupService;
use tidemark_events::usage::KindUsage;
use tidemark_links::metrics::LinksMetrics;
use tidemark_links::partitions::PartitionManager;
use tidemark_links::service::LinksService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::Config;

#[derive(Debug, Clone)]
struct Ops {
    registry: Registry,
    chat: ChatService,
    /// Stores marked full by any subsystem ([`tidemark_core::health`]).
    health: StoreHealth,
    /// [`crate::http_metrics`].
    responses: prometheus::IntCounterVec,
    /// `metrics_key`: the key `/metrics` asks for, if any.
    metrics_key: Option<ApiKeys>,
}

/// What the HTTP API answers with: every subsystem's `/v1` routes and public pages.
struct Api {
    chat: ChatService,
    links: LinksService,
    events: EventsHttp,
    analytics: AnalyticsHttp,
    keys: Arc<ApiKeys>,
    analytics_owner: Arc<str>,
}

/// The background jobs that are not chat's (chat's own start with
/// [`ChatService::spawn_workers`]): built on every node, run only where the role runs workers.
struct Background {
    partitions: PartitionManager,
    lifecycle: Lifecycle,
    lifecycle_interval: Duration,
}

/// Every store and service of one node, whatever its role: the stores each section of the
/// configuration names, the services over them, wired to each other, the metrics registry
/// and the node's store health. The role decides only what of this runs and is served.
struct Node {
    chat: ChatService,
    links: LinksService,
    events: EventsHttp,
    analytics: AnalyticsHttp,
    background: Background,
    registry: Registry,
    health: StoreHealth,
}

impl Node {
    /// Opens every store `config` names (SQLite files under `config.data_dir` by default) and
    /// builds the services; `listen` is the node's address, the default tracking base.
    /// Errors: a store that cannot be opened or refuses to start (see each subsystem's `open`).
    async fn open(config: &Config, listen: SocketAddr) -> anyhow::Result<Self> {
        let clock: SharedClock = Arc::new(SystemClock);
        let registry = Registry::new();
        // Every subsystem's writers report a full store here; `/readyz` reads it.
        let health = StoreHealth::default();
        let chat_metrics = ChatMetrics::register(&registry)?;
        let stores = ChatStores::open(&config.data_dir, &config.chat).await?;
        let chat = ChatService::new(stores, Arc::clone(&clock), config.chat(), chat_metrics)
            .with_store_health(health.clone());

        let events_dir = config.data_dir.join("events");
        std::fs::create_dir_all(&events_dir)?;
        // Each port on the engine its URL names (SQLite by default): `events.raw`,
        // `events.rollups`.
        // The summary tier (listing_daily, listings): reports, rollups on demand; and the
        // event-kind audit's usage, which every stored batch and every report notes. The
        // days of both are those of `events.time_zone`, the zone the stores were first cut in.
        let (raw, rollups) =
            tidemark_events::stores::open_both(&config.events, &events_dir).await?;
        let usage = KindUsage::new(Arc::clone(&rollups), raw.calendar().clone());
        let ingest = Ingest::new(raw, config.events.clone())
            .with_store_health(health.clone())
            .with_usage(usage.clone());
        // Large ingest bodies are inflated and parsed here, and mailings rendered, off the
        // runtime's workers.
        let cpu = CpuPool::per_core();
        let events = EventsHttp {
            ingest: ingest.clone(),
            clock: Arc::clone(&clock),
            pool: cpu.clone(),
        };
        // Nodes sharing the summary tier take in and count the same events.
        rollups.agree_schema(&config.events.schema).await?;
        // Per-day leases where the summary tier is (every node's, on MariaDB), shared with
        // the lifecycle.
        let day_leases = rollups.day_leases(config.events.day_lease);
        let analytics = AnalyticsHttp {
            rollups: RollupService::new(Arc::clone(ingest.raw()), rollups, Arc::clone(&clock))
                .with_leases(day_leases)
                .with_usage(usage.clone()),
            schema: config.events.schema.clone(),
            usage: Some(usage.clone()),
            raw_retention: config.events.raw_retention,
            kind_audit_days: config.events.kind_audit_days,
        };
        // Wiring: a conversation's first message about a listing is one `contact` event.
        let chat = chat.with_contact_sink(Arc::new(crate::wiring::ContactEvents {
            ingest: ingest.clone(),
            owner: config.analytics_owner().to_owned(),
        }));
        let mut links_cfg = config.links.clone();
        if links_cfg.track_base.is_empty() {
            links_cfg.track_base = format!("http://{listen}");
        }
        // `links.store`: the embedded file or MariaDB day partitions.
        let links = LinksService::open(
            &config.data_dir,
            links_cfg,
            ingest,
            Arc::clone(&clock),
            LinksMetrics::register(&registry)?,
        )
        .await?
        .with_store_health(health.clone())
        .with_cpu_pool(cpu);

        let partitions = PartitionManager::new(
            links.link_store(),
            Arc::clone(&clock),
            config.links.retention_days,
        )
        .with_store_health(health.clone());
        // The raw tier's lifecycle: rollup and Parquet archive of closed days, drop behind both.
        let lifecycle = Lifecycle::new(
            analytics.rollups.clone(),
            tidemark_events::archive::RawArchive::open(
                config.events.archive_url.as_deref(),
                &events_dir.join("archive"),
            )?,
            &config.events,
            tidemark_events::metrics::EventsMetrics::register(&registry)?,
        )
        .with_store_health(health.clone());
        Ok(Self {
            chat,
            links,
            events,
            analytics,
            background: Background {
                partitions,
                lifecycle,
                lifecycle_interval: config.events.lifecycle_interval,
            },
            registry,
            health,
        })
    }
}

impl Background {
    /// Starts every background worker on `tasks`, each stopped by `cancel`: chat's archiver,
    /// recovery and trimmer ([`ChatService::spawn_workers`]), the links partition manager (one
    /// pass now, whose failure fails the start, then hourly) and the events lifecycle.
    async fn spawn(
        self,
        chat: &ChatService,
        tasks: &mut JoinSet<()>,
        cancel: &CancellationToken,
    ) -> anyhow::Result<()> {
        chat.spawn_workers(tasks, cancel).await?;
        self.partitions.run_once().await?;
        tasks.spawn(
            self.partitions
                .run(Duration::from_secs(3600), cancel.clone()),
        );
        tasks.spawn(self.lifecycle.run(self.lifecycle_interval, cancel.clone()));
        Ok(())
    }
}

/// Serves until `shutdown` resolves, then stops everything in order. What runs follows
/// `config.role` ([`crate::config::Role`]): the background workers on `all` and `workers`
/// nodes, the HTTP API on `all` and `api` nodes; `/healthz`, `/readyz` and `/metrics` on every
/// node. Errors: a configuration [`Config::validate`] refuses, a data directory another server
/// holds, a store that cannot be opened, a worker that cannot start.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    config.validate()?;
    let _data_dir_lock = lock_data_dir(&config.data_dir)?;
    let node = Node::open(&config, listener.local_addr()?).await?;
    let Node {
        chat,
        links,
        events,
        analytics,
        background,
        registry,
        health,
    } = node;

    let cancel = CancellationToken::new();
    let mut workers = JoinSet::new();
    if config.role.runs_workers() {
        background.spawn(&chat, &mut workers, &cancel).await?;
    }
    if config.role.serves_api() {
        chat.spawn_stream_follower(&mut workers, &cancel);
    }
    // Every node notes the event kinds it stores and reads; the figures reach the summary
    // store every few seconds and at a graceful stop.
    if let Some(usage) = analytics.usage.clone() {
        workers.spawn(usage.run(cancel.clone()));
    }
    if config.min_free_disk_mb > 0 {
        workers.spawn(watch_free_space(
            health.clone(),
            config.data_dir.clone(),
            config.min_free_disk_mb.saturating_mul(1 << 20),
            cancel.clone(),
        ));
    }

    let pool = Arc::clone(links.pool());
    let links_for_shutdown = links.clone();
    let chat_for_shutdown = chat.clone();
    let user_tokens = config.user_tokens()?;
    let api = config.role.serves_api().then(|| Api {
        chat: chat.clone(),
        links,
        events,
        analytics,
        keys: Arc::new(
            ApiKeys::new(
                config
                    .tenants
                    .iter()
                    .map(|t| (t.name.clone(), t.key.clone())),
            )
            .with_user_tokens(user_tokens),
        ),
        analytics_owner: Arc::from(config.analytics_owner()),
    });
    let app = router(
        api,
        config.body_read_timeout,
        Ops {
            responses: crate::http_metrics::register(&registry)?,
            metrics_key: config
                .metrics_key
                .clone()
                .map(|key| ApiKeys::new([("metrics".to_owned(), key)])),
            registry,
            chat,
            health,
        },
    );
    tracing::info!(role = %config.role, listen = %listener.local_addr()?, mode = ?config.chat.mode, data_dir = %config.data_dir.display(), "tidemark serving");
    let limits = ConnectionLimits {
        header_read_timeout: config.header_read_timeout,
        send_timeout: config.send_timeout,
        max_connections: config.max_connections,
    };
    // Live streams never end by themselves: they are closed as the drain starts (clients
    // resume from their last event elsewhere or after the restart).
    let streams = Arc::clone(chat_for_shutdown.streams());
    serve_http(listener, app, limits, shutdown, move || streams.close()).await;
    tracing::info!("stopped accepting; stopping workers");
    cancel.cancel();
    while workers.join_next().await.is_some() {}
    chat_for_shutdown.drain_contacts().await;
    links_for_shutdown.drain_events().await;
    let deliveries = links_for_shutdown.deliveries();
    drop(links_for_shutdown);
    match Arc::try_unwrap(pool) {
        Ok(pool) => {
            pool.shutdown().await;
            // The messages the pool delivered while draining, counted before the stores close.
            deliveries.drain().await;
        }
        Err(_) => {
            tracing::warn!("sending pool still shared at shutdown; queued mail drains unobserved")
        }
    }
    tracing::info!("workers stopped; stores close as their last handles drop");
    Ok(())
}

/// Takes an exclusive lock on the data directory itself (`flock` of the directory) for as long
/// as the returned handle lives, so a second `serve` on the same data directory refuses to
/// start instead of running a second set of writers and workers over the same stores. The lock
/// is on the directory, not on a file in it, so no file can be deleted to get past it (with a
/// `serve.lock` file, `rm serve.lock` would let a second server in, and retries sent to it
/// would get new seqs). (The offline tools `mail render` and `rollup` go through the stores'
/// own locking and may run beside a server; `chat backfill` rewrites archiver positions and
/// takes this lock too.)
pub fn lock_data_dir(dir: &std::path::Path) -> anyhow::Result<std::fs::File> {
    use anyhow::Context;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the data directory {}", dir.display()))?;
    let handle = std::fs::File::open(dir)
        .with_context(|| format!("opening the data directory {}", dir.display()))?;
    match handle.try_lock() {
        Ok(()) => Ok(handle),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another `tidemark serve` is using the data directory {} (it holds a lock on it); stop it or pick another --data-dir",
            dir.display(),
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking the data directory {}", dir.display()))
        }
    }
}

/// The node's routes: `api` (on `all` and `api` nodes) and the operational endpoints
/// `/healthz`, `/readyz` and `/metrics` (every node); any other path is 404 `not_found` in the
/// JSON error shape. Every answer is counted ([`crate::http_metrics`]).
fn router(api: Option<Api>, body_read_timeout: Duration, ops: Ops) -> Router {
    let responses = ops.responses.clone();
    let ops_routes = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(ops);
    api.map(api_routes)
        .unwrap_or_default()
        .merge(ops_routes)
        .fallback(|| async { ApiError::not_found("no such route") })
        .layer(axum::middleware::from_fn_with_state(
            body_read_timeout,
            crate::body_deadline::body_deadline,
        ))
        .layer(axum::middleware::from_fn(json_errors))
        .layer(axum::middleware::from_fn(
            crate::request_limits::request_limits,
        ))
        .layer(axum::middleware::from_fn_with_state(
            responses,
            crate::http_metrics::count_responses,
        ))
}

/// The HTTP API: the subsystems' `/v1` routes behind per-tenant API keys, the OpenAPI
/// document, and the public `/c`, `/o`, `/expired` and `/dashboard`.
fn api_routes(api: Api) -> Router {
    let Api {
        chat,
        links,
        events,
        analytics,
        keys,
        analytics_owner,
    } = api;
    let kinds = events.ingest.config().schema.kinds.clone();
    // Analytics are one tenant's (crate::wiring): the others get 403 there.
    let analytics_routes = tidemark_events::recent::router(events.clone())
        .merge(tidemark_events::http::ingest_router(events))
        .merge(tidemark_events::report_http::analytics_router(analytics))
        .layer(axum::middleware::from_fn_with_state(
            analytics_owner,
            crate::wiring::require_analytics_owner,
        ));
    let v1 = tidemark_chat::http::router(chat)
        .merge(tidemark_links::http::api_router(links.clone()))
        .merge(analytics_routes)
        .layer(axum::middleware::from_fn_with_state(keys, require_tenant));
    Router::new()
        .merge(v1)
        .merge(crate::openapi::router(&kinds))
        .merge(tidemark_links::http::public_router(links))
        .merge(tidemark_events::dashboard::public_router())
        .merge(tidemark_links::dashboard::public_router())
}

/// How long a graceful stop waits for in-flight requests: SENDs finish in milliseconds, so a
/// request still running after this is a client that stopped sending (half its headers, a body
/// short of its `Content-Length`), and it is cut. Then the workers stop and the stores close,
/// all well inside a supervisor's grace period (Kubernetes' default is 30 s). A drain of 30 s
/// would let a single stalled client outlast that grace period, and the server would be killed
/// instead of closing its stores.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the data directory's free space is checked.
const FREE_SPACE_EVERY: Duration = Duration::from_secs(5);

/// Checks the data directory's free space now and every [`FREE_SPACE_EVERY`] until `cancel`
/// ([`StoreHealth::check_free_space`]): below `min_free` bytes, `/readyz` answers 503
/// `storage_full` before any write fails — also right after a start on a full disk.
async fn watch_free_space(
    health: StoreHealth,
    dir: std::path::PathBuf,
    min_free: u64,
    cancel: CancellationToken,
) {
    loop {
        if let Err(error) = health.check_free_space(&dir, min_free) {
            tracing::warn!(%error, dir = %dir.display(), "checking the data directory's free space");
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(FREE_SPACE_EVERY) => {}
        }
    }
}

/// What bounds the connections of [`serve_http`].
#[derive(Debug, Clone, Copy)]
struct ConnectionLimits {
    /// A connection must send its request headers within this time.
    header_read_timeout: Duration,
    /// A write to a connection must make progress within this time.
    send_timeout: Duration,
    /// Most connections open at once; further ones wait in the listen backlog.
    max_connections: usize,
}

/// The HTTP/1.1 accept loop: like `axum::serve`, plus a header read timeout (slow-loris
/// defence) and a bound on open connections (a connection is accepted once a permit is free);
/// on `shutdown` it stops accepting and waits (up to [`DRAIN_TIMEOUT`], or until a second
/// SIGINT / SIGTERM) for in-flight requests.
async fn serve_http(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
    before_drain: impl FnOnce(),
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                // The semaphore is never closed.
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // E.g. out of file descriptors: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let mut stream = tokio_io_timeout::TimeoutStream::new(stream);
        stream.set_write_timeout(Some(limits.send_timeout));
        let stream = Box::pin(stream);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_headers(crate::request_limits::PARSER_MAX_HEADERS)
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(error) = conn.await {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    before_drain();
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(DRAIN_TIMEOUT) => {
            tracing::warn!("in-flight requests still running after the drain timeout");
        }
        // A second SIGINT / SIGTERM (an operator's second Ctrl-C) ends the drain at once; the
        // workers still stop and the stores still close as after any drain.
        () = shutdown_signal() => {
            tracing::warn!("a second shutdown signal: in-flight requests are cut");
        }
    }
}

/// 200 "ready" while the chat hot store answers a read, no store of any subsystem is marked
/// full (`tidemark_core::health`: 503 `storage_full` until a write to it succeeds) and the
/// SEND path's commits work (`tidemark_chat::health`: a full disk answers reads and fails
/// every commit); 503 with what failed otherwise.
async fn readyz(State(ops): State<Ops>) -> Result<&'static str, ApiError> {
    ops.chat
        .stores()
        .hot
        .watermarks()
        .await
        .map_err(|e| ApiError::unavailable(format!("chat hot store: {e}")))?;
    ops.health
        .check()
        .map_err(|e| ApiError::store(ErrorKind::Full, e))?;
    ops.chat
        .commit_health()
        .check()
        .map_err(ApiError::unavailable)?;
    Ok("ready\n")
}

async fn metrics(State(ops): State<Ops>, headers: header::HeaderMap) -> Response {
    if let Some(keys) = &ops.metrics_key {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if keys.tenant_for(given).is_none() {
            return ApiError::unauthorized(
                "GET /metrics needs `Authorization: Bearer <metrics_key>`",
            )
            .into_response();
        }
    }
    if let Err(error) = ops.chat.refresh_archive_gauges().await {
        // The gauges keep the last pass's figures; the scrape still answers.
        tracing::debug!(%error, "archive gauges not refreshed");
    }
    let mut buf = Vec::new();
    match TextEncoder::new().encode(&ops.registry.gather(), &mut buf) {
        Ok(()) => ([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], buf).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Resolves on SIGINT or SIGTERM.
///
/// SIGHUP too: the terminal that started the server closed, or a supervisor asked for a
/// reload, which Tidemark does not have; either way a graceful stop, where SIGHUP's default
/// action would end the process at once, without closing its stores.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let on = |kind: SignalKind| async move {
        match signal(kind) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    let name = tokio::select! {
        _ = ctrl_c => "SIGINT",
        _ = on(SignalKind::terminate()) => "SIGTERM",
        _ = on(SignalKind::hangup()) => "SIGHUP",
    };
    tracing::info!(signal = name, "shutdown signal received");
}
