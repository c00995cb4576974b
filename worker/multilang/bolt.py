"""The shell bolt's executor: inputs written to the subprocess, its emits anchored to the inputs it names, its
acks and fails passed on, a heartbeat tuple every second (Storm's ShellBolt)."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import count
from typing import Any

from squall.api.tuple import Tuple, tick_tuple
from worker.executor.bolt import BoltExecutor
from worker.multilang.host import ShellHost
from worker.multilang.process import ShellProcess
from worker.multilang.protocol import MultilangError, emit_target, heartbeat_message, tuple_message

__all__ = ["HEARTBEAT_EVERY_SECS", "ShellBoltExecutor"]

#: How often a shell bolt asks its subprocess for a ``sync`` (Storm: every second).
HEARTBEAT_EVERY_SECS = 1.0


class ShellBoltExecutor(ShellHost, BoltExecutor):
    """A shell bolt: inputs written to the subprocess as they come (at most ``topology.shellbolt.max.pending``
    unwritten), its emits anchored to the inputs it names, its acks and fails passed on, a heartbeat tuple
    every second."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shell_init()
        self._max_pending = int(self.spec.conf["topology.shellbolt.max.pending"])
        self._ids = count(1)
        #: Input id (as sent) → (tuple, when it was sent): what the subprocess still has to ack or fail.
        self._in_flight: dict[str, tuple[Tuple, float]] = {}
        self._next_heartbeat = 0.0

    def start(self) -> None:
        self._shell_start()
        if self._tick_every:
            self._next_tick = self._now + self._tick_every

    def step(self, now: float) -> float:
        self._now = now
        self._heartbeat(now)
        process = self._running(now)
        if process is None:
            self._acks.flush(self._outbox)
            return self._wake_in(
                now, self._restart_at if self._process is None else self._last_heard + self._timeout + 0.01
            )
        for message in self._take(process):
            self._on_reply(message, process)
            if self._process is not process:  # it died of that message
                self._acks.flush(self._outbox)
                return 0.0
        if not self._check(process, now, waiting=True):
            self._acks.flush(self._outbox)
            return 0.0
        tick = self._tick_every
        if tick is not None and now >= self._next_tick:
            self._next_tick = now + tick
            self._send(process, tick_tuple(tick))
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + HEARTBEAT_EVERY_SECS
            process.send(self._encode(heartbeat_message(f"hb{next(self._ids)}")))
        if not process.unwritten:  # the child read all we wrote: a round of up to max.pending more
            take, stats, sent = self.inbox.take, self.stats, 0
            while sent < self._max_pending and (batch := take()) is not None:
                sent += len(batch)
                stats.executed += len(batch)
                for tup in batch.views():
                    self._send(process, tup)
        written = process.flush()
        self._acks.flush(self._outbox)
        if not written or self.inbox.size:
            return 0.001 if not written else 0.0
        return self._wake_in(now, self._next_heartbeat, self._next_tick, self._last_heard + self._timeout + 0.01)

    def _send(self, process: ShellProcess, tup: Tuple) -> None:
        tuple_id = str(next(self._ids))
        self._in_flight[tuple_id] = (tup, self._now)
        process.send(self._encode(tuple_message(tuple_id, tup)))

    def _on_reply(self, message: Any, process: ShellProcess) -> None:
        try:
            name = message.get("command") if isinstance(message, dict) else None
            if name == "emit":
                self._on_emit(message, process)
            elif name == "ack" or name == "fail":
                entry = self._in_flight.pop(str(message.get("id")), None)
                if entry is None:
                    raise MultilangError(f"{name}ed a non-existent or already acked/failed id: {message.get('id')!r}")
                tup, sent = entry
                self.stats.execute_secs += self._now - sent
                if name == "ack":
                    self.ack(tup)
                else:
                    self.fail(tup)
            elif name != "sync":
                self._on_message(message)
        except MultilangError as exc:
            self._died(self._now, str(exc))

    def _on_emit(self, message: Mapping[str, Any], process: ShellProcess) -> None:
        values, stream, direct, wanted = emit_target(message)
        anchors = []
        for anchor in message.get("anchors") or ():
            entry = self._in_flight.get(str(anchor))
            if entry is None:
                raise MultilangError(f"anchored onto {anchor!r} after ack/fail (or an id never sent)")
            anchors.append(entry[0])
        try:
            targets = self.emit(values, stream, tuple(anchors), direct, None)
        except ValueError as exc:
            self.report_error(f"shell bolt {self.component!r} emitted what it cannot: {exc}")
            targets = []
        if wanted:
            process.send(self._encode(list(targets)))

    def _raised_on(self, tup: Tuple) -> bool:
        """A tuple fails as an exception when its subprocess died (crashed or hung) holding it."""
        return self._process is None

    def _lose_in_flight(self) -> int:
        lost, self._in_flight = self._in_flight, {}
        for tup, _ in lost.values():
            self.fail(tup)
        return len(lost)

    def close(self) -> None:
        self._stop_process()
        self._acks.flush(self._outbox)
