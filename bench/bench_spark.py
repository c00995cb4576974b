"""Spark bolts: throughput and per-batch latency by batch size, worker start with and without Spark, and
PySpark Structured Streaming running the same aggregation on the same input.

The workload is the example pipeline (examples/weblogs.py): access-log lines → parse (Python bolt) →
per-window, per-section stats in Spark SQL with a join (the Spark bolt) → JSON lines. Every run checks
its result against the plain-Python answer before its numbers count.

1. By batch size: local mode (one worker runtime in this process, Spark local[1] as a worker on a
   2-slot host gets), ``--lines`` generated lines per size after a warm-up run; rows/s from activation
   to the last window row written; batch latency = one ``run_batch`` (Arrow in, Spark job, rows out).
2. Worker start: a fresh process per run, imports + every task's ``prepare`` (the JVM start and a
   first tiny job for the Spark pipeline), median of ``--starts``.
3. Same input from files: Squall's pipeline reading the files with its spout, and Structured Streaming
   (local[2], files as a text stream, the same regex/window/join/aggregate in Spark SQL, partial
   aggregates per micro-batch as Squall emits them, ``availableNow``), each timed from its start to
   the last row, session start excluded.

    python bench/bench_spark.py [--lines 100000] [--sizes 1000,5000,20000] [--starts 3]

Not a test: numbers depend on the machine. README's Performance section records them.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from examples import weblogs  # noqa: E402
from squall import sparksession  # noqa: E402
from squall.devcluster import wait_for  # noqa: E402
from squall.logs import configure_logging  # noqa: E402
from worker.local import LocalTopology  # noqa: E402

QUIET = {"spark.log.level": "ERROR"}


def run_pipeline(out: Path, lines: int | None, batch: int, files: str | None = None,
                 expected: weblogs.Totals | None = None) -> tuple[float, list[float]]:
    """(seconds from activation to the last result row, each batch's seconds) for one pipeline run."""
    expected = expected or weblogs.expected_totals(weblogs.log_line(i) for i in range(lines or 0))
    want = sum(t["requests"] for t in expected.values())
    conf = {**QUIET, "spark.batch.size": batch, "spark.batch.interval.ms": 1000,
            "topology.max.spout.pending": 3 * batch, "topology.message.timeout.secs": 300}
    with LocalTopology(weblogs.topology(str(out), lines=lines, files=files), conf, active=False) as local:
        bolt, batches = local.component("windows"), []
        run_batch = bolt.run_batch

        def timed(inputs: list[Any]) -> None:
            started = time.perf_counter()
            run_batch(inputs)
            batches.append(time.perf_counter() - started)

        bolt.run_batch = timed
        started = time.perf_counter()
        local.activate()
        wait_for(lambda: sum(t["requests"] for t in weblogs.window_totals(out).values()) >= want, 600,
                 "every line in the results")
        elapsed = time.perf_counter() - started
    if weblogs.window_totals(out) != expected:
        raise RuntimeError(f"wrong results in {out}: not what expected_totals computes")
    return elapsed, batches


def by_batch_size(lines: int, sizes: list[int], tmp: Path) -> None:
    run_pipeline(tmp / "warmup", 2000, 1000)  # plans and compiles the query once
    print(f"\n1. Spark bolt by batch size ({lines:,} lines each, parse x2 -> Spark bolt -> JSON lines)\n")
    print("| spark.batch.size | rows/s | batches | batch ms p50 | p90 | max |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in sizes:
        elapsed, batches = run_pipeline(tmp / f"size-{size}", lines, size)
        ms = sorted(1000 * b for b in batches)
        print(f"| {size:,} | {lines / elapsed:,.0f} | {len(ms)} | {statistics.median(ms):,.0f} | "
              f"{ms[int(0.9 * (len(ms) - 1))]:,.0f} | {ms[-1]:,.0f} |", flush=True)


START = """
import sys, time
started = time.perf_counter()
sys.path.insert(0, {repo!r})
from squall.logs import configure_logging
from worker.local import LocalTopology
from examples import weblogs, wordcount
configure_logging(level="WARNING", stream=sys.stderr)
topology = {topology}
local = LocalTopology(topology, {{"spark.log.level": "ERROR"}}, active=False).start()
print("seconds", time.perf_counter() - started)
local.stop()
"""


def worker_start(starts: int, tmp: Path) -> None:
    print(f"\n2. Worker start in a fresh process (imports + every task's prepare), median of {starts}\n")
    print("| topology | seconds |")
    print("|---|---:|")
    for label, topology in (("word count (no Spark)", "wordcount.topology(rounds=0)"),
                            ("weblogs (Spark bolt)", f"weblogs.topology({str(tmp / 'start')!r}, lines=0)")):
        times = []
        for _ in range(starts):
            done = subprocess.run([sys.executable, "-c", START.format(repo=str(REPO), topology=topology)],
                                  capture_output=True, text=True, check=True)
            times.append(float(done.stdout.split("seconds", 1)[1].split()[0]))
        print(f"| {label} | {statistics.median(times):.2f} |", flush=True)


STREAMING = r"""
WITH parsed AS (
  SELECT regexp_extract(value, '^(\\S+) \\S+ \\S+ \\[([^\\]]+)\\] "([A-Z]+) (\\S+) [^"]*" (\\d{{3}}) (\\d+|-)', 2) AS time,
         regexp_extract(value, '^(\\S+) \\S+ \\S+ \\[([^\\]]+)\\] "([A-Z]+) (\\S+) [^"]*" (\\d{{3}}) (\\d+|-)', 4) AS path,
         regexp_extract(value, '^(\\S+) \\S+ \\S+ \\[([^\\]]+)\\] "([A-Z]+) (\\S+) [^"]*" (\\d{{3}}) (\\d+|-)', 5) AS status,
         regexp_extract(value, '^(\\S+) \\S+ \\S+ \\[([^\\]]+)\\] "([A-Z]+) (\\S+) [^"]*" (\\d{{3}}) (\\d+|-)', 6) AS bytes
  FROM {lines}),
events AS (
  SELECT unix_millis(to_timestamp(time, 'dd/MMM/yyyy:HH:mm:ss.SSS Z')) AS ts_ms,
         concat('/', regexp_extract(path, '^/([^/?]*)', 1)) AS page,
         CAST(status AS INT) AS status, CAST(IF(bytes = '-', '0', bytes) AS BIGINT) AS bytes
  FROM parsed WHERE time != '')
SELECT CAST(FLOOR(e.ts_ms / 10000) * 10000 AS BIGINT) AS window_start_ms, COALESCE(s.section, 'other') AS section,
       COUNT(*) AS requests, CAST(SUM(IF(e.status >= 500, 1, 0)) AS BIGINT) AS server_errors,
       CAST(SUM(e.bytes) AS BIGINT) AS bytes
FROM events e LEFT JOIN {sections} s ON e.page = s.page
GROUP BY 1, 2
"""


def structured_streaming(files: Path, expected: weblogs.Totals, checkpoint: Path) -> float:
    """Seconds for Structured Streaming to run the same aggregation over the same files, one file a batch."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("peer").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.log.level", "ERROR").getOrCreate())
    rows: list[Any] = []

    def each_batch(batch: Any, _batch_id: int) -> None:
        session = batch.sparkSession  # the query's own session: its temp views are not the outer one's
        sections = session.createDataFrame(list(weblogs.SECTIONS), "page string, section string")
        rows.extend(session.sql(STREAMING, lines=batch, sections=sections).collect())

    stream = spark.readStream.option("maxFilesPerTrigger", 1).text(str(files))
    started = time.perf_counter()
    query = (stream.writeStream.foreachBatch(each_batch).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    totals: weblogs.Totals = {}
    for row in rows:
        into = totals.setdefault((row["window_start_ms"], row["section"]), {"requests": 0, "server_errors": 0, "bytes": 0})
        for key in into:
            into[key] += row[key]
    spark.stop()
    if totals != expected:
        raise RuntimeError("Structured Streaming's totals differ from expected_totals")
    return elapsed


def same_input(lines: int, tmp: Path, batch: int = 5000) -> None:
    files = tmp / "logs"
    files.mkdir()
    per_file = batch
    for first in range(0, lines, per_file):
        (files / f"access-{first // per_file:04d}.log").write_text(
            "".join(weblogs.log_line(i) + "\n" for i in range(first, min(lines, first + per_file))))
    expected = weblogs.expected_totals(weblogs.log_line(i) for i in range(lines))
    squall_secs, _ = run_pipeline(tmp / "squall-files", None, batch, files=str(files / "*.log"), expected=expected)
    sparksession.release()  # stops Squall's session: one SparkContext per process, and the peer gets the machine
    peer_secs = structured_streaming(files, expected, tmp / "checkpoint")
    print(f"\n3. Same input: {lines:,} lines in {len(list(files.iterdir()))} files of {per_file:,}\n")
    print("| pipeline | seconds | rows/s |")
    print("|---|---:|---:|")
    print(f"| Squall: spout reads files -> parse x2 -> Spark bolt (batch {batch:,}, local[1]) | {squall_secs:.1f} | "
          f"{lines / squall_secs:,.0f} |")
    print(f"| PySpark Structured Streaming, one file per micro-batch (local[2]) | {peer_secs:.1f} | "
          f"{lines / peer_secs:,.0f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--sizes", default="1000,5000,20000")
    parser.add_argument("--starts", type=int, default=3)
    args = parser.parse_args()
    configure_logging(level="WARNING", stream=sys.stderr)
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{platform.system()}")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        worker_start(args.starts, tmp)
        sparksession.acquire({"spark.master": "local[1]", **QUIET}, "squall-bench")  # one warm session for 1 and 3
        by_batch_size(args.lines, [int(s) for s in args.sizes.split(",")], tmp)
        same_input(args.lines, tmp)


if __name__ == "__main__":
    main()
