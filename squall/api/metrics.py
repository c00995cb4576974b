"""User metrics (Storm's metrics V2): counters, gauges, meters and histograms a spout or bolt registers
through its :class:`~squall.api.component.TopologyContext` in ``open``/``prepare``.

Their values ride the task's heartbeat to nimbus, which serves them in ``getTopologyInfo``
(``ExecutorStats.user_counters`` / ``user_gauges``), the UI's component page and its ``/metrics`` (labels
topology, component, task, name)::

    def prepare(self, conf, context):
        self.words = context.register_counter("words")
        context.register_gauge("cache.size", lambda: len(self.cache))
        self.sizes = context.register_histogram("sentence.words")

    def execute(self, tup):
        self.words.inc()
        self.sizes.update(len(tup[0].split()))

A meter is sent as its count (``rate()`` in Prometheus makes its rates); a histogram as ``NAME.count``
beside ``NAME.min``, ``.max``, ``.mean``, ``.p50``, ``.p95`` and ``.p99`` of its last
:data:`HISTOGRAM_SAMPLES` values. Values are read when the task beats (``task.heartbeat.frequency.secs``),
on its own thread: a gauge's function must be quick and must not block.

What one task may register is bounded (:data:`MAX_METRICS` metrics, names of at most
:data:`MAX_NAME_CHARS` characters from ``A-Z a-z 0-9 . _ -``): every heartbeat carries them all.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

from squall.core.names import id_problem

#: Most metrics one task may register.
MAX_METRICS = 32
#: Longest metric name.
MAX_NAME_CHARS = 64
#: How many of its newest values a histogram keeps for its quantiles.
HISTOGRAM_SAMPLES = 1028
#: The quantiles a histogram reports, as name suffix → quantile.
QUANTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
#: What a histogram named NAME is sent as: ``NAME.count``, ``NAME.min``...
HISTOGRAM_PARTS = ("count", "min", "max", "mean", *QUANTILES)


class MetricError(ValueError):
    """A metric that cannot be registered: a bad or taken name, or one over a limit (the message names it)."""


class Counter:
    """A count that only goes up (Storm's ``Counter``; Prometheus reads it as a counter).

    >>> c = Counter(); c.inc(); c.inc(4); c.count
    5
    """

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        """Add ``n`` (at least 0: a counter never goes down; use a gauge for a value that does)."""
        if n < 0:
            raise ValueError(f"a counter only goes up: inc({n}); use register_gauge for a value that goes down")
        self.count += n


class Meter(Counter):
    """Marks of events (Storm's ``Meter``); sent as its count, whose rate Prometheus's ``rate()`` makes.

    >>> m = Meter(); m.mark(); m.mark(2); m.count
    3
    """

    __slots__ = ()

    def mark(self, n: int = 1) -> None:
        """Count ``n`` events."""
        self.inc(n)


class Histogram:
    """A distribution of values (Storm's ``Histogram``): its count and the min, max, mean and quantiles
    of its newest :data:`HISTOGRAM_SAMPLES` values.

    >>> h = Histogram()
    >>> for v in range(1, 101): h.update(v)
    >>> h.values()["h.p50"], h.values()["h.max"]
    (50.0, 100.0)
    """

    __slots__ = ("count", "_samples", "_name")

    def __init__(self, name: str = "h") -> None:
        self.count = 0
        self._samples: deque[float] = deque(maxlen=HISTOGRAM_SAMPLES)
        self._name = name

    def update(self, value: float) -> None:
        """Take in one value."""
        self.count += 1
        self._samples.append(value)

    def values(self) -> dict[str, float]:
        """Its gauges by flattened name (none before the first value)."""
        samples = sorted(self._samples)
        if not samples:
            return {}
        name, n = self._name, len(samples)
        values = {
            f"{name}.min": float(samples[0]),
            f"{name}.max": float(samples[-1]),
            f"{name}.mean": math.fsum(samples) / n,
        }
        # Nearest rank: the smallest value with at least a share q of the values at or below it.
        values.update(
            {f"{name}.{suffix}": float(samples[max(0, math.ceil(q * n) - 1)]) for suffix, q in QUANTILES.items()}
        )
        return values


class TaskMetrics:
    """One task's registered metrics; :meth:`read` is what its heartbeat carries.

    >>> metrics = TaskMetrics()
    >>> metrics.register_counter("words").inc(3)
    >>> metrics.register_gauge("queue", lambda: 7)
    >>> metrics.read()
    ({'words': 3}, {'queue': 7.0}, [])
    """

    def __init__(self) -> None:
        self._counters: dict[str, Counter] = {}
        self._gauges: dict[str, Callable[[], float]] = {}
        self._histograms: dict[str, Histogram] = {}
        self._failing: set[str] = set()  # gauges whose last read failed (said once, until they read again)

    def __len__(self) -> int:
        return len(self._counters) + len(self._gauges) + len(self._histograms)

    def register_counter(self, name: str) -> Counter:
        """A counter named ``name``; the same one again for a name already registered as a counter."""
        return self._register(self._counters, name, Counter)

    def register_meter(self, name: str) -> Meter:
        """A meter named ``name`` (sent as its count)."""
        return self._register(self._counters, name, Meter)

    def register_histogram(self, name: str) -> Histogram:
        """A histogram named ``name``: ``NAME.count`` and its gauges ``NAME.min``, ``.max``, ``.mean``, ``.p50``..."""
        return self._register(self._histograms, name, lambda: Histogram(name), _sent_as(name, histogram=True))

    def register_gauge(self, name: str, value: Callable[[], float]) -> None:
        """A gauge: ``value()`` is called at each heartbeat and must return a finite number."""
        if not callable(value):
            raise MetricError(f"gauge {name!r}: pass a function returning its value, not {type(value).__name__}")
        self._check_new(name, {name})
        self._gauges[name] = value

    def read(self) -> tuple[dict[str, int], dict[str, float], list[str]]:
        """Counters and gauges by name, and why a gauge was left out (its function raised, or returned something
        that is not a finite number), said the first time it fails in a row: a broken gauge is not an error
        every heartbeat."""
        counters = {name: c.count for name, c in self._counters.items()}
        gauges: dict[str, float] = {}
        problems = []
        for name, value in self._gauges.items():
            problem = None
            try:
                number = value()
            except Exception as exc:
                problem = f"gauge {name!r} raised {type(exc).__name__}: {exc}"
            else:
                if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
                    problem = f"gauge {name!r} returned {number!r}, not a finite number"
            if problem is None:
                gauges[name] = float(number)
                self._failing.discard(name)
            elif name not in self._failing:
                self._failing.add(name)
                problems.append(problem)
        for name, histogram in self._histograms.items():
            counters[f"{name}.count"] = histogram.count
            gauges.update(histogram.values())
        return counters, gauges, problems

    def _register(
        self, registry: dict[str, Any], name: str, make: Callable[[], Any], sent_as: set[str] | None = None
    ) -> Any:
        existing = registry.get(name)
        if existing is not None and type(existing) is type(make()):
            return existing
        self._check_new(name, sent_as or {name})
        metric = registry[name] = make()
        return metric

    def _check_new(self, name: str, sent_as: set[str]) -> None:
        problem = id_problem(name)
        if problem is None and len(name) > MAX_NAME_CHARS:
            problem = f"it is {len(name)} characters long; at most {MAX_NAME_CHARS} (squall.api.metrics.MAX_NAME_CHARS)"
        if problem:
            raise MetricError(f"bad metric name {name!r}: {problem}")
        if name in self._counters or name in self._gauges or name in self._histograms:
            raise MetricError(f"metric {name!r} is already registered as another kind; pick another name")
        taken = {*self._counters, *self._gauges, *(n for h in self._histograms for n in _sent_as(h, histogram=True))}
        if clash := sorted(sent_as & taken):
            raise MetricError(
                f"metric {name!r} would be sent as {', '.join(clash)}, which another metric is sent as "
                "(a histogram NAME is sent as NAME.count, NAME.min...); pick another name"
            )
        if len(self) >= MAX_METRICS:
            raise MetricError(
                f"a task may register at most {MAX_METRICS} metrics (squall.api.metrics.MAX_METRICS); "
                f"{name!r} would be one more"
            )


def _sent_as(name: str, *, histogram: bool) -> set[str]:
    """The names a metric's values are sent under."""
    return {f"{name}.{part}" for part in HISTOGRAM_PARTS} if histogram else {name}
