"""Squall: a real-time computation cluster in the style of JStorm.

What a topology author needs is importable from here::

    from squall import Bolt, LocalTopology, Spout, Topology

The package is laid out by audience (see docs/internals/index.md): :mod:`squall.api` (what topology authors
write against), :mod:`squall.core` (what every process shares), :mod:`squall.cli` (the ``storm``
command), :mod:`squall.dev` (local mode, the dev cluster, dev ZooKeeper, Spark Connect) and
:mod:`squall.compat` (streamparse projects). The names below load on first use, so a daemon importing
``squall.core`` does not load the API, Spark or local mode.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ below loads on first use, spelled out for type checkers and IDEs
    from squall.api.component import Bolt as Bolt, Spout as Spout, TopologyContext as TopologyContext
    from squall.api.dsl import Topology as Topology, TopologyError as TopologyError
    from squall.api.kafka.spout import KafkaSpout as KafkaSpout
    from squall.api.spark import SparkBolt as SparkBolt
    from squall.api.state.keyvalue import KeyValueState as KeyValueState
    from squall.api.stateful import StatefulBolt as StatefulBolt
    from squall.api.submitter import submit_topology as submit_topology
    from squall.api.testing import run_bolt as run_bolt, run_spout as run_spout
    from squall.api.tuple import Fields as Fields, Tuple as Tuple, TupleBatch as TupleBatch, tick_tuple as tick_tuple
    from squall.api.windowing import (
        Count as Count,
        Duration as Duration,
        TupleWindow as TupleWindow,
        WindowedBolt as WindowedBolt,
    )
    from squall.core.config.loading import load_config as load_config
    from squall.core.nimbus_client import nimbus_client as nimbus_client
    from squall.core.package import build_package as build_package
    from squall.dev.local import LocalTopology as LocalTopology

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
    "WindowedBolt": "squall.api.windowing",
    "TupleWindow": "squall.api.windowing",
    "Count": "squall.api.windowing",
    "Duration": "squall.api.windowing",
    "Topology": "squall.api.dsl",
    "TopologyError": "squall.api.dsl",
    "run_bolt": "squall.api.testing",
    "run_spout": "squall.api.testing",
    "SparkBolt": "squall.api.spark",
    "KafkaSpout": "squall.api.kafka.spout",
    "StatefulBolt": "squall.api.stateful",
    "KeyValueState": "squall.api.state.keyvalue",
    "submit_topology": "squall.api.submitter",
    "build_package": "squall.core.package",
    "load_config": "squall.core.config.loading",
    "nimbus_client": "squall.core.nimbus_client",
    "LocalTopology": "squall.dev.local",
}

__all__ = sorted(_HOMES)  # noqa: PLE0605 (one list of the public names: _HOMES)

#: Old import paths the README once taught, each an alias of its module's home now, so users' code keeps
#: working; new code imports from ``squall``. (``worker.local``, outside this package, is an alias module.)
_ALIASES = {
    "squall.component": "squall.api.component",
    "squall.config": "squall.core.config",
    "squall.dsl": "squall.api.dsl",
    "squall.nimbus_client": "squall.core.nimbus_client",
    "squall.package": "squall.core.package",
    "squall.spark": "squall.api.spark",
    "squall.submitter": "squall.api.submitter",
    "squall.testing": "squall.api.testing",
    "squall.tuple": "squall.api.tuple",
}


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path (:data:`_ALIASES`) as the module it names: the same module object, not a copy."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(name, self) if name in _ALIASES else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        sys.modules[module.__name__] = importlib.import_module(_ALIASES[module.__name__])


sys.meta_path.insert(0, _AliasFinder())  # first: an old path is always the alias, whatever else is on sys.path


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'squall' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
