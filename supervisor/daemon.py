"""The supervisor daemon: registers this host's slots and converges its worker processes on nimbus's
assignments, on every assignment change and every ``supervisor.monitor.frequency.secs``.

The decisions are :func:`supervisor.sync.plan`'s; this module gathers its inputs (``/assignments``,
the worker records and local heartbeats, the code on disk) and carries out the actions it returns,
one sync at a time on one thread. Workers outlive the supervisor: a restarted supervisor (same id,
kept in its local dir) adopts the workers it finds from its previous life, or kills them if they are
no longer assigned, so nothing is orphaned and a supervisor restart costs no processing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from squall import __version__
from squall.core.config.keys import without_secrets
from squall.core.environment import user_code_environment
from squall.core.local_state import (
    CODE_FILES,
    code_dir,
    log_dir,
    read_task_beats,
    stormdist_dir,
    task_beats_file,
    worker_log_name,
    workers_dir,
    write_atomically,
    write_log_acl,
)
from squall.core.nimbus_client import nimbus_client
from squall.core.thrift import from_bytes, storm
from squall.core.worker_records import WorkerRecord, new_worker_id
from squall.core.zk import paths
from squall.core.zk.client import Watch, ZkClient
from squall.core.zk.errors import record_task_error
from squall.core.zk.records import Assignment, GrayUpgradeConf, StormBase, SupervisorInfo, TaskError, WorkerMark
from supervisor.code import CodeKey, DownloadFailed, code_on_disk, download_code, remove_code
from supervisor.environments import EnvState
from supervisor.processes import WorkerProcesses
from supervisor.runas import (
    KEY as RUN_AS_USER,
    NoLocalUser,
    WorkerUser,
    check_supervisor,
    hand_over,
    interpreter,
    local_user,
    private_to_root,
)
from supervisor.sync import (
    Action,
    Backoff,
    ConfirmSwitch,
    Download,
    Kill,
    Launch,
    LocalWorker,
    RemoveCode,
    ReportError,
    UpgradePorts,
    WorkerSpec,
    desired_workers,
    plan,
)
from supervisor.venvs import Environment, PythonEnvironments, base_interpreter, environments_dir

log = structlog.get_logger(__name__)


def supervisor_id(local: Path) -> str:
    """This host's supervisor id: made once, kept in ``<local>/supervisor/supervisor_id``."""
    path = local / "supervisor_id"
    try:
        text = path.read_text().strip()
        if text:
            return text
    except FileNotFoundError:
        pass
    new = str(uuid.uuid4())
    write_atomically(path, new.encode())
    return new


class Supervisor:
    def __init__(self, conf: Mapping[str, Any], *, host: str | None = None) -> None:
        self.conf = dict(conf)
        base = base_interpreter(conf)
        check_supervisor(conf, [Path(conf["storm.local.dir"]), log_dir(conf), *interpreter(base)])
        self.run_as_user = bool(conf[RUN_AS_USER])
        self.host = host or conf.get("storm.local.hostname") or socket.getfqdn()
        self.local = Path(conf["storm.local.dir"]) / "supervisor"
        self.local.mkdir(parents=True, exist_ok=True)
        self.supervisor_id = supervisor_id(self.local)
        self.ports = [int(p) for p in conf["supervisor.slots.ports"]]
        self.log_dir = log_dir(conf)
        self.zk = ZkClient(conf)
        self.processes = WorkerProcesses(workers_dir(conf))
        self._backoff: dict[int, Backoff] = {}
        self._used_ports: list[int] = []
        self._started = time.time()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._topology_watches: dict[str, list[Watch]] = {}
        self._watch: Watch | None = None
        self._worker_conf = self.local / "worker-conf.json"
        self._refused: set[str] = set()  # topologies whose owner has no user here, reported once
        self._beats_sent: dict[str, int] = {}  # worker id → mtime (ns) of the task beats last sent for it
        if self.run_as_user:
            private_to_root(self.local, stormdist_dir(conf), workers_dir(conf), self.log_dir, environments_dir(conf))
        self.environments = PythonEnvironments(
            conf, base, on_change=self.request_sync, environ=self._worker_environment
        )
        self._environments_in_use: set[str] = set()  # environment keys the code versions of this sync need
        self._environment_failures: set[tuple[int, str, float]] = set()  # (port, key, since) reported

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> Supervisor:
        self.zk.start()
        self._write_worker_conf()
        for stale in stormdist_dir(self.conf).glob(".*"):  # downloads cut short by a crash
            shutil.rmtree(stale, ignore_errors=True)
        self._register()
        self._watch = self.zk.watch_children(paths.ASSIGNMENTS, self._on_topologies)
        self._thread = threading.Thread(target=self._loop, name="supervisor-sync", daemon=True)
        self._thread.start()
        log.info("supervisor started", supervisor_id=self.supervisor_id, host=self.host, ports=self.ports)
        return self

    def stop(self, *, kill_workers: bool = False) -> None:
        """Stop syncing and leave ZooKeeper; workers keep running for the next life unless ``kill_workers``."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.environments.stop()
        for watch in [self._watch, *(w for ws in self._topology_watches.values() for w in ws)]:
            if watch is not None:
                watch.cancel()
        if kill_workers:
            grace = float(self.conf["supervisor.worker.shutdown.sleep.secs"])
            for record in self.processes.records():
                self.processes.kill(record, grace)
        self.zk.stop()

    def request_sync(self) -> None:
        self._wake.set()

    # -- ZooKeeper side ---------------------------------------------------------------------------

    def _on_topologies(self, topology_ids: list[str]) -> None:
        """Per topology, watch its assignment and its gray upgrade's batch, so both wake the sync at once."""
        for gone in set(self._topology_watches) - set(topology_ids):
            for watch in self._topology_watches.pop(gone):
                watch.cancel()
        for new in set(topology_ids) - set(self._topology_watches):
            self._topology_watches[new] = [
                self.zk.watch_data(paths.assignment(new), Assignment, lambda _a: self.request_sync()),
                self.zk.watch_children(paths.upgrading_workers(new), lambda _c: self.request_sync()),
            ]
        self.request_sync()

    def _register(self) -> None:
        now = time.time()
        self.zk.register_ephemeral(
            paths.supervisor(self.supervisor_id),
            SupervisorInfo(
                supervisor_id=self.supervisor_id,
                host=self.host,
                ports=self.ports,
                used_ports=self._used_ports,
                time_secs=int(now),
                uptime_secs=int(now - self._started),
                version=__version__,
                failing_ports=sorted(self._backoff),
            ),
        )

    def _assignments(self) -> dict[str, Assignment]:
        found = {}
        for topology_id in self.zk.children(paths.ASSIGNMENTS):
            assignment = self.zk.read(paths.assignment(topology_id), Assignment)
            if assignment is not None:
                found[topology_id] = assignment
        return found

    def _upgrades(self, assignments: Mapping[str, Assignment]) -> dict[str, UpgradePorts]:
        """Gray upgrades in progress, reduced to this supervisor's ports (marks are ``host:port``)."""
        found = {}
        mine = {f"{self.host}:{port}": port for port in self.ports}
        for topology_id in assignments:
            conf = self.zk.read(paths.gray_upgrade_conf(topology_id), GrayUpgradeConf)
            if conf is None or conf.complete_ms:
                continue
            found[topology_id] = UpgradePorts(
                conf.version,
                conf.rollback,
                frozenset(mine[hp] for hp in self.zk.children(paths.upgrading_workers(topology_id)) if hp in mine),
                frozenset(mine[hp] for hp in self.zk.children(paths.upgraded_workers(topology_id)) if hp in mine),
            )
        return found

    # -- the sync loop ----------------------------------------------------------------------------

    def _loop(self) -> None:
        monitor = float(self.conf["supervisor.monitor.frequency.secs"])
        beat_every = float(self.conf["supervisor.heartbeat.frequency.secs"])
        next_beat = time.monotonic() + beat_every
        while not self._stopping.is_set():
            try:
                self.sync()
            except Exception:
                log.exception("supervisor sync failed; retrying on the next change or tick")
            if self.run_as_user:
                self._relay_task_beats()
            now = time.monotonic()
            if now >= next_beat:
                next_beat = now + beat_every
                try:
                    self._register()
                except Exception:
                    log.exception("could not refresh the supervisor registration")
            self._wake.wait(max(0.0, min(monitor, next_beat - time.monotonic())))
            self._wake.clear()

    def sync(self) -> None:
        """One convergence round: gather, plan, act."""
        assignments = self._assignments()
        records = self._records_by_port()
        upgrades = self._upgrades(assignments)
        code = code_on_disk(self.conf)
        self._environments_in_use = set()
        unprepared = self._unprepared(desired_workers(self.supervisor_id, assignments, upgrades), records, code)
        now = time.time()
        workers = {
            port: LocalWorker(
                WorkerSpec(r.topology_id, r.tasks, r.version),
                r.worker_id,
                self.processes.alive(r),
                r.started_secs,
                self.processes.last_beat(r.worker_id),
                self.processes.stop_requested(r.worker_id),
            )
            for port, r in records.items()
        }
        result = plan(
            self.supervisor_id,
            assignments,
            workers,
            code,
            self._backoff,
            now,
            start_timeout_secs=float(self.conf["supervisor.worker.start.timeout.secs"]),
            worker_timeout_secs=float(self.conf["supervisor.worker.timeout.secs"]),
            upgrades=upgrades,
            unprepared=unprepared,
        )
        failing_before, self._backoff = sorted(self._backoff), dict(result.backoff)
        failed: set[CodeKey] = set()
        for action in result.actions:
            if self._stopping.is_set():
                return
            self._act(action, assignments, records, failed)
        self.environments.collect(self._environments_in_use)
        used = sorted(r.port for r in self.processes.records())
        if used != self._used_ports or sorted(self._backoff) != failing_before:
            self._used_ports = used
            self._register()  # at once, not at the next heartbeat: `storm list` shows failing workers from it

    def _act(
        self,
        action: Action,
        assignments: Mapping[str, Assignment],
        records: Mapping[int, WorkerRecord],
        failed: set[CodeKey],
    ) -> None:
        if isinstance(action, Download):
            try:
                download_code(
                    self.conf,
                    action.topology_id,
                    action.version,
                    self.zk,
                    stamp=assignments[action.topology_id].timestamp_ms,
                )
                log.info("code downloaded", topology_id=action.topology_id, version=action.version)
                self._hand_code_over(action.topology_id, action.version)
            except DownloadFailed as exc:
                failed.add((action.topology_id, action.version))
                log.warning("code download failed; retrying on the next sync", error=str(exc))
        elif isinstance(action, Launch):
            if action.spec.code not in failed:
                self._launch(action.port, action.spec)
        elif isinstance(action, Kill):
            log.info("killing worker", port=action.port, worker_id=action.worker_id, reason=action.reason)
            self.processes.kill(records[action.port], float(self.conf["supervisor.worker.shutdown.sleep.secs"]))
        elif isinstance(action, ReportError):
            self._report(action)
        elif isinstance(action, RemoveCode):
            log.info("removing code no longer used here", topology_id=action.topology_id, version=action.version)
            remove_code(self.conf, action.topology_id, action.version)
        elif isinstance(action, ConfirmSwitch):
            self._confirm_switch(action)

    def _unprepared(
        self, wanted: Mapping[int, WorkerSpec], records: Mapping[int, WorkerRecord], code: Mapping[CodeKey, int]
    ) -> frozenset[CodeKey]:
        """The code versions wanted here whose code or Python environment is not ready yet (their builds started):
        a gray upgrade switches no worker to one of them until it is. A failed build is reported, once per port
        and failure, to the tasks of each port that wants it. The running workers' environments are asked for
        too, so that :meth:`PythonEnvironments.collect` keeps them."""
        keys = {spec.code for spec in wanted.values()} | {(r.topology_id, r.version) for r in records.values()}
        environments = {key: self._environment(key) if key in code else None for key in keys}
        for port, spec in sorted(wanted.items()):
            environment = environments[spec.code]
            if (
                environment is not None
                and environment.state is EnvState.FAILED
                and (port, environment.key, environment.since) not in self._environment_failures
            ):
                self._environment_failures.add((port, environment.key, environment.since))
                self._report(
                    ReportError(
                        spec.topology_id,
                        spec.tasks,
                        (
                            f"worker on port {port} not started on code version {spec.version}: "
                            f"the Python environment of {spec.topology_id} code version {spec.version} "
                            f"failed to build: {environment.error}"
                        ),
                    )
                )
        return frozenset(
            key
            for key, environment in environments.items()
            if environment is None or environment.state is not EnvState.READY
        )

    def _environment(self, key: CodeKey) -> Environment | None:
        """The Python environment of a code version on disk — the one place that says what its workers run on
        (None when its owner has no user here, which :meth:`_launch` reports)."""
        try:
            user = self._worker_user(key[0])
        except NoLocalUser:
            return None
        environment = self.environments.for_code(code_dir(self.conf, *key), user)
        if environment.key:
            self._environments_in_use.add(environment.key)
        return environment

    def _records_by_port(self) -> dict[int, WorkerRecord]:
        """One record per port; an extra one (a crash between launch and kill) is killed at once."""
        by_port: dict[int, WorkerRecord] = {}
        grace = float(self.conf["supervisor.worker.shutdown.sleep.secs"])
        for record in sorted(self.processes.records(), key=lambda r: r.started_secs):
            older = by_port.get(record.port)
            if older is not None:
                log.warning("two workers on one port; killing the older", port=record.port, worker_id=older.worker_id)
                self.processes.kill(older, grace)
            by_port[record.port] = record
        return by_port

    def _worker_user(self, topology_id: str) -> WorkerUser | None:
        """With ``supervisor.run.worker.as.user``, the OS user the topology's workers run as; :class:`NoLocalUser`
        when it has none here."""
        if not self.run_as_user:
            return None
        base = self.zk.read(paths.topology(topology_id), StormBase)
        return local_user(base.owner if base is not None else "")

    def _hand_code_over(self, topology_id: str, version: int) -> None:
        """With ``supervisor.run.worker.as.user``, the topology's code directory becomes its owner's alone
        (0700): its workers read it, nobody else. At download too, so running workers read an updated conf."""
        try:
            user = self._worker_user(topology_id)
        except NoLocalUser:
            return  # stays root's; its launch reports why
        if user is not None:
            hand_over(code_dir(self.conf, topology_id, version).parent, user)

    def _launch(self, port: int, spec: WorkerSpec) -> None:
        try:
            user = self._worker_user(spec.topology_id)
        except NoLocalUser as exc:
            if spec.topology_id not in self._refused:
                self._refused.add(spec.topology_id)
                self._report(
                    ReportError(
                        spec.topology_id, spec.tasks, f"worker on port {port} not started: {spec.topology_id}: {exc}"
                    )
                )
            return
        self._refused.discard(spec.topology_id)
        environment = self._environment(spec.code)
        if environment is None or environment.state is not EnvState.READY:
            return  # building: a sync follows its end; failed: reported (see _unprepared), retried later
        self._write_log_acl(spec)
        self._hand_code_over(spec.topology_id, spec.version)
        worker_id = new_worker_id()
        env = self._worker_environment(user)
        env.update(environment.variables(env))
        argv = [
            environment.python,
            "-m",
            "worker",
            "--config",
            str(self._worker_conf),
            "--code-version",
            str(spec.version),
            spec.topology_id,
            self.supervisor_id,
            str(port),
            worker_id,
        ]
        record = self.processes.launch(
            worker_id,
            argv,
            port=port,
            topology_id=spec.topology_id,
            tasks=spec.tasks,
            version=spec.version,
            log_file=self.log_dir / worker_log_name(spec.topology_id, port),
            cwd=code_dir(self.conf, spec.topology_id, spec.version),
            on_exit=self.request_sync,
            env=env,
            user=user,
        )
        log.info(
            "worker launched",
            topology_id=spec.topology_id,
            port=port,
            worker_id=worker_id,
            pid=record.pid,
            version=spec.version,
            user=user.name if user else None,
        )

    def _write_log_acl(self, spec: WorkerSpec) -> None:
        """Tell this host's logviewer who may read the worker's log: the topology's owner and its conf's
        topology.users/groups, logs.users/groups."""
        base = self.zk.read(paths.topology(spec.topology_id), StormBase)
        conf_file = code_dir(self.conf, spec.topology_id, spec.version) / CODE_FILES["conf"]
        try:
            topology_conf = json.loads(conf_file.read_text())
        except (OSError, ValueError):
            topology_conf = {}  # its log stays readable by admins only
        write_log_acl(self.conf, spec.topology_id, base.owner if base is not None else "", topology_conf)

    def _worker_environment(self, user: WorkerUser | None) -> dict[str, str]:
        env = user_code_environment(os.environ, self.conf["supervisor.worker.env.allow"])
        if user is not None:
            env.update(HOME=user.home, USER=user.name, LOGNAME=user.name)
        return env

    def _relay_task_beats(self) -> None:
        """Send the task beats workers running as their owners left (:func:`task_beats_file`) to nimbus with this
        daemon's credential — each only for its worker's own topology — once per new file."""
        fresh: list[Any] = []
        sent, self._beats_sent = self._beats_sent, {}
        for record in self.processes.records():
            path = task_beats_file(self.conf, record.worker_id)
            try:
                stamp = path.stat().st_mtime_ns
                if sent.get(record.worker_id) == stamp:
                    self._beats_sent[record.worker_id] = stamp
                    continue
                requests = [from_bytes(storm.TopologyTaskHbInfo, blob) for blob in read_task_beats(path)]
            except FileNotFoundError:
                continue
            except Exception:
                log.warning("unreadable task beats; ignored", worker_id=record.worker_id, exc_info=True)
                continue
            self._beats_sent[record.worker_id] = stamp
            fresh += [r for r in requests if r.topologyId == record.topology_id]
        if not fresh:
            return
        try:
            with nimbus_client(self.conf, self.zk, timeout_ms=10_000) as nimbus:
                for request in fresh:
                    nimbus.updateTaskHeartbeat(request)
        except Exception as exc:
            log.warning("could not send task beats to nimbus; sending the next ones", error=repr(exc))

    def _confirm_switch(self, action: ConfirmSwitch) -> None:
        """Upgraded first, then no longer upgrading: a crash in between is redone on the next sync."""
        host_port = f"{self.host}:{action.port}"
        if not action.rollback:
            self.zk.write(paths.upgraded_worker(action.topology_id, host_port), WorkerMark(int(time.time())))
        self.zk.delete(paths.upgrading_worker(action.topology_id, host_port))
        log.info(
            "worker rolled back" if action.rollback else "worker upgraded",
            topology_id=action.topology_id,
            worker=host_port,
        )

    def _report(self, action: ReportError) -> None:
        log.warning("worker problem", topology_id=action.topology_id, message=action.message)
        error = TaskError(action.message, int(time.time()), host=self.host)
        for task in action.tasks:
            try:
                record_task_error(self.zk, action.topology_id, task, error)
            except Exception:
                log.exception("could not store a worker problem in ZooKeeper", task=task)

    def _write_worker_conf(self) -> None:
        """The workers' config: this daemon's without its secrets (a worker's ZooKeeper credential is its
        topology's own), as JSON (YAML reads it), readable by this user only — or, when workers run as their
        topologies' owners, by everyone: it holds no secret."""
        data = json.dumps(without_secrets(self.conf), sort_keys=True, default=str).encode()
        write_atomically(self._worker_conf, data, 0o644 if self.run_as_user else 0o600)
