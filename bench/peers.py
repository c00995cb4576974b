"""The same two workloads on two Python stream-processing peers, so Squall's benchmarks can print ratios.

* const → null: a source emits the constant string ``"some data"`` into a sink that discards it.
* word count: message ``k`` is ``SENTENCES[k % 5]`` (from examples/wordcount.py), split on whitespace,
  counted per word; the final counts are returned so they can be checked exactly.

Peers: Bytewax 0.21.1 (``pip install -e '.[bench]'``; 1 worker, in-process ``run_main``) and PySpark
Structured Streaming (``local[2]``). Each function imports its peer itself, so this module imports without
either, and times the run only: never imports, JVM start or session start. Each returns a :class:`cpu.Run`:
items, wall seconds and the CPU-seconds of the processes doing the work (Bytewax: this process, whose threads
run its workers; Spark: the JVM and this driver process).

Not a test: prints a table.
``python bench/peers.py [--only bytewax|spark] [--tuples N] [--rounds N] [--seconds S] [--warmup CPU_S]``
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import cycle, islice, repeat
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cpu import Run, Sample
from examples.wordcount import SENTENCES

PAYLOAD = "some data"
PER_PASS = Counter(word for sentence in SENTENCES for word in sentence.split())  # one pass over SENTENCES
WORDS_PER_PASS = sum(PER_PASS.values())

BYTEWAX_BATCH = 1000  # TestingSource batch_size: items the source hands to the dataflow per poll
# Bytewax runs a fixed input; a run of ``seconds`` × these takes about that long on one core here, so it is measured
# over as long as the other systems (a run under a second follows the machine's second-to-second speed swings).
BYTEWAX_ITEMS_PER_SEC = 2_000_000
BYTEWAX_PASSES_PER_SEC = 40_000
# The JVM's JIT keeps speeding Spark up for its first ~100 CPU-seconds here, across queries and sessions (the JVM
# outlives them): word count went 0.55M → 1.1M words per CPU-s over one query's first 45 CPU-s, and reached a
# plateau of ~1.8M only in a third query. So each query first runs SPARK_WARMUP CPU-seconds of the JVM unmeasured
# (counted in CPU, not wall-clock: on a busy machine wall-clock seconds warm it less), and warm_spark() runs both
# workloads for SPARK_JVM_WARMUP each before a bench's first measured Spark run.
SPARK_WARMUP = 20.0
SPARK_JVM_WARMUP = 60.0
# rate-micro-batch rows per micro-batch, sized for ~1 s batches here so per-batch overhead is amortised.
# Word count's is a multiple of len(SENTENCES): every batch is whole passes, so
# words = rows × WORDS_PER_PASS / 5 exactly.
SPARK_CONST_ROWS = 5_000_000
SPARK_SENTENCE_ROWS = 200_000


def whole_passes(counts: dict[str, int]) -> int | None:
    """n if ``counts`` is exactly n passes over SENTENCES (each word: occurrences per pass × n), else None."""
    word, per = next(iter(PER_PASS.items()))
    n = counts.get(word, 0) // per
    return n if counts == {w: c * n for w, c in PER_PASS.items()} else None


# --- Bytewax ----------------------------------------------------------------------------------------------


def _bytewax_run(
    items: Iterable[str], write: Callable[[list[Any]], None], count: int, count_words: bool = False
) -> Run:
    """A run of input → [flat_map split → count_final] → a sink calling ``write`` per batch, counted as ``count``
    items."""
    try:
        import bytewax.operators as op
        from bytewax.dataflow import Dataflow
        from bytewax.outputs import DynamicSink, StatelessSinkPartition
        from bytewax.testing import TestingSource, run_main
    except ImportError as exc:
        raise RuntimeError("bytewax is not installed: pip install -e '.[bench]' (bytewax==0.21.1)") from exc

    class Partition(StatelessSinkPartition):
        def write_batch(self, items: list[Any]) -> None:
            write(items)

    class Sink(DynamicSink):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> Partition:
            return Partition()

    flow = Dataflow("peer")
    lines = op.input("source", flow, TestingSource(items, batch_size=BYTEWAX_BATCH))
    if count_words:
        words = op.flat_map("split", lines, str.split)
        op.output("sink", op.count_final("count", words, key=lambda word: word), Sink())
    else:
        op.output("sink", lines, Sink())
    start = Sample.take()
    run_main(flow)
    return start.run_to(Sample.take(), count)


def bytewax_const_null(tuples: int = 2_000_000) -> Run:
    """Items/s of ``tuples`` constant strings into a sink that only counts them (to prove delivery)."""
    seen = 0

    def discard(batch: list[str]) -> None:
        nonlocal seen
        seen += len(batch)

    run = _bytewax_run(repeat(PAYLOAD, tuples), discard, tuples)
    if seen != tuples:
        raise RuntimeError(f"bytewax sink saw {seen} items, expected {tuples}")
    return run


def bytewax_word_count(rounds: int = 200_000) -> tuple[Run, dict[str, int]]:
    """Words over ``rounds`` passes of SENTENCES, and the final counts (emitted once, at end of input)."""
    counts: dict[str, int] = {}
    run = _bytewax_run(
        islice(cycle(SENTENCES), rounds * len(SENTENCES)), counts.update, rounds * WORDS_PER_PASS, count_words=True
    )
    return run, counts


# --- PySpark Structured Streaming -------------------------------------------------------------------------
# Source: ``rate-micro-batch`` (fixed rowsPerBatch), not ``rate``: ``rate`` puts every row generated since the
# last trigger into the next batch, so above Spark's capacity batches grow without bound and below it one
# measures the rowsPerSecond throttle. Runs batches back to back (default trigger).


def _spark_session() -> Any:
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise RuntimeError("pyspark is not installed: pip install -e . (pyspark>=3.5; needs Java 17)") from exc
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("squall-peer")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.numRecentProgressUpdates", "10000")  # keep every batch's progress
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _rate_source(spark: Any, rows_per_batch: int) -> Any:
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 2)
        .load()
    )


def _measure(spark: Any, query: Any, seconds: float, warmup: float) -> Run:
    """Input rows of the micro-batches that started once the JVM had spent ``warmup`` CPU-seconds on the query,
    over at least ``seconds``, and the CPU of the JVM and this driver over exactly those batches: CPU is sampled
    as a batch's progress appears, which is when the next batch starts (the default trigger runs them back to back)."""
    while query.lastProgress is None:  # the first batch plans and compiles the query: seconds
        _check(query)
        time.sleep(0.1)
    jvm = spark.sparkContext._gateway.proc.pid
    first, start = _next_progress(query, jvm)
    warm = start.cpu + warmup
    while start.cpu < warm:
        first, start = _next_progress(query, jvm)
    time.sleep(seconds)
    last, end = _next_progress(query, jvm)
    rows = sum(p["numInputRows"] for p in query.recentProgress if first < p["batchId"] <= last)
    return start.run_to(end, rows)


def _next_progress(query: Any, jvm: int) -> tuple[int, Sample]:
    """Wait for the next micro-batch to finish; its batch id and a sample taken as its progress appeared."""
    seen = query.lastProgress["batchId"]
    while True:
        _check(query)
        batch = query.lastProgress["batchId"]
        if batch != seen:
            return batch, Sample.take([jvm])
        time.sleep(0.02)


def _check(query: Any) -> None:
    if not query.isActive:
        raise RuntimeError(f"Spark query failed: {query.exception()}")


def _stop(spark: Any, query: Any) -> None:
    spark.sparkContext.setLogLevel("OFF")  # stopping mid-batch logs the killed tasks' stack traces as ERROR
    query.stop()


def warm_spark(cpu_seconds: float = SPARK_JVM_WARMUP) -> None:
    """Run both Spark workloads unmeasured for ``cpu_seconds`` of the JVM each, so that the JIT state the JVM keeps
    between sessions is about the same for every measured run after it."""
    spark_const_null(0, cpu_seconds)
    spark_word_count(0, cpu_seconds)


def spark_const_null(seconds: float = 20.0, warmup: float = SPARK_WARMUP) -> Run:
    """Rows of ``lit("some data")`` into the ``noop`` sink, over ``seconds`` of steady micro-batches."""
    spark = _spark_session()
    try:
        with tempfile.TemporaryDirectory() as checkpoint:
            from pyspark.sql import functions as F

            query = (
                _rate_source(spark, SPARK_CONST_ROWS)
                .select(F.lit(PAYLOAD).alias("payload"))
                .writeStream.format("noop")
                .option("checkpointLocation", checkpoint)
                .start()
            )
            try:
                return _measure(spark, query, seconds, warmup)
            finally:
                _stop(spark, query)
    finally:
        spark.stop()


def spark_word_count(seconds: float = 20.0, warmup: float = SPARK_WARMUP) -> tuple[Run, dict[str, int]]:
    """Words through split + explode + groupBy(word).count() (complete mode, memory sink), and the final counts."""
    spark = _spark_session()
    try:
        with tempfile.TemporaryDirectory() as checkpoint:
            from pyspark.sql import functions as F

            sentence = F.element_at(F.array(*map(F.lit, SENTENCES)), (F.col("value") % len(SENTENCES) + 1).cast("int"))
            counts_df = (
                _rate_source(spark, SPARK_SENTENCE_ROWS)
                .select(F.explode(F.split(sentence, " ")).alias("word"))
                .groupBy("word")
                .count()
            )
            query = (
                counts_df.writeStream.format("memory")
                .queryName("peer_word_count")
                .outputMode("complete")
                .option("checkpointLocation", checkpoint)
                .start()
            )
            try:
                sentences = _measure(spark, query, seconds, warmup)
            finally:
                _stop(spark, query)
            counts = {row["word"]: row["count"] for row in spark.table("peer_word_count").collect()}
        words = sentences.items * WORDS_PER_PASS / len(SENTENCES)
        return Run(words, sentences.wall, sentences.cpu), counts
    finally:
        spark.stop()


# --- CLI --------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("bytewax", "spark"))
    parser.add_argument("--tuples", type=int, default=2_000_000, help="Bytewax const → null items")
    parser.add_argument("--rounds", type=int, default=200_000, help="Bytewax word count passes over SENTENCES")
    parser.add_argument("--seconds", type=float, default=20.0, help="Spark measuring window per workload")
    parser.add_argument(
        "--warmup", type=float, default=SPARK_WARMUP, help="JVM CPU-seconds each Spark query runs unmeasured before it"
    )
    args = parser.parse_args()
    print(
        f"machine: {platform.platform()} ({platform.machine()}), {os.cpu_count()} cpus; "
        f"python {platform.python_implementation()} {platform.python_version()}"
    )
    rows: list[tuple[str, str, Run, str, str]] = []
    if args.only in (None, "bytewax"):
        rows.append(
            (
                "bytewax",
                "const → null",
                bytewax_const_null(args.tuples),
                "items",
                f"1 worker, TestingSource batch_size={BYTEWAX_BATCH}, {args.tuples:,} items",
            )
        )
        run, counts = bytewax_word_count(args.rounds)
        exact = "exact" if whole_passes(counts) == args.rounds else "WRONG"
        rows.append(
            ("bytewax", "word count", run, "words", f"flat_map + count_final, {args.rounds:,} passes, counts {exact}")
        )
    if args.only in (None, "spark"):
        warm_spark()
        rows.append(
            (
                "spark",
                "const → null",
                spark_const_null(args.seconds, args.warmup),
                "rows",
                (
                    f"local[2], rate-micro-batch {SPARK_CONST_ROWS:,} rows/batch → noop, "
                    f"{args.seconds:g} s after {args.warmup:g} CPU-s warm-up"
                ),
            )
        )
        run, counts = spark_word_count(args.seconds, args.warmup)
        passes = whole_passes(counts)
        check = f"counts exact ({passes:,} passes)" if passes else "counts WRONG"
        rows.append(
            (
                "spark",
                "word count",
                run,
                "words",
                (
                    f"local[2], {SPARK_SENTENCE_ROWS:,} sentences/batch, complete → memory, "
                    f"{args.seconds:g} s after {args.warmup:g} CPU-s warm-up, {check}"
                ),
            )
        )
    print(f"{'peer':<8} | {'workload':<12} | {'per s':>11} | {'per CPU-s':>11} | {'cores':>5} | {'unit':<5} | notes")
    for peer, workload, run, unit, notes in rows:
        print(
            f"{peer:<8} | {workload:<12} | {run.per_sec:>11,.0f} | {run.per_cpu_sec:>11,.0f} | {run.cores:>5.2f} | "
            f"{unit:<5} | {notes}"
        )


if __name__ == "__main__":
    main()
