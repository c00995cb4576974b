"""The worker process (worker/process.py) following its assignment when reading it fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kazoo.exceptions import ConnectionLoss

from squall.core.zk.records import Assignment
from worker.layout import Placement
from worker.process import Worker


class Routes:
    """Stands in for the worker's runtime: records the routes it is given."""

    def __init__(self) -> None:
        self.refreshed: list[tuple[Any, Placement]] = []

    def refresh(self, layout: Any, placement: Placement) -> None:
        self.refreshed.append((layout, placement))

    def update_conf(self, conf: Any) -> None:
        pass


def test_an_assignment_whose_read_failed_is_applied_at_the_next_look(tmp_path: Path) -> None:
    """The assignment's timestamp was marked applied before its tasks were read; when the read failed (ZooKeeper
    away, out of retries) every later look skipped it, and the worker kept routing to where tasks no longer ran
    until the next reassignment."""
    worker = Worker({"storm.local.dir": str(tmp_path)}, "wc-1-1700000000", "sup-1", 6700, "worker-1")
    worker.runtime = routes = Routes()  # type: ignore[assignment]
    worker._tasks_started = True
    placement = Placement(frozenset({1, 2}), {3: ("host-2", 6700)})
    reads: list[int] = []

    def read_layout(conf: Any) -> tuple[str, Placement, Assignment]:
        reads.append(1)
        if len(reads) == 1:
            raise ConnectionLoss("ZooKeeper went away while the tasks were read")
        return "layout", placement, moved

    worker._conf = lambda: {}  # type: ignore[method-assign]
    worker._read_layout = read_layout  # type: ignore[method-assign]
    moved = Assignment(code_dir="", workers=[], timestamp_ms=1_700_000_000_123)

    worker._on_assignment(moved)  # the watch: the read fails
    assert routes.refreshed == []
    worker._on_assignment(moved)  # the poll's next look, at the same assignment
    assert routes.refreshed == [("layout", placement)]
    worker._on_assignment(moved)  # applied once: later looks at it change nothing
    assert routes.refreshed == [("layout", placement)] and len(reads) == 2
