//! The OpenAPI 3 document of every `/v1` route, served at `GET /v1/openapi.json` (without a
//! key). Each subsystem describes its own operations (`ChatApi`, `LinksApi`, `EventsApi`);
//! here they are merged, and [`V1Conventions`] adds what every operation has in common: the
//! bearer-key requirement with its 401, and the 400 and 503 answers.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use tidemark_core::http::NoQuery;
use tidemark_core::openapi::V1Conventions;
use utoipa::{Modify, OpenApi};

/// The path the document is served at.
pub const OPENAPI_PATH: &str = "/v1/openapi.json";

/// This document itself (served without a key).
#[derive(utoipa::OpenApi)]
#[openapi(paths(openapi_json), tags((name = "meta", description = "The API's own description")))]
struct MetaApi;

/// The OpenAPI 3 document of this API.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    tag = "meta",
    security(()),
    responses((status = 200, description = "This document", body = Object, content_type = "application/json"))
)]
#[allow(dead_code)] // documents the route `router` serves with the prebuilt document
async fn openapi_json() {}

/// The merged document: every `/v1` operation of chat, links and events, plus this document's
/// own route. `kinds` is the configured closed set of event kinds (`[events] kinds`): the
/// `kind` of an event and of a report filter is one of them.
pub fn document(kinds: &[String]) -> utoipa::openapi::OpenApi {
    let mut api = MetaApi::openapi();
    api.merge(tidemark_chat::http::ChatApi::openapi());
    api.merge(tidemark_links::http::LinksApi::openapi());
    api.merge(tidemark_events::EventsApi::openapi());
    api.info = utoipa::openapi::InfoBuilder::new()
        .title("Tidemark")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(
            "Chat, newsletter links and listing analytics of a marketplace. Every `/v1` route \
             but this document (`/v1/openapi.json`) needs `Authorization: Bearer <key>`; every \
             error answer is `{\"error\": {\"code\", \"message\"}}`.",
        ))
        .license(Some(utoipa::openapi::License::new("MIT")))
        .build();
    V1Conventions.modify(&mut api);
    add_user_token_scheme(&mut api);
    set_event_kinds(&mut api, kinds);
    add_analytics_owner_answer(&mut api);
    api
}

/// Name of the user-token security scheme in `components.securitySchemes`.
pub const USER_TOKEN: &str = "user_token";

/// The chat routes also take a user token ([`tidemark_core::user_token`]) in place of the
/// tenant key: a second, alternative security requirement on every `chat` operation.
fn add_user_token_scheme(api: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::security::{
        HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
    };
    api.components
        .get_or_insert_with(Default::default)
        .add_security_scheme(
            USER_TOKEN,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "A JWT the marketplace backend signed for one user, verified with the \
                         tenant's `user_token_key` (HS256 or EdDSA): `aud` the tenant, `sub` the \
                         user, `exp`, optionally `conversations`. Chat routes only; the user it \
                         names is the only one the request may act as (403 otherwise), and an \
                         expired, forged or other tenant's token gets 401.",
                    ))
                    .build(),
            ),
        );
    for (path, op) in operations_mut(api) {
        if path == OPENAPI_PATH {
            continue;
        }
        let chat = op
            .tags
            .as_ref()
            .is_some_and(|t| t.iter().any(|t| t == "chat"));
        if chat && let Some(security) = op.security.as_mut() {
            security.push(SecurityRequirement::new::<_, _, &str>(USER_TOKEN, []));
        } else if !chat {
            document_forbidden(op, "a user token: this route needs the tenant's API key");
        }
    }
}

/// The analytics routes answer 403 to a tenant that does not own the analytics
/// ([`crate::wiring::require_analytics_owner`]).
fn add_analytics_owner_answer(api: &mut utoipa::openapi::OpenApi) {
    const ANALYTICS: [&str; 4] = [
        "/v1/events",
        "/v1/listings",
        "/v1/accounts/",
        "/v1/rollups/",
    ];
    for (path, op) in operations_mut(api) {
        if ANALYTICS.iter().any(|p| path.starts_with(p)) {
            document_forbidden(op, "the key's tenant does not own this server's analytics");
        }
    }
}

/// Every operation of the document, with its path.
fn operations_mut(
    api: &mut utoipa::openapi::OpenApi,
) -> impl Iterator<Item = (&str, &mut utoipa::openapi::path::Operation)> {
    api.paths.paths.iter_mut().flat_map(|(path, item)| {
        [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
        ]
        .into_iter()
        .flatten()
        .map(move |op| (path.as_str(), op))
    })
}

/// Documents a 403 `forbidden` answer of `op` for `why`: a new answer, or one more reason of
/// the one it has.
fn document_forbidden(op: &mut utoipa::openapi::path::Operation, why: &str) {
    use std::collections::btree_map::Entry;
    use utoipa::openapi::RefOr;
    match op.responses.responses.entry("403".into()) {
        Entry::Vacant(v) => {
            let text = format!("Forbidden (`forbidden`): {why}");
            v.insert(RefOr::T(tidemark_core::openapi::error_response(&text)));
        }
        Entry::Occupied(mut o) => {
            if let RefOr::T(r) = o.get_mut() {
                r.description = format!("{}; or {why}", r.description);
            }
        }
    }
}

/// The configured kinds as the enum of an event's `kind` and of the report's `kind` filter.
fn set_event_kinds(api: &mut utoipa::openapi::OpenApi, kinds: &[String]) {
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
    let kind_schema = || {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(kinds.iter().cloned()))
            .build()
    };
    let event = api
        .components
        .as_mut()
        .and_then(|c| c.schemas.get_mut("EventJson"));
    if let Some(RefOr::T(Schema::Object(event))) = event
        && let Some(kind) = event.properties.get_mut("kind")
    {
        let description = match kind {
            RefOr::T(Schema::Object(o)) => o.description.clone(),
            _ => None,
        };
        let mut schema = kind_schema();
        schema.description = description;
        *kind = RefOr::T(Schema::Object(schema));
    }
    if let Some(item) = api.paths.paths.get_mut("/v1/accounts/{aid}/report")
        && let Some(op) = item.get.as_mut()
        && let Some(params) = op.parameters.as_mut()
        && let Some(kind) = params.iter_mut().find(|p| p.name == "kind")
    {
        kind.schema = Some(RefOr::T(Schema::Object(kind_schema())));
    }
}

/// `GET /v1/openapi.json`, the document rendered once, for the configured event `kinds`.
pub fn router(kinds: &[String]) -> Router {
    let body = document(kinds)
        .to_json()
        .expect("the OpenAPI document serializes");
    Router::new().route(
        OPENAPI_PATH,
        get(move |_: NoQuery| {
            let body = body.clone();
            async move { ([(header::CONTENT_TYPE, "application/json")], body).into_response() }
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_has_every_operation_with_its_answers() {
        let kinds = ["view".to_owned(), "click".to_owned()];
        let v = serde_json::to_value(document(&kinds)).unwrap();
        assert_eq!(
            v["components"]["schemas"]["EventJson"]["properties"]["kind"]["enum"],
            serde_json::json!(["view", "click"])
        );
        let report = &v["paths"]["/v1/accounts/{aid}/report"]["get"]["parameters"];
        let kind = report
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "kind")
            .unwrap();
        assert_eq!(kind["schema"]["enum"], serde_json::json!(["view", "click"]));
        assert_eq!(v["info"]["title"], "Tidemark");
        assert_eq!(v["info"]["version"], env!("CARGO_PKG_VERSION"));
        let send = &v["paths"]["/v1/conversations/{cid}/messages"]["post"];
        for code in [
            "200", "201", "400", "401", "403", "404", "413", "415", "422", "503",
        ] {
            assert!(send["responses"].get(code).is_some(), "{code}: {send}");
        }
        assert_eq!(
            send["security"],
            serde_json::json!([{ "bearer": [] }, { "user_token": [] }])
        );
        assert_eq!(
            v["components"]["securitySchemes"]["user_token"]["bearerFormat"],
            "JWT"
        );
        let ingest = &v["paths"]["/v1/events"]["post"];
        assert_eq!(ingest["security"], serde_json::json!([{ "bearer": [] }]));
        let mailing = &v["paths"]["/v1/mailings"]["post"];
        assert_eq!(
            mailing["responses"]["403"]["description"],
            "Forbidden (`forbidden`): a user token: this route needs the tenant's API key"
        );
        let forbidden = ingest["responses"]["403"]["description"].as_str().unwrap();
        assert!(
            forbidden.contains("user token") && forbidden.contains("does not own"),
            "{forbidden}"
        );
        let own = &v["paths"]["/v1/openapi.json"]["get"];
        assert_eq!(own["security"], serde_json::json!([{}]));
        assert!(own["responses"].get("401").is_none());
        let class = &v["components"]["schemas"]["MessageClass"]["enum"];
        assert_eq!(class, &serde_json::json!(["standard", "ephemeral24h"]));
        let limit = v["paths"]["/v1/conversations/{cid}/messages"]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "limit")
            .unwrap()
            .clone();
        assert_eq!(limit["in"], "query");
        assert_eq!(
            (&limit["schema"]["minimum"], &limit["schema"]["maximum"]),
            (&serde_json::json!(1), &serde_json::json!(200))
        );
        assert_eq!(
            v["components"]["schemas"]["SendMessage"]["properties"]["client_msg_id"]["description"]
                .as_str()
                .unwrap()
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>(),
            ["The", "client's", "idempotency"]
        );
    }
}
