//! The zone-move suite (`tidemark_events::conformance::zone_move`) on the production shape:
//! InfluxDB raw tier with its day catalog and the summaries in MariaDB, the archive on an
//! S3-compatible server, all started by the test. A binary of its own: the suite writes and
//! reads a year's span of days at once, and InfluxDB 1.6 loaded by the other suites running
//! beside it was seen to answer a read of a fresh day with part of it.

use std::sync::Arc;

use tidemark_events::conformance;
use tidemark_events::testing::InfluxServer;
use tidemark_events::{InfluxRaw, RawStore};

/// A zone move on the production shape, cut short again and again and resumed: InfluxDB raw
/// tier with its day catalog and the summaries in MariaDB, the archive on an S3-compatible
/// server. `name` tells the store's InfluxDB database, MariaDB database and archive prefix.
async fn production_zone_store(
    influx: &InfluxServer,
    s3: &tidemark_events::testing::S3Server,
    name: &str,
    dir: &std::path::Path,
) -> (conformance::ZoneStore, String) {
    use tidemark_core::mysql::{scratch_database, test_server_url};
    use tidemark_events::MysqlCatalog;
    use tidemark_events::archive::RawArchive;
    use tidemark_events::rollups::MysqlRollups;

    let url = scratch_database(&test_server_url(), &format!("tm_zone_{name}"))
        .await
        .unwrap();
    let rollups = MysqlRollups::connect(&url, 4).await.unwrap();
    let archive = RawArchive::open_with_options(
        Some(&format!("s3://tidemark-archive/{name}")),
        &dir.join("archive"),
        s3.options(),
    )
    .unwrap();
    // A retention long enough to keep 2024's events.
    let influx_url = format!("{}?retention=20000d", influx.url(name));
    let catalog_url = url.clone();
    let open_raw: conformance::OpenRaw = Arc::new(move |calendar| {
        let (influx_url, catalog_url) = (influx_url.clone(), catalog_url.clone());
        Box::pin(async move {
            let catalog = Arc::new(MysqlCatalog::connect(&catalog_url, 2).await?);
            let raw = InfluxRaw::connect_with_catalog(&influx_url, catalog).await?;
            Ok(Arc::new(raw.with_calendar(calendar)) as Arc<dyn RawStore>)
        })
    });
    let store = conformance::ZoneStore {
        rollups: Arc::new(rollups),
        archive,
        open_raw,
        scratch: dir.join("zone-move.db"),
    };
    (store, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influx_mariadb_s3_zone_move_cut_short_and_resumed() {
    use tidemark_core::mysql::drop_database;
    use tidemark_events::testing::S3Server;

    let influx = InfluxServer::start().unwrap();
    let s3 = S3Server::start().unwrap();
    s3.create_bucket("tidemark-archive").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (moved, a) = production_zone_store(&influx, &s3, "moved", &dir.path().join("a")).await;
    let (native, b) = production_zone_store(&influx, &s3, "native", &dir.path().join("b")).await;
    conformance::zone_move(moved, native, true).await;
    for url in [a, b] {
        drop_database(&url).await.unwrap();
    }
}
