"""A topology in trouble says so where people look: ``storm list`` typed in a shell, the UI's pages and its REST
API, and ``storm get-errors`` — on a real cluster (a nimbus, the session's ZooKeeper, worker processes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from minicluster import FAST, MiniCluster
from squall.core import topology as topo
from squall.api.dsl import Topology
from squall.core.zk import paths
from squall.core.zk.records import TopologyTasks
from support import storm_on_path, wait_until
from test_ui import ui_in_front_of, valid
from test_ui_pages import rows
from topologies import Forward, Numbers, Swallow

MESSAGE_TIMEOUT_SECS = 2


def storm(cluster: MiniCluster, tmp_path: Path, *argv: str) -> str:
    """``storm ARGV`` as typed in a shell (``storm`` on PATH, the cluster in ``$STORM_CONF_DIR/storm.yaml``)."""
    conf_dir = tmp_path / "storm-conf"
    conf_dir.mkdir(exist_ok=True)
    (conf_dir / "storm.yaml").write_text(json.dumps({"nimbus.seeds": [f"127.0.0.1:{cluster.nimbus.port}"]}))
    done = subprocess.run(["storm", *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**storm_on_path(tmp_path / "bin"), "STORM_CONF_DIR": str(conf_dir)})
    assert done.returncode == 0, done.stderr
    return done.stdout


def health_listed(cluster: MiniCluster, tmp_path: Path, name: str) -> str:
    """The Health column of ``storm list`` for topology ``name``, as printed."""
    for line in storm(cluster, tmp_path, "list").splitlines()[2:]:
        fields = line.split(None, 5)
        if fields[0] == name:
            return fields[5]
    raise AssertionError(f"{name} not listed")


def beating(cluster: MiniCluster, topology_id: str) -> bool:
    assignment = cluster.assignment(topology_id)
    tasks = {t for w in assignment.workers for t in w.tasks}
    return tasks <= set(cluster.nimbus.watching.latest_beats(topology_id))


@pytest.mark.slow
def test_a_topology_whose_trees_time_out_says_so_in_storm_list_and_the_ui(
        zk_conf: dict[str, Any], tmp_path: Path) -> None:
    """A bolt that never acks, a 2 s message timeout: every tree times out. Within a message timeout or two (the
    spout's expiry) and a heartbeat period of the first trees failing, ``storm list`` and the UI say the topology
    is failing, with how many trees of how many, where before it said ``ok``."""
    with ExitStack() as stack:
        cluster = MiniCluster(zk_conf, tmp_path, stack)
        t = Topology("sinking", conf={"topology.workers": 1, "topology.message.timeout.secs": MESSAGE_TIMEOUT_SECS,
                                      "topology.max.spout.pending": 50})
        t.bolt("swallow", Swallow).shuffle(t.spout("numbers", Numbers, args=[10**9]))
        topology_id = cluster.submit(t)
        cluster.start_workers(topology_id)
        wait_until(lambda: beating(cluster, topology_id), 60, "every task beating at nimbus")
        running = time.monotonic()

        failing = re.compile(r"^failing: ([\d,]+) of ([\d,]+) trees timed out in 10 min$")
        shown = wait_until(lambda: failing.match(health_listed(cluster, tmp_path, "sinking")), 60,
                           "storm list to say the trees time out")
        took = time.monotonic() - running
        beat = FAST["task.heartbeat.frequency.secs"]
        # the spout expires a tree between one and two timeouts after it left; a storm list takes a second or two
        assert took < 2 * MESSAGE_TIMEOUT_SECS + beat + 10, f"shown {took:.1f} s after the topology ran"
        assert shown.group(1) == shown.group(2), "nothing acked: every tree of the window failed"
        print(f"storm list said failing {took:.1f} s after every task beat")

        with ui_in_front_of(cluster.conf, cluster.nimbus.port) as ui:
            (listed,) = valid(ui.get("/api/v1/topology/summary"), "/api/v1/topology/summary")["topologies"]
            assert failing.match(listed["schedulerInfo"]), listed
            page = valid(ui.get(f"/api/v1/topology/{topology_id}"), "/api/v1/topology/{id}")
            assert failing.match(page["schedulerInfo"]), page["schedulerInfo"]
            assert re.search(r'<td class="health">failing: [\d,]+ of [\d,]+ trees timed out in 10 min</td>',
                             ui.get("/").text), "the cluster page's Health column"
            assert re.search(r'<td id="topology-health">failing: [\d,]+ of [\d,]+ trees timed out in 10 min</td>',
                             ui.get(f"/topology/{topology_id}").text), "the topology page's Health"


@pytest.mark.slow
def test_a_worker_nimbus_restarts_for_lack_of_heartbeats_shows_in_get_errors_and_storm_list(
        zk_conf: dict[str, Any], tmp_path: Path) -> None:
    """A worker killed by pid stops beating; nimbus moves it after ``nimbus.task.timeout.secs`` and says so: an
    error of the topology in ``storm get-errors`` (and the UI), a reason in ``storm list``'s Health."""
    timeout = 5
    with ExitStack() as stack:
        cluster = MiniCluster(zk_conf, tmp_path, stack, **{"nimbus.task.timeout.secs": timeout,
                                                           "nimbus.task.launch.secs": 20})
        t = Topology("restarted", conf={"topology.workers": 2})
        t.bolt("forward", Forward, parallelism=2).shuffle(t.spout("numbers", Numbers, args=[10**9],
                                                                  kwargs={"reliable": False}))
        topology_id = cluster.submit(t)
        workers = cluster.start_workers(topology_id)
        wait_until(lambda: beating(cluster, topology_id), 60, "every task beating at nimbus")
        assert health_listed(cluster, tmp_path, "restarted") == "ok"
        master = topo.topology_master_task(cluster.zk.read(paths.tasks(topology_id), TopologyTasks))
        (victim,) = [w for w in workers if master not in w.tasks]  # the other one forwards the beats

        cluster.kill_worker(victim)
        killed = time.monotonic()
        shown = wait_until(lambda: json.loads(storm(cluster, tmp_path, "get-errors", "restarted"))["Comp-Errors"].get(
            "__topology_master"), 60, "storm get-errors to show nimbus's restart")
        print(f"storm get-errors showed the restart {time.monotonic() - killed:.1f} s after the kill")
        assert shown == (f"worker 127.0.0.1:{victim.port} restarted by nimbus: no heartbeat from its tasks "
                         f"{sorted(victim.tasks)} for over {timeout} s (nimbus.task.timeout.secs)")
        health = health_listed(cluster, tmp_path, "restarted")
        assert re.fullmatch(r"\d workers? restarted by nimbus in 10 min: no heartbeat; errors: __topology_master "
                            rf"\(\d+ s ago\): worker 127\.0\.0\.1:{victim.port} restarted by nimbus: .*",
                            health), health
        with ui_in_front_of(cluster.conf, cluster.nimbus.port) as ui:
            page = valid(ui.get(f"/api/v1/topology/{topology_id}", params={"sys": "1"}), "/api/v1/topology/{id}")
            row = next(b for b in page["bolts"] if b["boltId"] == "__topology_master")
            assert row["lastErrorSummary"] == shown
            last_errors = rows(ui.get(f"/topology/{topology_id}").text, "errors")[1:]
            assert [r[0] for r in last_errors if r[3].startswith(shown)] == ["__topology_master"], \
                "on the topology page's last errors, system components hidden or not"
