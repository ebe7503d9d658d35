//! Properties of the audit reader and report over generated input, with a bounded number of
//! cases: arbitrary, truncated and corrupted lines never panic the reader, every skipped line
//! is named by file and line number and every other line becomes a record; arbitrary records
//! (extreme numbers included) never panic the report and keep its totals consistent; and the
//! report does not depend on the order of the records or of the files they are read from.

#![expect(clippy::unwrap_used, reason = "tests abort loudly")]

use std::path::Path;

use gangscaler::audit::read::{MAX_ERROR_CHARS, read_lines};
use gangscaler::audit::report::Options;
use gangscaler::audit::{
    DecisionEvent, Event, Extent, GangId, GangSummary, Outcome, OutcomeEvent, Phase, PhaseEvent,
    Reading, Record, Report, Stats, Verdict, Window,
};
use gangscaler::scaleup::{Timeouts, Tracker};
use proptest::prelude::*;

const CASES: u32 = 128;

fn gang(name: &str) -> GangId {
    GangId {
        namespace: "ml".into(),
        name: name.into(),
        api_version: "scheduling.k8s.io/v1alpha2".into(),
        kind: "PodGroup".into(),
    }
}

fn decision(id: Option<String>, group: &str, verdict: Verdict, gangs: &[&str]) -> DecisionEvent {
    DecisionEvent {
        scale_up_id: id,
        node_group: group.into(),
        policy: "strict".into(),
        verdict,
        rule: "gangs_admitted".into(),
        target: 0,
        max_size: 10,
        headroom: 10,
        ca_delta: 1,
        applied_delta: u32::try_from(gangs.len()).unwrap(),
        capped: false,
        gang_nodes: 1,
        ungrouped_nodes: 0,
        gangs: gangs
            .iter()
            .map(|g| GangSummary {
                repair_of: None,
                spread: Vec::new(),
                gang: gang(g),
                priority: 0,
                extent: Extent::Whole,
                nodes: 1,
                idle: 0,
                in_flight: 0,
            })
            .collect(),
        deferred: Vec::new(),
        deferred_total: 0,
        covered: 0,
        unhostable: 0,
        duration_ms: None,
        reason: "generated".into(),
        reservation_off: None,
        composites: Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Arbitrary records: any field value, few distinct ids so that events meet

fn arb_time() -> impl Strategy<Value = i64> {
    prop_oneof![
        3 => -5i64..5_000,
        1 => any::<i64>(),
        1 => Just(i64::MIN),
        1 => Just(i64::MAX),
    ]
}

fn arb_id() -> impl Strategy<Value = String> {
    (0u8..4).prop_map(|n| format!("su-{n}"))
}

fn arb_group() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c"]).prop_map(str::to_owned)
}

fn arb_gang() -> impl Strategy<Value = Option<GangId>> {
    prop::option::of(prop::sample::select(vec!["x", "y"]).prop_map(gang))
}

fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (
            prop::option::of(arb_id()),
            arb_group(),
            any::<bool>(),
            prop::sample::subsequence(vec!["x", "y"], 0..=2),
            any::<u32>(),
            any::<u32>(),
        )
            .prop_map(|(id, group, accept, gangs, asked, applied)| {
                let verdict = if accept {
                    Verdict::Accept
                } else {
                    Verdict::Reject
                };
                let mut d = decision(id, &group, verdict, &gangs);
                d.ca_delta = asked;
                d.applied_delta = applied;
                Event::Decision(d)
            }),
        (
            arb_id(),
            arb_group(),
            arb_gang(),
            prop::sample::select(Phase::ALL.to_vec()),
            arb_time(),
            any::<u64>(),
        )
            .prop_map(|(id, group, gang, phase, at_ms, elapsed_ms)| {
                Event::Phase(PhaseEvent {
                    scale_up_id: id,
                    node_group: group,
                    gang,
                    phase,
                    at_ms,
                    elapsed_ms,
                    detail: None,
                })
            }),
        (
            (arb_id(), arb_group(), arb_gang()),
            prop::sample::select(Outcome::ALL.to_vec()),
            (
                arb_time(),
                prop::option::of(arb_time()),
                prop::option::of(arb_time())
            ),
            (any::<u32>(), any::<u64>()),
        )
            .prop_map(
                |((id, group, gang), outcome, (requested, formed, pending), (failures, d))| {
                    Event::Outcome(OutcomeEvent {
                        scale_up_id: id,
                        node_group: group,
                        gang,
                        outcome,
                        requested_at_ms: requested,
                        formed_at_ms: formed,
                        attached_at_ms: formed,
                        pending_since_ms: pending,
                        attach_failures: failures,
                        duration_ms: d,
                        reason: "generated".into(),
                    })
                }
            ),
    ]
}

fn arb_record() -> impl Strategy<Value = Record> {
    (arb_time(), arb_event()).prop_map(|(ts, event)| Record::new(ts, event))
}

fn arb_window() -> impl Strategy<Value = Window> {
    (prop::option::of(arb_time()), prop::option::of(arb_time())).prop_map(|(a, b)| match (a, b) {
        (Some(a), Some(b)) => Window::new(Some(a.min(b)), Some(a.max(b))),
        (a, b) => Window::new(a, b),
    })
}

fn arb_options() -> impl Strategy<Value = Options> {
    (prop::option::of(arb_time()), any::<u64>()).prop_map(|(now, after)| {
        let o = Options::new().with_overdue_after_ms(after);
        now.map_or(o, |n| o.with_now_ms(n))
    })
}

// ---------------------------------------------------------------------------------------------
// Arbitrary lines

/// How a generated line was made, for what reading it must give.
#[derive(Debug, Clone)]
enum Line {
    /// A record's line, untouched: must become that record (unless it is the last line and has
    /// no newline).
    Valid(Box<Record>),
    /// Anything else.
    Other(Vec<u8>),
}

impl Line {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Self::Valid(r) => r.to_line().unwrap().into_bytes(),
            Self::Other(b) => b.clone(),
        }
    }
}

fn no_newline(mut b: Vec<u8>) -> Vec<u8> {
    b.retain(|&c| c != b'\n');
    b
}

fn arb_line() -> impl Strategy<Value = Line> {
    prop_oneof![
        3 => arb_record().prop_map(|r| Line::Valid(Box::new(r))),
        // A record's line cut anywhere (a torn write), or with one byte changed.
        2 => (arb_record(), any::<prop::sample::Index>()).prop_map(|(r, i)| {
            let b = r.to_line().unwrap().into_bytes();
            Line::Other(b[..i.index(b.len())].to_vec())
        }),
        2 => (arb_record(), any::<prop::sample::Index>(), any::<u8>()).prop_map(|(r, i, c)| {
            let mut b = r.to_line().unwrap().into_bytes();
            let at = i.index(b.len());
            b[at] = c;
            Line::Other(no_newline(b))
        }),
        1 => prop::collection::vec(any::<u8>(), 0..120).prop_map(|b| Line::Other(no_newline(b))),
        1 => any::<String>().prop_map(|s| Line::Other(no_newline(s.into_bytes()))),
        // Envelopes with odd schema values, events and huge strings.
        1 => (
            prop_oneof![
                Just("1".to_owned()),
                Just("\"1\"".to_owned()),
                Just("null".to_owned()),
                Just("-1".to_owned()),
                Just("1e999".to_owned()),
                Just(format!("\"{}\"", "s".repeat(5_000))),
            ],
            prop_oneof![
                Just("decision".to_owned()),
                Just("phase".to_owned()),
                Just("outcome".to_owned()),
                "[a-z]{0,12}",
                Just("e".repeat(5_000)),
            ],
        )
            .prop_map(|(schema, event)| Line::Other(
                format!(r#"{{"schema":{schema},"tsMs":1,"event":"{event}"}}"#).into_bytes()
            )),
    ]
}

/// The report's totals agree with each other and with its groups.
fn check_report(report: &Report, input_records: usize) {
    let sum = |f: fn(&Stats) -> u64| report.node_groups.values().map(f).sum::<u64>();
    let o = &report.overall;
    assert_eq!(o.decisions, sum(|s| s.decisions));
    assert_eq!(o.accepted + o.rejected, o.decisions);
    assert_eq!(o.terminal, sum(|s| s.terminal));
    assert_eq!(o.open, sum(|s| s.open));
    assert_eq!(o.overdue, sum(|s| s.overdue));
    assert_eq!(o.with_attach_failures, sum(|s| s.with_attach_failures));
    assert!(report.records <= input_records as u64);
    for s in report.node_groups.values().chain([o]) {
        assert_eq!(s.terminal, s.outcomes.values().sum::<u64>());
        assert!(s.overdue <= s.open);
        assert!(s.with_attach_failures <= s.formed_or_attach_failed);
        assert!(s.formed_or_attach_failed <= s.terminal);
        for rate in [s.start_success_rate, s.attach_failure_rate]
            .into_iter()
            .flatten()
        {
            assert!((0.0..=1.0).contains(&rate), "{rate}");
        }
        for p in [&s.formation, &s.pending] {
            let v = [p.p50_ms, p.p95_ms, p.p99_ms, p.max_ms];
            assert!(v.windows(2).all(|w| w[0] <= w[1]), "{p:?}");
            assert_eq!(p.count == 0, p.max_ms.is_none());
        }
    }
    let _ = report.to_table();
    serde_json::to_string(report).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// No line panics the reader; every line is a record or a bad line named by file and
    /// number, in order; untouched record lines are read back as the same record.
    #[test]
    fn any_lines_are_read_without_panic_and_every_bad_one_is_named(
        lines in prop::collection::vec(arb_line(), 0..40),
        final_newline in any::<bool>(),
        window in arb_window(),
        options in arb_options(),
    ) {
        let mut text: Vec<u8> = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            text.extend(line.bytes());
            if i + 1 < lines.len() || final_newline {
                text.push(b'\n');
            }
        }
        let name = Path::new("fuzz/audit.jsonl");
        let mut out = Reading::default();
        read_lines(text.as_slice(), name, &mut out).unwrap();

        // Reading splits on newlines only: a last empty piece is no line.
        let count = if text.is_empty() {
            0
        } else {
            text.split(|&b| b == b'\n').count() - usize::from(text.ends_with(b"\n"))
        };
        prop_assert_eq!(out.records.len() as u64 + out.bad_total(), count as u64);
        prop_assert_eq!(out.bad_unlisted, 0);
        let mut last = 0;
        for bad in &out.bad {
            prop_assert_eq!(&bad.file, "fuzz/audit.jsonl");
            prop_assert!(bad.line > last && bad.line <= count as u64, "{}", bad);
            last = bad.line;
            let prefix = format!("fuzz/audit.jsonl:{}: ", bad.line);
            prop_assert!(bad.to_string().starts_with(&prefix), "{}", bad);
            prop_assert!(!bad.error.is_empty());
            prop_assert!(bad.error.chars().count() <= MAX_ERROR_CHARS + 10, "{}", bad);
        }
        // An untouched record line is never a bad line (but the last, without its newline).
        for (i, line) in lines.iter().enumerate() {
            let unterminated = i + 1 == lines.len() && !final_newline;
            if matches!(line, Line::Valid(_)) && !unterminated {
                let n = i as u64 + 1;
                prop_assert!(out.bad.iter().all(|b| b.line != n), "line {n}: {:?}", out.bad);
            }
        }
        let expected: Vec<&Record> = lines
            .iter()
            .enumerate()
            .filter_map(|(i, l)| match l {
                Line::Valid(r) if i + 1 < lines.len() || final_newline => Some(&**r),
                _ => None,
            })
            .collect();
        // Every expected record is read, in order (corrupted lines may parse too).
        let mut it = out.records.iter();
        for r in expected {
            prop_assert!(it.any(|got| got == r), "{r:?} missing");
        }
        for r in &out.records {
            prop_assert_eq!(&Record::parse_line(&r.to_line().unwrap()).unwrap(), r);
        }
        check_report(&Report::compute_with(&out.records, window, options), out.records.len());
    }

    /// Arbitrary records, extreme times and counts included, never panic the report.
    #[test]
    fn any_records_give_a_consistent_report(
        records in prop::collection::vec(arb_record(), 0..60),
        window in arb_window(),
        options in arb_options(),
    ) {
        check_report(&Report::compute_with(&records, window, options), records.len());
    }

    /// The report is a function of the set of records: any permutation of them (any order of
    /// the files, any order within) gives the same report.
    #[test]
    fn any_permutation_of_the_records_gives_the_same_report(
        (records, shuffled) in prop::collection::vec(arb_record(), 0..50)
            .prop_flat_map(|r| (Just(r.clone()), Just(r).prop_shuffle())),
        window in arb_window(),
        options in arb_options(),
    ) {
        prop_assert_eq!(
            Report::compute_with(&shuffled, window, options),
            Report::compute_with(&records, window, options)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Realistic logs: lifecycles written in time order, split into rotated files

/// One generated lifecycle: its scale-up, group and gang, when it was requested, the phases
/// it reached (after the request), whether it ended, and whether its decision survived
/// rotation.
#[derive(Debug, Clone)]
struct Life {
    group: &'static str,
    gang: Option<&'static str>,
    requested: i64,
    phases: Vec<Phase>,
    outcome: Option<Outcome>,
    decision_kept: bool,
    decision_twice: bool,
}

fn arb_life() -> impl Strategy<Value = Life> {
    (
        prop::sample::select(vec!["a", "b", "c"]),
        prop::option::of(prop::sample::select(vec!["x", "y"])),
        0i64..100_000,
        prop::sample::subsequence(Phase::ALL[1..].to_vec(), 0..=5),
        prop::option::of(prop::sample::select(Outcome::ALL.to_vec())),
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(group, gang, requested, phases, outcome, decision_kept, decision_twice)| Life {
                group,
                gang,
                requested,
                phases,
                outcome,
                decision_kept,
                decision_twice,
            },
        )
}

/// The records of `lives` in the order a gangscaler writes them (by time).
fn log_of(lives: &[Life]) -> Vec<Record> {
    let mut records = Vec::new();
    for (k, l) in lives.iter().enumerate() {
        let id = format!("su-{k}");
        let gangs: Vec<&str> = l.gang.into_iter().collect();
        if l.decision_kept {
            let d = decision(Some(id.clone()), l.group, Verdict::Accept, &gangs);
            for _ in 0..=usize::from(l.decision_twice) {
                records.push(Record::new(l.requested, d.clone()));
            }
        }
        let mut at = l.requested;
        for &phase in &l.phases {
            at += 1_000;
            records.push(Record::new(
                at,
                PhaseEvent {
                    scale_up_id: id.clone(),
                    node_group: l.group.into(),
                    gang: l.gang.map(gang),
                    phase,
                    at_ms: at,
                    elapsed_ms: u64::try_from(at - l.requested).unwrap(),
                    detail: None,
                },
            ));
        }
        if let Some(outcome) = l.outcome {
            at += 1_000;
            records.push(Record::new(
                at,
                OutcomeEvent {
                    scale_up_id: id.clone(),
                    node_group: l.group.into(),
                    gang: l.gang.map(gang),
                    outcome,
                    requested_at_ms: l.requested,
                    formed_at_ms: None,
                    attached_at_ms: None,
                    pending_since_ms: None,
                    attach_failures: 0,
                    duration_ms: u64::try_from(at - l.requested).unwrap(),
                    reason: "generated".into(),
                },
            ));
        }
    }
    records.sort_by_key(|r| r.ts_ms);
    records
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// A log split into rotated files and read back in any file order gives the report of the
    /// log read in order; with the whole log, `open` is what the scale-up tracker resumes.
    #[test]
    fn rotated_files_read_in_any_order_give_the_in_order_report(
        lives in prop::collection::vec(arb_life(), 0..16),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
        file_order in Just(()).prop_flat_map(|()| Just((0..5usize).collect::<Vec<_>>()).prop_shuffle()),
        window in arb_window(),
    ) {
        let log = log_of(&lives);
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(log.len() + 1)).collect();
        cuts.sort_unstable();
        let mut files: Vec<&[Record]> = Vec::new();
        let mut start = 0;
        for c in cuts.into_iter().chain([log.len()]) {
            files.push(&log[start..c]);
            start = c;
        }
        let mut reading = Reading::default();
        for &f in file_order.iter().filter(|&&f| f < files.len()) {
            let text: String = files[f].iter().map(|r| r.to_line().unwrap() + "\n").collect();
            read_lines(text.as_bytes(), Path::new(&format!("audit.jsonl.{f}")), &mut reading)
                .unwrap();
        }
        prop_assert!(reading.bad.is_empty(), "{:?}", reading.bad);
        prop_assert_eq!(reading.records.len(), log.len());
        prop_assert_eq!(
            Report::compute(&reading.records, window),
            Report::compute(&log, window)
        );
        let tracker = Tracker::resume(Timeouts::default(), &log);
        let all = Report::compute(&reading.records, Window::all());
        prop_assert_eq!(all.overall.open, tracker.open_count() as u64);
    }
}
