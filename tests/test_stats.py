"""Task stats between the record nimbus stores and Storm's ExecutorStats that clients read."""

from __future__ import annotations

import pytest

from squall.api.tuple import Fields
from squall.core.stats import ALL_TIME, MAX_KEYS, from_executor_stats, task_stats, to_executor_stats
from squall.core.thrift import storm
from squall.core.zk.records import TaskStats
from worker.executor.routing import StreamOut

SPOUT = TaskStats(emitted={"default": 10, "errors": 2}, transferred={"default": 20, "errors": 2},
                  acked={"default": 9}, failed={"default": 1}, latency_ms={"default": 3.5},
                  failed_by_reason={"timeout": 1})
BOLT = TaskStats(emitted={"default": 4}, transferred={"default": 4}, acked={"split:default": 5, "raw:default": 1},
                 failed={"raw:default": 2}, executed={"split:default": 5, "raw:default": 3},
                 latency_ms={"split:default": 0.25}, process_ms={"split:default": 4.5}, processed={"split:default": 2},
                 failed_by_reason={"explicit": 1, "exception": 1},
                 user_counters={"seen": 9, "n.count": 3}, user_gauges={"last.n": -2.5})


@pytest.mark.parametrize("stats, spout", [(SPOUT, True), (BOLT, False)])
def test_stats_survive_the_trip_through_storms_struct(stats: TaskStats, spout: bool) -> None:
    assert from_executor_stats(to_executor_stats(stats, spout=spout)) == stats


def test_bolt_inputs_are_keyed_by_global_stream_id_in_the_all_time_window() -> None:
    thrift = to_executor_stats(BOLT, spout=False)
    executed = thrift.specific.bolt.executed[ALL_TIME]
    assert executed[storm.GlobalStreamId(componentId="split", streamId="default")] == 5
    assert thrift.emitted == {ALL_TIME: {"default": 4}} and thrift.rate == 1.0


def test_windows_go_under_storms_keys_beside_all_time_which_alone_comes_back() -> None:
    last_10m = TaskStats(executed={"split:default": 2}, latency_ms={"split:default": 0.5})
    thrift = to_executor_stats(BOLT, spout=False, windows={"600": last_10m})
    split = storm.GlobalStreamId(componentId="split", streamId="default")
    assert thrift.specific.bolt.executed == {"600": {split: 2}, ALL_TIME: {split: 5, storm.GlobalStreamId(
        componentId="raw", streamId="default"): 3}}
    assert thrift.specific.bolt.execute_ms_avg["600"] == {split: 0.5} and thrift.emitted["600"] == {}
    assert from_executor_stats(thrift) == BOLT, "a topology master sends :all-time; nimbus makes the windows"


def _spout_stats(acked: dict) -> storm.ExecutorStats:
    return storm.ExecutorStats(emitted={}, transferred={}, rate=1.0, specific=storm.ExecutorSpecificStats(
        spout=storm.SpoutStats(acked={ALL_TIME: acked}, failed={}, complete_ms_avg={})))


@pytest.mark.parametrize("acked, problem", [
    ({"default": -1}, "non-negative"),
    ({"default": float("nan")}, "non-negative"),
    ({"a/b": 1}, "bad stream id"),
    ({f"s{i}": 1 for i in range(MAX_KEYS + 1)}, f"at most {MAX_KEYS}"),
])
def test_bad_stats_are_refused_with_the_reason(acked: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        from_executor_stats(_spout_stats(acked))


def test_stats_must_be_either_a_spouts_or_a_bolts() -> None:
    both = storm.ExecutorStats(emitted={}, transferred={}, rate=1.0, specific=storm.ExecutorSpecificStats())
    with pytest.raises(ValueError, match="exactly one of spout or bolt"):
        from_executor_stats(both)


def test_transferred_counts_copies_across_a_refresh_and_behind_custom_groupings() -> None:
    fields = Fields(["n"])
    fixed = StreamOut(fields, False, lambda values: (1, 2, 3), frozenset(), fanout=3)
    fixed.emitted = 2
    custom = StreamOut(fields, False, lambda values: (1,) * values[0], frozenset(), fanout=None)
    for n in (0, 1, 2):
        custom.route([n])
    custom.emitted = 3
    assert (fixed.transferred, custom.transferred) == (6, 3)
    after = StreamOut(fields, False, lambda values: (1,), frozenset(), fanout=1)  # a rebalance left one target
    after.carry_counts(fixed)
    after.emitted += 1
    assert (after.emitted, after.transferred) == (3, 7)


def test_failures_by_reason_are_windowed_and_user_metrics_are_not() -> None:
    thrift = to_executor_stats(BOLT, spout=False, windows={"600": TaskStats(failed_by_reason={"explicit": 1})})
    assert thrift.failed_by_reason == {"600": {"explicit": 1}, ALL_TIME: {"explicit": 1, "exception": 1}}
    assert thrift.user_counters == {"seen": 9, "n.count": 3} and thrift.user_gauges == {"last.n": -2.5}


def test_a_bolts_process_latency_goes_in_process_ms_avg_with_its_sample_count() -> None:
    thrift = to_executor_stats(BOLT, spout=False).specific.bolt
    split = storm.GlobalStreamId(componentId="split", streamId="default")
    assert thrift.process_ms_avg == {ALL_TIME: {split: 4.5}} and thrift.processed == {ALL_TIME: {split: 2}}


def test_a_bolt_of_an_older_worker_has_no_process_latency() -> None:
    older = to_executor_stats(TaskStats(executed={"split:default": 3}), spout=False)
    older.specific.bolt.processed = None  # an older worker sends no field 100, and empty process_ms_avg maps
    assert from_executor_stats(older) == TaskStats(executed={"split:default": 3})


def test_stats_of_an_older_worker_have_no_reasons_and_no_metrics() -> None:
    older = to_executor_stats(TaskStats(acked={"default": 1}), spout=True)
    older.failed_by_reason = older.user_counters = older.user_gauges = None
    assert from_executor_stats(older) == TaskStats(acked={"default": 1})


@pytest.mark.parametrize("counters, gauges, problem", [
    ({"seen": -1}, {}, "non-negative finite"),
    ({}, {"g": float("inf")}, "finite number"),
    ({"a b": 1}, {}, "bad metric name"),
    ({f"m{i}": 1 for i in range(MAX_KEYS + 1)}, {}, f"at most {MAX_KEYS}"),
])
def test_bad_user_metrics_are_refused_with_the_reason(counters: dict, gauges: dict, problem: str) -> None:
    thrift = _spout_stats({})
    thrift.user_counters, thrift.user_gauges = counters, gauges
    with pytest.raises(ValueError, match=problem):
        from_executor_stats(thrift)


def test_a_heartbeat_from_a_newer_worker_keeps_the_stats_this_release_knows() -> None:
    assert task_stats({"acked": {"default": 2}, "a_newer_stat": {"x": 1}}) == TaskStats(acked={"default": 2})
