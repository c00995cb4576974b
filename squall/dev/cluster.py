"""A cluster of daemon processes on this machine: optionally a ZooKeeper, then ``storm nimbus``,
``storm supervisor``, ``storm ui`` and ``storm logviewer`` processes, each with its own local dir, config file
and log under one root.

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
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Literal, TextIO, TypeVar

from thriftpy2.thrift import TClient

import squall
from squall.core.local_state import daemon_log_name, log_dir, workers_dir, write_atomically
from squall.core.logs import readable_text
from squall.core.nimbus_client import port_for
from squall.core.thrift.client import connect
from squall.core.tls import client_context
from squall.core.worker_records import WorkerRecord, WorkerRecords
from squall.core.zk import paths
from squall.core.zk.client import ZkClient
from squall.core.zk.records import NimbusMaster
from squall.dev.zookeeper import LocalZooKeeper, free_port

T = TypeVar("T")

#: Squall's top-level packages (pyproject's), which the processes it starts import.
SQUALL_PACKAGES = ("idl", "logviewer", "nimbus", "squall", "supervisor", "ui", "worker")


def squall_import_path(directory: Path) -> str:
    """A PYTHONPATH for processes Squall starts: ``directory``, made to hold links to the Squall packages this
    process runs, and nothing else.

    Daemons and their workers must run the Squall that started them (the checkout under test, not the one a
    virtualenv installed), yet see none of its other files: a worker able to import the checkout's
    ``examples/`` would hide a module missing from the topology's package.
    """
    directory.mkdir(parents=True, exist_ok=True)
    source = Path(squall.__file__).resolve().parent.parent
    for name in SQUALL_PACKAGES:
        link = directory / name
        if not (link.is_symlink() and link.resolve() == source / name):
            link.unlink(missing_ok=True)
            link.symlink_to(source / name, target_is_directory=True)
    return str(directory)


def wait_for(
    condition: Callable[[], T | Literal[False] | None], timeout: float, what: str, *, backoff: float = 0.0
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that; TimeoutError naming ``what`` at the
    deadline.

    The conditions are other processes' doings, so there is nothing to wait on but time. It asks every 20 ms, and
    less often when asking costs: it pauses four times as long as the last ask took (a condition that calls nimbus
    or reads many records takes at most a fifth of the time, and of the machine, from what it waits on), and
    ``backoff`` times the time waited so far (a long wait need not be seen the instant it ends), up to half a second.
    """
    started = time.monotonic()
    deadline = started + timeout
    while True:
        asked = time.monotonic()
        result = condition()
        if result:
            return result
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(min(max(0.02, 4 * (now - asked), backoff * (now - started)), 0.5))


class DevCluster:
    """Daemons under ``root``: ``<root>/<name>.yaml`` (config), ``<root>/<name>/`` (local dir) and
    ``<root>/<name>/logs/`` (its log file, ``nimbus.log``, and its workers' logs), unless the conf's
    ``storm.log.dir`` puts every daemon's and worker's log in one directory, which the logviewer serves. A daemon's
    log file is also where its output goes (what it prints before its logging starts, a crash's traceback): one
    file per daemon, each line once."""

    def __init__(self, root: Path, conf: Mapping[str, Any]) -> None:
        self.root = Path(root).absolute()  # daemons run in other directories: every path they are given is absolute
        self.root.mkdir(parents=True, exist_ok=True)
        self.conf = dict(conf)
        self.zookeeper: LocalZooKeeper | None = None
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, list[int]] = {}  # supervisor name → its slots
        self.nimbus_ports: dict[str, int] = {}  # nimbus name → its Thrift port
        self.tls_ports: dict[str, int] = {}  # nimbus name → its TLS listener's port, when it has one
        self.hosts: dict[str, str] = {}  # daemon name → its storm.local.hostname, when not the cluster's
        self.prefixes: dict[str, Sequence[str]] = {}  # daemon name → what its command runs under (ip netns exec …)
        self.commands: dict[str, str] = {}  # daemon name → the storm command it runs (nimbus, supervisor…)
        self.ui_port: int | None = None
        self.logviewer_port: int | None = None
        self._zk: ZkClient | None = None
        self._starting: dict[str, tuple[Callable[[], Any], str, float]] = {}  # daemon → (ready?, what, timeout)

    # -- processes --------------------------------------------------------------------------------

    def start_zookeeper(self, host: str = "127.0.0.1") -> LocalZooKeeper:
        """A ZooKeeper of the cluster's own on ``host`` and ``storm.zookeeper.port`` (0: a free port), data under
        root."""
        port = int(self.conf["storm.zookeeper.port"]) or free_port(host)
        self.zookeeper = LocalZooKeeper(self.root / "zookeeper", port, host).start()
        self.conf.update({"storm.zookeeper.servers": [self.zookeeper.host], "storm.zookeeper.port": port})
        return self.zookeeper

    def daemon_conf(self, name: str) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if name in self.ports:
            extra["supervisor.slots.ports"] = self.ports[name]
        if name in self.nimbus_ports:
            extra["nimbus.thrift.port"] = self.nimbus_ports[name]
        if name in self.tls_ports:
            extra["nimbus.thrift.tls.port"] = self.tls_ports[name]
        if name in self.hosts:
            extra["storm.local.hostname"] = self.hosts[name]
        if name == "ui":
            extra.update({"ui.port": self.ui_port, "nimbus.seeds": self.nimbus_seeds()})
        if name in ("ui", "logviewer") and self.logviewer_port is not None:
            extra["logviewer.port"] = self.logviewer_port
        return {**self.conf, "storm.local.dir": str(self.root / name), **extra}

    def nimbus_seeds(self) -> list[str]:
        """Every nimbus of the cluster as ``host:port``, for a client's ``nimbus.seeds``."""
        host = self.conf.get("storm.local.hostname") or "127.0.0.1"
        return [f"{host}:{port}" for port in self.nimbus_ports.values()]

    def start_nimbus(
        self, name: str = "nimbus", timeout: float = 60, *, lead: bool = True, wait: bool = True
    ) -> subprocess.Popen[bytes]:
        """Start a nimbus and return once it leads (a killed leader's node lasts until its session expires), or,
        with ``lead=False``, once it has joined as a follower; with ``wait=False`` at once (see
        :meth:`wait_started`)."""
        port = int(self.conf["nimbus.thrift.port"]) or free_port()  # 0: a new port each life, told apart
        self.nimbus_ports[name] = port
        if self.conf.get("nimbus.thrift.tls.port") is not None:
            self.tls_ports[name] = int(self.conf["nimbus.thrift.tls.port"]) or free_port()
            if self.conf.get("nimbus.thrift.tls.server.only"):
                port = self.tls_ports[name]  # the only port it serves, and the one it is known by
        log_file = log_dir(self.daemon_conf(name)) / daemon_log_name("nimbus")
        logged = log_file.stat().st_size if log_file.exists() else 0  # an earlier life's lines are not this one's
        process = self._start(name, "nimbus")
        host = self.conf.get("storm.local.hostname") or "127.0.0.1"

        def leading() -> bool:
            """Elected, and done taking over (until then it refuses what only a leader does, naming itself)."""
            return self.leader_port() == port and b"nimbus leading" in log_file.read_bytes()[logged:]

        joined = leading if lead else (lambda: self.zk.exists(paths.nimbus_slave(f"{host}:{port}")))
        self._starting[name] = (joined, f"{name} to {'lead' if lead else 'follow'}", timeout)
        if wait:
            self.wait_started()
        return process

    def wait_started(self) -> None:
        """Wait until every daemon started with ``wait=False`` is ready. Daemons started together spend their
        start-up (mostly importing Python) side by side, not one after another."""
        while self._starting:
            name, (ready, what, timeout) = next(iter(self._starting.items()))
            wait_for(partial(self._ready, name, ready), timeout, f"{what} (log: {self.log_file(name)})")
            del self._starting[name]

    def _ready(self, name: str, ready: Callable[[], Any]) -> bool:
        return self._alive(name) and bool(ready())

    def start_ui(self, timeout: float = 60, *, wait: bool = True) -> subprocess.Popen[bytes]:
        """Start ``storm ui`` in front of the cluster's nimbuses, on ``ui.port`` (0: a free port); returns once it
        answers HTTP (with ``wait=False`` at once, see :meth:`wait_started`)."""
        self.ui_port = int(self.conf["ui.port"]) or free_port()
        return self._start_http("ui", f"{self.ui_url()}/api/v1/openapi.json", timeout, wait)

    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    def start_logviewer(self, timeout: float = 60, *, wait: bool = True) -> subprocess.Popen[bytes]:
        """Start ``storm logviewer`` over the cluster's ``storm.log.dir`` (set it, so that every supervisor of this
        host logs there) on ``logviewer.port`` (0: a free port); returns once it answers HTTP (with ``wait=False``
        at once, see :meth:`wait_started`). Start it before the UI, which links to it."""
        if not self.conf.get("storm.log.dir"):
            raise ValueError(
                "the dev cluster's logviewer serves one directory: set storm.log.dir, where its "
                "supervisors' workers then all log"
            )
        self.logviewer_port = int(self.conf["logviewer.port"]) or free_port()
        return self._start_http("logviewer", f"{self.logviewer_url()}/api/v1/listLogs", timeout, wait)

    def logviewer_url(self) -> str:
        return f"http://127.0.0.1:{self.logviewer_port}"

    def _start_http(self, daemon: str, probe_url: str, timeout: float, wait: bool) -> subprocess.Popen[bytes]:
        """Start the HTTP daemon ``daemon`` (``storm ui``, ``storm logviewer``); return once ``probe_url`` answers,
        or with ``wait=False`` at once."""
        process = self._start(daemon, daemon)
        self._starting[daemon] = (lambda: _answers(probe_url), f"the {daemon} to answer", timeout)
        if wait:
            self.wait_started()
        return process

    def start_supervisor(
        self, name: str, ports: Sequence[int] = (), *, host: str | None = None, prefix: Sequence[str] = ()
    ) -> subprocess.Popen[bytes]:
        """Start a supervisor; its slots are ``ports``, else those of its earlier life, else two free ports.

        ``host`` is the address it registers (``storm.local.hostname``) and ``prefix`` what its command runs
        under: a test "host" in a network namespace is ``host="10.0.0.2", prefix=("ip", "netns", "exec", "a")``.
        """
        if ports or name not in self.ports:
            self.ports[name] = list(ports) or [free_port() for _ in range(2)]
        if host is not None:
            self.hosts[name] = host
        if prefix:
            self.prefixes[name] = tuple(prefix)
        return self._start(name, "supervisor")

    def _start(
        self, name: str, command: str, *, cli: Sequence[str] = (), environ: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Run ``storm COMMAND`` as daemon ``name``: ``cli`` is the ``storm`` it runs (default: this Python's
        Squall) and ``environ`` its environment (default: this process's), with the Squall of this process."""
        conf_file = self.root / f"{name}.yaml"
        # JSON is YAML; the daemons' own (it may hold their ZooKeeper password): workers run as another user
        # (supervisor.run.worker.as.user) must not read it
        write_atomically(conf_file, json.dumps(self.daemon_conf(name), indent=1).encode(), 0o600)
        env = {**(os.environ if environ is None else environ), "PYTHONPATH": squall_import_path(self.root / "python")}
        self.commands[name] = command
        log_file = self.log_file(name)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "ab") as log:
            process = subprocess.Popen(
                [
                    *self.prefixes.get(name, ()),
                    *(cli or (sys.executable, "-m", "squall.cli")),
                    "--config",
                    str(conf_file),
                    command,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
                env=env,
                start_new_session=True,
            )
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
        return WorkerRecords(workers_dir(self.daemon_conf(name))).records()

    def kill_workers(self, name: str, grace_secs: float = 0.0) -> None:
        self._kill_workers([name], grace_secs)

    def _kill_workers(self, supervisors: Sequence[str], grace_secs: float) -> None:
        """Kill the workers of ``supervisors`` side by side: each may take its grace to stop."""
        found = [
            (records, record)
            for name in supervisors
            for records in [WorkerRecords(workers_dir(self.daemon_conf(name)))]
            for record in records.records()
        ]
        with ThreadPoolExecutor(max(1, len(found)), thread_name_prefix="kill-worker") as pool:
            for done in [pool.submit(records.kill, record, grace_secs) for records, record in found]:
                done.result()

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
        self._kill_workers(list(self.ports), grace_secs=5)
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
        port = port_for(self.conf, master.host, master.port, master.tls_port)
        with connect(master.host, port, timeout_ms, tls=client_context(self.conf)) as client:
            yield client

    def log_file(self, name: str) -> Path:
        """The daemon's log file (``<its storm.log.dir>/nimbus.log``), shared by daemons of a kind that share a
        log directory (a dev cluster's supervisors)."""
        return log_dir(self.daemon_conf(name)) / daemon_log_name(self.commands[name])

    def tail(self, name: str, chars: int = 3000) -> str:
        """The end of the daemon's log, as a person reads it."""
        path = self.log_file(name)
        return readable_text(path.read_text(errors="replace")[-chars:]) if path.exists() else ""

    def logs(self, chars: int = 3000) -> str:
        """The end of every daemon and worker log, as a person reads them."""
        files = {p for name in self.commands for p in log_dir(self.daemon_conf(name)).glob("*.log")}
        return "\n".join(f"== {p}\n{readable_text(p.read_text(errors='replace')[-chars:])}" for p in sorted(files))


# -- storm dev-cluster ------------------------------------------------------------------------------

PID_FILE = "dev-cluster.pid"


def dev_cluster_root(conf: Mapping[str, Any]) -> Path:
    return Path(conf["storm.local.dir"]) / "dev-cluster"


#: A dev cluster without storm.local.hostname is one host on loopback: its daemons register and listen there only.
LOOPBACK = {
    "storm.local.hostname": "127.0.0.1",
    "nimbus.thrift.bind.address": "127.0.0.1",
    "worker.transfer.bind.address": "127.0.0.1",
    "ui.host": "127.0.0.1",
    "logviewer.host": "127.0.0.1",
}


def run_dev_cluster(conf: Mapping[str, Any], supervisors: int, *, out: TextIO = sys.stdout) -> int:
    """ZooKeeper, nimbus, ``supervisors`` supervisors, the logviewer and the UI in the foreground, until Ctrl-C,
    SIGTERM (``storm dev-cluster stop``) or one of them dies; then every process it started is stopped. The
    supervisors share one host, so their workers log in one directory (``storm.log.dir``, by default
    ``<root>/logs``), which the host's one logviewer serves."""
    root = dev_cluster_root(conf)
    pid_file = root / PID_FILE
    if (other := _running_dev_cluster(pid_file)) is not None:
        print(
            f"storm dev-cluster: a dev cluster already runs from {root} (pid {other}); `storm dev-cluster stop` "
            "stops it",
            file=sys.stderr,
        )
        return 1
    slots = [int(p) for p in conf["supervisor.slots.ports"]]
    cluster = DevCluster(
        root,
        {
            **conf,
            **(LOOPBACK if not conf.get("storm.local.hostname") else {}),
            "storm.log.dir": conf.get("storm.log.dir") or str(root.absolute() / "logs"),
        },
    )
    died = threading.Event()
    write_atomically(pid_file, str(os.getpid()).encode())
    try:
        zookeeper = cluster.start_zookeeper()
        cluster.start_nimbus(wait=False)
        names = [f"supervisor-{i + 1}" for i in range(supervisors)]
        for i, name in enumerate(names):
            cluster.start_supervisor(name, [p + i * len(slots) for p in slots])
        cluster.start_logviewer(wait=False)
        cluster.start_ui(wait=False)
        cluster.wait_started()
        cluster.wait_supervisors(supervisors)

        def watch(process: subprocess.Popen[bytes]) -> None:
            process.wait()
            died.set()

        for name, process in cluster.daemons.items():
            threading.Thread(target=watch, args=(process,), name=f"watch-{name}", daemon=True).start()
        print(f"Squall dev cluster — state and logs under {root}", file=out)
        print(f"  {'zookeeper':<14} {zookeeper.connect_string:<22} pid {zookeeper.pid}", file=out)
        for name, process in cluster.daemons.items():
            where = (
                f"127.0.0.1:{cluster.nimbus_ports[name]}"
                if name in cluster.nimbus_ports
                else cluster.ui_url()
                if name == "ui"
                else cluster.logviewer_url()
                if name == "logviewer"
                else f"slots {_ranges(cluster.ports[name])}"
            )
            print(f"  {name:<14} {where:<22} pid {process.pid:<8} log {cluster.log_file(name)}", file=out)
        print(
            f"Workers log to {cluster.conf['storm.log.dir']}/ (`storm logs NAME`, or the logviewer), the daemons "
            "there too (nimbus.log, supervisor.log, ui.log, logviewer.log: JSON lines, readable in the logviewer, "
            "which the UI links). Try `storm "
            f"list`, the UI at {cluster.ui_url()}/, its REST API ({cluster.ui_url()}/api/v1/topology/summary) or "
            f"its Prometheus metrics ({cluster.ui_url()}/metrics); "
            "Ctrl-C or `storm dev-cluster stop` ends it.",
            file=out,
            flush=True,
        )
        died.wait()
        dead = [name for name, p in cluster.daemons.items() if p.poll() is not None]
        print(
            f"{', '.join(dead)} exited; stopping the dev cluster. Last log lines:\n{cluster.tail(dead[0])}",
            file=out,
            flush=True,
        )
        return 1
    except KeyboardInterrupt:
        print("stopping the dev cluster …", file=out, flush=True)
        return 0
    except (TimeoutError, RuntimeError, OSError) as exc:
        print(f"storm dev-cluster: {exc}", file=out)
        return 1
    finally:
        cluster.stop()
        pid_file.unlink(missing_ok=True)


def stop_dev_cluster(conf: Mapping[str, Any], *, timeout: float = 60, out: TextIO = sys.stdout) -> int:
    """Ask the dev cluster running from this ``storm.local.dir`` to stop, and wait until it has."""
    pid_file = dev_cluster_root(conf) / PID_FILE
    pid = _running_dev_cluster(pid_file)
    if pid is None:
        print(
            f"storm dev-cluster: no dev cluster runs from {pid_file.parent} (run stop in the directory it was "
            "started from)",
            file=sys.stderr,
        )
        return 1
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: _running_dev_cluster(pid_file) != pid, timeout, f"the dev cluster (pid {pid}) to stop")
    print("dev cluster stopped", file=out)
    return 0


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except OSError:  # refused while it starts (URLError is an OSError)
        return False


def _running_dev_cluster(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` if that process still runs and is a dev cluster (pids get reused)."""
    try:
        pid = int(pid_file.read_text())
        alive = b"dev-cluster" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if alive else None


def _ranges(ports: Sequence[int]) -> str:
    """6700,6701,6702,6710 → 6700-6702,6710."""
    runs: list[list[int]] = []
    for port in sorted(ports):
        if runs and port == runs[-1][-1] + 1:
            runs[-1].append(port)
        else:
            runs.append([port])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
