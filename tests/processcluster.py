"""A cluster of real daemon processes for end-to-end tests: ``storm nimbus`` and ``storm supervisor``
on the session's ZooKeeper, each with its own local dir, config file and log. Cleanup stops every
daemon and every worker the supervisors started, by pid (a SIGKILLed supervisor leaves its workers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from squall.devzk import free_port
from squall.dsl import Topology
from squall.local_state import workers_dir
from squall.package import build_package
from squall.submitter import submit_topology
from squall.thrift import connect
from squall.zk import paths
from squall.zk.client import ZkClient
from squall.zk.records import Assignment, NimbusMaster
from supervisor.processes import WorkerProcesses, WorkerRecord
from support import wait_until

REPO = Path(__file__).resolve().parent.parent

#: Timings shortened for tests (every key is a documented config key).
FAST = {
    "nimbus.thrift.port": 0, "storm.local.hostname": "127.0.0.1", "squall.log.format": "json",
    "task.heartbeat.frequency.secs": 0.5, "worker.heartbeat.frequency.secs": 0.5, "task.refresh.poll.secs": 1,
    "nimbus.monitor.freq.secs": 1, "nimbus.task.timeout.secs": 5, "nimbus.task.launch.secs": 20,
    "topology.message.timeout.secs": 5, "supervisor.monitor.frequency.secs": 1,
    "supervisor.heartbeat.frequency.secs": 1, "supervisor.worker.timeout.secs": 5,
    "supervisor.worker.start.timeout.secs": 30, "supervisor.worker.shutdown.sleep.secs": 2,
}


class ProcessCluster:
    def __init__(self, zk_conf: dict[str, Any], tmp: Path, stack: ExitStack, **conf: Any) -> None:
        self.tmp = tmp
        self.conf = {**zk_conf, **FAST, **conf}
        self.zk = ZkClient(self.conf).start()
        stack.callback(self.zk.stop)
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, list[int]] = {}
        stack.callback(self.stop_all)
        stack.callback(lambda: print(self.logs()))  # shown by pytest when the test fails

    # -- daemons ----------------------------------------------------------------------------------

    def daemon_conf(self, name: str) -> dict[str, Any]:
        extra = {"supervisor.slots.ports": self.ports[name]} if name in self.ports else {}
        return {**self.conf, "storm.local.dir": str(self.tmp / name), **extra}

    def _start(self, name: str, command: str) -> subprocess.Popen[bytes]:
        conf_file = self.tmp / f"{name}.yaml"
        conf_file.write_text(json.dumps(self.daemon_conf(name)))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        with open(self.tmp / f"{name}.log", "ab") as log:
            process = subprocess.Popen([sys.executable, "-m", "squall.cli", "--config", str(conf_file), command],
                                       stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp, env=env)
        self.daemons[name] = process
        return process

    def start_nimbus(self, name: str = "nimbus") -> subprocess.Popen[bytes]:
        """Start a nimbus and wait until it leads (a killed leader's node lasts until its session expires)."""
        log_file = self.tmp / f"{name}.log"
        offset = log_file.stat().st_size if log_file.exists() else 0
        process = self._start(name, "nimbus")
        port = wait_until(lambda: _logged_port(log_file, offset), 30, f"{name} to start")
        wait_until(lambda: self.leader_port() == port, 60, f"{name} to lead")
        return process

    def start_supervisor(self, name: str, slots: int = 2) -> subprocess.Popen[bytes]:
        self.ports.setdefault(name, [free_port() for _ in range(slots)])
        return self._start(name, "supervisor")

    def supervisor_id(self, name: str) -> str:
        return (self.tmp / name / "supervisor" / "supervisor_id").read_text().strip()

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        process = self.daemons.pop(name)
        process.send_signal(sig)
        process.wait(30)

    def workers(self, name: str) -> list[WorkerRecord]:
        """The worker records of a supervisor (its worker.json files)."""
        return WorkerProcesses(workers_dir(self.daemon_conf(name))).records()

    def kill_workers(self, name: str, grace_secs: float = 0.0) -> None:
        processes = WorkerProcesses(workers_dir(self.daemon_conf(name)))
        for record in processes.records():
            processes.kill(record, grace_secs)

    def stop_all(self) -> None:
        for process in self.daemons.values():
            if process.poll() is None:
                process.terminate()
        for process in self.daemons.values():
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        self.daemons.clear()
        for name in self.ports:
            self.kill_workers(name, grace_secs=5)

    # -- cluster ----------------------------------------------------------------------------------

    def leader_port(self) -> int | None:
        master = self.zk.read(paths.NIMBUS_MASTER, NimbusMaster)
        return master.port if master else None

    def client(self) -> Any:
        port = self.leader_port()
        assert port is not None, "no nimbus leads"
        return connect("127.0.0.1", port, 30_000)

    def submit(self, topology: Topology, *sources: Path) -> str:
        """Package ``sources`` (default: the tests' topologies module and examples/) and submit."""
        package = build_package(sources or (REPO / "tests" / "topologies.py", REPO / "examples"),
                                self.tmp / f"{topology.name}.zip")
        return submit_topology(self.conf, topology, package=package, zk=self.zk)

    def assignment(self, topology_id: str) -> Assignment | None:
        return self.zk.read(paths.assignment(topology_id), Assignment)

    def logs(self) -> str:
        """Every daemon and worker log, for assertion messages."""
        files = [*self.tmp.glob("*.log"), *self.tmp.glob("*/logs/*.log")]
        return "\n".join(f"== {p}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(files))


def _logged_port(log_file: Path, offset: int) -> int | None:
    """The port a nimbus reported in its JSON log past ``offset`` (this run's part), once started."""
    with open(log_file, "rb") as log:
        log.seek(offset)
        for line in log.read().decode(errors="replace").splitlines():
            if line.startswith("{") and (entry := json.loads(line)).get("event") == "nimbus started":
                return int(entry["port"])
    return None
