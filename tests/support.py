"""Helpers shared by tests: waiting on conditions with deadlines instead of sleeping."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from squall.devcluster import wait_for
from squall.zk.client import ZkClient

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent


def storm_on_path(bin_dir: Path) -> dict[str, str]:
    """An environment whose ``storm`` on PATH is this checkout's CLI, run the way users run it (an executable
    named ``storm``); a shim for ``python -m squall.cli``, since a virtualenv's console script may predate it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "storm"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m squall.cli "$@"\n')
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO)}


def log_events(path: Path, *events: str) -> list[dict[str, Any]]:
    """The JSON log lines of a daemon or worker log whose event is one of ``events``, in order."""
    return [e for line in path.read_text().splitlines()
            if line.startswith("{") and (e := json.loads(line)).get("event") in events]


def wait_until(condition: Callable[[], T], timeout: float = 10.0, what: str = "condition") -> T:
    """Poll ``condition`` until it returns something truthy; fail with ``what`` at the deadline."""
    return wait_for(condition, timeout, what)


def expire_session(client: ZkClient, zk_address: str) -> None:
    """Expire ``client``'s session for real: a second connection takes the session over and closes it."""
    session_id, password = client.kazoo.client_id
    thief = KazooClient(hosts=zk_address, client_id=(session_id, password))
    thief.start(timeout=10)
    thief.stop()
    thief.close()


def delete_tree(zk_address: str, path: str) -> None:
    """Remove a test's ZooKeeper subtree (its chroot), whoever created it."""
    bare = KazooClient(hosts=zk_address)
    bare.start(timeout=10)
    try:
        bare.delete(path, recursive=True)
    except NoNodeError:
        pass
    finally:
        bare.stop()
        bare.close()
