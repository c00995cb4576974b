"""Task liveness on nimbus's own clock (nimbus/monitor.py; reference/jstorm.md §5.6, storm.md §4.4)."""

from __future__ import annotations

from nimbus.monitor import HeartbeatTracker, Restarts
from squall.core.clock import SimulatedClock
from squall.core.zk.records import Assignment, TaskBeat, TaskHeartbeats, WorkerAssignment

TOPO = "wordcount-1-1700000000"
TIMEOUT = 30  # nimbus.task.timeout.secs
GRACE = 120  # nimbus.task.launch.secs
START = 1_700_000_000

W1 = WorkerAssignment("sup-1", "host-1", 6700, [1, 2])
W2 = WorkerAssignment("sup-2", "host-2", 6700, [3, 4])


def assignment(start: int = START, **starts: int) -> Assignment:
    """Tasks 1-4 on two workers, all started at ``start`` unless ``t<id>=secs`` says otherwise."""
    task_start = {t: start for t in (1, 2, 3, 4)} | {int(k[1:]): v for k, v in starts.items()}
    return Assignment("/code", [W1, W2], {"sup-1": "host-1", "sup-2": "host-2"}, task_start, start * 1000)


def beats(value: int, tasks: tuple[int, ...] = (1, 2, 3, 4)) -> dict[int, TaskBeat]:
    return {t: TaskBeat(time_secs=value, uptime_secs=value) for t in tasks}


def dead(tracker: HeartbeatTracker, now: int, a: Assignment | None = None) -> frozenset[int]:
    return tracker.dead_tasks(TOPO, a or assignment(), now, task_timeout_secs=TIMEOUT, launch_grace_secs=GRACE)


def dead_workers(tracker: HeartbeatTracker, now: int, a: Assignment | None = None) -> tuple[WorkerAssignment, ...]:
    return tracker.dead_workers(TOPO, a or assignment(), now, task_timeout_secs=TIMEOUT, launch_grace_secs=GRACE)


def past_grace() -> SimulatedClock:
    """A clock just past the launch grace of tasks started at START."""
    return SimulatedClock(start=START + GRACE + 1)


def now(clock: SimulatedClock) -> int:
    return int(clock.time())


def test_a_task_that_keeps_beating_stays_alive() -> None:
    clock, tracker = past_grace(), HeartbeatTracker()
    for i in range(20):
        tracker.record(TOPO, beats(i), now(clock))
        assert dead(tracker, now(clock)) == frozenset()
        clock.advance(10)


def test_a_task_that_stops_dies_after_the_timeout_and_not_before() -> None:
    clock, tracker = past_grace(), HeartbeatTracker()
    tracker.record(TOPO, beats(1), now(clock))
    clock.advance(10)
    tracker.record(TOPO, beats(2, (1, 2, 3)), now(clock))  # task 4 stops here
    last_of_4 = now(clock) - 10
    assert dead(tracker, last_of_4 + TIMEOUT) == frozenset()
    assert dead(tracker, last_of_4 + TIMEOUT + 1) == {4}


def test_an_unchanged_repeated_beat_does_not_refresh() -> None:
    clock, tracker = past_grace(), HeartbeatTracker()
    first = now(clock)
    tracker.record(TOPO, beats(7), first)
    for _ in range(5):  # a zombie repeating its last beat
        clock.advance(10)
        tracker.record(TOPO, beats(7), now(clock))
    assert now(clock) > first + TIMEOUT
    assert dead(tracker, now(clock)) == {1, 2, 3, 4}


def test_the_workers_clock_does_not_matter() -> None:
    clock, tracker = past_grace(), HeartbeatTracker()
    for i in range(10):
        skewed = {1: TaskBeat(i - 10**6, i), 2: TaskBeat(i + 10**6, i),  # far past / far future
                  3: TaskBeat(0, i), 4: TaskBeat(START - i, i)}  # frozen clock / clock running backwards
        tracker.record(TOPO, skewed, now(clock))
        assert dead(tracker, now(clock)) == frozenset()
        clock.advance(10)
    # a beat stamped far in the future still dies on nimbus's time once it stops changing
    assert dead(tracker, now(clock) + TIMEOUT) == {1, 2, 3, 4}


def test_launch_grace_protects_new_tasks() -> None:
    tracker = HeartbeatTracker()
    assert dead(tracker, START) == frozenset()
    assert dead(tracker, START + GRACE) == frozenset()


def test_tasks_never_heard_from_die_after_the_grace() -> None:
    tracker = HeartbeatTracker()
    tracker.record(TOPO, beats(1, (1, 2)), START + 5)
    tracker.record(TOPO, beats(2, (1, 2)), START + GRACE)
    assert dead(tracker, START + GRACE + 1) == {3, 4}


def test_launch_grace_protects_a_moved_task() -> None:
    clock, tracker = past_grace(), HeartbeatTracker()
    tracker.record(TOPO, beats(1), now(clock))
    clock.advance(5)
    moved_at = now(clock)
    moved = assignment(t3=moved_at)  # nimbus re-placed task 3: a fresh start time
    tracker.forget_tasks(TOPO, [3])  # as the monitor does after a reassignment
    for _ in range(GRACE // 10):  # the others keep beating; task 3 stays silent in its new place
        clock.advance(10)
        tracker.record(TOPO, beats(now(clock), (1, 2, 4)), now(clock))
    assert now(clock) == moved_at + GRACE
    assert dead(tracker, now(clock), moved) == frozenset()  # still within its grace
    assert dead(tracker, now(clock) + 1, moved) == {3}


def test_a_moved_task_that_beats_in_its_new_place_lives() -> None:
    tracker = HeartbeatTracker()
    moved_at = START + 500
    tracker.record(TOPO, beats(1), START + 10)
    tracker.record(TOPO, beats(2), moved_at + 20)
    assert dead(tracker, moved_at + 20 + TIMEOUT, assignment(t3=moved_at)) == frozenset()


def test_one_dead_task_marks_its_whole_worker_dead() -> None:
    clock, tracker = past_grace(), HeartbeatTracker()
    tracker.record(TOPO, beats(1), now(clock))
    clock.advance(TIMEOUT)
    tracker.record(TOPO, beats(2, (1, 3, 4)), now(clock))
    clock.advance(1)
    assert dead(tracker, now(clock)) == {2}
    assert dead_workers(tracker, now(clock)) == (W1,)


def test_a_worker_on_a_vanished_supervisor_lives_while_its_tasks_beat() -> None:
    clock, tracker = past_grace(), HeartbeatTracker()
    orphaned = assignment()  # sup-2 is gone from /supervisors: the tracker is not told, and must not care
    for i in range(10):
        tracker.record(TOPO, beats(i), now(clock))
        clock.advance(10)
    assert dead_workers(tracker, now(clock), orphaned) == ()


def test_snapshot_and_restore_give_a_new_leader_a_full_timeout() -> None:
    old_leader = HeartbeatTracker()
    old_leader.record(TOPO, beats(1), START + 200)  # last change the old leader saw
    snapshot = old_leader.snapshot(TOPO, topology_master_id=4)
    assert snapshot == TaskHeartbeats(4, beats(1))

    new_leader = HeartbeatTracker()
    takeover = START + 400  # long after the last change, by anyone's clock
    new_leader.restore(TOPO, snapshot, takeover)
    assert dead(new_leader, takeover + TIMEOUT) == frozenset()
    new_leader.record(TOPO, beats(1), takeover + 20)  # restored value repeated: not a change
    assert dead(new_leader, takeover + TIMEOUT + 1) == {1, 2, 3, 4}


def test_restore_then_beats_keep_tasks_alive() -> None:
    tracker = HeartbeatTracker()
    tracker.restore(TOPO, TaskHeartbeats(4, beats(1)), START + 400)
    tracker.record(TOPO, beats(2), START + 420)
    assert dead(tracker, START + 420 + TIMEOUT) == frozenset()


def test_forget_drops_a_topology() -> None:
    tracker = HeartbeatTracker()
    tracker.record(TOPO, beats(1), START + 200)
    tracker.forget(TOPO)
    assert tracker.snapshot(TOPO, 4) == TaskHeartbeats(4, {})
    assert dead(tracker, START + 201) == {1, 2, 3, 4}  # nothing heard any more
    tracker.forget(TOPO)  # forgetting twice is harmless


def test_forget_tasks_drops_only_those_tasks() -> None:
    tracker = HeartbeatTracker()
    tracker.record(TOPO, beats(1), START + 200)
    tracker.forget_tasks(TOPO, [2, 3])
    assert tracker.snapshot(TOPO, 4) == TaskHeartbeats(4, beats(1, (1, 4)))
    assert dead(tracker, START + 201) == {2, 3}
    tracker.forget_tasks("unknown-topology", [1])


def test_topologies_are_tracked_separately() -> None:
    tracker = HeartbeatTracker()
    tracker.record(TOPO, beats(1), START + 200)
    tracker.record("other-2-1700000000", beats(1), START + 200)
    tracker.forget("other-2-1700000000")
    assert dead(tracker, START + 201) == frozenset()


def test_tasks_without_a_start_time_start_with_their_assignment() -> None:
    legacy = Assignment("/code", [W1, W2], timestamp_ms=START * 1000)  # no task_start_secs
    tracker = HeartbeatTracker()
    assert dead(tracker, START + GRACE, legacy) == frozenset()
    assert dead(tracker, START + GRACE + 1, legacy) == {1, 2, 3, 4}


def test_a_pardon_gives_every_task_a_full_timeout_from_then_and_a_stale_beat_still_dies_after() -> None:
    """After ZooKeeper was away (the monitor could not look), nobody is judged on that time: every task's beat
    counts as seen at the pardon; one that stays silent a full timeout after it is dead as ever."""
    tracker, now = HeartbeatTracker(), START + GRACE + 1
    tracker.record(TOPO, beats(1), now)
    assert dead(tracker, now + TIMEOUT + 30) == {1, 2, 3, 4}, "30 s unseen past the timeout: all dead"
    assert tracker.knows(TOPO) and not tracker.knows("other-1-1")
    tracker.pardon(now + TIMEOUT + 30)
    assert dead(tracker, now + TIMEOUT + 30) == frozenset()
    tracker.record(TOPO, beats(2, (1, 2)), now + TIMEOUT + 31)
    assert dead(tracker, now + 2 * TIMEOUT + 31) == {3, 4}, "a task still silent a timeout after the pardon dies"


def test_a_pardon_covers_tasks_never_heard_from_too() -> None:
    """A leader (re)elected after an outage restored a ``/taskbeats`` snapshot written before the tasks' first
    beats: tasks it never heard from must get a full timeout from its look too (Storm starts each task at the
    leader's first look), not be dead at its first cycle."""
    tracker, now = HeartbeatTracker(), START + GRACE + 60
    tracker.restore(TOPO, TaskHeartbeats(0, beats(1, (1, 2))), now)
    assert dead(tracker, now + 1) == {3, 4}, "unpardoned, never heard from and past the launch grace: dead"
    tracker.pardon(now)
    assert dead(tracker, now + TIMEOUT) == frozenset()
    assert dead(tracker, now + TIMEOUT + 1) == {1, 2, 3, 4}, "silent a full timeout after the pardon: dead"
    tracker.pardon(now - 10)
    assert dead(tracker, now + TIMEOUT + 1) == {1, 2, 3, 4}, "an older pardon does not take a later one back"


def test_restarts_count_each_dead_worker_once_per_assignment_and_only_lately() -> None:
    """A worker judged dead again while its move waits (the same assignment) is one restart; the same slot dead
    again under a later assignment is another; restarts older than the window are dropped."""
    restarts = Restarts(keep_secs=600)
    assert restarts.record("t", ["h1:6700", "h2:6700"], assignment_ms=1_000, now=100) == ["h1:6700", "h2:6700"]
    assert restarts.record("t", ["h1:6700"], assignment_ms=1_000, now=110) == [], "the move is still pending"
    assert restarts.record("t", ["h1:6700"], assignment_ms=2_000, now=200) == ["h1:6700"]
    assert restarts.times("t", now=650) == [100, 100, 200]
    assert restarts.times("t", now=700) == [200] and restarts.times("other", now=700) == []
    restarts.forget("t")
    assert restarts.times("t", now=700) == []
