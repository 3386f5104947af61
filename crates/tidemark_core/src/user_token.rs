//! Chat user tokens: JWTs (RFC 7519) that a marketplace backend signs for one of its users, so
//! the user's app can call the chat API directly without the tenant's API key.
//!
//! A tenant that accepts them configures a verification key ([`UserTokenKey`]). A token:
//! - is signed with HS256 (a shared secret) or EdDSA (Ed25519; Tidemark holds only the public
//!   key) — the algorithm is the key's, never the token header's choice;
//! - names its tenant in `aud`, its user in `sub`, and expires at `exp` (Unix seconds; all
//!   three required); it is refused before `nbf` if it has one; 60 s of leeway on both for
//!   clocks that differ;
//! - may limit itself to some conversations (`conversations`: an array of conversation ids).
//!
//! [`UserTokens::verify`] checks all of it and yields the [`UserIdentity`] the request then
//! acts as; every failure is a [`TokenError`], which the HTTP layer answers with 401.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use jsonwebtoken::errors::ErrorKind as JwtErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

/// Clock difference tolerated on `exp`, in seconds (the JWT library's default).
pub const LEEWAY_S: u64 = 60;

/// Shortest HS256 secret accepted, in bytes: the hash's own size (RFC 7518 §3.2).
pub const MIN_HS256_SECRET_BYTES: usize = 32;

/// A tenant's user-token verification key, from `user_token_key` in its `[[tenants]]` entry:
/// - `hs256:<secret>`: the shared secret itself, at least 32 bytes;
/// - `ed25519:<x>`: the Ed25519 public key, its 32 bytes in unpadded base64url (a JWK's `x`).
#[derive(Clone)]
pub struct UserTokenKey {
    algorithm: Algorithm,
    key: DecodingKey,
}

impl fmt::Debug for UserTokenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secret.
        f.debug_struct("UserTokenKey")
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

/// Why a `user_token_key` could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserTokenKeyError {
    /// Neither `hs256:` nor `ed25519:`.
    #[error("a user_token_key is `hs256:<secret>` or `ed25519:<public key, base64url>`")]
    UnknownKind,
    /// An HS256 secret shorter than [`MIN_HS256_SECRET_BYTES`].
    #[error(
        "an hs256 user_token_key needs a secret of at least {MIN_HS256_SECRET_BYTES} bytes; got {0}"
    )]
    ShortSecret(usize),
    /// Not 32 bytes of base64url, or not a point of the curve.
    #[error("an ed25519 user_token_key is a 32-byte public key in unpadded base64url (a JWK's x)")]
    BadPublicKey,
    /// A point of small order, for which anyone can make signatures that verify.
    #[error(
        "this ed25519 user_token_key is a weak (small-order) point that accepts forged signatures; use a real public key"
    )]
    WeakPublicKey,
}

impl UserTokenKey {
    /// Parses a `user_token_key` value (see the type).
    pub fn parse(spec: &str) -> Result<Self, UserTokenKeyError> {
        if let Some(secret) = spec.strip_prefix("hs256:") {
            if secret.len() < MIN_HS256_SECRET_BYTES {
                return Err(UserTokenKeyError::ShortSecret(secret.len()));
            }
            return Ok(Self {
                algorithm: Algorithm::HS256,
                key: DecodingKey::from_secret(secret.as_bytes()),
            });
        }
        if let Some(x) = spec.strip_prefix("ed25519:") {
            let key =
                DecodingKey::from_ed_components(x).map_err(|_| UserTokenKeyError::BadPublicKey)?;
            let bytes: &[u8; 32] = key
                .as_bytes()
                .try_into()
                .map_err(|_| UserTokenKeyError::BadPublicKey)?;
            let point = ed25519_dalek::VerifyingKey::from_bytes(bytes)
                .map_err(|_| UserTokenKeyError::BadPublicKey)?;
            // A small-order point (the identity, all zeros …) verifies signatures anyone can
            // make: such a key would accept forged tokens.
            if point.is_weak() {
                return Err(UserTokenKeyError::WeakPublicKey);
            }
            return Ok(Self {
                algorithm: Algorithm::EdDSA,
                key,
            });
        }
        Err(UserTokenKeyError::UnknownKind)
    }

    /// The one algorithm tokens for this key must be signed with.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

/// Who a verified user token acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserIdentity {
    /// The tenant (`aud`).
    pub tenant: String,
    /// The user (`sub`): the only identity the request may act as.
    pub user: String,
    /// The conversations the token is limited to (`conversations`); `None`: all of the
    /// user's.
    pub conversations: Option<BTreeSet<String>>,
    /// When the token expires (`exp`), Unix seconds.
    pub expires_at_s: u64,
}

impl UserIdentity {
    /// Whether the token may open conversation `cid` (membership is checked apart, by chat).
    pub fn may_open(&self, cid: &str) -> bool {
        self.conversations.as_ref().is_none_or(|c| c.contains(cid))
    }
}

/// Why a user token was refused (answered 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not three base64url parts with a JSON header and claims.
    #[error("the user token is not a well-formed JWT")]
    Malformed,
    /// No `aud`, or not one string.
    #[error("the user token names no tenant: `aud` must be the tenant's name")]
    NoTenant,
    /// `aud` names a tenant that is unknown or accepts no user tokens.
    #[error("tenant {0:?} accepts no user tokens")]
    TenantWithoutKey(String),
    /// Signed with another algorithm than the tenant's key.
    #[error("the user token must be signed with {expected:?}")]
    WrongAlgorithm {
        /// The tenant key's algorithm.
        expected: Algorithm,
    },
    /// The signature does not verify with the tenant's key.
    #[error("the user token's signature does not verify with tenant {0:?}'s key")]
    BadSignature(String),
    /// `exp` is past (beyond the leeway).
    #[error("the user token has expired")]
    Expired,
    /// `nbf` is ahead (beyond the leeway).
    #[error("the user token is not valid yet (`nbf`)")]
    NotYetValid,
    /// A required claim is missing or of the wrong type.
    #[error("the user token's claims are invalid: {0}")]
    BadClaims(String),
}

/// The claims Tidemark reads; others are ignored.
#[derive(Debug, Deserialize)]
struct Claims {
    // Optional here so that a missing claim is named (the library checks presence apart).
    sub: Option<String>,
    // A NumericDate may have a fraction (RFC 7519 §2).
    exp: Option<f64>,
    #[serde(default)]
    conversations: Option<Vec<String>>,
}

/// Only `aud`, read before the signature is checked to find the tenant's key.
#[derive(Debug, Deserialize)]
struct Audience {
    aud: Option<serde_json::Value>,
}

/// The verification keys of the tenants that accept user tokens.
#[derive(Debug, Clone, Default)]
pub struct UserTokens {
    by_tenant: HashMap<String, UserTokenKey>,
}

impl UserTokens {
    /// Keys by tenant name.
    pub fn new<I: IntoIterator<Item = (String, UserTokenKey)>>(keys: I) -> Self {
        Self {
            by_tenant: keys.into_iter().collect(),
        }
    }

    /// Whether no tenant accepts user tokens.
    pub fn is_empty(&self) -> bool {
        self.by_tenant.is_empty()
    }

    /// Whether `credential` has the shape of a JWT (three dot-separated parts), to tell a user
    /// token from an unknown API key.
    pub fn looks_like_token(credential: &str) -> bool {
        credential.split('.').count() == 3
    }

    /// Verifies `token` at the current time: tenant (`aud`), algorithm, signature, `exp`, and
    /// the claims' shapes (`sub` not blank, at most 128 bytes).
    pub fn verify(&self, token: &str) -> Result<UserIdentity, TokenError> {
        let peek = jsonwebtoken::dangerous::insecure_decode::<Audience>(token)
            .map_err(|_| TokenError::Malformed)?;
        let tenant = match peek.claims.aud {
            Some(serde_json::Value::String(t)) => t,
            Some(serde_json::Value::Array(a)) if a.len() == 1 => match &a[0] {
                serde_json::Value::String(t) => t.clone(),
                _ => return Err(TokenError::NoTenant),
            },
            _ => return Err(TokenError::NoTenant),
        };
        let Some(key) = self.by_tenant.get(&tenant) else {
            return Err(TokenError::TenantWithoutKey(tenant));
        };
        let mut validation = Validation::new(key.algorithm);
        validation.leeway = LEEWAY_S;
        validation.validate_nbf = true;
        validation.set_audience(&[&tenant]);
        validation.set_required_spec_claims(&["exp", "sub", "aud"]);
        let data = jsonwebtoken::decode::<Claims>(token, &key.key, &validation).map_err(|e| {
            match e.kind() {
                JwtErrorKind::InvalidAlgorithm => TokenError::WrongAlgorithm {
                    expected: key.algorithm,
                },
                JwtErrorKind::InvalidSignature => TokenError::BadSignature(tenant.clone()),
                JwtErrorKind::ExpiredSignature => TokenError::Expired,
                JwtErrorKind::ImmatureSignature => TokenError::NotYetValid,
                JwtErrorKind::MissingRequiredClaim(c) => {
                    TokenError::BadClaims(format!("`{c}` is required"))
                }
                JwtErrorKind::InvalidClaimFormat(c) => {
                    TokenError::BadClaims(format!("`{c}` has the wrong type"))
                }
                JwtErrorKind::Json(_) => TokenError::BadClaims(
                    "`sub` must be a string, `exp` a number of seconds and `conversations` an array of strings"
                        .into(),
                ),
                _ => TokenError::Malformed,
            }
        })?;
        let Claims {
            sub,
            exp,
            conversations,
        } = data.claims;
        let (Some(sub), Some(exp)) = (sub, exp) else {
            return Err(TokenError::BadClaims("`sub` and `exp` are required".into()));
        };
        if sub.trim().is_empty()
            || sub.trim() != sub
            || sub.len() > 128
            || sub.chars().any(char::is_control)
        {
            return Err(TokenError::BadClaims(
                "`sub` must be a user id: not blank, at most 128 bytes, no control characters, \
                 no whitespace at either end"
                    .into(),
            ));
        }
        Ok(UserIdentity {
            tenant,
            user: sub,
            conversations: conversations.map(|c| c.into_iter().collect()),
            // Whole seconds; `as` saturates (a negative or NaN time is long expired anyway).
            expires_at_s: exp as u64,
        })
    }
}

/// Tokens signed as a marketplace backend signs them, for tests and benchmarks.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};

    /// A 40-byte HS256 secret.
    pub const HS256_SECRET: &str = "tidemark-test-secret-of-forty-bytes-0001";

    /// `user_token_key` for [`HS256_SECRET`].
    pub fn hs256_key_spec() -> String {
        format!("hs256:{HS256_SECRET}")
    }

    /// The public key of RFC 8032's first Ed25519 test vector, unpadded base64url.
    pub const ED25519_PUBLIC_X: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";

    /// That vector's private key as PKCS #8 v1 DER (RFC 8410): the fixed prefix, then the seed.
    const ED25519_PKCS8_HEX: &str = "302e020100300506032b657004220420\
        9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";

    /// `user_token_key` for [`ED25519_PUBLIC_X`].
    pub fn ed25519_key_spec() -> String {
        format!("ed25519:{ED25519_PUBLIC_X}")
    }

    /// Claims for `user` of `tenant`, expiring `exp_in_s` seconds from now (negative: past).
    pub fn claims(tenant: &str, user: &str, exp_in_s: i64) -> serde_json::Value {
        let now = jsonwebtoken::get_current_timestamp() as i64;
        serde_json::json!({ "aud": tenant, "sub": user, "exp": now + exp_in_s })
    }

    /// `claims` signed with HS256 and `secret`.
    pub fn sign_hs256(claims: &serde_json::Value, secret: &str) -> String {
        let key = EncodingKey::from_secret(secret.as_bytes());
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &key).expect("sign")
    }

    /// `claims` signed with EdDSA and the test vector's private key.
    pub fn sign_ed25519(claims: &serde_json::Value) -> String {
        let der: Vec<u8> = (0..ED25519_PKCS8_HEX.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&ED25519_PKCS8_HEX[i..i + 2], 16).expect("hex"))
            .collect();
        let key = EncodingKey::from_ed_der(&der);
        jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), claims, &key).expect("sign")
    }
}

#[cfg(test)]
mod tests;
