use super::*;

fn sketch(visitors: impl IntoIterator<Item = (String, Option<String>)>) -> Vec<u8> {
    let mut v = Visitors::default();
    for (s, p) in visitors {
        v.add(coupon(visitor_hash(&s, p.as_deref())));
    }
    v.to_bytes()
}

fn estimate(parts: &[Option<&[u8]>]) -> Option<u64> {
    let mut u = PeriodUnion::default();
    for p in parts {
        u.add(*p).unwrap();
    }
    u.estimate()
}

fn people(range: std::ops::Range<u32>) -> impl Iterator<Item = (String, Option<String>)> {
    range.map(|i| (format!("s{i}"), Some("/item/1".to_owned())))
}

/// A visitor's hash is XXH64 of its framed key's bytes in one piece, and its coupon
/// DataSketches' hash of that: stored sketches stay comparable across builds.
#[test]
fn a_visitor_is_the_hash_of_its_framed_bytes() {
    use datasketches::hash::value::raw_bytes;
    let framed = |s: &str, p: Option<&str>| {
        let mut key = (s.len() as u32).to_le_bytes().to_vec();
        key.extend_from_slice(s.as_bytes());
        match p {
            Some(p) => {
                key.push(1);
                key.extend_from_slice(p.as_bytes());
            }
            None => key.push(0),
        }
        XxHash64::oneshot(0, &key) as u32
    };
    for (s, p) in [
        ("s1", Some("/item/48213")),
        ("a-session-id-longer-than-thirty-two-bytes-in-all", None),
        ("", Some("")),
    ] {
        assert_eq!(visitor_hash(s, p), framed(s, p));
    }
    assert_eq!(visitor_hash("s1", None), 0x210a_de50, "the stored format");
    assert_eq!(
        coupon(7),
        Coupon::from_value(raw_bytes::from_slice(&7u32.to_le_bytes()))
    );
}

#[test]
fn visitor_keys_are_framed() {
    assert_ne!(visitor_hash("ab", Some("c")), visitor_hash("a", Some("bc")));
    assert_ne!(visitor_hash("a", None), visitor_hash("a", Some("")));
    assert_eq!(visitor_hash("a", Some("/x")), visitor_hash("a", Some("/x")));
}

#[test]
fn small_periods_count_exactly_and_a_visitor_of_two_days_once() {
    let monday = sketch(people(0..700));
    let tuesday = sketch(people(500..1_000));
    assert_eq!(estimate(&[Some(&monday)]), Some(700));
    assert_eq!(estimate(&[Some(&monday), Some(&tuesday)]), Some(1_000));
    // An empty day (events without sessions) adds no one.
    assert_eq!(estimate(&[Some(&monday), Some(&sketch([]))]), Some(700));
    assert_eq!(estimate(&[]), Some(0));
}

#[test]
fn a_part_without_a_sketch_makes_the_period_unknown() {
    let day = sketch(people(0..10));
    assert_eq!(estimate(&[Some(&day), None]), None);
    assert_eq!(estimate(&[None, Some(&day)]), None);
}

#[test]
fn a_month_is_the_union_of_its_days_unless_it_counted_an_unknown_day() {
    let first = sketch(people(0..30));
    let second = sketch(people(20..50));
    let month = month_after(None, &first).unwrap().unwrap();
    assert_eq!(month, first);
    let month = month_after(Some((1, Some(&month))), &second)
        .unwrap()
        .unwrap();
    assert_eq!(estimate(&[Some(&month)]), Some(50));
    // A month row emptied earlier (days 0) starts again from the day.
    assert_eq!(month_after(Some((0, None)), &first).unwrap(), Some(first));
    // A month that counted a day rolled up before sketches were kept stays unknown.
    assert_eq!(month_after(Some((3, None)), &second).unwrap(), None);
}

#[test]
fn many_visitors_are_estimated_within_two_percent() {
    // A month of 30 days, 2,000 visitors a day, each day sharing half its visitors with the
    // day before: 31,000 distinct visitors.
    let days: Vec<Vec<u8>> = (0..30u32)
        .map(|d| sketch(people(d * 1_000..d * 1_000 + 2_000)))
        .collect();
    let parts: Vec<Option<&[u8]>> = days.iter().map(|d| Some(d.as_slice())).collect();
    let got = estimate(&parts).unwrap() as f64;
    assert!((got - 31_000.0).abs() / 31_000.0 < 0.02, "estimated {got}");
    // The month's sketch, built day by day, answers the same.
    let mut month: Option<Vec<u8>> = None;
    for (n, d) in days.iter().enumerate() {
        month = month_after(Some((n as i64, month.as_deref())), d).unwrap();
    }
    let via_month = estimate(&[month.as_deref()]).unwrap() as f64;
    assert!(
        (via_month - 31_000.0).abs() / 31_000.0 < 0.02,
        "estimated {via_month}"
    );
}

#[test]
fn a_damaged_sketch_is_a_corrupt_error() {
    let mut u = PeriodUnion::default();
    let err = u.add(Some(b"not a sketch")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt);
}
