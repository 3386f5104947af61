//! The OpenAPI contract: `GET /v1/openapi.json` documents exactly the `/v1` routes the
//! server serves, and schemathesis, run against a live server with a bounded number of
//! examples per operation, finds no 5xx and no answer outside the document (status code,
//! content type, body schema, headers), and no schema-violating request accepted.
//!
//! schemathesis (PyPI) must be installed: `scripts/test` installs it.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use common::{KEY, TestServer, call, client};
use reqwest::Method;
use serde_json::{Value, json};

/// Every route under `/v1`, as `(method, path)`. A route added to the server must be added
/// here and documented (`utoipa::path`), or this test fails: the routes registered in the
/// sources (`.route("/v1/…", …)`) are checked against this list too.
const V1_ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/openapi.json"),
    ("POST", "/v1/conversations"),
    ("POST", "/v1/conversations/{cid}/messages"),
    ("GET", "/v1/conversations/{cid}/messages"),
    ("PUT", "/v1/conversations/{cid}/read"),
    ("GET", "/v1/users/{user}/conversations"),
    ("GET", "/v1/users/{user}/stream"),
    ("POST", "/v1/mailings"),
    ("POST", "/v1/mailings/{mid}/render"),
    ("POST", "/v1/mailings/{mid}/send"),
    ("GET", "/v1/mailings/{mid}/stats"),
    ("POST", "/v1/suppressions"),
    ("DELETE", "/v1/suppressions/{email}"),
    ("POST", "/v1/events"),
    ("GET", "/v1/events/recent"),
    ("GET", "/v1/events/top"),
    ("PUT", "/v1/listings/{lid}"),
    ("POST", "/v1/listings"),
    ("GET", "/v1/accounts/{aid}/report"),
    ("GET", "/v1/accounts/{aid}/months"),
    ("GET", "/v1/events/kinds"),
    ("GET", "/v1/events/raw-window"),
    ("POST", "/v1/rollups/{day}"),
];

/// The live stream's path, which schemathesis leaves out.
const STREAM_PATH: &str = "/v1/users/{user}/stream";

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "patch", "head", "options", "trace",
];

/// The `(method, path)` of every `.route("/v1/…", get(…).post(…))` in the crates' sources.
fn routes_in_sources() -> Vec<(String, String)> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&crates).unwrap() {
        let mut dirs = vec![krate.unwrap().path().join("src")];
        while let Some(dir) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    files.push(p);
                }
            }
        }
    }
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find(".route(") {
            let after = &rest[i + ".route(".len()..];
            // The arguments, up to the matching `)`.
            let mut depth = 1;
            let mut end = after.len();
            for (j, ch) in after.char_indices() {
                match ch {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = j;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let args = after[..end].trim_start();
            rest = &after[end..];
            let Some(literal) = args.strip_prefix('"') else {
                continue; // e.g. the document's own route, registered by a constant
            };
            let path = &literal[..literal.find('"').unwrap()];
            if !path.starts_with("/v1/") {
                continue;
            }
            let handlers = &literal[path.len() + 1..];
            for m in ["get", "post", "put", "delete", "patch"] {
                for (k, _) in handlers.match_indices(&format!("{m}(")) {
                    let before = handlers[..k].chars().last();
                    if before.is_none_or(|c| !(c.is_alphanumeric() || c == '_')) {
                        out.push((m.to_uppercase(), path.to_owned()));
                    }
                }
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_v1_route_in_the_sources_is_in_the_list() {
    let mut listed: Vec<(String, String)> = V1_ROUTES
        .iter()
        .filter(|(_, p)| *p != "/v1/openapi.json")
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    listed.sort();
    assert_eq!(routes_in_sources(), listed);
}

async fn document(server: &TestServer) -> Value {
    // Served without a key.
    let resp = reqwest::get(server.url("/v1/openapi.json")).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    resp.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_lists_exactly_the_v1_routes_served() {
    let server = TestServer::start(&[]).await;
    let doc = document(&server).await;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["title"], "Tidemark");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));

    let mut documented: Vec<(String, String)> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in METHODS {
            if item.get(m).is_some() {
                documented.push((m.to_uppercase(), path.clone()));
            }
        }
    }
    documented.sort();
    let mut expected: Vec<(String, String)> = V1_ROUTES
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    expected.sort();
    assert_eq!(documented, expected);

    // Every documented route is served: with the key, none answers the router's fallback
    // ("no such route") or 405.
    let c = client();
    for (method, path) in V1_ROUTES {
        let mut concrete = path
            .replace("{lid}", "1")
            .replace("{aid}", "1")
            .replace("{day}", "2026-01-01")
            .replace(['{', '}'], "");
        if *path == STREAM_PATH {
            // A bad position: answered (400) at once instead of streaming.
            concrete.push_str("?since=x");
        }
        let body = matches!(*method, "POST" | "PUT").then(|| json!({}));
        let (st, v) = call(
            &c,
            Method::from_bytes(method.as_bytes()).unwrap(),
            &server.url(&concrete),
            body,
        )
        .await;
        assert_ne!(st, 405, "{method} {concrete}: {v}");
        assert_ne!(
            v["error"]["message"], "no such route",
            "{method} {concrete}: {v}"
        );
    }

    // Every operation but the document itself needs the bearer key and says so; every one has
    // an operation id and a success answer.
    for (method, path) in V1_ROUTES {
        let op = &doc["paths"][path][method.to_lowercase()];
        assert!(op["operationId"].is_string(), "{method} {path}");
        let codes: Vec<&String> = op["responses"].as_object().unwrap().keys().collect();
        assert!(codes.iter().any(|c| c.starts_with('2')), "{method} {path}");
        if *path == "/v1/openapi.json" {
            assert_eq!(op["security"], json!([{}]));
            continue;
        }
        let chat = op["tags"] == json!(["chat"]);
        let security = if chat {
            json!([{ "bearer": [] }, { "user_token": [] }])
        } else {
            json!([{ "bearer": [] }])
        };
        assert_eq!(op["security"], security, "{method} {path}");
        for code in ["400", "401", "503"] {
            assert_eq!(
                op["responses"][code]["content"]["application/json"]["schema"]["$ref"],
                "#/components/schemas/ErrorBody",
                "{method} {path} {code}"
            );
        }
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
}

/// Makes data schemathesis cannot guess (a conversation with messages, a mailing, a suppressed
/// address) so that the operations on them get past 404; returns the path parameters.
async fn seed(server: &TestServer) -> Vec<(&'static str, String)> {
    let c = client();
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/conversations"),
        Some(json!({"members": ["alice", "bob"], "listing_id": 7})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let cid = v["conversation_id"].as_str().unwrap().to_owned();
    for (i, sender) in ["alice", "bob", "alice"].into_iter().enumerate() {
        let (st, v) = call(
            &c,
            Method::POST,
            &server.url(&format!("/v1/conversations/{cid}/messages")),
            Some(json!({"client_msg_id": format!("m{i}"), "sender": sender, "body": "hi"})),
        )
        .await;
        assert_eq!(st, 201, "{v}");
    }
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/mailings"),
        Some(json!({
            "subject": "Hello {{ first_name }}",
            "html": "<p>Hi <a href=\"https://shop.example/item/7\">item</a></p>",
            "from": "news@shop.example",
        })),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let mid = v["mailing_id"].as_str().unwrap().to_owned();
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/suppressions"),
        Some(json!({"emails": ["gone@shop.example"]})),
    )
    .await;
    assert_eq!((st, &v), (200, &json!({"suppressed": 1})));
    vec![
        ("cid", cid),
        ("mid", mid),
        ("user", "alice".to_owned()),
        ("email", "gone@shop.example".to_owned()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_answer_outside_the_document() {
    let server = TestServer::start(&[]).await;
    let params = seed(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("schemathesis.toml");
    let mut toml = String::from("[parameters]\n");
    for (name, value) in &params {
        toml.push_str(&format!("\"path.{name}\" = \"{value}\"\n"));
    }
    // The reader of a history page: a member of the seeded conversation.
    toml.push_str("\"query.user\" = \"alice\"\n");
    std::fs::write(&config, toml).unwrap();

    let examples = std::env::var("OPENAPI_TEST_EXAMPLES").unwrap_or_else(|_| "40".into());
    let seed = std::env::var("OPENAPI_TEST_SEED").unwrap_or_else(|_| "20261130".into());
    let started = Instant::now();
    // The CLI of the python3 that `scripts/test` installs it into.
    let out = Command::new("python3")
        .args(["-m", "schemathesis.cli", "--config-file"])
        .arg(&config)
        .arg("run")
        .arg(server.url("/v1/openapi.json"))
        .args(["--header", &format!("Authorization: Bearer {KEY}")])
        .args(["--max-examples", &examples, "--seed", &seed])
        // Examples, the coverage phase (boundaries, missing and wrong-typed values), random
        // fuzzing, and stateful sequences over the links schemathesis infers (a created
        // conversation's id used in the next calls).
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        // `positive_data_acceptance` is left out: the server validates more than JSON Schema
        // can say (email addresses, a closed set of kinds from the config, non-blank ids),
        // and answers such inputs with a documented 400.
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,\
             response_headers_conformance,response_schema_conformance,\
             negative_data_rejection,missing_required_header,unsupported_method,ignored_auth",
        ])
        // One worker: CPython 3.11 keeps the AST constructor's recursion depth per interpreter,
        // not per thread, and hypothesis parses sources (`ast.parse`) while it describes
        // strategies, so two worker threads can fail with "AST constructor recursion depth
        // mismatch" through no fault of the server.
        .args(["--generation-database", "none", "--workers", "1"])
        .args(["--request-timeout", "10", "--no-color"])
        // The live stream never ends: its own tests read it (live_delivery.rs).
        .args(["--exclude-path", STREAM_PATH])
        .current_dir(dir.path())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run schemathesis ({e}); `scripts/test` installs it (pip install schemathesis)")
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "schemathesis ran in {:.1}s:\n{text}",
        started.elapsed().as_secs_f64()
    );
    assert!(out.status.success(), "schemathesis failed:\n{text}");
    // Every documented operation but the document itself and the stream was tested.
    let tested = V1_ROUTES.len() - 2;
    assert!(
        text.contains(&format!("Tested: {tested}")),
        "expected {tested} operations tested:\n{text}"
    );
    assert!(!text.contains("failures"), "{text}");
}
