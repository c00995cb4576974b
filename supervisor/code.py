"""Topology code on a supervisor's host: downloaded from a nimbus in chunks, published atomically.

Each code version of a topology has its own directory (:func:`squall.core.local_state.code_dir`), which
appears complete or not at all: every artifact is fetched into a staging directory beside it, renamed
into place last, so a worker never starts on half a download, and a gray upgrade's new version never
disturbs the workers still running the old one.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from squall.core.local_state import CODE_FILES, STAMP_FILE, code_dir, fetched_for, stormdist_dir
from squall.core.nimbus_client import code_sources, fetch_artifact, nimbus_at
from squall.core.zk.client import ZkClient

#: The code package is optional (a topology may use modules installed on every host).
OPTIONAL = frozenset({"code"})

#: (topology id, code version): what a code directory holds.
CodeKey = tuple[str, int]


class DownloadFailed(Exception):
    """The code could not be fetched (nimbus unreachable, topology gone, too big)."""


def download_code(
    conf: Mapping[str, Any],
    topology_id: str,
    version: int,
    zk: ZkClient | None = None,
    *,
    max_bytes: int | None = None,
    stamp: int = 0,
) -> Path:
    """Fetch version ``version`` of ``topology_id``'s conf, topology and code package from the leading nimbus,
    or, when it cannot serve them, from another nimbus holding that version (:func:`code_sources`).

    ``stamp`` (the assignment's ``timestamp_ms``) is kept with the code, see :func:`code_on_disk`.
    """
    target = code_dir(conf, topology_id, version)
    target.parent.mkdir(parents=True, exist_ok=True)
    limit = max_bytes if max_bytes is not None else int(conf["nimbus.max.upload.bytes"])
    failures: list[str] = []
    for host, port in code_sources(conf, zk, topology_id, version):
        staging = Path(tempfile.mkdtemp(prefix=f".{topology_id}-", dir=stormdist_dir(conf)))
        try:
            with nimbus_at(conf, host, port) as nimbus:
                for artifact, name in CODE_FILES.items():
                    if (
                        not fetch_artifact(nimbus, topology_id, f"v{version}/{artifact}", staging / name, limit)
                        and artifact not in OPTIONAL
                    ):
                        raise DownloadFailed(f"no {artifact} of version {version}")
            (staging / STAMP_FILE).write_text(str(stamp))
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
            return target
        except Exception as exc:
            failures.append(f"{host}:{port}: {exc}")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    raise DownloadFailed(
        f"{topology_id}: download of version {version} failed: "
        + ("; ".join(failures) or "no nimbus leads or holds it")
    )


def code_on_disk(conf: Mapping[str, Any]) -> dict[CodeKey, int]:
    """Code versions on this host → the assignment timestamp each was fetched for."""
    found = {}
    root = stormdist_dir(conf)
    for topology in root.glob("*") if root.is_dir() else ():
        if topology.name.startswith(".") or not topology.is_dir():
            continue  # a download in progress or left by a crash
        for version in topology.iterdir():
            if version.name.isdigit() and version.is_dir():
                found[topology.name, int(version.name)] = fetched_for(version)
    return found


def remove_code(conf: Mapping[str, Any], topology_id: str, version: int) -> None:
    """Remove one version; the topology's directory goes with its last version."""
    shutil.rmtree(code_dir(conf, topology_id, version), ignore_errors=True)
    try:
        code_dir(conf, topology_id, version).parent.rmdir()
    except OSError:
        pass  # other versions remain
