"""Supervisor sync decisions on plain values: launch, kill, restart with backoff, download and remove code."""

from __future__ import annotations

from typing import Any

from squall.zk.records import Assignment, AssignmentType, WorkerAssignment
from supervisor.sync import (
    Backoff, Download, Kill, Launch, LocalWorker, Plan, RemoveCode, ReportError, WorkerSpec, plan,
)

ME = "sup-1"
WC = "wc-1-1700000000"
SPEC = WorkerSpec(WC, (1, 2))


def assignments(*workers: tuple[str, int, list[int]], topology_id: str = WC) -> dict[str, Assignment]:
    return {topology_id: Assignment("/code", [WorkerAssignment(s, f"host-{s}", p, t) for s, p, t in workers])}


def run(assigned: dict[str, Assignment], workers: dict[int, LocalWorker] | None = None,
        code: set[str] | None = None, backoff: dict[int, Backoff] | None = None, now: float = 100) -> Plan:
    return plan(ME, assigned, workers or {}, dict.fromkeys(code or (), 0), backoff or {}, now,
                start_timeout_secs=20, worker_timeout_secs=10)


def worker(spec: WorkerSpec = SPEC, **kw: Any) -> LocalWorker:
    kw.setdefault("alive", True)
    kw.setdefault("started_secs", 50)
    kw.setdefault("last_beat_secs", 95)
    return LocalWorker(spec, "w-6700", **kw)


def test_new_assignment_downloads_code_then_launches_only_our_workers() -> None:
    p = run(assignments((ME, 6700, [2, 1]), ("sup-2", 6700, [3])))
    assert p.actions == (Download(WC), Launch(6700, SPEC))


def test_healthy_worker_is_left_alone_even_when_its_tasks_change() -> None:
    assert run(assignments((ME, 6700, [1, 2])), {6700: worker()}, {WC}).actions == ()
    moved_tasks = run(assignments((ME, 6700, [1, 2, 5])), {6700: worker()}, {WC})
    assert moved_tasks.actions == (), "the worker refreshes its own tasks"


def test_a_newer_update_assignment_fetches_the_code_again_without_touching_the_worker() -> None:
    update = Assignment("/code", [WorkerAssignment(ME, "h", 6700, [1, 2])], timestamp_ms=5000,
                        type=AssignmentType.UPDATE)
    fetched_before = plan(ME, {WC: update}, {6700: worker()}, {WC: 4000}, {}, 100,
                          start_timeout_secs=20, worker_timeout_secs=10)
    assert fetched_before.actions == (Download(WC),)
    fetched_for_it = plan(ME, {WC: update}, {6700: worker()}, {WC: 5000}, {}, 100,
                          start_timeout_secs=20, worker_timeout_secs=10)
    assert fetched_for_it.actions == ()


def test_unassigned_worker_is_killed_and_its_code_removed() -> None:
    p = run({}, {6700: worker()}, {WC})
    assert p.actions == (Kill(6700, "w-6700", "no longer assigned"),)
    assert run({}, {}, {WC}).actions == (RemoveCode(WC),), "code goes once no worker uses it"


def test_port_given_to_another_topology_replaces_the_worker() -> None:
    other = "other-2-1700000000"
    p = run(assignments((ME, 6700, [1]), topology_id=other), {6700: worker()}, {WC, other})
    assert p.actions == (Kill(6700, "w-6700", "no longer assigned"), Launch(6700, WorkerSpec(other, (1,))))
    assert RemoveCode(WC) not in p.actions, "code stays while a worker of it may still be stopping"


def test_dead_workers_are_killed_reported_and_restarted() -> None:
    cases = {
        "exited": worker(alive=False),
        "did not start within 20s": worker(last_beat_secs=None, started_secs=79),
        "stopped heartbeating for more than 10s": worker(last_beat_secs=89),
    }
    for problem, w in cases.items():
        p = run(assignments((ME, 6700, [1, 2])), {6700: w}, {WC})
        kill, report, launch = p.actions
        assert kill == Kill(6700, "w-6700", problem)
        assert isinstance(report, ReportError) and problem in report.message and report.tasks == (1, 2)
        assert launch == Launch(6700, SPEC)
        assert p.backoff[6700] == Backoff(1, 100), "the first restart is immediate"


def test_within_the_start_timeout_a_silent_worker_is_given_time() -> None:
    assert run(assignments((ME, 6700, [1, 2])), {6700: worker(last_beat_secs=None, started_secs=81)}, {WC}).actions == ()


def test_a_crash_loop_backs_off_exponentially_up_to_a_minute() -> None:
    state: dict[int, Backoff] = {}
    now = 100.0
    delays, reports = [], []
    for _ in range(9):
        p = run(assignments((ME, 6700, [1, 2])), {6700: worker(alive=False)}, {WC}, state, now)
        state = dict(p.backoff)
        reports += [a.message for a in p.actions if isinstance(a, ReportError)]
        delays.append(state[6700].not_before_secs - now)
        if delays[-1]:
            early = run(assignments((ME, 6700, [1, 2])), {}, {WC}, state, state[6700].not_before_secs - 0.5)
            assert Launch(6700, SPEC) not in early.actions, "no launch before the backoff has passed"
        now = state[6700].not_before_secs
        assert Launch(6700, SPEC) in run(assignments((ME, 6700, [1, 2])), {}, {WC}, state, now).actions
    assert delays == [0, 1, 2, 4, 8, 16, 32, 60, 60]
    assert reports[0].endswith("exited; restarting it now")
    assert reports[-1].endswith("exited; restarting it in 60s (9 failures in a row)"), "the log says why it waits"


def test_a_worker_that_comes_up_clears_its_backoff() -> None:
    p = run(assignments((ME, 6700, [1, 2])), {6700: worker()}, {WC}, {6700: Backoff(5, 0)})
    assert 6700 not in p.backoff
