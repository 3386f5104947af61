//! `tidemark mail render` offline: messages and skipped rows are written, link records go to the
//! data dir's store, and a server started on that data dir redirects the ids it wrote.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_render_then_serve_redirects() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, out) = (tmp.path().join("data"), tmp.path().join("out"));
    let csv = tmp.path().join("r.csv");
    std::fs::write(
        &csv,
        "email,first_name\nann@x.com,Ann\nnot-an-address,Bob\nbob@x.com,Bob\n",
    )
    .unwrap();
    let template = tmp.path().join("t.html");
    std::fs::write(&template, r#"<html><body>Hi {{ first_name }} <a href="https://shop.example/item/9?a=1&amp;b=2">x</a></body></html>"#).unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["mail", "render", "--template"])
        .arg(&template)
        .arg("--recipients")
        .arg(&csv)
        .arg("--out")
        .arg(&out)
        .arg("--data-dir")
        .arg(&data)
        .env("RUST_LOG", "warn")
        .env("TIDEMARK_LINKS__TRACK_BASE", "https://t.example.net")
        .status()
        .unwrap();
    assert!(status.success());
    let mut files: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "000000-ann@x.com.html",
            "000001-bob@x.com.html",
            "skipped.csv"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(out.join("skipped.csv")).unwrap(),
        "email,reason\nnot-an-address,not an email address\n"
    );
    let ann = std::fs::read_to_string(out.join("000000-ann@x.com.html")).unwrap();
    assert!(
        ann.starts_with("<html><body>Hi Ann <a href=\"https://t.example.net/c/"),
        "{ann}"
    );
    let at = ann.find("/c/").unwrap() + 3;
    let id = &ann[at..at + 32];

    // The server on the same data dir knows the id (same id secret, same link store).
    let mut server = TestServer::start(&[]).await;
    server.kill9();
    server.dir = data.clone();
    server.spawn().await;
    let r = no_redirects()
        .get(server.url(&format!("/c/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 302);
    assert_eq!(
        r.headers()["location"],
        "https://shop.example/item/9?a=1&b=2"
    );
}
