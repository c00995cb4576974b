"""Submitting a topology to the cluster (Storm's ``StormSubmitter``): upload the code package in
chunks, then ``submitTopologyWithOpts`` with the topology and its conf."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from squall.api.dsl import Topology
from squall.core.nimbus_client import nimbus_client
from squall.core.thrift import storm
from squall.core.zk.client import ZkClient

#: Called as the package goes up: (bytes sent, total bytes).
Progress = Callable[[int, int], None]


def submit_topology(
    conf: Mapping[str, Any],
    topology: Topology,
    *,
    package: Path | None = None,
    conf_overrides: Mapping[str, Any] | None = None,
    active: bool = True,
    zk: ZkClient | None = None,
    name: str | None = None,
    progress: Progress | None = None,
) -> str:
    """Upload ``package`` (if any) and submit ``topology`` (as ``name``, default its own); returns the
    topology id nimbus gave it.

    Nimbus's refusals arrive as the typed Thrift exceptions (InvalidTopologyException, AlreadyAliveException).
    """
    thrift, topology_conf = topology.build()
    topology_conf.update(conf_overrides or {})
    name = name or topology.name
    with nimbus_client(conf, zk) as nimbus:
        location = upload_package(conf, nimbus, package, progress) if package is not None else ""
        status = storm.TopologyInitialStatus.ACTIVE if active else storm.TopologyInitialStatus.INACTIVE
        nimbus.submitTopologyWithOpts(
            name, location, json.dumps(topology_conf), thrift, storm.SubmitOptions(initial_status=status)
        )
        return nimbus.getTopologyId(name)


def upload_package(conf: Mapping[str, Any], nimbus: Any, package: Path, progress: Progress | None = None) -> str:
    """Send ``package`` to nimbus in chunks under its frame limit; the location to submit with."""
    chunk = max(1, int(conf["nimbus.thrift.max_buffer_size"]) // 2)
    total, sent = Path(package).stat().st_size, 0
    location = nimbus.beginFileUpload()
    with open(package, "rb") as data:
        while part := data.read(chunk):
            nimbus.uploadChunk(location, part)
            sent += len(part)
            if progress is not None:
                progress(sent, total)
    nimbus.finishFileUpload(location)
    return location
