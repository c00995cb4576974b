"""Files under ``storm.local.dir`` that two processes must agree on: the code a supervisor downloads
for its workers, the local heartbeat each worker writes for its supervisor, and where each worker logs
(which the host's logviewer serves, and the UI and ``storm logs`` find by topology id and port)."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
    and how ``storm jar`` checks a package before uploading it (:mod:`squall.submitcheck`): one rule for
    both, so the check cannot pass where a worker would fail.

        put_code_on_path(code_dir(conf, topology_id, version))
        importlib.import_module("wordcount")   # from code.pkg
    """
    package = directory / CODE_FILES["code"]
    if package.exists():
        sys.path.insert(0, str(package))


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


def heartbeat_file(conf: Mapping[str, Any], worker_id: str) -> Path:
    return workers_dir(conf) / worker_id / "heartbeat"


def write_atomically(path: Path, data: bytes) -> None:
    """Readers see the old content or the new, never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def write_heartbeat(path: Path, time_secs: float, **details: Any) -> None:
    """A worker's local heartbeat: JSON with ``time_secs`` (what the supervisor reads) and details."""
    write_atomically(path, json.dumps({"time_secs": time_secs, **details}).encode())
