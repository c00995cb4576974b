"""The example pipeline (examples/weblogs.py) end to end on a process cluster: nimbus, a supervisor and two
real worker processes, one of which starts Spark in its own JVM, or (``spark.remote``) uses a Spark Connect
server that ``storm spark-connect`` runs on the host. Marked ``spark``: a JVM takes ~15 s to start."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from examples import weblogs
from processcluster import ProcessCluster
from squall.core.worker_records import running
from squall.core.zk import paths
from squall.core.zk.records import TopologyTasks
from squall.dev.sparkconnect import DEFAULT_PORT, serving
from squall.dev.zookeeper import free_port, port_is_free
from support import blocks_run_by, command_lines, log_events, storm_on_path, wait_until

LINES = 4000


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (read from /proc, so it sees through spark-submit's exec)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def runs_java(pid: int) -> bool:
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name == "java"
    except OSError:
        return False


@pytest.mark.spark
@pytest.mark.slow
def test_weblogs_pipeline_runs_end_to_end_and_only_the_spark_worker_starts_a_jvm(
        zk_conf: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "out"
    expected = weblogs.expected_totals(weblogs.log_line(i) for i in range(LINES))
    with ExitStack() as stack:
        # Worker start and task launch keep their defaults (120 s): a JVM start must fit in them; the
        # running-worker timeouts stay short. The message timeout is long: the first job of a query plan
        # takes 6 s here and several times that on a loaded machine, and a replay after a timeout is
        # at-least-once (the sink would count those lines twice), not the exact totals checked here.
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack, **{
            "supervisor.worker.start.timeout.secs": 120, "nimbus.task.launch.secs": 120,
            "topology.message.timeout.secs": 120})
        cluster.start("sup")
        topology_id = cluster.submit(weblogs.topology(str(out), lines=LINES))

        def totals_complete() -> bool:
            got = weblogs.window_totals(out)
            return sum(t["requests"] for t in got.values()) >= sum(t["requests"] for t in expected.values())

        wait_until(totals_complete, timeout=240, what="every valid line counted in the window results")
        assert weblogs.window_totals(out) == expected
        invalid = weblogs.read_jsonl(out, "invalid")
        assert len(invalid) == LINES // weblogs.BAD_EVERY
        assert all(row["reason"] == "not in combined log format" for row in invalid)

        tasks = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
        spark_tasks = {task for task, info in tasks.tasks.items() if info.component == "windows"}
        workers = cluster.workers("sup")
        assert len(workers) == 2 and all(running(w.pid) for w in workers)
        jvm = {w.port: any(runs_java(p) for p in descendants(w.pid)) for w in workers}
        assert jvm == {w.port: bool(spark_tasks & set(w.tasks)) for w in workers}
        assert sorted(jvm.values()) == [False, True]
        # Nothing was restarted: the slow Spark start tripped no timeout.
        assert {w.worker_id for w in cluster.workers("sup")} == {w.worker_id for w in workers}
        assert len(log_events(cluster.log_file("sup"), "worker launched")) == 2


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server, started by the Spark page's line as a user types it (``storm spark-connect``; on a
    free port instead of the default if another process holds that), stopped by its pid."""
    here = tmp_path_factory.mktemp("spark-connect")
    [block] = blocks_run_by(__file__, "docs/guide/spark.md")
    [line] = command_lines(block.code)
    port, typed = DEFAULT_PORT, f"--port {DEFAULT_PORT}"
    assert typed in line, line
    if not port_is_free("127.0.0.1", port):
        port = free_port()
        line = line.replace(typed, f"--port {port}")
    log = here / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=here, env=storm_on_path(here / "bin"),
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: serving(port) or server.poll() is not None, 180, "the Spark Connect server's port")
        assert server.poll() is None, log.read_text()[-3000:]
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.mark.spark
@pytest.mark.slow
def test_weblogs_on_a_spark_connect_server_is_exact_and_no_worker_runs_a_jvm(
        zk_conf: dict[str, Any], tmp_path: Path, connect_server: str) -> None:
    out = tmp_path / "out"
    expected = weblogs.expected_totals(weblogs.log_line(i) for i in range(LINES))
    with ExitStack() as stack:
        # spark.remote in the cluster conf, as a host's storm.yaml sets it for every topology.
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack, **{
            "spark.remote": connect_server, "nimbus.task.launch.secs": 120, "topology.message.timeout.secs": 120})
        cluster.start("sup")
        cluster.submit(weblogs.topology(str(out), lines=LINES))

        def totals_complete() -> bool:
            got = weblogs.window_totals(out)
            return sum(t["requests"] for t in got.values()) >= sum(t["requests"] for t in expected.values())

        wait_until(totals_complete, timeout=240, what="every valid line counted in the window results")
        assert weblogs.window_totals(out) == expected
        workers = cluster.workers("sup")
        assert len(workers) == 2 and all(running(w.pid) for w in workers)
        assert [p for w in workers for p in descendants(w.pid) if runs_java(p)] == []
        logs = cluster.root.glob("*/logs/*.log")
        ready = [event for path in logs for event in log_events(path, "spark session ready")]
        assert [event.get("remote") for event in ready] == [connect_server]  # one Spark worker, a Connect client
