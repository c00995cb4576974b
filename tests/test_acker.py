"""The XOR acker and the spout's pending table, on explicit time."""

from __future__ import annotations

import itertools
import random
import time

from hypothesis import given, settings, strategies as st

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


def test_spout_pending_counts_a_batch_trees_rows_against_the_cap_until_it_completes_or_expires() -> None:
    pending = SpoutPending(max_pending=1000, timeout_secs=30)
    pending.sent(1, "batch-a", now=0, rows=600)
    pending.sent(2, "one", now=0)
    assert len(pending) == 601 and pending.can_emit()
    pending.sent(3, "batch-b", now=5, rows=399)
    assert len(pending) == 1000 and not pending.can_emit(), "the cap counts tuples, not trees"
    assert pending.complete_many([1, 9]) == [("batch-a", 0.0, "default", 0.0)] and len(pending) == 400
    assert pending.expire(now=36) == [("one", "default"), ("batch-b", "default")] and len(pending) == 0


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


def test_expiring_half_a_million_trees_at_once_takes_time_linear_in_them() -> None:
    """A rebalance or a lost worker times out a whole backlog in one round: it must not hold the task thread
    (measured in CPU seconds, which a busy machine's other processes do not inflate)."""
    pending = SpoutPending(max_pending=None, timeout_secs=30)
    for root in range(500_000):
        pending.sent(root, f"m{root}", now=root / 100_000)           # emitted over 5 s
    pending.sent(-1, "batch", now=4.0, rows=10)
    pending.sent(-2, "recent", now=20.0)
    started = time.process_time()
    expired = pending.expire(now=40.0)
    took = time.process_time() - started
    assert len(expired) == 500_001 and expired[0] == ("m0", "default") and expired[-1] == ("batch", "default")
    assert len(pending) == 1 and pending.complete(-2) is not None, "the recent tree stays pending"
    assert took < 0.5, f"expiring 500,000 trees took {took:.2f} CPU s"


def test_spout_pending_expires_at_most_the_given_number_oldest_first() -> None:
    pending = SpoutPending(max_pending=None, timeout_secs=30)
    for root, now in enumerate([0, 1, 2, 3, 20]):
        pending.sent(root, f"m{root}", now=now, rows=3 if root == 1 else 1)
    assert pending.expire(now=40, most=2) == [("m0", "default"), ("m1", "default")] and len(pending) == 3
    assert pending.expire(now=40, most=2) == [("m2", "default"), ("m3", "default")] and len(pending) == 1
    assert pending.expire(now=40, most=2) == []


class ReferenceAcker:
    """Storm's acker as a plain model, one record per tree: ``[xor, spout task or None, started, failed]``."""

    def __init__(self, timeout_secs: float) -> None:
        self.timeout_secs = timeout_secs
        self.trees: dict[int, list] = {}

    def _update(self, root: int, value: int, now: float, *, spout_task: int | None = None,
                fail: bool = False) -> list[Completion]:
        tree = self.trees.setdefault(root, [0, None, now, False])
        tree[0] ^= value
        tree[1] = spout_task if spout_task is not None else tree[1]
        tree[3] = tree[3] or fail
        if tree[1] is None or (tree[0] and not tree[3]):
            return []
        del self.trees[root]
        return [Completion(root, tree[1], not tree[3])]

    def init(self, root: int, value: int, spout_task: int, now: float) -> list[Completion]:
        return self._update(root, value, now, spout_task=spout_task)

    def ack(self, root: int, value: int, now: float) -> list[Completion]:
        return self._update(root, value, now)

    def fail(self, root: int, now: float) -> list[Completion]:
        return self._update(root, 0, now, fail=True)

    def reset_timeout(self, root: int, now: float) -> int | None:
        tree = self.trees.get(root)
        if tree is None:
            return None
        tree[2] = now
        return tree[1]

    def expire(self, now: float) -> list[Completion]:
        old = [root for root, tree in self.trees.items() if tree[2] < now - self.timeout_secs]
        return [Completion(root, tree[1], False) for root in old if (tree := self.trees.pop(root))[1] is not None]


@st.composite
def acker_rounds(draw: st.DrawFn) -> list[tuple]:
    """What acker tasks receive, as rounds of messages: whole trees (the spout's init of the XOR of its edges,
    an ack per edge), so trees do complete, in any order (acks before the init too), plus stray acks, fails,
    resets and time passing (whole seconds). Consecutive messages of a kind may share one message, as a
    step's do; each is then sent in the batched form or as one-root calls."""
    messages: list[tuple] = []
    for root in range(1, draw(st.integers(1, 6)) + 1):
        edges = draw(st.lists(st.integers(1, 2**64 - 1), min_size=1, max_size=4))
        init = 0
        for edge in edges:
            init ^= edge
        messages += [("init", root, init, draw(st.sampled_from([4, 5])))] + [("ack", root, edge) for edge in edges]
    roots = st.integers(1, 7)
    messages += draw(st.lists(st.one_of(st.tuples(st.just("ack"), roots, st.integers(0, 3)),
                                        st.tuples(st.just("fail"), roots), st.tuples(st.just("reset"), roots),
                                        st.tuples(st.just("wait"), st.integers(1, 12))), max_size=8))
    order = draw(st.permutations(messages))
    rounds: list[tuple] = []
    for message in order:
        last = rounds[-1] if rounds else None
        if last and last[0] == message[0] != "wait" and (message[0] != "init" or last[1][-1][2] == message[3]) \
                and draw(st.booleans()):
            rounds[-1][1].append(message[1:])
        else:
            rounds.append((message[0], [message[1:]], draw(st.booleans())))
    return rounds


def news_as_completions(news: dict) -> tuple[list[Completion], list[tuple[int, int]]]:
    done = [Completion(root, task, ok) for task, told in news.items()
            for ok, roots in ((True, told.acked), (False, told.failed)) for root in roots]
    return done, [(task, root) for task, told in news.items() for root in told.reset]


@settings(max_examples=300, deadline=None)  # whole rounds; a loaded machine must not fail it on time
@given(acker_rounds())
def test_batched_and_single_root_calls_complete_exactly_as_the_reference_xor_model(rounds: list[tuple]) -> None:
    """Random interleavings of the ``*_many`` forms (an acker round's messages) and the one-root forms give the
    same completions, timeouts, forwarded resets and size as the model, on whole-second times."""
    acker, model, now = AckerState(timeout_secs=10), ReferenceAcker(timeout_secs=10), 0
    for kind, items, batched in rounds:
        resets, got_resets = [], []
        if kind == "wait":
            now += sum(secs for secs, in items)
            assert sorted(acker.expire(now)) == sorted(model.expire(now))
            continue
        if kind == "init":
            expected = [c for root, value, task in items for c in model.init(root, value, task, now)]
            if batched:
                acker.init_many([root for root, _, _ in items], [value for _, value, _ in items], items[0][2], now)
            else:
                got = [c for root, value, task in items for c in acker.init(root, value, task, now)]
        elif kind == "ack":
            expected = [c for root, value in items for c in model.ack(root, value, now)]
            if batched:
                acker.ack_many([root for root, _ in items], [value for _, value in items], now)
            else:
                got = [c for root, value in items for c in acker.ack(root, value, now)]
        elif kind == "fail":
            expected = [c for root, in items for c in model.fail(root, now)]
            if batched:
                acker.fail_many([root for root, in items], now)
            else:
                got = [c for root, in items for c in acker.fail(root, now)]
        else:
            expected = []
            resets = [(task, root) for root, in items if (task := model.reset_timeout(root, now)) is not None]
            if batched:
                acker.reset_many([root for root, in items], now)
            else:
                got = []
                got_resets = [(task, root) for root, in items if (task := acker.reset_timeout(root, now)) is not None]
        if batched:
            got, got_resets = news_as_completions(acker.take_news())
        assert sorted(got) == sorted(expected), (kind, items)
        assert sorted(got_resets) == sorted(resets), (kind, items)
        assert len(acker) == len(model.trees)


def test_between_whole_seconds_a_tree_times_out_late_by_less_than_the_resolution_never_early() -> None:
    acker = AckerState(timeout_secs=30)
    acker.init(1, new_id(), SPOUT, now=0.25)
    assert acker.expire(now=30.5) == [], "its bucket is the second up to 1.0: not yet"
    assert acker.expire(now=31.01) == [Completion(1, SPOUT, ok=False)]
