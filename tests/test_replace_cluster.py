"""Hot deploy (``storm jar --replace``), restart and update_topology on a process cluster. Hot deploy and restart
replace the running topology under the same name with a new id, its workers stopped before the new ones start;
an update gives running workers a new conf in place and new code for their next start."""

from __future__ import annotations

import json
import os
import signal
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from processcluster import ProcessCluster
from scenarios import release_package, tagged_stream
from squall.api.submitter import submit_topology, upload_package
from squall.core.thrift import storm
from squall.core.worker_records import running
from squall.core.zk import paths
from support import wait_until
from topologies import read_records

HOT = {"topology.hot.deploy.enable": True}


def releases(records: Path) -> set[str]:
    return {release for _, _, release, _ in read_records(records, "seen")}


def test_hot_deploy_and_restart_replace_the_running_topology(zk_conf: dict[str, Any], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack)
        cluster.start("sup")
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


def test_update_reloads_conf_in_place_and_new_code_at_the_next_worker_start(
        zk_conf: dict[str, Any], tmp_path: Path) -> None:
    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack)
        cluster.start("sup")
        records = tmp_path / "records"
        records.mkdir()
        topology_id = submit_topology(cluster.conf, tagged_stream("tune", records, workers=2, pending=100, tags=2),
                                      package=release_package(tmp_path, "v1"), zk=cluster.zk)
        wait_until(lambda: releases(records) == {"v1"}, 60, "v1 processing")
        pids = sorted(r.pid for r in cluster.workers("sup"))

        def stamps_after(n: int) -> set[str]:
            return {release for _, m, release, _ in read_records(records, "seen") if m > n}

        def latest() -> int:
            return max(n for _, n, _, _ in read_records(records, "seen")) + 100

        suffix = tmp_path / "suffix.yaml"
        suffix.write_text("tag.suffix: '-b'\n")
        assert cluster.cli("update_topology", "tune", "--conf", str(suffix)) == 0
        def tasks_stamping(stamp: str) -> set[int]:
            return {task for _, _, release, task in read_records(records, "seen") if release == stamp}

        wait_until(lambda: len(tasks_stamping("v1-b")) == 2, 60, "both tag tasks on the new conf")
        mark = latest()
        wait_until(lambda: latest() > mark + 500, 60, "more tuples")
        assert stamps_after(mark) == {"v1-b"}
        assert sorted(r.pid for r in cluster.workers("sup")) == pids, "the conf was reloaded in place"
        assignment = cluster.assignment(topology_id)
        assert assignment.code_version == 2 and assignment.type.value == "update"

        with cluster.client() as client:
            for bad, message in (('{"topology.workers": 3}', "use storm rebalance"), ("[1]", "a JSON object"),
                                 ("{", "not valid JSON")):
                with pytest.raises(storm.InvalidTopologyException, match=message):
                    client.updateTopology("tune", "", bad)
            location = upload_package(cluster.conf, client, release_package(tmp_path, "v2"))
            client.updateTopology("tune", location, "")
        wait_until(lambda: cluster.assignment(topology_id).code_version == 3, 30, "the new code version assigned")
        mark = latest()
        wait_until(lambda: len(read_records(records, "seen")) > 1000 and latest() > mark + 500, 60, "more tuples")
        assert stamps_after(mark) == {"v1-b"}, "running workers keep their code"
        victim = cluster.workers("sup")[0]
        os.kill(victim.pid, signal.SIGKILL)
        wait_until(lambda: "v2-b" in stamps_after(mark), 60, "the restarted worker on the new code, same conf")
