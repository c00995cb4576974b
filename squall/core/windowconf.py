"""The window a bolt's conf describes (Storm's ``topology.bolts.window.*`` keys) and Storm's rule that it fit
the topology's message timeout and spout pending cap.

A windowed bolt's settings travel as ordinary component conf (so they show in the UI and survive the Thrift
round trip, as Storm's ``BaseWindowedBolt`` writes them): the user API writes these keys, the worker reads
them back with :func:`window_of`, and nimbus checks them at submit with :func:`window_problem`. Both live here,
in the core, because nimbus never loads the user API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LATE_TUPLE_FIELD",
    "LATE_TUPLE_STREAM",
    "LENGTH_COUNT",
    "LENGTH_DURATION_MS",
    "MAX_LAG_MS",
    "SLIDE_COUNT",
    "SLIDE_DURATION_MS",
    "TIMESTAMP_FIELD",
    "WATERMARK_INTERVAL_MS",
    "WINDOW_KEYS",
    "WindowConf",
    "window_of",
    "window_problem",
]

LENGTH_COUNT = "topology.bolts.window.length.count"
LENGTH_DURATION_MS = "topology.bolts.window.length.duration.ms"
SLIDE_COUNT = "topology.bolts.window.sliding.interval.count"
SLIDE_DURATION_MS = "topology.bolts.window.sliding.interval.duration.ms"
TIMESTAMP_FIELD = "topology.bolts.tuple.timestamp.field.name"
MAX_LAG_MS = "topology.bolts.tuple.timestamp.max.lag.ms"
WATERMARK_INTERVAL_MS = "topology.bolts.watermark.event.interval.ms"
LATE_TUPLE_STREAM = "topology.bolts.late.tuple.stream"
#: Every key of a window: setting a window replaces them all.
WINDOW_KEYS = frozenset(
    {
        LENGTH_COUNT,
        LENGTH_DURATION_MS,
        SLIDE_COUNT,
        SLIDE_DURATION_MS,
        TIMESTAMP_FIELD,
        MAX_LAG_MS,
        WATERMARK_INTERVAL_MS,
        LATE_TUPLE_STREAM,
    }
)

#: The one field of the late-tuple stream: the late tuple's values (Storm's ``WindowedBoltExecutor.LATE_TUPLE_FIELD``).
LATE_TUPLE_FIELD = "late_tuple"

#: Storm's defaults (``WindowedBoltExecutor``): no lag, a watermark a second.
DEFAULT_MAX_LAG_MS = 0
DEFAULT_WATERMARK_INTERVAL_MS = 1000


@dataclass(frozen=True)
class WindowConf:
    """A window as numbers: its length and slide, each a count of tuples or a duration in ms (exactly one of
    each pair is set; the slide defaults to a count of 1, a window evaluated on every tuple), and the event-time
    settings."""

    length_count: int | None
    length_ms: int | None
    slide_count: int | None
    slide_ms: int | None
    timestamp_field: str | None = None
    lag_ms: int = DEFAULT_MAX_LAG_MS
    watermark_interval_ms: int = DEFAULT_WATERMARK_INTERVAL_MS
    late_stream: str | None = None


def window_of(conf: Mapping[str, Any]) -> WindowConf | None:
    """The window ``conf`` (a bolt's effective conf) describes, or None when it sets no window length. A count
    key wins over its duration key, as in Storm. Types and bounds are the key table's to check."""
    length_count, length_ms = conf.get(LENGTH_COUNT), conf.get(LENGTH_DURATION_MS)
    if length_count is None and length_ms is None:
        return None
    slide_count, slide_ms = conf.get(SLIDE_COUNT), conf.get(SLIDE_DURATION_MS)
    if slide_count is None and slide_ms is None:
        slide_count = 1
    lag, interval = conf.get(MAX_LAG_MS), conf.get(WATERMARK_INTERVAL_MS)
    return WindowConf(
        length_count=length_count,
        length_ms=None if length_count is not None else length_ms,
        slide_count=slide_count,
        slide_ms=None if slide_count is not None else slide_ms,
        timestamp_field=conf.get(TIMESTAMP_FIELD),
        lag_ms=DEFAULT_MAX_LAG_MS if lag is None else lag,
        watermark_interval_ms=DEFAULT_WATERMARK_INTERVAL_MS if interval is None else interval,
        late_stream=conf.get(LATE_TUPLE_STREAM),
    )


def window_problem(window: WindowConf, conf: Mapping[str, Any]) -> str | None:
    """Storm's rule (``WindowedBoltExecutor.validate``), or None when the window keeps it: every input is held
    until its window expires, so the duration part (length + slide) must fit in ``topology.message.timeout.secs``
    when timeouts are on, else trees time out and replay; and the count part within
    ``topology.max.spout.pending`` when that is set, else the spouts stop before the window fills."""
    durations = [ms for ms in (window.length_ms, window.slide_ms) if ms is not None]
    timeout_secs = conf.get("topology.message.timeout.secs")
    timeouts = conf.get("topology.enable.message.timeouts", True)
    if durations and timeouts and timeout_secs is not None and sum(durations) > timeout_secs * 1000:
        return (
            f"window duration (length + sliding interval) {sum(durations)} ms is more than "
            f"topology.message.timeout.secs ({timeout_secs} s): raise the timeout or shorten the window"
        )
    counts = [n for n in (window.length_count, window.slide_count) if n is not None]
    pending = conf.get("topology.max.spout.pending")
    if counts and pending is not None and sum(counts) > pending:
        return (
            f"window count (length + sliding interval) {sum(counts)} is more than topology.max.spout.pending "
            f"({pending}): raise the cap or shorten the window"
        )
    return None
