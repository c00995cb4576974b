"""The XOR acker and the spout's pending table, on explicit time."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, strategies as st

from worker.tracking import AckerState, Completion, SpoutPending, new_id

SPOUT = 4


def test_branching_and_joining_tree_is_acked_once_after_both_branches() -> None:
    """spout -> t1 to A (e1) and B (e2); A -> t3 (e3), B -> t4 (e4) to join C; C acks both."""
    acker = AckerState(timeout_secs=30)
    root, (e1, e2, e3, e4) = new_id(), [new_id() for _ in range(4)]
    assert acker.init(root, e1 ^ e2, SPOUT, now=0) == ()
    assert acker.ack(root, e1 ^ e3, now=1) == ()          # A acked t1, anchored t3
    assert acker.ack(root, e3, now=2) == ()               # C acked t3: B's branch still open
    assert acker.ack(root, e2 ^ e4, now=3) == ()          # B acked t1, anchored t4
    assert acker.ack(root, e4, now=4) == (Completion(root, SPOUT, ok=True),)
    assert len(acker) == 0 and acker.ack(root, e4, now=5) == (), "nothing is acked twice"


@given(st.lists(st.integers(1, 2**64 - 1), min_size=1, max_size=20, unique=True), st.randoms())
def test_any_arrival_order_completes_exactly_once(edges: list[int], rnd: random.Random) -> None:
    """Each edge is reported twice (created, then acked); the tree completes on the last report, whatever the order."""
    root = 99
    reports = [("init", edges[0])] + [("ack", e) for e in edges[1:]] + [("ack", e) for e in edges]
    rnd.shuffle(reports)
    acker = AckerState(timeout_secs=30)
    done = []
    for kind, value in reports:
        done += acker.init(root, value, SPOUT, 0) if kind == "init" else acker.ack(root, value, 0)
    assert done == [Completion(root, SPOUT, ok=True)]


def test_fail_reaches_the_spout_at_once() -> None:
    acker = AckerState(timeout_secs=30)
    acker.init(1, new_id(), SPOUT, 0)
    assert acker.fail(1, 1) == (Completion(1, SPOUT, ok=False),)


def test_fail_before_init_waits_for_the_spout_task() -> None:
    acker = AckerState(timeout_secs=30)
    assert acker.fail(1, 0) == ()
    assert acker.init(1, new_id(), SPOUT, 1) == (Completion(1, SPOUT, ok=False),)


def test_unfinished_trees_fail_after_the_timeout_and_finished_siblings_do_not() -> None:
    acker = AckerState(timeout_secs=30)
    stuck, fine = 1, 2
    acker.init(stuck, new_id(), SPOUT, now=0)
    edge = new_id()
    acker.init(fine, edge, SPOUT, now=0)
    assert acker.ack(fine, edge, now=5) == (Completion(fine, SPOUT, ok=True),)
    assert acker.expire(now=30) == []
    assert acker.expire(now=31) == [Completion(stuck, SPOUT, ok=False)]


def test_spout_pending_caps_in_flight_and_times_out() -> None:
    pending = SpoutPending(max_pending=2, timeout_secs=30)
    ids = itertools.count(1)
    pending.sent(next(ids), "m1", now=0)
    assert pending.can_emit()
    pending.sent(next(ids), "m2", now=10, stream="events")
    assert not pending.can_emit()
    assert pending.complete(1) == ("m1", 0.0, "default", 0.0) and pending.can_emit()
    assert pending.expire(now=40) == [] and pending.expire(now=41) == [("m2", "events")]
    assert pending.complete(2) is None, "a late ack for a timed-out message is ignored"
    assert SpoutPending(max_pending=None, timeout_secs=30).can_emit()


def test_reset_timeout_restarts_a_trees_timer_at_the_acker_and_names_the_spout_to_forward_to() -> None:
    acker = AckerState(timeout_secs=30)
    held, other = 1, 2
    acker.init(held, new_id(), SPOUT, now=0)
    acker.init(other, new_id(), SPOUT, now=10)
    assert acker.reset_timeout(held, now=25) == SPOUT
    assert acker.expire(now=35) == [], "35 s after the held tree's init, but its timer restarted at 25"
    assert acker.expire(now=41) == [Completion(other, SPOUT, ok=False)], "an older timer behind a reset one expires"
    assert acker.expire(now=55) == [] and acker.expire(now=56) == [Completion(held, SPOUT, ok=False)]


def test_reset_timeout_of_an_unknown_or_uninitialised_tree_forwards_nothing() -> None:
    acker = AckerState(timeout_secs=30)
    assert acker.reset_timeout(7, now=0) is None, "unknown root: nothing to reset"
    acker.ack(8, new_id(), now=0)                      # an ack before the spout's init
    assert acker.reset_timeout(8, now=20) is None, "no spout task known yet"
    assert acker.expire(now=40) == [] and len(acker) == 1, "but the timer restarted"


def test_spout_pending_reset_timeout_restarts_the_timer_and_keeps_the_emit_time() -> None:
    pending = SpoutPending(max_pending=None, timeout_secs=30)
    pending.sent(1, "held", now=0)
    pending.sent(2, "other", now=5)
    pending.reset_timeout(1, now=20)
    pending.reset_timeout(9, now=20)                  # unknown (acked or timed out already): ignored
    assert pending.expire(now=40) == [("other", "default")]
    assert pending.complete(1) == ("held", 0.0, "default", 20), "complete latency still counts from the emit"
