//! Links on two nodes sharing a MariaDB link store: nothing of links is local, so a mailing
//! made on one node renders on the other, a suppression made on one holds on the other, and a
//! link rendered on one redirects on the other. A node with another id secret is refused.

mod common;

use common::*;
use serde_json::json;
use tidemark_core::mysql::drop_database;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_rendered_on_one_node_redirects_on_another() {
    let engines = Engines::start().await;
    let env: Vec<(String, String)> = engines.env();
    let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let a = TestServer::start(&env_ref).await;
    let b = TestServer::start(&env_ref).await;
    let c = client();

    let (st, v) = call(
        &c,
        reqwest::Method::POST,
        &a.url("/v1/mailings"),
        Some(json!({"subject": "s", "from": "news@x.example",
                    "html": r#"<p>{{ name }}</p><a href="https://shop.example/item/42">see</a>"#})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let mid = v["mailing_id"].as_str().unwrap().to_owned();
    let (st, v) = call(
        &c,
        reqwest::Method::POST,
        &a.url("/v1/suppressions"),
        Some(json!({"emails": ["Gone@X.example"]})),
    )
    .await;
    assert_eq!(st, 200, "{v}");

    // Node B renders node A's mailing, and knows A's suppression.
    let (st, v) = call(
        &c,
        reqwest::Method::POST,
        &b.url(&format!("/v1/mailings/{mid}/render")),
        Some(json!({"recipients": [
            {"email": "ana@x.example", "fields": {"name": "Ana"}},
            {"email": "gone@x.example", "fields": {"name": "G"}}
        ]})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["messages"].as_array().unwrap().len(), 1);
    assert_eq!(
        v["skipped"],
        json!([{"email": "gone@x.example", "reason": "suppressed"}])
    );
    let html = v["messages"][0]["html"].as_str().unwrap();
    let start = html.find("/c/").unwrap();
    let link = &html[start..start + 35];

    // Rendered on B, followed on A.
    let no_redirect = no_redirects();
    let r = no_redirect.get(a.url(link)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 302, "{link}");
    assert_eq!(r.headers()["location"], "https://shop.example/item/42");

    // Nothing of it is in either node's data directory.
    for node in [&a, &b] {
        assert!(!node.dir.join("links/links.db").exists());
    }

    // A third node with another secret is refused at start, naming the key.
    let dir = tempfile::tempdir().unwrap();
    let mut other = env.clone();
    other.retain(|(k, _)| k != "TIDEMARK_LINKS__ID_SECRET");
    other.push((
        "TIDEMARK_LINKS__ID_SECRET".into(),
        "0123456789abcdef0123456789abcdef".into(),
    ));
    let stderr = TestServer::refused_start(dir.path(), &other);
    assert!(
        stderr.contains("links.id_secret differs from the secret this MariaDB link store"),
        "{stderr}"
    );
    drop((a, b));
    drop_database(&engines.links_db).await.unwrap();
    drop_database(&engines.rollups_db).await.unwrap();
}
