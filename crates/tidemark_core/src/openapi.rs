//! OpenAPI pieces shared by every subsystem's routes.
//!
//! Each subsystem documents its own `/v1` operations (`utoipa::path`) with the answers that
//! are particular to them (201, 404 unknown conversation, 409 `raw_gone`, …); the answers every
//! operation has are added once, by [`V1Conventions`], to the merged document:
//!
//! - the bearer-key security requirement and its 401 answer;
//! - 400 (a path segment or query that does not parse, a value out of range) and 503 (a store
//!   could not be reached; nothing was acknowledged).
//!
//! An operation that declares its own security (the document itself, served without a key) is
//! left as it is. Operations with a JSON body list [`JsonBodyErrors`] (400/413/415/422 from the extractor).
//! Every error answer has the [`ErrorBody`] schema.

use std::collections::BTreeMap;

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{IntoResponses, Modify};

use crate::http::ErrorBody;

/// Name of the bearer-key security scheme in `components.securitySchemes`.
pub const BEARER: &str = "bearer";

/// An error answer with the shared [`ErrorBody`] schema.
pub fn error_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build()
}

/// The answers of a rejected JSON request body ([`crate::http::ApiJson`]): 400 not JSON,
/// 413 too large, 415 not `Content-Type: application/json`, 422 JSON of the wrong shape.
#[derive(Debug, Clone, Copy)]
pub struct JsonBodyErrors;

impl IntoResponses for JsonBodyErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        [
            (
                "400",
                "Bad request: the body is not JSON, or a value is invalid (`bad_request`)",
            ),
            ("413", "The body is too large (`payload_too_large`)"),
            (
                "415",
                "The body is not `Content-Type: application/json` (`unsupported_media_type`)",
            ),
            (
                "422",
                "The JSON does not have the documented shape: a missing or unknown field, a wrong type (`unprocessable_entity`)",
            ),
        ]
        .into_iter()
        .map(|(code, what)| (code.to_owned(), RefOr::T(error_response(what))))
        .collect()
    }
}

/// Adds what every `/v1` operation has in common to a merged document: the [`ErrorBody`]
/// schemas, the bearer security scheme, and to every `/v1` operation that does not declare its
/// own security the bearer requirement with its 401 answer, 400 and 503. Answers an operation
/// documents itself are kept as they are.
#[derive(Debug, Clone, Copy)]
pub struct V1Conventions;

#[derive(utoipa::OpenApi)]
#[openapi(components(schemas(ErrorBody)))]
struct ErrorSchemas;

impl Modify for V1Conventions {
    fn modify(&self, api: &mut OpenApi) {
        api.merge(<ErrorSchemas as utoipa::OpenApi>::openapi());
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API key from the `[[tenants]]` config: `Authorization: Bearer <key>`",
                    ))
                    .build(),
            ),
        );
        for (path, item) in api.paths.paths.iter_mut() {
            if !path.starts_with("/v1/") {
                continue;
            }
            let ops = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
                &mut item.head,
                &mut item.options,
                &mut item.trace,
            ];
            for op in ops.into_iter().flatten() {
                if op.security.is_some() {
                    // Declares its own security, e.g. the document itself: left as it is.
                    continue;
                }
                op.security = Some(vec![SecurityRequirement::new::<_, _, &str>(BEARER, [])]);
                let responses = &mut op.responses.responses;
                responses.entry("401".into()).or_insert_with(|| {
                    RefOr::T(error_response(
                        "No `Authorization: Bearer <key>` header, an unknown key, or an expired, forged or other tenant's user token (`unauthorized`)",
                    ))
                });
                responses.entry("400".into()).or_insert_with(|| {
                    RefOr::T(error_response(
                        "Bad request: a path segment or query parameter is invalid (`bad_request`)",
                    ))
                });
                responses.entry("503".into()).or_insert_with(|| {
                    RefOr::T(error_response(
                        "A store could not be reached; nothing was acknowledged, retry (`unavailable`)",
                    ))
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem};
    use utoipa::openapi::{OpenApiBuilder, PathsBuilder};

    #[test]
    fn common_answers_and_security_are_added_to_v1_operations_only() {
        let ok = || {
            OperationBuilder::new()
                .response("200", ResponseBuilder::new().description("ok").build())
                .response("400", error_response("own 400"))
        };
        let mut api = OpenApiBuilder::new()
            .paths(
                PathsBuilder::new()
                    .path("/v1/x", PathItem::new(HttpMethod::Get, ok()))
                    .path(
                        "/v1/open",
                        PathItem::new(HttpMethod::Get, ok().securities(Some([]))),
                    )
                    .path("/healthz", PathItem::new(HttpMethod::Get, ok())),
            )
            .build();
        V1Conventions.modify(&mut api);
        let v = serde_json::to_value(&api).unwrap();
        let x = &v["paths"]["/v1/x"]["get"];
        assert_eq!(x["security"], serde_json::json!([{ "bearer": [] }]));
        let codes: Vec<&str> = x["responses"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(codes, ["200", "400", "401", "503"]);
        assert_eq!(x["responses"]["400"]["description"], "own 400");
        let open = &v["paths"]["/v1/open"]["get"];
        let codes: Vec<&String> = open["responses"].as_object().unwrap().keys().collect();
        assert_eq!(codes, ["200", "400"], "{open}");
        assert_eq!(open["security"], serde_json::json!([]));
        assert!(v["paths"]["/healthz"]["get"]["responses"]["503"].is_null());
        assert_eq!(
            v["components"]["securitySchemes"]["bearer"]["scheme"],
            "bearer"
        );
        assert_eq!(
            v["components"]["schemas"]["ErrorBody"]["properties"]["error"]["$ref"],
            "#/components/schemas/ErrorDetail"
        );
        assert_eq!(
            v["components"]["schemas"]["ErrorDetail"]["required"],
            serde_json::json!(["code", "message"])
        );
    }
}
