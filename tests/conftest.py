"""Test fixtures: one real ZooKeeper per test session, one chroot per test.

ZooKeeper comes from, in order: ``SQUALL_TEST_ZK`` (``host:port`` of a server you run), a
testcontainers ZooKeeper when a Docker engine answers, else a local server from Debian's
``zookeeper`` package on a free port in a temp dir (stopped and removed at session end). Under pytest-xdist
the controller starts it and its workers share it (:class:`SharedZooKeeper`).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from squall.core.zk.client import ZkClient
from squall.dev.zookeeper import LocalZooKeeper, free_port, is_serving
from support import chroot_conf, wait_until

# A suite started in the background by a non-interactive shell inherits SIGINT ignored, and so would every process
# a test starts: the tests of Ctrl-C (storm dev-cluster, storm dev-zookeeper, storm local) need it delivered.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _docker_engine_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


@contextmanager
def session_zookeeper(data_dir: Path) -> Iterator[str]:
    """The session's ZooKeeper (see the module's docstring) as ``host:port``, stopped on the way out."""
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
    server = LocalZooKeeper(data_dir, free_port()).start()
    try:
        yield server.connect_string
    finally:
        server.stop()


class SharedZooKeeper:
    """Under pytest-xdist, the controller's ZooKeeper for every worker: one ZooKeeper per session still.

    The controller starts it beside the workers' start-up and stops it once they have all finished (a worker
    that owned it could not stop it while another still used it); each worker reads its address from a file
    the controller writes (or the reason it could not start it)."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="squall-test-zookeeper-"))
        self.stack = ExitStack()
        self.starting = threading.Thread(target=self._start, name="session ZooKeeper", daemon=True)
        self.starting.start()

    def _start(self) -> None:
        try:
            address = self.stack.enter_context(session_zookeeper(self.directory / "data"))
        except Exception as exc:  # told to the workers, which fail their tests needing it with it
            (self.directory / "failed").write_text(f"{type(exc).__name__}: {exc}")
            return
        (self.directory / "address.tmp").write_text(address)
        (self.directory / "address.tmp").rename(self.directory / "address")  # whole, or not there yet

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["squall_zookeeper"] = str(self.directory)

    def pytest_unconfigure(self) -> None:
        self.starting.join()
        self.stack.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def shared_address(directory: Path) -> str:
    """The address the xdist controller's :class:`SharedZooKeeper` writes, once it has started."""
    def written() -> str:
        if (failed := directory / "failed").exists():
            pytest.fail(f"the session's ZooKeeper did not start: {failed.read_text()}", pytrace=False)
        return (directory / "address").read_text() if (directory / "address").exists() else ""

    return wait_until(written, 120, "the session's ZooKeeper, started by the xdist controller")


class DevClusterFilesTogether:
    """Under ``--dist loadfile``, the files whose tests run ``storm dev-cluster`` on the default ports (when free:
    :func:`support.dev_cluster_env`) on one worker: two at once on two workers could both find them free."""

    FILES = frozenset({"tests/test_cli_cluster.py", "tests/test_readme.py"})

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "loadfile":
            return None
        from xdist.scheduler import LoadFileScheduling

        files = self.FILES

        class Scheduling(LoadFileScheduling):
            def _split_scope(self, nodeid: str) -> str:
                scope = super()._split_scope(nodeid)
                return "storm dev-cluster" if scope in files else scope

        return Scheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    distributing = getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput")
    if distributing and not config.option.collectonly:
        config.pluginmanager.register(SharedZooKeeper(), "squall-shared-zookeeper")
        config.pluginmanager.register(DevClusterFilesTogether(), "squall-dev-cluster-files")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In pytest-xdist's workers (``--dist loadfile``: a file's tests on one worker, so a module-scoped cluster
    starts once), the files handed out longest first, so the short ones fill the end of the run: by how many slow
    tests they hold, then how many use ZooKeeper (clusters, processes), the rest in their order."""
    if not hasattr(config, "workerinput"):
        return
    weights: dict[Path, list[int]] = {}
    for item in items:
        weight = weights.setdefault(item.path, [0, 0])
        weight[0] += item.get_closest_marker("slow") is not None
        weight[1] += "zk_address" in getattr(item, "fixturenames", ())
    items.sort(key=lambda item: weights[item.path], reverse=True)  # stable: a file's tests keep their order


@pytest.fixture(scope="session")
def zk_address(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if shared := getattr(request.config, "workerinput", {}).get("squall_zookeeper"):
        yield shared_address(Path(shared))
        return
    with session_zookeeper(tmp_path_factory.mktemp("zookeeper")) as address:
        yield address


@pytest.fixture
def zk_conf(zk_address: str) -> Iterator[dict[str, Any]]:
    """Cluster conf pointing at the session's ZooKeeper under a root of this test's own."""
    with chroot_conf(zk_address) as conf:
        yield conf


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
