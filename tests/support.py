"""Helpers shared by tests: waiting on conditions with deadlines instead of sleeping."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from squall.devcluster import wait_for
from squall.zk.client import ZkClient

T = TypeVar("T")


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
