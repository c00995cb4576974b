"""How the CLI and daemons reach nimbus: the leader through ZooKeeper's ``/nimbus_master`` or ``nimbus.seeds``;
for topology code, also any other nimbus that holds a copy (``/code_holders``). With
``nimbus.thrift.client.use.tls`` every connection goes to a nimbus's TLS listener, with this client's
certificate (:mod:`squall.core.tls`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from thriftpy2.thrift import TClient

from squall.core.thrift import storm
from squall.core.thrift.client import connect, find_leader
from squall.core.tls import client_context
from squall.core.zk import paths
from squall.core.zk.client import ZkClient
from squall.core.zk.records import CodeHolder, NimbusMaster

#: The port clients with ``nimbus.thrift.client.use.tls`` try on seeds when ``nimbus.thrift.tls.port`` is unset
#: (Storm 2.7's example port).
DEFAULT_TLS_PORT = 6067


class NoTlsListener(Exception):
    """This client speaks TLS to nimbus, but the nimbus it found has no TLS listener::

    try:
        with nimbus_client(conf) as nimbus:
            ...
    except NoTlsListener as exc:
        print(f"storm: {exc}")
    """


def leader_address(
    conf: Mapping[str, Any], zk: ZkClient | None = None, timeout_ms: int | None = None
) -> tuple[str, int]:
    """The leader's (host, port): from ``/nimbus_master`` when a ZooKeeper client is at hand
    (daemons have one; it needs no round trip to a nimbus), else by asking ``nimbus.seeds``, each
    within ``timeout_ms`` (default: ``storm.thrift.socket.timeout.ms``, at most 10 s).
    With ``nimbus.thrift.client.use.tls``, the port of its TLS listener."""
    tls = client_context(conf)
    if zk is not None:
        master = zk.read(paths.NIMBUS_MASTER, NimbusMaster)
        if master is not None:
            return master.host, port_for(conf, master.host, master.port, master.tls_port)
    seed_port = (conf["nimbus.thrift.tls.port"] or DEFAULT_TLS_PORT) if tls is not None else conf["nimbus.thrift.port"]
    return find_leader(conf["nimbus.seeds"], seed_port, timeout_ms or _timeout(conf, cap_ms=10_000), tls=tls)


@contextlib.contextmanager
def nimbus_client(
    conf: Mapping[str, Any], zk: ZkClient | None = None, *, timeout_ms: int | None = None
) -> Iterator[TClient]:
    """A client connected to the leading nimbus, closed on exit.

    ``timeout_ms`` bounds finding the leader, connecting and each reply; the default,
    ``storm.thrift.socket.timeout.ms``, lets a submit wait for its assignment. The UI, which must answer
    while nimbus hangs, passes its own (``ui.nimbus.timeout.secs``)::

        with nimbus_client(conf, timeout_ms=2000) as nimbus:
            nimbus.getClusterInfo()
    """
    host, port = leader_address(conf, zk, timeout_ms)
    with connect(
        host,
        port,
        timeout_ms or _timeout(conf),
        max_frame_bytes=conf["nimbus.thrift.client.max_buffer_size"],
        tls=client_context(conf),
    ) as client:
        yield client


@contextlib.contextmanager
def nimbus_at(conf: Mapping[str, Any], host: str, port: int) -> Iterator[TClient]:
    """A client connected to the nimbus listening at ``host:port`` (leader or not; a TLS listener with
    ``nimbus.thrift.client.use.tls``, see :func:`port_for`), closed on exit."""
    with connect(
        host, port, _timeout(conf), max_frame_bytes=conf["nimbus.thrift.max_buffer_size"], tls=client_context(conf)
    ) as client:
        yield client


def port_for(conf: Mapping[str, Any], host: str, port: int, tls_port: int) -> int:
    """Which of a nimbus's listeners this client uses: ``port``, or with ``nimbus.thrift.client.use.tls`` its TLS
    listener's ``tls_port`` (:class:`NoTlsListener` when it has none)."""
    if not conf.get("nimbus.thrift.client.use.tls"):
        return port
    if not tls_port:
        raise NoTlsListener(
            f"the nimbus at {host}:{port} has no TLS listener (nimbus.thrift.tls.port), and this "
            "client speaks only TLS to nimbus (nimbus.thrift.client.use.tls)"
        )
    return tls_port


def code_sources(conf: Mapping[str, Any], zk: ZkClient | None, topology_id: str, version: int) -> list[tuple[str, int]]:
    """Nimbuses to download ``version`` of ``topology_id`` from, best first: the leader, then every other
    nimbus that says it holds that version. Any nimbus serves the code it holds, so a leader that lost its
    disk, or is unreachable, does not stop a download."""
    sources: list[tuple[str, int]] = []
    tls = bool(conf.get("nimbus.thrift.client.use.tls"))
    try:
        sources.append(leader_address(conf, zk))
    except Exception:  # no leader right now: the holders may still serve
        pass
    if zk is not None:
        for host_port in zk.children(paths.CODE_HOLDERS):
            holder = zk.read(paths.code_holder(host_port), CodeHolder)
            if holder is None or not holder.holds(topology_id, version) or (tls and not holder.tls_port):
                continue
            address = (holder.host, port_for(conf, holder.host, holder.port, holder.tls_port))
            if address not in sources:
                sources.append(address)
    return sources


class ArtifactTooLarge(Exception):
    """A downloaded artifact grew past the size the downloader allows::

    try:
        fetch_artifact(client, topology_id, "v1/stormcode.ser", path, limit=64 << 20)
    except ArtifactTooLarge:
        ...                      # give up on this source, try another
    """


def fetch_artifact(client: TClient, topology_id: str, artifact: str, path: Path, limit: int) -> bool:
    """Download one code artifact (``v<N>/<name>``, see ``beginCodeDownload``) into ``path``, chunk by chunk.

    False when that nimbus does not have it; :class:`ArtifactTooLarge` past ``limit`` bytes.
    """
    try:
        session = client.beginCodeDownload(topology_id, artifact)
    except storm.NotAliveException:
        return False
    size = 0
    with open(path, "wb") as out:
        while chunk := client.downloadChunk(session):
            size += len(chunk)
            if size > limit:
                raise ArtifactTooLarge(f"{path.name} is over {limit} bytes")
            out.write(chunk)
    return True


def _timeout(conf: Mapping[str, Any], cap_ms: int | None = None) -> int:
    timeout = int(conf["storm.thrift.socket.timeout.ms"])
    return min(timeout, cap_ms) if cap_ms else timeout
