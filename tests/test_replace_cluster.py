"""Hot deploy (``storm jar --replace``) and restart on a process cluster: the running topology makes way for
its new submission under the same name, a new id, its workers stopped before the new ones start."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from processcluster import ProcessCluster
from scenarios import release_package, tagged_stream
from squall.submitter import submit_topology
from squall.thrift import storm
from squall.zk import paths
from supervisor.processes import running
from support import wait_until
from topologies import read_records

HOT = {"topology.hot.deploy.enable": True}


def releases(records: Path) -> set[str]:
    return {release for _, _, release, _ in read_records(records, "seen")}


def test_hot_deploy_and_restart_replace_the_running_topology(zk_conf: dict[str, Any], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack)
        cluster.start_nimbus()
        cluster.start_supervisor("sup")
        cluster.wait_supervisors(1)
        first, second = tmp_path / "first", tmp_path / "second"
        first.mkdir(), second.mkdir()
        old_id = submit_topology(cluster.conf, tagged_stream("live", first, workers=2, pending=100, tags=2),
                                 package=release_package(tmp_path, "v1"), zk=cluster.zk)
        wait_until(lambda: releases(first) == {"v1"}, 60, "v1 processing")
        old_pids = [r.pid for r in cluster.workers("sup")]

        with cluster.client() as client, pytest.raises(storm.InvalidTopologyException):
            thrift, conf = tagged_stream("live", second, workers=2, pending=100, tags=2).build()
            bad_conf = {**conf, **HOT, "topology.workers": 0}  # an invalid replacement
            client.submitTopologyWithOpts("live", "", json.dumps(bad_conf), thrift, None)
        assert cluster.zk.exists(paths.topology(old_id)), "a refused replacement leaves the running one alone"
        with pytest.raises(storm.InvalidTopologyException, match="no topology named 'ghost' is running"):
            submit_topology(cluster.conf, tagged_stream("ghost", second, 1, 100, 1), conf_overrides=HOT, zk=cluster.zk)

        new_id = submit_topology(cluster.conf, tagged_stream("live", second, workers=2, pending=100, tags=2),
                                 package=release_package(tmp_path, "v2"), conf_overrides=HOT, zk=cluster.zk)
        assert new_id != old_id and not cluster.zk.exists(paths.topology(old_id))
        assert not any(running(pid) for pid in old_pids), "the old workers stopped before the new id was returned"
        wait_until(lambda: releases(second) == {"v2"}, 60, "v2 processing under the same name")
        with cluster.client() as client:
            assert [(t.name, t.id, t.status) for t in client.getClusterInfo().topologies] == [("live", new_id, "ACTIVE")]

        # restart: same code (v2), the conf merged in, a new id.
        conf_file = tmp_path / "restart.yaml"
        conf_file.write_text("topology.max.spout.pending: 7\n")
        assert cluster.cli("restart", "live", str(conf_file)) == 0
        assert capsys.readouterr().out.strip().splitlines()[-1] == "Restarted topology: live"
        with cluster.client() as client:
            restarted = client.getTopologyId("live")
            stored = json.loads(client.getTopologyConf(restarted))
        assert restarted not in (old_id, new_id) and stored["topology.max.spout.pending"] == 7
        seen = len(read_records(second, "seen"))
        wait_until(lambda: len(read_records(second, "seen")) > seen + 500, 60, "processing after the restart")
        assert releases(second) == {"v2"}, "a restart keeps the code"
