"""A stateful word count on a process cluster with the SQLite provider: the worker holding counters is
SIGKILLed mid-stream, and the counts come back from the files its restart finds."""

from __future__ import annotations

import os
import signal
import sqlite3
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from processcluster import ProcessCluster
from squall.api.state.keyvalue import decode_key, decode_value
from squall.core.zk import paths
from squall.core.zk.records import TopologyTasks
from support import wait_until
from topologies import read_records, stateful_count


def committed_counts(directory: Path) -> dict[str, int]:
    """The committed counts of every ``count`` task, read from its SQLite file as any reader would."""
    counts: Counter[str] = Counter()
    for path in directory.glob("count-*.sqlite3"):
        with sqlite3.connect(path) as db:
            counts.update({decode_key(k): decode_value(v) for k, v in db.execute("SELECT key, value FROM state")})
    return dict(counts)


@pytest.mark.slow
def test_a_sigkilled_worker_s_counts_come_back_from_sqlite_and_none_is_below_its_true_count(
        zk_conf: dict[str, Any], tmp_path: Path) -> None:
    count, keys, records, state = 6000, 20, tmp_path / "records", tmp_path / "state"
    records.mkdir()
    topology = stateful_count("swc", count, keys=keys, counters=4, record_dir=str(records), conf={
        "topology.workers": 2, "topology.max.spout.pending": 50, "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"directory": str(state)}, "topology.state.checkpoint.interval.ms": 100})
    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path, stack)
        cluster.start("sup-a")
        topology_id = cluster.submit(topology)
        wait_until(lambda: len(read_records(records, "acked")) >= count // 5, 120, "the stream under way")

        tasks = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
        spout = {task for task, info in tasks.tasks.items() if info.component == "numbers"}
        counters = {task for task, info in tasks.tasks.items() if info.component == "count"}
        victim = next(r for r in cluster.workers("sup-a") if counters & set(r.tasks) and not spout & set(r.tasks))
        before = committed_counts(state)
        os.killpg(victim.pid, signal.SIGKILL)
        wait_until(lambda: [r for r in cluster.workers("sup-a") if r.port == victim.port and r.pid != victim.pid],
                   30, "the supervisor to restart the worker")

        wait_until(lambda: len(set(read_records(records, "acked"))) == count, 180, "every number acked")
        after = committed_counts(state)
        assert set(after) == {f"k{i}" for i in range(keys)}
        assert all(after[key] >= n for key, n in before.items()), "no count went back"
        true_count = count // keys  # every number acked: its count committed before its ack
        assert all(n >= true_count for n in after.values()), after
