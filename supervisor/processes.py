"""Worker processes a supervisor starts: each in its own process group, recorded on disk
(:mod:`squall.core.worker_records`) so a restarted supervisor finds it again, and watched so a crash is acted
on at once."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from squall.core.local_state import HEARTBEATS
from squall.core.worker_records import WorkerRecord, WorkerRecords
from supervisor.runas import WorkerUser, hand_over


class WorkerProcesses(WorkerRecords):
    """The workers of one supervisor: the records, plus the process handles of the ones this process started."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def launch(
        self,
        worker_id: str,
        argv: Sequence[str],
        *,
        port: int,
        topology_id: str,
        tasks: Sequence[int],
        log_file: Path,
        version: int = 1,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        on_exit: Callable[[], None] | None = None,
        user: WorkerUser | None = None,
    ) -> WorkerRecord:
        """Start ``argv`` (which must contain ``worker_id``) in its own process group; remember it on disk.

        ``on_exit`` runs (on a watcher thread) when the process ends, so a crash is acted on at once. With a
        ``user`` (the caller is root), the process runs as that user with umask 077, and its heartbeat
        directory and log file are that user's alone; its record stays root's.
        """
        if worker_id not in argv:
            raise ValueError("the worker command line must carry the worker id, so its pid can be verified later")
        directory = self.root / worker_id
        (directory / HEARTBEATS).mkdir(parents=True, exist_ok=True)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        as_user: dict[str, object] = {}
        if user is not None:
            hand_over(directory / HEARTBEATS, user)
            log_file.touch()
            hand_over(log_file, user)
            as_user = {"user": user.uid, "group": user.gid, "extra_groups": list(user.groups), "umask": 0o077}
        with open(log_file, "ab") as log:
            child = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
                cwd=cwd,
                **as_user,
            )  # type: ignore[call-overload]
        self._children[worker_id] = child
        if on_exit is not None:
            threading.Thread(
                target=lambda: (child.wait(), on_exit()), name=f"watch-{worker_id[:8]}", daemon=True
            ).start()
        record = WorkerRecord(worker_id, child.pid, port, topology_id, tuple(tasks), time.time(), version)
        self.write(record)
        return record

    def alive(self, record: WorkerRecord) -> bool:
        child = self._children.get(record.worker_id)
        if child is not None:  # our own child: its handle is authoritative (and reaps it)
            return child.poll() is None
        return super().alive(record)

    def forget(self, worker_id: str) -> None:
        child = self._children.pop(worker_id, None)
        if child is not None:
            child.wait()
        super().forget(worker_id)
