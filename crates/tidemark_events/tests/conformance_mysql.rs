//! The events port conformance suites (`tidemark_events::conformance`) on the production
//! engines: MariaDB for the summary tier (the machine's server, `TIDEMARK_TEST_MYSQL`; a
//! scratch database per test, dropped afterwards).

use std::sync::Arc;

use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};
use tidemark_events::conformance;
use tidemark_events::rollups::MysqlRollups;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_rollup_store() {
    let url = scratch_database(&test_server_url(), "tm_rollups")
        .await
        .unwrap();
    let store = MysqlRollups::connect(&url, 4).await.unwrap();
    conformance::rollup_store(Arc::new(store.clone())).await;
    store.pool().close().await;
    drop_database(&url).await.unwrap();
}
