"""supervisor.run.worker.as.user's parts: principal → OS user, the supervisor's checks, a worker started as
another user (as root: the OS user ``nobody``), and the task beats such a worker hands its supervisor."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import psutil
import pytest

from squall.core.config.validation import ConfigError
from squall.core.local_state import read_task_beats, read_worker_file, write_task_beats
from squall.core.worker_records import new_worker_id
from supervisor.processes import WorkerProcesses
from supervisor.runas import NoLocalUser, check_supervisor, closed_to_others, local_user
from support import wait_until

ON = {"supervisor.run.worker.as.user": True}
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="starting a process as another user needs root")



def test_the_os_user_of_an_owner() -> None:
    entry = pwd.getpwnam("nobody")
    user = local_user("nobody")
    assert (user.name, user.uid, user.gid, user.home) == ("nobody", entry.pw_uid, entry.pw_gid, entry.pw_dir)
    assert entry.pw_gid in user.groups


@pytest.mark.parametrize(("owner", "says"), [
    ("", "submitted without TLS authentication"),
    ("no-such-user-here", "has no local user 'no-such-user-here' on this host"),
    ("nobody@EXAMPLE.COM", "has no local user 'nobody@EXAMPLE.COM'"),  # the principal is the name, whole
    ("root", "never runs workers as root"),
])
def test_owners_whose_workers_cannot_start(owner: str, says: str) -> None:
    with pytest.raises(NoLocalUser, match=says):
        local_user(owner)


def test_the_supervisor_must_be_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    check_supervisor({}, [])  # off: nothing asked
    with pytest.raises(ConfigError, match="supervisor.run.worker.as.user is true but the supervisor runs as uid 1000"):
        check_supervisor(ON, [])


def test_workers_must_reach_their_files_and_not_the_keys(monkeypatch: pytest.MonkeyPatch, open_dir: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    closed = open_dir / "closed"
    (closed / "local").mkdir(parents=True)
    closed.chmod(0o700)
    with pytest.raises(ConfigError, match=f"must enter {closed} .*mode is 0700: chmod o\\+x {closed}"):
        check_supervisor(ON, [closed / "local"])
    assert closed_to_others(closed / "local") == closed
    closed.chmod(0o711)
    check_supervisor(ON, [closed / "local"])
    assert closed_to_others(closed / "local") is None
    key = open_dir / "daemons.pem"
    key.write_text("not really a key")
    key.chmod(0o644)
    keystore = {**ON, "nimbus.thrift.tls.client.keystore.path": str(key)}
    with pytest.raises(ConfigError, match=f"nimbus.thrift.tls.client.keystore.path {key} .*chmod 600"):
        check_supervisor(keystore, [])
    key.chmod(0o600)
    check_supervisor(keystore, [])


@as_root
def test_a_worker_started_as_its_user_owns_only_its_heartbeats_and_log(open_dir: Path) -> None:
    """The process runs as the user; its heartbeat directory and log are that user's alone (it writes them), its
    record stays root's, and root still stops it by pid."""
    user = local_user("nobody")
    processes = WorkerProcesses(open_dir / "workers")
    worker_id = new_worker_id()
    log_file = open_dir / "logs" / "worker.log"
    heartbeats = open_dir / "workers" / worker_id / "heartbeats"
    script = f"id -u; echo beat > {heartbeats}/heartbeat; exec sleep 120"
    record = processes.launch(worker_id, ["/bin/sh", "-c", script, worker_id], port=6700, topology_id="t-1-1",
                              tasks=[1], log_file=log_file, cwd=Path("/"), user=user)
    try:
        assert psutil.Process(record.pid).uids().real == user.uid
        wait_until(lambda: (heartbeats / "heartbeat").exists() and log_file.read_text(), 30, "the worker's writes")
        assert log_file.read_text().split() == [str(user.uid)]
        for path, mode in ((heartbeats, 0o700), (log_file, 0o600), (heartbeats / "heartbeat", 0o600)):
            assert (path.stat().st_uid, path.stat().st_mode & 0o777) == (user.uid, mode), path
        assert (open_dir / "workers" / worker_id / "worker.json").stat().st_uid == 0
    finally:
        processes.kill(record, grace_secs=5)
    assert not psutil.pid_exists(record.pid), "root stopped it by pid"


def test_task_beats_round_trip_and_a_torn_tail_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "task-beats"
    write_task_beats(path, [b"first", b"", b"third"])
    assert read_task_beats(path) == [b"first", b"", b"third"]
    path.write_bytes(path.read_bytes()[:-2])
    assert read_task_beats(path) == [b"first", b""]



def test_a_supervisor_reads_its_workers_files_through_no_symlink_and_no_fifo(tmp_path: Path) -> None:
    """A worker running as its owner writes its heartbeat directory: a symlink there must not make root read
    another file for it, nor a FIFO hang its supervisor."""
    secret = tmp_path / "root-only"
    secret.write_text("the daemons' password")
    (tmp_path / "heartbeat").symlink_to(secret)
    with pytest.raises(OSError):
        read_worker_file(tmp_path / "heartbeat")
    os.mkfifo(tmp_path / "task-beats")
    assert read_task_beats(tmp_path / "task-beats") == []
