//! `gangscaler audit`: the report, the time-window flags, and the synthetic-load commands.

use std::path::PathBuf;

use anyhow::Context;

use super::{AuditCommand, ReportOutput};
use crate::clock::now_ms;

pub(super) fn run_audit(command: AuditCommand) -> anyhow::Result<()> {
    match command {
        AuditCommand::Report {
            logs,
            rotated,
            since,
            until,
            overdue_after,
            output,
        } => run_audit_report(
            &logs,
            rotated,
            (since.as_deref(), until.as_deref()),
            overdue_after,
            output,
        ),
        AuditCommand::Stress {
            file,
            count,
            max_bytes,
            keep,
            pad,
            copy_to_stdout,
        } => run_audit_stress(file, count, max_bytes, keep, pad, copy_to_stdout),
        AuditCommand::LifecycleStress {
            file,
            scale_ups,
            step_ms,
        } => run_lifecycle_stress(file, scale_ups, step_ms),
    }
}

/// An RFC 3339 time (with `Z`, an offset such as `+02:00`, or none for UTC), unix
/// milliseconds, or a duration before `now_ms`.
pub(super) fn parse_time(flag: &str, s: &str, now_ms: i64) -> anyhow::Result<i64> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    if let Ok(t) = s.parse::<jiff::Timestamp>() {
        return Ok(t.as_millisecond());
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        let d = t
            .duration_since(std::time::UNIX_EPOCH)
            .with_context(|| format!("{flag} {s:?}: before 1970"))?;
        return Ok(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    }
    let ago = humantime::parse_duration(s).map_err(|_| {
        anyhow::anyhow!(
            "{flag} {s:?}: expected an RFC 3339 time (2026-05-01T15:00:00Z or \
             2026-05-01T15:00:00+02:00), unix milliseconds or a duration such as 24h"
        )
    })?;
    Ok(now_ms.saturating_sub(i64::try_from(ago.as_millis()).unwrap_or(i64::MAX)))
}

/// The window of `--since` and `--until`.
pub(super) fn parse_window(
    since: Option<&str>,
    until: Option<&str>,
    now_ms: i64,
) -> anyhow::Result<crate::audit::Window> {
    let since_ms = since
        .map(|s| parse_time("--since", s, now_ms))
        .transpose()?;
    let until_ms = until
        .map(|s| parse_time("--until", s, now_ms))
        .transpose()?;
    if let (Some(s), Some(u), Some(since), Some(until)) = (since_ms, until_ms, since, until)
        && s >= u
    {
        let bound = crate::audit::report::rfc3339;
        anyhow::bail!(
            "--since {since:?} ({}) must be earlier than --until {until:?} ({}): \
             the window [since, until) would be empty",
            bound(s),
            bound(u)
        );
    }
    Ok(crate::audit::Window::new(since_ms, until_ms))
}

pub(super) fn run_audit_report(
    logs: &[PathBuf],
    rotated: bool,
    (since, until): (Option<&str>, Option<&str>),
    overdue_after: std::time::Duration,
    output: ReportOutput,
) -> anyhow::Result<()> {
    use crate::audit;
    let now = now_ms();
    let window = parse_window(since, until, now)?;
    let mut files = Vec::new();
    for log in logs {
        if log.is_dir() {
            let every = log.join(format!("{}.jsonl", audit::IDENTITY));
            files.extend(audit::discover(&every)?);
        } else if rotated {
            files.extend(audit::rotated_paths(log)?);
        } else {
            files.push(log.clone());
        }
    }
    let files = audit::log_order(&files);
    let reading = audit::read_files(&files)?;
    for bad in &reading.bad {
        eprintln!("warning: skipped {bad}");
    }
    if reading.bad_unlisted > 0 {
        eprintln!(
            "warning: skipped {} more bad line(s), not listed (at most {} per file are)",
            reading.bad_unlisted,
            audit::read::MAX_BAD_LINES_PER_FILE
        );
    }
    let options = audit::report::Options::new()
        .with_now_ms(now)
        .with_overdue_after_ms(u64::try_from(overdue_after.as_millis()).unwrap_or(u64::MAX));
    let report = audit::Report::compute_with(&reading.records, window, options);
    match output {
        ReportOutput::Json => {
            #[derive(serde::Serialize)]
            #[serde(rename_all = "camelCase")]
            struct Json<'a> {
                #[serde(flatten)]
                report: &'a audit::Report,
                files: Vec<String>,
                bad_lines: &'a [audit::BadLine],
                bad_lines_unlisted: u64,
            }
            let json = Json {
                report: &report,
                files: files.iter().map(|f| f.display().to_string()).collect(),
                bad_lines: &reading.bad,
                bad_lines_unlisted: reading.bad_unlisted,
            };
            println!(
                "{}",
                serde_json::to_string_pretty(&json).context("encoding JSON")?
            );
        }
        ReportOutput::Table => {
            print!("{}", report.to_table());
            if reading.bad_total() > 0 {
                println!(
                    "\n{} bad line(s) skipped (listed on stderr)",
                    reading.bad_total()
                );
            }
        }
    }
    Ok(())
}

pub(super) fn run_audit_stress(
    log: PathBuf,
    count: u64,
    max_bytes: u64,
    keep: u32,
    pad: usize,
    copy_to_stdout: bool,
) -> anyhow::Result<()> {
    use std::io::Write as _;

    use crate::audit::{self, PhaseEvent, Record};
    let config = audit::Config::new()
        .with_max_bytes(max_bytes)
        .with_keep_files(keep)
        .with_copy_to_stdout(copy_to_stdout);
    let log = audit::AuditLog::open(log, config)?;
    if log.repaired_bytes() > 0 {
        eprintln!("repaired a torn tail of {} bytes", log.repaired_bytes());
    }
    let detail = "x".repeat(pad);
    for seq in 0..count {
        let now = now_ms();
        let record = Record::new(
            now,
            PhaseEvent {
                scale_up_id: format!("stress-{seq}"),
                node_group: "stress".into(),
                gang: None,
                phase: audit::Phase::NodesReady,
                at_ms: now,
                elapsed_ms: seq,
                detail: Some(detail.clone()),
            },
        );
        log.append(&record)?;
        // Locked per record: the log takes stdout's lock for its copy.
        let mut out = std::io::stdout().lock();
        writeln!(out, "{seq}")
            .and_then(|()| out.flush())
            .context("writing to stdout")?;
    }
    Ok(())
}

pub(super) fn run_lifecycle_stress(
    log: PathBuf,
    scale_ups: u32,
    step_ms: u64,
) -> anyhow::Result<()> {
    use std::io::Write as _;

    use crate::audit::{
        self, DecisionEvent, Event, Extent, GangId, GangSummary, Outcome, Phase, Record, Verdict,
    };
    use crate::scaleup::{Observation, Recorder, Timeouts};
    let timeouts = Timeouts {
        registration_ms: 3_600_000,
        formation_ms: 3_600_000,
        attach_ms: 3_600_000,
    };
    let (recorder, _) = Recorder::open(&log, audit::Config::new(), timeouts)?;
    let files = audit::rotated_paths(&log)?;
    let written: std::collections::BTreeSet<String> = audit::read_files(&files)?
        .records
        .into_iter()
        .filter_map(|r| match r.event {
            Event::Decision(d) => d.scale_up_id,
            _ => None,
        })
        .collect();
    let gang = |k: u32, side: &str| GangId {
        namespace: "stress".into(),
        name: format!("g{k}-{side}"),
        api_version: "scheduling.k8s.io/v1alpha2".into(),
        kind: "PodGroup".into(),
    };
    let mut out = std::io::stdout().lock();
    let mut ack = |n: usize| -> anyhow::Result<()> {
        for _ in 0..n {
            writeln!(out, "ok").context("writing to stdout")?;
        }
        out.flush().context("writing to stdout")
    };
    for k in 0..scale_ups {
        let id = format!("life-{k}");
        if written.contains(&id) {
            continue;
        }
        let summary = |side| GangSummary {
            repair_of: None,
            spread: Vec::new(),
            gang: gang(k, side),
            priority: 0,
            extent: Extent::Whole,
            nodes: 1,
            idle: 0,
            in_flight: 0,
        };
        let decision = DecisionEvent {
            scale_up_id: Some(id),
            node_group: "stress".into(),
            policy: "strict".into(),
            verdict: Verdict::Accept,
            rule: "gangs_admitted".into(),
            target: 0,
            max_size: 1000,
            headroom: 1000,
            ca_delta: 2,
            applied_delta: 2,
            capped: false,
            gang_nodes: 2,
            ungrouped_nodes: 0,
            gangs: vec![summary("a"), summary("b")],
            deferred: Vec::new(),
            deferred_total: 0,
            covered: 0,
            unhostable: 0,
            duration_ms: None,
            reason: "lifecycle stress".into(),
            reservation_off: None,
            composites: Vec::new(),
        };
        recorder.record(&Record::new(now_ms(), decision))?;
        ack(1)?;
    }
    let step = i64::try_from(step_ms.max(1)).unwrap_or(i64::MAX);
    while !recorder.open_scale_ups().is_empty() {
        let appended = recorder
            .reconcile(now_ms(), |o| {
                let stage = (now_ms() - o.requested_at_ms) / step;
                let phase = Phase::ALL[usize::try_from(stage.clamp(0, 5)).unwrap_or(0)];
                let obs = Observation::at(phase);
                let failing = o.gang.as_ref().is_some_and(|g| g.name.ends_with("-b"));
                Some(match (stage >= 6, failing) {
                    (false, _) => obs,
                    (true, false) => obs.with_outcome(Outcome::Succeeded, "synthetic start"),
                    (true, true) => {
                        obs.with_outcome(Outcome::AttachFailed, "synthetic attach error")
                    }
                })
            })
            .map_err(|(e, _)| e)?;
        ack(appended.len())?;
        std::thread::sleep(std::time::Duration::from_millis(step_ms / 4 + 1));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Tests of the command line's time flags.

    use super::{parse_time, parse_window};

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
}
