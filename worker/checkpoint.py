"""Storm's checkpoint protocol as two pure state machines: the checkpoint spout's (:class:`Coordinator`) and a
stateful bolt task's (:class:`BoltCheckpoint`). Events go in, what to do comes out; the clock is an argument,
so tests drive them on simulated time. The checkpoint spout (:mod:`worker.checkpointspout`) and the stateful
bolt executor (:mod:`worker.executor.stateful`) are their adapters.

The spout keeps the transaction's state, ``(txid, phase)``, in the state store and walks it through two
phases (Storm's CheckPointState)::

    COMMITTED(t) --PREPARE(t+1)--> PREPARING(t+1) --COMMIT(t+1)--> COMMITTING(t+1) --> COMMITTED(t+1)
         ^                               |
         +---------ROLLBACK(t+1)---------+   (recovering)

Each action goes to every stateful task as one tuple tree; the acker tells the spout when every task has
taken it, and only then does the phase move on. The spout starts recovering (every start is a recovery), and a
failed or timed-out action sends it back to recovering: a PREPARING transaction is rolled back (some tasks may
not have prepared), a COMMITTING one rolled forward (some may have committed), then INITSTATE gives every task
its state as committed, and checkpoints resume.

The stored record is a map (``{"txid": t, "phase": "COMMITTED"}``), so it can carry more than the phase, such
as a source's offsets committed with the transaction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

__all__ = [
    "Action",
    "BoltCheckpoint",
    "Coordinator",
    "Emit",
    "Phase",
    "Release",
    "Save",
    "Step",
    "TxState",
]

T = TypeVar("T")


class Phase(Enum):
    """Where the checkpoint spout's transaction is (Storm's CheckPointState.State)."""

    COMMITTED = "COMMITTED"
    PREPARING = "PREPARING"
    COMMITTING = "COMMITTING"


class Action(Enum):
    """What a checkpoint tuple asks of a stateful task (Storm's CheckPointState.Action), sent by its name."""

    PREPARE = "PREPARE"
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    INITSTATE = "INITSTATE"


@dataclass(frozen=True)
class TxState:
    """The checkpoint spout's transaction: its txid and phase (Storm's CheckPointState)."""

    txid: int
    phase: Phase

    def next_state(self, recovering: bool) -> TxState:
        """The state once the action of this one is acked."""
        if self.phase is Phase.PREPARING:
            return TxState(self.txid - 1, Phase.COMMITTED) if recovering else TxState(self.txid, Phase.COMMITTING)
        if self.phase is Phase.COMMITTING:
            return TxState(self.txid, Phase.COMMITTED)
        return self if recovering else TxState(self.txid + 1, Phase.PREPARING)

    def next_action(self, recovering: bool) -> Action:
        """The action to send in this state."""
        if self.phase is Phase.PREPARING:
            return Action.ROLLBACK if recovering else Action.PREPARE
        if self.phase is Phase.COMMITTING:
            return Action.COMMIT
        return Action.INITSTATE if recovering else Action.PREPARE

    def to_record(self) -> dict[str, Any]:
        return {"txid": self.txid, "phase": self.phase.value}

    @classmethod
    def from_record(cls, record: Any) -> TxState:
        """The state a record holds; no record is Storm's first state, ``COMMITTED(-1)``."""
        if record is None:
            return INITIAL
        return cls(int(record["txid"]), Phase(record["phase"]))


INITIAL = TxState(-1, Phase.COMMITTED)


@dataclass(frozen=True)
class Save:
    """Store the transaction's new state (and commit it) before anything else happens."""

    state: TxState


@dataclass(frozen=True)
class Emit:
    """Send ``action`` of ``txid`` to every stateful task, as one tuple tree with message id ``txid``."""

    txid: int
    action: Action


class Coordinator:
    """The checkpoint spout's decisions (Storm's CheckpointSpout): one action in flight at a time; a new
    checkpoint once ``interval_secs`` passed since the last began, the phases after it as soon as acked::

        c = Coordinator(TxState.from_record(stored), interval_secs=1.0)
        c.poll(now)      # [Emit(-1, INITSTATE)]: recovery first
        c.acked(-1)      # []: recovered
        c.poll(now)      # [Save(PREPARING(0)), Emit(0, PREPARE)]
    """

    def __init__(self, state: TxState, interval_secs: float) -> None:
        self.state = state
        self.interval_secs = interval_secs
        self.recovering = True
        self.in_flight = False
        self._last_checkpoint = -math.inf

    def poll(self, now: float) -> list[Save | Emit]:
        """What to do now (the spout asks on every ``next_tuple``): nothing while an action is in flight."""
        if self.in_flight:
            return []
        if self.recovering:
            self.in_flight = True
            return [Emit(self.state.txid, self.state.next_action(True))]
        if self.state.phase is Phase.COMMITTED and now - self._last_checkpoint < self.interval_secs:
            return []
        steps: list[Save | Emit] = []
        if self.state.phase is Phase.COMMITTED:
            self.state = self.state.next_state(False)
            self._last_checkpoint = now
            steps.append(Save(self.state))
        self.in_flight = True
        steps.append(Emit(self.state.txid, self.state.next_action(False)))
        return steps

    def acked(self, txid: int) -> list[Save]:
        """Every stateful task took the action of ``txid``: the next state, to save (none when recovery ends,
        or for an ack of another txid, which Storm ignores)."""
        self.in_flight = False
        if txid != self.state.txid:
            return []
        following = self.state.next_state(self.recovering)
        if following == self.state:  # recovering, and INITSTATE is done
            self.recovering = False
            return []
        self.state = following
        return [Save(following)]

    def failed(self, txid: int) -> None:
        """An action failed or timed out somewhere: recover."""
        self.in_flight = False
        self.recovering = True


class Step(Enum):
    """What a stateful task does with a checkpoint tuple (see :meth:`BoltCheckpoint.decide`)."""

    PREPARE = "prepare"  # pre_prepare, then prepare the state
    COMMIT = "commit"  # pre_commit, then commit the state
    ROLLBACK = "rollback"  # pre_rollback, then roll the state back
    INIT = "init"  # init_state: the first INITSTATE
    NOTHING = "nothing"  # a later INITSTATE: the task has its state already
    REFUSE = "refuse"  # PREPARE before INITSTATE (a restarted task): fail it, so the topology recovers
    OLD = "old"  # an action of a txid already passed: ack it, nothing else


@dataclass
class Release(Generic[T]):
    """The inputs a step lets go: to ack, to fail (their spouts replay them), to execute (held until
    ``init_state``)."""

    ack: list[T] = field(default_factory=list)
    fail: list[T] = field(default_factory=list)
    execute: list[T] = field(default_factory=list)


class BoltCheckpoint(Generic[T]):
    """A stateful task's side of the protocol (Storm's StatefulBoltExecutor): which step a checkpoint tuple
    asks for, and the inputs it holds: those that came before ``init_state`` (executed after it) and those
    acked since the last commit (acked once their state is committed, failed if it is rolled back)::

        bolt = BoltCheckpoint()
        bolt.arrived(tup)                      # False: held until INITSTATE
        step = bolt.decide(Action.INITSTATE, 0)   # Step.INIT: call init_state, then
        bolt.completed(step, 0).execute        # [tup]
    """

    def __init__(self) -> None:
        self.initialized = False
        self._last_txid: int | None = None
        self._held: list[T] = []
        self._acked: list[T] = []  # acked by the bolt since the last prepare
        self._prepared: list[T] = []  # acked by the bolt before the prepare not yet committed

    def arrived(self, item: T) -> bool:
        """An input arrived: True to execute it now, False when it is held until ``init_state``."""
        if self.initialized:
            return True
        self._held.append(item)
        return False

    def acked(self, item: T) -> None:
        """The bolt acked an input: held until the state it changed is committed."""
        self._acked.append(item)

    def decide(self, action: Action, txid: int) -> Step:
        """The step ``action`` of ``txid`` asks for; the task then does it, and calls :meth:`completed` if it
        succeeded (else it fails the checkpoint tuple, and the topology recovers)."""
        if self._last_txid is not None and txid < self._last_txid:
            return Step.OLD
        if action is Action.PREPARE:
            return Step.PREPARE if self.initialized else Step.REFUSE
        if action is Action.COMMIT:
            return Step.COMMIT
        if action is Action.ROLLBACK:
            return Step.ROLLBACK
        return Step.NOTHING if self.initialized else Step.INIT

    def completed(self, step: Step, txid: int) -> Release[T]:
        """The task did ``step`` for ``txid``: the inputs it releases."""
        release: Release[T] = Release()
        if step is Step.OLD:
            return release
        self._last_txid = txid - 1 if step is Step.ROLLBACK else txid
        if step is Step.PREPARE:
            self._prepared.extend(self._acked)
            self._acked = []
        elif step is Step.COMMIT:
            release.ack, self._prepared = self._prepared, []
        elif step is Step.ROLLBACK:
            release.fail, self._prepared, self._acked = self._prepared + self._acked, [], []
        elif step is Step.INIT:
            self.initialized = True
            release.execute, self._held = self._held, []
        return release
