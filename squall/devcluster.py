"""A cluster of daemon processes on this machine: optionally a ZooKeeper, then ``storm nimbus`` and
``storm supervisor`` processes, each with its own local dir, config file and log under one root.

``storm dev-cluster``, the start-up benchmark and the multi-process tests all drive daemons through
this. :meth:`DevCluster.stop` ends every process it started — daemons, the workers their supervisors
started (a killed supervisor leaves them running) and ZooKeeper — by pid, never by name.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from thriftpy2.thrift import TClient

from squall.devzk import LocalZooKeeper, free_port
from squall.local_state import workers_dir
from squall.thrift import connect
from squall.zk import paths
from squall.zk.client import ZkClient
from squall.zk.records import NimbusMaster
from supervisor.processes import WorkerProcesses, WorkerRecord

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float, what: str) -> T:
    """Poll ``condition`` until it returns something truthy; TimeoutError naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)  # the conditions are other processes' doings: there is nothing to wait on


class DevCluster:
    """Daemons under ``root``: ``<root>/<name>.yaml`` (config), ``<root>/<name>/`` (local dir),
    ``<root>/<name>.log`` (daemon log) and ``<root>/<name>/logs/`` (its workers' logs)."""

    def __init__(self, root: Path, conf: Mapping[str, Any]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.conf = dict(conf)
        self.zookeeper: LocalZooKeeper | None = None
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, list[int]] = {}  # supervisor name → its slots
        self.nimbus_ports: dict[str, int] = {}  # nimbus name → its Thrift port
        self._zk: ZkClient | None = None

    # -- processes --------------------------------------------------------------------------------

    def start_zookeeper(self) -> LocalZooKeeper:
        """A ZooKeeper of the cluster's own on ``storm.zookeeper.port`` (0: a free port), data under root."""
        port = int(self.conf["storm.zookeeper.port"]) or free_port()
        self.zookeeper = LocalZooKeeper(self.root / "zookeeper", port).start()
        self.conf.update({"storm.zookeeper.servers": [self.zookeeper.host], "storm.zookeeper.port": port})
        return self.zookeeper

    def daemon_conf(self, name: str) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if name in self.ports:
            extra["supervisor.slots.ports"] = self.ports[name]
        if name in self.nimbus_ports:
            extra["nimbus.thrift.port"] = self.nimbus_ports[name]
        return {**self.conf, "storm.local.dir": str(self.root / name), **extra}

    def start_nimbus(self, name: str = "nimbus", timeout: float = 60) -> subprocess.Popen[bytes]:
        """Start a nimbus and return once it leads (a killed leader's node lasts until its session expires)."""
        port = int(self.conf["nimbus.thrift.port"]) or free_port()  # 0: a new port each life, told apart
        self.nimbus_ports[name] = port
        process = self._start(name, "nimbus")
        wait_for(lambda: self._alive(name) and self.leader_port() == port, timeout,
                 f"{name} to lead (log: {self.log_file(name)})")
        return process

    def start_supervisor(self, name: str, ports: Sequence[int] = ()) -> subprocess.Popen[bytes]:
        """Start a supervisor; its slots are ``ports``, else those of its earlier life, else two free ports."""
        if ports or name not in self.ports:
            self.ports[name] = list(ports) or [free_port() for _ in range(2)]
        return self._start(name, "supervisor")

    def _start(self, name: str, command: str) -> subprocess.Popen[bytes]:
        conf_file = self.root / f"{name}.yaml"
        conf_file.write_text(json.dumps(self.daemon_conf(name), indent=1))  # JSON is YAML
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        with open(self.log_file(name), "ab") as log:
            process = subprocess.Popen([sys.executable, "-m", "squall.cli", "--config", str(conf_file), command],
                                       stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       cwd=self.root, env=env, start_new_session=True)
        self.daemons[name] = process
        return process

    def _alive(self, name: str) -> bool:
        process = self.daemons.get(name)
        if process is None or process.poll() is not None:
            raise RuntimeError(f"{name} exited; see {self.log_file(name)}:\n{self.tail(name)}")
        return True

    def wait_supervisors(self, count: int, timeout: float = 60) -> None:
        wait_for(lambda: len(self.zk.children(paths.SUPERVISORS)) >= count, timeout, f"{count} supervisors")

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Signal a daemon and wait for it (its workers, if a supervisor, go on running)."""
        process = self.daemons.pop(name)
        process.send_signal(sig)
        process.wait(30)

    def workers(self, name: str) -> list[WorkerRecord]:
        """The worker records a supervisor keeps (its ``worker.json`` files)."""
        return WorkerProcesses(workers_dir(self.daemon_conf(name))).records()

    def kill_workers(self, name: str, grace_secs: float = 0.0) -> None:
        processes = WorkerProcesses(workers_dir(self.daemon_conf(name)))
        for record in processes.records():
            processes.kill(record, grace_secs)

    def stop(self) -> None:
        """Stop every daemon (SIGTERM, then SIGKILL), every worker left behind, then ZooKeeper."""
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
        if self._zk is not None:
            self._zk.stop()
            self._zk = None
        if self.zookeeper is not None:
            self.zookeeper.stop()

    # -- looking at it ----------------------------------------------------------------------------

    @property
    def zk(self) -> ZkClient:
        """A client of the cluster's ZooKeeper (under its root), started on first use."""
        if self._zk is None:
            self._zk = ZkClient(self.conf).start()
        return self._zk

    def supervisor_id(self, name: str) -> str:
        return (self.root / name / "supervisor" / "supervisor_id").read_text().strip()

    def leader_port(self) -> int | None:
        master = self.zk.read(paths.NIMBUS_MASTER, NimbusMaster)
        return master.port if master else None

    @contextmanager
    def client(self, timeout_ms: int = 30_000) -> Iterator[TClient]:
        """A Thrift client of the leading nimbus."""
        master = self.zk.read(paths.NIMBUS_MASTER, NimbusMaster)
        if master is None:
            raise RuntimeError("no nimbus leads")
        with connect(master.host, master.port, timeout_ms) as client:
            yield client

    def log_file(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def tail(self, name: str, chars: int = 3000) -> str:
        path = self.log_file(name)
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def logs(self, chars: int = 3000) -> str:
        """The end of every daemon and worker log."""
        files = [*self.root.glob("*.log"), *self.root.glob("*/logs/*.log")]
        return "\n".join(f"== {p}\n{p.read_text(errors='replace')[-chars:]}" for p in sorted(files))
