"""Storm's 10 min, 3 h and 1 day windows made by nimbus from tasks' counters (:mod:`nimbus.windows`), on a
simulated clock: a task beats every few seconds with its counters since it started and its uptime, as
executors do."""

from __future__ import annotations

import doctest

import pytest

import nimbus.windows
from nimbus.windows import MAX_SNAPSHOTS, WINDOW_BUCKETS, StatsWindows, TaskHistory
from squall.core.clock import SimulatedClock
from squall.core.stats import ALL_TIME, WINDOWS
from squall.core.zk.records import TaskBeat, TaskStats

BEAT_SECS = 3


class Spout:
    """A task on ``clock`` that emits and acks at ``rate`` per second (changed at will) and reports its counters
    to ``history`` every :data:`BEAT_SECS`, each tree taking ``latency_ms``."""

    def __init__(self, clock: SimulatedClock, history: TaskHistory) -> None:
        self.clock, self.history = clock, history
        self.started = clock.time()
        self.acked = 0.0
        self.latency_total = 0.0

    def run(self, secs: int, rate: float, latency_ms: float = 1.0) -> None:
        for _ in range(secs // BEAT_SECS):
            self.clock.advance(BEAT_SECS)
            self.acked += rate * BEAT_SECS
            self.latency_total += rate * BEAT_SECS * latency_ms
            self.beat()

    def beat(self) -> None:
        acked = round(self.acked)
        self.history.add(int(self.clock.time() - self.started), TaskStats(
            emitted={"default": acked}, acked={"default": acked} if acked else {},
            latency_ms={"default": self.latency_total / self.acked} if acked else {}))

    def window(self, window: str) -> int:
        return self.history.windows()[window].acked.get("default", 0)


@pytest.fixture
def clock() -> SimulatedClock:
    return SimulatedClock()


def test_a_10_minute_window_drops_old_counts(clock: SimulatedClock) -> None:
    spout = Spout(clock, TaskHistory())
    spout.run(60, rate=10)  # a burst in the first minute: 600 trees
    spout.run(540, rate=0)
    assert [spout.window(w) for w in ("600", "10800", "86400")] == [600, 600, 600], "younger than every window"
    spout.run(30, rate=0)
    assert spout.window("600") == 300, "10 minutes back is half way through the burst"
    spout.run(30, rate=0)
    assert spout.window("600") == 0, "the burst is over 10 minutes old"
    assert (spout.window("10800"), spout.history.windows()["10800"].emitted) == (600, {"default": 600})
    spout.run(3 * 3600, rate=0)
    assert (spout.window("10800"), spout.window("86400")) == (0, 600)


def test_a_steady_rate_fills_each_window_to_its_length_with_bounded_memory(clock: SimulatedClock) -> None:
    spout = Spout(clock, TaskHistory())
    spout.run(2 * 86400, rate=2)
    assert {w: spout.window(w) for w in WINDOW_BUCKETS} == {"600": 1200, "10800": 21600, "86400": 172800}
    assert len(spout.history) <= MAX_SNAPSHOTS == 70, "two days of beats, thinned to Storm's buckets"


def test_a_window_starting_between_two_kept_snapshots_is_interpolated() -> None:
    history = TaskHistory()
    history.add(30, TaskStats(acked={"default": 30}))
    history.add(60, TaskStats(acked={"default": 3030}))  # 3000 in the 30-60 s bucket
    history.add(645, TaskStats(acked={"default": 3030}))
    assert history.windows()["600"].acked == {"default": 1500}, "from 45 s: half the 30-60 s bucket, linearly"


def test_a_rate_change_inside_a_bucket_is_off_by_less_than_that_bucket_s_counts(clock: SimulatedClock) -> None:
    spout = Spout(clock, TaskHistory())
    spout.run(900, rate=1)
    spout.run(15, rate=100)  # 1500 trees from 900 s to 915 s, in the 900-930 s bucket
    spout.run(591, rate=0)  # at 1506 s the window starts at 906 s: 900 of the burst's trees are in it
    assert abs(spout.window("600") - 900) < 1500
    spout.run(9, rate=0)
    assert abs(spout.window("600") - 0) < 1500, "from 915 s: none of the burst, estimated as half the bucket's"
    spout.run(15, rate=0)
    assert spout.window("600") == 0, "from 930 s, past the burst's bucket: exact again"


def test_latency_in_a_window_is_the_average_of_the_trees_it_counts(clock: SimulatedClock) -> None:
    spout = Spout(clock, TaskHistory())
    spout.run(600, rate=5, latency_ms=2.0)
    spout.run(600, rate=5, latency_ms=8.0)
    windows = spout.history.windows()
    assert windows["600"].latency_ms["default"] == pytest.approx(8.0)
    assert windows["10800"].latency_ms["default"] == pytest.approx(5.0), "as old as the task: its average"
    spout.run(600, rate=0)
    assert spout.history.windows()["600"].latency_ms == {}, "no tree completed: no latency"


def test_a_bolt_s_latency_is_weighted_by_the_tuples_it_executed() -> None:
    history = TaskHistory()
    history.add(100, TaskStats(executed={"s:default": 100}, acked={"s:default": 1}, latency_ms={"s:default": 1.0}))
    history.add(1000, TaskStats(executed={"s:default": 200}, acked={"s:default": 2}, latency_ms={"s:default": 2.0}))
    # the window starts at 400 s, a third of the way from 100 s to 1000 s: 133.3 executed then, 200 ms in all
    window = history.windows()["600"]
    assert window.executed == {"s:default": 67}
    assert window.latency_ms["s:default"] == pytest.approx((400 - 200) / (200 - 400 / 3)), "3 ms each"


def test_a_bolt_s_process_latency_is_weighted_by_the_acks_it_timed() -> None:
    history = TaskHistory()
    history.add(100, TaskStats(acked={"s:default": 1000}, processed={"s:default": 10}, process_ms={"s:default": 5.0}))
    history.add(1000, TaskStats(acked={"s:default": 2000}, processed={"s:default": 40},
                                process_ms={"s:default": 20.0}))
    # the window starts at 400 s, a third of the way: 20 timed then, 50 + 10 * 250 = 300 ms in all; 800 ms now
    window = history.windows()["600"]
    assert window.processed == {"s:default": 20}
    assert window.process_ms["s:default"] == pytest.approx((800 - 300) / 20), "sampled: by its own count, not acked"


def test_an_older_worker_s_beats_have_no_process_latency_and_still_window() -> None:
    history = TaskHistory()
    history.add(100, TaskStats(executed={"s:default": 100}, latency_ms={"s:default": 1.0}))
    history.add(1000, TaskStats(executed={"s:default": 200}, latency_ms={"s:default": 2.0}))
    window = history.windows()["600"]
    assert window.process_ms == {} and window.processed == {} and window.executed == {"s:default": 67}


def test_a_restarted_task_counts_from_its_restart(clock: SimulatedClock) -> None:
    history = TaskHistory()
    spout = Spout(clock, history)
    spout.run(1200, rate=10)
    restarted = Spout(clock, history)  # uptime back to 0, counters too
    restarted.run(120, rate=1)
    assert {w: restarted.window(w) for w in WINDOW_BUCKETS} == {"600": 120, "10800": 120, "86400": 120}
    assert len(history) <= 6, "the old life's snapshots are gone"


def test_counters_going_down_without_the_uptime_going_down_are_a_restart_too() -> None:
    history = TaskHistory()
    history.add(5, TaskStats(acked={"default": 50}))
    history.add(9, TaskStats(acked={"default": 4}))  # a new executor beat later in its life than the old one had
    assert history.windows()["600"].acked == {"default": 4}


def test_a_task_nimbus_began_watching_late_is_estimated_at_its_average_rate(clock: SimulatedClock) -> None:
    """After a nimbus restart or a leader change nimbus has no history: the first beat it sees is an hour
    into the task's life."""
    history = TaskHistory()
    history.add(3600, TaskStats(acked={"default": 36_000}))
    assert history.windows()["600"].acked == {"default": 6000}, "10 per second, the task's average since it started"
    history.add(3900, TaskStats(acked={"default": 36_000}))
    assert history.windows()["600"].acked == {"default": 3000}, "300 s estimated, 300 s watched (nothing)"


def test_the_same_beat_reported_twice_changes_nothing(clock: SimulatedClock) -> None:
    spout = Spout(clock, TaskHistory())
    spout.run(900, rate=4)
    before = (spout.history.windows(), len(spout.history))
    spout.beat()
    spout.beat()
    assert (spout.history.windows(), len(spout.history)) == before


def test_nimbus_keeps_histories_per_topology_and_task_and_forgets_removed_topologies() -> None:
    windows = StatsWindows()
    windows.record("wc-1-1", {3: TaskBeat(0, 42, TaskStats(emitted={"default": 7})), 4: TaskBeat(0, 42)})
    windows.record("other-2-2", {3: TaskBeat(0, 700, TaskStats(emitted={"default": 70}))})
    assert windows.windows("wc-1-1") == {3: {w: TaskStats(emitted={"default": 7}) for w in WINDOW_BUCKETS}}, \
        "a beat without stats adds nothing"
    assert windows.windows("other-2-2")[3]["600"].emitted == {"default": 60}
    windows.forget("wc-1-1")
    assert windows.windows("wc-1-1") == {} and windows.windows("other-2-2") != {}


def test_the_windows_are_storm_s_keys_and_the_examples_hold() -> None:
    assert (*WINDOW_BUCKETS, ALL_TIME) == WINDOWS
    assert all(length // bucket == 20 for length, bucket in WINDOW_BUCKETS.values()), "Storm's 20 buckets"
    result = doctest.testmod(nimbus.windows)
    assert result.attempted and not result.failed


def test_only_the_windows_asked_for_are_made() -> None:
    """Health reads the 10-minute window of every task on each ``getClusterInfo``: the others are not computed."""
    windows = StatsWindows()
    windows.record("t", {3: TaskBeat(0, 700, TaskStats(emitted={"default": 7000}))})
    assert list(windows.windows("t", ("600",))[3]) == ["600"]
    assert list(windows.windows("t")[3]) == list(WINDOW_BUCKETS)
