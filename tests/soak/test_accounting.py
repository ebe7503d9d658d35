"""Tests of tests/soak/accounting.py: `python3 -m unittest discover -s tests/soak`."""

import unittest

import accounting as acc


def life(first, gone=None, busy=(), created=None, requested=None):
    return {"firstSeenMs": first, "goneMs": gone, "createdMs": created, "requestedMs": requested,
            "busy": [{"fromMs": f, "toMs": t, "gang": g} for f, t, g in busy]}


class Causes(unittest.TestCase):
    def test_a_node_added_for_a_gang_that_never_ran_on_it_is_orphan_until_another_gang_exists(self):
        # Up at 0, idle until gang b (created at 40) binds at 50, b ends at 70, removed at 90.
        lives = {"n1": life(0, gone=90, busy=[(50, 70, "b")])}
        got = acc.causes(lives, {"b": 40}, (0, 100))
        self.assertEqual(got, {"orphan": 40, "assembly": 10, "reuseWait": 0, "afterJob": 20})
        self.assertEqual(sum(got.values()), 90 - 0 - 20)

    def test_a_node_never_used_is_orphan_whether_removed_or_still_there(self):
        lives = {"gone": life(10, gone=30), "open": life(20)}
        got = acc.causes(lives, {}, (0, 100))
        self.assertEqual(got["orphan"], 20 + 80)
        self.assertEqual(got["afterJob"], 0)

    def test_reuse_before_the_next_gang_exists_is_not_orphan_and_the_window_clips(self):
        # Busy with a until 20; c is created at 60 and binds at 70; window starts at 30.
        lives = {"n1": life(0, busy=[(0, 20, "a"), (70, None, "c")])}
        got = acc.causes(lives, {"a": 0, "c": 60}, (30, 100))
        self.assertEqual(got, {"orphan": 0, "assembly": 10, "reuseWait": 30, "afterJob": 0})

    def test_a_gang_created_before_its_node_came_waits_only_while_the_node_exists(self):
        lives = {"n1": life(100, busy=[(130, None, "g")])}
        got = acc.causes(lives, {"g": 0}, (0, 200))
        self.assertEqual(got["assembly"], 30)
        self.assertEqual(got["orphan"], 0)


class Assembly(unittest.TestCase):
    def test_nodes_requested_together_wait_for_the_slowest_and_that_is_the_floor(self):
        # Gang g created at 0; both nodes requested at 10; up after 60 and 120 s; binds at 130.
        lives = {
            "fast": life(70, busy=[(130, None, "g")], created=70, requested=10),
            "slow": life(130, busy=[(130, None, "g")], created=130, requested=10),
        }
        self.assertEqual(acc.assembly(lives, {"g": 0}, (0, 200)), {"g": (60, 60)})

    def test_a_second_round_shows_as_wait_above_the_floor(self):
        # The second node is asked for only when the first is up: it waits 120 s, floor 60 s.
        lives = {
            "first": life(60, busy=[(180, None, "g")], created=60, requested=0),
            "second": life(180, busy=[(180, None, "g")], created=180, requested=60),
        }
        wait, floor = acc.assembly(lives, {"g": 0}, (0, 300))["g"]
        self.assertEqual((wait, floor), (120, 60))
        self.assertGreater(wait, floor)

    def test_a_node_up_before_the_gang_counts_as_already_there_and_gangs_outside_the_window_drop(self):
        lives = {
            "old": life(0, busy=[(100, None, "g")], created=0, requested=-50),
            "new": life(100, busy=[(100, None, "g")], created=100, requested=20),
            "early": life(0, busy=[(5, None, "x")], created=0, requested=-50),
        }
        got = acc.assembly(lives, {"g": 10, "x": 0}, (50, 200))
        # old waits 100 - 10 = 90 (d = 0), new waits 0 (d = 80): floor 80 - 0 = 80.
        self.assertEqual(got, {"g": (90, 80)})

    def test_a_node_requested_before_the_gang_existed_counts_only_the_provisioning_left(self):
        # Requested at 0 for another gang, up at 150; gang g created at 100 with a node
        # requested at 100 and up at 160. The first one made g wait 50, not 150.
        lives = {
            "early": life(150, busy=[(160, None, "g")], created=150, requested=0),
            "own": life(160, busy=[(160, None, "g")], created=160, requested=100),
        }
        wait, floor = acc.assembly(lives, {"g": 100}, (0, 300))["g"]
        self.assertEqual((wait, floor), (10, 10))

    def test_only_fresh_nodes_are_compared_with_the_floor_and_each_counts_once(self):
        # n1 was provisioned for gang x, which used it; g (created at 0) binds at 200 on n1 and
        # on two fresh nodes (100 s and 50 s of provisioning); a second stretch of g on n1 does
        # not count, nor does n1 at all (another gang used it first).
        lives = {
            "n1": life(90, busy=[(90, 150, "x"), (200, 250, "g"), (250, 260, "y"), (260, None, "g")],
                       created=90, requested=0),
            "slow": life(200, busy=[(200, None, "g")], created=200, requested=100),
            "quick": life(150, busy=[(200, None, "g")], created=150, requested=100),
        }
        wait, floor = acc.assembly(lives, {"g": 0, "x": 0, "y": 0}, (0, 300))["g"]
        # quick waits 50 (d = 50), slow 0 (d = 100): floor 100 - 50 = 50.
        self.assertEqual((wait, floor), (50, 50))


if __name__ == "__main__":
    unittest.main()
