"""Spark bolts: throughput and per-batch latency by batch size, worker start with and without Spark (its own
JVM, or a Spark Connect server already up), and PySpark Structured Streaming running the same aggregation on
the same input.

The workload is the example pipeline (examples/weblogs.py): access-log lines → parse (Python bolt) →
per-window, per-section stats in Spark SQL with a join (the Spark bolt) → JSON lines. Every run checks
its result against the plain-Python answer before its numbers count.

1. By batch size: local mode (one worker runtime in this process, Spark ``--master``), ``--lines``
   generated lines per ``spark.batch.size`` (the limit: batches adapt below it) after a warm-up run;
   rows/s from activation to the last line acked; job latency = one ``run_job`` (Arrow in, Spark job, rows
   out) on the job thread.
2. Worker start: a fresh process per run, imports + every task's ``prepare`` (for the Spark pipeline: the
   JVM start and a first tiny job, or a Spark Connect client's session and first job against a server
   this bench starts first and stops after), median of ``--starts``.
3. Same input from files, ``--rounds`` interleaved rounds after one unmeasured round of each: Squall's
   pipeline reading the files with its spout, and Structured Streaming (files as a text stream, one file a
   micro-batch, the same regex/window/join/aggregate in Spark SQL, partial aggregates per micro-batch as
   Squall emits them, ``availableNow``), both on the one session of this process (``--master``), each from
   its start to its last row; CPU = this process (all threads) + the JVM. Median (best) per second and per
   CPU-second, and the ratio of the medians.

    python bench/bench_spark.py [--lines 100000] [--sizes 1000,5000,20000] [--starts 3] [--rounds 3]
                                [--master local[2]] [--batch 5000]

``--sizes ''`` or ``--starts 0`` or ``--rounds 0`` skips that part. Not a test: numbers depend on the
machine. docs/performance.md records them.
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

from cpu import Run, Sample, Summary  # noqa: E402
from examples import weblogs  # noqa: E402
from squall import LocalTopology  # noqa: E402
from squall.api import sparksession  # noqa: E402
from squall.core.logs import configure_logging  # noqa: E402
from squall.dev import sparkconnect  # noqa: E402
from squall.dev.cluster import wait_for  # noqa: E402
from squall.dev.zookeeper import free_port  # noqa: E402

QUIET = {"spark.log.level": "ERROR"}


def jvm_pid() -> int:
    """The pid of this process's Spark JVM (the py4j gateway's: it outlives sessions)."""
    from pyspark import SparkContext

    return SparkContext._gateway.proc.pid  # type: ignore[union-attr]


def run_pipeline(
    out: Path, lines: int, batch: int, files: str | None = None, expected: weblogs.Totals | None = None
) -> tuple[Run, list[float]]:
    """One run over ``lines`` lines, generated or (``files``) read: wall and CPU of this process and the JVM from
    activation to the last line acked at the spout, and each job's seconds."""
    expected = expected or weblogs.expected_totals(weblogs.log_line(i) for i in range(lines))
    count = lines
    conf = {
        **QUIET,
        "spark.batch.size": batch,
        "spark.batch.interval.ms": 1000,
        "topology.max.spout.pending": 3 * batch,
        "topology.message.timeout.secs": 300,
    }
    jvm = jvm_pid()
    generated = None if files else lines
    with LocalTopology(weblogs.topology(str(out), lines=generated, files=files), conf, active=False) as local:
        bolt, jobs = local.component("windows"), []
        run_job = bolt.run_job

        def timed(inputs: list[Any]) -> list[Any]:
            started = time.perf_counter()
            rows = run_job(inputs)
            jobs.append(time.perf_counter() - started)
            return rows

        bolt.run_job = timed
        spout = local.component("access-log")
        start = Sample.take([jvm])
        local.activate()
        wait_for(lambda: spout.acked >= count, 600, "every line acked")
        run = start.run_to(Sample.take([jvm]), count)
    if weblogs.window_totals(out) != expected:
        raise RuntimeError(f"wrong results in {out}: not what expected_totals computes")
    return run, jobs


def by_batch_size(lines: int, sizes: list[int], tmp: Path) -> None:
    run_pipeline(tmp / "warmup", 2000, 1000)  # plans and compiles the query once
    print(f"\n1. Spark bolt by batch size limit ({lines:,} lines each, parse x2 -> Spark bolt -> JSON lines)\n")
    print("| spark.batch.size | rows/s | rows per CPU-s | jobs | job ms p50 | p90 | max |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size in sizes:
        run, jobs = run_pipeline(tmp / f"size-{size}", lines, size)
        ms = sorted(1000 * b for b in jobs)
        print(
            f"| {size:,} | {run.per_sec:,.0f} | {run.per_cpu_sec:,.0f} | {len(ms)} | {statistics.median(ms):,.0f} | "
            f"{ms[int(0.9 * (len(ms) - 1))]:,.0f} | {ms[-1]:,.0f} |",
            flush=True,
        )


START = """
import sys, time
started = time.perf_counter()
sys.path.insert(0, {repo!r})
from squall.core.logs import configure_logging
from squall.dev.local import LocalTopology
from examples import weblogs, wordcount
configure_logging(level="WARNING", stream=sys.stderr)
topology = {topology}
local = LocalTopology(topology, {conf!r}, active=False).start()
print("seconds", time.perf_counter() - started)
local.stop()
"""


def worker_start(starts: int, tmp: Path) -> None:
    print(f"\n2. Worker start in a fresh process (imports + every task's prepare), median of {starts}\n")
    print("| topology | seconds |")
    print("|---|---:|")
    weblogs_topology = f"weblogs.topology({str(tmp / 'start')!r}, lines=0)"

    def start(topology: str, conf: dict[str, Any]) -> float:
        done = subprocess.run(
            [sys.executable, "-c", START.format(repo=str(REPO), topology=topology, conf=conf)],
            capture_output=True,
            text=True,
            check=True,
        )
        return float(done.stdout.split("seconds", 1)[1].split()[0])

    def row(label: str, topology: str, conf: dict[str, Any]) -> None:
        times = [start(topology, conf) for _ in range(starts)]
        print(f"| {label} | {statistics.median(times):.2f} |", flush=True)

    row("word count (no Spark)", "wordcount.topology(rounds=0)", QUIET)
    row("weblogs (Spark bolt, its own JVM)", weblogs_topology, QUIET)
    port = free_port()
    with open(tmp / "spark-connect.log", "wb") as log:
        server = subprocess.Popen(
            sparkconnect.server_command(port, "local[2]", QUIET), stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_for(lambda: sparkconnect.serving(port) or server.poll() is not None, 300, "the Spark Connect server")
        if server.poll() is not None:
            raise RuntimeError(f"the Spark Connect server exited: {(tmp / 'spark-connect.log').read_text()[-2000:]}")
        remote = {**QUIET, "spark.remote": f"sc://127.0.0.1:{port}"}
        # The server's first client pays its class loading and first query plan, once per server.
        print(
            f"| weblogs (Spark bolt, the first client of a Spark Connect server just up) | "
            f"{start(weblogs_topology, remote):.2f} |",
            flush=True,
        )
        row("weblogs (Spark bolt, Spark Connect server up: spark.remote)", weblogs_topology, remote)
    finally:
        server.terminate()
        server.wait(60)


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
"""  # noqa: E501 (the log line's regular expression, in SQL, does not wrap)


def structured_streaming(files: Path, expected: weblogs.Totals, checkpoint: Path, lines: int) -> Run:
    """Structured Streaming running the same aggregation over the same files, one file a micro-batch, on this
    process's session; wall and CPU (this process and the JVM) from the query's start to its end."""
    spark = sparksession.acquire({}, "")
    rows: list[Any] = []

    def each_batch(batch: Any, _batch_id: int) -> None:
        session = batch.sparkSession  # the query's own session: its temp views are not the outer one's
        sections = session.createDataFrame(weblogs.sections_table())  # as the Spark bolt's: a broadcast join
        rows.extend(session.sql(STREAMING, lines=batch, sections=sections).collect())

    stream = spark.readStream.option("maxFilesPerTrigger", 1).text(str(files))
    start = Sample.take([jvm_pid()])
    query = (
        stream.writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    run = start.run_to(Sample.take([jvm_pid()]), lines)
    sparksession.release()
    totals: weblogs.Totals = {}
    for row in rows:
        into = totals.setdefault(
            (row["window_start_ms"], row["section"]), {"requests": 0, "server_errors": 0, "bytes": 0}
        )
        for key in into:
            into[key] += row[key]
    if totals != expected:
        raise RuntimeError("Structured Streaming's totals differ from expected_totals")
    return run


def same_input(lines: int, rounds: int, tmp: Path, master: str, batch: int = 5000) -> None:
    files = tmp / "logs"
    files.mkdir()
    for first in range(0, lines, batch):
        (files / f"access-{first // batch:04d}.log").write_text(
            "".join(weblogs.log_line(i) + "\n" for i in range(first, min(lines, first + batch)))
        )
    expected = weblogs.expected_totals(weblogs.log_line(i) for i in range(lines))
    runs: dict[str, list[Run]] = {"squall": [], "peer": []}

    def squall(n: int) -> Run:
        return run_pipeline(tmp / f"squall-{n}", lines, batch, files=str(files / "*.log"), expected=expected)[0]

    def peer(n: int) -> Run:
        return structured_streaming(files, expected, tmp / f"checkpoint-{n}", lines)

    squall(-1), peer(-1)  # unmeasured: each plans and compiles its query once
    for n in range(rounds):
        for name in ("squall", "peer") if n % 2 == 0 else ("peer", "squall"):
            runs[name].append(squall(n) if name == "squall" else peer(n))
    mine, theirs = Summary.of(runs["squall"]), Summary.of(runs["peer"])
    print(
        f"\n3. Same input: {lines:,} lines in {len(list(files.iterdir()))} files of {batch:,}, one session "
        f"({master}), median (best) of {rounds} interleaved rounds\n"
    )
    print("| pipeline | rows/s | rows per CPU-s | cores |")
    print("|---|---:|---:|---:|")
    print(
        f"| Squall: spout reads files -> parse x2 -> Spark bolt (spark.batch.size {batch:,}) | "
        f"{mine.per_sec_cell} | {mine.per_cpu_sec_cell} | {mine.cores:.2f} |"
    )
    print(
        f"| PySpark Structured Streaming, one file per micro-batch | {theirs.per_sec_cell} | "
        f"{theirs.per_cpu_sec_cell} | {theirs.cores:.2f} |"
    )
    print(
        f"\nSquall / Structured Streaming: {mine.per_sec / theirs.per_sec:.2f}x per second, "
        f"{mine.per_cpu_sec / theirs.per_cpu_sec:.2f}x per CPU-second (medians)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--sizes", default="1000,5000,20000")
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]", help="the Spark of parts 1 and 3 (default local[2])")
    parser.add_argument(
        "--batch",
        type=int,
        default=5000,
        help="part 3: lines per file (one Structured Streaming micro-batch), Squall's spark.batch.size",
    )
    args = parser.parse_args()
    configure_logging(level="WARNING", stream=sys.stderr)
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()}"
    )
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        if args.starts:
            worker_start(args.starts, tmp)
        sparksession.acquire({"spark.master": args.master, **QUIET}, "squall-bench")  # one warm session for 1 and 3
        if args.sizes:
            by_batch_size(args.lines, [int(s) for s in args.sizes.split(",")], tmp)
        if args.rounds:
            same_input(args.lines, args.rounds, tmp, args.master, args.batch)


if __name__ == "__main__":
    main()
