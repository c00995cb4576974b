"""A nimbus SIGKILLed while a delayed rebalance waits, restarted on its address, on a process cluster.

The operator's view: ``storm rebalance -w 5 -n 1``, the leader dies 1-2 s later and is started again. The
restarted nimbus leads at once (it recognises the leader node of its own previous life) and the rebalance
that came due meanwhile runs: the topology leaves REBALANCING on one worker.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from processcluster import ProcessCluster
from squall.core.zk import paths
from squall.core.zk.records import StormBase
from squall.dev.zookeeper import free_port
from support import wait_until
from topologies import recorded_numbers

#: Long enough that waiting out the dead nimbus's session would show: the issue saw ~20 s of "NotLeader".
SESSION_MS = 20_000


@pytest.mark.slow
def test_a_rebalance_due_while_nimbus_restarts_runs_once_the_restarted_nimbus_leads(
        zk_conf: dict[str, Any], tmp_path: Path) -> None:
    records = tmp_path / "records"
    t = recorded_numbers("failover", records, workers=2, sinks=2)
    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack, **{
            "nimbus.thrift.port": free_port(), "storm.zookeeper.session.timeout": SESSION_MS})
        cluster.start("sup", slots=3)
        topology_id = cluster.submit(t)
        wait_until(lambda: (a := cluster.assignment(topology_id)) and len(a.workers) == 2, 30, "two workers")

        def status() -> str:
            return cluster.zk.read(paths.topology(topology_id), StormBase).status.value

        assert cluster.cli("rebalance", "failover", "-w", "5", "-n", "1") == 0
        assert status() == "rebalancing"
        time.sleep(1.5)  # the scenario itself: the leader dies partway through the wait
        cluster.kill("nimbus")
        restarted = time.monotonic()
        # the dead leader's node names this address until its session expires: start_nimbus waits for the takeover
        cluster.start_nimbus(timeout=SESSION_MS / 1000 + 30)
        # a write is what a follower refuses ("NotLeader: ... the leader is <itself>")
        wait_until(lambda: cluster.cli("blacklist", "add", "no-such-host") == 0, SESSION_MS / 1000 + 30,
                   "the restarted nimbus to accept a write")
        took = time.monotonic() - restarted
        assert took < SESSION_MS / 1000 / 2, f"the restarted nimbus led only after {took:.1f} s"
        assert cluster.cli("blacklist", "remove", "no-such-host") == 0
        wait_until(lambda: status() == "active", 20, "the delayed rebalance to run on the restarted leader")
        assert cluster.zk.read(paths.topology(topology_id), StormBase).pending is None
        wait_until(lambda: len(cluster.assignment(topology_id).workers) == 1, 20, "one worker after the rebalance")
