"""User metrics (squall.api.metrics): what a task may register, what its heartbeat reads, and the typed errors."""

from __future__ import annotations

import pytest

from squall.api.component import TopologyContext
from squall.api.metrics import MAX_METRICS, MAX_NAME_CHARS, MetricError, TaskMetrics


def context() -> TopologyContext:
    return TopologyContext("t-1-0", "t", "split", 7, {"split": (7,)})


def test_counters_gauges_meters_and_histograms_read_as_counters_and_gauges() -> None:
    ctx = context()
    words, lines = ctx.register_counter("words"), ctx.register_meter("lines")
    sizes = ctx.register_histogram("sizes")
    ctx.register_gauge("queue", lambda: 4)
    words.inc(3)
    lines.mark()
    for v in (5, 1, 3):
        sizes.update(v)
    counters, gauges, problems = ctx.metrics.read()
    assert counters == {"words": 3, "lines": 1, "sizes.count": 3} and problems == []
    assert gauges == {"queue": 4.0, "sizes.min": 1.0, "sizes.max": 5.0, "sizes.mean": 3.0, "sizes.p50": 3.0,
                      "sizes.p95": 5.0, "sizes.p99": 5.0}


def test_registering_a_counter_twice_gives_the_same_one_but_a_name_has_one_kind() -> None:
    metrics = TaskMetrics()
    assert metrics.register_counter("n") is metrics.register_counter("n")
    with pytest.raises(MetricError, match="already registered as another kind"):
        metrics.register_gauge("n", lambda: 1)


def test_a_histogram_and_another_metric_cannot_be_sent_under_one_name() -> None:
    metrics = TaskMetrics()
    metrics.register_histogram("sizes")
    with pytest.raises(MetricError, match="would be sent as sizes.count"):
        metrics.register_counter("sizes.count")
    metrics.register_gauge("lag.p99", lambda: 1)
    with pytest.raises(MetricError, match="would be sent as lag.p99"):
        metrics.register_histogram("lag")


@pytest.mark.parametrize("name, problem", [
    ("has space", "bad metric name"),
    ("", "bad metric name"),
    ("x" * (MAX_NAME_CHARS + 1), f"at most {MAX_NAME_CHARS} \\(squall.api.metrics.MAX_NAME_CHARS\\)"),
])
def test_bad_names_are_refused_naming_the_rule(name: str, problem: str) -> None:
    with pytest.raises(MetricError, match=problem):
        TaskMetrics().register_counter(name)


def test_a_task_may_register_a_bounded_number_of_metrics() -> None:
    metrics = TaskMetrics()
    for i in range(MAX_METRICS):
        metrics.register_counter(f"c{i}")
    with pytest.raises(MetricError, match=rf"at most {MAX_METRICS} metrics \(squall.api.metrics.MAX_METRICS\)"):
        metrics.register_gauge("one.more", lambda: 0)


def test_a_counter_only_goes_up_and_a_gauge_must_be_a_function() -> None:
    metrics = TaskMetrics()
    with pytest.raises(ValueError, match="only goes up"):
        metrics.register_counter("c").inc(-1)
    with pytest.raises(MetricError, match="pass a function"):
        metrics.register_gauge("g", 3)  # type: ignore[arg-type]


def test_a_gauge_that_cannot_be_read_is_left_out_and_said_why() -> None:
    metrics = TaskMetrics()
    metrics.register_gauge("broken", lambda: 1 / 0)
    metrics.register_gauge("nan", lambda: float("nan"))
    metrics.register_gauge("ok", lambda: -1.5)
    _, gauges, problems = metrics.read()
    assert gauges == {"ok": -1.5}
    assert any("'broken' raised ZeroDivisionError" in p for p in problems) and any("'nan'" in p for p in problems)
    assert metrics.read()[2] == [], "said once, not at every heartbeat"


def test_a_gauge_that_fails_again_after_reading_well_is_said_again() -> None:
    values: list[object] = [None, 1.0, "x"]
    metrics = TaskMetrics()
    metrics.register_gauge("flaky", lambda: values.pop(0))
    assert [len(metrics.read()[2]) for _ in range(3)] == [1, 0, 1]
