"""How long one ``schedule()`` call takes on a big cluster, as the topology grows.

Not a test: run ``python bench/bench_scheduler.py [--scheduler default|even] [--repeat N]``.
Cluster: 1,000 supervisors x 4 ports (host-0000...). Topology: a spout feeding three chained bolts
plus ackers (~ tasks / 10), at 1,000 to 10,000 tasks, asking for every slot. Target for the default
scheduler: 10,000 tasks in under a second.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without install

from nimbus.scheduler import schedule
from nimbus.scheduler.model import Component, ScheduleRequest, Supervisor
from squall.core.config.keys import default_config
from squall.core.system_ids import ACKER

SUPERVISORS = 1000
PORTS = (6700, 6701, 6702, 6703)
SIZES = (1000, 2000, 4000, 8000, 10000)


def cluster(n: int = SUPERVISORS) -> tuple[Supervisor, ...]:
    return tuple(Supervisor(f"sup-{i:04d}", f"host-{i:04d}", PORTS) for i in range(n))


def topology(n_tasks: int) -> tuple[Component, ...]:
    """spout -> bolt1 -> bolt2 -> bolt3, ackers reading from all; task ids by component id, from 1."""
    ackers = n_tasks // 10
    user = ["spout", "bolt1", "bolt2", "bolt3"]
    share, extra = divmod(n_tasks - ackers, len(user))
    sizes = {ACKER: ackers} | {c: share + (i < extra) for i, c in enumerate(user)}
    inputs = {
        ACKER: frozenset(user),
        "spout": frozenset(),
        "bolt1": frozenset({"spout"}),
        "bolt2": frozenset({"bolt1"}),
        "bolt3": frozenset({"bolt2"}),
    }
    components, next_id = [], 1
    for component_id in sorted(sizes):
        components.append(
            Component(component_id, tuple(range(next_id, next_id + sizes[component_id])), inputs[component_id])
        )
        next_id += sizes[component_id]
    return tuple(components)


def best_ms(request: ScheduleRequest, repeat: int) -> tuple[float, int]:
    """Best wall time of ``repeat`` runs (least disturbed by the machine), and the worker count."""
    best, workers = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        result = schedule(request)
        best = min(best, time.perf_counter() - start)
        workers = len(result)
    return best * 1000, workers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler", choices=("default", "even"), default="default")
    parser.add_argument("--repeat", type=int, default=5, help="runs per size; the best is reported")
    args = parser.parse_args(argv)

    print(f"machine: {platform.platform()} ({platform.machine()}), {os.cpu_count()} cpus")
    print(f"python:  {platform.python_implementation()} {platform.python_version()}")
    supervisors = cluster()
    slots = len(supervisors) * len(PORTS)
    conf = default_config() | {"storm.scheduler": args.scheduler, "topology.workers": slots}
    print(f"\n{'scheduler':<10} {'tasks':>7} {'workers':>8} {'supervisors':>12} {'best ms':>10} {'ratio':>7}")
    previous = None
    for n in SIZES:
        request = ScheduleRequest(f"bench-{n}-1700000000", topology(n), conf, supervisors)
        ms, workers = best_ms(request, max(args.repeat, 1))
        ratio = f"{ms / previous:.2f}" if previous else "-"
        print(f"{args.scheduler:<10} {n:>7} {workers:>8} {len(supervisors):>12} {ms:>10.1f} {ratio:>7}")
        previous = ms
    return 0


if __name__ == "__main__":
    sys.exit(main())
