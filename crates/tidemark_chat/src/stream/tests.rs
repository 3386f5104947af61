use super::*;

#[test]
fn a_position_round_trips_and_bad_ones_are_refused() {
    let a = "0190f5a4-1c2b-7d3e-8f90-123456789abc";
    let b = "0190f5a4-1c2b-7d3e-8f90-123456789abd";
    let text = format!("v1;{b}:7;{a}:12");
    let p = Position::parse(&text).unwrap();
    assert_eq!((p.get(a), p.get(b), p.get("x")), (Some(12), Some(7), None));
    assert_eq!(p.encode(), format!("v1;{a}:12;{b}:7"));
    assert_eq!(Position::parse("v1").unwrap(), Position::default());
    for bad in [
        String::new(),
        "v2".into(),
        format!("v1;{a}"),
        format!("v1;{a}:0"),
        format!("v1;{a}:-1"),
        format!("v1;{a}:x"),
        format!("v1;{a}:1;{a}:2"),
        "v1;not-a-conversation:1".into(),
        format!("v1;{}:1", a.to_uppercase()),
        format!("v1;{a}:{}", u64::MAX),
    ] {
        let e = Position::parse(&bad).unwrap_err();
        assert!(matches!(e, ChatError::Invalid(_)), "{bad}: {e}");
    }
}

#[test]
fn the_gap_patience_is_twice_the_recovery_window() {
    assert_eq!(
        gap_patience(Duration::from_secs(30)),
        Duration::from_secs(60)
    );
}
