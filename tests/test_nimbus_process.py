"""`storm nimbus` as real processes: two of them on one ZooKeeper, the leader killed with SIGKILL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from squall.thrift import connect
from squall.zk import paths
from squall.zk.client import ZkClient
from squall.zk.records import NimbusMaster
from support import wait_until


def start_nimbus(conf: dict[str, Any], local_dir: Path) -> subprocess.Popen[bytes]:
    overrides = {
        "storm.zookeeper.servers": conf["storm.zookeeper.servers"], "storm.zookeeper.port": conf["storm.zookeeper.port"],
        "storm.zookeeper.root": conf["storm.zookeeper.root"],
        "storm.zookeeper.session.timeout": conf["storm.zookeeper.session.timeout"],
        "storm.local.dir": str(local_dir), "storm.local.hostname": "127.0.0.1", "nimbus.thrift.port": 0,
        "squall.log.format": "json",
    }
    argv = [sys.executable, "-m", "squall.cli"]
    for key, value in overrides.items():
        argv += ["-c", f"{key}={json.dumps(value)}"]
    log = open(local_dir.with_suffix(".log"), "wb")
    return subprocess.Popen([*argv, "nimbus"], stdout=log, stderr=subprocess.STDOUT)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def listening_port(log_file: Path) -> int | None:
    """The port a nimbus process reported in its JSON log, once it has started."""
    for line in log_file.read_text(errors="replace").splitlines():
        if line.startswith("{") and (entry := json.loads(line)).get("event") == "nimbus started":
            return int(entry["port"])
    return None


def test_follower_takes_over_within_the_session_timeout(zk: ZkClient, zk_conf: dict[str, Any], tmp_path: Path,
                                                       processes: list[subprocess.Popen[bytes]]) -> None:
    dirs = [tmp_path / f"nimbus-{i}" for i in (1, 2)]
    processes += [start_nimbus(zk_conf, d) for d in dirs]
    ports = wait_until(lambda: all(p := [listening_port(d.with_suffix(".log")) for d in dirs]) and p, 30,
                       "both nimbuses to start")
    by_port = dict(zip(ports, processes))
    wait_until(lambda: zk.read(paths.NIMBUS_MASTER, NimbusMaster) and len(zk.children(paths.NIMBUS_SLAVES)) == 1,
               30, "one leader and one follower")
    leader = zk.read(paths.NIMBUS_MASTER, NimbusMaster)
    (follower_port,) = set(ports) - {leader.port}
    with connect("127.0.0.1", follower_port, 10_000) as client:
        assert client.getLeader().port == leader.port, "a follower names the leader"

    by_port[leader.port].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    session_secs = zk_conf["storm.zookeeper.session.timeout"] / 1000
    wait_until(lambda: (m := zk.read(paths.NIMBUS_MASTER, NimbusMaster)) is not None and m.port == follower_port,
               session_secs + 10, "the follower to take over")
    assert time.monotonic() - killed_at < session_secs + 5
    with connect("127.0.0.1", follower_port, 10_000) as client:
        assert client.getClusterInfo().nimbuses[0].port == follower_port
