"""Spark bolts: batching, Arrow in and out, session settings (no Spark), then the bolt on a real local
Spark session in local mode (marked ``spark``: one session for the module, kept warm between tests)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from examples import weblogs
from squall import sparksession
from squall.dsl import Topology
from squall.spark import BATCH_CHECK_SECS, MicroBatch, SparkBolt, output_rows, to_arrow
from squall.testing import make_tuple, run_bolt, run_spout
from support import wait_until
from topologies import KeySums, Numbers, Recorder
from worker.local import LocalTopology


def test_a_batch_closes_at_its_size_or_when_its_oldest_tuple_is_old_enough() -> None:
    batch = MicroBatch(size=3, interval_secs=0.5)
    assert not batch.due(100.0)  # empty: never due
    assert not batch.add(make_tuple([1], ["n"]), now=100.0)
    assert not batch.add(make_tuple([2], ["n"]), now=100.4)
    assert not batch.due(100.49)
    assert batch.due(100.5)  # measured from the first tuple, not the last
    assert batch.add(make_tuple([3], ["n"]), now=100.45)
    assert [t["n"] for t in batch.take()] == [1, 2, 3]
    assert not batch.due(200.0) and batch.take() == []


def test_inputs_become_arrow_columns_named_by_their_fields() -> None:
    table = to_arrow([make_tuple(["a", 1, 2.5], ["key", "n", "x"]), make_tuple(["b", None, 3.0], ["key", "n", "x"])],
                     {"n": "int32"})
    assert table.column_names == ["key", "n", "x"]
    assert table.schema.field("n").type == pa.int32() and table.schema.field("x").type == pa.float64()
    assert table.column("n").to_pylist() == [1, None]


def test_an_input_field_arrow_cannot_type_names_the_field_and_the_fix() -> None:
    with pytest.raises(TypeError, match=r"input field 'v' cannot be a Spark column.*input_types"):
        to_arrow([make_tuple([1], ["v"]), make_tuple(["one"], ["v"])])


def test_result_rows_come_out_in_the_declared_field_order() -> None:
    table = pa.table({"total": [3, 4], "key": ["a", "b"], "extra": [0, 0]})
    assert output_rows(table, ["key", "total"]) == [("a", 3), ("b", 4)]


def test_a_result_missing_an_output_field_or_with_a_timestamp_column_says_what_to_change() -> None:
    with pytest.raises(ValueError, match=r"missing the output fields \['count'\]"):
        output_rows(pa.table({"key": ["a"]}), ["key", "count"])
    stamped = pa.table({"at": pa.array([0], pa.timestamp("ms"))})
    with pytest.raises(TypeError, match=r"output column 'at' has Spark/Arrow type timestamp.*cast it"):
        output_rows(stamped, ["at"])
    nested = pa.table({"tags": pa.array([[{"k": "v"}]])})
    assert output_rows(nested, ["tags"]) == [([{"k": "v"}],)]


def test_session_settings_default_to_local_spark_sized_to_the_slot_and_pass_spark_keys_through() -> None:
    conf = {"supervisor.slots.ports": [6700, 6701], "spark.batch.size": 10, "spark.sql.ansi.enabled": True,
            "spark.executor.memory": "1g", "spark.master": None, "topology.workers": 2}
    assert sparksession.where(conf, cores=8) == ("master", "local[4]")
    assert sparksession.where({"supervisor.slots.ports": [1, 2, 3]}, cores=2) == ("master", "local[1]")
    settings = sparksession.builder_conf(conf, "squall-t-1-2", cores=8)
    assert settings["spark.ui.enabled"] == "false" and settings["spark.sql.shuffle.partitions"] == "4"
    assert settings["spark.sql.ansi.enabled"] == "true" and settings["spark.executor.memory"] == "1g"
    assert "spark.batch.size" not in settings and "spark.master" not in settings
    assert settings["spark.app.name"] == "squall-t-1-2"
    assert sparksession.where({**conf, "spark.master": "spark://m:7077"}) == ("master", "spark://m:7077")
    assert sparksession.where({**conf, "spark.master": "spark://m:7077", "spark.remote": "sc://c:15002"}) == \
        ("remote", "sc://c:15002")


def test_a_spark_bolt_gets_its_own_thread_and_batch_ticks_unless_its_declaration_says_otherwise() -> None:
    t = Topology("sums")
    numbers = t.spout("numbers", Numbers, args=[10])
    t.bolt("sums", KeySums).shuffle(numbers)
    t.bolt("slow", KeySums, conf={"topology.tick.tuple.freq.secs": 1}).shuffle(numbers)
    topology, _ = t.build()
    sums, slow = (json.loads(topology.bolts[b].common.json_conf) for b in ("sums", "slow"))
    assert sums == {"squall.own.thread": True, "topology.tick.tuple.freq.secs": BATCH_CHECK_SECS}
    assert slow == {"squall.own.thread": True, "topology.tick.tuple.freq.secs": 1}


class NoDefaultStream(SparkBolt):
    outputs = {"other": ["x"]}

    def transform(self, batch: Any) -> Any:
        return batch


def test_a_spark_bolt_whose_output_stream_is_undeclared_fails_in_prepare() -> None:
    with pytest.raises(ValueError, match=r"NoDefaultStream emits on 'default', which its outputs do not declare"):
        run_bolt(NoDefaultStream)


def test_the_example_parses_combined_log_lines_and_says_why_a_line_is_not_one() -> None:
    line = '203.0.113.9 - - [10/Oct/2026:13:55:36 +0000] "GET /products/42?ref=x HTTP/1.1" 503 2326 "-" "curl"'
    assert weblogs.parse(line) == (1791640536000, "203.0.113.9", "GET", "/products", 503, 2326)
    with pytest.raises(ValueError, match="not in combined log format"):
        weblogs.parse(weblogs.log_line(weblogs.BAD_EVERY - 1))
    assert weblogs.parse(weblogs.log_line(1))[0] == weblogs.START_MS + weblogs.STEP_MS
    totals = weblogs.expected_totals(weblogs.log_line(i) for i in range(2000))
    assert sum(t["requests"] for t in totals.values()) == 2000 - 2000 // weblogs.BAD_EVERY
    assert {section for _, section in totals} == {"home", "shop", "content", "api", "account", "other"}


def test_the_example_spout_reads_log_files_in_name_order_and_replays_a_failed_line(tmp_path: Path) -> None:
    (tmp_path / "access-2.log").write_text("third\n")
    (tmp_path / "access-1.log").write_text("first\nsecond\n")
    run = run_spout(weblogs.AccessLogSpout, calls=4, kwargs={"files": str(tmp_path / "access-*.log")})
    assert run.values() == [("first",), ("second",), ("third",)]
    run.fail(1)
    run.next_tuple()
    assert run.values()[-1] == ("second",) and run.emitted[-1].msg_id == 1


# ------------------------------------------------------------------------------------------------
# On a real Spark session (local mode: the worker runtime in this process)
# ------------------------------------------------------------------------------------------------

FAST = {"task.heartbeat.frequency.secs": 0.05, "topology.message.timeout.secs": 30,
        "spark.batch.size": 300, "spark.batch.interval.ms": 200}


@pytest.fixture(scope="module")
def warm_spark() -> Iterator[None]:
    """Holds the process's session for the module, so each test does not pay ~15 s to start a JVM."""
    sparksession.acquire({"spark.master": "local[1]"}, "squall-tests")
    yield
    sparksession.release()


def sums_topology(count: int, fail_batches: int = 0) -> Topology:
    t = Topology("sums")
    numbers = t.spout("numbers", Numbers, args=[count, 7])
    sums = t.bolt("sums", KeySums, args=[fail_batches]).shuffle(numbers)
    t.bolt("sink", Recorder).shuffle(sums)
    return t


def reference(count: int, keys: int = 7) -> dict[str, tuple[int, int]]:
    """Per key: how many of ``range(count)`` and their sum, in plain Python."""
    counts, totals = Counter[str](), Counter[str]()
    for n in range(count):
        counts[f"k{n % keys}"] += 1
        totals[f"k{n % keys}"] += n
    return {key: (counts[key], totals[key]) for key in counts}


def summed(seen: list[tuple[str, str, tuple[Any, ...]]]) -> dict[str, tuple[int, int]]:
    counts, totals = Counter[str](), Counter[str]()
    for _, _, (key, count, total) in seen:
        counts[key] += count
        totals[key] += total
    return {key: (counts[key], totals[key]) for key in counts}


@pytest.mark.spark
@pytest.mark.slow
def test_spark_bolt_output_equals_a_pure_python_computation(warm_spark: None) -> None:
    with LocalTopology(sums_topology(2000), FAST) as local:
        numbers, sink = local.component("numbers"), local.component("sink")
        wait_until(lambda: len(numbers.acked) == 2000, timeout=120, what="every number acked through Spark")
        assert summed(sink.seen) == reference(2000)
        assert local.component("sums").batches >= 2000 // 300  # batches close at spark.batch.size
        assert numbers.failed == [] and local.errors == []


@pytest.mark.spark
@pytest.mark.slow
def test_an_exception_in_transform_fails_the_batch_and_the_replay_makes_the_output_exact(warm_spark: None) -> None:
    with LocalTopology(sums_topology(1000, fail_batches=2), FAST) as local:
        numbers, sink = local.component("numbers"), local.component("sink")
        wait_until(lambda: len(set(numbers.acked)) == 1000, timeout=120, what="every number acked after replays")
        assert len(numbers.failed) >= 2  # the two failed batches' inputs, at least one each
        assert set(numbers.failed) <= set(numbers.acked)
        assert summed(sink.seen) == reference(1000)  # failed batches emitted nothing; replays counted once
        errors = [text for _, text in local.errors]
        assert len(errors) == 2 and all("injected failure in batch" in e and "in transform" in e for e in errors)


@pytest.mark.spark
@pytest.mark.slow
def test_a_batch_closes_on_its_interval_when_input_stops(warm_spark: None) -> None:
    """10 tuples never fill a 300-tuple batch: they go through when the interval passes."""
    with LocalTopology(sums_topology(10), FAST) as local:
        started = time.monotonic()
        wait_until(lambda: len(local.component("numbers").acked) == 10, timeout=60, what="the partial batch run")
        assert summed(local.component("sink").seen) == reference(10)
        assert time.monotonic() - started >= FAST["spark.batch.interval.ms"] / 1000
