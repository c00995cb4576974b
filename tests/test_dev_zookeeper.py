"""`storm dev-zookeeper`: a real ZooKeeper that zkCli.sh can list, stopped cleanly by Ctrl-C."""

from __future__ import annotations

import gc
import json
import logging
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from squall.core.zk import paths
from squall.core.zk.client import ZkClient
from squall.core.zk.records import NimbusMaster
from squall.dev.zookeeper import LocalZooKeeper, free_port, is_serving
from support import stop_or_kill, wait_until

ZKCLI = Path("/usr/share/zookeeper/bin/zkCli.sh")


def zkcli(port: int, *command: str) -> str:
    done = subprocess.run([str(ZKCLI), "-server", f"127.0.0.1:{port}", *command],
                          capture_output=True, text=True, timeout=60)
    return done.stdout


@pytest.mark.skipif(not ZKCLI.exists(), reason="Debian's zookeeper package provides zkCli.sh")
def test_dev_zookeeper_serves_zkcli_and_stops_on_ctrl_c(tmp_path: Path, zk_conf: dict[str, Any]) -> None:
    port = free_port()
    local_dir = tmp_path / "local"
    storm = subprocess.Popen(
        [sys.executable, "-m", "squall.cli", "-c", f"storm.zookeeper.port={port}",
         "-c", f"storm.local.dir={local_dir}", "-c", "squall.log.format=json", "dev-zookeeper"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert storm.stdout is not None
        banner = storm.stdout.readline()  # blocks until the server answers or the command dies
        assert f"ZooKeeper is serving on 127.0.0.1:{port}" in banner, storm.stderr.read() if storm.stderr else ""
        assert (local_dir / "dev-zookeeper" / "data").is_dir(), "data dir lives under storm.local.dir"

        conf = dict(zk_conf, **{"storm.zookeeper.servers": ["127.0.0.1"], "storm.zookeeper.port": port,
                                "storm.zookeeper.root": "/squall"})
        with ZkClient(conf) as zk:
            zk.write(paths.NIMBUS_MASTER, NimbusMaster("nimbus-1", 6627, 1_700_000_000))

        listing = zkcli(port, "ls", "/squall")
        assert "nimbus_master" in listing and "supervisors" in listing
        shown = zkcli(port, "get", "/squall/nimbus_master")
        record = next(json.loads(line) for line in shown.splitlines() if line.startswith("{"))
        assert record == {"v": 1, "host": "nimbus-1", "port": 6627, "since_secs": 1_700_000_000, "tls_port": 0}

        storm.send_signal(signal.SIGINT)  # what Ctrl-C delivers
        assert storm.wait(30) == 0
        wait_until(lambda: not is_serving("127.0.0.1", port), 10, "ZooKeeper to go away with its parent")
    finally:
        stop_or_kill(storm, signal.SIGINT)


def test_dev_zookeeper_reports_a_port_in_use(tmp_path: Path, zk_address: str) -> None:
    busy_port = int(zk_address.rsplit(":", 1)[1])
    done = subprocess.run(
        [sys.executable, "-m", "squall.cli", "-c", f"storm.zookeeper.port={busy_port}",
         "-c", f"storm.local.dir={tmp_path}", "dev-zookeeper"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"port {busy_port} on 127.0.0.1 is already in use" in done.stderr


def test_a_started_zookeeper_takes_a_session_at_once(tmp_path: Path, zk_conf: dict[str, Any],
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """``start()`` returns once ZooKeeper takes sessions, not when it first answers ``ruok``: the first client
    (nimbus, in ``storm dev-cluster``) connects without kazoo's "Connection dropped" warnings."""
    server = LocalZooKeeper(tmp_path / "zk", free_port()).start()
    try:
        conf = dict(zk_conf, **{"storm.zookeeper.servers": [server.host], "storm.zookeeper.port": server.port})
        with caplog.at_level(logging.WARNING, logger="kazoo"), ZkClient(conf) as zk:
            assert zk.connected.is_set()
        assert [r.getMessage() for r in caplog.records if r.name.startswith("kazoo")] == []
    finally:
        server.stop()


def test_a_server_that_cannot_be_started_leaves_its_log_file_closed(tmp_path: Path) -> None:
    """``start()`` opens zookeeper.out for the child; when the child cannot even be started, the file is
    closed there, not left for the garbage collector (which warns of an unclosed file)."""

    class Unstartable(LocalZooKeeper):
        def _command(self) -> list[str]:
            return [str(tmp_path / "no-such-java")]

    gc.collect()  # earlier tests' garbage is not this test's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(OSError):
            Unstartable(tmp_path, free_port()).start()
        gc.collect()
    out = str(tmp_path / "zookeeper.out")
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning) and out in str(w.message)] == []
