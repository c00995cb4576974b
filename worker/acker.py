"""The ``__acker`` task: XOR tuple trees (see :mod:`worker.tracking`) fed by the ack streams, and the
completions sent straight to the spout task that owns each root. A ``__ack_reset_timeout`` from a bolt
restarts a tree's timer and goes on to the spout task, whose own pending timer restarts with it.

An ``__ack_ack`` tuple is ``(root, value)``, or ``([root, ...], [value, ...])`` when a bolt acks a
tuple with many roots (one anchored to a whole batch): the streams are internal to Squall's workers."""

from __future__ import annotations

from typing import Any

from squall.topology import ACK_ACK_STREAM, ACK_FAIL_STREAM, ACK_INIT_STREAM, ACK_RESET_TIMEOUT_STREAM
from squall.tuple import Tuple
from worker.executor import ACK_FAIL_FIELDS, Executor
from worker.tracking import AckerState, Completion

#: How often trees past the message timeout are dropped (and failed towards their spout).
EXPIRY_EVERY_SECS = 1.0


class Acker(Executor):
    BATCHES_PER_ROUND = 8

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        conf = self.spec.conf
        timeout = float(conf["topology.message.timeout.secs"]) if conf["topology.enable.message.timeouts"] else float("inf")
        self.state = AckerState(timeout)
        self._next_expiry = 0.0

    def step(self, now: float) -> float:
        self._heartbeat(now)
        state = self.state
        if now >= self._next_expiry:
            self._next_expiry = now + EXPIRY_EVERY_SECS
            self._send(state.expire(now))
        take = self.inbox.take
        for _ in range(self.BATCHES_PER_ROUND):
            batch = take()
            if batch is None:
                return max(0.0, min(self._next_beat, self._next_expiry) - now)
            self.stats.executed += len(batch)
            for tup in batch:
                stream, values = tup._stream, tup._values
                if stream == ACK_ACK_STREAM:
                    if type(values[0]) is list:  # a bulk ack: roots and values as two lists
                        done = state.ack_many(values[0], values[1], now)
                    else:
                        done = state.ack(values[0], values[1], now)
                elif stream == ACK_INIT_STREAM:
                    done = state.init(values[0], values[1], values[2], now)
                elif stream == ACK_FAIL_STREAM:
                    done = state.fail(values[0], now)
                else:
                    if stream == ACK_RESET_TIMEOUT_STREAM:
                        self._forward_reset(values[0], state.reset_timeout(values[0], now))
                    continue
                if done:
                    self._send(done)
        return 0.0

    def _forward_reset(self, root: int, spout_task: int | None) -> None:
        if spout_task is not None:
            self._box[spout_task].append(
                Tuple((root,), ACK_FAIL_FIELDS, self.component, ACK_RESET_TIMEOUT_STREAM, self.task))

    def _send(self, completions: list[Completion]) -> None:
        box = self._box
        for c in completions:
            stream = ACK_ACK_STREAM if c.ok else ACK_FAIL_STREAM
            box[c.spout_task].append(Tuple((c.root,), ACK_FAIL_FIELDS, self.component, stream, self.task))
