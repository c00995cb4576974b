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
from squall.api import sparksession
from squall.api.dsl import Topology
from squall.api.spark import BATCH_CHECK_SECS, MicroBatch, SparkBolt, next_batch_size, output_rows, to_arrow
from squall.api.testing import make_context, make_tuple, run_bolt, run_spout
from squall.api.tuple import Fields, TupleBatch
from squall.core.clock import SimulatedClock
from squall.dev import sparkconnect
from support import wait_until
from topologies import GATES, BatchNumbers, KeySums, Numbers, Recorder
from squall.dev.local import LocalTopology


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


def test_the_next_batch_is_halfway_to_what_arrives_during_one_job_within_one_and_the_limit() -> None:
    assert next_batch_size(10_000, 10_000, job_secs=0.5, arrivals_per_sec=4_000) == 6_000
    assert next_batch_size(10_000, 2_000, job_secs=2.0, arrivals_per_sec=9_000) == 10_000  # Spark behind: the limit
    assert next_batch_size(10_000, 1, job_secs=0.0, arrivals_per_sec=0.0) == 1


def adapt(clock: SimulatedClock, arrivals_per_sec: float, fixed_secs: float, secs_per_row: float,
          limit: int = 20_000, rounds: int = 30) -> tuple[int, float, float]:
    """A Spark bolt's batches on simulated time: tuples arrive at a steady rate, a job takes fixed + per-row
    time and runs while the next batch fills, which starts when it is full and the job is done. The last
    round's (batch size, job seconds, seconds to collect the batch)."""
    batch, size, job_ends = MicroBatch(limit, interval_secs=3600), limit, clock.monotonic()
    for _ in range(rounds):
        batch.size = size
        while not batch.add(make_tuple([0], ["n"]), clock.monotonic()):
            clock.advance(1 / arrivals_per_sec)
        collected = clock.monotonic() - batch.opened
        clock.advance(max(0.0, job_ends - clock.monotonic()))  # a full batch waits for the running job
        inputs = batch.take()
        job_secs = fixed_secs + secs_per_row * len(inputs)
        job_ends = clock.monotonic() + job_secs
        size = next_batch_size(limit, size, job_secs, len(inputs) / collected)
    return size, job_secs, collected


def test_batches_settle_where_a_job_lasts_as_long_as_collecting_the_next_batch() -> None:
    size, job_secs, collected = adapt(SimulatedClock(), arrivals_per_sec=4_000, fixed_secs=0.3, secs_per_row=5e-5)
    assert 1_450 <= size <= 1_550  # from 20,000: the fixed point of n = 4,000/s x (0.3 s + 5e-5 s x n) is 1,500
    assert job_secs == pytest.approx(collected, rel=0.05)


def test_batches_grow_to_the_limit_when_spark_cannot_keep_up() -> None:
    size, job_secs, collected = adapt(SimulatedClock(), arrivals_per_sec=4_000, fixed_secs=0.3, secs_per_row=3e-4,
                                      limit=5_000)
    assert size == 5_000 and job_secs > collected


def test_a_batch_counts_the_rows_of_the_worker_batches_it_holds() -> None:
    batch, fields = MicroBatch(size=5, interval_secs=1.0), Fields(["n"])
    assert not batch.add(TupleBatch([(1,), (2,)], fields, "a", "default", 1), now=1.0, rows=2)
    assert batch.add(TupleBatch([(3,), (4,), (5,)], fields, "a", "default", 1), now=1.1, rows=3)
    assert batch.full and len(batch.take()) == 2 and batch.rows == 0 and not batch.full


def test_worker_batches_become_the_same_arrow_columns_as_their_tuples() -> None:
    fields = Fields(["key", "n"])
    batches = [TupleBatch([("a", 1), ("b", 2)], fields, "s", "default", 1), TupleBatch([("c", None)], fields, "s",
                                                                                        "default", 2)]
    table = to_arrow(batches, {"n": "int32"})
    assert table.column_names == ["key", "n"] and table.schema.field("n").type == pa.int32()
    assert table.to_pylist() == to_arrow([t for b in batches for t in b], {"n": "int32"}).to_pylist()
    assert table.column("key").to_pylist() == ["a", "b", "c"]


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


def test_sessions_run_jobs_without_adaptive_execution_as_structured_streaming_does_unless_the_conf_says_so() -> None:
    assert sparksession.builder_conf({}, "squall-t-1-2")["spark.sql.adaptive.enabled"] == "false"
    assert sparksession.builder_conf({"spark.sql.adaptive.enabled": True}, "t")["spark.sql.adaptive.enabled"] == "true"


def test_the_connect_server_listens_on_localhost_at_its_port_and_takes_the_conf_s_spark_settings() -> None:
    conf = {"spark.executor.memory": "1g", "spark.sql.ansi.enabled": True, "spark.batch.size": 5,
            "spark.remote": "sc://x"}
    argv = sparkconnect.server_command(15099, "local[2]", conf)
    assert Path(argv[0]).name == "spark-submit" and Path(argv[0]).exists()
    assert argv[argv.index("--class") + 1] == sparkconnect.SERVER_CLASS
    assert argv[argv.index("--master") + 1] == "local[2]"
    settings = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--conf"]
    assert {"spark.connect.grpc.binding.address=127.0.0.1", "spark.connect.grpc.binding.port=15099",
            "spark.connect.grpc.port.maxRetries=0", "spark.executor.memory=1g",
            "spark.sql.ansi.enabled=true"} <= set(settings)
    assert not [s for s in settings if s.startswith(("spark.batch.size", "spark.remote"))]


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


def test_the_example_spout_emits_chunks_of_its_task_s_lines_as_one_tree_each_and_replays_a_failed_chunk_whole(
        tmp_path: Path) -> None:
    (tmp_path / "access-1.log").write_text("".join(f"line {i}\n" for i in range(10)))
    context = make_context("access-log", 2, component_tasks={"access-log": [1, 2]})  # the second of two tasks
    run = run_spout(weblogs.AccessLogSpout, calls=0, kwargs={"files": str(tmp_path / "*.log")}, context=context)
    first = run.next_batch(3)
    assert [e.values for e in first] == [("line 1",), ("line 3",), ("line 5",)] and run.pending == [(1, 7)]
    assert [e.values for e in run.next_batch(3)] == [("line 7",), ("line 9",)] and run.pending == [(1, 7), (7, 10)]
    assert run.next_batch(3) == []  # every line of its share emitted
    run.fail((1, 7))
    run.ack((7, 10))
    assert [e.values for e in run.next_batch(1)] == [("line 1",), ("line 3",), ("line 5",)]  # whole, as emitted
    run.ack((1, 7))
    assert run.spout.acked == 5


def test_the_example_parser_takes_a_batch_and_anchors_each_output_to_its_own_line() -> None:
    lines = [weblogs.log_line(i) for i in range(weblogs.BAD_EVERY - 2, weblogs.BAD_EVERY + 1)]
    run = run_bolt(weblogs.ParseLine, [(line,) for line in lines], fields=["line"])
    assert run.values() == [weblogs.parse(lines[0]), weblogs.parse(lines[2])]
    assert run.values("invalid") == [(lines[1], "not in combined log format")]
    assert [e.anchors for e in run.emitted if e.stream == "default"] == [(run.inputs[0],), (run.inputs[2],)]
    assert [e.anchors for e in run.emitted if e.stream == "invalid"] == [(run.inputs[1],)]
    assert run.acked == run.inputs


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

# The message timeout is long enough that no tree times out while slow Spark jobs run: the tests
# that assert exact output would otherwise count a replayed tree twice (at-least-once, as in Storm).
FAST = {"task.heartbeat.frequency.secs": 0.05, "topology.message.timeout.secs": 120,
        "spark.batch.size": 300, "spark.batch.interval.ms": 200}


@pytest.fixture(scope="module")
def warm_spark() -> Iterator[None]:
    """Holds the process's session for the module, so each test does not pay ~15 s to start a JVM."""
    sparksession.acquire({"spark.master": "local[1]"}, "squall-tests")
    yield
    sparksession.release()


def sums_topology(count: int, fail_batches: int = 0, gate: str | None = None) -> Topology:
    t = Topology("sums")
    numbers = t.spout("numbers", Numbers, args=[count, 7])
    sums = t.bolt("sums", KeySums, args=[fail_batches, gate]).shuffle(numbers)
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
        wait_until(lambda: len(numbers.acked) == 2000, timeout=240, what="every number acked through Spark")
        assert summed(sink.seen) == reference(2000)
        assert local.component("sums").batches >= 2000 // 300  # batches close at spark.batch.size
        assert numbers.failed == [] and local.errors == []


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("fail_batches", [0, 1])
def test_a_spark_bolt_fed_whole_spout_batches_as_trees_acks_each_once_and_replays_a_failed_job_s_trees(
        warm_spark: None, fail_batches: int) -> None:
    """Spout batches of one tree each: a job's output carries their roots, not its 300 inputs'; a failed job fails
    whole trees, whose rows in other jobs are counted again when replayed (at-least-once)."""
    t = Topology("tree-sums", conf={"topology.max.spout.pending": 900})
    numbers = t.spout("numbers", BatchNumbers, args=[2000, 7], kwargs={"one_tree": True})
    sums = t.bolt("sums", KeySums, args=[fail_batches]).shuffle(numbers)
    t.bolt("sink", Recorder).shuffle(sums)
    with LocalTopology(t, FAST) as local:
        spout, sink = local.component("numbers"), local.component("sink")
        wait_until(lambda: set(spout.acked) == set(range(2000)), timeout=120, what="every number acked through Spark")
        assert len(spout.acked) == 2000 and len(spout.trees_acked) < 2000 / 10
        got, want = summed(sink.seen), reference(2000)
        if not fail_batches:
            assert got == want and spout.trees_failed == [] and local.errors == []
            return
        assert spout.trees_failed and all(got[key][0] >= want[key][0] for key in want), "every number counted"


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


@pytest.mark.spark
@pytest.mark.slow
def test_the_bolt_collects_the_next_batch_while_a_job_runs_and_runs_one_job_at_a_time(warm_spark: None) -> None:
    batch = FAST["spark.batch.size"]
    GATES.pop("first-job", None)
    with LocalTopology(sums_topology(3 * batch, gate="first-job"), FAST) as local:
        bolt, numbers = local.tasks("sums")[0], local.component("numbers")
        # Past the first batch while its job is held: the bolt keeps taking input (a synchronous job would
        # block it on the batch's last tuple, at or below ``batch`` executed).
        wait_until(lambda: local.component("sums").batches == 1, timeout=60, what="the first job in transform")
        wait_until(lambda: bolt.stats.executed > batch, timeout=60, what="input taken while the first job runs")
        wait_until(lambda: bolt.stats.executed >= 2 * batch - 100, timeout=60, what="the next batch collected")
        assert local.component("sums").batches == 1 and numbers.acked == []  # one job in flight, none finished
        GATES["first-job"].set()
        wait_until(lambda: len(numbers.acked) == 3 * batch, timeout=120, what="every number acked through Spark")
        assert summed(local.component("sink").seen) == reference(3 * batch)
        assert numbers.failed == [] and local.errors == []
