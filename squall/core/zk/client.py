"""The one way daemons read and write cluster state: kazoo plus records, connection states and re-arming.

What it adds to kazoo:

* typed reads and writes of :mod:`squall.core.zk.records` at :mod:`squall.core.zk.paths`, with retries;
* ephemeral *registrations* that come back by themselves after the session expires, and are written once the
  connection is back when made while it was not;
* data and children watches that re-arm on every event and after a new session (kazoo recipes);
* connection-state listeners told every state in kazoo's order, one at a time, on one delivery thread per
  client (kazoo forbids ZooKeeper calls from its listener thread), so a leader can pause on SUSPENDED, give up on
  LOST and resume on CONNECTED without ever hearing an old state after a newer one;
* the chroot (``storm.zookeeper.root``) created on first connect;
* every node created with the ACL :mod:`squall.core.zk.acls` gives its path (open without ZooKeeper auth).
"""

from __future__ import annotations

import enum
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoAuthError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.security import ACL

from squall.core.zk import paths
from squall.core.zk.acls import AclPolicy, TopologyConfs
from squall.core.zk.records import R, RecordError, decode, encode

log = structlog.get_logger(__name__)

#: How long :meth:`ZkClient.delete` keeps deleting a subtree that writers keep adding to.
DELETE_RETRY_SECS = 30.0


class ZkState(str, enum.Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"  # connection lost, session may survive: pause leader work
    LOST = "lost"  # session expired: ephemerals are gone until we re-create them


def connect_string(conf: Mapping[str, Any], *, with_root: bool = True) -> str:
    """``host:port,...[/root]`` from ``storm.zookeeper.servers/port/root``."""
    port = conf["storm.zookeeper.port"]
    hosts = ",".join(s if ":" in s else f"{s}:{port}" for s in conf["storm.zookeeper.servers"])
    root = conf["storm.zookeeper.root"].rstrip("/")
    return hosts + (root if with_root else "")


class Watch:
    """Handle of a self-re-arming watch; after ``cancel()`` its callback is not called again."""

    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ZkClient:
    """A connected view of ``storm.zookeeper.root``. Thread-safe, like the kazoo client under it.

    ``topology_conf(topology_id)`` (nimbus's stored confs) names each topology's ZooKeeper credential, which its
    own nodes grant (:class:`squall.core.zk.acls.AclPolicy`); sessions that create no such node need none.

        with ZkClient(conf) as zk:
            zk.write(paths.BLACKLIST, Blacklist(["host-3"]))
    """

    def __init__(self, conf: Mapping[str, Any], topology_conf: TopologyConfs | None = None) -> None:
        self._conf = conf
        self._root = conf["storm.zookeeper.root"].rstrip("/") or "/"
        self._policy = AclPolicy(conf, topology_conf)
        interval = conf["storm.zookeeper.retry.interval"] / 1000.0
        ceiling = conf["storm.zookeeper.retry.intervalceiling.millis"] / 1000.0
        self._kz = KazooClient(
            hosts=connect_string(conf),
            timeout=conf["storm.zookeeper.session.timeout"] / 1000.0,
            auth_data=self._policy.auth_data or None,
            default_acl=self._policy.own,  # for recipes; this class's own creates ask the policy
            connection_retry={"max_tries": -1, "delay": interval, "max_delay": ceiling},
            command_retry={"max_tries": conf["storm.zookeeper.retry.times"], "delay": interval, "max_delay": ceiling},
            logger=None,
        )
        self._lock = threading.Lock()  # guards the listeners
        self._listeners: list[Callable[[ZkState], None]] = []
        # held while a registration is written, removed or restored, so a restore never re-creates a node just
        # unregistered nor writes back data older than a new registration's
        self._ephemerals_lock = threading.Lock()
        self._ephemerals: dict[str, bytes] = {}
        self._states: queue.SimpleQueue[ZkState | None] = queue.SimpleQueue()  # None: the delivery thread ends
        self._delivery: threading.Thread | None = None
        self.connected = threading.Event()
        self._kz.add_listener(self._on_kazoo_state)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self, timeout: float | None = None) -> ZkClient:
        """Connect, create the root and the persistent parents, start the state delivery thread. Raises on
        timeout (stopped again then, so no thread is left behind)."""
        timeout = timeout if timeout is not None else self._conf["storm.zookeeper.connection.timeout"] / 1000.0
        self._ensure_root(timeout)
        self._delivery = threading.Thread(target=self._deliver_states, name=f"zk-states-{id(self):x}", daemon=True)
        self._delivery.start()
        try:
            self._kz.start(timeout=timeout)
            for parent in paths.PERSISTENT_ROOTS:
                self._kz.retry(self._ensure, parent)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Close the session; returns once the listeners have been told every state, the closing LOST last,
        and the delivery thread has ended (at once when a listener itself stops its client)."""
        self._kz.stop()
        self._kz.close()
        delivery, self._delivery = self._delivery, None
        if delivery is not None:
            self._states.put(None)
            if delivery is not threading.current_thread():
                delivery.join()

    def __enter__(self) -> ZkClient:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _ensure_root(self, timeout: float) -> None:
        """kazoo does not create its chroot; do it with a short root-level session."""
        if self._root == "/":
            return
        bare = KazooClient(
            hosts=connect_string(self._conf, with_root=False), auth_data=self._policy.auth_data or None, logger=None
        )
        bare.start(timeout=timeout)
        try:
            bare.ensure_path(self._root, acl=self._policy.own)
        finally:
            bare.stop()
            bare.close()

    @property
    def session_id(self) -> int:
        return self._kz.client_id[0] if self._kz.client_id else 0

    @property
    def kazoo(self) -> KazooClient:
        """For recipes this wrapper does not cover (election, locks, transactions)."""
        return self._kz

    # -- connection state -----------------------------------------------------------------------

    def add_state_listener(self, listener: Callable[[ZkState], None]) -> None:
        """Tell ``listener(state)`` every later connection state, in the order kazoo reported them.

        Every listener of this client is called on one delivery thread, one call at a time, each state to all
        listeners before the next state: a leader never hears the LOST that preceded a CONNECTED after that
        CONNECTED (and so never gives up what it just regained). Off kazoo's thread, a listener may block and
        call ZooKeeper, but while it does the later states of this client wait for it: keep it short. After a
        session loss the ephemeral registrations are back before the CONNECTED is told. An exception from a
        listener is logged and the others are still told.

            zk.add_state_listener(lambda state: print("zookeeper is", state.value))
        """
        with self._lock:
            self._listeners.append(listener)

    def _on_kazoo_state(self, state: str) -> None:
        # kazoo's own thread: no ZooKeeper calls and no blocking here, hand the state to the delivery thread.
        if state == KazooState.CONNECTED:
            self.connected.set()
            ours = ZkState.CONNECTED
        else:
            self.connected.clear()
            ours = ZkState.SUSPENDED if state == KazooState.SUSPENDED else ZkState.LOST
        log.info("zookeeper state", state=ours.value)
        self._states.put(ours)

    def _deliver_states(self) -> None:
        """The delivery thread: each state in turn to every listener, until ``stop`` queues None."""
        while (state := self._states.get()) is not None:
            if state is ZkState.CONNECTED:  # after a loss, or a blip the session survived (registered meanwhile)
                self._restore_ephemerals()
            with self._lock:
                listeners = list(self._listeners)
            for listener in listeners:
                try:
                    listener(state)
                except Exception:
                    log.exception("zookeeper state listener failed", state=state.value, listener=repr(listener))

    # -- records --------------------------------------------------------------------------------

    def read(self, path: str, cls: type[R]) -> R | None:
        """The record at ``path``, or None when the node does not exist."""
        try:
            raw, _ = self._kz.retry(self._kz.get, path)
        except NoNodeError:
            return None
        return self._decode(path, cls, raw)

    def write(self, path: str, record: Any) -> None:
        """Create or overwrite a persistent node (parents created as needed)."""
        data = encode(record)

        def put() -> None:
            try:
                self._kz.set(path, data)
            except NoNodeError:
                try:
                    self._create(path, data)
                except NodeExistsError:
                    self._kz.set(path, data)

        self._kz.retry(put)

    def create(self, path: str, record: Any | None = None) -> bool:
        """Create a persistent node only if absent (its missing parents too); True if this call created it."""
        try:
            self._kz.retry(self._create, path, encode(record) if record is not None else b"")
        except NodeExistsError:
            return False
        return True

    def _create(self, path: str, data: bytes = b"", *, ephemeral: bool = False) -> None:
        """Create ``path`` and its missing parents, each with the ACL the policy gives its own path (kazoo's
        ``makepath`` would give the parents the child's)."""
        try:
            self._kz.create(path, data, acl=self._acl_for(path), ephemeral=ephemeral)
        except NoNodeError:
            parent = path.rsplit("/", 1)[0]
            if not parent:
                raise
            self._ensure(parent)
            self._kz.create(path, data, acl=self._acl_for(path), ephemeral=ephemeral)

    def _ensure(self, path: str) -> None:
        """Create ``path`` (and its parents) unless it exists."""
        if self._kz.exists(path) is None:
            try:
                self._create(path)
            except NodeExistsError:
                pass

    def _acl_for(self, path: str) -> list[ACL]:
        return self._policy.acl(path, inherited=self._existing_acl)

    def _existing_acl(self, path: str) -> list[ACL] | None:
        try:
            return list(self._kz.get_acls(path)[0])
        except NoNodeError:
            return None

    def acl(self, path: str) -> list[ACL] | None:
        """The ACL of a node; None when it does not exist."""
        try:
            return list(self._kz.retry(self._kz.get_acls, path)[0])
        except NoNodeError:
            return None

    def enforce_acls(self, path: str = "/") -> int:
        """Give ``path`` and every node below it the ACL :mod:`squall.core.zk.acls` gives a new node there (Storm's
        nimbus fixes its ZooKeeper ACLs up likewise at start); returns how many nodes changed.

        So nodes made before ZooKeeper auth, or by a Squall that let everyone read, are closed too. Left alone:
        nothing without ZooKeeper auth (no node is opened), the nodes of a topology with no credential of its own
        (:meth:`AclPolicy.has_no_credential`), and nodes this session may not administer (logged)."""
        if self._policy.credential is None or self._policy.has_no_credential(path):
            return 0
        try:
            wanted, (current, _) = self._acl_for(path), self._kz.retry(self._kz.get_acls, path)
            changed = 0
            if set(current) != set(wanted):
                self._kz.retry(self._kz.set_acls, path, wanted)
                changed = 1
            children = self._kz.retry(self._kz.get_children, path)
        except NoNodeError:
            return 0
        except NoAuthError:
            log.warning("cannot set this znode's ACL with this session's credential; left as it is", path=path)
            return 0
        return changed + sum(self.enforce_acls(f"{path.rstrip('/')}/{child}") for child in children)

    def delete(self, path: str, *, recursive: bool = True) -> None:
        """Delete a node (and its subtree); deleting a missing node is not an error.

        A recursive delete races writers adding children meanwhile (workers and supervisors filing task
        errors while their topology is killed): ZooKeeper then refuses the parent (NotEmptyError). It is
        retried, with a growing pause, for up to ``DELETE_RETRY_SECS``; after that NotEmptyError is raised.
        """
        deadline, pause = time.monotonic() + DELETE_RETRY_SECS, 0.01
        while True:
            try:
                self._kz.retry(self._kz.delete, path, recursive=recursive)
                return
            except NoNodeError:
                return
            except NotEmptyError:
                if not recursive or time.monotonic() >= deadline:
                    raise
                log.info("znode gained children while being deleted; deleting again", path=path)
                time.sleep(pause)  # a back-off between attempts, not a wait for an event
                pause = min(pause * 2, 0.5)

    def exists(self, path: str) -> bool:
        return self._kz.retry(self._kz.exists, path) is not None

    def children(self, path: str) -> list[str]:
        """Sorted child names; an empty list when the node does not exist."""
        try:
            return sorted(self._kz.retry(self._kz.get_children, path))
        except NoNodeError:
            return []

    @staticmethod
    def _decode(path: str, cls: type[R], raw: bytes) -> R:
        try:
            return decode(cls, raw)
        except RecordError as exc:
            raise RecordError(f"{path}: {exc}") from None

    # -- ephemeral registrations ----------------------------------------------------------------

    def register_ephemeral(self, path: str, record: Any) -> None:
        """Create (or update) an ephemeral node that is re-created whenever the session is renewed."""
        data = encode(record)
        with self._ephemerals_lock:
            self._ephemerals[path] = data
            if self.connected.is_set():  # otherwise it is created when the session comes back
                self._put_ephemeral(path, data)

    def unregister_ephemeral(self, path: str) -> None:
        with self._ephemerals_lock:
            self._ephemerals.pop(path, None)
            self.delete(path, recursive=False)

    def create_ephemeral(self, path: str, record: Any) -> bool:
        """Try to own an ephemeral node (leader election style); False if someone else holds it.

        Unlike a registration it is not re-created after expiry, since another process may have
        taken it meanwhile: the caller's state listener decides whether to try again.
        """
        try:
            self._kz.retry(self._create, path, encode(record), ephemeral=True)
        except NodeExistsError:
            stat = self._kz.exists(path)
            if stat is None or stat.ephemeralOwner != self.session_id:
                return False
        return True

    def _put_ephemeral(self, path: str, data: bytes) -> None:
        def put() -> None:
            stat = self._kz.exists(path)
            if stat is not None and stat.ephemeralOwner == self.session_id:
                self._kz.set(path, data)
                return
            if stat is not None:  # left by our previous, expired session: take it over
                try:
                    self._kz.delete(path)
                except NoNodeError:
                    pass
            self._create(path, data, ephemeral=True)

        self._kz.retry(put)

    def _restore_ephemerals(self) -> None:
        """Write every registration as this session should hold it, on the delivery thread before CONNECTED is told:
        re-created after a session loss, and written after a blip the session survived, as one registered while
        SUSPENDED was not (``register_ephemeral`` writes only while connected)."""
        with self._ephemerals_lock:
            for path, data in self._ephemerals.items():
                try:
                    self._put_ephemeral(path, data)
                    log.info("ephemeral node written on (re)connection", path=path)
                except Exception:
                    log.exception("could not restore ephemeral node", path=path)

    # -- watches --------------------------------------------------------------------------------

    def watch_data(self, path: str, cls: type[R], callback: Callable[[R | None], None]) -> Watch:
        """``callback(record or None)`` now and on every change, also across sessions.

        A value that does not decode is logged and skipped, never fatal to the watch.
        """
        watch = Watch()

        def on_change(raw: bytes | None, _stat: Any) -> bool | None:
            if watch.cancelled:
                return False  # tells the kazoo recipe to stop re-arming
            if raw is None or raw == b"":
                callback(None)
                return None
            try:
                record = self._decode(path, cls, raw)
            except RecordError:
                log.exception("skipping undecodable znode", path=path)
                return None
            callback(record)
            return None

        DataWatch(self._kz, path, on_change)
        return watch

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> Watch:
        """``callback(sorted child names)`` now and on every membership change, also across sessions."""
        watch = Watch()

        def on_change(names: list[str]) -> bool | None:
            if watch.cancelled:
                return False
            callback(sorted(names))
            return None

        self._kz.retry(self._ensure, path)
        ChildrenWatch(self._kz, path, on_change)
        return watch
