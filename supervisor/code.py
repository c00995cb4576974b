"""Topology code on a supervisor's host: downloaded from nimbus in chunks, published atomically.

A topology's directory (:func:`squall.local_state.code_dir`) appears complete or not at all: every
artifact is fetched into a staging directory beside it, which is renamed into place last, so a worker
never starts on half a download.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from squall.local_state import CODE_FILES, code_dir
from squall.nimbus_client import nimbus_client
from squall.thrift import storm
from squall.zk.client import ZkClient

#: The code package is optional (a topology may use modules installed on every host).
OPTIONAL = frozenset({"code"})


class DownloadFailed(Exception):
    """The code could not be fetched (nimbus unreachable, topology gone, too big)."""


def download_code(conf: Mapping[str, Any], topology_id: str, zk: ZkClient | None = None, *,
                  max_bytes: int | None = None) -> Path:
    """Fetch ``topology_id``'s conf, topology and code package from the leading nimbus; return its directory."""
    target = code_dir(conf, topology_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    limit = max_bytes if max_bytes is not None else int(conf["nimbus.max.upload.bytes"])
    staging = Path(tempfile.mkdtemp(prefix=f".{topology_id}-", dir=target.parent))
    try:
        with nimbus_client(conf, zk) as nimbus:
            for artifact, name in CODE_FILES.items():
                try:
                    session = nimbus.beginCodeDownload(topology_id, artifact)
                except storm.NotAliveException as exc:
                    if artifact in OPTIONAL:
                        continue
                    raise DownloadFailed(f"{topology_id}: nimbus has no {artifact} ({exc.msg})") from None
                _fetch(nimbus, session, staging / name, limit)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
        return target
    except DownloadFailed:
        raise
    except Exception as exc:
        raise DownloadFailed(f"{topology_id}: download failed: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _fetch(nimbus: Any, session: str, path: Path, limit: int) -> None:
    size = 0
    with open(path, "wb") as out:
        while chunk := nimbus.downloadChunk(session):
            size += len(chunk)
            if size > limit:
                raise DownloadFailed(f"{path.name} is over {limit} bytes")
            out.write(chunk)
