"""A :class:`~squall.dev.cluster.DevCluster` for end-to-end tests: on the session's ZooKeeper (or one of
the test's own), with timings shortened through config, JSON logs, and submission of test topologies.
It stops every process it started when the test's ExitStack closes, and prints the logs (pytest shows
them when the test fails)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from squall.api.dsl import Topology
from squall.api.submitter import submit_topology
from squall.cli.main import main
from squall.core.package import build_package
from squall.core.thrift import storm
from squall.core.zk import paths
from squall.core.zk.records import Assignment, StormBase
from squall.dev.cluster import DevCluster
from squall.dev.zookeeper import free_port
from support import chroot_conf, storm_on_path, wait_until

REPO = Path(__file__).resolve().parent.parent

#: Timings shortened for tests (every key is a documented config key).
FAST = {
    "nimbus.thrift.port": 0, "storm.local.hostname": "127.0.0.1", "squall.log.format": "json",
    "nimbus.thrift.bind.address": "127.0.0.1", "worker.transfer.bind.address": "127.0.0.1",
    "task.heartbeat.frequency.secs": 0.5, "worker.heartbeat.frequency.secs": 0.5, "task.refresh.poll.secs": 1,
    "nimbus.monitor.freq.secs": 1, "nimbus.task.timeout.secs": 5, "nimbus.task.launch.secs": 20,
    "topology.message.timeout.secs": 5, "supervisor.monitor.frequency.secs": 1,
    "supervisor.heartbeat.frequency.secs": 1, "supervisor.worker.timeout.secs": 5,
    "supervisor.worker.start.timeout.secs": 30, "supervisor.worker.shutdown.sleep.secs": 2,
}


class ProcessCluster(DevCluster):
    def __init__(self, zk_conf: dict[str, Any], tmp: Path, stack: ExitStack, **conf: Any) -> None:
        super().__init__(tmp, {**zk_conf, **FAST, **conf})
        stack.callback(self.stop)
        stack.callback(lambda: print(self.logs()))

    def start(self, *supervisors: str, slots: int = 2) -> None:
        """Nimbus and ``supervisors`` (``slots`` free ports each) started side by side; returns once nimbus leads
        and every supervisor has registered."""
        self.start_nimbus(wait=False)
        for name in supervisors:
            self.start_supervisor(name, [free_port() for _ in range(slots)])
        self.wait_started()
        self.wait_supervisors(len(supervisors))

    def start_supervisor_as_a_service(self, name: str, ports: Sequence[int]) -> subprocess.Popen[bytes]:
        """Start a supervisor as a service manager (a systemd unit) starts one: the virtualenv's ``storm`` by its
        absolute path, in the unit's own environment: PATH=/usr/bin:/bin, which holds no virtualenv, and no
        VIRTUAL_ENV (and this checkout's Squall on PYTHONPATH, as every daemon of a test has it)."""
        self.ports[name] = list(ports)
        return self._start(name, "supervisor", cli=[str(Path(sys.executable).parent / "storm")],
                           environ={"PATH": "/usr/bin:/bin"})

    def submit(self, topology: Topology, *sources: Path) -> str:
        """Package ``sources`` (default: the tests' topologies module and examples/) and submit."""
        package = build_package(sources or (REPO / "tests" / "topologies.py", REPO / "examples"),
                                self.root / f"{topology.name}.zip")
        return submit_topology(self.conf, topology, package=package, zk=self.zk)

    def client_conf(self) -> dict[str, Any]:
        """What a ``storm`` client needs to reach this cluster: nimbus by seed, ZooKeeper by root."""
        return {"nimbus.seeds": [f"127.0.0.1:{self.nimbus_ports['nimbus']}"], "squall.log.format": "json",
                **{k: self.conf[k] for k in ("storm.zookeeper.servers", "storm.zookeeper.port", "storm.zookeeper.root")}}

    def user_shell(self, home: Path) -> dict[str, str]:
        """The environment of a user's shell for this cluster, for documented lines run with ``bash -c``: this
        checkout's ``storm`` on PATH, then the virtualenv's commands (``pip``, ``sparse``: it is activated), and
        the cluster in ``$STORM_CONF_DIR/storm.yaml`` (made under ``home``)."""
        env = storm_on_path(home / "bin")
        env["PATH"] = f"{home / 'bin'}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        (home / "conf").mkdir(exist_ok=True)
        (home / "conf" / "storm.yaml").write_text(json.dumps(self.client_conf()))  # JSON is YAML
        return {**env, "STORM_CONF_DIR": str(home / "conf")}

    def cli(self, *argv: str, conf: dict[str, Any] | None = None) -> int:
        """``storm ARGV`` against this cluster, in this process (``conf``: what to set beside the client conf)."""
        options = [arg for key, value in {**self.client_conf(), **(conf or {})}.items()
                   for arg in ("-c", f"{key}={json.dumps(value)}")]
        return main(options + list(argv))

    def assignment(self, topology_id: str) -> Assignment | None:
        return self.zk.read(paths.assignment(topology_id), Assignment)

    def kill_topologies(self, timeout: float = 60) -> None:
        """Kill every topology (no kill wait) and return once nimbus has removed them and their assignments: what a
        test sharing the cluster leaves to the next is every slot free (its workers may still be stopping)."""
        names = [base.name for topology_id in self.zk.children(paths.TOPOLOGIES)
                 if (base := self.zk.read(paths.topology(topology_id), StormBase)) is not None]
        with self.client() as client:
            for name in names:
                try:
                    client.killTopologyWithOpts(name, storm.KillOptions(wait_secs=0))
                except storm.NotAliveException:  # killed by the test already
                    pass
        wait_until(lambda: not self.zk.children(paths.TOPOLOGIES) and not self.zk.children(paths.ASSIGNMENTS),
                   timeout, "every topology removed")


@contextmanager
def shared_cluster(zk_address: str, tmp: Path, *supervisors: str, slots: int = 2,
                   **conf: Any) -> Iterator[ProcessCluster]:
    """A started :class:`ProcessCluster` on a ZooKeeper root of its own, for the tests of a module that need a cluster
    but not a new one: each submits topologies of its own names and kills them on the way out
    (:meth:`ProcessCluster.kill_topologies`), so the next finds every slot free."""
    with chroot_conf(zk_address) as zk_conf, ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp, stack, **conf)
        cluster.start(*supervisors, slots=slots)
        yield cluster
