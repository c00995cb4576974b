"""Squall: a real-time computation cluster in the style of JStorm.

What a topology author needs is importable from here::

    from squall import Bolt, LocalTopology, Spout, Topology

The package is laid out by audience (see docs/internals.md): :mod:`squall.api` (what topology authors
write against), :mod:`squall.core` (what every process shares), :mod:`squall.cli` (the ``storm``
command), :mod:`squall.dev` (local mode, the dev cluster, dev ZooKeeper, Spark Connect) and
:mod:`squall.compat` (streamparse projects). The names below load on first use, so a daemon importing
``squall.core`` does not load the API, Spark or local mode.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: The Apache Storm release whose Nimbus Thrift API Squall speaks (idl/storm.thrift is wire-identical to Storm
#: 1.x's; 1.2.4 is the last 1.x). ``storm version`` prints it as Storm does, for tools that read it.
STORM_VERSION = "1.2.4"

#: The public surface: each name and the module defining it.
_HOMES = {
    "Spout": "squall.api.component",
    "Bolt": "squall.api.component",
    "TopologyContext": "squall.api.component",
    "Tuple": "squall.api.tuple",
    "TupleBatch": "squall.api.tuple",
    "Fields": "squall.api.tuple",
    "tick_tuple": "squall.api.tuple",
    "Topology": "squall.api.dsl",
    "TopologyError": "squall.api.dsl",
    "run_bolt": "squall.api.testing",
    "run_spout": "squall.api.testing",
    "SparkBolt": "squall.api.spark",
    "submit_topology": "squall.api.submitter",
    "build_package": "squall.core.package",
    "load_config": "squall.core.config",
    "nimbus_client": "squall.core.nimbus_client",
    "LocalTopology": "squall.dev.local",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'squall' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
