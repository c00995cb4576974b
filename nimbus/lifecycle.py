"""The topology status state machine: (StormBase, action) → new StormBase and effects.

Pure: no I/O, no threads, no clock (``now_secs`` comes in). The adapter holds the per-topology lock,
reads ``/topology/<id>``, calls :func:`transition` and carries out the outcome:

* :class:`Reassign` and :class:`RemoveTopology` run *before* the new base is written (or the node
  deleted), and :class:`ScheduleAt` timers are armed *after* it. A crash in between then leaves the
  old ``pending`` in ZooKeeper, and :class:`Startup` on the next leader re-arms it, so the work is
  redone rather than lost.
* A :class:`ScheduleAt` timer calls :func:`transition` with its action when due. A timer that a later
  kill or rebalance made obsolete raises :class:`StaleTimer`; the adapter logs and drops it, so it
  never has to cancel timers to be correct.

Where this departs from JStorm (reference/jstorm.md §2b): an action that does not apply to the
current status raises :class:`InvalidTransition` instead of passing silently; a rebalance returns to
the status it interrupted (not always active); and the rebalance's arguments live in
``StormBase.pending``, so a rebalance interrupted by a nimbus restart still happens.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

from squall.core.zk.records import PendingAction, StormBase, TopologyStatus

ACTIVE = TopologyStatus.ACTIVE
INACTIVE = TopologyStatus.INACTIVE
REBALANCING = TopologyStatus.REBALANCING
KILLED = TopologyStatus.KILLED
UPGRADING = TopologyStatus.UPGRADING
ROLLBACK = TopologyStatus.ROLLBACK

#: ``PendingAction.action`` values.
KILL = "kill"
REBALANCE = "rebalance"


# --- actions: what happens to a topology ------------------------------------------------------


@dataclass(frozen=True)
class Activate:
    verb: ClassVar[str] = "activate"


@dataclass(frozen=True)
class Deactivate:
    verb: ClassVar[str] = "deactivate"


@dataclass(frozen=True)
class Kill:
    """Stop now, remove after ``wait_secs`` so in-flight tuples can finish; None or negative: the message timeout."""

    verb: ClassVar[str] = "kill"
    wait_secs: int | None = None


@dataclass(frozen=True)
class Rebalance:
    """Re-place the topology after ``wait_secs`` (same default as :class:`Kill`), optionally rescaled."""

    verb: ClassVar[str] = "rebalance"
    wait_secs: int | None = None
    num_workers: int | None = None
    num_executors: dict[str, int] = field(default_factory=dict)
    reassign: bool = False
    conf_json: str | None = None


@dataclass(frozen=True)
class Remove:
    """Timer: a kill's wait is over. ``due_secs`` is the pending kill it was armed for, to spot stale timers."""

    verb: ClassVar[str] = "remove"
    due_secs: int


@dataclass(frozen=True)
class DoRebalance:
    """Timer: a rebalance's wait is over; the arguments are read from ``StormBase.pending``."""

    verb: ClassVar[str] = "do-rebalance"
    due_secs: int


@dataclass(frozen=True)
class Startup:
    """This nimbus just became leader: re-arm the delayed action the base records."""

    verb: ClassVar[str] = "startup"


@dataclass(frozen=True)
class StartUpgrade:
    """A gray upgrade starts (or its next batch is asked for)."""

    verb: ClassVar[str] = "start-upgrade"


@dataclass(frozen=True)
class CompleteUpgrade:
    """The gray upgrade is over: every batch done, expired, completed by the operator, or rolled back."""

    verb: ClassVar[str] = "complete-upgrade"


@dataclass(frozen=True)
class Rollback:
    """Back to the old code: asked by the operator, or a task died during the upgrade."""

    verb: ClassVar[str] = "rollback"


Action = (
    Activate
    | Deactivate
    | Kill
    | Rebalance
    | Remove
    | DoRebalance
    | Startup
    | StartUpgrade
    | CompleteUpgrade
    | Rollback
)


# --- effects: what the adapter must do --------------------------------------------------------


@dataclass(frozen=True)
class ScheduleAt:
    """Arm a timer that feeds ``action`` back into :func:`transition` at ``due_secs`` (epoch, nimbus clock)."""

    due_secs: int
    action: Remove | DoRebalance


@dataclass(frozen=True)
class Reassign:
    """Apply the rescale to the code store and ``/tasks``, then push a rebalance assign event and wait."""

    num_workers: int | None
    num_executors: dict[str, int]
    reassign: bool
    conf_json: str | None


@dataclass(frozen=True)
class RemoveTopology:
    """Delete the topology: its ``/topology`` node, assignment, tasks, beats, errors, code and timers."""


Effect = ScheduleAt | Reassign | RemoveTopology


@dataclass(frozen=True)
class Outcome:
    """The new base (None: the topology is gone) and the effects to carry out, in order.

    ``base is`` the input base when nothing changed, so the adapter can skip the write.
    """

    base: StormBase | None
    effects: tuple[Effect, ...] = ()


class InvalidTransition(ValueError):
    """The action does not apply to the topology's current status; a client sees this as an error."""

    def __init__(self, base: StormBase, action: Action, detail: str = "") -> None:
        self.topology = base.name
        self.status = base.status
        self.action = action
        super().__init__(f"cannot {action.verb} topology {base.name!r} while it is {base.status.value}{detail}")


class StaleTimer(InvalidTransition):
    """A timer fired for a pending action that was replaced or already done: drop it, it is expected."""


# --- the machine ------------------------------------------------------------------------------

#: Transitions that only set the status; the rest are handled in :func:`transition`.
_MOVES: dict[tuple[TopologyStatus, type], TopologyStatus] = {
    (ACTIVE, Activate): ACTIVE,  # no-op success (as Storm): a retried activate must not fail
    (INACTIVE, Activate): ACTIVE,
    (ACTIVE, Deactivate): INACTIVE,
    (INACTIVE, Deactivate): INACTIVE,  # no-op success, symmetric with activate
    (ACTIVE, StartUpgrade): UPGRADING,
    (UPGRADING, StartUpgrade): UPGRADING,  # the next batch of the same upgrade
    (UPGRADING, Rollback): ROLLBACK,
    (ROLLBACK, Rollback): ROLLBACK,  # another dead task while rolling back
    (UPGRADING, CompleteUpgrade): ACTIVE,
    (ROLLBACK, CompleteUpgrade): ACTIVE,
}

_REBALANCEABLE = frozenset({ACTIVE, INACTIVE, REBALANCING})


def transition(base: StormBase, action: Action, *, now_secs: int, message_timeout_secs: int) -> Outcome:
    """Apply ``action`` to ``base``; raise :class:`InvalidTransition` when it does not apply.

    ``message_timeout_secs`` is the topology's ``topology.message.timeout.secs``, the default wait of
    kill and rebalance: long enough for tuples already in flight to be acked or time out.
    """
    match action:
        case Kill():
            return _kill(base, action, now_secs, message_timeout_secs)
        case Rebalance() if base.status in _REBALANCEABLE:
            return _rebalance(base, action, now_secs, message_timeout_secs)
        case Remove() | DoRebalance():
            return _fire(base, action)
        case Startup():
            return _startup(base, now_secs, message_timeout_secs)
    status = _MOVES.get((base.status, type(action)))
    if status is None:
        raise InvalidTransition(base, action)
    return Outcome(base if status is base.status else replace(base, status=status))


def _wait(wait_secs: int | None, message_timeout_secs: int) -> int:
    return message_timeout_secs if wait_secs is None or wait_secs < 0 else wait_secs


def _resume_status(base: StormBase) -> TopologyStatus:
    """The status a rebalance returns to; active if the record lost it."""
    return base.prev_status or ACTIVE


def _kill(base: StormBase, action: Kill, now_secs: int, message_timeout_secs: int) -> Outcome:
    """Killed at once; removal is due after the wait. A repeated kill can hasten removal, never postpone it."""
    delay = _wait(action.wait_secs, message_timeout_secs)
    due = now_secs + delay
    earlier = base.pending
    if base.status is KILLED and earlier is not None and earlier.action == KILL and earlier.due_secs <= due:
        return Outcome(base)
    killed = replace(base, status=KILLED, prev_status=None, pending=PendingAction(KILL, delay, due))
    return Outcome(killed, (ScheduleAt(due, Remove(due)),))


def _rebalance(base: StormBase, action: Rebalance, now_secs: int, message_timeout_secs: int) -> Outcome:
    """Rebalancing until the wait is over. A new rebalance while one waits replaces it (latest wins)."""
    delay = _wait(action.wait_secs, message_timeout_secs)
    due = now_secs + delay
    pending = PendingAction(
        REBALANCE, delay, due, action.num_workers, dict(action.num_executors), action.reassign, action.conf_json
    )
    prev = _resume_status(base) if base.status is REBALANCING else base.status
    rebalancing = replace(base, status=REBALANCING, prev_status=prev, pending=pending)
    return Outcome(rebalancing, (ScheduleAt(due, DoRebalance(due)),))


def _fire(base: StormBase, action: Remove | DoRebalance) -> Outcome:
    """A timer is due: act only if it is the one the base still waits for."""
    status, kind = (KILLED, KILL) if isinstance(action, Remove) else (REBALANCING, REBALANCE)
    pending = base.pending
    if base.status is not status or pending is None or pending.action != kind or pending.due_secs != action.due_secs:
        waiting = f"{pending.action} due at {pending.due_secs}" if pending else "nothing"
        raise StaleTimer(base, action, f" (timer armed for {action.due_secs}; pending: {waiting})")
    if isinstance(action, Remove):
        return Outcome(None, (RemoveTopology(),))
    resumed = replace(
        base,
        status=_resume_status(base),
        prev_status=None,
        pending=None,
        num_workers=base.num_workers if pending.num_workers is None else pending.num_workers,
        component_executors={**base.component_executors, **pending.num_executors},
    )
    return Outcome(
        resumed, (Reassign(pending.num_workers, dict(pending.num_executors), pending.reassign, pending.conf_json),)
    )


def _startup(base: StormBase, now_secs: int, message_timeout_secs: int) -> Outcome:
    """Re-arm the pending action at its original due time (now if overdue); repair a record that lost it."""
    pending = base.pending
    if base.status is KILLED:
        if pending is not None and pending.action == KILL:
            return Outcome(base, (ScheduleAt(max(pending.due_secs, now_secs), Remove(pending.due_secs)),))
        return _kill(base, Kill(), now_secs, message_timeout_secs)
    if base.status is REBALANCING:
        if pending is not None and pending.action == REBALANCE:
            return Outcome(base, (ScheduleAt(max(pending.due_secs, now_secs), DoRebalance(pending.due_secs)),))
        return Outcome(replace(base, status=_resume_status(base), prev_status=None, pending=None))
    if pending is not None or base.prev_status is not None:
        return Outcome(replace(base, prev_status=None, pending=None))
    return Outcome(base)
