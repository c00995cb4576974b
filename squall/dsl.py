"""A typed, declarative way to wire a topology; ``build()`` gives the Thrift ``StormTopology`` and conf.

    t = Topology("wordcount")
    sentences = t.spout("sentences", RandomSentences, parallelism=2)
    split = t.bolt("split", SplitSentence, parallelism=4).shuffle(sentences)
    t.bolt("count", WordCount, parallelism=4).fields(split, "word")
    topology, conf = t.conf(**{"topology.workers": 2}).build()

Mistakes a cluster would refuse (unknown components or streams, fields a stream does not declare,
classes workers cannot import, arguments that are not JSON) raise :class:`TopologyError` here, where
the user still has their editor open.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from squall.component import DEFAULT_STREAM, Bolt, Component, Spout, Stream
from squall.thrift import storm

_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


class TopologyError(ValueError):
    """The topology as declared cannot run; the message says where."""


def _json(what: str, value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TopologyError(f"{what} must be JSON-serialisable (workers rebuild components from JSON): {exc}") from None


def _importable(cls: type) -> tuple[str, str]:
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        raise TopologyError(f"{cls.__qualname__} must be defined at the top level of an importable module "
                            "(not in __main__ or inside a function): workers import it by name")
    return cls.__module__, cls.__qualname__


@dataclass
class _Input:
    source: str
    stream: str
    grouping: Any


@dataclass
class Node:
    """A declared component; bolts gain their inputs through the grouping methods."""

    id: str
    kind: str  # "spout" | "bolt"
    obj: Any  # storm.ComponentObject
    streams: dict[str, Stream]
    parallelism: int
    conf: dict[str, Any]
    inputs: list[_Input] = field(default_factory=list)

    def _subscribe(self, source: "Node | str", stream: str, grouping: Any) -> "Node":
        if self.kind != "bolt":
            raise TopologyError(f"spout {self.id!r} cannot subscribe to streams; only bolts have inputs")
        self.inputs.append(_Input(source.id if isinstance(source, Node) else source, stream, grouping))
        return self

    def shuffle(self, source: "Node | str", stream: str = DEFAULT_STREAM) -> "Node":
        return self._subscribe(source, stream, storm.Grouping(shuffle=storm.NullStruct()))

    def fields(self, source: "Node | str", *names: str, stream: str = DEFAULT_STREAM) -> "Node":
        if not names:
            raise TopologyError(f"fields grouping of {self.id!r} needs at least one field (use global_ for none)")
        return self._subscribe(source, stream, storm.Grouping(fields=list(names)))

    def all(self, source: "Node | str", stream: str = DEFAULT_STREAM) -> "Node":
        return self._subscribe(source, stream, storm.Grouping(all=storm.NullStruct()))

    def global_(self, source: "Node | str", stream: str = DEFAULT_STREAM) -> "Node":
        return self._subscribe(source, stream, storm.Grouping(fields=[]))

    def none(self, source: "Node | str", stream: str = DEFAULT_STREAM) -> "Node":
        return self._subscribe(source, stream, storm.Grouping(none=storm.NullStruct()))

    def direct(self, source: "Node | str", stream: str = DEFAULT_STREAM) -> "Node":
        return self._subscribe(source, stream, storm.Grouping(direct=storm.NullStruct()))

    def local_or_shuffle(self, source: "Node | str", stream: str = DEFAULT_STREAM) -> "Node":
        return self._subscribe(source, stream, storm.Grouping(local_or_shuffle=storm.NullStruct()))

    def custom(self, source: "Node | str", grouper: type, *args: Any, stream: str = DEFAULT_STREAM) -> "Node":
        """A Python grouper class with ``prepare(fields, targets)`` and ``choose_tasks(values)``."""
        module, name = _importable(grouper)
        spec = _json(f"arguments of custom grouping {name}", {"module": module, "class": name, "args": list(args)})
        return self._subscribe(source, stream, storm.Grouping(custom_serialized=spec.encode()))


class Topology:
    def __init__(self, name: str) -> None:
        self.name = name
        self._nodes: dict[str, Node] = {}
        self._conf: dict[str, Any] = {}

    def spout(self, id: str, cls: type[Spout], *args: Any, parallelism: int = 1,
              conf: dict[str, Any] | None = None, **kwargs: Any) -> Node:
        return self._add(id, "spout", cls, Spout, args, kwargs, parallelism, conf)

    def bolt(self, id: str, cls: type[Bolt], *args: Any, parallelism: int = 1,
             conf: dict[str, Any] | None = None, **kwargs: Any) -> Node:
        return self._add(id, "bolt", cls, Bolt, args, kwargs, parallelism, conf)

    def shell_spout(self, id: str, command: str, script: str, outputs: list[str] | dict[str, Stream], *,
                    parallelism: int = 1, conf: dict[str, Any] | None = None) -> Node:
        """A Storm multilang spout: the worker runs ``command script``."""
        return self._shell(id, "spout", command, script, outputs, parallelism, conf)

    def shell_bolt(self, id: str, command: str, script: str, outputs: list[str] | dict[str, Stream], *,
                   parallelism: int = 1, conf: dict[str, Any] | None = None) -> Node:
        return self._shell(id, "bolt", command, script, outputs, parallelism, conf)

    def conf(self, **values: Any) -> "Topology":
        """Topology conf (``topology.workers``, ``topology.max.spout.pending``, …), merged over the cluster's."""
        self._conf.update(values)
        return self

    def _add(self, id: str, kind: str, cls: type, base: type, args: tuple, kwargs: dict, parallelism: int,
             conf: dict[str, Any] | None) -> Node:
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise TopologyError(f"{kind} {id!r}: {cls!r} is not a {base.__name__} subclass")
        module, name = _importable(cls)
        obj = storm.ComponentObject(python_object=storm.PythonComponent(
            module_name=module, class_name=name, args_json=_json(f"arguments of {kind} {id!r}", list(args)),
            kwargs_json=_json(f"keyword arguments of {kind} {id!r}", kwargs)))
        return self._register(Node(id, kind, obj, cls.output_streams(), parallelism, dict(conf or {})))

    def _shell(self, id: str, kind: str, command: str, script: str, outputs: Any, parallelism: int,
               conf: dict[str, Any] | None) -> Node:
        streams = type("Shell", (Component,), {"outputs": outputs}).output_streams()
        obj = storm.ComponentObject(shell=storm.ShellComponent(execution_command=command, script=script))
        return self._register(Node(id, kind, obj, streams, parallelism, dict(conf or {})))

    def _register(self, node: Node) -> Node:
        if not _ID.match(node.id):
            raise TopologyError(f"component id {node.id!r} is invalid: use 1 to 128 characters from A-Z a-z 0-9 . _ -")
        if node.id.startswith("__"):
            raise TopologyError(f"component id {node.id!r} is reserved: ids starting with '__' are Squall's")
        if node.id in self._nodes:
            raise TopologyError(f"duplicate component id {node.id!r}")
        if node.parallelism < 1:
            raise TopologyError(f"{node.kind} {node.id!r}: parallelism must be >= 1, got {node.parallelism}")
        for stream in node.streams:
            if stream.startswith("__"):
                raise TopologyError(f"{node.kind} {node.id!r}: stream id {stream!r} is reserved")
        self._nodes[node.id] = node
        return node

    def build(self) -> tuple[Any, dict[str, Any]]:
        """The Thrift topology (what ``submitTopology`` takes) and the topology conf."""
        if not any(n.kind == "spout" for n in self._nodes.values()):
            raise TopologyError(f"topology {self.name!r} has no spout")
        spouts, bolts = {}, {}
        for node in sorted(self._nodes.values(), key=lambda n: n.id):
            common = storm.ComponentCommon(
                inputs={storm.GlobalStreamId(componentId=i.source, streamId=i.stream): i.grouping
                        for i in (self._check_input(node, i) for i in node.inputs)},
                streams={name: storm.StreamInfo(output_fields=list(s.fields), direct=s.direct)
                         for name, s in node.streams.items()},
                parallelism_hint=node.parallelism,
                json_conf=_json(f"conf of {node.id!r}", node.conf) if node.conf else None)
            if node.kind == "spout":
                spouts[node.id] = storm.SpoutSpec(spout_object=node.obj, common=common)
            else:
                bolts[node.id] = storm.Bolt(bolt_object=node.obj, common=common)
        return storm.StormTopology(spouts=spouts, bolts=bolts, state_spouts={}), dict(self._conf)

    def _check_input(self, node: Node, i: _Input) -> _Input:
        source = self._nodes.get(i.source)
        where = f"bolt {node.id!r} subscribes to"
        if source is None:
            raise TopologyError(f"{where} unknown component {i.source!r}")
        stream = source.streams.get(i.stream)
        if stream is None:
            raise TopologyError(f"{where} stream {i.stream!r} which {i.source!r} does not declare "
                                f"(it declares {sorted(source.streams)})")
        if i.grouping.fields:
            missing = [f for f in i.grouping.fields if f not in stream.fields]
            if missing:
                raise TopologyError(f"{where} {i.source!r}:{i.stream!r} by fields {missing} which the stream "
                                    f"does not declare (it has {list(stream.fields)})")
        if (i.grouping.direct is not None) != stream.direct:
            raise TopologyError(f"{where} {i.source!r}:{i.stream!r} with "
                                + ("direct grouping, but the stream is not direct" if i.grouping.direct is not None
                                   else "a non-direct grouping, but the stream is direct: use .direct()"))
        return i
