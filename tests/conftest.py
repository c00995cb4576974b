"""Test fixtures: one real ZooKeeper per test session, one chroot per test.

ZooKeeper comes from, in order: ``SQUALL_TEST_ZK`` (``host:port`` of a server you run), a
testcontainers ZooKeeper when a Docker engine answers, else a local server from Debian's
``zookeeper`` package on a free port in a temp dir (stopped and removed at session end).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from squall.core.config.loading import load_config
from squall.core.zk.client import ZkClient
from squall.dev.zookeeper import LocalZooKeeper, free_port, is_serving
from support import delete_tree, wait_until


def _docker_engine_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def zk_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if address := os.environ.get("SQUALL_TEST_ZK"):
        yield address
        return
    if _docker_engine_answers():
        from testcontainers.core.container import DockerContainer

        container = (DockerContainer("zookeeper:3.8").with_exposed_ports(2181)
                     .with_env("ZOO_4LW_COMMANDS_WHITELIST", "ruok,srvr"))
        container.start()
        try:
            host, port = container.get_container_host_ip(), int(container.get_exposed_port(2181))
            wait_until(lambda: is_serving(host, port), 60, "ZooKeeper container")
            yield f"{host}:{port}"
        finally:
            container.stop()
        return
    server = LocalZooKeeper(tmp_path_factory.mktemp("zookeeper"), free_port()).start()
    try:
        yield server.connect_string
    finally:
        server.stop()


@pytest.fixture
def zk_conf(zk_address: str) -> Iterator[dict[str, Any]]:
    """Cluster conf pointing at the session's ZooKeeper under a root of this test's own."""
    host, port = zk_address.rsplit(":", 1)
    root = f"/squall-test/{uuid.uuid4().hex[:12]}"
    conf = load_config(env={})
    conf.update({
        "storm.zookeeper.servers": [host],
        "storm.zookeeper.port": int(port),
        "storm.zookeeper.root": root,
        "storm.zookeeper.session.timeout": 4000,
        "storm.zookeeper.connection.timeout": 5000,
    })
    yield conf
    delete_tree(zk_address, root)


@pytest.fixture
def zk(zk_conf: dict[str, Any]) -> Iterator[ZkClient]:
    client = ZkClient(zk_conf).start()
    try:
        yield client
    finally:
        client.stop()


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory other users may enter (0711): pytest's tmp_path is under one only its user may (0700)."""
    directory = Path(tempfile.mkdtemp(prefix="squall-runas-"))
    directory.chmod(0o711)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)
