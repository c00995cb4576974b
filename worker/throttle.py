"""Storm's error throttle: at most so many reports per interval, the rest counted and said with the next one.

Task errors (to ``/taskerrors``) and noisy log events (refused connections, refused tuples) go through it.
"""

from __future__ import annotations


class ErrorThrottle:
    """At most ``limit`` reports per ``interval`` seconds per task (Storm's error throttle); the rest
    are counted and the count is said with the next report that gets through."""

    def __init__(self, limit: int, interval: float) -> None:
        self.limit, self.interval = limit, interval
        self._window_start = -float("inf")
        self._in_window = 0
        self.suppressed = 0

    def allow(self, now: float) -> bool:
        if now - self._window_start >= self.interval:
            self._window_start, self._in_window = now, 0
        if self._in_window < self.limit:
            self._in_window += 1
            return True
        self.suppressed += 1
        return False
