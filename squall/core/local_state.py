"""Files under ``storm.local.dir`` that two processes must agree on: the code a supervisor downloads
for its workers, the local heartbeat each worker writes for its supervisor, and where each worker logs
(which the host's logviewer serves, and the UI and ``storm logs`` find by topology id and port)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from squall.core.package import RESOURCES

#: Artifacts of a topology in its code directory, as ``beginCodeDownload`` names them → file name.
CODE_FILES = {"code": "code.pkg", "conf": "conf.json", "topology": "topology.bin"}
#: Beside the artifacts: the timestamp of the assignment the code was fetched for.
STAMP_FILE = "assignment_ms"


def stormdist_dir(conf: Mapping[str, Any]) -> Path:
    """``<local>/supervisor/stormdist``: the code of every topology on this host."""
    return Path(conf["storm.local.dir"]) / "supervisor" / "stormdist"


def code_dir(conf: Mapping[str, Any], topology_id: str, version: int) -> Path:
    """``<stormdist>/<topology-id>/<version>``: code, conf and topology of one code version of a topology.

    Versions sit side by side so a gray upgrade can run old and new workers on one host.
    """
    return stormdist_dir(conf) / topology_id / str(version)


def put_code_on_path(directory: Path) -> None:
    """Put a code directory's package first on ``sys.path``, so its modules import by their own names.

    How a worker finds its topology's code (its cwd is the code directory; the package is zipimported),
    and how ``storm jar`` checks a package before uploading it (:mod:`squall.cli.submitcheck`): one rule for
    both, so the check cannot pass where a worker would fail.

        put_code_on_path(code_dir(conf, topology_id, version))
        importlib.import_module("wordcount")   # from code.pkg
    """
    package = directory / CODE_FILES["code"]
    if package.exists():
        sys.path.insert(0, str(package))


def resources_dir(directory: Path) -> Path:
    """Where a code directory's shell components run: its package's ``resources/``, unpacked beside the
    package on first use (Storm's extracted jar resources), or the code directory itself when the package
    has none. Workers of one code version share it; it appears whole or not at all (unpacked into a
    staging directory, renamed into place), and files keep the permission bits they were packed with::

        subprocess.Popen(["node", "splitsentence.js"], cwd=resources_dir(code_dir(conf, topology_id, 1)))
    """
    target = directory / RESOURCES
    package = directory / CODE_FILES["code"]
    if target.is_dir() or not package.exists():
        return target if target.is_dir() else directory
    with zipfile.ZipFile(package) as archive:
        members = [m for m in archive.infolist() if m.filename.startswith(RESOURCES + "/")]
        if not members:
            return directory
        staging = Path(tempfile.mkdtemp(prefix=".resources-", dir=directory))
        try:
            for member in members:
                path = Path(archive.extract(member, staging))
                mode = member.external_attr >> 16 & 0o777
                if mode and path.is_file():
                    path.chmod(mode)
            try:
                (staging / RESOURCES).rename(target)
            except OSError:
                if not target.is_dir():  # not another worker's copy winning the race
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def fetched_for(directory: Path) -> int:
    """The assignment timestamp a code directory was fetched for; 0 when unknown or absent."""
    try:
        return int((directory / STAMP_FILE).read_text())
    except (OSError, ValueError):
        return 0


def workers_dir(conf: Mapping[str, Any]) -> Path:
    """``<local>/workers``: one directory per worker id (its record and heartbeat)."""
    return Path(conf["storm.local.dir"]) / "workers"


def log_dir(conf: Mapping[str, Any]) -> Path:
    """``storm.log.dir``, else ``<local>/logs``: where a supervisor's workers log, what its host's logviewer serves."""
    return Path(conf.get("storm.log.dir") or Path(conf["storm.local.dir"]) / "logs")


def worker_log_name(topology_id: str, port: int) -> str:
    """A worker's log file in :func:`log_dir` (one per slot: a restarted worker appends to it).

    >>> worker_log_name("wc-1-1700000000", 6700)
    'wc-1-1700000000-worker-6700.log'
    """
    return f"{topology_id}-worker-{port}.log"


_WORKER_LOG = re.compile(r"(?P<topology>.+)-worker-(?P<port>\d+)\.log")


def worker_of_log(name: str) -> tuple[str, int] | None:
    """The (topology id, port) whose log :func:`worker_log_name` named ``name``; None for another file.

    >>> worker_of_log("wc-1-1700000000-worker-6700.log"), worker_of_log("nimbus.log")
    (('wc-1-1700000000', 6700), None)
    """
    found = _WORKER_LOG.fullmatch(name)
    return (found["topology"], int(found["port"])) if found else None


#: The daemons that log to a file of their own in :func:`log_dir` (Storm's ``logfile.name``: ``nimbus.log``).
DAEMONS = ("nimbus", "supervisor", "ui", "logviewer")

_DAEMON_LOG = re.compile(rf"(?:{'|'.join(DAEMONS)})\.log(?:\.[1-9][0-9]*)?")


def daemon_log_name(daemon: str) -> str:
    """A daemon's log file in :func:`log_dir`; rolled, it is ``nimbus.log.1`` and so on.

    >>> daemon_log_name("nimbus")
    'nimbus.log'
    """
    if daemon not in DAEMONS:
        raise ValueError(f"{daemon!r} is no daemon with a log file; they are {', '.join(DAEMONS)}")
    return f"{daemon}.log"


def is_daemon_log(name: str) -> bool:
    """Whether ``name`` (relative to :func:`log_dir`) is a daemon's log, or one of its rolled files.

    >>> is_daemon_log("nimbus.log"), is_daemon_log("supervisor.log.3"), is_daemon_log("sub/nimbus.log")
    (True, True, False)
    """
    return _DAEMON_LOG.fullmatch(name) is not None


#: What a topology's conf says about who may read its worker logs (with its owner, :func:`log_acl_file`).
LOG_ACL_KEYS = ("topology.users", "topology.groups", "logs.users", "logs.groups")


def log_acl_file(conf: Mapping[str, Any], topology_id: str) -> Path:
    """``<local>/logs-acl/<topology id>.json``: who may read the topology's worker logs on this host's logviewer
    — its owner and the conf's :data:`LOG_ACL_KEYS` — written by the supervisor as it launches a worker (Storm's
    worker.yaml in workers-artifacts)."""
    return Path(conf["storm.local.dir"]) / "logs-acl" / f"{topology_id}.json"


def write_log_acl(conf: Mapping[str, Any], topology_id: str, owner: str, topology_conf: Mapping[str, Any]) -> None:
    acl = {"owner": owner, **{key: list(topology_conf.get(key) or ()) for key in LOG_ACL_KEYS}}
    write_atomically(log_acl_file(conf, topology_id), json.dumps(acl, sort_keys=True).encode(), 0o644)


def read_log_acl(conf: Mapping[str, Any], topology_id: str) -> tuple[str, dict[str, Any]]:
    """The owner and ACL conf :func:`write_log_acl` wrote; ("", {}) when none was (only admins may read)."""
    try:
        acl = json.loads(log_acl_file(conf, topology_id).read_text())
    except (OSError, ValueError):
        return "", {}
    return str(acl.get("owner") or ""), {key: acl.get(key) or [] for key in LOG_ACL_KEYS}


#: In a worker's directory under :func:`workers_dir`: what the worker itself writes (its user's, when
#: ``supervisor.run.worker.as.user`` runs it as its topology's owner).
HEARTBEATS = "heartbeats"


def heartbeat_file(conf: Mapping[str, Any], worker_id: str) -> Path:
    return workers_dir(conf) / worker_id / HEARTBEATS / "heartbeat"


def task_beats_file(conf: Mapping[str, Any], worker_id: str) -> Path:
    """Beside the heartbeat, with ``supervisor.run.worker.as.user``: the topology master's task beats, which
    its supervisor sends on to nimbus (Storm 2's workers beat to their supervisor too): a worker running
    as its owner holds no credential nimbus would take heartbeats from."""
    return workers_dir(conf) / worker_id / HEARTBEATS / "task-beats"


def write_task_beats(path: Path, requests: Sequence[bytes]) -> None:
    """Serialized ``updateTaskHeartbeat`` requests, each after its length (4 bytes, big-endian)."""
    write_atomically(path, b"".join(len(r).to_bytes(4, "big") + r for r in requests))


def read_task_beats(path: Path) -> list[bytes]:
    """What :func:`write_task_beats` wrote; a truncated tail is dropped."""
    data, found, at = read_worker_file(path), [], 0
    while at + 4 <= len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        if at + 4 + size > len(data):
            break
        found.append(data[at + 4 : at + 4 + size])
        at += 4 + size
    return found


def write_atomically(path: Path, data: bytes, mode: int | None = None) -> None:
    """Readers see the old content or the new, never half of it; with ``mode`` (0o600 for a file holding a
    secret), the file has exactly that mode from its first byte on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if mode is None:
        tmp.write_bytes(data)
    else:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
    tmp.replace(path)


#: The most a supervisor reads of a file its worker wrote.
WORKER_FILE_MAX_BYTES = 16 << 20


def read_worker_file(path: Path) -> bytes:
    """A file a worker wrote, as its supervisor reads it: at most :data:`WORKER_FILE_MAX_BYTES`, never through a
    symlink, never blocking on a FIFO — a worker running as its topology's owner may have put either there.
    Raises OSError (FileNotFoundError when absent, ELOOP for a symlink)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as file:
        return file.read(WORKER_FILE_MAX_BYTES)


def write_heartbeat(path: Path, time_secs: float, **details: Any) -> None:
    """A worker's local heartbeat: JSON with ``time_secs`` (what the supervisor reads) and details."""
    write_atomically(path, json.dumps({"time_secs": time_secs, **details}).encode())
