"""Worker processes for real: started in their own group, found again after a restart, stopped by pid."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from squall.core.worker_records import WorkerRecord, new_worker_id
from supervisor.processes import WorkerProcesses
from support import wait_until

SLEEPER = "import sys, time; time.sleep(120)"
STUBBORN = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(120)"


def start(processes: WorkerProcesses, tmp_path: Path, code: str = SLEEPER) -> WorkerRecord:
    worker_id = new_worker_id()
    return processes.launch(worker_id, [sys.executable, "-c", code, worker_id], port=6700,
                            topology_id="wc-1-1700000000", tasks=[1, 2], log_file=tmp_path / "logs" / f"{worker_id}.log")


@pytest.fixture
def processes(tmp_path: Path):
    p = WorkerProcesses(tmp_path / "workers")
    yield p
    for record in p.records():
        p.kill(record, grace_secs=0)


def test_launch_records_and_kill(processes: WorkerProcesses, tmp_path: Path) -> None:
    record = start(processes, tmp_path)
    assert processes.alive(record)
    assert processes.records() == [record]
    assert os.getpgid(record.pid) == record.pid, "own process group"
    processes.kill(record, grace_secs=5)
    assert not processes.alive(record) and processes.records() == []


def test_a_restarted_supervisor_finds_and_stops_its_old_workers(processes: WorkerProcesses, tmp_path: Path) -> None:
    record = start(processes, tmp_path)
    after_restart = WorkerProcesses(tmp_path / "workers")  # no memory but the files
    (found,) = after_restart.records()
    assert found == record
    wait_until(lambda: after_restart.alive(found), what="the worker recognised by pid and command line")
    after_restart.kill(found, grace_secs=5)
    wait_until(lambda: not processes.alive(record), what="the old worker to be gone")


def test_sigterm_ignored_means_sigkill_after_the_grace(processes: WorkerProcesses, tmp_path: Path) -> None:
    record = start(processes, tmp_path, STUBBORN)
    log = tmp_path / "logs" / f"{record.worker_id}.log"
    wait_until(lambda: log.exists() and "ready" in log.read_text(), what="the worker to ignore SIGTERM")
    began = time.monotonic()
    processes.kill(record, grace_secs=0.5)
    assert not processes.alive(record)
    assert time.monotonic() - began >= 0.5


def test_a_recycled_pid_is_never_taken_for_a_worker(processes: WorkerProcesses) -> None:
    stranger = WorkerRecord("not-a-worker-of-ours", os.getpid(), 6700, "t-1-1", (1,), 0)
    assert not processes.alive(stranger)
    processes.kill(stranger, grace_secs=0)  # must not signal the test process
    assert os.getpid()


def test_heartbeat_file_is_read_back(processes: WorkerProcesses, tmp_path: Path) -> None:
    record = start(processes, tmp_path)
    assert processes.last_beat(record.worker_id) is None
    processes.heartbeat_path(record.worker_id).write_text(json.dumps({"time_secs": 1_700_000_123}))
    assert processes.last_beat(record.worker_id) == 1_700_000_123


def test_command_line_must_carry_the_worker_id(processes: WorkerProcesses, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must carry the worker id"):
        processes.launch("abc", [sys.executable, "-c", SLEEPER], port=1, topology_id="t-1-1", tasks=[],
                         log_file=tmp_path / "x.log")


def test_an_operators_stop_leaves_the_record_marked_for_its_supervisor(processes: WorkerProcesses,
                                                                       tmp_path: Path) -> None:
    """``storm kill_workers`` stops the worker but leaves its record, marked: the supervisor, which may read the
    record, see the process dead and only then look for the mark, must find it and relaunch without a failure."""
    record = start(processes, tmp_path)
    operator = WorkerProcesses(tmp_path / "workers")  # the CLI's own view of the same directory
    wait_until(lambda: operator.alive(record), what="the worker recognised by pid and command line")
    operator.stop_on_request(record, grace_secs=5)
    wait_until(lambda: not processes.alive(record), what="the worker gone (it may still be exiting when its command "
                                                         "line is)")
    assert processes.records() == [record] and processes.stop_requested(record.worker_id), "record and mark kept"
