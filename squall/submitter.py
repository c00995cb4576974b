"""Submitting a topology to the cluster (Storm's ``StormSubmitter``): upload the code package in
chunks, then ``submitTopologyWithOpts`` with the topology and its conf."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from squall.dsl import Topology
from squall.nimbus_client import nimbus_client
from squall.thrift import storm
from squall.zk.client import ZkClient


def submit_topology(conf: Mapping[str, Any], topology: Topology, *, package: Path | None = None,
                    conf_overrides: Mapping[str, Any] | None = None, active: bool = True,
                    zk: ZkClient | None = None) -> str:
    """Upload ``package`` (if any) and submit ``topology``; returns the topology id nimbus gave it.

    Nimbus's refusals arrive as the typed Thrift exceptions (InvalidTopologyException, AlreadyAliveException).
    """
    thrift, topology_conf = topology.build()
    topology_conf.update(conf_overrides or {})
    chunk = max(1, int(conf["nimbus.thrift.max_buffer_size"]) // 2)
    with nimbus_client(conf, zk) as nimbus:
        location = ""
        if package is not None:
            location = nimbus.beginFileUpload()
            with open(package, "rb") as data:
                while part := data.read(chunk):
                    nimbus.uploadChunk(location, part)
            nimbus.finishFileUpload(location)
        status = storm.TopologyInitialStatus.ACTIVE if active else storm.TopologyInitialStatus.INACTIVE
        nimbus.submitTopologyWithOpts(topology.name, location, json.dumps(topology_conf), thrift,
                                      storm.SubmitOptions(initial_status=status))
        return nimbus.getTopologyId(topology.name)
