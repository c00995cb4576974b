"""A small real cluster for end-to-end tests: the session's ZooKeeper, a nimbus on the real clock,
supervisor registrations, and worker processes started the way a supervisor starts them (code
downloaded from nimbus into the supervisor's directory, then ``python -m worker`` in its own process
group, outside the checkout so the topology code comes from its package, logging where a supervisor's
workers log: ``<tmp>/logs/<topology-id>-worker-<port>.log``, one directory for the cluster's one host).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from nimbus.daemon import Nimbus
from nimbus.service import NimbusService
from squall.api.dsl import Topology
from squall.api.submitter import submit_topology
from squall.core.local_state import log_dir, worker_log_name
from squall.core.package import build_package
from squall.core.zk import paths
from squall.core.zk.client import ZkClient
from squall.core.zk.records import Assignment, SupervisorInfo, WorkerAssignment
from squall.dev.cluster import squall_import_path
from squall.dev.zookeeper import free_port
from supervisor.code import download_code
from support import wait_until

REPO = Path(__file__).resolve().parent.parent

#: Timings shortened for tests (every key is a documented config key).
FAST = {
    "nimbus.thrift.port": 0, "storm.local.hostname": "127.0.0.1", "squall.log.format": "json",
    "nimbus.thrift.bind.address": "127.0.0.1", "worker.transfer.bind.address": "127.0.0.1",
    "task.heartbeat.frequency.secs": 0.5, "worker.heartbeat.frequency.secs": 0.5, "task.refresh.poll.secs": 1,
    "nimbus.monitor.freq.secs": 1, "nimbus.task.timeout.secs": 30, "nimbus.task.launch.secs": 60,
    "topology.message.timeout.secs": 5,
}


class MiniCluster:
    def __init__(self, zk_conf: dict[str, Any], tmp: Path, stack: ExitStack, *, supervisors: int = 2,
                 ports: int = 2, **conf: Any) -> None:
        self.tmp = tmp
        self.conf = {**zk_conf, **FAST, "storm.log.dir": str(tmp / "logs"), **conf}
        self.zk = ZkClient(self.conf).start()
        stack.callback(self.zk.stop)
        self.nimbus = Nimbus({**self.conf, "storm.local.dir": str(tmp / "nimbus")},
                             host="127.0.0.1").start(NimbusService)
        stack.callback(self.nimbus.stop)
        wait_until(lambda: self.nimbus.is_leader, 30, "nimbus to lead")
        self.supervisor_ids = [f"sup-{i}" for i in range(1, supervisors + 1)]
        for sid in self.supervisor_ids:
            self.zk.write(paths.supervisor(sid), SupervisorInfo(sid, "127.0.0.1", [free_port() for _ in range(ports)]))
        self.processes: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        stack.callback(self.stop_workers)
        stack.callback(lambda: print(self.logs()))  # shown by pytest when the test fails

    def submit(self, topology: Topology, *sources: Path, **conf: Any) -> str:
        """Package ``sources`` (default: this tests' topologies module and examples/) and submit."""
        package = build_package(sources or (REPO / "tests" / "topologies.py", REPO / "examples"),
                                self.tmp / f"{topology.name}.zip")
        return submit_topology(self.conf, topology, package=package, zk=self.zk,
                               conf_overrides={k.replace("_", "."): v for k, v in conf.items()})

    def assignment(self, topology_id: str) -> Assignment:
        assignment = self.zk.read(paths.assignment(topology_id), Assignment)
        assert assignment is not None, f"{topology_id} is not assigned"
        return assignment

    def supervisor_conf(self, supervisor_id: str) -> dict[str, Any]:
        return {**self.conf, "storm.local.dir": str(self.tmp / supervisor_id)}

    def start_workers(self, topology_id: str) -> list[WorkerAssignment]:
        workers = self.assignment(topology_id).workers
        for worker in workers:
            self.start_worker(topology_id, worker)
        return workers

    def start_worker(self, topology_id: str, worker: WorkerAssignment) -> subprocess.Popen[bytes]:
        conf = self.supervisor_conf(worker.supervisor_id)
        download_code(conf, topology_id, 1, self.zk)
        worker_id = f"{worker.supervisor_id}-{worker.port}-{len(self.processes)}"
        argv = [sys.executable, "-m", "worker"]
        for key in ("storm.zookeeper.servers", "storm.zookeeper.port", "storm.zookeeper.root",
                    "storm.zookeeper.session.timeout", "storm.local.dir", "storm.local.hostname",
                    "squall.log.format", *(k for k in FAST if k.startswith(("task.", "worker.")))):
            argv += ["-c", f"{key}={json.dumps(conf[key])}"]
        argv += [topology_id, worker.supervisor_id, str(worker.port), worker_id]
        log_file = self.worker_log(topology_id, worker)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_file, "ab")
        # PYTHONPATH is the checkout under test (a worktree, not whatever squall is installed); the topology
        # code still comes from its package, which the worker puts first on its path.
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp,
                                   start_new_session=True, env={**os.environ, "PYTHONPATH": squall_import_path(self.tmp / "python")})
        log.close()
        self.processes[(worker.supervisor_id, worker.port)] = process
        return process

    def worker_log(self, topology_id: str, worker: WorkerAssignment) -> Path:
        """The worker's log file, where a supervisor would put it (a restarted worker appends to it)."""
        return log_dir(self.conf) / worker_log_name(topology_id, worker.port)

    def kill_worker(self, worker: WorkerAssignment, sig: signal.Signals = signal.SIGKILL) -> None:
        process = self.processes.pop((worker.supervisor_id, worker.port))
        os.killpg(process.pid, sig)
        process.wait(30)

    def stop_workers(self) -> None:
        """SIGTERM each worker we started (by pid), SIGKILL what is still there after a grace period."""
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
        self.processes.clear()

    def logs(self) -> str:
        """Every worker log, for assertion messages."""
        return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(log_dir(self.conf).glob("*.log")))
