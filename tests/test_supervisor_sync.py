"""Supervisor sync decisions on plain values: launch, kill, restart with backoff, download and remove code."""

from __future__ import annotations

from typing import Any

from squall.core.zk.records import Assignment, AssignmentType, WorkerAssignment
from supervisor.sync import (
    Backoff, ConfirmSwitch, Download, Kill, Launch, LocalWorker, Plan, RemoveCode, ReportError, UpgradePorts, WorkerSpec,
    plan,
)

ME = "sup-1"
WC = "wc-1-1700000000"
SPEC = WorkerSpec(WC, (1, 2))


def assignments(*workers: tuple[str, int, list[int]], topology_id: str = WC) -> dict[str, Assignment]:
    return {topology_id: Assignment("/code", [WorkerAssignment(s, f"host-{s}", p, t) for s, p, t in workers])}


def run(assigned: dict[str, Assignment], workers: dict[int, LocalWorker] | None = None,
        code: set[str] | set[tuple[str, int]] | None = None, backoff: dict[int, Backoff] | None = None,
        now: float = 100, upgrades: dict[str, UpgradePorts] | None = None) -> Plan:
    """``code``: topology ids (version 1) or (topology id, version) pairs on disk."""
    keys = [c if isinstance(c, tuple) else (c, 1) for c in code or ()]
    return plan(ME, assigned, workers or {}, dict.fromkeys(keys, 0), backoff or {}, now,
                start_timeout_secs=20, worker_timeout_secs=10, upgrades=upgrades)


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
    fetched_before = plan(ME, {WC: update}, {6700: worker()}, {(WC, 1): 4000}, {}, 100,
                          start_timeout_secs=20, worker_timeout_secs=10)
    assert fetched_before.actions == (Download(WC),)
    fetched_for_it = plan(ME, {WC: update}, {6700: worker()}, {(WC, 1): 5000}, {}, 100,
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
        assert "(code version 1)" in report.message
        assert launch == Launch(6700, SPEC)
        assert p.backoff[6700] == Backoff(1, 100), "the first restart is immediate"


def test_a_worker_stopped_on_request_is_relaunched_at_once_as_no_failure() -> None:
    p = run(assignments((ME, 6700, [1, 2])), {6700: worker(alive=False, stop_requested=True)}, {WC},
            {6700: Backoff(3, 0)})
    assert p.actions == (Kill(6700, "w-6700", "stopped on request"), Launch(6700, SPEC)), "nothing reported"
    assert 6700 not in p.backoff, "and it does not count towards a crash loop"
    still_running = run(assignments((ME, 6700, [1, 2])), {6700: worker(stop_requested=True)}, {WC})
    assert still_running.actions == (), "until it has exited, it is left to finish"


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


def test_the_backoff_holds_exactly_the_assigned_ports_whose_worker_is_down() -> None:
    """The supervisor publishes these ports as failing: a relaunched worker that has not beaten yet is still
    down, and a port no longer assigned (its topology killed while it waited) is nobody's failure."""
    state = {6700: Backoff(3, 150)}
    assert set(run(assignments((ME, 6700, [1, 2])), {6700: worker(last_beat_secs=None)}, {WC}, state).backoff) \
        == {6700}
    assert run(assignments((ME, 6700, [1, 2])), {}, {WC}, state).backoff == state, "waiting to relaunch"
    assert run({}, {}, set(), state).backoff == {}


# --- gray upgrade: ports switch code versions -----------------------------------------------------

V2 = WorkerSpec(WC, (1, 2), 2)


def test_a_port_marked_upgrading_switches_to_the_new_version_and_is_confirmed_only_once_it_beats() -> None:
    assigned = assignments((ME, 6700, [1, 2]), (ME, 6701, [3]))
    upgrade = {WC: UpgradePorts(2, upgrading=frozenset({6700}))}
    old = {6700: worker(), 6701: worker(WorkerSpec(WC, (3,)))}
    p = run(assigned, old, {WC}, upgrades=upgrade)
    assert p.actions == (Kill(6700, "w-6700", "switching from code version 1 to 2"), Download(WC, 2), Launch(6700, V2))
    starting = {6700: worker(V2, last_beat_secs=None, started_secs=99), 6701: old[6701]}
    assert run(assigned, starting, {WC, (WC, 2)}, upgrades=upgrade).actions == (), "not confirmed before it beats"
    beating = {6700: worker(V2), 6701: old[6701]}
    assert run(assigned, beating, {WC, (WC, 2)}, upgrades=upgrade).actions == (ConfirmSwitch(WC, 6700, False),)
    done = {WC: UpgradePorts(2, upgraded=frozenset({6700}))}
    assert run(assigned, beating, {WC, (WC, 2)}, upgrades=done).actions == (), "upgraded ports stay on the new version"


def test_a_crash_looping_new_version_is_never_confirmed() -> None:
    assigned = assignments((ME, 6700, [1, 2]))
    upgrade = {WC: UpgradePorts(2, upgrading=frozenset({6700}))}
    state: dict[int, Backoff] = {}
    for now in (100.0, 101.0, 103.0, 107.0):
        p = run(assigned, {6700: worker(V2, alive=False)}, {WC, (WC, 2)}, state, now, upgrade)
        state = dict(p.backoff)
        assert not any(isinstance(a, ConfirmSwitch) for a in p.actions)
        assert any(isinstance(a, ReportError) and "(code version 2) exited" in a.message for a in p.actions)


def test_rolling_back_puts_every_port_on_the_assignment_version_at_once() -> None:
    assigned = assignments((ME, 6700, [1, 2]))
    rollback = {WC: UpgradePorts(2, rollback=True, upgrading=frozenset({6700}))}
    failing = Backoff(4, 1000)  # the new version was crash-looping: the switch back must not wait for that
    p = run(assigned, {6700: worker(V2)}, {WC, (WC, 2)}, {6700: failing}, upgrades=rollback)
    assert p.actions == (Kill(6700, "w-6700", "switching from code version 2 to 1"), Launch(6700, SPEC))
    assert 6700 not in p.backoff
    back = run(assigned, {6700: worker()}, {WC, (WC, 2)}, upgrades=rollback)
    assert back.actions == (ConfirmSwitch(WC, 6700, True), RemoveCode(WC, 2)), "the new version's code is no longer used"


def test_after_completion_the_assignment_version_is_the_new_one_and_the_old_code_goes() -> None:
    done = Assignment("/code", [WorkerAssignment(ME, "h", 6700, [1, 2])], code_version=2)
    assert run({WC: done}, {6700: worker(V2)}, {WC, (WC, 2)}).actions == (RemoveCode(WC, 1),)


def test_updated_code_is_fetched_for_its_conf_and_taken_by_a_worker_only_when_it_next_starts() -> None:
    update = {WC: Assignment("/code", [WorkerAssignment(ME, "h", 6700, [1, 2])], timestamp_ms=5000,
                             type=AssignmentType.UPDATE, code_version=2)}
    running_v1 = {6700: worker()}
    assert run(update, running_v1).actions == (Download(WC, 2),), "fetched at once: the worker reads its conf"
    fetched = plan(ME, update, running_v1, {(WC, 1): 0, (WC, 2): 5000}, {}, 100, start_timeout_secs=20,
                   worker_timeout_secs=10)
    assert fetched.actions == (), "the running worker keeps its code, and its code stays"
    died = plan(ME, update, {6700: worker(alive=False)}, {(WC, 1): 0, (WC, 2): 5000}, {}, 100,
                start_timeout_secs=20, worker_timeout_secs=10)
    assert died.actions[-1] == Launch(6700, V2), "its next start is on the new version"
