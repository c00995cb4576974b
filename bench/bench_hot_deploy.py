"""How long a hot deploy (``storm jar --replace``, ``topology.hot.deploy.enable``) stops processing.

A :class:`~squall.dev.cluster.DevCluster` — ZooKeeper (its own, or ``--zookeeper HOST:PORT``), one nimbus,
one supervisor, default timings — runs ``--rounds`` rounds of: a reliable spout → a recording sink on
``--workers`` workers, running; then the same topology submitted again with the hot deploy flag, its sink
recording elsewhere. The bench polls both sinks' record files every 5 ms and reports:

* **replace call**: the submit call with the flag (old removed, its workers stopped, new one assigned);
* **gap**: the last tuple the old topology's sink recorded → the first the new one's recorded;
* **new first tuple**: the submit call → the new topology's first recorded tuple.

    python bench/bench_hot_deploy.py [--rounds 5] [--workers 2]

Not a test: numbers depend on the machine. docs/performance.md records them.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from topologies import Numbers, Recorder  # noqa: E402  (tests' components, shipped in the package)

from clusterbench import dev_cluster, print_rounds, run_rounds  # noqa: E402
from squall import Topology, build_package, submit_topology  # noqa: E402
from squall.dev.cluster import DevCluster, wait_for  # noqa: E402

COLUMNS = ["replace call", "gap", "new first tuple"]


def stream(records: Path, workers: int) -> Topology:
    records.mkdir()
    t = Topology("hot", {"topology.workers": workers, "topology.max.spout.pending": 1000})
    numbers = t.spout("numbers", Numbers, args=[10**9], kwargs={"record_dir": str(records)})
    t.bolt("sink", Recorder, args=[str(records)], parallelism=workers).shuffle(numbers)
    return t


class SinkWatch:
    """Polls a sink's record files: when it recorded its first and (so far) last tuple, in monotonic time."""

    def __init__(self, records: Path) -> None:
        self.records, self._size = records, 0
        self.first: float | None = None
        self.last: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            size = sum(p.stat().st_size for p in self.records.glob("seen-*.jsonl"))
            if size > self._size:
                now = time.monotonic()
                self.first = self.first or now
                self.last, self._size = now, size

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def one_round(cluster: DevCluster, package: Path, workers: int, tmp: Path) -> dict[str, float]:
    old_records, new_records = tmp / f"old-{uuid.uuid4().hex[:6]}", tmp / f"new-{uuid.uuid4().hex[:6]}"
    old_topology, new_topology = stream(old_records, workers), stream(new_records, workers)
    submit_topology(cluster.conf, old_topology, package=package, zk=cluster.zk)
    old, new = SinkWatch(old_records), SinkWatch(new_records)
    try:
        wait_for(lambda: old.first is not None and time.monotonic() - old.first > 2, 60, "the old topology running")
        start = time.monotonic()
        submit_topology(
            cluster.conf,
            new_topology,
            package=package,
            zk=cluster.zk,
            conf_overrides={"topology.hot.deploy.enable": True},
        )
        returned = time.monotonic()
        first = wait_for(lambda: new.first, 60, "the new topology's first tuple")
    finally:
        old.stop()
        new.stop()
    with cluster.client() as client:
        client.killTopology("hot")
    wait_for(lambda: not any(cluster.workers("supervisor")), 60, "the workers gone")
    assert old.last is not None, "the old topology recorded tuples before it was replaced"
    return {
        "replace call": (returned - start) * 1000,
        "gap": (first - old.last) * 1000,
        "new first tuple": (first - start) * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--zookeeper",
        metavar="HOST:PORT",
        default=os.environ.get("SQUALL_TEST_ZK"),
        help="an existing ZooKeeper (default: start one)",
    )
    args = parser.parse_args()

    with dev_cluster(["supervisor"], args.zookeeper) as (cluster, tmp):
        package = build_package([REPO / "tests" / "topologies.py"], tmp / "code.zip")
        rows = run_rounds(args.rounds, lambda: one_round(cluster, package, args.workers, tmp))
    print_rounds(f"reliable spout → sink on {args.workers} workers, 1 supervisor, default timings", COLUMNS, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
