"""Topology code replicated between nimbuses (Storm's nimbus HA), so losing the leader's host loses no code.

The leader publishes what it stores in ``/code/<topology-id>`` (:class:`CodeManifest`: each version's digest,
and the current one); every nimbus says what it holds in its ephemeral ``/code_holders/<host:port>``
(:class:`CodeHolder`). A follower copies each version it lacks, or holds with another digest (a rebalance
rewrites the current version in place), from any nimbus that holds it, over the same ``beginCodeDownload``
calls supervisors use; it drops what the manifest no longer lists. The leader schedules a new topology once
``topology.min.replication.count`` nimbuses hold its code, or ``topology.max.replication.wait.time.sec`` has
passed; a nimbus taking over the lead first copies whatever it lacks.

Example (what :class:`nimbus.daemon.Nimbus` does)::

    replication = CodeReplication(zk, code_store, conf, clock, "10.0.0.5", 6627, is_elected=lambda: False).start()
    replication.publish(topology_id)                      # on the leader, after storing a version
    replication.wait_for_replicas(topology_id, 1, wanted=2, max_wait_secs=60)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

from nimbus.codestore import ARTIFACTS, CodeStore, files_digest
from squall.core.clock import Clock, Periodic
from squall.core.nimbus_client import fetch_artifact, nimbus_at, port_for
from squall.core.zk import paths
from squall.core.zk.client import Watch, ZkClient
from squall.core.zk.records import CodeHolder, CodeManifest

log = structlog.get_logger(__name__)

#: How often a submit waiting for replicas looks at ``/code_holders`` (other nimbuses' doings).
POLL_SECS = 0.1


class CopyFailed(Exception):
    """No nimbus could serve a code version this nimbus lacks."""


class CodeReplication:
    """Publishes the leader's code versions, copies them to followers, and counts replicas.

    ``is_elected`` tells whether this nimbus holds the lead (through a ZooKeeper blip too: a leader that pruned as a
    follower would delete versions it has not published yet): the leader's store is the truth, so only followers
    copy and prune on their own; the leader copies only at takeover (:meth:`sync` ``leading=True``).
    """

    def __init__(
        self,
        zk: ZkClient,
        code: CodeStore,
        conf: Mapping[str, Any],
        clock: Clock,
        host: str,
        port: int,
        *,
        is_elected: Callable[[], bool],
        tls_port: int = 0,
    ) -> None:
        self._zk = zk
        self._code = code
        self._conf = conf
        self._clock = clock
        self.host, self.port, self.tls_port = host, port, tls_port
        self._is_elected = is_elected
        self._wake = threading.Event()
        self._stopped = False
        self._sync_lock = threading.Lock()
        self._watches: dict[str, Watch] = {}
        self._timers: list[Watch | Periodic] = []
        self._thread = threading.Thread(target=self._run, name="nimbus-code-sync", daemon=True)

    @property
    def host_port(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> CodeReplication:
        self.announce()
        self._timers += [
            self._zk.watch_children(paths.CODE, self._on_topologies),
            self._zk.watch_children(paths.CODE_HOLDERS, lambda _: self._wake.set()),
            self._clock.call_every(float(self._conf["nimbus.code.sync.freq.secs"]), self._wake.set),
        ]
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped = True
        for watch in [*self._timers, *self._watches.values()]:
            watch.cancel()
        self._wake.set()
        self._zk.unregister_ephemeral(paths.code_holder(self.host_port))

    # -- the leader's side ------------------------------------------------------------------------

    def publish(self, topology_id: str) -> None:
        """Tell followers what the leader now stores for ``topology_id`` (after any change to its versions).

        The holder record goes first, so a follower woken by the manifest already finds a nimbus to copy from.
        """
        self.announce()
        versions = {v: self._code.digest(topology_id, v) for v in self._code.versions(topology_id)}
        self._zk.write(paths.code(topology_id), CodeManifest(self._code.current_version(topology_id), versions))

    def replicas(self, topology_id: str, version: int) -> int:
        """Nimbuses (this one included) that hold ``version`` of ``topology_id`` as the leader stores it."""
        digest = self._code.digest(topology_id, version)
        return sum(1 for holder in self._holders() if holder.holds(topology_id, version, digest))

    def wait_for_replicas(self, topology_id: str, version: int, *, wanted: int, max_wait_secs: float) -> int:
        """Wait until ``wanted`` nimbuses hold the version or ``max_wait_secs`` passed on the clock (negative:
        no limit, as Storm); the number holding it. Storm's ``topology.min.replication.count`` and
        ``topology.max.replication.wait.time.sec``."""
        expired = threading.Event()
        timer = self._clock.call_later(max_wait_secs, expired.set) if max_wait_secs >= 0 else None
        try:
            while (count := self.replicas(topology_id, version)) < wanted and not expired.is_set():
                expired.wait(POLL_SECS)
        finally:
            if timer is not None:
                timer.cancel()
        return count

    # -- every nimbus -----------------------------------------------------------------------------

    def announce(self) -> None:
        """Write this nimbus's :class:`CodeHolder` from what its store holds now."""
        held = {}
        for topology_id in self._code.ids():
            try:
                held[topology_id] = {v: self._code.digest(topology_id, v) for v in self._code.versions(topology_id)}
            except (KeyError, OSError):  # removed meanwhile
                continue
        self._zk.register_ephemeral(
            paths.code_holder(self.host_port), CodeHolder(self.host, self.port, held, self.tls_port)
        )

    def sync(self, *, leading: bool) -> list[str]:
        """Copy every published version this nimbus lacks or holds differently; a follower also drops what is
        no longer published. Returns what could not be copied (tried again on the next sync)."""
        failed = []
        with self._sync_lock:
            published = set(self._zk.children(paths.CODE))
            for topology_id in sorted(published):
                manifest = self._zk.read(paths.code(topology_id), CodeManifest)
                if manifest is None:
                    continue
                try:
                    self._sync_topology(topology_id, manifest, prune=not leading)
                except CopyFailed as exc:
                    failed.append(topology_id)
                    log.warning(
                        "could not copy topology code; trying again later", topology_id=topology_id, error=str(exc)
                    )
            if not leading:  # code of a killed topology; an alive one unpublished (older leader) is kept
                for topology_id in set(self._code.ids()) - published - set(self._zk.children(paths.TOPOLOGIES)):
                    log.info("removing code of a topology no longer alive", topology_id=topology_id)
                    self._code.remove(topology_id)
            self.announce()
        return failed

    def _sync_topology(self, topology_id: str, manifest: CodeManifest, *, prune: bool) -> None:
        held = set(self._code.versions(topology_id))
        for version, digest in sorted(manifest.versions.items()):
            if version not in held or self._code.digest(topology_id, version) != digest:
                self._copy(topology_id, version, digest)
        if manifest.current in manifest.versions and (
            not self._code.has(topology_id) or self._code.current_version(topology_id) != manifest.current
        ):
            self._code.set_current(topology_id, manifest.current)
        if prune:
            for version in held - set(manifest.versions):
                self._code.drop(topology_id, version)

    def _copy(self, topology_id: str, version: int, digest: str) -> None:
        """Fetch one version from the first nimbus that holds it with ``digest`` and install it whole."""
        sources = [
            h for h in self._holders() if h.holds(topology_id, version, digest) and h.host_port != self.host_port
        ]
        errors = []
        limit = int(self._conf["nimbus.max.upload.bytes"])
        for holder in sources:

            def write(staging: Path, holder: CodeHolder = holder) -> None:
                port = port_for(self._conf, holder.host, holder.port, holder.tls_port)
                with nimbus_at(self._conf, holder.host, port) as nimbus:
                    for artifact, name in ARTIFACTS.items():
                        fetch_artifact(nimbus, topology_id, f"v{version}/{artifact}", staging / name, limit)
                if files_digest(staging) != digest:
                    raise CopyFailed(f"{holder.host_port} served other bytes than digest {digest[:12]}")

            try:
                self._code.install(topology_id, version, write, replace=True)
            except Exception as exc:
                errors.append(f"{holder.host_port}: {exc}")
                continue
            log.info("copied topology code", topology_id=topology_id, version=version, source=holder.host_port)
            return
        raise CopyFailed(f"version {version}: " + ("; ".join(errors) or "no other nimbus holds it"))

    def _holders(self) -> list[CodeHolder]:
        return [
            h
            for hp in self._zk.children(paths.CODE_HOLDERS)
            if (h := self._zk.read(paths.code_holder(hp), CodeHolder)) is not None
        ]

    def _on_topologies(self, topology_ids: list[str]) -> None:
        """Watch each published manifest (a new version, a rebalance), and wake the sync thread."""
        for topology_id in set(topology_ids) - set(self._watches):
            self._watches[topology_id] = self._zk.watch_data(
                paths.code(topology_id), CodeManifest, lambda _: self._wake.set()
            )
        for topology_id in set(self._watches) - set(topology_ids):
            self._watches.pop(topology_id).cancel()
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopped:
                return
            if self._is_elected():
                continue
            try:
                self.sync(leading=False)
            except Exception:  # ZooKeeper away, a store error: the next wake or timer tries again
                log.exception("code sync failed")
