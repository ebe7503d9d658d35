//! The audit log end to end: records round-trip, torn tails are repaired, rotation keeps every
//! record once, `kill -9` loses nothing acknowledged, a restart resumes open scale-ups without
//! duplicates or gaps, and `audit report` computes the documented numbers.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests abort loudly"
)]

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gangscaler::audit::{
    self, AuditLog, Config, DecisionEvent, Event, GangId, Outcome, OutcomeEvent, Phase, PhaseEvent,
    Record, Report, Window, read_files, rotated_paths,
};
use gangscaler::model::{GangRef, NodeGroupId};
use gangscaler::planner::{
    AdmittedGang, CoveredGang, Decision, DeferredGang, Extent, Policy, Reason, Rule, Verdict,
};
use gangscaler::scaleup::{self, Observation, Recorder, Timeouts, Tracker};

fn gang_ref(name: &str) -> GangRef {
    GangRef {
        namespace: "ml".into(),
        name: name.into(),
        api_version: "scheduling.k8s.io/v1alpha2".into(),
        kind: "PodGroup".into(),
    }
}

fn gang(name: &str) -> GangId {
    GangId::from(&gang_ref(name))
}

/// An accepted decision on `h100` admitting `admitted` (one node each) with `deferred` gangs
/// that did not fit.
fn planner_decision(admitted: &[&str], deferred: usize) -> Decision {
    Decision {
        group: NodeGroupId::new("h100"),
        policy: Policy::Strict,
        verdict: Verdict::Accept,
        rule: Rule::GangsAdmitted,
        target: 2,
        max_size: 10,
        headroom: 8,
        ca_delta: 1,
        applied_delta: u32::try_from(admitted.len()).unwrap(),
        capped: false,
        gang_nodes: u32::try_from(admitted.len()).unwrap(),
        ungrouped_nodes: 0,
        admitted: admitted
            .iter()
            .map(|g| AdmittedGang {
                repair_of: None,
                spread: Vec::new(),
                gang: gang_ref(g),
                priority: 10,
                extent: Extent::MinCount,
                nodes: 1,
                nodes_all: 2,
                idle: 0,
                nodes_min: 1,
                in_flight: 0,
            })
            .collect(),
        deferred: (0..deferred)
            .map(|i| DeferredGang {
                gang: gang_ref(&format!("big-{i}")),
                priority: 5,
                in_flight: 0,
                reason: Reason::InsufficientHeadroom {
                    nodes_all: 16,
                    nodes_min: 12,
                    headroom: 8,
                },
            })
            .collect(),
        covered: vec![CoveredGang {
            gang: gang_ref("covered"),
            nodes_all: 1,
            nodes_min: 1,
            in_flight: 1,
            elsewhere: None,
        }],
        unhostable: 3,
        reason: "admitted some".into(),
        reservation_off: None,
        composites: Vec::new(),
    }
}

fn phase(id: &str, gang_name: Option<&str>, phase: Phase, at_ms: i64) -> Record {
    Record::new(
        at_ms,
        PhaseEvent {
            scale_up_id: id.into(),
            node_group: "h100".into(),
            gang: gang_name.map(gang),
            phase,
            at_ms,
            elapsed_ms: 5,
            detail: Some("2/2 nodes ready".into()),
        },
    )
}

struct Out {
    group: &'static str,
    outcome: Outcome,
    requested: i64,
    formed_after: Option<i64>,
    pending_before: Option<i64>,
    attach_failures: u32,
    ts: i64,
}

fn outcome(o: &Out) -> Record {
    let formed = o.formed_after.map(|f| o.requested + f);
    Record::new(
        o.ts,
        OutcomeEvent {
            scale_up_id: format!("su-{}", o.requested),
            node_group: o.group.into(),
            gang: Some(gang(&format!("g{}", o.requested))),
            outcome: o.outcome,
            requested_at_ms: o.requested,
            formed_at_ms: formed,
            attached_at_ms: formed,
            pending_since_ms: o.pending_before.map(|p| o.requested - p),
            attach_failures: o.attach_failures,
            duration_ms: u64::try_from(o.ts - o.requested).unwrap(),
            reason: "test".into(),
        },
    )
}

fn rejection(group: &str, ts: i64) -> Record {
    let mut d = DecisionEvent::from(&planner_decision(&[], 1));
    d.node_group = group.into();
    d.verdict = audit::Verdict::Reject;
    d.applied_delta = 0;
    Record::new(ts, d)
}

fn write_lines(path: &Path, records: &[Record]) {
    let text: String = records
        .iter()
        .map(|r| r.to_line().unwrap() + "\n")
        .collect();
    fs::write(path, text).unwrap();
}

fn stress_seq(r: &Record) -> u64 {
    let Event::Phase(p) = &r.event else {
        panic!("not a stress record: {r:?}")
    };
    p.scale_up_id
        .strip_prefix("stress-")
        .unwrap()
        .parse()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Records

#[test]
fn every_event_round_trips_through_exactly_one_line() {
    let records = [
        Record::new(
            1,
            DecisionEvent::from(&planner_decision(&["a", "b"], 2))
                .with_scale_up_id("su-1")
                .with_duration_ms(12),
        ),
        rejection("a100", 2),
        phase("su-1", Some("a"), Phase::NodesReady, 3),
        phase("su-2", None, Phase::InstancesCreated, 4),
        outcome(&Out {
            group: "h100",
            outcome: Outcome::AttachFailed,
            requested: 10,
            formed_after: Some(5),
            pending_before: Some(7),
            attach_failures: 3,
            ts: 30,
        }),
    ];
    for r in &records {
        let line = r.to_line().unwrap();
        assert!(!line.contains('\n'), "{line}");
        assert_eq!(Record::parse_line(&line).unwrap(), *r, "{line}");
    }
    let Event::Decision(d) = &records[0].event else {
        unreachable!()
    };
    let json: serde_json::Value = serde_json::from_str(&records[0].to_line().unwrap()).unwrap();
    assert_eq!(json["event"], "decision");
    assert_eq!(json["gangs"][1]["gang"]["name"], "b");
    assert_eq!(
        json["gangs"][1]["gang"]["apiVersion"],
        "scheduling.k8s.io/v1alpha2"
    );
    assert_eq!(json["gangs"][1]["extent"], "minCount");
    assert_eq!(
        (json["caDelta"].as_u64(), json["appliedDelta"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(json["durationMs"], 12);
    assert_eq!(d.covered, 1);
    assert_eq!(d.unhostable, 3);
    assert_eq!(d.rule, "gangs_admitted");
    assert_eq!(d.policy, "strict");
}

#[test]
fn a_decision_lists_at_most_twenty_deferred_gangs_and_counts_them_all() {
    let d = DecisionEvent::from(&planner_decision(&["a"], 25));
    assert_eq!(d.deferred.len(), 20);
    assert_eq!(d.deferred_total, 25);
    assert_eq!(d.deferred[19].gang.name, "big-19");
    assert_eq!(
        d.deferred[0].reason,
        Reason::InsufficientHeadroom {
            nodes_all: 16,
            nodes_min: 12,
            headroom: 8
        }
        .to_string()
    );
    assert_eq!(d.scale_up_id, None);
}

#[test]
fn unknown_events_and_schema_versions_are_bad_lines_named_by_number() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let good = phase("su-1", None, Phase::NodesReady, 3).to_line().unwrap();
    let text = format!(
        "{good}\n{}\n{}\n{good}\n",
        good.replace(r#""event":"phase""#, r#""event":"reboot""#),
        good.replace(r#""schema":1"#, r#""schema":99"#),
    );
    fs::write(&path, text).unwrap();
    let r = read_files(&[&path]).unwrap();
    assert_eq!(r.records.len(), 2);
    assert_eq!(r.bad.len(), 2);
    assert_eq!(r.bad[0].line, 2);
    assert!(r.bad[0].error.contains("reboot"), "{}", r.bad[0]);
    assert_eq!(r.bad[1].line, 3);
    assert!(
        r.bad[1]
            .to_string()
            .ends_with("audit.jsonl:3: unsupported schema version 99 (this build reads 1)"),
        "{}",
        r.bad[1]
    );
}

// ---------------------------------------------------------------------------------------------
// The writer

#[test]
fn a_torn_tail_is_repaired_on_open_and_earlier_lines_are_intact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path, Config::new()).unwrap();
    let first: Vec<Record> = (0..3)
        .map(|i| phase(&format!("su-{i}"), None, Phase::NodesReady, i))
        .collect();
    for r in &first {
        log.append(r).unwrap();
    }
    drop(log);
    // What a crash halfway through the fourth write leaves.
    let fourth = phase("su-3", None, Phase::NodesReady, 3).to_line().unwrap();
    let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&fourth.as_bytes()[..fourth.len() / 2]).unwrap();
    drop(f);
    let torn = read_files(&[&path]).unwrap();
    assert_eq!(torn.records, first);
    assert_eq!(torn.bad.len(), 1);
    assert_eq!(torn.bad[0].line, 4);
    assert!(
        torn.bad[0].error.starts_with("truncated"),
        "{}",
        torn.bad[0]
    );

    let log = AuditLog::open(&path, Config::new()).unwrap();
    assert_eq!(log.repaired_bytes(), (fourth.len() / 2) as u64);
    let fifth = phase("su-4", None, Phase::NodesReady, 4);
    log.append(&fifth).unwrap();
    let after = read_files(&[&path]).unwrap();
    assert!(after.bad.is_empty(), "{:?}", after.bad);
    let mut expected = first;
    expected.push(fifth);
    assert_eq!(after.records, expected);
}

#[test]
fn rotation_keeps_the_newest_records_and_reading_the_files_in_order_gives_each_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let line_len = phase("su-00", None, Phase::NodesReady, 10)
        .to_line()
        .unwrap()
        .len() as u64
        + 1;
    // Three records per file.
    let config = Config::new()
        .with_max_bytes(line_len * 3)
        .with_keep_files(2);
    let log = AuditLog::open(&path, config).unwrap();
    let records: Vec<Record> = (10..24)
        .map(|i| phase(&format!("su-{i}"), None, Phase::NodesReady, i))
        .collect();
    for r in &records {
        log.append(r).unwrap();
        assert!(log.len() <= line_len * 3);
    }
    // 14 records: 3+3+3+3 in rotated-away files, 2 live; two rotated files are kept.
    let files = rotated_paths(&path).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["audit.jsonl.2", "audit.jsonl.1", "audit.jsonl"]);
    assert!(!dir.path().join("audit.jsonl.3").exists());
    let live = read_files(&[&path]).unwrap();
    assert_eq!(live.records, records[12..]);
    let all = read_files(&files).unwrap();
    assert!(all.bad.is_empty());
    assert_eq!(all.records, records[6..]);
}

#[test]
fn appends_from_many_threads_are_whole_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(
        &path,
        Config::new().with_max_bytes(4096).with_keep_files(100),
    )
    .unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let log = &log;
            s.spawn(move || {
                for i in 0..50 {
                    log.append(&phase(&format!("t{t}-{i}"), None, Phase::NodesReady, i))
                        .unwrap();
                }
            });
        }
    });
    let all = read_files(&rotated_paths(&path).unwrap()).unwrap();
    assert!(all.bad.is_empty(), "{:?}", all.bad);
    assert_eq!(all.records.len(), 200);
    // Each thread's records appear in its own order.
    let mut next = BTreeMap::new();
    for r in &all.records {
        let Event::Phase(p) = &r.event else {
            unreachable!()
        };
        let (t, i) = p.scale_up_id.split_once('-').unwrap();
        let i: u32 = i.parse().unwrap();
        let expected = next.entry(t.to_owned()).or_insert(0);
        assert_eq!(i, *expected, "{}", p.scale_up_id);
        *expected += 1;
    }
}

/// Starts `audit stress`, kills it with SIGKILL once it has acknowledged `acks` records, and
/// checks that the log holds every acknowledged record once, in order, and nothing torn.
fn kill_during_stress(acks: usize, max_bytes: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gangscaler"))
        .args(["audit", "stress", "--file"])
        .arg(&path)
        .args(["--count", "1000000", "--keep", "200", "--pad", "3000"])
        .args(["--max-bytes", &max_bytes.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting gangscaler audit stress");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut acked = Vec::new();
    let mut line = String::new();
    while acked.len() < acks {
        line.clear();
        assert_ne!(out.read_line(&mut line).unwrap(), 0, "stress ended early");
        acked.push(line.trim().parse::<u64>().unwrap());
    }
    let killed = Command::new("kill")
        .args(["-9", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(!status.success(), "{status:?}");
    // Numbers printed before the kill landed were acknowledged too.
    for l in out.lines() {
        acked.push(l.unwrap().trim().parse().unwrap());
    }
    let expected: Vec<u64> = (0..acked.len() as u64).collect();
    assert_eq!(acked, expected, "stress acknowledged out of order");

    // Reopening repairs a torn tail, if the kill left one.
    let config = Config::new().with_max_bytes(max_bytes).with_keep_files(200);
    drop(AuditLog::open(&path, config).unwrap());
    let files = rotated_paths(&path).unwrap();
    let all = read_files(&files).unwrap();
    assert!(all.bad.is_empty(), "after repair: {:?}", all.bad);
    let seqs: Vec<u64> = all.records.iter().map(stress_seq).collect();
    let in_log: Vec<u64> = (0..seqs.len() as u64).collect();
    assert_eq!(seqs, in_log, "every record once, in order, no gap");
    // At most the one record in flight when the kill landed is there unacknowledged.
    assert!(
        seqs.len() == acked.len() || seqs.len() == acked.len() + 1,
        "{} in log, {} acknowledged",
        seqs.len(),
        acked.len()
    );
}

#[test]
fn a_sigkilled_writer_loses_no_acknowledged_record_and_leaves_no_bad_line() {
    for acks in [1, 40, 300] {
        kill_during_stress(acks, 64 << 20);
    }
}

#[test]
fn a_writer_sigkilled_while_rotating_loses_nothing_either() {
    // About 20 records per file: kills land near rotations too.
    for acks in [19, 21, 150, 401] {
        kill_during_stress(acks, 64 << 10);
    }
}

/// Runs `audit lifecycle-stress` on `path`, killing it with SIGKILL after `acks` appended
/// records (`None`: lets it finish); returns whether it finished.
fn lifecycle_stress(path: &Path, scale_ups: u32, acks: Option<usize>) -> bool {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gangscaler"))
        .args(["audit", "lifecycle-stress", "--file"])
        .arg(path)
        .args(["--scale-ups", &scale_ups.to_string(), "--step-ms", "15"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting gangscaler audit lifecycle-stress");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    if let Some(acks) = acks {
        let mut line = String::new();
        for _ in 0..acks {
            line.clear();
            if out.read_line(&mut line).unwrap() == 0 {
                break; // finished before the kill point
            }
        }
        let _ = Command::new("kill")
            .args(["-9", &child.id().to_string()])
            .status()
            .unwrap();
    }
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    child.wait().unwrap().success()
}

#[test]
fn lifecycles_killed_mid_write_reach_their_outcome_exactly_once_after_restarts() {
    // At least 40 decisions and 80 outcomes are written, so every kill point below is reached.
    const SCALE_UPS: u32 = 40;
    for kills in [vec![1], vec![45, 30], vec![100, 2]] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        for (i, acks) in kills.iter().enumerate() {
            let finished = lifecycle_stress(&path, SCALE_UPS, Some(*acks));
            // A restarted run may finish its few remaining records before the kill lands.
            assert!(
                i > 0 || !finished,
                "the first run is killed after {acks} records"
            );
        }
        assert!(
            lifecycle_stress(&path, SCALE_UPS, None),
            "the last run finishes"
        );

        // Reopening repairs a torn tail, if the last kill left one; then every line parses.
        let (_, resumed) = Recorder::open(&path, Config::new(), Timeouts::default()).unwrap();
        assert_eq!(resumed.open, 0, "kills {kills:?}");
        let all = read_files(std::slice::from_ref(&path)).unwrap();
        assert!(all.bad.is_empty(), "kills {kills:?}: {:?}", all.bad);

        let mut decisions: BTreeMap<String, usize> = BTreeMap::new();
        let mut phases: BTreeMap<(String, String), Vec<Phase>> = BTreeMap::new();
        let mut outcomes: BTreeMap<(String, String), Vec<Outcome>> = BTreeMap::new();
        for r in &all.records {
            match &r.event {
                Event::Decision(d) => {
                    *decisions.entry(d.scale_up_id.clone().unwrap()).or_default() += 1;
                }
                Event::Phase(p) => phases
                    .entry((p.scale_up_id.clone(), p.gang.clone().unwrap().name))
                    .or_default()
                    .push(p.phase),
                Event::Outcome(o) => outcomes
                    .entry((o.scale_up_id.clone(), o.gang.clone().unwrap().name))
                    .or_default()
                    .push(o.outcome),
                Event::Reservation(_)
                | Event::Withdrawal(_)
                | Event::Repair(_)
                | Event::Deferral(_) => {}
            }
        }
        assert_eq!(decisions.len(), SCALE_UPS as usize, "kills {kills:?}");
        assert!(decisions.values().all(|n| *n == 1), "{decisions:?}");
        assert_eq!(outcomes.len(), 2 * SCALE_UPS as usize, "kills {kills:?}");
        for ((id, gang), list) in &outcomes {
            let expected = if gang.ends_with("-b") {
                Outcome::AttachFailed
            } else {
                Outcome::Succeeded
            };
            assert_eq!(list, &[expected], "{id} {gang}: exactly one outcome");
        }
        for (key, list) in &phases {
            assert!(
                list.windows(2).all(|w| w[0] < w[1]),
                "{key:?}: phases forward only, none twice: {list:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Restart

#[test]
fn a_restart_resumes_open_scale_ups_without_duplicating_or_dropping_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let timeouts = Timeouts::default();
    let open = || Recorder::open(&path, Config::new(), timeouts).unwrap();

    let (rec, resumed) = open();
    assert_eq!((resumed.records, resumed.open), (0, 0));
    let id = rec
        .decision(&planner_decision(&["a", "b"], 0), 1_000, Some(7))
        .unwrap()
        .expect("an accepted decision gets a scale-up id");
    let mut rejected = planner_decision(&[], 1);
    rejected.verdict = Verdict::Reject;
    rejected.applied_delta = 0;
    assert_eq!(rec.decision(&rejected, 1_001, None).unwrap(), None);
    let n = rec
        .reconcile(2_000, |_| Some(Observation::at(Phase::NodesReady)))
        .unwrap()
        .len();
    assert_eq!(n, 2);
    drop(rec); // "crash"

    // Same cluster state after the restart: nothing new to say.
    let (rec, resumed) = open();
    assert_eq!((resumed.records, resumed.open), (4, 2));
    let n = rec
        .reconcile(2_500, |_| Some(Observation::at(Phase::NodesReady)))
        .unwrap()
        .len();
    assert_eq!(n, 0, "no duplicate phase records");

    // While it was down, a formed and b formed, attached and started.
    let observe = |o: &scaleup::Open| {
        let g = o.gang.as_ref().unwrap();
        Some(if g.name == "a" {
            Observation::at(Phase::GangFormed).with_pending_since_ms(500)
        } else {
            Observation::at(Phase::VolumesAttached)
                .with_outcome(Outcome::Succeeded, "gang running")
                .with_pending_since_ms(400)
        })
    };
    drop(rec);
    let (rec, _) = open();
    assert_eq!(rec.reconcile(3_000, observe).unwrap().len(), 3);
    drop(rec);

    let (rec, resumed) = open();
    assert_eq!(resumed.open, 1);
    assert_eq!(rec.reconcile(3_100, observe).unwrap().len(), 0);
    let n = rec
        .reconcile(4_000, |_| {
            Some(Observation::at(Phase::VolumesAttached).with_outcome(Outcome::Succeeded, "ok"))
        })
        .unwrap()
        .len();
    assert_eq!(n, 2);
    drop(rec);
    let (_, resumed) = open();
    assert_eq!(resumed.open, 0);

    // The whole story, once each.
    let all = read_files(&[&path]).unwrap();
    assert!(all.bad.is_empty());
    let mut phases: BTreeMap<String, Vec<Phase>> = BTreeMap::new();
    let mut outcomes: BTreeMap<String, Vec<OutcomeEvent>> = BTreeMap::new();
    for r in &all.records {
        match &r.event {
            Event::Phase(p) => {
                assert_eq!(p.scale_up_id, id);
                phases
                    .entry(p.gang.as_ref().unwrap().name.clone())
                    .or_default()
                    .push(p.phase);
            }
            Event::Outcome(o) => outcomes
                .entry(o.gang.as_ref().unwrap().name.clone())
                .or_default()
                .push(o.clone()),
            Event::Decision(_)
            | Event::Reservation(_)
            | Event::Withdrawal(_)
            | Event::Repair(_)
            | Event::Deferral(_) => {}
        }
    }
    assert_eq!(
        phases["a"],
        [Phase::NodesReady, Phase::GangFormed, Phase::VolumesAttached]
    );
    assert_eq!(phases["b"], [Phase::NodesReady, Phase::VolumesAttached]);
    let (a, b) = (&outcomes["a"], &outcomes["b"]);
    assert_eq!((a.len(), b.len()), (1, 1));
    assert_eq!(
        (a[0].requested_at_ms, a[0].formed_at_ms, a[0].attached_at_ms),
        (1_000, Some(3_000), Some(4_000))
    );
    assert_eq!(
        (b[0].formed_at_ms, b[0].pending_since_ms, b[0].duration_ms),
        (Some(3_000), Some(400), 2_000)
    );
}

// ---------------------------------------------------------------------------------------------
// Report

/// h100: 20 formed gangs (formation 1..=20 s, pending 60 s more) plus 2 that never formed, one
/// open scale-up and 2 rejections; a100: 3 formed gangs (5, 7, 100 s) and a rejection.
fn synthetic() -> Vec<Record> {
    let mut records = vec![
        rejection("h100", 100),
        rejection("h100", 200),
        rejection("a100", 300),
        Record::new(
            400,
            DecisionEvent::from(&planner_decision(&["late"], 0)).with_scale_up_id("su-open"),
        ),
    ];
    for i in 1..=20i64 {
        let kind = match i {
            18 => Outcome::AttachFailed,
            19 => Outcome::Preempted,
            20 => Outcome::Cancelled,
            _ => Outcome::Succeeded,
        };
        records.push(outcome(&Out {
            group: "h100",
            outcome: kind,
            requested: 1_000_000 * i,
            formed_after: Some(1_000 * i),
            pending_before: Some(60_000),
            attach_failures: u32::from(i == 5) * 2,
            ts: 1_000_000 * i + 500_000,
        }));
    }
    for (n, kind) in [
        (21, Outcome::RegistrationTimeout),
        (22, Outcome::ProvisionFailed),
    ] {
        records.push(outcome(&Out {
            group: "h100",
            outcome: kind,
            requested: 1_000_000 * n,
            formed_after: None,
            pending_before: Some(1),
            attach_failures: 0,
            ts: 1_000_000 * n + 500_000,
        }));
    }
    for (n, secs) in [(30, 5), (31, 7), (32, 100)] {
        records.push(outcome(&Out {
            group: "a100",
            outcome: Outcome::Succeeded,
            requested: 1_000_000 * n,
            formed_after: Some(1_000 * secs),
            pending_before: None,
            attach_failures: 0,
            ts: 1_000_000 * n + 500_000,
        }));
    }
    records
}

#[test]
fn the_report_gives_exact_percentiles_and_rates_per_group_and_overall() {
    let r = Report::compute(&synthetic(), Window::all());
    let h = &r.node_groups["h100"];
    assert_eq!((h.decisions, h.rejected, h.accepted), (3, 2, 1));
    assert_eq!(h.terminal, 22);
    assert_eq!(h.open, 1);
    assert_eq!(h.outcomes["succeeded"], 17);
    assert_eq!(h.outcomes["registrationTimeout"], 1);
    assert_eq!(h.outcomes["formationTimeout"], 0);
    assert_eq!(h.start_success_rate, Some(17.0 / 22.0));
    assert_eq!((h.with_attach_failures, h.formed_or_attach_failed), (2, 20));
    assert_eq!(h.attach_failure_rate, Some(0.1));
    // 20 values, nearest rank: ranks 10, 19, 20.
    assert_eq!(
        (h.formation.p50_ms, h.formation.p95_ms, h.formation.p99_ms),
        (Some(10_000), Some(19_000), Some(20_000))
    );
    assert_eq!(h.formation.count, 20);
    assert_eq!(
        (h.pending.p50_ms, h.pending.p95_ms, h.pending.p99_ms),
        (Some(70_000), Some(79_000), Some(80_000))
    );

    let a = &r.node_groups["a100"];
    assert_eq!(
        (a.formation.p50_ms, a.formation.p95_ms, a.formation.p99_ms),
        (Some(7_000), Some(100_000), Some(100_000))
    );
    assert_eq!(a.pending.count, 0);
    assert_eq!(a.pending.p50_ms, None);
    assert_eq!(a.start_success_rate, Some(1.0));
    assert_eq!(a.attach_failure_rate, Some(0.0));

    // 23 values: 1..=20 s plus 5, 7 and 100 s; ranks 12, 22, 23.
    let all = &r.overall;
    assert_eq!(
        (
            all.formation.p50_ms,
            all.formation.p95_ms,
            all.formation.p99_ms
        ),
        (Some(10_000), Some(20_000), Some(100_000))
    );
    assert_eq!((all.rejected, all.terminal, all.open), (3, 25, 1));
    assert_eq!(all.start_success_rate, Some(20.0 / 25.0));
    assert_eq!(r.records, 29);
}

#[test]
fn the_window_selects_records_by_their_timestamp() {
    let records = synthetic();
    // Outcomes 11..=20 of h100 (recorded at 11.5e6 … 20.5e6); no decision, nothing open.
    let w = Window::new(Some(11_000_000), Some(21_000_000));
    let r = Report::compute(&records, w);
    assert_eq!(r.node_groups.keys().collect::<Vec<_>>(), ["h100"]);
    let h = &r.node_groups["h100"];
    assert_eq!((h.decisions, h.terminal, h.open), (0, 10, 0));
    assert_eq!(
        (h.formation.p50_ms, h.formation.p99_ms),
        (Some(15_000), Some(20_000))
    );
    assert_eq!(h.start_success_rate, Some(0.7));
    // Half-open: an outcome recorded exactly at `until` is out.
    let r = Report::compute(&records, Window::new(None, Some(1_500_000)));
    assert_eq!(
        (r.overall.decisions, r.overall.terminal, r.overall.open),
        (4, 0, 1)
    );
    let r = Report::compute(&records, Window::new(None, Some(1_500_001)));
    assert_eq!(r.overall.terminal, 1);
}

#[test]
fn an_empty_window_has_no_rates_rather_than_zero() {
    let r = Report::compute(&synthetic(), Window::new(Some(i64::MAX - 1), None));
    assert_eq!(r.records, 0);
    assert_eq!(r.overall.start_success_rate, None);
    assert_eq!(r.overall.attach_failure_rate, None);
    assert_eq!(r.overall.formation.p50_ms, None);
    assert!(r.to_table().contains("(all)"));
}

/// The report counts open lifecycles with its own fold over the records (`audit` does not
/// depend on `scaleup`); it must agree with the tracker a restart resumes from.
#[test]
fn the_report_counts_the_lifecycles_the_tracker_leaves_open() {
    let mut records = synthetic();
    // Two gangs of one scale-up (its decision logged twice), one of which ends; a scale-up
    // without gangs; a phase whose decision was rotated away; a rejection carrying an id.
    let two = DecisionEvent::from(&planner_decision(&["x", "y"], 0)).with_scale_up_id("su-two");
    records.push(Record::new(5_000, two.clone()));
    records.push(Record::new(5_001, two));
    records.push(phase("su-two", Some("x"), Phase::GangFormed, 6_000));
    let mut end = outcome(&Out {
        group: "h100",
        outcome: Outcome::Succeeded,
        requested: 5_000,
        formed_after: Some(1_000),
        pending_before: None,
        attach_failures: 0,
        ts: 9_000,
    });
    if let Event::Outcome(o) = &mut end.event {
        o.scale_up_id = "su-two".into();
        o.gang = Some(gang("y"));
    }
    records.push(end);
    let mut bare = DecisionEvent::from(&planner_decision(&[], 0)).with_scale_up_id("su-bare");
    bare.node_group = "a100".into();
    records.push(Record::new(7_000, bare));
    records.push(phase("su-rotated", Some("z"), Phase::NodesReady, 8_000));
    let mut rejected = rejection("a100", 9_500);
    if let Event::Decision(d) = &mut rejected.event {
        d.scale_up_id = Some("su-rejected".into());
    }
    records.push(rejected);

    let tracker = Tracker::resume(Timeouts::default(), &records);
    assert_eq!(
        tracker.open_count(),
        4,
        "su-open, su-two/x, su-bare, su-rotated/z"
    );
    for window in [
        Window::all(),
        Window::new(Some(5_000), None),
        Window::new(None, Some(7_000)),
        Window::new(None, Some(9_001)),
        Window::new(Some(7_990), Some(8_001)),
    ] {
        // Open at the end of the window: what the tracker has open after the records written
        // before `until` (su-two/y ends at 9 000, so it is open at 7 000 but not at 9 001).
        let before_until = records
            .iter()
            .filter(|r| window.until_ms.is_none_or(|u| r.ts_ms < u));
        let tracker = Tracker::resume(Timeouts::default(), before_until);
        let mut expected: BTreeMap<String, u64> = BTreeMap::new();
        for o in tracker
            .open()
            .filter(|o| window.contains(o.requested_at_ms))
        {
            *expected.entry(o.node_group.clone()).or_default() += 1;
        }
        let report = Report::compute(&records, window);
        let got: BTreeMap<String, u64> = report
            .node_groups
            .iter()
            .filter(|(_, s)| s.open > 0)
            .map(|(g, s)| (g.clone(), s.open))
            .collect();
        assert_eq!(got, expected, "{window:?}");
        assert_eq!(report.overall.open, expected.values().sum::<u64>());
    }
}

/// An accepted decision at `ts` on `group` opening scale-up `id` for gang `name`.
fn accepted(id: &str, name: &str, group: &str, ts: i64) -> Record {
    let mut d = DecisionEvent::from(&planner_decision(&[name], 0)).with_scale_up_id(id);
    d.node_group = group.into();
    Record::new(ts, d)
}

/// The outcome of scale-up `id`'s gang `name` on `group`, recorded at `ts`.
fn ended(id: &str, name: &str, group: &str, ts: i64, kind: Outcome) -> OutcomeEvent {
    OutcomeEvent {
        scale_up_id: id.into(),
        node_group: group.into(),
        gang: Some(gang(name)),
        outcome: kind,
        requested_at_ms: 0,
        formed_at_ms: None,
        attached_at_ms: None,
        pending_since_ms: None,
        attach_failures: 0,
        duration_ms: u64::try_from(ts).unwrap(),
        reason: "test".into(),
    }
}

/// The issue's case: `audit report audit.jsonl*` reads the live file before the rotated one,
/// so an outcome was read before the decision that opened its lifecycle.
#[test]
fn a_lifecycle_closed_in_a_later_file_is_not_open_whatever_order_the_files_are_read() {
    let rotated = vec![accepted("su-1", "a", "h100", 1_000)];
    let live = vec![Record::new(
        2_000,
        ended("su-1", "a", "h100", 2_000, Outcome::Succeeded),
    )];
    let in_order: Vec<Record> = rotated.iter().chain(&live).cloned().collect();
    let live_first: Vec<Record> = live.iter().chain(&rotated).cloned().collect();
    let expected = Report::compute(&in_order, Window::all());
    assert_eq!(expected.overall.open, 0);
    assert_eq!(Report::compute(&live_first, Window::all()), expected);

    // Through the files and the command line, as the shell expands `audit.jsonl*`.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    write_lines(&audit::log::rotated_path(&path, 1), &rotated);
    write_lines(&path, &live);
    let p = path.to_str().unwrap();
    let p1 = format!("{p}.1");
    // The JSON report without `asOfMs` (the time of the report).
    let report = |args: &[&str]| {
        let (ok, stdout, stderr) = gangscaler(&[&["audit", "report", "-o", "json"], args].concat());
        assert!(ok, "{args:?}: {stderr}");
        let mut json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        json.as_object_mut().unwrap().remove("asOfMs");
        json
    };
    let glob_order = report(&[p, &p1]);
    assert_eq!(glob_order["overall"]["open"], 0, "{glob_order:#}");
    assert_eq!(glob_order["records"], 2, "{glob_order:#}");
    let rotated_flag = report(&["--rotated", p]);
    assert_eq!(glob_order, rotated_flag);
    // Both at once (`--rotated audit.jsonl*`): every file is read once.
    assert_eq!(report(&["--rotated", p, &p1]), rotated_flag);
}

/// The two `attachFailed` figures and the attach failure rate, on a hand-built log; the
/// expectations are computed from the inputs by the documented definitions.
#[test]
fn attach_failure_rate_counts_each_formed_or_attach_failed_outcome_once() {
    // (outcome, formed, attachFailures)
    let cases = [
        (Outcome::Succeeded, true, 0),
        (Outcome::Succeeded, true, 3), // failed attempts, then attached
        (Outcome::AttachFailed, true, 2), // both criteria: counted once
        (Outcome::AttachFailed, false, 0), // attach error before formation
        (Outcome::FormationTimeout, false, 1), // never formed: in neither
        (Outcome::Cancelled, true, 0),
        (Outcome::Preempted, true, 4),
    ];
    let records: Vec<Record> = cases
        .iter()
        .enumerate()
        .map(|(i, &(kind, formed, failures))| {
            let id = format!("su-{i}");
            let mut o = ended(&id, "g", "h100", 10 + i64::try_from(i).unwrap(), kind);
            o.formed_at_ms = formed.then_some(5);
            o.attach_failures = failures;
            Record::new(10 + i64::try_from(i).unwrap(), o)
        })
        .collect();
    let base: Vec<_> = cases
        .iter()
        .filter(|(kind, formed, _)| *formed || *kind == Outcome::AttachFailed)
        .collect();
    let numerator = base
        .iter()
        .filter(|(kind, _, failures)| *failures > 0 || *kind == Outcome::AttachFailed)
        .count() as u64;
    let kind_count = cases
        .iter()
        .filter(|(kind, ..)| *kind == Outcome::AttachFailed)
        .count() as u64;

    let s = Report::compute(&records, Window::all()).overall;
    assert_eq!(s.formed_or_attach_failed, base.len() as u64);
    assert_eq!(s.with_attach_failures, numerator);
    assert_eq!(s.outcomes["attachFailed"], kind_count);
    assert_ne!(
        s.with_attach_failures, s.outcomes["attachFailed"],
        "two figures"
    );
    let rate = numerator as f64 / base.len() as f64;
    assert_eq!(s.attach_failure_rate, Some(rate));
    assert_eq!(s.terminal, cases.len() as u64);
    // The JSON names say which is which.
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["withAttachFailures"], numerator);
    assert_eq!(json["formedOrAttachFailed"], base.len() as u64);
    assert_eq!(json["outcomes"]["attachFailed"], kind_count);
    assert!(json.get("attachFailed").is_none() && json.get("formed").is_none());
}

/// `open` is relative to the end of the window, and `overdue` to the reference time.
#[test]
fn open_is_judged_at_until_and_overdue_after_the_threshold() {
    use gangscaler::audit::report::Options;
    let requested = 1_000_000;
    let after = 60_000u64;
    let after_i = i64::try_from(after).unwrap();
    let ends = requested + 10 * after_i;
    let records = vec![
        accepted("su-1", "a", "h100", requested),
        Record::new(ends, ended("su-1", "a", "h100", ends, Outcome::Succeeded)),
    ];
    let opts = Options::new().with_overdue_after_ms(after);
    let report = |since: Option<i64>, until: Option<i64>, now: Option<i64>| {
        let o = now.map_or(opts, |n| opts.with_now_ms(n));
        Report::compute_with(&records, Window::new(since, until), o)
    };
    let counts = |r: &Report| (r.overall.open, r.overall.overdue);

    // Ends after `until`: open at `until`; overdue once older than the threshold there.
    assert_eq!(counts(&report(None, Some(ends), None)), (1, 1));
    assert_eq!(
        counts(&report(None, Some(requested + after_i), None)),
        (1, 0)
    );
    assert_eq!(
        counts(&report(None, Some(requested + after_i + 1), None)),
        (1, 1)
    );
    // The time of the report is the reference when it is earlier than `until`.
    let r = report(None, Some(ends), Some(requested + 1));
    assert_eq!((counts(&r), r.as_of_ms), ((1, 0), Some(requested + 1)));
    // Its outcome is before `until`, or there is no `until`: not open.
    assert_eq!(counts(&report(None, Some(ends + 1), None)), (0, 0));
    assert_eq!(counts(&report(None, None, Some(ends * 2))), (0, 0));
    // Requested before the window: not counted, even though open at `until`.
    assert_eq!(
        counts(&report(Some(requested + 1), Some(ends), None)),
        (0, 0)
    );
    // Without an outcome and without `until` or `now`, nothing can be overdue.
    let r = Report::compute_with(&records[..1], Window::all(), opts);
    assert_eq!((counts(&r), r.as_of_ms), ((1, 0), None));
    let r = Report::compute_with(&records[..1], Window::all(), opts.with_now_ms(ends));
    assert_eq!(counts(&r), (1, 1));
    assert_eq!(r.node_groups["h100"].overdue, 1);
}

/// The listed node groups and `records`, on a hand-built log.
#[test]
fn node_groups_listed_are_those_named_in_the_window_or_holding_an_open_lifecycle() {
    let window = Window::new(Some(1_000), Some(2_000));
    // A phase recorded after the window whose lifecycle was requested in it (its decision
    // rotated away): group "c" has no record in the window but an open lifecycle.
    let late_phase = Record::new(
        2_500,
        PhaseEvent {
            scale_up_id: "su-c".into(),
            node_group: "c".into(),
            gang: Some(gang("c")),
            phase: Phase::NodesReady,
            at_ms: 2_500,
            elapsed_ms: 1_000,
            detail: None,
        },
    );
    let records = vec![
        rejection("a", 1_500),
        Record::new(500, ended("su-b", "b", "b", 500, Outcome::Succeeded)),
        Record::new(2_000, ended("su-d", "d", "d", 2_000, Outcome::Succeeded)),
        accepted("su-e", "e", "e", 1_999),
        late_phase,
    ];
    let r = Report::compute(&records, window);
    let expected_records = records.iter().filter(|r| window.contains(r.ts_ms)).count() as u64;
    assert_eq!(r.records, expected_records);
    assert_eq!(r.node_groups.keys().collect::<Vec<_>>(), ["a", "c", "e"]);
    assert_eq!(
        (r.node_groups["c"].open, r.node_groups["c"].decisions),
        (1, 0)
    );
    assert_eq!(r.node_groups["e"].open, 1);
    assert_eq!(r.overall.open, 2);
}

// ---------------------------------------------------------------------------------------------
// CLI

fn gangscaler(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gangscaler"))
        .args(args)
        .output()
        .expect("running gangscaler");
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The synthetic log with a garbage line 5 and a truncated last line.
fn synthetic_file(dir: &Path) -> PathBuf {
    let path = dir.join("audit.jsonl");
    let mut lines: Vec<String> = synthetic().iter().map(|r| r.to_line().unwrap()).collect();
    lines.insert(4, "{\"schema\":1,\"tsMs\":".into());
    let mut text = lines.join("\n");
    text.push_str("\n{\"schema\":1,\"ts");
    fs::write(&path, text).unwrap();
    path
}

#[test]
fn audit_report_json_has_the_numbers_and_names_skipped_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = synthetic_file(dir.path());
    let p = path.to_str().unwrap();
    let (ok, stdout, stderr) = gangscaler(&["audit", "report", p, "-o", "json"]);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["overall"]["formation"]["p50Ms"], 10_000);
    assert_eq!(json["overall"]["formation"]["p99Ms"], 100_000);
    assert_eq!(json["nodeGroups"]["h100"]["formation"]["p95Ms"], 19_000);
    assert_eq!(json["nodeGroups"]["h100"]["attachFailureRate"], 0.1);
    assert_eq!(json["nodeGroups"]["a100"]["startSuccessRate"], 1.0);
    assert_eq!(json["nodeGroups"]["h100"]["outcomes"]["cancelled"], 1);
    assert_eq!(json["overall"]["rejected"], 3);
    assert_eq!(json["records"], 29);
    let bad = json["badLines"].as_array().unwrap();
    assert_eq!(bad.len(), 2);
    assert_eq!(bad[0]["line"], 5);
    assert_eq!(bad[1]["line"], 31);
    assert!(bad[1]["error"].as_str().unwrap().starts_with("truncated"));
    assert!(stderr.contains("audit.jsonl:5: "), "{stderr}");
    assert!(stderr.contains("audit.jsonl:31: truncated"), "{stderr}");
}

#[test]
fn audit_report_table_and_window_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = synthetic_file(dir.path());
    let p = path.to_str().unwrap();
    let (ok, stdout, stderr) = gangscaler(&["audit", "report", p]);
    assert!(ok, "{stderr}");
    let h100 = stdout
        .lines()
        .find(|l| l.starts_with("h100"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(h100.contains("10.0s/19.0s/20.0s"), "{h100}");
    assert!(h100.contains("77.3%"), "{h100}");
    assert!(h100.contains("10.0%"), "{h100}");
    assert!(stdout.contains("2 bad line(s) skipped"), "{stdout}");

    let (ok, stdout, stderr) = gangscaler(&[
        "audit",
        "report",
        p,
        "-o",
        "json",
        "--since",
        "11000000",
        "--until",
        "1970-01-01T05:50:00Z", // 21_000_000 ms
    ]);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["window"]["untilMs"], 21_000_000);
    assert_eq!(json["overall"]["terminal"], 10);

    let (ok, _, stderr) = gangscaler(&["audit", "report", p, "--since", "yesterday-ish"]);
    assert!(!ok);
    assert!(stderr.contains("--since \"yesterday-ish\""), "{stderr}");
}

#[test]
fn audit_report_takes_times_with_a_utc_offset_and_refuses_an_inverted_window() {
    let dir = tempfile::tempdir().unwrap();
    let path = synthetic_file(dir.path());
    let p = path.to_str().unwrap();
    let json_of = |since: &str, until: &str| {
        let (ok, stdout, stderr) = gangscaler(&[
            "audit", "report", p, "-o", "json", "--since", since, "--until", until,
        ]);
        assert!(ok, "{since} {until}: {stderr}");
        serde_json::from_str::<serde_json::Value>(&stdout).unwrap()
    };
    // 11 000 000 ms is 03:03:20Z; 21 000 000 ms is 05:50:00Z.
    let by_ms = json_of("11000000", "21000000");
    let by_offset = json_of("1970-01-01T05:03:20+02:00", "1970-01-01T01:20:00-04:30");
    assert_eq!(by_offset["window"]["sinceMs"], 11_000_000);
    assert_eq!(by_offset["window"]["untilMs"], 21_000_000);
    assert_eq!(by_offset["overall"], by_ms["overall"]);

    let (ok, _, stderr) = gangscaler(&[
        "audit",
        "report",
        p,
        "--since",
        "1970-01-01T07:00:00+02:00",
        "--until",
        "1970-01-01T04:00:00Z",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("--since \"1970-01-01T07:00:00+02:00\"")
            && stderr.contains("--until \"1970-01-01T04:00:00Z\""),
        "{stderr}"
    );
}

#[test]
fn audit_report_reads_rotated_files_oldest_first_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let records = synthetic();
    write_lines(&audit::log::rotated_path(&path, 2), &records[..10]);
    write_lines(&audit::log::rotated_path(&path, 1), &records[10..20]);
    write_lines(&path, &records[20..]);
    let p = path.to_str().unwrap();
    let (ok, stdout, stderr) = gangscaler(&["audit", "report", "--rotated", p, "-o", "json"]);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["records"], 29);
    let files: Vec<&str> = json["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().rsplit('/').next().unwrap())
        .collect();
    assert_eq!(files, ["audit.jsonl.2", "audit.jsonl.1", "audit.jsonl"]);
    let (ok, stdout, _) = gangscaler(&["audit", "report", p, "-o", "json"]);
    assert!(ok);
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["records"], 9);
}

#[test]
fn acknowledged_lines_can_be_copied_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (ok, stdout, stderr) = gangscaler(&[
        "audit",
        "stress",
        "--file",
        path.to_str().unwrap(),
        "--count",
        "3",
        "--pad",
        "4",
        "--copy-to-stdout",
    ]);
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{stdout}");
    let file = fs::read_to_string(&path).unwrap();
    for (i, (copy, in_file)) in lines.chunks(2).zip(file.lines()).enumerate() {
        assert_eq!(copy[0], in_file);
        assert_eq!(copy[1], i.to_string());
    }
}

#[test]
fn audit_report_of_a_missing_file_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-audit.jsonl");
    let (ok, _, stderr) = gangscaler(&["audit", "report", missing.to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("no-such-audit.jsonl"), "{stderr}");
    assert!(stderr.contains("reading audit log"), "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// Docs

#[test]
fn the_examples_in_the_schema_doc_parse() {
    let doc =
        fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/audit-schema.md")).unwrap();
    let blocks: Vec<&str> = doc
        .split("```json\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert_eq!(blocks.len(), 9);
    let mut events = Vec::new();
    for block in blocks {
        let record = Record::parse_line(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
        // The example shows every field the code writes, and no other.
        let written = serde_json::to_value(&record).unwrap();
        let shown: serde_json::Value = serde_json::from_str(block).unwrap();
        assert_eq!(written, shown, "{block}");
        events.push(written["event"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        events,
        [
            "decision",
            "decision",
            "phase",
            "outcome",
            "outcome",
            "reservation",
            "repair",
            "withdrawal",
            "deferral"
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Config

/// Loads a config directory whose provider file has an `audit` section with `file_mode` (the
/// YAML as written, or absent).
fn load_audit_config(
    file_mode: Option<&str>,
) -> Result<gangscaler::config::Loaded, gangscaler::config::Error> {
    let dir = tempfile::tempdir().unwrap();
    let mode = file_mode.map_or(String::new(), |m| format!("  fileMode: {m}\n"));
    fs::write(
        dir.path().join("provider.yaml"),
        format!(
            "server:\n  address: \"127.0.0.1:8086\"\n  plaintext: true\naudit:\n  path: audit.jsonl\n{mode}"
        ),
    )
    .unwrap();
    fs::create_dir(dir.path().join("nodegroups")).unwrap();
    fs::write(
        dir.path().join("nodegroups/gpu-a.yaml"),
        "id: gpu-a\nminSize: 0\nmaxSize: 4\ninstanceType: p5\nregion: r\nzone: z\n\
         capacity:\n  cpu: \"8\"\n  memory: 64Gi\n  ephemeralStorage: 100Gi\n  pods: 110\n",
    )
    .unwrap();
    gangscaler::config::Source::with_env(dir.path(), std::collections::HashMap::new()).load()
}

#[test]
fn audit_file_mode_defaults_to_owner_only_and_takes_a_quoted_octal_mode() {
    let audit_of = |m| load_audit_config(m).unwrap().provider.audit.unwrap();
    assert_eq!(audit_of(None).file_mode, 0o600);
    assert_eq!(audit_of(Some("\"0640\"")).file_mode, 0o640);
    // Unquoted, the leading zero survives: gangscaler's YAML reader keeps `0640` as written
    // (no YAML 1.1 octal or 1.2 decimal guess), so it means the same as quoted.
    assert_eq!(audit_of(Some("0640")).file_mode, 0o640);
    for (written, shown) in [
        ("\"0644x\"", "\"0644x\""),
        ("\"0400\"", "\"0400\""), // the owner cannot write
        ("\"0666\"", "\"0666\""), // others can write
        ("\"0700\"", "\"0700\""), // executable
    ] {
        let err = load_audit_config(Some(written)).unwrap_err();
        let gangscaler::config::Error::Invalid(list) = &err else {
            panic!("{written}: {err:#?}")
        };
        assert_eq!(list.len(), 1, "{written}: {list:#?}");
        assert_eq!(list[0].field, "audit.fileMode", "{written}");
        assert_eq!(list[0].value.as_deref(), Some(shown), "{written}");
        assert!(list[0].file.ends_with("provider.yaml"), "{written}");
    }
}

#[test]
fn the_reservation_example_names_the_gangs_own_taint_value() {
    let doc =
        fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/audit-schema.md")).unwrap();
    let block = doc
        .split("```json\n")
        .find(|b| b.contains("\"event\": \"reservation\""))
        .and_then(|b| b.split("```").next())
        .unwrap();
    let shown: serde_json::Value = serde_json::from_str(block).unwrap();
    let (ns, name) = shown["gang"].as_str().unwrap().split_once('/').unwrap();
    assert_eq!(
        shown["value"].as_str().unwrap(),
        gangscaler::model::reservation::value_for_name(ns, name)
    );
}
