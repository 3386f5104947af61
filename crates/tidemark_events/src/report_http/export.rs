//! Streamed exports of the summary tier: an account's report as CSV, and its month sums as
//! JSON or CSV (seed 002: "the dashboard and the invoices read that summary").
//!
//! An export walks the account's listings a page of [`EXPORT_PAGE`] at a time
//! ([`RollupStore::account_listings`]) and sends each page's rows as soon as they are read,
//! so neither the server nor the summary store holds a whole account at once. The first page
//! is read before the answer starts: a store that cannot be read gets its error status and a
//! JSON body, as every route does. A store failure on a later page ends the body early (the
//! chunked transfer is cut, so a client sees a failed download, never a short file taken as
//! whole).

use std::ops::RangeInclusive;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use tidemark_core::day::Day;
use tidemark_core::http::ApiError;
use tidemark_core::store::StoreError;

use super::{AnalyticsHttp, report_rows, store_error};
use crate::rollups::RollupStore;

/// Listings per page of an export.
pub(super) const EXPORT_PAGE: usize = 500;

/// The answer's format (`?format=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    /// `application/json` (the default).
    Json,
    /// `text/csv`, with a header row; a download (`Content-Disposition: attachment`).
    Csv,
}

impl Format {
    /// `json` (or absent) or `csv`; anything else is a 400.
    pub(super) fn parse(s: Option<&str>) -> Result<Self, ApiError> {
        match s {
            None | Some("json") => Ok(Format::Json),
            Some("csv") => Ok(Format::Csv),
            Some(other) => Err(ApiError::bad_request(format!(
                "`format` must be json or csv, got {other:?}"
            ))),
        }
    }
}

/// What is exported: the rows of the account's listings in a range of listing ids.
#[derive(Debug, Clone)]
pub(super) enum Export {
    /// Sums over a period of days ([`RollupStore::report_range`]), with the distinct visitors
    /// of the period if asked ([`RollupStore::period_uniques`]).
    Report {
        from: Day,
        to: Day,
        uniques_period: bool,
    },
    /// Month sums over months, first days ([`RollupStore::months_range`]).
    Months { from: Day, to: Day },
}

/// One export's request.
#[derive(Debug, Clone)]
pub(super) struct Request {
    pub(super) tenant: String,
    pub(super) account_id: i64,
    pub(super) kind: Option<String>,
    pub(super) export: Export,
    pub(super) format: Format,
    /// The download's file name (CSV), e.g. `account-7-2026-01-01-2026-12-31.csv`.
    pub(super) file_name: String,
    /// The JSON answer's fields before `"rows"`, e.g. `{"account_id":7,"from":…,"to":…`.
    pub(super) json_head: String,
}

impl Export {
    /// The CSV header row, sent first even when no row follows.
    fn csv_header(&self) -> &'static str {
        match self {
            Export::Report {
                uniques_period: true,
                ..
            } => "listing_id,kind,total,uniques_daily_sum,uniques_period\n",
            Export::Report { .. } => "listing_id,kind,total,uniques_daily_sum\n",
            Export::Months { .. } => "listing_id,month,kind,total,uniques_daily_sum\n",
        }
    }

    /// The rows of the listings in `listings`, each encoded by `encode`.
    async fn page(
        &self,
        s: &AnalyticsHttp,
        store: &dyn RollupStore,
        r: &Request,
        listings: RangeInclusive<i64>,
        encode: &mut Encoder,
    ) -> Result<Bytes, StoreError> {
        let kind = r.kind.as_deref();
        match *self {
            Export::Report {
                from,
                to,
                uniques_period,
            } => {
                let rows = report_rows(
                    store,
                    &r.tenant,
                    r.account_id,
                    (from, to),
                    kind,
                    listings,
                    uniques_period,
                )
                .await?;
                s.note_read(rows.iter().map(|r| r.kind.as_str()), "export");
                Ok(encode.rows(&rows))
            }
            Export::Months { from, to } => {
                let rows = store
                    .months_range(&r.tenant, r.account_id, from, to, kind, listings)
                    .await?;
                s.note_read(rows.iter().map(|r| r.kind.as_str()), "export");
                Ok(encode.rows(&rows))
            }
        }
    }
}

/// Encodes pages of rows: CSV rows (the header is sent before, [`Export::csv_header`]), or the
/// elements of a JSON array.
#[derive(Debug)]
struct Encoder {
    format: Format,
    /// No row written yet (JSON: no comma before the next row).
    first: bool,
}

impl Encoder {
    fn rows<R: Serialize>(&mut self, rows: &[R]) -> Bytes {
        let mut out = Vec::new();
        match self.format {
            Format::Csv => {
                let mut w = csv::WriterBuilder::new()
                    .has_headers(false)
                    .from_writer(&mut out);
                for row in rows {
                    // Rows of numbers and kind names (a closed set of identifiers): always
                    // serialisable.
                    let _ = w.serialize(row);
                }
                let _ = w.flush();
            }
            Format::Json => {
                for row in rows {
                    if !std::mem::replace(&mut self.first, false) {
                        out.push(b',');
                    }
                    let _ = serde_json::to_writer(&mut out, row);
                }
            }
        }
        Bytes::from(out)
    }
}

/// Answers `r`, streamed page by page (see the module docs).
pub(super) async fn stream(s: Arc<AnalyticsHttp>, r: Request) -> Result<Response, ApiError> {
    let (format, file_name) = (r.format, r.file_name.clone());
    let mut head = Vec::new();
    match format {
        Format::Json => {
            head.extend_from_slice(r.json_head.as_bytes());
            head.extend_from_slice(b",\"rows\":[");
        }
        Format::Csv => head.extend_from_slice(r.export.csv_header().as_bytes()),
    }
    let encode = Encoder {
        format,
        first: true,
    };
    // Each page: the next listings of the account (ids above the last page's), their rows.
    let mut pages = Box::pin(futures::stream::try_unfold(
        (-1, false, encode, s, r),
        |(after, done, mut encode, s, r)| async move {
            if done {
                return Ok::<_, StoreError>(None);
            }
            let store = s.rollups.rollups();
            let ids = store
                .account_listings(&r.tenant, r.account_id, after, EXPORT_PAGE)
                .await?;
            let Some(&last) = ids.last() else {
                return Ok(None);
            };
            let bytes = r
                .export
                .page(&s, store.as_ref(), &r, after + 1..=last, &mut encode)
                .await?;
            let done = ids.len() < EXPORT_PAGE;
            Ok(Some((bytes, (last, done, encode, s, r))))
        },
    ));
    // The first page before answering, so a store error gets its status.
    if let Some(first) = pages.try_next().await.map_err(store_error)? {
        head.extend_from_slice(&first);
    }
    let rest = pages.inspect_err(
        |e| tracing::warn!(error = %e, "an export ended early: the summary store failed"),
    );
    let tail =
        futures::stream::iter((format == Format::Json).then(|| Ok(Bytes::from_static(b"]}"))));
    let body = futures::stream::iter([Ok(Bytes::from(head))])
        .chain(rest)
        .chain(tail);
    let mut resp = Body::from_stream(body).into_response();
    let h = resp.headers_mut();
    match format {
        Format::Json => {
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        Format::Csv => {
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/csv; charset=utf-8"),
            );
            if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{file_name}\"")) {
                h.insert(header::CONTENT_DISPOSITION, v);
            }
        }
    }
    Ok(resp)
}
