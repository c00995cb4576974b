"""The topology DSL: declare spouts and bolts and how bolts subscribe; ``build()`` gives what nimbus takes.

    t = Topology("wordcount")
    sentences = t.spout("sentences", Sentences, parallelism=2)
    split = t.bolt("split", SplitSentence, parallelism=4).shuffle(sentences)
    t.bolt("count", WordCount, parallelism=4, conf={"topology.tick.tuple.freq.secs": 5}).fields(split, "word")
    t.conf({"topology.workers": 2})
    topology, conf = t.build()   # storm.StormTopology with python_object components, and the conf

A description only, separate from execution (as Bytewax's ``Dataflow``). Each mistake nimbus would
refuse raises :class:`TopologyError` at the call that makes it, naming the component, stream or
field, so the traceback points at the line to fix; ``build()`` adds the checks that need the whole
topology. Spouts get no subscription methods, so a spout with inputs cannot be written.

A custom grouping is ``Grouping.custom_serialized`` holding JSON (never pickle):
``{"args": [...], "class": "Name", "module": "pkg.mod"}``; the worker imports the class, calls
``cls(*args)``, then ``prepare(output_fields, target_tasks)`` if defined and
``choose_tasks(values) -> list[int]`` per tuple.
"""

from __future__ import annotations

import copy
import inspect
import json
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from squall.api.classcheck import is_grouping_class
from squall.api.component import Bolt, Component, Outputs, Spout, Stream, parse_outputs
from squall.api.stateful import StatefulBolt
from squall.api.windowing import (
    Count,
    Duration,
    WindowedBolt,
    WindowError,
    with_late_stream,
    with_tumbling_window,
    with_window,
)
from squall.core.config.validation import ConfigError, validate_conf
from squall.core.extras import require
from squall.core.names import id_problem
from squall.core.system_ids import DEFAULT_STREAM, RESERVED_PREFIX, STATEFUL_KEY
from squall.core.windowconf import LATE_TUPLE_STREAM, WINDOW_KEYS, window_of

__all__ = ["BoltRef", "ComponentRef", "SpoutRef", "Topology", "TopologyError"]

if TYPE_CHECKING:
    from squall.core.thrift import storm


def _storm() -> Any:
    """The Thrift contract's types, loaded on first use: importing the DSL (and ``squall``) does not parse the IDL."""
    from squall.core.thrift import storm

    return storm


class TopologyError(ValueError):
    """The topology as declared would be refused or could not run; the message says where and why, and it
    is raised by the call that makes the mistake, so the traceback points at the line to fix::

        t.bolt("count", WordCount).fields(split, "wrod")
        # TopologyError: bolt 'count' groups stream 'default' of 'split' by unknown fields ['wrod']
        #                (the stream declares ['word'])
    """


# ------------------------------------------------------------------------------------------------
# Declarations
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Subscription:
    source: str
    stream: str
    grouping: storm.Grouping


@dataclass(frozen=True)
class _Declared:
    """A component as declared: everything the Thrift spec needs, inputs aside."""

    kind: str  # "spout" | "bolt"
    obj: storm.ComponentObject
    streams: Mapping[str, Stream]
    parallelism: int
    conf: Mapping[str, Any]
    windowed: bool = False  # a WindowedBolt: needs a window, may take one


@dataclass(frozen=True)
class ComponentRef:
    """A declared component, as returned by the :class:`Topology` methods; a source for subscriptions::

    sentences = t.spout("sentences", Sentences)     # a SpoutRef
    t.bolt("split", Split).shuffle(sentences)       # subscribe to its default stream
    """

    topology: Topology = field(repr=False)
    id: str


@dataclass(frozen=True)
class SpoutRef(ComponentRef):
    """A declared spout: spouts emit, they never subscribe, so it has no grouping methods::

    sentences = t.spout("sentences", Sentences, parallelism=2)
    """


@dataclass(frozen=True)
class BoltRef(ComponentRef):
    """A declared bolt: each grouping method subscribes it to ``stream`` of ``source`` (Storm's
    ``InputDeclarer``) and returns it for chaining; one grouping per subscribed stream::

        t.bolt("join", Join, parallelism=4).fields(orders, "user").fields(users, "user")
        t.bolt("audit", Audit).all(control, stream="commands")
    """

    def shuffle(self, source: ComponentRef, *, stream: str = DEFAULT_STREAM) -> BoltRef:
        """Tuples spread evenly over this bolt's tasks (round robin over a shuffled order): stateless work."""
        return self._subscribe(source, stream, _storm().Grouping(shuffle=_storm().NullStruct()))

    def fields(self, source: ComponentRef, *names: str, stream: str = DEFAULT_STREAM) -> BoltRef:
        """Tuples with equal values of ``names`` go to the same task, the same in every worker: per-key state
        (counts, sessions). A very hot key loads one task; see :meth:`partial_key`."""
        if not names:
            raise TopologyError(
                f"bolt {self.id!r}: fields grouping on {source.id!r} names no fields "
                "(to send everything to one task, use global_)"
            )
        return self._subscribe(source, stream, _storm().Grouping(fields=list(names)))

    def partial_key(self, source: ComponentRef, *names: str, stream: str = DEFAULT_STREAM) -> BoltRef:
        """Storm's partialKeyGrouping: each key goes to one of two tasks, whichever the emitting task has
        sent fewer tuples so far, so a hot key loads two tasks instead of one. Per-key state must then be
        merged downstream (e.g. partial counts summed by a fields-grouped bolt)::

            partial = t.bolt("partial-count", Count, parallelism=4).partial_key(words, "word")
            t.bolt("total", Sum).fields(partial, "word")
        """
        if not names:
            raise TopologyError(f"bolt {self.id!r}: partial_key grouping on {source.id!r} names no fields")
        return self._subscribe(source, stream, _storm().Grouping(partial_key=list(names)))

    def all(self, source: ComponentRef, *, stream: str = DEFAULT_STREAM) -> BoltRef:
        """Every tuple goes to every task: broadcasts (config changes, cache invalidations)."""
        return self._subscribe(source, stream, _storm().Grouping(all=_storm().NullStruct()))

    def global_(self, source: ComponentRef, *, stream: str = DEFAULT_STREAM) -> BoltRef:
        """Every tuple goes to the task with the lowest id (Storm's empty fields list): a global total."""
        return self._subscribe(source, stream, _storm().Grouping(fields=[]))

    def none(self, source: ComponentRef, *, stream: str = DEFAULT_STREAM) -> BoltRef:
        """No preference: routed as shuffle."""
        return self._subscribe(source, stream, _storm().Grouping(none=_storm().NullStruct()))

    def direct(self, source: ComponentRef, *, stream: str = DEFAULT_STREAM) -> BoltRef:
        """The emitter names the task (``emit(..., direct_task=t)``); the stream must be declared direct."""
        return self._subscribe(source, stream, _storm().Grouping(direct=_storm().NullStruct()))

    def local_or_shuffle(self, source: ComponentRef, *, stream: str = DEFAULT_STREAM) -> BoltRef:
        """Shuffle over this bolt's tasks in the emitting worker when it has any, else over all of them."""
        return self._subscribe(source, stream, _storm().Grouping(local_or_shuffle=_storm().NullStruct()))

    def custom(self, source: ComponentRef, grouper: type, *args: Any, stream: str = DEFAULT_STREAM) -> BoltRef:
        """A Python class ``grouper(*args)`` with ``choose_tasks(values) -> list[int]`` (and optionally
        ``prepare(output_fields, target_tasks)``) picks the tasks; ``args`` must be JSON."""
        label = f"bolt {self.id!r}: custom grouping {getattr(grouper, '__qualname__', grouper)!r}"
        if not is_grouping_class(grouper):
            raise TopologyError(f"{label} must be a class with a choose_tasks(values) method")
        module, name = _import_path(label, grouper)
        spec = _json(f"{label} arguments", {"module": module, "class": name, "args": list(args)})
        _check_args(label, grouper, args, {})
        return self._subscribe(source, stream, _storm().Grouping(custom_serialized=spec.encode()))

    def with_window(
        self, length: Count | Duration, slide: Count | Duration | None = None, **event_time: Any
    ) -> BoltRef:
        """Set a windowed bolt's window: the keys :meth:`WindowedBolt.with_window` writes (``timestamp_field``,
        ``lag``, ``watermark_interval``, ``late_stream`` too), over the class's::

        t.bolt("avg", Average).shuffle(readings).with_window(Duration.seconds(10), Duration.seconds(1))
        """
        self.topology._set_window(self.id, with_window(length, slide, **event_time))
        return self

    def with_tumbling_window(self, length: Count | Duration, **event_time: Any) -> BoltRef:
        """Set a windowed bolt's window to tumble: slide = length (:meth:`WindowedBolt.with_tumbling_window`)::

        t.bolt("per-minute", Totals).fields(sales, "shop").with_tumbling_window(Duration.minutes(1))
        """
        self.topology._set_window(self.id, with_tumbling_window(length, **event_time))
        return self

    def _subscribe(self, source: ComponentRef, stream: str, grouping: storm.Grouping) -> BoltRef:
        self.topology._subscribe(self.id, source, stream, grouping)
        return self


# ------------------------------------------------------------------------------------------------
# The topology
# ------------------------------------------------------------------------------------------------


class Topology:
    """A topology being declared (Storm's TopologyBuilder); ``build()`` turns it into a ``storm.StormTopology``
    and its conf, which ``storm jar``, ``storm local`` and :func:`squall.api.submitter.submit_topology` take::

        t = Topology("wordcount", conf={"topology.workers": 2})
        sentences = t.spout("sentences", Sentences, parallelism=2)
        split = t.bolt("split", Split, parallelism=4).shuffle(sentences)
        t.bolt("count", Count, parallelism=4, conf={"topology.tick.tuple.freq.secs": 5}).fields(split, "word")
        topology, conf = t.build()
    """

    def __init__(self, name: str, conf: Mapping[str, Any] | None = None) -> None:
        if problem := _name_problem(name):
            raise TopologyError(f"topology name {name!r} is invalid: {problem}")
        self.name = name
        self._components: dict[str, _Declared] = {}
        self._inputs: dict[str, list[_Subscription]] = {}
        self._conf: dict[str, Any] = {}
        self.conf(conf or {})

    def conf(self, values: Mapping[str, Any] | None = None, /, **more: Any) -> Topology:
        """Add topology conf (``topology.workers``, ``topology.max.spout.pending``...); later values win and
        ``storm jar -c key=value`` wins over all. Known keys are type-checked here::

            t.conf({"topology.message.timeout.secs": 60}, **{"topology.max.spout.pending": 1000})
        """
        merged = {**self._conf, **(values or {}), **more}
        self._conf = _check_conf(f"topology {self.name!r} conf", merged)
        return self

    def spout(
        self,
        id: str,
        cls: type[Spout],
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        parallelism: int = 1,
        conf: Mapping[str, Any] | None = None,
        outputs: Outputs | None = None,
    ) -> SpoutRef:
        """Declare a spout the worker builds as ``cls(*args, **kwargs)`` (JSON arguments) with ``parallelism``
        tasks; ``outputs`` overrides ``cls.outputs``, ``conf`` adds to (and wins over) ``cls.component_conf``::

            t.spout("lines", FileSpout, args=["/data/in"], parallelism=2, conf={"topology.max.spout.pending": 100})
        """
        obj = _python(f"spout {id!r}", cls, Spout, args, kwargs or {})
        self._declare(
            id,
            "spout",
            obj,
            cls.outputs if outputs is None else outputs,
            parallelism,
            {**cls.component_conf, **(conf or {})},
        )
        return SpoutRef(self, id)

    def bolt(
        self,
        id: str,
        cls: type[Bolt],
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        parallelism: int = 1,
        conf: Mapping[str, Any] | None = None,
        outputs: Outputs | None = None,
    ) -> BoltRef:
        """Declare a bolt the worker builds as ``cls(*args, **kwargs)`` (JSON arguments) with ``parallelism``
        tasks; ``conf`` adds to (and wins over) ``cls.component_conf``. Subscribe it with the returned ref::

            t.bolt("count", Count, parallelism=4, conf={"topology.tick.tuple.freq.secs": 5}).fields(split, "word")

        A :class:`~squall.api.stateful.StatefulBolt` is marked stateful in its conf (``squall.stateful``), which
        gives the topology its checkpoint spout."""
        if isinstance(cls, type) and issubclass(cls, StatefulBolt) and issubclass(cls, WindowedBolt):
            raise TopologyError(
                f"bolt {id!r}: {cls.__qualname__} is both a StatefulBolt and a WindowedBolt; Squall does not run "
                "stateful windowed bolts (Storm's IStatefulWindowedBolt): keep the window and the state in two bolts"
            )
        obj = _python(f"bolt {id!r}", cls, Bolt, args, kwargs or {})
        component_conf = {**cls.component_conf, **(conf or {})}
        stateful = issubclass(cls, StatefulBolt)
        if component_conf.get(STATEFUL_KEY) and not stateful:
            raise TopologyError(
                f"bolt {id!r}: {cls.__qualname__} is not a StatefulBolt, so its conf cannot set {STATEFUL_KEY}"
            )
        self._declare(
            id,
            "bolt",
            obj,
            cls.outputs if outputs is None else outputs,
            parallelism,
            {**component_conf, STATEFUL_KEY: True} if stateful else component_conf,
            windowed=issubclass(cls, WindowedBolt),
        )
        return BoltRef(self, id)

    def shell_spout(
        self,
        id: str,
        *,
        command: str,
        script: str,
        outputs: Outputs,
        parallelism: int = 1,
        conf: Mapping[str, Any] | None = None,
    ) -> SpoutRef:
        """Declare a Storm multilang spout: the worker runs ``command script`` and speaks JSON to it."""
        self._declare(id, "spout", _shell(f"spout {id!r}", command, script), outputs, parallelism, conf)
        return SpoutRef(self, id)

    def shell_bolt(
        self,
        id: str,
        *,
        command: str,
        script: str,
        outputs: Outputs,
        parallelism: int = 1,
        conf: Mapping[str, Any] | None = None,
    ) -> BoltRef:
        """Declare a Storm multilang bolt: the worker runs ``command script`` and speaks JSON to it."""
        self._declare(id, "bolt", _shell(f"bolt {id!r}", command, script), outputs, parallelism, conf)
        return BoltRef(self, id)

    def build(self) -> tuple[storm.StormTopology, dict[str, Any]]:
        """The Thrift topology for ``submitTopology`` (maps in id order) and the topology conf, both fresh
        copies; raises :class:`TopologyError` for what needs the whole topology (no spout, a bolt with no
        input)."""
        kinds = {cid: declared.kind for cid, declared in self._components.items()}
        if "spout" not in kinds.values():
            raise TopologyError(f"topology {self.name!r} has no spout: at least one spout is needed to emit tuples")
        idle = sorted(cid for cid, kind in kinds.items() if kind == "bolt" and not self._inputs[cid])
        if idle:
            raise TopologyError(
                f"bolt {idle[0]!r} subscribes to nothing: give it an input with a grouping method, e.g. .shuffle(spout)"
            )
        unset = sorted(cid for cid, d in self._components.items() if d.windowed and window_of(d.conf) is None)
        if unset:
            raise TopologyError(
                f"windowed bolt {unset[0]!r} has no window: give it one with .with_window(...) or "
                ".with_tumbling_window(...), or on its class (component_conf = WindowedBolt.with_window(...))"
            )
        for key, kind in (("topology.spout.parallelism", "spout"), ("topology.bolt.parallelism", "bolt")):
            unknown = sorted(set(self._conf.get(key) or {}) - {c for c, k in kinds.items() if k == kind})
            if unknown:
                raise TopologyError(f"{key} names {unknown[0]!r}, which is not a {kind} of this topology")
        spouts, bolts = {}, {}
        for cid in sorted(self._components):
            declared = self._components[cid]
            common = _common(declared, self._inputs.get(cid, ()))
            if declared.kind == "spout":
                spouts[cid] = _storm().SpoutSpec(spout_object=declared.obj, common=common)
            else:
                bolts[cid] = _storm().Bolt(bolt_object=declared.obj, common=common)
        topology = _storm().StormTopology(spouts=spouts, bolts=bolts, state_spouts={})
        return copy.deepcopy(topology), copy.deepcopy(self._conf)

    def _declare(
        self,
        cid: str,
        kind: str,
        obj: storm.ComponentObject,
        outputs: Outputs,
        parallelism: int,
        conf: Mapping[str, Any] | None,
        *,
        windowed: bool = False,
    ) -> None:
        label = f"{kind} {cid!r}"
        _check_id(f"{kind} id {cid!r}", cid)
        if cid in self._components:
            raise TopologyError(
                f"{label}: a {self._components[cid].kind} with that id is already declared; "
                "ids must be unique across spouts and bolts"
            )
        if not (isinstance(parallelism, int) and not isinstance(parallelism, bool) and parallelism >= 1):
            raise TopologyError(f"{label}: parallelism must be an int >= 1, got {parallelism!r}")
        try:
            streams = parse_outputs(outputs)
        except (TypeError, ValueError) as exc:
            raise TopologyError(f"{label} outputs: {exc}") from None
        for stream in streams:
            _check_id(f"stream id {stream!r} of {label}", stream)
        component_conf = _check_conf(f"{label} conf", conf or {})
        if kind == "bolt":
            streams = _with_late_stream(label, streams, component_conf)
        self._components[cid] = _Declared(kind, obj, streams, parallelism, component_conf, windowed)
        if kind == "bolt":
            self._inputs[cid] = []

    def _set_window(self, cid: str, window: Mapping[str, Any]) -> None:
        """A bolt's window keys replaced by ``window``'s (a window is set whole), its late stream declared."""
        declared = self._components[cid]
        if not declared.windowed:
            raise TopologyError(f"bolt {cid!r} is not a WindowedBolt: only windowed bolts take a window")
        conf = {k: v for k, v in declared.conf.items() if k not in WINDOW_KEYS}
        conf = _check_conf(f"bolt {cid!r} conf", {**conf, **window})
        streams = _with_late_stream(f"bolt {cid!r}", declared.streams, conf)
        self._components[cid] = replace(declared, conf=conf, streams=streams)

    def _subscribe(self, cid: str, source: ComponentRef, stream: str, grouping: storm.Grouping) -> None:
        label = f"bolt {cid!r}"
        if not isinstance(source, ComponentRef) or source.topology is not self:
            raise TopologyError(
                f"{label} subscribes to {source!r}: pass what this topology's spout() or bolt() returned"
            )
        streams = self._components[source.id].streams
        where = f"stream {stream!r} of {source.id!r}"
        if stream not in streams:
            raise TopologyError(
                f"{label} subscribes to {where}, which {source.id!r} does not declare "
                f"(it declares: {', '.join(map(repr, streams)) or 'no streams'})"
            )
        info = streams[stream]
        unknown = [name for name in grouping.fields or grouping.partial_key or () if name not in info.fields]
        if unknown:
            raise TopologyError(
                f"{label} groups {where} by unknown fields {unknown} (the stream declares {list(info.fields)})"
            )
        if grouping.direct is not None and not info.direct:
            raise TopologyError(
                f"{label} uses direct grouping on {where}, which is not declared direct "
                "(declare it as Stream([...], direct=True))"
            )
        if grouping.direct is None and info.direct:
            raise TopologyError(f"{label} subscribes to {where}, which is direct: use .direct()")
        if any((s.source, s.stream) == (source.id, stream) for s in self._inputs[cid]):
            raise TopologyError(f"{label} already subscribes to {where}: one grouping per stream")
        self._inputs[cid].append(_Subscription(source.id, stream, grouping))


# ------------------------------------------------------------------------------------------------
# Checks and Thrift
# ------------------------------------------------------------------------------------------------


def _python(
    label: str, cls: Any, base: type[Component], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> storm.ComponentObject:
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TopologyError(f"{label}: {cls!r} is not a {base.__name__} subclass")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(getattr(cls, "__abstractmethods__")))  # noqa: B009 (ABCs only: not typed)
        raise TopologyError(f"{label}: {cls.__qualname__} does not implement {missing}")
    if cls.needs_extra is not None:
        require(cls.needs_extra, f"{label} ({cls.__qualname__})")
    module, name = _import_path(label, cls)
    python = _storm().PythonComponent(
        module_name=module,
        class_name=name,
        args_json=_json(f"{label} args", list(args)) if args else None,
        kwargs_json=_json(f"{label} kwargs", dict(kwargs)) if kwargs else None,
    )
    _check_args(label, cls, args, kwargs)  # once they are JSON, as the worker gets them
    return _storm().ComponentObject(python_object=python)


def _shell(label: str, command: str, script: str) -> storm.ComponentObject:
    if not (isinstance(command, str) and command):
        raise TopologyError(f"{label}: the shell command must be a non-empty string, got {command!r}")
    if not isinstance(script, str):
        raise TopologyError(f"{label}: the shell script must be a string, got {script!r}")
    return _storm().ComponentObject(shell=_storm().ShellComponent(execution_command=command, script=script))


def _import_path(label: str, cls: type) -> tuple[str, str]:
    """(module, class name) a worker can import ``cls`` by, or a TopologyError saying why it cannot."""
    module, name = cls.__module__, cls.__qualname__
    if module == "__main__":
        raise TopologyError(
            f"{label}: {name} is defined in __main__ (the script being run), which workers "
            "cannot import: move it to a module and import it from there"
        )
    if not name.isidentifier():
        raise TopologyError(
            f"{label}: {name} is not defined at the top level of its module (workers import "
            "module.Name): move it out of the function or class around it"
        )
    if getattr(sys.modules.get(module), name, None) is not cls:
        raise TopologyError(
            f"{label}: {module}.{name} does not name this class (was it renamed or "
            "redefined?): workers import it by that name"
        )
    return module, name


def _check_args(label: str, cls: type, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """The worker's ``cls(*args, **kwargs)`` would fail: too many or few arguments, or one its annotation
    refuses (:func:`mistyped_argument`), found here rather than on every worker."""
    try:
        inspect.signature(cls).bind(*args, **kwargs)
    except TypeError as exc:
        raise TopologyError(f"{label}: {cls.__qualname__} cannot be built with these arguments: {exc}") from None
    if problem := mistyped_argument(cls, args, kwargs):
        raise TopologyError(f"{label}: {cls.__qualname__}'s {problem}")


#: The annotations :func:`mistyped_argument` judges: what JSON arguments can be. Anything else is left to the code.
_SCALARS: dict[Any, Callable[[Any], bool]] = {
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    bool: lambda v: isinstance(v, bool),
    str: lambda v: isinstance(v, str),
    type(None): lambda v: v is None,
}


def mistyped_argument(func: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """``"argument rounds must be int | None, got 'abc'"`` when ``func(*args, **kwargs)`` (a function, or a
    class and its ``__init__``) passes a value its annotation refuses, else None. Only ``int``, ``float``,
    ``bool``, ``str``, ``None`` and unions of them are judged (the types JSON arguments come as); other
    annotations, and hints that do not resolve, pass: the call would fail on the workers, so it fails here.

        mistyped_argument(topology, ["abc"], {})   # "argument rounds must be int | None, got 'abc'"
    """
    try:
        hints = typing.get_type_hints(func.__init__ if isinstance(func, type) else func)  # type: ignore[misc]  # a class is called as its __init__
        signature = inspect.signature(func)
        bound = signature.bind(*args, **kwargs)
    except Exception:  # hints naming what only a type checker imports, or arguments the call itself refuses
        return None
    for name, value in bound.arguments.items():
        variadic = signature.parameters[name].kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        hint = None if variadic else hints.get(name)
        options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        if hint is None or not all(o in _SCALARS for o in options) or any(_SCALARS[o](value) for o in options):
            continue
        expected = " | ".join("None" if o is type(None) else o.__name__ for o in options)
        return f"argument {name} must be {expected}, got {value!r}"
    return None


def _json(what: str, value: Any) -> str:
    """Canonical JSON (sorted keys, no NaN): the same declaration always builds the same bytes."""
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TopologyError(f"{what} must be JSON (workers rebuild them from the topology): {exc}") from None


def _check_conf(what: str, conf: Mapping[str, Any]) -> dict[str, Any]:
    """A detached JSON copy of ``conf``, once its keys are strings and known keys have their types."""
    if not isinstance(conf, Mapping):
        raise TopologyError(f"{what} must be a mapping, got {type(conf).__name__}")
    detached = json.loads(_json(what, dict(conf)))
    try:
        validate_conf(conf, what)
    except ConfigError as exc:
        raise TopologyError("; ".join(exc.problems)) from None
    return detached


def _with_late_stream(label: str, streams: Mapping[str, Stream], conf: Mapping[str, Any]) -> Mapping[str, Stream]:
    late = conf.get(LATE_TUPLE_STREAM)
    if late is not None:
        _check_id(f"late tuple stream id {late!r} of {label}", late)
    try:
        return with_late_stream(streams, conf)
    except WindowError as exc:
        raise TopologyError(f"{label}: {exc}") from None


def _check_id(what: str, ident: str) -> None:
    if problem := id_problem(ident):
        raise TopologyError(f"{what} is invalid: {problem}")
    if ident.startswith(RESERVED_PREFIX):
        raise TopologyError(
            f'{what} is reserved: ids starting with "__" belong to Squall\'s system components and streams'
        )


def _name_problem(name: Any) -> str | None:
    if problem := id_problem(name):
        return problem
    if name.isdecimal():
        return "it is all digits"
    if name.lower() == "null" or name in (".", ".."):
        return "it is reserved"
    return None


def _common(declared: _Declared, inputs: Sequence[_Subscription]) -> storm.ComponentCommon:
    return _storm().ComponentCommon(
        inputs={
            _storm().GlobalStreamId(componentId=s.source, streamId=s.stream): s.grouping
            for s in sorted(inputs, key=lambda s: (s.source, s.stream))
        },
        streams={
            sid: _storm().StreamInfo(output_fields=list(info.fields), direct=info.direct)
            for sid, info in sorted(declared.streams.items())
        },
        parallelism_hint=declared.parallelism,
        json_conf=_json("conf", declared.conf),
    )
