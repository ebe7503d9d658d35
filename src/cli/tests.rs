//! Tests of the command line's time flags.

use super::audit::{parse_time, parse_window};

/// 2026-05-01T13:00:00Z in unix milliseconds.
const ONE_PM_UTC: i64 = 1_777_640_400_000;

#[test]
fn times_with_a_utc_offset_are_the_same_instant_as_in_utc() {
    for s in [
        "2026-05-01T13:00:00Z",
        "2026-05-01T15:00:00+02:00",
        "2026-05-01T08:30:00-04:30",
        "2026-05-01T13:00:00",
        "1777640400000",
    ] {
        assert_eq!(parse_time("--since", s, 0).unwrap(), ONE_PM_UTC, "{s}");
    }
    assert_eq!(
        parse_time("--since", "2026-05-01T15:00:00.250+02:00", 0).unwrap(),
        ONE_PM_UTC + 250
    );
    assert_eq!(
        parse_time("--until", "2h", ONE_PM_UTC).unwrap(),
        ONE_PM_UTC - 7_200_000
    );
}

#[test]
fn an_unreadable_time_names_its_flag_and_value() {
    let err = parse_time("--until", "2026-05-01T15:00:00+2", 0).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("--until \"2026-05-01T15:00:00+2\""),
        "{msg}"
    );
}

#[test]
fn since_must_be_earlier_than_until_and_the_error_names_both() {
    let since = "2026-05-01T15:00:00+02:00";
    let until = "2026-05-01T12:00:00Z";
    let msg = parse_window(Some(since), Some(until), 0)
        .unwrap_err()
        .to_string();
    for part in [
        since,
        until,
        "2026-05-01T13:00:00.000Z",
        "2026-05-01T12:00:00.000Z",
    ] {
        assert!(msg.contains(part), "{part}: {msg}");
    }
    assert!(
        parse_window(Some(since), Some(since), 0).is_err(),
        "empty window"
    );
    let w = parse_window(Some(until), Some(since), 0).unwrap();
    assert_eq!(
        (w.since_ms, w.until_ms),
        (Some(ONE_PM_UTC - 3_600_000), Some(ONE_PM_UTC))
    );
    assert!(parse_window(Some(since), None, 0).is_ok());
}
