use super::*;

#[test]
fn nearest_rank_picks_the_documented_element() {
    let v: Vec<u64> = (1..=100).collect();
    assert_eq!(nearest_rank(&v, 50), Some(50));
    assert_eq!(nearest_rank(&v, 95), Some(95));
    assert_eq!(nearest_rank(&v, 99), Some(99));
    assert_eq!(nearest_rank(&[7], 50), Some(7));
    assert_eq!(nearest_rank(&[1, 2, 3, 4], 50), Some(2));
    assert_eq!(nearest_rank(&[1, 2, 3, 4, 5], 50), Some(3));
    assert_eq!(nearest_rank(&[1, 2, 3, 4, 5], 0), Some(1));
    assert_eq!(nearest_rank(&[], 50), None);
}

#[test]
fn nearest_rank_is_always_one_of_the_values_and_monotone_in_p() {
    for n in 1..60u64 {
        let v: Vec<u64> = (0..n).map(|i| i * i).collect();
        let mut last = 0;
        for p in 0..=100 {
            let x = nearest_rank(&v, p).unwrap();
            assert!(v.contains(&x));
            assert!(x >= last, "n={n} p={p}");
            last = x;
        }
        assert_eq!(nearest_rank(&v, 100), v.last().copied());
    }
}

#[test]
fn the_window_is_half_open() {
    let w = Window::new(Some(10), Some(20));
    assert!(!w.contains(9));
    assert!(w.contains(10));
    assert!(w.contains(19));
    assert!(!w.contains(20));
    assert!(Window::all().contains(i64::MIN));
}

#[test]
fn durations_and_times_are_written_for_people() {
    assert_eq!(human_ms(850), "850ms");
    assert_eq!(human_ms(12_345), "12.3s");
    assert_eq!(human_ms(245_000), "4m05s");
    assert_eq!(human_ms(7_620_000), "2h07m");
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339(1_777_636_800_123), "2026-05-01T12:00:00.123Z");
    assert_eq!(rfc3339(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
    assert_eq!(rfc3339(i64::MAX), format!("{}ms", i64::MAX));
    assert_eq!(rfc3339(-5), "-5ms");
}
