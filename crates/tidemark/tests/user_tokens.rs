//! Chat user tokens end to end: a user's app calls the chat routes with a JWT its marketplace
//! backend signed, acts only as that user, and reaches nothing else; every bad token is a 401.

mod common;

use common::{KEY, TestServer, call, call_as, client, create_conversation};
use reqwest::Method;
use serde_json::{Value, json};
use tidemark_core::user_token::testing::{
    HS256_SECRET, claims, ed25519_key_spec, hs256_key_spec, sign_ed25519, sign_hs256,
};

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or_default()
}

fn hs256(user: &str, exp_in_s: i64) -> String {
    sign_hs256(&claims("demo", user, exp_in_s), HS256_SECRET)
}

fn tenants() -> String {
    format!(
        r#"[{{name="demo",key="{KEY}",user_token_key="{}"}},{{name="bazaar",key="bazaar-key",user_token_key="{}"}},{{name="plain",key="plain-key"}}]"#,
        hs256_key_spec(),
        ed25519_key_spec()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_token_acts_only_as_its_user_on_chat_routes() {
    let s = TestServer::start(&[("TIDEMARK_TENANTS", &tenants())]).await;
    let c = client();
    let ab = create_conversation(&c, &s, &["alice", "bob"]).await;
    let cd = create_conversation(&c, &s, &["carol", "dave"]).await;
    let alice = hs256("alice", 600);
    let messages =
        |cid: &str, user: &str| s.url(&format!("/v1/conversations/{cid}/messages?user={user}"));
    let post = |cid: &str| s.url(&format!("/v1/conversations/{cid}/messages"));
    let msg = |sender: &str, id: &str| json!({"client_msg_id": id, "sender": sender, "body": "hi"});

    // As herself: send, read, mark read, list, create.
    let (st, v) = call_as(
        &c,
        &alice,
        Method::POST,
        &post(&ab),
        Some(msg("alice", "m1")),
    )
    .await;
    assert_eq!((st, v["conversation_seq"].as_u64()), (201, Some(1)), "{v}");
    let (st, v) = call_as(&c, &alice, Method::GET, &messages(&ab, "alice"), None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["messages"][0]["body"], "hi");
    let read = s.url(&format!("/v1/conversations/{ab}/read"));
    let (st, _) = call_as(
        &c,
        &alice,
        Method::PUT,
        &read,
        Some(json!({"user": "alice", "seq": 1})),
    )
    .await;
    assert_eq!(st, 204);
    let (st, v) = call_as(
        &c,
        &alice,
        Method::GET,
        &s.url("/v1/users/alice/conversations"),
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["conversations"][0]["conversation_id"], ab.as_str());
    assert_eq!(v["conversations"][0]["unread"], 0);
    let (st, v) = call_as(
        &c,
        &alice,
        Method::POST,
        &s.url("/v1/conversations"),
        Some(json!({"members": ["alice", "erin"]})),
    )
    .await;
    assert_eq!(st, 201, "{v}");

    // As anyone else: 403, and nothing is written.
    let (st, v) = call_as(&c, &alice, Method::POST, &post(&ab), Some(msg("bob", "m2"))).await;
    assert_eq!(st, 403, "{v}");
    assert!(message(&v).contains("acts for user \"alice\""), "{v}");
    let (st, _) = call_as(&c, &alice, Method::GET, &messages(&ab, "bob"), None).await;
    assert_eq!(st, 403);
    let (st, _) = call_as(
        &c,
        &alice,
        Method::PUT,
        &read,
        Some(json!({"user": "bob", "seq": 1})),
    )
    .await;
    assert_eq!(st, 403);
    let (st, _) = call_as(
        &c,
        &alice,
        Method::GET,
        &s.url("/v1/users/bob/conversations"),
        None,
    )
    .await;
    assert_eq!(st, 403);
    let (st, v) = call_as(
        &c,
        &alice,
        Method::POST,
        &s.url("/v1/conversations"),
        Some(json!({"members": ["bob", "erin"]})),
    )
    .await;
    assert_eq!(st, 403, "{v}");
    // Herself, in a conversation she is not a member of: membership refuses it.
    let (st, v) = call_as(&c, &alice, Method::GET, &messages(&cd, "alice"), None).await;
    assert_eq!(st, 403, "{v}");
    let (st, _) = call_as(
        &c,
        &alice,
        Method::POST,
        &post(&cd),
        Some(msg("alice", "m3")),
    )
    .await;
    assert_eq!(st, 403);
    // The tenant key still names anyone, and sees that only alice's message was stored.
    let (st, v) = call(&c, Method::GET, &messages(&ab, "bob"), None).await;
    assert_eq!(st, 200);
    assert_eq!(v["latest_seq"], 1, "{v}");
    let (st, v) = call(&c, Method::GET, &messages(&cd, "carol"), None).await;
    assert_eq!((st, v["latest_seq"].as_u64()), (200, Some(0)));

    // A token limited to one conversation opens only it, lists only it, and creates none.
    let mut limited = claims("demo", "alice", 600);
    limited["conversations"] = json!([ab]);
    let limited = sign_hs256(&limited, HS256_SECRET);
    let (st, _) = call_as(&c, &limited, Method::GET, &messages(&ab, "alice"), None).await;
    assert_eq!(st, 200);
    let (st, v) = call_as(
        &c,
        &limited,
        Method::GET,
        &s.url("/v1/users/alice/conversations"),
        None,
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(v["conversations"].as_array().unwrap().len(), 1, "{v}");
    let other = create_conversation(&c, &s, &["alice", "frank"]).await;
    let (st, v) = call_as(&c, &limited, Method::GET, &messages(&other, "alice"), None).await;
    assert_eq!(st, 403, "{v}");
    assert!(
        message(&v).contains("limited to its `conversations`"),
        "{v}"
    );
    let (st, _) = call_as(
        &c,
        &limited,
        Method::POST,
        &s.url("/v1/conversations"),
        Some(json!({"members": ["alice", "gina"]})),
    )
    .await;
    assert_eq!(st, 403);

    // A limited token's list names no other conversation, not even as a page cursor.
    let (st, v) = call_as(
        &c,
        &limited,
        Method::GET,
        &s.url("/v1/users/alice/conversations?limit=1"),
        None,
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(v["conversations"][0]["conversation_id"], ab.as_str(), "{v}");
    assert_eq!(v["next_after"], Value::Null, "{v}");

    // No conversation about a listing: its first message would count as a contact.
    let (st, v) = call_as(
        &c,
        &alice,
        Method::POST,
        &s.url("/v1/conversations"),
        Some(json!({"members": ["alice", "erin"], "listing_id": 7})),
    )
    .await;
    assert_eq!(st, 403, "{v}");
    // Its idempotency keys are its user's own: the tenant's and another user's never meet it.
    let keyed =
        |members: [&str; 2]| Some(json!({"members": members, "client_conversation_id": "k-1"}));
    let (st, v) = call(
        &c,
        Method::POST,
        &s.url("/v1/conversations"),
        keyed(["bob", "erin"]),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let tenants_conversation = v["conversation_id"].clone();
    let (st, v) = call_as(
        &c,
        &alice,
        Method::POST,
        &s.url("/v1/conversations"),
        keyed(["alice", "erin"]),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    assert_ne!(v["conversation_id"], tenants_conversation);
    let alices = v["conversation_id"].clone();
    let (st, v) = call_as(
        &c,
        &alice,
        Method::POST,
        &s.url("/v1/conversations"),
        keyed(["alice", "erin"]),
    )
    .await;
    assert_eq!(
        (st, &v["conversation_id"]),
        (200, &alices),
        "a retry finds it"
    );
    let bob = hs256("bob", 600);
    let (st, v) = call_as(
        &c,
        &bob,
        Method::POST,
        &s.url("/v1/conversations"),
        keyed(["bob", "erin"]),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    assert!(v["conversation_id"] != tenants_conversation && v["conversation_id"] != alices);

    // No other route: links, events and the analytics refuse a user token.
    for (method, path, body) in [
        (Method::POST, "/v1/events", Some(json!([]))),
        (Method::GET, "/v1/events/top", None),
        (Method::POST, "/v1/mailings", Some(json!({}))),
        (Method::POST, "/v1/suppressions", Some(json!({}))),
        (
            Method::GET,
            "/v1/accounts/1/report?from=2024-01-01&to=2024-01-02",
            None,
        ),
    ] {
        let (st, v) = call_as(&c, &alice, method, &s.url(path), body).await;
        assert_eq!(st, 403, "{path}: {v}");
        assert!(
            message(&v).contains("reaches only the chat routes"),
            "{path}: {v}"
        );
    }

    // An Ed25519 tenant's token: its own tenant's conversations only.
    let bazaar_key = |m: Method, url: String, body: Option<Value>| {
        c.request(m, url)
            .bearer_auth("bazaar-key")
            .json(&body.unwrap_or(Value::Null))
    };
    let resp = bazaar_key(
        Method::POST,
        s.url("/v1/conversations"),
        Some(json!({"members": ["alice", "bob"]})),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 201);
    let bz = resp.json::<Value>().await.unwrap()["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let bazaar_alice = sign_ed25519(&claims("bazaar", "alice", 600));
    let (st, v) = call_as(
        &c,
        &bazaar_alice,
        Method::POST,
        &post(&bz),
        Some(msg("alice", "b1")),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    // demo's conversation is not bazaar's: not found for it.
    let (st, _) = call_as(
        &c,
        &bazaar_alice,
        Method::GET,
        &messages(&ab, "alice"),
        None,
    )
    .await;
    assert_eq!(st, 404);
    s.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_get_401_with_a_json_body() {
    let s = TestServer::start(&[("TIDEMARK_TENANTS", &tenants())]).await;
    let c = client();
    let ab = create_conversation(&c, &s, &["alice", "bob"]).await;
    let url = s.url(&format!("/v1/conversations/{ab}/messages?user=alice"));
    let cases = [
        ("expired", hs256("alice", -120), "expired"),
        (
            "forged",
            sign_hs256(
                &claims("demo", "alice", 600),
                "a-guessed-secret-of-forty-bytes-00000000",
            ),
            "signature does not verify",
        ),
        (
            "another tenant's key",
            sign_hs256(&claims("bazaar", "alice", 600), HS256_SECRET),
            "must be signed with EdDSA",
        ),
        (
            "a tenant without user tokens",
            sign_hs256(&claims("plain", "alice", 600), HS256_SECRET),
            "accepts no user tokens",
        ),
        (
            "no tenant",
            sign_hs256(
                &json!({"sub": "alice", "exp": 4_000_000_000u64}),
                HS256_SECRET,
            ),
            "names no tenant",
        ),
        (
            "a number for a user",
            sign_hs256(
                &json!({"aud": "demo", "sub": 5, "exp": 4_000_000_000u64}),
                HS256_SECRET,
            ),
            "claims are invalid",
        ),
        (
            "no algorithm",
            "e30.e30.e30".to_owned(),
            "not a well-formed JWT",
        ),
        (
            "not valid yet",
            {
                let mut early = claims("demo", "alice", 7200);
                early["nbf"] = json!(early["exp"].as_i64().unwrap() - 3600);
                sign_hs256(&early, HS256_SECRET)
            },
            "not valid yet",
        ),
        ("garbage", "a.b.c".to_owned(), "not a well-formed JWT"),
        ("unknown key", "no-such-key".to_owned(), "unknown API key"),
    ];
    for (what, token, says) in cases {
        let resp = c.get(&url).bearer_auth(&token).send().await.unwrap();
        assert_eq!(
            resp.headers()["www-authenticate"],
            r#"Bearer realm="tidemark""#,
            "{what}"
        );
        let (st, v) = call_as(&c, &token, Method::GET, &url, None).await;
        assert_eq!(st, 401, "{what}: {v}");
        assert_eq!(v["error"]["code"], "unauthorized", "{what}: {v}");
        assert!(message(&v).contains(says), "{what}: {v}");
    }
    s.cleanup().await;
}

#[test]
fn an_unusable_user_token_key_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    for (key, says) in [
        ("hs256:short", "at least 32 bytes"),
        ("ed25519:AAAA", "32-byte public key"),
        ("rsa:whatever", "`hs256:<secret>` or `ed25519:"),
        (
            "ed25519:AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "weak (small-order) point",
        ),
    ] {
        let env = [(
            "TIDEMARK_TENANTS".to_owned(),
            format!(r#"[{{name="demo",key="{KEY}",user_token_key="{key}"}}]"#),
        )];
        let stderr = TestServer::refused_start(dir.path(), &env);
        assert!(
            stderr.contains("tenant \"demo\"") && stderr.contains(says),
            "{key}: {stderr}"
        );
    }
}

#[test]
fn a_tenant_listed_twice_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let env = [(
        "TIDEMARK_TENANTS".to_owned(),
        format!(r#"[{{name="demo",key="{KEY}"}},{{name="demo",key="another-key"}}]"#),
    )];
    let stderr = TestServer::refused_start(dir.path(), &env);
    assert!(
        stderr.contains("tenant \"demo\" is listed twice"),
        "{stderr}"
    );
}
