"""The workers' records on this host: found again after a supervisor restart, and stopped — by pid.

Each worker gets ``<root>/<worker-id>/`` holding ``worker.json`` (pid, port, topology, tasks, start
time, code version) and ``heartbeats/``, where the worker rewrites its ``heartbeat`` file (the only part a
worker running as another user may write). A pid is only ever signalled after checking
that its command line still carries the worker id, so a recycled pid is never killed by mistake.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from squall.core.local_state import HEARTBEATS, read_worker_file

#: How long a SIGKILLed worker may take to be gone (it is at once unless the host is too busy to run the kill).
KILLED_EXIT_SECS = 5.0
#: Beside a worker's record: an operator asked for it to stop (see :meth:`WorkerRecords.stop_on_request`).
STOP_REQUESTED = "stop-requested"


@dataclass(frozen=True)
class WorkerRecord:
    worker_id: str
    pid: int
    port: int
    topology_id: str
    tasks: tuple[int, ...]
    started_secs: float
    version: int = 1  # the topology code version it runs


def new_worker_id() -> str:
    return uuid.uuid4().hex


def running(pid: int) -> bool:
    """Whether ``pid`` exists and has not exited (a zombie waiting to be reaped has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _owns(pid: int, worker_id: str) -> bool:
    """Whether ``pid`` is alive and still the process we started for ``worker_id``."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return running(pid) and worker_id.encode() in cmdline


class WorkerRecords:
    """The workers recorded under ``root`` (a supervisor's ``workers/`` directory), found and stopped by pid.

    A supervisor's :class:`supervisor.processes.WorkerProcesses` starts them and adds what only their parent
    knows; ``storm kill_workers`` and the dev cluster use the records alone.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def write(self, record: WorkerRecord) -> None:
        """Remember ``record`` on disk (atomically: a crash leaves the old record or the new one)."""
        tmp = self.root / record.worker_id / "worker.json.tmp"
        tmp.write_text(json.dumps(asdict(record)))
        tmp.replace(self.root / record.worker_id / "worker.json")

    def records(self) -> list[WorkerRecord]:
        """Every worker this supervisor (in this or an earlier life) started and has not cleaned up."""
        found = []
        for meta in sorted(self.root.glob("*/worker.json")):
            try:
                data = json.loads(meta.read_text())
                found.append(WorkerRecord(**{**data, "tasks": tuple(data["tasks"])}))
            except FileNotFoundError:
                continue  # removed meanwhile: a worker just killed
            except (ValueError, TypeError, KeyError):
                shutil.rmtree(meta.parent, ignore_errors=True)  # half-written by a crash: nothing to adopt
        return found

    def alive(self, record: WorkerRecord) -> bool:
        return _owns(record.pid, record.worker_id)

    def heartbeat_path(self, worker_id: str) -> Path:
        return self.root / worker_id / HEARTBEATS / "heartbeat"

    def last_beat(self, worker_id: str) -> float | None:
        """Epoch seconds of the worker's last local heartbeat, None before the first one."""
        try:
            return float(json.loads(read_worker_file(self.heartbeat_path(worker_id)))["time_secs"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def stop_on_request(self, record: WorkerRecord, grace_secs: float) -> None:
        """Stop a worker for an operator (``storm kill_workers``), marked first; its record and mark stay for its
        supervisor, which relaunches it as a restart rather than a failure. (Removing them here raced the
        supervisor: it read the record, saw the process dead, then found no mark, and reported a failure.)"""
        try:
            (self.root / record.worker_id / STOP_REQUESTED).touch()
        except FileNotFoundError:
            return  # its supervisor removed it meanwhile
        self.terminate(record, grace_secs)

    def stop_requested(self, worker_id: str) -> bool:
        return (self.root / worker_id / STOP_REQUESTED).exists()

    def kill(self, record: WorkerRecord, grace_secs: float) -> None:
        """:meth:`terminate` the worker, then forget it."""
        self.terminate(record, grace_secs)
        self.forget(record.worker_id)

    def forget(self, worker_id: str) -> None:
        """Remove the worker's record and directory."""
        shutil.rmtree(self.root / worker_id, ignore_errors=True)

    def terminate(self, record: WorkerRecord, grace_secs: float) -> None:
        """SIGTERM the worker's process group, SIGKILL after ``grace_secs`` (and wait, up to
        :data:`KILLED_EXIT_SECS`, for the kill to land: a busy host may not run it at once)."""
        if self.alive(record):
            self._signal(record, signal.SIGTERM)
            self._wait_gone(record, grace_secs)
            if self.alive(record):
                self._signal(record, signal.SIGKILL)
                self._wait_gone(record, KILLED_EXIT_SECS)

    def _wait_gone(self, record: WorkerRecord, secs: float) -> None:
        deadline = time.monotonic() + secs
        while self.alive(record) and time.monotonic() < deadline:
            time.sleep(0.05)  # waiting on another process's exit; there is no event to wait on

    @staticmethod
    def _signal(record: WorkerRecord, sig: signal.Signals) -> None:
        try:
            os.killpg(record.pid, sig)  # the worker leads its own group: helpers it spawned go too
        except ProcessLookupError:
            pass
        except PermissionError:
            os.kill(record.pid, sig)
