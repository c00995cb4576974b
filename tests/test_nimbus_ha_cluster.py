"""Losing the leading nimbus's host, on a process cluster: its process SIGKILLed and its local dir
deleted. With code replicated to the follower before scheduling, the follower takes over, the topology goes on
processing, and a supervisor on a new host starts the topology's workers from the new leader's copy.
"""

from __future__ import annotations

import shutil
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from processcluster import ProcessCluster
from squall.core.zk import paths
from squall.core.zk.records import CodeHolder
from squall.dev.zookeeper import free_port
from support import wait_until
from topologies import read_records, recorded_numbers

PENDING = 200


@pytest.mark.slow
def test_the_follower_takes_over_a_lost_leader_host_and_a_new_supervisor_runs_its_code(
        zk_conf: dict[str, Any], tmp_path: Path) -> None:
    records = tmp_path / "records"
    t = recorded_numbers("ha", records, workers=1, conf={"topology.max.spout.pending": PENDING})
    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack, **{
            "topology.min.replication.count": 2, "topology.max.replication.wait.time.sec": 60})
        cluster.start_nimbus("nimbus1")
        cluster.start_nimbus("nimbus2", lead=False)
        follower = f"127.0.0.1:{cluster.nimbus_ports['nimbus2']}"
        cluster.start_supervisor("host1", [free_port()])
        cluster.wait_supervisors(1)
        topology_id = cluster.submit(t)
        # scheduled only once the follower held the code
        assert cluster.zk.read(paths.code_holder(follower), CodeHolder).holds(topology_id, 1)

        def acked() -> int:
            return len(set(read_records(records, "acked")))

        wait_until(lambda: acked() >= 1000, 60, "1,000 numbers acked")
        cluster.kill("nimbus1")  # SIGKILL, and the host's disk is gone with it
        shutil.rmtree(cluster.root / "nimbus1")
        wait_until(lambda: cluster.leader_port() == cluster.nimbus_ports["nimbus2"], 60, "nimbus2 to take over")
        at_takeover = acked()
        wait_until(lambda: acked() >= at_takeover + 1000, 60, "processing to go on under the new leader")

        cluster.kill("host1")  # that host is lost too: its workers move to a host that never had the code
        cluster.kill_workers("host1")
        cluster.start_supervisor("host2", [free_port()])
        host2 = wait_until(lambda: (cluster.root / "host2" / "supervisor" / "supervisor_id").exists()
                           and cluster.supervisor_id("host2"), 60, "host2's supervisor to register")
        wait_until(lambda: [w.supervisor_id for w in cluster.assignment(topology_id).workers] == [host2], 60,
                   "the topology's worker to move to host2")
        wait_until(lambda: cluster.workers("host2"), 60, "host2 to start the worker")
        assert (cluster.root / "host2" / "supervisor" / "stormdist" / topology_id / "1" / "code.pkg").exists()
        moved = acked()
        wait_until(lambda: acked() >= moved + 1000, 90, "processing on host2's worker")
        # nothing lost: every number below what host2's worker went past is acked (failed ones were replayed)
        settled = max(read_records(records, "acked")) - PENDING
        wait_until(lambda: set(range(settled)) <= set(read_records(records, "acked")), 60,
                   f"every number below {settled} acked")
