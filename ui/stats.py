"""How Storm's UI adds executors' numbers up: pure functions, no I/O.

The REST API (:mod:`ui.shapes`) and ``/metrics`` (:mod:`ui.metrics`) both read their numbers here, so they
never disagree. They follow Storm:

* a component's emitted and transferred counts add up its executors' output streams, its acked, failed
  and executed counts its spout streams or bolt inputs; latencies are averages weighted by what they time
  (complete latency by acked trees, execute latency by executed tuples);
* the topology's emitted and transferred add up every shown component, its acked, failed and complete
  latency are the spouts' (a tree counts once, where it started);
* a bolt's capacity is the share of the time its busiest executor spent executing
  (executed × execute latency / time), the time being the window's length, at most the executor's uptime
  (Storm's UI takes the 10-minute window for it; Squall the window asked for);
* ``sys=False`` (Storm's ``sys=0``) leaves out system components (``__acker``) and system streams or
  inputs (``__ack_ack``, ``__tick``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from squall.core.names import is_system
from squall.core.stats import ALL_TIME

#: A stats key: a spout's output stream, or a bolt's input as (component, stream).
StatKey = str | tuple[str, str]

#: Squall's split of ``failed`` by reason (:data:`squall.core.stats.FAIL_REASONS`) → its JSON field. A spout's
#: ``failedExplicit`` counts trees a bolt failed (by ``fail`` or an exception), a bolt's its own ``fail`` calls.
REASON_STATS = {"timeout": "failedTimeout", "explicit": "failedExplicit", "exception": "failedException"}


def window_seconds(window: str, uptime_secs: int) -> float:
    """How long a window's counts were gathered over: the window's length, at most the uptime.

    >>> window_seconds(":all-time", 120), window_seconds("600", 120), window_seconds("600", 9000)
    (120.0, 120.0, 600.0)
    """
    return float(uptime_secs if window == ALL_TIME else min(int(window), uptime_secs))


@dataclass(frozen=True)
class Counts:
    """One executor's counts in one window, system streams included (views filter them).

    ``acked``, ``failed``, ``latency_ms`` are keyed by output stream for a spout (complete latency) and by
    input ``(component, stream)`` for a bolt (execute latency); ``executed`` and ``process_ms`` are a bolt's.
    """

    spout: bool
    emitted: Mapping[str, int]
    transferred: Mapping[str, int]
    acked: Mapping[StatKey, int]
    failed: Mapping[StatKey, int]
    executed: Mapping[StatKey, int]
    latency_ms: Mapping[StatKey, float]
    process_ms: Mapping[StatKey, float]
    #: Failures by reason (:data:`squall.core.stats.FAIL_REASONS`); empty from an older worker.
    failed_by_reason: Mapping[str, int]


def _counts(stats: Any, window: str) -> Counts | None:
    """The counts of one ``ExecutorStats`` in ``window``; None before the executor's first stats."""
    if stats is None or stats.specific is None:
        return None

    def pick(windows: Any, input_keys: bool = False) -> dict[Any, Any]:
        values = (windows or {}).get(window) or {}
        return {(k.componentId, k.streamId) if input_keys else k: v for k, v in values.items()}

    emitted, transferred, reasons = pick(stats.emitted), pick(stats.transferred), pick(stats.failed_by_reason)
    if stats.specific.spout is not None:
        s = stats.specific.spout
        return Counts(
            True, emitted, transferred, pick(s.acked), pick(s.failed), {}, pick(s.complete_ms_avg), {}, reasons
        )
    b = stats.specific.bolt
    return Counts(
        False,
        emitted,
        transferred,
        pick(b.acked, True),
        pick(b.failed, True),
        pick(b.executed, True),
        pick(b.execute_ms_avg, True),
        pick(b.process_ms_avg, True),
        reasons,
    )


def is_shown(key: StatKey, sys: bool) -> bool:
    """Whether a stream or input counts: always with ``sys``, else only when no part of it is a system name."""
    return sys or not any(is_system(part) for part in ((key,) if isinstance(key, str) else key))


def _total(values: Mapping[Any, int], sys: bool) -> int:
    return sum(n for key, n in values.items() if is_shown(key, sys))


def weighted(pairs: Iterable[tuple[float, int]]) -> float:
    """The average of latencies weighted by the counts they were measured over (0 when nothing was)."""
    pairs = list(pairs)
    weight = sum(w for _, w in pairs)
    return sum(value * w for value, w in pairs) / weight if weight else 0.0


def _latency(parts: Iterable[Counts], latencies: str, weights: str, sys: bool) -> float:
    return weighted(
        (latency, getattr(c, weights).get(key, 0))
        for c in parts
        for key, latency in getattr(c, latencies).items()
        if is_shown(key, sys)
    )


@dataclass(frozen=True)
class Executed:
    """An executor as nimbus reports it (its ``ExecutorSummary``: host, port, tasks, uptime) and its counts in
    ``window`` (None before its first stats)."""

    summary: Any
    counts: Counts | None
    window: str = ALL_TIME

    @property
    def capacity(self) -> float:
        """The share of the window (of its uptime, when younger) it spent executing (every input, ticks too:
        they take its time)."""
        c, seconds = self.counts, window_seconds(self.window, self.summary.uptime_secs)
        if c is None or seconds <= 0:
            return 0.0
        return sum(n * c.latency_ms.get(key, 0.0) for key, n in c.executed.items()) / (seconds * 1000)

    @property
    def task(self) -> str:
        """Its task id (``"3"``), or ``"3-4"`` for an executor of several tasks."""
        info = self.summary.executor_info
        return str(info.task_start) if info.task_start == info.task_end else f"{info.task_start}-{info.task_end}"


def reported_counts(parts: Iterable[Executed]) -> list[Counts]:
    """The counts of the executors that have reported stats."""
    return [p.counts for p in parts if p.counts is not None]


def _sum(counts: Iterable[Counts], stat: str, sys: bool) -> int:
    """One stat (``emitted``, ``acked``, ...) added up over executors and their shown streams or inputs."""
    return sum(_total(getattr(c, stat), sys) for c in counts)


def task_count(parts: Iterable[Executed]) -> int:
    """How many tasks the executors run."""
    return sum(p.summary.executor_info.task_end - p.summary.executor_info.task_start + 1 for p in parts)


def stats_numbers(parts: list[Executed], spout: bool, sys: bool) -> dict[str, float]:
    """The stats Storm shows for a group of one component's executors (one, or all of them), as numbers:
    emitted, transferred, acked, failed; a spout's completeLatency; a bolt's executed, executeLatency,
    processLatency (milliseconds) and capacity. The REST API and ``/metrics`` both read them here."""
    reported = reported_counts(parts)
    row: dict[str, float] = {stat: _sum(reported, stat, sys) for stat in ("emitted", "transferred", "acked", "failed")}
    row.update(
        {name: sum(c.failed_by_reason.get(reason, 0) for c in reported) for reason, name in REASON_STATS.items()}
    )
    if spout:
        row["completeLatency"] = _latency(reported, "latency_ms", "acked", sys)
    else:
        row.update(
            {
                "executed": _sum(reported, "executed", sys),
                "executeLatency": _latency(reported, "latency_ms", "executed", sys),
                "processLatency": _latency(reported, "process_ms", "acked", sys),
                "capacity": max((p.capacity for p in parts), default=0.0),
            }
        )
    return row


def topology_numbers(grouped: Mapping[str, list[Executed]], kinds: Mapping[str, str], sys: bool) -> dict[str, float]:
    """A topology's stats as numbers: emitted and transferred add up the shown components of ``kinds``
    (component → ``"spout"`` or ``"bolt"``); acked, failed and complete latency are the spouts' (a tree counts
    once, where it began)."""
    shown = [c for c in kinds if sys or not is_system(c)]
    counts = reported_counts(p for c in shown for p in grouped.get(c, []))
    trees = stats_numbers([p for c in shown if kinds[c] == "spout" for p in grouped.get(c, [])], True, sys)
    return {
        "emitted": _sum(counts, "emitted", sys),
        "transferred": _sum(counts, "transferred", sys),
        "acked": trees["acked"],
        "failed": trees["failed"],
        "completeLatency": trees["completeLatency"],
        **{name: trees[name] for name in REASON_STATS.values()},
    }


def component_kinds(topology: Any) -> dict[str, str]:
    """Component id → ``"spout"`` or ``"bolt"``, system components included (nimbus's ``getTopology``)."""
    return {**dict.fromkeys(topology.spouts, "spout"), **dict.fromkeys(topology.bolts, "bolt")}


def executors_by_component(info: Any, window: str) -> dict[str, list[Executed]]:
    """A ``TopologyInfo``'s executors with their counts in ``window``, by component id."""
    grouped: dict[str, list[Executed]] = {}
    for e in info.executors:
        grouped.setdefault(e.component_id, []).append(Executed(e, _counts(e.stats, window), window))
    return grouped
