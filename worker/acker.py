"""The ``__acker`` task: XOR tuple trees (see :mod:`worker.tracking`) fed by the ack streams, and the
completions sent straight to the spout task that owns each root. A ``__ack_reset_timeout`` from a bolt
restarts a tree's timer and goes on to the spout task, whose own pending timer restarts with it.

Every message carries a task's roots of one step as lists (see :class:`worker.executor.acking.AckOut`):
``__ack_init ([root...], [xor...], spout task)``, ``__ack_ack ([root...], [value...])``, ``__ack_fail
([root...],)`` and ``__ack_reset_timeout ([root...],)``; a spout task hears ``([root...],)`` per kind once
per acker step. The streams are internal to Squall's workers, which all run one release."""

from __future__ import annotations

from typing import Any

from squall.api.tuple import TupleBatch
from squall.core.system_ids import ACK_ACK_STREAM, ACK_FAIL_STREAM, ACK_INIT_STREAM, ACK_RESET_TIMEOUT_STREAM
from worker.executor.acking import ACK_FAIL_FIELDS
from worker.executor.base import Executor
from worker.tracking import AckerState, SpoutNews

#: How often trees past the message timeout are dropped (and failed towards their spout).
EXPIRY_EVERY_SECS = 1.0


class Acker(Executor):
    #: Messages taken per round. Each is one step's roots from one task, and every tracking task of every worker sends
    #: one per step: at 8 a round an acker sharing its thread with busy bolts fell behind (15,000 messages queued
    #: after a rebalance, hundreds of thousands of trees waiting on their acks while every queue backpressure
    #: watches stayed short) until the trees timed out. A message costs a few dict operations per root, in C.
    BATCHES_PER_ROUND = 64

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        conf = self.spec.conf
        timeouts = conf["topology.enable.message.timeouts"]
        timeout = float(conf["topology.message.timeout.secs"]) if timeouts else float("inf")
        self.state = AckerState(timeout)
        self._next_expiry = 0.0

    def step(self, now: float) -> float:
        self._heartbeat(now)
        state = self.state
        if now >= self._next_expiry:
            self._next_expiry = now + EXPIRY_EVERY_SECS
            for root, spout_task, _ in state.expire(now):
                state.news.setdefault(spout_task, SpoutNews([], [], [])).failed.append(root)
        stats, batches = self.stats, self.inbox.take_some(self.BATCHES_PER_ROUND)
        for batch in batches:
            stream = batch.stream
            for values in batch.rows:
                stats.executed += len(values[0])  # roots, as when each had a message
                if stream == ACK_ACK_STREAM:
                    state.ack_many(values[0], values[1], now)
                elif stream == ACK_INIT_STREAM:
                    state.init_many(values[0], values[1], values[2], now)
                elif stream == ACK_FAIL_STREAM:
                    state.fail_many(values[0], now)
                elif stream == ACK_RESET_TIMEOUT_STREAM:
                    state.reset_many(values[0], now)
        if state.news:
            self._send(state.take_news())
        if len(batches) < self.BATCHES_PER_ROUND:  # the inbox is empty: wait for input or the next timer
            return max(0.0, min(self._next_beat, self._next_expiry) - now)
        return 0.0

    def _send(self, news: dict[int, SpoutNews]) -> None:
        """One message per spout task and kind: the roots acked, failed and held this step."""
        outbox, component, task = self._outbox, self.component, self.task
        for spout_task, told in news.items():
            for stream, roots in (
                (ACK_ACK_STREAM, told.acked),
                (ACK_FAIL_STREAM, told.failed),
                (ACK_RESET_TIMEOUT_STREAM, told.reset),
            ):
                if roots:
                    outbox.add(spout_task, TupleBatch([(roots,)], ACK_FAIL_FIELDS, component, stream, task))
