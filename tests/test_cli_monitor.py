"""``storm monitor``'s arithmetic on plain values: snapshots of ``TopologyInfo`` and the rows printed from two
of them (the live command is tested against a process cluster in test_cli_ops_cluster.py)."""

from __future__ import annotations

from typing import Any

import pytest

from squall.cli.monitor import (
    ComponentRow, MonitorError, StreamRow, component_rows, snapshot, stream_row,
)
from squall.core.stats import to_executor_stats
from squall.core.thrift import storm
from squall.core.zk.records import TaskStats


def executor(task: int, component: str, stats: TaskStats | None, *, spout: bool = False) -> Any:
    return storm.ExecutorSummary(
        executor_info=storm.ExecutorInfo(task_start=task, task_end=task), component_id=component, host="h",
        port=6700, uptime_secs=10, stats=to_executor_stats(stats, spout=spout) if stats else None)


def info(*executors: Any) -> Any:
    return storm.TopologyInfo(id="wc-1-1", name="wc", uptime_secs=10, executors=list(executors), status="ACTIVE",
                              errors={})


def spout(task: int, emitted: int, acked: int, failed: int = 0) -> Any:
    return executor(task, "sentences", TaskStats(
        emitted={"default": emitted, "__ack_init": emitted}, transferred={"default": emitted},
        acked={"default": acked}, failed={"default": failed}), spout=True)


def split(task: int, emitted: int, acked: int, ticks: int = 0) -> Any:
    return executor(task, "split", TaskStats(
        emitted={"default": emitted, "__ack_ack": acked}, transferred={"default": 2 * emitted},
        acked={"sentences:default": acked, "__system:__tick": ticks}, failed={}))


def test_a_snapshot_keeps_user_components_and_counts_only_user_inputs() -> None:
    taken = snapshot(info(spout(1, 100, 90, 2), split(2, 500, 80, ticks=7), split(3, 0, 0),
                          executor(4, "split", None), executor(5, "__acker", TaskStats())), 12.5)
    assert taken.parallelism == {"sentences": 1, "split": 3}, "a task without stats yet still counts as a task"
    assert sorted(taken.tasks) == [1, 2, 3]
    assert taken.tasks[2].acked == 80, "acked ticks are not the component's work"
    assert taken.tasks[1].spout and not taken.tasks[2].spout
    assert (taken.time_secs, taken.topology) == (12.5, "wc")


def test_table_rows_total_since_start_and_rate_over_the_interval() -> None:
    first = snapshot(info(split(2, 500, 80), spout(1, 100, 90, 2)), 10.0)
    assert component_rows(None, first) == [ComponentRow("sentences", 1, 100, 90, 2),
                                           ComponentRow("split", 1, 500, 80, 0)], "spouts first; no rates yet"
    second = snapshot(info(split(2, 900, 100), spout(1, 300, 290, 6)), 14.0)
    assert component_rows(first, second) == [ComponentRow("sentences", 1, 300, 290, 6, 50.0, 50.0, 1.0),
                                             ComponentRow("split", 1, 900, 100, 0, 100.0, 5.0, 0.0)]


def test_a_restarted_or_new_task_counts_from_zero() -> None:
    first = snapshot(info(split(2, 500, 80)), 0.0)
    second = snapshot(info(split(2, 40, 4), split(3, 20, 2)), 2.0)  # task 2 restarted, task 3 is new
    (row,) = component_rows(first, second)
    assert (row.emitted, row.emitted_rate, row.acked_rate) == (60, 30.0, 3.0)


def test_storms_stream_line_first_counts_since_start_then_the_interval() -> None:
    first = snapshot(info(spout(1, 100, 90), split(2, 500, 80), split(3, 100, 10)), 100.0)
    assert stream_row(None, first, "split", "default", "emitted") == StreamRow("wc", "split", 2, "default", 0,
                                                                                600, 0.0)
    second = snapshot(info(spout(1, 100, 90), split(2, 1500, 80), split(3, 600, 10)), 102.0)
    row = stream_row(first, second, "split", "default", "transferred")
    assert row == StreamRow("wc", "split", 2, "default", 2000, 3000, 1.5)
    assert str(row) == "wc\tsplit\t2\tdefault\t2000\t3000\t1.5"


def test_an_unknown_component_or_stream_names_what_exists() -> None:
    taken = snapshot(info(spout(1, 100, 90), split(2, 500, 80), executor(3, "count", None)), 0.0)
    with pytest.raises(MonitorError, match="component 'nope' not found; wc has count, sentences, split"):
        stream_row(None, taken, "nope", "default", "emitted")
    with pytest.raises(MonitorError, match="stream 'words' not found; split has emitted counts on __ack_ack, default"):
        stream_row(None, taken, "split", "words", "emitted")
    assert stream_row(None, taken, "count", "default", "emitted").count == 0, "no stats yet is not an error"

