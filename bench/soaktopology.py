"""The soak bench's topology components (bench/soak.py): shipped in its package, so they import only squall.

:class:`PacedNumbers` emits reliable numbers at a set rate (0: as fast as ``topology.max.spout.pending``
lets it) for a set time, replays what fails, and keeps counting what it emitted and what was acked in a small
status file, so the bench sees throughput and, once it has drained, anything lost.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from pathlib import Path
from typing import Any

from squall import Bolt, Spout, Tuple

#: How often the spout rewrites its status file.
STATUS_SECS = 1.0


def read_status(status_dir: Path) -> dict[str, int]:
    """Every spout task's counters, summed (emitted, acked, failed, pending, replays)."""
    total: dict[str, int] = {}
    for path in status_dir.glob("status-*.json"):
        try:
            for key, value in json.loads(path.read_text()).items():
                total[key] = total.get(key, 0) + value
        except (OSError, ValueError):
            continue  # replaced meanwhile: read it next time
    return total


class PacedNumbers(Spout):
    """Emits ``(n,)`` with msg id n, ``rate`` per second (0: unpaced) during ``seconds``, then only replays.

    Distinct acks are counted with a low watermark and the set of acks above it, so memory stays bounded
    however long it runs.
    """

    outputs = ["n"]

    def __init__(self, rate: float, seconds: float, status_dir: str) -> None:
        self.rate, self.seconds, self.status_dir = rate, seconds, status_dir

    def open(self, conf: Any, context: Any) -> None:
        self.start = time.monotonic()
        self.next_n = 0
        self.low = 0  # every n < low is acked, and those in above
        self.above: set[int] = set()
        self.pending: set[int] = set()
        self.replays: deque[int] = deque()
        self.failed = self.replayed = 0
        self.status = Path(self.status_dir) / f"status-{context.task_id}.json"
        self.written = 0.0

    def next_tuple(self) -> None:
        now = time.monotonic()
        if now - self.written >= STATUS_SECS:
            self._write_status(now)
        if self.replays:
            n = self.replays.popleft()
            self.replayed += 1
        elif now - self.start < self.seconds and (not self.rate or self.next_n < (now - self.start) * self.rate):
            n, self.next_n = self.next_n, self.next_n + 1
        else:
            return
        self.pending.add(n)
        self.emit([n], msg_id=n)

    def ack(self, msg_id: int) -> None:
        self.pending.discard(msg_id)
        if msg_id == self.low:
            self.low += 1
            while self.low in self.above:
                self.above.remove(self.low)
                self.low += 1
        elif msg_id > self.low:
            self.above.add(msg_id)

    def fail(self, msg_id: int) -> None:
        self.pending.discard(msg_id)
        self.failed += 1
        self.replays.append(msg_id)

    def _write_status(self, now: float) -> None:
        self.written = now
        status = {
            "emitted": self.next_n,
            "acked": self.low + len(self.above),
            "failed": self.failed,
            "pending": len(self.pending) + len(self.replays),
            "replayed": self.replayed,
        }
        temp = self.status.with_suffix(".tmp")
        temp.write_text(json.dumps(status))
        os.replace(temp, self.status)


class Sink(Bolt):
    """Takes each number and does nothing more (auto-acked)."""

    def execute(self, tup: Tuple) -> None:
        pass
