"""One clock for every timer, deadline and timeout in Squall.

Daemons never call ``time.time()``/``threading.Timer`` directly: they take a :class:`Clock`, so the
same lifecycle, monitor and scheduling code runs on :class:`RealClock` in production and on
:class:`SimulatedClock` in tests, where ``advance(seconds)`` fires due timers deterministically.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger(__name__)


@dataclass(order=True)
class Timer:
    """A scheduled callback; ``cancel()`` is safe from any thread, before or after it fires."""

    due: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class Periodic:
    """Handle of a repeating timer: ``cancel()`` stops it, including the run already armed."""

    def __init__(self) -> None:
        self.cancelled = False
        self._next: Timer | None = None

    def arm(self, timer: Timer) -> None:
        self._next = timer
        if self.cancelled:
            timer.cancel()

    def cancel(self) -> None:
        self.cancelled = True
        if self._next is not None:
            self._next.cancel()


class Clock(ABC):
    """Wall time, monotonic time and timers.

    ``monotonic()`` orders timers; ``time()`` is epoch seconds for values that leave the process
    (heartbeats, launch times). Callbacks run on the clock's thread (real) or the advancing thread
    (simulated): they must be short and hand long work to their own thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heap: list[Timer] = []
        self._seq = itertools.count()

    @abstractmethod
    def time(self) -> float: ...

    @abstractmethod
    def monotonic(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` once, ``delay`` seconds from now."""
        timer = Timer(self.monotonic() + max(0.0, delay), next(self._seq), callback)
        with self._lock:
            heapq.heappush(self._heap, timer)
        self._timer_added()
        return timer

    def call_every(
        self, interval: float, callback: Callable[[], None], *, first_delay: float | None = None
    ) -> Periodic:
        """Run ``callback`` every ``interval`` seconds until the returned handle is cancelled.

        The next run is armed after the current one returns, so slow callbacks never overlap.
        """
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        periodic = Periodic()

        def tick() -> None:
            if periodic.cancelled:
                return
            try:
                callback()
            finally:
                periodic.arm(self.call_later(interval, tick))

        periodic.arm(self.call_later(interval if first_delay is None else first_delay, tick))
        return periodic

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds`` of this clock's time."""
        woken = threading.Event()
        self.call_later(seconds, woken.set)
        woken.wait()

    def _timer_added(self) -> None:  # noqa: B027 (an optional hook, not abstract: most clocks need no wake-up)
        """Hook for implementations that must wake up when a timer is added."""

    def _pop_due(self, now: float) -> Timer | None:
        with self._lock:
            while self._heap and self._heap[0].cancelled:
                heapq.heappop(self._heap)
            if self._heap and self._heap[0].due <= now:
                return heapq.heappop(self._heap)
        return None

    @staticmethod
    def _run(timer: Timer) -> None:
        try:
            timer.callback()
        except Exception:  # a failing timer must not stop the others
            log.exception(
                "timer callback failed", callback=getattr(timer.callback, "__qualname__", repr(timer.callback))
            )


class RealClock(Clock):
    """System time; timers run on one daemon thread started on first use."""

    def __init__(self) -> None:
        super().__init__()
        self._wakeup = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def _timer_added(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="squall-clock", daemon=True)
                self._thread.start()
            self._wakeup.notify()

    def _loop(self) -> None:
        while True:
            timer = self._pop_due(self.monotonic())
            if timer is not None:
                self._run(timer)
                continue
            with self._lock:
                wait = self._heap[0].due - self.monotonic() if self._heap else None
                if wait is None or wait > 0:
                    self._wakeup.wait(wait)


class SimulatedClock(Clock):
    """Time that moves only when a test calls :meth:`advance`.

    Timers fire in due order (ties in scheduling order) with ``monotonic()`` set to their due time,
    so a callback sees exactly the time it was scheduled for.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        super().__init__()
        self._epoch = start
        self._now = 0.0
        self._advancing = threading.Lock()

    def time(self) -> float:
        return self._epoch + self._now

    def monotonic(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward, firing every timer due on the way, including ones added meanwhile."""
        if seconds < 0:
            raise ValueError("simulated time cannot go backwards")
        with self._advancing:
            target = self._now + seconds
            while (timer := self._pop_due(target)) is not None:
                self._now = max(self._now, timer.due)
                self._run(timer)
            self._now = target

    def pending(self) -> int:
        """Number of live timers, for tests that check nothing is left armed."""
        with self._lock:
            return sum(not t.cancelled for t in self._heap)
