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


if __name__ == "__main__":
    unittest.main()
