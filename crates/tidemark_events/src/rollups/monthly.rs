//! `listing_monthly`: the month sums of `listing_daily`, kept by both backends
//! ([`super::SqliteRollups`], [`super::MysqlRollups`]) so that a year's report reads about 12
//! rows per listing and kind instead of about 366.
//!
//! - Writing: each `upsert_day` adds, in its own transaction, the difference between the day's
//!   new rows and its old ones to the month's rows ([`deltas`]); `days` counts the daily rows
//!   behind a month row, and a month row whose `days` falls to 0 is deleted — so the month
//!   table always equals the sums of the daily one.
//! - Reading: a period is [`split`] into the days before its first whole month, its whole
//!   months, and the days after its last whole month; the report sums month rows for the
//!   middle and, for each edge, either its daily rows or — when fewer of that month's days lie
//!   outside the period — the month row minus the daily rows outside (see `report_parts`).

use std::collections::BTreeMap;

use tidemark_core::day::Day;
use time::{Date, Month, OffsetDateTime};

use crate::rollups::DailyRow;

// A day and its month are dates, the same in every time zone: the UTC instants below only
// convert between `Day` and `time::Date`.
fn date(day: Day) -> Date {
    OffsetDateTime::from_unix_timestamp(day.utc_start_ms().div_euclid(1000))
        .map_or(Date::MIN, OffsetDateTime::date)
}

fn day_of(d: Date) -> Day {
    Day::of_utc_ms(d.midnight().assume_utc().unix_timestamp() * 1000)
}

/// `YYYY-MM` of `day`'s month.
pub(crate) fn month_name(day: Day) -> String {
    let d = date(day);
    format!("{:04}-{:02}", d.year(), u8::from(d.month()))
}

/// The first day of `day`'s month.
pub(crate) fn month_of(day: Day) -> Day {
    let d = date(day);
    Date::from_calendar_date(d.year(), d.month(), 1).map_or(day, day_of)
}

/// The first day of the month after the month starting `month`.
pub(crate) fn next_month(month: Day) -> Day {
    let d = date(month);
    let (y, m) = match d.month() {
        Month::December => (d.year() + 1, Month::January),
        m => (d.year(), m.next()),
    };
    Date::from_calendar_date(y, m, 1).map_or(month.plus(31), day_of)
}

/// A report period `from..=to` in parts (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Split {
    /// Days read from `listing_daily`, both ends included: before the first whole month…
    pub(crate) head: Option<(Day, Day)>,
    /// …whole months, `[first month, end)` by month start, read from `listing_monthly`…
    pub(crate) months: Option<(Day, Day)>,
    /// …and after the last whole month (daily again).
    pub(crate) tail: Option<(Day, Day)>,
}

/// Splits `from..=to` (see [`Split`]). An inverted period has no parts.
pub(crate) fn split(from: Day, to: Day) -> Split {
    let none = Split {
        head: None,
        months: None,
        tail: None,
    };
    if from > to {
        return none;
    }
    let first = if month_of(from) == from {
        from
    } else {
        next_month(month_of(from))
    };
    // The month start after the last whole month: to's month if to is not its last day.
    let end = if next_month(month_of(to)) == to.plus(1) {
        to.plus(1)
    } else {
        month_of(to)
    };
    if first >= end {
        return Split {
            head: Some((from, to)),
            ..none
        };
    }
    Split {
        head: (from < first).then(|| (from, first.plus(-1))),
        months: Some((first, end)),
        tail: (end <= to).then_some((end, to)),
    }
}

/// One change of a month row: `(listing_id, kind, Δtotal, Δuniques, Δdays)`.
pub(crate) type Delta = (i64, String, i64, i64, i64);

/// What replacing a day's `old` rows (`(listing_id, kind, total, uniques)`) by `new` changes in
/// its month's rows; keys that do not change are left out.
pub(crate) fn deltas<'a>(
    old: impl IntoIterator<Item = (i64, &'a str, u64, u64)>,
    new: &[DailyRow],
) -> Vec<Delta> {
    let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let mut m: BTreeMap<(i64, String), (i64, i64, i64)> = BTreeMap::new();
    for (l, k, t, u) in old {
        let e = m.entry((l, k.to_owned())).or_default();
        e.0 -= signed(t);
        e.1 -= signed(u);
        e.2 -= 1;
    }
    for r in new {
        let e = m.entry((r.listing_id, r.kind.clone())).or_default();
        e.0 += signed(r.total);
        e.1 += signed(r.uniques);
        e.2 += 1;
    }
    m.into_iter()
        .filter(|(_, d)| *d != (0, 0, 0))
        .map(|((l, k), (t, u, d))| (l, k, t, u, d))
        .collect()
}

/// Where a [`Part`] of a report reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// `listing_daily`, by `day`.
    Daily,
    /// `listing_monthly`, by `month` (the first day of the month).
    Monthly,
}

/// One part of a report: `sign` × the sums of `source` over `from..=to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Part {
    pub(crate) source: Source,
    pub(crate) from: Day,
    pub(crate) to: Day,
    /// 1 to add, -1 to subtract.
    pub(crate) sign: i8,
}

/// The parts of the report of `from..=to`: whole months from `listing_monthly`; each edge
/// month's days from `listing_daily` — or, when fewer days of that month lie outside the
/// period than inside it, the whole month minus those outside days (a report up to yesterday
/// then subtracts the few days of the current month still to come, usually none).
pub(crate) fn report_parts(from: Day, to: Day) -> Vec<Part> {
    let part = |source, from, to, sign| Part {
        source,
        from,
        to,
        sign,
    };
    let split = split(from, to);
    let mut parts = Vec::new();
    let whole = split.months.is_some();
    if let Some((a, b)) = split.head {
        let month = month_of(a);
        let outside = a.0 - month.0;
        if whole && outside < b.0 - a.0 + 1 {
            parts.push(part(Source::Monthly, month, month, 1));
            if outside > 0 {
                parts.push(part(Source::Daily, month, a.plus(-1), -1));
            }
        } else {
            parts.push(part(Source::Daily, a, b, 1));
        }
    }
    if let Some((a, end)) = split.months {
        parts.push(part(Source::Monthly, a, end.plus(-1), 1));
    }
    if let Some((a, b)) = split.tail {
        let last = next_month(a).plus(-1);
        let outside = last.0 - b.0;
        if outside < b.0 - a.0 + 1 {
            parts.push(part(Source::Monthly, a, a, 1));
            if outside > 0 {
                parts.push(part(Source::Daily, b.plus(1), last, -1));
            }
        } else {
            parts.push(part(Source::Daily, a, b, 1));
        }
    }
    parts
}

/// The parts whose sketches make the distinct visitors of `from..=to`
/// ([`crate::visitors`]): its edge days and its whole months, `(source, first, last)` with
/// months by their first days. Unlike [`report_parts`] nothing is subtracted: a sketch cannot
/// lose visitors.
pub(crate) fn visitor_parts(from: Day, to: Day) -> Vec<(Source, Day, Day)> {
    let split = split(from, to);
    let mut parts = Vec::new();
    if let Some((a, b)) = split.head {
        parts.push((Source::Daily, a, b));
    }
    if let Some((a, end)) = split.months {
        parts.push((Source::Monthly, a, month_of(end.plus(-1))));
    }
    if let Some((a, b)) = split.tail {
        parts.push((Source::Daily, a, b));
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Day {
        Day::parse(s).unwrap()
    }

    #[test]
    fn months() {
        assert_eq!(month_of(d("2025-02-17")), d("2025-02-01"));
        assert_eq!(next_month(d("2025-12-01")), d("2026-01-01"));
        assert_eq!(next_month(d("2024-02-01")), d("2024-03-01"));
    }

    #[test]
    fn periods_split_into_days_and_whole_months() {
        let s = split(d("2025-01-15"), d("2025-03-10"));
        assert_eq!(s.head, Some((d("2025-01-15"), d("2025-01-31"))));
        assert_eq!(s.months, Some((d("2025-02-01"), d("2025-03-01"))));
        assert_eq!(s.tail, Some((d("2025-03-01"), d("2025-03-10"))));
        let s = split(d("2025-02-01"), d("2025-02-28"));
        assert_eq!(
            (s.head, s.months, s.tail),
            (None, Some((d("2025-02-01"), d("2025-03-01"))), None)
        );
        let s = split(d("2025-02-03"), d("2025-02-20"));
        assert_eq!(
            (s.head, s.months, s.tail),
            (Some((d("2025-02-03"), d("2025-02-20"))), None, None)
        );
        let s = split(d("2025-01-31"), d("2025-02-01"));
        assert_eq!(s.months, None);
        assert_eq!(s.head, Some((d("2025-01-31"), d("2025-02-01"))));
        assert_eq!(split(d("2025-03-01"), d("2025-02-01")).head, None);
    }

    #[test]
    fn deltas_of_a_re_run() {
        let row = |l, k: &str, t, u| DailyRow {
            listing_id: l,
            kind: k.into(),
            total: t,
            uniques: u,
            visitors: Vec::new(),
        };
        let old = [(1, "view", 5, 3), (2, "click", 1, 1)];
        let new = vec![row(1, "view", 6, 3), row(3, "view", 2, 2)];
        assert_eq!(
            deltas(old, &new),
            vec![
                (1, "view".into(), 1, 0, 0),
                (2, "click".into(), -1, -1, -1),
                (3, "view".into(), 2, 2, 1),
            ]
        );
        assert!(deltas(old, &[row(1, "view", 5, 3), row(2, "click", 1, 1)]).is_empty());
    }

    #[test]
    fn period_uniques_read_edge_days_and_whole_months_never_subtracting() {
        use Source::{Daily, Monthly};
        assert_eq!(
            visitor_parts(d("2024-01-15"), d("2024-03-10")),
            vec![
                (Daily, d("2024-01-15"), d("2024-01-31")),
                (Monthly, d("2024-02-01"), d("2024-02-01")),
                (Daily, d("2024-03-01"), d("2024-03-10")),
            ]
        );
        assert_eq!(
            visitor_parts(d("2025-11-01"), d("2026-10-31")),
            vec![(Monthly, d("2025-11-01"), d("2026-10-01"))]
        );
        assert_eq!(
            visitor_parts(d("2024-02-03"), d("2024-02-20")),
            vec![(Daily, d("2024-02-03"), d("2024-02-20"))]
        );
        assert!(visitor_parts(d("2024-02-03"), d("2024-02-01")).is_empty());
    }

    #[test]
    fn a_report_reads_months_and_the_fewer_edge_days() {
        use Source::{Daily, Monthly};
        let p = |source, from, to, sign| Part {
            source,
            from: d(from),
            to: d(to),
            sign,
        };
        // Up to yesterday: the current month whole, minus the day still to come.
        assert_eq!(
            report_parts(d("2025-11-29"), d("2026-11-29")),
            vec![
                p(Daily, "2025-11-29", "2025-11-30", 1),
                p(Monthly, "2025-12-01", "2026-10-31", 1),
                p(Monthly, "2026-11-01", "2026-11-01", 1),
                p(Daily, "2026-11-30", "2026-11-30", -1),
            ]
        );
        // From the 15th of January: the month minus its first 14 days.
        assert_eq!(
            report_parts(d("2024-01-15"), d("2024-03-10")),
            vec![
                p(Monthly, "2024-01-01", "2024-01-01", 1),
                p(Daily, "2024-01-01", "2024-01-14", -1),
                p(Monthly, "2024-02-01", "2024-02-29", 1),
                p(Daily, "2024-03-01", "2024-03-10", 1),
            ]
        );
        // Within one month: days only.
        assert_eq!(
            report_parts(d("2024-02-03"), d("2024-02-20")),
            vec![p(Daily, "2024-02-03", "2024-02-20", 1)]
        );
        assert!(report_parts(d("2024-02-03"), d("2024-02-01")).is_empty());
    }
}
