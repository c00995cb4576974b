"""Task stats between Squall's :class:`~squall.core.zk.records.TaskStats` and Storm's ``ExecutorStats``.

A task's counters since it started (Storm's ``:all-time`` window) go to nimbus in each task heartbeat,
through the topology master; nimbus makes the 10 min, 3 h and 1 day windows from them
(:mod:`nimbus.windows`) and ``getTopologyInfo`` returns all four per executor, under Storm's window keys
(:data:`WINDOWS`). Counts are exact, so ``rate`` (Storm's sampling rate) is 1.0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from squall.core.names import id_problem
from squall.core.thrift import storm
from squall.core.zk.records import TaskStats

ALL_TIME = ":all-time"
#: Storm's window keys, shortest first: the last 10 minutes, 3 hours, 1 day, and since the task started.
WINDOWS = ("600", "10800", "86400", ALL_TIME)
#: Most keys (streams, or inputs) one map of a task's stats may carry; more is refused as bad input.
MAX_KEYS = 256
#: Why tuples fail (``failed_by_reason`` keys): a spout's tree timed out (``topology.message.timeout.secs``);
#: a bolt called ``fail`` (for a spout: a bolt failed its tree, by ``fail`` or an exception); a bolt's execute
#: raised.
FAIL_REASONS = ("timeout", "explicit", "exception")


def to_executor_stats(stats: TaskStats, *, spout: bool, windows: Mapping[str, TaskStats] | None = None) -> Any:
    """Storm's struct with ``stats`` as ``:all-time`` and each of ``windows`` (window key → its counts) under
    its key: spouts keyed by output stream, bolt inputs by ``GlobalStreamId``::

        to_executor_stats(TaskStats(emitted={"default": 7}), spout=True).emitted   # {':all-time': {'default': 7}}
    """
    by_window = {**(windows or {}), ALL_TIME: stats}

    def window(stat: str, key: Any = str) -> dict[str, dict[Any, Any]]:
        return {w: {key(k): v for k, v in getattr(s, stat).items()} for w, s in by_window.items()}

    if spout:
        specific = storm.ExecutorSpecificStats(
            spout=storm.SpoutStats(acked=window("acked"), failed=window("failed"), complete_ms_avg=window("latency_ms"))
        )
    else:
        specific = storm.ExecutorSpecificStats(
            bolt=storm.BoltStats(
                acked=window("acked", _stream_id),
                failed=window("failed", _stream_id),
                process_ms_avg=window("process_ms", _stream_id),
                executed=window("executed", _stream_id),
                execute_ms_avg=window("latency_ms", _stream_id),
                processed=window("processed", _stream_id),
            )
        )
    return storm.ExecutorStats(
        emitted=window("emitted"),
        transferred=window("transferred"),
        specific=specific,
        rate=1.0,
        failed_by_reason=window("failed_by_reason"),
        user_counters=dict(stats.user_counters) or None,
        user_gauges=dict(stats.user_gauges) or None,
    )


def from_executor_stats(value: Any) -> TaskStats:
    """Validate what a topology master sent (its ``:all-time`` window); ``ValueError`` says what is wrong."""
    specific = value.specific
    if specific is None or (specific.spout is None) == (specific.bolt is None):
        raise ValueError("stats.specific must hold exactly one of spout or bolt")
    common = {
        "emitted": _counts(value.emitted, "emitted"),
        "transferred": _counts(value.transferred, "transferred"),
        # Optional (Squall's ids >= 100): an older worker sends none of them.
        "failed_by_reason": _counts(value.failed_by_reason, "failed_by_reason"),
        "user_counters": _values(value.user_counters, "user_counters", int),
        "user_gauges": _values(value.user_gauges, "user_gauges", float),
    }
    if specific.spout is not None:
        s = specific.spout
        return TaskStats(
            **common,
            acked=_counts(s.acked, "acked"),
            failed=_counts(s.failed, "failed"),
            latency_ms=_counts(s.complete_ms_avg, "complete_ms_avg", float),
        )
    b = specific.bolt
    return TaskStats(
        **common,
        acked=_counts(b.acked, "acked", key=_input_key),
        failed=_counts(b.failed, "failed", key=_input_key),
        executed=_counts(b.executed, "executed", key=_input_key),
        latency_ms=_counts(b.execute_ms_avg, "execute_ms_avg", float, key=_input_key),
        # Optional: an older worker sends no process latency (its process_ms_avg maps are empty).
        process_ms=_counts(b.process_ms_avg, "process_ms_avg", float, key=_input_key),
        processed=_counts(b.processed, "processed", key=_input_key),
    )


def task_stats(values: Mapping[str, Any]) -> TaskStats:
    """A task's stats from the dict its heartbeat tuple carries; keys this Squall does not know (a newer
    worker's) are left out, so a worker of a newer release still beats through an older topology master."""
    return TaskStats(**{k: v for k, v in values.items() if k in _TASK_STATS_FIELDS})


_TASK_STATS_FIELDS = frozenset(f.name for f in fields(TaskStats))


def _stream_id(key: str) -> Any:
    component, _, stream = key.partition(":")
    return storm.GlobalStreamId(componentId=component, streamId=stream)


def _input_key(sid: Any) -> str:
    if not isinstance(sid, storm.GlobalStreamId):
        raise ValueError(f"expected a GlobalStreamId key, got {type(sid).__name__}")
    for part in (sid.componentId, sid.streamId):
        if part is None or (problem := id_problem(part)):
            raise ValueError(f"bad stream id {part!r}: {problem or 'missing'}")
    return f"{sid.componentId}:{sid.streamId}"


def _stream_key(stream: Any) -> str:
    if problem := id_problem(stream):
        raise ValueError(f"bad stream id {stream!r}: {problem}")
    return stream


def _values(values: Any, what: str, kind: type) -> dict[str, Any]:
    """User metric values by name, checked and bounded (a gauge may be negative, never NaN or infinite)."""
    values = values or {}
    if len(values) > MAX_KEYS:
        raise ValueError(f"stats.{what} has {len(values)} metrics; at most {MAX_KEYS}")
    result = {}
    for name, v in values.items():
        if problem := id_problem(name):
            raise ValueError(f"stats.{what}: bad metric name {name!r}: {problem}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (kind is int and v < 0):
            raise ValueError(
                f"stats.{what}[{name!r}] must be a {'non-negative ' if kind is int else ''}finite number, got {v!r}"
            )
        result[name] = kind(v)
    return result


def _counts(windows: Any, what: str, kind: type = int, key: Any = _stream_key) -> dict[str, Any]:
    """The ``:all-time`` map of one stat (other windows are ignored), checked and bounded."""
    counts = (windows or {}).get(ALL_TIME) or {}
    if len(counts) > MAX_KEYS:
        raise ValueError(f"stats.{what} has {len(counts)} keys; at most {MAX_KEYS}")
    result = {}
    for k, v in counts.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"stats.{what}[{k!r}] must be a non-negative number, got {v!r}")
        result[key(k)] = kind(v)
    return result
