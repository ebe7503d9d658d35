"""Tests of tests/soak/report.py's audit figures: `python3 -m unittest discover -s tests/soak`."""

import json
import os
import tempfile
import unittest

import report


def decision(verdict, rule, applied, gangs=0, deferred=0, covered=0, ungrouped=0):
    return {"event": "decision", "verdict": verdict, "rule": rule, "appliedDelta": applied,
            "gangs": [{"nodes": 1}] * gangs, "deferredTotal": deferred, "covered": covered,
            "ungroupedNodes": ungrouped}


class CoveredNodesAdded(unittest.TestCase):
    def figure(self, records):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "audit.jsonl"), "w", encoding="utf-8") as f:
                for r in records:
                    f.write(json.dumps(r) + "\n")
                f.write("not json\n")
            return report.covered_nodes_added(d)

    def test_only_calls_for_covered_gangs_count_past_the_ungrouped_pods_need(self):
        n = self.figure([
            # CA's delta passed through for a gang in flight elsewhere: 3 nodes for it.
            decision("accept", "no_gangs", 3, covered=1),
            # 2 of 3 for ungrouped pods: 1 for the covered gang.
            decision("accept", "passthrough", 3, covered=2, ungrouped=2),
            # A gang admitted, or one deferred: the nodes are for them, not the covered gang.
            decision("accept", "gangs_admitted", 4, gangs=1, covered=1),
            decision("accept", "ungrouped_only", 1, deferred=1, covered=1, ungrouped=1),
            # Refused, or nothing covered.
            decision("reject", "all_covered", 0, covered=1),
            decision("accept", "no_gangs", 5),
            {"event": "outcome", "appliedDelta": 9, "covered": 1},
        ])
        self.assertEqual(n, 4)

    def test_a_run_without_an_audit_log_adds_none(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(report.covered_nodes_added(d), 0)


def summary(campaign, arm, orphan, seed=1, repeat=1, trace=None):
    return {"schema": report.SUMMARY_SCHEMA, "campaign": campaign, "arm": arm, "seed": seed,
            "repeat": repeat, "capacityRatio": 0.6, "commit": "0123456789", "ca": "1.36.1",
            "k8s": "1.36",
            "trace": trace or {"minutes": 25, "warmupS": 300, "drainS": 240, "peakNodes": 100,
                               "provisionS": [60.0, 180.0], "stockout": 0.1},
            "idleNodeMinutes": {"orphan": orphan, "assembly": 0.0, "reuseWait": 0.0,
                                "afterJob": 0.0, "total": orphan},
            "assembly": {"waitNodeMinutes": 0.0, "floorNodeMinutes": 0.0, "ratio": None},
            "gpuNodeMinutes": 100.0, "work": {"gpuNodeMinutesStarted": 50.0, "gangsStarted": 2,
                                              "arrivedNotStarted": 0},
            "timeToStartS": {"p50": 0, "p95": 10}, "caBackoffs": {},
            "increaseSizeMs": {"p50": 1.0, "p95": 2.0},
            "gangscaler": {"cpuCorePercent": 1.0, "peakRssMiB": 30}}


class NoiseRows(unittest.TestCase):
    def table(self, sums):
        with tempfile.TemporaryDirectory() as d:
            for i, s in enumerate(sums):
                with open(os.path.join(d, f"{i}.json"), "w", encoding="utf-8") as f:
                    json.dump(s, f)
            return report.table(d)

    def test_off_of_another_campaign_on_the_same_trace_is_the_noise_and_other_traces_are_not(self):
        other_trace = {"minutes": 6, "warmupS": 0, "drainS": 0, "peakNodes": 200,
                       "provisionS": [60.0, 180.0], "stockout": 0.1}
        text = self.table([
            summary("after", "off", 121.3), summary("after", "strict", 29.0),
            summary("baseline", "off", 124.6), summary("old", "off", 50.0, trace=other_trace),
            summary("baseline", "off", 10.0, seed=2),
        ])
        after = text.split("#### after")[1].split("#### ")[0]
        self.assertIn("| seed 1 strict − off | -92.3 |", after)
        self.assertIn("| seed 1 off (baseline) − off | +3.3 |", after)
        # Another trace, or another seed, measures nothing about this one.
        self.assertNotIn("(old)", after)
        self.assertEqual(after.count("off (baseline)"), 1)
        baseline = text.split("#### baseline")[1].split("#### ")[0]
        self.assertIn("| seed 1 off (after) − off | -3.3 |", baseline)


if __name__ == "__main__":
    unittest.main()
