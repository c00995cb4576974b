"""The Nimbus contract: ``idl/storm.thrift`` loaded once with thriftpy2, so every daemon and tool shares the
same classes, and Thrift structs as bytes (how the code store and a worker keep a topology).

The plumbing lives in the package's modules: :mod:`~squall.core.thrift.transport` (framing with a size cap,
what both ends share), :mod:`~squall.core.thrift.client` (connecting to nimbus, finding the leader) and
:mod:`~squall.core.thrift.server` (nimbus's server)::

    from squall.core.thrift import storm
    from squall.core.thrift.client import connect
    with connect("nimbus-1", 6627) as nimbus:
        print(nimbus.getClusterInfo().topologies)

The wire is what Storm uses: framed transport, binary protocol.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import thriftpy2
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.utils import deserialize, serialize

__all__ = ["DEFAULT_PORT", "IDL_PATH", "from_bytes", "storm", "to_bytes"]

# idl/ ships beside squall/ both in a checkout and in an installed wheel.
IDL_PATH = Path(__file__).resolve().parents[3] / "idl" / "storm.thrift"

# A module name of its own: streamparse already registers "storm_thrift" in sys.modules.
storm = thriftpy2.load(str(IDL_PATH), module_name="squall_storm_thrift")

DEFAULT_PORT = 6627  # nimbus.thrift.port

_BINARY = TBinaryProtocolFactory()


def to_bytes(struct: Any) -> bytes:
    """A Thrift struct in the binary protocol, as stored on disk (code store, a worker's topology)."""
    return serialize(struct, _BINARY)


def from_bytes(cls: type, data: bytes) -> Any:
    """The inverse of :func:`to_bytes`: ``cls`` (e.g. ``storm.StormTopology``) read from ``data``."""
    return deserialize(cls(), data, _BINARY)
