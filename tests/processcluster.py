"""A :class:`~squall.dev.cluster.DevCluster` for end-to-end tests: on the session's ZooKeeper (or one of
the test's own), with timings shortened through config, JSON logs, and submission of test topologies.
It stops every process it started when the test's ExitStack closes, and prints the logs (pytest shows
them when the test fails)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from squall.api.dsl import Topology
from squall.api.submitter import submit_topology
from squall.cli.main import main
from squall.core.package import build_package
from squall.core.zk import paths
from squall.core.zk.records import Assignment
from squall.dev.cluster import DevCluster
from squall.dev.zookeeper import free_port

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

    def cli(self, *argv: str, conf: dict[str, Any] | None = None) -> int:
        """``storm ARGV`` against this cluster, in this process (``conf``: what to set beside the client conf)."""
        options = [arg for key, value in {**self.client_conf(), **(conf or {})}.items()
                   for arg in ("-c", f"{key}={json.dumps(value)}")]
        return main(options + list(argv))

    def assignment(self, topology_id: str) -> Assignment | None:
        return self.zk.read(paths.assignment(topology_id), Assignment)
