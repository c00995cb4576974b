"""Windowed bolts (Storm's ``BaseWindowedBolt``): a bolt that sees its inputs a window at a time.

    class Average(WindowedBolt):
        outputs = ["device", "average"]
        component_conf = WindowedBolt.with_window(Duration.seconds(10), Duration.seconds(1))

        def execute(self, window):                 # every second, the last ten seconds' readings
            readings = [tup["value"] for tup in window]
            self.emit(["all", sum(readings) / len(readings)])   # anchored to every tuple of the window

The window's settings are Storm's component conf keys (``topology.bolts.window.length.count`` ...), written by
:meth:`WindowedBolt.with_window` / :meth:`WindowedBolt.with_tumbling_window` here or on the DSL's bolt
declaration, so they show in the UI and a Storm user's conf carries over. The window itself is
:mod:`squall.api.windowmanager`'s pure state machine; this module adapts it to a bolt: inputs in from the
worker's batches, timers from the worker's step, expired inputs acked, emits anchored, late inputs reported.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import structlog

from squall.api.component import Bolt, Stream
from squall.api.tuple import Tuple, TupleBatch
from squall.api.windowmanager import Activation, Decision, Expired, WindowManager
from squall.core import windowconf as keys
from squall.core.system_ids import DEFAULT_STREAM

__all__ = [
    "Count",
    "Duration",
    "TupleWindow",
    "WindowError",
    "WindowedBolt",
    "wall_ms",
    "with_late_stream",
    "with_tumbling_window",
    "with_window",
]

log = structlog.get_logger(__name__)

_MAX_MS = 2**31 - 1  # Storm keeps durations as int ms


class WindowError(ValueError):
    """A window that cannot run as configured; the message names the setting to change::

    with_window(Count(5), late_stream="late")   # WindowError: a late tuple stream needs event time
    """


@dataclass(frozen=True)
class Count:
    """A window length or slide in tuples::

    component_conf = WindowedBolt.with_window(Count(100), Count(10))   # the last 100, every 10th tuple
    """

    value: int

    def __post_init__(self) -> None:
        if not (isinstance(self.value, int) and not isinstance(self.value, bool) and self.value > 0):
            raise WindowError(f"Count must be a whole number of tuples > 0, got {self.value!r}")


@dataclass(frozen=True)
class Duration:
    """A window length or slide in milliseconds (whole, as Storm keeps them)::

    Duration(500), Duration.seconds(10), Duration.minutes(5)
    """

    ms: int

    def __post_init__(self) -> None:
        if not (isinstance(self.ms, int) and not isinstance(self.ms, bool) and 0 <= self.ms <= _MAX_MS):
            raise WindowError(f"Duration must be a whole number of ms in 0..{_MAX_MS}, got {self.ms!r}")

    @classmethod
    def of(cls, ms: int) -> Duration:
        """``ms`` milliseconds (Storm's ``Duration.of``)."""
        return cls(ms)

    @classmethod
    def seconds(cls, n: float) -> Duration:
        """``n`` seconds."""
        return cls(round(n * 1000))

    @classmethod
    def minutes(cls, n: float) -> Duration:
        """``n`` minutes."""
        return cls(round(n * 60_000))

    @classmethod
    def hours(cls, n: float) -> Duration:
        """``n`` hours."""
        return cls(round(n * 3_600_000))

    @classmethod
    def days(cls, n: float) -> Duration:
        """``n`` days (up to 24: Storm keeps ms in an int)."""
        return cls(round(n * 86_400_000))


def with_window(
    length: Count | Duration,
    slide: Count | Duration | None = None,
    *,
    timestamp_field: str | None = None,
    lag: Duration | None = None,
    watermark_interval: Duration | None = None,
    late_stream: str | None = None,
) -> dict[str, Any]:
    """The component conf of a window (Storm's ``withWindow``, ``withTimestampField``, ``withLag``,
    ``withWatermarkInterval``, ``withLateTupleStream``): ``length`` and ``slide`` each a :class:`Count` or a
    :class:`Duration` (mixed kinds allowed; no slide: evaluated on every tuple). ``timestamp_field`` switches to
    event time; ``lag`` is how late a tuple may be, ``watermark_interval`` how often windows close, and
    ``late_stream`` where later ones go (else they are logged)::

        component_conf = WindowedBolt.with_window(Duration.seconds(10), Duration.seconds(1))
    """
    conf: dict[str, Any] = {}
    for what, value, count_key, ms_key in (
        ("length", length, keys.LENGTH_COUNT, keys.LENGTH_DURATION_MS),
        ("slide", slide, keys.SLIDE_COUNT, keys.SLIDE_DURATION_MS),
    ):
        if isinstance(value, Count):
            conf[count_key] = value.value
        elif isinstance(value, Duration) and value.ms > 0:
            conf[ms_key] = value.ms
        elif isinstance(value, Duration):
            raise WindowError(f"the window {what} must be longer than 0 ms")
        elif value is not None or what == "length":
            raise WindowError(f"the window {what} must be a Count or a Duration, got {value!r}")
    for key, given in ((keys.MAX_LAG_MS, lag), (keys.WATERMARK_INTERVAL_MS, watermark_interval)):
        if given is not None:
            if not isinstance(given, Duration) or (key == keys.WATERMARK_INTERVAL_MS and given.ms == 0):
                raise WindowError(f"{key} takes a Duration (a watermark interval > 0 ms), got {given!r}")
            conf[key] = given.ms
    if late_stream is not None and timestamp_field is None:
        raise WindowError("a late tuple stream needs event time: give timestamp_field as well")
    for key, name in ((keys.TIMESTAMP_FIELD, timestamp_field), (keys.LATE_TUPLE_STREAM, late_stream)):
        if name is not None:
            conf[key] = name
    return conf


def with_tumbling_window(length: Count | Duration, **event_time: Any) -> dict[str, Any]:
    """:func:`with_window` with the slide equal to the length: windows that do not overlap (Storm's
    ``withTumblingWindow``)::

        component_conf = WindowedBolt.with_tumbling_window(Count(100))
    """
    return with_window(length, length, **event_time)


def with_late_stream(streams: Mapping[str, Stream], conf: Mapping[str, Any]) -> Mapping[str, Stream]:
    """``streams`` (a bolt's outputs) with the late-tuple stream its conf names, one field ``late_tuple``: the bolt
    emits on it itself, so its declaration adds it, as Storm's executor declares it::

        with_late_stream(Average.streams, conf)   # {"default": ..., "late": Stream(["late_tuple"])}
    """
    late = conf.get(keys.LATE_TUPLE_STREAM)
    if late is None:
        return streams
    declared = streams.get(late)
    if declared is not None and tuple(declared.fields) != (keys.LATE_TUPLE_FIELD,):
        raise WindowError(
            f"late tuple stream {late!r} is declared with fields {list(declared.fields)}: it carries one field, "
            f"{keys.LATE_TUPLE_FIELD!r}; leave it out of outputs (it is declared for you) or name another stream"
        )
    return {**streams, late: Stream([keys.LATE_TUPLE_FIELD])}


def wall_ms() -> int:
    """Wall time in ms: a windowed bolt's processing time, as Storm's ``System.currentTimeMillis``."""
    return int(time.time() * 1000)


class TupleWindow:
    """One evaluation of a window (Storm's ``TupleWindow``): iterate it, or ask for its parts::

    def execute(self, window):
        total = sum(tup["amount"] for tup in window)          # window.get(): every tuple in it
        fresh = len(window.get_new())                          # arrived since the last evaluation
        self.emit([window.end_timestamp, total])
    """

    def __init__(
        self, tuples: list[Tuple], new: list[Tuple], expired: list[Tuple], start: int | None, end: int
    ) -> None:
        self._tuples, self._new, self._expired = tuples, new, expired
        #: The window's start in ms since the epoch (end - length), for a duration length; None for a count.
        self.start_timestamp = start
        #: The window's end in ms: the time it was evaluated at (processing time) or the window end (event time).
        self.end_timestamp = end

    def get(self) -> list[Tuple]:
        """Every tuple in the window, oldest first."""
        return self._tuples

    def get_new(self) -> list[Tuple]:
        """The tuples that arrived since the last evaluation."""
        return self._new

    def get_expired(self) -> list[Tuple]:
        """The tuples that left the window since the last evaluation (acked already)."""
        return self._expired

    def __iter__(self) -> Iterator[Tuple]:
        return iter(self._tuples)

    def __len__(self) -> int:
        return len(self._tuples)

    def __repr__(self) -> str:
        return (
            f"TupleWindow({len(self._tuples)} tuples, {len(self._new)} new, {len(self._expired)} expired, "
            f"start={self.start_timestamp}, end={self.end_timestamp})"
        )


class WindowedBolt(Bolt):
    """A bolt whose ``execute`` gets a :class:`TupleWindow` instead of a tuple (Storm's ``BaseWindowedBolt``)::

        class Totals(WindowedBolt):
            outputs = ["total"]
            component_conf = WindowedBolt.with_tumbling_window(Duration.minutes(1))

            def execute(self, window):
                self.emit([sum(tup["amount"] for tup in window)])

    Acking is Storm's: each input is acked when it leaves the window, and every emit made in ``execute`` is
    anchored to every tuple of the window (``anchors=`` picks others; ``anchors=()`` emits unanchored), so a
    failure downstream replays the window's inputs. Hold inputs no longer than the message timeout allows: a
    submit is refused when the window's length + slide passes ``topology.message.timeout.secs`` (or, for
    counts, ``topology.max.spout.pending``).

    Event time: set ``timestamp_field`` in :meth:`with_window`, or define :meth:`timestamp` to compute a tuple's
    timestamp (ms) yourself. Tick tuples are not windowed: a windowed bolt runs on its window's own timers.
    """

    auto_ack: ClassVar[bool] = False  # inputs are acked as they leave the window
    #: Anchor every emit of ``execute`` to every tuple of the window (Storm's way). A large window then makes
    #: large tuple trees, each emit an edge per tuple for the ackers; False anchors only what an emit names with
    #: ``anchors=`` (explicit anchoring, as Storm's JoinBolt does).
    anchor_to_window: ClassVar[bool] = True
    with_window = staticmethod(with_window)
    with_tumbling_window = staticmethod(with_tumbling_window)

    _manager: WindowManager[Tuple] | None = None
    _clock: Callable[[], int]
    _window_tuples: tuple[Tuple, ...] = ()
    _late_stream: str | None = None
    _timestamp_field = ""
    _failed: set[int]  # ids of windowed tuples failed by an exception in execute: not acked when they expire

    @abstractmethod
    def execute(self, window: TupleWindow) -> None:  # type: ignore[override]  # Storm's execute(TupleWindow)
        """Evaluate one window: emit what it yields. Called on the bolt's thread, as ``execute`` is. An exception
        is reported and fails the window's tuples (their spouts replay them), as a crash would in Storm."""

    def timestamp(self, tup: Tuple) -> int:
        """A tuple's event time in ms (Storm's ``TimestampExtractor``). By default, the value of the field named by
        ``topology.bolts.tuple.timestamp.field.name``; define it to compute the timestamp otherwise (which
        switches the bolt to event time)."""
        field = self._timestamp_field
        try:
            value = tup[field]
        except (KeyError, IndexError, TypeError):
            raise WindowError(
                f"input from {tup.component}:{tup.stream} has no timestamp field {field!r} "
                f"(it has {list(tup.fields)}): emit it, or set {keys.TIMESTAMP_FIELD}"
            ) from None
        if not isinstance(value, int) or isinstance(value, bool):
            raise WindowError(f"timestamp field {field!r} must hold an int (ms since the epoch), got {value!r}")
        return value

    def emit(
        self,
        values: Iterable[Any],
        stream: str = DEFAULT_STREAM,
        *,
        anchors: Tuple | Iterable[Tuple] | None = None,
        direct_task: int | None = None,
    ) -> Sequence[int]:
        """Emit one tuple, by default (``anchors=None``) anchored to every tuple of the window being evaluated
        (to none when ``anchor_to_window`` is False)."""
        return super().emit(
            values, stream, anchors=self._window_tuples if anchors is None else anchors, direct_task=direct_task
        )

    def emit_batch(
        self, rows: Iterable[Iterable[Any]], stream: str = DEFAULT_STREAM, *, anchors: Iterable[Tuple] | None = None
    ) -> None:
        """Emit every row, by default anchored to every tuple of the window being evaluated."""
        super().emit_batch(rows, stream, anchors=self._window_tuples if anchors is None else anchors)

    # -- what the runtime calls --------------------------------------------------------------------

    def open_window(self, inputs: Collection[str], clock: Callable[[], int]) -> None:
        """Start the window after ``prepare``: ``inputs`` are the bolt's input streams (``component:stream``,
        which the watermark waits on), ``clock`` the wall time in ms. Raises :class:`WindowError` when the
        conf describes no window or one that cannot run."""
        conf = self.context.conf
        window = keys.window_of(conf)
        if window is None:
            raise WindowError(
                f"windowed bolt {self.context.component_id!r} has no window length: declare it with "
                "with_window(...) or with_tumbling_window(...)"
            )
        event_time = window.timestamp_field is not None or type(self).timestamp is not WindowedBolt.timestamp
        if window.late_stream is not None:
            if not event_time:
                raise WindowError(f"{keys.LATE_TUPLE_STREAM} needs event time: set {keys.TIMESTAMP_FIELD}")
            self._late_stream = window.late_stream
        self._clock, self._failed, self._timestamp_field = clock, set(), window.timestamp_field or ""
        self._manager = WindowManager(window, event_time=event_time, inputs=inputs, now=clock())

    def add_inputs(self, batch: TupleBatch) -> None:
        """Window every input of ``batch`` (the worker's delivery), acting on what the window decides."""
        manager = self._manager
        if manager is None:
            raise WindowError("open_window() must run before inputs arrive")
        if not manager.event_time:
            for tup in batch.views():
                self._act(manager.add(tup, self._clock()))
            return
        for tup in batch.views():
            try:
                ts = self.timestamp(tup)
            except Exception as exc:  # a tuple without a timestamp cannot be windowed: it fails alone
                self.report_error(exc)
                self.fail(tup)
                continue
            self._act(manager.add(tup, ts, f"{tup.component}:{tup.stream}"))

    def advance(self) -> int | None:
        """Run the window's timers that are due; returns when (wall ms) the next one is, or None."""
        manager = self._manager
        if manager is None:
            return None
        self._act(manager.advance(self._clock()))
        return manager.next_due()

    def execute_batch(self, batch: TupleBatch) -> None:
        """The worker's delivery: the batch's inputs go into the window (``execute`` gets windows)."""
        self.add_inputs(batch)

    def _act(self, decisions: list[Decision[Tuple]]) -> None:
        for decision in decisions:
            if isinstance(decision, Expired):
                failed = self._failed
                for tup in decision.values:
                    if failed and id(tup) in failed:
                        failed.discard(id(tup))
                    else:
                        self.ack(tup)
            elif isinstance(decision, Activation):
                self._evaluate(decision)
            else:
                late = decision.value
                if self._late_stream is not None:
                    self.emit([list(late.values)], self._late_stream, anchors=late)
                else:
                    self.log.info("late tuple not windowed", tuple=repr(late), ts=decision.ts)
                self.ack(late)

    def _evaluate(self, activation: Activation[Tuple]) -> None:
        """The user's ``execute`` on one window, its emits anchored to the window's tuples. An exception is
        reported and fails the tuples of the window (each once: a failed tuple is not acked when it expires)."""
        self._window_tuples = tuple(activation.values) if self.anchor_to_window else ()
        try:
            self.execute(
                TupleWindow(
                    activation.values, activation.new, activation.expired, activation.start_ms, activation.end_ms
                )
            )
        except Exception as exc:
            self.report_error(exc)
            for tup in activation.values:
                if id(tup) not in self._failed:
                    self._failed.add(id(tup))
                    self.fail(tup)
        finally:
            self._window_tuples = ()
