"""What the benches with real daemons share: a dev cluster for the run, and rounds printed as a table."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from squall import load_config
from squall.dev.cluster import DevCluster


@contextmanager
def dev_cluster(supervisors: Sequence[str], zookeeper: str | None) -> Iterator[tuple[DevCluster, Path]]:
    """ZooKeeper (its own unless ``zookeeper`` is HOST:PORT), one nimbus and ``supervisors``, default timings;
    (cluster, a scratch directory). Prints the daemons' logs when the bench fails; stops everything after."""
    conf = load_config(env={})
    conf.update(
        {
            "storm.zookeeper.root": f"/squall-bench/{uuid.uuid4().hex[:8]}",
            "nimbus.thrift.port": 0,
            "storm.local.hostname": "127.0.0.1",
            "storm.zookeeper.port": 0,
        }
    )
    if zookeeper:
        host, port = zookeeper.rsplit(":", 1)
        conf.update({"storm.zookeeper.servers": [host], "storm.zookeeper.port": int(port)})
    with tempfile.TemporaryDirectory(prefix="squall-bench-") as tmp:
        cluster = DevCluster(Path(tmp), conf)
        try:
            if not zookeeper:
                cluster.start_zookeeper()
            cluster.start_nimbus()
            for name in supervisors:
                cluster.start_supervisor(name)
            cluster.wait_supervisors(len(supervisors))
            yield cluster, Path(tmp)
        except BaseException:
            print(cluster.logs(), file=sys.stderr)
            raise
        finally:
            cluster.stop()


def run_rounds(rounds: int, one_round: Callable[[], dict[str, float]]) -> list[dict[str, float]]:
    """``one_round()`` ``rounds`` times, a dot on stderr for each."""
    rows = []
    for _ in range(rounds):
        rows.append(one_round())
        print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return rows


def print_rounds(what: str, columns: Sequence[str], rows: Sequence[dict[str, float]]) -> None:
    """The machine and ``what`` was measured, then one row per round (ms) and the medians, as Markdown."""
    print(
        f"# {platform.machine()} {platform.system()}, {os.cpu_count()} cores, Python {platform.python_version()};"
        f" {what}"
    )
    print("| round | " + " | ".join(f"{c} ms" for c in columns) + " |")
    print("|---:|" + "---:|" * len(columns))
    for i, row in enumerate(rows, 1):
        print(f"| {i} | " + " | ".join(f"{row[c]:,.0f}" for c in columns) + " |")
    print("| median | " + " | ".join(f"{statistics.median(r[c] for r in rows):,.0f}" for c in columns) + " |")
