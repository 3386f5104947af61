//! Period uniques: distinct visitors over any period, from mergeable sketches.
//!
//! A day's `uniques` counts each visitor once per day, so summing days counts a visitor of two
//! days twice (the report calls that sum `uniques_daily_sum`). Distinct visitors of a month or
//! a year need a sketch that can be merged: every `(listing_id, day, kind)` row of
//! `listing_daily` keeps a HyperLogLog of its visitors beside it (Apache DataSketches' HLL,
//! `lg_k` [`LG_K`], stored in DataSketches' compact binary form, which its Java, C++ and Python
//! libraries read too), and every month row of `listing_monthly` keeps the union of its days'.
//!
//! - **Visitor**: the same key as the day's `uniques`, a `(session_id, page_url)`; events
//!   without a session are no visitor ([`visitor_hash`], [`coupon`]).
//! - **Accuracy**: up to 1,536 visitors a sketch holds each visitor's 32-bit coupon, so counts
//!   are exact up to coupon collisions; above, the relative standard error is about
//!   1.04 / √2¹⁴ ≈ 0.8 % (tested within 2 % from 2,000 to 60,000 visitors, on one day and on
//!   unions of days). A day's coupons go in in the order its visitors were first seen: the
//!   sketch's running estimate, which a one-day period answers with, assumes an order that has
//!   nothing to do with the coupons' hashes.
//! - **Months**: a month's sketch is the union of every sketch its days have had
//!   ([`month_after`]). A day's visitors only grow (the raw tier is append-only and a re-run
//!   reads the whole day again), so that is the union of its days' current sketches.
//! - **Unknown**: days rolled up before sketches were kept have none; a period that needs one
//!   of them answers `null` rather than a number too low ([`PeriodUnion`]), and so does a month
//!   that counted such a day.
//! - **Reading**: a period is read as its edge days and its whole months (`monthly::split`),
//!   never as a month minus days: sketches can be merged, not subtracted.

use std::collections::BTreeMap;
use std::hash::Hasher;

use datasketches::hash::value::raw_bytes;
use datasketches::hll::{Coupon, HllSketch, HllType, HllUnion};
use tidemark_core::store::{ErrorKind, StoreError};
use twox_hash::XxHash64;

/// `log2` of the sketches' registers: 16,384 registers, at most about 8 KiB stored.
pub const LG_K: u8 = 14;

/// 4 bits per register: the smallest of DataSketches' three forms, with the same estimates.
const HLL_TYPE: HllType = HllType::Hll4;

/// One visitor's 32-bit hash: XXH64 (seed 0) of its key, the low 32 bits. The key is
/// `session_id` and `page_url` as UTF-8, framed so that no two different pairs share one: the
/// session's length (`u32`, little endian), the session, then `1` and the page, or `0` without
/// one. The rollup takes it while it reads the event, where the strings are at hand, and
/// keeps it with the visit; 32 bits are as many as a sketch's coupon holds.
pub fn visitor_hash(session: &str, page: Option<&str>) -> u32 {
    let mut h = XxHash64::with_seed(0);
    let len = u32::try_from(session.len()).unwrap_or(u32::MAX);
    h.write(&len.to_le_bytes());
    h.write(session.as_bytes());
    match page {
        Some(p) => {
            h.write(&[1]);
            h.write(p.as_bytes());
        }
        None => h.write(&[0]),
    }
    h.finish() as u32
}

/// The sketch's coupon of a visitor hash ([`visitor_hash`]): DataSketches' own hash of its four
/// bytes, little endian.
pub fn coupon(visitor: u32) -> Coupon {
    Coupon::from_value(raw_bytes::from_slice(&visitor.to_le_bytes()))
}

/// The visitors of one `(listing_id, day, kind)` while a day is rolled up.
#[derive(Debug)]
pub struct Visitors(HllSketch);

impl Default for Visitors {
    fn default() -> Self {
        Self(HllSketch::new(LG_K, HLL_TYPE).expect("LG_K is within DataSketches' 4..=21"))
    }
}

impl Visitors {
    /// Adds one visitor ([`coupon`]); a visitor added twice counts once.
    pub fn add(&mut self, visitor: Coupon) {
        self.0.update_with_coupon(visitor);
    }

    /// The sketch in DataSketches' compact form: 8 bytes when empty, 4 more per visitor while
    /// small, about 8 KiB at most.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.0.serialize()
    }
}

fn read(bytes: &[u8]) -> Result<HllSketch, StoreError> {
    HllSketch::deserialize(bytes).map_err(|e| {
        StoreError::new(ErrorKind::Corrupt, "sketch", e.to_string())
            .with_context("a stored visitor sketch cannot be read")
    })
}

/// A month row's sketch after one of its days gets the sketch `day`: `month` is the month row
/// as it was, `(days, sketch)` — `days` the daily rows it counted, `sketch` its own — or
/// `None` if there was none. A month that counted days without knowing their visitors stays
/// unknown (`None`); otherwise the union of its sketch and `day`.
///
/// # Errors
/// [`ErrorKind::Corrupt`] for a stored sketch that cannot be read.
pub fn month_after(
    month: Option<(i64, Option<&[u8]>)>,
    day: &[u8],
) -> Result<Option<Vec<u8>>, StoreError> {
    let old = match month {
        None => return Ok(Some(day.to_vec())),
        Some((days, _)) if days <= 0 => return Ok(Some(day.to_vec())),
        Some((_, None)) => return Ok(None),
        Some((_, Some(old))) => old,
    };
    let mut union = HllUnion::new(LG_K).expect("LG_K is within DataSketches' 4..=21");
    union.update(&read(old)?);
    union.update(&read(day)?);
    Ok(Some(union.to_sketch(HLL_TYPE).serialize()))
}

/// The distinct visitors of one listing and kind over a period: the union of the sketches of
/// its parts (days and whole months).
#[derive(Debug)]
pub struct PeriodUnion {
    union: HllUnion,
    unknown: bool,
}

impl Default for PeriodUnion {
    fn default() -> Self {
        Self {
            union: HllUnion::new(LG_K).expect("LG_K is within DataSketches' 4..=21"),
            unknown: false,
        }
    }
}

impl PeriodUnion {
    /// Adds one part's sketch; `None` is a part without one, which makes the period unknown.
    ///
    /// # Errors
    /// [`ErrorKind::Corrupt`] for a sketch that cannot be read.
    pub fn add(&mut self, sketch: Option<&[u8]>) -> Result<(), StoreError> {
        match sketch {
            Some(bytes) if !self.unknown => self.union.update(&read(bytes)?),
            Some(_) => {}
            None => self.unknown = true,
        }
        Ok(())
    }

    /// The estimate, rounded; `None` when a part had no sketch.
    pub fn estimate(&self) -> Option<u64> {
        (!self.unknown).then(|| self.union.estimate().round() as u64)
    }
}

/// Per `(listing_id, kind)`, the union of the sketches a period's parts read: what a backend
/// feeds row by row while it reads (`RollupStore::period_uniques`).
#[derive(Debug, Default)]
pub struct PeriodUnions(BTreeMap<(i64, String), PeriodUnion>);

impl PeriodUnions {
    /// Adds one stored row's sketch (`None`: a row stored without one).
    ///
    /// # Errors
    /// [`ErrorKind::Corrupt`] for a sketch that cannot be read.
    pub fn add(
        &mut self,
        listing_id: i64,
        kind: String,
        sketch: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        self.0.entry((listing_id, kind)).or_default().add(sketch)
    }

    /// `(listing_id, kind, estimate)` per key, ordered by listing and kind.
    pub fn estimates(self) -> Vec<(i64, String, Option<u64>)> {
        self.0
            .into_iter()
            .map(|((l, k), u)| (l, k, u.estimate()))
            .collect()
    }
}

#[cfg(test)]
mod tests;
