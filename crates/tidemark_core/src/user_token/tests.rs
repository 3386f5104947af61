use super::testing::{
    HS256_SECRET, claims, ed25519_key_spec, hs256_key_spec, sign_ed25519, sign_hs256,
};
use super::*;

fn tokens() -> UserTokens {
    UserTokens::new([
        (
            "shop".to_owned(),
            UserTokenKey::parse(&hs256_key_spec()).unwrap(),
        ),
        (
            "bazaar".to_owned(),
            UserTokenKey::parse(&ed25519_key_spec()).unwrap(),
        ),
    ])
}

#[test]
fn a_valid_token_yields_its_user_and_limits() {
    let t = tokens();
    let id = t
        .verify(&sign_hs256(&claims("shop", "alice", 600), HS256_SECRET))
        .unwrap();
    assert_eq!((id.tenant.as_str(), id.user.as_str()), ("shop", "alice"));
    assert_eq!(id.conversations, None);
    assert!(id.may_open("any"));

    let mut c = claims("bazaar", "bob", 600);
    c["conversations"] = serde_json::json!(["c1", "c2"]);
    c["aud"] = serde_json::json!(["bazaar"]);
    let id = t.verify(&sign_ed25519(&c)).unwrap();
    assert_eq!(id.user, "bob");
    assert!(id.may_open("c2"));
    assert!(!id.may_open("c3"));
    assert!(id.expires_at_s > jsonwebtoken::get_current_timestamp());
}

#[test]
fn expired_forged_and_foreign_tokens_are_refused() {
    let t = tokens();
    // Past the 60 s leeway.
    let expired = sign_hs256(&claims("shop", "alice", -120), HS256_SECRET);
    assert_eq!(t.verify(&expired), Err(TokenError::Expired));
    // Within it: still accepted.
    let late = sign_hs256(&claims("shop", "alice", -10), HS256_SECRET);
    assert_eq!(t.verify(&late).unwrap().user, "alice");

    let forged = sign_hs256(
        &claims("shop", "alice", 600),
        "another-secret-of-forty-bytes-0000000000",
    );
    assert_eq!(
        t.verify(&forged),
        Err(TokenError::BadSignature("shop".into()))
    );
    // Signed for the Ed25519 tenant, but claiming the HS256 one.
    let foreign = sign_ed25519(&claims("shop", "alice", 600));
    assert_eq!(
        t.verify(&foreign),
        Err(TokenError::WrongAlgorithm {
            expected: Algorithm::HS256
        })
    );
    // The HS256 tenant's secret used to sign a token for the Ed25519 tenant.
    let swapped = sign_hs256(&claims("bazaar", "alice", 600), HS256_SECRET);
    assert_eq!(
        t.verify(&swapped),
        Err(TokenError::WrongAlgorithm {
            expected: Algorithm::EdDSA
        })
    );
    let elsewhere = sign_hs256(&claims("market", "alice", 600), HS256_SECRET);
    assert_eq!(
        t.verify(&elsewhere),
        Err(TokenError::TenantWithoutKey("market".into()))
    );
    // A payload altered after signing.
    let good = sign_hs256(&claims("shop", "alice", 600), HS256_SECRET);
    let parts: Vec<&str> = good.split('.').collect();
    let other = sign_hs256(&claims("shop", "mallory", 600), HS256_SECRET);
    let other_payload = other.split('.').nth(1).unwrap();
    let tampered = format!("{}.{}.{}", parts[0], other_payload, parts[2]);
    assert_eq!(
        t.verify(&tampered),
        Err(TokenError::BadSignature("shop".into()))
    );
}

#[test]
fn malformed_tokens_and_claims_are_refused() {
    let t = tokens();
    assert_eq!(t.verify("a.b.c"), Err(TokenError::Malformed));
    assert_eq!(t.verify("not a token"), Err(TokenError::Malformed));
    let no_aud = sign_hs256(
        &serde_json::json!({"sub": "alice", "exp": 4_000_000_000u64}),
        HS256_SECRET,
    );
    assert_eq!(t.verify(&no_aud), Err(TokenError::NoTenant));
    let no_exp = sign_hs256(
        &serde_json::json!({"aud": "shop", "sub": "alice"}),
        HS256_SECRET,
    );
    assert_eq!(
        t.verify(&no_exp),
        Err(TokenError::BadClaims("`exp` is required".into()))
    );
    let no_sub = sign_hs256(
        &serde_json::json!({"aud": "shop", "exp": 4_000_000_000u64}),
        HS256_SECRET,
    );
    assert_eq!(
        t.verify(&no_sub),
        Err(TokenError::BadClaims("`sub` is required".into()))
    );
    for sub in ["", " alice", &"x".repeat(129), "al\u{0}ice", "al\tice"] {
        let mut c = claims("shop", "alice", 600);
        c["sub"] = serde_json::json!(sub);
        assert!(
            matches!(
                t.verify(&sign_hs256(&c, HS256_SECRET)),
                Err(TokenError::BadClaims(_))
            ),
            "{sub:?}"
        );
    }
    // A NumericDate with a fraction is a time like any other.
    let mut fractional = claims("shop", "alice", 600);
    fractional["exp"] = serde_json::json!(fractional["exp"].as_f64().unwrap() + 0.5);
    let id = t.verify(&sign_hs256(&fractional, HS256_SECRET)).unwrap();
    assert_eq!(id.expires_at_s, fractional["exp"].as_f64().unwrap() as u64);
    let mut early = claims("shop", "alice", 600);
    early["nbf"] = serde_json::json!(jsonwebtoken::get_current_timestamp() + 600);
    assert_eq!(
        t.verify(&sign_hs256(&early, HS256_SECRET)),
        Err(TokenError::NotYetValid)
    );
    let mut c = claims("shop", "alice", 600);
    c["conversations"] = serde_json::json!("c1");
    assert!(matches!(
        t.verify(&sign_hs256(&c, HS256_SECRET)),
        Err(TokenError::BadClaims(_))
    ));
}

#[test]
fn keys_are_checked_when_parsed() {
    assert_eq!(
        UserTokenKey::parse("secret").unwrap_err(),
        UserTokenKeyError::UnknownKind
    );
    assert_eq!(
        UserTokenKey::parse("hs256:short").unwrap_err(),
        UserTokenKeyError::ShortSecret(5)
    );
    // The identity point and all zeros are small-order points: weak.
    for weak in [
        "ed25519:AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ] {
        assert_eq!(
            UserTokenKey::parse(weak).unwrap_err(),
            UserTokenKeyError::WeakPublicKey,
            "{weak}"
        );
    }
    // y = 2 is not on the curve.
    for bad in [
        "ed25519:",
        "ed25519:!!!",
        "ed25519:AAAA",
        "ed25519:AgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ] {
        assert_eq!(
            UserTokenKey::parse(bad).unwrap_err(),
            UserTokenKeyError::BadPublicKey,
            "{bad}"
        );
    }
    assert_eq!(
        UserTokenKey::parse(&ed25519_key_spec())
            .unwrap()
            .algorithm(),
        Algorithm::EdDSA
    );
    // The secret never shows in a debug print.
    let debug = format!("{:?}", UserTokenKey::parse(&hs256_key_spec()).unwrap());
    assert!(!debug.contains(HS256_SECRET), "{debug}");
}
