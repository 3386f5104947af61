use super::*;

const H: i64 = 3_600_000;

fn ms(rfc3339: &str) -> i64 {
    rfc3339.parse::<Timestamp>().unwrap().as_millisecond()
}

fn day(s: &str) -> Day {
    Day::parse(s).unwrap()
}

#[test]
fn utc_days_are_24_hours_from_midnight_utc() {
    let utc = Calendar::named("utc").unwrap();
    assert_eq!(utc.name(), "UTC");
    for alias in ["Etc/UTC", "zulu", "Etc/Universal", "GMT", "Etc/GMT+0"] {
        assert_eq!(Calendar::named(alias).unwrap().name(), "UTC", "{alias}");
    }
    // Offset 0 today, but not always: its own days.
    assert_eq!(
        Calendar::named("Africa/Abidjan").unwrap().name(),
        "Africa/Abidjan"
    );
    let d = day("2024-10-27");
    assert_eq!(utc.start_ms(d), ms("2024-10-27T00:00:00Z"));
    assert_eq!(utc.end_ms(d) - utc.start_ms(d), 24 * H);
    assert_eq!(utc.day_of(ms("2024-10-27T23:59:59.999Z")), d);
    assert_eq!(utc.day_of(ms("2024-10-28T00:00:00Z")), d.plus(1));
}

#[test]
fn berlin_spring_forward_day_is_23_hours() {
    let berlin = Calendar::named("europe/berlin").unwrap();
    assert_eq!(berlin.name(), "Europe/Berlin");
    let d = day("2024-03-31");
    assert_eq!(berlin.start_ms(d), ms("2024-03-30T23:00:00Z"));
    assert_eq!(berlin.end_ms(d), ms("2024-03-31T22:00:00Z"));
    assert_eq!(berlin.end_ms(d) - berlin.start_ms(d), 23 * H);
    assert_eq!(berlin.day_of(ms("2024-03-30T22:59:59.999Z")), d.plus(-1));
    assert_eq!(berlin.day_of(ms("2024-03-30T23:00:00Z")), d);
    assert_eq!(berlin.day_of(ms("2024-03-31T21:59:59.999Z")), d);
    assert_eq!(berlin.day_of(ms("2024-03-31T22:00:00Z")), d.plus(1));
}

#[test]
fn berlin_fall_back_day_is_25_hours_and_holds_22_30_utc() {
    let berlin = Calendar::named("Europe/Berlin").unwrap();
    let d = day("2024-10-27");
    assert_eq!(berlin.start_ms(d), ms("2024-10-26T22:00:00Z"));
    assert_eq!(berlin.end_ms(d), ms("2024-10-27T23:00:00Z"));
    assert_eq!(berlin.end_ms(d) - berlin.start_ms(d), 25 * H);
    // 23:30 local (CET, +01:00) on 27 October.
    assert_eq!(berlin.day_of(ms("2024-10-27T22:30:00Z")), d);
    // Both 02:30s of the repeated hour are the 27th.
    assert_eq!(berlin.day_of(ms("2024-10-27T00:30:00Z")), d);
    assert_eq!(berlin.day_of(ms("2024-10-27T01:30:00Z")), d);
    assert_eq!(berlin.day_of(ms("2024-10-27T23:00:00Z")), d.plus(1));
}

#[test]
fn a_day_whose_midnight_is_skipped_starts_at_its_first_instant() {
    // São Paulo sprang forward at 00:00 on 2018-11-04: the day began at 01:00 (-02:00).
    let sp = Calendar::named("America/Sao_Paulo").unwrap();
    let d = day("2018-11-04");
    assert_eq!(sp.start_ms(d), ms("2018-11-04T03:00:00Z"));
    assert_eq!(sp.end_ms(d.plus(-1)), sp.start_ms(d));
    assert_eq!(sp.end_ms(d) - sp.start_ms(d), 23 * H);
    assert_eq!(sp.day_of(ms("2018-11-04T02:59:59.999Z")), d.plus(-1));
}

#[test]
fn every_instant_lies_within_the_bounds_of_its_day() {
    let sarajevo = Calendar::named("Europe/Sarajevo").unwrap();
    let mut t = ms("2024-01-01T00:00:00Z");
    while t < ms("2025-01-01T00:00:00Z") {
        let d = sarajevo.day_of(t);
        assert!(sarajevo.start_ms(d) <= t && t < sarajevo.end_ms(d), "{t}");
        t += 37 * 60_000 + 13;
    }
}

#[test]
fn unknown_zones_are_named_in_the_error() {
    assert_eq!(
        Calendar::named(" ").unwrap_err(),
        UnknownZone(String::new())
    );
    let err = Calendar::named("Europe/Atlantis").unwrap_err();
    assert_eq!(err, UnknownZone("Europe/Atlantis".into()));
    assert!(err.to_string().contains("Europe/Atlantis"), "{err}");
}
