"""The stateful bolt executor (Storm's StatefulBoltExecutor): a bolt executor whose task opens its state
(namespace ``<component>-<task>``), takes the ``$checkpoint`` stream's actions (:class:`worker.checkpoint.
BoltCheckpoint` decides, this adapter does them), holds inputs until ``init_state`` and acks until their state
commits, and refuses unanchored emits.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import structlog

from squall.api.component import deliver_each
from squall.api.state.keyvalue import KeyValueState
from squall.api.state.providers import open_state
from squall.api.stateful import StatefulBolt
from squall.api.tuple import Tuple, TupleBatch, tick_tuple
from squall.core.system_ids import CHECKPOINT_STREAM
from worker.checkpoint import Action, BoltCheckpoint, Step
from worker.executor.bolt import TICK_INPUT, BoltExecutor

__all__ = ["StatefulBoltExecutor"]

log = structlog.get_logger(__name__)


class StatefulBoltExecutor(BoltExecutor):
    """Runs a :class:`~squall.api.stateful.StatefulBolt`. Inputs go to ``execute`` (or ``execute_batch``) as
    in any bolt once the state is initialized; before that (the first INITSTATE) they wait, whole batches, and
    ticks are dropped. The bolt's acks are held (:class:`~worker.checkpoint.BoltCheckpoint`): acked when their
    checkpoint commits, failed when it rolls back, so the spouts replay them. Process latency is not sampled:
    an input's ack waits for the commit."""

    BOLT_CLASS = StatefulBolt

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Holds input batches (before init_state) and acked tuples (until their commit).
        self.protocol: BoltCheckpoint[Any] = BoltCheckpoint()
        self.state: KeyValueState | None = None

    def start(self) -> None:
        super().start()
        self.state = open_state(f"{self.component}-{self.task}", self.spec.conf)

    # -- Collector: anchored emits only, acks held -----------------------------------------------

    def emit(
        self, values: tuple[Any, ...], stream: str, anchors: tuple[Tuple, ...], direct_task: int | None, msg_id: Any
    ) -> Sequence[int]:
        if not anchors:
            raise ValueError(self._unanchored())
        return super().emit(values, stream, anchors, direct_task, msg_id)

    def emit_batch(self, rows: Sequence[tuple[Any, ...]], stream: str, anchors: tuple[Tuple, ...]) -> None:
        if not anchors:
            raise ValueError(self._unanchored())
        super().emit_batch(rows, stream, anchors)

    def _unanchored(self) -> str:
        return (
            f"bolt {self.component!r} is stateful, so it must emit anchored tuples (Storm's rule): emit in execute "
            "under auto_ack, or pass anchors=; an input whose state is rolled back replays only what it anchors"
        )

    def ack(self, tup: Tuple) -> None:
        if not tup._anchors:  # untracked: nothing to replay, so nothing to hold
            super().ack(tup)
            return
        if self._batch is not None:
            self._settled.add(id(tup))
        self.protocol.acked(tup)

    def _settle_rest(self, batch: TupleBatch, *, failed: bool) -> None:
        """Every row through :meth:`ack` or :meth:`fail`, so the acks are held."""
        self._settle_each(batch, batch._views or {}, failed)

    # -- the loop --------------------------------------------------------------------------------

    def step(self, now: float) -> float:
        self._now = now
        self._heartbeat(now)
        if now >= self._next_tick:  # never without a tick interval (then it is inf)
            self._next_tick = now + self._tick_every  # type: ignore[operator]
            if self.protocol.initialized:
                started = time.perf_counter()
                self._execute(self.bolt, tick_tuple(self._tick_every))  # type: ignore[arg-type]
                self._count_executed(TICK_INPUT, 1, time.perf_counter() - started)
        batches = self.inbox.take_some(self.BATCHES_PER_ROUND)
        for batch in batches:
            if batch.stream == CHECKPOINT_STREAM:
                started = time.perf_counter()
                for tup in batch.views():
                    self._checkpoint(tup)
                self._count(batch, started)
            elif self.protocol.arrived(batch):
                self._deliver(batch)
        self._acks.flush(self._outbox)
        if len(batches) < self.BATCHES_PER_ROUND:
            return max(0.0, min(self._next_beat, self._next_tick) - now)
        return 0.0

    def _deliver(self, batch: TupleBatch) -> None:
        started = time.perf_counter()
        if self._execute_batch is not None:
            self._run_batch(self._execute_batch, batch)
        else:
            deliver_each(self.bolt, batch.views(), self._failed_input)
        self._count(batch, started)

    def _count(self, batch: TupleBatch, started: float) -> None:
        rows = len(batch.rows) if batch.__class__ is TupleBatch else len(batch)
        key = f"{batch.component}:{batch.stream}" if self._keyed_inputs else None
        self._count_executed(key, rows, time.perf_counter() - started)

    # -- the checkpoint protocol -----------------------------------------------------------------

    def _checkpoint(self, tup: Tuple) -> None:
        """One checkpoint tuple: the step it asks for, done; the held inputs it releases; acked, or failed when
        the step failed (the checkpoint spout then recovers)."""
        txid, action = tup[0], Action(tup[1])
        step = self.protocol.decide(action, txid)
        try:
            self._do(step, txid)
        except Exception as exc:
            log.warning("checkpoint step failed", component=self.component, task=self.task, step=step.value, txid=txid)
            self.report_error(exc)
            super().fail(tup)
            return
        release = self.protocol.completed(step, txid)
        for held in release.fail:
            super().fail(held)
        for held in release.ack:
            super().ack(held)
        if step is Step.REFUSE:
            super().fail(tup)
        else:
            super().ack(tup)
        for batch in release.execute:
            self._deliver(batch)

    def _do(self, step: Step, txid: int) -> None:
        bolt, state = self.bolt, self.state
        assert isinstance(bolt, StatefulBolt) and state is not None  # started
        initialized = self.protocol.initialized
        if step is Step.PREPARE:
            bolt.pre_prepare(txid)
            state.prepare_commit(txid)
        elif step is Step.COMMIT:
            if initialized:  # a restarted task commits what it prepared before, with no bolt state to flush
                bolt.pre_commit(txid)
            state.commit(txid)
        elif step is Step.ROLLBACK:
            if initialized:
                bolt.pre_rollback()
            state.rollback()
        elif step is Step.INIT:
            bolt.init_state(state)

    def close(self) -> None:
        super().close()
        if self.state is not None:
            self.state.close()
