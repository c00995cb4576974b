"""The window core: Storm's ``WindowManager`` with its trigger and eviction policies and its watermark
generator, as a state machine over plain values. Events in (an input and its timestamp, the time a timer is
due at), decisions out (inputs expired, windows to evaluate, late inputs): no threads, no I/O, no clock, so
a runtime feeds it the time and acts on what it returns, and tests drive it on a simulated clock.

How Storm picks the policies (``WindowedBoltExecutor``), kept here:

================  ===============================  ==================================
                  processing time                  event time (a timestamp per input)
================  ===============================  ==================================
slide: a count    every N inputs                   on a watermark, per N inputs up to it
slide: duration   a timer every slide ms           on a watermark, each window end up to it
length: a count   keep the last N                  keep the last N up to the window end
length: duration  drop what is older than length   the same, against the window end
================  ===============================  ==================================
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass
from typing import Generic, TypeVar

from squall.core.windowconf import WindowConf

__all__ = ["Activation", "Decision", "Expired", "Late", "WindowManager"]

T = TypeVar("T")

#: Inputs added between two partial scans that expire what the eviction policy says is expired, so a window
#: evaluated rarely does not hold its expired inputs (and their trees) until then (Storm's constant).
EXPIRE_EVENTS_THRESHOLD = 100


@dataclass(frozen=True)
class Expired(Generic[T]):
    """These inputs left the window: the runtime acks them (Storm's ``onExpiry``)."""

    values: list[T]


@dataclass(frozen=True)
class Activation(Generic[T]):
    """Evaluate this window (Storm's ``onActivation``): its inputs, those new since the last evaluation, those
    expired since then, and its end (the eviction reference time, ms) and start (end - length, for a duration
    length only)."""

    values: list[T]
    new: list[T]
    expired: list[T]
    end_ms: int
    start_ms: int | None


@dataclass(frozen=True)
class Late(Generic[T]):
    """An event-time input older than the last watermark: never windowed, the runtime reports and acks it."""

    value: T
    ts: int


Decision = Expired[T] | Activation[T] | Late[T]


class _Action(enum.Enum):
    EXPIRE = "expire"  # out of the window: remove and ack
    PROCESS = "process"  # in the window
    KEEP = "keep"  # not in this window, but maybe a later one
    STOP = "stop"  # nothing after this one is in the window


@dataclass(frozen=True)
class _Context:
    """What the trigger tells the eviction policy before a scan (Storm's ``DefaultEvictionContext``)."""

    ref: int
    current_count: int | None = None
    sliding_count: int | None = None
    sliding_interval: int | None = None


class _Event(Generic[T]):
    """An input in the queue; identity (no ``__eq__``) tells the previous window's events from new ones."""

    __slots__ = ("ts", "value")

    def __init__(self, value: T, ts: int) -> None:
        self.value, self.ts = value, ts


class _CountEviction:
    """Keep the last ``threshold`` inputs (processing time)."""

    def __init__(self, threshold: int) -> None:
        self.threshold, self.count = threshold, 0
        self.context: _Context | None = None

    def track(self) -> None:
        self.count += 1

    def set_context(self, context: _Context) -> None:
        self.context = context

    def evict(self, ts: int, now: int) -> _Action:
        if self.count > self.threshold:
            self.count -= 1
            return _Action.EXPIRE
        return _Action.PROCESS


class _TimeEviction:
    """Drop what is ``length`` ms older than the reference time. A timer-driven slide widens the first window to
    everything and later ones by the timer's drift, so no input falls between two windows."""

    def __init__(self, length: int) -> None:
        self.length, self.delta = length, 0
        self.context: _Context | None = None

    def track(self) -> None:
        pass

    def set_context(self, context: _Context) -> None:
        previous, self.context = self.context, context
        if context.sliding_interval is not None:
            if previous is None:
                self.delta = 2**62  # the first window takes every input so far
            else:
                self.delta = context.ref - previous.ref - context.sliding_interval

    def evict(self, ts: int, now: int) -> _Action:
        diff = (now if self.context is None else self.context.ref) - ts
        if diff >= self.length + self.delta:
            return _Action.EXPIRE
        return _Action.KEEP if diff < 0 else _Action.PROCESS


class _WatermarkTimeEviction(_TimeEviction):
    """:class:`_TimeEviction` against the window end; nothing is judged before the first watermark."""

    def __init__(self, length: int, lag: int) -> None:
        super().__init__(length)
        self.lag = lag

    def evict(self, ts: int, now: int) -> _Action:
        if self.context is None:
            return _Action.STOP
        diff = self.context.ref - ts
        if diff < -self.lag:
            return _Action.STOP
        return _Action.KEEP if diff < 0 else super().evict(ts, now)


class _WatermarkCountEviction:
    """Keep the last ``threshold`` inputs at or before the window end."""

    def __init__(self, threshold: int) -> None:
        self.threshold, self.count, self.processed = threshold, 0, 0
        self.context: _Context | None = None

    def track(self) -> None:
        pass

    def set_context(self, context: _Context) -> None:
        self.context = context
        if context.current_count is not None:
            self.count = context.current_count
        else:
            self.count = self.processed + (context.sliding_count or 0)
        self.processed = 0

    def evict(self, ts: int, now: int) -> _Action:
        if self.context is None:
            return _Action.STOP
        if ts > self.context.ref or self.processed >= self.count:
            return _Action.KEEP
        if self.count > self.threshold:
            self.count -= 1
            return _Action.EXPIRE
        self.processed += 1
        return _Action.PROCESS


_Eviction = _CountEviction | _TimeEviction | _WatermarkCountEviction


class WindowManager(Generic[T]):
    """One windowed bolt's window: :meth:`add` each input, :meth:`advance` when :meth:`next_due` comes; both
    return the decisions, in order. ``inputs`` are the bolt's input streams (``component:stream``), each of which
    must have delivered an input before an event-time watermark advances; ``now`` (ms) starts the timers::

        manager = WindowManager(window_of(conf), event_time=False, inputs=["words:default"], now=clock_ms())
        for decision in manager.add(tup, clock_ms()):
            ...  # Expired: ack its values; Activation: evaluate the window
    """

    def __init__(self, window: WindowConf, *, event_time: bool, inputs: Collection[str], now: int) -> None:
        self.window, self.event_time = window, event_time
        self._queue: deque[_Event[T]] = deque()
        self._expired: list[T] = []
        self._previous: set[_Event[T]] = set()  # the last window's events, held: ids of freed ones are reused
        self._since_scan = 0
        self._out: list[Decision[T]] = []
        self._eviction: _Eviction
        if window.length_count is not None:
            self._eviction = (
                _WatermarkCountEviction(window.length_count) if event_time else _CountEviction(window.length_count)
            )
        else:
            length = window.length_ms or 0
            self._eviction = _WatermarkTimeEviction(length, window.lag_ms) if event_time else _TimeEviction(length)
        self._triggered = 0  # count slide: inputs since the last evaluation
        self._last_ts = 0  # event time, count slide: the last window end evaluated
        self._next_end = 0  # event time, duration slide: the next window end to evaluate
        # Timers: the duration slide in processing time, the watermark in event time.
        self._period = window.watermark_interval_ms if event_time else window.slide_ms
        self._due = None if self._period is None else now + self._period
        self._inputs = frozenset(inputs)
        self._newest: dict[str, int] = {}  # event time: each input stream's newest timestamp
        self.watermark = 0

    # -- events in -------------------------------------------------------------------------------

    def add(self, value: T, ts: int, stream: str = "") -> list[Decision[T]]:
        """An input with its timestamp (ms): the time it arrived in processing time, its event time otherwise
        (from ``stream``, for the watermark). A late input comes back as :class:`Late`."""
        if self.event_time:
            newest = self._newest.get(stream)
            if newest is None or ts > newest:
                self._newest[stream] = ts
            if ts < self.watermark:
                return [Late(value, ts)]
        self._queue.append(_Event(value, ts))
        self._eviction.track()
        slide = self.window.slide_count
        if not self.event_time and slide is not None:
            self._triggered += 1
            if self._triggered >= slide:
                self._eviction.set_context(_Context(ts))
                self._trigger(ts)
        self._compact(ts)
        return self._drain()

    def next_due(self) -> int | None:
        """When (ms) :meth:`advance` has work next: the slide timer or the watermark's; None for a count slide in
        processing time, which only inputs trigger."""
        return self._due

    def advance(self, now: int) -> list[Decision[T]]:
        """The timers due by ``now`` (ms): a processing-time slide evaluates the window up to just before now
        (inputs may arrive meanwhile); an event-time watermark evaluates every window it closes. A timer late by
        several periods runs once."""
        if self._due is None or now < self._due or self._period is None:
            return []
        self._due += self._period * max(1, (now - self._due) // self._period + 1)
        if not self.event_time:
            self._eviction.set_context(_Context(now - 1, sliding_interval=self._period))
            self._trigger(now)
        else:
            self._advance_watermark(now)
        return self._drain()

    # -- event time ------------------------------------------------------------------------------

    def _advance_watermark(self, now: int) -> None:
        """Storm's watermark: min over the input streams of their newest timestamp, minus the lag, once every
        input has delivered; only an advance is acted on."""
        newest = self._newest.values() if len(self._newest) >= len(self._inputs) and self._newest else None
        watermark = (min(newest) if newest else 0) - self.window.lag_ms
        if watermark <= self.watermark:
            return
        self.watermark = watermark
        if self.window.slide_count is not None:
            count = self.window.slide_count
            for end in self._sliding_count_ends(self._last_ts, watermark, count):
                self._eviction.set_context(_Context(end, sliding_count=count))
                self._trigger(now)
                self._last_ts = end
        else:
            slide, end = self.window.slide_ms or 1, self._next_end
            while end <= watermark:
                self._eviction.set_context(_Context(end, current_count=sum(1 for e in self._queue if e.ts <= end)))
                if self._trigger(now):
                    end += slide
                    continue
                earliest = min((e.ts for e in self._queue if end < e.ts <= watermark), default=None)
                if earliest is None:  # nothing up to the watermark: wait for the next one
                    break
                end = earliest if earliest % slide == 0 else earliest + slide - earliest % slide
            self._next_end = end
        self._compact(now)

    def _sliding_count_ends(self, start: int, end: int, count: int) -> list[int]:
        """The window ends of a count slide between two watermarks: the newest timestamp of each ``count``
        inputs in (start, end]."""
        ends: list[int] = []
        seen, newest = 0, -(2**62)
        for event in self._queue:
            if start < event.ts <= end:
                newest = max(newest, event.ts)
                seen += 1
                if seen % count == 0:
                    ends.append(newest)
        return ends

    # -- the scans -------------------------------------------------------------------------------

    def _trigger(self, now: int) -> bool:
        """Evaluate the window (Storm's ``onTrigger``): expire, then an activation unless it is empty."""
        window = self._scan(now, full=True)
        expired, self._expired = self._expired, []
        previous, self._previous = self._previous, set(window)
        self._triggered = 0  # the count trigger starts again
        if not window:
            return False
        context = self._eviction.context
        end = now if context is None else context.ref
        length = self.window.length_ms
        self._out.append(
            Activation(
                [e.value for e in window],
                [e.value for e in window if e not in previous],
                expired,
                end,
                None if length is None else end - length,
            )
        )
        return True

    def _compact(self, now: int) -> None:
        self._since_scan += 1
        if self._since_scan >= EXPIRE_EVENTS_THRESHOLD:
            self._scan(now, full=False)

    def _scan(self, now: int, *, full: bool) -> list[_Event[T]]:
        """Walk the queue oldest first, removing what expired; a partial scan stops at the first input that did
        not. Returns the inputs in the window (full scans)."""
        evict, kept, window, expired = self._eviction.evict, deque[_Event[T]](), [], []
        queue = self._queue
        while queue:
            event = queue[0]
            action = evict(event.ts, now)
            if action is _Action.EXPIRE:
                expired.append(queue.popleft().value)
                continue
            if not full or action is _Action.STOP:
                break
            kept.append(queue.popleft())
            if action is _Action.PROCESS:
                window.append(event)
        kept.extend(queue)
        self._queue = kept
        self._since_scan = 0
        if expired:
            self._expired.extend(expired)
            self._out.append(Expired(expired))
        return window

    def _drain(self) -> list[Decision[T]]:
        out, self._out = self._out, []
        return out
