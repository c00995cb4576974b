"""A task's counters (:class:`Stats`), and the stats it reports to the topology master from them
(:func:`task_stats`): Storm's executed, acked, failed, latencies, by stream where the stream is not implied.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from squall.core.zk.records import TaskStats
from worker.executor.routing import StreamOut


@dataclass
class Stats:
    """Counters a task keeps for benchmarks and the topology master (spout: roots; bolt: inputs).

    Totals are always kept. By key (a spout's output stream, a bolt's input ``component:stream``) they
    are kept only where the key is not implied: spouts, and bolts with more than one input stream.
    """

    emitted: int = 0
    executed: int = 0
    acked: int = 0
    failed: int = 0
    #: Of ``failed``: a spout's trees that timed out, a bolt's inputs failed because execute raised.
    failed_timeout: int = 0
    failed_exception: int = 0
    #: Seconds spent in ``execute`` (bolts).
    execute_secs: float = 0.0
    #: Complete latencies (seconds) of acked roots, sampled at ``topology.stats.sample.rate``; the newest only.
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))
    executed_by: Counter[str] = field(default_factory=Counter)
    acked_by: Counter[str] = field(default_factory=Counter)
    failed_by: Counter[str] = field(default_factory=Counter)
    #: Latency sums (seconds) by key and how many values each sum holds.
    latency_by: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    timed_by: Counter[str] = field(default_factory=Counter)
    #: Process latency (bolts; Storm's: from the start of the input's execute to its ack): seconds summed over
    #: the acks timed, and how many were timed, in total and by key as above.
    process_secs: float = 0.0
    processed: int = 0
    process_by: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    processed_by: Counter[str] = field(default_factory=Counter)


def task_stats(
    stats: Stats,
    outs: Mapping[str, StreamOut],
    inputs: Sequence[str],
    counters: dict[str, int],
    gauges: dict[str, float],
) -> TaskStats:
    """A task's counters as the topology master reports them, with its user metrics' ``counters`` and ``gauges``:
    ``outs`` are its output streams, ``inputs`` its input streams
    (``component:stream``); a lone input's (or a spout's lone stream's) counts are the totals."""
    by: dict[str, Any]
    emitted = {s: out.emitted for s, out in outs.items() if out.emitted}
    transferred = {s: out.transferred for s, out in outs.items() if out.transferred}
    if len(inputs) == 1:
        (key,) = inputs
        by = {
            "executed": {key: stats.executed},
            "acked": {key: stats.acked},
            "failed": {key: stats.failed},
            "latency_ms": {key: 1000 * stats.execute_secs / stats.executed} if stats.executed else {},
            "process_ms": {key: 1000 * stats.process_secs / stats.processed} if stats.processed else {},
            "processed": {key: stats.processed},
        }
    elif not inputs and len(outs) == 1:  # a spout with one stream
        (key,) = outs
        by = {
            "executed": {},
            "acked": {key: stats.acked},
            "failed": {key: stats.failed},
            "latency_ms": {key: 1000 * stats.latency_by[key] / stats.timed_by[key]} if stats.timed_by[key] else {},
        }
    else:
        by = {
            "executed": dict(stats.executed_by),
            "acked": dict(stats.acked_by),
            "failed": dict(stats.failed_by),
            "latency_ms": {k: 1000 * t / stats.timed_by[k] for k, t in stats.latency_by.items() if stats.timed_by[k]},
            "process_ms": {
                k: 1000 * t / stats.processed_by[k] for k, t in stats.process_by.items() if stats.processed_by[k]
            },
            "processed": dict(stats.processed_by),
        }
    by["failed_by_reason"] = {
        "timeout": stats.failed_timeout,
        "exception": stats.failed_exception,
        "explicit": stats.failed - stats.failed_timeout - stats.failed_exception,
    }
    return TaskStats(
        emitted=emitted,
        transferred=transferred,
        user_counters=counters,
        user_gauges=gauges,
        **{name: {k: v for k, v in counts.items() if v} for name, counts in by.items()},
    )


def sample_period(rate: float) -> int:
    """Every how many acks one latency is kept, for ``topology.stats.sample.rate``."""
    return max(1, round(1 / rate)) if rate > 0 else 1 << 62


def stats_to_wire(stats: TaskStats) -> dict[str, Any]:
    """Stats as a plain dict for the heartbeat tuple (msgpack between workers)."""
    return {f.name: getattr(stats, f.name) for f in fields(stats)}
