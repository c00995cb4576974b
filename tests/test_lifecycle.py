"""The topology status state machine (nimbus/lifecycle.py; reference/jstorm.md §2b, storm.md §4.5)."""

from __future__ import annotations

import itertools
import typing
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nimbus.lifecycle import (
    KILL, REBALANCE, Action, Activate, CompleteUpgrade, Deactivate, DoRebalance, Effect, InvalidTransition, Kill,
    Outcome, Reassign, Rebalance, Remove, RemoveTopology, Rollback, ScheduleAt, StaleTimer, StartUpgrade, Startup,
    transition,
)
from squall.core.zk.records import PendingAction, StormBase, TopologyStatus, decode, encode

T = TopologyStatus
NOW = 1_700_000_000
TIMEOUT = 30  # topology.message.timeout.secs
KILL_DUE = NOW + 5
REBALANCE_DUE = NOW + 7

ACTIONS: tuple[type, ...] = typing.get_args(Action)


def base_in(status: TopologyStatus) -> StormBase:
    """A consistent base in ``status``: killed and rebalancing ones carry their pending action."""
    base = StormBase(name="wordcount", status=status, launch_time_secs=NOW - 100, num_workers=2,
                     component_executors={"spout": 1, "count": 2})
    if status is T.KILLED:
        return replace(base, pending=PendingAction(KILL, 5, KILL_DUE))
    if status is T.REBALANCING:
        return replace(base, prev_status=T.INACTIVE,
                       pending=PendingAction(REBALANCE, 7, REBALANCE_DUE, num_workers=3, num_executors={"count": 4}))
    return base


def instance(action: type) -> Action:
    """One action of each kind; timers match the pending action of :func:`base_in`'s killed and rebalancing bases."""
    if action is Remove:
        return Remove(KILL_DUE)
    if action is DoRebalance:
        return DoRebalance(REBALANCE_DUE)
    return action()


def apply(base: StormBase, action: Action, now: int = NOW) -> Outcome:
    return transition(base, action, now_secs=now, message_timeout_secs=TIMEOUT)


def kinds(effects: tuple[Effect, ...]) -> tuple[str, ...]:
    def kind(effect: Effect) -> str:
        match effect:
            case ScheduleAt(action=action):
                return f"at:{action.verb}"
            case Reassign():
                return "reassign"
            case RemoveTopology():
                return "remove"
    return tuple(kind(e) for e in effects)


BAD, STALE, GONE = "invalid", "stale", "removed"
_ = None  # a no-op: status unchanged, nothing to do
A, I, R, K, U, B = T.ACTIVE, T.INACTIVE, T.REBALANCING, T.KILLED, T.UPGRADING, T.ROLLBACK

#: status → action → (resulting status | BAD | STALE | GONE | _ for "unchanged base", effect kinds)
TABLE: dict[TopologyStatus, dict[type, tuple[object, tuple[str, ...]]]] = {
    A: {Activate: (_, ()), Deactivate: (I, ()), Kill: (K, ("at:remove",)), Rebalance: (R, ("at:do-rebalance",)),
        Remove: (STALE, ()), DoRebalance: (STALE, ()), Startup: (_, ()),
        StartUpgrade: (U, ()), CompleteUpgrade: (BAD, ()), Rollback: (BAD, ())},
    I: {Activate: (A, ()), Deactivate: (_, ()), Kill: (K, ("at:remove",)), Rebalance: (R, ("at:do-rebalance",)),
        Remove: (STALE, ()), DoRebalance: (STALE, ()), Startup: (_, ()),
        StartUpgrade: (BAD, ()), CompleteUpgrade: (BAD, ()), Rollback: (BAD, ())},
    R: {Activate: (BAD, ()), Deactivate: (BAD, ()), Kill: (K, ("at:remove",)), Rebalance: (R, ("at:do-rebalance",)),
        Remove: (STALE, ()), DoRebalance: (I, ("reassign",)), Startup: (_, ("at:do-rebalance",)),
        StartUpgrade: (BAD, ()), CompleteUpgrade: (BAD, ()), Rollback: (BAD, ())},
    K: {Activate: (BAD, ()), Deactivate: (BAD, ()), Kill: (_, ()), Rebalance: (BAD, ()),
        Remove: (GONE, ("remove",)), DoRebalance: (STALE, ()), Startup: (_, ("at:remove",)),
        StartUpgrade: (BAD, ()), CompleteUpgrade: (BAD, ()), Rollback: (BAD, ())},
    U: {Activate: (BAD, ()), Deactivate: (BAD, ()), Kill: (K, ("at:remove",)), Rebalance: (BAD, ()),
        Remove: (STALE, ()), DoRebalance: (STALE, ()), Startup: (_, ()),
        StartUpgrade: (_, ()), CompleteUpgrade: (A, ()), Rollback: (B, ())},
    B: {Activate: (BAD, ()), Deactivate: (BAD, ()), Kill: (K, ("at:remove",)), Rebalance: (BAD, ()),
        Remove: (STALE, ()), DoRebalance: (STALE, ()), Startup: (_, ()),
        StartUpgrade: (BAD, ()), CompleteUpgrade: (A, ()), Rollback: (_, ())},
}


def test_table_covers_every_status_and_action() -> None:
    assert set(TABLE) == set(TopologyStatus)
    for status, row in TABLE.items():
        assert set(row) == set(ACTIONS), status


@pytest.mark.parametrize(("status", "action"), list(itertools.product(TopologyStatus, ACTIONS)),
                         ids=lambda v: getattr(v, "value", getattr(v, "__name__", str(v))))
def test_every_status_and_action(status: TopologyStatus, action: type) -> None:
    expected, effects = TABLE[status][action]
    base, act = base_in(status), instance(action)
    if expected in (BAD, STALE):
        with pytest.raises(InvalidTransition) as raised:
            apply(base, act)
        assert isinstance(raised.value, StaleTimer) == (expected == STALE)
        message = str(raised.value)
        assert "wordcount" in message and status.value in message and act.verb in message
        assert (raised.value.topology, raised.value.status, raised.value.action) == ("wordcount", status, act)
        return
    outcome = apply(base, act)
    assert kinds(outcome.effects) == effects
    if expected == GONE:
        assert outcome.base is None
    elif expected is _:
        assert outcome.base is base
    else:
        assert outcome.base is not None and outcome.base.status is expected


def test_invalid_transition_is_a_value_error_naming_topology_status_and_action() -> None:
    with pytest.raises(ValueError, match=r"cannot activate topology 'wordcount' while it is rebalancing"):
        apply(base_in(T.REBALANCING), Activate())
    with pytest.raises(ValueError, match=r"cannot activate topology 'wordcount' while it is killed"):
        apply(base_in(T.KILLED), Activate())


# --- kill ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("wait", [None, -1, -30])
def test_kill_waits_the_message_timeout_by_default(wait: int | None) -> None:
    outcome = apply(base_in(T.ACTIVE), Kill(wait))
    assert outcome.base == replace(base_in(T.ACTIVE), status=T.KILLED,
                                   pending=PendingAction(KILL, TIMEOUT, NOW + TIMEOUT))
    assert outcome.effects == (ScheduleAt(NOW + TIMEOUT, Remove(NOW + TIMEOUT)),)


@pytest.mark.parametrize("wait", [0, 3, 600])
def test_kill_honours_wait_secs(wait: int) -> None:
    outcome = apply(base_in(T.INACTIVE), Kill(wait))
    assert outcome.base is not None and outcome.base.pending == PendingAction(KILL, wait, NOW + wait)
    assert outcome.effects == (ScheduleAt(NOW + wait, Remove(NOW + wait)),)


def test_kill_then_remove_deletes_the_topology() -> None:
    killed = apply(base_in(T.ACTIVE), Kill(10))
    (timer,) = killed.effects
    assert isinstance(timer, ScheduleAt)
    assert apply(killed.base, timer.action, now=timer.due_secs) == Outcome(None, (RemoveTopology(),))


def test_kill_while_killed_can_hasten_removal_but_not_postpone_it() -> None:
    killed = apply(base_in(T.ACTIVE), Kill(60)).base
    assert apply(killed, Kill(120), now=NOW + 1).base is killed  # later: keep the earlier removal
    assert apply(killed, Kill(59), now=NOW + 1).base is killed  # same due time: nothing to re-arm
    sooner = apply(killed, Kill(0), now=NOW + 1)
    assert sooner.base.pending == PendingAction(KILL, 0, NOW + 1)
    assert sooner.effects == (ScheduleAt(NOW + 1, Remove(NOW + 1)),)
    with pytest.raises(StaleTimer, match="armed for"):  # the first kill's timer is now obsolete
        apply(sooner.base, Remove(NOW + 60), now=NOW + 60)


def test_kill_interrupts_a_rebalance() -> None:
    outcome = apply(base_in(T.REBALANCING), Kill(4))
    assert outcome.base.status is T.KILLED and outcome.base.prev_status is None
    with pytest.raises(StaleTimer):
        apply(outcome.base, DoRebalance(REBALANCE_DUE), now=REBALANCE_DUE)


# --- rebalance ------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [T.ACTIVE, T.INACTIVE])
def test_rebalance_returns_to_the_status_it_interrupted(status: TopologyStatus) -> None:
    request = Rebalance(wait_secs=15, num_workers=4, num_executors={"count": 6}, reassign=True, conf_json='{"a":1}')
    waiting = apply(base_in(status), request)
    assert waiting.base.status is T.REBALANCING and waiting.base.prev_status is status
    assert waiting.base.pending == PendingAction(REBALANCE, 15, NOW + 15, 4, {"count": 6}, True, '{"a":1}')
    assert waiting.effects == (ScheduleAt(NOW + 15, DoRebalance(NOW + 15)),)

    done = apply(waiting.base, DoRebalance(NOW + 15), now=NOW + 15)
    assert done.effects == (Reassign(4, {"count": 6}, True, '{"a":1}'),)
    assert done.base == replace(base_in(status), num_workers=4, component_executors={"spout": 1, "count": 6})


def test_rebalance_waits_the_message_timeout_by_default() -> None:
    assert apply(base_in(T.ACTIVE), Rebalance()).effects == (ScheduleAt(NOW + TIMEOUT, DoRebalance(NOW + TIMEOUT)),)
    assert apply(base_in(T.ACTIVE), Rebalance(wait_secs=-5)).base.pending.delay_secs == TIMEOUT


def test_rebalance_without_rescale_keeps_the_parallelism() -> None:
    waiting = apply(base_in(T.ACTIVE), Rebalance(wait_secs=0)).base
    done = apply(waiting, DoRebalance(NOW))
    assert done.base == base_in(T.ACTIVE)
    assert done.effects == (Reassign(None, {}, False, None),)


def test_a_new_rebalance_while_waiting_replaces_the_old_one_and_keeps_the_previous_status() -> None:
    again = apply(base_in(T.REBALANCING), Rebalance(wait_secs=20, num_workers=1), now=NOW + 1)
    assert again.base.prev_status is T.INACTIVE
    assert again.base.pending == PendingAction(REBALANCE, 20, NOW + 21, num_workers=1)
    with pytest.raises(StaleTimer):
        apply(again.base, DoRebalance(REBALANCE_DUE), now=REBALANCE_DUE)
    done = apply(again.base, DoRebalance(NOW + 21), now=NOW + 21)
    assert done.base.status is T.INACTIVE and done.base.num_workers == 1


# --- startup: delayed actions survive a nimbus restart --------------------------------------------


def restarted(base: StormBase) -> StormBase:
    """What a new leader reads back from ZooKeeper."""
    return decode(StormBase, encode(base))


def test_startup_rearms_a_kill_at_its_original_due_time() -> None:
    killed = restarted(apply(base_in(T.ACTIVE), Kill(100)).base)
    outcome = apply(killed, Startup(), now=NOW + 40)
    assert outcome.base is killed
    assert outcome.effects == (ScheduleAt(NOW + 100, Remove(NOW + 100)),)
    assert apply(killed, Remove(NOW + 100), now=NOW + 100).base is None


def test_startup_fires_an_overdue_kill_at_once() -> None:
    killed = restarted(apply(base_in(T.ACTIVE), Kill(100)).base)
    outcome = apply(killed, Startup(), now=NOW + 500)
    assert outcome.effects == (ScheduleAt(NOW + 500, Remove(NOW + 100)),)
    assert apply(killed, Remove(NOW + 100), now=NOW + 500).effects == (RemoveTopology(),)


def test_startup_rearms_a_rebalance_with_its_arguments() -> None:
    waiting = restarted(apply(base_in(T.INACTIVE), Rebalance(wait_secs=60, num_workers=5)).base)
    outcome = apply(waiting, Startup(), now=NOW + 90)
    assert outcome.effects == (ScheduleAt(NOW + 90, DoRebalance(NOW + 60)),)
    done = apply(waiting, DoRebalance(NOW + 60), now=NOW + 90)
    assert done.base.status is T.INACTIVE
    assert done.effects == (Reassign(5, {}, False, None),)


def test_startup_repairs_records_that_lost_their_pending_action() -> None:
    killed = apply(replace(base_in(T.KILLED), pending=None), Startup())
    assert killed.base.pending == PendingAction(KILL, TIMEOUT, NOW + TIMEOUT)
    assert kinds(killed.effects) == ("at:remove",)

    rebalancing = apply(replace(base_in(T.REBALANCING), pending=None), Startup())
    assert rebalancing.base == base_in(T.INACTIVE) and rebalancing.effects == ()

    stray = replace(base_in(T.ACTIVE), prev_status=T.INACTIVE, pending=PendingAction(KILL, 5, NOW))
    assert apply(stray, Startup()) == Outcome(base_in(T.ACTIVE))


# --- any sequence of valid actions keeps the invariants --------------------------------------------


@dataclass(frozen=True)
class Advance:
    """Test step: time passes and due timers fire."""

    secs: int


@dataclass(frozen=True)
class Restart:
    """Test step: nimbus restarts: its timers are lost, the base is read back, Startup runs."""


waits = st.one_of(st.none(), st.integers(-5, 120))
client_actions = st.one_of(
    st.just(Activate()), st.just(Deactivate()), st.builds(Kill, waits),
    st.builds(Rebalance, waits, st.one_of(st.none(), st.integers(1, 8)),
              st.dictionaries(st.sampled_from(["spout", "count"]), st.integers(1, 8), max_size=2), st.booleans()),
    st.just(StartUpgrade()), st.just(CompleteUpgrade()), st.just(Rollback()),
)
steps = st.lists(st.one_of(client_actions, st.builds(Advance, st.integers(0, 90)), st.just(Restart())), max_size=40)


def check_invariants(base: StormBase, timers: list[tuple[int, Remove | DoRebalance]]) -> None:
    assert (base.pending is not None) == (base.status in (T.KILLED, T.REBALANCING))
    assert (base.prev_status is not None) == (base.status is T.REBALANCING)
    if base.pending is not None:
        assert base.pending.action == (KILL if base.status is T.KILLED else REBALANCE)
        wanted = Remove if base.pending.action == KILL else DoRebalance
        assert any(a == wanted(base.pending.due_secs) for _, a in timers), "pending action with no timer armed"
    if base.prev_status is not None:
        assert base.prev_status in (T.ACTIVE, T.INACTIVE)


@settings(max_examples=300, deadline=None)
@given(start=st.sampled_from([T.ACTIVE, T.INACTIVE]), script=steps)
def test_any_sequence_of_actions_keeps_the_invariants(start: TopologyStatus, script: list[object]) -> None:
    now = NOW
    base: StormBase | None = base_in(start)
    timers: list[tuple[int, Remove | DoRebalance]] = []

    def carry_out(outcome: Outcome) -> StormBase | None:
        assert (outcome.base is None) == (RemoveTopology() in outcome.effects)
        armed = [(e.due_secs, e.action) for e in outcome.effects if isinstance(e, ScheduleAt)]
        assert all(due >= now for due, _action in armed), "a timer armed in the past"
        timers.extend(armed)
        return outcome.base

    def advance(secs: int) -> StormBase | None:
        nonlocal now
        current = base
        target = now + secs
        while current is not None and (due := [t for t in timers if t[0] <= target]):
            timer = min(due, key=lambda t: t[0])
            timers.remove(timer)
            now = timer[0]
            try:
                current = carry_out(apply(current, timer[1], now))
            except StaleTimer:
                pass  # replaced by a later kill or rebalance: expected, and harmless
        now = target
        return current

    for step in script:
        if isinstance(step, Advance):
            base = advance(step.secs)
        elif isinstance(step, Restart):
            timers.clear()
            base = carry_out(apply(restarted(base), Startup(), now))
        else:
            try:
                base = carry_out(apply(base, step, now))
            except StaleTimer:
                pytest.fail("a client action was reported as a stale timer")
            except InvalidTransition:
                pass
        if base is None:
            return  # removed: only a killed topology can get here, checked by carry_out
        check_invariants(base, timers)

    was_killed = base.status is T.KILLED
    base = advance(10_000)  # every wait is over: nothing may be left pending
    if was_killed:
        assert base is None
    else:
        assert base is not None and base.status not in (T.KILLED, T.REBALANCING)
